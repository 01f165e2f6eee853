/* The communicator: the shared state every floor reads (CONTRIBUTING.md "Floors"); core's entry points
 * on it are core/core.h. */
#ifndef RELAY_COMM_H_
#define RELAY_COMM_H_

#include <stdatomic.h>
#include <stdint.h>

#include "comm/params.h"
#include "relaycc.h"
#include "comm/transport.h"

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
  int spinCount;   /* polls before a wait sleeps (shmPause): spinBusy, then RELAYCC_SPIN's yielding ones */
  int spinAdapt;   /* ranks outnumber cores: the shm waits adapt their polls (shmPause) */
  uint64_t spinNs; /* RELAYCC_SPIN_US: the polls' time bound, since the wait's last progress */
  int spinBusy; /* the first polls, busy without a syscall (RELAYCC_SPIN_BUSY; 0 when ranks outnumber cores)
                 */
  char topo[256];
} relayResolvedConfig;

struct relayPlanCache;
struct relayTopo;

/* initBadParam: the config is not a relayConfig_t, or its binding rejected it (relayConfig_t.reject) */
enum { RELAY_INIT_BAD_CONFIG = RELAY_P_COUNT };

struct relayComm {
  int rank, nranks;
  relayResolvedConfig cfg;
  /* CPUs the ranks may run on together (the union of their affinity masks, relayCommAgreeTopo; 0 before
   * that round: the online count): whether every rank has a core (fillConfig's busy polls). */
  int rankCpus;
  relayParams params; /* the resolved table (comm/params.h): readers use relayParamInt */
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
  /* Check mode 0, a rooted call whose agreement carried every rank's send pointer (api.c agreeOnShape, a
   * comm of at most RELAY_TP_ONESHOT_MAX ranks): callSends[r] is rank r's caller send, which the shm
   * one-copy broadcast reads in place of an entry round of its own (transport/shm/bw.c). callSendsKnown is
   * 0 in every other call, on every rank alike (the round is every rank's or none's). */
  int callSendsKnown;
  uint64_t callSends[RELAY_TP_ONESHOT_MAX];
  /* Check mode 0, a broadcast whose block rode its shape agreement (api.c agreeOnShape,
   * RELAY_TP_CAP_CARRY): the root's carry slot of that round, which the one-shot op copies out instead of
   * its exchange. NULL in every other call, on every rank alike (decided from the key and voted state). */
  const void* callCarry;
  const char* curCallName;
  /* Point-to-point (core/pt2pt.c): pairSeq[r] counts this rank's sends to r, pairSeq[nranks + r] its
   * receives from r (lazily allocated), the per-pair sequence numbers that match transfers outside the
   * call numbering. xferTags: the tags of the group being run (sends' then receives'; NULL: a plan's
   * group), read by the transport. inPt2pt: a point-to-point group is in flight (errors then name no
   * call number, and the shm judge ignores call numbers). */
  uint64_t* pairSeq;
  /* Rank 0's random value, agreed at init (core/nodes.c): the same on every rank of this comm and, but
   * for a 2^-64 chance, on no other comm. A group spanning comms runs them in the order of their keys,
   * the same order on every rank, so no two ranks wait on each other's comm (core/pt2pt.c). */
  uint64_t commKey;
  relayXferTag* xferTags;
  int inPt2pt;
  int failed; /* sticky: an error after data may have moved */
  /* A guest comm serves a communicator relaycc does not own (relayCommInitNccl over the user's; the
   * interposer's test twin): its waits have no deadline unless the user set RELAYCC_TIMEOUT_MS (or
   * config.timeoutMs), so they end on the user's abort. forwardDeclined (the interposer's): a route
   * whose prepare declines ends the call with callDeclined set and nothing moved, on every rank alike
   * (prepares are voted), and the caller runs it on NCCL, where relaycc would have taken another
   * route. */
  int guest, forwardDeclined, callDeclined;
  atomic_int aborted; /* set by relayCommAbort, read by waits */
  /* A failure relayCommAsyncError found (a kernel gave up, a peer is known dead: core/comm.c), latched so
   * the next call fails with it at once: 0 none, 1 being written (a poller on another thread claimed it),
   * 2 set (asyncRes and asyncWhy final). */
  atomic_int asyncLatch;
  relayResult_t asyncRes;
  char asyncWhy[256];
  atomic_int inCall;
  /* What the last call ran, after fallbacks (relayCommLastRoute; tests read the rest) */
  struct relayLastCall {
    int route, depth;
    uint32_t window; /* the window whose direct path it took (0: none; UINT32_MAX: the shm one-copy path of
                      * buffers in no window, transport/shm/bw.c) */
    int carried;     /* 1: its block rode its agreement (comm->callCarry) */
    int twoShot;     /* 1: it ran the shm one-shot's two-shot all-reduce */
  } last;
  struct relayTopo* topo; /* the cost model's view of this node (NULL: none) */
  /* Nodes (src/core/nodes.c, set at init): nodeOf[r] is comm rank r's node,
   * 0..nNodes-1 in order of each node's lowest rank; localRank is this
   * rank's index among the localRanks ranks of its node. */
  int* nodeOf;
  int nNodes, localRank, localRanks;
  struct relayPlanCache* plans;
  void* oneshot; /* the transport's one-shot region state (NULL: never tried); its destroy frees it */
  void* bw;      /* the transport's bandwidth-route region state (NULL: never tried); its destroy frees it */
  void* execBuf; /* executor's descriptor arrays, grown as needed */
  /* Registered windows (core/window.c): the table, the registrations so far
   * (window ids) and how many are direct (a call's match is an argument: exec/exec.h relayExecCall). */
  struct relayWindow** windows;
  int nWindows, capWindows, directWindows;
  uint32_t windowSeq;
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

/* The longest a wait of this comm may last, in ns: cfg.timeoutMs, or UINT64_MAX (never given up) when
 * the comm has no deadline. relayDeadlineNs: the end of a wait that starts at now (relayNowNs). */
static inline uint64_t relayWaitLimitNs(const struct relayComm* c) {
  return c->cfg.timeoutMs > 0 ? (uint64_t)c->cfg.timeoutMs * 1000000ull : UINT64_MAX;
}
static inline uint64_t relayDeadlineNs(const struct relayComm* c, uint64_t now) {
  uint64_t limit = relayWaitLimitNs(c);
  return limit == UINT64_MAX ? UINT64_MAX : now + limit;
}
/* A value of the comm's resolved parameter table (AGREED rows: rank 0's). */
static inline long long relayParamInt(const struct relayComm* comm, relayParamId id) {
  return comm->params.v[id];
}

#ifdef __cplusplus
}
#endif
#endif
