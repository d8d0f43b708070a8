"""The build backend of the cchan Python package (PEP 517 and PEP 660), standard library only.

pip builds in an isolated environment and installs the backend's requirements there from a
package index first; a backend with none, in the source tree (`backend-path`), lets
`pip install ./python` work offline. The package is Python only (ctypes), so a wheel is the
package's files, its metadata (from pyproject.toml) and a RECORD.

`make wheel` uses the same code to build a platform wheel that carries the cchan shared
libraries in cchan/_libs/, where the package's loader looks first:

    python3 python/_backend/cchan_build.py --libs MANIFEST --outdir DIR

MANIFEST (written by python/CMakeLists.txt) has a `build<TAB>dir` line naming the build tree and
one `name<TAB>path` line per library: the name it gets in the wheel (the soname, which the other
libraries' DT_NEEDED entries ask for) and the file in the build tree. The copies' run paths are
rewritten to $ORIGIN (plus any entry outside the build tree, such as the CUDA toolkit's), so each
finds its siblings and none the build tree.
"""

import base64
import hashlib
import io
import os
import re
import stat
import struct
import sys
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # python/
PACKAGE = "cchan"
LIBS_DIR = "_libs"

# ------------------------------------------------------------------ pyproject.toml


def _parse_toml_subset(text):
    """The TOML this pyproject.toml uses (tables, strings, string lists, inline tables of strings),
    for Pythons before 3.11 without tomllib; test_import.py compares it with tomllib."""
    doc, table = {}, None
    table = doc
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            table = doc
            for part in line.strip("[]").split("."):
                table = table.setdefault(part.strip(), {})
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        while value.startswith("[") and not value.rstrip().endswith("]"):
            value += " " + lines[i].strip()
            i += 1
        table[key.strip().strip('"')] = _toml_value(value)
    return doc


def _toml_value(v):
    v = re.sub(r"\s+#[^\"\]}]*$", "", v).strip()
    if v.startswith('"'):
        return v[1:-1]
    if v.startswith("["):
        return [s for s in re.findall(r'"([^"]*)"', v)]
    if v.startswith("{"):
        return dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', v))
    raise ValueError(f"pyproject.toml: cannot read value {v!r} without tomllib (Python 3.11+)")


def pyproject(path=None):
    with open(path or os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib
    except ImportError:
        return _parse_toml_subset(text)
    return tomllib.loads(text)


def _project():
    return pyproject()["project"]


def _dist_name():
    return _project()["name"].replace("-", "_")


def _metadata():
    p = _project()
    out = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        out.append(f"Summary: {p['description']}")
    if isinstance(p.get("license"), dict) and p["license"].get("text"):
        out.append(f"License: {p['license']['text']}")
    if p.get("requires-python"):
        out.append(f"Requires-Python: {p['requires-python']}")
    out += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        out.append(f"Provides-Extra: {extra}")
        out += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    body = ""
    if p.get("readme"):
        out.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
            body = "\n" + f.read()
    return ("\n".join(out) + "\n" + body).encode("utf-8")


# ------------------------------------------------------------------ wheels


def _package_files():
    """(path in the wheel, path on disk) of the package, without caches, what `make install`
    writes (_install_paths.py) and libraries a previous build left."""
    base = os.path.join(ROOT, PACKAGE)
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", LIBS_DIR))
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")) or f == "_install_paths.py":
                continue
            full = os.path.join(d, f)
            yield os.path.relpath(full, ROOT).replace(os.sep, "/"), full


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


class _Wheel:
    def __init__(self, directory, tag, purelib):
        p = _project()
        self.distinfo = f"{_dist_name()}-{p['version']}.dist-info"
        self.name = f"{_dist_name()}-{p['version']}-{tag}.whl"
        self.path = os.path.join(directory, self.name)
        self.tag, self.purelib = tag, purelib
        self.zf = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, executable=False):
        # A fixed date: the same sources give the same wheel.
        info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self):
        self.add(f"{self.distinfo}/METADATA", _metadata())
        wheel = (f"Wheel-Version: 1.0\nGenerator: cchan_build\n"
                 f"Root-Is-Purelib: {'true' if self.purelib else 'false'}\nTag: {self.tag}\n")
        self.add(f"{self.distinfo}/WHEEL", wheel.encode())
        record = f"{self.distinfo}/RECORD"
        text = "\n".join(self.record + [f"{record},,"]) + "\n"
        info = zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = (0o644 | stat.S_IFREG) << 16
        self.zf.writestr(info, text, zipfile.ZIP_DEFLATED)
        self.zf.close()
        return self.name


def _read_manifest(path):
    """(build tree, [(name in the wheel, file)])"""
    build, libs = os.path.dirname(os.path.abspath(path)), []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                name, _, src = line.rstrip("\n").partition("\t")
                if name == "build":
                    build = src
                else:
                    libs.append((name, src))
    return build, libs


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """A Python-only wheel (py3-none-any); with config setting `libs` (a manifest, see the module
    docstring), a platform wheel carrying the libraries in cchan/_libs/."""
    manifest = (config_settings or {}).get("libs")
    build, libs = _read_manifest(manifest) if manifest else (None, [])
    tag = f"py3-none-{_platform_tag()}" if libs else "py3-none-any"
    w = _Wheel(wheel_directory, tag, purelib=not libs)
    for arc, full in _package_files():
        with open(full, "rb") as f:
            w.add(arc, f.read())
    for name, src in libs:
        w.add(f"{PACKAGE}/{LIBS_DIR}/{name}", relocate(src, build),
              executable=True)
    return w.close()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this source tree's python/ on sys.path (pip install -e)."""
    w = _Wheel(wheel_directory, "py3-none-any", purelib=True)
    w.add(f"__editable__.{_dist_name()}.pth", (ROOT + "\n").encode())
    return w.close()


def _prepare_metadata(metadata_directory):
    p = _project()
    distinfo = f"{_dist_name()}-{p['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, distinfo), exist_ok=True)
    with open(os.path.join(metadata_directory, distinfo, "METADATA"), "wb") as f:
        f.write(_metadata())
    return distinfo


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare_metadata(metadata_directory)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{_dist_name()}-{p['version']}"
    name = f"{base}.tar.gz"
    files = [(os.path.relpath(f, ROOT), f) for _, f in _package_files()]
    for d, dirs, fs in os.walk(HERE):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        files += [(os.path.relpath(os.path.join(d, f), ROOT), os.path.join(d, f))
                  for f in fs if f.endswith(".py")]
    files += [("pyproject.toml", os.path.join(ROOT, "pyproject.toml"))]
    if p.get("readme"):
        files.append((p["readme"], os.path.join(ROOT, p["readme"])))
    pkg_info = _metadata()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, full in sorted(files):
            t.add(full, arcname=f"{base}/{arc}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return name


# ------------------------------------------------------------------ ELF run paths

_DT_NULL, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 5, 15, 29


def relocate(path, build_dir):
    """The bytes of ELF library `path` with its run path (DT_RUNPATH or DT_RPATH) rewritten to
    $ORIGIN followed by the entries outside `build_dir` (the build tree's would load another
    copy of a sibling where the build tree still exists). Rewritten in place in the string
    table: the new path is never longer, as the build tree's entries it replaces are absolute."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        raise ValueError(f"{path}: no dynamic section (not a shared library)")
    strtab, paths = None, []
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = val
        elif tag in (_DT_RPATH, _DT_RUNPATH):
            paths.append(val)
    if not paths:
        return bytes(data)  # depends on system libraries only (libcchan.so)
    base = next((o + strtab - v for v, o, n in loads if v <= strtab < v + n), None)
    if base is None:
        raise ValueError(f"{path}: string table outside the loaded segments")
    build = os.path.realpath(build_dir)
    for sval in paths:
        start = base + sval
        end = data.index(b"\0", start)
        old = data[start:end].decode("utf-8", "surrogateescape")
        keep = [e for e in old.split(":") if e and e != "$ORIGIN" and not (
            os.path.isabs(e) and (os.path.realpath(e) + "/").startswith(build + "/"))]
        new = ":".join(["$ORIGIN"] + keep).encode("utf-8", "surrogateescape")
        if len(new) > len(old.encode("utf-8", "surrogateescape")):
            raise ValueError(f"{path}: run path {new!r} does not fit where {old!r} was")
        data[start:end] = new + b"\0" * (end - start - len(new))
    return bytes(data)


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(description="Builds the cchan wheel (see the module docstring).")
    ap.add_argument("--libs", help="manifest of the libraries to carry (a platform wheel)")
    ap.add_argument("--outdir", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.outdir, exist_ok=True)
    name = build_wheel(a.outdir, {"libs": a.libs} if a.libs else None)
    print(os.path.join(a.outdir, name))


if __name__ == "__main__":
    main(sys.argv[1:])
