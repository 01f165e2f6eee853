/*
 * Point-to-point (relaySend, relayRecv, relayGroupStart, relayGroupEnd) and the uneven all-to-all
 * (relayAllToAllv): groups of transfers run straight on the transport's group op, no plan, no route.
 *
 * Point-to-point stands outside the call numbering (only two ranks call): comm->pairSeq counts each
 * ordered pair's transfers, and every transfer carries a tag (comm/transport.h relayXferTag: the pair's
 * sequence number, the count and datatype) that the transport checks at the receiver, so the k-th send
 * of a to b meets the k-th receive of b from a or an error, never another transfer's bytes. A rank that
 * rejects its own transfer (a bad datatype or buffer) still takes its place in the pair's sequence: a
 * send goes out as a rejection (no bytes), a receive drains what comes; so only the pair sees it and
 * the pair stays in step.
 *
 * The all-to-all-v is a collective (every rank calls, it counts in the numbering): the actives exchange
 * their blocks as one tagged group, the tag carrying the call's number and each block's count, so a
 * pair whose counts disagree is an error at the receiver in check mode 0; check mode 1 agrees on every
 * row first (one round), so every rank returns the same error and nothing moves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "core/core.h"
#include "p2p/p2p.h"

/* ---- point-to-point ------------------------------------------------------ */

typedef struct {
  struct relayComm* comm;
  int isSend;
  void* buff;
  size_t count;
  relayDataType_t dtype;
  int peer;
  int flags; /* RELAY_TAG_REJECT / RELAY_TAG_DRAIN: the call was rejected on this rank */
  relayStream_t stream;
} pt2ptOp;

/* This thread's open group (NCCL's groups are per thread): the calls queued until the outermost end. */
static _Thread_local struct {
  int depth;
  pt2ptOp* ops;
  int n, cap;
} tlsGroup;

/* The argument check of one transfer: relaySuccess, or the error (written as this call's). A peer
 * outside the comm has nobody to tell: *told is 0 and the call is rejected on this rank only. */
static relayResult_t pt2ptValidate(struct relayComm* c, const pt2ptOp* op, const char* reason, int* told) {
  *told = 1;
  if (op->peer < 0 || op->peer >= c->nranks) {
    *told = 0;
    return relaySetError(c, relayInvalidArgument, "peer = %d is not in [0, %d)", op->peer, c->nranks);
  }
  if (reason) return relaySetError(c, relayInvalidArgument, "%s", reason);
  size_t es = relayTypeSize(op->dtype);
  if (es == 0)
    return relaySetError(c, relayInvalidArgument, "datatype %d is not a relayDataType_t", (int)op->dtype);
  if (op->count > SIZE_MAX / es)
    return relaySetError(c, relayInvalidArgument, "count = %zu overflows: x %zu bytes exceeds size_t",
                         op->count, es);
  if (op->count && !op->buff)
    return relaySetError(c, relayInvalidArgument, "%s is NULL (count %zu)",
                         op->isSend ? "sendbuff" : "recvbuff", op->count);
  return relaySuccess;
}

/* The comm's state before a group runs on it: failed, aborted or a latched async error end it. */
static relayResult_t commUsable(struct relayComm* c) {
  relayResult_t latched = c->failed ? relaySuccess : relayCommLatched(c);
  if (latched != relaySuccess) return latched;
  if (c->failed) {
    char earlier[sizeof c->lastError];
    return relaySetError(c, relayInvalidUsage, "the comm failed in an earlier call; destroy it (%s)",
                         relayErrorQuote(c, c->lastError, earlier, sizeof earlier));
  }
  if (atomic_load(&c->aborted)) return relaySetError(c, relayInvalidUsage, "the comm was aborted");
  return relaySuccess;
}

/* The pairwise check round (check mode 1 on shm; every call on NCCL, whose data path carries no tags:
 * on its control plane, the shm comm under it): each transfer's tag goes to its peer with no bytes, and
 * each receive's tag comes back to its sender (an ACK), so BOTH ends learn which transfers the pair
 * disagrees on or rejected (RELAY_TAG_FAILED on the tag) before any data moves. k is the comm that runs
 * the round (c itself, or c->ctrl); its error text becomes c's. */
static relayResult_t pt2ptCheck(struct relayComm* c, struct relayComm* k, relayXferTag* tags,
                                const int* peers, int ns, int nx, const char* name) {
  relayXferDesc* x = calloc(2 * (size_t)nx, sizeof *x);
  relayXferTag* ct = malloc(2 * (size_t)nx * sizeof *ct);
  if (!x || !ct) {
    free(x);
    free(ct);
    return relaySetError(c, relaySystemError, "out of memory for a check round of %d transfers", nx);
  }
  int nr = nx - ns;
  /* sends: forward sends [0, ns), ACKs of receives [ns, nx); receives: forward receives [nx, nx + nr),
   * ACK receives of sends [nx + nr, 2 nx): per peer, forward before ACK on both ends. */
  for (int i = 0; i < ns; i++) {
    x[i].peer = x[nx + nr + i].peer = peers[i];
    ct[i] = tags[i];
    ct[nx + nr + i] = tags[i];
    ct[nx + nr + i].seq |= RELAY_TAG_ACK;
    ct[nx + nr + i].flags = (tags[i].flags & RELAY_TAG_REJECT) ? RELAY_TAG_DRAIN : 0;
  }
  for (int j = 0; j < nr; j++) {
    x[ns + j].peer = x[nx + j].peer = peers[ns + j];
    ct[nx + j] = tags[ns + j];
    ct[ns + j] = tags[ns + j];
    ct[ns + j].seq |= RELAY_TAG_ACK;
    ct[ns + j].flags = (tags[ns + j].flags & RELAY_TAG_DRAIN) ? RELAY_TAG_REJECT : 0;
  }
  if (k != c) {
    k->curCallName = name;
    atomic_store(&k->inCall, 1);
    k->inPt2pt = 1;
    k->callMark = -1;
    k->callShape = 0;
    k->curStep = -1;
  }
  k->xferTags = ct;
  relayResult_t res = k->tp->group(k, x, nx, x + nx, nx, P2P_OP_SENDRECV, NULL);
  k->xferTags = NULL;
  if (k != c) {
    k->inPt2pt = 0;
    k->curCallName = NULL;
    atomic_store(&k->inCall, 0);
    if (res != relaySuccess && res != relayInvalidArgument) {
      const char* body = strstr(k->lastError, "): ");
      relaySetError(c, res, "%s", body ? body + 3 : k->lastError);
      if (k->failed) c->failed = 1; /* the control plane is out of step: so is the comm */
    }
  }
  for (int i = 0; i < ns; i++) tags[i].flags |= ct[nx + nr + i].flags & RELAY_TAG_FAILED;
  for (int j = 0; j < nr; j++) tags[ns + j].flags |= ct[nx + j].flags & RELAY_TAG_FAILED;
  free(x);
  free(ct);
  return res;
}

/* Run the queued transfers of comm c (ops[0..n) that name it) as one group. name: the call the errors
 * name. Returns the group's result; a rank's own rejected transfer is not the group's error (its call
 * returned it). */
static relayResult_t pt2ptRunComm(struct relayComm* c, const pt2ptOp* ops, int n, const char* name) {
  int nx = 0, ns = 0;
  for (int i = 0; i < n; i++)
    if (ops[i].comm == c) nx++, ns += ops[i].isSend;
  if (!c->pairSeq) {
    c->pairSeq = calloc(2 * (size_t)c->nranks, sizeof *c->pairSeq);
    if (!c->pairSeq) return relaySetError(c, relaySystemError, "out of memory for the pair sequence numbers");
  }
  relayXferDesc* x = malloc((size_t)nx * sizeof *x);
  relayXferTag* tags = malloc((size_t)nx * sizeof *tags);
  int* peers = malloc((size_t)nx * sizeof *peers);
  if (!x || !tags || !peers) {
    free(x);
    free(tags);
    free(peers);
    return relaySetError(c, relaySystemError, "out of memory for a group of %d transfers", nx);
  }
  int is = 0, ir = ns;
  relayStream_t stream = NULL;
  for (int i = 0; i < n; i++) {
    const pt2ptOp* op = &ops[i];
    if (op->comm != c) continue;
    int k = op->isSend ? is++ : ir++;
    uint64_t* seq = &c->pairSeq[(op->isSend ? 0 : (size_t)c->nranks) + (size_t)op->peer];
    size_t bytes = op->flags ? 0 : op->count * relayTypeSize(op->dtype);
    x[k] = (relayXferDesc){op->peer, op->flags ? NULL : op->buff, bytes};
    tags[k] = (relayXferTag){RELAY_TAG_PAIR | ++*seq, op->count, (int32_t)op->dtype, op->flags};
    peers[k] = op->peer;
    stream = op->stream;
  }
  c->curCallName = name;
  atomic_store(&c->inCall, 1);
  c->inPt2pt = 1;
  relayResult_t res = commUsable(c);
  /* Where the pair is checked first (a check round), the data group holds only the transfers both ends
   * passed; else every transfer goes, rejected ones as rejections and drains, which the transport's tags
   * turn into errors at the receiver. */
  struct relayComm* checker = (c->tp->caps & RELAY_TP_CAP_SHAPES) ? (c->cfg.checkMode ? c : NULL) : c->ctrl;
  relayResult_t checked = relaySuccess;
  if (res == relaySuccess) {
    c->callMark = -1;
    c->callShape = 0;
    c->curStep = -1;
    if (checker) {
      checked = pt2ptCheck(c, checker, tags, peers, ns, nx, name);
      if (checked != relaySuccess && checked != relayInvalidArgument && checked != relayRemoteError &&
          checked != relayInvalidUsage)
        res = checked; /* the round itself failed (a dead peer, a deadline): no data group */
      if (checked == relayInvalidUsage && c->failed) res = checked;
    }
  }
  if (res == relaySuccess) {
    int ks = 0, kx = 0;
    for (int k = 0; k < nx; k++) {
      if (checker && tags[k].flags) continue; /* failed or rejected: both ends know, nothing moves */
      ks += k < ns;
      x[kx] = x[k];
      tags[kx++] = tags[k];
    }
    c->xferTags = (c->tp->caps & RELAY_TP_CAP_SHAPES) ? tags : NULL;
    res = c->tp->group(c, x, ks, x + ks, kx - ks, P2P_OP_SENDRECV, stream);
    c->xferTags = NULL;
    if (res == relaySuccess || res == relayInvalidArgument) res = checked;
  }
  c->inPt2pt = 0;
  c->curCallName = NULL;
  atomic_store(&c->inCall, 0);
  free(x);
  free(tags);
  free(peers);
  /* The rank's own rejection was its call's answer already. */
  return res == relayInvalidArgument ? relaySuccess : res;
}

/* Run every comm's transfers of the closed group, comm by comm in the order of their keys (commKey),
 * which every rank shares: a group's transfers on one comm run together, so where rank a's group sends on
 * comm X and receives on Y while rank b's sends on Y and receives on X, both take X first and neither
 * waits for the other (in order of first appearance each would block in its own send once the message
 * outgrew the ring). Comms with equal keys (a 2^-64 chance) keep the order they first appear in. */
static relayResult_t pt2ptRun(pt2ptOp* ops, int n) {
  relayResult_t first = relaySuccess;
  struct relayComm* done = NULL; /* the last comm run: the next is the smallest key above it */
  for (;;) {
    struct relayComm* next = NULL;
    for (int i = 0; i < n; i++) {
      struct relayComm* k = ops[i].comm;
      int after = !done || k->commKey > done->commKey;
      if (after && (!next || k->commKey < next->commKey)) next = k;
    }
    if (!next) break;
    const char* name = n == 1 ? (ops[0].isSend ? "relaySend" : "relayRecv") : "relayGroupEnd";
    relayResult_t res = pt2ptRunComm(next, ops, n, name);
    if (first == relaySuccess) first = res;
    /* Comms whose key equals next's but are not next: run them now, in order of first appearance. */
    for (int i = 0; i < n; i++) {
      struct relayComm* k = ops[i].comm;
      int seen = k == next;
      for (int j = 0; j < i && !seen; j++) seen = ops[j].comm == k;
      if (seen || k->commKey != next->commKey) continue;
      res = pt2ptRunComm(k, ops, n, name);
      if (first == relaySuccess) first = res;
    }
    done = next;
  }
  return first;
}

static relayResult_t pt2ptCall(pt2ptOp op, const char* reason) {
  const char* name = op.isSend ? "relaySend" : "relayRecv";
  if (!op.comm) return relaySetError(NULL, relayInvalidArgument, "%s: comm is NULL", name);
  struct relayComm* c = op.comm;
  c->curCallName = name;
  int told;
  relayResult_t local = pt2ptValidate(c, &op, reason, &told);
  c->curCallName = NULL;
  if (local != relaySuccess && !told) return local;
  char saved[sizeof c->lastError];
  if (local != relaySuccess) {
    op.flags = op.isSend ? RELAY_TAG_REJECT : RELAY_TAG_DRAIN;
    memcpy(saved, c->lastError, sizeof saved);
  }
  if (tlsGroup.depth > 0) {
    if (tlsGroup.n == tlsGroup.cap) {
      int cap = tlsGroup.cap ? 2 * tlsGroup.cap : 16;
      pt2ptOp* ops = realloc(tlsGroup.ops, (size_t)cap * sizeof *ops);
      if (!ops) return relaySetError(c, relaySystemError, "%s: out of memory queueing a transfer", name);
      tlsGroup.ops = ops;
      tlsGroup.cap = cap;
    }
    tlsGroup.ops[tlsGroup.n++] = op;
    return local;
  }
  relayResult_t res = pt2ptRun(&op, 1);
  if (local != relaySuccess && res == relaySuccess) {
    memcpy(c->lastError, saved, sizeof saved); /* the rejection's text, not the run's */
    return local;
  }
  return res;
}

relayResult_t relaySend(const void* sendbuff, size_t count, relayDataType_t datatype, int peer,
                        relayComm_t comm, relayStream_t stream) {
  pt2ptOp op = {comm, 1, (void*)sendbuff, count, datatype, peer, 0, stream};
  return pt2ptCall(op, NULL);
}

relayResult_t relayRecv(void* recvbuff, size_t count, relayDataType_t datatype, int peer, relayComm_t comm,
                        relayStream_t stream) {
  pt2ptOp op = {comm, 0, recvbuff, count, datatype, peer, 0, stream};
  return pt2ptCall(op, NULL);
}

/* relayCallReject's point-to-point half (api.c): the transfer as the binding read it, rejected. */
relayResult_t relayPt2ptReject(int isSend, size_t count, relayDataType_t datatype, int peer,
                               const char* reason, relayComm_t comm, relayStream_t stream) {
  pt2ptOp op = {comm, isSend, NULL, count, datatype, peer, 0, stream};
  return pt2ptCall(op, reason ? reason : "rejected by the binding");
}

relayResult_t relayGroupStart(void) {
  tlsGroup.depth++;
  return relaySuccess;
}

relayResult_t relayGroupEnd(void) {
  if (tlsGroup.depth <= 0)
    return relaySetError(NULL, relayInvalidUsage, "relayGroupEnd: no group is open on this thread");
  if (--tlsGroup.depth > 0) return relaySuccess;
  int n = tlsGroup.n;
  tlsGroup.n = 0;
  relayResult_t res = n ? pt2ptRun(tlsGroup.ops, n) : relaySuccess;
  free(tlsGroup.ops);
  tlsGroup.ops = NULL;
  tlsGroup.cap = 0;
  return res;
}

/* ---- uneven all-to-all --------------------------------------------------- */

/* Check mode 1's record: this rank's verdict and row. Up to RELAY_A2AV_AGREE_MAX actives fit a round
 * (16 + 16 A bytes <= RELAY_TP_AGREE_MAX); a larger group is checked by the headers only. */
#define RELAY_A2AV_AGREE_MAX ((RELAY_TP_AGREE_MAX - 16) / 16)
typedef struct {
  int32_t status, dtype;
  uint64_t layout;
  uint64_t counts[2 * RELAY_A2AV_AGREE_MAX]; /* sendcounts, then recvcounts */
} a2avDigest;

typedef struct {
  const void* send;
  const size_t *sendcounts, *sdispls;
  void* recv;
  const size_t *recvcounts, *rdispls;
  relayDataType_t dtype;
  const relayLayout_t* layout;
} a2avArgs;

/* The shape (layout, datatype) every rank must hold alike; *me = this rank's active index or -1. A
 * shape error: peers cannot know this rank's part of the call. */
static relayResult_t a2avShape(struct relayComm* c, const a2avArgs* a, int* me) {
  *me = -1;
  if (relayTypeSize(a->dtype) == 0)
    return relaySetError(c, relayInvalidArgument, "datatype %d is not a relayDataType_t", (int)a->dtype);
  const relayLayout_t* L = a->layout;
  if (!L) return relaySetError(c, relayInvalidArgument, "layout is NULL");
  if (L->nGroups != 1)
    return relaySetError(c, relayInvalidArgument, "layout.nGroups = %d must be 1", L->nGroups);
  if (L->nActive < 2 || L->nActive > c->nranks)
    return relaySetError(c, relayInvalidArgument, "layout.nActive = %d must be in [2, %d]", L->nActive,
                         c->nranks);
  if (!L->ranks) return relaySetError(c, relayInvalidArgument, "layout.ranks is NULL");
  for (int i = 0; i < L->nActive; i++) {
    if (L->ranks[i] < 0 || L->ranks[i] >= c->nranks)
      return relaySetError(c, relayInvalidArgument, "layout.ranks[%d] = %d is not in [0, %d)", i, L->ranks[i],
                           c->nranks);
    for (int j = 0; j < i; j++)
      if (L->ranks[j] == L->ranks[i])
        return relaySetError(c, relayInvalidArgument, "layout.ranks[%d] and [%d] both name rank %d", j, i,
                             L->ranks[i]);
    if (L->ranks[i] == c->rank) *me = i;
  }
  return relaySuccess;
}

/* An active rank's own arrays and buffers (after a2avShape). */
static relayResult_t a2avLocal(struct relayComm* c, const a2avArgs* a) {
  int A = a->layout->nActive;
  if (!a->sendcounts || !a->sdispls || !a->recvcounts || !a->rdispls)
    return relaySetError(c, relayInvalidArgument, "%s is NULL (active rank)",
                         !a->sendcounts   ? "sendcounts"
                         : !a->sdispls    ? "sdispls"
                         : !a->recvcounts ? "recvcounts"
                                          : "rdispls");
  size_t es = relayTypeSize(a->dtype), anySend = 0, anyRecv = 0;
  for (int j = 0; j < A; j++) {
    if (a->sendcounts[j] > SIZE_MAX / es - a->sdispls[j] / es || a->sdispls[j] > SIZE_MAX / es)
      return relaySetError(c, relayInvalidArgument, "sdispls[%d] + sendcounts[%d] overflows size_t bytes", j,
                           j);
    if (a->recvcounts[j] > SIZE_MAX / es - a->rdispls[j] / es || a->rdispls[j] > SIZE_MAX / es)
      return relaySetError(c, relayInvalidArgument, "rdispls[%d] + recvcounts[%d] overflows size_t bytes", j,
                           j);
    anySend |= a->sendcounts[j];
    anyRecv |= a->recvcounts[j];
  }
  if (anySend && !a->send) return relaySetError(c, relayInvalidArgument, "sendbuff is NULL (active rank)");
  if (anyRecv && !a->recv) return relaySetError(c, relayInvalidArgument, "recvbuff is NULL (active rank)");
  if (a->send && a->send == a->recv)
    return relaySetError(c, relayInvalidArgument,
                         "in-place all-to-all-v (sendbuff == recvbuff) is not supported");
  return relaySuccess;
}

/* Check mode 1: one round of every rank's verdict and row; every rank returns the same error. */
static relayResult_t a2avAgree(struct relayComm* c, const a2avArgs* a, int me, relayResult_t local,
                               int shapeOk) {
  a2avDigest mine;
  memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)local;
  mine.dtype = (int32_t)a->dtype;
  int A = shapeOk ? a->layout->nActive : 0, rows = A <= RELAY_A2AV_AGREE_MAX && local == relaySuccess;
  if (shapeOk)
    mine.layout = relayHash64(RELAY_HASH_SEED, a->layout->ranks, (size_t)A * sizeof(int)) ^ (uint64_t)A;
  if (rows && me >= 0)
    for (int j = 0; j < A; j++) {
      mine.counts[j] = a->sendcounts[j];
      mine.counts[A + j] = a->recvcounts[j];
    }
  const void* allv;
  RELAY_CHECK(relayAgreeCall(c, local, &mine, sizeof mine, &allv));
  const a2avDigest* all = allv;
  for (int r = 0; r < c->nranks; r++)
    if (all[r].dtype != all[0].dtype || all[r].layout != all[0].layout)
      return relaySetError(c, relayInvalidUsage,
                           "rank %d's call has another datatype or layout than rank 0's: ranks disagree", r);
  if (!rows) return relaySuccess;
  const int* ranks = a->layout->ranks;
  for (int i = 0; i < A; i++)
    for (int j = 0; j < A; j++) {
      uint64_t s = all[ranks[i]].counts[j], rv = all[ranks[j]].counts[A + i];
      if (s != rv)
        return relaySetError(c, relayInvalidUsage,
                             "rank %d sends %llu elements to rank %d, which receives %llu from it "
                             "(active %d to active %d): the pair's counts differ; nothing moved",
                             ranks[i], (unsigned long long)s, ranks[j], (unsigned long long)rv, i, j);
    }
  return relaySuccess;
}

/* The active rank's exchange: A sends and A receives, tagged with the call's number and counts; a
 * rejected rank's (flags) go out as rejections and drain what comes, so its pairs stay in step. */
static relayResult_t a2avExchange(struct relayComm* c, const a2avArgs* a, int me, int flags,
                                  relayStream_t stream) {
  int A = a->layout->nActive;
  size_t es = relayTypeSize(a->dtype);
  relayXferDesc* x = malloc(2 * (size_t)A * sizeof *x);
  relayXferTag* tags = malloc(2 * (size_t)A * sizeof *tags);
  if (!x || !tags) {
    free(x);
    free(tags);
    if (c->tp->fail) c->tp->fail(c); /* peers wait for this rank's part: end their waits now */
    c->failed = 1;
    return relaySetError(c, relaySystemError, "out of memory for %d transfers", 2 * A);
  }
  (void)me;
  int* peers = malloc(2 * (size_t)A * sizeof *peers);
  if (!peers) {
    free(x);
    free(tags);
    return relaySetError(c, relaySystemError, "out of memory for %d transfers", 2 * A);
  }
  for (int j = 0; j < A; j++) {
    int peer = a->layout->ranks[j];
    size_t sc = flags ? 0 : a->sendcounts[j], rc = flags ? 0 : a->recvcounts[j];
    x[j] = (relayXferDesc){peer, flags ? NULL : (char*)a->send + a->sdispls[j] * es, sc * es};
    x[A + j] = (relayXferDesc){peer, flags ? NULL : (char*)a->recv + a->rdispls[j] * es, rc * es};
    tags[j] = (relayXferTag){c->callSeq, sc, (int32_t)a->dtype, flags ? RELAY_TAG_REJECT : 0};
    tags[A + j] = (relayXferTag){c->callSeq, rc, (int32_t)a->dtype, flags ? RELAY_TAG_DRAIN : 0};
    peers[j] = peers[A + j] = peer;
  }
  c->curStep = 0;
  relayResult_t res = relaySuccess, checked = relaySuccess;
  int ns = A, nx = 2 * A;
  if (!(c->tp->caps & RELAY_TP_CAP_SHAPES) && c->ctrl) {
    /* A transport whose data carries no tags (NCCL): the actives exchange their counts on the control
     * plane first (the pair's check round), then move only the blocks both ends agreed on. */
    checked = pt2ptCheck(c, c->ctrl, tags, peers, A, 2 * A, "relayAllToAllv");
    if (checked != relaySuccess && checked != relayInvalidArgument && checked != relayRemoteError &&
        checked != relayInvalidUsage)
      res = checked;
    int kx = 0, ks = 0;
    for (int k = 0; k < 2 * A; k++) {
      if (tags[k].flags) continue;
      ks += k < A;
      x[kx] = x[k];
      tags[kx++] = tags[k];
    }
    ns = ks;
    nx = kx;
  }
  if (res == relaySuccess) {
    c->xferTags = (c->tp->caps & RELAY_TP_CAP_SHAPES) ? tags : NULL;
    res = c->tp->group(c, x, ns, x + ns, nx - ns, P2P_OP_SENDRECV, stream);
    c->xferTags = NULL;
    if (res == relaySuccess) res = checked;
  }
  c->curStep = -1;
  free(x);
  free(tags);
  free(peers);
  return res;
}

static relayResult_t a2avRun(struct relayComm* c, const a2avArgs* a, const char* reject,
                             relayStream_t stream) {
  RELAY_CHECK(commUsable(c));
  c->callMark = -1;
  c->curStep = -1;
  int me;
  relayResult_t local = a2avShape(c, a, &me);
  int shapeOk = local == relaySuccess;
  /* Shape digest for the transport's judge (a peer waiting in this call with another layout). */
  c->callShape =
      shapeOk ? (relayHash64(RELAY_HASH_SEED, a->layout->ranks, (size_t)a->layout->nActive * sizeof(int)) ^
                 ((uint64_t)a->dtype << 40) ^ 0xa2a5ull) |
                    1
              : 0;
  if (shapeOk && me >= 0 && !reject) local = a2avLocal(c, a);
  if (reject) local = relaySetError(c, relayInvalidArgument, "%s", reject);
  /* A comm whose data carries no tags and that has no control plane for the pair's check round (a user's
   * NCCL comm wrapped by relayCommInitNccl) agrees on the rows first in every check mode. */
  int noPairCheck = !(c->tp->caps & RELAY_TP_CAP_SHAPES) && !c->ctrl;
  if (c->cfg.checkMode || noPairCheck) {
    RELAY_CHECK(a2avAgree(c, a, me, local, shapeOk));
  } else if (!shapeOk) {
    if (c->tp->reject) c->tp->reject(c); /* peers waiting on this rank in this call fail at once */
    return local;
  }
  if (me < 0) return local; /* a helper: nothing to move */
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  relayResult_t res = a2avExchange(c, a, me, local != relaySuccess, stream);
  if (local != relaySuccess && (res == relaySuccess || res == relayInvalidArgument)) {
    memcpy(c->lastError, saved, sizeof saved);
    return local;
  }
  return res;
}

static relayResult_t a2avCall(const a2avArgs* a, const char* reject, relayComm_t comm, relayStream_t stream) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayAllToAllv: comm is NULL");
  comm->callSeq++; /* a collective: counted on every rank, rejected calls too (api.c) */
  comm->curCallName = "relayAllToAllv";
  atomic_store(&comm->inCall, 1);
  relayResult_t res = a2avRun(comm, a, reject, stream);
  comm->curCallName = NULL;
  comm->callShape = 0;
  atomic_store(&comm->inCall, 0);
  return res;
}

relayResult_t relayAllToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                             relayDataType_t datatype, const relayLayout_t* layout, relayComm_t comm,
                             relayStream_t stream) {
  a2avArgs a = {sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, layout};
  return a2avCall(&a, NULL, comm, stream);
}

/* relayCallReject's all-to-all-v half (api.c). */
relayResult_t relayAllToAllvReject(relayDataType_t datatype, const relayLayout_t* layout, const char* reason,
                                   relayComm_t comm, relayStream_t stream) {
  a2avArgs a = {NULL, NULL, NULL, NULL, NULL, NULL, datatype, layout};
  return a2avCall(&a, reason ? reason : "rejected by the binding", comm, stream);
}
