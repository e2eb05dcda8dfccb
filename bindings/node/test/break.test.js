'use strict';
// client.breakLock(name, { reason, now }) (dlock_break_with): an operator's takeover. The broken
// holder hears of it at its next renewal (within its heartbeat period) and is reported lost with
// the cause 'broken'; unless now, the name stays closed (inspect(): no holder, closedMs > 0,
// closedBy 'broken') until the broken lease would have ended. On both paths (suite.sh runs every
// file on the addon path, then on the koffi path).
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, LockLostError, NotAcquiredError, InvalidArgumentError } = dlock;
const { URL, unique, waitFor } = require('./support/helpers');

let client;
let operator;
test.before(async () => {
  client = await Client.connect(URL);
  operator = await Client.connect(URL);
});
test.after(async () => {
  await client.close();
  await operator.close();
});

// A lease of 1 s renewed every 250 ms: the holder hears of a break within ~250 ms.
const OPTIONS = { leaseMs: 1000, heartbeatMs: 250, owner: 'holder-7' };

async function hold(c, name) {
  const lock = await c.acquire(name, OPTIONS);
  const lost = { error: null };
  lock.on('lost', (l, e) => { lost.error = e; });
  return [lock, lost];
}

test('breakLock: the holder is lost with cause broken, and the name stays closed', async () => {
  const c = await Client.connect(URL);  // its own, for its own loss count and events
  try {
    const name = unique('break');
    const events = [];
    c.on('event', (e) => { if (e.name === name) events.push(e); });
    const [lock, lost] = await hold(c, name);
    const info = await operator.breakLock(name, { reason: 'disk full on db-3' });
    assert.equal(info.kind, 'exclusive');
    assert.equal(info.holders.length, 1);
    const [broken] = info.holders;
    assert.equal(broken.owner, 'holder-7');
    assert.equal(broken.fencingToken, lock.fencingToken);
    assert.ok(broken.remainingMs > 0 && broken.remainingMs <= 1000, String(broken.remainingMs));
    assert.ok(info.closedMs > 0 && info.closedMs <= 1000, String(info.closedMs));
    assert.equal(info.closedBy, 'broken');

    // closed: no holder, closedMs > 0, and nobody takes it meanwhile
    const seen = await operator.inspect(name);
    assert.deepEqual(seen.holders, []);
    assert.ok(seen.closedMs > 0, String(seen.closedMs));
    assert.equal(seen.closedBy, 'broken');
    await assert.rejects(operator.acquire(name, { waitMs: 0 }), (e) => e instanceof NotAcquiredError);

    // the holder hears it at its next renewal
    assert.ok(await waitFor(() => lost.error !== null, 5000), 'no lost event');
    assert.ok(lost.error instanceof LockLostError, String(lost.error));
    assert.equal(lost.error.cause, 'broken');
    assert.match(lock.lostCause, /^broken/);
    assert.match(lock.lostCause, /disk full on db-3/);
    assert.equal(lock.valid, false);
    const released = await lock.release().catch((e) => e);
    assert.ok(released instanceof LockLostError, String(released));
    assert.equal(released.cause, 'broken');
    assert.ok(await waitFor(() => events.some((e) => e.type === 'lost'), 2000), 'no lost client event');
    const lostEvent = events.find((e) => e.type === 'lost');
    assert.equal(lostEvent.cause, 'broken');
    assert.equal(lostEvent.fencingToken, lock.fencingToken);
    assert.match(c.metricsText(), /^dlock_losses_total\{cause="broken"\} 1$/m);

    // once the broken lease would have ended, the name opens, with a greater token
    const after = await operator.acquire(name, { waitMs: 5000 });
    assert.ok(after.fencingToken > lock.fencingToken);
    const open = await operator.inspect(name);
    assert.equal(open.closedMs, 0);
    assert.equal(open.closedBy, '');
    await after.release();
  } finally {
    await c.close();
  }
});

test('breakLock { now: true }: the name is free at once, taken with a greater token', async () => {
  const name = unique('break');
  const [lock, lost] = await hold(client, name);
  const info = await operator.breakLock(name, { reason: 'failover', now: true });
  assert.deepEqual(info.holders.map((h) => [h.owner, h.fencingToken]), [['holder-7', lock.fencingToken]]);
  assert.equal(info.closedMs, 0);
  assert.equal(info.closedBy, '');
  const taken = await operator.acquire(name, { waitMs: 0 });
  assert.ok(taken.fencingToken > lock.fencingToken, `${taken.fencingToken} <= ${lock.fencingToken}`);
  assert.ok(await waitFor(() => lost.error !== null, 5000), 'no lost event');
  assert.equal(lost.error.cause, 'broken');
  assert.match(lock.lostCause, /^broken.*failover/s);
  // the broken holder's release changes nothing of the new holder's
  await assert.rejects(lock.release(), (e) => e instanceof LockLostError);
  assert.equal((await operator.inspect(name)).holders[0].fencingToken, taken.fencingToken);
  await taken.release();
});

test('breakLock: a free name, the callback form, and bad input', async () => {
  const free = await client.breakLock(unique('break'));
  assert.deepEqual(free, { kind: 'exclusive', holders: [], permits: 0, closedMs: 0, closedBy: '' });
  const viaCallback = await new Promise((resolve, reject) => {
    client.breakLock(unique('break'), { now: true }, (err, i) => (err ? reject(err) : resolve(i)));
  });
  assert.deepEqual(viaCallback.holders, []);
  const viaShortCallback = await new Promise((resolve, reject) => {
    client.breakLock(unique('break'), (err, i) => (err ? reject(err) : resolve(i)));
  });
  assert.deepEqual(viaShortCallback.holders, []);

  const name = unique('break');
  assert.equal(dlock.MAX_REASON_BYTES, 1024);
  await client.breakLock(name, { reason: 'r'.repeat(dlock.MAX_REASON_BYTES) });  // at most is fine
  await assert.rejects(client.breakLock(name, { reason: 'r'.repeat(dlock.MAX_REASON_BYTES + 1) }),
    (e) => e instanceof InvalidArgumentError && e.code === 'ERR_DLOCK_EINVAL' && /reason/.test(e.message));
  // A refused break carries the library's own words, on both paths (the koffi path through
  // dlock_break_with_errbuf).
  await assert.rejects(client.breakLock(name, { reason: 'r'.repeat(dlock.MAX_REASON_BYTES + 1) }),
    (e) => e instanceof InvalidArgumentError && e.message.includes(`break of '${name}': the reason is 1025 bytes, more than 1024`));
  await assert.rejects(client.breakLock('x'.repeat(dlock.MAX_NAME_BYTES + 1)),
    (e) => e instanceof InvalidArgumentError && /lock name is longer than 1024/.test(e.message));
  for (const bad of ['', 'x'.repeat(dlock.MAX_NAME_BYTES + 1)]) {
    await assert.rejects(client.breakLock(bad), (e) => e instanceof InvalidArgumentError);
  }
  for (const options of [{ reason: 5 }, { now: 1 }, { now: 'yes' }, 'why', []]) {
    await assert.rejects(client.breakLock(name, options), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  await assert.rejects(client.breakLock(name, { why: 'x' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
  await assert.rejects(client.breakLock(name, { reason: 'a\0b' }), { code: 'ERR_INVALID_ARG_VALUE' });
  await assert.rejects(client.breakLock(5), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => client.breakLock(5, () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  const c = await Client.connect(URL);
  await c.close();
  await assert.rejects(c.breakLock('x'), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
});
