/*
 * relaycc-plan: print the plan of one call signature, or its link traffic.
 *
 *   relaycc-plan -c COLL -A 2 -G 1 --ranks 8 --count N [--dtype T] [--op O]
 *                [--route direct|relay] [--depth T] [--rank r]
 *                [--layout r0,r1,...] [--traffic]
 *
 * --count is the per-group count as the API takes it (all-gather sendcount,
 * reduce-scatter recvcount, all-reduce count, all-to-all segment count). The
 * layout is ranks 0..A*G-1 group-major unless --layout lists them. With
 * --traffic it prints, per step, the bytes on each directed link and the
 * busiest one; the last line is exactly "critical-path bytes: <integer>" (the
 * sum over steps of the busiest link's bytes). A route that cannot serve the
 * call falls back to direct, as the library does, with a note on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "p2p/p2p.h"
#include "p2p_tool.h"
#include "plan/plan.h"
#include "route/table.h"

static const char* kUsage =
    "usage: relaycc-plan -c allgather|reducescatter|allreduce|alltoall|broadcast|reduce -A nActive\n"
    "                    [-G nGroups] --ranks N --count N [--dtype T] [--op sum|prod|max|min|avg]\n"
    "                    [--root position (broadcast, reduce; default 0)]\n"
    "                    [--route direct|relay] [--depth T] [--rank r] [--layout r0,r1,...] [--traffic]\n";

static void die(const char* arg, const char* fmt, const char* val) {
  fprintf(stderr, "relaycc-plan: %s: ", arg);
  fprintf(stderr, fmt, val ? val : "(missing)");
  fprintf(stderr, "\n%s", kUsage);
  exit(2);
}

static long long parseInt(const char* arg, const char* s, long long lo, long long hi) {
  long long v = 0;
  if (relayParseInt(s, lo, hi, &v)) {
    char msg[160];
    snprintf(msg, sizeof msg, "'%%s' is not an integer in [%lld, %lld]", lo, hi);
    die(arg, msg, s);
  }
  return v;
}

static void printTraffic(const relayPlan* p, FILE* f) {
  int n = p->nranks;
  uint64_t* t = malloc((size_t)n * (size_t)n * sizeof *t);
  if (!t) {
    fprintf(stderr, "relaycc-plan: out of memory\n");
    exit(1);
  }
  for (int s = 0; s < p->nSteps; s++) {
    relayPlanStepTraffic(p, s, t);
    fprintf(f, "step %d\n", s);
    int bs = -1, bd = -1;
    uint64_t best = 0;
    for (int a = 0; a < n; a++)
      for (int d = 0; d < n; d++) {
        uint64_t v = t[(size_t)a * (size_t)n + (size_t)d];
        if (!v) continue;
        fprintf(f, "  %d -> %d: %llu\n", a, d, (unsigned long long)v);
        if (v > best) {
          best = v;
          bs = a;
          bd = d;
        }
      }
    if (bs >= 0) fprintf(f, "  busiest: %d -> %d: %llu\n", bs, bd, (unsigned long long)best);
    else fprintf(f, "  busiest: none: 0\n");
  }
  free(t);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--scatter-parts")) return p2pPlanToolMain(argc, argv); /* common/p2p_tool.c */
  enum { O_RANKS = 256, O_COUNT, O_DTYPE, O_OP, O_ROUTE, O_DEPTH, O_RANK, O_LAYOUT, O_TRAFFIC, O_ROOT };
  static const struct option opts[] = {{"coll", required_argument, 0, 'c'},
                                       {"ranks", required_argument, 0, O_RANKS},
                                       {"count", required_argument, 0, O_COUNT},
                                       {"dtype", required_argument, 0, O_DTYPE},
                                       {"op", required_argument, 0, O_OP},
                                       {"route", required_argument, 0, O_ROUTE},
                                       {"depth", required_argument, 0, O_DEPTH},
                                       {"rank", required_argument, 0, O_RANK},
                                       {"layout", required_argument, 0, O_LAYOUT},
                                       {"traffic", no_argument, 0, O_TRAFFIC},
                                       {"root", required_argument, 0, O_ROOT},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  relayCollective_t coll = relayNumCollectives; /* none yet */
  int A = 0, G = 1, nranks = 0, depth = 1, rank = -1, traffic = 0, route = relayRouteRelay, root = 0;
  long long count = -1;
  relayDataType_t dtype = relayFloat32;
  relayRedOp_t op = relaySum;
  const char* layoutArg = NULL;
  const char* rankArg = NULL;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "c:A:G:h", opts, NULL)) != -1) {
    switch (c) {
      case 'c':
        /* a collective on a layout: scatter and gather (a rank set) have relaycc-sim's network model */
        if (relayParseCollAll(optarg, &coll) || !relayCollOnLayout(coll))
          die("-c", "unknown collective '%s'", optarg);
        break;
      case 'A': A = (int)parseInt("-A", optarg, 2, PLAN_MAX_SRCS); break;
      case 'G': G = (int)parseInt("-G", optarg, 1, 1 << 16); break;
      case O_RANKS: nranks = (int)parseInt("--ranks", optarg, 1, 1 << 16); break;
      case O_COUNT: count = parseInt("--count", optarg, 0, (long long)1 << 50); break;
      case O_DTYPE:
        if (relayParseType(optarg, &dtype)) die("--dtype", "unknown datatype '%s'", optarg);
        break;
      case O_OP:
        if (relayParseOp(optarg, &op)) die("--op", "unknown reduction op '%s'", optarg);
        break;
      case O_ROUTE:
        if (relayParseRoute(optarg, &route)) die("--route", "unknown route '%s'", optarg);
        if (route == relayRouteAuto)
          die("--route", "'%s' needs a topology model; give direct or relay", optarg);
        break;
      case O_DEPTH: depth = (int)parseInt("--depth", optarg, 1, 1 << 10); break;
      case O_RANK:
        rank = (int)parseInt("--rank", optarg, 0, 1 << 16);
        rankArg = optarg;
        break;
      case O_LAYOUT: layoutArg = optarg; break;
      case O_TRAFFIC: traffic = 1; break;
      case O_ROOT: root = (int)parseInt("--root", optarg, 0, PLAN_MAX_SRCS - 1); break;
      case 'h': fputs(kUsage, stdout); return 0;
      default: die(argv[optind - 1], "unknown option or missing value%s", "");
    }
  }
  if (optind < argc) die(argv[optind], "unexpected argument%s", "");
  if (coll == relayNumCollectives) die("-c", "a collective is required%s", "");
  if (A == 0) die("-A", "the number of active ranks per group is required%s", "");
  if (nranks == 0) die("--ranks", "the comm size is required%s", "");
  if (count < 0) die("--count", "the per-group count is required%s", "");
  if ((long long)A * G > nranks) {
    char v[64];
    snprintf(v, sizeof v, "%d", nranks);
    die("--ranks", "%s ranks cannot hold -A x -G active ranks", v);
  }
  if (rank >= nranks) die("--rank", "'%s' is not a rank of the comm", rankArg);
  if (!relayCollReduces(coll)) op = relaySum;
  if (root >= A) die("--root", "the root's position must be below -A%s", "");

  int nr = A * G;
  int* ranks = malloc((size_t)nr * sizeof *ranks);
  char* seen = calloc((size_t)nranks, 1);
  size_t* counts = malloc((size_t)G * sizeof *counts);
  if (!ranks || !seen || !counts) {
    fprintf(stderr, "relaycc-plan: out of memory\n");
    return 1;
  }
  for (int i = 0; i < nr; i++) ranks[i] = i;
  if (layoutArg) {
    const char* s = layoutArg;
    for (int i = 0; i < nr; i++) {
      char* end = NULL;
      errno = 0;
      long v = strtol(s, &end, 10);
      if (end == s || errno || v < 0 || v >= nranks || seen[v] || (i + 1 < nr ? *end != ',' : *end != 0))
        die("--layout", "'%s' is not a list of A*G distinct ranks of the comm", layoutArg);
      seen[v] = 1;
      ranks[i] = (int)v;
      s = end + 1;
    }
  }
  for (int g = 0; g < G; g++) counts[g] = (size_t)count;
  size_t es = relayTypeSize(dtype);
  if ((unsigned long long)count > (unsigned long long)(SIZE_MAX / es / (size_t)A))
    die("--count", "'%s' overflows the buffer size", "count");

  planKey key = planKeyInit(coll, nranks, G, A, ranks, counts, dtype);
  key.op = op;
  key.route = route;
  key.depth = depth;
  key.root = relayCollRooted(coll) ? root : 0;
  relayPlan* plan = NULL;
  relayResult_t res = relayPlanBuild(&key, &plan);
  if (res == relayNotSupported && route != relayRouteDirect) {
    fprintf(stderr,
            "relaycc-plan: route %s cannot serve this call (not supported); it falls back to direct\n",
            relayRouteName(route));
    key.route = relayRouteDirect;
    key.depth = 1;
    res = relayPlanBuild(&key, &plan);
  }
  if (res != relaySuccess) {
    fprintf(stderr, "relaycc-plan: building the plan failed: %s\n", relayGetErrorString(res));
    return 1;
  }
  char err[512];
  if (relayPlanCheck(plan, err, sizeof err) != 0) {
    fprintf(stderr, "relaycc-plan: the plan fails its check: %s\n", err);
    relayPlanPrint(plan, rank, stderr);
    return 1;
  }
  if (traffic) {
    uint64_t crit = relayPlanCriticalPathBytes(plan);
    uint64_t msg = (uint64_t)count * es;
    printf("# %s route=%s depth=%d nranks=%d nGroups=%d A=%d dtype=%s count=%lld (%llu bytes) steps=%d\n",
           relayCollName(coll), relayRouteName(plan->route), plan->depth, nranks, G, A, relayTypeName(dtype),
           count, (unsigned long long)msg, plan->nSteps);
    printTraffic(plan, stdout);
    if (msg) printf("# critical path = %.4f x count*elemsize\n", (double)crit / (double)msg);
    printf("critical-path bytes: %llu\n", (unsigned long long)crit);
  } else {
    relayPlanPrint(plan, rank, stdout);
  }
  relayPlanFree(plan);
  free(ranks);
  free(seen);
  free(counts);
  return 0;
}
