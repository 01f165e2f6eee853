/* Route builders: each fills a planBuilder for its key, or answers
 * relayNotSupported (a normal answer: the call takes the router's next
 * candidate). The table of routes (route/table.c) names each route's. */
#ifndef RELAY_PLAN_ROUTES_H_
#define RELAY_PLAN_ROUTES_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

relayResult_t planBuildDirect(
    planBuilder* b); /* rooted keys: planBuildScatter's, planBuildBroadcastDirect's */
relayResult_t planBuildRelay(planBuilder* b);
relayResult_t planBuildScatter(planBuilder* b); /* scatter and gather (rooted) */
/* Broadcast and reduce on a layout (a root position per group): one step (plan_bcast.c). */
relayResult_t planBuildBroadcastDirect(planBuilder* b);
/* Broadcast at A > 2 on the relay route: scatter to every rank, then every rank forwards (plan_bcast.c). */
relayResult_t planBuildBroadcastRelay(planBuilder* b);
/* Reduce at A > 2 on the relay route: the relay's reduce-scatter, then a gather to the root (plan_bcast.c).
 */
relayResult_t planBuildReduceRelay(planBuilder* b);
/* One PLAN_OP_ONESHOT step: the layout collectives, broadcast and reduce (a rooted op), nGroups == 1, the
 * largest per-rank staging slot within RELAY_ONESHOT_MAX_BYTES (plan_oneshot.c). */
relayResult_t planBuildOneShot(planBuilder* b);
/* A layout collective on a comm of several nodes (key->nodeOf): per-node
 * sub-plans of key->route and sub-collectives across nodes (plan_hier.c).
 * buildLeg builds a node leg's plan (a one-node key of route direct or
 * relay): the table of routes passes its relayPlanBuild, so the plan layer
 * never calls up into the table that picks the builders. */
typedef relayResult_t (*planKeyBuildFn)(const planKey* key, relayPlan** out);
relayResult_t planBuildHier(planBuilder* b, planKeyBuildFn buildLeg);
/* One PLAN_OP_BW step: every layout collective, nGroups == 1, 2 <= A <= 8,
 * any count (plan_bw.c). */
relayResult_t planBuildBw(planBuilder* b);

/* Index of active i among the A-1 peers of active j (i != j), for compact
 * per-source scratch layouts. */
static inline int planPeerSlot(int i, int j) { return i < j ? i : i - 1; }

/* Split count into n near-equal parts; part p is [*off, *off + *len). */
static inline void planSplit(uint64_t count, int n, int p, uint64_t* off, uint64_t* len) {
  uint64_t q = count / (uint64_t)n, r = count % (uint64_t)n;
  *off = (uint64_t)p * q + ((uint64_t)p < r ? (uint64_t)p : r);
  *len = q + ((uint64_t)p < r ? 1 : 0);
}

#ifdef __cplusplus
}
#endif
#endif
