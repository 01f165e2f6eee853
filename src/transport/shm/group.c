/*
 * The shm transport's groups of sends and receives: the hot path, split from
 * the rendezvous and the waits so that it reads as one protocol (task
 * headers, per-pair rings and channels).
 *
 * Data goes through the P2P channel layer (src/p2p): a transfer (a "task")
 * to one peer is split into parts, part p on channel c(p) of a comm-wide
 * pool, both ends computing the same split alone (p2pTaskSplit with the
 * group's operation: the group call's p2pOp). The sender writes the task's header
 * {magic, src, step, index, callSeq, bytes, op, parts, want, need} on the
 * pair's control ring and each non-empty part, behind a part header, on the
 * data ring of its channel; each (pair, channel) ring has its own cursors, so
 * the parts of one task progress independently. The receiver checks a task's
 * header before it reads any of its parts -- counts that differ between ranks
 * become relayInvalidUsage instead of corruption or a hang -- and only then
 * waits on the task's channels, so ends that disagree on the channels never
 * wait on a ring the other never writes.
 *
 * Connections are lazy, per (peer, direction, channel), as in NCCL: a task
 * connects only the channels its parts use and that are not connected yet
 * ("need"). The sender connects its side (a flag in the ring's control
 * block), then ships (want, need) in the header; the receiver compares both
 * with its own (p2pConnAgree) and, when they agree, connects its side; a
 * mismatch is relayInvalidUsage naming the channels, never a wait.
 */
#include "transport/shm/shm_transport.h"

#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "comm/params.h"
#include "topo/topo.h"

#define SHM_TASK_MAGIC 0x54534b31u /* "TSK1": a task header on a control ring */
#define SHM_PART_MAGIC 0x50525431u /* "PRT1": a part header on a channel's ring */

/* 64 bytes on the control ring per transfer (task). */
typedef struct {
  uint32_t magic;
  int32_t src;
  int32_t step;
  uint32_t index; /* k-th transfer from src to this rank in the group */
  uint64_t callSeq;
  uint64_t bytes;
  uint16_t op; /* p2pOp the sender split it with */
  /* 1 + the rank that passed a bad buffer in this call and runs it through
   * scratch, as far as the sender knows (comm->callMark; 0: none; ranks <=
   * SHM_MAX_RANKS fit). A rank that receives it carries it on in its own
   * later sends of the call, so every rank whose data depends on that rank's,
   * directly or through a relay, returns the error. */
  uint16_t mark;
  uint32_t nParts;
  uint64_t want; /* the channels its parts use */
  uint64_t need; /* of those, the ones the sender connected for it */
  /* The digest of the sender's call shape (comm->callShape): counts that
   * differ in a block this pair does not move (a scatter root's offsets)
   * still differ here, so check mode 0 gives an error, not misplaced data. */
  uint64_t shape;
} shmTaskHdr;
_Static_assert(sizeof(shmTaskHdr) == 64, "task header is 64 bytes");
#define SHM_THDR ((uint64_t)sizeof(shmTaskHdr))

static void shmRingPut(unsigned char* d, uint64_t R, uint64_t at, const void* src, size_t n) {
  size_t off = (size_t)(at % R), first = (size_t)R - off;
  if (first > n) first = n;
  memcpy(d + off, src, first);
  if (n > first) memcpy(d, (const unsigned char*)src + first, n - first);
}

static void shmRingGet(const unsigned char* d, uint64_t R, uint64_t at, void* dst, size_t n) {
  size_t off = (size_t)(at % R), first = (size_t)R - off;
  if (first > n) first = n;
  memcpy(dst, d + off, first);
  if (n > first) memcpy((unsigned char*)dst + first, d, n - first);
}

/* ------------------------------------------------------------------ group */

/* A tagged transfer's header (comm->xferTags, transport.h) carries its tag where a plan's carries the
 * call: callSeq the tag's sequence number, step SHM_STEP_TAGGED - dtype (a plan's steps are >= 0), or
 * SHM_STEP_REJECTED when the sender rejected it, shape its count. */
#define SHM_STEP_TAGGED (-2)
#define SHM_STEP_REJECTED (-1000)
static int32_t shmTagStep(const relayXferTag* t) {
  return (t->flags & RELAY_TAG_REJECT) ? SHM_STEP_REJECTED : SHM_STEP_TAGGED - t->dtype;
}
/* The sequence number a transfer's headers carry: its tag's, or the call's. */
static uint64_t shmXferSeq(const struct relayComm* comm, const relayXferTag* tags, int i) {
  return tags ? tags[i].seq : comm->callSeq;
}
/* The index a transfer's headers carry: a plan's transfer, its position among the group's transfers of
 * the pair (both ends run the same plan step); a tagged one, its tag's sequence number, which both ends
 * count per pair whatever their groups: NCCL matches a pair's transfers by order, not by group, so one
 * end may send two in one group while the other receives them in two calls. */
static uint32_t shmXferIndex(const relayXferTag* tags, int i, int pos) {
  return tags ? (uint32_t)tags[i].seq : (uint32_t)pos;
}

/* The P2P channel layer's comm-wide facts, built at the first group: by then
 * the comm's topology is loaded, whose direct links per local pair set the
 * parts per peer (the cpu preset has none: 2 parts, p2pWantedLocal(0)). The
 * pool is the segment's channel count, rank 0's, so every rank has it. */
relayResult_t shmP2pInit(struct relayComm* comm, shmState* st) {
  if (st->p2pReady) return relaySuccess;
  /* The comm's node map (src/core/nodes.c: RELAYCC_NODE_ID, or the test hook
   * RELAYCC_SHM_NODES), the same on every rank, so both ends of a pair split
   * alike. The layer's part rules assume equal node-major nodes; any other
   * map gets the one-node rules. */
  int n = comm->nranks;
  int nodes = relayNodesRegular(comm->nodeOf, n, comm->nNodes) ? comm->nNodes : 1, G = n / nodes;
  p2pTopoDesc d;
  memset(&d, 0, sizeof d);
  d.nNodes = nodes;
  d.localRanks = G;
  d.netsByBw = 1;
  d.userPerNetPeer = (int)relayParamInt(comm, RELAY_P_NCHANNELS_PER_NET_PEER);
  d.nChannels = st->channels;
  d.poolCap = st->channels;
  int* links = NULL;
  const struct relayTopo* t = comm->topo;
  if (t) {
    /* Local pair (i, j) of every node is comm ranks i, j of node 0; ranks
     * beyond the topology's GPUs have no direct links. */
    links = calloc((size_t)G * (size_t)G, sizeof *links);
    if (!links) return relaySetError(comm, relaySystemError, "out of memory for the p2p layer");
    for (int i = 0; i < G && i < t->nGPUs; i++)
      for (int j = 0; j < G && j < t->nGPUs; j++)
        if (i != j) links[i * G + j] = t->linkCount[i * t->nGPUs + j];
    d.localLinks = links;
  }
  char err[256];
  relayResult_t res = p2pCommFromTopo(&d, &st->p2p, err, sizeof err);
  free(links);
  if (res != relaySuccess) return relaySetError(comm, relayInternalError, "the p2p channel layer: %s", err);
  st->connStore = calloc((size_t)n * 2, sizeof *st->connStore);
  if (!st->connStore) return relaySetError(comm, relaySystemError, "out of memory for the p2p layer");
  p2pConnInit(&st->conn, n, st->connStore);
  st->p2pReady = 1;
  return relaySuccess;
}

static relayResult_t shmGrowOrder(struct relayComm* comm, shmState* st, int need) {
  if (need <= st->orderCap) return relaySuccess;
  int cap = st->orderCap ? st->orderCap : 64;
  while (cap < need) cap *= 2;
  size_t P = (size_t)st->p2p.perPeer, c = (size_t)cap;
  int ok = 1;
#define SHM_GROW(field, count)                                  \
  do {                                                          \
    void* g_ = realloc(st->field, (count) * sizeof *st->field); \
    if (g_) st->field = g_;                                     \
    else ok = 0;                                                \
  } while (0)
  SHM_GROW(sorder, c);
  SHM_GROW(rorder, c);
  SHM_GROW(spart, c * P);
  SHM_GROW(rpart, c * P);
  SHM_GROW(snpart, c);
  SHM_GROW(rnpart, c);
  SHM_GROW(swant, c);
  SHM_GROW(sneed, c);
  SHM_GROW(rwant, c);
  SHM_GROW(rdrain, c);
#undef SHM_GROW
  if (!ok) return relaySetError(comm, relaySystemError, "out of memory for %d transfer descriptors", need);
  st->orderCap = cap;
  return relaySuccess;
}

/* Group transfers by peer (stable: per-peer order is the caller's order) and
 * list the remote peers that have any. */
static void shmBucket(shmState* st, int n, const relayXferDesc* x, int nx, int* order, shmPeerQ* q, int* pend,
                      int* npend, int me) {
  int* cnt = st->tmp;
  memset(cnt, 0, (size_t)n * sizeof(int));
  for (int i = 0; i < nx; i++) cnt[x[i].peer]++;
  int at = 0;
  *npend = 0;
  for (int p = 0; p < n; p++) {
    q[p].beg = q[p].ctl = at;
    at += cnt[p];
    q[p].end = at;
    q[p].chanMask = 0;
    cnt[p] = q[p].beg;
    if (p != me && q[p].end > q[p].beg) pend[(*npend)++] = p;
  }
  for (int i = 0; i < nx; i++) order[cnt[x[i].peer]++] = i;
}

/* The first task at or after order index `from` with a non-empty part on
 * channel c (a task has at most one part per channel); end when none. */
static int shmChanNext(const shmState* st, const int* order, const int* npart, const p2pPart* parts, int c,
                       int from, int end, int* part) {
  size_t P = (size_t)st->p2p.perPeer;
  for (int t = from; t < end; t++) {
    int i = order[t];
    for (int k = 0; k < npart[i]; k++) {
      const p2pPart* pp = &parts[(size_t)i * P + (size_t)k];
      if (pp->channel == c && pp->len) {
        *part = k;
        return t;
      }
    }
  }
  return end;
}

/* Split every task to or from peer p (both ends call p2pTaskSplit with the
 * same operation, sender and receiver, so they get the same parts), and set
 * up one queue per channel that carries any. */
static void shmSplitPeer(shmState* st, int op, int me, int p, int isSend, const relayXferDesc* x) {
  shmPeerQ* q = isSend ? &st->sq[p] : &st->rq[p];
  const int* order = isSend ? st->sorder : st->rorder;
  p2pPart* parts = isSend ? st->spart : st->rpart;
  int* npart = isSend ? st->snpart : st->rnpart;
  uint64_t* want = isSend ? st->swant : st->rwant;
  size_t P = (size_t)st->p2p.perPeer;
  for (int t = q->beg; t < q->end; t++) {
    int i = order[t];
    p2pPart* pp = &parts[(size_t)i * P];
    int np = p2pTaskSplit(&st->p2p, (p2pOp)op, isSend ? me : p, isSend ? p : me, x[i].bytes, 0, pp);
    npart[i] = np;
    /* The channels of all parts, empty ones too (connections do not depend
     * on sizes): p2pTaskMask, without computing the base again. */
    uint64_t w = 0;
    for (int k = 0; k < np; k++) {
      w |= 1ull << pp[k].channel;
      if (pp[k].len) q->chanMask |= 1ull << pp[k].channel;
    }
    want[i] = w;
  }
  shmChanQ* cq =
      isSend ? &st->sch[(size_t)p * (size_t)st->channels] : &st->rch[(size_t)p * (size_t)st->channels];
  for (int c = 0; c < st->channels; c++) {
    if (!(q->chanMask & (1ull << c))) continue;
    cq[c].cur = shmChanNext(st, order, npart, parts, c, q->beg, q->end, &cq[c].part);
    cq[c].pos = 0;
  }
}

/* Connect our side of the channels in `need` with peer p (dir: which side we
 * are): a flag in each channel ring's control block, set once. A flag
 * already set means the two ends' tables diverged from the segment. */
static relayResult_t shmConnect(struct relayComm* comm, shmState* st, int p, p2pDir dir, uint64_t need) {
  int n = comm->nranks, me = comm->rank;
  uint32_t bit = dir == P2P_DIR_SEND ? SHM_CONN_SEND : SHM_CONN_RECV;
  for (int c = 0; c < st->channels; c++) {
    if (!(need & (1ull << c))) continue;
    shmRingCtl* rc = dir == P2P_DIR_SEND ? shmCtl(st, n, me, p, 1 + c) : shmCtl(st, n, p, me, 1 + c);
    uint32_t was = atomic_fetch_or_explicit(&rc->conn, bit, memory_order_relaxed);
    if (was & bit)
      return relaySetError(comm, relayInternalError, "channel %d %s rank %d was connected twice", c,
                           dir == P2P_DIR_SEND ? "to" : "from", p);
    /* The sender connects first and publishes the task header after it (a
     * release on the control ring's head): the receiver must see its flag. */
    if (dir == P2P_DIR_RECV && !(was & SHM_CONN_SEND))
      return relaySetError(comm, relayInternalError, "rank %d announced channel %d without connecting it", p,
                           c);
  }
  p2pConnCommit(&st->conn, p, dir, need);
  st->connected[dir] += (uint64_t)__builtin_popcountll(need);
  return relaySuccess;
}

/* Sender: the tasks' wants and needs, in per-peer order (the receiver
 * computes its needs in the same order as it checks the headers), and our
 * side of the channels connected now. */
static relayResult_t shmSendConnect(struct relayComm* comm, shmState* st, int p) {
  shmPeerQ* q = &st->sq[p];
  for (int t = q->beg; t < q->end; t++) {
    int i = st->sorder[t];
    uint64_t need = p2pConnNeed(&st->conn, p, P2P_DIR_SEND, st->swant[i]);
    st->sneed[i] = need;
    if (need) RELAY_CHECK(shmConnect(comm, st, p, P2P_DIR_SEND, need));
  }
  return relaySuccess;
}

/* Stream what fits of one ring: header bytes from hdr, then payload bytes
 * from data, resuming at *pos. Returns bytes moved; publishes (and wakes the
 * peer) every chunk and at the end. */
static uint64_t shmPutStream(shmState* st, int p, size_t cur, shmRingCtl* c, unsigned char* d, uint64_t R,
                             const void* hdr, uint64_t hdrBytes, const unsigned char* data, uint64_t total,
                             uint64_t* pos, uint64_t* sincePublish) {
  uint64_t head = st->sendHead[cur], moved = 0;
  while (*pos < total) {
    uint64_t room = R - (head - st->sendTailSeen[cur]);
    if (room < total - *pos) {
      st->sendTailSeen[cur] = atomic_load_explicit(&c->tail, memory_order_acquire);
      room = R - (head - st->sendTailSeen[cur]);
    }
    if (room == 0) break;
    uint64_t k;
    if (*pos < hdrBytes) {
      k = hdrBytes - *pos;
      if (k > room) k = room;
      shmRingPut(d, R, head, (const unsigned char*)hdr + *pos, (size_t)k);
    } else {
      k = total - *pos;
      if (k > room) k = room;
      if (k > st->chunk) k = st->chunk;
      shmRingPut(d, R, head, data + (*pos - hdrBytes), (size_t)k);
    }
    head += k;
    *pos += k;
    moved += k;
    *sincePublish += k;
    if (*sincePublish >= st->chunk) {
      atomic_store_explicit(&c->head, head, memory_order_release);
      shmWake(&st->slots[p]);
      *sincePublish = 0;
    }
  }
  st->sendHead[cur] = head;
  return moved;
}

/* Everything that fits toward peer p: task headers on the control ring, then
 * each channel's parts (a part only after its task's header). */
static uint64_t shmPush(struct relayComm* comm, shmState* st, int p, const relayXferDesc* sends) {
  int n = comm->nranks, me = comm->rank;
  shmPeerQ* q = &st->sq[p];
  uint64_t moved = 0;
  if (q->ctl < q->end) {
    size_t cur = shmCur(st, p, 0);
    shmRingCtl* c = shmCtl(st, n, me, p, 0);
    unsigned char* d = shmData(st, n, me, p, 0);
    uint64_t head = st->sendHead[cur];
    while (q->ctl < q->end) {
      if (SHM_CTL_RING - (head - st->sendTailSeen[cur]) < SHM_THDR) {
        st->sendTailSeen[cur] = atomic_load_explicit(&c->tail, memory_order_acquire);
        if (SHM_CTL_RING - (head - st->sendTailSeen[cur]) < SHM_THDR) break;
      }
      int i = st->sorder[q->ctl];
      const relayXferTag* tag = st->stag ? &st->stag[i] : NULL;
      shmTaskHdr h = {SHM_TASK_MAGIC,
                      me,
                      tag ? shmTagStep(tag) : comm->curStep,
                      shmXferIndex(st->stag, i, q->ctl - q->beg),
                      shmXferSeq(comm, st->stag, i),
                      sends[i].bytes,
                      (uint16_t)st->groupOp,
                      (uint16_t)(comm->callMark + 1),
                      (uint32_t)st->snpart[i],
                      st->swant[i],
                      st->sneed[i],
                      tag ? tag->count : comm->callShape};
      shmRingPut(d, SHM_CTL_RING, head, &h, sizeof h);
      head += SHM_THDR;
      moved += SHM_THDR;
      q->ctl++;
    }
    if (head != st->sendHead[cur]) {
      st->sendHead[cur] = head;
      atomic_store_explicit(&c->head, head, memory_order_release);
      shmWake(&st->slots[p]);
    }
  }
  size_t P = (size_t)st->p2p.perPeer;
  shmChanQ* cqs = &st->sch[(size_t)p * (size_t)st->channels];
  for (uint64_t m = q->chanMask; m; m &= m - 1) {
    int ch = __builtin_ctzll(m);
    shmChanQ* cq = &cqs[ch];
    size_t cur = shmCur(st, p, 1 + ch);
    shmRingCtl* c = shmCtl(st, n, me, p, 1 + ch);
    unsigned char* d = shmData(st, n, me, p, 1 + ch);
    uint64_t sincePublish = 0;
    while (cq->cur < q->ctl) {
      int i = st->sorder[cq->cur];
      const p2pPart* pp = &st->spart[(size_t)i * P + (size_t)cq->part];
      shmPartHdr h = {SHM_PART_MAGIC,
                      me,
                      shmXferIndex(st->stag, i, cq->cur - q->beg),
                      (uint32_t)cq->part,
                      shmXferSeq(comm, st->stag, i),
                      pp->len};
      moved += shmPutStream(st, p, cur, c, d, st->chanBytes, &h, SHM_PHDR,
                            (const unsigned char*)sends[i].ptr + pp->off, SHM_PHDR + pp->len, &cq->pos,
                            &sincePublish);
      if (cq->pos < SHM_PHDR + pp->len) break; /* the ring is full */
      cq->pos = 0;
      cq->cur = shmChanNext(st, st->sorder, st->snpart, st->spart, ch, cq->cur + 1, q->end, &cq->part);
    }
    if (sincePublish) {
      atomic_store_explicit(&c->head, st->sendHead[cur], memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (cq->cur == q->end) q->chanMask &= ~(1ull << ch);
  }
  return moved;
}

/* The header of task k from p disagrees with our transfer x: say how. */
static relayResult_t shmHdrMismatch(struct relayComm* comm, int p, const shmTaskHdr* h,
                                    const relayXferDesc* x, int index, int count) {
  if (h->magic != SHM_TASK_MAGIC || h->src != p)
    return relaySetError(comm, relayInternalError, "corrupt stream from rank %d (magic %#x, src %d)", p,
                         h->magic, h->src);
  /* Before the index: a point-to-point transfer's header carries its pair sequence number there
   * (shmXferIndex), so a pair that orders a transfer and a collective differently is this error. */
  if (h->callSeq != comm->callSeq || h->step != comm->curStep)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d sent a transfer from step %d of call #%llu: ranks disagree on the sequence "
                         "of calls or on their plans",
                         p, h->step, (unsigned long long)(h->callSeq & ~(RELAY_TAG_PAIR | RELAY_TAG_ACK)));
  if (h->index != (uint32_t)index)
    return relaySetError(comm, relayInternalError, "corrupt stream from rank %d (task %u of %d expected %d)",
                         p, h->index, count, index);
  if (h->shape != comm->callShape)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d's call has another shape (digest %016llx, this rank's %016llx): ranks "
                         "disagree on the collective, layout, counts, datatype, op or root",
                         p, (unsigned long long)h->shape, (unsigned long long)comm->callShape);
  if (h->bytes != x->bytes)
    return relaySetError(comm, relayInvalidUsage,
                         "rank %d sends %llu bytes, this rank expects %llu (transfer %d of %d from rank %d): "
                         "counts differ between ranks",
                         p, (unsigned long long)h->bytes, (unsigned long long)x->bytes, index + 1, count, p);
  return relaySetError(comm, relayInvalidUsage,
                       "rank %d sends a %s transfer, this rank expects %s (transfer %d of %d from rank %d): "
                       "ranks disagree on the collective",
                       p, p2pOpName((p2pOp)h->op), p2pOpName((p2pOp)shmStateOf(comm)->groupOp), index + 1,
                       count, p);
}

/* Do the fixed fields of task k's header from p match our transfer x? */
static int shmHdrOk(struct relayComm* comm, int p, const shmTaskHdr* h, const relayXferDesc* x, int index) {
  return h->magic == SHM_TASK_MAGIC && h->src == p && h->index == (uint32_t)index &&
         h->callSeq == comm->callSeq && h->step == comm->curStep && h->bytes == x->bytes &&
         h->op == (uint16_t)shmStateOf(comm)->groupOp && h->shape == comm->callShape;
}

/* Task t's header from p matched our transfer: check that both ends split it
 * onto the same channels and have the same ones still to connect, then
 * connect our side. Nothing of its data is read before this passes. */
static relayResult_t shmTaskAccept(struct relayComm* comm, shmState* st, int p, const shmTaskHdr* h, int t) {
  shmPeerQ* q = &st->rq[p];
  int i = st->rorder[t], index = t - q->beg, count = q->end - q->beg;
  char agree[640];
  uint64_t want = st->rwant[i];
  if (h->mark && comm->callMark < 0 && h->mark <= comm->nranks) comm->callMark = (int)h->mark - 1;
  const char* what = NULL;
  if (p2pConnAgree(h->want, want, p, comm->rank, agree, sizeof agree)) {
    what = "the channels its parts use";
  } else {
    uint64_t need = p2pConnNeed(&st->conn, p, P2P_DIR_RECV, want);
    if (p2pConnAgree(h->need, need, p, comm->rank, agree, sizeof agree))
      what = "the channels still to connect";
    else if (need) RELAY_CHECK(shmConnect(comm, st, p, P2P_DIR_RECV, need));
  }
  if (what)
    return relaySetError(comm, relayInvalidUsage,
                         "transfer %d of %d from rank %d (%s, %u parts sent, %d expected): %s: %s", index + 1,
                         count, p, p2pOpName((p2pOp)h->op), h->nParts, st->rnpart[i], what, agree);
  return relaySuccess;
}

static const char* shmTypeName(int32_t dt) {
  return (unsigned)dt < relayNumTypes ? relayTypeName((relayDataType_t)dt) : "?";
}

/* Split task t from p again for the sender's bytes, its data to go to a buffer of our own (drained):
 * the sender split it with its bytes, and both ends must walk the same parts. Its header is not yet
 * accepted, so no channel has started on it. */
static relayResult_t shmDrainTask(struct relayComm* comm, shmState* st, int p, int t, uint64_t bytes) {
  shmPeerQ* q = &st->rq[p];
  int i = st->rorder[t];
  size_t P = (size_t)st->p2p.perPeer;
  st->rdrain[i] = malloc(bytes ? (size_t)bytes : 1);
  if (!st->rdrain[i])
    return relaySetError(comm, relaySystemError, "out of memory draining %llu bytes from rank %d",
                         (unsigned long long)bytes, p);
  p2pPart* pp = &st->rpart[(size_t)i * P];
  int np = p2pTaskSplit(&st->p2p, (p2pOp)st->groupOp, p, comm->rank, bytes, 0, pp);
  uint64_t before = q->chanMask, w = 0;
  st->rnpart[i] = np;
  for (int k = 0; k < np; k++) {
    w |= 1ull << pp[k].channel;
    if (pp[k].len) q->chanMask |= 1ull << pp[k].channel;
  }
  st->rwant[i] = w;
  shmChanQ* cq = &st->rch[(size_t)p * (size_t)st->channels];
  for (int c = 0; c < st->channels; c++) {
    if (!(q->chanMask & (1ull << c)) || ((before & (1ull << c)) && cq[c].cur < t)) continue;
    cq[c].cur = shmChanNext(st, st->rorder, st->rnpart, st->rpart, c, t, q->end, &cq[c].part);
    cq[c].pos = 0;
  }
  return relaySuccess;
}

/* A tagged transfer's header from p (task t, our receive x): the same sequence number, or the pair
 * orders its transfers differently (an error that fails the comm: the rings are out of step); then the
 * same count and datatype, else the transfer is drained (nothing written to x, the pair kept in step)
 * and its error kept for the group's end (st->tagRes). */
static relayResult_t shmTaggedHdr(struct relayComm* comm, shmState* st, int p, const shmTaskHdr* h,
                                  const relayXferDesc* x, int t) {
  int i = st->rorder[t];
  relayXferTag* tag = &st->rtag[i];
  /* The index is the sequence number here (shmXferIndex): the checks below say how they differ. */
  if (h->magic != SHM_TASK_MAGIC || h->src != p)
    return relaySetError(comm, relayInternalError, "corrupt stream from rank %d (magic %#x, src %d)", p,
                         h->magic, h->src);
  int pair = (tag->seq & RELAY_TAG_PAIR) != 0, ack = (tag->seq & RELAY_TAG_ACK) != 0;
  const char* kind = pair ? "point-to-point transfer" : "all-to-all-v block";
  unsigned long long seq = (unsigned long long)(tag->seq & ~(RELAY_TAG_PAIR | RELAY_TAG_ACK));
  if (h->callSeq != tag->seq || (h->step > SHM_STEP_TAGGED && h->step != SHM_STEP_REJECTED)) {
    if (h->step >= 0 || !(h->callSeq & RELAY_TAG_PAIR))
      return relaySetError(comm, relayInvalidUsage,
                           "rank %d sent a transfer of call #%llu where this rank expects its %s #%llu: the "
                           "pair orders its point-to-point transfers and collectives differently",
                           p, (unsigned long long)(h->callSeq & ~(RELAY_TAG_PAIR | RELAY_TAG_ACK)), kind,
                           seq);
    return relaySetError(
        comm, relayInvalidUsage,
        "rank %d sent its point-to-point transfer%s #%llu where this rank expects %s%s #%llu: "
        "the pair orders its transfers differently",
        p, (h->callSeq & RELAY_TAG_ACK) ? "'s acknowledgement" : "",
        (unsigned long long)(h->callSeq & ~(RELAY_TAG_PAIR | RELAY_TAG_ACK)),
        ack ? "the acknowledgement of its " : "", kind, seq);
  }
  int32_t dt = SHM_STEP_TAGGED - h->step;
  relayResult_t err = relaySuccess;
  if (tag->flags & RELAY_TAG_DRAIN) {
    err = relayInvalidArgument; /* this rank's own rejection: core keeps its text */
  } else if (h->step == SHM_STEP_REJECTED) {
    err = relayRemoteError;
    if (st->tagRes == relaySuccess)
      relaySetError(
          comm, err,
          ack ? "rank %d rejected its %s #%llu from rank %d (its error says why): nothing was sent"
              : "rank %d rejected its %s #%llu to rank %d (its error says why): nothing was written",
          p, kind, seq, comm->rank);
  } else if (h->shape != tag->count || dt != tag->dtype || h->bytes != x->bytes) {
    err = relayInvalidUsage;
    /* An ACK carries the receiver's tag back to the sender (check rounds): the roles swap. */
    if (st->tagRes == relaySuccess && ack)
      relaySetError(comm, err,
                    "rank %d sends %llu x %s, rank %d receives %llu x %s (%s #%llu from rank %d to rank %d): "
                    "the pair's counts or datatypes differ; nothing was written",
                    comm->rank, (unsigned long long)tag->count, shmTypeName(tag->dtype), p,
                    (unsigned long long)h->shape, shmTypeName(dt), kind, seq, comm->rank, p);
    else if (st->tagRes == relaySuccess)
      relaySetError(comm, err,
                    "rank %d sends %llu x %s, rank %d receives %llu x %s (%s #%llu from rank %d to rank %d): "
                    "the pair's counts or datatypes differ; nothing was written",
                    p, (unsigned long long)h->shape, shmTypeName(dt), comm->rank,
                    (unsigned long long)tag->count, shmTypeName(tag->dtype), kind, seq, p, comm->rank);
  }
  if (err != relaySuccess) {
    tag->flags |= RELAY_TAG_FAILED;
    if (st->tagRes == relaySuccess) st->tagRes = err;
    RELAY_CHECK(shmDrainTask(comm, st, p, t, h->bytes));
  }
  return shmTaskAccept(comm, st, p, h, t);
}

/* Stream what is there of one ring into a part: its header into hdr, then
 * the payload into data, resuming at *pos. */
static uint64_t shmGetStream(shmState* st, int p, size_t cur, shmRingCtl* c, const unsigned char* d,
                             uint64_t R, void* hdr, uint64_t hdrBytes, unsigned char* data, uint64_t total,
                             uint64_t* pos, uint64_t* sincePublish, int* hdrDone) {
  uint64_t tail = st->recvTail[cur], moved = 0;
  *hdrDone = 0;
  while (*pos < total) {
    uint64_t want = (*pos < hdrBytes ? hdrBytes : total) - *pos;
    uint64_t avail = st->recvHeadSeen[cur] - tail;
    if (avail < want) {
      st->recvHeadSeen[cur] = atomic_load_explicit(&c->head, memory_order_acquire);
      avail = st->recvHeadSeen[cur] - tail;
    }
    if (avail == 0) break;
    uint64_t k = want < avail ? want : avail;
    if (*pos < hdrBytes) {
      shmRingGet(d, R, tail, (unsigned char*)hdr + *pos, (size_t)k);
    } else {
      if (k > st->chunk) k = st->chunk;
      shmRingGet(d, R, tail, data + (*pos - hdrBytes), (size_t)k);
    }
    tail += k;
    *pos += k;
    moved += k;
    *sincePublish += k;
    if (*sincePublish >= st->chunk) {
      atomic_store_explicit(&c->tail, tail, memory_order_release);
      shmWake(&st->slots[p]);
      *sincePublish = 0;
    }
    if (*pos == hdrBytes) {
      *hdrDone = 1; /* the caller checks it before any payload is read */
      break;
    }
  }
  st->recvTail[cur] = tail;
  return moved;
}

/* Drain what peer p sent: task headers (each checked, in order), then each
 * channel's parts of checked tasks. */
static relayResult_t shmPull(struct relayComm* comm, shmState* st, int p, const relayXferDesc* recvs,
                             uint64_t* movedOut) {
  int n = comm->nranks, me = comm->rank;
  shmPeerQ* q = &st->rq[p];
  uint64_t moved = 0;
  if (q->ctl < q->end) {
    size_t cur = shmCur(st, p, 0);
    shmRingCtl* c = shmCtl(st, n, p, me, 0);
    const unsigned char* d = shmData(st, n, p, me, 0);
    uint64_t tail = st->recvTail[cur];
    relayResult_t res = relaySuccess;
    while (q->ctl < q->end) {
      if (st->recvHeadSeen[cur] - tail < SHM_THDR) {
        st->recvHeadSeen[cur] = atomic_load_explicit(&c->head, memory_order_acquire);
        if (st->recvHeadSeen[cur] - tail < SHM_THDR) break;
      }
      shmTaskHdr h;
      shmRingGet(d, SHM_CTL_RING, tail, &h, sizeof h);
      int i = st->rorder[q->ctl];
      if (st->rtag) res = shmTaggedHdr(comm, st, p, &h, &recvs[i], q->ctl);
      else if (!shmHdrOk(comm, p, &h, &recvs[i], q->ctl - q->beg))
        res = shmHdrMismatch(comm, p, &h, &recvs[i], q->ctl - q->beg, q->end - q->beg);
      else res = shmTaskAccept(comm, st, p, &h, q->ctl);
      if (res != relaySuccess) break;
      tail += SHM_THDR;
      moved += SHM_THDR;
      q->ctl++;
    }
    if (tail != st->recvTail[cur]) {
      st->recvTail[cur] = tail;
      atomic_store_explicit(&c->tail, tail, memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (res != relaySuccess) return res;
  }
  size_t P = (size_t)st->p2p.perPeer;
  shmChanQ* cqs = &st->rch[(size_t)p * (size_t)st->channels];
  shmPartHdr* hs = &st->rphdr[(size_t)p * (size_t)st->channels];
  relayResult_t res = relaySuccess;
  for (uint64_t m = q->chanMask; m && res == relaySuccess; m &= m - 1) {
    int ch = __builtin_ctzll(m);
    shmChanQ* cq = &cqs[ch];
    size_t cur = shmCur(st, p, 1 + ch);
    shmRingCtl* c = shmCtl(st, n, p, me, 1 + ch);
    const unsigned char* d = shmData(st, n, p, me, 1 + ch);
    uint64_t sincePublish = 0;
    while (cq->cur < q->ctl) {
      int i = st->rorder[cq->cur];
      const p2pPart* pp = &st->rpart[(size_t)i * P + (size_t)cq->part];
      int hdrDone = 0;
      unsigned char* dst = st->rtag && st->rdrain[i] ? st->rdrain[i] : (unsigned char*)recvs[i].ptr;
      moved += shmGetStream(st, p, cur, c, d, st->chanBytes, &hs[ch], SHM_PHDR, dst + pp->off,
                            SHM_PHDR + pp->len, &cq->pos, &sincePublish, &hdrDone);
      if (hdrDone) {
        const shmPartHdr* h = &hs[ch];
        if (h->magic != SHM_PART_MAGIC || h->src != p ||
            h->index != shmXferIndex(st->rtag, i, cq->cur - q->beg) || h->part != (uint32_t)cq->part ||
            h->callSeq != shmXferSeq(comm, st->rtag, i) || h->len != pp->len) {
          res = relaySetError(comm, relayInternalError,
                              "corrupt stream from rank %d on channel %d (magic %#x, task %u part %u of %llu "
                              "bytes; expected task %d part %d of %zu bytes)",
                              p, ch, h->magic, h->index, h->part, (unsigned long long)h->len,
                              cq->cur - q->beg, cq->part, pp->len);
          break;
        }
        continue; /* now the payload */
      }
      if (cq->pos < SHM_PHDR + pp->len) break; /* nothing more there yet */
      cq->pos = 0;
      cq->cur = shmChanNext(st, st->rorder, st->rnpart, st->rpart, ch, cq->cur + 1, q->end, &cq->part);
    }
    if (sincePublish) {
      atomic_store_explicit(&c->tail, st->recvTail[cur], memory_order_release);
      shmWake(&st->slots[p]);
    }
    if (cq->cur == q->end) q->chanMask &= ~(1ull << ch);
  }
  *movedOut += moved;
  return res;
}

static int shmSideDone(const shmPeerQ* q) { return q->ctl == q->end && q->chanMask == 0; }

/* One pass over every peer with pending work; drops finished peers. */
static relayResult_t shmScan(struct relayComm* comm, shmState* st, const relayXferDesc* sends,
                             const relayXferDesc* recvs, uint64_t* moved) {
  for (int i = 0; i < st->nspend;) {
    int p = st->spend[i];
    *moved += shmPush(comm, st, p, sends);
    if (shmSideDone(&st->sq[p])) st->spend[i] = st->spend[--st->nspend];
    else i++;
  }
  for (int i = 0; i < st->nrpend;) {
    int p = st->rpend[i];
    RELAY_CHECK(shmPull(comm, st, p, recvs, moved));
    if (shmSideDone(&st->rq[p])) st->rpend[i] = st->rpend[--st->nrpend];
    else i++;
  }
  return relaySuccess;
}

static int shmPending(shmState* st, int p) { return !shmSideDone(&st->sq[p]) || !shmSideDone(&st->rq[p]); }

/* A peer we still wait on whose slot reports a failure (or, when checkPids,
 * whose process is gone); -1 when none. */
static int shmFindBadPeer(struct relayComm* comm, shmState* st, int checkPids, int* what) {
  for (int pass = 0; pass < 2; pass++) {
    int np = pass ? st->nrpend : st->nspend;
    const int* l = pass ? st->rpend : st->spend;
    for (int i = 0; i < np; i++) {
      int w = shmPeerState(comm, st, l[i]);
      if (w == SHM_PEER_OK && checkPids && shmPeerDead(st, l[i])) w = SHM_PEER_DEAD;
      if (w != SHM_PEER_OK) {
        *what = w;
        return l[i];
      }
    }
  }
  return -1;
}

/* The first unfinished task of peer p in one direction, and its bytes moved. */
static void shmTaskProgress(const shmState* st, int p, int isSend, const relayXferDesc* x, int* task,
                            uint64_t* done, uint64_t* bytes) {
  const shmPeerQ* q = isSend ? &st->sq[p] : &st->rq[p];
  const shmChanQ* cqs =
      isSend ? &st->sch[(size_t)p * (size_t)st->channels] : &st->rch[(size_t)p * (size_t)st->channels];
  const int* order = isSend ? st->sorder : st->rorder;
  const p2pPart* parts = isSend ? st->spart : st->rpart;
  const int* npart = isSend ? st->snpart : st->rnpart;
  size_t P = (size_t)st->p2p.perPeer;
  int t = q->ctl;
  for (uint64_t m = q->chanMask; m; m &= m - 1)
    if (cqs[__builtin_ctzll(m)].cur < t) t = cqs[__builtin_ctzll(m)].cur;
  if (t >= q->end) t = q->end - 1;
  int i = order[t];
  *task = t;
  *bytes = x[i].bytes;
  *done = 0;
  if (t >= q->ctl) return; /* its header is not through yet */
  for (int k = 0; k < npart[i]; k++) {
    const p2pPart* pp = &parts[(size_t)i * P + (size_t)k];
    if (!pp->len) continue;
    const shmChanQ* cq = &cqs[pp->channel];
    if (!(q->chanMask & (1ull << pp->channel)) || cq->cur > t) *done += pp->len;
    else if (cq->cur == t && cq->pos > SHM_PHDR) *done += cq->pos - SHM_PHDR;
  }
}

static relayResult_t shmGroupTimeout(struct relayComm* comm, shmState* st, const relayXferDesc* sends,
                                     const relayXferDesc* recvs) {
  /* Name the lowest peer we wait on, receives first (they say what is late). */
  int p = -1, isRecv = 0;
  for (int i = 0; i < st->nrpend; i++)
    if (p < 0 || st->rpend[i] < p) p = st->rpend[i], isRecv = 1;
  if (p < 0)
    for (int i = 0; i < st->nspend; i++)
      if (p < 0 || st->spend[i] < p) p = st->spend[i];
  /* Other peers this rank still waits on (a peer can be in both lists). */
  int others = 0;
  memset(st->tmp, 0, (size_t)comm->nranks * sizeof(int));
  st->tmp[p] = 1;
  for (int i = 0; i < st->nspend; i++) others += !st->tmp[st->spend[i]]++;
  for (int i = 0; i < st->nrpend; i++) others += !st->tmp[st->rpend[i]]++;
  char what[160];
  int task;
  uint64_t done, bytes;
  shmTaskProgress(st, p, !isRecv, isRecv ? recvs : sends, &task, &done, &bytes);
  int n = snprintf(what, sizeof what, "%s %llu of %llu bytes", isRecv ? "recv" : "send",
                   (unsigned long long)done, (unsigned long long)bytes);
  const relayXferTag* tags = isRecv ? st->rtag : st->stag;
  if (tags && n > 0 && (size_t)n < sizeof what) { /* a tagged transfer: which of the pair's */
    const relayXferTag* t = &tags[(isRecv ? st->rorder : st->sorder)[task]];
    snprintf(what + n, sizeof what - (size_t)n, " of %s #%llu",
             (t->seq & RELAY_TAG_PAIR) ? "point-to-point transfer" : "all-to-all-v call",
             (unsigned long long)(t->seq & ~(RELAY_TAG_PAIR | RELAY_TAG_ACK)));
  }
  return relaySetError(comm, relayTimeout, "no progress for %d ms waiting for rank %d (%s)%s%.0d%s",
                       comm->cfg.timeoutMs, p, what, others ? " and " : "", others,
                       others == 1 ? " other rank"
                       : others    ? " other ranks"
                                   : "");
}

static relayResult_t shmGroupRun(struct relayComm* comm, shmState* st, const relayXferDesc* sends, int nSends,
                                 const relayXferDesc* recvs, int nRecvs, int p2pOp) {
  int n = comm->nranks, me = comm->rank;
  for (int i = 0; i < nSends; i++)
    if (sends[i].peer < 0 || sends[i].peer >= n || (!sends[i].ptr && sends[i].bytes))
      return relaySetError(comm, relayInvalidArgument, "send %d has peer %d (nranks %d), ptr %p, %zu bytes",
                           i, sends[i].peer, n, sends[i].ptr, sends[i].bytes);
  for (int i = 0; i < nRecvs; i++)
    if (recvs[i].peer < 0 || recvs[i].peer >= n || (!recvs[i].ptr && recvs[i].bytes))
      return relaySetError(comm, relayInvalidArgument, "recv %d has peer %d (nranks %d), ptr %p, %zu bytes",
                           i, recvs[i].peer, n, recvs[i].ptr, recvs[i].bytes);
  if ((unsigned)p2pOp >= P2P_NUM_OPS)
    return relaySetError(comm, relayInternalError, "p2p operation %d", p2pOp);
  st->groupOp = p2pOp;
  RELAY_CHECK(shmP2pInit(comm, st));
  RELAY_CHECK(shmGrowOrder(comm, st, nSends > nRecvs ? nSends : nRecvs));
  if (st->rtag) {
    memset(st->rdrain, 0, (size_t)nRecvs * sizeof *st->rdrain);
    st->ndrain = nRecvs;
  }
  shmBucket(st, n, sends, nSends, st->sorder, st->sq, st->spend, &st->nspend, me);
  shmBucket(st, n, recvs, nRecvs, st->rorder, st->rq, st->rpend, &st->nrpend, me);

  /* To oneself: the k-th send pairs with the k-th receive; no channels. */
  shmPeerQ *ss = &st->sq[me], *rs = &st->rq[me];
  if (ss->end - ss->beg != rs->end - rs->beg)
    return relaySetError(comm, relayInvalidUsage, "%d sends to itself but %d receives from itself",
                         ss->end - ss->beg, rs->end - rs->beg);
  for (int k = 0; k < ss->end - ss->beg; k++) {
    const relayXferDesc* s = &sends[st->sorder[ss->beg + k]];
    const relayXferDesc* r = &recvs[st->rorder[rs->beg + k]];
    if (st->stag && ((st->stag[st->sorder[ss->beg + k]].flags & RELAY_TAG_REJECT) ||
                     (st->rtag[st->rorder[rs->beg + k]].flags & RELAY_TAG_DRAIN))) {
      /* One end rejected (its error is the call's): nothing is copied. */
      st->rtag[st->rorder[rs->beg + k]].flags |= RELAY_TAG_FAILED;
      if (st->tagRes == relaySuccess && (st->rtag[st->rorder[rs->beg + k]].flags & RELAY_TAG_DRAIN) == 0)
        st->tagRes = relaySetError(comm, relayRemoteError,
                                   "its send #%d to itself was rejected: nothing was written", k + 1);
      continue;
    }
    if (st->stag && (st->stag[st->sorder[ss->beg + k]].count != st->rtag[st->rorder[rs->beg + k]].count ||
                     st->stag[st->sorder[ss->beg + k]].dtype != st->rtag[st->rorder[rs->beg + k]].dtype)) {
      st->rtag[st->rorder[rs->beg + k]].flags |= RELAY_TAG_FAILED;
      if (st->tagRes == relaySuccess)
        st->tagRes = relaySetError(
            comm, relayInvalidUsage,
            "its transfer #%d to itself sends %llu x %s but receives %llu x %s: nothing was written", k + 1,
            (unsigned long long)st->stag[st->sorder[ss->beg + k]].count,
            shmTypeName(st->stag[st->sorder[ss->beg + k]].dtype),
            (unsigned long long)st->rtag[st->rorder[rs->beg + k]].count,
            shmTypeName(st->rtag[st->rorder[rs->beg + k]].dtype));
      continue;
    }
    if (s->bytes != r->bytes)
      return relaySetError(comm, relayInvalidUsage, "transfer %d to itself sends %zu bytes but receives %zu",
                           k + 1, s->bytes, r->bytes);
    if (s->bytes && s->ptr != r->ptr) memmove(r->ptr, s->ptr, s->bytes);
  }
  ss->ctl = ss->end;
  rs->ctl = rs->end;

  /* Split every task; connect our send sides before any header goes out. */
  for (int i = 0; i < st->nspend; i++) {
    shmSplitPeer(st, p2pOp, me, st->spend[i], 1, sends);
    RELAY_CHECK(shmSendConnect(comm, st, st->spend[i]));
  }
  for (int i = 0; i < st->nrpend; i++) shmSplitPeer(st, p2pOp, me, st->rpend[i], 0, recvs);

  shmWaiter w;
  shmWaiterInit(&w);
  (void)shmNoteCpu(comm, st);
  for (;;) {
    uint32_t db = atomic_load_explicit(&st->slots[me].doorbell, memory_order_acquire);
    uint64_t moved = 0;
    RELAY_CHECK(shmScan(comm, st, sends, recvs, &moved));
    if (st->nspend + st->nrpend == 0) {
      shmWaiterEnd(&w);
      return relaySuccess;
    }
    if (moved) {
      shmWaiterProgress(st, &w);
      continue;
    }
    if (shmAborted(comm, st)) return relaySetError(comm, relayInvalidUsage, "the comm was aborted");
    int what = 0, bad = shmFindBadPeer(comm, st, w.spun && shmLiveCheckDue(&w), &what);
    if (bad >= 0) {
      /* Whatever it wrote before it failed or died is visible now: drain it,
       * and fail only if we still need something from it. */
      RELAY_CHECK(shmScan(comm, st, sends, recvs, &moved));
      if (!shmPending(st, bad)) continue;
      return shmPeerError(comm, st, bad, what, NULL); /* the prefix names the call and step */
    }
    if (shmPause(comm, st, &w, db, -1)) return shmGroupTimeout(comm, st, sends, recvs);
  }
}

relayResult_t shmGroup(struct relayComm* comm, const relayXferDesc* sends, int nSends,
                       const relayXferDesc* recvs, int nRecvs, int p2pOp, relayStream_t stream) {
  (void)stream;
  shmState* st = shmStateOf(comm);
  if (nSends == 0 && nRecvs == 0 && !comm->failed) return relaySuccess;
  if (comm->failed)
    return relaySetError(comm, relayInvalidUsage, "the comm failed in an earlier call; destroy it");
  if (nSends < 0 || nRecvs < 0 || (nSends && !sends) || (nRecvs && !recvs))
    return shmFail(comm, relaySetError(comm, relayInvalidArgument, "group with %d sends (%p), %d recvs (%p)",
                                       nSends, (const void*)sends, nRecvs, (const void*)recvs));
  st->stag = comm->xferTags;
  st->rtag = comm->xferTags ? comm->xferTags + nSends : NULL;
  st->tagRes = relaySuccess;
  relayResult_t res = shmGroupRun(comm, st, sends, nSends, recvs, nRecvs, p2pOp);
  for (int i = 0; i < st->ndrain; i++) free(st->rdrain[i]);
  st->ndrain = 0;
  st->stag = st->rtag = NULL;
  /* A drained transfer left the pair in step: its error is the group's, the comm stays usable. */
  if (res == relaySuccess) return st->tagRes;
  return shmFail(comm, res);
}
