#!/usr/bin/env bash
# cchan-bw-probe on a machine with two GPUs (issue 7): the bandwidth of each way of moving data
# between them (copy engines pushing or pulling on 1-8 streams, SM stores or loads, TMA bulk
# copies, copy engine + SM mixes), with one GPU sending and with both at once, no cchan code.
# About 20 s with the build.
#
#   scripts/device-bwprobe.sh            (from the repository root; logs under $OUT)
#
# Environment: PROBE_RUNS (argument sets separated by '|', one run each; default: every mechanism
# in one process; copy engines and SM stores with buffers 4 KiB larger than the bytes moved (not a
# whole number of 2 MiB: small pages); copy engines and mixes in two processes, with and without
# that padding).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
bin=$OUT/cchan-bw-probe
nvcc -O3 -std=c++17 -arch=sm_90 bench/bw_probe.cu -o "$bin" >"$OUT/bwprobe-build.log" 2>&1 ||
    { tail -20 "$OUT/bwprobe-build.log"; echo "SUMMARY bwprobe: build FAILED"; exit 2; }
nvidia-smi -L
rc=0
IFS='|' read -r -a runs <<<"${PROBE_RUNS:- |--pad 4096 --only push|--procs --only ce-|--procs --pad 4096 --only ce-push|--procs --only mix}"
for args in "${runs[@]}"; do
    echo "== cchan-bw-probe $args"
    # shellcheck disable=SC2086
    timeout 120 "$bin" $args || rc=$?
done
echo "SUMMARY bwprobe: rc=$rc"
exit $rc
