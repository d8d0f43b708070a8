"""The Python layer against the C API in one run, on GPUs (one process per GPU, or ranks sharing a
GPU under MPS):

  1. cchan.moe.Buffer's low-latency dispatch (fp8 and bf16) and combine give bit-identical outputs
     to the same calls made on the C API directly (ctypes, raw pointers) for the same inputs;
  2. the time of an fp8 dispatch + combine through the Buffer against the C API's (a handle made
     once, as cchan-moe-bench does, and a handle per pass, as DeepEP's interface implies), measured
     as cchan-moe-bench measures it: CUDA graphs of 10 and 60 back-to-back operations, (T60 -
     T10) / 50 per operation, the median of --reps replays each (pass --moe-bench-log with
     cchan-moe-bench's output of the same run to add its row);
  3. a 1 KiB all_reduce from Python (comm.all_reduce) against the C call (cchan_coll_allreduce),
     the same way in graphs.

    cchan-run -n 2 python3 python/bench/bench_py.py [--tokens 128] [--hidden 7168] [--topk 8]
        [--experts 256] [--reps 9] [--blocks 0] [--moe-bench-log FILE]

Needs the libraries (CCHAN_LIBRARY_PATH=<build dir>) built with CUDA. Prints a table on rank 0;
exit 1 when an output differs.
"""

import argparse
import ctypes
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import cchan  # noqa: E402
from cchan import _lib  # noqa: E402
from cchan import moe as cmoe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--hidden", type=int, default=7168)
ap.add_argument("--topk", type=int, default=8)
ap.add_argument("--experts", type=int, default=256)
ap.add_argument("--reps", type=int, default=9)
ap.add_argument("--blocks", type=int, default=0,
                help="blocks per MoE kernel for both paths (0: the library's default, every SM)")
ap.add_argument("--moe-bench-log", default="")
args = ap.parse_args()

if not torch.cuda.is_available():
    print("SKIP: no GPU visible to torch")
    sys.exit(77)

comm = cchan.Comm(platform="cuda")
dev = comm.device
N, R = comm.size, comm.rank
T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
L, B = E // N, T
stream = torch.cuda.Stream(dev)
torch.cuda.set_stream(stream)


def sptr():
    return torch.cuda.current_stream(dev).cuda_stream


def graph(fn, nops):
    g = torch.cuda.CUDAGraph()
    try:
        ctx = torch.cuda.graph(g, stream=stream, capture_error_mode="thread_local")
    except TypeError:  # torch < 2.1
        ctx = torch.cuda.graph(g, stream=stream)
    with ctx:
        for _ in range(nops):
            fn()
    return g


def time_graph(fn, nops):
    g = graph(fn, nops)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for r in range(-2, args.reps):
        torch.cuda.synchronize(dev)
        comm.barrier()
        e0.record(stream)
        g.replay()
        e1.record(stream)
        e1.synchronize()
        if r >= 0:
            t.append(e0.elapsed_time(e1))
    del g
    torch.cuda.synchronize(dev)
    comm.barrier()
    return statistics.median(t)


def us_per_op(fn):
    return (time_graph(fn, 60) - time_graph(fn, 10)) * 1000.0 / 50.0


# ------------------------------------------------------------------ inputs (as cchan-moe-bench)
gen = torch.Generator().manual_seed(0x5EED + R)
topk = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
x = (torch.randn((T, H), generator=gen)).to(torch.bfloat16).to(dev)
y = (torch.randn((L, N * B, H), generator=gen)).to(torch.bfloat16).to(dev)
w = torch.full((T, K), 1.0 / K, dtype=torch.float32, device=dev)
topk32 = topk.to(dev)
topk64 = topk32.to(torch.int64)

# ------------------------------------------------------------------ the C API directly
moe = _lib.moe()
cfg = _lib.moe_config(_lib.MOE_LOW_LATENCY, E, H, K, B, args.blocks)
cg = ctypes.c_void_p()
_lib.check(moe.cchan_moe_group_create(comm.handle, ctypes.byref(cfg), ctypes.byref(cg)),
           "cchan_moe_group_create", moe.cchan_moe_last_error)
ch = ctypes.c_void_p()
_lib.check(moe.cchan_moe_handle_create(cg, topk32.data_ptr(), T, sptr(), ctypes.byref(ch)),
           "cchan_moe_handle_create", moe.cchan_moe_last_error)
c_out = {"fp8": torch.empty((L, N * B, H), dtype=torch.uint8, device=dev),
         "bf16": torch.empty((L, N * B, H), dtype=torch.bfloat16, device=dev)}
c_scales = torch.empty((L, N * B, H // 128), dtype=torch.float32, device=dev)
c_counts = torch.empty(L, dtype=torch.int32, device=dev)
c_comb = torch.empty((T, H), dtype=torch.bfloat16, device=dev)


def c_args(fp8):
    a = _lib.MoeDispatchArgs()
    a.x = x.data_ptr()
    a.dtype = _lib.MOE_FP8_E4M3 if fp8 else _lib.MOE_BF16
    a.out_x = c_out["fp8" if fp8 else "bf16"].data_ptr()
    a.out_scales = c_scales.data_ptr() if fp8 else None
    a.out_counts = c_counts.data_ptr()
    return a


args_fp8, args_bf16 = c_args(True), c_args(False)


def c_dispatch(a):
    _lib.check(moe.cchan_moe_dispatch(ch, ctypes.byref(a), 0, sptr()), "cchan_moe_dispatch",
               moe.cchan_moe_last_error)


def c_combine():
    _lib.check(moe.cchan_moe_combine(ch, y.data_ptr(), w.data_ptr(), c_comb.data_ptr(), 0,
                                     sptr()), "cchan_moe_combine", moe.cchan_moe_last_error)


def c_pair():
    c_dispatch(args_fp8)
    c_combine()


# The C API as DeepEP's interface uses it: a handle per pass (routing copied on the stream), its
# memory from torch's caching allocator as the Buffer's (so it can be created inside a capture).
cfg2 = _lib.moe_config(_lib.MOE_LOW_LATENCY, E, H, K, B, args.blocks)
cfg2.alloc = ctypes.cast(cmoe._alloc_cb, ctypes.c_void_p)
cfg2.free = ctypes.cast(cmoe._free_cb, ctypes.c_void_p)
cg2 = ctypes.c_void_p()
_lib.check(moe.cchan_moe_group_create(comm.handle, ctypes.byref(cfg2), ctypes.byref(cg2)),
           "cchan_moe_group_create", moe.cchan_moe_last_error)


def c_pair_new_handle():
    h = ctypes.c_void_p()
    _lib.check(moe.cchan_moe_handle_create(cg2, topk32.data_ptr(), T, sptr(), ctypes.byref(h)),
               "cchan_moe_handle_create", moe.cchan_moe_last_error)
    _lib.check(moe.cchan_moe_dispatch(h, ctypes.byref(args_fp8), 0, sptr()), "cchan_moe_dispatch",
               moe.cchan_moe_last_error)
    _lib.check(moe.cchan_moe_combine(h, y.data_ptr(), w.data_ptr(), c_comb.data_ptr(), 0, sptr()),
               "cchan_moe_combine", moe.cchan_moe_last_error)
    moe.cchan_moe_handle_destroy(h)


# ------------------------------------------------------------------ the Buffer
buf = cmoe.Buffer(comm, num_rdma_bytes=cmoe.Buffer.get_low_latency_rdma_size_hint(B, H, N, E, K),
                  low_latency_mode=True, num_blocks=args.blocks)


def py_pair(tk):
    def fn():
        (q, s), cnt, h, _, _ = buf.low_latency_dispatch(x, tk, B, E, use_fp8=True)
        buf.low_latency_combine(y, tk, w, h)
    return fn


# ------------------------------------------------------------------ 1. bit-identical outputs
problems = []


def same_rows(what, a, b, counts):
    for e in range(L):
        c = int(counts[e])
        if not torch.equal(a[e, :c].view(torch.uint8), b[e, :c].view(torch.uint8)):
            problems.append(f"{what}: expert {e} rows differ")
            return


c_dispatch(args_fp8)
c_combine()
(pq, ps), pc, ph, _, _ = buf.low_latency_dispatch(x, topk32, B, E, use_fp8=True)
pcomb, _, _ = buf.low_latency_combine(y, topk32, w, ph)
torch.cuda.synchronize(dev)
counts = c_counts.cpu()
if not torch.equal(pc.cpu(), counts):
    problems.append("fp8 dispatch: recv_count differs")
same_rows("fp8 dispatch values", pq, c_out["fp8"], counts)
same_rows("fp8 dispatch scales", ps, c_scales, counts)
if not torch.equal(pcomb.view(torch.int16), c_comb.view(torch.int16)):
    problems.append("combine after fp8 dispatch differs")
c_dispatch(args_bf16)
pb, pc2, ph2, _, _ = buf.low_latency_dispatch(x, topk64, B, E, use_fp8=False)
torch.cuda.synchronize(dev)
same_rows("bf16 dispatch", pb, c_out["bf16"], counts)
if not torch.equal(pc2.cpu(), c_counts.cpu()):
    problems.append("bf16 dispatch: recv_count differs")
c_combine()
pcomb2, _, _ = buf.low_latency_combine(y, topk64, w, ph2)
torch.cuda.synchronize(dev)
if not torch.equal(pcomb2.view(torch.int16), c_comb.view(torch.int16)):
    problems.append("combine after bf16 dispatch differs")
rows_checked = int(counts.sum())
del ph, ph2
comm.barrier()

# ------------------------------------------------------------------ 2. MoE timing
t_c = us_per_op(c_pair)
t_c_new = us_per_op(c_pair_new_handle)
t_py32 = us_per_op(py_pair(topk32))
t_py64 = us_per_op(py_pair(topk64))

# ------------------------------------------------------------------ 3. all_reduce 1 KiB
coll = comm._collectives()
ar_in = torch.ones(256, dtype=torch.float32, device=dev)
ar_out = torch.empty_like(ar_in)
cl = _lib.coll()


def c_allreduce():
    _lib.check(cl.cchan_coll_allreduce(coll._ptr, ar_in.data_ptr(), ar_out.data_ptr(), 256,
                                       _lib.COLL_F32, _lib.COLL_AUTO, sptr()),
               "cchan_coll_allreduce", cl.cchan_coll_last_error)


def py_allreduce():
    comm.all_reduce(ar_in, out=ar_out)


c_allreduce()
py_allreduce()
torch.cuda.synchronize(dev)
if not bool((ar_out == N).all()):
    problems.append("all_reduce 1 KiB: wrong sum")
t_ar_c = us_per_op(c_allreduce)
t_ar_py = us_per_op(py_allreduce)
t_ar_c2 = us_per_op(c_allreduce)  # again: the spread between two C runs
algo = coll.algorithm("all_reduce", 1024)

# ------------------------------------------------------------------ report
verdicts = torch.tensor([len(problems)], dtype=torch.int32)
all_v = torch.zeros(N, dtype=torch.int32)
lib = _lib.core()
lib.cchan_bootstrap_allgather(lib.cchan_comm_bootstrap(comm.handle), verdicts.data_ptr(),
                              all_v.data_ptr(), 4)
bench_row = None
if args.moe_bench_log and os.path.exists(args.moe_bench_log):
    for line in open(args.moe_bench_log):
        if line.startswith("LL fp8 dispatch+combine"):
            bench_row = float(line.split()[3])
if R == 0:
    dev_name = torch.cuda.get_device_name(dev)
    print(f"\ncchan Python layer vs C API: {N} ranks on {dev_name}, torch {torch.__version__}; "
          f"LL tokens {T}, hidden {H}, top-k {K}, experts {E}; us per operation from CUDA graphs "
          f"(T60 - T10) / 50, median of {args.reps}")
    print(f"{'operation':44s} {'us/op':>9s} {'vs C API':>10s}")

    def row(name, us, base, rel=True):
        if base is None:
            cmp = "-"
        elif rel:
            cmp = f"{(us / base - 1) * 100:+.1f}%"
        else:
            cmp = f"{us - base:+.3f} us"
        print(f"{name:44s} {us:9.2f} {cmp:>10s}")

    row("LL fp8 dispatch+combine, C API (ctypes)", t_c, None)
    row("  C API, a handle per pass (DeepEP's way)", t_c_new, t_c)
    row("LL fp8 dispatch+combine, Buffer (int32 idx)", t_py32, t_c)
    row("LL fp8 dispatch+combine, Buffer (int64 idx)", t_py64, t_c)
    if bench_row is not None and args.blocks == 0:
        row("LL fp8 dispatch+combine, cchan-moe-bench", bench_row, t_c)
    row(f"all_reduce 1 KiB f32 ({algo}), C call", t_ar_c, None)
    row("all_reduce 1 KiB f32, comm.all_reduce", t_ar_py, t_ar_c, rel=False)
    row("all_reduce 1 KiB f32, C call again", t_ar_c2, t_ar_c, rel=False)
    if bench_row is not None and args.blocks == 0:
        print(f"Buffer (int32 idx) vs cchan-moe-bench: {(t_py32 / bench_row - 1) * 100:+.1f}%")
    print(f"bit-identical (fp8 values, scales, counts, bf16 rows, both combines; {rows_checked} "
          f"rows on rank 0): {'yes' if int(all_v.sum()) == 0 else 'NO'} on every rank")
for p in problems:
    print(f"[r{R}] {p}")
buf.close()
moe.cchan_moe_handle_destroy(ch)
moe.cchan_moe_group_destroy(cg)
moe.cchan_moe_group_destroy(cg2)
comm.close()
sys.exit(1 if int(all_v.sum()) else 0)
