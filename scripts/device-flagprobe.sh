#!/usr/bin/env bash
# cchan-flag-probe on a machine with two GPUs (issue 3): the cost of each way of ordering a
# one-thread flag ping-pong, with no cchan code, in one process and in two, with and without a host
# thread spinning on pinned memory (as a cchan proxy thread does). About 20 s with the build.
#
#   scripts/device-flagprobe.sh          (from the repository root; logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
bin=$OUT/cchan-flag-probe
nvcc -O3 -std=c++17 -arch=sm_90 bench/flag_probe.cu -o "$bin" -lpthread >"$OUT/flagprobe-build.log" 2>&1 ||
    { tail -20 "$OUT/flagprobe-build.log"; echo "SUMMARY flagprobe: build FAILED"; exit 2; }
nvidia-smi -L
rc=0
# PROBE_RUNS: the configurations to run, separated by '|', in order (the default: all four).
IFS='|' read -r -a runs <<<"${PROBE_RUNS:- |--cpu-poll|--procs|--procs --cpu-poll}"
for args in "${runs[@]}"; do
    # shellcheck disable=SC2086
    timeout 60 "$bin" $args || rc=$?
done
echo "SUMMARY flagprobe: rc=$rc"
exit $rc
