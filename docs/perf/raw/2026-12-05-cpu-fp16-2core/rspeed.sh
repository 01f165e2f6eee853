#!/bin/sh
# 3 alternating rounds of test_plan reduce_speed: before (main 0e65967) and after (branch f16c)
for r in 1 2 3; do
  echo "== round $r before $(date -u +%H:%M:%S) $(uptime)"; /tmp/f16c-before/test_plan reduce_speed
  echo "== round $r after $(date -u +%H:%M:%S) $(uptime)"; /tmp/f16c-after-test_plan reduce_speed
done
