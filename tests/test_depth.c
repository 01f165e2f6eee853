/*
 * The pipeline depth model (src/route/depth.c) and the shapes it reads
 * (src/plan/pipe.h), against the seed.
 *
 *   test_depth seed     on the mi350x preset, the depth the model picks at
 *                       every size the seed reports a depth for (table)
 *   test_depth shapes   each shape's closed form is the plan's critical path:
 *                       at depth T the built plan carries linkUnits(T) units
 *                       on its busiest link, of count/totalUnits(T) elements
 *   test_depth model    the topology's figures (768 KiB, cap 8 on mi350x),
 *                       the stop at 128-element units, fused calls at depth 1
 *   test_depth router   the router runs the model's depth on mi350x
 */
#include <math.h>
#include <string.h>

#include "comm/common.h"
#include "harness.h"
#include "plan/pipe.h"
#include "plan/plan.h"
#include "route/depth.h"
#include "route/route.h"
#include "route/table.h"
#include "topo/topo.h"

#define MIB (1024.0 * 1024.0)

static int kRanks[8] = {0, 1, 2, 3, 4, 5, 6, 7};

/* A key of one group of A actives on 8 ranks; count from the per-active-rank
 * input in bytes of bf16, as the seed's "Msg Size" (reduce-scatter and
 * all-to-all take a block of it: recvcount, segment). */
static planKey key8(relayCollective_t coll, int A, int G, size_t* counts, double msgBytes) {
  uint64_t elems = (uint64_t)(msgBytes / 2);
  if (coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll) elems /= (uint64_t)A;
  for (int g = 0; g < G; g++) counts[g] = (size_t)elems;
  planKey k = planKeyInit(coll, 8, G, A, kRanks, counts, relayBfloat16);
  k.op = relaySum;
  k.route = relayRouteRelay;
  k.depth = 1;
  return k;
}

/* ---- the seed's depths ---------------------------------------------------- */

typedef struct {
  relayCollective_t coll;
  int A;
  double mib; /* the seed's Msg Size (per-active-rank input, bf16) */
  int depth;
  const char* why; /* where the seed says so */
} seedDepth;

static const seedDepth kSeed[] = {
    /* 2-active all-gather (D117629684, cap 8 D117629691): 9 and 13.5 MB
     * unchanged at depth 1; at or below 144 MB depth 4 (135 MB: 0.708 ms at
     * 4 vs 0.725 at 8); the cap changes the depth only from 256 MB. */
    {relayCollectiveAllGather, 2, 9, 1, "AG A=2 9 MB depth 1, unchanged"},
    {relayCollectiveAllGather, 2, 13.5, 1, "AG A=2 13.5 MB depth 1, unchanged"},
    {relayCollectiveAllGather, 2, 63, 4, "AG A=2 <= 144 MB keeps depth 4"},
    {relayCollectiveAllGather, 2, 135, 4, "AG A=2 135 MB: depth 4 beat 8"},
    {relayCollectiveAllGather, 2, 144, 4, "AG A=2 <= 144 MB keeps depth 4"},
    {relayCollectiveAllGather, 2, 256, 8, "cap 8 changes 2-active depths from 256 MB"},
    {relayCollectiveAllGather, 2, 512, 8, "AG A=2 512 MB 2.346 -> 2.249 ms at depth 8"},
    {relayCollectiveAllGather, 2, 1024, 8, "AG A=2 1 GB 4.584 -> 4.372 ms at depth 8"},
    /* 2-active all-reduce (D117629686): 9 and 13.5 MB depth 1 */
    {relayCollectiveAllReduce, 2, 9, 1, "AR A=2 9 MB depth 1, unchanged"},
    {relayCollectiveAllReduce, 2, 13.5, 1, "AR A=2 13.5 MB depth 1, unchanged"},
    {relayCollectiveAllReduce, 2, 135, 4, "AR A=2 <= 144 MB keeps depth 4"},
    {relayCollectiveAllReduce, 2, 512, 8, "AR A=2 512 MB 2.315 -> 2.212 ms at depth 8"},
    {relayCollectiveAllReduce, 2, 1024, 8, "AR A=2 1 GB 4.457 -> 4.250 ms at depth 8"},
    /* 2-active all-to-all (D117629685): relays the segment, half the message */
    {relayCollectiveAllToAll, 2, 13.5, 1, "A2A A=2 13.5 MB depth 1"},
    {relayCollectiveAllToAll, 2, 1024, 8, "A2A A=2 1 GB 2.338 -> 2.249 ms at depth 8"},
    /* 2-active reduce-scatter (D117629687): relays recvcount, half the message */
    {relayCollectiveReduceScatter, 2, 13.5, 1, "RS A=2 13.5 MB depth 1, unchanged"},
    {relayCollectiveReduceScatter, 2, 27, 1, "RS A=2 27 MB depth 1, unchanged"},
    {relayCollectiveReduceScatter, 2, 1024, 8, "RS A=2 1 GB 2.695 -> 2.595 ms at depth 8"},
    /* 4-active all-to-all (D117629688): relays the segment, a quarter of the
     * message; tiles from ~63 MB; depth 8 only from 512 MB (cap commit). */
    {relayCollectiveAllToAll, 4, 13.5, 1, "A2A A=4 13.5 MB depth 1, unchanged"},
    {relayCollectiveAllToAll, 4, 27, 1, "A2A A=4 27 MB depth 1, unchanged"},
    {relayCollectiveAllToAll, 4, 36, 1, "A2A A=4 36 MB depth 1, unchanged"},
    {relayCollectiveAllToAll, 4, 63, 2, "A2A A=4 tiles from ~63 MB"},
    {relayCollectiveAllToAll, 4, 256, 4, "cap 8 changes 4-active depths only from 512 MB"},
    {relayCollectiveAllToAll, 4, 512, 8, "A2A A=4 512 MB at depth 8"},
    {relayCollectiveAllToAll, 4, 1024, 8, "A2A A=4 1 GB 3.611 -> 3.505 ms at depth 8"},
    /* 4-active all-gather (D117629690, cap D117629691) */
    {relayCollectiveAllGather, 4, 9, 1, "AG A=4 9 MB depth 1, unchanged"},
    {relayCollectiveAllGather, 4, 13.5, 1, "AG A=4 13.5 MB depth 1, unchanged"},
    {relayCollectiveAllGather, 4, 256, 4, "cap 8 changes 4-active depths only from 512 MB"},
    {relayCollectiveAllGather, 4, 512, 8, "AG A=4 512 MB 5.583 -> 5.511 ms at depth 8"},
    {relayCollectiveAllGather, 4, 1024, 8, "AG A=4 1 GB 12.127 -> 10.929 ms at depth 8"},
    /* 4-active reduce-scatter (D117629692): relays recvcount, a quarter of
     * the message; 27-36 MB depth 1, 72 MB depth 1, 144 MB depth 2; the cap
     * raise left 512 MB and 1 GB unchanged (depth 4). */
    {relayCollectiveReduceScatter, 4, 27, 1, "RS A=4 27 MB depth 1, unchanged"},
    {relayCollectiveReduceScatter, 4, 31.5, 1, "RS A=4 31.5 MB depth 1, unchanged"},
    {relayCollectiveReduceScatter, 4, 36, 1, "RS A=4 36 MB depth 1, unchanged"},
    {relayCollectiveReduceScatter, 4, 72, 1, "RS A=4 72 MB is depth 1 or 2"},
    {relayCollectiveReduceScatter, 4, 144, 2, "RS A=4 144 MB is depth 1 or 2"},
    {relayCollectiveReduceScatter, 4, 512, 4, "RS A=4 512 MB unchanged by the cap (2.365 -> 2.369 ms)"},
    {relayCollectiveReduceScatter, 4, 1024, 4, "RS A=4 1 GB unchanged by the cap (4.703 -> 4.709 ms)"},
    /* 4-active all-reduce, own selector (D117629693): two-group to 72 MB,
     * depth 4 from 135 MB to 256 MB, depth 8 from 512 MB. */
    {relayCollectiveAllReduce, 4, 27, 1, "AR A=4 27 MB two-group"},
    {relayCollectiveAllReduce, 4, 63, 1, "AR A=4 63 MB two-group (0.441 vs 0.483 at 4)"},
    {relayCollectiveAllReduce, 4, 72, 1, "AR A=4 72 MB two-group (0.488 vs 0.532 at 4)"},
    {relayCollectiveAllReduce, 4, 135, 4, "AR A=4 135 MB depth 4 (0.843 vs 0.874)"},
    {relayCollectiveAllReduce, 4, 144, 4, "AR A=4 144 MB depth 4 (0.886 vs 0.927)"},
    {relayCollectiveAllReduce, 4, 256, 4, "AR A=4 256 MB depth 4 (1.477 vs 1.520 at 8)"},
    {relayCollectiveAllReduce, 4, 512, 8, "AR A=4 512 MB depth 8 (2.766 vs 2.825 at 4)"},
    {relayCollectiveAllReduce, 4, 1024, 8, "AR A=4 1 GB depth 8 (5.284 vs 5.578 at 4)"},
};

static int caseSeed(void) {
  struct relayTopo* t;
  T_OK(relayTopoLoad("mi350x", &t));
  int n = (int)(sizeof kSeed / sizeof kSeed[0]), bad = 0;
  printf("  coll            A   Msg MB  seed  model\n");
  for (int i = 0; i < n; i++) {
    const seedDepth* e = &kSeed[i];
    size_t counts[1];
    planKey k = key8(e->coll, e->A, 1, counts, e->mib * MIB);
    int d = relayDepthChoose(&k, t);
    printf("  %-14s  %d  %7.1f  %4d  %5d%s\n", relayCollName(e->coll), e->A, e->mib, e->depth, d,
           d == e->depth ? "" : "   <-- differs");
    if (d != e->depth) {
      fprintf(stderr, "FAIL: %s A=%d %.1f MB: model depth %d, seed %d (%s)\n", relayCollName(e->coll), e->A,
              e->mib, d, e->depth, e->why);
      bad++;
    }
  }
  relayTopoFree(t);
  printf("seed depths: %d of %d as the seed reports\n", n - bad, n);
  return bad ? 1 : 0;
}

/* ---- the shapes are the plans' critical paths ------------------------------ */

static int caseShapes(void) {
  int checked = 0;
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++)
    for (int A = 2; A <= 4; A += 2)
      for (int T = 1; T <= 8; T *= 2) {
        size_t counts[1] = {0};
        planKey k = key8((relayCollective_t)c, A, 1, counts, 0);
        relayPipeShape s;
        T_CHECK(planRelayPipeShape(&k, &s) == 0, "%s A=%d: no shape", relayCollName(k.coll), A);
        if (s.ownForm && T == 1) continue; /* depth 1 is the two-group form */
        /* a count the units divide exactly: no alignment remainder */
        uint64_t unit = 128 * 37, total = relayPipeTotalUnits(&s, T);
        counts[0] = (size_t)(unit * total);
        k.depth = T;
        relayPlan* p = NULL;
        T_OK(relayPlanBuild(&k, &p));
        char err[512];
        T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s", err);
        T_CHECK(p->depth == T && p->nSteps == T + 1, "%s A=%d T=%d: plan depth %d, %d steps",
                relayCollName(k.coll), A, T, p->depth, p->nSteps);
        uint64_t want = relayPipeLinkUnits(&s, T) * unit * 2, got = relayPlanCriticalPathBytes(p);
        T_CHECK(got == want, "%s A=%d T=%d: critical path %llu bytes, shape says %llu", relayCollName(k.coll),
                A, T, (unsigned long long)got, (unsigned long long)want);
        relayPlanFree(p);
        checked++;
      }
  printf("shapes: %d (collective, A, depth) plans carry linkUnits(T) units on their busiest link\n", checked);
  return 0;
}

/* ---- the model's figures ------------------------------------------------------ */

static int caseModel(void) {
  struct relayTopo* t;
  T_OK(relayTopoLoad("mi350x", &t));
  size_t counts[4];
  planKey k = key8(relayCollectiveAllGather, 2, 1, counts, 1024 * MIB);
  relayDepthModel m;
  T_CHECK(relayDepthModelOf(t, &k, &m) == 0, "mi350x model");
  T_CHECK(fabs(m.boundaryBytes - 786432.0) < 1e-6 && m.cap == 8,
          "mi350x: %.3f bytes, cap %d (want 768 KiB, 8)", m.boundaryBytes, m.cap);
  /* 2 active, H = 6: the crossovers of (T+1)/(7T+1) against T+1 stages of
   * 768 KiB: 15, 54.4 and 206.6 MiB of relayed count. */
  static const struct {
    double mib;
    int depth;
  } a2[] = {{14.9, 1}, {15.1, 2}, {54.3, 2}, {54.5, 4}, {206.5, 4}, {206.7, 8}, {4096, 8}};
  for (size_t i = 0; i < sizeof a2 / sizeof a2[0]; i++) {
    k = key8(relayCollectiveAllGather, 2, 1, counts, a2[i].mib * MIB);
    T_CHECK(relayDepthChoose(&k, t) == a2[i].depth, "A=2 %.1f MiB: depth %d, want %d", a2[i].mib,
            relayDepthChoose(&k, t), a2[i].depth);
  }
  /* Depth stops before a unit would fall under 128 elements: a count of
   * 57*128 - 1 cannot tile 8 ways at A=2 (units 57), even with no boundary. */
  relayPipeShape s;
  k = key8(relayCollectiveAllGather, 2, 1, counts, 0);
  T_CHECK(planRelayPipeShape(&k, &s) == 0, "shape");
  relayDepthModel free0 = {0, 8, 0};
  T_CHECK(relayDepthPick(&s, 57 * 128, 2, 2, 6, &free0) == 8,
          "57*128 elements: depth 8 when stages are free");
  T_CHECK(relayDepthPick(&s, 57 * 128 - 1, 2, 2, 6, &free0) == 4, "57*128-1 elements: depth 4");
  T_CHECK(relayDepthPick(&s, 8 * 128 - 1, 2, 2, 6, &free0) == 1, "under one unit per chunk: depth 1");
  /* a cap from the topology */
  struct relayTopo* t4;
  T_OK(relayTopoClone(t, &t4));
  t4->maxDepth = 4;
  k = key8(relayCollectiveAllGather, 2, 1, counts, 1024 * MIB);
  T_CHECK(relayDepthChoose(&k, t4) == 4, "max_depth 4: depth %d", relayDepthChoose(&k, t4));
  /* no stage price of its own: boundaryS x link, 25 us x 51.6 GB/s */
  t4->stageS = 0;
  T_CHECK(relayDepthModelOf(t4, &k, &m) == 0 && fabs(m.boundaryBytes - 25e-6 * 51.6e9) < 1e-3,
          "stage from boundary");
  relayTopoFree(t4);
  /* Fused calls keep depth 1, in the model and in the plans. */
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
    k = key8((relayCollective_t)c, 2, 4, counts, 1024 * MIB);
    T_CHECK(relayDepthChoose(&k, t) == 1, "%s fused: depth %d", relayCollName(k.coll),
            relayDepthChoose(&k, t));
    k.depth = 8;
    relayPlan* p = NULL;
    T_OK(relayPlanBuild(&k, &p));
    T_CHECK(p->depth == 1 && p->nSteps == 2, "%s fused at depth 8: plan depth %d, %d steps",
            relayCollName(k.coll), p->depth, p->nSteps);
    relayPlanFree(p);
  }
  /* Through a switch only the 4-active all-reduce pipelines (it alone cuts
   * egress there); the others stay at depth 1. */
  struct relayTopo* h;
  T_OK(relayTopoLoad("h200", &h));
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++)
    for (int A = 2; A <= 4; A += 2) {
      k = key8((relayCollective_t)c, A, 1, counts, 1024 * MIB);
      int d = relayDepthChoose(&k, h), ar4 = c == relayCollectiveAllReduce && A == 4;
      T_CHECK(ar4 ? d > 1 : d == 1, "h200 %s A=%d 1 GiB: depth %d", relayCollName(k.coll), A, d);
    }
  relayTopoFree(h);
  /* No topology, or a relay that cannot serve the key: depth 1. */
  k = key8(relayCollectiveAllGather, 2, 1, counts, 1024 * MIB);
  T_CHECK(relayDepthChoose(&k, NULL) == 1, "no topology");
  relayTopoFree(t);
  printf("model: passed\n");
  return 0;
}

/* ---- the router runs the model's depth ------------------------------------------ */

static int caseRouter(void) {
  struct relayTopo* t;
  T_OK(relayTopoLoad("mi350x", &t));
  static const struct {
    relayCollective_t coll;
    int A;
    double mib;
    int depth;
  } want[] = {
      {relayCollectiveAllGather, 2, 1024, 8},     {relayCollectiveAllGather, 2, 256, 8},
      {relayCollectiveAllReduce, 2, 512, 8},      {relayCollectiveReduceScatter, 2, 1024, 8},
      {relayCollectiveAllToAll, 4, 1024, 8},      {relayCollectiveAllGather, 4, 1024, 8},
      {relayCollectiveReduceScatter, 4, 1024, 4}, {relayCollectiveAllReduce, 4, 1024, 8},
      {relayCollectiveAllReduce, 4, 256, 4},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    size_t counts[1];
    planKey k = key8(want[i].coll, want[i].A, 1, counts, want[i].mib * MIB);
    int route, depth;
    relayRouteChoose(&k, t, RELAY_TP_CAP_ONESHOT, &route, &depth);
    printf("  %-14s A=%d %6.0f MiB: route %s depth %d (model %d)\n", relayCollName(k.coll), k.nActive,
           want[i].mib, relayRouteName(route), depth, relayDepthChoose(&k, t));
    T_CHECK(route == relayRouteRelay && depth == want[i].depth,
            "%s A=%d %.0f MiB: %s depth %d, want relay depth %d", relayCollName(k.coll), k.nActive,
            want[i].mib, relayRouteName(route), depth, want[i].depth);
  }
  relayTopoFree(t);
  printf("router: passed\n");
  return 0;
}

static const tCase kCases[] = {
    {.name = "seed", .fn = caseSeed, .timeoutS = 120},
    {.name = "shapes", .fn = caseShapes, .timeoutS = 120},
    {.name = "model", .fn = caseModel, .timeoutS = 120},
    {.name = "router", .fn = caseRouter, .timeoutS = 120},
};

int main(int argc, char** argv) { return t_main(argc, argv, "depth", kCases, T_NCASES(kCases)); }
