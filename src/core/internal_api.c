/* Core's internal entry points (core/core.h) that are neither a call (api.c) nor an init or a destroy
 * (init.c): the tools' and tests' barrier and agreement, and the queries the interposer and tools make of
 * a comm (its last route, a failure the transport met after a call). */
#include "comm/comm.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "comm/vote.h"

/* The tools' entry points name themselves in their errors' prefix while
 * they run (a tool may call them inside nothing else: the name before is
 * restored). */
relayResult_t relayCommBarrier(struct relayComm* comm) {
  if (!comm || !comm->tp)
    return relaySetError(NULL, relayInvalidArgument, "relayCommBarrier: %s is NULL",
                         comm ? "the transport" : "comm");
  const char* outer = comm->curCallName;
  comm->curCallName = "relayCommBarrier";
  relayResult_t res = comm->tp->barrier(comm);
  comm->curCallName = outer;
  return res;
}

relayResult_t relayCommAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes) {
  if (!comm || !comm->tp)
    return relaySetError(NULL, relayInvalidArgument, "relayCommAgree: %s is NULL",
                         comm ? "the transport" : "comm");
  const char* outer = comm->curCallName;
  comm->curCallName = "relayCommAgree";
  const void* got = NULL;
  relayResult_t res = relayAgree(comm, mine, bytes, &got);
  if (res == relaySuccess) memcpy(all, got, (size_t)comm->nranks * bytes);
  comm->curCallName = outer;
  return res;
}

void relayCommLastRoute(struct relayComm* comm, int* route, int* depth) {
  if (route) *route = comm ? comm->last.route : relayRouteDirect;
  if (depth) *depth = comm ? comm->last.depth : 1;
}

relayResult_t relayCommDeadPeer(struct relayComm* comm, char* why, size_t whyLen) {
  if (whyLen) why[0] = 0;
  struct relayComm* ctrl = comm ? comm->ctrl : NULL;
  if (!ctrl || !ctrl->tp || !ctrl->tp->deadPeer || ctrl->nranks != comm->nranks) return relaySuccess;
  return ctrl->tp->deadPeer(ctrl, why, whyLen);
}

relayResult_t relayCommAsyncError(struct relayComm* comm, char* why, size_t whyLen) {
  if (whyLen) why[0] = 0;
  if (!comm || !comm->tp) return relaySuccess;
  if (atomic_load_explicit(&comm->asyncLatch, memory_order_acquire) == 2) {
    snprintf(why, whyLen, "%s", comm->asyncWhy);
    return comm->asyncRes;
  }
  relayResult_t r = comm->tp->asyncError ? comm->tp->asyncError(comm, why, whyLen) : relaySuccess;
  if (r == relaySuccess) r = relayCommDeadPeer(comm, why, whyLen);
  int none = 0;
  /* The first poller to find a failure writes it; a concurrent one returns its own reading. */
  if (r != relaySuccess && atomic_compare_exchange_strong(&comm->asyncLatch, &none, 1)) {
    comm->asyncRes = r;
    snprintf(comm->asyncWhy, sizeof comm->asyncWhy, "%s", why);
    atomic_store_explicit(&comm->asyncLatch, 2, memory_order_release);
  }
  return r;
}

relayResult_t relayCommLatched(struct relayComm* comm) {
  if (atomic_load_explicit(&comm->asyncLatch, memory_order_acquire) != 2) return relaySuccess;
  comm->failed = 1;
  return relaySetError(comm, comm->asyncRes, "%s (found after an earlier call returned)", comm->asyncWhy);
}
