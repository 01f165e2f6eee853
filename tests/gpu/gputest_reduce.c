/*
 * The GPU reduce family against the CPU one, bit for bit: every dtype x op x
 * k in {1, 2, 3, 8} x counts around the 16-byte vector width x aligned,
 * misaligned destination, misaligned source, and dst aliasing a source, with
 * and without a divisor. Guard bytes around the destination catch a write
 * past either end. One process, one GPU.
 *
 *   gputest_reduce [--small]     (--small: a subset for compute-sanitizer)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "gpu/gpu_util.h"
#include "gpu/reduce_inputs.h"
#include "reduce_host.h"
#include "transport/nccl/nccl_reduce.h"

enum { MAXK = 8, GUARD = 64 };

typedef enum {
  MODE_ALIGNED,
  MODE_DST_MISALIGNED,
  MODE_SRC_MISALIGNED,
  MODE_ALIAS_FIRST,
  MODE_ALIAS_LAST,
  NMODES
} mode_t_;
static const char* kModeNames[NMODES] = {"aligned", "dst+1", "src+1", "dst=src0", "dst=srcLast"};

typedef struct {
  char* dev;  /* one device pool: MAXK sources then the destination */
  char* host; /* host copies of the sources */
  char* want; /* host result */
  char* got;  /* device result copied back, guards included */
  size_t srcStride, poolBytes;
  cudaStream_t stream;
  int maxBlocks;
  long cases;
} ctx_t;

static void runOne(ctx_t* x, relayDataType_t dt, relayRedOp_t op, int k, size_t count, int mode,
                   int divisor) {
  size_t es = relayTypeSize(dt);
  size_t bytes = count * es;
  /* Sources at 256-aligned slices of the pool; +es makes one misaligned. */
  const void* dsrc[MAXK];
  const void* hsrc[MAXK];
  for (int s = 0; s < k; s++) {
    size_t off = (size_t)s * x->srcStride + GUARD;
    if (mode == MODE_SRC_MISALIGNED && s == k - 1) off += es;
    riFill(x->host + off, count, dt,
           (uint64_t)(s + 1) * 7919u + count * 31u + (uint64_t)dt * 131u + (uint64_t)op);
    dsrc[s] = x->dev + off;
    hsrc[s] = x->host + off;
  }
  size_t dstOff = (size_t)MAXK * x->srcStride + GUARD;
  if (mode == MODE_DST_MISALIGNED) dstOff += es;
  /* Host reference first (from pristine inputs). */
  relayHostReduce(x->want, hsrc, k, count, dt, op, divisor);
  /* Device: sources, then a poisoned destination region with guards. */
  G_CUDA(cudaMemsetAsync(x->dev, 0xCD, x->poolBytes, x->stream));
  for (int s = 0; s < k; s++)
    G_CUDA(cudaMemcpyAsync((void*)dsrc[s], hsrc[s], bytes, cudaMemcpyHostToDevice, x->stream));
  char* ddst = x->dev + dstOff;
  size_t regionOff = dstOff - GUARD; /* guards are checked around the destination */
  if (mode == MODE_ALIAS_FIRST || mode == MODE_ALIAS_LAST) {
    int a = mode == MODE_ALIAS_FIRST ? 0 : k - 1;
    ddst = (char*)dsrc[a];
    regionOff = (size_t)((const char*)dsrc[a] - x->dev) - GUARD;
  }
  cudaError_t e = relayCudaReduce(ddst, dsrc, k, count, dt, op, divisor, x->maxBlocks, x->stream);
  G_CHECK(e == cudaSuccess, "launch %s %s k=%d n=%zu %s: %s", relayTypeName(dt), relayOpName(op), k, count,
          kModeNames[mode], cudaGetErrorString(e));
  G_CUDA(cudaMemcpyAsync(x->got, x->dev + regionOff, bytes + 2 * GUARD, cudaMemcpyDeviceToHost, x->stream));
  gpuWait(x->stream, 60, "reduce");
  const unsigned char* got = (const unsigned char*)x->got + GUARD;
  if (memcmp(got, x->want, bytes) != 0) {
    size_t i = 0;
    while (i < count && memcmp(got + i * es, x->want + i * es, es) == 0) i++;
    unsigned long long g = 0, w = 0, in0 = 0;
    memcpy(&g, got + i * es, es);
    memcpy(&w, x->want + i * es, es);
    memcpy(&in0, (const char*)hsrc[0] + i * es, es);
    G_CHECK(0, "%s %s k=%d count=%zu %s divisor=%d: element %zu: gpu 0x%llx, host 0x%llx (src0 0x%llx)",
            relayTypeName(dt), relayOpName(op), k, count, kModeNames[mode], divisor, i, g, w, in0);
  }
  /* Aliased runs overwrite a source region whose guards hold 0xCD too. */
  for (int b = 0; b < GUARD; b++) {
    G_CHECK((unsigned char)x->got[b] == 0xCD, "%s %s k=%d count=%zu %s: wrote %d bytes before dst",
            relayTypeName(dt), relayOpName(op), k, count, kModeNames[mode], GUARD - b);
    G_CHECK((unsigned char)x->got[GUARD + bytes + (size_t)b] == 0xCD,
            "%s %s k=%d count=%zu %s: wrote past the end of dst (byte %d)", relayTypeName(dt),
            relayOpName(op), k, count, kModeNames[mode], b);
  }
  x->cases++;
}

/* arg: small (the sanitizer's sweep) or not. */
static int runReduce(void* arg) {
  int small = *(const int*)arg;
  gpuLogOpen(small ? "gputest_reduce-small" : "gputest_reduce");
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    gpuLog("SKIP: no GPU (cudaGetDeviceCount: %d)", ndev);
    return GPU_SKIP;
  }
  G_CUDA(cudaSetDevice(0));
  int sms = 0;
  G_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t counts[] = {0, 1, 7, 8, 15, 16, 17, 33, 1000, 4099, 100003, 1 << 20};
  int nCounts = small ? 6 : (int)(sizeof counts / sizeof counts[0]);
  if (small) {
    size_t sc[] = {1, 15, 16, 17, 1000, 4099};
    memcpy(counts, sc, sizeof sc);
  }
  size_t maxCount = 0;
  for (int i = 0; i < nCounts; i++)
    if (counts[i] > maxCount) maxCount = counts[i];
  ctx_t x;
  memset(&x, 0, sizeof x);
  x.srcStride = (maxCount * 8 + 2 * GUARD + 255) / 256 * 256;
  x.poolBytes = x.srcStride * (MAXK + 1);
  G_CUDA(cudaMalloc((void**)&x.dev, x.poolBytes));
  x.host = malloc(x.poolBytes);
  x.want = malloc(maxCount * 8 + 16);
  x.got = malloc(maxCount * 8 + 2 * GUARD + 16);
  G_CHECK(x.host && x.want && x.got, "out of host memory");
  G_CUDA(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking));
  double t0 = gpuNow();
  /* Two block caps: the transport's (grid-stride over many blocks) and 1
   * block (every thread strides over the whole array). */
  int caps[2] = {relayCudaReduceMaxBlocks(sms), 1};
  for (int ti = 0; ti < (int)(RI_NTYPES); ti++) {
    relayDataType_t dt = riTypes[ti];
    if (small && dt != relayFloat32 && dt != relayBfloat16 && dt != relayFloat16 && dt != relayInt32)
      continue;
    long before = x.cases;
    for (int oi = 0; oi < 5; oi++)
      for (int ki = 0; ki < 4; ki++)
        for (int ci = 0; ci < nCounts; ci++)
          for (int m = 0; m < NMODES; m++) {
            relayRedOp_t op = riOps[oi];
            int k = riKs[ki];
            /* avg divides by k as a plan does; sum also runs with a divisor
             * (the contract divides whenever divisor > 1). */
            int divisor = op == relayAvg ? (k > 1 ? k : 2) : (op == relaySum && (ci & 1) ? 3 : 0);
            x.maxBlocks = caps[(ci + m) % 2 == 0 || counts[ci] > 100000 ? 0 : 1];
            runOne(&x, dt, op, k, counts[ci], m, divisor);
          }
    gpuLog("ok: %-8s %ld cases", relayTypeName(dt), x.cases - before);
  }
  /* The launcher's argument checks. */
  const void* one[1] = {x.dev};
  G_CHECK(relayCudaReduce(x.dev, one, 0, 1, relayFloat32, relaySum, 0, 1, x.stream) == cudaErrorInvalidValue,
          "nsrc 0 must be rejected");
  G_CHECK(relayCudaReduce(x.dev, one, 1, 1, (relayDataType_t)99, relaySum, 0, 1, x.stream) ==
              cudaErrorInvalidValue,
          "a bad dtype must be rejected");
  G_CHECK(relayCudaReduce(x.dev, one, 1, 1, relayFloat32, (relayRedOp_t)99, 0, 1, x.stream) ==
              cudaErrorInvalidValue,
          "a bad op must be rejected");
  G_CHECK(relayCudaReduce(x.dev, one, 1, 0, relayFloat32, relaySum, 0, 1, x.stream) == cudaSuccess,
          "count 0 is a no-op");
  gpuWait(x.stream, 60, "final");
  G_CUDA(cudaStreamDestroy(x.stream));
  G_CUDA(cudaFree(x.dev));
  free(x.host);
  free(x.want);
  free(x.got);
  gpuLog("PASS: %ld reduce cases bit-identical to relayHostReduce in %.1f s", x.cases, gpuNow() - t0);
  return 0;
}

/* The reduce family bit for bit against relayHostReduce (one GPU); small under compute-sanitizer's
 * memcheck where the toolkit has it. */
static const tCase kCases[] = {
    {.name = "all",
     .run = runReduce,
     .arg = &(int){0},
     .ctest = "gpu_reduce",
     .labels = "gpu",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "small",
     .run = runReduce,
     .arg = &(int){1},
     .ctest = "gpu_sanitize_reduce",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1,
     .wrap = "@COMPUTE_SANITIZER@ --error-exitcode 1 --target-processes all"},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
