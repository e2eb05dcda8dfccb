'use strict';
// Node side of bench/peers: dlock's Node binding vs other Redis lock libraries.
//
//   node bench.js uncontended PORT SECONDS ROUNDS LIB...
//       one process, acquire+release cycles/s of each library in turn, ROUNDS rounds
//   node bench.js contended PORT SECONDS PROCS ROUNDS LIB...
//       PROCS processes of one library contend for one lock; handoffs/s = acquisitions that
//       follow another process's (a shared file under the lock names the last holder)
//
// Prints key=value lines (medians over the rounds, per-round figures, and the median of the
// per-round ratios dlock / best peer); bench/peers/run turns them into a table. Every library runs with its own defaults except what it takes to
// wait for a held lock without giving up (retry counts/timeouts), and a 10 s lease.
// LIB: dlock | redlock | redis-semaphore | yarnl | redis-exp-lock.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

const LEASE_MS = 10000;
const repo = path.resolve(__dirname, '..', '..', '..');

// An adapter: setup(port, key, wait) -> { acquire(): Promise<release: () => Promise>, close() }
const adapters = {
  async dlock(port, key, wait) {
    const { Client } = require(path.join(repo, 'bindings', 'node'));
    const client = await Client.connect(`redis://127.0.0.1:${port}`);
    const opts = { leaseMs: LEASE_MS, waitMs: wait ? -1 : 0 };
    return {
      async acquire() {
        const lock = await client.acquire(key, opts);
        return () => lock.release();
      },
      close: () => client.close(),
    };
  },

  async redlock(port, key, wait) {
    const Redis = require('ioredis');
    const Redlock = require('redlock').default;
    const redis = new Redis(port, '127.0.0.1');
    // defaults: retryDelay 200 ms, retryJitter 100 ms; retryCount 10 -> -1 (never give up)
    const redlock = new Redlock([redis], { retryCount: wait ? -1 : 0 });
    redlock.on('error', () => {});  // contention shows up here as ResourceLockedError
    return {
      async acquire() {
        const lock = await redlock.acquire([key], LEASE_MS);
        return () => lock.release();
      },
      close: () => redis.quit(),
    };
  },

  async 'redis-semaphore'(port, key, wait) {
    const Redis = require('ioredis');
    const { Mutex } = require('redis-semaphore');
    const redis = new Redis(port, '127.0.0.1');
    // defaults: retryInterval 10 ms, refreshInterval 0.8 * lockTimeout; acquireTimeout 10 s -> 1 h
    const mutex = new Mutex(redis, key, {
      lockTimeout: LEASE_MS,
      acquireTimeout: wait ? 3600 * 1000 : 10000,
      acquireAttemptsLimit: wait ? Number.POSITIVE_INFINITY : 1,
    });
    return {
      async acquire() {
        await mutex.acquire();
        return () => mutex.release();
      },
      close: () => redis.quit(),
    };
  },

  async yarnl(port, key, wait) {
    const redis = require('redis');  // node_redis 0.11, the client yarnl is written for
    const Lock = require('yarnl');
    const client = redis.createClient(port, '127.0.0.1');
    await new Promise((resolve, reject) => { client.once('ready', resolve); client.once('error', reject); });
    // defaults: retryDelay 50 ms, maxAttempts null (forever)
    const lock = new Lock(key, { client, ttl: LEASE_MS, maxAttempts: wait ? null : 1 });
    return {
      acquire() {
        return new Promise((resolve, reject) => {
          lock.lock((err, unlock) => {
            if (err) reject(err);
            else if (!unlock) reject(new Error('not acquired'));
            else resolve(() => new Promise((res, rej) => unlock((e) => (e ? rej(e) : res()))));
          });
        });
      },
      close: () => new Promise((resolve) => client.quit(() => resolve())),
    };
  },

  async 'redis-exp-lock'(port, key, wait) {
    const redis = require('redis');  // node_redis 0.11 (redis-exp-lock takes a node_redis client)
    const redisExpLock = require('redis-exp-lock');
    const client = redis.createClient(port, '127.0.0.1');
    await new Promise((resolve, reject) => { client.once('ready', resolve); client.once('error', reject); });
    // defaults: retryTimeout 5 ms; maxRetries 0 -> unlimited
    const withLock = redisExpLock({ redis: client, lifetime: LEASE_MS, maxRetries: wait ? Infinity : 0 });
    return {
      acquire() {
        return new Promise((resolve, reject) => {
          withLock(key, (err, retries, release) => {
            if (err) reject(err);
            else resolve(() => new Promise((res, rej) => release((e) => (e ? rej(e) : res()))));
          });
        });
      },
      close: () => new Promise((resolve) => client.quit(() => resolve())),
    };
  },
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Uncontended: every library's adapter in this one process; ROUNDS rounds, each running every
// library for SECONDS in turn (the order rotates), so that all of them see the same load.
async function uncontended(port, seconds, rounds, libs) {
  const as = {};
  for (const lib of libs) {
    as[lib] = await adapters[lib](port, `bench:unc:${lib}:${process.pid}`, false);
    const warmEnd = Date.now() + 300;
    while (Date.now() < warmEnd) await (await as[lib].acquire())();
  }
  const rates = Object.fromEntries(libs.map((l) => [l, []]));
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < libs.length; i++) {
      const lib = libs[(i + r) % libs.length];
      const a = as[lib];
      let n = 0;
      const t0 = process.hrtime.bigint();
      const end = t0 + BigInt(Math.round(seconds * 1e9));
      let now = t0;
      while (now < end) {
        const release = await a.acquire();
        await release();
        n++;
        now = process.hrtime.bigint();
      }
      rates[lib].push(n / (Number(now - t0) / 1e9));
    }
  }
  for (const lib of libs) await as[lib].close();
  report('unc', rates, rounds);
}

// Prints key=value lines: <mode>_<lib>=median, <mode>_<lib>_rounds=a/b/c, and the median of the
// per-round ratios dlock / best peer of that round.
function report(mode, rates, rounds, extra = {}) {
  const med = (xs) => { const v = [...xs].sort((a, b) => a - b); const m = v.length >> 1; return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2; };
  const ratios = [];
  for (let r = 0; r < rounds; r++) {
    const peers = Object.keys(rates).filter((l) => l !== 'dlock').map((l) => rates[l][r]);
    if (rates.dlock && peers.length) ratios.push(rates.dlock[r] / Math.max(...peers));
  }
  for (const [lib, xs] of Object.entries(rates)) {
    console.log(`${mode}_${lib}=${med(xs).toFixed(1)}`);
    console.log(`${mode}_${lib}_rounds=${xs.map((x) => x.toFixed(0)).join('/')}`);
    if (extra[lib]) console.log(`${mode}_${lib}_detail=${extra[lib].join(' ')}`);
  }
  if (ratios.length) {
    console.log(`${mode}_ratio=${med(ratios).toFixed(2)}`);
    console.log(`${mode}_ratio_rounds=${ratios.map((x) => x.toFixed(2)).join('/')}`);
  }
}

// One contender: waits until startAt, then acquire(wait)+release until endAt. Under the lock it
// reads and rewrites a shared file naming the last holder: an acquisition that follows another
// process's is a handoff. Prints its acquisitions and handoffs.
async function child(lib, port, key, startAt, endAt, file) {
  const a = await adapters[lib](port, key, true);
  const me = String(process.pid);
  await sleep(Math.max(0, startAt - Date.now()));
  let n = 0;
  let handoffs = 0;
  while (Date.now() < endAt) {
    const release = await a.acquire();
    if (Date.now() < endAt) {
      n++;
      if (fs.readFileSync(file, 'utf8') !== me) {
        handoffs++;
        fs.writeFileSync(file, me);
      }
    }
    await release();
  }
  await a.close();
  console.log(`count ${n} ${handoffs}`);
}

// One contended run: PROCS processes of one library for SECONDS. Returns [handoffs/s, detail].
async function contendedOnce(lib, port, seconds, procs) {
  const key = `bench:con:${lib}:${process.pid}:${Date.now()}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-peers-'));
  const file = path.join(dir, 'holder');
  fs.writeFileSync(file, 'none');
  const startAt = Date.now() + 1500;  // time for every process to load and connect
  const endAt = startAt + seconds * 1000;
  try {
    const results = await Promise.all(Array.from({ length: procs }, () => new Promise((resolve, reject) => {
      const p = spawn(process.execPath,
        [__filename, 'child', lib, String(port), key, String(startAt), String(endAt), file],
        { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      p.stdout.on('data', (d) => { out += d; });
      p.on('exit', (code) => {
        const m = /count (\d+) (\d+)/.exec(out);
        if (code === 0 && m) resolve([Number(m[1]), Number(m[2])]);
        else reject(new Error(`${lib} contender exited with ${code}: ${out}`));
      });
    })));
    const acquisitions = results.reduce((x, r) => x + r[0], 0);
    const handoffs = results.reduce((x, r) => x + r[1], 0);
    return [handoffs / seconds, `${(acquisitions / seconds).toFixed(0)}acq/s[${results.map((r) => r[0]).join('/')}]`];
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function contended(port, seconds, procs, rounds, libs) {
  const rates = Object.fromEntries(libs.map((l) => [l, []]));
  const details = Object.fromEntries(libs.map((l) => [l, []]));
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < libs.length; i++) {
      const lib = libs[(i + r) % libs.length];
      const [rate, detail] = await contendedOnce(lib, port, seconds, procs);
      rates[lib].push(rate);
      details[lib].push(detail);
    }
  }
  report('con', rates, rounds, details);
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  const check = (libs) => {
    for (const lib of libs) {
      if (!adapters[lib]) throw new Error(`unknown library '${lib}' (${Object.keys(adapters).join(', ')})`);
    }
    return libs;
  };
  if (mode === 'uncontended') {
    const [port, seconds, rounds, ...libs] = rest;
    await uncontended(Number(port), Number(seconds), Number(rounds), check(libs));
  } else if (mode === 'contended') {
    const [port, seconds, procs, rounds, ...libs] = rest;
    await contended(Number(port), Number(seconds), Number(procs), Number(rounds), check(libs));
  } else if (mode === 'child') {
    const [lib, port, key, startAt, endAt, file] = rest;
    await child(check([lib])[0], Number(port), key, Number(startAt), Number(endAt), file);
  } else {
    throw new Error(`unknown mode '${mode}'`);
  }
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
