/*
 * The interposer's routing predicate against the router: for every preset
 * topology, collective, datatype and size the shim can see (one group of all
 * ranks), relayRouteBeatsNative answers exactly whether relayRouteChoose,
 * offered NCCL's own collective, picks another route; asking twice gives the
 * same answer (every rank decides alike); and over the sweep both answers
 * occur, so a predicate stuck at one answer fails here.
 *
 *   presets    the sweep over the preset topologies
 *   nomodel    no topology: relaycc takes only what the one-shot serves
 */
#include <stdio.h>
#include <string.h>

#include "comm/common.h"
#include "harness.h"
#include "plan/plan.h"
#include "route/route.h"
#include "topo/topo.h"

static int sweep(const struct relayTopo* topo, int nranks, int caps, int* yes, int* no) {
  int ranks[64];
  for (int q = 0; q < nranks; q++) ranks[q] = q;
  const relayDataType_t dts[] = {relayFloat32, relayBfloat16};
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
      for (size_t count = 1; count <= ((size_t)1 << 24); count *= 8) {
        planKey key = planKeyInit((relayCollective_t)coll, nranks, 1, nranks, ranks, &count, dts[d]);
        key.op = relaySum;
        key.route = relayRouteDirect;
        key.depth = 1;
        int route = -1, depth = 0;
        relayRouteChoose(&key, topo, caps | RELAY_TP_CAP_NATIVE, &route, &depth);
        int got = relayRouteBeatsNative(&key, topo, caps);
        T_CHECK(got == (route != relayRouteNative),
                "%s, %d ranks, %s count %zu dtype %d caps %d: predicate %d, router %s",
                topo ? topo->name : "no model", nranks, relayCollName((relayCollective_t)coll), count,
                (int)dts[d], caps, got, relayRouteName(route));
        T_CHECK(relayRouteBeatsNative(&key, topo, caps) == got, "%s count %zu: a second answer differs",
                relayCollName((relayCollective_t)coll), count);
        *yes += got;
        *no += !got;
      }
  return 0;
}

static const int kCapSets[] = {RELAY_TP_CAP_ONESHOT | RELAY_ROUTE_CAP_PERCALL, RELAY_TP_CAP_ONESHOT,
                               RELAY_ROUTE_CAP_PERCALL};

static int runPresets(void) {
  int yes = 0, no = 0;
  for (const char* const* p = relayTopoPresetNames(); *p; p++) {
    struct relayTopo* topo = NULL;
    T_OK(relayTopoPreset(*p, &topo));
    int sizes[] = {2, 4, topo->nGPUs};
    for (int s = 0; s < 3; s++) {
      if (sizes[s] > topo->nGPUs || (s == 2 && sizes[2] <= 4)) continue;
      for (int c = 0; c < 3; c++) sweep(topo, sizes[s], kCapSets[c], &yes, &no);
    }
    relayTopoFree(topo);
  }
  T_CHECK(yes > 0 && no > 0, "the predicate answered yes %d times and no %d times: one answer only", yes, no);
  printf("presets: relaycc predicted to win %d of %d keys\n", yes, yes + no);
  return 0;
}

static int runNoModel(void) {
  int yes = 0, no = 0;
  sweep(NULL, 2, RELAY_ROUTE_CAP_PERCALL, &yes, &no); /* no one-shot: NCCL's everywhere */
  T_CHECK(yes == 0, "without a model or the one-shot, relaycc was predicted to win %d keys", yes);
  int yes1 = 0, no1 = 0;
  sweep(NULL, 4, RELAY_TP_CAP_ONESHOT | RELAY_ROUTE_CAP_PERCALL, &yes1, &no1);
  T_CHECK(yes1 > 0 && no1 > 0, "no model, with the one-shot: yes %d, no %d (the one-shot band only)", yes1,
          no1);
  printf("nomodel: %d of %d keys in the one-shot band\n", yes1, yes1 + no1);
  return 0;
}

static const tCase kCases[] = {
    {.name = "presets", .fn = runPresets, .timeoutS = 600},
    {.name = "nomodel", .fn = runNoModel, .timeoutS = 600},
};

int main(int argc, char** argv) { return t_main(argc, argv, "shim_route", kCases, T_NCASES(kCases)); }
