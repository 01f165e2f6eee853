#!/usr/bin/env bash
# device call 9 (2026-12-06, session 46): the carried broadcast priced from 3 actives (planKey.carry, sim.c
# carriedSeconds): broadcast at 2/3/4/8 ranks against main 72d9b2e (auto both), then issue 38's table.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
(cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build build-cpu-peers -j8 --target relaycc-bench) > /tmp/b1.log 2>&1 &
p1=$!
[ -x /tmp/base-build/relaycc-bench ] || (cmake -S .carry/base-src -B /tmp/base-build -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/base-build -j8 --target relaycc-bench) > /tmp/b2.log 2>&1
wait $p1
ls -la build-cpu-peers/relaycc-bench /tmp/base-build/relaycc-bench >> $OUT/host.txt 2>&1 || { tail -30 /tmp/b1.log /tmp/b2.log; }
t0=$(date +%s)
for rep in 1 2 3; do for n in 2 3 4 8; do for v in base new; do
  bin=build-cpu-peers/relaycc-bench; [ $v = base ] && bin=/tmp/base-build/relaycc-bench
  echo "--- V=$v ranks=$n rep=$rep"
  RELAYCC_BENCH_BIND=1 timeout 60 $bin --backend shm --ranks $n -A $n -c broadcast --sizes 4K,16K,64K,256K,1M,4M --route auto -n 300 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|^# [a-z]+$|rror'
done; done; done > $OUT/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
OUT=$OUT/table timeout -k 5 480 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks "8 4 2" --reps 3 --peers relaycc,openmpi,deepspeed --budget 470 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt; grep -E '^\| [0-9]+ \| [a-z]' $OUT/table/table.md | grep -c . ; tail -30 $OUT/table/table.md
