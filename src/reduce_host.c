/* CPU reduce family. Processes blocks of kBlock elements: the accumulator
 * block stays in L1 while each source streams through once, which keeps the
 * k-input reduce memory-bound (one read per source, one write) instead of
 * re-reading dst k times. */
#include "reduce_host.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { kBlock = 1024 };

float relayHalfToFloat(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
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
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

unsigned short relayFloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (unsigned short)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* rounds to inf */
  if (absx < 0x38800000u) { /* subnormal half or zero: round-to-nearest-even of value*2^24 */
    float a;
    memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f; /* exact: power of two */
    float r = nearbyintf(scaled);   /* default rounding mode: nearest even */
    return (unsigned short)(sign | (uint32_t)r);
  }
  uint32_t mant = absx + 0xc8000000u; /* rebias exponent: (127-15) << 23 */
  uint32_t round = ((mant >> 13) & 1u) + 0xfffu;
  mant += round;
  return (unsigned short)(sign | (mant >> 13));
}

float relayBf16ToFloat(unsigned short h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

unsigned short relayFloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}

/* Integer ops run in the unsigned twin so sums and products wrap instead of
 * overflowing (UB in C); max/min/avg compare and divide as the signed type. */
#define REDUCE_INT(T, U)                                                               \
  static void reduce_##T(T* dst, const void* const* srcs, int nsrc, size_t count,      \
                         relayRedOp_t op, int divisor) {                               \
    U acc[kBlock];                                                                     \
    for (size_t base = 0; base < count; base += kBlock) {                              \
      size_t n = count - base < kBlock ? count - base : kBlock;                        \
      const T* s0 = (const T*)srcs[0] + base;                                          \
      for (size_t i = 0; i < n; i++) acc[i] = (U)s0[i];                                \
      for (int k = 1; k < nsrc; k++) {                                                 \
        const T* s = (const T*)srcs[k] + base;                                         \
        switch (op) {                                                                  \
          case relaySum:                                                               \
          case relayAvg:                                                               \
            for (size_t i = 0; i < n; i++) acc[i] = (U)(acc[i] + (U)s[i]);             \
            break;                                                                     \
          case relayProd:                                                              \
            for (size_t i = 0; i < n; i++) acc[i] = (U)(acc[i] * (U)s[i]);             \
            break;                                                                     \
          case relayMax:                                                               \
            for (size_t i = 0; i < n; i++) acc[i] = ((T)acc[i] < s[i]) ? (U)s[i] : acc[i]; \
            break;                                                                     \
          default:                                                                     \
            for (size_t i = 0; i < n; i++) acc[i] = ((T)acc[i] > s[i]) ? (U)s[i] : acc[i]; \
            break;                                                                     \
        }                                                                              \
      }                                                                                \
      T* d = dst + base;                                                               \
      if (divisor > 1)                                                                 \
        for (size_t i = 0; i < n; i++) d[i] = (T)((T)acc[i] / (T)divisor);             \
      else                                                                             \
        for (size_t i = 0; i < n; i++) d[i] = (T)acc[i];                               \
    }                                                                                  \
  }

REDUCE_INT(int8_t, uint8_t)
REDUCE_INT(uint8_t, uint8_t)
REDUCE_INT(int32_t, uint32_t)
REDUCE_INT(uint32_t, uint32_t)
REDUCE_INT(int64_t, uint64_t)
REDUCE_INT(uint64_t, uint64_t)

/* Floats: T is the storage type, ACC the accumulator, LOAD/STORE convert. */
#define REDUCE_FLOAT(NAME, T, ACC, LOAD, STORE)                                         \
  static void reduce_##NAME(T* dst, const void* const* srcs, int nsrc, size_t count,    \
                            relayRedOp_t op, int divisor) {                             \
    ACC acc[kBlock];                                                                    \
    for (size_t base = 0; base < count; base += kBlock) {                               \
      size_t n = count - base < kBlock ? count - base : kBlock;                         \
      const T* s0 = (const T*)srcs[0] + base;                                           \
      for (size_t i = 0; i < n; i++) acc[i] = LOAD(s0[i]);                              \
      for (int k = 1; k < nsrc; k++) {                                                  \
        const T* s = (const T*)srcs[k] + base;                                          \
        switch (op) {                                                                   \
          case relaySum:                                                                \
          case relayAvg:                                                                \
            for (size_t i = 0; i < n; i++) acc[i] = acc[i] + LOAD(s[i]);                \
            break;                                                                      \
          case relayProd:                                                               \
            for (size_t i = 0; i < n; i++) acc[i] = acc[i] * LOAD(s[i]);                \
            break;                                                                      \
          case relayMax:                                                                \
            for (size_t i = 0; i < n; i++) {                                            \
              ACC v = LOAD(s[i]);                                                       \
              acc[i] = (acc[i] < v) ? v : acc[i];                                       \
            }                                                                           \
            break;                                                                      \
          default:                                                                      \
            for (size_t i = 0; i < n; i++) {                                            \
              ACC v = LOAD(s[i]);                                                       \
              acc[i] = (acc[i] > v) ? v : acc[i];                                       \
            }                                                                           \
            break;                                                                      \
        }                                                                               \
      }                                                                                 \
      T* d = dst + base;                                                                \
      if (divisor > 1)                                                                  \
        for (size_t i = 0; i < n; i++) d[i] = STORE(acc[i] / (ACC)divisor);             \
      else                                                                              \
        for (size_t i = 0; i < n; i++) d[i] = STORE(acc[i]);                            \
    }                                                                                   \
  }

#define ID(x) (x)
REDUCE_FLOAT(f32, float, float, ID, ID)
REDUCE_FLOAT(f64, double, double, ID, ID)
REDUCE_FLOAT(f16, unsigned short, float, relayHalfToFloat, relayFloatToHalf)
REDUCE_FLOAT(bf16, unsigned short, float, relayBf16ToFloat, relayFloatToBf16)

void relayHostReduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                     relayDataType_t dt, relayRedOp_t op, int divisor) {
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
