#!/usr/bin/env bash
# Installs what cchan's build and tests need on Debian 12 (bookworm), as root or through sudo.
# Does nothing, quickly, when everything is present (one dpkg-query call).
#
#   required  cmake gcc g++ clang make pkg-config libcmocka-dev libibverbs-dev libnuma-dev
#             libjansson-dev       the plan executor (cchan_exec) reads plans with jansson
#   optional  libclang-rt-dev      libFuzzer for the fuzz tests (else a deterministic driver runs)
#             hipcc                HIP compile checks (else hygiene_hipcc_* are skipped)
#             python3-matplotlib   benchmark plots
#             python3-torch python3-venv python3-pip
#                                  the Python layer's tests (test/python; python3-torch is large:
#                                  libtorch pulls in OpenCV and FFmpeg libraries, about 180 MB to
#                                  download); without them those tests are skipped
#             qemu-system-x86 busybox-static cpio kmod ibverbs-providers iproute2 linux-image-amd64
#                                  the Soft-RoCE (rxe) tests in a QEMU guest (test rxe_qemu)
# The CUDA toolkit is not installed here (NVIDIA's repository, several GiB): with nvcc at
# /usr/local/cuda the CUDA parts build, without it they are skipped and say so.
#
# CCHAN_SKIP_DEPS=1 skips this script; CCHAN_DEPS_OPTIONAL=0 installs only the required packages.
set -euo pipefail

if [ "${CCHAN_SKIP_DEPS:-0}" = 1 ]; then
    echo "cchan deps: skipped (CCHAN_SKIP_DEPS=1)"
    exit 0
fi

required=(cmake gcc g++ clang make pkg-config libcmocka-dev libibverbs-dev libnuma-dev libjansson-dev)
optional=()
if [ "${CCHAN_DEPS_OPTIONAL:-1}" != 0 ]; then
    optional=(libclang-rt-dev hipcc python3-matplotlib python3-torch python3-venv python3-pip
        qemu-system-x86 busybox-static cpio kmod ibverbs-providers iproute2
        linux-image-amd64) # last: a kernel's postinst (initramfs) is the likeliest to fail
fi

# Packages not installed, judged by dpkg (or, for tools installed some other way, by the tool).
missing_of() {
    local p status
    for p in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] && continue
        case $p in
        hipcc) command -v hipcc >/dev/null 2>&1 && continue ;;
        python3-matplotlib) python3 -c 'import matplotlib' >/dev/null 2>&1 && continue ;;
        esac
        echo "$p"
    done
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    for t in cmake gcc g++ make; do
        if ! command -v "$t" >/dev/null 2>&1; then
            echo "cchan deps: not a Debian system (no apt-get) and '$t' is missing;" \
                "install: ${required[*]} (and optionally ${optional[*]}) by hand" >&2
            exit 1
        fi
    done
    echo "cchan deps: not a Debian system; not checking packages (need: ${required[*]})"
    exit 0
fi

mapfile -t need_required < <(missing_of "${required[@]}")
mapfile -t need_optional < <(missing_of "${optional[@]}")
if [ ${#need_required[@]} -eq 0 ] && [ ${#need_optional[@]} -eq 0 ]; then
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "cchan deps: need root or sudo to install: ${need_required[*]} ${need_optional[*]}" >&2
        echo "cchan deps: run as root: apt-get install ${need_required[*]} ${need_optional[*]}" >&2
        [ ${#need_required[@]} -eq 0 ] && exit 0
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/cchan-apt.XXXXXX.log)
# Wait for a dpkg lock held by unattended-upgrades on a freshly booted machine.
# Short network timeouts: on a machine without a reachable registry (GPU machines) the update
# fails in seconds instead of hanging in connection retries.
apt=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3
    -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20)

echo "cchan deps: missing: ${need_required[*]} ${need_optional[*]}"
echo "cchan deps: apt-get update"
if ! timeout 600 "${apt[@]}" update -qq >"$log" 2>&1; then
    tail -20 "$log" >&2
    echo "cchan deps: 'apt-get update' failed (log above, full log $log)." >&2
    echo "cchan deps: install by hand: apt-get install ${need_required[*]} ${need_optional[*]}" >&2
    exit 1
fi

install() {
    echo "cchan deps: apt-get install -y --no-install-recommends $*"
    "${apt[@]}" install -y -qq --no-install-recommends "$@" >>"$log" 2>&1
}

if [ ${#need_required[@]} -gt 0 ] && ! install "${need_required[@]}"; then
    tail -20 "$log" >&2
    echo "cchan deps: installing the required packages failed (log above, full log $log):" \
        "${need_required[*]}" >&2
    exit 1
fi
# Optional packages one by one, so that one unavailable package does not block the others.
keep_log=0
for p in "${need_optional[@]}"; do
    if ! install "$p"; then
        keep_log=1
        tail -5 "$log" >&2
        echo "cchan deps: WARNING: optional package '$p' did not install; the tests that need it" \
            "are skipped or use a fallback (full log $log)" >&2
    fi
done
echo "cchan deps: done"
[ "$keep_log" = 1 ] || rm -f "$log"
