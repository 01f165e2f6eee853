/*
 * The NCCL API as data: every public function of nccl.h (NCCL 2.28.9), one
 * X(return type, name, (parameters), (arguments)) row each, by return type
 * (a void function cannot `return f(...)` in C11). nccl.h also declares a
 * profiling twin pnccl<Name> of each; users of these lists paste `p` on the
 * name where they need it.
 *
 * relaycc resolves NCCL at run time (nccl_lib.c) into relayNccl, a table of
 * these functions, and calls NCCL only through it: librelaycc then has no
 * DT_NEEDED on libnccl and binds to the libnccl.so.2 the process already
 * loaded (PyTorch loads its wheel's copy outside the global scope, where
 * linking or dlsym(RTLD_NEXT) would find the system one or none), and the
 * interposer (src/shim/) forwards to the real library without calling its
 * own exports back.
 *
 * Rows were generated from the header; when NCCL adds a function, add its
 * row (the shim test compares these names with a parse of nccl.h).
 */
#ifndef RELAY_NCCL_API_H_
#define RELAY_NCCL_API_H_

#include "gpu_port.h"
#include "transport/nccl/nccl_abi.h"

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Not formatted: the rows below are written one function per row; clang-format 14 bin-packs them into
 * a staircase and does not reach a fixed point on RELAY_NCCL_NEEDED (a second run changes it). */
/* clang-format off */
#define RELAY_NCCL_API(X) \
  X(ncclResult_t, ncclMemAlloc, \
    (void** ptr, size_t size), \
    (ptr, size)) \
  X(ncclResult_t, ncclMemFree, \
    (void *ptr), \
    (ptr)) \
  X(ncclResult_t, ncclGetVersion, \
    (int *version), \
    (version)) \
  X(ncclResult_t, ncclGetUniqueId, \
    (ncclUniqueId* uniqueId), \
    (uniqueId)) \
  X(ncclResult_t, ncclCommInitRankConfig, \
    (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), \
    (comm, nranks, commId, rank, config)) \
  X(ncclResult_t, ncclCommInitRank, \
    (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank), \
    (comm, nranks, commId, rank)) \
  X(ncclResult_t, ncclCommInitAll, \
    (ncclComm_t* comm, int ndev, const int* devlist), \
    (comm, ndev, devlist)) \
  X(ncclResult_t, ncclCommFinalize, \
    (ncclComm_t comm), \
    (comm)) \
  X(ncclResult_t, ncclCommDestroy, \
    (ncclComm_t comm), \
    (comm)) \
  X(ncclResult_t, ncclCommAbort, \
    (ncclComm_t comm), \
    (comm)) \
  X(ncclResult_t, ncclCommRevoke, \
    (ncclComm_t comm, int revokeFlags), \
    (comm, revokeFlags)) \
  X(ncclResult_t, ncclCommSplit, \
    (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config), \
    (comm, color, key, newcomm, config)) \
  X(ncclResult_t, ncclCommShrink, \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, \
     ncclConfig_t* config, int shrinkFlags), \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags)) \
  X(ncclResult_t, ncclCommInitRankScalable, \
    (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config), \
    (newcomm, nranks, myrank, nId, commIds, config)) \
  X(ncclResult_t, ncclCommGetAsyncError, \
    (ncclComm_t comm, ncclResult_t *asyncError), \
    (comm, asyncError)) \
  X(ncclResult_t, ncclCommCount, \
    (const ncclComm_t comm, int* count), \
    (comm, count)) \
  X(ncclResult_t, ncclCommCuDevice, \
    (const ncclComm_t comm, int* device), \
    (comm, device)) \
  X(ncclResult_t, ncclCommUserRank, \
    (const ncclComm_t comm, int* rank), \
    (comm, rank)) \
  X(ncclResult_t, ncclCommRegister, \
    (const ncclComm_t comm, void* buff, size_t size, void** handle), \
    (comm, buff, size, handle)) \
  X(ncclResult_t, ncclCommDeregister, \
    (const ncclComm_t comm, void* handle), \
    (comm, handle)) \
  X(ncclResult_t, ncclCommWindowRegister, \
    (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags), \
    (comm, buff, size, win, winFlags)) \
  X(ncclResult_t, ncclCommWindowDeregister, \
    (ncclComm_t comm, ncclWindow_t win), \
    (comm, win)) \
  X(ncclResult_t, ncclRedOpCreatePreMulSum, \
    (ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, \
     ncclComm_t comm), \
    (op, scalar, datatype, residence, comm)) \
  X(ncclResult_t, ncclRedOpDestroy, \
    (ncclRedOp_t op, ncclComm_t comm), \
    (op, comm)) \
  X(ncclResult_t, ncclReduce, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, \
     int root, ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream)) \
  X(ncclResult_t, ncclBcast, \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
    (buff, count, datatype, root, comm, stream)) \
  X(ncclResult_t, ncclBroadcast, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, \
     ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, root, comm, stream)) \
  X(ncclResult_t, ncclAllReduce, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, \
     ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, op, comm, stream)) \
  X(ncclResult_t, ncclReduceScatter, \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, \
     ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream)) \
  X(ncclResult_t, ncclAllGather, \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, \
     cudaStream_t stream), \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream)) \
  X(ncclResult_t, ncclAlltoAll, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, \
     cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, comm, stream)) \
  X(ncclResult_t, ncclGather, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, \
     ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, root, comm, stream)) \
  X(ncclResult_t, ncclScatter, \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, \
     ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, recvbuff, count, datatype, root, comm, stream)) \
  X(ncclResult_t, ncclSend, \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, \
     cudaStream_t stream), \
    (sendbuff, count, datatype, peer, comm, stream)) \
  X(ncclResult_t, ncclRecv, \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, \
     cudaStream_t stream), \
    (recvbuff, count, datatype, peer, comm, stream)) \
  X(ncclResult_t, ncclGroupStart, \
    (void), \
    ()) \
  X(ncclResult_t, ncclGroupEnd, \
    (void), \
    ()) \
  X(ncclResult_t, ncclGroupSimulateEnd, \
    (ncclSimInfo_t* simInfo), \
    (simInfo))

#define RELAY_NCCL_API_STR(X) \
  X(const char*, ncclGetErrorString, \
    (ncclResult_t result), \
    (result)) \
  X(const char*, ncclGetLastError, \
    (ncclComm_t comm), \
    (comm))

#define RELAY_NCCL_API_VOID(X) \
  X(void, ncclResetDebugInit, \
    (void), \
    ())

/* Every row of the three lists, whatever it returns. */
#define RELAY_NCCL_API_ALL(X) RELAY_NCCL_API(X) RELAY_NCCL_API_STR(X) RELAY_NCCL_API_VOID(X)

#ifdef RELAY_HAVE_HIP
/* The HIP build has no rccl.h (nccl_abi.h): NCCL's prototypes, from the rows, for what calls RCCL
 * directly (the bench's NCCL backend and the GPU tests, linked to librccl) and the shim's wrappers. */
#define RELAY_NCCL_PROTO_(ret, name, params, args) ret name params; ret p##name params;
RELAY_NCCL_API_ALL(RELAY_NCCL_PROTO_)
#undef RELAY_NCCL_PROTO_
#endif

/* The functions relaycc's own comms cannot work without (NCCL 2.7 has them all). What relaycc
 * merely prefers is optional and checked where it is used: ncclCommSplit (2.18; without it the
 * direct route keeps relaycc's send/recv plan), ncclAlltoAll (2.28; without it the native
 * all-to-all is a group of ncclSend/ncclRecv), ncclCommInitRankConfig (2.14; else
 * ncclCommInitRank), ncclGetLastError (2.13), ncclCommRevoke (2.28.9). The interposer needs none
 * of them: each forwarder checks its own function. */
#define RELAY_NCCL_NEEDED(Y)                                                                            \
  Y(ncclGetVersion) Y(ncclGetUniqueId) Y(ncclCommInitRank) Y(ncclCommDestroy) Y(ncclCommAbort)          \
  Y(ncclCommGetAsyncError) Y(ncclCommCount) Y(ncclCommCuDevice) Y(ncclCommUserRank) Y(ncclGetErrorString) \
  Y(ncclGroupStart) Y(ncclGroupEnd) Y(ncclSend) Y(ncclRecv) Y(ncclAllReduce) Y(ncclReduceScatter)       \
  Y(ncclAllGather)
/* clang-format on */

/* The table: nccl<Name> and its profiling twin pnccl<Name>. */
typedef struct {
#define RELAY_NCCL_FIELD_(ret, name, params, args) \
  ret(*name) params;                               \
  ret(*p##name) params;
  RELAY_NCCL_API_ALL(RELAY_NCCL_FIELD_)
#undef RELAY_NCCL_FIELD_
  void* handle;    /* dlopen handle of the library */
  char path[4096]; /* where it was found (dladdr of ncclGetVersion) */
  int version;     /* ncclGetVersion's code, e.g. 22809 */
  /* 1 when the library has every RELAY_NCCL_NEEDED function; else why not (the first one missing),
   * and relaycc creates no comm over it while the interposer still forwards every call. */
  int usable;
  char unusable[4096 + 128]; /* the path and the message */
  /* Set by the interposer before any comm exists: it never preconnects the
   * pairs of the user's communicators (no wrapped comm is ever aborted by
   * relaycc, interposer or not: nccl_transport.c). */
  int guest;
} relayNcclLib;

extern relayNcclLib relayNccl;

/*
 * Fill relayNccl once per process (thread-safe; every later call returns the
 * first answer, whatever it passes). The library: `path` when not NULL or
 * empty (the shim's RELAYCC_SHIM_NCCL), else RELAYCC_NCCL_LIB when set, else
 * the libnccl.so.2 already loaded in the process (dlopen RTLD_NOLOAD), else
 * dlopen("libnccl.so.2"). relayNcclOpen succeeds when the library opened and
 * answered ncclGetVersion (every function it has is in the table: what the
 * interposer forwards); relayNcclLoad also requires relayNccl.usable (what
 * relaycc's own comms need). A failure is relaySystemError with a message
 * naming the library and the symbol (relayGetLastError(NULL) on this thread).
 */
relayResult_t relayNcclOpen(const char* path); /* relayNcclLoad: the transport's door, transport/nccl.h */

#ifdef __cplusplus
}
#endif
#endif /* RELAY_NCCL_API_H_ */
