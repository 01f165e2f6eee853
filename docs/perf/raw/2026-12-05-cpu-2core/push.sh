#!/bin/bash
out=$1; rounds=${2:-5}
: > $out
run() { # label ranks bench env...
  local label=$1 n=$2 b=$3; shift 3
  env "$@" timeout 300 $b --backend shm --ranks $n -A $n -c allreduce,reducescatter,allgather,alltoall \
    --sizes 4K,16K --route oneshot -n 200 -w 20 -r 1 --check 0 --json /tmp/cs38/p.json >/dev/null 2>&1 || echo "fail $label $n" >&2
  python3 -c "
import json
d=json.load(open('/tmp/cs38/p.json'))
for r in d['rows']:
  print(json.dumps({'label':'$label','ranks':$n,'round':$R,'coll':r['coll'],'bytes':r['bytes'],'route':r.get('route'),'med':r['time_med_us'],'min':r['time_min_us']}))
" >> $out
}
B=/tmp/cs38-before/relaycc-bench-spin A=/tmp/cs38-after/relaycc-bench-push
for ((R = 0; R < rounds; R++)); do
  for n in 2 4 8; do
    bind=X=1; [ $n = 2 ] && bind=RELAYCC_BENCH_BIND=1
    if [ $((R % 2)) = 0 ]; then run lines5 $n $B $bind; run lines1 $n $A $bind
    else run lines1 $n $A $bind; run lines5 $n $B $bind; fi
  done
done
