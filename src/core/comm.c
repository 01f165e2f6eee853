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
  free(comm->nodeOf);
  free(comm);
}

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
  relayResult_t res = comm->tp->agree(comm, mine, all, bytes);
  comm->curCallName = outer;
  return res;
}

relayResult_t relayCommQuoteNo(struct relayComm* c, int first, relayResult_t local, const char* own, char* quote,
                               size_t len) {
  char mine[RELAY_QUOTE_BYTES] = {0};
  if (local != relaySuccess) {
    char ctx[192];
    relayErrorContext(c, ctx, sizeof ctx);
    size_t n = strlen(ctx);
    const char* body = strncmp(own, ctx, n) == 0 && own[n] == ':' && own[n + 1] == ' ' ? own + n + 2 : own;
    snprintf(mine, sizeof mine, "%s", body);
  }
  char(*texts)[RELAY_QUOTE_BYTES] = malloc((size_t)c->nranks * sizeof *texts);
  if (!texts) {
    c->failed = 1; /* the peers wait in the round this rank cannot take part in */
    return relaySetError(c, relaySystemError, "out of memory for the reasons of %d ranks", c->nranks);
  }
  relayResult_t res = c->tp->agree(c, mine, texts, sizeof mine);
  if (res != relaySuccess) {
    c->failed = 1;
  } else if (quote && len) {
    texts[first][RELAY_QUOTE_BYTES - 1] = 0;
    snprintf(quote, len, "%s", texts[first]);
  }
  free(texts);
  return res;
}

void relayCommLastRoute(struct relayComm* comm, int* route, int* depth) {
  if (route) *route = comm ? comm->lastRoute : relayRouteDirect;
  if (depth) *depth = comm ? comm->lastDepth : 1;
}

relayResult_t relayCommAsyncError(struct relayComm* comm, char* why, size_t whyLen) {
  if (whyLen) why[0] = 0;
  if (!comm || !comm->tp || !comm->tp->asyncError) return relaySuccess;
  return comm->tp->asyncError(comm, why, whyLen);
}
