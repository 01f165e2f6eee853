/* relaycc-bench internals shared by the driver's files (tools/bench.c,
 * tools/bench/ sources) and the backends. */
#ifndef RELAY_BENCH_H_
#define RELAY_BENCH_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan/plan.h" /* relayCollective_t */
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_MAX_RANKS 256 /* more processes than this on one host is a mistake */
#define BENCH_MAX_SIZES 256
#define BENCH_MAX_ROWS (BENCH_MAX_SIZES * relayNumCollectives)

typedef struct {
  const char* backendName; /* shm|nccl|auto as given */
  int nranks;              /* resolved (--ranks or the backend's default) */
  int ranksGiven;
  int nColls;
  relayCollective_t colls[relayNumCollectives]; /* in run order */
  int nActive, nGroups;                         /* -A, -G */
  int layout[BENCH_MAX_RANKS];                  /* nGroups*nActive comm ranks, group-major */
  int nSizes;
  uint64_t sizes[BENCH_MAX_SIZES]; /* bytes of per-active-rank input */
  int iters, warmup, reps;         /* -n, -w, -r */
  relayDataType_t dtype;
  relayRedOp_t op;
  int route;       /* relayRoute_t, or -1: leave to RELAYCC_ROUTE / the library */
  int depth;       /* >= 0, or -1: leave to RELAYCC_DEPTH / the library */
  int check;       /* 1: check every output element (default) */
  int inplace;     /* 1: the in-place forms of relaycc.h */
  int graph;       /* 1: time replays of a captured graph (nccl backend) */
  int sequential;  /* 1: all relaycc repetitions, then all baseline ones (default: interleaved) */
  int timeoutSec;  /* whole launch; a rank past it fails the run */
  int killRank;    /* test hook (--debug-kill R): rank R dies after its first check */
  int corruptRank; /* test hook (--debug-corrupt R): rank R damages one output element
                      of every check run, so the check itself is tested */
  const char* jsonPath;
  char cmdline[1024];
  /* Scatter and gather (rooted): the root, a comm rank (--root, default 0).
   * Their rank set is the layout's ranks, all nGroups * nActive of them. */
  int root;
  /* Broadcast and reduce (rooted by position): the root's index in each group (--root-index, default 0),
   * 0 <= rootIndex < A, as relayBroadcast/relayReduce take it. */
  int rootIndex;
  /* --nodes N (0: unset): the ranks as N nodes of nranks / N, node-major, by
   * setting RELAYCC_NODE_ID on each rank before its comm is made. */
  int nodes;
} benchOpts;

/* One table row, as rank 0 prints it and the parent writes it to JSON. */
typedef struct {
  int coll;
  int inplace;
  uint64_t bytes, count; /* count: relaycc's count argument (per group) */
  int route, depth;
  double tMin, tMed, spread; /* us; spread = max/min of per-repetition minima */
  double algbw, busbw;       /* GB/s */
  long long wrong;           /* summed over ranks; -1: not checked */
  int hasBase;
  double baseMin, baseMed, baseSpread, speedup; /* baseline (nccl) when hasBase */
  long long baseWrong;
} benchRow;

/* Lives in a MAP_SHARED page set up before the fork: rank 0 fills it, the
 * parent reads it after the launch (JSON, exit code). */
typedef struct {
  int nRows;
  int finished; /* rank 0 reached the end */
  long long totalWrong;
  char device[256];
  char backend[32];
  char baseline[32];
  benchRow rows[BENCH_MAX_ROWS];
} benchResults;

/* args.c: 0 = run, 1 = bad argument (message in err), 2 = --help printed. */
int benchParseArgs(int argc, char** argv, benchOpts* o, char* err, size_t errLen);
/* Checks that need the resolved rank count (after the backend is known). */
int benchCheckOpts(benchOpts* o, char* err, size_t errLen);
void benchUsage(FILE* f);

/* run.c: the body of one rank process. */
typedef struct {
  const benchOpts* opts;
  const struct benchBackend* backend;
  const char* job;
  benchResults* results;
} benchRunArg;
int benchRankMain(int rank, int nranks, void* arg);

/* Element counts for a size: the count argument of relaycc, and the
 * elements of the send and recv buffers of an active rank. 0 when the size
 * does not divide (the row is skipped). */
int benchCounts(relayCollective_t coll, uint64_t bytes, size_t esize, int nActive, uint64_t* count,
                uint64_t* sendElems, uint64_t* recvElems);
/* nccl-tests factors with n = A. algbw uses the collective's total data
 * (all-gather: A * per-rank input), busbw the per-link traffic. */
double benchAlgBytes(relayCollective_t coll, uint64_t bytes, int nActive);
double benchBusFactor(relayCollective_t coll, int nActive);

/* check.c: pattern, sentinel and the serial reference. */
typedef struct {
  relayCollective_t coll;
  relayDataType_t dtype;
  relayRedOp_t op;
  int nActive;    /* rooted collectives: the size of the rank set */
  int group, me;  /* this rank's group and active index (rooted: 0 and its index in the set, -1 outside) */
  uint64_t count; /* all-to-all-v: the base of benchA2avCount */
  int root;       /* broadcast, reduce: the root's active index */
  int inplace;    /* reduce: a non-root's one buffer keeps its input (out of place: the sentinel) */
} benchCheckKey;
/* All-to-all-v's uneven counts: active `from` sends base * (1 + (from + 2 to) % 3) elements to active
 * `to` -- 1, 2 or 3 times the base, different across a row and a column, so a block that lands at another
 * block's offset or with another block's length shows; the displacements are the prefix sums. */
uint64_t benchA2avCount(uint64_t base, int from, int to);
/* The bench's name of a collective: relayCollName, except the point-to-point copy (relayCollectiveSend
 * stands for the pair's send and receive), "sendrecv". */
const char* benchCollName(relayCollective_t coll);
/* Fill this rank's input: elements of the send buffer (A blocks of count for
 * reduce-scatter and all-to-all, else count). */
void benchFillInput(const benchCheckKey* k, void* buf);
void benchFillSentinel(relayDataType_t dt, void* buf, uint64_t elems);
/* Count wrong elements of this rank's output (recv buffer layout). Prints
 * the first few mismatches to stderr, prefixed with tag. */
long long benchCheckOutput(const benchCheckKey* k, const void* out, const char* tag);
/* Count elements of the send buffer that differ from the input pattern (a
 * collective must not write its send buffer). */
long long benchCheckInputIntact(const benchCheckKey* k, const void* in, const char* tag);
/* Rooted collectives (scatter, gather): block j is set member j's (what it
 * receives in a scatter, sends in a gather), count elements, the same
 * pattern wherever it sits. Fill blocks [first, first + n) into buf; count
 * the elements of buf that differ from them (copies: bit exact), printing
 * the first few as `what` of tag. */
void benchFillBlocks(const benchCheckKey* k, void* buf, int first, int n);
long long benchCheckBlocks(const benchCheckKey* k, const void* buf, int first, int n, const char* tag,
                           const char* what);

/* report.c */
/* The source tree's commit at build time (generated/relaycc_commit.c, by cmake/GitCommit.cmake). */
extern const char relayccGitCommit[];
void benchPrintHeader(FILE* f, const benchOpts* o, const benchResults* res);
/* baseName: the baseline's column title ("nccl"), NULL without a baseline. */
void benchPrintTableHead(FILE* f, const benchOpts* o, relayCollective_t coll, const char* baseName);
void benchPrintRow(FILE* f, const benchOpts* o, const benchRow* row);
void benchPrintSkip(FILE* f, relayCollective_t coll, uint64_t bytes, const char* why);
int benchWriteJson(const char* path, const benchOpts* o, const benchResults* res, int exitCode,
                   const char* failure);
const char* benchRouteLabel(int route, int depth, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
