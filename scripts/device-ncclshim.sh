#!/usr/bin/env bash
# GPU run of libcchan_nccl on a machine with two GPUs, from the repository root:
# builds the shim and nccl-tests (from .ext/nccl-tests, or NCCL_TESTS_SRC) concurrently, runs
# nccl-tests with the real NCCL and with the shim (AllReduce, AllGather, ReduceScatter with -g 2 in
# one process; AllReduce one process per GPU under mpirun; AllReduce with window registration -R 2),
# then PyTorch (scripts/torch-nccl.py) if a python with torch exists. FULL=1 adds Broadcast and
# SendRecv, every collective under mpirun, and CUDA-graph runs (-G 20). Sizes 1K..MAXBYTES (64M).
# TORCH_ONLY=1 builds the shim and runs PyTorch only; SKIP_TORCH=1 leaves PyTorch out.
# Logs go to ${OUT:-/tmp}/ncclshim; a short summary is printed last. About 100 s (FULL=1: 150 s).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
LOG=${OUT:-/tmp}/ncclshim
BUILD=$ROOT/build-ncclshim-dev
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
t0=$(date +%s)
stamp() { echo "[device-ncclshim +$(($(date +%s) - t0))s] $*"; }
{
    stamp "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    nvidia-smi -L
    ls -la /usr/lib/x86_64-linux-gnu/libnccl* /usr/local/cuda/lib64/libnccl* 2>/dev/null
    command -v mpirun mpicc
} >"$LOG/machine.log" 2>&1

# Shim and nccl-tests builds, concurrently.
(cmake -S "$ROOT" -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_BUILD_TESTS=OFF \
    -DCCHAN_BUILD_BENCH=OFF -DCCHAN_ENABLE_HIP=OFF -DCCHAN_REQUIRE_CMOCKA=OFF &&
    cmake --build "$BUILD" -j16 --target cchan_nccl) >"$LOG/shim-build.log" 2>&1 &
shim_pid=$!
export WORK=$LOG/nccl-tests-work
BUILD_ONLY=1 scripts/nccl-tests.sh >"$LOG/nccl-tests-build.log" 2>&1 &
tests_pid=$!
wait $shim_pid
shim_rc=$?
wait $tests_pid
tests_rc=$?
stamp "shim build rc=$shim_rc, nccl-tests build rc=$tests_rc"
[ $shim_rc -eq 0 ] || { tail -30 "$LOG/shim-build.log"; exit 2; }
[ $tests_rc -eq 0 ] || tail -5 "$LOG/nccl-tests-build.log"
grep -h "skipped\|built" "$LOG/nccl-tests-build.log"

export BUILD MAXBYTES=${MAXBYTES:-64M} RUN_TIMEOUT=${RUN_TIMEOUT:-60}
# Default: the collectives cchan runs, in both launch modes and with window registration (about
# 100 s with the builds and PyTorch). FULL=1 adds broadcast and sendrecv (forwarded), every
# collective under mpirun, and CUDA-graph runs.
FULL=${FULL:-0}
nt_rc=none
# TORCH_ONLY=1: the shim and PyTorch only (no nccl-tests runs).
if [ $tests_rc -eq 0 ] && [ "${TORCH_ONLY:-0}" != 1 ]; then
    nt_rc=""
    run_nt() { # <name> <env assignments...>
        local name=$1
        shift
        env "$@" scripts/nccl-tests.sh >"$LOG/nccl-tests-$name.out" 2>&1
        local rc=$?
        stamp "nccl-tests $name rc=$rc"
        nt_rc="$nt_rc $name=$rc"
    }
    if [ "$FULL" = 1 ]; then
        run_nt single MODES=single
        run_nt mpi MODES=mpi
        run_nt graph MODES=single TESTS="all_reduce all_gather" EXTRA="-G 20" MAXBYTES=4M
    else
        run_nt single MODES=single TESTS="all_reduce all_gather reduce_scatter"
        run_nt mpi MODES=mpi TESTS="all_reduce all_gather reduce_scatter"
    fi
    run_nt window MODES=single TESTS="all_reduce" EXTRA="-R 2"
fi

# PyTorch: the first python that imports torch.
PY=""
for p in python3 /opt/*/.venv/bin/python3 /opt/*/bin/python3 /root/*/bin/python3 /root/.venv*/bin/python3 /venv*/bin/python3 \
    /workspace/*/bin/python3 /usr/local/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
torch_rc=none
# Whatever time is left before DEADLINE (s since the start; the batch allows 150) goes to PyTorch.
left=$((${DEADLINE:-140} - ($(date +%s) - t0)))
[ $left -lt 30 ] && left=30
if [ "${SKIP_TORCH:-0}" = 1 ]; then
    echo "PyTorch skipped (SKIP_TORCH=1)" >"$LOG/torch-nccl.out"
elif [ -n "$PY" ]; then
    # shellcheck disable=SC2086
    timeout "$left" "$PY" -u scripts/torch-nccl.py ${TORCH_ARGS:-} --shim "$BUILD/src/nccl/libcchan_nccl.so" \
        --out "$LOG/torch" --timeout $((left / 2 - 2)) >"$LOG/torch-nccl.out" 2>&1
    torch_rc=$?
    stamp "torch ($PY) rc=$torch_rc"
else
    echo "no python with torch found" >"$LOG/torch-nccl.out"
fi

echo "================ summary (logs: $LOG)"
for f in single mpi graph window; do
    [ -f "$LOG/nccl-tests-$f.out" ] || continue
    echo "--- nccl-tests $f"
    sed -n '/summary/,$p' "$LOG/nccl-tests-$f.out" | tail -n +2
done
for f in single mpi graph window; do
    [ -f "$LOG/nccl-tests-$f.out" ] || continue
    echo "--- nccl-tests $f: tables (real NCCL | shim)"
    grep -v '^\[nccl-tests\] \(building\|real NCCL:\|summary\)' "$LOG/nccl-tests-$f.out" |
        sed -n '/mode (/,/^$/p'
done
echo "--- torch"
tail -n 70 "$LOG/torch-nccl.out"
if [ "$torch_rc" != 0 ] && [ "$torch_rc" != none ] && [ "$torch_rc" != 77 ]; then
    for f in "$LOG"/torch/cchan-*.log; do
        [ -f "$f" ] && { echo "--- tail of $f"; grep -v "INFO nccl: rank" "$f" | tail -n 12; }
    done
fi
stamp "done: nccl-tests $nt_rc, torch $torch_rc"
