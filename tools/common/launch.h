/* Fork-based launcher: one process per rank on this host, so the bench and the
 * tests need no external launcher (tool and test code: the relaycc_toolkit
 * target, not the library). Each child runs fn(rank, nranks, arg) and
 * exits with its return value. The parent waits with a deadline; the first
 * rank that fails, dies on a signal or outlives the deadline fails the launch,
 * and the whole process group of ranks is killed. */
#ifndef RELAY_LAUNCH_H_
#define RELAY_LAUNCH_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*relayRankFn)(int rank, int nranks, void* arg);

typedef struct {
  int failedRank; /* -1 when all ranks returned 0 */
  int exitCode;   /* the failed rank's exit code, or -signal, or -1000 on timeout */
  char message[256];
} relayLaunchResult;

/* Returns 0 when every rank returned 0. timeoutMs <= 0: no deadline. After a
 * failure the others get up to graceMs to finish (so a test can see how the
 * survivors of a killed rank report it) before they are killed. codes, when
 * not NULL, gets each rank's exit code, -signal, or -1000 when killed by us. */
int relayLaunchRanks(int nranks, relayRankFn fn, void* arg, int timeoutMs, int graceMs,
                     relayLaunchResult* res, int* codes);

/* A job name unique to this launch (pid and a counter), for relayCommInitShm. */
const char* relayLaunchJobName(const char* tag, char* buf, int buflen);

#ifdef __cplusplus
}
#endif
#endif
