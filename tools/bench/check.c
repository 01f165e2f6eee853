/* The bench's data check: a pattern every rank can compute for any source,
 * destination block and element, a sentinel for outputs, and a serial
 * reference each rank computes for its own output (no communication, so the
 * check does not trust the library it checks).
 *
 * Values are small integers so every reduction of them is exact in every
 * dtype that can hold them: sums of A values of magnitude <= M stay below
 * 2^24 (fp32), 2048 (fp16) or 256 (bf16) and inside the integer ranges. A
 * result then differs from the reference only when the library got it wrong;
 * the tolerance is needed only for avg in floats (one division) and the
 * 16-bit floats. Values are never zero, so a block the library never wrote
 * (still the sentinel) or wrote with zeros is caught. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "comm/common.h"
#include "reduce_host.h"

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int isSigned(relayDataType_t dt) {
  return dt == relayInt8 || dt == relayInt32 || dt == relayInt64 || dt == relayFloat16 ||
         dt == relayFloat32 || dt == relayFloat64 || dt == relayBfloat16;
}
static int isFloat(relayDataType_t dt) {
  return dt == relayFloat16 || dt == relayFloat32 || dt == relayFloat64 || dt == relayBfloat16;
}
/* Narrow types have too few exact values to spell the source out. */
static int isNarrow(relayDataType_t dt) {
  return dt == relayInt8 || dt == relayUint8 || dt == relayFloat16 || dt == relayBfloat16;
}

/* Largest input magnitude so that A of them sum exactly and in range. The
 * uint8 bound leaves 255 free for the sentinel, int8 leaves -128. */
static long magnitude(relayDataType_t dt, int nActive) {
  long m;
  switch (dt) {
    case relayInt8: m = 127 / nActive; break;
    case relayUint8: m = 254 / nActive; break;
    case relayFloat16: m = 2048 / nActive; break;
    case relayBfloat16: m = 256 / nActive; break;
    default: m = 1000000; break; /* wide types use the structured pattern */
  }
  return m < 1 ? 1 : m;
}

/* The input element i of block blk that active src of group g contributes.
 * Wide types: 100*src + (1..97), so a misplaced source shows in the
 * hundreds; narrow types: a hash of everything into [1, M]. Signed types
 * get negative values too (max/min must see them). Prod: magnitude 1 except
 * one source per element at 2, so products stay tiny and exact while a
 * missing or doubled source still changes the sign or the magnitude. */
static double patValue(const benchCheckKey* k, int src, int blk, uint64_t i) {
  uint64_t h = mix(((uint64_t)(unsigned)k->group << 48) ^ ((uint64_t)(unsigned)blk << 32) ^
                   (i * 0x100000001B3ull) ^ ((uint64_t)(unsigned)src << 56));
  double sign = (isSigned(k->dtype) && (h >> 61) == 5) ? -1.0 : 1.0;
  if (k->op == relayProd) {
    double mag =
        ((uint64_t)src == (i + (uint64_t)blk + (uint64_t)k->group) % (uint64_t)k->nActive) ? 2.0 : 1.0;
    if (isSigned(k->dtype) && ((h >> 40) % 3 == 0)) sign = -1.0;
    return sign * mag;
  }
  if (isNarrow(k->dtype)) {
    long m = magnitude(k->dtype, k->nActive);
    return sign * (double)(1 + (long)(h % (uint64_t)m));
  }
  return sign * (double)(100 * src + 1 + (int)(h % 97));
}

static void putElem(relayDataType_t dt, void* buf, uint64_t i, double v) {
  switch (dt) {
    case relayInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case relayUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case relayInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case relayUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case relayInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case relayUint64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case relayFloat16: ((uint16_t*)buf)[i] = relayFloatToHalf((float)v); break;
    case relayBfloat16: ((uint16_t*)buf)[i] = relayFloatToBf16((float)v); break;
    case relayFloat32: ((float*)buf)[i] = (float)v; break;
    case relayFloat64: ((double*)buf)[i] = v; break;
    default: break;
  }
}

static double getElem(relayDataType_t dt, const void* buf, uint64_t i) {
  switch (dt) {
    case relayInt8: return ((const int8_t*)buf)[i];
    case relayUint8: return ((const uint8_t*)buf)[i];
    case relayInt32: return ((const int32_t*)buf)[i];
    case relayUint32: return ((const uint32_t*)buf)[i];
    case relayInt64: return (double)((const int64_t*)buf)[i];
    case relayUint64: return (double)((const uint64_t*)buf)[i];
    case relayFloat16: return relayHalfToFloat(((const uint16_t*)buf)[i]);
    case relayBfloat16: return relayBf16ToFloat(((const uint16_t*)buf)[i]);
    case relayFloat32: return ((const float*)buf)[i];
    case relayFloat64: return ((const double*)buf)[i];
    default: return NAN;
  }
}

static size_t esizeOf(relayDataType_t dt) {
  switch (dt) {
    case relayInt8:
    case relayUint8: return 1;
    case relayFloat16:
    case relayBfloat16: return 2;
    case relayInt32:
    case relayUint32:
    case relayFloat32: return 4;
    default: return 8;
  }
}

/* Sentinel: NaN in floats (all ones), the maximum in unsigned types and the
 * minimum in signed ones; the pattern's results never reach either. */
void benchFillSentinel(relayDataType_t dt, void* buf, uint64_t elems) {
  size_t es = esizeOf(dt);
  if (isFloat(dt) || !isSigned(dt)) {
    memset(buf, 0xff, elems * es);
    return;
  }
  for (uint64_t i = 0; i < elems; i++) {
    switch (dt) {
      case relayInt8: ((int8_t*)buf)[i] = INT8_MIN; break;
      case relayInt32: ((int32_t*)buf)[i] = INT32_MIN; break;
      default: ((int64_t*)buf)[i] = INT64_MIN; break;
    }
  }
}

/* The input of this rank as blocks: block b holds *len elements of the pattern addressed to b, starting
 * at element *at of the send buffer. Returns the number of blocks (0: this rank sends nothing). */
static int inputBlock(const benchCheckKey* k, int b, uint64_t* at, uint64_t* len) {
  int nb = 1;
  if (k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveAllToAll ||
      k->coll == relayCollectiveAllToAllV)
    nb = k->nActive;
  if (k->coll == relayCollectiveSend && k->me != 0) nb = 0; /* the pair's receiver sends nothing */
  *at = 0;
  *len = k->count;
  if (k->coll == relayCollectiveAllToAllV) {
    for (int j = 0; j < b; j++) *at += benchA2avCount(k->count, k->me, j);
    *len = benchA2avCount(k->count, k->me, b);
  } else {
    *at = (uint64_t)b * k->count;
  }
  return nb;
}

void benchFillInput(const benchCheckKey* k, void* buf) {
  uint64_t at, len;
  for (int b = 0; b < inputBlock(k, b, &at, &len); b++)
    for (uint64_t i = 0; i < len; i++) putElem(k->dtype, buf, at + i, patValue(k, k->me, b, i));
}

uint64_t benchA2avCount(uint64_t base, int from, int to) {
  return base * (uint64_t)(1 + (from + 2 * to) % 3);
}

/* Round the exact reference into the dtype, as a correct library stores it. */
static double roundTo(relayDataType_t dt, double v) {
  switch (dt) {
    case relayFloat16: return relayHalfToFloat(relayFloatToHalf((float)v));
    case relayBfloat16: return relayBf16ToFloat(relayFloatToBf16((float)v));
    case relayFloat32: return (float)v;
    default: return v;
  }
}

/* op over the A sources of (blk, i), computed exactly in double (the values
 * are small integers), then avg divides: truncating for integers. */
static double reference(const benchCheckKey* k, int blk, uint64_t i) {
  double acc = patValue(k, 0, blk, i);
  for (int s = 1; s < k->nActive; s++) {
    double v = patValue(k, s, blk, i);
    switch (k->op) {
      case relaySum:
      case relayAvg: acc += v; break;
      case relayProd: acc *= v; break;
      case relayMax: acc = v > acc ? v : acc; break;
      case relayMin: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  if (k->op == relayAvg) acc = isFloat(k->dtype) ? acc / k->nActive : trunc(acc / k->nActive);
  return acc;
}

/* Floats: exact except avg (one rounded division) and the 16-bit types,
 * which round once from fp32. */
static int matches(const benchCheckKey* k, double got, double want) {
  if (got == want) return 1;
  if (!isFloat(k->dtype) || isnan(got)) return 0;
  double rel;
  switch (k->dtype) {
    case relayFloat16: rel = 2e-3; break;
    case relayBfloat16: rel = 1.6e-2; break;
    case relayFloat32: rel = k->op == relayAvg ? 2e-7 : 0; break;
    default: rel = k->op == relayAvg ? 4e-16 : 0; break;
  }
  return fabs(got - want) <= rel * fmax(fabs(want), 1.0);
}

static void report(const char* tag, long long nth, const char* what, uint64_t idx, double got, double want) {
  if (nth < 5)
    fprintf(stderr, "%s: %s element %llu: got %.9g, expected %.9g\n", tag, what, (unsigned long long)idx, got,
            want);
}

/* Elements of out that are no longer the sentinel (benchFillSentinel), compared bit for bit. */
static long long checkSentinel(const benchCheckKey* k, const void* out, const char* tag) {
  long long wrong = 0;
  size_t es = esizeOf(k->dtype);
  unsigned char one[8];
  benchFillSentinel(k->dtype, one, 1);
  for (uint64_t i = 0; i < k->count; i++)
    if (memcmp((const char*)out + i * es, one, es))
      report(tag, wrong++, "output (written on the root only: must stay the sentinel)", i,
             getElem(k->dtype, out, i), getElem(k->dtype, one, 0));
  return wrong;
}

long long benchCheckOutput(const benchCheckKey* k, const void* out, const char* tag) {
  long long wrong = 0;
  const relayDataType_t dt = k->dtype;
  switch (k->coll) {
    case relayCollectiveAllReduce:
      for (uint64_t i = 0; i < k->count; i++) {
        double want = roundTo(dt, reference(k, 0, i)), got = getElem(dt, out, i);
        if (!matches(k, got, want)) report(tag, wrong++, "output", i, got, want);
      }
      break;
    case relayCollectiveReduceScatter:
      for (uint64_t i = 0; i < k->count; i++) {
        double want = roundTo(dt, reference(k, k->me, i)), got = getElem(dt, out, i);
        if (!matches(k, got, want)) report(tag, wrong++, "output", i, got, want);
      }
      break;
    case relayCollectiveAllGather:
    case relayCollectiveAllToAll:
      /* Block j comes from active j: its input (all-gather) or the segment
       * it addressed to this rank (all-to-all). Copies are bit exact. */
      for (int j = 0; j < k->nActive; j++)
        for (uint64_t i = 0; i < k->count; i++) {
          uint64_t idx = (uint64_t)j * k->count + i;
          double want = roundTo(dt, patValue(k, j, k->coll == relayCollectiveAllToAll ? k->me : 0, i));
          double got = getElem(dt, out, idx);
          if (got != want) report(tag, wrong++, "output", idx, got, want);
        }
      break;
    case relayCollectiveAllToAllV:
      /* Block j, from active j, sits after blocks 0..j-1 (rdispls are the prefix sums). */
      for (uint64_t j = 0, base = 0; j < (uint64_t)k->nActive; j++) {
        uint64_t len = benchA2avCount(k->count, (int)j, k->me);
        for (uint64_t i = 0; i < len; i++) {
          double want = roundTo(dt, patValue(k, (int)j, k->me, i)), got = getElem(dt, out, base + i);
          if (got != want) report(tag, wrong++, "output", base + i, got, want);
        }
        base += len;
      }
      break;
    case relayCollectiveBroadcast:
    case relayCollectiveSend:
      /* Every active gets the root's input (a copy: bit exact); a pair's receiver gets the sender's. */
      if (k->coll == relayCollectiveSend && k->me != 1) break;
      for (uint64_t i = 0; i < k->count; i++) {
        double want = roundTo(dt, patValue(k, k->coll == relayCollectiveSend ? 0 : k->root, 0, i));
        double got = getElem(dt, out, i);
        if (got != want) report(tag, wrong++, "output", i, got, want);
      }
      break;
    case relayCollectiveReduce:
      if (k->me == k->root) {
        for (uint64_t i = 0; i < k->count; i++) {
          double want = roundTo(dt, reference(k, 0, i)), got = getElem(dt, out, i);
          if (!matches(k, got, want)) report(tag, wrong++, "output", i, got, want);
        }
      } else if (k->inplace) {
        wrong += benchCheckInputIntact(k, out, tag); /* written on the root only: its input stays */
      } else {
        wrong += checkSentinel(k, out, tag); /* written on the root only: still the sentinel */
      }
      break;
    default: break;
  }
  return wrong;
}

/* Block j of a rooted collective is member j's: its pattern names j (wide
 * types: 100 j + 1..97; narrow: a hash of j), so a block delivered to the
 * wrong member or at the wrong offset shows. */
void benchFillBlocks(const benchCheckKey* k, void* buf, int first, int n) {
  for (int j = 0; j < n; j++)
    for (uint64_t i = 0; i < k->count; i++)
      putElem(k->dtype, buf, (uint64_t)j * k->count + i, patValue(k, first + j, 0, i));
}

long long benchCheckBlocks(const benchCheckKey* k, const void* buf, int first, int n, const char* tag,
                           const char* what) {
  long long wrong = 0;
  for (int j = 0; j < n; j++)
    for (uint64_t i = 0; i < k->count; i++) {
      uint64_t idx = (uint64_t)j * k->count + i;
      double want = roundTo(k->dtype, patValue(k, first + j, 0, i)), got = getElem(k->dtype, buf, idx);
      if (got != want) report(tag, wrong++, what, idx, got, want);
    }
  return wrong;
}

long long benchCheckInputIntact(const benchCheckKey* k, const void* in, const char* tag) {
  long long wrong = 0;
  uint64_t at, len;
  for (int b = 0; b < inputBlock(k, b, &at, &len); b++)
    for (uint64_t i = 0; i < len; i++) {
      double want = roundTo(k->dtype, patValue(k, k->me, b, i)), got = getElem(k->dtype, in, at + i);
      if (got != want) report(tag, wrong++, "send buffer (must stay untouched)", at + i, got, want);
    }
  return wrong;
}
