#!/bin/sh
# Usage: coloc.sh BASE_BUILD NEW_BUILD HOGS ROUNDS
# 2 ranks, relaycc-bench on shm, all-reduce and broadcast 4K/64K/1M, ranks bound (RELAYCC_BENCH_BIND=1) and
# unbound (0), HOGS busy loops (sh) beside them for the whole run, the two builds alternating ROUNDS times.
base=$1 new=$2 hogs=$3 rounds=$4
i=0; while [ $i -lt "$hogs" ]; do timeout 600 sh -c 'while :; do :; done' & i=$((i+1)); done
sleep 1
r=0; while [ $r -lt "$rounds" ]; do
  for b in "$base" "$new"; do for bind in 1 0; do
    printf '%s bind=%s: ' "$b" "$bind"
    RELAYCC_BENCH_BIND=$bind "$b/relaycc-bench" --backend shm --ranks 2 -A 2 -c allreduce,broadcast \
      -b 4K -e 1M -f 16 2>&1 | grep -E '^ +[0-9]' | awk '{printf "%s %s %s %s; ", $1, $5, $6, $7}'
    echo
  done; done
  r=$((r+1))
done
[ "$hogs" -gt 0 ] && pkill -f 'while :; do :; done'
uptime
