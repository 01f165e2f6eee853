/*
 * The relay route ("sharded relay"): the helpers of a group (every comm rank
 * outside it) lend their links, and part of each message travels two hops
 * through them. Every shape here is the two-group schedule: step 0 scatters
 * to the helpers (and carries a first direct part), step 1 has the helpers
 * forward (reduce-and-return where that pays) and carries the second direct
 * part. Fused calls (nGroups > 1) run every group in those same two steps.
 *
 * Coverage (A = nActive, H = nranks - A helpers per group; every shape needs
 * H >= 1 and 2 <= A <= PLAN_MAX_SRCS, else relayNotSupported):
 *
 *   collective      A     H             shape
 *   all-gather      >= 2  >= 1          fan-out: H slices via helpers, each
 *                                       helper fans a source's slice out to
 *                                       the other A-1 actives
 *   reduce-scatter  >= 2  >= 1          reduce-at-helper: helper h owns slice
 *                                       h of every block, sums its A-1 foreign
 *                                       contributions (A=2: passthrough) and
 *                                       returns one slice to the owner
 *   all-reduce      2     >= 1          helper reduces both contributions and
 *                                       returns one chunk to both actives;
 *                                       direct chunks A and B exchanged
 *   all-reduce      >= 3  >= 1          offload half reduced and broadcast by
 *                                       helpers; direct reduce-scatter, then
 *                                       direct all-gather of the rest
 *   all-to-all      2     >= 1          as all-gather (one destination)
 *   all-to-all      4     >= 4          Latin relay: helper = src XOR p[dst],
 *                                       p = {0,2,3,1}, 3 tasks per helper
 *   all-to-all      odd   >= A          Latin relay: helper = (src+dst) mod A,
 *                                       A-1 tasks per helper
 *   all-to-all      >= 3  >= A-1        (other A, or fewer helpers) cyclic
 *                                       relay: helper = (dst-src-1) mod A,
 *                                       A tasks per helper
 *   all-to-all      >= 3  <  A-1        relayNotSupported
 *
 * Link accounting per step (m = the per-group count the API takes: all-gather
 * sendcount, reduce-scatter recvcount, all-reduce count, all-to-all segment;
 * u = alignDown(m/(A+H), 128), the unit every helper carries):
 *   A=2, all four      step 0: u on each cross link, direct chunk A = u;
 *                      step 1: u back, direct chunk B = m-(H+1)u.
 *                      Critical path 2m/(H+2) = m/4 on 8 ranks, against m
 *                      for the direct exchange.
 *   all-gather A>=3    step 0: u up, direct u; step 1: the helper fans A-1
 *                      slices down one link, (A-1)u, beside direct (A-1)u+r.
 *                      A*u = m/2 at A=4 on 8 ranks (direct: m).
 *   reduce-scatter     the mirror: (A-1)u up beside direct (A-1)u, then one
 *   A>=3               reduced u down beside the rest. m/2 at A=4, 8 ranks.
 *   all-reduce A>=3    u per link per step on both halves: ~2m/(A+H) = m/4
 *                      at A=4 on 8 ranks (direct reduce-scatter+all-gather:
 *                      2m/A = m/2).
 *   all-to-all Latin   segment [directA | relay | directB], relay = directA =
 *                      alignDown(m/3, 128): each link carries one region per
 *                      step, 2m/3 in all (direct: m).
 * A unit of 0 (m too small to align) degrades every shape to a direct split
 * over the two steps (first part m/2), still a valid relay plan.
 *
 * key->depth > 1 still builds this two-group form: tiling is issue 4, and the
 * scatter / forward / direct-part emitters below take (step, offset, length)
 * so the pipelined shapes can call them per tile.
 *
 * Scratch: slot 0 holds what an active receives from its peers (and helpers)
 * before reducing it; slot 1 holds helper staging, one region per group the
 * rank helps, at offsets accumulated in group order, so a rank's staging for
 * each group it helps never collides with another group's or its own.
 */
#include <stdlib.h>

#include "plan/routes.h"

#define RELAY_ALIGN 128u /* elements: every region boundary a helper sees */

enum { SLOT_OWN = 0, SLOT_HELP = 1 };

static uint64_t alignDown(uint64_t x, uint64_t a) { return x / a * a; }

/* ---- geometry ------------------------------------------------------------ */

/* A message of m elements split for the helper shapes: H units of u at
 * [0, H*u) go through the helpers (unit h through helper h), and the direct
 * region [H*u, m) travels in two parts, the first in step 0 and the second
 * (which absorbs the remainder) in step 1. d1Units is the cross-link load of
 * step 0 in units, so the direct link carries what the cross links carry. */
typedef struct {
  uint64_t unit, relayLen; /* relayLen = H * unit */
  uint64_t d1Off, d1Len, d2Off, d2Len;
} relayGeom;

static uint64_t helperUnit(uint64_t m, int A, int H) { return alignDown(m / (uint64_t)(A + H), RELAY_ALIGN); }

static relayGeom geomHelpers(uint64_t m, int A, int H, uint64_t d1Units) {
  relayGeom g;
  g.unit = helperUnit(m, A, H);
  g.relayLen = (uint64_t)H * g.unit;
  uint64_t direct = m - g.relayLen; /* >= A*unit, so d1 fits */
  g.d1Off = g.relayLen;
  g.d1Len = g.unit ? d1Units * g.unit : direct / 2;
  g.d2Off = g.d1Off + g.d1Len;
  g.d2Len = m - g.d2Off;
  return g;
}

/* All-to-all segment [directA | relay | directB]: relay = directA =
 * alignDown(m/3, 128). Each step carries one region per link, so the optimum
 * is a third; directA is aligned like the relay (the reference found an
 * unaligned m/3 cost more than the relay saved) and directB takes the rest. */
static relayGeom geomLatin(uint64_t m) {
  relayGeom g;
  g.unit = alignDown(m / 3, RELAY_ALIGN);
  g.relayLen = g.unit;
  g.d1Off = 0;
  g.d1Len = g.unit ? g.unit : m / 2;
  g.d2Off = g.d1Len + g.unit;
  g.d2Len = m - g.d2Off;
  return g;
}

/* Helper index of the all-to-all task src -> dst (src != dst), or -1 when
 * there are too few helpers. Each helper's tasks have distinct sources and
 * distinct destinations, so every link carries one relay region per step. */
static int latinHelper(int A, int H, int src, int dst) {
  static const int p4[4] = {0, 2, 3, 1}; /* dst ^ p4[dst] = 0,3,1,2: the diagonal
                                            removes one task from each helper */
  if (A == 4 && H >= 4) return src ^ p4[dst];
  if ((A & 1) && H >= A) return (src + dst) % A; /* diagonal 2d mod A: distinct for odd A */
  if (H >= A - 1) return ((dst - src - 1) % A + A) % A;
  return -1;
}

static int latinHelpersUsed(int A, int H) {
  if (A == 4 && H >= 4) return 4;
  if ((A & 1) && H >= A) return A;
  return A - 1;
}

/* The task table of one (A, H): helper index and staging slot of each task,
 * and each helper's task count. A task's slot is its order of arrival at its
 * helper, sources outer, destinations inner (a helper has at most one task
 * per source). */
typedef struct {
  int helper[PLAN_MAX_SRCS * PLAN_MAX_SRCS]; /* [src * A + dst] */
  int slot[PLAN_MAX_SRCS * PLAN_MAX_SRCS];
  int tasks[PLAN_MAX_SRCS];
} latinTable;

static void latinBuild(latinTable* t, int A, int H) {
  for (int h = 0; h < PLAN_MAX_SRCS; h++) t->tasks[h] = 0;
  for (int s = 0; s < A; s++)
    for (int d = 0; d < A; d++) {
      if (d == s) continue;
      int h = latinHelper(A, H, s, d);
      t->helper[s * A + d] = h;
      t->slot[s * A + d] = t->tasks[h]++;
    }
}

/* ---- one group ----------------------------------------------------------- */

typedef struct {
  planBuilder* b;
  const planKey* k;
  int g, A, H;
  int s0, s1;
  uint64_t m;
  int divisor;           /* A for avg, else 0 */
  const int* act;        /* A comm ranks */
  int* help;             /* H comm ranks; helper index h is help[(h0 + h) % H] */
  int h0;
  const uint64_t* hbase; /* [nranks]: this group's staging offset in SLOT_HELP */
  const latinTable* lt;  /* all-to-all, A >= 3 */
} grp;

static int helperRank(const grp* c, int h) { return c->help[(c->h0 + h) % c->H]; }

static planRef staging(const grp* c, int rank, uint64_t off) {
  return planScratchRef(SLOT_HELP, c->hbase[rank] + off);
}

static void xfer(const grp* c, int step, int from, planRef src, int to, planRef dst, uint64_t n) {
  planSend(c->b, from, step, to, src, n);
  planRecv(c->b, to, step, from, dst, n);
}

/* A rank's own block: a self pair inside the exchange step in independent
 * calls (one launch fewer on NCCL), a local copy in fused ones (the seed saw
 * the self pair flake one run in four there on RCCL). */
static void ownBlock(const grp* c, int step, int rank, planRef dst, planRef src, uint64_t n) {
  if (c->k->nGroups == 1)
    xfer(c, step, rank, src, rank, dst, n);
  else
    planCopy(c->b, rank, step, dst, src, n);
}

/* Staging a helper needs for this group, in elements (per helper index). */
static uint64_t helperNeed(const grp* c, int h) {
  uint64_t A = (uint64_t)c->A, u = helperUnit(c->m, c->A, c->H);
  if (c->k->coll == RELAY_COLL_REDUCESCATTER) return A * (A - 1) * u; /* A-1 inputs per owner */
  if (c->k->coll == RELAY_COLL_ALLTOALL && c->A > 2) return (uint64_t)c->lt->tasks[h] * geomLatin(c->m).unit;
  return A * u; /* one unit per source */
}

/* Emitters below move one tile: [off, off+len) of each helper unit (depth 1:
 * the whole unit). Where the tile sits in a helper's staging is `st`: source
 * (or task) k at k*stride + at. Depth 1 stages whole units ({unit, 0}); the
 * pipelined shapes of issue 4 call the same emitters per tile with ping-pong
 * staging ({2*tile, (t%2)*tile}). */
typedef struct {
  uint64_t stride, at;
} stageAt;

static planRef stageRef(const grp* c, int rank, stageAt st, uint64_t k) {
  return staging(c, rank, k * st.stride + st.at);
}

/* -- fan-out: all-gather (any A), all-to-all (A = 2) --
 * Source i's relay slice h is the same for every destination, so helper h
 * stages it once and sends it to the A-1 others. */

static planRef fanSrc(const grp* c, int d) {
  return c->k->coll == RELAY_COLL_ALLGATHER ? planSendRef(0) : planSendRef((uint64_t)d * c->m);
}

/* The slice source of the relay: all-to-all fans out only at A = 2. */
static planRef fanRelaySrc(const grp* c, int i) { return fanSrc(c, 1 - i); }

static void fanScatter(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H; k++) {
      int h = (i + k) % c->H, hr = helperRank(c, h); /* stagger: sources start on different helpers */
      planRef src = planRefAdd(fanRelaySrc(c, i), (uint64_t)h * unit + off);
      xfer(c, step, c->act[i], src, hr, stageRef(c, hr, st, (uint64_t)i), len);
    }
}

static void fanForward(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int h = 0; h < c->H; h++) {
    int hr = helperRank(c, h);
    for (int i = 0; i < c->A; i++)
      for (int k = 1; k < c->A; k++) {
        int d = (i + k) % c->A;
        xfer(c, step, hr, stageRef(c, hr, st, (uint64_t)i), c->act[d],
             planRecvRef((uint64_t)i * c->m + (uint64_t)h * unit + off), len);
      }
  }
}

/* Block region [off, off+len) of every source straight to every other active. */
static void fanDirect(const grp* c, int step, uint64_t off, uint64_t len) {
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int d = (i + k) % c->A;
      xfer(c, step, c->act[i], planRefAdd(fanSrc(c, d), off), c->act[d], planRecvRef((uint64_t)i * c->m + off), len);
    }
}

static void buildFanout(const grp* c) {
  relayGeom geo = geomHelpers(c->m, c->A, c->H, 1);
  stageAt st = {geo.unit, 0};
  for (int i = 0; i < c->A; i++)
    ownBlock(c, c->s0, c->act[i], planRecvRef((uint64_t)i * c->m), fanSrc(c, i), c->m);
  fanScatter(c, c->s0, geo.unit, 0, geo.unit, st);
  fanDirect(c, c->s0, geo.d1Off, geo.d1Len);
  fanForward(c, c->s1, geo.unit, 0, geo.unit, st);
  fanDirect(c, c->s1, geo.d2Off, geo.d2Len);
}

/* -- Latin relay: all-to-all, A >= 3 --
 * Task src -> dst carries the relay region of that segment through its one
 * helper, staged at the task's slot. segOff is the offset in the segment. */

static void latinScatter(const grp* c, int step, uint64_t segOff, uint64_t len, stageAt st) {
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int d = (i + k) % c->A, hr = helperRank(c, c->lt->helper[i * c->A + d]);
      xfer(c, step, c->act[i], planSendRef((uint64_t)d * c->m + segOff), hr,
           stageRef(c, hr, st, (uint64_t)c->lt->slot[i * c->A + d]), len);
    }
}

static void latinForward(const grp* c, int step, uint64_t segOff, uint64_t len, stageAt st) {
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int d = (i + k) % c->A, hr = helperRank(c, c->lt->helper[i * c->A + d]);
      xfer(c, step, hr, stageRef(c, hr, st, (uint64_t)c->lt->slot[i * c->A + d]), c->act[d],
           planRecvRef((uint64_t)i * c->m + segOff), len);
    }
}

static void latinDirect(const grp* c, int step, uint64_t segOff, uint64_t len) {
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int d = (i + k) % c->A;
      xfer(c, step, c->act[i], planSendRef((uint64_t)d * c->m + segOff), c->act[d],
           planRecvRef((uint64_t)i * c->m + segOff), len);
    }
}

static void buildLatin(const grp* c) {
  relayGeom geo = geomLatin(c->m);
  stageAt st = {geo.unit, 0};
  for (int i = 0; i < c->A; i++)
    ownBlock(c, c->s0, c->act[i], planRecvRef((uint64_t)i * c->m), planSendRef((uint64_t)i * c->m), c->m);
  /* step 0: directA straight, the relay region up to its helper; step 1: the
   * helper forwards it beside directB */
  latinDirect(c, c->s0, geo.d1Off, geo.d1Len);
  latinScatter(c, c->s0, geo.d1Len, geo.unit, st);
  latinForward(c, c->s1, geo.d1Len, geo.unit, st);
  latinDirect(c, c->s1, geo.d2Off, geo.d2Len);
}

/* -- reduce-at-helper: reduce-scatter, any A --
 * Helper h owns slice h of every block. For owner j its staging holds the
 * A-1 foreign contributions as tasks j*(A-1) + peerSlot; it reduces them into
 * the first (sources in active order) and returns one slice. The owner's
 * slot 0 holds peer slot 0 as a full mirror of the block (its relay range
 * receives the helpers' partials) and peer slots 1..A-2 over the direct
 * region only. */

static planRef rsPeer(const grp* c, const relayGeom* geo, int peerSlot, uint64_t off) {
  if (peerSlot == 0) return planScratchRef(SLOT_OWN, off);
  uint64_t direct = c->m - geo->relayLen;
  return planScratchRef(SLOT_OWN, c->m + (uint64_t)(peerSlot - 1) * direct + (off - geo->relayLen));
}

static uint64_t rsTask(const grp* c, int i, int j) {
  return (uint64_t)j * (uint64_t)(c->A - 1) + (uint64_t)planPeerSlot(i, j);
}

static void rsScatter(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H; k++) {
      int h = (i + k) % c->H, hr = helperRank(c, h);
      for (int kj = 1; kj < c->A; kj++) {
        int j = (i + kj) % c->A;
        xfer(c, step, c->act[i], planSendRef((uint64_t)j * c->m + (uint64_t)h * unit + off), hr,
             stageRef(c, hr, st, rsTask(c, i, j)), len);
      }
    }
}

/* The helpers sum the A-1 foreign contributions (A = 2: nothing to sum); avg
 * divides once, at the owner. */
static void rsHelperReduce(const grp* c, int step, uint64_t len, stageAt st) {
  if (c->A == 2) return;
  for (int h = 0; h < c->H; h++) {
    int hr = helperRank(c, h);
    for (int j = 0; j < c->A; j++) {
      planRef srcs[PLAN_MAX_SRCS];
      for (int p = 0; p < c->A - 1; p++) srcs[p] = stageRef(c, hr, st, (uint64_t)j * (uint64_t)(c->A - 1) + (uint64_t)p);
      planReduce(c->b, hr, step, srcs[0], srcs, c->A - 1, len, 0);
    }
  }
}

static void rsReturn(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int h = 0; h < c->H; h++) {
    int hr = helperRank(c, h);
    for (int k = 0; k < c->A; k++) {
      int j = (h + k) % c->A;
      xfer(c, step, hr, stageRef(c, hr, st, (uint64_t)j * (uint64_t)(c->A - 1)), c->act[j],
           planScratchRef(SLOT_OWN, (uint64_t)h * unit + off), len);
    }
  }
}

static void rsDirect(const grp* c, const relayGeom* geo, int step, uint64_t off, uint64_t len) {
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int j = (i + k) % c->A;
      xfer(c, step, c->act[i], planSendRef((uint64_t)j * c->m + off), c->act[j],
           rsPeer(c, geo, planPeerSlot(i, j), off), len);
    }
}

/* The owner folds in its own contribution: the direct region over all A
 * inputs in active order, the relay region over (own, helper partial). */
static void rsOwnerReduce(const grp* c, const relayGeom* geo, int step) {
  int A = c->A;
  for (int j = 0; j < A; j++) {
    int me = c->act[j];
    planRef own = planSendRef((uint64_t)j * c->m), part = planScratchRef(SLOT_OWN, 0);
    planRef two[2] = {j == 0 ? own : part, j == 0 ? part : own};
    planNeedScratch(c->b, me, SLOT_OWN, c->m + (uint64_t)(A - 2) * (c->m - geo->relayLen));
    if (A == 2) { /* both regions have the same two inputs: one reduce */
      planReduce(c->b, me, step, planRecvRef(0), two, 2, c->m, c->divisor);
      continue;
    }
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < A; i++)
      srcs[i] = i == j ? planRefAdd(own, geo->relayLen) : rsPeer(c, geo, planPeerSlot(i, j), geo->relayLen);
    planReduce(c->b, me, step, planRecvRef(geo->relayLen), srcs, A, c->m - geo->relayLen, c->divisor);
    planReduce(c->b, me, step, planRecvRef(0), two, 2, geo->relayLen, c->divisor);
  }
}

static void buildReduceAtHelper(const grp* c) {
  relayGeom geo = geomHelpers(c->m, c->A, c->H, (uint64_t)(c->A - 1));
  stageAt st = {geo.unit, 0};
  rsScatter(c, c->s0, geo.unit, 0, geo.unit, st);
  rsDirect(c, &geo, c->s0, geo.d1Off, geo.d1Len);
  rsHelperReduce(c, c->s0, geo.unit, st);
  rsReturn(c, c->s1, geo.unit, 0, geo.unit, st);
  rsDirect(c, &geo, c->s1, geo.d2Off, geo.d2Len);
  rsOwnerReduce(c, &geo, c->s1);
}

/* -- all-reduce --
 * Offload (both A = 2 and A >= 3): helper h receives unit h from every
 * active, reduces all A in active order (one chunk, so every active gets the
 * same bits) and returns it to each active. */

static void arOffloadScatter(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H; k++) {
      int h = (i + k) % c->H, hr = helperRank(c, h);
      xfer(c, step, c->act[i], planSendRef((uint64_t)h * unit + off), hr, stageRef(c, hr, st, (uint64_t)i), len);
    }
}

static void arOffloadReduce(const grp* c, int step, uint64_t len, stageAt st) {
  for (int h = 0; h < c->H; h++) {
    int hr = helperRank(c, h);
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < c->A; i++) srcs[i] = stageRef(c, hr, st, (uint64_t)i);
    planReduce(c->b, hr, step, srcs[0], srcs, c->A, len, c->divisor);
  }
}

static void arOffloadReturn(const grp* c, int step, uint64_t unit, uint64_t off, uint64_t len, stageAt st) {
  for (int h = 0; h < c->H; h++) {
    int hr = helperRank(c, h);
    for (int k = 0; k < c->A; k++) {
      int j = (h + k) % c->A;
      xfer(c, step, hr, stageRef(c, hr, st, 0), c->act[j], planRecvRef((uint64_t)h * unit + off), len);
    }
  }
}

/* A = 2 direct region: chunk A in step 0, chunk B in step 1, each landing in
 * the peer's slot 0 (a mirror of the direct region); both actives then reduce
 * (a0, a1) in that order, so both hold the same bits. */
static void arExchange(const grp* c, const relayGeom* geo, int step, uint64_t off, uint64_t len) {
  for (int i = 0; i < 2; i++)
    xfer(c, step, c->act[i], planSendRef(off), c->act[1 - i], planScratchRef(SLOT_OWN, off - geo->relayLen), len);
}

static void arExchangeReduce(const grp* c, const relayGeom* geo, int step) {
  uint64_t direct = c->m - geo->relayLen;
  for (int j = 0; j < 2; j++) {
    planRef mine = planSendRef(geo->relayLen), peer = planScratchRef(SLOT_OWN, 0);
    planRef srcs[2] = {j == 0 ? mine : peer, j == 0 ? peer : mine};
    planNeedScratch(c->b, c->act[j], SLOT_OWN, direct);
    planReduce(c->b, c->act[j], step, planRecvRef(geo->relayLen), srcs, 2, direct, c->divisor);
  }
}

/* A >= 3 direct region: reduce-scatter of A shards in step s0 (the owner
 * reduces its shard into recv), all-gather of the shards in step s1. */
static void arShards(const grp* c, const relayGeom* geo, int s0, int s1) {
  int A = c->A;
  uint64_t direct = c->m - geo->relayLen, stride = (direct + (uint64_t)A - 1) / (uint64_t)A;
  for (int j = 0; j < A; j++) {
    uint64_t off, len;
    planSplit(direct, A, j, &off, &len);
    off += geo->relayLen;
    int owner = c->act[j];
    planRef srcs[PLAN_MAX_SRCS];
    for (int k = 0; k < A; k++) {
      int i = (j + k) % A;
      if (i == j) {
        srcs[i] = planSendRef(off);
        continue;
      }
      srcs[i] = planScratchRef(SLOT_OWN, (uint64_t)planPeerSlot(i, j) * stride);
      xfer(c, s0, c->act[i], planSendRef(off), owner, srcs[i], len);
      xfer(c, s1, owner, planRecvRef(off), c->act[i], planRecvRef(off), len);
    }
    planNeedScratch(c->b, owner, SLOT_OWN, (uint64_t)(A - 1) * stride);
    planReduce(c->b, owner, s0, planRecvRef(off), srcs, A, len, c->divisor);
  }
}

static void buildAllReduce(const grp* c) {
  relayGeom geo = geomHelpers(c->m, c->A, c->H, 1);
  stageAt st = {geo.unit, 0};
  arOffloadScatter(c, c->s0, geo.unit, 0, geo.unit, st);
  arOffloadReduce(c, c->s0, geo.unit, st);
  arOffloadReturn(c, c->s1, geo.unit, 0, geo.unit, st);
  if (c->A > 2) {
    arShards(c, &geo, c->s0, c->s1);
    return;
  }
  arExchange(c, &geo, c->s0, geo.d1Off, geo.d1Len);
  arExchange(c, &geo, c->s1, geo.d2Off, geo.d2Len);
  arExchangeReduce(c, &geo, c->s1);
}

/* ---- the route ------------------------------------------------------------ */

static relayResult_t relaySupported(const planKey* k) {
  int A = k->nActive, H = k->nranks - k->nActive;
  if ((unsigned)k->coll >= RELAY_NUM_COLLS) return relayInvalidArgument;
  /* no helper, nothing to relay through: direct is the whole answer */
  if (A < 2 || A > PLAN_MAX_SRCS || H < 1 || k->nGroups < 1) return relayNotSupported;
  if (k->coll == RELAY_COLL_ALLTOALL && A > 2 && latinHelper(A, H, 0, 1) < 0) return relayNotSupported;
  return relaySuccess;
}

relayResult_t planBuildRelay(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  relayResult_t res = relaySupported(k);
  if (res != relaySuccess) return res;
  int n = k->nranks, A = k->nActive, H = n - A;
  int* help = malloc((size_t)H * sizeof *help);
  uint64_t* total = calloc((size_t)n, sizeof *total); /* staging used so far per rank */
  uint64_t* hbase = calloc((size_t)n, sizeof *hbase);
  char* inGroup = malloc((size_t)n);
  int latin = k->coll == RELAY_COLL_ALLTOALL && A > 2;
  latinTable* lt = latin ? malloc(sizeof *lt) : NULL;
  if (!help || !total || !hbase || !inGroup || (latin && !lt)) {
    free(help);
    free(total);
    free(hbase);
    free(inGroup);
    free(lt);
    return relaySystemError;
  }
  if (latin) latinBuild(lt, A, H);
  int s0 = planAddStep(b), s1 = planAddStep(b);
  for (int g = 0; g < k->nGroups; g++) {
    grp c = {b, k, g, A, H, s0, s1, k->counts[g], k->op == relayAvg ? A : 0, &k->ranks[g * A], help, 0, hbase, lt};
    for (int r = 0; r < n; r++) inGroup[r] = 0;
    for (int i = 0; i < A; i++) inGroup[c.act[i]] = 1;
    int nh = 0;
    for (int r = 0; r < n; r++)
      if (!inGroup[r]) help[nh++] = r;
    /* The Latin relay uses only some helpers: rotate the start per group so
     * fused groups spread their relay over different ranks. */
    if (latin) c.h0 = (g * latinHelpersUsed(A, H)) % H;
    for (int h = 0; h < H; h++) {
      int r = helperRank(&c, h);
      uint64_t need = helperNeed(&c, h);
      hbase[r] = total[r];
      total[r] += need;
      if (need) planNeedScratch(b, r, SLOT_HELP, total[r]);
    }
    switch (k->coll) {
      case RELAY_COLL_ALLGATHER: buildFanout(&c); break;
      case RELAY_COLL_REDUCESCATTER: buildReduceAtHelper(&c); break;
      case RELAY_COLL_ALLREDUCE: buildAllReduce(&c); break;
      default:
        if (A == 2)
          buildFanout(&c);
        else
          buildLatin(&c);
        break;
    }
  }
  free(help);
  free(total);
  free(hbase);
  free(inGroup);
  free(lt);
  return relaySuccess;
}
