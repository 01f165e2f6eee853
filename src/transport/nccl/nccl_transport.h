/* The NCCL transport's state, shared by its files (the one-shot region,
 * oneshot.c, hangs off comm->oneshot). Not part of any public API. */
#ifndef RELAY_NCCL_TRANSPORT_H_
#define RELAY_NCCL_TRANSPORT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_port.h"
#include "transport/nccl/nccl_abi.h"

#include "relaycc.h"
#include "transport/nccl/nccl_api.h" /* every NCCL call goes through relayNccl */
#include "comm/transport.h"
#include "transport/nccl.h" /* the door: what core calls (init) */

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* A side lane of one caller stream: lane-1 ops run on `side`, forked from the
 * caller with `fork` and joined back with `join`. */
typedef struct {
  cudaStream_t caller;
  cudaStream_t side;
  cudaEvent_t fork, join;
  int pending; /* forked since the last join */
} relayNcclLane;

/* One scratch slot of one caller stream. */
typedef struct {
  cudaStream_t stream;
  int slot;
  void* ptr;
  size_t bytes;
} relayNcclScratch;

typedef struct relayNcclState {
  ncclComm_t nccl;
  int ownsNccl;           /* created by relayCommInitNcclShm: destroyed with the comm */
  int ncclDead;           /* ncclCommAbort was called: the handle is gone */
  struct relayComm* ctrl; /* shm control plane (owned comms only), else NULL */
  int device;
  int reduceBlocks;  /* block cap of reduce launches */
  uint64_t commHash; /* rank 0's nonce, agreed at init: the one-shot region's sentinels */
  int nativeOn;      /* direct route as NCCL collectives (rank 0's RELAYCC_NCCL_NATIVE, agreed at init) */

  relayNcclLane* lanes;
  int nLanes, capLanes, nPending;

  relayNcclScratch* scratch;
  int nScratch, capScratch;
  void** retired; /* outgrown scratch, freed at destroy (a captured graph may still use it) */
  int nRetired, capRetired;

  /* agree() of a wrapped comm: an ncclAllGather of <= 256 bytes per rank. */
  cudaStream_t agreeStream;
  char* agreeDev;  /* [256 send][nranks * 256 recv] */
  char* agreeHost; /* pinned, same layout */

  atomic_int aborted;

  /* Sub-communicators of the direct route, one per layout (native.c). */
  struct relayNcclNative** natives;
  int nNatives;
} relayNcclState;

relayResult_t relayNcclNativePrepare(struct relayComm* c, int nGroups, int nActive, const int* ranks,
                                     relayStream_t stream, void** handle);
relayResult_t relayNcclNative(struct relayComm* c, void* handle, relayCollective_t coll, const void* send,
                              void* recv, size_t count, relayDataType_t dt, relayRedOp_t op, int root,
                              relayStream_t stream);
void relayNcclNativeFree(relayNcclState* st, int drained);
/* Abort every sub-communicator (they stay listed, with sub = NULL). */
void relayNcclNativeAbort(relayNcclState* st);

extern const relayTransportOps relayNcclTransport;

/* Largest agree() record, as transport.h promises. */
#define RELAY_NCCL_AGREE_MAX RELAY_TP_AGREE_MAX

/* Shared by the transport's parts (nccl_transport.c, oneshot.c, native.c).
 * 1 when stream is being captured, or when that cannot be told (the query's
 * error is cleared): callers then avoid what a capture forbids. */
int relayNcclCapturing(cudaStream_t stream);
/* Creation and allocation in relaxed capture mode, never part of a graph. */
enum cudaStreamCaptureMode relayNcclRelaxCapture(void);
void relayNcclRestoreCapture(enum cudaStreamCaptureMode mode);
/* Poll a nonblocking NCCL comm (this comm's or a child) that answered
 * ncclInProgress until ready, with the comm's deadline; a failure aborts
 * this comm's NCCL communicator and fails the relay comm. */
relayResult_t relayNcclWaitReady(struct relayComm* c, ncclComm_t nccl, const char* what);
/* Wait for stream s with the comm's deadline (init's exchanges). */
relayResult_t relayNcclWaitStream(struct relayComm* c, relayNcclState* st, cudaStream_t s, const char* what);
/* NCCL and CUDA results as relaycc's, and as errors recorded on the comm
 * (rank, call number and step in the prefix). */
relayResult_t relayNcclResult(ncclResult_t r);
relayResult_t relayCudaResult(cudaError_t e);
relayResult_t relayNcclFail(struct relayComm* c, ncclResult_t r, const char* what);
relayResult_t relayNcclCudaFail(struct relayComm* c, cudaError_t e, const char* what);

/* The init entry points core calls are the transport's door, transport/nccl.h. */

#ifdef __cplusplus
}
#endif
#endif
