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
 * The candidates are the rows of the table of routes (route/table.c) that
 * the transport can run: a new row is priced here without code of its own.
 *
 * Pure function of (key, topology): every rank computes the same answer.
 * Decisions are cached per (key, topology) because a candidate's simulation
 * costs up to a few ms for deep plans. Each candidate's plan is built once
 * and priced both ways (a call made directly, a captured one); the winners'
 * plans go to the caller, which caches them (core: built once, cached once).
 */
#include "route/route.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "route/depth.h"
#include "route/table.h"
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
  int32_t head[PLAN_KEY_WORDS]; /* keyHead */
  unsigned char* arrays;        /* ranks and counts (planKeyArraysDup) */
  relayRouteList list[2];
  int valid;
} routeEntry;

/* The key's head (planKeyHead) with caps where the route goes: the router's answer is for any route and
 * depth, and caps (what the transport can run) changes it. */
static void keyHead(const planKey* k, int caps, int32_t head[PLAN_KEY_WORDS]) {
  planKeyHead(k, head);
  head[PLAN_KEY_W_ROUTE] = caps & ~RELAY_ROUTE_CAP_PERCALL;
  head[PLAN_KEY_W_DEPTH] = 0;
}

static routeEntry gCache[ROUTE_CACHE_ENTRIES];
static pthread_mutex_t gCacheLock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t keyHash(const int32_t head[PLAN_KEY_WORDS], const planKey* k, const struct relayTopo* t) {
  uint64_t h = planKeyHash(head, k);
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

/* A row the transport can run (caps) and the router prices for key. */
static int rowUsable(const relayRouteRow* row, const planKey* key, int caps) {
  return row && !(row->caps & ~(unsigned)caps) && relayRouteRowServes(row, key->coll) &&
         (!row->priced || row->priced(key, caps));
}

/* The transport's own collective where caps has it and it serves key (a row
 * without a builder: native), else NULL: the incumbent above all. */
static const relayRouteRow* incumbentRow(const planKey* key, int caps) {
  for (int r = 0; r < relayNumRoutes; r++) {
    const relayRouteRow* row = relayRouteRowOf(r);
    if (row && !row->build && rowUsable(row, key, caps)) return row;
  }
  return NULL;
}

/* The plans one pricing built, freed at its end but for the winners it hands on: direct, then at most two
 * depths of each other row. */
typedef struct {
  relayPlan* plan[1 + 2 * relayNumRoutes];
  int n;
} builtPlans;

/* Key's plan under a plan row at depth, built once and priced both ways: t[0] for a call made directly
 * (each step enqueued from the host pays topo->hostStepS; a one-launch route, like the native collective,
 * is one kernel), t[1] for one captured into a graph. NULL when the route cannot serve the key; else the
 * plan, which built owns. */
static relayPlan* price(const planKey* key, const struct relayTopo* topo, const relayRouteRow* row, int depth,
                        double t[2], builtPlans* built) {
  planKey k = *key;
  k.route = row->route;
  k.depth = depth;
  relayPlan* p = NULL;
  if (relayPlanBuild(&k, &p) != relaySuccess || !p) return NULL;
  /* A builder that ignores depth returns the depth-1 plan: not a candidate. */
  relaySimResult r;
  memset(&r, 0, sizeof r);
  if ((depth > 1 && p->depth != depth) || relaySimRun(p, topo, &r) != relaySuccess) {
    relaySimResultFree(&r);
    relayPlanFree(p);
    return NULL;
  }
  t[1] = r.totalS;
  t[0] = t[1] + (row->flags & RELAY_ROW_ONE_LAUNCH ? 0 : topo->hostStepS * r.boundaries);
  relaySimResultFree(&r);
  built->plan[built->n++] = p;
  return p;
}

/* The native candidate: the library's collective on each group's actives,
 * as the baseline model prices it; negative when it cannot serve the key. */
static double predictNative(const planKey* key, const struct relayTopo* topo) {
  if (!relayRouteRowServes(relayRouteRowOf(relayRouteNative), key->coll)) return -1; /* no native form */
  if (planKeyMultiNode(key) && topo->nNodes > 1) {
    /* Across nodes the library's collective is priced by the network model
     * the hierarchical plans' rail legs are (relaySimSubCollSeconds), per
     * group, the groups at once. */
    double worst = 0;
    for (int g = 0; g < key->nGroups; g++) {
      double t = relaySimSubCollSeconds(topo, key->coll, key->ranks + g * key->nActive, key->nActive,
                                        (double)key->counts[g] * (double)relayTypeSize(key->dtype));
      if (t > worst) worst = t;
    }
    return topo->callS + topo->boundaryS + worst;
  }
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

/* The best of the plan routes: direct, the incumbent, then every other plan
 * row the transport can run, in table order (a later row must be strictly
 * faster), a pipelined one at depth 1 and at the depth model's depth
 * (route/depth.c) instead of at every depth. The model's stage price was
 * tuned on measured depth choices (768 KiB on mi350x), while the simulator
 * prices every step at the two-group boundary (25 us, 1.23 MiB of link
 * time), which over-prices a pipeline stage: it would keep 2-active calls at
 * depth 4 at 256 MB where the seed measured depth 8 faster. The simulator
 * still decides between the two and direct, since it knows what the closed
 * form leaves out (helper reduce launches, the call's fixed cost, the direct
 * route); and two simulations instead of four halve the router's cost on the
 * deepest, most expensive plans. */
static void choosePlan(const planKey* key, const struct relayTopo* topo, int caps, int route[2], int depth[2],
                       double best[2], relayPlan* win[2], builtPlans* built) {
  win[0] = win[1] = price(key, topo, relayRouteRowOf(relayRouteDirect), 1, best, built);
  if (!win[0]) {
    best[0] = best[1] = -1;
    return;
  }
  for (int r = 0; r < relayNumRoutes; r++) {
    const relayRouteRow* row = relayRouteRowOf(r);
    if (r == relayRouteDirect || !rowUsable(row, key, caps) || !row->build) continue;
    int depths[2] = {1, row->flags & RELAY_ROW_PIPELINED ? relayDepthChoose(key, topo) : 1};
    for (size_t i = 0; i < (depths[1] > 1 ? 2u : 1u); i++) {
      double t[2];
      relayPlan* p = price(key, topo, row, depths[i], t, built);
      for (int g = 0; p && g < 2; g++) {
        if (t[g] < best[g]) {
          best[g] = t[g];
          route[g] = r;
          depth[g] = depths[i];
          win[g] = p;
        }
      }
    }
  }
}

/* The list of a winner: it, then the incumbents it displaced (relayRouteList). */
static void listOf(int route, int depth, const relayRouteRow* incumbent, relayRouteList* out) {
  out->n = 0;
  out->route[out->n] = route;
  out->depth[out->n++] = depth;
  if (route == relayRouteDirect) return; /* it beat the incumbent and needs nothing */
  if (incumbent && route != incumbent->route) {
    out->route[out->n] = incumbent->route;
    out->depth[out->n++] = 1;
  }
  out->route[out->n] = relayRouteDirect;
  out->depth[out->n++] = 1;
}

/* Both lists, [0] for a call made directly and [1] for one captured (caps without
 * RELAY_ROUTE_CAP_PERCALL), from one pricing: each candidate's plan is built once and priced both ways.
 * win[g] (NULL: not wanted) gets the plan of out[g]'s winner where pricing built it (win[1] NULL where it
 * is win[0]'s); every other plan pricing built is freed. */
static void choose(const planKey* key, const struct relayTopo* topo, int caps, relayRouteList out[2],
                   relayPlan* win[2]) {
  const relayRouteRow* incumbent = incumbentRow(key, caps);
  int route[2] = {relayRouteDirect, relayRouteDirect}, depth[2] = {1, 1};
  relayPlan* plan[2] = {NULL, NULL};
  builtPlans built = {.n = 0};
  if (!topo) {
    /* No model of this node: a one-launch plan route below its gate (one
     * launch instead of a group plus a reduce), else the library's own
     * collective where the transport has one, else direct; a call made directly
     * and a captured one alike. */
    if (incumbent) route[0] = incumbent->route;
    for (int r = 0; r < relayNumRoutes; r++) {
      const relayRouteRow* row = relayRouteRowOf(r);
      if (!(row && row->build && (row->flags & RELAY_ROW_UNMODELLED) && rowUsable(row, key, caps))) continue;
      planKey k = *key;
      k.route = r;
      k.depth = 1;
      relayPlan* p = NULL;
      if (relayPlanBuild(&k, &p) == relaySuccess && p) {
        built.plan[built.n++] = plan[0] = p;
        route[0] = r;
        break;
      }
    }
    route[1] = route[0];
    plan[1] = plan[0];
  } else {
    double best[2];
    choosePlan(key, topo, caps, route, depth, best, plan, &built);
    for (int g = 0; g < 2; g++) {
      if (incumbent && nativeKeeps(key, topo, best[g])) {
        route[g] = incumbent->route;
        depth[g] = 1;
        plan[g] = NULL;
      }
    }
  }
  for (int g = 0; g < 2; g++) listOf(route[g], depth[g], incumbent, &out[g]);
  if (plan[1] == plan[0]) plan[1] = NULL; /* one plan, one key: handed on once */
  for (int i = 0; i < built.n; i++) {
    if (win && (built.plan[i] == plan[0] || built.plan[i] == plan[1])) continue;
    relayPlanFree(built.plan[i]);
  }
  if (win) {
    win[0] = plan[0];
    win[1] = plan[1];
  }
}

/* Both lists of an auto-routed layout call, cached; plans as choose's win (none on a hit). */
static void chooseCached(const planKey* key, const struct relayTopo* topo, int caps, relayRouteList out[2],
                         relayPlan* plans[2]) {
  if (plans) plans[0] = plans[1] = NULL;
  int32_t head[PLAN_KEY_WORDS];
  keyHead(key, caps, head);
  uint64_t h = keyHash(head, key, topo);
  routeEntry* e = &gCache[h % ROUTE_CACHE_ENTRIES];
  pthread_mutex_lock(&gCacheLock);
  /* Equal heads fix the arrays' lengths. */
  int hit =
      e->valid && e->hash == h && !memcmp(e->head, head, sizeof head) && planKeyArraysEqual(e->arrays, key);
  if (hit) memcpy(out, e->list, sizeof e->list);
  pthread_mutex_unlock(&gCacheLock);
  if (hit) return;
  const int graphCaps = head[PLAN_KEY_W_ROUTE];
  memset(out, 0, 2 * sizeof *out); /* callers compare lists whole */
  choose(key, topo, graphCaps, out, plans);
  unsigned char* arrays = planKeyArraysDup(key);
  if (!arrays) return; /* not cached: the next call chooses again */
  pthread_mutex_lock(&gCacheLock);
  free(e->arrays);
  memcpy(e->head, head, sizeof head);
  e->arrays = arrays;
  e->valid = 1;
  e->hash = h;
  memcpy(e->list, out, sizeof e->list);
  pthread_mutex_unlock(&gCacheLock);
}

void relayRouteCandidates(const planKey* key, const struct relayTopo* topo, int caps, int route, int depth,
                          relayRouteList out[2], relayPlan* plans[2]) {
  memset(out, 0, 2 * sizeof *out);
  if (plans) plans[0] = plans[1] = NULL;
  if (!relayCollOnLayout(key->coll)) {
    /* The router prices calls on a layout only (broadcast and reduce too): another kind takes the plan
     * rows that serve it, in table order (scatter, gather: direct, their one schedule), forced route or
     * not: asking another builder would fail on every call. */
    for (int r = 0; r < relayNumRoutes && out[0].n < RELAY_ROUTE_MAX_CANDS; r++) {
      const relayRouteRow* row = relayRouteRowOf(r);
      if (row && row->build && relayRouteRowServes(row, key->coll)) {
        out[0].route[out[0].n] = r;
        out[0].depth[out[0].n++] = depth > 0 ? depth : 1;
      }
    }
  } else if (route != relayRouteAuto) {
    const relayRouteRow* row = relayRouteRowOf(route);
    /* A forced pipelined route still takes the depth model's depth. */
    int d = depth > 0 ? depth : row && (row->flags & RELAY_ROW_PIPELINED) ? relayDepthChoose(key, topo) : 1;
    out[0].route[out[0].n] = route;
    out[0].depth[out[0].n++] = d;
    if (route != relayRouteDirect) {
      out[0].route[out[0].n] = relayRouteDirect;
      out[0].depth[out[0].n++] = 1;
    }
  } else {
    chooseCached(key, topo, caps, out, plans);
    for (int g = 0; depth > 0 && g < 2; g++) {
      /* A forced depth with the model's route: a plan priced at another depth is not the one to run. */
      if (plans && plans[g] && out[g].depth[0] != depth) {
        relayPlanFree(plans[g]);
        plans[g] = NULL;
      }
      out[g].depth[0] = depth;
    }
    return;
  }
  out[1] = out[0];
}

void relayRouteChoosePair(const planKey* key, const struct relayTopo* topo, int caps, int route[2],
                          int depth[2]) {
  relayRouteList l[2];
  chooseCached(key, topo, caps, l, NULL);
  for (int g = 0; g < 2; g++) {
    route[g] = l[g].route[0];
    depth[g] = l[g].depth[0];
  }
}

void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth) {
  int r[2], d[2], g = !(caps & RELAY_ROUTE_CAP_PERCALL);
  relayRouteChoosePair(key, topo, caps, r, d);
  *route = r[g];
  *depth = d[g];
}

int relayRouteBeatsNative(const planKey* key, const struct relayTopo* topo, int caps) {
  int route, depth;
  relayRouteChoose(key, topo, caps | RELAY_TP_CAP_NATIVE, &route, &depth);
  return route != relayRouteNative;
}
