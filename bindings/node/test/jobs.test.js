'use strict';
// Job rules: options.maxHoldMs (dlock_options_set_max_hold_ms), and below, options.minHoldMs
// and options.lockDelayMs. The heartbeats keep the lock
// past its first lease, then stop once maxHoldMs has passed since the acquire; the lock ends with
// its lease and is reported lost with the cause 'max_hold'. On both paths (suite.sh runs every
// file on the addon path, then on the koffi path).
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, LockLostError, InvalidArgumentError, NotAcquiredError } = dlock;
const native = require('../lib/native');
const { URL, cli, key, unique, sleep, waitFor } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

// A lease of 800 ms renewed every 200 ms, kept at most 1200 ms: valid at ~1000 ms (past the
// first lease), lost by ~2000 ms (maxHoldMs + leaseMs).
const OPTIONS = { leaseMs: 800, heartbeatMs: 200, maxHoldMs: 1200 };

test('maxHoldMs: renewed past its first lease, then lost with cause max_hold', async () => {
  const c = await Client.connect(URL);  // its own, for its own loss count and events
  try {
    const name = unique('maxhold');
    const events = [];
    c.on('event', (e) => { if (e.name === name) events.push(e); });
    const start = Date.now();
    const lock = await c.acquire(name, OPTIONS);
    let lostError = null;
    let lostAt = 0;
    lock.on('lost', (l, e) => { lostError = e; lostAt = Date.now(); });
    // The event loop runs while this waits: the heartbeats (and, on the koffi path, the reports
    // of the completion queue) need it.
    await sleep(Math.max(0, start + 1000 - Date.now()));
    assert.equal(lock.valid, true, 'not renewed past its first lease');
    assert.equal(lock.lostCause, null);
    assert.equal(lostError, null);
    assert.equal(cli('EXISTS', key(name)), '1');

    assert.ok(await waitFor(() => lostError !== null, 10000), 'no lost event');
    assert.ok(lostAt - start >= 1200, `lost after ${lostAt - start} ms`);
    assert.ok(lostError instanceof LockLostError, String(lostError));
    assert.equal(lostError.cause, 'max_hold');
    assert.equal(lock.lost, true);
    assert.equal(lock.valid, false);
    assert.equal(lock.signal.aborted, true);
    assert.equal(lock.signal.reason, lostError);
    assert.match(lock.lostCause, /^max_hold: maximum hold reached \(max_hold_ms 1200\)/);

    assert.ok(await waitFor(() => events.some((e) => e.type === 'lost'), 2000), 'no lost client event');
    const lostEvent = events.find((e) => e.type === 'lost');
    assert.equal(lostEvent.cause, 'max_hold');
    assert.match(lostEvent.detail, /^max_hold: /);
    assert.equal(lostEvent.fencingToken, lock.fencingToken);
    assert.match(c.metricsText(), /^dlock_losses_total\{cause="max_hold"\} 1$/m);

    const released = await lock.release().catch((e) => e);
    assert.ok(released instanceof LockLostError, String(released));
    assert.equal(released.cause, 'max_hold');
  } finally {
    await c.close();
  }
});

test('maxHoldMs with leaseMs 0 rejects with InvalidArgumentError naming max_hold_ms', async () => {
  const name = unique('maxhold');
  for (const options of [{ leaseMs: 0, maxHoldMs: 1000 }, { leaseMs: 0n, maxHoldMs: 1000n }]) {
    await assert.rejects(client.acquire(name, options),
      (e) => e instanceof InvalidArgumentError && e.code === 'ERR_DLOCK_EINVAL' && /max_hold_ms 1000/.test(e.message));
  }
  await assert.rejects(client.campaign(name, { leaseMs: 0, maxHoldMs: 1000 }),
    (e) => e instanceof InvalidArgumentError && /max_hold_ms 1000/.test(e.message));
  await assert.rejects(client.mutex(name, { leaseMs: 0, maxHoldMs: 1000 }).acquire(),
    (e) => e instanceof InvalidArgumentError && /max_hold_ms 1000/.test(e.message));
  // with a callback too
  const err = await new Promise((resolve) => client.acquire(name, { leaseMs: 0, maxHoldMs: 1000 }, (e) => resolve(e)));
  assert.ok(err instanceof InvalidArgumentError, String(err));
  assert.equal(cli('EXISTS', key(name)), '0');  // nothing was left behind
});

test('maxHoldMs: its type and range are checked; above ten years is the library\'s EINVAL; 0 is none', async () => {
  assert.throws(() => client.mutex('x', { maxHoldMs: '5' }), { code: 'ERR_INVALID_ARG_TYPE', message: /options\.maxHoldMs/ });
  await assert.rejects(client.acquire('x', { maxHoldMs: '5' }), { code: 'ERR_INVALID_ARG_TYPE', message: /options\.maxHoldMs/ });
  await assert.rejects(client.acquire('x', { maxHoldMs: -1 }), { code: 'ERR_OUT_OF_RANGE', message: /options\.maxHoldMs/ });
  await assert.rejects(client.acquire('x', { maxHoldMs: 1.5 }), { code: 'ERR_OUT_OF_RANGE' });
  await assert.rejects(client.acquire('x', { maxHoldMs: -1n }), { code: 'ERR_OUT_OF_RANGE' });
  const tenYears = 10 * 366 * 24 * 3600 * 1000;  // the library's longest (dlock_limit_value)
  await assert.rejects(client.acquire(unique('maxhold'), { maxHoldMs: tenYears + 1 }),
    (e) => e instanceof InvalidArgumentError && /max_hold_ms \d+ is too long/.test(e.message));
  await assert.rejects(client.campaign(unique('maxhold'), { maxHoldMs: BigInt(tenYears) + 1n }),
    (e) => e instanceof InvalidArgumentError && /max_hold_ms \d+ is too long/.test(e.message));
  // 0 is none: held and renewed as any other lock; a campaign takes it as well
  const plain = await client.acquire(unique('maxhold'), { leaseMs: 5000, maxHoldMs: 0 });
  assert.equal(plain.valid, true);
  await plain.release();
  const leader = await client.campaign(unique('maxhold'), { leaseMs: 5000, maxHoldMs: 60000, value: 'x' });
  assert.equal(leader.valid, true);
  await leader.release();
});

test('maxHoldMs with a libdlock that lacks it: a clear InvalidArgumentError, nothing sent', async () => {
  const name = unique('maxhold');
  const had = native.hasMaxHold;
  native.hasMaxHold = false;  // as lib/native.js finds an older library
  try {
    for (const p of [client.acquire(name, OPTIONS), client.campaign(name, OPTIONS)]) {
      await assert.rejects(p, (e) => e instanceof InvalidArgumentError &&
        /has no max hold \(dlock_options_set_max_hold_ms\) for options\.maxHoldMs; install a newer one/.test(e.message));
    }
    // without the option, that library still serves locks
    const lock = await client.acquire(name, { leaseMs: 5000, maxHoldMs: 0 });
    await lock.release();
  } finally {
    native.hasMaxHold = had;
  }
  assert.equal(cli('EXISTS', key(name)), '0');
});

// options.minHoldMs (dlock_options_set_min_hold_ms): the name stays taken at least that long
// after the acquire, however the hold ends; an early release leaves a marker with no owner.
test('minHoldMs: an early release leaves the name closed until the min hold has passed', async () => {
  const other = await Client.connect(URL);
  try {
    const name = unique('minhold');
    const start = Date.now();
    const lock = await client.acquire(name, { leaseMs: 5000, minHoldMs: 1000, owner: 'cron' });
    const token = lock.fencingToken;
    await lock.release();  // at once
    assert.ok(Date.now() - start < 900, `release took until ${Date.now() - start} ms`);
    await assert.rejects(other.acquire(name, { waitMs: 0 }),
      (e) => e instanceof NotAcquiredError && /min_hold/.test(e.message));
    const info = await other.inspect(name);
    assert.deepEqual(info.holders, []);
    assert.ok(info.closedMs > 0 && info.closedMs <= 1000, String(info.closedMs));
    assert.equal(info.closedBy, 'min_hold');
    // once the min hold has passed since the acquire: taken, with a greater token
    const after = await other.acquire(name, { waitMs: 5000 });
    assert.ok(Date.now() - start >= 900, `acquired after ${Date.now() - start} ms`);
    assert.ok(after.fencingToken > token);
    await after.release();
    // 0 is none: a release frees the name at once
    const plain = unique('minhold');
    await (await client.acquire(plain, { minHoldMs: 0, leaseMs: 5000 })).release();
    await (await other.acquire(plain, { waitMs: 0, minHoldMs: 0n })).release();
  } finally {
    await other.close();
  }
});

// options.lockDelayMs (dlock_options_set_lock_delay_ms): after the lease runs out, the name
// stays closed that long more; a release has no delay.
test('lockDelayMs: a lease that runs out leaves the name closed for the delay', async () => {
  const other = await Client.connect(URL);
  try {
    const name = unique('lockdelay');
    const start = Date.now();
    // A lease of 500 ms, no heartbeats, never released: it ends uncleanly, then 1 s of delay.
    const lock = await client.acquire(name, { leaseMs: 500, heartbeatMs: 0, lockDelayMs: 1000 });
    const token = lock.fencingToken;
    await sleep(Math.max(0, start + 700 - Date.now()));
    await assert.rejects(other.acquire(name, { waitMs: 0 }),
      (e) => e instanceof NotAcquiredError && /lock_delay/.test(e.message));
    const info = await other.inspect(name);
    assert.deepEqual(info.holders, []);
    assert.ok(info.closedMs > 0 && info.closedMs <= 1000, String(info.closedMs));
    assert.equal(info.closedBy, 'lock_delay');
    const after = await other.acquire(name, { waitMs: 5000 });
    assert.ok(Date.now() - start >= 1400, `acquired after ${Date.now() - start} ms`);
    assert.ok(after.fencingToken > token);
    await after.release();
    await assert.rejects(lock.release(), (e) => e instanceof LockLostError);
    // a release is a clean end: no delay
    const clean = unique('lockdelay');
    await (await client.acquire(clean, { leaseMs: 5000, lockDelayMs: 10000 })).release();
    await (await other.acquire(clean, { waitMs: 0 })).release();
  } finally {
    await other.close();
  }
});

test('minHoldMs and lockDelayMs: bad values are refused naming the option', async () => {
  assert.equal(dlock.MAX_LOCK_DELAY_MS, 60000);
  for (const [key, value] of [['minHoldMs', '5'], ['lockDelayMs', '5']]) {
    assert.throws(() => client.mutex('x', { [key]: value }), { code: 'ERR_INVALID_ARG_TYPE', message: new RegExp(`options\\.${key}`) });
    await assert.rejects(client.acquire('x', { [key]: value }), { code: 'ERR_INVALID_ARG_TYPE', message: new RegExp(`options\\.${key}`) });
    await assert.rejects(client.acquire('x', { [key]: -1 }), { code: 'ERR_OUT_OF_RANGE', message: new RegExp(`options\\.${key}`) });
    await assert.rejects(client.acquire('x', { [key]: 1.5 }), { code: 'ERR_OUT_OF_RANGE' });
    await assert.rejects(client.acquire('x', { [key]: -1n }), { code: 'ERR_OUT_OF_RANGE' });
  }
  // above the cap: the library's EINVAL, naming it (acquire and campaign)
  const name = unique('lockdelay');
  for (const p of [client.acquire(name, { lockDelayMs: 60001 }), client.campaign(name, { lockDelayMs: 60001n })]) {
    await assert.rejects(p, (e) => e instanceof InvalidArgumentError && /lock_delay_ms 60001/.test(e.message));
  }
  const tenYears = 10 * 366 * 24 * 3600 * 1000;
  await assert.rejects(client.acquire(name, { minHoldMs: tenYears + 1 }),
    (e) => e instanceof InvalidArgumentError && /min_hold_ms \d+ is too long/.test(e.message));
  // a min hold above the max hold: refused at acquire, naming both
  for (const p of [client.acquire(name, { leaseMs: 1000, maxHoldMs: 1000, minHoldMs: 2000 }),
    client.campaign(name, { leaseMs: 1000, maxHoldMs: 1000, minHoldMs: 2000 }),
    client.mutex(name, { leaseMs: 1000, maxHoldMs: 1000, minHoldMs: 2000 }).acquire()]) {
    await assert.rejects(p, (e) => e instanceof InvalidArgumentError &&
      /min_hold_ms 2000/.test(e.message) && /max_hold_ms 1000/.test(e.message));
  }
  assert.equal(cli('EXISTS', key(name)), '0');  // nothing was left behind
  // at the cap is fine
  await (await client.acquire(name, { lockDelayMs: 60000, minHoldMs: 0 })).release();
});

test('minHoldMs and lockDelayMs with a libdlock that lacks them: a clear InvalidArgumentError', async () => {
  const name = unique('minhold');
  const had = [native.hasMinHold, native.hasLockDelay];
  native.hasMinHold = false;  // as lib/native.js finds an older library
  native.hasLockDelay = false;
  try {
    await assert.rejects(client.acquire(name, { minHoldMs: 1000 }), (e) => e instanceof InvalidArgumentError &&
      /has no min hold \(dlock_options_set_min_hold_ms\) for options\.minHoldMs; install a newer one/.test(e.message));
    await assert.rejects(client.campaign(name, { lockDelayMs: 1000 }), (e) => e instanceof InvalidArgumentError &&
      /has no lock delay \(dlock_options_set_lock_delay_ms\) for options\.lockDelayMs; install a newer one/.test(e.message));
    // without the options, that library still serves locks
    const lock = await client.acquire(name, { leaseMs: 5000, minHoldMs: 0, lockDelayMs: 0 });
    await lock.release();
  } finally {
    [native.hasMinHold, native.hasLockDelay] = had;
  }
  assert.equal(cli('EXISTS', key(name)), '0');
});
