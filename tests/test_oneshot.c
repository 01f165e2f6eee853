/*
 * The one-shot route, and with a "bw-" prefix on the case the bandwidth
 * route (the same contract in tiles through a staging ring: every case runs
 * on it with 1 KiB tiles and a ring of 3, so the counts here span 1 to
 * hundreds of tiles and are not multiples of one), plus bw-only cases
 * (tiles, abort). The plan (checker, reference executor) in one process,
 * and the shm transport's twin of the GPU protocol at 8 ranks: skewed ranks,
 * back-to-back calls with inputs changing per call, create/destroy cycles
 * without leaked mappings or fds, two comms at once, a voted fallback, and
 * a sweep of A x collective x op x dtype x in-place. Every output is checked
 * bit for bit against relayHostReduce over the same inputs in active-index
 * order (what every route must produce).
 *
 * Usage: test_oneshot <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "plan/plan.h"
#include "reduce_host.h"
#include "ref/ref.h"
#include "route/route.h"
#include "route/table.h"
#include "topo/topo.h"

#define NRANKS 8

/* The route under test: relayRouteOneShot, or relayRouteBw for "bw-" and "bwcma-" cases. */
static int gRoute = relayRouteOneShot;
/* "bwcma-" cases (RELAYCC_SHM_CMA_BYTES=64): 1 when a bw call of at least 64 bytes of input per rank must
 * take the one-copy path (comm->last.window UINT32_MAX) and a smaller one the staged path; 0 when every call
 * must be staged (a rank refused cross-memory attach); -1: not checked. */
static int gCmaWant = -1;
/* The carry (RELAY_TP_CAP_CARRY): -1 unchecked; else whether a one-shot broadcast after the comm's first call
 * (which readies the region, so its own block cannot ride) must have ridden its agreement. */
static int gCarryWant = -1;
/* The one-copy floors gCmaWant checks against: RELAYCC_SHM_CMA_BYTES's for 3 or more actives, the pair's
 * (the lower of it and RELAYCC_SHM_CMA_PAIR_BYTES) for 2; the bwcma- cases set both to 64. */
static size_t gCmaFloor = 64, gCmaPairFloor = 64;
/* A broadcast's floor on what its root sends in all ((A-1) x count x element size:
 * RELAYCC_SHM_CMA_ROOTED_BYTES, 1 MiB by default, 64 in the bwcma- cases; for 2 the lower of it and the
 * pair's); a reduce is always staged. */
static size_t gCmaRootedFloor = 64;
/* "ts-" cases: RELAYCC_ONESHOT_TWOSHOT_BYTES, so every one-shot all-reduce of at least this many bytes of
 * input per rank must run the two-shot form (comm->last.twoShot) and every other call the push form; 0:
 * unchecked. */
static uint32_t gTwoShotFrom = 0;

/* Whether a bw call of `bytes` of each active's input takes the one copy, as bw.c bwCmaWanted decides (a
 * pair floor of 0 leaves the other floor). */
static int cmaWanted(relayCollective_t coll, int A, size_t bytes) {
  if (!gCmaWant) return 0;
  size_t pair = A == 2 && gCmaPairFloor > 0 ? gCmaPairFloor : (size_t)-1;
  if (relayCollRooted(coll)) {
    size_t floor = pair < gCmaRootedFloor ? pair : gCmaRootedFloor;
    return coll == relayCollectiveBroadcast && (size_t)(A - 1) * bytes >= floor;
  }
  return bytes >= (pair < gCmaFloor ? pair : gCmaFloor);
}

/* Input of active `src` at element e of call `call`: small integers (exact in
 * bf16 and in fp32 sums of 8) that change with every call and every rank. */
static void fillInput(relayDataType_t dt, int call, int src, size_t n, void* buf) {
  for (size_t e = 0; e < n; e++) {
    int v = (int)((unsigned)(call * 7 + src * 13 + (int)(e % 101) * 3) % 29) - 14;
    if (v == 0) v = 15;
    double dv = v;
    switch (dt) {
      case relayInt32: ((int32_t*)buf)[e] = v; break;
      case relayFloat32: ((float*)buf)[e] = (float)dv; break;
      case relayBfloat16: {
        float f = (float)dv;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t*)buf)[e] = (uint16_t)(u >> 16); /* exact: small integers */
        break;
      }
      default: T_CHECK(0, "dtype %d not in this test", (int)dt);
    }
  }
}

/* Expected output of active `me`: reduce of every active's contribution
 * (all-gather, all-to-all: the contributions side by side); broadcast: the root's input; reduce: the
 * reduce at the root, and a peer's recv as it was (`poison` out of place, its own input in place). */
static void expected(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int call, int A, int me,
                     int root, int inPlace, size_t c, void* out) {
  if (coll == relayCollectiveBroadcast) {
    fillInput(dt, call, root, c, out);
    return;
  }
  if (coll == relayCollectiveReduce && me != root) {
    if (inPlace) fillInput(dt, call, me, c, out);
    else memset(out, 0xCD, c * relayTypeSize(dt));
    return;
  }
  int blocked = coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll;
  int gather = coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll;
  size_t es = relayTypeSize(dt), in = blocked ? (size_t)A * c : c;
  char* ins[RELAY_ONESHOT_MAX_ACTIVE];
  const void* srcs[RELAY_ONESHOT_MAX_ACTIVE];
  for (int i = 0; i < A; i++) {
    ins[i] = malloc(in * es + 1);
    T_CHECK(ins[i], "oom");
    fillInput(dt, call, i, in, ins[i]);
    srcs[i] = ins[i] + (blocked ? (size_t)me * c * es : 0);
  }
  if (gather)
    for (int i = 0; i < A; i++) memcpy((char*)out + (size_t)i * c * es, srcs[i], c * es);
  else relayHostReduce(out, srcs, A, c, dt, op, op == relayAvg ? A : 0);
  for (int i = 0; i < A; i++) free(ins[i]);
}

/* ---- plans in one process ---------------------------------------------- */

static int casePlan(void) {
  int ranks[8] = {5, 2, 7, 0, 1, 3, 4, 6};
  relayCollective_t colls[4] = {relayCollectiveAllReduce, relayCollectiveReduceScatter,
                                relayCollectiveAllGather, relayCollectiveAllToAll};
  for (int ai = 0; ai < 3; ai++)
    for (int ci = 0; ci < 4; ci++)
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        int A = 2 << ai;
        relayCollective_t coll = colls[ci];
        if (coll == relayCollectiveAllToAll && inPlace) continue; /* rejected by the API */
        int blocked = coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll;
        int gather = coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll;
        size_t c = 1000, es = 4;
        planKey k = planKeyInit(coll, NRANKS, 1, A, ranks, &c, relayFloat32);
        k.op = relaySum, k.route = gRoute, k.depth = 1, k.twoShotFrom = gTwoShotFrom;
        relayPlan* p = NULL;
        T_CHECK(relayPlanBuild(&k, &p) == relaySuccess, "A=%d %s: build", A, relayCollName(coll));
        /* The form is the key's: two-shot for an all-reduce at or above the key's bytes, else push */
        int twoShot = gRoute == relayRouteOneShot && gTwoShotFrom && coll == relayCollectiveAllReduce &&
                      A >= 3 && c * es >= gTwoShotFrom;
        for (uint32_t o = 0; o < p->nOps; o++)
          T_CHECK(p->ops[o].form == (twoShot ? PLAN_BW_TWOSHOT : PLAN_BW_PUSH) || gRoute != relayRouteOneShot,
                  "A=%d %s: op %u has form %d", A, relayCollName(coll), o, p->ops[o].form);
        char err[512];
        T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "A=%d %s: check: %s", A, relayCollName(coll), err);
        T_CHECK(p->nSteps == 1, "one step, got %d", p->nSteps);
        void* sb[NRANKS];
        void* rb[NRANKS];
        size_t in = blocked ? (size_t)A * c : c, out = gather ? (size_t)A * c : c;
        void* own[NRANKS]; /* what to free */
        for (int r = 0; r < NRANKS; r++) sb[r] = rb[r] = own[r] = NULL;
        for (int i = 0; i < A; i++) {
          int r = ranks[i];
          if (gather && inPlace) { /* in-place all-gather: the input is block i of the output */
            rb[r] = own[r] = malloc(out * es);
            sb[r] = (char*)rb[r] + (size_t)i * c * es;
          } else {
            sb[r] = own[r] = malloc(in * es);
            rb[r] = inPlace ? (char*)sb[r] + (blocked ? (size_t)i * c * es : 0) : malloc(out * es);
          }
          fillInput(relayFloat32, 3, i, in, sb[r]);
        }
        T_CHECK(relayRefRun(p, sb, rb, err, sizeof err) == 0, "ref: %s", err);
        float* want = malloc(out * es);
        for (int i = 0; i < A; i++) {
          expected(coll, relayFloat32, relaySum, 3, A, i, -1, inPlace, c, want);
          T_CHECK(memcmp(rb[ranks[i]], want, out * es) == 0, "A=%d %s inPlace=%d: active %d differs", A,
                  relayCollName(coll), inPlace, i);
        }
        free(want);
        for (int i = 0; i < A; i++) {
          if (!inPlace) free(rb[ranks[i]]);
          free(own[ranks[i]]);
        }
        relayPlanFree(p);
      }
  /* Not served: rooted collectives, fused layouts, sizes above the slot (the
   * one-shot only: the bandwidth route takes any count). */
  size_t c2[2] = {16, 16}, big = RELAY_ONESHOT_GATE_MAX / 4 + 1;
  planKey k = planKeyInit(relayCollectiveScatter, NRANKS, 1, 2, ranks, c2, relayFloat32);
  k.op = relaySum, k.route = gRoute, k.depth = 1;
  relayPlan* p = NULL;
  T_CHECK(relayPlanBuild(&k, &p) == relayNotSupported, "scatter must be declined");
  k.coll = relayCollectiveAllReduce;
  k.nGroups = 2;
  T_CHECK(relayPlanBuild(&k, &p) == relayNotSupported, "nGroups 2 must be declined");
  k.nGroups = 1;
  k.counts = &big;
  if (gRoute == relayRouteBw) {
    T_CHECK(relayPlanBuild(&k, &p) == relaySuccess, "%zu floats must be served", big);
    relayPlanFree(p);
  } else {
    T_CHECK(relayPlanBuild(&k, &p) == relayNotSupported, "%zu floats must be declined", big);
  }
  printf("plan: ok\n");
  return 0;
}

/* bw: the router on the h200x2 model at the default tile and ring. Graph
 * replay prices (the model's calibration): the one-shot below the crossover
 * (all-reduce 256 KiB), the bandwidth route above (1 MiB up to 1 GiB, every
 * collective from 16 MiB), never without its capability. */
static int caseRoute(void) {
  struct relayTopo* t = NULL;
  T_OK(relayTopoLoad("h200x2", &t));
  int ranks[2] = {0, 1};
  const int caps = RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_BW;
  struct {
    int coll;
    size_t bytes; /* per-rank input */
    int want;
  } rows[] = {{relayCollectiveAllReduce, 256 << 10, relayRouteOneShot},
              {relayCollectiveAllReduce, 1 << 20, relayRouteBw},
              {relayCollectiveAllReduce, 16 << 20, relayRouteBw},
              {relayCollectiveAllReduce, 1 << 30, relayRouteBw},
              {relayCollectiveAllGather, 16 << 20, relayRouteBw},
              {relayCollectiveAllGather, 1 << 30, relayRouteBw},
              {relayCollectiveReduceScatter, 16 << 20, relayRouteBw},
              {relayCollectiveReduceScatter, 1 << 30, relayRouteBw},
              {relayCollectiveAllToAll, 16 << 20, relayRouteBw},
              {relayCollectiveAllToAll, 1 << 30, relayRouteBw}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    size_t c = rows[i].bytes / 2 / (relayCollSendsBlocks((relayCollective_t)rows[i].coll) ? 2 : 1);
    planKey k = planKeyInit((relayCollective_t)rows[i].coll, 2, 1, 2, ranks, &c, relayBfloat16);
    k.op = relaySum, k.route = relayRouteAuto, k.depth = 1;
    int route = -1, depth = 0;
    relayRouteChoose(&k, t, caps, &route, &depth);
    T_CHECK(route == rows[i].want, "h200x2 %s of %zu B per rank: route %s, want %s", relayCollName(k.coll),
            rows[i].bytes, relayRouteName(route), relayRouteName(rows[i].want));
    relayRouteChoose(&k, t, caps & ~RELAY_TP_CAP_BW, &route, &depth);
    T_CHECK(route != relayRouteBw, "h200x2 %s: bw chosen without the capability", relayCollName(k.coll));
  }
  relayTopoFree(t);
  printf("route: ok\n");
  return 0;
}

/* ---- shm ranks ----------------------------------------------------------- */

typedef struct {
  int A, calls, skew, checkEvery;
  relayCollective_t coll;
  relayDataType_t dt;
  relayRedOp_t op;
  int inPlace;
  size_t count;
  int expectRoute; /* relayRouteOneShot (the route under test: gRoute), or relayRouteDirect (fallback) */
} runArg;

static relayComm_t oneshotComm(int rank) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = gRoute;
  cfg.timeoutMs = 60000;
  return t_comm(rank, NRANKS, &cfg);
}

/* `calls` calls on comm; active ranks are every (8/A)-th rank, reversed, so
 * active index and comm rank differ. */
static void runCalls(relayComm_t comm, int rank, const runArg* a, int callBase) {
  int ranks[NRANKS], A = a->A, me = -1;
  for (int i = 0; i < A; i++) {
    ranks[i] = NRANKS - 1 - i * (NRANKS / A);
    if (ranks[i] == rank) me = i;
  }
  relayLayout_t L = {1, A, ranks};
  size_t es = relayTypeSize(a->dt), c = a->count;
  int blocked = a->coll == relayCollectiveReduceScatter || a->coll == relayCollectiveAllToAll;
  int gather = a->coll == relayCollectiveAllGather || a->coll == relayCollectiveAllToAll;
  size_t in = blocked ? (size_t)A * c : c, out = gather ? (size_t)A * c : c;
  char* sbuf = malloc(in * es + 64);
  char* rbuf = malloc(out * es + 64);
  char* want = malloc(out * es + 64);
  T_CHECK(sbuf && rbuf && want, "oom");
  for (int k = 0; k < a->calls; k++) {
    int call = callBase + k;
    void* recvp = rbuf;
    const void* sendp = sbuf;
    if (me >= 0) {
      memset(rbuf, 0xCD, out * es);
      if (a->inPlace && gather) { /* in-place all-gather: the input is block me of the output */
        sendp = rbuf + (size_t)me * c * es;
        fillInput(a->dt, call, me, in, rbuf + (size_t)me * c * es);
      } else {
        fillInput(a->dt, call, me, in, sbuf);
        if (a->inPlace) recvp = sbuf + (blocked ? (size_t)me * c * es : 0);
      }
    }
    /* Odd ranks arrive late: a fast rank that used a stale epoch or read
     * staging before the push would see the previous call's data. */
    if (a->skew && (rank & 1)) {
      struct timespec ts = {0, (long)a->skew * 1000000L};
      nanosleep(&ts, NULL);
    }
    /* Broadcast and reduce: the root moves with the call, through every position. */
    int root = call % A;
    relayResult_t r =
        a->coll == relayCollectiveBroadcast ? relayBroadcast(sendp, recvp, &c, a->dt, root, &L, comm, NULL)
        : a->coll == relayCollectiveReduce ? relayReduce(sendp, recvp, &c, a->dt, a->op, root, &L, comm, NULL)
        : a->coll == relayCollectiveAllReduce ? relayAllReduce(sendp, recvp, &c, a->dt, a->op, &L, comm, NULL)
        : a->coll == relayCollectiveReduceScatter
            ? relayReduceScatter(sendp, recvp, &c, a->dt, a->op, &L, comm, NULL)
        : a->coll == relayCollectiveAllGather ? relayAllGather(sendp, recvp, &c, a->dt, &L, comm, NULL)
                                              : relayAllToAll(sendp, recvp, &c, a->dt, &L, comm, NULL);
    T_CHECK(r == relaySuccess, "rank %d call %d: %s (%s)", rank, call, relayGetErrorString(r),
            relayGetLastError(comm));
    int route = -1, expectRoute = a->expectRoute == relayRouteOneShot ? gRoute : a->expectRoute;
    relayCommLastRoute(comm, &route, NULL);
    T_CHECK(route == expectRoute, "rank %d call %d: ran route %s, expected %s", rank, call,
            relayRouteName(route), relayRouteName(expectRoute));
    if (gCarryWant >= 0 && a->coll == relayCollectiveBroadcast && route == relayRouteOneShot)
      T_CHECK(comm->last.carried == (gCarryWant && call > 0), "rank %d call %d: broadcast %s its agreement",
              rank, call, comm->last.carried ? "rode" : "did not ride");
    if (gTwoShotFrom && me >= 0 && route == relayRouteOneShot) {
      int want = a->coll == relayCollectiveAllReduce && A >= 3 && c * es >= gTwoShotFrom;
      T_CHECK(comm->last.twoShot == want, "rank %d call %d %s of %zu bytes: %s form, expected %s", rank, call,
              relayCollName(a->coll), c * es, comm->last.twoShot ? "two-shot" : "push",
              want ? "two-shot" : "push");
    }
    if (gCmaWant >= 0 && me >= 0 && route == relayRouteBw) {
      int want = cmaWanted(a->coll, A, in * es);
      T_CHECK((comm->last.window == UINT32_MAX) == want,
              "rank %d call %d %s of %zu bytes: %s path, expected %s", rank, call, relayCollName(a->coll),
              in * es, comm->last.window == UINT32_MAX ? "one-copy" : "staged", want ? "one-copy" : "staged");
    }
    if (me >= 0 && (a->checkEvery <= 1 || k % a->checkEvery == 0 || k == a->calls - 1)) {
      expected(a->coll, a->dt, a->op, call, A, me, root, a->inPlace, c, want);
      if (memcmp(recvp, want, out * es) != 0) {
        size_t bad = 0;
        while (bad < out * es && ((char*)recvp)[bad] == want[bad]) bad++;
        T_CHECK(0, "rank %d (active %d of %d) call %d %s %s %s inPlace=%d: first wrong byte %zu of %zu", rank,
                me, A, call, relayCollName(a->coll), relayTypeName(a->dt), relayOpName(a->op), a->inPlace,
                bad, out * es);
      }
    }
  }
  free(sbuf);
  free(rbuf);
  free(want);
}

static int rankRun(int rank, int nranks, void* arg) {
  (void)nranks;
  relayComm_t comm = oneshotComm(rank);
  runCalls(comm, rank, arg, 0);
  T_OK(relayCommDestroy(comm));
  return 0;
}

static int rankSweep(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayComm_t comm = oneshotComm(rank);
  relayCollective_t colls[6] = {relayCollectiveAllReduce, relayCollectiveReduceScatter,
                                relayCollectiveAllGather, relayCollectiveAllToAll,
                                relayCollectiveBroadcast, relayCollectiveReduce};
  relayDataType_t dts[3] = {relayFloat32, relayBfloat16, relayInt32};
  relayRedOp_t ops[3] = {relaySum, relayAvg, relayMax};
  size_t counts[3] = {1, 37, 4099};
  int call = 0;
  /* The one-shot at A = 2, 4, 8; the bandwidth route at every A from 2 to 8
   * (its two-shot shards differ with A, and some are empty at count 1). */
  int every = gRoute == relayRouteBw || gTwoShotFrom; /* the two-shot's shards differ with A too */
  int nA = every ? 7 : 3;
  for (int ai = 0; ai < nA; ai++)
    for (int ci = 0; ci < 6; ci++)
      for (int di = 0; di < 3; di++)
        for (int oi = 0; oi < 3; oi++)
          for (int ip = 0; ip < 2; ip++) {
            if (dts[di] == relayInt32 && ops[oi] == relayAvg) continue; /* avg of ints: not a relaycc op */
            if (!relayCollReduces(colls[ci]) && oi > 0) continue;       /* a gather has no op */
            if (colls[ci] == relayCollectiveAllToAll && ip) continue;   /* in-place all-to-all: rejected */
            int A = every ? 2 + ai : 2 << ai;
            runArg a = {A, 1, 0, 1, colls[ci], dts[di], ops[oi], ip, counts[(call) % 3], relayRouteOneShot};
            runCalls(comm, rank, &a, call++);
          }
  T_OK(relayCommDestroy(comm));
  return 0;
}

static int countLines(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

static int countFds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* 100 create/destroy cycles with a one-shot call each: the mappings and fds
 * after the last equal those after the first (the region is freed). */
static int rankCycles(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  int maps1 = 0, fds1 = 0;
  for (int cyc = 0; cyc < 100; cyc++) {
    relayComm_t comm = oneshotComm(rank);
    runArg a = {2, 1, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 64, relayRouteOneShot};
    runCalls(comm, rank, &a, cyc);
    T_OK(relayCommDestroy(comm));
    /* Next comm on the same job name only after everyone left this one. */
    if (cyc == 0) {
      maps1 = countLines("/proc/self/maps");
      fds1 = countFds();
    }
  }
  int maps = countLines("/proc/self/maps"), fds = countFds();
  /* A leaked region would add 8 mappings per cycle (800 here); allow 16 lines
   * of allocator growth (ASan's allocator maps new regions as it goes). */
  T_CHECK(maps <= maps1 + 16 && fds <= fds1,
          "rank %d: after 100 cycles %d mappings, %d fds (after 1: %d, %d)", rank, maps, fds, maps1, fds1);
  return 0;
}

/* Two comms alive at once, interleaved calls: regions and epochs are per comm. */
static int rankTwo(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = gRoute;
  relayComm_t c1 = NULL, c2 = NULL;
  char job2[160];
  snprintf(job2, sizeof job2, "%s-b", t_job());
  c1 = t_comm(rank, NRANKS, &cfg);
  relayResult_t r = relayCommInitShm(&c2, NRANKS, rank, job2, &cfg);
  T_CHECK(r == relaySuccess, "second comm: %s", relayGetLastError(NULL));
  for (int k = 0; k < 50; k++) {
    runArg a = {4, 1,   k % 3 == 0 ? 2 : 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum,
                0, 513, relayRouteOneShot};
    runCalls(c1, rank, &a, 2 * k);
    a.A = 2;
    a.coll = relayCollectiveReduceScatter;
    runCalls(c2, rank, &a, 2 * k + 1);
  }
  T_OK(relayCommDestroy(c1));
  T_OK(relayCommDestroy(c2));
  return 0;
}

/* bw: ranks 7 and 3 active; rank 3 arrives 1.5 s late, and a second thread
 * of rank 7 aborts its comm 200 ms into the call, while rank 7 waits for
 * rank 3's first tile: rank 7's call returns at once, and rank 3's then
 * fails fast naming rank 7, not at the 60 s deadline. */
static void* abortSoon(void* p) {
  struct timespec ts = {0, 200 * 1000000L};
  nanosleep(&ts, NULL);
  relayCommAbort((relayComm_t)p);
  return NULL;
}

static int rankAbort(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayComm_t comm = oneshotComm(rank);
  /* The two-shot (ts-) from 3 actives: rank 5 is then an active beside 3, in the call when 7 aborts */
  int A = gTwoShotFrom ? 3 : 2;
  runArg a = {A, 1, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 5000, relayRouteOneShot};
  runCalls(comm, rank, &a, 0); /* the region exists: the next call goes straight to its data */
  int ranks[3] = {7, 3, 5};
  relayLayout_t L = {1, A, ranks};
  size_t c = 5000;
  float* x = malloc(c * sizeof *x);
  T_CHECK(x, "oom");
  fillInput(relayFloat32, 1, rank, c, x);
  if (rank == 7) {
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, abortSoon, comm) == 0, "pthread_create");
    uint64_t t0 = relayNowNs();
    relayResult_t r = relayAllReduce(x, x, &c, relayFloat32, relaySum, &L, comm, NULL);
    double dt = (double)(relayNowNs() - t0) / 1e9;
    T_CHECK(r != relaySuccess && dt < 3.0, "rank 7: aborted call -> %s after %.2f s", relayGetErrorString(r),
            dt);
    pthread_join(th, NULL);
    /* relayCommAbort freed the comm once the call left. Stay alive while
     * rank 3 looks: it must see "aborted", not "died". */
    struct timespec ts = {3, 0};
    nanosleep(&ts, NULL);
  } else {
    if (rank == 3) {
      struct timespec ts = {1, 500 * 1000000L};
      nanosleep(&ts, NULL);
    }
    uint64_t t0 = relayNowNs();
    relayResult_t r = relayAllReduce(x, x, &c, relayFloat32, relaySum, &L, comm, NULL);
    double dt = (double)(relayNowNs() - t0) / 1e9;
    if (rank == 3)
      T_CHECK(r == relayRemoteError && strstr(relayGetLastError(comm), "rank 7") && dt < 3.0,
              "rank 3: call with an aborted peer -> %s after %.2f s (%s)", relayGetErrorString(r), dt,
              relayGetLastError(comm));
    else if (rank == 5 && A == 3)
      T_CHECK(r != relaySuccess && dt < 3.0, "rank 5: call with an aborted peer -> %s after %.2f s (%s)",
              relayGetErrorString(r), dt, relayGetLastError(comm));
    else T_CHECK(r == relaySuccess, "helper %d: %s", rank, relayGetLastError(comm));
    relayCommDestroy(comm);
  }
  free(x);
  return 0;
}

/* bw: odd ranks read another tile size: RELAYCC_BW_TILE_BYTES is agreed at
 * init (rank 0's on every rank), so every rank still runs bw, with the right
 * data. */
static int rankDisagree(int rank, int nranks, void* arg) {
  setenv("RELAYCC_BW_TILE_BYTES", rank & 1 ? "2048" : "1024", 1);
  return rankRun(rank, nranks, arg);
}

static void launch(const char* what, relayRankFn fn, void* arg, int sec) {
  t_run_ranks(NRANKS, fn, arg, sec);
  printf("%s: ok\n", what);
}

/* Both ways: odd ranks late on even calls' collectives, then the same with the roles of the groups swapped
 * (A=4 takes ranks 7,5,3,1 then A=2 7,3). */
static int runSkew(void) {
  runArg a = {4, 40, 3, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 1031, relayRouteOneShot};
  launch("skew allreduce A=4", rankRun, &a, 240);
  a.coll = relayCollectiveReduceScatter;
  a.A = 8;
  launch("skew reducescatter A=8", rankRun, &a, 240);
  a.A = 2;
  a.inPlace = 1;
  launch("skew reducescatter A=2 in place", rankRun, &a, 240);
  a.coll = relayCollectiveAllGather;
  a.A = 4;
  launch("skew allgather A=4 in place", rankRun, &a, 240);
  a.coll = relayCollectiveAllToAll;
  a.A = 8;
  a.inPlace = 0;
  launch("skew alltoall A=8", rankRun, &a, 240);
  return 0;
}

static int runBackToBack(void) {
  runArg a = {2, 10000, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 256, relayRouteOneShot};
  launch("10^4 back-to-back all-reduce A=2", rankRun, &a, 500);
  runArg b = {8, 2000, 0, 1, relayCollectiveReduceScatter, relayBfloat16, relaySum, 1, 33, relayRouteOneShot};
  launch("2000 back-to-back reduce-scatter A=8", rankRun, &b, 500);
  return 0;
}

static int runCycles(void) {
  launch("100 create/destroy cycles", rankCycles, NULL, 500);
  return 0;
}

static int runTwoComms(void) {
  launch("two comms", rankTwo, NULL, 300);
  return 0;
}

/* Rank 3 fails to open: every rank declines and runs direct, correctly. */
static int runFault(void) {
  setenv(gRoute == relayRouteBw ? "RELAYCC_BW_FAULT_RANK" : "RELAYCC_ONESHOT_FAULT_RANK", "3", 1);
  runArg a = {4, 20, 1, 1, relayCollectiveAllReduce, relayFloat32, relayAvg, 1, 999, relayRouteDirect};
  launch("fault on rank 3: all ranks direct", rankRun, &a, 240);
  return 0;
}

/* Above the slot: the plan is declined and direct runs on every rank (the one-shot's gate only). */
static int runOversize(void) {
  setenv("RELAYCC_ONESHOT_MAX_BYTES", "4096", 1);
  runArg a = {2, 3, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 1025, relayRouteDirect};
  launch("oversize: direct", rankRun, &a, 240);
  return 0;
}

static int runSweep(void) {
  launch("sweep A x coll x dtype x op x in-place", rankSweep, NULL, 500);
  return 0;
}

/* ---- the bw route's own cases (run after bwSetup) ---- */

/* Many tiles, every form: two-shot A=8 and A=5, push A=2, gathers. */
static int runBwTiles(void) {
  runArg a = {8, 3, 2, 1, relayCollectiveAllReduce, relayBfloat16, relaySum, 1, 100003, relayRouteOneShot};
  launch("bw tiles: two-shot all-reduce A=8 in place, 196 tiles", rankRun, &a, 400);
  a.A = 5, a.dt = relayFloat32, a.op = relayAvg, a.inPlace = 0, a.count = 77777;
  launch("bw tiles: two-shot all-reduce A=5 avg", rankRun, &a, 400);
  a.A = 2, a.count = 300001, a.op = relaySum;
  launch("bw tiles: push all-reduce A=2, 1172 tiles", rankRun, &a, 400);
  a.coll = relayCollectiveAllGather, a.A = 6, a.dt = relayInt32, a.count = 20011;
  launch("bw tiles: all-gather A=6", rankRun, &a, 400);
  a.coll = relayCollectiveAllToAll, a.A = 7, a.count = 9001;
  launch("bw tiles: all-to-all A=7", rankRun, &a, 400);
  a.coll = relayCollectiveReduceScatter, a.A = 3, a.count = 30011, a.op = relayMax;
  launch("bw tiles: reduce-scatter A=3 max", rankRun, &a, 400);
  return 0;
}

/* One slot and 64-byte tiles: no overlap at all, every tile a hand-shake. */
static int runBwRing1(void) {
  setenv("RELAYCC_BW_TILE_BYTES", "64", 1);
  setenv("RELAYCC_BW_RING", "1", 1);
  runArg a = {4, 20, 2, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 3001, relayRouteOneShot};
  launch("bw ring 1: two-shot all-reduce A=4 skewed", rankRun, &a, 400);
  a.coll = relayCollectiveAllToAll, a.A = 8, a.count = 333;
  launch("bw ring 1: all-to-all A=8 skewed", rankRun, &a, 400);
  return 0;
}

/* The one-shot's two-shot (ts-): shards of every kind: A=8 in place, A=5 avg, the whole 1 MiB slot at A=3
 * (max), A=2, and 7 elements among 7 actives (17 elements: shards of 16 and 1, five empty). */
static int runTwoShotSizes(void) {
  runArg a = {8, 3, 2, 1, relayCollectiveAllReduce, relayBfloat16, relaySum, 1, 100003, relayRouteOneShot};
  launch("two-shot all-reduce A=8 in place", rankRun, &a, 400);
  a.A = 5, a.dt = relayFloat32, a.op = relayAvg, a.inPlace = 0, a.count = 77777;
  launch("two-shot all-reduce A=5 avg", rankRun, &a, 400);
  a.A = 3, a.op = relayMax, a.count = 1 << 18;
  launch("two-shot all-reduce A=3 max, 1 MiB", rankRun, &a, 400);
  a.A = 2, a.op = relaySum, a.count = 200001;
  launch("two-shot all-reduce A=2", rankRun, &a, 400);
  a.A = 7, a.dt = relayInt32, a.count = 17, a.calls = 50;
  launch("two-shot all-reduce A=7 of 17 elements, 50 calls", rankRun, &a, 400);
  return 0;
}

/* The two-shot's area outlives its call: it is written again two uses later, after every rank that read it
 * acknowledged, readers that may no longer be in the call (areaReaders). Each call here takes another
 * random active set (the same on every rank: drawn from the call's number), so a rank's area is often
 * rewritten while a reader of two uses ago is no peer of the call; ranks sleep at random first. */
static int rankTwoShotMix(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayComm_t comm = oneshotComm(rank);
  size_t c = 40000, es = sizeof(float);
  float* x = malloc(c * es);
  float* want = malloc(c * es);
  T_CHECK(x && want, "oom");
  unsigned seed = 12345;
  for (int call = 0; call < 300; call++) {
    int perm[NRANKS];
    for (int i = 0; i < NRANKS; i++) perm[i] = i;
    for (int i = NRANKS - 1; i > 0; i--) {
      seed = seed * 1103515245u + 12345u;
      int j = (int)((seed >> 16) % (unsigned)(i + 1)), t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    seed = seed * 1103515245u + 12345u;
    int A = 2 + (int)((seed >> 16) % 7), me = -1;
    for (int i = 0; i < A; i++)
      if (perm[i] == rank) me = i;
    relayLayout_t L = {1, A, perm};
    if (me >= 0) fillInput(relayFloat32, call, me, c, x);
    if ((seed >> 8) % 5 == (unsigned)rank % 5) {
      struct timespec ts = {0, (long)((seed >> 4) % 2000) * 1000L};
      nanosleep(&ts, NULL);
    }
    T_CHECK(relayAllReduce(x, x, &c, relayFloat32, relaySum, &L, comm, NULL) == relaySuccess,
            "rank %d call %d: %s", rank, call, relayGetLastError(comm));
    if (me < 0) continue;
    T_CHECK(comm->last.twoShot == (A >= 3), "rank %d call %d, %d actives: two-shot %d", rank, call, A,
            comm->last.twoShot);
    expected(relayCollectiveAllReduce, relayFloat32, relaySum, call, A, me, -1, 1, c, want);
    T_CHECK(memcmp(x, want, c * es) == 0, "rank %d (active %d of %d) call %d: wrong output", rank, me, A,
            call);
  }
  free(x);
  free(want);
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* Check mode 0, an all-reduce whose count (then datatype, then count in place) differs on active 2 (rank
 * 4): the two-shot's words carry each rank's byte count and shape, so every active fails within 3 s, none
 * reads a shard past another's input, and no input is written. */
static int rankTwoShotMismatch(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  int ranks[4] = {0, 2, 4, 6};
  relayLayout_t L = {1, 4, ranks};
  size_t c = 2000, es = sizeof(float);
  float* in = malloc(3 * c * es);
  float* keep = malloc(3 * c * es);
  float* out = malloc(3 * c * es);
  T_CHECK(in && keep && out, "oom");
  for (int v = 0; v < 3; v++) {
    relayComm_t comm = oneshotComm(rank);
    fillInput(relayFloat32, 1, rank, 3 * c, in);
    T_OK(relayAllReduce(in, out, &c, relayFloat32, relaySum, &L, comm, NULL)); /* readies the region */
    memcpy(keep, in, 3 * c * es);
    size_t mine = v != 1 && rank == 4 ? 3 * c : c;
    relayDataType_t dt = v == 1 && rank == 4 ? relayInt32 : relayFloat32;
    uint64_t t0 = relayNowNs();
    relayResult_t r = relayAllReduce(in, v == 2 ? in : out, &mine, dt, relaySum, &L, comm, NULL);
    double sec = (double)(relayNowNs() - t0) / 1e9;
    if (rank % 2 == 0) {
      T_CHECK(r != relaySuccess && sec < 3.0, "rank %d: %s differs on rank 4 -> %s after %.2f s (%s)", rank,
              v == 1 ? "datatype" : "count", relayGetErrorString(r), sec, relayGetLastError(comm));
      T_CHECK(memcmp(in, keep, 3 * c * es) == 0, "rank %d: the failed call wrote its input", rank);
    }
    relayCommDestroy(comm); /* a failed comm: no T_OK */
  }
  free(in);
  free(keep);
  free(out);
  return 0;
}

static int runTwoShotMismatch(void) {
  launch("two-shot all-reduce, count then datatype differing on one rank", rankTwoShotMismatch, NULL, 120);
  return 0;
}

static int runTwoShotMix(void) {
  /* Rank 3 copies its reduced shards out 5 ms late every call: its peers run on without it (it sits out
   * most calls) and must not rewrite an area it still reads */
  setenv("RELAYCC_ONESHOT_STALL_RANK", "3", 1);
  launch("two-shot all-reduce, a random active set each call", rankTwoShotMix, NULL, 500);
  return 0;
}

static int runBwAbort(void) {
  launch("bw abort mid-call", rankAbort, NULL, 120);
  return 0;
}

static int runBwDisagree(void) {
  runArg a = {4, 5, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 3001, relayRouteBw};
  launch("bw settings differ between ranks: rank 0's agreed, all bw", rankDisagree, &a, 240);
  return 0;
}

/* RELAYCC_BW_RING=0: no plan, a forced bw runs direct, correctly. */
static int runBwOff(void) {
  setenv("RELAYCC_BW_RING", "0", 1);
  runArg a = {4, 3, 0, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 3001, relayRouteDirect};
  launch("bw off: all direct", rankRun, &a, 240);
  return 0;
}

/* ---- the one-copy path (bwcma- cases: RELAYCC_SHM_CMA_BYTES=64) ---- */

/* Rank 1 refuses cross-memory attach (not dumpable, and no rank has CAP_SYS_PTRACE): the setup's vote
 * keeps every rank staged (RELAYCC_DEBUG=1 prints why), and the calls are right. */
static int rankCmaRefused(int rank, int nranks, void* arg) {
  t_drop_ptrace_cap();
  if (rank == 1) T_CHECK(prctl(PR_SET_DUMPABLE, 0) == 0, "prctl: %s", strerror(errno));
  return rankRun(rank, nranks, arg);
}

static int runCmaRefused(void) {
  setenv("RELAYCC_DEBUG", "1", 1);
  gCmaWant = 0;
  runArg a = {4, 4, 1, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 30011, relayRouteOneShot};
  launch("bwcma refused by rank 1: every rank staged", rankCmaRefused, &a, 240);
  a.coll = relayCollectiveAllGather, a.A = 8;
  launch("bwcma refused by rank 1: all-gather staged", rankCmaRefused, &a, 240);
  a.coll = relayCollectiveBroadcast, a.A = 4, a.calls = 8;
  launch("bwcma refused by rank 1: broadcast staged, the root at every position", rankCmaRefused, &a, 240);
  return 0;
}

/* The read's measured cost (RELAYCC_SHM_CMA_SLOW_NS, bw.c bwCmaReadNs): at 1 ns no host's read is cheap
 * enough, so every rank stays staged, alike (the least of the ranks' costs, agreed, decides), and the calls
 * are right; at 1 s every host's is, so the floors decide again. Both measure. */
static int runCmaSlow(void) {
  setenv("RELAYCC_DEBUG", "1", 1);
  setenv("RELAYCC_SHM_CMA_SLOW_NS", "1", 1);
  gCmaWant = 0;
  runArg a = {4, 4, 1, 1, relayCollectiveAllReduce, relayFloat32, relaySum, 0, 30011, relayRouteOneShot};
  launch("bwcma slow read: all-reduce A=4 staged", rankRun, &a, 240);
  a.coll = relayCollectiveAllGather, a.A = 2;
  launch("bwcma slow read: all-gather A=2 staged", rankRun, &a, 240);
  a.coll = relayCollectiveBroadcast, a.calls = 4;
  launch("bwcma slow read: broadcast A=2 staged, the root at both positions", rankRun, &a, 240);
  setenv("RELAYCC_SHM_CMA_SLOW_NS", "1000000000", 1);
  gCmaWant = 1;
  launch("bwcma cheap read: broadcast A=2 one copy", rankRun, &a, 240);
  a.coll = relayCollectiveAllReduce, a.A = 4, a.calls = 1;
  launch("bwcma cheap read: all-reduce A=4 one copy", rankRun, &a, 240);
  setenv("RELAYCC_SHM_CMA_SLOW_NS", "0", 1);
  unsetenv("RELAYCC_DEBUG");
  return 0;
}

/* The defaults (RELAYCC_SHM_CMA_BYTES 64 KiB, RELAYCC_SHM_CMA_PAIR_BYTES 4 KiB) on the forced bw route: 2
 * actives take the one-copy path from 4 KiB of each rank's input on, 3 stay staged below 64 KiB. */
static int runCmaPair(void) {
  unsetenv("RELAYCC_SHM_CMA_BYTES");
  unsetenv("RELAYCC_SHM_CMA_PAIR_BYTES");
  gCmaWant = 1;
  gCmaFloor = 64 << 10, gCmaPairFloor = 4 << 10;
  runArg a = {2, 3, 0, 1, relayCollectiveAllGather, relayFloat32, relaySum, 0, 2048, relayRouteOneShot};
  launch("bw pair floor: all-gather A=2 of 8 KiB, one copy", rankRun, &a, 240);
  a.A = 3;
  launch("bw pair floor: all-gather A=3 of 8 KiB, staged", rankRun, &a, 240);
  a.A = 2, a.coll = relayCollectiveAllReduce, a.count = 512;
  launch("bw pair floor: all-reduce A=2 of 2 KiB, staged", rankRun, &a, 240);
  a.count = 4096, a.coll = relayCollectiveReduceScatter;
  launch("bw pair floor: reduce-scatter A=2 of 32 KiB, one copy", rankRun, &a, 240);
  return 0;
}

/* The broadcast's floors at their defaults (RELAYCC_SHM_CMA_ROOTED_BYTES 1 MiB of what the root sends in
 * all; at A = 2 RELAYCC_SHM_CMA_PAIR_BYTES 4 KiB, the lower), on the forced bw route: one element below
 * the floor staged, at it and one above one copy, A = 2 (1024 floats) and A = 8 (7 x 37450 floats), in and
 * out of place, the root at every position; a reduce stays staged. Then A = 2 with the pair floor 0: the
 * rooted floor's 1 MiB (262144 floats) again. */
static int runCmaRootedFloor(void) {
  unsetenv("RELAYCC_SHM_CMA_BYTES");
  unsetenv("RELAYCC_SHM_CMA_ROOTED_BYTES");
  unsetenv("RELAYCC_SHM_CMA_PAIR_BYTES");
  gCmaWant = 1;
  gCmaFloor = 64 << 10, gCmaPairFloor = 4 << 10, gCmaRootedFloor = 1 << 20;
  static const struct {
    int A;
    size_t floorCount; /* the least count at the floor */
    const char* pair;  /* RELAYCC_SHM_CMA_PAIR_BYTES, NULL: the default */
  } rows[] = {{2, 1024, NULL}, {8, 37450, NULL}, {2, 262144, "0"}};
  for (int i = 0; i < 3; i++) {
    if (rows[i].pair) setenv("RELAYCC_SHM_CMA_PAIR_BYTES", rows[i].pair, 1);
    gCmaPairFloor = rows[i].pair ? 0 : 4 << 10;
    for (int d = -1; d <= 1; d++)
      for (int ip = 0; ip < 2; ip++) {
        int A = rows[i].A;
        runArg a = {A,
                    A,
                    0,
                    1,
                    relayCollectiveBroadcast,
                    relayFloat32,
                    relaySum,
                    ip,
                    rows[i].floorCount - 1 + (size_t)(d + 1),
                    relayRouteOneShot};
        char what[160];
        snprintf(what, sizeof what, "bw broadcast floor: A=%d count %zu (%s the floor)%s%s", A, a.count,
                 d < 0 ? "below"
                 : d   ? "above"
                       : "at",
                 ip ? " in place" : "", rows[i].pair ? ", pair floor 0" : "");
        launch(what, rankRun, &a, 240);
      }
  }
  unsetenv("RELAYCC_SHM_CMA_PAIR_BYTES");
  gCmaPairFloor = 4 << 10;
  runArg r = {8, 8, 0, 1, relayCollectiveReduce, relayFloat32, relaySum, 0, 37451, relayRouteOneShot};
  launch("bw reduce above the broadcast's floor: staged", rankRun, &r, 240);
  r.A = 2, r.calls = 2, r.count = 1024;
  launch("bw reduce A=2 at the pair floor: staged", rankRun, &r, 240);
  return 0;
}

/* Ranks 7 and 3 run one-copy all-reduces of 4 MiB back to back (bwcma-; ts-: ranks 7, 3 and 5, two-shot
 * all-reduces of 1 MiB); rank 3 is killed 300 ms in: every other active's call ends within 3 s (deadline
 * 60 s), its error naming rank 3, whether it was copying from the dead process or waiting for it. */
static void* killSoon(void* p) {
  (void)p;
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  raise(SIGKILL);
  return NULL;
}

static int rankCmaKill(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayComm_t comm = oneshotComm(rank);
  int ranks[3] = {7, 3, 5}; /* the two-shot (ts-) from 3 actives */
  relayLayout_t L = {1, gTwoShotFrom ? 3 : 2, ranks};
  /* bw: 4 MiB on the one-copy path; the one-shot's two-shot (ts-): 1 MiB, its gate */
  size_t c = gRoute == relayRouteBw ? 1 << 20 : 1 << 18;
  float* sb = malloc(c * sizeof(float));
  float* rb = malloc(c * sizeof(float));
  T_CHECK(sb && rb, "oom");
  fillInput(relayFloat32, 1, rank, c, sb);
  /* Every rank: the first call sets the route up, collectively. */
  T_OK(relayAllReduce(sb, rb, &c, relayFloat32, relaySum, &L, comm, NULL));
  if (rank == 7 || rank == 3 || (L.nActive == 3 && rank == 5)) {
    if (gRoute == relayRouteBw)
      T_CHECK(comm->last.window == UINT32_MAX, "rank %d: 4 MiB all-reduce not on the one-copy path", rank);
    else T_CHECK(comm->last.twoShot, "rank %d: 1 MiB one-shot all-reduce not two-shot", rank);
    pthread_t th;
    if (rank == 3) T_CHECK(pthread_create(&th, NULL, killSoon, NULL) == 0, "pthread_create");
    relayResult_t r = relaySuccess;
    double dt = 0;
    for (uint64_t t0 = relayNowNs(); r == relaySuccess && relayNowNs() - t0 < 10000000000ull;) {
      uint64_t t1 = relayNowNs();
      r = relayAllReduce(sb, rb, &c, relayFloat32, relaySum, &L, comm, NULL);
      dt = (double)(relayNowNs() - t1) / 1e9;
    }
    if (rank != 3)
      T_CHECK(r != relaySuccess && strstr(relayGetLastError(comm), "rank 3") && dt < 3.0,
              "rank %d: %s call with a killed peer -> %s after %.2f s (%s)", rank,
              gRoute == relayRouteBw ? "one-copy" : "two-shot", relayGetErrorString(r), dt,
              relayGetLastError(comm));
  }
  relayCommDestroy(comm); /* rank 7's comm is failed: no T_OK */
  free(sb);
  free(rb);
  return 0;
}

static int runCmaKill(void) {
  int codes[NRANKS];
  int rc = t_launch(NRANKS, rankCmaKill, NULL, 60, 15000, codes);
  T_CHECK(rc != 0 && codes[3] == -SIGKILL, "rank 3 exit %d, want -SIGKILL", codes[3]);
  for (int r = 0; r < NRANKS; r++) T_CHECK(r == 3 || codes[r] == 0, "rank %d exited %d", r, codes[r]);
  printf("%s kill: ok\n", gRoute == relayRouteBw ? "bwcma" : "two-shot");
  return 0;
}

/* Broadcasts on ranks 7, 5, 3, 1 back to back, one-copy ones of 4 MiB (the bwcma- cases) or carried ones of
 * 4 KiB (the one-shot's: the block rides the agreement); rank 3 is killed 300 ms in, as a reader (root
 * position 0: rank 7) or as the root (position 2): every surviving active's call ends within 3 s (deadline
 * 60 s), its error naming rank 3 (the root's directly; a reader's through the root's failure when rank 3
 * was a reader, or the agreement's wait for its record). */
static int rankKillRooted(int rank, int nranks, void* arg) {
  (void)nranks;
  int root = *(const int*)arg, carried = gRoute == relayRouteOneShot;
  relayComm_t comm = oneshotComm(rank);
  int ranks[4] = {7, 5, 3, 1};
  relayLayout_t L = {1, 4, ranks};
  size_t c = carried ? 1024 : 1 << 20;
  float* sb = malloc(c * sizeof(float));
  float* rb = malloc(c * sizeof(float));
  T_CHECK(sb && rb, "oom");
  fillInput(relayFloat32, 1, rank, c, sb);
  T_OK(relayBroadcast(sb, rb, &c, relayFloat32, root, &L, comm, NULL)); /* sets the route up, collectively */
  if (carried) T_OK(relayBroadcast(sb, rb, &c, relayFloat32, root, &L, comm, NULL)); /* the region is ready */
  int active = rank == 7 || rank == 5 || rank == 3 || rank == 1;
  if (active && carried) T_CHECK(comm->last.carried, "rank %d: 4 KiB one-shot broadcast not carried", rank);
  if (active && !carried)
    T_CHECK(comm->last.window == UINT32_MAX, "rank %d: 4 MiB broadcast not on the one-copy path", rank);
  pthread_t th;
  if (rank == 3) T_CHECK(pthread_create(&th, NULL, killSoon, NULL) == 0, "pthread_create");
  /* Every rank calls every broadcast (helpers too: a rooted call's agreement round is every rank's). */
  relayResult_t r = relaySuccess;
  double dt = 0;
  for (uint64_t t0 = relayNowNs(); r == relaySuccess && relayNowNs() - t0 < 10000000000ull;) {
    uint64_t t1 = relayNowNs();
    r = relayBroadcast(sb, rb, &c, relayFloat32, root, &L, comm, NULL);
    dt = (double)(relayNowNs() - t1) / 1e9;
  }
  T_CHECK(r != relaySuccess && dt < 3.0, "rank %d: broadcast with rank 3 killed -> %s after %.2f s (%s)",
          rank, relayGetErrorString(r), dt, relayGetLastError(comm));
  if (active) printf("rank %d: %s\n", rank, relayGetLastError(comm));
  if (active)
    T_CHECK(strstr(relayGetLastError(comm), "rank 3"),
            "rank %d: %s broadcast (root position %d) with rank 3 killed: the error does not name it (%s)",
            rank, carried ? "carried" : "one-copy", root, relayGetLastError(comm));
  relayCommDestroy(comm); /* the actives' comms are failed: no T_OK */
  free(sb);
  free(rb);
  return 0;
}

static int runKillRooted(void) {
  static const int roots[2] = {0, 2};
  for (int i = 0; i < 2; i++) {
    int codes[NRANKS];
    int rc = t_launch(NRANKS, rankKillRooted, (void*)&roots[i], 60, 15000, codes);
    T_CHECK(rc != 0 && codes[3] == -SIGKILL, "rank 3 exit %d, want -SIGKILL", codes[3]);
    for (int r = 0; r < NRANKS; r++) T_CHECK(r == 3 || codes[r] == 0, "rank %d exited %d", r, codes[r]);
    printf("%s kill, broadcast root position %d: ok\n", gRoute == relayRouteOneShot ? "carried" : "bwcma",
           roots[i]);
  }
  return 0;
}

/* A reader stopped past the root's deadline (1.5 s): a child of rank 3 stops it (SIGSTOP) 300 ms into
 * one-copy broadcasts of 4 MiB from rank 7 and resumes it 4 s later. Rank 7's call ends at its deadline
 * naming rank 3 and marks it failed; rank 3, resumed, may still read rank 7's buffer, but its call fails
 * naming rank 7: no success from a buffer its owner has back. Every rank calls every broadcast (a rooted
 * call's agreement round is every rank's), so rank 3 may be stopped there too: the answers are the same. */
static int rankRootedDeadline(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = gRoute;
  cfg.timeoutMs = 1500;
  relayComm_t comm = t_comm(rank, NRANKS, &cfg);
  int ranks[2] = {7, 3};
  relayLayout_t L = {1, 2, ranks};
  size_t c = 1 << 20;
  float* sb = malloc(c * sizeof(float));
  float* rb = malloc(c * sizeof(float));
  T_CHECK(sb && rb, "oom");
  fillInput(relayFloat32, 2, rank, c, sb);
  T_OK(relayBroadcast(sb, rb, &c, relayFloat32, 0, &L, comm, NULL));
  pid_t child = -1;
  if (rank == 3) {
    T_CHECK(comm->last.window == UINT32_MAX, "rank 3: 4 MiB broadcast not on the one-copy path");
    pid_t parent = getpid();
    child = fork();
    T_CHECK(child >= 0, "fork: %s", strerror(errno));
    if (child == 0) {
      struct timespec a = {0, 300 * 1000000L}, b = {4, 0};
      nanosleep(&a, NULL);
      kill(parent, SIGSTOP);
      nanosleep(&b, NULL);
      kill(parent, SIGCONT);
      _exit(0);
    }
  }
  relayResult_t r = relaySuccess;
  double dt = 0;
  for (uint64_t t0 = relayNowNs(); r == relaySuccess && relayNowNs() - t0 < 15000000000ull;) {
    uint64_t t1 = relayNowNs();
    r = relayBroadcast(sb, rb, &c, relayFloat32, 0, &L, comm, NULL);
    dt = (double)(relayNowNs() - t1) / 1e9;
  }
  if (rank == 7) {
    T_CHECK(r == relayTimeout && strstr(relayGetLastError(comm), "rank 3") && dt < 3.0,
            "rank 7: broadcast with its reader stopped -> %s after %.2f s (%s)", relayGetErrorString(r), dt,
            relayGetLastError(comm));
    struct timespec ts = {6, 0}; /* alive while rank 3 looks: it must see "failed", not "died" */
    nanosleep(&ts, NULL);
  } else {
    T_CHECK(r != relaySuccess, "rank %d: success with rank 3 stopped past the deadline", rank);
    if (rank == 3)
      T_CHECK(strstr(relayGetLastError(comm), "rank 7"), "rank 3: resumed reader -> %s (%s)",
              relayGetErrorString(r), relayGetLastError(comm));
  }
  if (child > 0) waitpid(child, NULL, 0);
  if (rank == 7 || rank == 3) printf("rank %d: %s\n", rank, relayGetLastError(comm));
  relayCommDestroy(comm);
  free(sb);
  free(rb);
  return 0;
}

/* Carried broadcasts of 64 KiB from one root, back to back (its carry slot rewritten every other agreement
 * round), members late by 0-150 us at random, every output checked: a member that read the slot of the
 * wrong round would see the next call's block. A = 8, then A = 3 (ranks 6, 1, 4) on the same comm, where
 * the five others take the agreement only. */
static int rankCarryReuse(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  relayComm_t comm = oneshotComm(rank);
  static int all8[8] = {0, 1, 2, 3, 4, 5, 6, 7}, three[3] = {6, 1, 4};
  size_t c = 16384;
  float* sb = malloc(c * sizeof(float));
  float* rb = malloc(c * sizeof(float));
  float* want = malloc(c * sizeof(float));
  T_CHECK(sb && rb && want, "oom");
  unsigned seed = 977u * (unsigned)rank + 1;
  for (int li = 0; li < 2; li++) {
    int A = li ? 3 : 8, root = li ? 2 : 5, me = -1;
    relayLayout_t L = {1, A, li ? three : all8};
    for (int i = 0; i < A; i++)
      if (L.ranks[i] == rank) me = i;
    for (int call = 0; call < 300; call++) {
      if (me == root) fillInput(relayFloat32, call, root, c, sb);
      memset(rb, 0xCD, c * sizeof(float));
      if (me >= 0 && me != root) {
        struct timespec ts = {0, (long)(rand_r(&seed) % 150) * 1000L};
        nanosleep(&ts, NULL);
      }
      relayResult_t r = relayBroadcast(sb, rb, &c, relayFloat32, root, &L, comm, NULL);
      T_CHECK(r == relaySuccess, "rank %d A=%d call %d: %s (%s)", rank, A, call, relayGetErrorString(r),
              relayGetLastError(comm));
      if (me < 0) continue;
      T_CHECK(comm->last.carried || (li == 0 && call == 0), "rank %d A=%d call %d: not carried", rank, A,
              call);
      expected(relayCollectiveBroadcast, relayFloat32, relaySum, call, A, me, root, 0, c, want);
      T_CHECK(memcmp(rb, want, c * sizeof(float)) == 0, "rank %d (active %d) A=%d call %d: wrong block", rank,
              me, A, call);
    }
  }
  T_OK(relayCommDestroy(comm));
  free(sb);
  free(rb);
  free(want);
  return 0;
}

static int runCarryReuse(void) {
  launch("carried broadcasts from one root, members late", rankCarryReuse, NULL, 240);
  return 0;
}

static int runRootedDeadline(void) {
  launch("bwcma broadcast: a reader past the root's deadline", rankRootedDeadline, NULL, 120);
  return 0;
}

/* RELAYCC_CHECK=1: the one-copy path under check mode's agreement round. */
static int runCmaCheck(void) {
  setenv("RELAYCC_CHECK", "1", 1);
  return runSkew();
}

/* Broadcast (one copy from 64 bytes the root sends in all, in the bwcma- cases; carried in the one-shot's
 * check mode 0) and reduce (staged) with odd ranks late, A = 2, 3, 4, 8, the root at every position; in check
 * mode 0 (shm agrees on a rooted call's shape first) and 1 (check mode's agreement round first). */
static int runRootedSkew(void) {
  for (int check = 0; check < 2; check++) {
    setenv("RELAYCC_CHECK", check ? "1" : "0", 1);
    /* The one-shot's broadcast rides the shape agreement in check mode 0; check mode's round carries no
     * block, so there the exchange after it runs (both forms, under the same skew). */
    if (gRoute == relayRouteOneShot) gCarryWant = !check;
    static const int As[] = {2, 3, 4, 8};
    for (int ai = 0; ai < 4; ai++) {
      runArg a = {As[ai],        2 * As[ai], 2,      1,     relayCollectiveBroadcast,
                  relayBfloat16, relaySum,   ai & 1, 10007, relayRouteOneShot};
      char what[160];
      snprintf(what, sizeof what, "skew broadcast A=%d%s, check mode %d", As[ai], ai & 1 ? " in place" : "",
               check);
      launch(what, rankRun, &a, 240);
      a.coll = relayCollectiveReduce, a.dt = relayFloat32, a.op = relayAvg;
      snprintf(what, sizeof what, "skew reduce A=%d%s, check mode %d", As[ai], ai & 1 ? " in place" : "",
               check);
      launch(what, rankRun, &a, 240);
    }
  }
  return 0;
}

/* The bw route's cases: 1 KiB tiles, 3 slots (where the environment does not set them): the counts above
 * span 1 to ~1000 tiles, and the ring wraps within a call. */
static void bwSetup(void) {
  gRoute = relayRouteBw;
  setenv("RELAYCC_BW_TILE_BYTES", "1024", 0);
  setenv("RELAYCC_BW_RING", "3", 0);
  /* The floors alone decide the path the cases assert, whatever a read costs on this host (runCmaSlow
   * tests the measured verdict). */
  setenv("RELAYCC_SHM_CMA_SLOW_NS", "0", 1);
}

#define BW_OF(f)            \
  static int bw_##f(void) { \
    bwSetup();              \
    return f();             \
  }
BW_OF(casePlan)
BW_OF(runSkew)
BW_OF(runBackToBack)
BW_OF(runCycles)
BW_OF(runTwoComms)
BW_OF(runFault)
BW_OF(runSweep)
BW_OF(runBwTiles)
BW_OF(runBwRing1)
BW_OF(runBwAbort)
BW_OF(runBwDisagree)
BW_OF(runBwOff)
BW_OF(runCmaPair)
BW_OF(runCmaRootedFloor)
BW_OF(runRootedSkew)

/* The bw cases again with every call of 64 bytes or more on the one-copy path. */
#define CMA_OF(f)                                    \
  static int cma_##f(void) {                         \
    bwSetup();                                       \
    setenv("RELAYCC_SHM_CMA_BYTES", "64", 1);        \
    setenv("RELAYCC_SHM_CMA_ROOTED_BYTES", "64", 1); \
    if (gCmaWant < 0) gCmaWant = 1;                  \
    return f();                                      \
  }
CMA_OF(runSkew)
CMA_OF(runBackToBack)
CMA_OF(runTwoComms)
CMA_OF(runSweep)
CMA_OF(runBwTiles)
CMA_OF(runBwAbort)
CMA_OF(runCmaRefused)
CMA_OF(runCmaSlow)
CMA_OF(runCmaKill)
CMA_OF(runCmaCheck)
CMA_OF(runKillRooted)
CMA_OF(runRootedDeadline)
CMA_OF(runRootedSkew)

/* At the default settings, before the tests' own. */
static int bw_caseRoute(void) {
  gRoute = relayRouteBw;
  return caseRoute();
}

/* The one-shot's two-shot all-reduce from 64 bytes of input per rank: the cases mix it with the push form
 * (smaller calls, the other collectives) on the same pairs' epochs and active sets. */
#define TS_OF(f)                                      \
  static int ts_##f(void) {                           \
    gRoute = relayRouteOneShot;                       \
    setenv("RELAYCC_ONESHOT_TWOSHOT_BYTES", "64", 1); \
    gTwoShotFrom = 64;                                \
    return f();                                       \
  }
TS_OF(casePlan)
TS_OF(runSkew)
TS_OF(runBackToBack)
TS_OF(runTwoComms)
TS_OF(runSweep)
TS_OF(runTwoShotSizes)
TS_OF(runTwoShotMix)
TS_OF(runTwoShotMismatch)
TS_OF(runBwAbort)
TS_OF(runCmaKill)

#define OS(nm, f) \
  { .name = nm, .fn = f, .timeoutS = 600 }
#define BW(nm, f) \
  { .name = "bw-" nm, .fn = bw_##f, .timeoutS = 600, .ctest = "bw_" nm }
#define CMA(nm, f) \
  { .name = "bwcma-" nm, .fn = cma_##f, .timeoutS = 600, .ctest = "bwcma_" nm }
#define TS(nm, f) \
  { .name = "ts-" nm, .fn = ts_##f, .timeoutS = 600, .ctest = "oneshot_ts_" nm }
static const tCase kCases[] = {
    OS("plan", casePlan),
    OS("skew", runSkew),
    OS("backtoback", runBackToBack),
    OS("cycles", runCycles),
    OS("twocomms", runTwoComms),
    OS("fault", runFault),
    OS("oversize", runOversize),
    OS("sweep", runSweep),
    OS("rootedskew", runRootedSkew),
    OS("killrooted", runKillRooted),
    OS("carryreuse", runCarryReuse),
    TS("plan", casePlan),
    TS("skew", runSkew),
    TS("backtoback", runBackToBack),
    TS("twocomms", runTwoComms),
    TS("sweep", runSweep),
    TS("sizes", runTwoShotSizes),
    TS("mix", runTwoShotMix),
    TS("mismatch", runTwoShotMismatch),
    TS("abort", runBwAbort),
    TS("kill", runCmaKill),
    BW("plan", casePlan),
    BW("skew", runSkew),
    BW("backtoback", runBackToBack),
    BW("cycles", runCycles),
    BW("twocomms", runTwoComms),
    BW("fault", runFault),
    BW("sweep", runSweep),
    BW("tiles", runBwTiles),
    BW("ring1", runBwRing1),
    BW("abort", runBwAbort),
    BW("disagree", runBwDisagree),
    BW("route", caseRoute),
    BW("off", runBwOff),
    BW("pairfloor", runCmaPair),
    BW("rootedfloor", runCmaRootedFloor),
    BW("rootedskew", runRootedSkew),
    CMA("skew", runSkew),
    CMA("backtoback", runBackToBack),
    CMA("twocomms", runTwoComms),
    CMA("sweep", runSweep),
    CMA("tiles", runBwTiles),
    CMA("abort", runBwAbort),
    CMA("refused", runCmaRefused),
    CMA("slow", runCmaSlow),
    CMA("kill", runCmaKill),
    CMA("check", runCmaCheck),
    CMA("killrooted", runKillRooted),
    CMA("rooteddeadline", runRootedDeadline),
    CMA("rootedskew", runRootedSkew),
};

int main(int argc, char** argv) { return t_main(argc, argv, "oneshot", kCases, T_NCASES(kCases)); }
