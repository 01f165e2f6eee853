/*
 * Layout collectives on a comm that spans nodes (docs/design.md, "Beyond one node").
 *
 * A group inside one node runs the key's route on that node alone: its
 * sub-plan is built for a comm of that node's ranks, so its helpers are that
 * node's other ranks, and the groups of different nodes run in the same steps.
 *
 * A group spanning S nodes with m actives on each (A = S * m) runs
 * hierarchically: legs within each node are sub-plans of the key's route on
 * that node's ranks (helped by them), and the leg across nodes is a
 * sub-collective (PLAN_OP_SUBCOLL) on each rail -- rail l is the l-th active
 * of the group on each node, members in node order -- which NCCL runs as its
 * own collective on a rail sub-communicator. Network bytes per rank drop by m
 * against the flat collective over all A ranks, which is why the node legs
 * go first for reductions and last for gathers:
 *   all-reduce      reduce-scatter in the node (m shards of count / m; the
 *                   count % m tail elements all-reduced in the node beside
 *                   each shard), shard and tail all-reduced on the rail,
 *                   all-gather of the shards in the node, the tail copied;
 *   reduce-scatter  the send blocks reordered rail-major, reduce-scatter of
 *                   S blocks per local in the node, reduce-scatter on the rail;
 *   all-gather      all-gather on the rail, all-gather of the S blocks in the
 *                   node, blocks reordered into group order;
 *   all-to-all      blocks reordered rail-major, all-to-all in the node (S
 *                   blocks per local), reordered node-major, all-to-all of m
 *                   blocks on the rail, reordered into group order.
 * Reductions inside the legs sum; an average divides once, by A, in the rail
 * leg. A group with unequal actives per node runs as one sub-collective of
 * all its ranks (NCCL's own collective over the group).
 *
 * Steps: first every node's inside groups, then the spanning groups' legs
 * (the two share each node's helpers, so they do not overlap). Side-lane ops
 * of the sub-plans land on lane 0 (planSplice).
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/routes.h"

/* The hierarchical legs' own scratch, above the slots route builders use
 * (relay: 0 and 1; every sub-plan is checked to leave these free). */
enum { HIER_SLOT_A = 6, HIER_SLOT_B = 7 };

typedef struct {
  const planKey* k;
  planBuilder* b;
  planKeyBuildFn buildLeg; /* the table's relayPlanBuild (routes.h) */
  int nNodes;
  int* nodeStart; /* [nNodes + 1] into nodeList */
  int* nodeList;  /* comm ranks of each node, in rank order */
  int* localOf;   /* [nranks] index of a rank within its node */
  /* Per group: 0 inside one node, 1 spanning regularly (m per node), 2 irregular. */
  int* kind;
  int* perNode; /* [nGroups] m for kind 1 */
  int* span;    /* [nGroups] nodes spanned */
  /* Per group, for kind 1: the active index of (node position kk, local l): idx[g][kk * m + l]. */
  int** idx;
  int** nodesOf; /* [nGroups][S] the spanned nodes, increasing */
} hierCtx;

static void hierFree(hierCtx* h) {
  for (int g = 0; h->idx && g < h->k->nGroups; g++) {
    free(h->idx[g]);
    free(h->nodesOf[g]);
  }
  free(h->idx);
  free(h->nodesOf);
  free(h->nodeStart);
  free(h->nodeList);
  free(h->localOf);
  free(h->kind);
  free(h->perNode);
  free(h->span);
}

static relayResult_t hierInit(hierCtx* h, const planKey* k, planBuilder* b, planKeyBuildFn buildLeg) {
  memset(h, 0, sizeof *h);
  h->k = k;
  h->b = b;
  h->buildLeg = buildLeg;
  int n = k->nranks, G = k->nGroups, A = k->nActive;
  for (int r = 0; r < n; r++) {
    if (k->nodeOf[r] < 0 || k->nodeOf[r] >= n) return relayInvalidArgument;
    if (k->nodeOf[r] + 1 > h->nNodes) h->nNodes = k->nodeOf[r] + 1;
  }
  h->nodeStart = calloc((size_t)h->nNodes + 1, sizeof(int));
  h->nodeList = malloc((size_t)n * sizeof(int));
  h->localOf = malloc((size_t)n * sizeof(int));
  h->kind = calloc((size_t)G, sizeof(int));
  h->perNode = calloc((size_t)G, sizeof(int));
  h->span = calloc((size_t)G, sizeof(int));
  h->idx = calloc((size_t)G, sizeof(int*));
  h->nodesOf = calloc((size_t)G, sizeof(int*));
  int* cnt = calloc((size_t)h->nNodes, sizeof(int));
  if (!h->nodeStart || !h->nodeList || !h->localOf || !h->kind || !h->perNode || !h->span || !h->idx ||
      !h->nodesOf || !cnt) {
    free(cnt);
    return relaySystemError;
  }
  for (int r = 0; r < n; r++) h->nodeStart[k->nodeOf[r] + 1]++;
  for (int v = 0; v < h->nNodes; v++) h->nodeStart[v + 1] += h->nodeStart[v];
  for (int r = 0; r < n; r++) {
    int v = k->nodeOf[r];
    h->localOf[r] = cnt[v];
    h->nodeList[h->nodeStart[v] + cnt[v]++] = r;
  }
  for (int g = 0; g < G; g++) {
    memset(cnt, 0, (size_t)h->nNodes * sizeof(int));
    for (int i = 0; i < A; i++) cnt[k->nodeOf[planActiveRank(k, g, i)]]++;
    int S = 0, m = -1, equal = 1;
    for (int v = 0; v < h->nNodes; v++) {
      if (!cnt[v]) continue;
      S++;
      if (m < 0) m = cnt[v];
      equal &= cnt[v] == m;
    }
    h->span[g] = S;
    h->kind[g] = S == 1 ? 0 : equal ? 1 : 2;
    if (h->kind[g] != 1) continue;
    h->perNode[g] = m;
    h->idx[g] = malloc((size_t)A * sizeof(int));
    h->nodesOf[g] = malloc((size_t)S * sizeof(int));
    if (!h->idx[g] || !h->nodesOf[g]) {
      free(cnt);
      return relaySystemError;
    }
    int kk = 0;
    for (int v = 0; v < h->nNodes; v++) {
      if (!cnt[v]) continue;
      h->nodesOf[g][kk] = v;
      int l = 0;
      for (int i = 0; i < A; i++)
        if (k->nodeOf[planActiveRank(k, g, i)] == v) h->idx[g][kk * m + l++] = i;
      kk++;
    }
  }
  free(cnt);
  return relaySuccess;
}

/* ---- legs inside nodes ------------------------------------------------- */

/* One node's sub-plan of a phase: the collective among `nGroups` groups of
 * `nActive` of the node's ranks (local indices), per-group counts, built for
 * a comm of the node's ranks with the key's route (direct where that route
 * cannot serve it), and where each node-local rank's SEND and RECV lie. */
typedef struct {
  relayPlan* plan;
  planRef* sendRef;
  planRef* recvRef;
} hierLeg;

static relayResult_t legBuild(const hierCtx* h, int node, relayCollective_t coll, int nGroups, int nActive,
                              const int* localRanks, const size_t* counts, relayRedOp_t op, hierLeg* leg) {
  const planKey* k = h->k;
  planKey sk;
  memset(&sk, 0, sizeof sk);
  sk.coll = coll;
  sk.nranks = h->nodeStart[node + 1] - h->nodeStart[node];
  sk.nGroups = nGroups;
  sk.nActive = nActive;
  sk.ranks = localRanks;
  sk.counts = counts;
  sk.dtype = k->dtype;
  sk.op = op;
  /* The one-shot's op reads the caller's SEND and writes its RECV through
   * staging registered per comm: not a leg (its IPC never spans nodes). */
  sk.route = k->route == relayRouteRelay ? relayRouteRelay : relayRouteDirect;
  sk.depth = sk.route == relayRouteRelay ? k->depth : 1;
  relayResult_t res = h->buildLeg(&sk, &leg->plan);
  if (res == relayNotSupported && sk.route != relayRouteDirect) {
    sk.route = relayRouteDirect;
    sk.depth = 1;
    res = h->buildLeg(&sk, &leg->plan);
  }
  if (res != relaySuccess) return res;
  for (int r = 0; r < sk.nranks; r++)
    if (leg->plan->rank[r].scratchElems[HIER_SLOT_A] || leg->plan->rank[r].scratchElems[HIER_SLOT_B])
      return relayNotSupported; /* a route builder took the hierarchy's slots */
  leg->sendRef = calloc((size_t)sk.nranks, sizeof(planRef));
  leg->recvRef = calloc((size_t)sk.nranks, sizeof(planRef));
  return leg->sendRef && leg->recvRef ? relaySuccess : relaySystemError;
}

static void legFree(hierLeg* leg) {
  relayPlanFree(leg->plan);
  free(leg->sendRef);
  free(leg->recvRef);
  memset(leg, 0, sizeof *leg);
}

/* Splices every node's leg of a phase at the next steps; returns the steps used. */
static int legsSplice(hierCtx* h, hierLeg* legs) {
  int steps = 0, base = -1;
  for (int v = 0; v < h->nNodes; v++)
    if (legs[v].plan && legs[v].plan->nSteps > steps) steps = legs[v].plan->nSteps;
  for (int s = 0; s < steps; s++) {
    int t = planAddStep(h->b);
    if (base < 0) base = t;
  }
  for (int v = 0; v < h->nNodes && steps; v++)
    if (legs[v].plan)
      planSplice(h->b, legs[v].plan, h->nodeList + h->nodeStart[v], base, legs[v].sendRef, legs[v].recvRef);
  return steps;
}

/* Phase A: every node's groups that lie inside it, the key's collective. */
static relayResult_t phaseInside(hierCtx* h) {
  const planKey* k = h->k;
  int A = k->nActive;
  hierLeg* legs = calloc((size_t)h->nNodes, sizeof *legs);
  int* lr = malloc((size_t)k->nGroups * (size_t)A * sizeof(int));
  size_t* cnt = malloc((size_t)k->nGroups * sizeof(size_t));
  relayResult_t res = legs && lr && cnt ? relaySuccess : relaySystemError;
  for (int v = 0; v < h->nNodes && res == relaySuccess; v++) {
    int ng = 0;
    for (int g = 0; g < k->nGroups; g++) {
      if (h->kind[g] != 0 || k->nodeOf[planActiveRank(k, g, 0)] != v) continue;
      for (int i = 0; i < A; i++) lr[ng * A + i] = h->localOf[planActiveRank(k, g, i)];
      cnt[ng++] = k->counts[g];
    }
    if (!ng) continue;
    res = legBuild(h, v, k->coll, ng, A, lr, cnt, k->op, &legs[v]);
    for (int i = 0; res == relaySuccess && i < ng * A; i++) {
      legs[v].sendRef[lr[i]] = planSendRef(0);
      legs[v].recvRef[lr[i]] = planRecvRef(0);
    }
  }
  if (res == relaySuccess) legsSplice(h, legs);
  for (int v = 0; legs && v < h->nNodes; v++) legFree(&legs[v]);
  free(legs);
  free(lr);
  free(cnt);
  return res;
}

/* A node leg of the spanning groups with m actives per node: on each node,
 * the collective among each such group's m locals there, count countOf(g),
 * each local's SEND and RECV at the given slots' offset 0. */
static relayResult_t phaseNodeLeg(hierCtx* h, int m, relayCollective_t coll, const uint64_t* countOf,
                                  planRef sendRef, planRef recvRef, const uint64_t* tailAt) {
  const planKey* k = h->k;
  hierLeg* legs = calloc((size_t)h->nNodes, sizeof *legs);
  int* lr = malloc((size_t)k->nGroups * (size_t)m * sizeof(int));
  int* grp = malloc((size_t)k->nGroups * sizeof(int));
  size_t* cnt = malloc((size_t)k->nGroups * sizeof(size_t));
  relayResult_t res = legs && lr && grp && cnt ? relaySuccess : relaySystemError;
  for (int v = 0; v < h->nNodes && res == relaySuccess; v++) {
    int ng = 0;
    for (int g = 0; g < k->nGroups; g++) {
      if (h->kind[g] != 1 || h->perNode[g] != m || countOf[g] == 0) continue;
      int kk = -1;
      for (int j = 0; j < h->span[g]; j++)
        if (h->nodesOf[g][j] == v) kk = j;
      if (kk < 0) continue;
      for (int l = 0; l < m; l++) lr[ng * m + l] = h->localOf[planActiveRank(k, g, h->idx[g][kk * m + l])];
      grp[ng] = g;
      cnt[ng++] = countOf[g];
    }
    if (!ng) continue;
    res = legBuild(h, v, coll, ng, m, lr, cnt, k->op == relayAvg ? relaySum : k->op, &legs[v]);
    /* tailAt (all-reduce's tail): group g's leg reads SEND from m * tailAt[g]
     * and writes its slot from tailAt[g]. */
    for (int i = 0; res == relaySuccess && i < ng * m; i++) {
      uint64_t at = tailAt ? tailAt[grp[i / m]] : 0;
      legs[v].sendRef[lr[i]] = planRefAdd(sendRef, (uint64_t)m * at);
      legs[v].recvRef[lr[i]] = planRefAdd(recvRef, at);
    }
  }
  if (res == relaySuccess) legsSplice(h, legs);
  for (int v = 0; legs && v < h->nNodes; v++) legFree(&legs[v]);
  free(legs);
  free(lr);
  free(grp);
  free(cnt);
  return res;
}

/* ---- legs across nodes and reorders ------------------------------------ */

/* Every rail of every spanning group with m per node: sub-collective coll of
 * countOf(g) on the rail, src and dst at the given refs, in one step. */
static relayResult_t phaseRails(hierCtx* h, int m, relayCollective_t coll, const uint64_t* countOf,
                                planRef src, planRef dst) {
  const planKey* k = h->k;
  int step = planAddStep(h->b);
  int members[PLAN_MAX_SRCS];
  for (int g = 0; g < k->nGroups; g++) {
    if (h->kind[g] != 1 || h->perNode[g] != m || countOf[g] == 0) continue;
    int S = h->span[g];
    for (int l = 0; l < m; l++) {
      for (int kk = 0; kk < S; kk++) members[kk] = planActiveRank(k, g, h->idx[g][kk * m + l]);
      int sc = planSubCollNew(h->b, coll, members, S, countOf[g]);
      if (sc < 0) return relaySystemError;
      for (int kk = 0; kk < S; kk++)
        planSubCollOp(h->b, members[kk], step, sc, dst, src, k->op == relayAvg ? k->nActive : 0);
    }
  }
  return relaySuccess;
}

/* A reorder of each spanning group's blocks of `blk` elements on every
 * active: dst block (kk, l) of the layout `to` <- src block of `from`, where
 * a layout maps (node position kk, local l) to a block index:
 *   ORDER_GROUP: idx[g][kk * m + l] (the group's active order),
 *   ORDER_RAIL:  l * S + kk, ORDER_NODE: kk * m + l. */
enum { ORDER_GROUP, ORDER_RAIL, ORDER_NODE };

static uint64_t blockOf(const hierCtx* h, int g, int order, int kk, int l) {
  int m = h->perNode[g], S = h->span[g];
  return order == ORDER_GROUP  ? (uint64_t)h->idx[g][kk * m + l]
         : order == ORDER_RAIL ? (uint64_t)(l * S + kk)
                               : (uint64_t)(kk * m + l);
}

static void phaseReorder(hierCtx* h, int m, const uint64_t* blkOf, planRef src, int from, planRef dst,
                         int to) {
  const planKey* k = h->k;
  int step = planAddStep(h->b);
  for (int g = 0; g < k->nGroups; g++) {
    if (h->kind[g] != 1 || h->perNode[g] != m || blkOf[g] == 0) continue;
    int S = h->span[g];
    for (int i = 0; i < k->nActive; i++) {
      int r = planActiveRank(k, g, i);
      for (int kk = 0; kk < S; kk++)
        for (int l = 0; l < m; l++)
          planCopy(h->b, r, step, planRefAdd(dst, blockOf(h, g, to, kk, l) * blkOf[g]),
                   planRefAdd(src, blockOf(h, g, from, kk, l) * blkOf[g]), blkOf[g]);
    }
  }
}

/* Scratch of slot for every active of the spanning groups with m per node. */
static void needScratch(hierCtx* h, int m, int slot, const uint64_t* elemsOf) {
  const planKey* k = h->k;
  for (int g = 0; g < k->nGroups; g++)
    if (h->kind[g] == 1 && h->perNode[g] == m && elemsOf[g])
      for (int i = 0; i < k->nActive; i++) planNeedScratch(h->b, planActiveRank(k, g, i), slot, elemsOf[g]);
}

/* The spanning groups with m actives per node, per collective (file comment). */
static relayResult_t phaseSpanning(hierCtx* h, int m) {
  const planKey* k = h->k;
  int G = k->nGroups;
  uint64_t* c1 = calloc((size_t)G, sizeof(uint64_t));
  uint64_t* c2 = calloc((size_t)G, sizeof(uint64_t));
  uint64_t* c3 = calloc((size_t)G, sizeof(uint64_t));
  if (!c1 || !c2 || !c3) {
    free(c1);
    free(c2);
    free(c3);
    return relaySystemError;
  }
  planRef sa = planScratchRef(HIER_SLOT_A, 0), sb = planScratchRef(HIER_SLOT_B, 0);
  relayResult_t res = relaySuccess;
  for (int g = 0; g < G; g++) {
    uint64_t C = k->counts[g], S = (uint64_t)h->span[g];
    if (h->kind[g] != 1 || h->perNode[g] != m) continue;
    switch (k->coll) {
      case relayCollectiveAllReduce: c1[g] = C / (uint64_t)m; break;                 /* shard */
      case relayCollectiveAllGather: c1[g] = C, c2[g] = S * C, c3[g] = C; break;     /* rail, node, block */
      case relayCollectiveReduceScatter: c1[g] = C, c2[g] = S * C, c3[g] = C; break; /* block, node, rail */
      default: c1[g] = C, c2[g] = S * C, c3[g] = (uint64_t)m * C; break;             /* block, node, rail */
    }
  }
  switch (k->coll) {
    case relayCollectiveAllReduce: {
      if (m == 1) { /* one active per node: the rail is the group */
        res = phaseRails(h, m, relayCollectiveAllReduce, c1, planSendRef(0), planRecvRef(0));
        break;
      }
      /* count = m * b + t (t < m): the t tail elements are all-reduced in
       * the node into A[b, b + t) beside the shard, so one rail all-reduce
       * of b + t carries both and no sub-collective spans the group. */
      for (int g = 0; g < G; g++) {
        c2[g] = h->kind[g] == 1 && h->perNode[g] == m ? k->counts[g] % (uint64_t)m : 0;
        c3[g] = c1[g] + c2[g];
      }
      needScratch(h, m, HIER_SLOT_A, c3);
      needScratch(h, m, HIER_SLOT_B, c3);
      res = phaseNodeLeg(h, m, relayCollectiveReduceScatter, c1, planSendRef(0), sa, NULL);
      if (res == relaySuccess) res = phaseNodeLeg(h, m, relayCollectiveAllReduce, c2, planSendRef(0), sa, c1);
      if (res == relaySuccess) res = phaseRails(h, m, relayCollectiveAllReduce, c3, sa, sb);
      if (res == relaySuccess)
        res = phaseNodeLeg(h, m, relayCollectiveAllGather, c1, sb, planRecvRef(0), NULL);
      if (res == relaySuccess) {
        int step = planAddStep(h->b);
        for (int g = 0; g < G; g++)
          if (c2[g])
            for (int i = 0; i < k->nActive; i++)
              planCopy(h->b, planActiveRank(k, g, i), step, planRecvRef(k->counts[g] - c2[g]),
                       planRefAdd(sb, c1[g]), c2[g]);
      }
      break;
    }
    case relayCollectiveAllGather:
      /* rail all-gather -> A [kk] blocks; node all-gather -> B [l][kk]; into group order */
      needScratch(h, m, HIER_SLOT_A, c2);
      for (int g = 0; g < G; g++) c1[g] = c2[g] * (uint64_t)m; /* B: m * S * C */
      needScratch(h, m, HIER_SLOT_B, c1);
      for (int g = 0; g < G; g++) c1[g] = c3[g];
      res = phaseRails(h, m, relayCollectiveAllGather, c3, planSendRef(0), sa);
      if (res == relaySuccess) {
        if (m > 1) res = phaseNodeLeg(h, m, relayCollectiveAllGather, c2, sa, sb, NULL);
        else phaseReorder(h, m, c3, sa, ORDER_RAIL, sb, ORDER_RAIL);
      }
      if (res == relaySuccess) phaseReorder(h, m, c3, sb, ORDER_RAIL, planRecvRef(0), ORDER_GROUP);
      break;
    case relayCollectiveReduceScatter:
      /* SEND into rail-major A [l][kk]; node reduce-scatter -> B [kk]; rail reduce-scatter -> RECV */
      for (int g = 0; g < G; g++) c1[g] = c2[g] * (uint64_t)m;
      needScratch(h, m, HIER_SLOT_A, c1);
      needScratch(h, m, HIER_SLOT_B, c2);
      phaseReorder(h, m, c3, planSendRef(0), ORDER_GROUP, sa, ORDER_RAIL);
      if (m > 1) res = phaseNodeLeg(h, m, relayCollectiveReduceScatter, c2, sa, sb, NULL);
      else phaseReorder(h, m, c3, sa, ORDER_RAIL, sb, ORDER_RAIL);
      if (res == relaySuccess) res = phaseRails(h, m, relayCollectiveReduceScatter, c3, sb, planRecvRef(0));
      break;
    default: {
      /* SEND into rail-major A; node all-to-all -> B [l][kk] (from local l,
       * for node kk); into node-major A [kk][l]; rail all-to-all of m blocks
       * -> B [kk][l] (from (kk, l)); into group order in RECV. */
      uint64_t* blk = calloc((size_t)G, sizeof(uint64_t));
      if (!blk) {
        res = relaySystemError;
        break;
      }
      for (int g = 0; g < G; g++) {
        blk[g] = c1[g];
        c1[g] = c2[g] * (uint64_t)m;
      }
      needScratch(h, m, HIER_SLOT_A, c1);
      needScratch(h, m, HIER_SLOT_B, c1);
      phaseReorder(h, m, blk, planSendRef(0), ORDER_GROUP, sa, ORDER_RAIL);
      if (m > 1) res = phaseNodeLeg(h, m, relayCollectiveAllToAll, c2, sa, sb, NULL);
      else phaseReorder(h, m, blk, sa, ORDER_RAIL, sb, ORDER_RAIL);
      if (res == relaySuccess) {
        phaseReorder(h, m, blk, sb, ORDER_RAIL, sa, ORDER_NODE);
        res = phaseRails(h, m, relayCollectiveAllToAll, c3, sa, sb);
      }
      if (res == relaySuccess) phaseReorder(h, m, blk, sb, ORDER_NODE, planRecvRef(0), ORDER_GROUP);
      free(blk);
      break;
    }
  }
  free(c1);
  free(c2);
  free(c3);
  return res;
}

/* Groups with unequal actives per node: the collective as one sub-collective
 * of the group's ranks, all such groups in one step. */
static relayResult_t phaseIrregular(hierCtx* h) {
  const planKey* k = h->k;
  int step = -1;
  for (int g = 0; g < k->nGroups; g++) {
    if (h->kind[g] != 2 || k->counts[g] == 0) continue;
    if (relayCollReduces(k->coll) && k->nActive > PLAN_MAX_SRCS)
      return relayNotSupported; /* one reduce of A */
    if (step < 0) step = planAddStep(h->b);
    int sc = planSubCollNew(h->b, k->coll, k->ranks + g * k->nActive, k->nActive, k->counts[g]);
    if (sc < 0) return relaySystemError;
    int divisor = relayCollReduces(k->coll) && k->op == relayAvg ? k->nActive : 0;
    for (int i = 0; i < k->nActive; i++)
      planSubCollOp(h->b, planActiveRank(k, g, i), step, sc, planRecvRef(0), planSendRef(0), divisor);
  }
  return relaySuccess;
}

relayResult_t planBuildHier(planBuilder* b, planKeyBuildFn buildLeg) {
  const planKey* k = planBuilderKey(b);
  if (!relayCollIsLayout(k->coll) || !k->nodeOf || !buildLeg) return relayNotSupported;
  hierCtx h;
  relayResult_t res = hierInit(&h, k, b, buildLeg);
  if (res == relaySuccess) res = phaseInside(&h);
  /* One pass per distinct m, smallest first (every rank derives the same order). */
  for (int m = 1; m <= k->nActive && res == relaySuccess; m++) {
    int any = 0;
    for (int g = 0; g < k->nGroups; g++) any |= h.kind[g] == 1 && h.perNode[g] == m;
    if (any) res = phaseSpanning(&h, m);
  }
  if (res == relaySuccess) res = phaseIrregular(&h);
  hierFree(&h);
  return res;
}
