#!/usr/bin/env python3
# Every 2-rank repetition's median call (us) per peer, sorted: the per-launch picture of
# docs/perf/2026-12-05-cpu-bcast-2core.md. Usage: per-launch.py run1.jsonl [run2.jsonl ...]
import json, sys
for path in sys.argv[1:]:
    d = {}
    for line in open(path):
        r = json.loads(line)
        if r["ranks"] == 2:
            d.setdefault((r["dtype"], r["bytes"], r["peer"]), []).append(r["time_med_us"])
    print(path)
    for dt in ("float", "bfloat16"):
        for b in (4096, 16384, 65536, 262144, 1048576, 4194304):
            cells = [f"{p}: " + " ".join("%.1f" % x for x in sorted(d[(dt, b, p)]))
                     for p in ("relaycc", "relaycc-base", "openmpi") if (dt, b, p) in d]
            print(f"  {dt} {b >> 10}K | " + " | ".join(cells))
