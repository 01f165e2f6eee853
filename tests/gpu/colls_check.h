/* One collective call on the GPU checked against a serial reference, for the GPU test programs
 * (header-only: every tests/gpu/gputest_*.c is its own program). gputest_nodes and gputest_faults use it;
 * gputest_colls has its own copy of the pattern and reference part and should move onto this header.
 *
 * Inputs encode source, destination and index: data movement (all-gather, all-to-all, scatter, gather)
 * compares bits of a hash of (group, source, destination, index, salt); reductions use small integers
 * from the same hash, so sums and maxima are exact in every dtype and in any order (bf16: |x| <= 16 and 8
 * ranks stay below 256), and avg is checked to within one rounding. Outputs are poisoned before each run and
 * guard bytes around them must survive; out-of-place sends must come back unchanged. Ranks without a role
 * pass NULL. */
#ifndef RELAY_GPU_COLLS_CHECK_H_
#define RELAY_GPU_COLLS_CHECK_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "gpu/gpu_util.h"
#include "reduce_host.h"

#define CC_GUARD 256 /* bytes poisoned before and after every buffer */
#define CC_POISON 0xA5
#define CC_WAIT_S 120.0
#define CC_MAX_RANKS 64

/* The collectives this file checks, by its own numbers: the first CC_NCOLLS are relayCollective_t's values
 * (loops over "every collective" run them: gputest_nodes), then broadcast and reduce (a layout and a root
 * position: gputest_colls' rooted row), which relayCollective_t numbers after the point-to-point rows. */
enum {
  CC_AG = 0,
  CC_RS = 1,
  CC_AR = 2,
  CC_A2A = 3,
  CC_SCATTER = 4,
  CC_GATHER = 5,
  CC_NCOLLS = 6,
  CC_BCAST = 6,
  CC_REDUCE = 7,
  CC_NALL = 8
};
static const char* const kCcCollNames[CC_NALL] = {"allgather", "reducescatter", "allreduce", "alltoall",
                                                  "scatter",   "gather",        "broadcast", "reduce"};

static inline int ccIsReduce(int coll) { return coll == CC_RS || coll == CC_AR || coll == CC_REDUCE; }
/* A rank set and a comm-rank root (scatter, gather). */
static inline int ccIsRooted(int coll) { return coll == CC_SCATTER || coll == CC_GATHER; }
/* A layout and the root's position in each group (broadcast, reduce). */
static inline int ccIsPositioned(int coll) { return coll == CC_BCAST || coll == CC_REDUCE; }

/* ---- patterns and the serial reference ----------------------------------- */

/* g: the group (layout collectives; 0 for scatter and gather); salt: what else a test wants in its inputs
 * (a call number, so that a stale output of an earlier call never passes; 0: gputest_colls' patterns). */
static inline uint64_t ccPatHash(int g, int src, int dst, size_t i, unsigned salt) {
  return gpuMix((((uint64_t)(unsigned)g << 56) ^ ((uint64_t)(unsigned)src << 48) ^
                 ((uint64_t)(unsigned)dst << 40) ^ (uint64_t)i) ^
                ((uint64_t)salt * 0xD1B54A32D192ED03ull));
}

/* Raw bits for data movement. */
static inline void ccMovePattern(void* out, relayDataType_t dt, int g, int src, int dst, size_t i,
                                 unsigned salt) {
  uint64_t h = ccPatHash(g, src, dst, i, salt);
  memcpy(out, &h, relayTypeSize(dt));
}

/* A small integer in the type's exact range for reductions. */
static inline int ccReduceValue(relayDataType_t dt, int g, int src, int dst, size_t i, unsigned salt) {
  uint64_t h = ccPatHash(g, src, dst, i, salt);
  switch (dt) {
    case relayBfloat16: return (int)(h % 33) - 16;      /* 8 ranks: |sum| <= 128 < 2^8 */
    case relayFloat16: return (int)(h % 257) - 128;     /* |sum| <= 1024 < 2^11 */
    case relayFloat32: return (int)(h % 65537) - 32768; /* |sum| <= 2^18 < 2^24 */
    default: return (int)(uint32_t)h;                   /* int32: full range, sums wrap */
  }
}

static inline void ccStoreValue(void* out, relayDataType_t dt, double v) {
  switch (dt) {
    case relayBfloat16: {
      unsigned short b = relayFloatToBf16((float)v);
      memcpy(out, &b, 2);
      break;
    }
    case relayFloat16: {
      unsigned short b = relayFloatToHalf((float)v);
      memcpy(out, &b, 2);
      break;
    }
    case relayFloat32: {
      float f = (float)v;
      memcpy(out, &f, 4);
      break;
    }
    default: {
      int32_t x = (int32_t)(int64_t)v;
      memcpy(out, &x, 4);
      break;
    }
  }
}

static inline double ccLoadValue(const void* in, relayDataType_t dt) {
  unsigned short b;
  switch (dt) {
    case relayBfloat16: memcpy(&b, in, 2); return relayBf16ToFloat(b);
    case relayFloat16: memcpy(&b, in, 2); return relayHalfToFloat(b);
    case relayFloat32: {
      float f;
      memcpy(&f, in, 4);
      return f;
    }
    default: {
      int32_t x;
      memcpy(&x, in, 4);
      return x;
    }
  }
}

/* The reference of one reduced element over the A contributions. Integers wrap like the kernels (sum in
 * uint32) and avg truncates; floats are exact for sum and max, and avg is the exact sum divided once in
 * fp32. */
static inline void ccReduceRef(void* out, relayDataType_t dt, relayRedOp_t op, int A, int g, int dst,
                               size_t i, unsigned salt) {
  if (dt == relayInt32) {
    uint32_t s = 0;
    int32_t m = 0;
    for (int x = 0; x < A; x++) {
      int32_t v = (int32_t)ccReduceValue(dt, g, x, dst, i, salt);
      s += (uint32_t)v;
      if (x == 0 || v > m) m = v;
    }
    int32_t r = op == relayMax ? m : op == relayAvg ? (int32_t)s / A : (int32_t)s;
    memcpy(out, &r, 4);
    return;
  }
  long sum = 0, mx = 0;
  for (int x = 0; x < A; x++) {
    long v = ccReduceValue(dt, g, x, dst, i, salt);
    sum += v;
    if (x == 0 || v > mx) mx = v;
  }
  double r = op == relayMax ? (double)mx : op == relayAvg ? (double)((float)sum / (float)A) : (double)sum;
  ccStoreValue(out, dt, r);
}

/* Tolerance of avg in floats: the result is one rounding of an exact quotient, give or take one more
 * rounding where a plan divides in another place; one unit in the last place of the type covers both. */
static inline int ccCloseEnough(relayDataType_t dt, double got, double want) {
  double eps = dt == relayBfloat16 ? 1.0 / 128 : dt == relayFloat16 ? 1.0 / 1024 : 1.0 / 8388608;
  double mag = want < 0 ? -want : want;
  if (mag < 1) mag = 1;
  double d = got - want;
  if (d < 0) d = -d;
  return d <= eps * mag;
}

/* ---- one rank's buffers and one call ------------------------------------- */

/* A layout (layout collectives) or, for scatter and gather, the rank set l.ranks[0..l.nActive) of one
 * group with its root. */
typedef struct {
  const char* name;
  relayLayout_t l;
  int ranks[CC_MAX_RANKS];
} ccLayout;

typedef struct {
  relayComm_t comm;
  cudaStream_t s;
  int rank, nranks;
  const char* routeName;
  char *dSend, *dRecv; /* device pools with CC_GUARD bytes each side */
  size_t poolBytes;
  unsigned char *hSend, *hRecv, *hPat; /* host staging, poolBytes each */
  long calls;
} ccRank;

typedef struct {
  int coll;
  relayDataType_t dt;
  relayRedOp_t op;
  int inPlace;   /* rooted: only where the root is in the set (else the case runs out of place) */
  int offElems;  /* buffers start this many elements past 256-byte alignment */
  size_t count;  /* layout: the per-group count of group 0, group g gets count + g (count > 0);
                  * rooted: ranks[i]'s block is count + i (count > 0) */
  int root;      /* rooted collectives */
  unsigned salt; /* in every input (ccPatHash) */
} ccCase;

static inline void ccAllocPools(ccRank* R, size_t bytes) {
  R->poolBytes = bytes + 2 * CC_GUARD + 64;
  G_CUDA(cudaMalloc((void**)&R->dSend, R->poolBytes));
  G_CUDA(cudaMalloc((void**)&R->dRecv, R->poolBytes));
  R->hSend = malloc(R->poolBytes);
  R->hRecv = malloc(R->poolBytes);
  R->hPat = malloc(R->poolBytes);
  G_CHECK(R->hSend && R->hRecv && R->hPat, "out of host memory (%zu bytes)", R->poolBytes);
}

static inline void ccFreePools(ccRank* R) {
  G_CUDA(cudaFree(R->dSend));
  G_CUDA(cudaFree(R->dRecv));
  free(R->hSend);
  free(R->hRecv);
  free(R->hPat);
  R->dSend = R->dRecv = NULL;
  R->hSend = R->hRecv = R->hPat = NULL;
}

/* This rank's group and active index in a layout (-1 / -1: a helper). */
static inline int ccRoleOf(const ccLayout* L, int rank, int* idx) {
  for (int g = 0; g < L->l.nGroups; g++)
    for (int i = 0; i < L->l.nActive; i++)
      if (L->l.ranks[g * L->l.nActive + i] == rank) {
        *idx = i;
        return g;
      }
  *idx = -1;
  return -1;
}

static inline void ccDescribe(char* buf, size_t n, const ccRank* R, const ccLayout* L, const ccCase* c) {
  char root[32] = "";
  if (ccIsRooted(c->coll) || ccIsPositioned(c->coll)) snprintf(root, sizeof root, " root=%d", c->root);
  snprintf(buf, n, "%s %s%s route=%s %s %s count=%zu %s off=%d", kCcCollNames[c->coll], L->name, root,
           R->routeName, relayTypeName(c->dt), ccIsReduce(c->coll) ? relayOpName(c->op) : "-", c->count,
           c->inPlace ? "in-place" : "out-of-place", c->offElems);
}

/* What this rank's part of a call is: element counts of its send and recv buffers, and, in place, the
 * region both live in with each one's element offset inside it. */
typedef struct {
  int g, idx;   /* layout: group and active index; rooted: 0 and the index in the set */
  int isRoot;   /* rooted; broadcast, reduce: the group's root (idx == root) */
  size_t count; /* layout: this group's count */
  size_t sendElems, recvElems;
  int inPlace;
  size_t regionElems, sendAt, recvAt; /* in place */
  size_t blockOff[CC_MAX_RANKS + 1];  /* rooted: block i starts at blockOff[i]; blockOff[n] = sum */
} ccPart;

static inline void ccPartOf(const ccRank* R, const ccLayout* L, const ccCase* c, ccPart* P) {
  memset(P, 0, sizeof *P);
  const int A = L->l.nActive;
  P->g = ccRoleOf(L, R->rank, &P->idx);
  if (ccIsRooted(c->coll)) {
    P->isRoot = R->rank == c->root;
    for (int i = 0; i < A; i++) P->blockOff[i + 1] = P->blockOff[i] + (c->count ? c->count + (size_t)i : 0);
    size_t total = P->blockOff[A], mine = P->g >= 0 ? P->blockOff[P->idx + 1] - P->blockOff[P->idx] : 0;
    int scatter = c->coll == CC_SCATTER;
    P->sendElems = scatter ? (P->isRoot ? total : 0) : mine;
    P->recvElems = scatter ? mine : (P->isRoot ? total : 0);
    P->inPlace = c->inPlace && P->isRoot && P->g >= 0;
    if (P->inPlace) {
      P->regionElems = total;
      P->sendAt = scatter ? 0 : P->blockOff[P->idx];
      P->recvAt = scatter ? P->blockOff[P->idx] : 0;
      /* the in-place block: scatter's recv is inside send, gather's send inside recv */
      if (scatter) P->recvElems = mine;
    }
    return;
  }
  P->count = P->g >= 0 && c->count ? c->count + (size_t)P->g : 0;
  P->isRoot = ccIsPositioned(c->coll) && P->g >= 0 && P->idx == c->root;
  size_t k = P->count;
  switch (c->coll) {
    case CC_AG: P->sendElems = k, P->recvElems = (size_t)A * k; break;
    case CC_RS: P->sendElems = (size_t)A * k, P->recvElems = k; break;
    case CC_AR: P->sendElems = k, P->recvElems = k; break;
    /* broadcast reads the root's send only, reduce writes the root's recv only */
    case CC_BCAST: P->sendElems = P->isRoot ? k : 0, P->recvElems = k; break;
    case CC_REDUCE: P->sendElems = k, P->recvElems = P->isRoot ? k : 0; break;
    default: P->sendElems = (size_t)A * k, P->recvElems = (size_t)A * k; break;
  }
  P->inPlace = c->inPlace && P->g >= 0;
  if (P->inPlace) {
    P->regionElems = P->sendElems > P->recvElems ? P->sendElems : P->recvElems;
    P->sendAt = c->coll == CC_AG ? (size_t)P->idx * k : 0;
    P->recvAt = c->coll == CC_RS ? (size_t)P->idx * k : 0;
  }
}

/* The input element e of this rank's send buffer. */
static inline void ccInput(unsigned char* p, const ccLayout* L, const ccCase* c, const ccPart* P, int rank,
                           size_t e) {
  size_t k = P->count;
  unsigned s = c->salt;
  switch (c->coll) {
    case CC_AG: ccMovePattern(p, c->dt, P->g, P->idx, 0, e, s); break;
    case CC_A2A: ccMovePattern(p, c->dt, P->g, P->idx, (int)(e / k), e % k, s); break;
    case CC_RS: ccStoreValue(p, c->dt, ccReduceValue(c->dt, P->g, P->idx, (int)(e / k), e % k, s)); break;
    case CC_AR:
    case CC_REDUCE: ccStoreValue(p, c->dt, ccReduceValue(c->dt, P->g, P->idx, 0, e, s)); break;
    case CC_BCAST: ccMovePattern(p, c->dt, P->g, P->idx, 0, e, s); break;
    case CC_SCATTER: {
      /* the root's element e: block i for ranks[i] */
      int i = 0;
      while (e >= P->blockOff[i + 1]) i++;
      ccMovePattern(p, c->dt, 0, rank, L->l.ranks[i], e - P->blockOff[i], s);
      break;
    }
    default: ccMovePattern(p, c->dt, 0, rank, c->root, e, s); break; /* gather: my block to the root */
  }
}

/* The expected element e of this rank's recv buffer (want holds up to 8 bytes). */
static inline void ccExpected(unsigned char* want, const ccLayout* L, const ccCase* c, const ccPart* P,
                              int rank, size_t e) {
  const int A = L->l.nActive;
  size_t k = P->count;
  unsigned s = c->salt;
  switch (c->coll) {
    case CC_AG: ccMovePattern(want, c->dt, P->g, (int)(e / k), 0, e % k, s); break;
    case CC_A2A: ccMovePattern(want, c->dt, P->g, (int)(e / k), P->idx, e % k, s); break;
    case CC_RS: ccReduceRef(want, c->dt, c->op, A, P->g, P->idx, e, s); break;
    case CC_AR:
    case CC_REDUCE: ccReduceRef(want, c->dt, c->op, A, P->g, 0, e, s); break;
    case CC_BCAST: ccMovePattern(want, c->dt, P->g, c->root, 0, e, s); break; /* the root's input */
    case CC_SCATTER: ccMovePattern(want, c->dt, 0, c->root, rank, e, s); break;
    default: {
      int i = 0;
      while (e >= P->blockOff[i + 1]) i++;
      ccMovePattern(want, c->dt, 0, L->l.ranks[i], c->root, e - P->blockOff[i], s);
      break;
    }
  }
}

/* The call itself on buffers already prepared (ccLaunch; a test that calls again without touching the
 * stream passes the same ones). */
static inline relayResult_t ccCall(ccRank* R, const ccLayout* L, const ccCase* c, const void* send,
                                   void* recv) {
  const int A = L->l.nActive;
  size_t counts[CC_MAX_RANKS];
  relayResult_t r;
  if (ccIsRooted(c->coll)) {
    for (int i = 0; i < A; i++) counts[i] = c->count ? c->count + (size_t)i : 0;
    r = c->coll == CC_SCATTER ? relayScatter(send, recv, counts, c->dt, c->root, L->l.ranks, A, R->comm, R->s)
                              : relayGather(send, recv, counts, c->dt, c->root, L->l.ranks, A, R->comm, R->s);
  } else {
    for (int g = 0; g < L->l.nGroups; g++) counts[g] = c->count ? c->count + (size_t)g : 0;
    switch (c->coll) {
      case CC_AG: r = relayAllGather(send, recv, counts, c->dt, &L->l, R->comm, R->s); break;
      case CC_RS: r = relayReduceScatter(send, recv, counts, c->dt, c->op, &L->l, R->comm, R->s); break;
      case CC_AR: r = relayAllReduce(send, recv, counts, c->dt, c->op, &L->l, R->comm, R->s); break;
      case CC_BCAST: r = relayBroadcast(send, recv, counts, c->dt, c->root, &L->l, R->comm, R->s); break;
      case CC_REDUCE: r = relayReduce(send, recv, counts, c->dt, c->op, c->root, &L->l, R->comm, R->s); break;
      default: r = relayAllToAll(send, recv, counts, c->dt, &L->l, R->comm, R->s); break;
    }
  }
  return r;
}

/* Enqueue the call (inputs uploaded, outputs poisoned) and return its result; *send / *recv get the
 * buffers it used (NULL where the rank has none). Does not wait. */
static inline relayResult_t ccLaunch(ccRank* R, const ccLayout* L, const ccCase* c, const ccPart* P,
                                     void** sendOut, void** recvOut) {
  size_t es = relayTypeSize(c->dt);
  size_t off = (size_t)c->offElems * es;
  size_t sendBytes = P->sendElems * es, recvBytes = P->recvElems * es;
  size_t need = P->inPlace ? P->regionElems * es : (sendBytes > recvBytes ? sendBytes : recvBytes);
  G_CHECK(2 * CC_GUARD + off + need <= R->poolBytes, "%s %s: pool of %zu bytes too small for %zu",
          kCcCollNames[c->coll], L->name, R->poolBytes, need);
  void *send = NULL, *recv = NULL;
  /* The buffers the rank's role uses (relaycc.h): layout actives both; a scatter root sends and its set
   * members receive; a gather's members send and its root receives; a broadcast's root sends and every
   * active receives; a reduce's actives send and its root receives (NULL for the unused one). */
  int member = P->g >= 0;
  int hasSend = !ccIsRooted(c->coll) ? member : c->coll == CC_SCATTER ? P->isRoot : member;
  int hasRecv = !ccIsRooted(c->coll) ? member : c->coll == CC_SCATTER ? member : P->isRoot;
  if (ccIsPositioned(c->coll)) {
    hasSend = member && (P->isRoot || c->coll == CC_REDUCE);
    hasRecv = member && (P->isRoot || c->coll == CC_BCAST);
  }
  if (hasSend || hasRecv) {
    for (size_t e = 0; e < P->sendElems; e++) ccInput(R->hPat + e * es, L, c, P, R->rank, e);
    G_CUDA(cudaMemsetAsync(R->dRecv, CC_POISON, R->poolBytes, R->s));
    char* region = R->dRecv + CC_GUARD + off;
    if (P->inPlace) {
      send = region + P->sendAt * es;
      recv = region + P->recvAt * es;
    } else {
      G_CUDA(cudaMemsetAsync(R->dSend, CC_POISON, R->poolBytes, R->s));
      if (hasSend) send = R->dSend + CC_GUARD + off;
      if (hasRecv) recv = region;
    }
    if (sendBytes) G_CUDA(cudaMemcpyAsync(send, R->hPat, sendBytes, cudaMemcpyHostToDevice, R->s));
  }
  *sendOut = send;
  *recvOut = recv;
  return ccCall(R, L, c, send, recv);
}

/* After the call's stream work finished: its output against the reference, the guards around it, and (out
 * of place) the send buffer unchanged. Fails the rank naming the case and element. */
static inline void ccVerify(ccRank* R, const ccLayout* L, const ccCase* c, const ccPart* P, const void* send,
                            const void* recv, const char* what) {
  size_t es = relayTypeSize(c->dt);
  size_t off = (size_t)c->offElems * es;
  size_t sendBytes = P->sendElems * es, recvBytes = P->recvElems * es;
  size_t regionBytes = P->inPlace ? P->regionElems * es : recvBytes;
  if (recv) {
    /* The whole region with its guards. */
    size_t span = 2 * CC_GUARD + off + regionBytes;
    G_CUDA(cudaMemcpyAsync(R->hRecv, R->dRecv, span, cudaMemcpyDeviceToHost, R->s));
    gpuWait(R->s, CC_WAIT_S, "copy back");
    for (size_t b = 0; b < CC_GUARD + off; b++)
      G_CHECK(R->hRecv[b] == CC_POISON, "%s: byte %zu before the buffer was written", what,
              CC_GUARD + off - b);
    for (size_t b = 0; b < CC_GUARD; b++)
      G_CHECK(R->hRecv[CC_GUARD + off + regionBytes + b] == CC_POISON,
              "%s: byte %zu past the buffer was written", what, b);
    const char* region = R->dRecv + CC_GUARD + off;
    const unsigned char* got = R->hRecv + CC_GUARD + off + (size_t)((const char*)recv - region);
    unsigned char want[8];
    for (size_t e = 0; e < P->recvElems; e++) {
      const unsigned char* p = got + e * es;
      ccExpected(want, L, c, P, R->rank, e);
      int ok = !memcmp(p, want, es);
      if (!ok && ccIsReduce(c->coll) && c->op == relayAvg && c->dt != relayInt32)
        ok = ccCloseEnough(c->dt, ccLoadValue(p, c->dt), ccLoadValue(want, c->dt));
      if (!ok) {
        unsigned long long gv = 0, wv = 0;
        memcpy(&gv, p, es);
        memcpy(&wv, want, es);
        G_CHECK(0, "%s: rank %d (group %d, index %d): element %zu of %zu: got 0x%llx, want 0x%llx", what,
                R->rank, P->g, P->idx, e, P->recvElems, gv, wv);
      }
    }
  }
  /* In place, the rest of the region is the caller's and may hold anything (RS: the other blocks of send);
   * out of place, send must be intact. */
  if (!P->inPlace && sendBytes) {
    G_CUDA(cudaMemcpyAsync(R->hSend, send, sendBytes, cudaMemcpyDeviceToHost, R->s));
    gpuWait(R->s, CC_WAIT_S, "copy back send");
    G_CHECK(!memcmp(R->hSend, R->hPat, sendBytes), "%s: the send buffer was modified", what);
  }
}

/* One whole case: launch, wait (with a deadline), verify. */
static inline void ccRunCase(ccRank* R, const ccLayout* L, const ccCase* c) {
  char what[256];
  ccDescribe(what, sizeof what, R, L, c);
  ccPart P;
  ccPartOf(R, L, c, &P);
  void *send = NULL, *recv = NULL;
  relayResult_t r = ccLaunch(R, L, c, &P, &send, &recv);
  G_CHECK(r == relaySuccess, "%s: %s: %s", what, relayGetErrorString(r), relayGetLastError(R->comm));
  gpuWait(R->s, CC_WAIT_S, what);
  R->calls++;
  ccVerify(R, L, c, &P, send, recv, what);
}

#endif
