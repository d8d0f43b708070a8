#!/usr/bin/env bash
# Runs every test tier this machine can run (docs/architecture.md, testing tiers), in three builds:
#
#   main  $BUILD       the default build: CUDA when nvcc is found (so examples, benches and GPU
#                      tests compile), every test including the compile matrix (label "compile")
#   asan  $BUILD-asan  host backend under AddressSanitizer + UndefinedBehaviorSanitizer (and
#                      LeakSanitizer); clang when present, so fuzz tests use libFuzzer
#   tsan  $BUILD-tsan  host backend under ThreadSanitizer
#
# The sanitizer builds leave out the compile-only tests (ctest -LE compile) and the Soft-RoCE guest
# (label rxe: it runs the main build's binaries in QEMU). Every build runs even
# when an earlier one failed; the summary at the end lists all three, and the exit status is
# non-zero when any failed.
#
# A test's TIMEOUT ends a hung test, not a slow one: the sanitizer builds multiply every TIMEOUT
# (cmake/CchanTesting.cmake, CCHAN_TEST_TIMEOUT_SCALE; pass -DCCHAN_TEST_TIMEOUT_SCALE=n in
# CMAKE_ARGS to stretch them further on a slow machine), and --timeout 900 below bounds the tests
# that set none.
#
# The next stage's configure and build run in the background, at the lowest priority, while this
# stage's tests run: the tests mostly wait on each other (about a third of two cores), so the builds
# of the sanitizer trees cost little wall time. The summary gives each stage's build and test time.
#
# Environment: BUILD (build), JOBS (nproc), CMAKE_ARGS (added to every configure),
#              CCHAN_STAGES (default "main asan tsan"), CTEST_ARGS (added to every ctest run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# Under `make test` the builds below are not sub-makes of it (no "Entering directory" noise, no
# jobserver sharing): JOBS sets their parallelism.
unset MAKEFLAGS MFLAGS MAKELEVEL

BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
STAGES=${CCHAN_STAGES:-main asan tsan}
read -r -a cmake_args <<<"${CMAKE_ARGS:-}"
read -r -a ctest_args <<<"${CTEST_ARGS:-}"
# What a plain `make` leaves out when it is missing, `make test` requires: CI never passes with the
# cmocka tests or the executor left out.
required=(-DCCHAN_REQUIRE_CMOCKA=ON -DCCHAN_REQUIRE_JANSSON=ON)
host_only=(-DCCHAN_ENABLE_CUDA=OFF -DCCHAN_ENABLE_HIP=OFF -DCCHAN_BUILD_BENCH=OFF
    -DCCHAN_BUILD_EXAMPLES=OFF)

declare -A result summary seconds test_seconds
failed=0
run_prefix=() # command prefix for test runs (setarch -R where TSan needs ASLR off)

banner() {
    local line="================================================================================"
    printf '\n%s\n== %s\n%s\n' "$line" "$*" "$line"
}

# A tiny program built with the stage's compiler and sanitizer, to learn what this kernel allows
# before the real tests run. Prints the probe's output; returns its exit status.
probe() { # probe <cc> <sanitize flags> <source>
    local dir rc
    dir=$(mktemp -d /tmp/cchan-probe.XXXXXX)
    printf '%s\n' "$3" >"$dir/probe.c"
    if ! "$1" $2 -g -pthread "$dir/probe.c" -o "$dir/probe" >"$dir/out" 2>&1; then
        cat "$dir/out"
        rm -rf "$dir"
        return 2
    fi
    "${run_prefix[@]}" "$dir/probe" >"$dir/out" 2>&1
    rc=$?
    cat "$dir/out"
    rm -rf "$dir"
    return $rc
}

# Prints, for each skipped test, the last line it printed (its reason), from ctest's log.
print_skips() {
    local build=$1 log=$2 names name why
    names=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
    [ -n "$names" ] || return 0
    echo "skipped tests and why:"
    local testlog=$build/Testing/Temporary/LastTest.log
    while IFS= read -r name; do
        why=""
        if [ -f "$testlog" ]; then
            why=$(awk -v t="$name" '
                $0 ~ "^[0-9]+/[0-9]+ Test: " t "$" { inside = 1; next }
                inside && /^<end of output>/ { print last; exit }
                inside && /^Output:/ { out = 1; next }
                inside && out && NF { last = $0 }' "$testlog")
        fi
        printf '  %-32s %s\n' "$name" "${why:-(no reason printed)}"
    done <<<"$names"
}

# Each stage's build folder and configure arguments (stage_cfg), known before the stage runs so
# that its build can start while the previous stage's tests run.
declare -A stage_dir=([main]=$BUILD [asan]=$BUILD-asan [tsan]=$BUILD-tsan)
declare -A prebuild_pid prebuild_start build_seconds
stage_cfg=()
cfg_main() { stage_cfg=(); }
cfg_tsan() { stage_cfg=(-DCCHAN_SANITIZE=thread "${host_only[@]}"); }
asan_cc=""
cfg_asan() {
    # clang when it links ASan here (Debian: libclang-rt-dev), so that fuzz tests run libFuzzer.
    if [ -z "$asan_cc" ]; then
        asan_cc=gcc
        if command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1 &&
            probe clang "-fsanitize=address,undefined" 'int main(void) { return 0; }' >/dev/null; then
            asan_cc=clang
        fi
    fi
    local cxx=g++
    [ "$asan_cc" = clang ] && cxx=clang++
    stage_cfg=(-DCCHAN_SANITIZE=address "${host_only[@]}" -DCMAKE_C_COMPILER="$asan_cc"
        -DCMAKE_CXX_COMPILER="$cxx")
}

# configure_build <build dir> <cmake args...>: prints what it runs; output in the build folder
configure_build() {
    local build=$1
    shift
    mkdir -p "$build"
    cmake -S . -B "$build" "${required[@]}" "$@" "${cmake_args[@]}" >"$build/cchan-configure.log" 2>&1 &&
        cmake --build "$build" -j "$JOBS" >"$build/cchan-build.log" 2>&1
}

# Starts the configure and build of the stage after $1, in the background at the lowest priority.
prebuild_next() {
    local cur=$1 s found=0 next=""
    for s in $STAGES; do
        [ "$found" = 1 ] && { next=$s; break; }
        [ "$s" = "$cur" ] && found=1
    done
    [ -n "$next" ] && [ -n "${stage_dir[$next]:-}" ] || return 0
    "cfg_$next"
    prebuild_start[$next]=$SECONDS
    # the subshell lowers its own priority; the configure and build it starts inherit it
    (renice -n 19 -p "$BASHPID" >/dev/null 2>&1; configure_build "${stage_dir[$next]}" "${stage_cfg[@]}") &
    prebuild_pid[$next]=$!
    echo "($next: configure and build started in the background while these tests run)"
}

run_stage() { # run_stage <name> <build dir> <ctest label args...> -- <cmake args...>
    local name=$1 build=$2
    shift 2
    local -a labels=() cfg=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do labels+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    cfg=("$@")
    local start=$SECONDS log=$build/cchan-ctest.log cfglog=$build/cchan-configure.log

    echo "configure: cmake -S . -B $build ${required[*]} ${cfg[*]} ${cmake_args[*]}"
    local built=0
    if [ -n "${prebuild_pid[$name]:-}" ]; then
        if wait "${prebuild_pid[$name]}"; then
            built=1
            echo "configured and built in the background during the previous stage's tests" \
                "($((SECONDS - ${prebuild_start[$name]})) s, log $build/cchan-build.log)"
        else
            echo "the background build failed; building again in the foreground"
        fi
    fi
    local b0=$SECONDS
    if [ "$built" = 0 ]; then
        mkdir -p "$build"
        if ! cmake -S . -B "$build" "${required[@]}" "${cfg[@]}" "${cmake_args[@]}" >"$cfglog" 2>&1; then
            cat "$cfglog"
            result[$name]=FAIL summary[$name]="configure failed"
            seconds[$name]=$((SECONDS - start))
            return 1
        fi
    fi
    grep -E '^-- cchan' "$cfglog" || true
    grep -iE 'warning' -A3 "$cfglog" | head -20 || true

    if [ "$built" = 0 ] && ! cmake --build "$build" -j "$JOBS"; then
        result[$name]=FAIL summary[$name]="build failed"
        seconds[$name]=$((SECONDS - start))
        return 1
    fi
    build_seconds[$name]=$((SECONDS - b0))
    [ "$built" = 1 ] && build_seconds[$name]="${build_seconds[$name]}+$((b0 - ${prebuild_start[$name]})) bg"
    prebuild_next "$name"

    local t0=$SECONDS
    "${run_prefix[@]}" ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$JOBS" \
        --timeout 900 "${labels[@]}" "${ctest_args[@]}" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    print_skips "$build" "$log"
    local line
    line=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)
    seconds[$name]=$((SECONDS - start))
    test_seconds[$name]=$((SECONDS - t0))
    if [ "$rc" -eq 0 ]; then
        result[$name]=PASS summary[$name]=${line:-"ctest passed"}
        return 0
    fi
    result[$name]=FAIL summary[$name]=${line:-"ctest failed (exit $rc)"}
    return 1
}

# ------------------------------------------------------------------ stages
stage_main() {
    banner "1/3 main build ($BUILD): $(nproc) cores; every test, compile matrix included"
    run_prefix=()
    cfg_main
    run_stage main "$BUILD" -- "${stage_cfg[@]}"
}

stage_asan() {
    banner "2/3 AddressSanitizer + UBSan build ($BUILD-asan): host backend, tests without label 'compile'"
    run_prefix=()
    cfg_asan
    local cc=$asan_cc
    echo "compiler: $cc"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
    # LeakSanitizer stops the world with ptrace-like calls that some containers forbid: check.
    local out
    out=$(probe "$cc" "-fsanitize=address,undefined" '
        #include <stdlib.h>
        int main(void) { void *volatile p = malloc(7); p = 0; (void)p; return 0; }')
    if grep -q 'detected memory leaks' <<<"$out"; then
        echo "LeakSanitizer works here: leaks fail the tests (ASAN_OPTIONS=$ASAN_OPTIONS)"
    else
        echo "WARNING: LeakSanitizer does not work on this machine (below); running ASan without it"
        echo "$out" | tail -5
        ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}
    fi
    run_stage asan "$BUILD-asan" -LE "compile|rxe" -- "${stage_cfg[@]}"
    local rc=$?
    unset UBSAN_OPTIONS ASAN_OPTIONS
    return $rc
}

stage_tsan() {
    banner "3/3 ThreadSanitizer build ($BUILD-tsan): host backend, tests without label 'compile'"
    run_prefix=()
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    # TSan needs the kernel's mmap layout it was built for; with more ASLR entropy (newer kernels,
    # vm.mmap_rnd_bits > 28) it dies with "unexpected memory mapping": then run without ASLR.
    local src='
        #include <pthread.h>
        static int x;
        static void *f(void *a) { __atomic_fetch_add(&x, 1, __ATOMIC_RELAXED); return a; }
        int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); f(0); pthread_join(t, 0); return 0; }'
    local out
    if out=$(probe gcc "-fsanitize=thread" "$src"); then
        echo "ThreadSanitizer works here with ASLR on"
    else
        echo "ThreadSanitizer fails with ASLR on:"
        echo "$out" | tail -3
        run_prefix=(setarch "$(uname -m)" -R)
        if out=$(probe gcc "-fsanitize=thread" "$src"); then
            echo "ThreadSanitizer works with ASLR off: running the TSan tests under '${run_prefix[*]}'"
        else
            echo "$out" | tail -5
            result[tsan]=FAIL summary[tsan]="ThreadSanitizer does not run on this machine"
            seconds[tsan]=0
            run_prefix=()
            unset TSAN_OPTIONS
            return 1
        fi
    fi
    cfg_tsan
    run_stage tsan "$BUILD-tsan" -LE "compile|rxe" -- "${stage_cfg[@]}"
    local rc=$?
    run_prefix=()
    unset TSAN_OPTIONS
    return $rc
}

total_start=$SECONDS
for s in $STAGES; do
    case $s in
    main) stage_main || failed=1 ;;
    asan) stage_asan || failed=1 ;;
    tsan) stage_tsan || failed=1 ;;
    *) echo "run-tests.sh: unknown stage '$s' (CCHAN_STAGES: main asan tsan)" >&2; exit 2 ;;
    esac
done

banner "summary ($((SECONDS - total_start)) s)"
for s in $STAGES; do
    printf '  %-5s %-4s %5ss (build %s s, tests %s s)  %s\n' "$s" "${result[$s]:-FAIL}" \
        "${seconds[$s]:-0}" "${build_seconds[$s]:--}" "${test_seconds[$s]:--}" "${summary[$s]:-did not run}"
    # A stage that stopped without recording a result failed too.
    [ "${result[$s]:-}" = PASS ] || failed=1
done
if [ "$failed" -ne 0 ]; then
    echo "make test: FAILED"
    exit 1
fi
echo "make test: all passed"
