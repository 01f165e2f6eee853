/*
 * GPU nodes inside src/topo: what detection found (detect.c) and how it
 * becomes a topology, and the calibration of the presets we have measured
 * (calib.c). Internal to the library; the public entry points are
 * relayTopoDetect / relayTopoDetectGpus in topo.h.
 */
#ifndef RELAY_TOPO_GPU_H_
#define RELAY_TOPO_GPU_H_

#include "topo/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RELAY_TOPO_GPU_NAME_MAX 96

/* What detection learned about n GPUs (GPU i = the comm's rank i). Unknown
 * figures are -1 (counts) or 0 (rates). */
typedef struct {
  int n;
  char name[RELAY_TOPO_MAX_GPUS][RELAY_TOPO_GPU_NAME_MAX]; /* "NVIDIA H200" (cudaDeviceProp.name) */
  int ccMajor[RELAY_TOPO_MAX_GPUS];                        /* compute capability; -1 unknown */
  double memPeakBw[RELAY_TOPO_MAX_GPUS];                   /* HBM peak, bytes/s (one direction); 0 unknown */
  /* Per directed pair [i * n + j]: */
  int p2pAccess[RELAY_TOPO_MAX_GPUS *
                RELAY_TOPO_MAX_GPUS]; /* cudaDevP2PAttrAccessSupported: 1, 0, -1 unknown */
  int nvlinks[RELAY_TOPO_MAX_GPUS *
              RELAY_TOPO_MAX_GPUS];     /* NVML: active NVLinks from i straight to j, -1 unknown */
  int switchLinks[RELAY_TOPO_MAX_GPUS]; /* NVML: active NVLinks from i to an NVSwitch, -1 unknown */
  /* AMD (hipExtGetLinkTypeAndHopCount) per directed pair: the hops of the pair's xGMI path, 0 when the pair
   * is joined by PCIe (or another link type), -1 unknown. */
  int xgmiHops[RELAY_TOPO_MAX_GPUS * RELAY_TOPO_MAX_GPUS];
} relayTopoFacts;

/* Every figure unknown, n GPUs. */
void relayTopoFactsInit(relayTopoFacts* f, int n);

/* The topology for what was detected: the calibrated preset when the node is
 * one we measured (2 x H200 over NV18 -> h200x2; up to 8 H100/H200 on
 * NVSwitch -> h200; 2 to 8 MI350X / MI300X with one xGMI hop between every
 * pair -> mi350x / mi300x, the seed's mesh), else a generic model of the
 * links found (named "detected"). relayNotSupported when the facts cannot make a model (a pair
 * of GPUs with no known path). */
relayResult_t relayTopoFromFacts(const relayTopoFacts* f, struct relayTopo** out);

/* The measured figures of the h200x2 preset: graph-replay costs, NCCL's
 * efficiency curves, the model's error (calib.c; docs/model.md). */
void relayTopoCalibrateH200x2(struct relayTopo* t);

#ifdef __cplusplus
}
#endif
#endif
