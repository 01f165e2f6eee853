#include "harness.h"

#include <string.h>

static char t_jobName[128];

const char* t_job(void) { return t_jobName; }

void t_run_ranks(int nranks, relayRankFn fn, void* arg, int timeoutSec) {
  relayLaunchJobName("t", t_jobName, sizeof t_jobName);
  relayLaunchResult res;
  if (relayLaunchRanks(nranks, fn, arg, timeoutSec * 1000, 3000, &res, NULL) != 0) {
    fprintf(stderr, "FAIL: launch of %d ranks: %s\n", nranks, res.message);
    exit(1);
  }
}

int t_launch(int nranks, relayRankFn fn, void* arg, int timeoutSec, int graceMs, int* codes) {
  relayLaunchJobName("t", t_jobName, sizeof t_jobName);
  relayLaunchResult res;
  int rc = relayLaunchRanks(nranks, fn, arg, timeoutSec * 1000, graceMs, &res, codes);
  if (rc) fprintf(stderr, "launch: %s\n", res.message);
  return rc;
}

relayComm_t t_comm(int rank, int nranks, const relayConfig_t* cfg) {
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitShm(&comm, nranks, rank, t_jobName, cfg);
  T_CHECK(r == relaySuccess, "rank %d: relayCommInitShm: %s (%s)", rank, relayGetErrorString(r),
          relayGetLastError(NULL));
  return comm;
}

unsigned long long t_rand(unsigned long long* s) {
  unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
