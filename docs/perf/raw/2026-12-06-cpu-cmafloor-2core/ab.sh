#!/bin/bash
# usage: ab.sh BASE_BENCH BRANCH_BENCH alternations
A=$1; B=$2; N=${3:-3}
for a in $(seq 1 $N); do
for c in allreduce allgather broadcast; do
 for which in base branch; do
  bin=$A; [ $which = branch ] && bin=$B
  echo "== $c $which $a load $(cut -d' ' -f1 /proc/loadavg)"
  RELAYCC_BENCH_BIND=1 $bin --backend shm --ranks 2 -A 2 -c $c --root-index 1 --sizes 4K,16K,64K,256K -n 2000 -r 3 --check 0 2>&1 | awk '/^ +[0-9]/{print $1, $5, $6, $7, $8}'
 done
done; done
