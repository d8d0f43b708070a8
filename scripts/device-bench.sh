#!/usr/bin/env bash
# The benchmark run for a GPU machine, in one call: configure and build for sm_90 (without tests:
# such machines may lack cmocka and a package registry), check the minimal example, run
# `cchan-bench all` (about a minute on two H200s, bounded to 4), keep the JSON, logs and charts, and
# print a compact summary table last.
#
#   scripts/device-bench.sh
#
# Environment: BUILD (default build-device), OUT (when set, results are copied there as well),
# BENCH_CMD (the subcommand, default all), BENCH_ARGS (extra cchan-bench options), CUDA_ARCH (default 90), JOBS.
# Exit status: cchan-bench's (0 = every check passed), 2 when the build failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-device}
ARCH=${CUDA_ARCH:-90}
DEST=${OUT:-$BUILD/bench-out}
mkdir -p "$DEST" "$BUILD"

# cchan never creates multicast objects unless asked; make sure nothing here asks
# (docs/architecture.md, safety on shared GPU machines).
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
say() { echo "[device-bench] $*"; }

# A caller that knows better (a GPU machine's copy of .git can be stale) sets CCHAN_BENCH_COMMIT.
if [ -z "${CCHAN_BENCH_COMMIT:-}" ]; then
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
    export CCHAN_BENCH_COMMIT=$commit
fi
commit=$CCHAN_BENCH_COMMIT
{
    say "commit $commit, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname)"
    nvcc --version 2>/dev/null | tail -n 1
    nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader 2>/dev/null
    nvidia-smi topo -m 2>/dev/null | head -n 6
} 2>&1 | tee "$DEST/bench.log"

t0=$(date +%s)
if ! { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_BUILD_TESTS=OFF &&
       cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target cchan-run cchan-bench hello_memory_channel hello_host; } \
       >"$DEST/build.log" 2>&1; then
    tail -n 30 "$DEST/build.log"
    say "build failed (log: $DEST/build.log)"
    exit 2
fi
grep -iE 'warning' "$DEST/build.log" | grep -v 'CMake Warning' | head -n 20
say "built in $(( $(date +%s) - t0 )) s: $("$BUILD/bench/cchan-bench" --version)"

ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
ranks=2
[ "$ngpus" -gt 2 ] && ranks=$ngpus
if [ "$ngpus" -ge 2 ]; then
    say "hello_memory_channel:"
    timeout 60 "$BUILD/cchan-run" -n 2 --timeout 50 "$BUILD/kernels/examples/hello_memory_channel" 2>&1 | tee -a "$DEST/bench.log"
fi
say "hello_host:"
timeout 60 "$BUILD/cchan-run" -n 2 --timeout 50 "$BUILD/kernels/examples/hello_host" 2>&1 | tee -a "$DEST/bench.log"

say "cchan-bench all on $ngpus GPU(s), $ranks ranks"
status=0
# shellcheck disable=SC2086
timeout 245 "$BUILD/cchan-run" -n "$ranks" --timeout 240 "$BUILD/bench/cchan-bench" ${BENCH_CMD:-all} \
    -J "$DEST/bench-results.json" ${BENCH_ARGS:-} 2>&1 | tee -a "$DEST/bench.log" || status=$?
if [ -f "$DEST/bench-results.json" ]; then
    python3 scripts/plot-bench.py "$DEST/bench-results.json" -o "$DEST" 2>&1 | tail -n 5
    python3 scripts/plot-bench.py "$DEST/bench-results.json" --summary | tee "$DEST/summary.txt"
else
    say "no JSON was written"
fi
say "exit status $status; results in $DEST"
exit "$status"
