/*
 * fp16 and bf16 conversions, written once for the host (C) and the GPU (CUDA
 * C++): the CPU reduce family (src/reduce_host.c), the GPU kernels
 * (src/transport/nccl/reduce_rules.cuh) and the tests all round through these
 * same lines, so every backend computes the same bits (the GPU's hardware cvt
 * agrees on every finite value but canonicalizes NaN payloads).
 * Round to nearest even throughout.
 */
#ifndef RELAY_FLOAT16_H_
#define RELAY_FLOAT16_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define RELAY_F16_FN static __host__ __device__ __forceinline__
#else
#define RELAY_F16_FN static inline
#endif

RELAY_F16_FN float relayF16BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

RELAY_F16_FN uint32_t relayF16FloatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

RELAY_F16_FN float relayF16HalfToFloat(unsigned short h) {
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
  return relayF16BitsToFloat(bits);
}

RELAY_F16_FN unsigned short relayF16FloatToHalf(float f) {
  uint32_t x = relayF16FloatToBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (unsigned short)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (absx < 0x38800000u) {
    /* Subnormal half or zero: value x 2^24 = m x 2^(e-126) rounded to nearest even, in integers. rintf here
     * rounded as the FPU's mode said (toward zero under MXCSR round-toward-zero: 1.5 x 2^-24 gave 0x0001,
     * not 0x0002) and a float subnormal met denormals-are-zero; these shifts meet neither. Below 2^-25
     * (exponent under 102, a float subnormal included) the shift of 25 or more leaves 0. */
    uint32_t e = absx >> 23, m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t s = e < 95u ? 31u : 126u - e; /* 14..31 */
    return (unsigned short)(sign | ((m + (1u << (s - 1)) - 1u + ((m >> s) & 1u)) >> s));
  }
  uint32_t mant = absx + 0xc8000000u; /* rebias the exponent: -(127-15) << 23 */
  uint32_t round = ((mant >> 13) & 1u) + 0xfffu;
  mant += round;
  return (unsigned short)(sign | (mant >> 13));
}

RELAY_F16_FN float relayF16Bf16ToFloat(unsigned short h) { return relayF16BitsToFloat((uint32_t)h << 16); }

RELAY_F16_FN unsigned short relayF16FloatToBf16(float f) {
  uint32_t x = relayF16FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); /* quiet nan */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}

#endif
