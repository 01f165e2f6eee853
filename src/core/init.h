/* Comm creation, owned by core: every init call (shm here, NCCL in
 * init_nccl.c) runs relayInitBegin, attaches its transport, then
 * relayInitFinish; a transport only attaches and never calls up. */
#ifndef RELAY_INIT_H_
#define RELAY_INIT_H_

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayTopo;

/* Resolve nranks / rank / jobName (arguments, else RELAYCC_NRANKS / RELAYCC_RANK /
 * RELAYCC_JOB, else WORLD_SIZE / RANK) and this rank's parameters, and
 * allocate the comm (transport not attached). An invalid setting, a config
 * that is not a relayConfig_t or one its binding rejected does not fail
 * here: the comm records it (initBadParam) and relayInitFinish fails every
 * rank with it; what fails here (no job size or rank: this rank cannot reach
 * the others) is this rank's alone. jobName may be NULL for calls that take
 * none. */
relayResult_t relayInitBegin(const char* fn, int nranks, int rank, const char** jobName,
                             const relayConfig_t* cfg, struct relayComm** out);
/* Right after relayInitBegin: the comm is a guest on a communicator relaycc does not own (comm.h's
 * guest): no deadline unless the user set one. */
void relayInitGuest(struct relayComm* comm);
/* relayCommInitShm, as a guest when guest is 1 (the interposer's test twin of a user's comm). */
relayResult_t relayInitShm(relayComm_t* out, int nranks, int rank, const char* jobName,
                           const relayConfig_t* config, int guest);
/* A detection hook a transport offers: COLLECTIVE, writes the topology it
 * found (or NULL). */
typedef relayResult_t (*relayTopoDetectFn)(struct relayComm* comm, struct relayTopo** out);
/* COLLECTIVE once the transport attached: agree the parameters (an invalid
 * one on any rank fails every rank; AGREED rows take rank 0's value), then
 * load the topology (RELAYCC_TOPO / config.topo, else detect, else
 * fallback) and agree it, then discover the nodes (core/nodes.c), then
 * print the table under RELAYCC_DEBUG. */
relayResult_t relayInitFinish(struct relayComm* comm, const char* topoFallback, relayTopoDetectFn detect);
/* The one end of every init: relayInitFail when res failed; else the comm
 * (and its control comm) stops naming the init in its errors, *out = comm. */
relayResult_t relayInitEnd(struct relayComm* comm, relayResult_t res, relayComm_t* out);
/* The one cleanup of a failed init: copies the comm's message to the
 * thread's last error, releases the comm (may be NULL) and returns res. */
relayResult_t relayInitFail(struct relayComm* comm, relayResult_t res);
/* Release everything a comm owns: transport, control comm, topology, comm. */
void relayCommRelease(struct relayComm* comm);

#ifdef __cplusplus
}
#endif
#endif
