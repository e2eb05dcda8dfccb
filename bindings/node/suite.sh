#!/usr/bin/env bash
# The Node binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# Needs node (>= 18) and the packages of package-lock.json in node_modules: koffi, and
# typescript and @types/node for the TypeScript test (`npm ci` here; run when missing). Uses
# node's built-in test runner; fails unless some tests ran and none failed. Then the npm tarball
# as a user gets it: pack.sh bundles $DLOCK_LIBRARY into it, test-install.sh installs it in a
# fresh directory (koffi from the npm cache or registry) and locks from CommonJS and ESM.
set -euo pipefail
if [[ ! -e node_modules/koffi/package.json || ! -e node_modules/typescript/package.json ||
  ! -e node_modules/@types/node/package.json ]]; then
  echo "node binding: node_modules is incomplete; running npm ci in $PWD" >&2
  npm ci --no-audit --no-fund
fi

echo "node binding: node $(node --version)"
rc=0
node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$DLOCK_TEST_WORK/tap" test/*.test.js test/*.test.mjs || rc=$?
pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$DLOCK_TEST_WORK/tap" | tail -1)
fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$DLOCK_TEST_WORK/tap" | tail -1)
echo "node: ${pass:-0} passed, ${fail:-0} failed"
if [[ -z $pass || $pass == 0 ]]; then rc=1; fi

if [[ -f ${DLOCK_LIBRARY:-} ]]; then
  tarball=$(./pack.sh "$DLOCK_TEST_WORK/pack" "$DLOCK_LIBRARY") || rc=1
  if [[ -n ${tarball:-} ]]; then ./test-install.sh "$tarball" || rc=1; fi
else
  echo "node-install: skipped: DLOCK_LIBRARY (${DLOCK_LIBRARY:-unset}) is not a file to bundle"
fi
exit $rc
