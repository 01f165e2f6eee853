/* The shm transport's one-shot twin (shm_oneshot.c) and what it uses of
 * shm.c. Internal: only the two shm files include it. */
#ifndef RELAY_TRANSPORT_SHM_ONESHOT_H_
#define RELAY_TRANSPORT_SHM_ONESHOT_H_

#include <stdint.h>

#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A staging region per rank, mapped by every peer (the one-shot's and the
 * bandwidth route's): POSIX shm "/relaycc-<tag>-<commHash>-<rank>", created,
 * mapped by all, voted twice (created; opened with the right sentinel and
 * param), and unlinked, so nothing is left in /dev/shm. The owner's layout
 * starts after relayShmRegionHeaderBytes(). One flag word per 64-byte line:
 * each has one writer. */
#define RELAY_SHM_LINE 64
typedef struct {
  _Alignas(RELAY_SHM_LINE) _Atomic uint32_t v;
} relayShmWord;
typedef struct {
  int n;
  size_t bytes;         /* of each rank's region, header included */
  uint64_t hash;        /* the comm's nonce */
  unsigned char** base; /* [n] mapped regions (own included) */
} relayShmRegion;
size_t relayShmRegionHeaderBytes(void);
/* COLLECTIVE: relaySuccess (every rank mapped every region), relayNotSupported
 * (declined by some rank, or param differs: every rank alike), or an error.
 * faultRank: that rank votes no as if an open failed (tests), -1 none. */
relayResult_t relayShmRegionSetup(struct relayComm* comm, relayShmRegion* R, const char* tag, uint64_t param,
                                  size_t bytes, int faultRank);
/* COLLECTIVE, for a rank that cannot even try (out of memory): votes no in
 * both rounds; relayNotSupported or an error. */
relayResult_t relayShmRegionDecline(struct relayComm* comm, uint64_t param);
void relayShmRegionUnmap(relayShmRegion* R);
/* Wait until w - want >= 0 (relayShmWaitWord); a timeout's message names
 * proto ("one-shot", "bw"), what was awaited, its epoch and the peer. */
relayResult_t relayShmRegionWait(struct relayComm* comm, relayShmWord* w, uint32_t want, int peer, const char* proto,
                                 const char* what);

/* A push's call number, mark (1 + comm->callMark) and shape digest, stored
 * before its flag (relaxed; the flag's release publishes them), and checked
 * by the consumer after the flag's acquire: relayInvalidUsage naming both
 * calls when the push is of another call or shape; a mark sets
 * comm->callMark (the pusher passed a bad buffer). proto names the protocol. */
void relayShmStampMark(struct relayComm* comm, _Atomic uint32_t* call, _Atomic uint32_t* mark, _Atomic uint32_t* shape);
relayResult_t relayShmCheckMark(struct relayComm* comm, _Atomic uint32_t* call, _Atomic uint32_t* mark,
                                _Atomic uint32_t* shape, int peer, const char* proto);

relayResult_t relayShmOneShotPrepare(struct relayComm* comm, size_t slotBytes, relayStream_t stream);
relayResult_t relayShmOneShot(struct relayComm* comm, const relayOneShotDesc* d, relayStream_t stream);
void relayShmOneShotFree(struct relayComm* comm);

/* shm_bw.c: the bandwidth route's twin (tiles through a staging ring). */
relayResult_t relayShmBwPrepare(struct relayComm* comm, size_t tileBytes, int ring, relayStream_t stream);
relayResult_t relayShmBw(struct relayComm* comm, const relayBwDesc* d, relayStream_t stream);
void relayShmBwFree(struct relayComm* comm);
/* shm_bw.c: windows (transport.h winRegister / winDeregister): the direct path's cross-memory attach. */
relayResult_t relayShmWinRegister(struct relayComm* comm, struct relayWindow* w, const uint64_t* bases);
void relayShmWinDeregister(struct relayComm* comm, struct relayWindow* w, int collective);

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
