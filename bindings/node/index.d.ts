// Type declarations for libdlock, the Node binding of dlock (index.js; index.d.mts re-exports
// them for the ES module entry).
/// <reference types="node" />
import { EventEmitter } from 'node:events';

/** Status names: the library's (dlock_status_str) without "DLOCK_". */
export type DlockStatusName =
  | 'NOT_ACQUIRED' | 'NOT_HELD' | 'EINVAL' | 'EIO' | 'EBACKEND' | 'EAUTH'
  | 'ECANCELLED' | 'ENOMEM' | 'EINTERNAL' | 'UNKNOWN';

/** err.code of a DlockError: 'ERR_DLOCK_' + the status's name. */
export type DlockErrorCode = `ERR_DLOCK_${DlockStatusName}`;

/** The kind of a hold. */
export type LockKind = 'exclusive' | 'shared';

/**
 * A value stored with a hold: a string (stored as UTF-8) or bytes (a Buffer or any Uint8Array,
 * NUL included), at most MAX_VALUE_BYTES (4096) bytes. Everyone who can reach the server sees it
 * (inspect(), leader()): keep no secret in it.
 */
export type HoldValue = string | Uint8Array;

/**
 * A failure reported by libdlock; message is the library's own (dlock_last_error()) for that
 * call. Its subclasses name the common statuses. TypeError / RangeError are thrown for wrong
 * argument types and ranges, as Node's own APIs do.
 */
export class DlockError extends Error {
  constructor(status: number, message?: string, options?: ErrorOptions);
  /** 'ERR_DLOCK_NOT_ACQUIRED', 'ERR_DLOCK_NOT_HELD', 'ERR_DLOCK_EINVAL', ... */
  code: DlockErrorCode;
  /** The dlock_status number (1..9; codes maps names to numbers). */
  status: number;
  /**
   * Client.releaseMany() (and using() with several names): each lock's own error, in the order
   * the locks were given, when some of them failed; undefined otherwise.
   */
  errors?: DlockError[];
}
/** Someone else holds the lock and the wait ran out. code: 'ERR_DLOCK_NOT_ACQUIRED'. */
export class NotAcquiredError extends DlockError {
  constructor(message?: string, options?: ErrorOptions);
  code: 'ERR_DLOCK_NOT_ACQUIRED';
}
/**
 * The lock is not held: lost (expired, deleted, taken over, not renewed in time), released when
 * its client was closed, or already released. code: 'ERR_DLOCK_NOT_HELD'.
 */
export class LockLostError extends DlockError {
  constructor(message?: string, options?: ErrorOptions);
  code: 'ERR_DLOCK_NOT_HELD';
  /**
   * Why it was lost, when it was (the stable code of lock.lostCause): 'deleted' (the server no
   * longer had this owner's lock, and nobody holds it: deleted, or its lease ran out there),
   * 'taken_over' (another owner holds it now), 'refused' (the server no longer had this owner's
   * lock, and looking again failed or still listed this hold), 'expired' (renewals failed
   * until the local deadline), 'max_hold' (options.maxHoldMs passed: renewals stopped, and the
   * lease ran out) or 'broken' (an operator broke the lock: Client.breakLock()). undefined for a lock released already or by its client's close().
   * The message keeps the library's words.
   */
  cause?: LossCause;
}

/**
 * The stable code of why a lock was lost (the cause label of dlock_losses_total). 'max_hold':
 * options.maxHoldMs passed, renewals stopped, and the lease ran out; 'broken': an operator broke
 * the lock (Client.breakLock(); lostCause 'broken: an operator broke the lock: REASON').
 */
export type LossCause = 'deleted' | 'taken_over' | 'refused' | 'expired' | 'max_hold' | 'broken';
/** The library refused an argument, URL or option value. code: 'ERR_DLOCK_EINVAL'. */
export class InvalidArgumentError extends DlockError {
  constructor(message?: string, options?: ErrorOptions);
  code: 'ERR_DLOCK_EINVAL';
}
/** Unreachable or timed out (EIO, status 4), an error answer (EBACKEND, 5), credentials refused (EAUTH, 6). */
export class BackendError extends DlockError {
  constructor(status?: 4 | 5 | 6, message?: string, options?: ErrorOptions);
  code: 'ERR_DLOCK_EIO' | 'ERR_DLOCK_EBACKEND' | 'ERR_DLOCK_EAUTH';
}
/** A pending acquire was cancelled: its signal, Mutex.cancel() or the client's close(). code: 'ERR_DLOCK_ECANCELLED'. */
export class CancelledError extends DlockError {
  constructor(message?: string, options?: ErrorOptions);
  code: 'ERR_DLOCK_ECANCELLED';
}

export interface AcquireOptions {
  /** Server-side lease in ms (default 10000; 0 = no expiry until released). */
  leaseMs?: number | bigint;
  /** How long to wait for the lock: no limit by default (-1 or Infinity say so too), N ms, 0 = one try. */
  waitMs?: number | bigint;
  /** Renewal period in ms (default leaseMs/3; 0 = no heartbeats). Must be below the lease. */
  heartbeatMs?: number | bigint;
  /**
   * The longest the heartbeats keep the hold, in ms (a job timeout that holds across machines;
   * default 0 = none, at most ten years): once it has passed since the acquire returned, renewals
   * stop, the lock ends with its lease (at most maxHoldMs + leaseMs after the acquire) and is
   * reported lost with the cause 'max_hold' ('lost' event, lostCause "max_hold: ...",
   * LockLostError.cause 'max_hold'). An explicit extend() still renews it. With leaseMs 0 the
   * acquire rejects with an InvalidArgumentError (nothing would end the hold); so does one with
   * a libdlock that lacks it.
   */
  maxHoldMs?: number | bigint;
  /**
   * The shortest the name stays taken, in ms (ShedLock's lockAtLeastFor; default 0 = none, at
   * most ten years, and at most maxHoldMs when that is set): however the hold ends, the name is
   * not free before the acquire + minHoldMs on the server's clock. A release before then resolves
   * at once and leaves a marker with no owner (inspect(): no holders, closedMs > 0, closedBy
   * 'min_hold'); other acquires wait it out (one try: NotAcquiredError naming min_hold). Needs
   * the 'minHold' capability (Redis); elsewhere the acquire rejects with an InvalidArgumentError.
   */
  minHoldMs?: number | bigint;
  /**
   * Lock-delay, as in Chubby and Consul, in ms (default 0 = none, at most MAX_LOCK_DELAY_MS, 60000):
   * when the hold ends uncleanly (its lease ran out: the holder crashed, hung or lost the
   * server), nobody may acquire the name for this long more (inspect(): no holders, closedBy
   * 'lock_delay'). A release is a clean end: no delay. Needs the 'lockDelay' capability (Redis);
   * elsewhere the acquire rejects with an InvalidArgumentError.
   */
  lockDelayMs?: number | bigint;
  /** [min, max] of the jittered fallback retry while waiting (default [50, 1000]). */
  retryMs?: [number | bigint, number | bigint];
  /** A label stored with the lock for people and tools (at most MAX_OWNER_BYTES bytes). */
  owner?: string;
  /**
   * A context (1..256 bytes of UTF-8: a request id, a job id) whose acquires re-enter: while this
   * client holds the name under the same context, another acquire of it waits for nothing (even
   * with waitMs 0) and resolves with a Lock of its own on that hold, with the same fencingToken;
   * the name stays held until the last of them is released. A re-entry of a hold that was lost or
   * is past its local deadline rejects with a LockLostError (NOT_HELD), one asking another kind,
   * permits or take with an InvalidArgumentError. Another context, or none, contends as anyone does. The
   * hold's 'lost' and 'releaseRequested' are told to its first Lock only. '' is a TypeError;
   * undefined or null (the default): not reentrant.
   */
  reentrant?: string | null;
  /** 'exclusive' (default) or 'shared'; EINVAL unless the backend offers it (capabilities()). */
  kind?: LockKind;
  /**
   * true is kind: 'shared' (any number of shared holders, no exclusive one meanwhile), false is
   * kind: 'exclusive'; a TypeError when it contradicts kind.
   */
  shared?: boolean;
  /**
   * A counting semaphore of this many holders; 0 = off (default). EINVAL unless the backend offers
   * it, with a shared kind, or when the name is held with another number of permits (or as a lock).
   */
  permits?: number;
  /**
   * How many of the semaphore's permits this acquire takes at once, all or none (default 1): the
   * hold counts take against permits until it ends, and its release frees them all (one Lock, one
   * fencing token, lease and heartbeat). 0 is an InvalidArgumentError, as is more than 1 without
   * permits or more than permits (at acquire); not an integer from 0 to 2^32 - 1, a RangeError.
   */
  take?: number;
  /**
   * true (default): a waiting exclusive acquire takes a place in line and a release hands it the
   * lock, in arrival order (backends with the fair capability); false: it competes with every
   * other waiter at each release.
   */
  fair?: boolean;
  /** Aborting cancels a pending acquire: it rejects with a CancelledError whose cause is the signal's reason. */
  signal?: AbortSignal;
  /** Stored with the hold, shown by inspect() and leader(); lock.setValue() replaces it. null: none (the default). */
  value?: HoldValue | null;
  /**
   * The hold listens for release requests (Client.requestRelease()) while it is held, and this
   * is the Lock's first 'releaseRequested' listener: it may release the lock, or not. reason is
   * '' when the asker gave none. Needs the 'releaseRequest' capability (elsewhere the acquire
   * rejects with an InvalidArgumentError).
   */
  onReleaseRequested?: ((lock: Lock, reason: string) => void) | null;
}

/**
 * A campaign's options: an acquire's, but a leadership is exclusive and its campaign waits until
 * it leads (no waitMs, kind, shared, permits or take: a TypeError).
 */
export type CampaignOptions = Omit<AcquireOptions, 'waitMs' | 'kind' | 'shared' | 'permits' | 'take'>;

/**
 * lockMany()'s options (and using()'s with several names): an acquire's, applied to every name,
 * but minHoldMs (a TypeError: a name given back when a later one cannot be had would stay closed
 * for it). waitMs bounds the whole call; signal cancels it, a wait included.
 */
export type LockManyOptions = Omit<AcquireOptions, 'minHoldMs'>;

/** Lock names for lockMany(): strings (UTF-8) or bytes, each given once. */
export type LockNames = readonly (string | Uint8Array)[];

/** lockMany()'s Locks for names N: one per name, in the same order (a tuple for a tuple of names). */
export type LocksOf<N extends LockNames> = { -readonly [K in keyof N]: Lock };

/** observe()'s options. */
export interface ObserveOptions {
  /** Aborting stops the observer: its iterations reject with a CancelledError whose cause is the signal's reason. */
  signal?: AbortSignal;
}

export type Callback<T> = (err: Error | null, value?: T) => void;

/** One holder of a lock, as Client.inspect() saw it. */
export interface Holder {
  /** Its label (acquire's owner option); null when it set none. */
  owner: string | null;
  /** Its remaining lease as the server sees it, in ms; null for no expiry. */
  remainingMs: number | null;
  /** The token of its acquisition; null when the backend does not know it. */
  fencingToken: bigint | null;
  /** The value stored with its hold (a copy); null when it has none. value.toString() reads text. */
  value: Buffer | null;
}

/** Who leads an election: Client.leader()'s answer and Observer's reports (null when nobody leads). */
export interface Leader {
  /** Its label (the owner option); null when it set none. */
  owner: string | null;
  /** What it proclaims (the value option, lock.setValue()); null when none. value.toString() reads text. */
  value: Buffer | null;
  /** Its term: the fencing token of its leadership, greater than every earlier term of the name (0n only for a hold dlock did not make). */
  term: bigint;
  /** Its remaining lease as the server sees it, in ms; null for no expiry. */
  remainingMs: number | null;
}

/** Who holds a lock: Client.inspect()'s answer (and Client.breakLock()'s: who held it). */
export interface LockInfo {
  /** The kind of hold the holders have ('exclusive' when free and for a semaphore). */
  kind: LockKind;
  /** Empty when nobody holds it (breakLock(): the holds it broke). */
  holders: Holder[];
  /** The semaphore's number of permits while the name is one; 0 for a lock or a free name. */
  permits: number;
  /**
   * While a broken lock's name stays closed (no holder, and nobody may take it until the broken
   * leases would have ended): for how many ms more; 0 when it is not closed. breakLock(): how
   * long the break left it closed (0 with now: true).
   */
  closedMs: number;
  /** What closed it: 'broken' (breakLock()); '' when it is not closed. */
  closedBy: string;
}

/** Client.breakLock()'s options. */
export interface BreakOptions {
  /** The operator's words for the broken holders (their lostCause carries them); at most MAX_REASON_BYTES bytes of UTF-8. */
  reason?: string | null;
  /** true: free the name at once, instead of leaving it closed until the broken leases would have ended. */
  now?: boolean;
}

/** Client.requestRelease()'s options. */
export interface RequestReleaseOptions {
  /** Words for the holders (their 'releaseRequested' listeners get them); at most MAX_REASON_BYTES bytes of UTF-8. */
  reason?: string | null;
}

/** What a client's backend offers (Client.capabilities()). */
export interface Capabilities {
  /** Fencing tokens strictly increase under every fault the backend's docs list. */
  fencingStrict: boolean;
  /** Waiters are woken by releases, not only by retries. */
  notifies: boolean;
  /** kind: 'shared' is offered. */
  shared: boolean;
  /** permits (counting semaphores) are offered. */
  permits: boolean;
  /** Fair waiting (the fair option) is offered. */
  fair: boolean;
  /** Observers hear of every release, hand-over and new value from the server, not by polling. */
  observePush: boolean;
  /** An operator can break a lock (Client.breakLock()). */
  break: boolean;
  /** options.minHoldMs: the name stays taken at least that long after the acquire. */
  minHold: boolean;
  /** options.lockDelayMs: the name stays closed that long after a lease runs out. */
  lockDelay: boolean;
  /** Client.requestRelease() reaches holders acquired with options.onReleaseRequested. */
  releaseRequest: boolean;
}

/** One sample of Client.metrics() (docs/metrics.md lists the families). */
export interface MetricSample {
  /** Its family's name, e.g. 'dlock_acquires_total' (counters end in _total; times are in seconds). */
  family: string;
  type: 'counter' | 'gauge' | 'histogram';
  /** What its family counts (the text's HELP line). */
  help: string;
  /** Its own name: the family's, or for a histogram with _bucket, _sum or _count. */
  name: string;
  /** Its labels, e.g. { kind: 'exclusive', outcome: 'acquired' } ({} for none; a bucket has le). */
  labels: Record<string, string>;
  value: number;
}

/** What happens to a client's locks, as it happens: client.on('event', (e) => ...), on either path. */
export type DlockEventType = 'acquiring' | 'acquired' | 'not_acquired' | 'released' | 'renewal_failed' | 'lost';

export interface DlockEvent {
  type: DlockEventType;
  /** The lock's name (a name given as bytes is read as UTF-8). */
  name: string;
  /** The tries an acquire took (acquired, not_acquired); 0 otherwise. */
  attempts: number;
  /** acquired, not_acquired: time waited; released, lost: time held; renewal_failed: its round trip. */
  elapsedMs: number;
  /** The hold's token (acquired, released, renewal_failed, lost); null when there is none. */
  fencingToken: bigint | null;
  /** The dlock_status (0: OK; codes has the numbers): not_acquired's, released's, renewal_failed's, lost's (2). */
  status: number;
  /** err.code's form of status ('ERR_DLOCK_NOT_ACQUIRED', ...); null when status is 0. */
  code: DlockErrorCode | null;
  /** The error's message (not_acquired, released, renewal_failed) or lost's cause ("deleted: ..."); '' when none. */
  detail: string;
  /** lost: its stable code ('deleted', 'taken_over', 'refused', 'expired', 'max_hold'); null for the others. */
  cause: LossCause | null;
}

/** The part of a prom-client Registry that registerMetrics() uses. */
export interface MetricsRegistry {
  registerMetric(metric: any): void;
  removeSingleMetric(name: string): void;
  getSingleMetric?(name: string): unknown;
}

export interface RegisterMetricsOptions {
  /** Const labels on every sample of this client, e.g. { client: 'orders' }: a second client of one registry needs its own. */
  labels?: Record<string, string | number>;
}

/**
 * What using() and runExclusive() run: signal (lock.signal) aborts, with a LockLostError as its
 * reason, when the lock is lost.
 */
export type HoldingFn<T> = (lock: Lock, signal: AbortSignal) => T | Promise<T>;

/**
 * What using() runs with several names: locks in the order the names were given; signal aborts,
 * with that lock's LockLostError as its reason, when any of them is lost.
 */
export type HoldingManyFn<T, L extends readonly Lock[] = Lock[]> = (locks: L, signal: AbortSignal) => T | Promise<T>;

export interface Client {
  /**
   * What happens to its locks (acquiring, acquired, not_acquired, released, renewal_failed,
   * lost), on the JS thread, on either path (the koffi path's come through the library's event
   * queue; with a libdlock too old to have one, adding a listener there throws, code
   * 'ERR_DLOCK_NO_EVENTS'). A client nobody listens to pays nothing.
   */
  on(event: 'event', listener: (event: DlockEvent) => void): this;
  once(event: 'event', listener: (event: DlockEvent) => void): this;
  addListener(event: 'event', listener: (event: DlockEvent) => void): this;
  prependListener(event: 'event', listener: (event: DlockEvent) => void): this;
  prependOnceListener(event: 'event', listener: (event: DlockEvent) => void): this;
  off(event: 'event', listener: (event: DlockEvent) => void): this;
  removeListener(event: 'event', listener: (event: DlockEvent) => void): this;
  emit(event: 'event', e: DlockEvent): boolean;
}

export class Client extends EventEmitter {
  /** Opens a client; connecting happens in the background (see ready()). Loads libdlock.so on first use. */
  constructor(url: string);
  /** Opens a client and waits until it is connected. */
  static connect(url: string): Promise<Client>;
  /** Resolves once connected; rejects with why it could not connect (InvalidArgumentError, BackendError). */
  ready(): Promise<Client>;
  readonly closed: boolean;

  /** Waits without limit unless options.waitMs bounds it (0 = one try) or options.signal aborts it. */
  acquire(name: string | Uint8Array, options?: AcquireOptions): Promise<Lock>;
  acquire(name: string | Uint8Array, callback: Callback<Lock>): void;
  acquire(name: string | Uint8Array, options: AcquireOptions | undefined, callback: Callback<Lock>): void;

  /**
   * Acquires, runs fn(lock, signal), always releases. Rejects with LockLostError if the lock was
   * lost while fn ran (and fn did not throw).
   */
  using<T>(name: string | Uint8Array, options: AcquireOptions | undefined, fn: HoldingFn<T>): Promise<T>;
  using<T>(name: string | Uint8Array, fn: HoldingFn<T>): Promise<T>;
  /**
   * Several names, all or none (lockMany()), then fn(locks, signal), signal aborting when any of
   * them is lost; always releases them all. Rejects with a LockLostError naming each lock lost
   * while fn ran (and fn did not throw).
   */
  using<T, N extends LockNames | []>(names: N, options: LockManyOptions | undefined, fn: HoldingManyFn<T, LocksOf<N>>): Promise<T>;
  using<T, N extends LockNames | []>(names: N, fn: HoldingManyFn<T, LocksOf<N>>): Promise<T>;

  /**
   * Several names, all or none: their Locks in the order given, each with its own fencing token
   * (released alone, or with releaseMany(); close() releases them). The names are taken one at a
   * time in bytewise order, whatever order they come in (no deadlock between [a, b] and [b, a]).
   * Otherwise none is held, given back before it rejects with the failing name's error
   * (NotAcquiredError when the wait ran out, CancelledError for options.signal, ...). A name given
   * twice, or no name, is an InvalidArgumentError; names not an array, a TypeError.
   */
  lockMany<N extends LockNames | []>(names: N, options?: LockManyOptions): Promise<LocksOf<N>>;
  lockMany<N extends LockNames | []>(names: N, callback: Callback<LocksOf<N>>): void;
  lockMany<N extends LockNames | []>(names: N, options: LockManyOptions | undefined, callback: Callback<LocksOf<N>>): void;

  /** Client.releaseMany(locks), as a method (each lock is released through its own client). */
  releaseMany(locks: readonly Lock[]): Promise<void>;
  releaseMany(locks: readonly Lock[], callback: Callback<void>): void;
  /**
   * Releases every lock (each through its own client, at once) and resolves when all were
   * released. Otherwise every lock was let go all the same, and it rejects with a LockLostError
   * naming each one that was not held (lost, or released already), or with the class of another
   * failure, naming every failure; err.errors has each lock's own error.
   */
  static releaseMany(locks: readonly Lock[]): Promise<void>;
  static releaseMany(locks: readonly Lock[], callback: Callback<void>): void;

  /** A Mutex over the lock called name; options apply to each of its acquires. */
  mutex(name: string | Uint8Array, options?: AcquireOptions): Mutex;
  /** A Semaphore of permits holders over name. */
  semaphore(name: string | Uint8Array, permits: number, options?: Omit<AcquireOptions, 'permits'>): Semaphore;

  /** Who holds the lock now: a snapshot from the server, stale as soon as it arrives. */
  inspect(name: string | Uint8Array): Promise<LockInfo>;
  inspect(name: string | Uint8Array, callback: Callback<LockInfo>): void;

  /**
   * An operator's takeover: deletes every hold of name; each broken holder is reported lost with
   * the cause 'broken' (at its next renewal). Unless options.now, the name stays closed with no
   * holder until the broken leases would have ended. Resolves with what it broke: the holders
   * (owner, fencingToken, remainingMs) and closedMs. InvalidArgumentError on a backend without
   * the 'break' capability.
   */
  breakLock(name: string | Uint8Array, options?: BreakOptions): Promise<LockInfo>;
  breakLock(name: string | Uint8Array, options: BreakOptions | undefined, callback: Callback<LockInfo>): void;
  breakLock(name: string | Uint8Array, callback: Callback<LockInfo>): void;

  /**
   * Asks every holder of name to let go, taking nothing: holders acquired with
   * options.onReleaseRequested hear the reason ('releaseRequested') and may release. Resolves
   * true when the name had holders to ask, false when nobody holds it. On Redis a holder hears
   * requests from a round trip after its acquire: one sent earlier is missed (ask again).
   * InvalidArgumentError on a backend without the 'releaseRequest' capability.
   */
  requestRelease(name: string | Uint8Array, options?: RequestReleaseOptions): Promise<boolean>;
  requestRelease(name: string | Uint8Array, options: RequestReleaseOptions | undefined, callback: Callback<boolean>): void;
  requestRelease(name: string | Uint8Array, callback: Callback<boolean>): void;

  /** What the client's backend offers. */
  capabilities(): Promise<Capabilities>;

  /**
   * Its metrics in the Prometheus text format (0.0.4), as a scrape handler serves them:
   * synchronous, no round trip. InvalidArgumentError before it is connected. After close(): its
   * last counts when they had been read before, else InvalidArgumentError.
   */
  metricsText(): string;
  /** The same metrics as samples, for another metrics system (no library needed). */
  metrics(): MetricSample[];

  /**
   * Stands for leader of the election name and waits, without limit, until this candidate leads:
   * the leadership is a held Lock whose fencingToken is the term. lock.setValue() proclaims,
   * lock.release() resigns; options.signal withdraws the candidacy (CancelledError).
   */
  campaign(name: string | Uint8Array, options?: CampaignOptions): Promise<Lock>;
  campaign(name: string | Uint8Array, callback: Callback<Lock>): void;
  campaign(name: string | Uint8Array, options: CampaignOptions | undefined, callback: Callback<Lock>): void;

  /** The current leader of the election name, or null when nobody leads: a snapshot, like inspect(). */
  leader(name: string | Uint8Array): Promise<Leader | null>;
  leader(name: string | Uint8Array, callback: Callback<Leader | null>): void;

  /**
   * Who leads the election name, first as it stands, then at each change (of leader, or of its
   * value), null when nobody leads: `for await (const leader of client.observe(name, { signal }))`
   * or `.on('change', ...)`. Keeps the process alive until it stops (cancel(), unref(), the
   * signal, the end of a `for await` loop over it, the client's close()).
   */
  observe(name: string | Uint8Array, options?: ObserveOptions): Observer;

  /**
   * Releases what it holds, cancels pending acquires, closes connections. Idempotent. (Clients
   * still open when the process exits are closed then.)
   */
  close(): Promise<void>;
  close(callback: Callback<void>): void;
  /** close(): `await using client = await Client.connect(url)`. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface Lock {
  on(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  once(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  addListener(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  prependListener(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  off(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  removeListener(event: 'lost', listener: (lock: Lock, error: LockLostError) => void): this;
  emit(event: 'lost', lock: Lock, error: LockLostError): boolean;
  /** Someone asked this hold to let go (Client.requestRelease()); only for a hold acquired with options.onReleaseRequested. */
  on(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  once(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  addListener(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  prependListener(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  off(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  removeListener(event: 'releaseRequested', listener: (lock: Lock, reason: string) => void): this;
  emit(event: 'releaseRequested', lock: Lock, reason: string): boolean;
}

/**
 * A held lock. When it is found lost in the background (expired, deleted, taken over), emits
 * 'lost' once and aborts signal; with neither listened to, the process gets a LockLostWarning.
 */
export class Lock extends EventEmitter {
  private constructor();
  readonly client: Client;
  /** The name as given to acquire. */
  readonly name: string | Uint8Array;
  /** Greater than every token issued before for this name. Pass it to your storage. */
  readonly fencingToken: bigint;
  /** How many tries the acquire took (1 = first try). */
  readonly attempts: number;
  /** Set when the lock was found lost ('lost' emitted, signal aborted). */
  readonly lost: boolean;
  /** Aborts, with a LockLostError as its reason, when the lock is found lost. */
  readonly signal: AbortSignal;
  /** True while the local deadline holds and the lock was not found lost. */
  readonly valid: boolean;
  /** ms before the local deadline; Infinity for no expiry; 0 once lost or released. */
  readonly remainingMs: number;
  /** True once release() was called. */
  readonly released: boolean;
  /**
   * Why it is no longer valid: null while held and valid, else "CAUSE: details" with CAUSE a
   * LossCause ('taken_over: another owner holds it now (fencing token 8)'). After release(): the
   * cause it had been lost by, or null.
   */
  readonly lostCause: string | null;

  /** New lease from now (0 = no expiry). Rejects with LockLostError if it was lost. */
  extend(leaseMs: number | bigint): Promise<void>;
  extend(leaseMs: number | bigint, callback: Callback<void>): void;
  /**
   * Replaces the value stored with the hold (null or empty removes it): a leader's proclaim.
   * Rejects with LockLostError, writing nothing, when the hold was lost or taken over.
   */
  setValue(value: HoldValue | null): Promise<void>;
  setValue(value: HoldValue | null, callback: Callback<void>): void;
  /** Rejects with LockLostError if it had been lost or was already released. */
  release(): Promise<void>;
  release(callback: Callback<void>): void;
  /** The fencing token as a decimal string (JSON.stringify({ token: lock }) gives {"token":"42"}). */
  toJSON(): string;
  /** release() unless released already: `await using lock = await client.acquire(name)`. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface Observer {
  on(event: 'change', listener: (leader: Leader | null) => void): this;
  on(event: 'error', listener: (error: DlockError) => void): this;
  on(event: 'close', listener: () => void): this;
  once(event: 'change', listener: (leader: Leader | null) => void): this;
  once(event: 'error', listener: (error: DlockError) => void): this;
  once(event: 'close', listener: () => void): this;
  addListener(event: 'change', listener: (leader: Leader | null) => void): this;
  addListener(event: 'error', listener: (error: DlockError) => void): this;
  addListener(event: 'close', listener: () => void): this;
  off(event: 'change', listener: (leader: Leader | null) => void): this;
  off(event: 'error', listener: (error: DlockError) => void): this;
  off(event: 'close', listener: () => void): this;
  removeListener(event: 'change', listener: (leader: Leader | null) => void): this;
  removeListener(event: 'error', listener: (error: DlockError) => void): this;
  removeListener(event: 'close', listener: () => void): this;
}

/**
 * Who leads an election, as it changes: client.observe(name). Emits 'change' (a Leader, or null
 * when nobody leads) at each report, 'error' if it could not start (a bad name, a client that
 * could not connect), and 'close' once it stopped; and is an async iterable of the same reports,
 * each iteration starting with the latest. Leaving a `for await` loop over it cancels it.
 */
export class Observer extends EventEmitter implements AsyncIterable<Leader | null> {
  private constructor();
  readonly client: Client;
  /** The name as given to observe(). */
  readonly name: string | Uint8Array;
  /** The latest report: a Leader, null when nobody leads, undefined before the first. */
  readonly leader: Leader | null | undefined;
  /** True once it stopped (cancel(), its signal, a loop over it ended, the client's close()). */
  readonly closed: boolean;
  /** Stops observing: no report after it returns; iterations end. Idempotent. */
  cancel(): void;
  /** Lets the process exit while it observes. */
  unref(): this;
  /** Keeps the process alive while it observes (the default). */
  ref(): this;
  [Symbol.asyncIterator](): AsyncIterator<Leader | null, undefined>;
  /** cancel(): `using observer = client.observe(name)`. */
  [Symbol.dispose](): void;
  /** cancel(): `await using observer = client.observe(name)`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Releases the hold it came with (once; later calls return the same promise). */
export interface Releaser {
  (): Promise<void>;
  /** The hold. */
  readonly lock: Lock;
}

/**
 * An object over one lock name, as async-mutex and redis-semaphore users know it. Every hold is
 * a Lock of its own (token, signal, 'lost').
 */
export class Mutex {
  /** Also client.mutex(name, options); options apply to every acquire. */
  constructor(client: Client, name: string | Uint8Array, options?: AcquireOptions);
  readonly client: Client;
  readonly name: string | Uint8Array;
  /** Waits as Client.acquire does; resolves with a function that releases this hold. */
  acquire(options?: AcquireOptions): Promise<Releaser>;
  /** One try: true when taken (give it back with release()), false when someone else holds it. */
  tryAcquire(options?: Omit<AcquireOptions, 'waitMs'>): Promise<boolean>;
  /** Releases this object's oldest hold; nothing when it holds none. LockLostError if that hold was lost. */
  release(): Promise<void>;
  /** Acquires, runs fn(lock, signal), releases; as Client.using. */
  runExclusive<T>(fn: HoldingFn<T>): Promise<T>;
  /** This object holds the lock now (acquired, not released, not found lost). */
  isLocked(): boolean;
  /** isLocked(), under redis-semaphore's name. */
  readonly isAcquired: boolean;
  /** This object's oldest hold, or null. */
  readonly lock: Lock | null;
  /** Rejects this object's pending acquires with CancelledError; holds stay held. */
  cancel(): void;
}

/**
 * A Mutex whose acquires each take one of permits (at most permits holders at once), or
 * options.take of them (given to the constructor, or to one acquire).
 */
export class Semaphore extends Mutex {
  /** Also client.semaphore(name, permits, options). */
  constructor(client: Client, name: string | Uint8Array, permits: number, options?: Omit<AcquireOptions, 'permits'>);
  readonly permits: number;
}

/** libdlock's version, "MAJOR.MINOR.PATCH" (loads the library). */
export function version(): string;
/**
 * Which libdlock.so was loaded, its version, and the binding's path to it: native 'addon'
 * (dlock.node: clients on this thread's libuv loop; client events) or 'koffi'; addon: the
 * dlock.node loaded or null; reason: why the koffi path, or null (loads the library).
 */
export function library(): { path: string; version: string; native: 'addon' | 'koffi'; addon: string | null; reason: string | null };
/**
 * Makes a prom-client registry's metrics() include client's families (read at each scrape):
 * registry defaults to prom-client's global register (prom-client is loaded only then). Two
 * clients of one registry must have different options.labels, or the second is refused.
 * Returns a function that takes client's samples out again (its families too, with the last).
 */
export function registerMetrics(client: Client, registry?: MetricsRegistry | null, options?: RegisterMetricsOptions): () => void;
/**
 * The part of an OpenTelemetry TracerProvider that DlockInstrumentation uses: @opentelemetry/api's
 * TracerProvider (the SDK's, trace.getTracerProvider()) is one. (Declared here so that these
 * types need no @opentelemetry/api.)
 */
export interface TracerProviderLike {
  getTracer(name: string, version?: string, options?: any): unknown;
}

/** DlockInstrumentation's config (getConfig(), setConfig()). */
export interface DlockInstrumentationConfig {
  /** Enabled once made (default true), as OpenTelemetry's instrumentations are. */
  enabled?: boolean;
  /** No spans for an acquire made outside any span (default false). */
  requireParentSpan?: boolean;
}

/**
 * OpenTelemetry spans for acquires ('dlock.acquire', a child of the active span) and holds
 * ('dlock.hold', until the release or the loss): an instrumentation as registerInstrumentations()
 * and the NodeSDK take them (@opentelemetry/instrumentation's Instrumentation interface). Needs
 * @opentelemetry/api in the application, loaded when first enabled; without it, enabling warns
 * and makes no spans. Traces to the global TracerProvider unless given another. The last one
 * enabled makes the spans.
 */
export class DlockInstrumentation {
  constructor(config?: DlockInstrumentationConfig & { tracerProvider?: TracerProviderLike });
  /** 'libdlock': the instrumentation scope's (the tracer's) name. */
  readonly instrumentationName: string;
  /** This package's version. */
  readonly instrumentationVersion: string;
  /** Starts making spans (loads @opentelemetry/api the first time). Idempotent. */
  enable(): void;
  /** Stops making spans; holds whose span was started still end it. */
  disable(): void;
  /** Whether it makes spans now. */
  isEnabled(): boolean;
  /** Traces to this provider from now on. */
  setTracerProvider(tracerProvider: TracerProviderLike): void;
  /** Does nothing: dlock's metrics are client.metrics() and registerMetrics(). */
  setMeterProvider(meterProvider: unknown): void;
  /** Does nothing: dlock logs nothing. */
  setLoggerProvider(loggerProvider: unknown): void;
  setConfig(config: DlockInstrumentationConfig): void;
  getConfig(): DlockInstrumentationConfig;
}

/** Status numbers by name: codes.NOT_HELD === 2. */
export const codes: Readonly<Record<'OK' | Exclude<DlockStatusName, 'UNKNOWN'>, number>>;
/** The longest lock name, in bytes (DLOCK_MAX_NAME_BYTES: 1024). */
export const MAX_NAME_BYTES: number;
/** The longest owner label, in bytes (DLOCK_MAX_OWNER_BYTES: 256). */
export const MAX_OWNER_BYTES: number;
/** The longest value stored with a hold, in bytes (DLOCK_MAX_VALUE_BYTES: 4096). */
export const MAX_VALUE_BYTES: number;
/** The longest reason Client.breakLock() and Client.requestRelease() take, in bytes (DLOCK_MAX_REASON_BYTES: 1024). */
export const MAX_REASON_BYTES: number;
/** The longest options.lockDelayMs, in ms (DLOCK_MAX_LOCK_DELAY_MS: 60000). */
export const MAX_LOCK_DELAY_MS: number;
