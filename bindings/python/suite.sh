#!/usr/bin/env bash
# The Python binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# First installs the package as README.md says (pip install --no-index, in a fresh virtualenv:
# needs the venv module, Debian's python3-venv). Then type-checks tests/typed_example.py with
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
check_types || rc=1
echo "python binding: $($PYTHON --version) ($(command -v "$PYTHON"))"
"$PYTHON" tests/run.py python || rc=1
# asyncio once more on its worker-thread fallback (kept for runtimes without the queue path)
DLOCK_PY_FORCE_THREADS=1 "$PYTHON" tests/run.py python-threads || rc=1
exit $rc
