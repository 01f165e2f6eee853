/*
 * Scatter and gather: one step in which the root sends each member of the
 * set its block (scatter) or receives each member's block (gather), block i
 * at the sum of counts[0..i) in the root's buffer, in set order.
 *
 * One step because the root drives all its peers at once: on NCCL the step
 * becomes one group of ncclSend/ncclRecv (the executor's group), on the shm
 * transport one grouped transfer, and the P2P channel layer (src/p2p) decides
 * how many parts each peer's block travels in (the scatter part rule).
 *
 * The root's own block, when the root is in the set, is a local copy rather
 * than a self send/receive pair: it needs no transport round trip, it is
 * skipped outright when in place (the executor drops a copy onto itself), and
 * self pairs flaked one run in four in fused calls on RCCL (plan_direct.c).
 * Zero counts move nothing: planSend/planRecv/planCopy drop them on both ends.
 */
#include "plan/routes.h"

relayResult_t planBuildScatter(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  if (!relayCollRankSet(k->coll) || k->nGroups != 1 || k->nActive < 1 || k->root < 0 || k->root >= k->nranks)
    return relayInvalidArgument;
  int scatter = relayCollSendsBlocks(k->coll); /* the root sends the blocks */
  int s = planAddStep(b), root = k->root;
  uint64_t off = 0;
  for (int i = 0; i < k->nActive; i++) {
    int member = k->ranks[i];
    uint64_t c = k->counts[i];
    if (member == root) {
      if (scatter) planCopy(b, root, s, planRecvRef(0), planSendRef(off), c);
      else planCopy(b, root, s, planRecvRef(off), planSendRef(0), c);
    } else if (scatter) {
      planSend(b, root, s, member, planSendRef(off), c);
      planRecv(b, member, s, root, planRecvRef(0), c);
    } else {
      planSend(b, member, s, root, planSendRef(0), c);
      planRecv(b, root, s, member, planRecvRef(off), c);
    }
    off += c;
  }
  return relaySuccess;
}
