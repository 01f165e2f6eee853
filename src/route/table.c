/*
 * The table of routes (route/table.h). A new route is a relayRoute_t value
 * (relaycc.h: users force it by name or number), its name
 * (comm/common.c), a row here and its builder, and where it needs the
 * transport readied, its prepare in core (core/route_steps.c).
 */
#include "route/table.h"

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

/* ---- bandwidth ---------------------------------------------------------- */

/* Tiles through a bounded ring in peers' memory (plan_bw.c): its builder
 * says which keys it serves (nGroups == 1, every layout collective, any
 * count; none when RELAYCC_BW_RING=0) and the simulator prices its tiles
 * (sim.c bwSeconds), so where it wins is the model's answer, continuous with
 * the one-shot's (one tile costs the one-shot plus one flag hop). No gate of
 * its own (its row's priced is NULL); its prepare is core's. */

/* ---- native ------------------------------------------------------------ */

/* The transport library's fused collective on each group's sub-communicator
 * (NCCL): one launch where a send/recv plan needs a group plus a reduce
 * (measured 0.67-0.86x of NCCL on 2 x H200 for all-reduce and
 * reduce-scatter). The layout collectives only (its row's kinds). */

/* ---- the table --------------------------------------------------------- */

/* In relayRoute_t order, which is also the order the router prices plan
 * routes in: on equal predictions the earlier row (direct first) stays. */
/* Direct's builder also serves the rooted collectives (root to each member: plan_scatter.c), the one
 * schedule they have; the other routes serve the layout collectives. */
#define LAYOUT RELAY_ROW_KIND(relayKindLayout)
static const relayRouteRow kRows[relayNumRoutes] = {
    [relayRouteDirect] = {relayRouteDirect, planBuildDirect, 0, LAYOUT | RELAY_ROW_KIND(relayKindRootedRank),
                          0, NULL},
    [relayRouteRelay] = {relayRouteRelay, planBuildRelay, 0, LAYOUT, RELAY_ROW_PIPELINED, NULL},
    [relayRouteOneShot] = {relayRouteOneShot, planBuildOneShot, RELAY_TP_CAP_ONESHOT, LAYOUT,
                           RELAY_ROW_UNMODELLED | RELAY_ROW_ONE_LAUNCH, oneShotPriced},
    [relayRouteNative] = {relayRouteNative, NULL, RELAY_TP_CAP_NATIVE, LAYOUT, RELAY_ROW_ONE_LAUNCH, NULL},
    [relayRouteBw] = {relayRouteBw, planBuildBw, RELAY_TP_CAP_BW, LAYOUT, RELAY_ROW_ONE_LAUNCH, NULL},
};
#undef LAYOUT

const relayRouteRow* relayRouteRowOf(int route) {
  /* A route without a row here reads a zeroed slot (route 0): none. */
  return route > relayRouteAuto && route < relayNumRoutes && kRows[route].route == route ? &kRows[route] : NULL;
}

relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  *out = NULL;
  const relayRouteRow* row = relayRouteRowOf(key->route);
  /* A route that does not serve the collective's kind answers "not supported" and the caller falls back. */
  if (!row || !row->build || !relayRouteRowServes(row, key->coll)) return relayNotSupported;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  /* A layout collective on a comm of several nodes: the hierarchical plan
   * (plan_hier.c), whose node legs are one-node plans of this row's route
   * (direct or relay; core never hands a one-shot key across nodes). */
  int hier = relayCollIsLayout(key->coll) && planKeyMultiNode(key);
  relayResult_t res = hier ? planBuildHier(b, relayPlanBuild) : row->build(b);
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}
