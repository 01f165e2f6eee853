#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"

typedef struct {
  char* send;
  char* recv;
  char* scratch[PLAN_MAX_SLOTS];
  size_t elemSize;
} execBufs;

static void* resolve(const execBufs* b, planRef ref) {
  char* base = ref.buf == PLAN_BUF_SEND ? b->send : ref.buf == PLAN_BUF_RECV ? b->recv : b->scratch[ref.slot];
  return base + ref.off * b->elemSize;
}

_Static_assert(RELAY_TP_ONESHOT_MAX == RELAY_ONESHOT_MAX_ACTIVE, "one-shot rank limits differ");

/* A one-shot or bandwidth op: one collective transport call among the group's actives. */
static relayResult_t execOneShot(struct relayComm* comm, const relayPlan* p, const planOp* o,
                                 const execBufs* b, const relayExecCall* call) {
  relayStream_t stream = call->stream;
  int bw = o->kind == PLAN_OP_BW;
  unsigned need = bw ? RELAY_TP_CAP_BW | (o->root >= 0 ? RELAY_TP_CAP_BW_ROOTED : 0)
                     : RELAY_TP_CAP_ONESHOT | (o->root >= 0 ? RELAY_TP_CAP_ONESHOT_ROOTED : 0) |
                           (o->form == PLAN_BW_TWOSHOT ? RELAY_TP_CAP_ONESHOT_TWOSHOT : 0);
  if ((comm->tp->caps & need) != need || p->nActive > RELAY_TP_ONESHOT_MAX)
    return relaySetError(comm, relayInternalError, "the %s transport has no %s op", comm->tp->name,
                         bw ? "bandwidth" : "one-shot");
  relayBwDesc w;
  memset(&w, 0, sizeof w);
  relayOneShotDesc* d = &w.c;
  d->dst = resolve(b, o->dst);
  d->src = resolve(b, p->srcs[o->srcBase]);
  d->count = o->count;
  d->srcStride = o->srcStride;
  d->gather = o->gather;
  d->root = o->root;
  d->dtype = p->dtype;
  d->op = p->op;
  d->divisor = o->divisor;
  d->nActive = p->nActive;
  d->me = p->rank[comm->rank].activeIndex;
  for (int i = 0; i < p->nActive; i++) d->ranks[i] = p->ranks[o->group * p->nActive + i];
  if (!bw) {
    d->twoShot = o->form == PLAN_BW_TWOSHOT;
    return comm->tp->oneshot(comm, &w.c, stream);
  }
  w.tileElems = o->tile;
  w.ring = o->ring;
  w.twoShot = o->form == PLAN_BW_TWOSHOT;
  w.win = call->win; /* core's match of this rank's caller buffers (core/window.c) */
  w.sendOff = call->sendOff;
  w.recvOff = call->recvOff;
  return comm->tp->bw(comm, &w, stream);
}

/* Scratch slot of the executor's own (past the plan's): a sub-collective's
 * received inputs before they are reduced. */
#define EXEC_SUBCOLL_SLOT PLAN_MAX_SLOTS

/* A sub-collective (PLAN_OP_SUBCOLL) as a direct exchange among its members
 * through the transport's group and reduce: every member sends each member
 * its input (all-reduce, all-gather: all of it; reduce-scatter, all-to-all:
 * block j to member j) in one group, then the reducing collectives reduce
 * the n inputs in member order, as the reference executor does. */
static relayResult_t execSubCollDirect(struct relayComm* comm, const relayPlan* p, const planSubColl* sc,
                                       const planOp* o, int p2pOp, void* dst, const void* src,
                                       relayStream_t stream) {
  int n = sc->nRanks, me = -1;
  const int32_t* members = p->subRanks + sc->rankBase;
  for (int i = 0; i < n; i++)
    if (members[i] == comm->rank) me = i;
  relayCollective_t coll = (relayCollective_t)sc->coll;
  size_t blk = sc->count * p->elemSize;
  int reduces = relayCollReduces(coll), blocks = relayCollSendsBlocks(coll);
  if (me < 0 || (reduces && n > PLAN_MAX_SRCS))
    return relaySetError(comm, relayInternalError, "sub-collective of %d members it cannot run", n);
  char* in = NULL;
  if (reduces) {
    void* ptr = NULL;
    RELAY_CHECK(comm->tp->scratch(comm, EXEC_SUBCOLL_SLOT, (size_t)n * blk, &ptr, stream));
    in = ptr;
  }
  relayXferDesc* sends = malloc(2 * (size_t)n * sizeof *sends);
  if (!sends) return relaySetError(comm, relaySystemError, "executor out of memory for a sub-collective");
  relayXferDesc* recvs = sends + n;
  for (int j = 0; j < n; j++) {
    sends[j].peer = members[j];
    sends[j].ptr = (char*)src + (blocks ? (size_t)j * blk : 0);
    sends[j].bytes = blk;
    recvs[j].peer = members[j];
    recvs[j].ptr = (reduces ? in : (char*)dst) + (size_t)j * blk;
    recvs[j].bytes = blk;
  }
  relayResult_t res = comm->tp->group(comm, sends, n, recvs, n, p2pOp, stream);
  free(sends);
  if (res != relaySuccess || !reduces) return res;
  const void* srcs[PLAN_MAX_SRCS];
  for (int j = 0; j < n; j++) srcs[j] = in + (size_t)j * blk;
  return comm->tp->reduce(comm, dst, srcs, n, sc->count, p->dtype, p->op, o->divisor, 0, stream);
}

/* A sub-collective as the transport library's own collective on the
 * handle prepared for it; an average divides after a sum, since the divisor
 * is the whole group's size, not the members'. */
static relayResult_t execSubCollNative(struct relayComm* comm, const relayPlan* p, const planSubColl* sc,
                                       const planOp* o, void* h, void* dst, const void* src,
                                       relayStream_t stream) {
  relayRedOp_t op = p->op == relayAvg ? relaySum : p->op;
  RELAY_CHECK(
      comm->tp->native(comm, h, (relayCollective_t)sc->coll, src, dst, sc->count, p->dtype, op, 0, stream));
  if (!relayCollReduces((relayCollective_t)sc->coll) || o->divisor <= 1) return relaySuccess;
  const void* one[1] = {dst};
  return comm->tp->reduce(comm, dst, one, 1, sc->count, p->dtype, relayAvg, o->divisor, 0, stream);
}

/* COLLECTIVE over all comm ranks, before the first step: the transport's
 * sub-communicator of every sub-collective of the plan, in plan order (every
 * rank runs the same plan, so every rank prepares the same sets). *handles
 * NULL: run them as direct exchanges (no native collectives, or declined on
 * every rank alike). */
static relayResult_t execSubCollPrepare(struct relayComm* comm, const relayPlan* p, relayStream_t stream,
                                        void*** handles) {
  *handles = NULL;
  if (!p->nSubs || !(comm->tp->caps & RELAY_TP_CAP_NATIVE)) return relaySuccess;
  void** h = calloc(p->nSubs, sizeof *h);
  if (!h)
    return relaySetError(comm, relaySystemError, "executor out of memory for the sub-collective handles");
  for (uint32_t i = 0; i < p->nSubs; i++) {
    const planSubColl* sc = &p->subs[i];
    relayResult_t res =
        comm->tp->nativePrepare(comm, 1, sc->nRanks, p->subRanks + sc->rankBase, stream, &h[i]);
    if (res == relayNotSupported) {
      free(h);
      return relaySuccess;
    }
    if (res != relaySuccess) {
      free(h);
      return res;
    }
  }
  *handles = h;
  return relaySuccess;
}

/* A failure before this rank moved anything: peers are (or soon will be)
 * waiting for its first transfer; tell them instead of letting them reach
 * the deadline. */
static relayResult_t execFailEarly(struct relayComm* comm, relayResult_t res) {
  if (comm->tp->fail) comm->tp->fail(comm);
  return res;
}

relayResult_t relayExecRun(struct relayComm* comm, const relayPlan* p, const relayExecCall* call) {
  relayStream_t stream = call->stream;
  int r = comm->rank;
  const planRank* pr = &p->rank[r];
  execBufs b = {(char*)call->send, (char*)call->recv, {0}, p->elemSize};
  for (int s = 0; s < PLAN_MAX_SLOTS; s++) {
    if (!pr->scratchElems[s]) continue;
    void* ptr = NULL;
    relayResult_t res = comm->tp->scratch(comm, s, pr->scratchElems[s] * p->elemSize, &ptr, stream);
    if (res != relaySuccess) return execFailEarly(comm, res);
    b.scratch[s] = ptr;
  }
  size_t need = (size_t)p->maxXfersPerStep * sizeof(relayXferDesc);
  if (need > comm->execBufBytes) {
    void* n = realloc(comm->execBuf, need);
    if (!n) return execFailEarly(comm, relaySetError(comm, relaySystemError, "executor out of memory"));
    comm->execBuf = n;
    comm->execBufBytes = need;
  }
  relayXferDesc* d = comm->execBuf;
  void** subHandles = NULL;
  relayResult_t res = execSubCollPrepare(comm, p, stream, &subHandles);
  if (res != relaySuccess) return execFailEarly(comm, res);
  for (int s = 0; s < p->nSteps && res == relaySuccess; s++) {
    const planStep* st = planRankStep(p, r, s);
    comm->curStep = s;
    if (st->nSend || st->nRecv) {
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &p->sends[st->sendBase + i];
        d[i].peer = x->peer;
        d[i].ptr = resolve(&b, x->ref);
        d[i].bytes = x->count * p->elemSize;
      }
      relayXferDesc* rd = d + st->nSend;
      for (uint32_t i = 0; i < st->nRecv; i++) {
        const planXfer* x = &p->recvs[st->recvBase + i];
        rd[i].peer = x->peer;
        rd[i].ptr = resolve(&b, x->ref);
        rd[i].bytes = x->count * p->elemSize;
      }
      res = comm->tp->group(comm, d, (int)st->nSend, rd, (int)st->nRecv, (int)st->p2pOp, stream);
      if (res != relaySuccess) break;
    }
    for (uint32_t i = 0; i < st->nOp && res == relaySuccess; i++) {
      const planOp* o = &p->ops[st->opBase + i];
      if (planOpIsCollective(o->kind)) {
        res = execOneShot(comm, p, o, &b, call);
      } else if (o->kind == PLAN_OP_SUBCOLL) {
        const planSubColl* sc = &p->subs[o->group];
        void* dst = resolve(&b, o->dst);
        const void* src = resolve(&b, p->srcs[o->srcBase]);
        res = subHandles ? execSubCollNative(comm, p, sc, o, subHandles[o->group], dst, src, stream)
                         : execSubCollDirect(comm, p, sc, o, (int)st->p2pOp, dst, src, stream);
      } else if (o->kind == PLAN_OP_COPY) {
        void* dst = resolve(&b, o->dst);
        const void* src = resolve(&b, p->srcs[o->srcBase]);
        if (dst != src) res = comm->tp->copy(comm, dst, src, o->count * p->elemSize, o->lane, stream);
      } else {
        const void* srcs[PLAN_MAX_SRCS];
        for (int k = 0; k < o->nsrc; k++) srcs[k] = resolve(&b, p->srcs[o->srcBase + (uint32_t)k]);
        res = comm->tp->reduce(comm, resolve(&b, o->dst), srcs, o->nsrc, o->count, p->dtype, p->op,
                               o->divisor, o->lane, stream);
      }
    }
  }
  if (res == relaySuccess) res = comm->tp->join(comm, stream);
  free(subHandles);
  comm->curStep = -1;
  return res;
}
