'use strict';
// Mutex and Semaphore: an object per lock name, for code written against async-mutex
// (acquire() resolving with a release function, runExclusive, isLocked, cancel) or
// redis-semaphore (new Mutex(client, key, options), tryAcquire() resolving with a boolean,
// release()). Thin: every hold is a Lock from Client.acquire, with its fencing token, signal and
// 'lost' event; these objects only remember which holds they took, so release() knows what to
// give back. Built on the public Client API only (index.js hands in its argument checks).

const { CancelledError, NotAcquiredError } = require('./errors');

// One signal that aborts when any of these does (AbortSignal.any where Node has it: 20.3+).
function anySignal(signals) {
  const live = signals.filter((s) => s !== undefined);
  if (live.length <= 1) return live[0];
  if (typeof AbortSignal.any === 'function') return AbortSignal.any(live);
  const ac = new AbortController();
  for (const s of live) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener('abort', () => ac.abort(s.reason), { once: true, signal: ac.signal });
  }
  return ac.signal;
}

function makeMutex({ Client, checkName, checkOptions, typeError, rangeError, describe, runHolding }) {
  class Mutex {
    #client;
    #name;
    #options;
    #held = [];                      // this object's holds, oldest first: { lock, release }
    #cancel = new AbortController();  // aborted by cancel(): this object's pending acquires

    /**
     * A mutex over the lock called name on client (also: client.mutex(name, options)). options:
     * as Client.acquire's (waits without limit unless waitMs says otherwise), for every acquire.
     */
    constructor(client, name, options) {
      if (!(client instanceof Client)) {
        throw typeError('ERR_INVALID_ARG_TYPE', `client must be a libdlock Client, got ${describe(client)}`);
      }
      checkName(name);
      checkOptions(options);
      this.#client = client;
      this.#name = name;
      this.#options = { ...options };
    }

    get client() { return this.#client; }
    get name() { return this.#name; }

    /**
     * Waits for the lock (as Client.acquire does with this object's options, which options may
     * override for this call) and resolves with a function that releases it: call it once, it
     * returns the release's promise (later calls return the same one). Its .lock is the Lock.
     */
    async acquire(options) {
      const o = { ...this.#options, ...options };
      o.signal = anySignal([o.signal, this.#cancel.signal]);
      const lock = await this.#client.acquire(this.#name, o);
      let done = null;
      const release = () => {
        if (done === null) {
          this.#held = this.#held.filter((h) => h.lock !== lock);
          done = lock.released ? Promise.resolve() : lock.release();
        }
        return done;
      };
      release.lock = lock;
      this.#held.push({ lock, release });
      return release;
    }

    /**
     * One try: resolves true when it took the lock (release it with release()), false when
     * someone else holds it. Other failures reject.
     */
    async tryAcquire(options) {
      try {
        await this.acquire({ ...options, waitMs: 0 });
        return true;
      } catch (e) {
        if (e instanceof NotAcquiredError) return false;
        throw e;
      }
    }

    /**
     * Releases this object's oldest hold. Rejects with LockLostError when that hold was lost
     * (never silent); resolves doing nothing when this object holds nothing.
     */
    async release() {
      if (this.#held.length > 0) await this.#held[0].release();
    }

    /**
     * Acquires, runs fn(lock, signal), releases; resolves with fn's result. As Client.using:
     * signal aborts when the lock is lost, and a loss while fn ran rejects with LockLostError.
     */
    async runExclusive(fn) {
      if (typeof fn !== 'function') {
        throw typeError('ERR_INVALID_ARG_TYPE', `fn must be a function, got ${describe(fn)}`);
      }
      const release = await this.acquire();
      return runHolding(release.lock, release, fn);
    }

    /**
     * Whether this object holds the lock now: acquired, not released, not found lost. (Whether
     * anybody holds it: client.inspect(name).)
     */
    isLocked() {
      return this.#held.some((h) => h.lock.valid);
    }

    /** isLocked(), under redis-semaphore's name. */
    get isAcquired() { return this.isLocked(); }

    /** This object's oldest hold (a Lock), or null. */
    get lock() { return this.#held[0]?.lock ?? null; }

    /** Rejects this object's pending acquires with CancelledError. Holds stay held. */
    cancel() {
      this.#cancel.abort(new CancelledError(`Mutex.cancel() on '${this.#name}'`));
      this.#cancel = new AbortController();
    }
  }

  /**
   * A counting semaphore over name: each acquire takes one of permits (at most permits holders),
   * or options.take of them (the constructor's options, or one acquire's).
   */
  class Semaphore extends Mutex {
    #permits;

    /** A semaphore of permits holders over name (also: client.semaphore(name, permits, options)). */
    constructor(client, name, permits, options) {
      if (typeof permits !== 'number') {
        throw typeError('ERR_INVALID_ARG_TYPE', `permits must be a number, got ${describe(permits)}`);
      }
      if (!Number.isInteger(permits) || permits < 1 || permits > 0xffffffff) {
        throw rangeError(`permits must be an integer from 1 to ${0xffffffff}, got ${permits}`);
      }
      super(client, name, { ...options, permits });
      this.#permits = permits;
    }

    get permits() { return this.#permits; }
  }

  return { Mutex, Semaphore };
}

module.exports = { makeMutex, anySignal };
