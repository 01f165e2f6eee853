/*
 * The shared-memory transport: one process per rank on one host.
 *
 * One POSIX shared-memory segment per comm, named "/relaycc-<job>", holds
 *   - a header (magic, parameters, the creator's nonce and pid, go flag),
 *   - one slot per rank (doorbell word for futex waits, pid, check-in,
 *     failure status, rejected call, two agreement buffers),
 *   - one SPSC byte ring per directed pair i->j (i != j) of ringBytes.
 * Its size is a pure function of (nranks, ringBytes), so every rank can check
 * it before trusting a segment it found under the name.
 *
 * Rendezvous: rank 0 unlinks whatever is under the name (a crashed run's
 * leftover), creates the segment O_EXCL, initializes it and publishes READY.
 * Other ranks open the name until it is READY, check in (pid, arrived =
 * nonce), and while waiting for "go" re-check that the name still resolves to
 * the inode they mapped: if rank 0 replaced a stale segment after they
 * attached to it, they re-attach. Rank 0 unlinks the name when all ranks
 * arrived and only then sets go, so a segment reachable by name never says
 * go: a stale one cannot release anyone.
 *
 * Data: every transfer is a header {magic, src, step, callSeq, bytes} then the
 * payload, streamed through the pair's ring. The receiver checks the header
 * before it writes a byte of the payload, which is how counts that differ
 * between ranks become relayInvalidUsage instead of corruption or a hang.
 *
 * Waits: poll, spin cfg.spinCount times (yielding), then sleep on this rank's
 * doorbell with FUTEX_WAIT (shared, not PRIVATE: the word lives in a shared
 * mapping) in slices of SHM_SLICE_MS, checking between slices the deadline,
 * the abort flag, the failure/reject status of the peers still awaited and
 * whether their processes are still alive.
 */
#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "core/comm.h"
#include "reduce_host.h"
#include "transport/shm_oneshot.h"
#include "transport/transport.h"

/* The segment is shared between processes: its atomics must be lock-free
 * (a lock-based atomic would lock a per-process table, not the memory). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm transport needs lock-free 32-bit atomics");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm transport needs lock-free 64-bit atomics");

#define SHM_LINE 64
#define SHM_MAGIC_READY 0x52434331u /* "RCC1": header initialized */
#define SHM_VERSION 1u
#define SHM_XFER_MAGIC 0x58465231u /* "XFR1": one transfer header in a ring */
#define SHM_AGREE_MAX 256
/* nranks^2 rings: 1024 ranks would already be a 1M-ring segment; one node
 * has at most a few hundred processes worth a rank each. */
#define SHM_MAX_RANKS 1024
#define SHM_MIN_RING 1024
#define SHM_MAX_RING (1u << 30)
#define SHM_MAX_JOB 200 /* NAME_MAX is 255; "/relaycc-" and slack */
/* Sleep slice of a wait: a dead peer or a passed deadline is noticed within
 * one slice. 25 ms keeps a killed rank's detection well under the 1-2 s test
 * deadlines while costing a sleeping rank ~40 wakeups a second. */
#define SHM_SLICE_MS 25
/* During rendezvous a rank polls the name (re-attach after a stale segment
 * was replaced); 5 ms makes init take a few ms, not a slice, per replacement. */
#define SHM_INIT_POLL_MS 5
/* Smallest ring rank 0 falls back to when /dev/shm is too small: 8 ranks
 * then need 3.5 MiB, and a 64 KiB ring still moves 16 KiB per handoff. */
#define SHM_FALLBACK_RING (64u << 10)
/* How long a joiner tolerates a live but unjoinable segment under the name
 * before it calls it an argument error (see shmConflictPersists). */
#define SHM_CONFLICT_MS 500
/* Publish head/tail at least every quarter ring so the peer starts copying
 * while we still write: with one core each, both memcpys overlap. */
#define SHM_CHUNK_DIV 4

enum { SHM_OK = 0, SHM_FAILED = 1, SHM_ABORTED = 2, SHM_GONE = 3 };
/* What a wait found wrong with a peer. */
enum { SHM_PEER_OK = 0, SHM_PEER_FAILED, SHM_PEER_ABORTED, SHM_PEER_GONE, SHM_PEER_REJECTED, SHM_PEER_DEAD };

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint32_t magic; /* SHM_MAGIC_READY once the rest is valid */
  uint32_t version;
  uint32_t nranks;
  uint32_t ringBytes;
  uint64_t totalBytes;
  uint64_t nonce;
  int32_t creatorPid;
  uint64_t creatorPidNs;       /* creatorPid means something only in this PID namespace */
  _Atomic uint32_t go;         /* rank 0 saw everyone arrive and unlinked the name */
  _Atomic uint32_t initFailed; /* rank 0 gave up init: relayResult_t + 1 */
  _Atomic uint32_t failSeen;   /* ranks that read initFailed from a marker segment */
  char failMsg[192];           /* rank 0's reason, written before initFailed */
} shmHeader;

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t seq; /* agreement round whose record this is */
  uint32_t bytes;
  unsigned char data[SHM_AGREE_MAX];
} shmAgreeBuf;

typedef struct {
  /* Bumped by whoever makes progress possible for this rank; it sleeps on it.
   * Its own line: every producer and consumer of this rank writes it. */
  _Alignas(SHM_LINE) _Atomic uint32_t doorbell;
  _Atomic uint32_t waiting; /* nonzero while this rank may sleep on doorbell */
  _Alignas(SHM_LINE) _Atomic int32_t pid;
  _Atomic uint32_t status;    /* SHM_OK / FAILED / ABORTED / GONE */
  _Atomic uint64_t arrived;   /* == header nonce once checked in */
  _Atomic uint64_t rejectSeq; /* call number this rank rejected (0: none) */
  uint64_t pidNs;             /* PID namespace of pid, written before arrived */
  _Atomic uint32_t failClaim; /* first writer of the failure record */
  int32_t failStep;
  uint64_t failCall;
  char failMsg[192];
  shmAgreeBuf agree[2]; /* by round parity */
} shmSlot;

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t head; /* bytes ever written (producer) */
  _Alignas(SHM_LINE) _Atomic uint64_t tail; /* bytes ever consumed (consumer) */
} shmRingCtl;

/* 32 bytes in the stream before each payload. */
typedef struct {
  uint32_t magic;
  int32_t src;
  int32_t step;
  uint32_t index; /* k-th transfer from src to this rank in the group */
  uint64_t callSeq;
  uint64_t bytes;
} shmXferHdr;
_Static_assert(sizeof(shmXferHdr) == 32, "transfer header is 32 bytes");
#define SHM_HDR ((uint64_t)sizeof(shmXferHdr))

typedef struct {
  int beg, end, cur; /* this peer's transfers: order[beg..end), next is cur */
  uint64_t pos;      /* bytes of transfer cur done, header included */
} shmPeerQ;

typedef struct {
  char name[SHM_MAX_JOB + 16];
  char job[SHM_MAX_JOB + 1];
  void* base;
  size_t size;
  shmHeader* hdr;
  shmSlot* slots;
  shmRingCtl* ctl;     /* [n*(n-1)] */
  unsigned char* data; /* [n*(n-1)][ringBytes] */
  uint64_t ringBytes, chunk;
  uint64_t nonce;
  int32_t deadCreator; /* pid of a dead rank 0 whose segment we found (for messages) */
  int openErrno;       /* last shm_open failure of a joiner (for messages) */
  uint64_t conflictSince; /* when a joiner first met a live segment it cannot join */
  int32_t* pids;       /* [n], from check-in; 0 where a peer's pid is not ours to check */
  uint64_t pidNs;      /* our PID namespace (0: unknown) */
  atomic_int abortedLocal;
  uint64_t agreeRound;
  /* Producer/consumer cursors: we own head of rings me->p and tail of p->me. */
  uint64_t *sendHead, *sendTailSeen, *recvTail, *recvHeadSeen;
  /* Per-group work, grown as needed. */
  shmPeerQ *sq, *rq;   /* [n] */
  shmXferHdr* rhdr;    /* [n]: header being received from p */
  int *sorder, *rorder; /* transfer indices grouped by peer */
  int orderCap;
  int *spend, *rpend; /* peers with pending sends / recvs */
  int nspend, nrpend;
  int* tmp; /* [n] */
  /* Scratch cache. */
  void** scr;
  size_t* scrBytes;
  int nscr;
} shmState;

/* ---------------------------------------------------------------- helpers */

static long shmFutex(_Atomic uint32_t* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, (uint32_t*)addr, op, val, ts, NULL, 0);
}

/* Ring rank q's doorbell: wake it only if it may sleep (no syscall otherwise).
 * seq_cst pairs with shmSleep's store of waiting then load of doorbell: either
 * we see waiting != 0 or the sleeper sees the bumped doorbell. */
static void shmWake(shmSlot* s) {
  atomic_fetch_add_explicit(&s->doorbell, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&s->waiting, memory_order_seq_cst)) shmFutex(&s->doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

static void shmSleep(shmSlot* me, uint32_t db, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  atomic_store_explicit(&me->waiting, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&me->doorbell, memory_order_seq_cst) == db) shmFutex(&me->doorbell, FUTEX_WAIT, db, &ts);
  atomic_store_explicit(&me->waiting, 0, memory_order_relaxed);
}

static void shmNap(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Alive unless the process is gone or a zombie (a killed rank whose parent
 * has not reaped it yet still answers kill(pid, 0)). */
static int shmPidAlive(int32_t pid) {
  if (pid <= 0) return 0; /* kill(0 or -1, ...) would address groups */
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = 0;
  const char* rp = strrchr(buf, ')'); /* the command name may hold spaces */
  if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X')) return 0;
  return 1;
}

/* The inode of our PID namespace: pids from another namespace (containers
 * sharing /dev/shm but not PIDs) must not be judged by kill(). 0 when /proc
 * is not there, which then matches any other 0. */
static uint64_t shmPidNamespace(void) {
  struct stat sb;
  return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/* Is peer q's process known dead? Unknown pids are never dead: the deadline
 * still bounds the wait. */
static int shmPeerDead(const shmState* st, int q) { return st->pids[q] > 0 && !shmPidAlive(st->pids[q]); }

static uint64_t shmRand64(void) {
  uint64_t x = 0;
  if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x)
    x = relayNowNs() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&x;
  return x ? x : 0x9e3779b97f4a7c15ull;
}

static size_t shmAlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Layout: [header: 4096][slots][ring ctl][pad 4096][ring data]. Pure function
 * of (n, ring) so every rank can check a segment's size. */
typedef struct {
  size_t slots, ctl, data, total;
} shmLayout;

static int shmLayoutOf(int n, uint64_t ring, shmLayout* L) {
  size_t pairs = (size_t)n * (size_t)(n - 1);
  L->slots = 4096;
  L->ctl = shmAlignUp(L->slots + (size_t)n * sizeof(shmSlot), SHM_LINE);
  L->data = shmAlignUp(L->ctl + pairs * sizeof(shmRingCtl), 4096);
  if (pairs && ring > (SIZE_MAX - L->data) / pairs) return -1;
  L->total = L->data + pairs * (size_t)ring;
  return 0;
}

static size_t shmPair(int n, int src, int dst) {
  return (size_t)src * (size_t)(n - 1) + (size_t)(dst < src ? dst : dst - 1);
}
static shmRingCtl* shmCtl(shmState* st, int n, int src, int dst) { return &st->ctl[shmPair(n, src, dst)]; }
static unsigned char* shmData(shmState* st, int n, int src, int dst) {
  return st->data + shmPair(n, src, dst) * st->ringBytes;
}

static void shmRingPut(unsigned char* d, uint64_t R, uint64_t at, const void* src, size_t n) {
  size_t off = (size_t)(at % R), first = (size_t)R - off;
  if (first > n) first = n;
  memcpy(d + off, src, first);
  if (n > first) memcpy(d, (const unsigned char*)src + first, n - first);
}

static void shmRingGet(const unsigned char* d, uint64_t R, uint64_t at, void* dst, size_t n) {
  size_t off = (size_t)(at % R), first = (size_t)R - off;
  if (first > n) first = n;
  memcpy(dst, d + off, first);
  if (n > first) memcpy((unsigned char*)dst + first, d, n - first);
}

static shmState* shmStateOf(struct relayComm* comm) { return (shmState*)comm->tpState; }

static void shmCopyMsg(char* dst, size_t cap, const char* src) {
  size_t len = strnlen(src, cap - 1); /* truncated on purpose: quoted in others' messages */
  memcpy(dst, src, len);
  dst[len] = 0;
}

/* Record this rank's failure in its slot once, so peers waiting on it return
 * at once (with our message) instead of at their deadline. */
static void shmPublishStatus(shmState* st, int me, uint32_t status, const struct relayComm* comm) {
  shmSlot* s = &st->slots[me];
  if (atomic_exchange_explicit(&s->failClaim, 1, memory_order_acq_rel) == 0) {
    if (comm) {
      s->failCall = comm->callSeq;
      s->failStep = comm->curStep;
      shmCopyMsg(s->failMsg, sizeof s->failMsg, comm->lastError);
    } else {
      s->failMsg[0] = 0;
    }
    atomic_store_explicit(&s->status, status, memory_order_release);
  }
  int n = (int)st->hdr->nranks;
  for (int q = 0; q < n; q++)
    if (q != me) shmWake(&st->slots[q]);
}

/* Every error of group/agree: the comm is failed (data may have moved). */
static relayResult_t shmFail(struct relayComm* comm, relayResult_t res) {
  shmState* st = shmStateOf(comm);
  comm->failed = 1;
  shmPublishStatus(st, comm->rank, SHM_FAILED, comm);
  return res;
}

static int shmAborted(struct relayComm* comm, shmState* st) {
  return atomic_load_explicit(&comm->aborted, memory_order_relaxed) ||
         atomic_load_explicit(&st->abortedLocal, memory_order_relaxed);
}

/* What is wrong with peer q, as far as its slot says (no syscall). */
static int shmPeerState(struct relayComm* comm, shmState* st, int q) {
  shmSlot* s = &st->slots[q];
  uint32_t status = atomic_load_explicit(&s->status, memory_order_acquire);
  if (status == SHM_FAILED) return SHM_PEER_FAILED;
  if (status == SHM_ABORTED) return SHM_PEER_ABORTED;
  if (status == SHM_GONE) return SHM_PEER_GONE;
  uint64_t rej = atomic_load_explicit(&s->rejectSeq, memory_order_acquire);
  if (rej != 0 && rej == comm->callSeq) return SHM_PEER_REJECTED;
  return SHM_PEER_OK;
}

/* where: "step 3 of call #17" or "agreement round 5 (call #17)". */
static relayResult_t shmPeerError(struct relayComm* comm, shmState* st, int q, int what, const char* where) {
  shmSlot* s = &st->slots[q];
  int me = comm->rank;
  switch (what) {
    case SHM_PEER_FAILED:
      return relaySetError(comm, relayRemoteError, "rank %d: %s: rank %d failed (its error: %s)", me, where, q,
                           s->failMsg[0] ? s->failMsg : "none recorded");
    case SHM_PEER_ABORTED:
      return relaySetError(comm, relayRemoteError, "rank %d: %s: rank %d aborted its comm", me, where, q);
    case SHM_PEER_GONE:
      return relaySetError(comm, relayRemoteError,
                           "rank %d: %s: rank %d destroyed its comm while this rank still waits on it", me, where, q);
    case SHM_PEER_REJECTED:
      return relaySetError(comm, relayRemoteError, "rank %d: %s: rank %d rejected call #%llu before moving data", me,
                           where, q, (unsigned long long)comm->callSeq);
    default:
      return relaySetError(comm, relayRemoteError, "rank %d: %s: rank %d (pid %d) died", me, where, q,
                           (int)st->pids[q]);
  }
}

/* A wait made no progress: spin (yielding), then sleep one bounded slice on
 * our doorbell. Returns the ns left before the deadline after the pause
 * (0: passed). */
typedef struct {
  uint64_t lastProgress;
  uint64_t lastLiveCheck;
  int spins;
} shmWaiter;

static void shmWaiterInit(shmWaiter* w) {
  w->lastProgress = relayNowNs();
  w->lastLiveCheck = w->lastProgress;
  w->spins = 0;
}

/* Returns 1 when the wait's deadline (no progress for timeoutMs) passed. */
static int shmPause(struct relayComm* comm, shmState* st, shmWaiter* w, uint32_t db) {
  if (w->spins < comm->cfg.spinCount) {
    w->spins++;
    sched_yield();
    return 0;
  }
  uint64_t now = relayNowNs();
  uint64_t limit = (uint64_t)(comm->cfg.timeoutMs > 0 ? comm->cfg.timeoutMs : INT_MAX) * 1000000ull;
  uint64_t waited = now - w->lastProgress;
  if (waited >= limit) return 1;
  uint64_t ns = (uint64_t)SHM_SLICE_MS * 1000000ull;
  if (limit - waited < ns) ns = limit - waited;
  shmSleep(&st->slots[comm->rank], db, ns);
  return 0;
}

/* Time for the (syscall-costing) liveness check of the peers we wait on? */
static int shmLiveCheckDue(shmWaiter* w) {
  uint64_t now = relayNowNs();
  if (now - w->lastLiveCheck < (uint64_t)SHM_SLICE_MS * 1000000ull) return 0;
  w->lastLiveCheck = now;
  return 1;
}

/* ------------------------------------------------------------ rendezvous */

static relayResult_t shmMap(struct relayComm* comm, int fd, size_t size, void** out) {
  void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return relaySetError(comm, relaySystemError, "rank %d: mmap of %zu bytes of the shm segment failed: %s",
                         comm->rank, size, strerror(errno));
  *out = p;
  return relaySuccess;
}

static void shmSetPointers(shmState* st, const shmLayout* L) {
  unsigned char* b = (unsigned char*)st->base;
  st->hdr = (shmHeader*)b;
  st->slots = (shmSlot*)(b + L->slots);
  st->ctl = (shmRingCtl*)(b + L->ctl);
  st->data = b + L->data;
}

static void shmUnmap(shmState* st) {
  if (st->base) munmap(st->base, st->size);
  st->base = NULL;
  st->hdr = NULL;
  st->slots = NULL;
}

/* "rank 2" or "ranks 2, 5, 7": those not checked in, into buf. */
static void shmMissing(shmState* st, int n, char* buf, size_t len) {
  int cnt = 0;
  for (int r = 0; r < n; r++)
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) cnt++;
  size_t o = (size_t)snprintf(buf, len, "%s", cnt == 1 ? "rank " : "ranks ");
  int listed = 0;
  for (int r = 0; r < n && o + 16 < len; r++) {
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) == st->nonce) continue;
    o += (size_t)snprintf(buf + o, len - o, "%s%d", listed++ ? ", " : "", r);
  }
  if (!cnt) snprintf(buf, len, "no rank (all arrived)");
}

static void shmRecordPids(shmState* st, int n) {
  for (int r = 0; r < n; r++) {
    /* arrived (acquire) orders pidNs and pid, written before it. */
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) continue;
    st->pids[r] = st->slots[r].pidNs == st->pidNs ? atomic_load_explicit(&st->slots[r].pid, memory_order_relaxed) : 0;
  }
}

/* Rank 0 could not build the segment (no room in /dev/shm, ...): put a
 * one-page marker under the name that says why, so the other ranks fail now
 * with our reason instead of at their deadline, and remove it once they all
 * read it (or at our deadline: nothing is left behind). */
static void shmAnnounceCreateFailure(struct relayComm* comm, shmState* st, relayResult_t res, uint64_t t0) {
  int n = comm->nranks;
  uint64_t limit = (uint64_t)comm->cfg.timeoutMs * 1000000ull;
  if (n < 2) return;
  int fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  shmHeader* h = MAP_FAILED;
  /* Reserve the page first: writing an unbacked page of a full tmpfs SIGBUSes. */
  if (ftruncate(fd, 4096) == 0 && posix_fallocate(fd, 0, 4096) == 0)
    h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (h == MAP_FAILED) {
    shm_unlink(st->name);
    return;
  }
  h->version = SHM_VERSION;
  h->nranks = (uint32_t)n;
  h->creatorPid = (int32_t)getpid();
  h->creatorPidNs = st->pidNs;
  shmCopyMsg(h->failMsg, sizeof h->failMsg, comm->lastError);
  atomic_store_explicit(&h->initFailed, (uint32_t)res + 1, memory_order_relaxed);
  atomic_store_explicit(&h->magic, SHM_MAGIC_READY, memory_order_release);
  while (atomic_load_explicit(&h->failSeen, memory_order_acquire) < (uint32_t)(n - 1) && !shmAborted(comm, st) &&
         relayNowNs() - t0 < limit)
    shmNap(SHM_INIT_POLL_MS);
  shm_unlink(st->name);
  munmap(h, 4096);
}

static relayResult_t shmCreate(struct relayComm* comm, shmState* st) {
  int n = comm->nranks;
  uint64_t t0 = relayNowNs(), limit = (uint64_t)comm->cfg.timeoutMs * 1000000ull;
  uint64_t wanted = st->ringBytes;
  shmLayout lay, *L = &lay;
  int fd = -1;
  relayResult_t res = relaySuccess;
retry:
  shmLayoutOf(n, st->ringBytes, L); /* relayShmAttach checked the largest */
  for (;;) {
    /* Whatever is under the name is a crashed run's leftover (rank 0 is the
     * only creator). Ranks that mapped it keep valid memory and re-attach
     * when they see the name resolve to our inode instead. */
    shm_unlink(st->name);
    fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || relayNowNs() - t0 > limit)
      return relaySetError(comm, relaySystemError, "rank 0: shm_open(%s) failed: %s", st->name, strerror(errno));
    shmNap(1); /* someone recreated it between our unlink and create */
  }
  if (ftruncate(fd, (off_t)L->total) != 0) {
    res = relaySetError(comm, relaySystemError, "rank 0: sizing shm segment %s to %zu bytes failed: %s", st->name,
                        L->total, strerror(errno));
    goto fail;
  }
  /* Reserve the pages now: a tmpfs too small for the rings would otherwise
   * SIGBUS some rank at its first touch instead of failing init cleanly. */
  int fe = posix_fallocate(fd, 0, (off_t)L->total);
  if (fe == ENOSPC || fe == EFBIG) {
    /* Docker's default /dev/shm is 64 MiB and 8 ranks of 1 MiB rings take
     * 56: rather than fail, halve the rings (joiners take the size from the
     * header) down to SHM_FALLBACK_RING. */
    if (st->ringBytes / 2 >= SHM_FALLBACK_RING) {
      close(fd);
      fd = -1;
      shm_unlink(st->name);
      st->ringBytes /= 2;
      goto retry;
    }
    res = relaySetError(comm, relaySystemError,
                        "rank 0: shm segment %s needs %zu bytes (%d ranks, ring %llu bytes per pair, after halving from "
                        "%llu) and /dev/shm has no room: lower RELAYCC_SHM_RING_BYTES, enlarge /dev/shm or use fewer "
                        "ranks",
                        st->name, L->total, n, (unsigned long long)st->ringBytes, (unsigned long long)wanted);
    goto fail;
  }
  if (st->ringBytes != wanted)
    fprintf(stderr,
            "relaycc: rank 0: /dev/shm has no room for %llu-byte rings at %d ranks; using %llu-byte rings "
            "(enlarge /dev/shm or set RELAYCC_SHM_RING_BYTES)\n",
            (unsigned long long)wanted, n, (unsigned long long)st->ringBytes);
  st->chunk = st->ringBytes / SHM_CHUNK_DIV;
  res = shmMap(comm, fd, L->total, &st->base);
  if (res != relaySuccess) goto fail;
  close(fd);
  fd = -1;
  st->size = L->total;
  shmSetPointers(st, L);
  st->nonce = shmRand64();
  /* The file was created zero-filled: rings, cursors, statuses start at 0. */
  st->hdr->version = SHM_VERSION;
  st->hdr->nranks = (uint32_t)n;
  st->hdr->ringBytes = (uint32_t)st->ringBytes;
  st->hdr->totalBytes = L->total;
  st->hdr->nonce = st->nonce;
  st->hdr->creatorPid = (int32_t)getpid();
  st->hdr->creatorPidNs = st->pidNs;
  st->slots[0].pidNs = st->pidNs;
  atomic_store_explicit(&st->slots[0].pid, (int32_t)getpid(), memory_order_relaxed);
  atomic_store_explicit(&st->slots[0].arrived, st->nonce, memory_order_relaxed);
  atomic_store_explicit(&st->hdr->magic, SHM_MAGIC_READY, memory_order_release);

  shmWaiter w;
  shmWaiterInit(&w);
  for (;;) {
    uint32_t db = atomic_load_explicit(&st->slots[0].doorbell, memory_order_acquire);
    int missing = 0, dead = -1;
    int check = shmLiveCheckDue(&w);
    for (int r = 1; r < n; r++) {
      if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) {
        missing++;
        continue;
      }
      if (check && dead < 0 && st->slots[r].pidNs == st->pidNs &&
          !shmPidAlive(atomic_load_explicit(&st->slots[r].pid, memory_order_relaxed)))
        dead = r;
    }
    if (!missing) break;
    if (dead >= 0) {
      res = relaySetError(comm, relayRemoteError, "rank 0: init of job '%s': rank %d (pid %d) checked in and died",
                          st->job, dead, (int)atomic_load(&st->slots[dead].pid));
      goto failMapped;
    }
    if (shmAborted(comm, st)) {
      res = relaySetError(comm, relayInvalidUsage, "rank 0: init of job '%s' aborted", st->job);
      goto failMapped;
    }
    if (relayNowNs() - t0 >= limit) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      res = relaySetError(comm, relayTimeout,
                          "rank 0: init of job '%s' (%d ranks): timed out after %d ms waiting for %s to arrive",
                          st->job, n, comm->cfg.timeoutMs, miss);
      goto failMapped;
    }
    /* Arrivals ring our doorbell; the slice bounds the liveness check. */
    uint64_t left = limit - (relayNowNs() - t0), ns = (uint64_t)SHM_SLICE_MS * 1000000ull;
    shmSleep(&st->slots[0], db, left < ns ? left : ns);
  }
  /* Everyone mapped it: the name can go, so nothing outlives the job. Only
   * then go: a segment still reachable by name never releases anyone. */
  shm_unlink(st->name);
  shmRecordPids(st, n);
  atomic_store_explicit(&st->hdr->go, 1, memory_order_release);
  for (int r = 1; r < n; r++) shmWake(&st->slots[r]);
  return relaySuccess;

failMapped:
  /* Tell the ranks already here why, then release them. */
  shmCopyMsg(st->hdr->failMsg, sizeof st->hdr->failMsg, comm->lastError);
  atomic_store_explicit(&st->hdr->initFailed, (uint32_t)res + 1, memory_order_release);
  for (int r = 1; r < n; r++) shmWake(&st->slots[r]);
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
  shmUnmap(st);
  return res;
fail:
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
  shmUnmap(st);
  shmAnnounceCreateFailure(comm, st, res, t0);
  return res;
}

/* Does the name still resolve to the file we mapped? 1 yes, 0 no (another
 * inode), -1 not there now. */
static int shmSameFile(const shmState* st, dev_t dev, ino_t ino) {
  int fd = shm_open(st->name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct stat sb;
  int same = fstat(fd, &sb) == 0 && sb.st_dev == dev && sb.st_ino == ino;
  close(fd);
  return same;
}

/* A live segment we cannot join (other nranks or ring size, or our rank held
 * by a live pid) is an error only if it stays SHM_CONFLICT_MS: an old run's
 * rank 0 that still lives (hung, being killed) leaves one that our rank 0
 * replaces within milliseconds of starting. */
static int shmConflictPersists(shmState* st) {
  uint64_t now = relayNowNs();
  if (!st->conflictSince) st->conflictSince = now;
  return now - st->conflictSince >= (uint64_t)SHM_CONFLICT_MS * 1000000ull;
}

/* One attempt of a non-zero rank: 1 = joined, 0 = retry (nothing usable under
 * the name yet, or a stale segment), < 0 = error set. */
static int shmTryJoin(struct relayComm* comm, shmState* st, uint64_t t0, relayResult_t* res) {
  int n = comm->nranks, me = comm->rank;
  uint64_t limit = (uint64_t)comm->cfg.timeoutMs * 1000000ull;
  int fd = shm_open(st->name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    st->openErrno = errno;
    return 0;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(shmHeader)) {
    close(fd);
    return 0; /* rank 0 between shm_open and ftruncate */
  }
  /* The header first: it says how large the rest is. */
  shmHeader* h = mmap(NULL, sizeof(shmHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) {
    close(fd);
    return 0;
  }
  if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC_READY) {
    munmap(h, sizeof(shmHeader));
    close(fd);
    return 0; /* not initialized yet (or garbage): rank 0 will replace it */
  }
  /* A dead creator means a crashed run's leftover: never join it (even one
   * that says go), wait for our rank 0 to replace it. */
  if (h->creatorPidNs == st->pidNs && !shmPidAlive(h->creatorPid)) {
    st->deadCreator = h->creatorPid;
    munmap(h, sizeof(shmHeader));
    close(fd);
    return 0;
  }
  /* Rank 0 failed to build the segment (or gave up) and left its reason. */
  uint32_t failed0 = atomic_load_explicit(&h->initFailed, memory_order_acquire);
  if (failed0 && h->nranks == (uint32_t)n) {
    char why[sizeof h->failMsg];
    shmCopyMsg(why, sizeof why, h->failMsg);
    atomic_fetch_add_explicit(&h->failSeen, 1, memory_order_acq_rel);
    munmap(h, sizeof(shmHeader));
    close(fd);
    *res = relaySetError(comm, relayRemoteError, "rank %d: init of job '%s': rank 0 failed init (%s)", me, st->job,
                         why);
    return -1;
  }
  /* The ring size is rank 0's (it may have shrunk it to fit /dev/shm). */
  shmLayout L;
  uint64_t ring = h->ringBytes;
  int ringOk = ring >= SHM_MIN_RING && ring <= SHM_MAX_RING && ring % SHM_LINE == 0 &&
               shmLayoutOf(n, ring, &L) == 0 && (size_t)sb.st_size == L.total;
  if (h->version != SHM_VERSION || h->nranks != (uint32_t)n || !ringOk) {
    int creator = h->creatorPid;
    unsigned hn = h->nranks, hv = h->version;
    munmap(h, sizeof(shmHeader));
    close(fd);
    if (!shmConflictPersists(st)) return 0;
    *res = relaySetError(comm, relayInvalidArgument,
                         "rank %d: job '%s': rank 0 (pid %d) created it for nranks %u (version %u, %lld bytes); this "
                         "rank has nranks %d (version %u): ranks disagree on nranks, or two jobs share the name",
                         me, st->job, creator, hn, hv, (long long)sb.st_size, n, SHM_VERSION);
    return -1;
  }
  munmap(h, sizeof(shmHeader));
  void* base = mmap(NULL, L.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return 0;
  st->base = base;
  st->size = L.total;
  st->ringBytes = ring;
  st->chunk = ring / SHM_CHUNK_DIV;
  shmSetPointers(st, &L);
  st->nonce = st->hdr->nonce;
  shmSlot* mine = &st->slots[me];
  int32_t holder = atomic_load_explicit(&mine->pid, memory_order_acquire);
  if (holder != 0 && holder != (int32_t)getpid()) {
    if ((mine->pidNs != st->pidNs || shmPidAlive(holder)) && shmConflictPersists(st)) {
      shmUnmap(st);
      *res = relaySetError(comm, relayInvalidArgument,
                           "rank %d: job '%s': rank %d is already taken by pid %d (two processes with one rank?)", me,
                           st->job, me, (int)holder);
      return -1;
    }
    shmUnmap(st); /* an old run's segment: wait for rank 0 to replace it */
    return 0;
  }
  dev_t dev = sb.st_dev;
  ino_t ino = sb.st_ino;
  mine->pidNs = st->pidNs;
  atomic_store_explicit(&mine->pid, (int32_t)getpid(), memory_order_release);
  atomic_store_explicit(&mine->arrived, st->nonce, memory_order_release);
  shmWake(&st->slots[0]);

  for (int poll = 1;; poll++) {
    uint32_t db = atomic_load_explicit(&mine->doorbell, memory_order_acquire);
    if (atomic_load_explicit(&st->hdr->go, memory_order_acquire)) {
      shmRecordPids(st, n);
      return 1;
    }
    uint32_t failed = atomic_load_explicit(&st->hdr->initFailed, memory_order_acquire);
    if (failed) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      relayResult_t r0 = (relayResult_t)(failed - 1);
      char why[sizeof st->hdr->failMsg];
      shmCopyMsg(why, sizeof why, st->hdr->failMsg);
      shmUnmap(st);
      if (r0 == relayTimeout)
        *res = relaySetError(comm, relayTimeout,
                             "rank %d: init of job '%s' (%d ranks): rank 0 gave up after %d ms waiting for %s to "
                             "arrive",
                             me, st->job, n, comm->cfg.timeoutMs, miss);
      else
        *res = relaySetError(comm, relayRemoteError, "rank %d: init of job '%s': rank 0 gave up init (%s)", me,
                             st->job, why);
      return -1;
    }
    if (shmAborted(comm, st)) {
      shmUnmap(st);
      *res = relaySetError(comm, relayInvalidUsage, "rank %d: init of job '%s' aborted", me, st->job);
      return -1;
    }
    /* Rank 0 replaced the segment we joined (it was a leftover): re-attach.
     * "Not there" is normal just before go (rank 0 unlinks, then sets go). */
    if (shmSameFile(st, dev, ino) == 0) {
      shmUnmap(st);
      return 0;
    }
    /* Its creator died: either our rank 0 crashed (we time out below, saying
     * so) or it was an old run's rank 0 that was still alive when we came and
     * our rank 0 is about to replace the segment. Retrying covers both. */
    if (poll % (SHM_SLICE_MS / SHM_INIT_POLL_MS) == 0 && st->hdr->creatorPidNs == st->pidNs &&
        !shmPidAlive(st->hdr->creatorPid)) {
      st->deadCreator = st->hdr->creatorPid;
      shmUnmap(st);
      return 0;
    }
    if (relayNowNs() - t0 >= limit) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      int creator = st->hdr->creatorPid;
      *res = relaySetError(comm, relayTimeout,
                           "rank %d: init of job '%s' (%d ranks): timed out after %d ms waiting for %s to arrive%s",
                           me, st->job, n, comm->cfg.timeoutMs, miss,
                           st->hdr->creatorPidNs != st->pidNs || shmPidAlive(creator)
                               ? ""
                               : " (the segment's creator, rank 0, is gone)");
      shmUnmap(st);
      return -1;
    }
    shmSleep(mine, db, (uint64_t)SHM_INIT_POLL_MS * 1000000ull);
  }
}

static relayResult_t shmJoin(struct relayComm* comm, shmState* st) {
  uint64_t t0 = relayNowNs(), limit = (uint64_t)comm->cfg.timeoutMs * 1000000ull;
  for (;;) {
    relayResult_t res = relaySuccess;
    int r = shmTryJoin(comm, st, t0, &res);
    if (r > 0) return relaySuccess;
    if (r < 0) return res;
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "rank %d: init of job '%s' aborted", comm->rank, st->job);
    if (relayNowNs() - t0 >= limit) {
      char why[128] = "rank 0 never arrived";
      if (st->openErrno && st->openErrno != ENOENT)
        snprintf(why, sizeof why, "opening it failed: %s", strerror(st->openErrno));
      else if (st->deadCreator)
        snprintf(why, sizeof why, "the one there was made by pid %d, now dead: rank 0 crashed or never came",
                 (int)st->deadCreator);
      return relaySetError(comm, relayTimeout,
                           "rank %d: init of job '%s' (%d ranks): timed out after %d ms waiting for rank 0 to create "
                           "shm segment %s (%s)",
                           comm->rank, st->job, comm->nranks, comm->cfg.timeoutMs, st->name, why);
    }
    shmNap(SHM_INIT_POLL_MS);
  }
}

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
  free(st->rhdr);
  free(st->sorder);
  free(st->rorder);
  free(st->spend);
  free(st->rpend);
  free(st->tmp);
  free(st);
}

/* ------------------------------------------------------------------ group */

static relayResult_t shmGrowOrder(struct relayComm* comm, shmState* st, int need) {
  if (need <= st->orderCap) return relaySuccess;
  int cap = st->orderCap ? st->orderCap : 64;
  while (cap < need) cap *= 2;
  int* a = realloc(st->sorder, (size_t)cap * sizeof(int));
  if (a) st->sorder = a;
  int* b = a ? realloc(st->rorder, (size_t)cap * sizeof(int)) : NULL;
  if (b) st->rorder = b;
  if (!a || !b)
    return relaySetError(comm, relaySystemError, "rank %d: out of memory for %d transfer descriptors", comm->rank,
                         need);
  st->orderCap = cap;
  return relaySuccess;
}

/* Group transfers by peer (stable: per-peer order is the caller's order) and
 * list the remote peers that have any. */
static void shmBucket(shmState* st, int n, const relayXferDesc* x, int nx, int* order, shmPeerQ* q, int* pend,
                      int* npend, int me) {
  int* cnt = st->tmp;
  memset(cnt, 0, (size_t)n * sizeof(int));
  for (int i = 0; i < nx; i++) cnt[x[i].peer]++;
  int at = 0;
  *npend = 0;
  for (int p = 0; p < n; p++) {
    q[p].beg = q[p].cur = at;
    at += cnt[p];
    q[p].end = at;
    q[p].pos = 0;
    cnt[p] = q[p].beg;
    if (p != me && q[p].end > q[p].beg) pend[(*npend)++] = p;
  }
  for (int i = 0; i < nx; i++) order[cnt[x[i].peer]++] = i;
}

/* Stream as much as the ring me->p takes. Returns bytes moved. */
static uint64_t shmPush(struct relayComm* comm, shmState* st, int p, const relayXferDesc* sends) {
  int n = comm->nranks, me = comm->rank;
  shmRingCtl* c = shmCtl(st, n, me, p);
  unsigned char* d = shmData(st, n, me, p);
  uint64_t R = st->ringBytes, head = st->sendHead[p], moved = 0, sincePublish = 0;
  shmPeerQ* q = &st->sq[p];
  while (q->cur < q->end) {
    const relayXferDesc* x = &sends[st->sorder[q->cur]];
    uint64_t total = SHM_HDR + x->bytes;
    uint64_t room = R - (head - st->sendTailSeen[p]);
    if (room < total - q->pos) {
      st->sendTailSeen[p] = atomic_load_explicit(&c->tail, memory_order_acquire);
      room = R - (head - st->sendTailSeen[p]);
    }
    if (room == 0) break;
    uint64_t k;
    if (q->pos < SHM_HDR) {
      shmXferHdr h = {SHM_XFER_MAGIC, me, comm->curStep, (uint32_t)(q->cur - q->beg), comm->callSeq, x->bytes};
      k = SHM_HDR - q->pos;
      if (k > room) k = room;
      shmRingPut(d, R, head, (const unsigned char*)&h + q->pos, (size_t)k);
    } else {
      k = total - q->pos;
      if (k > room) k = room;
      if (k > st->chunk) k = st->chunk;
      shmRingPut(d, R, head, (const unsigned char*)x->ptr + (q->pos - SHM_HDR), (size_t)k);
    }
    head += k;
    q->pos += k;
    moved += k;
    sincePublish += k;
    if (q->pos == total) {
      q->cur++;
      q->pos = 0;
    }
    if (sincePublish >= st->chunk) {
      atomic_store_explicit(&c->head, head, memory_order_release);
      shmWake(&st->slots[p]);
      sincePublish = 0;
    }
  }
  st->sendHead[p] = head;
  if (sincePublish) {
    atomic_store_explicit(&c->head, head, memory_order_release);
    shmWake(&st->slots[p]);
  }
  return moved;
}

static relayResult_t shmHdrMismatch(struct relayComm* comm, int p, const shmXferHdr* h, const relayXferDesc* x,
                                    int index, int count) {
  int me = comm->rank;
  if (h->magic != SHM_XFER_MAGIC || h->src != p)
    return relaySetError(comm, relayInternalError,
                         "rank %d: step %d of call #%llu: corrupt stream from rank %d (magic %#x, src %d)", me,
                         comm->curStep, (unsigned long long)comm->callSeq, p, h->magic, h->src);
  if (h->callSeq != comm->callSeq || h->step != comm->curStep)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: rank %d sent a transfer from step %d of call #%llu: ranks "
                         "disagree on the sequence of calls or on their plans",
                         me, comm->curStep, (unsigned long long)comm->callSeq, p, h->step,
                         (unsigned long long)h->callSeq);
  return relaySetError(comm, relayInvalidUsage,
                       "rank %d: step %d of call #%llu: rank %d sends %llu bytes, this rank expects %llu (transfer %d "
                       "of %d from rank %d): counts differ between ranks",
                       me, comm->curStep, (unsigned long long)comm->callSeq, p, (unsigned long long)h->bytes,
                       (unsigned long long)x->bytes, index + 1, count, p);
}

/* Drain the ring p->me into the receives from p. */
static relayResult_t shmPull(struct relayComm* comm, shmState* st, int p, const relayXferDesc* recvs,
                             uint64_t* movedOut) {
  int n = comm->nranks, me = comm->rank;
  shmRingCtl* c = shmCtl(st, n, p, me);
  const unsigned char* d = shmData(st, n, p, me);
  uint64_t R = st->ringBytes, tail = st->recvTail[p], moved = 0, sincePublish = 0;
  shmPeerQ* q = &st->rq[p];
  relayResult_t res = relaySuccess;
  while (q->cur < q->end) {
    const relayXferDesc* x = &recvs[st->rorder[q->cur]];
    uint64_t total = SHM_HDR + x->bytes;
    uint64_t want = (q->pos < SHM_HDR ? SHM_HDR : total) - q->pos;
    uint64_t avail = st->recvHeadSeen[p] - tail;
    if (avail < want) {
      st->recvHeadSeen[p] = atomic_load_explicit(&c->head, memory_order_acquire);
      avail = st->recvHeadSeen[p] - tail;
    }
    if (avail == 0) break;
    uint64_t k = want < avail ? want : avail;
    if (q->pos < SHM_HDR) {
      shmRingGet(d, R, tail, (unsigned char*)&st->rhdr[p] + q->pos, (size_t)k);
    } else {
      if (k > st->chunk) k = st->chunk;
      shmRingGet(d, R, tail, (unsigned char*)x->ptr + (q->pos - SHM_HDR), (size_t)k);
    }
    tail += k;
    q->pos += k;
    moved += k;
    sincePublish += k;
    if (q->pos == SHM_HDR) {
      const shmXferHdr* h = &st->rhdr[p];
      if (h->magic != SHM_XFER_MAGIC || h->src != p || h->callSeq != comm->callSeq || h->step != comm->curStep ||
          h->bytes != x->bytes) {
        res = shmHdrMismatch(comm, p, h, x, q->cur - q->beg, q->end - q->beg);
        break;
      }
    }
    if (q->pos == total) {
      q->cur++;
      q->pos = 0;
    }
    if (sincePublish >= st->chunk) {
      atomic_store_explicit(&c->tail, tail, memory_order_release);
      shmWake(&st->slots[p]);
      sincePublish = 0;
    }
  }
  st->recvTail[p] = tail;
  if (sincePublish) {
    atomic_store_explicit(&c->tail, tail, memory_order_release);
    shmWake(&st->slots[p]);
  }
  *movedOut += moved;
  return res;
}

/* One pass over every peer with pending work; drops finished peers. */
static relayResult_t shmScan(struct relayComm* comm, shmState* st, const relayXferDesc* sends,
                             const relayXferDesc* recvs, uint64_t* moved) {
  for (int i = 0; i < st->nspend;) {
    int p = st->spend[i];
    *moved += shmPush(comm, st, p, sends);
    if (st->sq[p].cur == st->sq[p].end)
      st->spend[i] = st->spend[--st->nspend];
    else
      i++;
  }
  for (int i = 0; i < st->nrpend;) {
    int p = st->rpend[i];
    RELAY_CHECK(shmPull(comm, st, p, recvs, moved));
    if (st->rq[p].cur == st->rq[p].end)
      st->rpend[i] = st->rpend[--st->nrpend];
    else
      i++;
  }
  return relaySuccess;
}

static int shmPending(shmState* st, int p) {
  return st->sq[p].cur < st->sq[p].end || st->rq[p].cur < st->rq[p].end;
}

/* A peer we still wait on whose slot reports a failure (or, when checkPids,
 * whose process is gone); -1 when none. */
static int shmFindBadPeer(struct relayComm* comm, shmState* st, int checkPids, int* what) {
  for (int pass = 0; pass < 2; pass++) {
    int np = pass ? st->nrpend : st->nspend;
    const int* l = pass ? st->rpend : st->spend;
    for (int i = 0; i < np; i++) {
      int w = shmPeerState(comm, st, l[i]);
      if (w == SHM_PEER_OK && checkPids && shmPeerDead(st, l[i])) w = SHM_PEER_DEAD;
      if (w != SHM_PEER_OK) {
        *what = w;
        return l[i];
      }
    }
  }
  return -1;
}

static relayResult_t shmGroupTimeout(struct relayComm* comm, shmState* st, const relayXferDesc* sends,
                                     const relayXferDesc* recvs) {
  /* Name the lowest peer we wait on, receives first (they say what is late). */
  int p = -1, isRecv = 0;
  for (int i = 0; i < st->nrpend; i++)
    if (p < 0 || st->rpend[i] < p) p = st->rpend[i], isRecv = 1;
  if (p < 0)
    for (int i = 0; i < st->nspend; i++)
      if (p < 0 || st->spend[i] < p) p = st->spend[i];
  /* Other peers this rank still waits on (a peer can be in both lists). */
  int others = 0;
  memset(st->tmp, 0, (size_t)comm->nranks * sizeof(int));
  st->tmp[p] = 1;
  for (int i = 0; i < st->nspend; i++) others += !st->tmp[st->spend[i]]++;
  for (int i = 0; i < st->nrpend; i++) others += !st->tmp[st->rpend[i]]++;
  char what[160];
  if (isRecv) {
    const shmPeerQ* q = &st->rq[p];
    const relayXferDesc* x = &recvs[st->rorder[q->cur]];
    uint64_t got = q->pos > SHM_HDR ? q->pos - SHM_HDR : 0;
    snprintf(what, sizeof what, "recv %llu of %llu bytes", (unsigned long long)got, (unsigned long long)x->bytes);
  } else {
    const shmPeerQ* q = &st->sq[p];
    const relayXferDesc* x = &sends[st->sorder[q->cur]];
    uint64_t put = q->pos > SHM_HDR ? q->pos - SHM_HDR : 0;
    snprintf(what, sizeof what, "send %llu of %llu bytes", (unsigned long long)put, (unsigned long long)x->bytes);
  }
  return relaySetError(comm, relayTimeout,
                       "rank %d: step %d of call #%llu: no progress for %d ms waiting for rank %d (%s)%s%.0d%s",
                       comm->rank, comm->curStep, (unsigned long long)comm->callSeq, comm->cfg.timeoutMs, p, what,
                       others ? " and " : "", others, others == 1 ? " other rank" : others ? " other ranks" : "");
}

static relayResult_t shmGroupRun(struct relayComm* comm, shmState* st, const relayXferDesc* sends, int nSends,
                                 const relayXferDesc* recvs, int nRecvs) {
  int n = comm->nranks, me = comm->rank;
  for (int i = 0; i < nSends; i++)
    if (sends[i].peer < 0 || sends[i].peer >= n || (!sends[i].ptr && sends[i].bytes))
      return relaySetError(comm, relayInvalidArgument,
                           "rank %d: step %d of call #%llu: send %d has peer %d (nranks %d), ptr %p, %zu bytes", me,
                           comm->curStep, (unsigned long long)comm->callSeq, i, sends[i].peer, n, sends[i].ptr,
                           sends[i].bytes);
  for (int i = 0; i < nRecvs; i++)
    if (recvs[i].peer < 0 || recvs[i].peer >= n || (!recvs[i].ptr && recvs[i].bytes))
      return relaySetError(comm, relayInvalidArgument,
                           "rank %d: step %d of call #%llu: recv %d has peer %d (nranks %d), ptr %p, %zu bytes", me,
                           comm->curStep, (unsigned long long)comm->callSeq, i, recvs[i].peer, n, recvs[i].ptr,
                           recvs[i].bytes);
  RELAY_CHECK(shmGrowOrder(comm, st, nSends > nRecvs ? nSends : nRecvs));
  shmBucket(st, n, sends, nSends, st->sorder, st->sq, st->spend, &st->nspend, me);
  shmBucket(st, n, recvs, nRecvs, st->rorder, st->rq, st->rpend, &st->nrpend, me);

  /* To oneself: the k-th send pairs with the k-th receive. */
  shmPeerQ *ss = &st->sq[me], *rs = &st->rq[me];
  if (ss->end - ss->beg != rs->end - rs->beg)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: %d sends to itself but %d receives from itself", me,
                         comm->curStep, (unsigned long long)comm->callSeq, ss->end - ss->beg, rs->end - rs->beg);
  for (int k = 0; k < ss->end - ss->beg; k++) {
    const relayXferDesc* s = &sends[st->sorder[ss->beg + k]];
    const relayXferDesc* r = &recvs[st->rorder[rs->beg + k]];
    if (s->bytes != r->bytes)
      return relaySetError(comm, relayInvalidUsage,
                           "rank %d: step %d of call #%llu: transfer %d to itself sends %zu bytes but receives %zu", me,
                           comm->curStep, (unsigned long long)comm->callSeq, k + 1, s->bytes, r->bytes);
    if (s->bytes && s->ptr != r->ptr) memmove(r->ptr, s->ptr, s->bytes);
  }

  char where[96];
  shmWaiter w;
  shmWaiterInit(&w);
  for (;;) {
    uint32_t db = atomic_load_explicit(&st->slots[me].doorbell, memory_order_acquire);
    uint64_t moved = 0;
    RELAY_CHECK(shmScan(comm, st, sends, recvs, &moved));
    if (st->nspend + st->nrpend == 0) return relaySuccess;
    if (moved) {
      w.spins = 0;
      w.lastProgress = relayNowNs();
      continue;
    }
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "rank %d: step %d of call #%llu: the comm was aborted", me,
                           comm->curStep, (unsigned long long)comm->callSeq);
    int what = 0, bad = shmFindBadPeer(comm, st, w.spins >= comm->cfg.spinCount && shmLiveCheckDue(&w), &what);
    if (bad >= 0) {
      /* Whatever it wrote before it failed or died is visible now: drain it,
       * and fail only if we still need something from it. */
      RELAY_CHECK(shmScan(comm, st, sends, recvs, &moved));
      if (!shmPending(st, bad)) continue;
      snprintf(where, sizeof where, "step %d of call #%llu", comm->curStep, (unsigned long long)comm->callSeq);
      return shmPeerError(comm, st, bad, what, where);
    }
    if (shmPause(comm, st, &w, db)) return shmGroupTimeout(comm, st, sends, recvs);
  }
}

static relayResult_t shmGroup(struct relayComm* comm, const relayXferDesc* sends, int nSends,
                              const relayXferDesc* recvs, int nRecvs, relayStream_t stream) {
  (void)stream;
  shmState* st = shmStateOf(comm);
  if (nSends == 0 && nRecvs == 0 && !comm->failed) return relaySuccess;
  if (comm->failed)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: the comm failed in an earlier call; destroy it", comm->rank,
                         comm->curStep, (unsigned long long)comm->callSeq);
  if (nSends < 0 || nRecvs < 0 || (nSends && !sends) || (nRecvs && !recvs))
    return shmFail(comm, relaySetError(comm, relayInvalidArgument,
                                       "rank %d: step %d of call #%llu: group with %d sends (%p), %d recvs (%p)",
                                       comm->rank, comm->curStep, (unsigned long long)comm->callSeq, nSends,
                                       (const void*)sends, nRecvs, (const void*)recvs));
  relayResult_t res = shmGroupRun(comm, st, sends, nSends, recvs, nRecvs);
  return res == relaySuccess ? res : shmFail(comm, res);
}

/* ------------------------------------------------------------- agreement */

static relayResult_t shmAgreeRun(struct relayComm* comm, shmState* st, const void* mine, void* all, size_t bytes) {
  int n = comm->nranks, me = comm->rank;
  uint64_t round = ++st->agreeRound;
  /* Double-buffered by parity: a peer can write round+1's record while we
   * still read round's, and it cannot reach round+2 (same buffer) before we
   * published round+1, which we do only after reading round. */
  shmAgreeBuf* b = &st->slots[me].agree[round & 1];
  if (bytes) memcpy(b->data, mine, bytes);
  b->bytes = (uint32_t)bytes;
  atomic_store_explicit(&b->seq, round, memory_order_release);
  for (int q = 0; q < n; q++)
    if (q != me) shmWake(&st->slots[q]);
  if (bytes) memcpy((unsigned char*)all + (size_t)me * bytes, mine, bytes);

  /* The peers still awaited go in spend (the group lists are free here). */
  int* pend = st->spend;
  int np = 0;
  for (int q = 0; q < n; q++)
    if (q != me) pend[np++] = q;
  char where[96];
  snprintf(where, sizeof where, "agreement round %llu (call #%llu)", (unsigned long long)round,
           (unsigned long long)comm->callSeq);
  shmWaiter w;
  shmWaiterInit(&w);
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
                               "rank %d: %s: rank %d is already in round %llu: ranks disagree on the number of "
                               "agreements",
                               me, where, q, (unsigned long long)s);
        i++;
        continue;
      }
      if (pb->bytes != bytes)
        return relaySetError(comm, relayInvalidUsage, "rank %d: %s: rank %d agrees on %u bytes, this rank on %zu", me,
                             where, q, pb->bytes, bytes);
      if (bytes) memcpy((unsigned char*)all + (size_t)q * bytes, pb->data, bytes);
      pend[i] = pend[--np];
      got++;
    }
    if (np == 0) return relaySuccess;
    if (got) {
      w.spins = 0;
      w.lastProgress = relayNowNs();
      continue;
    }
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "rank %d: %s: the comm was aborted", me, where);
    int checkPids = w.spins >= comm->cfg.spinCount && shmLiveCheckDue(&w), rescan = 0;
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
      return shmPeerError(comm, st, q, what, where);
    }
    if (rescan) continue;
    if (shmPause(comm, st, &w, db)) {
      char miss[200];
      size_t o = 0;
      for (int i = 0; i < np && o + 16 < sizeof miss; i++)
        o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", i ? ", " : "", pend[i]);
      return relaySetError(comm, relayTimeout, "rank %d: %s: no progress for %d ms waiting for rank%s %s", me, where,
                           comm->cfg.timeoutMs, np > 1 ? "s" : "", miss);
    }
  }
}

static relayResult_t shmAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes) {
  shmState* st = shmStateOf(comm);
  if (comm->failed)
    return relaySetError(comm, relayInvalidUsage, "rank %d: agreement in call #%llu: the comm failed earlier; destroy it",
                         comm->rank, (unsigned long long)comm->callSeq);
  if (bytes > SHM_AGREE_MAX || (bytes && (!mine || !all)))
    return shmFail(comm, relaySetError(comm, relayInvalidArgument,
                                       "rank %d: agreement on %zu bytes (max %d), mine %p, all %p", comm->rank, bytes,
                                       SHM_AGREE_MAX, mine, all));
  relayResult_t res = shmAgreeRun(comm, st, mine, all, bytes);
  return res == relaySuccess ? res : shmFail(comm, res);
}

static relayResult_t shmBarrier(struct relayComm* comm) { return shmAgree(comm, NULL, NULL, 0); }

/* ------------------------------------------------------------ local ops */

static relayResult_t shmReduce(struct relayComm* comm, void* dst, const void* const* srcs, int nsrc, size_t count,
                               relayDataType_t dt, relayRedOp_t op, int divisor, int lane, relayStream_t stream) {
  (void)lane;
  (void)stream;
  if (relayTypeSize(dt) == 0 || (unsigned)op >= relayNumOps || nsrc < 1 || (count && (!dst || !srcs)))
    return relaySetError(comm, relayInvalidArgument,
                         "rank %d: step %d of call #%llu: reduce of %d inputs, %zu elements, dtype %d, op %d",
                         comm->rank, comm->curStep, (unsigned long long)comm->callSeq, nsrc, count, (int)dt, (int)op);
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

static relayResult_t shmScratch(struct relayComm* comm, int slot, size_t bytes, void** ptr, relayStream_t stream) {
  (void)stream;
  shmState* st = shmStateOf(comm);
  if (slot < 0 || !ptr)
    return relaySetError(comm, relayInvalidArgument, "rank %d: scratch slot %d, ptr %p", comm->rank, slot,
                         (void*)ptr);
  if (slot >= st->nscr) {
    int n = slot + 1;
    void** a = realloc(st->scr, (size_t)n * sizeof(void*));
    if (a) st->scr = a;
    size_t* b = a ? realloc(st->scrBytes, (size_t)n * sizeof(size_t)) : NULL;
    if (b) st->scrBytes = b;
    if (!a || !b) return relaySetError(comm, relaySystemError, "rank %d: out of memory for scratch slot %d", comm->rank, slot);
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
      return relaySetError(comm, relaySystemError, "rank %d: out of memory for %zu bytes of scratch (slot %d)",
                           comm->rank, sz, slot);
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

/* ------------------------------------------------- reject, abort, destroy */

static void shmReject(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->slots) return;
  atomic_store_explicit(&st->slots[comm->rank].rejectSeq, comm->callSeq + 1, memory_order_release);
  for (int q = 0; q < comm->nranks; q++)
    if (q != comm->rank) shmWake(&st->slots[q]);
}

/* Only atomics and futex syscalls: callable from another thread or a signal
 * handler while this rank sleeps in a wait. */
static void shmAbort(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->slots) return;
  atomic_store_explicit(&st->abortedLocal, 1, memory_order_seq_cst);
  shmSlot* s = &st->slots[comm->rank];
  if (atomic_exchange_explicit(&s->failClaim, 1, memory_order_acq_rel) == 0)
    atomic_store_explicit(&s->status, SHM_ABORTED, memory_order_release);
  for (int q = 0; q < comm->nranks; q++) {
    atomic_fetch_add_explicit(&st->slots[q].doorbell, 1, memory_order_seq_cst);
    shmFutex(&st->slots[q].doorbell, FUTEX_WAKE, INT_MAX, NULL);
  }
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
  shmStateFree(st);
  comm->tpState = NULL;
}

/* For the one-shot twin (shm_oneshot.c): the comm's agreed nonce, and what
 * is wrong with peer q (relaySuccess when nothing; dead-pid check included). */
uint64_t relayShmCommHash(struct relayComm* comm) { return shmStateOf(comm)->nonce; }

relayResult_t relayShmCheckPeer(struct relayComm* comm, int q, const char* where) {
  shmState* st = shmStateOf(comm);
  if (shmAborted(comm, st)) return relaySetError(comm, relayInvalidUsage, "rank %d: %s: the comm was aborted", comm->rank, where);
  int what = shmPeerState(comm, st, q);
  if (what == SHM_PEER_OK && shmPeerDead(st, q)) what = SHM_PEER_DEAD;
  return what == SHM_PEER_OK ? relaySuccess : shmPeerError(comm, st, q, what, where);
}

static const relayTransportOps relayShmOps = {
    .name = "shm",
    .group = shmGroup,
    .reduce = shmReduce,
    .copy = shmCopy,
    .scratch = shmScratch,
    .join = shmJoinLanes,
    .agree = shmAgree,
    .barrier = shmBarrier,
    .reject = shmReject,
    .abort = shmAbort,
    .destroy = shmDestroy,
    .oneshotPrepare = relayShmOneShotPrepare,
    .oneshot = relayShmOneShot,
};

/* ---------------------------------------------------------------- attach */

relayResult_t relayShmAttach(struct relayComm* comm, const char* jobName) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayShmAttach: comm is NULL");
  int n = comm->nranks, me = comm->rank;
  if (n < 1 || n > SHM_MAX_RANKS)
    return relaySetError(comm, relayInvalidArgument, "rank %d: nranks %d must be in [1, %d]", me, n, SHM_MAX_RANKS);
  if (me < 0 || me >= n)
    return relaySetError(comm, relayInvalidArgument, "rank %d is out of range for nranks %d", me, n);
  if (!jobName || !*jobName || strlen(jobName) > SHM_MAX_JOB || strchr(jobName, '/'))
    return relaySetError(comm, relayInvalidArgument,
                         "rank %d: job name %s%s%s must be 1 to %d characters without '/'", me, jobName ? "'" : "",
                         jobName ? jobName : "NULL", jobName ? "'" : "", SHM_MAX_JOB);
  long ring = comm->cfg.shmRingBytes;
  if (ring < SHM_MIN_RING || ring > (long)SHM_MAX_RING)
    return relaySetError(comm, relayInvalidArgument, "rank %d: shmRingBytes %ld must be in [%d, %u]", me, ring,
                         SHM_MIN_RING, SHM_MAX_RING);
  shmState* st = calloc(1, sizeof *st);
  if (!st) return relaySetError(comm, relaySystemError, "rank %d: out of memory for the shm transport", me);
  snprintf(st->job, sizeof st->job, "%s", jobName);
  snprintf(st->name, sizeof st->name, "/relaycc-%s", jobName);
  /* Ring sizes in whole cache lines keep every ring's data line-aligned. */
  st->ringBytes = shmAlignUp((size_t)ring, SHM_LINE);
  st->chunk = st->ringBytes / SHM_CHUNK_DIV;
  st->pidNs = shmPidNamespace();
  atomic_init(&st->abortedLocal, 0);
  shmLayout L;
  if (shmLayoutOf(n, st->ringBytes, &L) != 0) {
    free(st);
    return relaySetError(comm, relayInvalidArgument, "rank %d: %d ranks with %ld-byte rings overflow the address space",
                         me, n, ring);
  }
  size_t un = (size_t)n;
  st->pids = calloc(un, sizeof *st->pids);
  st->sendHead = calloc(un, sizeof(uint64_t));
  st->sendTailSeen = calloc(un, sizeof(uint64_t));
  st->recvTail = calloc(un, sizeof(uint64_t));
  st->recvHeadSeen = calloc(un, sizeof(uint64_t));
  st->sq = calloc(un, sizeof *st->sq);
  st->rq = calloc(un, sizeof *st->rq);
  st->rhdr = calloc(un, sizeof *st->rhdr);
  st->spend = calloc(un, sizeof(int));
  st->rpend = calloc(un, sizeof(int));
  st->tmp = calloc(un, sizeof(int));
  if (!st->pids || !st->sendHead || !st->sendTailSeen || !st->recvTail || !st->recvHeadSeen || !st->sq || !st->rq ||
      !st->rhdr || !st->spend || !st->rpend || !st->tmp) {
    shmStateFree(st);
    return relaySetError(comm, relaySystemError, "rank %d: out of memory for the shm transport", me);
  }
  relayResult_t res = me == 0 ? shmCreate(comm, st) : shmJoin(comm, st);
  if (res != relaySuccess) {
    shmStateFree(st);
    return res;
  }
  comm->tpState = st;
  comm->tp = &relayShmOps;
  return relaySuccess;
}
