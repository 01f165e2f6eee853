/*
 * The bandwidth route's kernel (plan op PLAN_OP_BW): the one-shot's contract
 * moved in tiles through a ring of `ring` staging slots per source in each
 * peer's region (oneshot.h: the bw section of the one-shot's region), so
 * staging is bounded whatever the count. SM stores: 16-byte vectors (as the
 * one-shot's flag protocol), every tile cut into RELAY_BW_BLOCKS parts, part
 * b moved and hand-shaken by block b alone (relayOsRange over the tile), so
 * block b of a rank pairs only with block b of its peers: no grid barrier,
 * no co-residency requirement. The CPU twin of this protocol, with the same
 * item order and waits: ../shm/bw.c.
 *
 * Per block, items u = 0 .. U-1 (planBwItem: the push form's tiles, or the
 * two-shot's T1 shard tiles reduced by their owner then T1 reduced tiles
 * placed by every peer), iteration j = 0 .. U: consume item j-1, then push
 * item j, so the push of tile j (NVLink stores of this block) is in flight
 * while the peer consumes tile j-1, and other blocks run their own parts.
 * Tile number f of a pair = the pair's epoch (tiles exchanged before this
 * call, in device memory: a replayed graph continues the count, hazard G2)
 * + u + 1, in slot (f-1) % ring:
 *   push:    thread i waits ack[i][slot][b] >= f - ring in my region (peer i
 *            read what was in that slot), the block copies its part into
 *            peer i's staging[me][slot], __syncthreads, thread i (block 0
 *            first writes the element count) release-stores f (system scope)
 *            into peer i's flag[me][slot][b];
 *   consume: thread i acquire-waits flag[i][slot][b] >= f in my region
 *            (block 0 checks the count), the block folds its part in
 *            active-index order (the bits of relayHostReduce) or places it,
 *            __syncthreads, thread i release-stores f into peer i's
 *            ack[me][slot][b].
 * Every wait is on an event a peer's block b reaches earlier in the same
 * order (shm/bw.c says why that cannot deadlock); every wait is bounded
 * (osWait: the comm's deadline, a peer's reported failure, the host's
 * abort) and a failure is recorded as the one-shot's (osFail). The last
 * block out (the region's done counter, shared with the one-shot kernels:
 * kernels of one comm are stream-ordered) advances the pair epochs by U.
 *
 * In place: a block pushes a part before it consumes the same part (a
 * tile's part of an all-reduce, the two-shot's shard tile k before the
 * reduced shards' tile k land over it), and no block touches another's
 * part, so aliasing src and dst is safe as on the CPU.
 */
#include <stdint.h>

#include "gpu_port.h"

#include "plan/plan.h"
#include "transport/nccl/oneshot.h"
#include "transport/nccl/oneshot_dev.cuh"

namespace {

/* Item u between actives from and to (planBwItem with this call's figures). */
RD void bwItem(const relayBwArgs& w, uint64_t u, int from, int to, uint64_t* off, uint64_t* len) {
  planBwItem(w.os.count, w.os.srcStride, w.tile, w.shard, w.T1, u, from, to, off, len);
}

RD uint64_t bwTileNo(const u64* ep, int i, uint64_t u) { return ep[i] + u + 1; }

/* The data of a push: block blk's part of item u into every peer's slot. */
template <typename Tr>
RD void bwPushPart(const relayBwArgs& w, const u64* ep, uint64_t u, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  const relayOsArgs& a = w.os;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  const S* from = (const S*)(w.shard && u >= w.T1 ? a.dst : a.src);
  for (int k = 1; k < A; k++) {
    int i = me + k < A ? me + k : me + k - A;
    uint64_t off, len, lo, hi;
    bwItem(w, u, me, i, &off, &len);
    relayOsRange(len, RELAY_BW_BLOCKS, (int)sizeof(S), blk, &lo, &hi);
    if (hi <= lo) continue;
    int slot = (int)((bwTileNo(ep, i, u) - 1) % (uint64_t)a.L.bwRing);
    S* d = (S*)(a.region[i] + relayOsBwStagingOff(&a.L, myRank, slot)) + lo;
    osCopy<S>(d, from + off + lo, hi - lo, a.vec != 0, tid, nthr);
  }
}

/* The data of a consume: block blk's part of item u from every peer's slot
 * in my region, folded (in active-index order) or placed. */
template <typename Tr, int OP, int NA>
RD void bwConsumePart(const relayBwArgs& w, const u64* ep, uint64_t u, int blk, int tid, int nthr) {
  typedef typename Tr::S S;
  const relayOsArgs& a = w.os;
  const int A = a.nActive, me = a.me;
  const char* mine = a.region[me];
  const S* srcs[NA];
  uint64_t offs[NA], lens[NA];
  UNROLL
  for (int i = 0; i < NA; i++) {
    srcs[i] = NULL;
    offs[i] = lens[i] = 0;
    if (i >= A) continue;
    bwItem(w, u, i, me, &offs[i], &lens[i]);
    if (i == me) {
      srcs[i] = (const S*)a.src + offs[i];
    } else {
      int slot = (int)((bwTileNo(ep, i, u) - 1) % (uint64_t)a.L.bwRing);
      srcs[i] = (const S*)(mine + relayOsBwStagingOff(&a.L, a.rank[i], slot));
    }
  }
  if (w.shard && u >= w.T1) {
    /* Two-shot, second phase: every peer's reduced shard tile to its place. */
    UNROLL
    for (int i = 0; i < NA; i++) {
      uint64_t lo, hi;
      if (i >= A || i == me) continue;
      relayOsRange(lens[i], RELAY_BW_BLOCKS, (int)sizeof(S), blk, &lo, &hi);
      if (hi > lo) osCopy<S>((S*)a.dst + offs[i] + lo, srcs[i] + lo, hi - lo, a.vec != 0, tid, nthr);
    }
    return;
  }
  uint64_t lo, hi;
  relayOsRange(lens[me], RELAY_BW_BLOCKS, (int)sizeof(S), blk, &lo, &hi);
  if (hi <= lo) return;
  if constexpr (OP == RELAY_OS_GATHER) {
    /* Side by side at output block i, tile u; in place (all-gather) my
     * block is its own source. */
    const uint64_t at = u * w.tile + lo;
    UNROLL
    for (int i = 0; i < NA; i++) {
      if (i >= A) continue;
      S* d = (S*)a.dst + (uint64_t)i * a.count + at;
      if (srcs[i] + lo != d) osCopy<S>(d, srcs[i] + lo, hi - lo, a.vec != 0, tid, nthr);
    }
  } else {
    /* Push form: output tile u; two-shot first phase: tile u of my shard. */
    const uint64_t at = (w.shard ? offs[me] : u * w.tile) + lo;
    const S* parts[NA];
    UNROLL
    for (int i = 0; i < NA; i++) parts[i] = i < A ? srcs[i] + lo : NULL;
    osFold<Tr, OP, NA>((S*)a.dst + at, parts, A, hi - lo, a.divisor, a.vec != 0, tid, nthr);
  }
}

template <typename Tr, int OP, int NA>
__global__ void __launch_bounds__(RELAY_OS_MAX_THREADS) bwKernel(relayBwArgs w) {
  __shared__ u64 sEp[RELAY_OS_MAX_ACTIVE];
  __shared__ int sFail;
  const relayOsArgs& a = w.os;
  const int tid = threadIdx.x, nthr = blockDim.x, blk = blockIdx.x;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  char* const mine = a.region[me];
  const uint64_t ring = (uint64_t)a.L.bwRing;

  /* A failed comm stays failed: exit before touching any peer. */
  osEnter(a, a.L.bwEpochsOff, 0, sEp, &sFail);
  if (sFail) return;
  const bool peerThread = tid < A && tid != me; /* thread i speaks for active i */

  for (uint64_t j = 0; j <= w.U; j++) {
    if (j >= 1) {
      const uint64_t u = j - 1;
      if (peerThread) {
        const u64 f = bwTileNo(sEp, tid, u);
        const int slot = (int)((f - 1) % ring), pr = a.rank[tid];
        if (!osWait(a, wordAt(mine, relayOsBwFlagOff(&a.L, pr, slot, blk)), f, tid, RELAY_OS_ERR_FLAG, blk,
                    f)) {
          sFail = 1;
        } else if (blk == 0) {
          uint64_t off, len;
          bwItem(w, u, tid, me, &off, &len);
          if (ldVolatile(wordAt(mine, relayOsBwBytesOff(&a.L, pr, slot))) != len) {
            osFail(a, RELAY_OS_ERR_COUNT, pr, blk, f);
            sFail = 1;
          }
        }
      }
      __syncthreads();
      if (sFail) break;
      bwConsumePart<Tr, OP, NA>(w, sEp, u, blk, tid, nthr);
      __syncthreads();
      if (peerThread) {
        const u64 f = bwTileNo(sEp, tid, u);
        stReleaseSys(wordAt(a.region[tid], relayOsBwAckOff(&a.L, myRank, (int)((f - 1) % ring), blk)), f);
      }
    }
    if (j < w.U) {
      if (peerThread) {
        const u64 f = bwTileNo(sEp, tid, j);
        const int slot = (int)((f - 1) % ring);
        if (!osWait(a, wordAt(mine, relayOsBwAckOff(&a.L, a.rank[tid], slot, blk)), f - ring, tid,
                    RELAY_OS_ERR_ACK, blk, f))
          sFail = 1;
      }
      __syncthreads();
      if (sFail) break;
      bwPushPart<Tr>(w, sEp, j, blk, tid, nthr);
      __syncthreads();
      if (peerThread) {
        const u64 f = bwTileNo(sEp, tid, j);
        const int slot = (int)((f - 1) % ring);
        char* peer = a.region[tid];
        if (blk == 0) {
          uint64_t off, len;
          bwItem(w, j, me, tid, &off, &len);
          stVolatile(wordAt(peer, relayOsBwBytesOff(&a.L, myRank, slot)), len);
        }
        /* The release store is the fence: through the barrier above it
         * orders every thread's part (and block 0's count) before the flag. */
        stReleaseSys(wordAt(peer, relayOsBwFlagOff(&a.L, myRank, slot, blk)), f);
      }
    }
  }
  __syncthreads();
  /* The last block out advances the pair epochs by the call's tiles. */
  osLastBlockOut(a, a.L.bwEpochsOff, sEp, w.U);
}

/* ---- the direct path (registered windows) ----------------------------------
 *
 * The buffers lie in a window every active registered (nccl/window.c mapped
 * every peer's), at the offsets w.sendOff / w.recvOff on every active, so
 * peers' send and recv are reached with NVLink loads and stores and nothing
 * is staged. Per block b, thread i for peer i (the CPU twin: ../shm/bw.c):
 *   entry: store window id and offsets into peer i's bwEnterInfo[me], then
 *          release-store f (the pair's direct epoch + 1, in device memory)
 *          into its bwEnter[me][b]; wait for bwEnter[i][b] >= f in my region
 *          and compare peer i's window and offsets (another: RELAY_OS_ERR_WINDOW,
 *          the comm failed). Peer i's block b running means its stream
 *          reached this call: its recv is free and its send final.
 *   move:  the range of block b (relayOsRange over the count, or over the
 *          shard): all-gather and all-to-all store my block for peer i into
 *          its recv at me * count; reduce-scatter folds block me of every
 *          active's send (peers' read over NVLink) in active-index order into
 *          my recv; all-reduce folds shard me into my recv and stores it
 *          into every peer's.
 *   exit:  release-store f into peer i's bwExit[me][b]; wait for bwExit[i][b]
 *          >= f: peer i's block b finished with my buffers' range b (blocks
 *          of two ranks touch the same ranges), so the kernel may end.
 * Every wait is osWait's (deadline, a peer's failure, the host's abort). The
 * last block out advances the direct epochs. With the copy-engine mover
 * (RELAYCC_BW_MOVER=ce, gathers only) the host enqueues the entry phase,
 * one cudaMemcpyAsync per peer, then the exit phase: the exit kernel reads
 * the same epochs (the entry kernel does not advance them). A peer that took
 * the staged path never posts an entry: the call ends at the deadline. */
/* Part 0 moves (gathers) or folds (reductions) block blk's range; part 1,
 * after a block barrier, stores an all-reduce's folded shard into every
 * peer's recv (two parts so that the host emulation runs them in turn). */
template <typename Tr, int OP, int NA>
RD void bwDirectMove(const relayBwArgs& w, int blk, int tid, int nthr, int part) {
  typedef typename Tr::S S;
  const relayOsArgs& a = w.os;
  const int A = a.nActive, me = a.me;
  const uint64_t c = a.count;
  uint64_t lo, hi;
  if constexpr (OP == RELAY_OS_GATHER) {
    relayOsRange(c, RELAY_BW_BLOCKS, (int)sizeof(S), blk, &lo, &hi);
    if (hi <= lo || part) return;
    UNROLL
    for (int i = 0; i < NA; i++) {
      if (i >= A) continue;
      S* d = i == me ? (S*)a.dst + (uint64_t)me * c + lo : (S*)(w.win[i] + w.recvOff) + (uint64_t)me * c + lo;
      const S* src = (const S*)a.src + (uint64_t)i * a.srcStride + lo;
      if (src != d) osCopy<S>(d, src, hi - lo, a.vec != 0, tid, nthr);
    }
  } else {
    /* Reduce-scatter: block me of every active's send; all-reduce: shard me. */
    uint64_t base = (uint64_t)me * c, len = c;
    if (!a.srcStride) {
      const uint64_t sh = planBwShard(c, A);
      base = (uint64_t)me * sh < c ? (uint64_t)me * sh : c;
      len = base + sh < c ? sh : c - base;
    }
    relayOsRange(len, RELAY_BW_BLOCKS, (int)sizeof(S), blk, &lo, &hi);
    if (hi <= lo) return;
    S* out = (S*)a.dst + (a.srcStride ? 0 : base) + lo;
    if (part == 0) {
      const S* parts[NA];
      UNROLL
      for (int i = 0; i < NA; i++)
        parts[i] = i >= A ? NULL : (i == me ? (const S*)a.src : (const S*)(w.win[i] + w.sendOff)) + base + lo;
      osFold<Tr, OP, NA>(out, parts, A, hi - lo, a.divisor, a.vec != 0, tid, nthr);
      return;
    }
    if (a.srcStride) return;
    UNROLL
    for (int i = 0; i < NA; i++)
      if (i < A && i != me)
        osCopy<S>((S*)(w.win[i] + w.recvOff) + base + lo, out, hi - lo, a.vec != 0, tid, nthr);
  }
}

template <typename Tr, int OP, int NA>
__global__ void __launch_bounds__(RELAY_OS_MAX_THREADS) bwDirectKernel(relayBwArgs w) {
  __shared__ u64 sEp[RELAY_OS_MAX_ACTIVE];
  __shared__ int sFail;
  const relayOsArgs& a = w.os;
  const int tid = threadIdx.x, nthr = blockDim.x, blk = blockIdx.x;
  const int A = a.nActive, me = a.me, myRank = a.rank[me];
  char* const mine = a.region[me];
  osEnter(a, a.L.bwDirEpochOff, 0, sEp, &sFail);
  if (sFail) return;
  const bool peerThread = tid < A && tid != me;
  const u64 f = peerThread ? sEp[tid] + 1 : 0;
  if (w.phase != RELAY_BW_PHASE_EXIT) {
    if (peerThread) {
      char* peer = a.region[tid];
      const int pr = a.rank[tid];
      /* Every block writes the same info before its own flag, so each
       * block's acquire sees it (a block's flag orders only its writes). */
      stVolatile(wordAt(peer, relayOsBwEnterInfoOff(&a.L, myRank, 0)), w.winId);
      stVolatile(wordAt(peer, relayOsBwEnterInfoOff(&a.L, myRank, 1)), w.sendOff);
      stVolatile(wordAt(peer, relayOsBwEnterInfoOff(&a.L, myRank, 2)), w.recvOff);
      stReleaseSys(wordAt(peer, relayOsBwEnterOff(&a.L, myRank, blk)), f);
      if (!osWait(a, wordAt(mine, relayOsBwEnterOff(&a.L, pr, blk)), f, tid, RELAY_OS_ERR_FLAG, blk, f)) {
        sFail = 1;
      } else if (ldVolatile(wordAt(mine, relayOsBwEnterInfoOff(&a.L, pr, 0))) != w.winId ||
                 ldVolatile(wordAt(mine, relayOsBwEnterInfoOff(&a.L, pr, 1))) != w.sendOff ||
                 ldVolatile(wordAt(mine, relayOsBwEnterInfoOff(&a.L, pr, 2))) != w.recvOff) {
        osFail(a, RELAY_OS_ERR_WINDOW, pr, blk, f);
        sFail = 1;
      }
    }
    __syncthreads();
    /* ENTRY: the copy engines move the data next. */
    const bool move = !sFail && w.phase == RELAY_BW_PHASE_ALL;
    if (move) bwDirectMove<Tr, OP, NA>(w, blk, tid, nthr, 0);
    __syncthreads();
    if (move) bwDirectMove<Tr, OP, NA>(w, blk, tid, nthr, 1);
    __syncthreads();
  }
  /* A failed block still counts itself out below (the done counter must
   * reach the grid for the next launch). */
  if (peerThread && !sFail && w.phase != RELAY_BW_PHASE_ENTRY) {
    /* Through the barrier the release orders every thread's stores of this
     * block (and, after the entry kernel, the stream's copies) before it. */
    stReleaseSys(wordAt(a.region[tid], relayOsBwExitOff(&a.L, myRank, blk)), f);
    if (!osWait(a, wordAt(mine, relayOsBwExitOff(&a.L, a.rank[tid], blk)), f, tid, RELAY_OS_ERR_EXIT, blk, f))
      sFail = 1;
  }
  __syncthreads();
  /* One direct call per pair; the entry kernel of the ce mover leaves the epochs to its exit kernel. */
  osLastBlockOut(a, a.L.bwDirEpochOff, sEp, w.phase == RELAY_BW_PHASE_ENTRY ? 0 : 1);
}

struct BwDirectGet {
  typedef const void* Result;
  template <typename Tr, int OP, int NA>
  static Result get() {
    return (const void*)bwDirectKernel<Tr, OP, NA>;
  }
};

struct BwGet {
  typedef const void* Result;
  template <typename Tr, int OP, int NA>
  static Result get() {
    return (const void*)bwKernel<Tr, OP, NA>;
  }
};

#ifdef RELAY_BW_HOST_EMULATION
/* tests/gpu/emul_bw.cu: one block's push (phase 0) or consume (phase 1) of
 * item u, run thread after thread on the host. */
typedef void (*BwHostPhase)(const relayBwArgs& w, const u64* ep, uint64_t u, int blk, int tid, int nthr,
                            int phase);
template <typename Tr, int OP, int NA>
void bwHostPhase(const relayBwArgs& w, const u64* ep, uint64_t u, int blk, int tid, int nthr, int phase) {
  if (phase == 0) bwPushPart<Tr>(w, ep, u, blk, tid, nthr);
  else bwConsumePart<Tr, OP, NA>(w, ep, u, blk, tid, nthr);
}
struct BwHostGet {
  typedef BwHostPhase Result;
  template <typename Tr, int OP, int NA>
  static Result get() {
    return bwHostPhase<Tr, OP, NA>;
  }
};
typedef PickWidth<BwHostGet> PickBwHost;
/* The direct path's move (part 0, then part 1 after the block barrier) of one
 * block's range, thread after thread: the data the kernel moves between its
 * entry and exit flags. */
typedef void (*BwDirectHostPart)(const relayBwArgs& w, int blk, int tid, int nthr, int part);
template <typename Tr, int OP, int NA>
void bwDirectHostPart(const relayBwArgs& w, int blk, int tid, int nthr, int part) {
  bwDirectMove<Tr, OP, NA>(w, blk, tid, nthr, part);
}
struct BwDirectHostGet {
  typedef BwDirectHostPart Result;
  template <typename Tr, int OP, int NA>
  static Result get() {
    return bwDirectHostPart<Tr, OP, NA>;
  }
};
typedef PickWidth<BwDirectHostGet> PickBwDirectHost;
#endif

}  // namespace

extern "C" cudaError_t relayCudaBw(const relayBwArgs* w, relayDataType_t dt, relayRedOp_t op, int threads,
                                   cudaStream_t stream) {
  PickWidth<BwGet> v(w ? &w->os : NULL);
  const void* k = visit(dt, op, v);
  if (!k || !w || w->os.nActive < 2 || w->os.nActive > RELAY_OS_MAX_ACTIVE || w->os.me < 0 ||
      w->os.me >= w->os.nActive || threads < RELAY_GPU_WARP || threads > RELAY_OS_MAX_THREADS ||
      threads % RELAY_GPU_WARP || !w->os.hostErr || !w->os.hostAbort || w->os.L.bwRing < 1 || !w->tile ||
      w->tile * (uint64_t)w->os.elemSize > w->os.L.bwTileBytes || (w->shard && w->os.gather))
    return cudaErrorInvalidValue;
  relayBwArgs copy = *w;
  void* args[] = {&copy};
  /* cudaLaunchKernel returns this launch's error without touching the
   * thread's sticky last error, which belongs to the user. */
  return cudaLaunchKernel(k, dim3(RELAY_BW_BLOCKS), dim3((unsigned)threads), args, 0, stream);
}

extern "C" cudaError_t relayCudaBwDirect(const relayBwArgs* w, relayDataType_t dt, relayRedOp_t op,
                                         int threads, cudaStream_t stream) {
  PickWidth<BwDirectGet> v(w ? &w->os : NULL);
  const void* k = visit(dt, op, v);
  if (!k || !w || w->os.nActive < 2 || w->os.nActive > RELAY_OS_MAX_ACTIVE || w->os.me < 0 ||
      w->os.me >= w->os.nActive || threads < RELAY_GPU_WARP || threads > RELAY_OS_MAX_THREADS ||
      threads % RELAY_GPU_WARP || !w->os.hostErr || !w->os.hostAbort || w->phase < RELAY_BW_PHASE_ALL ||
      w->phase > RELAY_BW_PHASE_EXIT || (w->phase != RELAY_BW_PHASE_ALL && !w->os.gather))
    return cudaErrorInvalidValue;
  for (int i = 0; i < w->os.nActive; i++)
    if (!w->win[i]) return cudaErrorInvalidValue;
  relayBwArgs copy = *w;
  void* args[] = {&copy};
  return cudaLaunchKernel(k, dim3(RELAY_BW_BLOCKS), dim3((unsigned)threads), args, 0, stream);
}

extern "C" cudaError_t relayCudaBwDirectRun(const relayBwArgs* w, relayDataType_t dt, relayRedOp_t op,
                                            int threads, int ce, cudaStream_t stream) {
  if (!w) return cudaErrorInvalidValue;
  relayBwArgs p = *w;
  if (!ce || !w->os.gather) {
    p.phase = RELAY_BW_PHASE_ALL;
    return relayCudaBwDirect(&p, dt, op, threads, stream);
  }
  p.phase = RELAY_BW_PHASE_ENTRY;
  cudaError_t e = relayCudaBwDirect(&p, dt, op, threads, stream);
  /* Peers in turn after me (not all onto one peer at once), my own block
   * last. An entry that fails (deadline, a peer's failure) fails the comm,
   * but these copies are enqueued already: the peers' recv is then undefined. */
  const relayOsArgs& a = w->os;
  const size_t es = (size_t)a.elemSize, bytes = (size_t)a.count * es;
  for (int k = 1; k <= a.nActive && e == cudaSuccess; k++) {
    int i = (a.me + k) % a.nActive;
    char* to = (i == a.me ? (char*)a.dst : w->win[i] + w->recvOff) + (size_t)a.me * bytes;
    const char* from = (const char*)a.src + (size_t)i * (size_t)a.srcStride * es;
    if (to != from) e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream); /* in place: skipped */
  }
  if (e != cudaSuccess) return e;
  p.phase = RELAY_BW_PHASE_EXIT;
  return relayCudaBwDirect(&p, dt, op, threads, stream);
}
