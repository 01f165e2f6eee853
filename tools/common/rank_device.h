/* Ranks sharing GPUs, for the tools and tests that fork one process per rank (relaycc-bench --backend nccl,
 * tests/gpu): rank r runs on device r % ndev, so 8 ranks run on one GPU for correctness (issue 34; how:
 * docs/gpu-harness.md). The library itself sets no NCCL variable; these programs are the user here. */
#ifndef RELAY_TOOLS_RANK_DEVICE_H_
#define RELAY_TOOLS_RANK_DEVICE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* What every timing taken with ranks sharing a GPU says beside it. */
#define RELAY_SHARED_GPU_NOTE "not performance: ranks share one GPU"

/* Rank `rank` of `nranks` on a machine of ndev GPUs (ndev >= 1): returns its device, r % ndev. When ranks
 * share devices (nranks > ndev) it first gives this process -- one rank, forked, before its first NCCL call
 * -- what NCCL 2.28 needs to accept two ranks on one GPU: its own NCCL_HOSTID ("<NCCL_HOSTID or
 * relaycc-<job>>.r<rank>"; NCCL then takes each rank for a host of its own and connects them through its
 * socket transport), with NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1 unless already set. Where
 * NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30's own mode) the host id is left alone. */
int relayRankDevice(int rank, int nranks, int ndev, const char* job);

/* 1 when nranks ranks on ndev GPUs share them. */
int relayRanksShareGpus(int nranks, int ndev);

#ifdef __cplusplus
}
#endif
#endif
