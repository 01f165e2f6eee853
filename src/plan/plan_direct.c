/*
 * The direct route: the active ranks of each group exchange among themselves,
 * helpers idle. Counted in launches, because below the crossovers a launch
 * (~5 us on a GPU) is the whole cost:
 *   all-gather, all-to-all   one step; a rank's own piece travels as a self
 *                            send/receive inside it (independent calls; fused
 *                            calls copy it locally: on RCCL the self pair
 *                            flaked one run in four in fused calls, per seed)
 *   reduce-scatter           one step + one A-input reduce
 *   all-reduce               small: one full-exchange step + one A-input
 *                            reduce (2 launches); large: reduce-scatter step,
 *                            reduce, all-gather step (3 launches, but
 *                            2(A-1)/A of the bytes instead of A-1).
 * Reductions always take their inputs in active-index order, so every rank of
 * an all-reduce computes bitwise identical results.
 */
#include "comm/common.h"
#include "plan/routes.h"

/* Per-rank input at or below which an A > 2 all-reduce uses the full
 * exchange. The exchange moves (A-1)*count per rank against the two-step
 * form's 2(A-1)/A*count: at A=4 that is 1.5x the bytes for one launch fewer
 * (~5 us). At ~50 GB/s of egress per rank the extra half-count costs 5 us at
 * ~500 KB; 256 KiB keeps the exchange strictly inside the region where the
 * launch dominates. At A == 2 both forms move the same bytes, so the exchange
 * always wins. */
#define DIRECT_FULL_EXCHANGE_MAX_BYTES (256u << 10)

/* All-gather (blocked 0: every active sends its whole send buffer) and
 * all-to-all (blocked 1: block j of it goes to active j): active i's piece
 * lands at RECV offset i*count everywhere. */
static void exchange(planBuilder* b, int s, int g, int blocked) {
  const planKey* k = planBuilderKey(b);
  int A = k->nActive;
  uint64_t c = k->counts[g];
  for (int i = 0; i < A; i++) {
    int src = planActiveRank(k, g, i);
    for (int d = 0; d < A; d++) {
      int j = (i + d) % A; /* stagger so ranks do not all start on one peer */
      int dst = planActiveRank(k, g, j);
      planRef from = planSendRef(blocked ? (uint64_t)j * c : 0);
      if (j == i && k->nGroups > 1) {
        planCopy(b, src, s, planRecvRef((uint64_t)i * c), from, c);
        continue;
      }
      planSend(b, src, s, dst, from, c);
      planRecv(b, dst, s, src, planRecvRef((uint64_t)i * c), c);
    }
  }
}

/* Reduce-scatter of the blocks [off_j, off_j + len_j) of each active's send
 * buffer (blockStride = 0: every active sends the block of the same offsets;
 * all-reduce), into dst of the owner. Foreign blocks land in scratch slot 0
 * at stride `stride`, indexed by planPeerSlot. */
/* Active j's block: the j-th of A counts (blockPerRank), else its share of one. */
static void ownerBlock(uint64_t count, int A, int j, int blockPerRank, uint64_t* off, uint64_t* len) {
  if (blockPerRank) {
    *off = (uint64_t)j * count;
    *len = count;
  } else {
    planSplit(count, A, j, off, len);
  }
}

static void reduceBlocks(planBuilder* b, int s, int g, uint64_t count, int blockPerRank,
                         planRef (*dstOf)(int j, uint64_t off)) {
  const planKey* k = planBuilderKey(b);
  int A = k->nActive;
  int divisor = k->op == relayAvg ? A : 0;
  uint64_t stride = 0;
  for (int j = 0; j < A; j++) {
    uint64_t off, len;
    ownerBlock(count, A, j, blockPerRank, &off, &len);
    if (len > stride) stride = len;
  }
  for (int j = 0; j < A; j++) {
    int owner = planActiveRank(k, g, j);
    uint64_t off, len;
    ownerBlock(count, A, j, blockPerRank, &off, &len);
    if (len == 0) continue;
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < A; i++) {
      int src = planActiveRank(k, g, i);
      if (i == j) {
        srcs[i] = planSendRef(off);
        continue;
      }
      planRef slot = planScratchRef(0, (uint64_t)planPeerSlot(i, j) * stride);
      planSend(b, src, s, owner, planSendRef(off), len);
      planRecv(b, owner, s, src, slot, len);
      srcs[i] = slot;
    }
    planNeedScratch(b, owner, 0, (uint64_t)(A - 1) * stride);
    planReduce(b, owner, s, dstOf(j, off), srcs, A, len, divisor);
  }
}

static planRef recvAtZero(int j, uint64_t off) {
  (void)j;
  (void)off;
  return planRecvRef(0);
}
static planRef recvAtOff(int j, uint64_t off) {
  (void)j;
  return planRecvRef(off);
}

/* Full exchange: every active sends its whole buffer to the other A-1, then
 * each reduces all A contributions in active-index order. */
static void allReduceExchange(planBuilder* b, int s, int g) {
  const planKey* k = planBuilderKey(b);
  int A = k->nActive;
  uint64_t c = k->counts[g];
  int divisor = k->op == relayAvg ? A : 0;
  for (int j = 0; j < A; j++) {
    int me = planActiveRank(k, g, j);
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < A; i++) {
      if (i == j) {
        srcs[i] = planSendRef(0);
        continue;
      }
      int peer = planActiveRank(k, g, i);
      planRef slot = planScratchRef(0, (uint64_t)planPeerSlot(i, j) * c);
      planSend(b, peer, s, me, planSendRef(0), c);
      planRecv(b, me, s, peer, slot, c);
      srcs[i] = slot;
    }
    planNeedScratch(b, me, 0, (uint64_t)(A - 1) * c);
    planReduce(b, me, s, planRecvRef(0), srcs, A, c, divisor);
  }
}

/* Reduce-scatter into each owner's block of recv, then all-gather the blocks. */
static void allReduceTwoStep(planBuilder* b, int s0, int s1, int g) {
  const planKey* k = planBuilderKey(b);
  int A = k->nActive;
  uint64_t c = k->counts[g];
  reduceBlocks(b, s0, g, c, 0, recvAtOff);
  for (int j = 0; j < A; j++) {
    uint64_t off, len;
    planSplit(c, A, j, &off, &len);
    int owner = planActiveRank(k, g, j);
    for (int i = 0; i < A; i++) {
      if (i == j) continue;
      int peer = planActiveRank(k, g, i);
      planSend(b, owner, s1, peer, planRecvRef(off), len);
      planRecv(b, peer, s1, owner, planRecvRef(off), len);
    }
  }
}

relayResult_t planBuildDirect(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  if (relayCollRankSet(k->coll)) return planBuildScatter(b); /* the rank-set calls' one schedule */
  if (relayCollRooted(k->coll)) return planBuildBroadcastDirect(b);
  int s = planAddStep(b);
  switch (k->coll) {
    case relayCollectiveAllGather:
      for (int g = 0; g < k->nGroups; g++) exchange(b, s, g, 0);
      break;
    case relayCollectiveAllToAll:
      for (int g = 0; g < k->nGroups; g++) exchange(b, s, g, 1);
      break;
    case relayCollectiveReduceScatter:
      for (int g = 0; g < k->nGroups; g++) reduceBlocks(b, s, g, k->counts[g], 1, recvAtZero);
      break;
    case relayCollectiveAllReduce: {
      int s1 = -1;
      for (int g = 0; g < k->nGroups; g++) {
        uint64_t bytes = (uint64_t)k->counts[g] * relayTypeSize(k->dtype);
        if (k->nActive == 2 || bytes <= DIRECT_FULL_EXCHANGE_MAX_BYTES) {
          allReduceExchange(b, s, g);
        } else {
          if (s1 < 0) s1 = planAddStep(b);
          allReduceTwoStep(b, s, s1, g);
        }
      }
      break;
    }
    default: return relayInvalidArgument;
  }
  return relaySuccess;
}
