#!/usr/bin/env bash
# The Python binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# First installs the package as README.md says (pip install --no-index, in a fresh virtualenv:
# needs the venv module, Debian's python3-venv), and the platform wheel that bundles the library
# in another (check_bundled_wheel). Then type-checks tests/typed_example.py with
# `mypy --strict` (Debian's mypy) against that installed copy, which mypy reads only through its
# py.typed, runs the example, and checks that mypy rejects each wrong call of
# tests/typed_wrong.py. Then runs the unittest suite twice: as shipped, and with asyncio on the
# thread-pool fallback (DLOCK_PY_FORCE_THREADS=1). PYTHON
# picks the interpreter (default: python3 on PATH; a relative path is from the directory
# bindings/test.sh was started in, DLOCK_TEST_CALLER_DIR).
set -euo pipefail
PYTHON=${PYTHON:-python3}
if [[ $PYTHON == */* && $PYTHON != /* ]]; then PYTHON=$DLOCK_TEST_CALLER_DIR/${PYTHON#./}; fi

# The README's install command, offline, in a fresh virtualenv (which has pip, and may have an
# old setuptools and no wheel: the in-tree build backend needs neither). Then the installed
# copy, not this directory, must import and load the library.
check_install() {
  local venv=$DLOCK_TEST_WORK/venv got want
  if ! "$PYTHON" -m venv "$venv"; then
    echo "python install: '$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)"
    return 1
  fi
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --quiet --no-index --no-cache-dir . ||
    { echo "python install: pip install --no-index failed"; return 1; }
  got=$(cd "$DLOCK_TEST_WORK" && "$venv/bin/python" -c '
import sys, dlock
assert dlock.__file__.startswith(sys.prefix + "/"), "imported " + dlock.__file__
print(dlock.__version__, dlock.version())') || { echo "python install: import dlock failed"; return 1; }
  want=$("$PYTHON" -c 'import dlock; print(dlock.__version__, dlock.version())')
  if [[ $got != "$want" ]]; then
    echo "python install: installed dlock says '$got', this tree '$want'"
    return 1
  fi
  echo "python install: ok (pip install --no-index in a fresh venv: dlock ${got% *}, library ${got#* })"
}

# The platform wheel (what scripts/package builds: the package with $DLOCK_LIBRARY bundled), as
# a user has it: pip install of the wheel file in a fresh virtualenv, then a program that locks
# against the throwaway Redis with DLOCK_LIBRARY unset, so it must load the bundled copy. Then
# the pure wheel with no library anywhere: `import dlock` still works, and opening a Client
# says what to install (only where no libdlock is installed system-wide).
check_bundled_wheel() {
  local venv=$DLOCK_TEST_WORK/venv-wheel wheel out
  wheel=$("$PYTHON" build_backend/dlock_backend.py --library "$DLOCK_LIBRARY" "$DLOCK_TEST_WORK/wheel") ||
    { echo "python wheel: building the platform wheel failed"; return 1; }
  "$PYTHON" -m venv "$venv" &&
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --quiet --no-index --no-cache-dir "$wheel" ||
    { echo "python wheel: pip install $wheel failed"; return 1; }
  if ! out=$(cd "$DLOCK_TEST_WORK" && env -u DLOCK_LIBRARY "$venv/bin/python" -c '
import sys, dlock
with dlock.Client(sys.argv[1]) as client:
    lock = client.lock("python-wheel-check")
    with lock:
        token = lock.fencing_token
    assert token > 0 and not lock.owned()
bundled = dlock.library_path
assert bundled.startswith(sys.prefix + "/") and bundled.endswith("/dlock/libdlock.so.0"), bundled
print(bundled)' "$REDIS_URL" 2>&1); then
    printf '%s\n' "$out"
    echo "python wheel: the installed platform wheel did not lock with its bundled library"
    return 1
  fi
  echo "python wheel: ok (${wheel##*/} in a fresh venv locks with its bundled ${out#"$venv"/})"
  if pkg-config --exists dlock 2>/dev/null || ldconfig -p | grep -q 'libdlock\.so'; then
    echo "python wheel: a libdlock is installed system-wide; the no-library check is skipped"
    return 0
  fi
  if ! out=$(cd "$DLOCK_TEST_WORK" && env -u DLOCK_LIBRARY "$DLOCK_TEST_WORK/venv/bin/python" -c '
import sys, dlock  # importing needs no library
try:
    dlock.Client(sys.argv[1])
except OSError as e:
    print(e)
else:
    sys.exit("opened a Client with no libdlock anywhere")' "$REDIS_URL" 2>&1) ||
    [[ $out != *"apt-get install libdlock0"*"DLOCK_LIBRARY"* ]]; then
    printf '%s\n' "$out"
    echo "python wheel: with no library, the error does not say what to install"
    return 1
  fi
  echo "python wheel: ok (with no library anywhere, import works and Client() says what to install)"
}

# mypy --strict on the example that uses every public name, with the package as a user has it:
# installed in the venv (--python-executable), so the types come from its inline annotations
# and only because the wheel carries py.typed. Run from the scratch directory, so that this
# tree's dlock/ is not what mypy finds. The cache goes there too.
run_mypy() {
  (cd "$DLOCK_TEST_WORK" && mypy --strict --cache-dir "$DLOCK_TEST_WORK/mypy-cache" \
    --python-executable "$DLOCK_TEST_WORK/venv/bin/python" "$@")
}

check_types() {
  local here=$PWD out want got
  if ! command -v mypy >/dev/null; then
    echo "python types: no mypy (on Debian: apt-get install mypy)"
    return 1
  fi
  [[ -x $DLOCK_TEST_WORK/venv/bin/python ]] || { echo "python types: no venv (install failed)"; return 1; }
  if ! out=$(run_mypy "$here/tests/typed_example.py" 2>&1); then
    printf '%s\n' "$out"
    echo "python types: mypy --strict rejects tests/typed_example.py"
    return 1
  fi
  if ! (cd "$DLOCK_TEST_WORK" && "$DLOCK_TEST_WORK/venv/bin/python" \
    "$here/tests/typed_example.py" "$REDIS_URL" >typed_example.out 2>&1); then
    cat "$DLOCK_TEST_WORK/typed_example.out"
    echo "python types: tests/typed_example.py failed when run"
    return 1
  fi
  # The self-test: every line marked `# error: CODE` is reported there with that code, and
  # nothing else is (mypy exits 1).
  want=$(awk '/[^ ]  # error: [a-z-]+$/ { sub(/.*# error: /, ""); print NR " " $0 }' tests/typed_wrong.py)
  if out=$(run_mypy "$here/tests/typed_wrong.py" 2>&1); then
    echo "python types: mypy accepted tests/typed_wrong.py"
    return 1
  fi
  got=$(printf '%s\n' "$out" | sed -nE 's/^.*typed_wrong\.py:([0-9]+): error: .*\[([a-z-]+)\]$/\1 \2/p')
  if [[ -z $want || $got != "$want" ]]; then
    printf '%s\n' "$out"
    echo "python types: mypy's errors in tests/typed_wrong.py are not the marked ones:"
    diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") || true
    return 1
  fi
  echo "python types: ok ($(mypy --version | cut -d' ' -f1-2) --strict accepts tests/typed_example.py" \
    "and rejects the $(printf '%s\n' "$want" | wc -l) wrong calls of tests/typed_wrong.py)"
}

rc=0
check_install || rc=1
check_bundled_wheel || rc=1
check_types || rc=1
echo "python binding: $($PYTHON --version) ($(command -v "$PYTHON"))"
"$PYTHON" tests/run.py python || rc=1
# asyncio once more on its worker-thread fallback (kept for runtimes without the queue path)
DLOCK_PY_FORCE_THREADS=1 "$PYTHON" tests/run.py python-threads || rc=1
exit $rc
