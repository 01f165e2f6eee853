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
 *
 *   relaycc-sim -c scatter|gather --nodes N [--net mi355x-ainic] [--root R]
 *               [--pool P] [--per-peer K] [--user-per-peer U] [--base B]
 *
 * Rooted collectives on a multi-node network model (src/topo), every
 * transfer split into parts on P2P channels (src/p2p): the root's channel
 * occupancy and the predicted time of each scatter part rule -- the per-peer
 * count (no rule), the first version of the seed's fix (one part whenever the
 * root's flows overflow the pool) and the seed's rule (the largest power of
 * two that fits) -- side by side. Sizes are the root's bytes (nccl-tests'
 * size), busbw as nccl-tests computes it: size / time * (n - 1) / n.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/common.h"
#include "comm/params.h"
#include "plan/plan.h"
#include "route/route.h"
#include "route/table.h"
#include "seedtab.h"
#include "sim/sim.h"
#include "tool_env.h"
#include "topo/topo.h"

#define KB 1024ull
#define MB (1024ull * 1024)
#define MAX_SIZES 256

/* The reference benchmark's size axis (docs/design.md, "Sources and figures"). */
static const unsigned long long kDefaultSizes[] = {
    4 * KB,     9 * KB,   18 * KB,     36 * KB,  72 * KB,     144 * KB,  288 * KB, 576 * KB,
    9 * MB / 2, 9 * MB,   27 * MB / 2, 27 * MB,  63 * MB / 2, 36 * MB,   63 * MB,  135 * MB / 2,
    72 * MB,    135 * MB, 144 * MB,    256 * MB, 512 * MB,    1024 * MB,
};

typedef struct {
  const char* topo;
  int colls[relayNumCollectives];
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
  /* Rooted collectives (scatter, gather) on a multi-node network model. */
  int rooted; /* the collectives asked for are rooted */
  int nodes;  /* 0: not given */
  const char* net;
  int root;
  int pool, perPeer, userPerPeer; /* 0: the topology's */
  int scheduleBase;
  int topoGiven, routeGiven;
  /* Layout collectives on several nodes: per-GPU network figures. */
  double netGbs, netLatUs; /* 0: RELAY_TOPO_NET_GPU_BW, RELAY_TOPO_NET_LAT_S */
} simOpts;

static void usage(FILE* f) {
  fprintf(f,
          "usage: relaycc-sim [options]\n"
          "  --topo T           preset (mi350x, mi300x, h200, h200x2, cpu) or topology file\n"
          "                     (default $RELAYCC_TOPO, else mi350x; format: docs/model.md)\n"
          "  -c, --coll C       allgather|reducescatter|allreduce|alltoall|broadcast|reduce, a comma list,\n"
          "                     or all (default: the four layout collectives); broadcast and reduce: the\n"
          "                     root is the first active of each group\n"
          "  -A N               active ranks per group (default 2)\n"
          "  -G N               groups (default 1: an independent call; >1: fused)\n"
          "  --sizes LIST       sizes, e.g. 4K,4.5M,1G: bytes of per-active-rank input\n"
          "  -b S / -e S / -f F smallest, largest size and factor (instead of --sizes)\n"
          "                     default: the reference sweep's 22 sizes, 4 KB to 1 GB\n"
          "  --route R          direct|relay|oneshot|bw|auto (default direct; auto asks the router)\n"
          "  --depth T          pipeline depth (default 1, or the router's with --route auto)\n"
          "  --dtype D          default bf16;  --op O  default sum\n"
          "  --plot FILE.png    draw speedup against size (needs gnuplot)\n"
          "  --steps            print each size's per-step times\n"
          "  --print-topo       print the topology in the text format and exit\n"
          "  --vs-seed          the model against the seed's measured MI350X tables (docs/model.md)\n"
          "scatter and gather (-c scatter|gather|scatter,gather), on a multi-node network model:\n"
          "  --nodes N          nodes of 8 GPUs (default 1)\n"
          "  --net NAME         network preset (default mi355x-ainic: the seed 003 machine)\n"
          "  --root R           the root rank (default 0)\n"
          "  --pool P / --per-peer K   P2P pool and parts per peer (default: the preset's)\n"
          "  --user-per-peer U  RELAYCC_NCHANNELS_PER_NET_PEER (kept by the scatter rule)\n"
          "  --base B           node-major (default: the seed's scatter base) or schedule\n"
          "Layout collectives on several nodes (--nodes N with -c allgather|...): the group is the first A\n"
          "GPUs of every node of --topo; hierarchical plans against flat NCCL over all N*A ranks:\n"
          "  --net-gbs X        network bandwidth per GPU, GB/s (default 50: 400 Gb/s)\n"
          "  --net-lat-us L     latency of one network step of a collective, us (default 5)\n"
          "  sizes: the root's bytes (default 16M..16G x4); output: the root's channel\n"
          "  occupancy and predicted time per scatter part rule\n");
}

static int parseSize(const char* s, unsigned long long* out) {
  uint64_t v;
  if (relayParseBytes(s, &v)) return 1;
  *out = (unsigned long long)v;
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
  long long v;
  if (relayParseInt(s, lo, hi, &v)) {
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
  enum {
    O_TOPO = 1000,
    O_SIZES,
    O_ROUTE,
    O_DEPTH,
    O_DTYPE,
    O_OP,
    O_PLOT,
    O_STEPS,
    O_PRINT,
    O_VSSEED,
    O_HELP,
    O_NODES,
    O_NET,
    O_ROOT,
    O_POOL,
    O_PERPEER,
    O_USERPP,
    O_BASE,
    O_NETGBS,
    O_NETLAT
  };
  static const struct option lo[] = {{"topo", required_argument, 0, O_TOPO},
                                     {"coll", required_argument, 0, 'c'},
                                     {"sizes", required_argument, 0, O_SIZES},
                                     {"minbytes", required_argument, 0, 'b'},
                                     {"maxbytes", required_argument, 0, 'e'},
                                     {"stepfactor", required_argument, 0, 'f'},
                                     {"route", required_argument, 0, O_ROUTE},
                                     {"depth", required_argument, 0, O_DEPTH},
                                     {"dtype", required_argument, 0, O_DTYPE},
                                     {"op", required_argument, 0, O_OP},
                                     {"plot", required_argument, 0, O_PLOT},
                                     {"steps", no_argument, 0, O_STEPS},
                                     {"print-topo", no_argument, 0, O_PRINT},
                                     {"help", no_argument, 0, 'h'},
                                     {"vs-seed", no_argument, 0, O_VSSEED},
                                     {"nodes", required_argument, 0, O_NODES},
                                     {"net", required_argument, 0, O_NET},
                                     {"root", required_argument, 0, O_ROOT},
                                     {"pool", required_argument, 0, O_POOL},
                                     {"per-peer", required_argument, 0, O_PERPEER},
                                     {"user-per-peer", required_argument, 0, O_USERPP},
                                     {"base", required_argument, 0, O_BASE},
                                     {"net-gbs", required_argument, 0, O_NETGBS},
                                     {"net-lat-us", required_argument, 0, O_NETLAT},
                                     {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "c:A:G:b:e:f:h", lo, NULL)) != -1) {
    switch (c) {
      case O_TOPO:
        o->topo = optarg;
        o->topoGiven = 1;
        break;
      case O_NODES:
        if (intArg("--nodes", optarg, 1, RELAY_TOPO_MAX_GPUS, &o->nodes)) return 1;
        break;
      case O_NETGBS:
      case O_NETLAT: {
        char* end;
        double v = strtod(optarg, &end);
        if (end == optarg || *end || !(v > 0) || !isfinite(v)) {
          fprintf(stderr, "relaycc-sim: --%s '%s': want a number > 0\n",
                  c == O_NETGBS ? "net-gbs" : "net-lat-us", optarg);
          return 1;
        }
        if (c == O_NETGBS) o->netGbs = v;
        else o->netLatUs = v;
        break;
      }
      case O_NET: o->net = optarg; break;
      case O_ROOT:
        if (intArg("--root", optarg, 0, RELAY_TOPO_MAX_GPUS - 1, &o->root)) return 1;
        break;
      case O_POOL:
        if (intArg("--pool", optarg, 1, 64, &o->pool)) return 1;
        break;
      case O_PERPEER:
        if (intArg("--per-peer", optarg, 1, 64, &o->perPeer)) return 1;
        break;
      case O_USERPP:
        if (intArg("--user-per-peer", optarg, 1, 64, &o->userPerPeer)) return 1;
        break;
      case O_BASE:
        if (strcmp(optarg, "schedule") == 0) o->scheduleBase = 1;
        else if (strcmp(optarg, "node-major") == 0) o->scheduleBase = 0;
        else {
          fprintf(stderr, "relaycc-sim: --base '%s': want node-major or schedule\n", optarg);
          return 1;
        }
        break;
      case 'c': coll = optarg; break;
      case 'A':
        if (intArg("-A", optarg, 1, RELAY_TOPO_MAX_GPUS, &o->A)) return 1;
        break;
      case 'G':
        if (intArg("-G", optarg, 1, RELAY_TOPO_MAX_GPUS, &o->G)) return 1;
        break;
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
        o->routeGiven = 1;
        if (relayParseRoute(optarg, &o->route)) {
          fprintf(stderr, "relaycc-sim: --route '%s': want direct, relay, oneshot or auto\n", optarg);
          return 1;
        }
        break;
      case O_DEPTH:
        if (intArg("--depth", optarg, 1, 1024, &o->depth)) return 1;
        break;
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
    for (int i = 0; i < RELAY_NUM_LAYOUT_COLLS; i++) o->colls[o->nColls++] = i;
  } else {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", coll);
    int nRooted = 0;
    for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
      relayCollective_t cc;
      if (relayParseCollAll(t, &cc) || o->nColls == relayNumCollectives) {
        fprintf(stderr,
                "relaycc-sim: -c '%s': want allgather, reducescatter, allreduce, alltoall, broadcast, "
                "reduce, scatter, gather, a comma list of them, or all\n",
                coll);
        return 1;
      }
      nRooted += relayCollRankSet(cc); /* broadcast, reduce: a layout, root at position 0 of each group */
      o->colls[o->nColls++] = cc;
    }
    if (nRooted && nRooted != o->nColls) {
      fprintf(stderr,
              "relaycc-sim: -c '%s': scatter and gather run on a network model; list them apart from "
              "the layout collectives\n",
              coll);
      return 1;
    }
    o->rooted = nRooted > 0;
  }
  if (!o->rooted && (o->net || o->pool || o->perPeer || o->userPerPeer || o->root)) {
    fprintf(stderr,
            "relaycc-sim: --net, --root, --pool, --per-peer and --user-per-peer go with -c "
            "scatter or gather\n");
    return 1;
  }
  if ((o->netGbs || o->netLatUs) && (o->rooted || o->nodes < 2)) {
    fprintf(stderr,
            "relaycc-sim: --net-gbs and --net-lat-us go with --nodes N >= 2 and a layout collective\n");
    return 1;
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
  } else if (o->rooted) {
    /* The seed's scatter sweep, 16 MB to 16 GB of the root's data. */
    for (unsigned long long b = 16 * MB; b <= 16384 * MB; b *= 4) o->sizes[o->nSizes++] = b;
  } else {
    for (size_t i = 0; i < sizeof kDefaultSizes / sizeof kDefaultSizes[0]; i++)
      o->sizes[o->nSizes++] = kDefaultSizes[i];
  }
  return 0;
}

/* ---- scatter and gather on a network model ------------------------------ */

enum { RULE_NONE = 0, RULE_FIRST = 1, RULE_SEED = 2, NUM_RULES = 3 };
static const char* const kRuleNames[NUM_RULES] = {"per-peer", "first", "rule"};
static const char* const kRuleWhat[NUM_RULES] = {
    "no rule: the per-peer count (RCCL develop)",
    "first version of the fix (#13468): 1 part when the flows overflow the pool",
    "the seed's rule (#13528): the largest power of two that fits the pool"};

/* Parts per peer a rule gives a scatter on comm c. */
static int ruleParts(int rule, const p2pComm* c) {
  if (rule == RULE_NONE) return c->perPeer;
  if (rule == RULE_FIRST)
    return c->nNodes > 1 && !c->perPeerUserSet && (long long)(c->nRanks - 1) * c->perPeer > c->pool
               ? 1
               : c->perPeer;
  return p2pTaskParts(c, P2P_OP_SCATTER);
}

/* One rooted call: every comm rank in the set, root's blocks of `count`. */
static relayResult_t rootedSim(const simOpts* o, const struct relayTopo* topo, relayCollective_t coll,
                               const p2pComm* pc, int parts, size_t count, relaySimResult* sr) {
  int n = topo->nGPUs;
  int ranks[RELAY_TOPO_MAX_GPUS];
  size_t counts[RELAY_TOPO_MAX_GPUS];
  for (int i = 0; i < n; i++) ranks[i] = i, counts[i] = count;
  planKey k = planKeyInit(coll, n, 1, n, ranks, counts, o->dtype);
  k.op = relaySum;
  k.route = relayRouteDirect; /* the only schedule a rooted call has */
  k.depth = 1;
  k.root = o->root;
  relayPlan* plan = NULL;
  relayResult_t res = relayPlanBuild(&k, &plan);
  if (res != relaySuccess) return relaySetError(NULL, res, "no %s plan for %d ranks", relayCollName(coll), n);
  relaySimP2p p2p;
  memset(&p2p, 0, sizeof p2p);
  p2p.comm = *pc;
  p2p.parts = parts;
  p2p.scheduleBase = o->scheduleBase;
  res = relaySimRunP2p(plan, topo, &p2p, sr);
  relayPlanFree(plan);
  return res;
}

/* "2211..": flows per channel of the pool, '.' for none, '+' above 9. */
static void occupancyMap(const int* flows, int pool, int rank, char* buf, size_t len) {
  size_t at = 0;
  for (int c = 0; c < pool && at + 1 < len; c++) {
    int f = flows[(size_t)rank * P2P_MAX_CHANNELS + (size_t)c];
    buf[at++] = f == 0 ? '.' : f > 9 ? '+' : (char)('0' + f);
  }
  buf[at] = 0;
}

static int runRooted(const simOpts* o) {
  const char* net = o->net ? o->net : "mi355x-ainic";
  int nodes = o->nodes ? o->nodes : 1;
  if (o->topoGiven)
    fprintf(stderr, "relaycc-sim: --topo is ignored for scatter and gather (--net %s)\n", net);
  struct relayTopo* topo = NULL;
  if (relayTopoNetPreset(net, nodes, &topo) != relaySuccess) {
    fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
    return 2;
  }
  int n = topo->nGPUs, G = n / nodes, rc = 0;
  if (o->root >= n) {
    fprintf(stderr, "relaycc-sim: --root %d: the model has %d ranks\n", o->root, n);
    relayTopoFree(topo);
    return 2;
  }
  p2pComm pc;
  relayResult_t res = relaySimP2pComm(topo, o->userPerPeer, &pc);
  if (res == relaySuccess && (o->pool || o->perPeer)) {
    char err[256];
    int pool = o->pool ? o->pool : pc.pool, pp = o->perPeer ? o->perPeer : pc.perPeer;
    if (pp > pool) pp = pool;
    res = p2pCommSet(nodes, G, pool, pp, o->userPerPeer, &pc, err, sizeof err);
    if (res != relaySuccess) relaySetError(NULL, res, "--pool %d --per-peer %d: %s", pool, pp, err);
  }
  if (res != relaySuccess) {
    fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
    relayTopoFree(topo);
    return 2;
  }
  size_t es = relayTypeSize(o->dtype);
  char netDesc[96] = "";
  if (nodes > 1)
    snprintf(netDesc, sizeof netDesc, ", %d NICs of %g GB/s per node%s", topo->nicsPerNode, topo->nicBw / 1e9,
             topo->pxn ? " (PXN)" : "");
  printf(
      "# relaycc-sim: %s: %d node%s x %d GPUs (%d ranks)%s, channels of %g GB/s (shared by 2+ flows: x%g)\n",
      topo->name, nodes, nodes > 1 ? "s" : "", G, n, netDesc, topo->chanBw / 1e9,
      topo->chanShare > 0 ? topo->chanShare : 1.0);
  printf(
      "# P2P pool %d channels, %d parts per peer%s; root %d, %s, %s base; predicted times (model: topo.c)\n",
      pc.pool, pc.perPeer, pc.perPeerUserSet ? " (user-set)" : "", o->root, relayTypeName(o->dtype),
      o->scheduleBase ? "schedule-round" : "node-major scatter");
  for (int ci = 0; ci < o->nColls; ci++) {
    relayCollective_t coll = (relayCollective_t)o->colls[ci];
    int scatter = relayCollSendsBlocks(coll);
    /* Gather has no rule of its own: every rule gives it the per-peer count. */
    int rules[NUM_RULES], nRules = 0, parts[NUM_RULES];
    if (scatter) {
      for (int r = 0; r < NUM_RULES; r++) rules[nRules++] = r;
    } else {
      rules[nRules++] = RULE_SEED;
    }
    for (int i = 0; i < nRules; i++)
      parts[i] = scatter ? ruleParts(rules[i], &pc) : p2pTaskParts(&pc, P2P_OP_GATHER);
    printf(
        "\n%s %s root %d, %d ranks (%d peers): channel occupancy at the root (flows per channel of the "
        "pool)\n",
        relayCollName(coll), scatter ? "from" : "to", o->root, n, n - 1);
    /* Occupancy at the largest size: every part non-empty. */
    size_t bigCount = (size_t)(o->sizes[o->nSizes - 1] / (unsigned long long)n / es);
    for (int i = 0; i < nRules; i++) {
      relaySimResult sr;
      res = rootedSim(o, topo, coll, &pc, scatter ? parts[i] : 0, bigCount ? bigCount : 1, &sr);
      if (res != relaySuccess) {
        fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
        relaySimResultFree(&sr);
        rc = 1;
        continue;
      }
      /* The root's side: what it sends (scatter) or receives (gather). */
      const int* occ = scatter ? sr.chanFlows : sr.chanFlowsIn;
      int flows = 0, used = 0, most = 0;
      for (int c = 0; c < sr.poolSize; c++) {
        int f = occ[(size_t)o->root * P2P_MAX_CHANNELS + (size_t)c];
        flows += f;
        used += f > 0;
        if (f > most) most = f;
      }
      char map[P2P_MAX_CHANNELS + 1];
      occupancyMap(occ, sr.poolSize, o->root, map, sizeof map);
      printf("  %-8s %d part%s per peer: %3d flows on %2d of %2d channels, at most %d per channel  [%s]\n",
             kRuleNames[rules[i]], parts[i], parts[i] == 1 ? " " : "s", flows, used, sr.poolSize, most, map);
      relaySimResultFree(&sr);
    }
    if (scatter)
      for (int i = 0; i < nRules; i++) printf("  %-8s = %s\n", kRuleNames[rules[i]], kRuleWhat[rules[i]]);
    printf("\n%10s |", "size");
    for (int i = 0; i < nRules; i++) printf(" %8s(ms) busbw |", kRuleNames[rules[i]]);
    if (scatter) printf(" rule/per-peer first/per-peer");
    printf("\n");
    for (int si = 0; si < o->nSizes; si++) {
      char label[32];
      sizeLabel(o->sizes[si], label, sizeof label);
      /* As nccl-tests: count = size / n elements per rank, rounded down. */
      unsigned long long count = o->sizes[si] / (unsigned long long)n / es, bytes = count * n * es;
      if (count == 0) {
        printf("%10s | N/A: less than one element per rank\n", label);
        continue;
      }
      double t[NUM_RULES];
      printf("%10s |", label);
      for (int i = 0; i < nRules; i++) {
        relaySimResult sr;
        res = rootedSim(o, topo, coll, &pc, scatter ? parts[i] : 0, (size_t)count, &sr);
        t[i] = res == relaySuccess ? sr.totalS : 0;
        relaySimResultFree(&sr);
        if (res != relaySuccess) {
          printf(" %14s |", "error");
          rc = 1;
          continue;
        }
        /* nccl-tests' busbw for scatter and gather: size / time x (n-1)/n. */
        printf(" %12.3f %5.0f |", t[i] * 1e3, (double)bytes / t[i] / 1e9 * (n - 1) / n);
      }
      if (scatter && t[RULE_NONE] > 0)
        printf(" %12.2f %12.2f", t[RULE_SEED] / t[RULE_NONE], t[RULE_FIRST] / t[RULE_NONE]);
      printf("\n");
    }
  }
  relayTopoFree(topo);
  return rc;
}

typedef struct {
  int ok;
  double base, relay; /* seconds */
  int route, depth, fellBack;
  int failed; /* an error, not just a size the collective cannot split */
  const char* why;
} row;

/* One size of one collective: the baseline and relaycc's plan on the model. */
static row simulate(const simOpts* o, const struct relayTopo* topo, relayCollective_t coll,
                    unsigned long long bytes, int* ranks, size_t* counts, int showSteps) {
  row r;
  memset(&r, 0, sizeof r);
  size_t es = relayTypeSize(o->dtype);
  unsigned long long elems = bytes / es;
  int perActive = relayCollSendsBlocks(coll);
  if (bytes % es || elems == 0 || (perActive && elems % (unsigned long long)o->A)) {
    r.why = "size not a multiple of the element size (times A)";
    return r;
  }
  for (int g = 0; g < o->G; g++) counts[g] = (size_t)(perActive ? elems / (unsigned long long)o->A : elems);
  planKey k = planKeyInit(coll, topo->nGPUs, o->G, o->A, ranks, counts, o->dtype);
  k.op = o->op;
  int route = o->route, depth = o->depth ? o->depth : 1;
  if (route == relayRouteAuto) {
    int d;
    /* The transport's capabilities: the CPU model is shm's, whose one-shot and bandwidth route have the
     * rooted form (broadcast, reduce); the GPU kernels' have not yet. */
    unsigned caps = RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_BW;
    if (!strcmp(topo->name, "cpu")) caps |= RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW_ROOTED;
    relayRouteChoose(&k, topo, (int)caps, &route, &d);
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
  printf(
      "# relaycc-sim --vs-seed: model on topology %s against the seed's measured tables (MI350X, bf16,\n"
      "# single group, best-of-100); err = model / measured - 1\n",
      topo->name);
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
        printf("%10s | %10.3f %6.3f | %11.3f %6.3f %+5.0f%% | %12.2fx %5.2fx\n", label, base,
               c.modelBaseMs[k], t->relayMs[k], c.modelRelayMs[k],
               100 * (c.modelRelayMs[k] / t->relayMs[k] - 1), t->speedup[k],
               c.modelBaseMs[k] / c.modelRelayMs[k]);
      } else {
        printf("%10s | %10s %6.3f | %11s %6.3f %6s | %12.2fx %5.2fx\n", label, "-", c.modelBaseMs[k], "-",
               c.modelRelayMs[k], "", t->speedup[k], c.modelBaseMs[k] / c.modelRelayMs[k]);
      }
    }
    if (!c.n) {
      printf("  speedup: mean |err| %.1f%%, max %.1f%% (the seed gave speedups only)\n",
             100 * c.meanSpeedupErr, 100 * c.maxSpeedupErr);
      continue;
    }
    printf(
        "  relay time: mean |err| %.1f%%, max %.1f%%, bias %+.1f%%; RCCL time: mean |err| %.1f%%, max "
        "%.1f%%;\n"
        "  speedup: mean |err| %.1f%%, max %.1f%%\n",
        100 * c.meanRelayErr, 100 * c.maxRelayErr, 100 * c.biasRelayErr, 100 * c.meanBaseErr,
        100 * c.maxBaseErr, 100 * c.meanSpeedupErr, 100 * c.maxSpeedupErr);
  }
  return failed;
}

/* ---- layout collectives on several nodes -------------------------------- */

/* One size: the hierarchical plan with direct and with relay legs inside the
 * nodes (the faster is printed), against NCCL's flat collective over all the
 * group's ranks on the same network model (relaySimSubCollSeconds). */
static int runNodes(const simOpts* o) {
  struct relayTopo *node = NULL, *topo = NULL;
  if (relayTopoLoad(o->topo, &node) != relaySuccess) {
    fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
    return 2;
  }
  int G = node->nGPUs, N = o->nodes;
  double netBw = (o->netGbs ? o->netGbs : RELAY_TOPO_NET_GPU_BW / 1e9) * 1e9;
  /* One NIC per GPU of the per-GPU bandwidth, without PXN: each rail GPU on its own NIC. */
  relayResult_t res = relayTopoMultiNode(node, N, G, netBw, 0, &topo);
  relayTopoFree(node);
  if (res != relaySuccess) {
    fprintf(stderr, "relaycc-sim: --nodes %d: %s\n", N, relayGetLastError(NULL));
    return 2;
  }
  topo->netLatS = o->netLatUs ? o->netLatUs * 1e-6 : RELAY_TOPO_NET_LAT_S;
  if (o->G != 1 || o->A > G) {
    fprintf(stderr, "relaycc-sim: --nodes: one group (-G 1) of -A <= %d actives per node\n", G);
    relayTopoFree(topo);
    return 2;
  }
  int n = topo->nGPUs, A = o->A * N;
  int* nodeOf = malloc((size_t)n * sizeof(int));
  int* ranks = malloc((size_t)A * sizeof(int));
  if (!nodeOf || !ranks) {
    free(nodeOf);
    free(ranks);
    relayTopoFree(topo);
    return 2;
  }
  for (int r = 0; r < n; r++) nodeOf[r] = r / G;
  for (int v = 0; v < N; v++)
    for (int l = 0; l < o->A; l++) ranks[v * o->A + l] = v * G + l;
  printf("# relaycc-sim: %d nodes x %s (%d GPUs each), network %.0f GB/s per GPU, %.1f us per step, %s\n", N,
         o->topo, G, netBw / 1e9, topo->netLatS * 1e6, relayTypeName(o->dtype));
  printf(
      "# one group of %d actives per node (%d ranks); flat = NCCL's ring over all %d (network model, "
      "docs/model.md); per-active-rank input\n",
      o->A, A, A);
  int failed = 0;
  size_t es = relayTypeSize(o->dtype);
  for (int ci = 0; ci < o->nColls; ci++) {
    relayCollective_t coll = (relayCollective_t)o->colls[ci];
    printf("\n%s, %d nodes x %d actives\n", relayCollName(coll), N, o->A);
    printf("  Msg Size |   flat(ms)   hier(ms)   Speedup | node legs (the faster of direct and relay%s)\n",
           o->routeGiven ? ", as --route says" : "");
    for (int si = 0; si < o->nSizes; si++) {
      char label[32];
      sizeLabel(o->sizes[si], label, sizeof label);
      unsigned long long elems = o->sizes[si] / es;
      int blocks = relayCollSendsBlocks(coll);
      if (elems == 0 || o->sizes[si] % es || (blocks && elems % (unsigned long long)A)) {
        printf("%10s | %10s %10s %9s | size not a multiple of the element size (times %d)\n", label, "N/A",
               "N/A", "N/A", A);
        continue;
      }
      size_t count = (size_t)(blocks ? elems / (unsigned long long)A : elems);
      double flat =
          topo->callS + topo->boundaryS + relaySimSubCollSeconds(topo, coll, ranks, A, (double)count * es);
      double best = -1;
      int bestRoute = relayRouteDirect;
      const int routes[] = {relayRouteDirect, relayRouteRelay};
      for (int ri = 0; ri < 2; ri++) {
        if (o->routeGiven && o->route != relayRouteAuto && o->route != routes[ri]) continue;
        planKey k = planKeyInit(coll, n, 1, A, ranks, &count, o->dtype);
        k.op = o->op;
        k.route = routes[ri];
        k.depth = o->depth ? o->depth : 1;
        k.nodeOf = nodeOf;
        relayPlan* plan = NULL;
        if (relayPlanBuild(&k, &plan) != relaySuccess) continue;
        relaySimResult sr;
        if (relaySimRun(plan, topo, &sr) == relaySuccess && (best < 0 || sr.totalS < best)) {
          best = sr.totalS;
          bestRoute = routes[ri];
        }
        relaySimResultFree(&sr);
        relayPlanFree(plan);
      }
      if (best < 0) {
        printf("%10s | %10.3f %10s %9s | no plan: %s\n", label, flat * 1e3, "N/A", "N/A",
               relayGetLastError(NULL));
        failed = 1;
        continue;
      }
      printf("%10s | %10.3f %10.3f %8.2fx | %s\n", label, flat * 1e3, best * 1e3, flat / best,
             relayRouteName(bestRoute));
    }
  }
  free(nodeOf);
  free(ranks);
  relayTopoFree(topo);
  return failed;
}

static int haveGnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

int main(int argc, char** argv) {
  simOpts o;
  if (parseArgs(argc, argv, &o)) return 2;
  if (o.rooted) return runRooted(&o);
  if (o.nodes > 1) return runNodes(&o);
  struct relayTopo* topo = NULL;
  if (relayTopoLoad(o.topo, &topo) != relaySuccess) {
    fprintf(stderr, "relaycc-sim: %s\n", relayGetLastError(NULL));
    return 2;
  }
  if (!strcmp(topo->name, "cpu")) {
    /* As a shm comm's model (core/init.c): the one-copy floors from the settings (environment, else the
     * defaults), so the router weighs the bandwidth route's one-copy path as a call's would. */
    relayParams p;
    int bad = -1;
    char why[160];
    if (relayParamsResolve(&p, NULL, &bad, why, sizeof why) == relaySuccess) {
      topo->oneCopyBytes = (double)p.v[RELAY_P_SHM_CMA_BYTES];
      topo->oneCopyPairBytes = (double)p.v[RELAY_P_SHM_CMA_PAIR_BYTES];
      topo->oneCopyRootedBytes = (double)p.v[RELAY_P_SHM_CMA_ROOTED_BYTES];
    }
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

  static row rows[relayNumCollectives][MAX_SIZES];
  int anyFallback = 0, anyFailed = 0;
  printf("# relaycc-sim: topology %s (%d GPUs, %s), A=%d, G=%d (%s), %s, per-active-rank input\n", topo->name,
         topo->nGPUs, topoKind(topo), o.A, o.G, o.G > 1 ? "fused" : "independent", relayTypeName(o.dtype));
  printf("# predicted times; baseline = NCCL/RCCL on the %d active ranks only (docs/model.md)\n", o.A);
  for (int ci = 0; ci < o.nColls; ci++) {
    relayCollective_t coll = (relayCollective_t)o.colls[ci];
    printf("\n%s-group %s, A=%d (model: %s)\n", o.G > 1 ? "Fused" : "Single", relayCollName(coll), o.A,
           topo->name);
    if (o.G > 1) printf("%d groups in one call vs %d concurrent %d-rank baseline calls\n", o.G, o.G, o.A);
    else
      printf("speedup = %d-rank baseline with the other %d ranks idle / relaycc\n", o.A, topo->nGPUs - o.A);
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
      printf("%10s | %10.3f %10.3f %8.2fx | %-8s %5d\n", label, r.base * 1e3, r.relay * 1e3, r.base / r.relay,
             rname, r.depth);
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
        fprintf(f, "# %s\n", relayCollName((relayCollective_t)o.colls[ci]));
        for (int si = 0; si < o.nSizes; si++)
          if (rows[ci][si].ok)
            fprintf(f, "%llu %.6g %.6g %.6g\n", o.sizes[si], rows[ci][si].base * 1e3,
                    rows[ci][si].relay * 1e3, rows[ci][si].base / rows[ci][si].relay);
        fprintf(f, "\n\n");
      }
      fclose(f);
      if (!haveGnuplot()) {
        printf(
            "\nrelaycc-sim: gnuplot not found: no plot drawn; the data is in %s "
            "(columns: bytes, baseline ms, relaycc ms, speedup; one block per collective)\n",
            dat);
      } else {
        char gp[1100];
        snprintf(gp, sizeof gp, "%s.gp", o.plot);
        FILE* g = fopen(gp, "w");
        if (g) {
          fprintf(g, "set terminal png size 900,560\nset output '%s'\n", o.plot);
          fprintf(g,
                  "set logscale x 2\nset xlabel 'per-active-rank input'\nset ylabel 'speedup (predicted)'\n");
          fprintf(g,
                  "set xtics (\"1K\" 1024, \"16K\" 16384, \"256K\" 262144, \"4M\" 4194304, "
                  "\"64M\" 67108864, \"1G\" 1073741824, \"16G\" 17179869184.)\n");
          fprintf(g, "set title 'relaycc over the %d-rank baseline on %s (A=%d, G=%d, %s)'\n", o.A,
                  topo->name, o.A, o.G, relayTypeName(o.dtype));
          fprintf(g, "set grid\nset key left top\nset yrange [0:*]\n");
          fprintf(g, "plot 1 with lines dt 2 lc rgb 'gray' notitle");
          for (int ci = 0; ci < o.nColls; ci++)
            fprintf(g, ", '%s' index %d using 1:4 with linespoints title '%s'", dat, ci,
                    relayCollName((relayCollective_t)o.colls[ci]));
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
