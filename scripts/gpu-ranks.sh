# shellcheck shell=bash
# Sourced by scripts/gpu-check and scripts/gpu-compare.sh, which start ranks with cchan-run.
#
# NRANKS: one rank per visible GPU (2 to 8) unless the caller set it, so that the same scripts serve
# machines of 1, 2, 4 and 8 GPUs (one GPU: 2 ranks sharing it).
#
# Ranks sharing a GPU run at the same time only as clients of one MPS server; otherwise the GPU
# time-slices their contexts (every cross-rank hand-off waits for a context switch). The helpers:
#   gpu_count                   visible GPUs (0 without nvidia-smi)
#   gpu_mps_needed N            true if N ranks outnumber the GPUs
#   gpu_mps_start N             starts a private MPS control daemon (pipe and log directories of
#                               its own, exported as CUDA_MPS_PIPE_DIRECTORY/LOG_DIRECTORY) and
#                               sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to 100 / (ranks per GPU)
#   gpu_mps_stop                asks that daemon to quit, waits for it, unsets the variables
# A kernel that traps takes the MPS server down for every client: run trapping cases without MPS.
if [ -z "${NRANKS:-}" ]; then
    NRANKS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${NRANKS:-0}" -ge 2 ] 2>/dev/null || NRANKS=2
    [ "$NRANKS" -le 8 ] || NRANKS=8
fi
export NRANKS

gpu_count() {
    local n
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    echo "${n:-0}"
}

gpu_mps_needed() {
    local g
    g=$(gpu_count)
    [ "$g" -ge 1 ] && [ "$1" -gt "$g" ]
}

GPU_MPS_DIR=""

gpu_mps_start() {
    local ranks=$1 g per
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || {
        echo "[gpu-ranks] nvidia-cuda-mps-control not found: ranks will time-slice the GPU" >&2
        return 1
    }
    g=$(gpu_count)
    [ "$g" -ge 1 ] || g=1
    per=$(((ranks + g - 1) / g))
    GPU_MPS_DIR=$(mktemp -d /tmp/cchan-mps.XXXXXX)
    mkdir -p "$GPU_MPS_DIR/pipe" "$GPU_MPS_DIR/log"
    export CUDA_MPS_PIPE_DIRECTORY=$GPU_MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$GPU_MPS_DIR/log
    if ! nvidia-cuda-mps-control -d; then
        echo "[gpu-ranks] nvidia-cuda-mps-control -d failed" >&2
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        return 1
    fi
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / per))
    echo "[gpu-ranks] MPS daemon started ($ranks ranks on $g GPU(s), $per per GPU," \
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)"
}

gpu_mps_stop() {
    [ -n "$GPU_MPS_DIR" ] || return 0
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
    local _
    for _ in $(seq 1 100); do
        [ -p "$GPU_MPS_DIR/pipe/control" ] || break
        sleep 0.1
    done
    [ -p "$GPU_MPS_DIR/pipe/control" ] && echo "[gpu-ranks] MPS daemon still up after quit" >&2
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
    GPU_MPS_DIR=""
}
