/*
 * The GPU reduce family: one kernel template, instantiated per (dtype, op),
 * behind one extern "C" launcher.
 *
 * Bits: every element is computed exactly as relayHostReduce computes it
 * (src/reduce_host.c), so the reference executor, the shm transport and the
 * GPU agree to the bit and a test can compare with memcmp:
 *  - the same fold: acc = src[0]; acc = op(acc, src[s]) for s = 1..k-1;
 *  - integers fold in their unsigned twin (sums and products wrap), compare
 *    and divide as the signed type, divisor cast to the element type;
 *  - max is (acc < v) ? v : acc and min (acc > v) ? v : acc, so ties and
 *    NaNs keep the earlier input as on the host;
 *  - fp16/bf16 widen to fp32, fold in fp32, divide in fp32, and round once
 *    with the host's own bit-level conversions (ported below, not the
 *    hardware cvt, which agrees on every finite value but canonicalizes NaN
 *    payloads);
 *  - fp32 divides with IEEE division (nvcc's default -prec-div=true) and no
 *    FMA can form (no fold multiplies and adds).
 *
 * Access: when dst and all sources are 16-byte aligned each thread moves
 * whole 16-byte vectors and the ragged tail (< 16 bytes) goes element-wise;
 * otherwise everything goes element-wise. Each element is read and written
 * by one thread, after it has read all of that element's inputs, which is
 * what lets dst alias a source.
 */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "plan/plan.h"
#include "transport/nccl/nccl_reduce.h"

namespace {

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

/* Everything below the kernel entry is __host__ __device__ so that a host
 * build can run the same per-thread code (one "thread" after another) and
 * compare it with relayHostReduce without a GPU. */
#define RD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#define UNROLL4 _Pragma("unroll 4")
#else /* the host pass of __host__ __device__ code: gcc knows no such pragma */
#define UNROLL
#define UNROLL4
#endif

RD float asFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
RD uint32_t asBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- 16-bit float conversions: the host's algorithms, bit for bit ---- */

RD float halfToFloat(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        exp--;
      }
      man &= 0x3ffu;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  return asFloat(bits);
}

RD unsigned short floatToHalf(float f) {
  uint32_t x = asBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (unsigned short)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (absx < 0x38800000u) { /* subnormal half or zero: nearest even of value * 2^24 */
    float scaled = asFloat(absx) * 16777216.0f; /* exact: a power of two */
    float r = rintf(scaled);                           /* round to nearest even */
    return (unsigned short)(sign | (uint32_t)r);
  }
  uint32_t mant = absx + 0xc8000000u; /* rebias the exponent: -(127-15) << 23 */
  uint32_t round = ((mant >> 13) & 1u) + 0xfffu;
  mant += round;
  return (unsigned short)(sign | (mant >> 13));
}

RD float bf16ToFloat(unsigned short h) { return asFloat((uint32_t)h << 16); }

RD unsigned short floatToBf16(float f) {
  uint32_t x = asBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}

/* ---- element traits: storage S, accumulator Acc, the fold's arithmetic ---- */

template <typename S_, typename U>
struct IntT {
  typedef S_ S;
  typedef U Acc;
  static RD Acc load(S x) { return (Acc)x; }
  static RD Acc add(Acc a, Acc b) { return (Acc)(a + b); }
  static RD Acc mul(Acc a, Acc b) { return (Acc)(a * b); }
  static RD bool lt(Acc a, Acc b) { return (S)a < (S)b; }
  static RD S store(Acc a, int divisor) {
    return divisor > 1 ? (S)((S)a / (S)divisor) : (S)a;
  }
};

template <typename F>
struct FloatT {
  typedef F S;
  typedef F Acc;
  static RD Acc load(S x) { return x; }
  static RD Acc add(Acc a, Acc b) { return a + b; }
  static RD Acc mul(Acc a, Acc b) { return a * b; }
  static RD bool lt(Acc a, Acc b) { return a < b; }
  static RD S store(Acc a, int divisor) { return divisor > 1 ? a / (Acc)divisor : a; }
};

struct HalfT {
  typedef unsigned short S;
  typedef float Acc;
  static RD Acc load(S x) { return halfToFloat(x); }
  static RD Acc add(Acc a, Acc b) { return a + b; }
  static RD Acc mul(Acc a, Acc b) { return a * b; }
  static RD bool lt(Acc a, Acc b) { return a < b; }
  static RD S store(Acc a, int divisor) {
    return floatToHalf(divisor > 1 ? a / (float)divisor : a);
  }
};

struct Bf16T {
  typedef unsigned short S;
  typedef float Acc;
  static RD Acc load(S x) { return bf16ToFloat(x); }
  static RD Acc add(Acc a, Acc b) { return a + b; }
  static RD Acc mul(Acc a, Acc b) { return a * b; }
  static RD bool lt(Acc a, Acc b) { return a < b; }
  static RD S store(Acc a, int divisor) {
    return floatToBf16(divisor > 1 ? a / (float)divisor : a);
  }
};

/* Fold ops; avg folds as sum (the divisor does the rest). */
enum { FOLD_SUM = 0, FOLD_PROD = 1, FOLD_MAX = 2, FOLD_MIN = 3 };

template <typename Tr, int OP>
RD typename Tr::Acc fold(typename Tr::Acc acc, typename Tr::Acc v) {
  if (OP == FOLD_SUM) return Tr::add(acc, v);
  if (OP == FOLD_PROD) return Tr::mul(acc, v);
  if (OP == FOLD_MAX) return Tr::lt(acc, v) ? v : acc;
  return Tr::lt(v, acc) ? v : acc; /* min: (acc > v) ? v : acc */
}

/* The work of one thread: element ranges depend only on (tid, stride). */
template <typename Tr, int OP>
RD void reduceSlice(const ReduceArgs& a, size_t tid, size_t stride) {
  typedef typename Tr::S S;
  typedef typename Tr::Acc Acc;
  enum { V = 16 / sizeof(S) };
  union Vec {
    uint4 u;
    S e[V];
  };
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

template <typename Tr>
Impl pickOp(relayRedOp_t op) {
  switch (op) {
    case relaySum:
    case relayAvg: return implOf<Tr, FOLD_SUM>();
    case relayProd: return implOf<Tr, FOLD_PROD>();
    case relayMax: return implOf<Tr, FOLD_MAX>();
    case relayMin: return implOf<Tr, FOLD_MIN>();
    default: {
      Impl none = {NULL, NULL, 0};
      return none;
    }
  }
}

Impl pickImpl(relayDataType_t dt, relayRedOp_t op) {
  switch (dt) {
    case relayInt8: return pickOp<IntT<int8_t, uint8_t> >(op);
    case relayUint8: return pickOp<IntT<uint8_t, uint8_t> >(op);
    case relayInt32: return pickOp<IntT<int32_t, uint32_t> >(op);
    case relayUint32: return pickOp<IntT<uint32_t, uint32_t> >(op);
    case relayInt64: return pickOp<IntT<int64_t, uint64_t> >(op);
    case relayUint64: return pickOp<IntT<uint64_t, uint64_t> >(op);
    case relayFloat16: return pickOp<HalfT>(op);
    case relayBfloat16: return pickOp<Bf16T>(op);
    case relayFloat32: return pickOp<FloatT<float> >(op);
    case relayFloat64: return pickOp<FloatT<double> >(op);
    default: {
      Impl none = {NULL, NULL, 0};
      return none;
    }
  }
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
