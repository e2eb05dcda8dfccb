#!/usr/bin/env bash
# Installs the libdlock npm tarball as a user would, and locks with it from CommonJS and from an
# ES module, against a Redis server.
#
#   REDIS_URL=redis://127.0.0.1:PORT bindings/node/test-install.sh TARBALL
#
# TARBALL: what bindings/node/pack.sh made. In a fresh temporary directory: `npm install
# TARBALL` (koffi, its dependency, comes from the npm cache when it holds it, else from the npm
# registry: --prefer-offline; nothing else is downloaded and nothing is compiled), then two
# programs, app.cjs and app.mjs, run with DLOCK_LIBRARY unset: each must load the library
# bundled in the package (and say so), take a lock, be refused it from a second client, wait
# for it by default, and see the fencing token rise. When DLOCK_LIBRARY is set in the
# environment, a third run checks that it wins over the bundled library. Whether a libdlock is
# installed on the system is reported (none should be, for the check to mean "installs alone";
# the programs check the bundled one was loaded either way).
#
# The last line reads `node-install: N passed, N failed`; the exit status is 1 if any failed.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: REDIS_URL=redis://HOST:PORT bindings/node/test-install.sh TARBALL" >&2
  exit 64
fi
tarball=$1
[[ $tarball == /* ]] || tarball=$PWD/$tarball
[[ -f $tarball ]] || { echo "test-install.sh: $tarball: no such file" >&2; exit 66; }
: "${REDIS_URL:?test-install.sh: set REDIS_URL to a Redis server to lock against}"
explicit=${DLOCK_LIBRARY:-}
if [[ -n $explicit && $explicit != /* ]]; then explicit=$PWD/$explicit; fi

if ldconfig -p 2>/dev/null | grep -q 'libdlock\.so'; then
  echo "node-install: note: the loader's cache has a libdlock (the programs still require the bundled one)"
fi
if pkg-config --exists dlock 2>/dev/null; then
  echo "node-install: note: pkg-config finds dlock (the programs still require the bundled one)"
fi

app=$(mktemp -d)
trap 'rm -rf "$app"' EXIT
cd "$app"
printf '{ "name": "libdlock-install-check", "version": "1.0.0", "private": true }\n' >package.json
echo "node-install: npm install $(basename "$tarball") in a fresh directory"
env -u DLOCK_LIBRARY npm install --prefer-offline --no-audit --no-fund --loglevel=error "$tarball"
bundled=$app/node_modules/libdlock/prebuilds/linux-$(node -p process.arch)/libdlock.so.0
[[ -f $bundled ]] || { echo "node-install: the package has no $bundled" >&2; exit 1; }

cat >app.cjs <<'EOF'
'use strict';
// A CommonJS user: require('libdlock').
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { Client, NotAcquiredError, library } = require('libdlock');

const [url, expectLibrary] = process.argv.slice(2);
(async () => {
  const a = await Client.connect(url);
  const b = await Client.connect(url);
  const name = `install-cjs-${process.pid}`;
  const lock = await a.acquire(name, { leaseMs: 5000 });
  await assert.rejects(b.acquire(name, { waitMs: 0 }), NotAcquiredError);
  const waited = b.using(name, async (held) => held.fencingToken);  // waits by default
  await lock.release();
  const token = await waited;
  assert.ok(token > lock.fencingToken);
  // what the client counted: its one acquire, as Prometheus text
  assert.match(a.metricsText(), /^dlock_acquires_total\{kind="exclusive",outcome="acquired"\} 1$/m);
  const lib = library();
  assert.equal(fs.realpathSync(lib.path), fs.realpathSync(expectLibrary), `loaded ${lib.path}`);
  console.log(`cjs: ok, ${lib.path} (libdlock ${lib.version}, ${lib.native} path), tokens ${lock.fencingToken} < ${token}`);
  await a.close();
  await b.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
EOF

cat >app.mjs <<'EOF'
// An ES module user: named imports from 'libdlock'.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client, Lock, LockLostError, NotAcquiredError, Mutex, library } from 'libdlock';

const [url, expectLibrary] = process.argv.slice(2);
const a = await Client.connect(url);
const b = await Client.connect(url);
const name = `install-esm-${process.pid}`;
const mutex = a.mutex(name, { leaseMs: 5000 });
assert.ok(mutex instanceof Mutex);
const release = await mutex.acquire();
assert.ok(release.lock instanceof Lock);
assert.equal(await b.mutex(name).tryAcquire(), false);
const waited = b.acquire(name).catch((e) => e);  // waits by default
await release();
const lock = await waited;
assert.ok(lock instanceof Lock, String(lock));
assert.ok(lock.fencingToken > release.lock.fencingToken);
assert.equal(JSON.stringify({ token: lock }), `{"token":"${lock.fencingToken}"}`);
await lock.release();
assert.ok(new LockLostError('x') instanceof Error);
assert.equal(typeof NotAcquiredError, 'function');
const lib = library();
assert.equal(fs.realpathSync(lib.path), fs.realpathSync(expectLibrary), `loaded ${lib.path}`);
console.log(`esm: ok, ${lib.path} (libdlock ${lib.version}), tokens ${release.lock.fencingToken} < ${lock.fencingToken}`);
await a.close();
await b.close();
EOF

passed=0
failed=0
check() {  # WHAT COMMAND...: runs COMMAND (at most 60 s), counts it under WHAT
  local what=$1
  shift
  if timeout 60 "$@"; then
    passed=$((passed + 1))
  else
    echo "node-install: FAILED: $what" >&2
    failed=$((failed + 1))
  fi
}
check "CommonJS program, bundled library" env -u DLOCK_LIBRARY node app.cjs "$REDIS_URL" "$bundled"
check "ES module program, bundled library" env -u DLOCK_LIBRARY node app.mjs "$REDIS_URL" "$bundled"
if [[ -n $explicit ]]; then
  check "DLOCK_LIBRARY wins over the bundled library" env DLOCK_LIBRARY="$explicit" node app.cjs "$REDIS_URL" "$explicit"
fi
echo "node-install: $passed passed, $failed failed"
((failed == 0))
