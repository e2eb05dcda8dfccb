'use strict';
// Symbol.asyncDispose, which `await using` calls at the end of its block (the syntax itself is
// compiled and run by typescript.test.js): a lock is released, a client closed, and a lock lost
// meanwhile makes the block throw.
const test = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');

const { Client, LockLostError } = require('libdlock');
const { URL, cli, key, unique } = require('./support/helpers');

test('Lock and Client have Symbol.asyncDispose', async () => {
  const client = await Client.connect(URL);
  const lock = await client.acquire(unique('dispose'));
  assert.equal(cli('EXISTS', key(lock.name)), '1');
  await lock[Symbol.asyncDispose]();
  assert.equal(lock.released, true);
  assert.equal(cli('EXISTS', key(lock.name)), '0');
  await lock[Symbol.asyncDispose]();  // released already (by hand, or by the block): fine

  const lost = await client.acquire(unique('dispose'), { leaseMs: 5000, heartbeatMs: 100 });
  const gone = once(lost, 'lost');
  cli('DEL', key(lost.name));
  const keepAlive = setTimeout(() => {}, 10000);  // a held lock keeps no process alive; the wait is bounded by it
  await gone;
  clearTimeout(keepAlive);
  await assert.rejects(lost[Symbol.asyncDispose](), LockLostError);  // never silent

  const kept = await client.acquire(unique('dispose'), { leaseMs: 60000 });
  await client[Symbol.asyncDispose]();
  assert.equal(client.closed, true);
  assert.equal(cli('EXISTS', key(kept.name)), '0');  // close() released it
});
