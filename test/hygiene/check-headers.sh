#!/usr/bin/env bash
# Header hygiene: every public header under include/cchan/ compiles alone, as its own translation
# unit, in one compiler mode; then use_all.c (which calls every device function) compiles to machine
# code in that mode. Headers are found when the test runs, so a new header is covered without
# reconfiguring.
#
#   check-headers.sh MODE COMPILER INCLUDE_DIR USE_ALL_SOURCE WORK_DIR [SKIP_REASON]
#
# MODE: gcc_c11 clang_c11 gxx_cxx17 clangxx_cxx17 nvcc_sm80 nvcc_sm90 hipcc_gfx90a hipcc_gfx940.
# COMPILER empty (or not executable): exit 77 (skipped) with SKIP_REASON.
# A header that refuses direct inclusion (`#error "include <other> instead"`) is reported as
# internal and not compiled alone; it is still compiled through the header that includes it.
set -uo pipefail

mode=$1 compiler=$2 include_dir=$3 use_all=$4 work=$5 skip_reason=${6:-}
jobs=${CCHAN_HYGIENE_JOBS:-$(nproc 2>/dev/null || echo 2)}

if [ -z "$compiler" ] || [ ! -x "$compiler" ]; then
    echo "SKIP hygiene_$mode: ${skip_reason:-compiler not found}"
    exit 77
fi

warn=(-Wall -Wextra -Werror)
case $mode in
gcc_c11 | clang_c11)
    ext=c
    alone=(-x c -std=c11 -pedantic "${warn[@]}" -fsyntax-only)
    full=(-x c -std=c11 -pedantic "${warn[@]}" -O2 -c)
    ;;
gxx_cxx17 | clangxx_cxx17)
    ext=cpp
    alone=(-x c++ -std=c++17 -pedantic "${warn[@]}" -fsyntax-only)
    full=(-x c++ -std=c++17 -pedantic "${warn[@]}" -O2 -c)
    ;;
nvcc_sm80 | nvcc_sm90)
    # -Werror all-warnings: nvcc's own and the device front end's warnings; -Xcompiler: the host
    # compiler's, on the host pass. -pedantic is left out: nvcc's generated host code is not ISO.
    ext=cu
    # shellcheck disable=SC2054  # the commas belong to -Xcompiler's list
    alone=(-x cu -std=c++17 -arch="sm_${mode#nvcc_sm}" -Werror all-warnings
        -Xcompiler=-Wall,-Wextra,-Werror -c)
    full=("${alone[@]}" -O3)
    ;;
hipcc_gfx90a | hipcc_gfx940)
    # -c, not -fsyntax-only: hipcc appends link flags that -fsyntax-only reports as unused.
    ext=hip
    alone=(-x hip -std=c++17 --offload-arch="${mode#hipcc_}" "${warn[@]}" -c)
    full=("${alone[@]}" -O3)
    ;;
*)
    echo "check-headers.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac

rm -rf "$work"
mkdir -p "$work"

# One job per translation unit: "<name> <source>|<flags...>" lines, run $jobs at a time.
tus=()
internal=()
while IFS= read -r header; do
    rel=${header#"$include_dir"/}
    if grep -qE '^#[[:space:]]*error[[:space:]]+"include [^"]+ instead"' "$header"; then
        internal+=("$rel")
        continue
    fi
    name=$(echo "$rel" | tr '/.' '__')
    # Included twice: the include guard must work too.
    printf '#include "%s"\n#include "%s"\n' "$rel" "$rel" >"$work/$name.$ext"
    tus+=("$name")
done < <(find "$include_dir/cchan" -name '*.h' | LC_ALL=C sort)

if [ ${#tus[@]} -eq 0 ]; then
    echo "FAIL: no public headers found under $include_dir/cchan"
    exit 1
fi

cp "$use_all" "$work/use_all.$ext"

compile_one() {
    local name=$1
    local -a flags
    if [ "$name" = use_all ]; then flags=("${full[@]}"); else flags=("${alone[@]}"); fi
    local cmd=("$compiler" "${flags[@]}" -I"$include_dir" "$work/$name.$ext" -o "$work/$name.o")
    {
        echo "${cmd[*]}"
        (cd "$work" && "${cmd[@]}")
    } >"$work/$name.log" 2>&1
    echo $? >"$work/$name.rc"
}

# Background jobs, at most $jobs at once (wait -n needs bash >= 4.3).
start=$(date +%s)
running=0
for name in "${tus[@]}" use_all; do
    compile_one "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait

failed=0
for name in "${tus[@]}" use_all; do
    rc=$(cat "$work/$name.rc" 2>/dev/null || echo 1)
    if [ "$name" = use_all ]; then
        label="use_all.c (calls every device function)"
    else
        label=$(sed -n 's/^#include "\(.*\)"$/\1/p' "$work/$name.$ext" | head -1)
    fi
    if [ "$rc" = 0 ]; then
        echo "ok    $label"
    else
        echo "FAIL  $label"
        sed 's/^/      | /' "$work/$name.log"
        failed=$((failed + 1))
    fi
done
for rel in "${internal[@]}"; do
    echo "skip  $rel (internal: refuses direct inclusion; compiled through its includer)"
done
total=$((${#tus[@]} + 1))
version=$("$compiler" --version 2>/dev/null | grep -m1 -iE 'release|version|[0-9]+\.[0-9]+\.[0-9]+' | tr -s ' ')
echo "hygiene_$mode: $((total - failed))/$total translation units compiled in $(($(date +%s) - start)) s" \
    "with $jobs jobs ($compiler: $version)"
[ "$failed" -eq 0 ]
