# Sourced (bash): a private CUDA MPS daemon for ranks that share a GPU (docs/gpu-harness.md).
#   mps_start DIR PER_GPU   start it with pipe and log folders under DIR (nothing when PER_GPU <= 1); each
#                           client gets 100 / PER_GPU percent of the SMs, so the spinning blocks of every
#                           rank on a GPU fit at once (a client that cannot place its blocks while its peers
#                           spin waiting for it would deadlock); sets mps_on=1 when it runs, else says why
#   mps_stop                quit it (and unset the client variables)
mps_on=0
mps_start() {
  local dir=$1 per_gpu=$2
  [ "$per_gpu" -gt 1 ] || return 0
  if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "MPS: nvidia-cuda-mps-control not found: ranks sharing a GPU run time-sliced (slow, still correct)"
    return 0
  fi
  mkdir -p "$dir/pipe" "$dir/log"
  export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
  if ! nvidia-cuda-mps-control -d >>"$dir/control.log" 2>&1; then
    echo "MPS: the daemon did not start ($dir/control.log): ranks sharing a GPU run time-sliced"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 0
  fi
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / per_gpu))
  mps_on=1
}
mps_stop() {
  [ "$mps_on" = 1 ] || return 0
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  local i
  for i in $(seq 50); do pgrep -f "nvidia-cuda-mps-(control|server)" >/dev/null || break; sleep 0.1; done
  mps_on=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
}
