#!/usr/bin/env bash
# device call 18 (2026-12-06, session 47), main ee97383 (two-shot from 1 KiB): auto checked at 3-8 ranks from
# 256 bytes, the ts- tests, then the 8-rank all-reduce table against Open MPI and DeepSpeed twice.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/b1.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench test_oneshot >> /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
t0=$(date +%s)
for n in 3 4 5 6 7 8; do for d in float bfloat16; do
  RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks $n -A $n -c allreduce -d $d --sizes 256,1K,2K,4K,64K,1M -n 20 -r 1 --check 1 2>&1 | grep -E '^ +[0-9]|rror|Wrong'
done; done > $OUT/check.txt 2>&1
for rep in 1 2 3; do for n in 3 4 8; do for v in bw twoshot; do
  case $v in bw) r=bw ;; twoshot) r=oneshot ;; esac
  echo "--- V=$v ranks=$n dtype=float rep=$rep"
  RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks $n -A $n -c allreduce --sizes 1K,2K,4K --route $r -n 300 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|rror'
done; done; done > $OUT/sweep.txt 2>&1
for c in sizes mix mismatch kill abort skew sweep backtoback plan twocomms; do timeout 120 build-cpu-peers/test_oneshot ts-$c 2>&1 | tail -1; done > $OUT/tests.txt 2>&1
echo "check+tests $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
for t in 1 2; do
  t0=$(date +%s)
  OUT=$OUT/table$t timeout -k 5 200 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks 8 --colls allreduce --reps 3 --peers relaycc,openmpi,deepspeed --budget 190 --build build-cpu-peers > /dev/null 2>&1
  echo "table$t rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
done
cat $OUT/host.txt $OUT/tests.txt; grep -c ' 0$' $OUT/check.txt; grep -E 'Wrong' $OUT/check.txt | sort | uniq -c
for t in 1 2; do grep -E '^\| 8' $OUT/table$t/table.md; grep -E '^- ' $OUT/table$t/table.md; done
