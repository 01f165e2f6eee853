#include "rank_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int relayRanksShareGpus(int nranks, int ndev) { return ndev > 0 && nranks > ndev; }

int relayRankDevice(int rank, int nranks, int ndev, const char* job) {
  if (ndev < 1) ndev = 1;
  if (!relayRanksShareGpus(nranks, ndev)) return rank % ndev;
  const char* multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (!(multi && strcmp(multi, "1") == 0)) {
    const char* base = getenv("NCCL_HOSTID");
    char id[256];
    if (base && *base) snprintf(id, sizeof id, "%.200s.r%d", base, rank);
    else snprintf(id, sizeof id, "relaycc-%.200s.r%d", job && *job ? job : "rank", rank);
    setenv("NCCL_HOSTID", id, 1);
  }
  /* Loopback: with each rank its own "host", NCCL would otherwise pick the first non-loopback interface. */
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  return rank % ndev;
}
