#!/usr/bin/env python3
"""PyTorch torch.distributed (NCCL backend) on the real NCCL and on libcchan_nccl.so.

Runs all_reduce (sum, in place) and all_gather_into_tensor on several dtypes and sizes, once with
the real NCCL and once with the shim preloaded (LD_PRELOAD, its fallback set to the NCCL PyTorch
ships), one process per GPU, and compares the results of the two runs element by element.

    scripts/torch-nccl.py [--shim build-ncclshim/src/nccl/libcchan_nccl.so] [--nprocs 2] [--out DIR]

Exits 77 (skip) with a one-line reason when this python has no torch or fewer than two GPUs;
0 when every result matches, 1 otherwise.
"""
import argparse
import faulthandler
import glob
import os
import signal
import subprocess
import sys
import threading
import time

DESTROY_TIMEOUT = 30  # seconds a rank waits for destroy_process_group before giving up on it
EXIT_DESTROY_HUNG = 3  # a rank's exit status when only its teardown hung (its results are saved)
DTYPES = ["float32", "float16", "bfloat16", "int32", "float64"]
COUNTS = [1024, 1 << 20, 1000003]


def inputs(torch, rank, dtype, count):
    """Small integers so that every sum is exact in every dtype: both runs must agree bit for bit."""
    g = torch.Generator().manual_seed(1000003 * rank + 7919 * DTYPES.index(dtype) + count)
    x = torch.randint(-8, 9, (count,), generator=g, dtype=torch.int32)
    return x.to(getattr(torch, dtype))


def worker(a):
    import torch
    import torch.distributed as dist

    print(f"rank {a.rank}: torch {torch.__version__}, LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}",
          flush=True)
    # A run that is about to be killed for time says where every thread of it stands.
    faulthandler.dump_traceback_later(max(5, a.timeout - 5), exit=False)
    torch.cuda.set_device(a.rank)
    # The launcher holds the store's listening socket for the whole run: no port to race for, and
    # none left bound by an earlier run's processes.
    store = dist.TCPStore("127.0.0.1", a.port, a.world, is_master=False)
    dist.init_process_group("nccl", store=dist.PrefixStore(a.mode, store), rank=a.rank,
                            world_size=a.world)
    results = {}
    for dtype in DTYPES:
        for count in COUNTS:
            x = inputs(torch, a.rank, dtype, count).cuda()
            print(f"rank {a.rank}: all_reduce {dtype} {count}", flush=True)
            dist.all_reduce(x)
            results[f"all_reduce/{dtype}/{count}"] = x.cpu()
            y = inputs(torch, a.rank, dtype, count).cuda()
            print(f"rank {a.rank}: all_gather {dtype} {count}", flush=True)
            out = torch.empty(count * a.world, dtype=y.dtype, device="cuda")
            dist.all_gather_into_tensor(out, y)
            results[f"all_gather/{dtype}/{count}"] = out.cpu()
    # A second communicator on the same GPUs (torch creates one per process group).
    print(f"rank {a.rank}: new_group and its all_reduce", flush=True)
    sub = dist.new_group(list(range(a.world)))
    for dtype in ("float32", "bfloat16"):
        x = inputs(torch, a.rank, dtype, 1 << 20).cuda()
        dist.all_reduce(x, group=sub)
        results[f"subgroup_all_reduce/{dtype}/{1 << 20}"] = x.cpu()
    # CUDA graph: capture one all_reduce, replay it three times on fresh inputs.
    print(f"rank {a.rank}: CUDA graph capture of all_reduce", flush=True)
    try:
        count = 65536
        src = inputs(torch, a.rank, "float32", count).cuda()
        x = src.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(x)  # warm-up outside the capture, as PyTorch requires
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(x)
        for i in range(3):
            x.copy_(src * (i + 1))
            g.replay()
        torch.cuda.synchronize()
        results[f"graph_all_reduce/float32/{count}"] = x.cpu()
    except Exception as e:  # reported, and compared: both runs must behave alike
        results[f"graph_all_reduce/float32/{count}"] = torch.tensor([float("nan")])
        print(f"rank {a.rank}: CUDA graph capture failed: {e}", flush=True)
    torch.cuda.synchronize()
    maps = open("/proc/self/maps").read()
    results["_shim_loaded"] = "libcchan_nccl" in maps
    results["_nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    # Results first: a teardown that hangs must not lose them.
    torch.save(results, os.path.join(a.out, f"{a.mode}-{a.rank}.pt"))
    print(f"rank {a.rank}: results saved; destroy_process_group", flush=True)
    done = threading.Thread(target=dist.destroy_process_group, daemon=True)
    done.start()
    done.join(DESTROY_TIMEOUT)
    if done.is_alive():
        print(f"rank {a.rank}: destroy_process_group did not return within {DESTROY_TIMEOUT} s",
              flush=True)
        os._exit(EXIT_DESTROY_HUNG)
    return 0


def torch_nccl_lib():
    """The libnccl.so.2 PyTorch's wheel ships (nvidia-nccl-cu*), else None."""
    import torch
    roots = [os.path.dirname(os.path.dirname(torch.__file__))]
    for root in roots:
        for p in glob.glob(os.path.join(root, "nvidia", "nccl", "lib", "libnccl.so*")):
            return os.path.realpath(p)
    return None


def torch_cudart():
    """The libcudart.so.* files PyTorch's wheel ships (nvidia-cuda-runtime-*), if any."""
    import torch
    root = os.path.dirname(os.path.dirname(torch.__file__))
    return sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcudart.so.*"), recursive=True))


def launch(a, mode, store):
    port = store.port
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    env.setdefault("NCCL_DEBUG", "WARN")
    env.pop("CCHAN_NVLS", None)
    if mode == "cchan":
        env["LD_PRELOAD"] = os.path.abspath(a.shim)
        # The shim needs libcudart.so.13: take PyTorch's own copy when it ships one, so that the
        # process loads one CUDA runtime, else the toolkit's.
        cuda_libs = [os.path.dirname(p) for p in torch_cudart()] + ["/usr/local/cuda/lib64"]
        env["LD_LIBRARY_PATH"] = ":".join(p for p in cuda_libs + [env.get("LD_LIBRARY_PATH", "")] if p)
        env.setdefault("CCHAN_DEBUG", "INFO")
        # No CCHAN_NCCL_FALLBACK: the shim must find PyTorch's own NCCL by itself (main checks).
        env.pop("CCHAN_NCCL_FALLBACK", None)
    procs = []
    for r in range(a.nprocs):
        saved = os.path.join(a.out, f"{mode}-{r}.pt")
        if os.path.exists(saved):
            os.remove(saved)  # a result file proves this run's collectives finished (see below)
        log = open(os.path.join(a.out, f"{mode}-{r}.log"), "w")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--rank", str(r),
               "--world", str(a.nprocs), "--port", str(port), "--out", a.out, "--timeout", str(a.timeout)]
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True), log))
    rcs = []
    deadline = time.time() + a.timeout  # one deadline for the whole run, not one per process
    for r, (p, log) in enumerate(procs):
        try:
            rcs.append(p.wait(timeout=max(1.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            p.kill()
            # Killed at the run's deadline after saving its results: only the teardown was left
            # (the real NCCL's destroy_process_group hangs on the 2xH200 machine).
            hung = os.path.exists(os.path.join(a.out, f"{mode}-{r}.pt"))
            rcs.append(EXIT_DESTROY_HUNG if hung else 124)
        log.close()
    for p, _ in procs:  # nothing of this run outlives it (a rank's helpers included)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    return rcs


def teardown_in_nccl(path):
    """True when the shim's log shows the fallback NCCL's own teardown started and never returned
    (the shim says so before and after it): a hang that is NCCL's, not cchan's."""
    started = returned = 0
    for line in open(path, errors="replace"):
        if "the fallback NCCL's teardown starts" in line:
            started += 1
        elif "the fallback NCCL's teardown returned" in line:
            returned += 1
    return started > returned


def shim_fallback(path):
    """The fallback NCCL the shim loaded, from its log ('' when none was)."""
    for line in open(path, errors="replace"):
        if "fallback NCCL" in line and " loaded from " in line:
            return line.rsplit(" loaded from ", 1)[1].strip()
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", default="build-ncclshim/src/nccl/libcchan_nccl.so")
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp") + "/torch-nccl")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--order", default="cchan,nccl",
                    help="which run goes first (default: the shim's, so that it is the one measured "
                         "if time runs out)")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--port", type=int)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    try:
        import torch
    except ImportError:
        print(f"SKIP torch-nccl: {sys.executable} has no torch")
        return 77
    if not torch.cuda.is_available() or torch.cuda.device_count() < a.nprocs:
        print(f"SKIP torch-nccl: needs {a.nprocs} GPUs, torch sees {torch.cuda.device_count()}")
        return 77
    if not os.path.exists(a.shim):
        print(f"torch-nccl: no shim at {a.shim} (build target cchan_nccl)")
        return 2
    os.makedirs(a.out, exist_ok=True)
    real = torch_nccl_lib()
    print(f"[torch-nccl] torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, "
          f"PyTorch's own NCCL (the shim's fallback must be it): {real or 'none found'}", flush=True)

    rcs = {}
    order = a.order.split(",")
    if sorted(order) != ["cchan", "nccl"]:
        print(f"torch-nccl: --order must name cchan and nccl once each, not {a.order!r}")
        return 2
    import torch.distributed as dist
    for m in order:
        print(f"[torch-nccl] {m} run ({a.nprocs} processes)", flush=True)
        store = dist.TCPStore("127.0.0.1", 0, a.nprocs + 1, is_master=True, wait_for_workers=False)
        rcs[m] = launch(a, m, store)
        del store
        print(f"[torch-nccl] {m} run: exit codes {rcs[m]}", flush=True)
    fails = 0
    for m, rc in rcs.items():
        if all(c in (0, EXIT_DESTROY_HUNG) for c in rc) and any(rc):
            # Every rank finished its collectives and saved its results; only the teardown hung.
            # A hang inside the real NCCL's own teardown (the reference run's, or the shim's
            # forwarded call, which the shim's log brackets) is not cchan's and fails nothing.
            hung = [r for r, c in enumerate(rc) if c]
            nccls = m == "nccl" or all(teardown_in_nccl(os.path.join(a.out, f"{m}-{r}.log")) for r in hung)
            print(f"[torch-nccl] {m} run: destroy_process_group hung on ranks {hung} after the "
                  f"results were saved, {'inside NCCL' if nccls else 'in cchan'}'s teardown")
            if nccls:
                continue
        if any(rc):
            print(f"[torch-nccl] {m} run failed: exit codes {rc} (logs {a.out}/{m}-*.log)")
            fails += 1
            for r in range(a.nprocs):
                lines = open(os.path.join(a.out, f"{m}-{r}.log"), errors="replace").read().splitlines()
                print(f"--- {m} rank {r}: last lines of its log")
                for line in lines[-25:]:
                    print("    " + line[:300])
    for r in range(a.nprocs):
        got = shim_fallback(os.path.join(a.out, f"cchan-{r}.log"))
        if real and os.path.realpath(got or "/") != real:
            print(f"[torch-nccl] rank {r}: the shim's fallback is {got or 'none'}, not PyTorch's "
                  f"own NCCL {real}")
            fails += 1
    if fails:
        return 1
    cchan_calls = forwarded = 0
    for r in range(a.nprocs):
        text = open(os.path.join(a.out, f"cchan-{r}.log")).read()
        cchan_calls += text.count("-> cchan")
        forwarded += text.count("-> nccl")
    print(f"{'collective':<12} {'dtype':<9} {'count':>8}  result")
    mismatches = 0
    for r in range(a.nprocs):
        ref = torch.load(os.path.join(a.out, f"nccl-{r}.pt"))
        got = torch.load(os.path.join(a.out, f"cchan-{r}.pt"))
        if not got["_shim_loaded"]:
            print(f"[torch-nccl] rank {r}: the shim was not loaded in the cchan run")
            mismatches += 1
        for key in sorted(k for k in ref if not k.startswith("_")):
            same = ref[key].shape == got[key].shape and (
                torch.equal(ref[key], got[key]) or
                (ref[key].isnan().all().item() and got[key].isnan().all().item()))
            if not same:
                mismatches += 1
            if r == 0 or not same:
                coll, dtype, count = key.split("/")
                diff = "" if same else f" max |diff| {(ref[key].double() - got[key].double()).abs().max().item()}"
                print(f"{coll:<12} {dtype:<9} {count:>8}  rank {r} {'identical' if same else 'MISMATCH'}{diff}")
    print(f"[torch-nccl] {'OK' if not mismatches else 'FAIL'}: {mismatches} mismatches between the shim "
          f"and NCCL {ref['_nccl_version']}; shim log: {cchan_calls} (op, size) lines on cchan's path, "
          f"{forwarded} forwarded")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
