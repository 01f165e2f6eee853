#!/bin/bash
# usage: ab3.sh ALTS RANKS COLL label=bin ... -> lines: alt label ranks coll min med spread load
alts=$1 ranks=$2 coll=$3; shift 3
for a in $(seq 1 $alts); do
  for lb in "$@"; do
    l=$(cut -d' ' -f1 /proc/loadavg)
    RELAYCC_BENCH_BIND=1 ${lb#*=} --backend shm --ranks $ranks -A $ranks -c $coll -b 4K -e 4K -n 20000 -r 3 --json /tmp/osab/cur.json >/dev/null 2>&1
    r=$(python3 -c 'import json;r=json.load(open("/tmp/osab/cur.json"))["rows"][0];print(r["time_min_us"],r["time_med_us"],r["spread"],r["wrong"])')
    echo "$a ${lb%%=*} $ranks $coll $r load=$l"
  done
done
