#!/usr/bin/env bash
# device call 10 (2026-12-06, session 46): carried (oneshot forced) against the bandwidth route (bw forced) at
# 3 to 8 actives of 8 ranks, 16K-1M, to set where the carried broadcast is priced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/b1.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench >> /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
t0=$(date +%s)
for rep in 1 2 3; do for n in 3 4 5 6 7 8; do for r in bw oneshot; do
  echo "--- V=$r ranks=$n rep=$rep"
  RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks $n -A $n -c broadcast --sizes 16K,64K,256K,1M --route $r -n 300 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|^# [a-z]+$|rror'
done; done; done > $OUT/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt
