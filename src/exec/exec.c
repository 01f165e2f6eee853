#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/comm.h"

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
static relayResult_t execOneShot(struct relayComm* comm, const relayPlan* p, const planOp* o, const execBufs* b,
                                 relayStream_t stream) {
  int bw = o->kind == PLAN_OP_BW;
  if (!(comm->tp->caps & (bw ? RELAY_TP_CAP_BW : RELAY_TP_CAP_ONESHOT)) || p->nActive > RELAY_TP_ONESHOT_MAX)
    return relaySetError(comm, relayInternalError, "rank %d: step %d: the %s transport has no %s op", comm->rank,
                         comm->curStep, comm->tp->name, bw ? "bandwidth" : "one-shot");
  relayBwDesc w;
  memset(&w, 0, sizeof w);
  relayOneShotDesc* d = &w.c;
  d->dst = resolve(b, o->dst);
  d->src = resolve(b, p->srcs[o->srcBase]);
  d->count = o->count;
  d->srcStride = o->srcStride;
  d->gather = o->gather;
  d->dtype = p->dtype;
  d->op = p->op;
  d->divisor = o->divisor;
  d->nActive = p->nActive;
  d->me = p->rank[comm->rank].activeIndex;
  for (int i = 0; i < p->nActive; i++) d->ranks[i] = p->ranks[o->group * p->nActive + i];
  if (!bw) return comm->tp->oneshot(comm, &w.c, stream);
  w.tileElems = o->tile;
  w.ring = o->ring;
  w.twoShot = o->form == PLAN_BW_TWOSHOT;
  return comm->tp->bw(comm, &w, stream);
}

/* A failure before this rank moved anything: peers are (or soon will be)
 * waiting for its first transfer; tell them instead of letting them reach
 * the deadline. */
static relayResult_t execFailEarly(struct relayComm* comm, relayResult_t res) {
  if (comm->tp->fail) comm->tp->fail(comm);
  return res;
}

relayResult_t relayExecRun(struct relayComm* comm, const relayPlan* p, const void* sendbuff,
                           void* recvbuff, relayStream_t stream) {
  int r = comm->rank;
  const planRank* pr = &p->rank[r];
  execBufs b = {(char*)sendbuff, (char*)recvbuff, {0}, p->elemSize};
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
    if (!n) return execFailEarly(comm, relaySetError(comm, relaySystemError, "rank %d: executor out of memory", r));
    comm->execBuf = n;
    comm->execBufBytes = need;
  }
  relayXferDesc* d = comm->execBuf;
  relayResult_t res = relaySuccess;
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
        res = execOneShot(comm, p, o, &b, stream);
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
  comm->curStep = -1;
  return res;
}
