#!/usr/bin/env bash
# MoE dispatch/combine (issue 8) on a machine with two GPUs, in one call: builds libcchan,
# cchan-run, the cchan_moe library, test_moe_gpu and cchan-moe-bench for sm_90, runs the GPU test
# and the benchmark (LL and HT at the DeepSeek-V3 shape against the NCCL all-to-all dispatcher),
# keeps the logs under $OUT and prints a short summary last. About 70 s.
#
#   scripts/device-moe.sh
#
# Environment: OUT (logs; default build-device-moe/out), BUILD (default build-device-moe), JOBS,
# BENCH_ARGS (extra cchan-moe-bench options). NVLink multicast is never used (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-device-moe}
DEST=${OUT:-$BUILD/out}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$DEST" "$BUILD"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[device-moe] $*"; }
t0=$(date +%s)
{
    say "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
} | tee "$DEST/machine.log"

cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_ENABLE_CUDA=ON \
    -DCCHAN_REQUIRE_CMOCKA=OFF -DCCHAN_ENABLE_HIP=OFF >"$DEST/configure.log" 2>&1 ||
    { tail -n 20 "$DEST/configure.log"; say "configure failed"; exit 2; }
cmake --build "$BUILD" -j "$JOBS" --target cchan-run test_moe_gpu cchan-moe-bench \
    >"$DEST/build.log" 2>&1 || { grep -E "error" "$DEST/build.log" | head -n 20; tail -n 20 "$DEST/build.log"; say "build failed"; exit 2; }
say "built in $(($(date +%s) - t0)) s"

RUN="$BUILD/cchan-run"
timeout -k 5 60 "$RUN" -n 2 --timeout 55 "$BUILD/test/gpu/test_moe_gpu" >"$DEST/test_moe_gpu.log" 2>&1
test_rc=$?
say "test_moe_gpu rc $test_rc after $(($(date +%s) - t0)) s"

# Both modes; only low latency when the GPU test failed (a broken path must not hang the bench).
mode=all
[ $test_rc -eq 0 ] || mode=ll
# shellcheck disable=SC2086
timeout -k 5 50 "$RUN" -n 2 --timeout 45 "$BUILD/bench/moe/cchan-moe-bench" --mode $mode \
    --json "$DEST/moe-bench.json" ${BENCH_ARGS:-} >"$DEST/moe-bench.log" 2>&1
bench_rc=$?

echo "==== test_moe_gpu (rc $test_rc)"
grep -E "^(PASS|FAIL)|passed|FAIL|FATAL|WATCHDOG|group:|checked" "$DEST/test_moe_gpu.log" | head -n 30
echo "==== cchan-moe-bench (rc $bench_rc)"
tail -n 14 "$DEST/moe-bench.log"
say "total $(($(date +%s) - t0)) s"
