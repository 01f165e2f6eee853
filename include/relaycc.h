/*
 * relaycc: collectives for subsets of the GPUs (or processes) of a node, or of several nodes.
 *
 * Shaped like nccl.h: an opaque communicator, one result enum, the same
 * datatype and reduction-op numbering as NCCL (a ncclDataType_t / ncclRedOp_t
 * value can be cast to its relaycc twin), collectives that take
 * (sendbuff, recvbuff, count, datatype, [op], ..., comm, stream).
 *
 * What differs from NCCL: every collective runs on a LAYOUT, nGroups groups of
 * nActive comm ranks each. A rank is active in at most one group; the helpers
 * of a group are all comm ranks outside it. EVERY rank of the comm calls every
 * collective with the same layout, per-group counts, datatype and op; a rank
 * passes only its own buffers (NULL when it is active in no group) and helpers
 * never touch caller memory. Idle helpers lend their links: part of a message
 * travels two hops through them (the "relay" route).
 *
 * Buffer contracts (count = counts[g] of the caller's group g, A = nActive):
 *   relayAllGather     send: count          recv: A*count   (block i from active i)
 *                      in place: sendbuff == recvbuff + myActiveIndex*count
 *   relayReduceScatter send: A*count        recv: count     (block i goes to active i)
 *                      in place: recvbuff == sendbuff + myActiveIndex*count
 *   relayAllReduce     send: count          recv: count     in place: sendbuff == recvbuff
 *   relayAllToAll      send: A*count        recv: A*count   (segment j goes to active j)
 *                      in place is REJECTED (relayInvalidArgument), as in the reference.
 * Any other overlap of send and recv is undefined, as in NCCL.
 *
 * Rooted collectives take a RANK SET instead of a layout: ranks[0..nRanks),
 * any comm ranks in any order, no rank twice, nRanks >= 1; the root may be in
 * the set or not. counts[i] is ranks[i]'s block (0 allowed); the root's
 * buffer holds the blocks back to back in set order, block i at element
 * counts[0] + ... + counts[i-1]. Every comm rank calls, with the same root,
 * set, counts and datatype; a rank passes only the buffers its role uses, and
 * NULL for the others (a rank outside the set that is not the root passes
 * NULL for both):
 *   relayScatter  root send: sum(counts)    ranks[i] recv: counts[i]
 *                 in place (root in the set as ranks[i]): recvbuff == sendbuff + offset_i
 *   relayGather   ranks[i] send: counts[i]  root recv: sum(counts)
 *                 in place (root in the set as ranks[i]): sendbuff == recvbuff + offset_i
 * Root outside the set: a scatter root only sends, a gather root only receives.
 *
 * Across nodes. A comm may span nodes: at init every rank's host identity
 * (its hostname and boot id, hashed; RELAYCC_NODE_ID overrides it per rank)
 * gives each rank a node, the same map on every rank. Layout semantics are
 * unchanged -- same calls, same buffers, any comm ranks in any order -- and:
 *   - a group whose actives are all on one node is helped by the other ranks
 *     of THAT node only; groups on different nodes in one call run at once;
 *   - a group spanning nodes with the same number m of actives on every node
 *     it spans runs hierarchically: reduce-scatter inside each node (relay or
 *     direct, as the model says), the node shards combined across nodes on
 *     rails (rail j = the group's j-th active on each node, in the layout's
 *     order; NCCL's own collective on a rail sub-communicator), all-gather
 *     inside each node; all-gather, reduce-scatter and all-to-all by the
 *     same composition. Output blocks keep the layout's order;
 *   - a group with unequal actives per node runs as NCCL's own collective
 *     over its ranks (on the shm transport: a direct exchange);
 *   - nothing IPC-mapped (the one-shot route) is used on a comm of several
 *     nodes; scatter and gather keep their multi-node P2P part rule.
 */
#ifndef RELAYCC_H_
#define RELAYCC_H_

#include <stddef.h>
#include <limits.h>

#include "relaycc_version.h" /* RELAYCC_MAJOR, ..., RELAYCC_VERSION_CODE (generated) */

#ifdef __cplusplus
extern "C" {
#endif

/* RELAYCC_API marks what librelaycc.so exports: it is built with -fvisibility=hidden, so only these
 * functions are visible outside it. Define RELAYCC_API yourself first to override. */
#ifndef RELAYCC_API
#if defined(__GNUC__) || defined(__clang__)
#define RELAYCC_API __attribute__((visibility("default")))
#else
#define RELAYCC_API
#endif
#endif

typedef struct relayComm* relayComm_t;

/* A stream: cudaStream_t on the NCCL transport, ignored (pass NULL) on shm. */
typedef void* relayStream_t;

/* One table for codes, names and messages (libuv style). */
#define RELAY_RESULT_TABLE(X)                                                           \
  X(relaySuccess, 0, "no error")                                                        \
  X(relayUnhandledCudaError, 1, "unhandled CUDA error")                                 \
  X(relaySystemError, 2, "system call or allocation failed")                            \
  X(relayInternalError, 3, "internal error")                                            \
  X(relayInvalidArgument, 4, "invalid argument")                                        \
  X(relayInvalidUsage, 5, "invalid usage (ranks disagree on a call, or a failed comm)") \
  X(relayRemoteError, 6, "a remote rank failed, rejected the call or died")             \
  X(relayInProgress, 7, "operation in progress")                                        \
  X(relayTimeout, 8, "a wait passed its deadline")                                      \
  X(relayNotSupported, 9, "not supported")

typedef enum {
#define RELAY_RESULT_ENUM_(name, value, msg) name = value,
  RELAY_RESULT_TABLE(RELAY_RESULT_ENUM_)
#undef RELAY_RESULT_ENUM_
      relayNumResults = 10
} relayResult_t;

/* Same values as ncclDataType_t. */
typedef enum {
  relayInt8 = 0,
  relayUint8 = 1,
  relayInt32 = 2,
  relayUint32 = 3,
  relayInt64 = 4,
  relayUint64 = 5,
  relayFloat16 = 6,
  relayFloat32 = 7,
  relayFloat64 = 8,
  relayBfloat16 = 9,
  relayNumTypes = 10
} relayDataType_t;

/* Same values as ncclRedOp_t. Avg divides by nActive (integers: truncating). */
typedef enum {
  relaySum = 0,
  relayProd = 1,
  relayMax = 2,
  relayMin = 3,
  relayAvg = 4,
  relayNumOps = 5
} relayRedOp_t;

/* nGroups groups of nActive comm ranks: ranks[g * nActive + i] is the comm
 * rank of active index i of group g. Any order; no rank twice. */
typedef struct {
  int nGroups;
  int nActive;
  const int* ranks;
} relayLayout_t;

/* Routes. Auto asks the cost model; the others force a route (a route that cannot serve a call falls back to
 * direct). One row each, X(id, value, name): the enum below, the names RELAYCC_ROUTE and the tools take
 * (relayGetEnumName gives the identifier) and the library's own tables are all made from these rows, so a new
 * route is written here once. */
/* clang-format off */
#define RELAY_ROUTE_TABLE(X)                                                                                \
  X(relayRouteAuto, 0, "auto")                                                                              \
  X(relayRouteDirect, 1, "direct")   /* the active ranks exchange among themselves (send/recv plan) */      \
  X(relayRouteRelay, 2, "relay")     /* part of each message through the helpers */                         \
  X(relayRouteOneShot, 3, "oneshot") /* one push-reduce kernel into peers' registered staging */            \
  X(relayRouteNative, 4, "native")   /* the transport library's own collective on each group (NCCL on a     \
                                      * sub-communicator); auto uses it in place of direct where the        \
                                      * transport has it, shm falls back to direct */                       \
  X(relayRouteBw, 5, "bw")           /* bandwidth: tiles pipelined through a bounded staging ring in peers' \
                                      * memory */
/* clang-format on */
typedef enum {
#define RELAY_ROUTE_ENUM_(id, value, name) id = value,
  RELAY_ROUTE_TABLE(RELAY_ROUTE_ENUM_)
#undef RELAY_ROUTE_ENUM_
      relayNumRoutes = 6
} relayRoute_t;

/* The collectives by number, where a call is named rather than made (relayCallReject, relayGetEnumName). */
typedef enum {
  relayCollectiveAllGather = 0,
  relayCollectiveReduceScatter = 1,
  relayCollectiveAllReduce = 2,
  relayCollectiveAllToAll = 3,
  relayCollectiveScatter = 4,
  relayCollectiveGather = 5,
  relayCollectiveSend = 6,      /* point-to-point: relaySend (kind relayKindPointToPoint) */
  relayCollectiveRecv = 7,      /* point-to-point: relayRecv */
  relayCollectiveAllToAllV = 8, /* uneven all-to-all: relayAllToAllv (kind relayKindPerPeer) */
  relayCollectiveBroadcast = 9, /* relayBroadcast (kind relayKindRootedPosition) */
  relayCollectiveReduce = 10,   /* relayReduce (kind relayKindRootedPosition) */
  relayNumCollectives = 11
} relayCollective_t;

/* How a collective names its ranks and reads its counts (relayGetCollectiveInfo). */
typedef enum {
  relayKindLayout = 0,         /* groups of nActive ranks (relayLayout_t), a count per group, helpers */
  relayKindRootedRank = 1,     /* one rank set and a root given as a comm rank, in the set or not */
  relayKindRootedPosition = 2, /* groups of a layout, a count per group, a root given as its position in
                                * each group (broadcast, reduce) */
  relayKindPointToPoint = 3,   /* one peer, one count */
  relayKindPerPeer = 4,        /* one rank set, a count per peer of it */
  relayNumCollectiveKinds = 5
} relayCollectiveKind_t;

/* One collective's facts, as the library's table of collectives has them (names are static strings). */
typedef struct {
  const char* name; /* "allgather": the spelling of RELAYCC_SHIM_COLLS and the tools */
  const char* call; /* "relayAllGather": the function that makes the call */
  relayCollectiveKind_t kind;
  int reduces;                /* 1: contributions are combined with a relayRedOp_t */
  int sendBlocks;             /* 1: the send buffer holds a block per active (rooted: the root's) */
  int recvBlocks;             /* 1: the recv buffer holds a block per active (rooted: the root's) */
  const char* ncclName;       /* "ncclAllGather"; NULL where NCCL has none */
  const char* torchcommsName; /* "all_gather_single"; NULL where torchcomms has none */
} relayCollectiveInfo_t;

/* The public enums by name, for a binding that must keep no copy of them (the Python package reads its
 * dtypes, ops, routes, collectives and result codes here). relayEnumEnum is this enum itself, so that a
 * binding learns from enum 0 which number reads which enum. */
typedef enum {
  relayEnumEnum = 0,           /* relayEnum_t */
  relayEnumResult = 1,         /* relayResult_t */
  relayEnumDataType = 2,       /* relayDataType_t */
  relayEnumRedOp = 3,          /* relayRedOp_t */
  relayEnumRoute = 4,          /* relayRoute_t */
  relayEnumCollective = 5,     /* relayCollective_t */
  relayEnumCollectiveKind = 6, /* relayCollectiveKind_t */
  relayNumEnums = 7
} relayEnum_t;

/*
 * Versioned config. Initialize with RELAY_CONFIG_INITIALIZER, then set what
 * you need. A field left at RELAY_CONFIG_UNDEF_INT (or NULL) takes its value
 * from the environment variable named beside it, else the default.
 */
#define RELAY_CONFIG_UNDEF_INT INT_MIN
#define RELAY_CONFIG_MAGIC 0x72656c61u /* "rela" */
typedef struct relayConfig {
  size_t size;          /* sizeof(relayConfig_t), set by the initializer */
  unsigned int magic;   /* RELAY_CONFIG_MAGIC */
  unsigned int version; /* RELAYCC_VERSION_CODE */
  int timeoutMs;        /* RELAYCC_TIMEOUT_MS: deadline of every wait (default 120000) */
  int checkMode;        /* RELAYCC_CHECK: 1 = ranks agree on each call's signature (default 0) */
  int route;            /* RELAYCC_ROUTE: auto|direct|relay|oneshot|native|bw (default auto) */
  int depth;            /* RELAYCC_DEPTH: force a pipeline depth (default 0 = model) */
  int shmRingBytes;     /* RELAYCC_SHM_RING_BYTES: per-pair ring of the shm transport (default 1 MiB) */
  int spinCount;        /* RELAYCC_SPIN: polls before a wait sleeps (default: RELAYCC_SPIN_OWN, 200,
                         * when every rank has a CPU core of its own, else RELAYCC_SPIN_SHARED) */
  const char* topo;     /* RELAYCC_TOPO: preset name or file (default: detect, else "cpu") */
  /* A binding's reason that it could not build the config it was asked for (NULL: none), the init's
   * relayCallReject: a binding never fails an init on its own (its peers would wait for it until their
   * deadline); with a reason the rank still joins, and init fails on every rank, this one's error being
   * the reason, the peers' quoting it, as an invalid setting does. */
  const char* reject;
} relayConfig_t;

#define RELAY_CONFIG_INITIALIZER                                                                        \
  {                                                                                                     \
    sizeof(relayConfig_t), RELAY_CONFIG_MAGIC, RELAYCC_VERSION_CODE, RELAY_CONFIG_UNDEF_INT,            \
        RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT, RELAY_CONFIG_UNDEF_INT, \
        RELAY_CONFIG_UNDEF_INT, NULL, NULL                                                              \
  }

RELAYCC_API const char* relayGetErrorString(relayResult_t result);
/* The last error of this comm on this rank: which argument, rank, step. */
RELAYCC_API const char* relayGetLastError(relayComm_t comm);
RELAYCC_API relayResult_t relayGetVersion(int* version);
/* The identifier of value `value` of enum `which`, spelled as in this header ("relayFloat32" for
 * relayEnumDataType and 7, "relayRouteBw" for relayEnumRoute and 5); NULL when `value` is none of the
 * enum's values. The values of each run 0, 1, ... up to its relayNum* count: a binding reads an enum by
 * counting up to the first NULL. */
RELAYCC_API const char* relayGetEnumName(relayEnum_t which, int value);
/* The facts of collective coll (NULL-free except ncclName, torchcommsName); relayInvalidArgument
 * for a value outside relayCollective_t. A binding reads which calls reduce, which are rooted, and
 * their names here, never from a copy. */
RELAYCC_API relayResult_t relayGetCollectiveInfo(relayCollective_t coll, relayCollectiveInfo_t* info);

/*
 * Shared-memory transport (CPU, one process per rank on one host).
 * nranks <= 0, rank < 0 or jobName == NULL take RELAYCC_NRANKS / RELAYCC_RANK /
 * RELAYCC_JOB, then WORLD_SIZE / RANK as torchrun sets them (job "relaycc").
 * Collective: blocks until all nranks have arrived or the deadline passes.
 * The rendezvous is the job name plus the launch (TORCHELASTIC_RUN_ID,
 * MASTER_ADDR, MASTER_PORT where set, else the parent process: README), so
 * two launches that share a name never meet; a second process with one rank
 * is refused with relayInvalidUsage.
 */
RELAYCC_API relayResult_t relayCommInitShm(relayComm_t* comm, int nranks, int rank, const char* jobName,
                                           const relayConfig_t* config);
/* relayCommInitShm for a caller that agreed a name unique to this comm through a channel of its own (the
 * torch backend: rank 0's random token in the process group's store): the rendezvous is uniqueName
 * alone, nothing of the launch (TORCHELASTIC_RUN_ID, MASTER_*, the parent pid) enters it, so ranks
 * started by unrelated parents meet. uniqueName: 1-200 characters without '/', never NULL. Two comms
 * alive at once need two names; the segment's name is unlinked once every rank arrived. */
RELAYCC_API relayResult_t relayCommInitShmUnique(relayComm_t* comm, int nranks, int rank,
                                                 const char* uniqueName, const relayConfig_t* config);

/* Release everything the comm owns. Must not race a call on the same comm. */
RELAYCC_API relayResult_t relayCommDestroy(relayComm_t comm);
/* Mark the comm failed (peers see it), wake a call stuck in it, then free it.
 * Safe to call from another thread while a call is in flight. */
RELAYCC_API relayResult_t relayCommAbort(relayComm_t comm);

/*
 * Registered buffers (windows), shaped like NCCL's ncclCommWindowRegister.
 * relayCommRegister is COLLECTIVE over all comm ranks, helpers included, and
 * voted: every rank gets a window or every rank gets the same error (which
 * names the rank and argument at fault), and nothing stays registered.
 *   - A rank that takes part in calls on the window passes its buffer and its
 *     size; every rank that passes a buffer passes the same bytes.
 *   - A rank that never takes part (a helper) passes buff NULL and bytes 0; it
 *     still gets a window handle to deregister. A NULL buff with bytes > 0, or
 *     a buffer with bytes 0, is an error; at least one rank passes a buffer.
 *   - Not during stream capture (NCCL: registration maps peers' memory).
 * A layout collective with one group whose buffers that PEERS access lie in
 * one window at the SAME byte offset on every active rank (the caller's
 * contract, as with NCCL's symmetric windows) runs the bandwidth route's
 * direct path: peers read and write each other's buffers, no staging copy.
 * The buffers peers access: all-gather and all-to-all recvbuff,
 * reduce-scatter sendbuff, all-reduce both. Each rank decides from its own
 * pointers (no extra round trip); any other call takes the staged path.
 * Check mode (RELAYCC_CHECK=1) verifies the contract: a window or offset that
 * differs between active ranks is relayInvalidUsage naming the rank. Without
 * it, shm still sees a broken contract at the direct path's entry (each
 * active posts window and offsets) and every active takes the staged path,
 * so the call stays right; on NCCL the kernel reports it as an error (the
 * comm is then failed). Where the transport
 * cannot reach peers' buffers (shm: process_vm_readv refused; RELAYCC_DEBUG=1
 * says why) the window is registered staged-only on every rank: calls on it
 * stay correct and take the staged path.
 * relayCommDeregister is COLLECTIVE and voted too: every rank passes its
 * handle of the same window; an unknown or foreign handle on any rank fails
 * every rank and deregisters nothing. Calls on the window must have completed
 * (NCCL: their streams synchronized) first. relayCommDestroy frees the windows
 * a comm still holds. The memory stays the caller's.
 */
typedef struct relayWindow* relayWindow_t;
RELAYCC_API relayResult_t relayCommRegister(relayComm_t comm, void* buff, size_t bytes, relayWindow_t* win);
RELAYCC_API relayResult_t relayCommDeregister(relayComm_t comm, relayWindow_t win);

RELAYCC_API relayResult_t relayCommCount(const relayComm_t comm, int* count);
RELAYCC_API relayResult_t relayCommUserRank(const relayComm_t comm, int* rank);

RELAYCC_API relayResult_t relayAllGather(const void* sendbuff, void* recvbuff, const size_t* sendcounts,
                                         relayDataType_t datatype, const relayLayout_t* layout,
                                         relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayReduceScatter(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                             relayDataType_t datatype, relayRedOp_t op,
                                             const relayLayout_t* layout, relayComm_t comm,
                                             relayStream_t stream);
RELAYCC_API relayResult_t relayAllReduce(const void* sendbuff, void* recvbuff, const size_t* counts,
                                         relayDataType_t datatype, relayRedOp_t op,
                                         const relayLayout_t* layout, relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayAllToAll(const void* sendbuff, void* recvbuff, const size_t* segcounts,
                                        relayDataType_t datatype, const relayLayout_t* layout,
                                        relayComm_t comm, relayStream_t stream);
/* Rooted: see "Rooted collectives" above. On NCCL a call is one group of
 * ncclSend/ncclRecv. */
RELAYCC_API relayResult_t relayScatter(const void* sendbuff, void* recvbuff, const size_t* counts,
                                       relayDataType_t datatype, int root, const int* ranks, int nRanks,
                                       relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayGather(const void* sendbuff, void* recvbuff, const size_t* counts,
                                      relayDataType_t datatype, int root, const int* ranks, int nRanks,
                                      relayComm_t comm, relayStream_t stream);

/*
 * Would relaycc route this call rather than leave it to the transport's own collective (NCCL's, on a
 * comm that wraps the caller's communicator)? *routed = 1 when the router predicts a relaycc route beats
 * it for this collective, layout, counts, datatype and op on this comm's agreed topology, else 0 (a forced
 * route, RELAYCC_ROUTE: 1 unless it forces the transport's own collective where there is one). A pure
 * question (no communication, nothing counted): every rank of a comm answers alike for the same call,
 * a rank whose comm failed too, so a binding that sends calls either way (the torch backend on CUDA)
 * keeps its ranks in one lockstep. stream: a captured stream is priced as a graph replay. An invalid
 * shape (what relayAllReduce and the others would reject before any buffer) is relayInvalidArgument.
 */
RELAYCC_API relayResult_t relayCallRouted(relayCollective_t coll, const size_t* counts,
                                          relayDataType_t datatype, relayRedOp_t op,
                                          const relayLayout_t* layout, relayComm_t comm, relayStream_t stream,
                                          int* routed);

/*
 * Point-to-point, shaped like NCCL's ncclSend/ncclRecv/ncclGroupStart/ncclGroupEnd.
 *   relaySend  sends count elements of datatype from buff to comm rank peer;
 *   relayRecv  receives count elements from peer into buff.
 * Only the two ranks of a pair call; the other ranks do not, so point-to-point stands OUTSIDE the
 * comm-wide call numbering that every collective keeps: the k-th send from rank a to rank b matches the
 * k-th receive of rank b from rank a (per-pair sequence numbers), whatever collectives or transfers with
 * other peers come between them, and however each end groups them (rank a may send three in one group
 * while rank b receives them in three calls) in check mode 0 on shm; where the pair checks first (check
 * mode 1, every call on NCCL) both ends must group a pair's transfers alike, else both fail. Collectives on
 * the same comm keep their lockstep; a pair that orders a transfer and a collective differently (rank a
 * sends, then all-reduces; rank b all-reduces, then receives) is an error on shm (relayInvalidUsage naming
 * the peer), a hang on NCCL, as in NCCL.
 *   - Shape check, every check mode: a count or datatype that differs between the send and its receive
 *     is relayInvalidUsage naming both ranks and both shapes, nothing written to the receive's buff, the
 *     pair kept in step and the comm usable. Check mode 0 on shm: the send's count and datatype travel
 *     with its data; the receiver returns the error and drains the message, the sender (its data handed
 *     off) returns success. Check mode 1, and every call on NCCL (through the comm's shm control plane,
 *     a host round per group; a captured group is checked when captured): the pair exchanges its tags
 *     before any data moves, so BOTH ends return the error and neither moves the transfer. NOT on a
 *     user's NCCL comm wrapped by relayCommInitNccl (no control plane): there a disagreeing pair is
 *     undefined, as in NCCL.
 *   - A bad argument (datatype, a NULL buff with count > 0) returns relayInvalidArgument on the caller and
 *     writes nothing; its peer learns it at the matching transfer (a send tells the receiver, whose
 *     receive returns relayRemoteError naming it; a receive drains the sender's data, and where the pair
 *     checks first the sender's send returns relayRemoteError naming it), so only the pair sees it. A
 *     peer outside [0, nranks) is rejected on the caller only (nobody to tell).
 *   - Every wait has the comm's deadline (relayTimeout naming the peer and the bytes moved); a peer that
 *     died, failed or aborted is relayRemoteError naming it.
 *   - peer == own rank: a send and a receive to oneself pair in order, inside one group.
 * relayGroupStart/relayGroupEnd: calls between them (this thread's; nesting counts) are queued and run
 * at the outermost relayGroupEnd, all transfers of one comm progressing together, so a group may send
 * to and receive from a peer at once in any order (a ring shift, an all-pairs exchange). A group may
 * span comms: each comm's transfers run as one group, the comms one after another in an order every rank
 * shares (a key the comm's ranks agreed at init), so a group that sends on one comm and receives on
 * another while a peer's group does the opposite completes. That holds where every transfer a group
 * posts on a comm meets its match in ONE group of the peer (or a single call); where a peer splits the
 * matching transfers over several calls (its send on Y, then its receive on X, as two calls), the group
 * may wait until the deadline or not, depending on the comms' agreed order (NCCL progresses a group's
 * comms together, and would complete it). A queued call's argument error is returned by
 * the call itself; relayGroupEnd returns the first error of the transfers it ran. On shm the stream is
 * ignored; on NCCL the transfers are ncclSend/ncclRecv inside ncclGroupStart/ncclGroupEnd.
 */
RELAYCC_API relayResult_t relaySend(const void* sendbuff, size_t count, relayDataType_t datatype, int peer,
                                    relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayRecv(void* recvbuff, size_t count, relayDataType_t datatype, int peer,
                                    relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayGroupStart(void);
RELAYCC_API relayResult_t relayGroupEnd(void);

/*
 * Uneven all-to-all over ONE group (layout.nGroups == 1, A = layout.nActive, 2 <= A <= nranks). Every comm
 * rank calls (a collective: it counts in the call numbering); helpers pass NULL for every array and
 * buffer. Active i sends sendcounts[j] elements from sendbuff + sdispls[j] to active j and receives
 * recvcounts[j] elements from active j into recvbuff + rdispls[j] (elements of datatype). Each rank knows
 * only its own row: the direct route runs from local counts, and a pair whose counts disagree (i's
 * sendcounts[j] != j's recvcounts[i]) is an error naming both ranks, never silent data:
 *   - check mode 0: the count travels with the data; the receiving rank returns relayInvalidUsage naming
 *     both, its block untouched (the message drained), the comm stays usable;
 *   - check mode 1 (and every call on a wrapped NCCL comm, relayCommInitNccl): the ranks agree on every
 *     row first (groups of up to 15 actives; larger ones are checked as in check mode 0, and not at all
 *     on a wrapped NCCL comm); every rank returns the same error naming the first pair that disagrees,
 *     and nothing moves.
 *   On NCCL (relayCommInitNcclShm) check mode 0 checks each pair's counts on the control plane first:
 *   both ranks of the pair fail, naming both; the other blocks move.
 * In place (sendbuff == recvbuff) is rejected. The route is always direct (relayRouteAuto and every
 * forced route run it).
 */
RELAYCC_API relayResult_t relayAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                         const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                         const size_t* rdispls, relayDataType_t datatype,
                                         const relayLayout_t* layout, relayComm_t comm, relayStream_t stream);

/*
 * Broadcast and reduce on a LAYOUT (count = counts[g] of the caller's group g, A = nActive), NCCL's
 * buffers: every rank of the comm calls, helpers with NULL buffers. rootIndex is the root's POSITION in
 * each group, 0 <= rootIndex < A: the root of group g is comm rank layout->ranks[g*A + rootIndex]. This
 * differs from relayScatter/relayGather's `root`, which is a comm rank, in the set or not: a broadcast
 * over the whole comm in rank order takes the comm rank (torch's group rank), fused groups each have
 * their own root at the same position.
 *   relayBroadcast  root send: count (read on the root only; the others may pass NULL)
 *                   every active recv: count (the root's included)
 *                   in place: sendbuff == recvbuff on the root
 *   relayReduce     every active send: count
 *                   root recv: count = op(the A sends, in active-index order; avg divides by A), written
 *                   on the root only (the others may pass NULL)
 *                   in place: sendbuff == recvbuff on the root
 * A = 2 broadcast is a copy from one rank to another, which the relay route (where built) spreads over
 * the helpers' links.
 */
RELAYCC_API relayResult_t relayBroadcast(const void* sendbuff, void* recvbuff, const size_t* counts,
                                         relayDataType_t datatype, int rootIndex, const relayLayout_t* layout,
                                         relayComm_t comm, relayStream_t stream);
RELAYCC_API relayResult_t relayReduce(const void* sendbuff, void* recvbuff, const size_t* counts,
                                      relayDataType_t datatype, relayRedOp_t op, int rootIndex,
                                      const relayLayout_t* layout, relayComm_t comm, relayStream_t stream);

/*
 * A barrier over every rank of the comm: returns once every rank has called it (relayInvalidUsage on a
 * failed or aborted comm; every wait has the comm's deadline). It is host-side: it orders the ranks'
 * host calls, not work already enqueued on a stream (on a GPU transport, synchronize `stream` first to
 * wait for that, as torch's barrier does); `stream` is taken for NCCL's call shape. It is not a
 * collective call: it takes no call number, so it never shifts the calls' lockstep.
 */
RELAYCC_API relayResult_t relayBarrier(relayComm_t comm, relayStream_t stream);

/*
 * A call that a binding rejects. A layer above this API that checks arguments of its own (the Python
 * package: a tensor's dtype, contiguity or size, a list's length) never rejects a call by itself: its
 * rank would skip the call while the peers run it, and the ranks fall out of step (a peer's next call
 * meets this one's data). It calls relayCallReject in place of the collective, on the rank that
 * rejects, with the call's shape as far as it could read it and its reason. The call is then a call
 * of this API with a bad argument on that rank: it counts (its number is consumed), it writes nothing
 * to caller memory (it is given none) and returns relayInvalidArgument with `reason` as its text
 * (relayGetLastError: "relayAllReduce (rank R, call #N): <reason>"), and the peers see what they see
 * when a C caller passes a bad argument (README "After a rejected call"):
 *   - a valid shape (coll, layout, counts, datatype, op and root as a valid call on this rank passes
 *     them): a buffer error. The rank runs its part of the call through scratch; in check mode 0 the
 *     peers that receive from it return relayRemoteError naming it, and the comm stays usable;
 *   - an invalid shape (what the binding could not read passed as NULL counts or layout, or as a
 *     datatype, op or root out of range): a shape error;
 *   - check mode 1: every rank returns relayInvalidArgument, nothing moves; the peers' texts name this
 *     rank and quote its reason.
 * A rank-set collective (scatter, gather) passes its rank set as a layout of one group ({1, nRanks,
 * ranks}) and root as a comm rank; broadcast and reduce pass their layout and root as the rootIndex (a
 * position in each group). op is read for the reducing collectives only, root for the rooted ones only.
 * Point-to-point (relayCollectiveSend, relayCollectiveRecv): counts is {count}, root the peer, layout
 * NULL; like a bad buffer of relaySend/relayRecv, only the pair sees it (a valid peer is told, or its
 * data drained), inside a group too. relayCollectiveAllToAllV: counts NULL, the layout (one group); the
 * call counts on every rank and the peers see a shape error (check mode 1: every rank returns it). reason
 * NULL: "rejected by the binding". Never returns relaySuccess.
 */
RELAYCC_API relayResult_t relayCallReject(relayCollective_t coll, const size_t* counts,
                                          relayDataType_t datatype, relayRedOp_t op,
                                          const relayLayout_t* layout, int root, const char* reason,
                                          relayComm_t comm, relayStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* RELAYCC_H_ */
