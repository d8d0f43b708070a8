# Sourced by the scripts/device-*.sh that start ranks with cchan-run: NRANKS is one rank per visible
# GPU (2 to 8) unless the caller set it, so that the same scripts serve the 2-, 4- and 8-GPU
# machines.
if [ -z "${NRANKS:-}" ]; then
    NRANKS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${NRANKS:-0}" -ge 2 ] 2>/dev/null || NRANKS=2
    [ "$NRANKS" -le 8 ] || NRANKS=8
fi
export NRANKS
