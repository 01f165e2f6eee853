/*
 * Calibration of the h200x2 preset against what we measured on it: 2 x H200
 * (NV18), NCCL 2.28.3, CUDA 13.0, bf16, relaycc-bench --backend nccl -A 2,
 * CUDA-graph replays of 10 calls (the way latency-bound users run), min over
 * iterations; docs/perf/raw/2026-11-29-h200x2/:
 *   auto_graph_small.log, auto_graph_large.log: NCCL's own collective on the
 *     2 actives (the "nccl" column: ncclCommSplit, measured in the same run),
 *     4 KB - 1 GB in steps of 4x;
 *   p2p_graph.log: relaycc's direct send/recv plans (route direct), 4 KB -
 *     256 MB in steps of 16x.
 * docs/model.md ("Calibration on h200x2") has the before/after errors.
 *
 * Why curves and not one bandwidth per collective: NCCL's kernels reach the
 * link rate only slowly with size. All-reduce moved 136 GB/s of data per
 * direction at 1 MB, 237 at 16 MB, 305 at 256 MB and 335 at 1 GB over a
 * 370 GB/s link, with steps where its protocol changes (LL, LL128, Simple):
 * the best-fitting latency plus one bandwidth per collective still misses
 * some size by 23-26%, and the best smooth 4-parameter ramp we fitted by
 * 7-8%. So the preset keeps, per collective, the measured efficiency at each
 * logged size:
 * the fraction of the link rate left once the fixed costs below are paid.
 * Between the logged sizes the model interpolates (power law); beyond 1 GB
 * it holds the 1 GB figure ("the efficiency at large sizes").
 */
#include "topo/gpu.h"

#include "comm/common.h"

#define US 1e-6
#define KB 1024.0
#define MB (1024.0 * 1024.0)

/* Per-active-rank input bytes of the auto_graph logs (4 KB .. 1 GB, x4). */
static const double kSizes[10] = {4 * KB, 16 * KB, 64 * KB, 256 * KB, 1 * MB,
                                  4 * MB, 16 * MB, 64 * MB, 256 * MB, 1024 * MB};

/* NCCL's collective, graph replay, us: the "nccl" column of
 * auto_graph_small.log (4 KB - 16 MB) and auto_graph_large.log (64 MB - 1 GB). */
static const double kNcclUs[RELAY_TOPO_NCOLLS][10] = {
    /* all-gather */ {6.17, 6.44, 6.62, 8.14, 16.33, 35.11, 89.46, 288.24, 1041.83, 3677.79},
    /* reduce-scatter */ {5.57, 6.07, 6.33, 7.03, 10.02, 22.51, 49.32, 164.44, 584.69, 1982.00},
    /* all-reduce */ {6.41, 6.98, 7.34, 8.54, 13.73, 32.14, 77.01, 245.43, 885.48, 3210.86},
    /* all-to-all */ {6.51, 7.61, 7.88, 8.17, 12.57, 19.37, 48.28, 135.42, 473.34, 1620.25},
};

/* relaycc's direct all-gather (one NCCL group: a send/recv pair with the peer
 * and a self pair), graph replay, us: p2p_graph.log, "time-min". */
static const double kP2pAgSizes[5] = {4 * KB, 64 * KB, 1 * MB, 16 * MB, 256 * MB};
static const double kP2pAgUs[5] = {7.05, 8.12, 14.91, 79.05, 907.18};

/* Bytes each rank sends its one peer (A = 2) for a per-rank input of s bytes. */
static double perPeer(int coll, double s) { return coll == 1 || coll == 3 ? s / 2 : s; }

/* eff = bytes / (rate x (measured time - fixed costs)). */
static double effOf(double bytes, double rate, double us, double fixedS) {
  double dataS = us * US - fixedS;
  return bytes / (rate * dataS);
}

/* Insert (bytes, eff) into a curve kept sorted by bytes. */
static void curveAdd(relayTopoCurve* c, double bytes, double eff) {
  if (c->n >= RELAY_TOPO_CURVE_MAX) return;
  int i = c->n++;
  while (i > 0 && c->bytes[i - 1] > bytes) {
    c->bytes[i] = c->bytes[i - 1];
    c->eff[i] = c->eff[i - 1];
    i--;
  }
  c->bytes[i] = bytes;
  c->eff[i] = eff;
}

void relayTopoCalibrateH200x2(struct relayTopo* t) {
  /* Fixed costs of graph replay. A plain call adds host work to every route
   * (auto_percall_small.log's NCCL all-gather at 4 KB took 14.18 us,
   * auto_graph_small.log's 6.17; the direct plans 8.0-10.4 us more,
   * p2p_percall.log): not modeled, it moves ratios towards 1.
   *
   * call + boundary = 5 us: the floor of one kernel with its sync, just below
   * the fastest call measured (NCCL's 4 KB reduce-scatter, 5.47-5.57 us); the
   * curves carry the rest. The 1 : 4 split is not measured and matters only
   * for plans of several steps, which a 2-GPU node does not run. */
  t->callS = 1 * US;
  t->boundaryS = 4 * US;
  /* One more hop of NCCL's small-message protocol: the 2-hop all-reduce took
   * 6.41 us at 4 KB, the 1-hop all-gather 6.17. */
  t->hopS = 0.2 * US;
  /* A reduce kernel after the group: the direct reduce-scatter at 4 KB took
   * 8.40 us where its group alone (NCCL's all-to-all moves the same 2 KB each
   * way) took 6.51, +1.89; the direct all-reduce 8.86 against the direct
   * all-gather's 7.05 (same 4 KB each way), +1.81 (p2p_graph.log). */
  t->launchS = 1.9 * US;
  /* Copies: a device-to-device copy moved ~4.3 TB/s counting bytes read and
   * written (PyTorch, 8.6 GB in 2.0 ms; this workplace's device notes). */
  t->memBw = 4.3e12;
  /* The 2-input bf16 reduce (fp32 accumulation), read + written: the direct
   * all-reduce at 256 MB took 1109.87 us, its group (the direct all-gather's)
   * 907.18: 200.8 us for 3 x 268 MB = 4.01 TB/s; the direct reduce-scatter
   * 578.62 against 473.34 for its group: 103.4 us for 3 x 134 MB = 3.89 TB/s. */
  t->reduceBw = 3.95e12;

  double rate = relayTopoLinkCap(t, 0, 1);
  /* The baseline's curves: its time is call + boundary + hops x hop + the
   * bytes per peer / (eff x rate) (src/sim/baseline.c), so eff is what is
   * left of each measured time after the fixed part. Hops at A = 2: one,
   * all-reduce two. */
  for (int c = 0; c < RELAY_TOPO_NCOLLS; c++) {
    double fixedS = t->callS + t->boundaryS + (c == 2 ? 2 : 1) * t->hopS;
    relayTopoCurve* cv = &t->collEff[c];
    cv->n = 0;
    for (int i = 0; i < 10; i++)
      curveAdd(cv, perPeer(c, kSizes[i]), effOf(perPeer(c, kSizes[i]), rate, kNcclUs[c][i], fixedS));
  }
  /* relaycc's transfers: a plan step is call + boundary + its transfers. NCCL's
   * all-to-all IS a group of send/recv pairs (relaycc's direct all-to-all
   * measured 0.99-1.01x of it, p2p_graph.log), so its ten sizes give the
   * curve, and the direct all-gather's five add the sizes between them
   * (bytes per peer 4 KB - 256 MB). The direct all-reduce and reduce-scatter
   * (a group plus a reduce) are then predictions, checked by
   * tests/test_route_gpu.c. */
  double stepS = t->callS + t->boundaryS;
  t->p2pEff.n = 0;
  for (int i = 0; i < 10; i++)
    curveAdd(&t->p2pEff, perPeer(3, kSizes[i]), effOf(perPeer(3, kSizes[i]), rate, kNcclUs[3][i], stepS));
  for (int i = 0; i < 5; i++)
    curveAdd(&t->p2pEff, kP2pAgSizes[i], effOf(kP2pAgSizes[i], rate, kP2pAgUs[i], stepS));
  /* After calibration the models reproduce every logged graph-replay time
   * within 3.3% (the direct all-reduce at 1 MB: model 17.61 us, measured
   * 17.05), the native route's within 2.0%, and the speedups the router
   * compares within 3.9% (docs/model.md, tests/test_route_gpu.c); 5% covers
   * them, and is what the router asks of a route before it leaves NCCL's
   * own collective. */
  t->modelErr = 0.05;
  /* Per call (no graph), relaycc's send/recv all-gather plan measured 10.3 us
   * over its graph-replay time at 1 MB and NCCL's native all-gather 6.6 us
   * over its own (docs/perf/raw/2026-11-29-h200x2-final/auto_percall_small.log
   * against auto_graph_small.log): 3.7 us more host work per plan step, which
   * turned a 1.09x graph-replay win into 0.91x per call. */
  t->hostStepS = 3.7e-6;
}
