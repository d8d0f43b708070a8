#!/bin/sh
# Runs a two-rank program between two network namespaces joined by a veth pair, as two "hosts":
# each namespace has its own hostname (UTS namespace) and only its own address (10.77.0.1 and
# 10.77.0.2/24), and nothing outside them is reachable. The ranks find each other from a launcher's
# environment, the way a multi-node job would:
#
#   netns-test.sh PROGRAM LAUNCHER ARGS...     LAUNCHER: torchrun | ompi | slurm
#
#   torchrun  MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
#   ompi      OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} + CCHAN_BOOTSTRAP_ROOT
#   slurm     SLURM_{PROCID,NTASKS,LOCALID,NTASKS_PER_NODE,JOB_ID} + CCHAN_BOOTSTRAP_ROOT
#
# Each rank runs `PROGRAM ARGS...`. Exits 77 (skip) with the reason when this machine cannot
# create the namespaces (unprivileged user namespaces disabled, no veth, no iproute2).
set -u
prog=$1 launcher=$2
shift 2

skip() {
    echo "SKIP netns-test: $*"
    exit 77
}
command -v unshare >/dev/null 2>&1 || skip "unshare (util-linux) not found"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) not found"
command -v nsenter >/dev/null 2>&1 || skip "nsenter (util-linux) not found"
why=$(unshare -rnu true 2>&1) || skip "cannot create user+network namespaces: $why"
why=$(unshare -rn sh -c 'ip link add va type veth peer name vb' 2>&1) ||
    skip "cannot create a veth pair in a namespace: $why"

dir=$(mktemp -d /tmp/cchan-netns.XXXXXX)
trap 'rm -rf "$dir"' EXIT

# The environment of rank $1 for the chosen launcher; the root (rank 0) is 10.77.0.1.
launch_env() {
    case $launcher in
    torchrun) echo "MASTER_ADDR=10.77.0.1 MASTER_PORT=29400 RANK=$1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 TORCHELASTIC_RUN_ID=netns" ;;
    ompi) echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 CCHAN_BOOTSTRAP_ROOT=10.77.0.1:29500" ;;
    slurm) echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 SLURM_JOB_ID=4242 SLURM_STEP_ID=0 CCHAN_BOOTSTRAP_ROOT=10.77.0.1:29600" ;;
    *) echo "unknown launcher $launcher" >&2; exit 2 ;;
    esac
}
env0="$(launch_env 0) CCHAN_TEST_EXPECT_REMOTE=1" env1="$(launch_env 1) CCHAN_TEST_EXPECT_REMOTE=1"

# Host A: a user, network and UTS namespace. Host B: network and UTS namespaces inside it, started
# first and waiting until A has moved its end of the veth pair in and configured it.
unshare -rnu sh -s -- "$prog" "$dir" "$env0" "$env1" "$@" <<'EOF'
prog=$1 dir=$2 env0=$3 env1=$4
shift 4
hostname cchan-node-a
ip link set lo up
unshare -nu sh -c '
    hostname cchan-node-b
    while [ ! -e "$1/go" ]; do sleep 0.05; done
    shift
    exec "$@"' sh "$dir" env $env1 "$prog" "$@" >"$dir/rank1.log" 2>&1 &
b=$!
sleep 0.2
ip link add va type veth peer name vb &&
    ip link set vb netns "$b" &&
    ip addr add 10.77.0.1/24 dev va && ip link set va up &&
    nsenter -t "$b" -n ip link set lo up &&
    nsenter -t "$b" -n ip addr add 10.77.0.2/24 dev vb &&
    nsenter -t "$b" -n ip link set vb up || { echo "netns-test: veth setup failed"; kill "$b"; exit 1; }
touch "$dir/go"
env $env0 "$prog" "$@" >"$dir/rank0.log" 2>&1
r0=$?
wait "$b"
r1=$?
sed 's/^/[node-a rank 0] /' "$dir/rank0.log"
sed 's/^/[node-b rank 1] /' "$dir/rank1.log"
echo "netns-test: rank 0 exited $r0, rank 1 exited $r1"
[ $r0 -eq 0 ] && [ $r1 -eq 0 ]
EOF
