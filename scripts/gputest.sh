#!/usr/bin/env bash
# The GPU tests (CTest label gpu) with N ranks on the M GPUs of this machine: `make gputest RANKS=8`
# (docs/gpu-harness.md). Rank r runs on GPU r % M. Where ranks share a GPU this script
#   - starts a private CUDA MPS daemon (folders under the build tree), so the ranks' kernels run at once
#     (4 us per IPC hop on an H200, against 2-9 ms time-sliced), each client limited to 100 / (ranks per GPU)
#     percent of the SMs so every rank's spinning blocks fit together; if MPS cannot start it says so and
#     the tests run time-sliced;
#   - lets each rank process give itself its own NCCL_HOSTID with loopback sockets (tools/common/
#     rank_device.c), the way NCCL 2.28 accepts two ranks on one GPU;
#   - runs every test in its own process group under a deadline that kills the group, restarts the MPS
#     daemon after a failed test (a client killed mid-kernel can leave it undefined), and runs the tests
#     labelled nomps (ranks killed on purpose) time-sliced, with the daemon stopped.
# Every timing taken this way is labelled "not performance: ranks share one GPU".
#   scripts/gputest.sh BUILD_DIR [RANKS]
# Environment: GPUTEST_R / GPUTEST_E (ctest -R / -E regexes), GPUTEST_BUDGET (seconds per test, default
# 600), OUT (logs go there too when set).
set -u
build=${1:?usage: scripts/gputest.sh BUILD_DIR [RANKS]}
ranks=${2:-}
build=$(cd "$build" && pwd) || exit 2
log_dir=${OUT:-$build/gputest-logs}
mkdir -p "$log_dir"
summary=$log_dir/gputest-summary.log
: >"$summary"
say() { echo "gputest: $*" | tee -a "$summary"; }

ngpu=$(ls /dev 2>/dev/null | grep -c '^nvidia[0-9][0-9]*$')
if [ "$ngpu" -lt 1 ]; then
  say "no GPU on this machine (no /dev/nvidia<N>): every GPU test skipped"
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  [ "$n" -ge 1 ] && ngpu=$n
fi
[ -n "$ranks" ] || ranks=$ngpu
export RELAYCC_GPUTEST_RANKS=$ranks NCCL_NVLS_ENABLE=0
per_gpu=$(((ranks + ngpu - 1) / ngpu))

mps_dir=$build/mps
. "$(dirname "$0")/mps.sh"
mps_restart() { mps_stop; mps_start "$mps_dir" "$per_gpu" 2>&1; }
trap 'mps_stop' EXIT
trap 'exit 130' INT TERM

mps_start "$mps_dir" "$per_gpu" 2>&1 # its word on a failure to start: the mode line says what runs
if [ "$per_gpu" -gt 1 ]; then
  mode="$ranks ranks on $ngpu GPU(s), $per_gpu per GPU, NCCL_HOSTID per rank over loopback sockets, MPS "
  [ "$mps_on" = 1 ] && mode+="on ($CUDA_MPS_ACTIVE_THREAD_PERCENTAGE% of the SMs per rank)" || mode+="off (time-sliced)"
  mode+=": not performance: ranks share one GPU"
else
  mode="$ranks ranks, one per GPU ($ngpu GPUs)"
fi
say "mode: $mode"
say "commit $(git -C "$build/.." rev-parse --short=12 HEAD 2>/dev/null || echo unknown); $(nvidia-smi -L 2>/dev/null | head -1)"

# The gpu tests CTest knows, filtered; nomps ones last.
list=$(cd "$build" && ctest -N -L gpu ${GPUTEST_R:+-R "$GPUTEST_R"} ${GPUTEST_E:+-E "$GPUTEST_E"} |
       sed -n 's/^ *Test *#[0-9]*: *//p')
nomps=$(cd "$build" && ctest -N -L nomps | sed -n 's/^ *Test *#[0-9]*: *//p')
budget=${GPUTEST_BUDGET:-600}
pass=0 fail=0 skip=0 failed=""

run_one() { # name: ctest on one test in its own process group, killed with it at the deadline
  local name=$1 rc
  (cd "$build" && exec setsid ctest -R "^${name}\$" --output-on-failure --timeout "$budget") \
    >"$log_dir/$name.log" 2>&1 &
  local pid=$! t=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$t" -ge $((budget + 30)) ]; then
      say "$name: past its budget of $budget s: process group killed"
      kill -KILL -- "-$pid" 2>/dev/null
      break
    fi
    sleep 1
    t=$((t + 1))
  done
  wait "$pid"
  rc=$?
  if grep -q "Not Run\|\*\*\*Skipped" "$log_dir/$name.log"; then return 77; fi
  return $rc
}

for phase in mps nomps; do
  if [ "$phase" = nomps ]; then
    [ -n "$nomps" ] || continue
    mps_stop
    say "the nomps tests (ranks killed on purpose) run time-sliced, the MPS daemon stopped"
  fi
  for name in $list; do
    is_nomps=0
    for x in $nomps; do [ "$x" = "$name" ] && is_nomps=1; done
    { [ "$phase" = mps ] && [ "$is_nomps" = 1 ]; } && continue
    { [ "$phase" = nomps ] && [ "$is_nomps" = 0 ]; } && continue
    t0=$(date +%s)
    run_one "$name"
    rc=$?
    dt=$(($(date +%s) - t0))
    if [ "$rc" = 77 ]; then
      skip=$((skip + 1))
      say "SKIP $name (${dt} s): $(grep -m1 -o 'SKIP.*' "$log_dir/$name.log" | head -c 200)"
    elif [ "$rc" = 0 ]; then
      pass=$((pass + 1))
      say "PASS $name (${dt} s)"
    else
      fail=$((fail + 1))
      failed+=" $name"
      say "FAIL $name (${dt} s, rc $rc): log $log_dir/$name.log"
      if [ "$phase" = mps ] && [ "$mps_on" = 1 ]; then # a killed client can leave the server undefined
        mps_restart
        say "MPS daemon restarted after $name"
      fi
    fi
  done
done
say "$pass passed, $fail failed, $skip skipped ($mode)${failed:+; failed:$failed}"
[ "$fail" = 0 ]
