#!/usr/bin/env bash
# Tests the Node binding against a throwaway redis-server on a free port.
#
#   DLOCK_LIBRARY=/path/to/libdlock.so bindings/node/test.sh
#
# DLOCK_LIBRARY (absolute, or relative to the current directory) defaults to
# <repo>/build/libdlock.so when that exists. Needs node (>= 18), koffi in
# bindings/node/node_modules (`npm ci` there; run here when missing), redis-server and redis-cli.
# Uses node's built-in test runner.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/scripts/lib.sh"

use_dlock_library  # absolute before the cd below
if [[ ! -e $here/node_modules/koffi/package.json ]]; then
  echo "node binding: koffi is not installed; running npm ci in $here" >&2
  (cd "$here" && npm ci --no-audit --no-fund)
fi

work=$(mktemp -d)
trap 'stop_redis; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
start_redis "$work"
export REDIS_PORT REDIS_URL
echo "node binding: node $(node --version), library ${DLOCK_LIBRARY:-<search>}, redis $REDIS_URL"
cd "$here"
rc=0
node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$work/tap" test/*.test.js || rc=$?
pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$work/tap" | tail -1)
fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$work/tap" | tail -1)
echo "node: ${pass:-0} passed, ${fail:-0} failed"
if [[ -z $pass || $pass == 0 ]]; then rc=1; fi
exit $rc
