#!/usr/bin/env bash
# Tests the Python binding against a throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/python/test.sh
#
# DLOCK_LIBRARY defaults to <repo>/build/libdlock.so when that exists; a relative path is
# relative to the caller's directory. PYTHON picks the interpreter (default: python3 on PATH).
# First installs the package as README.md says (pip install --no-index, in a fresh virtualenv:
# needs the venv module, Debian's python3-venv). Then runs the suite twice: as shipped, and with
# asyncio on the thread-pool fallback (DLOCK_PY_FORCE_THREADS=1). Needs redis-server and
# redis-cli.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/scripts/lib.sh"

# Paths the caller gave are relative to the caller's directory: absolute before the steps
# below change directory.
use_dlock_library
PYTHON=${PYTHON:-python3}
if [[ $PYTHON == */* && $PYTHON != /* ]]; then PYTHON=$PWD/${PYTHON#./}; fi

work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# The README's install command, offline, in a fresh virtualenv (which has pip, and may have an
# old setuptools and no wheel: the in-tree build backend needs neither). Then the installed
# copy, not this directory, must import and load the library.
check_install() {
  local venv=$work/venv got
  if ! "$PYTHON" -m venv "$venv"; then
    echo "python install: '$PYTHON -m venv' failed (on Debian: apt-get install python3-venv)"
    return 1
  fi
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --quiet --no-index --no-cache-dir "$here" ||
    { echo "python install: pip install --no-index failed"; return 1; }
  got=$(cd "$work" && "$venv/bin/python" -c '
import sys, dlock
assert dlock.__file__.startswith(sys.prefix + "/"), "imported " + dlock.__file__
print(dlock.__version__, dlock.version())') || { echo "python install: import dlock failed"; return 1; }
  local want
  want=$(cd "$here" && "$PYTHON" -c 'import dlock; print(dlock.__version__, dlock.version())')
  if [[ $got != "$want" ]]; then
    echo "python install: installed dlock says '$got', this tree '$want'"
    return 1
  fi
  echo "python install: ok (pip install --no-index in a fresh venv: dlock ${got% *}, library ${got#* })"
}

rc=0
check_install || rc=1

start_redis "$work"
export REDIS_PORT REDIS_URL
echo "python binding: $($PYTHON --version) ($(command -v "$PYTHON")), library ${DLOCK_LIBRARY:-<search>}, redis $REDIS_URL"

(cd "$here" && "$PYTHON" tests/run.py python) || rc=1
# asyncio once more on its worker-thread fallback (kept for runtimes without the queue path)
(cd "$here" && DLOCK_PY_FORCE_THREADS=1 "$PYTHON" tests/run.py python-threads) || rc=1
exit $rc
