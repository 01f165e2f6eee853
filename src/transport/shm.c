/*
 * The shared-memory transport: one process per rank on one host.
 *
 * One POSIX shared-memory segment per comm, named "/relaycc-<job>", holds
 *   - a header (magic, parameters, the creator's nonce and pid, go flag),
 *   - one slot per rank (doorbell word for futex waits, pid, check-in,
 *     failure status, rejected call, two agreement buffers),
 *   - per directed pair i->j (i != j): a small control ring (task headers)
 *     and one SPSC data ring per P2P channel, the pair's ringBytes split
 *     between the channels.
 * Its size is a pure function of (nranks, ringBytes, channels), so every rank
 * can check it before trusting a segment it found under the name.
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
 * Data goes through the P2P channel layer (src/p2p): a transfer (a "task")
 * to one peer is split into parts, part p on channel c(p) of a comm-wide
 * pool, both ends computing the same split alone (p2pTaskSplit with the
 * group's operation: the group call's p2pOp). The sender writes the task's header
 * {magic, src, step, index, callSeq, bytes, op, parts, want, need} on the
 * pair's control ring and each non-empty part, behind a part header, on the
 * data ring of its channel; each (pair, channel) ring has its own cursors, so
 * the parts of one task progress independently. The receiver checks a task's
 * header before it reads any of its parts -- counts that differ between ranks
 * become relayInvalidUsage instead of corruption or a hang -- and only then
 * waits on the task's channels, so ends that disagree on the channels never
 * wait on a ring the other never writes.
 *
 * Connections are lazy, per (peer, direction, channel), as in NCCL: a task
 * connects only the channels its parts use and that are not connected yet
 * ("need"). The sender connects its side (a flag in the ring's control
 * block), then ships (want, need) in the header; the receiver compares both
 * with its own (p2pConnAgree) and, when they agree, connects its side; a
 * mismatch is relayInvalidUsage naming the channels, never a wait.
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
#include "core/nodes.h"
#include "core/params.h"
#include "p2p/p2p.h"
#include "reduce_host.h"
#include "topo/topo.h"
#include "transport/shm_oneshot.h"
#include "transport/transport.h"

/* The segment is shared between processes: its atomics must be lock-free
 * (a lock-based atomic would lock a per-process table, not the memory). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm transport needs lock-free 32-bit atomics");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm transport needs lock-free 64-bit atomics");

#define SHM_LINE 64
#define SHM_MAGIC_READY 0x52434331u /* "RCC1": header initialized */
#define SHM_VERSION 3u /* 2: control ring + a data ring per P2P channel; 3: call marks, shapes and numbers in records */
#define SHM_TASK_MAGIC 0x54534b31u /* "TSK1": a task header on a control ring */
#define SHM_PART_MAGIC 0x50525431u /* "PRT1": a part header on a channel's ring */
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
/* A pair's control ring: 16 task headers of 64 bytes. A group rarely has more
 * than 2 transfers per peer; more just wait for the receiver to read ahead,
 * which it does before it touches any data. */
#define SHM_CTL_RING 1024u
/* Smallest data ring of one channel: rank 0 lowers the channel count until
 * every channel's ring has 1 KiB (a 4 KiB test ring: at most 4 channels). */
#define SHM_MIN_CHAN_RING 1024u

enum { SHM_OK = 0, SHM_FAILED = 1, SHM_ABORTED = 2, SHM_GONE = 3 };
/* What a wait found wrong with a peer. */
enum { SHM_PEER_OK = 0, SHM_PEER_FAILED, SHM_PEER_ABORTED, SHM_PEER_GONE, SHM_PEER_REJECTED, SHM_PEER_DEAD };

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint32_t magic; /* SHM_MAGIC_READY once the rest is valid */
  uint32_t version;
  uint32_t nranks;
  uint32_t ringBytes;
  uint32_t channels; /* P2P channel pool: data rings per pair */
  uint64_t totalBytes;
  uint64_t nonce;
  int32_t creatorPid;
  uint64_t creatorPidNs;       /* creatorPid means something only in this PID namespace */
  _Atomic uint32_t go;         /* rank 0 saw everyone arrive and unlinked the name */
  _Atomic uint32_t initFailed; /* rank 0 gave up init: relayResult_t + 1 */
  _Atomic uint32_t failSeen;   /* ranks that read initFailed from a marker segment */
  char failMsg[512];           /* rank 0's reason, written before initFailed */
} shmHeader;

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t seq; /* agreement round whose record this is */
  uint64_t call; /* the call it belongs to (comm->callSeq): rounds of two calls never pair */
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
  char failMsg[512];
  shmAgreeBuf agree[2]; /* by round parity */
} shmSlot;

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t head; /* bytes ever written (producer) */
  /* Data rings: the channel's connection, SHM_CONN_SEND set by the sender,
   * SHM_CONN_RECV by the receiver, each once (lazily, by the first task that
   * uses the channel). */
  _Atomic uint32_t conn;
  _Alignas(SHM_LINE) _Atomic uint64_t tail; /* bytes ever consumed (consumer) */
} shmRingCtl;
enum { SHM_CONN_SEND = 1, SHM_CONN_RECV = 2 };

/* 64 bytes on the control ring per transfer (task). */
typedef struct {
  uint32_t magic;
  int32_t src;
  int32_t step;
  uint32_t index; /* k-th transfer from src to this rank in the group */
  uint64_t callSeq;
  uint64_t bytes;
  uint16_t op;     /* p2pOp the sender split it with */
  /* 1 + the rank that passed a bad buffer in this call and runs it through
   * scratch, as far as the sender knows (comm->callMark; 0: none; ranks <=
   * SHM_MAX_RANKS fit). A rank that receives it carries it on in its own
   * later sends of the call, so every rank whose data depends on that rank's,
   * directly or through a relay, returns the error. */
  uint16_t mark;
  uint32_t nParts;
  uint64_t want;   /* the channels its parts use */
  uint64_t need;   /* of those, the ones the sender connected for it */
  /* The digest of the sender's call shape (comm->callShape): counts that
   * differ in a block this pair does not move (a scatter root's offsets)
   * still differ here, so check mode 0 gives an error, not misplaced data. */
  uint64_t shape;
} shmTaskHdr;
_Static_assert(sizeof(shmTaskHdr) == 64, "task header is 64 bytes");
#define SHM_THDR ((uint64_t)sizeof(shmTaskHdr))

/* 32 bytes on a channel's ring before each non-empty part: a check that both
 * ends walk the channel's parts in the same order. */
typedef struct {
  uint32_t magic;
  int32_t src;
  uint32_t index; /* the task */
  uint32_t part;
  uint64_t callSeq;
  uint64_t len;
} shmPartHdr;
_Static_assert(sizeof(shmPartHdr) == 32, "part header is 32 bytes");
#define SHM_PHDR ((uint64_t)sizeof(shmPartHdr))

/* One peer's transfers in one direction of a group. */
typedef struct {
  int beg, end;      /* order[beg..end) */
  int ctl;           /* tasks whose header is written (send) / checked (recv) */
  uint64_t chanMask; /* channels with parts still to move */
} shmPeerQ;

/* One (peer, channel) ring's progress: the part it moves now. */
typedef struct {
  int cur;      /* order index of the task, end when none is left */
  int part;     /* which part of that task is on this channel */
  uint64_t pos; /* bytes of it done, part header included */
} shmChanQ;

typedef struct {
  char name[SHM_MAX_JOB + 32];
  char job[SHM_MAX_JOB + 1];
  char launch[160]; /* what tells this launch apart (shmLaunchIdentity), for messages */
  void* base;
  size_t size;
  shmHeader* hdr;
  shmSlot* slots;
  shmRingCtl* ctl;     /* [n*(n-1)][channels + 1]: control ring, then channel rings */
  unsigned char* data; /* [n*(n-1)][pairBytes] */
  uint64_t ringBytes;  /* a pair's data rings together */
  int channels;        /* P2P channel pool: data rings per pair (rank 0's, from the header) */
  uint64_t chanBytes, pairBytes, chunk; /* chunk: of a channel's ring */
  uint64_t nonce;
  int wantChannels;     /* this rank's RELAYCC_NCHANNELS (rank 0's decides) */
  int32_t deadCreator; /* pid of a dead rank 0 whose segment we found (for messages) */
  int openErrno;       /* last shm_open failure of a joiner (for messages) */
  uint64_t conflictSince; /* when a joiner first met a live segment it cannot join */
  int32_t* pids;       /* [n], from check-in; 0 where a peer's pid is not ours to check */
  uint64_t pidNs;      /* our PID namespace (0: unknown) */
  atomic_int abortedLocal;
  uint64_t agreeRound;
  /* Producer/consumer cursors, [n][channels + 1] (ring 0: control): we own
   * head of rings me->p and tail of p->me. */
  uint64_t *sendHead, *sendTailSeen, *recvTail, *recvHeadSeen;
  /* The P2P channel layer: comm-wide pool and parts (built at the first
   * group, when the comm's topology is loaded), this rank's connections. */
  int p2pReady;
  p2pComm p2p;
  p2pConnTable conn;
  uint64_t* connStore;   /* [2n] */
  uint64_t connected[2]; /* channels connected over the comm's life, by p2pDir */
  /* Per-group work, grown as needed. */
  int groupOp;         /* the running group's p2pOp: both ends' headers carry it */
  shmPeerQ *sq, *rq;   /* [n] */
  shmChanQ *sch, *rch; /* [n][channels] */
  shmPartHdr* rphdr;   /* [n][channels]: part header being received */
  int *sorder, *rorder; /* transfer indices grouped by peer */
  int orderCap;
  /* Per transfer (index into the group's sends / recvs): its split. */
  p2pPart *spart, *rpart; /* [orderCap][perPeer] */
  int *snpart, *rnpart;
  uint64_t *swant, *sneed, *rwant;
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

/* Layout: [header: 4096][slots][ring ctl][pad 4096][ring data]; a pair's
 * data is its control ring then its channels' rings. Pure function of
 * (n, ring, channels) so every rank can check a segment's size. */
typedef struct {
  size_t slots, ctl, data, total;
  uint64_t chanBytes, pairBytes;
} shmLayout;

static int shmLayoutOf(int n, uint64_t ring, int channels, shmLayout* L) {
  size_t pairs = (size_t)n * (size_t)(n - 1);
  if (channels < 1 || channels > P2P_MAX_CHANNELS) return -1;
  /* Whole lines keep every ring line-aligned. */
  L->chanBytes = ring / (uint64_t)channels / SHM_LINE * SHM_LINE;
  if (L->chanBytes == 0) return -1;
  L->pairBytes = SHM_CTL_RING + L->chanBytes * (uint64_t)channels;
  L->slots = 4096;
  L->ctl = shmAlignUp(L->slots + (size_t)n * sizeof(shmSlot), SHM_LINE);
  L->data = shmAlignUp(L->ctl + pairs * (size_t)(channels + 1) * sizeof(shmRingCtl), 4096);
  if (pairs && L->pairBytes > (SIZE_MAX - L->data) / pairs) return -1;
  L->total = L->data + pairs * (size_t)L->pairBytes;
  return 0;
}

/* Channels rank 0 gives a pair of ringBytes: the wanted count rounded up to a
 * power of two (the layer's pools are), lowered until every channel's ring
 * holds SHM_MIN_CHAN_RING. */
static int shmChannelsFor(int wanted, uint64_t ring) {
  int c = 1;
  while (c < wanted && c < P2P_MAX_CHANNELS) c <<= 1;
  while (c > 1 && ring / (uint64_t)c < SHM_MIN_CHAN_RING) c >>= 1;
  return c;
}

static size_t shmPair(int n, int src, int dst) {
  return (size_t)src * (size_t)(n - 1) + (size_t)(dst < src ? dst : dst - 1);
}
/* Ring r of the pair src -> dst: 0 the control ring, 1 + c channel c's. */
static shmRingCtl* shmCtl(shmState* st, int n, int src, int dst, int r) {
  return &st->ctl[shmPair(n, src, dst) * (size_t)(st->channels + 1) + (size_t)r];
}
static unsigned char* shmData(shmState* st, int n, int src, int dst, int r) {
  unsigned char* b = st->data + shmPair(n, src, dst) * st->pairBytes;
  return r == 0 ? b : b + SHM_CTL_RING + (size_t)(r - 1) * st->chanBytes;
}
/* Index of our cursors of ring r with peer p. */
static size_t shmCur(const shmState* st, int p, int r) { return (size_t)p * (size_t)(st->channels + 1) + (size_t)r; }

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
static const relayTransportOps relayShmOps;

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

/* A live segment we cannot join (other nranks or ring size, or our rank held
 * by a live pid) is an error only if it stays SHM_CONFLICT_MS: an old run's
 * rank 0 that still lives (hung, being killed) leaves one that our rank 0
 * replaces within milliseconds of starting. */
static int shmConflictPersists(shmState* st) {
  uint64_t now = relayNowNs();
  if (!st->conflictSince) st->conflictSince = now;
  return now - st->conflictSince >= (uint64_t)SHM_CONFLICT_MS * 1000000ull;
}

/* What is under the name: the pid of a live process other than us whose
 * rendezvous is open there (its segment initialized, no go, no failure),
 * -1 for a segment not initialized (yet), 0 for anything else. */
static int32_t shmOpenRendezvousHolder(shmState* st) {
  int fd = shm_open(st->name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct stat sb;
  int32_t holder = -1;
  if (fstat(fd, &sb) == 0 && (size_t)sb.st_size >= sizeof(shmHeader)) {
    shmHeader* h = mmap(NULL, sizeof(shmHeader), PROT_READ, MAP_SHARED, fd, 0);
    if (h != MAP_FAILED) {
      if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC_READY)
        holder = -1;
      else if (h->version == SHM_VERSION &&
          h->creatorPidNs == st->pidNs && h->creatorPid != (int32_t)getpid() && shmPidAlive(h->creatorPid) &&
          !atomic_load_explicit(&h->go, memory_order_acquire) &&
          !atomic_load_explicit(&h->initFailed, memory_order_acquire))
        holder = h->creatorPid;
      else
        holder = 0;
      munmap(h, sizeof(shmHeader));
    }
  }
  close(fd);
  return holder;
}

static relayResult_t shmCreate(struct relayComm* comm, shmState* st) {
  int n = comm->nranks;
  uint64_t t0 = relayNowNs(), limit = (uint64_t)comm->cfg.timeoutMs * 1000000ull;
  uint64_t wanted = st->ringBytes;
  shmLayout lay, *L = &lay;
  int fd = -1;
  relayResult_t res = relaySuccess;
retry:
  st->channels = shmChannelsFor(st->wantChannels, st->ringBytes);
  /* relayShmAttach checked the largest ring; a halved one can only fail here if SHM_FALLBACK_RING were
   * below a line per channel. Checking also tells a Release build that *L is set (gcc -O2 warned). */
  if (shmLayoutOf(n, st->ringBytes, st->channels, L) != 0)
    return relaySetError(comm, relayInternalError, "no shm layout for %d ranks, %llu-byte ring, "
                         "%d channels", n, (unsigned long long)st->ringBytes, st->channels);
  for (;;) {
    fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || relayNowNs() - t0 > limit)
      return relaySetError(comm, relaySystemError, "shm_open(%s) failed: %s", st->name, strerror(errno));
    /* The name is this launch's (relayShmSegmentName): a live rank 0 whose
     * rendezvous is still open under it is a second rank 0 of this launch,
     * refused once it stays SHM_CONFLICT_MS (it may be finishing). Anything
     * else is a crashed run's leftover (rank 0 is the only creator): ranks
     * that mapped it keep valid memory and re-attach when they see the name
     * resolve to our inode instead. A segment not initialized yet may be a
     * second rank 0's between its create and its header: it gets the same
     * window, then counts as garbage. */
    int32_t holder = shmOpenRendezvousHolder(st);
    if (holder != 0 && !shmConflictPersists(st)) {
      shmNap(SHM_INIT_POLL_MS);
      continue;
    }
    if (holder > 0)
      return relaySetError(comm, relayInvalidUsage,
                           "rendezvous of job '%s' (launch: %s): rank 0 is already taken by pid %d, whose "
                           "rendezvous is still open (two processes with rank 0, or two jobs that nothing tells "
                           "apart: give each its own name)",
                           st->job, st->launch, (int)holder);
    shm_unlink(st->name);
  }
  if (ftruncate(fd, (off_t)L->total) != 0) {
    res = relaySetError(comm, relaySystemError, "sizing shm segment %s to %zu bytes failed: %s", st->name,
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
                        "shm segment %s needs %zu bytes (%d ranks, ring %llu bytes per pair in %d channels, "
                        "after halving from %llu) and /dev/shm has no room: lower RELAYCC_SHM_RING_BYTES, enlarge "
                        "/dev/shm or use fewer ranks",
                        st->name, L->total, n, (unsigned long long)st->ringBytes, st->channels,
                        (unsigned long long)wanted);
    goto fail;
  }
  if (st->ringBytes != wanted)
    fprintf(stderr,
            "relaycc: rank 0: /dev/shm has no room for %llu-byte rings at %d ranks; using %llu-byte rings "
            "(enlarge /dev/shm or set RELAYCC_SHM_RING_BYTES)\n",
            (unsigned long long)wanted, n, (unsigned long long)st->ringBytes);
  st->chanBytes = L->chanBytes;
  st->pairBytes = L->pairBytes;
  st->chunk = st->chanBytes / SHM_CHUNK_DIV;
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
  st->hdr->channels = (uint32_t)st->channels;
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
      res = relaySetError(comm, relayRemoteError, "init of job '%s': rank %d (pid %d) checked in and died",
                          st->job, dead, (int)atomic_load(&st->slots[dead].pid));
      goto failMapped;
    }
    if (shmAborted(comm, st)) {
      res = relaySetError(comm, relayInvalidUsage, "init of job '%s' aborted", st->job);
      goto failMapped;
    }
    if (relayNowNs() - t0 >= limit) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      res = relaySetError(comm, relayTimeout,
                          "init of job '%s' (%d ranks): timed out after %d ms waiting for %s to arrive",
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
  /* The ring size and the channels are rank 0's (it may have shrunk the
   * ring to fit /dev/shm, and the channels with it). */
  shmLayout L;
  uint64_t ring = h->ringBytes;
  int channels = (int)h->channels;
  int ringOk = ring >= SHM_MIN_RING && ring <= SHM_MAX_RING && ring % SHM_LINE == 0 && channels >= 1 &&
               channels <= P2P_MAX_CHANNELS && shmChannelsFor(channels, ring) == channels &&
               shmLayoutOf(n, ring, channels, &L) == 0 && (size_t)sb.st_size == L.total;
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
  st->channels = channels;
  st->chanBytes = L.chanBytes;
  st->pairBytes = L.pairBytes;
  st->chunk = L.chanBytes / SHM_CHUNK_DIV;
  shmSetPointers(st, &L);
  st->nonce = st->hdr->nonce;
  shmSlot* mine = &st->slots[me];
  int32_t holder = atomic_load_explicit(&mine->pid, memory_order_acquire);
  if (holder != 0 && holder != (int32_t)getpid()) {
    if ((mine->pidNs != st->pidNs || shmPidAlive(holder)) && shmConflictPersists(st)) {
      shmUnmap(st);
      *res = relaySetError(comm, relayInvalidUsage,
                           "rank %d: rendezvous of job '%s' (launch: %s): rank %d is already taken by pid %d (two "
                           "processes with one rank, or two jobs that nothing tells apart: give each its own name)",
                           me, st->job, st->launch, me, (int)holder);
      return -1;
    }
    shmUnmap(st); /* an old run's segment: wait for rank 0 to replace it */
    return 0;
  }
  dev_t dev = sb.st_dev;
  ino_t ino = sb.st_ino;
  /* Claim the slot atomically: of two processes with this rank that come
   * together, exactly one gets it; the other sees it taken on its retry. */
  if (!atomic_compare_exchange_strong_explicit(&mine->pid, &holder, (int32_t)getpid(), memory_order_acq_rel,
                                               memory_order_acquire)) {
    shmUnmap(st);
    return 0;
  }
  mine->pidNs = st->pidNs;
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
  free(st->connStore);
  free(st->spend);
  free(st->rpend);
  free(st->tmp);
  free(st);
}

/* ------------------------------------------------------------------ group */

/* The P2P channel layer's comm-wide facts, built at the first group: by then
 * the comm's topology is loaded, whose direct links per local pair set the
 * parts per peer (the cpu preset has none: 2 parts, p2pWantedLocal(0)). The
 * pool is the segment's channel count, rank 0's, so every rank has it. */
static relayResult_t shmP2pInit(struct relayComm* comm, shmState* st) {
  if (st->p2pReady) return relaySuccess;
  /* The comm's node map (src/core/nodes.c: RELAYCC_NODE_ID, or the test hook
   * RELAYCC_SHM_NODES), the same on every rank, so both ends of a pair split
   * alike. The layer's part rules assume equal node-major nodes; any other
   * map gets the one-node rules. */
  int n = comm->nranks;
  int nodes = relayNodesRegular(comm->nodeOf, n, comm->nNodes) ? comm->nNodes : 1, G = n / nodes;
  p2pTopoDesc d;
  memset(&d, 0, sizeof d);
  d.nNodes = nodes;
  d.localRanks = G;
  d.netsByBw = 1;
  d.userPerNetPeer = (int)relayParamInt(comm, RELAY_P_NCHANNELS_PER_NET_PEER);
  d.nChannels = st->channels;
  d.poolCap = st->channels;
  int* links = NULL;
  const struct relayTopo* t = comm->topo;
  if (t) {
    /* Local pair (i, j) of every node is comm ranks i, j of node 0; ranks
     * beyond the topology's GPUs have no direct links. */
    links = calloc((size_t)G * (size_t)G, sizeof *links);
    if (!links) return relaySetError(comm, relaySystemError, "rank %d: out of memory for the p2p layer", comm->rank);
    for (int i = 0; i < G && i < t->nGPUs; i++)
      for (int j = 0; j < G && j < t->nGPUs; j++)
        if (i != j) links[i * G + j] = t->linkCount[i * t->nGPUs + j];
    d.localLinks = links;
  }
  char err[256];
  relayResult_t res = p2pCommFromTopo(&d, &st->p2p, err, sizeof err);
  free(links);
  if (res != relaySuccess)
    return relaySetError(comm, relayInternalError, "rank %d: the p2p channel layer: %s", comm->rank, err);
  st->connStore = calloc((size_t)n * 2, sizeof *st->connStore);
  if (!st->connStore) return relaySetError(comm, relaySystemError, "rank %d: out of memory for the p2p layer", comm->rank);
  p2pConnInit(&st->conn, n, st->connStore);
  st->p2pReady = 1;
  return relaySuccess;
}

static relayResult_t shmGrowOrder(struct relayComm* comm, shmState* st, int need) {
  if (need <= st->orderCap) return relaySuccess;
  int cap = st->orderCap ? st->orderCap : 64;
  while (cap < need) cap *= 2;
  size_t P = (size_t)st->p2p.perPeer, c = (size_t)cap;
  int ok = 1;
#define SHM_GROW(field, count)                                   \
  do {                                                           \
    void* g_ = realloc(st->field, (count) * sizeof *st->field);  \
    if (g_) st->field = g_;                                      \
    else ok = 0;                                                 \
  } while (0)
  SHM_GROW(sorder, c);
  SHM_GROW(rorder, c);
  SHM_GROW(spart, c * P);
  SHM_GROW(rpart, c * P);
  SHM_GROW(snpart, c);
  SHM_GROW(rnpart, c);
  SHM_GROW(swant, c);
  SHM_GROW(sneed, c);
  SHM_GROW(rwant, c);
#undef SHM_GROW
  if (!ok)
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
    q[p].beg = q[p].ctl = at;
    at += cnt[p];
    q[p].end = at;
    q[p].chanMask = 0;
    cnt[p] = q[p].beg;
    if (p != me && q[p].end > q[p].beg) pend[(*npend)++] = p;
  }
  for (int i = 0; i < nx; i++) order[cnt[x[i].peer]++] = i;
}

/* The first task at or after order index `from` with a non-empty part on
 * channel c (a task has at most one part per channel); end when none. */
static int shmChanNext(const shmState* st, const int* order, const int* npart, const p2pPart* parts, int c, int from,
                       int end, int* part) {
  size_t P = (size_t)st->p2p.perPeer;
  for (int t = from; t < end; t++) {
    int i = order[t];
    for (int k = 0; k < npart[i]; k++) {
      const p2pPart* pp = &parts[(size_t)i * P + (size_t)k];
      if (pp->channel == c && pp->len) {
        *part = k;
        return t;
      }
    }
  }
  return end;
}

/* Split every task to or from peer p (both ends call p2pTaskSplit with the
 * same operation, sender and receiver, so they get the same parts), and set
 * up one queue per channel that carries any. */
static void shmSplitPeer(shmState* st, int op, int me, int p, int isSend, const relayXferDesc* x) {
  shmPeerQ* q = isSend ? &st->sq[p] : &st->rq[p];
  const int* order = isSend ? st->sorder : st->rorder;
  p2pPart* parts = isSend ? st->spart : st->rpart;
  int* npart = isSend ? st->snpart : st->rnpart;
  uint64_t* want = isSend ? st->swant : st->rwant;
  size_t P = (size_t)st->p2p.perPeer;
  for (int t = q->beg; t < q->end; t++) {
    int i = order[t];
    p2pPart* pp = &parts[(size_t)i * P];
    int np = p2pTaskSplit(&st->p2p, (p2pOp)op, isSend ? me : p, isSend ? p : me, x[i].bytes, 0, pp);
    npart[i] = np;
    /* The channels of all parts, empty ones too (connections do not depend
     * on sizes): p2pTaskMask, without computing the base again. */
    uint64_t w = 0;
    for (int k = 0; k < np; k++) {
      w |= 1ull << pp[k].channel;
      if (pp[k].len) q->chanMask |= 1ull << pp[k].channel;
    }
    want[i] = w;
  }
  shmChanQ* cq = isSend ? &st->sch[(size_t)p * (size_t)st->channels] : &st->rch[(size_t)p * (size_t)st->channels];
  for (int c = 0; c < st->channels; c++) {
    if (!(q->chanMask & (1ull << c))) continue;
    cq[c].cur = shmChanNext(st, order, npart, parts, c, q->beg, q->end, &cq[c].part);
    cq[c].pos = 0;
  }
}

/* Connect our side of the channels in `need` with peer p (dir: which side we
 * are): a flag in each channel ring's control block, set once. A flag
 * already set means the two ends' tables diverged from the segment. */
static relayResult_t shmConnect(struct relayComm* comm, shmState* st, int p, p2pDir dir, uint64_t need) {
  int n = comm->nranks, me = comm->rank;
  uint32_t bit = dir == P2P_DIR_SEND ? SHM_CONN_SEND : SHM_CONN_RECV;
  for (int c = 0; c < st->channels; c++) {
    if (!(need & (1ull << c))) continue;
    shmRingCtl* rc = dir == P2P_DIR_SEND ? shmCtl(st, n, me, p, 1 + c) : shmCtl(st, n, p, me, 1 + c);
    uint32_t was = atomic_fetch_or_explicit(&rc->conn, bit, memory_order_relaxed);
    if (was & bit)
      return relaySetError(comm, relayInternalError,
                           "rank %d: step %d of call #%llu: channel %d %s rank %d was connected twice", me,
                           comm->curStep, (unsigned long long)comm->callSeq, c, dir == P2P_DIR_SEND ? "to" : "from", p);
    /* The sender connects first and publishes the task header after it (a
     * release on the control ring's head): the receiver must see its flag. */
    if (dir == P2P_DIR_RECV && !(was & SHM_CONN_SEND))
      return relaySetError(comm, relayInternalError,
                           "rank %d: step %d of call #%llu: rank %d announced channel %d without connecting it", me,
                           comm->curStep, (unsigned long long)comm->callSeq, p, c);
  }
  p2pConnCommit(&st->conn, p, dir, need);
  st->connected[dir] += (uint64_t)__builtin_popcountll(need);
  return relaySuccess;
}

/* Sender: the tasks' wants and needs, in per-peer order (the receiver
 * computes its needs in the same order as it checks the headers), and our
 * side of the channels connected now. */
static relayResult_t shmSendConnect(struct relayComm* comm, shmState* st, int p) {
  shmPeerQ* q = &st->sq[p];
  for (int t = q->beg; t < q->end; t++) {
    int i = st->sorder[t];
    uint64_t need = p2pConnNeed(&st->conn, p, P2P_DIR_SEND, st->swant[i]);
    st->sneed[i] = need;
    if (need) RELAY_CHECK(shmConnect(comm, st, p, P2P_DIR_SEND, need));
  }
  return relaySuccess;
}

/* Stream what fits of one ring: header bytes from hdr, then payload bytes
 * from data, resuming at *pos. Returns bytes moved; publishes (and wakes the
 * peer) every chunk and at the end. */
static uint64_t shmPutStream(shmState* st, int p, size_t cur, shmRingCtl* c, unsigned char* d, uint64_t R,
                             const void* hdr, uint64_t hdrBytes, const unsigned char* data, uint64_t total,
                             uint64_t* pos, uint64_t* sincePublish) {
  uint64_t head = st->sendHead[cur], moved = 0;
  while (*pos < total) {
    uint64_t room = R - (head - st->sendTailSeen[cur]);
    if (room < total - *pos) {
      st->sendTailSeen[cur] = atomic_load_explicit(&c->tail, memory_order_acquire);
      room = R - (head - st->sendTailSeen[cur]);
    }
    if (room == 0) break;
    uint64_t k;
    if (*pos < hdrBytes) {
      k = hdrBytes - *pos;
      if (k > room) k = room;
      shmRingPut(d, R, head, (const unsigned char*)hdr + *pos, (size_t)k);
    } else {
      k = total - *pos;
      if (k > room) k = room;
      if (k > st->chunk) k = st->chunk;
      shmRingPut(d, R, head, data + (*pos - hdrBytes), (size_t)k);
    }
    head += k;
    *pos += k;
    moved += k;
    *sincePublish += k;
    if (*sincePublish >= st->chunk) {
      atomic_store_explicit(&c->head, head, memory_order_release);
      shmWake(&st->slots[p]);
      *sincePublish = 0;
    }
  }
  st->sendHead[cur] = head;
  return moved;
}

/* Everything that fits toward peer p: task headers on the control ring, then
 * each channel's parts (a part only after its task's header). */
static uint64_t shmPush(struct relayComm* comm, shmState* st, int p, const relayXferDesc* sends) {
  int n = comm->nranks, me = comm->rank;
  shmPeerQ* q = &st->sq[p];
  uint64_t moved = 0;
  if (q->ctl < q->end) {
    size_t cur = shmCur(st, p, 0);
    shmRingCtl* c = shmCtl(st, n, me, p, 0);
    unsigned char* d = shmData(st, n, me, p, 0);
    uint64_t head = st->sendHead[cur];
    while (q->ctl < q->end) {
      if (SHM_CTL_RING - (head - st->sendTailSeen[cur]) < SHM_THDR) {
        st->sendTailSeen[cur] = atomic_load_explicit(&c->tail, memory_order_acquire);
        if (SHM_CTL_RING - (head - st->sendTailSeen[cur]) < SHM_THDR) break;
      }
      int i = st->sorder[q->ctl];
      shmTaskHdr h = {SHM_TASK_MAGIC, me, comm->curStep, (uint32_t)(q->ctl - q->beg), comm->callSeq, sends[i].bytes,
                      (uint16_t)st->groupOp, (uint16_t)(comm->callMark + 1), (uint32_t)st->snpart[i],
                      st->swant[i], st->sneed[i], comm->callShape};
      shmRingPut(d, SHM_CTL_RING, head, &h, sizeof h);
      head += SHM_THDR;
      moved += SHM_THDR;
      q->ctl++;
    }
    if (head != st->sendHead[cur]) {
      st->sendHead[cur] = head;
      atomic_store_explicit(&c->head, head, memory_order_release);
      shmWake(&st->slots[p]);
    }
  }
  size_t P = (size_t)st->p2p.perPeer;
  shmChanQ* cqs = &st->sch[(size_t)p * (size_t)st->channels];
  for (uint64_t m = q->chanMask; m; m &= m - 1) {
    int ch = __builtin_ctzll(m);
    shmChanQ* cq = &cqs[ch];
    size_t cur = shmCur(st, p, 1 + ch);
    shmRingCtl* c = shmCtl(st, n, me, p, 1 + ch);
    unsigned char* d = shmData(st, n, me, p, 1 + ch);
    uint64_t sincePublish = 0;
    while (cq->cur < q->ctl) {
      int i = st->sorder[cq->cur];
      const p2pPart* pp = &st->spart[(size_t)i * P + (size_t)cq->part];
      shmPartHdr h = {SHM_PART_MAGIC, me, (uint32_t)(cq->cur - q->beg), (uint32_t)cq->part, comm->callSeq, pp->len};
      moved += shmPutStream(st, p, cur, c, d, st->chanBytes, &h, SHM_PHDR,
                            (const unsigned char*)sends[i].ptr + pp->off, SHM_PHDR + pp->len, &cq->pos,
                            &sincePublish);
      if (cq->pos < SHM_PHDR + pp->len) break; /* the ring is full */
      cq->pos = 0;
      cq->cur = shmChanNext(st, st->sorder, st->snpart, st->spart, ch, cq->cur + 1, q->end, &cq->part);
    }
    if (sincePublish) {
      atomic_store_explicit(&c->head, st->sendHead[cur], memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (cq->cur == q->end) q->chanMask &= ~(1ull << ch);
  }
  return moved;
}

/* The header of task k from p disagrees with our transfer x: say how. */
static relayResult_t shmHdrMismatch(struct relayComm* comm, int p, const shmTaskHdr* h, const relayXferDesc* x,
                                    int index, int count) {
  int me = comm->rank;
  if (h->magic != SHM_TASK_MAGIC || h->src != p || h->index != (uint32_t)index)
    return relaySetError(comm, relayInternalError,
                         "rank %d: step %d of call #%llu: corrupt stream from rank %d (magic %#x, src %d, task %u of "
                         "%d expected %d)",
                         me, comm->curStep, (unsigned long long)comm->callSeq, p, h->magic, h->src, h->index, count,
                         index);
  if (h->callSeq != comm->callSeq || h->step != comm->curStep)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: rank %d sent a transfer from step %d of call #%llu: ranks "
                         "disagree on the sequence of calls or on their plans",
                         me, comm->curStep, (unsigned long long)comm->callSeq, p, h->step,
                         (unsigned long long)h->callSeq);
  if (h->shape != comm->callShape)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: rank %d's call has another shape (digest %016llx, this "
                         "rank's %016llx): ranks disagree on the collective, layout, counts, datatype, op or root",
                         me, comm->curStep, (unsigned long long)comm->callSeq, p, (unsigned long long)h->shape,
                         (unsigned long long)comm->callShape);
  if (h->bytes != x->bytes)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: rank %d sends %llu bytes, this rank expects %llu (transfer %d "
                         "of %d from rank %d): counts differ between ranks",
                         me, comm->curStep, (unsigned long long)comm->callSeq, p, (unsigned long long)h->bytes,
                         (unsigned long long)x->bytes, index + 1, count, p);
  return relaySetError(comm, relayInvalidUsage,
                       "rank %d: step %d of call #%llu: rank %d sends a %s transfer, this rank expects %s (transfer %d "
                       "of %d from rank %d): ranks disagree on the collective",
                       me, comm->curStep, (unsigned long long)comm->callSeq, p, p2pOpName((p2pOp)h->op),
                       p2pOpName((p2pOp)shmStateOf(comm)->groupOp), index + 1, count, p);
}

/* Do the fixed fields of task k's header from p match our transfer x? */
static int shmHdrOk(struct relayComm* comm, int p, const shmTaskHdr* h, const relayXferDesc* x, int index) {
  return h->magic == SHM_TASK_MAGIC && h->src == p && h->index == (uint32_t)index && h->callSeq == comm->callSeq &&
         h->step == comm->curStep && h->bytes == x->bytes && h->op == (uint16_t)shmStateOf(comm)->groupOp &&
         h->shape == comm->callShape;
}

/* Task t's header from p matched our transfer: check that both ends split it
 * onto the same channels and have the same ones still to connect, then
 * connect our side. Nothing of its data is read before this passes. */
static relayResult_t shmTaskAccept(struct relayComm* comm, shmState* st, int p, const shmTaskHdr* h, int t) {
  shmPeerQ* q = &st->rq[p];
  int i = st->rorder[t], index = t - q->beg, count = q->end - q->beg;
  char agree[640];
  uint64_t want = st->rwant[i];
  if (h->mark && comm->callMark < 0 && h->mark <= comm->nranks) comm->callMark = (int)h->mark - 1;
  const char* what = NULL;
  if (p2pConnAgree(h->want, want, p, comm->rank, agree, sizeof agree)) {
    what = "the channels its parts use";
  } else {
    uint64_t need = p2pConnNeed(&st->conn, p, P2P_DIR_RECV, want);
    if (p2pConnAgree(h->need, need, p, comm->rank, agree, sizeof agree)) what = "the channels still to connect";
    else if (need) RELAY_CHECK(shmConnect(comm, st, p, P2P_DIR_RECV, need));
  }
  if (what)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d: step %d of call #%llu: transfer %d of %d from rank %d (%s, %u parts sent, %d "
                         "expected): %s: %s",
                         comm->rank, comm->curStep, (unsigned long long)comm->callSeq, index + 1, count, p,
                         p2pOpName((p2pOp)h->op), h->nParts, st->rnpart[i], what, agree);
  return relaySuccess;
}

/* Stream what is there of one ring into a part: its header into hdr, then
 * the payload into data, resuming at *pos. */
static uint64_t shmGetStream(shmState* st, int p, size_t cur, shmRingCtl* c, const unsigned char* d, uint64_t R,
                             void* hdr, uint64_t hdrBytes, unsigned char* data, uint64_t total, uint64_t* pos,
                             uint64_t* sincePublish, int* hdrDone) {
  uint64_t tail = st->recvTail[cur], moved = 0;
  *hdrDone = 0;
  while (*pos < total) {
    uint64_t want = (*pos < hdrBytes ? hdrBytes : total) - *pos;
    uint64_t avail = st->recvHeadSeen[cur] - tail;
    if (avail < want) {
      st->recvHeadSeen[cur] = atomic_load_explicit(&c->head, memory_order_acquire);
      avail = st->recvHeadSeen[cur] - tail;
    }
    if (avail == 0) break;
    uint64_t k = want < avail ? want : avail;
    if (*pos < hdrBytes) {
      shmRingGet(d, R, tail, (unsigned char*)hdr + *pos, (size_t)k);
    } else {
      if (k > st->chunk) k = st->chunk;
      shmRingGet(d, R, tail, data + (*pos - hdrBytes), (size_t)k);
    }
    tail += k;
    *pos += k;
    moved += k;
    *sincePublish += k;
    if (*sincePublish >= st->chunk) {
      atomic_store_explicit(&c->tail, tail, memory_order_release);
      shmWake(&st->slots[p]);
      *sincePublish = 0;
    }
    if (*pos == hdrBytes) {
      *hdrDone = 1; /* the caller checks it before any payload is read */
      break;
    }
  }
  st->recvTail[cur] = tail;
  return moved;
}

/* Drain what peer p sent: task headers (each checked, in order), then each
 * channel's parts of checked tasks. */
static relayResult_t shmPull(struct relayComm* comm, shmState* st, int p, const relayXferDesc* recvs,
                             uint64_t* movedOut) {
  int n = comm->nranks, me = comm->rank;
  shmPeerQ* q = &st->rq[p];
  uint64_t moved = 0;
  if (q->ctl < q->end) {
    size_t cur = shmCur(st, p, 0);
    shmRingCtl* c = shmCtl(st, n, p, me, 0);
    const unsigned char* d = shmData(st, n, p, me, 0);
    uint64_t tail = st->recvTail[cur];
    relayResult_t res = relaySuccess;
    while (q->ctl < q->end) {
      if (st->recvHeadSeen[cur] - tail < SHM_THDR) {
        st->recvHeadSeen[cur] = atomic_load_explicit(&c->head, memory_order_acquire);
        if (st->recvHeadSeen[cur] - tail < SHM_THDR) break;
      }
      shmTaskHdr h;
      shmRingGet(d, SHM_CTL_RING, tail, &h, sizeof h);
      int i = st->rorder[q->ctl];
      if (!shmHdrOk(comm, p, &h, &recvs[i], q->ctl - q->beg))
        res = shmHdrMismatch(comm, p, &h, &recvs[i], q->ctl - q->beg, q->end - q->beg);
      else
        res = shmTaskAccept(comm, st, p, &h, q->ctl);
      if (res != relaySuccess) break;
      tail += SHM_THDR;
      moved += SHM_THDR;
      q->ctl++;
    }
    if (tail != st->recvTail[cur]) {
      st->recvTail[cur] = tail;
      atomic_store_explicit(&c->tail, tail, memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (res != relaySuccess) return res;
  }
  size_t P = (size_t)st->p2p.perPeer;
  shmChanQ* cqs = &st->rch[(size_t)p * (size_t)st->channels];
  shmPartHdr* hs = &st->rphdr[(size_t)p * (size_t)st->channels];
  relayResult_t res = relaySuccess;
  for (uint64_t m = q->chanMask; m && res == relaySuccess; m &= m - 1) {
    int ch = __builtin_ctzll(m);
    shmChanQ* cq = &cqs[ch];
    size_t cur = shmCur(st, p, 1 + ch);
    shmRingCtl* c = shmCtl(st, n, p, me, 1 + ch);
    const unsigned char* d = shmData(st, n, p, me, 1 + ch);
    uint64_t sincePublish = 0;
    while (cq->cur < q->ctl) {
      int i = st->rorder[cq->cur];
      const p2pPart* pp = &st->rpart[(size_t)i * P + (size_t)cq->part];
      int hdrDone = 0;
      moved += shmGetStream(st, p, cur, c, d, st->chanBytes, &hs[ch], SHM_PHDR, (unsigned char*)recvs[i].ptr + pp->off,
                            SHM_PHDR + pp->len, &cq->pos, &sincePublish, &hdrDone);
      if (hdrDone) {
        const shmPartHdr* h = &hs[ch];
        if (h->magic != SHM_PART_MAGIC || h->src != p || h->index != (uint32_t)(cq->cur - q->beg) ||
            h->part != (uint32_t)cq->part || h->callSeq != comm->callSeq || h->len != pp->len) {
          res = relaySetError(comm, relayInternalError,
                              "rank %d: step %d of call #%llu: corrupt stream from rank %d on channel %d (magic %#x, "
                              "task %u part %u of %llu bytes; expected task %d part %d of %zu bytes)",
                              me, comm->curStep, (unsigned long long)comm->callSeq, p, ch, h->magic, h->index, h->part,
                              (unsigned long long)h->len, cq->cur - q->beg, cq->part, pp->len);
          break;
        }
        continue; /* now the payload */
      }
      if (cq->pos < SHM_PHDR + pp->len) break; /* nothing more there yet */
      cq->pos = 0;
      cq->cur = shmChanNext(st, st->rorder, st->rnpart, st->rpart, ch, cq->cur + 1, q->end, &cq->part);
    }
    if (sincePublish) {
      atomic_store_explicit(&c->tail, st->recvTail[cur], memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (cq->cur == q->end) q->chanMask &= ~(1ull << ch);
  }
  *movedOut += moved;
  return res;
}

static int shmSideDone(const shmPeerQ* q) { return q->ctl == q->end && q->chanMask == 0; }

/* One pass over every peer with pending work; drops finished peers. */
static relayResult_t shmScan(struct relayComm* comm, shmState* st, const relayXferDesc* sends,
                             const relayXferDesc* recvs, uint64_t* moved) {
  for (int i = 0; i < st->nspend;) {
    int p = st->spend[i];
    *moved += shmPush(comm, st, p, sends);
    if (shmSideDone(&st->sq[p]))
      st->spend[i] = st->spend[--st->nspend];
    else
      i++;
  }
  for (int i = 0; i < st->nrpend;) {
    int p = st->rpend[i];
    RELAY_CHECK(shmPull(comm, st, p, recvs, moved));
    if (shmSideDone(&st->rq[p]))
      st->rpend[i] = st->rpend[--st->nrpend];
    else
      i++;
  }
  return relaySuccess;
}

static int shmPending(shmState* st, int p) { return !shmSideDone(&st->sq[p]) || !shmSideDone(&st->rq[p]); }

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

/* The first unfinished task of peer p in one direction, and its bytes moved. */
static void shmTaskProgress(const shmState* st, int p, int isSend, const relayXferDesc* x, int* task, uint64_t* done,
                            uint64_t* bytes) {
  const shmPeerQ* q = isSend ? &st->sq[p] : &st->rq[p];
  const shmChanQ* cqs = isSend ? &st->sch[(size_t)p * (size_t)st->channels] : &st->rch[(size_t)p * (size_t)st->channels];
  const int* order = isSend ? st->sorder : st->rorder;
  const p2pPart* parts = isSend ? st->spart : st->rpart;
  const int* npart = isSend ? st->snpart : st->rnpart;
  size_t P = (size_t)st->p2p.perPeer;
  int t = q->ctl;
  for (uint64_t m = q->chanMask; m; m &= m - 1)
    if (cqs[__builtin_ctzll(m)].cur < t) t = cqs[__builtin_ctzll(m)].cur;
  if (t >= q->end) t = q->end - 1;
  int i = order[t];
  *task = t;
  *bytes = x[i].bytes;
  *done = 0;
  if (t >= q->ctl) return; /* its header is not through yet */
  for (int k = 0; k < npart[i]; k++) {
    const p2pPart* pp = &parts[(size_t)i * P + (size_t)k];
    if (!pp->len) continue;
    const shmChanQ* cq = &cqs[pp->channel];
    if (!(q->chanMask & (1ull << pp->channel)) || cq->cur > t) *done += pp->len;
    else if (cq->cur == t && cq->pos > SHM_PHDR) *done += cq->pos - SHM_PHDR;
  }
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
  int task;
  uint64_t done, bytes;
  shmTaskProgress(st, p, !isRecv, isRecv ? recvs : sends, &task, &done, &bytes);
  snprintf(what, sizeof what, "%s %llu of %llu bytes", isRecv ? "recv" : "send", (unsigned long long)done,
           (unsigned long long)bytes);
  return relaySetError(comm, relayTimeout,
                       "rank %d: step %d of call #%llu: no progress for %d ms waiting for rank %d (%s)%s%.0d%s",
                       comm->rank, comm->curStep, (unsigned long long)comm->callSeq, comm->cfg.timeoutMs, p, what,
                       others ? " and " : "", others, others == 1 ? " other rank" : others ? " other ranks" : "");
}

static relayResult_t shmGroupRun(struct relayComm* comm, shmState* st, const relayXferDesc* sends, int nSends,
                                 const relayXferDesc* recvs, int nRecvs, int p2pOp) {
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
  if ((unsigned)p2pOp >= P2P_NUM_OPS)
    return relaySetError(comm, relayInternalError, "rank %d: step %d of call #%llu: p2p operation %d", me,
                         comm->curStep, (unsigned long long)comm->callSeq, p2pOp);
  st->groupOp = p2pOp;
  RELAY_CHECK(shmP2pInit(comm, st));
  RELAY_CHECK(shmGrowOrder(comm, st, nSends > nRecvs ? nSends : nRecvs));
  shmBucket(st, n, sends, nSends, st->sorder, st->sq, st->spend, &st->nspend, me);
  shmBucket(st, n, recvs, nRecvs, st->rorder, st->rq, st->rpend, &st->nrpend, me);

  /* To oneself: the k-th send pairs with the k-th receive; no channels. */
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
  ss->ctl = ss->end;
  rs->ctl = rs->end;

  /* Split every task; connect our send sides before any header goes out. */
  for (int i = 0; i < st->nspend; i++) {
    shmSplitPeer(st, p2pOp, me, st->spend[i], 1, sends);
    RELAY_CHECK(shmSendConnect(comm, st, st->spend[i]));
  }
  for (int i = 0; i < st->nrpend; i++) shmSplitPeer(st, p2pOp, me, st->rpend[i], 0, recvs);

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
                              const relayXferDesc* recvs, int nRecvs, int p2pOp, relayStream_t stream) {
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
  relayResult_t res = shmGroupRun(comm, st, sends, nSends, recvs, nRecvs, p2pOp);
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
      if (pb->call != comm->callSeq)
        return relaySetError(comm, relayInvalidUsage,
                             "rank %d: %s: rank %d's record is of its call #%llu: a rank rejected a call its peers "
                             "ran (check mode 0), so the ranks are no longer in step",
                             me, where, q, (unsigned long long)pb->call);
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

/* ------------------------------------------------- reject, abort, destroy */

static void shmReject(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->slots) return;
  /* The call it rejects is comm->callSeq (core counts rejected calls too):
   * a peer in that call honours it, one in a later call does not. */
  atomic_store_explicit(&st->slots[comm->rank].rejectSeq, comm->callSeq, memory_order_release);
  for (int q = 0; q < comm->nranks; q++)
    if (q != comm->rank) shmWake(&st->slots[q]);
}

static void shmFailOp(struct relayComm* comm) {
  if (shmStateOf(comm) && shmStateOf(comm)->slots) (void)shmFail(comm, relaySuccess);
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
  relayShmBwFree(comm);
  shmStateFree(st);
  comm->tpState = NULL;
}

/* For the one-shot twin (shm_oneshot.c): the comm's agreed nonce, and what
 * is wrong with peer q (relaySuccess when nothing; dead-pid check included). */
uint64_t relayShmCommHash(struct relayComm* comm) { return shmStateOf(comm)->nonce; }

relayResult_t relayShmWaitWord(struct relayComm* comm, _Atomic uint32_t* word, uint32_t want, int q,
                               const char* where) {
  shmState* st = shmStateOf(comm);
  shmSlot* me = &st->slots[comm->rank];
  shmWaiter w;
  shmWaiterInit(&w);
  for (;;) {
    uint32_t db = atomic_load_explicit(&me->doorbell, memory_order_acquire);
    if ((int32_t)(atomic_load_explicit(word, memory_order_acquire) - want) >= 0) return relaySuccess;
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "rank %d: %s: the comm was aborted", comm->rank, where);
    int what = shmPeerState(comm, st, q);
    if (what == SHM_PEER_OK && w.spins >= comm->cfg.spinCount && shmLiveCheckDue(&w) && shmPeerDead(st, q))
      what = SHM_PEER_DEAD;
    if (what != SHM_PEER_OK) {
      /* What it stored before it failed or died counts. */
      if ((int32_t)(atomic_load_explicit(word, memory_order_acquire) - want) >= 0) return relaySuccess;
      return shmPeerError(comm, st, q, what, where);
    }
    if (shmPause(comm, st, &w, db)) return relayTimeout;
  }
}

void relayShmRing(struct relayComm* comm, int q) { shmWake(&shmStateOf(comm)->slots[q]); }

relayResult_t relayShmP2pInfo(struct relayComm* comm, p2pComm* out) {
  shmState* st = shmStateOf(comm);
  if (!st || comm->tp != &relayShmOps)
    return relaySetError(comm, relayInvalidArgument, "relayShmP2pInfo: not a shm comm");
  RELAY_CHECK(shmP2pInit(comm, st));
  *out = st->p2p;
  return relaySuccess;
}

uint64_t relayShmP2pConnMask(struct relayComm* comm, int peer, int dir) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->p2pReady || peer < 0 || peer >= comm->nranks || (dir != P2P_DIR_SEND && dir != P2P_DIR_RECV))
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
    if (atomic_load_explicit(&shmCtl(st, n, src, dst, 1 + c)->conn, memory_order_acquire) & bit) m |= 1ull << c;
  return m;
}

static const relayTransportOps relayShmOps = {
    .name = "shm",
    .caps = RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_BW,
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
    .bwPrepare = relayShmBwPrepare,
    .bw = relayShmBw,
    .winRegister = relayShmWinRegister,
    .winDeregister = relayShmWinDeregister,
};

/* ---------------------------------------------------------------- attach */

/* A rendezvous is owned by one launch: its name is the job name plus a hash
 * of what the launcher gives all of its ranks alike and no other launch. Two
 * jobs started together under one name (torchrun's default "relaycc", or the
 * same script twice) then never meet. In order: the launcher's variables
 * where any is set (TORCHELASTIC_RUN_ID, MASTER_ADDR, MASTER_PORT: all that
 * are set; torchrun without --standalone has run id "none", so the master
 * port is what tells two of its jobs on one host apart), else the parent
 * process (fork-style launchers: mpirun's orted, srun's slurmstepd, a test's
 * forks). Ranks of one job started by different parents with no launcher
 * variables never meet: such a job needs MASTER_ADDR/MASTER_PORT or a
 * launcher. */
static void shmLaunchIdentity(char* out, size_t len) {
  static const relayParamId kVars[] = {RELAY_P_TORCHELASTIC_RUN_ID, RELAY_P_MASTER_ADDR, RELAY_P_MASTER_PORT};
  size_t o = 0;
  out[0] = 0;
  for (size_t i = 0; i < sizeof kVars / sizeof kVars[0]; i++) {
    const char* v = relayParamEnvText(kVars[i]);
    if (v && o < len)
      o += (size_t)snprintf(out + o, len - o, "%s%s=%s", o ? " " : "", relayParamDefs[kVars[i]].name, v);
  }
  if (!o) snprintf(out, len, "parent pid %d", (int)getppid());
}

void relayShmSegmentName(const char* jobName, char* buf, size_t len) {
  char launch[160];
  shmLaunchIdentity(launch, sizeof launch);
  uint64_t h = relayHash64(RELAY_HASH_SEED, launch, strlen(launch));
  snprintf(buf, len, "/relaycc-%s.%016llx", jobName, (unsigned long long)h);
}

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
  /* The channels count only at rank 0 (it shapes the segment; the others
   * take it from there); the part rules (shmP2pInit) read the comm's agreed
   * table at the first group. core/params.h checked the ranges. */
  long chans = (long)relayParamInt(comm, RELAY_P_NCHANNELS);
  shmState* st = calloc(1, sizeof *st);
  if (!st) return relaySetError(comm, relaySystemError, "rank %d: out of memory for the shm transport", me);
  snprintf(st->job, sizeof st->job, "%s", jobName);
  shmLaunchIdentity(st->launch, sizeof st->launch);
  relayShmSegmentName(jobName, st->name, sizeof st->name);
  /* Ring sizes in whole cache lines keep every ring's data line-aligned. */
  st->ringBytes = shmAlignUp((size_t)ring, SHM_LINE);
  st->wantChannels = (int)chans;
  st->pidNs = shmPidNamespace();
  atomic_init(&st->abortedLocal, 0);
  shmLayout L;
  if (shmLayoutOf(n, st->ringBytes, shmChannelsFor(st->wantChannels, st->ringBytes), &L) != 0) {
    free(st);
    return relaySetError(comm, relayInvalidArgument, "rank %d: %d ranks with %ld-byte rings overflow the address space",
                         me, n, ring);
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
    return relaySetError(comm, relaySystemError, "rank %d: out of memory for the shm transport", me);
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
    return relaySetError(comm, relaySystemError, "rank %d: out of memory for the shm transport", me);
  }
  comm->tpState = st;
  comm->tp = &relayShmOps;
  return relaySuccess;
}
