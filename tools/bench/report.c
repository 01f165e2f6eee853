/* relaycc-bench output: nccl-tests style tables on stdout (rank 0), JSON
 * from the parent. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "comm/common.h"

const char* benchCollName(relayCollective_t coll) {
  return coll == relayCollectiveSend ? "sendrecv" : relayCollName(coll);
}

const char* benchRouteLabel(int route, int depth, char* buf, size_t len) {
  const char* n = relayRouteName(route);
  /* Depth matters only for the relay (depth 1 is the two-group schedule). */
  if (route == relayRouteRelay && depth > 0) snprintf(buf, len, "%s/%d", n, depth);
  else snprintf(buf, len, "%s", n);
  return buf;
}

void benchPrintHeader(FILE* f, const benchOpts* o, const benchResults* res) {
  /* Date and command up front: a table pasted into docs/perf/ carries them. */
  char date[64];
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tmv);
  fprintf(f, "# %s: %s\n", date, o->cmdline);
  fprintf(f, "# relaycc-bench %s (commit %s): backend %s, %d ranks, %s\n", RELAYCC_VERSION_STRING,
          relayccGitCommit, res->backend, o->nranks, res->device);
  fprintf(f, "# layout: A=%d G=%d ranks [", o->nActive, o->nGroups);
  for (int g = 0; g < o->nGroups; g++) {
    fprintf(f, g ? " | " : "");
    for (int i = 0; i < o->nActive; i++) fprintf(f, i ? " %d" : "%d", o->layout[g * o->nActive + i]);
  }
  char route[32], depth[16];
  if (o->route >= 0) benchRouteLabel(o->route, 0, route, sizeof route);
  else snprintf(route, sizeof route, "default");
  if (o->depth < 0) snprintf(depth, sizeof depth, "default");
  else if (o->depth == 0) snprintf(depth, sizeof depth, "model");
  else snprintf(depth, sizeof depth, "%d", o->depth);
  fprintf(f, "]  dtype %s  op %s  route %s  depth %s  %s  check %s%s\n", relayTypeName(o->dtype),
          relayOpName(o->op), route, depth, o->inplace ? "in place" : "out of place", o->check ? "on" : "off",
          o->graph ? "  graph" : "");
  fprintf(
      f,
      "# -n %d -w %d -r %d: an iteration's time is the max over ranks of one call after a barrier;\n"
      "#   time-min = min over all iterations, time-med = median, spread = max/min of the %d repetitions' "
      "minima;\n"
      "#   with a baseline: %s\n"
      "# size = bytes of per-active-rank input; algbw = data/time (all-gather: A x size); busbw with n = A\n",
      o->iters, o->warmup, o->reps, o->reps,
      o->sequential ? "all of relaycc's repetitions, then all of the baseline's (--sequential)"
                    : "each repetition times relaycc's iterations, then the baseline's (interleaved)");
  fflush(f);
}

void benchPrintTableHead(FILE* f, const benchOpts* o, relayCollective_t coll, const char* baseName) {
  fprintf(f, "#\n# %s\n", benchCollName(coll));
  if (relayCollRankSet(coll)) {
    int n = o->nActive * o->nGroups;
    fprintf(
        f,
        "# root %d, rank set = the layout's %d ranks; size = bytes of each member's block; algbw = %d x size "
        "/ time (the root's data), busbw = algbw x %d/%d (nccl-tests)\n",
        o->root, n, n, n - 1, n);
  }
  if (relayCollKind(coll) == relayKindRootedPosition)
    fprintf(f, "# root index %d: the root of each group is its active %d; busbw = algbw (nccl-tests)\n",
            o->rootIndex, o->rootIndex);
  if (coll == relayCollectiveSend)
    fprintf(
        f,
        "# each group a pair: its first rank sends size bytes to its second (relaySend/relayRecv), timed as "
        "the receiver sees it; busbw = algbw\n");
  if (coll == relayCollectiveAllToAllV)
    fprintf(
        f,
        "# uneven: active i sends count x (1 + (i + 2j) %% 3) elements to active j (blocks packed in peer "
        "order); size = the busiest active's receive total\n");
  fprintf(f, "#%11s %12s %9s %6s %9s %10s %10s %7s %8s %8s", "size", "count", "type", "redop", "route",
          "time-min", "time-med", "spread", "algbw", "busbw");
  if (baseName) fprintf(f, " %10s %8s", baseName, "speedup");
  fprintf(f, " %7s\n", "#wrong");
  fprintf(f, "#%11s %12s %9s %6s %9s %10s %10s %7s %8s %8s", "(B)", "(elements)", "", "", "", "(us)", "(us)",
          "", "(GB/s)", "(GB/s)");
  if (baseName) fprintf(f, " %10s", "(us)");
  fprintf(f, "\n");
  fflush(f);
}

void benchPrintRow(FILE* f, const benchOpts* o, const benchRow* row) {
  char route[32], wrong[24];
  benchRouteLabel(row->route, row->depth, route, sizeof route);
  long long w = row->wrong < 0 ? -1 : row->wrong + (row->hasBase && row->baseWrong > 0 ? row->baseWrong : 0);
  if (w < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", w);
  fprintf(f, " %11llu %12llu %9s %6s %9s %10.2f %10.2f %7.2f %8.3f %8.3f", (unsigned long long)row->bytes,
          (unsigned long long)row->count, relayTypeName(o->dtype),
          relayCollReduces((relayCollective_t)row->coll) ? relayOpName(o->op) : "none", route, row->tMin,
          row->tMed, row->spread, row->algbw, row->busbw);
  if (row->hasBase) fprintf(f, " %10.2f %8.3f", row->baseMin, row->speedup);
  fprintf(f, " %7s\n", wrong);
  fflush(f);
}

void benchPrintSkip(FILE* f, relayCollective_t coll, uint64_t bytes, const char* why) {
  fprintf(f, "# %s %llu bytes skipped: %s\n", benchCollName(coll), (unsigned long long)bytes, why);
  fflush(f);
}

static void jsonStr(FILE* f, const char* s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void jsonNum(FILE* f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fprintf(f, "null");
}
/* `, "key": value` of a measurement (null when not finite) or of a wrong-
 * element count (null when not checked: negative). */
static void jsonKeyNum(FILE* f, const char* key, double v) {
  fprintf(f, ", \"%s\": ", key);
  jsonNum(f, v);
}
static void jsonKeyWrong(FILE* f, const char* key, long long n) {
  if (n < 0) fprintf(f, ", \"%s\": null", key);
  else fprintf(f, ", \"%s\": %lld", key, n);
}

int benchWriteJson(const char* path, const benchOpts* o, const benchResults* res, int exitCode,
                   const char* failure) {
  FILE* f = fopen(path, "w");
  if (!f) return 1;
  char date[64];
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  fprintf(f, "{\n  \"tool\": \"relaycc-bench\",\n  \"version\": \"%s\",\n  \"commit\": \"%s\",\n",
          RELAYCC_VERSION_STRING, relayccGitCommit);
  fprintf(f, "  \"date\": \"%s\",\n", date);
  fprintf(f, "  \"command\": ");
  jsonStr(f, o->cmdline);
  fprintf(f, ",\n  \"backend\": ");
  jsonStr(f, res->backend);
  fprintf(f, ",\n  \"baseline\": ");
  if (res->baseline[0]) jsonStr(f, res->baseline);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"device\": ");
  jsonStr(f, res->device);
  fprintf(f, ",\n  \"nranks\": %d,\n  \"nActive\": %d,\n  \"nGroups\": %d,\n  \"layout\": [", o->nranks,
          o->nActive, o->nGroups);
  for (int i = 0; i < o->nActive * o->nGroups; i++) fprintf(f, i ? ", %d" : "%d", o->layout[i]);
  fprintf(f, "],\n  \"dtype\": \"%s\",\n  \"op\": \"%s\",\n  \"inplace\": %s,\n  \"graph\": %s,\n",
          relayTypeName(o->dtype), relayOpName(o->op), o->inplace ? "true" : "false",
          o->graph ? "true" : "false");
  fprintf(f, "  \"iters\": %d,\n  \"warmup\": %d,\n  \"reps\": %d,\n  \"check\": %s,\n", o->iters, o->warmup,
          o->reps, o->check ? "true" : "false");
  fprintf(f, "  \"exit_code\": %d,\n  \"failure\": ", exitCode);
  if (failure && *failure) jsonStr(f, failure);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"total_wrong\": %lld,\n  \"rows\": [", res->totalWrong);
  for (int i = 0; i < res->nRows; i++) {
    const benchRow* r = &res->rows[i];
    char route[32];
    fprintf(f, "%s\n    {\"coll\": \"%s\", \"bytes\": %llu, \"count\": %llu, \"dtype\": \"%s\", \"op\": ",
            i ? "," : "", benchCollName((relayCollective_t)r->coll), (unsigned long long)r->bytes,
            (unsigned long long)r->count, relayTypeName(o->dtype));
    if (relayCollReduces((relayCollective_t)r->coll)) fprintf(f, "\"%s\"", relayOpName(o->op));
    else fprintf(f, "null");
    fprintf(f, ", \"inplace\": %s, \"route\": \"%s\", \"route_id\": %d, \"depth\": %d",
            r->inplace ? "true" : "false", benchRouteLabel(r->route, r->depth, route, sizeof route), r->route,
            r->depth);
    jsonKeyNum(f, "time_min_us", r->tMin);
    jsonKeyNum(f, "time_med_us", r->tMed);
    jsonKeyNum(f, "spread", r->spread);
    jsonKeyNum(f, "algbw_gbs", r->algbw);
    jsonKeyNum(f, "busbw_gbs", r->busbw);
    jsonKeyWrong(f, "wrong", r->wrong);
    if (r->hasBase) {
      jsonKeyNum(f, "base_time_min_us", r->baseMin);
      jsonKeyNum(f, "base_time_med_us", r->baseMed);
      jsonKeyNum(f, "base_spread", r->baseSpread);
      jsonKeyNum(f, "speedup", r->speedup);
      jsonKeyWrong(f, "base_wrong", r->baseWrong);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  return fclose(f) || bad;
}
