'use strict';
// Node side of bench/peers: dlock's Node binding vs other Redis lock libraries.
//
//   node bench.js uncontended PORT SECONDS ROUNDS LIB...
//       one process, acquire+release cycles/s of each library in turn, ROUNDS rounds
//   node bench.js contended PORT SECONDS PROCS ROUNDS LIB...
//       PROCS processes of one library contend for one lock; handoffs/s = acquisitions that
//       follow another process's (a shared file under the lock names the last holder)
//   node bench.js semaphore PORT SECONDS PROCS PERMITS HOLD_MS ROUNDS LIB...
//       PROCS processes take one of PERMITS permits of one name, hold it HOLD_MS, give it back:
//       acquisitions/s, redis-server commands per acquisition, dlock's attempts per
//       acquisition (LIB: dlock | redis-semaphore, whose Semaphore is the peer)
//
// Prints key=value lines (medians over the rounds, per-round figures, and the median of the
// per-round ratios dlock / best peer); bench/peers/run turns them into a table. Every library runs with its own defaults except what it takes to
// wait for a held lock without giving up (retry counts/timeouts), and a 10 s lease.
// LIB: dlock | redlock | redis-semaphore | yarnl | redis-exp-lock, and for uncontended only the
// diagnostics bare-dlock | bare-setnx (a bare RESP client, no library) and hop-none | hop-pool |
// hop-queue (the library's C calls without the binding's JS; never peers, see below).
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

const LEASE_MS = 10000;
const repo = path.resolve(__dirname, '..', '..', '..');

// Parses one RESP2 reply of buf at pos: [value, next position], or null while incomplete (more
// bytes to come). An error reply is an Error value; nil bulk strings and arrays are null.
function parseReply(buf, pos) {
  if (pos >= buf.length) return null;
  const eol = buf.indexOf('\r\n', pos + 1);
  if (eol < 0) return null;
  const line = buf.toString('latin1', pos + 1, eol);
  const next = eol + 2;
  switch (buf[pos]) {
    case 0x2b: return [line, next];             // '+' simple string
    case 0x2d: return [new Error(line), next];  // '-' error
    case 0x3a: return [Number(line), next];     // ':' integer
    case 0x24: {                                // '$' bulk string
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString('utf8', next, next + n), next + n + 2];
    }
    case 0x2a: {                                // '*' array
      const n = Number(line);
      if (n < 0) return [null, next];
      const items = [];
      let p = next;
      for (let i = 0; i < n; i++) {
        const r = parseReply(buf, p);
        if (!r) return null;
        items.push(r[0]);
        p = r[1];
      }
      return [items, p];
    }
    default: throw new Error(`bare client: unexpected RESP type byte 0x${buf[pos].toString(16)}`);
  }
}

// The bare client of the diagnostic rows: RESP2 on one net.Socket, nothing else (no library,
// no pool, no threads, no FFI). Replies are matched to requests in order; a reply may arrive
// in pieces, or several in one chunk.
class BareRedis {
  static async connect(port) {
    const sock = net.connect(port, '127.0.0.1');
    sock.setNoDelay(true);
    await new Promise((resolve, reject) => { sock.once('connect', resolve); sock.once('error', reject); });
    return new BareRedis(sock);
  }

  constructor(sock) {
    this.sock = sock;
    this.pending = [];  // [resolve, reject] of each request awaiting its reply, oldest first
    this.rest = null;   // bytes received but not parsed yet (the start of an incomplete reply)
    const fail = (e) => { for (const [, reject] of this.pending.splice(0)) reject(e); };
    sock.on('error', fail);
    sock.on('close', () => fail(new Error('bare client: connection closed')));
    sock.on('data', (chunk) => {
      const buf = this.rest ? Buffer.concat([this.rest, chunk]) : chunk;
      let pos = 0;
      try {
        for (let r; (r = parseReply(buf, pos));) {
          pos = r[1];
          const p = this.pending.shift();
          if (!p) throw new Error('bare client: a reply nobody asked for');
          if (r[0] instanceof Error) p[1](r[0]);
          else p[0](r[0]);
        }
      } catch (e) {
        sock.destroy(e);  // -> 'error': every pending request fails
        return;
      }
      this.rest = pos < buf.length ? buf.subarray(pos) : null;
    });
  }

  // call('SET', key, value, ...) -> Promise of the reply (strings only, as RESP bulk strings)
  call(...args) {
    let req = `*${args.length}\r\n`;
    for (const a of args) req += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
    return new Promise((resolve, reject) => {
      this.pending.push([resolve, reject]);
      this.sock.write(req);
    });
  }

  close() {
    return new Promise((resolve) => { this.sock.once('close', () => resolve()); this.sock.end(); });
  }
}

// A bare-client adapter, uncontended only: acquire sends acquireCall(owner) and hands its reply
// to acquired(reply) (true: ours); release sends releaseCall(owner), whose reply must be 1.
// Either failing throws, so that a broken run posts no figure. A random 128-bit owner per
// cycle, as the library makes, sliced from a pooled randomBytes: one randomBytes call per
// cycle costs JS ~2 us, which the library (in C++) does not pay, and would understate the
// ceiling.
let ownerPool = Buffer.alloc(0);
function randomOwner() {
  if (ownerPool.length < 16) ownerPool = crypto.randomBytes(4096);
  const owner = ownerPool.subarray(0, 16).toString('hex');
  ownerPool = ownerPool.subarray(16);
  return owner;
}

async function bareAdapter(name, port, wait, setup) {
  if (wait) throw new Error(`${name}: a diagnostic for the uncontended bench only`);
  const redis = await BareRedis.connect(port);
  const { acquireCall, acquired, releaseCall } = await setup(redis);
  return {
    async acquire() {
      const owner = randomOwner();
      const reply = await redis.call(...acquireCall(owner));
      if (!acquired(reply)) throw new Error(`${name}: not acquired: ${JSON.stringify(reply)}`);
      return async () => {
        const released = await redis.call(...releaseCall(owner));
        if (released !== 1) throw new Error(`${name}: not released: ${JSON.stringify(released)}`);
      };
    },
    close: () => redis.close(),
  };
}

// PORT may list several servers ("7001,7002,7003"): the Redlock rows, where dlock opens
// redlock:// over them all and redlock is given one client per server (the other libraries
// take one server only).
const portsOf = (port) => String(port).split(',');
const dlockUrl = (port) => {
  const ports = portsOf(port);
  return ports.length > 1 ? `redlock://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`
    : `redis://127.0.0.1:${port}`;
};

// An adapter: setup(port, key, wait) -> { acquire(): Promise<release: () => Promise>, close() }
const adapters = {
  async dlock(port, key, wait) {
    const { Client } = require(path.join(repo, 'bindings', 'node'));
    const client = await Client.connect(dlockUrl(port));
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
    const servers = portsOf(port).map((p) => new Redis(Number(p), '127.0.0.1'));
    // defaults: retryDelay 200 ms, retryJitter 100 ms; retryCount 10 -> -1 (never give up)
    const redlock = new Redlock(servers, { retryCount: wait ? -1 : 0 });
    redlock.on('error', () => {});  // contention shows up here as ResourceLockedError
    return {
      async acquire() {
        const lock = await redlock.acquire([key], LEASE_MS);
        return () => lock.release();
      },
      close: () => Promise.all(servers.map((r) => r.quit())),
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

  // Diagnostics, not peers (report() leaves them out of the best peer and of the ratio): the
  // bare client above, i.e. what is left of a lock library when the library is taken away.
  //
  // bare-dlock: dlock's own scripts (lua/acquire.lua, lua/release.lua), called by EVALSHA with
  // the keys and arguments dlock uses (key prefix "dlock:"). No Node binding of dlock can beat
  // this row: the server-side cost of the scripts (the fencing token) sets it.
  'bare-dlock'(port, key, wait) {
    return bareAdapter('bare-dlock', port, wait, async (redis) => {
      const load = (file) => redis.call('SCRIPT', 'LOAD', fs.readFileSync(path.join(repo, 'lua', file), 'utf8'));
      const acquireSha = await load('acquire.lua');
      const releaseSha = await load('release.lua');
      const holder = `dlock:{${key}}`;
      const keys = [holder, `${holder}:fence`, `${holder}:holds`];
      const channel = `${holder}:released`;
      return {
        // An exclusive hold that will not wait (queue span 0), as dlock's one-try acquire sends:
        // the keys its common case needs (holder, fence counter, holds), and for the release the
        // holder and the line.
        acquireCall: (owner) => ['EVALSHA', acquireSha, '3', ...keys, owner, String(LEASE_MS), 'exclusive', '0'],
        acquired: (reply) => Array.isArray(reply) && reply[0] === 1,  // {1, token} | {0, pttl}
        releaseCall: (owner) => ['EVALSHA', releaseSha, '2', holder, `${holder}:line`, owner, channel, '0', 'exclusive'],
      };
    });
  },

  // bare-setnx: what yarnl sends: SET key owner NX PX, then yarnl's own compare-and-delete
  // script (node_modules/yarnl/unlock.lua) by EVALSHA. yarnl's row minus the library.
  'bare-setnx'(port, key, wait) {
    return bareAdapter('bare-setnx', port, wait, async (redis) => {
      const unlock = fs.readFileSync(path.join(path.dirname(require.resolve('yarnl')), 'unlock.lua'), 'utf8');
      const releaseSha = await redis.call('SCRIPT', 'LOAD', unlock);
      return {
        acquireCall: (owner) => ['SET', key, owner, 'NX', 'PX', String(LEASE_MS)],
        acquired: (reply) => reply === 'OK',  // nil when held
        releaseCall: (owner) => ['EVALSHA', releaseSha, '1', key, owner],
      };
    });
  },
};

// The hop diagnostics: the binding's own C calls (lib/native.js) with none of its JS, run three
// ways, so that the cost of each thread hop shows. hop-none: dlock_acquire and dlock_release
// blocking on the JS thread (no hop; a binding cannot do this, it would stall the event loop
// for every round trip): the floor of any binding that calls the library. hop-pool: the same
// calls on libuv's thread pool, as the binding's one-try acquire and its release run (two hops
// per call: to a pool thread, back through uv_async). hop-queue: dlock_acquire_queued and
// dlock_release_queued, outcomes through the completion queue's pipe (two hops per call: to the
// library's thread, back through the pipe), as the binding's waiting acquires run.
function hopAdapter(mode) {
  return async (port, key, wait) => {
    if (wait) throw new Error(`hop-${mode}: a diagnostic for the uncontended bench only`);
    const { C } = require(path.join(repo, 'bindings', 'node', 'lib', 'native'));
    const out = [null];
    if (C.client_open(dlockUrl(port), out) !== 0) throw new Error(`hop-${mode}: ${C.last_error()}`);
    const client = out[0];
    const opts = C.options_new();
    C.options_set_lease_ms(opts, LEASE_MS);
    const buf = Buffer.alloc(4096);
    const check = (what, status) => {
      if (status !== 0) throw new Error(`hop-${mode}: ${what}: ${buf.toString('utf8', 0, buf.indexOf(0))}`);
    };
    const closeClient = () => { C.options_free(opts); C.client_close(client); };
    if (mode === 'none') {
      return {
        async acquire() {
          const lock = [null];
          check('acquire', C.acquire_errbuf(client, key, opts, lock, buf, buf.length));
          return async () => check('release', C.release_errbuf(lock[0], buf, buf.length));
        },
        close: closeClient,
      };
    }
    if (mode === 'pool') {
      const call = (fn, ...args) => new Promise((resolve, reject) => {
        fn.async(...args, (err, status) => (err ? reject(err) : resolve(status)));
      });
      return {
        async acquire() {
          const lock = [null];
          check('acquire', await call(C.acquire_errbuf, client, key, opts, lock, buf, buf.length));
          return async () => check('release', await call(C.release_errbuf, lock[0], buf, buf.length));
        },
        close: closeClient,
      };
    }
    const queueOut = [null];
    C.queue_new(queueOut);
    const queue = queueOut[0];
    const pending = new Map();
    let nextTag = 1;
    const tag = [0];
    const status = [0];
    const lock = [null];
    const wake = new net.Socket({ fd: C.queue_fd_dup(queue), readable: true, writable: false });
    wake.on('data', () => {
      while (C.queue_pop(queue, tag, status, lock) > 0) {
        const settle = pending.get(tag[0]);
        pending.delete(tag[0]);
        settle(status[0], lock[0]);
      }
    });
    const queued = (start) => new Promise((resolve, reject) => {
      const t = nextTag++;
      pending.set(t, (st, l) => (st === 0 ? resolve(l) : reject(new Error(`hop-queue: ${C.last_error()}`))));
      start(t);
    });
    return {
      async acquire() {
        const held = await queued((t) => C.acquire_queued(client, key, opts, queue, t));
        return () => queued((t) => C.release_queued(held, queue, t));
      },
      close() {
        wake.destroy();
        closeClient();
        C.queue_free(queue);
      },
    };
  };
}
adapters['hop-none'] = hopAdapter('none');
adapters['hop-pool'] = hopAdapter('pool');
adapters['hop-queue'] = hopAdapter('queue');

// Diagnostic rows: measured like the libraries but not peers.
const isDiagnostic = (lib) => lib.startsWith('bare-') || lib.startsWith('hop-');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Uncontended: every library's adapter (and the diagnostics') in this one process; ROUNDS
// rounds, each running every library for SECONDS in turn (the order rotates), so that all of
// them see the same load.
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
// per-round ratios dlock / best peer of that round (<mode>_ratio). Peers are the libraries other
// than dlock, never the diagnostics; with bare-dlock, also the median of the per-round ratios
// bare-dlock / best peer (<mode>_ceiling_ratio), and likewise hop-none (<mode>_nohop_ratio).
function report(mode, rates, rounds, extra = {}) {
  const med = (xs) => { const v = [...xs].sort((a, b) => a - b); const m = v.length >> 1; return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2; };
  const peers = Object.keys(rates).filter((l) => l !== 'dlock' && !isDiagnostic(l));
  const ratioVsBestPeer = (key, lib) => {
    if (!rates[lib] || !peers.length) return;
    const ratios = [];
    for (let r = 0; r < rounds; r++) ratios.push(rates[lib][r] / Math.max(...peers.map((l) => rates[l][r])));
    console.log(`${mode}_${key}=${med(ratios).toFixed(2)}`);
    console.log(`${mode}_${key}_rounds=${ratios.map((x) => x.toFixed(2)).join('/')}`);
  };
  for (const [lib, xs] of Object.entries(rates)) {
    console.log(`${mode}_${lib}=${med(xs).toFixed(1)}`);
    console.log(`${mode}_${lib}_rounds=${xs.map((x) => x.toFixed(0)).join('/')}`);
    if (extra[lib]) console.log(`${mode}_${lib}_detail=${extra[lib].join(' ')}`);
  }
  ratioVsBestPeer('ratio', 'dlock');
  ratioVsBestPeer('ceiling_ratio', 'bare-dlock');
  ratioVsBestPeer('nohop_ratio', 'hop-none');
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

// Starts procs copies of this script with args; each promise resolves to the two numbers of its
// "count A B" line.
function spawnCounters(procs, args) {
  return Array.from({ length: procs }, () => new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [__filename, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => {
      const m = /count (\d+) (\d+)/.exec(out);
      if (code === 0 && m) resolve([Number(m[1]), Number(m[2])]);
      else reject(new Error(`${args[0]} ${args[1]} exited with ${code}: ${out}`));
    });
  }));
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
    const results = await Promise.all(spawnCounters(procs, ['child', lib, String(port), key, String(startAt), String(endAt), file]));
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

// Semaphores: PROCS processes take one of PERMITS permits of one name, hold it HOLD_MS, give it
// back, for SECONDS. Adapters: setup(port, key, permits) -> { acquire(): Promise<{attempts,
// release}>, close() }; attempts is null when the library does not say.
const semaphoreAdapters = {
  async dlock(port, key, permits) {
    const { Client } = require(path.join(repo, 'bindings', 'node'));
    const client = await Client.connect(`redis://127.0.0.1:${port}`);
    const opts = { leaseMs: LEASE_MS, waitMs: -1, permits };
    return {
      async acquire() {
        const lock = await client.acquire(key, opts);
        return { attempts: lock.attempts, release: () => lock.release() };
      },
      close: () => client.close(),
    };
  },

  async 'redis-semaphore'(port, key, permits) {
    const Redis = require('ioredis');
    const { Semaphore } = require('redis-semaphore');
    const redis = new Redis(port, '127.0.0.1');
    // defaults: retryInterval 10 ms, refreshInterval 0.8 * lockTimeout; acquireTimeout -> 1 h
    const semaphore = new Semaphore(redis, key, permits, { lockTimeout: LEASE_MS, acquireTimeout: 3600 * 1000 });
    return {
      async acquire() {
        await semaphore.acquire();
        return { attempts: null, release: () => semaphore.release() };
      },
      close: () => redis.quit(),
    };
  },
};

async function semaphoreChild(lib, port, key, permits, holdMs, startAt, endAt) {
  const a = await semaphoreAdapters[lib](port, key, permits);
  await sleep(Math.max(0, startAt - Date.now()));
  let n = 0;
  let attempts = 0;
  while (Date.now() < endAt) {
    const { attempts: tries, release } = await a.acquire();
    if (Date.now() < endAt) {
      n++;
      attempts += tries ?? 0;
      await sleep(holdMs);
    }
    await release();
  }
  await a.close();
  console.log(`count ${n} ${attempts}`);
}

// Scripts redis-server ran since the last CONFIG RESETSTAT (INFO commandstats: EVAL and
// EVALSHA calls; the commands a script runs count separately and are left out).
async function serverCommands(redis) {
  const info = await redis.call('INFO', 'commandstats');
  let calls = 0;
  for (const m of String(info).matchAll(/cmdstat_(?:eval|evalsha):calls=(\d+)/g)) calls += Number(m[1]);
  return calls;
}

async function semaphoreOnce(lib, port, seconds, procs, permits, holdMs) {
  const key = `bench:sem:${lib}:${process.pid}:${Date.now()}`;
  const startAt = Date.now() + 1500;
  const endAt = startAt + seconds * 1000;
  const stats = await BareRedis.connect(port);
  try {
    const children = spawnCounters(procs,
      ['semaphore-child', lib, String(port), key, String(permits), String(holdMs), String(startAt), String(endAt)]);
    await sleep(Math.max(0, startAt - Date.now()));
    await stats.call('CONFIG', 'RESETSTAT');
    await sleep(Math.max(0, endAt - Date.now()));
    const commands = await serverCommands(stats);  // before the children close their connections
    const results = await Promise.all(children);
    const acquisitions = results.reduce((x, r) => x + r[0], 0);
    const attempts = results.reduce((x, r) => x + r[1], 0);
    const perAcq = (x) => (acquisitions ? x / acquisitions : 0).toFixed(2);
    const detail = `${perAcq(commands)}scripts/acq` + (lib === 'dlock' ? ` ${perAcq(attempts)}tries/acq` : '') +
      `[${results.map((r) => r[0]).join('/')}]`;
    return [acquisitions / seconds, detail];
  } finally {
    stats.close();
  }
}

async function semaphore(port, seconds, procs, permits, holdMs, rounds, libs) {
  const rates = Object.fromEntries(libs.map((l) => [l, []]));
  const details = Object.fromEntries(libs.map((l) => [l, []]));
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < libs.length; i++) {
      const lib = libs[(i + r) % libs.length];
      const [rate, detail] = await semaphoreOnce(lib, port, seconds, procs, permits, holdMs);
      rates[lib].push(rate);
      details[lib].push(detail);
    }
  }
  report('sem', rates, rounds, details);
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  const check = (libs) => {
    for (const lib of libs) {
      if (!adapters[lib]) throw new Error(`unknown library '${lib}' (${Object.keys(adapters).join(', ')})`);
    }
    return libs;
  };
  // One server: its port as a number; several (the Redlock rows): the list as given.
  const portArg = (p) => (portsOf(p).length > 1 ? p : Number(p));
  if (mode === 'uncontended') {
    const [port, seconds, rounds, ...libs] = rest;
    await uncontended(portArg(port), Number(seconds), Number(rounds), check(libs));
  } else if (mode === 'contended') {
    const [port, seconds, procs, rounds, ...libs] = rest;
    await contended(portArg(port), Number(seconds), Number(procs), Number(rounds), check(libs));
  } else if (mode === 'semaphore') {
    const [port, seconds, procs, permits, holdMs, rounds, ...libs] = rest;
    for (const lib of libs) if (!semaphoreAdapters[lib]) throw new Error(`no semaphore adapter for '${lib}'`);
    await semaphore(Number(port), Number(seconds), Number(procs), Number(permits), Number(holdMs), Number(rounds), libs);
  } else if (mode === 'semaphore-child') {
    const [lib, port, key, permits, holdMs, startAt, endAt] = rest;
    await semaphoreChild(lib, Number(port), key, Number(permits), Number(holdMs), Number(startAt), Number(endAt));
  } else if (mode === 'child') {
    const [lib, port, key, startAt, endAt, file] = rest;
    await child(check([lib])[0], portArg(port), key, Number(startAt), Number(endAt), file);
  } else {
    throw new Error(`unknown mode '${mode}'`);
  }
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
