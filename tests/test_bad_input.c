/*
 * No silent wrong result (issue 15), on the shm transport:
 *  - all-c0, all-c1: every rank passes the same bad argument, for every
 *    argument check in api.c, in check mode 0 / 1; the next valid call must
 *    succeed on every rank with the serial reference's data (one comm for
 *    all kinds, so one rejection left over would fail every later call).
 *  - one-<route>-<kind>: one rank alone makes a buffer error (NULL buffer,
 *    in-place all-to-all) or a shape error (bad datatype, counts that differ,
 *    bad root) in check mode 0, on every collective, route (direct, relay at
 *    depth 1 and 3, one-shot, bw, bwwin: bw with every buffer in a registered
 *    window, the direct path) and the rooted calls; a rank that returns
 *    success, in the bad call or the next, must hold the reference's data;
 *    after a buffer error the next call succeeds everywhere.
 *  - rdzv-vars, rdzv-ppid: launches of 2-rank jobs under ONE job name, each
 *    its own parent process (and, for -vars, its own MASTER_PORT with the
 *    TORCHELASTIC_RUN_ID torchrun gives without --standalone), two started
 *    together and a third while they run, 20 times: sums that would mix jobs
 *    must never appear.
 *  - rdzv-dup0, rdzv-dup1: a second process with rank 0 / 1 at an open
 *    rendezvous is refused with relayInvalidUsage naming the job and rank;
 *    the job then completes with the right ranks.
 *  - topo-own: every rank given a bad RELAYCC_TOPO names its own value.
 *  - mixed-c0, mixed-c1: rank 2 calls an all-reduce (or all-gather) where its peers call a
 *    reduce-scatter on the same layout of 4 (issue 25.2: in check mode 0 a route's lazy region setup on
 *    one side, a wait for its push on the other): every rank fails well before its 20 s deadline,
 *    nothing is written, inputs unchanged; check mode 1: relayInvalidUsage everywhere and the next call
 *    right; check mode 0: the comm is failed on every rank, a new one is right.
 *  - rooted-c0, rooted-c1: a scatter or gather whose root differs on one rank (a member naming another
 *    member, itself, or the root naming another rank; issue 25.3): every rank returns relayInvalidUsage
 *    at once, nothing is written, and the next good scatter is right on every rank (both modes).
 *
 * Usage: test_bad_input <case>
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "colls_common.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"

#define NR 4
#define COUNT 96 /* elements per block: every relay depth up to 3 has whole tiles */
#define POISON 0xCD

static const int kPair[2] = {0, 1}; /* A = 2 active, ranks 2 and 3 help */
/* Rooted: root 0 outside the set, members with blocks of different sizes. */
static const int kSet[3] = {1, 2, 3};
static const size_t kSetCounts[3] = {50, 70, 90};
#define SET_TOTAL 210

typedef enum {
  F_NONE,
  /* buffer errors: the shape is valid */
  F_SEND_NULL,
  F_RECV_NULL,
  F_INPLACE_A2A,
  F_ROOT_NULL,   /* the root's buffer */
  F_MEMBER_NULL, /* set member kSet[1]'s buffer */
  /* shape errors */
  F_DTYPE,
  F_OP,
  F_LAYOUT_NULL,
  F_NGROUPS0,
  F_NACTIVE1,
  F_NACTIVE_BIG,
  F_TOO_MANY,
  F_RANKS_NULL,
  F_RANK_RANGE,
  F_RANK_DUP,
  F_COUNTS_NULL,
  F_COUNTS_OVERFLOW,
  F_COUNTS_DIFFER, /* locally valid, differs from the peers' */
  F_ROOT_RANGE,
  F_ROOT_NEG,
  F_NRANKS0,
  F_NRANKS_BIG,
} fault;

static const char* const kFaultNames[] = {"none",
                                          "sendbuff NULL",
                                          "recvbuff NULL",
                                          "in-place all-to-all",
                                          "root buffer NULL",
                                          "member buffer NULL",
                                          "datatype 10",
                                          "op 7",
                                          "layout NULL",
                                          "nGroups 0",
                                          "nActive 1",
                                          "nActive 65",
                                          "3 x 2 ranks",
                                          "ranks NULL",
                                          "rank 9",
                                          "rank twice",
                                          "counts NULL",
                                          "count overflow",
                                          "counts differ",
                                          "root 4",
                                          "root -1",
                                          "nRanks 0",
                                          "nRanks 5"};

static int faultIsBuffer(fault f) { return f >= F_SEND_NULL && f <= F_MEMBER_NULL; }

static relayConfig_t cfgFor(int check, int route, int depth) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000; /* a wait this long is a failure: every case below must end by an error at once */
  cfg.checkMode = check;
  cfg.route = route;
  cfg.depth = depth;
  return cfg;
}

static double tNowSec(void) { return (double)relayNowNs() / 1e9; }

/* one-bwwin-*: every rank's buffers of the layout calls lie in one
 * registered window (gWin, at the same offsets on every rank), so the good
 * calls take the bandwidth route's direct path (asserted), and a rank that
 * passes a bad buffer runs through scratch, outside it. */
#define WIN_FLOATS (8 * COUNT + 64) /* send (<= 4 COUNT + 8) at 8, recv (<= 2 COUNT + 8) at 4 COUNT + 24 */
static float* gWin;
static uint32_t gWinId;

/* One layout call on {0, 1} (rank 2 and 3 help), with fault f when bad is
 * set on this rank. Inputs encode source, destination and position
 * (tc_fill_input) times k, which differs from call to call so that data
 * left by an earlier call shows (every collective here is linear in its
 * inputs: sums and copies of integers, exact in fp32); outputs are
 * poisoned; on success the output is compared with the serial reference
 * times k. Returns the call's result. */
static void scale(float* p, size_t n, int k) {
  for (size_t i = 0; i < n; i++) p[i] *= (float)k;
}

static relayResult_t layoutCall(relayComm_t comm, int rank, relayCollective_t coll, fault f, int bad,
                                int wantRoute, int k, const char* tag) {
  const relayDataType_t dt = relayFloat32;
  const relayRedOp_t op = relaySum;
  const int A = 2, me = rank < A ? rank : -1;
  size_t counts[1] = {COUNT};
  size_t c = me >= 0 ? COUNT : 0, sn = tc_send_elems(coll, A, COUNT), rn = tc_recv_elems(coll, A, COUNT);
  int inWin = gWin && !(bad && f == F_COUNTS_DIFFER);
  float* sbuf = inWin ? gWin + 8 : malloc((sn + rn + 8) * sizeof(float));
  float* rbuf = inWin ? gWin + 4 * COUNT + 24 : malloc((rn + 8) * sizeof(float));
  float* want = malloc((rn + 8) * sizeof(float));
  T_CHECK(sbuf && rbuf && want, "rank %d: out of memory", rank);
  memset(sbuf, POISON, (sn + rn + 8) * sizeof(float));
  memset(rbuf, POISON, (rn + 8) * sizeof(float));
  if (me >= 0) {
    tc_fill_input(coll, dt, op, A, me, c, sbuf);
    scale(sbuf, sn, k);
  }
  const void* sendp = me >= 0 ? sbuf : NULL;
  void* recvp = me >= 0 ? rbuf : NULL;
  relayLayout_t L = {1, A, kPair};
  const relayLayout_t* Lp = &L;
  int ranksBad[2] = {kPair[0], kPair[1]};
  relayDataType_t dtArg = dt;
  relayRedOp_t opArg = op;
  const size_t* countsArg = counts;
  size_t countsOther[1] = {COUNT + 3}, countsHuge[1] = {SIZE_MAX / 2};
  if (bad) {
    switch (f) {
      case F_SEND_NULL:
        if (me >= 0) sendp = NULL;
        break;
      case F_RECV_NULL:
        if (me >= 0) recvp = NULL;
        break;
      case F_INPLACE_A2A:
        if (me >= 0) sendp = recvp;
        break;
      case F_DTYPE: dtArg = (relayDataType_t)10; break;
      case F_OP: opArg = (relayRedOp_t)7; break;
      case F_LAYOUT_NULL: Lp = NULL; break;
      case F_NGROUPS0: L.nGroups = 0; break;
      case F_NACTIVE1: L.nActive = 1; break;
      case F_NACTIVE_BIG: L.nActive = PLAN_MAX_SRCS + 1; break;
      case F_TOO_MANY: L.nGroups = 3; break;
      case F_RANKS_NULL: L.ranks = NULL; break;
      case F_RANK_RANGE: ranksBad[1] = 9, L.ranks = ranksBad; break;
      case F_RANK_DUP: ranksBad[1] = ranksBad[0], L.ranks = ranksBad; break;
      case F_COUNTS_NULL: countsArg = NULL; break;
      case F_COUNTS_OVERFLOW: countsArg = countsHuge; break;
      case F_COUNTS_DIFFER: countsArg = countsOther; break;
      default: T_CHECK(0, "fault %d is not a layout fault", (int)f);
    }
  }
  if (bad && f == F_COUNTS_DIFFER && me >= 0) { /* room for what this rank believes */
    free(rbuf);
    rbuf = malloc((tc_recv_elems(coll, A, COUNT + 3) + 8) * sizeof(float));
    free(sbuf);
    sbuf = malloc((tc_send_elems(coll, A, COUNT + 3) + 8) * sizeof(float));
    T_CHECK(sbuf && rbuf, "out of memory");
    tc_fill_input(coll, dt, op, A, me, COUNT + 3, sbuf);
    sendp = sbuf;
    recvp = rbuf;
  }
  relayResult_t res = tc_run(coll, sendp, recvp, countsArg, dtArg, opArg, Lp, comm);
  if (res == relaySuccess && !bad) {
    if (wantRoute > 0) {
      int route, depth;
      relayCommLastRoute(comm, &route, &depth);
      T_CHECK(route == wantRoute, "rank %d: %s: %s ran route %s, the case forces %s", rank, tag,
              relayCollName(coll), relayRouteName(route), relayRouteName(wantRoute));
      T_CHECK(!gWin || comm->last.window == (me >= 0 ? gWinId : 0),
              "rank %d: %s: %s: direct path of window %u, want %u", rank, tag, relayCollName(coll),
              comm->last.window, me >= 0 ? gWinId : 0);
    }
    if (me >= 0) {
      tc_expected(coll, dt, op, A, me, c, want);
      scale(want, rn, k);
      size_t first = 0, wrong = tc_compare(dt, rbuf, want, rn, &first);
      T_CHECK(wrong == 0,
              "rank %d: %s: %s returned success with %zu of %zu elements wrong (first %zu: %g, want %g)",
              rank, tag, relayCollName(coll), wrong, rn, first, tc_as_double(dt, rbuf, first),
              tc_as_double(dt, want, first));
    }
  }
  if (!inWin) {
    free(sbuf);
    free(rbuf);
  }
  free(want);
  return res;
}

/* Block i of the rooted calls: element e of the block member kSet[i] owns. */
static float rootedValue(int i, size_t e, int k) {
  float v;
  tc_value(relayFloat32, relaySum, i, 7, e, &v);
  return v * (float)k;
}

/* One scatter / gather from root 0 to kSet, fault f when bad is set on this
 * rank; on success this rank's output is checked element by element. */
static relayResult_t rootedCall(relayComm_t comm, int rank, relayCollective_t coll, fault f, int bad, int k,
                                const char* tag) {
  int scatter = coll == relayCollectiveScatter, root = 0, idx = -1;
  for (int i = 0; i < 3; i++)
    if (kSet[i] == rank) idx = i;
  size_t off[4] = {0};
  for (int i = 0; i < 3; i++) off[i + 1] = off[i] + kSetCounts[i];
  float* rootBuf = malloc((SET_TOTAL + 8) * sizeof(float));
  float* memberBuf = malloc((SET_TOTAL + 8) * sizeof(float));
  T_CHECK(rootBuf && memberBuf, "out of memory");
  memset(rootBuf, POISON, (SET_TOTAL + 8) * sizeof(float));
  memset(memberBuf, POISON, (SET_TOTAL + 8) * sizeof(float));
  if (rank == root && scatter)
    for (int i = 0; i < 3; i++)
      for (size_t e = 0; e < kSetCounts[i]; e++) rootBuf[off[i] + e] = rootedValue(i, e, k);
  if (idx >= 0 && !scatter)
    for (size_t e = 0; e < kSetCounts[idx]; e++) memberBuf[e] = rootedValue(idx, e, k);
  const void* sendp = NULL;
  void* recvp = NULL;
  if (rank == root) {
    if (scatter) sendp = rootBuf;
    else recvp = rootBuf;
  }
  if (idx >= 0) {
    if (scatter) recvp = memberBuf;
    else sendp = memberBuf;
  }
  int setBad[3] = {kSet[0], kSet[1], kSet[2]};
  const int* set = kSet;
  int n = 3, rootArg = root;
  relayDataType_t dt = relayFloat32;
  size_t countsOther[3] = {50, 71, 90}, countsHuge[3] = {SIZE_MAX / 2, 1, 1};
  const size_t* counts = kSetCounts;
  if (bad) {
    switch (f) {
      case F_ROOT_NULL:
        if (rank == root) {
          if (scatter) sendp = NULL;
          else recvp = NULL;
        }
        break;
      case F_MEMBER_NULL:
        if (idx == 1) {
          if (scatter) recvp = NULL;
          else sendp = NULL;
        }
        break;
      case F_DTYPE: dt = (relayDataType_t)10; break;
      case F_ROOT_RANGE: rootArg = NR; break;
      case F_ROOT_NEG: rootArg = -1; break;
      case F_NRANKS0: n = 0; break;
      case F_NRANKS_BIG: n = NR + 1; break;
      case F_RANKS_NULL: set = NULL; break;
      case F_RANK_RANGE: setBad[2] = 9, set = setBad; break;
      case F_RANK_DUP: setBad[2] = setBad[0], set = setBad; break;
      case F_COUNTS_NULL: counts = NULL; break;
      case F_COUNTS_OVERFLOW: counts = countsHuge; break;
      case F_COUNTS_DIFFER: counts = countsOther; break;
      default: T_CHECK(0, "fault %d is not a rooted fault", (int)f);
    }
  }
  relayResult_t res = tc_run_rooted(coll, sendp, recvp, counts, dt, rootArg, set, n, comm);
  if (res == relaySuccess && !bad) {
    size_t wrong = 0, first = 0;
    float got = 0, exp = 0;
    if (scatter && idx >= 0) {
      for (size_t e = 0; e < kSetCounts[idx]; e++)
        if (memberBuf[e] != rootedValue(idx, e, k) && !wrong++)
          first = e, got = memberBuf[e], exp = rootedValue(idx, e, k);
    } else if (!scatter && rank == root) {
      for (int i = 0; i < 3; i++)
        for (size_t e = 0; e < kSetCounts[i]; e++)
          if (rootBuf[off[i] + e] != rootedValue(i, e, k) && !wrong++)
            first = off[i] + e, got = rootBuf[off[i] + e], exp = rootedValue(i, e, k);
    }
    T_CHECK(wrong == 0, "rank %d: %s: %s returned success with %zu elements wrong (first %zu: %g, want %g)",
            rank, tag, relayCollName(coll), wrong, first, (double)got, (double)exp);
  }
  free(rootBuf);
  free(memberBuf);
  return res;
}

static relayResult_t anyCall(relayComm_t comm, int rank, relayCollective_t coll, fault f, int bad,
                             int wantRoute, int k, const char* tag) {
  return relayCollRooted(coll) ? rootedCall(comm, rank, coll, f, bad, k, tag)
                               : layoutCall(comm, rank, coll, f, bad, wantRoute, k, tag);
}

/* ---- every rank passes the same bad argument ----------------------------- */

typedef struct {
  relayCollective_t coll;
  fault f;
} allFault;

static const allFault kAllFaults[] = {
    {relayCollectiveAllReduce, F_DTYPE},        {relayCollectiveAllReduce, F_OP},
    {relayCollectiveAllReduce, F_LAYOUT_NULL},  {relayCollectiveAllReduce, F_NGROUPS0},
    {relayCollectiveAllReduce, F_NACTIVE1},     {relayCollectiveAllReduce, F_NACTIVE_BIG},
    {relayCollectiveAllReduce, F_TOO_MANY},     {relayCollectiveAllReduce, F_RANKS_NULL},
    {relayCollectiveAllReduce, F_RANK_RANGE},   {relayCollectiveAllReduce, F_RANK_DUP},
    {relayCollectiveAllReduce, F_COUNTS_NULL},  {relayCollectiveAllReduce, F_COUNTS_OVERFLOW},
    {relayCollectiveAllReduce, F_SEND_NULL},    {relayCollectiveAllReduce, F_RECV_NULL},
    {relayCollectiveAllGather, F_SEND_NULL},    {relayCollectiveReduceScatter, F_RECV_NULL},
    {relayCollectiveAllToAll, F_INPLACE_A2A},   {relayCollectiveScatter, F_DTYPE},
    {relayCollectiveScatter, F_ROOT_RANGE},     {relayCollectiveGather, F_ROOT_NEG},
    {relayCollectiveGather, F_NRANKS0},         {relayCollectiveScatter, F_NRANKS_BIG},
    {relayCollectiveGather, F_RANKS_NULL},      {relayCollectiveScatter, F_RANK_RANGE},
    {relayCollectiveGather, F_RANK_DUP},        {relayCollectiveScatter, F_COUNTS_NULL},
    {relayCollectiveGather, F_COUNTS_OVERFLOW}, {relayCollectiveScatter, F_ROOT_NULL},
    {relayCollectiveGather, F_ROOT_NULL},       {relayCollectiveScatter, F_MEMBER_NULL},
    {relayCollectiveGather, F_MEMBER_NULL},
};

/* Did this rank itself make fault f (its own argument is bad)? */
static int makesFault(int rank, relayCollective_t coll, fault f) {
  switch (f) {
    case F_SEND_NULL:
    case F_RECV_NULL:
    case F_INPLACE_A2A: return rank < 2;
    case F_ROOT_NULL: return rank == 0;
    case F_MEMBER_NULL: return rank == kSet[1];
    default: (void)coll; return 1;
  }
}

static int allRejectRank(int rank, int nranks, void* arg) {
  int check = *(const int*)arg;
  relayConfig_t cfg = cfgFor(check, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT);
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  char tag[160];
  for (size_t k = 0; k < sizeof kAllFaults / sizeof kAllFaults[0]; k++) {
    const allFault* af = &kAllFaults[k];
    snprintf(tag, sizeof tag, "check mode %d, every rank: %s of %s, then a valid call", check,
             kFaultNames[af->f], relayCollName(af->coll));
    relayResult_t res =
        anyCall(comm, rank, af->coll, af->f, 1, 0, (int)(2 + 2 * (k % 2)), tag); /* 2 or 4: see layoutCall */
    /* Scatter and gather take the call's agreement in check mode 0 too on shm (README): every rank returns
     * the rejection. */
    if (makesFault(rank, af->coll, af->f) || check || relayCollRooted(af->coll))
      T_CHECK(res == relayInvalidArgument, "rank %d: %s: the bad call returned %s (%s)", rank, tag,
              relayGetErrorString(res), relayGetLastError(comm));
    else
      T_CHECK(res == relaySuccess || res == relayRemoteError,
              "rank %d: %s: a good rank's part returned %s (%s)", rank, tag, relayGetErrorString(res),
              relayGetLastError(comm));
    res = anyCall(comm, rank, af->coll, F_NONE, 0, 0, (int)(3 + 2 * (k % 2)), tag);
    T_CHECK(res == relaySuccess, "rank %d: %s: the valid call returned %s (%s)", rank, tag,
            relayGetErrorString(res), relayGetLastError(comm));
  }
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* ---- one rank alone --------------------------------------------------------- */

typedef struct {
  relayCollective_t coll;
  fault f;
  int badRank;
  int route, depth;
  int windowed; /* one-bwwin-*: the buffers in a registered window */
} oneArg;

static int oneRejectRank(int rank, int nranks, void* argp) {
  const oneArg* a = argp;
  relayConfig_t cfg = cfgFor(0, a->route, a->depth);
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  relayWindow_t win = NULL;
  if (a->windowed) {
    gWin = malloc(WIN_FLOATS * sizeof(float));
    T_CHECK(gWin, "out of memory");
    T_OK(relayCommRegister(comm, gWin, WIN_FLOATS * sizeof(float), &win));
    T_CHECK(win->direct, "rank %d: the window is staged-only (process_vm_readv refused?)", rank);
    gWinId = win->id;
  }
  char tag[200];
  snprintf(tag, sizeof tag, "check mode 0, route %s depth %d: rank %d alone: %s of %s",
           relayRouteName(a->route), a->depth, a->badRank, kFaultNames[a->f], relayCollName(a->coll));
  /* One good call first: the route's state (one-shot region, connections)
   * exists, so the bad call meets a comm in use. */
  T_OK(anyCall(comm, rank, a->coll, F_NONE, 0, a->route, 1, tag));
  double t0 = tNowSec();
  int bad = rank == a->badRank;
  relayResult_t r1 = anyCall(comm, rank, a->coll, a->f, bad, 0, 2, tag);
  relayResult_t r2 = anyCall(comm, rank, a->coll, F_NONE, 0, a->route, 3, tag); /* data checked on success */
  double dt = tNowSec() - t0;
  if (faultIsBuffer(a->f)) {
    /* It took part through scratch: nothing left over, the comm in step. */
    if (bad || relayCollRooted(a->coll)) /* a rooted call agrees first on shm: every rank returns it */
      T_CHECK(r1 == relayInvalidArgument, "rank %d: %s: the bad call returned %s (%s)", rank, tag,
              relayGetErrorString(r1), relayGetLastError(comm));
    else
      T_CHECK(r1 == relaySuccess || r1 == relayRemoteError, "rank %d: %s: a good rank returned %s (%s)", rank,
              tag, relayGetErrorString(r1), relayGetLastError(comm));
    T_CHECK(r2 == relaySuccess, "rank %d: %s: the next valid call returned %s (%s)", rank, tag,
            relayGetErrorString(r2), relayGetLastError(comm));
    T_OK(anyCall(comm, rank, a->coll, F_NONE, 0, a->route, 4, tag));
  } else {
    /* A shape error: an error instead of stale data (a success above was
     * checked against the reference), ended at once, not at the deadline. */
    if (bad && a->f != F_COUNTS_DIFFER)
      T_CHECK(r1 == relayInvalidArgument, "rank %d: %s: the bad call returned %s (%s)", rank, tag,
              relayGetErrorString(r1), relayGetLastError(comm));
    /* A scatter root and a gather member only send: their eager sends
     * complete whatever the peers believe, and the peers that receive
     * return the error. */
    int sendsOnly =
        (a->coll == relayCollectiveScatter && rank == 0) || (a->coll == relayCollectiveGather && rank != 0);
    if (bad && !sendsOnly)
      T_CHECK(r1 != relaySuccess || r2 != relaySuccess, "rank %d: %s: no error on the bad rank", rank, tag);
  }
  T_CHECK(dt < 10.0, "rank %d: %s: took %.1f s (deadline 20 s): an error must end the calls at once", rank,
          tag, dt);
  if (win && faultIsBuffer(a->f)) T_OK(relayCommDeregister(comm, win)); /* in step: collective */
  relayCommDestroy(comm);                                               /* frees a window left registered */
  free(gWin);
  gWin = NULL;
  return 0;
}

static int gWindowed;
static void runOne(relayCollective_t coll, fault f, int badRank, int route, int depth) {
  oneArg a = {coll, f, badRank, route, depth, gWindowed};
  t_run_ranks(NR, oneRejectRank, &a, 60);
}

/* Every collective on one route, both kinds of error. */
static void caseOne(const char* routeName, const char* kind) {
  int route = relayRouteDirect, depth = 1;
  if (!strcmp(routeName, "relay1")) route = relayRouteRelay;
  else if (!strcmp(routeName, "relay3")) route = relayRouteRelay, depth = 3;
  else if (!strcmp(routeName, "oneshot")) route = relayRouteOneShot;
  else if (!strcmp(routeName, "bw")) route = relayRouteBw;
  else if (!strcmp(routeName, "bwwin")) route = relayRouteBw, gWindowed = 1;
  int buffer = !strcmp(kind, "buffer");
  if (!strcmp(routeName, "rooted")) {
    for (int s = 0; s < 2; s++) {
      relayCollective_t coll = s ? relayCollectiveGather : relayCollectiveScatter;
      if (buffer) {
        runOne(coll, F_ROOT_NULL, 0, relayRouteDirect, 1); /* the gather root's recvbuff NULL of the issue */
        runOne(coll, F_MEMBER_NULL, kSet[1], relayRouteDirect, 1);
      } else {
        runOne(coll, F_ROOT_RANGE, kSet[2], relayRouteDirect, 1);
        runOne(coll, F_COUNTS_DIFFER, 0, relayRouteDirect, 1);
        runOne(coll, F_COUNTS_DIFFER, kSet[1], relayRouteDirect, 1);
      }
    }
    return;
  }
  for (int c = 0; c < 4; c++) {
    relayCollective_t coll = (relayCollective_t)c;
    if (buffer) {
      runOne(coll, F_SEND_NULL, 0, route, depth);
      runOne(coll, F_RECV_NULL, 1, route, depth);
      if (coll == relayCollectiveAllToAll) runOne(coll, F_INPLACE_A2A, 1, route, depth);
    } else {
      runOne(coll, F_DTYPE, 1, route, depth);
      runOne(coll, F_COUNTS_DIFFER, 0, route, depth);
    }
  }
}

/* ---- rendezvous identity ---------------------------------------------------- */

static char gJob[128];

/* Each launch's ranks sum values that encode the launch: a rank of another
 * launch in the comm changes the sum. */
static int rdzvRank(int rank, int nranks, void* arg) {
  int launch = *(const int*)arg;
  relayConfig_t cfg = cfgFor(0, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT);
  cfg.timeoutMs = 10000;
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitShm(&comm, nranks, rank, gJob, &cfg);
  T_CHECK(r == relaySuccess, "launch %d rank %d: init: %s (%s)", launch, rank, relayGetErrorString(r),
          relayGetLastError(NULL));
  int act[2] = {0, 1};
  relayLayout_t L = {1, 2, act};
  size_t counts[1] = {16};
  for (int it = 0; it < 4; it++) {
    int64_t s[16], d[16];
    for (int e = 0; e < 16; e++) s[e] = (int64_t)launch * 1000000 + (int64_t)(rank + 1) * 1000 + it * 16 + e;
    memset(d, POISON, sizeof d);
    T_OK(relayAllReduce(s, d, counts, relayInt64, relaySum, &L, comm, NULL));
    for (int e = 0; e < 16; e++) {
      int64_t want = 2 * ((int64_t)launch * 1000000 + it * 16 + e) + 3000;
      T_CHECK(d[e] == want, "launch %d rank %d: element %d = %lld, want %lld: ranks of two launches met",
              launch, rank, e, (long long)d[e], (long long)want);
    }
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL); /* stay up while the next launch starts */
  }
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* A launcher: its own process (the ranks' parent) and, with vars, its own
 * launcher variables; 2 forked ranks under the shared job name. */
static pid_t startLaunch(int launch, int vars) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  T_CHECK(pid >= 0, "fork");
  if (pid) return pid;
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  if (vars) {
    char port[16];
    snprintf(port, sizeof port, "%d", 29500 + launch);
    setenv("TORCHELASTIC_RUN_ID", "none", 1); /* torchrun's run id without --standalone: alike in every job */
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
  }
  relayLaunchResult res;
  int rc = relayLaunchRanks(2, rdzvRank, &launch, 30000, 1000, &res, NULL);
  if (rc) fprintf(stderr, "launch %d: %s\n", launch, res.message);
  _exit(rc ? 1 : 0);
}

static void waitLaunch(pid_t pid, int launch) {
  int st = 0;
  T_CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launch %d failed (status %#x)", launch, st);
}

static void caseRendezvous(int vars) {
  relayLaunchJobName("same", gJob, sizeof gJob); /* one name for every launch of this case */
  for (int round = 0; round < 20; round++) {
    int l0 = 3 * round + 1;
    pid_t a = startLaunch(l0, vars), b = startLaunch(l0 + 1, vars);
    struct timespec ts = {0, 15 * 1000000};
    nanosleep(&ts, NULL);
    pid_t c = startLaunch(l0 + 2, vars); /* while the first two run */
    waitLaunch(a, l0);
    waitLaunch(b, l0 + 1);
    waitLaunch(c, l0 + 2);
  }
}

/* Ranks 0, 1 and a duplicate of rank dup of a 3-rank job (one parent, no
 * launcher variables): the duplicate is refused, then rank 2 comes and the
 * job runs. */
static int dupRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = cfgFor(0, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT);
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitShm(&comm, nranks, rank, gJob, &cfg);
  if (r != relaySuccess) {
    const char* err = relayGetLastError(NULL);
    char want[64];
    snprintf(want, sizeof want, "rank %d is already taken", rank);
    T_CHECK(r == relayInvalidUsage && strstr(err, gJob) && strstr(err, want),
            "rank %d: the refusal is %s (%s): want relayInvalidUsage naming job '%s' and '%s'", rank,
            relayGetErrorString(r), err, gJob, want);
    return 7;
  }
  int act[3] = {0, 1, 2};
  relayLayout_t L = {1, 3, act};
  size_t counts[1] = {8};
  int32_t s[8], d[8];
  for (int e = 0; e < 8; e++) s[e] = (rank + 1) * 100 + e;
  T_OK(relayAllReduce(s, d, counts, relayInt32, relaySum, &L, comm, NULL));
  for (int e = 0; e < 8; e++)
    T_CHECK(d[e] == 600 + 3 * e, "rank %d: element %d = %d, want %d", rank, e, d[e], 600 + 3 * e);
  T_OK(relayCommDestroy(comm));
  return 0;
}

static pid_t forkRank(int rank) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  T_CHECK(pid >= 0, "fork");
  if (pid == 0) _exit(dupRank(rank, 3, NULL));
  return pid;
}

static void caseDuplicate(int dup) {
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  relayLaunchJobName("dup", gJob, sizeof gJob);
  pid_t p[4];
  p[0] = forkRank(dup);
  struct timespec ts = {0, 50 * 1000000};
  nanosleep(&ts, NULL);
  p[1] = forkRank(dup);
  p[2] = forkRank(1 - dup);
  /* The refused duplicate exits first; only then does rank 2 come, so the
   * rendezvous is still open when the duplicate arrives. */
  int st = 0;
  pid_t first = waitpid(-1, &st, 0);
  T_CHECK(first == p[0] || first == p[1], "a rank other than the duplicated %d exited first (status %#x)",
          dup, st);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7, "the first rank %d to exit was not refused (status %#x)",
          dup, st);
  p[3] = forkRank(2);
  for (int i = 0; i < 4; i++) {
    if (p[i] == first) continue;
    T_CHECK(waitpid(p[i], &st, 0) == p[i], "waitpid");
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d of the job failed (status %#x)", i, st);
  }
}

/* ---- topology ----------------------------------------------------------------- */

static int topoRank(int rank, int nranks, void* arg) {
  (void)arg;
  char bad[64];
  snprintf(bad, sizeof bad, "no-such-topology-of-rank-%d", rank);
  relayConfig_t cfg = cfgFor(0, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT);
  cfg.topo = bad;
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitShm(&comm, nranks, rank, t_job(), &cfg);
  const char* err = relayGetLastError(NULL);
  T_CHECK(r == relayInvalidArgument && strstr(err, bad),
          "rank %d: init returned %s (%s): want its own value '%s'", rank, relayGetErrorString(r), err, bad);
  return 0;
}

/* ---- disagreements between ranks (issue 25.2 and 25.3) ---- */

/* Every rank's error of a disagreement: well under the 20 s deadline, and about shapes (its own finding,
 * or quoted from the rank that found it). */
static void expectDisagreed(int rank, relayComm_t comm, relayResult_t r, double t0, int check,
                            const char* tag) {
  const char* e = relayGetLastError(comm);
  double dt = tNowSec() - t0;
  printf("rank %d, %s: %s after %.3f s: %s\n", rank, tag, relayGetErrorString(r), dt, e);
  T_CHECK(r != relaySuccess, "rank %d, %s: the call returned success", rank, tag);
  T_CHECK(dt < 3.0, "rank %d, %s: failed after %.1f s (deadline 20 s)", rank, tag, dt);
  if (check || r == relayInvalidUsage)
    T_CHECK(r == relayInvalidUsage && (strstr(e, "disagree") || strstr(e, "another shape")),
            "rank %d, %s: %s (%s)", rank, tag, relayGetErrorString(r), e);
  else /* a peer found it first and failed: this rank quotes it */
    T_CHECK(r == relayRemoteError && (strstr(e, "disagree") || strstr(e, "another shape")),
            "rank %d, %s: %s (%s)", rank, tag, relayGetErrorString(r), e);
}

/* A valid all-reduce over the 4 ranks, checked against the serial reference. */
static void goodAllReduce(relayComm_t comm, int rank, size_t count, const char* tag) {
  size_t counts[1] = {count};
  int ranks[NR] = {0, 1, 2, 3};
  size_t wrong =
      tc_one_call(comm, rank, relayCollectiveAllReduce, NR, 1, ranks, counts, relayFloat32, relaySum, 0, tag);
  T_CHECK(wrong == 0, "rank %d, %s: %zu wrong elements", rank, tag, wrong);
}

/* The route a good call of coll ran on comm (every rank runs it). */
static int routeOf(relayComm_t comm, int rank, relayCollective_t coll, size_t count) {
  int ranks[NR] = {0, 1, 2, 3}, route = -1;
  size_t counts[1] = {count};
  size_t wrong = tc_one_call(comm, rank, coll, NR, 1, ranks, counts, relayFloat32, relaySum, 0, "a probe");
  T_CHECK(wrong == 0, "rank %d: a probe of %zu elements: %zu wrong", rank, count, wrong);
  relayCommLastRoute(comm, &route, NULL);
  return route;
}

static int mixedRank(int rank, int nranks, void* arg) {
  int check = *(const int*)arg;
  static const relayCollective_t kOdd[] = {relayCollectiveAllReduce, relayCollectiveAllGather};
  int ranks[NR] = {0, 1, 2, 3};
  relayLayout_t L = {1, NR, ranks};
  relayConfig_t cfg = cfgFor(check, relayRouteAuto, 0);
  for (int v = 0; v < 2; v++) {
    relayCollective_t odd = kOdd[v], coll = rank == 2 ? odd : relayCollectiveReduceScatter;
    /* The case: a count where the two collectives take different routes (the reduce-scatter the
     * one-shot, the all-reduce the bandwidth route at 1024 elements on 4 shm ranks), so rank 2 sets up a
     * region its peers never enter. */
    char job[200];
    snprintf(job, sizeof job, "%s-probe%d", t_job(), v);
    relayComm_t comm = NULL;
    T_OK(relayCommInitShm(&comm, nranks, rank, job, &cfg));
    size_t count = 0;
    int rsRoute = -1, oddRoute = -1;
    for (size_t c = 1024; c <= 65536 && !count; c *= 2) {
      rsRoute = routeOf(comm, rank, relayCollectiveReduceScatter, c);
      oddRoute = routeOf(comm, rank, odd, c);
      if (rsRoute != oddRoute) count = c;
    }
    relayCommDestroy(comm);
    /* None (the all-gather routes as the reduce-scatter does here): the same route, whose messages carry
     * the shape. */
    int same = !count;
    if (same) count = 1024;
    snprintf(job, sizeof job, "%s-mixed%d", t_job(), v);
    T_OK(relayCommInitShm(&comm, nranks, rank, job, &cfg));
    /* The reduce-scatter's region set up by a good call first, as in the issue. */
    rsRoute = routeOf(comm, rank, relayCollectiveReduceScatter, count);
    if (same) oddRoute = rsRoute;
    size_t counts[1] = {count};
    size_t sn = tc_send_elems(coll, NR, count), rn = tc_recv_elems(coll, NR, count);
    float* s = malloc(sn * sizeof(float));
    float* in = malloc(sn * sizeof(float));
    float* rcv = malloc(rn * sizeof(float));
    T_CHECK(s && in && rcv, "oom");
    tc_fill_input(coll, relayFloat32, relaySum, NR, rank, count, s);
    memcpy(in, s, sn * sizeof(float));
    memset(rcv, POISON, rn * sizeof(float));
    char tag[160];
    snprintf(tag, sizeof tag, "%s (%s) on rank 2, reduce-scatter (%s) on the others, count %zu",
             odd == relayCollectiveAllReduce ? "all-reduce" : "all-gather", relayRouteName(oddRoute),
             relayRouteName(rsRoute), count);
    double t0 = tNowSec();
    relayResult_t r = tc_run(coll, s, rcv, counts, relayFloat32, relaySum, &L, comm);
    expectDisagreed(rank, comm, r, t0, check, tag);
    T_CHECK(memcmp(s, in, sn * sizeof(float)) == 0, "rank %d, %s: the input changed", rank, tag);
    if (check)
      for (size_t i = 0; i < rn * sizeof(float); i++)
        T_CHECK(((unsigned char*)rcv)[i] == POISON, "rank %d, %s: recv byte %zu written", rank, tag, i);
    if (check) {
      goodAllReduce(comm, rank, count, "the next call");
    } else {
      /* Check mode 0: data may have moved, so the comm is failed (README), on every rank. */
      r = tc_run(coll, s, rcv, counts, relayFloat32, relaySum, &L, comm);
      T_CHECK(r == relayInvalidUsage && strstr(relayGetLastError(comm), "failed in an earlier call"),
              "rank %d, %s: the next call -> %s (%s)", rank, tag, relayGetErrorString(r),
              relayGetLastError(comm));
    }
    relayCommDestroy(comm);
    if (!check) { /* a new comm is right */
      snprintf(job, sizeof job, "%s-mixed%d-next", t_job(), v);
      T_OK(relayCommInitShm(&comm, nranks, rank, job, &cfg));
      goodAllReduce(comm, rank, count, "a new comm's call");
      relayCommDestroy(comm);
    }
    free(s);
    free(in);
    free(rcv);
  }
  return 0;
}

/* One scatter (or gather) over {0, 1, 2, 3} with blocks of 50, 70, 90, 110 elements, root `root` in this
 * rank's view; inputs encode source and position, outputs poisoned; returns the result and, on success,
 * checks the data. */
static const size_t kAllCounts[NR] = {50, 70, 90, 110};
#define ALL_TOTAL 320
static relayResult_t wholeSetCall(relayComm_t comm, int rank, relayCollective_t coll, int root, int trueRoot,
                                  const char* tag) {
  static const int set[NR] = {0, 1, 2, 3};
  size_t off[NR + 1] = {0};
  for (int i = 0; i < NR; i++) off[i + 1] = off[i] + kAllCounts[i];
  int scatter = coll == relayCollectiveScatter;
  float big[ALL_TOTAL], mine[110], bigIn[ALL_TOTAL], mineIn[110];
  for (size_t e = 0; e < ALL_TOTAL; e++) big[e] = (float)(1000 * (rank + 1) + (int)e); /* the root's blocks */
  for (size_t e = 0; e < kAllCounts[rank]; e++) mine[e] = (float)(100000 * (rank + 1) + (int)e);
  if (scatter) memset(mine, POISON, sizeof mine);
  else memset(big, POISON, sizeof big);
  memcpy(bigIn, big, sizeof big);
  memcpy(mineIn, mine, sizeof mine);
  relayResult_t r = scatter ? tc_run_rooted(coll, big, mine, kAllCounts, relayFloat32, root, set, NR, comm)
                            : tc_run_rooted(coll, mine, big, kAllCounts, relayFloat32, root, set, NR, comm);
  if (r != relaySuccess) { /* nothing written, inputs unchanged */
    T_CHECK(memcmp(big, bigIn, sizeof big) == 0 && memcmp(mine, mineIn, sizeof mine) == 0,
            "rank %d, %s: a failed call wrote a buffer", rank, tag);
    return r;
  }
  if (scatter)
    for (size_t e = 0; e < kAllCounts[rank]; e++)
      T_CHECK(mine[e] == (float)(1000 * (trueRoot + 1) + (int)(off[rank] + e)),
              "rank %d, %s: element %zu = %g", rank, tag, e, mine[e]);
  else if (rank == trueRoot)
    for (int q = 0; q < NR; q++)
      for (size_t e = 0; e < kAllCounts[q]; e++)
        T_CHECK(big[off[q] + e] == (float)(100000 * (q + 1) + (int)e),
                "rank %d, %s: rank %d's element %zu = %g", rank, tag, q, e, big[off[q] + e]);
  return r;
}

static int rootedRank(int rank, int nranks, void* arg) {
  int check = *(const int*)arg;
  relayConfig_t cfg = cfgFor(check, relayRouteAuto, 0);
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  /* The odd rank and the root it names; every other rank names root 0. */
  static const struct {
    relayCollective_t coll;
    int odd, root;
    const char* what;
  } kCases[] = {{relayCollectiveScatter, 2, 1, "a member names another member"},
                {relayCollectiveScatter, 2, 2, "a member names itself (it would only send)"},
                {relayCollectiveScatter, 0, 3, "the root names another rank (it would wait as a member)"},
                {relayCollectiveGather, 3, 1, "gather: a member names another member"},
                {relayCollectiveGather, 0, 2, "gather: the root names another rank (it would only send)"}};
  for (size_t k = 0; k < sizeof kCases / sizeof kCases[0]; k++) {
    double t0 = tNowSec();
    relayResult_t r = wholeSetCall(comm, rank, kCases[k].coll, rank == kCases[k].odd ? kCases[k].root : 0, 0,
                                   kCases[k].what);
    expectDisagreed(rank, comm, r, t0, 1, kCases[k].what);
    r = wholeSetCall(comm, rank, relayCollectiveScatter, 0, 0, "the next scatter");
    T_CHECK(r == relaySuccess, "rank %d, after \"%s\": the next scatter -> %s (%s)", rank, kCases[k].what,
            relayGetErrorString(r), relayGetLastError(comm));
  }
  relayCommDestroy(comm);
  return 0;
}

/* one-<route>-<kind>: a route of caseOne's and a kind of error. */
typedef struct {
  const char* route;
  const char* kind;
} oneCase;

static int runOneCase(void* arg) {
  const oneCase* o = arg;
  caseOne(o->route, o->kind);
  return 0;
}

static int runRendezvous(void* arg) {
  caseRendezvous(*(const int*)arg);
  return 0;
}

static int runDuplicate(void* arg) {
  caseDuplicate(*(const int*)arg);
  return 0;
}

#define ONE(r, k) \
  { .name = "one-" r "-" k, .run = runOneCase, .arg = &(oneCase){r, k}, .timeoutS = 120 }
#define ONE_BOTH(r) ONE(r, "buffer"), ONE(r, "shape")
/* check = the comm's check mode 0 / 1 */
#define ALL(nm, check) \
  { .name = nm, .rank = allRejectRank, .arg = &(int){check}, .ranks = NR, .deadlineS = 120, .timeoutS = 120 }

static const tCase kCases[] = {
    ALL("all-c0", 0),
    ALL("all-c1", 1),
    {.name = "rdzv-vars", .run = runRendezvous, .arg = &(int){1}, .timeoutS = 120},
    {.name = "rdzv-ppid", .run = runRendezvous, .arg = &(int){0}, .timeoutS = 120},
    {.name = "rdzv-dup0", .run = runDuplicate, .arg = &(int){0}, .timeoutS = 120},
    {.name = "rdzv-dup1", .run = runDuplicate, .arg = &(int){1}, .timeoutS = 120},
    {.name = "topo-own", .rank = topoRank, .ranks = 2, .deadlineS = 60, .timeoutS = 120},
    {.name = "mixed-c0", .rank = mixedRank, .arg = &(int){0}, .ranks = NR, .deadlineS = 100, .timeoutS = 120},
    {.name = "mixed-c1", .rank = mixedRank, .arg = &(int){1}, .ranks = NR, .deadlineS = 100, .timeoutS = 120},
    {.name = "rooted-c0",
     .rank = rootedRank,
     .arg = &(int){0},
     .ranks = NR,
     .deadlineS = 100,
     .timeoutS = 120},
    {.name = "rooted-c1",
     .rank = rootedRank,
     .arg = &(int){1},
     .ranks = NR,
     .deadlineS = 100,
     .timeoutS = 120},
    ONE_BOTH("direct"),
    ONE_BOTH("relay1"),
    ONE_BOTH("relay3"),
    ONE_BOTH("oneshot"),
    ONE_BOTH("bw"),
    ONE_BOTH("bwwin"),
    ONE_BOTH("rooted"),
};

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  return t_main(argc, argv, "bad_input", kCases, T_NCASES(kCases));
}
