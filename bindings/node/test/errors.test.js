'use strict';
// Every error carries the library's own message: for the calls on libuv's pool (client open,
// one-try acquire, release, extend: the _errbuf forms) as for the queued ones.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const dlock = require('libdlock');
const { Client } = dlock;
const { URL, cli, key, unique, sleep } = require('./support/helpers');

// A port nobody listens on (free a moment ago).
async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

test('open: nothing listening is EIO naming the address and "Connection refused"', async () => {
  const port = await freePort();
  const err = await Client.connect(`redis://127.0.0.1:${port}`).catch((e) => e);
  assert.equal(err.code, 'ERR_DLOCK_EIO', String(err));
  assert.match(err.message, /Connection refused/);
  assert.ok(err.message.includes(`127.0.0.1:${port}`), err.message);
  // the same through a call made before the client was ready
  const c = new Client(`redis://127.0.0.1:${port}`);
  await assert.rejects(c.acquire('x'), { code: 'ERR_DLOCK_EIO', message: /Connection refused/ });
  await c.close();
  // and for a bad URL, the part that is wrong
  await assert.rejects(Client.connect(`${URL}?bogus_param=1`), { code: 'ERR_DLOCK_EINVAL', message: /bogus_param/ });
});

// A redis-server of its own with a password (requirepass), on a free port, for one test.
async function startPasswordServer(password) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-node-auth-'));
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1',
      '--requirepass', password, '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: 'ignore' });
    let exited = false;
    proc.on('exit', () => { exited = true; });
    for (let i = 0; i < 100 && !exited; i++) {
      const up = await new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
        s.on('error', () => resolve(false));
      });
      if (up) {
        return {
          port,
          async stop() {
            if (!exited) {
              proc.kill('SIGTERM');
              await new Promise((resolve) => proc.once('exit', resolve));
            }
            fs.rmSync(dir, { recursive: true, force: true });
          },
        };
      }
      await sleep(50);
    }
    if (!exited) proc.kill('SIGKILL');
  }
  fs.rmSync(dir, { recursive: true, force: true });
  throw new Error('could not start a redis-server with requirepass');
}

test('open: credentials refused is EAUTH with the user and the server\'s words', async () => {
  const server = await startPasswordServer('open-sesame');
  const at = `127.0.0.1:${server.port}`;
  try {
    const wrong = await Client.connect(`redis://:not-the-password@${at}`).catch((e) => e);
    assert.equal(wrong.code, 'ERR_DLOCK_EAUTH', String(wrong));
    assert.match(wrong.message, /WRONGPASS/);  // the server's answer
    assert.ok(wrong.message.includes(at), wrong.message);
    assert.doesNotMatch(wrong.message, /not-the-password/);

    const user = await Client.connect(`redis://alice:not-the-password@${at}`).catch((e) => e);
    assert.equal(user.code, 'ERR_DLOCK_EAUTH');
    assert.match(user.message, /'alice'/);
    assert.match(user.message, /WRONGPASS/);
    assert.doesNotMatch(user.message, /not-the-password/);

    const none = await Client.connect(`redis://${at}`).catch((e) => e);
    assert.equal(none.code, 'ERR_DLOCK_EAUTH');
    assert.match(none.message, /NOAUTH/);

    const ok = await Client.connect(`redis://:open-sesame@${at}`);
    await (await ok.acquire(unique('auth'))).release();
    await ok.close();
  } finally {
    await server.stop();
  }
});

test('release / extend after close(): NOT_HELD, released when its client was closed', async () => {
  const client = await Client.connect(URL);
  // more than the pool takes at once: the rest go through the queued calls
  const locks = await Promise.all(Array.from({ length: 6 }, () => client.acquire(unique('closed'), { leaseMs: 60000, waitMs: 0 })));
  await client.close();
  for (const l of locks) assert.equal(cli('EXISTS', key(l.name)), '0');
  const extends_ = await Promise.all(locks.map((l) => l.extend(5000).catch((e) => e)));
  const releases = await Promise.all(locks.map((l) => l.release().catch((e) => e)));
  for (const [i, e] of [...extends_, ...releases].entries()) {
    const l = locks[i % locks.length];
    assert.equal(e.code, 'ERR_DLOCK_NOT_HELD', String(e));
    assert.equal(e.message, `lock '${l.name}' was released when its client was closed`);
  }
});

test('lock errors on both paths carry the library\'s message', async () => {
  const client = await Client.connect(URL);
  const other = await Client.connect(URL);
  try {
    const name = unique('msg');
    const held = await client.acquire(name, { leaseMs: 10000 });
    // one try (pool) and a wait (queued): who holds it, and for how long it was tried
    const once = await other.acquire(name, { waitMs: 0 }).catch((e) => e);
    assert.equal(once.code, 'ERR_DLOCK_NOT_ACQUIRED');
    assert.match(once.message, new RegExp(`^lock '${name}' is held by another owner.*gave up after 1 attempt`));
    const waited = await other.acquire(name, { waitMs: 100 }).catch((e) => e);
    assert.equal(waited.code, 'ERR_DLOCK_NOT_ACQUIRED');
    assert.match(waited.message, new RegExp(`^lock '${name}' is held by another owner.*gave up after \\d+ attempts`));
    // lost behind its back: release says why
    cli('DEL', key(name));
    const lost = await held.release().catch((e) => e);
    assert.equal(lost.code, 'ERR_DLOCK_NOT_HELD');
    assert.match(lost.message, new RegExp(`^lock '${name}' was lost: `));
    // argument errors the library finds on the pool path
    const long = await client.acquire('n'.repeat(1025), { waitMs: 0 }).catch((e) => e);
    assert.equal(long.code, 'ERR_DLOCK_EINVAL');
    assert.match(long.message, /1024/);
    const l = await client.acquire(unique('msg'));
    const short = await l.extend(5).catch((e) => e);
    assert.equal(short.code, 'ERR_DLOCK_EINVAL');
    assert.doesNotMatch(short.message, /^DLOCK_/);
    await l.release();
    // a message that does not name the lock gets the operation and the lock in front
    const c3 = await Client.connect(URL);
    const blocker = await client.acquire(name);
    const pending = c3.acquire(name, { waitMs: -1 }).catch((e) => e);
    await sleep(100);
    await c3.close();
    const cancelled = await pending;
    assert.equal(cancelled.code, 'ERR_DLOCK_ECANCELLED');
    assert.match(cancelled.message, new RegExp(`^acquire of lock '${name}': .*closed`));
    await blocker.release();
  } finally {
    await other.close();
    await client.close();
  }
});
