#!/usr/bin/env bash
# cchan_coll tuning sweep on the 2-GPU machine, in about 200 s with the build.
# The steps change with what is being tuned; git log shows earlier sets. Now:
#   1. test_coll_gpu: the CE all-pairs, graph and automatic cases;
#   2. cchan-coll-bench, NCCL measured in the same run: CE AllReduce with the copy-engine
#      reduce-scatter at 1 GiB by shard lanes, staging regions, chunk and ramp; 256-512 MiB; HB.
# Logs under $OUT/colltune; a compact table of every row is printed last.
#
#   scripts/device-colltune.sh            (from anywhere in the repository)
#
# Environment: OUT (default /tmp), BUILD (default build-colltune-dev), BUDGET (seconds, 240).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
OUT=${OUT:-/tmp}
BUILD=${BUILD:-build-colltune-dev}
BUDGET=${BUDGET:-240}
LOG=$OUT/colltune
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0 # never multicast here (docs/architecture.md)
unset CCHAN_NVLS
export CCHAN_TIMEOUT_MS=${CCHAN_TIMEOUT_MS:-20000} # a lost signal traps instead of hanging
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
say() { echo "[colltune +$(el)s] $*"; }
say "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + local changes')"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$LOG/machine.log" 2>&1

mode=cmake
if ! cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_REQUIRE_CMOCKA=OFF \
    -DCMAKE_BUILD_TYPE=Release > "$LOG/configure.log" 2>&1; then
    mode=manual
    cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCCHAN_BUILD_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=Release >> "$LOG/configure.log" 2>&1 ||
        { tail -5 "$LOG/configure.log"; echo "SUMMARY colltune: configure FAILED"; exit 2; }
fi
targets="cchan-run cchan_coll cchan-coll-bench"
[ $mode = cmake ] && targets="$targets test_coll_gpu"
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $targets > "$LOG/build.log" 2>&1 ||
    { grep -E "error" "$LOG/build.log" | head -20; echo "SUMMARY colltune: build FAILED"; exit 2; }
TEST="$BUILD/test/gpu/test_coll_gpu"
if [ $mode = manual ]; then
    libdir=$(cd "$(dirname "$(find "$BUILD" -maxdepth 3 -name libcchan.so | head -1)")" && pwd)
    coll=$(find "$BUILD" -name libcchan_coll.a | head -1)
    TEST="$BUILD/test_coll_gpu"
    nvcc -std=c++17 -O2 -arch=sm_90 -Iinclude -Itest/gpu -Ikernels/coll \
        test/gpu/test_coll_gpu.cu -o "$TEST" "$coll" -L"$libdir" -lcchan -Xlinker -rpath="$libdir" \
        -lpthread >> "$LOG/build.log" 2>&1 || { tail -5 "$LOG/build.log"; TEST=false; }
fi
RUN=$(find "$BUILD" -maxdepth 3 -type f -name cchan-run -perm -u+x | head -1)
BENCH=$(find "$BUILD" -type f -name cchan-coll-bench -perm -u+x | head -1)
say "built ($mode)"

declare -a STEPS=()
declare -A RC=()
# step NAME TIMEOUT ARGS...: skipped when the budget would be exceeded
step() {
    local name=$1 to=$2
    shift 2
    local left=$((BUDGET - $(el)))
    if [ "$left" -lt 8 ]; then
        RC[$name]=skipped
        STEPS+=("$name")
        return
    fi
    [ "$to" -gt "$left" ] && to=$left
    local json=()
    [ "$1" = "$BENCH" ] && json=(-J "$LOG/$name.json")
    timeout $((to + 5)) "$RUN" -n "$NRANKS" --timeout "$to" "$@" ${json[@]+"${json[@]}"} > "$LOG/$name.log" 2>&1
    RC[$name]=$?
    STEPS+=("$name")
    say "$name: exit ${RC[$name]}"
}
B=(-n 5 -w 2 -r 3 -c 0) # large sizes: timing only (the test and the checked steps cover results)
# Current steps: after a review refactor of coll.c (one zero-copy check, one CE AllReduce chunk
# helper, the registration regions derived in coll_pick): every test_coll_gpu case, and the
# automatic 1 GiB AllReduce and 1 MiB ReduceScatter against NCCL.
step test 90 "$TEST"
step auto 25 "$BENCH" -o allreduce -b 1G -e 1G "${B[@]}"
step rs 15 "$BENCH" -o reducescatter -b 1M -e 1M -G 10 -n 20 -w 3 -r 3

echo "== test_coll_gpu"
grep -E "^(PASS|FAIL|SKIP) |calls checked|FAIL|FATAL|WATCHDOG|diagnostic" "$LOG/test.log" | head -30
echo "== bench rows: op size algo | cchan us oop ip | busbw(best) | NCCL default sym best | speedup"
for s in "${STEPS[@]}"; do
    [ "$s" = test ] && continue
    echo "--- $s (exit ${RC[$s]})"
    grep -E "^# cchan_coll parameters|^# NCCL|no NCCL|Wrong elements : [1-9]|ERROR|error|trap" \
        "$LOG/$s.log" | grep -v "^# NCCL symmetric" | head -4
    awk '/^# [a-z]+, (float|half|bfloat16)/ {op=$2}
         /^ +[0-9]+ +[0-9]+ +(float|half|bfloat16) / {
            n=NF; if ($n=="graph") n--;
            algo=$4; for (i=5; i<=n-12; i++) algo=algo" "$i;
            printf "%s %s %s | %s %s | %s | %s %s %s | %s%s\n", op, $1, algo, $(n-11), $(n-7),
                   ($(n-9)>$(n-5) ? $(n-9) : $(n-5)), $(n-3), $(n-2), $(n-1), $n,
                   (($(n-8)!="0" && $(n-8)!="N/A") || ($(n-4)!="0" && $(n-4)!="N/A")) ? " WRONG" : ""
         }' "$LOG/$s.log"
done
fails=0
for s in "${STEPS[@]}"; do [ "${RC[$s]}" = 0 ] || fails=$((fails + 1)); done
echo "SUMMARY colltune: $(el) s, ${#STEPS[@]} steps, $fails not ok ($(for s in "${STEPS[@]}"; do printf '%s=%s ' "$s" "${RC[$s]}"; done))"
