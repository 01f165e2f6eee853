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
 * All figures are SI: bytes/s (1 GB/s = 1e9 bytes/s) and seconds. The text
 * format (docs/model.md) writes GB/s and microseconds.
 */
#ifndef RELAY_TOPO_H_
#define RELAY_TOPO_H_

#include <stddef.h>
#include <stdio.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RELAY_TOPO_MAX_GPUS 64
#define RELAY_TOPO_NAME_MAX 64

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

  /* The baseline library (NCCL/RCCL on the active ranks only): latency of one
   * hop of its small-message protocol, seconds. Its per-call and per-kernel
   * costs are callS + boundaryS (one kernel per collective). */
  double hopS;
};

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

/* Detect the topology of the GPUs this process sees (CUDA/NVML peer
 * attributes: NVLink count and bandwidth per pair, switch or mesh). The GPU
 * transport fills it in; on a CPU-only build it returns relayNotSupported. */
relayResult_t relayTopoDetect(struct relayTopo** out);

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
/* Structural sanity (counts, bandwidths, costs); 0 when sound. */
int relayTopoCheck(const struct relayTopo* topo, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
