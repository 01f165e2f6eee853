/*
 * The GPU reduce family: one kernel template, instantiated per (dtype, op),
 * behind one extern "C" launcher.
 *
 * Bits: every element is computed exactly as relayHostReduce computes it
 * (src/reduce_host.c): the conversions, traits and fold are the shared rules
 * of reduce_rules.cuh (the one-shot kernel folds with the same ones).
 *
 * Access: when dst and all sources are 16-byte aligned each thread moves
 * whole 16-byte vectors and the ragged tail (< 16 bytes) goes element-wise;
 * otherwise everything goes element-wise. Each element is read and written
 * by one thread, after it has read all of that element's inputs, which is
 * what lets dst alias a source.
 */
#include <stdint.h>
#include <string.h>

#include "gpu_port.h"

#include "plan/plan.h"
#include "transport/nccl/nccl_reduce.h"
#include "transport/nccl/reduce_rules.cuh"

namespace {

using namespace relayrd;

/* The k source pointers travel by value in the kernel's parameter space
 * (64 pointers = 512 bytes of the 4 KiB limit), so a launch needs no device
 * staging and captures into a graph with its arguments baked in. */
struct ReduceArgs {
  void* dst;
  const void* src[PLAN_MAX_SRCS];
  size_t count; /* elements */
  size_t nvec;  /* 16-byte vectors done vector-wise (0 when misaligned) */
  int nsrc;
  int divisor;
};

/* Everything below the kernel entry is __host__ __device__ (RD, from
 * reduce_rules.cuh) so that a host build can run the same per-thread code
 * (one "thread" after another) and compare it with relayHostReduce without a
 * GPU. */

/* The work of one thread: element ranges depend only on (tid, stride). */
template <typename Tr, int OP>
RD void reduceSlice(const ReduceArgs& a, size_t tid, size_t stride) {
  typedef typename Tr::S S;
  typedef typename Tr::Acc Acc;
  enum { V = 16 / sizeof(S) };
  typedef Vec16<S> Vec;
  for (size_t v = tid; v < a.nvec; v += stride) {
    Acc acc[V];
    Vec x;
    x.u = ((const uint4*)a.src[0])[v];
    UNROLL
    for (int j = 0; j < V; j++) acc[j] = Tr::load(x.e[j]);
    /* Unrolled by 4 so four sources' loads are in flight at once: the fold
     * order is fixed, the loads are not. */
    UNROLL4
    for (int s = 1; s < a.nsrc; s++) {
      Vec y;
      y.u = ((const uint4*)a.src[s])[v];
      UNROLL
      for (int j = 0; j < V; j++) acc[j] = fold<Tr, OP>(acc[j], Tr::load(y.e[j]));
    }
    Vec out;
    UNROLL
    for (int j = 0; j < V; j++) out.e[j] = Tr::store(acc[j], a.divisor);
    ((uint4*)a.dst)[v] = out.u;
  }
  for (size_t i = a.nvec * (size_t)V + tid; i < a.count; i += stride) {
    Acc acc = Tr::load(((const S*)a.src[0])[i]);
    for (int s = 1; s < a.nsrc; s++) acc = fold<Tr, OP>(acc, Tr::load(((const S*)a.src[s])[i]));
    ((S*)a.dst)[i] = Tr::store(acc, a.divisor);
  }
}

template <typename Tr, int OP>
__global__ void __launch_bounds__(RELAY_REDUCE_THREADS) reduceKernel(ReduceArgs a) {
  reduceSlice<Tr, OP>(a, (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}

/* Host runner: the threads of a launch one after another. Compiled only into
 * tests/gpu/emul_reduce.cu, which checks the device code's arithmetic and
 * indexing against relayHostReduce on a machine without a GPU. */
typedef void (*HostRun)(const ReduceArgs& a, size_t threads);
#ifdef RELAY_REDUCE_HOST_EMULATION
template <typename Tr, int OP>
void hostRun(const ReduceArgs& a, size_t threads) {
  for (size_t t = 0; t < threads; t++) reduceSlice<Tr, OP>(a, t, threads);
}
#define HOST_RUN(Tr, OP) hostRun<Tr, OP>
#else
#define HOST_RUN(Tr, OP) NULL
#endif

struct Impl {
  const void* kernel;
  HostRun host;
  size_t elemSize;
};

template <typename Tr, int OP>
Impl implOf() {
  Impl m = {(const void*)reduceKernel<Tr, OP>, HOST_RUN(Tr, OP), sizeof(typename Tr::S)};
  return m;
}

/* (dtype, op) -> kernel instance, through the shared dispatch table. */
struct PickImpl {
  typedef Impl Result;
  template <typename Tr, int OP>
  Impl apply() {
    return implOf<Tr, OP>();
  }
  Impl none() {
    Impl m = {NULL, NULL, 0};
    return m;
  }
};

Impl pickImpl(relayDataType_t dt, relayRedOp_t op) {
  PickImpl v;
  return visit(dt, op, v);
}

/* Arguments and grid of one launch; cudaErrorInvalidValue for a bad call. */
cudaError_t prepare(void* dst, const void* const* srcs, int nsrc, size_t count, relayDataType_t dt,
                    relayRedOp_t op, int divisor, int maxBlocks, Impl* impl, ReduceArgs* a, size_t* blocks) {
  *impl = pickImpl(dt, op);
  if (!impl->kernel || nsrc < 1 || nsrc > PLAN_MAX_SRCS || !dst || !srcs) return cudaErrorInvalidValue;
  a->dst = dst;
  uintptr_t misalign = (uintptr_t)dst;
  for (int s = 0; s < nsrc; s++) {
    if (!srcs[s]) return cudaErrorInvalidValue;
    a->src[s] = srcs[s];
    misalign |= (uintptr_t)srcs[s];
  }
  for (int s = nsrc; s < PLAN_MAX_SRCS; s++) a->src[s] = NULL;
  const size_t perVec = 16 / impl->elemSize;
  a->count = count;
  a->nvec = (misalign & 15u) ? 0 : count / perVec;
  a->nsrc = nsrc;
  a->divisor = divisor;
  size_t items = a->nvec + (count - a->nvec * perVec);
  size_t b = (items + RELAY_REDUCE_THREADS - 1) / RELAY_REDUCE_THREADS;
  if (maxBlocks < 1) maxBlocks = 1;
  if (b > (size_t)maxBlocks) b = (size_t)maxBlocks;
  if (b < 1) b = 1;
  *blocks = b;
  return cudaSuccess;
}

}  // namespace

extern "C" int relayCudaReduceMaxBlocks(int numSMs) {
  /* 4 blocks of 256 threads per SM: 1024 of the 2048 thread slots of an sm_90
   * SM. Enough loads in flight to stream HBM (k 16-byte loads per thread,
   * ~2 MB per round on 132 SMs), while a side-lane reduce that overlaps the
   * next NCCL group leaves room on every SM for NCCL's own blocks. */
  if (numSMs < 1) numSMs = 1;
  return numSMs * 4;
}

extern "C" cudaError_t relayCudaReduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                                       relayDataType_t dt, relayRedOp_t op, int divisor, int maxBlocks,
                                       cudaStream_t stream) {
  Impl impl;
  ReduceArgs a;
  size_t blocks = 0;
  cudaError_t e = prepare(dst, srcs, nsrc, count, dt, op, divisor, maxBlocks, &impl, &a, &blocks);
  if (e != cudaSuccess || count == 0) return e;
  void* args[] = {&a};
  /* cudaLaunchKernel returns this launch's error directly, without reading
   * (and clearing) the thread's sticky last error that belongs to the user. */
  return cudaLaunchKernel(impl.kernel, dim3((unsigned)blocks), dim3(RELAY_REDUCE_THREADS), args, 0, stream);
}
