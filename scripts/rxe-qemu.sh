#!/usr/bin/env bash
# Real RDMA tests without RDMA hardware: boots Debian's own kernel package in QEMU (TCG, no KVM
# needed) with a small initramfs built here, loads Soft-RoCE (rdma_rxe) on a dummy network device
# and runs the port-channel tests over the ib transport between two processes on the host backend
# (test/tcp/port_net.c: ops, many, several QPs, signals by RDMA WRITE, a peer that disappears,
# a put the NIC refuses, sides that disagree, and a functional-only benchmark). The guest has no network besides the dummy device.
#
#   scripts/rxe-qemu.sh BUILD_DIR [LOG]
#
# BUILD_DIR holds cchan-run, libcchan.so and test/tcp/port_net. Needs qemu-system-x86
# (qemu-system-x86_64), linux-image-amd64 (/boot/vmlinuz-* with rdma_rxe.ko in /lib/modules),
# busybox-static, cpio, kmod, iproute2 (ip, rdma) and ibverbs-providers (librxe); install-deps.sh
# installs them as optional packages. Exits 77 (skip) with the reason when one is missing or the
# guest cannot boot, 1 when a test failed, 0 when all passed. Environment: CCHAN_RXE_TIMEOUT
# (seconds for the whole guest run, default 330), CCHAN_RXE_TESTS (space-separated subset of
# ops many qps4 write gone badkey mismatch bench), CCHAN_RXE_KEEP=1 keeps the work directory.
set -uo pipefail

build=${1:?usage: rxe-qemu.sh BUILD_DIR [LOG]}
log=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
timeout_s=${CCHAN_RXE_TIMEOUT:-330}
tests=${CCHAN_RXE_TESTS:-ops many qps4 write gone badkey mismatch bench}

skip() {
    echo "SKIP rxe-qemu: $*"
    exit 77
}

# ---------------------------------------------------------------- prerequisites
build=$(cd "$build" && pwd) || skip "no build directory $1"
prog=$build/test/tcp/port_net
runner=$build/cchan-run
[ -x "$prog" ] && [ -x "$runner" ] || skip "build $prog and $runner first"
qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)"
command -v cpio >/dev/null || skip "cpio not installed"
command -v modprobe >/dev/null || skip "modprobe (kmod) not installed"
[ "$(uname -m)" = x86_64 ] || skip "the guest runs this machine's x86_64 binaries; this is $(uname -m)"
busybox=""
for b in /bin/busybox /usr/bin/busybox; do
    [ -x "$b" ] || continue
    case $(ldd "$b" 2>&1) in *"not a dynamic executable"*) busybox=$b && break ;; esac
done
[ -n "$busybox" ] || skip "no static busybox (apt-get install busybox-static)"
for t in ip rdma; do command -v $t >/dev/null || skip "$t (iproute2) not found"; done
provider=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$provider" ] && [ -e /etc/libibverbs.d/rxe.driver ] ||
    skip "the rxe provider of libibverbs is missing (apt-get install ibverbs-providers)"
kernel="" kver=""
for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V -r); do
    v=${k#/boot/vmlinuz-}
    if [ -r "$k" ] && [ -n "$(find /lib/modules/"$v" -name 'rdma_rxe.ko*' 2>/dev/null | head -1)" ]; then
        kernel=$k kver=$v
        break
    fi
done
[ -n "$kernel" ] || skip "no readable /boot/vmlinuz-* with rdma_rxe in /lib/modules (apt-get install linux-image-amd64)"

work=$(mktemp -d /tmp/cchan-rxe.XXXXXX)
[ "${CCHAN_RXE_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc/libibverbs.d,opt/cchan,lib/modules}

# ---------------------------------------------------------------- the initramfs
copy_with_libs() { # copies files and every shared library they need, at the same paths
    local f lib
    for f in "$@"; do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
        for lib in $(ldd "$f" 2>/dev/null | awk '/=>/ {print $3} /^\t\// {print $1}'); do
            [ -e "$root$lib" ] && continue
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done
    done
}
cp "$busybox" "$root/bin/busybox"
for app in sh mount insmod poweroff cat ls sleep env sed tr echo sync mkdir uname nproc dmesg tail; do
    ln -sf busybox "$root/bin/$app"
done
copy_with_libs "$(command -v ip)" "$(command -v rdma)" "$prog" "$runner" "$provider" \
    "$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)"
ln -sf "$(basename "$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)")" \
    "$root/usr/lib/x86_64-linux-gnu/libibverbs.so.1" 2>/dev/null || true
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
cp "$prog" "$root/opt/cchan/port_net"
cp "$runner" "$root/opt/cchan/cchan-run"
# The guest mounts a tmpfs on /tmp, which would hide libraries copied at their /tmp/... paths (a
# build tree under /tmp): the guest also looks in /opt/cchan/lib, where this build's libraries go.
mkdir -p "$root/opt/cchan/lib"
for lib in $(ldd "$prog" "$runner" 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $lib in /tmp/*) cp -L "$lib" "$root/opt/cchan/lib/" ;; esac
done
: >"$root/modules.order"
while read -r cmd path _; do
    [ "$cmd" = insmod ] || continue
    mkdir -p "$root$(dirname "$path")"
    case $path in
    *.ko) cp "$path" "$root$path" ;;
    *.ko.xz) xz -dc "$path" >"$root${path%.xz}" && path=${path%.xz} ;;
    *.ko.zst) zstd -qdc "$path" >"$root${path%.zst}" && path=${path%.zst} ;;
    esac
    grep -qx "$path" "$root/modules.order" || echo "$path" >>"$root/modules.order"
done < <(
    # rxe computes its ICRC with the kernel's "crc32" hash, a soft dependency modprobe does not list
    for m in dummy crc32_generic rdma_rxe; do modprobe -S "$kver" --show-depends "$m" 2>/dev/null; done
)
[ -s "$root/modules.order" ] || skip "modprobe found no rdma_rxe modules for $kver"
# Soft-RoCE under emulation moves a few MB/s: puts of at most 4 MiB (four 1 MiB RDMA WRITEs), the
# variants at most 2 MiB + 1 (three WRITEs, spread over the QPs), the benchmark small samples.
declare -A spec=([ops]=ops,CCHAN_TEST_NET_MAX_BYTES=4194304 [many]=many
                 [qps4]=ops,CCHAN_IB_QPS=4,CCHAN_TEST_NET_MAX_BYTES=2097153
                 [write]=ops,CCHAN_IB_SIGNAL=write,CCHAN_TEST_NET_MAX_BYTES=2097153
                 [gone]=gone [badkey]=badkey [mismatch]=mismatch [bench]=bench,CCHAN_TEST_BENCH_ITERS=20,CCHAN_TEST_BENCH_MB=1)
for t in $tests; do echo "$t=${spec[$t]:?unknown test $t}"; done >"$root/tests"
cp "$here/test/ib/guest-init.sh" "$root/init"
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"

# ---------------------------------------------------------------- boot
echo "rxe-qemu: kernel $kver, initramfs $(du -h "$work/initramfs.gz" | cut -f1), tests: $tests"
out=$work/console.log
t0=$(date +%s)
timeout --foreground -k 5 "$timeout_s" "$qemu" -accel tcg -cpu max -smp 2 -m 1536 -nographic \
    -no-reboot -nic none -kernel "$kernel" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3" </dev/null >"$out" 2>&1
qrc=$?
t1=$(date +%s)
tr -d '\r' <"$out" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' >"$out.txt" # no terminal escapes
[ -n "$log" ] && cp "$out.txt" "$log"
grep -v '^RXE-' "$out.txt" | grep -E 'rxe-guest|port_net|ib |SKIP|rank [0-9]|check failed|returned|ok$|^  |^#' | head -80
echo "rxe-qemu: guest ran $((t1 - t0)) s (qemu exit $qrc)"
if ! grep -q '^RXE-DONE' "$out.txt"; then
    tail -30 "$out.txt"
    if grep -q '^RXE-TEST' "$out.txt"; then
        echo "rxe-qemu: FAILED: the guest did not finish within ${timeout_s} s"
        exit 1
    fi
    skip "the guest did not boot to the tests within ${timeout_s} s (qemu exit $qrc; console above)"
fi
grep -q '^RXE-SETUP-FAILED' "$out.txt" && { tail -30 "$out.txt"; skip "Soft-RoCE setup failed in the guest (console above)"; }
pass=0 fail=0 skipped=0
while read -r _ name rc _; do
    case ${rc#rc=} in
    0) pass=$((pass + 1)); echo "rxe-qemu: PASS $name" ;;
    77) skipped=$((skipped + 1)); echo "rxe-qemu: SKIP $name" ;;
    *) fail=$((fail + 1)); echo "rxe-qemu: FAIL $name (${rc})" ;;
    esac
done < <(grep '^RXE-TEST' "$out.txt")
echo "rxe-qemu: $pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ] || exit 1
exit 0
