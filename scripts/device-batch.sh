#!/usr/bin/env bash
# Several device scripts in one GPU-machine call, one after another, each with its own time limit
# and log folder; a short summary of each is printed last.
#
#   scripts/device-batch.sh [-t SECONDS] NAME...     runs scripts/device-NAME.sh for each NAME
#
# What each script printed comes back as $OUT/NAME.txt; its own log folder (its OUT) is packed,
# leaving out files over 4 MB, into $OUT/logs.tgz: the device tool returns at most 8 files.
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
WORK=${BATCH_WORK:-/tmp/cchan-batch-work}
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH

declare -A rc took
for name in "$@"; do
    script=scripts/device-$name.sh
    mkdir -p "$WORK/$name"
    start=$(date +%s)
    if [ -f "$script" ]; then
        OUT="$WORK/$name" timeout -k 10 "$limit" bash "$script" >"$OUT/$name.txt" 2>&1
        rc[$name]=$?
    else
        echo "no $script" >"$OUT/$name.txt"
        rc[$name]=127
    fi
    took[$name]=$(($(date +%s) - start))
done
(cd "$WORK" && find "$@" -type f -size -4M -print0 | tar czf "$OUT/logs.tgz" --null -T -) 2>/dev/null
for name in "$@"; do
    echo "==== $name: rc ${rc[$name]} after ${took[$name]} s$([ "${rc[$name]}" = 124 ] && echo " (time limit $limit s)")"
    tail -n "${TAIL:-30}" "$OUT/$name.txt"
done
