// The package as an ES module: `import { ... } from 'libdlock'` gives every export that
// require('libdlock') gives, the very same objects (one instance of the binding, whichever way
// it is loaded), and locks.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as esm from 'libdlock';
import dlock, { Client, Lock, LockLostError, NotAcquiredError, Mutex } from 'libdlock';

const require = createRequire(import.meta.url);
const cjs = require('libdlock');
const { URL, unique } = require('./support/helpers');

test('every CommonJS export is a named ES export, the same object', () => {
  const names = Object.keys(cjs);
  assert.ok(names.length >= 15, names.join(' '));
  for (const name of names) assert.equal(esm[name], cjs[name], name);
  assert.deepEqual(Object.keys(esm).filter((n) => n !== 'default').sort(), [...names].sort());
  assert.equal(dlock, cjs);
  for (const name of ['Client', 'Lock', 'Mutex', 'Semaphore', 'DlockError', 'NotAcquiredError', 'LockLostError',
    'InvalidArgumentError', 'BackendError', 'CancelledError', 'version', 'library', 'codes', 'MAX_NAME_BYTES',
    'MAX_OWNER_BYTES', 'Observer', 'MAX_VALUE_BYTES']) {
    assert.ok(name in esm, `${name} is not exported`);
  }
  // the exports map's other entries
  assert.equal(require('libdlock/package.json').name, 'libdlock');
  assert.equal(require.resolve('libdlock'), require.resolve('../index.js'));
});

test('locking from an ES module', async () => {
  const a = await Client.connect(URL);
  const b = await Client.connect(URL);
  try {
    const name = unique('esm');
    const lock = await a.acquire(name);
    assert.ok(lock instanceof Lock && lock instanceof cjs.Lock);
    const refused = await b.acquire(name, { waitMs: 0 }).catch((e) => e);
    assert.ok(refused instanceof NotAcquiredError && refused instanceof cjs.NotAcquiredError);
    await lock.release();
    await assert.rejects(lock.release(), LockLostError);
    assert.equal(await b.mutex(name).runExclusive(async (held) => held.fencingToken > lock.fencingToken), true);
    assert.ok(b.mutex(name) instanceof Mutex);
  } finally {
    await a.close();
    await b.close();
  }
});
