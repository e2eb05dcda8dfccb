#!/usr/bin/env bash
# The Node binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# Needs node (>= 18) and koffi in node_modules (`npm ci` here; run when missing). Uses node's
# built-in test runner; fails unless some tests ran and none failed.
set -euo pipefail
if [[ ! -e node_modules/koffi/package.json ]]; then
  echo "node binding: koffi is not installed; running npm ci in $PWD" >&2
  npm ci --no-audit --no-fund
fi

echo "node binding: node $(node --version)"
rc=0
node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$DLOCK_TEST_WORK/tap" test/*.test.js || rc=$?
pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$DLOCK_TEST_WORK/tap" | tail -1)
fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$DLOCK_TEST_WORK/tap" | tail -1)
echo "node: ${pass:-0} passed, ${fail:-0} failed"
if [[ -z $pass || $pass == 0 ]]; then rc=1; fi
exit $rc
