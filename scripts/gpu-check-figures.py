#!/usr/bin/env python3
"""Key figures of one GPU-check stage, on one line, each beside its same-run baseline.

    gpu-check-figures.py coll  COLL.json          cchan-coll-bench -J output
    gpu-check-figures.py moe   MOE.json ll|ht     cchan-moe-bench --json output
    gpu-check-figures.py shim  NCCL-TESTS.log     scripts/nccl-tests.sh output
    gpu-check-figures.py python BENCH_PY.log      python/bench/bench_py.py output

Prints nothing (and exits 0) when the input is missing or holds no figures: the summary row then
says only the stage's result.
"""
import json
import re
import sys

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SHORT = {"allreduce": "AR", "allgather": "AG", "reducescatter": "RS"}


def size_name(b):
    for unit, name in ((GiB, "G"), (MiB, "M"), (KiB, "K")):
        if b >= unit and b % unit == 0:
            return f"{b // unit}{name}"
    return str(b)


def coll(path):
    rows = json.load(open(path))["rows"]
    out = []
    for op in ("allreduce", "allgather", "reducescatter"):
        mine = [r for r in rows if r.get("op") == op and r.get("oop_us")]
        for want in (KiB, MiB, 256 * MiB):
            r = min(mine, key=lambda r: abs(r["size"] - want), default=None)
            if r is None or r["size"] > 4 * want or r["size"] * 4 < want:
                continue
            nccl = r.get("nccl_best_us")
            wrong = " WRONG" if r.get("wrong") or r.get("ip_wrong") or r.get("oob") else ""
            if nccl:
                out.append(f"{SHORT[op]} {size_name(r['size'])} {r['oop_us']:.3g}/{nccl:.3g}us "
                           f"({nccl / r['oop_us']:.2f}x){wrong}")
            else:
                out.append(f"{SHORT[op]} {size_name(r['size'])} {r['oop_us']:.3g}us (no NCCL){wrong}")
    return "; ".join(out)


def moe(path, mode):
    d = json.load(open(path))
    v = d["variants"][0][mode]
    if mode == "ll":
        return (f"LL {v['tokens']} tok: dispatch fp8 {v['dispatch_fp8_us']:.1f}us "
                f"(NCCL a2a {v['nccl_dispatch_us']:.1f}), combine bf16 {v['combine_bf16_us']:.1f}us "
                f"(NCCL {v['nccl_combine_us']:.1f})")
    return (f"HT {v['tokens']} tok: dispatch {v['dispatch_bf16_us']:.0f}us "
            f"(NCCL a2a {v['nccl_dispatch_us']:.0f}), combine {v['combine_bf16_us']:.0f}us "
            f"(NCCL {v['nccl_combine_us']:.0f})")


def shim(path):
    """Per collective: the largest size's out-of-place busbw, shim vs real NCCL, and verdicts."""
    text = open(path).read()
    out = []
    for m in re.finditer(r"\] (\w+), (\w+) mode \((\d+) GPUs\).*?\n(.*?)(?:\n\n|\Z)", text, re.S):
        t, table = m.group(1), m.group(4).splitlines()
        last = None
        for line in table:
            parts = line.replace("|", " ").split()
            if len(parts) >= 11 and parts[0].isdigit():
                last = parts
        if last:
            # bytes, nccl: oop us, busbw, ip us, busbw, wrong | shim: the same five
            out.append(f"{t} {size_name(int(last[0]))} {float(last[7]):.0f}/{float(last[2]):.0f}GB/s")
    verdicts = re.findall(r"^\s+(?:nccl|cchan)\s+\w+\s+\w+\s+rc=\d+\s+oob=.{6} (OK|FAIL)", text, re.M)
    oks, fails = verdicts.count("OK"), verdicts.count("FAIL")
    cchan_path = re.findall(r"cchan-path calls logged: (\d+), forwarded: (\d+)", text)
    paths = ", ".join(f"{a}/{b}" for a, b in cchan_path)
    return (f"{oks} OK, {fails} FAIL; shim/NCCL busbw " + "; ".join(out)
            + (f"; cchan/forwarded calls {paths}" if paths else ""))


def python(path):
    text = open(path).read()
    out = []
    for key in ("LL fp8 dispatch+combine, Buffer (int32 idx)", "all_reduce 1 KiB f32, comm.all_reduce"):
        m = re.search(re.escape(key) + r"\s+([\d.]+)\s+(\S+ ?\S*)", text)
        if m:
            out.append(f"{key.split(',')[0]} {m.group(1)}us ({m.group(2).strip()} vs C)")
    m = re.search(r"bit-identical.*: (\w+) on every rank", text)
    if m:
        out.append(f"bit-identical: {m.group(1)}")
    return "; ".join(out)


def main():
    kind, path = sys.argv[1], sys.argv[2]
    try:
        if kind == "coll":
            print(coll(path))
        elif kind == "moe":
            print(moe(path, sys.argv[3]))
        elif kind == "shim":
            print(shim(path))
        elif kind == "python":
            print(python(path))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass


if __name__ == "__main__":
    main()
