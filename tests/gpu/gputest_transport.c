/*
 * The NCCL transport's ops on a one-rank comm (one process, one GPU):
 * self send/recv pairs matched in order, reduce and copy on both lanes (a
 * side-lane op must see the caller stream's earlier work, and join() must
 * order it before what follows), the scratch cache (grow-only, per stream and
 * slot), agree/barrier, and a CUDA graph captured on a comm with a cold cache
 * (scratch and the side lane are created during the capture) replayed with
 * new inputs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "gpu/gpu_util.h"
#include "p2p/p2p.h"
#include "relaycc_nccl.h"

enum { N = 100003 }; /* odd: the reduce's vector path and its scalar tail */

static void fillF(float* h, size_t n, float base) {
  for (size_t i = 0; i < n; i++) h[i] = base + (float)(i % 1000);
}

static void expectF(const float* got, size_t n, float (*f)(size_t, void*), void* arg, const char* what) {
  for (size_t i = 0; i < n; i++) {
    float w = f(i, arg);
    G_CHECK(got[i] == w, "%s: element %zu: got %g, want %g", what, i, (double)got[i], (double)w);
  }
}

typedef struct {
  float a, b, c; /* bases of the three inputs */
} sumArg;

static float sum3(size_t i, void* arg) {
  sumArg* s = arg;
  float m = (float)(i % 1000);
  return ((s->a + m) + (s->b + m)) + (s->c + m);
}

static float sum2(size_t i, void* arg) {
  sumArg* s = arg;
  float m = (float)(i % 1000);
  return (s->a + m) + (s->b + m);
}

static void testOps(relayComm_t comm, cudaStream_t s) {
  const relayTransportOps* tp = comm->tp;
  G_CHECK(strcmp(tp->name, "nccl") == 0, "transport is %s", tp->name);
  size_t bytes = (size_t)N * sizeof(float);
  float *a, *b, *c, *d;
  G_CUDA(cudaMalloc((void**)&a, bytes));
  G_CUDA(cudaMalloc((void**)&b, bytes));
  G_CUDA(cudaMalloc((void**)&c, bytes));
  G_CUDA(cudaMalloc((void**)&d, bytes));
  float* h = malloc(bytes);
  G_CHECK(h != NULL, "oom");

  /* Self transfers matched in order: send a then b, receive into c then d;
   * a zero-byte pair is dropped on both ends. */
  fillF(h, N, 1.0f);
  G_CUDA(cudaMemcpyAsync(a, h, bytes, cudaMemcpyHostToDevice, s));
  fillF(h, N, 5000.0f);
  G_CUDA(cudaMemcpyAsync(b, h, bytes, cudaMemcpyHostToDevice, s));
  G_CUDA(cudaMemsetAsync(c, 0xff, bytes, s));
  G_CUDA(cudaMemsetAsync(d, 0xff, bytes, s));
  relayXferDesc sends[3] = {{0, a, bytes}, {0, b, bytes - 4}, {0, a, 0}};
  relayXferDesc recvs[3] = {{0, c, bytes}, {0, d, bytes - 4}, {0, d, 0}};
  G_RELAY(comm, tp->group(comm, sends, 3, recvs, 3, P2P_OP_SENDRECV, s));
  G_CUDA(cudaMemcpyAsync(h, c, bytes, cudaMemcpyDeviceToHost, s));
  gpuWait(s, 60, "self group");
  for (size_t i = 0; i < N; i++)
    G_CHECK(h[i] == 1.0f + (float)(i % 1000), "self recv 1: element %zu = %g", i, (double)h[i]);
  G_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
  gpuWait(s, 60, "self group");
  for (size_t i = 0; i + 1 < N; i++)
    G_CHECK(h[i] == 5000.0f + (float)(i % 1000), "self recv 2: element %zu = %g", i, (double)h[i]);
  uint32_t tail;
  memcpy(&tail, &h[N - 1], 4);
  G_CHECK(tail == 0xffffffffu, "self recv 2 wrote past its %zu bytes", bytes - 4);
  gpuLog("ok: group (self send/recv in order, zero-byte pair)");

  /* Reduce on lane 0 and lane 1. The side lane must see the memcpy just
   * issued on the caller stream (the fork), and the copy after join() must
   * see the side lane's result (the join). */
  sumArg sa = {1.0f, 5000.0f, 7.0f};
  fillF(h, N, 7.0f);
  G_CUDA(cudaMemcpyAsync(c, h, bytes, cudaMemcpyHostToDevice, s));
  const void* srcs3[3] = {a, b, c};
  G_RELAY(comm, tp->reduce(comm, d, srcs3, 3, N, relayFloat32, relaySum, 0, 1, s));
  G_RELAY(comm, tp->join(comm, s));
  G_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
  gpuWait(s, 60, "side-lane reduce");
  expectF(h, N, sum3, &sa, "lane-1 reduce");
  /* In place on lane 0 (dst == src0), then a lane-1 copy joined back. */
  const void* srcs2[2] = {a, b};
  G_RELAY(comm, tp->reduce(comm, a, srcs2, 2, N, relayFloat32, relaySum, 0, 0, s));
  G_RELAY(comm, tp->copy(comm, c, a, bytes, 1, s));
  G_RELAY(comm, tp->join(comm, s));
  G_CUDA(cudaMemcpyAsync(h, c, bytes, cudaMemcpyDeviceToHost, s));
  gpuWait(s, 60, "in-place reduce + side copy");
  expectF(h, N, sum2, &sa, "in-place lane-0 reduce, lane-1 copy");
  G_RELAY(comm, tp->join(comm, s)); /* nothing pending: a no-op */
  gpuLog("ok: reduce/copy on lanes 0 and 1, join");

  /* Scratch: grow-only per (stream, slot). */
  void *p0 = NULL, *p1 = NULL, *p2 = NULL, *q = NULL;
  G_RELAY(comm, tp->scratch(comm, 0, 100, &p0, s));
  G_RELAY(comm, tp->scratch(comm, 0, 50, &p1, s));
  G_CHECK(p0 && p0 == p1, "a smaller request must return the same buffer (%p, %p)", p0, p1);
  G_RELAY(comm, tp->scratch(comm, 1, 100, &q, s));
  G_CHECK(q && q != p0, "slots must differ");
  G_RELAY(comm, tp->scratch(comm, 0, (size_t)3 << 20, &p2, s));
  G_CHECK(p2 && p2 != p0, "growth must reallocate");
  G_CUDA(cudaMemsetAsync(p2, 0, (size_t)64 << 20, s)); /* >= 1 MiB rounds up to 64 MiB */
  cudaStream_t s2;
  G_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  void* o = NULL;
  G_RELAY(comm, tp->scratch(comm, 0, 100, &o, s2));
  G_CHECK(o && o != p2 && o != p0, "streams must not share scratch");
  gpuWait(s, 60, "scratch memset");
  G_CUDA(cudaStreamDestroy(s2));
  gpuLog("ok: scratch");

  /* Agreement on one rank. */
  int mine = 42, all = 0;
  G_RELAY(comm, tp->agree(comm, &mine, &all, sizeof mine));
  G_CHECK(all == 42, "agree: %d", all);
  G_RELAY(comm, tp->barrier(comm));
  ncclComm_t nc = NULL;
  G_RELAY(comm, relayCommGetNcclComm(comm, &nc));
  G_CHECK(nc != NULL, "relayCommGetNcclComm");
  gpuLog("ok: agree, barrier, relayCommGetNcclComm");

  G_CUDA(cudaFree(a));
  G_CUDA(cudaFree(b));
  G_CUDA(cudaFree(c));
  G_CUDA(cudaFree(d));
  free(h);
}

/* Capture a step program on a fresh comm (nothing cached: scratch and the
 * side lane are made during the capture), then replay with new inputs. */
static void testCapture(const char* job) {
  relayComm_t comm = NULL;
  G_RELAY(NULL, relayCommInitNcclShm(&comm, 1, 0, job, 0, NULL));
  const relayTransportOps* tp = comm->tp;
  size_t bytes = (size_t)N * sizeof(float);
  float *in, *out;
  G_CUDA(cudaMalloc((void**)&in, bytes));
  G_CUDA(cudaMalloc((void**)&out, bytes));
  float* h = malloc(bytes);
  G_CHECK(h != NULL, "oom");
  cudaStream_t s;
  G_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  G_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* scr = NULL;
  relayResult_t r = tp->scratch(comm, 0, bytes, &scr, s);
  if (r == relaySuccess) {
    relayXferDesc sd = {0, in, bytes}, rd = {0, scr, bytes};
    r = tp->group(comm, &sd, 1, &rd, 1, P2P_OP_SENDRECV, s);
  }
  if (r == relaySuccess) {
    const void* srcs[2] = {scr, in};
    r = tp->reduce(comm, out, srcs, 2, N, relayFloat32, relaySum, 0, 1, s);
  }
  if (r == relaySuccess) r = tp->join(comm, s);
  cudaError_t ee = cudaStreamEndCapture(s, &graph);
  G_CHECK(r == relaySuccess, "ops under capture: %s: %s", relayGetErrorString(r), relayGetLastError(comm));
  G_CHECK(ee == cudaSuccess, "cudaStreamEndCapture: %s (a side lane not joined?)", cudaGetErrorString(ee));
  G_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; rep++) {
    float base = 3.0f * (float)rep + 1.0f;
    fillF(h, N, base);
    G_CUDA(cudaMemcpyAsync(in, h, bytes, cudaMemcpyHostToDevice, s));
    G_CUDA(cudaGraphLaunch(exec, s));
    G_CUDA(cudaMemcpyAsync(h, out, bytes, cudaMemcpyDeviceToHost, s));
    gpuWait(s, 60, "graph replay");
    sumArg sa = {base, base, 0};
    expectF(h, N, sum2, &sa, "graph replay");
  }
  G_CUDA(cudaGraphExecDestroy(exec));
  G_CUDA(cudaGraphDestroy(graph));
  G_RELAY(comm, relayCommDestroy(comm));
  G_CUDA(cudaStreamDestroy(s));
  G_CUDA(cudaFree(in));
  G_CUDA(cudaFree(out));
  free(h);
  gpuLog("ok: capture with a cold cache, 5 replays with new inputs");
}

static int runTransport(void) {
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink SHARP / multicast on shared machines */
  gpuLogOpen("gputest_transport");
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    gpuLog("SKIP: no GPU");
    return GPU_SKIP;
  }
  char job[128];
  relayLaunchJobName("gt", job, sizeof job);
  double t0 = gpuNow();
  relayComm_t comm = NULL;
  G_RELAY(NULL, relayCommInitNcclShm(&comm, 1, 0, job, 0, NULL));
  cudaStream_t s;
  G_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  testOps(comm, s);
  G_RELAY(comm, relayCommDestroy(comm));
  G_CUDA(cudaStreamDestroy(s));
  char job2[160];
  snprintf(job2, sizeof job2, "%s-cap", job);
  testCapture(job2);
  gpuLog("PASS: transport ops in %.1f s", gpuNow() - t0);
  return 0;
}

/* Two ranks on GPU 0. Without a NCCL_HOSTID of their own NCCL 2.28 would refuse them ("Duplicate GPU"), so
 * relaycc's init must fail first, on both ranks, naming both and the way out; with their own host ids
 * (what rank_device.c gives) the same comm must come up and move data. */
static int sharedRank(int rank, int nranks, void* arg) {
  const char* job = arg;
  g_logRank = rank;
  G_CUDA(cudaSetDevice(0));
  char name[200];
  snprintf(name, sizeof name, "%s-refused", job);
  unsetenv("NCCL_HOSTID");
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitNcclShm(&comm, nranks, rank, name, 0, NULL);
  const char* err = relayGetLastError(NULL);
  G_CHECK(r == relayInvalidArgument && comm == NULL, "two ranks on one GPU, no NCCL_HOSTID: init -> %s: %s",
          relayGetErrorString(r), err);
  G_CHECK(strstr(err, "ranks 0 and 1 both use GPU") && strstr(err, "NCCL_HOSTID"),
          "the error must name both ranks and NCCL_HOSTID: %s", err);
  gpuLog("ok: refused without host ids: %s", err);
  relayRankDevice(rank, nranks, 1, job); /* sets this rank's own NCCL_HOSTID */
  snprintf(name, sizeof name, "%s-accepted", job);
  G_RELAY(NULL, relayCommInitNcclShm(&comm, nranks, rank, name, 0, NULL));
  float* d;
  G_CUDA(cudaMalloc((void**)&d, 2 * sizeof(float)));
  float h[2] = {(float)(rank + 1), -1.0f};
  G_CUDA(cudaMemcpy(d, h, sizeof(float), cudaMemcpyHostToDevice));
  int ranks[2] = {0, 1};
  relayLayout_t L = {1, 2, ranks};
  size_t counts[1] = {1};
  cudaStream_t s;
  G_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  G_RELAY(comm, relayAllReduce(d, d + 1, counts, relayFloat32, relaySum, &L, comm, s));
  gpuWait(s, 60, "all-reduce of two ranks on one GPU");
  G_CUDA(cudaMemcpy(h, d, 2 * sizeof(float), cudaMemcpyDeviceToHost));
  G_CHECK(h[1] == 3.0f, "all-reduce of two ranks on one GPU: %g, want 3", (double)h[1]);
  G_RELAY(comm, relayCommDestroy(comm));
  G_CUDA(cudaStreamDestroy(s));
  G_CUDA(cudaFree(d));
  gpuLog("ok: accepted with a NCCL_HOSTID per rank, all-reduce right");
  return 0;
}

static int runShared(void) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  gpuLogOpen("gputest_transport-shared");
  if (gpuProbeCount() < 1) {
    gpuLog("SKIP: no GPU");
    return GPU_SKIP;
  }
  char job[128];
  relayLaunchJobName("gts", job, sizeof job);
  relayLaunchResult res;
  if (relayLaunchRanks(2, sharedRank, job, 240000, 5000, &res, NULL) != 0) {
    gpuLog("FAIL: %s", res.message);
    return 1;
  }
  return 0;
}

/* The transport's ops, lanes, scratch and a captured graph (one GPU); two ranks sharing GPU 0. */
static const tCase kCases[] = {
    {.name = "all",
     .fn = runTransport,
     .ctest = "gpu_transport",
     .labels = "gpu",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "shared",
     .fn = runShared,
     .ctest = "gpu_transport_shared_gpu",
     .labels = "gpu",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
