#!/usr/bin/env bash
# Checks that use_all.c calls every device function the public headers define, so the device-mode
# hygiene tests compile each of them to machine code.
#
#   check-coverage.sh CC INCLUDE_DIR USE_ALL_SOURCE
#
# The device functions are the CCHAN_DEVICE_INLINE / CCHAN_HOST_DEVICE_INLINE definitions, taken
# from two places: the headers as written (every backend's branch, e.g. CUDA-only functions) and the
# headers preprocessed for the host backend (names that macros generate, e.g. the _u32/_f32
# variants). Internal headers (those that refuse direct inclusion) are read, not included.
set -uo pipefail

cc=$1 include_dir=$2 use_all=$3

if [ -z "$cc" ] || [ ! -x "$cc" ]; then
    echo "SKIP: no C compiler to preprocess the headers"
    exit 77
fi

mapfile -t headers < <(find "$include_dir/cchan" -name '*.h' | LC_ALL=C sort)
includes=""
for h in "${headers[@]}"; do
    if ! grep -qE '^#[[:space:]]*error[[:space:]]+"include [^"]+ instead"' "$h"; then
        includes+="#include \"${h#"$include_dir"/}\""$'\n'
    fi
done

# Names written out in the headers (skipping macro templates with ##).
written=$(cat "${headers[@]}" |
    grep -oE 'CCHAN_(HOST_)?DEVICE_INLINE[^(]*[^A-Za-z0-9_#]cchan_[A-Za-z0-9_]+[[:space:]]*\(' |
    grep -oE 'cchan_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d '( \t')

# Names after preprocessing for the host backend (CCHAN_DEVICE_INLINE is `static inline` there).
if ! expanded=$(printf '%s' "$includes" | "$cc" -x c -std=c11 -E -P -I"$include_dir" - 2>&1); then
    echo "FAIL: preprocessing the public headers failed:"
    echo "$expanded"
    exit 1
fi
generated=$(echo "$expanded" |
    grep -oE 'static inline [^;{=]*[^A-Za-z0-9_]cchan_[A-Za-z0-9_]+[[:space:]]*\(' |
    grep -oE 'cchan_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d '( \t')

mapfile -t functions < <(printf '%s\n%s\n' "$written" "$generated" | grep . | LC_ALL=C sort -u)
# use_all.c without its comments: a call counts, a mention in a comment does not.
code=$(sed -e 's://.*$::' "$use_all" | perl -0pe 's:/\*.*?\*/::gs' 2>/dev/null || cat "$use_all")

missing=()
for f in "${functions[@]}"; do
    grep -qE "(^|[^A-Za-z0-9_])${f}[[:space:]]*\\(" <<<"$code" || missing+=("$f")
done

echo "hygiene_use_all_coverage: use_all.c calls $((${#functions[@]} - ${#missing[@]})) of" \
    "${#functions[@]} device functions defined in $include_dir/cchan"
if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: not called from test/hygiene/use_all.c (add a call in its header's section):"
    printf '  %s\n' "${missing[@]}"
    exit 1
fi
