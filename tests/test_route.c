/*
 * Router tests (issue 5): on every preset the chosen route is never predicted
 * slower than direct; crossovers are continuous (where the choice changes,
 * the two routes' predictions are within a few percent); on NVSwitch (h200)
 * the relay is chosen only for all-reduce with A >= 3, where helpers that
 * reduce cut each active rank's egress; and every rank of a comm chooses
 * alike.
 */
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "plan/plan.h"
#include "route/route.h"
#include "route/table.h"
#include "sim/sim.h"
#include "topo/topo.h"

static planKey mkKey(int coll, int G, int A, const int* ranks, const size_t* counts, relayDataType_t dt) {
  planKey k = planKeyInit((relayCollective_t)coll, 8, G, A, ranks, counts, dt);
  k.op = relaySum;
  k.depth = 1;
  return k;
}

static double predict(planKey k, const struct relayTopo* t, int route, int depth) {
  k.route = route;
  k.depth = depth;
  relayPlan* p = NULL;
  relayResult_t br = relayPlanBuild(&k, &p);
  if (br == relayNotSupported) return -1; /* e.g. past the one-shot gate */
  T_CHECK(br == relaySuccess && p, "build %s %s A=%d G=%d count=%zu: %s", relayCollName(k.coll),
          relayRouteName(route), k.nActive, k.nGroups, k.counts[0], relayGetErrorString(br));
  relaySimResult r;
  memset(&r, 0, sizeof r);
  T_CHECK(relaySimRun(p, t, &r) == relaySuccess, "sim");
  double s = r.totalS;
  relaySimResultFree(&r);
  relayPlanFree(p);
  return s;
}

static void sweep(const char* preset, double factor, int* checked) {
  struct relayTopo* t = NULL;
  T_CHECK(relayTopoLoad(preset, &t) == relaySuccess, "load %s", preset);
  int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (int A = 2; A <= 4; A += 2)
      for (int G = 1; G <= 8 / A; G = G == 1 ? 8 / A : 99) {
        size_t counts[8];
        int prevRoute = -1, prevDepth = 0;
        double prevBytes = 0;
        for (double bytes = 4096; bytes <= (double)(1u << 30); bytes *= factor) {
          /* per-active-rank input bytes, bf16 */
          size_t c = (size_t)(bytes / 2);
          if (coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll) c /= (size_t)A;
          if (c == 0) continue;
          for (int g = 0; g < G; g++) counts[g] = c;
          planKey k = mkKey(coll, G, A, ranks, counts, relayBfloat16);
          int route, depth;
          relayRouteChoose(&k, t, RELAY_TP_CAP_ONESHOT, &route, &depth);
          double direct = predict(k, t, relayRouteDirect, 1);
          double chosen = predict(k, t, route, depth);
          T_CHECK(chosen <= direct * (1 + 1e-12),
                  "%s %s A=%d G=%d %.0f B: chose %s/%d at %.3g s, direct %.3g s", preset,
                  relayCollName(k.coll), A, G, bytes, relayRouteName(route), depth, chosen, direct);
          if (!strcmp(preset, "h200") && route == relayRouteRelay)
            T_CHECK(coll == relayCollectiveAllReduce && A >= 3,
                    "h200: relay chosen for %s A=%d G=%d at %.0f B", relayCollName(k.coll), A, G, bytes);
          if (prevRoute >= 0 && (route != prevRoute || depth != prevDepth)) {
            /* At the first size of the new choice, the old choice must still
             * be close: a real crossover is where the curves meet. */
            double oldT = predict(k, t, prevRoute, prevDepth);
            T_CHECK(oldT < 0 || oldT / chosen < 1.0 + 2.5 * (factor - 1.0),
                    "%s %s A=%d G=%d: choice jumps %s/%d -> %s/%d between %.0f and %.0f B (old %.3g s, new "
                    "%.3g s)",
                    preset, relayCollName(k.coll), A, G, relayRouteName(prevRoute), prevDepth,
                    relayRouteName(route), depth, prevBytes, bytes, oldT, chosen);
          }
          prevRoute = route;
          prevDepth = depth;
          prevBytes = bytes;
          (*checked)++;
        }
      }
  relayTopoFree(t);
}

static int sameOnAllRanks(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t comm = t_comm(rank, nranks, NULL);
  struct relayTopo* t = NULL;
  T_CHECK(relayTopoLoad("mi350x", &t) == relaySuccess, "load");
  int ranks[8] = {3, 1, 4, 0, 5, 2, 7, 6};
  uint64_t h = 1469598103934665603ull;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (size_t c = 1000; c < (1u << 28); c *= 3) {
      size_t counts[2] = {c, c + 1};
      planKey k = mkKey(coll, 2, 4, ranks, counts, relayFloat32);
      int route, depth;
      relayRouteChoose(&k, t, RELAY_TP_CAP_ONESHOT, &route, &depth);
      h = (h ^ (uint64_t)(route * 16 + depth)) * 1099511628211ull;
    }
  uint64_t all[8];
  T_OK(relayCommAgree(comm, &h, all, sizeof h));
  for (int r = 0; r < nranks; r++) T_CHECK(all[r] == all[0], "rank %d chose differently from rank 0", r);
  relayTopoFree(t);
  relayCommDestroy(comm);
  return 0;
}

static int runNeverSlower(void) {
  const char* presets[] = {"mi350x", "mi300x", "h200", "cpu"};
  int checked = 0;
  for (int i = 0; i < 4; i++) sweep(presets[i], 2.0, &checked);
  printf("never-slower: %d choices checked\n", checked);
  return 0;
}

static int runContinuous(void) {
  int checked = 0;
  sweep("mi350x", 1.05, &checked);
  printf("continuous: %d choices checked\n", checked);
  return 0;
}

static const tCase kCases[] = {
    {.name = "never-slower", .fn = runNeverSlower, .timeoutS = 300},
    {.name = "continuous", .fn = runContinuous, .timeoutS = 300},
    {.name = "same-on-all-ranks", .rank = sameOnAllRanks, .ranks = 8, .deadlineS = 120, .timeoutS = 300},
};

int main(int argc, char** argv) { return t_main(argc, argv, "route", kCases, T_NCASES(kCases)); }
