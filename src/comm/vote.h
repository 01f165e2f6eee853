/*
 * The one vote, and the one agreement round under it (docs/design.md, "Invariants" 4 and 10).
 *
 * relayVote: every rank of the comm says yes or no, with a reason, at a point every rank reaches; every
 * rank learns the same verdict: yes when all said yes, else the FIRST no (the lowest rank that said no),
 * with that rank, its code and its reason. A rank whose local step failed before the vote (out of memory,
 * an open that failed, a rejected argument) votes no with its reason: it never returns early, so no peer
 * waits for it until a deadline. The vote needs no allocation: its round lands in the comm's agreement
 * buffer, allocated at init (one record of RELAY_TP_AGREE_MAX bytes per rank), so a rank short of memory
 * still takes part.
 *
 * relayAgree: one round of the transport's agreement for records that carry more than a yes/no (handles,
 * identities, call digests), landing in the same buffer.
 *
 * These are the only callers of comm->tp->agree outside init's bootstrap and the transports' own
 * implementation (a transport borrowing a control comm's). Both wait as the transport's agree waits: the
 * comm's deadline (cfg.timeoutMs), its abort flag and its dead-peer checks; they add no deadline of their
 * own, so on a guest comm (the interposer's, from_process_group's) the wait is whatever that comm's
 * transport does. An error of the round (a peer that died, timed out or disagrees on the number of rounds)
 * leaves the comm failed (sticky): the ranks may no longer be in step.
 */
#ifndef RELAY_COMM_VOTE_H_
#define RELAY_COMM_VOTE_H_

#include <stdint.h>

#include "relaycc.h"
#include "comm/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* A reason's bytes in one vote record (the record is RELAY_TP_AGREE_MAX bytes: 16 of header). */
#define RELAY_VOTE_WHY_BYTES (RELAY_TP_AGREE_MAX - 16)

/* What a rank says. */
typedef struct {
  relayResult_t status; /* relaySuccess: yes; anything else: no, with this code */
  uint64_t same;        /* a value every rank must hold alike: a rank whose value is not rank 0's says no */
  const char* why;      /* the reason of a no (NULL or "": none), truncated to RELAY_VOTE_WHY_BYTES - 1;
                         * this rank's error text may be passed as it is: its prefix is dropped */
} relayBallot;

/* What every rank learns, the same on every rank. */
typedef struct {
  int yes;                        /* 1: every rank said yes (with rank 0's same) */
  int rank;                       /* the first rank that said no; -1 when yes */
  relayResult_t status;           /* its code (relayInvalidUsage when its same differed) */
  char why[RELAY_VOTE_WHY_BYTES]; /* its reason ("" when it gave none) */
} relayVerdict;

/* COLLECTIVE: one vote. Returns relaySuccess when the vote was taken (the verdict, yes or no, is in
 * *out), else the round's error (comm failed; out->yes = 0, out->rank = -1). */
relayResult_t relayVoteBallot(struct relayComm* comm, const relayBallot* mine, relayVerdict* out);

/* COLLECTIVE: relayVoteBallot with yes = ok, a no's code relayNotSupported and no value to compare. */
relayResult_t relayVote(struct relayComm* comm, int ok, const char* why, relayVerdict* out);

/* COLLECTIVE: one round of bytes (1..RELAY_TP_AGREE_MAX) per rank. On success *all points at nranks
 * records, rank r's at r * bytes, valid until the next round on this comm (copy what outlives it); on
 * an error *all is NULL and the comm is failed. */
relayResult_t relayAgree(struct relayComm* comm, const void* mine, size_t bytes, const void** all);

/* COLLECTIVE: a call's agreement round (the call digests of the collectives and of all-to-all-v). Each
 * record begins with an int32_t status, this rank's local verdict `local`. When every rank's status is
 * success it returns relaySuccess with *all as relayAgree's. Otherwise every rank saw a rejection, so every
 * rank takes one more round, a relayVoteBallot, in which each rejecting rank gives its own text: a rank that
 * rejected returns its own error (its text, naming the argument, kept), every other rank returns the first
 * rejecting rank's code with its reason quoted, so no rank's error says only "another rank rejected". */
relayResult_t relayAgreeCall(struct relayComm* comm, relayResult_t local, const void* mine, size_t bytes,
                             const void** all);

#ifdef __cplusplus
}
#endif
#endif
