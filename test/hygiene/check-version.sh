#!/usr/bin/env bash
# One version and one license: the version is defined once, in include/cchan/cchan.h
# (CCHAN_VERSION_MAJOR/MINOR/PATCH); the library's cchan_version(), the CMake package, the
# pkg-config files and the Python package must all say the same, and all name the MIT license
# that LICENSE holds.
#
#   check-version.sh SOURCE_DIR BUILD_DIR PRINT_VERSION_PROGRAM
set -euo pipefail
src=$1 build=$2 prog=$3
fail=0
bad() { echo "FAIL: $*"; fail=1; }

part() { sed -nE "s/^#define CCHAN_VERSION_$1 ([0-9]+).*/\1/p" "$src/include/cchan/cchan.h"; }
want="$(part MAJOR).$(part MINOR).$(part PATCH)"
[[ "$want" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "FAIL: no version in include/cchan/cchan.h"; exit 1; }
echo "version (include/cchan/cchan.h): $want"

lib=$("$prog" | sed -n 1p)
code=$("$prog" | sed -n 2p)
case $lib in "$want" | "$want "*) ;; *) bad "cchan_version() says '$lib', not $want" ;; esac
IFS=. read -r ma mi pa <<<"$want"
[ "$code" = $((ma * 10000 + mi * 100 + pa)) ] || bad "cchan_version_code() is $code"

cm=$(sed -nE 's/^set\(PACKAGE_VERSION "([^"]+)"\).*/\1/p' "$build/cchanConfigVersion.cmake")
[ "$cm" = "$want" ] || bad "the CMake package (cchanConfigVersion.cmake) says '$cm'"
for pc in "$build"/cchan*.pc; do
    [ -f "$pc" ] || continue
    v=$(sed -n 's/^Version: //p' "$pc")
    [ "$v" = "$want" ] || bad "$(basename "$pc") says Version: $v"
    grep -qx 'license=MIT' "$pc" || bad "$(basename "$pc") does not name the license (license=MIT)"
done

py=$(sed -nE 's/^version = "([^"]+)"/\1/p' "$src/python/pyproject.toml")
[ "$py" = "$want" ] || bad "python/pyproject.toml says version '$py'"
grep -qx 'license = {text = "MIT"}' "$src/python/pyproject.toml" || bad "python/pyproject.toml names no MIT license"
pyv=$(sed -nE 's/^__version__ = "([^"]+)"/\1/p' "$src/python/cchan/__init__.py")
[ "$pyv" = "$want" ] || bad "python/cchan/__init__.py says __version__ = '$pyv'"

head -n 1 "$src/LICENSE" | grep -qx 'MIT License' || bad "LICENSE is not the MIT license"
grep -q 'set(cchan_LICENSE "MIT")' "$src/cmake/cchanConfig.cmake.in" || bad "the CMake package names no license"
[ $fail = 0 ] && echo "one version ($want) and one license (MIT) everywhere"
exit $fail
