#!/usr/bin/env bash
# device call 15 (2026-12-06, session 47): the shm one-shot's two-shot all-reduce against the bandwidth route
# and the push one-shot (all forced), 2-8 ranks, 4K-1M, 3 alternations; the ts- tests on 16 cores; then
# issue 38's table for the all-reduce at 8, 4 and 2 ranks (auto) against Open MPI and DeepSpeed.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/b1.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench test_oneshot >> /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
t0=$(date +%s)
for rep in 1 2 3; do for n in 2 3 4 5 8; do for v in bw twoshot push; do
  case $v in bw) r=bw; ts=65536 ;; twoshot) r=oneshot; ts=1 ;; push) r=oneshot; ts=0 ;; esac
  for d in float bfloat16; do
    [ $d = bfloat16 ] && [ $n != 8 ] && continue
    echo "--- V=$v ranks=$n dtype=$d rep=$rep"
    RELAYCC_ONESHOT_TWOSHOT_BYTES=$ts RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks $n -A $n -c allreduce -d $d --sizes 4K,16K,64K,256K,1M --route $r -n 100 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|rror'
  done
done; done; done > $OUT/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
t0=$(date +%s)
for c in sizes mix mismatch kill abort skew sweep backtoback; do timeout 120 build-cpu-peers/test_oneshot ts-$c 2>&1 | tail -1; done > $OUT/tests.txt 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
t0=$(date +%s)
OUT=$OUT/table timeout -k 5 300 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks "8 4 2" --colls allreduce --reps 3 --peers relaycc,openmpi,deepspeed --budget 290 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt $OUT/tests.txt; grep -E '^\|' $OUT/table/table.md | head -60; grep -E '^- ' $OUT/table/table.md
