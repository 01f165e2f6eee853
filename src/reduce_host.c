/* CPU reduce family. Processes blocks of kBlock elements: the accumulator
 * block stays in L1 while each source streams through once, which keeps the
 * k-input reduce memory-bound (one read per source, one write) instead of
 * re-reading dst k times. fp16 on a CPU with F16C goes element-major instead,
 * its accumulators in registers (reduce_f16_f16c says why). */
#include "reduce_host.h"

#include "float16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* x86-64 under GCC or clang: the fp16 path through F16C below, chosen at run time. */
#if defined(__x86_64__) && defined(__GNUC__)
#define REDUCE_F16C 1
#include <cpuid.h>
#include <immintrin.h>
#endif

enum { kBlock = 1024 };
enum { kCpuF16c = 1, kCpuAvx2 = 2 }; /* cpuVec's bits: what the x86 paths below need */

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

/* fp16 <-> float for the reduce loops, the software path (the fallback: no F16C, off x86-64, or a test
 * forcing it; reduce_f16_f16c below is the usual one): relayHalfToFloat / relayFloatToHalf's results bit for
 * bit (a NaN's payload aside: both give a quiet NaN), without a branch or a loop so the loops vectorize.
 * Through those (a renormalizing loop, rintf) the 2-source fp16 reduce ran scalar at 2.2 GB/s in cache (64
 * KiB a source), bf16 at 29; through these 11.2 (2-core EPYC, AVX-512 clone, test_plan reduce_speed, median
 * of 3). Load: normals rebias the exponent, a subnormal is its count times 2^-24 made by a subtraction of
 * normal floats (exact, and never through a float subnormal, so a process's denormals-are-zero mode cannot
 * change it; an int-to-float conversion kept GCC scalar), inf and NaN keep an all-ones exponent. Store: below
 * 2^-14 the half's subnormal count is the 24-bit significand shifted right by 126 - exponent, rounded to
 * nearest even in integers (adding 0.5 in float did it before, but rounded as MXCSR said: 0x0001 for 1.5 x
 * 2^-24 toward zero, where F16C and the GPU give 0x0002; the shifts cost this path 11.9 -> 9.1 GB/s at 2
 * sources in cache, 12.8 -> 11.6 at 8; a truncating conversion and a compare of the fraction gave 5.5);
 * above, the reference's rebias and round. */
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
  } v = {f};
  uint32_t x = v.u, sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  e = e < 95u ? 95u : e > 112u ? 112u : e; /* the shift kept in 14..31, the reference's below 2^-14 */
  uint32_t sub = (m + (1u << (125u - e)) - 1u + ((m >> (126u - e)) & 1u)) >> (126u - e);
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

/* fp16 through the CPU's own conversions (F16C: VCVTPH2PS, VCVTPS2PH), 8 elements a step, when it has them
 * (relayHostPath16: a cached CPUID check, no ifunc). The software conversions above cost several selects an
 * element: fp16 ran at 12 GB/s in cache against bf16's 31. Through these, 2 sources of 64 KiB went from 11.9
 * to 81.6 GB/s and 8 sources from 12.8 to 78.5; from memory (8 MiB a source) 10.5 to 28.8 and 6.3 to 27.4
 * (test_plan reduce_speed, median of 3, 2-core Xeon with AVX-512, load 1.5: docs/perf/2026-12-05-cpu-fp16-
 * 2core.md). AVX-512's 16-wide forms were not tried: 8 wide is already past bf16 and memory-bound at 8 MiB.
 * The same order and float arithmetic as reduce_f16 above; the last count % 8 elements go through an
 * 8-element copy so nothing past dst's or a source's end is read or written. The instructions give
 * relayHalfToFloat / relayFloatToHalf's bits whatever MXCSR holds: the store's immediate rounds to nearest
 * even over MXCSR's mode, neither instruction flushes a half subnormal (DAZ and FTZ concern float ones: a
 * half subnormal loads as a normal float), and a float subnormal, which only a product can make, rounds to a
 * signed zero with DAZ or without (test_plan reduce_exact checks each under DAZ|FTZ, DAZ, toward zero and
 * upward). A NaN: quiet both ways, the payload kept here where the reference gives 0x7e00. */
#ifdef REDUCE_F16C
#define F16C_TARGET __attribute__((target("avx,f16c")))
F16C_TARGET static inline __m256 f16cLoad(const unsigned short* p, size_t m) {
  if (m >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
  unsigned short t[8] = {0};
  memcpy(t, p, m * sizeof *t);
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)t));
}
F16C_TARGET static inline void f16cStore(unsigned short* p, __m256 v, size_t m) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  if (m >= 8) {
    _mm_storeu_si128((__m128i*)p, h);
    return;
  }
  unsigned short t[8];
  _mm_storeu_si128((__m128i*)t, h);
  memcpy(p, t, m * sizeof *t);
}
/* acc < v ? v : acc is MAXPS(v, acc) (it returns its second operand when either is a NaN or both are
 * zeros), acc > v ? v : acc is MINPS(v, acc): the reduce_f16 loops' own selects. */
F16C_TARGET static inline __m256 f16cSum(__m256 acc, __m256 v) { return _mm256_add_ps(acc, v); }
F16C_TARGET static inline __m256 f16cProd(__m256 acc, __m256 v) { return _mm256_mul_ps(acc, v); }
F16C_TARGET static inline __m256 f16cMax(__m256 acc, __m256 v) { return _mm256_max_ps(v, acc); }
F16C_TARGET static inline __m256 f16cMin(__m256 acc, __m256 v) { return _mm256_min_ps(v, acc); }

/* Element-major where reduce_f16 goes block by block: 32 elements' accumulators stay in registers while every
 * source is folded in, in order (the same adds in the same order). Block by block, storing and reloading the
 * accumulator block per source, these conversions gave 20 GB/s at 2 sources and 14 at 8, in cache (load 3).
 */
#define F16C_FOLD(OP)                                                                                    \
  do {                                                                                                   \
    size_t i = 0;                                                                                        \
    for (; i + 32 <= count; i += 32) {                                                                   \
      const unsigned short* p = (const unsigned short*)srcs[0] + i;                                      \
      __m256 a0 = f16cLoad(p, 8), a1 = f16cLoad(p + 8, 8), a2 = f16cLoad(p + 16, 8),                     \
             a3 = f16cLoad(p + 24, 8);                                                                   \
      for (int k = 1; k < nsrc; k++) {                                                                   \
        p = (const unsigned short*)srcs[k] + i;                                                          \
        a0 = OP(a0, f16cLoad(p, 8));                                                                     \
        a1 = OP(a1, f16cLoad(p + 8, 8));                                                                 \
        a2 = OP(a2, f16cLoad(p + 16, 8));                                                                \
        a3 = OP(a3, f16cLoad(p + 24, 8));                                                                \
      }                                                                                                  \
      if (divisor > 1)                                                                                   \
        a0 = _mm256_div_ps(a0, dv), a1 = _mm256_div_ps(a1, dv), a2 = _mm256_div_ps(a2, dv),              \
        a3 = _mm256_div_ps(a3, dv);                                                                      \
      f16cStore(dst + i, a0, 8);                                                                         \
      f16cStore(dst + i + 8, a1, 8);                                                                     \
      f16cStore(dst + i + 16, a2, 8);                                                                    \
      f16cStore(dst + i + 24, a3, 8);                                                                    \
    }                                                                                                    \
    for (; i < count; i += 8) {                                                                          \
      __m256 a = f16cLoad((const unsigned short*)srcs[0] + i, count - i);                                \
      for (int k = 1; k < nsrc; k++) a = OP(a, f16cLoad((const unsigned short*)srcs[k] + i, count - i)); \
      f16cStore(dst + i, divisor > 1 ? _mm256_div_ps(a, dv) : a, count - i);                             \
    }                                                                                                    \
  } while (0)

F16C_TARGET static void reduce_f16_f16c(unsigned short* dst, const void* const* srcs, int nsrc, size_t count,
                                        relayRedOp_t op, int divisor) {
  __m256 dv = _mm256_set1_ps((float)divisor);
  switch (op) {
    case relaySum:
    case relayAvg: F16C_FOLD(f16cSum); break;
    case relayProd: F16C_FOLD(f16cProd); break;
    case relayMax: F16C_FOLD(f16cMax); break;
    default: F16C_FOLD(f16cMin); break;
  }
}

/* bf16 through AVX2, on the same switch as fp16's F16C path (relayHostPath16) where the CPU has AVX2 too:
 * element-major as reduce_f16_f16c, with the same folds (f16cSum .. f16cMin) and divide. The block-major
 * reduce_bf16 above (bf16Load/bf16Store vectorized by its clones, now the fallback) against this, 2 sources
 * of 64 KiB: 19.7 -> 42.7 GB/s, 8 sources 24.4 -> 42.3; from memory (8 MiB a source) 16.7 -> 20.0 and 10.9 ->
 * 17.4 (test_plan reduce_speed, median of 3, 2-core Xeon at load 15-17:
 * docs/perf/2026-12-05-cpu-fp16-2core.md; at load 1.5 the block-major one gave 28-31 in cache). The store
 * blends in the quiet NaNs only where one of its 16 elements is a NaN (one unordered compare of the pair, a
 * test): blending always, 2 sources in cache gave 42 GB/s against 56 (best of 40 interleaved trials). AVX-512
 * was not tried. A 32-bit lane of 16 loaded bf16 holds elements 2j (low half) and 2j + 1 (high half): shifted
 * left 16 it is the first's float, its low half cleared the second's, so loading takes no shuffle (and no
 * packus, which packs within 128-bit lanes, on the way back); the folds work lane by lane, so which element
 * sits in which lane does not matter. The store is bf16Store's in integers, each lane's high half: x + 0x7fff
 * + bit 16 of x (round to nearest even whatever MXCSR says), a NaN x | 0x400000 (quiet, payload kept as
 * bf16Store keeps it). Not AVX512-BF16's VCVTNE2PS2BF16: it flushes float subnormals, bf16Store keeps them.
 * The last count % 32 elements go through a 16-element copy, as reduce_f16_f16c's. */
#define BF16V_TARGET __attribute__((target("avx,avx2,f16c")))
BF16V_TARGET static inline __m256i bf16vLoad(const unsigned short* p, size_t m) {
  if (m >= 16) return _mm256_loadu_si256((const __m256i*)p);
  unsigned short t[16] = {0};
  memcpy(t, p, m * sizeof *t);
  return _mm256_loadu_si256((const __m256i*)t);
}
BF16V_TARGET static inline __m256 bf16vEven(__m256i x) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}
BF16V_TARGET static inline __m256 bf16vOdd(__m256i x) {
  return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}
BF16V_TARGET static inline __m256i bf16vRound(__m256 v, int anyNan) {
  __m256i x = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
  if (!anyNan) return r;
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x400000)), nan);
}
BF16V_TARGET static inline void bf16vStore(unsigned short* p, __m256 even, __m256 odd, size_t m) {
  __m256 u = _mm256_cmp_ps(even, odd, _CMP_UNORD_Q); /* a lane where either is a NaN */
  int anyNan = !_mm256_testz_ps(u, u);
  __m256i h =
      _mm256_blend_epi16(_mm256_srli_epi32(bf16vRound(even, anyNan), 16), bf16vRound(odd, anyNan), 0xaa);
  if (m >= 16) {
    _mm256_storeu_si256((__m256i*)p, h);
    return;
  }
  unsigned short t[16];
  _mm256_storeu_si256((__m256i*)t, h);
  memcpy(p, t, m * sizeof *t);
}

#define BF16V_FOLD(OP)                                                                      \
  do {                                                                                      \
    size_t i = 0;                                                                           \
    for (; i + 32 <= count; i += 32) {                                                      \
      const unsigned short* p = (const unsigned short*)srcs[0] + i;                         \
      __m256i x0 = bf16vLoad(p, 16), x1 = bf16vLoad(p + 16, 16);                            \
      __m256 e0 = bf16vEven(x0), o0 = bf16vOdd(x0), e1 = bf16vEven(x1), o1 = bf16vOdd(x1);  \
      for (int k = 1; k < nsrc; k++) {                                                      \
        p = (const unsigned short*)srcs[k] + i;                                             \
        x0 = bf16vLoad(p, 16);                                                              \
        x1 = bf16vLoad(p + 16, 16);                                                         \
        e0 = OP(e0, bf16vEven(x0));                                                         \
        o0 = OP(o0, bf16vOdd(x0));                                                          \
        e1 = OP(e1, bf16vEven(x1));                                                         \
        o1 = OP(o1, bf16vOdd(x1));                                                          \
      }                                                                                     \
      if (divisor > 1)                                                                      \
        e0 = _mm256_div_ps(e0, dv), o0 = _mm256_div_ps(o0, dv), e1 = _mm256_div_ps(e1, dv), \
        o1 = _mm256_div_ps(o1, dv);                                                         \
      bf16vStore(dst + i, e0, o0, 16);                                                      \
      bf16vStore(dst + i + 16, e1, o1, 16);                                                 \
    }                                                                                       \
    for (; i < count; i += 16) {                                                            \
      __m256i x = bf16vLoad((const unsigned short*)srcs[0] + i, count - i);                 \
      __m256 e = bf16vEven(x), o = bf16vOdd(x);                                             \
      for (int k = 1; k < nsrc; k++) {                                                      \
        x = bf16vLoad((const unsigned short*)srcs[k] + i, count - i);                       \
        e = OP(e, bf16vEven(x));                                                            \
        o = OP(o, bf16vOdd(x));                                                             \
      }                                                                                     \
      if (divisor > 1) e = _mm256_div_ps(e, dv), o = _mm256_div_ps(o, dv);                  \
      bf16vStore(dst + i, e, o, count - i);                                                 \
    }                                                                                       \
  } while (0)

BF16V_TARGET static void reduce_bf16_avx2(unsigned short* dst, const void* const* srcs, int nsrc,
                                          size_t count, relayRedOp_t op, int divisor) {
  __m256 dv = _mm256_set1_ps((float)divisor);
  switch (op) {
    case relaySum:
    case relayAvg: BF16V_FOLD(f16cSum); break;
    case relayProd: BF16V_FOLD(f16cProd); break;
    case relayMax: BF16V_FOLD(f16cMax); break;
    default: BF16V_FOLD(f16cMin); break;
  }
}

/* What this CPU has for the paths above: CPUID.1:ECX bits 27-29 (OSXSAVE, AVX, F16C) and XCR0 bits 1-2 (the
 * OS saves XMM and YMM state) for fp16's; CPUID.7.0:EBX bit 5 (AVX2) as well for bf16's. */
static int cpuVecAsk(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & (7u << 27)) != (7u << 27)) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if ((lo & 6u) != 6u) return 0;
  return kCpuF16c | (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5)) ? kCpuAvx2 : 0);
}
#else
static int cpuVecAsk(void) { return 0; }
#endif

/* cpuVecAsk's answer, asked once (-1: not yet): CPUID traps to the hypervisor in a VM, bf16's dispatch reads
 * it on every call. */
static atomic_int gCpuVec = -1;
static int cpuVec(void) {
  int v = atomic_load_explicit(&gCpuVec, memory_order_relaxed);
  if (v < 0) {
    v = cpuVecAsk();
    atomic_store_explicit(&gCpuVec, v, memory_order_relaxed);
  }
  return v;
}

/* The 16-bit floats' path (fp16 and bf16), chosen on first use and kept (-1: not chosen yet): a relaxed
 * atomic read per call, no ifunc, so it holds under ASan and TSan too (REDUCE_CLONES says why those have no
 * clones). */
static atomic_int gPath16 = -1;

static int path16Best(void) { return cpuVec() & kCpuF16c ? relayPath16Vector : relayPath16Software; }

int relayHostPath16(void) {
  int p = atomic_load_explicit(&gPath16, memory_order_relaxed);
  if (p < 0) {
    p = path16Best();
    atomic_store_explicit(&gPath16, p, memory_order_relaxed);
  }
  return p;
}

int relayHostPath16Set(int path) {
  if (path < 0) path = path16Best();
  if (path != relayPath16Software && (path != relayPath16Vector || !(cpuVec() & kCpuF16c))) return -1;
  atomic_store_explicit(&gPath16, path, memory_order_relaxed);
  return 0;
}

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
    case relayFloat16:
#ifdef REDUCE_F16C
      if (relayHostPath16() == relayPath16Vector) {
        reduce_f16_f16c(dst, srcs, nsrc, count, op, divisor);
        break;
      }
#endif
      reduce_f16(dst, srcs, nsrc, count, op, divisor);
      break;
    case relayBfloat16:
#ifdef REDUCE_F16C
      if (relayHostPath16() == relayPath16Vector && (cpuVec() & kCpuAvx2)) {
        reduce_bf16_avx2(dst, srcs, nsrc, count, op, divisor);
        break;
      }
#endif
      reduce_bf16(dst, srcs, nsrc, count, op, divisor);
      break;
    case relayFloat32: reduce_f32(dst, srcs, nsrc, count, op, divisor); break;
    case relayFloat64: reduce_f64(dst, srcs, nsrc, count, op, divisor); break;
    default: break;
  }
}
