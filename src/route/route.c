/*
 * The router: per call signature, the route and depth with the least
 * predicted time on the comm's topology. Candidates are built as real plans
 * and run through the link-level simulator, so a route is chosen from the
 * same numbers relaycc-sim prints, never from byte thresholds tuned for one
 * machine (the seed's thresholds jumped 2x across one doubling once
 * pipelining moved the curves; a model cannot go stale that way).
 *
 * Direct is the incumbent: another route must be predicted strictly faster,
 * so where the relay does not pay (NVSwitch, A = 2) relaycc runs direct and
 * is never predicted slower than it.
 *
 * On a transport with native collectives (NCCL), the library's own fused
 * collective on the actives is a candidate too, priced by the baseline model
 * (which IS the model of that collective), and it is the incumbent above
 * all: a send/recv route replaces it only when predicted faster by more than
 * the topology's model error. Measured on 2 x H200 (graph replay): NCCL's
 * all-reduce and reduce-scatter beat the direct plan (a group plus a reduce
 * kernel, one launch more: 0.65-0.90x below 16 MB), while the direct
 * all-gather beat NCCL's by 1.10-1.15x from 1 MB (p2p_graph.log).
 *
 * Pure function of (key, topology): every rank computes the same answer.
 * Decisions are cached per (key, topology) because a candidate's simulation
 * costs up to a few ms for deep plans.
 */
#include "route/route.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "route/depth.h"
#include "sim/sim.h"
#include "topo/topo.h"

#define ROUTE_CACHE_ENTRIES 256

/* An entry answers a key both ways: [0] for a call made directly
 * (RELAY_ROUTE_CAP_PERCALL: plans pay the host's per-step cost), [1] for one
 * captured into a graph, so the caller that needs both (api.c: it asks the
 * stream only when they differ) hashes and locks once. */
typedef struct {
  uint64_t hash; /* of the key and the topology's content */
  /* The key itself, compared on a hit: a 64-bit hash collision on one rank
   * only would route that rank differently from its peers (a hang), so the
   * hash only finds the slot. The topology is compared by its content hash
   * (comms agree on it at init). */
  int head[7];           /* coll, nranks, nGroups, nActive, dtype, op, caps without PERCALL */
  unsigned char* arrays; /* ranks and counts (planKeyArraysDup) */
  int route[2], depth[2];
  int valid;
} routeEntry;

static void keyHead(const planKey* k, int caps, int head[7]) {
  head[0] = (int)k->coll, head[1] = k->nranks, head[2] = k->nGroups, head[3] = k->nActive;
  head[4] = (int)k->dtype, head[5] = (int)k->op, head[6] = caps & ~RELAY_ROUTE_CAP_PERCALL;
}

static routeEntry gCache[ROUTE_CACHE_ENTRIES];
static pthread_mutex_t gCacheLock = PTHREAD_MUTEX_INITIALIZER;

/* caps (what the transport can run) is in head: it changes the answer. */
static uint64_t keyHash(const int head[7], const planKey* k, const struct relayTopo* t) {
  uint64_t h = planKeyArraysHash(relayHash64(RELAY_HASH_SEED, head, 7 * sizeof(int)), k);
  /* The topology by content, not address: a comm's topology is freed with it
   * and a later one may reuse the address with other figures. Its part of
   * the hash (a few us: relayTopoHash prints it) is memoized per thread for
   * the last topology seen, valid while no topology has been created or freed
   * since (generation); a topology changed in place must be re-created. */
  if (t) {
    static _Thread_local const struct relayTopo* memoTopo;
    static _Thread_local uint64_t memoGen, memoHash;
    uint64_t gen = relayTopoGeneration();
    if (memoTopo != t || memoGen != gen) {
      /* relayTopoHash covers every figure of the model (its text form), so
       * two topologies that differ anywhere never share a cached route. */
      memoTopo = t;
      memoGen = gen;
      memoHash = relayTopoHash(t);
    }
    h = relayHash64(h, &memoHash, sizeof memoHash);
  }
  return h;
}

/* Predicted seconds of key under route/depth, or a negative value when the
 * route cannot serve it. */
static double predict(const planKey* key, const struct relayTopo* topo, int caps, int route, int depth) {
  planKey k = *key;
  k.route = route;
  k.depth = depth;
  relayPlan* p = NULL;
  if (relayPlanBuild(&k, &p) != relaySuccess || !p) return -1;
  /* A builder that ignores depth returns the depth-1 plan: not a candidate. */
  if (depth > 1 && p->depth != depth) {
    relayPlanFree(p);
    return -1;
  }
  relaySimResult r;
  memset(&r, 0, sizeof r);
  double t = relaySimRun(p, topo, &r) == relaySuccess ? r.totalS : -1;
  /* A call outside a graph enqueues each step from the host: the one-shot
   * is one kernel like the native collective, a plan's steps cost more. */
  if (t >= 0 && (caps & RELAY_ROUTE_CAP_PERCALL) && route != relayRouteOneShot && route != relayRouteBw && topo)
    t += topo->hostStepS * r.boundaries;
  relaySimResultFree(&r);
  relayPlanFree(p);
  return t;
}

/* The router prices the one-shot for every layout collective: all-gather
 * and all-to-all move the same bytes as all-reduce / reduce-scatter without
 * the reduce (contributions side by side), and on 2 x H200 measured
 * 1.26-1.60x (all-gather) and 1.25-1.90x (all-to-all) of NCCL in graph
 * replay from 4 KB to 1 MiB, 1.37-1.57x per call
 * (docs/perf/2026-11-30-h200x2.md, run 6). The gate is the plan builder's
 * (relayOneShotMaxBytes, read once per process: the route cache key does
 * not carry it), on the per-rank input as the seed's 1 MiB was. */

static int oneShotEligible(const planKey* k, int caps) {
  if (k->nGroups != 1 || !(caps & RELAY_ROUTE_CAP_ONESHOT)) return 0;
  size_t es = relayTypeSize(k->dtype);
  size_t bytes = k->counts[0] * es * (relayCollSendsBlocks(k->coll) ? (size_t)k->nActive : 1); /* per-rank input */
  return (unsigned)k->coll < RELAY_NUM_COLLS && bytes <= relayOneShotMaxBytes();
}

/* The native candidate: the library's collective on each group's actives,
 * as the baseline model prices it; negative when it cannot serve the key. */
static double predictNative(const planKey* key, const struct relayTopo* topo) {
  if ((unsigned)key->coll >= RELAY_NUM_COLLS) return -1; /* rooted: no native form */
  relayBaselineResult b;
  if (relayBaselineRun(key, topo, &b) != relaySuccess) return -1;
  return b.totalS;
}

/* Native stays unless the send/recv route's prediction `best` beats it by
 * more than the model's error: where the two are within what the model can
 * tell apart, the user gets exactly the NCCL they would have had. */
static int nativeKeeps(const planKey* key, const struct relayTopo* topo, double best) {
  double tn = predictNative(key, topo);
  if (tn < 0 || best < 0) return best < 0; /* what cannot be priced does not unseat native */
  double margin = topo->modelErr > 0 ? topo->modelErr : RELAY_ROUTE_UNCALIBRATED_MARGIN;
  return best * (1 + margin) >= tn;
}

/* The best of the send/recv routes (direct, relay at each depth, one-shot). */
static double chooseSendRecv(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth) {
  double best = predict(key, topo, caps, relayRouteDirect, 1);
  if (best < 0) return best;
  /* Relay candidates: depth 1 (the two-group form) and the depth model's
   * depth (route/depth.c), instead of simulating every depth. The model's
   * stage price was tuned on measured depth choices (768 KiB on mi350x),
   * while the simulator prices every step at the two-group boundary (25 us,
   * 1.23 MiB of link time), which over-prices a pipeline stage: it would
   * keep 2-active calls at depth 4 at 256 MB where the seed measured depth 8
   * faster. The simulator still decides between the two and direct, since it
   * knows what the closed form leaves out (helper reduce launches, the call's
   * fixed cost, the direct route); and two simulations instead of four halve
   * the router's cost on the deepest, most expensive plans. */
  int depths[2] = {1, relayDepthChoose(key, topo)};
  for (size_t i = 0; i < (depths[1] > 1 ? 2u : 1u); i++) {
    double t = predict(key, topo, caps, relayRouteRelay, depths[i]);
    if (t >= 0 && t < best) {
      best = t;
      *route = relayRouteRelay;
      *depth = depths[i];
    }
  }
  if (oneShotEligible(key, caps)) {
    double t = predict(key, topo, caps, relayRouteOneShot, 1);
    if (t >= 0 && t < best) {
      best = t;
      *route = relayRouteOneShot;
      *depth = 1;
    }
  }
  /* The bandwidth route: its builder says which keys it serves (nGroups ==
   * 1, every layout collective, any count), the simulator prices its tiles
   * (sim.c bwSeconds), so where it wins is the model's answer, continuous
   * with the one-shot's (one tile costs the one-shot plus one flag hop). */
  if ((caps & RELAY_ROUTE_CAP_BW) && key->nGroups == 1) {
    double t = predict(key, topo, caps, relayRouteBw, 1);
    if (t >= 0 && t < best) {
      best = t;
      *route = relayRouteBw;
      *depth = 1;
    }
  }
  return best;
}

static void choose(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth) {
  int native = (caps & RELAY_ROUTE_CAP_NATIVE) && (unsigned)key->coll < RELAY_NUM_COLLS;
  *route = relayRouteDirect;
  *depth = 1;
  if (!topo) {
    /* No model of this node: the one-shot below its gate (one launch instead
     * of a group plus a reduce), else the library's own collective where the
     * transport has one, else direct. */
    if (native) *route = relayRouteNative;
    if (oneShotEligible(key, caps)) {
      planKey k = *key;
      k.route = relayRouteOneShot;
      k.depth = 1;
      relayPlan* p = NULL;
      if (relayPlanBuild(&k, &p) == relaySuccess && p) *route = relayRouteOneShot;
      relayPlanFree(p);
    }
    return;
  }
  double best = chooseSendRecv(key, topo, caps, route, depth);
  if (native && nativeKeeps(key, topo, best)) {
    *route = relayRouteNative;
    *depth = 1;
  }
}

void relayRouteChoosePair(const planKey* key, const struct relayTopo* topo, int caps, int route[2], int depth[2]) {
  int head[7];
  keyHead(key, caps, head);
  uint64_t h = keyHash(head, key, topo);
  routeEntry* e = &gCache[h % ROUTE_CACHE_ENTRIES];
  pthread_mutex_lock(&gCacheLock);
  /* Equal heads fix the arrays' lengths. */
  int hit = e->valid && e->hash == h && !memcmp(e->head, head, sizeof head) && planKeyArraysEqual(e->arrays, key);
  if (hit) {
    memcpy(route, e->route, sizeof e->route);
    memcpy(depth, e->depth, sizeof e->depth);
  }
  pthread_mutex_unlock(&gCacheLock);
  if (hit) return;
  const int graphCaps = head[6];
  choose(key, topo, graphCaps | RELAY_ROUTE_CAP_PERCALL, &route[0], &depth[0]);
  if (topo && topo->hostStepS > 0) {
    choose(key, topo, graphCaps, &route[1], &depth[1]);
  } else { /* no per-step host cost modelled: both answers are one */
    route[1] = route[0];
    depth[1] = depth[0];
  }
  unsigned char* arrays = planKeyArraysDup(key);
  if (!arrays) return; /* not cached: the next call chooses again */
  pthread_mutex_lock(&gCacheLock);
  free(e->arrays);
  memcpy(e->head, head, sizeof head);
  e->arrays = arrays;
  e->valid = 1;
  e->hash = h;
  memcpy(e->route, route, sizeof e->route);
  memcpy(e->depth, depth, sizeof e->depth);
  pthread_mutex_unlock(&gCacheLock);
}

void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth) {
  int r[2], d[2], g = !(caps & RELAY_ROUTE_CAP_PERCALL);
  relayRouteChoosePair(key, topo, caps, r, d);
  *route = r[g];
  *depth = d[g];
}
