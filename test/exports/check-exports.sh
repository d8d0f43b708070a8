#!/bin/sh
# A kernel library exports the functions its header declares and nothing else: every function
# the header declares carries CCHAN_API, the version script lists exactly those names, the built
# library exports exactly those (nm -D --defined-only), and its SONAME is lib<name>.so.<major>.
#   check-exports.sh <header> <version script> <library file> <expected SONAME>
set -u
header=$1
map=$2
lib=$3
soname=$4
for tool in nm readelf; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool not found (Debian: apt-get install binutils)"
        exit 77
    fi
done
tmp=${TMPDIR:-/tmp}/cchan-exports.$$
trap 'rm -f "$tmp".*' EXIT
name=$(basename "$lib")

# The header: a declaration starts a line (clang-format puts it there) with an optional CCHAN_API,
# a return type and the function's name; typedefs of function pointers are not functions.
decl='^(CCHAN_API[[:space:]]+)?[A-Za-z_][A-Za-z0-9_ ]*[[:space:]*]+([a-z_][a-z0-9_]*)[[:space:]]*\('
grep -E "$decl" "$header" | grep -v '^typedef' |
    sed -E "s/$decl.*/\\2/" | sort >"$tmp.declared"
grep -E "$decl" "$header" | grep -v '^typedef' | grep '^CCHAN_API' |
    sed -E "s/$decl.*/\\2/" | sort >"$tmp.api"
# The version script: the names between "global:" and "local:", comments dropped.
sed -e 's#/\*.*\*/##g' -e '/\/\*/,/\*\//d' "$map" |
    awk '/global:/ {on = 1; next} /local:/ {on = 0} on' | tr -d ' \t;' | grep -v '^$' |
    sort >"$tmp.map"
# The library: every defined dynamic symbol but version nodes (type A), without @VERSION.
nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u >"$tmp.lib"

n=$(wc -l <"$tmp.declared")
if [ "$n" -lt 5 ]; then
    echo "FAIL: found only $n function declarations in $header"
    exit 1
fi
fail=0
report() { # <message> <names...>
    msg=$1
    shift
    if [ $# -gt 0 ]; then
        echo "FAIL: $msg:" "$@"
        fail=1
    fi
}
leak="$name exports names $(basename "$header") does not declare (internal functions stay hidden;"
# shellcheck disable=SC2046  # one word per name
report "$leak public ones get CCHAN_API in the header and a line in $(basename "$map"))" \
    $(comm -13 "$tmp.declared" "$tmp.lib")
# shellcheck disable=SC2046
report "$(basename "$header") declares functions $name does not export" \
    $(comm -23 "$tmp.declared" "$tmp.lib")
# shellcheck disable=SC2046
report "$(basename "$header") declares functions without CCHAN_API" \
    $(comm -23 "$tmp.declared" "$tmp.api")
# shellcheck disable=SC2046
report "$(basename "$map") lists names $(basename "$header") does not declare" \
    $(comm -13 "$tmp.declared" "$tmp.map")
# shellcheck disable=SC2046
report "$(basename "$map") lacks functions $(basename "$header") declares" \
    $(comm -23 "$tmp.declared" "$tmp.map")
got=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [ "$got" != "$soname" ]; then
    echo "FAIL: $name has SONAME '${got}', expected $soname"
    fail=1
fi
[ "$fail" -eq 0 ] || exit 1
echo "OK: $name (SONAME $soname) exports the $n functions of $(basename "$header"), nothing else"
