/*
 * Topology detection on GPUs: what the CUDA runtime and NVML say about the
 * comm's GPUs (relayTopoFacts), and the model made from it
 * (relayTopoFromFacts, pure, tested on CPU).
 *
 * Sources, as NCCL uses them: cudaDeviceGetP2PAttribute (access, performance
 * rank) for every pair this process can open, and NVML's per-link view
 * (active NVLinks and what each reaches: a GPU of the comm or an NVSwitch),
 * NVML loaded at run time with dlopen("libnvidia-ml.so.1") so that neither
 * the build (nvml.h is not on CI machines: the few declarations are below)
 * nor a machine without the driver needs it. NVML sees every GPU whatever
 * CUDA_VISIBLE_DEVICES says, so a rank that can open only its own device
 * still counts the links to its peers.
 *
 * On AMD GPUs (the HIP build) the same facts come from HIP: peer access
 * (hipDeviceGetP2PAttribute) and, per pair, the link type and hop count
 * (hipExtGetLinkTypeAndHopCount: xGMI or PCIe); there is no NVML.
 *
 * The model: where the node is one we measured, the calibrated preset (its
 * costs and NCCL's efficiency curves hold only there); otherwise a generic
 * model of the links found, uncalibrated (modelErr 0: the router asks a
 * route to beat the native collective by RELAY_ROUTE_UNCALIBRATED_MARGIN).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "topo/gpu.h"

#define GBS 1e9
#define US 1e-6

void relayTopoFactsInit(relayTopoFacts* f, int n) {
  memset(f, 0, sizeof *f);
  f->n = n;
  for (int i = 0; i < RELAY_TOPO_MAX_GPUS; i++) {
    f->ccMajor[i] = -1;
    f->switchLinks[i] = -1;
  }
  for (int i = 0; i < RELAY_TOPO_MAX_GPUS * RELAY_TOPO_MAX_GPUS; i++) {
    f->p2pAccess[i] = -1;
    f->nvlinks[i] = -1;
    f->xgmiHops[i] = -1;
  }
}

static int isHopper8(const char* name) { return strstr(name, "H100") || strstr(name, "H200"); }

/* The AMD preset a GPU's name belongs to ("AMD Instinct MI300X"; MI355X is
 * MI350X at a higher power limit, same links and HBM), NULL for another. */
static const char* amdPreset(const char* name) {
  if (strstr(name, "MI350X") || strstr(name, "MI355X")) return "mi350x";
  if (strstr(name, "MI300X")) return "mi300x";
  return NULL;
}

/* NVLink signaling rate per link and direction by generation (compute
 * capability): NVLink 1 (sm_60) 20 GB/s, 2 and 3 (sm_70, sm_80) 25, 4 (sm_90)
 * 26.5625, 5 (sm_100 on) 50. */
static double nvlinkSignalBw(int ccMajor) {
  if (ccMajor >= 10) return 50 * GBS;
  if (ccMajor == 9) return 26.5625 * GBS;
  if (ccMajor == 7 || ccMajor == 8) return 25 * GBS;
  return 20 * GBS;
}
/* What a collective's transfers get of it: the H200 pair measured 370 GB/s
 * each way at once over NV18's 478 GB/s of signaling (topo.c, h200x2). */
#define NVLINK_EFFECTIVE (370.0 / 478.125)
/* Rough, not measured here: a PCIe Gen4 x16 peer copy moves ~20 GB/s each
 * way; without peer access a transfer bounces through host memory at about
 * half that. */
#define PCIE_P2P_BW (20 * GBS)
#define HOST_PATH_BW (10 * GBS)
/* One xGMI link per direction as the seed measured it on MI350X (the mi350x
 * preset's 51.6 GB/s ceiling, src/topo/topo.c). */
#define XGMI_LINK_BW (51.6 * GBS)

relayResult_t relayTopoFromFacts(const relayTopoFacts* f, struct relayTopo** out) {
  *out = NULL;
  int n = f->n;
  if (n < 1 || n > RELAY_TOPO_MAX_GPUS) return relayInvalidArgument;
  int allHopper = 1, allSwitched = 1;
  for (int i = 0; i < n; i++) {
    allHopper &= isHopper8(f->name[i]) != 0;
    allSwitched &= f->switchLinks[i] >= 18;
  }
  /* The node we measured: two H200s with 18 NVLinks between them, which
   * nvidia-smi shows as NV18 whether the links join the pair directly or, as
   * on an HGX board (our nvidia-h200-x2 machines are 2 GPUs of one: NVLink
   * multicast exists there, which needs NVSwitch), reach the NVSwitches; a
   * 2-rank comm on such a board is exactly what we calibrated. NVML must
   * have counted the links: a pair with peer access could be PCIe. */
  int pairDirect = n == 2 && f->nvlinks[0 * n + 1] >= 18 && f->nvlinks[1 * n + 0] >= 18;
  if (n == 2 && strstr(f->name[0], "H200") && strstr(f->name[1], "H200") && (pairDirect || allSwitched))
    return relayTopoPreset("h200x2", out);
  /* H100/H200 HGX: up to 8 GPUs, each with its 18 NVLinks on the NVSwitches
   * (the h200 preset's ports; 2 H200s are the calibrated case above). Fewer
   * ranks than 8 map to its first GPUs, all alike behind the switch. */
  if (n >= 2 && n <= 8 && allHopper && allSwitched) return relayTopoPreset("h200", out);
  /* The seed's AMD node: 8 MI350X (or MI300X) in a full xGMI mesh, one link
   * and one hop between every pair. 2 to 8 GPUs of it map to the preset's
   * first ones (all alike in the mesh); a pair over PCIe or several hops, or
   * a mixed set, is not that node. */
  const char* amd = n >= 2 && n <= 8 ? amdPreset(f->name[0]) : NULL;
  for (int i = 0; i < n && amd; i++) {
    const char* p = amdPreset(f->name[i]);
    if (!p || strcmp(p, amd) != 0) amd = NULL;
    for (int j = 0; j < n && amd; j++)
      if (i != j && f->xgmiHops[i * n + j] != 1) amd = NULL;
  }
  if (amd) return relayTopoPreset(amd, out);

  /* Generic: every pair must have a known path. */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j && f->nvlinks[i * n + j] < 0 && f->p2pAccess[i * n + j] < 0 && f->switchLinks[i] < 0 &&
          f->xgmiHops[i * n + j] < 0)
        return relayNotSupported;
  relayResult_t r = relayTopoCreate(n, "detected", out);
  if (r != relaySuccess) return r;
  struct relayTopo* t = *out;
  int switched = n > 1, xgmi = 0;
  for (int i = 0; i < n; i++) switched &= f->switchLinks[i] > 0;
  for (int k = 0; k < n * n; k++) xgmi |= f->xgmiHops[k] > 0;
  for (int i = 0; i < n; i++) {
    double link = nvlinkSignalBw(f->ccMajor[i]) * NVLINK_EFFECTIVE;
    if (switched) t->injBw[i] = t->ejBw[i] = f->switchLinks[i] * link;
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      int k = i * n + j;
      if (f->nvlinks[k] > 0) {
        t->linkCount[k] = f->nvlinks[k];
        t->linkBw[k] = link;
      } else if (f->xgmiHops[k] > 0) {
        /* One xGMI link at the seed's measured per-link rate; a path of h
         * hops crosses h links other pairs use too: 1/h of it (rough). */
        t->linkCount[k] = 1;
        t->linkBw[k] = XGMI_LINK_BW / f->xgmiHops[k];
      } else if (!switched) {
        t->linkCount[k] = 1;
        t->linkBw[k] = f->p2pAccess[k] == 1 ? PCIE_P2P_BW : HOST_PATH_BW;
      }
    }
  }
  t->hasSwitch = switched;
  /* Costs: the h200x2 graph-replay figures (src/topo/calib.c) stand in for
   * any NVIDIA node, the seed's MI350X figures (the mi350x preset's, RCCL's)
   * for an AMD node with xGMI; they are not this node's measurements, which
   * is why modelErr stays 0 (uncalibrated). */
  t->callS = 1 * US;
  t->boundaryS = 4 * US;
  t->hopS = 0.2 * US;
  t->launchS = 1.9 * US;
  struct relayTopo* seed = NULL;
  if (xgmi && relayTopoPreset("mi350x", &seed) == relaySuccess) {
    t->callS = seed->callS;
    t->boundaryS = seed->boundaryS;
    t->hopS = seed->hopS;
    t->launchS = seed->launchS;
  }
  if (seed) relayTopoFree(seed);
  /* Copies at 90% of the HBM peak counted read + written (H200: 4.3 TB/s
   * measured against a 4.8 TB/s peak). */
  double peak = 0;
  for (int i = 0; i < n; i++)
    if (f->memPeakBw[i] > 0 && (peak == 0 || f->memPeakBw[i] < peak)) peak = f->memPeakBw[i];
  t->memBw = peak > 0 ? 0.9 * peak : 2e12;
  char err[256];
  if (relayTopoCheck(t, err, sizeof err) != 0) {
    relayTopoFree(t);
    *out = NULL;
    return relaySetError(NULL, relayInternalError, "topology detection built an unsound model: %s", err);
  }
  return relaySuccess;
}

#ifdef RELAY_HAVE_NCCL
#include "gpu_port.h"
#include <dlfcn.h>

/* hipExtGetLinkTypeAndHopCount's link type for xGMI (HSA_AMD_LINK_INFO_TYPE_XGMI of hsa_ext_amd.h's
 * hsa_amd_link_info_type_t: HyperTransport 0, QPI 1, PCIe 2, InfiniBand 3, xGMI 4). */
#define RELAY_HSA_LINK_XGMI 4u

#ifndef RELAY_HAVE_HIP /* NVIDIA only */
/* ---- NVML, loaded at run time (declarations after nvml.h) ---- */

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t; /* nvmlReturn_enum */
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t; /* nvmlPciInfo_st as the _v2/_v3 calls fill it */
#define NVML_SUCCESS 0
#define NVML_FEATURE_ENABLED 1           /* nvmlEnableState_t */
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2 /* nvmlIntNvLinkDeviceType_t */
#define NVML_NVLINK_MAX_LINKS 18

typedef struct {
  void* lib;
  nvmlReturn_t (*init)(void);
  nvmlReturn_t (*shutdown)(void);
  nvmlReturn_t (*byBusId)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*linkState)(nvmlDevice_t, unsigned int, int*);
  nvmlReturn_t (*remotePci)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);
  nvmlReturn_t (*remoteType)(nvmlDevice_t, unsigned int, int*); /* newer drivers only */
} nvmlApi;

#define NVML_SYM(api, field, sym) (*(void**)&(api)->field = dlsym((api)->lib, sym))

static int nvmlOpen(nvmlApi* a) {
  memset(a, 0, sizeof *a);
  a->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!a->lib) return 0;
  NVML_SYM(a, init, "nvmlInit_v2");
  NVML_SYM(a, shutdown, "nvmlShutdown");
  NVML_SYM(a, byBusId, "nvmlDeviceGetHandleByPciBusId_v2");
  NVML_SYM(a, name, "nvmlDeviceGetName");
  NVML_SYM(a, linkState, "nvmlDeviceGetNvLinkState");
  NVML_SYM(a, remotePci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  NVML_SYM(a, remoteType, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!a->init || !a->shutdown || !a->byBusId || !a->linkState || !a->remotePci ||
      a->init() != NVML_SUCCESS) {
    dlclose(a->lib);
    a->lib = NULL;
    return 0;
  }
  return 1;
}

static void nvmlClose(nvmlApi* a) {
  if (!a->lib) return;
  a->shutdown();
  dlclose(a->lib);
  a->lib = NULL;
}

#endif

typedef struct {
  unsigned domain, bus, device;
  int ok;
} pciAddr;

static pciAddr parseBusId(const char* s) {
  pciAddr p = {0, 0, 0, 0};
  unsigned fn;
  p.ok = sscanf(s, "%x:%x:%x.%x", &p.domain, &p.bus, &p.device, &fn) == 4;
  return p;
}

#ifndef RELAY_HAVE_HIP
/* NVML's per-link view of GPU i: links straight to another GPU of the comm,
 * links to an NVSwitch. Links to GPUs outside the comm count as neither. */
static void nvmlLinks(nvmlApi* a, relayTopoFacts* f, const pciAddr* addr, int i, nvmlDevice_t dev) {
  int n = f->n;
  for (int j = 0; j < n; j++)
    if (j != i) f->nvlinks[i * n + j] = 0;
  f->switchLinks[i] = 0;
  for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
    int state = 0;
    nvmlPciInfo_t pci;
    if (a->linkState(dev, l, &state) != NVML_SUCCESS || state != NVML_FEATURE_ENABLED) continue;
    memset(&pci, 0, sizeof pci);
    if (a->remotePci(dev, l, &pci) != NVML_SUCCESS) continue;
    int peer = -1;
    for (int j = 0; j < n; j++)
      if (j != i && addr[j].ok && addr[j].domain == pci.domain && addr[j].bus == pci.bus &&
          addr[j].device == pci.device)
        peer = j;
    if (peer >= 0) {
      f->nvlinks[i * n + peer]++;
      continue;
    }
    int type = -1;
    nvmlDevice_t other;
    if (a->remoteType && a->remoteType(dev, l, &type) == NVML_SUCCESS) {
      if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) f->switchLinks[i]++;
    } else if (a->byBusId(pci.busId, &other) != NVML_SUCCESS) {
      f->switchLinks[i]++; /* not a GPU NVML knows: an NVSwitch */
    }
  }
}
#endif

relayResult_t relayTopoDetectGpus(int n, const char* const* busIds, struct relayTopo** out) {
  *out = NULL;
  if (n < 1 || n > RELAY_TOPO_MAX_GPUS || !busIds) return relayInvalidArgument;
  relayTopoFacts* f = malloc(sizeof *f);
  int* cudaDev = malloc((size_t)n * sizeof *cudaDev);
  pciAddr* addr = malloc((size_t)n * sizeof *addr);
  if (!f || !cudaDev || !addr) {
    free(f);
    free(cudaDev);
    free(addr);
    return relaySystemError;
  }
  relayTopoFactsInit(f, n);
  for (int i = 0; i < n; i++) {
    addr[i] = parseBusId(busIds[i]);
    cudaDev[i] = -1;
    int d;
    if (cudaDeviceGetByPCIBusId(&d, busIds[i]) != cudaSuccess) {
      cudaGetLastError(); /* not visible to this process: NVML may still see it */
      continue;
    }
    cudaDev[i] = d;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      snprintf(f->name[i], sizeof f->name[i], "%.*s", RELAY_TOPO_GPU_NAME_MAX - 1, prop.name);
      f->ccMajor[i] = prop.major;
    }
    int clockKHz = 0, widthBits = 0;
    if (cudaDeviceGetAttribute(&clockKHz, cudaDevAttrMemoryClockRate, d) == cudaSuccess &&
        cudaDeviceGetAttribute(&widthBits, cudaDevAttrGlobalMemoryBusWidth, d) == cudaSuccess)
      f->memPeakBw[i] = 2.0 * clockKHz * 1e3 * widthBits / 8; /* double data rate */
    cudaGetLastError();
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j || cudaDev[i] < 0 || cudaDev[j] < 0) continue;
      int v;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, cudaDev[i], cudaDev[j]) == cudaSuccess)
        f->p2pAccess[i * n + j] = v != 0;
      cudaGetLastError();
    }
#ifdef RELAY_HAVE_HIP
  /* xGMI or not, and the hops, per pair this process sees (AMD has no NVML;
   * HIP answers for GPUs outside HIP_VISIBLE_DEVICES neither). */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      uint32_t type = 0, hops = 0;
      if (i == j || cudaDev[i] < 0 || cudaDev[j] < 0) continue;
      if (hipExtGetLinkTypeAndHopCount(cudaDev[i], cudaDev[j], &type, &hops) == hipSuccess)
        f->xgmiHops[i * n + j] = type == RELAY_HSA_LINK_XGMI ? (int)hops : 0;
      cudaGetLastError();
    }
  (void)addr;
#else
  nvmlApi nv;
  if (nvmlOpen(&nv)) {
    for (int i = 0; i < n; i++) {
      nvmlDevice_t dev;
      if (nv.byBusId(busIds[i], &dev) != NVML_SUCCESS) continue;
      if (!f->name[i][0] && nv.name) nv.name(dev, f->name[i], (unsigned)sizeof f->name[i]);
      nvmlLinks(&nv, f, addr, i, dev);
    }
    nvmlClose(&nv);
  }
#endif
  relayResult_t r = relayTopoFromFacts(f, out);
  free(f);
  free(cudaDev);
  free(addr);
  return r;
}

relayResult_t relayTopoDetect(struct relayTopo** out) {
  *out = NULL;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    cudaGetLastError();
    return relayNotSupported;
  }
  if (n > RELAY_TOPO_MAX_GPUS) n = RELAY_TOPO_MAX_GPUS;
  char(*ids)[32] = calloc((size_t)n, sizeof *ids);
  const char** idp = calloc((size_t)n, sizeof *idp);
  relayResult_t r = ids && idp ? relaySuccess : relaySystemError;
  for (int i = 0; i < n && r == relaySuccess; i++) {
    if (cudaDeviceGetPCIBusId(ids[i], (int)sizeof ids[i], i) != cudaSuccess) {
      cudaGetLastError();
      r = relayNotSupported;
    }
    idp[i] = ids[i];
  }
  if (r == relaySuccess) r = relayTopoDetectGpus(n, idp, out);
  free(ids);
  free(idp);
  return r;
}

#else /* CPU-only build: no GPUs to ask */

relayResult_t relayTopoDetectGpus(int n, const char* const* busIds, struct relayTopo** out) {
  (void)n;
  (void)busIds;
  *out = NULL;
  return relayNotSupported;
}

relayResult_t relayTopoDetect(struct relayTopo** out) {
  *out = NULL;
  return relayNotSupported;
}

#endif
