/* The NCCL transport's door: what core (core/init_nccl.c) calls to load NCCL, create or adopt an NCCL
 * comm and attach the transport to a relaycc comm, as transport/shm.h is the shm transport's. Everything
 * else of the transport is private to src/transport/nccl/ (nccl_transport.h, the function table
 * nccl_api.h). Built with the NCCL transport only. */
#ifndef RELAY_TRANSPORT_NCCL_H_
#define RELAY_TRANSPORT_NCCL_H_

#include "relaycc_nccl.h" /* ncclComm_t */

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;
/* Load the process's NCCL (torch's when loaded; path NULL) into the transport's function table
 * (nccl_lib.c); relaySystemError when it cannot be used. */
relayResult_t relayNcclLoad(const char* path);
/* Abort an NCCL comm this process created (an init that failed before the transport owned it). */
void relayNcclAbortComm(ncclComm_t nccl);
struct relayTopo;
/* Build the transport state over nccl on device and check that every rank
 * sees the same comm (COLLECTIVE); ctrl is a control-plane comm core owns,
 * or NULL. owns: destroy nccl with the comm. */
relayResult_t relayNcclAttach(struct relayComm* c, ncclComm_t nccl, int owns, struct relayComm* ctrl,
                              int device);
/* COLLECTIVE, after core agreed the parameters: native on/off, preconnect,
 * the one-shot region at init (RELAYCC_NCCL_NATIVE / _PRECONNECT / RELAYCC_ONESHOT_PREPARE). */
relayResult_t relayNcclStart(struct relayComm* c);
/* COLLECTIVE: the ranks' GPUs by PCI bus id, as a detected topology (or NULL). */
relayResult_t relayNcclDetectTopo(struct relayComm* c, struct relayTopo** out);
/* The rank, size and device of a user's NCCL comm. */
relayResult_t relayNcclQuery(ncclComm_t nccl, int* nranks, int* rank, int* device);
/* COLLECTIVE over ctrl (a shm comm of the same ranks): pick and set this
 * rank's device (cudaDevice < 0: localRank, else rank modulo the device
 * count), share rank 0's ncclUniqueId, create the NCCL comm and vote on it.
 * badParam >= 0: this rank's setting is invalid (badWhy: its message), and
 * every rank fails here. Errors land on ctrl (its init's name and rank). */
relayResult_t relayNcclCreateOverShm(struct relayComm* ctrl, int cudaDevice, int localRank, int badParam,
                                     const char* badWhy, int* device, ncclComm_t* out);
/* Create the NCCL comm from a unique id on cudaDevice (set current). */
relayResult_t relayNcclCreateFromId(int nranks, const void* id, int rank, int cudaDevice, ncclComm_t* out);

#ifdef __cplusplus
}
#endif
#endif
