#!/usr/bin/env bash
# cchan-flag-probe on a machine with two GPUs: the cost of each way of ordering a
# one-thread flag ping-pong, with no cchan code, in one process and in two, with and without a host
# thread spinning on pinned memory (as a cchan proxy thread does). About 20 s with the build.
#
#   scripts/device-flagprobe.sh          (from the repository root; logs under $OUT)
#
# PROBE_RUNS: the configurations to run, separated by '|', in order (the default: all four).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 # never multicast here (docs/architecture.md)
unset CCHAN_NVLS
. "$(dirname "$0")/probe-run.sh"
probe_run flagprobe flag_probe.cu 60 " |--cpu-poll|--procs|--procs --cpu-poll" -lpthread
