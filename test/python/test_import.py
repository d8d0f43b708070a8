"""`import cchan` needs neither torch nor the C libraries (cchan.dsl, pure Python, must keep
working without them); the tensor API says what is missing; the libraries are found through
CCHAN_LIBRARY_PATH, and a clear ImportError names CCHAN_LIBRARY_PATH where they are not found; the
config structs carry the bindings' version, which a library older than them refuses.

    python3 test/python/test_import.py <build dir>
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
pkg = os.path.join(here, "..", "..", "python")
failures = []


def run(code, env_extra, path):
    env = {k: v for k, v in os.environ.items() if k not in ("CCHAN_LIBRARY_PATH", "PYTHONPATH")}
    env.update(env_extra)
    env["PYTHONPATH"] = path
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def expect(cond, what, out=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        print(out)


# 1. without torch: import cchan works, the tensor API names what is missing
no_torch = "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
rc, out = run(no_torch + "import cchan; print(cchan.__version__); assert 'torch' not in "
              "str(list(sys.modules)) or sys.modules['torch'] is None", {}, pkg)
expect(rc == 0, "import cchan without torch", out)
rc, out = run(no_torch + "import cchan\ntry:\n    cchan.Comm\nexcept ImportError as e:\n"
              "    print('IE', e)\n", {}, pkg)
expect(rc == 0 and "IE" in out and "python3-torch" in out, "cchan.Comm without torch says why",
       out)
if os.path.isdir(os.path.join(pkg, "cchan", "dsl")):
    rc, out = run(no_torch + "import cchan.dsl", {"CCHAN_LIBRARY_PATH": "/nonexistent"}, pkg)
    expect(rc == 0, "import cchan.dsl without torch or the libraries", out)

# 2. the libraries through CCHAN_LIBRARY_PATH (a build tree's top directory is enough)
code = "import cchan._lib as l; print(l.core().cchan_version().decode()); l.coll(); l.moe(); " \
       "print(l.library_paths())"
rc, out = run(code, {"CCHAN_LIBRARY_PATH": "/nonexistent:" + build}, pkg)
expect(rc == 0 and build in out, "libraries from CCHAN_LIBRARY_PATH", out)

# 3. a copy of the package away from any build tree, no CCHAN_LIBRARY_PATH, nothing on the
#    loader's path: an ImportError naming CCHAN_LIBRARY_PATH (not a crash)
tmp = tempfile.mkdtemp(prefix="cchan-import-")
try:
    shutil.copytree(os.path.join(pkg, "cchan"), os.path.join(tmp, "cchan"),
                    ignore=shutil.ignore_patterns("__pycache__", "_install_paths.py"))
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""}
    rc, out = run("import cchan._lib as l\ntry:\n    l.core()\nexcept ImportError as e:\n"
                  "    print('IE', e)\nelse:\n    print('loaded', l.library_paths())", env, tmp)
    if "loaded" in out:
        print("SKIP part 3: a libcchan.so is installed system-wide: " + out.strip())
    else:
        expect(rc == 0 and "IE" in out and "CCHAN_LIBRARY_PATH" in out,
               "missing libraries: ImportError naming CCHAN_LIBRARY_PATH", out)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

# 4. the config structs carry the version the bindings were written against, not the library's,
#    so a library older than the bindings refuses them with CCHAN_ERR_VERSION and says why
code = r"""
import ctypes, re, cchan._lib as l
core = l.core()
hdr = open(HEADER).read()
v = [int(re.search(r"#define CCHAN_VERSION_%s (\d+)" % k, hdr).group(1))
     for k in ("MAJOR", "MINOR", "PATCH")]
assert l.CCHAN_VERSION_CODE == v[0] * 10000 + v[1] * 100 + v[2], (l.CCHAN_VERSION_CODE, v)
assert l.comm_config().version == l.CCHAN_VERSION_CODE
assert l.coll_config().version == l.CCHAN_VERSION_CODE
uid = l.UniqueId()
l.check(core.cchan_get_unique_id(ctypes.byref(uid)), "cchan_get_unique_id")
bs = ctypes.c_void_p()
l.check(core.cchan_bootstrap_create(ctypes.byref(uid), 0, 1, ctypes.byref(bs)),
        "cchan_bootstrap_create")
lib_v, good = l.version_code(), l.CCHAN_VERSION_CODE
l.CCHAN_VERSION_CODE = lib_v + 1  # bindings newer than the library
comm = ctypes.c_void_p()
try:
    l.check(core.cchan_comm_create(bs, ctypes.byref(l.comm_config(platform=l.PLATFORM_HOST)),
                                   ctypes.byref(comm)), "cchan_comm_create")
    print("comm accepted")
except l.CchanError as e:
    print("comm refused", e.status == l.CCHAN_ERR_VERSION, e)
l.CCHAN_VERSION_CODE = good
l.check(core.cchan_comm_create(bs, ctypes.byref(l.comm_config(platform=l.PLATFORM_HOST)),
                               ctypes.byref(comm)), "cchan_comm_create")
l.CCHAN_VERSION_CODE = lib_v + 1
coll = ctypes.c_void_p()
try:
    l.check(l.coll().cchan_coll_create(comm, ctypes.byref(l.coll_config()), ctypes.byref(coll)),
            "cchan_coll_create", l.coll().cchan_coll_last_error)
    print("coll accepted")
except l.CchanError as e:
    print("coll refused", e.status == l.CCHAN_ERR_VERSION, e)
l.check(core.cchan_comm_destroy(comm), "cchan_comm_destroy")  # and bs, which it owns
""".replace("HEADER", repr(os.path.join(here, "..", "..", "include", "cchan", "cchan.h")))
rc, out = run(code, {"CCHAN_LIBRARY_PATH": build}, pkg)
expect(rc == 0, "config version: the bindings' CCHAN_VERSION_CODE is include/cchan/cchan.h's", out)
newer = r"config version (\d+); this library is (\d+)"
m = re.search(r"comm refused True .*" + newer, out)
expect(m is not None and int(m.group(1)) == int(m.group(2)) + 1,
       "a comm config from newer bindings: CCHAN_ERR_VERSION naming both versions", out)
coll_newer = r"coll refused True .*config version (\d+), size \d+: this library is version (\d+)"
m = re.search(coll_newer, out)
expect(m is not None and int(m.group(1)) == int(m.group(2)) + 1,
       "a coll config from newer bindings: CCHAN_ERR_VERSION naming both versions", out)

# 5. the build backend reads pyproject.toml without tomllib (Pythons before 3.11) as tomllib does
sys.path.insert(0, os.path.join(pkg, "_backend"))
try:
    import tomllib
except ImportError:
    print("SKIP part 5: no tomllib (Python before 3.11) to compare with")
else:
    import cchan_build

    toml = os.path.join(pkg, "pyproject.toml")
    with open(toml, encoding="utf-8") as f:
        text = f.read()
    expect(cchan_build._parse_toml_subset(text) == tomllib.loads(text),
           "cchan_build reads pyproject.toml without tomllib as tomllib does")

print(f"test_import: {len(failures)} failures")
sys.exit(1 if failures else 0)
