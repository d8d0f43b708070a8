#!/usr/bin/env bash
# A whole GPU-machine run in one call: GPU test suites, the benchmark suite, a port-channel latency
# breakdown; everything packed into $OUT/results.tgz (the device tool returns few files), and a short
# summary printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
W=${WORK:-/tmp/cchan-device}
rm -rf "$W" && mkdir -p "$W/gpu" "$W/bench"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
OUT=$W/gpu scripts/device-gpu-tests.sh >"$W/gpu/run.txt" 2>&1
gpu_rc=$?
OUT=$W/bench scripts/device-bench.sh >"$W/bench/run.txt" 2>&1
bench_rc=$?
# Per-stage proxy timings (transport_dma.c): printed by each proxy when it stops.
if [ -x build-device/bench/cchan-bench ]; then
    CCHAN_DEBUG=TRACE CCHAN_DEBUG_SUBSYS=proxy build-device/cchan-run -n 2 --timeout 300 \
        build-device/bench/cchan-bench port-lat -n 3000 -w 300 >"$W/bench/breakdown.txt" 2>&1
fi
[ -n "${OUT:-}" ] && tar czf "$OUT/results.tgz" -C "$W" gpu bench
echo "==== GPU tests (rc $gpu_rc)"
tail -n 12 "$W/gpu/run.txt"
echo "==== proxy stage timings"
grep -E "channel [0-9]+: " "$W/bench/breakdown.txt" | grep -v " n=0 " | head -n 24
echo "==== bench (rc $bench_rc)"
tail -n 50 "$W/bench/run.txt"
