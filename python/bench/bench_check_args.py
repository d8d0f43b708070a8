"""What check_args costs a collective: comm.all_reduce on CPU tensors (the host backend) with and
without the per-call agreement of (op, dtype, numel) over the bootstrap, at 1 KiB, 64 KiB and
1 MiB, the median of 5 runs of N calls each.

    CCHAN_LIBRARY_PATH=<build dir>:<build dir>/kernels/coll PYTHONPATH=python \
        cchan-run -n 2 /usr/bin/python3 python/bench/bench_check_args.py [--calls 3000]

Prints a table on rank 0 (docs/python.md, "Errors", has a run of it).
"""

import argparse
import statistics
import time

import torch

import cchan

ap = argparse.ArgumentParser()
ap.add_argument("--calls", type=int, default=3000, help="calls per run at 1 and 64 KiB")
args = ap.parse_args()

SIZES = (1 << 10, 64 << 10, 1 << 20)
res = {}
rank = 0
for nbytes in SIZES:
    for check_args in (False, True):
        with cchan.Comm(platform="host", check_args=check_args) as comm:
            rank = comm.rank
            t = torch.ones(nbytes // 4)
            out = torch.empty_like(t)
            for _ in range(200):
                comm.all_reduce(t, out=out)
            n = args.calls if nbytes <= (64 << 10) else max(args.calls // 10, 1)
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    comm.all_reduce(t, out=out)
                runs.append((time.perf_counter() - t0) / n * 1e6)
            res[(nbytes, check_args)] = statistics.median(runs)
if rank == 0:
    print(f"{'bytes':>8}  {'off (us)':>9}  {'on (us)':>9}  {'cost':>8}")
    for nbytes in SIZES:
        off, on = res[(nbytes, False)], res[(nbytes, True)]
        print(f"{nbytes:>8}  {off:9.1f}  {on:9.1f}  {(on / off - 1) * 100:+7.1f}%")
