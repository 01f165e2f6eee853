/*
 * The one-shot route: one step, one PLAN_OP_ONESHOT per active rank. The
 * transport pushes, hand-shakes and reduces inside that op (one kernel on the
 * GPU), so a small all-reduce or reduce-scatter costs one launch instead of a
 * transport group plus a reduce launch (~0.038 ms vs ~0.035 ms for NCCL's
 * whole fused call on the seed's MI350X: the launch is the cost there).
 *
 * Served: all-reduce and reduce-scatter, and (no reduce: the contributions
 * land side by side) all-gather and all-to-all; nGroups == 1, 2 <= A <= 8,
 * and the bytes one source stages per destination (count * elemSize for
 * every collective) within the slot gate. Anything else answers relayNotSupported
 * and core falls back to direct on every rank alike (the answer depends only
 * on the key and the process-wide gate).
 */
#include <stdlib.h>

#include "common.h"
#include "plan/plan.h"
#include "plan/routes.h"

size_t relayOneShotMaxBytes(void) {
  static size_t cached;
  if (!cached) {
    long v = relayEnvLong("RELAYCC_ONESHOT_MAX_BYTES", (long)RELAY_ONESHOT_DEFAULT_MAX_BYTES);
    cached = v > 0 ? (size_t)v : 1; /* <= 0: nothing fits, the route is off */
  }
  return cached;
}

relayResult_t planBuildOneShot(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  if ((unsigned)k->coll >= RELAY_NUM_COLLS) return relayNotSupported; /* rooted: no one-shot */
  if (k->nGroups != 1 || k->nActive < 2 || k->nActive > RELAY_ONESHOT_MAX_ACTIVE) return relayNotSupported;
  size_t es = relayTypeSize(k->dtype);
  uint64_t c = k->counts[0];
  if (es == 0 || c > relayOneShotMaxBytes() / es) return relayNotSupported;
  int A = k->nActive;
  int divisor = relayCollReduces(k->coll) && k->op == relayAvg ? A : 0;
  int s = planAddStep(b);
  for (int j = 0; j < A; j++)
    planOneShot(b, planActiveRank(k, 0, j), s, 0, planRecvRef(0), planSendRef(0), c, divisor);
  return relaySuccess;
}
