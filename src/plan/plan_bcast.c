/*
 * Broadcast and reduce on a layout, the direct route: in each group g the root (active k->root of the
 * group: a position, not a comm rank) and the group's other actives exchange in one step, groups side by
 * side. Helpers take no part.
 *
 * Broadcast: the root sends its SEND (counts[g] elements) to every other active's RECV and copies it to
 *   its own RECV (dropped by the executor when in place: SEND == RECV).
 * Reduce: every other active sends its SEND to the root, which receives the A-1 inputs into scratch
 *   slot 0 (A-1 blocks, block planPeerSlot(i, root) from active i) and reduces the A inputs into its RECV
 *   in active-index order, its own read from SEND: the order every reducing builder and the reference
 *   keep, so results agree bitwise with them. RECV may alias SEND (in place): the reduce reads each
 *   element before it writes it.
 *
 * One step because the root drives all its peers at once, as scatter's does (plan_scatter.c): on NCCL one
 * group of ncclSend/ncclRecv, on shm one grouped transfer. Zero counts move nothing.
 */
#include "plan/routes.h"

relayResult_t planBuildBroadcastDirect(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  int A = k->nActive, R = k->root;
  if (relayCollKind(k->coll) != relayKindRootedPosition || R < 0 || R >= A || A > PLAN_MAX_SRCS)
    return relayInvalidArgument;
  int bcast = !relayCollReduces(k->coll);
  int divisor = !bcast && k->op == relayAvg ? A : 0;
  int s = planAddStep(b);
  planSetDepth(b, 1);
  for (int g = 0; g < k->nGroups; g++) {
    uint64_t c = k->counts[g];
    if (!c) continue;
    int root = planActiveRank(k, g, R);
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < A; i++) {
      int peer = planActiveRank(k, g, i);
      if (i == R) {
        srcs[i] = planSendRef(0);
      } else if (bcast) {
        planSend(b, root, s, peer, planSendRef(0), c);
        planRecv(b, peer, s, root, planRecvRef(0), c);
      } else {
        srcs[i] = planScratchRef(0, (uint64_t)planPeerSlot(i, R) * c);
        planSend(b, peer, s, root, planSendRef(0), c);
        planRecv(b, root, s, peer, srcs[i], c);
      }
    }
    if (bcast) {
      planCopy(b, root, s, planRecvRef(0), planSendRef(0), c);
    } else {
      planNeedScratch(b, root, 0, (uint64_t)(A - 1) * c);
      planReduce(b, root, s, planRecvRef(0), srcs, A, c, divisor);
    }
  }
  return relaySuccess;
}
