#!/usr/bin/env bash
# scripts/format.sh [--check] [BUILD]: clang-format the tracked C, CUDA and C++ sources
# (*.c *.h *.cu *.cuh *.cpp)
# with the repository's .clang-format. --check changes nothing: it lists the files that are not formatted
# and fails when there is one (CI runs it through `make format-check`); without it the files are rewritten.
#
# The version is pinned: other clang-format versions format the same file differently, so a check passing
# on one machine would fail on another. The formatter used is, in order: $CLANG_FORMAT; else the system's
# clang-format-14 or clang-format when it is exactly the pinned version (Debian 12's is); else the PyPI
# wheel of that version, installed once into BUILD/format-venv (BUILD defaults to build).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT_VERSION=14.0.6

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
build=${1:-build}

is_pinned() { "$1" --version 2>/dev/null | grep -q "clang-format version ${CLANG_FORMAT_VERSION}\b"; }

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for c in "$build/format-venv/bin/clang-format" clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1 && is_pinned "$c"; then
      cf=$c
      break
    fi
  done
fi
if [ -z "$cf" ]; then
  echo "format: installing clang-format ${CLANG_FORMAT_VERSION} (PyPI wheel) into $build/format-venv" >&2
  mkdir -p "$build"
  python3 -m venv "$build/format-venv"
  "$build/format-venv/bin/pip" install -q "clang-format==${CLANG_FORMAT_VERSION}"
  cf="$build/format-venv/bin/clang-format"
fi
if ! is_pinned "$cf"; then
  echo "format: $cf is not clang-format ${CLANG_FORMAT_VERSION}: $("$cf" --version 2>&1 | head -1)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cpp')
if [ "$check" = 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$cf" -i --style=file
  echo "format: ${#files[@]} files formatted with $cf"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" | cmp -s - "$f"; then
    echo "not formatted: $f"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "format-check: $bad of ${#files[@]} files are not formatted (make format rewrites them)" >&2
  exit 1
fi
echo "format-check: ${#files[@]} files formatted"
