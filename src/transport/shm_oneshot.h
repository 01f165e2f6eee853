/* The shm transport's one-shot twin (shm_oneshot.c) and what it uses of
 * shm.c. Internal: only the two shm files include it. */
#ifndef RELAY_TRANSPORT_SHM_ONESHOT_H_
#define RELAY_TRANSPORT_SHM_ONESHOT_H_

#include <stdint.h>

#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

relayResult_t relayShmOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream);
relayResult_t relayShmOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream);
void relayShmOneShotFree(struct relayComm* comm);

/* shm.c */
uint64_t relayShmCommHash(struct relayComm* comm);
relayResult_t relayShmCheckPeer(struct relayComm* comm, int q, const char* where);

#ifdef __cplusplus
}
#endif
#endif
