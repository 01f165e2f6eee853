/*
 * The transport interface: what the executor needs to run one rank's program.
 * A transport knows no collective and no plan: it moves bytes between ranks in
 * groups, runs the reduce/copy family locally, owns scratch, and offers the
 * small host-side agreement that core uses for check mode and votes.
 *
 * Every call gets the comm; transport state lives behind comm->tpState. A
 * failing call records its error with relaySetError and returns the result:
 * the prefix says the function, rank, call and step (comm->curCallName,
 * callSeq, curStep: common.h), the text only what happened (the peer, the
 * value). Errors after data may have moved leave the comm failed.
 */
#ifndef RELAY_TRANSPORT_H_
#define RELAY_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* The largest record of one agree() round, on every transport. */
#define RELAY_TP_AGREE_MAX 256

typedef struct {
  int peer;
  void* ptr; /* send: read from; recv: written to */
  size_t bytes;
} relayXferDesc;

/* What a point-to-point or per-peer transfer carries besides its bytes (core/pt2pt.c sets
 * comm->xferTags for the group it runs; NULL for a plan's group). seq is the pair's sequence number
 * (RELAY_TAG_PAIR set: relaySend/relayRecv, counted per ordered pair outside the call numbering) or
 * the call's number (relayAllToAllv); count and dtype are the caller's. flags: RELAY_TAG_REJECT on a
 * send says the sender rejected its transfer (it sends no bytes: its peer's receive fails naming it);
 * RELAY_TAG_DRAIN on a receive takes whatever the matching send carries into nothing (the receiver
 * rejected its own transfer but keeps the pair in step). A transport that carries tags (shm) checks
 * each pair's tags and drains a transfer whose tags differ, so the receiver's buffer stays untouched and
 * the pair in step; one that does not (NCCL) has core check them on its control plane first. */
enum { RELAY_TAG_REJECT = 1, RELAY_TAG_DRAIN = 2, RELAY_TAG_FAILED = 4 };
/* RELAY_TAG_FAILED is the transport's answer: it sets it on a receive's tag whose transfer did not
 * arrive whole (drained: the pair disagreed, or an end rejected it), so core knows which transfers of a
 * check round (core/pt2pt.c: an ACK tag carries a receive's tag back to its sender) failed on each end. */
#define RELAY_TAG_PAIR (1ull << 63)
#define RELAY_TAG_ACK (1ull << 62)
typedef struct {
  uint64_t seq;
  uint64_t count;
  int32_t dtype;
  int32_t flags;
} relayXferTag;

/* One rank's part of a one-shot push-reduce (plan op PLAN_OP_ONESHOT) among
 * nActive ranks: push my contribution to every peer's staging slot for me,
 * signal, wait for every peer's, then dst = op(contribution of active 0, ...,
 * of active nActive-1) (/ divisor when > 1), my own read from src. Active j's
 * contribution to me starts at its src + me * srcStride elements (srcStride
 * 0: all-reduce and all-gather, count: reduce-scatter and all-to-all). With
 * gather set (all-gather, all-to-all) nothing is reduced: active j's
 * contribution lands in dst + j * count elements, mine included. dst may
 * alias src (a reduce's element for element; a gather's own block). */
#define RELAY_TP_ONESHOT_MAX 8 /* == RELAY_ONESHOT_MAX_ACTIVE (plan.h) */
typedef struct {
  void* dst;
  const void* src;
  size_t count;     /* output elements */
  size_t srcStride; /* elements */
  relayDataType_t dtype;
  relayRedOp_t op;
  int divisor;
  int gather; /* 1: contributions side by side in dst, no reduce */
  /* A rooted call's root (an active index; -1: none): only the root pushes, its block alone placed at
   * dst (gather: a broadcast), or only the peers push, to the root, which reduces all A (a reduce; a
   * peer's dst is not written). Pairs without the root move nothing; a root's pair hand-shakes both
   * ways, the way without data as an empty push, so the pair's epochs stay in step. The transports
   * with RELAY_TP_CAP_ONESHOT_ROOTED serve it. */
  int root;
  /* 1 (an all-reduce; RELAY_TP_CAP_ONESHOT_TWOSHOT): active j reduces shard j (planBwShard elements) of
   * every active's input, staged once by each in its own area, then every active copies each reduced shard
   * out: the same bits as the push form's reduce. */
  int twoShot;     /* (a bandwidth op's form is relayBwDesc.twoShot; this one stays 0 there) */
  int nActive, me; /* me: this rank's active index */
  int ranks[RELAY_TP_ONESHOT_MAX]; /* comm rank of each active index */
} relayOneShotDesc;

/* One rank's part of a bandwidth op (PLAN_OP_BW): the one-shot's contract
 * (what lands in dst, as c says), moved in tiles of tileElems through a ring
 * of `ring` staging slots per source in each peer's region. twoShot
 * (all-reduce only): active j reduces shard j (planBwShard elements) from
 * every active's tiles, then pushes the reduced shard to every peer, who
 * places it. Per ordered pair, both ends count the tiles they moved since
 * the region was created (the epochs): the pair's tile number f (from 1)
 * goes to slot (f-1) % ring, and a producer reuses a slot only after the
 * consumer acknowledged the tile that was in it (tile f - ring). */
typedef struct {
  relayOneShotDesc c;
  size_t tileElems;
  int ring;
  int twoShot;
  /* The direct path (win non-NULL): the buffers peers access lie in win at
   * these byte offsets on every active (core/window.c: all-gather and
   * all-to-all the recv, reduce-scatter the send, all-reduce both; the
   * others' offset 0). Peers then read each other's send and write each
   * other's recv in place of the staging ring; tileElems still bounds what
   * a rank pulls at once. */
  const struct relayWindow* win;
  size_t sendOff, recvOff;
} relayBwDesc;

/* RELAYCC_BW_MOVER's choices (comm/params.h): what the NCCL direct path moves bytes with. */
enum { RELAY_BW_MOVER_AUTO = 0, RELAY_BW_MOVER_SM = 1, RELAY_BW_MOVER_CE = 2 };

/* A registered window (relayCommRegister; core/window.c keeps the comm's). */
struct relayWindow {
  struct relayComm* comm;
  uint32_t id; /* 1, 2, ...: the comm's registrations in order, alike on every rank */
  char* base;  /* this rank's buffer (NULL: none on this rank) */
  size_t bytes;
  int direct; /* winRegister's vote: every rank reaches every peer's buffer */
  void* tp;   /* the transport's state */
};

/* What a transport runs besides send/recv groups (relayTransportOps.caps):
 * a route that needs one (route/table.c) is skipped where it is missing. */
enum {
  RELAY_TP_CAP_NATIVE = 1,  /* native collectives: ops nativePrepare and native (NCCL) */
  RELAY_TP_CAP_ONESHOT = 2, /* the one-shot push-reduce: ops oneshotPrepare and oneshot */
  RELAY_TP_CAP_BW = 4,      /* the bandwidth route's tiled pushes: ops bwPrepare and bw */
  /* Check mode 0 finds shapes that differ (shm): messages carry each call's number and shape digest and a
   * wait judges a peer that waits in the same call with another shape; its agree is host memory, cheap
   * enough that rooted calls (scatter, gather) take the call's agreement in check mode 0 too. */
  RELAY_TP_CAP_SHAPES = 8,
  /* The one-shot's rooted form (relayOneShotDesc.root: broadcast and reduce), beside RELAY_TP_CAP_ONESHOT:
   * shm's and the GPU kernel's (nccl/oneshot.cu); the router takes it only when forced (route/table.c). */
  RELAY_TP_CAP_ONESHOT_ROOTED = 16,
  /* The bandwidth route's rooted form (relayBwDesc.c.root: broadcast and reduce), beside RELAY_TP_CAP_BW:
   * shm's (each peer reads the root's buffer once, or the root reads each peer's); the GPU kernel
   * (nccl/bw.cu) has none, so the router does not price it there and a forced one is declined. */
  RELAY_TP_CAP_BW_ROOTED = 32,
  /* A broadcast's data rides the call's shape agreement (shm, with RELAY_TP_CAP_SHAPES and the one-shot):
   * the root copies its block into a slot of its one-shot region before it publishes its record, and each
   * member copies it out once every record is in (ops carryStage, carryTake; core/api.c agreeOnShape). One
   * cross-core hop a call where the one-shot's exchange after the agreement took two (route/table.c prices
   * it). */
  RELAY_TP_CAP_CARRY = 64,
  /* The one-shot's two-shot all-reduce (relayOneShotDesc.twoShot, beside RELAY_TP_CAP_ONESHOT): each active
   * stages its input once in an area of its own that every peer reads, not once per peer (shm's,
   * transport/shm/oneshot.c); core puts it in the key (planKey.twoShotFrom), so the GPU's keys never ask. */
  RELAY_TP_CAP_ONESHOT_TWOSHOT = 128,
};

typedef struct relayTransportOps {
  const char* name;
  unsigned caps; /* RELAY_TP_CAP_* bits: the ops each bit names are set */
  /* All sends and receives progress together; returns when all are done.
   * Several transfers with one peer in a group are matched in order. A
   * transfer with peer == own rank pairs with the own-rank receive in order.
   * p2pOp is the group's P2P operation (a p2pOp of src/p2p: the plan step's,
   * P2P_OP_SENDRECV for groups driven directly): a transport that splits
   * transfers into channel parts takes the part rule from it, and both ends
   * of a transfer pass the same; one that does not split ignores it. */
  relayResult_t (*group)(struct relayComm* comm, const relayXferDesc* sends, int nSends,
                         const relayXferDesc* recvs, int nRecvs, int p2pOp, relayStream_t stream);
  /* dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) (/ divisor when > 1), in that
   * order; dst may alias any src element-for-element. lane 1 = side lane. */
  relayResult_t (*reduce)(struct relayComm* comm, void* dst, const void* const* srcs, int nsrc, size_t count,
                          relayDataType_t dt, relayRedOp_t op, int divisor, int lane, relayStream_t stream);
  relayResult_t (*copy)(struct relayComm* comm, void* dst, const void* src, size_t bytes, int lane,
                        relayStream_t stream);
  /* Grow-only scratch cache: slot holds at least bytes; *ptr is stable until
   * the next growth of that slot. */
  relayResult_t (*scratch)(struct relayComm* comm, int slot, size_t bytes, void** ptr, relayStream_t stream);
  /* Join side lanes into the caller's stream (no-op where lanes are serial). */
  relayResult_t (*join)(struct relayComm* comm, relayStream_t stream);
  /* Host-synchronous all-gather of a small record among all comm ranks
   * (bytes <= RELAY_TP_AGREE_MAX): all[r * bytes ...] = rank r's record.
   * Callers go through comm/vote.h (relayVote, relayAgree); every rank must
   * call it on the same call. */
  relayResult_t (*agree)(struct relayComm* comm, const void* mine, void* all, size_t bytes);
  relayResult_t (*barrier)(struct relayComm* comm);
  /* Tell peers this rank rejected call callSeq (core counts every call on
   * every rank, rejected ones too) and takes no part in it: a peer waiting on
   * it in that call fails fast instead of at the deadline; one in a later
   * call ignores the notice. May be NULL. */
  void (*reject)(struct relayComm* comm);
  /* Mark failed and wake any wait (safe from another thread). */
  void (*abort)(struct relayComm* comm);
  /* This rank failed inside a call before doing its part (out of memory for
   * scratch, say): mark the comm failed and tell the peers, so that their
   * waits on this rank end now (relayRemoteError naming it), not at the
   * deadline. May be NULL (NCCL: peers wait inside GPU kernels, which no
   * host message reaches). */
  void (*fail)(struct relayComm* comm);
  void (*destroy)(struct relayComm* comm);
  /* One-shot (set with RELAY_TP_CAP_ONESHOT, else NULL). oneshotPrepare is COLLECTIVE
   * over all comm ranks, helpers too, on the same call: the first call
   * creates this comm's staging region with slots of slotBytes (later calls
   * are no-ops, larger slotBytes than created are declined), and all ranks
   * vote, so they enable or decline together. relayNotSupported: declined
   * (sticky, every rank alike). When stream is being captured into a graph
   * and no region exists, it declines WITHOUT communicating (creation is
   * host-synchronous); ranks capture alike, so they decline alike. */
  relayResult_t (*oneshotPrepare)(struct relayComm* comm, size_t slotBytes, relayStream_t stream);
  relayResult_t (*oneshot)(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream);
  /* RELAY_TP_CAP_CARRY (else NULL). carryStage: this rank's carry slot of the next agreement round, where
   * the root writes its block before the round. carryTake: rank's slot of the round just run, which the
   * one-shot op of the same call reads; the transport records that round, and the op refuses to read once
   * another has run. Both NULL where bytes do not fit or the one-shot region is not ready (voted: every rank
   * alike), so every rank of a call decides alike. Two slots by round parity: the root writes round r's
   * only in round r, reached after every rank published round r - 1, which each did after its one-shot op
   * of round r - 2's call, the only place that slot is read. */
  void* (*carryStage)(struct relayComm* comm, size_t bytes);
  const void* (*carryTake)(struct relayComm* comm, int rank, size_t bytes);
  /* Bandwidth route (set with RELAY_TP_CAP_BW, else NULL). bwPrepare is the
   * one-shot prepare's twin (collective over all comm ranks, voted, sticky,
   * declines under capture without communicating when no region exists):
   * the region holds ring slots of tileBytes per source; ranks whose tile or
   * ring differ decline together. */
  relayResult_t (*bwPrepare)(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream);
  relayResult_t (*bw)(struct relayComm* comm, const relayBwDesc* d, relayStream_t stream);
  /* Windows (may be NULL: every window staged-only). winRegister is
   * COLLECTIVE over all comm ranks after core agreed the arguments: bases[r]
   * is rank r's buffer address (0: none) and every buffer has w->bytes. It
   * sets w->direct (1: the direct path reaches every peer's buffer, voted,
   * every rank alike) and w->tp; relaySuccess with direct 0 is the
   * staged-only answer; an error fails every rank. winDeregister releases
   * w->tp; collective (1: from relayCommDeregister, every rank on the same
   * window) or local (0: comm destroy). */
  relayResult_t (*winRegister)(struct relayComm* comm, struct relayWindow* w, const uint64_t* bases);
  void (*winDeregister)(struct relayComm* comm, struct relayWindow* w, int collective);
  /* Native collectives (set with RELAY_TP_CAP_NATIVE, else NULL): a transport whose library has its
   * own fused collectives (NCCL) runs the direct route with them, on the
   * ranks of each group only. nativePrepare is COLLECTIVE over all comm
   * ranks on the same call (it may create sub-communicators); it returns a
   * handle for the layout, or relayNotSupported (every rank alike: e.g.
   * under capture with nothing prepared). coll is one of the four layout
   * collectives (kind relayKindLayout: comm/coll.h) or broadcast, reduce (root: the root's position in
   * each group, which is its rank in the group's sub-communicator; 0 for the others); count is the
   * per-group count the API takes. Ranks active in no group call native with their handle and return at
   * once. */
  relayResult_t (*nativePrepare)(struct relayComm* comm, int nGroups, int nActive, const int* ranks,
                                 relayStream_t stream, void** handle);
  relayResult_t (*native)(struct relayComm* comm, void* handle, relayCollective_t coll, const void* send,
                          void* recv, size_t count, relayDataType_t dt, relayRedOp_t op, int root,
                          relayStream_t stream);
  /* 1 when stream is being captured into a graph (may be NULL: never). The
   * router prices host work per step only for calls outside a graph. */
  int (*isCapturing)(struct relayComm* comm, relayStream_t stream);
  /* A failure that work already enqueued met after its call returned (the NCCL one-shot and bw
   * kernels' error word), as the result it will be reported as, why written (may be NULL: a transport
   * whose calls end in their host call). Reads only: safe from another thread while a call runs. */
  relayResult_t (*asyncError)(struct relayComm* comm, char* why, size_t whyLen);
  /* The first peer whose process this transport knows is gone, as relayRemoteError with why naming it
   * ("rank 3 (pid 1234) died"); relaySuccess when none is (may be NULL: a transport that cannot tell).
   * A syscall or two per peer: for failure paths and polls, never per call. Reads only. Core asks a
   * comm's control plane (the shm comm under an NCCL one), whose ranks are the comm's: NCCL names no
   * rank when a peer's sockets close, and a rank whose kernels wait on a dead one learns nothing. */
  relayResult_t (*deadPeer)(struct relayComm* comm, char* why, size_t whyLen);
} relayTransportOps;

#ifdef __cplusplus
}
#endif
#endif
