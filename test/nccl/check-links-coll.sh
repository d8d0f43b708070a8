#!/bin/sh
# libcchan_nccl.so needs libcchan_coll (a NEEDED entry) and calls into it (undefined cchan_coll_*
# symbols): a shim built without the collectives library fails here.
#   check-links-coll.sh <libcchan_nccl.so> <libcchan_coll file name>
lib=$1
coll=$2
if ! readelf -d "$lib" | grep -q "NEEDED.*\[$coll\]"; then
    echo "FAIL: $lib does not link $coll:"
    readelf -d "$lib" | grep NEEDED
    exit 1
fi
n=$(nm -D --undefined-only "$lib" | grep -c ' cchan_coll_')
if [ "$n" -lt 5 ]; then
    echo "FAIL: $lib calls $n cchan_coll_ functions (its collectives are compiled out?)"
    exit 1
fi
echo "OK: $lib links $coll and calls $n cchan_coll_ functions"
