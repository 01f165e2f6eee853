/*
 * The one-shot route: one step, one PLAN_OP_ONESHOT per active rank. The
 * transport pushes, hand-shakes and reduces inside that op (one kernel on the
 * GPU), so a small all-reduce or reduce-scatter costs one launch instead of a
 * transport group plus a reduce launch (~0.038 ms vs ~0.035 ms for NCCL's
 * whole fused call on the seed's MI350X: the launch is the cost there).
 *
 * Served: all-reduce and reduce-scatter, and (no reduce: the contributions
 * land side by side) all-gather and all-to-all; broadcast (the root pushes
 * into every peer's staging, each places it) and reduce (every peer pushes
 * into the root's staging, the root reduces in active-index order: the
 * direct route's bits), rooted ops (planOp.root); nGroups == 1, 2 <= A <= 8,
 * and the bytes one source stages per destination (count * elemSize for
 * every collective) within the slot gate. Anything else answers relayNotSupported
 * and core falls back to direct on every rank alike (the answer depends only
 * on the key; the comm's gate is core's, agreed at init).
 */
#include <stdlib.h>

#include "comm/common.h"
#include "plan/plan.h"
#include "plan/routes.h"

int relayOneShotSlotFits(const planKey* k, uint64_t gateBytes) {
  size_t es = relayTypeSize(k->dtype);
  return gateBytes > 0 && es != 0 &&
         k->counts[0] <= gateBytes / es; /* a gate of 0: nothing fits, the route is off */
}

uint64_t planOneShotGate(const planKey* k) {
  return k->oneShotGate == 0  ? RELAY_ONESHOT_DEFAULT_MAX_BYTES
         : k->oneShotGate < 0 ? 0
                              : (uint64_t)k->oneShotGate;
}

int planKeyCarried(const planKey* k) {
  return k->carry && k->coll == relayCollectiveBroadcast && k->nGroups == 1 && k->nActive >= 2 &&
         k->nActive <= RELAY_ONESHOT_MAX_ACTIVE && k->root >= 0 && k->root < k->nActive && k->counts[0] > 0 &&
         relayOneShotSlotFits(k, planOneShotGate(k));
}

int planKeyOneShotTwoShot(const planKey* k) {
  /* Not at 2 actives: each rank would still read its peer's whole input, in two hops where the push form
   * takes one (16-core Xeon, 2026-12-06: 2.0 against 1.6 us at 4 KiB, 135 against 130 at 1 MiB;
   * docs/perf/2026-12-06-cpu-twoshot.md) */
  return k->twoShotFrom && k->coll == relayCollectiveAllReduce && k->nGroups == 1 && k->nActive >= 3 &&
         k->counts[0] * relayTypeSize(k->dtype) >= k->twoShotFrom;
}

int relayOneShotFits(const planKey* k, uint64_t gateBytes) {
  if (k->nGroups != 1 || !relayCollOnLayout(k->coll)) return 0;
  uint64_t bytes =
      k->counts[0] * relayTypeSize(k->dtype) * (relayCollSendsBlocks(k->coll) ? (uint64_t)k->nActive : 1);
  return gateBytes > 0 && bytes <= gateBytes; /* per-rank input */
}

relayResult_t planBuildOneShot(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  /* Rooted by comm rank (scatter, gather): no one-shot; rooted by position (broadcast, reduce): one */
  if (!relayCollOnLayout(k->coll) || (relayCollRooted(k->coll) && (k->root < 0 || k->root >= k->nActive)))
    return relayNotSupported;
  if (k->nGroups != 1 || k->nActive < 2 || k->nActive > RELAY_ONESHOT_MAX_ACTIVE) return relayNotSupported;
  uint64_t c = k->counts[0];
  /* The gate is the caller's (core: the comm's; relayOneShotFits); this is
   * the slot's hard limit, RELAYCC_ONESHOT_MAX_BYTES's largest value. */
  if (!relayOneShotSlotFits(k, RELAY_ONESHOT_GATE_MAX)) return relayNotSupported;
  int A = k->nActive;
  int divisor = relayCollReduces(k->coll) && k->op == relayAvg ? A : 0;
  int form = planKeyOneShotTwoShot(k) ? PLAN_BW_TWOSHOT : PLAN_BW_PUSH;
  int s = planAddStep(b);
  for (int j = 0; j < A; j++)
    planOneShot(b, planActiveRank(k, 0, j), s, 0, planRecvRef(0), planSendRef(0), c, divisor, form);
  return relaySuccess;
}
