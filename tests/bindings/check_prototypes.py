#!/usr/bin/env python3
"""Checks every binding's hand-copied C prototypes against include/dlock/dlock.h.

    tests/bindings/check_prototypes.py [--source-dir DIR] [--clang CLANG] [-v]
    tests/bindings/check_prototypes.py --self-test

The truth is dlock.h as clang parses it (its JSON AST): every function declared with DLOCK_API
(a visibility attribute). Each binding's declarations are read as follows:

  python  bindings/python/dlock/_lib.py is run (not imported: no library is loaded) and its
          _declare(lib) is called with a recorder for `lib`, which keeps each function's
          restype and argtypes: the real ctypes objects the binding sets.
  node    bindings/node/lib/native.js: every JS string literal that is a C prototype of a
          dlock_* function (koffi's lib.func('int dlock_queue_fd(void *q)') form) is compiled by
          clang (koffi's _In_/_Out_/_Inout_ defined away, its type names such as uint64 or str
          typedef'd).
  luajit  bindings/luajit/dlock.lua: every ffi.cdef string is compiled by clang.

Every type becomes a class: void, int32 (int and every enum), uint32, int64, uint64, size_t,
bool, char* (a string or byte buffer: char, signed/unsigned char, int8_t, uint8_t), pointer
(void or a struct), callback(RET; ARGS) (a function pointer), with one '*' more for each level
of indirection (uint64* for uint64_t *, pointer* for dlock_lock **). const is ignored. ctypes
cannot tell uint64_t from size_t (both are c_ulong on LP64), so for Python either is accepted.

A binding need not bind every function (what each leaves out is listed, as information), but
every one it binds must exist in dlock.h with the same return class, parameter count and
parameter classes. Any mismatch fails (exit 1) with a line such as
    node: dlock_extend_queued: parameter 2 (lease_ms) is uint32, dlock.h says uint64
    [bindings/node/lib/native.js:104; include/dlock/dlock.h:335]
(on one line). Exit 2: the check could not run (no clang, a binding it cannot read).

--self-test proves the check catches breakage: it runs the check on bindings and headers with
deliberately wrong declarations (small fixtures of each binding's form, and the real files with
one type changed) and fails unless each is reported, and the right ones pass.
"""

import argparse
import bisect
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

HEADER = "include/dlock/dlock.h"
PYTHON_FILE = "bindings/python/dlock/_lib.py"
NODE_FILE = "bindings/node/lib/native.js"
LUAJIT_FILE = "bindings/luajit/dlock.lua"
BINDINGS = ("python", "node", "luajit")


class CheckError(Exception):
    """The check itself could not run (no clang, a binding it cannot read): not a mismatch."""


# ----- types and their classes -------------------------------------------------------------

# A class is (base, stars): base is a scalar class, 'void', 'byte', 'opaque' (a struct or
# union) or 'callback(...)'; stars the levels of indirection. Names that end the typedef chain.
LEAF = {
    "void": "void",
    "char": "byte", "signed char": "byte", "unsigned char": "byte", "int8_t": "byte",
    "uint8_t": "byte",
    "_Bool": "bool", "bool": "bool",
    "short": "int16", "short int": "int16", "signed short": "int16", "int16_t": "int16",
    "unsigned short": "uint16", "unsigned short int": "uint16", "uint16_t": "uint16",
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32",
    "long": "int64", "long int": "int64", "signed long": "int64", "long long": "int64",
    "long long int": "int64", "int64_t": "int64", "intptr_t": "int64", "ssize_t": "int64",
    "ptrdiff_t": "int64",
    # LP64: as wide as uint64_t and size_t both; spelled so, either is accepted
    "unsigned long": "uint64|size_t", "unsigned long int": "uint64|size_t",
    "unsigned long long": "uint64", "unsigned long long int": "uint64", "uint64_t": "uint64",
    "uintptr_t": "uint64",
    "size_t": "size_t",
    "float": "float", "double": "double",
}

# koffi's own type names (and its parameter directions), for prototypes written with them.
KOFFI_PRELUDE = """\
#define _In_
#define _Out_
#define _Inout_
typedef int8_t int8; typedef uint8_t uint8; typedef int16_t int16; typedef uint16_t uint16;
typedef int32_t int32; typedef uint32_t uint32; typedef int64_t int64; typedef uint64_t uint64;
typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint;
typedef unsigned long ulong; typedef long long longlong; typedef unsigned long long ulonglong;
typedef float float32; typedef double float64; typedef const char *str;
typedef intptr_t intptr; typedef uintptr_t uintptr;
"""


def split_top(s, sep=","):
    """Splits s at sep outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def split_function_type(qual):
    """'RET (ARGS)' (clang's spelling of a function type) -> (RET, [ARG...]) or None."""
    qual = qual.strip()
    if not qual.endswith(")"):
        return None
    depth = 0
    for i in range(len(qual) - 1, -1, -1):
        if qual[i] == ")":
            depth += 1
        elif qual[i] == "(":
            depth -= 1
            if depth == 0:
                ret, args = qual[:i].strip(), qual[i + 1:-1].strip()
                if not ret:
                    return None
                if args in ("", "void"):
                    return ret, []
                return ret, split_top(args)
    return None


class TypeSpace:
    """Classes of clang's type spellings, with one translation unit's typedefs."""

    def __init__(self, typedefs):
        self.typedefs = typedefs  # name -> clang's qualType of what it names

    def classify(self, qual, depth=0):
        if depth > 20:
            raise CheckError(f"typedef loop at {qual!r}")
        q = qual.strip()
        # a function pointer: RET (*)(ARGS), RET (**)(ARGS)
        m = re.fullmatch(r"(.*?)\(\s*(\*+)\s*(?:const\s*)?\)\s*(\(.*\))", q, re.S)
        if m:
            ret = m.group(1).strip()
            parsed = split_function_type(ret + " " + m.group(3))
            if parsed is None:
                raise CheckError(f"cannot read the function pointer type {qual!r}")
            r, args = parsed
            sig = "callback(%s; %s)" % (
                self.render(self.classify(r, depth + 1)),
                ", ".join(self.render(self.classify(a, depth + 1)) for a in args) or "void")
            return sig, len(m.group(2)) - 1
        words = re.sub(r"\b(const|volatile|restrict|__restrict|__restrict__)\b", " ", q)
        stars = words.count("*")
        if "[" in words:  # an array parameter is a pointer
            stars += words.count("[")
            words = re.sub(r"\[[^\]]*\]", " ", words)
        base = " ".join(words.replace("*", " ").split())
        if base in LEAF:
            return LEAF[base], stars
        m = re.fullmatch(r"(struct|union|enum)\s+(\w+)", base)
        if m:
            return ("int32" if m.group(1) == "enum" else "opaque"), stars
        if base in self.typedefs:
            b, s = self.classify(self.typedefs[base], depth + 1)
            return b, s + stars
        raise CheckError(f"unknown type {base!r} (in {qual!r})")

    @staticmethod
    def render(cls):
        """A class as text; alternatives joined by '|'."""
        base, stars = cls
        out = []
        for b in base.split("|") if not base.startswith("callback(") else [base]:
            if b in ("void", "opaque") and stars:
                out.append("pointer" + "*" * (stars - 1))
            elif b == "byte" and stars:
                out.append("char*" + "*" * (stars - 1))
            elif b == "byte":
                out.append("int8")
            elif b == "opaque":
                out.append("struct (by value)")
            else:
                out.append(b + "*" * stars)
        return "|".join(out)


class Sig:
    """One function's prototype as classes."""

    def __init__(self, name, ret, params, where, names=None, variadic=False):
        self.name = name
        self.ret = ret            # rendered class
        self.params = params      # [rendered class]
        self.names = names or [""] * len(params)
        self.where = where        # "file:line"
        self.variadic = variadic

    def text(self):
        args = ", ".join(self.params) or "void"
        return f"{self.ret} {self.name}({args}{', ...' if self.variadic else ''})"


# ----- clang --------------------------------------------------------------------------------

class Clang:
    def __init__(self, exe):
        path = shutil.which(exe)
        if not path:
            raise CheckError(f"'{exe}' not found: this check parses C with clang "
                             "(scripts/setup installs it; --clang or $CLANG picks another)")
        self.exe = path
        self.cache = {}

    def ast(self, text, include_dirs=(), what="<input>"):
        """The JSON AST of C text (a list of top-level nodes)."""
        key = (text, tuple(include_dirs))
        if key in self.cache:
            return self.cache[key]
        cmd = [self.exe, "-x", "c", "-std=gnu11", "-w", "-fsyntax-only", "-Xclang",
               "-ast-dump=json"]
        for d in include_dirs:
            cmd += ["-I", d]
        cmd.append("-")
        r = subprocess.run(cmd, input=text, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise CheckError(f"{what}: clang cannot compile the declarations:\n"
                             + r.stderr.strip())
        nodes = json.loads(r.stdout).get("inner", [])
        self.cache[key] = nodes
        return nodes


def typedefs_of(nodes):
    return {n["name"]: n["type"]["qualType"] for n in nodes if n.get("kind") == "TypedefDecl"}


def offset_of(node):
    loc = node.get("loc", {})
    if "offset" in loc:
        return loc["offset"]
    for k in ("expansionLoc", "spellingLoc"):
        if k in loc and "offset" in loc[k]:
            return loc[k]["offset"]
    return None


def functions_of(nodes, space, locate, exported_only):
    """{name: Sig} of the dlock_* FunctionDecls among nodes. locate(node) -> 'file:line'."""
    out, not_exported = {}, []
    for n in nodes:
        if n.get("kind") != "FunctionDecl" or not n.get("name", "").startswith("dlock_"):
            continue
        inner = n.get("inner", [])
        if exported_only and not any(c.get("kind") == "VisibilityAttr" for c in inner):
            not_exported.append(n["name"])
            continue
        parsed = split_function_type(n["type"]["qualType"])
        if parsed is None:
            raise CheckError(f"cannot read the type of {n['name']}: {n['type']['qualType']!r}")
        ret = space.render(space.classify(parsed[0]))
        parms = [c for c in inner if c.get("kind") == "ParmVarDecl"]
        params = [space.render(space.classify(p["type"]["qualType"])) for p in parms]
        names = [p.get("name", "") for p in parms]
        sig = Sig(n["name"], ret, params, locate(n), names, bool(n.get("variadic")))
        prev = out.get(sig.name)
        if prev and (prev.ret, prev.params) != (sig.ret, sig.params):  # clang refuses this in C
            raise CheckError(f"{sig.name} is declared twice, differently")
        out[sig.name] = sig
    return out, not_exported


def header_prototypes(clang, include_dir, header_rel="dlock/dlock.h"):
    """{name: Sig} of every function dlock.h exports (DLOCK_API)."""
    text = f'#include "{header_rel}"\n'
    nodes = clang.ast(text, [include_dir], what=header_rel)
    space = TypeSpace(typedefs_of(nodes))
    header_path = os.path.join(include_dir, header_rel)
    with open(header_path, encoding="utf-8") as f:
        htext = f.read()

    def locate(n):  # offsets of included files are offsets into that file
        off = offset_of(n)
        line = htext.count("\n", 0, off) + 1 if off is not None else "?"
        return f"{HEADER}:{line}"

    sigs, not_exported = functions_of(nodes, space, locate, exported_only=True)
    if not sigs:
        raise CheckError(f"found no DLOCK_API function in {header_path}")
    return sigs, not_exported


class Snippets:
    """C text put together from pieces of a binding's file, each under a #line directive, so
    that clang's messages and the AST's offsets lead back to the binding's own lines."""

    def __init__(self, prelude, rel):
        self.rel = rel
        self.parts = [prelude]
        self.len = len(prelude)
        self.starts, self.lines = [], []

    def add(self, code, line):
        head = f'\n#line {line} "{self.rel}"\n'
        self.parts.append(head)
        self.len += len(head)
        self.starts.append(self.len)
        self.lines.append((line, code))
        self.parts.append(code + "\n")
        self.len += len(code) + 1

    def text(self):
        return "".join(self.parts)

    def locate(self, node):
        off = offset_of(node)
        i = bisect.bisect_right(self.starts, off) - 1 if off is not None else -1
        if i < 0:
            return self.rel
        line, code = self.lines[i]
        return f"{self.rel}:{line + code.count(chr(10), 0, off - self.starts[i])}"


def c_prototypes(clang, snippets, what):
    nodes = clang.ast(snippets.text(), what=what)
    space = TypeSpace(typedefs_of(nodes))
    sigs, _ = functions_of(nodes, space, snippets.locate, exported_only=False)
    return sigs


# ----- reading the bindings ----------------------------------------------------------------

def line_at(text, pos):
    return text.count("\n", 0, pos) + 1


def js_string_literals(src):
    """(position, value) of every string literal in JS source, outside comments and regexes."""
    out, i, n = [], 0, len(src)
    prev = ""  # last significant character, to tell a regex literal from a division
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "'\"`":
            j, buf = i + 1, []
            while j < n and src[j] != c:
                if src[j] == "\\" and j + 1 < n:
                    esc = src[j + 1]
                    buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(esc, esc))
                    j += 2
                    continue
                if c == "`" and src.startswith("${", j):
                    buf = None  # an interpolated template: not a fixed prototype
                    j = src.find("`", j)
                    break
                buf.append(src[j])
                j += 1
            if buf is not None:
                out.append((i, "".join(buf)))
            i = (j if j >= 0 else n - 1) + 1
            prev = c
            continue
        if c == "/" and (prev == "" or prev in "(,=:[!&|?{};+-*%<>~^"):
            j = i + 1
            in_class = False
            while j < n and src[j] != "\n":
                if src[j] == "\\":
                    j += 2
                    continue
                if src[j] == "[":
                    in_class = True
                elif src[j] == "]":
                    in_class = False
                elif src[j] == "/" and not in_class:
                    break
                j += 1
            i = j + 1
            prev = "/"
            continue
        if not c.isspace():
            prev = c
        i += 1
    return out


PROTOTYPE = re.compile(r"\s*[A-Za-z_][\w\s\*]*?\b(dlock_\w+)\s*\((.*)\)\s*;?\s*", re.S)


def node_prototypes(clang, src, rel):
    snippets = Snippets("#include <stddef.h>\n#include <stdint.h>\n#include <stdbool.h>\n"
                        + KOFFI_PRELUDE, rel)
    count = 0
    for pos, value in js_string_literals(src):
        if PROTOTYPE.fullmatch(value):
            snippets.add(value.strip().rstrip(";") + ";", line_at(src, pos))
            count += 1
    # lib.func('name', 'ret', [...]): koffi's other form, which this check does not read
    for m in re.finditer(r"\.func\(\s*(['\"`])(\w+)\1\s*,", src):
        raise CheckError(f"{rel}:{line_at(src, m.start())}: koffi's lib.func('{m.group(2)}', "
                         "ret, args) form is not read by this check: write the C prototype")
    if count == 0:
        raise CheckError(f"{rel}: no C prototype of a dlock_* function found")
    return c_prototypes(clang, snippets, rel)


def lua_cdef_blocks(src):
    """(position, text) of the string given to every ffi.cdef, outside comments and strings."""
    out, i, n = [], 0, len(src)

    def long_bracket(j):  # [[...]], [=[...]=]: returns (content_start, end_after) or None
        m = re.match(r"\[(=*)\[", src[j:])
        if not m:
            return None
        close = "]" + m.group(1) + "]"
        k = src.find(close, j + m.end())
        return j + m.end(), (n if k < 0 else k), (n if k < 0 else k + len(close))

    def string_at(j):  # -> (content_start, content_end, end_after) or None
        if j < n and src[j] in "'\"":
            q, k = src[j], j + 1
            while k < n and src[k] != q and src[k] != "\n":
                k += 2 if src[k] == "\\" else 1
            return j + 1, k, k + 1
        if j < n and src[j] == "[":
            return long_bracket(j)
        return None

    while i < n:
        if src.startswith("--", i):
            lb = long_bracket(i + 2) if src.startswith("[", i + 2) else None
            if lb:
                i = lb[2]
            else:
                k = src.find("\n", i)
                i = n if k < 0 else k
            continue
        m = re.compile(r"ffi\s*\.\s*cdef\b").match(src, i)
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] in "_.")):
            j = m.end()
            while j < n and src[j].isspace():
                j += 1
            paren = j < n and src[j] == "("
            if paren:
                j += 1
                while j < n and src[j].isspace():
                    j += 1
            s = string_at(j)
            if s is None:
                raise CheckError(f"line {line_at(src, i)}: ffi.cdef without a string literal "
                                 "is not read by this check")
            out.append((s[0], src[s[0]:s[1]]))
            i = s[2]
            continue
        s = string_at(i) if src[i] in "'\"" or src.startswith("[[", i) or \
            re.match(r"\[=+\[", src[i:i + 40]) else None
        if s:
            i = s[2]
            continue
        i += 1
    return out


def luajit_prototypes(clang, src, rel):
    snippets = Snippets("#include <stddef.h>\n#include <stdint.h>\n#include <stdbool.h>\n", rel)
    blocks = lua_cdef_blocks(src)
    if not blocks:
        raise CheckError(f"{rel}: no ffi.cdef found")
    for pos, text in blocks:
        snippets.add(text, line_at(src, pos))
    return c_prototypes(clang, snippets, rel)


class _Recorder:
    """Stands in for the ctypes.CDLL that _declare(lib) fills in."""

    def __init__(self, rel):
        self._rel = rel
        self._fns = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._fns:
            where = self._rel
            for fr in reversed(__import__("traceback").extract_stack()[:-1]):
                if fr.filename == self._rel:  # the outermost line of the binding's file
                    where = f"{self._rel}:{fr.lineno}"
            self._fns[name] = types.SimpleNamespace(restype=ctypes.c_int, argtypes=None,
                                                    where=where, _set=False)
        return self._fns[name]


def ctypes_class(t):
    """A ctypes type as a class (base, stars)."""
    if t is None:
        return "void", 0
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        b, s = ctypes_class(t._type_)
        if b == "pointer-as-void":
            return "void", s + 2
        return b, s + 1
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        ret = TypeSpace.render(ctypes_class(t._restype_))
        args = ", ".join(TypeSpace.render(ctypes_class(a)) for a in (t._argtypes_ or ())) or "void"
        return f"callback({ret}; {args})", 0
    if isinstance(t, type) and issubclass(t, (ctypes.Structure, ctypes.Union)):
        return "opaque", 0
    if t is ctypes.c_void_p:
        return "void", 1
    if t is ctypes.c_char_p:
        return "byte", 1
    if t is ctypes.c_wchar_p:
        return "wchar", 1
    code = getattr(t, "_type_", None)
    if not isinstance(code, str):
        raise CheckError(f"unknown ctypes type {t!r}")
    size = ctypes.sizeof(t)
    if code in "bBc":
        return "byte", 0
    if code == "?":
        return "bool", 0
    if code in "fd":
        return ("float" if code == "f" else "double"), 0
    if code in "hilq":
        return f"int{size * 8}", 0
    if code in "HILQ":
        return (f"uint{size * 8}" if size != 8 else "uint64|size_t"), 0
    raise CheckError(f"unknown ctypes type {t!r}")


def python_prototypes(src, rel, root):
    # Run as a module of a stand-in package whose __path__ is the binding's directory, so that
    # relative imports of its siblings work while the package's __init__ (which may load the
    # library) never runs.
    pkg_name = "_dlock_under_check"
    pkg = sys.modules.get(pkg_name) or types.ModuleType(pkg_name)
    pkg.__path__ = [os.path.join(root, os.path.dirname(rel))]
    sys.modules[pkg_name] = pkg
    mod = types.ModuleType(pkg_name + "._lib")
    mod.__file__ = rel
    mod.__package__ = pkg_name
    try:
        exec(compile(src, rel, "exec"), mod.__dict__)  # defines functions; loads nothing
    except Exception as e:  # noqa: BLE001 - any failure here means the check cannot read it
        raise CheckError(f"{rel}: running it (without loading the library) failed: "
                         f"{type(e).__name__}: {e}") from e
    declare = getattr(mod, "_declare", None)
    if not callable(declare):
        raise CheckError(f"{rel} has no _declare(lib): this check calls it with a recorder to "
                         "read the ctypes declarations; update tests/bindings/check_prototypes.py")
    rec = _Recorder(rel)
    try:
        declare(rec)
    except Exception as e:  # noqa: BLE001
        raise CheckError(f"{rel}: _declare(lib) failed on the recorder: "
                         f"{type(e).__name__}: {e}") from e
    sigs, errors = {}, []
    for name, fn in rec._fns.items():
        if not name.startswith("dlock_"):
            continue
        if fn.argtypes is None:
            errors.append(f"{name}: argtypes not set (ctypes would convert the arguments "
                          f"unchecked) [{fn.where}]")
            continue
        ret = TypeSpace.render(ctypes_class(fn.restype))
        params = [TypeSpace.render(ctypes_class(a)) for a in fn.argtypes]
        sigs[name] = Sig(name, ret, params, fn.where)
    return sigs, errors


# Declarations outside the file the check reads for each binding would go unchecked.
STRAY = {
    "python": ("bindings/python/dlock", (".py",),
               re.compile(r"\.(argtypes|restype)\s*=|CFUNCTYPE")),
    "node": ("bindings/node", (".js", ".cjs", ".mjs"),
             re.compile(r"\.func\s*\(|koffi\.proto\s*\(")),
    "luajit": ("bindings/luajit", (".lua",), re.compile(r"ffi\s*\.\s*cdef\b")),
}
MAIN_FILE = {"python": PYTHON_FILE, "node": NODE_FILE, "luajit": LUAJIT_FILE}


def stray_declarations(root, binding):
    top, exts, pat = STRAY[binding]
    found = []
    for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames
                       if d not in ("node_modules", "test", "tests", "__pycache__")]
        for f in files:
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            if not f.endswith(exts) or rel == MAIN_FILE[binding]:
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for m in pat.finditer(text):
                found.append(f"{rel}:{line_at(text, m.start())}")
    return found


# ----- comparing --------------------------------------------------------------------------

def same(mine, theirs):
    """Whether dlock.h's class `theirs` is one the binding's `mine` allows: mine may hold
    alternatives ('uint64|size_t'), at the top or inside a callback's signature."""
    tokens = re.split(r"([(),;]\s*)", mine)
    pattern = "".join(re.escape(t) if not t or t[0] in "(),;" or "|" not in t
                      else "(?:" + "|".join(map(re.escape, t.split("|"))) + ")" for t in tokens)
    return re.fullmatch(pattern, theirs) is not None


def compare(binding, truth, sigs):
    """Mismatch lines of one binding's {name: Sig} against dlock.h's."""
    errors = []
    for name in sorted(sigs):
        s = sigs[name]
        h = truth.get(name)
        if h is None:
            errors.append(f"{binding}: {name}: not exported by dlock.h [{s.where}]")
            continue

        where = f" [{s.where}; {h.where}]"
        if not same(s.ret, h.ret):
            errors.append(f"{binding}: {name}: returns {s.ret}, dlock.h says {h.ret}{where}")
        if len(s.params) != len(h.params) or s.variadic != h.variadic:
            errors.append(f"{binding}: {name}: takes {len(s.params)} parameter(s) "
                          f"({', '.join(s.params) or 'void'}), dlock.h says {len(h.params)} "
                          f"({', '.join(h.params) or 'void'}){where}")
            continue
        for k, (mine, theirs) in enumerate(zip(s.params, h.params), 1):
            if not same(mine, theirs):
                pname = f" ({h.names[k - 1]})" if h.names[k - 1] else ""
                errors.append(f"{binding}: {name}: parameter {k}{pname} is {mine}, "
                              f"dlock.h says {theirs}{where}")
    return errors


def read_binding(clang, root, binding, src=None):
    """(sigs, errors) of a binding; src replaces its file's text (for the self-test)."""
    rel = MAIN_FILE[binding]
    if src is None:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            src = f.read()
    if binding == "python":
        return python_prototypes(src, rel, root)
    if binding == "node":
        return node_prototypes(clang, src, rel), []
    return luajit_prototypes(clang, src, rel), []


def run_check(clang, root, include_dir=None, sources=None, bindings=BINDINGS, out=print,
              verbose=False, strays=True):
    """Returns the mismatch lines (empty: all match). sources: {binding: text} overrides."""
    sources = sources or {}
    truth, not_exported = header_prototypes(clang, include_dir or os.path.join(root, "include"))
    out(f"check_prototypes: dlock.h exports {len(truth)} functions (read by {clang.exe})")
    for name in not_exported:
        out(f"  note: dlock.h declares {name} without DLOCK_API: not exported, not checked")
    if verbose:
        for name in sorted(truth):
            out(f"  {truth[name].text()}")
    errors = []
    for b in bindings:
        try:
            sigs, errs = read_binding(clang, root, b, sources.get(b))
        except CheckError as e:
            errors.append(f"{b}: cannot read its declarations: {e}")
            continue
        errs = [f"{b}: {e}" for e in errs] + compare(b, truth, sigs)
        if strays:
            errs += [f"{b}: {w}: declares C functions outside {MAIN_FILE[b]}, which this check "
                     "does not read" for w in stray_declarations(root, b)]
        missing = sorted(set(truth) - set(sigs))
        state = "all match" if not errs else f"{len(errs)} mismatch(es)"
        out(f"{b} ({MAIN_FILE[b]}): binds {len(sigs)}, {state}; leaves out {len(missing)}"
            + (": " + ", ".join(missing) if missing else ""))
        if verbose:
            for name in sorted(sigs):
                out(f"  {sigs[name].text()}")
        errors += errs
    return errors


# ----- self-test -----------------------------------------------------------------------------

FIXTURE_HEADER = """\
#ifndef FIXTURE_H
#define FIXTURE_H
#include <stddef.h>
#include <stdint.h>
#define DLOCK_API __attribute__((visibility("default")))
typedef struct dlock_lock dlock_lock;
typedef enum dlock_status { DLOCK_OK = 0 } dlock_status;
typedef void (*dlock_lost_fn)(const char *name, uint64_t fencing_token, void *arg);
DLOCK_API dlock_status dlock_extend(dlock_lock *l, uint64_t lease_ms);
DLOCK_API int dlock_queue_pop(void *q, uint64_t *tag, dlock_status *status, dlock_lock **lock);
DLOCK_API size_t dlock_url_redact(const char *url, char *buf, size_t len);
DLOCK_API dlock_status dlock_options_set_on_lost(void *o, dlock_lost_fn fn, void *arg);
DLOCK_API uint32_t dlock_lock_attempts(const dlock_lock *l);
void dlock_internal_helper(void);
#endif
"""

FIXTURE_PY = """\
import ctypes
LOST = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p)
def _fn(lib, name, restype, argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
def _declare(lib):
    _fn(lib, "dlock_extend", ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64])
    _fn(lib, "dlock_queue_pop", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)])
    _fn(lib, "dlock_url_redact", ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t])
    _fn(lib, "dlock_options_set_on_lost", ctypes.c_int, [ctypes.c_void_p, LOST, ctypes.c_void_p])
"""

FIXTURE_JS = """\
'use strict';
// f('int dlock_extend(void *l, uint32_t lease_ms)')  -- a comment: not read
const re = /it's not a string/;
const C = {
  extend: f('int dlock_extend(void *l, uint64_t lease_ms)'),
  queue_pop: f('int dlock_queue_pop(void *q, _Out_ uint64_t *tag, _Out_ int *status, _Out_ void **lock)'),
  url_redact: f("size_t dlock_url_redact(const char *url, _Out_ uint8_t *buf, size_t len)"),
  attempts: f(`uint32 dlock_lock_attempts(void *l)`),
};
"""

FIXTURE_LUA = """\
local ffi = require("ffi")
-- ffi.cdef [[ int dlock_extend(void *l, int lease_ms); ]]  (a comment: not read)
--[[ ffi.cdef "int dlock_lock_attempts(void);" ]]
local s = "ffi.cdef [[ not code ]]"
ffi.cdef [[
typedef struct dlock_lock dlock_lock;
typedef int dlock_status;
typedef void (*dlock_lost_fn)(const char *name, uint64_t fencing_token, void *arg);
dlock_status dlock_extend(dlock_lock *l, uint64_t lease_ms);
int dlock_queue_pop(void *q, uint64_t *tag, dlock_status *status, dlock_lock **lock);
]]
ffi.cdef("size_t dlock_url_redact(const char *url, char *buf, size_t len);")
ffi.cdef [==[ dlock_status dlock_options_set_on_lost(void *o, dlock_lost_fn fn, void *arg); ]==]
"""


def self_test(clang, root):
    """Returns the number of failed cases."""
    failed = 0
    tmp = tempfile.mkdtemp(prefix="check_prototypes.")
    try:
        fixture_inc = os.path.join(tmp, "fixture")
        os.makedirs(os.path.join(fixture_inc, "dlock"))

        def write_header(text, inc):
            with open(os.path.join(inc, "dlock", "dlock.h"), "w", encoding="utf-8") as f:
                f.write(text)

        write_header(FIXTURE_HEADER, fixture_inc)
        fixtures = {"python": FIXTURE_PY, "node": FIXTURE_JS, "luajit": FIXTURE_LUA}

        def case(title, expect, sources=None, header=None, binding=None, real=False):
            """expect: [] (must pass) or substrings each of which some mismatch line holds."""
            nonlocal failed
            inc = fixture_inc
            if header is not None:
                inc = os.path.join(tmp, f"h{abs(hash(header))}")
                os.makedirs(os.path.join(inc, "dlock"), exist_ok=True)
                write_header(header, inc)
                if real:  # the real header includes export.h
                    shutil.copy(os.path.join(root, "include", "dlock", "export.h"),
                                os.path.join(inc, "dlock", "export.h"))
            srcs = dict(fixtures) if not real else {}
            srcs.update(sources or {})
            bindings = [binding] if binding else BINDINGS
            try:
                errors = run_check(clang, root, inc, srcs, bindings, out=lambda _: None,
                                   strays=False)
            except CheckError as e:
                errors = [f"cannot run: {e}"]
            if expect:
                # Python's ctypes shows uint64_t as 'uint64|size_t' (it cannot tell them apart)
                pats = [re.escape(x).replace("uint64", r"uint64(?:\|size_t)?") for x in expect]
                ok = errors and all(any(re.search(p, e) for e in errors) for p in pats)
            else:
                ok = not errors
            print(f"self-test: {'ok  ' if ok else 'FAIL'} {title}")
            if not ok:
                failed += 1
                print(f"  expected {'these' if expect else 'no mismatch'}: {expect}")
                for e in errors:
                    print(f"  got: {e}")
            elif expect:
                for e in errors:
                    print(f"      -> {e}")

        def sub(binding, old, new):
            src = fixtures[binding]
            assert old in src, (binding, old)
            return {binding: src.replace(old, new, 1)}

        # The fixtures as written match the fixture header.
        case("correct fixtures of all three forms pass", [])
        # A wrong declaration in each binding's form.
        case("python: a parameter's width", ["python: dlock_extend: parameter 2 (lease_ms) is "
             "uint32, dlock.h says uint64"],
             sub("python", "[ctypes.c_void_p, ctypes.c_uint64])",
                 "[ctypes.c_void_p, ctypes.c_uint32])"),
             binding="python")
        case("python: a parameter too few", ["python: dlock_extend: takes 1 parameter(s)"],
             sub("python", "[ctypes.c_void_p, ctypes.c_uint64])", "[ctypes.c_void_p])"),
             binding="python")
        case("python: the return type", ["python: dlock_url_redact: returns int32, dlock.h says "
             "size_t"], sub("python", "ctypes.c_size_t, [ctypes.c_char_p", "ctypes.c_int, "
                            "[ctypes.c_char_p"), binding="python")
        case("python: a handle where an out-pointer goes",
             ["python: dlock_queue_pop: parameter 4 (lock) is pointer, dlock.h says pointer*"],
             sub("python", "ctypes.POINTER(ctypes.c_void_p)])", "ctypes.c_void_p])"),
             binding="python")
        case("python: a callback's signature",
             ["python: dlock_options_set_on_lost: parameter 2 (fn) is callback(void; char*, "
              "uint32, pointer), dlock.h says callback(void; char*, uint64, pointer)"],
             sub("python", "ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p)",
                 "ctypes.c_char_p, ctypes.c_uint32, ctypes.c_void_p)"), binding="python")
        case("python: argtypes left unset", ["python: dlock_extend: argtypes not set"],
             sub("python", '    _fn(lib, "dlock_extend"', '    lib.dlock_extend.restype = '
                 'ctypes.c_int\n    (lambda *a: None)(lib, "dlock_extend"'), binding="python")
        case("node: a parameter's width", ["node: dlock_extend: parameter 2 (lease_ms) is uint32, "
             "dlock.h says uint64", "native.js:5"],
             sub("node", "int dlock_extend(void *l, uint64_t lease_ms)",
                 "int dlock_extend(void *l, uint32_t lease_ms)"), binding="node")
        case("node: koffi's own type names", ["node: dlock_lock_attempts: returns int64, dlock.h "
             "says uint32"],
             sub("node", "`uint32 dlock_lock_attempts", "`int64 dlock_lock_attempts"),
             binding="node")
        case("node: size_t is not uint64_t", ["node: dlock_url_redact: parameter 3 (len) is "
             "uint64, dlock.h says size_t"], sub("node", "uint8_t *buf, size_t len)",
                                                 "uint8_t *buf, uint64_t len)"), binding="node")
        case("node: a pointer to the wrong integer", ["node: dlock_queue_pop: parameter 3 "
             "(status) is int64*, dlock.h says int32*"],
             sub("node", "_Out_ int *status", "_Out_ int64_t *status"), binding="node")
        case("node: a function dlock.h does not export", ["node: dlock_internal_helper: not "
             "exported by dlock.h"],
             sub("node", "};", "  h: f('void dlock_internal_helper(void)'),\n};"),
             binding="node")
        case("node: a parameter too many", ["node: dlock_lock_attempts: takes 2 parameter(s)"],
             sub("node", "dlock_lock_attempts(void *l)", "dlock_lock_attempts(void *l, int x)"),
             binding="node")
        case("luajit: a parameter's type",
             ["luajit: dlock_extend: parameter 2 (lease_ms) is int32, dlock.h says uint64",
              "dlock.lua:9"],
             sub("luajit", "dlock_status dlock_extend(dlock_lock *l, uint64_t lease_ms);",
                 "dlock_status dlock_extend(dlock_lock *l, int lease_ms);"), binding="luajit")
        case("luajit: the return type (in a ffi.cdef(\"...\"))", ["luajit: dlock_url_redact: "
             "returns int32, dlock.h says size_t"],
             sub("luajit", '"size_t dlock_url_redact', '"int dlock_url_redact'), binding="luajit")
        case("luajit: a callback typedef's signature (in a [==[ ]==] string)",
             ["luajit: dlock_options_set_on_lost: parameter 2 (fn) is callback(int32;"],
             sub("luajit", "typedef void (*dlock_lost_fn)", "typedef int (*dlock_lost_fn)"),
             binding="luajit")
        case("luajit: a declaration clang refuses", ["luajit: cannot read its declarations",
             "unknown type name"], sub("luajit", "dlock_lock **lock);", "dlock_lok **lock);"),
             binding="luajit")
        # dlock.h changes: every binding that binds the function must fail.
        case("dlock.h: a parameter's type changes under all three",
             ["python: dlock_extend: parameter 2 (lease_ms) is uint64, dlock.h says int64",
              "node: dlock_extend: parameter 2 (lease_ms) is uint64, dlock.h says int64",
              "luajit: dlock_extend: parameter 2 (lease_ms) is uint64, dlock.h says int64"],
             header=FIXTURE_HEADER.replace("dlock_extend(dlock_lock *l, uint64_t lease_ms)",
                                           "dlock_extend(dlock_lock *l, int64_t lease_ms)"))
        case("dlock.h: a parameter appended", ["node: dlock_url_redact: takes 3 parameter(s)",
                                               "dlock.h says 4"],
             header=FIXTURE_HEADER.replace("char *buf, size_t len)",
                                           "char *buf, size_t len, int z)"))
        case("dlock.h: a function taken out of the export list",
             ["luajit: dlock_extend: not exported by dlock.h"],
             header=FIXTURE_HEADER.replace("DLOCK_API dlock_status dlock_extend",
                                           "dlock_status dlock_extend"), binding="luajit")

        # The real files: a type changed in dlock.h, and in each binding's own text.
        with open(os.path.join(root, HEADER), encoding="utf-8") as f:
            real_header = f.read()
        m = re.search(r"(dlock_extend\s*\(\s*dlock_lock\s*\*\s*l\s*,\s*)uint64_t", real_header)
        if not m:
            print("self-test: FAIL the real dlock.h: dlock_extend(dlock_lock *l, uint64_t ...) "
                  "not found to change")
            failed += 1
        else:
            binds = []
            for b in BINDINGS:
                try:
                    sigs, _ = read_binding(clang, root, b)
                except CheckError:
                    continue  # the plain run reports it
                if "dlock_extend" in sigs:
                    binds.append(b)
            changed = real_header[:m.start(1)] + m.group(1) + "uint32_t" + real_header[m.end():]
            case(f"the real dlock.h with dlock_extend's lease_ms made uint32_t fails "
                 f"{', '.join(binds) or '(no binding binds dlock_extend)'}",
                 [f"{b}: dlock_extend: parameter 2 (lease_ms) is uint64, dlock.h says uint32"
                  for b in binds] or ["<no binding binds dlock_extend>"],
                 header=changed, real=True)
        for b, pattern, new in (
                ("python", r"ctypes\.c_uint64(?=\s*[\],])", "ctypes.c_uint32"),
                ("node", r"\buint64_t(?= \w+[,)])", "uint32_t"),
                ("luajit", r"\buint64_t(?= \w+[,)])", "uint32_t")):
            with open(os.path.join(root, MAIN_FILE[b]), encoding="utf-8") as f:
                src = f.read()
            # the first such type on a line that declares a dlock_* function (not a typedef)
            hit = None
            for mm in re.finditer(pattern, src):
                bol = src.rfind("\n", 0, mm.start()) + 1
                eol = src.find("\n", mm.start())
                text = src[bol:eol if eol >= 0 else len(src)]
                declares = re.search(r"\bdlock_\w+\s*\(|[\"']dlock_\w+[\"']", text)
                if declares and "typedef" not in text:
                    hit = mm
                    break
            if hit is None:
                print(f"self-test: FAIL the real {MAIN_FILE[b]}: no uint64 parameter found to "
                      "change")
                failed += 1
                continue
            line = line_at(src, hit.start())
            changed = src[:hit.start()] + new + src[hit.end():]
            case(f"the real {MAIN_FILE[b]} with one uint64 parameter made uint32 "
                 f"(line {line}) fails", [f"{b}: ", "is uint32, dlock.h says uint64",
                                          f"{MAIN_FILE[b]}:{line}"],
                 sources={b: changed}, header=real_header, binding=b, real=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return failed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source-dir", default=os.path.normpath(os.path.join(here, "..", "..")),
                    help="the dlock source tree (default: this script's)")
    ap.add_argument("--clang", default=os.environ.get("CLANG", "clang"))
    ap.add_argument("--self-test", action="store_true",
                    help="prove that wrong declarations are caught")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print every prototype as classes")
    args = ap.parse_args()
    try:
        clang = Clang(args.clang)
        if args.self_test:
            failed = self_test(clang, args.source_dir)
            result = f"FAILED: {failed} case(s)" if failed else "passed"
            print(f"check_prototypes self-test: {result}")
            return 1 if failed else 0
        errors = run_check(clang, args.source_dir, verbose=args.verbose)
    except CheckError as e:
        print(f"check_prototypes: {e}", file=sys.stderr)
        return 2
    if errors:
        print(f"check_prototypes: FAILED: {len(errors)} mismatch(es) between the bindings "
              "and dlock.h:")
        for e in errors:
            print(f"  {e}")
        return 1
    print("check_prototypes: every binding's declarations match dlock.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
