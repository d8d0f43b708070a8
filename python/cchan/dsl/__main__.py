"""python3 -m cchan.dsl {compile,verify,show,plans}: see docs/dsl.md."""
import argparse
import json
import os
import shutil
import subprocess
import sys

from . import compiler, lower, plans, show
from .errors import DslError


def _options(pairs):
    out = {}
    for p in pairs or []:
        key, _, value = p.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def cmd_compile(args):
    mod = plans.load_module(args.program)
    options = {}
    variants = getattr(mod, "VARIANTS", {})
    if args.variant:
        if args.variant not in variants:
            sys.exit(f"{args.program}: no variant {args.variant!r} (has {', '.join(variants)})")
        options = dict(variants[args.variant])
    elif variants:
        options = dict(next(iter(variants.values())))
    options.update(_options(args.set))
    doc = mod.program(args.nranks, **options).compile()
    text = plans.dumps(doc)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"{args.output}: {doc['collective']} over {doc['nranks']} ranks, verified",
              file=sys.stderr)


def _load(path):
    with open(path) as f:
        return json.load(f)


def cmd_verify(args):
    for path in args.plans:
        ir = compiler.verify_plan(_load(path))
        nops = sum(len(ops) for _, _, ops in ir.blocks())
        post = "postcondition not checked (custom collective)" if \
            ir.collective.kind == "custom" else "postcondition holds"
        print(f"{path}: {ir.collective.kind} over {ir.nranks} ranks, {nops} operations: schema, "
              f"synchronization, races, deadlock checked; {post}")


def cmd_show(args):
    doc = _load(args.plan)
    ir = lower.from_plan(doc)
    sys.stdout.write(show.listing(ir))
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(show.dot(ir))
        print(f"dot: {args.dot}", file=sys.stderr)
        if args.png:
            exe = shutil.which("dot")
            if exe is None:
                print("png: Graphviz 'dot' is not installed; skipped", file=sys.stderr)
            else:
                subprocess.run([exe, "-Tpng", args.dot, "-o", args.png], check=True)
                print(f"png: {args.png}", file=sys.stderr)


def cmd_plans(args):
    names = plans.write_all(args.output)
    print(f"{len(names)} plans written to {args.output}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m cchan.dsl",
                                 description="Compile, verify and show cchan execution plans.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile a program to a verified plan")
    c.add_argument("program", help="PROG.py, or the name of a shipped algorithm module")
    c.add_argument("--nranks", type=int, required=True)
    c.add_argument("--variant", help="one of the module's VARIANTS (default: the first)")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="program option")
    c.add_argument("-o", "--output")
    c.set_defaults(fn=cmd_compile)
    v = sub.add_parser("verify", help="check plan documents (schema, schedule, postcondition)")
    v.add_argument("plans", nargs="+")
    v.set_defaults(fn=cmd_verify)
    s = sub.add_parser("show", help="per-rank, per-block listing; --dot for the picture")
    s.add_argument("plan")
    s.add_argument("--dot", help="write the dependency graph (Graphviz dot) here")
    s.add_argument("--png", help="also render it to this PNG (needs Graphviz)")
    s.set_defaults(fn=cmd_show)
    p = sub.add_parser("plans", help="regenerate every shipped plan")
    p.add_argument("-o", "--output", default="plans")
    p.set_defaults(fn=cmd_plans)
    args = ap.parse_args(argv)
    try:
        args.fn(args)
    except DslError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
