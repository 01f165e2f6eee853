/*
 * The relay route ("sharded relay"): the helpers of a group (every comm rank
 * outside it) lend their links, and part of each message travels two hops
 * through them.
 *
 * Every shape is written once, for a depth T (src/plan/pipe.h): the relay
 * part is cut into T tiles per helper and the schedule has T+1 steps; step k
 * scatters tile k to the helpers while they forward (reduce-and-return where
 * that pays) tile k-1, and a direct part travels beside both. T = 1 is the
 * two-group schedule: step 0 scatters (and carries a first direct part), step
 * 1 forwards (and carries the rest). Fused calls (nGroups > 1) always run the
 * two-group schedule, every group in the same two steps: there every rank is
 * active in one group and a helper in the others, so its scatter and its
 * forward are egress on the same link direction; they add rather than
 * overlap, and extra stages would be pure boundary cost (the seed's reason
 * for gating pipelining on nGroups == 1; the 16-stage pipeline of D115998361
 * lost for it).
 *
 * Why pipelining pays in an independent call: actives and helpers are
 * disjoint, so in the two-group form a cross link carries only the scatter in
 * one direction (step 0) and only the forward in the other (step 1): every
 * cross link is half duplex for the whole call. With tile t's forward in the
 * step of tile t+1's scatter both directions are busy in every step.
 *
 * Coverage (A = nActive, H = nranks - A helpers per group; every shape needs
 * H >= 1 and 2 <= A <= PLAN_MAX_SRCS, else relayNotSupported). Every shape
 * pipelines:
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
 *                                       direct chunks exchanged beside it
 *   all-reduce      >= 3  >= 1          offload part reduced and broadcast by
 *                                       helpers; direct reduce-scatter, then
 *                                       direct all-gather of the rest
 *   all-to-all      2     >= 1          as all-gather (one destination)
 *   broadcast       2     >= 1          as all-gather from the root only: the
 *                                       relay copy (its buffer split between
 *                                       the direct link and one share per
 *                                       helper, pipelined)
 *   broadcast       >= 3  >= 1          scatter to every rank, then every rank
 *                                       forwards (plan_bcast.c; two steps)
 *   reduce          2     >= 1          as reduce-scatter to the root only: the
 *                                       non-root's buffer split between the
 *                                       direct link and one share per helper,
 *                                       each helper forwarding its share to the
 *                                       root, which reduces (pipelined)
 *   reduce          >= 3  >= 1          this route's reduce-scatter, then a
 *                                       gather of the slices to the root
 *                                       (plan_bcast.c; three steps)
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
 * u = the unit, m / totalUnits(T) aligned down to 128 elements; the last
 * direct part absorbs what alignment leaves; numbers for 8 ranks):
 *   A=2, all four      every step: u up each cross link (tile k's scatter),
 *                      u down (tile k-1's forward), u on the direct link.
 *                      m = ((H+1)T+1)u, path (T+1)u: m/4 at T=1 (the
 *                      two-group form; direct: m), 9m/57 at T=8, towards
 *                      m/7, the floor (an active moves its buffer out over its
 *                      7 links once).
 *   all-gather A>=3    step 0: u up, direct u; steps 1..T: the helper fans
 *                      A-1 slices down one link, (A-1)u, beside direct (A-1)u.
 *                      m = ((H+A-1)T+1)u, path ((A-1)T+1)u: m/2 at T=1,
 *                      13m/29 at T=4, towards 3m/7 (A=4). A link carries one
 *                      unit up for every three down, so merging only gains
 *                      1.12x at T=4 (the seed measured more: staging stays in
 *                      cache).
 *   reduce-scatter     the mirror: steps 0..T-1 carry (A-1)u up beside direct
 *   A>=3               (A-1)u; steps 1..T one reduced u down; step T's direct
 *                      is u. Same totals as all-gather.
 *   all-reduce A>=3    two-group at T=1: u per link per step, 2m/(A+H) = m/4.
 *                      Pipelined (T>=2), y = m/((A+2H)T): step k carries the
 *                      offload tile k up (2y to each helper) and the reduced
 *                      tile k-1 down (2y), and on each direct link shard tile
 *                      k (y, reduce-scatter) beside shard tile k-1 (y,
 *                      all-gather): 2(T+1)y = 5m/24 at T=4, 3m/16 at T=8. At
 *                      T=1 that form would move m/3, at T=2 m/4 with one more
 *                      boundary: why depth 1 stays the two-group form and the
 *                      depth model has its own selector for this shape.
 *   all-to-all Latin   segment regions travel [direct | relay] per stage: one
 *                      region of u per link per step, m = (2T+1)u, path
 *                      (T+1)u: 2m/3 at T=1 (direct: m), towards m/2.
 * A unit of 0 (m too small to align) degrades every shape to a direct split
 * over the two steps (first part m/2), still a valid relay plan; a forced
 * depth too deep for the message is clamped to the deepest whose unit holds
 * 128 elements (planSetDepth says which).
 *
 * Two things the seed learned after pipelining, in the plan so every
 * transport gets them:
 *   - 2-active reduce-scatter: the owner's closing reduce was 0.608 ms of a
 *     2.642 ms call at 1 GB, serial after the last transfer. The block is
 *     laid out stage-major (region 0 = direct chunk 0, region k = relay stage
 *     k-1's H pieces then direct chunk k), so the arrivals of step k are one
 *     contiguous region, reduced on the side lane in that step; only the join
 *     at the end waits for it.
 *   - operation granularity: RCCL budgets channels per operation, so within
 *     a step every link carries its bytes as operations of one size. Where
 *     an intra link carried (A-1)u as one operation beside cross links
 *     carrying A-1 operations of u, the direct part goes as u-sized pieces:
 *     4-active reduce-scatter always (it measured 56% -> 73-83% of roofline),
 *     all-gather from 256 MiB (kRelayUniformDirectOpMinBytes: below it the
 *     extra operations did not amortize); the 4-active all-reduce's offload
 *     tile 2y goes as two y pieces from 256 MiB. The 2-active shapes and the
 *     Latin relay already ship unit-sized operations.
 *
 * Scratch: slot 0 holds what an active receives from its peers (and helpers)
 * before reducing it; slot 1 holds helper staging, one region per group the
 * rank helps, at offsets accumulated in group order, so a rank's staging for
 * each group it helps never collides with another group's or its own. When
 * pipelined, staging is two ping-pong tiles per source (receive tile k into
 * k%2 while forwarding k-1 from (k-1)%2) instead of the whole chunk: a
 * forwarded tile is still cache-resident when it is read back.
 */
#include <stdlib.h>

#include "comm/common.h"
#include "plan/pipe.h"
#include "plan/routes.h"

#define RELAY_ALIGN RELAY_PIPE_MIN_UNIT /* elements: every region boundary a helper sees */

/* kRelayUniformDirectOpMinBytes: per-rank message bytes from which the
 * pipelined all-gather and all-reduce issue unit-sized operations (seed:
 * measured to pay there, not below). */
#define RELAY_UNIFORM_OP_MIN_BYTES (256ull << 20)

enum { SLOT_OWN = 0, SLOT_HELP = 1 };

static uint64_t alignDown(uint64_t x, uint64_t a) { return x / a * a; }

/* ---- shapes and geometry ------------------------------------------------- */

static relayResult_t relaySupported(const planKey* k);

/* One group's message of m elements at depth T: P relay pieces per stage
 * (one per helper, or the segment's one helper in the Latin relay), T
 * stages, each piece a unit; direct chunk k travels in step k and holds
 * dFirst (k = 0), dMid (0 < k < T) or dLast (k = T) units, the last also
 * what alignment leaves. The direct chunk of a step is sized to what the
 * busiest cross link carries in it, so the step's busiest link carries its
 * direct units: linkUnits(T) = dFirst + dMid*(T-1) + dLast and totalUnits(T)
 * = P*T + linkUnits(T), the shape the depth model reads.
 *
 * Grouped layout: the relay region [0, P*T*unit), piece p's tiles contiguous
 * (tile t at (p*T + t)*unit, so T = 1 is piece p at p*unit), then the direct
 * chunks in order. Stage-major layout: the arrivals of step k are contiguous,
 * region 0 = direct chunk 0 and region k = relay stage k-1 then direct chunk
 * k. */
typedef struct {
  int P, dFirst, dMid, dLast, stageMajor;
} pipeForm;

/* The form of every shape but the 4-active all-reduce (which has shards). */
static pipeForm formOf(const planKey* k) {
  int A = k->nActive, H = k->nranks - A;
  pipeForm f = {H, 1, 1, 1, 0};              /* 2-active all-reduce and all-to-all */
  if (k->coll == relayCollectiveAllGather) { /* u up; then A-1 slices down per helper link */
    f.dMid = f.dLast = A - 1;
  } else if (k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveReduce) {
    /* A-1 slices up; then one reduced down (reduce: A = 2 only, the root's block) */
    f.dFirst = f.dMid = A - 1;
    f.stageMajor = A == 2; /* the owner reduces each step's arrivals as they land */
  } else if (k->coll == relayCollectiveAllToAll && A > 2) { /* Latin: one tile per task */
    f.P = 1;
    f.stageMajor = 1; /* T = 1 keeps the reference's [directA | relay | directB] */
  }
  return f;
}

int planRelayPipeShape(const planKey* k, relayPipeShape* out) {
  if (relaySupported(k) != relaySuccess || k->nGroups != 1) return -1;
  /* A > 2 broadcast and reduce: two and three steps, no pipeline (plan_bcast.c) */
  if (relayCollRooted(k->coll) && k->nActive > 2) return -1;
  int A = k->nActive, H = k->nranks - A;
  relayPipeShape s = {0, 0, 0, 0, 0};
  if (k->coll == relayCollectiveAllReduce && A > 2) {
    /* A shards of y and H offload pieces of 2y per tile; 2y on each link in
     * each of the T+1 steps */
    s.linkPerTile = 2;
    s.linkFixed = 2;
    s.totalPerTile = A + 2 * H;
    s.ownForm = 1;
  } else {
    pipeForm f = formOf(k);
    s.linkPerTile = f.dMid;
    s.linkFixed = f.dFirst + f.dLast - f.dMid;
    s.totalPerTile = f.P + f.dMid;
    s.totalFixed = s.linkFixed;
  }
  *out = s;
  return 0;
}

/* The depth the builder runs: 1 for fused calls, else the key's, halved
 * until a unit holds 128 elements (the depth model never asks for less). */
static int pipeDepth(const planKey* k) {
  relayPipeShape s;
  int T = k->depth;
  if (T <= 1 || planRelayPipeShape(k, &s) != 0) return 1;
  while (T > 1 && k->counts[0] / relayPipeTotalUnits(&s, T) < RELAY_ALIGN) T /= 2;
  return T;
}

typedef struct {
  uint64_t m, unit, relayLen; /* relayLen = P*T*unit */
  int T;
  pipeForm f;
} pipeGeom;

static pipeGeom geomMake(uint64_t m, int T, pipeForm f) {
  pipeGeom g = {m, 0, 0, T, f};
  uint64_t total = (uint64_t)f.P * (uint64_t)T + (uint64_t)f.dFirst + (uint64_t)f.dLast +
                   (uint64_t)(T - 1) * (uint64_t)f.dMid;
  g.unit = alignDown(m / total, RELAY_ALIGN); /* 0 only at T = 1 (pipeDepth) */
  g.relayLen = (uint64_t)f.P * (uint64_t)T * g.unit;
  return g;
}

static uint64_t dUnits(const pipeGeom* g, int k) {
  return (uint64_t)(k == 0 ? g->f.dFirst : k == g->T ? g->f.dLast : g->f.dMid);
}

/* Direct elements before chunk k. A unit of 0: two halves. */
static uint64_t dBefore(const pipeGeom* g, int k) {
  if (k == 0) return 0;
  if (!g->unit) return g->m / 2;
  return ((uint64_t)g->f.dFirst + (uint64_t)(k - 1) * (uint64_t)g->f.dMid) * g->unit;
}

static uint64_t directLen(const pipeGeom* g, int k) {
  if (k < g->T) return g->unit ? dUnits(g, k) * g->unit : g->m / 2;
  return g->m - g->relayLen - dBefore(g, g->T);
}

static uint64_t directOff(const pipeGeom* g, int k) {
  return dBefore(g, k) + (g->f.stageMajor ? (uint64_t)k * (uint64_t)g->f.P * g->unit : g->relayLen);
}

/* Offset of piece p of relay stage t. */
static uint64_t relayOff(const pipeGeom* g, int t, int p) {
  if (g->f.stageMajor) return dBefore(g, t + 1) + ((uint64_t)t * (uint64_t)g->f.P + (uint64_t)p) * g->unit;
  return ((uint64_t)p * (uint64_t)g->T + (uint64_t)t) * g->unit;
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
  int A, H, T;
  uint64_t m;
  int divisor;    /* A for avg, else 0 */
  const int* act; /* A comm ranks */
  int* help;      /* H comm ranks; helper index h is help[(h0 + h) % H] */
  int h0;
  const uint64_t* hbase; /* [nranks]: this group's staging offset in SLOT_HELP */
  const latinTable* lt;  /* all-to-all, A >= 3 */
  pipeGeom geo;
  uint64_t tile;  /* elements of one staged tile (geo.unit) */
  uint64_t piece; /* > 0: operations of this size where the seed found it pays */
} grp;

static int helperRank(const grp* c, int h) { return c->help[(c->h0 + h) % c->H]; }

static void xfer(const grp* c, int step, int from, planRef src, int to, planRef dst, uint64_t n) {
  planSend(c->b, from, step, to, src, n);
  planRecv(c->b, to, step, from, dst, n);
}

/* n elements as `pieces` operations: pieces-1 of c->piece, the last the
 * rest (one operation when pieces <= 1 or no piece size is set). */
static void xferSplit(const grp* c, int step, int from, planRef src, int to, planRef dst, uint64_t n,
                      uint64_t pieces) {
  if (!c->piece || pieces <= 1 || n <= (pieces - 1) * c->piece) {
    xfer(c, step, from, src, to, dst, n);
    return;
  }
  for (uint64_t i = 0; i + 1 < pieces; i++)
    xfer(c, step, from, planRefAdd(src, i * c->piece), to, planRefAdd(dst, i * c->piece), c->piece);
  uint64_t done = (pieces - 1) * c->piece;
  xfer(c, step, from, planRefAdd(src, done), to, planRefAdd(dst, done), n - done);
}

/* A rank's own block: a self pair inside the exchange step in independent
 * calls (one launch fewer on NCCL), a local copy in fused ones (the seed saw
 * the self pair flake one run in four there on RCCL). */
static void ownBlock(const grp* c, int step, int rank, planRef dst, planRef src, uint64_t n) {
  if (c->k->nGroups == 1) xfer(c, step, rank, src, rank, dst, n);
  else planCopy(c->b, rank, step, dst, src, n);
}

/* Staging slots helper h needs per tile. */
static uint64_t helperSlots(const grp* c, int h) {
  uint64_t A = (uint64_t)c->A;
  if (c->k->coll == relayCollectiveReduceScatter) return A * (A - 1); /* A-1 inputs per owner */
  if (c->k->coll == relayCollectiveReduce) return A - 1;              /* one owner: the root */
  if (c->k->coll == relayCollectiveAllToAll && c->A > 2) return (uint64_t)c->lt->tasks[h];
  return A; /* one per source */
}

/* Slot q of relay stage t at helper index h (rank hr): K slots of one tile,
 * twice when pipelined, ((t%2)*K + q)*tile, so the slots of one tile are
 * contiguous with stride tile (the fused multi-input reduce wants that). */
static planRef stageRef(const grp* c, int h, int t, uint64_t q) {
  int hr = helperRank(c, h);
  uint64_t parity = c->T > 1 ? (uint64_t)(t % 2) : 0;
  return planScratchRef(SLOT_HELP, c->hbase[hr] + (parity * helperSlots(c, h) + q) * c->tile);
}

static uint64_t helperNeed(const grp* c, int h) { return (c->T > 1 ? 2u : 1u) * helperSlots(c, h) * c->tile; }

/* Direct chunk k as operations of one unit where the group splits. */
static uint64_t directPieces(const grp* c, int k) { return c->piece ? dUnits(&c->geo, k) : 1; }

/* -- fan-out: all-gather (any A), all-to-all (A = 2), broadcast (A = 2: the relay copy) --
 * Source i's relay slice is the same for every destination, so helper h
 * stages it once and sends it to the A-1 others. A broadcast has one source,
 * the root, and its block lands at RECV offset 0. */

static int fanIsSource(const grp* c, int i) {
  return c->k->coll != relayCollectiveBroadcast || i == c->k->root;
}

static planRef fanSrc(const grp* c, int d) {
  relayCollective_t coll = c->k->coll;
  return coll == relayCollectiveAllToAll ? planSendRef((uint64_t)d * c->m) : planSendRef(0);
}

/* Where source i's block lands in a destination's RECV. */
static uint64_t fanRecvOff(const grp* c, int i) {
  return c->k->coll == relayCollectiveBroadcast ? 0 : (uint64_t)i * c->m;
}

/* The slice source of the relay: all-to-all fans out only at A = 2. */
static planRef fanRelaySrc(const grp* c, int i) { return fanSrc(c, 1 - i); }

/* Stage t up, in step t. */
static void fanScatter(const grp* c, int t) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H && fanIsSource(c, i); k++) {
      int h = (i + k) % c->H; /* stagger: sources start on different helpers */
      planRef src = planRefAdd(fanRelaySrc(c, i), relayOff(&c->geo, t, h));
      xfer(c, t, c->act[i], src, helperRank(c, h), stageRef(c, h, t, (uint64_t)i), c->tile);
    }
}

/* Stage t down, in step t+1. */
static void fanForward(const grp* c, int t) {
  for (int h = 0; h < c->H; h++)
    for (int i = 0; i < c->A; i++)
      for (int k = 1; k < c->A && fanIsSource(c, i); k++) {
        int d = (i + k) % c->A;
        xfer(c, t + 1, helperRank(c, h), stageRef(c, h, t, (uint64_t)i), c->act[d],
             planRecvRef(fanRecvOff(c, i) + relayOff(&c->geo, t, h)), c->tile);
      }
}

/* Direct chunk k of every source straight to every other active, in step k. */
static void fanDirect(const grp* c, int k) {
  uint64_t off = directOff(&c->geo, k), len = directLen(&c->geo, k);
  for (int i = 0; i < c->A; i++)
    for (int j = 1; j < c->A && fanIsSource(c, i); j++) {
      int d = (i + j) % c->A;
      xferSplit(c, k, c->act[i], planRefAdd(fanSrc(c, d), off), c->act[d],
                planRecvRef(fanRecvOff(c, i) + off), len, directPieces(c, k));
    }
}

static void buildFanout(const grp* c) {
  for (int i = 0; i < c->A; i++)
    if (fanIsSource(c, i)) ownBlock(c, 0, c->act[i], planRecvRef(fanRecvOff(c, i)), fanSrc(c, i), c->m);
  for (int k = 0; k <= c->T; k++) {
    if (k < c->T) fanScatter(c, k);
    if (k > 0) fanForward(c, k - 1);
    fanDirect(c, k);
  }
}

/* -- Latin relay: all-to-all, A >= 3 --
 * Task src -> dst carries the relay tiles of that segment through its one
 * helper, staged at the task's slot. */

static void latinTask(const grp* c, int i, int d, int* h, uint64_t* slot) {
  *h = c->lt->helper[i * c->A + d];
  *slot = (uint64_t)c->lt->slot[i * c->A + d];
}

/* Tile t of every task, one hop: 0, the source's segment to its helper's
 * stage (step t); 1, the helper's stage on to the destination (step t+1). */
static void latinHop(const grp* c, int t, int hop) {
  uint64_t off = relayOff(&c->geo, t, 0);
  for (int i = 0; i < c->A; i++)
    for (int k = 1; k < c->A; k++) {
      int d = (i + k) % c->A, h;
      uint64_t slot;
      latinTask(c, i, d, &h, &slot);
      if (hop == 0)
        xfer(c, t, c->act[i], planSendRef((uint64_t)d * c->m + off), helperRank(c, h),
             stageRef(c, h, t, slot), c->tile);
      else
        xfer(c, t + 1, helperRank(c, h), stageRef(c, h, t, slot), c->act[d],
             planRecvRef((uint64_t)i * c->m + off), c->tile);
    }
}

static void latinDirect(const grp* c, int k) {
  uint64_t off = directOff(&c->geo, k), len = directLen(&c->geo, k);
  for (int i = 0; i < c->A; i++)
    for (int j = 1; j < c->A; j++) {
      int d = (i + j) % c->A;
      xfer(c, k, c->act[i], planSendRef((uint64_t)d * c->m + off), c->act[d],
           planRecvRef((uint64_t)i * c->m + off), len);
    }
}

static void buildLatin(const grp* c) {
  for (int i = 0; i < c->A; i++)
    ownBlock(c, 0, c->act[i], planRecvRef((uint64_t)i * c->m), planSendRef((uint64_t)i * c->m), c->m);
  for (int k = 0; k <= c->T; k++) {
    latinDirect(c, k);
    if (k < c->T) latinHop(c, k, 0);
    if (k > 0) latinHop(c, k - 1, 1);
  }
}

/* -- reduce-at-helper: reduce-scatter, any A; reduce, A = 2 --
 * Helper h owns the relay pieces h of every block. A reduce has one owner,
 * the root, and one block per source, the whole SEND (rsOwns, rsBlock): the
 * mirror of the relay copy. For owner j its staging
 * holds the A-1 foreign contributions as tasks j*(A-1) + peerSlot; it
 * reduces them into the first (sources in active order) and returns one
 * tile. The owner's slot 0 holds peer slot 0 as a full mirror of the block
 * (its relay ranges receive the helpers' partials) and peer slots 1..A-2
 * over the direct region only (A >= 3, grouped layout). */

static planRef rsPeer(const grp* c, int peerSlot, uint64_t off) {
  if (peerSlot == 0) return planScratchRef(SLOT_OWN, off);
  uint64_t direct = c->m - c->geo.relayLen;
  return planScratchRef(SLOT_OWN, c->m + (uint64_t)(peerSlot - 1) * direct + (off - c->geo.relayLen));
}

static int rsOwns(const grp* c, int j) { return c->k->coll != relayCollectiveReduce || j == c->k->root; }

/* Where owner j's block starts in a source's SEND. */
static uint64_t rsBlock(const grp* c, int j) {
  return c->k->coll == relayCollectiveReduce ? 0 : (uint64_t)j * c->m;
}

/* Owner j's first task at a helper (its A-1 inputs follow): the owner's index among the owners, times A-1. */
static uint64_t rsOwnerTask(const grp* c, int j) {
  return (c->k->coll == relayCollectiveReduce ? 0 : (uint64_t)j) * (uint64_t)(c->A - 1);
}

static uint64_t rsTask(const grp* c, int i, int j) {
  return rsOwnerTask(c, j) + (uint64_t)planPeerSlot(i, j);
}

static void rsScatter(const grp* c, int t) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H; k++) {
      int h = (i + k) % c->H;
      for (int kj = 1; kj < c->A; kj++) {
        int j = (i + kj) % c->A;
        if (!rsOwns(c, j)) continue;
        xfer(c, t, c->act[i], planSendRef(rsBlock(c, j) + relayOff(&c->geo, t, h)), helperRank(c, h),
             stageRef(c, h, t, rsTask(c, i, j)), c->tile);
      }
    }
}

/* The helpers sum the A-1 foreign contributions of stage t in step t, which
 * gates its return (A = 2: nothing to sum); avg divides once, at the owner. */
static void rsHelperReduce(const grp* c, int t) {
  if (c->A == 2) return;
  for (int h = 0; h < c->H; h++)
    for (int j = 0; j < c->A; j++) {
      planRef srcs[PLAN_MAX_SRCS];
      for (int p = 0; p < c->A - 1; p++)
        srcs[p] = stageRef(c, h, t, (uint64_t)j * (uint64_t)(c->A - 1) + (uint64_t)p);
      planReduce(c->b, helperRank(c, h), t, srcs[0], srcs, c->A - 1, c->tile, 0);
    }
}

static void rsReturn(const grp* c, int t) {
  for (int h = 0; h < c->H; h++)
    for (int k = 0; k < c->A; k++) {
      int j = (h + k) % c->A;
      if (!rsOwns(c, j)) continue;
      xfer(c, t + 1, helperRank(c, h), stageRef(c, h, t, rsOwnerTask(c, j)), c->act[j],
           rsPeer(c, 0, relayOff(&c->geo, t, h)), c->tile);
    }
}

static void rsDirect(const grp* c, int k) {
  uint64_t off = directOff(&c->geo, k), len = directLen(&c->geo, k);
  for (int i = 0; i < c->A; i++)
    for (int kj = 1; kj < c->A; kj++) {
      int j = (i + kj) % c->A;
      if (!rsOwns(c, j)) continue;
      xferSplit(c, k, c->act[i], planSendRef(rsBlock(c, j) + off), c->act[j],
                rsPeer(c, planPeerSlot(i, j), off), len, directPieces(c, k));
    }
}

/* Owner j's reduce of [off, off+n) of its block over (own, mirror), in
 * active order, into its output. */
static void rsReduce2(const grp* c, int j, int step, uint64_t off, uint64_t n) {
  planRef own = planSendRef(rsBlock(c, j) + off), part = planScratchRef(SLOT_OWN, off);
  planRef two[2] = {j == 0 ? own : part, j == 0 ? part : own};
  planReduce(c->b, c->act[j], step, planRecvRef(off), two, 2, n, c->divisor);
}

/* The owner folds in its own contribution. A = 2, pipelined: region k (the
 * arrivals of step k, stage-major) on the side lane in step k, so step k+1
 * never waits for it (issuing the T+1 reduces on the main lane would
 * serialize them where the one trailing reduce was). A = 2 at T = 1: one
 * reduce at the end (the two-group form). A >= 3: at the end, the direct
 * region over all A inputs in active order, the relay region over (own,
 * helper partial). */
static void rsOwnerReduce(const grp* c) {
  int A = c->A, T = c->T;
  const pipeGeom* g = &c->geo;
  for (int j = 0; j < A; j++) {
    int me = c->act[j];
    if (!rsOwns(c, j)) continue;
    planNeedScratch(c->b, me, SLOT_OWN, c->m + (uint64_t)(A - 2) * (c->m - g->relayLen));
    if (A == 2 && T == 1) {
      rsReduce2(c, j, T, 0, c->m);
    } else if (A == 2) {
      planSetLane(c->b, 1);
      for (int k = 0; k <= T; k++) {
        uint64_t lo = k ? relayOff(g, k - 1, 0) : 0, hi = directOff(g, k) + directLen(g, k);
        rsReduce2(c, j, k, lo, hi - lo);
      }
      planSetLane(c->b, 0);
    } else {
      planRef srcs[PLAN_MAX_SRCS];
      for (int i = 0; i < A; i++)
        srcs[i] = i == j ? planSendRef((uint64_t)j * c->m + g->relayLen)
                         : rsPeer(c, planPeerSlot(i, j), g->relayLen);
      planReduce(c->b, me, T, planRecvRef(g->relayLen), srcs, A, c->m - g->relayLen, c->divisor);
      rsReduce2(c, j, T, 0, g->relayLen);
    }
  }
}

static void buildReduceAtHelper(const grp* c) {
  for (int k = 0; k <= c->T; k++) {
    if (k < c->T) rsScatter(c, k);
    if (k > 0) rsReturn(c, k - 1);
    rsDirect(c, k);
    if (k < c->T) rsHelperReduce(c, k);
  }
  rsOwnerReduce(c);
}

/* -- all-reduce --
 * Offload (A = 2 and A >= 3): helper h receives piece h of stage t from
 * every active, reduces all A in active order (one result, so every active
 * gets the same bits) in step t, and returns it to each active in step t+1. */

static void arOffloadScatter(const grp* c, int t) {
  for (int i = 0; i < c->A; i++)
    for (int k = 0; k < c->H; k++) {
      int h = (i + k) % c->H;
      xferSplit(c, t, c->act[i], planSendRef(relayOff(&c->geo, t, h)), helperRank(c, h),
                stageRef(c, h, t, (uint64_t)i), c->tile, 2);
    }
}

static void arOffloadReduce(const grp* c, int t) {
  for (int h = 0; h < c->H; h++) {
    planRef srcs[PLAN_MAX_SRCS];
    for (int i = 0; i < c->A; i++) srcs[i] = stageRef(c, h, t, (uint64_t)i);
    planReduce(c->b, helperRank(c, h), t, srcs[0], srcs, c->A, c->tile, c->divisor);
  }
}

static void arOffloadReturn(const grp* c, int t) {
  for (int h = 0; h < c->H; h++)
    for (int k = 0; k < c->A; k++) {
      int j = (h + k) % c->A;
      xferSplit(c, t + 1, helperRank(c, h), stageRef(c, h, t, 0), c->act[j],
                planRecvRef(relayOff(&c->geo, t, h)), c->tile, 2);
    }
}

/* A = 2 direct chunk k, landing in the peer's slot 0 (a mirror of the
 * direct region); both actives reduce (a0, a1) in that order at the end, so
 * both hold the same bits. */
static void arExchange(const grp* c, int k) {
  uint64_t off = directOff(&c->geo, k), len = directLen(&c->geo, k);
  for (int i = 0; i < 2; i++)
    xfer(c, k, c->act[i], planSendRef(off), c->act[1 - i], planScratchRef(SLOT_OWN, off - c->geo.relayLen),
         len);
}

static void arExchangeReduce(const grp* c) {
  uint64_t rl = c->geo.relayLen, direct = c->m - rl;
  for (int j = 0; j < 2; j++) {
    planRef mine = planSendRef(rl), peer = planScratchRef(SLOT_OWN, 0);
    planRef srcs[2] = {j == 0 ? mine : peer, j == 0 ? peer : mine};
    planNeedScratch(c->b, c->act[j], SLOT_OWN, direct);
    planReduce(c->b, c->act[j], c->T, planRecvRef(rl), srcs, 2, direct, c->divisor);
  }
}

/* A >= 3 direct shards of [lo, lo+len): a reduce-scatter of A near-equal
 * shards in step t (each owner reduces its shard into recv at the end of the
 * step, from its peers' contributions, contiguous with a fixed stride), the
 * all-gather of them in step t+1. Two-group: the whole direct region at t = 0;
 * pipelined: shard tile t of A*y (the last to the end) per stage. */
static void arShards(const grp* c, uint64_t lo, uint64_t len, int t) {
  int A = c->A;
  uint64_t stride = (len + (uint64_t)A - 1) / (uint64_t)A;
  for (int j = 0; j < A; j++) {
    uint64_t off, n;
    planSplit(len, A, j, &off, &n);
    off += lo;
    int owner = c->act[j];
    planRef srcs[PLAN_MAX_SRCS];
    for (int k = 0; k < A; k++) {
      int i = (j + k) % A;
      if (i == j) {
        srcs[i] = planSendRef(off);
        continue;
      }
      srcs[i] = planScratchRef(SLOT_OWN, (uint64_t)planPeerSlot(i, j) * stride);
      xfer(c, t, c->act[i], planSendRef(off), owner, srcs[i], n);
      xfer(c, t + 1, owner, planRecvRef(off), c->act[i], planRecvRef(off), n);
    }
    planNeedScratch(c->b, owner, SLOT_OWN, (uint64_t)(A - 1) * stride);
    planReduce(c->b, owner, t, planRecvRef(off), srcs, A, n, c->divisor);
  }
}

static void buildAllReduce(const grp* c) {
  for (int k = 0; k <= c->T; k++) {
    if (k < c->T) {
      arOffloadScatter(c, k);
      arOffloadReduce(c, k);
    }
    if (k > 0) arOffloadReturn(c, k - 1);
    if (c->A == 2) arExchange(c, k);
  }
  if (c->A == 2) {
    arExchangeReduce(c);
    return;
  }
  uint64_t rl = c->geo.relayLen, y = c->geo.unit / 2;
  if (c->T == 1) {
    arShards(c, rl, c->m - rl, 0);
    return;
  }
  for (int t = 0; t < c->T; t++) {
    uint64_t lo = rl + (uint64_t)t * (uint64_t)c->A * y;
    arShards(c, lo, t + 1 < c->T ? (uint64_t)c->A * y : c->m - lo, t);
  }
}

/* The geometry of group c's message at its depth, and where operations are
 * split (pipelined only: the seed's fix was measured on those paths). */
static void groupGeometry(grp* c) {
  int A = c->A, H = c->H, T = c->T;
  uint64_t bytes = c->m * relayTypeSize(c->k->dtype);
  c->piece = 0;
  if (c->k->coll == relayCollectiveAllReduce && A > 2) {
    /* offload pieces of 2y (T = 1: the two-group unit), then direct shards;
     * only the relay part of the geometry is used */
    pipeForm f = {H, 0, 0, 0, 0};
    c->geo = geomMake(c->m, T, f);
    c->geo.unit = T == 1 ? alignDown(c->m / (uint64_t)(A + H), RELAY_ALIGN)
                         : 2 * alignDown(c->m / ((uint64_t)(A + 2 * H) * (uint64_t)T), RELAY_ALIGN);
    c->geo.relayLen = (uint64_t)H * (uint64_t)T * c->geo.unit;
    if (T > 1 && bytes >= RELAY_UNIFORM_OP_MIN_BYTES) c->piece = c->geo.unit / 2;
  } else {
    c->geo = geomMake(c->m, T, formOf(c->k));
    /* 4-active reduce-scatter always; all-gather from 256 MiB */
    if (T > 1 && A > 2 && c->k->coll == relayCollectiveReduceScatter) c->piece = c->geo.unit;
    if (T > 1 && A > 2 && c->k->coll == relayCollectiveAllGather && bytes >= RELAY_UNIFORM_OP_MIN_BYTES)
      c->piece = c->geo.unit;
  }
  c->tile = c->geo.unit;
}

/* ---- the route ------------------------------------------------------------ */

static relayResult_t relaySupported(const planKey* k) {
  int A = k->nActive, H = k->nranks - k->nActive;
  if (!relayCollOnLayout(k->coll)) return relayInvalidArgument;
  /* no helper, nothing to relay through: direct is the whole answer */
  if (A < 2 || A > PLAN_MAX_SRCS || H < 1 || k->nGroups < 1) return relayNotSupported;
  /* Rooted on a layout (a root position): broadcast (A = 2: the relay copy, the fan-out below; A > 2:
   * scatter to every rank, then every rank forwards) and reduce (A = 2: reduce-at-helper to the root;
   * A > 2: reduce-scatter, then gather to the root; plan_bcast.c). */
  if (relayCollRooted(k->coll) && (k->root < 0 || k->root >= A)) return relayNotSupported;
  if (k->coll == relayCollectiveAllToAll && A > 2 && latinHelper(A, H, 0, 1) < 0) return relayNotSupported;
  return relaySuccess;
}

relayResult_t planBuildRelay(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  relayResult_t res = relaySupported(k);
  if (res != relaySuccess) return res;
  if (k->coll == relayCollectiveBroadcast && k->nActive > 2) return planBuildBroadcastRelay(b);
  if (k->coll == relayCollectiveReduce && k->nActive > 2) return planBuildReduceRelay(b);
  int n = k->nranks, A = k->nActive, H = n - A, T = pipeDepth(k);
  int* help = malloc((size_t)H * sizeof *help);
  uint64_t* total = calloc((size_t)n, sizeof *total); /* staging used so far per rank */
  uint64_t* hbase = calloc((size_t)n, sizeof *hbase);
  char* inGroup = malloc((size_t)n);
  int latin = k->coll == relayCollectiveAllToAll && A > 2;
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
  planSetDepth(b, T);
  for (int s = 0; s <= T; s++) planAddStep(b);
  for (int g = 0; g < k->nGroups; g++) {
    grp c;
    c.b = b;
    c.k = k;
    c.A = A;
    c.H = H;
    c.T = T;
    c.m = k->counts[g];
    c.divisor = k->op == relayAvg ? A : 0;
    c.act = &k->ranks[g * A];
    c.help = help;
    c.h0 = 0;
    c.hbase = hbase;
    c.lt = lt;
    groupGeometry(&c);
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
      case relayCollectiveAllGather:
      case relayCollectiveBroadcast: buildFanout(&c); break;
      case relayCollectiveReduceScatter:
      case relayCollectiveReduce: buildReduceAtHelper(&c); break;
      case relayCollectiveAllReduce: buildAllReduce(&c); break;
      default:
        if (A == 2) buildFanout(&c);
        else buildLatin(&c);
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
