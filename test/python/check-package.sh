#!/usr/bin/env bash
# The package as users install it:
#   1. pip install ./python into a venv, offline (--no-index, no find-links, no pip config) and
#      with pip's build isolation: the in-tree build backend needs nothing installed; then a
#      2-rank all-reduce with the build tree's libraries through CCHAN_LIBRARY_PATH;
#   2. cmake --install into a scratch prefix: the installed package finds that prefix's libraries
#      by itself (_install_paths.py), and the venv's package finds them through cchan-run on PATH.
#
#   check-package.sh PYTHON3 SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
py=$1 src=$2 build=$3 work=$4

if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "SKIP: $py lacks torch (Debian: apt-get install python3-torch)"
    exit 77
fi
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1 || ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "SKIP: $py lacks venv or pip (Debian: apt-get install python3-venv python3-pip)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"
run=("$build/cchan-run" -n 2 --timeout 120)

# 1. pip install into a venv
"$py" -m venv --system-site-packages "$work/venv"
cp -r "$src/python" "$work/python" # a build may leave __pycache__ next to the sources
rm -rf "$work/python/cchan/__pycache__" "$work/python/cchan/_install_paths.py"
# As a machine without a package index runs it: pip installs the build requirements into an
# isolated environment first, so any requirement would fail here.
env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 \
    "$work/venv/bin/python" -m pip install -q "$work/python"
cd "$work"
out=$(CCHAN_LIBRARY_PATH="$build" "${run[@]}" "$work/venv/bin/python" "$src/test/python/smoke.py")
echo "$out"
grep -q "smoke ok: $work/venv/" <<<"$out" || { echo "FAIL: the venv's package did not run"; exit 1; }
grep -q "$build" <<<"$out" || { echo "FAIL: libraries not from CCHAN_LIBRARY_PATH"; exit 1; }

# 2. cmake --install (the make install hook)
cmake --install "$build" --prefix "$work/prefix" >/dev/null
paths=$(find "$work/prefix" -name _install_paths.py)
[ -n "$paths" ] || { echo "FAIL: cmake --install installed no Python package"; exit 1; }
site=$(dirname "$(dirname "$paths")")
out=$(env -u CCHAN_LIBRARY_PATH PYTHONPATH="$site" "${run[@]}" "$py" "$src/test/python/smoke.py")
echo "$out"
grep -q "smoke ok: $site/cchan" <<<"$out" || { echo "FAIL: the installed package did not run"; exit 1; }
grep -q "$work/prefix/" <<<"$out" || { echo "FAIL: the installed package did not load the prefix's libraries"; exit 1; }
out=$(env -u CCHAN_LIBRARY_PATH PATH="$work/prefix/bin:$PATH" "${run[@]}" "$work/venv/bin/python" "$src/test/python/smoke.py")
echo "$out"
grep -q "$work/prefix/" <<<"$out" || { echo "FAIL: the venv's package did not find the prefix through cchan-run"; exit 1; }
rm -rf "$work"
echo "check-package: ok"
