/*
 * The bandwidth route on the shm transport: the CPU twin of the GPU kernel
 * (nccl/bw.cu), so CI proves the tile, epoch, ring and abort protocol at
 * 2-8 ranks. It runs the one-shot's contract (relayBwDesc.c) in tiles
 * through a bounded ring, so staging does not grow with the message.
 *
 * Region (relayShmRegionSetup, tag "bw": created, mapped by all, voted,
 * unlinked), in OWNER's region, one 64-byte line per word:
 *   [flag[n][ring]]   written by source s: "slot k of my ring in your region
 *                     holds my tile number flag (per-pair count, 1-based)"
 *   [bytes, call, mark, shape: [n][ring] each]  stored with the tile before
 *                     its flag: its byte count (counts that differ between
 *                     ranks become relayInvalidUsage), the pusher's call
 *                     number, mark and shape digest (issue 15: a tile of a
 *                     call this rank rejected, or of another shape, is
 *                     refused, never reduced; relayShmCheckMark)
 *   [ack[n]]          written by consumer s: "I consumed your first ack tiles"
 *   [staging[n][ring][tileBytes]]
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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/comm.h"
#include "plan/plan.h"
#include "reduce_host.h"
#include "transport/shm/shm.h"

typedef struct {
  int tried, ready;
  int n, ring;
  size_t tileBytes;
  relayShmRegion reg;
  uint32_t* sent; /* [n] tiles pushed to each peer */
  uint32_t* got;  /* [n] tiles consumed from each peer */
} bwState;

static bwState bwDeclined = {.tried = 1}; /* out of memory before the vote: declined for good */

static size_t bwFlagsOff(void) { return relayShmRegionHeaderBytes(); }
/* Per source and slot: byte count, call number, mark, shape. */
enum { BW_INFO_BYTES = 0, BW_INFO_CALL = 1, BW_INFO_MARK = 2, BW_INFO_SHAPE = 3, BW_NINFO = 4 };
static size_t bwInfoOff(const bwState* s) { return bwFlagsOff() + (size_t)s->n * (size_t)s->ring * RELAY_SHM_LINE; }
static size_t bwAcksOff(const bwState* s) {
  return bwInfoOff(s) + BW_NINFO * (size_t)s->n * (size_t)s->ring * RELAY_SHM_LINE;
}
static size_t bwStagingOff(const bwState* s) { return bwAcksOff(s) + (size_t)s->n * RELAY_SHM_LINE; }

static relayShmWord* bwFlag(const bwState* s, unsigned char* base, int src, int slot) {
  return (relayShmWord*)(base + bwFlagsOff()) + (size_t)src * (size_t)s->ring + (size_t)slot;
}
static _Atomic uint32_t* bwInfo(const bwState* s, unsigned char* base, int what, int src, int slot) {
  return &((relayShmWord*)(base + bwInfoOff(s)) + ((size_t)what * (size_t)s->n + (size_t)src) * (size_t)s->ring +
           (size_t)slot)->v;
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
  free(s->sent);
  free(s->got);
  free(s);
}

/* What the vote compares: ranks whose tile or ring differ decline together. */
static uint64_t bwParam(size_t tileBytes, int ring) { return ((uint64_t)tileBytes << 8) | (uint64_t)ring; }

relayResult_t relayShmBwPrepare(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream) {
  (void)stream; /* no capture on the CPU */
  bwState* s = comm->bw;
  /* The ring must be the one the region was made with (slot = tile % ring on both ends). */
  if (s && s->tried) return s->ready && tileBytes <= s->tileBytes && ring == s->ring ? relaySuccess : relayNotSupported;
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
  /* Peers in turn starting after me, so they are not all written in the same order. */
  for (int k = 1; k < A; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    uint32_t e = s->sent[p] + 1;
    int slot = (int)((e - 1) % (uint32_t)g->w->ring);
    relayResult_t res = relayShmRegionWait(comm, bwAck(s, s->reg.base[r], p), e - (uint32_t)g->w->ring, p, "bw",
                                           "acknowledgement of tile");
    if (res != relaySuccess) return res;
    size_t off, len;
    bwItem(g, u, me, i, &off, &len);
    const char* from = g->w->twoShot && u >= g->T1 ? (const char*)d->dst : (const char*)d->src;
    if (len) memcpy(bwStaging(s, s->reg.base[p], r, slot), from + off * g->es, len * g->es);
    unsigned char* at = s->reg.base[p];
    atomic_store_explicit(bwInfo(s, at, BW_INFO_BYTES, r, slot), (uint32_t)(len * g->es), memory_order_relaxed);
    relayShmStampMark(comm, bwInfo(s, at, BW_INFO_CALL, r, slot), bwInfo(s, at, BW_INFO_MARK, r, slot),
                      bwInfo(s, at, BW_INFO_SHAPE, r, slot));
    atomic_store_explicit(&bwFlag(s, s->reg.base[p], r, slot)->v, e, memory_order_release);
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
  size_t offs[RELAY_TP_ONESHOT_MAX] = {0}, lens[RELAY_TP_ONESHOT_MAX] = {0}; /* gcc -O2 cannot see i == me is reached */
  for (int i = 0; i < A; i++) {
    bwItem(g, u, i, me, &offs[i], &lens[i]);
    if (i == me) {
      srcs[i] = (const char*)d->src + offs[i] * g->es;
      continue;
    }
    int p = d->ranks[i];
    uint32_t e = s->got[p] + 1;
    int slot = (int)((e - 1) % (uint32_t)g->w->ring);
    relayResult_t res = relayShmRegionWait(comm, bwFlag(s, mine, p, slot), e, p, "bw", "push of tile");
    if (res != relaySuccess) return res;
    res = relayShmCheckMark(comm, bwInfo(s, mine, BW_INFO_CALL, p, slot), bwInfo(s, mine, BW_INFO_MARK, p, slot),
                            bwInfo(s, mine, BW_INFO_SHAPE, p, slot), p, "bw");
    if (res != relaySuccess) return res;
    uint32_t bytes = atomic_load_explicit(bwInfo(s, mine, BW_INFO_BYTES, p, slot), memory_order_relaxed);
    if (bytes != (uint32_t)(lens[i] * g->es))
      return relaySetError(comm, relayInvalidUsage,
                           "bw: rank %d pushed %u bytes as tile %llu, this rank expects %zu (counts differ "
                           "between ranks)", p, bytes, (unsigned long long)u, lens[i] * g->es);
    srcs[i] = bwStaging(s, mine, p, slot);
  }
  size_t len = lens[me];
  if (g->w->twoShot && u >= g->T1) {
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
    if (i == me) continue;
    int p = d->ranks[i];
    s->got[p]++;
    atomic_store_explicit(&bwAck(s, s->reg.base[p], r)->v, s->got[p], memory_order_release);
    relayShmRing(comm, p);
  }
  return relaySuccess;
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
  bwCall g = {w, es, w->tileElems, d->count, 0, 0, 0};
  if (w->twoShot) {
    g.shard = planBwShard(d->count, A);
    g.T1 = (g.shard + g.tile - 1) / g.tile;
    g.U = 2 * g.T1;
  } else {
    g.U = (d->count + g.tile - 1) / g.tile;
  }
  relayResult_t res = relaySuccess;
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
