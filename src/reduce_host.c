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

/* The conversions live in float16.h, shared with the GPU kernels. */
float relayHalfToFloat(unsigned short h) { return relayF16HalfToFloat(h); }
unsigned short relayFloatToHalf(float f) { return relayF16FloatToHalf(f); }
float relayBf16ToFloat(unsigned short h) { return relayF16Bf16ToFloat(h); }
unsigned short relayFloatToBf16(float f) { return relayF16FloatToBf16(f); }

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
