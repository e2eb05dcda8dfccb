// `await using` with libdlock, as a TypeScript user writes it: compiled by typescript.test.js
// against the package's own declarations (index.d.mts, through the exports map), then run.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import promClient from 'prom-client';
import { trace, type MeterProvider, type TracerProvider } from '@opentelemetry/api';
import dlock, {
  Client, Lock, LockLostError, NotAcquiredError, CancelledError, Mutex, Semaphore, Observer, codes, library, version,
  MAX_VALUE_BYTES, MAX_REASON_BYTES, MAX_LOCK_DELAY_MS, registerMetrics, type AcquireOptions, type BreakOptions, type RequestReleaseOptions, type LockInfo, type CampaignOptions, type HoldValue, type Leader, type Releaser,
  type DlockEvent, type LossCause, type MetricSample, DlockInstrumentation, type DlockInstrumentationConfig,
  type LockManyOptions, type LockNames,
} from 'libdlock';

// @opentelemetry/instrumentation's Instrumentation interface, which registerInstrumentations()
// and the NodeSDK take (that package is not here: its shape, as it declares it).
interface OtelInstrumentation {
  instrumentationName: string;
  instrumentationVersion: string;
  disable(): void;
  enable(): void;
  setTracerProvider(tracerProvider: TracerProvider): void;
  setMeterProvider(meterProvider: MeterProvider): void;
  setConfig(config: { enabled?: boolean }): void;
  getConfig(): { enabled?: boolean };
}

const url = process.env.REDIS_URL!;
const port = process.env.REDIS_PORT!;
const cli = (...args: string[]): string =>
  execFileSync('redis-cli', ['-p', port, ...args], { encoding: 'utf8' }).trim();
const name = `ts-${process.pid}`;
const holder = `dlock:{${name}}`;

let outer: Client;
{
  await using client = await Client.connect(url);
  outer = client;
  let token: bigint;
  {
    const options: AcquireOptions = { leaseMs: 5000, maxHoldMs: 60_000, minHoldMs: 0, lockDelayMs: 0n };
    await using lock = await client.acquire(name, options);
    token = lock.fencingToken;
    assert.equal(cli('EXISTS', holder), '1');
    const refused = await client.acquire(name, { waitMs: 0 }).catch((e: unknown) => e);
    assert.ok(refused instanceof NotAcquiredError, String(refused));
  }
  assert.equal(cli('EXISTS', holder), '0');  // released at the end of its block

  // lost inside the block: leaving it throws LockLostError
  const err = await (async () => {
    await using lock = await client.acquire(`${name}-lost`, { leaseMs: 5000, heartbeatMs: 100 });
    const lost = once(lock, 'lost');
    cli('DEL', `dlock:{${name}-lost}`);
    const keepAlive = setTimeout(() => {}, 10000);  // a held lock keeps no process alive
    await lost;
    clearTimeout(keepAlive);
  })().catch((e: unknown) => e);
  assert.ok(err instanceof LockLostError, String(err));
  const cause: LossCause | undefined = err.cause;
  assert.equal(cause, 'deleted');  // nobody held it when the refused renewal looked again
  const causes: LossCause[] = ['deleted', 'taken_over', 'refused', 'expired', 'max_hold', 'broken'];
  assert.ok(causes.includes(cause!));

  // an operator's takeover
  {
    const victim: Lock = await client.acquire(`${name}-broken`, { leaseMs: 5000, owner: 'ts' });
    const breakOptions: BreakOptions = { reason: 'typescript', now: true };
    const broke: LockInfo = await client.breakLock(`${name}-broken`, breakOptions);
    assert.equal(broke.holders[0]?.fencingToken, victim.fencingToken);
    const closedMs: number = broke.closedMs;
    const closedBy: string = broke.closedBy;
    assert.equal(closedMs, 0);
    assert.equal(closedBy, '');
    assert.equal(MAX_REASON_BYTES, 1024);
    assert.equal((await client.capabilities()).break, true);
    const caps = await client.capabilities();
    const jobRules: boolean = caps.minHold && caps.lockDelay;
    assert.equal(jobRules, true);
    assert.equal(MAX_LOCK_DELAY_MS, 60_000);
    const released = await victim.release().catch((e: unknown) => e);  // hears of the break
    assert.ok(released instanceof LockLostError, String(released));
    assert.equal(released.cause, 'broken');
  }

  // asking a holder to let go
  {
    const asked: Lock = await client.acquire(`${name}-asked`, {
      onReleaseRequested: (l: Lock, reason: string) => { void l; void reason; },  // heard, or not yet: ignored
    });
    asked.on('releaseRequested', (l: Lock, reason: string) => { void l; void reason; });
    const askOptions: RequestReleaseOptions = { reason: 'typescript' };
    const some: boolean = await client.requestRelease(`${name}-asked`, askOptions);
    assert.equal(some, true);
    assert.equal((await client.capabilities()).releaseRequest, true);
    await asked.release();
    assert.equal(await client.requestRelease(`${name}-asked`), false);
  }

  // metrics: text, samples, prom-client; events on the addon path
  const events: DlockEvent[] = [];
  if (library().native === 'addon') client.on('event', (e: DlockEvent) => { events.push(e); });
  const registry = new promClient.Registry();
  const unregister: () => void = registerMetrics(client, registry, { labels: { client: 'ts' } });
  {
    await using lock = await client.acquire(`${name}-metrics`);
    const why: string | null = lock.lostCause;
    assert.equal(why, null);
  }
  const samples: MetricSample[] = client.metrics();
  assert.ok(samples.some((s) => s.type === 'histogram' && s.labels.le === '+Inf'));
  assert.match(client.metricsText(), /^# TYPE dlock_acquires_total counter$/m);
  assert.match(await registry.metrics(), /^dlock_acquires_total\{client="ts",kind="exclusive",outcome="acquired"\} [1-9]/m);
  unregister();
  if (library().native === 'addon') {
    const keepAlive = setTimeout(() => {}, 10000);
    while (!events.some((e) => e.type === 'released')) await new Promise((r) => setTimeout(r, 10));
    clearTimeout(keepAlive);
    const acquired = events.find((e) => e.type === 'acquired')!;
    const t: bigint | null = acquired.fencingToken;
    assert.equal(typeof t, 'bigint');
  }

  const t: bigint = await client.using(name, async (lock: Lock, signal: AbortSignal) => {
    assert.equal(signal, lock.signal);
    return lock.fencingToken;
  });
  assert.ok(t > token);
  // several names, all or none: a tuple of names gives a tuple of Locks
  {
    const manyOptions: LockManyOptions = { waitMs: 0, leaseMs: 5000 };
    const [first, second]: [Lock, Lock] = await client.lockMany([`${name}-m1`, `${name}-m2`], manyOptions);
    assert.equal(second.name, `${name}-m2`);
    assert.ok(first.fencingToken > 0n && second.fencingToken > 0n);
    await Client.releaseMany([first, second]);
    const both: string = await client.using([`${name}-m1`, `${name}-m2`], async (locks, signal: AbortSignal) => {
      const [a, b]: [Lock, Lock] = locks;
      return `${String(a.name)},${String(b.name)},${signal.aborted}`;
    });
    assert.equal(both, `${name}-m1,${name}-m2,false`);
    const names: LockNames = [`${name}-m1`, Buffer.from(`${name}-m2`)];
    const some: Lock[] = await client.lockMany(names);
    await client.releaseMany(some);
  }

  const mutex: Mutex = client.mutex(name);
  const release: Releaser = await mutex.acquire();
  assert.ok(release.lock.fencingToken > t);
  await release();
  const semaphore: Semaphore = client.semaphore(`${name}-sem`, 2, { take: 2 });
  assert.equal(await semaphore.runExclusive(async (lock) => lock.name), `${name}-sem`);

  // leader election: campaign, proclaim, observe, resign
  const election = `${name}-elect`;
  {
    using observer: Observer = client.observe(election, { signal: AbortSignal.timeout(60000) });
    const seen: (Leader | null)[] = [];
    const value: HoldValue = 'host-a:8080';
    const options: CampaignOptions = { value, owner: 'a', reentrant: 'ts-campaign', leaseMs: 5000 };
    await using leadership = await client.campaign(election, options);
    for await (const leader of observer) {  // nobody (maybe), then this candidate
      seen.push(leader);
      if (leader !== null && leader.term === leadership.fencingToken) break;
    }
    await leadership.setValue(new Uint8Array([0, 1, 2]));
    const now: Leader | null = await client.leader(election);
    assert.ok(now !== null && now.value !== null && now.value.equals(Buffer.from([0, 1, 2])));
    const term: bigint = now.term;
    assert.equal(term, leadership.fencingToken);
    assert.ok(seen.length >= 1 && observer.closed);  // leaving the loop cancelled it
    const holder = (await client.inspect(election)).holders[0];
    assert.equal(holder.value?.length, 3);
  }
  assert.equal(await client.leader(election), null);  // resigned at the end of its block
  assert.equal(MAX_VALUE_BYTES, 4096);
  const lock = await client.acquire(`${name}-value`, { value: Buffer.from('v') });
  await lock.setValue(null);
  await lock.release();
}
assert.equal(outer.closed, true);  // closed at the end of its block
assert.equal(codes.NOT_HELD, 2);
assert.equal(typeof library().path, 'string');
assert.equal(dlock.Client, Client);
{
  const instrumentation: OtelInstrumentation = new DlockInstrumentation({ enabled: false, tracerProvider: trace.getTracerProvider() });
  instrumentation.setTracerProvider(trace.getTracerProvider());
  const config: DlockInstrumentationConfig = instrumentation.getConfig();
  assert.equal(config.enabled, false);
  assert.equal(instrumentation.instrumentationName, 'libdlock');
}
console.log(`await using: ok (libdlock ${version()})`);

// Calls the declarations must refuse: tsc fails when one of them compiles. Never run.
export function refused(c: Client, l: Lock): void {
  // @ts-expect-error: waitMs is a number of milliseconds
  void c.acquire('x', { waitMs: '5' });
  // @ts-expect-error: no such option
  void c.acquire('x', { timeout: 5 });
  // @ts-expect-error: the routine's second argument is an AbortSignal
  void c.using('x', async (lock: Lock, signal: string) => signal);
  // @ts-expect-error: a fencing token is a bigint
  const n: number = l.fencingToken;
  // @ts-expect-error: toJSON gives the token as a string
  const j: bigint = l.toJSON();
  // @ts-expect-error: a semaphore needs its number of permits
  void c.semaphore('x');
  // @ts-expect-error: tryAcquire resolves with a boolean
  void c.mutex('x').tryAcquire().then((r: Releaser) => r);
  // @ts-expect-error: a NotAcquiredError's code is exactly its own
  const code: 'ERR_DLOCK_NOT_HELD' = new NotAcquiredError('x').code;
  // @ts-expect-error: maxHoldMs is a number of milliseconds
  void c.acquire('x', { maxHoldMs: '5' });
  // @ts-expect-error: minHoldMs is a number of milliseconds
  void c.acquire('x', { minHoldMs: '5' });
  // @ts-expect-error: a reentrant context is a string
  void c.acquire('x', { reentrant: 42 });
  // @ts-expect-error: lockDelayMs is a number of milliseconds
  void c.campaign('x', { lockDelayMs: '5' });
  // @ts-expect-error: a campaign waits until it leads: no waitMs
  void c.campaign('x', { waitMs: 5 });
  // @ts-expect-error: a leadership is exclusive
  void c.campaign('x', { shared: true });
  // @ts-expect-error: a leadership takes no permits
  void c.campaign('x', { take: 2 });
  // @ts-expect-error: take is a number of permits
  void c.acquire('x', { permits: 4, take: '2' });
  // @ts-expect-error: a value is a string or bytes
  void c.acquire('x', { value: 5 });
  // @ts-expect-error: requestRelease resolves with a boolean
  void c.requestRelease('x').then((x: LockInfo) => x);
  // @ts-expect-error: a release request's reason is a string
  c.acquire('x').then((lk) => lk.on('releaseRequested', (lk2: Lock, reason: number) => reason));
  // @ts-expect-error: setValue takes a value
  void l.setValue();
  // @ts-expect-error: leader() may resolve with null (nobody leads)
  void c.leader('x').then((x: Leader) => x);
  // @ts-expect-error: a term is a bigint
  void c.leader('x').then((x) => { const t: number = x!.term; return t; });
  // @ts-expect-error: a report may be null (nobody leads)
  c.observe('x').on('change', (x: Leader) => x);
  // @ts-expect-error: observe's only option is signal
  void c.observe('x', { waitMs: 5 });
  // @ts-expect-error: a lock that is held has no loss cause: null
  const why: string = l.lostCause;
  // @ts-expect-error: a loss cause is one of the stable codes
  const lossCause: LossCause = 'taken';
  // @ts-expect-error: an event's token is null when it has none
  c.on('event', (e) => { const t: bigint = e.fencingToken; return t; });
  // @ts-expect-error: const labels are strings or numbers
  registerMetrics(c, null, { labels: { client: true } });
  // @ts-expect-error: enabled is a boolean
  void new DlockInstrumentation({ enabled: 'yes' });
  // @ts-expect-error: a tracer provider has getTracer()
  void new DlockInstrumentation({ tracerProvider: {} });
  // @ts-expect-error: lockMany takes an array of names
  void c.lockMany('x');
  // @ts-expect-error: lockMany has no minHoldMs (a name given back would stay closed)
  void c.lockMany(['x', 'y'], { minHoldMs: 5 });
  // @ts-expect-error: two names give two Locks
  void c.lockMany(['x', 'y']).then((locks) => { const three: [Lock, Lock, Lock] = locks; return three; });
  // @ts-expect-error: using() with several names hands fn an array of Locks
  void c.using(['x', 'y'], async (lock: Lock) => lock);
  // @ts-expect-error: releaseMany takes Locks
  void Client.releaseMany(['x']);
  // @ts-expect-error: metricsText() is synchronous
  void c.metricsText().then(() => 0);
  void why;
  void n, j, code, CancelledError;
}
