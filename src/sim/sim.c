/*
 * The simulator: a fluid model of the transfers (max-min fair sharing of link
 * capacity) driven by every rank's program of a plan. See sim.h for what is
 * modeled and docs/model.md for what is left out.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"

/* ---- the fluid model ---------------------------------------------------- */

/* Resources a flow can cross. For n GPUs: n*n directed links, n injection
 * ports, n ejection ports, the fabric, n local-copy engines (self transfers),
 * n NIC exits and n NIC entries (with PXN only each node's first GPU's are
 * used: the node's NICs are one pool), and per GPU P2P_MAX_CHANNELS send
 * channels and as many receive channels. A flow crosses at most link, two
 * ports and the fabric (or two NIC pools) plus two channels. */
#define MAX_RES_PER_FLOW 6

enum { FLOW_PENDING = 0, FLOW_ACTIVE = 1, FLOW_DONE = 2 };

typedef struct {
  double remaining; /* bytes */
  double rate;      /* bytes/s, valid while active */
  double start;     /* seconds: not before */
  double end;
  int src, dst;
  int state;
  int nres;
  int res[MAX_RES_PER_FLOW];
  int tag;        /* the caller's: the plan sim stores the step */
  double maxRate; /* > 0: bytes/s the flow never exceeds (its share of its rank's operation budget) */
} fluidFlow;

typedef struct {
  const struct relayTopo* topo;
  int n, nRes;
  double* cap; /* [nRes] capacity, bytes/s; 0: uncapped (never a flow's resource) */
  fluidFlow* flows;
  int nFlows, capFlows;
  int* active;
  int nActive;
  int* pending;
  int nPending;
  /* water-filling scratch */
  double* capRem; /* [nRes] */
  int* users;     /* [nRes] unfrozen flows using it */
  int* usedRes;   /* compact list of resources in use */
  char* frozen;   /* [capFlows] */
  double now;
  int dirty;
  int events;
  double chanShare; /* a channel with 2+ flows moves this much of its cap */
} fluid;

static int resLink(int n, int s, int d) { return s * n + d; }
static int resInj(int n, int g) { return n * n + g; }
static int resEj(int n, int g) { return n * n + n + g; }
static int resFabric(int n) { return n * n + 2 * n; }
static int resSelf(int n, int g) { return n * n + 2 * n + 1 + g; }
static int resNicOut(int n, int g) { return n * n + 3 * n + 1 + g; }
static int resNicIn(int n, int g) { return n * n + 4 * n + 1 + g; }
static int resChanBase(int n) { return n * n + 5 * n + 1; }
static int resChanSend(int n, int g, int c) { return resChanBase(n) + g * P2P_MAX_CHANNELS + c; }
static int resChanRecv(int n, int g, int c) { return resChanBase(n) + (n + g) * P2P_MAX_CHANNELS + c; }
/* With PXN a node's GPUs share its NICs: one resource, the first GPU's. */
static int nicOf(const struct relayTopo* t, int g) {
  return t->pxn && t->nNodes > 1 ? relayTopoNodeOf(t, g) * (t->nGPUs / t->nNodes) : g;
}

static void fluidFree(fluid* f) {
  free(f->cap);
  free(f->flows);
  free(f->active);
  free(f->pending);
  free(f->capRem);
  free(f->users);
  free(f->usedRes);
  free(f->frozen);
  memset(f, 0, sizeof *f);
}

static relayResult_t fluidInit(fluid* f, const struct relayTopo* t, int maxFlows) {
  memset(f, 0, sizeof *f);
  int n = t->nGPUs;
  f->topo = t;
  f->n = n;
  f->nRes = resChanBase(n) + 2 * n * P2P_MAX_CHANNELS;
  if (maxFlows < 1) maxFlows = 1;
  f->capFlows = maxFlows;
  f->cap = calloc((size_t)f->nRes, sizeof *f->cap);
  f->capRem = calloc((size_t)f->nRes, sizeof *f->capRem);
  f->users = calloc((size_t)f->nRes, sizeof *f->users);
  f->usedRes = calloc((size_t)f->nRes, sizeof *f->usedRes);
  f->flows = calloc((size_t)maxFlows, sizeof *f->flows);
  f->active = calloc((size_t)maxFlows, sizeof *f->active);
  f->pending = calloc((size_t)maxFlows, sizeof *f->pending);
  f->frozen = calloc((size_t)maxFlows, 1);
  if (!f->cap || !f->capRem || !f->users || !f->usedRes || !f->flows || !f->active || !f->pending ||
      !f->frozen) {
    fluidFree(f);
    return relaySystemError;
  }
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (s != d) f->cap[resLink(n, s, d)] = relayTopoLinkCap(t, s, d);
  for (int g = 0; g < n; g++) {
    f->cap[resInj(n, g)] = t->injBw[g];
    f->cap[resEj(n, g)] = t->ejBw[g];
    /* A self transfer is a copy: every byte read once and written once. */
    f->cap[resSelf(n, g)] = t->memBw / 2;
  }
  f->cap[resFabric(n)] = t->fabricBw;
  double nic = relayTopoNicCap(t);
  for (int g = 0; g < n; g++) {
    f->cap[resNicOut(n, g)] = nic;
    f->cap[resNicIn(n, g)] = nic;
    for (int c = 0; c < P2P_MAX_CHANNELS; c++) {
      f->cap[resChanSend(n, g, c)] = t->chanBw;
      f->cap[resChanRecv(n, g, c)] = t->chanBw;
    }
  }
  f->chanShare = t->chanShare > 0 ? t->chanShare : 1.0;
  return relaySuccess;
}

/* Adds a flow; its id is the return value. The caller checked reachability.
 * channel >= 0: the flow is a part on that P2P channel (when the topology
 * models channels). */
static int fluidAdd(fluid* f, int src, int dst, double bytes, double start, int tag, int channel) {
  int id = f->nFlows++;
  fluidFlow* fl = &f->flows[id];
  memset(fl, 0, sizeof *fl);
  fl->remaining = bytes;
  fl->start = start;
  fl->src = src;
  fl->dst = dst;
  fl->tag = tag;
  int n = f->n;
  if (src == dst) {
    fl->res[fl->nres++] = resSelf(n, src);
  } else if (relayTopoNodeOf(f->topo, src) != relayTopoNodeOf(f->topo, dst)) {
    fl->res[fl->nres++] = resNicOut(n, nicOf(f->topo, src));
    fl->res[fl->nres++] = resNicIn(n, nicOf(f->topo, dst));
  } else {
    if (f->cap[resLink(n, src, dst)] > 0) fl->res[fl->nres++] = resLink(n, src, dst);
    if (f->cap[resInj(n, src)] > 0) fl->res[fl->nres++] = resInj(n, src);
    if (f->cap[resEj(n, dst)] > 0) fl->res[fl->nres++] = resEj(n, dst);
    if (f->cap[resFabric(n)] > 0) fl->res[fl->nres++] = resFabric(n);
  }
  if (src != dst && channel >= 0 && channel < P2P_MAX_CHANNELS && f->topo->chanBw > 0) {
    fl->res[fl->nres++] = resChanSend(n, src, channel);
    fl->res[fl->nres++] = resChanRecv(n, dst, channel);
  }
  fl->state = FLOW_PENDING;
  f->pending[f->nPending++] = id;
  return id;
}

/* Max-min fair rates by progressive filling: raise every unfrozen flow's rate
 * together until a resource saturates or a flow reaches its own cap
 * (maxRate), freeze the flows through it (or at their cap), repeat. */
static void fluidWaterfill(fluid* f) {
  int nUsed = 0;
  for (int i = 0; i < f->nActive; i++) {
    fluidFlow* fl = &f->flows[f->active[i]];
    f->frozen[i] = 0;
    for (int k = 0; k < fl->nres; k++) {
      int r = fl->res[k];
      if (f->users[r]++ == 0) {
        f->usedRes[nUsed++] = r;
        f->capRem[r] = f->cap[r];
      }
    }
    if (fl->nres == 0) { /* nothing bounds it: ends at once */
      fl->rate = INFINITY;
      f->frozen[i] = 1;
    }
  }
  /* A channel shared by several flows moves less in all (topo.h). */
  if (f->chanShare < 1)
    for (int u = 0; u < nUsed; u++) {
      int r = f->usedRes[u];
      if (r >= resChanBase(f->n) && f->users[r] > 1) f->capRem[r] = f->cap[r] * f->chanShare;
    }
  for (;;) {
    int best = -1;
    double share = INFINITY;
    for (int u = 0; u < nUsed; u++) {
      int r = f->usedRes[u];
      if (f->users[r] == 0) continue;
      double s = f->capRem[r] / f->users[r];
      if (s < share) {
        share = s;
        best = r;
      }
    }
    if (best < 0) break;
    if (share < 0) share = 0;
    double capped = INFINITY; /* the lowest cap of an unfrozen flow, when below the share */
    for (int i = 0; i < f->nActive; i++) {
      const fluidFlow* fl = &f->flows[f->active[i]];
      if (!f->frozen[i] && fl->maxRate > 0 && fl->maxRate < share && fl->maxRate < capped)
        capped = fl->maxRate;
    }
    if (isfinite(capped)) share = capped;
    for (int i = 0; i < f->nActive; i++) {
      if (f->frozen[i]) continue;
      fluidFlow* fl = &f->flows[f->active[i]];
      int uses = 0;
      if (isfinite(capped)) uses = fl->maxRate > 0 && fl->maxRate <= capped;
      else
        for (int k = 0; k < fl->nres; k++) uses |= fl->res[k] == best;
      if (!uses) continue;
      fl->rate = share;
      f->frozen[i] = 1;
      for (int k = 0; k < fl->nres; k++) {
        int r = fl->res[k];
        f->capRem[r] -= share;
        if (f->capRem[r] < 0) f->capRem[r] = 0;
        f->users[r]--;
      }
    }
  }
  for (int u = 0; u < nUsed; u++) f->users[f->usedRes[u]] = 0;
  f->events++;
}

static void fluidActivateDue(fluid* f) {
  int w = 0;
  for (int i = 0; i < f->nPending; i++) {
    int id = f->pending[i];
    if (f->flows[id].start <= f->now) {
      f->flows[id].state = FLOW_ACTIVE;
      f->active[f->nActive++] = id;
      f->dirty = 1;
    } else {
      f->pending[w++] = id;
    }
  }
  f->nPending = w;
}

/* Runs the model to its next completions. Writes the ids of the flows that
 * ended (at f->now) to done[] and returns how many; 0 when no flow is left. */
static int fluidNext(fluid* f, int* done) {
  for (;;) {
    fluidActivateDue(f);
    if (f->nActive == 0 && f->nPending == 0) return 0;
    if (f->nActive == 0) { /* idle until the next start */
      double t = INFINITY;
      for (int i = 0; i < f->nPending; i++)
        if (f->flows[f->pending[i]].start < t) t = f->flows[f->pending[i]].start;
      f->now = t;
      continue;
    }
    if (f->dirty) {
      fluidWaterfill(f);
      f->dirty = 0;
    }
    double dt = INFINITY;
    int first = -1;
    for (int i = 0; i < f->nActive; i++) {
      fluidFlow* fl = &f->flows[f->active[i]];
      double t = fl->rate > 0 ? fl->remaining / fl->rate : INFINITY;
      if (t < dt) {
        dt = t;
        first = i;
      }
    }
    double nextStart = INFINITY;
    for (int i = 0; i < f->nPending; i++)
      if (f->flows[f->pending[i]].start < nextStart) nextStart = f->flows[f->pending[i]].start;
    if (first < 0 && !isfinite(nextStart)) return 0; /* no rate anywhere: the caller reports it */
    if (nextStart < f->now + dt) {
      /* A flow joins before any ends: advance, re-share, go on. */
      double step = nextStart - f->now;
      for (int i = 0; i < f->nActive; i++) {
        fluidFlow* fl = &f->flows[f->active[i]];
        fl->remaining -= fl->rate * step;
      }
      f->now = nextStart;
      continue;
    }
    f->now += dt;
    int nd = 0, w = 0;
    for (int i = 0; i < f->nActive; i++) {
      int id = f->active[i];
      fluidFlow* fl = &f->flows[id];
      if (isinf(fl->rate)) fl->remaining = 0;
      else fl->remaining -= fl->rate * dt;
      /* Flows within a picosecond (or a thousandth of a byte) of their end
       * end together: symmetric plans then take one event per step. */
      if (i == first || fl->remaining <= fl->rate * 1e-12 || fl->remaining <= 1e-3) {
        fl->remaining = 0;
        fl->state = FLOW_DONE;
        fl->end = f->now;
        done[nd++] = id;
      } else {
        f->active[w++] = id;
      }
    }
    f->nActive = w;
    f->dirty = 1;
    return nd;
  }
}

relayResult_t relaySimFlows(const struct relayTopo* topo, int n, const int* src, const int* dst,
                            const double* bytes, double* makespan, double* ends) {
  *makespan = 0;
  char err[256];
  if (relayTopoCheck(topo, err, sizeof err) != 0)
    return relaySetError(NULL, relayInvalidArgument, "sim: topology '%s': %s", topo->name, err);
  if (n <= 0) return relaySuccess;
  for (int i = 0; i < n; i++)
    if (!relayTopoReachable(topo, src[i], dst[i]))
      return relaySetError(NULL, relayInvalidArgument, "sim: flow %d: GPU %d cannot reach GPU %d on '%s'", i,
                           src[i], dst[i], topo->name);
  fluid f;
  RELAY_CHECK(fluidInit(&f, topo, n));
  int* done = malloc((size_t)n * sizeof *done);
  if (!done) {
    fluidFree(&f);
    return relaySystemError;
  }
  for (int i = 0; i < n; i++) {
    if (bytes[i] > 0) {
      fluidAdd(&f, src[i], dst[i], bytes[i], 0.0, i, -1);
    } else {
      /* an empty flow ends at once; keep ids aligned with i */
      int id = fluidAdd(&f, src[i], dst[i], 0.0, 0.0, i, -1);
      f.flows[id].nres = 0;
    }
  }
  int nd;
  while ((nd = fluidNext(&f, done)) > 0) {
  }
  *makespan = f.now;
  if (ends)
    for (int i = 0; i < n; i++) ends[i] = f.flows[i].end;
  free(done);
  fluidFree(&f);
  return relaySuccess;
}

/* ---- the plan-driven simulation ---------------------------------------- */

typedef struct {
  int step;        /* the step it is in; nSteps when finished */
  int waiting;     /* in a step with transfers, not all ended */
  int outstanding; /* transfers of this step not yet ended */
  double ready;    /* entered the step + its boundary: its flows start no earlier */
  double side;     /* the side lane is free from here */
  double end;
  int boundaries, launches;
} simRank;

typedef struct {
  const relayPlan* plan;
  const struct relayTopo* topo;
  fluid fl;
  simRank* rk;
  int* mark; /* [nranks] stamps for distinct peers */
  int stamp;
  relaySimResult* out;
  relayResult_t err;
  const relaySimP2p* p2p; /* NULL: every transfer one flow */
} simState;

/* The non-empty parts of a transfer a -> b of `bytes` (> 0) in a step of P2P
 * operation op (planStep.p2pOp): p2pTaskSplit, or the caller's part count /
 * schedule base; one part on no channel without the channel model or to
 * oneself. Returns the count (>= 1). */
static int simSplit(const simState* S, p2pOp op, int a, int b, uint64_t bytes, p2pPart* parts) {
  const relaySimP2p* P = S->p2p;
  if (!P || a == b) {
    parts[0].channel = -1;
    parts[0].off = 0;
    parts[0].len = (size_t)bytes;
    return 1;
  }
  const p2pComm* c = &P->comm;
  int n;
  if (P->parts > 0 || P->scheduleBase) {
    n = P->parts > 0 ? (P->parts < c->pool ? P->parts : c->pool) : p2pTaskParts(c, op);
    int base = p2pChannelBase(c, P->scheduleBase ? P2P_OP_SENDRECV : op, a, b);
    for (int k = 0; k < n; k++) {
      parts[k].channel = p2pChannelForPart(c->pool, base, k);
      p2pPartBounds((size_t)bytes, n, 0, k, &parts[k].off, &parts[k].len);
    }
  } else {
    n = p2pTaskSplit(c, op, a, b, (size_t)bytes, 0, parts);
  }
  int m = 0;
  for (int k = 0; k < n; k++)
    if (parts[k].len) parts[m++] = parts[k];
  return m;
}

/* Flows rank r takes part in during step s: each transfer's parts. */
static int stepFlows(const simState* S, int r, const planStep* st) {
  const relayPlan* P = S->plan;
  p2pPart parts[P2P_MAX_CHANNELS];
  int n = 0;
  for (uint32_t i = 0; i < st->nSend; i++) {
    const planXfer* x = &P->sends[st->sendBase + i];
    n += simSplit(S, (p2pOp)st->p2pOp, r, x->peer, x->count * P->elemSize, parts);
  }
  for (uint32_t i = 0; i < st->nRecv; i++) {
    const planXfer* x = &P->recvs[st->recvBase + i];
    n += simSplit(S, (p2pOp)st->p2pOp, x->peer, r, x->count * P->elemSize, parts);
  }
  return n;
}

static double opSeconds(const simState* S, const planOp* op) {
  double bytes = (double)op->count * (double)S->plan->elemSize;
  /* A copy reads and writes each byte; a k-input reduce reads k, writes one. */
  double moved = op->kind == PLAN_OP_COPY ? 2 * bytes : (double)(op->nsrc + 1) * bytes;
  double bw = op->kind == PLAN_OP_REDUCE && S->topo->reduceBw > 0 ? S->topo->reduceBw : S->topo->memBw;
  return S->topo->launchS + moved / bw;
}

/* Seconds to push `bytes` to each of r's A-1 peers of the op's group at
 * once: each at the pair's rate, all together within r's injection cap. */
static double pushSeconds(const simState* S, int r, const planOp* op, double bytes) {
  const relayPlan* P = S->plan;
  double push = 0;
  int me = P->rank[r].activeIndex, peers = 0;
  for (int i = 0; i < P->nActive; i++) {
    int q = P->ranks[op->group * P->nActive + i];
    /* A rooted op pushes data one way only: the root to each peer (broadcast), each peer to the root
     * (reduce); the other way's empty push is a flag, not priced */
    if (q == r || (op->root >= 0 && !(op->gather ? me == op->root : i == op->root))) continue;
    peers++;
    double rate = relayTopoPairRate(S->topo, r, q);
    double t = rate > 0 ? bytes / rate : 0;
    if (t > push) push = t;
  }
  if (S->topo->injBw && S->topo->injBw[r] > 0) {
    double t = (double)peers * bytes / S->topo->injBw[r];
    if (t > push) push = t;
  }
  return push;
}

/* A one-shot op of rank r: one launch, its pushes of `pushed` bytes to each
 * of the A-1 peers (concurrent, each at the pair's rate, all together within
 * r's injection cap), then the A-input reduce at memory bandwidth (all-gather
 * and all-to-all: A block copies, each read and written once). A rooted op
 * pushes one way (broadcast: the root to each peer, which copies one block;
 * reduce: each peer to the root, which alone reduces). Peers'
 * pushes into r overlap r's own (both directions of a link), and the
 * hand-shake wait is not modelled: ranks enter the step together. */
/* A pair's read of its peer's b bytes out of the staging the peer has just written (topo.h stagedReadBw),
 * priced where the one-copy path is the alternative: the ring routes pay it too but do not price it, so
 * without one copy (ranks that cannot reach each other's memory) the staged routes compare as before. */
static double stagedReadSeconds(const simState* S, double b) {
  const struct relayTopo* T = S->topo;
  return T->stagedReadBw > 0 && T->oneCopyBytes > 0 && S->plan->nActive == 2 ? b / T->stagedReadBw : 0;
}

/* A broadcast whose block rides the shape agreement (relayPlan.carried): the root's one copy into its own
 * slot, the agreement's hop, then every member's read of that slot at once, each at its pair's rate; no
 * push per member (the root writes the block once, not A - 1 times). */
static double carriedSeconds(const simState* S, int r, const planOp* op, double bytes) {
  const struct relayTopo* T = S->topo;
  int root = S->plan->ranks[op->group * S->plan->nActive + op->root];
  double rate = r == root ? T->memBw : relayTopoPairRate(T, root, r); /* the root places its own block too */
  if (!(rate > 0)) rate = T->memBw;                                   /* a pair the model has no rate for */
  return T->launchS + bytes / T->memBw + T->hopS + bytes / rate;
}

/* The one-shot's two-shot all-reduce (form PLAN_BW_TWOSHOT): r's copy of its input but for its own shard
 * (it reduces that one from its input) into its own area, a hop, the reduce of its shard (A reads, one
 * write), a hop, then the copy of each peer's reduced shard out of that peer's area at the pair's rate, one
 * after another (one CPU copies them), and its own. Each shard at its own length (planBwShardOf: the last
 * ones short or empty). */
static double oneshotTwoShotSeconds(const simState* S, int r, const planOp* op, double bytes) {
  const struct relayTopo* T = S->topo;
  const relayPlan* P = S->plan;
  uint64_t shard = planBwShard(op->count, P->nActive), at, len;
  double es = (double)P->elemSize, bw = T->reduceBw > 0 ? T->reduceBw : T->memBw, own = 0, out = 0;
  for (int i = 0; i < P->nActive; i++) {
    int q = P->ranks[op->group * P->nActive + i];
    planBwShardOf(op->count, shard, i, &at, &len);
    double rate = q == r ? T->memBw : relayTopoPairRate(T, q, r);
    out += (double)len * es / (rate > 0 ? rate : T->memBw);
    if (q == r) own = (double)len * es;
  }
  double in = bytes > own ? bytes - own : 0;
  return T->launchS + in / T->memBw + 2 * T->hopS + (double)(P->nActive + 1) * own / bw + out;
}

static double oneshotSeconds(const simState* S, int r, const planOp* op) {
  const relayPlan* P = S->plan;
  double bytes = (double)op->count * (double)P->elemSize;
  if (P->carried && op->root >= 0) return carriedSeconds(S, r, op, bytes);
  if (op->form == PLAN_BW_TWOSHOT) return oneshotTwoShotSeconds(S, r, op, bytes);
  double push = pushSeconds(S, r, op, bytes);
  double bw = S->topo->reduceBw > 0 ? S->topo->reduceBw : S->topo->memBw;
  int gather = op->gather, blocks = op->root >= 0 ? 1 : P->nActive;
  double local = gather ? 2.0 * blocks * bytes / S->topo->memBw : (double)(P->nActive + 1) * bytes / bw;
  if (op->root >= 0 && !gather && P->rank[r].activeIndex != op->root) local = 0; /* a reduce's peer */
  return S->topo->launchS + push + local + stagedReadSeconds(S, bytes);
}

double relaySimSubCollSeconds(const struct relayTopo* t, relayCollective_t coll, const int* members, int n,
                              double blkBytes) {
  if (n <= 1)
    return t->launchS + (relayCollGathers(coll) || relayCollReduces(coll) ? 2 * blkBytes / t->memBw : 0);
  /* Nodes spanned and the most members on one node. */
  int nodes = 0, perNode = 0;
  for (int i = 0; i < n; i++) {
    int v = relayTopoNodeOf(t, members[i]), first = 1, here = 0;
    for (int j = 0; j < n; j++) {
      if (relayTopoNodeOf(t, members[j]) != v) continue;
      if (j < i) first = 0;
      here++;
    }
    nodes += first;
    if (here > perNode) perNode = here;
  }
  /* The ring's per-edge bytes and steps (all-to-all: pairwise, one step). */
  double edge, netOut;
  int steps;
  switch (coll) {
    case relayCollectiveAllReduce:
      edge = 2.0 * (n - 1) / n * blkBytes;
      steps = 2 * (n - 1);
      netOut = edge;
      break;
    case relayCollectiveAllToAll:
      edge = blkBytes;
      steps = 1;
      netOut = (double)perNode * (n - perNode) * blkBytes;
      break;
    case relayCollectiveBroadcast:
    case relayCollectiveReduce: /* a pipelined chain: the whole buffer on each edge */
      edge = blkBytes;
      steps = n - 1;
      netOut = edge;
      break;
    default:
      edge = (double)(n - 1) * blkBytes;
      steps = n - 1;
      netOut = edge;
      break;
  }
  /* Inside a node: the slowest consecutive pair of the ring. */
  double intra = INFINITY;
  for (int i = 0; i < n; i++) {
    int a = members[i], b = members[(i + 1) % n];
    if (relayTopoNodeOf(t, a) != relayTopoNodeOf(t, b)) continue;
    double r = relayTopoPairRate(t, a, b);
    if (r > 0 && r < intra) intra = r;
  }
  double bw = isfinite(intra) ? edge / intra : 0;
  double lat = t->hopS;
  if (nodes > 1) {
    /* Each node's members leave it on their own share of its NICs. */
    double gpus = t->nNodes > 1 ? (double)(t->nGPUs / t->nNodes) : 1;
    double nicGpu = (double)t->nicsPerNode * t->nicBw / gpus;
    double net = nicGpu > 0 ? netOut / (perNode * nicGpu) : INFINITY;
    if (net > bw) bw = net;
    if (t->netLatS > lat) lat = t->netLatS;
  }
  return t->launchS + steps * lat + bw;
}

/* A sub-collective op of rank r (PLAN_OP_SUBCOLL). Its members are not
 * synchronized: each pays the collective's time from its own arrival. */
static double subcollSeconds(const simState* S, const planOp* op) {
  const relayPlan* P = S->plan;
  const planSubColl* sc = &P->subs[op->group];
  double t = relaySimSubCollSeconds(S->topo, (relayCollective_t)sc->coll, P->subRanks + sc->rankBase,
                                    sc->nRanks, (double)sc->count * (double)P->elemSize);
  if (relayCollReduces((relayCollective_t)sc->coll) && op->divisor > 1)
    t += opSeconds(S, op); /* the divide */
  return t;
}

/* A bandwidth op of rank r (PLAN_OP_BW): one launch, then U tiles through a
 * ring of R slots per source. Per tile of b bytes: the push of b to each
 * peer (p(b)), the consumer's reduce or placement of it at memory bandwidth
 * (l(b)), and one flag hand-shake across the link, priced at topo->hopS
 * (the library's one-hop latency: the same store-then-poll of a flag). Tile
 * t's push overlaps the consume of t-1, so with full tiles of bytes f and a
 * last one of r: p(f) + (U-2) * period + max(p(r), l(f)) + l(r) + hop, the
 * period being the slower stage, or a slot's round trip (push, flag,
 * consume, acknowledgement) over the R slots in flight when the ring is too
 * shallow to hide it. One tile costs the one-shot's time plus one hop, so
 * the curves meet without a jump. Two-shot: 2 * T1 tiles of the shard
 * (planBwShard), T1 reduced then T1 placed, priced as the slower of the two. */
static double bwTileLocal(const simState* S, int r, const planOp* op, double b) {
  const struct relayTopo* T = S->topo;
  int A = S->plan->nActive;
  double rbw = T->reduceBw > 0 ? T->reduceBw : T->memBw;
  if (op->root >= 0) /* broadcast: one block placed everywhere; reduce: the root alone reduces */
    return op->gather ? 2.0 * b / T->memBw
                      : (S->plan->rank[r].activeIndex == op->root ? (double)(A + 1) * b / rbw : 0);
  if (relayCollGathers(S->plan->coll)) return 2.0 * A * b / T->memBw;
  double l = (double)(A + 1) * b / rbw;
  if (op->form == PLAN_BW_TWOSHOT) {
    double place = 2.0 * (A - 1) * b / T->memBw; /* phase 2: A-1 shards' tiles copied out of staging */
    if (place > l) l = place;
  }
  return l;
}

/* The shm one-copy path (transport/shm/bw.c) of rank r: an entry and an exit barrier (a hop for both: a
 * 4 KiB all-gather took ~2 us more on it than on the one-shot, 2 ranks of a 2-core EPYC) around direct
 * copies between processes at the pair rate, no staging copy: all-gather and all-to-all write their block
 * into each peer; reduce-scatter reads its block of every peer, then reduces it; all-reduce does that for
 * its shard, then writes the shard into each peer. Copy and reduce take turns per tile (one thread), so
 * they add. */
static double bwOneCopySeconds(const simState* S, int r, const planOp* op) {
  const relayPlan* P = S->plan;
  const struct relayTopo* T = S->topo;
  int A = P->nActive;
  double es = (double)P->elemSize, rbw = T->reduceBw > 0 ? T->reduceBw : T->memBw;
  double fixed = T->launchS + T->hopS;
  if (relayCollGathers(P->coll)) return fixed + pushSeconds(S, r, op, (double)op->count * es);
  int allReduce = !op->srcStride; /* all-reduce: a shard, whatever the staged form; reduce-scatter: a block */
  uint64_t n = allReduce ? planBwShard(op->count, A) : op->count;
  double span = (double)(n < op->count ? n : op->count) * es;
  double t = fixed + pushSeconds(S, r, op, span) + (double)(A + 1) * span / rbw;
  /* All-reduce: a second round of copy calls, the shard into each peer, after the reduce: 2.3 us more than
   * an all-gather's one round at 4-8 KiB (2 ranks, 2-core EPYC, medians: 5.8-6.3 us against 3.5-4.3). */
  return allReduce ? t + T->hopS + pushSeconds(S, r, op, span) : t;
}

/* A broadcast's one copy (transport/shm/bw.c): an entry hop (the root's address), every peer's read of the
 * root's buffer at the pair's rate, the A-1 readers together within the fabric (they share the host's cores
 * and memory bus), and an exit hop (the root waits for every peer's), where the staged paths write A-1
 * copies at the root and read each out again. */
static double bwRootedOneCopySeconds(const simState* S, const planOp* op) {
  const relayPlan* P = S->plan;
  const struct relayTopo* T = S->topo;
  int A = P->nActive, root = P->ranks[op->group * A + op->root];
  double m = (double)op->count * (double)P->elemSize, read = 0;
  for (int i = 0; i < A; i++) {
    int q = P->ranks[op->group * A + i];
    double rate = q == root ? 0 : relayTopoPairRate(T, root, q), t = rate > 0 ? m / rate : 0;
    if (t > read) read = t;
  }
  if (T->fabricBw > 0 && (A - 1) * m / T->fabricBw > read) read = (A - 1) * m / T->fabricBw;
  return T->launchS + (A == 2 ? 1 : 2) * T->hopS + read;
}

/* The staged path: tiles through the ring (above). */
static double bwStagedSeconds(const simState* S, int r, const planOp* op) {
  const relayPlan* P = S->plan;
  const struct relayTopo* T = S->topo;
  double es = (double)P->elemSize;
  uint64_t tile = op->tile ? op->tile : 1;
  uint64_t span = op->form == PLAN_BW_TWOSHOT ? planBwShard(op->count, P->nActive) : op->count;
  if (span > op->count) span = op->count; /* a shard rounded up past a tiny count */
  uint64_t tiles = (span + tile - 1) / tile;
  if (tiles < 1) tiles = 1;
  double U = op->form == PLAN_BW_TWOSHOT ? 2.0 * (double)tiles : (double)tiles;
  double f = (double)(span < tile ? span : tile) * es;    /* a full tile's bytes */
  double rest = (double)(span - (tiles - 1) * tile) * es; /* the last tile's */
  double pf = pushSeconds(S, r, op, f), lf = bwTileLocal(S, r, op, f);
  double pr = pushSeconds(S, r, op, rest), lr = bwTileLocal(S, r, op, rest);
  if (U < 2) return T->launchS + pr + T->hopS + lr;
  double period = pf > lf ? pf : lf;
  double ringTrip = (pf + lf + 2 * T->hopS) / (double)(op->ring ? op->ring : 1);
  if (ringTrip > period) period = ringTrip;
  /* Two-shot: the shard's last tile closes each phase; price both phases'
   * tiles as full ones but the very last (a small excess on short shards). */
  return T->launchS + pf + (U - 2) * period + (pr > lf ? pr : lf) + lr + T->hopS;
}

static double bwSeconds(const simState* S, int r, const planOp* op) {
  const relayPlan* P = S->plan;
  const struct relayTopo* T = S->topo;
  double es = (double)P->elemSize;
  /* Each rank's input, and the transport's own rule for its one-copy path (bw.c bwCmaWanted). */
  double input = (double)op->count * es * (op->srcStride ? (double)P->nActive : 1.0);
  if (!relayTopoOneCopy(T->oneCopyBytes, T->oneCopyPairBytes, T->oneCopyRootedBytes, P->nActive,
                        op->root >= 0, op->gather, input))
    return bwStagedSeconds(S, r, op);
  return op->root >= 0 ? bwRootedOneCopySeconds(S, op) : bwOneCopySeconds(S, r, op);
}

/* Runs rank r's local ops of step s from time t; returns when lane 0 is done. */
static double runOps(simState* S, int r, int s, double t) {
  const planStep* st = planRankStep(S->plan, r, s);
  simRank* R = &S->rk[r];
  for (uint32_t i = 0; i < st->nOp; i++) {
    const planOp* op = &S->plan->ops[st->opBase + i];
    double d = op->kind == PLAN_OP_ONESHOT   ? oneshotSeconds(S, r, op)
               : op->kind == PLAN_OP_SUBCOLL ? subcollSeconds(S, op)
               : op->kind == PLAN_OP_BW      ? bwSeconds(S, r, op)
                                             : opSeconds(S, op);
    R->launches++;
    if (op->lane == 0) {
      t += d;
    } else {
      /* The side lane starts an op no earlier than where it was issued on the
       * main lane (an event recorded there gates it), one op after another. */
      R->side = (R->side > t ? R->side : t) + d;
    }
  }
  return t;
}

/* The cap of a transfer a -> b in step s under the topology's operation
 * budget: its equal share of a's budget over the transfers a sends to other
 * GPUs in the step, fixed for the step (a share left by an operation that
 * ended early is not handed on: RCCL's channels stay with their operation).
 * 0: no cap (no budget, or a self pair, a copy inside the kernel). */
static double opBudgetCap(const simState* S, int a, int b, int s) {
  if (S->topo->opBudgetBw <= 0 || a == b) return 0;
  const planStep* st = planRankStep(S->plan, a, s);
  int ops = 0;
  for (uint32_t i = 0; i < st->nSend; i++) ops += S->plan->sends[st->sendBase + i].peer != a;
  return S->topo->opBudgetBw / (ops > 0 ? ops : 1);
}

/* Creates the flows between r and p in step s (both have entered it). */
static void createPairFlows(simState* S, int r, int p, int s) {
  const relayPlan* P = S->plan;
  double start = S->rk[r].ready > S->rk[p].ready ? S->rk[r].ready : S->rk[p].ready;
  for (int dir = 0; dir < (r == p ? 1 : 2); dir++) {
    int a = dir == 0 ? r : p, b = dir == 0 ? p : r;
    const planStep* sa = planRankStep(P, a, s);
    const planStep* sb = planRankStep(P, b, s);
    uint32_t j = 0;
    for (uint32_t i = 0; i < sa->nSend; i++) {
      const planXfer* x = &P->sends[sa->sendBase + i];
      if (x->peer != b) continue;
      while (j < sb->nRecv && P->recvs[sb->recvBase + j].peer != a) j++;
      if (j == sb->nRecv || P->recvs[sb->recvBase + j].count != x->count) {
        if (S->err == relaySuccess)
          S->err = relaySetError(
              NULL, relayInvalidArgument,
              "sim: step %d: rank %d's send of %llu elements to rank %d has no matching receive", s, a,
              (unsigned long long)x->count, b);
        return;
      }
      j++;
      p2pPart parts[P2P_MAX_CHANNELS];
      int np = simSplit(S, (p2pOp)sa->p2pOp, a, b, x->count * P->elemSize, parts);
      /* Between GPUs the library's transfers reach only part of the link
       * rate, by the transfer's size, on a calibrated topology (topo.h). */
      double eff = a == b ? 1.0 : relayTopoCurveAt(&S->topo->p2pEff, (double)x->count * (double)P->elemSize);
      /* The operation's cap, shared by its parts in proportion to their bytes. */
      double cap = opBudgetCap(S, a, b, s), bytes = (double)x->count * (double)P->elemSize;
      for (int k = 0; k < np; k++) {
        int id = fluidAdd(&S->fl, a, b, (double)parts[k].len / eff, start, s, parts[k].channel);
        if (cap > 0) S->fl.flows[id].maxRate = cap * (double)parts[k].len / bytes;
      }
    }
  }
}

static void finishRank(simState* S, int r, double t) {
  simRank* R = &S->rk[r];
  R->step = S->plan->nSteps;
  R->waiting = 0;
  R->end = R->side > t ? R->side : t;
}

/* Rank r leaves step `from - 1` at time t and enters steps from `from` on,
 * running steps without transfers at once, until one with transfers. */
static void enterSteps(simState* S, int r, int from, double t) {
  const relayPlan* P = S->plan;
  simRank* R = &S->rk[r];
  for (int s = from; s < P->nSteps; s++) {
    const planStep* st = planRankStep(P, r, s);
    R->step = s;
    if (st->nSend + st->nRecv > 0) {
      R->waiting = 1;
      R->outstanding = stepFlows(S, r, st);
      R->ready = t + S->topo->boundaryS;
      R->boundaries++;
      /* Flows with each peer that is already here start now; the others
       * are created when that peer enters this step. */
      int stamp = ++S->stamp;
      for (int dir = 0; dir < 2; dir++) {
        uint32_t nx = dir == 0 ? st->nSend : st->nRecv;
        const planXfer* xs = dir == 0 ? &P->sends[st->sendBase] : &P->recvs[st->recvBase];
        for (uint32_t i = 0; i < nx; i++) {
          int p = xs[i].peer;
          if (S->mark[p] == stamp) continue;
          S->mark[p] = stamp;
          if (p == r || (S->rk[p].step == s && S->rk[p].waiting)) createPairFlows(S, r, p, s);
        }
      }
      return;
    }
    t = runOps(S, r, s, t);
    if (t > S->out->stepEndS[s]) S->out->stepEndS[s] = t;
  }
  finishRank(S, r, t);
}

static void stepTransfersDone(simState* S, int r, double t) {
  simRank* R = &S->rk[r];
  int s = R->step;
  R->waiting = 0;
  t = runOps(S, r, s, t);
  if (t > S->out->stepEndS[s]) S->out->stepEndS[s] = t;
  enterSteps(S, r, s + 1, t);
}

/* Every send of a step has a receive of the same count on its peer, and the
 * other way round (the plan checker's first rule, needed here so that no
 * rank waits forever). */
static relayResult_t checkMatching(const relayPlan* P) {
  int n = P->nranks;
  size_t nn = (size_t)n * (size_t)n;
  uint64_t* acc = calloc(nn * 4, sizeof *acc); /* send count, send elems, recv count, recv elems */
  if (!acc) return relaySystemError;
  relayResult_t res = relaySuccess;
  for (int s = 0; s < P->nSteps && res == relaySuccess; s++) {
    memset(acc, 0, nn * 4 * sizeof *acc);
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(P, r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &P->sends[st->sendBase + i];
        if (x->peer < 0 || x->peer >= n) {
          res = relaySetError(NULL, relayInvalidArgument, "sim: step %d: rank %d sends to rank %d of %d", s,
                              r, x->peer, n);
          goto out;
        }
        acc[((size_t)r * n + x->peer) * 4 + 0]++;
        acc[((size_t)r * n + x->peer) * 4 + 1] += x->count;
      }
      for (uint32_t i = 0; i < st->nRecv; i++) {
        const planXfer* x = &P->recvs[st->recvBase + i];
        if (x->peer < 0 || x->peer >= n) {
          res = relaySetError(NULL, relayInvalidArgument, "sim: step %d: rank %d receives from rank %d of %d",
                              s, r, x->peer, n);
          goto out;
        }
        acc[((size_t)x->peer * n + r) * 4 + 2]++;
        acc[((size_t)x->peer * n + r) * 4 + 3] += x->count;
      }
    }
    for (size_t i = 0; i < nn; i++)
      if (acc[i * 4 + 0] != acc[i * 4 + 2] || acc[i * 4 + 1] != acc[i * 4 + 3]) {
        res = relaySetError(NULL, relayInvalidArgument,
                            "sim: step %d: rank %d sends %llu transfers (%llu elements) to rank %d, which "
                            "receives %llu (%llu elements)",
                            s, (int)(i / n), (unsigned long long)acc[i * 4 + 0],
                            (unsigned long long)acc[i * 4 + 1], (int)(i % n),
                            (unsigned long long)acc[i * 4 + 2], (unsigned long long)acc[i * 4 + 3]);
        goto out;
      }
  }
out:
  free(acc);
  return res;
}

void relaySimResultFree(relaySimResult* r) {
  if (!r) return;
  free(r->stepEndS);
  free(r->stepS);
  free(r->rankEndS);
  free(r->linkBytes);
  free(r->stepBusiestBytes);
  free(r->chanFlows);
  free(r->chanFlowsIn);
  memset(r, 0, sizeof *r);
}

/* Traffic from the plan alone: bytes per directed pair, over the call and
 * per step. stepPair is nranks*nranks scratch. */
static void countTraffic(const relayPlan* P, relaySimResult* out, uint64_t* stepPair) {
  int n = P->nranks;
  size_t nn = (size_t)n * (size_t)n;
  for (int s = 0; s < P->nSteps; s++) {
    memset(stepPair, 0, nn * sizeof *stepPair);
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(P, r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &P->sends[st->sendBase + i];
        if (x->peer != r) stepPair[(size_t)r * n + x->peer] += x->count * P->elemSize;
      }
    }
    uint64_t busiest = 0;
    for (size_t i = 0; i < nn; i++) {
      out->linkBytes[i] += stepPair[i];
      if (stepPair[i] > busiest) busiest = stepPair[i];
    }
    out->stepBusiestBytes[s] = busiest;
    out->criticalPathBytes += busiest;
  }
  out->busiestSrc = out->busiestDst = -1;
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (s != d && out->linkBytes[(size_t)s * n + d] > out->busiestLinkBytes) {
        out->busiestLinkBytes = out->linkBytes[(size_t)s * n + d];
        out->busiestSrc = s;
        out->busiestDst = d;
      }
}

relayResult_t relaySimP2pComm(const struct relayTopo* t, int userPerPeer, p2pComm* out) {
  int nodes = t->nNodes > 1 ? t->nNodes : 1, G = t->nGPUs / nodes;
  char err[256];
  relayResult_t r;
  if (t->p2pPerPeer > 0) {
    int pool = 1, want = t->p2pChannels > 0 ? t->p2pChannels : P2P_MAX_CHANNELS;
    while (pool < want) pool <<= 1;
    r = p2pCommSet(nodes, G, pool, t->p2pPerPeer < pool ? t->p2pPerPeer : pool, userPerPeer, out, err,
                   sizeof err);
  } else {
    int* links = malloc((size_t)G * (size_t)G * sizeof *links);
    if (!links) return relaySetError(NULL, relaySystemError, "sim: out of memory");
    for (int i = 0; i < G; i++)
      for (int j = 0; j < G; j++) links[i * G + j] = i == j ? 0 : t->linkCount[i * t->nGPUs + j];
    p2pTopoDesc d;
    memset(&d, 0, sizeof d);
    d.nNodes = nodes;
    d.localRanks = G;
    d.localLinks = links;
    d.netsByBw = t->netsByBw;
    d.userPerNetPeer = userPerPeer;
    d.nChannels = t->p2pChannels > 0 ? t->p2pChannels : P2P_MAX_CHANNELS;
    r = p2pCommFromTopo(&d, out, err, sizeof err);
    free(links);
  }
  if (r != relaySuccess)
    return relaySetError(NULL, r, "sim: the P2P channels of topology '%s': %s", t->name, err);
  return relaySuccess;
}

/* Occupancy, from the plan alone: per step, flows per (sender, channel). */
static relayResult_t countOccupancy(simState* S) {
  const relayPlan* P = S->plan;
  int n = P->nranks;
  size_t cells = (size_t)n * P2P_MAX_CHANNELS;
  int* cur = calloc(cells * 2, sizeof *cur); /* sender side, then receiver side */
  S->out->chanFlows = calloc(cells, sizeof *S->out->chanFlows);
  S->out->chanFlowsIn = calloc(cells, sizeof *S->out->chanFlowsIn);
  if (!cur || !S->out->chanFlows || !S->out->chanFlowsIn) {
    free(cur);
    return relaySystemError;
  }
  S->out->poolSize = S->p2p->comm.pool;
  p2pPart parts[P2P_MAX_CHANNELS];
  for (int s = 0; s < P->nSteps; s++) {
    memset(cur, 0, cells * 2 * sizeof *cur);
    for (int r = 0; r < n; r++) {
      const planStep* st = planRankStep(P, r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &P->sends[st->sendBase + i];
        if (x->peer == r) continue;
        int np = simSplit(S, (p2pOp)st->p2pOp, r, x->peer, x->count * P->elemSize, parts);
        if (np > S->out->partsMax) S->out->partsMax = np;
        for (int k = 0; k < np; k++) {
          cur[(size_t)r * P2P_MAX_CHANNELS + (size_t)parts[k].channel]++;
          cur[cells + (size_t)x->peer * P2P_MAX_CHANNELS + (size_t)parts[k].channel]++;
        }
      }
    }
    for (size_t i = 0; i < cells; i++) {
      if (cur[i] > S->out->chanFlows[i]) S->out->chanFlows[i] = cur[i];
      if (cur[cells + i] > S->out->chanFlowsIn[i]) S->out->chanFlowsIn[i] = cur[cells + i];
    }
  }
  free(cur);
  return relaySuccess;
}

relayResult_t relaySimRun(const relayPlan* P, const struct relayTopo* topo, relaySimResult* out) {
  if (!topo || topo->chanBw <= 0) return relaySimRunP2p(P, topo, NULL, out);
  relaySimP2p p2p;
  memset(&p2p, 0, sizeof p2p);
  memset(out, 0, sizeof *out);
  RELAY_CHECK(relaySimP2pComm(topo, 0, &p2p.comm));
  return relaySimRunP2p(P, topo, &p2p, out);
}

relayResult_t relaySimRunP2p(const relayPlan* P, const struct relayTopo* topo, const relaySimP2p* p2p,
                             relaySimResult* out) {
  memset(out, 0, sizeof *out);
  if (!P || !topo) return relaySetError(NULL, relayInvalidArgument, "sim: NULL plan or topology");
  char err[256];
  if (relayTopoCheck(topo, err, sizeof err) != 0)
    return relaySetError(NULL, relayInvalidArgument, "sim: topology '%s': %s", topo->name, err);
  int n = P->nranks;
  if (n > topo->nGPUs)
    return relaySetError(NULL, relayInvalidArgument, "sim: the plan has %d ranks, topology '%s' %d GPUs", n,
                         topo->name, topo->nGPUs);
  out->nranks = n;
  out->nSteps = P->nSteps;
  size_t ns = P->nSteps > 0 ? (size_t)P->nSteps : 1;
  out->stepEndS = calloc(ns, sizeof *out->stepEndS);
  out->stepS = calloc(ns, sizeof *out->stepS);
  out->rankEndS = calloc((size_t)n, sizeof *out->rankEndS);
  out->linkBytes = calloc((size_t)n * (size_t)n, sizeof *out->linkBytes);
  out->stepBusiestBytes = calloc(ns, sizeof *out->stepBusiestBytes);
  if (!out->stepEndS || !out->stepS || !out->rankEndS || !out->linkBytes || !out->stepBusiestBytes) {
    relaySimResultFree(out);
    return relaySystemError;
  }
  relayResult_t res = checkMatching(P);
  if (res != relaySuccess) return res;
  /* Every pair that transfers must be reachable. */
  for (uint32_t r = 0; r < (uint32_t)n; r++)
    for (int s = 0; s < P->nSteps; s++) {
      const planStep* st = planRankStep(P, (int)r, s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        int p = P->sends[st->sendBase + i].peer;
        if (!relayTopoReachable(topo, (int)r, p))
          return relaySetError(NULL, relayInvalidArgument, "sim: step %d: GPU %u cannot reach GPU %d on '%s'",
                               s, r, p, topo->name);
      }
    }
  uint64_t* stepPair = calloc((size_t)n * (size_t)n, sizeof *stepPair);
  if (!stepPair) {
    relaySimResultFree(out);
    return relaySystemError;
  }
  countTraffic(P, out, stepPair);
  free(stepPair);

  simState S;
  memset(&S, 0, sizeof S);
  S.plan = P;
  S.topo = topo;
  S.out = out;
  S.err = relaySuccess;
  S.p2p = p2p;
  size_t maxParts = 1;
  if (p2p) {
    if (P->nranks > p2p->comm.nRanks) {
      relaySimResultFree(out);
      return relaySetError(NULL, relayInvalidArgument, "sim: the plan has %d ranks, the P2P comm %d",
                           P->nranks, p2p->comm.nRanks);
    }
    maxParts = (size_t)(p2p->parts > 0 ? p2p->parts : p2p->comm.perPeer);
    if (maxParts > (size_t)p2p->comm.pool) maxParts = (size_t)p2p->comm.pool;
    if ((res = countOccupancy(&S)) != relaySuccess) {
      relaySimResultFree(out);
      return res;
    }
  }
  S.rk = calloc((size_t)n, sizeof *S.rk);
  S.mark = calloc((size_t)n, sizeof *S.mark);
  int* done = malloc(((size_t)P->nSends * maxParts + 1) * sizeof *done);
  if (!S.rk || !S.mark || !done ||
      (res = fluidInit(&S.fl, topo, (int)((size_t)P->nSends * maxParts))) != relaySuccess) {
    free(S.rk);
    free(S.mark);
    free(done);
    return res != relaySuccess ? res : relaySystemError;
  }
  for (int r = 0; r < n; r++) enterSteps(&S, r, 0, 0.0);
  int nd;
  while (S.err == relaySuccess && (nd = fluidNext(&S.fl, done)) > 0) {
    double t = S.fl.now;
    for (int i = 0; i < nd; i++) {
      const fluidFlow* fl = &S.fl.flows[done[i]];
      S.rk[fl->src].outstanding--;
      S.rk[fl->dst].outstanding--;
    }
    /* Ranks whose step just ended move on, in rank order (deterministic). */
    for (int i = 0; i < nd; i++) {
      const fluidFlow* fl = &S.fl.flows[done[i]];
      int ends[2] = {fl->src, fl->dst};
      for (int k = 0; k < 2; k++) {
        simRank* R = &S.rk[ends[k]];
        if (R->waiting && R->outstanding == 0) stepTransfersDone(&S, ends[k], t);
      }
    }
  }
  res = S.err;
  double last = 0;
  int lastRank = 0;
  for (int r = 0; r < n && res == relaySuccess; r++) {
    if (S.rk[r].step != P->nSteps) {
      res = relaySetError(NULL, relayInvalidArgument,
                          "sim: rank %d never finished step %d (a transfer with no peer)", r, S.rk[r].step);
      break;
    }
    out->rankEndS[r] = S.rk[r].end;
    if (S.rk[r].end > last) {
      last = S.rk[r].end;
      lastRank = r;
    }
  }
  if (res == relaySuccess) {
    out->totalS = topo->callS + last;
    for (int s = 0; s < P->nSteps; s++) out->stepS[s] = out->stepEndS[s] - (s ? out->stepEndS[s - 1] : 0.0);
    out->boundaries = S.rk[lastRank].boundaries;
    out->launches = S.rk[lastRank].launches;
  }
  out->events = S.fl.events;
  fluidFree(&S.fl);
  free(S.rk);
  free(S.mark);
  free(done);
  return res;
}
