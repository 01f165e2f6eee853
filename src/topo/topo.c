/*
 * Topology presets, the text format and the queries. docs/model.md documents
 * the format and what each figure means; every preset figure below says where
 * it comes from. "seed" is ../shared/seeds/000_c8877875f29eedb7.txt (the
 * sharded-relay commits measured on MI350X, 8 GPUs, bf16, best-of-100);
 * "reference" is ../shared/reference/rcclx-relay.md.
 */
#include "topo/topo.h"

#include <stdatomic.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "topo/gpu.h"

#define GBS 1e9 /* the text format's bandwidth unit: GB/s */
#define US 1e-6 /* and its time unit */

static atomic_ullong gTopoGeneration;
uint64_t relayTopoGeneration(void) { return (uint64_t)atomic_load(&gTopoGeneration); }

relayResult_t relayTopoCreate(int nGPUs, const char* name, struct relayTopo** out) {
  atomic_fetch_add(&gTopoGeneration, 1);
  *out = NULL;
  if (nGPUs < 1 || nGPUs > RELAY_TOPO_MAX_GPUS) return relayInvalidArgument;
  struct relayTopo* t = calloc(1, sizeof *t);
  if (!t) return relaySystemError;
  size_t nn = (size_t)nGPUs * (size_t)nGPUs;
  t->nGPUs = nGPUs;
  t->linkCount = calloc(nn, sizeof *t->linkCount);
  t->linkBw = calloc(nn, sizeof *t->linkBw);
  t->injBw = calloc((size_t)nGPUs, sizeof *t->injBw);
  t->ejBw = calloc((size_t)nGPUs, sizeof *t->ejBw);
  if (!t->linkCount || !t->linkBw || !t->injBw || !t->ejBw) {
    relayTopoFree(t);
    return relaySystemError;
  }
  snprintf(t->name, sizeof t->name, "%s", name ? name : "custom");
  *out = t;
  return relaySuccess;
}

void relayTopoFree(struct relayTopo* t) {
  atomic_fetch_add(&gTopoGeneration, 1);
  if (!t) return;
  free(t->linkCount);
  free(t->linkBw);
  free(t->injBw);
  free(t->ejBw);
  free(t);
}

/* Every scalar field of s into t (a struct copy, so a field added later is
 * never forgotten), t keeping its own arrays, GPU count and name. */
static void copyScalars(struct relayTopo* t, const struct relayTopo* s) {
  const struct relayTopo keep = *t;
  *t = *s;
  t->nGPUs = keep.nGPUs;
  memcpy(t->name, keep.name, sizeof t->name);
  t->linkCount = keep.linkCount;
  t->linkBw = keep.linkBw;
  t->injBw = keep.injBw;
  t->ejBw = keep.ejBw;
}

relayResult_t relayTopoClone(const struct relayTopo* s, struct relayTopo** out) {
  RELAY_CHECK(relayTopoCreate(s->nGPUs, s->name, out));
  struct relayTopo* t = *out;
  size_t nn = (size_t)s->nGPUs * (size_t)s->nGPUs;
  memcpy(t->linkCount, s->linkCount, nn * sizeof *t->linkCount);
  memcpy(t->linkBw, s->linkBw, nn * sizeof *t->linkBw);
  memcpy(t->injBw, s->injBw, (size_t)s->nGPUs * sizeof *t->injBw);
  memcpy(t->ejBw, s->ejBw, (size_t)s->nGPUs * sizeof *t->ejBw);
  copyScalars(t, s);
  return relaySuccess;
}

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
   * reduce-scatter overlap commit); the reference (section 12) rounds it to
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
   * bf16 reduce is compute-bound: a 2-rank all-reduce of 16 MiB spent ~9 ms
   * reducing 3 x 16 MiB (~5 GB/s; float ~10 GB/s). */
  t->memBw = 2 * 23 * GBS;
  t->reduceBw = 6 * GBS;
  t->hopS = 2 * US;
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

/* ---- several nodes ------------------------------------------------------ */

relayResult_t relayTopoMultiNode(const struct relayTopo* node, int nNodes, int nicsPerNode, double nicBw, int pxn,
                                 struct relayTopo** out) {
  *out = NULL;
  int G = node->nGPUs;
  if (nNodes < 1 || G * nNodes > RELAY_TOPO_MAX_GPUS || (node->nNodes > 1))
    return relaySetError(NULL, relayInvalidArgument, "topology: %d nodes of '%s' (%d GPUs, %d node%s): at most %d GPUs",
                         nNodes, node->name, G, node->nNodes > 1 ? node->nNodes : 1, node->nNodes > 1 ? "s" : "",
                         RELAY_TOPO_MAX_GPUS);
  if (nNodes > 1 && node->fabricBw > 0)
    return relaySetError(NULL, relayInvalidArgument,
                         "topology '%s': a fabric cap bounds one node's transfers (the shm transport's memory bus); it "
                         "has no multi-node meaning",
                         node->name);
  if (nNodes > 1 && !(nicsPerNode >= 1 && nicBw > 0 && isfinite(nicBw)))
    return relaySetError(NULL, relayInvalidArgument, "topology: %d nodes need NICs (%d of %g GB/s)", nNodes,
                         nicsPerNode, nicBw / GBS);
  char name[RELAY_TOPO_NAME_MAX];
  snprintf(name, sizeof name, "%.40sx%d", node->name, nNodes);
  relayResult_t r = relayTopoCreate(G * nNodes, name, out);
  if (r != relaySuccess) return relaySetError(NULL, r, "topology: out of memory");
  struct relayTopo* t = *out;
  int n = t->nGPUs;
  for (int k = 0; k < nNodes; k++)
    for (int i = 0; i < G; i++) {
      int a = k * G + i;
      t->injBw[a] = node->injBw[i];
      t->ejBw[a] = node->ejBw[i];
      for (int j = 0; j < G; j++) {
        if (i == j) continue;
        t->linkCount[a * n + k * G + j] = node->linkCount[i * G + j];
        t->linkBw[a * n + k * G + j] = node->linkBw[i * G + j];
      }
    }
  copyScalars(t, node);
  /* The calibration was fitted on one node's links (its transfers and its
   * library's collectives there); it says nothing of transfers that cross
   * NICs, so a multi-node model runs on the plain link figures. */
  memset(&t->p2pEff, 0, sizeof t->p2pEff);
  memset(t->collEff, 0, sizeof t->collEff);
  t->modelErr = 0;
  t->hostStepS = 0;
  t->nNodes = nNodes;
  t->nicsPerNode = nNodes > 1 ? nicsPerNode : 0;
  t->nicBw = nNodes > 1 ? nicBw : 0;
  t->pxn = nNodes > 1 ? (pxn != 0) : 0;
  t->netLatS = nNodes > 1 ? RELAY_TOPO_NET_LAT_S : 0;
  return relaySuccess;
}

double relayTopoNicCap(const struct relayTopo* t) {
  if (t->nNodes <= 1 || t->nicsPerNode < 1) return 0.0;
  double node = (double)t->nicsPerNode * t->nicBw;
  return t->pxn ? node : node / (double)(t->nGPUs / t->nNodes);
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
  if (r == relaySuccess) snprintf((*out)->name, sizeof (*out)->name, "mi355x-ainic-x%d", nNodes);
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

/* ---- queries ------------------------------------------------------------ */

int relayTopoReachable(const struct relayTopo* t, int s, int d) {
  if (s < 0 || d < 0 || s >= t->nGPUs || d >= t->nGPUs) return 0;
  if (s == d) return 1;
  if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d)) return relayTopoNicCap(t) > 0;
  return t->linkCount[s * t->nGPUs + d] > 0 || t->hasSwitch;
}

double relayTopoPairRate(const struct relayTopo* t, int s, int d) {
  if (!relayTopoReachable(t, s, d)) return 0.0;
  if (s == d) return t->memBw / 2;
  if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d)) return relayTopoNicCap(t);
  double r = INFINITY;
  double link = relayTopoLinkCap(t, s, d);
  if (link > 0) r = link;
  if (t->injBw[s] > 0 && t->injBw[s] < r) r = t->injBw[s];
  if (t->ejBw[d] > 0 && t->ejBw[d] < r) r = t->ejBw[d];
  if (t->fabricBw > 0 && t->fabricBw < r) r = t->fabricBw;
  return r;
}

/* The text format's names of the curves: p2p, then relayCollective_t 0..3. */
static const char* const kCurveNames[RELAY_TOPO_NCOLLS + 1] = {"p2p", "allgather", "reducescatter", "allreduce",
                                                               "alltoall"};

double relayTopoCurveAt(const relayTopoCurve* c, double bytes) {
  if (!c || c->n <= 0) return 1.0;
  if (bytes <= c->bytes[0]) return c->eff[0];
  int last = c->n - 1;
  if (bytes >= c->bytes[last]) return c->eff[last];
  int i = 0;
  while (bytes > c->bytes[i + 1]) i++;
  if (bytes == c->bytes[i + 1]) return c->eff[i + 1]; /* the measured points exactly */
  /* A power law between the two points: NCCL's efficiency rises with size
   * roughly geometrically, and this keeps it positive. */
  double x = log(bytes / c->bytes[i]) / log(c->bytes[i + 1] / c->bytes[i]);
  return exp(log(c->eff[i]) + x * log(c->eff[i + 1] / c->eff[i]));
}

static int errf(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int relayTopoCheck(const struct relayTopo* t, char* err, size_t errlen) {
  int n = t->nGPUs;
  if (n < 1 || n > RELAY_TOPO_MAX_GPUS) return errf(err, errlen, "gpus %d out of 1..%d", n, RELAY_TOPO_MAX_GPUS);
  if (t->nNodes < 0 || (t->nNodes > 1 && n % t->nNodes != 0))
    return errf(err, errlen, "nodes %d must divide gpus %d", t->nNodes, n);
  if (t->nNodes > 1) {
    if (t->nicsPerNode < 1 || !(t->nicBw > 0 && isfinite(t->nicBw)))
      return errf(err, errlen, "%d nodes need nics_per_node >= 1 and nic_gbs > 0", t->nNodes);
    if (t->fabricBw > 0) return errf(err, errlen, "a fabric cap is one node's: not with %d nodes", t->nNodes);
    for (int s = 0; s < n; s++)
      for (int d = 0; d < n; d++)
        if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d) && t->linkCount[s * n + d] > 0)
          return errf(err, errlen, "link %d %d: GPUs of different nodes reach each other over the network only", s, d);
  }
  if (t->netsByBw < 0) return errf(err, errlen, "nets_by_bw must be >= 0");
  if (!(t->opBudgetBw >= 0 && isfinite(t->opBudgetBw)))
    return errf(err, errlen, "op_budget_gbs must be >= 0");
  if (!(t->chanBw >= 0 && isfinite(t->chanBw))) return errf(err, errlen, "chan_gbs must be >= 0");
  if (!(t->chanShare >= 0 && t->chanShare <= 1)) return errf(err, errlen, "chan_share must be in [0, 1]");
  if (t->p2pChannels < 0 || t->p2pChannels > 64) return errf(err, errlen, "p2p_channels must be in 0..64");
  if (t->p2pPerPeer < 0 || t->p2pPerPeer > 64 || (t->p2pPerPeer & (t->p2pPerPeer - 1)))
    return errf(err, errlen, "p2p_per_peer must be 0 or a power of two up to 64");
  for (int s = 0; s < n; s++) {
    for (int d = 0; d < n; d++) {
      if (s == d) continue;
      int c = t->linkCount[s * n + d];
      double bw = t->linkBw[s * n + d];
      if (c < 0) return errf(err, errlen, "link %d %d: negative count %d", s, d, c);
      if (c > 0 && !(bw > 0 && isfinite(bw)))
        return errf(err, errlen, "link %d %d: %d links need a positive bandwidth", s, d, c);
      if (!relayTopoReachable(t, s, d))
        return errf(err, errlen, "GPU %d cannot reach GPU %d: no link and no switch", s, d);
    }
    if (!(t->injBw[s] >= 0 && isfinite(t->injBw[s])) || !(t->ejBw[s] >= 0 && isfinite(t->ejBw[s])))
      return errf(err, errlen, "ports %d: bandwidths must be finite and >= 0", s);
    if (t->hasSwitch && t->fabricBw <= 0 && (t->injBw[s] <= 0 || t->ejBw[s] <= 0)) {
      /* Through a switch with an uncapped port and no fabric cap a transfer
       * would move at an infinite rate. */
      for (int d = 0; d < n; d++)
        if (d != s && relayTopoNodeOf(t, s) == relayTopoNodeOf(t, d) &&
            (t->linkCount[s * n + d] == 0 || t->linkCount[d * n + s] == 0))
          return errf(err, errlen, "ports %d: a switch needs injection and ejection > 0", s);
    }
  }
  if (!(t->fabricBw >= 0 && isfinite(t->fabricBw))) return errf(err, errlen, "fabric must be >= 0");
  const double costs[] = {t->callS, t->boundaryS, t->launchS, t->hopS};
  for (int i = 0; i < 4; i++)
    if (!(costs[i] >= 0 && isfinite(costs[i]))) return errf(err, errlen, "costs must be finite and >= 0");
  if (!(t->memBw > 0 && isfinite(t->memBw))) return errf(err, errlen, "mem_gbs must be > 0");
  if (!(t->reduceBw >= 0 && isfinite(t->reduceBw))) return errf(err, errlen, "reduce_gbs must be >= 0");
  if (!(t->stageS >= 0 && isfinite(t->stageS))) return errf(err, errlen, "stage_us must be finite and >= 0");
  if (t->maxDepth < 0 || t->maxDepth > 1024) return errf(err, errlen, "max_depth must be in 0..1024");
  for (int c = -1; c < RELAY_TOPO_NCOLLS; c++) {
    const relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
    const char* who = c < 0 ? "p2p" : kCurveNames[c + 1];
    if (cv->n < 0 || cv->n > RELAY_TOPO_CURVE_MAX)
      return errf(err, errlen, "eff %s: %d points, at most %d", who, cv->n, RELAY_TOPO_CURVE_MAX);
    for (int i = 0; i < cv->n; i++) {
      if (!(cv->bytes[i] > 0 && isfinite(cv->bytes[i]) && cv->eff[i] > 0 && isfinite(cv->eff[i])))
        return errf(err, errlen, "eff %s: point %d needs bytes > 0 and an efficiency > 0", who, i + 1);
      if (i > 0 && !(cv->bytes[i] > cv->bytes[i - 1]))
        return errf(err, errlen, "eff %s: sizes must increase (point %d)", who, i + 1);
    }
  }
  if (!(t->modelErr >= 0 && t->modelErr < 1)) return errf(err, errlen, "model_err must be in [0, 1)");
  return 0;
}

/* ---- text format -------------------------------------------------------- */

static int allLinksEqual(const struct relayTopo* t) {
  int n = t->nGPUs;
  if (n < 2) return 1;
  int c0 = t->linkCount[1];
  double b0 = t->linkBw[1];
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (s != d && (t->linkCount[s * n + d] != c0 || (c0 > 0 && t->linkBw[s * n + d] != b0))) return 0;
  return 1;
}

void relayTopoWrite(const struct relayTopo* t, FILE* f) {
  int n = t->nGPUs;
  fprintf(f, "# relaycc topology (docs/model.md): GB/s = 1e9 bytes/s per direction, times in us\n");
  fprintf(f, "name %s\n", t->name);
  fprintf(f, "gpus %d\n", n);
  if (allLinksEqual(t)) {
    if (n > 1 && t->linkCount[1] > 0) fprintf(f, "link * * %d %.17g\n", t->linkCount[1], t->linkBw[1] / GBS);
  } else {
    for (int s = 0; s < n; s++)
      for (int d = 0; d < n; d++)
        if (s != d && t->linkCount[s * n + d] > 0)
          fprintf(f, "link %d %d %d %.17g\n", s, d, t->linkCount[s * n + d], t->linkBw[s * n + d] / GBS);
  }
  fprintf(f, "switch %s\n", t->hasSwitch ? "yes" : "no");
  int portsEqual = 1;
  for (int g = 1; g < n; g++)
    if (t->injBw[g] != t->injBw[0] || t->ejBw[g] != t->ejBw[0]) portsEqual = 0;
  if (portsEqual) {
    if (t->injBw[0] > 0 || t->ejBw[0] > 0) fprintf(f, "ports * %.17g %.17g\n", t->injBw[0] / GBS, t->ejBw[0] / GBS);
  } else {
    for (int g = 0; g < n; g++) fprintf(f, "ports %d %.17g %.17g\n", g, t->injBw[g] / GBS, t->ejBw[g] / GBS);
  }
  if (t->fabricBw > 0) fprintf(f, "fabric %.17g\n", t->fabricBw / GBS);
  for (int c = -1; c < RELAY_TOPO_NCOLLS; c++) {
    const relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
    if (cv->n <= 0) continue;
    fprintf(f, "eff %s", kCurveNames[c + 1]);
    for (int i = 0; i < cv->n; i++) fprintf(f, " %.17g:%.17g", cv->bytes[i], cv->eff[i]);
    fprintf(f, "\n");
  }
  if (t->modelErr > 0) fprintf(f, "model_err %.17g\n", t->modelErr);
  if (t->hostStepS > 0) fprintf(f, "host_step_us %.17g\n", t->hostStepS / US);
  fprintf(f, "call_us %.17g\n", t->callS / US);
  fprintf(f, "boundary_us %.17g\n", t->boundaryS / US);
  fprintf(f, "launch_us %.17g\n", t->launchS / US);
  fprintf(f, "mem_gbs %.17g\n", t->memBw / GBS);
  if (t->reduceBw > 0) fprintf(f, "reduce_gbs %.17g\n", t->reduceBw / GBS);
  fprintf(f, "hop_us %.17g\n", t->hopS / US);
  if (t->stageS > 0) fprintf(f, "stage_us %.17g\n", t->stageS / US);
  if (t->maxDepth > 0) fprintf(f, "max_depth %d\n", t->maxDepth);
  if (t->opBudgetBw > 0) fprintf(f, "op_budget_gbs %.17g\n", t->opBudgetBw / GBS);
  if (t->nNodes > 1) {
    fprintf(f, "nodes %d\n", t->nNodes);
    fprintf(f, "nics_per_node %d\n", t->nicsPerNode);
    fprintf(f, "nic_gbs %.17g\n", t->nicBw / GBS);
    fprintf(f, "pxn %s\n", t->pxn ? "yes" : "no");
  }
  if (t->netsByBw > 0) fprintf(f, "nets_by_bw %d\n", t->netsByBw);
  if (t->chanBw > 0) fprintf(f, "chan_gbs %.17g\n", t->chanBw / GBS);
  if (t->chanShare > 0) fprintf(f, "chan_share %.17g\n", t->chanShare);
  if (t->p2pChannels > 0) fprintf(f, "p2p_channels %d\n", t->p2pChannels);
  if (t->p2pPerPeer > 0) fprintf(f, "p2p_per_peer %d\n", t->p2pPerPeer);
}

uint64_t relayTopoHash(const struct relayTopo* t) {
  /* By the text form: it carries every figure a model has, at full
   * precision (%.17g), so a field added to the format is hashed with no
   * change here. Costs a few microseconds: for init, not for every call. */
  if (!t) return 0;
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return 0;
  relayTopoWrite(t, f);
  fclose(f);
  uint64_t h = relayHash64(RELAY_HASH_SEED, buf, len);
  free(buf);
  return h ? h : 1; /* 0 is "no topology" */
}

/* Parse one GPU index or "*" (-1) bounded by n. */
static int parseGpu(const char* s, int n, int* out) {
  if (strcmp(s, "*") == 0) {
    *out = -1;
    return 0;
  }
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < 0 || v >= n) return -1;
  *out = (int)v;
  return 0;
}

static int parseNum(const char* s, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !isfinite(v) || v < 0) return -1;
  *out = v;
  return 0;
}

#define MAXTOK 24 /* "eff NAME" and its RELAY_TOPO_CURVE_MAX points fit */

relayResult_t relayTopoParse(const char* text, struct relayTopo** out, char* err, size_t errlen) {
  *out = NULL;
  struct relayTopo* t = NULL;
  char name[RELAY_TOPO_NAME_MAX] = "custom";
  relayResult_t res = relayInvalidArgument;
  int lineNo = 0;
  const char* p = text;
  char line[1024];
  while (*p) {
    const char* nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineNo++;
    if (len >= sizeof line) {
      errf(err, errlen, "line %d: longer than %zu characters", lineNo, sizeof line - 1);
      goto fail;
    }
    memcpy(line, p, len);
    line[len] = 0;
    p = nl ? nl + 1 : p + len;
    char* hash = strchr(line, '#');
    if (hash) *hash = 0;
    char* tok[MAXTOK];
    int nt = 0;
    for (char* s = strtok(line, " \t\r"); s; s = strtok(NULL, " \t\r")) {
      if (nt == MAXTOK) {
        errf(err, errlen, "line %d: too many fields", lineNo);
        goto fail;
      }
      tok[nt++] = s;
    }
    if (nt == 0) continue;
    const char* k = tok[0];
#define NEED(nargs, usage)                                                                \
  do {                                                                                    \
    if (nt != (nargs) + 1) {                                                              \
      errf(err, errlen, "line %d: '%s' takes %s", lineNo, k, usage);                      \
      goto fail;                                                                          \
    }                                                                                     \
  } while (0)
#define NUM(i, dst)                                                                       \
  do {                                                                                    \
    if (parseNum(tok[i], &(dst))) {                                                       \
      errf(err, errlen, "line %d: '%s' is not a number >= 0", lineNo, tok[i]);            \
      goto fail;                                                                          \
    }                                                                                     \
  } while (0)
    if (strcmp(k, "name") == 0) {
      NEED(1, "a name");
      snprintf(name, sizeof name, "%s", tok[1]);
      if (t) snprintf(t->name, sizeof t->name, "%s", tok[1]);
      continue;
    }
    if (strcmp(k, "gpus") == 0) {
      NEED(1, "a GPU count");
      if (t) {
        errf(err, errlen, "line %d: 'gpus' given twice", lineNo);
        goto fail;
      }
      double g;
      NUM(1, g);
      if (g != floor(g) || g < 1 || g > RELAY_TOPO_MAX_GPUS) {
        errf(err, errlen, "line %d: gpus must be an integer in 1..%d", lineNo, RELAY_TOPO_MAX_GPUS);
        goto fail;
      }
      res = relayTopoCreate((int)g, name, &t);
      if (res != relaySuccess) goto fail;
      res = relayInvalidArgument;
      continue;
    }
    if (!t) {
      errf(err, errlen, "line %d: 'gpus N' must come before '%s'", lineNo, k);
      goto fail;
    }
    int n = t->nGPUs;
    if (strcmp(k, "link") == 0) {
      NEED(4, "SRC DST COUNT GBS (SRC/DST a GPU or *)");
      int s, d;
      double c, bw;
      if (parseGpu(tok[1], n, &s) || parseGpu(tok[2], n, &d)) {
        errf(err, errlen, "line %d: GPU index out of 0..%d", lineNo, n - 1);
        goto fail;
      }
      NUM(3, c);
      NUM(4, bw);
      if (c != floor(c) || c > 1e6) {
        errf(err, errlen, "line %d: link count must be an integer", lineNo);
        goto fail;
      }
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
          if (a == b || (s >= 0 && a != s) || (d >= 0 && b != d)) continue;
          t->linkCount[a * n + b] = (int)c;
          t->linkBw[a * n + b] = c > 0 ? bw * GBS : 0;
        }
    } else if (strcmp(k, "pxn") == 0) {
      NEED(1, "yes or no");
      if (strcmp(tok[1], "yes") == 0 || strcmp(tok[1], "1") == 0) t->pxn = 1;
      else if (strcmp(tok[1], "no") == 0 || strcmp(tok[1], "0") == 0) t->pxn = 0;
      else {
        errf(err, errlen, "line %d: pxn takes yes or no", lineNo);
        goto fail;
      }
    } else if (strcmp(k, "nodes") == 0 || strcmp(k, "nics_per_node") == 0 || strcmp(k, "nets_by_bw") == 0 ||
               strcmp(k, "p2p_channels") == 0 || strcmp(k, "p2p_per_peer") == 0 || strcmp(k, "max_depth") == 0) {
      NEED(1, "an integer");
      double v;
      NUM(1, v);
      if (v != floor(v) || v > 1e6) {
        errf(err, errlen, "line %d: '%s' takes an integer", lineNo, k);
        goto fail;
      }
      int* dst = strcmp(k, "nodes") == 0           ? &t->nNodes
                 : strcmp(k, "nics_per_node") == 0 ? &t->nicsPerNode
                 : strcmp(k, "nets_by_bw") == 0    ? &t->netsByBw
                 : strcmp(k, "p2p_channels") == 0  ? &t->p2pChannels
                 : strcmp(k, "max_depth") == 0     ? &t->maxDepth
                                                   : &t->p2pPerPeer;
      *dst = (int)v;
    } else if (strcmp(k, "switch") == 0) {
      NEED(1, "yes or no");
      if (strcmp(tok[1], "yes") == 0 || strcmp(tok[1], "1") == 0) t->hasSwitch = 1;
      else if (strcmp(tok[1], "no") == 0 || strcmp(tok[1], "0") == 0) t->hasSwitch = 0;
      else {
        errf(err, errlen, "line %d: switch takes yes or no", lineNo);
        goto fail;
      }
    } else if (strcmp(k, "ports") == 0) {
      NEED(3, "GPU INJECT_GBS EJECT_GBS (GPU an index or *)");
      int g;
      double inj, ej;
      if (parseGpu(tok[1], n, &g)) {
        errf(err, errlen, "line %d: GPU index out of 0..%d", lineNo, n - 1);
        goto fail;
      }
      NUM(2, inj);
      NUM(3, ej);
      for (int a = 0; a < n; a++)
        if (g < 0 || a == g) {
          t->injBw[a] = inj * GBS;
          t->ejBw[a] = ej * GBS;
        }
    } else if (strcmp(k, "eff") == 0) {
      int c = -2; /* -1: p2p, else the relayCollective_t */
      for (int i = 0; nt >= 2 && i <= RELAY_TOPO_NCOLLS; i++)
        if (strcmp(tok[1], kCurveNames[i]) == 0) c = i - 1;
      if (nt < 3 || nt - 2 > RELAY_TOPO_CURVE_MAX || c == -2) {
        errf(err, errlen, "line %d: 'eff' takes p2p|allgather|reducescatter|allreduce|alltoall and 1..%d BYTES:EFF points",
             lineNo, RELAY_TOPO_CURVE_MAX);
        goto fail;
      }
      relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
      cv->n = 0;
      for (int i = 2; i < nt; i++) {
        char* colon = strchr(tok[i], ':');
        double b, e;
        if (colon) *colon = 0;
        if (!colon || parseNum(tok[i], &b) || parseNum(colon + 1, &e) || !(b > 0) || !(e > 0)) {
          errf(err, errlen, "line %d: eff point %d is not BYTES:EFF with both > 0", lineNo, i - 1);
          goto fail;
        }
        if (cv->n > 0 && !(b > cv->bytes[cv->n - 1])) {
          errf(err, errlen, "line %d: eff sizes must increase (point %d)", lineNo, i - 1);
          goto fail;
        }
        cv->bytes[cv->n] = b;
        cv->eff[cv->n] = e;
        cv->n++;
      }
    } else if (strcmp(k, "model_err") == 0) {
      NEED(1, "a fraction in [0, 1)");
      NUM(1, t->modelErr);
      if (!(t->modelErr < 1)) {
        errf(err, errlen, "line %d: model_err must be in [0, 1)", lineNo);
        goto fail;
      }
    } else {
      struct {
        const char* key;
        double* dst;
        double unit;
      } scalars[] = {
          {"fabric", &t->fabricBw, GBS},      {"call_us", &t->callS, US},   {"boundary_us", &t->boundaryS, US},
          {"launch_us", &t->launchS, US},     {"mem_gbs", &t->memBw, GBS},  {"hop_us", &t->hopS, US},
          {"reduce_gbs", &t->reduceBw, GBS}, {"nic_gbs", &t->nicBw, GBS},   {"chan_gbs", &t->chanBw, GBS},
          {"chan_share", &t->chanShare, 1},  {"stage_us", &t->stageS, US},
          {"host_step_us", &t->hostStepS, US}, {"op_budget_gbs", &t->opBudgetBw, GBS},
      };
      int found = 0;
      for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        if (strcmp(k, scalars[i].key) != 0) continue;
        NEED(1, "one number");
        double v;
        NUM(1, v);
        *scalars[i].dst = v * scalars[i].unit;
        found = 1;
      }
      if (!found) {
        errf(err, errlen, "line %d: unknown keyword '%s'", lineNo, k);
        goto fail;
      }
    }
#undef NEED
#undef NUM
  }
  if (!t) {
    errf(err, errlen, "no 'gpus N' line");
    goto fail;
  }
  if (relayTopoCheck(t, err, errlen) != 0) goto fail;
  *out = t;
  return relaySuccess;
fail:
  relayTopoFree(t);
  return res;
}

relayResult_t relayTopoLoad(const char* spec, struct relayTopo** out) {
  *out = NULL;
  if (!spec || !*spec) return relaySetError(NULL, relayInvalidArgument, "topology: empty name");
  if (relayTopoPreset(spec, out) == relaySuccess) return relaySuccess;
  FILE* f = fopen(spec, "r");
  if (!f) {
    char names[256] = "";
    for (const char* const* n = relayTopoPresetNames(); *n; n++) {
      strncat(names, *n, sizeof names - strlen(names) - 1);
      if (n[1]) strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    return relaySetError(NULL, relayInvalidArgument, "topology '%s': not a preset (%s) and not a readable file: %s",
                         spec, names, strerror(errno));
  }
  size_t cap = 4096, len = 0;
  char* text = malloc(cap);
  if (!text) {
    fclose(f);
    return relaySetError(NULL, relaySystemError, "topology '%s': out of memory", spec);
  }
  size_t got;
  while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 == cap) {
      if (cap >= (1u << 24)) break; /* 16 MiB: no topology file is that large */
      char* bigger = realloc(text, cap * 2);
      if (!bigger) {
        free(text);
        fclose(f);
        return relaySetError(NULL, relaySystemError, "topology '%s': out of memory", spec);
      }
      text = bigger;
      cap *= 2;
    }
  }
  text[len] = 0;
  fclose(f);
  char err[256];
  relayResult_t r = relayTopoParse(text, out, err, sizeof err);
  free(text);
  if (r != relaySuccess) return relaySetError(NULL, r, "topology file '%s': %s", spec, err);
  return relaySuccess;
}
