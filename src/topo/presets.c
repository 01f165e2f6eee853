/*
 * The topology presets, one node's (h200, h200x2, mi350x, mi300x, cpu) and the
 * networks' (several nodes). Every preset figure below says where it comes
 * from. "seed" is seed 000 and "reference" the public relay implementation it
 * describes (docs/design.md, "Sources and figures": the sharded-relay commits
 * measured on MI350X, 8 GPUs, bf16, best-of-100).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "topo/gpu.h"
#include "topo/topo.h"
#include "topo/units.h"

static void setAllLinks(struct relayTopo* t, int count, double bw) {
  for (int s = 0; s < t->nGPUs; s++)
    for (int d = 0; d < t->nGPUs; d++) {
      if (s == d) continue;
      t->linkCount[s * t->nGPUs + d] = count;
      t->linkBw[s * t->nGPUs + d] = bw;
    }
}

static void setAllPorts(struct relayTopo* t, double inj, double ej) {
  for (int g = 0; g < t->nGPUs; g++) {
    t->injBw[g] = inj;
    t->ejBw[g] = ej;
  }
}

/* ---- presets ------------------------------------------------------------ */

/* An 8-GPU AMD mesh as the seed measured it on MI350X. */
static void presetAmdMesh(struct relayTopo* t) {
  /* Fully connected: 7 XGMI links per GPU, one to each peer. 51.6 GB/s per
   * direction is the seed's "measured 51.6 GB/s per-link ceiling" (the 2-active
   * reduce-scatter overlap commit); the reference's comments round it to
   * "one XGMI link carries about 50 GB/s". It also fits the RCCL baseline: a
   * 2-rank all-gather of 9 MiB measured 0.225 ms (0.111 ms relay at 2.03x),
   * and 41 us + 9 MiB / 51.6 GB/s = 0.224 ms. */
  setAllLinks(t, 1, 51.6 * GBS);
  /* One grouped-P2P step: "a grouped-P2P launch plus work-FIFO upload plus
   * fence is ~25 us" (reference section 4; the seed's pipelined all-gather
   * commit). Note the reference prices it as kRelayPipelineBoundaryBytes =
   * 768 KiB "at ~50 GB/s", which is 15.7 us, not 25: the byte constant was
   * tuned on depth choices, the 25 us is the time. The time fits the tables:
   * the two-group 2-active all-gather (before pipelining) measured 0.111 ms
   * at 9 MiB, 0.872 at 135 MiB and 6.181 at 1 GiB; 13 us + 2 x 25 us + count/4
   * / 51.6 GB/s + the diagonal copy (2 x count / memBw) gives 0.116, 0.856
   * and 6.076 ms. */
  t->boundaryS = 25 * US;
  /* The rest of a call: "one ncclGroup of P2P ops costs ~0.038 ms" (seed,
   * one-shot reduce-scatter commit) = 13 us + one 25 us boundary. Check: the
   * two-group 2-active all-gather at 9 MiB measured 0.111 ms; 13 + 2 x 25 +
   * (9 MiB / 4 on the busiest link) / 51.6 GB/s = 0.109 ms. */
  t->callS = 13 * US;
  /* "the ~11 us saved across two removed launches prices a launch at
   * ~5.5 us" (seed, 4-active all-reduce full-exchange commit). */
  t->launchS = 5.5 * US;
  /* The 2-active reduce-scatter's closing reduce at 1 GB took 0.608 ms (seed,
   * overlap commit): 2 x 512 MiB read + 512 MiB written = 1.61e9 bytes, i.e.
   * 2.65 TB/s counted as bytes read plus written. */
  t->memBw = 2.65e12;
  /* RCCL's small-message latency per hop: its 2-rank all-gather at 4 KB is
   * 0.041 ms (0.038 ms relay at 1.08x, seed diagonal-folding commit) against
   * 0.038 ms for one group: ~3 us for its one hop. */
  t->hopS = 3 * US;
  /* The depth model's stage: the seed's kRelayPipelineBoundaryBytes = 768 KiB
   * at 51.6 GB/s (15.2 us). The seed calls it "~25 us at ~50 GB/s", which
   * does not multiply out (25 us is 1.23 MiB); the bytes were tuned on
   * measured depth choices and are what fits them: 768 KiB picks the
   * measured-best depth at every size of its sweeps (depth 8 from 256 MB at
   * 2 active), and the 4-active all-reduce's measured curve pins its stage
   * (two boundaries) between 1.33 and 1.875 MiB, one boundary between 0.67
   * and 0.94 MiB: 1.23 MiB falls outside, 768 KiB inside. The boundary above
   * stays 25 us: it is the time a two-group step costs. */
  t->stageS = 786432.0 / (51.6 * GBS);
  /* kRelayMaxPipelineTiles = 8: depth 16 was a wash (2-active all-reduce at
   * 1 GB: 4.252 ms at 8, 4.253 at 16) or a loss (4-active all-to-all at
   * 512 MB: 1.836 -> 1.993 ms). */
  t->maxDepth = 8;
  /* RCCL budgets P2P channels per operation (seed, the 4-active
   * reduce-scatter's operation granularity commit): its pipelined form ran at
   * 56% of the 51.6 GB/s link ceiling against 73-83% for the other seven
   * shapes, because each group an active rank sent 15 operations (three of w
   * to each of 4 helpers, one of 3w to each of 3 actives) and the single-op
   * links got a third of the channels of the three-op ones. With each
   * operation at B/15, the single-op links gating the step and the rest of
   * the loss what the other shapes lose (1/0.78 - 1 of the link time at their
   * middle 78%): 1/0.56 = 51.6 / (B/15) + (1/0.78 - 1), B = 515 GB/s; 512 =
   * the 64 channels RCCL's P2P resolves to (reference section 12) x 8 GB/s.
   * It binds only above 512 / 51.6 = 9.9 operations a step: a 2-active relay
   * step sends 7 (73 GB/s each, above the link: the seed measured those at
   * the link rate), the fix's 21 w-sized operations get 3 x 24.4 GB/s per
   * link (none gated, as measured). Against the seed's tables
   * (docs/model.md) it takes the single-group 4-active reduce-scatter from
   * 35.6% to 9.9% worst speedup error, the fused 4-active all-gather from
   * 41.1% to 4.2% and the fused reduce-scatter from 30.0% to 0.1%; the
   * tables' fit is flat within 480-520 GB/s. */
  t->opBudgetBw = 512 * GBS;
}

static void presetMi350x(struct relayTopo* t) { presetAmdMesh(t); }

static void presetMi300x(struct relayTopo* t) {
  /* MI300X: the same 8-GPU mesh (7 Infinity Fabric links per GPU, 16 lanes at
   * 32 Gb/s = 128 GB/s bidirectional, 64 GB/s per direction peak) driven by
   * the same RCCL, so the links, boundary, call and launch figures are the
   * seed's MI350X ones: an assumption, not a measurement of ours. */
  presetAmdMesh(t);
  /* HBM3 at 5.3 TB/s peak against MI350X's 8 TB/s HBM3E: the measured
   * 2.65 TB/s scaled by 5.3/8. */
  t->memBw = 2.65e12 * 5.3 / 8.0;
}

static void presetH200(struct relayTopo* t) {
  /* 8 GPUs on NVSwitch: each GPU reaches the switch with 18 NVLink-4 links of
   * 26.5625 GB/s per direction = 478.125 GB/s injection and ejection; the
   * switch is non-blocking, so only the ports bound a transfer (the signaling
   * rate; the 2-GPU machine measured 380 GB/s of 478 one way, see h200x2). */
  t->hasSwitch = 1;
  setAllPorts(t, 18 * 26.5625 * GBS, 18 * 26.5625 * GBS);
  /* Costs measured on our 2-GPU H200 machine (h200x2 below): a CUDA-graph
   * replay of one NCCL call costs ~5-6 us, which is the GPU-side cost of one
   * kernel with its sync: the boundary. A plain call costs ~13-19 us: the
   * other ~10 us is host work, once per call. */
  t->boundaryS = 6 * US;
  t->callS = 10 * US;
  /* Rough: a reduce/copy kernel queued behind another on one stream costs a
   * few us of launch and drain; not measured here. */
  t->launchS = 3 * US;
  /* A device-to-device copy on H200 moved ~4.3 TB/s counting bytes read and
   * written (PyTorch, 8.6 GB in 2.0 ms; this workplace's device notes,
   * KINDS.md, 2026-10-28). */
  t->memBw = 4.3e12;
  /* Rough: NCCL's LL protocol over NVLink, ~1.5 us a hop, which with the
   * figures above gives 16-19 us for a small 2-rank all-reduce (measured
   * 13-19 us). */
  t->hopS = 1.5 * US;
}

static void presetH200x2(struct relayTopo* t) {
  /* The 2-GPU H200 machine we have: NV18 (18 NVLinks between the pair).
   * Measured: 380 GB/s one way by copy-engine peer copy, 370 GB/s each way
   * with both directions at once. Collectives load both directions, so the
   * link is modeled at 370 GB/s per direction (18 links of 20.56 GB/s).
   * NCCL's kernels move less than that, by an amount that depends on size
   * (nccl-tests' 1 GB all-reduce reached 329 GB/s busbw, 89%; relaycc-bench's
   * NCCL all-reduce a third of the link at 1 MB):
   * the costs and the efficiency curves are calibrated on relaycc-bench's
   * graph replays on this machine (src/topo/calib.c, docs/model.md). */
  setAllLinks(t, 18, 370.0 / 18.0 * GBS);
  relayTopoCalibrateH200x2(t);
}

static void presetCpu(struct relayTopo* t) {
  /* The shm transport: one process per rank, every transfer a memcpy into a
   * per-pair ring by the sender and out of it by the receiver. ROUGH figures
   * from relaycc-bench on a 2-core AMD EPYC CI-class machine shared with other
   * work (direct route, bf16, min of 10): a 2-rank all-gather moved 1 MiB
   * each way in 46 us and 16 MiB in 1.39 ms (~12 GB/s per rank each way once
   * out of cache), so 12 GB/s ports. All ranks share the cores and one memory
   * bus: 2 ranks moved 24 GB/s in all, 8 ranks (7 peers each, 16 MiB) 16 GB/s
   * and 4 ranks 11 GB/s (more busy processes than cores). The fabric takes
   * the 8-rank figure, the case where helpers work too. */
  t->hasSwitch = 1;
  setAllPorts(t, 12 * GBS, 12 * GBS);
  t->fabricBw = 16 * GBS;
  /* A 2-rank all-gather of 4 KiB took 3.5 us in all: ~1 us of call, ~2.5 us
   * for the group's handshake. With more ranks than cores the waits fall back
   * to futex sleeps (4-rank calls of 4 KiB took 12-50 us): not modeled. */
  t->boundaryS = 2.5 * US;
  t->callS = 1 * US;
  t->launchS = 0.2 * US; /* a local op is a function call */
  /* memcpy: one core copies ~23 GB/s (64 MiB, read + written = 46 GB/s). The
   * reduce, vectorized since 2026-12-04 (reduce_host.c), reduced 2 x 32 MiB into
   * one (3 streams counted) at 22 GB/s in bf16 and 11 GB/s in float (64 MiB,
   * 2 cores at load ~12), 31 and 69 GB/s in cache; it was ~5 GB/s in bf16. */
  t->memBw = 2 * 23 * GBS;
  t->reduceBw = 16 * GBS;
  t->hopS = 2 * US;
  /* The one-shot's cost per byte at 2 ranks, medians of 400 calls: 0.55-0.6 us per KiB a rank pushes on the
   * 2-core EPYC (all-gather 16 KiB 9.4-11.3 us, 4 KiB 2.5-3.3), 0.28 us on the 16-core Xeon of
   * docs/perf/2026-12-04-cpu-peers-16core.md (6.0 and 2.6 us), against ~0.1 us on the one-copy path
   * (10-12 GB/s): 1.8 and 3.6 GB/s for push and read together, 12 GB/s of it the push. 4 GB/s puts the
   * pair's crossover near 6 KiB of each rank's input for all-gather and all-reduce and near 12 KiB for
   * all-to-all and reduce-scatter; the EPYC's were 6, 8, 16 and 8-16 KiB. */
  t->stagedReadBw = 4 * GBS;
}

typedef struct {
  const char* name;
  int nGPUs;
  void (*fill)(struct relayTopo*);
} presetDef;

static const presetDef kPresets[] = {
    {"mi350x", 8, presetMi350x}, {"mi300x", 8, presetMi300x}, {"h200", 8, presetH200},
    {"h200x2", 2, presetH200x2}, {"cpu", 8, presetCpu},
};
#define NPRESETS ((int)(sizeof kPresets / sizeof kPresets[0]))

const char* const* relayTopoPresetNames(void) {
  static const char* names[NPRESETS + 1];
  for (int i = 0; i < NPRESETS; i++) names[i] = kPresets[i].name;
  names[NPRESETS] = NULL;
  return names;
}

relayResult_t relayTopoPreset(const char* name, struct relayTopo** out) {
  *out = NULL;
  for (int i = 0; i < NPRESETS; i++) {
    if (strcmp(name, kPresets[i].name) != 0) continue;
    RELAY_CHECK(relayTopoCreate(kPresets[i].nGPUs, name, out));
    kPresets[i].fill(*out);
    return relaySuccess;
  }
  return relayInvalidArgument;
}

/* The seed 003 machine: nodes of 8 MI355X with 8 AMD AINIC (400 Gb/s), RCCL
 * with PXN on. Figures are fits to the seed's scatter tables (RCCL on 2-8
 * nodes, 16 MB - 16 GB, root 0), not measurements of ours:
 *   - inside a node, the mi350x mesh (the seed measured no intra-node
 *     figure; MI355X has the same 7 XGMI links per GPU);
 *   - nicBw 41.2 GB/s per NIC: on 4 nodes scatter reached 412 GB/s busbw
 *     from 1 GB on with one part per peer, bound by the root node's NICs:
 *     24 of its 31 peers are remote, busbw = size * 31/32 / time, so the
 *     NICs moved 412 * (24 * 32) / (31 * 31) = 329 GB/s = 8 x 41.2;
 *   - chanBw 16.4 GB/s per channel: on 3 nodes one part per peer (23 flows,
 *     16 remote) took 1.2-1.3x the time of two (46 flows, NIC-bound), so 16
 *     channels moved 329 / 1.25 = 263 GB/s;
 *   - chanShare 0.7: on 4 nodes 2 parts per peer (62 flows on 32 channels,
 *     2 per channel) took 1.16-1.21x the time of 1 part; with 48 of the 62
 *     flows remote, 32 x 16.4 x 0.7 x 48/62 = 284 GB/s = 329 / 1.16. The
 *     seed did not find the mechanism ("the connection setup logs of fast
 *     and slow runs are identical"): this is a fit, not a cause;
 *   - the P2P pool and per-peer count RCCL computed there (the seed's table):
 *     32 channels and 2 per peer on 2 and 4 nodes, 64 and 4 on 3, 64 and 2
 *     on 5 and 8; other node counts take 64 and 2 (an assumption). */
static relayResult_t netMi355xAinic(int nNodes, struct relayTopo** out) {
  struct relayTopo* node;
  RELAY_CHECK(relayTopoPreset("mi350x", &node));
  node->chanBw = 16.4 * GBS;
  node->chanShare = 0.7;
  node->netsByBw = 1;
  node->p2pChannels = nNodes == 2 || nNodes == 4 ? 32 : 64;
  node->p2pPerPeer = nNodes == 3 ? 4 : 2;
  relayResult_t r = relayTopoMultiNode(node, nNodes, 8, 41.2 * GBS, 1, out);
  relayTopoFree(node);
  if (r == relaySuccess) snprintf((*out)->name, sizeof(*out)->name, "mi355x-ainic-x%d", nNodes);
  return r;
}

typedef struct {
  const char* name;
  relayResult_t (*build)(int nNodes, struct relayTopo** out);
} netPresetDef;

static const netPresetDef kNetPresets[] = {{"mi355x-ainic", netMi355xAinic}};
#define NNETPRESETS ((int)(sizeof kNetPresets / sizeof kNetPresets[0]))

const char* const* relayTopoNetPresetNames(void) {
  static const char* names[NNETPRESETS + 1];
  for (int i = 0; i < NNETPRESETS; i++) names[i] = kNetPresets[i].name;
  names[NNETPRESETS] = NULL;
  return names;
}

relayResult_t relayTopoNetPreset(const char* name, int nNodes, struct relayTopo** out) {
  *out = NULL;
  for (int i = 0; i < NNETPRESETS; i++)
    if (name && strcmp(name, kNetPresets[i].name) == 0) return kNetPresets[i].build(nNodes, out);
  return relaySetError(NULL, relayInvalidArgument, "network preset '%s': unknown (known: mi355x-ainic)",
                       name ? name : "(null)");
}
