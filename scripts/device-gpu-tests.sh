#!/usr/bin/env bash
# Builds and runs the six GPU test suites (test/gpu) at 2, 4 and 8 ranks on whatever GPUs the
# machine has, one GPU included. Run from anywhere in the repository:
#
#   scripts/device-gpu-tests.sh
#
# Where ranks outnumber the GPUs they share them: every suite then runs under a private MPS daemon
# (started for that run, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / ranks per GPU, stopped after),
# which skips the cases that must trap (a trap takes the MPS server down for every rank); those
# run again without MPS, time-sliced. One summary table last: suite x ranks, passed / failed /
# skipped, and the reason of every skip.
#
# Environment:
#   BUILD          build directory (default build-dev)
#   CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default 90)
#   JOBS           build parallelism (default: nproc)
#   OUT            if set, every log (configure, build, one per run, summary) is written there too
#   GPU_TESTS      the test programs to run (default: all six of test/gpu)
#   GPU_TEST_RANKS rank counts (default "2 4 8")
#   GPU_TEST_ARGS  extra arguments for every test program, e.g. "--case put_sizes" (a case name
#                  another suite lacks selects nothing there)
#   GPU_TEST_TIMEOUT  cchan-run --timeout for each run, seconds (default 600)
#   GPU_TEST_MPS   auto (default: MPS where ranks outnumber GPUs), 0 (never), 1 (always)
#   CMAKE_ARGS     extra configure arguments
#
# The GPU tests need no cmocka. When cmocka is absent (the GPU machine has no package registry),
# the build is configured with -DCCHAN_REQUIRE_CMOCKA=OFF, which leaves out the test areas that need
# it; if this tree's CMake does not know that option yet, the library and cchan-run are built with
# -DCCHAN_BUILD_TESTS=OFF and the GPU tests are compiled directly with nvcc against them.
#
# Exit status: 0 when every run passed or skipped, 1 otherwise (2: build failure).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
ROOT=$(pwd)
BUILD=${BUILD:-build-dev}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
TESTS=${GPU_TESTS:-"test_memory_channel_gpu test_port_channel_gpu test_switch_channel_gpu test_coll_gpu test_fused_gpu test_moe_gpu"}
RANKS_LIST=${GPU_TEST_RANKS:-"2 4 8"}
MPS_MODE=${GPU_TEST_MPS:-auto}
RUN_TIMEOUT=${GPU_TEST_TIMEOUT:-600}
LOGDIR=${OUT:-$BUILD/gpu-logs}
mkdir -p "$LOGDIR" "$BUILD"

# cchan never creates multicast objects unless asked; make sure nothing here asks.
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS

say() { echo "[device-gpu-tests] $*"; }
die() {
    say "$*"
    exit 2
}

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || die "nvcc not found (PATH or /usr/local/cuda/bin)"

{
    say "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvcc --version | tail -n 2
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L
        nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
        nvidia-smi topo -m 2>/dev/null | head -n 8
    else
        say "nvidia-smi not found"
    fi
} 2>&1 | tee "$LOGDIR/machine.log"

# ---------------------------------------------------------------- configure
have_cmocka=0
for d in /usr/include /usr/local/include ${CMAKE_PREFIX_PATH:+$CMAKE_PREFIX_PATH/include}; do
    [ -f "$d/cmocka.h" ] && have_cmocka=1
done
cfg=(-DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_BUILD_TESTS=ON -DCCHAN_ENABLE_CUDA=ON)
[ "$have_cmocka" = 1 ] || cfg+=(-DCCHAN_REQUIRE_CMOCKA=OFF)
# shellcheck disable=SC2206
extra=(${CMAKE_ARGS:-})
mode=cmake
say "configuring $BUILD (cmocka: $([ $have_cmocka = 1 ] && echo present || echo absent))"
if ! cmake -S . -B "$BUILD" "${cfg[@]}" "${extra[@]}" >"$LOGDIR/configure.log" 2>&1; then
    if [ "$have_cmocka" = 1 ]; then
        tail -n 30 "$LOGDIR/configure.log"
        die "configure failed (log: $LOGDIR/configure.log)"
    fi
    say "configure with tests failed without cmocka; building the library alone and the GPU tests with nvcc"
    tail -n 5 "$LOGDIR/configure.log"
    cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_BUILD_TESTS=OFF \
        -DCCHAN_ENABLE_CUDA=ON "${extra[@]}" >>"$LOGDIR/configure.log" 2>&1 ||
        { tail -n 30 "$LOGDIR/configure.log"; die "configure failed (log: $LOGDIR/configure.log)"; }
    mode=manual
fi

# ---------------------------------------------------------------- build
say "building ($mode): cchan cchan-run $TESTS"
if [ "$mode" = cmake ]; then
    # shellcheck disable=SC2086
    cmake --build "$BUILD" -j "$JOBS" --target cchan cchan-run $TESTS >"$LOGDIR/build.log" 2>&1 ||
        { tail -n 40 "$LOGDIR/build.log"; die "build failed (log: $LOGDIR/build.log)"; }
else
    cmake --build "$BUILD" -j "$JOBS" --target cchan cchan-run cchan_coll cchan_fused_rmsnorm \
        cchan_moe >"$LOGDIR/build.log" 2>&1 ||
        { tail -n 40 "$LOGDIR/build.log"; die "build failed (log: $LOGDIR/build.log)"; }
    lib=$(find "$BUILD" -maxdepth 3 -name 'libcchan.so' | head -n 1)
    [ -n "$lib" ] || die "libcchan.so not found under $BUILD"
    libdir=$(cd "$(dirname "$lib")" && pwd)
    mkdir -p "$BUILD/test/gpu"
    for t in $TESTS; do
        nvcc -std=c++17 -O2 -g -arch=sm_"$ARCH" -Iinclude -Itest/gpu -Xcompiler=-Wall,-Wextra \
            -Ikernels/coll -Ikernels/fused -Ikernels/moe "test/gpu/$t.cu" -o "$BUILD/test/gpu/$t" \
            -L"$libdir" -lcchan -lcchan_coll -lcchan_fused_rmsnorm -lcchan_moe -lm \
            -Xlinker -rpath="$libdir" -lpthread >>"$LOGDIR/build.log" 2>&1 ||
            { tail -n 40 "$LOGDIR/build.log"; die "nvcc of $t failed (log: $LOGDIR/build.log)"; }
    done
fi
launcher=$(find "$BUILD" -maxdepth 3 -type f -name cchan-run -perm -u+x | head -n 1)
[ -n "$launcher" ] || die "cchan-run not found under $BUILD"

# ---------------------------------------------------------------- run
ngpu=$(gpu_count)
say "$ngpu GPU(s) visible; rank counts: $RANKS_LIST; MPS: $MPS_MODE"

# The last "N passed, M failed, K skipped" line of a log (rank 0's), as "N M K"; "- - -" if none.
counts_of() {
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    if [ -z "$line" ]; then
        echo "- - -"
        return
    fi
    echo "$line" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?.*/\1 \2 \4/p' |
        awk '{print $1, $2, ($3 == "" ? 0 : $3)}'
}

# One run of one program: runs it, fills rc_of/cnt_of for KEY. Args: KEY LOG BIN ARGS...
run_one() {
    local key=$1 log=$2 bin=$3 n=$4
    shift 4
    say "running ($key): $launcher -n $n --timeout $RUN_TIMEOUT $bin $*"
    "$launcher" -n "$n" --timeout "$RUN_TIMEOUT" "$bin" "$@" >"$log" 2>&1
    rc_of[$key]=$?
    cnt_of[$key]=$(counts_of "$log")
    tail -n 3 "$log" | sed "s/^/    /"
}

declare -A res pass fail skip secs rc_of cnt_of
overall=0
for n in $RANKS_LIST; do
    use_mps=0
    case $MPS_MODE in
    1) use_mps=1 ;;
    auto) gpu_mps_needed "$n" && use_mps=1 ;;
    esac
    for t in $TESTS; do
        key="$t/$n"
        bin=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -n 1)
        if [ -z "$bin" ]; then
            res[$key]=MISSING pass[$key]=- fail[$key]=- skip[$key]=- secs[$key]=0
            overall=1
            continue
        fi
        start=$(date +%s)
        log="$LOGDIR/$t.n$n.log"
        mps_ok=0
        if [ "$use_mps" = 1 ] && gpu_mps_start "$n"; then mps_ok=1; fi
        # shellcheck disable=SC2086
        CCHAN_GPU_TEST_MPS=$mps_ok run_one "$key" "$log" "$bin" "$n" ${GPU_TEST_ARGS:-}
        [ "$mps_ok" = 1 ] && gpu_mps_stop
        read -r p f k <<<"${cnt_of[$key]}"
        rc=${rc_of[$key]}
        # Under MPS the cases that must trap were skipped: run them time-sliced.
        traps=""
        if [ "$mps_ok" = 1 ]; then
            # shellcheck disable=SC2086
            traps=$("$bin" --list ${GPU_TEST_ARGS:-} 2>/dev/null | awk '/\[traps\]/ {print $1}' |
                paste -sd, -)
            if [ -n "$traps" ] && [ -n "${GPU_TEST_ARGS:-}" ]; then
                # only those the caller selected
                sel=$(echo "${GPU_TEST_ARGS}" | sed -nE 's/.*--case[ =]([^ ]+).*/\1/p')
                [ -n "$sel" ] && traps=$(echo "$traps" | tr , '\n' | grep -Fxf <(echo "$sel" | tr , '\n') | paste -sd, -)
            fi
        fi
        if [ -n "$traps" ] && [ "$rc" != 77 ]; then
            tlog="$LOGDIR/$t.n$n.timesliced.log"
            CCHAN_GPU_TEST_MPS=0 run_one "$key+ts" "$tlog" "$bin" "$n" --case "$traps"
            read -r tp tf tk <<<"${cnt_of[$key+ts]}"
            ntraps=$(echo "$traps" | tr , '\n' | grep -c .)
            if [ "$tp" != - ] && [ "$p" != - ]; then
                p=$((p + tp)) f=$((f + tf)) k=$((k - ntraps + tk))
            fi
            trc=${rc_of[$key+ts]}
            [ "$trc" = 0 ] || [ "$trc" = 77 ] || rc=$trc
        fi
        secs[$key]=$(($(date +%s) - start))
        pass[$key]=$p fail[$key]=$f skip[$key]=$k
        case $rc in
        0) res[$key]=PASS ;;
        77) res[$key]=SKIP ;;
        124) res[$key]=TIMEOUT overall=1 ;;
        *) res[$key]="FAIL($rc)" overall=1 ;;
        esac
    done
done

# ---------------------------------------------------------------- summary
{
    echo
    echo "GPU test summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), build $BUILD, sm_$ARCH, $ngpu GPU(s))"
    printf '%-26s %5s %-10s %7s %7s %7s %8s  %s\n' suite ranks result passed failed skipped \
        seconds mode
    for t in $TESTS; do
        for n in $RANKS_LIST; do
            key="$t/$n"
            mode="own GPUs"
            if gpu_mps_needed "$n" || [ "$MPS_MODE" = 1 ]; then
                [ "$MPS_MODE" = 0 ] && mode="shared, time-sliced" || mode="shared, MPS (+ traps time-sliced)"
            fi
            printf '%-26s %5s %-10s %7s %7s %7s %8s  %s\n' "$t" "$n" "${res[$key]:--}" \
                "${pass[$key]:--}" "${fail[$key]:--}" "${skip[$key]:--}" "${secs[$key]:-0}" "$mode"
        done
    done
    echo
    echo "Failures, aborts and skips (rank 0's lines; logs in $LOGDIR):"
    for t in $TESTS; do
        for n in $RANKS_LIST; do
            ts="$LOGDIR/$t.n$n.timesliced.log"
            for f in "$LOGDIR/$t.n$n.log" "$ts"; do
                [ -f "$f" ] || continue
                label="$t n=$n"
                [ "$f" = "$ts" ] && label="$label (time-sliced)"
                # the MPS run's skips of trapping cases are not skips when they ran time-sliced
                grep -E '^(FAIL |SKIP |\[r[0-9]+\] (ABORTED|WATCHDOG|FATAL))' "$f" |
                    { if [ "$f" != "$ts" ] && [ -f "$ts" ]; then grep -v 'must trap'; else cat; fi; } |
                    sed "s/^/  $label: /"
            done
        done
    done
} | tee "$LOGDIR/summary.log"
exit $overall
