"""The shipped algorithms and their plans: loading programs, writing plan files."""
import importlib
import importlib.util
import json
import os
import pkgutil

from . import algorithms


def load_module(path):
    """A program module from a file path (or a module name under cchan.dsl.algorithms)."""
    if not path.endswith(".py"):
        return importlib.import_module(f"cchan.dsl.algorithms.{path}")
    name = "cchan_dsl_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shipped():
    """(module, plan name, options, nranks) for every shipped plan, in a stable order."""
    out = []
    for info in sorted(pkgutil.iter_modules(algorithms.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"cchan.dsl.algorithms.{info.name}")
        for name, options in mod.VARIANTS.items():
            for n in mod.RANKS:
                out.append((mod, name, options, n))
    return out


def plan_file(name, nranks):
    return f"{name}.n{nranks}.json"


def dumps(doc):
    """JSON text with one channel or operation per line (diff-friendly, stable)."""
    def fmt(v, ind):
        flat = json.dumps(v, separators=(", ", ": "))
        if not isinstance(v, (dict, list)) or len(flat) + ind <= 100 or (
                isinstance(v, dict) and ("op" in v or "type" in v)):
            return flat
        pad, inner = " " * ind, " " * (ind + 1)
        if isinstance(v, dict):
            items = [f'{inner}{json.dumps(k)}: {fmt(x, ind + 1)}' for k, x in v.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        items = [f"{inner}{fmt(x, ind + 1)}" for x in v]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return fmt(doc, 0) + "\n"


def write_all(outdir):
    """Compiles every shipped plan into outdir; returns the file names written."""
    os.makedirs(outdir, exist_ok=True)
    names = []
    for mod, name, options, n in shipped():
        doc = mod.program(n, **options).compile()
        assert doc["name"] == name, (doc["name"], name)
        fn = plan_file(name, n)
        with open(os.path.join(outdir, fn), "w") as f:
            f.write(dumps(doc))
        names.append(fn)
    return names
