'use strict';
// client.requestRelease(name, { reason }) (dlock_request_release): a holder acquired with
// options.onReleaseRequested hears the reason (its Lock emits 'releaseRequested') and may let
// go. Its subscription is live a round trip after its acquire, and a request sent before then
// is missed: the tests ask again until it is heard. On both paths (suite.sh runs every file on
// the addon path, then on the koffi path).
const test = require('node:test');
const assert = require('node:assert/strict');

const { Client, InvalidArgumentError } = require('libdlock');
const { URL, unique, sleep } = require('./support/helpers');

let client;
let asker;
test.before(async () => {
  client = await Client.connect(URL);
  asker = await Client.connect(URL);
});
test.after(async () => {
  await client.close();
  await asker.close();
});

// Asks every 150 ms until heard() (at most 5 s); every ask finds a holder.
async function askUntilHeard(name, reason, heard) {
  const end = Date.now() + 5000;
  while (Date.now() < end) {
    assert.equal(await asker.requestRelease(name, { reason }), true);
    await sleep(150);
    if (heard()) return true;
  }
  return false;
}

test('requestRelease: the holder hears the reason and may release in its handler', async () => {
  const name = unique('ask');
  const seen = [];
  let releasing = null;
  const lock = await client.acquire(name, {
    onReleaseRequested: (l, reason) => {
      seen.push([l, reason]);
      releasing ??= l.release();
    },
  });
  const events = [];
  lock.on('releaseRequested', (l, reason) => events.push(reason));
  assert.ok(await askUntilHeard(name, 'deploy #42', () => releasing !== null), 'never heard');
  await releasing;
  assert.equal(lock.released, true);
  assert.equal(seen.length, 1);  // a released hold hears no more
  assert.equal(seen[0][0], lock);
  assert.equal(seen[0][1], 'deploy #42');
  assert.equal(events[0], 'deploy #42');
  assert.deepEqual((await asker.inspect(name)).holders, []);
  assert.equal(await asker.requestRelease(name, { reason: 'again' }), false);  // free now
});

test('requestRelease: a free name is false; bad input', async () => {
  assert.equal(await asker.requestRelease(unique('ask')), false);
  assert.equal(await asker.requestRelease(unique('ask'), { reason: null }), false);
  await new Promise((resolve, reject) => asker.requestRelease(unique('ask'), (err, asked) => {
    try {
      assert.equal(err, null);
      assert.equal(asked, false);
      resolve();
    } catch (e) { reject(e); }
  }));
  await assert.rejects(asker.requestRelease('x', { reason: 'r'.repeat(1025) }),
    (e) => e instanceof InvalidArgumentError && /reason/.test(e.message));
  await assert.rejects(asker.requestRelease('x', { reason: 5 }), { code: 'ERR_INVALID_ARG_TYPE' });
  await assert.rejects(asker.requestRelease('x', { now: true }), { code: 'ERR_INVALID_ARG_VALUE' });
  await assert.rejects(client.acquire('x', { onReleaseRequested: 'no' }), { code: 'ERR_INVALID_ARG_TYPE' });
  const c = await Client.connect(URL);
  await c.close();
  await assert.rejects(c.requestRelease('x'), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
});
