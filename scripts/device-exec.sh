#!/usr/bin/env bash
# The plan executor (cchan_exec) on GPUs. Builds cchan-run, test_exec_gpu and cchan-coll-bench,
# compiles the executor's test programs (in-place plans, the plain ring ReduceScatter) with the DSL,
# then:
#   test   test_exec_gpu at 2, 4 and 8 ranks (MPS where ranks share a GPU): every shipped plan,
#          then the test programs' plans, then the shipped ones again as 4 instances
#   bench  side by side in one run each: 1PA against the native LL kernel, 2PA (zero-copy and
#          through scratch) and AllGather all pairs against native HB, the overlapped ring
#          ReduceScatter against the plain ring (memory and port channels); plans as
#          EXEC_INSTANCES instances
#
#   scripts/device-exec.sh [test|bench|all]          (default all)
#
# Environment:
#   BUILD              build directory (default build-exec)
#   CUDA_ARCH          CMAKE_CUDA_ARCHITECTURES (default 90)
#   JOBS               build parallelism (default: nproc)
#   OUT                if set, every log is written there too
#   CCHAN_JANSSON_ROOT a prefix with include/jansson.h (machines with the runtime
#                      libjansson.so.4 but no headers); passed to CMake
#   EXEC_RANKS         test rank counts (default "2 4 8")
#   EXEC_BENCH_RANKS   bench ranks (default 2)
#   EXEC_INSTANCES     instances of the plans in the bench (default 16)
#   EXEC_BENCH_ARGS    extra bench arguments (default "-d bfloat16 -f 4")
# Exit status: 0 when every step passed, 1 otherwise (2: build failure).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# cchan never creates multicast objects unless asked; make sure nothing here asks.
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
. scripts/gpu-ranks.sh
what=${1:-all}
BUILD=${BUILD:-build-exec}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
LOGDIR=${OUT:-$BUILD/exec-logs}
RANKS_LIST=${EXEC_RANKS:-"2 4 8"}
BR=${EXEC_BENCH_RANKS:-2}
INST=${EXEC_INSTANCES:-16}
read -r -a BARGS <<<"${EXEC_BENCH_ARGS:--d bfloat16 -f 4}"
mkdir -p "$LOGDIR" "$BUILD"
say() { echo "[device-exec] $*"; }
die() {
    say "$*"
    exit 2
}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || die "nvcc not found (PATH or /usr/local/cuda/bin)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# ---------------------------------------------------------------- build
cfg=(-DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_ENABLE_HIP=OFF -DCCHAN_BUILD_TESTS=ON
    -DCCHAN_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release)
[ -f /usr/include/cmocka.h ] || cfg+=(-DCCHAN_REQUIRE_CMOCKA=OFF)
[ -n "${CCHAN_JANSSON_ROOT:-}" ] && cfg+=(-DCCHAN_JANSSON_ROOT="$CCHAN_JANSSON_ROOT")
say "configuring $BUILD"
cmake -S . -B "$BUILD" "${cfg[@]}" >"$LOGDIR/configure.log" 2>&1 ||
    { tail -n 30 "$LOGDIR/configure.log"; die "configure failed (log: $LOGDIR/configure.log)"; }
say "building cchan-run test_exec_gpu cchan-coll-bench"
cmake --build "$BUILD" -j "$JOBS" --target cchan-run test_exec_gpu cchan-coll-bench \
    >"$LOGDIR/build.log" 2>&1 ||
    { tail -n 40 "$LOGDIR/build.log"; die "build failed (log: $LOGDIR/build.log)"; }
run=$BUILD/cchan-run
gputest=$BUILD/test/gpu/test_exec_gpu
bench=$BUILD/bench/coll/cchan-coll-bench
for prog in "$run" "$gputest" "$bench"; do
    [ -x "$prog" ] || die "$prog not found"
done

# the test programs' plans (test/exec/programs), for every rank count used here
progs=$BUILD/exec-plans
mkdir -p "$progs"
for n in $RANKS_LIST $BR; do
    for pv in allgather_inplace:exec_allgather_inplace allgather_inplace:exec_allgather_inplace_x2 \
        allreduce_inplace:exec_allreduce_inplace ring_plain:reducescatter_ring_plain_mem \
        ring_plain:reducescatter_ring_plain_port; do
        PYTHONPATH=python "$PY" -m cchan.dsl compile "test/exec/programs/${pv%%:*}.py" \
            --variant "${pv##*:}" --nranks "$n" -o "$progs/${pv##*:}.n$n.json" \
            >>"$LOGDIR/plans.log" 2>&1 || die "compiling ${pv##*:} for $n ranks failed (log: $LOGDIR/plans.log)"
    done
done

fails=0
# step NAME RANKS ENV... -- COMMAND...: runs under MPS where the ranks share a GPU
step() {
    local name=$1 n=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    local mps=0
    if gpu_mps_needed "$n" && gpu_mps_start "$n"; then mps=1; fi
    say "$name ($n ranks$([ $mps = 1 ] && echo ', MPS'))"
    env "${envs[@]}" "$@" >"$LOGDIR/$name.log" 2>&1
    local rc=$?
    [ $mps = 1 ] && gpu_mps_stop
    tail -n 25 "$LOGDIR/$name.log"
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
        say "$name: FAILED (exit $rc, log $LOGDIR/$name.log)"
        fails=$((fails + 1))
    fi
}

if [ "$what" = test ] || [ "$what" = all ]; then
    for n in $RANKS_LIST; do
        step "gpu_n$n" "$n" CCHAN_EXEC_INSTANCES=1 -- "$run" -n "$n" --timeout 600 "$gputest"
        step "gpu_programs_n$n" "$n" CCHAN_EXEC_INSTANCES=1 CCHAN_EXEC_PLAN_DIR="$progs" -- \
            "$run" -n "$n" --timeout 600 "$gputest"
        step "gpu_x4_n$n" "$n" CCHAN_EXEC_INSTANCES=4 -- "$run" -n "$n" --timeout 600 "$gputest"
    done
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
    p=plans
    step "bench_1pa_n$BR" "$BR" CCHAN_EXEC_INSTANCES="$INST" -- "$run" -n "$BR" --timeout 600 \
        "$bench" "${BARGS[@]}" -a ll -b 1K -e 64K --plan "$p/allreduce_1pa_ll.n$BR.json"
    step "bench_2pa_n$BR" "$BR" CCHAN_EXEC_INSTANCES="$INST" -- "$run" -n "$BR" --timeout 600 \
        "$bench" "${BARGS[@]}" -a hb -b 1K -e 1G --plan "$p/allreduce_2pa_zc.n$BR.json" \
        --plan "$p/allreduce_2pa_scratch.n$BR.json"
    step "bench_ag_n$BR" "$BR" CCHAN_EXEC_INSTANCES="$INST" -- "$run" -n "$BR" --timeout 600 \
        "$bench" "${BARGS[@]}" -a hb -b 1K -e 1G --plan "$p/allgather_allpairs_mem.n$BR.json"
    step "bench_ring_n$BR" "$BR" CCHAN_EXEC_INSTANCES="$INST" -- "$run" -n "$BR" --timeout 600 \
        "$bench" "${BARGS[@]}" -b 1M -e 1G --plan "$p/reducescatter_ring_mem.n$BR.json" \
        --plan "$progs/reducescatter_ring_plain_mem.n$BR.json" \
        --plan "$p/reducescatter_ring_port.n$BR.json" \
        --plan "$progs/reducescatter_ring_plain_port.n$BR.json"
    grep -h "plan/native:" "$LOGDIR"/bench_*.log
fi
say "done: $fails failed step(s); logs in $LOGDIR"
[ $fails -eq 0 ]
