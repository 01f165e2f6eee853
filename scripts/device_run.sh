#!/usr/bin/env bash
# One batched run on a GPU machine: build, GPU tests, bench sweeps. Every step
# writes its log under $OUT (a pipe shows nothing if the call times out) and
# runs under `timeout` in its own process group, so a hung rank is killed with
# everything it forked.
#   scripts/device_run.sh [build] [gputest] [bench] [oneshot] [graph]   (default: all)
set -u
# Only 8 files come back from the device tool: everything goes under logs/ and
# is packed into one logs.tgz at the end (run.log stays beside it).
TOP=${OUT:-/tmp/relaycc-out}
export OUT=$TOP/logs
mkdir -p "$OUT"
pack() { tar -C "$TOP" -czf "$TOP/logs.tgz" logs && cp "$OUT/run.log" "$TOP/run.log" && rm -rf "$OUT"; }
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
steps=${*:-build gputest bench oneshot graph}
B=./build/relaycc-bench
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }
# run NAME SECONDS CMD...: bounded, own process group, output to $OUT/NAME.log
run() {
  local name=$1 secs=$2; shift 2
  log "start $name: $*"
  setsid timeout -k 5 "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
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
      run build 400 bash -c "cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build -j $(nproc)" || exit 1 ;;
    gputest)
      run gputest 420 bash -c "cd build && ctest -L gpu --output-on-failure --timeout 300" ;;
    bench)
      for dt in bfloat16 float; do
        run bench_percall_$dt 240 $B --backend nccl -A 2 -c all -b 4K -e 1G -f 4 -d $dt -n 20 -w 5 -r 3 --route direct --json "$OUT/bench_percall_$dt.json"
      done ;;
    graph)
      run bench_graph_bfloat16 240 $B --backend nccl -A 2 -c all -b 4K -e 1G -f 4 -d bfloat16 -n 20 -w 5 -r 3 --route direct --graph --json "$OUT/bench_graph_bfloat16.json" ;;
    oneshot)
      run oneshot_graph 200 $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --graph --json "$OUT/oneshot_graph.json"
      run oneshot_percall 200 $B --backend nccl -A 2 -c allreduce,reducescatter -b 4K -e 2M -f 2 -d bfloat16 -n 50 -w 10 -r 5 --route oneshot --json "$OUT/oneshot_percall.json" ;;
    *) log "unknown step $s" ;;
  esac
done
log done
