// Type declarations for the dlock Node binding (bindings/node/index.js).
/// <reference types="node" />
import { EventEmitter } from 'node:events';

/** Status names, as in err.code: the library's (dlock_status_str) without "DLOCK_". */
export type DlockCode =
  | 'NOT_ACQUIRED' | 'NOT_HELD' | 'EINVAL' | 'EIO' | 'EBACKEND' | 'EAUTH'
  | 'ECANCELLED' | 'ENOMEM' | 'EINTERNAL' | 'UNKNOWN';

/** The kind of a hold. */
export type LockKind = 'exclusive' | 'shared';

/**
 * A failure reported by libdlock; message is the library's own (dlock_last_error()) for that call.
 * TypeError / RangeError are thrown for wrong argument types and ranges.
 */
export class DlockError extends Error {
  name: 'DlockError';
  /** 'NOT_ACQUIRED' (held by someone else, the wait ran out), 'NOT_HELD' (lost or released), 'EINVAL', ... */
  code: DlockCode;
  /** The dlock_status number (1..9). */
  status: number;
}

export interface AcquireOptions {
  /** Server-side lease in ms (default 10000; 0 = no expiry until released). */
  leaseMs?: number | bigint;
  /** 0 = one try (default), N = wait up to N ms, -1 or Infinity = no limit. */
  waitMs?: number | bigint;
  /** Renewal period in ms (default leaseMs/3; 0 = no heartbeats). Must be below the lease. */
  heartbeatMs?: number | bigint;
  /** [min, max] of the jittered fallback retry while waiting (default [50, 1000]). */
  retryMs?: [number | bigint, number | bigint];
  /** A label stored with the lock for people and tools (at most MAX_OWNER_BYTES bytes). */
  owner?: string;
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
   * true (default): a waiting exclusive acquire takes a place in line and a release hands it the
   * lock, in arrival order (backends with the fair capability); false: it competes with every
   * other waiter at each release.
   */
  fair?: boolean;
  /** Aborting cancels a pending acquire: it rejects with code 'ECANCELLED'. */
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
}

/** Who holds a lock: Client.inspect()'s answer. */
export interface LockInfo {
  /** The kind of hold the holders have ('exclusive' when free and for a semaphore). */
  kind: LockKind;
  /** Empty when nobody holds it. */
  holders: Holder[];
  /** The semaphore's number of permits while the name is one; 0 for a lock or a free name. */
  permits: number;
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
}

export class Client {
  /** Opens a client; connecting happens in the background (see ready()). */
  constructor(url: string);
  /** Opens a client and waits until it is connected. */
  static connect(url: string): Promise<Client>;
  /** Resolves once connected; rejects with why it could not connect (EINVAL, EIO, EAUTH). */
  ready(): Promise<Client>;
  readonly closed: boolean;

  acquire(name: string | Uint8Array, options?: AcquireOptions): Promise<Lock>;
  acquire(name: string | Uint8Array, callback: Callback<Lock>): void;
  acquire(name: string | Uint8Array, options: AcquireOptions | undefined, callback: Callback<Lock>): void;

  /** Acquires, runs fn(lock), always releases. Rejects with NOT_HELD if the lock was lost while fn ran. */
  using<T>(name: string | Uint8Array, options: AcquireOptions | undefined, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  using<T>(name: string | Uint8Array, fn: (lock: Lock) => T | Promise<T>): Promise<T>;

  /** Who holds the lock now: a snapshot from the server, stale as soon as it arrives. */
  inspect(name: string | Uint8Array): Promise<LockInfo>;
  inspect(name: string | Uint8Array, callback: Callback<LockInfo>): void;

  /** What the client's backend offers. */
  capabilities(): Promise<Capabilities>;

  /**
   * Releases what it holds, cancels pending acquires, closes connections. Idempotent. (Clients
   * still open when the process exits are closed then.)
   */
  close(): Promise<void>;
  close(callback: Callback<void>): void;
}

export interface Lock {
  on(event: 'lost', listener: (lock: Lock) => void): this;
  once(event: 'lost', listener: (lock: Lock) => void): this;
  addListener(event: 'lost', listener: (lock: Lock) => void): this;
  off(event: 'lost', listener: (lock: Lock) => void): this;
  removeListener(event: 'lost', listener: (lock: Lock) => void): this;
  emit(event: 'lost', lock: Lock): boolean;
}

/** A held lock. Emits 'lost' once if a heartbeat finds it lost (expired, deleted, taken over). */
export class Lock extends EventEmitter {
  private constructor();
  readonly client: Client;
  /** The name as given to acquire. */
  readonly name: string | Uint8Array;
  /** Greater than every token issued before for this name. Pass it to your storage. */
  readonly fencingToken: bigint;
  /** How many tries the acquire took (1 = first try). */
  readonly attempts: number;
  /** Set when 'lost' was emitted. */
  readonly lost: boolean;
  /** True while the local deadline holds and the lock was not found lost. */
  readonly valid: boolean;
  /** ms before the local deadline; Infinity for no expiry; 0 once lost or released. */
  readonly remainingMs: number;
  /** True once release() was called. */
  readonly released: boolean;

  /** New lease from now (0 = no expiry). Rejects with NOT_HELD if it was lost. */
  extend(leaseMs: number | bigint): Promise<void>;
  extend(leaseMs: number | bigint, callback: Callback<void>): void;
  /** Rejects with NOT_HELD if it had been lost or was already released. */
  release(): Promise<void>;
  release(callback: Callback<void>): void;
}

/** libdlock's version, "MAJOR.MINOR.PATCH". */
export function version(): string;
/** Where libdlock.so was loaded from. */
export const libraryPath: string;
/** Status numbers by name: codes.NOT_HELD === 2. */
export const codes: Readonly<Record<'OK' | Exclude<DlockCode, 'UNKNOWN'>, number>>;
/** The longest lock name, in bytes (the library's, 1024 today). */
export const MAX_NAME_BYTES: number;
/** The longest owner label, in bytes (the library's, 256 today). */
export const MAX_OWNER_BYTES: number;
