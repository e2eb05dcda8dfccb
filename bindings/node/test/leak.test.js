'use strict';
// Nothing leaks: 10,000 acquire+release cycles, and handles forgotten without release/close.
const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('node:v8');
const vm = require('node:vm');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

const dlock = require('libdlock');
const { Client } = dlock;
const { URL, cli, key, unique, waitFor, threads } = require('./support/helpers');

async function collect() {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
}

test('10,000 acquire+release cycles leak nothing', async (t) => {
  const client = await Client.connect(URL);
  const name = unique('leak');
  for (let i = 0; i < 1000; i++) await (await client.acquire(name, { leaseMs: 5000, waitMs: 0 })).release();
  await collect();
  const before = process.memoryUsage();
  const t0 = Date.now();
  for (let i = 0; i < 10000; i++) {
    if (i % 2) {  // one try: the thread pool's path
      const lock = await client.acquire(name, { leaseMs: 5000, waitMs: 0 });
      lock.on('lost', () => {});
      await lock.release();
    } else {  // waiting (the default): the library's thread and the completion queue
      await client.using(name, { leaseMs: 5000 }, () => {});
    }
  }
  await collect();
  const after = process.memoryUsage();
  const rssKiB = Math.round((after.rss - before.rss) / 1024);
  const heapKiB = Math.round((after.heapUsed - before.heapUsed) / 1024);
  t.diagnostic(`10000 cycles in ${(Date.now() - t0) / 1000} s; RSS grew ${rssKiB} KiB, JS heap ${heapKiB} KiB`);
  assert.ok(rssKiB < 8192, `RSS grew ${rssKiB} KiB over 10000 cycles`);
  assert.ok(heapKiB < 2048, `JS heap grew ${heapKiB} KiB over 10000 cycles`);
  assert.equal(dlock._internals.ops.size, 0);
  assert.equal(dlock._internals.lostRefs.size, 0);
  assert.equal(dlock._internals.activeCount(), 0);
  await client.close();
});

test('forgotten locks are released and forgotten clients closed by the GC', async () => {
  const client = await Client.connect(URL);
  const names = Array.from({ length: 100 }, () => unique('gc'));
  for (const n of names) await client.acquire(n, { leaseMs: 0 });  // dropped at once
  await collect();
  assert.ok(await waitFor(() => cli('EXISTS', ...names.map(key)) === '0'), 'forgotten locks still held');
  assert.ok(await waitFor(() => dlock._internals.lostRefs.size === 0));
  await client.close();

  const base = threads();
  // (in a helper, so that no variable of this async function keeps the last one reachable)
  const forget = async () => { await (await Client.connect(URL)).acquire(unique('gc'), { leaseMs: 0 }); };
  for (let i = 0; i < 20; i++) await forget();
  // koffi path: a thread per client; the addon's clients run on this thread's loop
  if (dlock.native === 'addon') assert.equal(threads(), base);
  else assert.ok(threads() >= base + 20);
  await collect();
  assert.ok(await waitFor(async () => { await collect(); return threads() <= base; }, 10000),
    `${threads() - base} client threads left running`);
  assert.ok(await waitFor(() => cli('KEYS', 'dlock:{gc-*}') === ''), 'locks of forgotten clients still held');
});
