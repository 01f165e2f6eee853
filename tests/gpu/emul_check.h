/* What the host emulations of the kernels (emul_oneshot.cu, emul_bw.cu)
 * check of an active's caller buffers after a call. Header-only. */
#ifndef RELAY_EMUL_CHECK_H_
#define RELAY_EMUL_CHECK_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/reduce_inputs.h"
#include "relaycc.h"

#define EMUL_GUARD 64

/* Caller buffers of A actives: [guard][src: in elements][guard] and
 * [guard][dst: out elements][guard] (sbuf, dbuf, sizes *sb, *db), every byte
 * `poison`, src random (riFill, seeded by seed and the active), orig a copy.
 * misSrc / misDst: that buffer starts one element past 16-byte alignment. In
 * place: a gather's src is block i of dst, a reduce's dst lies in src (block
 * i when blocked). 0 on success. */
static inline int emulSetupBuffers(int A, size_t c, relayDataType_t dt, int blocked, int gather, int inPlace,
                                   int misSrc, int misDst, uint64_t seed, unsigned char poison,
                                   unsigned char** sbuf, unsigned char** dbuf, unsigned char** orig,
                                   void** src, void** dst, size_t* sb, size_t* db) {
  const size_t es = relayTypeSize(dt), in = blocked ? (size_t)A * c : c, out = gather ? (size_t)A * c : c;
  *sb = 2 * EMUL_GUARD + in * es + 16;
  *db = 2 * EMUL_GUARD + out * es + 16;
  for (int i = 0; i < A; i++) {
    if (posix_memalign((void**)&sbuf[i], 256, *sb) || posix_memalign((void**)&dbuf[i], 256, *db)) return 1;
    orig[i] = (unsigned char*)malloc(in * es + 1);
    if (!orig[i]) return 1;
    memset(sbuf[i], poison, *sb);
    memset(dbuf[i], poison, *db);
    src[i] = sbuf[i] + EMUL_GUARD + (misSrc ? es : 0);
    if (gather && inPlace) src[i] = dbuf[i] + EMUL_GUARD + (misDst ? es : 0) + (size_t)i * c * es;
    riFill(src[i], in, dt, seed * 1000003u + (uint64_t)i * 7919u);
    memcpy(orig[i], src[i], in * es);
    dst[i] = gather && inPlace ? (void*)(dbuf[i] + EMUL_GUARD + (misDst ? es : 0))
             : inPlace         ? (void*)((char*)src[i] + (blocked ? (size_t)i * c * es : 0))
                               : (void*)(dbuf[i] + EMUL_GUARD + (misDst ? es : 0));
  }
  return 0;
}

/* Nothing outside the output was written (an in-place reduce's output lies
 * in its input buffer: nothing outside the input then), every byte around
 * still `poison`, and out of place the send buffer is unchanged. sbuf/sb,
 * dbuf/db: the allocations around src and dst. 0 when clean, else 1 with a
 * message. */
static inline int emulCheckBuffers(const char* what, int i, int inPlace, int gather, unsigned char* sbuf,
                                   size_t sb, unsigned char* dbuf, size_t db, const void* src,
                                   const void* dst, size_t inBytes, size_t outBytes,
                                   const unsigned char* orig, unsigned char poison) {
  int inSrc = inPlace && !gather;
  unsigned char* base = inSrc ? sbuf : dbuf;
  size_t span = inSrc ? sb : db;
  const unsigned char* lo = (const unsigned char*)(inSrc ? src : dst);
  size_t len = inSrc ? inBytes : outBytes;
  for (unsigned char* p = base; p < base + span; p++)
    if ((p < lo || p >= lo + len) && *p != poison) {
      printf("FAIL %s: active %d wrote outside its buffers (byte %td)\n", what, i, p - lo);
      return 1;
    }
  if (!inPlace && memcmp(src, orig, inBytes) != 0) {
    printf("FAIL %s: active %d's send buffer changed\n", what, i);
    return 1;
  }
  return 0;
}

#endif
