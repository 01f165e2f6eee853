#!/usr/bin/env bash
# The spin experiments of docs/perf/2026-12-05-cpu-bcast-2core.md ("The 2-rank broadcast that is
# sometimes 4-8x slow"): relaycc-bench of main (38b0279, Release, -DRELAY_WITH_CUDA=OFF) at 2 ranks bound
# to a core each, alternating the old spin with another setting, quiet, then with a busy loop on CPU 1
# (rank 1's core). Usage: spin.sh BENCH ["ENV=VALUE ..."]   (default: RELAYCC_SPIN_BUSY=100000)
bench=${1:?relaycc-bench}
alt=${2:-RELAYCC_SPIN_BUSY=100000}
run() {
  for k in 1 2 3 4 5; do
    for e in "X=1" "$alt"; do
      echo -n "$1 $e: "
      for c in allreduce allgather broadcast; do
        RELAYCC_BENCH_BIND=1 env $e timeout 60 "$bench" --backend shm --ranks 2 -A 2 -c $c -d float \
          --sizes 4K,64K,1M -n 200 --check 0 2>&1 | grep -E "^ +[0-9]" | awk '{printf "%s/", $6}'
        echo -n " "
      done
      echo
    done
  done
}
run quiet
taskset -c 1 sh -c 'while :; do :; done' &
hog=$!
sleep 0.3
run hog
kill "$hog"
