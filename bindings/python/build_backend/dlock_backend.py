"""The PEP 517 build backend of the dlock Python binding: writes its wheel and sdist itself.

The binding is pure Python (ctypes over libdlock.so), so a wheel is a zip of dlock/*.py,
dlock/py.typed (PEP 561: the package's inline type annotations are for type checkers) and
three metadata files. Writing them here needs nothing installed: pyproject.toml's
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
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "dlock"
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

def _write_wheel(wheel_directory, files):
    """files: (path in the wheel, bytes), without .dist-info. Returns the wheel's file name."""
    p = project()
    dist, version = _dist_name(p), p["version"]
    info = f"{dist}-{version}.dist-info"
    files = list(files) + [
        (f"{info}/METADATA", metadata(p).encode("utf-8")),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: dlock_backend\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    files.append((f"{info}/RECORD", record.getvalue().encode("utf-8")))

    name = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            entry = zipfile.ZipInfo(path, time.gmtime(EPOCH)[:6])
            entry.external_attr = 0o100644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(arc, _read(disk)) for arc, disk in _package_files()])


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
