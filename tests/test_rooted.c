/*
 * Broadcast and reduce (rooted by position) on every route that serves them, in one process: each plan
 * through the plan checker and the reference executor against the serial reference (tc_expected_root),
 * at A = 2..8 on 8 ranks, fused and independent, the root moving, odd and zero counts, in place, every
 * dtype and op; and the router's answers for them on the MI350X and CPU models. The same routes on the
 * shm transport: test_colls's broadcast and reduce sweeps (check modes 0 and 1).
 *
 * Usage: test_rooted <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colls_common.h"
#include "comm/common.h"
#include "comm/transport.h"
#include "harness.h"
#include "plan/plan.h"
#include "ref/ref.h"
#include "route/route.h"
#include "route/table.h"
#include "sim/sim.h"
#include "topo/topo.h"

#define NRANKS 8
#define GUARD 64 /* bytes either side of every caller buffer */
#define POISON 0xC5
/* A wrong result that the sweep counts (and goes on: one run names every failing shape). */
#define RFAIL(...)                \
  do {                            \
    fprintf(stderr, "FAIL: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");        \
  } while (0)

typedef struct {
  relayCollective_t coll;
  int A, G, root, route, depth, inPlace;
  int ranks[NRANKS];
  size_t counts[NRANKS];
  relayDataType_t dt;
  relayRedOp_t op;
} rcfg;

/* 1 when the route's builder must serve f (the coverage plan_relay.c and plan_oneshot.c document). */
static int served(const rcfg* f) {
  if (f->route == relayRouteRelay) return f->A < NRANKS; /* a helper to relay through */
  if (f->route == relayRouteOneShot)
    return f->G == 1 && f->A <= RELAY_ONESHOT_MAX_ACTIVE &&
           f->counts[0] * relayTypeSize(f->dt) <= RELAY_ONESHOT_GATE_MAX;
  if (f->route == relayRouteBw) return f->G == 1 && f->A <= RELAY_ONESHOT_MAX_ACTIVE; /* any count */
  return 1;
}

static void describe(const rcfg* f, char* out, size_t len) {
  snprintf(out, len, "%s A=%d G=%d root=%d %s %s route=%s depth=%d %s counts=%zu,%zu", relayCollName(f->coll),
           f->A, f->G, f->root, relayTypeName(f->dt), relayOpName(f->op), relayRouteName(f->route), f->depth,
           f->inPlace ? "in-place" : "out-of-place", f->counts[0], f->G > 1 ? f->counts[1] : 0);
}

/* Runs f's plan on the reference executor; returns the number of failures (0: every output as the serial
 * reference says, every buffer a rank must not write as it was, nothing written outside a buffer). */
static int runOne(const rcfg* f) {
  char what[200], err[512];
  describe(f, what, sizeof what);
  planKey k = planKeyInit(f->coll, NRANKS, f->G, f->A, f->ranks, f->counts, f->dt);
  k.op = f->op;
  k.route = f->route;
  k.depth = f->depth;
  k.root = f->root;
  relayPlan* p = NULL;
  relayResult_t res = relayPlanBuild(&k, &p);
  if (!served(f)) {
    T_CHECK(res == relayNotSupported, "%s: built (%s), but the route's coverage says not served", what,
            relayGetErrorString(res));
    return 0;
  }
  T_CHECK(res == relaySuccess && p, "%s: build: %s", what, relayGetErrorString(res));
  T_CHECK(p->route == f->route, "%s: plan of route %s", what, relayRouteName(p->route));
  T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s: checker: %s", what, err);
  size_t es = relayTypeSize(f->dt);
  int bcast = f->coll == relayCollectiveBroadcast;
  char* bufs[NRANKS][2] = {{0}}; /* [rank][send, recv]: with guards; in place: recv only */
  size_t bytes[NRANKS] = {0};
  void* sendp[NRANKS] = {0};
  void* recvp[NRANKS] = {0};
  for (int g = 0; g < f->G; g++)
    for (int i = 0; i < f->A; i++) {
      int r = f->ranks[g * f->A + i], root = i == f->root;
      size_t c = f->counts[g];
      bytes[r] = c * es;
      for (int b = 0; b < 2; b++) {
        if (b == 0 && f->inPlace) continue;
        /* A non-root passes NULL for the buffer it does not use on odd positions (NCCL allows it). */
        if (!root && (i % 2) && !f->inPlace && b == (bcast ? 0 : 1)) continue;
        bufs[r][b] = malloc(bytes[r] + 2 * GUARD);
        T_CHECK(bufs[r][b], "out of memory");
        memset(bufs[r][b], POISON, bytes[r] + 2 * GUARD);
      }
      char* s = f->inPlace ? bufs[r][1] : bufs[r][0];
      if (s && (!bcast || root)) tc_fill_input(f->coll, f->dt, f->op, f->A, i, c, s + GUARD);
      sendp[r] = s ? s + GUARD : NULL;
      recvp[r] = bufs[r][1] ? bufs[r][1] + GUARD : NULL;
    }
  /* What each buffer must hold afterwards: the unused one (a non-root's) as it was. */
  char* before[NRANKS] = {0};
  for (int r = 0; r < NRANKS; r++)
    if (bufs[r][1]) {
      before[r] = malloc(bytes[r] + 2 * GUARD);
      T_CHECK(before[r], "out of memory");
      memcpy(before[r], bufs[r][1], bytes[r] + 2 * GUARD);
    }
  int bad = 0;
  if (relayRefRun(p, sendp, recvp, err, sizeof err)) {
    RFAIL("%s: reference executor: %s", what, err);
    bad++;
  }
  /* Active-index order everywhere but the relay's reduce at A > 2 (the relay reduce-scatter's order):
   * bit for bit with the serial reference there, within the dtype's tolerance otherwise. */
  int exact = bcast || f->route != relayRouteRelay || f->A == 2;
  for (int g = 0; g < f->G && !bad; g++)
    for (int i = 0; i < f->A && !bad; i++) {
      int r = f->ranks[g * f->A + i], root = i == f->root;
      size_t c = f->counts[g];
      if (bufs[r][1] && (bcast || root)) {
        char* want = malloc(bytes[r] + 1);
        T_CHECK(want, "out of memory");
        tc_expected_root(f->coll, f->dt, f->op, f->A, i, f->root, c, want);
        size_t first = 0, wrong = exact ? 0 : tc_compare(f->dt, recvp[r], want, c, &first);
        if (exact)
          for (size_t e = 0; e < c && !wrong; e++)
            if (memcmp((char*)recvp[r] + e * es, want + e * es, es)) wrong = 1, first = e;
        if (wrong) {
          RFAIL("%s: rank %d (group %d index %d): wrong from element %zu", what, r, g, i, first);
          bad++;
        }
        free(want);
      } else if (bufs[r][1] && memcmp(bufs[r][1] + GUARD, before[r] + GUARD, bytes[r])) {
        RFAIL("%s: rank %d (group %d index %d): a non-root's receive buffer was written", what, r, g, i);
        bad++;
      }
      for (int b = 0; b < 2 && !bad; b++)
        for (int side = 0; side < 2 && bufs[r][b]; side++) {
          const unsigned char* z = (unsigned char*)bufs[r][b] + (side ? GUARD + bytes[r] : 0);
          for (int x = 0; x < GUARD; x++)
            if (z[x] != POISON) {
              RFAIL("%s: rank %d wrote outside its buffer", what, r);
              bad++;
              break;
            }
        }
    }
  for (int r = 0; r < NRANKS; r++) {
    free(bufs[r][0]);
    free(bufs[r][1]);
    free(before[r]);
  }
  relayPlanFree(p);
  return bad;
}

static int caseRef(void) {
  static const relayCollective_t colls[] = {relayCollectiveBroadcast, relayCollectiveReduce};
  static const int As[] = {2, 3, 4, 5, 8};
  static const size_t countsList[] = {0, 1, 7, 257, 4099};
  static const int routes[][2] = {{relayRouteDirect, 1},
                                  {relayRouteRelay, 1},
                                  {relayRouteRelay, 8},
                                  {relayRouteOneShot, 1},
                                  {relayRouteBw, 1}};
  relayDataType_t dtypes3[] = {relayFloat32, relayInt32, relayBfloat16};
  int runs = 0, bad = 0;
  for (size_t ci = 0; ci < 2; ci++)
    for (size_t ai = 0; ai < sizeof As / sizeof As[0]; ai++)
      for (int G = 1; G <= 2; G++) {
        int A = As[ai];
        if (G * A > NRANKS) continue;
        for (size_t ni = 0; ni < sizeof countsList / sizeof countsList[0]; ni++) {
          int full = ni < 4; /* every dtype and op at the small counts, three dtypes at the largest */
          int nd = full ? relayNumTypes : 3;
          for (int di = 0; di < nd; di++) {
            relayDataType_t dt = full ? (relayDataType_t)di : dtypes3[di];
            int nops = colls[ci] == relayCollectiveReduce ? relayNumOps : 1;
            for (int op = 0; op < nops; op++)
              for (size_t ri = 0; ri < sizeof routes / sizeof routes[0]; ri++)
                for (int inPlace = 0; inPlace < 2; inPlace++) {
                  rcfg f;
                  memset(&f, 0, sizeof f);
                  f.coll = colls[ci];
                  f.A = A;
                  f.G = G;
                  f.dt = dt;
                  f.op = (relayRedOp_t)op;
                  f.route = routes[ri][0];
                  f.depth = routes[ri][1];
                  f.inPlace = inPlace;
                  f.root = (int)(ni + (size_t)di + (size_t)op) % A;
                  /* permuted layouts: a group's actives are not contiguous ranks */
                  for (int i = 0; i < G * A; i++) f.ranks[i] = (i * 3 + (G > 1 ? 1 : 2)) % NRANKS;
                  /* the second group's count differs (odd, and zero beside a non-zero one) */
                  for (int g = 0; g < G; g++) f.counts[g] = g ? countsList[(ni + 1) % 5] : countsList[ni];
                  if (!f.counts[0] && (G == 1 || !f.counts[1])) continue; /* the API moves nothing */
                  bad += runOne(&f);
                  runs++;
                }
          }
        }
      }
  printf("%d plans run on the reference executor, %d wrong\n", runs, bad);
  return bad ? 1 : 0;
}

/* The router: the relay wins broadcast and reduce at A = 2 on a mesh at 1 GiB (pipelined), and the
 * one-shot is priced for them at small counts only where the transport's one-shot has the rooted form. */
/* The model's time of a bw broadcast of `count` floats on `A` actives (root at position `root`). */
static double bwBcastS(const struct relayTopo* t, int A, const int* ranks, size_t count, int root) {
  planKey k = planKeyInit(relayCollectiveBroadcast, 8, 1, A, ranks, &count, relayFloat32);
  k.op = relaySum, k.route = relayRouteBw, k.depth = 1, k.root = root;
  relayPlan* p = NULL;
  relaySimResult r;
  if (relayPlanBuild(&k, &p) != relaySuccess) return -1;
  double s = relaySimRun(p, t, &r) == relaySuccess ? r.totalS : -1;
  if (s >= 0) relaySimResultFree(&r);
  relayPlanFree(p);
  return s;
}

static int caseRoute(void) {
  int ranks[2] = {2, 5};
  struct relayTopo* t = NULL;
  T_OK(relayTopoLoad("mi350x", &t));
  size_t big = (size_t)1 << 29; /* 1 GiB of bf16 */
  /* The NCCL transport's capabilities (nccl_transport.c), the kernel's rooted one-shot included. */
  const unsigned gpuCaps =
      RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW;
  for (int c = 0; c < 2; c++) {
    planKey k = planKeyInit(c ? relayCollectiveReduce : relayCollectiveBroadcast, 8, 1, 2, ranks, &big,
                            relayBfloat16);
    k.op = relaySum, k.route = relayRouteAuto, k.depth = 1, k.root = 1;
    int route = -1, depth = 0;
    relayRouteChoose(&k, t, (int)gpuCaps, &route, &depth);
    T_CHECK(route == relayRouteRelay && depth > 1, "mi350x %s of 1 GiB: %s depth %d, want relay, pipelined",
            relayCollName(k.coll), relayRouteName(route), depth);
  }
  relayTopoFree(t);
  /* The GPU kernel's rooted one-shot is not priced either (not measured on a GPU yet): auto never takes it,
   * on a mesh or on NVSwitch, at 4 KiB where the layout collectives' one-shot wins. */
  static const char* kGpuTopos[] = {"mi350x", "h200x2"};
  for (int ti = 0; ti < 2; ti++) {
    T_OK(relayTopoLoad(kGpuTopos[ti], &t));
    int pair[2] = {0, 1};
    size_t small4k = 2048; /* 4 KiB of bf16 */
    for (int c = 0; c < 2; c++) {
      planKey k = planKeyInit(c ? relayCollectiveReduce : relayCollectiveBroadcast, ti ? 2 : 8, 1, 2, pair,
                              &small4k, relayBfloat16);
      k.op = relaySum, k.route = relayRouteAuto, k.depth = 1, k.root = 1;
      int route = -1, depth = 0;
      relayRouteChoose(&k, t, (int)gpuCaps, &route, &depth);
      T_CHECK(route != relayRouteOneShot, "%s %s of 4 KiB: auto took the rooted one-shot", kGpuTopos[ti],
              relayCollName(k.coll));
    }
    relayTopoFree(t);
  }
  T_OK(relayTopoLoad("cpu", &t));
  size_t small = 1024; /* 4 KiB of float */
  size_t two[2] = {1024, 1024};
  int four[4] = {0, 1, 2, 3};
  for (int c = 0; c < 2; c++) {
    relayCollective_t coll = c ? relayCollectiveReduce : relayCollectiveBroadcast;
    planKey k = planKeyInit(coll, 8, 1, 2, ranks, &small, relayFloat32);
    k.op = relaySum, k.route = relayRouteAuto, k.depth = 1;
    int route = -1, depth = 0;
    /* auto does not price the rooted one-shot yet (route/table.c oneShotPriced: slower than direct on
     * the 2-core host); forced, it runs (test_colls' sweeps) */
    relayRouteChoose(&k, t, (int)(RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED), &route, &depth);
    T_CHECK(route == relayRouteDirect, "cpu %s of 4 KiB: %s, want direct (auto prices no rooted one-shot)",
            relayCollName(coll), relayRouteName(route));
    relayRouteChoose(&k, t, (int)RELAY_TP_CAP_ONESHOT, &route, &depth);
    T_CHECK(route != relayRouteOneShot, "cpu %s: the one-shot priced without its rooted form",
            relayCollName(coll));
    /* above the gate, and fused: never the one-shot */
    size_t over = RELAY_ONESHOT_DEFAULT_MAX_BYTES / 4 + 1;
    k.counts = &over;
    relayRouteChoose(&k, t, (int)(RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED), &route, &depth);
    T_CHECK(route != relayRouteOneShot, "cpu %s above the gate: oneshot", relayCollName(coll));
    planKey kf = planKeyInit(coll, 8, 2, 2, four, two, relayFloat32);
    kf.op = relaySum, kf.route = relayRouteAuto, kf.depth = 1;
    relayRouteChoose(&kf, t, (int)(RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED), &route, &depth);
    T_CHECK(route != relayRouteOneShot, "cpu fused %s: oneshot", relayCollName(coll));
  }
  /* The bw route's rooted form: auto takes it for broadcast where the transport has it (shm: measured at or
   * ahead of direct from 4 KiB to 4 MiB at 2, 4 and 8 ranks of the 2-core EPYC,
   * docs/perf/2026-12-05-cpu-bcast-2core.md), never without the capability, and not for reduce yet
   * (route/table.c bwPriced); the one-copy path is priced from its floor (topo.h oneCopyRootedBytes). */
  t->oneCopyBytes = 64 << 10, t->oneCopyPairBytes = 4 << 10, t->oneCopyRootedBytes = 1 << 20;
  const unsigned shmCaps =
      RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW | RELAY_TP_CAP_BW_ROOTED;
  int eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  size_t sizes[] = {1024, 1u << 18, 1u << 20}; /* 4 KiB, 1 MiB, 4 MiB of float */
  for (int A = 2; A <= 8; A *= 2)
    for (size_t si = 0; si < 3; si++) {
      planKey k = planKeyInit(relayCollectiveBroadcast, A, 1, A, eight, &sizes[si], relayFloat32);
      k.op = relaySum, k.route = relayRouteAuto, k.depth = 1, k.root = A - 1;
      int route = -1, depth = 0;
      relayRouteChoose(&k, t, (int)shmCaps, &route, &depth);
      T_CHECK(route == relayRouteBw, "cpu broadcast A=%d of %zu floats: %s, want bw", A, sizes[si],
              relayRouteName(route));
      relayRouteChoose(&k, t, (int)(shmCaps & ~RELAY_TP_CAP_BW_ROOTED), &route, &depth);
      T_CHECK(route != relayRouteBw, "cpu broadcast A=%d: bw without its rooted form", A);
      k.coll = relayCollectiveReduce;
      relayRouteChoose(&k, t, (int)shmCaps, &route, &depth);
      T_CHECK(route != relayRouteBw, "cpu reduce A=%d of %zu floats: bw, which auto does not price yet", A,
              sizes[si]);
    }
  /* Priced from its floor: above it the one copy's time, one element below the staged tiles'. */
  {
    size_t at = 37450, below = 37449; /* 7 x 37450 floats >= 1 MiB > 7 x 37449 */
    planKey k = planKeyInit(relayCollectiveBroadcast, 8, 1, 8, eight, &at, relayFloat32);
    k.op = relaySum, k.route = relayRouteBw, k.depth = 1, k.root = 3;
    relayPlan* p = NULL;
    T_OK(relayPlanBuild(&k, &p));
    relaySimResult one, staged;
    T_OK(relaySimRun(p, t, &one));
    relayPlanFree(p);
    k.counts = &below;
    T_OK(relayPlanBuild(&k, &p));
    T_OK(relaySimRun(p, t, &staged));
    relayPlanFree(p);
    /* A rooted floor of 0: the transport takes the one copy for every broadcast (bw.c bwCmaWanted), so the
     * model prices it so (it priced the staged tiles, a path the transport does not run). */
    t->oneCopyRootedBytes = 0;
    k.counts = &below;
    relaySimResult zero;
    T_OK(relayPlanBuild(&k, &p));
    T_OK(relaySimRun(p, t, &zero));
    relayPlanFree(p);
    T_CHECK(zero.totalS < staged.totalS, "cpu broadcast A=8 below the floor, floor 0: %.1f us, staged %.1f",
            zero.totalS * 1e6, staged.totalS * 1e6);
    t->oneCopyBytes = 0; /* the one copy off (RELAYCC_SHM_CMA_BYTES=0): the same count prices staged */
    k.counts = &at;
    relaySimResult off;
    T_OK(relayPlanBuild(&k, &p));
    T_OK(relaySimRun(p, t, &off));
    relayPlanFree(p);
    T_CHECK(one.totalS < off.totalS && staged.totalS > 0.9 * off.totalS && staged.totalS <= off.totalS,
            "cpu broadcast A=8 at the floor: one copy %.1f us, staged below it %.1f, staged at it %.1f",
            one.totalS * 1e6, staged.totalS * 1e6, off.totalS * 1e6);
    relaySimResultFree(&one);
    relaySimResultFree(&staged);
    relaySimResultFree(&off);
    relaySimResultFree(&zero);
  }
  /* A = 2: the rooted floor is the lower of it and the pair's (bw.c bwCmaWanted), and priced so: 1024
   * floats (4 KiB) price as the one copy, as with a rooted floor of 0 (every broadcast one copy), and below
   * the staged tiles' price there; 1023 floats price staged, as with the pair floor 0 (the rooted 1 MiB).
   * 4 actives keep the rooted floor. Auto takes bw from 4 KiB to 256 KiB (the one copy ahead of direct
   * there: docs/perf/2026-12-05-cpu-bcast2-2core.md). */
  {
    int two[2] = {6, 1}, four[4] = {6, 1, 4, 3};
    t->oneCopyBytes = 64 << 10, t->oneCopyPairBytes = 4 << 10, t->oneCopyRootedBytes = 1 << 20;
    double one = bwBcastS(t, 2, two, 1024, 1), below = bwBcastS(t, 2, two, 1023, 1);
    double four1 = bwBcastS(t, 4, four, 1024, 3);
    t->oneCopyRootedBytes = 0;
    double zero = bwBcastS(t, 2, two, 1024, 1);
    t->oneCopyRootedBytes = 1 << 20, t->oneCopyPairBytes = 0;
    double staged = bwBcastS(t, 2, two, 1024, 1), stagedBelow = bwBcastS(t, 2, two, 1023, 1);
    double four0 = bwBcastS(t, 4, four, 1024, 3);
    T_CHECK(one > 0 && below > 0 && zero > 0 && staged > 0 && stagedBelow > 0 && four1 > 0 && four0 > 0,
            "cpu broadcast A=2: a plan or its model failed");
    T_CHECK(one == zero && one < staged && below == stagedBelow && four1 == four0,
            "cpu broadcast A=2 at the pair floor: %.2f us (every one copy %.2f, staged %.2f), below it %.2f "
            "(staged %.2f); A=4 %.2f (pair floor 0: %.2f)",
            one * 1e6, zero * 1e6, staged * 1e6, below * 1e6, stagedBelow * 1e6, four1 * 1e6, four0 * 1e6);
    t->oneCopyPairBytes = 4 << 10;
    for (size_t c = 1024; c <= 65536; c *= 4) {
      planKey k = planKeyInit(relayCollectiveBroadcast, 8, 1, 2, two, &c, relayFloat32);
      k.op = relaySum, k.route = relayRouteAuto, k.depth = 1, k.root = 1;
      int route = -1, depth = 0;
      relayRouteChoose(&k, t, (int)shmCaps, &route, &depth);
      T_CHECK(route == relayRouteBw, "cpu broadcast A=2 of %zu floats: %s, want bw", c,
              relayRouteName(route));
    }
  }
  relayTopoFree(t);
  printf("route: ok\n");
  return 0;
}

/* The checker holds a rooted one-shot to its plan: the key's root, broadcast placing and reduce reducing,
 * and a non-root reduce's destination of no extent (it writes nothing). Each mutation of a sound plan
 * must be refused. */
static int caseChecker(void) {
  int ranks[3] = {6, 1, 4};
  size_t count = 100;
  char err[512];
  for (int c = 0; c < 4; c++) {
    relayCollective_t coll = c % 2 ? relayCollectiveReduce : relayCollectiveBroadcast;
    int kind = c < 2 ? PLAN_OP_ONESHOT : PLAN_OP_BW; /* the one-shot's rooted form, then the bw route's */
    planKey k = planKeyInit(coll, NRANKS, 1, 3, ranks, &count, relayFloat32);
    k.op = relaySum, k.route = c < 2 ? relayRouteOneShot : relayRouteBw, k.depth = 1, k.root = 2;
    relayPlan* p = NULL;
    T_OK(relayPlanBuild(&k, &p));
    T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s: sound plan refused: %s", relayCollName(coll), err);
    planOp* o = NULL;
    for (uint32_t i = 0; i < p->nOps; i++)
      if (p->ops[i].kind == kind && p->ops[i].root >= 0) o = &p->ops[i];
    T_CHECK(o && p->nOps == 3, "%s: %u ops, want 3 rooted ops of route %s", relayCollName(coll), p->nOps,
            relayRouteName(k.route));
    if (kind == PLAN_OP_BW) {
      o->form = PLAN_BW_TWOSHOT;
      T_CHECK(relayPlanCheck(p, err, sizeof err) != 0, "%s: a two-shot bw op accepted", relayCollName(coll));
      o->form = PLAN_BW_PUSH;
    }
    o->root = 1;
    T_CHECK(relayPlanCheck(p, err, sizeof err) != 0, "%s: another root accepted", relayCollName(coll));
    o->root = -1;
    T_CHECK(relayPlanCheck(p, err, sizeof err) != 0, "%s: an unrooted op accepted", relayCollName(coll));
    o->root = 2;
    o->gather = (uint8_t)!o->gather;
    T_CHECK(relayPlanCheck(p, err, sizeof err) != 0, "%s: gather flipped accepted", relayCollName(coll));
    o->gather = (uint8_t)!o->gather;
    T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s: restored plan refused: %s", relayCollName(coll),
            err);
    relayPlanFree(p);
  }
  printf("checker: ok\n");
  return 0;
}

static const tCase kCases[] = {
    {.name = "checker", .fn = caseChecker, .timeoutS = 60},
    {.name = "ref", .fn = caseRef, .timeoutS = 600},
    {.name = "route", .fn = caseRoute, .timeoutS = 60},
};

int main(int argc, char** argv) { return t_main(argc, argv, "rooted", kCases, T_NCASES(kCases)); }
