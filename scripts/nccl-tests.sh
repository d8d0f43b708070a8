#!/usr/bin/env bash
# Runs NVIDIA's nccl-tests on the real NCCL and on libcchan_nccl.so (the shim substituted through
# LD_LIBRARY_PATH), in both launch modes, and prints both tables of every run side by side.
#
#   scripts/nccl-tests.sh [/path/to/nccl-tests checkout]      (default: .ext/nccl-tests)
#
# nccl-tests is built outside this tree (under WORK) and never committed. Launch modes:
#   single  one process drives every GPU (-g NGPUS); nccl-tests built with MPI=0;
#   mpi     one process per GPU (-g 1) under mpirun; nccl-tests needs MPI for that (its processes
#           learn the unique id through MPI_Bcast), so this mode is built with MPI=1 and skipped,
#           saying so, where mpirun or mpi.h is missing.
#
# Environment:
#   BUILD       cchan build folder holding src/nccl/libnccl.so.2 (default build-ncclshim; built here
#               with target cchan_nccl if missing)
#   WORK        where nccl-tests is built and logs go (default ${OUT:-/tmp}/nccl-tests-work)
#   OUT         if set, logs are copied there
#   TESTS       collectives (default "all_reduce all_gather reduce_scatter broadcast sendrecv")
#   MODES       "single mpi" (default both)
#   NGPUS       GPUs (default: all visible, at most 8)
#   MINBYTES, MAXBYTES, STEP   -b, -e, -f (default 1K, 1G, 4)
#   EXTRA       more nccl-tests arguments, e.g. "-G 100" (CUDA graphs) or "-d all"; they also
#               name the logs (logs/<lib>-<mode>-<test>-G_100.log)
#   LIBS        "nccl cchan" (default both: the real NCCL, then the shim)
#   NVCC_GENCODE  passed to nccl-tests' make (default sm_90 only)
#   RUN_TIMEOUT   seconds per run (default 600)
#   BUILD_ONLY  1: build nccl-tests (both variants) and stop; the shim is not built
#   CCHAN_COLL_PLANS  a folder of execution plans the shim loads (docs/executor.md); passed to
#               every process of both modes
#
# Exit status: 0 when every run reported "Out of bounds values : 0 OK", 1 otherwise, 2 on a setup
# failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
SRC=${1:-${NCCL_TESTS_SRC:-$ROOT/.ext/nccl-tests}}
BUILD=${BUILD:-build-ncclshim}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
WORK=${WORK:-${OUT:-/tmp}/nccl-tests-work}
TESTS=${TESTS:-"all_reduce all_gather reduce_scatter broadcast sendrecv"}
MODES=${MODES:-"single mpi"}
MINBYTES=${MINBYTES:-1K}
MAXBYTES=${MAXBYTES:-1G}
STEP=${STEP:-4}
EXTRA=${EXTRA:-}
LIBS=${LIBS:-"nccl cchan"}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
TAG=$(echo "$EXTRA" | tr -c 'A-Za-z0-9\n' '_' | sed 's/^_*//; s/_*$//')
TAG=${TAG:+-$TAG}
export NVCC_GENCODE=${NVCC_GENCODE:-"-gencode=arch=compute_90,code=sm_90"}
# cchan never creates multicast objects; keep NCCL from doing so either (docs/architecture.md).
export NCCL_NVLS_ENABLE=0
unset CCHAN_NVLS

say() { echo "[nccl-tests] $*"; }
die() {
    say "$*"
    exit 2
}

[ -f "$SRC/src/common.cu" ] || die "no nccl-tests checkout at $SRC (git clone https://github.com/NVIDIA/nccl-tests)"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || die "nvcc not found"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
export CUDA_HOME
mkdir -p "$WORK/logs"
NGPUS=${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$NGPUS" -gt 8 ] && NGPUS=8
[ "$NGPUS" -ge 2 ] || die "needs at least two GPUs (found ${NGPUS:-0})"

# The shim.
SHIM_DIR=$BUILD/src/nccl
if [ "${BUILD_ONLY:-0}" != 1 ] && [ ! -e "$SHIM_DIR/libnccl.so.2" ]; then
    say "building libcchan_nccl.so in $BUILD"
    { [ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DCCHAN_BUILD_TESTS=OFF -DCCHAN_BUILD_BENCH=OFF; } >"$WORK/logs/shim-build.log" 2>&1 &&
        cmake --build "$BUILD" -j"$(nproc)" --target cchan_nccl >>"$WORK/logs/shim-build.log" 2>&1 ||
        die "building the shim failed: $WORK/logs/shim-build.log"
fi

# nccl-tests, outside the source checkout.
build_tests() { # <dir> <make args...>
    local dir=$1
    shift
    if [ -x "$dir/all_reduce_perf" ] && [ -x "$dir/sendrecv_perf" ]; then return 0; fi
    rm -rf "$WORK/src-$(basename "$dir")"
    cp -r "$SRC" "$WORK/src-$(basename "$dir")" || return 1
    make -C "$WORK/src-$(basename "$dir")" -j"$(nproc)" BUILDDIR="$dir" CUDA_HOME="$CUDA_HOME" "$@" \
        >"$WORK/logs/build-$(basename "$dir").log" 2>&1
}
say "building nccl-tests from $SRC ($(git -C "$SRC" describe --tags --always 2>/dev/null || echo 'no git'))"
build_tests "$WORK/single" MPI=0 &
single_build=$!

MPIRUN=$(command -v mpirun || true)
MPI_HOME=${MPI_HOME:-}
if [ -z "$MPI_HOME" ] && [ -n "$MPIRUN" ]; then
    for inc in $(mpicc --showme:incdirs 2>/dev/null) /usr/lib/x86_64-linux-gnu/openmpi/include \
        "$(dirname "$(dirname "$MPIRUN")")/include"; do
        if [ -f "$inc/mpi.h" ]; then
            MPI_HOME=$(dirname "$inc")
            break
        fi
    done
fi
MPI_OK=0
if [[ " $MODES " == *" mpi "* ]]; then
    if [ -z "$MPIRUN" ]; then
        say "mpi mode skipped: no mpirun (nccl-tests needs MPI for one process per GPU)"
    elif [ -z "$MPI_HOME" ]; then
        say "mpi mode skipped: mpirun found but no mpi.h (set MPI_HOME)"
    else
        if build_tests "$WORK/mpi" MPI=1 MPI_HOME="$MPI_HOME"; then
            MPI_OK=1
        else
            say "mpi mode skipped: nccl-tests MPI=1 build failed ($WORK/logs/build-mpi.log)"
        fi
    fi
fi

wait $single_build || die "nccl-tests build failed: $WORK/logs/build-single.log"
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    say "built nccl-tests in $WORK (single$([ $MPI_OK = 1 ] && echo ', mpi'))"
    exit 0
fi

# The real NCCL the tests link: the baseline, and the shim's fallback, so both tables use one NCCL.
REAL_NCCL=${CCHAN_NCCL_FALLBACK:-$(ldd "$WORK/single/all_reduce_perf" | awk '/libnccl\.so/ {print $3; exit}')}
[ -n "$REAL_NCCL" ] && [ -e "$REAL_NCCL" ] || die "cannot tell which libnccl.so.2 nccl-tests loads"
REAL_NCCL=$(readlink -f "$REAL_NCCL")
say "real NCCL: $REAL_NCCL; shim: $SHIM_DIR/libnccl.so.2 -> $(readlink -f "$SHIM_DIR/libnccl.so.2")"
CUDA_LIBDIR=$CUDA_HOME/lib64

fails=0
summary=()
run_one() { # <lib> <mode> <test>
    local lib=$1 mode=$2 t=$3 log="$WORK/logs/$1-$2-$3$TAG.log" rc
    local args=(-b "$MINBYTES" -e "$MAXBYTES" -f "$STEP" -c 1 $EXTRA)
    local env=(env NCCL_NVLS_ENABLE=0)
    if [ "$lib" = cchan ]; then
        env+=(LD_LIBRARY_PATH="$SHIM_DIR:$CUDA_LIBDIR:${LD_LIBRARY_PATH:-}" CCHAN_NCCL_FALLBACK="$REAL_NCCL"
            CCHAN_DEBUG="${CCHAN_DEBUG:-INFO}")
    else
        env+=(LD_LIBRARY_PATH="$(dirname "$REAL_NCCL"):$CUDA_LIBDIR:${LD_LIBRARY_PATH:-}" CCHAN_NCCL_FALLBACK=
            CCHAN_DEBUG=)
    fi
    if [ "$mode" = single ]; then
        timeout "$RUN_TIMEOUT" "${env[@]}" "$WORK/single/${t}_perf" "${args[@]}" -g "$NGPUS" >"$log" 2>&1
    else
        timeout "$RUN_TIMEOUT" "${env[@]}" "$MPIRUN" --allow-run-as-root --oversubscribe -np "$NGPUS" \
            -x LD_LIBRARY_PATH -x CCHAN_NCCL_FALLBACK -x CCHAN_DEBUG -x NCCL_NVLS_ENABLE \
            ${CCHAN_COLL_PLANS:+-x CCHAN_COLL_PLANS} \
            "$WORK/mpi/${t}_perf" "${args[@]}" -g 1 >"$log" 2>&1
    fi
    rc=$?
    local oob ok=FAIL
    oob=$(grep -m1 "Out of bounds values" "$log" | sed 's/.*: *//')
    [ $rc -eq 0 ] && [[ "$oob" == "0 OK" ]] && ok=OK
    [ "$ok" = OK ] || fails=$((fails + 1))
    local paths=""
    if [ "$lib" = cchan ]; then
        paths="cchan-path calls logged: $(grep -c -- '-> cchan' "$log"), forwarded: $(grep -c -- '-> nccl' "$log")"
    fi
    summary+=("$(printf '%-6s %-7s %-15s rc=%-3d oob=%-6s %s %s' "$lib" "$mode" "$t" "$rc" "${oob:-none}" "$ok" "$paths")")
}

# One table per run: size, out-of-place time/busbw, in-place time/busbw, #wrong.
table() { # <log>
    awk '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ / {printf "%12s %9s %7s %9s %7s %3s\n", $1, $6, $8, $10, $12, $9 + $13}' "$1"
}

for mode in $MODES; do
    [ "$mode" = mpi ] && [ $MPI_OK -eq 0 ] && continue
    for t in $TESTS; do
        for lib in $LIBS; do run_one "$lib" "$mode" "$t"; done
        echo
        say "$t, $mode mode ($NGPUS GPUs): time (us) and busbw (GB/s), out-of-place | in-place"
        printf '%12s %-40s|%-40s\n' "bytes" " real NCCL: oop us  busbw  ip us  busbw wrong" " shim: oop us  busbw  ip us  busbw wrong"
        paste -d'|' <(table "$WORK/logs/nccl-$mode-$t$TAG.log" 2>/dev/null) \
            <(table "$WORK/logs/cchan-$mode-$t$TAG.log" 2>/dev/null | cut -c13-) 2>/dev/null
    done
done

if [ -n "${OUT:-}" ] && [ "$OUT" != "$WORK" ]; then cp -r "$WORK/logs" "$OUT/nccl-tests-logs" 2>/dev/null; fi
echo
say "summary (logs in $WORK/logs):"
printf '  %s\n' "${summary[@]}"
[ $fails -eq 0 ] && exit 0 || exit 1
