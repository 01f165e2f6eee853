/*
 * relaycc-bench: relaycc collectives on a layout of active ranks, timed and
 * checked, in nccl-tests style tables (README, tools/bench/ for the parts).
 *
 * The parent parses and checks every argument first (an impossible request
 * fails in milliseconds, naming the argument, before any process exists),
 * picks the backend, then forks one process per rank with relayLaunchRanks.
 * Rank 0 prints as it goes and records rows in a shared page; the parent
 * turns them into JSON and the exit status. A rank that fails or dies fails
 * the whole run at once (the launcher kills the rest), naming the rank.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend.h"
#include "bench.h"
#include "launch.h"
#include "rank_device.h"

int main(int argc, char** argv) {
  static benchOpts o; /* large (layout, sizes): not on the stack */
  char err[768];
  int prc = benchParseArgs(argc, argv, &o, err, sizeof err);
  if (prc == 2) return 0;
  if (prc) {
    fprintf(stderr, "relaycc-bench: bad argument: %s\n", err);
    return 2;
  }
  int defRanks = 0;
  const benchBackend* be = benchSelectBackend(o.backendName, &defRanks, err, sizeof err);
  if (!be) {
    fprintf(stderr, "relaycc-bench: --backend %s: %s\n", o.backendName, err);
    return 2;
  }
  if (!o.ranksGiven) o.nranks = defRanks;
  if (benchCheckOpts(&o, err, sizeof err)) {
    fprintf(stderr, "relaycc-bench: bad argument: %s\n", err);
    return 2;
  }
  if (o.graph && !be->hasGraph) {
    fprintf(stderr,
            "relaycc-bench: bad argument: --graph: the %s backend has nothing to capture (needs nccl)\n",
            be->name);
    return 2;
  }
  if (be->oneRankPer && !o.ranksGiven && defRanks < 2) {
    fprintf(stderr,
            "relaycc-bench: --backend %s: %d %s visible here; --ranks N runs N ranks on it (rank r on %s r "
            "%% %d; "
            "for correctness, not performance: docs/gpu-harness.md)\n",
            be->name, defRanks, be->oneRankPer, be->oneRankPer, defRanks);
    return 2;
  }
  if (be->oneRankPer && o.nranks > defRanks)
    printf("# %d ranks on %d %s(s), rank r on %s r %% %d: " RELAY_SHARED_GPU_NOTE "\n", o.nranks, defRanks,
           be->oneRankPer, be->oneRankPer, defRanks);
  /* Find out now, not after the run, that the JSON cannot be written. */
  if (o.jsonPath) {
    FILE* f = fopen(o.jsonPath, "w");
    if (!f) {
      fprintf(stderr, "relaycc-bench: bad argument: --json %s: %s\n", o.jsonPath, strerror(errno));
      return 2;
    }
    fclose(f);
  }

  benchResults* res =
      mmap(NULL, sizeof(benchResults), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (res == MAP_FAILED) {
    fprintf(stderr, "relaycc-bench: mmap of the results page: %s\n", strerror(errno));
    return 1;
  }
  memset(res, 0, sizeof *res);
  snprintf(res->backend, sizeof res->backend, "%s", be->name);

  char job[128];
  relayLaunchJobName("bench", job, sizeof job);
  benchRunArg arg = {&o, be, job, res};
  relayLaunchResult lr;
  /* Grace: let survivors of a dead rank print how the library saw it (a
   * remote error naming the rank) before the launcher kills them. */
  int lrc = relayLaunchRanks(o.nranks, benchRankMain, &arg, o.timeoutSec * 1000, 2000, &lr, NULL);

  int rc = 0;
  char failure[512] = "";
  if (lrc) {
    if (lr.exitCode == -1000)
      snprintf(failure, sizeof failure, "%s (--timeout %d)", lr.message, o.timeoutSec);
    else snprintf(failure, sizeof failure, "%s", lr.message);
    fprintf(stderr, "relaycc-bench: FAILED: %s\n", failure);
    rc = 1;
  } else if (!res->finished) {
    snprintf(failure, sizeof failure, "rank 0 did not finish");
    fprintf(stderr, "relaycc-bench: FAILED: %s\n", failure);
    rc = 1;
  } else {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < res->nRows; i++)
      if (res->rows[i].tMin > 0) sum += res->rows[i].busbw, n++;
    printf("#\n# Avg bus bandwidth    : %g GB/s (%d rows)\n", n ? sum / n : 0.0, n);
    if (o.check)
      printf("# Wrong elements       : %lld %s\n", res->totalWrong, res->totalWrong ? "FAILED" : "OK");
    else printf("# Wrong elements       : not checked (--check 0)\n");
    fflush(stdout);
    if (res->totalWrong > 0) {
      snprintf(failure, sizeof failure, "%lld wrong elements", res->totalWrong);
      fprintf(stderr, "relaycc-bench: FAILED: %s (see the #wrong column)\n", failure);
      rc = 1;
    }
  }
  if (o.jsonPath && benchWriteJson(o.jsonPath, &o, res, rc, failure)) {
    fprintf(stderr, "relaycc-bench: writing --json %s: %s\n", o.jsonPath, strerror(errno));
    rc = rc ? rc : 1;
  }
  munmap(res, sizeof *res);
  return rc;
}
