/*
 * The one-shot protocol on the shm transport: the CPU twin of the GPU kernel
 * (nccl/oneshot.cu), so CI proves the protocol at 8 ranks.
 *
 * Region: every rank creates its own POSIX shm segment
 * "/relaycc-os-<commHash>-<rank>" (commHash: the comm's nonce, agreed at
 * init), maps every peer's, and unlinks its own name once all voted, so
 * nothing is left in /dev/shm and no fd stays open (mappings only):
 *   [header: sentinel, slotBytes, nranks]
 *   [flag[2][nranks]]  written by source s into OWNER's region: "my epoch-e
 *                      push into your staging[e&1][s] is complete"
 *   [ack[nranks]]      written by peer s into OWNER's region: "I finished
 *                      reading your epoch-e push"
 *   [bytes, call, mark, shape: [2][nranks] each]  written by source s with
 *                      its push: its byte count, its call number, its mark
 *                      (1 + a rank that passed a bad buffer, comm->callMark)
 *                      and its call's shape digest (low 32 bits), so a push
 *                      left by a call this rank rejected, or of a call of
 *                      another shape, is refused, not reduced
 *   [staging[2][nranks][slotBytes]]
 * (one 64-byte line per flag/ack: each has exactly one writer).
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

#include "common.h"
#include "core/comm.h"
#include "reduce_host.h"
#include "transport/shm_oneshot.h"

#define OS_LINE 64

typedef struct {
  _Alignas(OS_LINE) _Atomic uint32_t v;
} osWord;

typedef struct {
  _Alignas(OS_LINE) uint64_t sentinel;
  uint64_t slotBytes;
  uint32_t nranks;
} osHeader;

typedef struct {
  int tried, ready;
  int n;
  size_t slotBytes, regionBytes;
  uint64_t hash;
  unsigned char** base; /* [n] mapped regions (own included) */
  uint32_t* pairEpoch;  /* [n] */
} osState;

static uint64_t osSentinel(uint64_t hash, int rank) {
  return (hash ^ 0x9E3779B97F4A7C15ull) * 0x100000001B3ull + (uint64_t)rank + 1;
}

static size_t osFlagsOff(void) { return sizeof(osHeader); }
static size_t osAcksOff(int n) { return osFlagsOff() + 2 * (size_t)n * sizeof(osWord); }
/* Per source, by parity: byte count, call number, mark. */
enum { OS_INFO_BYTES = 0, OS_INFO_CALL = 1, OS_INFO_MARK = 2, OS_INFO_SHAPE = 3, OS_NINFO = 4 };
static size_t osInfoOff(int n) { return osAcksOff(n) + (size_t)n * sizeof(osWord); }
static size_t osStagingOff(int n) { return osInfoOff(n) + OS_NINFO * 2 * (size_t)n * sizeof(osWord); }

static osWord* osFlag(unsigned char* base, int n, int par, int src) {
  return (osWord*)(base + osFlagsOff()) + (size_t)par * (size_t)n + (size_t)src;
}
static osWord* osAck(unsigned char* base, int n, int src) { return (osWord*)(base + osAcksOff(n)) + src; }
/* The byte count of a push, stored before its flag: counts that differ
 * between ranks (check mode off) become relayInvalidUsage, not garbage. */
static osWord* osInfo(unsigned char* base, int n, int what, int par, int src) {
  return (osWord*)(base + osInfoOff(n)) + ((size_t)what * 2 + (size_t)par) * (size_t)n + (size_t)src;
}
static osWord* osBytes(unsigned char* base, int n, int par, int src) { return osInfo(base, n, OS_INFO_BYTES, par, src); }
static unsigned char* osStaging(const osState* s, unsigned char* base, int par, int src) {
  return base + osStagingOff(s->n) + ((size_t)par * (size_t)s->n + (size_t)src) * s->slotBytes;
}

static void osName(char* buf, size_t len, uint64_t hash, int rank) {
  snprintf(buf, len, "/relaycc-os-%016llx-%d", (unsigned long long)hash, rank);
}

static void osUnmapAll(osState* s) {
  if (!s->base) return;
  for (int q = 0; q < s->n; q++)
    if (s->base[q]) munmap(s->base[q], s->regionBytes);
  memset(s->base, 0, (size_t)s->n * sizeof(unsigned char*));
}

/* The state of a comm that could not allocate its own: declined for good. */
static osState osDeclined = {.tried = 1};

void relayShmOneShotFree(struct relayComm* comm) {
  osState* s = comm->oneshot;
  comm->oneshot = s == &osDeclined ? NULL : s;
  if (!s || s == &osDeclined) return;
  osUnmapAll(s);
  free(s->base);
  free(s->pairEpoch);
  free(s);
  comm->oneshot = NULL;
}

/* Creates, sizes and maps this rank's segment; stamps the sentinel. */
static int osCreateOwn(struct relayComm* comm, osState* s) {
  char name[96];
  osName(name, sizeof name, s->hash, comm->rank);
  shm_unlink(name); /* a crashed run's leftover of the same comm hash: never ours to join */
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return 0;
  int ok = ftruncate(fd, (off_t)s->regionBytes) == 0;
  void* p = ok ? mmap(NULL, s->regionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    return 0;
  }
  s->base[comm->rank] = p;
  osHeader* h = p;
  h->slotBytes = s->slotBytes;
  h->nranks = (uint32_t)s->n;
  /* Zero flags and acks (ftruncate did): the first epoch is 1. */
  atomic_thread_fence(memory_order_release);
  h->sentinel = osSentinel(s->hash, comm->rank);
  return 1;
}

static int osOpenPeer(struct relayComm* comm, osState* s, int q) {
  char name[96];
  osName(name, sizeof name, s->hash, q);
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return 0;
  struct stat sb;
  int ok = fstat(fd, &sb) == 0 && (size_t)sb.st_size == s->regionBytes;
  void* p = ok ? mmap(NULL, s->regionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return 0;
  s->base[q] = p;
  const osHeader* h = p;
  atomic_thread_fence(memory_order_acquire);
  if (h->sentinel != osSentinel(s->hash, q) || h->slotBytes != s->slotBytes || h->nranks != (uint32_t)s->n) {
    fprintf(stderr, "relaycc: rank %d: one-shot region of rank %d has sentinel %#llx (want %#llx): declining\n",
            comm->rank, q, (unsigned long long)h->sentinel, (unsigned long long)osSentinel(s->hash, q));
    return 0;
  }
  return 1;
}

typedef struct {
  int32_t ok;
  int32_t pad;
  uint64_t slotBytes;
} osVote;

/* One agreement; *all == 1 when every rank voted ok with the same slotBytes. */
static relayResult_t osVoteAll(struct relayComm* comm, int ok, size_t slotBytes, int* all) {
  osVote mine = {ok, 0, slotBytes};
  osVote* v = malloc((size_t)comm->nranks * sizeof *v);
  if (!v) return relaySetError(comm, relaySystemError, "rank %d: out of memory for the one-shot vote", comm->rank);
  relayResult_t res = comm->tp->agree(comm, &mine, v, sizeof mine);
  *all = 1;
  for (int q = 0; q < comm->nranks && res == relaySuccess; q++)
    if (!v[q].ok || v[q].slotBytes != slotBytes) *all = 0;
  free(v);
  return res;
}

relayResult_t relayShmOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream) {
  (void)stream; /* no capture on the CPU */
  osState* s = comm->oneshot;
  if (s && s->tried) return s->ready && slotBytes <= s->slotBytes ? relaySuccess : relayNotSupported;
  int n = comm->nranks;
  s = calloc(1, sizeof *s);
  if (s) {
    s->base = calloc((size_t)n, sizeof *s->base);
    s->pairEpoch = calloc((size_t)n, sizeof *s->pairEpoch);
  }
  if (!s || !s->base || !s->pairEpoch) {
    if (s) free(s->base), free(s->pairEpoch);
    free(s);
    /* Still collective: vote no in both rounds so peers decline with us, and
     * decline stickily, as they do (no vote on later calls). */
    comm->oneshot = &osDeclined;
    int all;
    relayResult_t r = osVoteAll(comm, 0, slotBytes, &all);
    if (r == relaySuccess) r = osVoteAll(comm, 0, slotBytes, &all);
    return r == relaySuccess ? relayNotSupported : r;
  }
  comm->oneshot = s;
  s->tried = 1; /* sticky: one attempt per comm, all ranks alike */
  s->n = n;
  s->slotBytes = (slotBytes + OS_LINE - 1) / OS_LINE * OS_LINE;
  s->regionBytes = osStagingOff(n) + 2 * (size_t)n * s->slotBytes;
  s->hash = relayShmCommHash(comm);
  int fault = (int)relayParamInt(comm, RELAY_P_ONESHOT_FAULT_RANK);
  /* Round 1: everyone created its segment (or says it could not). Both
   * rounds run even after a local failure, to stay in lockstep. */
  int all = 0;
  int ok = osCreateOwn(comm, s);
  relayResult_t res = osVoteAll(comm, ok, s->slotBytes, &all);
  /* Round 2: everyone opened every peer's and found its sentinel. */
  if (res == relaySuccess) {
    ok = all;
    for (int q = 0; q < n && ok; q++)
      if (q != comm->rank) ok = osOpenPeer(comm, s, q);
    if (fault == comm->rank) ok = 0; /* RELAYCC_ONESHOT_FAULT_RANK: as if an open failed */
    res = osVoteAll(comm, ok, s->slotBytes, &all);
  }
  char name[96];
  osName(name, sizeof name, s->hash, comm->rank);
  shm_unlink(name); /* every peer has mapped it (or declined): the name is no longer needed */
  if (res != relaySuccess) {
    osUnmapAll(s);
    return res;
  }
  s->ready = all;
  if (!all) {
    osUnmapAll(s);
    return relayNotSupported;
  }
  return relaySuccess;
}

/* Wait until word >= want (wrap-safe) with the transport's waiter (spin,
 * then futex on this rank's doorbell, which the pusher rings). */
static relayResult_t osWait(struct relayComm* comm, osWord* w, uint32_t want, int peer, const char* what) {
  /* Mostly there already: no message formatting on the fast path. */
  if ((int32_t)(atomic_load_explicit(&w->v, memory_order_acquire) - want) >= 0) return relaySuccess;
  char where[128];
  snprintf(where, sizeof where, "one-shot of call #%llu (step %d), waiting for %s epoch %u",
           (unsigned long long)comm->callSeq, comm->curStep, what, want);
  relayResult_t r = relayShmWaitWord(comm, &w->v, want, peer, where);
  if (r != relayTimeout) return r;
  return relaySetError(comm, relayTimeout,
                       "rank %d: one-shot of call #%llu (step %d): no %s epoch %u from rank %d within %d ms (it holds %u)",
                       comm->rank, (unsigned long long)comm->callSeq, comm->curStep, what, want, peer,
                       comm->cfg.timeoutMs, atomic_load_explicit(&w->v, memory_order_acquire));
}

relayResult_t relayShmOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream) {
  (void)stream;
  osState* s = comm->oneshot;
  int A = d->nActive, me = d->me, n = comm->nranks, r = comm->rank;
  size_t es = relayTypeSize(d->dtype), bytes = d->count * es;
  if (!s || !s->ready || A < 2 || A > RELAY_TP_ONESHOT_MAX || me < 0 || me >= A || d->ranks[me] != r || !es ||
      bytes > s->slotBytes)
    return relaySetError(comm, relayInternalError,
                         "rank %d: one-shot of call #%llu: region %s, A %d, me %d, %zu bytes (slot %zu)", r,
                         (unsigned long long)comm->callSeq, s && s->ready ? "ready" : "absent", A, me, bytes,
                         s ? s->slotBytes : 0);
  unsigned char* mine = s->base[r];
  uint32_t ep[RELAY_TP_ONESHOT_MAX];
  for (int i = 0; i < A; i++) ep[i] = i == me ? 0 : ++s->pairEpoch[d->ranks[i]];
  relayResult_t res = relaySuccess;
  /* Push, starting after me so peers are not all written in the same order. */
  for (int k = 1; k < A && res == relaySuccess; k++) {
    int i = (me + k) % A, p = d->ranks[i];
    uint32_t e = ep[i];
    res = osWait(comm, osAck(mine, n, p), e - 2, p, "acknowledgement of");
    if (res != relaySuccess) break;
    if (bytes)
      memcpy(osStaging(s, s->base[p], (int)(e & 1), r), (const char*)d->src + (size_t)i * d->srcStride * es, bytes);
    atomic_store_explicit(&osBytes(s->base[p], n, (int)(e & 1), r)->v, (uint32_t)bytes, memory_order_relaxed);
    atomic_store_explicit(&osInfo(s->base[p], n, OS_INFO_CALL, (int)(e & 1), r)->v, (uint32_t)comm->callSeq,
                          memory_order_relaxed);
    atomic_store_explicit(&osInfo(s->base[p], n, OS_INFO_MARK, (int)(e & 1), r)->v, (uint32_t)(comm->callMark + 1),
                          memory_order_relaxed);
    atomic_store_explicit(&osInfo(s->base[p], n, OS_INFO_SHAPE, (int)(e & 1), r)->v, (uint32_t)comm->callShape,
                          memory_order_relaxed);
    atomic_store_explicit(&osFlag(s->base[p], n, (int)(e & 1), r)->v, e, memory_order_release);
    relayShmRing(comm, p);
  }
  const void* srcs[RELAY_TP_ONESHOT_MAX];
  for (int i = 0; i < A && res == relaySuccess; i++) {
    if (i == me) {
      srcs[i] = (const char*)d->src + (size_t)me * d->srcStride * es;
      continue;
    }
    int p = d->ranks[i];
    res = osWait(comm, osFlag(mine, n, (int)(ep[i] & 1), p), ep[i], p, "push of");
    srcs[i] = osStaging(s, mine, (int)(ep[i] & 1), p);
    uint32_t got = atomic_load_explicit(&osBytes(mine, n, (int)(ep[i] & 1), p)->v, memory_order_relaxed);
    uint32_t call = atomic_load_explicit(&osInfo(mine, n, OS_INFO_CALL, (int)(ep[i] & 1), p)->v, memory_order_relaxed);
    uint32_t mark = atomic_load_explicit(&osInfo(mine, n, OS_INFO_MARK, (int)(ep[i] & 1), p)->v, memory_order_relaxed);
    if (res == relaySuccess && call != (uint32_t)comm->callSeq)
      res = relaySetError(comm, relayInvalidUsage,
                          "rank %d: one-shot of call #%llu: rank %d pushed data of its call #%u (mod 2^32): a rank "
                          "rejected a call its peers ran (check mode 0), so the ranks are no longer in step",
                          r, (unsigned long long)comm->callSeq, p, call);
    uint32_t shape = atomic_load_explicit(&osInfo(mine, n, OS_INFO_SHAPE, (int)(ep[i] & 1), p)->v, memory_order_relaxed);
    if (res == relaySuccess && shape != (uint32_t)comm->callShape)
      res = relaySetError(comm, relayInvalidUsage,
                          "rank %d: one-shot of call #%llu: rank %d's call has another shape (digest %08x, this rank's "
                          "%08x): ranks disagree on the collective, layout, counts, datatype, op or root",
                          r, (unsigned long long)comm->callSeq, p, shape, (uint32_t)comm->callShape);
    if (res == relaySuccess && mark && comm->callMark < 0 && mark <= (uint32_t)n) comm->callMark = (int)mark - 1;
    if (res == relaySuccess && got != (uint32_t)bytes)
      res = relaySetError(comm, relayInvalidUsage,
                          "rank %d: one-shot of call #%llu: rank %d pushed %u bytes, this rank expects %zu (counts "
                          "differ between ranks)",
                          r, (unsigned long long)comm->callSeq, p, got, bytes);
  }
  if (res != relaySuccess) {
    /* Peers still waiting for this rank's push or acknowledgement end their
     * waits now (as the kernel's osFail tells every peer), not at their
     * deadline; the transport's fail op marks the comm failed. */
    comm->tp->fail(comm);
    return res;
  }
  if (d->count && d->gather) {
    /* Side by side; own block last: in place (all-gather) it is its own source. */
    for (int k = 1; k <= A; k++) {
      int i = (me + k) % A;
      memmove((char*)d->dst + (size_t)i * bytes, srcs[i], bytes);
    }
  } else if (d->count) {
    relayHostReduce(d->dst, srcs, A, d->count, d->dtype, d->op, d->divisor);
  }
  for (int i = 0; i < A; i++)
    if (i != me) {
      atomic_store_explicit(&osAck(s->base[d->ranks[i]], n, r)->v, ep[i], memory_order_release);
      relayShmRing(comm, d->ranks[i]);
    }
  return relaySuccess;
}
