#!/usr/bin/env python3
"""Runs every code example of the READMEs and of docs/ as printed, so that they stay true.

A fenced block tagged c, cpp, python, js, mjs (an ES module), lua or bash is an example: a complete program that
must build (C and C++ with -Wall -Wextra -Werror against the build tree) and exit 0 within 30 s
(bash: run with -euo pipefail, the build's `dlock` command first on PATH). Blocks tagged
otherwise are not run: sh for commands, text for URLs and grammar, c++ or cmake for fragments
that are not whole programs, crontab, none. The one liberty taken: the addresses the documents
print for a local server (127.0.0.1:6379 for Redis, http://127.0.0.1:4567 for dynalite,
127.0.0.1:2379 for etcd, 127.0.0.1:5432 for PostgreSQL) are replaced with the throwaway
servers' addresses.
AWS_* variables are cleared, as on a new user's machine.

    check_examples.py --source-dir . --build-dir build --redis 127.0.0.1:PORT \\
        --dynalite http://127.0.0.1:PORT --etcd 127.0.0.1:PORT --postgres 127.0.0.1:PORT \\
        --docs-dir docs README.md bindings/*/README.md

Every README named must hold at least one example. Every Markdown file under each --docs-dir
(found recursively, so a new page is checked without being named anywhere) is checked too, and
may hold none. The last line reads `readme-examples: N passed, N failed`.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RUNNABLE = {"c", "cpp", "python", "js", "mjs", "lua", "bash"}
FENCE = re.compile(r"^```(\S*)\s*$")
TIMEOUT_S = 30


def examples(path):
    """Yields (line, lang, code) for each runnable fenced block of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end == len(lines):
            raise SystemExit(f"{path}:{i + 1}: unterminated code block")
        if lang in RUNNABLE:
            yield i + 1, lang, "\n".join(lines[start:end]) + "\n"
        i = end + 1


def pkg_config(*names):
    out = subprocess.run(["pkg-config", "--cflags", "--libs", *names], check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def commands(lang, code, work, args):
    """The commands that build (if needed) and run one example, in order."""
    src = os.path.abspath(args.source_dir)
    build = os.path.abspath(args.build_dir)
    if lang in ("c", "cpp"):
        ext, compiler, std = (".c", "cc", "-std=c11") if lang == "c" else (".cpp", "c++", "-std=c++17")
        source = os.path.join(work, "example" + ext)
        binary = os.path.join(work, "example")
        with open(source, "w") as f:
            f.write(code)
        flags = [std, "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(src, "include"),
                 "-L" + build, "-Wl,-rpath," + build]
        libs = ["-ldlock"]
        if "<event2/" in code:
            libs += pkg_config("libevent", "libevent_pthreads")
        if "<uv.h>" in code or "<dlock/adapters/libuv.h>" in code:
            libs += pkg_config("libuv")
        return [[compiler, *flags, "-o", binary, source, *libs], [binary]]
    runner, ext = {"python": ("python3", ".py"), "js": ("node", ".js"), "mjs": ("node", ".mjs"), "lua": ("luajit", ".lua"),
                   "bash": ("bash", ".sh")}[lang]
    script = os.path.join(work, "example" + ext)
    with open(script, "w") as f:
        f.write(code)
    if lang == "bash":
        return [[runner, "-euo", "pipefail", script]]
    return [[runner, script]]


def environment(work, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    src = os.path.abspath(args.source_dir)
    env["DLOCK_LIBRARY"] = os.path.join(os.path.abspath(args.build_dir), "libdlock.so")
    env["PYTHONPATH"] = os.path.join(src, "bindings", "python")
    env["LUA_PATH"] = os.path.join(src, "bindings", "luajit", "?.lua") + ";;"
    # require('libdlock') finds bindings/node, as after `npm install /path/to/bindings/node`.
    modules = os.path.join(work, "node_modules")
    os.makedirs(modules, exist_ok=True)
    os.symlink(os.path.join(src, "bindings", "node"), os.path.join(modules, "libdlock"))
    env["NODE_PATH"] = modules
    env["PATH"] = os.path.join(os.path.abspath(args.build_dir), "cli") + os.pathsep + env.get("PATH", "")
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--redis", required=True, help="host:port of a throwaway redis-server")
    parser.add_argument("--dynalite", required=True, help="http://host:port of a throwaway dynalite")
    parser.add_argument("--etcd", required=True, help="host:port of a throwaway etcd")
    parser.add_argument("--postgres", required=True, help="host:port of a throwaway PostgreSQL")
    parser.add_argument("--docs-dir", action="append", default=[],
                        help="a folder whose Markdown files (recursively) are checked too; "
                             "they may hold no example")
    parser.add_argument("readmes", nargs="+")
    args = parser.parse_args()

    documents = [(readme, True) for readme in args.readmes]
    for docs in args.docs_dir:
        if not os.path.isdir(docs):
            raise SystemExit(f"check_examples: --docs-dir {docs}: no such folder")
        pages = sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))
        if not pages:
            raise SystemExit(f"check_examples: --docs-dir {docs}: no Markdown file in it")
        documents += [(page, False) for page in pages if page not in args.readmes]

    passed = failed = 0
    for readme, required in documents:
        found = list(examples(readme))
        if not found:
            if required:
                print(f"FAIL {readme}: no example found (expected at least one)")
                failed += 1
            else:
                print(f"--   {readme}: no runnable example")
            continue
        for line, lang, code in found:
            code = code.replace("http://127.0.0.1:4567", args.dynalite)
            code = code.replace("127.0.0.1:6379", args.redis)
            code = code.replace("127.0.0.1:2379", args.etcd)
            code = code.replace("127.0.0.1:5432", args.postgres)
            work = tempfile.mkdtemp(prefix="dlock-readme-")
            started = time.monotonic()
            ok, output = True, ""
            try:
                env = environment(work, args)
                for cmd in commands(lang, code, work, args):
                    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                                       timeout=TIMEOUT_S)
                    output += r.stdout + r.stderr
                    if r.returncode != 0:
                        ok = False
                        output += f"[{os.path.basename(cmd[0])} exited {r.returncode}]\n"
                        break
            except subprocess.TimeoutExpired as e:
                ok = False
                output += f"[timed out after {TIMEOUT_S} s: {' '.join(e.cmd)}]\n"
            finally:
                shutil.rmtree(work, ignore_errors=True)
            took = time.monotonic() - started
            where = f"{readme}:{line} [{lang}]"
            if ok:
                passed += 1
                first = output.strip().split("\n")[0] if output.strip() else ""
                print(f"ok   {where} ({took:.1f} s) {first[:100]}")
            else:
                failed += 1
                print(f"FAIL {where} ({took:.1f} s)\n" + "".join("     | " + l + "\n" for l in output.rstrip().split("\n")))
    print(f"readme-examples: {passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
