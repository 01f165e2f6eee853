/*
 * The plan IR: for one call signature, the program of every rank.
 *
 * A plan has nSteps steps; every rank has a program of exactly nSteps steps
 * (most may be empty for it). A step is a set of sends and receives that
 * progress together (one transport group), followed by local ops in order.
 * A send in step s to peer p is matched by a receive in step s on p from this
 * rank; the k-th send from r to p in a step matches the k-th receive on p
 * from r in that step, with the same element count. A send to oneself is
 * matched by a receive from oneself (the transport copies locally).
 *
 * Buffers are named, not pointed at: the caller's send buffer, the caller's
 * recv buffer, or an internal scratch slot. Offsets and counts are elements
 * of the call's datatype. Helpers never name SEND or RECV (the checker holds
 * us to it). Local ops: COPY dst <- src, and REDUCE dst <- op(src[0..k-1]) in
 * that fixed order, divided by `divisor` when > 1 (avg), accumulating in fp32
 * for 16-bit floats. An op's lane is 0 (in order after the step's transfers)
 * or 1 (a side lane: it may overlap later steps; the executor joins side
 * lanes before the call returns, and no later step may touch what it reads
 * or writes).
 *
 * Plans are pure functions of planKey; the same plan runs on the shm
 * transport, on NCCL, in the simulator and in the reference executor.
 */
#ifndef RELAY_PLAN_H_
#define RELAY_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PLAN_BUF_SEND = 0, PLAN_BUF_RECV = 1, PLAN_BUF_SCRATCH = 2 };
#define PLAN_MAX_SLOTS 8 /* scratch slots per rank */
#define PLAN_MAX_SRCS 64 /* inputs of one reduce */

typedef struct {
  uint8_t buf;  /* PLAN_BUF_* */
  uint8_t slot; /* scratch slot when buf == PLAN_BUF_SCRATCH */
  uint64_t off; /* elements */
} planRef;

typedef struct {
  int32_t peer;
  planRef ref;
  uint64_t count; /* elements, > 0 */
} planXfer;

/* PLAN_OP_ONESHOT: a collective push-reduce among the active ranks of
 * `group` (every active rank of it has exactly one, in the same step; helpers
 * have none). dst = this rank's RECV, src[0] = its SEND, count = its output
 * count. All-reduce and all-gather push the whole send buffer to every peer;
 * reduce-scatter and all-to-all push block j (send offset j*count) to active
 * j. All-reduce and reduce-scatter reduce the A contributions to the output
 * in active-index order (divided by divisor when > 1), so all ranks agree
 * bitwise; all-gather and all-to-all place contribution j at RECV offset
 * j*count. The transport runs it (oneshot op). */
/* PLAN_OP_SUBCOLL: a sub-collective -- a layout collective among a list of
 * comm ranks (plan->subs[group]: the collective, the members in order, the
 * count as the API takes it) that the transport runs as its library's own
 * collective (NCCL on a sub-communicator of those ranks) or, without one,
 * the executor as a direct exchange. It is how a plan crosses nodes
 * (plan_hier.c). Member i of the list reads src[0] (count elements;
 * reduce-scatter and all-to-all: n blocks of count, block j for member j)
 * and writes dst (count; all-gather and all-to-all: n blocks, block j from
 * member j); reductions run in member order, divided by divisor when > 1.
 * Every member has exactly one op of that sub-collective in the same step,
 * as the only item of its step (no transfers, no other op), on lane 0. */

typedef struct {
  int32_t coll;      /* relayCollective_t, one of the layout collectives */
  int32_t nRanks;    /* members, >= 1 */
  uint32_t rankBase; /* into plan->subRanks */
  uint32_t pad;
  uint64_t count; /* the collective's count (per member, as the API takes it) */
} planSubColl;

/* Elements member of sub-collective sc reads at src and writes at dst. */
static inline uint64_t planSubCollIn(const planSubColl* sc) {
  return relayCollSendsBlocks((relayCollective_t)sc->coll) ? (uint64_t)sc->nRanks * sc->count : sc->count;
}
static inline uint64_t planSubCollOut(const planSubColl* sc) {
  return relayCollGathers((relayCollective_t)sc->coll) ? (uint64_t)sc->nRanks * sc->count : sc->count;
}
/* PLAN_OP_BW: the same contract as PLAN_OP_ONESHOT (what lands in dst), but
 * the transport moves the data in tiles of `tile` elements through a ring
 * of `ring` staging slots per source in each peer's memory, pipelined, so
 * staging stays bounded whatever the count (bw op; plan_bw.c). form
 * PLAN_BW_PUSH pushes every contribution to its consumer, as the one-shot;
 * PLAN_BW_TWOSHOT (all-reduce, A > 2) reduce-scatters shards of
 * planBwShard elements among the actives, then all-gathers the reduced
 * shards: 2(A-1)/A of the count per rank instead of. */
enum { PLAN_OP_COPY = 0, PLAN_OP_REDUCE = 1, PLAN_OP_ONESHOT = 2, PLAN_OP_SUBCOLL = 3, PLAN_OP_BW = 4 };
enum { PLAN_BW_PUSH = 0, PLAN_BW_TWOSHOT = 1 };
/* Ops that run as one collective transport call among a group's actives. */
static inline int planOpIsCollective(int kind) { return kind == PLAN_OP_ONESHOT || kind == PLAN_OP_BW; }
/* Active ranks a one-shot op serves: the GPU kernel keeps one pointer per
 * peer in its argument block (the seed's kOneShotMaxRanks = 8). */
#define RELAY_ONESHOT_MAX_ACTIVE 8
/* Staging slot bytes per source rank when RELAYCC_ONESHOT_MAX_BYTES is unset:
 * the seed's gate, the last power of two where its kernel beat NCCL's
 * (crossover measured between 1 and 2.25 MiB on MI350X). */
#define RELAY_ONESHOT_DEFAULT_MAX_BYTES (1u << 20)
/* The largest gate (the range of RELAYCC_ONESHOT_MAX_BYTES): 1 GiB slots. */
#define RELAY_ONESHOT_GATE_MAX (1u << 30)
/* The bandwidth route's settings (comm/params.h: RELAYCC_BW_TILE_BYTES,
 * RELAYCC_BW_RING, the comm's agreed values) reach the builder through the
 * key (planKey.bwTileBytes, bwRing; 0: these defaults, for tools and tests
 * without a comm), so a plan stays a pure function of its key. */
#define RELAY_BW_DEFAULT_TILE_BYTES (128u << 10)
#define RELAY_BW_DEFAULT_RING 16
#define RELAY_BW_MAX_RING 64
/* Two-shot shards: active j owns [j * shard, min((j+1) * shard, count)) (the
 * last ones may be short or empty); shard is a multiple of 16 elements, so
 * every shard starts 16-byte aligned for any element size (the GPU mover's
 * vector width). */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define PLAN_HD __host__ __device__
#else
#define PLAN_HD
#endif
static inline PLAN_HD uint64_t planBwShard(uint64_t count, int A) {
  uint64_t s = (count + (uint64_t)A - 1) / (uint64_t)A;
  return (s + 15) / 16 * 16;
}
/* Active i's shard of a count cut in shards of `shard` (planBwShard): elements [*at, *at + *len); the last
 * ones may be short or empty. */
static inline PLAN_HD void planBwShardOf(uint64_t count, uint64_t shard, int i, uint64_t* at, uint64_t* len) {
  *at = (uint64_t)i * shard < count ? (uint64_t)i * shard : count;
  *len = count - *at < shard ? count - *at : shard;
}
/* Item u of a bw op, as every transport cuts it: the elements source `from`
 * sends to active `to` start at *off (of its send buffer; in the two-shot's
 * second phase, u >= T1, of its output) and number *len (0: an empty item,
 * still hand-shaken). Push form (shard 0): tile u of the contribution `to`
 * is owed, which starts at to * stride (0: all-reduce, all-gather; count:
 * reduce-scatter, all-to-all). Two-shot: tile u of the shard `to` owns, then
 * tile u - T1 of `from`'s own (reduced) shard. */
static inline PLAN_HD void planBwItem(uint64_t count, uint64_t stride, uint64_t tile, uint64_t shard,
                                      uint64_t T1, uint64_t u, int from, int to, uint64_t* off,
                                      uint64_t* len) {
  uint64_t base, end;
  if (!shard) {
    base = (uint64_t)to * stride;
    end = base + count;
    base += u * tile;
  } else {
    uint64_t st, span;
    planBwShardOf(count, shard, u < T1 ? to : from, &st, &span);
    end = st + span;
    base = st + (u < T1 ? u : u - T1) * tile;
  }
  *off = base;
  *len = base < end ? (end - base < tile ? end - base : tile) : 0;
}

typedef struct {
  uint8_t kind;    /* PLAN_OP_* */
  uint8_t lane;    /* 0 main, 1 side */
  uint16_t nsrc;   /* 1 for COPY */
  int32_t divisor; /* > 1: divide the reduction by it (avg) */
  planRef dst;
  uint32_t srcBase; /* index into plan->srcs */
  int32_t group;  /* PLAN_OP_ONESHOT, PLAN_OP_BW: the layout group; PLAN_OP_SUBCOLL: index into plan->subs */
  uint64_t count; /* elements, > 0 */
  /* PLAN_OP_ONESHOT and PLAN_OP_BW only (0 otherwise), set by the builder from the key so
   * that the executor, the reference, the simulator and the checker read
   * them instead of re-deriving them from the collective: active j's
   * contribution to active i starts at j's SEND + i * srcStride elements (0:
   * all-reduce, all-gather; count: reduce-scatter, all-to-all), and gather
   * set (all-gather, all-to-all) places contribution j at RECV + j * count
   * instead of reducing. */
  uint64_t srcStride;
  uint8_t gather;
  /* PLAN_OP_ONESHOT of a rooted call (broadcast, reduce: the key's root position), else -1: only the
   * root's contribution moves, to every peer (gather set: broadcast, placed at dst), or only the
   * peers', to the root (a reduce, in active-index order into the root's dst; a peer's dst is not
   * written). */
  int8_t root;
  uint32_t tile; /* PLAN_OP_BW: elements per tile (0 otherwise) */
  uint16_t ring; /* PLAN_OP_BW: staging slots per source */
  uint8_t
      form; /* PLAN_OP_BW: PLAN_BW_*; PLAN_OP_ONESHOT: PLAN_BW_TWOSHOT for an all-reduce's two-shot form */
} planOp;

typedef struct {
  uint32_t sendBase, nSend;
  uint32_t recvBase, nRecv;
  uint32_t opBase, nOp;
  /* The P2P operation (a p2pOp of src/p2p) of the step's transfers, which
   * the executor passes to the transport's group and the simulator splits
   * by: alike on every rank of a step (the checker holds us to it). */
  uint32_t p2pOp;
} planStep;

typedef struct {
  int activeGroup; /* -1: helper in every group (a rooted call's root is in group 0) */
  int activeIndex; /* index within its group, -1 when not active */
  uint64_t scratchElems[PLAN_MAX_SLOTS];
  uint64_t sendElems, recvElems; /* extent of the caller buffers this rank passes */
} planRank;

/* The call signature. ranks has nGroups*nActive entries, counts nGroups
 * (planKeyNumCounts). Rooted collectives: nGroups == 1, ranks is the set,
 * counts has one entry per rank of the set (what ranks[i] receives in a
 * scatter, sends in a gather), and root is a comm rank, in the set or not. */
typedef struct planKey {
  relayCollective_t coll;
  int nranks;
  int nGroups;
  int nActive;
  const int* ranks;
  const size_t* counts;
  relayDataType_t dtype;
  relayRedOp_t op;
  int route; /* relayRoute_t, never Auto here */
  int depth; /* >= 1 */
  int root;  /* rooted collectives only (0 otherwise) */
  /* The comm's nodes: nodeOf[r] for each of nranks ranks, or NULL for one
   * node. A layout collective on a comm of several nodes is built by
   * plan_hier.c (groups inside a node helped by that node's ranks, groups
   * spanning nodes hierarchically); route is then the within-node route. */
  const int* nodeOf;
  /* The bandwidth route's agreed settings, set by core from the comm's
   * RELAYCC_BW_TILE_BYTES and RELAYCC_BW_RING (0: RELAY_BW_DEFAULT_*; a ring
   * below 0: the route is off, its builder serves nothing). Hashed by the
   * plan and route caches with the rest of the key. */
  uint32_t bwTileBytes;
  int bwRing;
  /* The one-shot route's gate, RELAYCC_ONESHOT_MAX_BYTES as the comm agreed it, set by core with the
   * bandwidth settings (0: RELAY_ONESHOT_DEFAULT_MAX_BYTES; below 0: the route is off): the one value
   * the router's pricing and the route's prepare read (planOneShotGate). */
  int oneShotGate;
  /* 1: a broadcast's block rides the call's shape agreement (the transport's RELAY_TP_CAP_CARRY, check mode
   * 0, no direct windows; core/api.c agreeOnShape), set by core with the settings above: the one-shot is
   * then priced as the root's one copy into its slot, one hop and each member's copy out (sim.c). */
  int carry;
  /* The per-rank input bytes from which an all-reduce run by the one-shot takes its two-shot form (the
   * transport's RELAY_TP_CAP_ONESHOT_TWOSHOT; RELAYCC_ONESHOT_TWOSHOT_BYTES, the comm's agreed value), set by
   * core with the settings above; 0: never (tools, tests and the GPU's keys). */
  uint32_t twoShotFrom;
  /* planKeyShapeHash(this key), memoized by core's callKey (0: not memoized; planKeyHash then computes it):
   * a call's shape digest, route cache and plan cache hashed the same head and arrays three times, 12% of a
   * 2-rank 4 KiB all-to-all's samples in the call; once, the call's min went 0.39-0.40 -> 0.36-0.37 us,
   * median 0.57 -> 0.54 (10 alternations, 2-vCPU EPYC, docs/perf/2026-12-06-cpu-oneshot-overhead-2core.md).
   * Every field but route and depth goes into it: a copy that changes any other field (plan_bcast.c's
   * reduce-scatter key) must zero it. */
  uint64_t shapeHash;
} planKey;

/* A key of the call's shape, every other field 0 (op sum, route 0 = auto, one node, root 0, the bw route's
 * defaults): what tools and tests start from before they set op, route and depth (depth 0 is not a valid
 * key: the builders want >= 1). */
static inline planKey planKeyInit(relayCollective_t coll, int nranks, int nGroups, int nActive,
                                  const int* ranks, const size_t* counts, relayDataType_t dtype) {
  return (planKey){.coll = coll,
                   .nranks = nranks,
                   .nGroups = nGroups,
                   .nActive = nActive,
                   .ranks = ranks,
                   .counts = counts,
                   .dtype = dtype};
}

/* 1 when key's comm spans nodes (its layout collectives go to plan_hier.c). */
int planKeyMultiNode(const planKey* k);

/* The one-shot gate (RELAYCC_ONESHOT_MAX_BYTES, the comm's agreed value;
 * tools and tests without a comm pass the default). The builder checks the
 * physical rule (what one source stages per destination, count * elemSize,
 * fits the slot: relayOneShotSlotFits); the router prices the one-shot only
 * within the gate on the per-rank input (relayOneShotFits, stricter for
 * reduce-scatter and all-to-all), and core passes RELAY_TP_CAP_ONESHOT
 * only for calls that fit, so a plan stays a pure function of its key. */
int relayOneShotSlotFits(const planKey* k, uint64_t gateBytes);
int relayOneShotFits(const planKey* k, uint64_t gateBytes);
/* The key's one-shot gate in bytes (0: off). */
uint64_t planOneShotGate(const planKey* k);
/* 1: key's broadcast, run by the one-shot, carries its block in the call's shape agreement (planKey.carry):
 * one group of 2 to RELAY_ONESHOT_MAX_ACTIVE actives, the root among them, a count within the gate. The one
 * test core (api.c, which carries), the plan (relayPlan.carried, which sim.c prices) and the route table
 * (which offers it to the router) read. */
int planKeyCarried(const planKey* k);
/* 1: key's all-reduce, run by the one-shot, takes the two-shot form (planKey.twoShotFrom; PLAN_BW_TWOSHOT in
 * its ops' form): what the builder and sim.c read. */
int planKeyOneShotTwoShot(const planKey* k);
/* The key's tile bytes and ring as the builder uses them (plan_bw.c); ring 0: the route is off. */
size_t planBwTileBytes(const planKey* k);
int planBwRing(const planKey* k);
/* Sets the key's fields that come from the comm's agreed settings (the bandwidth route's tile and ring),
 * so plans stay pure functions of keys: core's key builder and the NCCL transport's region size read
 * the same (plan_bw.c). */
struct relayComm;
void relayCommKeySettings(const struct relayComm* comm, planKey* key);

static inline int planKeyNumCounts(const planKey* k) {
  return relayCollNumCounts(k->coll, k->nGroups, k->nActive);
}
/* The one writer of a key's fixed fields, in one order: the plan cache (core/plancache.c), the route
 * cache (route/route.c: caps in the route's word, no depth) and the call's shape digest (core/api.c) all
 * compare and hash these words, then the arrays (planKeyHash). */
enum { PLAN_KEY_W_ROUTE = 6, PLAN_KEY_W_DEPTH = 7, PLAN_KEY_WORDS = 14 };
void planKeyHead(const planKey* k, int32_t head[PLAN_KEY_WORDS]);
/* The head and the key's arrays hashed in place (no serialized copy per call): the key's shape hash (its
 * memo, else computed), then head's route and depth words. head is planKeyHead(k) but for those two words
 * (the route cache puts caps in the route's). */
uint64_t planKeyHash(const int32_t head[PLAN_KEY_WORDS], const planKey* k);
/* Every word of planKeyHead but route and depth, then the arrays: what planKeyHash starts from. */
uint64_t planKeyShapeHash(const planKey* k);
/* A key's ranks and counts (the route and plan caches keep a copy to compare
 * keys in full, after their fixed fields, which fix the lengths, matched):
 * hashed on from h, copied into one allocation (NULL: out of memory, free()
 * it), compared with such a copy. */
uint64_t planKeyArraysHash(uint64_t h, const planKey* k);
unsigned char* planKeyArraysDup(const planKey* k);
int planKeyArraysEqual(const unsigned char* copy, const planKey* k);

typedef struct relayPlan {
  relayCollective_t coll;
  int nranks, nGroups, nActive;
  int* ranks;     /* copy, nGroups*nActive */
  size_t* counts; /* copy, planKeyNumCounts entries */
  relayDataType_t dtype;
  relayRedOp_t op;
  int route, depth;
  size_t elemSize;
  int nSteps;
  planRank* rank;  /* [nranks] */
  planStep* steps; /* [nranks * nSteps]: steps[r * nSteps + s] */
  planXfer* sends;
  planXfer* recvs;
  planOp* ops;
  planRef* srcs;
  planSubColl* subs; /* PLAN_OP_SUBCOLL's sub-collectives */
  int32_t* subRanks;
  uint32_t nSubs, nSubRanks;
  uint32_t nSends, nRecvs, nOps, nSrcs;
  uint32_t maxXfersPerStep; /* over ranks and steps, for executors */
  int root;                 /* rooted collectives: the root (0 otherwise) */
  int carried;              /* the one-shot broadcast of a key with carry (planKey.carry): sim.c prices it */
} relayPlan;

static inline const planStep* planRankStep(const relayPlan* p, int rank, int step) {
  return &p->steps[(size_t)rank * (size_t)p->nSteps + (size_t)step];
}

/* ---- building ---------------------------------------------------------- */

typedef struct planBuilder planBuilder;

planBuilder* planBuilderNew(const planKey* key);
void planBuilderFree(planBuilder* b);
const planKey* planBuilderKey(const planBuilder* b);
/* Appends a step and returns its index. */
int planAddStep(planBuilder* b);
/* Zero counts are dropped (both ends apply the same rule). */
void planSend(planBuilder* b, int rank, int step, int peer, planRef ref, uint64_t count);
void planRecv(planBuilder* b, int rank, int step, int peer, planRef ref, uint64_t count);
void planCopy(planBuilder* b, int rank, int step, planRef dst, planRef src, uint64_t count);
void planReduce(planBuilder* b, int rank, int step, planRef dst, const planRef* srcs, int nsrc,
                uint64_t count, int divisor);
/* A PLAN_OP_ONESHOT of active `rank` of `group` (see the op's comment);
 * its srcStride and gather follow from the key's collective. */
void planOneShot(planBuilder* b, int rank, int step, int group, planRef dst, planRef src, uint64_t count,
                 int divisor, int form);
/* A sub-collective among ranks[0..n) (see PLAN_OP_SUBCOLL); returns its
 * index for planSubCollOp, -1 when out of memory (the plan then fails). */
int planSubCollNew(planBuilder* b, relayCollective_t coll, const int* ranks, int n, uint64_t count);
/* Member `rank`'s op of sub-collective sc in step. */
void planSubCollOp(planBuilder* b, int rank, int step, int sc, planRef dst, planRef src, int divisor);
/* Copies every rank program of `sub` (a plan of a sub-comm) into b: sub's
 * rank i is b's rank map[i], its step s is b's step stepBase + s (the steps
 * must exist), its SEND is sendRef[i] and RECV recvRef[i], its scratch
 * slots keep their numbers; every op lands on lane 0 (a side-lane op could
 * collide with what the next spliced plan does in the same slot). Scratch
 * needs carry over. */
void planSplice(planBuilder* b, const relayPlan* sub, const int* map, int stepBase, const planRef* sendRef,
                const planRef* recvRef);
/* A PLAN_OP_BW of active `rank` of `group` (see the op's comment). */
void planBw(planBuilder* b, int rank, int step, int group, planRef dst, planRef src, uint64_t count,
            int divisor, uint32_t tile, int ring, int form);
void planSetLane(planBuilder* b, int lane); /* lane for ops added from now on (default 0) */
/* The depth the plan really has (default key->depth): a builder that clamps
 * a depth (fused calls, messages too small to tile) says so, and the router
 * sees a depth it asked for and did not get. */
void planSetDepth(planBuilder* b, int depth);
/* Scratch slot `slot` of `rank` holds at least `elems` elements. */
void planNeedScratch(planBuilder* b, int rank, int slot, uint64_t elems);
/* Finishes the plan (sorts items into rank programs). NULL on allocation failure. */
relayPlan* planBuilderFinish(planBuilder* b);

void relayPlanFree(relayPlan* p);

static inline planRef planSendRef(uint64_t off) {
  planRef r = {PLAN_BUF_SEND, 0, off};
  return r;
}
static inline planRef planRecvRef(uint64_t off) {
  planRef r = {PLAN_BUF_RECV, 0, off};
  return r;
}
static inline planRef planScratchRef(int slot, uint64_t off) {
  planRef r = {PLAN_BUF_SCRATCH, (uint8_t)slot, off};
  return r;
}
static inline planRef planRefAdd(planRef r, uint64_t elems) {
  r.off += elems;
  return r;
}

/* Layout facts every builder needs. */
int planActiveGroupOf(const planKey* k, int rank, int* activeIndex); /* -1 when helper */
/* The extents (elements) of the caller buffers rank passes in a call of key k:
 * what planRank.sendElems / recvElems hold in its plan (0: none). */
void planCallerExtents(const planKey* k, int rank, uint64_t* sendElems, uint64_t* recvElems);
static inline int planActiveRank(const planKey* k, int group, int index) {
  return k->ranks[group * k->nActive + index];
}

/* Validate the plan's structural invariants (matching, ordering, coverage,
 * helpers never touching caller memory, no overlap of a step's receive
 * targets with its send sources). 0 when sound; otherwise writes a message. */
int relayPlanCheck(const relayPlan* p, char* err, size_t errlen);

/* Bytes each rank sends to each peer in step s: out[src * nranks + dst]
 * (self transfers excluded). out has nranks*nranks entries. */
void relayPlanStepTraffic(const relayPlan* p, int step, uint64_t* out);
/* Sum over steps of the busiest directed link's bytes. */
uint64_t relayPlanCriticalPathBytes(const relayPlan* p);

/* Print rank programs (rank < 0: all ranks). */
void relayPlanPrint(const relayPlan* p, int rank, void* file /* FILE* */);

#ifdef __cplusplus
}
#endif
#endif
