#!/usr/bin/env bash
# device call 1 (2026-12-06): CPU-only relaycc builds: main, main+stagger.patch, main+ring.patch.
# 1) issue 37's torch table (4,8 ranks); 2) issue 38: 4/8-rank broadcast main vs stagger; small messages
# main vs ring at 2/4/8 ranks; rooted floor sweep. Everything alternated in the same run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/call1.log) 2>&1
T0=$(date +%s); left() { echo $(( 455 - ($(date +%s) - T0) )); }
date -u; nproc; lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA'; python3 -c 'import torch; print(torch.__version__)'; uptime
cp .carry/stagger.patch .carry/stg.patch
for v in stg; do
  d=/tmp/$v; mkdir -p $d
  tar --exclude=./build-cpu-peers --exclude=./.git -cf - . | tar -xf - -C $d
  (cd $d && (git apply .carry/$v.patch || patch -p1 < .carry/$v.patch)) || echo "PATCH $v FAILED"
done
grep -c "its own 1/(A-1)" /tmp/stg/src/transport/shm/bw.c
bld() { cmake -S $1 -B $2 -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > $OUT/cmake-$3.log 2>&1 &&
  cmake --build $2 -j6 --target $4 >> $OUT/cmake-$3.log 2>&1; echo "$3 build rc=$?"; }
bld . build-cpu-peers main "relaycc-bench relaycc_shared" & p1=$!
bld /tmp/stg /tmp/stg/build stg relaycc-bench & p2=$!
bld /tmp/ring /tmp/ring/build ring relaycc-bench & p3=$!
wait $p1 $p2 $p3; echo "builds done at $(( $(date +%s) - T0 )) s"
exe() { case $1 in main) echo build-cpu-peers/relaycc-bench ;; *) echo /tmp/$1/build/relaycc-bench ;; esac; }

echo "=== torch bench (4,8 ranks)"; t1=$(date +%s)
PYTHONPATH=python RELAYCC_LIBRARY=$PWD/build-cpu-peers/librelaycc.so timeout -k 5 240 python3 -u -m relaycc.bench --torch --ranks 4,8 > $OUT/torch_bench.txt 2>&1
echo "torch bench rc=$? $(( $(date +%s) - t1 )) s"; tail -c 2500 $OUT/torch_bench.txt

echo "=== broadcast main vs stg (default floors), left $(left) s"
for rep in 1 2; do for n in 4 8; do for b in main stg; do
  [ $(left) -lt 90 ] && break 3
  echo "--- $b ranks=$n rep=$rep load=$(cut -d' ' -f1 /proc/loadavg)"
  RELAYCC_BENCH_BIND=1 timeout -k 5 40 $(exe $b) --backend shm --ranks $n -A $n -c broadcast -b 256K -e 16M -f 4 --route bw -n 20 -r 3 | grep -v '^#'
done; done; done > $OUT/bcast_ab.txt 2>&1
echo "=== small messages main vs ring, left $(left) s"
for rep in 1 2; do for n in 2 4 8; do for c in alltoall allreduce; do for b in main ring; do
  [ $(left) -lt 25 ] && break 4
  echo "--- $b ranks=$n coll=$c rep=$rep load=$(cut -d' ' -f1 /proc/loadavg)"
  RELAYCC_BENCH_BIND=1 timeout -k 5 30 $(exe $b) --backend shm --ranks $n -A $n -c $c -b 4K -e 16K -f 4 -n 2000 -r 3 | grep -v '^#'
done; done; done; done > $OUT/small_ab.txt 2>&1
echo "=== floor sweep, left $(left) s"
for v in 0 67108864; do for n in 4 8; do for b in main stg; do
  [ $(left) -lt 12 ] && break 3
  echo "--- $b CMA_ROOTED_BYTES=$v ranks=$n"
  RELAYCC_SHM_CMA_ROOTED_BYTES=$v RELAYCC_BENCH_BIND=1 timeout -k 5 40 $(exe $b) --backend shm --ranks $n -A $n -c broadcast -b 256K -e 16M -f 4 --route bw | grep -v '^#'
done; done; done > $OUT/bcast_floor.txt 2>&1
tail -n 30 $OUT/bcast_ab.txt; tail -n 20 $OUT/small_ab.txt
date -u; echo "total $(( $(date +%s) - T0 )) s"
