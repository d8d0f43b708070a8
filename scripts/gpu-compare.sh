#!/usr/bin/env bash
# Before and after on whatever GPU machine is lent, in one call: builds the benchmarks of a baseline
# checkout (BASE) and of this tree, then runs the same rows of both, alternating, at 2 ranks (ranks
# sharing one GPU run under CUDA MPS, which every table names). Ratios between the two are fair on
# any setup; figures from ranks sharing a GPU say nothing about links.
#
#   BASE=/path/to/other/checkout scripts/gpu-compare.sh [lat] [coll] [moe]   (default: lat coll)
#
#   lat   cchan-bench mem-lat (signal->wait, LL8/LL16) and port-lat
#   coll  cchan-coll-bench AllReduce, AllGather, ReduceScatter, cchan rows only, CUDA graphs to 4 MiB
#   moe   cchan-moe-bench LL and HT, cchan rows only
#
# Environment: BASE (required), OUT (logs; default /tmp/cchan-compare), CUDA_ARCH (90), JOBS,
# ROUNDS (times each pair of runs is repeated, default 2), COMPARE_RANKS (2), CMAKE_ARGS (added to
# both configures), LAT_ARGS, COLL_ARGS, MOE_ARGS (override each bench's arguments).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-ranks.sh
ROOT=$(pwd)
BASE=${BASE:?set BASE to the baseline checkout}
OUTDIR=${OUT:-/tmp/cchan-compare}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
ROUNDS=${ROUNDS:-2}
N=${COMPARE_RANKS:-2}
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(lat coll)
read -r -a extra <<<"${CMAKE_ARGS:-}"
read -r -a lat_args <<<"${LAT_ARGS:-mem-lat port-lat -n 5000 -w 500}"
read -r -a coll_args <<<"${COLL_ARGS:--o allreduce -o allgather -o reducescatter -b 1K -e 256M -f 4 -G 20 --no-nccl}"
read -r -a moe_args <<<"${MOE_ARGS:---mode all --no-nccl}"
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
say() { echo "[device-compare] $*"; }

build() { # build NAME SOURCE_DIR
    local name=$1 src=$2 b=/tmp/cchan-compare-$1
    local cfg=(-DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCHAN_ENABLE_HIP=OFF -DCCHAN_BUILD_TESTS=OFF
        -DCMAKE_BUILD_TYPE=Release "${extra[@]}")
    cmake -S "$src" -B "$b" "${cfg[@]}" >"$OUTDIR/$name.configure.log" 2>&1 ||
        { tail -n 20 "$OUTDIR/$name.configure.log"; return 1; }
    cmake --build "$b" -j "$JOBS" --target cchan-run cchan-bench cchan-coll-bench cchan-moe-bench \
        >"$OUTDIR/$name.build.log" 2>&1 || { grep -E "error" "$OUTDIR/$name.build.log" | head; return 1; }
    echo "$b"
}

say "baseline $BASE ($(git -C "$BASE" rev-parse --short HEAD 2>/dev/null || echo 'not a checkout')), this tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes')"
B_BASE=$(build base "$BASE") || { say "baseline build failed"; exit 2; }
B_NEW=$(build new "$ROOT") || { say "build of this tree failed"; exit 2; }

mps=0
if gpu_mps_needed "$N"; then
    gpu_mps_start "$N" && mps=1
fi
trap '[ "$mps" = 1 ] && gpu_mps_stop' EXIT

run_one() { # run_one LABEL BUILD SUBDIR/PROGRAM ARGS...
    local label=$1 b=$2 prog=$3
    shift 3
    echo "=== $label: $prog $*"
    timeout 300 "$b/cchan-run" -n "$N" --timeout 290 "$b/$prog" "$@" 2>&1
}

for w in "${what[@]}"; do
    case $w in
    lat) prog=bench/cchan-bench args=("${lat_args[@]}") ;;
    coll) prog=bench/coll/cchan-coll-bench args=("${coll_args[@]}") ;;
    moe) prog=bench/moe/cchan-moe-bench args=("${moe_args[@]}") ;;
    *)
        say "unknown part '$w' (lat, coll, moe)"
        continue
        ;;
    esac
    for r in $(seq 1 "$ROUNDS"); do
        run_one "base $w round $r" "$B_BASE" "$prog" "${args[@]}" >"$OUTDIR/$w.base.$r.txt"
        run_one "new $w round $r" "$B_NEW" "$prog" "${args[@]}" >"$OUTDIR/$w.new.$r.txt"
        say "$w round $r: base rc $(grep -c . "$OUTDIR/$w.base.$r.txt") lines, new $(grep -c . "$OUTDIR/$w.new.$r.txt") lines"
    done
done
say "logs in $OUTDIR"
