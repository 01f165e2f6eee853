/* Core's entry points on a comm (core/: api.c, init.c, internal_api.c, window.c), for core's own files, the
 * interposer, tools and tests: what the floor below (comm/comm.h) must not offer, since only core may
 * call it. */
#ifndef RELAY_CORE_H_
#define RELAY_CORE_H_

#include <stddef.h>

#include "comm/comm.h"
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct planKey;

void relayCommFree(struct relayComm* comm);
/* core/window.c: the direct window of this rank's part of a call (NULL: the
 * staged path) and the offsets of the buffers peers access; frees every
 * window at destroy (before the transport's destroy). */
const struct relayWindow* relayWindowMatch(const struct relayComm* comm, const struct planKey* key,
                                           const void* send, const void* recv, size_t* sendOff,
                                           size_t* recvOff);
void relayWindowFreeAll(struct relayComm* comm);
/* COLLECTIVE at init (init.c), after each rank set comm->topo (loaded or
 * detected): every rank must route with the same model, so the ranks vote
 * their local result and the hash of their topology (relayTopoHash; none =
 * 0). A rank's failure fails every rank (its message names it); differing
 * topologies leave every rank with none (comm->topo NULL: the router's
 * no-model rule). */
relayResult_t relayCommAgreeTopo(struct relayComm* comm, relayResult_t local);

/* Internal conveniences for tools and tests (not part of the public API). */
relayResult_t relayCommBarrier(struct relayComm* comm);
relayResult_t relayCommAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes);
/* The route capabilities core gives the router for key on this comm (api.c). */
int relayCommRouteCaps(const struct relayComm* comm, const struct planKey* key);
/* The interposer's one question: would relaycc route this call on this comm now, rather than
 * leave it to NCCL's own collective (relayRouteBeatsNative on the key runCall builds, node map
 * included; per call unless the stream captures)? Pure: every rank of a comm answers alike for the
 * same call, a rank whose comm failed too (its call then fails as its peers' do, rather than going
 * to NCCL alone). The plans the router built to answer go to the comm's plan cache (built once). */
int relayCommRoutesCall(struct relayComm* comm, relayCollective_t coll, const size_t* counts,
                        relayDataType_t dtype, relayRedOp_t op, const relayLayout_t* layout, int root,
                        relayStream_t stream);
/* A call of any collective by its row (comm/coll.h), as the API's functions make it: the interposer's
 * one way in, whatever NCCL call it took. layout: a rooted call's set is its one group; root: rooted
 * calls only; op: reducing calls only. */
relayResult_t relayCommCall(struct relayComm* comm, relayCollective_t coll, const void* send, void* recv,
                            const size_t* counts, relayDataType_t dtype, relayRedOp_t op,
                            const relayLayout_t* layout, int root, relayStream_t stream);
/* core/pt2pt.c: relayCallReject's point-to-point and all-to-all-v calls (peer: the reject's root). */
relayResult_t relayPt2ptReject(int isSend, size_t count, relayDataType_t datatype, int peer,
                               const char* reason, relayComm_t comm, relayStream_t stream);
relayResult_t relayAllToAllvReject(relayDataType_t datatype, const relayLayout_t* layout, const char* reason,
                                   relayComm_t comm, relayStream_t stream);
/* relayCommAbort's first half, safe from another thread while a call runs: the comm is marked aborted
 * and the transport wakes every wait (host and kernel); nothing is freed. */
void relayCommAbortFlags(struct relayComm* comm);
/* A failure the transport met after a call returned (a GPU kernel's error word: transport.h's
 * asyncError), or a peer the comm's control plane knows is dead (transport.h's deadPeer: work enqueued
 * with it may wait forever, as relay steps through a killed helper did on the H200), else relaySuccess;
 * why says what. The first found is latched: the comm's next call fails with it (relayCommLatched). Safe
 * from another thread while a call runs (the interposer's ncclCommGetAsyncError, a watchdog's poll). */
relayResult_t relayCommAsyncError(struct relayComm* comm, char* why, size_t whyLen);
/* The peer the comm's control plane knows is dead (relayRemoteError, why naming it), else relaySuccess. */
relayResult_t relayCommDeadPeer(struct relayComm* comm, char* why, size_t whyLen);
/* The latched async failure as this call's error (the comm is then failed), else relaySuccess. */
relayResult_t relayCommLatched(struct relayComm* comm);
/* The route and depth the last call on this comm ran (after fallbacks). */
void relayCommLastRoute(struct relayComm* comm, int* route, int* depth);

#ifdef __cplusplus
}
#endif
#endif
