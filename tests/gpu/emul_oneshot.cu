/*
 * The one-shot kernel's data path run on the host: oneshot.cu built with its
 * host runner, the push and the reduce of every block of every active rank
 * executed thread after thread over host "regions" laid out as on the GPU.
 * Both protocols: raw staging (flags) and LL lines. Checks, on a machine
 * without a GPU (CI), what the hand-shake cannot fix if it is wrong: block ranges (from count and grid only),
 * staging addresses (parity of each pair epoch, slot of the source's comm rank), the push of the right block
 * to the right peer (reduce-scatter stride), 16-byte vectors and the scalar tail, misaligned callers,
 * in-place aliasing across blocks, and the reduce in active-index order with the bits of relayHostReduce; for
 * LL also the line format, each line's flag (epoch and count) and the zeroing of consumed lines. Every byte
 * of every region outside the expected slots must stay untouched. The GPU run of the whole protocol is
 * gputest_oneshot. Built twice (tests/gpu.cmake): with NVIDIA's 32-lane warps and with AMD's 64-lane
 * wavefront (-DRELAY_GPU_WARP=64: LL128's lanes and lines per warp).
 */
#define RELAY_ONESHOT_HOST_EMULATION 1
#include "transport/nccl/oneshot.cu"

#include <stdio.h>
#include <stdlib.h>

#include "comm/common.h"
#include "gpu/emul_check.h"
#include "gpu/reduce_inputs.h"
#include "reduce_host.h"

enum { NR = 8, MAXC = 4099 };
#define POISON 0xCD

static unsigned char* region[NR];
static relayOsLayout L;

/* The pair epoch of actives i and j in case k: 1..4, both parities, and
 * different pairs of one call on different parities. */
static u64 pairEpoch(int i, int j, int k) {
  int a = i < j ? i : j, b = i < j ? j : i;
  return 1 + (u64)((a * 3 + b * 5 + k) % 4);
}

typedef struct {
  int ll;                  /* 0 flags, 1 LL, 2 LL128 */
  int A, rs, inPlace, mis; /* rs: blocked input (reduce-scatter, all-to-all); mis: 0 aligned, 1 src +1
                              element, 2 dst +1 element */
  int gather;              /* all-gather (rs 0) / all-to-all (rs 1): contributions side by side */
  relayDataType_t dt;
  relayRedOp_t op;
  size_t count;
  int gridMode, threads, reverse;
  int wideAtPair; /* A = 2 on the kernels compiled for 8 actives (RELAYCC_ONESHOT_WIDE) instead of the pair's
                   */
} ecase;

static long g_cases;

static int runCase(const ecase* k, int caseNo) {
  const int A = k->A;
  const size_t c = k->count, es = relayTypeSize(k->dt), in = k->rs ? (size_t)A * c : c,
               out = k->gather ? (size_t)A * c : c;
  int ranks[NR];
  for (int i = 0; i < A; i++) ranks[i] = NR - 1 - i * (NR / A);
  /* Caller buffers: [GUARD][src (in elems)][GUARD] and [GUARD][dst][GUARD]. */
  unsigned char *sbuf[NR], *dbuf[NR], *orig[NR];
  void *src[NR], *dst[NR];
  size_t sb, db;
  if (emulSetupBuffers(A, c, k->dt, k->rs, k->gather, k->inPlace, k->mis == 1, k->mis == 2, (uint64_t)caseNo,
                       POISON, sbuf, dbuf, orig, src, dst, &sb, &db))
    return 1;
  for (int r = 0; r < NR; r++) memset(region[r], POISON, L.regionBytes);
  const size_t bytes = c * es;
  const int grid = k->gridMode == 0
                       ? (k->ll ? RELAY_OS_DEFAULT_BLOCKS : relayOsGrid(bytes, RELAY_OS_DEFAULT_BLOCKS))
                   : k->gridMode == 1 ? 1
                                      : 3;
  if (k->ll == 2 && relayOsLL128Bytes(c, grid, (int)es) > L.llSlotBytes) {
    printf("FAIL: LL128 lines of count %zu x %zu B on %d blocks overflow the LL slot\n", c, es, grid);
    return 1;
  }
  relayOsArgs a[NR];
  u64 ep[NR][RELAY_OS_MAX_ACTIVE];
  for (int i = 0; i < A; i++) {
    memset(&a[i], 0, sizeof a[i]);
    for (int j = 0; j < A; j++) {
      a[i].region[j] = (char*)region[ranks[j]];
      a[i].rank[j] = ranks[j];
      ep[i][j] = i == j ? 0 : pairEpoch(i, j, caseNo);
    }
    a[i].dst = dst[i];
    a[i].src = src[i];
    a[i].count = c;
    a[i].srcStride = k->rs ? c : 0;
    a[i].L = L;
    a[i].nActive = A;
    a[i].me = i;
    a[i].grid = grid;
    a[i].vec = (((uintptr_t)src[i] | (uintptr_t)dst[i] | (uintptr_t)(a[i].srcStride * es) |
                 (uintptr_t)(k->gather ? c * es : 0)) &
                15u) == 0;
    a[i].gather = k->gather;
    a[i].divisor = k->op == relayAvg ? A : 0;
    a[i].elemSize = (int)es;
    a[i].ll = k->ll;
  }
  PickHost pick;
  pick.gather = k->gather;
  pick.pair = A == 2 && !k->wideAtPair;
  OsHostPhase run = visit(k->dt, k->op, pick);
  if (!run) {
    printf("FAIL: no host runner for %s %s\n", relayTypeName(k->dt), relayOpName(k->op));
    return 1;
  }
  /* Block by block: block b of every rank pushes, then reduces, before block
   * b+1 pushes (or the reverse order): a block whose reduce wrote into a
   * range another block still pushes from would show up in place. */
  char what[256];
  snprintf(what, sizeof what, "%s A=%d%s %s %s %s count=%zu %s mis=%d grid=%d threads=%d%s",
           k->ll == 2 ? "LL128"
           : k->ll    ? "LL"
                      : "flags",
           A, pick.pair ? " (pair kernels)" : "",
           k->gather ? (k->rs ? "A2A" : "AG")
           : k->rs   ? "RS"
                     : "AR",
           relayTypeName(k->dt), relayOpName(k->op), c, k->inPlace ? "in-place" : "out-of-place", k->mis,
           grid, k->threads, k->reverse ? " reverse" : "");
  int fail = 0;
  for (int bi = 0; bi < grid && !fail; bi++) {
    int b = k->reverse ? grid - 1 - bi : bi;
    for (int i = 0; i < A; i++)
      for (int t = 0; t < k->threads; t++) run(a[i], ep[i], b, t, k->threads, 0);
    for (int i = 0; i < A && !fail; i++)
      for (int t = 0; t < k->threads && !fail; t++)
        if (!run(a[i], ep[i], b, t, k->threads, 1)) {
          printf("FAIL %s: active %d block %d thread %d found an LL line not pushed (or with another flag)\n",
                 what, i, b, t);
          fail = 1;
        }
  }
  /* Regions: exactly the expected staging slots written, with the source's
   * block for that owner; nothing else. */
  /* LL: the lines of every push were consumed, so they are zero. */
  unsigned char* want = (unsigned char*)malloc(L.regionBytes);
  for (int o = 0; o < A && !fail; o++) {
    memset(want, POISON, L.regionBytes);
    for (int s = 0; s < A; s++) {
      if (s == o) continue;
      int par = (int)(pairEpoch(o, s, caseNo) & 1);
      if (k->ll == 2) {
        /* Every block's lines, at its own offset in the slot. */
        for (int b = 0; b < grid; b++) {
          uint64_t lo, hi;
          relayOsRange(c, grid, (int)es, b, &lo, &hi);
          if (hi <= lo) continue;
          u64 nl = ((hi - lo) * es + RELAY_OS_LL128_DATA - 1) / RELAY_OS_LL128_DATA;
          memset(want + relayOsLLOff(&L, par, ranks[s]) + (u64)b * relayOsLL128Lines(c, grid, (int)es) * 128,
                 0, nl * 128);
        }
      } else if (k->ll) memset(want + relayOsLLOff(&L, par, ranks[s]), 0, (bytes + 7) / 8 * 16);
      else
        memcpy(want + relayOsStagingOff(&L, par, ranks[s]), orig[s] + (k->rs ? (size_t)o * c * es : 0),
               bytes);
    }
    if (memcmp(want, region[ranks[o]], L.regionBytes) != 0) {
      size_t x = 0;
      while (want[x] == region[ranks[o]][x]) x++;
      printf(
          "FAIL %s: region of active %d (rank %d) differs at byte %zu (staging at %llu, slot %llu; LL at "
          "%llu, "
          "slot %llu)\n",
          what, o, ranks[o], x, (unsigned long long)L.stagingOff, (unsigned long long)L.slotBytes,
          (unsigned long long)L.llOff, (unsigned long long)L.llSlotBytes);
      fail = 1;
    }
  }
  free(want);
  /* Outputs against relayHostReduce in active-index order (a gather: the
   * contributions side by side); guards; inputs. */
  unsigned char* exp = (unsigned char*)malloc(out * es + 1);
  for (int i = 0; i < A && !fail; i++) {
    const void* srcs[RELAY_OS_MAX_ACTIVE];
    for (int j = 0; j < A; j++) srcs[j] = orig[j] + (k->rs ? (size_t)i * c * es : 0);
    if (k->gather)
      for (int j = 0; j < A; j++) memcpy(exp + (size_t)j * bytes, srcs[j], bytes);
    else relayHostReduce(exp, srcs, A, c, k->dt, k->op, k->op == relayAvg ? A : 0);
    if (memcmp(exp, dst[i], out * es) != 0) {
      size_t e = 0;
      while (memcmp(exp + e * es, (char*)dst[i] + e * es, es) == 0) e++;
      printf("FAIL %s: active %d element %zu differs from the reference\n", what, i, e);
      fail = 1;
      break;
    }
    fail = emulCheckBuffers(what, i, k->inPlace, k->gather, sbuf[i], sb, dbuf[i], db, src[i], dst[i], in * es,
                            out * es, orig[i], POISON);
  }
  free(exp);
  for (int i = 0; i < A; i++) {
    free(sbuf[i]);
    free(dbuf[i]);
    free(orig[i]);
  }
  g_cases++;
  return fail;
}

int main() {
  relayOsLayoutInit(&L, NR, (size_t)MAXC * 8);
  for (int r = 0; r < NR; r++)
    if (posix_memalign((void**)&region[r], 256, L.regionBytes)) return 1;
  /* The layout itself: slots inside the region, nothing overlapping. */
  if (L.countsOff < L.flagsOff + 2 * NR * RELAY_OS_MAX_BLOCKS * 8 || L.stagingOff % 256 ||
      L.llEpochsOff < L.stagingOff + 2 * NR * L.slotBytes ||
      L.llOff < L.llEpochsOff + NR * RELAY_OS_MAX_BLOCKS * 8 || L.llSlotBytes < 2 * L.llCap + 16 ||
      L.sentinelOff < L.llOff + 2 * NR * L.llSlotBytes || L.regionBytes < L.sentinelOff + 8 ||
      L.llCap < (size_t)MAXC * 8) {
    printf("FAIL: layout overlaps\n");
    return 1;
  }
  const size_t counts[] = {1, 7, 33, 1000, MAXC};
  const int As[] = {2, 3, 5, 8};
  int caseNo = 0;
  for (int ai = 0; ai < 4; ai++)
    for (int rs = 0; rs < 2; rs++)
      for (int ti = 0; ti < RI_NTYPES; ti++)
        for (int oi = 0; oi < 5; oi++) {
          relayDataType_t dt = riTypes[ti];
          relayRedOp_t op = riOps[oi];
          /* Every dtype x op at A = 2 and 8; A = 3 and 5 on fp32/bf16 sum/avg. */
          int wide = As[ai] == 2 || As[ai] == 8;
          if (!wide && !((dt == relayFloat32 || dt == relayBfloat16) && (op == relaySum || op == relayAvg)))
            continue;
          for (int ci = 0; ci < 5; ci++)
            for (int mode = 0; mode < 12; mode++) {
              ecase k;
              memset(&k, 0, sizeof k);
              k.ll = mode >= 8 ? 2 : mode >= 4 ? 1 : 0;
              k.A = As[ai];
              k.rs = rs;
              k.dt = dt;
              k.op = op;
              k.count = counts[ci];
              k.inPlace = mode % 4 == 3;
              k.mis = mode % 4 == 1 ? 1 : mode % 4 == 2 ? 2 : 0;
              k.gridMode = caseNo % 3;
              /* LL128 needs whole warps: one or two warps stand in for 7. */
              k.threads = caseNo % 5 == 0                ? (k.ll == 2 ? RELAY_GPU_WARP : 7)
                          : caseNo % 5 == 1 && k.ll == 2 ? 2 * RELAY_GPU_WARP
                                                         : 256;
              k.reverse = (caseNo / 3) % 2;
              k.wideAtPair = k.A == 2 && (caseNo / 7) % 2; /* half the A = 2 cases, across every other knob */
              if (runCase(&k, caseNo++)) return 1;
              /* The gather of the same input shape (all-gather for rs 0,
               * all-to-all for rs 1), once per dtype: no op. */
              if (oi != 0 || (k.rs && k.inPlace)) continue;
              k.gather = 1;
              k.op = relaySum;
              if (runCase(&k, caseNo++)) return 1;
            }
        }
  printf(
      "PASS: %ld emulated one-shot calls (push + reduce of every block, %d-lane warps) match "
      "relayHostReduce\n",
      g_cases, RELAY_GPU_WARP);
  for (int r = 0; r < NR; r++) free(region[r]);
  return 0;
}
