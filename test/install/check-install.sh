#!/usr/bin/env bash
# Install test steps (see CMakeLists.txt):
#   check-install.sh tree BUILD_DIR PREFIX
#   check-install.sh find_package PREFIX DOWNSTREAM_SRC WORK_DIR CC VERSION
#   check-install.sh pkg_config   PREFIX DOWNSTREAM_SRC WORK_DIR CC VERSION
#   check-install.sh examples     PREFIX EXAMPLES_SRC WORK_DIR CC [NVCC CUDA_ARCH]
set -euo pipefail
step=$1
shift

case $step in
tree)
    build=$1 prefix=$2
    rm -rf "$prefix"
    cmake --install "$build" --prefix "$prefix"
    for f in include/cchan/cchan.h include/cchan/device.h; do
        [ -f "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
    done
    echo "installed into $prefix:"
    (cd "$prefix" && find . -type f -o -type l | LC_ALL=C sort | sed 's/^\.\//  /')
    ;;
find_package)
    prefix=$1 src=$2 work=$3 cc=$4 version=$5
    rm -rf "$work"
    cmake -S "$src" -B "$work" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DCCHAN_EXPECTED_VERSION="$version" -DCMAKE_BUILD_TYPE=Release
    cmake --build "$work"
    # The build tree's RPATH points at the installed library: no LD_LIBRARY_PATH.
    "$work/app"
    "$work/headers_only"
    "$work/libs"
    ;;
examples)
    # kernels/examples as a project of its own against the installed tree: every program builds
    # (the CUDA ones where nvcc is found: compile-checked), the host-backend ones run.
    prefix=$1 src=$2 work=$3 cc=$4 nvcc=${5:-} arch=${6:-}
    rm -rf "$work"
    args=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release)
    [ -n "$nvcc" ] && args+=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch")
    cmake -S "$src" -B "$work" "${args[@]}"
    cmake --build "$work" -j 2
    run="$prefix/bin/cchan-run"
    "$run" -n 2 --timeout 60 "$work/hello_host"
    "$run" -n 2 --timeout 120 "$work/port_pingpong"
    "$run" -n 3 --timeout 60 "$work/token_dispatch"
    ls "$work" | grep -E '^(hello_memory_channel|ll_allreduce)$' | sed 's/^/compiled (CUDA): /' || true
    ;;
pkg_config)
    prefix=$1 src=$2 work=$3 cc=$4 version=$5
    if ! command -v pkg-config >/dev/null 2>&1; then
        echo "SKIP: pkg-config not installed (Debian: apt-get install pkg-config)"
        exit 77
    fi
    pcdir=$(dirname "$(find "$prefix" -name cchan.pc | head -1)")
    export PKG_CONFIG_PATH=$pcdir
    got=$(pkg-config --modversion cchan)
    [ "$got" = "$version" ] || { echo "FAIL: pkg-config says version $got, expected $version"; exit 1; }
    echo "pkg-config cchan: $(pkg-config --cflags --libs cchan)"
    rm -rf "$work"
    mkdir -p "$work"
    # shellcheck disable=SC2046  # word splitting of pkg-config output is intended
    "$cc" -std=c11 -Wall -Wextra -Werror "$src/app.c" -o "$work/app" $(pkg-config --cflags --libs cchan)
    LD_LIBRARY_PATH="$(pkg-config --variable=libdir cchan)" "$work/app"
    ;;
*)
    echo "check-install.sh: unknown step $step" >&2
    exit 2
    ;;
esac
