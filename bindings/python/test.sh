#!/usr/bin/env bash
# Tests the Python binding against a throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/python/test.sh
#
# DLOCK_LIBRARY defaults to <repo>/build/libdlock.so when that exists. PYTHON picks the
# interpreter (default: python3 on PATH). Runs the suite twice: as shipped, and with asyncio on
# the thread-pool fallback (DLOCK_PY_FORCE_THREADS=1). Needs redis-server and redis-cli.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/scripts/lib.sh"

if [[ -z ${DLOCK_LIBRARY:-} && -e $repo/build/libdlock.so ]]; then
  DLOCK_LIBRARY=$repo/build/libdlock.so
fi
export DLOCK_LIBRARY
PYTHON=${PYTHON:-python3}

work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
export REDIS_PORT REDIS_URL
echo "python binding: $($PYTHON --version) ($(command -v "$PYTHON")), library ${DLOCK_LIBRARY:-<search>}, redis $REDIS_URL"

rc=0
(cd "$here" && "$PYTHON" tests/run.py python) || rc=1
# asyncio once more on its worker-thread fallback (kept for runtimes without the queue path)
(cd "$here" && DLOCK_PY_FORCE_THREADS=1 "$PYTHON" tests/run.py python-threads) || rc=1
exit $rc
