/*
 * The NCCL transport: one rank's program on a GPU.
 *
 *  - group(): one NCCL group per plan step on the caller's stream, every
 *    transfer as bytes (ncclInt8); a rank's own piece is a self send/recv
 *    pair inside the group (NCCL turns it into a local copy).
 *  - reduce()/copy(): the CUDA reduce family (nccl_reduce.cu) and
 *    cudaMemcpyAsync. Lane 1 runs on a side stream cached per caller stream,
 *    forked by an event recorded on the caller stream and joined by join():
 *    both are event record + stream wait, which CUDA graph capture records
 *    as edges, so a captured call's side work lands inside the graph
 *    (hazard G4 of the seed).
 *  - scratch(): grow-only, plain cudaMalloc (mempool memory cannot be
 *    IPC-exported, and cudaMallocAsync under capture becomes a graph
 *    allocation node whose address dies with the graph: hazard G1), made in
 *    relaxed capture mode so a call captured with a cold cache still gets
 *    real memory; outgrown buffers are only freed at destroy because a
 *    captured graph may still hold their address.
 *  - agree()/barrier(): the shm control plane of an owned comm, or a small
 *    ncclAllGather on a private stream for a wrapped one.
 *
 * Nothing in a collective host-synchronizes. The host waits that exist
 * (init, agree, destroy) poll with the comm's deadline; when one passes, the
 * NCCL communicator is aborted and the call returns relayTimeout naming the
 * rank and the step.
 */
#include "transport/nccl/nccl_transport.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "relaycc_nccl.h"
#include "topo/topo.h"
#include "transport/nccl/nccl_reduce.h"
#include "transport/nccl/oneshot.h"
#include "transport/shm.h"

#define MIB ((size_t)1 << 20)

/* ---- errors ---------------------------------------------------------- */

static relayResult_t fromNccl(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return relaySuccess;
    case ncclUnhandledCudaError: return relayUnhandledCudaError;
    case ncclSystemError: return relaySystemError;
    case ncclInternalError: return relayInternalError;
    case ncclInvalidArgument: return relayInvalidArgument;
    case ncclInvalidUsage: return relayInvalidUsage;
    case ncclRemoteError: return relayRemoteError;
    case ncclInProgress: return relayInProgress;
    default: return relayInternalError;
  }
}

static relayResult_t fromCuda(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return relaySuccess;
    case cudaErrorInvalidValue: return relayInvalidArgument;
    case cudaErrorMemoryAllocation: return relaySystemError;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit: return relayInvalidUsage;
    default: return relayUnhandledCudaError;
  }
}

static relayResult_t ncclFail(struct relayComm* c, ncclResult_t r, const char* what) {
  relayNcclState* st = c->tpState;
  int live = st && st->nccl && !st->ncclDead && relayNccl.ncclGetLastError; /* NCCL >= 2.13 has it */
  const char* detail = live ? relayNccl.ncclGetLastError(st->nccl) : "";
  return relaySetError(c, fromNccl(r), "%s: %s%s%s", what, relayNccl.ncclGetErrorString(r),
                       detail && *detail ? ": " : "", detail ? detail : "");
}

static relayResult_t cudaFail(struct relayComm* c, cudaError_t e, const char* what) {
  return relaySetError(c, fromCuda(e), "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* For the init part (nccl_init.c). */
relayResult_t relayNcclResult(ncclResult_t r) { return fromNccl(r); }
relayResult_t relayCudaResult(cudaError_t e) { return fromCuda(e); }
relayResult_t relayNcclFail(struct relayComm* c, ncclResult_t r, const char* what) {
  return ncclFail(c, r, what);
}
relayResult_t relayNcclCudaFail(struct relayComm* c, cudaError_t e, const char* what) {
  return cudaFail(c, e, what);
}

/* ncclCommAbort kills the communicator's kernels and frees it; after it the
 * handle is gone (for a wrapped comm too: see relaycc_nccl.h). */
static void abortNccl(relayNcclState* st) {
  if (!st->ownsNccl) { /* a wrapped comm is the user's (invariant 11): relaycc's sub-comms only */
    relayNcclNativeAbort(st);
    return;
  }
  if (st->nccl && !st->ncclDead) {
    /* The per-group sub-communicators of the native route first: a native
     * collective stuck on a dead peer runs on them, not on the parent. */
    relayNcclNativeAbort(st);
    relayNccl.ncclCommAbort(st->nccl);
    st->ncclDead = 1;
  }
}

static int isAborted(struct relayComm* c, relayNcclState* st) {
  return atomic_load(&c->aborted) || atomic_load(&st->aborted);
}

static relayResult_t checkUsable(struct relayComm* c, relayNcclState* st, const char* what) {
  if (isAborted(c, st)) return relaySetError(c, relayInvalidUsage, "%s: the comm was aborted", what);
  if (st->ncclDead)
    return relaySetError(c, relayInvalidUsage,
                         "%s: the NCCL communicator was aborted after an earlier error; destroy the comm",
                         what);
  return relaySuccess;
}

/* ---- bounded waits ---------------------------------------------------- */

/* The comm's yielding polls first (RELAYCC_SPIN: cfg.spinCount less the shm waits' busy polls, which these
 * host polls of NCCL and CUDA do not make), then 20 us naps. */
static void pauseFor(int iter, const struct relayComm* c) {
  if (iter < c->cfg.spinCount - c->cfg.spinBusy) {
    sched_yield();
    return;
  }
  /* 20 us: short against the ~50 us of an agree round trip, long enough not
   * to steal a core from the ranks that share it. */
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* Failure seen while polling: NCCL reports an asynchronous error (a peer died,
 * a network failure) or the comm was aborted. */
static relayResult_t pollHealth(struct relayComm* c, relayNcclState* st, const char* what) {
  if (isAborted(c, st)) return checkUsable(c, st, what);
  ncclResult_t ae = ncclSuccess;
  ncclResult_t r = relayNccl.ncclCommGetAsyncError(st->nccl, &ae);
  if (r == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress) {
    relayResult_t res = ncclFail(c, ae, what);
    abortNccl(st);
    c->failed = 1;
    return res;
  }
  return relaySuccess;
}

static relayResult_t timedOut(struct relayComm* c, relayNcclState* st, const char* what) {
  abortNccl(st);
  c->failed = 1;
  return relaySetError(c, relayTimeout, "%s did not complete within %d ms (a peer is missing or stuck)%s",
                       what, c->cfg.timeoutMs, !st->ownsNccl ? "" : "; the NCCL communicator was aborted");
}

/* A nonblocking NCCL comm (a wrapped one may be, and the sub-communicators
 * split from it) answers ncclInProgress and must be polled until ready
 * before the next NCCL call: the comm's own or one of its children (nccl). */
relayResult_t relayNcclWaitReady(struct relayComm* c, ncclComm_t nccl, const char* what) {
  relayNcclState* st = c->tpState;
  uint64_t deadline = relayDeadlineNs(c, relayNowNs());
  for (int i = 0;; i++) {
    ncclResult_t ae = ncclSuccess;
    ncclResult_t r = relayNccl.ncclCommGetAsyncError(nccl, &ae);
    if (r != ncclSuccess) return ncclFail(c, r, what);
    if (ae == ncclSuccess) return relaySuccess;
    if (ae != ncclInProgress) {
      relayResult_t res = ncclFail(c, ae, what);
      abortNccl(st);
      c->failed = 1;
      return res;
    }
    if (isAborted(c, st)) return checkUsable(c, st, what);
    if (relayNowNs() > deadline) return timedOut(c, st, what);
    pauseFor(i, c);
  }
}

relayResult_t relayNcclWaitStream(struct relayComm* c, relayNcclState* st, cudaStream_t s, const char* what) {
  uint64_t deadline = relayDeadlineNs(c, relayNowNs());
  for (int i = 0;; i++) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return relaySuccess;
    if (e != cudaErrorNotReady) {
      c->failed = 1;
      return cudaFail(c, e, what);
    }
    RELAY_CHECK(pollHealth(c, st, what));
    if (relayNowNs() > deadline) return timedOut(c, st, what);
    pauseFor(i, c);
  }
}

/* Creation and allocation in relaxed capture mode: allowed even while this
 * thread (or, in global mode, any thread) captures a stream, and never part
 * of the graph. */
enum cudaStreamCaptureMode relayNcclRelaxCapture(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  return mode;
}
void relayNcclRestoreCapture(enum cudaStreamCaptureMode mode) { cudaThreadExchangeStreamCaptureMode(&mode); }

/* ---- group ------------------------------------------------------------ */

static relayResult_t tpGroup(struct relayComm* c, const relayXferDesc* sends, int nSends,
                             const relayXferDesc* recvs, int nRecvs, int p2pOp, relayStream_t stream) {
  (void)p2pOp; /* NCCL splits transfers over its channels itself */
  relayNcclState* st = c->tpState;
  if (nSends + nRecvs == 0) return relaySuccess;
  RELAY_CHECK(checkUsable(c, st, "group"));
  for (int i = 0; i < nSends + nRecvs; i++) {
    const relayXferDesc* d = i < nSends ? &sends[i] : &recvs[i - nSends];
    if (d->peer < 0 || d->peer >= c->nranks || (d->bytes && !d->ptr))
      return relaySetError(c, relayInternalError, "%s %d has peer %d, ptr %p", i < nSends ? "send" : "recv",
                           i < nSends ? i : i - nSends, d->peer, d->ptr);
  }
  cudaStream_t s = (cudaStream_t)stream;
  ncclResult_t r = relayNccl.ncclGroupStart();
  if (r != ncclSuccess) return ncclFail(c, r, "ncclGroupStart");
  /* Zero-byte transfers are dropped on both ends by the same rule. */
  for (int i = 0; i < nSends && r == ncclSuccess; i++)
    if (sends[i].bytes)
      r = relayNccl.ncclSend(sends[i].ptr, sends[i].bytes, ncclInt8, sends[i].peer, st->nccl, s);
  for (int i = 0; i < nRecvs && r == ncclSuccess; i++)
    if (recvs[i].bytes)
      r = relayNccl.ncclRecv(recvs[i].ptr, recvs[i].bytes, ncclInt8, recvs[i].peer, st->nccl, s);
  ncclResult_t re = relayNccl.ncclGroupEnd(); /* always closes the group, also after a failed enqueue */
  if (r == ncclSuccess) r = re;
  if (r == ncclInProgress) {
    RELAY_CHECK(relayNcclWaitReady(c, st->nccl, "ncclGroupEnd"));
    r = ncclSuccess;
  }
  if (r != ncclSuccess) {
    c->failed = 1;
    return ncclFail(c, r, r == re ? "ncclGroupEnd" : "ncclSend/ncclRecv");
  }
  /* Errors found by NCCL's proxy thread (a peer's death, a network error)
   * surface here rather than as a hang at the next wait. */
  ncclResult_t ae = ncclSuccess;
  if (relayNccl.ncclCommGetAsyncError(st->nccl, &ae) == ncclSuccess && ae != ncclSuccess &&
      ae != ncclInProgress) {
    c->failed = 1;
    return ncclFail(c, ae, "asynchronous NCCL error");
  }
  return relaySuccess;
}

/* ---- lanes ------------------------------------------------------------ */

static relayNcclLane* findLane(relayNcclState* st, cudaStream_t caller) {
  for (int i = 0; i < st->nLanes; i++)
    if (st->lanes[i].caller == caller) return &st->lanes[i];
  return NULL;
}

static relayResult_t laneFork(struct relayComm* c, relayNcclState* st, cudaStream_t caller,
                              cudaStream_t* side) {
  relayNcclLane* l = findLane(st, caller);
  if (!l) {
    if (st->nLanes == st->capLanes) {
      int cap = st->capLanes ? 2 * st->capLanes : 4;
      relayNcclLane* n = realloc(st->lanes, (size_t)cap * sizeof *n);
      if (!n) return relaySetError(c, relaySystemError, "out of memory for a side lane");
      st->lanes = n;
      st->capLanes = cap;
    }
    relayNcclLane nl;
    memset(&nl, 0, sizeof nl);
    nl.caller = caller;
    enum cudaStreamCaptureMode mode = relayNcclRelaxCapture();
    /* Non-blocking: the side stream must not serialize with the legacy
     * default stream; its only ordering is the events below. */
    cudaError_t e = cudaStreamCreateWithFlags(&nl.side, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&nl.fork, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&nl.join, cudaEventDisableTiming);
    relayNcclRestoreCapture(mode);
    if (e != cudaSuccess) {
      if (nl.join) cudaEventDestroy(nl.join);
      if (nl.fork) cudaEventDestroy(nl.fork);
      if (nl.side) cudaStreamDestroy(nl.side);
      return cudaFail(c, e, "creating the side lane");
    }
    st->lanes[st->nLanes] = nl;
    l = &st->lanes[st->nLanes++];
  }
  /* Every lane-1 op forks anew: it must see all work issued on the caller
   * stream before it (this step's transfers included). */
  cudaError_t e = cudaEventRecord(l->fork, caller);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(l->side, l->fork, 0);
  if (e != cudaSuccess) return cudaFail(c, e, "forking the side lane");
  if (!l->pending) {
    l->pending = 1;
    st->nPending++;
  }
  *side = l->side;
  return relaySuccess;
}

static relayResult_t tpJoin(struct relayComm* c, relayStream_t stream) {
  relayNcclState* st = c->tpState;
  if (st->nPending == 0) return relaySuccess; /* the common case: no side work */
  cudaStream_t caller = (cudaStream_t)stream;
  relayNcclLane* l = findLane(st, caller);
  if (!l || !l->pending) return relaySuccess;
  l->pending = 0;
  st->nPending--;
  cudaError_t e = cudaEventRecord(l->join, l->side);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(caller, l->join, 0);
  if (e != cudaSuccess) return cudaFail(c, e, "joining the side lane");
  return relaySuccess;
}

/* ---- local ops -------------------------------------------------------- */

static relayResult_t tpReduce(struct relayComm* c, void* dst, const void* const* srcs, int nsrc, size_t count,
                              relayDataType_t dt, relayRedOp_t op, int divisor, int lane,
                              relayStream_t stream) {
  relayNcclState* st = c->tpState;
  if (count == 0) return relaySuccess;
  cudaStream_t s = (cudaStream_t)stream;
  if (lane) RELAY_CHECK(laneFork(c, st, s, &s));
  /* A side-lane reduce overlaps the next steps' NCCL kernels, whose blocks
   * need room on the SMs; it takes half the cap (not measured yet: the bench
   * should settle it). */
  int blocks = lane ? (st->reduceBlocks + 1) / 2 : st->reduceBlocks;
  cudaError_t e = relayCudaReduce(dst, srcs, nsrc, count, dt, op, divisor, blocks, s);
  if (e != cudaSuccess) {
    c->failed = 1;
    return cudaFail(c, e, "reduce kernel launch");
  }
  return relaySuccess;
}

static relayResult_t tpCopy(struct relayComm* c, void* dst, const void* src, size_t bytes, int lane,
                            relayStream_t stream) {
  relayNcclState* st = c->tpState;
  if (bytes == 0 || dst == src) return relaySuccess;
  cudaStream_t s = (cudaStream_t)stream;
  if (lane) RELAY_CHECK(laneFork(c, st, s, &s));
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess) {
    c->failed = 1;
    return cudaFail(c, e, "cudaMemcpyAsync");
  }
  return relaySuccess;
}

/* ---- scratch ---------------------------------------------------------- */

/* Sizes >= 1 MiB round up to a multiple of 64 MiB (the reference's rule: a
 * sweep over sizes then allocates a handful of times, not once per size);
 * smaller ones to a power of two >= 4 KiB. A growing slot at least doubles,
 * so the outgrown buffers kept until destroy never exceed the live one. */
static size_t scratchSize(size_t need, size_t old) {
  size_t want = need;
  if (old && want < 2 * old) want = 2 * old;
  if (want >= MIB) {
    size_t unit = 64 * MIB;
    return (want + unit - 1) / unit * unit;
  }
  size_t p = 4096;
  while (p < want) p <<= 1;
  return p;
}

static relayResult_t tpScratch(struct relayComm* c, int slot, size_t bytes, void** ptr,
                               relayStream_t stream) {
  relayNcclState* st = c->tpState;
  cudaStream_t s = (cudaStream_t)stream;
  relayNcclScratch* e = NULL;
  for (int i = 0; i < st->nScratch; i++)
    if (st->scratch[i].stream == s && st->scratch[i].slot == slot) {
      e = &st->scratch[i];
      break;
    }
  if (e && e->bytes >= bytes) {
    *ptr = e->ptr;
    return relaySuccess;
  }
  if (bytes == 0) {
    *ptr = NULL;
    return relaySuccess;
  }
  if (!e) {
    if (st->nScratch == st->capScratch) {
      int cap = st->capScratch ? 2 * st->capScratch : 8;
      relayNcclScratch* n = realloc(st->scratch, (size_t)cap * sizeof *n);
      if (!n) return relaySetError(c, relaySystemError, "out of memory for the scratch table");
      st->scratch = n;
      st->capScratch = cap;
    }
    e = &st->scratch[st->nScratch];
    memset(e, 0, sizeof *e);
    e->stream = s;
    e->slot = slot;
    st->nScratch++;
  }
  if (e->ptr && st->nRetired == st->capRetired) {
    int cap = st->capRetired ? 2 * st->capRetired : 8;
    void** n = realloc(st->retired, (size_t)cap * sizeof *n);
    if (!n) return relaySetError(c, relaySystemError, "out of memory for the scratch table");
    st->retired = n;
    st->capRetired = cap;
  }
  size_t size = scratchSize(bytes, e->bytes);
  void* p = NULL;
  /* Plain cudaMalloc, never cudaMallocAsync (see the top of this file); in
   * relaxed mode so that a call captured before any warm-up still allocates
   * real memory outside the graph instead of failing the capture. */
  enum cudaStreamCaptureMode mode = relayNcclRelaxCapture();
  cudaError_t err = cudaMalloc(&p, size);
  relayNcclRestoreCapture(mode);
  if (err != cudaSuccess) {
    cudaGetLastError(); /* an allocation failure is not sticky; don't leave it for the user */
    return relaySetError(c, err == cudaErrorMemoryAllocation ? relaySystemError : fromCuda(err),
                         "cudaMalloc of %zu bytes for scratch slot %d failed: %s", size, slot,
                         cudaGetErrorString(err));
  }
  if (e->ptr) st->retired[st->nRetired++] = e->ptr;
  e->ptr = p;
  e->bytes = size;
  *ptr = p;
  return relaySuccess;
}

/* ---- agreement -------------------------------------------------------- */

static relayResult_t tpAgree(struct relayComm* c, const void* mine, void* all, size_t bytes) {
  relayNcclState* st = c->tpState;
  if (bytes == 0 || bytes > RELAY_NCCL_AGREE_MAX)
    return relaySetError(c, relayInternalError, "agree of %zu bytes (must be in [1, %d])", bytes,
                         RELAY_NCCL_AGREE_MAX);
  if (st->ctrl) {
    /* Owned comm: the host-side shm control plane; no GPU round trip. */
    relayResult_t r = st->ctrl->tp->agree(st->ctrl, mine, all, bytes);
    char why[sizeof c->lastError];
    if (r != relaySuccess)
      relaySetError(c, r, "agree: %s", relayErrorQuote(c, st->ctrl->lastError, why, sizeof why));
    return r;
  }
  RELAY_CHECK(checkUsable(c, st, "agree"));
  char* hsend = st->agreeHost;
  char* hrecv = st->agreeHost + RELAY_NCCL_AGREE_MAX;
  char* dsend = st->agreeDev;
  char* drecv = st->agreeDev + RELAY_NCCL_AGREE_MAX;
  memcpy(hsend, mine, bytes);
  cudaError_t e = cudaMemcpyAsync(dsend, hsend, bytes, cudaMemcpyHostToDevice, st->agreeStream);
  if (e != cudaSuccess) return cudaFail(c, e, "agree: cudaMemcpyAsync");
  ncclResult_t r = relayNccl.ncclAllGather(dsend, drecv, bytes, ncclInt8, st->nccl, st->agreeStream);
  if (r == ncclInProgress) RELAY_CHECK(relayNcclWaitReady(c, st->nccl, "agree: ncclAllGather"));
  else if (r != ncclSuccess) {
    c->failed = 1;
    return ncclFail(c, r, "agree: ncclAllGather");
  }
  e = cudaMemcpyAsync(hrecv, drecv, (size_t)c->nranks * bytes, cudaMemcpyDeviceToHost, st->agreeStream);
  if (e != cudaSuccess) return cudaFail(c, e, "agree: cudaMemcpyAsync");
  RELAY_CHECK(relayNcclWaitStream(c, st, st->agreeStream, "agree (ncclAllGather)"));
  memcpy(all, hrecv, (size_t)c->nranks * bytes);
  return relaySuccess;
}

static relayResult_t tpBarrier(struct relayComm* c) {
  relayNcclState* st = c->tpState;
  if (st->ctrl) {
    relayResult_t r = st->ctrl->tp->barrier(st->ctrl);
    char why[sizeof c->lastError];
    if (r != relaySuccess)
      relaySetError(c, r, "barrier: %s", relayErrorQuote(c, st->ctrl->lastError, why, sizeof why));
    return r;
  }
  int one = 1;
  int* all = malloc((size_t)c->nranks * sizeof *all);
  if (!all) return relaySetError(c, relaySystemError, "out of memory in barrier");
  relayResult_t r = tpAgree(c, &one, all, sizeof one);
  free(all);
  return r;
}

static void tpAbort(struct relayComm* c) {
  relayNcclState* st = c->tpState;
  if (!st) return;
  atomic_store(&st->aborted, 1);
  relayNcclOneShotAbort(c); /* a one-shot kernel's waits end within ~1024 polls */
  /* Wake a wait in the control plane; NCCL waits are polls that see the flag. */
  if (st->ctrl) {
    atomic_store(&st->ctrl->aborted, 1);
    if (st->ctrl->tp && st->ctrl->tp->abort) st->ctrl->tp->abort(st->ctrl);
  }
}

/* ---- destroy ---------------------------------------------------------- */

/* cudaFree and ncclCommDestroy wait for the device without a deadline, so the
 * device is drained first in a helper thread that the caller waits on with
 * one. */
typedef struct {
  int device;
  atomic_int done;
  atomic_int refs;
  cudaError_t err;
} drainJob;

static void drainRelease(drainJob* j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) free(j);
}

static void* drainMain(void* arg) {
  drainJob* j = arg;
  cudaError_t e = cudaSetDevice(j->device);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  j->err = e;
  atomic_store(&j->done, 1);
  drainRelease(j);
  return NULL;
}

/* 1 when the device went idle within limitNs (UINT64_MAX: however long it takes). */
static int drainDevice(int device, uint64_t limitNs) {
  drainJob* j = calloc(1, sizeof *j);
  if (!j) return 0;
  j->device = device;
  atomic_init(&j->done, 0);
  atomic_init(&j->refs, 2);
  pthread_t th;
  if (pthread_create(&th, NULL, drainMain, j) != 0) {
    free(j);
    return 0;
  }
  uint64_t t0 = relayNowNs();
  while (!atomic_load(&j->done) && relayNowNs() - t0 < limitNs) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  int done = atomic_load(&j->done);
  if (done) {
    pthread_join(th, NULL);
  } else {
    pthread_detach(th); /* still stuck: leave it; it frees the job when (if) it returns */
  }
  drainRelease(j);
  return done;
}

int relayNcclCapturing(cudaStream_t stream) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
    cudaGetLastError(); /* the user's sticky error is not ours to leave */
    return 1;
  }
  return cap != cudaStreamCaptureStatusNone;
}

static int tpIsCapturing(struct relayComm* c, relayStream_t stream) {
  (void)c;
  return relayNcclCapturing((cudaStream_t)stream);
}

static void tpDestroy(struct relayComm* c) {
  relayNcclState* st = c->tpState;
  if (!st) return;
  int prevDev = -1;
  cudaGetDevice(&prevDev);
  cudaSetDevice(st->device);
  int aborted = isAborted(c, st);
  /* An aborted or failed owned comm may have kernels waiting for a dead peer:
   * abort NCCL first, then the drain finishes. A wrapped one is the user's
   * to abort; we only wait (shortly, when aborted) for it. */
  if (st->ownsNccl && (aborted || c->failed)) abortNccl(st);
  if (aborted || c->failed) relayNcclOneShotAbort(c); /* its kernels wait on peers: end them */
  uint64_t waitNs = relayWaitLimitNs(c);
  if (aborted && waitNs > 5000000000ull) waitNs = 5000000000ull;
  uint64_t t0 = relayNowNs();
  int drained = drainDevice(st->device, waitNs);
  if (!drained && st->ownsNccl) {
    abortNccl(st);
    drained = drainDevice(st->device, 5000000000ull);
  }
  if (relayDebugLevel() >= 2)
    fprintf(stderr, "relaycc: rank %d: destroy: device %s after %.1f ms (limit %.0f ms)\n", c->rank,
            drained ? "idle" : "still busy", (double)(relayNowNs() - t0) / 1e6, (double)waitNs / 1e6);
  relayNcclNativeFree(st, drained); /* children before their parent */
  relayNcclOneShotFree(c, drained); /* its IPC mappings before NCCL's own */
  if (st->ownsNccl && !st->ncclDead) {
    if (drained) relayNccl.ncclCommDestroy(st->nccl);
    else relayNccl.ncclCommAbort(st->nccl);
    st->ncclDead = 1;
  }
  /* Streams and events are released by CUDA once their work is done, so they
   * can go either way. Device memory can only be freed after a drain:
   * cudaFree waits for the device, and stuck kernels may still use it; then
   * it is leaked (the process is in trouble anyway). */
  for (int i = 0; i < st->nLanes; i++) {
    cudaEventDestroy(st->lanes[i].fork);
    cudaEventDestroy(st->lanes[i].join);
    cudaStreamDestroy(st->lanes[i].side);
  }
  if (st->agreeStream) cudaStreamDestroy(st->agreeStream);
  if (drained) {
    for (int i = 0; i < st->nScratch; i++) cudaFree(st->scratch[i].ptr);
    for (int i = 0; i < st->nRetired; i++) cudaFree(st->retired[i]);
    if (st->agreeDev) cudaFree(st->agreeDev);
    if (st->agreeHost) cudaFreeHost(st->agreeHost);
  }
  free(st->lanes);
  free(st->scratch);
  free(st->retired);
  free(st); /* st->ctrl is borrowed: core destroys comm->ctrl after this */
  c->tpState = NULL;
  if (prevDev >= 0) cudaSetDevice(prevDev);
}

const relayTransportOps relayNcclTransport = {
    .name = "nccl",
    .caps = RELAY_TP_CAP_NATIVE | RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW,
    .group = tpGroup,
    .reduce = tpReduce,
    .copy = tpCopy,
    .scratch = tpScratch,
    .join = tpJoin,
    .agree = tpAgree,
    .barrier = tpBarrier,
    .reject = NULL, /* peers wait on the GPU, not on a host channel this could wake */
    .abort = tpAbort,
    .fail = NULL, /* likewise */
    .destroy = tpDestroy,
    .oneshotPrepare = relayNcclOneShotPrepare, /* oneshot.c, oneshot.cu */
    .oneshot = relayNcclOneShot,
    .bwPrepare = relayNcclBwPrepare, /* bw.c, bw.cu: the same region */
    .bw = relayNcclBw,
    .nativePrepare = relayNcclNativePrepare,
    .native = relayNcclNative,
    .isCapturing = tpIsCapturing,
    .asyncError = relayNcclOneShotAsyncError,
    .winRegister = relayNcclWinRegister,
    .winDeregister = relayNcclWinDeregister,
};

relayResult_t relayCommGetNcclComm(relayComm_t comm, ncclComm_t* nccl) {
  if (!comm || !nccl)
    return relaySetError(NULL, relayInvalidArgument, "relayCommGetNcclComm: %s is NULL",
                         comm ? "nccl" : "comm");
  /* Its errors name it (the prefix); a query, so whatever name was set stays after. */
  const char* outer = comm->curCallName;
  comm->curCallName = "relayCommGetNcclComm";
  relayResult_t res = relaySuccess;
  if (comm->tp != &relayNcclTransport || !comm->tpState)
    res = relaySetError(comm, relayInvalidArgument, "the comm is on the %s transport",
                        comm->tp ? comm->tp->name : "no");
  else if (((relayNcclState*)comm->tpState)->ncclDead)
    res = relaySetError(comm, relayInvalidUsage, "the NCCL communicator was aborted");
  else *nccl = ((relayNcclState*)comm->tpState)->nccl;
  comm->curCallName = outer;
  return res;
}
