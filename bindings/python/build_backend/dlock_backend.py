"""The PEP 517 build backend of the dlock Python binding: writes its wheel and sdist itself.

The binding is pure Python (ctypes over libdlock.so), so a wheel is a zip of dlock/*.py,
dlock/py.typed (PEP 561: the package's inline type annotations are for type checkers) and
three metadata files. With a library given (config setting `library=PATH`, as
`pip wheel --config-settings library=PATH`, or `python3 dlock_backend.py --library PATH OUT_DIR`
as scripts/package runs it), the wheel is a platform wheel that also carries that libdlock.so
as dlock/libdlock.so.0, which the package loads before any on the system. Writing them here needs nothing installed: pyproject.toml's
[build-system] requires nothing, so `pip install --no-index ./bindings/python` works offline in
any virtualenv, build isolation or not. (setuptools' backend needs setuptools in the build
environment, and before setuptools 70.1 also the `wheel` package for bdist_wheel.)

Metadata comes from pyproject.toml's [project] table and README.md. Archives are reproducible:
sorted entries, fixed timestamps (SOURCE_DATE_EPOCH when set), fixed modes.
"""

import base64
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "dlock"  # the import name; the distribution is pyproject's [project] name
BUNDLED = f"{PACKAGE}/libdlock.so.0"  # dlock/_lib.py looks here first
BACKEND = os.path.relpath(os.path.abspath(__file__), ROOT)
# Every archive entry's time: SOURCE_DATE_EPOCH, else 1980-01-01 (the oldest a zip can hold).
EPOCH = max(int(os.environ.get("SOURCE_DATE_EPOCH", 0)), 315532800)


# ----- metadata --------------------------------------------------------------------------------

def read_project(text):
    """pyproject.toml's [project] table without tomllib (Python < 3.11). Reads just the TOML
    that table uses: "strings", [lists of strings] and {key = "string"} tables.
    tests/test_build.py checks that it reads the file as tomllib does."""
    table = re.search(r"^\[project\]$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
    string = r'"(?:[^"\\]|\\.)*"'
    project = {}
    for key, value in re.findall(rf"^([\w-]+)\s*=\s*({string}|\[.*?\]|\{{.*?\}})", table, re.M | re.S):
        if value[0] == "[":
            project[key] = [json.loads(s) for s in re.findall(string, value)]
        elif value[0] == "{":
            project[key] = {k: json.loads(s) for k, s in re.findall(rf"([\w-]+)\s*=\s*({string})", value)}
        else:
            project[key] = json.loads(value)  # TOML's basic strings escape as JSON's do
    return project


def project():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib
    except ImportError:
        return read_project(text)
    return tomllib.loads(text)["project"]


def metadata(p):
    """Core metadata (METADATA in a wheel, PKG-INFO in an sdist)."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
        f"License: {p['license']['text']}",
    ]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
        return "\n".join(lines) + "\n\n" + f.read()


def _dist_name(p):
    return re.sub(r"[-_.]+", "_", p["name"]).lower()  # as wheel and sdist file names spell it


def _package_files():
    """dlock/**.py and dlock/py.typed, sorted, as (path in the archive, path on disk)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                found.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return sorted(found)


# ----- wheels ----------------------------------------------------------------------------------

def platform_tag():
    """This machine's wheel platform tag, e.g. linux_x86_64 (what pip accepts here)."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def _write_wheel(wheel_directory, files, tag="py3-none-any"):
    """files: (path in the wheel, bytes), without .dist-info. Returns the wheel's file name.
    A wheel with a native library (tag not ...-any) is not pure: it installs to platlib."""
    p = project()
    dist, version = _dist_name(p), p["version"]
    info = f"{dist}-{version}.dist-info"
    pure = "true" if tag.endswith("-any") else "false"
    files = list(files) + [
        (f"{info}/METADATA", metadata(p).encode("utf-8")),
        (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: dlock_backend\n"
                          f"Root-Is-Purelib: {pure}\nTag: {tag}\n".encode()),
    ]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    files.append((f"{info}/RECORD", record.getvalue().encode("utf-8")))

    name = f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            entry = zipfile.ZipInfo(path, time.gmtime(EPOCH)[:6])
            entry.external_attr = (0o100755 if path == BUNDLED else 0o100644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(arc, _read(disk)) for arc, disk in _package_files()]
    library = (config_settings or {}).get("library")
    if not library:
        return _write_wheel(wheel_directory, files)
    if not os.path.isfile(library) or _read(library)[:4] != b"\x7fELF":
        raise ValueError(f"library={library}: not a shared library (give the path of libdlock.so)")
    files.append((BUNDLED, _stripped(library)))
    return _write_wheel(wheel_directory, sorted(files), tag=f"py3-none-{platform_tag()}")


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth file puts this directory on sys.path, so edits to dlock/
    take effect without reinstalling."""
    pth = (ROOT + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth)])


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


# ----- sdists ----------------------------------------------------------------------------------

def build_sdist(sdist_directory, config_settings=None):
    """dlock-VERSION.tar.gz: PKG-INFO and what building a wheel from it needs."""
    p = project()
    base = f"{_dist_name(p)}-{p['version']}"
    files = [("PKG-INFO", metadata(p).encode("utf-8"))]
    for rel in ("pyproject.toml", p["readme"], BACKEND):
        files.append((rel.replace(os.sep, "/"), _read(os.path.join(ROOT, rel))))
    files += [(arc, _read(disk)) for arc, disk in _package_files()]

    name = base + ".tar.gz"
    with open(os.path.join(sdist_directory, name), "wb") as f, \
            gzip.GzipFile("", "wb", fileobj=f, mtime=EPOCH) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path, data in sorted(files):
            entry = tarfile.TarInfo(f"{base}/{path}")
            entry.size, entry.mtime, entry.mode = len(data), EPOCH, 0o644
            t.addfile(entry, io.BytesIO(data))
    return name


def _stripped(library):
    """The library's bytes without debug sections when binutils' strip is there (a
    RelWithDebInfo build's libdlock.so is ten times the size), as the npm tarball has it."""
    strip = shutil.which("strip")
    if strip is None:
        return _read(library)
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libdlock.so.0")
        shutil.copyfile(library, copy)
        subprocess.run([strip, "--strip-debug", copy], check=True, timeout=120)
        return _read(copy)


def main(argv):
    """python3 dlock_backend.py [--library PATH] OUT_DIR: writes a wheel, prints its path."""
    library = None
    if len(argv) == 3 and argv[0] == "--library":
        library, argv = argv[1], argv[2:]
    if len(argv) != 1:
        sys.exit("usage: dlock_backend.py [--library PATH/libdlock.so] OUT_DIR")
    os.makedirs(argv[0], exist_ok=True)
    name = build_wheel(argv[0], {"library": library} if library else None)
    print(os.path.join(os.path.abspath(argv[0]), name))


if __name__ == "__main__":
    main(sys.argv[1:])
