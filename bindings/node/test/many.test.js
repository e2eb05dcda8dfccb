'use strict';
// Several names, all or none: client.lockMany(names, options), client.using([names], ...) and
// Client.releaseMany(locks) / client.releaseMany(locks). The names are taken one at a time in
// bytewise order (dlock_acquire_many's), so callers asking for [a, b] and [b, a] never wait on
// each other; on a failure what was taken is given back before the promise rejects. On both
// paths (suite.sh runs every file on the addon path, then on the koffi path).
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, Lock, LockLostError, NotAcquiredError, InvalidArgumentError, CancelledError } = dlock;
const { URL, cli, key, unique, sleep } = require('./support/helpers');

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

// Who holds name now, as the server says: its holders' fencing tokens ([] when free).
async function tokens(name) {
  return (await other.inspect(name)).holders.map((h) => h.fencingToken);
}

// Fails the test instead of hanging when promise has not settled within ms (a held lock keeps
// no process alive: the timer does meanwhile).
function within(ms, promise, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

test('lockMany: all or none: one name held elsewhere, and the names taken before it are given back', async () => {
  const c = await Client.connect(URL);  // its own, for its own counts
  try {
    const p = unique('many');
    // Bytewise, the held name comes last: the two before it are taken, then given back.
    const [a, b, held] = [`${p}-a`, `${p}-b`, `${p}-c`];
    const holder = await other.acquire(held, { leaseMs: 10000 });
    const err = await c.lockMany([held, b, a], { waitMs: 0, leaseMs: 5000 }).catch((e) => e);
    assert.ok(err instanceof NotAcquiredError, String(err));
    assert.equal(err.code, 'ERR_DLOCK_NOT_ACQUIRED');
    assert.ok(err.message.includes(`'${held}'`), err.message);  // the name that could not be had
    assert.ok(err.message.includes(`none of locks '${held}', '${b}', '${a}' is held (all or none)`), err.message);
    // given back before the promise rejected: free at once, and nothing else of it stays
    assert.deepEqual(await tokens(a), []);
    assert.deepEqual(await tokens(b), []);
    assert.equal(cli('EXISTS', key(a)), '0');
    assert.equal(cli('EXISTS', key(b)), '0');
    assert.deepEqual(await tokens(held), [holder.fencingToken]);
    // a and b were really taken, in bytewise order, before held was refused
    const acquires = (outcome) => Number(new RegExp(`^dlock_acquires_total\\{kind="exclusive",outcome="${outcome}"\\} (\\d+)$`, 'm')
      .exec(c.metricsText())?.[1]);
    assert.equal(acquires('acquired'), 2);
    assert.equal(acquires('not_acquired'), 1);

    // a bounded wait bounds the whole call, and gives back likewise
    const started = Date.now();
    const waited = await c.lockMany([a, held], { waitMs: 300 }).catch((e) => e);
    const took = Date.now() - started;
    assert.ok(waited instanceof NotAcquiredError, String(waited));
    assert.ok(took >= 250 && took < 5000, `waited ${took} ms`);
    assert.deepEqual(await tokens(a), []);

    // a waiting lockMany gets them all once the holder lets go
    const pending = c.lockMany([held, a], { waitMs: 10000 });
    await sleep(100);
    await holder.release();
    const [h, l] = await within(10000, pending, 'the waiting lockMany');
    assert.equal(h.name, held);
    assert.equal(l.name, a);
    assert.ok(h.fencingToken > holder.fencingToken);
    await Client.releaseMany([h, l]);
  } finally {
    await c.close();
  }
});

test('lockMany: Locks in the order given, each with its own fencing token; tokens rise', async () => {
  const p = unique('many');
  const names = [`${p}-z`, Buffer.from(`${p}-m`), `${p}-a`];
  const last = new Map();
  for (let round = 0; round < 5; round++) {
    const locks = await client.lockMany(names, { leaseMs: 5000, owner: 'many' });
    assert.equal(locks.length, 3);
    for (const [k, lock] of locks.entries()) {
      assert.ok(lock instanceof Lock);
      assert.equal(lock.name, names[k]);  // the order given, not the order taken
      assert.equal(lock.client, client);
      assert.equal(lock.valid, true);
      assert.equal(lock.released, false);
      // its own hold: the server has this lock's token for this name
      assert.deepEqual(await tokens(names[k]), [lock.fencingToken]);
      const before = last.get(String(names[k]));
      if (before !== undefined) assert.ok(lock.fencingToken > before, `${lock.fencingToken} <= ${before}`);
      last.set(String(names[k]), lock.fencingToken);
    }
    assert.equal(new Set(locks.map((l) => l.fencingToken)).size, 3);  // three holds, three tokens
    if (round % 2 === 0) {
      await client.releaseMany(locks);
    } else {
      // each is a normal Lock: extended and released alone
      await locks[1].extend(20000);
      assert.ok(locks[1].remainingMs > 10000);
      for (const lock of locks) await lock.release();
    }
    for (const name of names) assert.deepEqual(await tokens(name), []);
  }
  // the node-style forms
  const viaCallback = await new Promise((resolve, reject) => {
    const r = client.lockMany(names, (err, locks) => (err ? reject(err) : resolve(locks)));
    assert.equal(r, undefined);
  });
  assert.equal(viaCallback.length, 3);
  await new Promise((resolve, reject) => Client.releaseMany(viaCallback, (err) => (err ? reject(err) : resolve())));
  const refused = await new Promise((resolve) => {
    other.acquire(names[0]).then((holder) => {
      client.lockMany(names, { waitMs: 0 }, (err) => holder.release().then(() => resolve(err)));
    });
  });
  assert.ok(refused instanceof NotAcquiredError, String(refused));
  for (const name of names) assert.deepEqual(await tokens(name), []);
});

test('lockMany: the client registers its Locks: close() releases them', async () => {
  const c = await Client.connect(URL);
  const p = unique('many');
  const names = [`${p}-1`, `${p}-2`];
  const locks = await c.lockMany(names, { leaseMs: 0 });  // no expiry: only a release frees them
  for (const name of names) assert.equal((await tokens(name)).length, 1);
  await c.close();
  for (const name of names) assert.deepEqual(await tokens(name), []);
  await assert.rejects(Client.releaseMany(locks), (e) => e instanceof LockLostError);
});

test('lockMany: [a, b] against [b, a] for 50 rounds: they contend, never overlap, never deadlock', async () => {
  const c1 = await Client.connect(URL);
  const c2 = await Client.connect(URL);
  try {
    const p = unique('many');
    const [x, y] = [`${p}-x`, `${p}-y`];
    const ROUNDS = 50;
    // Each round both callers ask at the same moment: one of them must wait for the other. A
    // caller taking the names in the order given would take x while the other takes y, and both
    // would wait for the other's until waitMs ran out (NotAcquiredError).
    const arrived = new Map();
    const meet = (round) => {
      let m = arrived.get(round);
      if (m === undefined) {
        let open;
        m = { count: 0, gate: new Promise((resolve) => { open = resolve; }) };
        m.open = open;
        arrived.set(round, m);
      }
      if (++m.count === 2) m.open();
      return m.gate;
    };
    let inside = null;
    const last = new Map([[x, 0n], [y, 0n]]);
    const rounds = [];  // per round: [caller, asked, entered, left] of each
    const caller = async (c, me, names) => {
      for (let round = 0; round < ROUNDS; round++) {
        await meet(round);
        const asked = performance.now();
        const locks = await c.lockMany(names, { waitMs: 10000, leaseMs: 10000 });
        const entered = performance.now();
        assert.equal(inside, null, `round ${round}: ${me} entered while ${inside} held the names`);
        inside = me;
        assert.deepEqual(locks.map((l) => l.name), names);
        for (const lock of locks) {
          assert.ok(lock.fencingToken > last.get(lock.name), `${lock.name}: ${lock.fencingToken} <= ${last.get(lock.name)}`);
          last.set(lock.name, lock.fencingToken);
        }
        await sleep(2);
        inside = null;
        const left = performance.now();
        (rounds[round] ??= []).push([me, asked, entered, left]);
        await Client.releaseMany(locks);
      }
    };
    await within(120000, Promise.all([caller(c1, 'ab', [x, y]), caller(c2, 'ba', [y, x])]), 'the two callers');
    // They really contended: in most rounds the second one in had asked before the first let go.
    let contended = 0;
    for (const r of rounds) {
      const [first, second] = r[0][2] <= r[1][2] ? r : [r[1], r[0]];
      if (second[1] < first[3]) contended++;
    }
    assert.ok(contended >= ROUNDS / 2, `only ${contended} of ${ROUNDS} rounds contended`);
    assert.deepEqual(await tokens(x), []);
    assert.deepEqual(await tokens(y), []);
  } finally {
    await c1.close();
    await c2.close();
  }
});

test('using([a, b]): fn gets the Locks and one signal; always releases them all', async () => {
  const p = unique('many');
  const [a, b] = [`${p}-a`, `${p}-b`];
  const out = await client.using([b, a], { leaseMs: 5000 }, async (locks, signal) => {
    assert.deepEqual(locks.map((l) => l.name), [b, a]);
    assert.ok(signal instanceof AbortSignal);
    assert.equal(signal.aborted, false);
    for (const lock of locks) assert.deepEqual(await tokens(lock.name), [lock.fencingToken]);
    return 42;
  });
  assert.equal(out, 42);
  assert.deepEqual(await tokens(a), []);
  assert.deepEqual(await tokens(b), []);
  // fn threw: its error, and all released
  await assert.rejects(client.using([a, b], async () => { throw new Error('boom'); }), /boom/);
  assert.deepEqual(await tokens(a), []);
  assert.deepEqual(await tokens(b), []);
  // one released by fn itself: fine, the other released after
  assert.equal(await client.using([a, b], async ([la]) => { await la.release(); return 'ok'; }), 'ok');
  assert.deepEqual(await tokens(b), []);
  // all or none: a held name fails using() before fn runs, holding nothing
  const holder = await other.acquire(b);
  let ran = false;
  await assert.rejects(client.using([a, b], { waitMs: 0 }, () => { ran = true; }), NotAcquiredError);
  assert.equal(ran, false);
  assert.deepEqual(await tokens(a), []);
  await holder.release();
  await assert.rejects(client.using([a, b], { leaseMs: 5000 }), { code: 'ERR_INVALID_ARG_TYPE' });
});

test('using([a, b]): a lock lost meanwhile aborts the signal and the call rejects naming it', async () => {
  const p = unique('many');
  const [a, b] = [`${p}-a`, `${p}-b`];
  const FAST = { leaseMs: 5000, heartbeatMs: 100 };
  // broken while fn waits on the signal: the signal aborts with b's LockLostError
  let seen = null;
  const err = await within(10000, client.using([a, b], FAST, async (locks, signal) => {
    seen = { locks, signal };
    await other.breakLock(b, { reason: 'many test', now: true });
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    assert.ok(signal.reason instanceof LockLostError, String(signal.reason));
    assert.ok(signal.reason.message.includes(`'${b}'`), signal.reason.message);
    assert.equal(signal.reason, locks[1].signal.reason);
    return 'done';
  }).catch((e) => e), 'using() with a broken lock');
  assert.ok(err instanceof LockLostError, String(err));  // never silent, although fn succeeded
  assert.equal(err.code, 'ERR_DLOCK_NOT_HELD');
  assert.ok(err.message.includes(`'${b}'`), err.message);
  assert.ok(!err.message.includes(`'${a}'`), err.message);  // a was not lost
  assert.equal(err.cause, 'broken');
  assert.equal(err.errors.length, 1);
  assert.equal(seen.locks[1].lost, true);
  assert.equal(seen.locks[0].lost, false);
  assert.ok(seen.locks.every((l) => l.released));  // all let go
  assert.deepEqual(await tokens(a), []);
  assert.deepEqual(await tokens(b), []);

  // both lost, found only by the releases: the error names both
  const both = await client.using([a, b], { leaseMs: 5000, heartbeatMs: 0 }, async () => {
    cli('DEL', key(a));
    cli('DEL', key(b));
  }).catch((e) => e);
  assert.ok(both instanceof LockLostError, String(both));
  assert.ok(both.message.includes(`'${a}'`) && both.message.includes(`'${b}'`), both.message);
  assert.match(both.message, /^2 of 2 locks were not held: /);
  // ... unless fn's own error is on its way
  await assert.rejects(client.using([a, b], { leaseMs: 5000 }, async () => {
    cli('DEL', key(a));
    throw new Error('mine');
  }), /mine/);
  assert.deepEqual(await tokens(b), []);
});

test('releaseMany: releases every lock; rejects naming each one that was lost', async () => {
  const p = unique('many');
  const names = [`${p}-a`, `${p}-b`, `${p}-c`];
  const locks = await client.lockMany(names, { leaseMs: 5000, heartbeatMs: 0 });
  cli('DEL', key(names[0]));
  cli('DEL', key(names[2]));
  const err = await client.releaseMany(locks).catch((e) => e);
  assert.ok(err instanceof LockLostError, String(err));
  assert.match(err.message, /^2 of 3 locks were not held: /);
  assert.ok(err.message.includes(`'${names[0]}'`) && err.message.includes(`'${names[2]}'`), err.message);
  assert.ok(!err.message.includes(`'${names[1]}'`), err.message);
  assert.deepEqual(err.errors.map((e) => e.code), ['ERR_DLOCK_NOT_HELD', 'ERR_DLOCK_NOT_HELD']);
  assert.ok(locks.every((l) => l.released));  // every Lock let go, as by its own release()
  for (const name of names) assert.deepEqual(await tokens(name), []);
  // released already: not held either
  await assert.rejects(Client.releaseMany(locks), (e) => e instanceof LockLostError && /already released/.test(e.message));
  await Client.releaseMany([]);  // nothing to do
  // locks of two clients at once, each through its own
  const mine = await client.acquire(names[0]);
  const theirs = await other.acquire(names[1]);
  await Client.releaseMany([mine, theirs]);
  assert.deepEqual(await tokens(names[0]), []);
  assert.deepEqual(await tokens(names[1]), []);
  // bad input
  for (const bad of [undefined, 'x', mine, new Set([mine])]) {
    await assert.rejects(Client.releaseMany(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  await assert.rejects(Client.releaseMany([mine, 'x']), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /locks\[1\]/ });
  const twice = await client.acquire(names[0]);
  await assert.rejects(client.releaseMany([twice, twice]), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
  assert.equal(twice.released, false);  // refused before anything was done
  await twice.release();
});

test('lockMany: options.signal cancels the wait, giving back what was taken', async () => {
  const p = unique('many');
  const [a, b] = [`${p}-a`, `${p}-b`];
  const holder = await other.acquire(b, { leaseMs: 10000 });
  try {
    const ac = new AbortController();
    const pending = client.lockMany([a, b], { signal: ac.signal });  // waits without limit
    await sleep(200);
    assert.equal((await tokens(a)).length, 1);  // a is taken; b is awaited
    const reason = new Error('shutting down');
    ac.abort(reason);
    const err = await within(5000, pending.catch((e) => e), 'the aborted lockMany');
    assert.ok(err instanceof CancelledError, String(err));
    assert.equal(err.cause, reason);
    assert.ok(err.message.includes('(all or none)'), err.message);
    assert.deepEqual(await tokens(a), []);
    // aborted before: nothing is taken
    const early = await client.lockMany([a, b], { signal: AbortSignal.abort() }).catch((e) => e);
    assert.ok(early instanceof CancelledError, String(early));
    assert.deepEqual(await tokens(a), []);
  } finally {
    await holder.release();
  }
});

test('lockMany: bad input', async () => {
  const p = unique('many');
  const [a, b] = [`${p}-a`, `${p}-b`];
  const einval = (what) => (e) => e instanceof InvalidArgumentError && e.code === 'ERR_DLOCK_EINVAL' && what.test(e.message);
  await assert.rejects(client.lockMany([a, b, a]), einval(new RegExp(`lock '${a}' is named twice`)));
  await assert.rejects(client.lockMany([a, Buffer.from(a)]), einval(/is named twice/));  // the same bytes
  await assert.rejects(client.lockMany([]), einval(/no lock names/));
  // the library's own refusal of one name: nothing is held
  await assert.rejects(client.lockMany([a, 'x'.repeat(dlock.MAX_NAME_BYTES + 1)], { waitMs: 0 }),
    einval(/longer than 1024/));
  assert.deepEqual(await tokens(a), []);
  for (const bad of [undefined, a, new Set([a]), { 0: a, length: 1 }]) {
    await assert.rejects(client.lockMany(bad), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /names must be an array/ });
  }
  await assert.rejects(client.lockMany([a, 5]), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /names\[1\]/ });
  await assert.rejects(client.lockMany([a, 'b\0c']), { code: 'ERR_INVALID_ARG_VALUE', message: /names\[1\]/ });
  await assert.rejects(client.lockMany([a, b], { timeout: 5 }), { code: 'ERR_INVALID_ARG_VALUE' });
  await assert.rejects(client.lockMany([a, b], { minHoldMs: 1000 }), { code: 'ERR_INVALID_ARG_VALUE', message: /minHoldMs/ });
  assert.throws(() => client.lockMany('x', () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  // with a callback, the library's kind of refusal comes through it
  const viaCallback = await new Promise((resolve) => client.lockMany([a, a], (err) => resolve(err)));
  assert.ok(viaCallback instanceof InvalidArgumentError, String(viaCallback));
  const c = await Client.connect(URL);
  await c.close();
  await assert.rejects(c.lockMany([a, b]), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
});
