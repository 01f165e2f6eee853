/* Helpers shared by the GPU tests (header-only: every tests/gpu/gputest_*.c is
 * its own program). Logs go to stdout and, when $OUT is set (the device
 * machine sets it), to $OUT/<name>.log; every wait on the GPU is a poll with
 * a deadline, so a regression reports instead of hanging the suite. */
#ifndef RELAY_GPU_UTIL_H_
#define RELAY_GPU_UTIL_H_

#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_port.h"
#include "transport/nccl/nccl_api.h" /* nccl.h; in the HIP build NCCL's declarations for RCCL */

#include "harness.h" /* the case table: each program's main is t_main */
#include "launch.h"
#include "rank_device.h"
#include "relaycc.h"
#include "tool_env.h"

/* ctest's SKIP_RETURN_CODE for these programs (their case tables). */
#define GPU_SKIP 77

static int g_logFd = -1;
static int g_logRank = -1;

static inline void gpuLogOpen(const char* name) {
  const char* out = getenv("OUT");
  if (!out || !*out) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.log", out, name);
  /* O_APPEND: every rank of a forked launch writes whole lines to one file. */
  g_logFd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
}

static inline void gpuLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void gpuLog(const char* fmt, ...) {
  char line[2048];
  int n = 0;
  if (g_logRank >= 0) n = snprintf(line, sizeof line, "[rank %d] ", g_logRank);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDOUT_FILENO, line, (size_t)n);
  if (g_logFd >= 0) w = write(g_logFd, line, (size_t)n);
  (void)w;
}

/* Fail this process (a rank or the test) with a message in both places. */
#define G_CHECK(cond, ...)                                             \
  do {                                                                 \
    if (!(cond)) {                                                     \
      char g_msg_[1024];                                               \
      snprintf(g_msg_, sizeof g_msg_, __VA_ARGS__);                    \
      gpuLog("FAIL %s:%d: %s: %s", __FILE__, __LINE__, #cond, g_msg_); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

#define G_CUDA(call)                                                                                        \
  do {                                                                                                      \
    cudaError_t g_e_ = (call);                                                                              \
    G_CHECK(g_e_ == cudaSuccess, "%s -> %s (%s)", #call, cudaGetErrorName(g_e_), cudaGetErrorString(g_e_)); \
  } while (0)

#define G_RELAY(comm, call)                                                         \
  do {                                                                              \
    relayResult_t g_r_ = (call);                                                    \
    G_CHECK(g_r_ == relaySuccess, "%s -> %s: %s", #call, relayGetErrorString(g_r_), \
            relayGetLastError(comm));                                               \
  } while (0)

static inline double gpuNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for a stream with a deadline; fails the process naming what hung. */
static inline void gpuWait(cudaStream_t s, double seconds, const char* what) {
  double deadline = gpuNow() + seconds;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    G_CHECK(e == cudaErrorNotReady, "waiting for %s: %s", what, cudaGetErrorString(e));
    G_CHECK(gpuNow() < deadline, "TIMEOUT: %s did not finish within %.0f s", what, seconds);
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

/* The GPU count, asked in a forked child: the parent must not initialize
 * CUDA before it forks the ranks (a CUDA context does not survive fork). */
static inline int gpuProbeRank(int rank, int nranks, void* arg) {
  (void)rank;
  (void)nranks;
  (void)arg;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n > 100 ? 100 : n;
}

static inline int gpuProbeCount(void) {
  int codes[1] = {0};
  relayLaunchResult res;
  relayLaunchRanks(1, gpuProbeRank, NULL, 60000, 1000, &res, codes);
  return codes[0] > 0 ? codes[0] : 0;
}

/* The GPU count the launcher saw (gpuTestRanks, in the parent before it forks): the ranks it forks inherit
 * it and place themselves with gpuRankStart. */
static int g_gpuCount = 0;

/* How many ranks a GPU program runs: RELAYCC_GPUTEST_RANKS when set (the harness's N ranks on M GPUs, rank r
 * on GPU r % M: `make gputest RANKS=8`, docs/gpu-harness.md), else one per GPU, at most maxRanks. Returns 0
 * (the caller skips) when no GPU is visible or fewer than minRanks ranks result; logs the mode. */
static inline int gpuTestRanks(const char* prog, int minRanks, int maxRanks) {
  g_gpuCount = gpuProbeCount();
  long want = relayEnvLong("RELAYCC_GPUTEST_RANKS", 0);
  int n = want > 0 ? (int)want : g_gpuCount;
  if (n > maxRanks) n = maxRanks;
  if (g_gpuCount < 1 || n < minRanks) {
    gpuLog(
        "SKIP: %s: %d GPU(s) visible and %d ranks; needs %d ranks (RELAYCC_GPUTEST_RANKS=%d runs them on the "
        "GPUs there are)",
        prog, g_gpuCount, n, minRanks, minRanks);
    return 0;
  }
  if (relayRanksShareGpus(n, g_gpuCount))
    gpuLog("%s: %d ranks on %d GPU(s), rank r on GPU r %% %d (%s; MPS %s): every timing here is %s", prog, n,
           g_gpuCount, g_gpuCount,
           getenv("NCCL_MULTI_RANK_GPU_ENABLE") ? "NCCL multi-rank mode" : "NCCL_HOSTID per rank",
           getenv("CUDA_MPS_PIPE_DIRECTORY") ? "on" : "off", RELAY_SHARED_GPU_NOTE);
  else gpuLog("%s: %d ranks, one per GPU", prog, n);
  return n;
}

/* A forked rank's first step: its device (rank % GPUs, set current) and, when ranks share GPUs, the NCCL
 * settings of rank_device.h. Before any NCCL call of the process. */
static inline int gpuRankStart(int rank, int nranks, const char* job) {
  int dev = relayRankDevice(rank, nranks, g_gpuCount > 0 ? g_gpuCount : 1, job);
  G_CUDA(cudaSetDevice(dev));
  return dev;
}

/* Forks the n ranks of a GPU program (fn on each, arg shared) under the launcher's deadline and logs the
 * verdict: 0 when every rank returned 0, else 1 with the first failure's message. */
static inline int gpuLaunch(int n, relayRankFn fn, void* arg, int deadlineMs) {
  double t0 = gpuNow();
  relayLaunchResult res;
  if (relayLaunchRanks(n, fn, arg, deadlineMs, 5000, &res, NULL) != 0) {
    gpuLog("FAIL: %s", res.message);
    return 1;
  }
  gpuLog("PASS: %d ranks in %.1f s", n, gpuNow() - t0);
  return 0;
}

/* splitmix64: patterns and random data. */
static inline uint64_t gpuMix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

#endif
