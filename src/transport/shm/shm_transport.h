/*
 * The shm transport's private header: the state its files share (segment
 * layout, slots, rings, the per-rank shmState), the functions that cross
 * files, and the staging regions of the one-shot and bandwidth twins.
 * Internal: only the files of src/transport/shm/ include it; core sees transport/shm.h.
 *
 * The files, one job each (so a change to the rendezvous, to the waits or to
 * the data path reads and reviews as one file):
 *   segment.c  segment layout, shm_open/mmap, rendezvous and init handshake,
 *              the launch identity that names the segment
 *   wait.c     futex waits and deadlines, peer death, failure notices
 *              (status, reject, abort) and the one-shot's word wait
 *   group.c    groups of sends/receives: task headers, per-pair rings and
 *              channels through the P2P channel layer
 *   ops.c      agree, barrier, scratch, local reduce/copy, attach, destroy,
 *              the ops table and its caps
 *   oneshot.c  the one-shot twin of nccl/oneshot.cu, and the staging regions
 *   bw.c       the bandwidth route's twin of nccl/bw.cu
 *   window.c   registered windows (cross-memory attach), the twin of
 *              nccl/window.c
 */
#ifndef RELAY_TRANSPORT_SHM_TRANSPORT_H_
#define RELAY_TRANSPORT_SHM_TRANSPORT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "p2p/p2p.h"
#include "transport/shm.h"
#include "comm/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The segment is shared between processes: its atomics must be lock-free
 * (a lock-based atomic would lock a per-process table, not the memory). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm transport needs lock-free 32-bit atomics");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm transport needs lock-free 64-bit atomics");

#define SHM_LINE 64
#define SHM_AGREE_MAX RELAY_TP_AGREE_MAX
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
/* A pair's control ring: 16 task headers of 64 bytes. A group rarely has more
 * than 2 transfers per peer; more just wait for the receiver to read ahead,
 * which it does before it touches any data. */
#define SHM_CTL_RING 1024u

enum { SHM_OK = 0, SHM_FAILED = 1, SHM_ABORTED = 2, SHM_GONE = 3 };
/* What a wait found wrong with a peer. */
enum {
  SHM_PEER_OK = 0,
  SHM_PEER_FAILED,
  SHM_PEER_ABORTED,
  SHM_PEER_GONE,
  SHM_PEER_REJECTED,
  SHM_PEER_DEAD,
  SHM_PEER_SHAPE /* it waits in this call with another shape (callAt) */
};

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
  /* A rank of this launch that found the segment and cannot join it (it has another nranks): its rank + 1,
   * stored after joinMsg (joinClaim: the first such rank writes it), so the others fail at once. */
  _Atomic uint32_t joinClaim;
  _Atomic uint32_t joinFailed;
  char joinMsg[512];
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
  _Atomic uint32_t waiting; /* nonzero while this rank may sleep on doorbell: rings bump it (shmSleep) */
  _Atomic int32_t cpu;      /* 1 + the CPU this rank last entered a wait on (0: none yet): shmNoteCpu */
  _Alignas(SHM_LINE) _Atomic int32_t pid;
  _Atomic uint32_t status;    /* SHM_OK / FAILED / ABORTED / GONE */
  _Atomic uint64_t arrived;   /* == header nonce once checked in */
  _Atomic uint64_t rejectSeq; /* call number this rank rejected (0: none) */
  /* The call this rank last paused in, for its peers' judge (shmPeerState): the call number's low 32 bits
   * over the shape digest's (comm->callShape), one word so that a reader never pairs a number with
   * another call's shape; 0 in the low half: no shape (outside calls, the call's own agreement). */
  _Atomic uint64_t callAt;
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
  int wantChannels;       /* this rank's RELAYCC_NCHANNELS (rank 0's decides) */
  int32_t deadCreator;    /* pid of a dead rank 0 whose segment we found (for messages) */
  int openErrno;          /* last shm_open failure of a joiner (for messages) */
  uint64_t conflictSince; /* when a joiner first met a live segment it cannot join */
  int32_t* pids;          /* [n], from check-in; 0 where a peer's pid is not ours to check */
  uint64_t pidNs;         /* our PID namespace (0: unknown) */
  atomic_int abortedLocal;
  /* Ranks outnumber cores: the waits' polls are cfg.spinCount >> spinCut; a spin that ends in a sleep
   * raises the cut, one that ends in progress lowers it (shmPause, shmWaiterProgress). */
  int spinCut;
  /* What the waits did (relayShmWaitCounts, for tests): busy polls, and waits that slept at once because
   * a peer last waited on this rank's CPU. Local, not shared. */
  uint64_t busyPolls, coLocatedWaits;
  uint64_t arms; /* pauses that armed this rank's waiting word (shmSleep; relayShmArmed, for tests) */
  int cpuNoted;  /* what this rank's slot says of its CPU (shmNoteCpu): stored only when it changes */
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
  int groupOp;          /* the running group's p2pOp: both ends' headers carry it */
  shmPeerQ *sq, *rq;    /* [n] */
  shmChanQ *sch, *rch;  /* [n][channels] */
  shmPartHdr* rphdr;    /* [n][channels]: part header being received */
  int *sorder, *rorder; /* transfer indices grouped by peer */
  int orderCap;
  /* Per transfer (index into the group's sends / recvs): its split. */
  p2pPart *spart, *rpart; /* [orderCap][perPeer] */
  int *snpart, *rnpart;
  uint64_t *swant, *sneed, *rwant;
  /* Tagged groups (comm->xferTags: point-to-point, all-to-all-v): the sends' and receives' tags, and
   * per receive a buffer of our own that takes a drained transfer's bytes in place of the caller's
   * (NULL: none), freed at the group's end; tagRes: the first transfer error that left the pair in step
   * (a drained transfer), returned after the group, the comm usable. */
  relayXferTag *stag, *rtag;
  unsigned char** rdrain; /* [orderCap] */
  int ndrain;             /* entries of rdrain this group set */
  relayResult_t tagRes;
  int *spend, *rpend; /* peers with pending sends / recvs */
  int nspend, nrpend;
  int* tmp; /* [n] */
  /* Scratch cache. */
  void** scr;
  size_t* scrBytes;
  int nscr;
} shmState;

static inline size_t shmAlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Layout: [header: 4096][slots][ring ctl][pad 4096][ring data]; a pair's
 * data is its control ring then its channels' rings. Pure function of
 * (n, ring, channels) so every rank can check a segment's size. */
typedef struct {
  size_t slots, ctl, data, total;
  uint64_t chanBytes, pairBytes;
} shmLayout;

static inline size_t shmPair(int n, int src, int dst) {
  return (size_t)src * (size_t)(n - 1) + (size_t)(dst < src ? dst : dst - 1);
}
/* Ring r of the pair src -> dst: 0 the control ring, 1 + c channel c's. */
static inline shmRingCtl* shmCtl(shmState* st, int n, int src, int dst, int r) {
  return &st->ctl[shmPair(n, src, dst) * (size_t)(st->channels + 1) + (size_t)r];
}
static inline unsigned char* shmData(shmState* st, int n, int src, int dst, int r) {
  unsigned char* b = st->data + shmPair(n, src, dst) * st->pairBytes;
  return r == 0 ? b : b + SHM_CTL_RING + (size_t)(r - 1) * st->chanBytes;
}
/* Index of our cursors of ring r with peer p. */
static inline size_t shmCur(const shmState* st, int p, int r) {
  return (size_t)p * (size_t)(st->channels + 1) + (size_t)r;
}

static inline shmState* shmStateOf(struct relayComm* comm) { return (shmState*)comm->tpState; }

static inline void shmCopyMsg(char* dst, size_t cap, const char* src) {
  size_t len = strnlen(src, cap - 1); /* truncated on purpose: quoted in others' messages */
  memcpy(dst, src, len);
  dst[len] = 0;
}

/* A wait's progress clock, its polls since the last progress and whether they are spent (shmPause): from
 * then on it sleeps, and judges the deadline and its peers' liveness. */
typedef struct {
  uint64_t lastProgress;
  uint64_t lastLiveCheck;
  int spins;
  int spun;
  _Atomic uint32_t* armed; /* this rank's waiting word, armed by the last pause and not yet slept on */
} shmWaiter;

/* ------------------------------------------------ functions across files */

/* segment.c */
int shmLayoutOf(int n, uint64_t ring, int channels, shmLayout* L);
int shmChannelsFor(int wanted, uint64_t ring);
void shmUnmap(shmState* st);
relayResult_t shmCreate(struct relayComm* comm, shmState* st);
relayResult_t shmJoin(struct relayComm* comm, shmState* st);
void shmLaunchIdentity(char* out, size_t len);

/* wait.c */
void shmWake(shmSlot* s);
int shmSleep(shmSlot* me, uint32_t db, uint64_t ns);
void shmNap(int ms);
int shmPidAlive(int32_t pid);
uint64_t shmPidNamespace(void);
int shmPeerDead(const shmState* st, int q);
/* The transport's deadPeer op (transport.h): the first peer known dead, named in why. */
relayResult_t shmDeadPeer(struct relayComm* comm, char* why, size_t whyLen);
relayResult_t shmFail(struct relayComm* comm, relayResult_t res);
int shmAborted(struct relayComm* comm, shmState* st);
int shmPeerState(struct relayComm* comm, shmState* st, int q);
relayResult_t shmPeerError(struct relayComm* comm, shmState* st, int q, int what, const char* where);
void shmWaiterInit(shmWaiter* w);
void shmWaiterProgress(shmState* st, shmWaiter* w);
void shmWaiterEnd(shmWaiter* w);
int shmPause(struct relayComm* comm, shmState* st, shmWaiter* w, uint32_t db, int peer);
int shmNoteCpu(struct relayComm* comm, shmState* st);
int shmLiveCheckDue(shmWaiter* w);
void shmReject(struct relayComm* comm);
void shmFailOp(struct relayComm* comm);
void shmAbort(struct relayComm* comm);

/* group.c */
relayResult_t shmP2pInit(struct relayComm* comm, shmState* st);
relayResult_t shmGroup(struct relayComm* comm, const relayXferDesc* sends, int nSends,
                       const relayXferDesc* recvs, int nRecvs, int p2pOp, relayStream_t stream);

/* ------------------------------------------- staging regions, one-shot, bw */

/* A staging region per rank, mapped by every peer (the one-shot's and the
 * bandwidth route's): POSIX shm "/relaycc-<tag>-<commHash>-<rank>", created,
 * mapped by all, voted twice (created; opened with the right sentinel and
 * param), and unlinked, so nothing is left in /dev/shm. The owner's layout
 * starts after relayShmRegionHeaderBytes(). One flag word per 64-byte line:
 * each has one writer. */
#define RELAY_SHM_LINE 64
typedef struct {
  _Alignas(RELAY_SHM_LINE) _Atomic uint32_t v;
} relayShmWord;
typedef struct {
  int n;
  size_t bytes;         /* of each rank's region, header included */
  uint64_t hash;        /* the comm's nonce */
  unsigned char** base; /* [n] mapped regions (own included) */
} relayShmRegion;
size_t relayShmRegionHeaderBytes(void);
/* COLLECTIVE: relaySuccess (every rank mapped every region), relayNotSupported
 * (declined by some rank, or param differs: every rank alike), or an error.
 * faultRank: that rank votes no as if an open failed (tests), -1 none. */
relayResult_t relayShmRegionSetup(struct relayComm* comm, relayShmRegion* R, const char* tag, uint64_t param,
                                  size_t bytes, int faultRank);
/* COLLECTIVE, for a rank that cannot even try (out of memory): votes no in
 * both rounds; relayNotSupported or an error. */
relayResult_t relayShmRegionDecline(struct relayComm* comm, uint64_t param);
void relayShmRegionUnmap(relayShmRegion* R);
/* Wait until w - want >= 0 (relayShmWaitWord); a timeout's message names
 * proto ("one-shot", "bw"), what was awaited, its epoch and the peer. */
relayResult_t relayShmRegionWait(struct relayComm* comm, _Atomic uint32_t* w, uint32_t want, int peer,
                                 const char* proto, const char* what);

/* A push's call number, mark (1 + comm->callMark) and shape digest, stored
 * before its flag (relaxed; the flag's release publishes them), and checked
 * by the consumer after the flag's acquire: relayInvalidUsage naming both
 * calls when the push is of another call or shape; a mark sets
 * comm->callMark (the pusher passed a bad buffer). proto names the protocol. */
void relayShmStampMark(struct relayComm* comm, _Atomic uint32_t* call, _Atomic uint32_t* mark,
                       _Atomic uint32_t* shape);
relayResult_t relayShmCheckMark(struct relayComm* comm, _Atomic uint32_t* call, _Atomic uint32_t* mark,
                                _Atomic uint32_t* shape, int peer, const char* proto);

/* Whether actives i and j (i != j) hand-shake in call d: all pairs, or a rooted call's root's (the one-shot
 * and the bandwidth route alike). */
static inline int relayShmPairs(const relayOneShotDesc* d, int i, int j) {
  return d->root < 0 || d->root >= d->nActive || i == d->root || j == d->root;
}

/* Bytes active `from` moves to active `to`: everything, or a rooted call's data way only (broadcast: from
 * the root; reduce: to it). */
static inline size_t relayShmPushBytes(const relayOneShotDesc* d, int from, int to, size_t bytes) {
  if (d->root < 0 || d->root >= d->nActive) return bytes;
  return (d->gather ? from == d->root : to == d->root) ? bytes : 0;
}

relayResult_t relayShmOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream);
relayResult_t relayShmOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream);
void* relayShmCarryStage(struct relayComm* comm, size_t bytes);
const void* relayShmCarryTake(struct relayComm* comm, int rank, size_t bytes);
void relayShmOneShotFree(struct relayComm* comm);

/* bw.c: the bandwidth route's twin (tiles through a staging ring). */
relayResult_t relayShmBwPrepare(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream);
relayResult_t relayShmBw(struct relayComm* comm, const relayBwDesc* d, relayStream_t stream);
void relayShmBwFree(struct relayComm* comm);
/* window.c: windows (transport.h winRegister / winDeregister): cross-memory attach to every peer's
 * registered buffer, the bandwidth route's direct path (bw.c). A window that is direct on every rank
 * holds this in relayWindow.tp. */
typedef struct {
  int32_t* pids;   /* [n] */
  uint64_t* bases; /* [n] each rank's buffer (0: none) */
  char* pull;      /* (min(n, 8) - 1) tiles: what a reduce reads of its peers at once */
  size_t pullTile; /* bytes per peer in pull */
} relayShmWin;
relayResult_t relayShmWinRegister(struct relayComm* comm, struct relayWindow* w, const uint64_t* bases);
void relayShmWinDeregister(struct relayComm* comm, struct relayWindow* w, int collective);
/* One copy of len bytes between this rank's local memory and rank p's (process pid) at address remote:
 * write 1 from local into p, 0 from p into local (process_vm_writev / readv). An error names the peer and
 * remote's offset from base in `where` ("window", "buffer"; relayRemoteError when it died). */
relayResult_t relayShmCmaCopy(struct relayComm* comm, int32_t pid, int p, int write, void* local,
                              uint64_t remote, size_t len, uint64_t base, const char* where);

/* segment.c */
uint64_t relayShmCommHash(struct relayComm* comm);
/* wait.c */
/* Wait until *word - want >= 0 (wrap-safe, acquire) as the transport's own
 * waits do: spin cfg.spinCount times (RELAYCC_SPIN*), then sleep on this
 * rank's doorbell (futex) in bounded slices; between pauses the abort flag
 * and peer q's failure state, each slice q's process. relaySuccess, a peer /
 * abort error (message set, naming where: "<proto>, waiting for <what> epoch
 * <want>"), or relayTimeout with NO message: the caller names what it waited
 * for. */
relayResult_t relayShmWaitWord(struct relayComm* comm, _Atomic uint32_t* word, uint32_t want, int q,
                               const char* proto, const char* what);
/* Ring rank q's doorbell after a store it may be waiting on (no syscall
 * unless q sleeps). */
void relayShmRing(struct relayComm* comm, int q);

#ifdef __cplusplus
}
#endif
#endif
