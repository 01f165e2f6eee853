/*
 * relaycc-bench backends: what the driver (tools/bench/run.c) needs from a
 * machine to time and check one collective, as a small table of functions.
 *
 * The driver owns everything that is the same on every backend: argument
 * checking, the rank launch, the size sweep, the data pattern and the serial
 * reference, barriers before timed iterations, min/median/spread, the table
 * and the JSON. A backend owns the communicator(s), buffer memory, moving
 * bytes between host and buffer, issuing one call, and its clock. That split
 * is what lets the NCCL backend (tools/bench/cuda/, written later) add CUDA
 * events, an ncclCommSplit baseline and --graph without touching the driver.
 *
 * Lifecycle, per rank process (forked by the driver with relayLaunchRanks):
 *   init -> { alloc, toDevice, prepare, run, sync, timerStart/Stop, toHost,
 *             barrier, agree, unprepare, free }* -> fini
 * Every function returns 0 on success; on failure it writes a message into
 * r->err (what failed, with the library's own text) and returns non-zero.
 * The driver then names the rank, the collective and the size.
 */
#ifndef RELAY_BENCH_BACKEND_H_
#define RELAY_BENCH_BACKEND_H_

#include <stddef.h>

#include "bench.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one run() issues: relaycc (the thing measured) or the backend's
 * baseline (NCCL on a communicator of only the A active ranks). */
typedef enum { BENCH_TARGET_RELAY = 0, BENCH_TARGET_BASELINE = 1, BENCH_NUM_TARGETS = 2 } benchTarget;

/* One call, as every rank of the comm issues it. send/recv are this rank's
 * buffers (already offset for the in-place forms of relaycc.h), NULL on a rank
 * that is active in no group. */
typedef struct {
  relayCollective_t coll;
  relayDataType_t dtype;
  relayRedOp_t op;
  /* Rooted collectives (scatter, gather): one group, the rank set, and
   * counts has one entry per rank of the set; group is 0 on the root and on
   * the set's ranks (-1 elsewhere), activeIndex the rank's index in the set
   * (-1 outside it, the root included when it is not in the set). */
  const relayLayout_t* layout;
  const size_t* counts; /* [layout->nGroups], relaycc's per-group count argument */
  int group;            /* this rank's group, -1 on a helper */
  int activeIndex;      /* index within that group, -1 on a helper */
  const void* send;
  void* recv;
  int root; /* scatter, gather: the root's comm rank; broadcast, reduce: its index in each group */
  /* All-to-all-v (one group): this active's row, A entries each (NULL on a helper). */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} benchCall;

typedef struct benchRank {
  int rank, nranks;
  const char* job;       /* unique to this run: the shm rendezvous name */
  const benchOpts* opts; /* parsed and checked arguments (layout, route, dtype, ...) */
  void* state;           /* the backend's */
  char err[768];
} benchRank;

typedef struct benchBackend {
  const char* name;         /* "shm", "nccl": what --backend takes */
  const char* baselineName; /* column title of the baseline ("nccl"); NULL: no baseline */
  int hostVisible;          /* buffers are host memory: the driver fills and checks them in
                               place (no staging copies) */
  int hasGraph;             /* accepts --graph */
  /* Non-NULL: one rank per such unit ("GPU") by default (the probe's *defaultRanks, the units present);
   * more ranks share them (rank r on unit r % units), labelled as no performance; NULL: no units. */
  const char* oneRankPer;

  /* In the parent, before any rank is forked. Must not create a CUDA
   * context (one does not survive fork): look at device files, or probe in a
   * short-lived child. Returns 0 when usable here and sets *defaultRanks
   * (8 on shm, the GPU count on nccl); otherwise writes why into why. */
  int (*probe)(int* defaultRanks, char* why, size_t whyLen);

  int (*init)(benchRank* r); /* create the comm(s) of rank r->rank */
  void (*fini)(benchRank* r);
  /* One line on the hardware, for the header and the JSON (rank 0 only). */
  void (*describe)(benchRank* r, char* buf, size_t len);

  /* Buffers are addresses the driver may offset (device pointers on CUDA). */
  void* (*alloc)(benchRank* r, size_t bytes);
  void (*release)(benchRank* r, void* p);
  int (*toDevice)(benchRank* r, void* dst, const void* src, size_t bytes);
  int (*toHost)(benchRank* r, void* dst, const void* src, size_t bytes);

  /* Before the check, warm-up and timed loop of one (collective, size,
   * target), with the buffers they will use: where --graph captures the call.
   * May be NULL. unprepare undoes it (may be NULL). */
  int (*prepare)(benchRank* r, const benchCall* c, benchTarget t);
  void (*unprepare)(benchRank* r, const benchCall* c, benchTarget t);

  /* Issue one call (every rank of the comm calls it, helpers included; for
   * the baseline, a rank outside the active set returns at once). May return
   * before the work is done where the device is asynchronous. */
  int (*run)(benchRank* r, const benchCall* c, benchTarget t);
  int (*sync)(benchRank* r); /* wait for the work issued so far */

  /* Time what is issued between start and stop; stop waits for it and
   * returns microseconds (host clock on shm, CUDA events on nccl). */
  int (*timerStart)(benchRank* r);
  int (*timerStop)(benchRank* r, double* us);

  /* Host-side, among all ranks of the comm: a barrier, and an all-gather of
   * a small record (bytes <= 256): all[q * bytes] = rank q's record. */
  int (*barrier)(benchRank* r);
  int (*agree)(benchRank* r, const void* mine, void* all, size_t bytes);

  /* The route and depth relaycc ran on the last RELAY call of this rank. */
  void (*lastRoute)(benchRank* r, int* route, int* depth);
} benchBackend;

/* The backends this binary has. The NCCL one is defined by
 * tools/bench/cuda/ (compiled only with CUDA + NCCL); until it exists the
 * symbol is absent and --backend nccl says so. */
extern const benchBackend benchBackendShm;

/* Issue c as relaycc on comm (every backend's relaycc target): relayCommCall for the planned
 * collectives, relaySend on the pair's first rank and relayRecv on its second for the point-to-point
 * copy (relayCollectiveSend; other ranks issue nothing), relayAllToAllv for all-to-all-v. */
relayResult_t benchIssueRelay(relayComm_t comm, const benchCall* c, relayStream_t stream);
/* The relaycc function(s) benchIssueRelay calls for coll, for messages. */
const char* benchRelayCallName(relayCollective_t coll);

/* Resolve --backend (shm|nccl|auto) in the parent: the backend, and the
 * default --ranks it implies. Returns NULL with a message in why. */
const benchBackend* benchSelectBackend(const char* name, int* defaultRanks, char* why, size_t whyLen);

#ifdef __cplusplus
}
#endif
#endif
