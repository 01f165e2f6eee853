/* Steps run for all ranks at once: every send of a step is snapshotted before
 * any receive of that step is written (a transport may move them in any
 * order, so a plan must not depend on one), then each rank's ops run. */
#include "ref/ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce_host.h"

typedef struct {
  void* send;
  void* recv;
  void* scratch[PLAN_MAX_SLOTS];
} refRank;

static char* resolve(const relayPlan* p, const refRank* rr, planRef ref) {
  char* base = ref.buf == PLAN_BUF_SEND   ? rr->send
               : ref.buf == PLAN_BUF_RECV ? rr->recv
                                          : rr->scratch[ref.slot];
  return base + ref.off * p->elemSize;
}

/* Copies the send buffer of every rank with a one-shot op in step s. */
static int refOneShotSnapshot(const relayPlan* p, int s, const refRank* rr, char** snaps) {
  for (int r = 0; r < p->nranks; r++) {
    const planStep* st = planRankStep(p, r, s);
    for (uint32_t i = 0; i < st->nOp; i++) {
      if (!planOpIsCollective(p->ops[st->opBase + i].kind)) continue;
      size_t bytes = p->rank[r].sendElems * p->elemSize;
      snaps[r] = malloc(bytes ? bytes : 1);
      if (!snaps[r]) return 1;
      if (bytes) memcpy(snaps[r], rr[r].send, bytes);
      break;
    }
  }
  return 0;
}

/* Rank r's one-shot: its output is the reduction, in active-index order, of
 * what every active of the group pushes to it (all-reduce: the whole send
 * buffer; reduce-scatter: block me); for all-gather (whole buffer) and
 * all-to-all (block me) those contributions side by side, active j's at
 * output block j. A rooted op (broadcast, reduce) as planOp.root says. */
static int refOneShot(const relayPlan* p, int r, const planOp* o, const refRank* rr, char* const* snaps,
                      char* err, size_t errlen) {
  int A = p->nActive, g = o->group, me = p->rank[r].activeIndex;
  int gather = o->gather;
  uint64_t off = (uint64_t)me * o->srcStride;
  const void* srcs[PLAN_MAX_SRCS];
  for (int i = 0; i < A; i++) {
    int q = p->ranks[g * A + i];
    if (!snaps[q]) {
      snprintf(err, errlen, "rank %d: one-shot with rank %d, which has no one-shot in that step", r, q);
      return 1;
    }
    srcs[i] = snaps[q] + off * p->elemSize;
  }
  char* dst = resolve(p, &rr[r], o->dst);
  if (o->root >= 0) { /* broadcast: the root's block at every active; reduce: all A at the root only */
    if (gather) memmove(dst, srcs[o->root], o->count * p->elemSize);
    else if (me == o->root) relayHostReduce(dst, srcs, A, o->count, p->dtype, p->op, o->divisor);
    return 0;
  }
  if (gather) {
    size_t bytes = o->count * p->elemSize;
    for (int i = 0; i < A; i++) memmove(dst + (size_t)i * bytes, srcs[i], bytes);
    return 0;
  }
  relayHostReduce(dst, srcs, A, o->count, p->dtype, p->op, o->divisor);
  return 0;
}

/* The sub-collective op of rank r in step s, or NULL (the checker holds it
 * alone in its step). */
static const planOp* refSubCollOp(const relayPlan* p, int r, int s) {
  const planStep* st = planRankStep(p, r, s);
  for (uint32_t i = 0; i < st->nOp; i++)
    if (p->ops[st->opBase + i].kind == PLAN_OP_SUBCOLL) return &p->ops[st->opBase + i];
  return NULL;
}

/* Copies the input of every rank's sub-collective in step s. */
static int refSubCollSnapshot(const relayPlan* p, int s, const refRank* rr, char** snaps) {
  for (int r = 0; r < p->nranks; r++) {
    const planOp* o = refSubCollOp(p, r, s);
    if (!o) continue;
    size_t bytes = planSubCollIn(&p->subs[o->group]) * p->elemSize;
    snaps[r] = malloc(bytes ? bytes : 1);
    if (!snaps[r]) return 1;
    memcpy(snaps[r], resolve(p, &rr[r], p->srcs[o->srcBase]), bytes);
  }
  return 0;
}

/* Rank r's part of a sub-collective, from the members' snapshots: the
 * serial definition of the four layout collectives among the members. */
static int refSubColl(const relayPlan* p, int r, const planOp* o, const refRank* rr, char* const* snaps,
                      char* err, size_t errlen) {
  const planSubColl* sc = &p->subs[o->group];
  int n = sc->nRanks, me = -1;
  const int32_t* members = p->subRanks + sc->rankBase;
  for (int i = 0; i < n; i++) {
    if (!snaps[members[i]]) {
      snprintf(err, errlen, "rank %d: sub-collective with rank %d, which has none in that step", r,
               members[i]);
      return 1;
    }
    if (members[i] == r) me = i;
  }
  size_t es = p->elemSize, blk = sc->count * es;
  relayCollective_t coll = (relayCollective_t)sc->coll;
  size_t off = relayCollSendsBlocks(coll) ? (size_t)me * blk : 0; /* my block of each member's input */
  char* dst = resolve(p, &rr[r], o->dst);
  if (relayCollGathers(coll)) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * blk, snaps[members[i]] + off, blk);
    return 0;
  }
  const void* srcs[PLAN_MAX_SRCS];
  if (n > PLAN_MAX_SRCS) {
    snprintf(err, errlen, "rank %d: a sub-collective of %d members reduces more than %d inputs", r, n,
             PLAN_MAX_SRCS);
    return 1;
  }
  for (int i = 0; i < n; i++) srcs[i] = snaps[members[i]] + off;
  relayHostReduce(dst, srcs, n, sc->count, p->dtype, p->op, o->divisor);
  return 0;
}

int relayRefRun(const relayPlan* p, void* const* sendbufs, void* const* recvbufs, char* err, size_t errlen) {
  int n = p->nranks, rc = 0;
  refRank* rr = calloc((size_t)n, sizeof *rr);
  char** snaps = calloc((size_t)n, sizeof(char*)); /* one-shot input snapshots */
  char** msgs = NULL;
  if (err && errlen) err[0] = 0;
  if (!rr || !snaps) {
    free(rr);
    free(snaps);
    return 1;
  }
  for (int r = 0; r < n; r++) {
    rr[r].send = sendbufs ? sendbufs[r] : NULL;
    rr[r].recv = recvbufs ? recvbufs[r] : NULL;
    for (int s = 0; s < PLAN_MAX_SLOTS; s++) {
      size_t bytes = p->rank[r].scratchElems[s] * p->elemSize;
      if (!bytes) continue;
      rr[r].scratch[s] = malloc(bytes);
      if (!rr[r].scratch[s]) {
        rc = 1;
        goto done;
      }
      memset(rr[r].scratch[s], 0xA5, bytes);
    }
  }
  for (int s = 0; s < p->nSteps && !rc; s++) {
    /* snapshot sends */
    size_t nMsgs = 0;
    for (int r = 0; r < n; r++) nMsgs += planRankStep(p, r, s)->nSend;
    msgs = calloc(nMsgs + 1, sizeof(char*));
    if (!msgs) {
      rc = 1;
      break;
    }
    size_t m = 0;
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nSend; i++, m++) {
        const planXfer* x = &p->sends[st->sendBase + i];
        size_t bytes = x->count * p->elemSize;
        msgs[m] = malloc(bytes);
        if (!msgs[m]) {
          rc = 1;
          goto stepdone;
        }
        memcpy(msgs[m], resolve(p, &rr[r], x->ref), bytes);
      }
    }
    /* deliver: the k-th recv on q from r takes the k-th send of r to q */
    for (int q = 0; q < n; q++) {
      const planStep* qt = planRankStep(p, q, s);
      for (uint32_t i = 0; i < qt->nRecv; i++) {
        const planXfer* x = &p->recvs[qt->recvBase + i];
        int r = x->peer;
        uint32_t k = 0; /* ordinal of this recv among q's recvs from r */
        for (uint32_t j = 0; j < i; j++) k += p->recvs[qt->recvBase + j].peer == r;
        size_t mi = 0;
        for (int rr2 = 0; rr2 < r; rr2++) mi += planRankStep(p, rr2, s)->nSend;
        const planStep* st = planRankStep(p, r, s);
        uint32_t seen = 0;
        int found = 0;
        for (uint32_t j = 0; j < st->nSend; j++) {
          const planXfer* y = &p->sends[st->sendBase + j];
          if (y->peer != q) continue;
          if (seen++ == k) {
            if (y->count != x->count) {
              snprintf(err, errlen, "step %d: rank %d sends %llu to %d, which receives %llu", s, r,
                       (unsigned long long)y->count, q, (unsigned long long)x->count);
              rc = 1;
              goto stepdone;
            }
            memcpy(resolve(p, &rr[q], x->ref), msgs[mi + j], x->count * p->elemSize);
            found = 1;
            break;
          }
        }
        if (!found) {
          snprintf(err, errlen, "step %d: rank %d receives from %d with no matching send", s, q, r);
          rc = 1;
          goto stepdone;
        }
      }
    }
    /* One-shot ops read every participant's send buffer: snapshot them all
     * before any op of the step writes (an in-place RECV is a SEND). */
    if (refOneShotSnapshot(p, s, rr, snaps) || refSubCollSnapshot(p, s, rr, snaps)) {
      rc = 1;
      goto stepdone;
    }
    /* ops */
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nOp; i++) {
        const planOp* o = &p->ops[st->opBase + i];
        if (planOpIsCollective(o->kind) ||
            o->kind == PLAN_OP_SUBCOLL) { /* a bw op's tiles change how, not what */
          if ((o->kind == PLAN_OP_SUBCOLL ? refSubColl : refOneShot)(p, r, o, rr, snaps, err, errlen)) {
            rc = 1;
            goto stepdone;
          }
        } else if (o->kind == PLAN_OP_COPY) {
          memmove(resolve(p, &rr[r], o->dst), resolve(p, &rr[r], p->srcs[o->srcBase]),
                  o->count * p->elemSize);
        } else {
          const void* srcs[PLAN_MAX_SRCS];
          for (int k = 0; k < o->nsrc; k++) srcs[k] = resolve(p, &rr[r], p->srcs[o->srcBase + (uint32_t)k]);
          relayHostReduce(resolve(p, &rr[r], o->dst), srcs, o->nsrc, o->count, p->dtype, p->op, o->divisor);
        }
      }
    }
  stepdone:
    for (int r = 0; r < n; r++) {
      free(snaps[r]);
      snaps[r] = NULL;
    }
    for (size_t i = 0; i < nMsgs; i++) free(msgs[i]);
    free(msgs);
    msgs = NULL;
  }
done:
  for (int r = 0; r < n; r++)
    for (int s = 0; s < PLAN_MAX_SLOTS; s++) free(rr[r].scratch[s]);
  free(rr);
  free(snaps);
  if (rc && err && errlen && !err[0]) snprintf(err, errlen, "out of memory");
  return rc;
}
