#!/usr/bin/env bash
# device call 8 (2026-12-06, session 46): the carried broadcast (the root's block rides the shape agreement)
# against main 72d9b2e: broadcast swept at 2/4/8 ranks, routes auto and oneshot (forced: carried at every
# size up to the 1 MiB slot), then the 2-rank table with main's build as one more peer.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ date -u; lscpu | grep -E 'Model name'; nproc; uptime; } > $OUT/host.txt 2>&1
(cmake -S . -B build-cpu-peers -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build build-cpu-peers -j8 --target relaycc-bench) > /tmp/b1.log 2>&1 &
p1=$!
(cmake -S .carry/base-src -B /tmp/base-build -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/base-build -j8 --target relaycc-bench) > /tmp/b2.log 2>&1 &
p2=$!
wait $p1; wait $p2
ls -la build-cpu-peers/relaycc-bench /tmp/base-build/relaycc-bench >> $OUT/host.txt 2>&1 || { tail -30 /tmp/b1.log /tmp/b2.log; }
t0=$(date +%s)
for rep in 1 2 3; do for n in 2 4 8; do for v in base:auto new:auto new:oneshot; do
  bin=build-cpu-peers/relaycc-bench; [ ${v%%:*} = base ] && bin=/tmp/base-build/relaycc-bench
  echo "--- V=$v ranks=$n rep=$rep"
  RELAYCC_BENCH_BIND=1 timeout 60 $bin --backend shm --ranks $n -A $n -c broadcast --sizes 4K,16K,64K,256K,1M --route ${v##*:} -n 400 -r 3 --check 0 2>&1 | grep -E '^ +[0-9]|^# [a-z]+$|rror'
done; done; done > $OUT/sweep.txt 2>&1
echo "sweep $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
OUT=$OUT/table timeout -k 5 330 scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks 2 --reps 3 --peers relaycc,openmpi,deepspeed --base-build /tmp/base-build --budget 320 --build build-cpu-peers > /dev/null 2>&1
echo "table rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/host.txt
cat $OUT/host.txt; grep -E 'V=|^ +[0-9]' $OUT/sweep.txt | head -20; grep -E '^\| 2|^- ' $OUT/table/table.md | head -40
