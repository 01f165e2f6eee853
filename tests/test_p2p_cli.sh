#!/bin/sh
# relaycc-plan --scatter-parts as a user runs it (registered by tests/p2p.cmake).
#   test_p2p_cli.sh PLAN WANT args...   exit 0 and the last line is exactly "parts WANT"
plan=$1; want=$2; shift 2
out=$("$plan" --scatter-parts "$@"); rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
last=$(printf '%s\n' "$out" | tail -n 1)
[ "$last" = "parts $want" ] || { echo "FAIL: last line '$last', want 'parts $want'"; exit 1; }
