#!/bin/sh
# libcchan_nccl.so exports every function of NCCL's C API and nothing else: the functions nccl.h
# declares (each with its pnccl alias, which nccl.h declares too) and the host functions of the
# device API (nccl_device/*.h; libnccl exports them with pnccl aliases as well).
#   check-exports.sh <folder holding nccl.h> <libcchan_nccl.so>
set -u
inc=$1
lib=$2
tmp=${TMPDIR:-/tmp}/cchan-nccl-exports.$$
trap 'rm -f "$tmp".*' EXIT
# nccl.h: declarations start a line with a return type followed by (p)nccl<Name>(
grep -E '^[[:space:]]*(ncclResult_t|const char[[:space:]]*\*|void)[[:space:]]*p?nccl[A-Za-z]+[[:space:]]*\(' \
    "$inc/nccl.h" | sed -E 's/.*[[:space:]*](p?nccl[A-Za-z]+)[[:space:]]*\(.*/\1/' >"$tmp.header"
n_nccl=$(wc -l <"$tmp.header")
# nccl_device: NCCL_EXTERN_C __host__ <type> nccl<Name>(   (inline host/device helpers excluded)
if [ -d "$inc/nccl_device" ]; then
    grep -rhE '__host__[[:space:]]+[A-Za-z_]+[[:space:]*]+nccl[A-Za-z0-9]+[[:space:]]*\(' "$inc/nccl_device" |
        grep -v INLINE | sed -E 's/.*[[:space:]*](nccl[A-Za-z0-9]+)[[:space:]]*\(.*/\1/' |
        sort -u | while read -r f; do echo "$f"; echo "p$f"; done >>"$tmp.header"
fi
sort -u "$tmp.header" -o "$tmp.header"
nm -D --defined-only "$lib" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u >"$tmp.lib"
n=$(wc -l <"$tmp.header")
if [ "$n_nccl" -lt 60 ]; then
    echo "FAIL: found only $n_nccl functions in $inc/nccl.h"
    exit 1
fi
missing=$(comm -23 "$tmp.header" "$tmp.lib")
extra=$(comm -13 "$tmp.header" "$tmp.lib")
[ -z "$missing" ] || echo "FAIL: declared by NCCL's headers but not exported:" $missing
[ -z "$extra" ] || echo "FAIL: exported but not declared by NCCL's headers:" $extra
[ -z "$missing$extra" ] || exit 1
echo "OK: $n functions exported ($n_nccl from nccl.h, the rest from nccl_device/), nothing else"
