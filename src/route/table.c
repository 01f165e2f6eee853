/*
 * The table of routes (route/table.h). A new route is a relayRoute_t value
 * (relaycc.h: users force it by name or number), a row here and its builder.
 */
#include "route/table.h"

#include <strings.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "plan/routes.h"
#include "route/route.h"

/* ---- one-shot ---------------------------------------------------------- */

/* The router prices the one-shot for every layout collective: all-gather
 * and all-to-all move the same bytes as all-reduce / reduce-scatter without
 * the reduce (contributions side by side), and on 2 x H200 measured
 * 1.26-1.60x (all-gather) and 1.25-1.90x (all-to-all) of NCCL in graph
 * replay from 4 KB to 1 MiB, 1.37-1.57x per call
 * (docs/perf/2026-11-30-h200x2.md, run 6). The gate is on the per-rank
 * input as the seed's 1 MiB was: the caller's (CAP_GATED: core checked the
 * comm's agreed one, and caps are part of the route cache key), else the
 * default. */
static int oneShotPriced(const planKey* k, int caps) {
  return relayOneShotFits(k, (caps & RELAY_ROUTE_CAP_GATED) ? RELAY_ONESHOT_GATE_MAX : RELAY_ONESHOT_DEFAULT_MAX_BYTES);
}

/* A forced one-shot above the comm's gate (what one source stages per
 * destination must fit the slot) is declined, on every rank alike. */
static relayResult_t oneShotPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  uint64_t gate = (uint64_t)relayParamInt(c, RELAY_P_ONESHOT_MAX_BYTES);
  if (!relayOneShotSlotFits(call->key, gate)) return relayNotSupported;
  return c->tp->oneshotPrepare(c, (size_t)gate, call->stream);
}

/* ---- bandwidth ---------------------------------------------------------- */

/* Tiles through a bounded ring in peers' memory (plan_bw.c): its builder
 * says which keys it serves (nGroups == 1, every layout collective, any
 * count; none when RELAYCC_BW_RING=0) and the simulator prices its tiles
 * (sim.c bwSeconds), so where it wins is the model's answer, continuous with
 * the one-shot's (one tile costs the one-shot plus one flag hop). The region
 * is sized by the key's tile and ring (the comm's agreed values); the
 * transport's prepare votes on them, so ranks decline together. */
static relayResult_t bwPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  int ring = planBwRing(call->key);
  if (ring == 0) return relayNotSupported; /* the builder refused it already; every rank alike */
  return c->tp->bwPrepare(c, planBwTileBytes(call->key), ring, call->stream);
}

/* ---- native ------------------------------------------------------------ */

/* The transport library's fused collective on each group's sub-communicator
 * (NCCL): one launch where a send/recv plan needs a group plus a reduce
 * (measured 0.67-0.86x of NCCL on 2 x H200 for all-reduce and
 * reduce-scatter). The layout collectives only. */
static int nativePriced(const planKey* k, int caps) {
  (void)caps;
  return (unsigned)k->coll < RELAY_NUM_COLLS;
}

static relayResult_t nativePrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  const planKey* k = call->key;
  if (!nativePriced(k, 0)) return relayNotSupported; /* every rank alike: the key says */
  return c->tp->nativePrepare(c, k->nGroups, k->nActive, k->ranks, call->stream, handle);
}

static relayResult_t nativeRun(struct relayComm* c, void* handle, const relayRouteCall* call) {
  const planKey* k = call->key;
  return c->tp->native(c, handle, k->coll, call->send, call->recv, call->count, k->dtype, k->op,
                       call->stream);
}

/* ---- the table --------------------------------------------------------- */

/* In relayRoute_t order, which is also the order the router prices plan
 * routes in: on equal predictions the earlier row (direct first) stays. */
static const relayRouteRow kRows[relayNumRoutes] = {
    [relayRouteDirect] = {relayRouteDirect, "direct", planBuildDirect, 0, 0, NULL, NULL, NULL},
    [relayRouteRelay] = {relayRouteRelay, "relay", planBuildRelay, 0, RELAY_ROW_PIPELINED, NULL, NULL, NULL},
    [relayRouteOneShot] = {relayRouteOneShot, "oneshot", planBuildOneShot, RELAY_TP_CAP_ONESHOT,
                           RELAY_ROW_UNMODELLED | RELAY_ROW_ONE_LAUNCH, oneShotPriced, oneShotPrepare, NULL},
    [relayRouteNative] = {relayRouteNative, "native", NULL, RELAY_TP_CAP_NATIVE, RELAY_ROW_ONE_LAUNCH,
                          nativePriced, nativePrepare, nativeRun},
    [relayRouteBw] = {relayRouteBw, "bw", planBuildBw, RELAY_TP_CAP_BW, RELAY_ROW_ONE_LAUNCH, NULL, bwPrepare, NULL},
};

const relayRouteRow* relayRouteRowOf(int route) {
  return (unsigned)route < relayNumRoutes && kRows[route].name ? &kRows[route] : NULL;
}

/* Here, above the plan layer, because the table picks the builder: a plan
 * knows no route table (CONTRIBUTING.md: lower layers never call upward). */
relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  *out = NULL;
  const relayRouteRow* row = relayRouteRowOf(key->route);
  /* One schedule serves the rooted collectives, root to each member
   * (direct's builder: plan_direct.c): no helper route for them yet, so any
   * other route answers "not supported" and the caller falls back. */
  if (!row || !row->build || (relayCollRooted(key->coll) && key->route != relayRouteDirect))
    return relayNotSupported;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  /* A layout collective on a comm of several nodes: the hierarchical plan
   * (plan_hier.c), whose node legs are one-node plans of this row's route
   * (direct or relay; core never hands a one-shot key across nodes). */
  int hier = !relayCollRooted(key->coll) && planKeyMultiNode(key);
  relayResult_t res = hier ? planBuildHier(b, relayPlanBuild) : row->build(b);
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}

const char* relayRouteName(int route) {
  if (route == relayRouteAuto) return "auto";
  const relayRouteRow* row = relayRouteRowOf(route);
  return row ? row->name : "?";
}

int relayParseRoute(const char* s, int* out) {
  if (!s) return -1;
  if (strcasecmp(s, "one-shot") == 0) s = "oneshot";
  for (int i = 0; i < relayNumRoutes; i++)
    if (strcasecmp(s, relayRouteName(i)) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}
