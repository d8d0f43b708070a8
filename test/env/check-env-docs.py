#!/usr/bin/env python3
"""docs/environment.md against the environment registry and the sources.

Usage: check-env-docs.py <env_registry_dump> <source root>

Fails (exit 1, naming each problem) when
  - a registered variable is missing from the page's tables, or is listed in a section marked
    "(not in the registry)";
  - a CCHAN_* variable of the page's tables outside such sections is not registered;
  - src/ or kernels/ call getenv() other than in src/host/env.c with anything but a literal name
    that is not CCHAN_* (every CCHAN_* variable goes through the registry);
  - src/ or kernels/ read a literal CCHAN_* name that is not registered;
  - a test, bench, script or the Python package reads a CCHAN_* variable the page does not list.
"""
import fnmatch
import os
import re
import subprocess
import sys

VAR_COLUMNS = {"variable", "rank", "size", "local rank", "local size"}
UNREGISTERED = "(not in the registry)"


def registry(dump):
    out = subprocess.run([dump], check=True, capture_output=True, text=True).stdout
    return {line.split("\t")[0] for line in out.splitlines() if line}


def doc_tables(path):
    """{name: section} of every backticked CCHAN_* name in the variable columns of the tables."""
    found, section, cols = {}, "", None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("#"):
            section, cols = line.lstrip("# ").strip(), None
            continue
        if not line.startswith("|"):
            cols = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols is None:
            cols = [i for i, c in enumerate(cells) if c.lower() in VAR_COLUMNS]
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        for i in cols:
            if i < len(cells):
                for name in re.findall(r"`(CCHAN_[A-Z0-9_*]+)`", cells[i]):
                    found.setdefault(name, section)
    return found


def sources(root, dirs, exts):
    for d in dirs:
        for base, subdirs, files in os.walk(os.path.join(root, d)):
            subdirs[:] = [s for s in subdirs if not s.startswith(".")]
            for f in files:
                if f.endswith(exts) or (not exts and "." not in f):
                    p = os.path.join(base, f)
                    yield os.path.relpath(p, root), open(p, encoding="utf-8", errors="replace").read()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    reg = registry(sys.argv[1])
    root = sys.argv[2]
    docs = doc_tables(os.path.join(root, "docs", "environment.md"))
    errors = []

    def documented(name):
        return any(fnmatch.fnmatchcase(name, pat) for pat in docs)

    for name in sorted(reg):
        if name not in docs:
            errors.append(f"{name}: registered but not in a table of docs/environment.md")
        elif UNREGISTERED in docs[name]:
            errors.append(f"{name}: registered, but docs/environment.md lists it under "
                          f"'{docs[name]}'")
    for name, section in sorted(docs.items()):
        if UNREGISTERED not in section and name not in reg:
            errors.append(f"{name}: in docs/environment.md ('{section}') but not registered "
                          f"(src/host/env.c); a tool's variable goes under a section marked "
                          f"'{UNREGISTERED}'")

    c_exts = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")
    getenv = re.compile(r"\bgetenv\s*\(\s*([^)]*)\)")
    read = re.compile(r"\b(?:cchan_env_get_\w+|cchani_env_\w+)\s*\(\s*\"(CCHAN_[A-Z0-9_]+)\"")
    for path, text in sources(root, ["src", "kernels"], c_exts):
        if path == os.path.join("src", "host", "env.c"):
            continue
        for m in getenv.finditer(text):
            arg = m.group(1).strip()
            if not re.fullmatch(r"\"[A-Za-z0-9_]+\"", arg) or arg.startswith("\"CCHAN_"):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{path}:{line}: getenv({arg}): read CCHAN_* variables through "
                              f"cchan_env_get_* (include/cchan/env.h)")
        for m in read.finditer(text):
            if m.group(1) not in reg:
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{path}:{line}: {m.group(1)} is read but not registered")

    tool = [re.compile(r"\w*env\w*\s*\(\s*\"(CCHAN_[A-Z0-9_]+)\"", re.I),
            re.compile(r"environ(?:\.get|\.pop)?\s*[\[(]\s*[\"'](CCHAN_[A-Z0-9_]+)"),
            re.compile(r"\$\{(CCHAN_[A-Z0-9_]+)[:}-]")]
    exts = c_exts + (".py", ".sh")
    for path, text in sources(root, ["test", "bench", "python", "scripts", "tools"], exts):
        if path.startswith(os.path.join("test", "env", "")):
            continue  # this test's own names
        for rx in tool:
            for m in rx.finditer(text):
                if m.group(1) not in reg and not documented(m.group(1)):
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{path}:{line}: reads {m.group(1)}, which "
                                  f"docs/environment.md does not list")
    for e in errors:
        print("check-env-docs:", e)
    print(f"check-env-docs: {len(reg)} registered, {len(docs)} documented, "
          f"{len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
