/* Test harness: assertions that name file and line, and the rank launcher.
 * Each ctest case is its own process with a timeout (see the tests .cmake files). */
#ifndef RELAY_TEST_HARNESS_H_
#define RELAY_TEST_HARNESS_H_

#include <stdio.h>
#include <stdlib.h>

#include "launch.h"
#include "relaycc.h"

/* Fails the current process (a rank or the test) with a message. */
#define T_CHECK(cond, ...)                                                   \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      fflush(stderr);                                                        \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define T_OK(call)                                                                        \
  do {                                                                                    \
    relayResult_t t_res_ = (call);                                                        \
    T_CHECK(t_res_ == relaySuccess, "%s -> %s", #call, relayGetErrorString(t_res_));      \
  } while (0)

/* Run fn on nranks forked ranks; fails the test (exit 1) naming the rank when
 * any rank fails or the launch outlives timeoutSec. */
void t_run_ranks(int nranks, relayRankFn fn, void* arg, int timeoutSec);

/* Like t_run_ranks but returns instead of failing: codes[r] gets each rank's
 * exit code (-signal when killed); survivors get graceMs after a failure. */
int t_launch(int nranks, relayRankFn fn, void* arg, int timeoutSec, int graceMs, int* codes);

/* Init a shm comm for this rank on a job name shared by the launch
 * (t_run_ranks sets it before forking). cfg may be NULL. */
relayComm_t t_comm(int rank, int nranks, const relayConfig_t* cfg);
const char* t_job(void);

/* Deterministic PRNG for sweeps (splitmix64). */
unsigned long long t_rand(unsigned long long* state);

#endif
