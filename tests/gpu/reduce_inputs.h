/* Inputs of the reduce tests (GPU and host emulation alike). */
#ifndef RELAY_REDUCE_INPUTS_H_
#define RELAY_REDUCE_INPUTS_H_

#include <stddef.h>
#include <stdint.h>

#include "relaycc.h"

static const relayDataType_t riTypes[] = {relayInt8,    relayUint8,  relayInt32,   relayUint32,
                                          relayInt64,   relayUint64, relayFloat16, relayBfloat16,
                                          relayFloat32, relayFloat64};
#define RI_NTYPES 10
static const relayRedOp_t riOps[] = {relaySum, relayProd, relayMax, relayMin, relayAvg};
static const int riKs[] = {1, 2, 3, 8};

static inline uint64_t riMix(uint64_t z) { /* splitmix64 */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Random inputs that stay finite through any fold of 8 (so that no NaN is
 * made by arithmetic, whose payload differs between x86 and the GPU), yet
 * cover rounding, overflow to inf in 16-bit stores, subnormals and wrap. */
static inline void riFill(void* p, size_t n, relayDataType_t dt, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = riMix(seed * 0x100000001b3ull + i);
    switch (dt) {
      case relayInt8:
      case relayUint8: ((uint8_t*)p)[i] = (uint8_t)r; break;
      case relayInt32:
      case relayUint32: ((uint32_t*)p)[i] = (uint32_t)r; break;
      case relayInt64:
      case relayUint64: ((uint64_t*)p)[i] = r; break;
      case relayFloat16: {
        /* Raw bits with exponent field 0..29 (|x| < 32768): subnormals
         * included; 8 of them multiply to < 2^120, finite in fp32. */
        uint16_t h = (uint16_t)(r & 0x83ffu) | (uint16_t)(((r >> 16) % 30) << 10);
        ((uint16_t*)p)[i] = h;
        break;
      }
      case relayBfloat16: {
        /* Exponents 2^-20..2^20 plus zeros: products of 8 stay finite. */
        uint32_t e = (uint32_t)(127 - 20 + (r >> 20) % 41);
        uint16_t b = (uint16_t)((r & 0x807fu) | (e << 7));
        if ((r >> 40) % 64 == 0) b &= 0x8000u; /* signed zeros */
        ((uint16_t*)p)[i] = b;
        break;
      }
      case relayFloat32: {
        double u = (double)(r >> 11) / 9007199254740992.0; /* [0, 1) */
        ((float*)p)[i] = (float)((u - 0.5) * 2000.0);
        break;
      }
      case relayFloat64: {
        double u = (double)(r >> 11) / 9007199254740992.0;
        ((double*)p)[i] = (u - 0.5) * 2000.0;
        break;
      }
      default: break;
    }
  }
}

#endif
