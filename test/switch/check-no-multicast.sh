#!/usr/bin/env bash
# Safety on shared GPU machines (docs/architecture.md): no test, bench, example or device script
# of this repository may create a multicast object. This checks the sources:
#   - nothing outside src/host/switch.c names a cuMulticast* driver call;
#   - the opt-in (CCHAN_SWITCH_MULTICAST, CCHAN_NVLS set to 1) appears only in test/switch/sw_ops.c,
#     which uses it to check the refusals on a host-platform communicator with NCCL_NVLS_ENABLE=0;
#   - every scripts/device-*.sh exports NCCL_NVLS_ENABLE=0, under which cchan and NCCL refuse
#     multicast whatever else is set.
#
#   check-no-multicast.sh SOURCE_DIR
set -uo pipefail
root=$1
cd "$root" || exit 1
fail=0
dirs=(test bench kernels scripts examples)
present=()
for d in "${dirs[@]}"; do [ -d "$d" ] && present+=("$d"); done
self=test/switch/check-no-multicast.sh

hits=$(grep -rlE 'cuMulticast|cudaMulticast' "${present[@]}" src 2>/dev/null |
    grep -vxF -e src/host/switch.c -e "$self" -e test/switch/check-multimem-ptx.sh)
if [ -n "$hits" ]; then
    echo "FAIL: multicast driver calls outside src/host/switch.c:"
    echo "$hits" | sed 's/^/  /'
    fail=1
fi

optin=$(grep -rlE 'CCHAN_SWITCH_MULTICAST|CCHAN_NVLS[^_A-Za-z]*(=|", *")1' "${present[@]}" 2>/dev/null |
    grep -vxF -e test/switch/sw_ops.c -e "$self")
if [ -n "$optin" ]; then
    echo "FAIL: the multicast opt-in appears in:"
    echo "$optin" | sed 's/^/  /'
    fail=1
fi
if ! grep -q 'setenv("NCCL_NVLS_ENABLE", "0", 1);' test/switch/sw_ops.c ||
    ! grep -q 'CCHAN_PLATFORM_HOST' test/memory/mem_test.h; then
    echo "FAIL: test/switch/sw_ops.c must keep NCCL_NVLS_ENABLE=0 and the host platform"
    fail=1
fi

for s in scripts/device-*.sh; do
    [ -f "$s" ] || continue
    if ! grep -qE '^[[:space:]]*export NCCL_NVLS_ENABLE=0' "$s"; then
        echo "FAIL: $s must 'export NCCL_NVLS_ENABLE=0' (cchan and NCCL then refuse multicast)"
        fail=1
    fi
done
[ $fail = 0 ] && echo "sw_no_multicast: PASS (no multicast creation in ${present[*]})"
exit $fail
