"""The torch.distributed backend (cchan.distributed) keeps the deadline its process group was made
with: init_process_group(timeout=3 s), then ranks that do not meet in a collective must each raise
within that deadline and a margin, not wait for the library's own defaults (30 s of bootstrap,
ten minutes of device waits). Host backend, CPU tensors, 2 ranks under cchan-run:

    cchan-run -n 2 /usr/bin/python3 test/python/test_torch_timeout.py SCENARIO

SCENARIO (each rank stays alive until every rank is done, so that no wait ends early because a
peer exited):
  shape    every rank calls all_reduce, each with another shape, then barrier; the ranks that
           need more data wait on the device, the one that needs less returns and waits in the
           barrier (the old backend: it waited 30 s, the others ten minutes);
  absent   after a matching all_reduce, rank 1 calls all_reduce and rank 0 nothing;
  barrier  rank 0 calls barrier and the others nothing (a host-side wait);
  custom   CustomAllreduce over a gloo group made with the timeout takes it, and ranks calling
           it with different shapes (then the communicator's barrier) fail in time.
Exit 0 when every rank saw what it should, 77 (skip) where torch or its custom-backend support is
missing.
"""

import datetime
import os
import sys
import time
import traceback

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: needs torch ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)
if not dist.is_available() or not hasattr(dist.Backend, "register_backend") \
        or not hasattr(dist, "ProcessGroup"):
    print("SKIP: this torch has no torch.distributed custom backends "
          "(Backend.register_backend and a subclassable ProcessGroup)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import cchan  # noqa: E402
import cchan.distributed as cdist  # noqa: E402

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "shape"
SCENARIOS = ("shape", "absent", "barrier", "custom")
if SCENARIO not in SCENARIOS:
    print(f"scenario: expected one of {SCENARIOS}, got {SCENARIO!r}")
    sys.exit(2)
RANK = int(os.environ["CCHAN_RANK"])
SIZE = int(os.environ["CCHAN_WORLD_SIZE"])
DEADLINE_S = 3
# What a failure may take past the deadline: the bootstrap's ranks wait 1.5 deadlines for the
# root's report, and a loaded 2-core CI machine is slow. The defaults this guards against are
# 30 s (bootstrap) and 600 s (device waits).
LIMIT_S = 15
KEEP_S = 60  # past the old 30 s bootstrap wait, so that it shows as a failure, not as a hang
session = os.environ.get("CCHAN_BOOTSTRAP_SESSION", "x")
store = f"/tmp/cchan-pgtimeout-{session}-{os.getppid()}"
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAIL: {what}", flush=True)


def fails_in_time(what, fn):
    """fn() must raise, within LIMIT_S."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - which exception depends on where the wait ended
        took = time.monotonic() - t0
        print(f"[r{RANK}] {what} raised after {took:.1f} s: {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}", flush=True)
        expect(took < LIMIT_S, f"{what}: raised after {took:.1f} s, want < {LIMIT_S} s "
                               f"(deadline {DEADLINE_S} s)")
        return
    took = time.monotonic() - t0
    expect(False, f"{what}: returned after {took:.1f} s, want an exception within {LIMIT_S} s")


def done_path(r):
    return f"{store}.done{r}"


def finish():
    """Stays until every rank is done (at most KEEP_S), then leaves without tearing down: a
    communicator whose ranks parted in a collective cannot be destroyed collectively, and its
    destroy is not what this test measures."""
    print(f"[r{RANK}] test_torch_timeout {SCENARIO}: "
          f"{'ok' if not failures else f'{len(failures)} failures'}", flush=True)
    open(done_path(RANK), "w").close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < KEEP_S:
        if all(os.path.exists(done_path(r)) for r in range(SIZE)):
            break
        time.sleep(0.05)
    if RANK == 0:
        time.sleep(0.5)  # the others saw every done file too
        for p in [store] + [done_path(r) for r in range(SIZE)]:
            try:
                os.unlink(p)
            except OSError:
                pass
    sys.stdout.flush()
    os._exit(1 if failures else 0)


def check_deadline(what, ms):
    expect(ms == DEADLINE_S * 1000, f"{what}: {ms} ms, want the group's {DEADLINE_S * 1000} ms")


def collective_then_barrier(what, fn, barrier):
    """fn() then barrier(), as a job goes on to its next collective: the rank whose fn()
    returned must fail in the barrier, in time."""
    def both():
        fn()
        barrier()

    fails_in_time(f"{what}, then barrier", both)


name = cdist.register_backend(platform="host")
backend = "cpu:cchan" if cdist.device_backend_strings() else name
try:
    dist.init_process_group(backend, init_method=f"file://{store}", rank=RANK, world_size=SIZE,
                            timeout=datetime.timedelta(seconds=DEADLINE_S))
    PG = dist.distributed_c10d._get_default_group()
    check_deadline("the backend's communicator's deadline", PG.comm.timeout_ms)
    if SCENARIO == "shape":
        x = torch.ones(1024 * (RANK + 1))
        collective_then_barrier(f"all_reduce of {x.numel()} elements (the other ranks' differ)",
                                lambda: dist.all_reduce(x), dist.barrier)
    elif SCENARIO == "absent":
        x = torch.ones(4096)
        dist.all_reduce(x)  # every rank: the collectives are set up, the next call waits on data
        expect(bool((x == SIZE).all()), "the matching all_reduce")
        if RANK != 0:
            fails_in_time("all_reduce (rank 0 does not call it)", lambda: dist.all_reduce(x))
    elif SCENARIO == "barrier":
        if RANK == 0:
            fails_in_time("barrier (the other ranks do not call it)", dist.barrier)
    else:
        gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=DEADLINE_S))
        group_timeout_ms = getattr(cchan.comm, "group_timeout_ms", lambda g: None)
        check_deadline("group_timeout_ms of the gloo group", group_timeout_ms(gloo))
        check_deadline("group_timeout_ms of the cchan group", group_timeout_ms(PG))
        ar = cchan.CustomAllreduce(gloo, device="cpu")
        check_deadline("CustomAllreduce's deadline", ar.comm.timeout_ms if ar.comm else None)
        x = torch.ones(1024 * (RANK + 1))
        collective_then_barrier(f"CustomAllreduce.all_reduce of {x.numel()} elements (the other "
                                f"ranks' differ)", lambda: ar.all_reduce(x), ar.comm.barrier)
except Exception:  # noqa: BLE001
    expect(False, f"raised:\n{traceback.format_exc()}")
finish()
