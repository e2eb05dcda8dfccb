'use strict';
// Tests for the Node binding, against the redis-server that bindings/test.sh starts.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { once } = require('node:events');

const dlock = require('libdlock');
const { Client, Lock, DlockError } = dlock;
const { URL, PORT, cli, key, unique, sleep, waitFor, threads } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

test('acquire, extend, release', async () => {
  const name = unique();
  const lock = await client.acquire(name, { leaseMs: 3000 });
  assert.ok(lock instanceof Lock);
  assert.equal(typeof lock.fencingToken, 'bigint');
  assert.ok(lock.fencingToken > 0n);
  assert.equal(lock.name, name);
  assert.equal(lock.attempts, 1);
  assert.equal(lock.valid, true);
  assert.ok(lock.remainingMs > 0 && lock.remainingMs <= 3000, String(lock.remainingMs));
  assert.equal(cli('EXISTS', key(name)), '1');
  await lock.extend(20000);
  assert.ok(Number(cli('PTTL', key(name))) > 10000);
  assert.ok(lock.remainingMs > 10000);
  await lock.extend(0);
  assert.equal(lock.remainingMs, Infinity);
  assert.equal(cli('PTTL', key(name)), '-1');
  await lock.release();
  assert.equal(cli('EXISTS', key(name)), '0');
  assert.equal(lock.valid, false);
  assert.equal(lock.remainingMs, 0);
  assert.equal(lock.released, true);
  await assert.rejects(lock.release(), { code: 'ERR_DLOCK_NOT_HELD', message: /already released/ });
  await assert.rejects(lock.extend(1000), { code: 'ERR_DLOCK_NOT_HELD' });
  assert.match(String(lock), /released/);
  // owner label and Buffer names
  const labelled = await client.acquire(name, { owner: 'tests', leaseMs: 5000 });
  assert.match(cli('GET', key(name)), /\|tests$/);
  await labelled.release();
  const raw = await client.acquire(Buffer.from([0xff, 0xfe, 0x41]));
  assert.ok(Buffer.isBuffer(raw.name));
  await raw.release();
});

test('node-style callbacks', async () => {
  const name = unique();
  const lock = await new Promise((resolve, reject) => {
    const r = client.acquire(name, { leaseMs: 5000 }, (err, l) => (err ? reject(err) : resolve(l)));
    assert.equal(r, undefined);
  });
  assert.ok(lock.valid);
  const err = await new Promise((resolve) => client.acquire(name, { waitMs: 0 }, (e, l) => resolve(e ?? l)));
  assert.ok(err instanceof dlock.NotAcquiredError);
  assert.equal(err.code, 'ERR_DLOCK_NOT_ACQUIRED');
  await new Promise((resolve, reject) => lock.extend(6000, (e) => (e ? reject(e) : resolve())));
  await new Promise((resolve, reject) => lock.release((e) => (e ? reject(e) : resolve())));
  const again = await new Promise((resolve) => lock.release((e) => resolve(e)));
  assert.equal(again.code, 'ERR_DLOCK_NOT_HELD');
  const c2 = new Client(URL);
  await new Promise((resolve, reject) => c2.close((e) => (e ? reject(e) : resolve())));
  assert.equal(cli('EXISTS', key(name)), '0');
});

test('using() always releases', async () => {
  const name = unique();
  const out = await client.using(name, { leaseMs: 5000 }, async (lock) => {
    assert.equal(cli('EXISTS', key(name)), '1');
    return lock.fencingToken;
  });
  assert.equal(typeof out, 'bigint');
  assert.equal(cli('EXISTS', key(name)), '0');
  await assert.rejects(client.using(name, async () => { throw new Error('boom'); }), /boom/);
  assert.equal(cli('EXISTS', key(name)), '0');
  // lost meanwhile: never silent
  await assert.rejects(client.using(name, { leaseMs: 5000 }, async () => { cli('DEL', key(name)); }),
    { code: 'ERR_DLOCK_NOT_HELD' });
  // ... unless fn's own error is on its way
  await assert.rejects(client.using(name, { leaseMs: 5000 }, async () => {
    cli('DEL', key(name));
    throw new Error('mine');
  }), /mine/);
  // released inside fn: fine
  await client.using(name, async (lock) => { await lock.release(); });
  assert.equal(await client.using(name, () => 42), 42);
});

test('fair: false waits outside the line, so a fair waiter that came later is served first', async () => {
  const name = unique();
  const unfairClient = await Client.connect(URL);
  const fairClient = await Client.connect(URL);
  const held = await client.acquire(name, { leaseMs: 10000 });
  // Retries 20-30 s apart: only a release can serve either waiter within the test.
  const slow = { waitMs: 20000, retryMs: [20000, 30000] };
  const unfair = unfairClient.acquire(name, { ...slow, fair: false }).then(async (l) => { await l.release(); return l; });
  // Its first attempt refused, the unfair waiter listens for releases (and takes no place in
  // line); only then does the fair one come.
  const listening = () => Number(cli('PUBSUB', 'NUMSUB', `${key(name)}:released`).split(/\s+/).pop());
  assert.ok(await waitFor(() => listening() >= 1, 20000), 'the unfair waiter never waited');
  const fair = fairClient.acquire(name, slow).then(async (l) => { await sleep(100); await l.release(); return l; });
  // Its first attempt refused, the fair waiter stands in line: the only one there.
  assert.ok(await waitFor(() => cli('ZCARD', `${key(name)}:line`) === '1', 20000), 'the fair waiter never took its place in line');
  await held.release();  // hands the lock to the fair waiter, the only one in line
  const [u, f] = await Promise.all([unfair, fair]);
  assert.ok(f.fencingToken < u.fencingToken, `fair ${f.fencingToken} before unfair ${u.fencingToken}`);
  assert.ok(u.attempts >= 2);  // woken by the fair waiter's release, it asked again
  await assert.rejects(client.acquire(name, { fair: 1 }), { code: 'ERR_INVALID_ARG_TYPE', message: /options\.fair must be a boolean/ });
  await unfairClient.close();
  await fairClient.close();
});

test('contention, waiting, tokens strictly rising', async () => {
  const name = unique();
  let last = 0n;
  for (let i = 0; i < 30; i++) {
    const lock = await client.acquire(name, { leaseMs: i % 5 === 0 ? 0 : 5000 });
    assert.ok(lock.fencingToken > last);
    last = lock.fencingToken;
    await lock.release();
  }
  const other = await Client.connect(URL);
  const held = await client.acquire(name, { leaseMs: 10000 });
  await assert.rejects(other.acquire(name, { waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED', message: new RegExp(name) });
  await assert.rejects(other.acquire(name, { waitMs: 150 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  setTimeout(() => held.release(), 200);
  const waited = await other.acquire(name, { waitMs: 10000 });
  assert.ok(waited.fencingToken > held.fencingToken);
  assert.ok(waited.attempts >= 1);  // 1: handed the lock by the release
  await waited.release();
  // expiry without heartbeats, then takeover by a waiter
  const brief = await client.acquire(name, { leaseMs: 150, heartbeatMs: 0 });
  const taker = await other.acquire(name, { waitMs: 5000 });
  assert.ok(taker.fencingToken > brief.fencingToken);
  await assert.rejects(brief.release(), { code: 'ERR_DLOCK_NOT_HELD' });
  await taker.release();
  await other.close();
});

test('two OS processes contend', async () => {
  const name = unique('procs');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-node-'));
  const file = path.join(dir, 'counter');
  fs.writeFileSync(file, '0 0');
  const n = 150;
  const procs = [0, 1].map(() => spawn(process.execPath,
    [path.join(__dirname, 'support', 'worker.js'), URL, name, file, String(n)], { stdio: 'inherit' }));
  const codes = await Promise.all(procs.map(async (p) => (await once(p, 'exit'))[0]));
  assert.deepEqual(codes, [0, 0]);
  const [value, token] = fs.readFileSync(file, 'utf8').split(' ');
  fs.rmSync(dir, { recursive: true });
  assert.equal(Number(value), 2 * n);
  assert.ok(BigInt(token) > 0n);
  assert.equal(cli('EXISTS', key(name)), '0');
});

test('a busy JS thread does not hold up heartbeats', async () => {
  // Outcomes come back through a queue: the library's thread never waits for this thread. (With
  // callbacks from the library's thread, its heartbeats would stop until JS was free again.)
  const held = unique('busy-held');
  const other = await Client.connect(URL);
  try {
    const blocker = await other.acquire(held, { leaseMs: 10000 });
    const name = unique('busy');
    // Renewed every 100 ms: a renewal may come 700 ms late on a busy machine.
    const lock = await client.acquire(name, { leaseMs: 800, heartbeatMs: 100 });
    let lostEvents = 0;
    lock.on('lost', () => { lostEvents++; });
    // Outcomes arrive while JS is busy: a waiting acquire giving up, and one succeeding.
    // (addon path: waits that outlast the busy spell; a wait whose deadline passed before its
    // first try was sent, the loop being busy, gets a Lua argument error from the library today)
    const w = dlock.native === 'addon' ? 1000 : 100;
    const waits = [
      client.acquire(held, { waitMs: w }).then(() => 'acquired', (e) => e.code),
      client.acquire(unique('busy-free'), { waitMs: w }).then((l) => l.release().then(() => 'acquired')),
    ];
    // On the addon path the heartbeats run on this thread's loop (no thread of the library's):
    // JS busy for less than the lease must not lose the lock. On the koffi path, the library's
    // thread renews it however long JS is busy.
    const end = Date.now() + (dlock.native === 'addon' ? 500 : 2500);  // koffi: more than three leases
    while (Date.now() < end) { /* busy, as a CPU-heavy critical section would be */ }
    assert.ok(Number(cli('PTTL', key(name))) > 0, 'the lease ran out on the server while JS was busy');
    assert.equal(lock.valid, true);
    assert.deepEqual(await Promise.all(waits), ['ERR_DLOCK_NOT_ACQUIRED', 'acquired']);
    await lock.release();
    await blocker.release();
    assert.equal(lostEvents, 0);
  } finally {
    await other.close();
  }
});

test("the 'lost' event reaches user code", async () => {
  const name = unique('lost');
  // A lease of 2 s (renewed every 150 ms): still valid 0.4 s later on however busy a machine.
  const lock = await client.acquire(name, { leaseMs: 2000, heartbeatMs: 150 });
  const lost = once(lock, 'lost');
  let count = 0;
  lock.on('lost', () => { count++; });
  await sleep(400);
  assert.ok(lock.valid);
  cli('DEL', key(name));  // behind the holder's back
  const timer = setTimeout(() => {}, 5000);
  const [which] = await Promise.race([lost, sleep(5000).then(() => [null])]);
  clearTimeout(timer);
  assert.equal(which, lock, "'lost' never came");
  assert.equal(lock.lost, true);
  assert.equal(lock.valid, false);
  assert.equal(lock.remainingMs, 0);
  assert.match(String(lock), /lost/);
  await assert.rejects(lock.extend(1000), { code: 'ERR_DLOCK_NOT_HELD' });
  await assert.rejects(lock.release(), { code: 'ERR_DLOCK_NOT_HELD' });
  await sleep(300);
  assert.equal(count, 1);
  // taken over: the listener may release from inside; released locks never emit
  const taken = await client.acquire(unique('lost'), { leaseMs: 600, heartbeatMs: 150 });
  const fine = await client.acquire(unique('lost'), { leaseMs: 600, heartbeatMs: 150 });
  fine.on('lost', () => assert.fail('a released lock emitted lost'));
  await fine.release();
  const released = new Promise((resolve) => taken.on('lost', () => taken.release().catch(resolve)));
  cli('SET', key(taken.name), 'someone-else');
  assert.equal((await released).code, 'ERR_DLOCK_NOT_HELD');
});

test('every error kind is mapped to its class and code', async () => {
  const expect = [['OK'], ['NOT_ACQUIRED', dlock.NotAcquiredError], ['NOT_HELD', dlock.LockLostError],
    ['EINVAL', dlock.InvalidArgumentError], ['EIO', dlock.BackendError], ['EBACKEND', dlock.BackendError],
    ['EAUTH', dlock.BackendError], ['ECANCELLED', dlock.CancelledError], ['ENOMEM', DlockError],
    ['EINTERNAL', DlockError]];
  expect.forEach(([name, cls], status) => {
    assert.equal(dlock.codes[name], status);
    if (status === 0) return;
    const e = dlock._internals.statusError(status);
    assert.ok(e instanceof cls && e instanceof DlockError && e instanceof Error, name);
    assert.equal(e.constructor, cls);
    assert.equal(e.name, cls.name);
    assert.equal(e.code, `ERR_DLOCK_${name}`);
    assert.equal(e.status, status);
    assert.equal(e.message, `DLOCK_${name}`);
    assert.match(String(e), new RegExp(`^${cls.name}: DLOCK_${name}$`));
    const a = dlock._internals.lockError(status, 'the words of the library', 'acquire', 'x');
    assert.ok(a instanceof cls);
    assert.equal(a.code, `ERR_DLOCK_${name}`);
    assert.equal(a.message, "acquire of lock 'x': the words of the library");
    assert.equal(dlock._internals.lockError(status, "lock 'x' is ...", 'acquire', 'x').message, "lock 'x' is ...");
  });
  // no own name property: JSON shows code and status only
  assert.deepEqual(JSON.parse(JSON.stringify(dlock._internals.statusError(1))), { status: 1, code: 'ERR_DLOCK_NOT_ACQUIRED' });
  // a status a newer library may add: its name as the library gives it
  const future = dlock._internals.statusError(77);
  assert.ok(future instanceof DlockError);
  assert.deepEqual([future.code, future.status, future.message], ['ERR_DLOCK_UNKNOWN', 77, 'DLOCK_UNKNOWN']);
  // the binding's table of names agrees with the library's
  const { C } = require('../lib/native');
  for (const [name, status] of Object.entries(dlock.codes)) assert.equal(C.status_str(status), `DLOCK_${name}`);

  await assert.rejects(Client.connect('bogus://x'), { code: 'ERR_DLOCK_EINVAL', message: /bogus/ });
  await assert.rejects(Client.connect(`${URL}?nope=1`), { code: 'ERR_DLOCK_EINVAL', message: /nope/ });
  await assert.rejects(new Client('redis://127.0.0.1:1?connect_timeout_ms=500').acquire('x'),
    { code: 'ERR_DLOCK_EIO', message: /127\.0\.0\.1:1: Connection refused/ });
  const user = unique('user');
  cli('ACL', 'SETUSER', user, 'on', '>right', '~*', '&*', '+@all');
  try {
    const err = await Client.connect(`redis://${user}:guessed-pw@127.0.0.1:${PORT}`).catch((e) => e);
    assert.equal(err.code, 'ERR_DLOCK_EAUTH');
    assert.ok(err.message.includes(`'${user}'`), err.message);
    assert.match(err.message, /WRONGPASS/);
    assert.doesNotMatch(err.message, /guessed-pw/);
    const ok = await Client.connect(`redis://${user}:right@127.0.0.1:${PORT}`);
    assert.match(String(ok), /\*\*\*/);
    await ok.close();
  } finally {
    cli('ACL', 'DELUSER', user);
  }
  const name = unique();
  cli('SET', `${key(name)}:fence`, 'not-a-number');
  await assert.rejects(client.acquire(name, { waitMs: 0 }), { code: 'ERR_DLOCK_EBACKEND' });
  await assert.rejects(client.acquire(name), { name: 'BackendError', code: 'ERR_DLOCK_EBACKEND' });  // waiting: no retry of an error answer
  assert.equal(cli('EXISTS', key(name)), '0');

  // ECANCELLED: closing the client, and an AbortSignal
  const holder = await client.acquire(name + 'c');
  const c2 = await Client.connect(URL);
  const pending = c2.acquire(name + 'c', { waitMs: -1 }).catch((e) => e);
  await sleep(100);
  await c2.close();
  const cancelled = await pending;
  assert.equal(cancelled.code, 'ERR_DLOCK_ECANCELLED');
  assert.match(cancelled.message, /closed/);
  await assert.rejects(c2.acquire('x'), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
  const ac = new AbortController();
  const aborted = client.acquire(name + 'c', { waitMs: -1, signal: ac.signal });
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(aborted, { code: 'ERR_DLOCK_ECANCELLED', message: /aborted/ });
  await assert.rejects(client.acquire(name + 'c', { signal: AbortSignal.abort() }), { code: 'ERR_DLOCK_ECANCELLED' });
  await holder.release();
  await sleep(100);
  assert.equal(cli('EXISTS', key(name + 'c')), '0', 'a cancelled acquire left a lock behind');
  assert.equal(dlock._internals.ops.size, 0);
});

test('bad input gives TypeError / RangeError / EINVAL', async () => {
  for (const bad of [123, null, undefined, {}, ['x'], 1n]) {
    await assert.rejects(client.acquire(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  await assert.rejects(client.acquire('a\0b'), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
  const typeCases = [{ leaseMs: '10' }, { waitMs: null }, { heartbeatMs: {} }, { retryMs: 5 },
    { owner: 7 }, { signal: 'no' }];
  for (const opts of typeCases) {
    await assert.rejects(client.acquire(unique(), opts), { name: 'TypeError' }, JSON.stringify(opts));
  }
  await assert.rejects(client.acquire(unique(), 'lease=5'), { code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(client.acquire(unique(), { lease_ms: 5 }), { code: 'ERR_INVALID_ARG_VALUE', message: /lease_ms/ });
  for (const opts of [{ leaseMs: -1 }, { leaseMs: 1.5 }, { leaseMs: NaN }, { waitMs: -2 },
    { leaseMs: 2 ** 60 }, { retryMs: [1, -1] }]) {
    await assert.rejects(client.acquire(unique(), opts), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  }
  // the callback form throws at once, like Node's own APIs
  assert.throws(() => client.acquire(42, () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => client.acquire('x', {}, 'nope'), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => new Client(5), { code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(client.using('x', {}), { code: 'ERR_INVALID_ARG_TYPE' });
  // values the library refuses: EINVAL with its message
  const einval = [['x'.repeat(1025), {}], ['x'.repeat(1000000), {}], ['é'.repeat(513), {}], ['', {}],
    [unique(), { leaseMs: 20 * 365 * 86400 * 1000 }], [unique(), { leaseMs: 1000, heartbeatMs: 1000 }],
    [unique(), { retryMs: [0, 10] }], [unique(), { retryMs: [10, 5] }], [unique(), { owner: 'o'.repeat(257) }]];
  for (const [name, opts] of einval) {
    const e = await client.acquire(name, opts).catch((x) => x);
    assert.ok(e instanceof DlockError, `${name.slice(0, 10)} ${JSON.stringify(opts)}: ${e}`);
    assert.equal(e.code, 'ERR_DLOCK_EINVAL');
    assert.ok(e.message.length > 0 && !e.message.startsWith('DLOCK_'), e.message);
  }
  assert.equal(cli('KEYS', 'dlock:{t-*}'), '', 'bad input left a lock behind');
  const ok = await client.acquire('x'.repeat(1024));
  await ok.release();
  const lock = await client.acquire(unique());
  await assert.rejects(lock.extend('1000'), { code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(lock.extend(-5), { code: 'ERR_OUT_OF_RANGE' });
  await assert.rejects(lock.extend(5), { code: 'ERR_DLOCK_EINVAL' });  // too short for the library
  await lock.release();
});

test('many one-try acquires at once take both paths (thread pool and async API)', async () => {
  const names = Array.from({ length: 50 }, () => unique('burst'));
  const locks = await Promise.all(names.map((n) => client.acquire(n, { leaseMs: 5000, waitMs: 0 })));
  assert.equal(new Set(locks.map((l) => l.fencingToken)).size, 50);
  assert.equal(cli('EXISTS', ...names.map(key)), '50');
  const again = await Promise.all(names.map((n) => client.acquire(n, { waitMs: 0 }).catch((e) => e.code)));
  assert.deepEqual(new Set(again), new Set(['ERR_DLOCK_NOT_ACQUIRED']));
  await Promise.all(locks.map((l) => l.extend(8000)));
  await Promise.all(locks.map((l) => l.release()));
  assert.equal(cli('EXISTS', ...names.map(key)), '0');
  assert.equal(dlock._internals.poolBusy(), 0);
  assert.equal(dlock._internals.ops.size, 0);
});

test('a thousand waiters: no thread each, event loop never blocked', async () => {
  const name = unique('many');
  const n = 1000;
  const base = threads();
  let ticks = 0;
  const ticker = setInterval(() => { ticks++; }, 5);
  const holder = await client.acquire(name, { leaseMs: 10000 });
  let counter = 0;
  const tokens = [];
  let maxThreads = 0;
  const all = Array.from({ length: n }, () => client.using(name, { waitMs: -1, leaseMs: 10000 }, async (lock) => {
    tokens.push(lock.fencingToken);
    const v = counter;
    await null;
    counter = v + 1;
  }));
  // All 1000 are waiting once all stand in line (each after its first attempt was refused); the
  // event loop ticks on meanwhile (a blocked loop would not even get here).
  assert.ok(await waitFor(() => cli('ZCARD', `${key(name)}:line`) === String(n), 60000),
    `only ${cli('ZCARD', `${key(name)}:line`)} of ${n} waiters in line`);
  maxThreads = threads();
  const ticksWhileWaiting = ticks;
  assert.ok(await waitFor(() => ticks >= ticksWhileWaiting + 10, 10000), 'the event loop stopped ticking while acquires waited');
  await holder.release();
  await Promise.all(all);
  clearInterval(ticker);
  assert.equal(counter, n);
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], 'tokens not rising');
  assert.ok(maxThreads - base < 8, `${maxThreads - base} more threads while ${n} acquires waited`);
  assert.equal(dlock._internals.ops.size, 0);
});
