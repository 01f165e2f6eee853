/*
 * The P2P channel layer (see p2p.h): pool and parts per peer, the scatter
 * part rule, channel bases, lazy connection masks.
 *
 * Why scatter has its own rule (seed 003, measured on 2-8 nodes of 8 MI355X
 * with AINIC): a scatter root drives all nRanks - 1 peers at once, so parts
 * per peer beyond what the pool holds add flows without adding bandwidth.
 * With 2 parts per peer on 4 nodes (31 peers x 2 = 62 flows on 32 channels)
 * scatter lost 15-21% from 32 MB up; one part per peer restored it. Dropping
 * to one part whenever the flows overflow was too blunt: on 3 nodes (23 peers,
 * 4 parts per peer, 64 channels) it left two-thirds of the pool idle and ran
 * 1.04-1.13x develop's time, while the largest power of two that fits,
 * 64 / 23 -> 2 parts (46 flows on 64 channels), ran 0.85-0.87x.
 */
#include "p2p/p2p.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Bound on nodes x ranks per node: keeps every product below in int range
 * (64 channels x 2^20 ranks < 2^31) and is far beyond any real comm. */
#define P2P_MAX_RANKS (1 << 20)

static const char* const kOpNames[P2P_NUM_OPS] = {"sendrecv", "scatter", "gather", "alltoall"};

const char* p2pOpName(p2pOp op) { return (unsigned)op < P2P_NUM_OPS ? kOpNames[op] : "?"; }

static int isPow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

static int pow2Up(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

/* 0 for x < 1. */
static int pow2Down(int x) {
  if (x < 1) return 0;
  int p = 1;
  while (p <= x / 2) p <<= 1;
  return p;
}

static int log2Of(int pow2) {
  int l = 0;
  while ((1 << l) < pow2) l++;
  return l;
}

static int reverseBits(int x, int bits) {
  int r = 0;
  for (int i = 0; i < bits; i++)
    if (x & (1 << i)) r |= 1 << (bits - 1 - i);
  return r;
}

static int gcd(int a, int b) {
  while (b) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static relayResult_t bad(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return relayInvalidArgument;
}

/* ---- the comm-wide pool -------------------------------------------------- */

int p2pWantedLocal(int links) {
  /* NCCL: 2 channels per NVLink of the path (2 * max(1, bw / nvlBw)), 2 for
   * any other local path. */
  return 2 * (links > 1 ? links : 1);
}

int p2pWantedNet(int nRanks, int poolBefore, int netsByBw, int userPerNetPeer) {
  if (userPerNetPeer > 0) return userPerNetPeer; /* kept as the user set it */
  /* Start from 2 per NIC; halve while each channel would carry more than 4
   * peers' operations (NCCL: beyond that a channel loses its sync warp, hence
   * bandwidth) -- the peers oversubscribing the pool. Then at least the NICs
   * one GPU needs to reach its bandwidth. */
  int k = 2;
  while (k > 1 && (long long)k * nRanks > (long long)poolBefore * 4) k /= 2;
  return netsByBw > k ? netsByBw : k;
}

relayResult_t p2pCommFromTopo(const p2pTopoDesc* t, p2pComm* out, char* err, size_t errlen) {
  if (!t || !out) return bad(err, errlen, "p2pCommFromTopo: %s is NULL", t ? "out" : "topology");
  memset(out, 0, sizeof *out);
  if (t->nNodes < 1) return bad(err, errlen, "nNodes = %d must be >= 1", t->nNodes);
  if (t->localRanks < 1) return bad(err, errlen, "localRanks = %d must be >= 1", t->localRanks);
  if ((long long)t->nNodes * t->localRanks > P2P_MAX_RANKS)
    return bad(err, errlen, "%d nodes x %d ranks exceeds %d ranks", t->nNodes, t->localRanks, P2P_MAX_RANKS);
  if (t->nChannels < 1) return bad(err, errlen, "nChannels = %d must be >= 1", t->nChannels);
  if (t->defaultLinks < 0) return bad(err, errlen, "defaultLinks = %d must be >= 0", t->defaultLinks);
  if (t->netsByBw < 0) return bad(err, errlen, "netsByBw = %d must be >= 0", t->netsByBw);
  if (t->minP2pChannels < 0 || t->maxP2pChannels < 0)
    return bad(err, errlen, "min/maxP2pChannels = %d/%d must be >= 0", t->minP2pChannels, t->maxP2pChannels);
  if (t->poolCap < 0 || t->poolCap > P2P_MAX_CHANNELS)
    return bad(err, errlen, "poolCap = %d must be in [0, %d] (one 64-bit mask names a task's channels)",
               t->poolCap, P2P_MAX_CHANNELS);
  if (t->schedGroupSize < 0) return bad(err, errlen, "schedGroupSize = %d must be >= 0", t->schedGroupSize);
  int G = t->localRanks, n = t->nNodes * G;
  int minP = t->minP2pChannels ? t->minP2pChannels : 1;
  int maxP = t->maxP2pChannels ? t->maxP2pChannels : P2P_MAX_CHANNELS;
  int cap = t->poolCap ? t->poolCap : P2P_MAX_CHANNELS;

  /* ncclTopoComputeP2pChannels, step by step. */
  int pool = t->nChannels < maxP ? t->nChannels : maxP;
  if (pool < minP) pool = minP;
  int minCh = pool;
  for (int i = 0; i < G; i++)
    for (int j = 0; j < G; j++) {
      if (i == j) continue;
      int links = t->localLinks ? t->localLinks[i * G + j] : t->defaultLinks;
      if (links < 0) return bad(err, errlen, "localLinks[%d][%d] = %d must be >= 0", i, j, links);
      int w = p2pWantedLocal(links);
      if (w < minCh) minCh = w;
    }
  if (t->nNodes > 1) {
    /* The halving sees the pool before it is rounded, as in NCCL. */
    int w = p2pWantedNet(n, pool, t->netsByBw ? t->netsByBw : 1, t->userPerNetPeer);
    if (w < minCh) minCh = w;
  }
  if (pool > P2P_MAX_CHANNELS) pool = P2P_MAX_CHANNELS; /* pow2Up below stays in range */
  int perPeer = pow2Up(minCh);
  pool = pow2Up(pool);
  if (pool > pow2Down(cap)) pool = pow2Down(cap);
  if (perPeer > pool) perPeer = pool;

  int gs = t->schedGroupSize ? t->schedGroupSize : P2P_SCHED_GROUP_DEFAULT;
  if (G % gs != 0) gs = gcd(gs, G); /* NCCL: the group size must divide every node's ranks */
  out->nRanks = n;
  out->nNodes = t->nNodes;
  out->localRanks = G;
  out->pool = pool;
  out->perPeer = perPeer;
  out->perPeerUserSet = t->nNodes > 1 && t->userPerNetPeer > 0;
  out->schedGroupSize = gs;
  return relaySuccess;
}

relayResult_t p2pCommSet(int nNodes, int localRanks, int pool, int perPeer, int userPerPeer, p2pComm* out,
                         char* err, size_t errlen) {
  if (!out) return bad(err, errlen, "p2pCommSet: out is NULL");
  memset(out, 0, sizeof *out);
  if (nNodes < 1) return bad(err, errlen, "nodes = %d must be >= 1", nNodes);
  if (localRanks < 1) return bad(err, errlen, "local ranks = %d must be >= 1", localRanks);
  if ((long long)nNodes * localRanks > P2P_MAX_RANKS)
    return bad(err, errlen, "%d nodes x %d ranks exceeds %d ranks", nNodes, localRanks, P2P_MAX_RANKS);
  if (!isPow2(pool) || pool > P2P_MAX_CHANNELS)
    return bad(err, errlen, "pool = %d must be a power of two in [1, %d]", pool, P2P_MAX_CHANNELS);
  if (!isPow2(perPeer) || perPeer > pool)
    return bad(err, errlen, "per-peer = %d must be a power of two in [1, pool = %d]", perPeer, pool);
  if (userPerPeer < 0) return bad(err, errlen, "user per-peer = %d must be >= 1 (0: unset)", userPerPeer);
  out->nRanks = nNodes * localRanks;
  out->nNodes = nNodes;
  out->localRanks = localRanks;
  out->pool = pool;
  out->perPeer = perPeer;
  /* RELAYCC_NCHANNELS_PER_NET_PEER speaks about network peers: one node has none. */
  if (userPerPeer > 0 && nNodes > 1) {
    int u = pow2Up(userPerPeer > P2P_MAX_CHANNELS ? P2P_MAX_CHANNELS : userPerPeer);
    out->perPeer = u < pool ? u : pool;
    out->perPeerUserSet = 1;
  }
  int gs = P2P_SCHED_GROUP_DEFAULT;
  if (localRanks % gs != 0) gs = gcd(gs, localRanks);
  out->schedGroupSize = gs;
  return relaySuccess;
}

/* ---- parts --------------------------------------------------------------- */

int p2pScatterParts(int nRanks, int nNodes, int pool, int perPeer, int perPeerUserSet) {
  /* One node: scatter was never measured to suffer from its parts there, and
   * a user-set count is the user's decision; both keep the per-peer count. */
  if (nNodes <= 1 || perPeerUserSet || nRanks < 2) return perPeer;
  /* Largest power of two whose (nRanks - 1) x parts flows fit the pool.
   * 32 / 16 peers = 2 fills the pool exactly; 32 / 17 = 1. */
  int fit = pow2Down(pool / (nRanks - 1));
  if (fit > perPeer) fit = perPeer;
  return fit < 1 ? 1 : fit; /* 63 peers on 32 channels still get one part each */
}

int p2pTaskParts(const p2pComm* c, p2pOp op) {
  if (op == P2P_OP_SCATTER)
    return p2pScatterParts(c->nRanks, c->nNodes, c->pool, c->perPeer, c->perPeerUserSet);
  return c->perPeer;
}

void p2pPartBounds(size_t bytes, int nParts, size_t align, int part, size_t* off, size_t* len) {
  if (align == 0) align = P2P_PART_ALIGN;
  if (nParts < 1) nParts = 1;
  size_t per = bytes / (size_t)nParts + (bytes % (size_t)nParts != 0);
  if (per % align) per += align - per % align;
  size_t beg = bytes;
  if (per != 0 && (size_t)part <= bytes / per) beg = (size_t)part * per;
  size_t end = per != 0 && bytes - beg > per ? beg + per : bytes;
  *off = beg;
  *len = end - beg;
}

/* ---- channels ------------------------------------------------------------ */

int p2pNodeMajorIndex(const p2pComm* c, int sender, int receiver) {
  int G = c->localRanks, N = c->nNodes;
  int dn = (receiver / G - sender / G + N) % N;
  int dl = (receiver % G - sender % G + G) % G;
  return dn * G + dl;
}

int p2pScheduleRound(const p2pComm* c, int sender, int receiver) {
  int gs = c->schedGroupSize > 0 ? c->schedGroupSize : 1;
  int nGroups = c->nRanks / gs, n2 = pow2Up(nGroups);
  /* Ranks are node-major and gs divides localRanks, so rank x sits in
   * schedule group x / gs at offset x % gs. */
  int gd = (receiver / gs - sender / gs + nGroups) % nGroups;
  int delta = (receiver % gs - sender % gs + gs) % gs;
  /* Position of gd in the quadratic order 0, 1, 3, 6, 10, ... mod n2 (a
   * permutation of [0, n2) because n2 is a power of two), skipping deltas
   * >= nGroups, exactly as ncclP2pSchedule enumerates them. The receiver
   * finds the same gd and delta from its side, hence the same round. */
  int pos = 0, d = 0;
  for (int round = 0; round < n2; round++) {
    if (d < nGroups) {
      if (d == gd) return pos * gs + delta;
      pos++;
    }
    d = (d + round + 1) & (n2 - 1);
  }
  return 0; /* unreachable */
}

int p2pChannelBase(const p2pComm* c, p2pOp op, int sender, int receiver) {
  if (op == P2P_OP_SCATTER && c->nNodes > 1) {
    /* Node-major: peer i (1..nRanks-1) of the root gets base i - 1. With k
     * parts per peer on channels base + m * pool / k (p2pChannelForPart), the
     * peers' channel sets are disjoint while (nRanks - 1) * k <= pool, which
     * is what the scatter rule guarantees: every flow of the root has a
     * channel of its own (46 flows on 64 channels for 3 nodes of 8). The
     * schedule base does not: RCCL's rounds interleave nodes two local ranks
     * at a time, so neighbouring rounds share channels once a peer has two
     * parts, and scatter lost 7-15% from 32 MB up on 3 and 8 nodes. */
    int idx = p2pNodeMajorIndex(c, sender, receiver);
    return (idx + c->pool - 1) % c->pool;
  }
  /* The schedule round's base, bit-reversed as NCCL's
   * ncclP2pChannelBaseForRound, so consecutive rounds land far apart. */
  int round = p2pScheduleRound(c, sender, receiver);
  return reverseBits(round % c->pool, log2Of(c->pool));
}

int p2pChannelForPart(int pool, int base, int part) {
  /* Bit-reversed part index: parts 0, 1, 2, 3 sit at offsets 0, pool/2,
   * pool/4, 3*pool/4, so k parts are spread evenly over the pool for any k,
   * and part p's channel does not depend on k. */
  return (base + reverseBits(part % pool, log2Of(pool))) % pool;
}

uint64_t p2pChannelMask(int pool, int base, int nParts) {
  uint64_t m = 0;
  if (nParts > pool) nParts = pool;
  for (int p = 0; p < nParts; p++) m |= 1ull << p2pChannelForPart(pool, base, p);
  return m;
}

uint64_t p2pTaskMask(const p2pComm* c, p2pOp op, int sender, int receiver) {
  return p2pChannelMask(c->pool, p2pChannelBase(c, op, sender, receiver), p2pTaskParts(c, op));
}

int p2pTaskSplit(const p2pComm* c, p2pOp op, int sender, int receiver, size_t bytes, size_t align,
                 p2pPart* parts) {
  int n = p2pTaskParts(c, op);
  int base = p2pChannelBase(c, op, sender, receiver);
  for (int p = 0; p < n; p++) {
    parts[p].channel = p2pChannelForPart(c->pool, base, p);
    p2pPartBounds(bytes, n, align, p, &parts[p].off, &parts[p].len);
  }
  return n;
}

/* ---- lazy connections ---------------------------------------------------- */

void p2pConnInit(p2pConnTable* t, int nRanks, uint64_t* storage) {
  t->nRanks = nRanks;
  t->mask = storage;
  memset(storage, 0, (size_t)nRanks * 2 * sizeof *storage);
}

uint64_t p2pConnMask(const p2pConnTable* t, int peer, p2pDir dir) { return t->mask[peer * 2 + (int)dir]; }

uint64_t p2pConnNeed(const p2pConnTable* t, int peer, p2pDir dir, uint64_t want) {
  return want & ~t->mask[peer * 2 + (int)dir];
}

void p2pConnCommit(p2pConnTable* t, int peer, p2pDir dir, uint64_t connected) {
  t->mask[peer * 2 + (int)dir] |= connected;
}

uint64_t p2pConnClaim(p2pConnTable* t, int peer, p2pDir dir, uint64_t want) {
  uint64_t now = p2pConnNeed(t, peer, dir, want);
  p2pConnCommit(t, peer, dir, now);
  return now;
}

int p2pConnSeen(const p2pConnTable* t, const p2pComm* c, int me, int peer, p2pDir dir) {
  int s = dir == P2P_DIR_SEND ? me : peer, r = dir == P2P_DIR_SEND ? peer : me;
  uint64_t full = p2pChannelMask(c->pool, p2pChannelBase(c, P2P_OP_SENDRECV, s, r), c->perPeer);
  return (p2pConnMask(t, peer, dir) & full) == full;
}

const char* p2pMaskString(uint64_t mask, char* buf, size_t len) {
  size_t at = 0;
  if (len == 0) return buf;
  buf[0] = 0;
  if (!mask) {
    snprintf(buf, len, "-");
    return buf;
  }
  for (int c = 0; c < 64; c++) {
    if (!(mask & (1ull << c))) continue;
    int w = snprintf(buf + at, len - at, "%s%d", at ? "," : "", c);
    if (w < 0 || (size_t)w >= len - at) break;
    at += (size_t)w;
  }
  return buf;
}

int p2pConnAgree(uint64_t senderMask, uint64_t receiverMask, int sender, int receiver, char* err,
                 size_t errlen) {
  if (senderMask == receiverMask) return 0;
  if (err && errlen) {
    char a[256], b[256], s[256], r[256];
    snprintf(err, errlen,
             "p2p %d -> %d: the ends disagree on the channels of a task: sender {%s}, receiver {%s}; "
             "only the sender has {%s}, only the receiver has {%s} (the two ranks computed parts or "
             "bases from different comm-wide values)",
             sender, receiver, p2pMaskString(senderMask, s, sizeof s),
             p2pMaskString(receiverMask, r, sizeof r), p2pMaskString(senderMask & ~receiverMask, a, sizeof a),
             p2pMaskString(receiverMask & ~senderMask, b, sizeof b));
  }
  return 1;
}
