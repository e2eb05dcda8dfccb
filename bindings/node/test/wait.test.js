'use strict';
// acquire() and using() wait for the lock by default, as node-redlock's retries and `dlock exec`
// do: waitMs bounds the wait, waitMs: 0 makes one try, an AbortSignal cancels it.
const test = require('node:test');
const assert = require('node:assert/strict');

const { Client, NotAcquiredError, CancelledError } = require('libdlock');
const { URL, cli, key, unique, waitFor } = require('./support/helpers');

let holder;
let waiter;
test.before(async () => { [holder, waiter] = await Promise.all([Client.connect(URL), Client.connect(URL)]); });
test.after(async () => { await Promise.all([holder.close(), waiter.close()]); });

// The waiter stands in line (fair waiting, the Redis default) once its first try was refused:
// the point where it is certainly waiting, not about to try.
const inLine = (name, n = 1) => waitFor(() => cli('ZCARD', `${key(name)}:line`) === String(n), 10000);

test('acquire() with no options waits for the holder to release', async () => {
  const name = unique('wait');
  const held = await holder.acquire(name);
  let settled = false;
  const pending = waiter.acquire(name).finally(() => { settled = true; });
  assert.ok(await inLine(name), 'the acquire did not wait in line');
  assert.equal(settled, false);
  await held.release();
  const lock = await pending;
  assert.ok(lock.fencingToken > held.fencingToken);
  assert.equal((await holder.inspect(name)).holders[0].fencingToken, lock.fencingToken);
  await lock.release();
});

test('using() with no options waits too, and runs once it holds the lock', async () => {
  const name = unique('wait');
  const held = await holder.acquire(name);
  const order = [];
  const pending = waiter.using(name, async (lock) => {
    order.push('ran');
    return lock.fencingToken;
  });
  assert.ok(await inLine(name));
  order.push('released');
  await held.release();
  assert.ok((await pending) > held.fencingToken);
  assert.deepEqual(order, ['released', 'ran']);
  assert.equal(cli('EXISTS', key(name)), '0');
});

test('waitMs: 0 makes one try; waitMs: N gives up after N ms', async () => {
  const name = unique('wait');
  const held = await holder.acquire(name);
  const once = await waiter.acquire(name, { waitMs: 0 }).catch((e) => e);
  assert.ok(once instanceof NotAcquiredError, String(once));
  assert.equal(once.code, 'ERR_DLOCK_NOT_ACQUIRED');
  assert.match(once.message, /gave up after 1 attempt/);
  const t0 = Date.now();
  const bounded = await waiter.acquire(name, { waitMs: 200 }).catch((e) => e);
  assert.ok(bounded instanceof NotAcquiredError, String(bounded));
  assert.ok(Date.now() - t0 >= 190, `gave up after ${Date.now() - t0} ms`);
  // the same through using(): fn never runs
  await assert.rejects(waiter.using(name, { waitMs: 0 }, () => assert.fail('ran without the lock')), NotAcquiredError);
  await held.release();
});

test('an AbortSignal cancels a wait without limit, and leaves nothing behind', async () => {
  const name = unique('wait');
  const held = await holder.acquire(name);
  const ac = new AbortController();
  const pending = waiter.acquire(name, { signal: ac.signal }).catch((e) => e);
  assert.ok(await inLine(name));
  ac.abort(new Error('shutting down'));
  const err = await pending;
  assert.ok(err instanceof CancelledError, String(err));
  assert.equal(err.code, 'ERR_DLOCK_ECANCELLED');
  assert.match(err.message, /aborted/);
  assert.equal(err.cause.message, 'shutting down');
  // the cancelled waiter left the line and will not take the lock when it comes free
  assert.ok(await inLine(name, 0), 'the cancelled waiter is still in line');
  await held.release();
  assert.deepEqual((await holder.inspect(name)).holders, []);
  // AbortSignal.timeout() bounds a wait as waitMs does, with the signal's own reason
  const again = await holder.acquire(name);
  const timedOut = await waiter.using(name, { signal: AbortSignal.timeout(100) }, () => assert.fail('ran')).catch((e) => e);
  assert.ok(timedOut instanceof CancelledError, String(timedOut));
  assert.equal(timedOut.cause.name, 'TimeoutError');
  await again.release();
});

test('a signal that aborts before the client is connected still cancels the wait', async () => {
  const name = unique('wait');
  const held = await holder.acquire(name);
  const fresh = new Client(URL);  // still connecting when the acquire starts and the signal aborts
  try {
    const ac = new AbortController();
    const pending = fresh.acquire(name, { signal: ac.signal }).catch((e) => e);
    ac.abort();
    let timer;
    const err = await Promise.race([pending, new Promise((resolve) => {
      timer = setTimeout(() => resolve(new Error('the aborted acquire still waits after 10 s')), 10000);
    })]).finally(() => clearTimeout(timer));
    assert.ok(err instanceof CancelledError, String(err));
  } finally {
    await fresh.close();
    await held.release();
  }
});
