#!/usr/bin/env bash
# relaycc-bench as a user runs it (registered by tests/bench.cmake).
#   test_bench.sh ok BENCH args...              exit 0 and "#wrong" all 0
#   test_bench.sh fail SECONDS REGEX BENCH args...
#       exit non-zero within SECONDS, and stderr+stdout match REGEX (the
#       argument or rank the message must name)
#   test_bench.sh json FILE BENCH args...       exit 0 and FILE holds the rows
set -u
mode=$1; shift
case "$mode" in
  ok)
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    [ "$rc" -eq 0 ] || { echo "FAIL: exit $rc, expected 0"; exit 1; }
    # Every data row ends in its #wrong; a run that printed no row tested nothing.
    rows=$(printf '%s\n' "$out" | grep -c '^ ')
    [ "$rows" -gt 0 ] || { echo "FAIL: no table rows"; exit 1; }
    bad=$(printf '%s\n' "$out" | grep '^ ' | awk '$NF != "0" && $NF != "N/A"' | wc -l)
    [ "$bad" -eq 0 ] || { echo "FAIL: $bad rows with #wrong != 0"; exit 1; }
    # RELAYCC_BENCH_EXPECT: a regex the output must also match (e.g. the label of ranks sharing a GPU).
    if [ -n "${RELAYCC_BENCH_EXPECT:-}" ]; then
      printf '%s\n' "$out" | grep -Eq -e "$RELAYCC_BENCH_EXPECT" || { echo "FAIL: no /$RELAYCC_BENCH_EXPECT/"; exit 1; }
    fi
    exit 0 ;;
  fail)
    limit=$1 regex=$2; shift 2
    start=$(date +%s%N)
    out=$("$@" 2>&1); rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%s\n(exit %d after %d ms)\n' "$out" "$rc" "$ms"
    [ "$rc" -ne 0 ] || { echo "FAIL: exit 0, expected a failure"; exit 1; }
    [ "$ms" -le $((limit * 1000)) ] || { echo "FAIL: took $ms ms, limit ${limit}s"; exit 1; }
    printf '%s\n' "$out" | grep -Eq -e "$regex" || { echo "FAIL: output does not match /$regex/"; exit 1; }
    exit 0 ;;
  json)
    file=$1; shift
    rm -f "$file"
    "$@" --json "$file" || { echo "FAIL: exit $?"; exit 1; }
    cat "$file"
    grep -q '"rows": \[' "$file" && grep -q '"time_min_us": ' "$file" && grep -q '"total_wrong": 0' "$file" \
      || { echo "FAIL: $file lacks rows"; exit 1; }
    if command -v python3 >/dev/null 2>&1; then
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["rows"]) > 0' "$file" \
        || { echo "FAIL: $file is not valid JSON"; exit 1; }
    fi
    exit 0 ;;
  *)
    echo "usage: test_bench.sh ok|fail|json ..."; exit 2 ;;
esac
