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
 * wavefront (-DRELAY_GPU_WARP=64: LL128's lanes and lines per warp). Rooted calls (broadcast, reduce:
 * rootedRows) run back to back under a model of the kernel's waits, tokens included (runRooted says how).
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

static long g_cases, g_rooted, g_rootedCalls;

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
    a[i].root = -1;
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

/* ---- rooted calls: broadcast and reduce --------------------------------- */

/* Rooted calls (oneshot.h relayOsPairs) run the kernel's push and reduce phases of every block under a
 * scheduler that models its waits, over back-to-back calls: a rank's call starts when its previous call
 * ended (stream order); its reduce phase runs once every root-pair peer pushed this call (its data or its
 * token: the device waits for it); in the flag protocol a push also waits until the peer finished the
 * call two back (the acknowledgement of pair epoch e-2). A slow reader (a broadcast's member, a reduce's
 * root) runs only when no other rank can: the writers then run as far ahead as the protocol lets them,
 * and every call's output is checked, so a push that overwrote lines its reader had not consumed shows
 * as a missing line or a wrong output. A late peer never starts the last call: whoever waits for it
 * gives up (the host's stand-in for the deadline) and records the error word naming it. */
enum { RMAXCALLS = 40 };

typedef struct {
  int ll;         /* 0 flags, 1 LL, 2 LL128, 3 LL and LL128 by turns (they share lines and epochs) */
  int bcast;      /* 1 broadcast (the gather kernels), 0 reduce */
  int A, nGroups; /* nGroups 2: fused groups on disjoint ranks (A <= 4), each with its own root */
  int root[2];    /* call 0's; call n's is root + n * rootStep (mod A) */
  int rootStep;   /* 0: one root for every call; else pairs' epochs drift apart call by call */
  relayDataType_t dt;
  relayRedOp_t op;
  size_t count;
  int inPlace;  /* src == dst on every rank */
  int nullBufs; /* out of place: a broadcast member's src and a reduce member's dst are NULL */
  int mis;      /* 1: every src and dst one element past 16-byte alignment (no vectors) */
  int calls;
  int slow; /* group 0's reader (a broadcast's member root+1, a reduce's root) is slow */
  int late; /* >= 0: group 0's active that never starts the last call (LL protocols) */
  int threads, gridMode, reverse, wideAtPair;
} rcase;

typedef struct {
  int g, i;         /* group and active index; g < 0: in no group */
  int next, phase;  /* the call it runs, 0 push / 1 reduce; next == calls: done */
  int pushed, done; /* calls pushed, calls ended */
  int failed;       /* its reduce phase of call `next` found a wait unanswered */
  relayOsArgs a;    /* the running call's */
  u64 ep[RELAY_OS_MAX_ACTIVE];
  unsigned long long hostErr;
  unsigned char *sbuf[RMAXCALLS], *dbuf[RMAXCALLS], *orig[RMAXCALLS];
  void *src[RMAXCALLS], *dst[RMAXCALLS];
} rrank;

static const int kPerm[NR] = {6, 1, 7, 3, 0, 5, 2, 4}; /* group g's active i is comm rank kPerm[g * A + i] */

static int rProto(const rcase* k, int call) { return k->ll == 3 ? 1 + (call & 1) : k->ll; }
static int rRoot(const rcase* k, int g, int call) { return (k->root[g] + call * k->rootStep) % k->A; }
/* The flag protocol's push of `call` to active j waits for j's acknowledgement of pair epoch e-2: the call
 * two paired calls of the pair back (with a moving root pairs skip calls), -1 when there is none. */
static int rAckCall(const rcase* k, int g, int i, int j, int call) {
  int seen = 0;
  for (int c = call - 1; c >= 0; c--) {
    const int root = rRoot(k, g, c);
    if ((root == i || root == j) && ++seen == 2) return c;
  }
  return -1;
}

/* The grid of a call: LL's is the agreed block count, whatever the size (per-block epochs). */
static int rGrid(const rcase* k, int proto, size_t bytes) {
  if (k->gridMode == 1) return 1;
  if (k->gridMode == 2) return 3;
  return proto ? RELAY_OS_DEFAULT_BLOCKS : relayOsGrid(bytes, RELAY_OS_DEFAULT_BLOCKS);
}

/* The reader the slow case delays (group 0): a broadcast's member after the root, a reduce's root. */
static int rReader(const rcase* k) { return k->bcast ? (k->root[0] + 1) % k->A : k->root[0]; }

static int runRooted(const rcase* k, int caseNo) {
  const int A = k->A, G = k->nGroups;
  const size_t c = k->count, es = relayTypeSize(k->dt), bytes = c * es;
  char what[256];
  snprintf(what, sizeof what,
           "#%d rooted %s %s A=%d%s groups=%d root=%d,%d step %d %s %s count=%zu %s%s%s calls=%d%s late=%d "
           "threads=%d grid mode %d%s",
           caseNo,
           k->ll == 3   ? "LL+LL128"
           : k->ll == 2 ? "LL128"
           : k->ll      ? "LL"
                        : "flags",
           k->bcast ? "broadcast" : "reduce", A, A == 2 && !k->wideAtPair ? " (pair kernels)" : "", G,
           k->root[0], G > 1 ? k->root[1] : -1, k->rootStep, relayTypeName(k->dt),
           k->bcast ? "-" : relayOpName(k->op), c, k->inPlace ? "in-place" : "out-of-place",
           k->nullBufs ? " NULL-buffers" : "", k->mis ? " misaligned" : "", k->calls,
           k->slow ? " slow-reader" : "", k->late, k->threads, k->gridMode, k->reverse ? " reverse" : "");
  static rrank R[NR];
  static u64 E[2][NR][NR]; /* pair epochs: [0] the flag protocol's, [1] LL's and LL128's */
  memset(E, 0, sizeof E);
  const u64 base = (u64)(caseNo % 5); /* both parities first, and epochs that do not start at 1 */
  for (int x = 0; x < NR; x++)
    for (int y = 0; y < NR; y++) E[0][x][y] = E[1][x][y] = base;
  /* Regions: poison, but the error words (zero on the GPU: the comm has not failed). */
  for (int r = 0; r < NR; r++) {
    memset(region[r], POISON, L.regionBytes);
    memset(region[r] + L.rerrOff, 0, (size_t)NR * 8);
    memset(region[r] + L.ctlOff + 8, 0, 8);
  }
  unsigned char* want[NR];
  for (int r = 0; r < NR; r++) {
    want[r] = (unsigned char*)malloc(L.regionBytes);
    memcpy(want[r], region[r], L.regionBytes);
  }
  int rankOf[2][NR];
  for (int r = 0; r < NR; r++) {
    memset(&R[r], 0, sizeof R[r]);
    R[r].g = -1;
  }
  for (int g = 0; g < G; g++)
    for (int i = 0; i < A; i++) {
      int r = kPerm[g * A + i];
      rankOf[g][i] = r;
      R[r].g = g;
      R[r].i = i;
    }
  /* Caller buffers per rank and call: [guard][count][guard], inputs seeded by call, group and active. */
  for (int r = 0; r < NR; r++) {
    rrank* x = &R[r];
    if (x->g < 0) continue;
    const int mis = k->mis ? (int)es : 0;
    for (int call = 0; call < k->calls; call++) {
      const int isRoot = x->i == rRoot(k, x->g, call);
      size_t sb = 2 * EMUL_GUARD + bytes + 16;
      if (posix_memalign((void**)&x->sbuf[call], 256, sb) || posix_memalign((void**)&x->dbuf[call], 256, sb))
        return 1;
      x->orig[call] = (unsigned char*)malloc(bytes + 1);
      memset(x->sbuf[call], POISON, sb);
      memset(x->dbuf[call], POISON, sb);
      x->src[call] = x->sbuf[call] + EMUL_GUARD + mis;
      riFill(
          x->src[call], c, k->dt,
          (uint64_t)caseNo * 1000003u + (uint64_t)call * 7919u + (uint64_t)x->g * 131u + (uint64_t)x->i + 1);
      memcpy(x->orig[call], x->src[call], bytes);
      x->dst[call] = k->inPlace ? x->src[call] : (void*)(x->dbuf[call] + EMUL_GUARD + mis);
      if (k->nullBufs && !k->inPlace && !isRoot) {
        if (k->bcast) x->src[call] = NULL; /* a member's sendbuff is never read */
        else x->dst[call] = NULL;          /* a member's recvbuff is never written */
      }
    }
  }
  PickHost pick;
  pick.gather = k->bcast;
  pick.pair = A == 2 && !k->wideAtPair;
  OsHostPhase run = visit(k->dt, k->bcast ? relaySum : k->op, pick);
  if (!run) {
    printf("FAIL %s: no host runner\n", what);
    return 1;
  }
  /* With a moving root the slow rank is call 0's reader: a reader or a writer by turns. */
  const int slowRank = k->slow ? rankOf[0][rReader(k)] : -1;
  const int lateRank = k->late >= 0 ? rankOf[0][k->late] : -1;
  int maxLead = 0, fail = 0, deadlines = 0;
  for (;;) {
    /* Writers to the slow reader: how many calls ahead of its consumption they pushed. */
    if (slowRank >= 0 && !k->rootStep)
      for (int i = 0; i < A; i++) {
        int w = rankOf[0][i];
        if (w == slowRank || !(k->bcast ? i == k->root[0] : R[slowRank].i == k->root[0])) continue;
        int lead = R[w].pushed - R[slowRank].done;
        if (lead > maxLead) maxLead = lead;
      }
    /* The next step: any rank but the slow one that can go (rotating), else the slow one. */
    int pick1 = -1;
    for (int pass = 0; pass < 2 && pick1 < 0; pass++)
      for (int t = 0; t < NR && pick1 < 0; t++) {
        int r = (t + caseNo) % NR;
        rrank* x = &R[r];
        if (x->g < 0 || x->failed || x->next >= k->calls || (pass == 0) == (r == slowRank)) continue;
        if (r == lateRank && x->next == k->calls - 1) continue; /* never starts it */
        const int proto = rProto(k, x->next);
        int ok = 1;
        for (int j = 0; j < A && ok; j++) {
          int q = rankOf[x->g][j];
          const int root = rRoot(k, x->g, x->next);
          if (j == x->i || !(root == x->i || root == j)) continue; /* root pairs only */
          if (x->phase == 0) ok = proto != 0 || R[q].done > rAckCall(k, x->g, x->i, j, x->next); /* ack e-2 */
          else ok = R[q].pushed >= x->next + 1; /* its push (data or token) */
        }
        if (ok) pick1 = r;
      }
    if (pick1 < 0) {
      int left = 0;
      for (int r = 0; r < NR; r++)
        if (R[r].g >= 0 && !R[r].failed && R[r].next < k->calls &&
            !(r == lateRank && R[r].next == k->calls - 1))
          left++;
      if (!left) break;
      if (lateRank < 0) {
        printf("FAIL %s: the modelled waits deadlock\n", what);
        fail = 1;
        break;
      }
      /* Only the late peer's waiters are left: their deadline comes; they run their reduce phase without it.
       */
      for (int r = 0; r < NR && pick1 < 0; r++)
        if (R[r].g >= 0 && !R[r].failed && R[r].next < k->calls && R[r].phase == 1) pick1 = r;
      if (pick1 < 0) {
        printf("FAIL %s: a rank waits on the late peer before its own push\n", what);
        fail = 1;
        break;
      }
      deadlines++;
    }
    rrank* x = &R[pick1];
    const int g = x->g, me = x->i, call = x->next, proto = rProto(k, call);
    if (x->phase == 0) {
      /* The launch: the arguments host code builds (region.c relayNcclOsArgs), the epochs the kernel reads.
       */
      relayOsArgs* a = &x->a;
      memset(a, 0, sizeof *a);
      for (int j = 0; j < A; j++) {
        a->region[j] = (char*)region[rankOf[g][j]];
        a->rank[j] = rankOf[g][j];
        x->ep[j] = j == me ? 0 : E[proto != 0][pick1][rankOf[g][j]] + 1;
      }
      a->dst = x->dst[call];
      a->src = x->src[call];
      a->count = c;
      a->L = L;
      a->nActive = A;
      a->me = me;
      a->grid = rGrid(k, proto, bytes);
      a->vec = (((uintptr_t)a->src | (uintptr_t)a->dst) & 15u) == 0;
      a->gather = k->bcast;
      a->divisor = !k->bcast && k->op == relayAvg ? A : 0;
      a->elemSize = (int)es;
      a->ll = proto;
      a->root = rRoot(k, g, call);
      a->hostErr = &x->hostErr;
      if (proto == 2 && relayOsLL128Bytes(c, a->grid, (int)es) > L.llSlotBytes) {
        printf("FAIL %s: LL128 lines overflow the LL slot\n", what);
        fail = 1;
        break;
      }
      for (int bi = 0; bi < a->grid; bi++) {
        int b = k->reverse ? a->grid - 1 - bi : bi;
        for (int t = 0; t < k->threads; t++) run(*a, x->ep, b, t, k->threads, 0);
      }
      /* What the push left in each peer's region, as expected at the end. */
      for (int j = 0; j < A; j++) {
        if (j == me || !relayOsPairs(a, j)) continue;
        unsigned char* w = want[rankOf[g][j]];
        const int par = (int)(x->ep[j] & 1);
        if (!relayOsPushesTo(a, j)) {
          if (proto) memset(w + relayOsLLOff(&L, par, pick1), 0, 16); /* the token, consumed */
          continue;
        }
        if (proto == 0) {
          memcpy(w + relayOsStagingOff(&L, par, pick1), x->orig[call], bytes);
        } else if (proto == 1) {
          memset(w + relayOsLLOff(&L, par, pick1), 0, (bytes + 7) / 8 * 16);
        } else {
          for (int b = 0; b < a->grid; b++) {
            uint64_t lo, hi;
            relayOsRange(c, a->grid, (int)es, b, &lo, &hi);
            if (hi <= lo) continue;
            u64 nl = ((hi - lo) * es + RELAY_OS_LL128_DATA - 1) / RELAY_OS_LL128_DATA;
            memset(w + relayOsLLOff(&L, par, pick1) + (u64)b * relayOsLL128Lines(c, a->grid, (int)es) * 128,
                   0, nl * 128);
          }
        }
      }
      x->pushed++;
      x->phase = 1;
      continue;
    }
    int ok = 1;
    osHostLookedAt = 0;
    for (int bi = 0; bi < x->a.grid; bi++) {
      int b = k->reverse ? x->a.grid - 1 - bi : bi;
      for (int t = 0; t < k->threads; t++) ok &= run(x->a, x->ep, b, t, k->threads, 1);
    }
    /* The model let this phase run only after every root-pair peer pushed (data or token): LL's kernel must
     * itself wait for each of them (llFetch), or on the device nothing would hold it and its next calls
     * would overwrite lines a slow reader had not consumed (the flag protocol's waits are device code). Count
     * 0 is exempt: the kernel never launches then (oneshot.c), and a member with no data would wait on none.
     */
    for (int j = 0; j < A && ok && proto && c; j++)
      if (j != me && relayOsPairs(&x->a, j) && !(osHostLookedAt & (1u << j))) {
        printf("FAIL %s: active %d of group %d (rank %d) never waited for active %d's push in call %d\n",
               what, me, g, pick1, j, call);
        fail = 1;
      }
    if (fail) break;
    if (!ok) {
      x->failed = 1;
      if (!deadlines) {
        printf("FAIL %s: active %d of group %d (rank %d) found a line or token missing in call %d\n", what,
               me, g, pick1, call);
        fail = 1;
        break;
      }
      continue;
    }
    for (int j = 0; j < A; j++)
      if (j != me && relayOsPairs(&x->a, j)) E[proto != 0][pick1][rankOf[g][j]] = x->ep[j];
    x->done++;
    x->next++;
    x->phase = 0;
  }
  /* The slow reader held its writers exactly one call ahead: the second parity set, never a third call. */
  if (!fail && slowRank >= 0 && !k->rootStep && k->calls >= 3 && maxLead != 2) {
    printf("FAIL %s: the writers ran %d calls ahead of the slow reader (want 2)\n", what, maxLead);
    fail = 1;
  }
  /* A late peer: exactly its root pairs' other ends gave up, each with the error word naming it. */
  if (!fail && lateRank >= 0) {
    const rrank* lt = &R[lateRank];
    for (int i = 0; i < A && !fail; i++) {
      int r = rankOf[0][i];
      if (r == lateRank) continue;
      const rrank* x = &R[r];
      const int lroot = rRoot(k, 0, k->calls - 1), waits = i == lroot || lt->i == lroot; /* a root pair */
      if (waits != x->failed) {
        printf("FAIL %s: rank %d %s (it %s the late rank %d)\n", what, r, x->failed ? "gave up" : "finished",
               waits ? "waits on" : "does not wait on", lateRank);
        fail = 1;
        break;
      }
      if (!waits) continue;
      u64 w = 0;
      memcpy(&w, region[r] + L.ctlOff + 8, 8);
      const u64 e = E[rProto(k, k->calls - 1) != 0][r][lateRank] + 1;
      if (relayOsErrCode(w) != RELAY_OS_ERR_FLAG || relayOsErrPeer(w) != (unsigned)lateRank ||
          relayOsErrEpoch(w) != (unsigned)(e & 0xffffffffu) || x->hostErr != w) {
        printf("FAIL %s: rank %d's error word %#llx (host %#llx): want code %d naming rank %d, epoch %llu\n",
               what, r, (unsigned long long)w, x->hostErr, RELAY_OS_ERR_FLAG, lateRank,
               (unsigned long long)e);
        fail = 1;
      }
      for (int j = 0; j < A && !fail; j++) {
        u64 rw = 0;
        memcpy(&rw, region[rankOf[0][j]] + relayOsRerrOff(&L, r), 8);
        if (j != i && rw != w) {
          printf("FAIL %s: rank %d's failure not in rank %d's rerr (%#llx)\n", what, r, rankOf[0][j],
                 (unsigned long long)rw);
          fail = 1;
        }
      }
    }
  }
  /* Regions: exactly what the pushes left (LL lines and tokens consumed, so zero); no late peer: nothing
   * else. */
  for (int r = 0; r < NR && !fail && lateRank < 0; r++)
    if (memcmp(want[r], region[r], L.regionBytes) != 0) {
      size_t b = 0;
      while (want[r][b] == region[r][b]) b++;
      printf("FAIL %s: region of rank %d differs at byte %zu (LL area at %llu, slot %llu)\n", what, r, b,
             (unsigned long long)L.llOff, (unsigned long long)L.llSlotBytes);
      fail = 1;
    }
  /* Outputs of every call a rank finished: a broadcast's root block everywhere, a reduce's fold in
   * active-index order at its root (relayHostReduce: the serial reference); members' outputs untouched;
   * inputs unchanged. */
  unsigned char* exp = (unsigned char*)malloc(bytes + 1);
  for (int r = 0; r < NR && !fail; r++) {
    rrank* x = &R[r];
    if (x->g < 0) continue;
    for (int call = 0; call < x->done && !fail; call++) {
      const int root = rRoot(k, x->g, call), isRoot = x->i == root;
      const unsigned char* rootIn = R[rankOf[x->g][root]].orig[call];
      const int written = k->bcast || isRoot;
      if (k->bcast) memcpy(exp, rootIn, bytes);
      else if (isRoot) {
        const void* srcs[RELAY_OS_MAX_ACTIVE];
        for (int j = 0; j < A; j++) srcs[j] = R[rankOf[x->g][j]].orig[call];
        relayHostReduce(exp, srcs, A, c, k->dt, k->op, k->op == relayAvg ? A : 0);
      } else memcpy(exp, x->orig[call], bytes); /* in place: its input, unchanged */
      if (x->dst[call] && (written || k->inPlace) && memcmp(exp, x->dst[call], bytes) != 0) {
        size_t e = 0;
        while (memcmp(exp + e * es, (char*)x->dst[call] + e * es, es) == 0) e++;
        printf("FAIL %s: call %d, group %d active %d (rank %d): element %zu differs from the reference\n",
               what, call, x->g, x->i, r, e);
        fail = 1;
        break;
      }
      /* Around the buffers: poison; out of place the input unchanged and a member's dst unwritten. */
      const size_t sb = 2 * EMUL_GUARD + bytes + 16;
      const unsigned char* dlo = x->dst[call] ? (const unsigned char*)x->dst[call] : x->dbuf[call];
      const int dOwn = x->dst[call] && written && !k->inPlace;
      for (size_t b = 0; b < sb && !fail; b++) {
        const unsigned char* p = x->dbuf[call] + b;
        if ((!dOwn || p < dlo || p >= dlo + bytes) && *p != POISON) {
          printf("FAIL %s: call %d, rank %d wrote outside its output (dbuf byte %zu)\n", what, call, r, b);
          fail = 1;
        }
      }
      const unsigned char* slo = x->sbuf[call] + EMUL_GUARD + (k->mis ? es : 0);
      for (size_t b = 0; b < sb && !fail; b++) {
        const unsigned char* p = x->sbuf[call] + b;
        if ((p < slo || p >= slo + bytes) && *p != POISON) {
          printf("FAIL %s: call %d, rank %d wrote around its input (sbuf byte %zu)\n", what, call, r, b);
          fail = 1;
        }
      }
      if (!fail && (!k->inPlace || !written) && memcmp(slo, x->orig[call], bytes) != 0) {
        printf("FAIL %s: call %d, rank %d's input changed\n", what, call, r);
        fail = 1;
      }
    }
    /* Every rank but a late peer's waiters and the late peer finished every call. */
    if (!fail && lateRank < 0 && x->done != k->calls) {
      printf("FAIL %s: rank %d finished %d of %d calls\n", what, r, x->done, k->calls);
      fail = 1;
    }
  }
  free(exp);
  for (int r = 0; r < NR; r++) {
    free(want[r]);
    for (int call = 0; call < k->calls; call++) {
      free(R[r].sbuf[call]);
      free(R[r].dbuf[call]);
      free(R[r].orig[call]);
      R[r].sbuf[call] = R[r].dbuf[call] = R[r].orig[call] = NULL;
    }
  }
  g_rooted++;
  g_rootedCalls += k->calls;
  return fail;
}

/* Every rooted row: A = 2..8 with the root at every position, every protocol (and LL with LL128 by turns),
 * broadcast and reduce, back-to-back calls with a slow reader; every dtype x op; fused groups; a late peer.
 */
static int rootedRows(void) {
  const size_t counts[] = {0, 1, 7, 33, 1000, MAXC};
  int n = 0;
  rcase k;
  for (int ll = 0; ll < 4; ll++)
    for (int bcast = 0; bcast < 2; bcast++)
      for (int A = 2; A <= NR; A++)
        for (int root = 0; root < A; root++) {
          memset(&k, 0, sizeof k);
          k.ll = ll;
          k.bcast = bcast;
          k.A = A;
          k.nGroups = 1;
          k.root[0] = root;
          k.dt = riTypes[n % RI_NTYPES];
          k.op = riOps[(n / 3) % 5];
          k.count = counts[n % 6];
          k.inPlace = (n / 2) % 3 == 0;
          k.nullBufs = (n / 2) % 3 == 1;
          k.mis = n % 7 == 3 && !k.inPlace;
          k.calls = 3 + n % 3;
          k.slow = 1;
          k.late = -1;
          k.threads = n % 4 == 0              ? (ll >= 2 ? RELAY_GPU_WARP : 7)
                      : n % 4 == 1 && ll >= 2 ? 2 * RELAY_GPU_WARP
                                              : 256;
          k.gridMode = n % 3;
          k.reverse = (n / 5) % 2;
          k.wideAtPair = A == 2 && (n / 7) % 2;
          if (runRooted(&k, n++)) return 1;
        }
  /* Every dtype x op (reduce) and dtype (broadcast), A = 2 and 8, root moving, protocols by turns. */
  for (int ti = 0; ti < RI_NTYPES; ti++)
    for (int oi = 0; oi < 6; oi++)
      for (int ai = 0; ai < 2; ai++) {
        memset(&k, 0, sizeof k);
        k.bcast = oi == 5;
        k.ll = (ti + oi + ai) % 4;
        k.A = ai ? 8 : 2;
        k.nGroups = 1;
        k.root[0] = (ti + oi) % k.A;
        k.dt = riTypes[ti];
        k.op = riOps[oi % 5];
        k.count = oi % 2 ? MAXC : 1000 + (size_t)ti;
        k.inPlace = (ti + oi) % 2;
        k.calls = 2;
        k.late = -1;
        k.threads = k.ll >= 2 ? 2 * RELAY_GPU_WARP : 256;
        if (runRooted(&k, n++)) return 1;
      }
  /* Fused groups on disjoint ranks, each with its own root, slow readers in group 0. */
  for (int A = 2; A <= 4; A++)
    for (int ll = 0; ll < 4; ll++)
      for (int bcast = 0; bcast < 2; bcast++) {
        memset(&k, 0, sizeof k);
        k.ll = ll;
        k.bcast = bcast;
        k.A = A;
        k.nGroups = 2;
        k.root[0] = (A + ll) % A;
        k.root[1] = (A + ll + 1) % A;
        k.dt = bcast ? relayBfloat16 : relayFloat32;
        k.op = ll % 2 ? relayAvg : relaySum;
        k.count = ll % 2 ? 1000 : 33;
        k.inPlace = bcast;
        k.calls = 4;
        k.slow = 1;
        k.late = -1;
        k.threads = ll >= 2 ? RELAY_GPU_WARP : 7;
        k.gridMode = ll % 3;
        if (runRooted(&k, n++)) return 1;
      }
  /* Many back-to-back calls: 36 with one root and a slow reader, 40 with the root moving every call (pairs'
   * epochs drift apart, each pair on its own parity), at A = 2, 3 and 8, every protocol. */
  for (int ll = 0; ll < 4; ll++)
    for (int bcast = 0; bcast < 2; bcast++)
      for (int ai = 0; ai < 3; ai++)
        for (int moving = 0; moving < 2; moving++) {
          memset(&k, 0, sizeof k);
          k.ll = ll;
          k.bcast = bcast;
          k.A = ai == 0 ? 2 : ai == 1 ? 3 : 8;
          k.nGroups = 1;
          k.root[0] = (ll + ai) % k.A;
          k.rootStep = moving ? 1 + ai % 2 : 0;
          k.dt = bcast ? relayFloat16 : relayBfloat16;
          k.op = moving ? relayAvg : relayMax;
          k.count = moving ? 33 : 1000;
          k.inPlace = moving;
          k.calls = moving ? 40 : 36;
          k.slow = 1;
          k.late = -1;
          k.threads = ll >= 2 ? RELAY_GPU_WARP : 64;
          k.gridMode = moving ? 2 : 0;
          if (runRooted(&k, n++)) return 1;
        }
  /* A late peer (the root, or a member) never starts the last call: its root pairs give up, naming it. */
  for (int ll = 1; ll <= 2; ll++)
    for (int bcast = 0; bcast < 2; bcast++)
      for (int A = 2; A <= 5; A += 3)
        for (int lateRoot = 0; lateRoot < 2; lateRoot++) {
          memset(&k, 0, sizeof k);
          k.ll = ll;
          k.bcast = bcast;
          k.A = A;
          k.nGroups = 1;
          k.root[0] = A - 1;
          k.late = lateRoot ? A - 1 : 0;
          k.dt = relayFloat32;
          k.op = relaySum;
          k.count = 1000;
          k.calls = 3;
          k.threads = ll == 2 ? RELAY_GPU_WARP : 256;
          if (runRooted(&k, n++)) return 1;
        }
  return 0;
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
  if (rootedRows()) return 1;
  printf(
      "PASS: %ld emulated one-shot calls (push + reduce of every block, %d-lane warps) match "
      "relayHostReduce; %ld rooted cases (%ld broadcast and reduce calls, back to back) match the serial "
      "reference\n",
      g_cases, RELAY_GPU_WARP, g_rooted, g_rootedCalls);
  for (int r = 0; r < NR; r++) free(region[r]);
  return 0;
}
