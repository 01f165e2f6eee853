/*
 * The direct route as NCCL's own collectives, on a sub-communicator of each
 * group (ncclCommSplit: color = group, key = active index), cached per layout.
 *
 * Why: a direct all-reduce or reduce-scatter built from ncclSend/ncclRecv is
 * a group PLUS a reduce kernel, one launch more than NCCL's fused collective,
 * and measured 0.67-0.86x of NCCL on 2 x H200 (graph replay, 4 KB to 1 GB)
 * while all-gather was 0.87-1.14x. relaycc must never be slower than the
 * NCCL a user has today where the relay does not pay, so where the router
 * picks direct and the transport is NCCL, the call is NCCL's collective on
 * exactly the ranks the baseline uses.
 *
 * ncclCommSplit is collective over the parent communicator and cannot be
 * captured: prepare runs on every rank (helpers too) on the same call, and
 * under capture with no cached split it declines without communicating (every
 * rank captures alike), so the call takes the P2P direct plan instead.
 * Every rank enters the split, a rank short of host memory too (as no
 * member), and then every rank votes: if any split failed, all abort their
 * children and the comm's direct route keeps the send/recv plan for good.
 *
 * A layout of one group of every rank in order is the communicator itself: its collective runs on the
 * comm's own NCCL communicator, no split. On a user's communicator (relayCommInitNccl: the
 * interposer's, from_process_group's) that is the only native layout: relaycc creates no NCCL comm
 * inside a user's call (a split takes seconds and a second communicator), so any other layout
 * declines and keeps the send/recv plan. Without ncclCommSplit (NCCL < 2.18) likewise; without
 * ncclAlltoAll (NCCL < 2.28) the all-to-all is a group of ncclSend/ncclRecv on the same comm.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "transport/nccl/nccl_transport.h"

struct relayNcclNative {
  int nGroups, nActive;
  int* ranks;
  ncclComm_t sub; /* NULL on ranks active in no group */
};

/* The whole comm, every rank in its own place: NCCL's collective on the comm's communicator. */
static int wholeComm(const struct relayComm* c, int nGroups, int nActive, const int* ranks) {
  if (nGroups != 1 || nActive != c->nranks) return 0;
  for (int i = 0; i < nActive; i++)
    if (ranks[i] != i) return 0;
  return 1;
}

/* A split on a non-blocking parent returns ncclInProgress; the child is
 * usable once its async state leaves it. Bounded by the comm's deadline. */
static ncclResult_t waitSplit(struct relayComm* c, ncclComm_t sub) {
  if (!sub) return ncclInternalError;
  uint64_t deadline = relayDeadlineNs(c, relayNowNs());
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = relayNccl.ncclCommGetAsyncError(sub, &state);
    if (q != ncclSuccess) return q;
    if (state != ncclInProgress) return state;
    if (relayNowNs() > deadline) return ncclInternalError;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

relayResult_t relayNcclNativePrepare(struct relayComm* c, int nGroups, int nActive, const int* ranks,
                                     relayStream_t stream, void** handle) {
  relayNcclState* st = c->tpState;
  *handle = NULL;
  if (!st->nativeOn) return relayNotSupported; /* rank 0's RELAYCC_NCCL_NATIVE, agreed at init */
  size_t n = (size_t)nGroups * (size_t)nActive;
  /* A comm has a layout or two: compared in full, no hash. */
  for (int i = 0; i < st->nNatives; i++) {
    struct relayNcclNative* e = st->natives[i];
    if (e->nGroups == nGroups && e->nActive == nActive && !memcmp(e->ranks, ranks, n * sizeof(int))) {
      *handle = e;
      return relaySuccess;
    }
  }
  /* The handle of the whole comm is the address of its own communicator: nothing to allocate (so no
   * rank can fail alone here), nothing to free. */
  if (wholeComm(c, nGroups, nActive, ranks)) {
    *handle = &st->nccl;
    return relaySuccess;
  }
  /* No split on a user's communicator, nor without the function. */
  if (!st->ownsNccl || !relayNccl.ncclCommSplit) return relayNotSupported;
  if (relayNcclCapturing((cudaStream_t)stream)) return relayNotSupported;
  int color = NCCL_SPLIT_NOCOLOR, key = 0;
  for (size_t i = 0; i < n; i++)
    if (ranks[i] == c->rank) {
      color = (int)(i / (size_t)nActive);
      key = (int)(i % (size_t)nActive);
    }
  struct relayNcclNative* e = calloc(1, sizeof *e);
  int* rcopy = malloc(n * sizeof(int));
  struct relayNcclNative** grown = realloc(st->natives, (size_t)(st->nNatives + 1) * sizeof *grown);
  if (grown) st->natives = grown;
  int haveMem = e && rcopy && grown;
  /* Every rank enters the split, even one short of memory (as no member of
   * any group), so no peer blocks in it for good; then every rank votes. */
  ncclComm_t sub = NULL;
  ncclResult_t r = relayNccl.ncclCommSplit(st->nccl, haveMem ? color : NCCL_SPLIT_NOCOLOR, key, &sub, NULL);
  if (r == ncclInProgress) r = waitSplit(c, sub); /* a non-blocking parent: the child completes later */
  int ok = haveMem && r == ncclSuccess;
  const char* why = !haveMem ? "this rank is out of host memory" : relayNccl.ncclGetErrorString(r);
  relayVerdict v;
  relayResult_t vr = relayVote(c, ok, why, &v);
  if (vr != relaySuccess || !v.yes) {
    if (sub) relayNccl.ncclCommAbort(sub);
    free(e);
    free(rcopy);
    if (vr != relaySuccess) return vr; /* the vote failed the comm */
    /* A normal answer, the same on every rank: this comm's direct route
     * keeps relaycc's send/recv plan from now on (sticky, no more splits). */
    st->nativeOn = 0;
    if (!ok)
      fprintf(stderr, "relaycc: rank %d: NCCL sub-communicators declined on every rank: %s\n", c->rank, why);
    return relayNotSupported;
  }
  e->sub = sub;
  memcpy(rcopy, ranks, n * sizeof(int));
  e->nGroups = nGroups;
  e->nActive = nActive;
  e->ranks = rcopy;
  st->natives[st->nNatives++] = e;
  *handle = e;
  return relaySuccess;
}

/* ncclAlltoAll as NCCL < 2.28 programs write it: a send and a receive per peer in one group. */
static ncclResult_t groupedAllToAll(const void* send, void* recv, size_t count, ncclDataType_t t, int n,
                                    ncclComm_t comm, cudaStream_t s) {
  size_t bytes = count * relayTypeSize((relayDataType_t)t);
  ncclResult_t r = relayNccl.ncclGroupStart();
  for (int q = 0; q < n && r == ncclSuccess; q++) {
    r = relayNccl.ncclSend((const char*)send + (size_t)q * bytes, count, t, q, comm, s);
    if (r == ncclSuccess) r = relayNccl.ncclRecv((char*)recv + (size_t)q * bytes, count, t, q, comm, s);
  }
  ncclResult_t g = relayNccl.ncclGroupEnd(); /* closes the group whatever failed inside it */
  return r != ncclSuccess ? r : g;
}

relayResult_t relayNcclNative(struct relayComm* c, void* handle, relayCollective_t coll, const void* send,
                              void* recv, size_t count, relayDataType_t dt, relayRedOp_t op, int root,
                              relayStream_t stream) {
  relayNcclState* st = c->tpState;
  struct relayNcclNative* e = handle;
  int whole = handle == (void*)&st->nccl;
  ncclComm_t sub = whole ? st->nccl : e ? e->sub : NULL;
  int nSub = whole ? c->nranks : e ? e->nActive : 0;
  if (!sub || count == 0) return relaySuccess; /* helpers, empty groups */
  cudaStream_t s = (cudaStream_t)stream;
  ncclDataType_t t = (ncclDataType_t)dt; /* same numbering by design (relaycc.h) */
  ncclResult_t r;
  switch (coll) {
    case relayCollectiveAllGather: r = relayNccl.ncclAllGather(send, recv, count, t, sub, s); break;
    case relayCollectiveReduceScatter:
      r = relayNccl.ncclReduceScatter(send, recv, count, t, (ncclRedOp_t)op, sub, s);
      break;
    case relayCollectiveAllReduce:
      r = relayNccl.ncclAllReduce(send, recv, count, t, (ncclRedOp_t)op, sub, s);
      break;
    case relayCollectiveAllToAll:
      r = relayNccl.ncclAlltoAll ? relayNccl.ncclAlltoAll(send, recv, count, t, sub, s)
                                 : groupedAllToAll(send, recv, count, t, nSub, sub, s);
      break;
    /* root: the root's position in the group, its rank in the sub-communicator (members in layout
     * order; the whole comm's in rank order). NCCL reads sendbuff on the root only (broadcast) and writes
     * recvbuff on the root only (reduce), as relaycc's contract says: a NULL there is never touched. */
    case relayCollectiveBroadcast: r = relayNccl.ncclBroadcast(send, recv, count, t, root, sub, s); break;
    case relayCollectiveReduce:
      r = relayNccl.ncclReduce(send, recv, count, t, (ncclRedOp_t)op, root, sub, s);
      break;
    default: return relaySetError(c, relayInternalError, "no native %s", relayCollName(coll));
  }
  /* A child of a nonblocking parent is nonblocking too. */
  if (r == ncclInProgress)
    return relayNcclWaitReady(c, sub,
                              whole ? "NCCL collective on the comm's communicator"
                                    : "NCCL collective on the group's sub-communicator");
  if (r != ncclSuccess) {
    c->failed = 1;
    return relaySetError(
        c, r == ncclInvalidArgument || r == ncclInvalidUsage ? relayInvalidArgument : relayInternalError,
        "NCCL collective on the %s failed: %s", whole ? "comm's communicator" : "group's sub-communicator",
        relayNccl.ncclGetErrorString(r));
  }
  return relaySuccess;
}

void relayNcclNativeAbort(relayNcclState* st) {
  for (int i = 0; i < st->nNatives; i++)
    if (st->natives[i]->sub) {
      relayNccl.ncclCommAbort(st->natives[i]->sub);
      st->natives[i]->sub = NULL;
    }
}

void relayNcclNativeFree(relayNcclState* st, int drained) {
  for (int i = 0; i < st->nNatives; i++) {
    struct relayNcclNative* e = st->natives[i];
    /* A child outlives nothing: destroyed when the device drained, else
     * aborted (also after its parent was aborted). */
    if (e->sub) {
      if (drained && !st->ncclDead) relayNccl.ncclCommDestroy(e->sub);
      else relayNccl.ncclCommAbort(e->sub);
    }
    free(e->ranks);
    free(e);
  }
  free(st->natives);
  st->natives = NULL;
  st->nNatives = 0;
}
