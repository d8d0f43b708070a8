#!/usr/bin/env bash
# cchan_coll on the 2-GPU machine: builds the collectives library and test_coll_gpu, runs the GPU
# test (correctness of every algorithm x op x dtype x size 1 KiB..1 GiB, graph replays, and a
# timing table in CUDA graphs), writes logs under $OUT and prints a short summary last.
#
#   scripts/device-colllib.sh            (from the repository root; about 2 minutes)
#
# Environment: OUT (logs, default /tmp), BUILD (default build-colllib-dev), CASES (--case list).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
OUT=${OUT:-/tmp}
BUILD=${BUILD:-build-colllib-dev}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 # never multicast here (docs/architecture.md)
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
{
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
    nvidia-smi -L 2>&1 | head -4
} > "$OUT/colllib-machine.log"
fail() {
    grep -E "error" "$OUT/colllib-build.log" | head -20
    tail -5 "$OUT/colllib-configure.log"
    echo "SUMMARY colllib: $* FAILED"
    exit 2
}
mode=cmake
if ! cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_REQUIRE_CMOCKA=OFF \
    -DCMAKE_BUILD_TYPE=Release > "$OUT/colllib-configure.log" 2>&1; then
    # A tree whose CMake still needs cmocka for the tests: library and examples only, then nvcc.
    mode=manual
    cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_BUILD_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=Release >> "$OUT/colllib-configure.log" 2>&1 || fail configure
fi
if [ $mode = cmake ]; then
    cmake --build "$BUILD" -j"$(nproc)" --target cchan-run cchan_coll test_coll_gpu \
        > "$OUT/colllib-build.log" 2>&1 || fail build
    bin="$BUILD/test/gpu/test_coll_gpu"
else
    cmake --build "$BUILD" -j"$(nproc)" --target cchan-run cchan_coll \
        > "$OUT/colllib-build.log" 2>&1 || fail build
    libdir=$(cd "$(dirname "$(find "$BUILD" -maxdepth 3 -name libcchan.so | head -1)")" && pwd)
    coll=$(find "$BUILD" -name libcchan_coll.a | head -1)
    bin="$BUILD/test_coll_gpu"
    nvcc -std=c++17 -O2 -arch=sm_90 -Iinclude -Itest/gpu -Ikernels/coll \
        test/gpu/test_coll_gpu.cu -o "$bin" "$coll" -L"$libdir" -lcchan -Xlinker -rpath="$libdir" \
        -lpthread >> "$OUT/colllib-build.log" 2>&1 || fail "nvcc test_coll_gpu"
fi
t1=$(date +%s)
args=()
[ -n "${CASES:-}" ] && args=(--case "$CASES")
launcher=$(find "$BUILD" -maxdepth 3 -type f -name cchan-run -perm -u+x | head -1)
timeout 100 "$launcher" -n "$NRANKS" --timeout 95 "$bin" "${args[@]}" \
    > "$OUT/colllib-test.log" 2>&1
rc=$?
t2=$(date +%s)
echo "== failures / diagnostics (first 25)"
grep -E "FAIL|FATAL|WATCHDOG|ABORT|diagnostic" "$OUT/colllib-test.log" | head -25
echo "== cases"
grep -E "^(PASS|FAIL|SKIP) |calls checked" "$OUT/colllib-test.log"
echo "== timing (float, CUDA graph, rank 0)"
grep -E "TIME " "$OUT/colllib-test.log" | sed 's/  */ /g'
echo "SUMMARY colllib: test rc=$rc ($mode build), build $((t1 - t0)) s, test $((t2 - t1)) s; $(grep -E '^[0-9]+ passed' "$OUT/colllib-test.log" | tail -1)"
