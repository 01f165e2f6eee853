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
 * comm->cfg.timeoutMs passes (relayTimeout naming the missing ranks). */
relayResult_t relayShmAttach(struct relayComm* comm, const char* jobName);

#ifdef __cplusplus
}
#endif
#endif
