/*
 * The one-shot protocol on the shm transport: the CPU twin of the GPU kernel
 * (nccl/oneshot.cu), so CI proves the protocol at 8 ranks.
 *
 * Region: every rank creates its own POSIX shm segment
 * "/relaycc-os-<commHash>-<rank>" (commHash: the comm's nonce, agreed at
 * init), maps every peer's, and unlinks its own name once all voted, so
 * nothing is left in /dev/shm and no fd stays open (mappings only):
 *   [header: sentinel, slotBytes, nranks]
 *   [push[2][nranks]]  one line each, written by source s into OWNER's
 *                      region: its byte count, its call number, its mark
 *                      (1 + a rank that passed a bad buffer, comm->callMark)
 *                      and its call's shape digest (low 32 bits), so a push
 *                      left by a call this rank rejected, or of a call of
 *                      another shape, is refused, not reduced; then the flag
 *                      "my epoch-e push into your staging[e&1][s] is complete"
 *   [ack[nranks]]      written by peer s into OWNER's region: "I finished
 *                      reading your epoch-e push"
 *   [staging[2][nranks][slotBytes]]  staging[e&1][s]: source s's push of epoch e; the owner's own
 *                      staging[par][owner], which no push writes, is its carry slot (a broadcast's block
 *                      riding agreement round r, par = r & 1: relayShmCarryStage below)
 *   [area[2][slotBytes]]  the owner's input of its two-shot all-reduces (osTwoShot below), by the owner's
 *                      own count of them (areaUses & 1), then its reduced shard in place; read by every peer
 *                      (only where the two-shot can run: osState.areas)
 * (one 64-byte line per push/ack: each has exactly one writer).
 *
 * Epochs are per pair (pairEpoch[p]: one-shots this rank ran with p), since
 * successive calls may use different active sets: two ranks count the same
 * calls together, so they agree. Call with epoch e toward peer p:
 *   1. wait ack_mine[p] >= e-2: p no longer reads staging[e&1][me] of its
 *      epoch e-2 (the same parity set), so pushing cannot clobber it;
 *   2. copy my contribution into p's staging[e&1][me], release-store e into
 *      p's flag[e&1][me];
 *   3. acquire-wait flag_mine[e&1][p] >= e for every p, reduce in
 *      active-index order (relayHostReduce: the same bits as every route);
 *   4. release-store e into p's ack[me].
 * Two parity sets let a fast rank run call e+1 while a slow peer still reads
 * call e; it blocks only at e+2. Compares are wrap-safe: arrived when
 * (int32_t)(got - want) >= 0, never ==, since a fast peer may already have
 * raised the word past want (flags and acks never reset, epochs only grow).
 * Waits are the transport's (relayShmWaitWord: RELAYCC_SPIN spins, then a
 * futex on the waiter's doorbell, which every flag and ack store rings;
 * abort, failed and dead peers end them).
 *
 * Sentinel: (commHash ^ golden) * FNV prime + rank + 1 (the reference's
 * sentinelFor): any rank computes any peer's, so opening a segment and
 * reading its sentinel proves it is that peer's CURRENT region of THIS comm.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "plan/plan.h"
#include "reduce_host.h"
#include "transport/shm/shm_transport.h"

#define OS_LINE RELAY_SHM_LINE
typedef relayShmWord osWord;

/* ---- a region per rank, mapped by every peer (the one-shot's and the
 * bandwidth route's: bw.c) ------------------------------------------- */

typedef struct {
  _Alignas(OS_LINE) uint64_t sentinel;
  uint64_t param; /* what sized it (the one-shot's slot bytes; bw: tile and ring) */
  uint32_t nranks;
} osHeader;

size_t relayShmRegionHeaderBytes(void) { return sizeof(osHeader); }

static uint64_t osSentinel(uint64_t hash, int rank) {
  return (hash ^ 0x9E3779B97F4A7C15ull) * 0x100000001B3ull + (uint64_t)rank + 1;
}

static void osName(char* buf, size_t len, const char* tag, uint64_t hash, int rank) {
  snprintf(buf, len, "/relaycc-%s-%016llx-%d", tag, (unsigned long long)hash, rank);
}

void relayShmRegionUnmap(relayShmRegion* R) {
  if (!R->base) return;
  for (int q = 0; q < R->n; q++)
    if (R->base[q]) munmap(R->base[q], R->bytes);
  free(R->base);
  R->base = NULL;
}

/* Creates, sizes and maps this rank's segment; stamps the sentinel. */
static int osCreateOwn(struct relayComm* comm, relayShmRegion* R, const char* tag, uint64_t param) {
  char name[96];
  osName(name, sizeof name, tag, R->hash, comm->rank);
  shm_unlink(name); /* a crashed run's leftover of the same comm hash: never ours to join */
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return 0;
  /* Reserve the pages now (posix_fallocate, not a sparse ftruncate): a full
   * /dev/shm then fails here, voted, instead of as SIGBUS on a first store in
   * the middle of a call (8 ranks of bw staging at its defaults are 16 MiB
   * each, more than a container's default 64 MiB /dev/shm holds). */
  int ok = posix_fallocate(fd, 0, (off_t)R->bytes) == 0;
  void* p = ok ? mmap(NULL, R->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    return 0;
  }
  R->base[comm->rank] = p;
  osHeader* h = p;
  h->param = param;
  h->nranks = (uint32_t)R->n;
  /* Zero flags and acks (a new segment is zeros): the first epoch is 1. */
  atomic_thread_fence(memory_order_release);
  h->sentinel = osSentinel(R->hash, comm->rank);
  return 1;
}

static int osOpenPeer(struct relayComm* comm, relayShmRegion* R, const char* tag, uint64_t param, int q) {
  char name[96];
  osName(name, sizeof name, tag, R->hash, q);
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return 0;
  struct stat sb;
  int ok = fstat(fd, &sb) == 0 && (size_t)sb.st_size == R->bytes;
  void* p = ok ? mmap(NULL, R->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return 0;
  R->base[q] = p;
  const osHeader* h = p;
  atomic_thread_fence(memory_order_acquire);
  if (h->sentinel != osSentinel(R->hash, q) || h->param != param || h->nranks != (uint32_t)R->n) {
    fprintf(stderr, "relaycc: rank %d: %s region of rank %d has sentinel %#llx (want %#llx): declining\n",
            comm->rank, tag, q, (unsigned long long)h->sentinel, (unsigned long long)osSentinel(R->hash, q));
    return 0;
  }
  return 1;
}

/* One vote; *all == 1 when every rank voted ok with the same param. */
static relayResult_t osVoteAll(struct relayComm* comm, int ok, uint64_t param, int* all) {
  relayBallot mine = {ok ? relaySuccess : relayNotSupported, param, NULL};
  relayVerdict v;
  relayResult_t res = relayVoteBallot(comm, &mine, &v);
  *all = res == relaySuccess && v.yes;
  return res;
}

relayResult_t relayShmRegionDecline(struct relayComm* comm, uint64_t param) {
  /* Both rounds, as a rank that tries: peers stay in lockstep and decline. */
  int all;
  relayResult_t r = osVoteAll(comm, 0, param, &all);
  if (r == relaySuccess) r = osVoteAll(comm, 0, param, &all);
  return r == relaySuccess ? relayNotSupported : r;
}

relayResult_t relayShmRegionSetup(struct relayComm* comm, relayShmRegion* R, const char* tag, uint64_t param,
                                  size_t bytes, int faultRank) {
  int n = comm->nranks;
  memset(R, 0, sizeof *R);
  R->n = n;
  R->bytes = bytes;
  R->hash = relayShmCommHash(comm);
  R->base = calloc((size_t)n, sizeof *R->base);
  if (!R->base) return relayShmRegionDecline(comm, param);
  /* Round 1: everyone created its segment (or says it could not). Both
   * rounds run even after a local failure, to stay in lockstep. */
  int all = 0;
  int ok = osCreateOwn(comm, R, tag, param);
  relayResult_t res = osVoteAll(comm, ok, param, &all);
  /* Round 2: everyone opened every peer's and found its sentinel. */
  if (res == relaySuccess) {
    ok = all;
    for (int q = 0; q < n && ok; q++)
      if (q != comm->rank) ok = osOpenPeer(comm, R, tag, param, q);
    if (faultRank == comm->rank) ok = 0; /* a test's fault: as if an open failed */
    res = osVoteAll(comm, ok, param, &all);
  }
  char name[96];
  osName(name, sizeof name, tag, R->hash, comm->rank);
  shm_unlink(name); /* every peer has mapped it (or declined): the name is no longer needed */
  if (res == relaySuccess && all) return relaySuccess;
  relayShmRegionUnmap(R);
  return res != relaySuccess ? res : relayNotSupported;
}

relayResult_t relayShmRegionWait(struct relayComm* comm, _Atomic uint32_t* w, uint32_t want, int peer,
                                 const char* proto, const char* what) {
  /* Mostly there already: no message formatting on the fast path; where this rank runs is said even so. */
  (void)shmNoteCpu(comm, shmStateOf(comm));
  if ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - want) >= 0) return relaySuccess;
  relayResult_t r = relayShmWaitWord(comm, w, want, peer, proto, what);
  if (r != relayTimeout) return r;
  return relaySetError(comm, relayTimeout, "%s: no %s epoch %u from rank %d within %d ms (it holds %u)",
                       proto, what, want, peer, comm->cfg.timeoutMs,
                       atomic_load_explicit(w, memory_order_acquire));
}

/* A push's call, mark and shape (issue 15: no silent wrong result), stored
 * with it before its flag's release; relayShmCheckMark reads them after the
 * flag's acquire. */
void relayShmStampMark(struct relayComm* comm, _Atomic uint32_t* call, _Atomic uint32_t* mark,
                       _Atomic uint32_t* shape) {
  atomic_store_explicit(call, (uint32_t)comm->callSeq, memory_order_relaxed);
  atomic_store_explicit(mark, (uint32_t)(comm->callMark + 1), memory_order_relaxed);
  atomic_store_explicit(shape, (uint32_t)comm->callShape, memory_order_relaxed);
}

relayResult_t relayShmCheckMark(struct relayComm* comm, _Atomic uint32_t* callW, _Atomic uint32_t* markW,
                                _Atomic uint32_t* shapeW, int p, const char* proto) {
  uint32_t call = atomic_load_explicit(callW, memory_order_relaxed);
  uint32_t mark = atomic_load_explicit(markW, memory_order_relaxed);
  uint32_t shape = atomic_load_explicit(shapeW, memory_order_relaxed);
  if (call != (uint32_t)comm->callSeq)
    return relaySetError(comm, relayInvalidUsage,
                         "%s: rank %d pushed data of its call #%u (mod 2^32): a rank rejected a call its "
                         "peers ran (check mode 0), so the ranks are no longer in step",
                         proto, p, call);
  if (shape != (uint32_t)comm->callShape)
    return relaySetError(comm, relayInvalidUsage,
                         "%s: rank %d's call has another shape (digest %08x, this rank's %08x): ranks "
                         "disagree on the collective, layout, counts, datatype, op or root",
                         proto, p, shape, (uint32_t)comm->callShape);
  if (mark && comm->callMark < 0 && mark <= (uint32_t)comm->nranks) comm->callMark = (int)mark - 1;
  return relaySuccess;
}

/* ---- the one-shot --------------------------------------------------------- */

#define OS_READ (1ull << 32)
typedef struct {
  int tried, ready;
  int n;
  size_t slotBytes;
  relayShmRegion reg;
  uint32_t* pairEpoch; /* [n] */
  uint64_t carryRound; /* the agreement round whose carry slot this rank last took (relayShmCarryTake) */
  uint64_t areaUses;   /* two-shot all-reduces this rank ran: area[areaUses & 1] is the next one's */
  /* areaReaders[x][q]: OS_READ | the pair epoch rank q read area x of this rank with (0: q did not read
   * it; any epoch, 0 after a wrap too, has OS_READ beside it), so the area is written again only after
   * each of them acknowledged that epoch (osTwoShot) */
  uint64_t* areaReaders[2];
  int areas; /* 2: the region has the two-shot's areas (RELAYCC_ONESHOT_TWOSHOT_BYTES > 0, 3 ranks or more) */
  int stallRank; /* RELAYCC_ONESHOT_STALL_RANK (tests) */
} osState;

/* A push's words, one line per source and parity, all written by that source: the byte count (counts that
 * differ between ranks, check mode off, become relayInvalidUsage, not garbage), call number, mark and shape,
 * then the flag (release), whose acquire makes the rest visible to the owner. One line, not five: at 8 ranks
 * and 4 KiB a push is 8 lines of data, and the four info words on lines of their own were 4 more cache-line
 * transfers per push, 28 per call per rank (docs/perf/2026-12-05-cpu-2core.md, the 8-rank reduce-scatter). */
typedef struct {
  _Alignas(OS_LINE) _Atomic uint32_t flag;
  _Atomic uint32_t bytes, call, mark, shape;
  /* The two-shot all-reduce's (osTwoShot): which of the source's areas holds its input (flag: its input is
   * there) and, stored after the flag, "my reduced shard is in that area" (done, the pair's epoch). */
  _Atomic uint32_t area, done;
} osPush;

static size_t osPushOff(void) { return sizeof(osHeader); }
static size_t osAcksOff(int n) { return osPushOff() + 2 * (size_t)n * sizeof(osPush); }
static size_t osStagingOff(int n) { return osAcksOff(n) + (size_t)n * sizeof(osWord); }

static osPush* osPushOf(unsigned char* base, int n, int par, int src) {
  return (osPush*)(base + osPushOff()) + (size_t)par * (size_t)n + (size_t)src;
}
static osWord* osAck(unsigned char* base, int n, int src) { return (osWord*)(base + osAcksOff(n)) + src; }
static unsigned char* osStaging(const osState* s, unsigned char* base, int par, int src) {
  return base + osStagingOff(s->n) + ((size_t)par * (size_t)s->n + (size_t)src) * s->slotBytes;
}
static unsigned char* osArea(const osState* s, unsigned char* base, int x) {
  return base + osStagingOff(s->n) + ((size_t)2 * (size_t)s->n + (size_t)x) * s->slotBytes;
}

/* The state of a comm that could not allocate its own: declined for good. */
static osState osDeclined = {.tried = 1};

void relayShmOneShotFree(struct relayComm* comm) {
  osState* s = comm->oneshot;
  comm->oneshot = NULL;
  if (!s || s == &osDeclined) return;
  relayShmRegionUnmap(&s->reg);
  free(s->pairEpoch);
  free(s->areaReaders[0]);
  free(s->areaReaders[1]);
  free(s);
}

relayResult_t relayShmOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream) {
  (void)stream; /* no capture on the CPU */
  osState* s = comm->oneshot;
  if (s && s->tried) return s->ready && slotBytes <= s->slotBytes ? relaySuccess : relayNotSupported;
  int n = comm->nranks;
  size_t slot = (slotBytes + OS_LINE - 1) / OS_LINE * OS_LINE;
  s = calloc(1, sizeof *s);
  if (s) {
    s->pairEpoch = calloc((size_t)n, sizeof *s->pairEpoch);
    s->areaReaders[0] = calloc((size_t)n, sizeof *s->areaReaders[0]);
    s->areaReaders[1] = calloc((size_t)n, sizeof *s->areaReaders[1]);
  }
  if (!s || !s->pairEpoch || !s->areaReaders[0] || !s->areaReaders[1]) {
    if (s) {
      free(s->pairEpoch);
      free(s->areaReaders[0]);
      free(s->areaReaders[1]);
    }
    free(s);
    /* Still collective: vote no so peers decline with us, and decline
     * stickily, as they do (no vote on later calls). */
    comm->oneshot = &osDeclined;
    return relayShmRegionDecline(comm, slot);
  }
  comm->oneshot = s;
  s->tried = 1; /* sticky: one attempt per comm, all ranks alike */
  s->n = n;
  s->slotBytes = slot;
  /* The areas only where a key can ask for them (planKeyOneShotTwoShot: the same agreed value, 3 actives or
   * more): at 8 ranks and the 1 MiB slot they are 2 MiB of /dev/shm a rank. */
  s->areas = relayParamInt(comm, RELAY_P_ONESHOT_TWOSHOT_BYTES) > 0 && n >= 3 ? 2 : 0;
  s->stallRank = (int)relayParamInt(comm, RELAY_P_ONESHOT_STALL_RANK);
  relayResult_t res = relayShmRegionSetup(comm, &s->reg, "os", slot,
                                          osStagingOff(n) + (2 * (size_t)n + (size_t)s->areas) * slot,
                                          (int)relayParamInt(comm, RELAY_P_ONESHOT_FAULT_RANK));
  s->ready = res == relaySuccess;
  return res;
}

/* Wait until word >= want (wrap-safe) with the transport's waiter (spin,
 * then futex on this rank's doorbell, which the pusher rings). */
static relayResult_t osWait(struct relayComm* comm, _Atomic uint32_t* w, uint32_t want, int peer,
                            const char* what) {
  return relayShmRegionWait(comm, w, want, peer, "one-shot", what);
}

/* The carry (RELAY_TP_CAP_CARRY, transport.h): a broadcast's block in its root's own staging slot of the
 * round's parity (staging[par][root] of the root's region, which no push writes: sources push into their
 * peers' regions, never their own). */
static unsigned char* osCarrySlot(struct relayComm* comm, int rank, uint64_t round, size_t bytes) {
  osState* s = comm->oneshot;
  if (!s || !s->ready || bytes == 0 || bytes > s->slotBytes || rank < 0 || rank >= s->n) return NULL;
  return osStaging(s, s->reg.base[rank], (int)(round & 1), rank);
}

void* relayShmCarryStage(struct relayComm* comm, size_t bytes) {
  return osCarrySlot(comm, comm->rank, shmStateOf(comm)->agreeRound + 1, bytes);
}

const void* relayShmCarryTake(struct relayComm* comm, int rank, size_t bytes) {
  uint64_t round = shmStateOf(comm)->agreeRound;
  const void* slot = osCarrySlot(comm, rank, round, bytes);
  if (slot) ((osState*)comm->oneshot)->carryRound = round;
  return slot;
}

/* A carried broadcast's one-shot op: the block is in the root's carry slot of this call's agreement. A
 * member copies it out unless another round ran since (the slot may then hold a later call's block: an
 * internal error, never wrong data); the root places its own, unless in place. No pushes, no epochs:
 * every rank of the call carried alike. */
static relayResult_t osCarried(struct relayComm* comm, const osState* s, const relayOneShotDesc* d,
                               size_t bytes) {
  const void* from = d->me == d->root ? (const char*)d->src : comm->callCarry;
  if (d->me != d->root && s->carryRound != shmStateOf(comm)->agreeRound) {
    comm->tp->fail(comm);
    return relaySetError(
        comm, relayInternalError,
        "one-shot: the broadcast's block rode agreement round %llu, but round %llu ran since",
        (unsigned long long)s->carryRound, (unsigned long long)shmStateOf(comm)->agreeRound);
  }
  if (bytes && from != d->dst) memmove(d->dst, from, bytes);
  return relaySuccess;
}

/* This rank's push words of pair epoch e in peer p's region: the call's byte count, the two-shot's area (0
 * for the push form, which no one reads), the call's mark, then the flag (release: the words and any data
 * written before it are visible with it), and p's doorbell. */
static void osPublish(struct relayComm* comm, const osState* s, int p, uint32_t e, size_t bytes,
                      uint32_t area) {
  osPush* words = osPushOf(s->reg.base[p], comm->nranks, (int)(e & 1), comm->rank);
  atomic_store_explicit(&words->bytes, (uint32_t)bytes, memory_order_relaxed);
  atomic_store_explicit(&words->area, area, memory_order_relaxed);
  relayShmStampMark(comm, &words->call, &words->mark, &words->shape);
  atomic_store_explicit(&words->flag, e, memory_order_release);
  relayShmRing(comm, p);
}

/* Waits for peer p's words of pair epoch e in this rank's region (the flag, or with `done` the reduced shard)
 * and checks what came with them: call, mark, shape and byte count. */
static relayResult_t osAwaitPush(struct relayComm* comm, osPush* push, uint32_t e, int p, size_t bytes,
                                 int done) {
  relayResult_t res =
      osWait(comm, done ? &push->done : &push->flag, e, p, done ? "reduced shard of" : "push of");
  if (res != relaySuccess || done) return res;
  res = relayShmCheckMark(comm, &push->call, &push->mark, &push->shape, p, "one-shot");
  uint32_t got = atomic_load_explicit(&push->bytes, memory_order_relaxed);
  if (res == relaySuccess && got != (uint32_t)bytes)
    res = relaySetError(
        comm, relayInvalidUsage,
        "one-shot: rank %d pushed %u bytes, this rank expects %zu (counts differ between ranks)", p, got,
        bytes);
  return res;
}

/* The two-shot all-reduce (relayOneShotDesc.twoShot; DeepSpeed's shm all-reduce from 1 MiB is this scheme):
 * each active copies its input, but for its own shard, into its own area, flags every peer, reduces its
 * shard (planBwShard) from its input and every peer's area with plain loads into its own area, flags again,
 * and copies every active's reduced shard out of that active's area. Per rank a copy in of all but its own
 * shard, A shards read, one copy out, and two hops;
 * the push form writes its input A - 1 times (7 MiB per rank at 8 ranks and 1 MiB), the bandwidth route's
 * one copy reads it through a system call per peer whose cost grows with the readers
 * (docs/perf/2026-12-06-cpu-carry.md). The same bits as every route: each shard is reduced once, in
 * active-index order, and copied.
 * The flags are the pair's push words (flag, then done) and its acknowledgement, with the pair's epochs,
 * so two-shot and push calls interleave. The area is the rank's own (its peers do not know which pair
 * epoch it is at with the others): the flag says which one; it is written again only after every rank
 * that read it, two uses ago, acknowledged (areaReaders). */
static relayResult_t osTwoShot(struct relayComm* comm, osState* s, const relayOneShotDesc* d, size_t bytes) {
  int A = d->nActive, me = d->me, n = comm->nranks, r = comm->rank;
  /* An all-reduce's only (the plan checker refuses the form elsewhere): no gather, no root, one input */
  if (!s->areas || d->gather || d->root >= 0 || d->srcStride) {
    comm->tp->fail(comm); /* its peers, waiting for its words, end their waits now */
    return relaySetError(comm, relayInternalError,
                         "one-shot: a two-shot op with %s, gather %d, root %d, stride %zu",
                         s->areas ? "areas" : "no areas", d->gather, d->root, d->srcStride);
  }
  size_t es = relayTypeSize(d->dtype);
  uint64_t shard = planBwShard(d->count, A), lo, len;
  planBwShardOf(d->count, shard, me, &lo, &len);
  unsigned char* mine = s->reg.base[r];
  uint32_t ep[RELAY_TP_ONESHOT_MAX], area[RELAY_TP_ONESHOT_MAX];
  for (int i = 0; i < A; i++) ep[i] = i != me ? ++s->pairEpoch[d->ranks[i]] : 0;
  int x = (int)(++s->areaUses & 1);
  relayResult_t res = relaySuccess;
  /* The area's readers of two uses ago, and the push words' (pair epoch e - 2) are done with them. */
  for (int q = 0; q < n && res == relaySuccess; q++)
    if (s->areaReaders[x][q])
      res = osWait(comm, &osAck(mine, n, q)->v, (uint32_t)s->areaReaders[x][q], q, "acknowledgement of");
  for (int i = 0; i < A && res == relaySuccess; i++)
    if (i != me)
      res = osWait(comm, &osAck(mine, n, d->ranks[i])->v, ep[i] - 2, d->ranks[i], "acknowledgement of");
  if (res == relaySuccess) {
    memset(s->areaReaders[x], 0, (size_t)n * sizeof *s->areaReaders[x]);
    /* All but my own shard: I reduce that one from my input (srcs[me] below), and my peers read that part of
     * my area only once it holds the reduced shard (done): one copy of 1/A of the input saved. */
    size_t head = (size_t)lo * es, tail = (size_t)(lo + len) * es; /* my shard: [head, tail) */
    if (head) memcpy(osArea(s, mine, x), d->src, head);
    if (bytes > tail) memcpy(osArea(s, mine, x) + tail, (const char*)d->src + tail, bytes - tail);
    for (int k = 1; k < A; k++) {
      int i = (me + k) % A, p = d->ranks[i];
      osPublish(comm, s, p, ep[i], bytes, (uint32_t)x);
      s->areaReaders[x][p] = OS_READ | ep[i];
    }
  }
  const void* srcs[RELAY_TP_ONESHOT_MAX];
  for (int k = 0; k < A && res == relaySuccess; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    area[i] = (uint32_t)x;
    if (i != me) {
      osPush* push = osPushOf(mine, n, (int)(ep[i] & 1), p);
      res = osAwaitPush(comm, push, ep[i], p, bytes, 0);
      area[i] = atomic_load_explicit(&push->area, memory_order_relaxed) & 1;
    }
    /* (mine: only read where my shard is not empty; src may be NULL at count 0) */
    srcs[i] = i == me ? (const void*)(len ? (const char*)d->src + lo * es : NULL)
                      : (const void*)(osArea(s, s->reg.base[p], (int)area[i]) + lo * es);
  }
  if (res == relaySuccess) {
    /* My shard, reduced from my input and my peers' areas into my own area (for my peers to copy out) */
    if (len) relayHostReduce(osArea(s, mine, x) + lo * es, srcs, A, (size_t)len, d->dtype, d->op, d->divisor);
    for (int k = 1; k < A; k++) {
      int i = (me + k) % A, p = d->ranks[i];
      atomic_store_explicit(&osPushOf(s->reg.base[p], n, (int)(ep[i] & 1), r)->done, ep[i],
                            memory_order_release);
      relayShmRing(comm, p);
    }
  }
  /* Every peer's reduced shard there before dst is written: dst may be the input (in place), which a call
   * that fails must leave as it was. */
  for (int k = 1; k < A && res == relaySuccess; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    res = osAwaitPush(comm, osPushOf(mine, n, (int)(ep[i] & 1), p), ep[i], p, bytes, 1);
  }
  if (res != relaySuccess) {
    comm->tp->fail(comm); /* peers waiting for this rank's words end their waits now (relayShmOneShot) */
    return res;
  }
  if (s->stallRank == r) { /* RELAYCC_ONESHOT_STALL_RANK: a reader late to copy out (tests) */
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (int k = 0; k < A; k++) { /* mine first: it is in cache */
    int i = (me + k) % A;
    uint64_t at, m;
    planBwShardOf(d->count, shard, i, &at, &m);
    if (m)
      memcpy((char*)d->dst + at * es, osArea(s, s->reg.base[d->ranks[i]], (int)area[i]) + at * es,
             (size_t)m * es);
  }
  for (int i = 0; i < A; i++)
    if (i != me) {
      atomic_store_explicit(&osAck(s->reg.base[d->ranks[i]], n, r)->v, ep[i], memory_order_release);
      relayShmRing(comm, d->ranks[i]);
    }
  comm->last.twoShot = 1;
  return relaySuccess;
}

relayResult_t relayShmOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream) {
  (void)stream;
  osState* s = comm->oneshot;
  int A = d->nActive, me = d->me, n = comm->nranks, r = comm->rank;
  size_t es = relayTypeSize(d->dtype), bytes = d->count * es;
  if (!s || !s->ready || A < 2 || A > RELAY_TP_ONESHOT_MAX || me < 0 || me >= A || d->ranks[me] != r || !es ||
      bytes > s->slotBytes || d->root >= A) /* a root past the actives: refused, never run unrooted */
    return relaySetError(comm, relayInternalError,
                         "one-shot: region %s, A %d, me %d, root %d, %zu bytes (slot %zu)",
                         s && s->ready ? "ready" : "absent", A, me, d->root, bytes, s ? s->slotBytes : 0);
  if (comm->callCarry) return osCarried(comm, s, d, bytes);
  if (d->twoShot) return osTwoShot(comm, s, d, bytes);
  unsigned char* mine = s->reg.base[r];
  /* A rooted call (broadcast, reduce) runs only the root's pairs; the way without data carries an empty
   * push, so both ends of a pair count its epochs alike. */
  int R = d->root, rooted = R >= 0 && R < A;
  uint32_t ep[RELAY_TP_ONESHOT_MAX];
  for (int i = 0; i < A; i++) ep[i] = i != me && relayShmPairs(d, me, i) ? ++s->pairEpoch[d->ranks[i]] : 0;
  relayResult_t res = relaySuccess;
  /* Push, starting after me so peers are not all written in the same order. */
  for (int k = 1; k < A && res == relaySuccess; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    if (!relayShmPairs(d, me, i)) continue;
    uint32_t e = ep[i];
    size_t push = relayShmPushBytes(d, me, i, bytes);
    res = osWait(comm, &osAck(mine, n, p)->v, e - 2, p, "acknowledgement of");
    if (res != relaySuccess) break;
    if (push)
      memcpy(osStaging(s, s->reg.base[p], (int)(e & 1), r),
             (const char*)d->src + (size_t)i * d->srcStride * es, push);
    /* The call's byte count, also with an empty push: both ends of a rooted pair see a count that differs */
    osPublish(comm, s, p, e, bytes, 0);
  }
  const void* srcs[RELAY_TP_ONESHOT_MAX];
  for (int i = 0; i < A && res == relaySuccess; i++) {
    if (i == me) {
      srcs[i] = (const char*)d->src + (size_t)me * d->srcStride * es;
      continue;
    }
    if (!relayShmPairs(d, me, i)) continue;
    int p = d->ranks[i];
    res = osAwaitPush(comm, osPushOf(mine, n, (int)(ep[i] & 1), p), ep[i], p, bytes, 0);
    srcs[i] = osStaging(s, mine, (int)(ep[i] & 1), p);
  }
  if (res != relaySuccess) {
    /* Peers still waiting for this rank's push or acknowledgement end their
     * waits now (as the kernel's osFail tells every peer), not at their
     * deadline; the transport's fail op marks the comm failed. */
    comm->tp->fail(comm);
    return res;
  }
  if (rooted) {
    /* Broadcast: every active places the root's block (the root its own, unless in place); reduce: the
     * root folds all A in active-index order, a peer writes nothing. */
    if (d->count && d->gather && srcs[R] != d->dst) memmove(d->dst, srcs[R], bytes);
    if (d->count && !d->gather && me == R)
      relayHostReduce(d->dst, srcs, A, d->count, d->dtype, d->op, d->divisor);
  } else if (d->count && d->gather) {
    /* Side by side; own block last: in place (all-gather) it is its own source. */
    for (int k = 1; k <= A; k++) {
      int i = (me + k) % A;
      memmove((char*)d->dst + (size_t)i * bytes, srcs[i], bytes);
    }
  } else if (d->count) {
    relayHostReduce(d->dst, srcs, A, d->count, d->dtype, d->op, d->divisor);
  }
  for (int i = 0; i < A; i++)
    if (i != me && relayShmPairs(d, me, i)) {
      atomic_store_explicit(&osAck(s->reg.base[d->ranks[i]], n, r)->v, ep[i], memory_order_release);
      relayShmRing(comm, d->ranks[i]);
    }
  return relaySuccess;
}
