/*
 * The reduce rules of every GPU kernel that folds inputs (the reduce family
 * in nccl_reduce.cu, the one-shot push-reduce in oneshot.cu): element
 * conversions, per-dtype traits and the fold, all __host__ __device__ so the
 * host emulations (tests/gpu/emul_*.cu) run the very same code.
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
 *    with the host's own bit-level conversions (src/float16.h, not the
 *    hardware cvt, which agrees on every finite value but canonicalizes NaN
 *    payloads);
 *  - fp32 divides with IEEE division (nvcc's default -prec-div=true) and no
 *    FMA can form (no fold multiplies and adds).
 *
 * C++ only (CUDA and HIP translation units); everything lives in namespace relayrd.
 */
#ifndef RELAY_REDUCE_RULES_CUH_
#define RELAY_REDUCE_RULES_CUH_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gpu_port.h"

#include "float16.h"
#include "relaycc.h"

#define RD __host__ __device__ __forceinline__
#ifdef RELAY_GPU_DEVICE_PASS
#define UNROLL _Pragma("unroll")
#define UNROLL4 _Pragma("unroll 4")
#else /* the host pass of __host__ __device__ code: gcc knows no such pragma */
#define UNROLL
#define UNROLL4
#endif

namespace relayrd {

RD float asFloat(uint32_t u) { return relayF16BitsToFloat(u); }
RD uint32_t asBits(float f) { return relayF16FloatToBits(f); }

/* ---- 16-bit float conversions: the host's own lines (src/float16.h) ---- */

RD float halfToFloat(unsigned short h) { return relayF16HalfToFloat(h); }
RD unsigned short floatToHalf(float f) { return relayF16FloatToHalf(f); }
RD float bf16ToFloat(unsigned short h) { return relayF16Bf16ToFloat(h); }
RD unsigned short floatToBf16(float f) { return relayF16FloatToBf16(f); }

/* ---- element traits: storage S, accumulator Acc, the fold's arithmetic ---- */

template <typename S_, typename U>
struct IntT {
  typedef S_ S;
  typedef U Acc;
  static RD Acc load(S x) { return (Acc)x; }
  static RD Acc add(Acc a, Acc b) { return (Acc)(a + b); }
  static RD Acc mul(Acc a, Acc b) { return (Acc)(a * b); }
  static RD bool lt(Acc a, Acc b) { return (S)a < (S)b; }
  static RD S store(Acc a, int divisor) { return divisor > 1 ? (S)((S)a / (S)divisor) : (S)a; }
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

/* fp16 (BF 0) and bf16 (BF 1): 16-bit storage, fp32 accumulation. */
template <bool BF>
struct Float16T {
  typedef unsigned short S;
  typedef float Acc;
  static RD Acc load(S x) { return BF ? bf16ToFloat(x) : halfToFloat(x); }
  static RD Acc add(Acc a, Acc b) { return a + b; }
  static RD Acc mul(Acc a, Acc b) { return a * b; }
  static RD bool lt(Acc a, Acc b) { return a < b; }
  static RD S store(Acc a, int divisor) {
    const float f = divisor > 1 ? a / (float)divisor : a;
    return BF ? floatToBf16(f) : floatToHalf(f);
  }
};
typedef Float16T<false> HalfT;
typedef Float16T<true> Bf16T;

/* Fold ops; avg folds as sum (the divisor does the rest). */
enum { FOLD_SUM = 0, FOLD_PROD = 1, FOLD_MAX = 2, FOLD_MIN = 3 };

template <typename Tr, int OP>
RD typename Tr::Acc fold(typename Tr::Acc acc, typename Tr::Acc v) {
  if (OP == FOLD_SUM) return Tr::add(acc, v);
  if (OP == FOLD_PROD) return Tr::mul(acc, v);
  if (OP == FOLD_MAX) return Tr::lt(acc, v) ? v : acc;
  return Tr::lt(v, acc) ? v : acc; /* min: (acc > v) ? v : acc */
}

/* A 16-byte vector of storage elements. */
template <typename S>
union Vec16 {
  uint4 u;
  S e[16 / sizeof(S)];
};

/* Host-side dispatch of (dtype, op) to a template instance: returns
 * v.template apply<Tr, OP>(), or v.none() for a dtype or op relaycc does not
 * have. One table for every kernel family, so they cover the same cases. */
template <typename Tr, typename V>
typename V::Result visitOp(relayRedOp_t op, V& v) {
  switch (op) {
    case relaySum:
    case relayAvg: return v.template apply<Tr, FOLD_SUM>();
    case relayProd: return v.template apply<Tr, FOLD_PROD>();
    case relayMax: return v.template apply<Tr, FOLD_MAX>();
    case relayMin: return v.template apply<Tr, FOLD_MIN>();
    default: return v.none();
  }
}

template <typename V>
typename V::Result visit(relayDataType_t dt, relayRedOp_t op, V& v) {
  switch (dt) {
    case relayInt8: return visitOp<IntT<int8_t, uint8_t> >(op, v);
    case relayUint8: return visitOp<IntT<uint8_t, uint8_t> >(op, v);
    case relayInt32: return visitOp<IntT<int32_t, uint32_t> >(op, v);
    case relayUint32: return visitOp<IntT<uint32_t, uint32_t> >(op, v);
    case relayInt64: return visitOp<IntT<int64_t, uint64_t> >(op, v);
    case relayUint64: return visitOp<IntT<uint64_t, uint64_t> >(op, v);
    case relayFloat16: return visitOp<HalfT>(op, v);
    case relayBfloat16: return visitOp<Bf16T>(op, v);
    case relayFloat32: return visitOp<FloatT<float> >(op, v);
    case relayFloat64: return visitOp<FloatT<double> >(op, v);
    default: return v.none();
  }
}

}  // namespace relayrd

#endif
