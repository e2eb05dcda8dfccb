'use strict';
// A lost lock stops the work: lock.signal (and using()'s second argument) aborts with a
// LockLostError, as node-redlock v5's using() signal does. And a loss nothing listens for becomes
// a process warning rather than passing unnoticed.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { once } = require('node:events');

const { Client, LockLostError } = require('libdlock');
const { URL, cli, key, unique } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

// Renewed every 100 ms: a loss is found within about that, and a 5 s lease outlives any stall.
const FAST = { leaseMs: 5000, heartbeatMs: 100 };

// Fails the test instead of hanging when promise has not settled within ms.
function within(ms, promise, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

test("using()'s signal aborts a pending fetch() when the lock's key is deleted by hand", async () => {
  // A server that never answers: the fetch stays pending until something aborts it.
  const requests = [];
  const server = http.createServer((req) => { requests.push(req); });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const arrived = once(server, 'request');
  const name = unique('fetch');
  let seen = null;
  try {
    const outcome = client.using(name, FAST, async (lock, signal) => {
      seen = { lock, signal };
      assert.equal(signal, lock.signal);
      assert.equal(signal.aborted, false);
      const response = fetch(`http://127.0.0.1:${server.address().port}/slow`, { signal });
      await arrived;                 // the request is in flight
      cli('DEL', key(name));         // behind the holder's back
      await response;                // rejects once the next heartbeat finds the lock gone
      assert.fail('the fetch completed');
    }).catch((e) => e);
    const err = await within(10000, outcome, 'the lost lock never aborted the fetch');
    assert.ok(err instanceof LockLostError, String(err));
    assert.equal(err.code, 'ERR_DLOCK_NOT_HELD');
    assert.ok(err.message.includes(name), err.message);
    assert.equal(seen.signal.aborted, true);
    assert.equal(seen.signal.reason, err);  // fetch rejects with the signal's reason
    assert.equal(seen.lock.lost, true);
    // the server saw the request go away
    const [req] = requests;
    if (!req.destroyed && !req.socket.destroyed) await within(5000, once(req.socket, 'close'), 'the aborted request stayed open');
  } finally {
    for (const req of requests) req.socket.destroy();
    server.close();
  }
});

test("lock.signal aborts with the reason 'lost' carries; released locks never abort", async () => {
  const lock = await client.acquire(unique('signal'), FAST);
  const { signal } = lock;
  assert.equal(lock.signal, signal);  // one signal per lock
  const lost = once(lock, 'lost');
  const aborted = once(signal, 'abort');
  cli('SET', key(lock.name), 'someone-else');  // taken over
  const [which, err] = await within(10000, lost, "'lost' never came");
  await within(1000, aborted, 'the signal never aborted');
  assert.equal(which, lock);
  assert.ok(err instanceof LockLostError);
  assert.equal(signal.reason, err);
  assert.throws(() => signal.throwIfAborted(), LockLostError);
  await assert.rejects(lock.release(), LockLostError);

  // asked for after the loss: already aborted
  const late = await client.acquire(unique('signal'), FAST);
  late.on('lost', () => {});
  const lateLost = once(late, 'lost');
  cli('DEL', key(late.name));
  await within(10000, lateLost, "'lost' never came");
  assert.equal(late.signal.aborted, true);
  assert.ok(late.signal.reason instanceof LockLostError);

  // released normally: the signal stays quiet
  const fine = await client.acquire(unique('signal'), FAST);
  const fineSignal = fine.signal;
  fineSignal.addEventListener('abort', () => assert.fail('a released lock aborted its signal'));
  await fine.release();
  assert.equal(fineSignal.aborted, false);
});

// The warnings of this process, as the 'warning' event hands them out.
const warnings = [];
process.on('warning', (w) => warnings.push(w));
const lostWarnings = (name) => warnings.filter((w) => w.name === 'LockLostWarning' && w.message.includes(`'${name}'`));

test('a loss nothing listens for becomes a LockLostWarning', async () => {
  const lock = await client.acquire(unique('warn'), FAST);
  const warned = new Promise((resolve) => {
    process.on('warning', function onWarning(w) {
      if (w.name === 'LockLostWarning' && w.message.includes(`'${lock.name}'`)) {
        process.off('warning', onWarning);
        resolve(w);
      }
    });
  });
  cli('DEL', key(lock.name));
  const w = await within(10000, warned, 'no warning for a lost lock nobody listened to');
  assert.equal(w.code, 'DLOCK_LOCK_LOST');
  assert.match(w.message, /lost/);
  assert.match(w.message, /nothing listened/);
  assert.ok(w.message.includes(`fencing token ${lock.fencingToken}`), w.message);
  assert.match(w.detail, /lock\.on\('lost'/);
  assert.equal(lock.lost, true);
  assert.equal(lostWarnings(lock.name).length, 1);
});

test("no warning when 'lost' or the signal is listened to", async () => {
  // A 'lost' listener: the warning would have been emitted before 'lost' (its event comes a
  // tick later); one turn of the loop after 'lost', none came.
  const a = await client.acquire(unique('quiet'), FAST);
  const aLost = once(a, 'lost');
  cli('DEL', key(a.name));
  await within(10000, aLost, "'lost' never came");
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(lostWarnings(a.name), []);

  // An abort listener on lock.signal (what fetch() adds), and no 'lost' listener.
  const b = await client.acquire(unique('quiet'), FAST);
  const bAborted = once(b.signal, 'abort');
  cli('DEL', key(b.name));
  await within(10000, bAborted, 'the signal never aborted');
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(lostWarnings(b.name), []);
  assert.equal(b.lost, true);
});
