'use strict';
// Observability (issue 36): a client's metrics (text and samples, and in prom-client), why a
// lock was lost (lock.lostCause, LockLostError.cause), and client events (on both paths: the
// addon's hook, the koffi path's event queue).
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');

const dlock = require('libdlock');
const { Client, LockLostError, InvalidArgumentError, registerMetrics } = dlock;
const { URL, cli, key, unique, sleep, waitFor } = require('./support/helpers');

let client;
test.before(async () => { client = await Client.connect(URL); });
test.after(async () => { await client.close(); });

const ACQUIRED = 'dlock_acquires_total{kind="exclusive",outcome="acquired"}';

// The value of one sample line of a Prometheus text ("name{labels} value").
function textValue(text, series) {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line !== undefined, `no ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}

function sampleValue(samples, name, labels) {
  const found = samples.filter((s) => s.name === name &&
    Object.entries(labels).every(([k, v]) => s.labels[k] === v) &&
    Object.keys(s.labels).length === Object.keys(labels).length);
  assert.equal(found.length, 1, `${name} ${JSON.stringify(labels)}`);
  return found[0].value;
}

test('metricsText: one acquire moves dlock_acquires_total{kind="exclusive",outcome="acquired"} by exactly 1', async () => {
  const before = client.metricsText();
  assert.match(before, /^# HELP dlock_acquire_attempts_total /);
  assert.match(before, /^# TYPE dlock_acquires_total counter$/m);
  assert.match(before, /^# TYPE dlock_locks_held gauge$/m);
  assert.match(before, /^# TYPE dlock_hold_seconds histogram$/m);
  const lock = await client.acquire(unique('m'));
  const held = client.metricsText();
  assert.equal(textValue(held, ACQUIRED), textValue(before, ACQUIRED) + 1);
  assert.equal(textValue(held, 'dlock_locks_held'), textValue(before, 'dlock_locks_held') + 1);
  await lock.release();
  const after = client.metricsText();
  assert.equal(textValue(after, ACQUIRED), textValue(before, ACQUIRED) + 1);
  assert.equal(textValue(after, 'dlock_releases_total{outcome="ok"}'),
    textValue(before, 'dlock_releases_total{outcome="ok"}') + 1);
  assert.equal(textValue(after, 'dlock_locks_held'), textValue(before, 'dlock_locks_held'));
  assert.equal(textValue(after, 'dlock_hold_seconds_count'), textValue(before, 'dlock_hold_seconds_count') + 1);
});

test('metrics(): the same samples, labels as objects, no library needed', async () => {
  const before = client.metrics();
  const lock = await client.acquire(unique('m'), { waitMs: 0 });
  await lock.release();
  const after = client.metrics();
  assert.equal(sampleValue(after, 'dlock_acquires_total', { kind: 'exclusive', outcome: 'acquired' }),
    sampleValue(before, 'dlock_acquires_total', { kind: 'exclusive', outcome: 'acquired' }) + 1);
  const s = after.find((x) => x.name === 'dlock_acquires_total');
  assert.deepEqual(Object.keys(s).sort(), ['family', 'help', 'labels', 'name', 'type', 'value']);
  assert.equal(s.family, 'dlock_acquires_total');
  assert.equal(s.type, 'counter');
  assert.equal(typeof s.help, 'string');
  const bucket = after.find((x) => x.name === 'dlock_hold_seconds_bucket' && x.labels.le === '+Inf');
  assert.equal(bucket.family, 'dlock_hold_seconds');
  assert.equal(bucket.type, 'histogram');
  assert.equal(bucket.value, sampleValue(after, 'dlock_hold_seconds_count', {}));
  assert.deepEqual(new Set(after.map((x) => x.type)), new Set(['counter', 'gauge', 'histogram']));
  // one family's samples together, in the text's order
  const families = after.map((x) => x.family).filter((f, i, a) => f !== a[i - 1]);
  assert.equal(families.length, new Set(families).size);
  assert.equal(client.metricsText().split('\n').filter((l) => l.startsWith('# TYPE')).length, families.length);
});

test('a client not connected yet has no metrics; a closed one reports its last counts', async () => {
  const c = new Client(URL);
  assert.throws(() => c.metricsText(), InvalidArgumentError);
  await c.ready();
  const lock = await c.acquire(unique('m'));
  assert.equal(sampleValue(c.metrics(), 'dlock_locks_held', {}), 1);
  await c.close();
  assert.equal(textValue(c.metricsText(), ACQUIRED), 1);
  assert.equal(textValue(c.metricsText(), 'dlock_locks_held'), 0);  // it holds nothing any more
  assert.equal(sampleValue(c.metrics(), 'dlock_acquires_total', { kind: 'exclusive', outcome: 'acquired' }), 1);
  assert.equal(lock.released, false);
  // never read before its close: nothing was kept
  const d = await Client.connect(URL);
  await d.close();
  assert.throws(() => d.metrics(), InvalidArgumentError);
});

test('prom-client: the registry writes dlock\'s families with their TYPE lines, each client under its labels', async () => {
  const prom = require('prom-client');
  const registry = new prom.Registry();
  new prom.Counter({ name: 'app_jobs_total', help: 'jobs', registers: [registry] }).inc();
  const other = await Client.connect(URL);
  try {
    const unregister = registerMetrics(client, registry, { labels: { client: 'main' } });
    // a second client must be told apart from the first
    assert.throws(() => registerMetrics(other, registry), /would write the same series/);
    assert.throws(() => registerMetrics(other, registry, { labels: { client: 'main' } }), /would write the same series/);
    assert.throws(() => registerMetrics(client, registry, { labels: { client: 'x' } }), /registered in this registry already/);
    assert.throws(() => registerMetrics(other, registry, { labels: { kind: 'x' } }), /dlock's own/);
    const unregisterOther = registerMetrics(other, registry, { labels: { client: 'other' } });

    const before = await registry.metrics();
    const lock = await client.acquire(unique('prom'));
    await lock.release();
    const text = await registry.metrics();
    assert.match(text, /^# TYPE app_jobs_total counter$/m);  // the app's own metrics stay
    for (const [family, type] of [['dlock_acquires_total', 'counter'], ['dlock_acquire_attempts_total', 'counter'],
      ['dlock_losses_total', 'counter'], ['dlock_locks_held', 'gauge'], ['dlock_acquires_waiting', 'gauge'],
      ['dlock_acquire_wait_seconds', 'histogram'], ['dlock_hold_seconds', 'histogram']]) {
      assert.equal(text.split('\n').filter((l) => l === `# TYPE ${family} ${type}`).length, 1, family);
    }
    const series = (c) => `dlock_acquires_total{client="${c}",kind="exclusive",outcome="acquired"}`;
    assert.equal(textValue(text, series('main')), textValue(before, series('main')) + 1);
    assert.equal(textValue(text, series('other')), 0);
    assert.ok(textValue(text, 'dlock_hold_seconds_bucket{client="main",le="+Inf"}') >= 1);
    assert.ok(textValue(text, 'dlock_hold_seconds_count{client="main"}') >= 1);
    const json = await registry.getMetricsAsJSON();  // as prom-client's own metrics
    assert.equal(json.find((m) => m.name === 'dlock_locks_held').type, 'gauge');

    unregisterOther();
    assert.doesNotMatch(await registry.metrics(), /client="other"/);
    unregister();
    const left = await registry.metrics();
    assert.doesNotMatch(left, /dlock_/);
    assert.match(left, /app_jobs_total 1/);
  } finally {
    await other.close();
  }
});

test('prom-client: an OpenMetrics registry names the counters as it names its own', async () => {
  const prom = require('prom-client');
  const registry = new prom.Registry(prom.Registry.OPENMETRICS_CONTENT_TYPE);
  const unregister = registerMetrics(client, registry);
  const text = await registry.metrics();
  assert.match(text, /^# TYPE dlock_acquires counter$/m);  // the family without _total, as OpenMetrics has it
  assert.match(text, /^dlock_acquires_total\{kind="exclusive",outcome="acquired"\} \d+$/m);
  assert.match(text, /^# TYPE dlock_hold_seconds histogram$/m);
  assert.match(text, /^dlock_hold_seconds_bucket\{le="\+Inf"\} \d+$/m);
  assert.match(text, /# EOF\n$/);
  unregister();
  assert.doesNotMatch(await registry.metrics(), /dlock_/);
});

test('prom-client: a name taken by another metric is refused, and nothing of dlock stays', async () => {
  const prom = require('prom-client');
  const registry = new prom.Registry();
  new prom.Gauge({ name: 'dlock_locks_held', help: 'mine', registers: [registry] });
  assert.throws(() => registerMetrics(client, registry), /dlock_locks_held/);
  assert.deepEqual(registry.getMetricsAsArray().map((m) => m.name), ['dlock_locks_held']);
  assert.throws(() => registerMetrics(client, {}), TypeError);
  assert.throws(() => registerMetrics({}, registry), TypeError);
});

test('lostCause: null while held, "deleted: ..." once the key is deleted; LockLostError.cause is the code', async () => {
  const name = unique('cause');
  const before = client.metricsText();
  const lock = await client.acquire(name, { leaseMs: 3000, heartbeatMs: 100 });
  assert.equal(lock.lostCause, null);
  let err = null;
  lock.once('lost', (l, e) => { err = e; });
  cli('DEL', key(name));
  assert.ok(await waitFor(() => err !== null, 3000), 'lost');
  assert.ok(err instanceof LockLostError);
  assert.equal(err.cause, 'deleted');  // the refused renewal looked again: nobody holds it
  assert.match(err.message, /no longer ha(s|d) this owner's lock, and nobody held it/);  // the human message is kept
  assert.match(lock.lostCause, /^deleted: ./);
  assert.equal(lock.signal.reason, err);
  const released = await lock.release().catch((e) => e);
  assert.ok(released instanceof LockLostError);
  assert.equal(released.cause, 'deleted');
  assert.match(lock.lostCause, /^deleted: /);  // still known after release
  // counted once, under its own cause: one series per cause
  const after = client.metricsText();
  for (const cause of ['deleted', 'taken_over', 'refused', 'expired']) {
    const series = `dlock_losses_total{cause="${cause}"}`;
    assert.equal(textValue(after, series), textValue(before, series) + (cause === 'deleted' ? 1 : 0), cause);
  }
});

test('lostCause: "expired: ..." once the local deadline passed', async () => {
  const lock = await client.acquire(unique('cause'), { leaseMs: 200, heartbeatMs: 0 });  // no renewals
  assert.equal(lock.lostCause, null);
  await sleep(300);
  assert.equal(lock.valid, false);
  assert.match(lock.lostCause, /^expired: ./);
  await lock.release().catch(() => {});
});

test('a call that finds the lock gone rejects with LockLostError, cause \'deleted\'', async () => {
  const name = unique('cause');
  const lock = await client.acquire(name, { leaseMs: 30000 });  // heartbeats far away
  cli('DEL', key(name));
  const e = await lock.extend(30000).catch((x) => x);
  assert.ok(e instanceof LockLostError, String(e));
  assert.equal(e.cause, 'deleted');
  assert.match(lock.lostCause, /^deleted: /);
  await lock.release().catch(() => {});

  const other = await client.acquire(name, { leaseMs: 30000 });
  cli('DEL', key(name));
  const r = await other.release().catch((x) => x);
  assert.ok(r instanceof LockLostError, String(r));
  assert.equal(r.cause, 'deleted');
  assert.match(other.lostCause, /^deleted: /);
  // a lock released normally was never lost
  const fine = await client.acquire(name);
  await fine.release();
  assert.equal(fine.lostCause, null);
  const again = await fine.release().catch((x) => x);
  assert.ok(again instanceof LockLostError);
  assert.equal(again.cause, undefined);  // already released: not a loss
});

test('deleted, then taken by another client: extend, setValue and release reject with cause \'taken_over\'', async () => {
  const name = unique('cause');
  const c = await Client.connect(URL);
  try {
    const before = client.metricsText();
    const lock = await client.acquire(name, { leaseMs: 30000 });  // heartbeats far away
    cli('DEL', key(name));
    const successor = await c.acquire(name, { leaseMs: 30000, waitMs: 0, owner: 'successor' });
    const e = await lock.extend(30000).catch((x) => x);
    assert.ok(e instanceof LockLostError, String(e));
    assert.equal(e.cause, 'taken_over');
    assert.match(e.message, /was lost: taken_over: another owner holds it now/);
    assert.match(lock.lostCause, /^taken_over: /);
    assert.ok(lock.lostCause.includes(`(fencing token ${successor.fencingToken}, label 'successor')`), lock.lostCause);
    const v = await lock.setValue('x').catch((x) => x);
    assert.ok(v instanceof LockLostError, String(v));
    assert.equal(v.cause, 'taken_over');
    const r = await lock.release().catch((x) => x);
    assert.ok(r instanceof LockLostError, String(r));
    assert.equal(r.cause, 'taken_over');
    assert.match(lock.lostCause, /^taken_over: /);  // still known after release
    const series = 'dlock_losses_total{cause="taken_over"}';
    assert.equal(textValue(client.metricsText(), series), textValue(before, series) + 1);
    assert.equal(successor.lostCause, null);  // held and valid
    await successor.release();
  } finally {
    await c.close();
  }
});

test('events: acquiring, acquired, released for one cycle, with the lock\'s fencing token', async () => {
  const c = await Client.connect(URL);
  try {
    const events = [];
    let inside = null;
    c.on('event', (e) => {
      events.push(e);
      if (e.type === 'acquired') inside = e;
    });
    const name = unique('ev');
    const lock = await c.acquire(name);
    assert.equal(inside?.fencingToken, lock.fencingToken);  // told before the acquire's caller resumed
    await lock.release();
    await waitFor(() => events.length >= 3, 2000);
    assert.deepEqual(events.map((e) => e.type), ['acquiring', 'acquired', 'released']);
    const [acquiring, acquired, released] = events;
    for (const e of events) {
      assert.deepEqual(Object.keys(e).sort(),
        ['attempts', 'cause', 'code', 'detail', 'elapsedMs', 'fencingToken', 'name', 'status', 'type']);
      assert.equal(e.name, name);
    }
    assert.equal(acquiring.fencingToken, null);
    assert.equal(acquired.fencingToken, lock.fencingToken);
    assert.equal(typeof acquired.fencingToken, 'bigint');
    assert.equal(acquired.attempts, 1);
    assert.equal(acquired.status, 0);
    assert.equal(acquired.code, null);
    assert.ok(acquired.elapsedMs >= 0);
    assert.equal(released.fencingToken, lock.fencingToken);
    assert.equal(released.status, 0);
    assert.equal(released.detail, '');

    // not acquired, then lost with its cause
    events.length = 0;
    const held = await c.acquire(name, { leaseMs: 3000, heartbeatMs: 100 });
    await c.acquire(name, { waitMs: 0 }).catch(() => {});
    held.on('lost', () => {});
    cli('DEL', key(name));
    await waitFor(() => events.some((e) => e.type === 'lost'), 2000);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), ['acquiring', 'acquired', 'acquiring', 'not_acquired']);
    const notAcquired = events[3];
    assert.equal(notAcquired.code, 'ERR_DLOCK_NOT_ACQUIRED');
    const lostEvent = events.find((e) => e.type === 'lost');
    assert.equal(lostEvent.fencingToken, held.fencingToken);
    assert.equal(lostEvent.cause, 'deleted');
    assert.match(lostEvent.detail, /^deleted: /);
    await held.release().catch(() => {});
  } finally {
    await c.close();
  }
});

test('events: a listener may close the client', async () => {
  const c = await Client.connect(URL);
  let closing = null;
  c.on('event', (e) => {
    if (e.type === 'acquired' && closing === null) closing = c.close();
  });
  // The event may come before the acquire's own answer is delivered: the close then cancels
  // it (the hold, taken on the server, is released by the close). Either way, a clear outcome.
  const outcome = await c.acquire(unique('ev')).catch((e) => e);
  assert.ok(closing !== null);
  await closing;
  assert.equal(c.closed, true);
  if (outcome instanceof Error) {
    assert.equal(outcome.code, 'ERR_DLOCK_ECANCELLED');
  } else {
    assert.equal((await outcome.release().catch((e) => e)).code, 'ERR_DLOCK_NOT_HELD');
  }
});

test('events: a throwing listener is an uncaught exception, as in any emitter', async () => {
  const script = `
    const { Client } = require('libdlock');
    process.on('uncaughtException', (e) => { console.log('uncaught', e.message); process.exit(0); });
    (async () => {
      const c = await Client.connect(${JSON.stringify(URL)});
      c.on('event', (e) => { if (e.type === 'acquired') throw new Error('listener boom'); });
      await c.acquire(${JSON.stringify(unique('ev'))});
      setTimeout(() => {}, 5000);
    })();`;
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', script], { cwd: path.join(__dirname, '..'), timeout: 20000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout.trim())));
  });
  assert.equal(out, 'uncaught listener boom');
});

test('events: a one-try acquire, an extend and a release are told before their promises settle', async () => {
  // (On the koffi path these run on libuv's pool: their events are drained from the queue first.)
  const c = await Client.connect(URL);
  try {
    const events = [];
    c.on('event', (e) => events.push(e));
    const name = unique('ev');
    const lock = await c.acquire(name, { waitMs: 0 });
    assert.deepEqual(events.map((e) => e.type), ['acquiring', 'acquired']);
    assert.equal(events[1].fencingToken, lock.fencingToken);
    assert.equal(events[1].attempts, 1);
    await lock.extend(5000);
    await lock.release();
    assert.deepEqual(events.map((e) => e.type), ['acquiring', 'acquired', 'released']);
    assert.equal(events[2].fencingToken, lock.fencingToken);
    assert.equal(events[2].name, name);
  } finally {
    await c.close();
  }
});

test('events: a client that also observes an election hears both (one queue on the koffi path)', async () => {
  const c = await Client.connect(URL);
  try {
    const name = unique('ev-ob');
    const types = [];
    c.on('event', (e) => types.push(e.type));
    const observer = c.observe(name);
    const leader = await c.campaign(name, { value: 'v' });
    assert.ok(await waitFor(() => observer.leader?.term === leader.fencingToken, 5000), 'the observer never saw the leader');
    await leader.release();
    assert.ok(await waitFor(() => observer.leader === null, 5000), 'the observer never saw the release');
    await waitFor(() => types.length >= 3, 2000);
    assert.deepEqual(types, ['acquiring', 'acquired', 'released']);
    observer.cancel();
  } finally {
    await c.close();
  }
});

test('events: an acquire that close() cancels is told as not_acquired, ECANCELLED', async () => {
  const name = unique('ev');
  const held = await client.acquire(name);
  const c = await Client.connect(URL);
  const events = [];
  c.on('event', (e) => events.push(e));
  const waiting = c.acquire(name).catch((e) => e);
  assert.ok(await waitFor(() => events.length >= 1, 2000), 'no acquiring event');
  await c.close();
  assert.equal((await waiting).code, 'ERR_DLOCK_ECANCELLED');
  await waitFor(() => events.length >= 2, 2000);
  assert.deepEqual(events.map((e) => e.type), ['acquiring', 'not_acquired']);
  assert.equal(events[1].code, 'ERR_DLOCK_ECANCELLED');
  assert.equal(events[1].name, name);
  await held.release();
});

test('a client with no event listener sets no hook: nothing is copied per lock', async () => {
  const c = await Client.connect(URL);
  try {
    const lock = await c.acquire(unique('ev'));
    await lock.release();
    await sleep(20);
    // Listening later sees what happens from then on only.
    const events = [];
    c.on('event', (e) => events.push(e.type));
    const again = await c.acquire(unique('ev'));
    await again.release();
    await waitFor(() => events.length >= 3, 2000);
    assert.deepEqual(events, ['acquiring', 'acquired', 'released']);
  } finally {
    await c.close();
  }
});

test('the README\'s prom-client example runs (the README check has no prom-client)', async () => {
  const pkg = path.join(__dirname, '..');
  const readme = require('node:fs').readFileSync(path.join(pkg, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/^```javascript\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  const block = blocks.find((b) => b.includes('registerMetrics'));
  assert.ok(block, 'no javascript block with registerMetrics in README.md');
  const script = block.replaceAll('127.0.0.1:6379', new globalThis.URL(URL).host);
  const out = await new Promise((resolve, reject) => {
    // From the package's directory: 'libdlock' is the package itself, prom-client its devDependency.
    execFile(process.execPath, ['-e', script], { cwd: pkg, timeout: 30000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)));
  });
  assert.match(out, /^# TYPE dlock_hold_seconds histogram$/m);
  assert.match(out, /^dlock_acquires_total\{client="orders",kind="exclusive",outcome="acquired"\} 1$/m);
});
