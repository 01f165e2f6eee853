/* The shm backend: relaycc's shared-memory transport, one process per rank,
 * buffers in ordinary host memory, the host monotonic clock. Calls are
 * synchronous, so sync is a no-op and a timer brackets the call itself. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "tool_env.h"
#include "core/core.h"

typedef struct {
  relayComm_t comm;
  uint64_t t0;
} shmState;

static int shmProbe(int* defaultRanks, char* why, size_t whyLen) {
  (void)why;
  (void)whyLen;
  *defaultRanks = 8; /* the 8-GPU node this library is for, as processes */
  return 0;
}

static int libError(benchRank* r, const char* call, relayResult_t res, relayComm_t comm) {
  snprintf(r->err, sizeof r->err, "%s: %s: %s", call, relayGetErrorString(res), relayGetLastError(comm));
  return 1;
}

/* RELAYCC_BENCH_BIND=1: rank r runs on the r-th CPU (mod count) of the set the bench
 * inherited, the rule scripts/cpu_peers_bench.sh gives every peer it compares, so
 * relaycc and the peers run on the same cores. Unset: the scheduler places ranks. */
static void shmBindToRank(int rank) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set)) return;
  int n = CPU_COUNT(&set), want = rank % (n > 0 ? n : 1), seen = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &set) && seen++ == want) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      (void)sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

static int shmInit(benchRank* r) {
  if (relayEnvLong("RELAYCC_BENCH_BIND", 0) == 1) shmBindToRank(r->rank);
  shmState* s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(r->err, sizeof r->err, "out of memory");
    return 1;
  }
  r->state = s;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  /* Only what was asked on the command line; the rest stays with the
   * RELAYCC_* variables and the library's defaults. */
  if (r->opts->route >= 0) cfg.route = r->opts->route;
  if (r->opts->depth >= 0) cfg.depth = r->opts->depth;
  relayResult_t res = relayCommInitShm(&s->comm, r->nranks, r->rank, r->job, &cfg);
  if (res != relaySuccess) {
    libError(r, "relayCommInitShm", res, NULL);
    free(s);
    r->state = NULL;
    return 1;
  }
  return 0;
}

static void shmFini(benchRank* r) {
  shmState* s = r->state;
  if (!s) return;
  if (s->comm) relayCommDestroy(s->comm);
  free(s);
  r->state = NULL;
}

static void shmDescribe(benchRank* r, char* buf, size_t len) {
  char model[160] = "unknown cpu";
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (!strncmp(line, "model name", 10)) {
        char* p = strchr(line, ':');
        if (p) {
          p++;
          while (*p == ' ' || *p == '\t') p++;
          p[strcspn(p, "\n")] = 0;
          snprintf(model, sizeof model, "%s", p);
        }
        break;
      }
    }
    fclose(f);
  }
  snprintf(buf, len, "cpu: %s, %ld cores online, shm transport, %d processes", model,
           sysconf(_SC_NPROCESSORS_ONLN), r->nranks);
}

static void* shmAlloc(benchRank* r, size_t bytes) {
  /* Never NULL for 0 bytes: an active rank passes a real buffer even for
   * count 0, and NULL would be an (intended) argument error. */
  size_t n = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, n ? n : 64);
  if (!p) snprintf(r->err, sizeof r->err, "aligned_alloc(%zu): out of memory", bytes);
  return p;
}

static void shmRelease(benchRank* r, void* p) {
  (void)r;
  free(p);
}

static int shmCopy(benchRank* r, void* dst, const void* src, size_t bytes) {
  (void)r;
  memcpy(dst, src, bytes);
  return 0;
}

static int shmRun(benchRank* r, const benchCall* c, benchTarget t) {
  shmState* s = r->state;
  if (t != BENCH_TARGET_RELAY) {
    snprintf(r->err, sizeof r->err, "the shm backend has no baseline");
    return 1;
  }
  if (!relayCollRowOf(c->coll)) {
    snprintf(r->err, sizeof r->err, "collective %d unknown", (int)c->coll);
    return 1;
  }
  relayResult_t res = benchIssueRelay(s->comm, c, NULL);
  return res == relaySuccess ? 0 : libError(r, benchRelayCallName(c->coll), res, s->comm);
}

static int shmSync(benchRank* r) {
  (void)r;
  return 0;
}

static int shmTimerStart(benchRank* r) {
  ((shmState*)r->state)->t0 = relayNowNs();
  return 0;
}

static int shmTimerStop(benchRank* r, double* us) {
  *us = (double)(relayNowNs() - ((shmState*)r->state)->t0) * 1e-3;
  return 0;
}

static int shmBarrier(benchRank* r) {
  shmState* s = r->state;
  relayResult_t res = relayCommBarrier(s->comm);
  return res == relaySuccess ? 0 : libError(r, "relayCommBarrier", res, s->comm);
}

static int shmAgree(benchRank* r, const void* mine, void* all, size_t bytes) {
  shmState* s = r->state;
  relayResult_t res = relayCommAgree(s->comm, mine, all, bytes);
  return res == relaySuccess ? 0 : libError(r, "relayCommAgree", res, s->comm);
}

static void shmLastRoute(benchRank* r, int* route, int* depth) {
  shmState* s = r->state;
  relayCommLastRoute(s->comm, route, depth);
}

const benchBackend benchBackendShm = {
    .name = "shm",
    .baselineName = NULL,
    .hostVisible = 1,
    .hasGraph = 0,
    .probe = shmProbe,
    .init = shmInit,
    .fini = shmFini,
    .describe = shmDescribe,
    .alloc = shmAlloc,
    .release = shmRelease,
    .toDevice = shmCopy,
    .toHost = shmCopy,
    .prepare = NULL,
    .unprepare = NULL,
    .run = shmRun,
    .sync = shmSync,
    .timerStart = shmTimerStart,
    .timerStop = shmTimerStop,
    .barrier = shmBarrier,
    .agree = shmAgree,
    .lastRoute = shmLastRoute,
};
