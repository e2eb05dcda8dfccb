'use strict';
// libdlock: distributed locks with fencing tokens and lease heartbeats (Node binding).
//
// A thin koffi layer over libdlock.so; see README.md. The library is loaded on first use (the
// first Client, version() or library()), not when the package is required: requiring it never
// fails, and a missing library is reported where it is needed, saying what to install.
//
// Every call that talks to the server is asynchronous. A one-try acquire, a release and an
// extend run as blocking C calls on libuv's thread pool (the shortest path: measured faster than
// a hop through the library's thread), at most POOL_MAX at once. Everything that may wait, and
// the overflow, goes through the library's async API on its own thread (one connection,
// pipelined), whose outcomes (and lost locks) come back through a dlock_queue: a pipe libuv
// watches on the JS thread. So the event loop never waits for the network, a thousand waiting
// acquires hold no thread each, and the library's thread (heartbeats) never waits for a busy JS
// thread.
//
// Every error the library reports carries its own message: the pool calls use the _errbuf forms,
// which hand it back in a buffer (dlock_last_error() belongs to the pool's thread), and popping
// the queue sets dlock_last_error() on the JS thread. Clients still open when the process exits
// are closed then, which releases their locks.
//
// Leader observers (client.observe) report on the JS thread: the addon's straight from
// dlock_observe on this thread's loop, the koffi path's through the same queue
// (dlock_observe_queued), popped with dlock_queue_pop_leader while any is running.
//
// Metrics (client.metricsText(), metrics(); registerMetrics in lib/metrics.js) and loss causes
// (lock.lostCause) are synchronous reads on either path. Client events (client.on('event')): the
// library's hook runs where the work was done, so the addon copies them for this thread, and the
// koffi path (whose work is done on the library's thread or libuv's pool, where JS must not be
// called) has them queued (dlock_client_set_event_queue) in the same queue, popped with
// dlock_queue_pop_event once any client listens; a pool call's events are drained before its
// promise settles, as the addon tells them before the caller resumes. The hook or queue is set
// when the first 'event' listener is added: a client nobody listens to pays nothing per lock.
//
// OpenTelemetry spans (lib/tracing.js's DlockInstrumentation) are made here, around the calls,
// where the caller's context is known: with no instrumentation enabled an acquire pays one null
// check, and @opentelemetry/api is never loaded.

const { EventEmitter, getEventListeners } = require('node:events');
const net = require('node:net');
const errors = require('./lib/errors');
const { makeMutex, anySignal } = require('./lib/mutex');
const metricsLib = require('./lib/metrics');
const tracing = require('./lib/tracing');

const {
  codes: S, statusName, errorFor,
  DlockError, NotAcquiredError, LockLostError, InvalidArgumentError, BackendError, CancelledError,
} = errors;

const INT64_MAX = 9223372036854775807n;
// The ABI's limits (DLOCK_MAX_NAME_BYTES, DLOCK_MAX_OWNER_BYTES; dlock_limit_value gives the
// same, which the tests check): constants, so they need no library.
const MAX_NAME_BYTES = 1024;
const MAX_OWNER_BYTES = 256;
const MAX_VALUE_BYTES = 4096;  // DLOCK_MAX_VALUE_BYTES: the longest value stored with a hold
const MAX_REASON_BYTES = 1024;  // DLOCK_MAX_REASON_BYTES: the longest reason breakLock() and requestRelease() take
const MAX_LOCK_DELAY_MS = 60000;  // DLOCK_MAX_LOCK_DELAY_MS: the longest options.lockDelayMs
const BREAK_NOW = 0x1;  // DLOCK_BREAK_NOW
// dlock_kind and the capability bits of dlock_client_capabilities, by the names this binding
// gives them (the library has numbers only).
const KINDS = ['exclusive', 'shared'];
const CAPABILITIES = [[0x1, 'fencingStrict'], [0x2, 'notifies'], [0x4, 'shared'], [0x8, 'permits'],
  [0x10, 'fair'], [0x20, 'observePush'], [0x40, 'break'], [0x80, 'minHold'], [0x100, 'lockDelay'],
  [0x200, 'releaseRequest']];

// ----- the library, on first use ---------------------------------------------------------------

let native = null;
let C = null;        // the library's functions (lib/native.js); null until loaded
let queue = null;    // the process's dlock_queue
// The addon (lib/addon.js, addon/dlock_node.c) when it loaded: clients then run on this
// thread's libuv loop, and acquire, release, extend and inspect go through it. null: the koffi
// path. Decided once, when the library loads; `native` says which.
let A = null;
let nativeKind = null;  // 'addon' | 'koffi'
let addonPath = null;
let addonReason = null; // why the koffi path, when it is taken

// Loads the library and sets up what the binding builds on it: once, on first use. Throws the
// loader's error (code ERR_DLOCK_LIBRARY: what was tried, what to install); a later call tries again.
function lib() {
  if (C !== null) return C;
  const n = require('./lib/native');
  if (!n.hasQueue || !n.hasErrbuf) {
    const e = new Error(`libdlock: ${n.libraryPath} (libdlock ${n.version}) lacks the ` +
      (n.hasQueue ? 'error-buffer calls (dlock_acquire_errbuf, ...)' : 'completion queue (dlock_queue_new, dlock_acquire_queued, ...)') +
      '; the Node binding needs them');
    e.code = 'ERR_DLOCK_LIBRARY';
    throw e;
  }
  const c = n.C;
  errors.setStatusNames((s) => c.status_str(s).replace(/^DLOCK_/, ''));
  const found = require('./lib/addon').find(n.libraryPath);  // throws only for DLOCK_NODE_ADDON=1
  const out = [null];
  const s = c.queue_new(out);
  if (s !== 0) throw errorFor(s, `libdlock: cannot create the completion queue: ${c.last_error()}`);
  const q = out[0];
  // The addon reports losses through this queue too (their message says why), on this thread.
  let addon = null;
  if (found.addon !== null) {
    try {
      if (!n.hasValues) throw new Error('the library lacks values and leader election (dlock_observe, ...)');
      found.addon.init(n.libraryPath, BigInt(n.koffi.address(q)), addonDone, flushRegistrations, regState,
        addonLeader, addonEvent);
      addon = found.addon;
    } catch (e) {
      if (process.env.DLOCK_NODE_ADDON === '1') {
        c.queue_free(q);
        e.code = 'ERR_DLOCK_ADDON';
        throw e;
      }
      found.reason = e.message;  // e.g. a worker thread: the main thread's environment has it
    }
  }
  const wakeFd = c.queue_fd_dup(q);  // close-on-exec: child processes do not inherit it
  if (wakeFd < 0) {
    const m = c.last_error();
    c.queue_free(q);
    throw errorFor(S.EIO, `libdlock: cannot watch the completion queue: ${m}`);
  }
  const wake = new net.Socket({ fd: wakeFd, readable: true, writable: false });
  wake.on('data', drain);
  wake.on('error', (e) => process.nextTick(() => { throw e; }));
  wake.unref();
  keeper = setInterval(() => {}, 0x7fffffff);
  keeper.unref();
  if (active > 0) keeper.ref();
  process.on('exit', closeAllOnExit);
  native = n;
  queue = q;
  A = addon;
  nativeKind = addon !== null ? 'addon' : 'koffi';
  addonPath = addon !== null ? found.path : null;
  addonReason = addon !== null ? null : found.reason;
  C = c;
  return C;
}

// The addon's outcomes (acquire, release, extend), inside the uv callback that read them; an
// acquire's lock comes with its fencing token and attempts.
function addonDone(id, status, lockPtr, message, token, attempts) {
  complete(id, status, lockPtr, message || '', token, attempts);
}

// The addon's observer reports (dlock_observe on this thread's loop): row is [owner,
// remainingMs, term, value] or null when nobody leads. Told once the library's call returned
// (a microtask, run as the uv callback ends), so that listeners run outside it: they may close
// the client.
function addonLeader(id, row) {
  const ob = observers.get(id);
  if (ob === undefined) return;
  const leader = row === null ? null : leaderOf(row[0], row[1], row[2], row[3]);
  queueMicrotask(() => report(ob, leader));
}

// A client's event (dlock_client_set_event_hook), on this thread once the library's call
// returned (the addon hands them over at the end of the uv callback that made them, or on the
// loop's next turn for those a JS call made): emitted as client 'event'.
function addonEvent(id, type, name, attempts, elapsedMs, token, status, detail) {
  const client = eventClients.get(id)?.deref();
  if (client === undefined) return;
  emitEvent(client, type, name, attempts, elapsedMs, token, status, detail);
}

function emitEvent(client, type, name, attempts, elapsedMs, token, status, detail) {
  client[kEvent]({
    type, name, attempts, elapsedMs, fencingToken: token === 0n ? null : token, status,
    code: status === 0 ? null : `ERR_DLOCK_${statusName(status)}`, detail, cause: type === 'lost' ? causeCode(detail) : null,
  });
}

// A queued event (koffi path: dlock_client_set_event_queue): ev is the library's copy, read
// and freed here; the same object as the addon's.
const eventTypeNames = [];
function queuedEventNow(id, ev) {
  if (!ev) return;
  const client = eventClients.get(id)?.deref();
  if (client === undefined) {
    C.event_free(ev);
    return;
  }
  let type, name, attempts, elapsedMs, token, status, detail;
  try {
    const t = C.event_type_of(ev);
    type = eventTypeNames[t] ??= C.event_type_name(t);
    name = C.event_lock_name(ev);
    attempts = C.event_attempts(ev);
    elapsedMs = Number(C.event_elapsed_ms(ev));
    token = BigInt(C.event_fencing_token(ev));
    status = C.event_status(ev);
    detail = C.event_detail(ev);
  } finally {
    C.event_free(ev);
  }
  emitEvent(client, type, name, attempts, elapsedMs, token, status, detail);
}

// After a call on libuv's pool, before its promise settles: the events it made are in the queue
// already (the library queued them before the call returned), and are told first, as the addon
// tells its events before the caller resumes.
function drainEvents() {
  if (queuedEvents) drain();
}

// A loss's cause in the library's messages: "lock 'x' was lost: CAUSE: details" (NOT_HELD
// errors), "lock 'x' (fencing token N) was lost: CAUSE: details" (loss reports).
const LOST_CAUSE = /' (?:\(fencing token \d+\) )?was lost: (deleted|taken_over|refused|expired|max_hold|broken): (.*)$/s;

// The stable code that starts a loss cause ("taken_over: ..." -> 'taken_over'), or null.
function causeCode(cause) {
  if (typeof cause !== 'string' || cause === '') return null;
  const i = cause.indexOf(':');
  return i < 0 ? cause : cause.slice(0, i);
}

// Metrics, loss causes and events need a library that has them (lib/native.js's hasMetrics).
function needMetrics(what) {
  if (!native.hasMetrics) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no metrics ` +
      '(dlock_client_metrics, dlock_lock_lost_cause, ...); install a newer one');
  }
}

// A max hold needs a library that has it (lib/native.js's hasMaxHold).
function needMaxHold(what) {
  if (!native.hasMaxHold) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no max hold ` +
      '(dlock_options_set_max_hold_ms) for options.maxHoldMs; install a newer one');
  }
}

// A min hold and a lock delay likewise (lib/native.js's hasMinHold, hasLockDelay).
function needMinHold(what) {
  if (!native.hasMinHold) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no min hold ` +
      '(dlock_options_set_min_hold_ms) for options.minHoldMs; install a newer one');
  }
}
function needLockDelay(what) {
  if (!native.hasLockDelay) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no lock delay ` +
      '(dlock_options_set_lock_delay_ms) for options.lockDelayMs; install a newer one');
  }
}

// Breaking a lock needs a library that has it (lib/native.js's hasBreak).
function needBreak(what) {
  if (!native.hasBreak) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} cannot break a ` +
      'lock (dlock_break_with); install a newer one');
  }
}

// Reentrancy likewise (lib/native.js's hasReentrant).
function needReentrant(what) {
  if (!native.hasReentrant) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no reentrancy ` +
      '(dlock_options_set_reentrant) for options.reentrant; install a newer one');
  }
}

// Taking several permits at once likewise (lib/native.js's hasTake).
function needTake(what) {
  if (!native.hasTake) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} cannot take several ` +
      'permits at once (dlock_options_set_take) for options.take; install a newer one');
  }
}

// Release requests need a library that has them (lib/native.js's hasReleaseRequest).
function needReleaseRequest(what) {
  if (!native.hasReleaseRequest) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no release ` +
      'requests (dlock_request_release, dlock_options_set_on_release_requested_queued); install a newer one');
  }
}

// Values and leader election need a library that has them (lib/native.js's hasValues).
function needValues(what) {
  if (!native.hasValues) {
    throw errorFor(S.EINVAL, `${what}: libdlock ${native.version} at ${native.libraryPath} has no values ` +
      'or leader election (dlock_options_set_value, dlock_observe, ...); install a newer one');
  }
}

// ----- errors -----------------------------------------------------------------------------------

function short(name) {
  const s = typeof name === 'string' ? name : `<${name.length} bytes>`;
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

// The error for an operation on a lock that the library reported (message: its own words, from
// dlock_last_error() on this thread, an error buffer or the queue), of the class its status
// names. Prefixed with the operation and the lock when the message does not name the lock itself
// (e.g. "the client was closed", a server's timeout).
function lockError(status, message, op, name, options) {
  let m = message || `DLOCK_${statusName(status)}`;
  if (typeof name !== 'string' || !m.includes(`'${name}'`)) m = `${op} of lock '${short(name)}': ${m}`;
  return errorFor(status, m, options);
}

function closedError() {
  return new InvalidArgumentError('client is closed');
}

// The operation an acquire's error names: a campaign is an acquire too.
function opName(o) {
  return o.campaign === true ? 'campaign' : 'acquire';
}

// Error buffers for the blocking calls that run on libuv's pool (dlock_*_errbuf): the library
// copies the message of a failure into one. A few are kept for reuse (at most POOL_MAX pool
// calls at once, plus client opens).
const ERRBUF_BYTES = MAX_NAME_BYTES + 1024;  // room for the longest lock name and the words around it
const errbufs = [];
function takeErrbuf() {
  return errbufs.pop() || Buffer.allocUnsafeSlow(ERRBUF_BYTES);
}
function giveErrbuf(buf) {
  if (errbufs.length < 8) errbufs.push(buf);
}
// The message that a failed call left in buf (NUL-terminated); buf goes back for reuse.
function errbufMessage(buf) {
  const end = buf.indexOf(0);
  const m = buf.toString('utf8', 0, end < 0 ? buf.length : end);
  giveErrbuf(buf);
  return m;
}

function typeError(code, message) {
  const e = new TypeError(message);
  e.code = code;
  return e;
}

function rangeError(message) {
  const e = new RangeError(message);
  e.code = 'ERR_OUT_OF_RANGE';
  return e;
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `type ${typeof v} (${String(v).slice(0, 40)})`;
}

// ----- argument checks: TypeError / RangeError like Node's own APIs ---------------------------

function checkMs(what, v, min, max = Number.MAX_SAFE_INTEGER) {
  if (typeof v === 'bigint') {
    if (v < BigInt(min) || v > 0xffffffffffffffffn) throw rangeError(`${what} is out of range: ${v}`);
    return v;
  }
  if (typeof v !== 'number') {
    throw typeError('ERR_INVALID_ARG_TYPE', `${what} must be a number (milliseconds), got ${describe(v)}`);
  }
  if (!Number.isInteger(v) || v < min || v > max) {
    throw rangeError(`${what} must be an integer from ${min} to ${max}, got ${v}`);
  }
  return v;
}

function checkName(name) {
  if (typeof name === 'string') {
    if (name.includes('\0')) throw typeError('ERR_INVALID_ARG_VALUE', 'lock name must not contain NUL characters');
    return name;
  }
  if (name instanceof Uint8Array) {
    if (name.includes(0)) throw typeError('ERR_INVALID_ARG_VALUE', 'lock name must not contain NUL bytes');
    const b = Buffer.alloc(name.length + 1);
    b.set(name);
    return b;  // NUL-terminated copy
  }
  throw typeError('ERR_INVALID_ARG_TYPE', `lock name must be a string or Buffer, got ${describe(name)}`);
}

// A value stored with a hold: a string (stored as UTF-8) or bytes (a Buffer or any Uint8Array),
// as the Uint8Array handed to the library; null for none. Its length is the library's to check
// (InvalidArgumentError naming the limit, MAX_VALUE_BYTES).
function checkValue(what, v) {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (v instanceof Uint8Array) return v;
  if (v === null) return null;
  throw typeError('ERR_INVALID_ARG_TYPE', `${what} must be a string, Buffer or Uint8Array, got ${describe(v)}`);
}

const OPTION_KEYS = new Set(['leaseMs', 'waitMs', 'heartbeatMs', 'maxHoldMs', 'minHoldMs', 'lockDelayMs',
  'retryMs', 'owner', 'reentrant', 'kind', 'shared', 'permits', 'take', 'fair', 'signal', 'value',
  'onReleaseRequested']);
// A campaign is an exclusive acquire that waits without limit: no kind, permits, take or waitMs.
const CAMPAIGN_KEYS = new Set(['leaseMs', 'heartbeatMs', 'maxHoldMs', 'minHoldMs', 'lockDelayMs', 'retryMs',
  'owner', 'reentrant', 'fair', 'signal', 'value', 'onReleaseRequested']);

function checkOptions(opts, keys = OPTION_KEYS) {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== 'object' || Array.isArray(opts)) {
    throw typeError('ERR_INVALID_ARG_TYPE', `options must be an object, got ${describe(opts)}`);
  }
  for (const k of Object.keys(opts)) {
    if (!keys.has(k)) {
      if (keys === CAMPAIGN_KEYS && OPTION_KEYS.has(k)) {
        throw typeError('ERR_INVALID_ARG_VALUE', `campaign takes no option '${k}': a leadership is exclusive ` +
          'and its campaign waits until it leads (for a bounded wait: acquire(name, { value, waitMs }))');
      }
      throw typeError('ERR_INVALID_ARG_VALUE', `unknown option '${k}' (known: ${[...keys].join(', ')})`);
    }
  }
  const o = {};
  if (opts.leaseMs !== undefined) o.leaseMs = checkMs('options.leaseMs', opts.leaseMs, 0);
  if (opts.waitMs !== undefined) {
    o.waitMs = opts.waitMs === Infinity ? -1 : checkMs('options.waitMs', opts.waitMs, -1);
  }
  if (opts.heartbeatMs !== undefined) o.heartbeatMs = checkMs('options.heartbeatMs', opts.heartbeatMs, 0);
  // 0 is none, the default: left out, so that it needs nothing of the library.
  if (opts.maxHoldMs !== undefined) {
    const m = checkMs('options.maxHoldMs', opts.maxHoldMs, 0);
    if (m !== 0 && m !== 0n) o.maxHoldMs = m;
  }
  if (opts.minHoldMs !== undefined) {
    const m = checkMs('options.minHoldMs', opts.minHoldMs, 0);
    if (m !== 0 && m !== 0n) o.minHoldMs = m;
  }
  if (opts.lockDelayMs !== undefined) {
    const m = checkMs('options.lockDelayMs', opts.lockDelayMs, 0);
    if (m !== 0 && m !== 0n) o.lockDelayMs = m;
  }
  if (opts.retryMs !== undefined) {
    if (!Array.isArray(opts.retryMs) || opts.retryMs.length !== 2) {
      throw typeError('ERR_INVALID_ARG_TYPE', 'options.retryMs must be a [minMs, maxMs] array');
    }
    o.retryMs = [checkMs('options.retryMs[0]', opts.retryMs[0], 0), checkMs('options.retryMs[1]', opts.retryMs[1], 0)];
  }
  if (opts.owner !== undefined) {
    if (typeof opts.owner !== 'string') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.owner must be a string, got ${describe(opts.owner)}`);
    }
    if (opts.owner.includes('\0')) throw typeError('ERR_INVALID_ARG_VALUE', 'options.owner must not contain NUL characters');
    o.owner = opts.owner;
  }
  if (opts.reentrant !== undefined && opts.reentrant !== null) {
    if (typeof opts.reentrant !== 'string') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.reentrant must be a string, got ${describe(opts.reentrant)}`);
    }
    if (opts.reentrant === '') {
      throw typeError('ERR_INVALID_ARG_VALUE', 'options.reentrant: the reentrant context is empty: name one ' +
        '(a request id, a job id), or leave it out to turn reentrancy off');
    }
    if (opts.reentrant.includes('\0')) {
      throw typeError('ERR_INVALID_ARG_VALUE', 'options.reentrant must not contain NUL characters');
    }
    o.reentrant = opts.reentrant;
  }
  if (opts.kind !== undefined) {
    if (!KINDS.includes(opts.kind)) {
      throw typeError('ERR_INVALID_ARG_VALUE', `options.kind must be one of ${KINDS.map((k) => `'${k}'`).join(', ')}, got ${describe(opts.kind)}`);
    }
    o.kind = KINDS.indexOf(opts.kind);
  }
  if (opts.shared !== undefined) {
    // shared: true is kind: 'shared', shared: false kind: 'exclusive'; saying both, they must agree.
    if (typeof opts.shared !== 'boolean') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.shared must be a boolean, got ${describe(opts.shared)}`);
    }
    const said = opts.shared ? 'shared' : 'exclusive';
    if (opts.kind !== undefined && opts.kind !== said) {
      throw typeError('ERR_INVALID_ARG_VALUE', `options.shared ${opts.shared} contradicts options.kind '${opts.kind}' (give one of them)`);
    }
    o.kind = KINDS.indexOf(said);
  }
  if (opts.permits !== undefined) {
    if (typeof opts.permits !== 'number') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.permits must be a number, got ${describe(opts.permits)}`);
    }
    if (!Number.isInteger(opts.permits) || opts.permits < 0 || opts.permits > 0xffffffff) {
      throw rangeError(`options.permits must be an integer from 0 to ${0xffffffff}, got ${opts.permits}`);
    }
    o.permits = opts.permits;
  }
  if (opts.take !== undefined) {
    if (typeof opts.take !== 'number') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.take must be a number, got ${describe(opts.take)}`);
    }
    if (!Number.isInteger(opts.take) || opts.take < 0 || opts.take > 0xffffffff) {
      throw rangeError(`options.take must be an integer from 0 to ${0xffffffff} (0: the library says why not), got ${opts.take}`);
    }
    // 0 goes to the library, whose InvalidArgumentError says why; 1 (the default) is left out,
    // so that it needs nothing of the library.
    if (opts.take !== 1) o.take = opts.take;
  }
  if (opts.fair !== undefined) {
    if (typeof opts.fair !== 'boolean') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.fair must be a boolean, got ${describe(opts.fair)}`);
    }
    o.fair = opts.fair;
  }
  if (opts.signal !== undefined) {
    if (!(opts.signal instanceof AbortSignal)) {
      throw typeError('ERR_INVALID_ARG_TYPE', 'options.signal must be an AbortSignal');
    }
    o.signal = opts.signal;
  }
  if (opts.value !== undefined && opts.value !== null) o.value = checkValue('options.value', opts.value);
  if (opts.onReleaseRequested !== undefined && opts.onReleaseRequested !== null) {
    if (typeof opts.onReleaseRequested !== 'function') {
      throw typeError('ERR_INVALID_ARG_TYPE',
        `options.onReleaseRequested must be a function, got ${describe(opts.onReleaseRequested)}`);
    }
    o.onReleaseRequested = opts.onReleaseRequested;
  }
  return o;
}

// lockMany()'s arguments: [the names (a copy), what checkName made of each, the options].
function checkMany(names, options) {
  if (!Array.isArray(names)) {
    throw typeError('ERR_INVALID_ARG_TYPE', `names must be an array of lock names, got ${describe(names)}`);
  }
  const list = Array.from(names);  // holes read as undefined: refused below
  const cnames = list.map((name, k) => {
    try {
      return checkName(name);
    } catch (e) {
      throw typeError(e.code, `names[${k}]: ${e.message}`);
    }
  });
  const o = checkOptions(options);
  if (o.minHoldMs !== undefined) {
    throw typeError('ERR_INVALID_ARG_VALUE', 'lockMany takes no option \'minHoldMs\': when a later name cannot ' +
      'be had, the names taken before are given back, and a min hold would leave them closed (all or none would ' +
      'not hold); take such names with acquire() one by one');
  }
  return [list, cnames, o];
}

// A name's bytes, as the library orders and compares them (UTF-8 for a string).
function nameBytes(name) {
  return typeof name === 'string' ? Buffer.from(name, 'utf8') : Buffer.from(name.buffer, name.byteOffset, name.byteLength);
}

// What is left of lockMany's wait (options.waitMs, started at `started`) for its next name: as
// dlock_acquire_many counts it, one try at least; 0 (one try) and -1 (no limit) stay as they are.
function waitLeft(waitMs, started) {
  if (waitMs === undefined) return -1;
  const spent = Math.floor(performance.now() - started);
  if (typeof waitMs === 'bigint') {
    if (waitMs <= 0n) return waitMs;
    const left = waitMs - BigInt(spent);
    return left > 0n ? left : 0n;
  }
  if (waitMs <= 0) return waitMs;
  return Math.max(0, waitMs - spent);
}

// lockMany's failure: the error of the name that could not be had, saying that none is held.
function allOrNone(e, names) {
  if (!(e instanceof DlockError)) return e;
  const all = names.map((name) => `'${short(name)}'`).join(', ');
  return errorFor(e.status, `${e.message}; none of locks ${all} is held (all or none)`,
    e.cause !== undefined ? { cause: e.cause } : undefined);
}

const BREAK_KEYS = new Set(['reason', 'now']);
const REQUEST_KEYS = new Set(['reason']);

// breakLock()'s options: { reason, now } as { reason: a NUL-terminated Buffer or null, flags };
// requestRelease()'s ({ reason }: keys REQUEST_KEYS) likewise, flags 0.
function checkBreakOptions(opts, keys = BREAK_KEYS) {
  if (opts === undefined || opts === null) return { reason: null, flags: 0 };
  if (typeof opts !== 'object' || Array.isArray(opts)) {
    throw typeError('ERR_INVALID_ARG_TYPE', `options must be an object, got ${describe(opts)}`);
  }
  for (const k of Object.keys(opts)) {
    if (!keys.has(k)) {
      throw typeError('ERR_INVALID_ARG_VALUE', `unknown option '${k}' (known: ${[...keys].join(', ')})`);
    }
  }
  let reason = null;
  if (opts.reason !== undefined && opts.reason !== null) {
    if (typeof opts.reason !== 'string') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.reason must be a string, got ${describe(opts.reason)}`);
    }
    if (opts.reason.includes('\0')) {
      throw typeError('ERR_INVALID_ARG_VALUE', 'options.reason must not contain NUL characters');
    }
    // Its length (at most MAX_REASON_BYTES) is the library's to check, in its words.
    reason = Buffer.from(`${opts.reason}\0`, 'utf8');
  }
  if (opts.now !== undefined && typeof opts.now !== 'boolean') {
    throw typeError('ERR_INVALID_ARG_TYPE', `options.now must be a boolean, got ${describe(opts.now)}`);
  }
  return { reason, flags: opts.now === true ? BREAK_NOW : 0 };
}

function checkCallback(cb) {
  if (typeof cb !== 'function') {
    throw typeError('ERR_INVALID_ARG_TYPE', `callback must be a function, got ${describe(cb)}`);
  }
}

// Calls a node-style callback outside the promise chain (its exceptions stay uncaught).
function settle(promise, cb) {
  promise.then((v) => process.nextTick(cb, null, v), (e) => process.nextTick(cb, e));
}

// ----- completions from the library -----------------------------------------------------------
// One dlock_queue for the process. Every queued call gets an integer tag; these tables turn tags
// back into JS. A DONE entry settles ops[tag]; a LOST entry tells lostRefs[tag]'s Lock, and so
// does a RELEASE_REQUESTED entry (a hold's release requests come under its loss tag).

// Values by tag, the tag made when the value is added: a Map of numbers without a Map's cost
// (two or three of them are added and deleted per lock cycle, and a Map of ever-growing keys
// keeps rebuilding its table). A tag is a slot index in its low bits and a sequence number
// above them: never 0, never reused before 2^30 more tags (the library may hand back a tag
// the table is done with: a loss report of a lock released meanwhile), and exact as a double.
const TAG_SLOTS = 2 ** 22;
const TAG_SEQ_MAX = 2 ** 30;
class TagTable {
  #tags = [];
  #values = [];
  #free = [];
  #seq = 0;
  #size = 0;

  add(value) {
    let slot = this.#free.pop();
    if (slot === undefined) {
      slot = this.#tags.length;
      if (slot >= TAG_SLOTS) throw rangeError(`more than ${TAG_SLOTS} operations pending`);
    }
    this.#seq = this.#seq >= TAG_SEQ_MAX ? 1 : this.#seq + 1;
    const tag = this.#seq * TAG_SLOTS + slot;
    this.#tags[slot] = tag;
    this.#values[slot] = value;
    this.#size++;
    return tag;
  }

  get(tag) {
    const slot = tag % TAG_SLOTS;
    return this.#tags[slot] === tag ? this.#values[slot] : undefined;
  }

  delete(tag) {
    const slot = tag % TAG_SLOTS;
    if (this.#tags[slot] !== tag) return false;
    this.#tags[slot] = 0;
    this.#values[slot] = undefined;
    this.#free.push(slot);
    this.#size--;
    return true;
  }

  get size() { return this.#size; }
}

const ops = new TagTable();       // tag -> (status, lockPtr, message, token, attempts) => void: pending operations
// tag -> { ref: WeakRef(Lock) | null, early: message | null, requests: reasons heard before the
// Lock existed | null, onRequest: options.onReleaseRequested | undefined }: may still be lost
const lostRefs = new TagTable();
const observers = new TagTable(); // tag -> Observer: observing (reports come under its tag)
let queuedObservers = 0;          // koffi path: observers whose reports come through the queue

// Pending operations keep the process alive (the queue's pipe is unref'd).
let active = 0;
let keeper = null;  // an unref'd interval, made when the library loads
function hold() { if (active++ === 0 && keeper !== null) keeper.ref(); }
function unhold() { if (--active === 0 && keeper !== null) keeper.unref(); }

const QUEUE_DONE = 1;
const QUEUE_LOST = 2;
const QUEUE_LEADER = 3;
const QUEUE_EVENT = 4;
const QUEUE_RELEASE_REQUESTED = 5;
const popTag = [0];
const popStatus = [0];
const popLock = [null];
const popLeader = [null];
const popEvent = [null];
let queuedEvents = false;  // koffi path: some client's events come through the queue

// Pops until the queue is empty. Reentrant: each entry's outputs are read before anything runs.
function drain() {
  for (;;) {
    // With clients' events on the koffi path, they are in the queue too (the longest pop takes
    // them, and observers' reports); with observers of the koffi path running, their reports
    // are (the longer pop takes them); with neither, plain pops drop any a cancelled observer
    // left behind.
    const kind = queuedEvents ? C.queue_pop_event(queue, popTag, popStatus, popLock, popLeader, popEvent)
      : queuedObservers === 0 ? C.queue_pop(queue, popTag, popStatus, popLock)
        : C.queue_pop_leader(queue, popTag, popStatus, popLock, popLeader);
    if (kind <= 0) return;
    const tag = popTag[0];
    if (kind === QUEUE_EVENT) {
      queuedEventNow(tag, popEvent[0]);
      continue;
    }
    if (kind === QUEUE_LEADER) {
      leaderNow(tag, popLeader[0]);
      continue;
    }
    if (kind === QUEUE_RELEASE_REQUESTED) {  // status 0; the entry's message is the reason
      releaseRequestedNow(tag, C.last_error());
      continue;
    }
    const status = popStatus[0];
    const message = status === 0 ? '' : C.last_error();
    if (kind === QUEUE_DONE) complete(tag, status, popLock[0], message);
    else if (kind === QUEUE_LOST) lostNow(tag, message);
  }
}

// A queued observer's report (koffi path): info is the library's snapshot (freed here), or null
// when nobody leads.
function leaderNow(tag, info) {
  let leader = null;
  if (info) {
    try {
      if (C.info_holders(info) > 0) leader = leaderOf(...holderRow(info, 0));
    } finally {
      C.info_free(info);
    }
  }
  const ob = observers.get(tag);
  if (ob !== undefined) report(ob, leader);
}

function complete(id, status, lockPtr, message, token, attempts) {
  const op = ops.get(id);
  if (op === undefined) {  // nobody waits for it any more: give back what we were handed
    if (lockPtr) {
      if (A !== null) A.release(lockPtr, 0);
      else C.release_queued(lockPtr, queue, 0);
    }
    return;
  }
  ops.delete(id);
  unhold();
  try {
    op(status, lockPtr, message, token, attempts);
  } catch (e) {
    process.nextTick(() => { throw e; });
  }
}

const kLost = Symbol('lost');
const kReleaseRequested = Symbol('releaseRequested');
// The Observer's own calls, for Client and the reports: not for users.
const kMake = Symbol('make');
const kStarted = Symbol('started');
const kReport = Symbol('report');
const kEnd = Symbol('end');
const kForget = Symbol('forget');
// The Client's own calls, for the event plumbing.
const kEvent = Symbol('event');
const kWantEvents = Symbol('wantEvents');
const { kSamples } = metricsLib;

// Clients whose events are on, by the id their hook (addon path) or queue tag (koffi path) was
// given: held weakly.
const eventClients = new Map();
let nextEventId = 0;

function lostNow(id, message) {
  const entry = lostRefs.get(id);
  if (entry === undefined) return;  // released meanwhile
  if (entry.ref === null) {  // lost before its Lock object exists: the constructor tells
    entry.early = message;
    return;
  }
  lostRefs.delete(id);
  const lock = entry.ref.deref();
  if (lock !== undefined) queueMicrotask(() => lock[kLost](message));  // a throwing listener must not stop the drain
}

// A release request for a hold that listens (options.onReleaseRequested), under its loss tag.
function releaseRequestedNow(id, reason) {
  const entry = lostRefs.get(id);
  if (entry === undefined) return;  // released or lost meanwhile
  if (entry.ref === null) {  // heard before its Lock object exists: the constructor tells
    (entry.requests ??= []).push(reason);
    return;
  }
  const lock = entry.ref.deref();
  if (lock !== undefined) queueMicrotask(() => lock[kReleaseRequested](reason));
}

// The loss-report entry of an acquire (lostRefs), carrying its release-request listener.
function lostEntry(o) {
  return { ref: null, early: null, requests: null, onRequest: o.onReleaseRequested };
}

// libuv's thread pool (4 threads unless UV_THREADPOOL_SIZE says otherwise) is shared with fs,
// dns and zlib: at most POOL_MAX of our blocking calls use it at once; beyond that, and for
// every call that may wait, the async API (pipelined on the library's own thread) takes over.
const POOL_MAX = 2;
let poolBusy = 0;

// Locks made on the addon path inside one of its uv callbacks wait here to be registered with
// lockRegistry until that callback ends: the addon calls flushRegistrations then, when
// regState[0] says some are waiting. A lock released before (taken and given back within one
// turn of the loop, as a short critical section is) never costs a registration, which is most
// of what a FinalizationRegistry costs. Meanwhile this array holds it: it cannot be collected
// before it is registered. regState: [locks waiting here, 1 while the addon is in a uv callback
// (written by the addon)].
const pendingRegistrations = [];
const regState = new Int32Array(2);
let flushRegistrations = null;  // set in class Lock (it reads the locks' private fields)
// Tracing (lib/tracing.js): a Lock's 'dlock.hold' span record, set and read; set in class Lock.
let setHold = null;
let holdOf = null;

// Forgotten handles: a Lock garbage-collected while held is released; a forgotten Client closed.
const lockRegistry = new FinalizationRegistry((st) => {
  lostRefs.delete(st.id);
  if (st.hold !== null) tracing.endHold(st.hold, 'collected');
  if (st.h !== null) {
    const h = st.h;
    st.h = null;
    if (A !== null) A.release(h, 0);
    else C.release_queued(h, queue, 0);
  }
});

// Every open client, as { h, busy } (busy: its blocking acquires on the pool, which use h), held
// weakly as far as the Client goes. When the process exits, each one still open is closed, which
// releases its locks: a forgotten lock does not stay held until its lease runs out. 'exit'
// handlers are synchronous, so this is the blocking dlock_client_close on the JS thread (about a
// round trip; bounded by the client's timeout_ms when the server does not answer: about three
// times it with a hung server). It adds nothing that keeps the process alive. A client with an
// acquire still running on the pool (exit() was called meanwhile) is left alone: closing it
// would free the handle that acquire uses.
const openClients = new Set();
function closeAllOnExit() {
  for (const rec of openClients) {
    openClients.delete(rec);
    if (rec.busy === 0) {
      try {
        if (A !== null) A.close(rec.h);
        else C.client_close(rec.h);
      } catch { /* exiting anyway */ }
    }
  }
}

const clientRegistry = new FinalizationRegistry((rec) => {
  if (!openClients.delete(rec)) return;
  if (A !== null) A.close(rec.h);
  else C.client_close.async(rec.h, () => {});
});

// One 'abort' listener per signal, whatever the number of acquires waiting on it (one shutdown
// signal for a thousand waiters must not look like a listener leak): signal -> their cancels.
const abortWatch = new WeakMap();
function watchAbort(signal, cancel) {
  let cancels = abortWatch.get(signal);
  if (cancels === undefined) {
    cancels = new Set();
    abortWatch.set(signal, cancels);
    const all = cancels;
    signal.addEventListener('abort', () => { for (const c of all) c(); }, { once: true });
  }
  cancels.add(cancel);
  return () => cancels.delete(cancel);
}

// ----- Client ---------------------------------------------------------------------------------

class Client extends EventEmitter {
  #h = null;
  #rec = null;       // { h, busy } in openClients; busy: blocking calls on the pool that use h
  #ready;
  #closed = false;
  #closing = null;
  #url;
  #drained = null;   // close() waits for the busy ones
  #waiting = new Set();  // addon path: ids of this client's pending acquires
  #observers = new Set();  // its Observers that have not ended: close() ends them
  #metricsRead = false;  // metrics were asked for (or registered): close() keeps the last ones
  #final = null;         // those last samples, once closed
  #events = false;       // 'event' listened for: the hook is set (once opened)
  #scheme;               // the URL's scheme, for spans (never the URL: it may hold a password)
  #holds = null;         // tracing: the open 'dlock.hold' spans of its locks (close() ends them)

  /**
   * Opens a client for the backend named by url; connecting happens in the background (see
   * ready()). Loads libdlock.so on first use: throws (code ERR_DLOCK_LIBRARY) when it cannot.
   */
  constructor(url) {
    super();
    if (typeof url !== 'string') {
      throw typeError('ERR_INVALID_ARG_TYPE', `url must be a string, got ${describe(url)}`);
    }
    if (url.includes('\0')) throw typeError('ERR_INVALID_ARG_VALUE', 'url must not contain NUL characters');
    lib();
    this.#url = urlShown(url);
    const colon = url.indexOf('://');
    this.#scheme = colon > 0 ? url.slice(0, colon).toLowerCase() : null;
    this.#ready = this.#open(url);
    this.#ready.catch(() => {});  // reported by ready() and by every call that needs the client
  }

  /** Opens a client and waits until it is connected. */
  static async connect(url) {
    const c = new Client(url);
    await c.ready();
    return c;
  }

  /** Resolves once connected; rejects with the reason it could not connect (EINVAL, EIO, EAUTH). */
  ready() {
    return this.#ready.then(() => this);
  }

  get closed() { return this.#closed; }

  async #open(url) {
    if (A !== null) return this.#openAddon(url);
    hold();
    try {
      const out = [null];
      const buf = takeErrbuf();
      const status = await new Promise((resolve, reject) => {
        C.client_open_errbuf.async(url, out, buf, buf.length, (err, s) => (err ? reject(err) : resolve(s)));
      });
      if (status !== 0) {
        // The library's words: the bad URL part, the address and why it cannot be reached, or
        // the user and the server's answer to the credentials (never the password).
        throw errorFor(status, errbufMessage(buf) || `cannot open ${this.#url}: DLOCK_${statusName(status)}`);
      }
      giveErrbuf(buf);
      if (this.#closed) {  // close() came first
        C.client_close.async(out[0], () => {});
        return;
      }
      this.#h = out[0];
      this.#rec = { h: out[0], busy: 0 };
      openClients.add(this.#rec);
      clientRegistry.register(this, this.#rec, this);
      if (this.#events) this.#setHook();
    } finally {
      unhold();
    }
  }

  // On the addon path: opened on this thread's loop. Connecting and checking the backend is one
  // blocking round trip on this thread (dlock_client_open_hooks has no async form), made after
  // the constructor's caller's synchronous code (a close() there skips it).
  async #openAddon(url) {
    hold();
    try {
      await null;
      if (this.#closed) return;
      const r = A.open(url);
      if (typeof r === 'number') {
        throw errorFor(r, A.lastError() || `cannot open ${this.#url}: DLOCK_${statusName(r)}`);
      }
      this.#h = r;
      this.#rec = { h: r, busy: 0 };
      openClients.add(this.#rec);
      clientRegistry.register(this, this.#rec, this);
      if (this.#events) this.#setHook();
    } finally {
      unhold();
    }
  }

  // ----- events

  // An 'event' listener is being added: sets the hook (addon path) or the event queue (koffi
  // path), once; at open when not open yet.
  [kWantEvents]() {
    if (this.#events) return;
    if (A === null && !native.hasQueuedEvents) {
      const e = new Error(`client 'event' listeners on the koffi path (${addonReason}) need a libdlock with ` +
        `queued events (dlock_client_set_event_queue); libdlock ${native.version} at ${native.libraryPath} ` +
        'has none: install a newer one, or take the addon path (dlock.native === \'addon\')');
      e.code = 'ERR_DLOCK_NO_EVENTS';
      throw e;
    }
    needMetrics("client 'event'");
    this.#events = true;
    if (this.#h !== null && !this.#closed) this.#setHook();
  }

  #setHook() {
    for (const [id, ref] of eventClients) {
      if (ref.deref() === undefined) eventClients.delete(id);
    }
    const id = ++nextEventId;
    eventClients.set(id, new WeakRef(this));
    const s = A !== null ? A.events(this.#h, id) : C.client_set_event_queue(this.#h, queue, id);
    if (s !== 0) {
      eventClients.delete(id);
      throw errorFor(s, `cannot set the event hook: ${A !== null ? A.lastError() : C.last_error()}`);
    }
    if (A === null) queuedEvents = true;  // from now on the drain pops events too
  }

  [kEvent](e) {
    try {
      this.emit('event', e);
    } catch (err) {
      process.nextTick(() => { throw err; });  // as a listener's throw in any emitter: uncaught
    }
  }

  // ----- metrics

  /**
   * The client's metrics in the Prometheus text exposition format (0.0.4), as a scrape handler
   * serves it (Content-Type: text/plain; version=0.0.4). docs/metrics.md lists the families.
   * Synchronous (a few microseconds, no round trip). After close(): its last counts.
   */
  metricsText() {
    const h = this.#metricsHandle('metricsText');
    if (h === null) {
      if (this.#final === null) throw closedError();  // closed before its metrics were read, or closing
      return metricsLib.renderText(this.#final);
    }
    if (A !== null) {
      const r = A.metricsText(h);
      if (typeof r === 'number') throw errorFor(r, `metricsText: ${A.lastError()}`);
      return r;
    }
    const needed = [0];
    let s = C.client_metrics_text(h, null, 0, needed);
    for (let tries = 0; s === 0 && tries < 8; tries++) {
      const buf = Buffer.allocUnsafe(Number(needed[0]) + 256);  // room for a label value appearing meanwhile
      s = C.client_metrics_text(h, buf, buf.length, needed);
      if (s === 0) return buf.toString('utf8', 0, Number(needed[0]));
      if (s === S.EINVAL && Number(needed[0]) >= buf.length) s = 0;  // it grew past the room: again
    }
    throw errorFor(s === 0 ? S.EINTERNAL : s, `metricsText: ${C.last_error()}`);
  }

  /**
   * The same metrics as samples, for code that feeds another metrics system: [{ family, type
   * ('counter' | 'gauge' | 'histogram'), help, name (the family's, or a histogram's _bucket,
   * _sum, _count), labels ({ kind: 'exclusive', outcome: 'acquired' }, a bucket's le), value }].
   */
  metrics() {
    const h = this.#metricsHandle('metrics');
    if (h !== null) return this.#readSamples(h);
    if (this.#final === null) throw closedError();  // closed before its metrics were read, or closing
    return this.#final.map((x) => ({ ...x, labels: { ...x.labels } }));
  }

  // For registerMetrics' scrapes: its samples, or null while closing or once closed with none
  // kept. Throws before it is open.
  [kSamples]() {
    const h = this.#metricsHandle('metrics');
    return h !== null ? this.#readSamples(h) : this.#final;
  }

  #readSamples(h) {
    let rows;
    if (A !== null) {
      rows = A.metrics(h);
      if (typeof rows === 'number') throw errorFor(rows, `metrics: ${A.lastError()}`);
    } else {
      const out = [null];
      const s = C.client_metrics(h, out);
      if (s !== 0) throw errorFor(s, `metrics: ${C.last_error()}`);
      const m = out[0];
      rows = [];
      try {
        const n = Number(C.metrics_count(m));
        for (let k = 0; k < n; k++) {
          rows.push([C.metrics_family(m, k), C.metrics_type(m, k), C.metrics_help(m, k), C.metrics_name(m, k),
            C.metrics_labels(m, k), C.metrics_value(m, k)]);
        }
      } finally {
        C.metrics_free(m);
      }
    }
    return metricsLib.samplesOf(rows);
  }

  // The handle to read metrics from, or null once closed (its last samples then, if kept).
  #metricsHandle(what) {
    needMetrics(what);
    this.#metricsRead = true;
    if (this.#closed) return null;
    if (this.#h === null) {
      throw new InvalidArgumentError(`${what}: the client is not connected yet (await client.ready() first)`);
    }
    return this.#h;
  }

  async #handle() {
    if (this.#h === null && !this.#closed) await this.#ready;
    if (this.#closed || this.#h === null) throw closedError();
    return this.#h;
  }

  /**
   * Acquires the lock called name, waiting without limit unless options.waitMs bounds it (0 =
   * one try) or options.signal aborts it. Returns a promise of a Lock, or with a callback
   * (err, lock) returns undefined. options: { leaseMs, waitMs, heartbeatMs, maxHoldMs, minHoldMs,
   * lockDelayMs, retryMs, owner, reentrant, kind, shared, permits, take, fair, signal, value, onReleaseRequested };
   * shared: true is kind: 'shared'. take: how many of the semaphore's permits this acquire takes at
   * once, all or none (default 1). maxHoldMs: the longest the heartbeats keep the hold (0 = none); past it the
   * lock ends with its lease and is lost with cause 'max_hold'. minHoldMs: the shortest the name
   * stays taken after the acquire, however the hold ends (an earlier release leaves it closed,
   * closedBy 'min_hold'). lockDelayMs: how long the name stays closed after the lease runs out
   * (closedBy 'lock_delay'; at most MAX_LOCK_DELAY_MS; a release has no delay).
   * onReleaseRequested: (lock, reason) => void, the Lock's first 'releaseRequested' listener: the
   * hold listens for release requests (Client.requestRelease()) while it is held.
   * reentrant: a context (a request id): while this client holds the name under the same
   * context, an acquire of it re-enters at once (no wait, a Lock of its own, the same fencing
   * token); only the release of the last of them frees the name.
   */
  acquire(name, options, callback) {
    if (typeof options === 'function' && callback === undefined) {
      callback = options;
      options = undefined;
    }
    if (callback !== undefined) {
      checkCallback(callback);
      const cname = checkName(name);
      const o = checkOptions(options);
      settle(this.#acquire(name, cname, o), callback);
      return undefined;
    }
    let cname;
    let o;
    try {
      cname = checkName(name);
      o = checkOptions(options);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#acquire(name, cname, o);
  }

  // Every acquire and campaign: in a 'dlock.acquire' span when an instrumentation is enabled.
  #acquire(name, cname, o) {
    if (tracing.state.active === null) return this.#acquireNow(name, cname, o);
    this.#holds ??= new Set();
    return tracing.traceAcquire(name, o, this.#scheme, this.#holds, () => this.#acquireNow(name, cname, o), setHold);
  }

  // The addon's common case (an open client, no aborted signal) without an async function's
  // frame and the extra turns of a promise that resolves to a promise; the rest below.
  #acquireNow(name, cname, o) {
    if (A !== null && this.#h !== null && !this.#closed && !o.signal?.aborted) {
      try {
        return this.#acquireAddon(this.#h, name, cname, o);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return this.#acquireSlow(name, cname, o);
  }

  async #acquireSlow(name, cname, o) {
    if (o.signal?.aborted) {
      throw new CancelledError(`${opName(o)} of lock '${short(name)}' was aborted`, { cause: o.signal.reason });
    }
    const h = this.#h !== null && !this.#closed ? this.#h : await this.#handle();
    if (A !== null) return this.#acquireAddon(h, name, cname, o);
    if (o.value !== undefined) needValues(opName(o));
    if (o.maxHoldMs !== undefined) needMaxHold(opName(o));
    if (o.minHoldMs !== undefined) needMinHold(opName(o));
    if (o.lockDelayMs !== undefined) needLockDelay(opName(o));
    if (o.onReleaseRequested !== undefined) needReleaseRequest(opName(o));
    if (o.reentrant !== undefined) needReentrant(opName(o));
    if (o.take !== undefined) needTake(opName(o));
    const waitMs = o.waitMs ?? -1;  // like `dlock exec` and flock: wait until it comes
    const opts = C.options_new();
    if (!opts) throw errorFor(S.ENOMEM, 'dlock_options_new: out of memory');
    let s = C.options_set_wait_ms(opts, waitMs);
    if (s === 0 && o.leaseMs !== undefined) s = C.options_set_lease_ms(opts, o.leaseMs);
    if (s === 0 && o.heartbeatMs !== undefined) s = C.options_set_heartbeat_ms(opts, o.heartbeatMs);
    if (s === 0 && o.maxHoldMs !== undefined) s = C.options_set_max_hold_ms(opts, o.maxHoldMs);
    if (s === 0 && o.minHoldMs !== undefined) s = C.options_set_min_hold_ms(opts, o.minHoldMs);
    if (s === 0 && o.lockDelayMs !== undefined) s = C.options_set_lock_delay_ms(opts, o.lockDelayMs);
    if (s === 0 && o.retryMs !== undefined) s = C.options_set_retry_ms(opts, o.retryMs[0], o.retryMs[1]);
    if (s === 0 && o.owner !== undefined) s = C.options_set_owner(opts, o.owner);
    if (s === 0 && o.reentrant !== undefined) s = C.options_set_reentrant(opts, o.reentrant);
    if (s === 0 && o.kind !== undefined) s = C.options_set_kind(opts, o.kind);
    if (s === 0 && o.permits !== undefined) s = C.options_set_permits(opts, o.permits);
    if (s === 0 && o.take !== undefined) s = C.options_set_take(opts, o.take);
    if (s === 0 && o.fair !== undefined) s = C.options_set_fair(opts, o.fair ? 1 : 0);
    if (s === 0 && o.value !== undefined) s = C.options_set_value(opts, o.value, o.value.length);
    const lost = lostEntry(o);
    const id = lostRefs.add(lost);  // the tag of its loss report (and of its release requests)
    if (s === 0) s = C.options_set_on_lost_queued(opts, queue, id);
    if (s === 0 && o.onReleaseRequested !== undefined) s = C.options_set_on_release_requested_queued(opts, queue, id);
    if (s !== 0) {
      const e = lockError(s, C.last_error(), opName(o), name);
      lostRefs.delete(id);
      C.options_free(opts);
      throw e;
    }
    try {
      // One try (no waiting): a blocking call on libuv's pool is the shortest path (no hop
      // through the library's thread). Anything that may wait uses the async API.
      if (Number(waitMs) === 0 && poolBusy < POOL_MAX) {
        const out = [null];
        const buf = takeErrbuf();
        const rec = this.#rec;
        rec.busy++;
        poolBusy++;
        let status;
        try {
          status = await new Promise((resolve) => {
            C.acquire_errbuf.async(h, cname, opts, out, buf, buf.length, (err, st) => {
              resolve(err ? -1 : st);  // settled first: its code runs after this callback, events first
              drainEvents();
            });
          });
        } finally {
          poolBusy--;
          this.#leave(rec);
        }
        if (status === 0) {
          giveErrbuf(buf);
          return new Lock(this, out[0], name, id, lost, BigInt(C.lock_fencing_token(out[0])), C.lock_attempts(out[0]));
        }
        if (status !== -1) throw lockError(status, errbufMessage(buf), opName(o), name);
        // koffi could not make the call (nothing was sent): the async way below
        if (this.#closed) throw closedError();
      }
      return await this.#acquireAsync(this.#h, name, cname, o, opts, id, lost);
    } catch (e) {
      lostRefs.delete(id);
      throw e;
    } finally {
      C.options_free(opts);
    }
  }

  #acquireAsync(h, name, cname, o, opts, lostTag, lost) {
    return new Promise((resolve, reject) => {
      const signal = o.signal;
      let unwatch = null;
      const id = ops.add((status, lockPtr, message) => {
        if (unwatch !== null) unwatch();
        if (status === 0) {
          resolve(new Lock(this, lockPtr, name, lostTag, lost, BigInt(C.lock_fencing_token(lockPtr)),
            C.lock_attempts(lockPtr)));
        } else if (status === S.ECANCELLED && signal?.aborted) {
          reject(new CancelledError(`${opName(o)} of lock '${short(name)}' was aborted (${message || 'cancelled'})`,
            { cause: signal.reason }));
        } else {
          reject(lockError(status, message, opName(o), name));
        }
      });
      const s = C.acquire_queued(h, cname, opts, queue, id);
      if (s !== 0) {
        ops.delete(id);
        reject(lockError(s, C.last_error(), opName(o), name));
        return;
      }
      hold();
      if (signal !== undefined) {
        const cancel = () => { if (this.#h !== null) C.acquire_cancel_queued(this.#h, queue, id); };
        // aborted while this acquire waited for the client to connect: no 'abort' event is to come
        if (signal.aborted) cancel();
        else unwatch = watchAbort(signal, cancel);
      }
    });
  }

  // The addon's acquire: dlock_acquire_async on this thread's loop, its outcome in the uv
  // callback that read it; losses through the queue, under their own tag.
  #acquireAddon(h, name, cname, o) {
    if (o.maxHoldMs !== undefined) needMaxHold(opName(o));
    if (o.minHoldMs !== undefined) needMinHold(opName(o));
    if (o.lockDelayMs !== undefined) needLockDelay(opName(o));
    if (o.onReleaseRequested !== undefined) needReleaseRequest(opName(o));
    if (o.reentrant !== undefined) needReentrant(opName(o));
    if (o.take !== undefined) needTake(opName(o));
    const lost = lostEntry(o);
    const lostTag = lostRefs.add(lost);
    const signal = o.signal;
    // Only an acquire that may wait has a place in a line that close() should give up first.
    const waits = o.waitMs !== 0;
    let unwatch = null;
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const id = ops.add((status, lockPtr, message, token, attempts) => {
      if (waits) this.#waiting.delete(id);
      if (unwatch !== null) unwatch();
      if (status === 0) {
        resolve(new Lock(this, lockPtr, name, lostTag, lost, token, attempts));
        return;
      }
      lostRefs.delete(lostTag);
      if (status === S.ECANCELLED && signal?.aborted) {
        reject(new CancelledError(`${opName(o)} of lock '${short(name)}' was aborted (${message || 'cancelled'})`,
          { cause: signal.reason }));
      } else if (status === S.ECANCELLED && this.#closed) {  // cancelled by close() (above)
        reject(lockError(status, 'the client was closed', opName(o), name));
      } else {
        reject(lockError(status, message, opName(o), name));
      }
    });
    const r = o.retryMs;
    let s;
    try {
      // A value is a 14th argument, a max hold a 15th, a min hold and a lock delay a 16th and
      // 17th, the tag of release requests an 18th (the loss tag), the reentrant context a 19th,
      // the take a 20th, passed only when there is one.
      if (o.take !== undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value, o.maxHoldMs, o.minHoldMs, o.lockDelayMs,
          o.onReleaseRequested !== undefined ? lostTag : undefined, o.reentrant, o.take);
      } else if (o.reentrant !== undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value, o.maxHoldMs, o.minHoldMs, o.lockDelayMs,
          o.onReleaseRequested !== undefined ? lostTag : undefined, o.reentrant);
      } else if (o.onReleaseRequested !== undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value, o.maxHoldMs, o.minHoldMs, o.lockDelayMs, lostTag);
      } else if (o.minHoldMs !== undefined || o.lockDelayMs !== undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value, o.maxHoldMs, o.minHoldMs, o.lockDelayMs);
      } else if (o.maxHoldMs !== undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value, o.maxHoldMs);
      } else if (o.value === undefined) {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair);
      } else {
        s = A.acquire(h, cname, id, lostTag, o.waitMs ?? -1, o.leaseMs, o.heartbeatMs, r?.[0], r?.[1], o.owner,
          o.kind, o.permits, o.fair, o.value);
      }
    } finally {
      if (s !== 0) {
        ops.delete(id);
        lostRefs.delete(lostTag);
      }
    }
    if (s !== 0) return Promise.reject(lockError(s, A.lastError(), opName(o), name));
    hold();
    if (waits) this.#waiting.add(id);
    if (signal !== undefined) {
      const cancel = () => { if (this.#h !== null) A.cancel(this.#h, id); };
      if (signal.aborted) cancel();
      else unwatch = watchAbort(signal, cancel);
    }
    return promise;
  }

  #leave(rec) {
    if (--rec.busy === 0 && this.#drained !== null) this.#drained();
  }

  /**
   * Who holds the lock called name now: a promise of { kind, holders, permits }, holders being
   * [{ owner, remainingMs, fencingToken, value }] (empty when free), permits the semaphore's size
   * (0 for a lock or a free name); or with a callback (err, info).
   * A snapshot read from the server (on libuv's pool), stale as soon as it arrives: never decide
   * from it whether to take the lock. Owner tokens are never shown, only the owner labels.
   */
  inspect(name, callback) {
    return this.#readCall(name, callback, false);
  }

  /**
   * The current leader of the election name (see campaign()): a promise of { owner, value, term,
   * remainingMs }, or null when nobody leads; or with a callback (err, leader). A snapshot, like
   * inspect()'s. InvalidArgumentError when the name is held shared or is a semaphore.
   */
  leader(name, callback) {
    return this.#readCall(name, callback, true);
  }

  #readCall(name, callback, leader) {
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#read(name, checkName(name), leader), callback);
      return undefined;
    }
    let cname;
    try {
      cname = checkName(name);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#read(name, cname, leader);
  }

  // inspect() (leader false) or leader() (true): one blocking read on libuv's pool.
  async #read(name, cname, leader) {
    const op = leader ? 'leader' : 'inspect';
    if (leader) needValues(op);
    await this.#handle();
    const h = this.#h;
    if (h === null) throw closedError();
    const rec = this.#rec;
    let kind;
    let permits;
    let rows;
    let closedMs = 0;
    let closedBy = '';
    if (A !== null) {
      // A blocking call on libuv's pool, which the library serves on this thread's loop.
      rec.busy++;  // close() waits for it
      let r;
      try {
        r = await new Promise((resolve) => A.inspect(h, cname, (st, v) => resolve([st, v]), leader));
      } finally {
        this.#leave(rec);
      }
      if (r[0] !== 0) throw lockError(r[0], r[1], op, name);
      [kind, permits, closedMs, closedBy, ...rows] = r[1];
    } else {
      // The library's dlock_leader has no _errbuf form: its message would stay on the pool's
      // thread. It is dlock_inspect and a check of what it found, made here in its words.
      rec.busy++;  // close() waits for it
      poolBusy++;
      const out = [null];
      const buf = takeErrbuf();
      let status;
      try {
        status = await new Promise((resolve, reject) => {
          C.inspect_errbuf.async(h, cname, out, buf, buf.length,
                                 (err, st) => (err ? reject(err) : resolve(st)));
        });
      } finally {
        poolBusy--;
        this.#leave(rec);
      }
      if (status !== 0) throw lockError(status, errbufMessage(buf), op, name);
      giveErrbuf(buf);
      const info = out[0];
      try {
        [kind, permits, closedMs, closedBy, rows] = infoParts(info);
      } finally {
        C.info_free(info);
      }
      if (leader && rows.length > 0 && (kind !== 0 || permits !== 0)) {
        throw new InvalidArgumentError(`'${typeof name === 'string' ? name : short(name)}' is ` +
          `${permits !== 0 ? 'a semaphore' : 'held shared'}, not an election`);
      }
    }
    if (leader) return rows.length > 0 ? leaderOf(...rows[0]) : null;
    return lockInfoOf(kind, permits, closedMs, closedBy, rows);
  }

  /**
   * An operator's takeover of the lock called name (dlock_break_with): deletes every hold of it
   * (exclusive, shared or semaphore), never its fencing counter, so the next token is greater
   * than every broken holder's. Each broken holder is reported lost with the cause 'broken' (its
   * 'lost' event, lock.lostCause 'broken: an operator broke the lock: REASON', LockLostError
   * cause 'broken') at its next renewal, so within its heartbeat period; one without heartbeats
   * at its next extend() or release(). options: { reason, now }. reason: the operator's words for
   * the holders (at most MAX_REASON_BYTES, 1024, bytes of UTF-8). now: false (the default) leaves
   * the name closed, with no holder, until the broken leases would have ended on the server
   * (inspect() shows closedMs > 0, closedBy 'broken'); true frees it at once, for a resource that
   * checks fencing tokens. A promise of a LockInfo of what it broke: its holders (owner,
   * fencingToken, what was left of each lease; empty when nobody held it) and closedMs, how long
   * the name now stays closed; or with a callback (err, info). One round trip, run on libuv's
   * pool as inspect(). InvalidArgumentError on a backend without the 'break' capability.
   */
  breakLock(name, options, callback) {
    if (typeof options === 'function' && callback === undefined) {
      callback = options;
      options = undefined;
    }
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#break(name, checkName(name), checkBreakOptions(options)), callback);
      return undefined;
    }
    let cname;
    let o;
    try {
      cname = checkName(name);
      o = checkBreakOptions(options);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#break(name, cname, o);
  }

  async #break(name, cname, o) {
    const op = 'break';
    await this.#handle();
    needBreak(op);
    const h = this.#h;
    if (h === null) throw closedError();
    const rec = this.#rec;
    if (A !== null) {
      rec.busy++;  // close() waits for it
      let r;
      try {
        r = await new Promise((resolve) => A.breakLock(h, cname, o.reason, o.flags, (st, v) => resolve([st, v])));
      } finally {
        this.#leave(rec);
      }
      if (r[0] !== 0) throw lockError(r[0], r[1], op, name);
      const [kind, permits, closedMs, closedBy, ...rows] = r[1];
      return lockInfoOf(kind, permits, closedMs, closedBy, rows);
    }
    // On libuv's pool: dlock_break_with_errbuf copies a refusal's message (the library's words)
    // into a buffer there. A library without it has only dlock_break_with, whose message would
    // stay on the pool's thread: what can be checked is then checked here, in this binding's
    // words, and what the server says is known only by its status.
    const errbuf = native.hasBreakErrbuf;
    if (!errbuf && (C.client_capabilities(h) & 0x40) === 0) {
      throw new InvalidArgumentError(`${op} of lock '${short(name)}': this backend cannot break a lock ` +
        "(no 'break' capability)");
    }
    if (!errbuf && o.reason !== null && o.reason.length - 1 > MAX_REASON_BYTES) {
      throw new InvalidArgumentError(`${op} of lock '${short(name)}': reason is ${o.reason.length - 1} bytes, ` +
        `over DLOCK_MAX_REASON_BYTES (${MAX_REASON_BYTES})`);
    }
    rec.busy++;  // close() waits for it
    poolBusy++;
    const out = [null];
    const buf = errbuf ? takeErrbuf() : null;
    let status;
    try {
      status = await new Promise((resolve, reject) => {
        const done = (err, st) => (err ? reject(err) : resolve(st));
        if (errbuf) C.break_with_errbuf.async(h, cname, o.reason, o.flags, out, buf, buf.length, done);
        else C.break_with.async(h, cname, o.reason, o.flags, out, done);
      });
    } finally {
      poolBusy--;
      this.#leave(rec);
    }
    if (status !== 0) {
      if (errbuf) throw lockError(status, errbufMessage(buf), op, name);
      throw lockError(status, `${op} of lock '${short(name)}' failed: DLOCK_${statusName(status)} ` +
        "(the library's message stays on libuv's pool thread on this path)", op, name);
    }
    if (errbuf) giveErrbuf(buf);
    const info = out[0];
    try {
      return lockInfoOf(...infoParts(info));
    } finally {
      C.info_free(info);
    }
  }

  /**
   * Asks every current holder of the lock called name to let go (dlock_request_release): a
   * cooperative takeover, short of breakLock(). Nothing is taken: a holder acquired with
   * options.onReleaseRequested hears it (its Lock emits 'releaseRequested' with the reason) and
   * may release, or not; holders acquired without it hear nothing. options: { reason }, at most
   * MAX_REASON_BYTES bytes of UTF-8. A promise of true when the name had holders to ask, false
   * when nobody holds it (nothing is sent); or with a callback (err, asked). true says the
   * request went out, not that it was heard: on Redis a holder hears it once its subscription
   * is live, a round trip after its acquire (a request sent before is missed: ask again). One
   * round trip, run on libuv's pool as inspect(). InvalidArgumentError on a backend without the
   * 'releaseRequest' capability.
   */
  requestRelease(name, options, callback) {
    if (typeof options === 'function' && callback === undefined) {
      callback = options;
      options = undefined;
    }
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#requestRelease(name, checkName(name), checkBreakOptions(options, REQUEST_KEYS)), callback);
      return undefined;
    }
    let cname;
    let o;
    try {
      cname = checkName(name);
      o = checkBreakOptions(options, REQUEST_KEYS);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#requestRelease(name, cname, o);
  }

  async #requestRelease(name, cname, o) {
    const op = 'requestRelease';
    await this.#handle();
    needReleaseRequest(op);
    const h = this.#h;
    if (h === null) throw closedError();
    const rec = this.#rec;
    rec.busy++;  // close() waits for it
    let status;
    let message;
    try {
      if (A !== null) {
        [status, message] = await new Promise((resolve) => A.requestRelease(h, cname, o.reason, (st, m) => resolve([st, m])));
      } else {
        // On libuv's pool: dlock_request_release_errbuf copies a failure's message into buf there.
        poolBusy++;
        const buf = takeErrbuf();
        try {
          status = await new Promise((resolve, reject) => {
            C.request_release_errbuf.async(h, cname, o.reason, buf, buf.length, (err, st) => (err ? reject(err) : resolve(st)));
          });
        } finally {
          poolBusy--;
        }
        message = status === 0 ? (giveErrbuf(buf), '') : errbufMessage(buf);
      }
    } finally {
      this.#leave(rec);
    }
    if (status === 0) return true;
    if (status === S.NOT_HELD) return false;
    throw lockError(status, message, op, name);
  }

  /**
   * Stands for leader of the election name and waits, without limit, until this candidate leads:
   * a promise of the leadership, a held Lock whose fencingToken is the term (greater than every
   * earlier term of the name). options: acquire()'s but waitMs, kind, shared, permits and take: { value,
   * leaseMs, heartbeatMs, maxHoldMs, minHoldMs, lockDelayMs, retryMs, owner, reentrant, fair, signal }; value (a string or bytes) is what it
   * proclaims, lock.setValue() replaces it, lock.release() resigns. options.signal withdraws the
   * candidacy (CancelledError). Or with a callback (err, lock).
   */
  campaign(name, options, callback) {
    if (typeof options === 'function' && callback === undefined) {
      callback = options;
      options = undefined;
    }
    if (callback !== undefined) {
      checkCallback(callback);
      const cname = checkName(name);
      const o = checkOptions(options, CAMPAIGN_KEYS);
      o.campaign = true;
      needValues('campaign');
      settle(this.#acquire(name, cname, o), callback);
      return undefined;
    }
    let cname;
    let o;
    try {
      cname = checkName(name);
      o = checkOptions(options, CAMPAIGN_KEYS);
      o.campaign = true;
      needValues('campaign');
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#acquire(name, cname, o);
  }

  /**
   * Observes the election name: an Observer (an EventEmitter and an async iterable) told who
   * leads, first as it stands, then at each change of leader or of the leader's value, as a
   * leader ({ owner, value, term, remainingMs }) or null when nobody leads.
   * `for await (const leader of client.observe(name, { signal }))`, or
   * `client.observe(name).on('change', (leader) => ...)`. It keeps the process alive until
   * observer.cancel() (or unref()), the signal aborts, a `for await` loop over it ends, or the
   * client closes.
   */
  observe(name, options) {
    const cname = checkName(name);
    if (options !== undefined && options !== null &&
        (typeof options !== 'object' || Array.isArray(options))) {
      throw typeError('ERR_INVALID_ARG_TYPE', `options must be an object, got ${describe(options)}`);
    }
    let signal;
    for (const k of Object.keys(options ?? {})) {
      if (k !== 'signal') throw typeError('ERR_INVALID_ARG_VALUE', `unknown option '${k}' (known: signal)`);
      signal = options.signal;
      if (signal !== undefined && !(signal instanceof AbortSignal)) {
        throw typeError('ERR_INVALID_ARG_TYPE', 'options.signal must be an AbortSignal');
      }
    }
    needValues('observe');
    const ob = new Observer(kMake, this, name, signal);
    if (ob.closed) return ob;  // the signal had aborted
    if (this.#closed) {  // as every call on a closed client: its 'error' event or its iterations say so
      ob[kEnd](closedError());
      return ob;
    }
    this.#observers.add(ob);
    const start = () => {
      if (ob.closed) return;
      if (this.#closed || this.#h === null) {
        ob[kEnd](null);  // closed meanwhile: ends as close() ends it
        return;
      }
      const id = observers.add(ob);
      let handle;
      let s;
      if (A !== null) {
        const r = A.observe(this.#h, cname, id);
        if (typeof r === 'number') s = r;
        else handle = r;
      } else {
        const out = [null];
        s = C.observe_queued(this.#h, cname, queue, id, out);
        if (s === 0) {
          handle = out[0];
          queuedObservers++;
        }
      }
      if (s !== undefined && s !== 0) {
        observers.delete(id);
        // Its events come after the caller's synchronous code (listeners, loops) as always.
        ob[kEnd](lockError(s, A !== null ? A.lastError() : C.last_error(), 'observe', name));
        return;
      }
      ob[kStarted](id, handle);
    };
    if (this.#h !== null && !this.#closed) {
      start();
    } else {
      this.#ready.then(start, (e) => ob[kEnd](e));
    }
    return ob;
  }

  // An observer that ended: close() no longer has it to end.
  [kForget](ob) {
    this.#observers.delete(ob);
  }

  /**
   * What the client's backend offers: a promise of { fencingStrict, notifies, shared, permits,
   * fair, observePush, break, minHold, lockDelay, releaseRequest } (booleans;
   * dlock_client_capabilities; break: breakLock(); minHold, lockDelay: options.minHoldMs,
   * options.lockDelayMs; releaseRequest: requestRelease(), options.onReleaseRequested).
   */
  async capabilities() {
    await this.#handle();
    if (this.#h === null) throw closedError();
    const bits = A !== null ? A.capabilities(this.#h) : C.client_capabilities(this.#h);
    return Object.fromEntries(CAPABILITIES.map(([bit, name]) => [name, (bits & bit) !== 0]));
  }

  /**
   * Acquires the lock (waiting as acquire() does), runs fn(lock, signal), and always releases
   * it. Resolves with fn's result. signal (lock.signal) aborts with a LockLostError when the lock
   * is found lost, so fn can hand it to fetch() or a database call. If fn succeeded but the lock
   * was lost meanwhile, rejects with LockLostError (never silent); if fn threw, with fn's error.
   *
   * With an array of names: lockMany(names, options), then fn(locks, signal), signal aborting
   * (with that lock's LockLostError) when any of them is lost; always releases them all
   * (Client.releaseMany), and if fn succeeded but some were lost meanwhile, rejects with the
   * LockLostError naming each lost one.
   */
  async using(name, options, fn) {
    if (typeof options === 'function' && fn === undefined) {
      fn = options;
      options = undefined;
    }
    if (typeof fn !== 'function') {
      throw typeError('ERR_INVALID_ARG_TYPE', `fn must be a function, got ${describe(fn)}`);
    }
    if (Array.isArray(name)) return runHoldingMany(await this.lockMany(name, options), fn);
    const lock = await this.acquire(name, options);
    return runHolding(lock, () => lock.release(), fn);
  }

  /**
   * Several names, all or none: a promise of their Locks, in the order the names were given, each
   * a Lock as acquire() makes it (its own fencing token, lease, heartbeats, 'lost' event and
   * signal; released alone or with Client.releaseMany; released by close()). Rejects when any
   * name cannot be had, and then holds none of them: what it had taken is given back before it
   * rejects, and the error (of the class the failing name's acquire had: NotAcquiredError,
   * CancelledError, ...) says so. The names are taken one at a time in one fixed order, bytewise
   * (their UTF-8 bytes), whatever order they are given in, so that callers asking for [a, b]
   * and [b, a] at once never wait on each other: dlock_acquire_many's order (not its one-call
   * first try on one Redis server or etcd: others may see some names taken meanwhile). options:
   * acquire()'s, for every name, but minHoldMs (a name given back would stay closed for it);
   * waitMs bounds the whole call (each name waits for what is left of it, one try at least);
   * signal cancels it, a wait included. A name given twice (also as a string and as its bytes)
   * or none is an InvalidArgumentError. Or with a callback (err, locks).
   *
   * Built on this binding's own acquire rather than on the blocking dlock_acquire_many: that
   * call would hold one of libuv's threads for the whole wait, could be neither cancelled nor
   * outwaited by close(), leaves its message on that thread (it has no _errbuf form), and
   * reports every name's loss under one tag.
   */
  lockMany(names, options, callback) {
    if (typeof options === 'function' && callback === undefined) {
      callback = options;
      options = undefined;
    }
    if (callback !== undefined) {
      checkCallback(callback);
      const [list, cnames, o] = checkMany(names, options);
      settle(this.#lockMany(list, cnames, o), callback);
      return undefined;
    }
    let list;
    let cnames;
    let o;
    try {
      [list, cnames, o] = checkMany(names, options);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#lockMany(list, cnames, o);
  }

  async #lockMany(names, cnames, o) {
    const n = names.length;
    if (n === 0) throw new InvalidArgumentError('lockMany: no lock names: name at least one lock');
    const keys = names.map(nameBytes);
    const order = keys.map((_, k) => k).sort((a, b) => Buffer.compare(keys[a], keys[b]));
    for (let k = 1; k < n; k++) {
      if (keys[order[k]].equals(keys[order[k - 1]])) {
        const twice = typeof names[order[k]] === 'string' ? names[order[k]] : names[order[k - 1]];
        throw new InvalidArgumentError(`lockMany: lock '${short(twice)}' is named twice`);
      }
    }
    const started = performance.now();
    const locks = new Array(n).fill(null);
    const taken = [];
    try {
      for (const k of order) {
        locks[k] = await this.#acquire(names[k], cnames[k], { ...o, waitMs: waitLeft(o.waitMs, started) });
        taken.push(locks[k]);
      }
    } catch (e) {
      // None, then: what was taken is given back, last first, before the caller hears of it (a
      // hold lost meanwhile is given back all the same).
      while (taken.length > 0) await taken.pop().release().catch(() => {});
      throw allOrNone(e, names);
    }
    return locks;
  }

  /**
   * Client.releaseMany(locks): releases every Lock of the array (each through its own client,
   * all at once) and resolves once all were released. When some were not held (lost, or
   * released already), rejects with one LockLostError whose message names each of them; when
   * some release failed otherwise, with an error of that failure's class naming every failure.
   * Either way every lock was let go (each Lock is released, as by its own release()), and
   * err.errors lists each lock's own error. Or with a callback (err).
   */
  static releaseMany(locks, callback) {
    if (callback !== undefined) {
      checkCallback(callback);
      settle(releaseGroup(checkLocks(locks)), callback);
      return undefined;
    }
    let list;
    try {
      list = checkLocks(locks);
    } catch (e) {
      return Promise.reject(e);
    }
    return releaseGroup(list);
  }

  /** Client.releaseMany(locks), as a method: each lock is released through its own client. */
  releaseMany(locks, callback) {
    return Client.releaseMany(locks, callback);
  }

  /**
   * A Mutex over the lock called name (acquire, tryAcquire, runExclusive, release, isLocked,
   * cancel), for code written against async-mutex or redis-semaphore. options: as acquire()'s.
   */
  mutex(name, options) {
    return new Mutex(this, name, options);
  }

  /**
   * A Semaphore of permits holders over name: a Mutex whose acquires take one of the permits
   * (options.take of them, given here or to one acquire).
   */
  semaphore(name, permits, options) {
    return new Semaphore(this, name, permits, options);
  }

  /**
   * Releases every lock this client holds, cancels pending acquires (ECANCELLED), closes its
   * connections and stops its thread. Returns a promise (or takes a callback). Idempotent.
   */
  close(callback) {
    if (!this.#closing) {
      this.#closed = true;
      for (const ob of this.#observers) ob[kEnd](null);  // their iterations end; no report after
      this.#observers.clear();
      this.#closing = (async () => {
        try {
          await this.#ready;
        } catch {
          return;  // never opened
        }
        const h = this.#h;
        if (h === null) return;
        this.#h = null;
        const rec = this.#rec;
        clientRegistry.unregister(this);
        if (rec.busy > 0) await new Promise((resolve) => { this.#drained = resolve; });
        if (this.#metricsRead) {
          // Its metrics were asked for: its last counts are what it reports from now on.
          try {
            this.#final = metricsLib.closedSamples(this.#readSamples(h));
          } catch { /* closing anyway */ }
        }
        openClients.delete(rec);  // (until here, an exit closes it)
        if (A !== null) {
          // Cancel the waiting acquires first and let the loop turn, so that their places in a
          // fair line are given up on the server before the connection goes (a close on the
          // loop's thread tears the connection down at once; reported to the library).
          if (this.#waiting.size > 0) {
            for (const id of this.#waiting) A.cancel(h, id);
            await new Promise((resolve) => setImmediate(resolve));
            await new Promise((resolve) => setImmediate(resolve));
          }
          A.close(h);  // on this thread; it lets go of the loop by itself
          return;
        }
        hold();
        try {
          await new Promise((resolve) => C.client_close.async(h, () => {
            resolve();
            drainEvents();  // what the close made (its cancelled acquires' events), told before close() settles
          }));
        } finally {
          unhold();
        }
      })().finally(() => {
        // Its locks were released with it: their spans end.
        if (this.#holds !== null) for (const rec of this.#holds) tracing.endHold(rec, 'closed');
      });
    }
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#closing, callback);
      return undefined;
    }
    return this.#closing;
  }

  toString() { return `Client(${this.#url}${this.#closed ? ', closed' : ''})`; }
}

// `await using client = ...` closes it at the end of the block.
if (typeof Symbol.asyncDispose === 'symbol') {
  Client.prototype[Symbol.asyncDispose] = function asyncDispose() { return this.close(); };
}

// Adding an 'event' listener sets the client's hook (not before: a client nobody listens to
// pays nothing per lock). Every way of adding one goes through these; events.on() and
// events.once() too.
for (const method of ['on', 'addListener', 'once', 'prependListener', 'prependOnceListener']) {
  const base = EventEmitter.prototype[method];
  Object.defineProperty(Client.prototype, method, {
    value: function addListener(event, listener) {
      if (event === 'event') this[kWantEvents]();
      return base.call(this, event, listener);
    },
    writable: true,
    configurable: true,
  });
}

// Runs fn(lock, lock.signal) and then release(), for using() and Mutex.runExclusive(): fn's
// result, or fn's error (released meanwhile, the release's error dropped), or the release's
// error (LockLostError when it was lost while fn ran: never silent). The signal is always made
// (an AbortController, about 2 us): guessing from fn.length would hand `(lock, signal = x)`,
// `(...args)` and wrapped functions no signal.
//
// With a 'dlock.hold' span (tracing), fn runs with it active: spans fn starts are its children.
async function runHolding(lock, release, fn) {
  let result;
  try {
    const rec = holdOf(lock);
    result = await (rec === null || rec.ended ? fn(lock, lock.signal)
      : tracing.withinHold(rec, () => fn(lock, lock.signal)));
  } catch (e) {
    if (!lock.released) await release().catch(() => {});
    throw e;
  }
  if (!lock.released) await release();
  return result;
}

// using([names], ...): fn(locks, signal), signal aborting (with that lock's LockLostError) when
// any lock is lost; then every lock fn did not release itself is released: fn's error if it
// threw (the releases' dropped), else the releases' (a LockLostError naming each lock lost
// meanwhile: never silent).
async function runHoldingMany(locks, fn) {
  const held = [...locks];
  const signal = anySignal(held.map((l) => l.signal));  // aborts when any of them is lost
  let result;
  try {
    result = await fn(locks, signal);
  } catch (e) {
    await releaseGroup(held.filter((l) => !l.released)).catch(() => {});
    throw e;
  }
  await releaseGroup(held.filter((l) => !l.released));
  return result;
}


// releaseMany()'s argument: an array of distinct Locks (a copy).
function checkLocks(locks) {
  if (!Array.isArray(locks)) {
    throw typeError('ERR_INVALID_ARG_TYPE', `locks must be an array of Locks, got ${describe(locks)}`);
  }
  const list = Array.from(locks);
  const seen = new Set();
  list.forEach((lock, k) => {
    if (!(lock instanceof Lock)) {
      throw typeError('ERR_INVALID_ARG_TYPE', `locks[${k}] must be a Lock, got ${describe(lock)}`);
    }
    if (seen.has(lock)) throw typeError('ERR_INVALID_ARG_VALUE', `locks[${k}] is given twice (${lock})`);
    seen.add(lock);
  });
  return list;
}

// Releases every lock at once, each by its own release(); rejects once all are done when some
// failed: with a LockLostError naming each lock that was not held when that is all that went
// wrong, else with the first other failure's class naming every failure (dlock_release_many's
// rules). err.errors: each lock's own error, in the order given.
async function releaseGroup(locks) {
  const outcomes = await Promise.allSettled(locks.map((l) => l.release()));
  const errors = outcomes.filter((r) => r.status === 'rejected').map((r) => r.reason);
  if (errors.length === 0) return;
  const words = errors.map((e) => e.message).join('; ');
  const other = errors.find((e) => !(e instanceof LockLostError));
  let err;
  if (other === undefined) {
    const causes = new Set(errors.map((e) => e.cause));
    const [cause] = causes;
    err = new LockLostError(`${errors.length} of ${locks.length} locks were not held: ${words}`,
      causes.size === 1 && cause !== undefined ? { cause } : undefined);
  } else if (other instanceof DlockError) {
    err = errorFor(other.status, `releasing ${locks.length} locks, ${errors.length} failed: ${words}`);
  } else {
    throw other;
  }
  err.errors = errors;
  throw err;
}

// url as the library shows it: any password replaced by "***" (dlock_url_redact).
function urlShown(url) {
  const n = Number(C.url_redact(url, null, 0));
  const buf = Buffer.alloc(n + 1);
  C.url_redact(url, buf, buf.length);
  return buf.toString('utf8', 0, n);
}

// Holder k of a dlock_info (koffi path) as [owner, remainingMs, fencingToken, value], the
// addon's form: value a Buffer (a copy), or null when the hold has none.
const valueLen = [0];
// A dlock_info (koffi path) as [kind, permits, closedMs, closedBy, rows], as the addon hands it.
function infoParts(info) {
  const rows = [];
  const n = C.info_holders(info);
  for (let k = 0; k < n; k++) rows.push(holderRow(info, k));
  const closedMs = native.hasBreak ? Number(C.info_closed_ms(info)) : 0;
  const closedBy = native.hasBreak ? C.info_closed_by(info) || '' : '';
  return [C.info_kind(info), C.info_permits(info), closedMs, closedBy, rows];
}

// inspect()'s and breakLock()'s answer.
function lockInfoOf(kind, permits, closedMs, closedBy, rows) {
  const holders = rows.map(([owner, left, token, value]) => ({
    owner: owner || null, remainingMs: left < 0 ? null : left, fencingToken: token === 0n ? null : token, value,
  }));
  return { kind: KINDS[kind] ?? kind, holders, permits, closedMs: Math.max(0, Number(closedMs)), closedBy };
}

function holderRow(info, k) {
  let value = null;
  if (native.hasValues) {
    const p = C.info_value(info, k, valueLen);
    const n = Number(valueLen[0]);
    if (p && n > 0) value = Buffer.from(new Uint8Array(native.koffi.view(p, n)));
  }
  return [C.info_owner(info, k) || '', Number(C.info_remaining_ms(info, k)), BigInt(C.info_fencing_token(info, k)),
    value];
}

// A leader, from a holder row's parts: its term is the fencing token of its hold (0n only for a
// hold dlock did not make).
function leaderOf(owner, left, term, value) {
  return { owner: owner || null, value, term, remainingMs: left < 0 ? null : left };
}

// Hands a report to its observer; what a listener throws becomes an uncaught exception without
// stopping the reports of others.
function report(ob, leader) {
  try {
    ob[kReport](leader);
  } catch (e) {
    process.nextTick(() => { throw e; });
  }
}

// ----- Lock -----------------------------------------------------------------------------------

/**
 * A held lock: an EventEmitter that emits 'lost' (once) if it is found lost in the background,
 * and whose signal aborts then. A loss that nothing listens for becomes a process warning.
 * Acquired with options.onReleaseRequested, it also emits 'releaseRequested' (lock, reason) each
 * time someone asks it to let go (Client.requestRelease()); the option is its first listener.
 */
class Lock extends EventEmitter {
  #st;           // { h: pointer or null, id }: shared with the finalizer
  #client;
  #reg = 0;      // lockRegistry: 0 not registered, 1 waiting in pendingRegistrations, 2 registered
  #busy = null;  // a blocking extend running on the pool: nothing else may use h meanwhile
  #ac = null;    // behind lock.signal, made when first asked for
  #lostError = null;

  // id: the tag of its loss reports (lostRefs); token, attempts: the library's, for ptr.
  constructor(client, ptr, name, id, lost, token, attempts) {
    super();
    this.#st = { h: ptr, id, hold: null };  // hold: its span's record, when traced
    this.#client = client;
    /** The name as given to acquire. */
    this.name = name;
    /** Fencing token (bigint): greater than every token issued before for this name. */
    this.fencingToken = token;
    /** How many tries the acquire took (1 = first try). */
    this.attempts = attempts;
    /** Set once the lock was found lost ('lost' emitted, signal aborted). */
    this.lost = false;
    lost.ref = new WeakRef(this);
    if (lost.early !== null) {
      // Lost before the caller even has it: tell once the caller's code after `await` ran (and
      // could listen); lock.lost and lock.signal say so meanwhile.
      lostRefs.delete(id);
      const message = lost.early;
      setImmediate(() => this[kLost](message));
    }
    // options.onReleaseRequested is the first 'releaseRequested' listener; requests heard
    // before this object existed are told once the caller's code after `await` ran.
    if (lost.onRequest !== undefined) {
      this.on('releaseRequested', lost.onRequest);
      lost.onRequest = undefined;
    }
    if (lost.requests !== null) {
      const reasons = lost.requests;
      lost.requests = null;
      setImmediate(() => { for (const reason of reasons) this[kReleaseRequested](reason); });
    }
    if (A !== null && regState[1] === 1) {  // registered when the addon's uv callback ends
      this.#reg = 1;
      pendingRegistrations.push(this);
      regState[0]++;
    } else {
      this.#reg = 2;
      lockRegistry.register(this, this.#st, this);
    }
  }

  static {
    flushRegistrations = () => {
      for (const lock of pendingRegistrations) {
        if (lock.#reg === 1) {
          lock.#reg = 2;
          lockRegistry.register(lock, lock.#st, lock);
        }
      }
      pendingRegistrations.length = 0;
      regState[0] = 0;
    };
    setHold = (lock, rec) => { lock.#st.hold = rec; };
    holdOf = (lock) => lock.#st.hold;
  }

  // Released: the finalizer has nothing to do for it any more.
  #unregister() {
    if (this.#reg === 2) {
      lockRegistry.unregister(this);
    } else if (this.#reg === 1 && --regState[0] === 0) {
      pendingRegistrations.length = 0;  // all released: nothing there to register
    }
    this.#reg = 0;
  }

  /** The Client that acquired it. */
  get client() { return this.#client; }

  /** True while the local deadline holds and the lock was not found lost. */
  get valid() {
    if (this.#st.h === null) return false;
    return A !== null ? A.valid(this.#st.h) : C.lock_is_valid(this.#st.h) === 1;
  }

  /** Milliseconds before the local deadline: Infinity for no expiry, 0 once lost or released. */
  get remainingMs() {
    if (this.#st.h === null) return 0;
    if (A !== null) return A.remaining(this.#st.h);
    const v = C.lock_remaining_ms(this.#st.h);
    return BigInt(v) === INT64_MAX ? Infinity : Number(v);
  }

  /** True once release() was called. */
  get released() { return this.#st.h === null; }

  /**
   * Why the lock is no longer valid: null while it is held and valid, else "CAUSE: details",
   * CAUSE a stable code (the cause label of dlock_losses_total). When the server no longer had
   * this owner's lock (a renewal, extend, release or setValue was refused), the library looks at
   * the name once more: 'deleted' (nobody holds it: deleted, or its lease ran out on the server;
   * or a shared or semaphore hold vanished while others stand), 'taken_over' (another owner
   * holds it; the details name its fencing token and label) or 'refused' (that look failed, or
   * still listed this hold). 'expired': renewals failed until the local deadline passed first.
   * 'max_hold': options.maxHoldMs passed, renewals stopped, and the lease ran out.
   * After release(): the cause it had been lost by, or null.
   */
  get lostCause() {
    const h = this.#st.h;
    // A blocking extend on the pool uses h (koffi path): the cause known so far.
    // Once known, the cause is kept in #st (added then: nothing more per lock before).
    if (h === null || this.#busy !== null || !native.hasMetrics) return this.#st.cause ?? null;
    const cause = A !== null ? A.lostCause(h) : C.lock_lost_cause(h);
    if (cause !== null) this.#st.cause = cause;
    return cause;
  }

  // The error of a call on this lock that failed (op: 'extend', 'setValue', 'release'; message
  // read once), with the cause of a loss.
  #failure(status, message, op) {
    return lockError(status, message, op, this.name, this.#lostOptions(status, message));
  }

  // The options of a LockLostError for a call on this lock that found it not held, or of its
  // loss report: its cause (err.cause: 'deleted', 'taken_over', 'refused', 'expired', 'max_hold'), when the
  // lock was lost. The library's message says it ("lock 'x' was lost: deleted: ..."), a
  // release's too, whose handle is gone by then; else the handle says it, while there is one.
  #lostOptions(status, message) {
    if (status !== S.NOT_HELD || !native.hasMetrics) return undefined;
    const said = LOST_CAUSE.exec(message ?? '');
    let cause;
    if (said !== null) {
      cause = `${said[1]}: ${said[2]}`;
      if (this.#st.h === null) this.#st.cause ??= cause;  // released: kept for lostCause
    } else {
      cause = this.lostCause;
    }
    const code = causeCode(cause);
    return code === null ? undefined : { cause: code };
  }

  /**
   * An AbortSignal that aborts, with a LockLostError as its reason, when the lock is found lost:
   * hand it to fetch(), a database driver, or anything else that takes one.
   */
  get signal() {
    if (this.#ac === null) {
      this.#ac = new AbortController();
      if (this.#lostError !== null) this.#ac.abort(this.#lostError);
    }
    return this.#ac.signal;
  }

  [kLost](message) {
    if (this.lost || this.#st.h === null) return;
    this.lost = true;
    const options = this.#lostOptions(S.NOT_HELD, message);
    const err = new LockLostError(message || `lock '${short(this.name)}' was lost`, options);
    this.#lostError = err;
    if (this.#st.hold !== null) tracing.endHold(this.#st.hold, 'lost', err);
    const listened = this.listenerCount('lost') > 0 ||
      (this.#ac !== null && getEventListeners(this.#ac.signal, 'abort').length > 0);
    if (!listened) {
      // Never silent: nothing in the program heard of it, so the process does (stderr by default).
      process.emitWarning(`${err.message} (fencing token ${this.fencingToken}); nothing listened for it, ` +
        'so the work it protected may have gone on without it', {
        type: 'LockLostWarning',
        code: 'DLOCK_LOCK_LOST',
        detail: "Listen for losses: lock.on('lost', (lock, err) => ...), or hand lock.signal (using()'s " +
          'second argument) to the work: fetch(), timers, database calls.',
      });
    }
    this.#ac?.abort(err);
    this.emit('lost', this, err);
  }

  [kReleaseRequested](reason) {
    if (this.lost || this.#st.h === null) return;  // lost or released meanwhile: nothing to let go
    this.emit('releaseRequested', this, reason);
  }

  #releasedError() {
    return new LockLostError(`lock '${short(this.name)}' was already released`);
  }

  /** Sets the lease to leaseMs from now (0 = no expiry). Rejects with LockLostError if it was lost. */
  extend(leaseMs, callback) {
    if (callback !== undefined) {
      checkCallback(callback);
      checkMs('leaseMs', leaseMs, 0);
      settle(this.#extend(leaseMs), callback);
      return undefined;
    }
    try {
      checkMs('leaseMs', leaseMs, 0);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#extend(leaseMs);
  }

  async #extend(leaseMs) {
    while (this.#busy !== null) await this.#busy;
    const h = this.#st.h;
    if (h === null) throw this.#releasedError();
    if (A !== null) {
      await new Promise((resolve, reject) => {
        const id = ops.add((status, _, message) => (status === 0 ? resolve()
          : reject(this.#failure(status, message, 'extend'))));
        const s = A.extend(h, leaseMs, id);
        if (s !== 0) {
          ops.delete(id);
          reject(this.#failure(s, A.lastError(), 'extend'));
          return;
        }
        hold();
      });
      return;
    }
    if (poolBusy < POOL_MAX) {
      poolBusy++;
      const buf = takeErrbuf();
      this.#busy = new Promise((resolve) => {
        C.extend_errbuf.async(h, leaseMs, buf, buf.length, (err, st) => {
          resolve(err ? -1 : st);  // settled first: its code runs after this callback, events first
          drainEvents();
        });
      });
      let status;
      try {
        status = await this.#busy;
      } finally {
        this.#busy = null;
        poolBusy--;
      }
      if (status === 0) {
        giveErrbuf(buf);
        return;
      }
      if (status !== -1) throw this.#failure(status, errbufMessage(buf), 'extend');
      // koffi could not make the call: the async way below
      if (this.#st.h === null) throw this.#releasedError();
    }
    await new Promise((resolve, reject) => {
      const id = ops.add((status, _, message) => (status === 0 ? resolve()
        : reject(this.#failure(status, message, 'extend'))));
      const s = C.extend_queued(this.#st.h, leaseMs, queue, id);
      if (s !== 0) {
        ops.delete(id);
        reject(this.#failure(s, C.last_error(), 'extend'));  // argument errors, or NOT_HELD on a closed client
        return;
      }
      hold();
    });
  }

  /**
   * Replaces the value stored with the hold (a string, stored as UTF-8, or bytes; null or empty
   * removes it): a leader's proclaim. The server checks the owner: a hold that was lost or taken
   * over rejects with LockLostError and writes nothing. The lease is left as it is.
   */
  setValue(value, callback) {
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#setValue(checkValue('value', value)), callback);
      return undefined;
    }
    let v;
    try {
      v = checkValue('value', value);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#setValue(v);
  }

  async #setValue(v) {
    needValues('setValue');
    while (this.#busy !== null) await this.#busy;  // a blocking extend still uses h
    const h = this.#st.h;
    if (h === null) throw this.#releasedError();
    await new Promise((resolve, reject) => {
      const id = ops.add((status, _, message) => (status === 0 ? resolve()
        : reject(this.#failure(status, message, 'setValue'))));
      // The async forms: the library copies the bytes before it returns.
      const s = A !== null ? A.setValue(h, v, id)
        : C.lock_set_value_queued(h, v, v === null ? 0 : v.length, queue, id);
      if (s !== 0) {
        ops.delete(id);
        reject(this.#failure(s, A !== null ? A.lastError() : C.last_error(), 'setValue'));
        return;
      }
      hold();
    });
  }

  /** Releases the lock. Rejects with LockLostError if it had been lost or was already released. */
  release(callback) {
    if (callback !== undefined) {
      checkCallback(callback);
      settle(this.#st.hold === null ? this.#release() : this.#releaseTraced(), callback);
      return undefined;
    }
    return this.#st.hold === null ? this.#release() : this.#releaseTraced();
  }

  // A release that ends the hold's span with its outcome.
  #releaseTraced() {
    const rec = this.#st.hold;
    const p = this.#release();
    tracing.afterRelease(rec, p);
    return p;
  }

  // The addon's release: the promise of its outcome, with no async function around it.
  #release() {
    const st = this.#st;
    if (A === null || this.#busy !== null) return this.#releaseSlow();
    const h = st.h;
    if (h === null) return Promise.reject(this.#releasedError());
    st.h = null;
    this.#unregister();
    return new Promise((resolve, reject) => {
      const id = ops.add((status, _, message) => {
        lostRefs.delete(st.id);  // released: on_lost is neither running nor going to run
        if (status === 0) resolve();
        else reject(this.#failure(status, message, 'release'));
      });
      const s = A.release(h, id);  // frees h whatever happens
      if (s !== 0) {
        ops.delete(id);
        lostRefs.delete(st.id);
        reject(this.#failure(s, A.lastError(), 'release'));
        return;
      }
      hold();
    });
  }

  async #releaseSlow() {
    const st = this.#st;
    if (st.h === null) throw this.#releasedError();
    while (this.#busy !== null) await this.#busy;  // a blocking extend still uses h
    const h = st.h;
    if (h === null) throw this.#releasedError();
    st.h = null;
    this.#unregister();
    if (A !== null) {
      await new Promise((resolve, reject) => {
        const id = ops.add((status, _, message) => {
          lostRefs.delete(st.id);  // released: on_lost is neither running nor going to run
          if (status === 0) resolve();
          else reject(this.#failure(status, message, 'release'));
        });
        const s = A.release(h, id);  // frees h whatever happens
        if (s !== 0) {
          ops.delete(id);
          lostRefs.delete(st.id);
          reject(this.#failure(s, A.lastError(), 'release'));
          return;
        }
        hold();
      });
      return;
    }
    if (poolBusy < POOL_MAX) {
      poolBusy++;
      const buf = takeErrbuf();
      let status;
      try {
        status = await new Promise((resolve) => {
          C.release_errbuf.async(h, buf, buf.length, (err, s) => {
            resolve(err ? -1 : s);  // settled first: its code runs after this callback, events first
            drainEvents();
          });
        });
      } finally {
        poolBusy--;
        lostRefs.delete(st.id);  // release returned: on_lost is neither running nor going to run
      }
      if (status === 0) {
        giveErrbuf(buf);
        return;
      }
      if (status !== -1) throw this.#failure(status, errbufMessage(buf), 'release');
      // koffi could not queue the call (h was not used): fall through
    }
    await new Promise((resolve, reject) => {
      const id = ops.add((status, _, message) => {
        lostRefs.delete(st.id);
        if (status === 0) resolve();
        else reject(this.#failure(status, message, 'release'));
      });
      const s = C.release_queued(h, queue, id);  // frees h whatever happens
      if (s !== 0) {
        ops.delete(id);
        lostRefs.delete(st.id);
        reject(this.#failure(s, C.last_error(), 'release'));
        return;
      }
      hold();
    });
  }

  /**
   * JSON.stringify(lock) and JSON.stringify({ token: lock }) give the fencing token as a decimal
   * string ("42"), lock.fencingToken.toString(): a bigint has no JSON form, and a string stays
   * exact for every reader (tokens go up to 2^53 - 1, past what some JSON parsers keep exact).
   */
  toJSON() { return this.fencingToken.toString(); }

  toString() {
    const state = this.released ? 'released' : this.valid ? 'held' : 'lost';
    return `Lock('${short(this.name)}', token ${this.fencingToken}, ${state})`;
  }
}

// `await using lock = await client.acquire(...)` releases it at the end of the block; a lock
// lost meanwhile makes that throw LockLostError (never silent), one released already does not.
if (typeof Symbol.asyncDispose === 'symbol') {
  Lock.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    if (!this.released) await this.release();
  };
}

// ----- Observer -------------------------------------------------------------------------------

// One iteration over an Observer: the reports it has not taken yet, and the next() calls waiting.
function iterPush(it, leader) {
  const w = it.waiters.shift();
  if (w !== undefined) w.resolve({ value: leader, done: false });
  else it.queue.push(leader);
}

/**
 * Who leads an election, as it changes (client.observe(name, { signal })): an EventEmitter that
 * emits 'change' (leader or null) at each report, and an async iterable of the same reports,
 * each iteration starting with the latest. 'close' once it stopped (cancel(), the signal, the
 * end of a `for await` loop over it, the client's close()); 'error' if it could not start.
 */
class Observer extends EventEmitter {
  #client;
  #id = 0;             // its tag in observers, once observing
  #h = null;           // the library's observer: an external (addon) or a pointer (koffi)
  #state = undefined;  // the latest report: a leader, null (nobody leads), undefined (none yet)
  #ended = false;
  #error = null;       // what ended it, for iterations: a start failure, or CancelledError (the signal)
  #iterators = new Set();
  #iterated = 0;
  #refd = true;
  #unwatch = null;

  constructor(token, client, name, signal) {
    if (token !== kMake) throw new TypeError('Illegal constructor: use client.observe(name)');
    super();
    this.#client = client;
    /** The election's name, as given to observe(). */
    this.name = name;
    hold();  // observing keeps the process alive (unref() lets it go)
    if (signal !== undefined) {
      const abort = () => this[kEnd](new CancelledError(`observe of lock '${short(name)}' was aborted`,
        { cause: signal.reason }), true);
      if (signal.aborted) abort();
      else this.#unwatch = watchAbort(signal, abort);
    }
  }

  /** The Client that observes. */
  get client() { return this.#client; }

  /** The latest report: a leader, null when nobody leads, undefined before the first. */
  get leader() { return this.#state; }

  /** True once it stopped: cancel(), its signal, the end of a loop over it, the client's close(). */
  get closed() { return this.#ended; }

  /** Stops observing: no report after it returns; iterations end. Idempotent. */
  cancel() {
    this[kEnd](null);
  }

  /** Lets the process exit while it observes (as a timer's unref()); returns this. */
  unref() {
    if (this.#refd) {
      this.#refd = false;
      if (!this.#ended) unhold();
    }
    return this;
  }

  /** Keeps the process alive while it observes again (the default); returns this. */
  ref() {
    if (!this.#refd) {
      this.#refd = true;
      if (!this.#ended) hold();
    }
    return this;
  }

  [kStarted](id, handle) {
    this.#id = id;
    this.#h = handle;
  }

  [kReport](leader) {
    if (this.#ended) return;
    this.#state = leader;
    for (const it of this.#iterators) iterPush(it, leader);
    this.emit('change', leader);
  }

  // Ends it: err null (cancel, close), a start failure, or the signal's CancelledError (aborted).
  [kEnd](err, aborted = false) {
    if (this.#ended) return;
    this.#ended = true;
    this.#error = err;
    if (this.#unwatch !== null) this.#unwatch();
    this.#unwatch = null;
    if (this.#id !== 0) observers.delete(this.#id);
    const h = this.#h;
    this.#h = null;
    if (h !== null) {
      if (A !== null) {
        A.unobserve(h);
      } else {
        C.observer_cancel(h);  // reports it left in the queue are dropped by the drain
        queuedObservers--;
      }
    }
    if (this.#refd) unhold();
    this.#client[kForget](this);
    for (const it of this.#iterators) {
      for (const w of it.waiters.splice(0)) {
        if (err !== null && !it.failed) {
          it.failed = true;
          w.reject(err);
        } else {
          w.resolve({ value: undefined, done: true });
        }
      }
    }
    this.#iterators.clear();
    // As fs.FSWatcher's close(): the events come after the caller's code.
    process.nextTick(() => {
      if (err !== null && !aborted && (this.#iterated === 0 || this.listenerCount('error') > 0)) {
        this.emit('error', err);
      }
      this.emit('close');
    });
  }

  /**
   * The reports as an async iterator: the latest first (when there is one yet), then each one
   * after it. Leaving a `for await` loop over it (break, return, a throw) cancels the observer.
   * An aborted signal makes it reject with CancelledError; cancel() and close() end it.
   */
  [Symbol.asyncIterator]() {
    const it = { queue: [], waiters: [], failed: false, done: false };
    this.#iterated++;
    if (this.#state !== undefined) it.queue.push(this.#state);
    if (!this.#ended) this.#iterators.add(it);
    const next = () => {
      if (it.queue.length > 0) return Promise.resolve({ value: it.queue.shift(), done: false });
      if (it.done || this.#ended) {
        it.done = true;
        if (this.#error !== null && !it.failed) {
          it.failed = true;
          return Promise.reject(this.#error);
        }
        return Promise.resolve({ value: undefined, done: true });
      }
      return new Promise((resolve, reject) => it.waiters.push({ resolve, reject }));
    };
    const stop = () => {
      it.done = true;
      it.queue.length = 0;
      this.#iterators.delete(it);
      this.cancel();
    };
    return {
      next,
      return(value) {
        stop();
        return Promise.resolve({ value, done: true });
      },
      [Symbol.asyncIterator]() { return this; },
    };
  }

  toString() {
    return `Observer('${short(this.name)}', ${this.#ended ? 'closed' : 'observing'})`;
  }
}

// `using observer = client.observe(name)` (or `await using`) cancels it at the end of the block.
if (typeof Symbol.dispose === 'symbol') {
  Observer.prototype[Symbol.dispose] = function dispose() { this.cancel(); };
}
if (typeof Symbol.asyncDispose === 'symbol') {
  Observer.prototype[Symbol.asyncDispose] = async function asyncDispose() { this.cancel(); };
}

const { Mutex, Semaphore } = makeMutex({ Client, checkName, checkOptions, typeError, rangeError, describe, runHolding });

/**
 * Makes a prom-client registry's metrics() include client's families (lib/metrics.js):
 * registerMetrics(client, registry = prom-client's default register, { labels }). Returns
 * unregister().
 */
const registerMetrics = metricsLib.makeRegisterMetrics({ Client, typeError, describe, needMetrics });

/** The library's version, "MAJOR.MINOR.PATCH" (loads the library). */
function version() { return lib().version(); }

/**
 * Which libdlock was loaded, its version, and the path the binding takes to it: { path, version,
 * native: 'addon' | 'koffi', addon: the dlock.node loaded or null, reason: why koffi, or null }
 * (loads the library).
 */
function library() {
  lib();
  return { path: native.libraryPath, version: native.version, native: nativeKind, addon: addonPath, reason: addonReason };
}

module.exports = {
  Client,
  Lock,
  Observer,
  Mutex,
  Semaphore,
  DlockError,
  NotAcquiredError,
  LockLostError,
  InvalidArgumentError,
  BackendError,
  CancelledError,
  version,
  library,
  registerMetrics,
  DlockInstrumentation: tracing.DlockInstrumentation,
  codes: S,
  MAX_NAME_BYTES,
  MAX_OWNER_BYTES,
  MAX_VALUE_BYTES,
  MAX_REASON_BYTES,
  MAX_LOCK_DELAY_MS,
};
// Kept from dlock 0.1 for CommonJS: the loaded library's path (loads it). library().path is the
// same in both module systems (an ES module's named export cannot load anything on first read).
Object.defineProperty(module.exports, 'libraryPath', { get: () => library().path, enumerable: false });
// 'addon' (dlock.node: clients on this thread's libuv loop) or 'koffi' (the library's own thread,
// through koffi): loads the library, like library(), whose `native` is the same.
Object.defineProperty(module.exports, 'native', { get: () => library().native, enumerable: false });
// For the tests.
Object.defineProperty(module.exports, '_internals', {
  enumerable: false,
  value: {
    ops, lostRefs, observers, lockError, activeCount: () => active, poolBusy: () => poolBusy,
    queuedObservers: () => queuedObservers,
    openClients: () => openClients.size, loaded: () => C !== null, addon: () => A,
    statusError: (s) => errorFor(s),
  },
});
