#!/usr/bin/env bash
# One rank of an MPI launch on the GPUs there are: mpirun -np N scripts/mpi_rank_gpu.sh PROG ARGS...
# Rank r runs on GPU r % GPUs (NCCL_TESTS_DEVICE, which nccl-tests reads; CUDA_VISIBLE_DEVICES stays as it
# is). Where ranks share a GPU it gets its own NCCL_HOSTID with loopback sockets, the way NCCL 2.28 accepts
# two ranks on one GPU (docs/gpu-harness.md). RELAY_PRELOAD: a library to preload into PROG alone (the NCCL
# interposer), not into this shell or the launcher.
set -u
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
n=${OMPI_COMM_WORLD_SIZE:-1}
ngpu=$(ls /dev | grep -c '^nvidia[0-9][0-9]*$')
[ "$ngpu" -ge 1 ] || ngpu=1
export NCCL_TESTS_DEVICE=$((r % ngpu))
if [ "$n" -gt "$ngpu" ] && [ "${NCCL_MULTI_RANK_GPU_ENABLE:-0}" != 1 ]; then
  export NCCL_HOSTID="${NCCL_HOSTID:-relaycc-mpi}.r$r" NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  export NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
fi
[ -z "${RELAY_PRELOAD:-}" ] || export LD_PRELOAD=$RELAY_PRELOAD
exec "$@"
