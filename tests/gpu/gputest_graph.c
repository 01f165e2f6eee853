/*
 * CUDA-graph capture of every collective and every route (issue 9): capture one call, replay it many times
 * with inputs that change between replays, verify every replay. Odd ranks sleep before some launches, so a
 * stale epoch or stale staging fails deterministically instead of racing. Waits poll cudaStreamQuery with a
 * deadline (a regression reports instead of hanging). One case makes the first call of a fresh comm under
 * capture, with nothing prepared: no region or sub-communicator may be created inside the capture, and
 * every rank must take the same route.
 *
 * Rows: all (every rank active; routes auto, direct, native, one-shot); newcalls (the calls of issue 36
 * under capture: broadcast and reduce rooted at position 1, routes auto, direct and one-shot (the GPU
 * kernel's rooted form: LL at the small count, declined to direct at the large one) with every rank active,
 * relay on the relay copy's layout, A = 2 of the comm with the others helping, asserted to run relay;
 * a send/recv ring in one group; an all-to-all-v with uneven and zero blocks); and seed, the seed's scenario
 * (docs/design.md, "Graph capture"): one group of A = 4, ranks 0-3 active and 4-7 helpers (helpers capture
 * and replay their part with NULL buffers), routes auto, direct, relay, one-shot and bandwidth, all four
 * collectives, each warm (an uncaptured call of the same size first, so the route's staging and regions
 * exist before the capture: the cache-priming the seed found load-bearing) and first-call-captured, at a
 * small count and at one large enough for the pipelined relay. The hazards each case guards:
 *   G1 staging allocated inside a capture (a graph allocation node valid only while the graph runs):
 *      relay/bw warm and first-captured at the large count;
 *   G2 a host epoch baked into the graph as a kernel argument: one-shot replays with skewed ranks;
 *   G3 region creation (memset, exchanges) under capture: one-shot first call captured, nothing prepared;
 *   G4 a side stream forked from the captured stream: relay reduce-scatter, captured and replayed.
 *
 *   gputest_graph ROW [replays]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "gpu/gpu_util.h"
#include "relaycc_nccl.h"

#define COUNT 1003         /* odd: vector bodies and scalar tails both run */
#define LARGE_COUNT 262147 /* ~1 MiB of floats per rank: the relay pipelines it in several chunks */
#define WAIT_S 60.0

enum { AG = 0, RS = 1, AR = 2, A2A = 3, BC = 4, RD = 5, P2P = 6, A2AV = 7 };
static const char* kColl[8] = {"allgather", "reducescatter", "allreduce", "alltoall",
                               "broadcast", "reduce",        "sendrecv",  "alltoallv"};
#define ROOT_INDEX 1 /* broadcast and reduce: the root's position, not the first rank */

/* Small integers in float: sums are exact in any order. */
static float val(int src, int dst, int rep, size_t i) {
  return (float)(src * 16 + dst * 4 + (rep % 29) + (int)(i % 5));
}

/* All-to-all-v: the block active i sends to active j, uneven, some empty (0 -> 1 already at A = 2). */
static size_t a2avBlock(int i, int j, size_t n) {
  return (i + 2 * j) % 4 == 2 ? 0 : n / 2 * (size_t)(1 + (i + 2 * j) % 3) + (size_t)j;
}
static size_t a2avTotal(int me, int A, size_t n, int recv) {
  size_t t = 0;
  for (int j = 0; j < A; j++) t += recv ? a2avBlock(j, me, n) : a2avBlock(me, j, n);
  return t;
}

static size_t sendElems(int coll, int A, int me, size_t n) {
  if (coll == A2AV) return a2avTotal(me, A, n, 0);
  return (coll == RS || coll == A2A) ? (size_t)A * n : n;
}
static size_t recvElems(int coll, int A, int me, size_t n) {
  if (coll == A2AV) return a2avTotal(me, A, n, 1);
  return (coll == AG || coll == A2A) ? (size_t)A * n : n;
}

static void fill(int coll, int A, int me, int rep, size_t n, float* h) {
  if (coll == A2AV) {
    for (int j = 0, at = 0; j < A; at += (int)a2avBlock(me, j, n), j++)
      for (size_t i = 0; i < a2avBlock(me, j, n); i++) h[(size_t)at + i] = val(me, j, rep, i);
    return;
  }
  int blocks = (coll == RS || coll == A2A) ? A : 1, to = coll == P2P ? (me + 1) % A : 0;
  for (int b = 0; b < blocks; b++)
    for (size_t i = 0; i < n; i++) h[(size_t)b * n + i] = val(me, blocks > 1 ? b : to, rep, i);
}

static void expect(int coll, int A, int me, int rep, size_t n, float* h) {
  if (coll == A2AV) {
    for (int j = 0, at = 0; j < A; at += (int)a2avBlock(j, me, n), j++)
      for (size_t i = 0; i < a2avBlock(j, me, n); i++) h[(size_t)at + i] = val(j, me, rep, i);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (coll == BC) {
      h[i] = val(ROOT_INDEX, 0, rep, i);
      continue;
    }
    if (coll == P2P) {
      h[i] = val((me + A - 1) % A, me, rep, i);
      continue;
    }
    if (coll == RD && me != ROOT_INDEX) {
      memset(&h[i], 0xFF, sizeof h[i]); /* the poison: a reduce writes the root only */
      continue;
    }
    if (coll == AG || coll == A2A) {
      for (int s = 0; s < A; s++) h[(size_t)s * n + i] = val(s, coll == A2A ? me : 0, rep, i);
    } else {
      float sum = 0;
      for (int s = 0; s < A; s++) sum += val(s, coll == RS ? me : 0, rep, i);
      /* (RD: the root's sum of every active's block 0) */
      h[i] = sum;
    }
  }
}

/* This rank's position in the (one-group) layout; -1: a helper. */
static int activeIndexOfRank(const relayLayout_t* L, int rank) {
  for (int i = 0; i < L->nActive; i++)
    if (L->ranks[i] == rank) return i;
  return -1;
}
static int activeIndex(const relayLayout_t* L, relayComm_t comm) {
  int rank = -1;
  relayCommUserRank(comm, &rank);
  return activeIndexOfRank(L, rank);
}

/* The all-to-all-v of active me: counts and displacements from a2avBlock. */
static relayResult_t callA2av(const void* s, void* r, size_t n, relayLayout_t* L, relayComm_t comm,
                              cudaStream_t st) {
  int A = L->nActive, me = activeIndex(L, comm);
  size_t sc[64], sd[64], rc[64], rd[64];
  for (int j = 0; me >= 0 && j < A; j++) {
    sc[j] = a2avBlock(me, j, n);
    rc[j] = a2avBlock(j, me, n);
    sd[j] = j ? sd[j - 1] + sc[j - 1] : 0;
    rd[j] = j ? rd[j - 1] + rc[j - 1] : 0;
  }
  return me < 0 ? relayAllToAllv(NULL, NULL, NULL, NULL, NULL, NULL, relayFloat32, L, comm, st)
                : relayAllToAllv(s, sc, sd, r, rc, rd, relayFloat32, L, comm, st);
}

/* A ring in one group: every active sends to the next and receives from the previous. */
static relayResult_t callRing(const void* s, void* r, size_t n, relayLayout_t* L, relayComm_t comm,
                              cudaStream_t st) {
  int A = L->nActive, me = activeIndex(L, comm);
  if (me < 0) return relaySuccess; /* a helper: no transfer of its own */
  relayResult_t res = relayGroupStart();
  if (res != relaySuccess) return res;
  res = relaySend(s, n, relayFloat32, L->ranks[(me + 1) % A], comm, st);
  relayResult_t rr = relayRecv(r, n, relayFloat32, L->ranks[(me + A - 1) % A], comm, st);
  relayResult_t re = relayGroupEnd();
  return res != relaySuccess ? res : rr != relaySuccess ? rr : re;
}

static relayResult_t call(int coll, const void* s, void* r, size_t n, relayLayout_t* L, relayComm_t comm,
                          cudaStream_t st) {
  size_t counts[1] = {n};
  switch (coll) {
    case BC: return relayBroadcast(s, r, counts, relayFloat32, ROOT_INDEX, L, comm, st);
    case RD: return relayReduce(s, r, counts, relayFloat32, relaySum, ROOT_INDEX, L, comm, st);
    case P2P: return callRing(s, r, n, L, comm, st);
    case A2AV: return callA2av(s, r, n, L, comm, st);
    case AG: return relayAllGather(s, r, counts, relayFloat32, L, comm, st);
    case RS: return relayReduceScatter(s, r, counts, relayFloat32, relaySum, L, comm, st);
    case AR: return relayAllReduce(s, r, counts, relayFloat32, relaySum, L, comm, st);
    default: return relayAllToAll(s, r, counts, relayFloat32, L, comm, st);
  }
}

typedef struct {
  const relayLayout_t* L;
  int me;        /* this rank's index in the group; -1: a helper (NULL buffers, nothing to check) */
  size_t count;  /* COUNT or LARGE_COUNT */
  int mustRoute; /* the route the captured call must take (a forced route that can serve it); -1: any */
} shape_t;

/* Capture one call (after an optional uncaptured warm-up), replay it. */
static void runCase(relayComm_t comm, int rank, int nranks, const shape_t* sh, int coll, int warm,
                    int replays, const char* tag) {
  int A = sh->L->nActive, me = sh->me;
  relayLayout_t L = *sh->L;
  size_t sn = me >= 0 ? sendElems(coll, A, me, sh->count) : 0,
         rn = me >= 0 ? recvElems(coll, A, me, sh->count) : 0;
  float *dS = NULL, *dR = NULL, *hS = NULL, *hR = NULL, *want = NULL;
  if (me >= 0) {
    G_CUDA(cudaMalloc((void**)&dS, sn * sizeof(float)));
    G_CUDA(cudaMalloc((void**)&dR, rn * sizeof(float)));
    G_CUDA(cudaMallocHost((void**)&hS, sn * sizeof(float)));
    G_CUDA(cudaMallocHost((void**)&hR, rn * sizeof(float)));
    want = malloc(rn * sizeof(float));
    G_CHECK(want != NULL, "out of host memory");
  }
  cudaStream_t st;
  G_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (warm) {
    if (me >= 0) {
      fill(coll, A, me, 0, sh->count, hS);
      G_CUDA(cudaMemcpyAsync(dS, hS, sn * sizeof(float), cudaMemcpyHostToDevice, st));
    }
    G_RELAY(comm, call(coll, dS, dR, sh->count, &L, comm, st));
    gpuWait(st, WAIT_S, "warm-up call");
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  G_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
  relayResult_t cr = call(coll, dS, dR, sh->count, &L, comm, st);
  cudaError_t ce = cudaStreamEndCapture(st, &g);
  G_CHECK(cr == relaySuccess, "%s: captured call -> %s: %s", tag, relayGetErrorString(cr),
          relayGetLastError(comm));
  G_CHECK(ce == cudaSuccess, "%s: end capture: %s", tag, cudaGetErrorString(ce));
  G_CUDA(cudaGraphInstantiate(&ge, g, 0));
  int route = 0, depth = 0;
  relayCommLastRoute(comm, &route, &depth);
  int routes[64];
  G_RELAY(comm, relayCommAgree(comm, &route, routes, sizeof(int)));
  for (int r = 0; r < nranks; r++)
    G_CHECK(routes[r] == route, "%s: rank %d captured route %s, rank %d route %s", tag, rank,
            relayRouteName(route), r, relayRouteName(routes[r]));
  G_CHECK(sh->mustRoute < 0 || route == sh->mustRoute, "%s: captured route %s, not %s", tag,
          relayRouteName(route), relayRouteName(sh->mustRoute));
  for (int rep = 1; rep <= replays; rep++) {
    if (me >= 0) {
      fill(coll, A, me, rep, sh->count, hS);
      G_CUDA(cudaMemcpyAsync(dS, hS, sn * sizeof(float), cudaMemcpyHostToDevice, st));
      G_CUDA(cudaMemsetAsync(dR, 0xFF, rn * sizeof(float), st)); /* poison: NaN */
    }
    if ((rank & 1) && rep % 50 == 1) {
      gpuWait(st, WAIT_S, "input upload");
      struct timespec ts = {0, 2 * 1000000}; /* 2 ms: the peer runs ahead */
      nanosleep(&ts, NULL);
    }
    G_CUDA(cudaGraphLaunch(ge, st));
    if (me >= 0) G_CUDA(cudaMemcpyAsync(hR, dR, rn * sizeof(float), cudaMemcpyDeviceToHost, st));
    gpuWait(st, WAIT_S, "a graph replay");
    if (me < 0) continue;
    expect(coll, A, me, rep, sh->count, want);
    for (size_t i = 0; i < rn; i++) /* bits: a reduce's non-root keeps its NaN poison */
      G_CHECK(!memcmp(&hR[i], &want[i], sizeof(float)), "%s (route %s) replay %d: element %zu = %g, want %g",
              tag, relayRouteName(route), rep, i, (double)hR[i], (double)want[i]);
  }
  if (rank == 0) gpuLog("%s: route %s, %d replays verified", tag, relayRouteName(route), replays);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(st);
  cudaFree(dS);
  cudaFree(dR);
  cudaFreeHost(hS);
  cudaFreeHost(hR);
  free(want);
}

typedef struct {
  int seed;     /* the seed's scenario: A = 4 of 8 */
  int newCalls; /* issue 36's calls (BC, RD, P2P, A2AV), every rank active */
  int replays;
  int nranks;
  char job[128];
} opts_t;

/* The seed's hazards (header) that one case guards. */
static const char* hazards(const char* route, int coll, int warm, size_t count) {
  if (!strcmp(route, "oneshot")) return warm ? "G2" : "G2 G3";
  if (!strcmp(route, "relay") && coll == RS) return count == LARGE_COUNT ? "G1 G4" : "G4";
  if ((!strcmp(route, "relay") || !strcmp(route, "bw")) && count == LARGE_COUNT) return "G1";
  return "-";
}

static int rankMain(int rank, int nranks, void* arg) {
  opts_t* o = arg;
  g_logRank = rank;
  gpuLogOpen(o->seed ? "gputest_graph-seed" : o->newCalls ? "gputest_graph-newcalls" : "gputest_graph");
  int dev = gpuRankStart(rank, nranks, o->job);
  int ranks[64];
  relayLayout_t L = {1, o->seed ? 4 : nranks, ranks};
  for (int i = 0; i < L.nActive; i++) ranks[i] = i;
  static const char* kAllRoutes[] = {"auto", "direct", "native", "oneshot"};
  static const char* kSeedRoutes[] = {"auto", "direct", "relay", "oneshot", "bw"};
  static const char* kNewRoutes[] = {"auto", "direct", "relay", "oneshot"};
  const char* const* routes = o->seed ? kSeedRoutes : o->newCalls ? kNewRoutes : kAllRoutes;
  int nRoutes = o->seed ? 5 : 4;
  int coll0 = o->newCalls ? BC : AG, coll1 = o->newCalls ? A2AV : A2A;
  const size_t counts[2] = {COUNT, LARGE_COUNT};
  for (int ci = 0; ci < (o->seed || o->newCalls ? 2 : 1); ci++)
    for (int ri = 0; ri < nRoutes; ri++)
      for (int coll = coll0; coll <= coll1; coll++)
        for (int warm = 1; warm >= 0; warm--) {
          /* The relay and one-shot routes are broadcast's and reduce's; point-to-point and all-to-all-v
           * run without a route (a forced relay would be refused under capture: counts not agreed). */
          if (o->newCalls && ri >= 2 && coll >= P2P) continue;
          /* The forced relay of broadcast and reduce runs on the relay copy's layout: A = 2 of the comm,
           * the others helpers (README: GPU 2 to GPU 5 of 8); with every rank active there is no helper
           * and the relay is direct (2026-12-05: that row captured no relay). */
          int relayCopy = o->newCalls && ri == 2 && nranks > 2;
          int pair[2] = {nranks >= 6 ? 2 : 0, nranks >= 6 ? 5 : nranks - 1};
          relayLayout_t Lc = relayCopy ? (relayLayout_t){1, 2, pair} : L;
          shape_t sh = {&Lc, activeIndexOfRank(&Lc, rank), counts[ci], relayCopy ? relayRouteRelay : -1};
          /* A fresh comm per case, so warm = 0 is a first call under capture. */
          relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
          G_CHECK(relayParseRoute(routes[ri], &cfg.route) == 0, "route");
          char job[200], tag[200];
          snprintf(job, sizeof job, "%s-%d-%d-%d-%d", o->job, ci, ri, coll, warm);
          snprintf(tag, sizeof tag, "%s A=%d/%d count=%zu route=%s %s [%s]", kColl[coll], Lc.nActive, nranks,
                   counts[ci], routes[ri], warm ? "warm" : "first call captured",
                   hazards(routes[ri], coll, warm, counts[ci]));
          relayComm_t comm;
          G_RELAY(NULL, relayCommInitNcclShm(&comm, nranks, rank, job, dev, &cfg));
          int replays = warm ? o->replays : (o->replays + 9) / 10;
          if (ci == 1) replays = (replays + 3) / 4; /* the large count: 1 MiB per rank and replay */
          runCase(comm, rank, nranks, &sh, coll, warm, replays, tag);
          G_RELAY(NULL, relayCommDestroy(comm));
        }
  return 0;
}

/* arg: 0 all, 1 seed, 2 newcalls; argv: [replays] (200 when not given). */
static int runGraph(void* rowArg, int argc, char** argv) {
  opts_t o;
  memset(&o, 0, sizeof o);
  o.seed = *(const int*)rowArg == 1;
  o.newCalls = *(const int*)rowArg == 2;
  o.replays = argc > 0 ? atoi(argv[0]) : 200;
  int n = gpuTestRanks(o.seed ? "gputest_graph seed" : "gputest_graph", o.seed ? 8 : 2, 8);
  if (!n) return GPU_SKIP;
  relayLaunchJobName("graph", o.job, sizeof o.job);
  relayLaunchResult res;
  double t0 = gpuNow();
  if (relayLaunchRanks(n, rankMain, &o, 540000, 5000, &res, NULL) != 0) {
    gpuLog("FAIL: %s", res.message);
    return 1;
  }
  gpuLog("gputest_graph%s: every case passed (%d ranks, %.1f s)",
         o.seed       ? " seed"
         : o.newCalls ? " newcalls"
                      : "",
         n, gpuNow() - t0);
  return 0;
}

static int runAll(int argc, char** argv) { return runGraph(&(int){0}, argc, argv); }
static int runSeed(int argc, char** argv) { return runGraph(&(int){1}, argc, argv); }
static int runNewCalls(int argc, char** argv) { return runGraph(&(int){2}, argc, argv); }

/* CUDA-graph capture and verified replays per collective and route (issue 9), and the seed's scenario. */
static const tCase kCases[] = {
    {.name = "all",
     .main = runAll,
     .ctest = "gpu_graph",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "seed",
     .main = runSeed,
     .ctest = "gpu_graph_seed",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1,
     .args = "100"},
    {.name = "newcalls",
     .main = runNewCalls,
     .ctest = "gpu_graph_newcalls",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1,
     .args = "40"},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
