"""python3 -m cchan.dsl {compile,verify,show,plans,vocab,import-mscclpp,export-mscclpp}: see
docs/dsl.md."""
import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import traceback

from . import compiler, lower, mscclpp, plans, schema, show, vocabulary
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
    try:
        mod = plans.load_module(args.program)
    except ModuleNotFoundError:
        names = sorted({m.__name__.rsplit(".", 1)[-1] for m, _, _, _ in plans.shipped()})
        raise _ForeignPlan(f"{args.program}: no such program (a PROG.py file, or one of the "
                           f"shipped algorithms: {', '.join(names)})") from None
    if not callable(getattr(mod, "program", None)):
        raise _ForeignPlan(f"{args.program}: defines no program(nranks, ...) function")
    options = {}
    variants = getattr(mod, "VARIANTS", {})
    if args.variant:
        if args.variant not in variants:
            sys.exit(f"{args.program}: no variant {args.variant!r} (has {', '.join(variants)})")
        options = dict(variants[args.variant])
    elif variants:
        options = dict(next(iter(variants.values())))
    options.update(_options(args.set))
    params = list(inspect.signature(mod.program).parameters.values())
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
    known = [p.name for p in params[1:] if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    unknown = [k for k in options if k not in known and not takes_any]
    if unknown:
        raise _ForeignPlan(f"{args.program}: --set {unknown[0]}: not an option of this program "
                           f"(it takes: {', '.join(known) or 'none'})")
    try:
        doc = mod.program(args.nranks, **options).compile()
    except DslError:
        raise
    except Exception as e:  # the program itself failed: say where, without a traceback
        site = traceback.extract_tb(e.__traceback__)[-1]
        raise _ForeignPlan(f"{args.program}: program(nranks={args.nranks}"
                           f"{''.join(f', {k}={v!r}' for k, v in options.items())}) raised "
                           f"{type(e).__name__}: {e} ({site.filename}:{site.lineno})") from None
    text = plans.dumps(doc)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"{args.output}: {doc['collective']} over {doc['nranks']} ranks, verified",
              file=sys.stderr)


class _ForeignPlan(Exception):
    """A document in another tool's format, where a cchan plan was expected."""


def _load(path, foreign_ok=False):
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError as e:
        raise _ForeignPlan(f"{path}: not JSON ({e})") from None
    if not foreign_ok and mscclpp.is_mscclpp(doc):
        raise _ForeignPlan(mscclpp.not_cchan_message(path))
    return doc


def _write(doc, path, text=None):
    text = text if text is not None else plans.dumps(doc)
    if path in (None, "-"):
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def cmd_import_mscclpp(args):
    m = _load(args.plan, foreign_ok=True)
    if not mscclpp.is_mscclpp(m):
        raise _ForeignPlan(f"{args.plan}: not an MSCCL++ execution plan (it has no 'gpus' list)")
    doc = mscclpp.import_plan(m)
    _write(doc, args.output)
    print(f"{args.output or '-'}: {doc['collective']} over {doc['nranks']} ranks from MSCCL++ "
          f"plan {args.plan}, verified", file=sys.stderr)


def cmd_export_mscclpp(args):
    doc = _load(args.plan)
    m = mscclpp.export_plan(doc)
    _write(m, args.output, json.dumps(m, indent=1) + "\n")
    print(f"{args.output or '-'}: MSCCL++ execution plan of {args.plan}", file=sys.stderr)


def cmd_verify(args):
    for path in args.plans:
        ir = compiler.verify_plan(_load(path))
        nops = sum(len(ops) for _, _, ops in ir.blocks())
        c = ir.collective
        post = "postcondition not checked (a custom plan without one)" if \
            c.kind == "custom" and c._post is None else "postcondition holds"
        print(f"{path}: {ir.collective.kind} over {ir.nranks} ranks, {nops} operations: schema, "
              f"synchronization, races, deadlock checked; {post}")


def cmd_show(args):
    doc = _load(args.plan)
    schema.validate_plan(doc)  # a malformed plan is named, not a traceback of the lowering
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


def cmd_vocab(args):
    if args.write:
        with open(vocabulary.SCHEMA) as f:
            sch = json.load(f)
        with open(vocabulary.SCHEMA, "w") as f:
            f.write(vocabulary.schema_text(vocabulary.schema_with_enums(sch)))
        print(f"{vocabulary.SCHEMA}: enums written from vocabulary.json", file=sys.stderr)
    if args.check or args.write:
        bad = vocabulary.drift()
        for line in bad:
            print(line, file=sys.stderr)
        if bad:
            return 1
        print("kernels/exec, plan.schema.json and docs/plan-format.md match vocabulary.json",
              file=sys.stderr)
        return 0
    print("/* kernels/exec/exec_program.h */")
    print(vocabulary.c_opcode_enum())
    print("/* kernels/exec/exec_plan.c */")
    print(vocabulary.c_name_table())
    print("/* limits */")
    for key, spec in vocabulary.V["limits"].items():
        print(f"/* {key} = {spec['value']}: {spec['what']} */")
    return 0


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
    w = sub.add_parser("vocab", help="the vocabulary: print the C tables, check or regenerate "
                                     "what is made from it")
    w.add_argument("--check", action="store_true",
                   help="fail when kernels/exec, the schema or plan-format.md drifted")
    w.add_argument("--write", action="store_true", help="regenerate plan.schema.json's enums")
    w.set_defaults(fn=cmd_vocab)
    i = sub.add_parser("import-mscclpp", help="convert an MSCCL++ execution plan into a cchan "
                                              "plan, then verify it")
    i.add_argument("plan")
    i.add_argument("-o", "--output")
    i.set_defaults(fn=cmd_import_mscclpp)
    e = sub.add_parser("export-mscclpp", help="convert a cchan plan into an MSCCL++ execution "
                                              "plan")
    e.add_argument("plan")
    e.add_argument("-o", "--output")
    e.set_defaults(fn=cmd_export_mscclpp)
    args = ap.parse_args(argv)
    try:
        return args.fn(args) or 0
    except DslError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except (_ForeignPlan, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
