#!/usr/bin/env bash
# The wheel of `make wheel`: built from this build tree, installed into a fresh venv without a
# package index, it runs README's Python example under cchan-run with no CCHAN_LIBRARY_PATH, every
# cchan library the process maps coming from the wheel (cchan/_libs), none from the build tree.
#
#   check-wheel.sh PYTHON3 SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
py=$1 src=$2 build=$3 work=$4

if ! "$py" -c 'import venv' >/dev/null 2>&1 || ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "SKIP: $py lacks venv or pip (Debian: apt-get install python3-venv python3-pip)"
    exit 77
fi
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "SKIP: $py lacks torch, which the example needs (Debian: apt-get install python3-torch)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cd "$work"

# 1. the wheel: a platform wheel (the libraries are machine code), the libraries under cchan/_libs
PYTHONDONTWRITEBYTECODE=1 "$py" "$src/python/_backend/cchan_build.py" \
    --libs "$build/python/wheel-libs.txt" --outdir "$work/dist" >/dev/null
whl=$(ls "$work"/dist/*.whl)
echo "wheel: $(basename "$whl")"
"$py" - "$whl" "$build/python/wheel-libs.txt" <<'EOF'
import re, sys, sysconfig, zipfile
whl, manifest = sys.argv[1:]
plat = re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())
tag = re.match(r".*-(py3-none-[^-]+)\.whl$", whl).group(1)
assert tag == "py3-none-" + plat, f"FAIL: tag {tag}, expected py3-none-{plat}"
z = zipfile.ZipFile(whl)
names = z.namelist()
wheel = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
assert "Root-Is-Purelib: false" in wheel and f"Tag: {tag}" in wheel, wheel
want = {ln.split("\t")[0] for ln in open(manifest) if ln.strip() and not ln.startswith("build\t")}
assert {"libcchan.so.0", "libcchan_coll.so.0", "libcchan_moe.so.0", "libcchan_fused_rmsnorm.so.0",
        "libcchan_nccl.so"} <= want, f"FAIL: the manifest lacks libraries: {want}"
for lib in want:
    assert "cchan/_libs/" + lib in names, f"FAIL: {lib} not in the wheel: {names}"
EOF

# 2. a fresh venv sees Debian's torch and pip (--system-site-packages); nothing from an index
"$py" -m venv --without-pip --system-site-packages "$work/venv"
env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 \
    "$work/venv/bin/python" -m pip install -q "$whl"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
libs="$site/cchan/_libs"
[ -f "$libs/libcchan.so.0" ] || { echo "FAIL: the wheel installed no $libs/libcchan.so.0"; exit 1; }

# 3. README's example, and what the process mapped, with nothing naming the build tree
clean=(env -u CCHAN_LIBRARY_PATH -u PYTHONPATH -u LD_LIBRARY_PATH -u LD_PRELOAD CUDA_VISIBLE_DEVICES=
    PYTHONDONTWRITEBYTECODE=1 PATH=/usr/bin:/bin)
"${clean[@]}" "$build/cchan-run" -n 2 --timeout 120 "$work/venv/bin/python" \
    "$src/python/examples/allreduce.py"
cat >"$work/maps.py" <<'EOF'
import ctypes, os, sys
import cchan._lib as l
l.core(), l.coll(), l.moe()
if os.path.exists(os.path.join(sys.argv[1], "libcchan_exec.so.0")):  # built where jansson is
    l.exec_()
# the libraries that need no loader (the fused kernel, the NCCL shim) find their siblings alone
ctypes.CDLL(os.path.join(sys.argv[1], "libcchan_fused_rmsnorm.so.0"))
ctypes.CDLL(os.path.join(sys.argv[1], "libcchan_nccl.so"))
maps = {ln.split()[-1] for ln in open("/proc/self/maps") if "libcchan" in ln}
print("library_paths:", l.library_paths())
print("mapped:", sorted(maps))
bad = [m for m in maps if not m.startswith(sys.argv[1] + "/")]
assert not bad, f"FAIL: cchan libraries mapped from outside the wheel: {bad}"
assert all(p.startswith(sys.argv[1] + "/") for p in l.library_paths().values()), l.library_paths()
EOF
"${clean[@]}" "$work/venv/bin/python" "$work/maps.py" "$libs"
cd /
rm -rf "$work"
echo "check-wheel: ok"
