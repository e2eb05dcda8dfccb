'use strict';
// OpenTelemetry spans (issue 36): DlockInstrumentation makes a 'dlock.acquire' span around each
// acquire, a child of the caller's active span, and a 'dlock.hold' span from the acquire to the
// release or the loss. @opentelemetry/api has no SDK: test/support/otel.js is a minimal one
// (a TracerProvider that keeps its spans, a context manager over AsyncLocalStorage).
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { api, TestContextManager, TestTracerProvider } = require('./support/otel');
const dlock = require('libdlock');
const { Client, DlockInstrumentation, LockLostError, NotAcquiredError } = dlock;
const { URL, PORT, cli, key, unique, waitFor } = require('./support/helpers');

const PKG = path.join(__dirname, '..');
const VERSION = require('../package.json').version;
const { INTERNAL } = api.SpanKind;
const { UNSET, ERROR } = api.SpanStatusCode;

// The process's global context manager (an SDK registers one) and TracerProvider: the one that
// an instrumentation without a provider of its own traces to.
api.context.setGlobalContextManager(new TestContextManager());
const globalProvider = new TestTracerProvider();
api.trace.setGlobalTracerProvider(globalProvider);

// The URL has a password: no span may show it (nor the address).
const SECRET = 's3cret-in-url';
const SECRET_URL = `redis://default:${SECRET}@127.0.0.1:${PORT}`;

let client;
test.before(async () => { client = await Client.connect(SECRET_URL); });
test.after(async () => { await client.close(); });

// Runs fn(provider, instrumentation) with an instrumentation tracing to a provider of its own.
async function traced(fn, config) {
  const provider = new TestTracerProvider();
  const inst = new DlockInstrumentation({ tracerProvider: provider, ...config });
  try {
    return await fn(provider, inst);
  } finally {
    inst.disable();
  }
}

function only(provider, name) {
  const found = provider.named(name);
  assert.equal(found.length, 1, `${found.length} ${name} spans: ${found.map((s) => JSON.stringify(s.attributes))}`);
  return found[0];
}

function exceptionOf(span) {
  const e = span.events.filter((x) => x.name === 'exception');
  assert.equal(e.length, 1, `${span.name}: ${e.length} exception events`);
  return e[0].attributes;
}

test('an acquire and a release: a dlock.acquire span, then a dlock.hold span ended by the release', async () => {
  await traced(async (provider) => {
    const name = unique('trace');
    const lock = await client.acquire(name, { waitMs: 2000, leaseMs: 5000 });
    const acquire = only(provider, 'dlock.acquire');
    assert.deepEqual(acquire.tracer, { name: 'libdlock', version: VERSION });
    assert.equal(acquire.kind, INTERNAL);
    assert.equal(acquire.parent, undefined);  // no span was active: a root
    assert.equal(acquire.ends, 1);
    assert.equal(acquire.status.code, UNSET);  // success: left UNSET, as the trace API asks of libraries
    assert.deepEqual(acquire.attributes, {
      'dlock.lock.name': name,
      'dlock.lock.kind': 'exclusive',
      'dlock.backend': 'redis',
      'dlock.operation': 'acquire',
      'dlock.acquire.wait_ms': 2000,
      'dlock.outcome': 'acquired',
      'dlock.acquire.attempts': 1,
      'dlock.lock.fencing_token': lock.fencingToken.toString(),
    });
    const hold = only(provider, 'dlock.hold');
    assert.equal(hold.kind, INTERNAL);
    assert.equal(hold.ended, false, 'the hold span ended before the release');
    assert.ok(hold.startedAt > acquire.endedAt, 'the hold starts when the acquire ends');
    // With no span of the caller's, the hold is the acquire span's child (one trace), and linked to it.
    assert.equal(hold.parent.spanId, acquire.context.spanId);
    assert.equal(hold.context.traceId, acquire.context.traceId);
    assert.deepEqual(hold.links.map((l) => l.context.spanId), [acquire.context.spanId]);

    await lock.release();
    assert.equal(hold.ends, 1);
    assert.equal(hold.status.code, UNSET);
    assert.deepEqual(hold.attributes, {
      'dlock.lock.name': name,
      'dlock.lock.kind': 'exclusive',
      'dlock.backend': 'redis',
      'dlock.lock.fencing_token': lock.fencingToken.toString(),
      'dlock.outcome': 'released',
    });
    await assert.rejects(lock.release(), LockLostError);  // released already: the span stays as it was
    assert.equal(hold.ends, 1);
    assert.equal(hold.attributes['dlock.outcome'], 'released');
    // Never the URL: no password, no address, in anything a span carries.
    const all = JSON.stringify(provider.spans.map((s) => [s.name, s.attributes, s.status, s.events]));
    assert.ok(!all.includes(SECRET), all);
    assert.ok(!all.includes('127.0.0.1') && !all.includes(`:${PORT}`), all);
    assert.equal(provider.spans.length, 2);
  });
});

test('a span active around acquire is the parent of dlock.acquire and of dlock.hold', async () => {
  await traced(async (provider) => {
    const tracer = provider.getTracer('app');
    const name = unique('trace');
    let job;
    const lock = await tracer.startActiveSpan('job', async (span) => {
      job = span;
      try {
        return await client.acquire(name);
      } finally {
        span.end();
      }
    });
    const acquire = only(provider, 'dlock.acquire');
    const hold = only(provider, 'dlock.hold');
    assert.equal(acquire.parent.spanId, job.context.spanId);
    assert.equal(acquire.context.traceId, job.context.traceId);
    assert.equal(hold.parent.spanId, job.context.spanId);  // a sibling of the acquire span...
    assert.equal(hold.context.traceId, job.context.traceId);
    assert.deepEqual(hold.links.map((l) => l.context.spanId), [acquire.context.spanId]);  // ...linked to it
    assert.equal(acquire.attributes['dlock.acquire.wait_ms'], -1);  // waits without limit
    await lock.release();
    assert.equal(hold.ends, 1);
  });
});

test('using(): its function runs with dlock.hold active, so the spans it starts are the hold\'s children', async () => {
  await traced(async (provider) => {
    const tracer = provider.getTracer('app');
    const name = unique('trace');
    let inner;
    let activeInside;
    await tracer.startActiveSpan('job', async (job) => {
      await client.using(name, { leaseMs: 5000 }, async () => {
        activeInside = api.trace.getActiveSpan();
        inner = tracer.startSpan('write');
        inner.end();
      });
      assert.equal(api.trace.getActiveSpan(), job, 'the caller\'s span is active again after using()');
      job.end();
    });
    const acquire = only(provider, 'dlock.acquire');
    const hold = only(provider, 'dlock.hold');
    const job = only(provider, 'job');
    assert.equal(acquire.parent.spanId, job.context.spanId);
    assert.equal(hold.parent.spanId, job.context.spanId);
    assert.equal(activeInside, hold);
    assert.equal(inner.parent.spanId, hold.context.spanId);
    assert.equal(hold.ends, 1);
    assert.equal(hold.attributes['dlock.outcome'], 'released');
    assert.ok(hold.endedAt > inner.endedAt);

    // A Mutex's runExclusive: the same.
    let active;
    await client.mutex(unique('trace')).runExclusive(() => { active = api.trace.getActiveSpan(); });
    const holds = provider.named('dlock.hold');
    assert.equal(holds.length, 2);
    assert.equal(active, holds[1]);
    assert.equal(holds[1].ends, 1);
  });
});

test('a wait that runs out: the dlock.acquire span ends with ERROR, the error\'s message and its code; no hold span', async () => {
  const other = await Client.connect(URL);
  try {
    await traced(async (provider) => {
      const name = unique('trace');
      const holder = await other.acquire(name, { leaseMs: 10000 });
      const err = await client.acquire(name, { waitMs: 100 }).catch((e) => e);
      assert.ok(err instanceof NotAcquiredError, String(err));
      const spans = provider.named('dlock.acquire');
      assert.equal(spans.length, 2);
      const failed = spans[1];
      assert.equal(failed.ends, 1);
      assert.equal(failed.status.code, ERROR);
      assert.equal(failed.status.message, err.message);
      assert.equal(failed.attributes['dlock.outcome'], 'not_acquired');
      assert.equal(failed.attributes['error.type'], 'ERR_DLOCK_NOT_ACQUIRED');
      assert.equal(failed.attributes['dlock.acquire.wait_ms'], 100);
      assert.equal(failed.attributes['dlock.lock.fencing_token'], undefined);
      assert.equal(exceptionOf(failed)['exception.message'], err.message);
      assert.equal(provider.named('dlock.hold').length, 1);  // the holder's only
      await holder.release();

      // An aborted wait: outcome 'cancelled'.
      const again = await other.acquire(name, { leaseMs: 10000 });
      const ac = new AbortController();
      const waiting = client.acquire(name, { signal: ac.signal }).catch((e) => e);
      setTimeout(() => ac.abort(), 50);
      const cancelled = await waiting;
      assert.equal(cancelled.code, 'ERR_DLOCK_ECANCELLED');
      const last = provider.named('dlock.acquire').at(-1);
      assert.equal(last.status.code, ERROR);
      assert.equal(last.attributes['dlock.outcome'], 'cancelled');
      await again.release();
    });
  } finally {
    await other.close();
  }
});

test('a deleted key: the dlock.hold span ends with ERROR and cause \'deleted\' when the loss is found', async () => {
  await traced(async (provider) => {
    const name = unique('trace');
    const lock = await client.acquire(name, { leaseMs: 3000, heartbeatMs: 100 });
    let lostErr = null;
    lock.once('lost', (l, e) => { lostErr = e; });
    const hold = only(provider, 'dlock.hold');
    cli('DEL', key(name));
    assert.ok(await waitFor(() => lostErr !== null, 3000), 'lost');
    assert.equal(hold.ends, 1);
    assert.equal(hold.status.code, ERROR);
    assert.equal(hold.status.message, lostErr.message);
    assert.equal(hold.attributes['dlock.outcome'], 'lost');
    assert.equal(hold.attributes['dlock.lost_cause'], 'deleted');
    assert.equal(hold.attributes['error.type'], 'ERR_DLOCK_NOT_HELD');
    assert.equal(exceptionOf(hold)['exception.message'], lostErr.message);
    // The release then rejects; the span ended once.
    await assert.rejects(lock.release(), LockLostError);
    assert.equal(hold.ends, 1);

    // Found by the release itself (no heartbeat ran yet): the same.
    const other = unique('trace');
    const quiet = await client.acquire(other, { leaseMs: 30000 });
    const quietHold = provider.named('dlock.hold').at(-1);
    cli('DEL', key(other));
    const err = await quiet.release().catch((e) => e);
    assert.ok(err instanceof LockLostError, String(err));
    assert.equal(quietHold.ends, 1);
    assert.equal(quietHold.status.code, ERROR);
    assert.equal(quietHold.attributes['dlock.outcome'], 'lost');
    assert.equal(quietHold.attributes['dlock.lost_cause'], 'deleted');
  });
});

test('tracing off: no span is started (disabled, or never enabled); holds traced before still end', async () => {
  const provider = new TestTracerProvider();
  const inst = new DlockInstrumentation({ enabled: false, tracerProvider: provider });
  assert.equal(inst.isEnabled(), false);
  await (await client.acquire(unique('trace'))).release();
  await client.using(unique('trace'), () => {});
  assert.equal(provider.spans.length, 0);
  assert.equal(globalProvider.spans.length, 0);

  inst.enable();
  const lock = await client.acquire(unique('trace'));
  assert.equal(provider.spans.length, 2);
  inst.disable();
  await (await client.acquire(unique('trace'))).release();
  assert.equal(provider.spans.length, 2, 'a span was started while disabled');
  await lock.release();  // acquired while enabled: its hold span ends
  assert.equal(provider.named('dlock.hold')[0].ends, 1);
  assert.equal(globalProvider.spans.length, 0);
});

test('without a provider of its own it traces to the global one; the shape registerInstrumentations takes', async () => {
  const inst = new DlockInstrumentation();
  try {
    assert.equal(inst.instrumentationName, 'libdlock');
    assert.equal(inst.instrumentationVersion, VERSION);
    assert.deepEqual(inst.getConfig(), { enabled: true, requireParentSpan: false });
    await (await client.acquire(unique('trace'))).release();
    assert.deepEqual(globalProvider.spans.map((s) => [s.name, s.ends]), [['dlock.acquire', 1], ['dlock.hold', 1]]);
  } finally {
    inst.disable();
    globalProvider.spans.length = 0;
  }

  // What @opentelemetry/instrumentation's enableInstrumentations does with one that was made
  // disabled: setTracerProvider, setMeterProvider, then enable() since getConfig().enabled is false.
  const provider = new TestTracerProvider();
  const later = new DlockInstrumentation({ enabled: false });
  try {
    later.setTracerProvider(provider);
    later.setMeterProvider({});
    later.setLoggerProvider({});
    if (!later.getConfig().enabled) later.enable();
    assert.equal(later.isEnabled(), true);
    await (await client.acquire(unique('trace'))).release();
    assert.equal(provider.spans.length, 2);
    assert.equal(globalProvider.spans.length, 0);
    // and disableInstrumentations:
    later.disable();
    await (await client.acquire(unique('trace'))).release();
    assert.equal(provider.spans.length, 2);
  } finally {
    later.disable();
  }
  assert.throws(() => new DlockInstrumentation({ enabled: 'yes' }), TypeError);
  assert.throws(() => new DlockInstrumentation({ tracerProvider: {} }), TypeError);
});

test('campaign, shared locks and semaphores: their operation and kind', async () => {
  await traced(async (provider) => {
    const election = unique('trace');
    const leading = await client.campaign(election, { value: 'me' });
    const shared = await client.acquire(unique('trace'), { shared: true });
    const permit = await client.acquire(unique('trace'), { permits: 3, waitMs: 0 });
    const byte = await client.acquire(Buffer.from(`${unique('trace')}-bytes`));
    const spans = provider.named('dlock.acquire');
    assert.deepEqual(spans.map((s) => [s.attributes['dlock.operation'], s.attributes['dlock.lock.kind'],
      s.attributes['dlock.lock.permits'], s.attributes['dlock.acquire.wait_ms']]), [
      ['campaign', 'exclusive', undefined, -1],
      ['acquire', 'shared', undefined, -1],
      ['acquire', 'semaphore', 3, 0],
      ['acquire', 'exclusive', undefined, -1],
    ]);
    assert.equal(spans[0].attributes['dlock.lock.name'], election);
    assert.equal(spans[3].attributes['dlock.lock.name'], byte.name.toString());  // bytes read as UTF-8
    for (const l of [leading, shared, permit, byte]) await l.release();
    assert.deepEqual(provider.named('dlock.hold').map((s) => s.attributes['dlock.outcome']),
      ['released', 'released', 'released', 'released']);
  });
});

test('close() ends the hold spans of the locks it released: outcome \'closed\'', async () => {
  await traced(async (provider) => {
    const c = await Client.connect(URL);
    const lock = await c.acquire(unique('trace'));
    const hold = only(provider, 'dlock.hold');
    await c.close();
    assert.equal(hold.ends, 1);
    assert.equal(hold.status.code, UNSET);
    assert.equal(hold.attributes['dlock.outcome'], 'closed');
    await assert.rejects(lock.release(), LockLostError);
    assert.equal(hold.ends, 1);
    assert.equal(hold.attributes['dlock.outcome'], 'closed');
  });
});

test('requireParentSpan: no spans for an acquire made outside any span', async () => {
  await traced(async (provider) => {
    await (await client.acquire(unique('trace'))).release();
    assert.equal(provider.spans.length, 0);
    await provider.getTracer('app').startActiveSpan('job', async (job) => {
      await (await client.acquire(unique('trace'))).release();
      job.end();
    });
    assert.deepEqual(provider.spans.map((s) => s.name), ['job', 'dlock.acquire', 'dlock.hold']);
  }, { requireParentSpan: true });
});

test('a tracer that throws costs no lock: the calls go on as if untraced', async () => {
  const startThrows = { getTracer: () => ({ startSpan() { throw new Error('startSpan broke'); } }) };
  const endThrows = new TestTracerProvider();
  const real = endThrows.getTracer.bind(endThrows);
  endThrows.getTracer = (...a) => {
    const t = real(...a);
    const start = t.startSpan.bind(t);
    t.startSpan = (...b) => Object.assign(start(...b), { end() { throw new Error('end broke'); } });
    return t;
  };
  for (const provider of [startThrows, endThrows]) {
    const inst = new DlockInstrumentation({ tracerProvider: provider });
    try {
      const lock = await client.acquire(unique('trace'));
      assert.equal(lock.valid, true);
      await lock.release();
      await client.using(unique('trace'), () => {});
      const err = await client.acquire(unique('trace'), { waitMs: 0, permits: 0, leaseMs: -1 }).catch((e) => e);
      assert.equal(err.code, 'ERR_OUT_OF_RANGE');  // refused before any span
    } finally {
      inst.disable();
    }
  }
  // The acquire spans were started; their end() threw, so no hold span followed.
  assert.deepEqual(endThrows.spans.map((x) => x.name), ['dlock.acquire', 'dlock.acquire']);
});

function node(args, options = {}) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { cwd: PKG, timeout: 30000, ...options },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stdout}${stderr}`)) : resolve({ stdout, stderr })));
  });
}

test('@opentelemetry/api is never loaded while no instrumentation is enabled', async () => {
  const script = `
    const { Client, DlockInstrumentation } = require('libdlock');
    const loaded = () => Object.keys(require.cache).filter((k) => k.includes('@opentelemetry'));
    (async () => {
      const c = await Client.connect(${JSON.stringify(URL)});
      await (await c.acquire('lazy-${process.pid}')).release();
      await c.using('lazy-${process.pid}', () => {});
      new DlockInstrumentation({ enabled: false });
      const before = loaded().length;
      await c.close();
      new DlockInstrumentation().disable();
      console.log(JSON.stringify({ before, after: loaded().length > 0 }));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const { stdout } = await node(['-e', script]);
  assert.deepEqual(JSON.parse(stdout), { before: 0, after: true });
});

test('without @opentelemetry/api: enabling warns once and makes no spans; locks work as before', async () => {
  const dir = fs.mkdtempSync(path.join(process.env.DLOCK_TEST_WORK || os.tmpdir(), 'no-otel-'));
  try {
    // The API cannot be resolved (as in an application without it).
    const hide = path.join(dir, 'hide-otel.js');
    fs.writeFileSync(hide, `
      const Module = require('node:module');
      const resolve = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request.startsWith('@opentelemetry/')) {
          const e = new Error(\`Cannot find module '\${request}'\`);
          e.code = 'MODULE_NOT_FOUND';
          throw e;
        }
        return resolve.call(this, request, ...rest);
      };`);
    const script = `
      const { Client, DlockInstrumentation } = require('libdlock');
      const warnings = [];
      process.on('warning', (w) => warnings.push(w.code));
      (async () => {
        const a = new DlockInstrumentation();
        const b = new DlockInstrumentation({ requireParentSpan: true });
        const c = await Client.connect(${JSON.stringify(URL)});
        const lock = await c.acquire('no-otel-${process.pid}');
        await lock.release();
        await c.close();
        await new Promise((r) => setImmediate(r));
        console.log(JSON.stringify({ enabled: [a.isEnabled(), b.isEnabled()], warnings }));
      })().catch((e) => { console.error(e); process.exit(1); });`;
    const { stdout } = await node(['--require', hide, '-e', script]);
    assert.deepEqual(JSON.parse(stdout), { enabled: [false, false], warnings: ['DLOCK_NO_OPENTELEMETRY_API'] });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the README\'s OpenTelemetry example runs as printed, under an SDK (the README check has no @opentelemetry/api)', async () => {
  const readme = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/^```javascript\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  const block = blocks.find((b) => b.includes('new DlockInstrumentation()') && b.includes('startActiveSpan'));
  assert.ok(block, 'no javascript block with DlockInstrumentation in README.md');
  const script = block.replaceAll('127.0.0.1:6379', new globalThis.URL(URL).host);
  // From the package's directory: 'libdlock' is the package itself, @opentelemetry/api its devDependency.
  const { stdout } = await node(['--require', path.join(__dirname, 'support', 'otel-print.js'), '-e', script]);
  const spans = stdout.split('\n').filter((l) => l.startsWith('span ')).map((l) => JSON.parse(l.slice(5)));
  const by = Object.fromEntries(spans.map((s) => [s.name, s]));
  assert.deepEqual(spans.map((s) => s.name).sort(), ['dlock.acquire', 'dlock.hold', 'nightly report', 'write report'], stdout);
  assert.equal(by['nightly report'].parent, null);
  assert.equal(by['dlock.acquire'].parent, 'nightly report');
  assert.equal(by['dlock.hold'].parent, 'nightly report');
  assert.deepEqual(by['dlock.hold'].links, ['dlock.acquire']);
  assert.equal(by['write report'].parent, 'dlock.hold');
  for (const s of spans) assert.equal(s.ended, 1, s.name);
  assert.equal(by['dlock.acquire'].attributes['dlock.lock.name'], 'reports/nightly');
  assert.equal(by['dlock.hold'].attributes['dlock.outcome'], 'released');
  assert.match(stdout, /^fencing token \d+$/m);
});
