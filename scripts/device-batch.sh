#!/usr/bin/env bash
# Several device scripts in one GPU-machine call, one after another, each with its own time limit
# and log folder; a short summary of each is printed last.
#
#   scripts/device-batch.sh [-t SECONDS] NAME...     runs scripts/device-NAME.sh for each NAME
#
# Logs: $OUT/NAME/ (the script's own OUT) and $OUT/NAME/out.txt (what it printed); everything is
# also packed into $OUT/batch.tgz, since the device tool returns a limited number of files.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
limit=170
if [ "${1:-}" = "-t" ]; then
    limit=$2
    shift 2
fi
[ $# -gt 0 ] || {
    echo "usage: $0 [-t SECONDS] NAME..." >&2
    exit 2
}
OUT=${OUT:-/tmp/cchan-batch}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH

declare -A rc took
for name in "$@"; do
    script=scripts/device-$name.sh
    mkdir -p "$OUT/$name"
    start=$(date +%s)
    if [ -f "$script" ]; then
        OUT="$OUT/$name" timeout -k 10 "$limit" bash "$script" >"$OUT/$name/out.txt" 2>&1
        rc[$name]=$?
    else
        echo "no $script" >"$OUT/$name/out.txt"
        rc[$name]=127
    fi
    took[$name]=$(($(date +%s) - start))
done
tar czf "$OUT/batch.tgz" -C "$OUT" --exclude=batch.tgz "$@" 2>/dev/null
for name in "$@"; do
    echo "==== $name: rc ${rc[$name]} after ${took[$name]} s$([ "${rc[$name]}" = 124 ] && echo " (time limit $limit s)")"
    tail -n "${TAIL:-30}" "$OUT/$name/out.txt"
done
