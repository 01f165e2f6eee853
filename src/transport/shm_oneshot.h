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
/* Wait until *word - want >= 0 (wrap-safe, acquire) as the transport's own
 * waits do: spin cfg.spinCount times (RELAYCC_SPIN), then sleep on this
 * rank's doorbell (futex) in bounded slices; between pauses the abort flag
 * and peer q's failure state, each slice q's process. relaySuccess, a peer /
 * abort error (message set, naming `where`), or relayTimeout with NO message:
 * the caller names what it waited for. */
relayResult_t relayShmWaitWord(struct relayComm* comm, _Atomic uint32_t* word, uint32_t want, int q,
                               const char* where);
/* Ring rank q's doorbell after a store it may be waiting on (no syscall
 * unless q sleeps). */
void relayShmRing(struct relayComm* comm, int q);

#ifdef __cplusplus
}
#endif
#endif
