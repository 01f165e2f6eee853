#!/bin/sh
# 3 alternating rounds of test_plan reduce_speed: before (main c870207) and after (branch bf16em 7e1ce26)
for r in 1 2 3; do
  echo "== round $r before $(date -u +%H:%M:%S) $(uptime)"; /tmp/bf16em-before-test_plan reduce_speed
  echo "== round $r after $(date -u +%H:%M:%S) $(uptime)"; /tmp/bf16em-after-test_plan reduce_speed
done
