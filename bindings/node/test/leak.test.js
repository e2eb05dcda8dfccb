'use strict';
// Nothing leaks: 10,000 acquire+release cycles, and handles forgotten without release/close.
const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('node:v8');
const vm = require('node:vm');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

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

test('10,000 acquire+release cycles leak nothing', (t) => {
  const out = execFileSync(process.execPath,
    ['--min-semi-space-size=16', '--max-semi-space-size=16', path.join(__dirname, 'support', 'leak-cycles.js')],
    { encoding: 'utf8', timeout: 120000 });
  const r = JSON.parse(out.trim().split('\n').pop());
  t.diagnostic(`10000 cycles in ${r.seconds} s; RSS grew ${r.rssKiB} KiB, JS heap ${r.heapKiB} KiB`);
  assert.ok(r.rssKiB < 4096, `RSS grew ${r.rssKiB} KiB over 10000 cycles`);
  assert.ok(r.heapKiB < 2048, `JS heap grew ${r.heapKiB} KiB over 10000 cycles`);
  assert.equal(r.ops, 0);
  assert.equal(r.lostRefs, 0);
  assert.equal(r.active, 0);
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
