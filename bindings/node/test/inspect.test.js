'use strict';
// inspect(), capabilities(), the kind and permits options, and what the binding takes from the
// library instead of writing it itself: limits, status codes, URL redaction.
const test = require('node:test');
const assert = require('node:assert/strict');

const dlock = require('libdlock');
const { Client, DlockError } = dlock;
const { URL, PORT, cli, unique } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

test('inspect: a held lock seen from another client, then free', async () => {
  const name = unique('inspect');
  const lock = await client.acquire(name, { leaseMs: 5000, owner: 'worker-7' });
  const other = await Client.connect(URL);
  try {
    const info = await other.inspect(name);
    assert.equal(info.kind, 'exclusive');
    assert.equal(info.holders.length, 1);
    const [holder] = info.holders;
    assert.equal(holder.owner, 'worker-7');
    assert.equal(holder.fencingToken, lock.fencingToken);
    assert.ok(holder.remainingMs > 0 && holder.remainingMs <= 5000, String(holder.remainingMs));
    await lock.release();
    assert.deepEqual(await other.inspect(name), { kind: 'exclusive', holders: [], permits: 0, closedMs: 0, closedBy: '' });
  } finally {
    await other.close();
  }
});

test('inspect: no owner, no expiry, a Buffer name, the callback form', async () => {
  const name = unique('inspect');
  const lock = await client.acquire(Buffer.from(name), { leaseMs: 0 });
  const info = await new Promise((resolve, reject) => {
    client.inspect(name, (err, i) => (err ? reject(err) : resolve(i)));
  });
  assert.deepEqual(info.holders, [{ owner: null, remainingMs: null, fencingToken: lock.fencingToken, value: null }]);
  await lock.release();
  assert.deepEqual((await client.inspect(unique('never'))).holders, []);
});

test('inspect: bad names and a closed client', async () => {
  for (const bad of ['', 'x'.repeat(dlock.MAX_NAME_BYTES + 1)]) {
    // the library's own words, through dlock_inspect_errbuf
    await assert.rejects(client.inspect(bad), {
      name: 'InvalidArgumentError', code: 'ERR_DLOCK_EINVAL', message: /^inspect of lock .*: lock name is (empty|longer than)/,
    });
  }
  await assert.rejects(client.inspect(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => client.inspect(5, () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  const c = await Client.connect(URL);
  await c.close();
  await assert.rejects(c.inspect('x'), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
  await assert.rejects(c.capabilities(), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
});

test('capabilities: what the Redis backend promises', async () => {
  const caps = await client.capabilities();
  assert.deepEqual(Object.keys(caps).sort(), ['break', 'fair', 'fencingStrict', 'lockDelay', 'minHold', 'notifies',
    'observePush', 'permits', 'releaseRequest', 'shared']);
  assert.equal(caps.releaseRequest, true);
  assert.equal(caps.fair, true);
  assert.equal(caps.break, true);
  assert.equal(caps.minHold, true);
  assert.equal(caps.lockDelay, true);
  assert.equal(caps.observePush, true);
  assert.equal(caps.fencingStrict, true);
  assert.equal(caps.notifies, true);
});

test('kind and permits reach the library', async () => {
  const caps = await client.capabilities();
  await (await client.acquire(unique(), { kind: 'exclusive', permits: 0 })).release();  // the defaults
  const shared = unique('shared');
  if (caps.shared) {
    const a = await client.acquire(shared, { kind: 'shared' });
    const b = await client.acquire(shared, { kind: 'shared' });
    const info = await client.inspect(shared);
    assert.equal(info.kind, 'shared');
    assert.equal(info.holders.length, 2);
    await a.release();
    await b.release();
  } else {  // refused by the library, in its words, on both paths, leaving nothing behind
    for (const waitMs of [0, 100]) {
      const e = await client.acquire(shared, { kind: 'shared', waitMs }).catch((x) => x);
      assert.ok(e instanceof DlockError, String(e));
      assert.equal(e.code, 'ERR_DLOCK_EINVAL');
      assert.match(e.message, /shared/);
    }
    assert.deepEqual((await client.inspect(shared)).holders, []);
  }
  const sem = unique('permits');
  if (caps.permits) {
    const held = [await client.acquire(sem, { permits: 2 }), await client.acquire(sem, { permits: 2 })];
    await assert.rejects(client.acquire(sem, { permits: 2, waitMs: 0 }), { code: 'ERR_DLOCK_NOT_ACQUIRED' });
    for (const l of held) await l.release();
  } else {
    await assert.rejects(client.acquire(sem, { permits: 2 }), { code: 'ERR_DLOCK_EINVAL', message: /permits/ });
    assert.deepEqual((await client.inspect(sem)).holders, []);
  }
  for (const opts of [{ kind: 'Shared' }, { kind: 1 }]) {
    await assert.rejects(client.acquire(unique(), opts), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
  }
  await assert.rejects(client.acquire(unique(), { permits: '2' }), { code: 'ERR_INVALID_ARG_TYPE' });
  for (const permits of [-1, 1.5, 2 ** 32]) {
    await assert.rejects(client.acquire(unique(), { permits }), { code: 'ERR_OUT_OF_RANGE' });
  }
});

test('limits are the library\'s', async () => {
  assert.deepEqual([dlock.MAX_NAME_BYTES, dlock.MAX_OWNER_BYTES], [1024, 256]);  // as documented
  const name = 'n'.repeat(dlock.MAX_NAME_BYTES);
  await (await client.acquire(name, { owner: 'o'.repeat(dlock.MAX_OWNER_BYTES) })).release();
  await assert.rejects(client.acquire(`${name}n`), { code: 'ERR_DLOCK_EINVAL', message: new RegExp(`${dlock.MAX_NAME_BYTES}`) });
  await assert.rejects(client.acquire(unique(), { owner: 'o'.repeat(dlock.MAX_OWNER_BYTES + 1) }),
    { code: 'ERR_DLOCK_EINVAL', message: new RegExp(`${dlock.MAX_OWNER_BYTES}`) });
});

test('a client shows its URL as the library does: the password hidden', async () => {
  const user = unique('user');
  cli('ACL', 'SETUSER', user, 'on', '>s3cret-pw', '~*', '&*', '+@all');
  try {
    const c = await Client.connect(`redis://${user}:s3cret-pw@127.0.0.1:${PORT}/0`);
    assert.equal(String(c), `Client(redis://${user}:***@127.0.0.1:${PORT}/0)`);
    await c.close();
    assert.equal(String(c), `Client(redis://${user}:***@127.0.0.1:${PORT}/0, closed)`);
  } finally {
    cli('ACL', 'DELUSER', user);
  }
  const plain = new Client(URL);
  assert.equal(String(plain), `Client(${URL})`);
  await plain.close();
});
