'use strict';
// options.reentrant (dlock_options_set_reentrant): the same client and context re-enter their
// hold at once (a Lock of its own, the same fencing token); only the last release frees the
// name; another context, or none, contends. On both paths (suite.sh runs every file on the
// addon path, then on the koffi path).
const test = require('node:test');
const assert = require('node:assert/strict');

const { Client, NotAcquiredError, InvalidArgumentError } = require('libdlock');
const { URL, unique } = require('./support/helpers');

let client;
let other;
test.before(async () => {
  client = await Client.connect(URL);
  other = await Client.connect(URL);
});
test.after(async () => {
  await client.close();
  await other.close();
});

test('reentrant: the same context re-enters, and only the last release frees the name', async () => {
  const name = unique('reentrant');
  const outer = await client.acquire(name, { leaseMs: 5000, reentrant: 'request-42' });
  const inner = await client.acquire(name, { waitMs: 0, reentrant: 'request-42' });
  assert.notEqual(inner, outer);
  assert.equal(inner.fencingToken, outer.fencingToken);
  const leader = await client.campaign(name, { reentrant: 'request-42' });  // a campaign re-enters too
  assert.equal(leader.fencingToken, outer.fencingToken);
  await leader.release();
  await assert.rejects(client.acquire(name, { waitMs: 0, reentrant: 'request-43' }), NotAcquiredError);
  await assert.rejects(client.acquire(name, { waitMs: 0 }), NotAcquiredError);
  await inner.release();
  await assert.rejects(other.acquire(name, { waitMs: 0 }), NotAcquiredError);
  assert.equal(outer.valid, true);
  await outer.release();
  await (await other.acquire(name, { waitMs: 0 })).release();
});

test('reentrant: bad contexts', async () => {
  await assert.rejects(client.acquire('x', { reentrant: '' }),
    (e) => e instanceof TypeError && /reentrant context is empty/.test(e.message));
  await assert.rejects(client.acquire('x', { reentrant: 42 }), TypeError);
  await assert.rejects(client.acquire(unique('reentrant'), { reentrant: 'c'.repeat(257) }),  // the library's check
    (e) => e instanceof InvalidArgumentError && /reentrant context is longer than 256 bytes/.test(e.message));
  await assert.rejects(client.campaign('x', { reentrant: '' }), TypeError);
});
