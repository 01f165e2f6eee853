/*
 * Comms that span nodes (src/plan/plan_hier.c, src/core/nodes.c), one host
 * split into 2 and 4 nodes.
 *
 *   plans   every layout collective on node maps of 8 ranks / 2 nodes and
 *           16 ranks / 4 nodes (node-major and not), with groups inside one
 *           node, groups on several nodes at once, groups spanning nodes
 *           (1 and 2 actives per node, several such groups) and a group with
 *           unequal actives per node: the plan passes the checker, the
 *           reference executor gives the serial result for every dtype and op,
 *           every point-to-point transfer stays inside a node (a group inside
 *           a node is helped by that node's ranks only), nothing crosses nodes
 *           but rail sub-collectives whose members are on distinct nodes, and
 *           no one-shot op appears even when the key asks for the one-shot.
 *   router  on mi350x x 2, NCCL's own all-to-all kept, the hierarchical 1 GiB
 *           all-reduce taken, the same answer every time.
 *   shm8    8 ranks as 2 nodes (RELAYCC_SHM_NODES=2), then as 2 interleaved
 *           nodes (RELAYCC_NODE_ID = rank % 2), on the shm transport through
 *           the public API, routes direct / relay / auto / forced one-shot,
 *           out of place and in place: data against the serial reference,
 *           helpers untouched, send buffers unchanged; the route
 *           never the one-shot; every rank ran the same route.
 *   shm16   16 ranks as 4 nodes, fewer sizes (2 busy CI cores); then as 2 nodes
 *           of 8 with RELAYCC_TOPO=mi350x, so the router prices the plans on
 *           mi350x x 2 (the cpu preset joins no network: no model).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colls_common.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "plan/plan.h"
#include "ref/ref.h"
#include "route/route.h"
#include "route/table.h"
#include "topo/topo.h"

typedef struct {
  const char* name;
  int nGroups, nActive;
  int ranks[16];
} layoutCase;

/* Node-major 2 x 4: nodes {0-3} {4-7}. */
static const layoutCase kLayouts8[] = {
    {"inside node 0", 1, 2, {1, 3}},
    {"on both nodes at once", 2, 2, {0, 2, 5, 7}},
    {"spanning, 2 per node", 1, 4, {0, 1, 4, 5}},
    {"spanning, 1 per node", 1, 2, {2, 6}},
    {"spanning, scrambled order", 1, 4, {5, 1, 0, 6}},
    {"two spanning groups", 2, 2, {0, 4, 5, 1}},
    {"spanning, 3 + 1 (unequal)", 1, 4, {0, 1, 2, 4}},
    {"fused, every rank", 4, 2, {0, 4, 1, 5, 2, 6, 3, 7}},
};
/* Node-major 4 x 4: nodes {0-3} {4-7} {8-11} {12-15}. */
static const layoutCase kLayouts16[] = {
    {"inside node 2", 1, 2, {8, 11}},
    {"on four nodes at once", 4, 2, {0, 1, 4, 5, 8, 9, 12, 13}},
    {"spanning 4 nodes, 2 per node", 1, 8, {0, 1, 4, 5, 8, 9, 12, 13}},
    {"spanning 4 nodes, 1 per node", 1, 4, {3, 7, 11, 15}},
    {"inside and spanning", 2, 2, {0, 1, 6, 10}},
    {"spanning 3 nodes, unequal", 1, 4, {0, 1, 4, 8}},
};

static void nodeMap(int n, int nodes, int interleave, int* out) {
  for (int r = 0; r < n; r++) out[r] = interleave ? r % nodes : r / (n / nodes);
}

/* The layout case on a node map other than node-major: rank r of the case
 * becomes the rank that holds r's (node, local) place there. */
static void mapLayout(const layoutCase* lc, int n, int nodes, int interleave, int* ranks) {
  int G = n / nodes;
  for (int i = 0; i < lc->nGroups * lc->nActive; i++) {
    int r = lc->ranks[i], v = r / G, l = r % G;
    ranks[i] = interleave ? l * nodes + v : r;
  }
}

/* ---- plans -------------------------------------------------------------- */

static const relayDataType_t kAllTypes[] = {relayInt8,    relayUint8,   relayInt32,   relayUint32,
                                            relayInt64,   relayUint64,  relayFloat16, relayFloat32,
                                            relayFloat64, relayBfloat16};
static const relayRedOp_t kAllOps[] = {relaySum, relayProd, relayMax, relayMin, relayAvg};

/* Structural facts of a multi-node plan (file comment). */
static void checkCrossing(const relayPlan* p, const int* nodeOf, const char* tag) {
  for (int r = 0; r < p->nranks; r++)
    for (int s = 0; s < p->nSteps; s++) {
      const planStep* st = planRankStep(p, r, s);
      for (uint32_t i = 0; i < st->nSend; i++)
        T_CHECK(nodeOf[p->sends[st->sendBase + i].peer] == nodeOf[r],
                "%s: rank %d step %d sends to rank %d of node %d", tag, r, s, p->sends[st->sendBase + i].peer,
                nodeOf[p->sends[st->sendBase + i].peer]);
      for (uint32_t i = 0; i < st->nRecv; i++)
        T_CHECK(nodeOf[p->recvs[st->recvBase + i].peer] == nodeOf[r],
                "%s: rank %d step %d receives across nodes", tag, r, s);
      for (uint32_t i = 0; i < st->nOp; i++)
        T_CHECK(p->ops[st->opBase + i].kind != PLAN_OP_ONESHOT, "%s: rank %d step %d has a one-shot op", tag,
                r, s);
    }
  for (uint32_t i = 0; i < p->nSubs; i++) {
    const planSubColl* sc = &p->subs[i];
    if (sc->nRanks == p->nActive) continue; /* the whole group: NCCL's own collective */
    for (int a = 0; a < sc->nRanks; a++)
      for (int b = a + 1; b < sc->nRanks; b++)
        T_CHECK(nodeOf[p->subRanks[sc->rankBase + a]] != nodeOf[p->subRanks[sc->rankBase + b]],
                "%s: rail %u has two members on node %d", tag, i, nodeOf[p->subRanks[sc->rankBase + a]]);
  }
}

/* Builds, checks and runs one key on the reference executor; returns wrong elements. */
static size_t planOne(const planKey* k, const char* tag) {
  relayPlan* p = NULL;
  relayResult_t res = relayPlanBuild(k, &p);
  T_CHECK(res == relaySuccess && p, "%s: build -> %s", tag, relayGetErrorString(res));
  char err[512];
  T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s: check: %s", tag, err);
  checkCrossing(p, k->nodeOf, tag);
  int n = k->nranks, A = k->nActive;
  size_t es = relayTypeSize(k->dtype), bad = 0;
  void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  T_CHECK(send && recv, "oom");
  for (int g = 0; g < k->nGroups; g++)
    for (int i = 0; i < A; i++) {
      int r = planActiveRank(k, g, i);
      size_t c = k->counts[g], sn = tc_send_elems(k->coll, A, c), rn = tc_recv_elems(k->coll, A, c);
      send[r] = malloc(sn * es + 1);
      recv[r] = malloc(rn * es + 1);
      T_CHECK(send[r] && recv[r], "oom");
      tc_fill_input(k->coll, k->dtype, k->op, A, i, c, send[r]);
      memset(recv[r], TC_POISON, rn * es + 1);
    }
  T_CHECK(relayRefRun(p, send, recv, err, sizeof err) == 0, "%s: ref: %s", tag, err);
  for (int g = 0; g < k->nGroups; g++)
    for (int i = 0; i < A; i++) {
      int r = planActiveRank(k, g, i);
      size_t c = k->counts[g], rn = tc_recv_elems(k->coll, A, c), first = 0;
      char* want = malloc(rn * es + 1);
      T_CHECK(want, "oom");
      tc_expected(k->coll, k->dtype, k->op, A, i, c, want);
      size_t b = tc_compare(k->dtype, recv[r], want, rn, &first);
      if (b)
        fprintf(stderr,
                "FAIL %s: rank %d (group %d active %d): %zu of %zu wrong, first at %zu: got %g want %g\n",
                tag, r, g, i, b, rn, first, tc_as_double(k->dtype, recv[r], first),
                tc_as_double(k->dtype, want, first));
      bad += b;
      free(want);
    }
  for (int r = 0; r < n; r++) {
    free(send[r]);
    free(recv[r]);
  }
  free(send);
  free(recv);
  relayPlanFree(p);
  return bad;
}

static int casePlans(void) {
  const struct {
    int n, nodes, interleave;
    const layoutCase* cases;
    int nCases;
  } maps[] = {{8, 2, 0, kLayouts8, (int)(sizeof kLayouts8 / sizeof kLayouts8[0])},
              {8, 2, 1, kLayouts8, (int)(sizeof kLayouts8 / sizeof kLayouts8[0])},
              {16, 4, 0, kLayouts16, (int)(sizeof kLayouts16 / sizeof kLayouts16[0])},
              {16, 4, 1, kLayouts16, (int)(sizeof kLayouts16 / sizeof kLayouts16[0])}};
  const int routes[] = {relayRouteDirect, relayRouteRelay, relayRouteOneShot};
  const size_t sizes[] = {1, 7, 301};
  size_t wrong = 0, plans = 0;
  for (size_t mi = 0; mi < sizeof maps / sizeof maps[0]; mi++) {
    int nodeOf[16], ranks[16];
    nodeMap(maps[mi].n, maps[mi].nodes, maps[mi].interleave, nodeOf);
    for (int li = 0; li < maps[mi].nCases; li++) {
      const layoutCase* lc = &maps[mi].cases[li];
      mapLayout(lc, maps[mi].n, maps[mi].nodes, maps[mi].interleave, ranks);
      for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
        for (size_t ri = 0; ri < sizeof routes / sizeof routes[0]; ri++)
          for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t counts[8];
            for (int g = 0; g < lc->nGroups; g++) counts[g] = sizes[si] + (size_t)g * 3; /* groups differ */
            /* Every dtype with sum; every op on int32 and float32 (reductions only). */
            int nTypes = (int)(sizeof kAllTypes / sizeof kAllTypes[0]);
            int nOps =
                relayCollReduces((relayCollective_t)coll) ? (int)(sizeof kAllOps / sizeof kAllOps[0]) : 1;
            for (int t = 0; t < nTypes + 2 * (nOps - 1); t++) {
              relayDataType_t dt = t < nTypes ? kAllTypes[t] : ((t - nTypes) % 2 ? relayFloat32 : relayInt32);
              relayRedOp_t op = t < nTypes ? relaySum : kAllOps[1 + (t - nTypes) / 2];
              planKey k = planKeyInit((relayCollective_t)coll, maps[mi].n, lc->nGroups, lc->nActive, ranks,
                                      counts, dt);
              k.op = op;
              k.route = routes[ri];
              k.depth = routes[ri] == relayRouteRelay && si == 2 ? 2 : 1;
              k.nodeOf = nodeOf;
              char tag[256];
              snprintf(tag, sizeof tag, "%d ranks / %d nodes%s, %s, %s %s %s %s count %zu", maps[mi].n,
                       maps[mi].nodes, maps[mi].interleave ? " interleaved" : "", lc->name,
                       relayCollName((relayCollective_t)coll), relayRouteName(routes[ri]), relayTypeName(dt),
                       relayOpName(op), sizes[si]);
              wrong += planOne(&k, tag);
              plans++;
            }
          }
    }
  }
  printf("%zu multi-node plans checked against the serial reference, %zu wrong elements\n", plans, wrong);
  return wrong != 0;
}

/* ---- router ------------------------------------------------------------- */

/* On mi350x x 2 with NCCL's collectives available: the router keeps NCCL's
 * own all-to-all across nodes (the model has the hierarchical one 0.4-0.7x
 * of it) and takes the hierarchical all-reduce of 1 GiB (1.9x), and answers
 * alike for every call of the same key (a pure function: all ranks agree). */
static int caseRouter(void) {
  struct relayTopo *node = NULL, *t = NULL;
  T_OK(relayTopoPreset("mi350x", &node));
  T_OK(relayTopoMultiNode(node, 2, 8, RELAY_TOPO_NET_GPU_BW, 0, &t));
  relayTopoFree(node);
  int nodeOf[16], ranks[4] = {0, 1, 8, 9};
  nodeMap(16, 2, 0, nodeOf);
  struct {
    relayCollective_t coll;
    size_t count;
    int wantNative;
  } cases[] = {{relayCollectiveAllToAll, 1024, 1},
               {relayCollectiveAllToAll, 1 << 24, 1},
               {relayCollectiveAllReduce, 1 << 29, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    planKey k = planKeyInit(cases[i].coll, 16, 1, 4, ranks, &cases[i].count, relayBfloat16);
    k.op = relaySum;
    k.nodeOf = nodeOf;
    int route = -1, depth = 0, again = -1, d2 = 0;
    relayRouteChoose(&k, t, RELAY_TP_CAP_NATIVE | RELAY_ROUTE_CAP_PERCALL, &route, &depth);
    relayRouteChoose(&k, t, RELAY_TP_CAP_NATIVE | RELAY_ROUTE_CAP_PERCALL, &again, &d2);
    printf("%s of %zu on 2 nodes: %s depth %d\n", relayCollName(k.coll), cases[i].count,
           relayRouteName(route), depth);
    T_CHECK((route == relayRouteNative) == cases[i].wantNative, "%s of %zu: route %s", relayCollName(k.coll),
            cases[i].count, relayRouteName(route));
    T_CHECK(route == again && depth == d2, "the router answered %d/%d then %d/%d", route, depth, again, d2);
  }
  relayTopoFree(t);
  return 0;
}

/* ---- shm ---------------------------------------------------------------- */

typedef struct {
  int nodes, interleave;
  const layoutCase* cases;
  int nCases;
  const size_t* sizes;
  int nSizes;
  const char* topo; /* RELAYCC_TOPO, or NULL: the cpu preset (which no network joins: no model) */
} shmArg;

static const char* kRoutes[] = {"direct", "relay", "auto", "oneshot"};

static int shmRank(int rank, int nranks, void* argp) {
  const shmArg* arg = argp;
  char id[16];
  if (arg->interleave) {
    snprintf(id, sizeof id, "%d", rank % arg->nodes);
    setenv("RELAYCC_NODE_ID", id, 1);
  } else {
    snprintf(id, sizeof id, "%d", arg->nodes);
    setenv("RELAYCC_SHM_NODES", id, 1);
  }
  if (arg->topo) setenv("RELAYCC_TOPO", arg->topo, 1);
  int nodeOf[16];
  nodeMap(nranks, arg->nodes, arg->interleave, nodeOf);
  size_t wrong = 0;
  for (size_t ri = 0; ri < sizeof kRoutes / sizeof kRoutes[0]; ri++) {
    relayComm_t c = tc_comm_route(rank, nranks, kRoutes[ri], 120000);
    T_CHECK(c->nNodes == arg->nodes && c->localRanks == nranks / arg->nodes, "rank %d: %d nodes of %d ranks",
            rank, c->nNodes, c->localRanks);
    for (int r = 0; r < nranks; r++)
      T_CHECK(c->nodeOf[r] == nodeOf[r], "rank %d: rank %d on node %d", rank, r, c->nodeOf[r]);
    /* The route model is per node: the named one-node model times the nodes, or none. */
    if (arg->topo)
      T_CHECK(c->topo && c->topo->nNodes == arg->nodes && c->topo->nGPUs == nranks, "rank %d: route model %s",
              rank, c->topo ? c->topo->name : "none");
    else
      T_CHECK(!c->topo, "rank %d: a route model (%s) on nodes the cpu preset cannot join", rank,
              c->topo->name);
    for (int li = 0; li < arg->nCases; li++) {
      const layoutCase* lc = &arg->cases[li];
      int ranks[16];
      mapLayout(lc, nranks, arg->nodes, arg->interleave, ranks);
      for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
        for (int si = 0; si < arg->nSizes; si++) {
          /* float32 sum, int32 max (avg on all-reduce), bfloat16 sum. */
          const relayDataType_t dts[] = {relayFloat32, relayInt32, relayBfloat16};
          for (int t = 0; t < 3; t++) {
            relayRedOp_t op = t != 1 ? relaySum : coll == relayCollectiveAllReduce ? relayAvg : relayMax;
            size_t counts[8];
            for (int g = 0; g < lc->nGroups; g++) counts[g] = arg->sizes[si] + (size_t)g;
            char tag[256];
            snprintf(tag, sizeof tag, "%s, %s, %s %s %s count %zu", lc->name, kRoutes[ri],
                     relayCollName((relayCollective_t)coll), relayTypeName(dts[t]), relayOpName(op),
                     counts[0]);
            /* In place too (all-to-all has no in-place form), on the first dtype. */
            for (int inPlace = 0; inPlace < (t == 0 && coll != relayCollectiveAllToAll ? 2 : 1); inPlace++)
              wrong += tc_one_call(c, rank, (relayCollective_t)coll, lc->nActive, lc->nGroups, ranks, counts,
                                   dts[t], op, inPlace, tag);
            int route, depth;
            relayCommLastRoute(c, &route, &depth);
            T_CHECK(route != relayRouteOneShot, "rank %d %s: the one-shot ran across nodes", rank, tag);
            int all[16];
            T_OK(relayCommAgree(c, &route, all, sizeof route));
            for (int q = 0; q < nranks; q++)
              T_CHECK(all[q] == route, "rank %d %s: rank %d ran route %d, this rank %d", rank, tag, q, all[q],
                      route);
          }
        }
    }
    T_OK(relayCommDestroy(c));
  }
  T_CHECK(wrong == 0, "rank %d: %zu wrong elements", rank, wrong);
  return 0;
}

static int runShm8(void) {
  const size_t sizes[] = {1, 7, 1000};
  for (int il = 0; il < 2; il++) {
    shmArg a = {2, il, kLayouts8, (int)(sizeof kLayouts8 / sizeof kLayouts8[0]), sizes, 3, NULL};
    t_run_ranks(8, shmRank, &a, 900);
  }
  return 0;
}

static int runShm16(void) {
  const size_t sizes[] = {7, 300};
  shmArg a = {4, 0, kLayouts16, (int)(sizeof kLayouts16 / sizeof kLayouts16[0]), sizes, 2, NULL};
  t_run_ranks(16, shmRank, &a, 900);
  /* 2 nodes of 8 with the mi350x model per node: the router prices the
   * hierarchical plans on mi350x x 2 (and every rank must choose alike). */
  shmArg m = {2, 0, kLayouts16, (int)(sizeof kLayouts16 / sizeof kLayouts16[0]), sizes, 2, "mi350x"};
  t_run_ranks(16, shmRank, &m, 900);
  return 0;
}

/* Plans on 2 and 4 nodes (pure); the shm transport with one host split into 2 nodes (8 ranks) and 4
 * nodes (16 ranks). */
static const tCase kCases[] = {
    {.name = "plans", .fn = casePlans, .timeoutS = 600},
    {.name = "router", .fn = caseRouter, .timeoutS = 120},
    {.name = "shm8", .fn = runShm8, .timeoutS = 900},
    {.name = "shm16", .fn = runShm16, .timeoutS = 900},
};

int main(int argc, char** argv) { return t_main(argc, argv, "hier", kCases, T_NCASES(kCases)); }
