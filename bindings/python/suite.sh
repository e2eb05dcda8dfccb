#!/usr/bin/env bash
# The Python binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# First installs the package as README.md says (pip install --no-index, in a fresh virtualenv:
# needs the venv module, Debian's python3-venv). Then runs the unittest suite twice: as
# shipped, and with asyncio on the thread-pool fallback (DLOCK_PY_FORCE_THREADS=1). PYTHON
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

rc=0
check_install || rc=1
echo "python binding: $($PYTHON --version) ($(command -v "$PYTHON"))"
"$PYTHON" tests/run.py python || rc=1
# asyncio once more on its worker-thread fallback (kept for runtimes without the queue path)
DLOCK_PY_FORCE_THREADS=1 "$PYTHON" tests/run.py python-threads || rc=1
exit $rc
