#!/usr/bin/env python3
"""Turns cchan-bench JSON (-J) into PNG charts and a compact summary table (cchan-coll-bench JSON
too: coll-<op>-<type>.png time and bandwidth against NCCL, coll-fused.png).

    scripts/plot-bench.py bench-results.json [-o DIR]     charts into DIR (default: beside the JSON)
    scripts/plot-bench.py bench-results.json --summary    the summary table only (no matplotlib)

Charts (each figure next to its same-run baseline, dashed):
    mem-bw.png    memory-channel put/get GB/s vs size, one colour per grid, vs the plain SM copy
    latency.png   LL8/LL16 one-way latency vs size, LL bandwidth vs size, signal latencies
    port-bw.png   port-channel put GB/s vs size vs the copy engine
Needs matplotlib (Debian: apt-get install python3-matplotlib); without it, says so and exits 0.
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def rows(d, sub, op):
    return sorted((r for r in d["rows"] if r["subcommand"] == sub and r["op"] == op),
                  key=lambda r: (r["grid"], r["size"]))


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return "%dB" % n


# ---------------------------------------------------------------- summary

# (label, subcommand, op, preferred sizes, grid (None: any; "max"/"min": largest/smallest), target)
# A target is (kind, value, source): "ratio>=" / "ratio<=" compare cchan/baseline, "value<=" the
# figure itself, "value>=" likewise; from the issues' "done means" lines.
SUMMARY = [
    ("mem put, largest size, largest grid", "mem-bw", "put", [1 << 30, 512 << 20, 256 << 20], "max", ("ratio>=", 0.97, "target")),
    ("mem put, largest size, smallest grid", "mem-bw", "put", [1 << 30, 512 << 20, 256 << 20], "min", ("ratio>=", 0.97, "target")),
    ("mem get, largest size, largest grid", "mem-bw", "get", [1 << 30, 512 << 20, 256 << 20], "max", None),
    ("mem get, largest size, smallest grid", "mem-bw", "get", [1 << 30, 512 << 20, 256 << 20], "min", None),
    ("mem signal->wait one way", "mem-lat", "signal-wait", [0], None, ("ratio<=", 1.10, "target")),
    ("mem signal->wait vs raw, same words", "mem-lat", "signal-wait-same-words", [0], None, ("ratio<=", 1.10, "same words")),
    ("relaxed flag one way (no fences; scale)", "mem-lat", "relaxed-flag", [0], None, None),
    ("raw flag by remote add, one way", "mem-lat", "raw-red-add-flag", [0], None, None),
    ("LL8 one packet from registers, one way", "mem-lat", "ll8-one-packet", [8], None, ("value<=", 675.0, "1.35 us round trip")),
    ("LL16 one packet from registers, one way", "mem-lat", "ll16-one-packet", [16], None, ("value<=", 815.0, "MSCCL++ LL16 1.63 us round trip")),
    ("LL8 8 B one way", "mem-lat", "ll8", [8], None, None),
    ("LL8 1 KiB one way", "mem-lat", "ll8", [1024], None, ("value<=", 1500.0, "target")),
    ("LL8 64 KiB one way", "mem-lat", "ll8", [65536], None, None),
    ("LL16 8 B one way", "mem-lat", "ll16", [8], None, None),
    ("LL16 1 KiB one way", "mem-lat", "ll16", [1024], None, ("value<=", 1500.0, "target")),
    ("LL16 64 KiB one way", "mem-lat", "ll16", [65536], None, None),
    ("LL8 bandwidth, largest", "mem-lat", "ll8-bw", [16 << 20, 4 << 20], None, None),
    ("LL16 bandwidth, largest", "mem-lat", "ll16-bw", [16 << 20, 4 << 20], None, None),
    # A put of S bytes is one put call (the device splits it into 2 GiB triggers); the chunked rows
    # show what splitting into -c sized puts costs (one copy-engine job per chunk).
    ("port put 4 MiB", "port-bw", "put-whole", [4 << 20], None, ("ratio>=", 0.90, "target")),
    ("port put 128 MiB", "port-bw", "put-whole", [128 << 20], None, ("value>=", 364.0, "MSCCL++")),
    ("port put 256 MiB", "port-bw", "put-whole", [256 << 20], None, ("ratio>=", 0.98, "target")),
    ("port put 1 GiB", "port-bw", "put-whole", [1 << 30], None, ("ratio>=", 0.98, "target")),
    ("port put in 4 MiB chunks, 256 MiB", "port-bw", "put", [256 << 20], None, None),
    ("port put in 4 MiB chunks, 1 GiB", "port-bw", "put", [1 << 30], None, None),
    ("port put+flush 4 MiB", "port-bw", "put-flush", [4 << 20], None, None),
    ("port put+flush 1 GiB", "port-bw", "put-flush", [1 << 30], None, None),
    ("port signal->wait one way", "port-lat", "signal-wait", [0], None, ("value<=", 4000.0, "target")),
    ("port put_signal 8 B one way", "port-lat", "put-signal-wait", [8], None, ("value<=", 7000.0, "target")),
    ("port flush, nothing outstanding", "port-lat", "flush", [0], None, None),
    ("port put 8 B + flush", "port-lat", "put8-flush", [8], None, None),
    ("FIFO rate, signals", "port-lat", "fifo-signal", None, None, None),
    ("FIFO rate, 8-byte puts", "port-lat", "fifo-put8", None, None, None),
]


def pick(d, sub, op, sizes, grid):
    rs = rows(d, sub, op)
    if not rs:
        return None
    if grid == "max":
        g = max(r["grid"] for r in rs)
        rs = [r for r in rs if r["grid"] == g]
    elif grid == "min":
        g = min(r["grid"] for r in rs)
        rs = [r for r in rs if r["grid"] == g]
    if sizes:
        for s in sizes:
            hit = [r for r in rs if r["size"] == s]
            if hit:
                return hit[0]
        if sizes[0] > 0 and len(sizes) > 1:  # "largest": fall back to the largest measured
            return max(rs, key=lambda r: r["size"])
        return None
    return rs[0]


def judge(r, target):
    if not target:
        return ""
    kind, v, src = target
    x = r["ratio"] if kind.startswith("ratio") else r["value"]
    if x is None:
        return "?"
    ok = x >= v if kind.endswith(">=") else x <= v
    what = kind.split("<")[0].split(">")[0]
    return "%s (%s %s %g, %s)" % ("met" if ok else "MISSED", what, kind[-2:], v, src)


def summary(d, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    p("cchan-bench summary: %s; commit %s; %s; %d ranks; backend %s; result %s" %
      (d.get("device", "?"), d.get("commit", "?"), d.get("date", "?"), d.get("nranks", 0),
       d.get("backend", "?"), d.get("result", "?")))
    gpu = d.get("backend") == "cuda" and "share one GPU" not in d.get("device", "")
    p("%-40s %6s %16s %16s %7s %-9s %s" % ("what", "size", "cchan", "baseline", "ratio", "check",
                                            "target" if gpu else "(targets apply to runs on two GPUs)"))
    for label, sub, op, sizes, grid, target in SUMMARY:
        r = pick(d, sub, op, sizes, grid)
        if r is None:
            continue
        size = human(r["size"]) if r["size"] else "-"
        if r["grid"]:
            label = "%s (%dx%d)" % (label, r["grid"], r["threads"])
        p("%-40s %6s %9.2f %-6s %9.2f %-6s %7.3f %-9s %s" %
          (label[:40], size, r["value"] or 0, r["units"], r["baseline"] or 0, r["units"],
           r["ratio"] or 0, r["check"], judge(r, target) if gpu else ""))
    for op in ("memory-put", "port-put"):
        rs = rows(d, "matrix", op)
        if rs:
            p("%-40s %6s %9.2f GB/s   %9.2f GB/s   %7.3f %-9s" %
              ("matrix SUM " + op + " (%d pairs)" % len(rs), human(rs[0]["size"]), sum(r["value"] for r in rs),
               sum(r["baseline"] for r in rs), sum(r["value"] for r in rs) / max(1e-9, sum(r["baseline"] for r in rs)),
               "ok" if all(r["check"] in ("ok", "-") for r in rs) else "FAIL"))
    bad = [r for r in d["rows"] if r["errors"] and r["errors"] > 0]
    p("rows: %d, failed checks: %d; %s" % (len(d["rows"]), len(bad), d.get("result", "?")))


# ---------------------------------------------------------------- charts

def plot_pairs(ax, d, sub, op, ylabel, logy=False, per_grid=True):
    rs = rows(d, sub, op)
    if not rs:
        return False
    grids = sorted({r["grid"] for r in rs}) if per_grid else [None]
    for i, g in enumerate(grids):
        sel = [r for r in rs if g is None or r["grid"] == g]
        xs = [r["size"] for r in sel]
        tag = (" %dx%d" % (g, sel[0]["threads"])) if g and len(grids) > 1 else ""
        line, = ax.plot(xs, [r["value"] for r in sel], "o-", ms=3, label="cchan %s%s" % (op, tag))
        ax.plot(xs, [r["baseline"] for r in sel], "s--", ms=3, color=line.get_color(),
                label="%s%s" % (sel[0]["baseline_op"], tag))
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("bytes")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    ax.xaxis.set_major_formatter(_fmt_bytes())
    return True


def _fmt_bytes():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda x, _: human(int(x)) if x >= 1 else "")


def charts(d, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # Debian's python3-matplotlib lives in the system interpreter, which may not be the first
        # python3 on PATH (pyenv, virtual environments): try it once.
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) \
                and not os.environ.get("CCHAN_PLOT_REEXEC"):
            os.environ["CCHAN_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        print("plot-bench: matplotlib is not installed (Debian: apt-get install python3-matplotlib); "
              "no charts, the JSON has every figure")
        return []
    os.makedirs(outdir, exist_ok=True)
    title = "cchan-bench, %s, commit %s, %s" % (d.get("device", "?"), d.get("commit", "?"), d.get("date", "?")[:10])
    made = []

    fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
    if plot_pairs(axs[0], d, "mem-bw", "put", "GB/s") | plot_pairs(axs[1], d, "mem-bw", "get", "GB/s"):
        axs[0].set_title("memory channel put vs SM copy (same grid)", fontsize=9)
        axs[1].set_title("memory channel get vs SM copy (same grid)", fontsize=9)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        made.append(os.path.join(outdir, "mem-bw.png"))
        fig.savefig(made[-1], dpi=120)
    plt.close(fig)

    fig, axs = plt.subplots(1, 3, figsize=(17, 4.8))
    any_ = plot_pairs(axs[0], d, "mem-lat", "ll8", "one-way latency, ns", logy=True, per_grid=False)
    any_ |= plot_pairs(axs[0], d, "mem-lat", "ll16", "one-way latency, ns", logy=True, per_grid=False)
    axs[0].set_title("LL message one-way latency (median)", fontsize=9)
    bw = plot_pairs(axs[1], d, "mem-lat", "ll8-bw", "GB/s", per_grid=False)
    bw |= plot_pairs(axs[1], d, "mem-lat", "ll16-bw", "GB/s", per_grid=False)
    if not bw:  # no multi-block rows (host backend): one message's bandwidth from the latency rows
        for op in ("ll8", "ll16"):
            rs = rows(d, "mem-lat", op)
            if rs:
                xs = [r["size"] for r in rs]
                line, = axs[1].plot(xs, [r["size"] / r["value"] for r in rs], "o-", ms=3, label="cchan " + op)
                axs[1].plot(xs, [r["size"] / r["baseline"] for r in rs], "s--", ms=3, color=line.get_color(),
                            label=rs[0]["baseline_op"])
                axs[1].set_xscale("log", base=2)
                axs[1].xaxis.set_major_formatter(_fmt_bytes())
                axs[1].legend(fontsize=6)
                axs[1].set_xlabel("bytes")
                axs[1].set_ylabel("GB/s")
                axs[1].grid(True, which="both", alpha=0.3)
    axs[1].set_title("LL bandwidth (bytes / one-way time)", fontsize=9)
    bars = [(r["subcommand"].split("-")[0] + " " + r["op"], r["value"], r["baseline"], r["baseline_op"])
            for r in d["rows"] if r["units"] == "ns" and r["op"] in ("signal-wait", "put-signal-wait", "relaxed-flag", "flush", "put8-flush")]
    if bars:
        xs = range(len(bars))
        axs[2].bar([x - 0.2 for x in xs], [b[1] for b in bars], 0.4, label="cchan")
        axs[2].bar([x + 0.2 for x in xs], [b[2] for b in bars], 0.4, label="baseline")
        axs[2].set_xticks(list(xs))
        axs[2].set_xticklabels(["%s\nvs %s" % (b[0], b[3]) for b in bars], fontsize=6)
        axs[2].set_ylabel("latency, ns (median)")
        axs[2].set_yscale("log")
        axs[2].legend(fontsize=7)
        axs[2].set_title("signal -> wait (one way), flush (per call)", fontsize=9)
        any_ = True
    if any_:
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        made.append(os.path.join(outdir, "latency.png"))
        fig.savefig(made[-1], dpi=120)
    plt.close(fig)

    fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
    drew = plot_pairs(axs[0], d, "port-bw", "put", "GB/s", per_grid=False)
    if rows(d, "port-bw", "put-whole"):
        rs = rows(d, "port-bw", "put-whole")
        axs[0].plot([r["size"] for r in rs], [r["value"] for r in rs], "^-", ms=3, label="cchan put, one put per message")
        axs[0].legend(fontsize=6)
    if drew | plot_pairs(axs[1], d, "port-bw", "put-flush", "GB/s", per_grid=False):
        axs[0].set_title("port channel put (flush at the end) vs copy engine", fontsize=9)
        axs[1].set_title("port channel put + flush per message vs copy + sync", fontsize=9)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        made.append(os.path.join(outdir, "port-bw.png"))
        fig.savefig(made[-1], dpi=120)
    plt.close(fig)
    for m in made:
        print("plot-bench: wrote", m)
    return made


# ---------------------------------------------------------------- cchan-coll-bench JSON

def coll_summary(d, out=sys.stdout):
    print("cchan-coll-bench, %s, commit %s, %s: %s" % (d.get("device"), d.get("commit"), d.get("date"), d.get("nccl")), file=out)
    for r in d["rows"]:
        if r["op"] == "fused":
            print("fused  tokens %4d hidden %5d  fused %8s us  best NCCL+kernel %8s us  speedup %s"
                  % (r["tokens"], r["hidden"], r["fused_us"], r["nccl_best_us"], r["speedup"]), file=out)
        else:
            t = min([x for x in (r["oop_us"], r["ip_us"]) if x] or [None])
            print("%-13s %-8s %-16s %10s  cchan %9s us  busbw %7.1f  best NCCL %9s us  speedup %.2f  wrong %s"
                  % (r["op"], r["dtype"], r["algo"], human(r["size"]), t, r["busbw"], r["nccl_best_us"],
                     r["speedup"], r["wrong"]), file=out)


def coll_charts(d, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        system = "/usr/bin/python3"  # Debian's matplotlib: see charts()
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) \
                and not os.environ.get("CCHAN_PLOT_REEXEC"):
            os.environ["CCHAN_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        print("plot-bench: matplotlib is not installed; no charts")
        return []
    os.makedirs(outdir, exist_ok=True)
    title = "cchan-coll-bench, %s, commit %s, %s" % (d.get("device", "?"), d.get("commit", "?"), d.get("date", "?")[:10])
    made = []
    keys = sorted({(r["op"], r["dtype"]) for r in d["rows"] if r["op"] != "fused"})
    for op, dt in keys:
        rs = [r for r in d["rows"] if r["op"] == op and r["dtype"] == dt]
        fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
        for algo in sorted({r["algo"] for r in rs}):
            ar = sorted((r for r in rs if r["algo"] == algo), key=lambda r: r["size"])
            pts = [(r["size"], min(x for x in (r["oop_us"], r["ip_us"]) if x)) for r in ar if r["oop_us"] or r["ip_us"]]
            if pts:
                axs[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label="cchan " + algo)
                axs[1].plot([p[0] for p in pts], [p[0] / p[1] / 1e3 for p in pts], "o-", ms=3, label="cchan " + algo)
        base = {r["size"]: r for r in rs}
        for key, label in (("nccl_us", "NCCL default"), ("nccl_sym_us", "NCCL symmetric")):
            pts = sorted((s, r[key]) for s, r in base.items() if r.get(key))
            if pts:
                axs[0].plot([p[0] for p in pts], [p[1] for p in pts], "s--", ms=3, label=label)
                axs[1].plot([p[0] for p in pts], [p[0] / p[1] / 1e3 for p in pts], "s--", ms=3, label=label)
        for ax, yl in ((axs[0], "time per op, us"), (axs[1], "algbw, GB/s")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(_fmt_bytes())
            ax.set_xlabel("bytes")
            ax.set_ylabel(yl)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        axs[0].set_title("%s %s: time (lower is better)" % (op, dt), fontsize=9)
        axs[1].set_title("%s %s: algorithm bandwidth" % (op, dt), fontsize=9)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        made.append(os.path.join(outdir, "coll-%s-%s.png" % (op, dt)))
        fig.savefig(made[-1], dpi=120)
        plt.close(fig)
    fused = [r for r in d["rows"] if r["op"] == "fused"]
    if fused:
        hiddens = sorted({r["hidden"] for r in fused})
        fig, axs = plt.subplots(1, len(hiddens), figsize=(6.5 * len(hiddens), 4.8), squeeze=False)
        for ax, h in zip(axs[0], hiddens):
            rs = sorted((r for r in fused if r["hidden"] == h), key=lambda r: r["tokens"])
            xs = [r["tokens"] for r in rs]
            for key, label, style in (("fused_us", "cchan fused", "o-"), ("cchan_unfused_us", "cchan all-reduce + kernel", "^:"),
                                      ("nccl_us", "NCCL + kernel", "s--"), ("nccl_sym_us", "NCCL symmetric + kernel", "d--")):
                pts = [(x, r[key]) for x, r in zip(xs, rs) if r.get(key)]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=3, label=label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.set_ylabel("us per layer epilogue")
            ax.set_title("AllReduce + residual + RMSNorm, bf16, hidden %d" % h, fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        made.append(os.path.join(outdir, "coll-fused.png"))
        fig.savefig(made[-1], dpi=120)
        plt.close(fig)
    for m in made:
        print("plot-bench: wrote", m)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("-o", "--outdir", help="where the PNGs go (default: beside the JSON)")
    ap.add_argument("--summary", action="store_true", help="print the summary table only")
    a = ap.parse_args()
    d = load(a.json)
    if d.get("bench") == "cchan-coll-bench":
        if a.summary:
            coll_summary(d)
        else:
            coll_charts(d, a.outdir or os.path.dirname(os.path.abspath(a.json)))
        return 0
    if a.summary:
        summary(d)
        return 0
    charts(d, a.outdir or os.path.dirname(os.path.abspath(a.json)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
