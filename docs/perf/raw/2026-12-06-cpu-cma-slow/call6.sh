#!/usr/bin/env bash
# device call 4 (2026-12-06, session 45): RELAYCC_SHM_CMA_SLOW_NS: each rank's measured 8-byte read on the 16-core Xeon.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; nproc; lscpu | grep -E 'Model name'; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/cm.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench >> /tmp/cm.log 2>&1 || tail -20 /tmp/cm.log
gcc -O2 .carry/pvr.c -o /tmp/pvr 2>/dev/null && /tmp/pvr >> $OUT/host.txt 2>&1
for rep in 1 2 3 4; do for n in 2 4 8; do
  echo "--- ranks=$n rep=$rep: $(RELAYCC_DEBUG=2 RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks $n -A $n -c allreduce --sizes 1M -n 5 -r 1 2>&1 | grep -o 'rank [0-9]*: an 8-byte process_vm_readv costs [0-9]* ns\|stays staged.*' | awk '{printf "%s%s ", $2, $7}')"
done; done > $OUT/pct.txt 2>&1
for rep in 1 2; do for v in 1000 0; do
  echo "--- SLOWNS=$v ranks=2 rep=$rep"
  RELAYCC_SHM_CMA_SLOW_NS=$v RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks 2 -A 2 -c broadcast,allgather,alltoall,allreduce --sizes 4K,16K,64K,256K,1M -n 300 -r 1 | grep -E '^ +[0-9]|^# [a-z]+$'
done; done > $OUT/ab.txt 2>&1
cat $OUT/host.txt $OUT/pct.txt; grep -A0 -- '---' $OUT/ab.txt | head -2
