/* What the host emulations of the kernels (emul_oneshot.cu, emul_bw.cu)
 * check of an active's caller buffers after a call. Header-only. */
#ifndef RELAY_EMUL_CHECK_H_
#define RELAY_EMUL_CHECK_H_

#include <stdio.h>
#include <string.h>

/* Nothing outside the output was written (an in-place reduce's output lies
 * in its input buffer: nothing outside the input then), every byte around
 * still `poison`, and out of place the send buffer is unchanged. sbuf/sb,
 * dbuf/db: the allocations around src and dst. 0 when clean, else 1 with a
 * message. */
static inline int emulCheckBuffers(const char* what, int i, int inPlace, int gather, unsigned char* sbuf, size_t sb,
                                   unsigned char* dbuf, size_t db, const void* src, const void* dst, size_t inBytes,
                                   size_t outBytes, const unsigned char* orig, unsigned char poison) {
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
