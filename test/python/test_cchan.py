"""The Python layer (python/cchan) at N ranks under cchan-run: communicators (from the environment,
a gloo process group and a unique id), cchan memory (empty, peer tensors and pointers, register),
collectives and CustomAllreduce, MoE low-latency (DeepEP's interface) and high-throughput dispatch
and combine, each against a Python reference, and the bad-input cases (an exception naming the
argument). With --device cuda also CUDA-graph capture of an all-reduce and of a dispatch+combine,
replayed.

    cchan-run -n 2 /usr/bin/python3 test/python/test_cchan.py [--device cpu|cuda]

Exit 0 when every case passed on every rank, 77 (skip) without torch or, for cuda, a GPU.
"""

import argparse
import json
import os
import sys
import traceback

try:
    import torch
except ImportError as e:
    print(f"SKIP: the Python tests need torch ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import cchan  # noqa: E402
from cchan import moe as cmoe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
ap.add_argument("--only", default="", help="comma-separated case names")
args = ap.parse_args()

if args.device == "cuda":
    if not torch.cuda.is_available():
        print("SKIP: --device cuda, but torch sees no GPU")
        sys.exit(77)
    from cchan.comm import cuda_built
    if not cuda_built():
        print("SKIP: --device cuda, but libcchan was built without CUDA")
        sys.exit(77)

import torch.distributed as dist  # noqa: E402

RANK = int(os.environ["CCHAN_RANK"])
SIZE = int(os.environ["CCHAN_WORLD_SIZE"])
session = os.environ.get("CCHAN_BOOTSTRAP_SESSION", "x")
store = f"/tmp/cchan-pytest-{session}-{os.getppid()}"
dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=SIZE)

PLATFORM = "cuda" if args.device == "cuda" else "host"
# Blocks per MoE kernel (0: the library's default, sized for the SMs this context may use).
MOE_BLOCKS = int(os.environ.get("CCHAN_TEST_MOE_BLOCKS", "0"))
comm = cchan.Comm.from_process_group(platform=PLATFORM)
DEV = comm.device
failures = []
checks = [0]


def expect(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAIL: {what}", flush=True)


def raises(exc, part, fn, *a, **kw):
    """fn(*a, **kw) must raise exc with `part` in its message (the argument's name)."""
    checks[0] += 1
    try:
        fn(*a, **kw)
    except exc as e:
        if part not in str(e):
            failures.append(f"{getattr(fn, '__name__', fn)}: {type(e).__name__} '{e}' lacks "
                            f"'{part}'")
            print(f"[r{RANK}] FAIL: message lacks '{part}': {e}", flush=True)
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{getattr(fn, '__name__', fn)}: raised {type(e).__name__}: {e}, want "
                        f"{exc.__name__}")
        print(f"[r{RANK}] FAIL: {type(e).__name__}: {e} (want {exc.__name__} with '{part}')",
              flush=True)
        return
    failures.append(f"{getattr(fn, '__name__', fn)}: did not raise {exc.__name__} ({part})")
    print(f"[r{RANK}] FAIL: no {exc.__name__} with '{part}'", flush=True)


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize(DEV)


def values(seed, rank, n, dtype):
    """Rank `rank`'s input: small multiples of a power of two, so sums over 8 ranks are exact in
    every dtype (any wrong, missing or doubled contribution shows)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.float32:
        v = (torch.randint(-1024, 1025, (n,), generator=g).double() / 8)
    elif dtype == torch.float16:
        v = (torch.randint(-64, 65, (n,), generator=g).double() / 4)
    else:
        v = (torch.randint(-16, 17, (n,), generator=g).double() / 2)
    return v


# ------------------------------------------------------------------ communicator


def case_comm():
    expect(comm.rank == RANK and comm.size == SIZE, f"rank/size {comm.rank}/{comm.size}")
    expect(comm.local_size == SIZE and 0 <= comm.local_rank < SIZE, "local rank/size")
    expect(comm.device.type == args.device, f"device {comm.device}")
    if DEV.type == "cuda":
        # nothing here chose a GPU: the launcher's local rank's, made torch's current device
        want = int(os.environ["CCHAN_LOCAL_RANK"]) % torch.cuda.device_count()
        expect(DEV.index == want and torch.cuda.current_device() == want,
               f"from_process_group: {DEV}, torch's current device "
               f"{torch.cuda.current_device()}, expected the local rank's cuda:{want}")
    # from the launcher's environment (cchan-run's variables)
    with cchan.Comm(platform=PLATFORM) as c2:
        expect(c2.rank == RANK and c2.size == SIZE, "Comm() from env: rank/size")
        # every constructor chooses the same GPU in a process (the tensors below are on DEV)
        expect(c2.device == DEV, f"Comm() from env: device {c2.device}, from_process_group's "
               f"{DEV}")
        y = c2.all_reduce(torch.ones(5, device=DEV))
        expect(bool((y == SIZE).all()), "Comm() from env: all_reduce")
    expect(c2.closed, "closed after the with block")
    raises(cchan.ClosedError, "comm", c2.all_reduce, torch.ones(5, device=DEV))
    raises(cchan.ClosedError, "comm", c2.barrier)
    # from a unique id, broadcast by the test itself
    t = torch.zeros(128, dtype=torch.uint8)
    if RANK == 0:
        t.copy_(torch.tensor(list(cchan.unique_id()), dtype=torch.uint8))
    dist.broadcast(t, 0)
    c3 = cchan.Comm.from_unique_id(bytes(t.tolist()), RANK, SIZE, platform=PLATFORM)
    expect(c3.rank == RANK and c3.size == SIZE, "from_unique_id: rank/size")
    expect(c3.device == DEV, f"from_unique_id: device {c3.device}, from_process_group's {DEV}")
    c3.barrier()
    c3.close()
    raises(ValueError, "uid", cchan.Comm.from_unique_id, b"short", 0, 2)
    raises(ValueError, "rank", cchan.Comm.from_unique_id, bytes(128), 5, 2)
    raises(ValueError, "platform", cchan.Comm, platform="tpu")


# ------------------------------------------------------------------ memory


def case_memory():
    t = cchan.empty((3, 5), torch.float32, comm)
    expect(t.shape == (3, 5) and t.dtype == torch.float32 and t.device == DEV, "empty: shape")
    expect(bool((t == 0).all()), "empty: zero-filled")
    t.copy_(torch.arange(15, dtype=torch.float32).view(3, 5) + 100 * RANK)
    sync()
    comm.barrier()
    ptrs = cchan.peer_pointers(t)
    expect(ptrs.dtype == torch.int64 and ptrs.shape == (SIZE,) and ptrs.device == DEV,
           "peer_pointers: int64 [size] on the device")
    expect(int(ptrs[RANK]) == t.data_ptr(), "peer_pointers: own entry is t")
    for r in range(SIZE):
        p = cchan.peer_tensor(t, r)
        want = torch.arange(15, dtype=torch.float32).view(3, 5) + 100 * r
        expect(torch.equal(p.cpu(), want), f"peer_tensor({r}) reads rank {r}'s data")
    # views: a row's pointers are offset like the row
    row = t[1]
    expect(int(cchan.peer_pointers(row)[RANK]) == row.data_ptr(), "peer_pointers of a view")
    # a store into the next rank's memory lands there
    comm.barrier()
    nxt = cchan.peer_tensor(t, (RANK + 1) % SIZE)
    nxt[2].fill_(-1.0 - RANK)
    sync()
    comm.barrier()
    expect(bool((t[2] == -1.0 - (RANK - 1) % SIZE).all()), "a peer's store is visible here")
    comm.barrier()
    for dt in (torch.bfloat16, torch.float16, torch.int32, torch.uint8):
        u = cchan.empty(7, dt, comm)
        expect(u.dtype == dt and u.shape == (7,), f"empty {dt}")
    z = cchan.empty((0, 4), torch.float32, comm)
    expect(z.shape == (0, 4), "empty with a zero dimension")
    raises(TypeError, "comm", cchan.empty, (2,), torch.float32, None)
    raises(ValueError, "shape", cchan.empty, (-1,), torch.float32, comm)
    raises(TypeError, "dtype", cchan.empty, (2,), "float32", comm)
    raises(ValueError, "t", cchan.peer_pointers, torch.zeros(3, device=DEV))
    raises(ValueError, "rank", cchan.peer_tensor, t, SIZE)
    if DEV.type == "cpu":
        # on the host backend only cchan memory can be shared: a clear error on every rank
        raises(cchan.CchanError, "cchan_mem_alloc", cchan.register, torch.zeros(64), comm)
    else:
        x = torch.arange(64, dtype=torch.float32, device=DEV) + RANK
        reg = cchan.register(x, comm)
        ptrs = reg.peer_pointers()
        expect(int(ptrs[RANK]) == x.data_ptr(), "register: own pointer")
        reg.close()
    raises(ValueError, "tensor", cchan.register, torch.zeros(4, device="meta"), comm)


# ------------------------------------------------------------------ collectives

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def case_all_reduce():
    seed = 1
    for dt in DTYPES:
        for n in (1, 7, 1000, 65537):
            seed += 1
            ins = [values(seed, r, n, dt) for r in range(SIZE)]
            want = sum(ins).to(dt)
            x = ins[RANK].to(dt).to(DEV)
            y = comm.all_reduce(x)
            expect(torch.equal(y.cpu(), want), f"all_reduce {dt} n={n} out of place")
            expect(torch.equal(x.cpu(), ins[RANK].to(dt)), f"all_reduce {dt} n={n}: input kept")
            out = torch.full((n,), 7.0, dtype=dt, device=DEV)
            r = comm.all_reduce(x, out=out)
            expect(r is out and torch.equal(out.cpu(), want), f"all_reduce {dt} n={n} out=")
            comm.all_reduce(x, out=x)
            expect(torch.equal(x.cpu(), want), f"all_reduce {dt} n={n} in place")
    # a 2-D tensor keeps its shape
    x = torch.ones((4, 3), device=DEV)
    expect(comm.all_reduce(x).shape == (4, 3), "all_reduce keeps the shape")


def case_all_gather():
    seed = 100
    for dt in DTYPES:
        for n in (1, 5, 4099):
            seed += 1
            ins = [values(seed, r, n, dt).to(dt) for r in range(SIZE)]
            want = torch.cat(ins)
            x = ins[RANK].to(DEV)
            y = comm.all_gather(x)
            expect(torch.equal(y.cpu(), want), f"all_gather {dt} n={n}")
            # in place: this rank's block of the output is the input
            out = torch.zeros(SIZE * n, dtype=dt, device=DEV)
            out[RANK * n:(RANK + 1) * n].copy_(x)
            comm.all_gather(out[RANK * n:(RANK + 1) * n], out=out)
            expect(torch.equal(out.cpu(), want), f"all_gather {dt} n={n} in place")
    x = torch.full((2, 3), float(RANK), device=DEV)
    y = comm.all_gather(x)
    expect(y.shape == (2 * SIZE, 3) and all(bool((y[2 * r:2 * r + 2] == r).all())
                                            for r in range(SIZE)), "all_gather 2-D")


def case_reduce_scatter():
    seed = 200
    for dt in DTYPES:
        for n in (1, 6, 2051):
            seed += 1
            ins = [values(seed, r, n * SIZE, dt) for r in range(SIZE)]
            want = sum(ins).to(dt)[RANK * n:(RANK + 1) * n]
            x = ins[RANK].to(dt).to(DEV)
            y = comm.reduce_scatter(x)
            expect(y.shape == (n,) and torch.equal(y.cpu(), want), f"reduce_scatter {dt} n={n}")
            comm.reduce_scatter(x, out=x[RANK * n:(RANK + 1) * n])
            expect(torch.equal(x[RANK * n:(RANK + 1) * n].cpu(), want),
                   f"reduce_scatter {dt} n={n} in place")


def case_coll_bad_input():
    x = torch.ones(8, device=DEV)
    raises(TypeError, "t", comm.all_reduce, [1, 2])
    raises(TypeError, "t", comm.all_reduce, torch.ones(8, dtype=torch.float64, device=DEV))
    raises(TypeError, "float32 or float16 or bfloat16", comm.all_reduce,
           torch.ones(8, dtype=torch.int32, device=DEV))
    raises(ValueError, "t", comm.all_reduce, torch.ones(8, device="meta"))
    raises(ValueError, "contiguous", comm.all_reduce, torch.ones((4, 4), device=DEV).t())
    raises(ValueError, "contiguous", comm.all_reduce, torch.ones(16, device=DEV)[::2])
    raises(TypeError, "out", comm.all_reduce, x, out=torch.ones(8, dtype=torch.float16,
                                                                device=DEV))
    raises(ValueError, "out", comm.all_reduce, x, out=torch.ones(7, device=DEV))
    raises(ValueError, "out", comm.all_gather, x, out=torch.ones(8, device=DEV))
    raises(ValueError, "t", comm.reduce_scatter, torch.ones(SIZE * 2 + 1, device=DEV))
    raises(ValueError, "out", comm.reduce_scatter, torch.ones(SIZE * 2, device=DEV),
           out=torch.ones(3, device=DEV))
    raises(ValueError, "out", comm.all_reduce, x, out=torch.ones(8, device="meta"))
    # out overlapping the input anywhere but where the call works in place: the kernels would read
    # what they already wrote (wrong values before this was refused)
    buf = torch.zeros(24 + 2 * SIZE, device=DEV)
    raises(ValueError, "out: overlaps the input", comm.all_reduce, buf[0:8], out=buf[4:12])
    raises(ValueError, "out: overlaps the input", comm.all_reduce, buf[4:12], out=buf[0:8])
    raises(ValueError, "out=t (in place)", comm.all_reduce, buf[0:8], out=buf[1:9])
    raises(ValueError, "out: overlaps the input", comm.all_gather, buf[0:2],
           out=buf[1:1 + 2 * SIZE])
    raises(ValueError, "out: overlaps the input", comm.reduce_scatter, buf[0:2 * SIZE],
           out=buf[1:3])
    # the in-place forms still work, and buffers that only touch do not overlap
    buf.fill_(1.0)
    comm.all_reduce(buf[0:8], out=buf[0:8])
    comm.all_reduce(buf[8:16], out=buf[16:24])
    expect(bool((buf[0:8] == SIZE).all()) and bool((buf[16:24] == SIZE).all()),
           "all_reduce: in place and adjacent out= after the overlap refusals")
    if DEV.type == "cuda" and torch.cuda.device_count() > 1:
        other = torch.device("cuda", (DEV.index + 1) % torch.cuda.device_count())
        raises(ValueError, f"expected a tensor on {DEV}", comm.all_reduce,
               torch.ones(8, device=other))
        raises(ValueError, "out", comm.all_reduce, x, out=torch.ones(8, device=other))
    if DEV.type == "cuda":
        raises(ValueError, "t", comm.all_reduce, torch.ones(8))  # a CPU tensor


def case_custom_allreduce():
    ar = cchan.CustomAllreduce(comm, DEV, max_size=4096, symm_mem_enabled=True)
    expect(not ar.disabled, f"CustomAllreduce disabled: {ar.disabled_reason}")
    expect((ar.rank, ar.world_size, ar.device, ar.fully_connected) == (RANK, SIZE, DEV, True)
           and ar._ptr != 0, f"vLLM's attributes: {ar.rank} {ar.world_size} {ar.device} "
           f"{ar.fully_connected} {ar._ptr}")
    x = torch.ones(1024, device=DEV)  # 4 KiB
    # vLLM's rules: below max_size (strictly), a multiple of 16 bytes
    expect(ar.should_custom_ar(torch.ones(1020, device=DEV)), "should_custom_ar: 4080 B f32")
    expect(not ar.should_custom_ar(x), "should_custom_ar: = max_size")
    expect(not ar.should_custom_ar(torch.ones(6, device=DEV)), "should_custom_ar: 24 B")
    expect(not ar.should_custom_ar(torch.ones(1025, device=DEV)), "should_custom_ar: > max_size")
    expect(not ar.should_custom_ar(torch.ones(8, dtype=torch.int32, device=DEV)),
           "should_custom_ar: int32")
    expect(not ar.should_custom_ar(torch.ones((8, 8), device=DEV).t()),
           "should_custom_ar: not contiguous")
    expect(not ar.should_custom_ar(torch.ones(8, device="meta")), "should_custom_ar: other device")
    for dt in DTYPES:
        v = values(7, RANK, 300, dt).to(dt).to(DEV)
        want = sum(values(7, r, 300, dt) for r in range(SIZE)).to(dt)
        with ar.capture():
            y = ar.all_reduce(v)
        expect(torch.equal(y.cpu(), want), f"CustomAllreduce {dt}")
        out = torch.empty_like(v)
        ar.all_reduce(v, out=out)
        expect(torch.equal(out.cpu(), want), f"CustomAllreduce {dt} out=")
    expect(ar.register_graph_buffers() == 0, "register_graph_buffers: nothing captured")
    ptrs = cchan.CustomAllreduce.create_shared_buffer(256, group=comm)
    expect(len(ptrs) == SIZE and all(p != 0 for p in ptrs), f"create_shared_buffer {ptrs}")
    cchan.CustomAllreduce.free_shared_buffer(ptrs, rank=RANK)
    raises(ValueError, "max_size", ar.all_reduce, torch.ones(2048, device=DEV))
    expect(ar.custom_all_reduce(torch.ones(2048, device=DEV)) is None,
           "custom_all_reduce: None above max_size (the caller falls back)")
    z = ar.custom_all_reduce(torch.ones(16, device=DEV))
    expect(z is not None and bool((z == SIZE).all()), "custom_all_reduce")
    ar.close()
    ar.close()  # idempotent, as vLLM's
    expect(ar.disabled and ar._ptr == 0, "closed CustomAllreduce is disabled")
    raises(cchan.ClosedError, "closed", ar.all_reduce, x)
    expect(ar.custom_all_reduce(x) is None, "custom_all_reduce after close: None")
    # from the process group (its own communicator)
    ar2 = cchan.CustomAllreduce(None, max_size=1 << 20)
    y = ar2.all_reduce(torch.full((10,), 2.0, device=DEV))
    expect(bool((y == 2.0 * SIZE).all()), "CustomAllreduce(process group)")
    ar2.close()
    custom_allreduce_del()


def custom_allreduce_del():
    """vLLM's __del__ calls close(): dropping the object (every rank at the same point) releases
    its cchan_coll_t and the communicator it made from a process group, and nothing raises out of
    __del__ (sys.unraisablehook sees nothing), nor from a close() before it."""
    import gc

    unraisable = []
    saved_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        ar = cchan.CustomAllreduce(comm, DEV, max_size=4096)
        coll = ar._coll
        expect(coll._ptr is not None, "CustomAllreduce: a live cchan_coll_t before del")
        del ar
        gc.collect()
        expect(coll._ptr is None, "del CustomAllreduce: its cchan_coll_t destroyed")
        coll.close()  # a second release is harmless
        ar = cchan.CustomAllreduce(None, max_size=1 << 20)
        own = ar.comm
        y = ar.all_reduce(torch.full((8,), 1.0, device=DEV))
        expect(bool((y == SIZE).all()), "CustomAllreduce(process group) before del")
        del ar, y
        gc.collect()
        expect(own.closed, "del CustomAllreduce(process group): its own communicator closed")
        ar = cchan.CustomAllreduce(comm, DEV, max_size=4096)
        ar.close()
        del ar  # close() then __del__: nothing more happens
        gc.collect()
        expect(not comm.closed, "del CustomAllreduce(comm): the caller's communicator stays open")
    finally:
        sys.unraisablehook = saved_hook
    expect(not unraisable, f"CustomAllreduce.__del__ raised: "
           f"{[str(u.exc_value) for u in unraisable]}")


def case_group_device():
    """A communicator from a process group (Buffer(group), CustomAllreduce(group)) runs on torch's
    current CUDA device where the application chose one, else on the launcher's local rank's GPU:
    for a subgroup the bootstrap's local rank is the rank in the subgroup, so taking it modulo the
    GPUs would move the process onto another rank's GPU. Checked here with torch.cuda faked (4
    GPUs, current 3, then 0: none chosen) and from_unique_id stubbed out: the device it is given,
    and no set_device before it. test_device.py checks the rule through every constructor."""
    ranks = list(range(SIZE // 2, SIZE))
    g = dist.new_group(ranks)
    if RANK not in ranks:
        return
    from cchan import comm as ccomm
    seen, moved = [], []
    saved = (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device,
             torch.cuda.set_device, ccomm.cuda_built, ccomm.Comm.from_unique_id)

    class Stop(Exception):
        pass

    def stub(uid, rank, size, platform="auto", device=None, *a):
        seen.append(device)
        raise Stop()

    try:
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 4
        torch.cuda.set_device = moved.append
        ccomm.cuda_built = lambda: True
        ccomm.Comm.from_unique_id = staticmethod(stub)
        for cur in (3, 0):
            torch.cuda.current_device = lambda: cur
            try:
                ccomm.Comm.from_process_group(g)
            except Stop:
                pass
    finally:
        (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device,
         torch.cuda.set_device, ccomm.cuda_built) = saved[:5]
        ccomm.Comm.from_unique_id = saved[5]
    local = int(os.environ["CCHAN_LOCAL_RANK"]) % 4
    expect(seen == [3, local] and not moved, f"subgroup {ranks}: device {seen}, set_device "
           f"{moved} (expected the current device 3, then the local rank's {local}, and no "
           f"set_device)")


# ------------------------------------------------------------------ MoE references

_E4M3 = None


def e4m3_table():
    """Value of every e4m3fn code 0..126 (positive, finite), increasing with the code (float64)."""
    global _E4M3
    if _E4M3 is None:
        v = []
        for q in range(127):
            e, m = q >> 3, q & 7
            v.append(m / 512.0 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
        _E4M3 = torch.tensor(v, dtype=torch.float64)
    return _E4M3


def quantize(x_bf16):
    """Reference FP8 quantizer of rows [T, H] (bf16): per 128 channels scale = max(amax, 1e-4) /
    448 and q = e4m3(x * (448 / amax)) rounded to nearest even, in float32 as the kernel computes.
    Returns (uint8 codes [T, H], float32 scales [T, H / 128])."""
    x = x_bf16.float()
    T, H = x.shape
    g = x.reshape(T, H // 128, 128)
    amax = torch.clamp(g.abs().amax(dim=2), min=1e-4)  # float32, as moe_fp8_amax_clamp
    inv = torch.tensor(448.0, dtype=torch.float32) / amax
    y = g * inv[:, :, None]  # float32 products
    a = y.abs().double()
    tab = e4m3_table()
    hi = torch.clamp(torch.searchsorted(tab, a), 1, 126)
    lo = hi - 1
    dlo, dhi = a - tab[lo], tab[hi] - a
    even = torch.where(lo % 2 == 0, lo, hi)
    code = torch.where(dlo < dhi, lo, torch.where(dhi < dlo, hi, even))
    code = torch.where(a >= 448.0, torch.full_like(code, 126), code)
    code = code | torch.where(torch.signbit(y), 0x80, 0)
    return code.to(torch.uint8).reshape(T, H), (amax / 448.0).float()


def dequantize(q, scales):
    """float64 values of e4m3 codes q [..., H] with per-128-channel scales [..., H / 128]."""
    tab = torch.cat([e4m3_table(), torch.tensor([float("nan")], dtype=torch.float64)])
    q = q.long()
    v = tab[q & 0x7f] * torch.where((q & 0x80) != 0, -1.0, 1.0).double()
    return v * scales.double().repeat_interleave(128, dim=-1)


def make_pass(seed, E, H, K, B, tokens=None):
    """Every rank's tokens, routing (distinct experts per token, some -1) and weights."""
    xs, topks, ws = [], [], []
    for r in range(SIZE):
        g = torch.Generator().manual_seed(seed * 7919 + r)
        T = tokens[r] if tokens is not None else B - (r * 3 + seed) % min(B, 5)
        mag = torch.ldexp(1 + torch.rand((T, H), generator=g),
                          torch.randint(-6, 3, (T, H), generator=g))
        sign = torch.randint(0, 2, (T, H), generator=g) * 2 - 1
        x = (mag * sign).to(torch.bfloat16)
        if H > 128 and T:
            x[:, 128:256] *= 2.0 ** -12  # a group with a different scale
        topk = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]) if T else \
            torch.zeros((0, K), dtype=torch.int64)
        if T:
            drop = torch.rand((T, K), generator=g) < 0.1
            topk[drop] = -1
        w = 0.125 + torch.rand((T, K), generator=g)
        xs.append(x)
        topks.append(topk.to(torch.int64))
        ws.append(w.float())
    return xs, topks, ws


def ll_rows(xs, topks, eg):
    """Rows expert eg receives: rank by rank, each rank's tokens in order."""
    return [(r, t) for r in range(SIZE) for t in range(topks[r].shape[0])
            if bool((topks[r][t] == eg).any())]


def expert_a(e):
    return 0.5 + 0.03125 * (e % 17)


def expert_b(e):
    return 0.0078125 * ((e % 5) - 2)


def run_experts(recv, counts, L):
    """The test's expert FFN on what each local expert received: y = bf16(x * a_e + b_e); rows
    past the count are NaN, which the combine must not read."""
    y = torch.full(recv.shape, float("nan"), dtype=torch.bfloat16)
    for e in range(L):
        eg = RANK * L + e
        c = int(counts[e])
        y[e, :c] = (recv[e, :c].float() * expert_a(eg) + expert_b(eg)).to(torch.bfloat16)
    return y


def combine_ref(x, topk, w, weighted=True):
    T, H = x.shape
    ref = torch.zeros((T, H), dtype=torch.float64)
    mag = torch.zeros((T, H), dtype=torch.float64)
    for t in range(T):
        for k in range(topk.shape[1]):
            e = int(topk[t, k])
            if e < 0:
                continue
            y = (x[t].float() * expert_a(e) + expert_b(e)).to(torch.bfloat16).double()
            term = (float(w[t, k]) if weighted else 1.0) * y
            ref[t] += term
            mag[t] += term.abs()
    return ref, mag


def check_ll_dispatch(what, recv_x, counts, xs, topks, E, B, fp8):
    L, NB = E // SIZE, SIZE * B
    if fp8:
        vals, scales = recv_x
        expect(vals.shape == (L, NB, xs[0].shape[1]) and vals.element_size() == 1,
               f"{what}: fp8 values shape/dtype {tuple(vals.shape)} {vals.dtype}")
        expect(scales.dtype == torch.float32 and scales.shape == (L, NB, xs[0].shape[1] // 128),
               f"{what}: scales shape/dtype")
        vals = vals.cpu().view(torch.uint8)
        scales = scales.cpu()
    else:
        expect(recv_x.dtype == torch.bfloat16 and recv_x.shape == (L, NB, xs[0].shape[1]),
               f"{what}: bf16 shape/dtype")
        recv = recv_x.cpu()
    counts = counts.cpu()
    expect(counts.dtype == torch.int32 and counts.shape == (L,), f"{what}: counts shape/dtype")
    for e in range(L):
        rows = ll_rows(xs, topks, RANK * L + e)
        expect(int(counts[e]) == len(rows), f"{what}: expert {RANK * L + e} count "
                                            f"{int(counts[e])}, want {len(rows)}")
        if not rows:
            continue
        src = torch.stack([xs[r][t] for r, t in rows])
        n = min(len(rows), int(counts[e]))
        if fp8:
            q, s = quantize(src[:n])
            expect(torch.equal(vals[e, :n], q), f"{what}: expert {e} fp8 values differ from the "
                                                f"reference quantizer")
            expect(torch.equal(scales[e, :n], s), f"{what}: expert {e} scales differ")
        else:
            expect(torch.equal(recv[e, :n].view(torch.int16), src[:n].view(torch.int16)),
                   f"{what}: expert {e} rows differ (bf16 must be bit-exact)")


def check_combine(what, got, x, topk, w, weighted=True):
    ref, mag = combine_ref(x, topk, w, weighted)
    err = (got.cpu().double() - ref).abs()
    ok = bool((err <= mag / 256 + 1e-30).all())
    worst = float(err.max()) if err.numel() else 0.0
    expect(ok and got.dtype == torch.bfloat16,
           f"{what}: combine differs from the float64 reference (max err {worst})")


# ------------------------------------------------------------------ MoE low latency


def case_moe_ll():
    E, H, K, B = 8 * SIZE, 256, 4, 16
    hint = cmoe.Buffer.get_low_latency_rdma_size_hint(B, H, SIZE, E)
    buf = cmoe.Buffer(comm, num_rdma_bytes=hint, low_latency_mode=True,
                      num_blocks=MOE_BLOCKS)
    stats = torch.zeros(E // SIZE, dtype=torch.int32, device=DEV)
    total = torch.zeros(E // SIZE, dtype=torch.int32)
    for it in range(4):
        fp8 = it % 2 == 1
        xs, topks, ws = make_pass(10 + it, E, H, K, B)
        x, topk, w = xs[RANK].to(DEV), topks[RANK].to(DEV), ws[RANK].to(DEV)
        if it == 2:
            topk = topk.to(torch.int32)  # int32 routing is taken as is
        recv_x, counts, handle, event, hook = buf.low_latency_dispatch(
            x, topk, B, E, cumulative_local_expert_recv_stats=stats, use_fp8=fp8)
        expect(hook is None and isinstance(event, cmoe.EventOverlap), "dispatch: hook/event")
        sync()
        what = f"LL pass {it} ({'fp8' if fp8 else 'bf16'})"
        check_ll_dispatch(what, recv_x, counts, xs, topks, E, B, fp8)
        total += counts.cpu()
        if buf.get_local_buffer_info() is not None:
            info = buf.get_local_buffer_info()
            expect(info["comm_buffer_bytes"] <= hint,
                   f"size hint {hint} < the group's buffer {info['comm_buffer_bytes']}")
        # experts run on the received rows (bf16: the rows themselves; fp8: dequantized)
        if fp8:
            v, s = recv_x
            recv = dequantize(v.cpu().view(torch.uint8), s.cpu()).to(torch.bfloat16)
        else:
            recv = recv_x.cpu()
        y = run_experts(recv, counts.cpu(), E // SIZE).to(DEV)
        comb, event, hook = buf.low_latency_combine(y, topk, w, handle)
        sync()
        if fp8:
            # fp8 inputs: the reference runs the experts on the dequantized rows the ranks sent
            deq_xs = [dequantize(*quantize(xr)).to(torch.bfloat16) if xr.shape[0] else xr
                      for xr in xs]
            check_combine(what, comb, deq_xs[RANK], topks[RANK], ws[RANK])
        else:
            check_combine(what, comb, xs[RANK], topks[RANK], ws[RANK])
    expect(torch.equal(stats.cpu(), total), "cumulative_local_expert_recv_stats sums the counts")

    # the recv hook defers the receive: outputs stay as filled until hook() runs
    xs, topks, ws = make_pass(30, E, H, K, B)
    x, topk, w = xs[RANK].to(DEV), topks[RANK].to(DEV), ws[RANK].to(DEV)
    recv_x, counts, handle, event, hook = buf.low_latency_dispatch(
        x, topk, B, E, use_fp8=False, return_recv_hook=True, async_finish=True)
    expect(callable(hook), "return_recv_hook: a hook")
    recv_x.fill_(3.0)
    counts.fill_(-7)
    raises(ValueError, "hook", buf.low_latency_combine, recv_x, topk, w, handle)
    sync()
    comm.barrier()  # every rank has sent: a receive done at dispatch would have landed by now
    expect(bool((counts.cpu() == -7).all()) and bool((recv_x.cpu() == 3.0).all()),
           "return_recv_hook: nothing received before hook()")
    hook()
    event.current_stream_wait()
    sync()
    check_ll_dispatch("LL hooked dispatch", recv_x, counts, xs, topks, E, B, False)
    y = run_experts(recv_x.cpu(), counts.cpu(), E // SIZE).to(DEV)
    out = torch.empty((x.shape[0], H), dtype=torch.bfloat16, device=DEV)
    comb, event, hook = buf.low_latency_combine(y, topk, w, handle, return_recv_hook=True,
                                                out=out)
    expect(comb is out and callable(hook), "hooked combine returns out and a hook")
    hook()
    sync()
    check_combine("LL hooked combine", comb, xs[RANK], topks[RANK], ws[RANK])

    # zero tokens on one rank, and a new shape (the group is re-made)
    tokens = [3] * SIZE
    tokens[SIZE - 1] = 0
    xs, topks, ws = make_pass(40, E, 128, 2, 8, tokens=tokens)
    x, topk, w = xs[RANK].to(DEV), topks[RANK].to(DEV), ws[RANK].to(DEV)
    recv_x, counts, handle2, _, _ = buf.low_latency_dispatch(x, topk, 8, E, use_fp8=False)
    sync()
    check_ll_dispatch("LL zero tokens", recv_x, counts, xs, topks, E, 8, False)
    y = run_experts(recv_x.cpu(), counts.cpu(), E // SIZE).to(DEV)
    comb, _, _ = buf.low_latency_combine(y, topk, w, handle2)
    sync()
    check_combine("LL zero tokens", comb, xs[RANK], topks[RANK], ws[RANK])
    # the old handle belonged to the old group
    raises(cchan.ClosedError, "handle", buf.low_latency_combine,
           torch.zeros((E // SIZE, SIZE * B, H), dtype=torch.bfloat16, device=DEV),
           topks[RANK].to(DEV), ws[RANK].to(DEV), handle)
    moe_bad_input(buf, E)
    buf.close()
    raises(cchan.ClosedError, "buffer", buf.low_latency_dispatch, x, topk, 8, E)


def moe_bad_input(buf, E):
    H, K, B = 128, 2, 8
    x = torch.ones((4, H), dtype=torch.bfloat16, device=DEV)
    topk = torch.zeros((4, K), dtype=torch.int64, device=DEV)
    topk[:, 1] = 1
    d = buf.low_latency_dispatch
    raises(TypeError, "x", d, x.float(), topk, B, E)
    raises(ValueError, "x", d, torch.ones((4, H), dtype=torch.bfloat16, device="meta"), topk, B, E)
    raises(ValueError, "x", d, x[0], topk, B, E)
    if DEV.type == "cuda" and torch.cuda.device_count() > 1:
        other = torch.device("cuda", (DEV.index + 1) % torch.cuda.device_count())
        raises(ValueError, "x", d, x.to(other), topk, B, E)
        raises(ValueError, "topk_idx", d, x, topk.to(other), B, E)
    if DEV.type == "cuda":
        raises(ValueError, "topk_idx", d, x, topk.cpu(), B, E)
    raises(ValueError, "contiguous", d, torch.ones((H, 4), dtype=torch.bfloat16,
                                                   device=DEV).t(), topk, B, E)
    raises(ValueError, "x", d, torch.ones((4, 100), dtype=torch.bfloat16, device=DEV), topk, B, E)
    raises(TypeError, "topk_idx", d, x, topk.float(), B, E)
    raises(ValueError, "topk_idx", d, x, topk[:3], B, E)
    raises(ValueError, "topk_idx", d, x, torch.zeros((4, 17), dtype=torch.int64, device=DEV), B,
           E)
    raises(ValueError, "num_max_dispatch_tokens_per_rank = 2", d, x, topk, 2, E)
    raises(ValueError, "num_max_dispatch_tokens_per_rank", d, x, topk, 0, E)
    raises(ValueError, "num_max_dispatch_tokens_per_rank", d, x, topk, 5000, E)
    raises(ValueError, "num_experts", d, x, topk, B, E + 1)
    raises(NotImplementedError, "use_ue8m0", d, x, topk, B, E, use_ue8m0=True)
    raises(NotImplementedError, "round_scale", d, x, topk, B, E, round_scale=True)
    raises(ValueError, "cumulative_local_expert_recv_stats", d, x, topk, B, E,
           cumulative_local_expert_recv_stats=torch.zeros(3, dtype=torch.int32, device=DEV))
    # too small a buffer for the shape asked
    small = cmoe.Buffer(comm, num_rdma_bytes=4096, low_latency_mode=True)
    raises(ValueError, "num_rdma_bytes", small.low_latency_dispatch, x, topk, B, E)
    small.close()
    raises(ValueError, "low_latency_mode",
           cmoe.Buffer(comm, low_latency_mode=False).low_latency_dispatch, x, topk, B, E)
    raises(NotImplementedError, "allow_mnnvl", cmoe.Buffer, comm, allow_mnnvl=True)
    raises(NotImplementedError, "allow_nvlink_for_low_latency_mode", cmoe.Buffer, comm,
           allow_nvlink_for_low_latency_mode=False)
    # combine: wrong handle, shapes, dtypes (checked before any communication)
    c = buf.low_latency_combine
    L = E // SIZE
    y = torch.zeros((L, SIZE * B, H), dtype=torch.bfloat16, device=DEV)
    w = torch.ones((4, K), dtype=torch.float32, device=DEV)
    raises(TypeError, "handle", c, y, topk, w, ("a", "tuple"))
    recv_x, counts, h, _, _ = d(x, topk, B, E, use_fp8=False)
    raises(ValueError, "x", c, y[:, :3], topk, w, h)
    raises(TypeError, "x", c, y.float(), topk, w, h)
    raises(TypeError, "topk_weights", c, y, topk, w.double(), h)
    raises(ValueError, "topk_weights", c, y, topk, w[:2], h)
    raises(ValueError, "topk_idx", c, y, topk[:, :1], w, h)
    raises(ValueError, "out", c, y, topk, w, h, out=torch.zeros((3, H), dtype=torch.bfloat16,
                                                                 device=DEV))
    raises(ValueError, "out: overlaps the input", c, y, topk, w, h,
           out=y.view(-1)[:4 * H].view(4, H))
    raises(NotImplementedError, "use_logfmt", c, y, topk, w, h, use_logfmt=True)
    raises(NotImplementedError, "zero_copy", c, y, topk, w, h, zero_copy=True)
    c(y, topk, w, h)  # the pass completes on every rank
    sync()


# ------------------------------------------------------------------ MoE high throughput


def case_moe_ht():
    E, H, K, B = 4 * SIZE, 256, 3, 40
    buf = cmoe.Buffer(comm, num_blocks=MOE_BLOCKS)
    for it in range(2):
        xs, topks, ws = make_pass(50 + it, E, H, K, B)
        x, topk, w = xs[RANK].to(DEV), topks[RANK].to(DEV), ws[RANK].to(DEV)
        rx, rtopk, rw, per_expert, handle, event = buf.ht_dispatch(x, topk, E, B, topk_weights=w)
        sync()
        L = E // SIZE
        rows = [(r, t) for r in range(SIZE) for t in range(topks[r].shape[0])
                if any(0 <= int(e) // L == RANK for e in topks[r][t] if int(e) >= 0)]
        what = f"HT pass {it}"
        expect(rx.shape == (len(rows), H), f"{what}: {rx.shape[0]} rows, want {len(rows)}")
        if rx.shape[0] == len(rows) and rows:
            want = torch.stack([xs[r][t] for r, t in rows])
            expect(torch.equal(rx.cpu().view(torch.int16), want.view(torch.int16)),
                   f"{what}: rows differ")
            wt = torch.stack([topks[r][t] for r, t in rows])
            loc = torch.where((wt >= 0) & (wt // L == RANK), wt - RANK * L, torch.full_like(wt, -1))
            expect(rtopk.dtype == torch.int64 and torch.equal(rtopk.cpu(), loc),
                   f"{what}: recv_topk_idx")
            ww = torch.stack([ws[r][t] for r, t in rows])
            expect(torch.equal(rw.cpu(), ww), f"{what}: recv_topk_weights")
            cnt = [int((loc == e).sum()) for e in range(L)]
            expect(per_expert == cnt, f"{what}: per-expert counts {per_expert}, want {cnt}")
        # expert side: each row's weighted sum over this rank's experts
        y = torch.zeros((rx.shape[0], H), dtype=torch.float64)
        for i, (r, t) in enumerate(rows):
            for k in range(K):
                e = int(topks[r][t][k])
                if e >= 0 and e // L == RANK:
                    y[i] += float(ws[r][t][k]) * (xs[r][t].double() * expert_a(e) + expert_b(e))
        yb = y.to(torch.bfloat16)
        comb, event = buf.ht_combine(yb.to(DEV), handle)
        sync()
        # reference: sum over ranks of their bf16 row for each token
        T = xs[RANK].shape[0]
        ref = torch.zeros((T, H), dtype=torch.float64)
        mag = torch.zeros((T, H), dtype=torch.float64)
        for d in range(SIZE):
            for t in range(T):
                row = torch.zeros(H, dtype=torch.float64)
                hit = False
                for k in range(K):
                    e = int(topks[RANK][t][k])
                    if e >= 0 and e // L == d:
                        hit = True
                        row += float(ws[RANK][t][k]) * (xs[RANK][t].double() * expert_a(e) +
                                                        expert_b(e))
                if hit:
                    rb = row.to(torch.bfloat16).double()
                    ref[t] += rb
                    mag[t] += rb.abs()
        err = (comb.cpu().double() - ref).abs()
        expect(bool((err <= mag / 256 + 1e-30).all()), f"{what}: combine differs")
    raises(ValueError, "x", buf.ht_combine, torch.zeros((1, 128), dtype=torch.bfloat16,
                                                        device=DEV), handle)
    raises(ValueError, "num_max_tokens_per_rank", buf.ht_dispatch,
           torch.ones((4, 128), dtype=torch.bfloat16, device=DEV),
           torch.zeros((4, 2), dtype=torch.int64, device=DEV), E, 2)
    buf.close()


# ------------------------------------------------------------------ CUDA graphs


def capturing(g):
    """torch.cuda.graph(g), capturing in thread-local mode where this torch offers it (the mode
    cchan's own benchmarks capture in)."""
    try:
        return torch.cuda.graph(g, capture_error_mode="thread_local")
    except TypeError:  # torch < 2.1
        return torch.cuda.graph(g)


def case_graph():
    if DEV.type != "cuda":
        return
    # all_reduce captured, replayed with new inputs
    x = torch.zeros(256, device=DEV)
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        comm.all_reduce(x, out=out)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    sync()
    g = torch.cuda.CUDAGraph()
    with capturing(g):
        comm.all_reduce(x, out=out)
    for i in range(5):
        x.fill_(float(RANK + i))
        g.replay()
        sync()
        want = sum(r + i for r in range(SIZE))
        expect(bool((out == want).all()), f"graph all_reduce replay {i}")
    # dispatch + combine captured (fixed routing tensor whose contents change between replays)
    E, H, K, B = 8 * SIZE, 256, 4, 16
    buf = cmoe.Buffer(comm, low_latency_mode=True, num_blocks=MOE_BLOCKS)
    xs, topks, ws = make_pass(60, E, H, K, B, tokens=[B] * SIZE)
    x = xs[RANK].to(DEV)
    topk = topks[RANK].to(DEV)
    w = ws[RANK].to(DEV)
    y = torch.empty((E // SIZE, SIZE * B, H), dtype=torch.bfloat16, device=DEV)
    buf.low_latency_dispatch(x, topk, B, E, use_fp8=False)  # group made outside the capture
    sync()
    comm.barrier()
    g2 = torch.cuda.CUDAGraph()
    with capturing(g2):
        recv_x, counts, handle, _, _ = buf.low_latency_dispatch(x, topk, B, E, use_fp8=False)
        y.copy_(recv_x)  # the "experts": identity
        comb, _, _ = buf.low_latency_combine(y, topk, w, handle)
    for i in range(3):
        xs, topks, ws = make_pass(61 + i, E, H, K, B, tokens=[B] * SIZE)
        x.copy_(xs[RANK])
        topk.copy_(topks[RANK])
        w.copy_(ws[RANK])
        sync()
        comm.barrier()
        g2.replay()
        sync()
        check_ll_dispatch(f"graph dispatch replay {i}", recv_x, counts, xs, topks, E, B, False)
        T = xs[RANK].shape[0]
        ref = torch.zeros((T, H), dtype=torch.float64)
        for t in range(T):
            for k in range(K):
                if int(topks[RANK][t, k]) >= 0:
                    ref[t] += float(ws[RANK][t, k]) * xs[RANK][t].double()
        err = (comb.cpu().double() - ref).abs()
        expect(bool((err <= ref.abs() / 128 + 1e-6).all()), f"graph combine replay {i}")
    comm.barrier()
    del g2
    buf.close()
    # a plan run captured (its first run on these buffers, outside the capture, sets them up)
    if cchan.plan_available():
        from cchan.dsl.algorithms import allreduce_1pa

        ll = allreduce_1pa.VARIANTS["allreduce_1pa_ll"]
        plan = cchan.Plan(comm, allreduce_1pa.program(SIZE, **ll).compile())
        n = 4096 * SIZE
        px = torch.zeros(n, device=DEV)
        pout = torch.empty_like(px)
        plan.run(px, pout)
        sync()
        comm.barrier()
        g3 = torch.cuda.CUDAGraph()
        with capturing(g3):
            plan.run(px, pout)
        for i in range(3):
            px.fill_(float(RANK + i))
            sync()
            comm.barrier()
            g3.replay()
            sync()
            expect(bool((pout == sum(r + i for r in range(SIZE))).all()), f"graph plan replay {i}")
        comm.barrier()
        del g3
        plan.close()


def case_deadline():
    """A communicator has a deadline by default (ranks that disagree on a call's shape fail
    instead of waiting forever); timeout_ms outside the C field's 64 bits is refused."""
    env = os.environ.pop("CCHAN_TIMEOUT_MS", None)
    try:
        with cchan.Comm(platform=PLATFORM) as c:
            expect(c.timeout_ms == cchan.comm.DEFAULT_TIMEOUT_MS == 600_000,
                   f"default deadline: timeout_ms {getattr(c, 'timeout_ms', None)}")
        os.environ["CCHAN_TIMEOUT_MS"] = "4321"
        with cchan.Comm(platform=PLATFORM) as c:
            expect(c.timeout_ms == 4321, f"CCHAN_TIMEOUT_MS=4321: timeout_ms {c.timeout_ms}")
        with cchan.Comm(platform=PLATFORM, timeout_ms=0) as c:
            expect(c.timeout_ms == 0, f"timeout_ms=0 (no deadline): {c.timeout_ms}")
    finally:
        os.environ.pop("CCHAN_TIMEOUT_MS", None)
        if env is not None:
            os.environ["CCHAN_TIMEOUT_MS"] = env
    # refused before the bootstrap (on every rank: each checks its own argument)
    for bad in (2**70, 2**64, 2**64 - 1, -1, 1.5, "10"):
        raises(ValueError, "timeout_ms: expected None or an int in [0, 2**64 - 2]", cchan.Comm,
               platform=PLATFORM, timeout_ms=bad)
    raises(ValueError, "timeout_ms", cchan.Comm.from_unique_id, bytes(128), RANK, SIZE,
           timeout_ms=2**70)
    raises(ValueError, "timeout_ms", cchan.Comm.from_process_group, platform=PLATFORM,
           timeout_ms=-5)
    if DEV.type == "cuda":
        return  # a GPU wait that times out traps its kernel: the context would not survive
    # a shape mismatch: rank 0 sends 8 elements, the others wait for 16 and time out
    with cchan.Comm(platform=PLATFORM, timeout_ms=1000) as c:
        try:
            c.all_reduce(torch.ones(8 if RANK == 0 else 16, device=DEV))
            expect(RANK == 0, "shape mismatch: a rank waiting for data returned")
        except cchan.CchanError as e:
            expect(RANK != 0 and e.status == cchan._lib.CCHAN_ERR_DEVICE_TIMEOUT,
                   f"shape mismatch: {e}")
        # The ranks left the call a deadline apart (rank 0 at once, the others after 1 s), and
        # close() waits for its peers within the same deadline: they meet first, over gloo.
        dist.barrier()


def case_check_args():
    """check_args: ranks that disagree on a call's shape all get a ValueError naming the argument
    (without it they would wait for data that never comes)."""
    with cchan.Comm.from_process_group(platform=PLATFORM, check_args=True) as c:
        raises(ValueError, "t: the ranks disagree on all_reduce", c.all_reduce,
               torch.ones(8 if RANK == 0 else 16, device=DEV))
        raises(ValueError, "rank 1: 16 elements", c.all_gather,
               torch.ones(8 if RANK == 0 else 16, device=DEV))
        dt = torch.float32 if RANK == 0 else torch.bfloat16
        raises(ValueError, "bfloat16", c.reduce_scatter, torch.ones(8 * SIZE, dtype=dt, device=DEV))
        y = c.all_reduce(torch.ones(8, device=DEV))  # agreeing ranks go on as before
        expect(bool((y == SIZE).all()), "check_args: a matching call after the refusals")
        buf = cmoe.Buffer(c, low_latency_mode=True, num_blocks=MOE_BLOCKS)
        x = torch.ones((2, 128), dtype=torch.bfloat16, device=DEV)
        topk = torch.tensor([[0, 1], [1, 2]], device=DEV)
        raises(ValueError, "num_max_dispatch_tokens_per_rank: the ranks disagree",
               buf.low_latency_dispatch, x, topk, 4 + RANK, 4 * SIZE)
        recv, counts, h, _, _ = buf.low_latency_dispatch(x, topk, 4, 4 * SIZE, use_fp8=False)
        y, _, _ = buf.low_latency_combine(recv, topk, torch.ones((2, 2), device=DEV), h)
        sync()
        expect(torch.equal(y.cpu(), 2 * x.cpu()), "check_args: MoE pass after the refusal")
        buf.close()


def case_plan():
    """cchan.Plan: plans compiled by cchan.dsl run on tensors against the reference (through
    scratch, and zero-copy on registered cchan memory)."""
    if not cchan.plan_available():
        print(f"[r{RANK}] plan: skipped ({cchan.plan_unavailable_reason()})", flush=True)
        return
    from cchan.dsl.algorithms import allgather_allpairs, allreduce_2pa

    n = 4096 * SIZE  # f32 elements: 16 KiB per rank and more, past min_bytes of every plan here
    for mode in ("scratch", "zc"):
        doc = allreduce_2pa.program(SIZE, mode=mode).compile()
        plan = cchan.Plan(comm, doc)
        expect(plan.collective == "allreduce" and plan.name == doc["name"], "plan info")
        ins = [values(300, r, n, torch.float32) for r in range(SIZE)]
        want = sum(ins).float()
        x = cchan.empty(n, torch.float32, comm)
        out = cchan.empty(n, torch.float32, comm)
        plan.register(x)
        plan.register(out)
        x.copy_(ins[RANK].float())
        plan.run(x, out)
        sync()
        expect(torch.equal(out.cpu(), want), f"plan {doc['name']}: all-reduce")
        if plan.info["inplace"]:
            plan.run(x, x)
            sync()
            expect(torch.equal(x.cpu(), want), f"plan {doc['name']}: in place")
        else:
            raises(ValueError, "out of place", plan.run, x, x)
        raises(TypeError, "send", plan.run, torch.ones(n, dtype=torch.int32, device=DEV))
        raises(ValueError, "recv", plan.run, x, torch.empty(n - 1, device=DEV))
        plan.close()
        raises(cchan.ClosedError, "plan", plan.run, x, out)
    opts = list(allgather_allpairs.VARIANTS.values())[0]
    doc = allgather_allpairs.program(SIZE, **opts).compile()
    plan = cchan.Plan(comm, json.dumps(doc))  # JSON text works too
    x = cchan.empty(4096, torch.float32, comm)
    out = cchan.empty(4096 * SIZE, torch.float32, comm)
    plan.register(x)
    plan.register(out)
    x.fill_(float(RANK + 1))
    plan.run(x, out)
    sync()
    want = torch.cat([torch.full((4096,), float(r + 1)) for r in range(SIZE)])
    expect(torch.equal(out.cpu(), want), "plan allgather")
    plan.close()
    # a cchan.dsl Program is compiled by Plan itself; a plan that reaches only the peers' scratch
    # (LL packets) runs on any tensor, here a recv the call allocates
    from cchan.dsl.algorithms import allreduce_1pa

    ll = allreduce_1pa.VARIANTS["allreduce_1pa_ll"]
    plan = cchan.Plan(comm, allreduce_1pa.program(SIZE, **ll))
    x = torch.full((4096 * SIZE,), float(RANK), device=DEV)
    y = plan.run(x)
    sync()
    expect(bool((y == sum(range(SIZE))).all()), "plan from a Program, recv allocated")
    plan.close()
    raises(ValueError, f"{SIZE} ranks", cchan.Plan, comm,
           allreduce_2pa.program(2 * SIZE, mode="scratch").compile())
    raises(ValueError, "plan", cchan.Plan, comm, "/nonexistent/plan.json")
    raises(TypeError, "plan", cchan.Plan, comm, 42)


def case_select():
    """Comm.load_plans and the collectives' selector from Python: the default rule (native for
    AllReduce, the plan for AllToAll), a tuning table that ranks a plan first, and an automatic
    all_reduce that runs it."""
    if not cchan.plan_available():
        print(f"[r{RANK}] select: skipped ({cchan.plan_unavailable_reason()})", flush=True)
        return
    plans = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plans")
    n = comm.load_plans(plans)
    expect(n >= 1, f"load_plans: {n} plans")
    ch = comm.choose("allreduce", 16384, torch.float32)
    expect(ch["plan"] is None and not ch["from_table"] and "default rule" in ch["why"],
           f"default rule for allreduce: {ch}")
    ch = comm.choose("alltoall", 4096 * SIZE, "f32")
    expect(ch["plan"] == "alltoall_allpairs_mem", f"alltoall: {ch}")
    coll = comm._collectives()
    ready = {a["name"]: a["ready"] for a in coll.algos() if a["plan"]}
    expect(ready.get("allreduce_1pa_ll") is False, f"allreduce_1pa_ll set up unselected: {ready}")
    table = f"/tmp/test_cchan_select.{os.getpid()}.tune"
    with open(table, "w") as f:
        f.write(f"cchan-coll-tuning 1\nallreduce {SIZE} * 0 0 65536 plan:allreduce_1pa_ll 1.5\n")
    try:
        expect(coll.load_tuning(table) == 1, "load_tuning: 1 row")
    finally:
        os.unlink(table)
    ch = comm.choose("allreduce", 16384, torch.float32)
    expect(ch["plan"] == "allreduce_1pa_ll" and ch["from_table"], f"table: {ch}")
    x = torch.full((4096,), float(RANK + 1), device=DEV)
    y = comm.all_reduce(x)
    sync()
    expect(bool((y.cpu() == SIZE * (SIZE + 1) / 2).all()), "all_reduce on the table's plan")
    expect(coll.last_choice()["plan"] == "allreduce_1pa_ll", f"last_choice {coll.last_choice()}")
    coll.load_tuning(None)
    expect(comm.choose("allreduce", 16384, "f32")["plan"] is None, "load_tuning(None): default")
    raises(ValueError, "op", comm.choose, "gather", 16, "f32")


CASES = [case_comm, case_deadline, case_check_args, case_memory, case_all_reduce, case_all_gather,
         case_reduce_scatter, case_coll_bad_input, case_custom_allreduce, case_group_device,
         case_moe_ll, case_moe_ht,
         case_plan, case_select, case_graph]

only = [c for c in args.only.split(",") if c]
for case in CASES:
    name = case.__name__[5:]
    if only and name not in only:
        continue
    before = len(failures)
    try:
        case()
    except Exception:  # noqa: BLE001 - report and go on (the case's collectives are balanced)
        failures.append(f"{name}: {traceback.format_exc()}")
        print(f"[r{RANK}] FAIL: {name} raised:\n{traceback.format_exc()}", flush=True)
    if RANK == 0:
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {name}", flush=True)
    comm.barrier()

# every rank's verdict
v = torch.tensor([len(failures)], dtype=torch.int64)
dist.all_reduce(v)
comm.close()
dist.barrier()
if RANK == 0:
    try:
        os.unlink(store)
    except OSError:
        pass
    print(f"test_cchan ({args.device}, {SIZE} ranks): {checks[0]} checks on rank 0, "
          f"{int(v)} failures over all ranks")
dist.destroy_process_group()
sys.exit(1 if int(v) else 0)
