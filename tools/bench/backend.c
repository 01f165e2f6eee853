/* Which backends this relaycc-bench has, and --backend auto. */
#include <stdio.h>
#include <string.h>

#include "backend.h"

#ifdef RELAY_HAVE_NCCL
/* Defined by tools/bench/cuda/ (the NCCL backend, compiled only with CUDA +
 * NCCL). Weak so this file links before that backend exists: the address is
 * then NULL and --backend nccl says so, instead of the build breaking. */
extern const benchBackend benchBackendNccl __attribute__((weak));
static const benchBackend* ncclBackend(void) { return &benchBackendNccl; }
#else
static const benchBackend* ncclBackend(void) { return NULL; }
#endif

const benchBackend* benchSelectBackend(const char* name, int* defaultRanks, char* why, size_t whyLen) {
  char sub[512] = "";
  if (!strcmp(name, "shm")) {
    if (benchBackendShm.probe(defaultRanks, sub, sizeof sub)) {
      snprintf(why, whyLen, "shm backend unusable here: %s", sub);
      return NULL;
    }
    return &benchBackendShm;
  }
  const benchBackend* nccl = ncclBackend();
  if (!strcmp(name, "nccl")) {
    if (!nccl) {
#ifdef RELAY_HAVE_NCCL
      snprintf(why, whyLen,
               "this relaycc-bench was built with CUDA + NCCL but has no NCCL bench backend yet "
               "(tools/bench/cuda/); use --backend shm");
#else
      snprintf(why, whyLen,
               "this relaycc-bench was built without CUDA + NCCL (nvcc or nccl.h not found when "
               "configured); use --backend shm");
#endif
      return NULL;
    }
    if (nccl->probe(defaultRanks, sub, sizeof sub)) {
      snprintf(why, whyLen, "nccl backend unusable here: %s", sub);
      return NULL;
    }
    return nccl;
  }
  if (!strcmp(name, "auto")) {
    /* The GPUs when the binary can drive them and there are some; the
     * probe looks without creating a CUDA context (we fork after this). One GPU is no node to measure:
     * shm then (8 ranks on one GPU are for correctness, asked for with --backend nccl --ranks 8). */
    if (nccl && nccl->probe(defaultRanks, sub, sizeof sub) == 0 && *defaultRanks >= 2) return nccl;
    return benchSelectBackend("shm", defaultRanks, why, whyLen);
  }
  snprintf(why, whyLen, "unknown backend '%s' (shm, nccl, auto)", name);
  return NULL;
}
