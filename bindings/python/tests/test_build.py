"""Tests for the in-tree build backend (build_backend/dlock_backend.py); no server needed.
bindings/python/suite.sh also installs the package with pip in a fresh virtualenv."""

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build_backend"))
import dlock_backend  # noqa: E402


class Backend(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_reads_pyproject_as_tomllib_does(self):
        # Pythons before 3.11 have no tomllib and use the backend's own reader.
        try:
            import tomllib
        except ImportError:
            self.skipTest("no tomllib to compare with")
        with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(dlock_backend.read_project(text), tomllib.loads(text)["project"])

    def test_wheel(self):
        self.assertEqual(dlock_backend.get_requires_for_build_wheel(), [])
        name = dlock_backend.build_wheel(self.tmp.name)
        version = dlock_backend.project()["version"]
        # Published as libdlock ("dlock" in the index is another project); imported as dlock.
        self.assertEqual(name, f"libdlock-{version}-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(self.tmp.name, name)) as z:
            files = {n: z.read(n) for n in z.namelist()}
        info = f"libdlock-{version}.dist-info"
        self.assertIn("Name: libdlock\n", files[f"{info}/METADATA"].decode())
        self.assertEqual(sorted(n for n in files if n.startswith("dlock/")),
                         ["dlock/__init__.py", "dlock/_errors.py", "dlock/_lib.py",
                          "dlock/otel.py", "dlock/prometheus.py", "dlock/py.typed"])
        self.assertIn(f"Version: {version}\n", files[f"{info}/METADATA"].decode())
        self.assertIn("Tag: py3-none-any\n", files[f"{info}/WHEEL"].decode())
        rows = list(csv.reader(io.StringIO(files[f"{info}/RECORD"].decode())))
        self.assertEqual(sorted(r[0] for r in rows), sorted(files))
        for path, digest, size in rows:
            if path == f"{info}/RECORD":
                self.assertEqual((digest, size), ("", ""))
                continue
            want = base64.urlsafe_b64encode(hashlib.sha256(files[path]).digest()).rstrip(b"=")
            self.assertEqual((digest, int(size)), ("sha256=" + want.decode(), len(files[path])), path)
        # reproducible: the same bytes every time
        with open(os.path.join(self.tmp.name, name), "rb") as f:
            first = f.read()
        os.remove(os.path.join(self.tmp.name, name))
        dlock_backend.build_wheel(self.tmp.name)
        with open(os.path.join(self.tmp.name, name), "rb") as f:
            self.assertEqual(f.read(), first)

    def test_platform_wheel_bundles_the_library(self):
        library = os.environ.get("DLOCK_LIBRARY")
        if not library:
            self.skipTest("no DLOCK_LIBRARY to bundle")
        out = subprocess.run([sys.executable, os.path.join(ROOT, "build_backend", "dlock_backend.py"),
                              "--library", library, self.tmp.name],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        tag = dlock_backend.platform_tag()
        self.assertTrue(out.endswith(f"-py3-none-{tag}.whl"), out)
        self.assertTrue(tag.startswith("linux_"), tag)
        with zipfile.ZipFile(out) as z:
            entry = z.getinfo("dlock/libdlock.so.0")
            self.assertEqual(entry.external_attr >> 16, 0o100755)
            bundled = os.path.join(self.tmp.name, "bundled.so")
            with open(bundled, "wb") as f:
                f.write(z.read(entry))
        # the library, debug sections stripped: its dynamic section and exports unchanged
        for flags in (["-d"], ["--dyn-syms", "-W"]):
            want, got = (subprocess.run(["readelf", *flags, path], capture_output=True, text=True,
                                        check=True).stdout for path in (library, bundled))
            self.assertEqual(got, want, flags)
        self.assertLessEqual(os.path.getsize(bundled), os.path.getsize(library))
        with zipfile.ZipFile(out) as z:
            wheel = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))).decode()
        self.assertIn(f"Tag: py3-none-{tag}\n", wheel)
        self.assertIn("Root-Is-Purelib: false\n", wheel)

    def test_platform_wheel_refuses_what_is_not_a_library(self):
        readme = os.path.join(ROOT, "README.md")
        with self.assertRaisesRegex(ValueError, "library=.*README.md: not a shared library"):
            dlock_backend.build_wheel(self.tmp.name, {"library": readme})
        self.assertEqual(os.listdir(self.tmp.name), [])

    def test_system_packages_named_are_what_the_library_needs(self):
        # The hint a failed load gives (dlock/_lib.py SYSTEM_PACKAGES) must name the Debian
        # packages of every library libdlock links, less libc and the C++ runtime.
        library = os.environ.get("DLOCK_LIBRARY")
        if not library or not shutil.which("readelf") or not shutil.which("dpkg"):
            self.skipTest("needs DLOCK_LIBRARY, readelf and dpkg")
        sys.path.insert(0, ROOT)
        from dlock import _lib
        dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                                 check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
        self.assertTrue(needed)
        runtime = {"libc6", "libstdc++6", "libgcc-s1"}
        packages = set()
        for soname in needed:
            found = subprocess.run(["dpkg", "-S", f"*/{soname}"], capture_output=True, text=True)
            self.assertEqual(found.returncode, 0, f"no Debian package has {soname}")
            packages.add(found.stdout.split(":", 1)[0])
        self.assertEqual(packages - runtime, set(_lib.SYSTEM_PACKAGES))

    def test_editable_wheel_points_here(self):
        name = dlock_backend.build_editable(self.tmp.name)
        with zipfile.ZipFile(os.path.join(self.tmp.name, name)) as z:
            self.assertEqual(z.read("__editable__.dlock.pth").decode(), ROOT + "\n")
            self.assertFalse([n for n in z.namelist() if n.startswith("dlock/")])

    def test_sdist_builds_its_own_wheel(self):
        name = dlock_backend.build_sdist(self.tmp.name)
        base = name[:-len(".tar.gz")]
        with tarfile.open(os.path.join(self.tmp.name, name)) as t:
            self.assertIn(f"{base}/PKG-INFO", t.getnames())
            t.extractall(self.tmp.name)
        # the unpacked sdist's own backend (in a fresh interpreter) makes the same wheel
        out = os.path.join(self.tmp.name, "out")
        os.mkdir(out)
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'build_backend'); "
                        "import dlock_backend; dlock_backend.build_wheel(sys.argv[1])", out],
                       cwd=os.path.join(self.tmp.name, base), check=True, timeout=60)
        wheel = dlock_backend.build_wheel(self.tmp.name)
        with open(os.path.join(out, wheel), "rb") as a, open(os.path.join(self.tmp.name, wheel), "rb") as b:
            self.assertEqual(a.read(), b.read())


if __name__ == "__main__":
    unittest.main()
