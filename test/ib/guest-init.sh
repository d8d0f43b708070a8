#!/bin/sh
# /init of the Soft-RoCE guest that scripts/rxe-qemu.sh boots: loads rdma_rxe, puts an rxe device
# on a dummy network device (the guest has no other network), runs the port-channel tests of
# test/tcp/port_net.c over the ib transport between two processes, prints one result line per test
# on the serial console and powers off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/opt/cchan/lib:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp && mount -t tmpfs tmpfs /tmp
echo "rxe-guest: kernel $(uname -r), $(nproc) CPUs"

finish() {
    echo "RXE-DONE"
    sync
    poweroff -f 2>/dev/null
    echo o >/proc/sysrq-trigger
    sleep 10
}

setup() {
    for m in $(cat /modules.order); do
        insmod "$m" || { echo "rxe-guest: insmod $m failed"; return 1; }
    done
    ip link set lo up &&
        { ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; } &&
        ip addr add 10.78.0.1/24 dev dummy0 &&
        ip link set dummy0 up &&
        rdma link add rxe0 type rxe netdev dummy0 || return 1
    rdma link show
    ls /sys/class/infiniband /dev/infiniband
}
if ! setup; then
    echo "RXE-SETUP-FAILED"
    cat /proc/modules
    ls /sys/class/net /sys/class/infiniband 2>&1
    dmesg | tail -20
    finish
fi

run() { # name, env assignments..., then the scenario
    name=$1
    shift
    t0=$(cat /proc/uptime)
    env "$@" CCHAN_DEBUG=${CCHAN_DEBUG:-WARN} /opt/cchan/cchan-run -n 2 --timeout 150 /opt/cchan/port_net ib "$scenario"
    rc=$?
    t1=$(cat /proc/uptime)
    echo "RXE-TEST $name rc=$rc start=${t0%% *} end=${t1%% *}"
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then dmesg | tail -15; fi
}
for spec in $(cat /tests); do
    name=${spec%%=*}
    rest=${spec#*=}
    scenario=${rest%%,*}
    vars=$(echo "$rest" | sed -n 's/^[^,]*,//p' | tr ',' ' ')
    run "$name" $vars
done
finish
