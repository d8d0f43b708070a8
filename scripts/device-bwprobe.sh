#!/usr/bin/env bash
# cchan-bw-probe on a machine with two GPUs: the bandwidth of each way of moving data
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
export NCCL_NVLS_ENABLE=0 # never multicast here (docs/architecture.md)
unset CCHAN_NVLS
. "$(dirname "$0")/probe-run.sh"
runs=" |--pad 4096 --only push|--procs --only ce-|--procs --pad 4096 --only ce-push"
probe_run bwprobe bw_probe.cu 120 "$runs|--procs --only mix"
