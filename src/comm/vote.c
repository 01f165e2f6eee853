/* The one vote and its agreement round (vote.h). */
#include "comm/vote.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"

typedef struct {
  int32_t status;
  int32_t pad;
  uint64_t same;
  char why[RELAY_VOTE_WHY_BYTES];
} voteRecord;
_Static_assert(sizeof(voteRecord) == RELAY_TP_AGREE_MAX, "a vote is one record of the transports' agree");

relayResult_t relayAgree(struct relayComm* comm, const void* mine, size_t bytes, const void** all) {
  *all = NULL;
  if (!comm->tp || !comm->agreeBuf || bytes == 0 || bytes > RELAY_TP_AGREE_MAX || !mine) {
    comm->failed = 1; /* no round taken: the peers' is waiting for this rank's */
    const char* without = !comm->tp ? "a transport" : !comm->agreeBuf ? "the comm's buffer" : "a record";
    return relaySetError(comm, relayInternalError, "agreement of %zu bytes (1..%d) without %s", bytes,
                         RELAY_TP_AGREE_MAX, without);
  }
  relayResult_t res = comm->tp->agree(comm, mine, comm->agreeBuf, bytes);
  if (res != relaySuccess) {
    comm->failed = 1;
    return res;
  }
  *all = comm->agreeBuf;
  return relaySuccess;
}

/* relayAgreeCall's two rounds; own: this rank's rejection text, kept from before them. */
static relayResult_t agreeCallRounds(struct relayComm* comm, relayResult_t local, const char* own,
                                     const void* mine, size_t bytes, const void** all) {
  const void* got;
  RELAY_CHECK(relayAgree(comm, mine, bytes, &got));
  int rejected = 0;
  for (int q = 0; q < comm->nranks && !rejected; q++) {
    int32_t status;
    memcpy(&status, (const char*)got + (size_t)q * bytes, sizeof status);
    rejected = status != (int32_t)relaySuccess;
  }
  if (!rejected) {
    *all = got;
    return relaySuccess;
  }
  *all = NULL;
  relayBallot ballot = {local, 0, own};
  relayVerdict v;
  relayResult_t voted = relayVoteBallot(comm, &ballot, &v);
  if (voted != relaySuccess) return voted;
  if (local != relaySuccess) {
    memcpy(comm->lastError, own, sizeof comm->lastError);
    return local;
  }
  if (v.yes) /* a record whose first int32 is not the caller's `local`: the contract is broken */
    return relaySetError(comm, relayInternalError, "a call's agreement saw a rejection its vote did not");
  return relaySetError(comm, v.status, "rank %d rejected the call (%s): %s", v.rank,
                       relayGetErrorString(v.status), v.why);
}

relayResult_t relayAgreeCall(struct relayComm* comm, relayResult_t local, const void* mine, size_t bytes,
                             const void** all) {
  /* The rounds may write lastError (a peer that died): keep this rank's rejection text for its ballot. */
  char own[sizeof comm->lastError];
  memcpy(own, comm->lastError, sizeof own);
  /* The rounds compare the calls' shapes themselves: a peer that waits in one with another shape is their
   * answer (every rank fails the call, the comm stays usable), not the transport's shape error, which
   * would fail the comm. Round 2 (the vote) comes only after a rejection, whose rank may have counts or a
   * layout of its own (issue 37 item 4; a2av: found by review, an all-to-all-v rejected on one rank with
   * another layout failed the comm). */
  uint64_t shape = comm->callShape;
  comm->callShape = 0;
  relayResult_t res = agreeCallRounds(comm, local, own, mine, bytes, all);
  comm->callShape = shape;
  return res;
}

relayResult_t relayVoteBallot(struct relayComm* comm, const relayBallot* mine, relayVerdict* out) {
  voteRecord rec;
  memset(&rec, 0, sizeof rec);
  rec.status = (int32_t)mine->status;
  rec.same = mine->same;
  if (mine->status != relaySuccess && mine->why) {
    /* A reason taken from this rank's error (its lastError) loses its prefix: the peers quoting it write
     * their own, and the verdict names the rank. */
    char ctx[192];
    relayErrorContext(comm, ctx, sizeof ctx);
    size_t n = strlen(ctx);
    const char* why = mine->why;
    if (strncmp(why, ctx, n) == 0 && why[n] == ':' && why[n + 1] == ' ') why += n + 2;
    snprintf(rec.why, sizeof rec.why, "%s", why);
  }
  out->yes = 0;
  out->rank = -1;
  out->status = relaySuccess;
  out->why[0] = 0;
  const void* got;
  RELAY_CHECK(relayAgree(comm, &rec, sizeof rec, &got));
  const voteRecord* all = got;
  for (int q = 0; q < comm->nranks; q++) {
    const voteRecord* v = &all[q];
    if (v->status != relaySuccess) {
      out->rank = q;
      out->status = (relayResult_t)v->status;
      memcpy(out->why, v->why, sizeof out->why);
      out->why[sizeof out->why - 1] = 0;
      return relaySuccess;
    }
    if (v->same != all[0].same) {
      out->rank = q;
      out->status = relayInvalidUsage;
      snprintf(out->why, sizeof out->why, "its value 0x%llx is not rank 0's 0x%llx",
               (unsigned long long)v->same, (unsigned long long)all[0].same);
      return relaySuccess;
    }
  }
  out->yes = 1;
  return relaySuccess;
}

relayResult_t relayVote(struct relayComm* comm, int ok, const char* why, relayVerdict* out) {
  relayBallot b = {ok ? relaySuccess : relayNotSupported, 0, why};
  return relayVoteBallot(comm, &b, out);
}
