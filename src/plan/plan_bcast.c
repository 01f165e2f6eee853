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
#include <stdlib.h>

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

/*
 * Broadcast at A > 2, the relay route: in step 0 the root cuts its buffer into n-1 near-equal pieces and
 * sends piece p to forwarder p (the group's other actives, then every helper: every comm rank but the
 * root); in step 1 each forwarder sends its piece to every non-root active that lacks it (an active's own
 * piece landed in its RECV in step 0; a helper's in its scratch slot 0, one region per group it helps).
 * Every link carries at most m/(n-1) per step, 2m/(n-1) for the call against m for direct's busiest link
 * (the root's); whether two steps and the forwarding pay is the router's (simulator's) answer. Fused calls
 * run every group in the same two steps.
 */
relayResult_t planBuildBroadcastRelay(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  int n = k->nranks, A = k->nActive, R = k->root, nF = n - 1;
  if (k->coll != relayCollectiveBroadcast || A < 2 || R < 0 || R >= A || nF < A) return relayNotSupported;
  uint64_t* used = calloc((size_t)n, sizeof *used); /* scratch slot 0 in use per rank */
  int* fwd = malloc((size_t)n * sizeof *fwd);
  char* inGroup = malloc((size_t)n);
  if (!used || !fwd || !inGroup) {
    free(used);
    free(fwd);
    free(inGroup);
    return relaySystemError;
  }
  planSetDepth(b, 1);
  int s0 = planAddStep(b), s1 = planAddStep(b);
  for (int g = 0; g < k->nGroups; g++) {
    uint64_t m = k->counts[g];
    if (!m) continue;
    const int* act = &k->ranks[g * A];
    int root = act[R], f = 0;
    for (int r = 0; r < n; r++) inGroup[r] = 0;
    for (int i = 0; i < A; i++) inGroup[act[i]] = 1;
    for (int i = 0; i < A; i++)
      if (i != R) fwd[f++] = act[i];
    for (int r = 0; r < n; r++)
      if (!inGroup[r]) fwd[f++] = r;
    planCopy(b, root, s0, planRecvRef(0), planSendRef(0), m);
    for (int p = 0; p < nF; p++) {
      uint64_t off, len;
      planSplit(m, nF, p, &off, &len);
      if (!len) continue;
      int q = fwd[p];
      planRef at = planRecvRef(off);
      if (!inGroup[q]) {
        at = planScratchRef(0, used[q]);
        used[q] += len;
        planNeedScratch(b, q, 0, used[q]);
      }
      planSend(b, root, s0, q, planSendRef(off), len);
      planRecv(b, q, s0, root, at, len);
      for (int i = 0; i < A; i++) {
        int d = act[i];
        if (i == R || d == q) continue;
        planSend(b, q, s1, d, at, len);
        planRecv(b, d, s1, q, planRecvRef(off), len);
      }
    }
  }
  free(used);
  free(fwd);
  free(inGroup);
  return relaySuccess;
}

/*
 * Reduce at A > 2, the relay route: the relay's reduce-scatter of each group's first A*q elements (q = m/A:
 * a slice per active; planBuildRelay's reduce-at-helper, spliced as it builds it, helpers and all), then
 * in one more step a gather of the reduced slices to the root, and beside it the last m - A*q elements
 * (fewer than A) straight to the root, reduced there in active-index order. Every element is reduced
 * once, in the relay reduce-scatter's order (a helper folds the A-1 foreign inputs in active order, the
 * owner adds its own): the relay reduce-scatter's rounding, exact where the sums are (the tests' integer
 * inputs), not the direct route's bits in general. A = 2 (plan_relay.c) keeps active order exactly.
 *
 * Links: the reduce-scatter's m/4 (A + H = 8, two-group form) for its slices, then the gather's q = m/A
 * into the root on each of A-1 links at once, against direct's m into the root over each of A-1 links:
 * whether the extra step pays is the simulator's answer. Slot use: 0 and 1 the reduce-scatter's
 * (SLOT_OWN, SLOT_HELP), 2 a non-root's reduced slice, 3 the root's tail inputs.
 */
enum { RED_SLOT_SLICE = 2, RED_SLOT_TAIL = 3 };

relayResult_t planBuildReduceRelay(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  int n = k->nranks, A = k->nActive, R = k->root, G = k->nGroups;
  if (k->coll != relayCollectiveReduce || A < 3 || A > PLAN_MAX_SRCS || R < 0 || R >= A || n - A < 1)
    return relayNotSupported;
  size_t* q = malloc((size_t)G * sizeof *q);
  int* map = malloc((size_t)n * sizeof *map);
  planRef* sendRef = malloc((size_t)n * sizeof *sendRef);
  planRef* recvRef = malloc((size_t)n * sizeof *recvRef);
  relayResult_t res = q && map && sendRef && recvRef ? relaySuccess : relaySystemError;
  int any = 0;
  for (int g = 0; g < G && res == relaySuccess; g++) any |= (q[g] = k->counts[g] / (uint64_t)A) != 0;
  relayPlan* rs = NULL;
  if (res == relaySuccess && any) {
    planKey rk = *k;
    rk.coll = relayCollectiveReduceScatter;
    rk.counts = q;
    rk.root = 0;
    rk.depth = 1;
    rk.shapeHash = 0; /* another collective and counts: k's memo is not rk's */
    planBuilder* sb = planBuilderNew(&rk);
    res = sb ? planBuildRelay(sb) : relaySystemError;
    if (res == relaySuccess && !(rs = planBuilderFinish(sb))) res = relaySystemError;
    planBuilderFree(sb);
  }
  if (res == relaySuccess) {
    planSetDepth(b, 1);
    for (int r = 0; r < n; r++) {
      map[r] = r;
      sendRef[r] = planSendRef(0);
      recvRef[r] = planScratchRef(RED_SLOT_SLICE, 0); /* helpers: never named */
    }
    for (int g = 0; g < G; g++)
      for (int i = 0; i < A; i++)
        recvRef[planActiveRank(k, g, i)] =
            i == R ? planRecvRef((uint64_t)R * q[g]) : planScratchRef(RED_SLOT_SLICE, 0);
    int nRs = rs ? rs->nSteps : 0;
    for (int s = 0; s < nRs; s++) planAddStep(b);
    if (rs) planSplice(b, rs, map, 0, sendRef, recvRef);
    int s = planAddStep(b);
    for (int g = 0; g < G; g++) {
      uint64_t m = k->counts[g], tail = m - (uint64_t)A * q[g];
      int root = planActiveRank(k, g, R);
      planRef srcs[PLAN_MAX_SRCS];
      for (int i = 0; i < A; i++) {
        int peer = planActiveRank(k, g, i);
        if (i == R) {
          srcs[i] = planSendRef(m - tail);
          continue;
        }
        planNeedScratch(b, peer, RED_SLOT_SLICE, q[g]);
        planSend(b, peer, s, root, planScratchRef(RED_SLOT_SLICE, 0), q[g]);
        planRecv(b, root, s, peer, planRecvRef((uint64_t)i * q[g]), q[g]);
        srcs[i] = planScratchRef(RED_SLOT_TAIL, (uint64_t)planPeerSlot(i, R) * tail);
        planSend(b, peer, s, root, planSendRef(m - tail), tail);
        planRecv(b, root, s, peer, srcs[i], tail);
      }
      if (tail) {
        planNeedScratch(b, root, RED_SLOT_TAIL, (uint64_t)(A - 1) * tail);
        planReduce(b, root, s, planRecvRef(m - tail), srcs, A, tail, k->op == relayAvg ? A : 0);
      }
    }
  }
  relayPlanFree(rs);
  free(q);
  free(map);
  free(sendRef);
  free(recvRef);
  return res;
}
