/* Which backends this relaycc-bench has, and --backend auto. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "core/core.h"

relayResult_t benchIssueRelay(relayComm_t comm, const benchCall* c, relayStream_t stream) {
  switch (c->coll) {
    case relayCollectiveSend: {
      if (c->group < 0) return relaySuccess; /* not in a pair: point-to-point involves only the two */
      int peer = c->layout->ranks[c->group * c->layout->nActive + 1 - c->activeIndex];
      size_t count = c->counts[c->group];
      return c->activeIndex == 0 ? relaySend(c->send, count, c->dtype, peer, comm, stream)
                                 : relayRecv(c->recv, count, c->dtype, peer, comm, stream);
    }
    case relayCollectiveAllToAllV:
      return relayAllToAllv(c->send, c->sendcounts, c->sdispls, c->recv, c->recvcounts, c->rdispls, c->dtype,
                            c->layout, comm, stream);
    default:
      return relayCommCall(comm, c->coll, c->send, c->recv, c->counts, c->dtype, c->op, c->layout, c->root,
                           stream);
  }
}

const char* benchRelayCallName(relayCollective_t coll) {
  if (coll == relayCollectiveSend) return "relaySend/relayRecv";
  const relayCollRow* row = relayCollRowOf(coll);
  return row ? row->call : "relaycc collective";
}

#ifdef RELAY_HAVE_NCCL
/* Defined by tools/bench/cuda/ (the NCCL backend, compiled only with CUDA +
 * NCCL). Weak so this file links before that backend exists: the address is
 * then NULL and --backend nccl says so, instead of the build breaking. */
extern const benchBackend benchBackendNccl __attribute__((weak));
static const benchBackend* ncclBackend(void) { return &benchBackendNccl; }
#else
static const benchBackend* ncclBackend(void) { return NULL; }
#endif

const benchBackend* benchSelectBackend(const char* name, int* defaultRanks, char* why, size_t whyLen) {
  char sub[512] = "";
  if (!strcmp(name, "shm")) {
    if (benchBackendShm.probe(defaultRanks, sub, sizeof sub)) {
      snprintf(why, whyLen, "shm backend unusable here: %s", sub);
      return NULL;
    }
    return &benchBackendShm;
  }
  const benchBackend* nccl = ncclBackend();
  if (!strcmp(name, "nccl")) {
    if (!nccl) {
#ifdef RELAY_HAVE_NCCL
      snprintf(why, whyLen,
               "this relaycc-bench was built with CUDA + NCCL but has no NCCL bench backend yet "
               "(tools/bench/cuda/); use --backend shm");
#else
      snprintf(why, whyLen,
               "this relaycc-bench was built without CUDA + NCCL (nvcc or nccl.h not found when "
               "configured); use --backend shm");
#endif
      return NULL;
    }
    if (nccl->probe(defaultRanks, sub, sizeof sub)) {
      snprintf(why, whyLen, "nccl backend unusable here: %s", sub);
      return NULL;
    }
    return nccl;
  }
  if (!strcmp(name, "auto")) {
    /* The GPUs when the binary can drive them and there are some; the
     * probe looks without creating a CUDA context (we fork after this). One GPU is no node to measure:
     * shm then (8 ranks on one GPU are for correctness, asked for with --backend nccl --ranks 8). */
    if (nccl && nccl->probe(defaultRanks, sub, sizeof sub) == 0 && *defaultRanks >= 2) return nccl;
    return benchSelectBackend("shm", defaultRanks, why, whyLen);
  }
  snprintf(why, whyLen, "unknown backend '%s' (shm, nccl, auto)", name);
  return NULL;
}
