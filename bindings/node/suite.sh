#!/usr/bin/env bash
# The Node binding's suite, run by bindings/test.sh (which sets REDIS_PORT, REDIS_URL,
# DLOCK_LIBRARY and DLOCK_TEST_WORK, and runs it from this directory).
#
# Needs node (>= 18) and the packages of package-lock.json in node_modules: koffi, typescript
# and @types/node for the TypeScript test, prom-client for the metrics test, @opentelemetry/api
# for the tracing test (`npm ci` here; run when missing). Uses
# node's built-in test runner; fails unless some tests ran and none failed. Then the npm tarball
# as a user gets it: pack.sh bundles $DLOCK_LIBRARY into it, test-install.sh installs it in a
# fresh directory (koffi from the npm cache or registry) and locks from CommonJS and ESM.
set -euo pipefail
if [[ ! -e node_modules/koffi/package.json || ! -e node_modules/typescript/package.json ||
  ! -e node_modules/@types/node/package.json || ! -e node_modules/prom-client/package.json ||
  ! -e node_modules/@opentelemetry/api/package.json ]]; then
  echo "node binding: node_modules is incomplete; running npm ci in $PWD" >&2
  npm ci --no-audit --no-fund
fi

echo "node binding: node $(node --version)"
rc=0
# Twice: on the addon path (dlock.node next to the library: DLOCK_NODE_ADDON=1 makes a failure
# to load it an error), then on the koffi path (DLOCK_NODE_ADDON=0). Without a built addon, the
# first pass is the koffi path too.
addon=
if [[ -f ${DLOCK_LIBRARY:-} && -f $(dirname "$(readlink -f "$DLOCK_LIBRARY")")/dlock.node ]]; then addon=1; fi
for path in addon koffi; do
  if [[ $path == addon ]]; then mode=$addon; else mode=0; fi
  tap=$DLOCK_TEST_WORK/tap-$path
  echo "node binding: the $path path (DLOCK_NODE_ADDON=${mode:-<unset>})"
  DLOCK_NODE_ADDON=$mode node --test --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" test/*.test.js test/*.test.mjs || rc=$?
  pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$tap" | tail -1)
  fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$tap" | tail -1)
  echo "node-$path: ${pass:-0} passed, ${fail:-0} failed"
  if [[ -z $pass || $pass == 0 ]]; then rc=1; fi
done

if [[ -f ${DLOCK_LIBRARY:-} ]]; then
  tarball=$(./pack.sh "$DLOCK_TEST_WORK/pack" "$DLOCK_LIBRARY") || rc=1
  if [[ -n ${tarball:-} ]]; then ./test-install.sh "$tarball" || rc=1; fi
else
  echo "node-install: skipped: DLOCK_LIBRARY (${DLOCK_LIBRARY:-unset}) is not a file to bundle"
fi
exit $rc
