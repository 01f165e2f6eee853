/*
 * Two nodes of four on one host's GPUs (8 ranks; on one H200 all eight share it): every rank says its node,
 * RELAYCC_NODE_ID = rank / 4, before init (or the row's RELAYCC_SHM_NODES=2, the same split as a test hook
 * every rank agrees on), so the comm spans two "nodes" and the hierarchical plans (src/plan/plan_hier.c)
 * run: legs inside each node as relaycc plans of the comm's route, the leg across nodes as NCCL's own
 * collective on rail sub-communicators.
 *
 * Every collective (all-gather, reduce-scatter, all-reduce, all-to-all, scatter, gather) on layouts:
 * all eight active (4 per node), A = 4 spanning both nodes (0,1,4,5: 2 per node, helpers 2,3,6,7), fused
 * quads spanning both nodes, fused pairs spanning both nodes (r, r + 4), fused quads one per node (each
 * group inside its node), A = 4 with unequal actives per node (0,1,2,4: NCCL's own collective over the
 * group) and A = 4 spanning in scrambled order (5,1,0,6); scatter and gather on the single-group sets
 * with a root in the set and one outside it; fp32 and bf16, sum, counts 1, 7, 1000, 2^20+3, in place and
 * out of place, against the serial reference of colls_check.h.
 *
 * Asserted besides the data: the comm sees 2 nodes, rank r on node r / 4, 4 ranks a node; the route each
 * call ran (relayCommLastRoute) is never one that maps peers' memory (one-shot, bw: README "Across nodes"),
 * and a forced route ran as itself or as direct (its fallback). relaycc has no route value of its own for
 * a hierarchical plan (its legs run the key's route), so which plan ran is not observable beyond that.
 * Environment: RELAYCC_GPUTEST_RANKS (8; docs/gpu-harness.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "gpu/colls_check.h"
#include "gpu/gpu_util.h"
#include "relaycc_nccl.h"

#define NRANKS 8
#define PER_NODE 4
#define BIG_COUNT ((1u << 20) + 3)

typedef struct {
  int route;     /* forced route, or relayRouteAuto */
  int nodeIdEnv; /* 1: each rank sets RELAYCC_NODE_ID = rank / 4; 0: the row's RELAYCC_SHM_NODES=2 */
  char job[128];
} nodesOpts;

enum { MAX_LAYOUTS = 7 };

static void setRanks(ccLayout* L, const char* name, int G, int A, const int* ranks) {
  L->name = name;
  L->l.nGroups = G;
  L->l.nActive = A;
  for (int i = 0; i < G * A; i++) L->ranks[i] = ranks[i];
  L->l.ranks = L->ranks;
}

/* Nodes: 0-3 and 4-7. */
static int nodeLayouts(ccLayout* out) {
  static const int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int span4[4] = {0, 1, 4, 5};
  static const int quadsSpan[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  static const int pairsSpan[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  static const int quadsNode[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int uneven[4] = {0, 1, 2, 4};
  static const int scrambled[4] = {5, 1, 0, 6};
  int k = 0;
  setRanks(&out[k++], "all-active", 1, 8, all);
  setRanks(&out[k++], "A4-span", 1, 4, span4);
  setRanks(&out[k++], "fused-quads-span", 2, 4, quadsSpan);
  setRanks(&out[k++], "fused-pairs-span", 4, 2, pairsSpan);
  setRanks(&out[k++], "fused-quads-node", 2, 4, quadsNode);
  setRanks(&out[k++], "A4-uneven", 1, 4, uneven);
  setRanks(&out[k++], "A4-scrambled", 1, 4, scrambled);
  return k;
}

static int inSet(const ccLayout* L, int r) {
  for (int i = 0; i < L->l.nActive; i++)
    if (L->ranks[i] == r) return 1;
  return 0;
}

/* The route the call ran: never one-shot or bw on a comm of two nodes; a forced route as itself or direct. */
static void checkRoute(ccRank* R, const nodesOpts* o, const ccLayout* L, const ccCase* c, int logIt) {
  int route = -1, depth = 0;
  relayCommLastRoute(R->comm, &route, &depth);
  char what[256];
  ccDescribe(what, sizeof what, R, L, c);
  G_CHECK(route != relayRouteOneShot && route != relayRouteBw,
          "%s: ran route %s on a comm of 2 nodes (nothing IPC-mapped may run across nodes)", what,
          relayRouteName(route));
  if (o->route != relayRouteAuto)
    G_CHECK(route == o->route || route == relayRouteDirect, "%s: forced route %s ran as %s", what,
            relayRouteName(o->route), relayRouteName(route));
  if (logIt && R->rank == 0)
    gpuLog("route: %-13s %-16s ran %s (depth %d)", kCcCollNames[c->coll], L->name, relayRouteName(route),
           depth);
}

static void sweep(ccRank* R, const nodesOpts* o, const ccLayout* layouts, int nL) {
  static const relayDataType_t kTypes[] = {relayFloat32, relayBfloat16};
  static const size_t kCounts[] = {1, 7, 1000, BIG_COUNT};
  const int nCounts = 4;
  for (int li = 0; li < nL; li++) {
    const ccLayout* L = &layouts[li];
    for (int coll = 0; coll < CC_NCOLLS; coll++) {
      /* Rooted collectives take a rank set: the single-group layouts', with a root in the set (its second
       * member) and, where there is one, a root outside it (the first rank outside). */
      int roots[2], nRoots = 0;
      if (ccIsRooted(coll)) {
        if (L->l.nGroups != 1) continue;
        roots[nRoots++] = L->ranks[1];
        for (int r = 0; r < R->nranks; r++)
          if (!inSet(L, r)) {
            roots[nRoots++] = r;
            break;
          }
      } else {
        roots[nRoots++] = -1;
      }
      long before = R->calls;
      double t0 = gpuNow();
      for (int ri = 0; ri < nRoots; ri++)
        for (int ti = 0; ti < 2; ti++)
          for (int ip = 0; ip < (coll == CC_A2A ? 1 : 2); ip++) {
            /* A root outside the set has no in-place form. */
            if (ip && ccIsRooted(coll) && !inSet(L, roots[ri])) continue;
            for (int ci = 0; ci < nCounts; ci++) {
              ccCase c = {.coll = coll,
                          .dt = kTypes[ti],
                          .op = relaySum,
                          .inPlace = ip,
                          .count = kCounts[ci],
                          .root = roots[ri]};
              ccRunCase(R, L, &c);
              checkRoute(R, o, L, &c, ti == 0 && ip == 0 && ci == nCounts - 1 && ri == 0);
            }
          }
      if (R->rank == 0)
        gpuLog("ok: %-13s %-16s route=%-6s %4ld calls %.2f s", kCcCollNames[coll], L->name, R->routeName,
               R->calls - before, gpuNow() - t0);
    }
  }
}

static int rankMain(int rank, int nranks, void* arg) {
  const nodesOpts* o = arg;
  g_logRank = rank;
  ccRank R;
  memset(&R, 0, sizeof R);
  R.rank = rank;
  R.nranks = nranks;
  R.routeName = relayRouteName(o->route);
  if (o->nodeIdEnv) {
    /* This rank's node, as a rank of a real two-node job would have it from its host identity. */
    char node[16];
    snprintf(node, sizeof node, "%d", rank / PER_NODE);
    G_CHECK(setenv("RELAYCC_NODE_ID", node, 1) == 0, "setenv RELAYCC_NODE_ID");
  }
  int dev = gpuRankStart(rank, nranks, o->job);
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  /* The largest buffer: all-to-all of 8 segments of 2^20+3, and the fused groups' + g. */
  ccAllocPools(&R, (size_t)NRANKS * (BIG_COUNT + 64) * 4);

  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = o->route;
  cfg.timeoutMs = 60000;
  double t0 = gpuNow();
  G_RELAY(NULL, relayCommInitNcclShm(&R.comm, nranks, rank, o->job, dev, &cfg));
  if (rank == 0) gpuLog("init route=%s: %.2f s", R.routeName, gpuNow() - t0);

  /* The node map every rank must have. */
  struct relayComm* c = R.comm;
  G_CHECK(c->nNodes == 2,
          "the comm sees %d nodes, want 2 (RELAYCC_NODE_ID = rank / 4 or RELAYCC_SHM_NODES=2)", c->nNodes);
  G_CHECK(c->nodeOf != NULL, "the comm has no node map");
  for (int r = 0; r < nranks; r++)
    G_CHECK(c->nodeOf[r] == r / PER_NODE, "rank %d is on node %d, want %d", r, c->nodeOf[r], r / PER_NODE);
  G_CHECK(c->localRanks == PER_NODE && c->localRank == rank % PER_NODE, "local rank %d of %d, want %d of %d",
          c->localRank, c->localRanks, rank % PER_NODE, PER_NODE);

  ccLayout layouts[MAX_LAYOUTS];
  int nL = nodeLayouts(layouts);
  sweep(&R, o, layouts, nL);

  G_RELAY(R.comm, relayCommBarrier(R.comm));
  G_RELAY(R.comm, relayCommDestroy(R.comm));
  ccFreePools(&R);
  G_CUDA(cudaStreamDestroy(R.s));
  gpuLog("done: %ld calls", R.calls);
  return 0;
}

static int runNodes(void* arg) {
  /* Never NVLink SHARP / multicast: on shared machines it can take the node's GPUs out of service. Set
   * before any rank starts NCCL. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  nodesOpts o = *(const nodesOpts*)arg;
  char logName[64];
  snprintf(logName, sizeof logName, "gputest_nodes-%s%s", relayRouteName(o.route),
           o.nodeIdEnv ? "" : "-shmnodes");
  gpuLogOpen(logName);
  int n = gpuTestRanks("gputest_nodes", NRANKS, NRANKS);
  if (!n) return GPU_SKIP;
  gpuLog("gputest_nodes: 2 nodes of 4 (%s), route %s",
         o.nodeIdEnv ? "RELAYCC_NODE_ID = rank / 4" : "RELAYCC_SHM_NODES=2", relayRouteName(o.route));
  relayLaunchJobName("gn", o.job, sizeof o.job);
  return gpuLaunch(n, rankMain, &o, 560000);
}

/* One row per route (a budget each; the launcher's own deadline is 560 s); shm_nodes_oneshot: the same
 * split by the agreed test hook instead of each rank's node id, with the one-shot forced (it maps peers'
 * memory, so no call may run it on this comm: each runs as direct, or its legs do). */
static const nodesOpts kAuto = {.route = relayRouteAuto, .nodeIdEnv = 1};
static const nodesOpts kDirect = {.route = relayRouteDirect, .nodeIdEnv = 1};
static const nodesOpts kRelay = {.route = relayRouteRelay, .nodeIdEnv = 1};
static const nodesOpts kShmNodes = {.route = relayRouteOneShot, .nodeIdEnv = 0};
static const tCase kCases[] = {
    {.name = "auto",
     .run = runNodes,
     .arg = (void*)&kAuto,
     .ctest = "gpu_nodes_auto",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "direct",
     .run = runNodes,
     .arg = (void*)&kDirect,
     .ctest = "gpu_nodes_direct",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "relay",
     .run = runNodes,
     .arg = (void*)&kRelay,
     .ctest = "gpu_nodes_relay",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "shm_nodes_oneshot",
     .run = runNodes,
     .arg = (void*)&kShmNodes,
     .ctest = "gpu_nodes_shm_nodes_oneshot",
     .labels = "gpu",
     .env = "RELAYCC_SHM_NODES=2",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
