/*
 * relaycc-sim: predicted time of relaycc against the baseline (NCCL/RCCL on
 * the A active ranks only) on a topology model, one row per size, in the
 * layout of the seeds' measured tables, so a prediction can be set beside a
 * measurement line by line.
 *
 *   relaycc-sim --topo mi350x -c allgather -A 2 -G 1 [--sizes 4K,1M,...]
 *               [-b 4K -e 1G -f 2] [--route R] [--depth T] [--plot FILE.png]
 *
 * Sizes are bytes of per-active-rank input (the reference sweep's axis);
 * default: its 22 sizes from 4 KB to 1 GB.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "plan/plan.h"
#include "route/route.h"
#include "sim/sim.h"
#include "topo/topo.h"

#define KB 1024ull
#define MB (1024ull * 1024)
#define MAX_SIZES 256

/* The reference benchmark's size axis (rcclx-relay.md section 10). */
static const unsigned long long kDefaultSizes[] = {
    4 * KB,    9 * KB,   18 * KB,  36 * KB,           72 * KB,  144 * KB, 288 * KB, 576 * KB,
    9 * MB / 2, 9 * MB,  27 * MB / 2, 27 * MB,        63 * MB / 2, 36 * MB, 63 * MB, 135 * MB / 2,
    72 * MB,   135 * MB, 144 * MB, 256 * MB,          512 * MB, 1024 * MB,
};

typedef struct {
  const char* topo;
  int colls[RELAY_NUM_COLLS];
  int nColls;
  int A, G;
  unsigned long long sizes[MAX_SIZES];
  int nSizes;
  int route; /* relayRoute_t; Auto asks the router */
  int depth; /* 0: the router's (or 1) */
  relayDataType_t dtype;
  relayRedOp_t op;
  const char* plot;
  int steps;     /* print per-step times */
  int printTopo; /* print the topology in the text format and exit */
  int vsSeed;    /* compare with the seed's measured tables and exit */
} simOpts;

static void usage(FILE* f) {
  fprintf(f,
          "usage: relaycc-sim [options]\n"
          "  --topo T           preset (mi350x, mi300x, h200, h200x2, cpu) or topology file\n"
          "                     (default $RELAYCC_TOPO, else mi350x; format: docs/model.md)\n"
          "  -c, --coll C       allgather|reducescatter|allreduce|alltoall, a comma list, or all (default)\n"
          "  -A N               active ranks per group (default 2)\n"
          "  -G N               groups (default 1: an independent call; >1: fused)\n"
          "  --sizes LIST       sizes, e.g. 4K,4.5M,1G: bytes of per-active-rank input\n"
          "  -b S / -e S / -f F smallest, largest size and factor (instead of --sizes)\n"
          "                     default: the reference sweep's 22 sizes, 4 KB to 1 GB\n"
          "  --route R          direct|relay|oneshot|auto (default direct; auto asks the router)\n"
          "  --depth T          pipeline depth (default 1, or the router's with --route auto)\n"
          "  --dtype D          default bf16;  --op O  default sum\n"
          "  --plot FILE.png    draw speedup against size (needs gnuplot)\n"
          "  --steps            print each size's per-step times\n"
          "  --print-topo       print the topology in the text format and exit\n"
          "  --vs-seed          the model against the seed's measured MI350X tables (docs/model.md)\n");
}

static int parseSize(const char* s, unsigned long long* out) {
  while (isspace((unsigned char)*s)) s++;
  if (*s == '-' || !*s) return 1;
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || isinf(v)) return 1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return 1;
  double b = v * mult;
  if (b != floor(b) || b > 1e18) return 1;
  *out = (unsigned long long)b;
  return 0;
}

/* "4 KB", "4.5 MB", "1 GB": the seeds' labels (binary units). */
static void sizeLabel(unsigned long long b, char* buf, size_t len) {
  if (b >= 1024 * MB) snprintf(buf, len, "%g GB", (double)b / (1024.0 * MB));
  else if (b >= MB) snprintf(buf, len, "%g MB", (double)b / MB);
  else if (b >= KB) snprintf(buf, len, "%g KB", (double)b / KB);
  else snprintf(buf, len, "%llu B", b);
}

static int intArg(const char* name, const char* s, int lo, int hi, int* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) {
    fprintf(stderr, "relaycc-sim: %s '%s': want an integer in %d..%d\n", name, s, lo, hi);
    return 1;
  }
  *out = (int)v;
  return 0;
}

static int parseArgs(int argc, char** argv, simOpts* o) {
  memset(o, 0, sizeof *o);
  o->topo = relayEnvStr("RELAYCC_TOPO", "mi350x");
  o->A = 2;
  o->G = 1;
  o->route = relayRouteDirect;
  o->dtype = relayBfloat16;
  o->op = relaySum;
  unsigned long long b = 0, e = 0;
  double factor = 2;
  int haveRange = 0;
  const char* sizes = NULL;
  const char* coll = "all";
  enum { O_TOPO = 1000, O_SIZES, O_ROUTE, O_DEPTH, O_DTYPE, O_OP, O_PLOT, O_STEPS, O_PRINT, O_VSSEED, O_HELP };
  static const struct option lo[] = {
      {"topo", required_argument, 0, O_TOPO},   {"coll", required_argument, 0, 'c'},
      {"sizes", required_argument, 0, O_SIZES}, {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},  {"stepfactor", required_argument, 0, 'f'},
      {"route", required_argument, 0, O_ROUTE}, {"depth", required_argument, 0, O_DEPTH},
      {"dtype", required_argument, 0, O_DTYPE}, {"op", required_argument, 0, O_OP},
      {"plot", required_argument, 0, O_PLOT},   {"steps", no_argument, 0, O_STEPS},
      {"print-topo", no_argument, 0, O_PRINT},  {"help", no_argument, 0, 'h'},
      {"vs-seed", no_argument, 0, O_VSSEED},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "c:A:G:b:e:f:h", lo, NULL)) != -1) {
    switch (c) {
      case O_TOPO: o->topo = optarg; break;
      case 'c': coll = optarg; break;
      case 'A': if (intArg("-A", optarg, 1, RELAY_TOPO_MAX_GPUS, &o->A)) return 1; break;
      case 'G': if (intArg("-G", optarg, 1, RELAY_TOPO_MAX_GPUS, &o->G)) return 1; break;
      case 'b':
      case 'e':
        if (parseSize(optarg, c == 'b' ? &b : &e)) {
          fprintf(stderr, "relaycc-sim: -%c '%s': not a size (suffixes K, M, G)\n", c, optarg);
          return 1;
        }
        haveRange = 1;
        break;
      case 'f': {
        char* end;
        factor = strtod(optarg, &end);
        if (*end || !(factor > 1)) {
          fprintf(stderr, "relaycc-sim: -f '%s': want a factor > 1\n", optarg);
          return 1;
        }
        haveRange = 1;
        break;
      }
      case O_SIZES: sizes = optarg; break;
      case O_ROUTE:
        if (strcmp(optarg, "auto") == 0) o->route = relayRouteAuto;
        else if (relayParseRoute(optarg, &o->route)) {
          fprintf(stderr, "relaycc-sim: --route '%s': want direct, relay, oneshot or auto\n", optarg);
          return 1;
        }
        break;
      case O_DEPTH: if (intArg("--depth", optarg, 1, 1024, &o->depth)) return 1; break;
      case O_DTYPE:
        if (relayParseType(optarg, &o->dtype)) {
          fprintf(stderr, "relaycc-sim: --dtype '%s': unknown type\n", optarg);
          return 1;
        }
        break;
      case O_OP:
        if (relayParseOp(optarg, &o->op)) {
          fprintf(stderr, "relaycc-sim: --op '%s': unknown op\n", optarg);
          return 1;
        }
        break;
      case O_PLOT: o->plot = optarg; break;
      case O_STEPS: o->steps = 1; break;
      case O_PRINT: o->printTopo = 1; break;
      case O_VSSEED: o->vsSeed = 1; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return 1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "relaycc-sim: unexpected argument '%s'\n", argv[optind]);
    return 1;
  }
  if (strcmp(coll, "all") == 0) {
    for (int i = 0; i < RELAY_NUM_COLLS; i++) o->colls[o->nColls++] = i;
  } else {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", coll);
    for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
      relayColl_t cc;
      if (relayParseColl(t, &cc) || o->nColls == RELAY_NUM_COLLS) {
        fprintf(stderr, "relaycc-sim: -c '%s': want allgather, reducescatter, allreduce, alltoall, a comma list "
                        "of them, or all\n", coll);
        return 1;
      }
      o->colls[o->nColls++] = cc;
    }
  }
  if (sizes && haveRange) {
    fprintf(stderr, "relaycc-sim: give either --sizes or -b/-e/-f, not both\n");
    return 1;
  }
  if (sizes) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", sizes);
    for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
      if (o->nSizes == MAX_SIZES || parseSize(t, &o->sizes[o->nSizes])) {
        fprintf(stderr, "relaycc-sim: --sizes: '%s' is not a size (or more than %d)\n", t, MAX_SIZES);
        return 1;
      }
      o->nSizes++;
    }
  } else if (haveRange) {
    if (!b) b = 4 * KB;
    if (!e) e = b;
    if (b > e) {
      fprintf(stderr, "relaycc-sim: -b exceeds -e\n");
      return 1;
    }
    for (double s = (double)b; s <= (double)e * (1 + 1e-12) && o->nSizes < MAX_SIZES; s *= factor)
      o->sizes[o->nSizes++] = (unsigned long long)llround(s);
  } else {
    for (size_t i = 0; i < sizeof kDefaultSizes / sizeof kDefaultSizes[0]; i++) o->sizes[o->nSizes++] = kDefaultSizes[i];
  }
  return 0;
}

typedef struct {
  int ok;
  double base, relay; /* seconds */
  int route, depth, fellBack;
  int failed; /* an error, not just a size the collective cannot split */
  const char* why;
} row;

/* One size of one collective: the baseline and relaycc's plan on the model. */
static row simulate(const simOpts* o, const struct relayTopo* topo, relayColl_t coll, unsigned long long bytes,
                    int* ranks, size_t* counts, int showSteps) {
  row r;
  memset(&r, 0, sizeof r);
  size_t es = relayTypeSize(o->dtype);
  unsigned long long elems = bytes / es;
  int perActive = coll == RELAY_COLL_REDUCESCATTER || coll == RELAY_COLL_ALLTOALL;
  if (bytes % es || elems == 0 || (perActive && elems % (unsigned long long)o->A)) {
    r.why = "size not a multiple of the element size (times A)";
    return r;
  }
  for (int g = 0; g < o->G; g++) counts[g] = (size_t)(perActive ? elems / (unsigned long long)o->A : elems);
  planKey k;
  memset(&k, 0, sizeof k);
  k.coll = coll;
  k.nranks = topo->nGPUs;
  k.nGroups = o->G;
  k.nActive = o->A;
  k.ranks = ranks;
  k.counts = counts;
  k.dtype = o->dtype;
  k.op = o->op;
  int route = o->route, depth = o->depth ? o->depth : 1;
  if (route == relayRouteAuto) {
    int d;
    relayRouteChoose(&k, topo, &route, &d);
    if (!o->depth) depth = d;
  }
  relayBaselineResult br;
  if (relayBaselineRun(&k, topo, &br) != relaySuccess) {
    r.failed = 1;
    r.why = relayGetLastError(NULL);
    return r;
  }
  k.route = route;
  k.depth = depth;
  relayPlan* plan = NULL;
  relayResult_t res = relayPlanBuild(&k, &plan);
  if (res == relayNotSupported && route != relayRouteDirect) {
    /* As a call does: a route that cannot serve the key falls back to direct. */
    r.fellBack = 1;
    k.route = route = relayRouteDirect;
    k.depth = depth = 1;
    res = relayPlanBuild(&k, &plan);
  }
  if (res != relaySuccess) {
    r.failed = 1;
    r.why = "no plan for this key";
    return r;
  }
  relaySimResult sr;
  res = relaySimRun(plan, topo, &sr);
  if (res != relaySuccess) {
    r.failed = 1;
    r.why = relayGetLastError(NULL);
  } else {
    r.ok = 1;
    r.base = br.totalS;
    r.relay = sr.totalS;
    r.route = route;
    r.depth = depth;
    if (showSteps) {
      printf("           |   %d steps:", sr.nSteps);
      for (int s = 0; s < sr.nSteps; s++) printf(" %.1f", sr.stepS[s] * 1e6);
      printf(" us; busiest link %.3g MB, critical path %.3g MB; baseline %s\n", sr.busiestLinkBytes / 1e6,
             sr.criticalPathBytes / 1e6, relayBaselineAlgoName(br.algo));
    }
  }
  relaySimResultFree(&sr);
  relayPlanFree(plan);
  return r;
}

static const char* topoKind(const struct relayTopo* t) {
  int links = 0;
  for (int i = 0; i < t->nGPUs * t->nGPUs; i++) links += t->linkCount[i] > 0;
  if (t->hasSwitch && links == 0) return "switch";
  if (t->hasSwitch) return "mesh + switch";
  return "mesh";
}

/* The model against each of the seed's measured tables. */
static int vsSeed(const struct relayTopo* topo) {
  printf("# relaycc-sim --vs-seed: model on topology %s against the seed's measured tables (MI350X, bf16,\n"
         "# single group, best-of-100); err = model / measured - 1\n", topo->name);
  int failed = 0;
  for (int i = 0; i < relayNumSeedTables; i++) {
    const relaySeedTable* t = &relaySeedTables[i];
    relaySeedCompare c;
    printf("\n%s A=%d, %s, relay depth %d: seed %s\n", relayCollName(t->coll), t->nActive,
           t->nGroups > 1 ? "fused" : "single group", t->depth, t->source);
    relayResult_t r = relaySeedCompareRun(t, topo, &c);
    if (r == relayNotSupported) {
      printf("  (the relay route cannot build this shape yet)\n");
      continue;
    }
    if (r != relaySuccess) {
      printf("  error: %s\n", relayGetLastError(NULL));
      failed = 1;
      continue;
    }
    printf("  Msg Size |  RCCL meas  model |  relay meas  model    err |  speedup meas  model\n");
    for (int k = 0; k < t->nRows; k++) {
      char label[32];
      sizeLabel((unsigned long long)llround(t->mib[k] * MB), label, sizeof label);
      if (t->relayMs[k] > 0) {
        double base = t->relayMs[k] * t->speedup[k];
        printf("%10s | %10.3f %6.3f | %11.3f %6.3f %+5.0f%% | %12.2fx %5.2fx\n", label, base, c.modelBaseMs[k],
               t->relayMs[k], c.modelRelayMs[k], 100 * (c.modelRelayMs[k] / t->relayMs[k] - 1), t->speedup[k],
               c.modelBaseMs[k] / c.modelRelayMs[k]);
      } else {
        printf("%10s | %10s %6.3f | %11s %6.3f %6s | %12.2fx %5.2fx\n", label, "-", c.modelBaseMs[k], "-",
               c.modelRelayMs[k], "", t->speedup[k], c.modelBaseMs[k] / c.modelRelayMs[k]);
      }
    }
    if (!c.n) {
      printf("  speedup: mean |err| %.1f%%, max %.1f%% (the seed gave speedups only)\n", 100 * c.meanSpeedupErr,
             100 * c.maxSpeedupErr);
      continue;
    }
    printf("  relay time: mean |err| %.1f%%, max %.1f%%, bias %+.1f%%; RCCL time: mean |err| %.1f%%, max %.1f%%;\n"
           "  speedup: mean |err| %.1f%%, max %.1f%%\n",
           100 * c.meanRelayErr, 100 * c.maxRelayErr, 100 * c.biasRelayErr, 100 * c.meanBaseErr, 100 * c.maxBaseErr,
           100 * c.meanSpeedupErr, 100 * c.maxSpeedupErr);
  }
  return failed;
}

static int haveGnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

int main(int argc, char** argv) {
  simOpts o;
  if (parseArgs(argc, argv, &o)) return 2;
  struct relayTopo* topo = NULL;
  if (relayTopoLoad(o.topo, &topo) != relaySuccess) {
    fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
    return 2;
  }
  if (o.vsSeed) {
    int rc = vsSeed(topo);
    relayTopoFree(topo);
    return rc;
  }
  if (o.printTopo) {
    relayTopoWrite(topo, stdout);
    relayTopoFree(topo);
    return 0;
  }
  if (o.A * o.G > topo->nGPUs) {
    fprintf(stderr, "relaycc-sim: %d groups of %d ranks exceed the %d GPUs of '%s'\n", o.G, o.A, topo->nGPUs,
            topo->name);
    relayTopoFree(topo);
    return 2;
  }
  /* Group g's actives are GPUs g*A .. g*A+A-1 (the reference's layout). */
  int ranks[RELAY_TOPO_MAX_GPUS];
  size_t counts[RELAY_TOPO_MAX_GPUS];
  for (int i = 0; i < o.A * o.G; i++) ranks[i] = i;

  static row rows[RELAY_NUM_COLLS][MAX_SIZES];
  int anyFallback = 0, anyFailed = 0;
  printf("# relaycc-sim: topology %s (%d GPUs, %s), A=%d, G=%d (%s), %s, per-active-rank input\n", topo->name,
         topo->nGPUs, topoKind(topo), o.A, o.G, o.G > 1 ? "fused" : "independent", relayTypeName(o.dtype));
  printf("# predicted times; baseline = NCCL/RCCL on the %d active ranks only (docs/model.md)\n", o.A);
  for (int ci = 0; ci < o.nColls; ci++) {
    relayColl_t coll = (relayColl_t)o.colls[ci];
    printf("\n%s-group %s, A=%d (model: %s)\n", o.G > 1 ? "Fused" : "Single", relayCollName(coll), o.A,
           topo->name);
    if (o.G > 1) printf("%d groups in one call vs %d concurrent %d-rank baseline calls\n", o.G, o.G, o.A);
    else printf("speedup = %d-rank baseline with the other %d ranks idle / relaycc\n", o.A, topo->nGPUs - o.A);
    printf("  Msg Size |   NCCL(ms)  Relay(ms)   Speedup | route    depth\n");
    for (int si = 0; si < o.nSizes; si++) {
      char label[32];
      sizeLabel(o.sizes[si], label, sizeof label);
      row r = simulate(&o, topo, coll, o.sizes[si], ranks, counts, 0);
      rows[ci][si] = r;
      if (!r.ok) {
        anyFailed |= r.failed;
        printf("%10s | %10s %10s %9s | %s\n", label, "N/A", "N/A", "N/A", r.why ? r.why : "");
        continue;
      }
      anyFallback |= r.fellBack;
      char rname[16];
      snprintf(rname, sizeof rname, "%s%s", relayRouteName(r.route), r.fellBack ? "*" : "");
      printf("%10s | %10.3f %10.3f %8.2fx | %-8s %5d\n", label, r.base * 1e3, r.relay * 1e3, r.base / r.relay, rname,
             r.depth);
      if (o.steps) simulate(&o, topo, coll, o.sizes[si], ranks, counts, 1);
    }
  }
  if (anyFallback)
    printf("\n* the requested route cannot serve this call (yet): it fell back to direct, as a call would\n");

  if (o.plot) {
    char dat[1024];
    snprintf(dat, sizeof dat, "%s.dat", o.plot);
    FILE* f = fopen(dat, "w");
    if (!f) {
      fprintf(stderr, "relaycc-sim: --plot: cannot write %s: %s\n", dat, strerror(errno));
    } else {
      for (int ci = 0; ci < o.nColls; ci++) {
        fprintf(f, "# %s\n", relayCollName((relayColl_t)o.colls[ci]));
        for (int si = 0; si < o.nSizes; si++)
          if (rows[ci][si].ok)
            fprintf(f, "%llu %.6g %.6g %.6g\n", o.sizes[si], rows[ci][si].base * 1e3, rows[ci][si].relay * 1e3,
                    rows[ci][si].base / rows[ci][si].relay);
        fprintf(f, "\n\n");
      }
      fclose(f);
      if (!haveGnuplot()) {
        printf("\nrelaycc-sim: gnuplot not found: no plot drawn; the data is in %s "
               "(columns: bytes, baseline ms, relaycc ms, speedup; one block per collective)\n",
               dat);
      } else {
        char gp[1100];
        snprintf(gp, sizeof gp, "%s.gp", o.plot);
        FILE* g = fopen(gp, "w");
        if (g) {
          fprintf(g, "set terminal png size 900,560\nset output '%s'\n", o.plot);
          fprintf(g, "set logscale x 2\nset xlabel 'per-active-rank input'\nset ylabel 'speedup (predicted)'\n");
          fprintf(g, "set xtics (\"1K\" 1024, \"16K\" 16384, \"256K\" 262144, \"4M\" 4194304, "
                     "\"64M\" 67108864, \"1G\" 1073741824, \"16G\" 17179869184.)\n");
          fprintf(g, "set title 'relaycc over the %d-rank baseline on %s (A=%d, G=%d, %s)'\n", o.A,
                  topo->name, o.A, o.G, relayTypeName(o.dtype));
          fprintf(g, "set grid\nset key left top\nset yrange [0:*]\n");
          fprintf(g, "plot 1 with lines dt 2 lc rgb 'gray' notitle");
          for (int ci = 0; ci < o.nColls; ci++)
            fprintf(g, ", '%s' index %d using 1:4 with linespoints title '%s'", dat, ci,
                    relayCollName((relayColl_t)o.colls[ci]));
          fprintf(g, "\n");
          fclose(g);
          char cmd[2400];
          snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
          if (system(cmd) != 0) fprintf(stderr, "relaycc-sim: gnuplot failed on %s\n", gp);
          else printf("\nplot: %s\n", o.plot);
        }
      }
    }
  }
  relayTopoFree(topo);
  return anyFailed ? 1 : 0;
}
