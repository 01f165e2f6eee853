#!/bin/bash
# usage: routes.sh BENCH [alternations]
B=$1; N=${2:-2}
for a in $(seq 1 $N); do
for c in allreduce allgather broadcast; do
 for cfg in "onecopy:RELAYCC_ROUTE=bw" "staged:RELAYCC_ROUTE=bw RELAYCC_SHM_CMA_BYTES=0" "oneshot:RELAYCC_ROUTE=oneshot" "direct:RELAYCC_ROUTE=direct" "auto:" "auto-nocma:RELAYCC_SHM_CMA_BYTES=0"; do
  name=${cfg%%:*}; envs=${cfg#*:}
  echo "== $c $name $a load $(cut -d' ' -f1 /proc/loadavg)"
  env $envs RELAYCC_BENCH_BIND=1 $B --backend shm --ranks 2 -A 2 -c $c --root-index 1 --sizes 4K,16K,64K,256K -n 2000 -r 3 --check 0 2>&1 | awk '/^ +[0-9]/{print $1, $5, $6, $7, $8}'
 done
done; done
