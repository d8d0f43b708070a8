#!/usr/bin/env bash
# Switch channel on a machine with two GPUs, in one call: builds libcchan, cchan-run,
# cchan-bench and test_switch_channel_gpu for sm_90, runs the GPU test (portable path, every type,
# 16 B .. 256 MiB) and `cchan-bench switch-bw` (reduce/broadcast vs plain SM kernels, AllReduce vs
# NCCL in the same run), keeps the logs under $OUT and prints a short summary last. Under 150 s.
#
#   scripts/device-switch.sh
#
# Environment: OUT (logs; default build-device-switch/out), BUILD (default build-device-switch),
# JOBS, BENCH_ARGS (extra cchan-bench options), SWITCH_CASES (only these GPU-test cases, e.g.
# "reduce_f32,allreduce_rank_barrier"; default all).
# Multicast is never requested here, and refused by cchan and NCCL alike (docs/architecture.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
BUILD=${BUILD:-build-device-switch}
DEST=${OUT:-$BUILD/out}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$DEST" "$BUILD"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[device-switch] $*"; }
t0=$(date +%s)
{
    say "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
} | tee "$DEST/machine.log"

# ---------------------------------------------------------------- build
# With tests when this tree knows CCHAN_REQUIRE_CMOCKA (the GPU machine has no cmocka); otherwise
# the library and the bench alone, and the GPU test compiled directly with nvcc.
mode=cmake
if ! cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_ENABLE_CUDA=ON \
    -DCCHAN_REQUIRE_CMOCKA=OFF -DCCHAN_BUILD_EXAMPLES=OFF >"$DEST/configure.log" 2>&1; then
    mode=manual
    cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_ENABLE_CUDA=ON \
        -DCCHAN_BUILD_TESTS=OFF -DCCHAN_BUILD_EXAMPLES=OFF >>"$DEST/configure.log" 2>&1 ||
        { tail -n 20 "$DEST/configure.log"; say "configure failed"; exit 2; }
fi
targets="cchan cchan-run cchan-bench"
[ $mode = cmake ] && targets="$targets test_switch_channel_gpu"
# shellcheck disable=SC2086
if ! cmake --build "$BUILD" -j "$JOBS" --target $targets >"$DEST/build.log" 2>&1; then
    if [ $mode = cmake ]; then
        mode=manual # the test target may be missing from this configuration
        cmake --build "$BUILD" -j "$JOBS" --target cchan cchan-run cchan-bench >>"$DEST/build.log" 2>&1 ||
            { tail -n 30 "$DEST/build.log"; say "build failed"; exit 2; }
    else
        tail -n 30 "$DEST/build.log"
        say "build failed"
        exit 2
    fi
fi
test_bin=$(find "$BUILD" -type f -name test_switch_channel_gpu -perm -u+x | head -n 1)
if [ -z "$test_bin" ]; then
    lib=$(find "$BUILD" -maxdepth 3 -name 'libcchan.so' | head -n 1)
    libdir=$(cd "$(dirname "$lib")" && pwd)
    test_bin=$BUILD/test_switch_channel_gpu
    nvcc -std=c++17 -O2 -arch=sm_90 -Iinclude -Itest/gpu test/gpu/test_switch_channel_gpu.cu \
        -o "$test_bin" -L"$libdir" -lcchan -Xlinker -rpath="$libdir" -lpthread >>"$DEST/build.log" 2>&1 ||
        { tail -n 30 "$DEST/build.log"; say "nvcc of the GPU test failed"; exit 2; }
fi
run=$BUILD/cchan-run
say "built ($mode) in $(($(date +%s) - t0)) s"

# ---------------------------------------------------------------- GPU test
t1=$(date +%s)
case_args=()
[ -n "${SWITCH_CASES:-}" ] && case_args=(--case "$SWITCH_CASES")
timeout -k 5 75 "$run" -n "$NRANKS" --timeout 70 "$test_bin" "${case_args[@]}" >"$DEST/test_switch_channel_gpu.log" 2>&1
test_rc=$?
test_s=$(($(date +%s) - t1))

# ---------------------------------------------------------------- bench
t2=$(date +%s)
# shellcheck disable=SC2086
timeout -k 5 60 "$run" -n "$NRANKS" --timeout 55 "$BUILD/bench/cchan-bench" switch-bw \
    -J "$DEST/switch-bw.json" ${BENCH_ARGS:-} >"$DEST/switch-bw.log" 2>&1
bench_rc=$?
bench_s=$(($(date +%s) - t2))

# ---------------------------------------------------------------- summary
{
    echo "==== test_switch_channel_gpu: rc $test_rc, $test_s s"
    grep -E '^(PASS|FAIL|SKIP) |passed, [0-9]+ failed|path:|ABORTED|FATAL|WATCHDOG' "$DEST/test_switch_channel_gpu.log" | head -n 30
    echo "==== cchan-bench switch-bw: rc $bench_rc, $bench_s s"
    grep -vE '^# (rank|command)' "$DEST/switch-bw.log" | grep -E '^#   vs|^# switch-bw|^ +[0-9]|^(OK|FAILED)|note|error|cchan-bench:' | cut -c1-160 | head -n 60
    echo "==== total $(($(date +%s) - t0)) s; logs in $DEST"
} | tee "$DEST/summary.txt"
[ $test_rc = 0 ] && [ $bench_rc = 0 ]
