/*
 * relaycc on NVIDIA GPUs: the NCCL transport.
 *
 * Each plan step is one NCCL group (ncclSend/ncclRecv of bytes) on the
 * caller's stream; local reduces and copies are CUDA kernels and
 * cudaMemcpyAsync on that stream (a plan's side lane runs on a cached side
 * stream joined back before the call returns). Collectives take a
 * cudaStream_t as their relayStream_t. Nothing in a collective
 * host-synchronizes, so calls can be captured into CUDA graphs; scratch is
 * plain cudaMalloc memory owned by the relay comm, freed by relayCommDestroy.
 *
 * Timeouts: every host wait of this transport (init, agreement, destroy) is a
 * poll with the comm's deadline (RELAYCC_TIMEOUT_MS). When one passes, the
 * NCCL communicator is stuck, so relaycc calls ncclCommAbort on a communicator
 * it created and returns relayTimeout naming the rank and step. A wrapped
 * communicator (relayCommInitNccl) is the caller's: relaycc never aborts it,
 * and its waits have no deadline unless the caller set one (config.timeoutMs
 * or RELAYCC_TIMEOUT_MS); they end when the caller aborts the relay comm.
 * A failure is the relay comm's (relayGetLastError) and the caller decides.
 */
#ifndef RELAYCC_NCCL_H_
#define RELAYCC_NCCL_H_

#include "relaycc_gpu.h"

#if RELAYCC_WITH_HIP
/* The HIP build (AMD GPUs, RCCL): no RCCL header is needed; ncclComm_t is
 * declared as rccl.h and nccl.h declare it (repeating it is valid C and C++). */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
typedef struct ncclComm* ncclComm_t;
#else
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Wrap a communicator the user already has (as PyTorch and torchrun users
 * do). The relay comm covers all ranks of `nccl` with the same rank numbers;
 * its device is the NCCL comm's device, which must be the current device. The
 * user keeps ownership: relayCommDestroy leaves `nccl` alive, and `nccl` must
 * outlive the relay comm. Collective over all ranks of `nccl` (it agrees the
 * configuration and connects every pair once, so that no later call stalls
 * in NCCL's connection setup).
 */
RELAYCC_API relayResult_t relayCommInitNccl(relayComm_t* comm, ncclComm_t nccl, const relayConfig_t* config);

/*
 * Create a relay comm of nranks processes of one host with its own NCCL
 * communicator: the ncclUniqueId travels through the shared-memory
 * rendezvous named after jobName (the same rendezvous relayCommInitShm uses,
 * under a name of its own). nranks <= 0, rank < 0 and jobName == NULL take
 * RELAYCC_NRANKS / RELAYCC_RANK / RELAYCC_JOB, then WORLD_SIZE / RANK
 * (job "relaycc"); cudaDevice < 0 takes LOCAL_RANK, else rank modulo the
 * device count. Sets the current device. The NCCL communicator is owned by
 * the relay comm and destroyed with it. relaycc leaves the process
 * environment alone: NCCL reads NCCL_NVLS_ENABLE and its other variables as
 * the user set them (NVLink SHARP off needs NCCL_NVLS_ENABLE=0 from the user).
 * Collective: blocks until all nranks arrived or the deadline passes.
 */
RELAYCC_API relayResult_t relayCommInitNcclShm(relayComm_t* comm, int nranks, int rank, const char* jobName,
                                               int cudaDevice, const relayConfig_t* config);

/*
 * A unique-id init, for the Python package (torch process groups) and comms
 * over several nodes: rank 0 calls relayNcclGetUniqueId and the launcher
 * hands the id to every rank.
 */
#define RELAY_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[RELAY_NCCL_UNIQUE_ID_BYTES];
} relayNcclUniqueId;
RELAYCC_API relayResult_t relayNcclGetUniqueId(relayNcclUniqueId* id); /* wraps ncclGetUniqueId */
/* Collective: creates its own NCCL comm of nranks from id (ncclCommInitRankConfig) on cudaDevice and
 * builds the relaycc comm over it (owned: destroyed with the comm). cudaDevice < 0 takes LOCAL_RANK,
 * else rank modulo the device count; sets the current device. */
RELAYCC_API relayResult_t relayCommInitNcclRank(relayComm_t* comm, int nranks, const relayNcclUniqueId* id,
                                                int rank, int cudaDevice, const relayConfig_t* config);

/*
 * The NCCL communicator under a relay comm on the NCCL transport (owned or
 * wrapped; still owned by whoever owned it). relayInvalidArgument when the
 * comm is on another transport. Useful to build baselines with ncclCommSplit.
 */
RELAYCC_API relayResult_t relayCommGetNcclComm(relayComm_t comm, ncclComm_t* nccl);

#ifdef __cplusplus
}
#endif
#endif /* RELAYCC_NCCL_H_ */
