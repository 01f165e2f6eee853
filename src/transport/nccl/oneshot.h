/*
 * The one-shot push-reduce on the NCCL transport: what the host half
 * (region.c: region, IPC, vote, errors; oneshot.c: the launch) and the kernel (oneshot.cu)
 * share. Internal to src/transport/nccl; C and CUDA C++ alike.
 *
 * Region: one plain cudaMalloc block per rank (mempool memory cannot be
 * IPC-exported), opened by every peer with cudaIpcOpenMemHandle. Offsets are
 * the same on every rank (they depend only on the comm size and the agreed
 * slot size), so a kernel addresses any peer's words from its base:
 *
 *   flag[2][n][RELAY_OS_MAX_BLOCKS] u64  written by source s into OWNER's
 *                         region: "my pair-epoch-e push of block b into your
 *                         staging[e&1][s] is complete" (e = the pair epoch)
 *   count[2][n]    u64   written by source s (block 0) before its flag: the
 *                         element count it pushed (a mismatch is an error)
 *   ack[n]         u64   written by peer s into OWNER's region: "I finished
 *                         reading every push you made up to epoch e"
 *   rerr[n]        u64   written by peer s: s failed (packed error word);
 *                         waits on s give up at once instead of at the deadline
 *   epoch[n]       u64   local: one-shots this rank ran with each peer (the
 *                         pair epoch), advanced by each call's last block
 *   done, err      u32, u64 local: blocks finished in the running call; the
 *                         sticky error of this rank's kernels (0: none)
 *   staging[2][n][slotBytes]  staging[par][s]: source s's push, parity set par
 *   llEpoch[n][RELAY_OS_MAX_BLOCKS] u64 local: LL calls this block ran with each peer
 *   ll[2][n][llSlotBytes]     LL lines of source s, parity set par (see below)
 *   sentinel       u64   (commHash ^ golden) * FNV prime + rank + 1
 *
 * Two protocols share the region, each with its own staging and epochs:
 *  - flag (above RELAYCC_ONESHOT_LL_BYTES): raw data pushed in 16-byte
 *    vectors, then a release-stored flag per (parity, source, block), an
 *    acknowledgement per pair, the pair epoch advanced by the call's last
 *    block. Two system-scope fences per call (~2 x 1-2 us on H200).
 *  - LL (at or below it, NCCL's low-latency format): every 16-byte line
 *    {data lo, flag, data hi, flag} carries 8 data bytes and its own flag,
 *    written with one 16-byte store, so a reader polls the data itself and
 *    no fence is needed; twice the bytes on the wire, no round trip. The
 *    grid is always the agreed block count and each block keeps its own
 *    epochs (no atomics: all blocks run every LL call, so their epochs stay
 *    equal and every block of a call uses the same parity set). The reader
 *    zeroes each line it consumed, so a nonzero flag is always the current
 *    push (a 32-bit flag can never be mistaken for one 2^32 calls old). No
 *    acknowledgement either: a rank's LL call e+2 starts after its call e+1
 *    finished, which waited for the peer's e+1 lines, which the peer pushed
 *    after its own call e (kernels of one comm are stream-ordered) had read
 *    and zeroed parity set e&1. A rooted call keeps this with a token on
 *    the way without data (relayOsPairs below).
 *
 * 64-bit flags: a block that is absent from many calls (small counts use
 * fewer blocks) keeps an old flag; 2^63 calls never come, so the wrap-safe
 * compare (int64_t)(flag - want) >= 0 holds for any gap (with 32 bits a block
 * idle for 2^31 calls, ~3 h at 5 us a call, would see a stale flag as new).
 */
#ifndef RELAY_NCCL_ONESHOT_H_
#define RELAY_NCCL_ONESHOT_H_

#include <stddef.h>
#include <stdint.h>

#include "gpu_port.h"

#include "relaycc.h"
#include "comm/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The helpers below run on the host (oneshot.c, the emulation test) and in
 * the kernel alike. */
#ifdef RELAY_GPU_COMPILER
#define RELAY_OS_HD __host__ __device__
#else
#define RELAY_OS_HD
#endif

#define RELAY_OS_MAX_ACTIVE 8      /* == RELAY_TP_ONESHOT_MAX */
#define RELAY_OS_MAX_BLOCKS 256    /* flag columns per source; RELAYCC_ONESHOT_BLOCKS is clamped to it */
#define RELAY_OS_DEFAULT_BLOCKS 64 /* the seed's MI350X value: 64 beat 32, 128 no better than 64 */
#define RELAY_OS_MAX_THREADS 512
/* Threads per block when RELAYCC_ONESHOT_THREADS is unset: 256 up to this
 * many bytes per destination, 512 above. Measured on 2 x H200 (graph
 * replays, bf16, 64 blocks): 256 is ~0.4 us faster from 4 to 32 KiB (3.99 vs
 * 4.41 us all-reduce at 4 KiB) and even at 128 KiB; 512 wins from 256 KiB
 * on, in both protocols (all-reduce 256 KiB 6.60 vs 7.86 us, 1 MiB 11.92 vs
 * 13.06; reduce-scatter 256 KiB per rank 6.60 vs 7.88). Threads change how a
 * block copies, never which range it owns, so ranks may differ. */
#define RELAY_OS_T512_BYTES ((uint64_t)128 << 10)
/* One block per 4 KiB of a destination's bytes (capped by the block count):
 * 256 threads x one 16-byte vector each. Depends only on the byte count, so
 * every rank computes the same grid. */
#define RELAY_OS_BYTES_PER_BLOCK 4096
/* Block ranges start on 128-byte boundaries (one cache line): no two blocks
 * share a staging line, and 16-byte vectors stay aligned inside a block. */
#define RELAY_OS_RANGE_ALIGN 128

/* LL: per-destination bytes served by the LL protocol at most (the LL area
 * holds 2 x this per slot; 256 KiB keeps it at n MiB per rank), and the
 * default threshold (RELAYCC_ONESHOT_LL_BYTES, agreed: rank 0's). */
#define RELAY_OS_LL_CAP ((uint64_t)256 << 10)
#define RELAY_OS_LL_DEFAULT_BYTES RELAY_OS_LL_CAP
/* LL128 replaces LL from this many bytes per destination (RELAYCC_ONESHOT_LL128_BYTES, agreed). */
#define RELAY_OS_LL128_DEFAULT_BYTES ((uint64_t)64 << 10)

/* Error word (the region's err, rerr[] and the mapped host word). */
enum {
  RELAY_OS_ERR_FLAG = 1,    /* no push from the peer before the deadline */
  RELAY_OS_ERR_ACK = 2,     /* the peer did not finish reading an older push before the deadline */
  RELAY_OS_ERR_COUNT = 3,   /* the peer pushed another element count */
  RELAY_OS_ERR_REMOTE = 4,  /* the peer reported a failure of its own */
  RELAY_OS_ERR_ABORTED = 5, /* relayCommAbort / destroy of a failed comm */
  RELAY_OS_ERR_WINDOW = 6,  /* direct path: the peer's window or offsets differ (or it is staged) */
  RELAY_OS_ERR_EXIT = 7     /* direct path: the peer did not finish with my buffers before the deadline */
};
static inline RELAY_OS_HD uint64_t relayOsErrPack(unsigned code, unsigned peer, unsigned blk,
                                                  uint64_t epoch) {
  return ((uint64_t)(code & 0xffu) << 56) | ((uint64_t)(peer & 0xffu) << 48) |
         ((uint64_t)(blk & 0xffffu) << 32) | (epoch & 0xffffffffull);
}
static inline RELAY_OS_HD unsigned relayOsErrCode(uint64_t w) { return (unsigned)(w >> 56); }
static inline RELAY_OS_HD unsigned relayOsErrPeer(uint64_t w) { return (unsigned)(w >> 48) & 0xffu; }
static inline RELAY_OS_HD unsigned relayOsErrBlock(uint64_t w) { return (unsigned)(w >> 32) & 0xffffu; }
static inline RELAY_OS_HD unsigned relayOsErrEpoch(uint64_t w) { return (unsigned)(w & 0xffffffffu); }

typedef struct {
  uint64_t flagsOff, countsOff, acksOff, rerrOff, epochsOff, ctlOff, stagingOff, sentinelOff;
  uint64_t llEpochsOff, llOff;
  uint64_t slotBytes, regionBytes;
  uint64_t llCap, llSlotBytes; /* LL data bytes per slot at most; bytes of lines per slot */
  int32_t n, pad;
  /* The bandwidth route's ring (bw.cu; relayOsLayoutAddBw; bwRing 0: none):
   * bwFlag[n][ring][RELAY_BW_BLOCKS] u64  written by source s into OWNER's
   *                     region: "block b's part of the tile in slot k is my
   *                     pair tile number f" (f counts from 1, per pair)
   * bwBytes[n][ring]    u64  written by source s (block 0) before its flag:
   *                     the tile's element count (a mismatch is an error)
   * bwAck[n][ring][RELAY_BW_BLOCKS] u64  written by consumer s into OWNER's
   *                     region: "block b read my part of tile f from slot k"
   * bwEpoch[n]          u64  local: tiles exchanged with each peer (the same
   *                     count each way), advanced by each call's last block
   * bwStaging[n][ring][bwTileBytes]  source s's tiles
   * The direct path (registered windows; bw.cu bwDirectKernel):
   * bwEnter[n][RELAY_BW_BLOCKS] u64  written by source s: "my block b entered
   *                     our direct call number e" (per pair, from 1)
   * bwEnterInfo[n][4]   u64  written by source s (block 0) before its flags:
   *                     window id, send offset, recv offset (a mismatch is an error)
   * bwExit[n][RELAY_BW_BLOCKS] u64  written by source s: "my block b finished
   *                     writing your recv and reading your send in call e"
   * bwDirEpoch[n]       u64  local: direct calls with each peer, advanced by
   *                     each call's last block (the exit kernel with ce) */
  uint64_t bwFlagsOff, bwBytesOff, bwAcksOff, bwEpochsOff, bwStagingOff, bwTileBytes;
  uint64_t bwEnterOff, bwEnterInfoOff, bwExitOff, bwDirEpochOff;
  int32_t bwRing, pad2;
} relayOsLayout;

static inline RELAY_OS_HD uint64_t relayOsRoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static inline RELAY_OS_HD void relayOsLayoutInit(relayOsLayout* L, int n, size_t slotBytes) {
  uint64_t o = 0, un = (uint64_t)n;
  L->n = n;
  L->pad = 0;
  L->slotBytes = relayOsRoundUp(slotBytes ? slotBytes : 1, 256);
  L->flagsOff = o;
  o += 2 * un * RELAY_OS_MAX_BLOCKS * 8;
  L->countsOff = o;
  o += 2 * un * 8;
  L->acksOff = o;
  o += un * 8;
  L->rerrOff = o;
  o += un * 8;
  L->epochsOff = o;
  o += un * 8;
  L->ctlOff = relayOsRoundUp(o, 16); /* u32 done at +0, u64 err at +8 */
  o = L->ctlOff + 16;
  L->stagingOff = relayOsRoundUp(o, 256);
  o = L->stagingOff + 2 * un * L->slotBytes;
  L->llEpochsOff = o;
  o += un * RELAY_OS_MAX_BLOCKS * 8;
  L->llCap = L->slotBytes < RELAY_OS_LL_CAP ? L->slotBytes : RELAY_OS_LL_CAP;
  L->llSlotBytes = relayOsRoundUp(2 * L->llCap + 16, 256); /* a line per 8 data bytes (+1: a ragged end) */
  L->llOff = relayOsRoundUp(o, 256);
  o = L->llOff + 2 * un * L->llSlotBytes;
  L->sentinelOff = o;
  L->regionBytes = relayOsRoundUp(o + 8, 256);
  L->bwFlagsOff = L->bwBytesOff = L->bwAcksOff = L->bwEpochsOff = L->bwStagingOff = L->bwTileBytes = 0;
  L->bwEnterOff = L->bwEnterInfoOff = L->bwExitOff = L->bwDirEpochOff = 0;
  L->bwRing = L->pad2 = 0;
}

/* Blocks of a bandwidth kernel: every tile is cut into this many parts
 * (relayOsRange), part b moved and hand-shaken by block b alone, so blocks
 * pair with the peer's block of the same index and need no co-residency.
 * 32: NCCL saturates NV18 with 16-32 channels of one block each (not
 * measured for this kernel: the 2 x H200 issue calibrates it). */
#define RELAY_BW_BLOCKS 32

/* Appends the bandwidth route's ring (ring slots of tileBytes per source)
 * before the sentinel, which moves to the end. */
static inline RELAY_OS_HD void relayOsLayoutAddBw(relayOsLayout* L, uint64_t tileBytes, int ring) {
  uint64_t un = (uint64_t)L->n, ur = (uint64_t)ring, o = L->sentinelOff;
  L->bwRing = ring;
  L->bwTileBytes = relayOsRoundUp(tileBytes ? tileBytes : 1, 256);
  L->bwFlagsOff = relayOsRoundUp(o, 256);
  o = L->bwFlagsOff + un * ur * RELAY_BW_BLOCKS * 8;
  L->bwBytesOff = o;
  o += un * ur * 8;
  L->bwAcksOff = o;
  o += un * ur * RELAY_BW_BLOCKS * 8;
  L->bwEpochsOff = o;
  o += un * 8;
  L->bwEnterOff = o;
  o += un * RELAY_BW_BLOCKS * 8;
  L->bwEnterInfoOff = o;
  o += un * 4 * 8;
  L->bwExitOff = o;
  o += un * RELAY_BW_BLOCKS * 8;
  L->bwDirEpochOff = o;
  o += un * 8;
  L->bwStagingOff = relayOsRoundUp(o, 256);
  o = L->bwStagingOff + un * ur * L->bwTileBytes;
  L->sentinelOff = o;
  L->regionBytes = relayOsRoundUp(o + 8, 256);
}
static inline RELAY_OS_HD uint64_t relayOsBwFlagOff(const relayOsLayout* L, int src, int slot, int blk) {
  return L->bwFlagsOff +
         (((uint64_t)src * (uint64_t)L->bwRing + (uint64_t)slot) * RELAY_BW_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwBytesOff(const relayOsLayout* L, int src, int slot) {
  return L->bwBytesOff + ((uint64_t)src * (uint64_t)L->bwRing + (uint64_t)slot) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwAckOff(const relayOsLayout* L, int cons, int slot, int blk) {
  return L->bwAcksOff +
         (((uint64_t)cons * (uint64_t)L->bwRing + (uint64_t)slot) * RELAY_BW_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwEpochOff(const relayOsLayout* L, int peer) {
  return L->bwEpochsOff + (uint64_t)peer * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwEnterOff(const relayOsLayout* L, int src, int blk) {
  return L->bwEnterOff + ((uint64_t)src * RELAY_BW_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwEnterInfoOff(const relayOsLayout* L, int src, int what) {
  return L->bwEnterInfoOff + ((uint64_t)src * 4 + (uint64_t)what) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwExitOff(const relayOsLayout* L, int src, int blk) {
  return L->bwExitOff + ((uint64_t)src * RELAY_BW_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwDirEpochOff(const relayOsLayout* L, int peer) {
  return L->bwDirEpochOff + (uint64_t)peer * 8;
}
static inline RELAY_OS_HD uint64_t relayOsBwStagingOff(const relayOsLayout* L, int src, int slot) {
  return L->bwStagingOff + ((uint64_t)src * (uint64_t)L->bwRing + (uint64_t)slot) * L->bwTileBytes;
}

/* Byte offsets of the words of source (or peer) `src`, parity `par`, block `blk`. */
static inline RELAY_OS_HD uint64_t relayOsFlagOff(const relayOsLayout* L, int par, int src, int blk) {
  return L->flagsOff +
         (((uint64_t)par * (uint64_t)L->n + (uint64_t)src) * RELAY_OS_MAX_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsCountOff(const relayOsLayout* L, int par, int src) {
  return L->countsOff + ((uint64_t)par * (uint64_t)L->n + (uint64_t)src) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsAckOff(const relayOsLayout* L, int src) {
  return L->acksOff + (uint64_t)src * 8;
}
static inline RELAY_OS_HD uint64_t relayOsRerrOff(const relayOsLayout* L, int src) {
  return L->rerrOff + (uint64_t)src * 8;
}
static inline RELAY_OS_HD uint64_t relayOsEpochOff(const relayOsLayout* L, int peer) {
  return L->epochsOff + (uint64_t)peer * 8;
}
static inline RELAY_OS_HD uint64_t relayOsStagingOff(const relayOsLayout* L, int par, int src) {
  return L->stagingOff + ((uint64_t)par * (uint64_t)L->n + (uint64_t)src) * L->slotBytes;
}

static inline RELAY_OS_HD uint64_t relayOsLLEpochOff(const relayOsLayout* L, int peer, int blk) {
  return L->llEpochsOff + ((uint64_t)peer * RELAY_OS_MAX_BLOCKS + (uint64_t)blk) * 8;
}
static inline RELAY_OS_HD uint64_t relayOsLLOff(const relayOsLayout* L, int par, int src) {
  return L->llOff + ((uint64_t)par * (uint64_t)L->n + (uint64_t)src) * L->llSlotBytes;
}
/* The flag of an LL line: the pair epoch's low bits mixed with the element
 * count (ranks whose counts differ never see each other's lines: a timeout
 * naming the peer, not garbage); never 0, the "consumed" value. */
static inline RELAY_OS_HD uint32_t relayOsLLFlag(uint64_t epoch, uint64_t count) {
  uint32_t f = (uint32_t)epoch ^ ((uint32_t)count * 0x9E3779B1u) ^ (uint32_t)(count >> 32);
  return f ? f : 1u;
}

/* Block blk's element range [lo, hi) of a call: depends only on the count,
 * the grid and the element size, so every rank agrees; starts on
 * RELAY_OS_RANGE_ALIGN-byte boundaries. */
static inline RELAY_OS_HD void relayOsRange(uint64_t count, int grid, int elemSize, int blk, uint64_t* lo,
                                            uint64_t* hi) {
  uint64_t alignE = RELAY_OS_RANGE_ALIGN / (uint64_t)elemSize;
  uint64_t per = (count + (uint64_t)grid - 1) / (uint64_t)grid;
  per = relayOsRoundUp(per ? per : 1, alignE);
  uint64_t l = (uint64_t)blk * per;
  if (l > count) l = count;
  uint64_t h = l + per;
  if (h > count) h = count;
  *lo = l;
  *hi = h;
}

/* LL128 (NCCL's protocol of that name, on NVLink): 128-byte lines of 15
 * data words and a 64-bit flag (word 15), each line written by 8 lanes of a
 * warp with one 16-byte store apiece in a single warp instruction, which
 * NVLink delivers whole (NCCL enables LL128 on Hopper over NVLink on this
 * property). 1.07x the data on the wire where LL sends 2x. Block b's lines
 * follow b * relayOsLL128Lines(..) in a slot: line j holds the block's data
 * bytes [120 j, 120 j + 120). Same epochs, parity sets and consumed-is-zero
 * rule as LL (the reader zeroes whole lines), so calls may alternate. */
#define RELAY_OS_LL128_DATA 120
static inline RELAY_OS_HD uint64_t relayOsLL128Lines(uint64_t count, int grid, int elemSize) {
  uint64_t alignE = RELAY_OS_RANGE_ALIGN / (uint64_t)elemSize;
  uint64_t per = (count + (uint64_t)grid - 1) / (uint64_t)grid; /* relayOsRange's block size */
  per = relayOsRoundUp(per ? per : 1, alignE);
  return (per * (uint64_t)elemSize + RELAY_OS_LL128_DATA - 1) / RELAY_OS_LL128_DATA;
}
/* Bytes of a slot an LL128 call of count elements fills (<= llSlotBytes to use it). */
static inline RELAY_OS_HD uint64_t relayOsLL128Bytes(uint64_t count, int grid, int elemSize) {
  return (uint64_t)grid * relayOsLL128Lines(count, grid, elemSize) * 128;
}

static inline RELAY_OS_HD uint64_t relayOsSentinel(uint64_t hash, int rank) {
  return (hash ^ 0x9E3779B97F4A7C15ull) * 0x100000001B3ull + (uint64_t)rank + 1;
}

/* One launch: everything by value in the kernel's parameter space, so a
 * captured graph bakes only pointers that live as long as the comm; the
 * epochs are read from and advanced in device memory. */
typedef struct {
  char* region[RELAY_OS_MAX_ACTIVE]; /* active i's region as mapped in this process (own: the allocation) */
  int32_t rank[RELAY_OS_MAX_ACTIVE]; /* comm rank of active i */
  void* dst;
  const void* src;
  uint64_t count;     /* output elements */
  uint64_t srcStride; /* elements between the blocks for successive actives (0: all-reduce) */
  relayOsLayout L;
  int32_t nActive, me, grid;
  int32_t vec; /* 1: src, dst and the stride are 16-byte aligned (16-byte accesses) */
  int32_t ll;  /* 0: flags; 1: LL, 2: LL128 (both: grid = the agreed block count) */
  int32_t divisor;
  int32_t gather; /* 1: all-gather / all-to-all: contribution j to dst + j * count, no reduce */
  int32_t elemSize;
  int32_t
      wide; /* 1: the kernels compiled for RELAY_OS_MAX_ACTIVE actives even at A = 2 (RELAYCC_ONESHOT_WIDE) */
  int32_t root;       /* a rooted call's root, an active index (broadcast: gather set; reduce); -1: none */
  uint64_t timeoutNs; /* every wait of the kernel gives up after this */
  unsigned long long* hostErr; /* device alias of a mapped host word: the host reads errors without a sync */
  const volatile int32_t* hostAbort; /* device alias of a mapped host word set by abort */
} relayOsArgs;

/* A rooted call (relayOneShotDesc.root; shm/oneshot.c's twin): only the root's pairs hand-shake, and data
 * moves one way on each (broadcast: from the root; reduce: to it). The way without data still hand-shakes,
 * so both ends of a pair count the same calls (pair epochs): in the flag protocol as a flag with no push
 * (the acknowledgements guard slot reuse as in every flag call); in LL and LL128 as a token, one LL line
 * with the call's flag that block 0 puts into the slot the way without data leaves empty (its reader waits
 * for it and zeroes it). LL has no acknowledgements: a rank's call e+2 reuses parity set e&1 safely
 * because its call e+1 waited for something the peer pushed in ITS call e+1, after its call e had read and
 * zeroed that set. A symmetric call waits for every peer's lines; without the token a rooted call's root
 * of a broadcast (a member of a reduce) would wait for nothing, and back-to-back calls (or graph replays)
 * would overwrite lines a slow reader had not consumed. Whether actives me and i (i != me) hand-shake,
 * my data goes to i, i's comes to me: */
static inline RELAY_OS_HD int relayOsPairs(const relayOsArgs* a, int i) {
  return a->root < 0 || a->me == a->root || i == a->root;
}
static inline RELAY_OS_HD int relayOsPushesTo(const relayOsArgs* a, int i) {
  return a->root < 0 || (a->gather ? a->me == a->root : i == a->root);
}
static inline RELAY_OS_HD int relayOsReadsFrom(const relayOsArgs* a, int i) {
  return a->root < 0 || (a->gather ? i == a->root : a->me == a->root);
}

/* The grid of a flag-protocol call: depends only on the bytes per
 * destination and the agreed block cap. */
static inline RELAY_OS_HD int relayOsGrid(uint64_t bytes, int maxBlocks) {
  uint64_t g = (bytes + RELAY_OS_BYTES_PER_BLOCK - 1) / RELAY_OS_BYTES_PER_BLOCK;
  if (g < 1) g = 1;
  if (g > (uint64_t)maxBlocks) g = (uint64_t)maxBlocks;
  return (int)g;
}

/* A bandwidth kernel's launch (bw.cu): the one-shot's arguments (region,
 * ranks, buffers, count, stride, gather, divisor, deadline, host words; grid
 * RELAY_BW_BLOCKS) and the tiles. The call's items, the same on every rank:
 * push form U = ceil(count / tile) tiles of each contribution; two-shot
 * (all-reduce) T1 = ceil(shard / tile) tiles of the shard each active owns
 * (planBwShard), reduced by its owner, then T1 tiles of the reduced shards
 * placed by every peer: U = 2 T1. */
typedef struct {
  relayOsArgs os;
  uint64_t tile;  /* elements per tile */
  uint64_t shard; /* two-shot: elements per shard (planBwShard); 0: push form */
  uint64_t T1, U;
  /* The direct path (win[] set): active i's window as mapped here (own: the
   * buffer), the offsets every active uses, and which phases run. */
  char* win[RELAY_OS_MAX_ACTIVE];
  uint64_t winId, sendOff, recvOff;
  int32_t phase; /* RELAY_BW_PHASE_* */
  int32_t pad3;
} relayBwArgs;
/* A direct launch's phases: all of them (sm), or the copy-engine mover's
 * entry kernel, then its peer copies (host), then its exit kernel. */
enum { RELAY_BW_PHASE_ALL = 0, RELAY_BW_PHASE_ENTRY = 1, RELAY_BW_PHASE_EXIT = 2 };

/* Enqueues the bandwidth kernel (threads: 32 .. 512, a multiple of 32). */
cudaError_t relayCudaBw(const relayBwArgs* a, relayDataType_t dt, relayRedOp_t op, int threads,
                        cudaStream_t stream);
/* The direct path's kernel (a->win set), one phase or all. */
cudaError_t relayCudaBwDirect(const relayBwArgs* a, relayDataType_t dt, relayRedOp_t op, int threads,
                              cudaStream_t stream);
/* A whole direct call: the SM kernel, or with ce (gathers only; else sm)
 * the entry kernel, one copy-engine peer copy per peer, the exit kernel. */
cudaError_t relayCudaBwDirectRun(const relayBwArgs* a, relayDataType_t dt, relayRedOp_t op, int threads,
                                 int ce, cudaStream_t stream);

/* Enqueues the kernel (threads per block: 32 .. 512). Returns the launch
 * error; cudaErrorInvalidValue for a dtype/op relaycc does not have. */
cudaError_t relayCudaOneShot(const relayOsArgs* a, relayDataType_t dt, relayRedOp_t op, int threads,
                             cudaStream_t stream);

/* region.c and oneshot.c: the transport ops and the destroy/abort hooks of nccl_transport.c. */
struct relayComm;
relayResult_t relayNcclOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream);
relayResult_t relayNcclOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream);
/* Creates the region now (init with RELAYCC_ONESHOT_PREPARE=1): collective. */
relayResult_t relayNcclOneShotPrepareAtInit(struct relayComm* comm);
/* Kernels of this comm that wait give up at once (abort, destroy of a failed comm). */
void relayNcclOneShotAbort(struct relayComm* comm);
/* The transport's asyncError op: the region's error word (one-shot and bw kernels), read only. */
relayResult_t relayNcclOneShotAsyncError(struct relayComm* comm, char* why, size_t whyLen);
/* Frees the region (drained: the device is idle; else it is leaked, as kernels may still use it). */
void relayNcclOneShotFree(struct relayComm* comm, int drained);
/* cudaIpcOpenMemHandle mappings of peer regions open in this process. */
int relayNcclOneShotOpenMappings(void);
/* region.c, for bw.c: the region's prepare without the slot check (collective when it
 * creates the region, as relayNcclOneShotPrepare), then its layout (NULL
 * when declined); and the launch arguments both kernels share, checked
 * (the comm's pending kernel error first). */
relayResult_t relayNcclOsRegion(struct relayComm* comm, relayStream_t stream, const relayOsLayout** L);
relayResult_t relayNcclOsArgs(struct relayComm* comm, const relayOneShotDesc* d, const char* what,
                              relayOsArgs* a);
/* region.c, for oneshot.c: a one-shot call's protocol (a->ll), grid and threads for `bytes` per
 * destination, from what the ranks agreed when the region was created. */
void relayNcclOsShape(struct relayComm* comm, size_t bytes, size_t count, int elemSize, relayOsArgs* a,
                      int* threads);
/* A launch's result: relaySuccess, or the comm failed and an error naming what. */
relayResult_t relayNcclOsLaunched(struct relayComm* comm, cudaError_t e, const char* what);
/* bw.c: the bandwidth route's transport ops. */
relayResult_t relayNcclBwPrepare(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream);
relayResult_t relayNcclBw(struct relayComm* comm, const relayBwDesc* d, relayStream_t stream);
/* window.c: registered windows (transport.h winRegister / winDeregister):
 * every peer's buffer IPC-mapped; relayNcclWinPeer is active rank q's base
 * as mapped in this process (own: the buffer), NULL when unmapped. */
relayResult_t relayNcclWinRegister(struct relayComm* comm, struct relayWindow* w, const uint64_t* bases);
void relayNcclWinDeregister(struct relayComm* comm, struct relayWindow* w, int collective);
char* relayNcclWinPeer(const struct relayWindow* w, int rank);

#ifdef __cplusplus
}
#endif
#endif
