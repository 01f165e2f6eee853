/* The communicator: what every layer below the API may read. */
#ifndef RELAY_COMM_H_
#define RELAY_COMM_H_

#include <stdatomic.h>
#include <stdint.h>

#include "core/params.h"
#include "relaycc.h"
#include "transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The settings the hot path reads, copied from the comm's resolved (and, for
 * AGREED rows, agreed) parameter table at init (init.c). */
typedef struct {
  int timeoutMs; /* 0: no deadline (a guest comm whose user set none: init.c) */
  int checkMode;
  int route; /* relayRoute_t */
  int depth; /* 0 = model */
  int shmRingBytes;
  int spinCount;
  char topo[256];
} relayResolvedConfig;

struct relayPlanCache;
struct relayTopo;

/* initBadParam: the config is not a relayConfig_t, or its binding rejected it (relayConfig_t.reject) */
enum { RELAY_INIT_BAD_CONFIG = RELAY_P_COUNT };

struct relayComm {
  int rank, nranks;
  relayResolvedConfig cfg;
  relayParams params; /* the resolved table (core/params.h): readers use relayParamInt */
  int initBadParam;   /* this rank's first invalid setting (-1: none; RELAY_INIT_BAD_CONFIG: the config
                       * struct), told to every rank at init */
  /* A control-plane comm the transport borrows (NCCL over a shm rendezvous),
   * destroyed by core after the transport. */
  struct relayComm* ctrl;
  const relayTransportOps* tp;
  void* tpState;
  /* The call in flight, for error messages and wire headers: callSeq counts
   * the calls every rank entered (same on all ranks); curStep is the plan
   * step being run (-1 outside steps). */
  uint64_t callSeq;
  int curStep;
  /* No silent wrong result (api.c): the rank known to have passed a bad
   * buffer in call callSeq (-1: none). Core sets it to this rank when it runs
   * a call through scratch in place of its bad buffers; a transport that marks
   * its messages (shm) sets it from a peer's mark and carries it on. */
  int callMark;
  /* A digest of call callSeq's shape (collective, layout, counts, dtype, op,
   * root; api.c), alike on every rank of a valid call: a transport that puts
   * it in its messages (shm) turns calls whose shapes differ between ranks
   * into errors in check mode 0. 0 outside calls. */
  uint64_t callShape;
  const char* curCallName;
  int failed;         /* sticky: an error after data may have moved */
  /* A guest comm serves a communicator relaycc does not own (relayCommInitNccl over the user's; the
   * interposer's test twin): its waits have no deadline unless the user set RELAYCC_TIMEOUT_MS (or
   * config.timeoutMs), so they end on the user's abort. forwardDeclined (the interposer's): a route
   * whose prepare declines ends the call with callDeclined set and nothing moved, on every rank alike
   * (prepares are voted), and the caller runs it on NCCL, where relaycc would have taken another
   * route. */
  int guest, forwardDeclined, callDeclined;
  atomic_int aborted; /* set by relayCommAbort, read by waits */
  atomic_int inCall;
  int lastRoute, lastDepth; /* what the last call ran, after fallbacks */
  uint32_t lastWindow;      /* the window whose direct path the last call took (0: none; tests read it) */
  struct relayTopo* topo;   /* the cost model's view of this node (NULL: none) */
  /* Nodes (src/core/nodes.c, set at init): nodeOf[r] is comm rank r's node,
   * 0..nNodes-1 in order of each node's lowest rank; localRank is this
   * rank's index among the localRanks ranks of its node. */
  int* nodeOf;
  int nNodes, localRank, localRanks;
  struct relayPlanCache* plans;
  void* oneshot;  /* the transport's one-shot region state (NULL: never tried); its destroy frees it */
  void* bw;       /* the transport's bandwidth-route region state (NULL: never tried); its destroy frees it */
  void* execBuf; /* executor's descriptor arrays, grown as needed */
  /* Registered windows (core/window.c): the table, the registrations so far
   * (window ids), how many are direct, and the call's match (set per call by
   * core, NULL: staged; offsets as relayBwDesc's). */
  struct relayWindow** windows;
  int nWindows, capWindows, directWindows;
  uint32_t windowSeq;
  const struct relayWindow* callWin;
  size_t callSendOff, callRecvOff;
  /* Per comm rank: (check stamp << 32) | (index + 1) of the rank in the
   * rank list being validated, so a duplicate is found in O(n) (api.c). */
  uint64_t* rankSeen;
  uint32_t rankCheck;
  size_t execBufBytes;
  /* Where every agreement round lands (comm/vote.h): nranks records of
   * RELAY_TP_AGREE_MAX bytes, allocated at init so that a rank short of
   * memory still votes. */
  void* agreeBuf;
  char lastError[1024];
};

void relayCommFree(struct relayComm* comm);
/* The longest a wait of this comm may last, in ns: cfg.timeoutMs, or UINT64_MAX (never given up) when
 * the comm has no deadline. relayDeadlineNs: the end of a wait that starts at now (relayNowNs). */
static inline uint64_t relayWaitLimitNs(const struct relayComm* c) {
  return c->cfg.timeoutMs > 0 ? (uint64_t)c->cfg.timeoutMs * 1000000ull : UINT64_MAX;
}
static inline uint64_t relayDeadlineNs(const struct relayComm* c, uint64_t now) {
  uint64_t limit = relayWaitLimitNs(c);
  return limit == UINT64_MAX ? UINT64_MAX : now + limit;
}
/* core/window.c: the direct window of this rank's part of a call (NULL: the
 * staged path) and the offsets of the buffers peers access; frees every
 * window at destroy (before the transport's destroy). */
struct planKey;
const struct relayWindow* relayWindowMatch(const struct relayComm* comm, const struct planKey* key,
                                           const void* send, const void* recv, size_t* sendOff, size_t* recvOff);
void relayWindowFreeAll(struct relayComm* comm);
/* A value of the comm's resolved parameter table (AGREED rows: rank 0's). */
static inline long long relayParamInt(const struct relayComm* comm, relayParamId id) { return comm->params.v[id]; }

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
struct planKey;
/* The route capabilities core gives the router for key on this comm (api.c). */
int relayCommRouteCaps(const struct relayComm* comm, const struct planKey* key);
/* Sets the key's fields that come from the comm's agreed settings (the
 * bandwidth route's tile and ring), so plans stay pure functions of keys. */
void relayCommKeySettings(const struct relayComm* comm, struct planKey* key);
/* The interposer's one question: would relaycc route this call on this comm now, rather than
 * leave it to NCCL's own collective (relayRouteBeatsNative on the key runCall builds, node map
 * included; per call unless the stream captures)? Pure: every rank of a comm answers alike for the
 * same call, a rank whose comm failed too (its call then fails as its peers' do, rather than going
 * to NCCL alone). */
int relayCommRoutesCall(struct relayComm* comm, relayColl_t coll, const size_t* counts, relayDataType_t dtype,
                        relayRedOp_t op, const relayLayout_t* layout, relayStream_t stream);
/* relayCommAbort's first half, safe from another thread while a call runs: the comm is marked aborted
 * and the transport wakes every wait (host and kernel); nothing is freed. */
void relayCommAbortFlags(struct relayComm* comm);
/* A failure the transport met after a call returned (a GPU kernel's error word: transport.h's
 * asyncError), else relaySuccess; why says what. Safe from another thread while a call runs (the
 * interposer's ncclCommGetAsyncError, a watchdog's poll). */
relayResult_t relayCommAsyncError(struct relayComm* comm, char* why, size_t whyLen);
/* The route and depth the last call on this comm ran (after fallbacks). */
void relayCommLastRoute(struct relayComm* comm, int* route, int* depth);

#ifdef __cplusplus
}
#endif
#endif
