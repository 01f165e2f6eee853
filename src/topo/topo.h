/*
 * Topology model: what the node's links and fixed costs are, as data.
 *
 * Used alike by the simulator (src/sim), the baseline model and the router,
 * so a route is chosen from the same numbers the predictions are printed
 * from. topo knows no route and no plan: it is links, ports and costs.
 *
 * Transfers between two GPUs travel
 *   - over their direct links when the pair has any (a mesh: MI300X/MI350X,
 *     7 XGMI links per GPU, one per peer), capacity linkCount * linkBw;
 *   - else through the switch when the node has one (NVSwitch): the transfer
 *     then uses the source's injection and the destination's ejection port,
 *     and the switch itself is non-blocking;
 *   - and in both cases through the source's injection port and the
 *     destination's ejection port when those have a cap (> 0), and through
 *     the fabric when fabricBw > 0 (an aggregate cap over every transfer:
 *     the CPU's memory bus for the shm transport).
 * A transfer to oneself is a local copy at memory bandwidth.
 *
 * Several nodes (nNodes > 1; the simulator's multi-node models): GPUs are
 * node-major, nGPUs / nNodes per node, each node the same. Links, switch and
 * ports describe each node's inside; two GPUs of different nodes reach each
 * other only over the network: through the source node's NICs and the
 * destination node's, nicsPerNode NICs of nicBw each per direction, shared
 * by every GPU of the node when pxn (NCCL's PXN: a GPU's traffic may leave
 * through another GPU's NIC), else each GPU on its share of them.
 *
 * An operation budget (opBudgetBw > 0): each transfer a rank sends in a
 * step moves at most its equal share of the rank's channel budget.
 *
 * P2P channels (chanBw > 0): NCCL/RCCL move point-to-point data on
 * channels, each a fixed set of GPU threads; one channel moves at most
 * chanBw, and channels of a rank shared by several flows lose efficiency
 * (chanShare). Used with the P2P channel layer (src/p2p) by the simulator.
 *
 * All figures are SI: bytes/s (1 GB/s = 1e9 bytes/s) and seconds. The text
 * format (docs/model.md) writes GB/s and microseconds.
 */
#ifndef RELAY_TOPO_H_
#define RELAY_TOPO_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RELAY_TOPO_MAX_GPUS 512
#define RELAY_TOPO_NAME_MAX 64
#define RELAY_TOPO_CURVE_MAX 16 /* points of an efficiency curve */
#define RELAY_TOPO_NCOLLS 4     /* the layout collectives: relayCollective_t 0..3 (plan/plan.h) */

/* An efficiency curve: at bytes[i] per transfer, eff[i] of the rate the
 * links give. Between points the efficiency follows a power law (linear in
 * log-log), beyond the ends it holds; n == 0 means 1 at every size. */
typedef struct {
  int n;
  double bytes[RELAY_TOPO_CURVE_MAX]; /* increasing, > 0 */
  double eff[RELAY_TOPO_CURVE_MAX];   /* > 0 */
} relayTopoCurve;

struct relayTopo {
  char name[RELAY_TOPO_NAME_MAX];
  int nGPUs;

  /* Direct links per directed pair: [src * nGPUs + dst], diagonal unused.
   * linkCount links of linkBw bytes/s each, per direction. */
  int* linkCount;
  double* linkBw;

  /* 1: pairs without a direct link reach each other through a non-blocking
   * switch (their traffic is bounded by the two ports only). */
  int hasSwitch;
  /* Per GPU, bytes/s out of (injection) and into (ejection) the GPU over all
   * its peers together; 0 = no cap of its own. On a switch these are the
   * ports; on a mesh a cap models a GPU that cannot drive all its links at
   * their full rate at once. */
  double* injBw;
  double* ejBw;
  /* Aggregate cap over all transfers at once, bytes/s; 0 = none. */
  double fabricBw;

  /* Fixed costs, seconds. */
  double callS;     /* once per call: host API, stream/event work outside the steps */
  double boundaryS; /* per step with transfers: launch + sync of one grouped transfer */
  double launchS;   /* per local op (a reduce or copy kernel) */
  /* Memory bandwidth of local ops, bytes/s counting bytes read plus bytes
   * written: a copy of b bytes costs 2b/memBw, a k-input reduce (k+1)b/memBw. */
  double memBw;
  /* Reduce ops at this rate instead when > 0 (same counting): where a reduce
   * is compute-bound (the CPU's bf16 reduce runs at ~1/5 of its memcpy). */
  double reduceBw;

  /* The pipeline depth model (src/route/depth.c): what one more stage of a
   * pipelined relay costs, priced as stageS times a link's bandwidth in link
   * bytes (0: boundaryS), and the deepest depth it tries (0: 8). */
  double stageS;
  int maxDepth;

  /* The baseline library (NCCL/RCCL on the active ranks only): latency of one
   * hop of its small-message protocol, seconds. Its per-call and per-kernel
   * costs are callS + boundaryS (one kernel per collective). */
  double hopS;

  /* The shm transport's one-copy path (transport/shm/bw.c): from this many bytes of each rank's input on,
   * the bandwidth route reads and writes the peers' buffers directly (process_vm_readv / writev) instead
   * of through staging. 0: none (every GPU model; a CPU comm whose ranks cannot reach each other's
   * memory). Set from RELAYCC_SHM_CMA_BYTES when a shm comm loads its model. */
  double oneCopyBytes;
  /* The same floor for 2 active ranks (RELAYCC_SHM_CMA_PAIR_BYTES, the lower of the two, while oneCopyBytes
   * is not 0); 0: oneCopyBytes. */
  double oneCopyPairBytes;
  /* A broadcast's floor (RELAYCC_SHM_CMA_ROOTED_BYTES), on the bytes its root sends in all ((A-1) x count),
   * while oneCopyBytes is not 0; a reduce stays staged. */
  double oneCopyRootedBytes;

  /* The rate at which one of 2 active ranks reads what its peer has just written into shared staging (the
   * one-shot's slots), bytes/s: each such line crosses from the writer's core to the reader's on every call,
   * where the one-copy path's writes stay in the writer's cache and its reads hit lines the peer left clean.
   * Priced for pairs only, where it was measured (presets.c); 0: not priced (every GPU model). */
  double stagedReadBw;

  /* ---- calibration against the library's measured kernels (docs/model.md) ----
   * The links carry linkBw; the library's kernels move less, by an amount
   * that depends on the bytes a transfer carries (its protocol, chunking and
   * channel choice: NCCL's all-reduce on 2 x H200 moved 136 GB/s of data at
   * 1 MB and 335 GB/s at 1 GB over one 370 GB/s link). A curve gives, per
   * transfer size, the fraction of the rate the links give it; the
   * simulator and the baseline move bytes / efficiency. Empty curves (every
   * preset but the measured ones, and detected generic nodes) leave the link
   * model as it is. */
  relayTopoCurve p2pEff; /* relaycc's transfers (send/recv pairs of a plan step), by bytes */
  relayTopoCurve
      collEff[RELAY_TOPO_NCOLLS]; /* the baseline's collective (relayCollective_t), by bytes per peer */
  /* The largest relative error of this topology's predictions against the
   * measurements it was calibrated on (docs/model.md); 0: not calibrated.
   * The router keeps the transport's native collective unless another route
   * is predicted faster by more than this. */
  double modelErr;
  /* Per call, not captured into a graph: the host cost of each send/recv
   * step a plan enqueues beyond what one native collective's enqueue costs,
   * seconds (0: not modelled). The curves above are fitted on graph
   * replays, where host work is off the critical path; a call made directly
   * pays it (text format: host_step_us). */
  double hostStepS;

  /* RCCL's per-operation channel budget (0: none, every preset but the AMD
   * ones): the bytes/s all of a rank's P2P channels move together, split
   * equally among the transfers the rank sends to other GPUs in one step,
   * each share fixed for the step. RCCL budgets channels per operation, so a
   * link carrying one operation beside links carrying three gets a third of
   * their channels and gates the step, while the others finish early and
   * their channels idle (seed: the 4-active reduce-scatter's operation
   * granularity commit). A share above the link rate changes nothing: it
   * binds only where a rank sends more operations than the budget fills its
   * links with (text format: op_budget_gbs). */
  double opBudgetBw;

  /* ---- several nodes (nNodes <= 1: one node; the rest of this block unused) */
  int nNodes;
  int nicsPerNode;
  double nicBw;   /* bytes/s per NIC per direction */
  int pxn;        /* 1: a GPU's network traffic may use every NIC of its node */
  int netsByBw;   /* NICs one GPU needs to reach its bandwidth (NCCL getLocalNetCountByBw); 0: 1 */
  double netLatS; /* one network step of a collective across nodes (a ring hop through the NICs) */

  /* ---- P2P channels (chanBw 0: no channel model) ---- */
  double chanBw;    /* bytes/s one channel moves */
  double chanShare; /* a channel that carries 2+ flows moves chanShare * chanBw in all (0: 1) */
  int p2pChannels;  /* the comm's channels, where the P2P pool starts (NCCL comm->nChannels); 0: 64 */
  int p2pPerPeer;   /* > 0: the per-peer channel count the library chose on this machine,
                       instead of the one derived from links and NICs */
};

/* Bumped whenever a topology is created or freed (the router memoizes a
 * topology's content hash per address and generation). */
uint64_t relayTopoGeneration(void);

/* Allocate a topology of n GPUs: no links, no switch, no caps, zero costs. */
relayResult_t relayTopoCreate(int nGPUs, const char* name, struct relayTopo** out);
void relayTopoFree(struct relayTopo* topo);
relayResult_t relayTopoClone(const struct relayTopo* topo, struct relayTopo** out);

/* A preset name (mi350x, mi300x, h200, h200x2, cpu) or the path of a file in
 * the text format. On failure *out is NULL and the reason is recorded with
 * relaySetError (relayGetLastError(NULL) reads it). */
relayResult_t relayTopoLoad(const char* presetOrFile, struct relayTopo** out);
/* Parse the text format from memory; err gets the reason on failure. */
relayResult_t relayTopoParse(const char* text, struct relayTopo** out, char* err, size_t errlen);
/* Write the text format (loadable by relayTopoLoad / relayTopoParse). */
void relayTopoWrite(const struct relayTopo* topo, FILE* f);

/* Preset names, NULL-terminated. */
const char* const* relayTopoPresetNames(void);
/* Build a preset; relayInvalidArgument for an unknown name. */
relayResult_t relayTopoPreset(const char* name, struct relayTopo** out);

/* A multi-node topology: nNodes copies of the one-node topology `node`
 * (its links, switch, ports, costs), GPUs node-major, joined by a network of
 * nicsPerNode NICs of nicBw bytes/s per node. relayInvalidArgument when the
 * GPUs do not fit RELAY_TOPO_MAX_GPUS or `node` has a fabric cap (the shm
 * transport's shared memory bus: one node's). The channel fields are copied
 * from `node`; set them after. */
relayResult_t relayTopoMultiNode(const struct relayTopo* node, int nNodes, int nicsPerNode, double nicBw,
                                 int pxn, struct relayTopo** out);
/* The network figures a multi-node model takes when not told: 400 Gb/s per
 * GPU (one NIC per GPU, as the seed 003 machine and H200 nodes have), and
 * NCCL's own network latency of a ring step (its tuning tables' hwLat for
 * NET: 2.7 us LL, 4.0 us LL128, 14 us Simple; 5 us sits between the
 * protocols a mid-size message takes). */
#define RELAY_TOPO_NET_GPU_BW 50e9
#define RELAY_TOPO_NET_LAT_S 5e-6
/* Network presets, NULL-terminated: a node preset and its network, by node
 * count. "mi355x-ainic": the seed 003 machine (8 MI355X per node, 8 AINIC,
 * RCCL's P2P pool and per-peer counts as measured there). */
const char* const* relayTopoNetPresetNames(void);
relayResult_t relayTopoNetPreset(const char* name, int nNodes, struct relayTopo** out);

/* The node of GPU g (0 on one node). */
static inline int relayTopoNodeOf(const struct relayTopo* t, int g) {
  return t->nNodes > 1 ? g / (t->nGPUs / t->nNodes) : 0;
}
/* Network capacity one GPU's flows share leaving (or entering) its node,
 * bytes/s: all the node's NICs with PXN, else the GPU's share. */
double relayTopoNicCap(const struct relayTopo* t);

/* Detect the topology of the GPUs this process sees, GPU i = CUDA device i
 * (src/topo/detect.c: CUDA peer attributes and NVML's NVLink counts; a
 * calibrated preset when the node is one we measured, else a generic model
 * of what was found). relayNotSupported on a CPU-only build or without GPUs. */
relayResult_t relayTopoDetect(struct relayTopo** out);
/* The same for the n GPUs named by PCI bus id ("0000:19:00.0", as
 * cudaDeviceGetPCIBusId writes it), GPU i = busIds[i]: a comm's ranks in rank
 * order, whichever devices this process can open. */
relayResult_t relayTopoDetectGpus(int n, const char* const* busIds, struct relayTopo** out);

/* ---- queries used by the simulator, the baseline and the router ---- */

/* 1 when src can reach dst (direct link, or a switch). */
int relayTopoReachable(const struct relayTopo* topo, int src, int dst);
/* Capacity of src's direct links to dst, bytes/s (0 when none). */
static inline double relayTopoLinkCap(const struct relayTopo* t, int src, int dst) {
  size_t i = (size_t)src * (size_t)t->nGPUs + (size_t)dst;
  return t->linkCount[i] > 0 ? (double)t->linkCount[i] * t->linkBw[i] : 0.0;
}
/* The rate one transfer src -> dst gets alone on an idle node, bytes/s:
 * the least of its link (or, through a switch, infinity), the two port caps
 * and the fabric cap. 0 when unreachable. For src == dst, memBw / 2. */
double relayTopoPairRate(const struct relayTopo* topo, int src, int dst);
/* Does the shm bandwidth route take its one-copy path? The one rule that bw.c (bwCmaWanted, with the
 * comm's agreed RELAYCC_SHM_CMA_* floors) follows and the simulator prices (with topo's oneCopy* copies of
 * them): floor 0 turns the path off; a call of 2 actives takes the lower of its floor and pairFloor (when
 * not 0); a broadcast (rooted and gather) from rootedFloor of the bytes its root sends in all, (nActive - 1)
 * x input; a reduce (rooted, not gather) stays staged; any other call from floor of each rank's input. */
int relayTopoOneCopy(double floor, double pairFloor, double rootedFloor, int nActive, int rooted, int gather,
                     double inputBytes);
/* Structural sanity (counts, bandwidths, costs); 0 when sound. */
int relayTopoCheck(const struct relayTopo* topo, char* err, size_t errlen);
/* The check's and the parser's message writer (topo.c): err gets the text; returns -1. */
/* A curve's name in the text format: "p2p" (c = -1), else the layout collective's (comm/coll.h). */
const char* relayTopoCurveName(int c);
int relayTopoErrf(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* The efficiency of curve c for a transfer of `bytes` (1 when c is empty). */
double relayTopoCurveAt(const relayTopoCurve* c, double bytes);
/* A hash of everything the text format carries (the topology's content):
 * two ranks hold the same model exactly when their hashes agree. */
uint64_t relayTopoHash(const struct relayTopo* topo);

#ifdef __cplusplus
}
#endif
#endif
