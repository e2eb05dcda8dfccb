'use strict';
// Values a user passes on: fencing tokens through JSON (a bigint has no JSON form), and errors
// caught by class, with Node-style codes.
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, DlockError, NotAcquiredError, LockLostError, InvalidArgumentError, BackendError } = dlock;
const { URL, cli, key, unique } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

test('a lock serializes as its fencing token, a decimal string, exact at the top of the range', async () => {
  const name = unique('json');
  // The library issues tokens up to 2^53 - 1: the next one here is 2^53 - 9.
  cli('SET', `${key(name)}:fence`, String(2n ** 53n - 10n));
  const lock = await client.acquire(name);
  try {
    assert.equal(lock.fencingToken, 2n ** 53n - 9n);
    assert.equal(JSON.stringify(lock), '"9007199254740983"');
    const body = JSON.stringify({ t: lock, name: lock.name });
    assert.equal(body, `{"t":"9007199254740983","name":"${name}"}`);
    assert.equal(BigInt(JSON.parse(body).t), lock.fencingToken);  // and back, exactly
    assert.equal(lock.fencingToken.toString(), '9007199254740983');  // the documented string form
    // the bigint itself still has no JSON form: that is JavaScript's, left alone
    assert.throws(() => JSON.stringify({ t: lock.fencingToken }), TypeError);
  } finally {
    await lock.release();
  }
});

test('failures of real calls come as the classes a user catches', async () => {
  const name = unique('classes');
  const held = await client.acquire(name);
  const busy = await client.acquire(name, { waitMs: 0 }).catch((e) => e);
  assert.ok(busy instanceof NotAcquiredError && busy instanceof DlockError);
  assert.equal(busy.code, 'ERR_DLOCK_NOT_ACQUIRED');
  assert.equal(busy.name, 'NotAcquiredError');
  cli('DEL', key(name));
  const lost = await held.release().catch((e) => e);
  assert.ok(lost instanceof LockLostError, String(lost));
  assert.equal(lost.code, 'ERR_DLOCK_NOT_HELD');
  const bad = await client.acquire('x'.repeat(dlock.MAX_NAME_BYTES + 1)).catch((e) => e);
  assert.ok(bad instanceof InvalidArgumentError, String(bad));
  assert.equal(bad.code, 'ERR_DLOCK_EINVAL');
  const down = await Client.connect('redis://127.0.0.1:1?connect_timeout_ms=500').catch((e) => e);
  assert.ok(down instanceof BackendError, String(down));
  assert.equal(down.code, 'ERR_DLOCK_EIO');
  // argument types stay Node's own errors
  await assert.rejects(client.acquire(name, { waitMs: '5' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('the limits are the library\'s own', () => {
  const { C } = require('../lib/native');
  assert.equal(dlock.MAX_NAME_BYTES, Number(C.limit_value(0)));
  assert.equal(dlock.MAX_OWNER_BYTES, Number(C.limit_value(1)));
  assert.equal(dlock.MAX_VALUE_BYTES, Number(C.limit_value(3)));
});
