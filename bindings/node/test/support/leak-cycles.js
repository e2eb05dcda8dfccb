'use strict';
// Run by leak.test.js in a process of its own, with V8's young generation fixed in size
// (--min-semi-space-size = --max-semi-space-size): otherwise V8 grows it under this load, by
// 8 to 25 MB of RSS over the first 40,000 cycles, which no leak check could tell from a leak.
// Prints one JSON line: what 10,000 cycles after 10,000 of warm-up added.
const v8 = require('node:v8');
const vm = require('node:vm');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

const dlock = require('libdlock');
const { URL, unique } = require('./helpers');

async function collect() {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
}

(async () => {
  const client = await dlock.Client.connect(URL);
  const name = unique('leak');
  const cycles = async (n) => {
    for (let i = 0; i < n; i++) {
      if (i % 2) {  // one try: the thread pool's path
        const lock = await client.acquire(name, { leaseMs: 5000, waitMs: 0 });
        lock.on('lost', () => {});
        await lock.release();
      } else {  // waiting (the default): the library's thread and the completion queue
        await client.using(name, { leaseMs: 5000 }, () => {});
      }
    }
  };
  await cycles(10000);  // what grows once: malloc's arenas, V8's code and maps
  await collect();
  const before = process.memoryUsage();
  const t0 = Date.now();
  await cycles(10000);
  await collect();
  const after = process.memoryUsage();
  const report = {
    seconds: (Date.now() - t0) / 1000,
    rssKiB: Math.round((after.rss - before.rss) / 1024),
    heapKiB: Math.round((after.heapUsed - before.heapUsed) / 1024),
    ops: dlock._internals.ops.size,
    lostRefs: dlock._internals.lostRefs.size,
    active: dlock._internals.activeCount(),
  };
  await client.close();
  process.stdout.write(JSON.stringify(report) + '\n');
})().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
