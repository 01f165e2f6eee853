/*
 * The P2P channel layer: how a point-to-point task to one peer is split into
 * parts, which channel of a comm-wide pool each part runs on, and which
 * channels a rank must connect for it. Transport-neutral: the shm transport
 * and the simulator both run their transfers through it, so the same rule
 * decides channel occupancy in a measurement and in a prediction.
 *
 * Modelled on NCCL/RCCL (seed 003, ROCm rocm-systems #13468 / #13528):
 *   - pool ("p2pnChannels") and parts per peer ("p2pnChannelsPerPeer") are
 *     computed once per comm from a topology description: the channels each
 *     peer path wants (2 per direct link of a local pair, 2 for a network
 *     peer, halved while the peers oversubscribe the pool on several nodes, or
 *     the user's RELAYCC_NCHANNELS_PER_NET_PEER), the minimum over peers,
 *     rounded up to powers of two, capped by the pool cap;
 *   - a task to one peer uses p2pTaskParts() parts, part p on channel
 *     p2pChannelForPart(pool, base, p), with base = p2pChannelBase() of the
 *     (sender, receiver) pair. Every input is comm-wide or the pair itself,
 *     so the sender and the receiver compute the same parts and channels
 *     without talking;
 *   - connections are made lazily per (peer, direction, channel), only for
 *     the channels a task's parts use (p2pConnClaim); the two ends' masks
 *     must agree (p2pConnAgree), and a transport turns a mismatch into an
 *     error instead of waiting on a channel the peer never connects.
 *
 * Ranks are numbered node-major: rank r is local rank r % localRanks of node
 * r / localRanks, every node holding localRanks ranks. relaycc comms are one
 * node (nNodes == 1); several nodes exist for the simulator and the planning
 * tool, whose topologies are nodes x GPUs by construction. That is also the
 * only shape on which the seed's node-major scatter base is defined ("with
 * the same number of ranks on every node").
 *
 * Pure functions over small structs: no allocation, no transport, no globals.
 */
#ifndef RELAY_P2P_H_
#define RELAY_P2P_H_

#include <stddef.h>
#include <stdint.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's MAXCHANNELS, and the largest pool of the seed's table (64): one
 * 64-bit mask names any set of channels. */
#define P2P_MAX_CHANNELS 64
/* Part boundaries are multiples of 4 KiB, as NCCL's ncclP2pPartBounds: a
 * part never splits a page, and any datatype's size divides it. */
#define P2P_PART_ALIGN 4096
/* The p2p schedule interleaves nodes this many local ranks at a time: 2 in
 * RCCL since its 2.28.9 merge (NCCL: 8, a whole node). The seed's scatter
 * base exists because of this default, so the model keeps it. */
#define P2P_SCHED_GROUP_DEFAULT 2

/* The operation a task belongs to: only scatter has a rule of its own. */
typedef enum {
  P2P_OP_SENDRECV = 0,
  P2P_OP_SCATTER = 1,
  P2P_OP_GATHER = 2,
  P2P_OP_ALLTOALL = 3,
  P2P_NUM_OPS = 4
} p2pOp;

typedef enum { P2P_DIR_SEND = 0, P2P_DIR_RECV = 1 } p2pDir;

const char* p2pOpName(p2pOp op);

/* ---- the comm-wide pool -------------------------------------------------- */

/* What ncclTopoComputeP2pChannels reads, as data. 0 in an optional field
 * takes the default named beside it. */
typedef struct {
  int nNodes;     /* >= 1 */
  int localRanks; /* ranks (GPUs) per node, >= 1 */
  /* Direct links (NVLink / XGMI) on the path between two local ranks:
   * [i * localRanks + j], the same on every node; NULL: defaultLinks for
   * every pair. 0 links = PCIe or shared memory. */
  const int* localLinks;
  int defaultLinks;
  int netsByBw;       /* NICs one GPU needs to reach its bandwidth (NCCL getLocalNetCountByBw); 0: 1 */
  int userPerNetPeer; /* RELAYCC_NCHANNELS_PER_NET_PEER; <= 0: unset */
  int nChannels;      /* the comm's channels (NCCL comm->nChannels): where the pool starts, >= 1 */
  int minP2pChannels; /* NCCL_MIN_P2P_NCHANNELS; 0: 1 */
  int maxP2pChannels; /* NCCL_MAX_P2P_NCHANNELS; 0: P2P_MAX_CHANNELS */
  int poolCap;        /* channels whose work fits the kernel arguments; 0: P2P_MAX_CHANNELS */
  int schedGroupSize; /* 0: P2P_SCHED_GROUP_DEFAULT */
} p2pTopoDesc;

/* The comm-wide facts every rank holds identically. */
typedef struct {
  int nRanks, nNodes, localRanks;
  int pool;           /* p2pnChannels: a power of two in [1, P2P_MAX_CHANNELS] */
  int perPeer;        /* p2pnChannelsPerPeer: a power of two in [1, pool] */
  int perPeerUserSet; /* perPeer came from RELAYCC_NCHANNELS_PER_NET_PEER on several nodes */
  int schedGroupSize; /* divides localRanks */
} p2pComm;

/* Channels one peer path wants (NCCL ncclTopoGetNchannels). links: direct
 * links of a local pair. nRanks, poolBefore: the comm's ranks and its pool
 * before rounding, for the network halving. */
int p2pWantedLocal(int links);
int p2pWantedNet(int nRanks, int poolBefore, int netsByBw, int userPerNetPeer);

/* Pool and parts per peer from a topology. relayInvalidArgument (err says
 * which field) for a description that makes no sense. */
relayResult_t p2pCommFromTopo(const p2pTopoDesc* t, p2pComm* out, char* err, size_t errlen);
/* The comm-wide facts given directly (the planning tool, tests): pool and
 * perPeer must already be what p2pCommFromTopo produces (powers of two,
 * perPeer <= pool). userPerPeer > 0: the user set RELAYCC_NCHANNELS_PER_NET_PEER
 * to it, and the per-peer count is that value, normalized as every per-peer
 * count is (rounded up to a power of two, at most the pool). */
relayResult_t p2pCommSet(int nNodes, int localRanks, int pool, int perPeer, int userPerPeer, p2pComm* out,
                         char* err, size_t errlen);

/* ---- parts --------------------------------------------------------------- */

/* The scatter rule (seed 003), alone: on several nodes, a scatter root drives
 * all nRanks - 1 peers at once, so it takes the largest power of two not
 * above pool / (nRanks - 1) parts per peer, capped at perPeer and at least 1;
 * a user-set per-peer count is kept; on one node, perPeer. */
int p2pScatterParts(int nRanks, int nNodes, int pool, int perPeer, int perPeerUserSet);
/* Parts a task of op uses on comm c: the scatter rule for scatter, perPeer
 * for every other operation. A function of comm-wide values and op only, so
 * sender and receiver agree. */
int p2pTaskParts(const p2pComm* c, p2pOp op);
/* Bytes of part p of a task of `bytes` split in nParts: [*off, *off + *len),
 * boundaries at multiples of align (0: P2P_PART_ALIGN). Trailing parts may be
 * empty; they still own their channel (connections do not depend on sizes). */
void p2pPartBounds(size_t bytes, int nParts, size_t align, int part, size_t* off, size_t* len);

/* ---- channels ------------------------------------------------------------ */

/* Index of receiver among sender's peers in node-major order relative to the
 * sender: (node delta) * localRanks + (local delta), both deltas taken
 * modulo; 0 for the sender itself, 1..nRanks-1 for its peers. */
int p2pNodeMajorIndex(const p2pComm* c, int sender, int receiver);
/* The round of the pair in the p2p schedule (NCCL ncclP2pSchedule: groups of
 * schedGroupSize local ranks, group deltas in the quadratic order
 * 0, 1, 3, 6, ... modulo a power of two). The same on both ends; 0 for self. */
int p2pScheduleRound(const p2pComm* c, int sender, int receiver);
/* Channel base of the pair for op: the node-major base for scatter on
 * several nodes, else the schedule round's base. Both ends compute it alone. */
int p2pChannelBase(const p2pComm* c, p2pOp op, int sender, int receiver);
/* Channel of part `part` (< pool): base plus the part's bit-reversed index,
 * modulo the pool. Part p's channel does not depend on how many parts the
 * task has, so a task with more parts adds channels and never moves one. */
int p2pChannelForPart(int pool, int base, int part);
/* The channels a task's parts use (bit c = channel c). */
uint64_t p2pChannelMask(int pool, int base, int nParts);
uint64_t p2pTaskMask(const p2pComm* c, p2pOp op, int sender, int receiver);

/* One part of a task: its channel and its bytes. */
typedef struct {
  int channel;
  size_t off, len;
} p2pPart;
/* Split a task; parts has room for P2P_MAX_CHANNELS. Returns the part count. */
int p2pTaskSplit(const p2pComm* c, p2pOp op, int sender, int receiver, size_t bytes, size_t align,
                 p2pPart* parts);

/* ---- lazy connections ---------------------------------------------------- */

/* Connected channels per (peer, direction) of one rank. The storage
 * (2 * nRanks masks) is the caller's: no allocation here. */
typedef struct {
  int nRanks;
  uint64_t* mask; /* [peer * 2 + dir] */
} p2pConnTable;

void p2pConnInit(p2pConnTable* t, int nRanks, uint64_t* storage);
uint64_t p2pConnMask(const p2pConnTable* t, int peer, p2pDir dir);
/* A task to/from peer needs `want`: the channels still to connect (want
 * minus what is connected). Changes nothing: a transport exchanges this with
 * the peer (p2pConnAgree), connects, then commits. */
uint64_t p2pConnNeed(const p2pConnTable* t, int peer, p2pDir dir, uint64_t want);
/* Record channels as connected. */
void p2pConnCommit(p2pConnTable* t, int peer, p2pDir dir, uint64_t connected);
/* Need and commit in one (a side that connects without a handshake). */
uint64_t p2pConnClaim(p2pConnTable* t, int peer, p2pDir dir, uint64_t want);
/* NCCL's sendSeen / recvSeen: 1 when every channel of a full task
 * (perPeer parts at the default base) to peer is connected. A partial
 * scatter leaves it 0, so a later full task still connects the rest. */
int p2pConnSeen(const p2pConnTable* t, const p2pComm* c, int me, int peer, p2pDir dir);
/* The sender's and the receiver's masks of one task (what each wants, or
 * what each is about to connect) must be equal. 0 when they are; else 1 with
 * a message naming the pair and the channels only one side has. */
int p2pConnAgree(uint64_t senderMask, uint64_t receiverMask, int sender, int receiver, char* err,
                 size_t errlen);

/* Print a mask as a channel list ("0,32" / "-"). Returns buf. */
const char* p2pMaskString(uint64_t mask, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
