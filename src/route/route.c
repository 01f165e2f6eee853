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

typedef struct {
  uint64_t hash; /* of the key and the topology's content */
  int route, depth;
  int valid;
} routeEntry;

static routeEntry gCache[ROUTE_CACHE_ENTRIES];
static pthread_mutex_t gCacheLock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t keyHash(const planKey* k, const struct relayTopo* t) {
  uint64_t h = 0xcbf29ce484222325ull;
#define MIX(p, n)                                                        \
  do {                                                                   \
    const unsigned char* b_ = (const unsigned char*)(p);                 \
    for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ b_[i_]) * 0x100000001b3ull; \
  } while (0)
  int head[6] = {(int)k->coll, k->nranks, k->nGroups, k->nActive, (int)k->dtype, (int)k->op};
  MIX(head, sizeof head);
  MIX(k->ranks, (size_t)k->nGroups * (size_t)k->nActive * sizeof(int));
  MIX(k->counts, (size_t)k->nGroups * sizeof(size_t));
  /* The topology by content, not address: a comm's topology is freed with it
   * and a later one may reuse the address with other figures. */
  if (t) {
    size_t n2 = (size_t)t->nGPUs * (size_t)t->nGPUs;
    MIX(t->name, strlen(t->name));
    MIX(&t->nGPUs, sizeof t->nGPUs);
    MIX(&t->hasSwitch, sizeof t->hasSwitch);
    MIX(&t->boundaryS, sizeof t->boundaryS);
    MIX(&t->launchS, sizeof t->launchS);
    MIX(&t->callS, sizeof t->callS);
    MIX(&t->memBw, sizeof t->memBw);
    MIX(&t->stageS, sizeof t->stageS);
    MIX(&t->maxDepth, sizeof t->maxDepth);
    MIX(t->linkCount, n2 * sizeof(int));
    MIX(t->linkBw, n2 * sizeof(double));
    MIX(t->injBw, (size_t)t->nGPUs * sizeof(double));
    MIX(t->ejBw, (size_t)t->nGPUs * sizeof(double));
  }
#undef MIX
  return h;
}

/* Predicted seconds of key under route/depth, or a negative value when the
 * route cannot serve it. */
static double predict(const planKey* key, const struct relayTopo* topo, int route, int depth) {
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
  relaySimResultFree(&r);
  relayPlanFree(p);
  return t;
}

/* Per-rank bytes at or below which a one-shot push-reduce is considered when
 * there is no model (the seed's gate: 1 MiB, where the kernel crossed NCCL's
 * fused one between 1 and 2.25 MiB). */
static size_t oneShotGateBytes(void) { return (size_t)relayEnvLong("RELAYCC_ONESHOT_MAX_BYTES", 1 << 20); }

static int oneShotEligible(const planKey* k) {
  if (k->nGroups != 1) return 0;
  size_t es = relayTypeSize(k->dtype);
  size_t bytes = k->counts[0] * es * (k->coll == RELAY_COLL_REDUCESCATTER ? (size_t)k->nActive : 1);
  return (k->coll == RELAY_COLL_ALLREDUCE || k->coll == RELAY_COLL_REDUCESCATTER) && bytes <= oneShotGateBytes();
}

static void choose(const planKey* key, const struct relayTopo* topo, int* route, int* depth) {
  *route = relayRouteDirect;
  *depth = 1;
  if (!topo) {
    /* No model of this node: the one-shot below its gate (one launch instead
     * of a group plus a reduce), direct otherwise. */
    if (oneShotEligible(key)) {
      planKey k = *key;
      k.route = relayRouteOneShot;
      k.depth = 1;
      relayPlan* p = NULL;
      if (relayPlanBuild(&k, &p) == relaySuccess && p) *route = relayRouteOneShot;
      relayPlanFree(p);
    }
    return;
  }
  double best = predict(key, topo, relayRouteDirect, 1);
  if (best < 0) return;
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
    double t = predict(key, topo, relayRouteRelay, depths[i]);
    if (t >= 0 && t < best) {
      best = t;
      *route = relayRouteRelay;
      *depth = depths[i];
    }
  }
  if (oneShotEligible(key)) {
    double t = predict(key, topo, relayRouteOneShot, 1);
    if (t >= 0 && t < best) {
      best = t;
      *route = relayRouteOneShot;
      *depth = 1;
    }
  }
}

void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int* route, int* depth) {
  uint64_t h = keyHash(key, topo);
  routeEntry* e = &gCache[h % ROUTE_CACHE_ENTRIES];
  pthread_mutex_lock(&gCacheLock);
  int hit = e->valid && e->hash == h;
  if (hit) {
    *route = e->route;
    *depth = e->depth;
  }
  pthread_mutex_unlock(&gCacheLock);
  if (hit) return;
  choose(key, topo, route, depth);
  pthread_mutex_lock(&gCacheLock);
  e->valid = 1;
  e->hash = h;
  e->route = *route;
  e->depth = *depth;
  pthread_mutex_unlock(&gCacheLock);
}
