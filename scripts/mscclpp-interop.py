#!/usr/bin/env python3
"""MSCCL++'s own programs through cchan: generate each with MSCCL++'s DSL, import the plan
(python3 -m cchan.dsl import-mscclpp's converter, which verifies it), run it on the host backend.

    scripts/mscclpp-interop.py SNAPSHOT [--ranks 2,4,8] [--build DIR] [--out DIR] [--max-bytes B]

SNAPSHOT is a checkout of MSCCL++ kept outside this repository (its python/mscclpp/language and
default_algos are pure Python; their package's __init__ loads MSCCL++'s native module, so they are
copied under an empty package in --out first). Programs: language/tests/single_node (with
alltoall/), language/tests/multi_node and default_algos, each at every rank count it accepts
(multi-node programs as two nodes of N/2 GPUs). With --build (a cchan build with cchan-run and
test/exec/exec_host), every imported plan also runs on the host backend at its rank count.

Prints one line per plan, then the refusals counted by reason. Exit status 0 (a refusal is a
finding), 2 when SNAPSHOT has no MSCCL++ DSL.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from cchan.dsl import mscclpp  # noqa: E402
from cchan.dsl.errors import DslError  # noqa: E402


def stub_package(snapshot, out):
    """MSCCL++'s DSL under an empty `mscclpp` package: the real __init__ needs the native module."""
    src = os.path.join(snapshot, "python", "mscclpp")
    if not os.path.isdir(os.path.join(src, "language")):
        sys.exit(f"{snapshot}: no python/mscclpp/language (not an MSCCL++ checkout?)")
    pkg = os.path.join(out, "pkg", "mscclpp")
    shutil.rmtree(os.path.dirname(pkg), ignore_errors=True)
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for sub in ("language", "default_algos"):
        if os.path.isdir(os.path.join(src, sub)):
            shutil.copytree(os.path.join(src, sub), os.path.join(pkg, sub))
    return os.path.dirname(pkg), pkg


def programs(pkg):
    tests = os.path.join(pkg, "language", "tests")
    found = []
    for sub in ("single_node", os.path.join("single_node", "alltoall"), "multi_node"):
        d = os.path.join(tests, sub)
        if os.path.isdir(d):
            found += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]
    d = os.path.join(pkg, "default_algos")
    if os.path.isdir(d):
        found += [os.path.join(d, f) for f in sorted(os.listdir(d))
                  if f.endswith(".py") and f != "__init__.py"]
    return found


def arguments(path, n):
    """The command-line arguments of program `path` for n ranks, from the options it declares."""
    with open(path) as f:
        text = f.read()
    opts = set(re.findall(r'add_argument\(\s*"(--[a-z_]+)"', text))
    if "__main__" not in text and "parse_args" not in text:
        return None
    args = ["--name", os.path.splitext(os.path.basename(path))[0]]
    multi = "multi_node" in path or "multi_nodes" in path
    if "--num_gpus" in opts:
        args += ["--num_gpus", str(n)]
    if "--gpus_per_node" in opts:
        if multi and n % 2:
            return None
        args += ["--gpus_per_node", str(n // 2 if multi else n)]
    if "--nnodes" in opts and multi:
        args += ["--nnodes", "2"]
    if "--num_gpus" not in opts and "--gpus_per_node" not in opts:
        return None
    return args


def reason_key(msg):
    """A refusal's reason without its plan-specific details, for counting."""
    m = re.search(r"(?:rank \d+(?:, block \d+)?(?:, op \d+ \([a-z_]+\))?: )?(.*)", msg)
    text = m.group(1) if m else msg
    text = re.sub(r"\d+", "N", text)
    return text[:90]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--build", help="a cchan build folder: run imported plans on the host backend")
    ap.add_argument("--out", help="where generated and imported plans go (default: a temp dir)")
    ap.add_argument("--max-bytes", default="65536", help="largest input exec_host runs")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per generation or run")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="mscclpp-interop.")
    os.makedirs(out, exist_ok=True)
    pypath, pkg = stub_package(a.snapshot, out)
    ranks = [int(x) for x in a.ranks.split(",")]
    env = dict(os.environ, PYTHONPATH=pypath)
    tally = collections.Counter()
    reasons = collections.Counter()
    rows = []
    for path in programs(pkg):
        rel = os.path.relpath(path, pkg)
        for n in ranks:
            args = arguments(path, n)
            if args is None:
                continue
            tag = f"{rel} n={n}"
            try:
                p = subprocess.run([sys.executable, path] + args, env=env, capture_output=True,
                                   text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                rows.append((tag, "MSCCL++ DSL: timed out"))
                tally["not generated"] += 1
                continue
            if p.returncode != 0:
                last = (p.stderr.strip().splitlines() or ["?"])[-1]
                rows.append((tag, f"MSCCL++ DSL refused these arguments: {last[:100]}"))
                tally["not generated"] += 1
                continue
            try:
                plan = json.loads(p.stdout)
            except ValueError:
                rows.append((tag, "MSCCL++ DSL printed no JSON plan"))
                tally["not generated"] += 1
                continue
            name = f"{os.path.splitext(rel)[0].replace(os.sep, '_')}.n{n}"
            with open(os.path.join(out, name + ".mscclpp.json"), "w") as f:
                json.dump(plan, f)
            try:
                doc = mscclpp.import_plan(plan)
            except DslError as e:
                rows.append((tag, f"refused: {e}"))
                reasons[reason_key(str(e))] += 1
                tally["refused"] += 1
                continue
            dst = os.path.join(out, name + ".json")
            with open(dst, "w") as f:
                json.dump(doc, f, indent=1)
            if not a.build:
                rows.append((tag, "imported and verified"))
                tally["imported"] += 1
                continue
            run = [os.path.join(a.build, "cchan-run"), "-n", str(n),
                   os.path.join(a.build, "test", "exec", "exec_host"), dst, a.max_bytes, "1", "0"]
            try:
                r = subprocess.run(run, capture_output=True, text=True, timeout=a.timeout)
                rc = r.returncode
                tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
            except subprocess.TimeoutExpired:
                rc, tail = 124, ["timed out"]
            if rc == 0:
                rows.append((tag, "imported, verified, ran correctly on the host backend"))
                tally["ran"] += 1
            else:
                rows.append((tag, f"imported and verified; host run FAILED (rc {rc}): "
                                  f"{tail[0][:100]}"))
                tally["run failed"] += 1
    width = max((len(t) for t, _ in rows), default=10)
    for tag, what in rows:
        print(f"{tag:<{width}}  {what}")
    print()
    print("plans:", ", ".join(f"{k} {v}" for k, v in sorted(tally.items())),
          f"(of {sum(tally.values())})")
    for why, k in reasons.most_common():
        print(f"  {k:3d}  {why}")
    print(f"plans written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
