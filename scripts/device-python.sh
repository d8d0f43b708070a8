#!/usr/bin/env bash
# The Python layer on a GPU machine, in one call: builds libcchan, cchan_coll, cchan_moe, cchan-run
# and cchan-moe-bench for sm_90, then (2 ranks; sharing one GPU under CUDA MPS where only one is
# visible)
#   1. test/python/test_cchan.py --device cuda: every case with CUDA tensors, plus CUDA-graph
#      capture of an all_reduce and of a dispatch+combine, replayed;
#   2. cchan-moe-bench --mode ll --no-nccl (the C benchmark's figure, kept for step 3);
#   3. python/bench/bench_py.py: Buffer against the C API (bit-identical outputs; fp8
#      dispatch+combine and a 1 KiB all_reduce timed in CUDA graphs; the table adds step 2's row).
# Logs under $OUT; a summary last.
#
#   scripts/device-python.sh
#
# Environment: OUT (default build-device-python/out), BUILD (default build-device-python), JOBS,
# PYTHON (default python3), BENCH_ARGS (extra options for both benchmarks, e.g. "--tokens 64"),
# PY_BENCH_ARGS (for bench_py.py only, e.g. "--blocks 32" where ranks share a GPU).
# NVLink multicast is never used (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-device-python}
DEST=${OUT:-$BUILD/out}
JOBS=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}
read -r -a bench_args <<<"${BENCH_ARGS:-}"
read -r -a py_bench_args <<<"${PY_BENCH_ARGS:-}"
mkdir -p "$DEST" "$BUILD"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS CCHAN_MOE_VARIANT
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[device-python] $*"; }
{
    say "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee "$DEST/machine.log"

# cchan_exec (cchan.Plan) needs jansson's headers: CCHAN_JANSSON_ROOT names a prefix with them on a
# machine that has only the runtime; without them the plan cases are skipped and say so.
cfg=(-DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_ENABLE_CUDA=ON -DCCHAN_REQUIRE_CMOCKA=OFF
    -DCCHAN_ENABLE_HIP=OFF -DCCHAN_REQUIRE_JANSSON=OFF)
[ -n "${CCHAN_JANSSON_ROOT:-}" ] && cfg+=(-DCCHAN_JANSSON_ROOT="$CCHAN_JANSSON_ROOT")
cmake -S . -B "$BUILD" "${cfg[@]}" >"$DEST/configure.log" 2>&1 ||
    { tail -n 20 "$DEST/configure.log"; say "configure failed"; exit 2; }
targets=(cchan cchan_coll cchan_moe cchan-run cchan-moe-bench)
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q 'cchan_exec$'; then
    targets+=(cchan_exec)
else
    say "cchan_exec not configured (jansson headers missing): the plan cases will be skipped"
fi
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" \
    >"$DEST/build.log" 2>&1 || { grep -E "error" "$DEST/build.log" | head -n 20; say "build failed"; exit 2; }

export CCHAN_LIBRARY_PATH=$PWD/$BUILD
export PYTHONDONTWRITEBYTECODE=1
run=("$BUILD/cchan-run" -n 2 --timeout 600)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
mps=0
if [ "${ngpu:-0}" -lt 2 ]; then
    say "one GPU: both ranks share it under CUDA MPS"
    nvidia-cuda-mps-control -d && mps=1
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
fi
stop_mps() { [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control; mps=0; }
trap stop_mps EXIT

status=0
"${run[@]}" "$PY" test/python/test_cchan.py --device cuda 2>&1 | tee "$DEST/test_cchan_cuda.log"
t=${PIPESTATUS[0]}
[ "$t" = 0 ] || status=1
"${run[@]}" "$BUILD/bench/moe/cchan-moe-bench" --mode ll --no-nccl "${bench_args[@]}" 2>&1 |
    tee "$DEST/moe_bench.log"
"${run[@]}" "$PY" python/bench/bench_py.py --moe-bench-log "$DEST/moe_bench.log" "${bench_args[@]}" \
    "${py_bench_args[@]}" 2>&1 | tee "$DEST/bench_py.log"
b=${PIPESTATUS[0]}
[ "$b" = 0 ] || status=1
stop_mps
say "summary: test_cchan --device cuda exit $t, bench_py exit $b (logs in $DEST)"
grep -E "^test_cchan|^(ok|FAIL) " "$DEST/test_cchan_cuda.log" | tail -n 12
sed -n '/^cchan Python layer/,$p' "$DEST/bench_py.log"
exit $status
