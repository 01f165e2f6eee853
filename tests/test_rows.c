/*
 * Routes as rows (issue 16 part 3): the table of routes, the router's
 * candidate lists (every list ends in direct; a route whose transport
 * capability is missing is not listed), and core's walk over a list on 2 shm
 * ranks (a missing capability skips a row without calling its prepare; a
 * declined prepare falls to the next row; the direct plan at the end runs
 * the call and its data is checked against the serial reference).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "colls_common.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "route/depth.h"
#include "route/route.h"
#include "route/table.h"
#include "topo/topo.h"

static planKey mkKey(relayCollective_t coll, int A, const int* ranks, const size_t* counts) {
  planKey k = planKeyInit(coll, 8, 1, A, ranks, counts, relayFloat32);
  k.op = relaySum;
  k.depth = 1;
  return k;
}

/* ---- the table ---- */

static int caseTable(void) {
  T_CHECK(relayRouteRowOf(relayRouteAuto) == NULL && relayRouteRowOf(relayNumRoutes) == NULL &&
              relayRouteRowOf(-1) == NULL,
          "auto and out-of-range values have no row");
  for (int r = 0; r <= relayNumRoutes; r++) {
    /* One list of names (RELAYCC_ROUTE's choices are this list): the public enum's, the parser and
     * relayRouteName agree with it. */
    const char* name = relayRouteNames[r];
    T_CHECK((r == relayNumRoutes) == (name == NULL), "route %d: name %s", r, name ? name : "(null)");
    if (!name) break;
    int back = -1;
    T_CHECK(relayParseRoute(name, &back) == 0 && back == r, "route %d: name %s parses to %d", r, name, back);
    T_CHECK(!strcmp(relayRouteName(r), name), "route %d: relayRouteName %s, table %s", r, relayRouteName(r),
            name);
    const char* pub = relayGetEnumName(relayEnumRoute, r);
    T_CHECK(pub && !strncmp(pub, "relayRoute", 10) && !strcasecmp(pub + 10, name),
            "route %d: %s in relaycc.h, %s here", r, pub ? pub : "(null)", name);
  }
  T_CHECK(!strcmp(relayRouteName(-1), "?") && !strcmp(relayRouteName(relayNumRoutes), "?"),
          "out-of-range names");
  for (int r = 1; r < relayNumRoutes; r++) {
    const relayRouteRow* row = relayRouteRowOf(r);
    T_CHECK(row && row->route == r, "route %d: row %p at the wrong index", r, (const void*)row);
    /* A row without a plan is run by its own run. */
    T_CHECK(row->build || row->run, "route %s runs nothing", relayRouteName(r));
    T_CHECK(!(row->build && row->run), "route %s has a plan and a run of its own", relayRouteName(r));
  }
  const relayRouteRow* d = relayRouteRowOf(relayRouteDirect);
  /* Lists end in direct, which core must be able to run on any transport. */
  T_CHECK(d->build && d->caps == 0 && !d->prepare, "direct needs a capability or a prepare");
  int x = -1;
  T_CHECK(relayParseRoute("auto", &x) == 0 && x == relayRouteAuto, "auto");
  T_CHECK(relayParseRoute("one-shot", &x) == 0 && x == relayRouteOneShot, "one-shot alias");
  T_CHECK(relayParseRoute("bogus", &x) != 0 && relayParseRoute(NULL, &x) != 0, "bogus names parse");
  return 0;
}

/* ---- the router's lists ---- */

static void checkList(const relayRouteList* l, int caps, const char* what) {
  T_CHECK(l->n >= 1 && l->n <= RELAY_ROUTE_MAX_CANDS, "%s: %d candidates", what, l->n);
  T_CHECK(l->route[l->n - 1] == relayRouteDirect, "%s: ends in %s", what, relayRouteName(l->route[l->n - 1]));
  for (int i = 0; i < l->n; i++) {
    const relayRouteRow* row = relayRouteRowOf(l->route[i]);
    T_CHECK(row, "%s: candidate %d is route %d", what, i, l->route[i]);
    const char* name = relayRouteName(row->route);
    T_CHECK(!(row->caps & ~(unsigned)caps), "%s: %s listed without its capability", what, name);
    T_CHECK(l->depth[i] >= 1, "%s: %s at depth %d", what, name, l->depth[i]);
    for (int j = 0; j < i; j++) T_CHECK(l->route[j] != l->route[i], "%s: %s listed twice", what, name);
  }
}

static int caseCandidates(void) {
  const char* presets[] = {"h200x2", "h200", "mi350x", "cpu", NULL};
  const int capsList[] = {0, RELAY_TP_CAP_ONESHOT, RELAY_TP_CAP_NATIVE,
                          RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT};
  int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7}, checked = 0;
  for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
    struct relayTopo* t = NULL;
    if (presets[p]) T_OK(relayTopoLoad(presets[p], &t));
    for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
      for (size_t ci = 0; ci < sizeof capsList / sizeof capsList[0]; ci++)
        for (size_t n = 0; n < 12; n++) {
          size_t count = (size_t)64 << (2 * (n / 2)), counts[1] = {count}; /* 256 B to 256 MiB of fp32 */
          planKey k = mkKey((relayCollective_t)coll, n % 2 ? 4 : 2, ranks, counts);
          relayRouteList l[2];
          relayRouteCandidates(&k, t, capsList[ci], relayRouteAuto, 0, l, NULL);
          char what[160];
          for (int g = 0; g < 2; g++) {
            snprintf(what, sizeof what, "%s %s A=%d count %zu caps %d %s",
                     presets[p] ? presets[p] : "no model", relayCollName(k.coll), k.nActive, count,
                     capsList[ci], g ? "captured" : "per call");
            checkList(&l[g], capsList[ci], what);
            /* The first is the router's winner. */
            int r, d;
            relayRouteChoose(&k, t, capsList[ci] | (g ? 0 : RELAY_ROUTE_CAP_PERCALL), &r, &d);
            T_CHECK(l[g].route[0] == r && l[g].depth[0] == d, "%s: list starts %s/%d, winner %s/%d", what,
                    relayRouteName(l[g].route[0]), l[g].depth[0], relayRouteName(r), d);
            /* A winner that declines hands the call to the incumbent it displaced. */
            int native = (capsList[ci] & RELAY_TP_CAP_NATIVE) != 0;
            int wantN = r == relayRouteDirect ? 1 : 2 + (native && r != relayRouteNative);
            T_CHECK(l[g].n == wantN, "%s: %d candidates, want %d", what, l[g].n, wantN);
            if (wantN == 3)
              T_CHECK(l[g].route[1] == relayRouteNative, "%s: second %s", what,
                      relayRouteName(l[g].route[1]));
            checked++;
          }
        }
    relayTopoFree(t);
  }
  /* Forced routes, forced depth, rooted calls. */
  struct relayTopo* t = NULL;
  T_OK(relayTopoLoad("mi350x", &t));
  size_t big[1] = {64u << 20};
  planKey k = mkKey(relayCollectiveAllReduce, 2, ranks, big);
  relayRouteList l[2];
  relayRouteCandidates(&k, t, 0, relayRouteRelay, 0, l, NULL);
  T_CHECK(l[0].n == 2 && l[0].route[0] == relayRouteRelay && l[0].depth[0] == relayDepthChoose(&k, t) &&
              l[0].route[1] == relayRouteDirect && l[0].depth[1] == 1 && !memcmp(&l[0], &l[1], sizeof l[0]),
          "forced relay: %s/%d then %s/%d (the depth model says %d)", relayRouteName(l[0].route[0]),
          l[0].depth[0], relayRouteName(l[0].route[1]), l[0].depth[1], relayDepthChoose(&k, t));
  T_CHECK(relayDepthChoose(&k, t) > 1, "64 MiB on mi350x is pipelined (else the case above proves nothing)");
  relayRouteCandidates(&k, t, 0, relayRouteRelay, 3, l, NULL);
  T_CHECK(l[0].n == 2 && l[0].depth[0] == 3, "forced relay at depth 3: %d", l[0].depth[0]);
  relayRouteCandidates(&k, t, 0, relayRouteDirect, 0, l, NULL);
  T_CHECK(l[0].n == 1 && l[0].route[0] == relayRouteDirect, "forced direct: %d candidates", l[0].n);
  /* A forced route the transport cannot run is listed anyway: core skips it. */
  relayRouteCandidates(&k, t, 0, relayRouteNative, 0, l, NULL);
  T_CHECK(l[0].n == 2 && l[0].route[0] == relayRouteNative && l[0].route[1] == relayRouteDirect,
          "forced native");
  relayRouteCandidates(&k, t, RELAY_TP_CAP_ONESHOT, relayRouteAuto, 5, l, NULL);
  T_CHECK(l[0].depth[0] == 5 && l[1].depth[0] == 5, "auto with a forced depth: %d", l[0].depth[0]);
  size_t rc[3] = {10, 20, 30};
  planKey kr = mkKey(relayCollectiveScatter, 3, ranks, rc);
  relayRouteCandidates(&kr, t, RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT, relayRouteRelay, 0, l, NULL);
  T_CHECK(l[0].n == 1 && l[0].route[0] == relayRouteDirect && l[1].n == 1, "rooted, relay forced: %d, %s",
          l[0].n, relayRouteName(l[0].route[0]));
  relayTopoFree(t);
  printf("%d lists checked\n", checked);
  return 0;
}

/* ---- core's walk, on 2 shm ranks ---- */

typedef struct {
  int oneshotPrepares, nativePrepares, nativeRuns;
  relayCollective_t nativeColl;
  size_t nativeCount;
  const void* nativeSend;
} fakeCounts;
static fakeCounts gFake;
static relayResult_t gNativeAnswer;

static relayResult_t declineOneShot(struct relayComm* c, size_t slotBytes, relayStream_t stream) {
  (void)c, (void)slotBytes, (void)stream;
  gFake.oneshotPrepares++;
  return relayNotSupported; /* every rank alike */
}
static relayResult_t fakeNativePrepare(struct relayComm* c, int nGroups, int nActive, const int* ranks,
                                       relayStream_t stream, void** handle) {
  (void)c, (void)nGroups, (void)nActive, (void)ranks, (void)stream;
  gFake.nativePrepares++;
  *handle = &gFake;
  return gNativeAnswer;
}
static relayResult_t fakeNative(struct relayComm* c, void* h, relayCollective_t coll, const void* send,
                                void* recv, size_t count, relayDataType_t dt, relayRedOp_t op, int root,
                                relayStream_t stream) {
  (void)root;
  (void)c, (void)recv, (void)dt, (void)op, (void)stream;
  T_CHECK(h == &gFake, "native got handle %p", h);
  gFake.nativeRuns++;
  gFake.nativeColl = coll;
  gFake.nativeCount = count;
  gFake.nativeSend = send;
  return relaySuccess;
}

/* One all-reduce of count floats on ranks {0, 1}; returns the route it took
 * and checks the data whenever a plan (not the fake native) ran it. */
static int allReduce(relayComm_t comm, int rank, size_t count, float* send, float* recv) {
  int ranks[2] = {0, 1};
  relayLayout_t L = {1, 2, ranks};
  size_t counts[1] = {count};
  tc_fill_input(relayCollectiveAllReduce, relayFloat32, relaySum, 2, rank, count, send);
  memset(recv, 0xff, count * sizeof *recv); /* NaN: never a sum of the inputs */
  T_OK(relayAllReduce(send, recv, counts, relayFloat32, relaySum, &L, comm, NULL));
  int route, depth;
  relayCommLastRoute(comm, &route, &depth);
  if (route != relayRouteNative) {
    float* want = malloc(count * sizeof *want);
    T_CHECK(want, "malloc");
    tc_expected(relayCollectiveAllReduce, relayFloat32, relaySum, 2, rank, count, want);
    size_t bad = 0, n = tc_compare(relayFloat32, recv, want, count, &bad);
    T_CHECK(n == 0, "rank %d, route %s: %zu elements differ, first %zu: %g, want %g", rank,
            relayRouteName(route), n, bad, (double)recv[bad], (double)want[bad]);
    free(want);
  }
  return route;
}

/* A comm of shm ranks that the router prices as 2 x H200 (graph and per-call costs calibrated). */
static relayComm_t h200x2Comm(int rank, int nranks) {
  relayComm_t comm = t_comm(rank, nranks, NULL);
  relayTopoFree(comm->topo);
  comm->topo = NULL;
  T_OK(relayTopoLoad("h200x2", &comm->topo));
  return comm;
}

static int walkRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t comm = h200x2Comm(rank, nranks);
  static relayTransportOps ops;
  ops = *comm->tp;
  ops.oneshotPrepare = declineOneShot;
  ops.nativePrepare = fakeNativePrepare;
  ops.native = fakeNative;
  comm->tp = &ops;
  /* 64 KiB of fp32 per call: the one-shot's regime on h200x2 (route_gpu_choices). */
  size_t count = 16384;
  float* send = malloc(count * sizeof *send);
  float* recv = malloc(count * sizeof *recv);
  T_CHECK(send && recv, "malloc");
  int ranks[2] = {0, 1};
  size_t counts[1] = {count};
  planKey k = mkKey(relayCollectiveAllReduce, 2, ranks, counts);
  k.nranks = nranks;
  relayRouteList l[2];
  relayRouteCandidates(&k, comm->topo, RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT, relayRouteAuto, 0, l,
                       NULL);
  T_CHECK(l[0].n == 3 && l[0].route[0] == relayRouteOneShot && l[0].route[1] == relayRouteNative,
          "the per-call list of a 64 KiB all-reduce on h200x2: %d candidates, %s first", l[0].n,
          relayRouteName(l[0].route[0]));

  /* 1. One-shot declined: the next row, native, runs the call. */
  ops.caps = RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT;
  gNativeAnswer = relaySuccess;
  memset(&gFake, 0, sizeof gFake);
  int route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route == relayRouteNative && gFake.oneshotPrepares == 1 && gFake.nativePrepares == 1 &&
              gFake.nativeRuns == 1,
          "declined one-shot: ran %s; %d one-shot prepares, %d native prepares, %d native runs",
          relayRouteName(route), gFake.oneshotPrepares, gFake.nativePrepares, gFake.nativeRuns);
  T_CHECK(
      gFake.nativeColl == relayCollectiveAllReduce && gFake.nativeCount == count && gFake.nativeSend == send,
      "native got %s, count %zu", relayCollName(gFake.nativeColl), gFake.nativeCount);

  /* 2. Both declined: the direct plan runs it (data checked). */
  gNativeAnswer = relayNotSupported;
  memset(&gFake, 0, sizeof gFake);
  route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route == relayRouteDirect && gFake.oneshotPrepares == 1 && gFake.nativePrepares == 1 &&
              !gFake.nativeRuns,
          "both declined: ran %s; %d, %d prepares, %d native runs", relayRouteName(route),
          gFake.oneshotPrepares, gFake.nativePrepares, gFake.nativeRuns);

  /* 3. Capabilities withdrawn: the rows are skipped, their prepares never
   * called, though the ops are still set. */
  ops.caps = 0;
  memset(&gFake, 0, sizeof gFake);
  route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route != relayRouteOneShot && route != relayRouteNative && !gFake.oneshotPrepares &&
              !gFake.nativePrepares,
          "no capabilities: ran %s; %d, %d prepares", relayRouteName(route), gFake.oneshotPrepares,
          gFake.nativePrepares);

  /* 4. Native only: the one-shot row is skipped, native runs. */
  ops.caps = RELAY_TP_CAP_NATIVE;
  gNativeAnswer = relaySuccess;
  memset(&gFake, 0, sizeof gFake);
  route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route == relayRouteNative && !gFake.oneshotPrepares && gFake.nativeRuns == 1,
          "native only: ran %s; %d one-shot prepares", relayRouteName(route), gFake.oneshotPrepares);
  free(send);
  free(recv);
  relayCommDestroy(comm);
  return 0;
}

/* A forced route the transport lacks falls back to direct without its prepare. */
static int forcedRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = relayRouteOneShot;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  static relayTransportOps ops;
  ops = *comm->tp;
  ops.oneshotPrepare = declineOneShot;
  ops.caps &= ~(unsigned)RELAY_TP_CAP_ONESHOT;
  comm->tp = &ops;
  size_t count = 1001;
  float* send = malloc(count * sizeof *send);
  float* recv = malloc(count * sizeof *recv);
  T_CHECK(send && recv, "malloc");
  memset(&gFake, 0, sizeof gFake);
  int route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route == relayRouteDirect && !gFake.oneshotPrepares, "forced one-shot without it: %s, %d prepares",
          relayRouteName(route), gFake.oneshotPrepares);
  /* With the capability, the forced one-shot's decline goes to direct too
   * (not to native: that is auto's incumbent). */
  ops.caps = RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_NATIVE;
  ops.nativePrepare = fakeNativePrepare;
  ops.native = fakeNative;
  gNativeAnswer = relaySuccess;
  route = allReduce(comm, rank, count, send, recv);
  T_CHECK(route == relayRouteDirect && gFake.oneshotPrepares == 1 && !gFake.nativePrepares,
          "forced one-shot declined: %s, %d, %d prepares", relayRouteName(route), gFake.oneshotPrepares,
          gFake.nativePrepares);
  free(send);
  free(recv);
  relayCommDestroy(comm);
  return 0;
}

/* Built once, cached once: on a new key the router builds each candidate's plan once, prices it both
 * ways (per call and captured: h200x2 models a host cost per step) and hands core the winner's, which
 * core caches and runs; a repeat builds nothing. Counted per route and depth (relayPlanBuildCount), in
 * sizes that take the one-shot, the bw ring or a plan of steps on h200x2, data checked each time. */
#define ONCE_DEPTHS 64
static void buildCounts(unsigned long n[relayNumRoutes][ONCE_DEPTHS]) {
  for (int r = 0; r < relayNumRoutes; r++)
    for (int d = 0; d < ONCE_DEPTHS; d++) n[r][d] = relayPlanBuildCount(r, d);
}

static int onceRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t comm = h200x2Comm(rank, nranks);
  T_CHECK(comm->topo->hostStepS > 0, "h200x2 models no host cost per step: one pricing would be trivial");
  const size_t counts[] = {1000, 16384, 1 << 20, 3 << 20};
  static unsigned long before[relayNumRoutes][ONCE_DEPTHS], after[relayNumRoutes][ONCE_DEPTHS];
  int routesSeen = 0;
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    size_t count = counts[i];
    float* send = malloc(count * sizeof *send);
    float* recv = malloc(count * sizeof *recv);
    T_CHECK(send && recv, "malloc");
    for (int call = 0; call < 2; call++) {
      buildCounts(before);
      int route = allReduce(comm, rank, count, send, recv), depth;
      relayCommLastRoute(comm, NULL, &depth);
      buildCounts(after);
      unsigned long total = 0;
      for (int r = 0; r < relayNumRoutes; r++) {
        for (int d = 0; d < ONCE_DEPTHS; d++) {
          unsigned long n = after[r][d] - before[r][d];
          total += n;
          T_CHECK(n <= 1, "count %zu, call %d: the %s plan at depth %d was built %lu times", count, call,
                  relayRouteName(r), d, n);
        }
      }
      unsigned long ran = after[route][depth] - before[route][depth];
      if (call == 0)
        T_CHECK(ran == 1 && total >= 1,
                "count %zu: the %s plan it ran (depth %d) built %lu times, %lu in all", count,
                relayRouteName(route), depth, ran, total);
      else T_CHECK(total == 0, "count %zu: a repeat built %lu plans (the cache holds them)", count, total);
      if (call == 0) routesSeen |= 1 << route;
    }
    free(send);
    free(recv);
  }
  /* The sizes reach more than one route, or the check proves less than it says. */
  T_CHECK(routesSeen & (routesSeen - 1), "every size ran one route (mask %#x)", (unsigned)routesSeen);

  /* The interposer's way: its question (relayCommRoutesCall) prices the call, then the call runs; the
   * plan that ran is still built once in all. A transport with the native collective (faked), so that
   * the question and the call share the router's answer; 64 KiB: the one-shot beats native. */
  static relayTransportOps ops;
  ops = *comm->tp;
  ops.caps |= RELAY_TP_CAP_NATIVE;
  ops.nativePrepare = fakeNativePrepare;
  ops.native = fakeNative;
  gNativeAnswer = relaySuccess;
  comm->tp = &ops;
  size_t count = 16000;
  float* send = malloc(count * sizeof *send);
  float* recv = malloc(count * sizeof *recv);
  T_CHECK(send && recv, "malloc");
  int ranks[2] = {0, 1};
  relayLayout_t L = {1, 2, ranks};
  buildCounts(before);
  int take = relayCommRoutesCall(comm, relayCollectiveAllReduce, &count, relayFloat32, relaySum, &L, 0, NULL);
  int route = allReduce(comm, rank, count, send, recv), depth;
  relayCommLastRoute(comm, NULL, &depth);
  buildCounts(after);
  T_CHECK(take && route == relayRouteOneShot, "64 KiB on h200x2 with native: take %d, ran %s", take,
          relayRouteName(route));
  unsigned long ran = after[route][depth] - before[route][depth];
  T_CHECK(ran == 1, "asked, then called: the %s plan it ran built %lu times", relayRouteName(route), ran);
  free(send);
  free(recv);
  relayCommDestroy(comm);
  return 0;
}

static const tCase kCases[] = {
    {.name = "table", .fn = caseTable, .timeoutS = 300},
    {.name = "candidates", .fn = caseCandidates, .timeoutS = 300},
    {.name = "walk", .rank = walkRank, .ranks = 2, .deadlineS = 120, .timeoutS = 300},
    {.name = "forced", .rank = forcedRank, .ranks = 2, .deadlineS = 120, .timeoutS = 300},
    {.name = "built_once", .rank = onceRank, .ranks = 2, .deadlineS = 120, .timeoutS = 300},
};

int main(int argc, char** argv) { return t_main(argc, argv, "rows", kCases, T_NCASES(kCases)); }
