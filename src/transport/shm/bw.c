/*
 * The bandwidth route on the shm transport: the CPU twin of the GPU kernel
 * (nccl/bw.cu), so CI proves the tile, epoch, ring and abort protocol at
 * 2-8 ranks. It runs the one-shot's contract (relayBwDesc.c) in tiles
 * through a bounded ring, so staging does not grow with the message.
 *
 * Region (relayShmRegionSetup, tag "bw": created, mapped by all, voted,
 * unlinked), in OWNER's region:
 *   [tile[n][ring]]   one line each, written by source s: the tile's byte
 *                     count (counts that differ between ranks become
 *                     relayInvalidUsage), the pusher's call number, mark and
 *                     shape digest (issue 15: a tile of a call this rank
 *                     rejected, or of another shape, is refused, never
 *                     reduced; relayShmCheckMark), then its flag: "slot k of
 *                     my ring in your region holds my tile number flag
 *                     (per-pair count, 1-based)"
 *   [ack[n]]          one line each, written by consumer s: "I consumed your
 *                     first ack tiles"
 *   [entry[n]]        one line each: the direct path's entry barrier (below):
 *                     source s entered call #flag with window, offsets, call,
 *                     mark and shape as the line's other words say
 *   [exit[n]]         one line each: source s finished call #exit: it wrote
 *                     all it writes into my buffers and read all it reads of
 *                     mine
 *   [staging[n][ring][tileBytes]]
 * A flag shares its line with what is stored before it, as the one-shot's
 * push does (oneshot.c): a push or an entry is one line taken from the
 * reader, not one per word. With a line per word (until 2026-12-06) a tile
 * cost 5 lines and an entry 9, each a miss on the writer's side since the
 * peer read it last; one line each made the 16-core Xeon's 8-rank staged
 * all-reduce 4 KiB 8.4-8.9 -> 6.3-6.7 us and 16 KiB 16.7-18.0 -> 12.9-13.8
 * (medians, 3 alternations with the old layout's build; 64 KiB-1 MiB and
 * 2 ranks within noise; docs/perf/2026-12-06-cpu-16core-floors-lines.md).
 *
 * Epochs are per ordered pair: sent[p] counts the tiles this rank pushed to
 * p since the region was created, got[p] the tiles it consumed from p; the
 * two ends of a pair count the same tiles, so they agree without talking.
 * Tile number e goes to slot (e-1) % ring; the producer writes it only once
 * ack >= e - ring (the consumer is done with the tile that was in that
 * slot), so a fast rank runs up to `ring` tiles ahead of a slow peer, across
 * calls too. Compares are wrap-safe ((int32_t)(got - want) >= 0).
 *
 * Schedule of one call of U items (push form: the U tiles of the
 * contribution each peer is owed; two-shot: T1 tiles of the shard each peer
 * owns, then T1 tiles of this rank's reduced shard to every peer), iteration
 * i = 0..U: consume item i-1 (wait for it from every peer, reduce or place
 * it, acknowledge), then push item i to every peer. Every wait is on an
 * event a peer reaches earlier in the same order (a push of item i waits for
 * the consume of item i-ring, at the peer's iteration i-ring+1 <= i, before
 * its push of i; a consume of i waits for pushes of i at iteration i; the
 * two-shot's push of T1+k needs this rank's consume of k, at iteration
 * k+1 <= T1+k), so blocking waits cannot deadlock, and consuming one tile
 * behind the push is the pipelining the GPU kernel does. Waits are the
 * transport's (relayShmWaitWord: deadline, abort, dead and failed peers).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "plan/plan.h"
#include "reduce_host.h"
#include "topo/topo.h"
#include "transport/shm/shm_transport.h"

typedef struct {
  int tried, ready;
  int n, ring;
  size_t tileBytes;
  relayShmRegion reg;
  uint32_t* sent; /* [n] tiles pushed to each peer */
  uint32_t* got;  /* [n] tiles consumed from each peer */
  /* The one-copy path for any buffers (below "windows"): voted at setup, every rank alike. */
  int cma;
  uint64_t cmaToken; /* what a peer's probe must read here */
  char* pull;        /* (min(n, 8) - 1) tiles of tileBytes: what a reduce reads of its peers at once */
} bwState;

static bwState bwDeclined = {.tried = 1}; /* out of memory before the vote: declined for good */

/* Per source and slot: byte count, call number, mark, shape. */
enum { BW_INFO_BYTES = 0, BW_INFO_CALL = 1, BW_INFO_MARK = 2, BW_INFO_SHAPE = 3, BW_NINFO = 4 };
/* The direct path's entry words. */
enum {
  BW_ENT_CALL = 0,
  BW_ENT_MARK = 1,
  BW_ENT_SHAPE = 2,
  BW_ENT_WIN = 3,
  BW_ENT_SOFF_LO = 4,
  BW_ENT_SOFF_HI = 5,
  BW_ENT_ROFF_LO = 6,
  BW_ENT_ROFF_HI = 7,
  BW_NENT = 8
};
/* One writer per line; v is the flag a peer waits on, stored last (release). */
typedef struct {
  _Alignas(RELAY_SHM_LINE) _Atomic uint32_t v;
  _Atomic uint32_t info[BW_NINFO];
} bwTileLine;
typedef struct {
  _Alignas(RELAY_SHM_LINE) _Atomic uint32_t v;
  _Atomic uint32_t info[BW_NENT];
} bwEntryLine;
_Static_assert(sizeof(bwTileLine) == RELAY_SHM_LINE && sizeof(bwEntryLine) == RELAY_SHM_LINE,
               "a tile's and an entry's words share one line");

static size_t bwTilesOff(void) { return relayShmRegionHeaderBytes(); }
static size_t bwAcksOff(const bwState* s) {
  return bwTilesOff() + (size_t)s->n * (size_t)s->ring * RELAY_SHM_LINE;
}
static size_t bwEntryOff(const bwState* s) { return bwAcksOff(s) + (size_t)s->n * RELAY_SHM_LINE; }
static size_t bwExitOff(const bwState* s) { return bwEntryOff(s) + (size_t)s->n * RELAY_SHM_LINE; }
static size_t bwStagingOff(const bwState* s) { return bwExitOff(s) + (size_t)s->n * RELAY_SHM_LINE; }
static bwEntryLine* bwEntry(const bwState* s, unsigned char* base, int src) {
  return (bwEntryLine*)(base + bwEntryOff(s)) + src;
}
static _Atomic uint32_t* bwEntryInfo(const bwState* s, unsigned char* base, int what, int src) {
  return &bwEntry(s, base, src)->info[what];
}
static relayShmWord* bwExit(const bwState* s, unsigned char* base, int src) {
  return (relayShmWord*)(base + bwExitOff(s)) + src;
}

static bwTileLine* bwTile(const bwState* s, unsigned char* base, int src, int slot) {
  return (bwTileLine*)(base + bwTilesOff()) + (size_t)src * (size_t)s->ring + (size_t)slot;
}
static _Atomic uint32_t* bwInfo(const bwState* s, unsigned char* base, int what, int src, int slot) {
  return &bwTile(s, base, src, slot)->info[what];
}
static relayShmWord* bwAck(const bwState* s, unsigned char* base, int src) {
  return (relayShmWord*)(base + bwAcksOff(s)) + src;
}
static unsigned char* bwStaging(const bwState* s, unsigned char* base, int src, int slot) {
  return base + bwStagingOff(s) + ((size_t)src * (size_t)s->ring + (size_t)slot) * s->tileBytes;
}

void relayShmBwFree(struct relayComm* comm) {
  bwState* s = comm->bw;
  comm->bw = NULL;
  if (!s || s == &bwDeclined) return;
  relayShmRegionUnmap(&s->reg);
  free(s->pull);
  free(s->sent);
  free(s->got);
  free(s);
}

/* What a process_vm_readv of 8 bytes costs on this host in ns, min of 9 (this process reads itself: the
 * syscall, the pinning and the walk a peer's read takes, so the one copy's fixed cost); 0 when it cannot
 * read (the peers' probes then decide). RELAYCC_SHM_CMA_SLOW_NS says why it matters. */
static uint64_t bwCmaReadNs(void) {
  uint64_t from = 1, to = 0, best = UINT64_MAX;
  for (int i = 0; i < 9; i++) {
    struct iovec l = {&to, sizeof to}, r = {&from, sizeof from};
    uint64_t t0 = relayNowNs();
    ssize_t got = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
    uint64_t t = relayNowNs() - t0;
    if (got != (ssize_t)sizeof to) return 0;
    if (t < best) best = t;
  }
  return best ? best : 1;
}

/* What each rank puts in the one-copy setup's agreement: where its token lies, the token, its read's cost. */
typedef struct {
  uint64_t tokenAddr, token, readNs;
} bwCmaRecord;

/* The one-copy path's setup, COLLECTIVE (every rank of a ready region, RELAYCC_SHM_CMA_BYTES agreed):
 * each rank publishes the address of a token only it holds; every rank reads every peer's with
 * process_vm_readv from the pid the transport checked in (0 where the peer is in another PID namespace:
 * a pid there may name another process) and compares it, so a read that reaches the wrong process, or
 * none (Yama's ptrace_scope, containers, seccomp), votes no and every rank stays staged;
 * RELAYCC_DEBUG=1 names the rank, the peer and the reason. The record carries each rank's measured cost
 * of a read too (bwCmaReadNs): where the least of them is above RELAYCC_SHM_CMA_SLOW_NS every rank
 * stays staged the same way. A no is not an error. */
static relayResult_t bwCmaSetup(struct relayComm* comm, bwState* s) {
  int n = comm->nranks, r = comm->rank;
  shmState* st = shmStateOf(comm);
  int peers = (n < RELAY_TP_ONESHOT_MAX ? n : RELAY_TP_ONESHOT_MAX) - 1;
  s->pull = malloc((size_t)(peers > 0 ? peers : 1) * s->tileBytes);
  s->cmaToken = relayShmCommHash(comm) * 0x100000001b3ull + (uint64_t)r + 1;
  long long slowNs = relayParamInt(comm, RELAY_P_SHM_CMA_SLOW_NS);
  bwCmaRecord mine = {(uint64_t)(uintptr_t)&s->cmaToken, s->cmaToken, slowNs > 0 ? bwCmaReadNs() : 0};
  if (slowNs > 0 && relayDebugLevel() >= 2) {
    if (mine.readNs)
      fprintf(stderr, "relaycc: rank %d: an 8-byte process_vm_readv costs %llu ns here\n", r,
              (unsigned long long)mine.readNs);
    else fprintf(stderr, "relaycc: rank %d: cannot time a process_vm_readv of itself here\n", r);
  }
  const void* got;
  relayResult_t res = relayAgree(comm, &mine, sizeof mine, &got);
  if (res != relaySuccess) return res;
  const bwCmaRecord* all = got;
  char why[RELAY_VOTE_WHY_BYTES] = "";
  int ok = s->pull != NULL;
  if (!ok) snprintf(why, sizeof why, "it is out of memory for the pull buffer");
  for (int q = 0; q < n && ok; q++) {
    if (q == r) continue;
    uint64_t token = 0;
    struct iovec l = {&token, sizeof token}, rv = {(void*)(uintptr_t)all[q].tokenAddr, sizeof token};
    int32_t pid = st ? st->pids[q] : 0;
    if (!pid) {
      snprintf(why, sizeof why, "rank %d's pid is not in this PID namespace", q);
      ok = 0;
    } else if (process_vm_readv(pid, &l, 1, &rv, 1, 0) != (ssize_t)sizeof token) {
      snprintf(why, sizeof why, "it cannot read rank %d's memory with process_vm_readv (%s)", q,
               strerror(errno));
      ok = 0;
    } else if (token != all[q].token) {
      snprintf(why, sizeof why, "process_vm_readv of rank %d (pid %d) read another process's memory", q,
               (int)pid);
      ok = 0;
    }
  }
  /* Every rank holds every rank's cost (the agreement) and takes the least: the ranks time the same host,
   * and a rank's timing only grows with what else runs. */
  uint64_t least = 0;
  int at = -1;
  for (int q = 0; q < n && slowNs > 0; q++) {
    uint64_t ns = all[q].readNs;
    if (ns && (at < 0 || ns < least)) least = ns, at = q;
  }
  if (ok && at >= 0 && least > (uint64_t)slowNs) {
    snprintf(why, sizeof why,
             "an 8-byte process_vm_readv costs %llu ns (rank %d's, the least) > RELAYCC_SHM_CMA_SLOW_NS "
             "%lld: the staged path's copies cost less",
             (unsigned long long)least, at, slowNs);
    ok = 0;
  }
  relayVerdict v;
  res = relayVote(comm, ok, why, &v);
  if (res != relaySuccess) return res;
  s->cma = v.yes;
  if (!v.yes && comm->topo) /* the router stops pricing it (topo.h) */
    comm->topo->oneCopyBytes = comm->topo->oneCopyPairBytes = comm->topo->oneCopyRootedBytes = 0;
  if (!v.yes && relayDebugLevel() >= 1)
    fprintf(stderr,
            "relaycc: rank %d: shm bandwidth route stays staged (no one-copy path): rank %d voted no: %s\n",
            r, v.rank, v.why);
  return relaySuccess;
}

/* What the vote compares: ranks whose tile or ring differ decline together. */
static uint64_t bwParam(size_t tileBytes, int ring) { return ((uint64_t)tileBytes << 8) | (uint64_t)ring; }

relayResult_t relayShmBwPrepare(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream) {
  (void)stream; /* no capture on the CPU */
  bwState* s = comm->bw;
  /* The ring must be the one the region was made with (slot = tile % ring on both ends). */
  if (s && s->tried)
    return s->ready && tileBytes <= s->tileBytes && ring == s->ring ? relaySuccess : relayNotSupported;
  int n = comm->nranks;
  size_t tb = (tileBytes + RELAY_SHM_LINE - 1) / RELAY_SHM_LINE * RELAY_SHM_LINE;
  if (ring < 1 || ring > RELAY_BW_MAX_RING || tb == 0) {
    comm->bw = &bwDeclined;
    return relayShmRegionDecline(comm, bwParam(tb, ring));
  }
  s = calloc(1, sizeof *s);
  if (s) {
    s->sent = calloc((size_t)n, sizeof *s->sent);
    s->got = calloc((size_t)n, sizeof *s->got);
  }
  if (!s || !s->sent || !s->got) {
    if (s) free(s->sent), free(s->got);
    free(s);
    comm->bw = &bwDeclined; /* sticky, as the peers' answer is */
    return relayShmRegionDecline(comm, bwParam(tb, ring));
  }
  comm->bw = s;
  s->tried = 1; /* one attempt per comm, all ranks alike */
  s->n = n;
  s->ring = ring;
  s->tileBytes = tb;
  size_t bytes = bwStagingOff(s) + (size_t)n * (size_t)ring * tb;
  relayResult_t res = relayShmRegionSetup(comm, &s->reg, "bw", bwParam(tb, ring), bytes,
                                          (int)relayParamInt(comm, RELAY_P_BW_FAULT_RANK));
  s->ready = res == relaySuccess;
  if (s->ready && relayParamInt(comm, RELAY_P_SHM_CMA_BYTES) > 0) res = bwCmaSetup(comm, s);
  return res;
}

/* The call's geometry (planBwItem cuts the items). */
typedef struct {
  const relayBwDesc* w;
  size_t es, tile, count, shard; /* shard 0: push form */
  uint64_t T1, U;
} bwCall;

static void bwItem(const bwCall* g, uint64_t u, int from, int to, size_t* off, size_t* len) {
  uint64_t o, l;
  planBwItem(g->count, g->w->c.srcStride, g->tile, g->shard, g->T1, u, from, to, &o, &l);
  *off = (size_t)o;
  *len = (size_t)l;
}

static relayResult_t bwPush(struct relayComm* comm, bwState* s, const bwCall* g, uint64_t u) {
  const relayOneShotDesc* d = &g->w->c;
  int A = d->nActive, me = d->me, r = comm->rank;
  /* Peers in turn starting after me, so they are not all written in the same order. A rooted call pushes
   * its data way only (broadcast: the root to each peer; reduce: each peer to the root). */
  for (int k = 1; k < A; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    if (!relayShmPushBytes(d, me, i, 1)) continue;
    uint32_t e = s->sent[p] + 1;
    int slot = (int)((e - 1) % (uint32_t)g->w->ring);
    relayResult_t res = relayShmRegionWait(comm, &bwAck(s, s->reg.base[r], p)->v, e - (uint32_t)g->w->ring, p,
                                           "bw", "acknowledgement of tile");
    if (res != relaySuccess) return res;
    size_t off, len;
    bwItem(g, u, me, i, &off, &len);
    const char* from = g->w->twoShot && u >= g->T1 ? (const char*)d->dst : (const char*)d->src;
    if (len) memcpy(bwStaging(s, s->reg.base[p], r, slot), from + off * g->es, len * g->es);
    unsigned char* at = s->reg.base[p];
    atomic_store_explicit(bwInfo(s, at, BW_INFO_BYTES, r, slot), (uint32_t)(len * g->es),
                          memory_order_relaxed);
    relayShmStampMark(comm, bwInfo(s, at, BW_INFO_CALL, r, slot), bwInfo(s, at, BW_INFO_MARK, r, slot),
                      bwInfo(s, at, BW_INFO_SHAPE, r, slot));
    atomic_store_explicit(&bwTile(s, s->reg.base[p], r, slot)->v, e, memory_order_release);
    s->sent[p] = e;
    relayShmRing(comm, p);
  }
  return relaySuccess;
}

static relayResult_t bwConsume(struct relayComm* comm, bwState* s, const bwCall* g, uint64_t u) {
  const relayOneShotDesc* d = &g->w->c;
  int A = d->nActive, me = d->me, r = comm->rank;
  unsigned char* mine = s->reg.base[r];
  const void* srcs[RELAY_TP_ONESHOT_MAX];
  size_t offs[RELAY_TP_ONESHOT_MAX] = {0},
         lens[RELAY_TP_ONESHOT_MAX] = {0}; /* gcc -O2 cannot see i == me is reached */
  for (int i = 0; i < A; i++) {
    bwItem(g, u, i, me, &offs[i], &lens[i]);
    srcs[i] = NULL;
    if (i == me) {
      srcs[i] = (const char*)d->src + offs[i] * g->es;
      continue;
    }
    if (!relayShmPushBytes(d, i, me, 1)) continue; /* a rooted call's way without data */
    int p = d->ranks[i];
    uint32_t e = s->got[p] + 1;
    int slot = (int)((e - 1) % (uint32_t)g->w->ring);
    relayResult_t res = relayShmRegionWait(comm, &bwTile(s, mine, p, slot)->v, e, p, "bw", "push of tile");
    if (res != relaySuccess) return res;
    res = relayShmCheckMark(comm, bwInfo(s, mine, BW_INFO_CALL, p, slot),
                            bwInfo(s, mine, BW_INFO_MARK, p, slot), bwInfo(s, mine, BW_INFO_SHAPE, p, slot),
                            p, "bw");
    if (res != relaySuccess) return res;
    uint32_t bytes = atomic_load_explicit(bwInfo(s, mine, BW_INFO_BYTES, p, slot), memory_order_relaxed);
    if (bytes != (uint32_t)(lens[i] * g->es))
      return relaySetError(comm, relayInvalidUsage,
                           "bw: rank %d pushed %u bytes as tile %llu, this rank expects %zu (counts differ "
                           "between ranks)",
                           p, bytes, (unsigned long long)u, lens[i] * g->es);
    srcs[i] = bwStaging(s, mine, p, slot);
  }
  size_t len = lens[me];
  int R = d->root, rooted = R >= 0 && R < A;
  if (rooted && d->gather) {
    /* Broadcast: the root's tile u to its place (the root's own unless in place). */
    char* to = (char*)d->dst + (size_t)u * g->tile * g->es;
    if (len && to != srcs[R]) memcpy(to, srcs[R], len * g->es);
  } else if (rooted && me != R) {
    /* Reduce: a peer writes nothing. */
  } else if (g->w->twoShot && u >= g->T1) {
    /* Phase 2: every peer's reduced shard tile to its place. */
    for (int i = 0; i < A; i++)
      if (i != me && lens[i]) memcpy((char*)d->dst + offs[i] * g->es, srcs[i], lens[i] * g->es);
  } else if (d->gather) {
    /* Side by side; own block last: in place (all-gather) it is its own source. */
    size_t at = (size_t)u * g->tile * g->es;
    for (int k = 1; k <= A && len; k++) {
      int i = (me + k) % A;
      memmove((char*)d->dst + (size_t)i * g->count * g->es + at, srcs[i], len * g->es);
    }
  } else if (len) {
    /* Push form: my output tile u; two-shot phase 1: tile u of my shard.
     * Active-index order: the same bits as every route. */
    size_t at = g->w->twoShot ? offs[me] : (size_t)u * g->tile;
    relayHostReduce((char*)d->dst + at * g->es, srcs, A, len, d->dtype, d->op, d->divisor);
  }
  for (int i = 0; i < A; i++) {
    if (i == me || !relayShmPushBytes(d, i, me, 1)) continue;
    int p = d->ranks[i];
    s->got[p]++;
    atomic_store_explicit(&bwAck(s, s->reg.base[p], r)->v, s->got[p], memory_order_release);
    relayShmRing(comm, p);
  }
  return relaySuccess;
}

/* ---- windows: the direct path ------------------------------------------------
 *
 * A window registered on every rank (relayCommRegister) is reachable with
 * cross-memory attach (window.c: registration, relayShmWinCopy).
 *
 * A direct call (relayBwDesc.win), on every active:
 *   entry: store window id, offsets, call, mark and shape in every peer's
 *          region, then release the entry flag = call number (mod 2^32);
 *          wait for every peer's (in my region) and compare. Another window
 *          or offset, or window 0 (a peer that took the staged path posts
 *          that entry on any comm with direct windows: its buffers are not
 *          in the window, or it passed a bad one and runs through scratch)
 *          sends this rank to the staged path too; every active sees the
 *          same A entries, so all of them go there together and the call is
 *          right (the caller broke the contract: check mode names the rank).
 *          From here every peer is inside the call: its recv is free to
 *          write and its send final.
 *   move:  all-gather, all-to-all: write my block for peer j straight into
 *          its recv at recvOff + me * count; reduce-scatter: read block me of
 *          every peer's send, tile by tile into the window's pull buffer,
 *          reduce in active-index order into my recv; all-reduce: shard me
 *          (planBwShard, as the two-shot) read from every peer, reduced into
 *          my recv, then written into every peer's recv. Only shard j's
 *          owner touches shard j anywhere and reads a tile before it writes
 *          it, so in place is safe.
 *   exit:  release exit flag = call number in every peer's region; wait for
 *          every peer's in mine: every write into my recv is done and every
 *          read of my send finished, so the call may return.
 * A rooted call (relayOneShotDesc.root) runs only the root's pairs, its data
 * one way. Staged: the root pushes its tiles to every peer, which places
 * them (broadcast), or every peer pushes to the root, which reduces them
 * (reduce). One copy (broadcast only, bwCmaWanted): the root posts its
 * entry and goes on; each peer waits for it, reads the root's send straight
 * into its recv, looks at the root's slot once, posts its exit; the root
 * waits for every peer's exit (bwDirectExit says why that one round is
 * enough).
 * Waits are relayShmRegionWait's (deadline, abort, dead and failed peers); a
 * copy that fails (ESRCH: the peer died) names the peer. */

/* The entry record in every peer's region (window 0: the staged path). */
static void bwPostEntry(struct relayComm* comm, bwState* s, const relayOneShotDesc* d, uint32_t win,
                        size_t soff, size_t roff) {
  int r = comm->rank;
  for (int k = 1; k < d->nActive; k++) {
    int i = (d->me + k) % d->nActive, p = d->ranks[i];
    if (!relayShmPairs(d, d->me, i)) continue; /* a rooted call: the root's pairs only */
    unsigned char* at = s->reg.base[p];
    uint32_t v[BW_NENT] = {0,
                           0,
                           0,
                           win,
                           (uint32_t)soff,
                           (uint32_t)((uint64_t)soff >> 32),
                           (uint32_t)roff,
                           (uint32_t)((uint64_t)roff >> 32)};
    for (int f = BW_ENT_WIN; f < BW_NENT; f++)
      atomic_store_explicit(bwEntryInfo(s, at, f, r), v[f], memory_order_relaxed);
    relayShmStampMark(comm, bwEntryInfo(s, at, BW_ENT_CALL, r), bwEntryInfo(s, at, BW_ENT_MARK, r),
                      bwEntryInfo(s, at, BW_ENT_SHAPE, r));
    atomic_store_explicit(&bwEntry(s, at, r)->v, (uint32_t)comm->callSeq, memory_order_release);
    relayShmRing(comm, p);
  }
}

static uint64_t bwEntry64(const bwState* s, unsigned char* base, int lo, int p) {
  return (uint64_t)atomic_load_explicit(bwEntryInfo(s, base, lo, p), memory_order_relaxed) |
         (uint64_t)atomic_load_explicit(bwEntryInfo(s, base, lo + 1, p), memory_order_relaxed) << 32;
}

/* Window id of an entry whose offsets are the poster's own send and recv addresses: the one-copy path for
 * buffers in no window (bwCmaSetup). Window ids count from 1 and never reach it. */
#define BW_WIN_ADDRS UINT32_MAX

/* Where the direct path reaches each active (by active index): its process, the start of its send and
 * recv, and for messages the window's base (0: buffers in no window). */
typedef struct {
  int32_t pid[RELAY_TP_ONESHOT_MAX];
  uint64_t send[RELAY_TP_ONESHOT_MAX], recv[RELAY_TP_ONESHOT_MAX], winBase[RELAY_TP_ONESHOT_MAX];
  char* pull;      /* (A - 1) tiles */
  size_t pullTile; /* bytes per peer in pull */
} bwReach;

static relayResult_t bwReachCopy(struct relayComm* comm, const relayOneShotDesc* d, const bwReach* at, int i,
                                 int write, void* local, uint64_t remote, size_t len) {
  uint64_t base = at->winBase[i] ? at->winBase[i] : write ? at->recv[i] : at->send[i];
  const char* where = at->winBase[i] ? "window" : write ? "recv buffer" : "send buffer";
  return relayShmCmaCopy(comm, at->pid[i], d->ranks[i], write, local, remote, len, base, where);
}

/* A rooted call's one copy (broadcast) has one reader side, the peers, reading the root's buffer: 1 when
 * this rank owns what is read. */
static int bwOwns(const relayOneShotDesc* d) { return d->me == d->root; }

/* *direct = 1 when every active posted my window (BW_WIN_ADDRS: its own addresses, into at) and, in a
 * window, my offsets, else 0: every active then sees the same A entries, so all of them fall back to the
 * staged path together (the entries of a staged rank carry window 0). */
static relayResult_t bwDirectEntry(struct relayComm* comm, bwState* s, const relayOneShotDesc* d,
                                   uint32_t myWin, uint64_t soff, uint64_t roff, bwReach* at, int* direct) {
  unsigned char* mine = s->reg.base[comm->rank];
  /* A rooted call: an owner (bwOwns) posts where its buffers are and goes on, a reader waits for its
   * owners' (a reader of another shape finds it in an owner's entry; an owner's wait for a reader's exit
   * finds it in that reader's slot). */
  int rooted = d->root >= 0 && d->root < d->nActive, owns = rooted && bwOwns(d);
  if (!rooted || owns) bwPostEntry(comm, s, d, myWin, (size_t)soff, (size_t)roff);
  *direct = 1;
  for (int k = 1; k < d->nActive && !owns; k++) {
    int i = (d->me + k) % d->nActive, p = d->ranks[i];
    if (!relayShmPairs(d, d->me, i)) continue;
    relayResult_t res = relayShmRegionWait(comm, &bwEntry(s, mine, p)->v, (uint32_t)comm->callSeq, p,
                                           "bw direct", "entry into the call");
    if (res == relaySuccess)
      res =
          relayShmCheckMark(comm, bwEntryInfo(s, mine, BW_ENT_CALL, p), bwEntryInfo(s, mine, BW_ENT_MARK, p),
                            bwEntryInfo(s, mine, BW_ENT_SHAPE, p), p, "bw direct");
    if (res != relaySuccess) return res;
    uint32_t win = atomic_load_explicit(bwEntryInfo(s, mine, BW_ENT_WIN, p), memory_order_relaxed);
    uint64_t so = bwEntry64(s, mine, BW_ENT_SOFF_LO, p), ro = bwEntry64(s, mine, BW_ENT_ROFF_LO, p);
    at->send[i] = so;
    at->recv[i] = ro;
    if (*direct && (win != myWin || (win != BW_WIN_ADDRS && (so != soff || ro != roff)))) {
      *direct = 0;
      if (relayDebugLevel() >= 1)
        fprintf(stderr,
                "relaycc: rank %d: call #%llu: rank %d's buffers lie in window %u at send offset %llu, "
                "recv offset %llu, this rank's in window %u at %llu, %llu (0: none, %u: one copy of any "
                "buffers): every active takes the staged path\n",
                comm->rank, (unsigned long long)comm->callSeq, p, win, (unsigned long long)so,
                (unsigned long long)ro, myWin, (unsigned long long)soff, (unsigned long long)roff,
                BW_WIN_ADDRS);
    }
  }
  return relaySuccess;
}

static void bwPostExits(struct relayComm* comm, bwState* s, const relayOneShotDesc* d) {
  for (int k = 1; k < d->nActive; k++) {
    int i = (d->me + k) % d->nActive, p = d->ranks[i];
    if (!relayShmPairs(d, d->me, i)) continue;
    atomic_store_explicit(&bwExit(s, s->reg.base[p], comm->rank)->v, (uint32_t)comm->callSeq,
                          memory_order_release);
    relayShmRing(comm, p);
  }
}

/* Every active posts its exit and waits for its pairs'. A rooted call has one round: a reader, done with
 * the owners' buffers, looks at each owner's slot once and posts its exit; an owner waits for its readers'.
 * An owner cannot return success before that post, and one that fails first (a reader past its deadline)
 * marks its slot failed before it returns, so a reader that finds it unmarked after its reads read while
 * the owner was still in the call, and one that finds it marked fails too: never a success read from a
 * buffer the owner's caller had back. */
static relayResult_t bwDirectExit(struct relayComm* comm, bwState* s, const relayOneShotDesc* d) {
  int r = comm->rank, rooted = d->root >= 0 && d->root < d->nActive, reads = rooted && !bwOwns(d);
  for (int k = 1; k < d->nActive && reads; k++) {
    int i = (d->me + k) % d->nActive;
    if (!relayShmPairs(d, d->me, i)) continue;
    shmState* st = shmStateOf(comm);
    int what = shmPeerState(comm, st, d->ranks[i]);
    if (what != SHM_PEER_OK) return shmPeerError(comm, st, d->ranks[i], what, "bw direct, after the copy");
  }
  if (!rooted || reads) bwPostExits(comm, s, d);
  if (reads) return relaySuccess;
  for (int k = 1; k < d->nActive; k++) {
    int i = (d->me + k) % d->nActive, p = d->ranks[i];
    if (!relayShmPairs(d, d->me, i)) continue;
    relayResult_t res = relayShmRegionWait(comm, &bwExit(s, s->reg.base[r], p)->v, (uint32_t)comm->callSeq, p,
                                           "bw direct", "exit from the call");
    if (res != relaySuccess) return res;
  }
  return relaySuccess;
}

/* Reduce elements [off, off + len) of every active's send (the peers' read into the pull buffer) into dst,
 * in tiles of the pull buffer. */
static relayResult_t bwDirectReduce(struct relayComm* comm, const relayBwDesc* w, const bwReach* at,
                                    size_t es, uint64_t off, uint64_t len, char* dst) {
  const relayOneShotDesc* d = &w->c;
  size_t tile = at->pullTile / es;
  if (w->tileElems < tile) tile = w->tileElems;
  for (uint64_t t = 0; t < len; t += tile) {
    size_t n = len - t < tile ? (size_t)(len - t) : tile;
    const void* srcs[RELAY_TP_ONESHOT_MAX];
    for (int i = 0, slot = 0; i < d->nActive; i++) {
      if (i == d->me) {
        srcs[i] = (const char*)d->src + (off + t) * es;
        continue;
      }
      char* into = at->pull + (size_t)slot++ * at->pullTile;
      RELAY_CHECK(bwReachCopy(comm, d, at, i, 0, into, at->send[i] + (off + t) * es, n * es));
      srcs[i] = into;
    }
    relayHostReduce(dst + t * es, srcs, d->nActive, n, d->dtype, d->op, d->divisor);
  }
  return relaySuccess;
}

/* A broadcast peer's reads of the root's buffer, bytes at once. Larger reads won on the 2-core EPYC
 * (relaycc-bench --ranks 8 -A 8 -c broadcast --route bw --check 0, 2026-12-05): 1 MiB took 344 us in reads
 * of 128 KiB, 261 in 1 MiB reads, 280 in one read; 4 MiB 1616, 1332 and 1510 us: the 7 readers still move
 * through the root's buffer close together, and each read pins the root's pages once. A dead root ends a
 * read at once (ESRCH). */
#define BW_ROOTED_READ_BYTES ((size_t)1 << 20)

static relayResult_t bwDirectMove(struct relayComm* comm, const relayBwDesc* w, const bwReach* at,
                                  size_t es) {
  const relayOneShotDesc* d = &w->c;
  int A = d->nActive, me = d->me, R = d->root;
  uint64_t c = d->count;
  if (R >= 0 && R < A) {
    /* Broadcast (a reduce never comes here: bwCmaWanted): the root copies its own (unless in place); every
     * peer reads the root's send once, straight into its recv (the staged path writes A-1 copies, then each
     * peer copies its own out), in reads of BW_ROOTED_READ_BYTES. */
    if (me == R) {
      if (d->src != d->dst) memcpy(d->dst, d->src, c * es);
      return relaySuccess;
    }
    /* Each reader starts at its own 1/(A-1) of the buffer (page-aligned) and wraps around, so the readers
     * pin and read different pages at once instead of all walking the root's pages together: on the 16-core
     * Xeon (relaycc-bench -c broadcast --route bw, 2 alternations with main's build, min us) 4 ranks 1M
     * 328-349 -> 235-245, 4M 912-945 -> 572-732, 16M 4804-5239 -> 3583-4559; 8 ranks 4M 1982-2012 ->
     * 1427-1602, 16M 6290-6564 -> 4796-5010; 8 ranks 256K-1M within their noise
     * (docs/perf/2026-12-06-cpu-16core-stagger-ring.md). */
    size_t tile = BW_ROOTED_READ_BYTES, bytes = c * es;
    size_t seg = shmAlignUp(bytes / (size_t)(A - 1), 4096);
    size_t start = (size_t)((me - R - 1 + A) % A) * seg;
    if (start >= bytes) start = 0;
    for (int part = 0; part < 2; part++) {
      size_t lo = part ? 0 : start, hi = part ? start : bytes;
      for (size_t off = lo; off < hi; off += tile)
        RELAY_CHECK(bwReachCopy(comm, d, at, R, 0, (char*)d->dst + off, at->send[R] + off,
                                hi - off < tile ? hi - off : tile));
    }
    return relaySuccess;
  }
  if (d->gather) {
    /* All-gather (stride 0) and all-to-all (stride count): my block for
     * active i into its recv block me; mine to my own recv unless in place. */
    for (int k = 1; k < A; k++) {
      int i = (me + k) % A;
      const char* from = (const char*)d->src + (size_t)i * d->srcStride * es;
      RELAY_CHECK(bwReachCopy(comm, d, at, i, 1, (void*)from, at->recv[i] + (uint64_t)me * c * es, c * es));
    }
    const char* own = (const char*)d->src + (size_t)me * d->srcStride * es;
    char* to = (char*)d->dst + (size_t)me * c * es;
    if (own != to) memcpy(to, own, c * es);
    return relaySuccess;
  }
  if (d->srcStride) /* reduce-scatter: block me of every active */
    return bwDirectReduce(comm, w, at, es, (uint64_t)me * c, c, (char*)d->dst);
  /* All-reduce: shard me, reduced into my recv, then into every peer's. */
  uint64_t shard = planBwShard(c, A), lo = (uint64_t)me * shard, hi = lo + shard;
  if (lo > c) lo = c;
  if (hi > c) hi = c;
  if (hi == lo) return relaySuccess;
  RELAY_CHECK(bwDirectReduce(comm, w, at, es, lo, hi - lo, (char*)d->dst + lo * es));
  for (int k = 1; k < A; k++) {
    int i = (me + k) % A;
    RELAY_CHECK(
        bwReachCopy(comm, d, at, i, 1, (char*)d->dst + lo * es, at->recv[i] + lo * es, (hi - lo) * es));
  }
  return relaySuccess;
}

/* A one-copy broadcast of buffers in no window whose call's agreement carried every rank's send and found
 * every shape alike (core/api.c agreeOnShape: check mode 0, no direct windows), every rank of the comm an
 * active (one group: the root's plan reads its caller send from its start): its entry round would only
 * repeat that agreement, so the root posts none and a peer reads the root's send from comm->callSends.
 * Every input is the same on every active (the round is every rank's or none's, the shapes equal), so
 * they all skip the entry or none does. The entry's 9 lines a peer (bwPostEntry) cost ~0.45 us: the 2-rank
 * broadcast took 3.12 -> 2.65 us at 4 KiB, 6.7 -> 6.3 at 64 KiB (2-vCPU EPYC KVM,
 * docs/perf/2026-12-06-cpu-bcast-fold-2core.md). */
static int bwEntryAgreed(const struct relayComm* comm, const relayOneShotDesc* d) {
  return comm->callSendsKnown && d->nActive == comm->nranks && d->root >= 0 && d->root < d->nActive &&
         d->gather;
}

/* One call on the direct path: entry, move, exit. *direct = 0: a peer is elsewhere, nothing moved, the
 * caller runs the staged path (on every active alike). */
static relayResult_t bwDirect(struct relayComm* comm, bwState* s, const relayBwDesc* w, size_t es,
                              int* direct) {
  const relayOneShotDesc* d = &w->c;
  bwReach at;
  memset(&at, 0, sizeof at);
  relayResult_t res;
  if (w->win) {
    const relayShmWin* x = w->win->tp;
    if (!x || !w->win->direct)
      return relaySetError(comm, relayInternalError, "bw direct: window %u is staged-only", w->win->id);
    res = bwDirectEntry(comm, s, d, w->win->id, w->sendOff, w->recvOff, &at, direct);
    for (int i = 0; i < d->nActive; i++) {
      int p = d->ranks[i];
      at.pid[i] = x->pids[p];
      at.winBase[i] = x->bases[p];
      at.send[i] = x->bases[p] + w->sendOff;
      at.recv[i] = x->bases[p] + w->recvOff;
    }
    at.pull = x->pull;
    at.pullTile = x->pullTile;
  } else if (bwEntryAgreed(comm, d)) {
    /* The call's agreement carried the root's send (comm->callSends) and found every shape alike: the entry
     * round has nothing left to tell, so every active skips it alike. */
    *direct = 1;
    res = relaySuccess;
    if (bwOwns(d) && comm->callSends[comm->rank] != (uint64_t)(uintptr_t)d->src)
      res = relaySetError(comm, relayInternalError,
                          "bw one copy: the root's send %p is not the %#llx its agreement carried", d->src,
                          (unsigned long long)comm->callSends[comm->rank]);
    at.send[d->root] = comm->callSends[d->ranks[d->root]];
    for (int i = 0; i < d->nActive; i++) at.pid[i] = shmStateOf(comm)->pids[d->ranks[i]];
    at.pull = s->pull;
    at.pullTile = s->tileBytes;
  } else {
    res = bwDirectEntry(comm, s, d, BW_WIN_ADDRS, (uint64_t)(uintptr_t)d->src, (uint64_t)(uintptr_t)d->dst,
                        &at, direct);
    for (int i = 0; i < d->nActive; i++) at.pid[i] = shmStateOf(comm)->pids[d->ranks[i]];
    at.pull = s->pull;
    at.pullTile = s->tileBytes;
  }
  if (res != relaySuccess || !*direct) return res;
  RELAY_CHECK(bwDirectMove(comm, w, &at, es));
  if (!w->win) comm->last.window = BW_WIN_ADDRS; /* tests tell the one-copy path from the staged one */
  return bwDirectExit(comm, s, d);
}

/* The one-copy path for buffers in no window: voted at setup, and the call big enough that the copy it
 * saves outweighs its entry and exit barriers (RELAYCC_SHM_CMA_BYTES, agreed: every rank of a call with
 * one count decides alike; counts that differ meet at the entry, whose shape digests differ). */
static int bwCmaWanted(struct relayComm* comm, const bwState* s, const relayBwDesc* w, size_t es) {
  const relayOneShotDesc* d = &w->c;
  if (!s->cma) return 0;
  uint64_t in = d->count * es * (d->srcStride ? (uint64_t)d->nActive : 1); /* each rank's input */
  /* A reduce stays staged: its one copy would read the A-1 peers' buffers in turn on the root's one core (8
   * ranks of the 2-core EPYC, 1 MiB: 692 us against 307 staged; 4 ranks 4 MiB 1190 against direct's 896). */
  return relayTopoOneCopy((double)relayParamInt(comm, RELAY_P_SHM_CMA_BYTES),
                          (double)relayParamInt(comm, RELAY_P_SHM_CMA_PAIR_BYTES),
                          (double)relayParamInt(comm, RELAY_P_SHM_CMA_ROOTED_BYTES), d->nActive,
                          d->root >= 0 && d->root < d->nActive, d->gather, (double)in);
}

relayResult_t relayShmBw(struct relayComm* comm, const relayBwDesc* w, relayStream_t stream) {
  (void)stream;
  bwState* s = comm->bw;
  const relayOneShotDesc* d = &w->c;
  int A = d->nActive, me = d->me, r = comm->rank;
  size_t es = relayTypeSize(d->dtype);
  if (!s || !s->ready || A < 2 || A > RELAY_TP_ONESHOT_MAX || me < 0 || me >= A || d->ranks[me] != r || !es ||
      !w->tileElems || w->tileElems * es > s->tileBytes || w->ring != s->ring || (w->twoShot && d->gather))
    return relaySetError(comm, relayInternalError,
                         "bw: region %s, A %d, me %d, tile %zu x %zu bytes (slot %zu), ring %d (region %d)",
                         s && s->ready ? "ready" : "absent", A, me, w->tileElems, es, s ? s->tileBytes : 0,
                         w->ring, s ? s->ring : 0);
  relayResult_t res = relaySuccess;
  if (w->win || bwCmaWanted(comm, s, w, es)) {
    int direct = 0;
    res = bwDirect(comm, s, w, es, &direct);
    if (res != relaySuccess) comm->tp->fail(comm); /* peers waiting on this rank end now */
    if (res != relaySuccess || direct) return res;
    comm->last.window = 0; /* a peer's buffers are elsewhere: the staged path, on every active */
  } else if (comm->directWindows || s->cma) {
    /* Tell the actives this rank takes the staged path: one that meant the
     * direct one sees window 0 and joins it here. */
    bwPostEntry(comm, s, d, 0, 0, 0);
  }
  bwCall g = {w, es, w->tileElems, d->count, 0, 0, 0};
  if (w->twoShot) {
    g.shard = planBwShard(d->count, A);
    g.T1 = (g.shard + g.tile - 1) / g.tile;
    g.U = 2 * g.T1;
  } else {
    g.U = (d->count + g.tile - 1) / g.tile;
  }
  for (uint64_t i = 0; i <= g.U && res == relaySuccess; i++) {
    if (i >= 1) res = bwConsume(comm, s, &g, i - 1);
    if (res == relaySuccess && i < g.U) res = bwPush(comm, s, &g, i);
  }
  if (res != relaySuccess) {
    /* Peers waiting for this rank's tiles or acknowledgements end their waits
     * now, not at their deadline; the fail op marks the comm failed. */
    comm->tp->fail(comm);
    return res;
  }
  return relaySuccess;
}
