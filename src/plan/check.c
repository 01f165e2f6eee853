/*
 * The plan checker. Structural invariants every route must hold, checked on
 * every plan the library builds (plans are cached, so once per signature):
 *   - per step and per ordered pair, the k-th send matches the k-th receive
 *     with the same count (self pairs included);
 *   - every ref lies inside its buffer; SEND is never written; helpers (ranks
 *     active in no group) never name SEND or RECV;
 *   - within a step, receive targets overlap neither each other nor the
 *     step's send sources (a transport may move them in any order);
 *   - every element of an active rank's RECV is written exactly once;
 *   - a side-lane op's regions are not touched by later steps;
 *   - a one-shot op reads SEND, writes RECV, and meets one on every active
 *     of its group in the same step (helpers have none);
 *   - a sub-collective op is alone in its step and meets exactly one op of
 *     its sub-collective on every member in that step;
 *   - every rank gives a step the same P2P operation (a transport that splits
 *     by it would split the two ends of a transfer differently).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2p/p2p.h"
#include "plan/plan.h"

typedef struct {
  int buf, slot;
  uint64_t lo, hi; /* [lo, hi) */
} region;

static int fail(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return 1;
}

static region regionOf(planRef r, uint64_t count) {
  region g = {r.buf, r.buf == PLAN_BUF_SCRATCH ? r.slot : 0, r.off, r.off + count};
  return g;
}

static int overlaps(region a, region b) {
  return a.buf == b.buf && a.slot == b.slot && a.lo < b.hi && b.lo < a.hi;
}

static const char* bufName(int buf) {
  return buf == PLAN_BUF_SEND ? "send" : buf == PLAN_BUF_RECV ? "recv" : "scratch";
}

/* Elements an op writes at its dst: a gathering one-shot (all-gather,
 * all-to-all) fills A blocks of count. */
static uint64_t opWritten(const relayPlan* p, const planOp* o) {
  if (o->kind == PLAN_OP_SUBCOLL) return planSubCollOut(&p->subs[o->group]);
  int gather = planOpIsCollective(o->kind) && o->gather && o->root < 0;
  return gather ? (uint64_t)p->nActive * o->count : o->count;
}

static int checkRef(const relayPlan* p, int r, int s, planRef ref, uint64_t count, int write,
                    const char* what, char* err, size_t errlen) {
  const planRank* pr = &p->rank[r];
  uint64_t extent;
  if (ref.buf == PLAN_BUF_SEND || ref.buf == PLAN_BUF_RECV) {
    if (pr->activeGroup < 0)
      return fail(err, errlen, "rank %d step %d: helper names the caller's %s buffer (%s)", r, s,
                  bufName(ref.buf), what);
    if (ref.buf == PLAN_BUF_SEND && write)
      return fail(err, errlen, "rank %d step %d: writes the send buffer (%s)", r, s, what);
    extent = ref.buf == PLAN_BUF_SEND ? pr->sendElems : pr->recvElems;
  } else if (ref.buf == PLAN_BUF_SCRATCH) {
    if (ref.slot >= PLAN_MAX_SLOTS)
      return fail(err, errlen, "rank %d step %d: scratch slot %d out of range", r, s, ref.slot);
    extent = pr->scratchElems[ref.slot];
  } else {
    return fail(err, errlen, "rank %d step %d: unknown buffer %d", r, s, ref.buf);
  }
  if (ref.off > extent || count > extent - ref.off)
    return fail(err, errlen, "rank %d step %d: %s %s[%llu +%llu] exceeds its %llu elements", r, s, what,
                bufName(ref.buf), (unsigned long long)ref.off, (unsigned long long)count,
                (unsigned long long)extent);
  return 0;
}

static int regionCmp(const void* a, const void* b) {
  const region* x = a;
  const region* y = b;
  return x->lo < y->lo ? -1 : (x->lo > y->lo);
}

/* A one-shot or bandwidth op: rank r is active in the op's group, reads its
 * SEND (the whole reduce-scatter input, count elements otherwise), writes
 * its RECV on the main lane, and every active of the group has its op of the
 * same kind in step s with the same count (they hand-shake with each other
 * inside it); a bandwidth op's tile, ring and form match too (they fix the
 * tile sequence both ends count), and two-shot is all-reduce's only. */
static int checkOneShot(const relayPlan* p, int r, int s, const planOp* o, char* err, size_t errlen) {
  int A = p->nActive;
  if (o->kind == PLAN_OP_BW && (o->tile == 0 || o->ring < 1 || o->ring > RELAY_BW_MAX_RING))
    return fail(err, errlen, "rank %d step %d: bw op with tile %u, ring %u", r, s, o->tile, o->ring);
  /* Both kinds: the one-shot's two-shot form (planKey.twoShotFrom) reduces shards of one input as well */
  if (o->form > PLAN_BW_TWOSHOT || (o->form == PLAN_BW_TWOSHOT && p->coll != relayCollectiveAllReduce))
    return fail(err, errlen, "rank %d step %d: %s op of form %u in a %s plan", r, s,
                o->kind == PLAN_OP_BW ? "bw" : "one-shot", o->form, relayCollName(p->coll));
  int rooted = relayCollRooted(p->coll);
  if (!relayCollOnLayout(p->coll) || o->root != (rooted ? p->root : -1) ||
      (rooted && o->form != PLAN_BW_PUSH) || (rooted && o->gather != !relayCollReduces(p->coll)))
    return fail(err, errlen, "rank %d step %d: one-shot of root %d, gather %d in a %s plan of root %d", r, s,
                o->root, o->gather, relayCollName(p->coll), p->root);
  if (o->group < 0 || o->group >= p->nGroups || p->rank[r].activeGroup != o->group)
    return fail(err, errlen, "rank %d step %d: one-shot of group %d, rank not active in it", r, s, o->group);
  if (o->nsrc != 1 || o->lane != 0 || p->srcs[o->srcBase].buf != PLAN_BUF_SEND || o->dst.buf != PLAN_BUF_RECV)
    return fail(err, errlen, "rank %d step %d: one-shot must read SEND and write RECV on lane 0", r, s);
  /* Active A-1's contribution is the last: it starts strides in. */
  if (o->srcStride > (UINT64_MAX - o->count) / (uint64_t)A)
    return fail(err, errlen, "rank %d step %d: one-shot stride %llu overflows", r, s,
                (unsigned long long)o->srcStride);
  uint64_t in = (uint64_t)(A - 1) * o->srcStride + o->count, out = opWritten(p, o);
  /* A rooted call's roles (planLayoutRank): a broadcast reads SEND on the root only, a reduce writes RECV
   * on the root only. */
  if (rooted && p->rank[r].activeIndex != o->root) {
    if (o->gather) in = 0;
    else out = 0;
  }
  if (checkRef(p, r, s, o->dst, out, 1, "one-shot destination", err, errlen) ||
      checkRef(p, r, s, p->srcs[o->srcBase], in, 0, "one-shot source", err, errlen))
    return 1;
  for (int i = 0; i < A; i++) {
    int q = p->ranks[o->group * A + i], found = 0;
    const planStep* qt = planRankStep(p, q, s);
    for (uint32_t j = 0; j < qt->nOp; j++) {
      const planOp* y = &p->ops[qt->opBase + j];
      if (y->kind == o->kind && y->group == o->group)
        found +=
            y->count == o->count && y->tile == o->tile && y->ring == o->ring && y->form == o->form ? 1 : 100;
    }
    if (found != 1)
      return fail(err, errlen, "step %d: rank %d's one-shot has no single match of %llu elements on rank %d",
                  s, r, (unsigned long long)o->count, q);
  }
  return 0;
}

/* A sub-collective op: its sub-collective exists and lists r once, it is the
 * only item of r's step, its regions fit, and every member has exactly one
 * op of it in step s (they meet inside it). */
static int checkSubColl(const relayPlan* p, int r, int s, const planOp* o, char* err, size_t errlen) {
  if (o->group < 0 || (uint32_t)o->group >= p->nSubs)
    return fail(err, errlen, "rank %d step %d: sub-collective %d out of range", r, s, o->group);
  const planSubColl* sc = &p->subs[o->group];
  const planStep* st = planRankStep(p, r, s);
  if (!relayCollIsLayout(sc->coll) || sc->nRanks < 1 || sc->rankBase + (uint32_t)sc->nRanks > p->nSubRanks)
    return fail(err, errlen, "rank %d step %d: sub-collective %d is malformed", r, s, o->group);
  if (st->nOp != 1 || st->nSend || st->nRecv || o->lane || o->nsrc != 1)
    return fail(err, errlen, "rank %d step %d: a sub-collective op must be alone in its step, on lane 0", r,
                s);
  int me = -1;
  for (int i = 0; i < sc->nRanks; i++) {
    int q = p->subRanks[sc->rankBase + (uint32_t)i];
    if (q < 0 || q >= p->nranks)
      return fail(err, errlen, "step %d: sub-collective member %d out of range", s, q);
    if (q == r) {
      if (me >= 0)
        return fail(err, errlen, "step %d: rank %d is listed twice in sub-collective %d", s, r, o->group);
      me = i;
    }
  }
  if (me < 0)
    return fail(err, errlen, "rank %d step %d: runs sub-collective %d without being a member", r, s,
                o->group);
  if (checkRef(p, r, s, o->dst, planSubCollOut(sc), 1, "sub-collective destination", err, errlen) ||
      checkRef(p, r, s, p->srcs[o->srcBase], planSubCollIn(sc), 0, "sub-collective source", err, errlen))
    return 1;
  if (overlaps(regionOf(o->dst, planSubCollOut(sc)), regionOf(p->srcs[o->srcBase], planSubCollIn(sc))))
    return fail(err, errlen, "rank %d step %d: sub-collective source and destination overlap", r, s);
  for (int i = 0; i < sc->nRanks; i++) {
    int q = p->subRanks[sc->rankBase + (uint32_t)i], found = 0;
    const planStep* qt = planRankStep(p, q, s);
    for (uint32_t j = 0; j < qt->nOp; j++) {
      const planOp* y = &p->ops[qt->opBase + j];
      found += y->kind == PLAN_OP_SUBCOLL && y->group == o->group;
    }
    if (found != 1)
      return fail(err, errlen, "step %d: rank %d's sub-collective %d has %d ops on member %d", s, r, o->group,
                  found, q);
  }
  return 0;
}

int relayPlanCheck(const relayPlan* p, char* err, size_t errlen) {
  int n = p->nranks;
  if (p->elemSize == 0) return fail(err, errlen, "unknown datatype");
  /* 1. matching per step and ordered pair */
  for (int s = 0; s < p->nSteps; s++) {
    uint32_t op0 = planRankStep(p, 0, s)->p2pOp;
    if (op0 >= P2P_NUM_OPS) return fail(err, errlen, "step %d: P2P operation %u out of range", s, op0);
    for (int r = 1; r < n; r++)
      if (planRankStep(p, r, s)->p2pOp != op0)
        return fail(err, errlen, "step %d: rank %d runs P2P operation %u, rank 0 %u", s, r,
                    planRankStep(p, r, s)->p2pOp, op0);
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &p->sends[st->sendBase + i];
        if (x->peer < 0 || x->peer >= n)
          return fail(err, errlen, "rank %d step %d: send to rank %d out of range", r, s, x->peer);
      }
      for (uint32_t i = 0; i < st->nRecv; i++) {
        const planXfer* x = &p->recvs[st->recvBase + i];
        if (x->peer < 0 || x->peer >= n)
          return fail(err, errlen, "rank %d step %d: recv from rank %d out of range", r, s, x->peer);
      }
    }
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(p, r, s);
      for (int q = 0; q < n; q++) {
        const planStep* qt = planRankStep(p, q, s);
        uint32_t a = 0, b = 0;
        for (;;) {
          while (a < st->nSend && p->sends[st->sendBase + a].peer != q) a++;
          while (b < qt->nRecv && p->recvs[qt->recvBase + b].peer != r) b++;
          if (a == st->nSend && b == qt->nRecv) break;
          if (a == st->nSend || b == qt->nRecv)
            return fail(err, errlen, "step %d: %s from rank %d to rank %d has no match", s,
                        a == st->nSend ? "a receive" : "a send", r, q);
          uint64_t ca = p->sends[st->sendBase + a].count, cb = p->recvs[qt->recvBase + b].count;
          if (ca != cb)
            return fail(err, errlen, "step %d: rank %d sends %llu elements to rank %d, which receives %llu",
                        s, r, (unsigned long long)ca, q, (unsigned long long)cb);
          a++;
          b++;
        }
      }
    }
  }
  /* 2-3. refs, writes, overlaps within a step; 5. side lanes */
  for (int r = 0; r < n; r++) {
    for (int s = 0; s < p->nSteps; s++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &p->sends[st->sendBase + i];
        if (checkRef(p, r, s, x->ref, x->count, 0, "send", err, errlen)) return 1;
      }
      for (uint32_t i = 0; i < st->nRecv; i++) {
        const planXfer* x = &p->recvs[st->recvBase + i];
        if (checkRef(p, r, s, x->ref, x->count, 1, "recv", err, errlen)) return 1;
        region ri = regionOf(x->ref, x->count);
        for (uint32_t j = i + 1; j < st->nRecv; j++) {
          const planXfer* y = &p->recvs[st->recvBase + j];
          if (overlaps(ri, regionOf(y->ref, y->count)))
            return fail(err, errlen, "rank %d step %d: two receives overlap in %s", r, s, bufName(ri.buf));
        }
        for (uint32_t j = 0; j < st->nSend; j++) {
          const planXfer* y = &p->sends[st->sendBase + j];
          if (overlaps(ri, regionOf(y->ref, y->count)))
            return fail(err, errlen, "rank %d step %d: a receive from %d overlaps a send source in %s", r, s,
                        x->peer, bufName(ri.buf));
        }
      }
      for (uint32_t i = 0; i < st->nOp; i++) {
        const planOp* o = &p->ops[st->opBase + i];
        if (o->nsrc < 1 || o->nsrc > PLAN_MAX_SRCS)
          return fail(err, errlen, "rank %d step %d: op with %d inputs", r, s, o->nsrc);
        if (planOpIsCollective(o->kind)) {
          if (checkOneShot(p, r, s, o, err, errlen)) return 1;
          continue;
        }
        if (o->kind == PLAN_OP_SUBCOLL) {
          if (checkSubColl(p, r, s, o, err, errlen)) return 1;
          continue;
        }
        if (checkRef(p, r, s, o->dst, o->count, 1, "op destination", err, errlen)) return 1;
        for (int k = 0; k < o->nsrc; k++) {
          planRef src = p->srcs[o->srcBase + (uint32_t)k];
          if (checkRef(p, r, s, src, o->count, 0, "op source", err, errlen)) return 1;
          /* A source may alias the destination only element-for-element. */
          region rs = regionOf(src, o->count), rd = regionOf(o->dst, o->count);
          if (overlaps(rs, rd) && rs.lo != rd.lo)
            return fail(err, errlen, "rank %d step %d: op source overlaps its destination shifted", r, s);
        }
        if (!o->lane) continue;
        region w = regionOf(o->dst, o->count);
        for (int t = s + 1; t < p->nSteps; t++) {
          const planStep* lt = planRankStep(p, r, t);
          for (uint32_t j = 0; j < lt->nRecv; j++) {
            const planXfer* y = &p->recvs[lt->recvBase + j];
            region ry = regionOf(y->ref, y->count);
            if (overlaps(w, ry))
              return fail(err, errlen, "rank %d: side-lane op of step %d collides with a receive of step %d",
                          r, s, t);
            for (int k = 0; k < o->nsrc; k++)
              if (overlaps(regionOf(p->srcs[o->srcBase + (uint32_t)k], o->count), ry))
                return fail(err, errlen, "rank %d: step %d overwrites a side-lane input of step %d", r, t, s);
          }
          for (uint32_t j = 0; j < lt->nSend; j++) {
            const planXfer* y = &p->sends[lt->sendBase + j];
            if (overlaps(w, regionOf(y->ref, y->count)))
              return fail(err, errlen, "rank %d: step %d sends what the side-lane op of step %d writes", r, t,
                          s);
          }
          for (uint32_t j = 0; j < lt->nOp; j++) {
            const planOp* y = &p->ops[lt->opBase + j];
            if (y->lane) continue; /* side lane ops run in order among themselves */
            if (overlaps(w, regionOf(y->dst, y->count)))
              return fail(err, errlen,
                          "rank %d: an op of step %d writes what the side lane of step %d writes", r, t, s);
            for (int k = 0; k < y->nsrc; k++)
              if (overlaps(w, regionOf(p->srcs[y->srcBase + (uint32_t)k], y->count)))
                return fail(err, errlen,
                            "rank %d: an op of step %d reads what the side lane of step %d writes", r, t, s);
          }
        }
      }
    }
  }
  /* 4. every recv element of an active rank written exactly once */
  for (int r = 0; r < n; r++) {
    const planRank* pr = &p->rank[r];
    if (pr->activeGroup < 0 || pr->recvElems == 0) continue;
    size_t cap = 16, nw = 0;
    region* w = malloc(cap * sizeof *w);
    if (!w) return fail(err, errlen, "out of memory");
    for (int s = 0; s < p->nSteps; s++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nRecv + st->nOp; i++) {
        region g = i < st->nRecv ? regionOf(p->recvs[st->recvBase + i].ref, p->recvs[st->recvBase + i].count)
                                 : regionOf(p->ops[st->opBase + i - st->nRecv].dst,
                                            opWritten(p, &p->ops[st->opBase + i - st->nRecv]));
        if (g.buf != PLAN_BUF_RECV) continue;
        if (nw == cap) {
          region* m = realloc(w, 2 * cap * sizeof *w);
          if (!m) {
            free(w);
            return fail(err, errlen, "out of memory");
          }
          w = m;
          cap *= 2;
        }
        w[nw++] = g;
      }
    }
    qsort(w, nw, sizeof *w, regionCmp);
    uint64_t at = 0;
    int bad = 0;
    for (size_t i = 0; i < nw && !bad; i++) {
      if (w[i].lo != at) bad = 1;
      at = w[i].hi;
    }
    if (!bad && at != pr->recvElems) bad = 1;
    if (bad) {
      uint64_t where = 0;
      at = 0;
      for (size_t i = 0; i < nw; i++) {
        if (w[i].lo != at) {
          where = w[i].lo < at ? w[i].lo : at;
          break;
        }
        at = w[i].hi;
        where = at;
      }
      free(w);
      return fail(
          err, errlen,
          "rank %d: recv elements are not written exactly once (first fault near element %llu of %llu)", r,
          (unsigned long long)where, (unsigned long long)pr->recvElems);
    }
    free(w);
  }
  return 0;
}
