#!/usr/bin/env bash
# `make run` on a GPU machine, timed, exactly as a user would type it (target: under 5 minutes on
# two H200s), with its JSON, log and charts copied to $OUT and the summary table printed last.
#
#   scripts/device-makerun.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/cchan-makerun}
BUILD=${BUILD:-build-makerun}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
start=$(date +%s)
make run BUILD="$BUILD" >"$OUT/make-run.log" 2>&1
status=$?
took=$(($(date +%s) - start))
cp "$BUILD"/bench-results.json "$BUILD"/bench-results.log "$OUT/" 2>/dev/null
cp "$BUILD"/bench-plots/*.png "$OUT/" 2>/dev/null
grep -E '^run-bench:|^cchan run:' "$OUT/make-run.log"
sed -n '/^cchan-bench summary/,$p' "$OUT/make-run.log"
echo "make run: exit $status after $took s (build included)"
exit "$status"
