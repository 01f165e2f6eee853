/*
 * librelaycc_shim.so: an NCCL interposer (LD_PRELOAD). The real NCCL owns
 * every communicator; the shim only takes the calls relaycc is predicted to
 * do faster, and forwards everything else unchanged (shim_fwd.c).
 *
 * Per communicator state: after a successful ncclCommInitRank,
 * ncclCommInitRankConfig or ncclCommSplit (at the group's end when issued in
 * ncclGroupStart/End, as nccl-tests does; for a nonblocking comm when the
 * wrapped ncclCommGetAsyncError first reports it ready), the ranks vote over
 * the real comm whether relaycc can serve it: one rank per process, one
 * host, every pair able to map each other's memory. Only when all can does
 * every rank build a relay comm over it (relayCommInitNccl), and a second
 * vote keeps it only when every rank built one: all ranks have state or none
 * (invariant 4). Comms of several devices in one process (ncclCommInitAll, a
 * group of several inits) are never voted on: their ranks share a thread.
 *
 * Routing: ncclAllReduce, ncclReduceScatter, ncclAllGather and ncclAlltoAll
 * go to relaycc when the comm has state, the calling thread is outside any
 * group (depth counted per thread, as NCCL counts it), dtype and op are
 * relaycc's, and relayRouteBeatsNative says relaycc's route beats NCCL's own
 * collective for that size on the comm's topology. Each test reads only the
 * call and the comm, so every rank decides alike.
 *
 * relaycc is a guest (relayNccl.guest): it never aborts or preconnects the
 * user's communicator. An error it meets is the call's return code and stays
 * reported by ncclCommGetAsyncError (wrapped); the comm's later calls are
 * forwarded.
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

#include <cuda_runtime.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "core/core.h"
#include "core/init.h"
#include "plan/plan.h"
#include "relaycc_nccl.h"
#include "route/route.h"
#include "shim/shim.h"

/* ---- settings ------------------------------------------------------------ */

/* Every setting of the shim, read once (relayShimReady) in readSettings. */
typedef struct {
  int on;              /* RELAYCC_SHIM: 0 forwards every call (default 1) */
  unsigned colls;      /* RELAYCC_SHIM_COLLS: bit per relayColl_t taken (default the four) */
  int debug;           /* RELAYCC_DEBUG: 1 one line per comm, 2 also each routed call */
  const char* lib;     /* RELAYCC_SHIM_NCCL: the real library's path (default: the loaded one) */
  int timeoutMs;       /* RELAYCC_TIMEOUT_MS as the user set it, else 0: no deadline (a guest's) */
  const char* testShm; /* RELAYCC_SHIM_TEST_SHM: test hook, state over the shm transport (job name) */
  int testFailRank;    /* RELAYCC_SHIM_TEST_FAIL_RANK: test hook, this rank fails state creation */
} shimSettings;

#define SHIM_ALL_COLLS                                                                              \
  ((1u << RELAY_COLL_ALLGATHER) | (1u << RELAY_COLL_REDUCESCATTER) | (1u << RELAY_COLL_ALLREDUCE) | \
   (1u << RELAY_COLL_ALLTOALL))

static shimSettings gSet;

/* RELAYCC_SHIM_COLLS: a comma list of collective names (relayParseColl's:
 * allreduce, all_reduce, ar, ...); one unknown name takes none, so a typo
 * never routes more than asked. */
static unsigned parseColls(const char* list) {
  if (!list) return SHIM_ALL_COLLS;
  unsigned bits = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    relayColl_t c;
    if (relayParseColl(tok, &c) != 0) {
      fprintf(stderr,
              "relaycc shim: RELAYCC_SHIM_COLLS=\"%s\": \"%s\" is not allreduce, reducescatter, allgather or "
              "alltoall; taking no collective\n",
              list, tok);
      return 0;
    }
    bits |= 1u << c;
  }
  return bits;
}

/* The shim's settings are PROCESS rows of the parameter table (read before any comm exists); its vote
 * deadline is the RANK row RELAYCC_TIMEOUT_MS where the user set it, else none: the comms are the user's
 * (invariant 11), and relaycc's state over them is a guest's (relayCommInitNccl) likewise. */
static void readSettings(void) {
  gSet.on = relayParamProcess(RELAY_P_SHIM) != 0;
  gSet.colls = parseColls(relayParamEnvText(RELAY_P_SHIM_COLLS));
  gSet.debug = relayDebugLevel();
  gSet.lib = relayParamEnvText(RELAY_P_SHIM_NCCL);
  const char* tv = relayParamEnvText(RELAY_P_TIMEOUT_MS);
  long t = tv ? strtol(tv, NULL, 0) : 0;
  gSet.timeoutMs = t > 0 && t <= INT_MAX ? (int)t : 0;
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

/* ---- per communicator state ---------------------------------------------- */

/* One user communicator the shim knows. Slots are never freed (a call on
 * another thread may still hold one while ncclCommAbort runs, as NCCL
 * allows); a destroyed comm's slot is reused. */
typedef struct {
  ncclComm_t nccl;         /* NULL: free slot */
  _Atomic(relayComm_t) rc; /* relaycc's state, NULL when none */
  int pendingReady;        /* nonblocking comm: build at the first "ready" */
  int nranks, rank, dev;
  int* ranks;            /* 0..nranks-1: the one-group layout */
  ncclResult_t asyncErr; /* relaycc's error on this comm, reported by ncclCommGetAsyncError */
  /* The stream of the comm's first collective: relaycc routes only calls on it. NCCL orders a
   * comm's calls across streams; relaycc's one-shot and bw regions assume their calls come in the
   * order each rank issued them on one stream, so a call on another stream is NCCL's. */
  cudaStream_t stream;
  int haveStream;
} shimComm;

#define SHIM_MAX_COMMS 256

static shimComm gComms[SHIM_MAX_COMMS];
static pthread_mutex_t gLock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int gNumState;   /* comms with state: 0 lets calls skip the lookup */
static atomic_int gCommSerial; /* comms voted on in this process (the test hook's job names) */

static shimComm* findComm(ncclComm_t comm) {
  shimComm* sc = NULL;
  pthread_mutex_lock(&gLock);
  for (int i = 0; i < SHIM_MAX_COMMS && !sc; i++)
    if (gComms[i].nccl == comm) sc = &gComms[i];
  pthread_mutex_unlock(&gLock);
  return sc;
}

static shimComm* addComm(ncclComm_t comm) {
  shimComm* sc = NULL;
  pthread_mutex_lock(&gLock);
  for (int i = 0; i < SHIM_MAX_COMMS && !sc; i++)
    if (!gComms[i].nccl) sc = &gComms[i];
  if (sc) {
    free(sc->ranks);
    memset(sc, 0, sizeof *sc);
    sc->nccl = comm;
  }
  pthread_mutex_unlock(&gLock);
  return sc;
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
  if (rank >= 0)
    fprintf(stderr, "relaycc shim: comm %p rank %d/%d: %s\n", (void*)comm, rank, nranks, msg);
  else
    fprintf(stderr, "relaycc shim: comm %p: %s\n", (void*)comm, msg);
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

/* A vote: an ncclAllGather of `bytes` per rank over the user's comm, with a
 * deadline. On GPUs through device memory on a stream of our own; under the
 * test hook the (fake) library moves host memory. */
static relayResult_t voteGather(ncclComm_t comm, int nranks, const void* mine, void* all, size_t bytes,
                                char* why, size_t whyLen) {
  int gpu = !gSet.testShm;
  size_t total = bytes * (size_t)(nranks + 1);
  char* buf = NULL;
  cudaStream_t s = NULL;
  if (gpu) {
    if (cudaMalloc((void**)&buf, total) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMemcpy(buf, mine, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      snprintf(why, whyLen, "vote: %s", cudaGetErrorString(cudaGetLastError()));
      if (buf) cudaFree(buf);
      if (s) cudaStreamDestroy(s);
      return relayUnhandledCudaError;
    }
  } else {
    buf = malloc(total);
    if (!buf) return relaySystemError;
    memcpy(buf, mine, bytes);
  }
  relayResult_t res = relaySuccess;
  uint64_t deadline = gSet.timeoutMs ? relayNowNs() + (uint64_t)gSet.timeoutMs * 1000000ull : UINT64_MAX;
  ncclResult_t r = relayNccl.ncclAllGather(buf, buf + bytes, bytes, ncclInt8, comm, s);
  while (r == ncclInProgress) { /* a nonblocking comm: poll until enqueued */
    ncclResult_t ae = ncclSuccess;
    r = relayNccl.ncclCommGetAsyncError(comm, &ae);
    if (r == ncclSuccess) r = ae;
    if (r == ncclInProgress && relayNowNs() > deadline) break;
  }
  if (r != ncclSuccess) {
    snprintf(why, whyLen, "vote: ncclAllGather: %s", relayNccl.ncclGetErrorString(r));
    res = r == ncclInProgress ? relayTimeout : relaySystemError;
  }
  if (res == relaySuccess && gpu) {
    cudaError_t e;
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady && relayNowNs() <= deadline) usleep(20);
    if (e == cudaSuccess) e = cudaMemcpy(all, buf + bytes, bytes * (size_t)nranks, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      snprintf(why, whyLen, "vote: %s",
               e == cudaErrorNotReady ? "a rank did not vote in time" : cudaGetErrorString(e));
      res = e == cudaErrorNotReady ? relayTimeout : relayUnhandledCudaError;
    }
  } else if (res == relaySuccess) {
    memcpy(all, buf + bytes, bytes * (size_t)nranks);
  }
  if (gpu) {
    if (res != relayTimeout) cudaFree(buf); /* a vote still in flight keeps its buffer */
    cudaStreamDestroy(s);
  } else {
    free(buf);
  }
  return res;
}

/* What each rank says in the eligibility vote. */
typedef struct {
  uint32_t magic;
  int32_t rank, nranks, ok;
  int64_t pid;
  uint64_t host; /* hash of the host name and boot id: one node */
  char busId[32];
  char why[96]; /* why this rank cannot, when !ok */
} shimVoteRecord;

static uint64_t hostIdentity(void) {
  char id[512] = "";
  gethostname(id, 255);
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    size_t n = strlen(id);
    if (!fgets(id + n, (int)(sizeof id - n), f)) id[n] = 0;
    fclose(f);
  }
  return relayHash64(RELAY_HASH_SEED, id, strlen(id));
}

/* This rank's half of the eligibility test. */
static void localRecord(ncclComm_t comm, int rank, int nranks, int dev, shimVoteRecord* me) {
  memset(me, 0, sizeof *me);
  me->magic = 0x7368696du; /* "shim" */
  me->rank = rank;
  me->nranks = nranks;
  me->pid = (int64_t)getpid();
  me->host = hostIdentity();
  me->ok = 1;
  if (!gSet.testShm && cudaDeviceGetPCIBusId(me->busId, (int)sizeof me->busId, dev) != cudaSuccess) {
    cudaGetLastError();
    me->ok = 0;
    snprintf(me->why, sizeof me->why, "no PCI bus id for device %d", dev);
  }
  (void)comm;
}

/* 1 when all records allow relaycc; else why names the first rank that does
 * not. Every rank sees the same records, so all answer alike except for the
 * peer-access test, which is local and voted again. */
static int judge(const shimVoteRecord* all, int nranks, int rank, int dev, char* why, size_t whyLen) {
  for (int q = 0; q < nranks; q++) {
    const shimVoteRecord* r = &all[q];
    if (r->magic != 0x7368696du || r->rank != q || r->nranks != nranks) {
      snprintf(why, whyLen, "rank %d's vote is not the shim's (does every rank preload it?)", q);
      return 0;
    }
    if (!r->ok) {
      snprintf(why, whyLen, "rank %d: %s", q, r->why);
      return 0;
    }
    if (r->host != all[0].host) {
      snprintf(why, whyLen, "ranks 0 and %d are on different nodes", q);
      return 0;
    }
    for (int p = 0; p < q; p++)
      if (all[p].pid == r->pid) {
        snprintf(why, whyLen, "ranks %d and %d are one process (one rank per process only)", p, q);
        return 0;
      }
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
    if (pd == dev || cudaDeviceCanAccessPeer(&can, dev, pd) != cudaSuccess || !can) {
      cudaGetLastError();
      snprintf(why, whyLen, "rank %d cannot map rank %d's GPU %s", rank, q, all[q].busId);
      return 0;
    }
  }
  return 1;
}

/* All-or-none on a flag: 1 when every rank's is 1; else who names the first
 * rank whose is not (-1 when the vote itself failed). */
static int voteAll(ncclComm_t comm, int nranks, int flag, int* who, char* why, size_t whyLen) {
  int32_t mine = flag, *all = calloc((size_t)nranks, sizeof *all);
  *who = -1;
  if (!all) return 0;
  int ok = voteGather(comm, nranks, &mine, all, sizeof mine, why, whyLen) == relaySuccess;
  for (int q = 0; q < nranks && ok; q++)
    if (!all[q]) {
      ok = 0;
      *who = q;
    }
  free(all);
  return ok;
}

/* Build the relay comm of one rank: over the real comm, or over shm under
 * the test hook. */
static relayComm_t createState(ncclComm_t comm, int rank, int nranks, int serial, char* why, size_t whyLen) {
  relayComm_t rc = NULL;
  relayResult_t r;
  /* A guest either way: no deadline unless the user set RELAYCC_TIMEOUT_MS (init.c). */
  if (gSet.testShm) {
    char job[256];
    snprintf(job, sizeof job, "%s-c%d", gSet.testShm, serial);
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

/* Decide and build the state of one comm (collective over its ranks; every
 * rank of the comm calls it at the same point of its NCCL call sequence). */
static void attachComm(shimComm* sc, const char* how) {
  ncclComm_t comm = sc->nccl;
  int nranks = 0, rank = -1, dev = -1, prev = -1;
  if (relayNccl.ncclCommCount(comm, &nranks) != ncclSuccess ||
      relayNccl.ncclCommUserRank(comm, &rank) != ncclSuccess ||
      relayNccl.ncclCommCuDevice(comm, &dev) != ncclSuccess) {
    say(1, comm, rank, nranks, "no relaycc state: cannot query the comm");
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
  if (!gSet.testShm) {
    cudaGetDevice(&prev);
    if (prev != dev) cudaSetDevice(dev); /* relayCommInitNccl works on the comm's device */
  }
  char why[256] = "";
  shimVoteRecord me, *all = calloc((size_t)nranks, sizeof *all);
  int who = -1, ok = all != NULL;
  localRecord(comm, rank, nranks, dev, &me);
  /* Vote 1: who everyone is. Vote 2: whether every rank can (the peer-access
   * test is each rank's own). Vote 3: whether every rank built its state. */
  if (ok) ok = voteGather(comm, nranks, &me, all, sizeof me, why, sizeof why) == relaySuccess;
  int mineOk = ok && judge(all, nranks, rank, dev, why, sizeof why);
  free(all);
  if (ok) ok = voteAll(comm, nranks, mineOk, &who, why, sizeof why) && mineOk;
  int serial = atomic_fetch_add(&gCommSerial, 1);
  /* Everything this rank can fail at happens before vote 3, so that a
   * failure declines for every rank. */
  free(sc->ranks);
  sc->ranks = ok ? malloc((size_t)nranks * sizeof *sc->ranks) : NULL;
  if (ok && !sc->ranks) snprintf(why, sizeof why, "rank %d: out of memory", rank);
  for (int q = 0; sc->ranks && q < nranks; q++) sc->ranks[q] = q;
  relayComm_t rc = ok && sc->ranks ? createState(comm, rank, nranks, serial, why, sizeof why) : NULL;
  if (ok) {
    char why2[256] = "";
    ok = voteAll(comm, nranks, rc != NULL, &who, why2, sizeof why2);
    if (!ok && rc) {
      relayCommDestroy(rc);
      rc = NULL;
      if (who >= 0)
        snprintf(why, sizeof why, "rank %d failed to create its relaycc state", who);
      else
        snprintf(why, sizeof why, "%s", why2);
    }
  }
  if (!gSet.testShm && prev >= 0 && prev != dev) cudaSetDevice(prev);
  if (!rc) {
    if (!why[0] && who >= 0) snprintf(why, sizeof why, "rank %d cannot", who);
    say(1, comm, rank, nranks, "no relaycc state (%s): %s", how, why);
    return;
  }
  atomic_store(&sc->rc, rc);
  atomic_fetch_add(&gNumState, 1);
  say(1, comm, rank, nranks, "relaycc state (%s, %s transport, topology %s)", how, rc->tp->name,
      rc->topo ? "modelled" : "none");
}

/* Forget a comm: release relaycc's state (abort: wake its calls first). */
static void releaseComm(ncclComm_t comm, int abort) {
  shimComm* sc = findComm(comm);
  if (!sc) return;
  relayComm_t rc = atomic_exchange(&sc->rc, NULL);
  if (rc) {
    atomic_fetch_sub(&gNumState, 1);
    if (abort)
      relayCommAbort(rc);
    else
      relayCommDestroy(rc);
  }
  pthread_mutex_lock(&gLock);
  sc->nccl = NULL; /* the slot may be reused by a later comm */
  pthread_mutex_unlock(&gLock);
}

/* ---- groups and deferred inits -------------------------------------------- */

/* NCCL's group depth is per thread; so is the list of inits it deferred. */
static _Thread_local int tDepth;
enum { SHIM_MAX_PENDING = 64 };
static _Thread_local struct {
  ncclComm_t* slot; /* where NCCL writes the comm */
  int blocking;
} tPending[SHIM_MAX_PENDING];
static _Thread_local int tNumPending, tPendingLost;

static int configBlocking(const ncclConfig_t* config) {
  return !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

/* After an init call returned r for the comm at *slot. */
static void afterInit(ncclResult_t r, ncclComm_t* slot, int blocking, const char* how) {
  if ((r != ncclSuccess && r != ncclInProgress) || !slot) return;
  if (!gRoute) {
    if (tDepth == 0 && *slot)
      say(1, *slot, -1, -1, "no relaycc state: %s", gSet.on ? relayNccl.unusable : "RELAYCC_SHIM=0");
    return;
  }
  if (tDepth > 0) {
    if (tNumPending < SHIM_MAX_PENDING) {
      tPending[tNumPending].slot = slot;
      tPending[tNumPending].blocking = blocking;
      tNumPending++;
    } else {
      tPendingLost = 1;
    }
    return;
  }
  if (!*slot) return; /* ncclCommSplit with NCCL_SPLIT_NOCOLOR */
  shimComm* sc = addComm(*slot);
  if (!sc) {
    say(1, *slot, -1, -1, "no relaycc state: more than %d comms", SHIM_MAX_COMMS);
    return;
  }
  if (r == ncclInProgress || !blocking) {
    sc->pendingReady = 1; /* nonblocking: the first ready answer builds it */
    return;
  }
  attachComm(sc, how);
}

static void afterGroup(ncclResult_t r) {
  int n = tNumPending, lost = tPendingLost;
  tNumPending = 0;
  tPendingLost = 0;
  if (r != ncclSuccess && r != ncclInProgress) return;
  /* Several inits in one group: one thread drives several GPUs of these
   * comms (nccl-tests -g N); their ranks cannot each enter a vote. */
  if (n > 1 || lost) {
    for (int i = 0; i < n; i++)
      if (*tPending[i].slot)
        say(1, *tPending[i].slot, -1, -1,
            "no relaycc state: %d comms initialized in one group (several GPUs per "
            "process)",
            n);
    return;
  }
  if (n == 1) afterInit(r, tPending[0].slot, tPending[0].blocking, "at group end");
}

ncclResult_t ncclGroupStart(void) {
  if (!SHIM_HAS(ncclGroupStart)) return relayShimMissing("ncclGroupStart");
  ncclResult_t r = relayNccl.ncclGroupStart();
  if (r == ncclSuccess) tDepth++;
  return r;
}

ncclResult_t ncclGroupEnd(void) {
  if (!SHIM_HAS(ncclGroupEnd)) return relayShimMissing("ncclGroupEnd");
  ncclResult_t r = relayNccl.ncclGroupEnd();
  if (tDepth > 0 && --tDepth == 0) afterGroup(r);
  return r;
}

/* ---- init, destroy, errors -------------------------------------------------- */

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (!SHIM_HAS(ncclCommInitRank)) return relayShimMissing("ncclCommInitRank");
  ncclResult_t r = relayNccl.ncclCommInitRank(comm, nranks, commId, rank);
  afterInit(r, comm, 1, "ncclCommInitRank");
  return r;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  if (!SHIM_HAS(ncclCommInitRankConfig)) return relayShimMissing("ncclCommInitRankConfig");
  ncclResult_t r = relayNccl.ncclCommInitRankConfig(comm, nranks, commId, rank, config);
  afterInit(r, comm, configBlocking(config), "ncclCommInitRankConfig");
  return r;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!SHIM_HAS(ncclCommSplit)) return relayShimMissing("ncclCommSplit");
  ncclResult_t r = relayNccl.ncclCommSplit(comm, color, key, newcomm, config);
  /* NCCL's default for a child is its parent's blocking mode; the shim treats
   * an unset config as blocking and, when the split answers ncclInProgress,
   * waits for the ready answer instead. */
  afterInit(r, newcomm, configBlocking(config), "ncclCommSplit");
  return r;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!SHIM_HAS(ncclCommFinalize)) return relayShimMissing("ncclCommFinalize");
  releaseComm(comm, 0); /* relaycc's work on the comm ends before NCCL flushes it */
  return relayNccl.ncclCommFinalize(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!SHIM_HAS(ncclCommDestroy)) return relayShimMissing("ncclCommDestroy");
  releaseComm(comm, 0);
  return relayNccl.ncclCommDestroy(comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!SHIM_HAS(ncclCommAbort)) return relayShimMissing("ncclCommAbort");
  releaseComm(comm, 1); /* wake and end relaycc's kernels and waits first */
  return relayNccl.ncclCommAbort(comm);
}

/* relaycc's failure on this comm, a host call's or a kernel's (the error word it leaves), as
 * asyncNccl's code; sticky (later calls are forwarded); said once, with the rank and the peer. */
static ncclResult_t relayAsyncError(shimComm* sc) {
  if (sc->asyncErr != ncclSuccess) return sc->asyncErr;
  relayComm_t rc = atomic_load(&sc->rc);
  char why[512];
  relayResult_t e = rc ? relayCommAsyncError(rc, why, sizeof why) : relaySuccess;
  if (e == relaySuccess) return ncclSuccess;
  sc->asyncErr = asyncNccl(e);
  say(0, sc->nccl, sc->rank, sc->nranks, "relaycc failed on this comm: %s", why);
  return sc->asyncErr;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!SHIM_HAS(ncclCommGetAsyncError)) return relayShimMissing("ncclCommGetAsyncError");
  ncclResult_t r = relayNccl.ncclCommGetAsyncError(comm, asyncError);
  shimComm* sc = (r == ncclSuccess && asyncError) ? findComm(comm) : NULL;
  if (!sc) return r;
  if (sc->pendingReady && *asyncError == ncclSuccess) {
    sc->pendingReady = 0;
    attachComm(sc, "nonblocking, once ready");
  }
  if (*asyncError == ncclSuccess) *asyncError = relayAsyncError(sc);
  return r;
}

/* ---- the four collectives ------------------------------------------------ */

/* The comm's state when this call goes to relaycc, else NULL. */
static shimComm* routeFor(relayColl_t coll, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                          cudaStream_t stream) {
  if (!gRoute || tDepth > 0 || atomic_load(&gNumState) == 0 || !(gSet.colls & (1u << coll))) return NULL;
  if ((unsigned)dt >= relayNumTypes || count == 0) return NULL; /* fp8 and NCCL's later types: NCCL's */
  if (relayCollReduces(coll) && (unsigned)op >= relayNumOps) return NULL; /* PreMulSum ops */
  shimComm* sc = findComm(comm);
  relayComm_t rc = sc ? atomic_load(&sc->rc) : NULL;
  if (!rc || sc->asyncErr != ncclSuccess) return NULL;
  if (!sc->haveStream) { /* the first of the four outside a group: every rank's first alike */
    sc->stream = stream;
    sc->haveStream = 1;
  }
  if (stream != sc->stream) {
    say(2, comm, sc->rank, sc->nranks, "%s on stream %p, not the comm's first %p: NCCL's", relayCollName(coll),
        (void*)stream, (void*)sc->stream);
    return NULL;
  }
  /* core's answer from the key its call would build: the shim keeps no key of its own */
  relayLayout_t layout = {1, sc->nranks, sc->ranks};
  relayStream_t s = gSet.testShm ? NULL : (relayStream_t)stream;
  int routed = relayCommRoutesCall(rc, coll, &count, (relayDataType_t)dt,
                                   relayCollReduces(coll) ? (relayRedOp_t)op : relaySum, &layout, s);
  return routed ? sc : NULL;
}

/* 1 when relaycc ran the call (its result in *out); 0 when the call is NCCL's after all: relaycc's
 * route declined on every rank (core's vote), nothing moved. */
static int runRelay(shimComm* sc, relayColl_t coll, const void* send, void* recv, size_t count,
                    ncclDataType_t dt, ncclRedOp_t op, cudaStream_t stream, ncclResult_t* out) {
  relayComm_t rc = atomic_load(&sc->rc);
  relayLayout_t layout = {1, sc->nranks, sc->ranks};
  relayStream_t s = gSet.testShm ? NULL : (relayStream_t)stream;
  /* NCCL runs on the stream's device whatever the current one is; relaycc
   * launches its kernels on the current device. */
  int prev = -1;
  if (!gSet.testShm && cudaGetDevice(&prev) == cudaSuccess && prev != sc->dev) cudaSetDevice(sc->dev);
  relayResult_t r;
  switch (coll) {
    case RELAY_COLL_ALLGATHER:
      r = relayAllGather(send, recv, &count, (relayDataType_t)dt, &layout, rc, s);
      break;
    case RELAY_COLL_REDUCESCATTER:
      r = relayReduceScatter(send, recv, &count, (relayDataType_t)dt, (relayRedOp_t)op, &layout, rc, s);
      break;
    case RELAY_COLL_ALLREDUCE:
      r = relayAllReduce(send, recv, &count, (relayDataType_t)dt, (relayRedOp_t)op, &layout, rc, s);
      break;
    default: r = relayAllToAll(send, recv, &count, (relayDataType_t)dt, &layout, rc, s); break;
  }
  if (prev >= 0 && prev != sc->dev) cudaSetDevice(prev);
  if (r == relayNotSupported && rc->callDeclined) {
    say(2, sc->nccl, sc->rank, sc->nranks, "%s count %zu dtype %d: %s", relayCollName(coll), count, (int)dt,
        relayGetLastError(rc));
    return 0;
  }
  say(2, sc->nccl, sc->rank, sc->nranks, "%s count %zu dtype %d -> relaycc %s: %s", relayCollName(coll),
      count, (int)dt, relayRouteName(rc->lastRoute), relayGetErrorString(r));
  if (r != relaySuccess) {
    /* Reported now and by every later ncclCommGetAsyncError; the comm's next
     * calls go to NCCL (relaycc's peers may be out of step: the user aborts). */
    sc->asyncErr = asyncNccl(r);
    say(0, sc->nccl, -1, -1, "%s", relayGetLastError(rc)); /* its prefix names the call and the rank */
  }
  *out = toNccl(r);
  return 1;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!SHIM_HAS(ncclAllReduce)) return relayShimMissing("ncclAllReduce");
  shimComm* sc = routeFor(RELAY_COLL_ALLREDUCE, count, datatype, op, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, RELAY_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, stream, &r)) return r;
  return relayNccl.ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (!SHIM_HAS(ncclReduceScatter)) return relayShimMissing("ncclReduceScatter");
  shimComm* sc = routeFor(RELAY_COLL_REDUCESCATTER, recvcount, datatype, op, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, RELAY_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, stream, &r)) return r;
  return relayNccl.ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!SHIM_HAS(ncclAllGather)) return relayShimMissing("ncclAllGather");
  shimComm* sc = routeFor(RELAY_COLL_ALLGATHER, sendcount, datatype, ncclSum, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, RELAY_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, stream, &r)) return r;
  return relayNccl.ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  if (!SHIM_HAS(ncclAlltoAll)) return relayShimMissing("ncclAlltoAll");
  /* In place is NCCL's to refuse or do (relaycc rejects it). */
  shimComm* sc =
      sendbuff == recvbuff ? NULL : routeFor(RELAY_COLL_ALLTOALL, count, datatype, ncclSum, comm, stream);
  ncclResult_t r;
  if (sc && runRelay(sc, RELAY_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, stream, &r)) return r;
  return relayNccl.ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}
