/*
 * The IPC region of the NCCL transport, which the one-shot (oneshot.c) and
 * the bandwidth route (bw.c) share: its collective creation and vote, the
 * arguments and launch shape its kernels get, and the reporting of kernel
 * failures. The region's layout: oneshot.h. The CPU twin of the same
 * protocol: ../shm/oneshot.c.
 *
 * Creation (oneshotPrepare, COLLECTIVE over all comm ranks, helpers too, on
 * the same call; the seed measured ~1.7 ms once per comm for 8 ranks):
 *   1. cudaMalloc this rank's region (plain memory: mempool allocations
 *      cannot be IPC-exported), zero it (the first pair epoch is 1), stamp
 *      the sentinel (commHash agreed at init, and the rank), export it;
 *   2. agree() #1: ok, slot size, block cap and the IPC handle of every rank;
 *   3. open every peer's handle (cudaIpcMemLazyEnablePeerAccess) and read its
 *      sentinel: the mapping is that peer's CURRENT region of THIS comm;
 *   4. agree() #2: the vote; enabled only when every rank says ok, so all
 *      enable or all decline (sticky: one attempt per comm).
 * Both rounds run even after a local failure, to stay in lockstep.
 * RELAYCC_ONESHOT_FAULT_RANK=r makes rank r vote no after opening (tests).
 *
 * Graph capture: creation allocates and host-synchronizes, so it never runs
 * under capture (hazard G3). When the caller's stream is capturing and no
 * region exists, prepare declines WITHOUT communicating and without marking
 * the comm tried; every rank captures alike, so every rank declines alike and
 * the call runs direct, and a later uncaptured call may still create it.
 * RELAYCC_ONESHOT_PREPARE=1 creates the region at init instead, so captured
 * calls get the one-shot from the first. Allocation runs in relaxed capture
 * mode, so another thread's global-mode capture is not disturbed.
 *
 * Errors: the kernel never hangs (its waits end at the comm's deadline) and
 * never makes the host wait; it writes a packed error word to mapped host
 * memory, which the next prepare or one-shot call of this comm reads (a
 * plain load, no synchronization) and reports as relayTimeout /
 * relayRemoteError / relayInvalidUsage naming the peer; the comm is then
 * failed. Destroy prints an error nobody collected.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "plan/plan.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/oneshot.h"

_Static_assert(RELAY_OS_MAX_ACTIVE == RELAY_TP_ONESHOT_MAX, "one-shot rank limits differ");

typedef struct {
  int tried, ready;
  int n, blocks, threads;
  int wide;         /* RELAYCC_ONESHOT_WIDE=1: the 8-active kernels at A = 2 too (A/B measurement; local) */
  uint64_t llBytes; /* per-destination bytes at or below which calls take the LL protocol (agreed) */
  uint64_t ll128Bytes; /* ... and at or above which LL's calls take LL128 instead (agreed; 0: never) */
  relayOsLayout L;
  uint64_t hash;
  char* own;             /* this rank's region (cudaMalloc) */
  char** peer;           /* [n] every rank's region as mapped here; peer[rank] = own */
  unsigned char* opened; /* [n] cudaIpcOpenMemHandle succeeded */
  /* One pinned, mapped page: [0] u64 error word (kernel -> host),
   * [8] i32 abort word (host -> kernel), [16] u64 bounce for the sentinel. */
  char* hostPage;
  char* hostPageDev;
  int reported; /* the error word was turned into a relay error */
} osState;

#define OS_HOST_PAGE 64

static volatile uint64_t* osHostErr(osState* s) { return (volatile uint64_t*)(s->hostPage); }
static volatile int32_t* osHostAbort(osState* s) { return (volatile int32_t*)(s->hostPage + 8); }
static uint64_t* osHostBounce(osState* s) { return (uint64_t*)(s->hostPage + 16); }

/* Wait for the private stream with the comm's deadline (creation only). */
static cudaError_t osWaitStream(struct relayComm* c, cudaStream_t st) {
  uint64_t deadline = relayDeadlineNs(c, relayNowNs());
  for (;;) {
    cudaError_t e = cudaStreamQuery(st);
    if (e != cudaErrorNotReady) return e;
    /* A guest comm has no deadline: the user's abort ends the wait. */
    if (relayNowNs() > deadline || atomic_load(&c->aborted)) return cudaErrorLaunchTimeout;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* Peer regions this process has open (all comms): tests assert it returns
 * to zero after destroy, so a leaked mapping fails even where the freed
 * memory hides in the driver's accounting. */
static atomic_int g_osOpenMappings;

int relayNcclOneShotOpenMappings(void) { return atomic_load(&g_osOpenMappings); }

/* Releases everything this rank holds (the device must be idle). */
static void osRelease(osState* s, int rank) {
  if (s->peer)
    for (int q = 0; q < s->n; q++)
      if (q != rank && s->opened && s->opened[q] && cudaIpcCloseMemHandle(s->peer[q]) == cudaSuccess)
        atomic_fetch_sub(&g_osOpenMappings, 1);
  if (s->own) cudaFree(s->own);
  if (s->hostPage) cudaFreeHost(s->hostPage);
  s->own = NULL;
  s->hostPage = s->hostPageDev = NULL;
  if (s->opened) memset(s->opened, 0, (size_t)s->n);
  if (s->peer) memset(s->peer, 0, (size_t)s->n * sizeof *s->peer);
}

/* The record of agreement #1. */
typedef struct {
  int32_t ok;
  int32_t blocks;
  uint64_t slotBytes, regionBytes, hash, llBytes, ll128Bytes;
  cudaIpcMemHandle_t handle;
} osRecord;
_Static_assert(sizeof(osRecord) <= RELAY_NCCL_AGREE_MAX, "one-shot record must fit one agree()");

/* Step 1: this rank's region, zeroed and stamped, and its handle. */
static int osCreateOwn(struct relayComm* c, relayNcclState* st, osState* s, cudaIpcMemHandle_t* h, char* why,
                       size_t whyLen) {
  cudaError_t e =
      cudaHostAlloc((void**)&s->hostPage, OS_HOST_PAGE, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e == cudaSuccess) e = cudaHostGetDevicePointer((void**)&s->hostPageDev, s->hostPage, 0);
  if (e != cudaSuccess) {
    snprintf(why, whyLen, "mapped host words: %s", cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  memset(s->hostPage, 0, OS_HOST_PAGE);
  e = relayGpuMallocShared((void**)&s->own, s->L.regionBytes); /* polled by peers' kernels */
  if (e == cudaSuccess) e = cudaMemsetAsync(s->own, 0, s->L.regionBytes, st->agreeStream);
  if (e == cudaSuccess) {
    *osHostBounce(s) = relayOsSentinel(s->hash, c->rank);
    e = cudaMemcpyAsync(s->own + s->L.sentinelOff, osHostBounce(s), 8, cudaMemcpyDefault, st->agreeStream);
  }
  if (e == cudaSuccess) e = osWaitStream(c, st->agreeStream);
  if (e == cudaSuccess) e = cudaIpcGetMemHandle(h, s->own);
  if (e != cudaSuccess) {
    snprintf(why, whyLen, "region of %llu bytes: %s", (unsigned long long)s->L.regionBytes,
             cudaGetErrorString(e));
    cudaGetLastError(); /* an allocation failure is not sticky; don't leave it for the user */
    return 0;
  }
  s->peer[c->rank] = s->own;
  return 1;
}

/* Step 3: open peer q's region and check its sentinel. */
static int osOpenPeer(struct relayComm* c, relayNcclState* st, osState* s, int q, const cudaIpcMemHandle_t* h,
                      char* why, size_t whyLen) {
  void* p = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&p, *h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    snprintf(why, whyLen, "cudaIpcOpenMemHandle of rank %d's region: %s", q, cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  s->peer[q] = p;
  s->opened[q] = 1;
  atomic_fetch_add(&g_osOpenMappings, 1);
  *osHostBounce(s) = 0;
  /* cudaMemcpyDefault: the source is another device's memory mapped here. */
  e = cudaMemcpyAsync(osHostBounce(s), (char*)p + s->L.sentinelOff, 8, cudaMemcpyDefault, st->agreeStream);
  if (e == cudaSuccess) e = osWaitStream(c, st->agreeStream);
  if (e != cudaSuccess) {
    snprintf(why, whyLen, "reading rank %d's sentinel: %s", q, cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  uint64_t want = relayOsSentinel(s->hash, q), got = *osHostBounce(s);
  if (got != want) {
    snprintf(why, whyLen, "rank %d's region has sentinel %#llx, want %#llx (a stale mapping)", q,
             (unsigned long long)got, (unsigned long long)want);
    return 0;
  }
  return 1;
}

/* The state of a comm that could not allocate its own: declined for good. */
static osState osDeclined = {.tried = 1};

static relayResult_t osCreate(struct relayComm* c, size_t slotBytes) {
  relayNcclState* st = c->tpState;
  int n = c->nranks;
  /* The rounds land in the comm's agreement buffer (comm/vote.h): a rank
   * short of memory for its state still votes (no) in both rounds, so its
   * peers decline with it instead of waiting for it until the deadline. */
  osState* s = calloc(1, sizeof *s);
  if (s) {
    s->peer = calloc((size_t)n, sizeof *s->peer);
    s->opened = calloc((size_t)n, 1);
  }
  if (!s || !s->peer || !s->opened) {
    if (s) free(s->peer), free(s->opened);
    free(s);
    c->oneshot = &osDeclined; /* sticky, as the peers' decline is */
    osRecord mine;
    memset(&mine, 0, sizeof mine); /* ok = 0: "could not create its region" */
    const void* got;
    relayVerdict v;
    relayResult_t r = relayAgree(c, &mine, sizeof mine, &got);
    if (r == relaySuccess) r = relayVote(c, 0, "out of memory for its one-shot state", &v);
    fprintf(stderr,
            "relaycc: rank %d: one-shot declined on every rank: this rank is out of memory for its state\n",
            c->rank);
    return r == relaySuccess ? relayNotSupported : r;
  }
  c->oneshot = s;
  s->tried = 1; /* sticky: one attempt per comm, all ranks alike */
  s->n = n;
  s->hash = st->commHash;
  relayOsLayoutInit(&s->L, n, slotBytes);
  /* The bandwidth route's ring lives in the same region (one creation, one
   * vote, one sentinel, one error word per comm); its settings (the comm's
   * agreed ones, as core puts them in every key) are in the region size
   * every rank compares in the vote below. */
  planKey bwKey;
  memset(&bwKey, 0, sizeof bwKey);
  relayCommKeySettings(c, &bwKey);
  relayOsLayoutAddBw(&s->L, planBwTileBytes(&bwKey), planBwRing(&bwKey));
  /* Agreed at init (rank 0's) and range-checked by comm/params.h. */
  long blocks = (long)relayParamInt(c, RELAY_P_ONESHOT_BLOCKS);
  s->blocks = blocks < 1 ? 1 : blocks > RELAY_OS_MAX_BLOCKS ? RELAY_OS_MAX_BLOCKS : (int)blocks;
  long threads = (long)relayParamInt(c, RELAY_P_ONESHOT_THREADS);
  s->threads = threads <= 0     ? 0
               : threads >= 512 ? 512
               : threads > 128  ? 256
                                : 128; /* 0: by size (RELAY_OS_T512_BYTES) */

  long long llBytes = relayParamInt(c, RELAY_P_ONESHOT_LL_BYTES);
  s->llBytes = llBytes <= 0 ? 0 : (uint64_t)llBytes > s->L.llCap ? s->L.llCap : (uint64_t)llBytes;
  long long ll128Bytes = relayParamInt(c, RELAY_P_ONESHOT_LL128_BYTES);
  s->ll128Bytes = ll128Bytes <= 0 ? 0 : (uint64_t)ll128Bytes;
  int fault = (int)relayParamInt(c, RELAY_P_ONESHOT_FAULT_RANK);
  s->wide = relayParamInt(c, RELAY_P_ONESHOT_WIDE) != 0;

  int prevDev = -1;
  cudaGetDevice(&prevDev);
  if (prevDev != st->device) cudaSetDevice(st->device);
  /* Relaxed: another thread may be capturing in global mode; nothing here
   * is enqueued on a captured stream. */
  enum cudaStreamCaptureMode mode = relayNcclRelaxCapture();

  char why[256] = "";
  osRecord mine;
  memset(&mine, 0, sizeof mine);
  mine.ok = osCreateOwn(c, st, s, &mine.handle, why, sizeof why);
  mine.blocks = s->blocks;
  mine.slotBytes = s->L.slotBytes;
  mine.regionBytes = s->L.regionBytes;
  mine.hash = s->hash;
  mine.llBytes = s->llBytes;
  mine.ll128Bytes = s->ll128Bytes;
  const void* got;
  relayResult_t res = relayAgree(c, &mine, sizeof mine, &got);
  const osRecord* all = got;
  int ok = res == relaySuccess && mine.ok;
  for (int q = 0; q < n && ok; q++) {
    if (!all[q].ok || all[q].slotBytes != mine.slotBytes || all[q].regionBytes != mine.regionBytes ||
        all[q].hash != mine.hash) {
      ok = 0;
      if (!why[0])
        snprintf(why, sizeof why, "rank %d %s", q,
                 !all[q].ok ? "could not create its region" : "has another slot size or comm hash");
    }
  }
  for (int q = 0; q < n && ok; q++)
    if (q != c->rank) ok = osOpenPeer(c, st, s, q, &all[q].handle, why, sizeof why);
  if (fault == c->rank && ok) {
    ok = 0; /* RELAYCC_ONESHOT_FAULT_RANK: as if an open failed */
    snprintf(why, sizeof why, "RELAYCC_ONESHOT_FAULT_RANK=%d", fault);
  }
  /* Every rank uses rank 0's block cap and LL threshold: the protocol and
   * grid of a call, hence which words are waited on, must be the same
   * everywhere. */
  if (res == relaySuccess) {
    s->blocks = all[0].blocks < 1 ? 1 : all[0].blocks;
    s->llBytes = all[0].llBytes > s->L.llCap ? s->L.llCap : all[0].llBytes;
    s->ll128Bytes = all[0].ll128Bytes;
  }
  relayVerdict v = {0};
  if (res == relaySuccess) res = relayVote(c, ok, why[0] ? why : "no reason recorded", &v);
  int allOk = res == relaySuccess && v.yes;
  if (!allOk) {
    /* Nothing of ours runs on the device yet: release at once. */
    osRelease(s, c->rank);
    /* A decline is a normal answer; say why only where it started. */
    if (res == relaySuccess && !ok)
      fprintf(stderr, "relaycc: rank %d: one-shot declined on every rank: this rank voted no (%s)\n", c->rank,
              why[0] ? why : "no reason recorded");
  }
  s->ready = allOk;
  relayNcclRestoreCapture(mode);
  if (prevDev >= 0 && prevDev != st->device) cudaSetDevice(prevDev);
  if (res != relaySuccess) return res;
  return allOk ? relaySuccess : relayNotSupported;
}

/* What error word w (non-zero) says, as the result it is reported as and its text. */
static relayResult_t osErrorText(const struct relayComm* c, uint64_t w, char* why, size_t whyLen) {
  unsigned code = relayOsErrCode(w), peer = relayOsErrPeer(w), blk = relayOsErrBlock(w),
           ep = relayOsErrEpoch(w);
  switch (code) {
    case RELAY_OS_ERR_FLAG:
    case RELAY_OS_ERR_ACK:
      snprintf(why, whyLen,
               "an earlier one-shot kernel of this comm waited %d ms for rank %u's %s (pair epoch %u, "
               "block %u) and gave up; the comm is failed",
               c->cfg.timeoutMs, peer,
               code == RELAY_OS_ERR_FLAG ? "push" : "acknowledgement of an older push", ep, blk);
      return relayTimeout;
    case RELAY_OS_ERR_COUNT:
      snprintf(why, whyLen,
               "in an earlier one-shot call rank %u pushed another element count than this rank (pair "
               "epoch %u): counts differ between ranks; the comm is failed",
               peer, ep);
      return relayInvalidUsage;
    case RELAY_OS_ERR_WINDOW:
      snprintf(why, whyLen,
               "in an earlier windowed bw call rank %u's buffers lay in another window or at other offsets "
               "than this rank's (direct epoch %u): a windowed call needs the same window and offsets on "
               "every active rank; the comm is failed",
               peer, ep);
      return relayInvalidUsage;
    case RELAY_OS_ERR_EXIT:
      snprintf(why, whyLen,
               "an earlier windowed bw call waited %d ms for rank %u to finish with this rank's buffers "
               "(direct epoch %u, block %u) and gave up; the comm is failed",
               c->cfg.timeoutMs, peer, ep, blk);
      return relayTimeout;
    case RELAY_OS_ERR_REMOTE:
      snprintf(why, whyLen,
               "rank %u reported a failure of its one-shot kernel (pair epoch %u); the comm is failed", peer,
               ep);
      return relayRemoteError;
    default:
      snprintf(why, whyLen,
               "a one-shot kernel was aborted while waiting for rank %u (pair epoch %u); the comm is "
               "failed",
               peer, ep);
      return relayInvalidUsage;
  }
}

/* The kernel's error word, as a relay error (sticky: the comm is failed). */
static relayResult_t osCheckError(struct relayComm* c, osState* s) {
  if (!s->hostPage) return relaySuccess;
  uint64_t w = *osHostErr(s);
  if (w == 0) return relaySuccess;
  c->failed = 1;
  s->reported = 1;
  char why[512];
  relayResult_t res = osErrorText(c, w, why, sizeof why);
  return relaySetError(c, res, "%s", why);
}

relayResult_t relayNcclOneShotAsyncError(struct relayComm* c, char* why, size_t whyLen) {
  osState* s = c->oneshot;
  if (!s || s == &osDeclined || !s->hostPage) return relaySuccess;
  uint64_t w = *osHostErr(s);
  return w ? osErrorText(c, w, why, whyLen) : relaySuccess;
}

relayResult_t relayNcclOneShotPrepare(struct relayComm* c, size_t slotBytes, relayStream_t stream) {
  osState* s = c->oneshot;
  if (s && s->tried) {
    if (s->ready) RELAY_CHECK(osCheckError(c, s));
    return s->ready && slotBytes <= s->L.slotBytes ? relaySuccess : relayNotSupported;
  }
  if (relayNcclCapturing((cudaStream_t)stream)) return relayNotSupported; /* G3: never create under capture */
  return osCreate(c, slotBytes);
}

relayResult_t relayNcclOsRegion(struct relayComm* c, relayStream_t stream, const relayOsLayout** L) {
  *L = NULL;
  /* The slot the one-shot asks for on every call (the comm's agreed gate):
   * whichever route comes first creates the same region. */
  relayResult_t r = relayNcclOneShotPrepare(c, (size_t)relayParamInt(c, RELAY_P_ONESHOT_MAX_BYTES), stream);
  if (r == relaySuccess) *L = &((osState*)c->oneshot)->L;
  return r;
}

relayResult_t relayNcclOneShotPrepareAtInit(struct relayComm* c) {
  if (c->oneshot) return relaySuccess;
  /* The slot size core asks for on every call (the comm's agreed gate). */
  relayResult_t r = osCreate(c, (size_t)relayParamInt(c, RELAY_P_ONESHOT_MAX_BYTES));
  return r == relayNotSupported ? relaySuccess : r;
}

relayResult_t relayNcclOsArgs(struct relayComm* c, const relayOneShotDesc* d, const char* what,
                              relayOsArgs* a) {
  osState* s = c->oneshot;
  int A = d->nActive, me = d->me;
  size_t es = relayTypeSize(d->dtype);
  if (!s || !s->ready || A < 2 || A > RELAY_OS_MAX_ACTIVE || me < 0 || me >= A || d->ranks[me] != c->rank ||
      !es)
    return relaySetError(c, relayInternalError, "%s with region %s, A %d, me %d", what,
                         s && s->ready ? "ready" : "absent", A, me);
  RELAY_CHECK(osCheckError(c, s));
  memset(a, 0, sizeof *a);
  for (int i = 0; i < A; i++) {
    int q = d->ranks[i];
    if (q < 0 || q >= c->nranks || !s->peer[q])
      return relaySetError(c, relayInternalError, "%s active %d is rank %d (no region)", what, i, q);
    a->region[i] = s->peer[q];
    a->rank[i] = q;
  }
  a->dst = d->dst;
  a->src = d->src;
  a->count = d->count;
  a->srcStride = d->srcStride;
  a->L = s->L;
  a->nActive = A;
  a->me = me;
  /* Vector accesses need every block start aligned: a gather's output
   * blocks sit count * es apart (a broadcast's one block does not). */
  a->vec = (((uintptr_t)d->src | (uintptr_t)d->dst | (uintptr_t)(d->srcStride * es) |
             (uintptr_t)(d->gather && d->root < 0 ? d->count * es : 0)) &
            15u) == 0;
  a->gather = d->gather != 0;
  /* A rooted call (broadcast, reduce) or none; the bandwidth kernels serve none (no RELAY_TP_CAP_BW row). A
   * root past the actives is refused, never run unrooted: a broadcast would become an all-gather writing
   * A blocks into a one-block recv (the plan refuses it first: plan_oneshot.c, check.c). */
  if (d->root >= A)
    return relaySetError(c, relayInternalError, "one-shot: root position %d of %d actives", d->root, A);
  a->root = d->root >= 0 ? d->root : -1;
  a->divisor = d->divisor;
  a->elemSize = (int32_t)es;
  a->wide = s->wide;
  a->timeoutNs = relayWaitLimitNs(c); /* UINT64_MAX: no deadline (the kernel never gives up) */
  a->hostErr = (unsigned long long*)s->hostPageDev;
  a->hostAbort = (const volatile int32_t*)(s->hostPageDev + 8);
  return relaySuccess;
}

void relayNcclOsShape(struct relayComm* c, size_t bytes, size_t count, int elemSize, relayOsArgs* a,
                      int* threads) {
  osState* s = c->oneshot;
  /* LL: every block of the agreed grid runs every LL call (per-block epochs). */
  a->ll = bytes <= s->llBytes;
  /* LL128 where it fits the LL slot (it does up to the LL cap at any grid
   * the block cap allows); every rank computes the same from the count. */
  if (a->ll && s->ll128Bytes && bytes >= s->ll128Bytes &&
      relayOsLL128Bytes(count, s->blocks, elemSize) <= s->L.llSlotBytes)
    a->ll = 2;
  a->grid = a->ll ? s->blocks : relayOsGrid(bytes, s->blocks);
  *threads = s->threads ? s->threads : bytes > RELAY_OS_T512_BYTES ? 512 : 256;
}

relayResult_t relayNcclOsLaunched(struct relayComm* c, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return relaySuccess;
  c->failed = 1; /* peers may be waiting for this rank's push */
  return relaySetError(c, e == cudaErrorInvalidValue ? relayInvalidArgument : relayUnhandledCudaError,
                       "%s kernel launch: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void relayNcclOneShotAbort(struct relayComm* c) {
  osState* s = c->oneshot;
  if (s && s->hostPage) *osHostAbort(s) = 1;
}

void relayNcclOneShotFree(struct relayComm* c, int drained) {
  osState* s = c->oneshot;
  if (s == &osDeclined) c->oneshot = NULL;
  if (!s || s == &osDeclined) return;
  if (s->hostPage && *osHostErr(s) && !s->reported) {
    uint64_t w = *osHostErr(s);
    fprintf(stderr,
            "relaycc: rank %d: a one-shot kernel of this comm failed (code %u, rank %u, pair epoch %u) and "
            "no later "
            "call reported it\n",
            c->rank, relayOsErrCode(w), relayOsErrPeer(w), relayOsErrEpoch(w));
  }
  /* cudaFree and cudaIpcCloseMemHandle wait for the device: only after a
   * drain (a stuck kernel may still use the region; then it is leaked). */
  if (drained) osRelease(s, c->rank);
  free(s->peer);
  free(s->opened);
  free(s);
  c->oneshot = NULL;
}
