/*
 * The baseline model: the collective a user would otherwise run, NCCL/RCCL on
 * a communicator of just the A active ranks with the other GPUs idle (the
 * reference benchmark's "NCCL" column). Every relaycc prediction is printed as
 * a ratio against it, so both sides use the same topology figures.
 *
 * Two models, the lesser wins, as NCCL's tuner picks per size:
 *   ring:   the bandwidth-optimal algorithm. Each rank moves (A-1)/A of the
 *           data per phase (all-reduce: two phases), spread over every link
 *           among the actives (NCCL/RCCL build several rings over different
 *           links: a 4-rank all-gather of 1 GiB on MI350X took ~20 ms, i.e.
 *           3 GiB into each rank at 3 x ~54 GB/s, all three links busy; seed,
 *           4-active all-gather table). Latency: one hop per ring step.
 *   direct: every rank sends to every peer at once (all-to-all's only form;
 *           all-reduce as one-shot: each rank gets all A inputs and reduces
 *           them, (A-1)x the bytes of a ring phase but one hop).
 * Each is callS + boundaryS (one kernel) + hops * hopS + the fluid model's
 * time for its flows among the actives (+ the one-shot's reduce at memory
 * bandwidth). On a calibrated topology (h200x2) the flows carry bytes / the
 * measured efficiency of the library's kernel for this collective at that
 * size, and the algorithm is the one it was calibrated as. nGroups > 1 runs
 * the groups at once, as the reference's fused sweep compares against
 * nGroups concurrent A-rank NCCL calls.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "sim/sim.h"

const char* relayBaselineAlgoName(int algo) { return algo == RELAY_BASE_DIRECT ? "direct" : "ring"; }

/* Runs one algorithm: every active rank of every group sends perPair bytes to
 * each of its A-1 peers; returns the fluid time (0 when A == 1). */
static relayResult_t pairFlowsTime(const planKey* key, const struct relayTopo* topo, const double* perPair,
                                   double* out) {
  int A = key->nActive, G = key->nGroups;
  int nf = G * A * (A - 1);
  *out = 0;
  if (nf == 0) return relaySuccess;
  int* src = malloc((size_t)nf * sizeof *src);
  int* dst = malloc((size_t)nf * sizeof *dst);
  double* bytes = malloc((size_t)nf * sizeof *bytes);
  if (!src || !dst || !bytes) {
    free(src);
    free(dst);
    free(bytes);
    return relaySystemError;
  }
  int k = 0;
  for (int g = 0; g < G; g++)
    for (int i = 0; i < A; i++)
      for (int j = 0; j < A; j++) {
        if (i == j) continue;
        src[k] = planActiveRank(key, g, i);
        dst[k] = planActiveRank(key, g, j);
        bytes[k] = perPair[g];
        k++;
      }
  relayResult_t r = relaySimFlows(topo, nf, src, dst, bytes, out, NULL);
  free(src);
  free(dst);
  free(bytes);
  return r;
}

relayResult_t relayBaselineRun(const planKey* key, const struct relayTopo* topo, relayBaselineResult* out) {
  memset(out, 0, sizeof *out);
  size_t es = relayTypeSize(key->dtype);
  int A = key->nActive, G = key->nGroups;
  if (es == 0 || A < 1 || G < 1 || (size_t)G * (size_t)A > (size_t)topo->nGPUs || !key->ranks || !key->counts)
    return relaySetError(NULL, relayInvalidArgument,
                         "baseline: bad key (dtype %d, %d groups of %d, %d GPUs in '%s')", (int)key->dtype, G,
                         A, topo->nGPUs, topo->name);
  for (int i = 0; i < G * A; i++)
    if (key->ranks[i] < 0 || key->ranks[i] >= topo->nGPUs)
      return relaySetError(NULL, relayInvalidArgument, "baseline: rank %d not on topology '%s'",
                           key->ranks[i], topo->name);
  double* ringPair = calloc((size_t)G, sizeof *ringPair);
  double* directPair = calloc((size_t)G, sizeof *directPair);
  if (!ringPair || !directPair) {
    free(ringPair);
    free(directPair);
    return relaySystemError;
  }
  /* Bytes each rank sends each peer. Counts follow the API: all-gather and
   * all-reduce count the rank's buffer, reduce-scatter its recv block,
   * all-to-all one segment. */
  double maxBuf = 0; /* the largest group's per-rank buffer, for the local work */
  for (int g = 0; g < G; g++) {
    double c = (double)key->counts[g] * (double)es;
    switch (key->coll) {
      case relayCollectiveAllGather:
      case relayCollectiveReduceScatter:
      case relayCollectiveAllToAll:
        /* blocks out of every rank either way. */
        ringPair[g] = directPair[g] = c;
        break;
      case relayCollectiveAllReduce:
        /* Ring: reduce-scatter then all-gather of c/A blocks, 2(A-1)/A * c
         * out of every rank. One-shot: the whole buffer to each peer. */
        ringPair[g] = 2 * c / A;
        directPair[g] = c;
        break;
      case relayCollectiveBroadcast:
      case relayCollectiveReduce:
        /* NCCL's broadcast and reduce: a pipelined chain from (to) the root, the whole buffer on each
         * hop; direct: the root and each peer exchange it. At A = 2 both are a plain copy. */
        ringPair[g] = directPair[g] = c;
        break;
      default:
        free(ringPair);
        free(directPair);
        return relaySetError(NULL, relayInvalidArgument, "baseline: unknown collective %d", (int)key->coll);
    }
    if (c > maxBuf) maxBuf = c;
  }
  double egressRing = ringPair[0] * (A - 1), egressDirect = directPair[0] * (A - 1);
  /* A calibrated topology says how much of the link rate the library's
   * kernel reaches at each size (topo.h, src/topo/calib.c): the flows move
   * bytes / efficiency, by the bytes each peer gets. */
  /* Broadcast and reduce have no curve of their own (RELAY_TOPO_NCOLLS: the layout collectives): a chain
   * hop moves what a ring all-gather (reduce-scatter) hop does, and takes that kernel's curve. */
  relayCollective_t curve = key->coll == relayCollectiveBroadcast ? relayCollectiveAllGather
                            : key->coll == relayCollectiveReduce  ? relayCollectiveReduceScatter
                                                                  : key->coll;
  const relayTopoCurve* eff = &topo->collEff[curve];
  for (int g = 0; g < G; g++) {
    ringPair[g] /= relayTopoCurveAt(eff, ringPair[g]);
    directPair[g] /= relayTopoCurveAt(eff, directPair[g]);
  }
  double ringFlow = 0, directFlow = 0;
  relayResult_t r = pairFlowsTime(key, topo, ringPair, &ringFlow);
  if (r == relaySuccess) r = pairFlowsTime(key, topo, directPair, &directFlow);
  free(ringPair);
  free(directPair);
  if (r != relaySuccess) return r;

  double fixed = topo->callS + topo->boundaryS;
  int ringHops = key->coll == relayCollectiveAllReduce ? 2 * (A - 1) : A - 1;
  double ring = fixed + ringHops * topo->hopS + ringFlow;
  double direct = fixed + (A > 1 ? topo->hopS : 0) + directFlow;
  if (key->coll == relayCollectiveAllReduce && A > 1) /* one-shot reduce of A inputs */
    direct += (A + 1) * maxBuf / (topo->reduceBw > 0 ? topo->reduceBw : topo->memBw);
  if (A == 1) {
    /* Nothing crosses a link: NCCL copies the rank's own block if out of place. */
    ring = direct = fixed + 2 * maxBuf / topo->memBw;
  }
  if (key->coll == relayCollectiveAllToAll) ring = direct; /* NCCL's all-to-all is pairwise only */
  /* A measured curve is the library's own choice of algorithm at each size,
   * priced as the ring (all-to-all: pairwise) it was calibrated as: no
   * second guess. */
  int calibrated = eff->n > 0 && A > 1;
  out->ringS = ring;
  out->directS = direct;
  if ((!calibrated && direct < ring) || key->coll == relayCollectiveAllToAll) {
    out->algo = RELAY_BASE_DIRECT;
    out->totalS = direct;
    out->egressBytes = egressDirect;
  } else {
    out->algo = RELAY_BASE_RING;
    out->totalS = ring;
    out->egressBytes = egressRing;
  }
  return relaySuccess;
}
