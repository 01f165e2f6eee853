/* Plan IR: the builder, traffic accounting and printing. Items are collected
 * in any (rank, step) order and sorted once into rank programs at finish, so
 * route builders can write the schedule in whatever order reads best. */
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "p2p/p2p.h"

static size_t keyRanksBytes(const planKey* k) {
  return (size_t)k->nGroups * (size_t)k->nActive * sizeof(int);
}
static size_t keyCountsBytes(const planKey* k) { return (size_t)planKeyNumCounts(k) * sizeof(size_t); }

/* The node map travels with the arrays: one int flag (0: one node), then
 * nranks node ids when set. */
static size_t keyNodesBytes(const planKey* k) {
  return sizeof(int) + (k->nodeOf ? (size_t)k->nranks * sizeof(int) : 0);
}

uint64_t planKeyArraysHash(uint64_t h, const planKey* k) {
  int multi = k->nodeOf != NULL;
  h = relayHash64(relayHash64(h, k->ranks, keyRanksBytes(k)), k->counts, keyCountsBytes(k));
  h = relayHash64(h, &multi, sizeof multi);
  return multi ? relayHash64(h, k->nodeOf, (size_t)k->nranks * sizeof(int)) : h;
}

void planKeyHead(const planKey* k, int32_t head[PLAN_KEY_WORDS]) {
  head[0] = (int32_t)k->coll;
  head[1] = k->nranks;
  head[2] = k->nGroups;
  head[3] = k->nActive;
  head[4] = (int32_t)k->dtype;
  head[5] = (int32_t)k->op;
  head[PLAN_KEY_W_ROUTE] = k->route;
  head[PLAN_KEY_W_DEPTH] = k->depth;
  head[8] = k->root;
  head[9] = (int32_t)k->bwTileBytes;
  head[10] = k->bwRing;
  head[11] = k->oneShotGate;
  head[12] = k->carry;
  head[13] = (int32_t)k->twoShotFrom;
}

uint64_t planKeyShapeHash(const planKey* k) {
  int32_t head[PLAN_KEY_WORDS];
  planKeyHead(k, head);
  head[PLAN_KEY_W_ROUTE] = head[PLAN_KEY_W_DEPTH] = 0;
  return planKeyArraysHash(relayHash64(RELAY_HASH_SEED, head, sizeof head), k);
}

uint64_t planKeyHash(const int32_t head[PLAN_KEY_WORDS], const planKey* k) {
  _Static_assert(PLAN_KEY_W_DEPTH == PLAN_KEY_W_ROUTE + 1, "route and depth are hashed as one 8-byte run");
  uint64_t h = k->shapeHash ? k->shapeHash : planKeyShapeHash(k);
  return relayHash64(h, head + PLAN_KEY_W_ROUTE, 2 * sizeof(int32_t));
}

unsigned char* planKeyArraysDup(const planKey* k) {
  const size_t nr = keyRanksBytes(k), nc = keyCountsBytes(k), nn = keyNodesBytes(k);
  unsigned char* a = malloc(nr + nc + nn);
  if (!a) return NULL;
  int multi = k->nodeOf != NULL;
  memcpy(a, k->ranks, nr);
  memcpy(a + nr, k->counts, nc);
  memcpy(a + nr + nc, &multi, sizeof multi);
  if (multi) memcpy(a + nr + nc + sizeof multi, k->nodeOf, nn - sizeof multi);
  return a;
}

int planKeyArraysEqual(const unsigned char* copy, const planKey* k) {
  const size_t nr = keyRanksBytes(k), nc = keyCountsBytes(k);
  int multi = k->nodeOf != NULL, had;
  if (!copy || memcmp(copy, k->ranks, nr) || memcmp(copy + nr, k->counts, nc)) return 0;
  memcpy(&had, copy + nr + nc, sizeof had);
  return had == multi &&
         (!multi || !memcmp(copy + nr + nc + sizeof had, k->nodeOf, (size_t)k->nranks * sizeof(int)));
}

int planKeyMultiNode(const planKey* k) {
  if (!k->nodeOf) return 0;
  for (int r = 1; r < k->nranks; r++)
    if (k->nodeOf[r] != k->nodeOf[0]) return 1;
  return 0;
}

int planActiveGroupOf(const planKey* k, int rank, int* activeIndex) {
  for (int g = 0; g < k->nGroups; g++)
    for (int i = 0; i < k->nActive; i++)
      if (k->ranks[g * k->nActive + i] == rank) {
        if (activeIndex) *activeIndex = i;
        return g;
      }
  if (activeIndex) *activeIndex = -1;
  return -1;
}

/* ---- builder ------------------------------------------------------------ */

enum { ITEM_SEND = 0, ITEM_RECV = 1, ITEM_OP = 2 };

typedef struct {
  int32_t rank, step;
  uint32_t seq; /* insertion order: keeps per-pair order and op order */
  uint8_t type;
  planXfer x;
  planOp op;
  uint32_t srcBase; /* into builder srcs */
} planItem;

struct planBuilder {
  planKey key;
  int* ranksCopy;
  size_t* countsCopy;
  int nSteps;
  int lane;
  int depth; /* 0: key.depth */
  planItem* items;
  size_t nItems, capItems;
  planRef* srcs;
  size_t nSrcs, capSrcs;
  planRank* rank;
  int* nodesCopy;
  planSubColl* subs;
  size_t nSubs, capSubs;
  int32_t* subRanks;
  size_t nSubRanks, capSubRanks;
  int p2pOp; /* every step's (planStep.p2pOp), spliced and sub-collective steps too */
  int oom;
};

/* The P2P operation of a collective's transfers: only scatter has a part
 * rule of its own (src/p2p), but a transport may tell them all apart (shm
 * checks both ends agree). */
static int planP2pOpOf(relayCollective_t coll) {
  switch (coll) {
    case relayCollectiveScatter:
    case relayCollectiveBroadcast: return P2P_OP_SCATTER; /* the root drives its peers */
    case relayCollectiveGather:
    case relayCollectiveReduce: return P2P_OP_GATHER;
    case relayCollectiveAllToAll: return P2P_OP_ALLTOALL;
    default: return P2P_OP_SENDRECV;
  }
}

/* Rooted collectives: member i of the set has counts[i] elements (recv of a
 * scatter, send of a gather); the root holds all blocks back to back in set
 * order (send of a scatter, recv of a gather). The root counts as active in
 * group 0 even outside the set, since it names caller buffers. */
static void planRootedRank(const planKey* k, uint64_t total, int r, planRank* pr) {
  int scatter = relayCollSendsBlocks(k->coll); /* the root sends the blocks */
  pr->activeGroup = planActiveGroupOf(k, r, &pr->activeIndex);
  if (pr->activeGroup >= 0) {
    uint64_t c = k->counts[pr->activeIndex];
    if (scatter) pr->recvElems = c;
    else pr->sendElems = c;
  }
  if (r == k->root) {
    pr->activeGroup = 0;
    if (scatter) pr->sendElems = total;
    else pr->recvElems = total;
  }
}

static uint64_t planRootedTotal(const planKey* k) {
  uint64_t total = 0;
  for (int i = 0; i < k->nActive; i++) total += k->counts[i];
  return total;
}

/* Layout collectives: the buffer contracts of include/relaycc.h. */
static void planLayoutRank(const planKey* k, int r, planRank* pr) {
  pr->activeGroup = planActiveGroupOf(k, r, &pr->activeIndex);
  int g = pr->activeGroup;
  if (g < 0) return;
  uint64_t c = k->counts[g], A = (uint64_t)k->nActive;
  /* The collective's row says which buffer holds A blocks. */
  pr->sendElems = relayCollSendsBlocks(k->coll) ? A * c : c;
  pr->recvElems = relayCollGathers(k->coll) ? A * c : c;
  /* Broadcast reads SEND on the group's root only, reduce writes RECV on the root only (as NCCL's). */
  if (relayCollRooted(k->coll) && pr->activeIndex != k->root) {
    if (relayCollReduces(k->coll)) pr->recvElems = 0;
    else pr->sendElems = 0;
  }
}

void planCallerExtents(const planKey* k, int r, uint64_t* sendElems, uint64_t* recvElems) {
  planRank pr;
  memset(&pr, 0, sizeof pr);
  if (relayCollRankSet(k->coll)) planRootedRank(k, planRootedTotal(k), r, &pr);
  else planLayoutRank(k, r, &pr);
  *sendElems = pr.sendElems;
  *recvElems = pr.recvElems;
}

planBuilder* planBuilderNew(const planKey* key) {
  planBuilder* b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->key = *key;
  size_t nr = (size_t)key->nGroups * (size_t)key->nActive, nc = (size_t)planKeyNumCounts(key);
  b->ranksCopy = malloc(nr * sizeof(int) + 1);
  b->countsCopy = malloc(nc * sizeof(size_t) + 1);
  b->rank = calloc((size_t)key->nranks, sizeof(planRank));
  if (!b->ranksCopy || !b->countsCopy || !b->rank) {
    planBuilderFree(b);
    return NULL;
  }
  memcpy(b->ranksCopy, key->ranks, nr * sizeof(int));
  memcpy(b->countsCopy, key->counts, nc * sizeof(size_t));
  b->key.ranks = b->ranksCopy;
  b->key.counts = b->countsCopy;
  if (key->nodeOf) {
    b->nodesCopy = malloc((size_t)key->nranks * sizeof(int));
    if (!b->nodesCopy) {
      planBuilderFree(b);
      return NULL;
    }
    memcpy(b->nodesCopy, key->nodeOf, (size_t)key->nranks * sizeof(int));
    b->key.nodeOf = b->nodesCopy;
  }
  b->p2pOp = planP2pOpOf(key->coll);
  uint64_t total = relayCollRankSet(key->coll) ? planRootedTotal(&b->key) : 0;
  for (int r = 0; r < key->nranks; r++) {
    if (relayCollRankSet(key->coll)) planRootedRank(&b->key, total, r, &b->rank[r]);
    else planLayoutRank(&b->key, r, &b->rank[r]);
  }
  return b;
}

void planBuilderFree(planBuilder* b) {
  if (!b) return;
  free(b->ranksCopy);
  free(b->countsCopy);
  free(b->items);
  free(b->srcs);
  free(b->rank);
  free(b->nodesCopy);
  free(b->subs);
  free(b->subRanks);
  free(b);
}

const planKey* planBuilderKey(const planBuilder* b) { return &b->key; }

int planAddStep(planBuilder* b) { return b->nSteps++; }

void planSetLane(planBuilder* b, int lane) { b->lane = lane; }

void planSetDepth(planBuilder* b, int depth) { b->depth = depth; }

static planItem* pushItem(planBuilder* b, int rank, int step, int type) {
  if (b->nItems == b->capItems) {
    size_t cap = b->capItems ? 2 * b->capItems : 64;
    planItem* n = realloc(b->items, cap * sizeof *n);
    if (!n) {
      b->oom = 1;
      return NULL;
    }
    b->items = n;
    b->capItems = cap;
  }
  planItem* it = &b->items[b->nItems];
  memset(it, 0, sizeof *it);
  it->rank = rank;
  it->step = step;
  it->seq = (uint32_t)b->nItems;
  it->type = (uint8_t)type;
  b->nItems++;
  return it;
}

static void xfer(planBuilder* b, int type, int rank, int step, int peer, planRef ref, uint64_t count) {
  if (count == 0) return;
  planItem* it = pushItem(b, rank, step, type);
  if (!it) return;
  it->x.peer = peer;
  it->x.ref = ref;
  it->x.count = count;
}

void planSend(planBuilder* b, int rank, int step, int peer, planRef ref, uint64_t count) {
  xfer(b, ITEM_SEND, rank, step, peer, ref, count);
}
void planRecv(planBuilder* b, int rank, int step, int peer, planRef ref, uint64_t count) {
  xfer(b, ITEM_RECV, rank, step, peer, ref, count);
}

static void addOp(planBuilder* b, int kind, int rank, int step, planRef dst, const planRef* srcs, int nsrc,
                  uint64_t count, int divisor) {
  if (count == 0) return;
  if (b->nSrcs + (size_t)nsrc > b->capSrcs) {
    size_t cap = b->capSrcs ? 2 * b->capSrcs : 64;
    while (cap < b->nSrcs + (size_t)nsrc) cap *= 2;
    planRef* n = realloc(b->srcs, cap * sizeof *n);
    if (!n) {
      b->oom = 1;
      return;
    }
    b->srcs = n;
    b->capSrcs = cap;
  }
  planItem* it = pushItem(b, rank, step, ITEM_OP);
  if (!it) return;
  it->op.kind = (uint8_t)kind;
  it->op.lane = (uint8_t)b->lane;
  it->op.nsrc = (uint16_t)nsrc;
  it->op.divisor = divisor;
  it->op.dst = dst;
  it->op.count = count;
  it->srcBase = (uint32_t)b->nSrcs;
  memcpy(b->srcs + b->nSrcs, srcs, (size_t)nsrc * sizeof(planRef));
  b->nSrcs += (size_t)nsrc;
}

void planCopy(planBuilder* b, int rank, int step, planRef dst, planRef src, uint64_t count) {
  addOp(b, PLAN_OP_COPY, rank, step, dst, &src, 1, count, 0);
}

void planReduce(planBuilder* b, int rank, int step, planRef dst, const planRef* srcs, int nsrc,
                uint64_t count, int divisor) {
  if (nsrc == 1 && divisor <= 1) { /* a one-input reduce is a copy */
    planCopy(b, rank, step, dst, srcs[0], count);
    return;
  }
  addOp(b, PLAN_OP_REDUCE, rank, step, dst, srcs, nsrc, count, divisor);
}

/* A collective op (planOpIsCollective) of active `rank` of `group`, its
 * srcStride and gather from the key's collective; NULL when none was added. */
static planOp* addCollectiveOp(planBuilder* b, int kind, int rank, int step, int group, planRef dst,
                               planRef src, uint64_t count, int divisor) {
  size_t before = b->nItems;
  addOp(b, kind, rank, step, dst, &src, 1, count, divisor);
  if (b->nItems == before) return NULL;
  planOp* op = &b->items[b->nItems - 1].op;
  op->group = group;
  op->srcStride = relayCollSendsBlocks(b->key.coll) ? count : 0;
  /* broadcast places (as a gather of the root's block alone), reduce reduces */
  op->gather = (uint8_t)(relayCollGathers(b->key.coll) || b->key.coll == relayCollectiveBroadcast);
  op->root = (int8_t)(relayCollRooted(b->key.coll) ? b->key.root : -1);
  return op;
}

void planOneShot(planBuilder* b, int rank, int step, int group, planRef dst, planRef src, uint64_t count,
                 int divisor, int form) {
  planOp* o = addCollectiveOp(b, PLAN_OP_ONESHOT, rank, step, group, dst, src, count, divisor);
  if (o) o->form = (uint8_t)form;
}

void planBw(planBuilder* b, int rank, int step, int group, planRef dst, planRef src, uint64_t count,
            int divisor, uint32_t tile, int ring, int form) {
  planOp* o = addCollectiveOp(b, PLAN_OP_BW, rank, step, group, dst, src, count, divisor);
  if (!o) return;
  o->tile = tile;
  o->ring = (uint16_t)ring;
  o->form = (uint8_t)form;
}

/* Grows *arr (elements of size es) to hold `need`; 1 when out of memory. */
static int growArray(void** arr, size_t* cap, size_t need, size_t es) {
  if (need <= *cap) return 0;
  size_t c = *cap ? 2 * *cap : 16;
  while (c < need) c *= 2;
  void* n = realloc(*arr, c * es);
  if (!n) return 1;
  *arr = n;
  *cap = c;
  return 0;
}

int planSubCollNew(planBuilder* b, relayCollective_t coll, const int* ranks, int n, uint64_t count) {
  if (n < 1 || growArray((void**)&b->subs, &b->capSubs, b->nSubs + 1, sizeof *b->subs) ||
      growArray((void**)&b->subRanks, &b->capSubRanks, b->nSubRanks + (size_t)n, sizeof *b->subRanks)) {
    b->oom = 1;
    return -1;
  }
  planSubColl* sc = &b->subs[b->nSubs];
  memset(sc, 0, sizeof *sc);
  sc->coll = (int32_t)coll;
  sc->nRanks = n;
  sc->rankBase = (uint32_t)b->nSubRanks;
  sc->count = count;
  for (int i = 0; i < n; i++) b->subRanks[b->nSubRanks++] = ranks[i];
  return (int)b->nSubs++;
}

void planSubCollOp(planBuilder* b, int rank, int step, int sc, planRef dst, planRef src, int divisor) {
  if (sc < 0 || (size_t)sc >= b->nSubs) {
    b->oom = 1; /* a builder bug: refuse the plan */
    return;
  }
  size_t before = b->nItems;
  int lane = b->lane;
  b->lane = 0;
  addOp(b, PLAN_OP_SUBCOLL, rank, step, dst, &src, 1, b->subs[sc].count, divisor);
  b->lane = lane;
  if (b->nItems > before) b->items[b->nItems - 1].op.group = sc;
}

void planSplice(planBuilder* b, const relayPlan* sub, const int* map, int stepBase, const planRef* sendRef,
                const planRef* recvRef) {
  int lane = b->lane;
  b->lane = 0;
  for (int i = 0; i < sub->nranks; i++) {
    int r = map[i];
    for (int s = 0; s < PLAN_MAX_SLOTS; s++)
      if (sub->rank[i].scratchElems[s]) planNeedScratch(b, r, s, sub->rank[i].scratchElems[s]);
    for (int s = 0; s < sub->nSteps; s++) {
      const planStep* st = planRankStep(sub, i, s);
      int t = stepBase + s;
#define SPLICE_REF(ref)                                             \
  ((ref).buf == PLAN_BUF_SEND   ? planRefAdd(sendRef[i], (ref).off) \
   : (ref).buf == PLAN_BUF_RECV ? planRefAdd(recvRef[i], (ref).off) \
                                : (ref))
      for (uint32_t k = 0; k < st->nSend; k++) {
        const planXfer* x = &sub->sends[st->sendBase + k];
        planSend(b, r, t, map[x->peer], SPLICE_REF(x->ref), x->count);
      }
      for (uint32_t k = 0; k < st->nRecv; k++) {
        const planXfer* x = &sub->recvs[st->recvBase + k];
        planRecv(b, r, t, map[x->peer], SPLICE_REF(x->ref), x->count);
      }
      for (uint32_t k = 0; k < st->nOp; k++) {
        const planOp* o = &sub->ops[st->opBase + k];
        planRef srcs[PLAN_MAX_SRCS];
        for (int j = 0; j < o->nsrc; j++) srcs[j] = SPLICE_REF(sub->srcs[o->srcBase + (uint32_t)j]);
        if (o->kind == PLAN_OP_COPY) {
          planCopy(b, r, t, SPLICE_REF(o->dst), srcs[0], o->count);
        } else if (o->kind == PLAN_OP_REDUCE) {
          addOp(b, PLAN_OP_REDUCE, r, t, SPLICE_REF(o->dst), srcs, o->nsrc, o->count, o->divisor);
        } else {
          b->oom = 1; /* one-shot and sub-collective ops name layout state of the sub-plan: not spliced */
        }
      }
#undef SPLICE_REF
    }
  }
  b->lane = lane;
}

void planNeedScratch(planBuilder* b, int rank, int slot, uint64_t elems) {
  if (slot < 0 || slot >= PLAN_MAX_SLOTS || rank < 0 || rank >= b->key.nranks) {
    b->oom = 1; /* a builder bug: refuse the plan */
    return;
  }
  if (b->rank[rank].scratchElems[slot] < elems) b->rank[rank].scratchElems[slot] = elems;
}

static int itemCmp(const void* pa, const void* pb) {
  const planItem* a = pa;
  const planItem* b = pb;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  if (a->type != b->type) return a->type < b->type ? -1 : 1;
  return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

relayPlan* planBuilderFinish(planBuilder* b) {
  if (b->oom) return NULL;
  const planKey* k = &b->key;
  relayPlan* p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->coll = k->coll;
  p->nranks = k->nranks;
  p->nGroups = k->nGroups;
  p->nActive = k->nActive;
  p->dtype = k->dtype;
  p->op = k->op;
  p->route = k->route;
  p->depth = b->depth ? b->depth : k->depth;
  p->elemSize = relayTypeSize(k->dtype);
  p->nSteps = b->nSteps;
  size_t nr = (size_t)k->nGroups * (size_t)k->nActive;
  p->ranks = malloc(nr * sizeof(int) + 1);
  size_t nc = (size_t)planKeyNumCounts(k);
  p->counts = malloc(nc * sizeof(size_t) + 1);
  p->rank = malloc((size_t)k->nranks * sizeof(planRank));
  p->steps = calloc((size_t)k->nranks * (size_t)(b->nSteps ? b->nSteps : 1), sizeof(planStep));
  size_t nS = 0, nR = 0, nO = 0;
  for (size_t i = 0; i < b->nItems; i++) {
    nS += b->items[i].type == ITEM_SEND;
    nR += b->items[i].type == ITEM_RECV;
    nO += b->items[i].type == ITEM_OP;
  }
  p->sends = malloc(nS * sizeof(planXfer) + 1);
  p->recvs = malloc(nR * sizeof(planXfer) + 1);
  p->ops = malloc(nO * sizeof(planOp) + 1);
  p->srcs = malloc(b->nSrcs * sizeof(planRef) + 1);
  p->subs = malloc(b->nSubs * sizeof(planSubColl) + 1);
  p->subRanks = malloc(b->nSubRanks * sizeof(int32_t) + 1);
  if (!p->ranks || !p->counts || !p->rank || !p->steps || !p->sends || !p->recvs || !p->ops || !p->srcs ||
      !p->subs || !p->subRanks) {
    relayPlanFree(p);
    return NULL;
  }
  memcpy(p->ranks, k->ranks, nr * sizeof(int));
  memcpy(p->counts, k->counts, nc * sizeof(size_t));
  p->root = k->root;
  p->carried = k->route == relayRouteOneShot && planKeyCarried(k);
  memcpy(p->rank, b->rank, (size_t)k->nranks * sizeof(planRank));
  if (b->nSrcs) memcpy(p->srcs, b->srcs, b->nSrcs * sizeof(planRef));
  p->nSrcs = (uint32_t)b->nSrcs;
  if (b->nSubs) memcpy(p->subs, b->subs, b->nSubs * sizeof(planSubColl));
  if (b->nSubRanks) memcpy(p->subRanks, b->subRanks, b->nSubRanks * sizeof(int32_t));
  p->nSubs = (uint32_t)b->nSubs;
  p->nSubRanks = (uint32_t)b->nSubRanks;

  if (b->nItems)
    qsort(b->items, b->nItems, sizeof(planItem),
          itemCmp); /* no qsort of NULL: an empty plan (all counts 0) */
  for (size_t i = 0; i < b->nItems; i++) {
    const planItem* it = &b->items[i];
    planStep* st = &p->steps[(size_t)it->rank * (size_t)p->nSteps + (size_t)it->step];
    if (it->type == ITEM_SEND) {
      if (st->nSend == 0) st->sendBase = p->nSends;
      p->sends[p->nSends++] = it->x;
      st->nSend++;
    } else if (it->type == ITEM_RECV) {
      if (st->nRecv == 0) st->recvBase = p->nRecvs;
      p->recvs[p->nRecvs++] = it->x;
      st->nRecv++;
    } else {
      if (st->nOp == 0) st->opBase = p->nOps;
      planOp op = it->op;
      op.srcBase = it->srcBase;
      p->ops[p->nOps++] = op;
      st->nOp++;
    }
  }
  for (size_t i = 0; i < (size_t)k->nranks * (size_t)p->nSteps; i++) {
    p->steps[i].p2pOp = (uint32_t)b->p2pOp;
    uint32_t x = p->steps[i].nSend + p->steps[i].nRecv;
    if (x > p->maxXfersPerStep) p->maxXfersPerStep = x;
  }
  return p;
}

void relayPlanFree(relayPlan* p) {
  if (!p) return;
  free(p->ranks);
  free(p->counts);
  free(p->rank);
  free(p->steps);
  free(p->sends);
  free(p->recvs);
  free(p->ops);
  free(p->srcs);
  free(p->subs);
  free(p->subRanks);
  free(p);
}

/* ---- traffic ------------------------------------------------------------ */

void relayPlanStepTraffic(const relayPlan* p, int step, uint64_t* out) {
  int n = p->nranks;
  memset(out, 0, (size_t)n * (size_t)n * sizeof(uint64_t));
  for (int r = 0; r < n; r++) {
    const planStep* st = planRankStep(p, r, step);
    for (uint32_t i = 0; i < st->nSend; i++) {
      const planXfer* x = &p->sends[st->sendBase + i];
      if (x->peer != r) out[(size_t)r * (size_t)n + (size_t)x->peer] += x->count * p->elemSize;
    }
  }
}

uint64_t relayPlanCriticalPathBytes(const relayPlan* p) {
  size_t n = (size_t)p->nranks;
  uint64_t* t = malloc(n * n * sizeof(uint64_t));
  if (!t) return 0;
  uint64_t total = 0;
  for (int s = 0; s < p->nSteps; s++) {
    relayPlanStepTraffic(p, s, t);
    uint64_t mx = 0;
    for (size_t i = 0; i < n * n; i++)
      if (t[i] > mx) mx = t[i];
    total += mx;
  }
  free(t);
  return total;
}

/* ---- printing ----------------------------------------------------------- */

static void printRef(FILE* f, planRef r) {
  if (r.buf == PLAN_BUF_SEND) fprintf(f, "send[%llu", (unsigned long long)r.off);
  else if (r.buf == PLAN_BUF_RECV) fprintf(f, "recv[%llu", (unsigned long long)r.off);
  else fprintf(f, "scratch%u[%llu", r.slot, (unsigned long long)r.off);
}

void relayPlanPrint(const relayPlan* p, int rank, void* file) {
  FILE* f = file ? (FILE*)file : stdout;
  fprintf(f, "plan %s route=%s depth=%d nranks=%d nGroups=%d A=%d dtype=%s op=%s steps=%d\n",
          relayCollName(p->coll), relayRouteName(p->route), p->depth, p->nranks, p->nGroups, p->nActive,
          relayTypeName(p->dtype), relayOpName(p->op), p->nSteps);
  if (relayCollRooted(p->coll)) fprintf(f, "root %d\n", p->root);
  for (int r = 0; r < p->nranks; r++) {
    if (rank >= 0 && r != rank) continue;
    const planRank* pr = &p->rank[r];
    fprintf(f, "rank %d: %s", r, pr->activeGroup >= 0 ? "active" : "helper");
    if (pr->activeGroup >= 0) fprintf(f, " group %d index %d", pr->activeGroup, pr->activeIndex);
    for (int s = 0; s < PLAN_MAX_SLOTS; s++)
      if (pr->scratchElems[s]) fprintf(f, " scratch%d=%llu", s, (unsigned long long)pr->scratchElems[s]);
    fprintf(f, "\n");
    for (int s = 0; s < p->nSteps; s++) {
      const planStep* st = planRankStep(p, r, s);
      if (!st->nSend && !st->nRecv && !st->nOp) continue;
      fprintf(f, "  step %d\n", s);
      for (uint32_t i = 0; i < st->nSend; i++) {
        const planXfer* x = &p->sends[st->sendBase + i];
        fprintf(f, "    send -> %d  ", x->peer);
        printRef(f, x->ref);
        fprintf(f, " +%llu]\n", (unsigned long long)x->count);
      }
      for (uint32_t i = 0; i < st->nRecv; i++) {
        const planXfer* x = &p->recvs[st->recvBase + i];
        fprintf(f, "    recv <- %d  ", x->peer);
        printRef(f, x->ref);
        fprintf(f, " +%llu]\n", (unsigned long long)x->count);
      }
      for (uint32_t i = 0; i < st->nOp; i++) {
        const planOp* o = &p->ops[st->opBase + i];
        if (o->kind == PLAN_OP_SUBCOLL) {
          const planSubColl* sc = &p->subs[o->group];
          fprintf(f, "    subcoll %s of %llu among", relayCollName((relayCollective_t)sc->coll),
                  (unsigned long long)sc->count);
          for (int k = 0; k < sc->nRanks; k++)
            fprintf(f, "%s%d", k ? "," : " ", p->subRanks[sc->rankBase + (uint32_t)k]);
          fprintf(f, ": ");
          printRef(f, o->dst);
          fprintf(f, "] <- ");
          printRef(f, p->srcs[o->srcBase]);
          fprintf(f, "]%s\n", o->divisor > 1 ? " (divided)" : "");
          continue;
        }
        fprintf(f, "    %s%s ",
                o->kind == PLAN_OP_COPY      ? "copy"
                : o->kind == PLAN_OP_ONESHOT ? "oneshot"
                : o->kind == PLAN_OP_BW      ? "bw"
                                             : "reduce",
                o->lane ? "@side" : "");
        if (o->kind == PLAN_OP_BW)
          fprintf(f, "(%s tile %u ring %u) ", o->form == PLAN_BW_TWOSHOT ? "two-shot" : "push", o->tile,
                  o->ring);
        else if (o->kind == PLAN_OP_ONESHOT && o->form == PLAN_BW_TWOSHOT) fprintf(f, "(two-shot) ");
        printRef(f, o->dst);
        fprintf(f, " +%llu] <-", (unsigned long long)o->count);
        for (int k = 0; k < o->nsrc; k++) {
          fprintf(f, " ");
          printRef(f, p->srcs[o->srcBase + (uint32_t)k]);
          fprintf(f, "]");
        }
        if (o->divisor > 1) fprintf(f, " /%d", o->divisor);
        fprintf(f, "\n");
      }
    }
  }
}
