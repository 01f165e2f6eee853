/* The communicator: what every layer below the API may read. */
#ifndef RELAY_COMM_H_
#define RELAY_COMM_H_

#include <stdatomic.h>
#include <stdint.h>

#include "relaycc.h"
#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Config after resolving fields, environment and defaults. */
typedef struct {
  int timeoutMs;
  int checkMode;
  int route; /* relayRoute_t */
  int depth; /* 0 = model */
  int shmRingBytes;
  int spinCount;
  char topo[256];
} relayResolvedConfig;

struct relayPlanCache;
struct relayTopo;

struct relayComm {
  int rank, nranks;
  relayResolvedConfig cfg;
  const relayTransportOps* tp;
  void* tpState;
  /* The call in flight, for error messages and wire headers: callSeq counts
   * the calls every rank entered (same on all ranks); curStep is the plan
   * step being run (-1 outside steps). */
  uint64_t callSeq;
  int curStep;
  const char* curCallName;
  /* The p2pOp (src/p2p/p2p.h) of the group being run: the executor sets it
   * from the plan's collective before each group, so a transport that splits
   * transfers into channel parts (shm) applies the operation's part rule.
   * 0 (P2P_OP_SENDRECV) outside calls and for groups driven directly. */
  int curP2pOp;
  int failed;         /* sticky: an error after data may have moved */
  atomic_int aborted; /* set by relayCommAbort, read by waits */
  atomic_int inCall;
  int lastRoute, lastDepth; /* what the last call ran, after fallbacks */
  struct relayTopo* topo;   /* the cost model's view of this node (NULL: none) */
  struct relayPlanCache* plans;
  void* oneshot;  /* the transport's one-shot region state (NULL: never tried); its destroy frees it */
  void* bw;       /* the transport's bandwidth-route region state (NULL: never tried); its destroy frees it */
  void* execBuf; /* executor's descriptor arrays, grown as needed */
  /* Per comm rank: (check stamp << 32) | (index + 1) of the rank in the
   * rank list being validated, so a duplicate is found in O(n) (api.c). */
  uint64_t* rankSeen;
  uint32_t rankCheck;
  size_t execBufBytes;
  char lastError[1024];
};

/* Resolve config fields > environment > defaults. */
relayResult_t relayResolveConfig(const relayConfig_t* cfg, relayResolvedConfig* out);
/* Allocate a comm and resolve its config (transport not yet attached). */
relayResult_t relayCommAlloc(int nranks, int rank, const relayConfig_t* cfg, struct relayComm** out);
void relayCommFree(struct relayComm* comm);

/* Load comm->topo from cfg.topo (RELAYCC_TOPO), else from fallback (a preset
 * name, or NULL/"" for none). */
relayResult_t relayCommLoadTopo(struct relayComm* comm, const char* fallback);
/* COLLECTIVE at init, after each rank set comm->topo (loaded or detected):
 * every rank must route with the same model, so the ranks vote their local
 * result and the hash of their topology (relayTopoHash; none = 0). A rank's
 * failure fails every rank (its message names it); differing topologies
 * leave every rank with none (comm->topo NULL: the router's no-model rule). */
relayResult_t relayCommAgreeTopo(struct relayComm* comm, relayResult_t local);

/* Internal conveniences for tools and tests (not part of the public API). */
relayResult_t relayCommBarrier(struct relayComm* comm);
relayResult_t relayCommAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes);
/* The route and depth the last call on this comm ran (after fallbacks). */
void relayCommLastRoute(struct relayComm* comm, int* route, int* depth);

#ifdef __cplusplus
}
#endif
#endif
