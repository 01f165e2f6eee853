/* Test harness: assertions that name file and line, the rank launcher, and the case table.
 * Each test program declares its cases once, in a table of tCase rows; main() is t_main(), which runs the
 * named case and prints the table for `--list`, from which CMake (cmake/TestCases.cmake) registers one CTest
 * entry per row. */
#ifndef RELAY_TEST_HARNESS_H_
#define RELAY_TEST_HARNESS_H_

#include <stdio.h>
#include <stdlib.h>

#include "launch.h"
#include "relaycc.h"

/* Fails the current process (a rank or the test) with a message. */
#define T_CHECK(cond, ...)                                            \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      fflush(stderr);                                                 \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

#define T_OK(call)                                                                   \
  do {                                                                               \
    relayResult_t t_res_ = (call);                                                   \
    T_CHECK(t_res_ == relaySuccess, "%s -> %s", #call, relayGetErrorString(t_res_)); \
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

/* Drops CAP_SYS_PTRACE (which lets root attach to anything), so that a peer that made itself not dumpable
 * (prctl PR_SET_DUMPABLE 0) refuses this process's process_vm_readv, as Yama or a container would. */
void t_drop_ptrace_cap(void);

/* One case of a test program: what runs, and what CTest needs to register it. Exactly one of fn, run,
 * rank and main is set. A row is written with designated initializers; what it leaves out is 0 / NULL. */
typedef struct tCase {
  const char* name;                   /* argv[1]; the CTest name is <prefix>_<name> unless ctest is set */
  int (*fn)(void);                    /* a case on its own: returns the exit code */
  int (*run)(void* arg);              /* a parameterised case: arg is the row's */
  relayRankFn rank;                   /* a rank body: t_run_ranks(ranks, rank, arg, deadlineS), exit 0 */
  int (*main)(int argc, char** argv); /* a case that takes arguments: those after the name */
  void* arg;
  int ranks;
  int deadlineS;      /* the launch's deadline (rank cases): at most timeoutS */
  int timeoutS;       /* CTest TIMEOUT, required */
  const char* labels; /* CTest LABELS, comma separated; "cpu" when NULL */
  const char* env;    /* "K=V;K=V": CTest's ENVIRONMENT, and set by t_main before the case
                       * (a case run by hand is the case CTest runs) */
  int skipCode;       /* CTest SKIP_RETURN_CODE; 0: none */
  int serial;         /* CTest RUN_SERIAL */
  const char* ctest;  /* the CTest name, where it is not <prefix>_<name> */
  const char* args;   /* what CTest passes after the name, space separated; @VAR@ is one of
                       * the values CMake knows (cmake/TestCases.cmake) */
  const char* wrap;   /* a command CTest runs the program under (@VAR@ as in args); a row
                       * whose @VAR@ is empty in this build is not registered */
  int manual;         /* run by hand only, not a CTest entry */
} tCase;

#define T_NCASES(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* The test program's main: `prog NAME [args]` runs the case NAME (its env set first) and returns its exit
 * code; `prog --list` checks the table and prints it for CMake; anything else names the known cases and
 * returns 2. prefix names the program's CTest entries (<prefix>_<name>). */
int t_main(int argc, char** argv, const char* prefix, const tCase* cases, int ncases);

/* Deterministic PRNG for sweeps (splitmix64). */
unsigned long long t_rand(unsigned long long* state);

#endif
