"""cchan as a torch.distributed backend (cchan.distributed) at N ranks under cchan-run, on CPU
tensors (the host backend): each collective through torch.distributed against a reference
computed from every rank's input, which path ran (cchan or the gloo fallback), and a subgroup.

    cchan-run -n 2 /usr/bin/python3 test/python/test_torch_backend.py

Exit 0 when every check passed on every rank, 77 (skip) where torch or its custom-backend
support is missing.
"""

import os
import sys
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

RANK = int(os.environ["CCHAN_RANK"])
SIZE = int(os.environ["CCHAN_WORLD_SIZE"])
session = os.environ.get("CCHAN_BOOTSTRAP_SESSION", "x")
store = f"/tmp/cchan-pgtest-{session}-{os.getppid()}"

name = cdist.register_backend(platform="host")
# torch 2.x takes a device-mapped string; 1.13 the plain name (it serves every device).
backend = "cpu:cchan" if cdist.device_backend_strings() else name
dist.init_process_group(backend, init_method=f"file://{store}", rank=RANK, world_size=SIZE)
PG = dist.distributed_c10d._get_default_group()
failures = []
checks = [0]


def expect(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAIL: {what}", flush=True)


def values(seed, rank, n, dtype):
    """Small multiples of a power of two: sums over 8 ranks are exact in every dtype."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (torch.randint(-16, 17, (n,), generator=g).double() / 2).to(dtype)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def on_cchan(fn, want=True):
    """fn() ran on cchan (want=True) or on the gloo fallback (want=False)."""
    before = PG.cchan_calls
    fn()
    return (PG.cchan_calls > before) == want


def case_backend():
    expect(isinstance(PG, cdist.ProcessGroupCchan), f"default group is {type(PG).__name__}")
    expect(dist.get_backend() in ("cchan", backend), f"get_backend: {dist.get_backend()}")
    expect(PG.comm.platform == "host", f"platform {PG.comm.platform}")


def case_all_reduce():
    for dt in DTYPES:
        for n in (8, 1000, 65536):
            x = values(1, RANK, n, dt)
            want = sum(values(1, r, n, dt).double() for r in range(SIZE)).to(dt)
            expect(on_cchan(lambda: dist.all_reduce(x)), f"all_reduce {dt} {n} on cchan")
            expect(torch.equal(x, want), f"all_reduce {dt} {n}")
    x = values(2, RANK, 64, torch.float32)
    want = sum(values(2, r, 64, torch.float32) for r in range(SIZE)) / SIZE
    if hasattr(dist.ReduceOp, "AVG"):
        try:
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            expect(torch.allclose(x, want), "all_reduce AVG")
        except (RuntimeError, ValueError) as e:  # gloo's own AVG support varies; cchan took it
            failures.append(f"all_reduce AVG raised {e}")
    # what cchan has no path for: int64, MAX
    x = torch.arange(10, dtype=torch.int64) + RANK
    expect(on_cchan(lambda: dist.all_reduce(x), want=False), "int64 all_reduce on gloo")
    expect(torch.equal(x, SIZE * torch.arange(10) + SIZE * (SIZE - 1) // 2), "int64 all_reduce")
    x = torch.full((4,), float(RANK))
    expect(on_cchan(lambda: dist.all_reduce(x, op=dist.ReduceOp.MAX), want=False), "MAX on gloo")
    expect(bool((x == SIZE - 1).all()), "all_reduce MAX")


def case_all_gather():
    for dt in DTYPES:
        x = values(3, RANK, 300, dt)
        outs = [torch.empty_like(x) for _ in range(SIZE)]
        expect(on_cchan(lambda: dist.all_gather(outs, x)), f"all_gather {dt} on cchan")
        expect(all(torch.equal(outs[r], values(3, r, 300, dt)) for r in range(SIZE)),
               f"all_gather {dt}")
        out = torch.empty((SIZE, 300), dtype=dt)
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        expect(on_cchan(lambda: fn(out, x)), f"all_gather_into_tensor {dt} on cchan")
        expect(all(torch.equal(out[r], values(3, r, 300, dt)) for r in range(SIZE)),
               f"all_gather_into_tensor {dt}")


def case_reduce_scatter():
    for dt in DTYPES:
        n = 128
        ins = [values(4, RANK, SIZE * n, dt)[r * n:(r + 1) * n].clone() for r in range(SIZE)]
        full = sum(values(4, r, SIZE * n, dt).double() for r in range(SIZE)).to(dt)
        want = full[RANK * n:(RANK + 1) * n]
        out = torch.empty(n, dtype=dt)
        expect(on_cchan(lambda: dist.reduce_scatter(out, ins)), f"reduce_scatter {dt} on cchan")
        expect(torch.equal(out, want), f"reduce_scatter {dt}")
        out2 = torch.empty(n, dtype=dt)
        fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        x = values(4, RANK, SIZE * n, dt)
        expect(on_cchan(lambda: fn(out2, x)), f"reduce_scatter_tensor {dt} on cchan")
        expect(torch.equal(out2, want), f"reduce_scatter_tensor {dt}")


def case_plans():
    """all_to_all_single and broadcast: on cchan where a loaded plan serves them, else gloo."""
    plans = cchan.plan_available()
    if plans:
        PG.comm.load_plans(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "plans"))
    else:
        print(f"[r{RANK}] plans: not loaded ({cchan.plan_unavailable_reason()}); gloo runs "
              f"all_to_all_single and broadcast", flush=True)
    n = 1024
    x = values(5, RANK, SIZE * n, torch.float32)
    y = torch.empty_like(x)
    expect(on_cchan(lambda: dist.all_to_all_single(y, x), want=plans),
           f"all_to_all_single on {'cchan' if plans else 'gloo'}")
    want = torch.cat([values(5, r, SIZE * n, torch.float32)[RANK * n:(RANK + 1) * n]
                      for r in range(SIZE)])
    expect(torch.equal(y, want), "all_to_all_single")
    # uneven splits: gloo
    ins = [1 + r for r in range(SIZE)]
    outs = [1 + RANK] * SIZE
    x = torch.full((sum(ins),), float(RANK))
    y = torch.empty(sum(outs))
    expect(on_cchan(lambda: dist.all_to_all_single(y, x, outs, ins), want=False),
           "uneven all_to_all_single on gloo")
    expect(torch.equal(y, torch.cat([torch.full((1 + RANK,), float(r)) for r in range(SIZE)])),
           "uneven all_to_all_single")
    root = 0  # the shipped broadcast plans have root 0
    t = values(6, RANK, 4096, torch.float32)
    expect(on_cchan(lambda: dist.broadcast(t, src=root), want=plans),
           f"broadcast on {'cchan' if plans else 'gloo'}")
    expect(torch.equal(t, values(6, root, 4096, torch.float32)), "broadcast")


def case_fallback():
    dist.barrier()
    if SIZE >= 2 and RANK < 2:
        t = torch.arange(5, dtype=torch.int32) if RANK == 0 else torch.zeros(5, dtype=torch.int32)
        if RANK == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
            expect(torch.equal(t, torch.arange(5, dtype=torch.int32)), "send/recv through gloo")
    x = torch.full((3,), float(RANK))
    gl = [torch.empty(3) for _ in range(SIZE)] if RANK == 0 else None
    dist.gather(x, gl, dst=0)
    if RANK == 0:
        expect(all(bool((gl[r] == r).all()) for r in range(SIZE)), "gather through gloo")
    dist.barrier()


def case_subgroup():
    ranks = list(range(SIZE // 2, SIZE)) if SIZE > 2 else [0, 1]
    g = dist.new_group(ranks, backend=backend)
    if RANK in ranks:
        x = torch.full((16,), float(RANK))
        dist.all_reduce(x, group=g)
        expect(bool((x == sum(ranks)).all()), f"all_reduce over subgroup {ranks}")


CASES = [case_backend, case_all_reduce, case_all_gather, case_reduce_scatter, case_plans,
         case_fallback, case_subgroup]
for case in CASES:
    before = len(failures)
    try:
        case()
    except Exception:  # noqa: BLE001
        failures.append(f"{case.__name__}: {traceback.format_exc()}")
        print(f"[r{RANK}] FAIL: {case.__name__} raised:\n{traceback.format_exc()}", flush=True)
    if RANK == 0:
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {case.__name__[5:]}", flush=True)
    dist.barrier()

v = torch.tensor([len(failures)], dtype=torch.int64)
dist.all_reduce(v)
if RANK == 0:
    try:
        os.unlink(store)
    except OSError:
        pass
    print(f"test_torch_backend ({backend}, {SIZE} ranks): {checks[0]} checks on rank 0, "
          f"{int(v)} failures over all ranks")
PG.close()
dist.destroy_process_group()
sys.exit(1 if int(v) else 0)
