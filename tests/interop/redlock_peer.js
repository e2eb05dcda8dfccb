// node-redlock v5 (bench/peers/node's), as a peer of dlock on the same Redis: driven by
// tests/redis_interop_test.cc.
//
//   node redlock_peer.js PORTS KEY hold FILE
//       Tries KEY once: prints "RESULT HELD" (then waits until FILE exists, releases it and
//       prints "RELEASED") or "RESULT REFUSED".
//   node redlock_peer.js PORTS KEY count FILE ROUNDS
//       ROUNDS times: takes KEY (waiting), reads the number in FILE, sleeps 1 ms, writes it
//       back plus one, releases. Prints "DONE ROUNDS".
//
// PORTS: one port, or several ("7001,7002,7003": Redlock over those masters, one client each).
// KEY is the Redis key node-redlock sets: dlock's holder key dlock:{NAME} meets dlock's locks.
// NODE_PATH names bench/peers/node/node_modules.
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock').default;

const [ports, key, mode, file, rounds] = process.argv.slice(2);
const servers = ports.split(',').map((p) => new Redis(Number(p), '127.0.0.1', { lazyConnect: false }));
const LEASE_MS = 10000;

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function hold() {
  const redlock = new Redlock(servers, { retryCount: 0 });
  redlock.on('error', () => {});  // a refusal also shows up here
  let lock;
  try {
    lock = await redlock.acquire([key], LEASE_MS);
  } catch (e) {
    console.log('RESULT REFUSED');
    return;
  }
  console.log('RESULT HELD');
  while (!fs.existsSync(file)) await sleep(5);
  await lock.release();
  console.log('RELEASED');
}

// One try at a time, each a fresh acquire: node-redlock's own retries (retryCount) reuse the
// first try's value, and its acquire script refuses a key that exists, its own included, so
// on Redlock a try that took a minority of masters blocks its own retries until those keys
// expire (a 10 s stall each time it happens). A failed acquire() gives back what it took.
async function acquire(redlock) {
  for (;;) {
    try {
      return await redlock.acquire([key], LEASE_MS);
    } catch (e) {
      await sleep(5 + Math.random() * 10);  // a dlock release publishes nothing this client hears
    }
  }
}

async function count() {
  const redlock = new Redlock(servers, { retryCount: 0 });
  redlock.on('error', () => {});
  for (let i = 0; i < Number(rounds); i++) {
    const lock = await acquire(redlock);
    const n = Number(fs.readFileSync(file, 'utf8'));
    await sleep(1);  // a window for a lost update, if the lock let two in
    fs.writeFileSync(file, String(n + 1));
    await lock.release();
  }
  console.log(`DONE ${rounds}`);
}

(mode === 'hold' ? hold() : count())
  .then(() => Promise.all(servers.map((r) => r.quit())))
  .catch((e) => {
    console.log(`ERROR ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  });
