'use strict';
// { shared: true } and { permits: n } as a user would check them, against the redis-server that
// bindings/test.sh starts (which offers both).
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, DlockError } = dlock;
const { URL, unique, waitFor } = require('./support/helpers');

let client;
let other;
let third;
test.before(async () => {
  [client, other, third] = await Promise.all([URL, URL, URL].map((u) => Client.connect(u)));
});
test.after(async () => { await Promise.all([client, other, third].map((c) => c.close())); });

test('the Redis backend offers shared holds and permits', async () => {
  const caps = await client.capabilities();
  assert.equal(caps.shared, true);
  assert.equal(caps.permits, true);
});

test('three shared holders at once, no exclusive one meanwhile', async () => {
  const name = unique('shared');
  const r1 = await client.acquire(name, { shared: true, owner: 'r1' });
  const r2 = await client.acquire(name, { shared: true, owner: 'r2' });
  const r3 = await other.acquire(name, { kind: 'shared', owner: 'r3' });
  // a client holding the name shared may not take it exclusive (no upgrade) ...
  await assert.rejects(client.acquire(name), { name: 'InvalidArgumentError', code: 'ERR_DLOCK_EINVAL' });
  // ... and another client is refused while the shared holds stand
  await assert.rejects(third.acquire(name, { waitMs: 0 }), { name: 'NotAcquiredError', code: 'ERR_DLOCK_NOT_ACQUIRED' });
  await assert.rejects(third.acquire(name, { shared: false, waitMs: 200 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  const info = await third.inspect(name);
  assert.equal(info.kind, 'shared');
  assert.equal(info.permits, 0);
  assert.deepEqual(info.holders.map((h) => [h.owner, h.fencingToken]).sort(),
    [['r1', r1.fencingToken], ['r2', r2.fencingToken], ['r3', r3.fencingToken]]);
  assert.equal(new Set([r1, r2, r3].map((l) => l.fencingToken)).size, 3);
  for (const l of [r1, r2, r3]) await l.release();
  assert.deepEqual(await third.inspect(name), { kind: 'exclusive', holders: [], permits: 0, closedMs: 0, closedBy: '' });
  await (await third.acquire(name)).release();  // free for an exclusive hold now
});

test('using() and the callback form take shared too', async () => {
  const name = unique('shared');
  await client.using(name, { shared: true }, async (a) => {
    const b = await new Promise((resolve, reject) => {
      other.acquire(name, { shared: true }, (err, l) => (err ? reject(err) : resolve(l)));
    });
    assert.ok(b.fencingToken > a.fencingToken);
    const info = await third.inspect(name);
    assert.equal(info.kind, 'shared');
    assert.equal(info.holders.length, 2);
    await b.release();
  });
});

test('a waiting exclusive acquire keeps new shared holds out', async () => {
  const name = unique('shared');
  const reader = await client.acquire(name, { shared: true });
  const writer = other.acquire(name, { waitMs: 5000 });
  const refused = await waitFor(async () => {
    try {
      await (await third.acquire(name, { shared: true, waitMs: 0 })).release();
      return false;  // before the writer queued up
    } catch (e) {
      if (e.code !== 'ERR_DLOCK_NOT_ACQUIRED') throw e;
      return true;
    }
  });
  assert.ok(refused, 'a new shared hold was let in before the waiting exclusive acquire');
  await reader.release();
  const w = await writer;
  assert.ok(w.fencingToken > reader.fencingToken);
  assert.equal((await third.inspect(name)).kind, 'exclusive');
  await w.release();
});

test('a semaphore of 2 admits 2 and refuses a 3rd; another size is EINVAL naming both', async () => {
  const name = unique('sem');
  const a = await client.acquire(name, { permits: 2, owner: 'a' });
  const b = await other.acquire(name, { permits: 2, owner: 'b' });
  await assert.rejects(third.acquire(name, { permits: 2, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  const info = await third.inspect(name);
  assert.equal(info.permits, 2);
  assert.equal(info.kind, 'exclusive');
  assert.deepEqual(info.holders.map((h) => h.owner).sort(), ['a', 'b']);
  const e = await third.acquire(name, { permits: 3 }).catch((x) => x);
  assert.ok(e instanceof DlockError, String(e));
  assert.equal(e.code, 'ERR_DLOCK_EINVAL');
  assert.match(e.message, /\b2 permits\b/);
  assert.match(e.message, /\b3 permits\b/);
  for (const mixed of [{}, { shared: true }]) {  // no lock kind on a semaphore while it is held
    await assert.rejects(third.acquire(name, mixed), { code: 'ERR_DLOCK_EINVAL' }, JSON.stringify(mixed));
  }
  await a.release();
  const c = await third.acquire(name, { permits: 2 });  // a permit came free
  assert.ok(c.fencingToken > b.fencingToken);
  await b.release();
  await c.release();
  assert.equal((await third.inspect(name)).permits, 0);  // free: a lock again
  await (await third.acquire(name, { permits: 3 })).release();  // and any size once free
});

test('take: a semaphore of 4, one hold takes 3; 2 more are refused, 1 is not', async () => {
  const name = unique('take');
  const three = await client.acquire(name, { permits: 4, take: 3, owner: 'three' });
  const info = await third.inspect(name);
  assert.equal(info.permits, 4);
  assert.deepEqual(info.holders.map((h) => h.owner), ['three']);  // one hold for the 3
  await assert.rejects(other.acquire(name, { permits: 4, take: 2, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  const one = await other.acquire(name, { permits: 4, take: 1, waitMs: 0 });
  await assert.rejects(third.acquire(name, { permits: 4, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });  // none left
  await three.release();  // frees all 3
  const again = await third.acquire(name, { permits: 4, take: 3, waitMs: 0 });
  assert.ok(again.fencingToken > one.fencingToken);
  await again.release();
  await one.release();
  assert.deepEqual((await third.inspect(name)).holders, []);
});

test('take: two acquires asking the same take count it each (options reused), one asking none counts 1', async () => {
  const name = unique('take');
  const a = await client.acquire(name, { permits: 4, take: 2, waitMs: 0 });
  const b = await client.acquire(name, { permits: 4, take: 2, waitMs: 0 });
  await assert.rejects(client.acquire(name, { permits: 4, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  await a.release();
  const c = await client.acquire(name, { permits: 4, waitMs: 0 });
  const d = await client.acquire(name, { permits: 4, waitMs: 0 });
  await assert.rejects(client.acquire(name, { permits: 4, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
  for (const l of [b, c, d]) await l.release();
});

test('take is checked: 0 and more than the permits are InvalidArgumentError, in the library\'s words', async () => {
  const name = unique('take');
  for (const waitMs of [0, 100, undefined]) {  // one try (the pool) and a wait (the async call)
    const zero = await client.acquire(name, { permits: 4, take: 0, waitMs }).catch((x) => x);
    assert.ok(zero instanceof dlock.InvalidArgumentError, String(zero));
    assert.equal(zero.code, 'ERR_DLOCK_EINVAL');
    assert.match(zero.message, /take/);
    for (const o of [{ permits: 4, take: 5 }, { take: 2 }]) {
      const e = await client.acquire(name, { ...o, waitMs }).catch((x) => x);
      assert.ok(e instanceof dlock.InvalidArgumentError, `${JSON.stringify(o)}: ${e}`);
      assert.match(e.message, /\btake\b/);
      assert.match(e.message, /\bpermits\b/);
    }
  }
  assert.deepEqual((await client.inspect(name)).holders, []);  // nothing taken
  await assert.rejects(client.acquire(name, { permits: 4, take: '2' }), { code: 'ERR_INVALID_ARG_TYPE' });
  for (const take of [-1, 1.5, 2 ** 32]) {
    await assert.rejects(client.acquire(name, { permits: 4, take }), { code: 'ERR_OUT_OF_RANGE', message: /options\.take/ });
  }
  // 1 is the default said aloud, with or without permits; all of them is fine
  await (await client.acquire(name, { take: 1 })).release();
  await (await client.acquire(name, { permits: 4, take: 4 })).release();
});

test('take with a Semaphore, lockMany and a re-entry', async () => {
  const name = unique('take');
  const pool = client.semaphore(name, 4, { take: 3 });
  const release = await pool.acquire();
  assert.equal(await other.semaphore(name, 4, { take: 2 }).tryAcquire(), false);
  const single = other.semaphore(name, 4);
  assert.equal(await single.tryAcquire(), true);
  assert.equal(await single.tryAcquire(), false);  // all 4 taken
  await single.release();
  await release();
  assert.equal(await single.tryAcquire({ take: 4 }), true);  // one acquire's own take
  await single.release();

  const names = [unique('take-a'), unique('take-b')];
  const locks = await client.lockMany(names, { permits: 4, take: 3 });
  for (const n of names) {
    await assert.rejects(other.acquire(n, { permits: 4, take: 2, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
    await (await other.acquire(n, { permits: 4, waitMs: 0 })).release();
  }
  await Client.releaseMany(locks);

  const held = await client.acquire(name, { permits: 4, take: 2, reentrant: 'job' });
  const again = await client.acquire(name, { permits: 4, take: 2, reentrant: 'job' });
  assert.equal(again.fencingToken, held.fencingToken);
  await assert.rejects(client.acquire(name, { permits: 4, take: 3, reentrant: 'job' }),
    { code: 'ERR_DLOCK_EINVAL', message: /take/ });
  await again.release();
  await held.release();
  assert.deepEqual((await third.inspect(name)).holders, []);
});

test('fencing tokens rise across kinds', async () => {
  const name = unique('tokens');
  const tokens = [];
  for (const o of [{}, { shared: true }, { shared: true }, { permits: 2 }, { kind: 'shared' }, { shared: false }]) {
    const lock = await client.acquire(name, o);
    tokens.push(lock.fencingToken);
    await lock.release();
  }
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], tokens.join(' '));
});

test('shared with permits, or against kind, is refused', async () => {
  const name = unique('bad');
  // a shared semaphore: the library's EINVAL, in its words
  for (const o of [{ shared: true, permits: 2 }, { kind: 'shared', permits: 2 }]) {
    await assert.rejects(client.acquire(name, o), { name: 'InvalidArgumentError', code: 'ERR_DLOCK_EINVAL', message: /shared/ });
  }
  for (const o of [{ shared: true, kind: 'exclusive' }, { shared: false, kind: 'shared' }]) {
    await assert.rejects(client.acquire(name, o),
      { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /contradicts/ });
  }
  await assert.rejects(client.acquire(name, { shared: 'yes' }), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.deepEqual((await client.inspect(name)).holders, []);  // nothing taken
  // agreeing words and permits 0 (off) are fine
  await (await client.acquire(name, { shared: true, kind: 'shared', permits: 0 })).release();
});
