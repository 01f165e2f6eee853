/*
 * The vote helper (src/comm/vote.h) on the shm transport, 4 ranks: every rank learns the same verdict,
 * the first no (lowest rank) with its rank, code and text; a rank whose local step failed still votes
 * (no early return, no peer left waiting); a rank holding another value than rank 0's says no; a rank
 * that dies instead of voting ends its peers' vote with an error naming it, well before the deadline.
 * Each case checks the verdict on every rank, and that the comm votes again afterwards (lockstep kept).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "harness.h"

enum { NR = 4 };

static relayComm_t voteComm(int rank, int timeoutMs) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeoutMs;
  return t_comm(rank, NR, &cfg);
}

/* The verdict every rank must hold: yes, or rank `no` with code and text. */
static void expectVerdict(int rank, const char* what, const relayVerdict* v, int no, relayResult_t code,
                          const char* why) {
  if (no < 0) {
    T_CHECK(v->yes && v->rank == -1 && v->why[0] == 0, "rank %d, %s: yes=%d rank=%d why=\"%s\", want yes",
            rank, what, v->yes, v->rank, v->why);
    return;
  }
  T_CHECK(!v->yes && v->rank == no && v->status == code && strcmp(v->why, why) == 0,
          "rank %d, %s: yes=%d rank=%d status=%s why=\"%s\", want rank %d (%s) \"%s\"", rank, what, v->yes,
          v->rank, relayGetErrorString(v->status), v->why, no, relayGetErrorString(code), why);
}

/* After a case: the comm still votes in step (a yes on every rank). */
static void voteAgain(relayComm_t c, int rank) {
  relayVerdict v;
  T_OK(relayVote(c, 1, NULL, &v));
  expectVerdict(rank, "the next vote", &v, -1, relaySuccess, "");
}

/* One vote of rows: each rank's code and value, its reason "reason of rank R", and the verdict every rank
 * must hold. */
typedef struct {
  relayResult_t status[NR];
  uint64_t same[NR];
  int no; /* the first no; -1: yes */
  relayResult_t code;
  const char* why;
} voteRow;

static const voteRow kAllYes = {.no = -1};
/* Rank 2 says no: every rank gets rank 2, its code and its text. */
static const voteRow kOneNo = {{0, 0, relayNotSupported, 0}, {0}, 2, relayNotSupported, "reason of rank 2"};
/* Ranks 3 and 1 say no, each with its own code: the first (rank 1) is everyone's verdict. */
static const voteRow kTwoNo = {{0, relayInvalidArgument, 0, relaySystemError},
                               {7, 7, 7, 7},
                               1,
                               relayInvalidArgument,
                               "reason of rank 1"};
/* Rank 2 holds another value than rank 0: it says no (relayInvalidUsage, naming both values); rank 3's
 * own no comes later and loses. */
static const voteRow kSame = {{0, 0, 0, relayNotSupported},
                              {0x100, 0x100, 0x200, 0x100},
                              2,
                              relayInvalidUsage,
                              "its value 0x200 is not rank 0's 0x100"};

static int rankVote(int rank, int nranks, void* arg) {
  (void)nranks;
  const voteRow* row = arg;
  relayComm_t c = voteComm(rank, 20000);
  char why[64];
  snprintf(why, sizeof why, "reason of rank %d", rank);
  relayBallot b = {row->status[rank], row->same[rank], why};
  relayVerdict v;
  memset(&v, 0x5a, sizeof v); /* poisoned: every field must be written */
  T_OK(relayVoteBallot(c, &b, &v));
  expectVerdict(rank, "the vote", &v, row->no, row->code, row->no < 0 ? "" : row->why);
  voteAgain(c, rank);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Rank 3's local step fails before the vote (an open of a file that is not there, its error recorded on
 * the comm): it still votes, passing its error text as it is; the peers get the text without rank 3's prefix,
 * and nobody waits (the deadline is far above what the case allows). Rank 3 returns its own error. */
static int rankLocalFail(int rank, int nranks, void* arg) {
  (void)nranks, (void)arg;
  relayComm_t c = voteComm(rank, 30000);
  relayResult_t local = relaySuccess;
  FILE* f = rank == 3 ? fopen("/nonexistent-relaycc-vote/staging", "r") : NULL;
  if (rank == 3 && !f) local = relaySetError(c, relaySystemError, "no staging file");
  if (f) fclose(f);
  uint64_t t0 = relayNowNs();
  relayBallot b = {local, 0, c->lastError};
  relayVerdict v;
  T_OK(relayVoteBallot(c, &b, &v));
  T_CHECK(relayNowNs() - t0 < 5000000000ull, "rank %d: the vote took %.1f s", rank,
          (double)(relayNowNs() - t0) / 1e9);
  expectVerdict(rank, "local failure", &v, 3, relaySystemError, "no staging file");
  voteAgain(c, rank);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Rank 1 exits instead of voting: the vote of every other rank returns an error (not a verdict) naming
 * rank 1, well before the 30 s deadline, and leaves the comm failed. */
static int rankDeadVoter(int rank, int nranks, void* arg) {
  (void)nranks, (void)arg;
  relayComm_t c = voteComm(rank, 30000);
  if (rank == 1) _exit(0);
  uint64_t t0 = relayNowNs();
  relayVerdict v;
  relayResult_t res = relayVote(c, 1, NULL, &v);
  T_CHECK(res != relaySuccess && !v.yes && v.rank == -1,
          "rank %d: a vote with a dead rank -> %s (yes %d, rank %d)", rank, relayGetErrorString(res), v.yes,
          v.rank);
  T_CHECK(strstr(relayGetLastError(c), "rank 1") != NULL, "rank %d: the error does not name rank 1: %s", rank,
          relayGetLastError(c));
  T_CHECK(relayNowNs() - t0 < 15000000000ull, "rank %d: took %.1f s", rank,
          (double)(relayNowNs() - t0) / 1e9);
  T_CHECK(c->failed, "rank %d: the comm is not failed after the vote's error", rank);
  relayCommDestroy(c);
  return 0;
}

static const tCase kCases[] = {
    {.name = "all_yes",
     .rank = rankVote,
     .arg = (void*)&kAllYes,
     .ranks = NR,
     .deadlineS = 60,
     .timeoutS = 90},
    {.name = "one_no", .rank = rankVote, .arg = (void*)&kOneNo, .ranks = NR, .deadlineS = 60, .timeoutS = 90},
    {.name = "two_no", .rank = rankVote, .arg = (void*)&kTwoNo, .ranks = NR, .deadlineS = 60, .timeoutS = 90},
    {.name = "same", .rank = rankVote, .arg = (void*)&kSame, .ranks = NR, .deadlineS = 60, .timeoutS = 90},
    {.name = "local_fail", .rank = rankLocalFail, .ranks = NR, .deadlineS = 60, .timeoutS = 90},
    {.name = "dead_voter", .rank = rankDeadVoter, .ranks = NR, .deadlineS = 60, .timeoutS = 90},
};

int main(int argc, char** argv) { return t_main(argc, argv, "vote", kCases, T_NCASES(kCases)); }
