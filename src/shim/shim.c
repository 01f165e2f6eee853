/*
 * librelaycc_shim.so: an NCCL interposer (LD_PRELOAD). The real NCCL owns
 * every communicator; the shim only takes the calls relaycc is predicted to
 * do faster, and forwards everything else unchanged (shim_fwd.c).
 *
 * Per communicator state: at a comm's first collective outside a group (and
 * outside a capture), a point every rank reaches in the same order, its ranks
 * vote over the real comm whether relaycc can serve it: one rank per process,
 * one host, every pair able to map each other's memory, and every rank's
 * per-process settings (RELAYCC_SHIM, RELAYCC_SHIM_COLLS: what all take). A
 * rank with RELAYCC_SHIM=0 or a library relaycc cannot use votes no; the vote
 * has no deadline (the comm's destroy or abort ends it). Only when all can
 * does every rank build a relay comm over it (relayCommInitNccl, a guest),
 * and a last vote keeps it only when every rank built one: all ranks have
 * state or none (invariant 4). One thread driving several GPUs calls its
 * collectives inside groups (NCCL requires it), so such comms never attach.
 *
 * Routing: ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclAlltoAll,
 * ncclBroadcast, ncclBcast and ncclReduce (the whole comm in rank order: NCCL's
 * root is the root's position; a root outside the comm is NCCL's error) go
 * to relaycc when the comm has state, the calling thread is outside any
 * group (depth counted per thread, as NCCL counts it), the call is on the
 * stream of the comm's first routable call, dtype and op are relaycc's, and
 * relayRouteBeatsNative says relaycc's route beats NCCL's own collective for
 * that size on the comm's topology. Each test reads only the call and what
 * the ranks agreed, so every rank decides alike, also after relaycc failed
 * on one of them (its call then fails as its peers' do).
 *
 * relaycc is a guest: it never aborts or preconnects the user's
 * communicator and puts no deadline of its own on it. An error it meets is
 * the call's return code and is reported by every later
 * ncclCommGetAsyncError (wrapped), the kernels' error word too. A route that
 * declines (core's vote) sends that call to NCCL on every rank.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_port.h"

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "core/core.h"
#include "core/init.h"
#include "relaycc_nccl.h"
#include "shim/shim.h"

/* ---- settings ------------------------------------------------------------ */

/* Every setting of the shim, read once (relayShimReady) in readSettings. */
typedef struct {
  int on;              /* RELAYCC_SHIM: 0 forwards every call (default 1) */
  unsigned colls;      /* RELAYCC_SHIM_COLLS: bit per relayCollective_t taken (default the four) */
  int debug;           /* RELAYCC_DEBUG: 1 one line per comm, 2 also each routed call */
  const char* lib;     /* RELAYCC_SHIM_NCCL: the real library's path (default: the loaded one) */
  const char* testShm; /* RELAYCC_SHIM_TEST_SHM: test hook, state over the shm transport (job name) */
  int testFailRank;    /* RELAYCC_SHIM_TEST_FAIL_RANK: test hook, this rank fails state creation */
} shimSettings;

/* The collectives the shim can take: the rows on a layout that NCCL has (comm/coll.h): the four, and
 * broadcast, reduce (the whole comm in rank order: NCCL's root is the root's position). */
static unsigned shimAllColls(void) {
  unsigned bits = 0;
  for (int c = 0; c < relayNumCollectives; c++)
    if (relayCollOnLayout((relayCollective_t)c) && relayCollRows[c].ncclName) bits |= 1u << c;
  return bits;
}

static shimSettings gSet;

/* RELAYCC_SHIM_COLLS: a comma list of collective names (relayParseColl's:
 * allreduce, all_reduce, ar, ...); one unknown name takes none, so a typo
 * never routes more than asked. */
static unsigned parseColls(const char* list) {
  if (!list) return shimAllColls();
  unsigned bits = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    relayCollective_t c;
    if (relayParseCollAll(tok, &c) != 0 || !(shimAllColls() & (1u << c))) {
      fprintf(stderr, "relaycc shim: RELAYCC_SHIM_COLLS=\"%s\": \"%s\" is not one of", list, tok);
      for (int k = 0; k < relayNumCollectives; k++)
        if (shimAllColls() & (1u << k)) fprintf(stderr, " %s", relayCollRows[k].name);
      fprintf(stderr, "; taking no collective\n");
      return 0;
    }
    bits |= 1u << c;
  }
  return bits;
}

/* The shim's settings are PROCESS rows of the parameter table (read before any comm exists). */
static void readSettings(void) {
  gSet.on = relayParamProcess(RELAY_P_SHIM) != 0;
  gSet.colls = parseColls(relayParamEnvText(RELAY_P_SHIM_COLLS));
  gSet.debug = relayDebugLevel();
  gSet.lib = relayParamEnvText(RELAY_P_SHIM_NCCL);
  gSet.testShm = relayParamEnvText(RELAY_P_SHIM_TEST_SHM);
  gSet.testFailRank = (int)relayParamProcess(RELAY_P_SHIM_TEST_FAIL_RANK);
}

/* ---- loading ------------------------------------------------------------- */

static pthread_once_t gOnce = PTHREAD_ONCE_INIT;
static int gReady; /* the real library is loaded: every function it has is forwarded */
static int gRoute; /* and relaycc may take calls (RELAYCC_SHIM on, the library has what relaycc needs) */

static void initOnce(void) {
  readSettings();
  /* Only what a call forwards to must exist, and each forwarder checks its own function: a program
   * built for NCCL 2.21 (no ncclAlltoAll) runs as it does without the shim. */
  if (relayNcclOpen(gSet.lib) != relaySuccess) {
    fprintf(stderr, "relaycc shim: %s\n", relayGetLastError(NULL));
    return;
  }
  relayNccl.guest = 1; /* before any relay comm exists: the user's comms are never aborted by relaycc */
  gReady = 1;
  gRoute = gSet.on && relayNccl.usable;
  if (gSet.on && !relayNccl.usable) /* said once per process, whatever RELAYCC_DEBUG is */
    fprintf(stderr, "relaycc shim: %s; relaycc takes no call, every call is forwarded\n", relayNccl.unusable);
  if (gSet.debug)
    fprintf(stderr, "relaycc shim: forwarding to %s (NCCL %d)%s\n", relayNccl.path, relayNccl.version,
            gSet.on ? "" : "; RELAYCC_SHIM=0: every call forwarded");
}

/* The real library is loaded and has this function (a wrapper's first test). */
#define SHIM_HAS(name) (relayShimReady() && relayNccl.name)

int relayShimReady(void) {
  pthread_once(&gOnce, initOnce);
  return gReady;
}

ncclResult_t relayShimMissing(const char* name) {
  fprintf(stderr, "relaycc shim: %s: %s\n", name,
          gReady ? "the NCCL library has no such function" : "the NCCL library could not be loaded");
  return ncclSystemError;
}

const char* relayShimMissingStr(const char* name) {
  relayShimMissing(name);
  return "relaycc shim: NCCL library not loaded";
}

/* The shim's one style for a comm's messages: "relaycc shim: comm P rank
 * R/N: what" (rank < 0: not known yet, or the text is relaycc's, whose
 * prefix names the rank: "relaycc shim: comm P: what"). Printed when
 * RELAYCC_DEBUG is at least level (0: always). */
static void say(int level, ncclComm_t comm, int rank, int nranks, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void say(int level, ncclComm_t comm, int rank, int nranks, const char* fmt, ...) {
  if (gSet.debug < level) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (rank >= 0) fprintf(stderr, "relaycc shim: comm %p rank %d/%d: %s\n", (void*)comm, rank, nranks, msg);
  else fprintf(stderr, "relaycc shim: comm %p: %s\n", (void*)comm, msg);
}

/* relaycc's result as the NCCL code a caller checks (the values match up to
 * relayRemoteError; a timeout is a peer that did not come). */
static ncclResult_t toNccl(relayResult_t r) {
  switch (r) {
    case relaySuccess: return ncclSuccess;
    case relayUnhandledCudaError: return ncclUnhandledCudaError;
    case relaySystemError: return ncclSystemError;
    case relayInvalidArgument: return ncclInvalidArgument;
    case relayInvalidUsage:
    case relayNotSupported: return ncclInvalidUsage;
    case relayRemoteError:
    case relayTimeout: return ncclRemoteError;
    case relayInProgress: return ncclInProgress;
    default: return ncclInternalError;
  }
}

/* relaycc's failure on a comm as ncclCommGetAsyncError reports it: never ncclSuccess, nor
 * ncclInProgress, which a nonblocking comm's user reads as "not ready yet" and keeps polling.
 * PyTorch's watchdog (ProcessGroupNCCL's checkForNcclError) fails the work and aborts the comm on
 * any other code; ncclRemoteError is what NCCL itself reports when a peer is gone or stuck, so a
 * relaycc wait that gave up on a peer says the same. */
static ncclResult_t asyncNccl(relayResult_t r) {
  ncclResult_t n = toNccl(r);
  return n == ncclSuccess || n == ncclInProgress ? ncclInternalError : n;
}

/* ---- per communicator state ---------------------------------------------- */

/* One user communicator the shim knows: added at its first collective outside a group, where its ranks
 * vote whether relaycc serves it (attachComm). A call holds its slot (refs, under gLock) while it uses
 * the slot's state; ncclCommDestroy / ncclCommAbort mark it closing (no new holder, a vote in it ends)
 * and free what it holds only once refs is 0, so a watchdog's abort never frees what a call on another
 * thread still reads. Slots are allocated one by one and never freed (a destroyed comm's is reused),
 * and the table grows as needed: no cap that one process hits and its peers do not. */
typedef struct {
  ncclComm_t nccl;         /* NULL: free slot */
  _Atomic(relayComm_t) rc; /* relaycc's state, NULL when none */
  int attached;            /* the attach vote ran (or could not): 0 until the comm's first collective */
  int refs;                /* calls holding the slot (gLock) */
  atomic_int closing;      /* destroy or abort began: votes and relaycc's waits end, no new holder */
  atomic_int revoked;      /* ncclCommRevoke: every later call is NCCL's */
  int nranks, rank, dev;
  int* ranks;     /* 0..nranks-1: the one-group layout */
  unsigned colls; /* the collectives relaycc takes on this comm: every rank's RELAYCC_SHIM_COLLS, ANDed */
  atomic_int asyncErr; /* relaycc's first error on this comm (an ncclResult_t), reported by
                        * ncclCommGetAsyncError: set by a call, read by a watchdog's thread */
  /* The stream of the comm's first collective: relaycc routes only calls on it. NCCL orders a
   * comm's calls across streams; relaycc's one-shot and bw regions assume their calls come in the
   * order each rank issued them on one stream, so a call on another stream is NCCL's. */
  cudaStream_t stream;
  int haveStream;
} shimComm;

static shimComm** gComms;
static int gNumComms, gCapComms;
static pthread_mutex_t gLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gUnheld = PTHREAD_COND_INITIALIZER; /* a slot's refs fell to 0 */
static atomic_int gCommSerial; /* comms voted on in this process (the test hook's job names) */

static shimComm* findLocked(ncclComm_t comm) {
  for (int i = 0; i < gNumComms; i++)
    if (gComms[i]->nccl == comm) return gComms[i];
  return NULL;
}

/* The slot of comm, held (refs + 1), added when the comm is new; NULL when it is closing or no memory
 * is left for a slot (then relaycc does not take part: said once). */
static shimComm* holdComm(ncclComm_t comm) {
  pthread_mutex_lock(&gLock);
  shimComm* sc = findLocked(comm);
  if (!sc) {
    for (int i = 0; i < gNumComms && !sc; i++)
      if (!gComms[i]->nccl && gComms[i]->refs == 0) sc = gComms[i];
    if (!sc && gNumComms == gCapComms) {
      int cap = gCapComms ? 2 * gCapComms : 16;
      shimComm** grown = realloc(gComms, (size_t)cap * sizeof *grown);
      if (grown) {
        gComms = grown;
        gCapComms = cap;
      }
    }
    if (!sc && gNumComms < gCapComms && (sc = calloc(1, sizeof *sc))) gComms[gNumComms++] = sc;
    if (sc) {
      free(sc->ranks);
      memset(sc, 0, sizeof *sc);
      sc->nccl = comm;
    }
  }
  if (sc && atomic_load(&sc->closing)) sc = NULL;
  if (sc) sc->refs++;
  pthread_mutex_unlock(&gLock);
  if (!sc) say(0, comm, -1, -1, "no slot for this comm (out of memory or closing): relaycc takes no part");
  return sc;
}

static void unholdComm(shimComm* sc) {
  pthread_mutex_lock(&gLock);
  if (--sc->refs == 0) pthread_cond_broadcast(&gUnheld);
  pthread_mutex_unlock(&gLock);
}

/* The buffers of one comm's attach votes, allocated once before its first vote (bytes per rank: the
 * largest record), so that no vote after it can fail on memory alone. */
typedef struct {
  char* buf; /* (nranks + 1) records: mine, then everyone's (device memory, host under the test hook) */
  void* all; /* nranks records on the host */
  cudaStream_t s;
} shimVoteBufs;

static int voteBufsGet(shimVoteBufs* v, int nranks, size_t bytes) {
  memset(v, 0, sizeof *v);
  size_t total = bytes * (size_t)(nranks + 1);
  v->all = calloc((size_t)nranks, bytes);
  if (gSet.testShm) {
    v->buf = malloc(total);
  } else if (cudaMalloc((void**)&v->buf, total) != cudaSuccess ||
             cudaStreamCreateWithFlags(&v->s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    if (v->buf) cudaFree(v->buf);
    v->buf = NULL;
  }
  return v->buf && v->all;
}

/* inFlight: a vote that did not end keeps its device buffer (NCCL may still write it). */
static void voteBufsFree(shimVoteBufs* v, int inFlight) {
  if (gSet.testShm) {
    free(v->buf);
  } else {
    if (!inFlight && v->buf) cudaFree(v->buf);
    if (v->s) cudaStreamDestroy(v->s);
  }
  free(v->all);
}

/* A vote: an ncclAllGather of `bytes` per rank over the user's comm, into v->all. No deadline, even
 * where the user set RELAYCC_TIMEOUT_MS: a rank that gave up alone would forward the call its peers
 * vote in, and their vote would meet its data; the comm's destroy or abort ends it (a peer that never
 * comes hangs NCCL's own next collective alike). On GPUs through device memory on a stream of our own;
 * under the test hook the (fake) library moves host memory. */
static relayResult_t voteGather(shimComm* sc, shimVoteBufs* v, int nranks, const void* mine, size_t bytes,
                                char* why, size_t whyLen) {
  ncclComm_t comm = sc->nccl;
  int gpu = !gSet.testShm;
  if (gpu && cudaMemcpy(v->buf, mine, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    snprintf(why, whyLen, "vote: %s", cudaGetErrorString(cudaGetLastError()));
    return relayUnhandledCudaError;
  }
  if (!gpu) memcpy(v->buf, mine, bytes);
  ncclResult_t r = relayNccl.ncclAllGather(v->buf, v->buf + bytes, bytes, ncclInt8, comm, v->s);
  while (r == ncclInProgress) { /* a nonblocking comm: poll until enqueued */
    ncclResult_t ae = ncclSuccess;
    r = relayNccl.ncclCommGetAsyncError(comm, &ae);
    if (r == ncclSuccess) r = ae;
    if (r == ncclInProgress && atomic_load(&sc->closing)) break;
  }
  if (r != ncclSuccess) {
    snprintf(why, whyLen, "vote: ncclAllGather: %s", relayNccl.ncclGetErrorString(r));
    return r == ncclInProgress ? relayTimeout : relaySystemError;
  }
  if (gpu) {
    cudaError_t e;
    while ((e = cudaStreamQuery(v->s)) == cudaErrorNotReady && !atomic_load(&sc->closing)) usleep(20);
    if (e == cudaSuccess)
      e = cudaMemcpy(v->all, v->buf + bytes, bytes * (size_t)nranks, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      snprintf(why, whyLen, "vote: %s",
               e == cudaErrorNotReady ? "the comm was destroyed or aborted during the vote"
                                      : cudaGetErrorString(e));
      return e == cudaErrorNotReady ? relayTimeout : relayUnhandledCudaError;
    }
  } else {
    memcpy(v->all, v->buf + bytes, bytes * (size_t)nranks);
  }
  return relaySuccess;
}

/* What each rank says in the first vote: who it is, and every per-process setting that decides what it
 * does with the comm's calls, so that ranks whose settings differ all decline (or take only what all
 * take) instead of one rank running a call that its peers forward. */
typedef struct {
  uint32_t magic;
  int32_t rank, nranks, ok;
  int64_t pid;
  uint64_t host;  /* relayHostIdentity: one node */
  uint32_t colls; /* RELAYCC_SHIM_COLLS: the collectives this rank would take */
  int32_t serial; /* this process's count of attaches: rank 0's and its pid name the test hook's job */
  char busId[32];
  char why[96]; /* why this rank cannot, when !ok: RELAYCC_SHIM=0, the library, the device */
} shimVoteRecord;

/* This rank's half of the eligibility test. */
static void localRecord(int rank, int nranks, int dev, shimVoteRecord* me) {
  memset(me, 0, sizeof *me);
  me->magic = 0x7368696du; /* "shim" */
  me->rank = rank;
  me->nranks = nranks;
  me->pid = (int64_t)getpid();
  me->host = relayHostIdentity(); /* core/nodes.c asks the same */
  me->colls = gSet.colls;
  me->ok = gRoute;
  if (!gSet.on) snprintf(me->why, sizeof me->why, "RELAYCC_SHIM=0");
  else if (!gRoute) snprintf(me->why, sizeof me->why, "its NCCL library is one relaycc cannot use");
  if (me->ok && !gSet.testShm &&
      cudaDeviceGetPCIBusId(me->busId, (int)sizeof me->busId, dev) != cudaSuccess) {
    cudaGetLastError();
    me->ok = 0;
    snprintf(me->why, sizeof me->why, "no PCI bus id for device %d", dev);
  }
}

/* 1 when all records allow relaycc (*colls: what every rank takes); else why names the first rank that
 * does not. -1: the records say no, which every rank reads alike; 0: this rank's own peer-access test
 * says no (local: voted again). */
static int judge(const shimVoteRecord* all, int nranks, int rank, int dev, unsigned* colls, char* why,
                 size_t whyLen) {
  *colls = shimAllColls();
  for (int q = 0; q < nranks; q++) {
    const shimVoteRecord* r = &all[q];
    if (r->magic != 0x7368696du || r->rank != q || r->nranks != nranks) {
      snprintf(why, whyLen, "rank %d's vote is not the shim's (does every rank preload it?)", q);
      return -1;
    }
    if (!r->ok) {
      snprintf(why, whyLen, "rank %d: %s", q, r->why);
      return -1;
    }
    if (r->host != all[0].host) {
      snprintf(why, whyLen, "ranks 0 and %d are on different nodes", q);
      return -1;
    }
    for (int p = 0; p < q; p++)
      if (all[p].pid == r->pid) {
        snprintf(why, whyLen, "ranks %d and %d are one process (one rank per process only)", p, q);
        return -1;
      }
    *colls &= r->colls;
  }
  if (!*colls) {
    snprintf(why, whyLen, "RELAYCC_SHIM_COLLS: no collective that every rank takes");
    return -1;
  }
  if (gSet.testShm) return 1;
  /* Every pair maps each other's memory (the one-shot and IPC routes): each
   * rank tests its peers' GPUs from its own. */
  for (int q = 0; q < nranks; q++) {
    if (q == rank) continue;
    int pd = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&pd, all[q].busId) != cudaSuccess) {
      cudaGetLastError();
      snprintf(why, whyLen, "rank %d's GPU %s is not visible to rank %d", q, all[q].busId, rank);
      return 0;
    }
    /* A peer on this very GPU (ranks sharing one: NCCL accepted the comm, so each has its own NCCL_HOSTID or
     * 2.30's multi-rank mode is on): its memory opens through IPC without peer access. */
    if (pd == dev) continue;
    if (cudaDeviceCanAccessPeer(&can, dev, pd) != cudaSuccess || !can) {
      cudaGetLastError();
      snprintf(why, whyLen, "rank %d cannot map rank %d's GPU %s", rank, q, all[q].busId);
      return 0;
    }
  }
  return 1;
}

/* All-or-none on a flag: 1 when every rank's is 1; else who names the first
 * rank whose is not (-1 when the vote itself failed). */
static int voteAll(shimComm* sc, shimVoteBufs* v, int nranks, int flag, int* who, char* why, size_t whyLen) {
  int32_t mine = flag;
  const int32_t* all = v->all;
  *who = -1;
  int ok = voteGather(sc, v, nranks, &mine, sizeof mine, why, whyLen) == relaySuccess;
  for (int q = 0; q < nranks && ok; q++)
    if (!all[q]) {
      ok = 0;
      *who = q;
    }
  return ok;
}

/* Build the relay comm of one rank: over the real comm, or over shm under
 * the test hook. */
static relayComm_t createState(ncclComm_t comm, int rank, int nranks, const shimVoteRecord* rank0, char* why,
                               size_t whyLen) {
  relayComm_t rc = NULL;
  relayResult_t r;
  /* A guest either way: no deadline unless the user set RELAYCC_TIMEOUT_MS (init.c). */
  if (gSet.testShm) {
    /* Named by rank 0's process and attach count, which every rank read in vote 1: comms attached by
     * several threads at once get the same name on every rank whatever order each rank's threads took. */
    char job[256];
    snprintf(job, sizeof job, "%s-%lld-c%d", gSet.testShm, (long long)rank0->pid, (int)rank0->serial);
    r = relayInitShm(&rc, nranks, rank, job, NULL, 1);
  } else {
    r = relayCommInitNccl(&rc, comm, NULL);
  }
  if (rc) rc->forwardDeclined = 1; /* a declined route is NCCL's call on the user's comm (api.c) */
  if (r != relaySuccess) {
    snprintf(why, whyLen, "relaycc init: %s", relayGetLastError(NULL));
    return NULL;
  }
  if (rank == gSet.testFailRank) { /* the test hook: this rank fails after its peers succeeded */
    relayCommDestroy(rc);
    snprintf(why, whyLen, "RELAYCC_SHIM_TEST_FAIL_RANK=%d", rank);
    return NULL;
  }
  return rc;
}

/* Decide and build the state of one comm, at its first collective outside a group: a point of the
 * comm's call sequence that every rank reaches (NCCL's collectives come in the same order on every
 * rank), unlike an init (a nonblocking split's *newcomm is NULL on some ranks until it completes) or a
 * "ready" poll (each rank's own). Collective over the comm's ranks; every local check takes part in a
 * vote and votes no rather than returning early. */
static void attachComm(shimComm* sc) {
  ncclComm_t comm = sc->nccl;
  sc->attached = 1;
  int nranks = 0, rank = -1, dev = -1, prev = -1;
  if (relayNccl.ncclCommCount(comm, &nranks) != ncclSuccess ||
      relayNccl.ncclCommUserRank(comm, &rank) != ncclSuccess ||
      relayNccl.ncclCommCuDevice(comm, &dev) != ncclSuccess) {
    say(0, comm, rank, nranks,
        "no relaycc state: cannot query the comm (its peers' vote waits for this rank)");
    return;
  }
  sc->nranks = nranks;
  sc->rank = rank;
  sc->dev = dev;
  /* A one-rank comm has nothing to move; every rank (the one) agrees. */
  if (nranks < 2) {
    say(1, comm, rank, nranks, "no relaycc state: a comm of one rank");
    return;
  }
  shimVoteBufs v;
  if (!voteBufsGet(&v, nranks, sizeof(shimVoteRecord))) {
    voteBufsFree(&v, 0);
    say(0, comm, rank, nranks,
        "no relaycc state: no memory for the vote (its peers' vote waits for this rank)");
    return;
  }
  if (!gSet.testShm) {
    cudaGetDevice(&prev);
    if (prev != dev) cudaSetDevice(dev); /* relayCommInitNccl works on the comm's device */
  }
  char why[256] = "";
  shimVoteRecord me;
  int who = -1;
  unsigned colls = 0;
  localRecord(rank, nranks, dev, &me);
  me.serial = atomic_fetch_add(&gCommSerial, 1);
  /* Vote 1: who everyone is and what each would take. Vote 2: whether every rank can (the peer-access
   * test is each rank's own). Vote 3: whether every rank built its state. */
  relayResult_t vr = voteGather(sc, &v, nranks, &me, sizeof me, why, sizeof why);
  int ok = vr == relaySuccess;
  int verdict = ok ? judge(v.all, nranks, rank, dev, &colls, why, sizeof why) : -1;
  /* Every rank read the same records: only the local peer-access test needs a vote of its own. */
  if (verdict >= 0 && !gSet.testShm) ok = voteAll(sc, &v, nranks, verdict, &who, why, sizeof why) && verdict;
  else ok = ok && verdict > 0;
  shimVoteRecord rank0 = *(const shimVoteRecord*)v.all; /* votes 2 and 3 overwrite v.all */
  /* Everything this rank can fail at happens before vote 3, so that a
   * failure declines for every rank. */
  free(sc->ranks);
  sc->ranks = ok ? malloc((size_t)nranks * sizeof *sc->ranks) : NULL;
  for (int q = 0; sc->ranks && q < nranks; q++) sc->ranks[q] = q;
  relayComm_t rc = NULL;
  if (ok) {
    if (!sc->ranks) snprintf(why, sizeof why, "rank %d: out of memory", rank);
    rc = sc->ranks ? createState(comm, rank, nranks, &rank0, why, sizeof why) : NULL;
    char why2[256] = "";
    ok = voteAll(sc, &v, nranks, rc != NULL, &who, why2, sizeof why2);
    vr = ok || who >= 0 ? relaySuccess : relaySystemError;
    if (!ok && rc) {
      relayCommDestroy(rc);
      rc = NULL;
      if (who >= 0) snprintf(why, sizeof why, "rank %d failed to create its relaycc state", who);
      else snprintf(why, sizeof why, "%s", why2);
    }
  }
  voteBufsFree(&v, vr == relayTimeout);
  if (!gSet.testShm && prev >= 0 && prev != dev) cudaSetDevice(prev);
  if (!rc) {
    if (!why[0] && who >= 0) snprintf(why, sizeof why, "rank %d cannot", who);
    say(1, comm, rank, nranks, "no relaycc state: %s", why);
    return;
  }
  sc->colls = colls;
  atomic_store(&sc->rc, rc);
  say(1, comm, rank, nranks, "relaycc state (%s transport, topology %s)", rc->tp->name,
      rc->topo ? "modelled" : "none");
}

/* Forget a comm (its destroy, finalize or abort): no new call holds it, a vote in it ends; then, once
 * no call holds it, relaycc's state is released (abort: its kernels and waits were woken first). */
static relayComm_t closeComm(ncclComm_t comm, shimComm** out) {
  pthread_mutex_lock(&gLock);
  shimComm* sc = findLocked(comm);
  if (sc) atomic_store(&sc->closing, 1);
  pthread_mutex_unlock(&gLock);
  *out = sc;
  return sc ? atomic_load(&sc->rc) : NULL;
}

static void freeComm(shimComm* sc, int abort) {
  if (!sc) return;
  uint64_t t0 = relayNowNs();
  pthread_mutex_lock(&gLock);
  ncclComm_t comm = sc->nccl;
  if (sc->refs > 0) say(2, comm, sc->rank, sc->nranks, "release waits for %d call(s) holding it", sc->refs);
  while (sc->refs > 0) pthread_cond_wait(&gUnheld, &gLock);
  relayComm_t rc = atomic_exchange(&sc->rc, NULL);
  sc->nccl = NULL; /* the slot may be reused by a later comm */
  pthread_mutex_unlock(&gLock);
  if (rc && abort) relayCommAbort(rc);
  else if (rc) relayCommDestroy(rc);
  /* Where a teardown waits (torch's destroy_process_group under torchrun 8 outlived its step twice): the
   * trace says how long relaycc's part took, and the caller's line after it NCCL's. */
  say(2, comm, sc->rank, sc->nranks, "relaycc's state %s in %.1f ms",
      rc ? (abort ? "aborted" : "freed") : "absent", (double)(relayNowNs() - t0) / 1e6);
}

/* ---- groups ------------------------------------------------------------------ */

/* NCCL's group depth is per thread. */
static _Thread_local int tDepth;

/* Every function the shim takes over, and its profiling twin pnccl<Name> (what a profiler's wrapper
 * calls), share one body that forwards to the twin it was called as: a call through pnccl* is
 * tracked as its nccl* name (group depth, attach, routing, destroy and abort). */
#define SHIM_TWINS(name, impl, params, ...)                     \
  ncclResult_t name params {                                    \
    if (!SHIM_HAS(name)) return relayShimMissing(#name);        \
    return impl(relayNccl.name, __VA_ARGS__);                   \
  }                                                             \
  ncclResult_t p##name params {                                 \
    if (!SHIM_HAS(p##name)) return relayShimMissing("p" #name); \
    return impl(relayNccl.p##name, __VA_ARGS__);                \
  }

static ncclResult_t groupStart(ncclResult_t (*fwd)(void), int unused) {
  (void)unused;
  ncclResult_t r = fwd();
  if (r == ncclSuccess) tDepth++;
  return r;
}
SHIM_TWINS(ncclGroupStart, groupStart, (void), 0)

/* ncclGroupEnd and ncclGroupSimulateEnd (which ends the group without running it) both close one level. */
static ncclResult_t groupEnd(ncclResult_t (*fwd)(void), int unused) {
  (void)unused;
  ncclResult_t r = fwd();
  if (tDepth > 0) tDepth--;
  return r;
}
SHIM_TWINS(ncclGroupEnd, groupEnd, (void), 0)

static ncclResult_t groupSimulateEnd(ncclResult_t (*fwd)(ncclSimInfo_t*), ncclSimInfo_t* info) {
  ncclResult_t r = fwd(info);
  if (tDepth > 0) tDepth--;
  return r;
}
SHIM_TWINS(ncclGroupSimulateEnd, groupSimulateEnd, (ncclSimInfo_t * simInfo), simInfo)

/* ---- destroy, abort, revoke, errors ------------------------------------------- */

/* Finalize and destroy: relaycc's work on the comm ends before NCCL flushes or frees it. */
static ncclResult_t commRelease(ncclResult_t (*fwd)(ncclComm_t), ncclComm_t comm) {
  shimComm* sc;
  closeComm(comm, &sc);
  freeComm(sc, 0);
  uint64_t t0 = relayNowNs();
  ncclResult_t r = fwd(comm);
  say(2, comm, -1, -1, "NCCL's finalize/destroy returned %d in %.1f ms", (int)r,
      (double)(relayNowNs() - t0) / 1e6);
  return r;
}
SHIM_TWINS(ncclCommFinalize, commRelease, (ncclComm_t comm), comm)
SHIM_TWINS(ncclCommDestroy, commRelease, (ncclComm_t comm), comm)

/* relaycc's abort flags first (its host waits and kernels end), then NCCL's abort (a kernel of NCCL's
 * that relaycc's depends on ends too), then relaycc frees, once no call holds the comm. Freeing first
 * would wait (up to the drain's 5 s) on a device still stuck on that very comm. */
static ncclResult_t commAbort(ncclResult_t (*fwd)(ncclComm_t), ncclComm_t comm) {
  shimComm* sc;
  relayComm_t rc = closeComm(comm, &sc);
  if (rc) relayCommAbortFlags(rc);
  ncclResult_t r = fwd(comm);
  freeComm(sc, 1);
  return r;
}
SHIM_TWINS(ncclCommAbort, commAbort, (ncclComm_t comm), comm)

/* NCCL 2.28.9's revoke stops the comm's in-flight work: relaycc's waits and kernels on it end too
 * (abort flags), and its later calls are NCCL's (which fails them, revoked); its state is freed at
 * the comm's destroy. */
static ncclResult_t commRevoke(ncclResult_t (*fwd)(ncclComm_t, int), ncclComm_t comm, int flags) {
  pthread_mutex_lock(&gLock);
  shimComm* sc = findLocked(comm);
  relayComm_t rc = sc ? atomic_load(&sc->rc) : NULL;
  if (sc) atomic_store(&sc->revoked, 1);
  if (rc) relayCommAbortFlags(rc); /* under the lock: no destroy frees rc meanwhile */
  pthread_mutex_unlock(&gLock);
  return fwd(comm, flags);
}
SHIM_TWINS(ncclCommRevoke, commRevoke, (ncclComm_t comm, int revokeFlags), comm, revokeFlags)

/* relaycc's failure on this comm, a host call's or a kernel's (the error word it leaves), as
 * asyncNccl's code; sticky; said once, with the rank and the peer. */
static ncclResult_t relayAsyncError(shimComm* sc) {
  int first = atomic_load(&sc->asyncErr);
  if (first != ncclSuccess) return (ncclResult_t)first;
  relayComm_t rc = atomic_load(&sc->rc); /* non-NULL: rank and nranks were set before it */
  char why[512];
  relayResult_t e = rc ? relayCommAsyncError(rc, why, sizeof why) : relaySuccess;
  if (e == relaySuccess) return ncclSuccess;
  if (atomic_compare_exchange_strong(&sc->asyncErr, &first, (int)asyncNccl(e)))
    say(0, sc->nccl, sc->rank, sc->nranks, "relaycc failed on this comm: %s", why);
  return (ncclResult_t)atomic_load(&sc->asyncErr);
}

static ncclResult_t commGetAsyncError(ncclResult_t (*fwd)(ncclComm_t, ncclResult_t*), ncclComm_t comm,
                                      ncclResult_t* asyncError) {
  ncclResult_t r = fwd(comm, asyncError);
  if (r != ncclSuccess || !asyncError || *asyncError != ncclSuccess) return r;
  pthread_mutex_lock(&gLock);
  shimComm* sc = findLocked(comm);
  if (sc && !atomic_load(&sc->closing)) sc->refs++;
  else sc = NULL;
  pthread_mutex_unlock(&gLock);
  if (!sc) return r;
  *asyncError = relayAsyncError(sc);
  unholdComm(sc);
  return r;
}
SHIM_TWINS(ncclCommGetAsyncError, commGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError), comm,
           asyncError)

/* ---- the four collectives ------------------------------------------------ */

/* The comm's slot, held, when this call goes to relaycc, else NULL (unheld). The comm's first
 * collective outside a group (and outside a capture: the votes synchronize the host) attaches it,
 * whatever the call. Every test after that reads only the call and what every rank agreed, and a
 * comm whose relaycc state failed keeps routing as its peers do (the call fails, reported by
 * ncclCommGetAsyncError): a rank that forwarded alone would meet its peers' relaycc call with NCCL's. */
static shimComm* routeFor(relayCollective_t coll, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  if (tDepth > 0 || !relayNccl.ncclAllGather) return NULL;
  shimComm* sc = holdComm(comm);
  if (!sc) return NULL;
  if (!sc->attached) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    int capturing = !gSet.testShm && (cudaStreamIsCapturing(stream, &cap) != cudaSuccess ||
                                      cap != cudaStreamCaptureStatusNone);
    if (capturing) cudaGetLastError(); /* every rank captures alike: all attach at a later call */
    else attachComm(sc);
  }
  relayComm_t rc = atomic_load(&sc->revoked) ? NULL : atomic_load(&sc->rc);
  int take = rc && (sc->colls & (1u << coll)) && (unsigned)dt < relayNumTypes &&
             count > 0 &&                                               /* fp8: NCCL's */
             (!relayCollReduces(coll) || (unsigned)op < relayNumOps) && /* PreMulSum */
             (unsigned)root < (unsigned)sc->nranks;                     /* a bad root: NCCL's error */
  if (take && !sc->haveStream) { /* the first routable call: every rank's first alike */
    sc->stream = stream;
    sc->haveStream = 1;
  }
  if (take && stream != sc->stream) {
    say(2, comm, sc->rank, sc->nranks, "%s on stream %p, not the comm's first %p: NCCL's",
        relayCollName(coll), (void*)stream, (void*)sc->stream);
    take = 0;
  }
  if (take) {
    /* core's answer from the key its call would build: the shim keeps no key of its own */
    relayLayout_t layout = {1, sc->nranks, sc->ranks};
    relayStream_t s = gSet.testShm ? NULL : (relayStream_t)stream;
    take = relayCommRoutesCall(rc, coll, &count, (relayDataType_t)dt,
                               relayCollReduces(coll) ? (relayRedOp_t)op : relaySum, &layout, root, s);
  }
  if (!take) unholdComm(sc);
  return take ? sc : NULL;
}

/* 1 when relaycc ran the call (its result in *out); 0 when the call is NCCL's after all: relaycc's
 * route declined on every rank (core's vote), nothing moved. Unholds the slot. */
static int runRelay(shimComm* sc, relayCollective_t coll, const void* send, void* recv, size_t count,
                    ncclDataType_t dt, ncclRedOp_t op, int root, cudaStream_t stream, ncclResult_t* out) {
  relayComm_t rc = atomic_load(&sc->rc);
  relayLayout_t layout = {1, sc->nranks, sc->ranks};
  relayStream_t s = gSet.testShm ? NULL : (relayStream_t)stream;
  /* NCCL runs on the stream's device whatever the current one is; relaycc
   * launches its kernels on the current device. */
  int prev = -1;
  if (!gSet.testShm && cudaGetDevice(&prev) == cudaSuccess && prev != sc->dev) cudaSetDevice(sc->dev);
  relayResult_t r = relayCommCall(rc, coll, send, recv, &count, (relayDataType_t)dt,
                                  relayCollReduces(coll) ? (relayRedOp_t)op : relaySum, &layout, root, s);
  if (prev >= 0 && prev != sc->dev) cudaSetDevice(prev);
  int declined = r == relayNotSupported && rc->callDeclined;
  say(2, sc->nccl, sc->rank, sc->nranks, "%s count %zu dtype %d -> %s: %s", relayCollName(coll), count,
      (int)dt, declined ? "declined, NCCL's" : relayRouteName(rc->last.route),
      declined ? relayGetLastError(rc) : relayGetErrorString(r));
  if (!declined && r != relaySuccess) {
    /* Reported now and by every later ncclCommGetAsyncError (the first error's code); the comm's next
     * calls still go to relaycc, which fails them as its peers' calls fail. */
    int first = ncclSuccess;
    if (atomic_compare_exchange_strong(&sc->asyncErr, &first, (int)asyncNccl(r)))
      say(0, sc->nccl, -1, -1, "%s", relayGetLastError(rc)); /* its prefix names the call and the rank */
    *out = (ncclResult_t)atomic_load(&sc->asyncErr);
  } else {
    *out = toNccl(r);
  }
  unholdComm(sc);
  return !declined;
}

static ncclResult_t reduceLike(ncclResult_t (*fwd)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                                   ncclComm_t, cudaStream_t),
                               relayCollective_t coll, const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  shimComm* sc = routeFor(coll, count, datatype, op, 0, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, coll, sendbuff, recvbuff, count, datatype, op, 0, stream, &r)) return r;
  return fwd(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
SHIM_TWINS(ncclAllReduce, reduceLike,
           (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
            ncclComm_t comm, cudaStream_t stream),
           relayCollectiveAllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream)
SHIM_TWINS(ncclReduceScatter, reduceLike,
           (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
            ncclComm_t comm, cudaStream_t stream),
           relayCollectiveReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream)

/* All-gather and all-to-all: no op. In place all-to-all is NCCL's to refuse or do (relaycc rejects it). */
static ncclResult_t gatherLike(ncclResult_t (*fwd)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                                   cudaStream_t),
                               relayCollective_t coll, const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  shimComm* sc = routeFor(coll, count, datatype, ncclSum, 0, comm, stream);
  if (sc && coll == relayCollectiveAllToAll && sendbuff == recvbuff) {
    unholdComm(sc);
    sc = NULL;
  }
  ncclResult_t r;
  if (sc && runRelay(sc, coll, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream, &r)) return r;
  return fwd(sendbuff, recvbuff, count, datatype, comm, stream);
}
SHIM_TWINS(ncclAllGather, gatherLike,
           (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
            cudaStream_t stream),
           relayCollectiveAllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream)
SHIM_TWINS(ncclAlltoAll, gatherLike,
           (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
            cudaStream_t stream),
           relayCollectiveAllToAll, sendbuff, recvbuff, count, datatype, comm, stream)

/* Broadcast and reduce: the whole comm is the one group in rank order, so NCCL's root (a comm rank) is the
 * root's position in it. ncclBcast is the in-place broadcast (one buffer). */
static ncclResult_t rootedLike(
    ncclResult_t (*fwd)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        cudaStream_t),
    ncclResult_t (*fwdBcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t),
    ncclResult_t (*fwdInPlace)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t),
    relayCollective_t coll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  shimComm* sc = routeFor(coll, count, datatype, op, root, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, coll, sendbuff, recvbuff, count, datatype, op, root, stream, &r)) return r;
  if (fwdInPlace) return fwdInPlace(recvbuff, count, datatype, root, comm, stream);
  if (fwdBcast) return fwdBcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return fwd(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
static ncclResult_t reduceRooted(ncclResult_t (*fwd)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                                     int, ncclComm_t, cudaStream_t),
                                 const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return rootedLike(fwd, NULL, NULL, relayCollectiveReduce, sendbuff, recvbuff, count, datatype, op, root,
                    comm, stream);
}
static ncclResult_t broadcastRooted(ncclResult_t (*fwd)(const void*, void*, size_t, ncclDataType_t, int,
                                                        ncclComm_t, cudaStream_t),
                                    const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rootedLike(NULL, fwd, NULL, relayCollectiveBroadcast, sendbuff, recvbuff, count, datatype, ncclSum,
                    root, comm, stream);
}
static ncclResult_t bcastRooted(ncclResult_t (*fwd)(void*, size_t, ncclDataType_t, int, ncclComm_t,
                                                    cudaStream_t),
                                void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return rootedLike(NULL, NULL, fwd, relayCollectiveBroadcast, buff, buff, count, datatype, ncclSum, root,
                    comm, stream);
}
SHIM_TWINS(ncclReduce, reduceRooted,
           (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
            int root, ncclComm_t comm, cudaStream_t stream),
           sendbuff, recvbuff, count, datatype, op, root, comm, stream)
SHIM_TWINS(ncclBroadcast, broadcastRooted,
           (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
            ncclComm_t comm, cudaStream_t stream),
           sendbuff, recvbuff, count, datatype, root, comm, stream)
SHIM_TWINS(ncclBcast, bcastRooted,
           (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
            cudaStream_t stream),
           buff, count, datatype, root, comm, stream)
