#!/usr/bin/env bash
# Builds and runs the GPU part of cchan-coll-bench and of the fused AllReduce+RMSNorm example on a
# machine with two GPUs (one process per GPU), in under about 150 s:
#   1. test_fused_gpu                  the fused kernel against a float64 reference
#   2. cchan-coll-bench -o fused       fused vs NCCL AllReduce (+ symmetric) + a separate kernel
#   3. cchan-coll-bench allreduce, allgather, reducescatter (float, 1K..1G) and bf16/half allreduce
#      with every algorithm, NCCL measured in the same run
#
#   scripts/device-collbench.sh        (run from anywhere in the repository)
#
# Environment: BUILD (default build-collbench-dev), CUDA_ARCH (90), JOBS (nproc), OUT (logs and
# JSON go to $OUT/collbench; default /tmp), CMAKE_ARGS, COLLBENCH_QUICK=1 (steps 1-2 only). NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0). Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
BUILD=${BUILD:-build-collbench-dev}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
LOG=${OUT:-/tmp}/collbench
mkdir -p "$LOG" "$BUILD"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
export CCHAN_TIMEOUT_MS=${CCHAN_TIMEOUT_MS:-20000}
T0=$(date +%s)
say() { echo "[device-collbench +$(($(date +%s) - T0))s] $*"; }
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi

say "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + local changes')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1 | tee "$LOG/machine.log"

# ---------------------------------------------------------------- configure and build
targets="cchan cchan-run fused_rmsnorm_example"
extra=(${CMAKE_ARGS:-})
mode=cmake
if cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_ENABLE_CUDA=ON \
    -DCCHAN_REQUIRE_CMOCKA=OFF "${extra[@]}" >"$LOG/configure.log" 2>&1 &&
    grep -q test_fused_gpu "$BUILD/Makefile" 2>/dev/null; then
    targets="$targets test_fused_gpu"
else
    # Without cmocka the test tree may not configure: build without tests, compile the GPU test
    # directly with nvcc.
    mode=manual
    cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_ENABLE_CUDA=ON \
        -DCCHAN_BUILD_TESTS=OFF "${extra[@]}" >>"$LOG/configure.log" 2>&1 ||
        { tail -n 20 "$LOG/configure.log"; say "configure failed"; exit 2; }
fi
say "building ($mode): $targets"
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$JOBS" --target $targets >"$LOG/build.log" 2>&1 ||
    { grep -E "error" "$LOG/build.log" | head -n 20; tail -n 20 "$LOG/build.log"; say "build failed"; exit 2; }
if [ "$mode" = manual ]; then
    lib=$(find "$BUILD" -name libcchan.so -print -quit)
    flib=$(find "$BUILD" -name libcchan_fused_rmsnorm.a -print -quit)
    mkdir -p "$BUILD/test/gpu"
    nvcc -std=c++17 -O2 -arch=sm_"$ARCH" -Iinclude -Itest/gpu -Ikernels/fused \
        -DCCHAN_FUSED_HAVE_CUDA=1 test/gpu/test_fused_gpu.cu -o "$BUILD/test/gpu/test_fused_gpu" \
        "$flib" -L"$(dirname "$lib")" -lcchan -Xlinker -rpath="$(cd "$(dirname "$lib")" && pwd)" \
        -lpthread -lm >>"$LOG/build.log" 2>&1 || { tail -n 20 "$LOG/build.log"; say "nvcc test_fused_gpu failed"; exit 2; }
fi
# The bench links cchan_coll (another helper's library): a failure there must not hide the fused
# kernel's test.
say "building cchan-coll-bench"
cmake --build "$BUILD" -j "$JOBS" --target cchan-coll-bench >"$LOG/build-bench.log" 2>&1 ||
    { grep -E "error" "$LOG/build-bench.log" | head -n 10; say "cchan-coll-bench did not build"; }
RUN=$(find "$BUILD" -maxdepth 2 -type f -name cchan-run -perm -u+x -print -quit)
BENCH=$(find "$BUILD" -type f -name cchan-coll-bench -perm -u+x -print -quit)
TEST=$(find "$BUILD" -type f -name test_fused_gpu -perm -u+x -print -quit)
EXAMPLE=$(find "$BUILD" -type f -name fused_rmsnorm_example -perm -u+x -print -quit)
say "built"

# ---------------------------------------------------------------- run
declare -A rc
step() { # name timeout command...
    local name=$1 to=$2
    shift 2
    say "$name: $*"
    timeout "$((to + 10))" "$RUN" -n "$NRANKS" --timeout "$to" "$@" >"$LOG/$name.log" 2>&1
    rc[$name]=$?
    say "$name: exit ${rc[$name]}"
}
STEPS="test_fused_gpu example fused allreduce ag_rs algos"
[ "${COLLBENCH_QUICK:-0}" = 1 ] && STEPS="test_fused_gpu example fused"
step test_fused_gpu 60 "$TEST"
step example 30 "$EXAMPLE" --tokens 256 --hidden 8192
[ -n "$BENCH" ] || BENCH=false
step fused 60 "$BENCH" -o fused -G 20 -n 20 -w 3 --tokens 1,4,8,16,32,64,128,256 \
    -J "$LOG/fused.json"
[ "${COLLBENCH_QUICK:-0}" = 1 ] || {
step allreduce 60 "$BENCH" -o allreduce -d float -b 1K -e 1G -f 4 -G 10 -n 20 -w 3 -r 3 \
    -J "$LOG/allreduce.json"
step ag_rs 80 "$BENCH" -o allgather -o reducescatter -d float -b 1K -e 1G -f 4 -G 10 -n 20 -w 3 \
    -r 3 -J "$LOG/ag_rs.json"
step algos 40 "$BENCH" -o allreduce -d bfloat16 -d half -a all -b 1K -e 64M -f 16 -G 10 -n 20 \
    -w 3 -r 3 -J "$LOG/algos.json"
}

# ---------------------------------------------------------------- summary
{
    echo
    echo "=== collbench summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - T0)) s; logs in $LOG)"
    for s in $STEPS; do echo "$s: exit ${rc[$s]:-not run}"; done
    grep -E '^(PASS|FAIL|[0-9]+ passed)|ABORTED|WATCHDOG|FATAL' "$LOG/test_fused_gpu.log" | head -n 12
    tail -n 2 "$LOG/example.log"
    for s in ${STEPS#test_fused_gpu example }; do
        echo "--- $s"
        grep -E '^# (NCCL|no NCCL|device)|^# +(tokens|size)|^ +[0-9]|Out of bounds|Wrong elements|Avg bus|warning|note|ERROR|^OK|^FAILED' \
            "$LOG/$s.log" | cut -c1-200 | head -n 60
        grep -iE 'error|failed|trap' "$LOG/$s.log" | grep -v '^# ' | head -n 5
    done
} | tee "$LOG/summary.log"
for s in $STEPS; do [ "${rc[$s]:-1}" = 0 ] || exit 1; done
exit 0
