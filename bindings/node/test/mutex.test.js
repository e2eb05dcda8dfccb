'use strict';
// Mutex and Semaphore: the object API beside using(), named as async-mutex and redis-semaphore
// users know it, backed by the same client and the same locks.
const test = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');

const { Client, Lock, Mutex, Semaphore, NotAcquiredError, LockLostError, CancelledError } = require('libdlock');
const { URL, cli, key, unique, waitFor } = require('./support/helpers');

let a;
let b;
test.before(async () => { [a, b] = await Promise.all([Client.connect(URL), Client.connect(URL)]); });
test.after(async () => { await Promise.all([a.close(), b.close()]); });

test('runExclusive: two processes\' worth of mutexes, no lost update', async () => {
  const name = unique('mutex');
  const counter = `${key(name)}:counter`;
  cli('SET', counter, '0');
  // Read, yield to the event loop, write: without the lock, concurrent runs would lose updates.
  const bump = async () => {
    const v = Number(cli('GET', counter));
    await new Promise((resolve) => setImmediate(resolve));
    cli('SET', counter, String(v + 1));
  };
  const m1 = a.mutex(name);
  const m2 = new Mutex(b, name);  // redis-semaphore's way to make one
  let inside = 0;
  const runs = [];
  for (let i = 0; i < 20; i++) {
    for (const m of [m1, m2]) {
      runs.push(m.runExclusive(async (lock, signal) => {
        assert.ok(lock instanceof Lock);
        assert.equal(signal, lock.signal);
        assert.equal(m.isLocked(), true);
        assert.equal(++inside, 1, 'two holders at once');
        await bump();
        inside--;
        return lock.fencingToken;
      }));
    }
  }
  const tokens = await Promise.all(runs);
  assert.equal(cli('GET', counter), '40');
  assert.equal(new Set(tokens).size, 40);
  assert.equal(m1.isLocked() || m2.isLocked(), false);
  assert.equal(cli('EXISTS', key(name)), '0');
});

test('acquire() resolves with a release function; tryAcquire() makes one try', async () => {
  const name = unique('mutex');
  const mine = a.mutex(name, { leaseMs: 5000 });
  const theirs = b.mutex(name);
  assert.equal(mine.isLocked(), false);
  assert.equal(mine.lock, null);
  const release = await mine.acquire();
  assert.equal(typeof release, 'function');
  assert.ok(release.lock instanceof Lock);
  assert.equal(mine.lock, release.lock);
  assert.equal(mine.isLocked(), true);
  assert.equal(mine.isAcquired, true);             // redis-semaphore's name
  assert.equal(await theirs.tryAcquire(), false);  // held: one try, refused
  assert.equal(theirs.isLocked(), false);
  const waiting = theirs.acquire();                // waits by default
  assert.ok(await waitFor(() => cli('ZCARD', `${key(name)}:line`) === '1'));
  const released = release();
  assert.equal(release(), released);               // once: the same promise again
  await released;
  assert.equal(mine.isLocked(), false);
  const theirRelease = await waiting;
  assert.ok(theirRelease.lock.fencingToken > release.lock.fencingToken);
  await theirs.release();                          // the oldest hold of this object
  assert.equal(theirs.isLocked(), false);
  await theirs.release();                          // holds none: nothing to do
  assert.equal(await theirs.tryAcquire(), true);
  assert.equal(theirs.isLocked(), true);
  await assert.rejects(mine.acquire({ waitMs: 0 }), NotAcquiredError);
  await theirs.release();
  assert.equal(cli('EXISTS', key(name)), '0');
});

test('cancel() rejects pending acquires; a loss is never silent', async () => {
  const name = unique('mutex');
  const held = await a.acquire(name);
  const m = b.mutex(name);
  const pending = [m.acquire(), m.runExclusive(() => assert.fail('ran'))].map((p) => p.catch((e) => e));
  assert.ok(await waitFor(() => cli('ZCARD', `${key(name)}:line`) === '2'));
  m.cancel();
  for (const err of await Promise.all(pending)) {
    assert.ok(err instanceof CancelledError, String(err));
    assert.match(err.cause.message, /Mutex\.cancel\(\)/);
  }
  await held.release();
  assert.deepEqual((await a.inspect(name)).holders, []);  // the cancelled ones took nothing
  // the object still works after cancel()
  const release = await m.acquire({ leaseMs: 5000, heartbeatMs: 100 });
  const lost = once(release.lock, 'lost');
  cli('DEL', key(name));
  const keepAlive = setTimeout(() => {}, 10000);  // a held lock keeps no process alive
  await lost;
  clearTimeout(keepAlive);
  assert.equal(m.isLocked(), false);  // lost: no longer held
  await assert.rejects(m.release(), LockLostError);
});

test('a Semaphore of 2 admits two holders, refuses a third', async () => {
  const name = unique('sem');
  const s1 = a.semaphore(name, 2);
  const s2 = new Semaphore(b, name, 2);
  assert.ok(s1 instanceof Mutex);
  assert.equal(s1.permits, 2);
  const r1 = await s1.acquire();
  const r2 = await s2.acquire();
  assert.equal(await b.semaphore(name, 2).tryAcquire(), false);
  const info = await a.inspect(name);
  assert.equal(info.permits, 2);
  assert.equal(info.holders.length, 2);
  await r1();
  assert.equal(await s1.runExclusive(async (lock) => lock.fencingToken > r2.lock.fencingToken), true);
  await r2();
  assert.deepEqual((await a.inspect(name)).holders, []);
});

test('bad arguments are refused when the object is made', () => {
  assert.throws(() => a.mutex(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => a.mutex('x', { waitMs: 'soon' }), { name: 'TypeError' });
  assert.throws(() => new Mutex({}, 'x'), { name: 'TypeError', message: /Client/ });
  assert.throws(() => a.semaphore('x'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  for (const permits of [0, -1, 1.5]) assert.throws(() => a.semaphore('x', permits), { name: 'RangeError' });
  return assert.rejects(a.mutex('x').runExclusive('nope'), { code: 'ERR_INVALID_ARG_TYPE' });
});
