#!/usr/bin/env bash
# device call 16 (2026-12-06, session 47): where the two-shot all-reduce beats the bandwidth route at 5-8
# actives and the push form below 4 KiB (all forced, 3 alternations); then the wait's spin at 8 ranks 1 MiB.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/b1.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench >> /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
b=build-cpu-peers/relaycc-bench
t0=$(date +%s)
for rep in 1 2 3; do
  for n in 5 6 7 8; do for v in bw twoshot; do
    case $v in bw) r=bw; ts=65536 ;; twoshot) r=oneshot; ts=1 ;; esac
    echo "--- V=$v ranks=$n dtype=float rep=$rep"
    RELAYCC_ONESHOT_TWOSHOT_BYTES=$ts RELAYCC_BENCH_BIND=1 timeout 60 $b --backend shm --ranks $n -A $n -c allreduce --sizes 64K,256K,512K,1M --route $r -n 100 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|rror'
  done; done
  for n in 3 4 8; do for v in push twoshot; do
    case $v in push) ts=0 ;; twoshot) ts=1 ;; esac
    echo "--- V=$v ranks=$n dtype=float rep=$rep"
    RELAYCC_ONESHOT_TWOSHOT_BYTES=$ts RELAYCC_BENCH_BIND=1 timeout 60 $b --backend shm --ranks $n -A $n -c allreduce --sizes 256,1K,2K,4K --route oneshot -n 300 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|rror'
  done; done
  for us in 50 500 5000; do for d in float bfloat16; do
    echo "--- V=spin$us ranks=8 dtype=$d rep=$rep"
    RELAYCC_SPIN_US=$us RELAYCC_ONESHOT_TWOSHOT_BYTES=1 RELAYCC_BENCH_BIND=1 timeout 60 $b --backend shm --ranks 8 -A 8 -c allreduce -d $d --sizes 256K,1M --route oneshot -n 200 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|rror'
  done; done
done > $OUT/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt
