/* CPU reduce family. Processes blocks of kBlock elements: the accumulator
 * block stays in L1 while each source streams through once, which keeps the
 * k-input reduce memory-bound (one read per source, one write) instead of
 * re-reading dst k times. */
#include "reduce_host.h"

#include "float16.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { kBlock = 1024 };

/* Compiled for AVX-512, AVX2 and the baseline, the one the CPU has chosen at load time (an ifunc): the
 * loops vectorize across elements only, each element's sources still added in order, and IEEE adds,
 * multiplies, compares and divides round alike at every width, so the result is bit-identical whichever
 * clone runs (no FMA: nothing here multiplies and adds in one step), a NaN's payload aside (which input
 * NaN an add returns follows an operand order compilers may swap; test_plan reduce_exact checks the rest
 * against the scalar conversions). */
/* GCC 11 on (its x86-64-v3/v4 names; clang's -O2 vectorizes on its own), not under ASan or TSan (an ifunc
 * resolves before the sanitizer's runtime is up: under TSan every program linking the library died at
 * load, `test_shim --list` in `make tsan`). The clones and the cost model CMake gives this file
 * (-fvect-cost-model=dynamic: -O2's "very cheap" one left these loops scalar) took the 2-source reduce of
 * 512 KiB from 3.2 to 31 GB/s in bf16 and from 30 to 69 GB/s in float (2-core EPYC, AVX-512). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define REDUCE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#ifndef REDUCE_CLONES
#define REDUCE_CLONES
#endif

/* The conversions live in float16.h, shared with the GPU kernels. */
float relayHalfToFloat(unsigned short h) { return relayF16HalfToFloat(h); }
unsigned short relayFloatToHalf(float f) { return relayF16FloatToHalf(f); }
float relayBf16ToFloat(unsigned short h) { return relayF16Bf16ToFloat(h); }
unsigned short relayFloatToBf16(float f) { return relayF16FloatToBf16(f); }

/* Integer ops run in the unsigned twin so sums and products wrap instead of
 * overflowing (UB in C); max/min/avg compare and divide as the signed type. */
#define REDUCE_INT(T, U)                                                                        \
  REDUCE_CLONES static void reduce_##T(T* dst, const void* const* srcs, int nsrc, size_t count, \
                                       relayRedOp_t op, int divisor) {                          \
    U acc[kBlock];                                                                              \
    for (size_t base = 0; base < count; base += kBlock) {                                       \
      size_t n = count - base < kBlock ? count - base : kBlock;                                 \
      const T* s0 = (const T*)srcs[0] + base;                                                   \
      for (size_t i = 0; i < n; i++) acc[i] = (U)s0[i];                                         \
      for (int k = 1; k < nsrc; k++) {                                                          \
        const T* s = (const T*)srcs[k] + base;                                                  \
        switch (op) {                                                                           \
          case relaySum:                                                                        \
          case relayAvg:                                                                        \
            for (size_t i = 0; i < n; i++) acc[i] = (U)(acc[i] + (U)s[i]);                      \
            break;                                                                              \
          case relayProd:                                                                       \
            for (size_t i = 0; i < n; i++) acc[i] = (U)(acc[i] * (U)s[i]);                      \
            break;                                                                              \
          case relayMax:                                                                        \
            for (size_t i = 0; i < n; i++) acc[i] = ((T)acc[i] < s[i]) ? (U)s[i] : acc[i];      \
            break;                                                                              \
          default:                                                                              \
            for (size_t i = 0; i < n; i++) acc[i] = ((T)acc[i] > s[i]) ? (U)s[i] : acc[i];      \
            break;                                                                              \
        }                                                                                       \
      }                                                                                         \
      T* d = dst + base;                                                                        \
      if (divisor > 1)                                                                          \
        for (size_t i = 0; i < n; i++) d[i] = (T)((T)acc[i] / (T)divisor);                      \
      else                                                                                      \
        for (size_t i = 0; i < n; i++) d[i] = (T)acc[i];                                        \
    }                                                                                           \
  }

REDUCE_INT(int8_t, uint8_t)
REDUCE_INT(uint8_t, uint8_t)
REDUCE_INT(int32_t, uint32_t)
REDUCE_INT(uint32_t, uint32_t)
REDUCE_INT(int64_t, uint64_t)
REDUCE_INT(uint64_t, uint64_t)

/* Floats: T is the storage type, ACC the accumulator, LOAD/STORE convert. */
#define REDUCE_FLOAT(NAME, T, ACC, LOAD, STORE)                                                    \
  REDUCE_CLONES static void reduce_##NAME(T* dst, const void* const* srcs, int nsrc, size_t count, \
                                          relayRedOp_t op, int divisor) {                          \
    ACC acc[kBlock];                                                                               \
    for (size_t base = 0; base < count; base += kBlock) {                                          \
      size_t n = count - base < kBlock ? count - base : kBlock;                                    \
      const T* s0 = (const T*)srcs[0] + base;                                                      \
      for (size_t i = 0; i < n; i++) acc[i] = LOAD(s0[i]);                                         \
      for (int k = 1; k < nsrc; k++) {                                                             \
        const T* s = (const T*)srcs[k] + base;                                                     \
        switch (op) {                                                                              \
          case relaySum:                                                                           \
          case relayAvg:                                                                           \
            for (size_t i = 0; i < n; i++) acc[i] = acc[i] + LOAD(s[i]);                           \
            break;                                                                                 \
          case relayProd:                                                                          \
            for (size_t i = 0; i < n; i++) acc[i] = acc[i] * LOAD(s[i]);                           \
            break;                                                                                 \
          case relayMax:                                                                           \
            for (size_t i = 0; i < n; i++) {                                                       \
              ACC v = LOAD(s[i]);                                                                  \
              acc[i] = (acc[i] < v) ? v : acc[i];                                                  \
            }                                                                                      \
            break;                                                                                 \
          default:                                                                                 \
            for (size_t i = 0; i < n; i++) {                                                       \
              ACC v = LOAD(s[i]);                                                                  \
              acc[i] = (acc[i] > v) ? v : acc[i];                                                  \
            }                                                                                      \
            break;                                                                                 \
        }                                                                                          \
      }                                                                                            \
      T* d = dst + base;                                                                           \
      if (divisor > 1)                                                                             \
        for (size_t i = 0; i < n; i++) d[i] = STORE(acc[i] / (ACC)divisor);                        \
      else                                                                                         \
        for (size_t i = 0; i < n; i++) d[i] = STORE(acc[i]);                                       \
    }                                                                                              \
  }

/* bf16 <-> float for the reduce loops: relayBf16ToFloat / relayFloatToBf16's arithmetic, bit for bit
 * (round to nearest even, a NaN kept quiet), written without a branch or a call so the loops vectorize:
 * the 2-source bf16 reduce ran at 3.2 GB/s through those, scalar (2-core EPYC, 512 KiB). */
static inline float bf16Load(unsigned short h) {
  union {
    uint32_t u;
    float f;
  } v = {(uint32_t)h << 16};
  return v.f;
}
static inline unsigned short bf16Store(float f) {
  union {
    float f;
    uint32_t u;
  } v = {f};
  uint32_t x = v.u, rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet = (x >> 16) | 0x40u;
  return (unsigned short)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* fp16 <-> float for the reduce loops: relayHalfToFloat / relayFloatToHalf's results bit for bit (a NaN's
 * payload aside: both give a quiet NaN), without a branch or a loop so the loops vectorize. Through those
 * (a renormalizing loop, rintf) the 2-source fp16 reduce ran scalar at 2.2 GB/s in cache (64 KiB a source),
 * bf16 at 29; through these 11.2 (2-core EPYC, AVX-512 clone, test_plan reduce_speed, median of 3). Load:
 * normals rebias the exponent, a subnormal is its count times 2^-24 made by a subtraction of normal floats
 * (exact, and never through a float subnormal, so a process's denormals-are-zero mode cannot change it; an
 * int-to-float conversion kept GCC scalar), inf and NaN keep an all-ones exponent. Store: below 2^-14 adding
 * 0.5 leaves the half's subnormal count, rounded to nearest even by the add itself, in the low bits; above,
 * the reference's rebias and round. */
static inline float f16Load(unsigned short h) {
  union {
    uint32_t u;
    float f;
  } v = {((uint32_t)(127 - 14) << 23) | ((uint32_t)(h & 0x3ffu) << 13)}, lead = {(uint32_t)(127 - 14) << 23};
  v.f -= lead.f; /* (2^-14 + count x 2^-24) - 2^-14: exact (Sterbenz) */
  uint32_t em = h & 0x7fffu, normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
  uint32_t bits = em >= 0x400u ? normal : v.u;
  bits = em >= 0x7c00u ? 0x7f800000u | ((em & 0x3ffu) << 13) : bits;
  v.u = bits | ((uint32_t)(h & 0x8000u) << 16);
  return v.f;
}
static inline unsigned short f16Store(float f) {
  union {
    float f;
    uint32_t u;
  } v = {f}, half = {0.5f};
  uint32_t x = v.u, sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  v.u = a;
  v.f += half.f;
  uint32_t sub = v.u - half.u;
  uint32_t mant = a + 0xc8000000u;
  mant += ((mant >> 13) & 1u) + 0xfffu;
  uint32_t r = a < 0x38800000u ? sub : mant >> 13;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? 0x7e00u : r;
  return (unsigned short)(sign | (r & 0xffffu));
}

#define ID(x) (x)
REDUCE_FLOAT(f32, float, float, ID, ID)
REDUCE_FLOAT(f64, double, double, ID, ID)
REDUCE_FLOAT(f16, unsigned short, float, f16Load, f16Store)
REDUCE_FLOAT(bf16, unsigned short, float, bf16Load, bf16Store)

void relayHostReduce(void* dst, const void* const* srcs, int nsrc, size_t count, relayDataType_t dt,
                     relayRedOp_t op, int divisor) {
  if (count == 0 || nsrc <= 0) return;
  switch (dt) {
    case relayInt8: reduce_int8_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayUint8: reduce_uint8_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayInt32: reduce_int32_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayUint32: reduce_uint32_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayInt64: reduce_int64_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayUint64: reduce_uint64_t(dst, srcs, nsrc, count, op, divisor); break;
    case relayFloat16: reduce_f16(dst, srcs, nsrc, count, op, divisor); break;
    case relayBfloat16: reduce_bf16(dst, srcs, nsrc, count, op, divisor); break;
    case relayFloat32: reduce_f32(dst, srcs, nsrc, count, op, divisor); break;
    case relayFloat64: reduce_f64(dst, srcs, nsrc, count, op, divisor); break;
    default: break;
  }
}
