#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/plancache.h"

void relayCommFree(struct relayComm* comm) {
  if (!comm) return;
  relayPlanCacheFree(comm->plans);
  free(comm->execBuf);
  free(comm->rankSeen);
  free(comm);
}

relayResult_t relayCommBarrier(struct relayComm* comm) {
  if (!comm || !comm->tp) return relaySetError(comm, relayInvalidArgument, "barrier: comm is NULL");
  return comm->tp->barrier(comm);
}

relayResult_t relayCommAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes) {
  if (!comm || !comm->tp) return relaySetError(comm, relayInvalidArgument, "agree: comm is NULL");
  return comm->tp->agree(comm, mine, all, bytes);
}

void relayCommLastRoute(struct relayComm* comm, int* route, int* depth) {
  if (route) *route = comm ? comm->lastRoute : relayRouteDirect;
  if (depth) *depth = comm ? comm->lastDepth : 1;
}
