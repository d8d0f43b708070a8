#!/usr/bin/env bash
# MoE dispatch/combine on a machine with two GPUs, in one call: builds libcchan,
# cchan-run, the cchan_moe library, test_moe_gpu and cchan-moe-bench for sm_90, runs the GPU test
# (with the default implementation choices, then with each of TEST_VARIANTS) and the benchmark
# (LL and HT at the DeepSeek-V3 shape against the NCCL all-to-all dispatcher, once per entry of
# LL_VARIANTS / HT_VARIANTS), keeps the logs under $OUT and prints a short summary last.
#
#   scripts/device-moe.sh
#
# Environment: OUT (logs; default build-device-moe/out), BUILD (default build-device-moe), JOBS,
# BENCH_ARGS (extra cchan-moe-bench options), TEST_VARIANTS, LL_VARIANTS, HT_VARIANTS
# (';'-separated CCHAN_MOE_VARIANT values, "default" = the library's defaults; see
# kernels/moe/moe_internal.h). NVLink multicast is never used (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
BUILD=${BUILD:-build-device-moe}
DEST=${OUT:-$BUILD/out}
JOBS=${JOBS:-$(nproc)}
TEST_VARIANTS=${TEST_VARIANTS-"ht_senders=10,ht_csenders=12,ht_chunks=40,ht_csub=1"}
LL_VARIANTS=${LL_VARIANTS-"default"}
HT_VARIANTS=${HT_VARIANTS-"default;ht_csenders=12;ht_csub=1"}
mkdir -p "$DEST" "$BUILD"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS CCHAN_MOE_VARIANT
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[device-moe] $*"; }
t0=$(date +%s)
{
    say "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
} | tee "$DEST/machine.log"

cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCCHAN_ENABLE_CUDA=ON -DCCHAN_REQUIRE_CMOCKA=OFF -DCCHAN_ENABLE_HIP=OFF \
    >"$DEST/configure.log" 2>&1 ||
    { tail -n 20 "$DEST/configure.log"; say "configure failed"; exit 2; }
cmake --build "$BUILD" -j "$JOBS" --target cchan-run test_moe_gpu cchan-moe-bench \
    >"$DEST/build.log" 2>&1 || { grep -E "error" "$DEST/build.log" | head -n 20; tail -n 20 "$DEST/build.log"; say "build failed"; exit 2; }
say "built in $(($(date +%s) - t0)) s"

RUN="$BUILD/cchan-run"
run_test() { # $1: log name, $2: CCHAN_MOE_VARIANT
    CCHAN_MOE_VARIANT="$2" timeout -k 5 45 "$RUN" -n "$NRANKS" --timeout 40 "$BUILD/test/gpu/test_moe_gpu" \
        >"$DEST/$1.log" 2>&1
}
run_test test_moe_gpu ""
test_rc=$?
say "test_moe_gpu (defaults) rc $test_rc after $(($(date +%s) - t0)) s"
declare -A vrc
IFS=';' read -r -a tv <<<"$TEST_VARIANTS"
i=0
for v in "${tv[@]}"; do
    [ -n "$v" ] || continue
    i=$((i + 1))
    run_test "test_moe_gpu_v$i" "$v"
    vrc[$i]=$?
    say "test_moe_gpu CCHAN_MOE_VARIANT=$v rc ${vrc[$i]} after $(($(date +%s) - t0)) s"
done

# LL and HT in separate runs, so that a failing HT path cannot cost the LL figures.
# shellcheck disable=SC2086
timeout -k 5 40 "$RUN" -n "$NRANKS" --timeout 35 "$BUILD/bench/moe/cchan-moe-bench" --mode ll \
    --variants "$LL_VARIANTS" --json "$DEST/moe-bench-ll.json" ${BENCH_ARGS:-} \
    >"$DEST/moe-bench-ll.log" 2>&1
ll_rc=$?
say "bench ll rc $ll_rc after $(($(date +%s) - t0)) s"
# shellcheck disable=SC2086
timeout -k 5 40 "$RUN" -n "$NRANKS" --timeout 35 "$BUILD/bench/moe/cchan-moe-bench" --mode ht \
    --variants "$HT_VARIANTS" --json "$DEST/moe-bench-ht.json" ${BENCH_ARGS:-} \
    >"$DEST/moe-bench-ht.log" 2>&1
ht_rc=$?

echo "==== test_moe_gpu (defaults: rc $test_rc)"
grep -E "^(PASS|FAIL)|passed|FAIL|FATAL|WATCHDOG|group:|checked" "$DEST/test_moe_gpu.log" | head -n 24
i=0
for v in "${tv[@]}"; do
    [ -n "$v" ] || continue
    i=$((i + 1))
    echo "==== test_moe_gpu CCHAN_MOE_VARIANT=$v (rc ${vrc[$i]})"
    grep -E "^FAIL|passed|FATAL|WATCHDOG" "$DEST/test_moe_gpu_v$i.log" | head -n 8
done
echo "==== cchan-moe-bench --mode ll (rc $ll_rc)"
grep -vE "^# (cchan-moe-bench|time per)" "$DEST/moe-bench-ll.log" | grep -E "^(# variant|LL|# NCCL|\[r)" | head -n 40
echo "==== cchan-moe-bench --mode ht (rc $ht_rc)"
grep -E "^(# variant|HT|# NCCL|\[r)" "$DEST/moe-bench-ht.log" | head -n 60
say "total $(($(date +%s) - t0)) s"
