/* relaycc-bench arguments: parsed and checked in the parent, before any rank
 * is forked, so an impossible request fails in milliseconds with the
 * argument named instead of as a hang or a rank's error. */
#include <ctype.h>
#include <limits.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "comm/common.h"

/* Defaults: the sweep of `make run`. 6 sizes x 4 collectives x ~40 calls
 * each finishes in seconds on 2 cores with 8 rank processes. */
#define DEF_MIN_BYTES (4ull << 10)
#define DEF_MAX_BYTES (4ull << 20)
#define DEF_FACTOR 4
#define DEF_ITERS 20
#define DEF_WARMUP 5
#define DEF_REPS 3
#define DEF_TIMEOUT_SEC 900

static int fail(char* err, size_t len, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char* err, size_t len, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return 1;
}

void benchUsage(FILE* f) {
  fprintf(f,
          "usage: relaycc-bench [options]\n"
          "  relaycc collectives on a layout of active ranks, timed and checked, one\n"
          "  process per rank (spawned here), in nccl-tests style tables.\n"
          "\n"
          "  --backend B       shm | nccl | auto (default auto: nccl when built in and a GPU\n"
          "                    is present, else shm)\n"
          "  --ranks N         processes / comm size (default 8 on shm, the GPU count on nccl)\n"
          "  -c, --coll C      allreduce | allgather | reducescatter | alltoall | all (these\n"
          "                    four), scatter | gather | broadcast | reduce | sendrecv |\n"
          "                    alltoallv, or a comma list (default all)\n"
          "                    sendrecv: each group a pair (-A 2): its first rank sends to its\n"
          "                    second (--layout 2,5: rank 2 to rank 5), timed as the receiver\n"
          "                    sees it; on nccl against ncclSend/ncclRecv\n"
          "                    alltoallv: one group, active i sends base x (1 + (i + 2j) %% 3)\n"
          "                    elements to active j, base = size / (A x element size); the size\n"
          "                    column is the busiest active's receive total; on nccl against a\n"
          "                    group of ncclSend/ncclRecv\n"
          "  --root R          the root of scatter and gather (default 0); their rank set is\n"
          "                    the layout's ranks, size = bytes of each member's block\n"
          "  --root-index I    the root of broadcast and reduce: its position in each group\n"
          "                    (default 0; fused groups each have theirs); on nccl against\n"
          "                    ncclBroadcast/ncclReduce\n"
          "  -A N              active ranks per group (default 2)\n"
          "  -G N              groups (default 1; > 1 is a fused call)\n"
          "  --layout LIST     comm ranks of the groups, group-major (default 0..A*G-1)\n"
          "  --nodes N         the ranks as N nodes of ranks/N each, node-major (RELAYCC_NODE_ID\n"
          "                    per rank): groups spanning nodes run hierarchically\n"
          "  -b, --minbytes S  smallest size (default 4K)   sizes are bytes of per-active-rank\n"
          "  -e, --maxbytes S  largest size (default 4M)    input; suffixes K, M, G (1024^k)\n"
          "  -f, --stepfactor F  multiply by F (default 4)\n"
          "  -i, --stepbytes S   or add S\n"
          "  --sizes LIST      explicit sizes, e.g. 4K,1M,3000 (instead of -b/-e/-f/-i)\n"
          "  -n, --iters N     timed iterations per repetition (default %d)\n"
          "  -w, --warmup N    warm-up iterations (default %d)\n"
          "  -r, --reps N      repetitions (default %d); spread = max/min of their minima\n"
          "  -d, --dtype T     int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double\n"
          "                    (default float)\n"
          "  -o, --op OP       sum | prod | max | min | avg (default sum)\n"
          "  --route R         auto | direct | relay | oneshot (default: RELAYCC_ROUTE, else auto;\n"
          "                    sendrecv and alltoallv always run direct)\n"
          "  --depth T         force the relay pipeline depth (0 = model; default RELAYCC_DEPTH)\n"
          "  --check 0|1       check every output element against a serial reference (default 1)\n"
          "  --inplace         use the in-place forms (all-to-all and all-to-all-v in place are\n"
          "                    rejected by relaycc and skipped, as is sendrecv)\n"
          "  --sequential      time all of relaycc's repetitions, then all of the baseline's\n"
          "                    (default: the two take turns within each repetition)\n"
          "  --graph           time replays of a captured CUDA graph (nccl backend): K calls per\n"
          "                    graph, time = replay / K (K = RELAYCC_BENCH_GRAPH_CALLS, default 10)\n"
          "  --json FILE       write the rows as JSON\n"
          "  --timeout S       fail the run when it takes longer (default %d, 0 = none)\n"
          "  -h, --help\n"
          "  test hooks: --debug-kill R (rank R dies mid-run), --debug-corrupt R (rank R damages\n"
          "              one output element before each check)\n"
          "\n"
          "Exit status: 0 when every rank finished and #wrong is 0 everywhere.\n",
          DEF_ITERS, DEF_WARMUP, DEF_REPS, DEF_TIMEOUT_SEC);
}

/* Names: the library's parsers (nccl-tests' spellings and the usual
 * aliases: float, half, bf16, ar, all_reduce, one-shot, ...). */
static int parseType(const char* s, relayDataType_t* out) { return relayParseType(s, out) != 0; }
static int parseOp(const char* s, relayRedOp_t* out) { return relayParseOp(s, out) != 0; }
static int parseRoute(const char* s, int* out) { return relayParseRoute(s, out) != 0; }
/* The planned collectives by the library's names; the point-to-point copy as sendrecv (also send/recv,
 * p2p: relayCollectiveSend stands for the pair's send and receive); all-to-all-v by its row's names. */
static int parseColl(const char* s, relayCollective_t* out) {
  if (relayParseCollAll(s, out) == 0) return 0;
  static const char* const copy[] = {"sendrecv", "send/recv", "send_recv", "p2p", "send", "recv"};
  for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++)
    if (!strcasecmp(s, copy[i])) return *out = relayCollectiveSend, 0;
  const relayCollRow* v = relayCollRowOf(relayCollectiveAllToAllV);
  size_t n = strlen(s);
  for (const char* w = v->aliases; n && *w;) { /* the row's name, then its space-separated aliases */
    size_t wl = strcspn(w, " ");
    if (wl == n && !strncasecmp(w, s, n)) return *out = relayCollectiveAllToAllV, 0;
    w += wl + (w[wl] == ' ');
  }
  if (!strcasecmp(s, v->name)) return *out = relayCollectiveAllToAllV, 0;
  return 1;
}

/* A whole decimal integer; rejects junk, overflow and an empty string. */
static int parseLong(const char* s, long* out) {
  long long v;
  if (relayParseInt(s, LONG_MIN, LONG_MAX, &v)) return 1;
  *out = (long)v;
  return 0;
}

enum {
  OPT_BACKEND = 1000,
  OPT_RANKS,
  OPT_SIZES,
  OPT_ROUTE,
  OPT_DEPTH,
  OPT_CHECK,
  OPT_JSON,
  OPT_LAYOUT,
  OPT_INPLACE,
  OPT_GRAPH,
  OPT_SEQUENTIAL,
  OPT_TIMEOUT,
  OPT_KILL,
  OPT_CORRUPT,
  OPT_ROOT,
  OPT_NODES,
  OPT_ROOT_INDEX,
};

static const struct option kLongOpts[] = {
    {"backend", required_argument, 0, OPT_BACKEND},
    {"ranks", required_argument, 0, OPT_RANKS},
    {"coll", required_argument, 0, 'c'},
    {"active", required_argument, 0, 'A'},
    {"groups", required_argument, 0, 'G'},
    {"minbytes", required_argument, 0, 'b'},
    {"maxbytes", required_argument, 0, 'e'},
    {"stepfactor", required_argument, 0, 'f'},
    {"stepbytes", required_argument, 0, 'i'},
    {"sizes", required_argument, 0, OPT_SIZES},
    {"iters", required_argument, 0, 'n'},
    {"warmup", required_argument, 0, 'w'},
    {"warmup_iters", required_argument, 0, 'w'},
    {"reps", required_argument, 0, 'r'},
    {"dtype", required_argument, 0, 'd'},
    {"datatype", required_argument, 0, 'd'},
    {"op", required_argument, 0, 'o'},
    {"route", required_argument, 0, OPT_ROUTE},
    {"depth", required_argument, 0, OPT_DEPTH},
    {"check", required_argument, 0, OPT_CHECK},
    {"json", required_argument, 0, OPT_JSON},
    {"layout", required_argument, 0, OPT_LAYOUT},
    {"inplace", no_argument, 0, OPT_INPLACE},
    {"graph", no_argument, 0, OPT_GRAPH},
    {"sequential", no_argument, 0, OPT_SEQUENTIAL},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"debug-kill", required_argument, 0, OPT_KILL},
    {"debug-corrupt", required_argument, 0, OPT_CORRUPT},
    {"root", required_argument, 0, OPT_ROOT},
    {"nodes", required_argument, 0, OPT_NODES},
    {"root-index", required_argument, 0, OPT_ROOT_INDEX},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* The spelling of the option being parsed, for messages ("-A", "--ranks"). */
static const char* optName(int c, int longIndex) {
  static char buf[64];
  if (longIndex >= 0) {
    snprintf(buf, sizeof buf, "--%s", kLongOpts[longIndex].name);
  } else {
    snprintf(buf, sizeof buf, "-%c", c);
  }
  return buf;
}

/* Integer option in [lo, hi]. */
static int intArg(const char* name, const char* s, long lo, long hi, int* out, char* err, size_t len) {
  long v;
  if (parseLong(s, &v)) return fail(err, len, "%s '%s': not an integer", name, s);
  if (v < lo || v > hi) return fail(err, len, "%s %ld: must be in [%ld, %ld]", name, v, lo, hi);
  *out = (int)v;
  return 0;
}

int benchParseArgs(int argc, char** argv, benchOpts* o, char* err, size_t len) {
  memset(o, 0, sizeof *o);
  o->backendName = "auto";
  o->nActive = 2;
  o->nGroups = 1;
  o->iters = DEF_ITERS;
  o->warmup = DEF_WARMUP;
  o->reps = DEF_REPS;
  o->dtype = relayFloat32;
  o->op = relaySum;
  o->route = -1;
  o->depth = -1;
  o->check = 1;
  o->timeoutSec = DEF_TIMEOUT_SEC;
  o->killRank = -1;
  o->corruptRank = -1;
  size_t used = 0;
  for (int i = 0; i < argc && used + 2 < sizeof o->cmdline; i++) {
    int n = snprintf(o->cmdline + used, sizeof o->cmdline - used, "%s%s", i ? " " : "", argv[i]);
    if (n < 0) break;
    used += (size_t)n;
    if (used >= sizeof o->cmdline) used = sizeof o->cmdline - 1;
  }

  uint64_t minB = DEF_MIN_BYTES, maxB = DEF_MAX_BYTES, stepB = 0;
  int factor = DEF_FACTOR;
  int haveB = 0, haveE = 0, haveF = 0, haveI = 0, haveSizes = 0, haveA = 0, haveG = 0;
  const char* layoutArg = NULL;
  const char* sizesArg = NULL;
  int collSeen[relayNumCollectives] = {0};

  opterr = 0; /* our messages name the argument and the reason */
  optind = 1;
  for (;;) {
    int li = -1;
    int c = getopt_long(argc, argv, ":c:A:G:b:e:f:i:n:w:r:d:o:h", kLongOpts, &li);
    if (c == -1) break;
    const char* name = optName(c, li);
    switch (c) {
      case OPT_BACKEND:
        if (strcmp(optarg, "shm") && strcmp(optarg, "nccl") && strcmp(optarg, "auto"))
          return fail(err, len, "--backend '%s': must be shm, nccl or auto", optarg);
        o->backendName = optarg;
        break;
      case OPT_RANKS:
        if (intArg(name, optarg, 1, BENCH_MAX_RANKS, &o->nranks, err, len)) return 1;
        o->ranksGiven = 1;
        break;
      case 'c': {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", optarg);
        char* save = NULL;
        int any = 0;
        for (char* t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
          any = 1;
          if (!strcasecmp(t, "all")) {
            static const relayCollective_t all[] = {relayCollectiveAllReduce, relayCollectiveAllGather,
                                                    relayCollectiveReduceScatter, relayCollectiveAllToAll};
            for (int k = 0; k < 4; k++)
              if (!collSeen[all[k]]) collSeen[all[k]] = 1, o->colls[o->nColls++] = all[k];
            continue;
          }
          relayCollective_t cl;
          if (parseColl(t, &cl))
            return fail(err, len,
                        "%s '%s': unknown collective (allreduce, allgather, reducescatter, alltoall, all, "
                        "scatter, gather, broadcast, reduce, sendrecv, alltoallv)",
                        name, t);
          if (!collSeen[cl]) collSeen[cl] = 1, o->colls[o->nColls++] = cl;
        }
        if (!any) return fail(err, len, "%s '%s': no collective named", name, optarg);
        break;
      }
      case 'A':
        if (intArg(name, optarg, -1000000, 1000000, &o->nActive, err, len)) return 1;
        if (o->nActive < 2)
          return fail(err, len, "-A %d: a collective needs at least 2 active ranks", o->nActive);
        haveA = 1;
        break;
      case 'G':
        if (intArg(name, optarg, -1000000, 1000000, &o->nGroups, err, len)) return 1;
        if (o->nGroups < 1) return fail(err, len, "-G %d: at least 1 group", o->nGroups);
        haveG = 1;
        break;
      case 'b':
      case 'e':
      case 'i': {
        uint64_t v;
        if (relayParseBytes(optarg, &v))
          return fail(err, len, "%s '%s': not a size in bytes (>= 0; suffixes K, M, G)", name, optarg);
        if (c == 'b') minB = v, haveB = 1;
        if (c == 'e') maxB = v, haveE = 1;
        if (c == 'i') {
          if (v == 0) return fail(err, len, "%s 0: the step must be > 0", name);
          stepB = v, haveI = 1;
        }
        break;
      }
      case 'f':
        if (intArg(name, optarg, 2, 1 << 20, &factor, err, len)) return 1;
        haveF = 1;
        break;
      case OPT_SIZES:
        sizesArg = optarg;
        haveSizes = 1;
        break;
      case 'n':
        if (intArg(name, optarg, 1, 100000000, &o->iters, err, len)) return 1;
        break;
      case 'w':
        if (intArg(name, optarg, 0, 100000000, &o->warmup, err, len)) return 1;
        break;
      case 'r':
        if (intArg(name, optarg, 1, 100000, &o->reps, err, len)) return 1;
        break;
      case 'd':
        if (parseType(optarg, &o->dtype))
          return fail(err, len,
                      "%s '%s': unknown datatype (int8 uint8 int32 uint32 int64 uint64 half bfloat16 "
                      "float double)",
                      name, optarg);
        break;
      case 'o':
        if (parseOp(optarg, &o->op))
          return fail(err, len, "%s '%s': unknown op (sum prod max min avg)", name, optarg);
        break;
      case OPT_ROUTE:
        if (parseRoute(optarg, &o->route))
          return fail(err, len, "--route '%s': unknown route (auto direct relay oneshot)", optarg);
        break;
      case OPT_DEPTH:
        if (intArg(name, optarg, 0, 4096, &o->depth, err, len)) return 1;
        break;
      case OPT_CHECK:
        if (intArg(name, optarg, 0, 1, &o->check, err, len)) return 1;
        break;
      case OPT_JSON:
        if (!*optarg) return fail(err, len, "--json: empty file name");
        o->jsonPath = optarg;
        break;
      case OPT_LAYOUT: layoutArg = optarg; break;
      case OPT_INPLACE: o->inplace = 1; break;
      case OPT_GRAPH: o->graph = 1; break;
      case OPT_SEQUENTIAL: o->sequential = 1; break;
      case OPT_TIMEOUT:
        if (intArg(name, optarg, 0, 1000000, &o->timeoutSec, err, len)) return 1;
        break;
      case OPT_KILL:
        if (intArg(name, optarg, 0, BENCH_MAX_RANKS - 1, &o->killRank, err, len)) return 1;
        break;
      case OPT_CORRUPT:
        if (intArg(name, optarg, 0, BENCH_MAX_RANKS - 1, &o->corruptRank, err, len)) return 1;
        break;
      case OPT_ROOT:
        if (intArg(name, optarg, 0, BENCH_MAX_RANKS - 1, &o->root, err, len)) return 1;
        break;
      case OPT_ROOT_INDEX:
        if (intArg(name, optarg, 0, BENCH_MAX_RANKS - 1, &o->rootIndex, err, len)) return 1;
        break;
      case OPT_NODES:
        if (intArg(name, optarg, 1, BENCH_MAX_RANKS, &o->nodes, err, len)) return 1;
        break;
      case 'h': benchUsage(stdout); return 2;
      case ':':
        if (optopt > 0 && optopt < 256) return fail(err, len, "-%c: missing value", optopt);
        return fail(err, len, "%s: missing value", argv[optind - 1]);
      case '?':
      default:
        if (optopt > 0 && optopt < 256) return fail(err, len, "-%c: unknown option (see --help)", optopt);
        return fail(err, len, "%s: unknown option, or a value it does not take (see --help)",
                    argv[optind - 1]);
    }
  }
  if (optind < argc) return fail(err, len, "'%s': unexpected argument (see --help)", argv[optind]);
  if ((long long)o->iters * o->reps > 100000000)
    return fail(err, len, "-n %d x -r %d: more than 1e8 timed iterations per size", o->iters, o->reps);

  if (o->nColls == 0) {
    static const relayCollective_t all[] = {relayCollectiveAllReduce, relayCollectiveAllGather,
                                            relayCollectiveReduceScatter, relayCollectiveAllToAll};
    for (int k = 0; k < 4; k++) o->colls[o->nColls++] = all[k];
  }

  /* Sizes. */
  if (haveSizes) {
    if (haveB || haveE || haveF || haveI)
      return fail(err, len, "--sizes: give either --sizes or -b/-e/-f/-i, not both");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", sizesArg);
    char* save = NULL;
    for (char* t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      uint64_t v;
      if (relayParseBytes(t, &v))
        return fail(err, len, "--sizes '%s': not a size in bytes (>= 0; suffixes K, M, G)", t);
      if (o->nSizes >= BENCH_MAX_SIZES) return fail(err, len, "--sizes: more than %d sizes", BENCH_MAX_SIZES);
      o->sizes[o->nSizes++] = v;
    }
    if (o->nSizes == 0) return fail(err, len, "--sizes '%s': no size given", sizesArg);
  } else {
    if (haveF && haveI) return fail(err, len, "-f and -i: give one step, a factor or a byte increment");
    /* One bound alone keeps the other sensible rather than failing. */
    if (haveB && !haveE && minB > maxB) maxB = minB;
    if (haveE && !haveB && minB > maxB) minB = maxB;
    if (minB > maxB)
      return fail(err, len, "-b %llu > -e %llu: the smallest size exceeds the largest",
                  (unsigned long long)minB, (unsigned long long)maxB);
    if (!haveI && minB == 0 && maxB > 0)
      return fail(err, len, "-b 0 with a factor never grows: use -i, or --sizes 0,...");
    for (uint64_t s = minB;;) {
      if (o->nSizes >= BENCH_MAX_SIZES)
        return fail(err, len, "-b/-e/-f/-i: more than %d sizes", BENCH_MAX_SIZES);
      o->sizes[o->nSizes++] = s;
      uint64_t next = haveI ? s + stepB : s * (uint64_t)factor;
      if (next <= s || next > maxB) break; /* also stops on overflow */
      s = next;
    }
  }

  /* Layout (rank range checked once nranks is known). */
  if (layoutArg) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", layoutArg);
    int n = 0;
    char* save = NULL;
    for (char* t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      long v;
      if (parseLong(t, &v)) return fail(err, len, "--layout '%s': '%s' is not a rank", layoutArg, t);
      if (n >= BENCH_MAX_RANKS) return fail(err, len, "--layout: more than %d ranks", BENCH_MAX_RANKS);
      if (v < 0 || v >= BENCH_MAX_RANKS) return fail(err, len, "--layout: rank %ld out of range", v);
      o->layout[n++] = (int)v;
    }
    if (n == 0) return fail(err, len, "--layout '%s': no rank given", layoutArg);
    /* A list alone implies the groups: its length over A. */
    if (!haveG && n % o->nActive == 0) o->nGroups = n / o->nActive;
    if (!haveA && !haveG && n % o->nActive) o->nActive = n, o->nGroups = 1;
    if (n != o->nActive * o->nGroups)
      return fail(err, len, "--layout has %d ranks: -A %d x -G %d needs %d", n, o->nActive, o->nGroups,
                  o->nActive * o->nGroups);
  } else {
    if ((long)o->nActive * o->nGroups > BENCH_MAX_RANKS)
      return fail(err, len, "-A %d x -G %d: more than %d ranks", o->nActive, o->nGroups, BENCH_MAX_RANKS);
    for (int i = 0; i < o->nActive * o->nGroups; i++) o->layout[i] = i;
  }
  return 0;
}

int benchCheckOpts(benchOpts* o, char* err, size_t len) {
  int n = o->nranks;
  if (n < 2) return fail(err, len, "--ranks %d: a comm needs at least 2 ranks", n);
  if (o->nActive > n) return fail(err, len, "-A %d: more active ranks than --ranks %d", o->nActive, n);
  if ((long)o->nActive * o->nGroups > n)
    return fail(err, len, "-A %d x -G %d = %d active ranks: more than --ranks %d", o->nActive, o->nGroups,
                o->nActive * o->nGroups, n);
  int seen[BENCH_MAX_RANKS] = {0};
  for (int i = 0; i < o->nActive * o->nGroups; i++) {
    int r = o->layout[i];
    if (r < 0 || r >= n) return fail(err, len, "--layout: rank %d out of range [0, %d)", r, n);
    if (seen[r]) return fail(err, len, "--layout: rank %d appears twice (a rank is active in one group)", r);
    seen[r] = 1;
  }
  if (o->killRank >= n) return fail(err, len, "--debug-kill %d: no such rank", o->killRank);
  if (o->corruptRank >= n) return fail(err, len, "--debug-corrupt %d: no such rank", o->corruptRank);
  if (o->root >= n) return fail(err, len, "--root %d: no such rank (--ranks %d)", o->root, n);
  if (o->rootIndex >= o->nActive)
    return fail(err, len, "--root-index %d: must be < A = %d (the root's position in each group)",
                o->rootIndex, o->nActive);
  for (int i = 0; i < o->nColls; i++) {
    if (o->colls[i] == relayCollectiveSend && o->nActive != 2)
      return fail(err, len,
                  "-c sendrecv with -A %d: each group is a pair (-A 2), its first rank sends to its second",
                  o->nActive);
    if (o->colls[i] == relayCollectiveAllToAllV && o->nGroups != 1)
      return fail(err, len, "-c alltoallv with -G %d: relayAllToAllv runs one group (-G 1)", o->nGroups);
  }
  if (o->nodes && n % o->nodes != 0)
    return fail(err, len, "--nodes %d: must divide --ranks %d (nodes of equal size)", o->nodes, n);
  return 0;
}
