#!/usr/bin/env bash
# The installed tree as a user meets it (registered by tests/install.cmake).
#   test_install.sh install BUILD PREFIX LIBDIR VERSION
#       cmake --install BUILD into a fresh PREFIX; the libraries, headers, relaycc.pc and the CMake
#       package must be there, the shared library's SONAME librelaycc.so.<major>
#   test_install.sh pkgconfig PREFIX LIBDIR VERSION SRC OUT CC [CFLAGS...]
#       build SRC with `pkg-config --cflags --libs relaycc` only, run it against PREFIX's library
#   test_install.sh cmake PREFIX LIBDIR VERSION EXAMPLES OUT CMAKE CC [CFLAGS...]
#       configure EXAMPLES (find_package(relaycc)) with CMAKE_PREFIX_PATH=PREFIX, build, run
# A run passes when the program prints "relaycc VERSION: ... OK" and exits 0, and it loaded PREFIX's
# librelaycc.so (not some other copy).
set -u
fail() { echo "FAIL: $*"; exit 1; }

# run BIN PREFIX LIBDIR VERSION [env...]: the example's own check, then which library it loaded.
run() {
  local bin=$1 prefix=$2 libdir=$3 version=$4
  shift 4
  out=$(env "$@" "$bin" 2>&1); rc=$?
  printf '%s\n' "$out"
  [ "$rc" -eq 0 ] || fail "$bin exited $rc"
  printf '%s\n' "$out" | grep -q "^relaycc $version: .*: OK$" || fail "$bin did not report relaycc $version OK"
  if command -v ldd >/dev/null 2>&1; then
    loaded=$(env "$@" ldd "$bin" | grep 'librelaycc\.so')
    printf 'loaded: %s\n' "$loaded"
    case "$loaded" in
      *"$prefix/$libdir/"*) ;;
      *) fail "$bin does not load $prefix/$libdir/librelaycc.so" ;;
    esac
  fi
}

mode=$1; shift
case "$mode" in
  install)
    build=$1 prefix=$2 libdir=$3 version=$4
    rm -rf "$prefix"
    cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install $build --prefix $prefix"
    major=${version%%.*}
    for f in include/relaycc.h include/relaycc_version.h "$libdir/librelaycc.so" "$libdir/librelaycc.so.$major" \
             "$libdir/librelaycc.so.$version" "$libdir/librelaycc.a" "$libdir/pkgconfig/relaycc.pc" \
             "$libdir/cmake/relaycc/relayccConfig.cmake" "$libdir/cmake/relaycc/relayccConfigVersion.cmake" \
             bin/relaycc-bench; do
      [ -e "$prefix/$f" ] || fail "$prefix/$f not installed"
    done
    if command -v readelf >/dev/null 2>&1; then
      soname=$(readelf -d "$prefix/$libdir/librelaycc.so.$version" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
      [ "$soname" = "librelaycc.so.$major" ] || fail "SONAME is '$soname', want librelaycc.so.$major"
    fi
    echo "installed into $prefix"
    exit 0 ;;
  pkgconfig)
    prefix=$1 libdir=$2 version=$3 src=$4 out=$5 cc=$6
    shift 6
    command -v pkg-config >/dev/null 2>&1 || fail "pkg-config not found (make deps installs it)"
    export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
    got=$(pkg-config --modversion relaycc) || fail "pkg-config finds no relaycc in $PKG_CONFIG_PATH"
    [ "$got" = "$version" ] || fail "pkg-config says relaycc $got, want $version"
    flags=$(pkg-config --cflags --libs relaycc)
    echo "$cc $* $src $flags -o $out"
    # shellcheck disable=SC2086 # the flags are words
    "$cc" "$@" "$src" $flags -o "$out" || fail "compiling $src against $prefix"
    run "$out" "$prefix" "$libdir" "$version" "LD_LIBRARY_PATH=$prefix/$libdir" ;;
  cmake)
    prefix=$1 libdir=$2 version=$3 examples=$4 out=$5 cmake=$6 cc=$7
    shift 7
    rm -rf "$out"
    "$cmake" -S "$examples" -B "$out" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_C_FLAGS="$*" || fail "configuring $examples against $prefix"
    "$cmake" --build "$out" || fail "building $examples against $prefix"
    # No LD_LIBRARY_PATH: CMake's build RUNPATH must find the installed library.
    run "$out/allreduce_shm" "$prefix" "$libdir" "$version" ;;
  *)
    fail "unknown mode $mode" ;;
esac
