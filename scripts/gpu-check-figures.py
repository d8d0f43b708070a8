#!/usr/bin/env python3
"""Key figures of one GPU-check stage, on one line, each beside its same-run baseline.

    gpu-check-figures.py coll  COLL.json          cchan-coll-bench -J output
    gpu-check-figures.py moe   MOE.json ll|ht     cchan-moe-bench --json output
    gpu-check-figures.py shim  NCCL-TESTS.log     scripts/nccl-tests.sh output
    gpu-check-figures.py python BENCH_PY.log      python/bench/bench_py.py output
    gpu-check-figures.py profile NCU.csv [LOG]    ncu --csv --page raw --log-file output

Prints nothing (and exits 0) when the input is missing or holds no figures: the summary row then
says only the stage's result.
"""
import csv
import json
import re
import statistics
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


def _num(v):
    """An ncu CSV value as a float (thousands separators dropped); None where there is none."""
    try:
        return float(v.replace(",", "").strip())
    except (AttributeError, ValueError):
        return None


US_PER = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
          "second": 1e6, "s": 1e6}


def profile(path, *more):
    """Per kernel name: profiled launches, median duration, grid x block, registers, SM figures
    (active cycles over elapsed; sm__throughput where it was asked for); then ncu's passes per
    kernel. Empty when the CSV holds no kernel row."""
    report, passes = [], []
    for p in (path,) + more:
        try:
            text = open(p, errors="replace").read()
        except OSError:
            continue
        rows = []
        for line in text.splitlines():
            line = re.sub(r"^\[r\d+\] ", "", line)  # a launcher's rank prefix, if any
            if line.startswith('"'):
                rows.append(line)
            m = re.search(r"==PROF== Profiling .*?(\d+) pass(?:es)?\s*$", line)
            if m:
                passes.append(int(m.group(1)))
        report = report or rows  # the first file with CSV lines holds the report
    table = list(csv.reader(report))
    if not table:
        return ""
    head = table[0]
    col = {h: i for i, h in enumerate(head)}
    units = {}
    data = []
    for r in table[1:]:
        if len(r) != len(head) or r == head:
            continue
        if not r[0].strip().isdigit():  # the units line under the header
            units = {h: r[i] for i, h in enumerate(head)}
            continue
        data.append(r)
    names = ("Kernel Name", "Function Name", "Demangled Name", "Name")
    name_col = next((c for c in names if c in col), None)
    if name_col is None or not data:
        return ""

    def val(r, key):
        return _num(r[col[key]]) if key in col else None

    groups = {}
    for r in data:
        name = re.sub(r"\(.*$", "", r[col[name_col]]).strip() or "?"
        groups.setdefault(name, []).append(r)
    out = []
    scale = US_PER.get(units.get("gpu__time_duration.sum", "nsecond").strip(), 1e-3)
    for name, rs in groups.items():
        parts = [f"{name} x{len(rs)}"]
        durs = [d * scale for d in (val(r, "gpu__time_duration.sum") for r in rs) if d is not None]
        if durs:
            # The first launches of a communication kernel under ncu wait for a peer that ran
            # ahead while ncu attached (100+ us at 2 ranks, 2026-11-28): the steady state is the
            # later half, and the minimum is the closest to an unprofiled run.
            late = durs[len(durs) // 2:]
            rng = f"; all {min(durs):.3g}..{max(durs):.3g}" if len(durs) > 1 else ""
            parts.append(f"{statistics.median(late):.3g} us (median of the last {len(late)}{rng})")
        r0 = rs[0]
        grid, block = val(r0, "launch__grid_size"), val(r0, "launch__block_size")
        if grid is None and "Grid Size" in col:
            grid = r0[col["Grid Size"]]
        if block is None and "Block Size" in col:
            block = r0[col["Block Size"]]
        if grid is not None or block is not None:
            g = f"{grid:.0f}" if isinstance(grid, float) else grid
            b = f"{block:.0f}" if isinstance(block, float) else block
            parts.append(f"grid {g} x block {b}")
        regs = val(r0, "launch__registers_per_thread")
        if regs is not None:
            parts.append(f"{regs:.0f} regs")
        smem = val(r0, "launch__shared_mem_per_block_dynamic")
        if smem:
            unit = units.get("launch__shared_mem_per_block_dynamic") or "byte"
            parts.append(f"{smem:.0f} {unit} dyn smem")
        act = [(val(r, "sm__cycles_active.avg"), val(r, "sm__cycles_elapsed.avg")) for r in rs]
        act = [100.0 * a / e for a, e in act if a is not None and e]
        if act:
            parts.append(f"SM active {statistics.median(act):.1f}%")
        thr = [t for t in (val(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed") for r in rs)
               if t is not None]
        if thr:
            parts.append(f"SM throughput {statistics.median(thr):.1f}%")
        out.append(parts[0] + (": " + ", ".join(parts[1:]) if len(parts) > 1 else ""))
    if passes:
        out.append(f"ncu {max(passes)} pass{'es' if max(passes) > 1 else ''} per kernel")
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
        elif kind == "profile":
            print(profile(path, *sys.argv[3:]))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass


if __name__ == "__main__":
    main()
