/* The collectives as rows: RELAY_COLL_TABLE is the one place a collective's facts are written. Every layer
 * names a call by the public relayCollective_t (relaycc.h) and reads its facts from the row: core
 * (validation, the call's name, the key), the plan layer, the router, the executor, the reference, the
 * simulator, the interposer, the tools and, through relayGetCollectiveInfo, the Python package. */
#ifndef RELAY_COMM_COLL_H_
#define RELAY_COMM_COLL_H_

#include <stdint.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a call's counts array reads (planKeyNumCounts: its length). */
typedef enum {
  RELAY_COUNTS_PER_GROUP = 0,  /* counts[g]: group g's count, as the API takes it (nGroups entries) */
  RELAY_COUNTS_PER_MEMBER = 1, /* counts[i]: ranks[i]'s block, the root's buffer holds them all (nActive) */
} relayCountsShape;

/* X(id, name, call, kind, reduces, counts, sendBlocks, recvBlocks, ncclName, torchcommsName, aliases)
 *   id          the relayCollective_t value (relaycc.h: the API's and ABI's number)
 *   name        the tools', RELAYCC_SHIM_COLLS' and relayCollName's spelling
 *   call        the API function, the prefix of the call's errors
 *   kind        relayCollectiveKind_t: how the call names its ranks (layout, rooted, ...)
 *   reduces     contributions are combined with an op (the key carries op, else relaySum)
 *   counts      relayCountsShape
 *   sendBlocks  a layout call's send buffer holds A blocks, block j for active j; a rooted call's root
 *               sends the members' blocks
 *   recvBlocks  a layout call's output holds A blocks, block j from active j; a rooted call's root
 *               receives the members' blocks
 *   ncclName, torchcommsName   the same call in NCCL and torchcomms (NULL: none)
 *   aliases     more spellings the parsers take, a string of space-separated words
 * The layout rows come first (RELAY_NUM_LAYOUT_COLLS counts them; the assertions in common.c hold it).
 * Point-to-point and per-peer rows (send, recv, alltoallv: core/pt2pt.c) have no plan, route or key: they
 * run as groups of transfers straight on the transport; relayCollPlanned says which rows plan. */
/* One row per two lines, left alone by the formatter (it re-wraps a long table on every pass). */
// clang-format off
#define RELAY_COLL_TABLE(X) \
  X(relayCollectiveAllGather, "allgather", "relayAllGather", relayKindLayout, 0, RELAY_COUNTS_PER_GROUP, \
    0, 1, "ncclAllGather", "sharded_relay_multi_group_all_gather", "all_gather ag") \
  X(relayCollectiveReduceScatter, "reducescatter", "relayReduceScatter", relayKindLayout, 1, \
    RELAY_COUNTS_PER_GROUP, 1, 0, "ncclReduceScatter", "sharded_relay_multi_group_reduce_scatter", \
    "reduce_scatter rs") \
  X(relayCollectiveAllReduce, "allreduce", "relayAllReduce", relayKindLayout, 1, RELAY_COUNTS_PER_GROUP, \
    0, 0, "ncclAllReduce", "sharded_relay_multi_group_all_reduce", "all_reduce ar") \
  X(relayCollectiveAllToAll, "alltoall", "relayAllToAll", relayKindLayout, 0, RELAY_COUNTS_PER_GROUP, \
    1, 1, "ncclAlltoAll", "sharded_relay_multi_group_all_to_all", "all_to_all a2a") \
  X(relayCollectiveScatter, "scatter", "relayScatter", relayKindRootedRank, 0, RELAY_COUNTS_PER_MEMBER, \
    1, 0, NULL, "scatter", "") \
  X(relayCollectiveGather, "gather", "relayGather", relayKindRootedRank, 0, RELAY_COUNTS_PER_MEMBER, \
    0, 1, NULL, "gather", "") \
  X(relayCollectiveSend, "send", "relaySend", relayKindPointToPoint, 0, RELAY_COUNTS_PER_MEMBER, 0, 0, \
    "ncclSend", "send", "") \
  X(relayCollectiveRecv, "recv", "relayRecv", relayKindPointToPoint, 0, RELAY_COUNTS_PER_MEMBER, 0, 0, \
    "ncclRecv", "recv", "") \
  X(relayCollectiveAllToAllV, "alltoallv", "relayAllToAllv", relayKindPerPeer, 0, RELAY_COUNTS_PER_MEMBER, \
    1, 1, NULL, "all_to_all_v_single", "all_to_all_v a2av") \
  X(relayCollectiveBroadcast, "broadcast", "relayBroadcast", relayKindRootedPosition, 0, \
    RELAY_COUNTS_PER_GROUP, 0, 0, "ncclBroadcast", "broadcast", "bcast") \
  X(relayCollectiveReduce, "reduce", "relayReduce", relayKindRootedPosition, 1, RELAY_COUNTS_PER_GROUP, \
    0, 0, "ncclReduce", "reduce", "")
// clang-format on

/* One row as the table's readers see it (relayCollRowOf). */
typedef struct {
  const char* name;
  const char* call;
  relayCollectiveKind_t kind;
  uint8_t reduces, sendBlocks, recvBlocks;
  relayCountsShape counts;
  const char* ncclName;
  const char* torchcommsName;
  const char* aliases;
} relayCollRow;

/* The layout collectives' number: they are relayCollective_t values 0 .. RELAY_NUM_LAYOUT_COLLS - 1, so
 * code that runs "every layout collective" (tests, tools) loops up to it. */
#define RELAY_COLL_IS_LAYOUT_(id, name, call, kind, ...) +((kind) == relayKindLayout)
enum { RELAY_NUM_LAYOUT_COLLS = 0 RELAY_COLL_TABLE(RELAY_COLL_IS_LAYOUT_) };
#undef RELAY_COLL_IS_LAYOUT_

/* comm/common.c: the rows, indexed by relayCollective_t. */
extern const relayCollRow relayCollRows[relayNumCollectives];

/* The row of coll, NULL outside relayCollective_t (relayCallReject passes any int). */
static inline const relayCollRow* relayCollRowOf(relayCollective_t coll) {
  return (unsigned)coll < relayNumCollectives ? &relayCollRows[coll] : (const relayCollRow*)0;
}
static inline relayCollectiveKind_t relayCollKind(relayCollective_t coll) { return relayCollRows[coll].kind; }
static inline int relayCollIsLayout(relayCollective_t coll) {
  return (unsigned)coll < relayNumCollectives && relayCollRows[coll].kind == relayKindLayout;
}
/* A root: a comm rank of one rank set (scatter, gather) or a position in each group of a layout
 * (broadcast, reduce). */
static inline int relayCollRooted(relayCollective_t coll) {
  relayCollectiveKind_t kind = relayCollRows[coll].kind;
  return kind == relayKindRootedRank || kind == relayKindRootedPosition;
}
/* One rank set (a layout of one group, counts per member) and a root given as a comm rank. */
static inline int relayCollRankSet(relayCollective_t coll) {
  return relayCollRows[coll].kind == relayKindRootedRank;
}
/* Groups of a layout, a count per group: the layout collectives and broadcast, reduce (a root per group,
 * by its position in the group). */
static inline int relayCollOnLayout(relayCollective_t coll) {
  relayCollectiveKind_t kind = relayCollRows[coll].kind;
  return kind == relayKindLayout || kind == relayKindRootedPosition;
}
static inline int relayCollReduces(relayCollective_t coll) { return relayCollRows[coll].reduces; }
static inline int relayCollSendsBlocks(relayCollective_t coll) { return relayCollRows[coll].sendBlocks; }
static inline int relayCollGathers(relayCollective_t coll) { return relayCollRows[coll].recvBlocks; }
/* A row the plan layer, the router, the simulator and the tools serve (layout and rooted kinds); the
 * point-to-point and per-peer rows run in core/pt2pt.c without a plan. */
static inline int relayCollPlanned(relayCollective_t coll) {
  return (unsigned)coll < relayNumCollectives && relayCollRows[coll].kind <= relayKindRootedPosition;
}
/* Entries of a call's counts array: nGroups per group, nActive per member of the set. */
static inline int relayCollNumCounts(relayCollective_t coll, int nGroups, int nActive) {
  return relayCollRows[coll].counts == RELAY_COUNTS_PER_MEMBER ? nActive : nGroups;
}

/* comm/common.c, beside the datatype, op and route names: */
const char* relayCollName(relayCollective_t coll);            /* "?" outside the table */
int relayParseColl(const char* s, relayCollective_t* out);    /* a layout collective; 0 on success */
int relayParseCollAll(const char* s, relayCollective_t* out); /* a planned collective; 0 on success */
int relayParseCollRow(const char* s, relayCollective_t* out); /* any row, by name or alias; 0 on success */

#ifdef __cplusplus
}
#endif
#endif
