'use strict';
// Values stored with a hold and leader election (issue 35): value, lock.setValue(), inspect's
// values, client.campaign(), client.leader() and client.observe() (events and async
// iteration), on whichever path this run takes. Nothing here waits a fixed time for an order:
// each step waits for the report or the outcome it needs.
const test = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const { spawn } = require('node:child_process');
const path = require('node:path');

const dlock = require('libdlock');
const { Client, Observer, Lock, LockLostError, InvalidArgumentError, CancelledError, MAX_VALUE_BYTES } = dlock;
const { URL, cli, key, unique } = require('./support/helpers');

let a;
let b;
let c;
test.before(async () => { [a, b, c] = await Promise.all([URL, URL, URL].map((u) => Client.connect(u))); });
test.after(async () => { await Promise.all([a, b, c].map((x) => x.close())); });

const T = { timeout: 20000 };  // a step that never comes fails the test instead of hanging the suite

// Pulls reports from an observer's iterator until pred(report) holds, checking on the way what
// an observer promises: a report is null (nobody leads) or a leader, terms never decrease, and a
// term once ended is never reported again.
function reports(observer) {
  const it = observer[Symbol.asyncIterator]();
  const seen = [];
  let last;  // the previous report
  let lastTerm = 0n;
  return {
    seen,
    it,
    async until(pred, what) {
      for (;;) {
        const r = await it.next();
        assert.equal(r.done, false, `the observer ended before ${what} (saw ${seen.length} reports)`);
        const leader = r.value;
        seen.push(leader);
        if (leader !== null) {
          assert.ok(leader.term >= lastTerm, `term ${leader.term} after ${lastTerm}`);
          if (last === null && lastTerm > 0n) assert.ok(leader.term > lastTerm, `ended term ${lastTerm} again`);
          lastTerm = leader.term;
        }
        last = leader;
        if (pred(leader)) return leader;
      }
    },
  };
}
const leads = (lock, value) => (l) => l !== null && l.term === lock.fencingToken &&
  (value === undefined || (l.value !== null && l.value.equals(Buffer.from(value))));

// ----- values ---------------------------------------------------------------------------------

test('values: a string as UTF-8, bytes with NUL as they are, none as null', async () => {
  const text = unique('value');
  const bytes = unique('value');
  const none = unique('value');
  const l1 = await a.acquire(text, { value: 'héllo, wörld', owner: 'w1' });
  const raw = Buffer.from([0, 1, 0, 0xff, 0x80, 0]);
  const l2 = await a.acquire(bytes, { value: new Uint8Array(raw) });  // a plain Uint8Array too
  const l3 = await a.acquire(none, { value: null });
  try {
    const [h1] = (await b.inspect(text)).holders;
    assert.ok(Buffer.isBuffer(h1.value));
    assert.equal(h1.value.toString(), 'héllo, wörld');
    assert.deepEqual(h1, { owner: 'w1', remainingMs: h1.remainingMs, fencingToken: l1.fencingToken,
      value: Buffer.from('héllo, wörld') });
    const [h2] = (await b.inspect(bytes)).holders;
    assert.deepEqual(h2.value, raw);
    assert.equal(h2.value.length, 6);  // the NULs, the trailing one included
    assert.equal((await b.inspect(none)).holders[0].value, null);
    // replaced, then removed (null and empty both remove it)
    await l2.setValue(Buffer.from('\0second\0'));
    assert.deepEqual((await b.inspect(bytes)).holders[0].value, Buffer.from('\0second\0'));
    await l2.setValue(null);
    assert.equal((await b.inspect(bytes)).holders[0].value, null);
    await l3.setValue('now one');
    assert.equal((await b.inspect(none)).holders[0].value.toString(), 'now one');
    await l3.setValue('');
    assert.equal((await b.inspect(none)).holders[0].value, null);
    // the callback form
    await new Promise((resolve, reject) => l1.setValue('cb', (err) => (err ? reject(err) : resolve())));
    assert.equal((await b.leader(text)).value.toString(), 'cb');
  } finally {
    for (const l of [l1, l2, l3]) await l.release();
  }
  // it went with its hold
  assert.deepEqual((await b.inspect(text)).holders, []);
  assert.equal(cli('EXISTS', `${key(text)}:value`), '0');
});

test('values: MAX_VALUE_BYTES (4096) is the library\'s limit, named in an InvalidArgumentError', async () => {
  assert.equal(MAX_VALUE_BYTES, 4096);
  const name = unique('big');
  const full = Buffer.alloc(MAX_VALUE_BYTES, 0x61);
  const lock = await a.acquire(name, { value: full });
  try {
    assert.deepEqual((await b.inspect(name)).holders[0].value, full);
    const e = await lock.setValue(Buffer.alloc(MAX_VALUE_BYTES + 1)).catch((x) => x);
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.equal(e.code, 'ERR_DLOCK_EINVAL');
    assert.match(e.message, /4097 bytes, longer than 4096/);
    assert.deepEqual((await b.inspect(name)).holders[0].value, full);  // nothing written
    // a string counts its UTF-8 bytes: 2049 two-byte characters are 4098 bytes
    await assert.rejects(lock.setValue('é'.repeat(2049)), { name: 'InvalidArgumentError', message: /4098 bytes, longer than 4096/ });
  } finally {
    await lock.release();
  }
  const other = unique('big');
  for (const acquire of [() => a.acquire(other, { value: 'x'.repeat(MAX_VALUE_BYTES + 1) }),
    () => a.campaign(other, { value: 'x'.repeat(MAX_VALUE_BYTES + 1) })]) {
    const e = await acquire().catch((x) => x);
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.match(e.message, /4097 bytes, longer than 4096/);
  }
  assert.deepEqual((await b.inspect(other)).holders, []);  // nothing taken
});

test('values: wrong types are TypeErrors, before anything is sent', async () => {
  const name = unique('types');
  for (const value of [5, {}, [1, 2], true, new Uint16Array(2)]) {
    await assert.rejects(a.acquire(name, { value }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  assert.throws(() => a.acquire(name, { value: 5 }, () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  const lock = await a.acquire(name);
  try {
    await assert.rejects(lock.setValue(42), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    await assert.rejects(lock.setValue(), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    assert.throws(() => lock.setValue(42, () => {}), { code: 'ERR_INVALID_ARG_TYPE' });
  } finally {
    await lock.release();
  }
  assert.deepEqual((await b.inspect(name)).holders, []);
});

test('setValue: a deposed holder gets LockLostError and writes nothing; a released lock too', async () => {
  const name = unique('deposed');
  const first = await a.acquire(name, { value: 'first', leaseMs: 30000 });
  const lost = [];
  first.on('lost', (l, err) => lost.push(err));  // a heartbeat may find it first: heard, not warned
  cli('DEL', key(name), `${key(name)}:value`);   // deposed behind its back ...
  const second = await b.acquire(name, { value: 'second', waitMs: 0 });  // ... and taken over
  try {
    const e = await first.setValue('stale write').catch((x) => x);
    assert.ok(e instanceof LockLostError, String(e));
    assert.equal(e.code, 'ERR_DLOCK_NOT_HELD');
    assert.match(e.message, new RegExp(name));
    assert.equal(first.valid, false);
    const [h] = (await c.inspect(name)).holders;
    assert.equal(h.fencingToken, second.fencingToken);
    assert.equal(h.value.toString(), 'second');  // the deposed holder wrote nothing
    for (const err of lost) assert.ok(err instanceof LockLostError);
  } finally {
    await second.release();
    await first.release().catch(() => {});
  }
  await assert.rejects(second.setValue('after'), { name: 'LockLostError', message: /already released/ });
});

// ----- campaign and leader --------------------------------------------------------------------

test('campaign: leads at once on a free name; the next candidate leads when the leader resigns', T, async () => {
  const name = unique('elect');
  assert.equal(await c.leader(name), null);
  const one = await a.campaign(name, { value: '10.0.0.7:8080', owner: 'node-1' });
  assert.ok(one instanceof Lock);
  let l = await c.leader(name);
  assert.deepEqual(Object.keys(l).sort(), ['owner', 'remainingMs', 'term', 'value']);
  assert.equal(l.owner, 'node-1');
  assert.equal(l.value.toString(), '10.0.0.7:8080');
  assert.equal(l.term, one.fencingToken);
  assert.equal(typeof l.term, 'bigint');
  assert.ok(l.remainingMs > 0 && l.remainingMs <= 10000, String(l.remainingMs));
  // a second candidate waits (no limit) while one leads
  let twoLed = false;
  const pending = b.campaign(name, { value: Buffer.from('10.0.0.8:8080'), owner: 'node-2' }).then((lock) => {
    twoLed = true;
    return lock;
  });
  await one.setValue('10.0.0.7:9090');  // proclaim
  l = await c.leader(name);
  assert.equal(l.value.toString(), '10.0.0.7:9090');
  assert.equal(l.term, one.fencingToken);  // a new value is no new term
  assert.equal(twoLed, false);
  await one.release();  // resign: the waiting candidate is handed the leadership
  const two = await pending;
  assert.ok(two.fencingToken > one.fencingToken, `${two.fencingToken} > ${one.fencingToken}`);
  l = await c.leader(name);
  assert.deepEqual([l.owner, l.value.toString(), l.term], ['node-2', '10.0.0.8:8080', two.fencingToken]);
  // the callback forms
  const viaCb = await new Promise((resolve, reject) => c.leader(name, (err, x) => (err ? reject(err) : resolve(x))));
  assert.equal(viaCb.term, two.fencingToken);
  await two.release();
  assert.equal(await c.leader(name), null);
  const three = await new Promise((resolve, reject) => {
    a.campaign(name, { value: 'cb' }, (err, lock) => (err ? reject(err) : resolve(lock)));
  });
  assert.ok(three.fencingToken > two.fencingToken);
  await three.release();
});

test('campaign: a signal withdraws the candidacy; options that make no election are TypeErrors', T, async () => {
  const name = unique('withdraw');
  const leader = await a.campaign(name);
  try {
    const ac = new AbortController();
    const pending = b.campaign(name, { value: 'never', signal: ac.signal });
    ac.abort(new Error('shutting down'));
    const e = await pending.catch((x) => x);
    assert.ok(e instanceof CancelledError, String(e));
    assert.match(e.message, /^campaign of lock/);
    assert.equal(e.cause.message, 'shutting down');
    await assert.rejects(b.campaign(name, { signal: AbortSignal.abort() }), CancelledError);
    assert.equal((await c.leader(name)).term, leader.fencingToken);
  } finally {
    await leader.release();
  }
  assert.equal(await c.leader(name), null);  // the withdrawn candidate took nothing
  for (const opt of ['waitMs', 'kind', 'shared', 'permits', 'take']) {
    const options = { waitMs: 5, kind: 'shared', shared: true, permits: 2, take: 2 };
    await assert.rejects(a.campaign(name, { [opt]: options[opt] }), {
      name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: new RegExp(`campaign takes no option '${opt}'`),
    });
  }
  await assert.rejects(a.campaign(name, { timeout: 5 }), { name: 'TypeError', message: /unknown option 'timeout'/ });
  await assert.rejects(a.campaign(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('leader: EINVAL for a name held shared or as a semaphore, in the library\'s words', async () => {
  const shared = unique('shared');
  const sem = unique('sem');
  const s1 = await a.acquire(shared, { shared: true });
  const p1 = await a.acquire(sem, { permits: 2 });
  try {
    await assert.rejects(b.leader(shared), { name: 'InvalidArgumentError', message: `'${shared}' is held shared, not an election` });
    await assert.rejects(b.leader(sem), { name: 'InvalidArgumentError', message: `'${sem}' is a semaphore, not an election` });
  } finally {
    await s1.release();
    await p1.release();
  }
  assert.equal(await b.leader(shared), null);  // free again: nobody leads
  await assert.rejects(b.leader(''), { name: 'InvalidArgumentError', message: /^leader of lock '': lock name is empty/ });
  await assert.rejects(b.leader(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  const closed = await Client.connect(URL);
  await closed.close();
  await assert.rejects(closed.leader('x'), { code: 'ERR_DLOCK_EINVAL', message: /closed/ });
});

// ----- observe ----------------------------------------------------------------------------------

test('observe: the state as it stands first, then each change, terms never decreasing', T, async () => {
  const name = unique('observe');
  const observer = c.observe(name);
  assert.ok(observer instanceof Observer);
  assert.equal(observer.leader, undefined);  // nothing read yet
  const r = reports(observer);
  assert.equal(await r.until(() => true, 'the first report'), null);  // nobody leads yet
  assert.equal(observer.leader, null);

  const one = await a.campaign(name, { value: 'one', owner: 'a' });
  let l = await r.until(leads(one, 'one'), 'the first leader');
  assert.equal(l.owner, 'a');
  await one.setValue(Buffer.from([0, 0x6f, 0]));  // a new value: the same term, reported
  l = await r.until(leads(one, Buffer.from([0, 0x6f, 0])), 'the new value');
  assert.equal(l.term, one.fencingToken);
  assert.equal(observer.leader, l);

  const pending = b.campaign(name, { value: 'two', owner: 'b' });
  await one.release();
  const two = await pending;
  await r.until(leads(two, 'two'), 'the next leader');
  await two.release();
  await r.until((x) => x === null, 'nobody leading');
  // Every report was a state that was: nobody, one (two values), two, nobody. The hand-over may
  // show b holding under the token the release handed it, which b's own retry, when it came
  // before the grant was heard, replaced with a greater one (two.attempts > 1): b's, between.
  for (const x of r.seen) {
    assert.ok(x === null || (x.owner === 'a' && x.term === one.fencingToken) ||
      (x.owner === 'b' && x.value.toString() === 'two' && x.term > one.fencingToken && x.term <= two.fencingToken),
      `${x?.owner} ${x?.term} (one ${one.fencingToken}, two ${two.fencingToken})`);
  }
  observer.cancel();
  assert.deepEqual(await r.it.next(), { value: undefined, done: true });
  assert.equal(observer.closed, true);
});

test('observe: an observer of a name someone leads hears that leader first; events and iterations agree', T, async () => {
  const name = unique('observe');
  const lock = await a.campaign(name, { value: 'here' });
  const observer = b.observe(name);
  try {
    const [first] = await once(observer, 'change');
    assert.ok(leads(lock, 'here')(first));
    // an iteration begun after a report starts with the latest one
    const it = observer[Symbol.asyncIterator]();
    assert.deepEqual(await it.next(), { value: first, done: false });
    const changed = once(observer, 'change');
    await lock.setValue('moved');
    const [[byEvent], byIteration] = await Promise.all([changed, it.next()]);
    assert.ok(leads(lock, 'moved')(byEvent));
    assert.equal(byIteration.value, byEvent);  // the same report, the same object
  } finally {
    observer.cancel();
    await lock.release();
  }
});

test('observe: cancel() stops the reports, ends iterations and holds the process no more', T, async () => {
  const { activeCount, observers } = dlock._internals;
  const before = [activeCount(), observers.size];
  const name = unique('cancel');
  const observer = a.observe(name);
  assert.deepEqual([activeCount(), observers.size], [before[0] + 1, before[1] + 1]);  // holds the process
  const it = observer[Symbol.asyncIterator]();
  assert.equal((await it.next()).value, null);
  const waiting = it.next();  // waits for a change that will never be told
  const closed = once(observer, 'close');
  let changes = 0;
  observer.on('change', () => changes++);
  observer.cancel();
  observer.cancel();  // idempotent
  assert.deepEqual(await waiting, { value: undefined, done: true });
  await closed;
  assert.deepEqual([activeCount(), observers.size], before);
  const lock = await b.campaign(name);  // a change after cancel: not told
  assert.equal((await c.leader(name)).term, lock.fencingToken);
  await lock.release();
  assert.equal(changes, 0);
  // unref() and ref(): whether it holds the process, while it observes
  const other = a.observe(unique('unref'));
  assert.equal(activeCount(), before[0] + 1);
  assert.equal(other.unref(), other);
  assert.equal(activeCount(), before[0]);
  other.ref();
  assert.equal(activeCount(), before[0] + 1);
  other.unref();
  other.cancel();
  assert.equal(activeCount(), before[0]);
  // Symbol.dispose (`using`) cancels
  const disposed = a.observe(unique('dispose'));
  disposed[Symbol.dispose]();
  assert.equal(disposed.closed, true);
  assert.equal(activeCount(), before[0]);
});

test('observe: observers started and stopped by the hundred leave nothing behind', T, async () => {
  const { activeCount, observers, queuedObservers } = dlock._internals;
  const before = [activeCount(), observers.size, queuedObservers()];
  const name = unique('many');
  const lock = await b.campaign(name, { value: 'v' });
  try {
    for (let i = 0; i < 100; i++) {
      const observer = a.observe(name);
      const [leader] = await once(observer, 'change');  // reported, then stopped
      assert.equal(leader.term, lock.fencingToken);
      observer.cancel();
      a.observe(name).cancel();  // stopped before any report
    }
  } finally {
    await lock.release();
  }
  assert.deepEqual([activeCount(), observers.size, queuedObservers()], before);
});

test('observe: leaving a for await loop cancels the observer', T, async () => {
  const observer = a.observe(unique('break'));
  for await (const leader of observer) {
    assert.equal(leader, null);
    break;
  }
  assert.equal(observer.closed, true);
});

test('observe: an aborted signal rejects the iteration with CancelledError, its reason the cause', T, async () => {
  const ac = new AbortController();
  const observer = a.observe(unique('abort'), { signal: ac.signal });
  const got = [];
  const e = await (async () => {
    for await (const leader of observer) {
      got.push(leader);
      ac.abort(new Error('enough'));
    }
  })().catch((x) => x);
  assert.ok(e instanceof CancelledError, String(e));
  assert.equal(e.code, 'ERR_DLOCK_ECANCELLED');
  assert.equal(e.cause.message, 'enough');
  assert.deepEqual(got, [null]);
  assert.equal(observer.closed, true);
  // already aborted: ends at once, and an event user gets 'close', no 'error'
  const early = a.observe(unique('abort'), { signal: AbortSignal.abort() });
  assert.equal(early.closed, true);
  early.on('error', () => assert.fail('an abort is no error event'));
  await once(early, 'close');
  await assert.rejects(early[Symbol.asyncIterator]().next(), CancelledError);
});

test('observe: close() of the client ends its observers, pending iterations done', T, async () => {
  const client = await Client.connect(URL);
  const observer = client.observe(unique('close'));
  const it = observer[Symbol.asyncIterator]();
  assert.equal((await it.next()).value, null);
  const waiting = it.next();
  const closed = once(observer, 'close');
  const evented = client.observe(unique('close'));  // not even reported yet
  await client.close();
  assert.deepEqual(await waiting, { value: undefined, done: true });
  await closed;
  assert.equal(observer.closed, true);
  assert.equal(evented.closed, true);
  // observe on a closed client: the error every call on it gets, then 'close'
  const late = client.observe(unique('late'));
  assert.equal(late.closed, true);
  const lateClosed = new Promise((resolve) => late.on('close', resolve));
  const [lateErr] = await once(late, 'error');
  assert.ok(lateErr instanceof InvalidArgumentError, String(lateErr));
  assert.match(lateErr.message, /closed/);
  await lateClosed;
  // an observer on a client still connecting starts once it is connected
  const fresh = new Client(URL);
  const soon = fresh.observe(unique('fresh'));
  const [first] = await once(soon, 'change');
  assert.equal(first, null);
  await fresh.close();
  assert.equal(soon.closed, true);
});

test('observe: a name the library refuses ends it with the library\'s error', T, async () => {
  const long = 'n'.repeat(dlock.MAX_NAME_BYTES + 1);
  // iterated: the iteration rejects (no 'error' event needed)
  await assert.rejects(async () => {
    for await (const leader of a.observe(long)) assert.fail(`reported ${leader}`);
  }, { name: 'InvalidArgumentError', message: /^observe of lock 'n+\.\.\.': lock name is longer than 1024 bytes/ });
  // evented: an 'error' event, then 'close'
  const observer = a.observe('');
  const closed = new Promise((resolve) => observer.on('close', resolve));  // right after 'error'
  const [err] = await once(observer, 'error');
  assert.ok(err instanceof InvalidArgumentError, String(err));
  assert.match(err.message, /lock name is empty/);
  await closed;
  // argument types: thrown at once
  assert.throws(() => a.observe(5), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => a.observe('x', { signal: 5 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => a.observe('x', { every: 5 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
  assert.throws(() => new Observer(), TypeError);
  // a client that cannot connect: its reason
  const down = new Client('redis://127.0.0.1:1?connect_timeout_ms=300');
  const [e] = await once(down.observe('x'), 'error');
  assert.equal(e.code, 'ERR_DLOCK_EIO');
  await down.close();
});

// ----- the process ------------------------------------------------------------------------------

// Runs support/observe.js; resolves with { code, stdout, stderr } once it exited, or fails after
// 20 s (something kept it alive).
function runChild(mode, name) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'support', 'observe.js'), URL, mode, name],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child (${mode}) did not exit within 20 s: an observer kept it alive\n${stdout}${stderr}`));
    }, 20000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const ENDINGS = {
  cancel: /^first: term \d+\n$/,
  unref: /^first: term \d+\n$/,
  keep: /^first: term \d+\nkept alive\n$/,
  break: /^first: term \d+\nended, closed true\n$/,
  close: /^first: term \d+\nended, closed true\n$/,
  abort: /^first: term \d+\nended by CancelledError, closed true\n$/,
};
for (const [mode, expected] of Object.entries(ENDINGS)) {
  test(`observe: the process exits once its observer stopped (${mode})`, { timeout: 30000 }, async () => {
    const name = unique(`child-${mode}`);
    const lock = await a.campaign(name, { value: mode });
    try {
      const r = await runChild(mode, name);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, expected, r.stderr);
      assert.equal(r.stdout.split('\n')[0], `first: term ${lock.fencingToken}`);
    } finally {
      await lock.release();
    }
  });
}
