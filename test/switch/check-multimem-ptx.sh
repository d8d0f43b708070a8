#!/usr/bin/env bash
# The multicast path of the switch channel compiles to multimem instructions for sm_90 (and to none
# for sm_80, where the header must leave them out), and ptxas accepts them. Nothing is run.
#
#   check-multimem-ptx.sh NVCC INCLUDE_DIR SOURCE.cu WORK_DIR
set -uo pipefail
nvcc=$1 include=$2 src=$3 work=$4
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
    echo "SKIP sw_multimem_ptx: nvcc not found (a build without CUDA)"
    exit 77
fi
mkdir -p "$work"
fail=0
"$nvcc" -std=c++17 -arch=sm_90 -I"$include" -ptx "$src" -o "$work/sm90.ptx" || exit 1
"$nvcc" -std=c++17 -arch=sm_80 -I"$include" -ptx "$src" -o "$work/sm80.ptx" || exit 1
# ptxas must take the sm_90 PTX (wrong qualifiers would only show up here).
"$nvcc" -std=c++17 -arch=sm_90 -I"$include" -cubin "$src" -o "$work/sm90.cubin" || exit 1
want=(
    'multimem.ld_reduce.relaxed.sys.global.add.v4.f32'
    'multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2'
    'multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2'
    'multimem.ld_reduce.relaxed.sys.global.add.s32'
    'multimem.ld_reduce.relaxed.sys.global.add.u32'
    'multimem.st.relaxed.sys.global.v4.f32'
)
for w in "${want[@]}"; do
    c=$(grep -cF "$w" "$work/sm90.ptx")
    if [ "$c" -eq 0 ]; then
        echo "FAIL: sm_90 PTX has no '$w'"
        fail=1
    else
        echo "ok: sm_90 PTX: $c x $w"
    fi
done
# Broadcast of all five types stores through multimem.st: five kernels' worth.
st=$(grep -cF 'multimem.st.' "$work/sm90.ptx")
[ "$st" -ge 5 ] || { echo "FAIL: $st multimem.st in sm_90 PTX, want one per broadcast type (5)"; fail=1; }
if grep -qE "^[[:space:]]*multimem\." "$work/sm80.ptx"; then
    echo "FAIL: sm_80 PTX contains multimem instructions (the header must guard them):"
    grep -m3 -E "^[[:space:]]*multimem\." "$work/sm80.ptx"
    fail=1
else
    echo "ok: sm_80 PTX has no multimem instruction"
fi
[ $fail = 0 ] && echo "sw_multimem_ptx: PASS"
exit $fail
