/*
 * CUDA-graph capture of every collective and every route the GPU count
 * allows (issue 9): capture one call, replay it many times with inputs that
 * change between replays, verify every replay. Odd ranks sleep before some
 * launches, so a stale epoch or stale staging fails deterministically instead
 * of racing. Waits poll cudaStreamQuery with a deadline (a regression reports
 * instead of hanging). One case makes the first call of a fresh comm under
 * capture, with nothing prepared: no region or sub-communicator may be
 * created inside the capture, and every rank must take the same route.
 *
 *   gputest_graph [replays]   (default 1000)
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

#define COUNT 1003 /* odd: vector bodies and scalar tails both run */
#define WAIT_S 60.0

typedef struct {
  int replays;
  char job[128];
} opts_t;

enum { AG = 0, RS = 1, AR = 2, A2A = 3 };
static const char* kColl[4] = {"allgather", "reducescatter", "allreduce", "alltoall"};

/* Small integers in float: sums are exact in any order. */
static float val(int src, int dst, int rep, size_t i) { return (float)(src * 16 + dst * 4 + (rep % 29) + (int)(i % 5)); }

static size_t sendElems(int coll, int A) { return (coll == RS || coll == A2A) ? (size_t)A * COUNT : COUNT; }
static size_t recvElems(int coll, int A) { return (coll == AG || coll == A2A) ? (size_t)A * COUNT : COUNT; }

static void fill(int coll, int A, int me, int rep, float* h) {
  int blocks = (coll == RS || coll == A2A) ? A : 1;
  for (int b = 0; b < blocks; b++)
    for (size_t i = 0; i < COUNT; i++) h[(size_t)b * COUNT + i] = val(me, b, rep, i);
}

static void expect(int coll, int A, int me, int rep, float* h) {
  for (size_t i = 0; i < COUNT; i++) {
    if (coll == AG || coll == A2A) {
      for (int s = 0; s < A; s++) h[(size_t)s * COUNT + i] = val(s, coll == A2A ? me : 0, rep, i);
    } else {
      float sum = 0;
      for (int s = 0; s < A; s++) sum += val(s, coll == RS ? me : 0, rep, i);
      h[i] = sum;
    }
  }
}

static relayResult_t call(int coll, const void* s, void* r, relayLayout_t* L, relayComm_t comm, cudaStream_t st) {
  size_t counts[1] = {COUNT};
  switch (coll) {
    case AG: return relayAllGather(s, r, counts, relayFloat32, L, comm, st);
    case RS: return relayReduceScatter(s, r, counts, relayFloat32, relaySum, L, comm, st);
    case AR: return relayAllReduce(s, r, counts, relayFloat32, relaySum, L, comm, st);
    default: return relayAllToAll(s, r, counts, relayFloat32, L, comm, st);
  }
}

/* Capture one call (after an optional uncaptured warm-up), replay it. */
static void runCase(relayComm_t comm, int rank, int nranks, int coll, int warm, int replays, const char* tag) {
  int A = nranks;
  int ranks[64];
  for (int i = 0; i < A; i++) ranks[i] = i;
  relayLayout_t L = {1, A, ranks};
  size_t sn = sendElems(coll, A), rn = recvElems(coll, A);
  float *dS, *dR, *hS, *hR, *want;
  G_CUDA(cudaMalloc((void**)&dS, sn * sizeof(float)));
  G_CUDA(cudaMalloc((void**)&dR, rn * sizeof(float)));
  G_CUDA(cudaMallocHost((void**)&hS, sn * sizeof(float)));
  G_CUDA(cudaMallocHost((void**)&hR, rn * sizeof(float)));
  want = malloc(rn * sizeof(float));
  cudaStream_t st;
  G_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (warm) {
    fill(coll, A, rank, 0, hS);
    G_CUDA(cudaMemcpyAsync(dS, hS, sn * sizeof(float), cudaMemcpyHostToDevice, st));
    G_RELAY(comm, call(coll, dS, dR, &L, comm, st));
    gpuWait(st, WAIT_S, "warm-up call");
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  G_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
  relayResult_t cr = call(coll, dS, dR, &L, comm, st);
  cudaError_t ce = cudaStreamEndCapture(st, &g);
  G_CHECK(cr == relaySuccess, "%s: captured call -> %s: %s", tag, relayGetErrorString(cr), relayGetLastError(comm));
  G_CHECK(ce == cudaSuccess, "%s: end capture: %s", tag, cudaGetErrorString(ce));
  G_CUDA(cudaGraphInstantiate(&ge, g, 0));
  int route = 0, depth = 0;
  relayCommLastRoute(comm, &route, &depth);
  int routes[64];
  G_RELAY(comm, relayCommAgree(comm, &route, routes, sizeof(int)));
  for (int r = 0; r < nranks; r++)
    G_CHECK(routes[r] == route, "%s: rank %d captured route %s, rank %d route %s", tag, rank, relayRouteName(route), r,
            relayRouteName(routes[r]));
  for (int rep = 1; rep <= replays; rep++) {
    fill(coll, A, rank, rep, hS);
    G_CUDA(cudaMemcpyAsync(dS, hS, sn * sizeof(float), cudaMemcpyHostToDevice, st));
    G_CUDA(cudaMemsetAsync(dR, 0xFF, rn * sizeof(float), st)); /* poison: NaN */
    if ((rank & 1) && rep % 50 == 1) {
      gpuWait(st, WAIT_S, "input upload");
      struct timespec ts = {0, 2 * 1000000}; /* 2 ms: the peer runs ahead */
      nanosleep(&ts, NULL);
    }
    G_CUDA(cudaGraphLaunch(ge, st));
    G_CUDA(cudaMemcpyAsync(hR, dR, rn * sizeof(float), cudaMemcpyDeviceToHost, st));
    gpuWait(st, WAIT_S, "a graph replay");
    expect(coll, A, rank, rep, want);
    for (size_t i = 0; i < rn; i++)
      G_CHECK(hR[i] == want[i], "%s (route %s) replay %d: element %zu = %g, want %g", tag, relayRouteName(route), rep, i,
              (double)hR[i], (double)want[i]);
  }
  gpuLog("%s: route %s, %d replays verified", tag, relayRouteName(route), replays);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(st);
  cudaFree(dS);
  cudaFree(dR);
  cudaFreeHost(hS);
  cudaFreeHost(hR);
  free(want);
}

static int rankMain(int rank, int nranks, void* arg) {
  opts_t* o = arg;
  g_logRank = rank;
  gpuLogOpen("gputest_graph");
  G_CUDA(cudaSetDevice(rank));
  const char* routes[] = {"auto", "direct", "native", "oneshot"};
  for (int ri = 0; ri < 4; ri++) {
    for (int coll = 0; coll < 4; coll++) {
      for (int warm = 1; warm >= 0; warm--) {
        /* A fresh comm per case, so warm = 0 is a first call under capture. */
        relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
        G_CHECK(relayParseRoute(routes[ri], &cfg.route) == 0, "route");
        char job[200], tag[160];
        snprintf(job, sizeof job, "%s-%d-%d-%d", o->job, ri, coll, warm);
        snprintf(tag, sizeof tag, "%s route=%s %s", kColl[coll], routes[ri], warm ? "warm" : "first call captured");
        relayComm_t comm;
        G_RELAY(NULL, relayCommInitNcclShm(&comm, nranks, rank, job, rank, &cfg));
        runCase(comm, rank, nranks, coll, warm, warm ? o->replays : o->replays / 10, tag);
        G_RELAY(NULL, relayCommDestroy(comm));
      }
    }
  }
  return 0;
}

/* [replays]: 1000 when not given. */
static int runGraph(int argc, char** argv) {
  int n = gpuProbeCount();
  if (n < 2) {
    printf("gputest_graph: needs 2 GPUs, found %d: skipped\n", n);
    return GPU_SKIP;
  }
  opts_t o;
  o.replays = argc > 0 ? atoi(argv[0]) : 1000;
  relayLaunchJobName("graph", o.job, sizeof o.job);
  relayLaunchResult res;
  if (relayLaunchRanks(n > 8 ? 8 : n, rankMain, &o, 540000, 5000, &res, NULL) != 0) {
    fprintf(stderr, "FAIL: %s\n", res.message);
    return 1;
  }
  printf("gputest_graph: every case passed\n");
  return 0;
}

/* CUDA-graph capture and 1000 verified replays per collective and route (issue 9). */
static const tCase kCases[] = {
    {.name = "all", .main = runGraph, .ctest = "gpu_graph", .labels = "gpu", .timeoutS = 600,
     .skipCode = GPU_SKIP, .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
