/*
 * The shm transport's remaining ops and its entry point: agreement and
 * barrier (one record per rank and round in its slot), scratch, the local
 * reduce and copy, destroy, the tests' views of the P2P layer, the ops table
 * with its caps, and relayShmAttach, which builds the state the other files
 * share (shm_transport.h) and hands the rendezvous to segment.c.
 */
#include "transport/shm/shm_transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "comm/params.h"
#include "reduce_host.h"

static const relayTransportOps relayShmOps;

static void shmStateFree(shmState* st) {
  if (!st) return;
  shmUnmap(st);
  for (int i = 0; i < st->nscr; i++) free(st->scr[i]);
  free(st->scr);
  free(st->scrBytes);
  free(st->pids);
  free(st->sendHead);
  free(st->sendTailSeen);
  free(st->recvTail);
  free(st->recvHeadSeen);
  free(st->sq);
  free(st->rq);
  free(st->sch);
  free(st->rch);
  free(st->rphdr);
  free(st->sorder);
  free(st->rorder);
  free(st->spart);
  free(st->rpart);
  free(st->snpart);
  free(st->rnpart);
  free(st->swant);
  free(st->sneed);
  free(st->rwant);
  free(st->rdrain);
  free(st->connStore);
  free(st->spend);
  free(st->rpend);
  free(st->tmp);
  free(st);
}

/* ------------------------------------------------------------- agreement */

static relayResult_t shmAgreeRun(struct relayComm* comm, shmState* st, const void* mine, void* all,
                                 size_t bytes) {
  int n = comm->nranks, me = comm->rank;
  uint64_t round = ++st->agreeRound;
  /* Double-buffered by parity: a peer can write round+1's record while we
   * still read round's, and it cannot reach round+2 (same buffer) before we
   * published round+1, which we do only after reading round. */
  shmAgreeBuf* b = &st->slots[me].agree[round & 1];
  if (bytes) memcpy(b->data, mine, bytes);
  b->bytes = (uint32_t)bytes;
  b->call = comm->callSeq;
  atomic_store_explicit(&b->seq, round, memory_order_release);
  for (int q = 0; q < n; q++)
    if (q != me) shmWake(&st->slots[q]);
  if (bytes) memcpy((unsigned char*)all + (size_t)me * bytes, mine, bytes);

  /* The peers still awaited go in spend (the group lists are free here). */
  int* pend = st->spend;
  int np = 0;
  for (int q = 0; q < n; q++)
    if (q != me) pend[np++] = q;
  /* Errors name the round ("agreement round %llu"; the call, when one runs, is the error prefix's), formatted
   * only on the way out: an snprintf a round was ~4% of a 2-rank 4 KiB broadcast's samples (perf, 2-vCPU
   * EPYC, docs/perf/2026-12-06-cpu-bcast-fold-2core.md). */
  unsigned long long rn = (unsigned long long)round;
  shmWaiter w;
  shmWaiterInit(&w);
  (void)shmNoteCpu(comm, st);
  for (;;) {
    uint32_t db = atomic_load_explicit(&st->slots[me].doorbell, memory_order_acquire);
    int got = 0;
    for (int i = 0; i < np;) {
      int q = pend[i];
      shmAgreeBuf* pb = &st->slots[q].agree[round & 1];
      uint64_t s = atomic_load_explicit(&pb->seq, memory_order_acquire);
      if (s != round) {
        if (s > round)
          return relaySetError(comm, relayInvalidUsage,
                               "agreement round %llu: rank %d is already in round %llu: ranks disagree on "
                               "the number of agreements",
                               rn, q, (unsigned long long)s);
        i++;
        continue;
      }
      if (pb->call != comm->callSeq)
        return relaySetError(comm, relayInvalidUsage,
                             "agreement round %llu: rank %d's record is of its call #%llu: a rank rejected a "
                             "call its peers ran (check mode 0), so the ranks are no longer in step",
                             rn, q, (unsigned long long)pb->call);
      if (pb->bytes != bytes)
        return relaySetError(comm, relayInvalidUsage,
                             "agreement round %llu: rank %d agrees on %u bytes, this rank on %zu", rn, q,
                             pb->bytes, bytes);
      if (bytes) memcpy((unsigned char*)all + (size_t)q * bytes, pb->data, bytes);
      pend[i] = pend[--np];
      got++;
    }
    if (np == 0) {
      shmWaiterEnd(&w);
      return relaySuccess;
    }
    if (got) {
      shmWaiterProgress(st, &w);
      continue;
    }
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "agreement round %llu: the comm was aborted", rn);
    int checkPids = w.spun && shmLiveCheckDue(&w), rescan = 0;
    for (int i = 0; i < np && !rescan; i++) {
      int q = pend[i];
      int what = shmPeerState(comm, st, q);
      if (what == SHM_PEER_OK && checkPids && shmPeerDead(st, q)) what = SHM_PEER_DEAD;
      if (what == SHM_PEER_OK) continue;
      /* It may have published its record before failing. */
      if (atomic_load_explicit(&st->slots[q].agree[round & 1].seq, memory_order_acquire) == round) {
        rescan = 1;
        break;
      }
      char where[64];
      snprintf(where, sizeof where, "agreement round %llu", rn);
      return shmPeerError(comm, st, q, what, where);
    }
    if (rescan) continue;
    if (shmPause(comm, st, &w, db, np == 1 ? pend[0] : -1)) {
      char miss[200];
      size_t o = 0;
      for (int i = 0; i < np && o + 16 < sizeof miss; i++)
        o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", i ? ", " : "", pend[i]);
      return relaySetError(comm, relayTimeout,
                           "agreement round %llu: no progress for %d ms waiting for rank%s %s", rn,
                           comm->cfg.timeoutMs, np > 1 ? "s" : "", miss);
    }
  }
}

static relayResult_t shmAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes) {
  shmState* st = shmStateOf(comm);
  if (comm->failed)
    return relaySetError(comm, relayInvalidUsage, "agreement: the comm failed earlier; destroy it");
  if (bytes > SHM_AGREE_MAX || (bytes && (!mine || !all)))
    return shmFail(
        comm, relaySetError(comm, relayInvalidArgument, "agreement on %zu bytes (max %d), mine %p, all %p",
                            bytes, SHM_AGREE_MAX, mine, all));
  relayResult_t res = shmAgreeRun(comm, st, mine, all, bytes);
  return res == relaySuccess ? res : shmFail(comm, res);
}

static relayResult_t shmBarrier(struct relayComm* comm) { return shmAgree(comm, NULL, NULL, 0); }

/* ------------------------------------------------------------ local ops */

static relayResult_t shmReduce(struct relayComm* comm, void* dst, const void* const* srcs, int nsrc,
                               size_t count, relayDataType_t dt, relayRedOp_t op, int divisor, int lane,
                               relayStream_t stream) {
  (void)lane;
  (void)stream;
  if (relayTypeSize(dt) == 0 || (unsigned)op >= relayNumOps || nsrc < 1 || (count && (!dst || !srcs)))
    return relaySetError(comm, relayInvalidArgument, "reduce of %d inputs, %zu elements, dtype %d, op %d",
                         nsrc, count, (int)dt, (int)op);
  if (count) relayHostReduce(dst, srcs, nsrc, count, dt, op, divisor);
  return relaySuccess;
}

static relayResult_t shmCopy(struct relayComm* comm, void* dst, const void* src, size_t bytes, int lane,
                             relayStream_t stream) {
  (void)comm;
  (void)lane;
  (void)stream;
  if (bytes && dst != src) memmove(dst, src, bytes);
  return relaySuccess;
}

static relayResult_t shmScratch(struct relayComm* comm, int slot, size_t bytes, void** ptr,
                                relayStream_t stream) {
  (void)stream;
  shmState* st = shmStateOf(comm);
  if (slot < 0 || !ptr)
    return relaySetError(comm, relayInvalidArgument, "scratch slot %d, ptr %p", slot, (void*)ptr);
  if (slot >= st->nscr) {
    int n = slot + 1;
    void** a = realloc(st->scr, (size_t)n * sizeof(void*));
    if (a) st->scr = a;
    size_t* b = a ? realloc(st->scrBytes, (size_t)n * sizeof(size_t)) : NULL;
    if (b) st->scrBytes = b;
    if (!a || !b) return relaySetError(comm, relaySystemError, "out of memory for scratch slot %d", slot);
    for (int i = st->nscr; i < n; i++) st->scr[i] = NULL, st->scrBytes[i] = 0;
    st->nscr = n;
  }
  if (!st->scr[slot] || st->scrBytes[slot] < bytes) {
    /* Grow only: contents need not survive, so free first (peak = new size). */
    size_t sz = shmAlignUp(bytes ? bytes : 1, SHM_LINE);
    free(st->scr[slot]);
    st->scr[slot] = NULL;
    st->scrBytes[slot] = 0;
    void* p = NULL;
    if (posix_memalign(&p, SHM_LINE, sz) != 0)
      return relaySetError(comm, relaySystemError, "out of memory for %zu bytes of scratch (slot %d)", sz,
                           slot);
    /* Defined bytes: a rank that passed a bad buffer sends scratch in its
     * place (api.c), and peers reduce it. */
    memset(p, 0, sz);
    st->scr[slot] = p;
    st->scrBytes[slot] = sz;
  }
  *ptr = st->scr[slot];
  return relaySuccess;
}

static relayResult_t shmJoinLanes(struct relayComm* comm, relayStream_t stream) {
  (void)comm;
  (void)stream;
  return relaySuccess;
}

static void shmDestroy(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st) return;
  if (st->slots) {
    /* A peer still waiting on us fails now, not at its deadline. */
    shmSlot* s = &st->slots[comm->rank];
    if (atomic_exchange_explicit(&s->failClaim, 1, memory_order_acq_rel) == 0)
      atomic_store_explicit(&s->status, SHM_GONE, memory_order_release);
    for (int q = 0; q < comm->nranks; q++)
      if (q != comm->rank) shmWake(&st->slots[q]);
  }
  relayShmOneShotFree(comm); /* this rank's mappings only: no peer reads them after destroy */
  relayShmBwFree(comm);
  shmStateFree(st);
  comm->tpState = NULL;
}

relayResult_t relayShmP2pInfo(struct relayComm* comm, p2pComm* out) {
  shmState* st = shmStateOf(comm);
  if (!st || comm->tp != &relayShmOps)
    return relaySetError(comm, relayInvalidArgument, "relayShmP2pInfo: not a shm comm");
  RELAY_CHECK(shmP2pInit(comm, st));
  *out = st->p2p;
  return relaySuccess;
}

/* An NCCL comm's tpState is its own state, not a shmState: the ops pointer tells them apart. */
void relayShmWaitCounts(struct relayComm* comm, uint64_t* busyPolls, uint64_t* coLocatedWaits) {
  shmState* st = comm->tp == &relayShmOps ? shmStateOf(comm) : NULL;
  *busyPolls = st ? st->busyPolls : 0;
  *coLocatedWaits = st ? st->coLocatedWaits : 0;
}

int relayShmArmed(struct relayComm* comm, uint64_t* arms) {
  shmState* st = comm->tp == &relayShmOps ? shmStateOf(comm) : NULL;
  *arms = st ? st->arms : 0;
  return st && atomic_load_explicit(&st->slots[comm->rank].waiting, memory_order_relaxed) != 0;
}

uint64_t relayShmP2pConnMask(struct relayComm* comm, int peer, int dir) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->p2pReady || peer < 0 || peer >= comm->nranks ||
      (dir != P2P_DIR_SEND && dir != P2P_DIR_RECV))
    return 0;
  return p2pConnMask(&st->conn, peer, (p2pDir)dir);
}

uint64_t relayShmP2pConnected(struct relayComm* comm, int dir) {
  shmState* st = shmStateOf(comm);
  return st && (dir == P2P_DIR_SEND || dir == P2P_DIR_RECV) ? st->connected[dir] : 0;
}

uint64_t relayShmP2pConnFlags(struct relayComm* comm, int src, int dst, int side) {
  shmState* st = shmStateOf(comm);
  int n = comm->nranks;
  if (!st || src < 0 || dst < 0 || src >= n || dst >= n || src == dst) return 0;
  uint32_t bit = side == P2P_DIR_SEND ? SHM_CONN_SEND : SHM_CONN_RECV;
  uint64_t m = 0;
  for (int c = 0; c < st->channels; c++)
    if (atomic_load_explicit(&shmCtl(st, n, src, dst, 1 + c)->conn, memory_order_acquire) & bit)
      m |= 1ull << c;
  return m;
}

static const relayTransportOps relayShmOps = {
    .name = "shm",
    .caps = RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW | RELAY_TP_CAP_BW_ROOTED |
            RELAY_TP_CAP_SHAPES | RELAY_TP_CAP_CARRY | RELAY_TP_CAP_ONESHOT_TWOSHOT,
    .group = shmGroup,
    .reduce = shmReduce,
    .copy = shmCopy,
    .scratch = shmScratch,
    .join = shmJoinLanes,
    .agree = shmAgree,
    .barrier = shmBarrier,
    .reject = shmReject,
    .fail = shmFailOp,
    .abort = shmAbort,
    .destroy = shmDestroy,
    .oneshotPrepare = relayShmOneShotPrepare,
    .oneshot = relayShmOneShot,
    .carryStage = relayShmCarryStage,
    .carryTake = relayShmCarryTake,
    .bwPrepare = relayShmBwPrepare,
    .bw = relayShmBw,
    .winRegister = relayShmWinRegister,
    .winDeregister = relayShmWinDeregister,
    .deadPeer = shmDeadPeer,
};

/* ---------------------------------------------------------------- attach */

relayResult_t relayShmAttach(struct relayComm* comm, const char* jobName, int unique) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayShmAttach: comm is NULL");
  int n = comm->nranks, me = comm->rank;
  if (n < 1 || n > SHM_MAX_RANKS)
    return relaySetError(comm, relayInvalidArgument, "nranks %d must be in [1, %d]", n, SHM_MAX_RANKS);
  if (me < 0 || me >= n)
    return relaySetError(comm, relayInvalidArgument, "rank %d is out of range for nranks %d", me, n);
  if (!jobName || !*jobName || strlen(jobName) > SHM_MAX_JOB || strchr(jobName, '/'))
    return relaySetError(comm, relayInvalidArgument, "job name %s%s%s must be 1 to %d characters without '/'",
                         jobName ? "'" : "", jobName ? jobName : "NULL", jobName ? "'" : "", SHM_MAX_JOB);
  long ring = comm->cfg.shmRingBytes;
  if (ring < SHM_MIN_RING || ring > (long)SHM_MAX_RING)
    return relaySetError(comm, relayInvalidArgument, "shmRingBytes %ld must be in [%d, %u]", ring,
                         SHM_MIN_RING, SHM_MAX_RING);
  /* The channels count only at rank 0 (it shapes the segment; the others
   * take it from there); the part rules (shmP2pInit) read the comm's agreed
   * table at the first group. comm/params.h checked the ranges. */
  long chans = (long)relayParamInt(comm, RELAY_P_NCHANNELS);
  shmState* st = calloc(1, sizeof *st);
  if (!st) return relaySetError(comm, relaySystemError, "out of memory for the shm transport");
  snprintf(st->job, sizeof st->job, "%s", jobName);
  if (unique) snprintf(st->launch, sizeof st->launch, "none: the name is unique");
  else shmLaunchIdentity(st->launch, sizeof st->launch);
  relayShmSegmentName(jobName, unique, st->name, sizeof st->name);
  /* Ring sizes in whole cache lines keep every ring's data line-aligned. */
  st->ringBytes = shmAlignUp((size_t)ring, SHM_LINE);
  st->wantChannels = (int)chans;
  st->pidNs = shmPidNamespace();
  atomic_init(&st->abortedLocal, 0);
  shmLayout L;
  if (shmLayoutOf(n, st->ringBytes, shmChannelsFor(st->wantChannels, st->ringBytes), &L) != 0) {
    free(st);
    return relaySetError(comm, relayInvalidArgument,
                         "%d ranks with %ld-byte rings overflow the address space", n, ring);
  }
  size_t un = (size_t)n;
  st->pids = calloc(un, sizeof *st->pids);
  st->sq = calloc(un, sizeof *st->sq);
  st->rq = calloc(un, sizeof *st->rq);
  st->spend = calloc(un, sizeof(int));
  st->rpend = calloc(un, sizeof(int));
  st->tmp = calloc(un, sizeof(int));
  if (!st->pids || !st->sq || !st->rq || !st->spend || !st->rpend || !st->tmp) {
    shmStateFree(st);
    return relaySetError(comm, relaySystemError, "out of memory for the shm transport");
  }
  relayResult_t res = me == 0 ? shmCreate(comm, st) : shmJoin(comm, st);
  if (res != relaySuccess) {
    shmStateFree(st);
    return res;
  }
  /* Per ring cursors and per (peer, channel) queues: sized by the channels
   * the segment has. */
  size_t rings = un * (size_t)(st->channels + 1), chq = un * (size_t)st->channels;
  st->sendHead = calloc(rings, sizeof(uint64_t));
  st->sendTailSeen = calloc(rings, sizeof(uint64_t));
  st->recvTail = calloc(rings, sizeof(uint64_t));
  st->recvHeadSeen = calloc(rings, sizeof(uint64_t));
  st->sch = calloc(chq, sizeof *st->sch);
  st->rch = calloc(chq, sizeof *st->rch);
  st->rphdr = calloc(chq, sizeof *st->rphdr);
  if (!st->sendHead || !st->sendTailSeen || !st->recvTail || !st->recvHeadSeen || !st->sch || !st->rch ||
      !st->rphdr) {
    /* Peers that already run would wait on us: tell them we are gone. */
    atomic_store_explicit(&st->slots[me].status, SHM_GONE, memory_order_release);
    shmStateFree(st);
    return relaySetError(comm, relaySystemError, "out of memory for the shm transport");
  }
  comm->tpState = st;
  comm->tp = &relayShmOps;
  return relaySuccess;
}
