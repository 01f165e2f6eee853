#!/bin/bash
out=$1; rounds=${2:-5}
: > $out
source <(sed -n '/^run()/,/^}/p' /tmp/cs38/alt.sh)
B=/tmp/cs38-before/relaycc-bench A=/tmp/cs38-after/relaycc-bench
for ((R = 0; R < rounds; R++)); do
  for n in 2 4 8; do
    bind=X=1; [ $n = 2 ] && bind=RELAYCC_BENCH_BIND=1
    if [ $((R % 2)) = 0 ]; then run before $n $B $bind; run after $n $A $bind
    else run after $n $A $bind; run before $n $B $bind; fi
  done
done
