/*
 * The table of routes (route/table.h). A new route is a relayRoute_t value
 * (relaycc.h: users force it by name or number), its name
 * (comm/common.c), a row here with its prepare where it needs the transport
 * readied, and its builder (src/plan/).
 */
#include "route/table.h"

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "plan/routes.h"
#include "route/route.h"
#include "comm/transport.h"

#include <stdatomic.h>

/* ---- one-shot ---------------------------------------------------------- */

/* The router prices the one-shot for every layout collective: all-gather
 * and all-to-all move the same bytes as all-reduce / reduce-scatter without
 * the reduce (contributions side by side), and on 2 x H200 measured
 * 1.26-1.60x (all-gather) and 1.25-1.90x (all-to-all) of NCCL in graph
 * replay from 4 KB to 1 MiB, 1.37-1.57x per call
 * (docs/perf/2026-11-30-h200x2.md, run 6). The gate is on the per-rank
 * input as the seed's 1 MiB was: the key's (the comm's agreed
 * RELAYCC_ONESHOT_MAX_BYTES, else the default), which the prepare below
 * reads too: one value, set in one place (relayCommKeySettings). */
static int oneShotRootedCan(const planKey* k, unsigned caps) {
  return !relayCollRooted(k->coll) || (caps & RELAY_TP_CAP_ONESHOT_ROOTED);
}

/* Broadcast and reduce (rooted by position) run the one-shot only where the transport has its rooted form
 * (RELAY_TP_CAP_ONESHOT_ROOTED: shm's and the GPU kernel's). Auto prices only the broadcast whose block
 * rides the agreement (below); the exchange form is taken only when forced: on the 2-core host (2026-12-05,
 * relaycc-bench, 4 ranks, min of 5 x 50) it took 14.8-17 us at 4 KiB where the direct route took 9.7 (the
 * root waits for every member's empty push, which the model does not price;
 * docs/perf/2026-12-05-cpu-2core.md), and on NCCL the kernel's root waits the same way (no GPU has run it
 * yet). */
#define RELAY_CARRY_FEW_BYTES (16u << 10) /* 3-4 actives: the carried broadcast's ceiling (below) */
#define RELAY_TWOSHOT_ALL_ACTIVES 6       /* from here the two-shot all-reduce is priced in the whole slot */
#define RELAY_TWOSHOT_FEW_BYTES (64u << 10) /* below it, the two-shot's ceiling (below) */
/* The two-shot all-reduce (planKey.twoShotFrom, shm): one copy of each input, read by every active where
 * the bandwidth route reads every input through a system call per reader or stages it in tiles (16-core
 * Xeon, 2026-12-06, medians of 3 alternations, forced both: 1.03-1.36x at 3-8 actives from 4 to 64 KiB,
 * 1.38-1.69x at 8 actives 256 KiB and 1 MiB, 1.09 / 1.28 at 6 / 7 actives 1 MiB; at 3-5 actives 0.96-1.07x
 * at 256 KiB and 0.75-1.0x at 1 MiB, where the bandwidth route's few readers are cheap;
 * docs/perf/2026-12-06-cpu-twoshot.md). The model
 * prices neither the one copy's readers (docs/model.md) nor the staged tiles' flags well enough to draw
 * this line (it put the bandwidth route first at 4-16 KiB), so the table does: where the two-shot is
 * priced, the bandwidth route is not (where the one-shot's region was declined, such a call then runs
 * direct: slower, never wrong). */
static int twoShotPriced(const planKey* k) {
  return planKeyOneShotTwoShot(k) && relayOneShotFits(k, planOneShotGate(k)) &&
         (k->nActive >= RELAY_TWOSHOT_ALL_ACTIVES ||
          k->counts[0] * relayTypeSize(k->dtype) <= RELAY_TWOSHOT_FEW_BYTES);
}

static int oneShotPriced(const planKey* k, int caps) {
  (void)caps; /* the carry is the key's (planKey.carry: the transport's, in check mode 0) */
  if (!relayOneShotFits(k, planOneShotGate(k))) return 0;
  if (planKeyOneShotTwoShot(k)) return twoShotPriced(k);
  if (!relayCollRooted(k->coll)) return 1;
  /* A broadcast whose block rides the shape agreement (planKey.carry): no member's push to wait for, the
   * root's one copy into its slot read by every member at once, so its time hardly grows with the members
   * (16-core Xeon, 2026-12-06, medians of 3 alternations: 14.1-17.8 us at 64 KiB from 3 to 8 actives),
   * where the bandwidth route's one copy grows with its readers (12.8 at 3 actives, 33.5 at 8). Priced
   * from 5 actives in the whole slot (1.15-3.7x the bandwidth route's time from 16 KiB to 1 MiB at 5-8
   * actives) and at 3-4 actives up to 16 KiB (4 KiB: 1.4-1.5x, 16 KiB: 1.18-1.28x; above it 0.51-1.10x
   * but for 1.70x at 4 actives 1 MiB); never at 2, where the staged pair took 1.3 / 1.6 us at 4 / 16 KiB
   * against 1.6 / 3.9 (docs/perf/2026-12-06-cpu-carry.md). */
  return planKeyCarried(k) && k->nActive > 2 &&
         (k->nActive >= 5 || k->counts[0] * relayTypeSize(k->dtype) <= RELAY_CARRY_FEW_BYTES);
}

/* A forced one-shot above the comm's gate (what one source stages per
 * destination must fit the slot) is declined, on every rank alike. */
static relayResult_t oneShotPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  uint64_t gate = planOneShotGate(call->key);
  /* A forced one-shot of a rooted call on a transport without the rooted form: declined, every rank alike */
  if (!relayOneShotSlotFits(call->key, gate) || !oneShotRootedCan(call->key, c->tp->caps))
    return relayNotSupported;
  return c->tp->oneshotPrepare(c, (size_t)gate, call->exec.stream);
}

/* ---- bandwidth ---------------------------------------------------------- */

/* Tiles through a bounded ring in peers' memory (plan_bw.c): its builder
 * says which keys it serves (nGroups == 1, every layout collective,
 * broadcast and reduce, any count; none when RELAYCC_BW_RING=0) and the simulator prices its tiles
 * (sim.c bwSeconds), so where it wins is the model's answer, continuous with
 * the one-shot's (one tile costs the one-shot plus one flag hop). Its gate
 * (bwPriced) only asks for the rooted form where the call is rooted. */

/* The region is sized by the key's tile and ring (the comm's agreed
 * values); the transport's prepare votes on them, so ranks decline
 * together. */
/* Broadcast and reduce only where the transport has the rooted form (shm's), as the one-shot's. */
static int bwRootedCan(const planKey* k, unsigned caps) {
  return !relayCollRooted(k->coll) || (caps & RELAY_TP_CAP_BW_ROOTED);
}

/* Auto prices broadcast on it, not reduce yet: the staged rooted reduce beat direct from 4 KiB to 1 MiB on
 * the 2-core EPYC at 2, 4 and 8 ranks (8 ranks 1 MiB 307 us against 568) but lost at 8 ranks 4 MiB (5537
 * against 4182; relaycc-bench --check 0, 2026-12-05, docs/perf/2026-12-05-cpu-bcast-2core.md), where the
 * model prices it the winner; forced, it runs. */
static int bwPriced(const planKey* k, int caps) {
  return bwRootedCan(k, (unsigned)caps) && k->coll != relayCollectiveReduce && !twoShotPriced(k);
}

static relayResult_t bwPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  int ring = planBwRing(call->key);
  /* the builder refused it already, or a forced rooted call on a transport without the rooted form: every
   * rank alike */
  if (ring == 0 || !bwRootedCan(call->key, c->tp->caps)) return relayNotSupported;
  return c->tp->bwPrepare(c, planBwTileBytes(call->key), ring, call->exec.stream);
}

/* ---- native ------------------------------------------------------------ */

/* The transport library's fused collective on each group's sub-communicator
 * (NCCL): one launch where a send/recv plan needs a group plus a reduce
 * (measured 0.67-0.86x of NCCL on 2 x H200 for all-reduce and
 * reduce-scatter). The layout collectives, broadcast and reduce (its row's kinds: ncclBroadcast and
 * ncclReduce, the root's position being its rank in the group's sub-communicator). Its
 * prepare: the sub-communicators of the call's groups (cached by the
 * transport). */
static relayResult_t nativePrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  const planKey* k = call->key;
  return c->tp->nativePrepare(c, k->nGroups, k->nActive, k->ranks, call->exec.stream, handle);
}

static relayResult_t nativeRun(struct relayComm* c, void* handle, const relayRouteCall* call) {
  const planKey* k = call->key;
  return c->tp->native(c, handle, k->coll, call->exec.send, call->exec.recv, call->count, k->dtype, k->op,
                       k->root, call->exec.stream);
}

/* ---- the table --------------------------------------------------------- */

/* In relayRoute_t order, which is also the order the router prices plan
 * routes in: on equal predictions the earlier row (direct first) stays. */
/* Direct's builder also serves the rooted collectives (root to each member: plan_scatter.c, plan_bcast.c),
 * the one schedule scatter and gather have; the relay, the one-shot and the bandwidth route serve broadcast
 * and reduce too (A = 2 broadcast: the relay copy; bw: one group, the rooted form, on shm each peer reading
 * the root's buffer once, transport/shm/bw.c). */
#define LAYOUT RELAY_ROW_KIND(relayKindLayout)
static const relayRouteRow kRows[relayNumRoutes] = {
    [relayRouteDirect] = {relayRouteDirect, planBuildDirect, 0,
                          LAYOUT | RELAY_ROW_KIND(relayKindRootedRank) |
                              RELAY_ROW_KIND(relayKindRootedPosition),
                          0, NULL, NULL, NULL},
    [relayRouteRelay] = {relayRouteRelay, planBuildRelay, 0, LAYOUT | RELAY_ROW_KIND(relayKindRootedPosition),
                         RELAY_ROW_PIPELINED, NULL, NULL, NULL},
    [relayRouteOneShot] = {relayRouteOneShot, planBuildOneShot, RELAY_TP_CAP_ONESHOT,
                           LAYOUT | RELAY_ROW_KIND(relayKindRootedPosition),
                           RELAY_ROW_UNMODELLED | RELAY_ROW_ONE_LAUNCH, oneShotPriced, oneShotPrepare, NULL},
    [relayRouteNative] = {relayRouteNative, NULL, RELAY_TP_CAP_NATIVE,
                          LAYOUT | RELAY_ROW_KIND(relayKindRootedPosition), RELAY_ROW_ONE_LAUNCH, NULL,
                          nativePrepare, nativeRun},
    [relayRouteBw] = {relayRouteBw, planBuildBw, RELAY_TP_CAP_BW,
                      LAYOUT | RELAY_ROW_KIND(relayKindRootedPosition),
                      RELAY_ROW_ONE_LAUNCH | RELAY_ROW_WINDOWED, bwPriced, bwPrepare, NULL},
};
#undef LAYOUT

const relayRouteRow* relayRouteRowOf(int route) {
  /* A route without a row here reads a zeroed slot (route 0): none. */
  return route > relayRouteAuto && route < relayNumRoutes && kRows[route].route == route ? &kRows[route]
                                                                                         : NULL;
}

/* One relaxed add per plan built (a miss of both caches), read by tests only. */
#define BUILD_COUNT_DEPTHS 64
static atomic_ulong gBuilds[relayNumRoutes][BUILD_COUNT_DEPTHS];

static int depthSlot(int depth) {
  return depth < 0 ? 0 : depth < BUILD_COUNT_DEPTHS ? depth : BUILD_COUNT_DEPTHS - 1;
}

unsigned long relayPlanBuildCount(int route, int depth) {
  if (route < 0 || route >= relayNumRoutes) return 0;
  return atomic_load_explicit(&gBuilds[route][depthSlot(depth)], memory_order_relaxed);
}

static relayResult_t buildPlan(const planKey* key, relayPlan** out) {
  *out = NULL;
  const relayRouteRow* row = relayRouteRowOf(key->route);
  /* A route that does not serve the collective's kind answers "not supported" and the caller falls back. */
  if (!row || !row->build || !relayRouteRowServes(row, key->coll)) return relayNotSupported;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  /* A layout collective on a comm of several nodes: the hierarchical plan
   * (plan_hier.c), whose node legs are one-node plans of this row's route
   * (direct or relay; core never hands a one-shot key across nodes). */
  int hier = relayCollIsLayout(key->coll) && planKeyMultiNode(key);
  relayResult_t res = hier ? planBuildHier(b, buildPlan) : row->build(b);
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}

relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  relayResult_t res = buildPlan(key, out);
  if (res == relaySuccess && key->route >= 0 && key->route < relayNumRoutes)
    atomic_fetch_add_explicit(&gBuilds[key->route][depthSlot(key->depth)], 1, memory_order_relaxed);
  return res;
}
