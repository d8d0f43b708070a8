#!/usr/bin/env bash
# `make run`: builds cchan-bench if needed and runs the whole suite on what this machine has:
#   two or more GPUs  one rank per GPU (pair tests on GPUs 0 and 1, the matrix over every ordered pair);
#   one GPU           two ranks on that GPU ("one GPU against itself"; ping-pongs are skipped there,
#                     since kernels of two processes do not run at once on one GPU without MPS);
#   no GPU            the host backend: CPU threads run the same channel code over shared memory.
# Writes $BUILD/bench-results.json (every row), $BUILD/bench-results.log and, where matplotlib is,
# charts in $BUILD/bench-plots/.
#
# Environment: BUILD (default build), BENCH_ARGS (extra cchan-bench options, e.g. "-e 256M"),
# RESULTS (JSON path), JOBS, CMAKE_ARGS (used when $BUILD is not configured yet).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RESULTS=${RESULTS:-$BUILD/bench-results.json}
LOG=${RESULTS%.json}.log

# cchan never creates multicast objects unless asked; make sure nothing here asks
# (docs/architecture.md, safety on shared GPU machines).
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS

# The benchmark needs no test dependencies: where the full configure fails (cmocka missing on a GPU
# machine without a package registry, say), configure without the tests.
if [ ! -f "$BUILD/Makefile" ] && [ ! -f "$BUILD/build.ninja" ]; then
    if ! cmake -S . -B "$BUILD" ${CMAKE_ARGS:-} >/dev/null 2>"$BUILD.configure.log"; then
        echo "cchan run: configure failed (see $BUILD.configure.log); configuring without tests"
        cmake -S . -B "$BUILD" -DCCHAN_BUILD_TESTS=OFF ${CMAKE_ARGS:-} >/dev/null || exit 2
    fi
fi
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target cchan-bench cchan-run >/dev/null
BENCH="$BUILD/bench/cchan-bench"
RUN="$BUILD/cchan-run"

ngpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then # the GPUs this process may use, not all the machine has
    if [ -z "$CUDA_VISIBLE_DEVICES" ]; then ngpus=0; else
        visible=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
        [ "$visible" -lt "$ngpus" ] && ngpus=$visible
    fi
fi
cuda_built=$("$BENCH" --version | grep -q 'backends: cuda' && echo 1 || echo 0)
extra=()
if [ "$ngpus" -ge 2 ] && [ "$cuda_built" = 1 ]; then
    ranks=$ngpus
    echo "run-bench: $ngpus GPUs: one rank per GPU"
elif [ "$ngpus" -eq 1 ] && [ "$cuda_built" = 1 ]; then
    ranks=2
    echo "run-bench: one GPU: two ranks on it (one GPU against itself; ping-pong tests are skipped)"
else
    ranks=2
    extra=(--host)
    if [ "$ngpus" -gt 0 ]; then
        echo "run-bench: $ngpus GPU(s) but this build has no CUDA: running the host backend (CPU threads over shared memory)"
    else
        echo "run-bench: no GPU: running the host backend (CPU threads over shared memory; no GPU figures)"
    fi
fi

# A caller that knows better (a GPU machine's copy of .git can be stale) sets CCHAN_BENCH_COMMIT.
if [ -z "${CCHAN_BENCH_COMMIT:-}" ]; then
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
    export CCHAN_BENCH_COMMIT=$commit
fi
commit=$CCHAN_BENCH_COMMIT

status=0
# shellcheck disable=SC2086
"$RUN" -n "$ranks" --timeout 290 "$BENCH" all "${extra[@]}" -J "$RESULTS" ${BENCH_ARGS:-} 2>&1 | tee "$LOG" || status=$?
if [ -f "$RESULTS" ]; then
    python3 scripts/plot-bench.py "$RESULTS" -o "$BUILD/bench-plots" || true
    python3 scripts/plot-bench.py "$RESULTS" --summary || true
fi
exit "$status"
