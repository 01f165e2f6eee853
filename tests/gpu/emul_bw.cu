/*
 * The bandwidth kernel's data path run on the host: bw.cu built with its host
 * runner, block b's push and consume of every item of every active rank
 * executed thread after thread, in the kernel's order (iteration j: every
 * rank consumes item j-1, then pushes item j), over host "regions" laid out
 * as on the GPU (the one-shot's region with the bw ring). Checks on a
 * machine without a GPU (CI) what the hand-shake cannot fix if it is wrong:
 * items (planBwItem: tiles, two-shot shards, empty tails), ring slots from
 * each pair's epoch, tile parts per block, 16-byte vectors and the scalar
 * tail, misaligned callers, in-place aliasing, the fold in active-index
 * order with the bits of relayHostReduce, the placement of gathers and of
 * the reduced shards. Nothing outside the caller's output and the ring's
 * staging may be written. The flags, acks, epochs and waits are device-only:
 * gputest_bw runs them.
 */
#define RELAY_BW_HOST_EMULATION 1
#include "transport/nccl/bw.cu"

#include <stdio.h>
#include <stdlib.h>

#include "comm/common.h"
#include "gpu/emul_check.h"
#include "gpu/reduce_inputs.h"
#include "reduce_host.h"

enum { NR = 8 };
#define POISON 0xCD

typedef struct {
  int A, coll, twoShot, inPlace, mis, threads, ring, wideAtPair;
  size_t tileBytes, count;
  relayDataType_t dt;
  relayRedOp_t op;
} bcase;

static long g_cases;

/* Active i's output against the serial reference of the actives' original
 * inputs (exp: scratch of out elements); 0 when equal, else 1 with a message. */
static int checkOut(const char* what, const bcase* k, const relayBwArgs* w, unsigned char* const* orig, int i,
                    unsigned char* exp) {
  const int A = k->A;
  const int rs = k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveAllToAll;
  const int gather = k->coll == relayCollectiveAllGather || k->coll == relayCollectiveAllToAll;
  const size_t c = k->count, es = relayTypeSize(k->dt), out = gather ? (size_t)A * c : c;
  const void* srcs[RELAY_OS_MAX_ACTIVE];
  for (int j = 0; j < A; j++) srcs[j] = orig[j] + (rs ? (size_t)i * c * es : 0);
  if (gather)
    for (int j = 0; j < A; j++) memcpy(exp + (size_t)j * c * es, srcs[j], c * es);
  else relayHostReduce(exp, srcs, A, c, k->dt, k->op, w[i].os.divisor);
  const unsigned char* dst = (const unsigned char*)w[i].os.dst;
  if (memcmp(exp, dst, out * es) == 0) return 0;
  size_t e = 0;
  while (memcmp(exp + e * es, dst + e * es, es) == 0) e++;
  printf("FAIL %s: active %d element %zu of %zu differs from the reference\n", what, i, e, out);
  return 1;
}

static int runCase(const bcase* k, int caseNo) {
  const int A = k->A;
  const int rs = k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveAllToAll;
  const int gather = k->coll == relayCollectiveAllGather || k->coll == relayCollectiveAllToAll;
  const size_t c = k->count, es = relayTypeSize(k->dt), in = rs ? (size_t)A * c : c,
               out = gather ? (size_t)A * c : c;
  relayOsLayout L;
  relayOsLayoutInit(&L, NR, 256);
  relayOsLayoutAddBw(&L, k->tileBytes, k->ring);
  unsigned char* region[NR];
  for (int r = 0; r < NR; r++) {
    if (posix_memalign((void**)&region[r], 256, L.regionBytes)) return 1;
    memset(region[r], POISON, L.regionBytes);
  }
  int ranks[NR];
  for (int i = 0; i < A; i++) ranks[i] = NR - 1 - i * (NR / A);
  unsigned char *sbuf[NR], *dbuf[NR], *orig[NR];
  void *src[NR], *dst[NR];
  size_t sb, db;
  if (emulSetupBuffers(A, c, k->dt, rs, gather, k->inPlace, k->mis, k->mis, (uint64_t)caseNo, POISON, sbuf,
                       dbuf, orig, src, dst, &sb, &db))
    return 1;
  relayBwArgs w[NR];
  u64 ep[NR][RELAY_OS_MAX_ACTIVE];
  for (int i = 0; i < A; i++) {
    relayOsArgs* a = &w[i].os;
    memset(&w[i], 0, sizeof w[i]);
    for (int j = 0; j < A; j++) {
      a->region[j] = (char*)region[ranks[j]];
      a->rank[j] = ranks[j];
      /* Pair epochs 3..9, different per pair and case: the ring's slots start anywhere. */
      int lo = i < j ? i : j, hi = i < j ? j : i;
      ep[i][j] = i == j ? 0 : 3 + (u64)((lo * 5 + hi * 3 + caseNo) % 7);
    }
    a->dst = dst[i];
    a->src = src[i];
    a->count = c;
    a->srcStride = rs ? c : 0;
    a->L = L;
    a->nActive = A;
    a->me = i;
    a->grid = RELAY_BW_BLOCKS;
    a->vec = (((uintptr_t)src[i] | (uintptr_t)dst[i] | (uintptr_t)(a->srcStride * es) |
               (uintptr_t)(gather ? c * es : 0)) &
              15u) == 0;
    a->gather = gather;
    a->divisor = relayCollReduces((relayCollective_t)k->coll) && k->op == relayAvg ? A : 0;
    a->elemSize = (int)es;
    w[i].tile = k->tileBytes / es;
    if (k->twoShot) {
      w[i].shard = planBwShard(c, A);
      w[i].T1 = (w[i].shard + w[i].tile - 1) / w[i].tile;
      w[i].U = 2 * w[i].T1;
    } else {
      w[i].U = (c + w[i].tile - 1) / w[i].tile;
    }
  }
  PickBwHost pick;
  pick.gather = gather;
  pick.pair = A == 2 && !k->wideAtPair;
  BwHostPhase run = visit(k->dt, gather ? relaySum : k->op, pick);
  char what[256];
  static const char* const names[RELAY_NUM_LAYOUT_COLLS] = {"all-gather", "reduce-scatter", "all-reduce",
                                                            "all-to-all"};
  snprintf(what, sizeof what, "A=%d%s %s%s %s %s count=%zu tile=%zu B ring=%d %s mis=%d threads=%d", A,
           pick.pair ? " (pair kernels)" : "", names[k->coll], k->twoShot ? " two-shot" : "",
           relayTypeName(k->dt), relayOpName(k->op), c, k->tileBytes, k->ring,
           k->inPlace ? "in-place" : "out-of-place", k->mis, k->threads);
  if (!run) {
    printf("FAIL %s: no host runner\n", what);
    return 1;
  }
  const uint64_t U = w[0].U;
  for (uint64_t j = 0; j <= U; j++)
    for (int phase = 1; phase >= 0; phase--) { /* consume item j-1, then push item j */
      if ((phase == 1 && j == 0) || (phase == 0 && j == U)) continue;
      uint64_t u = phase == 1 ? j - 1 : j;
      for (int i = 0; i < A; i++)
        for (int b = 0; b < RELAY_BW_BLOCKS; b++)
          for (int t = 0; t < k->threads; t++) run(w[i], ep[i], u, b, t, k->threads, phase);
    }
  int fail = 0;
  /* Regions: nothing written outside the ring's staging (the words are the device's). */
  for (int r = 0; r < NR && !fail; r++)
    for (size_t x = 0; x < L.regionBytes; x++)
      if ((x < L.bwStagingOff || x >= L.bwStagingOff + (size_t)NR * k->ring * L.bwTileBytes) &&
          region[r][x] != POISON) {
        printf("FAIL %s: rank %d's region written at byte %zu, outside the bw staging\n", what, r, x);
        fail = 1;
        break;
      }
  unsigned char* exp = (unsigned char*)malloc(out * es + 1);
  for (int i = 0; i < A && !fail; i++) {
    if ((fail = checkOut(what, k, w, orig, i, exp))) break;
    fail = emulCheckBuffers(what, i, k->inPlace, gather, sbuf[i], sb, dbuf[i], db, src[i], dst[i], in * es,
                            out * es, orig[i], POISON);
  }
  free(exp);
  for (int i = 0; i < A; i++) {
    free(sbuf[i]);
    free(dbuf[i]);
    free(orig[i]);
  }
  for (int r = 0; r < NR; r++) free(region[r]);
  g_cases++;
  return fail;
}

/* The direct path (registered windows): every active's send and recv in one
 * window per rank, at the same offsets on every rank ([guard][send][guard]
 * [recv][guard]), peers' buffers reached through win[] + sendOff / recvOff as
 * bwDirectMove does after its entry flags. Parts run in the kernel's order:
 * every block's part 0 on every active, then part 1 (an all-reduce's stores
 * of its folded shard into the peers' recv). Checks the output against the
 * serial reference, the send unchanged out of place, and every other byte of
 * every window still poison. */
static long g_direct;

static int runDirectCase(const bcase* k, int caseNo) {
  const int A = k->A;
  const int rs = k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveAllToAll;
  const int gather = k->coll == relayCollectiveAllGather || k->coll == relayCollectiveAllToAll;
  const size_t c = k->count, es = relayTypeSize(k->dt), in = rs ? (size_t)A * c : c,
               out = gather ? (size_t)A * c : c;
  const size_t G = EMUL_GUARD, mis = k->mis ? es : 0;
  const size_t sendOff = G + mis, recvOff = G + in * es + 16 + G + mis, W = recvOff + out * es + 16 + G;
  unsigned char* win[NR];
  unsigned char* orig[NR];
  relayBwArgs w[NR];
  for (int i = 0; i < A; i++) {
    if (posix_memalign((void**)&win[i], 256, W)) return 1;
    orig[i] = (unsigned char*)malloc(in * es + 1);
    if (!orig[i]) return 1;
    memset(win[i], POISON, W);
  }
  for (int i = 0; i < A; i++) {
    relayOsArgs* a = &w[i].os;
    memset(&w[i], 0, sizeof w[i]);
    unsigned char* src = win[i] + sendOff;
    unsigned char* dst = win[i] + recvOff;
    /* In place: a gather's send is block i of its recv; a reduce's recv is its send (block i when blocked).
     */
    if (gather && k->inPlace) src = dst + (size_t)i * c * es;
    if (!gather && k->inPlace) dst = src + (rs ? (size_t)i * c * es : 0);
    riFill(src, in, k->dt, (uint64_t)caseNo * 1000003u + (uint64_t)i * 7919u);
    memcpy(orig[i], src, in * es);
    for (int j = 0; j < A; j++) w[i].win[j] = (char*)win[j];
    w[i].sendOff = (uint64_t)(src - win[i]);
    w[i].recvOff = (uint64_t)(dst - win[i]);
    w[i].winId = 1;
    a->dst = dst;
    a->src = src;
    a->count = c;
    a->srcStride = rs ? c : 0;
    a->nActive = A;
    a->me = i;
    a->grid = RELAY_BW_BLOCKS;
    a->vec =
        ((w[i].sendOff | w[i].recvOff | (uint64_t)(a->srcStride * es) | (uint64_t)(gather ? c * es : 0)) &
         15u) == 0;
    a->gather = gather;
    a->divisor = relayCollReduces((relayCollective_t)k->coll) && k->op == relayAvg ? A : 0;
    a->elemSize = (int)es;
  }
  PickBwDirectHost pick;
  pick.gather = gather;
  pick.pair = A == 2 && !k->wideAtPair;
  BwDirectHostPart run = visit(k->dt, gather ? relaySum : k->op, pick);
  char what[256];
  static const char* const names[RELAY_NUM_LAYOUT_COLLS] = {"all-gather", "reduce-scatter", "all-reduce",
                                                            "all-to-all"};
  snprintf(what, sizeof what, "direct A=%d%s %s %s %s count=%zu %s mis=%d threads=%d", A,
           pick.pair ? " (pair kernels)" : "", names[k->coll], relayTypeName(k->dt), relayOpName(k->op), c,
           k->inPlace ? "in-place" : "out-of-place", k->mis, k->threads);
  if (!run) {
    printf("FAIL %s: no host runner\n", what);
    return 1;
  }
  for (int part = 0; part < 2; part++)
    for (int i = 0; i < A; i++)
      for (int b = 0; b < RELAY_BW_BLOCKS; b++)
        for (int t = 0; t < k->threads; t++) run(w[i], b, t, k->threads, part);
  int fail = 0;
  unsigned char* exp = (unsigned char*)malloc(out * es + 1);
  for (int i = 0; i < A && !fail; i++) {
    const unsigned char* dst = (const unsigned char*)w[i].os.dst;
    const unsigned char* src = (const unsigned char*)w[i].os.src;
    if ((fail = checkOut(what, k, w, orig, i, exp))) break;
    if (!k->inPlace && memcmp(src, orig[i], in * es) != 0) {
      printf("FAIL %s: active %d's send changed\n", what, i);
      fail = 1;
      break;
    }
    /* In place the recv lies in the send (reduce) or holds it (gather): the union is what may differ. */
    const unsigned char* lo = src < dst ? src : dst;
    const unsigned char* hi = src + in * es > dst + out * es ? src + in * es : dst + out * es;
    for (const unsigned char* p = win[i]; p < win[i] + W && !fail; p++)
      if ((k->inPlace ? (p < lo || p >= hi)
                      : (p < src || p >= src + in * es) && (p < dst || p >= dst + out * es)) &&
          *p != POISON) {
        printf("FAIL %s: active %d's window written at byte %td, outside its send and recv\n", what, i,
               p - win[i]);
        fail = 1;
      }
  }
  free(exp);
  for (int i = 0; i < A; i++) {
    free(win[i]);
    free(orig[i]);
  }
  g_direct++;
  return fail;
}

int main() {
  /* Counts around and between tiles (1 KiB and 4 KiB tiles: 256 / 1024 fp32),
   * a few shapes of every collective, dtype and width; tiles of 64 B too. */
  const size_t counts[] = {1, 37, 1000, 4099};
  const int As[] = {2, 3, 5, 8};
  const relayDataType_t dts[] = {relayFloat32, relayBfloat16, relayInt8, relayFloat64};
  const relayRedOp_t ops[] = {relaySum, relayAvg, relayMax};
  unsigned long long rng = 42;
  int caseNo = 0;
  for (int ai = 0; ai < 4; ai++)
    for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
      for (int di = 0; di < 4; di++)
        for (int ci = 0; ci < 4; ci++) {
          bcase k;
          memset(&k, 0, sizeof k);
          k.A = As[ai];
          k.coll = coll;
          k.dt = dts[di];
          int gather = coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll;
          k.op = gather ? relaySum : ops[(ci + ai) % 3];
          if (k.op == relayAvg && (k.dt == relayInt8)) k.op = relayMax; /* avg of ints: not a relaycc op */
          /* The builder's form (two-shot for all-reduce at A > 2), and the
           * other one on every second all-reduce (the kernel serves both). */
          k.twoShot = coll == relayCollectiveAllReduce && ((k.A > 2) != (caseNo % 2 == 1));
          k.count = counts[ci];
          rng = riMix(rng);
          /* 64-byte tiles only where they stay under ~160 tiles (host time). */
          k.tileBytes = rng % 3 == 0 && k.count * relayTypeSize(k.dt) <= 10240 ? 64
                        : rng % 3 == 1                                         ? 1024
                                                                               : 4096;
          k.ring = 1 + (int)((rng >> 8) % 3);
          k.inPlace = (rng >> 12) % 3 == 0 && coll != relayCollectiveAllToAll;
          k.mis = (rng >> 16) % 4 == 0;
          k.threads = (rng >> 20) % 2 ? RELAY_GPU_WARP : 2 * RELAY_GPU_WARP;
          k.wideAtPair = k.A == 2 && (rng >> 24) % 2;
          if (runCase(&k, caseNo) || runDirectCase(&k, caseNo)) return 1;
          caseNo++;
        }
  printf(
      "PASS: %ld emulated bw calls (every item's push and consume of every block) and %ld direct-path calls "
      "(registered windows) match relayHostReduce\n",
      g_cases, g_direct);
  return 0;
}
