#!/bin/sh
# CTest's driver of the Python suite (tests/python.cmake).
#   run.sh venv PYTHON VENV           create VENV with torch, numpy, pytest, scikit-build-core (reused)
#   run.sh pytest VENV LIBRARY FILE   pytest on FILE against the in-tree LIBRARY (librelaycc.so)
#   run.sh install VENV SRC           pip install SRC into VENV (shm only), import it from outside SRC
set -e
what=$1; shift
case $what in
venv)
  py=$1 venv=$2
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core" 2>/dev/null; then
    echo "venv $venv: reused"; exit 0
  fi
  "$py" -m venv "$venv"
  # torch's default wheel runs on a CPU-only machine; pip's cache keeps the second install fast. It brings
  # CUDA's libraries along: the venv took 5.4 GB (torch 2.15), and an install with 6.7 GB free failed with
  # "No space left on device" (CI, 2026-12-06), so say so before the download rather than after it.
  free_kb=$(df -Pk "$venv" | awk 'NR == 2 { print $4 }')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt 10000000 ]; then
    echo "run.sh: only $((free_kb / 1024)) MB free under $venv; torch's install needs about 10 GB" >&2
  fi
  if ! "$venv/bin/pip" install --quiet torch numpy pytest scikit-build-core; then
    df -h "$venv" >&2
    exit 1
  fi
  "$venv/bin/python" -c "import torch; print('venv', '$venv', 'torch', torch.__version__)"
  ;;
pytest)
  venv=$1 lib=$2 file=$3
  src=$(cd "$(dirname "$0")/../.." && pwd)
  # The package from the source tree, the library from the build. One thread per process: the suites run
  # 8 ranks on a 2-core machine. The torch backend's extension is compiled once per build folder (the
  # modules that need it share it; torch's build lock serializes a first compile they race for).
  PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" RELAYCC_LIBRARY=$lib OMP_NUM_THREADS=1 \
    TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$(dirname "$lib")/torch_extensions}" \
    exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$file"
  ;;
install)
  venv=$1 src=$2
  # The wheel is built from the source tree in a scratch build dir (scikit-build-core's own), shm only.
  CMAKE_ARGS="-DRELAY_WITH_CUDA=OFF" "$venv/bin/pip" install --quiet --no-build-isolation --force-reinstall \
    --no-deps "$src"
  cd /
  # Not RELAYCC_LIBRARY: the installed package must find the library it ships.
  env -u RELAYCC_LIBRARY "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python/installed_check.py"
  ;;
*) echo "run.sh: unknown step '$what'" >&2; exit 2 ;;
esac
