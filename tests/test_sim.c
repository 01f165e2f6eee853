/*
 * Simulator and baseline model: closed-form times on hand-built plans (one
 * flow on one link, flows sharing a link, a switch port shared max-min fairly,
 * synchronization through matched transfers, local ops and the side lane),
 * determinism, speed, the baseline's closed forms, and the seed's link-model
 * figures on mi350x once relay plans exist.
 *
 * Usage: test_sim <case>   (cases: kCases at the bottom; --list prints them). Exit 77 = skipped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "harness.h"
#include "plan/plan.h"
#include "route/table.h"
#include "seedtab.h"
#include "sim/sim.h"
#include "topo/topo.h"

#define SKIP 77

static int near(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want) + 1e-15; }
#define T_NEAR(got, want, rel) \
  T_CHECK(near((got), (want), (rel)), "%s = %.9g, want %.9g", #got, (double)(got), (double)(want))

/* ---- hand-built plans: uint8 elements, so counts are bytes ---- */

static planBuilder* handNew(int nranks) {
  int ranks[1] = {0};
  size_t counts[1] = {1};
  planKey k = planKeyInit(relayCollectiveAllGather, nranks, 1, 1, ranks, counts, relayUint8);
  k.op = relaySum;
  k.route = relayRouteDirect;
  k.depth = 1;
  planBuilder* b = planBuilderNew(&k);
  T_CHECK(b, "planBuilderNew");
  return b;
}

/* A matched send/receive of `bytes` from src to dst in step s. */
static void xfer(planBuilder* b, int s, int src, int dst, uint64_t bytes) {
  planSend(b, src, s, dst, planScratchRef(0, 0), bytes);
  planRecv(b, dst, s, src, planScratchRef(1, 0), bytes);
}

static relayPlan* handFinish(planBuilder* b) {
  relayPlan* p = planBuilderFinish(b);
  T_CHECK(p, "planBuilderFinish");
  planBuilderFree(b);
  return p;
}

static relaySimResult simOk(const relayPlan* p, const struct relayTopo* t) {
  relaySimResult r;
  relayResult_t res = relaySimRun(p, t, &r);
  T_CHECK(res == relaySuccess, "relaySimRun: %s: %s", relayGetErrorString(res), relayGetLastError(NULL));
  return r;
}

/* n GPUs, one link per pair of bw, the given fixed costs. */
static struct relayTopo* meshTopo(int n, double bw, double callS, double boundaryS) {
  struct relayTopo* t;
  T_OK(relayTopoCreate(n, "testmesh", &t));
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (s != d) {
        t->linkCount[s * n + d] = 1;
        t->linkBw[s * n + d] = bw;
      }
  t->callS = callS;
  t->boundaryS = boundaryS;
  t->launchS = 5e-6;
  t->memBw = 2e12;
  t->hopS = 3e-6;
  return t;
}

static struct relayTopo* switchTopo(int n, double port, double boundaryS) {
  struct relayTopo* t;
  T_OK(relayTopoCreate(n, "testswitch", &t));
  t->hasSwitch = 1;
  for (int g = 0; g < n; g++) t->injBw[g] = t->ejBw[g] = port;
  t->boundaryS = boundaryS;
  t->launchS = 3e-6;
  t->memBw = 4e12;
  return t;
}

/* ---- cases -------------------------------------------------------------- */

static int caseOneFlow(void) {
  /* One flow on one mesh link: call + boundary + bytes / bw. */
  struct relayTopo* t = meshTopo(8, 50e9, 13e-6, 25e-6);
  planBuilder* b = handNew(8);
  int s = planAddStep(b);
  xfer(b, s, 0, 1, 1000000);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  T_NEAR(r.totalS, 13e-6 + 25e-6 + 1e6 / 50e9, 1e-12);
  T_NEAR(r.stepS[0], 25e-6 + 1e6 / 50e9, 1e-12);
  T_CHECK(r.linkBytes[0 * 8 + 1] == 1000000 && r.busiestLinkBytes == 1000000 && r.busiestSrc == 0 &&
              r.busiestDst == 1 && r.criticalPathBytes == 1000000,
          "traffic");
  T_CHECK(r.boundaries == 1 && r.launches == 0, "counts %d %d", r.boundaries, r.launches);
  /* Uninvolved ranks end at once. */
  T_CHECK(r.rankEndS[5] == 0, "idle rank ended at %g", r.rankEndS[5]);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* The preset: the same closed form with the seed's figures. */
  struct relayTopo* mi;
  T_OK(relayTopoLoad("mi350x", &mi));
  b = handNew(8);
  s = planAddStep(b);
  xfer(b, s, 3, 6, 1u << 30);
  p = handFinish(b);
  r = simOk(p, mi);
  T_NEAR(r.totalS, mi->callS + mi->boundaryS + (double)(1u << 30) / 51.6e9, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(mi);
  relayTopoFree(t);
  return 0;
}

static int caseShare(void) {
  /* Two flows on one link split it: 1 MB and 3 MB both 0 -> 1 share at
   * bw/2 until the first ends (at 2 MB / bw), then the rest runs alone: 4 MB
   * / bw in all. The reverse direction is its own resource (full duplex), and
   * an unrelated pair is unaffected. */
  struct relayTopo* t = meshTopo(4, 50e9, 0, 10e-6);
  planBuilder* b = handNew(4);
  int s = planAddStep(b);
  xfer(b, s, 0, 1, 1000000);
  xfer(b, s, 0, 1, 3000000);
  xfer(b, s, 1, 0, 4000000);
  xfer(b, s, 2, 3, 1000000);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  T_NEAR(r.totalS, 10e-6 + 4e6 / 50e9, 1e-12);
  T_NEAR(r.rankEndS[0], 10e-6 + 4e6 / 50e9, 1e-12);
  T_NEAR(r.rankEndS[3], 10e-6 + 1e6 / 50e9, 1e-12);
  T_CHECK(r.linkBytes[0 * 4 + 1] == 4000000 && r.stepBusiestBytes[0] == 4000000, "traffic");
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* Same bytes, one flow each direction on 7 links at once (a mesh rank
   * sending to every peer): every link is its own resource. */
  struct relayTopo* m = meshTopo(8, 50e9, 0, 10e-6);
  b = handNew(8);
  s = planAddStep(b);
  for (int d = 1; d < 8; d++) xfer(b, s, 0, d, 1000000);
  p = handFinish(b);
  r = simOk(p, m);
  T_NEAR(r.totalS, 10e-6 + 1e6 / 50e9, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(m);
  relayTopoFree(t);
  return 0;
}

static int caseOpBudget(void) {
  /* RCCL's per-operation channel budget (topo opBudgetBw): each transfer a
   * rank sends in a step gets an equal share of the rank's budget, fixed for
   * the step. 120 GB/s over rank 0's 4 sends: 30 GB/s each. Three 1 MB
   * operations to rank 1 share their 50 GB/s link (90 GB/s of budget, the
   * link binds): 60 us. One 3 MB operation to rank 2 gets 30 GB/s on its
   * own 50 GB/s link: 100 us, and keeps 30 GB/s after the others end at
   * 60 us (handed on, it would end at 84 us). The self pair is a copy
   * inside the kernel, not a channel's operation: it does not count (as a
   * fifth, every share would be 24 GB/s and the step 125 us). */
  struct relayTopo* t = meshTopo(4, 50e9, 0, 0);
  t->opBudgetBw = 120e9;
  planBuilder* b = handNew(4);
  int s = planAddStep(b);
  for (int i = 0; i < 3; i++) xfer(b, s, 0, 1, 1000000);
  xfer(b, s, 0, 2, 3000000);
  xfer(b, s, 0, 0, 1000000);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  T_NEAR(r.rankEndS[1], 3e6 / 50e9, 1e-9);
  T_NEAR(r.totalS, 3e6 / 30e9, 1e-9);
  relaySimResultFree(&r);
  /* Without the budget both links take 60 us. */
  t->opBudgetBw = 0;
  r = simOk(p, t);
  T_NEAR(r.totalS, 3e6 / 50e9, 1e-9);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* The seed's fix: the 3 MB as three 1 MB operations. Six sends at 20 GB/s,
   * three per link (60 GB/s, the link binds): both links 60 us again. */
  t->opBudgetBw = 120e9;
  b = handNew(4);
  s = planAddStep(b);
  for (int i = 0; i < 3; i++) xfer(b, s, 0, 1, 1000000);
  for (int i = 0; i < 3; i++) xfer(b, s, 0, 2, 1000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.totalS, 3e6 / 50e9, 1e-9);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* Only the sender's operations count: rank 3 receiving three operations,
   * one from each of three ranks, takes every link at its rate (20 us). The
   * shares are per step: in step 1 rank 3 sends four, 30 GB/s each, and its
   * lone 3 MB operation takes 100 us as above. */
  b = handNew(4);
  s = planAddStep(b);
  for (int src = 0; src < 3; src++) xfer(b, s, src, 3, 1000000);
  int s1 = planAddStep(b);
  for (int i = 0; i < 3; i++) xfer(b, s1, 3, 0, 1000000);
  xfer(b, s1, 3, 1, 3000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.stepS[0], 1e6 / 50e9, 1e-9);
  T_NEAR(r.stepS[1], 3e6 / 30e9, 1e-9);
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(t);
  return 0;
}

static int caseSwitch(void) {
  /* On a switch, 7 flows out of one GPU share its injection port. */
  struct relayTopo* t = switchTopo(8, 400e9, 5e-6);
  planBuilder* b = handNew(8);
  int s = planAddStep(b);
  for (int d = 1; d < 8; d++) xfer(b, s, 0, d, 1000000);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  T_NEAR(r.totalS, 5e-6 + 7e6 / 400e9, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* ... and 7 flows into one share its ejection port; disjoint pairs don't
   * interfere (non-blocking switch). */
  b = handNew(8);
  s = planAddStep(b);
  for (int d = 1; d < 8; d++) xfer(b, s, d, 0, 1000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.totalS, 5e-6 + 7e6 / 400e9, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);
  b = handNew(8);
  s = planAddStep(b);
  for (int g = 0; g < 8; g += 2) xfer(b, s, g, g + 1, 1000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.totalS, 5e-6 + 1e6 / 400e9, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* Max-min fairness, not equal shares: injection of GPU 0 = 100, ejection
   * of GPU 2 = 60 (GB/s), others 1000. Flows A 0->1, B 0->2, C 3->2. The
   * ejection port saturates first (B = C = 30), then A takes the rest of
   * GPU 0's injection (70). With A = 140 MB, B = C = 30 MB: B and C end at
   * 1 ms, A has 70 MB left and runs alone at 100: 1.7 ms. */
  struct relayTopo* u = switchTopo(4, 1000e9, 0);
  u->injBw[0] = 100e9;
  u->ejBw[2] = 60e9;
  b = handNew(4);
  s = planAddStep(b);
  xfer(b, s, 0, 1, 140000000);
  xfer(b, s, 0, 2, 30000000);
  xfer(b, s, 3, 2, 30000000);
  p = handFinish(b);
  r = simOk(p, u);
  T_NEAR(r.rankEndS[3], 1e-3, 1e-9);
  T_NEAR(r.rankEndS[2], 1e-3, 1e-9);
  T_NEAR(r.rankEndS[0], 1.7e-3, 1e-9);
  T_NEAR(r.totalS, 1.7e-3, 1e-9);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* The fluid model alone, same flows. */
  int src[3] = {0, 0, 3}, dst[3] = {1, 2, 2};
  double bytes[3] = {140e6, 30e6, 30e6}, ends[3], mk;
  T_OK(relaySimFlows(u, 3, src, dst, bytes, &mk, ends));
  T_NEAR(mk, 1.7e-3, 1e-9);
  T_NEAR(ends[1], 1e-3, 1e-9);
  relayTopoFree(u);
  relayTopoFree(t);
  return 0;
}

static int caseSync(void) {
  /* Ranks meet only through matched transfers. Rank 2 copies 100 MB in step
   * 0 (launch + 200 MB / memBw), then sends to rank 3 in step 1; rank 3 has
   * nothing in step 0 and waits. */
  struct relayTopo* t = meshTopo(4, 50e9, 1e-6, 20e-6);
  planBuilder* b = handNew(4);
  int s0 = planAddStep(b), s1 = planAddStep(b);
  planCopy(b, 2, s0, planScratchRef(2, 0), planScratchRef(3, 0), 100000000);
  xfer(b, s1, 2, 3, 5000000);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  double copy = 5e-6 + 2e8 / 2e12;
  T_NEAR(r.stepEndS[0], copy, 1e-12);
  T_NEAR(r.totalS, 1e-6 + copy + 20e-6 + 5e6 / 50e9, 1e-12);
  T_NEAR(r.stepS[1], 20e-6 + 5e6 / 50e9, 1e-12);
  T_CHECK(r.launches == 1 && r.boundaries == 1, "counts");
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* Two hops through a helper: 0 -> 2, then 2 -> 1: two boundaries and two
   * link times. */
  b = handNew(4);
  s0 = planAddStep(b);
  s1 = planAddStep(b);
  xfer(b, s0, 0, 2, 2000000);
  xfer(b, s1, 2, 1, 2000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.totalS, 1e-6 + 2 * (20e-6 + 2e6 / 50e9), 1e-12);
  T_CHECK(r.criticalPathBytes == 4000000 && r.busiestLinkBytes == 2000000, "traffic");
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* A self transfer is a local copy at memory bandwidth. */
  b = handNew(4);
  s0 = planAddStep(b);
  xfer(b, s0, 1, 1, 10000000);
  p = handFinish(b);
  r = simOk(p, t);
  T_NEAR(r.totalS, 1e-6 + 20e-6 + 2e7 / 2e12, 1e-12);
  T_CHECK(r.busiestLinkBytes == 0, "self transfers are not link traffic");
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(t);
  return 0;
}

static int caseOps(void) {
  struct relayTopo* t = meshTopo(2, 50e9, 0, 20e-6);
  /* A 3-input reduce of 10 MB after the step's transfer: launch + 40 MB /
   * memBw (3 read, 1 written), on the main lane. */
  planBuilder* b = handNew(2);
  int s0 = planAddStep(b);
  xfer(b, s0, 0, 1, 1000000);
  planRef srcs[3] = {planScratchRef(1, 0), planScratchRef(2, 0), planScratchRef(3, 0)};
  planReduce(b, 1, s0, planScratchRef(4, 0), srcs, 3, 10000000, 0);
  relayPlan* p = handFinish(b);
  relaySimResult r = simOk(p, t);
  double xf = 20e-6 + 1e6 / 50e9, red = 5e-6 + 4e7 / 2e12;
  T_NEAR(r.totalS, xf + red, 1e-12);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* The same reduce on the side lane overlaps step 1 (a transfer back), and
   * the call ends when the side lane is joined. Reduce of 200 MB: 5 us +
   * 0.4 ms, longer than step 1 (20 us + 20 us). */
  b = handNew(2);
  s0 = planAddStep(b);
  int s1 = planAddStep(b);
  xfer(b, s0, 0, 1, 1000000);
  planSetLane(b, 1);
  planReduce(b, 1, s0, planScratchRef(4, 0), srcs, 3, 200000000, 0);
  planSetLane(b, 0);
  xfer(b, s1, 1, 0, 1000000);
  p = handFinish(b);
  r = simOk(p, t);
  double side = 5e-6 + 8e8 / 2e12;
  T_NEAR(r.stepEndS[1], 2 * xf, 1e-12);
  T_NEAR(r.rankEndS[1], xf + side, 1e-12);
  T_NEAR(r.totalS, xf + side, 1e-12);
  T_NEAR(r.rankEndS[0], 2 * xf, 1e-12);
  T_CHECK(r.launches == 1, "launches %d", r.launches);
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(t);
  return 0;
}

static int caseMismatch(void) {
  struct relayTopo* t = meshTopo(4, 50e9, 0, 20e-6);
  planBuilder* b = handNew(4);
  int s = planAddStep(b);
  planSend(b, 0, s, 1, planScratchRef(0, 0), 100);
  relayPlan* p = handFinish(b);
  relaySimResult r;
  T_CHECK(relaySimRun(p, t, &r) == relayInvalidArgument, "an unmatched send must be rejected");
  const char* e = relayGetLastError(NULL);
  T_CHECK(strstr(e, "step 0") && strstr(e, "rank 0") && strstr(e, "rank 1"), "message: %s", e);
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* Counts that differ. */
  b = handNew(4);
  s = planAddStep(b);
  planSend(b, 0, s, 1, planScratchRef(0, 0), 100);
  planRecv(b, 1, s, 0, planScratchRef(0, 0), 99);
  p = handFinish(b);
  T_CHECK(relaySimRun(p, t, &r) == relayInvalidArgument, "a count mismatch must be rejected");
  relaySimResultFree(&r);
  relayPlanFree(p);

  /* More ranks than GPUs. */
  struct relayTopo* two = meshTopo(2, 50e9, 0, 20e-6);
  b = handNew(4);
  s = planAddStep(b);
  xfer(b, s, 0, 3, 100);
  p = handFinish(b);
  T_CHECK(relaySimRun(p, two, &r) == relayInvalidArgument, "plan larger than topology");
  relaySimResultFree(&r);
  relayPlanFree(p);
  relayTopoFree(two);
  relayTopoFree(t);
  return 0;
}

/* A random plan: nSteps steps of all-pairs transfers of random sizes among n
 * ranks (some pairs skipped), random local ops on both lanes. */
static relayPlan* randomPlan(int n, int nSteps, unsigned long long seed) {
  planBuilder* b = handNew(n);
  for (int st = 0; st < nSteps; st++) {
    int s = planAddStep(b);
    for (int a = 0; a < n; a++)
      for (int d = 0; d < n; d++) {
        unsigned long long v = t_rand(&seed);
        if (a == d || v % 7 == 0) continue;
        xfer(b, s, a, d, 1 + (v >> 20) % 50000000);
      }
    for (int a = 0; a < n; a++) {
      unsigned long long v = t_rand(&seed);
      if (v % 3 == 0) continue;
      planSetLane(b, (int)(v % 2));
      planRef srcs[2] = {planScratchRef(1, 0), planScratchRef(2, 0)};
      planReduce(b, a, s, planScratchRef(3, 0), srcs, 2, 1 + (v >> 24) % 20000000, 0);
      planSetLane(b, 0);
    }
  }
  return handFinish(b);
}

static void expectIdentical(const relaySimResult* a, const relaySimResult* b) {
  T_CHECK(a->nSteps == b->nSteps && a->nranks == b->nranks, "shape");
  T_CHECK(memcmp(&a->totalS, &b->totalS, sizeof a->totalS) == 0, "totalS %.17g vs %.17g", a->totalS,
          b->totalS);
  T_CHECK(memcmp(a->stepS, b->stepS, (size_t)a->nSteps * sizeof *a->stepS) == 0, "stepS differ");
  T_CHECK(memcmp(a->rankEndS, b->rankEndS, (size_t)a->nranks * sizeof *a->rankEndS) == 0, "rankEndS differ");
  T_CHECK(a->events == b->events, "events %d vs %d", a->events, b->events);
}

static int caseDeterminism(void) {
  const char* topos[] = {"mi350x", "h200", "cpu"};
  for (int ti = 0; ti < 3; ti++) {
    struct relayTopo* t;
    T_OK(relayTopoLoad(topos[ti], &t));
    relayPlan* p = randomPlan(8, 6, 42 + (unsigned long long)ti);
    relaySimResult a = simOk(p, t), b = simOk(p, t);
    expectIdentical(&a, &b);
    relaySimResultFree(&a);
    relaySimResultFree(&b);
    relayPlanFree(p);
    /* Built plans (direct route), fused, odd counts. */
    for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
      int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
      size_t counts[2] = {1000003, 1000003};
      planKey k = planKeyInit((relayCollective_t)c, 8, 2, 4, ranks, counts, relayBfloat16);
      k.op = relaySum;
      k.route = relayRouteDirect;
      k.depth = 1;
      T_OK(relayPlanBuild(&k, &p));
      a = simOk(p, t);
      b = simOk(p, t);
      expectIdentical(&a, &b);
      T_CHECK(a.totalS > 0, "time");
      relaySimResultFree(&a);
      relaySimResultFree(&b);
      relayPlanFree(p);
    }
    relayTopoFree(t);
  }
  return 0;
}

static int caseSpeed(void) {
  /* The router runs the simulator per call signature: an 8-rank plan of ~20
   * steps must take well under 10 ms. This one is a worst case for events:
   * every step has ~48 transfers of distinct sizes (each ends on its own). */
  struct relayTopo* t;
  T_OK(relayTopoLoad("mi350x", &t));
  relayPlan* p = randomPlan(8, 20, 7);
  int reps = 20;
  uint64_t t0 = relayNowNs();
  int events = 0;
  for (int i = 0; i < reps; i++) {
    relaySimResult r = simOk(p, t);
    events = r.events;
    relaySimResultFree(&r);
  }
  double ms = (double)(relayNowNs() - t0) / 1e6 / reps;
  printf("speed: %d ranks, %d steps, %u transfers, %d events: %.3f ms per run\n", p->nranks, p->nSteps,
         p->nSends, events, ms);
#if defined(__SANITIZE_ADDRESS__)
  double limit = 100; /* sanitizers slow everything ~5-10x */
#else
  double limit = 10;
#endif
  T_CHECK(ms < limit, "%.3f ms per run (limit %.0f ms)", ms, limit);
  relayPlanFree(p);

  /* The router's real inputs: relay plans of 1 GiB at depth 8, every
   * collective, A = 2 and 4. */
  for (int A = 2; A <= 4; A += 2)
    for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
      int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
      uint64_t elems = (1ull << 30) / 2;
      size_t counts[1] = {
          (size_t)(c == relayCollectiveReduceScatter || c == relayCollectiveAllToAll ? elems / A : elems)};
      planKey k = planKeyInit((relayCollective_t)c, 8, 1, A, ranks, counts, relayBfloat16);
      k.op = relaySum;
      k.route = relayRouteRelay;
      k.depth = 8;
      if (relayPlanBuild(&k, &p) != relaySuccess) continue;
      t0 = relayNowNs();
      for (int i = 0; i < reps; i++) {
        relaySimResult r = simOk(p, t);
        events = r.events;
        relaySimResultFree(&r);
      }
      ms = (double)(relayNowNs() - t0) / 1e6 / reps;
      printf("speed: %s A=%d relay 1 GiB, %d steps, %u transfers, %d events: %.3f ms per run\n",
             relayCollName((relayCollective_t)c), A, p->nSteps, p->nSends, events, ms);
      T_CHECK(ms < limit, "%.3f ms per run (limit %.0f ms)", ms, limit);
      relayPlanFree(p);
    }
  relayTopoFree(t);
  return 0;
}

static relayBaselineResult baseline(const char* topoName, relayCollective_t coll, int A, int G,
                                    size_t count) {
  struct relayTopo* t;
  T_OK(relayTopoLoad(topoName, &t));
  int ranks[64];
  size_t counts[64];
  for (int i = 0; i < A * G; i++) ranks[i] = i;
  for (int g = 0; g < G; g++) counts[g] = count;
  planKey k = planKeyInit(coll, t->nGPUs, G, A, ranks, counts, relayBfloat16);
  relayBaselineResult r;
  T_OK(relayBaselineRun(&k, t, &r));
  relayTopoFree(t);
  return r;
}

static int caseBaseline(void) {
  const double GiB = 1073741824.0, bw = 51.6e9, fixed = 13e-6 + 25e-6, hop = 3e-6;
  size_t c = 1u << 29; /* bf16 elements: 1 GiB */
  /* 2-rank all-gather of 1 GiB on MI350X: one link, one hop. */
  relayBaselineResult r = baseline("mi350x", relayCollectiveAllGather, 2, 1, c);
  T_NEAR(r.totalS, fixed + hop + GiB / bw, 1e-9);
  /* 4 ranks: each receives 3 GiB over its 3 links among the actives (the
   * seed measured ~20 ms). Ring and direct move the same bytes; direct has
   * one hop, the ring three. */
  r = baseline("mi350x", relayCollectiveAllGather, 4, 1, c);
  T_NEAR(r.totalS, fixed + hop + GiB / bw, 1e-9);
  T_NEAR(r.ringS, fixed + 3 * hop + GiB / bw, 1e-9);
  T_CHECK(r.totalS > 19e-3 && r.totalS < 22e-3, "4-rank all-gather of 1 GiB: %g s", r.totalS);
  /* All-reduce: the ring (2(A-1)/A of the buffer per rank) wins when large,
   * the one-shot direct (one hop) when small. */
  r = baseline("mi350x", relayCollectiveAllReduce, 4, 1, c);
  T_CHECK(r.algo == RELAY_BASE_RING, "large all-reduce: ring");
  T_NEAR(r.totalS, fixed + 6 * hop + (2 * GiB / 4) / bw, 1e-9);
  r = baseline("mi350x", relayCollectiveAllReduce, 4, 1, 2048);
  T_CHECK(r.algo == RELAY_BASE_DIRECT, "small all-reduce: direct");
  /* All-to-all: per-pair segments. */
  r = baseline("mi350x", relayCollectiveAllToAll, 4, 1, c / 4);
  T_NEAR(r.totalS, fixed + hop + GiB / 4 / bw, 1e-9);
  /* Fused groups on a mesh use disjoint links: as fast as one group. */
  relayBaselineResult one = baseline("mi350x", relayCollectiveAllGather, 2, 1, c);
  relayBaselineResult four = baseline("mi350x", relayCollectiveAllGather, 2, 4, c);
  T_NEAR(four.totalS, one.totalS, 1e-12);
  /* On the CPU model the ranks share one memory bus: four groups are slower. */
  one = baseline("cpu", relayCollectiveAllGather, 2, 1, 1u << 20);
  four = baseline("cpu", relayCollectiveAllGather, 2, 4, 1u << 20);
  T_CHECK(four.totalS > 1.5 * one.totalS, "cpu fused %g vs %g", four.totalS, one.totalS);
  /* H200: a switch port of 478.125 GB/s bounds a 2-rank all-gather. */
  r = baseline("h200", relayCollectiveAllGather, 2, 1, c);
  T_NEAR(r.totalS, 10e-6 + 6e-6 + 1.5e-6 + GiB / 478.125e9, 1e-9);
  /* The seed's small-size anchor: 2-rank all-gather at 4 KB ~ 0.041 ms. */
  r = baseline("mi350x", relayCollectiveAllGather, 2, 1, 2048);
  T_CHECK(r.totalS > 38e-6 && r.totalS < 44e-6, "4 KB all-gather %g", r.totalS);
  return 0;
}

/* ---- the seed's link-model figures (need relay plans) ---- */

/* The topology with every fixed cost removed and free local ops: what is
 * left is the link term the seed's closed forms count. */
static struct relayTopo* linkTermTopo(const char* preset) {
  struct relayTopo* t;
  T_OK(relayTopoLoad(preset, &t));
  t->callS = t->boundaryS = t->launchS = t->hopS = 0;
  t->memBw = 1e18;
  t->opBudgetBw = 0; /* the closed forms count bytes, not operations */
  return t;
}

/* Predicted speedup of (route, depth) over the baseline, for bytes of
 * per-active-rank input; 0 when the route cannot build that plan or does not
 * build that depth. */
static double linkSpeedup(const struct relayTopo* t, relayCollective_t coll, int A, int G, uint64_t bytes,
                          int route, int depth) {
  int ranks[64];
  size_t counts[64];
  for (int i = 0; i < A * G; i++) ranks[i] = i;
  uint64_t elems = bytes / 2;
  int perActive = coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll;
  for (int g = 0; g < G; g++) counts[g] = (size_t)(perActive ? elems / (uint64_t)A : elems);
  planKey k = planKeyInit(coll, t->nGPUs, G, A, ranks, counts, relayBfloat16);
  k.op = relaySum;
  k.route = route;
  k.depth = depth;
  relayPlan* p = NULL;
  relayResult_t res = relayPlanBuild(&k, &p);
  if (res == relayNotSupported) return 0;
  T_CHECK(res == relaySuccess, "relayPlanBuild: %s", relayGetErrorString(res));
  /* A pipelined plan of depth T has T+1 steps; a builder that clamps the
   * depth says so in p->depth. */
  if (p->route != route || (depth > 1 && (p->depth != depth || p->nSteps < depth + 1))) {
    relayPlanFree(p);
    return 0;
  }
  relaySimResult r = simOk(p, t);
  relayBaselineResult b;
  T_OK(relayBaselineRun(&k, t, &b));
  double s = b.totalS / r.totalS;
  relaySimResultFree(&r);
  relayPlanFree(p);
  return s;
}

/* The seed's closed forms: 2 active, H helpers, depth T: the busiest link
 * carries (T+1)/((H+1)T+1) of the count against the baseline's whole count. */
static double seedA2Speedup(int H, int T) { return ((double)(H + 1) * T + 1) / (T + 1); }
/* 4-active all-to-all: (T+1)u with u = sc/(2T+1) against sc. */
static double seedA4AllToAllSpeedup(int T) { return (2.0 * T + 1) / (T + 1); }
/* Fan-out (4-active all-gather): (3T+1)v with v = sc/(7T+1); the gain of
 * depth T over two groups (sc/2). */
static double seedFanoutGain(int T) { return 0.5 * (7.0 * T + 1) / (3.0 * T + 1); }

static int caseSeedLinkModel(void) {
  struct relayTopo* t = linkTermTopo("mi350x");
  const uint64_t GiB = 1ull << 30;
  int checked = 0;
  /* 2 active: the two-group relay is 4x on the link term, all collectives
   * (reduce-scatter and all-to-all relay half the message, same ratio). */
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
    const char* name = relayCollName((relayCollective_t)c);
    double s = linkSpeedup(t, (relayCollective_t)c, 2, 1, GiB, relayRouteRelay, 1);
    T_CHECK(s > 0, "%s A=2: no two-group relay plan", name);
    T_CHECK(near(s, seedA2Speedup(6, 1), 0.02), "%s A=2 two-group: %.3fx, seed 4x", name, s);
    checked++;
    /* Pipelined: ((H+1)T+1)/(T+1), 57/9 = 6.33x at depth 8, towards 7x (the
     * floor: an active moves its buffer out over its 7 links once). */
    double prev = s;
    for (int T = 2; T <= 64; T *= 2) {
      double sT = linkSpeedup(t, (relayCollective_t)c, 2, 1, GiB, relayRouteRelay, T);
      T_CHECK(sT > 0, "%s A=2: no depth-%d plan", name, T);
      T_CHECK(near(sT, seedA2Speedup(6, T), 0.03), "%s A=2 depth %d: %.3fx, seed %.3fx", name, T, sT,
              seedA2Speedup(6, T));
      T_CHECK(sT > prev && sT < 7.0, "%s A=2 depth %d: %.3fx, after %.3fx at depth %d: not tending to 7x",
              name, T, sT, prev, T / 2);
      prev = sT;
      checked++;
    }
    T_CHECK(prev > 6.8, "%s A=2 depth 64: %.3fx, not near 7x", name, prev);
  }
  /* 4-active all-to-all, single helper per pair: capped at 1.5x; pipelined
   * (2T+1)/(T+1), towards 2x. */
  for (int T = 1; T <= 8; T *= 2) {
    double s = linkSpeedup(t, relayCollectiveAllToAll, 4, 1, GiB, relayRouteRelay, T);
    T_CHECK(s > 0, "A=4 all-to-all: no depth-%d plan", T);
    T_CHECK(near(s, seedA4AllToAllSpeedup(T), 0.03), "A=4 all-to-all depth %d: %.3fx, seed %.3fx", T, s,
            seedA4AllToAllSpeedup(T));
    if (T == 1) T_CHECK(s <= 1.5 * 1.01, "A=4 all-to-all two-group: %.3fx, seed caps it at 1.5x", s);
    checked++;
  }
  /* Fan-out shapes gain 1.12x over two groups at depth 4 (the up direction
   * carries one unit for every three down, so merging gains little): the
   * all-gather and its mirror, the reduce-scatter. */
  for (int c = 0; c < 2; c++) {
    relayCollective_t coll = c ? relayCollectiveReduceScatter : relayCollectiveAllGather;
    double two = linkSpeedup(t, coll, 4, 1, GiB, relayRouteRelay, 1);
    double four = linkSpeedup(t, coll, 4, 1, GiB, relayRouteRelay, 4);
    T_CHECK(two > 0 && four > 0, "%s A=4: no plans", relayCollName(coll));
    T_CHECK(near(four / two, seedFanoutGain(4), 0.03), "%s A=4 fan-out gain %.3f, seed %.3f",
            relayCollName(coll), four / two, seedFanoutGain(4));
    checked++;
  }
  relayTopoFree(t);
  printf("seed link model: %d figures checked\n", checked);
  return 0;
}

/* The model against every table of the seed (single-group two-group tables
 * and fused ones): the speedup a user would read, model against measured,
 * within 15% at every row and 8% on average (docs/model.md: "Model against
 * the seed"). The tables the model does not reach yet are named below with
 * the bounds it reaches today and the cause; a change that makes any table
 * worse fails here. The single-group tables also hold the relay and RCCL
 * times. */
typedef struct {
  relayCollective_t coll;
  int nActive, nGroups;
  double mean, max; /* the speedup error bounds this table is held to instead */
  const char* why;
} seedMiss;

static const seedMiss kSeedMisses[] = {
    {relayCollectiveReduceScatter, 2, 1, 0.100, 0.140,
     "RCCL's 2-rank reduce-scatter measured 12% below the link up to 144 MB (three sweeps agree)"},
    {relayCollectiveReduceScatter, 2, 4, 0.102, 0.145, "the same RCCL reduce-scatter, 4 groups at once"},
    {relayCollectiveAllToAll, 4, 1, 0.080, 0.166,
     "RCCL's 4-rank all-to-all measured 14% below the link at 13.5 MB (the mean is inside)"},
    {relayCollectiveAllToAll, 4, 2, 0.099, 0.126, "the same RCCL all-to-all at 27-36 MB"},
    {relayCollectiveAllGather, 4, 1, 0.105, 0.362, "helper staging spilled out of cache from 256 MB (seed)"},
};

static int caseSeedTables(void) {
  struct relayTopo* t;
  T_OK(relayTopoLoad("mi350x", &t));
  int checked = 0, misses = 0;
  for (int i = 0; i < relayNumSeedTables; i++) {
    const relaySeedTable* s = &relaySeedTables[i];
    relaySeedCompare c;
    relayResult_t r = relaySeedCompareRun(s, t, &c);
    if (r == relayNotSupported) continue;
    T_CHECK(r == relaySuccess, "%s A=%d: %s", relayCollName(s->coll), s->nActive, relayGetLastError(NULL));
    double mean = 0.08, max = 0.15;
    const char* why = NULL;
    for (size_t m = 0; m < sizeof kSeedMisses / sizeof kSeedMisses[0]; m++)
      if (kSeedMisses[m].coll == s->coll && kSeedMisses[m].nActive == s->nActive &&
          kSeedMisses[m].nGroups == s->nGroups) {
        mean = kSeedMisses[m].mean;
        max = kSeedMisses[m].max;
        why = kSeedMisses[m].why;
        misses++;
      }
    printf("%-13s A=%d G=%d: speedup mean |err| %4.1f%% max %4.1f%% (bound %.1f%% / %.1f%%%s%s)",
           relayCollName(s->coll), s->nActive, s->nGroups, 100 * c.meanSpeedupErr, 100 * c.maxSpeedupErr,
           100 * mean, 100 * max, why ? ": " : "", why ? why : "");
    if (s->nGroups == 1)
      printf("; relay mean %4.1f%% max %4.1f%% bias %+5.1f%%; RCCL mean %4.1f%% max %4.1f%%",
             100 * c.meanRelayErr, 100 * c.maxRelayErr, 100 * c.biasRelayErr, 100 * c.meanBaseErr,
             100 * c.maxBaseErr);
    printf("\n");
    T_CHECK(c.meanSpeedupErr < mean && c.maxSpeedupErr <= max, "%s A=%d G=%d: speedup error %.1f%% / %.1f%%",
            relayCollName(s->coll), s->nActive, s->nGroups, 100 * c.meanSpeedupErr, 100 * c.maxSpeedupErr);
    if (s->nGroups == 1) {
      T_CHECK(c.meanBaseErr < 0.10 && c.maxBaseErr < 0.15, "baseline drifted from the measured RCCL column");
      /* The relay time: within 10% on average everywhere, 15% at every row
       * but the 4-active all-gather's cache-bound 1 GB (23%). */
      double relayMax = s->coll == relayCollectiveAllGather && s->nActive == 4 ? 0.24 : 0.15;
      T_CHECK(c.meanRelayErr < 0.10 && c.maxRelayErr < relayMax, "relay time drifted from the measurements");
    }
    checked++;
  }
  T_CHECK(misses == (int)(sizeof kSeedMisses / sizeof kSeedMisses[0]), "%d of the named misses found",
          misses);
  relayTopoFree(t);
  return checked ? 0 : SKIP;
}

/* seedlink and seedtables exit 77 (skipped) until relay plans exist. */
#define SIM_CASE(nm, f) \
  { .name = nm, .fn = f, .timeoutS = 120, .skipCode = 77 }
static const tCase kCases[] = {
    SIM_CASE("oneflow", caseOneFlow),
    SIM_CASE("share", caseShare),
    SIM_CASE("opbudget", caseOpBudget),
    SIM_CASE("switch", caseSwitch),
    SIM_CASE("sync", caseSync),
    SIM_CASE("ops", caseOps),
    SIM_CASE("mismatch", caseMismatch),
    SIM_CASE("determinism", caseDeterminism),
    SIM_CASE("speed", caseSpeed),
    SIM_CASE("baseline", caseBaseline),
    SIM_CASE("seedlink", caseSeedLinkModel),
    SIM_CASE("seedtables", caseSeedTables),
};

int main(int argc, char** argv) { return t_main(argc, argv, "sim", kCases, T_NCASES(kCases)); }
