#!/bin/bash
# Alternating rounds: each round runs every configuration once; one JSON line per row.
out=$1; rounds=${2:-3}
: > $out
run() { # label ranks bench env...
  local label=$1 n=$2 b=$3; shift 3
  env "$@" timeout 300 $b --backend shm --ranks $n -A $n -c allreduce,reducescatter,allgather,alltoall \
    --sizes 4K,64K,1M -n 100 -w 10 -r 1 --check 0 --json /tmp/cs38/a.json >/dev/null 2>&1 || echo "fail $label $n" >&2
  python3 -c "
import json
d=json.load(open('/tmp/cs38/a.json'))
for r in d['rows']:
  print(json.dumps({'label':'$label','ranks':$n,'round':$R,'coll':r['coll'],'bytes':r['bytes'],'route':r.get('route'),'med':r['time_med_us'],'min':r['time_min_us']}))
" >> $out
}
B=/tmp/cs38-before/relaycc-bench A=/tmp/cs38-after/relaycc-bench
for ((R = 0; R < rounds; R++)); do
  for n in 4 8; do
    run before $n $B X=1
    run shared20 $n $A RELAYCC_SPIN_SHARED=20
    run shared50 $n $A RELAYCC_SPIN_SHARED=50
    run shared200 $n $A RELAYCC_SPIN_SHARED=200
  done
  run before 2 $B RELAYCC_BENCH_BIND=1
  run busy0 2 $A RELAYCC_BENCH_BIND=1 RELAYCC_SPIN_BUSY=0
  run busy200 2 $A RELAYCC_BENCH_BIND=1 RELAYCC_SPIN_BUSY=200
  run busy2000 2 $A RELAYCC_BENCH_BIND=1 RELAYCC_SPIN_BUSY=2000
done
