/*
 * The one-shot push-reduce kernels: one launch moves a small all-reduce or
 * reduce-scatter AND reduces it, instead of an NCCL group plus a reduce
 * launch (on the seed's MI350X one group of P2P ops cost ~0.038 ms against
 * ~0.035 ms for NCCL's whole fused reduce-scatter: below ~1 MiB the launch is
 * the cost). Three protocols (oneshot.h): LL up to RELAYCC_ONESHOT_LL_BYTES per
 * destination (default 256 KiB), LL128 in its place from
 * RELAYCC_ONESHOT_LL128_BYTES (default 64 KiB), the flag protocol above.
 *
 * Measured on 2 x H200 (NCCL 2.28.3, bf16, CUDA-graph replays, per call):
 * the flag protocol costs ~8.1 us at any size up to 256 KiB (two
 * system-scope fences and a flag round trip: 0.69-0.89x NCCL there), LL
 * ~4.0 us from 4 to 32 KiB with the 8-active kernels, 3.5-3.7 us with the
 * pair kernels (PickKernel; all-reduce 1.76-1.95x NCCL, reduce-scatter
 * 1.56-1.72x), LL128 4.1-4.9 us from 64 to 256 KiB. Above 256 KiB the flag
 * protocol moves half LL's bytes (LL there is unmeasured: its area is sized
 * for 256 KiB per slot).
 *
 * The flag protocol is shm/oneshot.c's, per block (see oneshot.h for the
 * region):
 *
 *  0. every block reads the pair epochs from device memory (e = epoch + 1
 *     per peer), so a replayed graph runs a new epoch each time (hazard G2);
 *  1. staging reuse: before pushing epoch e into peer j's staging[e&1][me],
 *     wait until j acknowledged epoch e-2 (it no longer reads that parity
 *     set). Two sets let a fast rank run call e+1 while a slow peer still
 *     reduces call e; it blocks only at e+2;
 *  2. push this block's range of my contribution for j into j's staging
 *     (16-byte vectors when every pointer and the stride are 16-aligned);
 *  3. __syncthreads, then one thread per peer release-stores e (system
 *     scope) into j's flag[e&1][me][block] (NCCL's own pattern: barrier,
 *     then the posting thread's fence.acq_rel.sys and store);
 *  4. the same thread acquire-waits for j's flag[e&1][j][block] in my region,
 *     arrived when (int64_t)(flag - e) >= 0 (never ==: flags only grow);
 *  5. reduce my own data with every staged contribution in active-index
 *     order (reduce_rules.cuh: the bits of relayHostReduce), staging read
 *     through L2 (ld.global.cg: peers' NVLink stores land in L2, and L1 is not
 *     coherent with them);
 *  6. the last block to finish (a counter of finished blocks) advances the
 *     epochs and release-stores the acknowledgement e into every peer.
 *
 * Blocks hand-shake pairwise (block b waits only on the peer's block b), so
 * there is no grid barrier and no co-residency requirement: every block
 * pushes and flags before it waits. Every wait is bounded (the comm's
 * RELAYCC_TIMEOUT_MS, by %globaltimer); a failure writes a packed error word
 * into this rank's region (sticky: later launches exit at once), into every
 * peer's rerr (they stop waiting on us) and into mapped host memory (the host
 * reports it at the next call without synchronizing).
 *
 * Rooted calls (broadcast, reduce: relayOsArgs.root; oneshot.h relayOsPairs
 * says why and how): the same kernels, the data one way on the root's
 * pairs only (a broadcast places the root's block, a reduce's root folds
 * all A in active-index order, its members write nothing and a
 * broadcast's members never read their src); LL and LL128 add a token
 * (llTokenPush, llTokenWait) where the flag protocol sends a flag alone.
 *
 * Precondition (as NCCL's): one-shot calls on one comm are ordered (one
 * stream, or streams the caller orders): two in flight at once would share
 * the block counter and the epochs.
 */
#include <stdint.h>
#include <string.h>

#include "gpu_port.h"

#include "transport/nccl/oneshot.h"
#include "transport/nccl/reduce_rules.cuh"

#include "transport/nccl/oneshot_dev.cuh"

namespace {

/* Step 2 for block blk: this rank's range of each peer's contribution into
 * that peer's staging slot for me, parity of the pair epoch ep[j]. Peers in
 * the order me+1, me+2, ... so that ranks do not all write one peer first. */
template <typename Tr>
RD void osPushBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t lo, hi;
  relayOsRange(a.count, a.grid, (int)sizeof(S), blk, &lo, &hi);
  if (hi <= lo) return;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  for (int k = 1; k < A; k++) {
    int j = me + k < A ? me + k : me + k - A;
    if (!relayOsPushesTo(&a, j)) continue; /* a rooted call's way without data */
    S* d = (S*)(a.region[j] + relayOsStagingOff(&a.L, (int)(ep[j] & 1), myRank)) + lo;
    const S* s = (const S*)a.src + (uint64_t)j * a.srcStride + lo;
    osCopy<S>(d, s, hi - lo, a.vec != 0, tid, nthr);
  }
}

/* Step 5 for block blk: dst range = my own block of src folded with every
 * peer's staged one, in active-index order. A rooted call: a broadcast
 * places the root's block at dst (the root its own, unless in place; a
 * member never reads its src, which may be NULL), a reduce's root folds all
 * A as above, its members write nothing. */
template <typename Tr, int OP, int NA>
RD void osReduceBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t lo, hi;
  relayOsRange(a.count, a.grid, (int)sizeof(S), blk, &lo, &hi);
  if (hi <= lo) return;
  const int A = a.nActive, me = a.me, R = a.root;
  const char* mine = a.region[me];
  if (R >= 0 && (OP == RELAY_OS_GATHER || me != R)) {
    if (OP != RELAY_OS_GATHER) return;
    const S* s = R == me ? (const S*)a.src + lo
                         : (const S*)(mine + relayOsStagingOff(&a.L, (int)(ep[R] & 1), a.rank[R])) + lo;
    if (s != (const S*)a.dst + lo) osCopy<S>((S*)a.dst + lo, s, hi - lo, a.vec != 0, tid, nthr);
    return;
  }
  const S* srcs[NA];
  UNROLL
  for (int i = 0; i < NA; i++) {
    if (i >= A) srcs[i] = NULL;
    else if (i == me) srcs[i] = (const S*)a.src + (uint64_t)me * a.srcStride + lo;
    else srcs[i] = (const S*)(mine + relayOsStagingOff(&a.L, (int)(ep[i] & 1), a.rank[i])) + lo;
  }
  if constexpr (OP == RELAY_OS_GATHER) {
    /* Side by side; in place (all-gather) my block is its own source. */
    UNROLL
    for (int i = 0; i < NA; i++)
      if (i < A && srcs[i] != (const S*)a.dst + (uint64_t)i * a.count + lo)
        osCopy<S>((S*)a.dst + (uint64_t)i * a.count + lo, srcs[i], hi - lo, a.vec != 0, tid, nthr);
  } else {
    osFold<Tr, OP, NA>((S*)a.dst + lo, srcs, A, hi - lo, a.divisor, a.vec != 0, tid, nthr);
  }
}

/* ---- the LL protocol (oneshot.h) ----------------------------------------- */

/* One 16-byte line {data lo, flag, data hi, flag}, stored and loaded whole:
 * NCCL's LL line, whose 8-byte halves arrive atomically over NVLink. */
RD void llStore(char* line, uint64_t d, uint32_t f) {
#ifdef RELAY_GPU_DEVICE_PASS
  relayStVolatile16(line, (uint32_t)d, f, (uint32_t)(d >> 32), f);
#else
  uint32_t w[4] = {(uint32_t)d, f, (uint32_t)(d >> 32), f};
  memcpy(line, w, 16);
#endif
}
RD uint4 llLoad(const char* line) {
  uint4 v;
#ifdef RELAY_GPU_DEVICE_PASS
  relayLdVolatile16(line, &v.x, &v.y, &v.z, &v.w);
#else
  memcpy(&v, line, 16);
#endif
  return v;
}

/* Poll an LL line until both flags are f (bounded like osWait). Device
 * pass only: its one caller (llFetch) polls there alone. */
#ifdef RELAY_GPU_DEVICE_PASS
__device__ bool llSpin(const relayOsArgs& a, const char* line, uint32_t f, uint64_t* out, int peerIdx,
                       int blk, u64 ep) {
  const OsWaitCtx w = osWaitCtx(a, peerIdx);
  for (unsigned it = 1;; it++) {
    uint4 v = llLoad(line);
    if (v.y == f && v.w == f) {
      *out = (uint64_t)v.x | ((uint64_t)v.z << 32);
      return true;
    }
    if ((it & 63u) != 0) continue;
    if (!osKeepWaiting(a, it, w.t0, w.err, w.rerr, RELAY_OS_ERR_FLAG, w.peerRank, blk, ep)) return false;
  }
}
#endif

#ifdef RELAY_ONESHOT_HOST_EMULATION
/* The actives whose lines or tokens the host emulation's kernel phases looked for (bit i: active i). The
 * emulation runs a phase only once its model of the waits says the peer pushed, so a wait missing from the
 * kernel would pass unseen there; it checks these bits against the pairs it modelled. */
static unsigned osHostLookedAt;
#endif

/* The data of an LL line once its flags are f; the host emulation checks
 * once (every push it schedules ran before) and records a missing line as
 * the device's wait records its deadline (osFail), the device polls. */
RD bool llFetch(const relayOsArgs& a, const char* line, uint32_t f, uint64_t* out, int peerIdx, int blk,
                u64 ep) {
#if defined(RELAY_ONESHOT_HOST_EMULATION) && !defined(RELAY_GPU_DEVICE_PASS)
  osHostLookedAt |= 1u << peerIdx;
#endif
  uint4 v = llLoad(line);
  if (v.y == f && v.w == f) {
    *out = (uint64_t)v.x | ((uint64_t)v.z << 32);
    return true;
  }
#ifdef RELAY_GPU_DEVICE_PASS
  return llSpin(a, line, f, out, peerIdx, blk, ep);
#else
  osFail(a, RELAY_OS_ERR_FLAG, a.rank[peerIdx], blk, ep);
  return false;
#endif
}

/* 8 bytes of a source from byte 8*l, zeros past `total` bytes; whole when
 * 8-aligned, element-wise otherwise (sources are element-aligned). */
template <typename S>
RD uint64_t llGather(const char* src, uint64_t l, uint64_t total) {
  union {
    uint64_t u;
    S e[8 / sizeof(S)];
  } x;
  x.u = 0;
  const uint64_t off = l * 8;
  if (off + 8 <= total && ((uintptr_t)(src + off) & 7u) == 0) return ldElem((const uint64_t*)(src + off));
  const S* p = (const S*)(src + off);
  UNROLL
  for (int k = 0; k < (int)(8 / sizeof(S)); k++)
    if (off + (uint64_t)k * sizeof(S) < total) x.e[k] = ldElem(p + k);
  return x.u;
}

template <typename S>
RD void llScatter(char* dst, uint64_t l, uint64_t total, uint64_t v) {
  const uint64_t off = l * 8;
  if (off + 8 <= total && ((uintptr_t)(dst + off) & 7u) == 0) {
    *(uint64_t*)(dst + off) = v;
    return;
  }
  union {
    uint64_t u;
    S e[8 / sizeof(S)];
  } x;
  x.u = v;
  S* p = (S*)(dst + off);
  UNROLL
  for (int k = 0; k < (int)(8 / sizeof(S)); k++)
    if (off + (uint64_t)k * sizeof(S) < total) p[k] = x.e[k];
}

/* ep[j] of the LL kernels' register array: selected over constant indices,
 * so the array never goes to the stack (a runtime index puts it there:
 * every thread of the grid writes it at kernel start). j < NA always:
 * relayCudaOneShot takes the pair kernels (NA = 2) only when A == 2. */
template <int NA>
RD u64 epOf(const u64* ep, int j) {
  u64 e = ep[0];
  UNROLL
  for (int i = 1; i < NA; i++)
    if (i == j) e = ep[i];
  return e;
}

/* Push: this block's lines of my contribution for each peer into that
 * peer's LL slot for me. Thread t takes lines t, t + nthr, ... in both
 * phases, so a line of an in-place buffer is read (pushed, folded) and
 * written by one thread, in that order. */
template <typename Tr, int NA>
RD void llPushBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t lo, hi;
  relayOsRange(a.count, a.grid, (int)sizeof(S), blk, &lo, &hi);
  if (hi <= lo) return;
  const uint64_t total = a.count * sizeof(S), l0 = lo * sizeof(S) / 8, l1 = (hi * sizeof(S) + 7) / 8;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  for (int k = 1; k < A; k++) {
    int j = me + k < A ? me + k : me + k - A;
    if (!relayOsPushesTo(&a, j)) continue; /* a rooted call's way without data: llTokenPush */
    const char* s = (const char*)a.src + (uint64_t)j * a.srcStride * sizeof(S);
    const u64 e = epOf<NA>(ep, j);
    char* d = a.region[j] + relayOsLLOff(&a.L, (int)(e & 1), myRank);
    const uint32_t f = relayOsLLFlag(e, a.count);
    for (uint64_t l = l0 + (uint64_t)tid; l < l1; l += (uint64_t)nthr)
      llStore(d + l * 16, llGather<S>(s, l, total), f);
  }
}

/* The 8-byte word at data byte 8 l of every active's contribution (words[i],
 * in active-index order), written out: folded into dst (all-reduce,
 * reduce-scatter: the bits of relayHostReduce) or each into its own output
 * block (all-gather, all-to-all: blocks count elements apart). Nothing at or
 * past byte `limit` of a block is written. LL and LL128 alike. */
template <typename Tr, int OP, int NA>
RD void llEmit(const relayOsArgs& a, const uint64_t* words, uint64_t l, uint64_t limit) {
  typedef typename Tr::S S;
  const int A = a.nActive;
  if constexpr (OP == RELAY_OS_GATHER) {
    if (a.root >= 0) {
      /* A broadcast: the root's word at dst (selected over constant indices: no stack array). */
      uint64_t w = words[0];
      UNROLL
      for (int i = 1; i < NA; i++)
        if (i == a.root) w = words[i];
      llScatter<S>((char*)a.dst, l, limit, w);
      return;
    }
    const uint64_t stride = a.count * sizeof(S);
    UNROLL
    for (int i = 0; i < NA; i++)
      if (i < A) llScatter<S>((char*)a.dst + (uint64_t)i * stride, l, limit, words[i]);
  } else {
    typedef typename Tr::Acc Acc;
    enum { V8 = 8 / sizeof(S) };
    union Chunk {
      uint64_t u;
      S e[V8];
    };
    Chunk d[NA], out;
    UNROLL
    for (int i = 0; i < NA; i++) d[i].u = words[i];
    UNROLL
    for (int k = 0; k < V8; k++) {
      Acc acc = Tr::load(d[0].e[k]);
      UNROLL
      for (int i = 1; i < NA; i++)
        if (i < A) acc = fold<Tr, OP>(acc, Tr::load(d[i].e[k]));
      out.e[k] = Tr::store(acc, a.divisor);
    }
    llScatter<S>((char*)a.dst, l, limit, out.u);
  }
}

/* A rooted call's rank with nothing to read or write in the reduce phase:
 * a reduce's member (it only pushes), a broadcast's root in place. */
template <int OP>
RD bool llRootedIdle(const relayOsArgs& a) {
  if (a.root < 0) return false;
  return OP == RELAY_OS_GATHER ? a.me == a.root && a.src == a.dst : a.me != a.root;
}
/* Whether my own contribution enters my output: always but in a broadcast's
 * member, which never reads its src (NULL is allowed there). */
RD bool llReadsOwn(const relayOsArgs& a) { return a.root < 0 || a.me == a.root; }

/* A rooted call's way without data (oneshot.h): block 0 puts one LL line
 * {0, flag} into each root-pair peer that gets no data from me, at the start
 * of the slot that way leaves empty, and waits for the same line from each
 * root-pair peer that sends me none, zeroing it. The flag is the call's
 * (epoch and count: a count that differs is a timeout naming the peer).
 * Threads tid, tid + nthr, ... take the peers. LL and LL128 alike. */
template <int NA>
RD void llTokenPush(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  if (a.root < 0 || blk != 0) return;
  const int myRank = a.rank[a.me];
  for (int i = tid; i < a.nActive; i += nthr) {
    if (i == a.me || !relayOsPairs(&a, i) || relayOsPushesTo(&a, i)) continue;
    const u64 e = epOf<NA>(ep, i);
    llStore(a.region[i] + relayOsLLOff(&a.L, (int)(e & 1), myRank), 0, relayOsLLFlag(e, a.count));
  }
}
template <int NA>
RD bool llTokenWait(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  if (a.root < 0 || blk != 0) return true;
  for (int i = tid; i < a.nActive; i += nthr) {
    if (i == a.me || !relayOsPairs(&a, i) || relayOsReadsFrom(&a, i)) continue;
    const u64 e = epOf<NA>(ep, i);
    char* line = a.region[a.me] + relayOsLLOff(&a.L, (int)(e & 1), a.rank[i]);
    uint64_t d;
    if (!llFetch(a, line, relayOsLLFlag(e, a.count), &d, i, blk, e)) return false;
    llStore(line, 0, 0u);
  }
  return true;
}

/* Where each peer's lines for me start in my region (its parity set, plus
 * `off`), and the flag they carry this call; NULL and 0 for me, for
 * indices past A and for a rooted call's peers that send me no data. LL and
 * LL128 alike. */
template <int NA>
RD void llPeerLines(const relayOsArgs& a, const u64* ep, uint64_t off, char** lines, uint32_t* fl) {
  UNROLL
  for (int i = 0; i < NA; i++) {
    const bool peer = i < a.nActive && i != a.me && relayOsReadsFrom(&a, i);
    lines[i] = peer ? a.region[a.me] + relayOsLLOff(&a.L, (int)(ep[i] & 1), a.rank[i]) + off : NULL;
    fl[i] = peer ? relayOsLLFlag(ep[i], a.count) : 0u;
  }
}

/* Reduce: my own lines with every peer's, in active-index order; each
 * consumed line is zeroed. false: a wait failed (recorded by osFail). */
template <typename Tr, int OP, int NA>
RD bool llReduceBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t lo, hi;
  relayOsRange(a.count, a.grid, (int)sizeof(S), blk, &lo, &hi);
  if (hi <= lo) return true;
  const uint64_t total = a.count * sizeof(S), l0 = lo * sizeof(S) / 8, l1 = (hi * sizeof(S) + 7) / 8;
  const int A = a.nActive, me = a.me;
  if (llRootedIdle<OP>(a)) return true;
  const bool own = llReadsOwn(a);
  const char* src = (const char*)a.src + (uint64_t)me * a.srcStride * sizeof(S);
  char* lines[NA];
  uint32_t fl[NA];
  llPeerLines<NA>(a, ep, 0, lines, fl);
  for (uint64_t l = l0 + (uint64_t)tid; l < l1; l += (uint64_t)nthr) {
    uint64_t d[NA];
    UNROLL
    for (int i = 0; i < NA; i++) {
      d[i] = 0;
      if (i >= A) continue;
      if (i == me) {
        if (own) d[i] = llGather<S>(src, l, total);
      } else if (lines[i] && !llFetch(a, lines[i] + l * 16, fl[i], &d[i], i, blk, ep[i])) {
        return false;
      }
    }
    UNROLL
    for (int i = 0; i < NA; i++)
      if (i < A && lines[i]) llStore(lines[i] + l * 16, 0, 0u);
    llEmit<Tr, OP, NA>(a, d, l, total);
  }
  return true;
}

/* ---- the LL128 protocol (oneshot.h) -------------------------------------- */

RD void ll128Store(char* p, uint64_t lo, uint64_t hi) {
#ifdef RELAY_GPU_DEVICE_PASS
  relayStVolatile16x2(p, lo, hi);
#else
  uint64_t w[2] = {lo, hi};
  memcpy(p, w, 16);
#endif
}
RD void ll128Load(const char* p, uint64_t* lo, uint64_t* hi) {
#ifdef RELAY_GPU_DEVICE_PASS
  relayLdVolatile16x2(p, lo, hi);
#else
  uint64_t w[2];
  memcpy(w, p, 16);
  *lo = w[0];
  *hi = w[1];
#endif
}

/* Block blk's LL128 span: data bytes [loB, hiB) of each source block, nl
 * lines from line `first` of a slot. false: the block has no data. */
RD bool ll128Span(const relayOsArgs& a, int es, int blk, uint64_t* loB, uint64_t* hiB, uint64_t* nl,
                  uint64_t* first) {
  uint64_t lo, hi;
  relayOsRange(a.count, a.grid, es, blk, &lo, &hi);
  if (hi <= lo) return false;
  *loB = lo * (uint64_t)es;
  *hiB = hi * (uint64_t)es;
  *nl = (*hiB - *loB + RELAY_OS_LL128_DATA - 1) / RELAY_OS_LL128_DATA;
  *first = (uint64_t)blk * relayOsLL128Lines(a.count, a.grid, es);
  return true;
}

/* The lanes of an LL128 line: 8 (16 bytes each), so a warp of
 * RELAY_GPU_WARP lanes (gpu_port.h) carries LL128_WARP_LINES lines at once:
 * 4 on NVIDIA's 32, 8 on AMD's 64-lane wavefront. A block is whole warps
 * (relayCudaOneShot checks), and every warp vote below spans one warp. */
enum { LL128_WARP_LINES = RELAY_GPU_WARP / 8 };
RD int ll128Lane(int tid) { return (int)((unsigned)tid % RELAY_GPU_WARP); }
RD int ll128Warp(int tid) { return (int)((unsigned)tid / RELAY_GPU_WARP); }

/* Push: warp w takes lines L w, L w + L nwarps, ... (L = LL128_WARP_LINES);
 * lane t the 16 bytes at 16 (t % 8) of line L w + t / 8 (lane 7 of each 8:
 * data word 14 and the flag). The loop is warp-uniform and the warp
 * reconverges before each store, so a line's 8 parts leave in one store
 * instruction. Words past the
 * block's range go as zeros. Same lanes, same words in the reduce: a word
 * of an in-place buffer is pushed, folded and written by one thread. */
template <typename Tr, int NA>
RD void ll128PushBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t loB, hiB, nl, first;
  if (!ll128Span(a, (int)sizeof(S), blk, &loB, &hiB, &nl, &first)) return;
  const int lane = ll128Lane(tid), part = lane & 7, nw = ll128Warp(nthr);
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  for (int k = 1; k < A; k++) {
    int j = me + k < A ? me + k : me + k - A;
    if (!relayOsPushesTo(&a, j)) continue; /* a rooted call's way without data: llTokenPush */
    const char* s = (const char*)a.src + (uint64_t)j * a.srcStride * sizeof(S);
    const u64 e = epOf<NA>(ep, j);
    char* d = a.region[j] + relayOsLLOff(&a.L, (int)(e & 1), myRank) + first * 128 + 16 * (uint64_t)part;
    const uint64_t f = relayOsLLFlag(e, a.count);
    for (uint64_t base = (uint64_t)ll128Warp(tid) * LL128_WARP_LINES; base < nl;
         base += LL128_WARP_LINES * (uint64_t)nw) {
      const uint64_t line = base + (uint64_t)(lane >> 3);
      const bool on = line < nl;
      const uint64_t l8 = loB / 8 + line * 15 + 2 * (uint64_t)part;
      uint64_t v0 = on ? llGather<S>(s, l8, hiB) : 0;
      uint64_t v1 = part == 7 ? f : on ? llGather<S>(s, l8 + 1, hiB) : 0;
#ifdef RELAY_GPU_DEVICE_PASS
      relayWarpSync();
#endif
      if (on) ll128Store(d + line * 128, v0, v1);
    }
  }
}

/* Wait for a whole line: every lane loads its part, lane 7 of each 8 checks
 * the flag, and the warp reloads until no lane sees a stale flag (a line
 * lands whole, so a current flag means current data). Warp-uniform; the
 * give-up check is lane 0's, shared. The host emulation checks once.
 * Inline, as every wait here: a non-inlined callee taking `a` by reference
 * makes each thread copy the ~300-byte arguments to its stack at kernel
 * start (ptxas: 312-504 bytes stack frame), measured 1.2-3.1 us slower per
 * call at 4-512 KB on 2 x H200 (2026-11-30 run 7). */
RD bool ll128Fetch(const relayOsArgs& a, const char* p, bool on, int part, uint64_t f, uint64_t* lo,
                   uint64_t* hi, int peerIdx, int blk, u64 ep) {
#ifdef RELAY_GPU_DEVICE_PASS
  const int peerRank = a.rank[peerIdx];
  char* mine = a.region[a.me];
  const u64* err = wordAt(mine, a.L.ctlOff + 8);
  const u64* rerr = wordAt(mine, relayOsRerrOff(&a.L, peerRank));
  u64 t0 = 0;
  for (unsigned it = 1;; it++) {
    if (on) ll128Load(p, lo, hi);
    const bool stale = on && part == 7 && *hi != f;
    if (!relayWarpAny(stale)) return true;
    if (it == 1) t0 = globalTimer();
    if ((it & 63u) != 0) continue;
    int keep = ll128Lane((int)threadIdx.x) == 0
                   ? (int)osKeepWaiting(a, it, t0, err, rerr, RELAY_OS_ERR_FLAG, peerRank, blk, ep)
                   : 0;
    if (!relayWarpBcast0(keep)) return false;
  }
#else
#ifdef RELAY_ONESHOT_HOST_EMULATION
  osHostLookedAt |= 1u << peerIdx; /* the device's warp waits whether or not its lane is on */
#endif
  if (!on) return true;
  ll128Load(p, lo, hi);
  uint64_t flag, dummy;
  ll128Load(p - 16 * part + 112, &dummy, &flag);
  if (flag == f) return true;
  osFail(a, RELAY_OS_ERR_FLAG, a.rank[peerIdx], blk, ep);
  return false;
#endif
}

/* Reduce: my own words with every peer's, in active-index order; each
 * consumed line is zeroed whole. false: a wait failed (recorded). */
template <typename Tr, int OP, int NA>
RD bool ll128ReduceBlock(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  uint64_t loB, hiB, nl, first;
  if (!ll128Span(a, (int)sizeof(S), blk, &loB, &hiB, &nl, &first)) return true;
  const int lane = ll128Lane(tid), part = lane & 7, nw = ll128Warp(nthr);
  const int A = a.nActive, me = a.me;
  if (llRootedIdle<OP>(a)) return true;
  const bool readOwn = llReadsOwn(a);
  const char* own = (const char*)a.src + (uint64_t)me * a.srcStride * sizeof(S);
  char* lines[NA];
  uint32_t fl[NA];
  llPeerLines<NA>(a, ep, first * 128 + 16 * (uint64_t)part, lines, fl);
  for (uint64_t base = (uint64_t)ll128Warp(tid) * LL128_WARP_LINES; base < nl;
       base += LL128_WARP_LINES * (uint64_t)nw) {
    const uint64_t line = base + (uint64_t)(lane >> 3);
    const bool on = line < nl;
    const uint64_t l8 = loB / 8 + line * 15 + 2 * (uint64_t)part;
    uint64_t d[2][NA]; /* [word][active] */
    UNROLL
    for (int i = 0; i < NA; i++) {
      d[0][i] = d[1][i] = 0;
      if (i >= A) continue;
      if (i == me) {
        if (on && readOwn) d[0][i] = llGather<S>(own, l8, hiB);
        if (on && readOwn && part != 7) d[1][i] = llGather<S>(own, l8 + 1, hiB);
      } else if (lines[i] &&
                 !ll128Fetch(a, lines[i] + line * 128, on, part, fl[i], &d[0][i], &d[1][i], i, blk, ep[i])) {
        return false;
      }
    }
    UNROLL
    for (int i = 0; i < NA; i++)
      if (on && i < A && lines[i]) ll128Store(lines[i] + line * 128, 0, 0);
    if (!on) continue;
    UNROLL
    for (int w = 0; w < 2; w++) {
      if (w == 1 && part == 7) break; /* the flag */
      llEmit<Tr, OP, NA>(a, d[w], l8 + (uint64_t)w, hiB);
    }
  }
  return true;
}

/* The LL and LL128 kernels (P = a.ll): every block of the agreed grid runs
 * every call (blocks with no data only advance their epochs), no barrier
 * but the last. One instantiation per protocol, so LL's code is the same
 * as before LL128 existed. */
template <typename Tr, int OP, int P, int NA>
__global__ void __launch_bounds__(RELAY_OS_MAX_THREADS) osKernelLL(relayOsArgs a) {
  const int tid = threadIdx.x, nthr = blockDim.x, blk = blockIdx.x;
  const int A = a.nActive, me = a.me;
  char* const mine = a.region[me];
  const u64* err = wordAt(mine, a.L.ctlOff + 8);
  bool ok = ldVolatile(err) == 0; /* a failed comm stays failed */
  u64 ep[NA];
  UNROLL
  for (int i = 0; i < NA; i++)
    ep[i] = i < A && i != me ? ldVolatile(wordAt(mine, relayOsLLEpochOff(&a.L, a.rank[i], blk))) + 1 : 0;
  if (ok) llTokenPush<NA>(a, ep, blk, tid, nthr); /* first: a peer waiting for it goes on sooner */
  if (P == 2) {
    /* LL128's waits are warp-wide: the whole warp goes or stays. */
    ok = relayWarpAll(ok);
    if (ok) ll128PushBlock<Tr, NA>(a, ep, blk, tid, nthr);
    if (ok) ok = ll128ReduceBlock<Tr, OP, NA>(a, ep, blk, tid, nthr);
  } else {
    if (ok) llPushBlock<Tr, NA>(a, ep, blk, tid, nthr);
    if (ok) ok = llReduceBlock<Tr, OP, NA>(a, ep, blk, tid, nthr);
  }
  if (ok) ok = llTokenWait<NA>(a, ep, blk, tid, nthr); /* last: my data went out before I wait */
  (void)ok;
  __syncthreads(); /* every thread has read the epochs before they advance */
  /* Only pairs that hand-shook count the call (a rooted call's members do not among themselves). */
  if (tid < A && tid != me && relayOsPairs(&a, tid) && ldVolatile(err) == 0) {
    UNROLL
    for (int i = 0; i < NA; i++)
      if (i == tid) stVolatile(wordAt(mine, relayOsLLEpochOff(&a.L, a.rank[i], blk)), ep[i]);
  }
}

template <typename Tr, int OP, int NA>
__global__ void __launch_bounds__(RELAY_OS_MAX_THREADS) osKernel(relayOsArgs a) {
  __shared__ u64 sEp[RELAY_OS_MAX_ACTIVE];
  __shared__ int sFail;
  const int tid = threadIdx.x, nthr = blockDim.x, blk = blockIdx.x;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  char* const mine = a.region[me];
  u64* const err = wordAt(mine, a.L.ctlOff + 8);

  /* 0. A failed comm stays failed: exit before touching any peer. */
  osEnter(a, a.L.epochsOff, 1, sEp, &sFail);
  if (sFail) return;
  /* Thread i speaks for active i; a rooted call's members do not hand-shake among themselves. */
  const bool peerThread = tid < A && tid != me && relayOsPairs(&a, tid);

  /* 1. Peer i no longer reads my epoch-(e-2) push (same parity set). */
  if (peerThread) {
    const u64 e = sEp[tid];
    if (!osWait(a, wordAt(mine, relayOsAckOff(&a.L, a.rank[tid])), e - 2, tid, RELAY_OS_ERR_ACK, blk, e))
      sFail = 1;
  }
  __syncthreads();

  /* 2. Push. */
  if (!sFail) osPushBlock<Tr>(a, sEp, blk, tid, nthr);
  __syncthreads();

  /* 3-4. Flag my push to peer i, then wait for peer i's push to me. */
  if (!sFail && peerThread) {
    const u64 e = sEp[tid];
    const int par = (int)(e & 1), pr = a.rank[tid];
    char* peer = a.region[tid];
    if (blk == 0) stVolatile(wordAt(peer, relayOsCountOff(&a.L, par, myRank)), a.count);
    /* The release store is the fence: it orders this thread's count word and,
     * through the barrier above, every thread's push before the flag (NCCL's
     * barrier + fence.acq_rel.sys + relaxed store). */
    stReleaseSys(wordAt(peer, relayOsFlagOff(&a.L, par, myRank, blk)), e);
    if (!osWait(a, wordAt(mine, relayOsFlagOff(&a.L, par, pr, blk)), e, tid, RELAY_OS_ERR_FLAG, blk, e)) {
      sFail = 1;
    } else if (blk == 0 && ldVolatile(wordAt(mine, relayOsCountOff(&a.L, par, pr))) != a.count) {
      osFail(a, RELAY_OS_ERR_COUNT, pr, blk, e);
      sFail = 1;
    }
  }
  __syncthreads();

  /* 5. Reduce. */
  if (!sFail) osReduceBlock<Tr, OP, NA>(a, sEp, blk, tid, nthr);
  __syncthreads();

  /* 6. The last block out advances the epochs and acknowledges every peer:
   * all blocks' staging reads are done (each fenced before counting). */
  if (tid == 0) {
    unsigned* done = (unsigned*)(mine + a.L.ctlOff);
    __threadfence();
    if (atomicAdd(done, 1u) == gridDim.x - 1) {
      __threadfence();
      *(volatile unsigned*)done = 0;
      if (ldVolatile(err) == 0) {
        /* The epochs are read by the next launch on this GPU (ordered by the
         * kernel boundary); the acks release every block's staging reads. */
        for (int i = 0; i < A; i++)
          if (i != me && relayOsPairs(&a, i))
            stVolatile(wordAt(mine, relayOsEpochOff(&a.L, a.rank[i])), sEp[i]);
        for (int i = 0; i < A; i++)
          if (i != me && relayOsPairs(&a, i))
            stReleaseSys(wordAt(a.region[i], relayOsAckOff(&a.L, myRank)), sEp[i]);
      }
    }
  }
}

template <typename Tr, int OP, int NA>
const void* pickProtocol(int ll) {
  return ll == 2 ? (const void*)osKernelLL<Tr, OP, 2, NA>
         : ll    ? (const void*)osKernelLL<Tr, OP, 1, NA>
                 : (const void*)osKernel<Tr, OP, NA>;
}

/* Kernels are compiled for at most NA actives: 2 (the pair of a 2-GPU job)
 * or RELAY_OS_MAX_ACTIVE. Every per-active loop is unrolled to NA, so the
 * pair kernels carry a quarter of the wide ones' copies of each wait and
 * fold (bf16 sum, SASS: LL 20 KB against 38, LL128 33 KB against 83) and
 * half their registers (49-64 against 113-127). Measured on 2 x H200
 * (2026-11-30 run 8, graph replay, bf16, same process as the wide ones via
 * RELAYCC_ONESHOT_WIDE=1): 0.40-0.65 us less per call from 4 KB to 512 KB
 * (all-reduce 4 KB 3.56 against 4.00 us, LL128 64 KB 4.12 against 4.76). */
struct OsGet {
  typedef const void* Result;
  int ll;
  template <typename Tr, int OP, int NA>
  Result get() const {
    return pickProtocol<Tr, OP, NA>(ll);
  }
};
typedef PickWidth<OsGet> PickKernel;

#ifdef RELAY_ONESHOT_HOST_EMULATION
/* tests/gpu/emul_oneshot.cu: the push (phase 0) and reduce (phase 1) of one
 * block of one rank, run thread after thread on the host, for the protocol
 * a.ll names (a rooted call's token pushed and awaited with them). Returns 0
 * when an LL line or token was not there (or had the wrong flag) when its
 * reader came (osFail recorded it). */
typedef int (*OsHostPhase)(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr, int phase);
template <typename Tr, int OP, int NA>
int osHostPhase(const relayOsArgs& a, const u64* ep, int blk, int tid, int nthr, int phase) {
  if (a.ll) {
    if (phase == 0) {
      llTokenPush<NA>(a, ep, blk, tid, nthr);
      if (a.ll == 2) ll128PushBlock<Tr, NA>(a, ep, blk, tid, nthr);
      else llPushBlock<Tr, NA>(a, ep, blk, tid, nthr);
      return 1;
    }
    bool ok = a.ll == 2 ? ll128ReduceBlock<Tr, OP, NA>(a, ep, blk, tid, nthr)
                        : llReduceBlock<Tr, OP, NA>(a, ep, blk, tid, nthr);
    return (int)(ok && llTokenWait<NA>(a, ep, blk, tid, nthr));
  }
  if (phase == 0) osPushBlock<Tr>(a, ep, blk, tid, nthr);
  else osReduceBlock<Tr, OP, NA>(a, ep, blk, tid, nthr);
  return 1;
}
/* The same width choice as relayCudaOneShot's (pair: A == 2). */
struct OsHostGet {
  typedef OsHostPhase Result;
  template <typename Tr, int OP, int NA>
  static Result get() {
    return osHostPhase<Tr, OP, NA>;
  }
};
typedef PickWidth<OsHostGet> PickHost;
#endif

}  // namespace

extern "C" cudaError_t relayCudaOneShot(const relayOsArgs* a, relayDataType_t dt, relayRedOp_t op,
                                        int threads, cudaStream_t stream) {
  OsGet g = {a ? a->ll : 0};
  PickKernel v(a, g);
  const void* k = visit(dt, op, v);
  if (!k || !a || a->grid < 1 || a->grid > RELAY_OS_MAX_BLOCKS || a->nActive < 2 ||
      a->nActive > RELAY_OS_MAX_ACTIVE || a->me < 0 || a->me >= a->nActive || a->root < -1 ||
      a->root >= a->nActive || threads < RELAY_OS_MAX_ACTIVE || threads > RELAY_OS_MAX_THREADS ||
      !a->hostErr || !a->hostAbort || (a->ll == 2 && threads % RELAY_GPU_WARP) ||
      (a->ll == 2 && relayOsLL128Bytes(a->count, a->grid, a->elemSize) > a->L.llSlotBytes))
    return cudaErrorInvalidValue;
  relayOsArgs copy = *a;
  void* args[] = {&copy};
  /* cudaLaunchKernel returns this launch's error without touching the
   * thread's sticky last error, which belongs to the user. */
  return cudaLaunchKernel(k, dim3((unsigned)a->grid), dim3((unsigned)threads), args, 0, stream);
}
