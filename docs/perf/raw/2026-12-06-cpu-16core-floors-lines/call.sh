#!/usr/bin/env bash
# device call (2026-12-06, session 45, second): one-copy floors swept on the 16-core host, the tile-line
# change A/B'd against main, then the CPU-peers table (no gloo) with the floors the sweeps picked.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
T0=$(date +%s); left() { echo $(( 565 - ($(date +%s) - T0) )); }
{ date -u; nproc; lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA'; uptime; uname -r; cat /proc/sys/kernel/yama/ptrace_scope 2>&1; } > $OUT/host.txt 2>&1
mkdir -p /tmp/base; tar --exclude='./build*' --exclude=./.git --exclude=./.cpu-peers -cf - . | tar -xf - -C /tmp/base
(cd /tmp/base && patch -s -R -p1 < .carry/line.patch) || echo "PATCH -R FAILED"
grep -c bwTileLine src/transport/shm/bw.c /tmp/base/src/transport/shm/bw.c
bld() { cmake -S $1 -B $2 -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/cmake-$3.log 2>&1 &&
  cmake --build $2 -j7 --target relaycc-bench >> /tmp/cmake-$3.log 2>&1 || tail -20 /tmp/cmake-$3.log; echo "$3 build rc=$?"; }
bld . build-cpu-peers new & p1=$!; bld /tmp/base /tmp/base/build base & p2=$!; wait $p1 $p2
gcc -O2 .carry/pvr.c -o /tmp/pvr && /tmp/pvr >> $OUT/host.txt 2>&1; cat $OUT/host.txt
NEW=build-cpu-peers/relaycc-bench BASE=/tmp/base/build/relaycc-bench
B() { RELAYCC_BENCH_BIND=1 timeout -k 5 60 "$@" | grep -v -E '^#  |^# (relaycc|layout|-n|size)|^$'; }
echo "=== 2-rank pair floor sweep at $(( $(date +%s) - T0 )) s"
for rep in 1 2 3; do for v in 4096 16384 65536 262144 1048576; do
  echo "--- PAIR=$v ranks=2 rep=$rep"
  RELAYCC_SHM_CMA_PAIR_BYTES=$v B $NEW --backend shm --ranks 2 -A 2 -c broadcast,allgather,alltoall,allreduce,reducescatter -b 4K -e 1M -f 4 -n 300 -w 20 -r 1
done; done > $OUT/pair_sweep.txt 2>&1
echo "=== 4/8-rank floor sweep at $(( $(date +%s) - T0 )) s"
for rep in 1 2 3; do for n in 8 4; do for v in 65536 262144 1048576 4194304 1099511627776; do
  [ $(left) -lt 300 ] && break 3
  echo "--- CMA=$v ranks=$n rep=$rep"
  RELAYCC_SHM_CMA_BYTES=$v B $NEW --backend shm --ranks $n -A $n -c allreduce,allgather,reducescatter,alltoall -b 64K -e 16M -f 4 -n 40 -w 5 -r 1
done; done; done > $OUT/cma_sweep.txt 2>&1
echo "=== line A/B at $(( $(date +%s) - T0 )) s"
for rep in 1 2 3; do for n in 8 2; do for b in base new; do
  [ $(left) -lt 260 ] && break 3
  exe=$NEW; [ $b = base ] && exe=$BASE
  echo "--- BUILD=$b ranks=$n rep=$rep"
  B $exe --backend shm --ranks $n -A $n -c allreduce,allgather,reducescatter,alltoall,broadcast -b 4K -e 1M -f 4 -n 200 -w 10 -r 1
done; done; done > $OUT/line_ab.txt 2>&1
pair=$(python3 .carry/pick.py $OUT/pair_sweep.txt PAIR 2>> $OUT/picks.txt); pair=${pair:-4096}
cma=$(python3 .carry/pick.py $OUT/cma_sweep.txt CMA 2>> $OUT/picks.txt); cma=${cma:-65536}
python3 .carry/pick.py $OUT/line_ab.txt BUILD 2>> $OUT/picks.txt > /dev/null
(cd $OUT && tar -czf sweeps.tar.gz pair_sweep.txt cma_sweep.txt line_ab.txt && rm -f pair_sweep.txt cma_sweep.txt line_ab.txt)
echo "picked PAIR=$pair CMA=$cma at $(( $(date +%s) - T0 )) s"; grep geomean $OUT/picks.txt
echo "=== table at $(( $(date +%s) - T0 )) s, left $(left)"
mkdir -p $OUT/table
RELAYCC_SHM_CMA_PAIR_BYTES=$pair RELAYCC_SHM_CMA_BYTES=$cma OUT=$OUT/table timeout -k 5 $(( $(left) + 10 )) scripts/cpu_peers_bench.sh --wheels .carry/whl --deepspeed .cpu-peers/ds --ranks "8 2 4" --reps 3 --peers relaycc,openmpi,deepspeed --budget $(left) --build build-cpu-peers > $OUT/table/stdout.txt 2>&1
echo "table rc=$? total $(( $(date +%s) - T0 )) s"; grep -E '^- ' $OUT/table/table.md; grep '\*\*' $OUT/table/table.md
