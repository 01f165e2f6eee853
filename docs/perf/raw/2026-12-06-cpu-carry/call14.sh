#!/usr/bin/env bash
# device call 14 (2026-12-06, session 46): issue 38's table at 8 ranks on final main (7e49a82 + docs).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
t0=$(date +%s)
OUT=$OUT/table timeout -k 5 400 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks 8 --reps 3 --peers relaycc,openmpi,deepspeed --budget 390 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt; grep -E '\*\*' $OUT/table/table.md | grep -v '^- '; grep -E '^- ' $OUT/table/table.md
