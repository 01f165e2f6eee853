/* The shared-memory transport: one process per rank on one host. */
#ifndef RELAY_TRANSPORT_SHM_H_
#define RELAY_TRANSPORT_SHM_H_

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* Rendezvous with the other comm->nranks ranks through the shared-memory
 * segment named after jobName, then attach the shm transport to comm
 * (comm->tp, comm->tpState). Blocks until all ranks arrived or
 * comm->cfg.timeoutMs passes (relayTimeout naming the missing ranks).
 *
 * The segment is "/relaycc-<jobName>" (jobName: 1-200 characters, no '/'),
 * sized from nranks and rank 0's cfg.shmRingBytes (>= 1024; rounded up to
 * 64): nranks*(nranks-1) rings. When /dev/shm has no room, rank 0 halves the
 * rings (not below 64 KiB) and says so on stderr. Rank 0 replaces whatever a crashed run left under
 * the name and unlinks the name once everyone arrived, so nothing is left
 * behind; one job name serves one comm at a time (create comms of one job
 * one after the other, or give them different names).
 *
 * Errors of the transport's waits (group, agree, barrier): relayTimeout (no
 * progress for cfg.timeoutMs, naming the peer, step and bytes),
 * relayRemoteError (a peer we wait on failed, aborted, rejected the call,
 * destroyed its comm or died), relayInvalidUsage (sizes or call sequence
 * differ between ranks; the comm was aborted or failed before). Any of them
 * leaves the comm failed and tells the peers. Dead peers are found with
 * kill(pid, 0) and /proc, so ranks must share a PID namespace. */
relayResult_t relayShmAttach(struct relayComm* comm, const char* jobName);

#ifdef __cplusplus
}
#endif
#endif
