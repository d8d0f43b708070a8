# shellcheck shell=bash
# Sourced by scripts/gpu-check (stages bwprobe and flagprobe, which export NCCL_NVLS_ENABLE=0).
#   probe_run NAME SOURCE TIMEOUT DEFAULT_RUNS [NVCC_ARGS...]
# builds bench/SOURCE (a standalone probe, no cchan library; foo_probe.cu becomes
# $OUT/cchan-foo-probe) for sm_90 and runs it once per argument set of PROBE_RUNS (sets separated
# by '|'; default DEFAULT_RUNS), each under TIMEOUT seconds; prints "SUMMARY NAME: rc=N" last and
# returns N.
probe_run() {
    local name=$1 src=$2 limit=$3 default=$4
    shift 4
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || return 2
    OUT=${OUT:-/tmp}
    mkdir -p "$OUT"
    [ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
    local base=${src%.cu}
    local bin=$OUT/cchan-${base//_/-} log=$OUT/$name-build.log
    nvcc -O3 -std=c++17 -arch=sm_90 "bench/$src" -o "$bin" "$@" >"$log" 2>&1 ||
        { tail -20 "$log"; echo "SUMMARY $name: build FAILED"; return 2; }
    nvidia-smi -L
    local rc=0 args runs
    IFS='|' read -r -a runs <<<"${PROBE_RUNS:-$default}"
    for args in "${runs[@]}"; do
        echo "== ${bin##*/} $args"
        # shellcheck disable=SC2086
        timeout "$limit" "$bin" $args || rc=$?
    done
    echo "SUMMARY $name: rc=$rc"
    return $rc
}
