/*
 * The seed's measured tables (seed 000, docs/design.md "Sources and figures": the
 * sharded relay on RCCL, MI350X, 8 GPUs, bf16, best-of-100, single group,
 * speedup = A-rank RCCL with the other ranks idle / relay), kept as data so
 * the model can be checked against them (test_sim seedtables, relaycc-sim
 * --vs-seed, docs/model.md). Only rows where the relay route ran are kept
 * (the commits say which sizes were on the pure-direct route).
 *
 * "two-group" rows are the "before" columns of the duplex-pipelining commits:
 * the relay at depth 1, the schedule the plan builders' depth-1 form
 * reproduces (but for the copies the seed ran in launches of their own, the
 * own block of single-group all-gather and all-to-all and the 4-active
 * all-reduce's staging copy, which the comparison adds: seedCopySeconds).
 * The RCCL column is relay ms x speedup. "fused" rows (nGroups =
 * 8/A, every rank active in one group and helping the others, always depth 1)
 * come with speedups only: the checked-in fused sweep as the commits quote it.
 */
#include <math.h>
#include <string.h>

#include "seedtab.h"

#include "comm/common.h"
#include "route/table.h"
#include "topo/topo.h"

const relaySeedTable relaySeedTables[] = {
    {relayCollectiveAllGather,
     2,
     1,
     1,
     "pipelined 2-active all-gather commit, before (two-group)",
     13,
     {9, 13.5, 27, 31.5, 36, 63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.111, 0.140, 0.223, 0.251, 0.277, 0.436, 0.463, 0.487, 0.872, 0.927, 1.596, 3.118, 6.181},
     {2.04, 2.29, 2.67, 2.76, 2.79, 3.02, 3.05, 3.05, 3.08, 3.06, 3.15, 3.21, 3.20}},
    {relayCollectiveAllToAll,
     2,
     1,
     1,
     "pipelined 2-active all-to-all commit, before (two-group; <27 MB was direct)",
     11,
     {27, 31.5, 36, 63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.151, 0.167, 0.167, 0.248, 0.267, 0.276, 0.459, 0.486, 0.822, 1.591, 3.119},
     {2.08, 2.06, 2.43, 2.68, 2.56, 2.63, 2.93, 2.96, 3.05, 3.11, 3.16}},
    {relayCollectiveAllReduce,
     2,
     1,
     1,
     "pipelined 2-active all-reduce commit, before (two-group)",
     13,
     {9, 13.5, 27, 31.5, 36, 63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.118, 0.144, 0.226, 0.252, 0.278, 0.437, 0.461, 0.485, 0.853, 0.902, 1.558, 3.081, 6.065},
     {1.91, 2.19, 2.56, 2.65, 2.70, 2.91, 2.94, 2.96, 3.09, 3.12, 3.18, 3.19, 3.24}},
    {relayCollectiveReduceScatter,
     2,
     1,
     1,
     "pipelined 2-active reduce-scatter commit, before (two-group; <27 MB direct)",
     11,
     {27, 31.5, 36, 63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.149, 0.166, 0.178, 0.266, 0.285, 0.297, 0.497, 0.524, 0.915, 1.777, 3.499},
     {2.38, 2.45, 2.59, 2.86, 2.90, 2.91, 3.21, 3.20, 3.00, 2.95, 2.88}},
    {relayCollectiveAllToAll,
     4,
     1,
     1,
     "pipelined 4-active all-to-all commit, before (two-group Latin relay)",
     10,
     {13.5, 27, 36, 63, 72, 135, 144, 256, 512, 1024},
     {0.114, 0.167, 0.201, 0.304, 0.338, 0.576, 0.611, 1.045, 2.031, 4.012},
     {1.12, 1.20, 1.21, 1.28, 1.28, 1.20, 1.20, 1.24, 1.33, 1.32}},
    {relayCollectiveAllGather,
     4,
     1,
     1,
     "pipelined 4-active all-gather commit, before (two-group fan-out)",
     13,
     {9, 13.5, 27, 31.5, 36, 63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.172, 0.222, 0.377, 0.428, 0.480, 0.792, 0.854, 0.907, 1.664, 1.770, 3.306, 7.114, 14.709},
     {1.34, 1.41, 1.58, 1.64, 1.60, 1.64, 1.64, 1.65, 1.64, 1.64, 1.55, 1.42, 1.36}},
    {relayCollectiveReduceScatter,
     4,
     1,
     1,
     "pipelined 4-active reduce-scatter commit, before (two-group; <48 MB direct)",
     8,
     {63, 67.5, 72, 135, 144, 256, 512, 1024},
     {0.356, 0.378, 0.378, 0.652, 0.651, 1.154, 2.369, 4.709},
     {1.09, 1.09, 1.20, 1.21, 1.29, 1.28, 1.17, 1.17}},
    {relayCollectiveAllReduce,
     4,
     1,
     1,
     "pipelined 4-active all-reduce commit, before (two-group flat offload)",
     9,
     {27, 36, 63, 72, 135, 144, 256, 512, 1024},
     {0.227, 0.283, 0.441, 0.488, 0.874, 0.927, 1.601, 3.159, 6.280},
     {1.44, 1.46, 1.56, 1.58, 1.60, 1.59, 1.63, 1.65, 1.66}},
    /* Fused, 4 groups of 2: "re-measured to confirm no change" in the pipelining commits. */
    {relayCollectiveAllGather,
     2,
     4,
     1,
     "fused sweep, quoted in the pipelined 2-active all-gather commit",
     4,
     {27, 63, 135, 1024},
     {0},
     {2.67, 3.02, 3.11, 3.22}},
    {relayCollectiveAllToAll,
     2,
     4,
     1,
     "fused sweep, quoted in the pipelined 2-active all-to-all commit",
     4,
     {27, 63, 135, 1024},
     {0},
     {2.35, 2.67, 2.82, 3.18}},
    {relayCollectiveAllReduce,
     2,
     4,
     1,
     "fused sweep, quoted in the pipelined 2-active all-reduce commit",
     4,
     {27, 63, 135, 1024},
     {0},
     {2.43, 2.75, 2.93, 3.06}},
    {relayCollectiveReduceScatter,
     2,
     4,
     1,
     "fused sweep, quoted in the pipelined 2-active reduce-scatter commit",
     4,
     {27, 63, 135, 1024},
     {0},
     {2.40, 2.77, 3.15, 2.91}},
    /* Fused, 2 groups of 4. */
    {relayCollectiveAllGather,
     4,
     2,
     1,
     "fused sweep, quoted in the pipelined 4-active all-gather commit",
     4,
     {63, 135, 256, 1024},
     {0},
     {1.28, 1.31, 1.32, 1.31}},
    {relayCollectiveAllToAll,
     4,
     2,
     1,
     "fused, after the 4-active all-to-all alignment fix",
     5,
     {27, 36, 256, 512, 1024},
     {0},
     {1.23, 1.24, 1.27, 1.24, 1.29}},
    {relayCollectiveReduceScatter,
     4,
     2,
     1,
     "fused headline at 1 GB (reference section 12)",
     1,
     {1024},
     {0},
     {1.22}},
    {relayCollectiveAllReduce,
     4,
     2,
     1,
     "fused headline at 1 GB (reference section 12)",
     1,
     {1024},
     {0},
     {1.68}},
};

const int relayNumSeedTables = (int)(sizeof relaySeedTables / sizeof relaySeedTables[0]);

/* The measured schedule, where it differs from the plan: a copy the seed's
 * relay ran in a launch of its own, which relaycc's plan does not run (or
 * overlaps with the links); `bytes` is one rank's block (all-reduce: its
 * buffer). Seconds, 0 where the schedules agree.
 *  - Single-group all-gather and all-to-all copied a rank's own block before
 *    the groups (the seed folded it into the group only on the pure-direct
 *    route: "with the offload on ... the diagonal ... must stay a separate
 *    copy"; the A=4 all-to-all relay's "diagonal is always a local
 *    cudaMemcpyAsync", reference 3.6). relaycc's plan moves it as a self pair
 *    inside step 0, which the model overlaps with the links; its fused plans
 *    copy it after step 0, as the seed did.
 *  - The A > 2 all-reduce ran out of place and its flat path first copies
 *    the whole send buffer into the receive buffer ("Out-of-place: seed
 *    recvBuff = sendBuff once, then operate in place", reference 3.3): the
 *    seed's full-exchange commit counts that "sendbuff -> recvbuff staging
 *    copy" among the 4 launches its measured A>2 path paid and says the seeded
 *    reduce "removes the staging copy outright", which only an out-of-place
 *    call pays. The measured relay is slower than the link model by what the
 *    copy costs, at every depth (0.745-0.763 ms at 1 GiB at depths 1, 4 and 8,
 *    the 4-active all-reduce commit's depth table; the copy is 0.816 ms) and
 *    in the fused sweep too. relaycc's plan reads the send buffer and writes
 *    the receive buffer in its steps, so it has no such copy. The 2-active
 *    path needs none either (its reduce writes the receive buffer). */
static double seedCopySeconds(const relaySeedTable* t, const struct relayTopo* topo, size_t bytes) {
  int ownBlock =
      t->nGroups == 1 && (t->coll == relayCollectiveAllGather || t->coll == relayCollectiveAllToAll);
  int stagingCopy = t->coll == relayCollectiveAllReduce && t->nActive > 2;
  if (!ownBlock && !stagingCopy) return 0;
  return topo->launchS + 2.0 * (double)bytes / topo->memBw; /* each byte read and written */
}

relayResult_t relaySeedCompareRun(const relaySeedTable* t, const struct relayTopo* topo,
                                  relaySeedCompare* out) {
  memset(out, 0, sizeof *out);
  int A = t->nActive, G = t->nGroups;
  if (A * G > topo->nGPUs)
    return relaySetError(NULL, relayInvalidArgument, "seed table: %d groups of %d on %d GPUs", G, A,
                         topo->nGPUs);
  int ranks[RELAY_TOPO_MAX_GPUS];
  for (int i = 0; i < A * G; i++) ranks[i] = i;
  double sumR = 0, sumS = 0, biasR = 0, sumB = 0;
  int nTimed = 0;
  for (int i = 0; i < t->nRows; i++) {
    /* The size axis is bytes of per-active-rank input, in MiB; bf16. */
    uint64_t elems = (uint64_t)llround(t->mib[i] * 1048576.0) / 2;
    int perActive = relayCollSendsBlocks(t->coll);
    size_t counts[RELAY_TOPO_MAX_GPUS];
    for (int g = 0; g < G; g++) counts[g] = (size_t)(perActive ? elems / (uint64_t)A : elems);
    planKey k = planKeyInit(t->coll, topo->nGPUs, G, A, ranks, counts, relayBfloat16);
    k.op = relaySum;
    k.route = relayRouteRelay;
    k.depth = t->depth;
    relayPlan* p = NULL;
    relayResult_t r = relayPlanBuild(&k, &p);
    if (r == relayNotSupported) return relayNotSupported;
    if (r != relaySuccess) return r;
    relaySimResult sr;
    r = relaySimRun(p, topo, &sr);
    relayPlanFree(p);
    if (r != relaySuccess) {
      relaySimResultFree(&sr);
      return r;
    }
    relayBaselineResult br;
    r = relayBaselineRun(&k, topo, &br);
    double copyS = seedCopySeconds(t, topo, counts[0] * relayTypeSize(k.dtype));
    double model = (sr.totalS + copyS) * 1e3;
    relaySimResultFree(&sr);
    if (r != relaySuccess) return r;
    out->modelRelayMs[i] = model;
    out->modelBaseMs[i] = br.totalS * 1e3;
    double es = (out->modelBaseMs[i] / model) / t->speedup[i] - 1;
    sumS += fabs(es);
    if (fabs(es) > out->maxSpeedupErr) out->maxSpeedupErr = fabs(es);
    if (t->relayMs[i] > 0) {
      double er = model / t->relayMs[i] - 1;
      double eb = out->modelBaseMs[i] / (t->relayMs[i] * t->speedup[i]) - 1;
      sumB += fabs(eb);
      if (fabs(eb) > out->maxBaseErr) out->maxBaseErr = fabs(eb);
      sumR += fabs(er);
      biasR += er;
      if (fabs(er) > out->maxRelayErr) out->maxRelayErr = fabs(er);
      nTimed++;
    }
  }
  out->n = nTimed;
  if (nTimed) {
    out->meanRelayErr = sumR / nTimed;
    out->biasRelayErr = biasR / nTimed;
    out->meanBaseErr = sumB / nTimed;
  }
  if (t->nRows) out->meanSpeedupErr = sumS / t->nRows;
  return relaySuccess;
}
