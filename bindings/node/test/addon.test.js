'use strict';
// The addon path (dlock.node, addon/dlock_node.c): taken when it was built next to the library,
// creates no thread, and leaves nothing on the loop once the client is closed. Each case that
// needs a fresh process runs node in a child.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const dlock = require('libdlock');
const { URL, unique } = require('./support/helpers');

const PKG = path.join(__dirname, '..');
const LIBRARY = process.env.DLOCK_LIBRARY;
const BUILT = !!LIBRARY && fs.existsSync(path.join(path.dirname(fs.realpathSync(LIBRARY)), 'dlock.node'));
const FORCED_KOFFI = process.env.DLOCK_NODE_ADDON === '0';

function run(script, env = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    execFile(process.execPath, ['-e', script], { cwd: PKG, env: { ...process.env, ...env }, timeout: 20000 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else resolve({ out: stdout.trim(), ms: Date.now() - t0 });
      });
  });
}

test('native says which path is in use', async () => {
  assert.ok(['addon', 'koffi'].includes(dlock.native));
  assert.equal(dlock.library().native, dlock.native);
  if (FORCED_KOFFI) {
    assert.equal(dlock.native, 'koffi');
    assert.equal(dlock.library().reason, 'DLOCK_NODE_ADDON=0');
  } else if (BUILT) {
    assert.equal(dlock.native, 'addon', `dlock.node was built but not taken: ${dlock.library().reason}`);
  }
  const { out } = await run("console.log(require('libdlock').native)", { DLOCK_NODE_ADDON: '0' });
  assert.equal(out, 'koffi');
});

test('a missing addon with DLOCK_NODE_ADDON=1 is an error, not a quiet fallback', async () => {
  const { out } = await run(`
    try { require('libdlock').version(); console.log('loaded'); } catch (e) { console.log(e.code); }`,
  { DLOCK_NODE_ADDON: '1', DLOCK_LIBRARY: '/nonexistent/libdlock.so' });
  assert.equal(out, 'ERR_DLOCK_LIBRARY');  // the library first: nothing to find an addon for
  if (!BUILT) return;
  const r = await run(`
    try { require('libdlock').version(); console.log('loaded'); } catch (e) { console.log(e.code); }`,
  { DLOCK_NODE_ADDON: path.join(PKG, 'no-such.node') });
  assert.equal(r.out, 'loaded');  // a path that is not there: the next places are tried
});

test('the addon path starts no thread', { skip: dlock.native !== 'addon' }, async () => {
  const threads = () => fs.readdirSync('/proc/self/task').length;
  dlock.version();
  const base = threads();
  const client = await dlock.Client.connect(URL);
  const name = unique('threads');
  const lock = await client.acquire(name, { leaseMs: 2000, heartbeatMs: 100 });
  const waiter = client.acquire(name, { waitMs: 50 }).catch((e) => e.code);
  assert.equal(await waiter, 'ERR_DLOCK_NOT_ACQUIRED');
  await lock.extend(3000);
  await new Promise((r) => setTimeout(r, 250));  // heartbeats
  assert.equal(lock.valid, true);
  await lock.release();
  await client.close();
  assert.equal(threads(), base, 'a thread was started');
});

test('a process exits by itself once its client is closed', async () => {
  const { out, ms } = await run(`
    const { Client, native } = require('libdlock');
    (async () => {
      const c = await Client.connect(${JSON.stringify(URL)});
      const l = await c.acquire(${JSON.stringify(unique('exit'))}, { leaseMs: 5000, heartbeatMs: 100 });
      await l.release();
      const w = await c.acquire(${JSON.stringify(unique('exit'))});
      await c.close();
      console.log(native, w.released || !w.valid);
    })();`);
  assert.match(out, /^(addon|koffi) true$/);
  assert.ok(ms < 15000, `took ${ms} ms to exit`);
});
