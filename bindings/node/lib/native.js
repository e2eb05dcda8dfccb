'use strict';
// Finds and loads libdlock.so with koffi and declares the C ABI (include/dlock/dlock.h). index.js
// requires this file on first use, not when the package is required: an app that imports the
// package but never locks, or sets DLOCK_LIBRARY after its imports, loads nothing early.
//
// Search order (the first that loads wins):
//   1. $DLOCK_LIBRARY, a path: explicit, so nothing else is tried when it fails;
//   2. the library bundled in the npm tarball (scripts: bindings/node/pack.sh):
//      prebuilds/<platform>-<arch>/libdlock.so.0 in this package, when present;
//   3. `pkg-config --variable=libdir dlock` (a source install, libdlock-dev);
//   4. the system's loader path (libdlock.so.0, the SONAME: Debian's libdlock0).
// No other library is loaded: no libc of our own (the queue's close-on-exec descriptor comes
// from dlock_queue_fd_dup).
//
// Pointers are koffi externals. The binding passes small integer tags through the library's
// completion queue, never JS objects, and registers no callbacks.

const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const koffi = require('koffi');

const SONAME = 'libdlock.so.0';
const BUNDLED = path.join(__dirname, '..', 'prebuilds', `${process.platform}-${process.arch}`, SONAME);
// What to do about it, for the error when nothing loads.
const INSTALL_HINT = 'Install libdlock: `apt install libdlock0` (the .deb that scripts/package builds), or ' +
  'install the libdlock npm tarball that bundles it (prebuilds/linux-x64, built by bindings/node/pack.sh), ' +
  'or set DLOCK_LIBRARY to the path of libdlock.so';

function candidates() {
  const env = process.env.DLOCK_LIBRARY;
  if (env) return { list: [['DLOCK_LIBRARY', env]], explicit: true };
  const list = [];
  if (fs.existsSync(BUNDLED)) list.push(['bundled', BUNDLED]);
  try {
    const libdir = execFileSync('pkg-config', ['--variable=libdir', 'dlock'], {
      encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10000,
    }).trim();
    if (libdir) {
      for (const name of [SONAME, 'libdlock.so']) {
        const p = path.join(libdir, name);
        if (fs.existsSync(p)) { list.push(['pkg-config libdir', p]); break; }
      }
    }
  } catch { /* no pkg-config, or no dlock.pc: fall through */ }
  list.push(['system loader path', SONAME]);
  return { list, explicit: false };
}

function load() {
  const { list, explicit } = candidates();
  const tried = [];
  for (const [where, p] of list) {
    try {
      return { lib: koffi.load(p), path: p };
    } catch (e) {
      tried.push(`${where} (${p}): ${e.message}`);
      if (explicit) break;
    }
  }
  let hint = INSTALL_HINT;
  // The bundled file is there but would not load: most likely a library it needs is missing.
  if (!explicit && fs.existsSync(BUNDLED)) {
    hint += '. The bundled library needs the libraries it links from the system (Debian: `apt-get install ' +
      'libcurl4 libevent-core-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libhiredis0.14 libpq5 libssl3`)';
  }
  const e = new Error(`libdlock: cannot load libdlock.so. ${hint}. Tried: ${tried.join('; ')}`);
  e.code = 'ERR_DLOCK_LIBRARY';
  throw e;
}

const { lib, path: libraryPath } = load();

const f = (sig) => lib.func(sig);
const C = {
  status_str: f('const char *dlock_status_str(int s)'),
  last_error: f('const char *dlock_last_error(void)'),
  version: f('const char *dlock_version(void)'),
  client_open: f('int dlock_client_open(const char *url, _Out_ void **out)'),
  client_close: f('void dlock_client_close(void *c)'),
  options_new: f('void *dlock_options_new(void)'),
  options_free: f('void dlock_options_free(void *o)'),
  options_set_lease_ms: f('int dlock_options_set_lease_ms(void *o, uint64_t ms)'),
  options_set_heartbeat_ms: f('int dlock_options_set_heartbeat_ms(void *o, uint64_t ms)'),
  options_set_wait_ms: f('int dlock_options_set_wait_ms(void *o, int64_t ms)'),
  options_set_retry_ms: f('int dlock_options_set_retry_ms(void *o, uint64_t min_ms, uint64_t max_ms)'),
  options_set_owner: f('int dlock_options_set_owner(void *o, const char *owner)'),
  // Blocking calls: the binding runs these (in their _errbuf forms, below) only on libuv's
  // thread pool (koffi's .async), and only for calls that cannot wait for another holder. On
  // the JS thread it calls only dlock_client_close, when the process exits.
  lock_fencing_token: f('uint64_t dlock_lock_fencing_token(void *l)'),
  lock_is_valid: f('int dlock_lock_is_valid(void *l)'),
  lock_remaining_ms: f('int64_t dlock_lock_remaining_ms(void *l)'),
  lock_attempts: f('uint32_t dlock_lock_attempts(void *l)'),
  options_set_kind: f('int dlock_options_set_kind(void *o, int kind)'),
  options_set_permits: f('int dlock_options_set_permits(void *o, uint32_t n)'),
  options_set_fair: f('int dlock_options_set_fair(void *o, int fair)'),
  client_capabilities: f('uint32_t dlock_client_capabilities(void *c)'),
  info_free: f('void dlock_info_free(void *i)'),
  info_holders: f('uint32_t dlock_info_holders(void *i)'),
  info_owner: f('const char *dlock_info_owner(void *i, uint32_t k)'),
  info_remaining_ms: f('int64_t dlock_info_remaining_ms(void *i, uint32_t k)'),
  info_fencing_token: f('uint64_t dlock_info_fencing_token(void *i, uint32_t k)'),
  info_kind: f('int dlock_info_kind(void *i)'),
  info_permits: f('uint32_t dlock_info_permits(void *i)'),
  limit_value: f('uint64_t dlock_limit_value(int which)'),
  url_redact: f('size_t dlock_url_redact(const char *url, _Out_ uint8_t *buf, size_t len)'),
};

// The completion queue (dlock 0.1+ with dlock_queue_*): async outcomes come back through a
// pipe that libuv watches on the JS thread, so the library's thread never waits for JS.
let hasQueue = true;
try {
  Object.assign(C, {
    queue_new: f('int dlock_queue_new(_Out_ void **out)'),
    queue_free: f('void dlock_queue_free(void *q)'),
    queue_fd: f('int dlock_queue_fd(void *q)'),
    // libuv closes the fd it watches when the socket is destroyed: the binding watches a
    // close-on-exec copy of the queue's (the library's, so no libc of our own is loaded).
    queue_fd_dup: f('int dlock_queue_fd_dup(void *q)'),
    queue_pop: f('int dlock_queue_pop(void *q, _Out_ uint64_t *tag, _Out_ int *status, _Out_ void **lock)'),
    acquire_queued: f('int dlock_acquire_queued(void *c, const char *name, void *o, void *q, uint64_t tag)'),
    acquire_cancel_queued: f('int dlock_acquire_cancel_queued(void *c, void *q, uint64_t tag)'),
    release_queued: f('int dlock_release_queued(void *l, void *q, uint64_t tag)'),
    extend_queued: f('int dlock_extend_queued(void *l, uint64_t lease_ms, void *q, uint64_t tag)'),
    options_set_on_lost_queued: f('int dlock_options_set_on_lost_queued(void *o, void *q, uint64_t tag)'),
  });
} catch (e) {
  hasQueue = false;
}

// Values stored with a hold and leader election (dlock 0.1 with issue 35): a library without
// them still serves locks; value, setValue, campaign's value, leader() and observe() then say
// what it lacks (hasValues false).
let hasValues = true;
try {
  Object.assign(C, {
    options_set_value: f('int dlock_options_set_value(void *o, const void *data, size_t len)'),
    lock_set_value_queued: f('int dlock_lock_set_value_queued(void *l, const void *data, size_t len, void *q, uint64_t tag)'),
    info_value: f('const void *dlock_info_value(void *i, uint32_t k, _Out_ size_t *len)'),
    observe_queued: f('int dlock_observe_queued(void *c, const char *name, void *q, uint64_t tag, _Out_ void **out)'),
    observer_cancel: f('void dlock_observer_cancel(void *ob)'),
    queue_pop_leader: f('int dlock_queue_pop_leader(void *q, _Out_ uint64_t *tag, _Out_ int *status, _Out_ void **lock, _Out_ void **leader)'),
  });
} catch (e) {
  hasValues = false;
}

// The blocking calls the binding runs on libuv's pool, in the forms that copy the failure's
// message into a buffer of the caller's (dlock_last_error() is the pool thread's, out of reach
// of the JS thread). buf is a Buffer, written only when the call fails.
let hasErrbuf = true;
try {
  Object.assign(C, {
    client_open_errbuf: f('int dlock_client_open_errbuf(const char *url, _Out_ void **out, _Out_ uint8_t *buf, size_t len)'),
    acquire_errbuf: f('int dlock_acquire_errbuf(void *c, const char *name, void *o, _Out_ void **out, _Out_ uint8_t *buf, size_t len)'),
    release_errbuf: f('int dlock_release_errbuf(void *l, _Out_ uint8_t *buf, size_t len)'),
    extend_errbuf: f('int dlock_extend_errbuf(void *l, uint64_t lease_ms, _Out_ uint8_t *buf, size_t len)'),
    inspect_errbuf: f('int dlock_inspect_errbuf(void *c, const char *name, _Out_ void **out, _Out_ uint8_t *buf, size_t len)'),
  });
} catch (e) {
  hasErrbuf = false;
}
// Metrics and loss causes (dlock 0.1 with issue 36): a library without them still serves locks;
// metricsText(), metrics(), lostCause and registerMetrics() then say what it lacks (hasMetrics
// false). The event hook (dlock_client_set_event_hook) is not declared here: its hook runs on the
// library's threads, which JS must not be called from; only the addon sets it. The koffi path
// takes events through the queue instead (below).
let hasMetrics = true;
try {
  Object.assign(C, {
    client_metrics_text: f('int dlock_client_metrics_text(void *c, _Out_ uint8_t *buf, size_t len, _Out_ size_t *needed)'),
    client_metrics: f('int dlock_client_metrics(void *c, _Out_ void **out)'),
    metrics_free: f('void dlock_metrics_free(void *m)'),
    metrics_count: f('size_t dlock_metrics_count(void *m)'),
    metrics_family: f('const char *dlock_metrics_family(void *m, size_t k)'),
    metrics_type: f('const char *dlock_metrics_type(void *m, size_t k)'),
    metrics_help: f('const char *dlock_metrics_help(void *m, size_t k)'),
    metrics_name: f('const char *dlock_metrics_name(void *m, size_t k)'),
    metrics_labels: f('const char *dlock_metrics_labels(void *m, size_t k)'),
    metrics_value: f('double dlock_metrics_value(void *m, size_t k)'),
    lock_lost_cause: f('const char *dlock_lock_lost_cause(void *l)'),
  });
} catch (e) {
  hasMetrics = false;
}
// Client events through the completion queue (dlock_client_set_event_queue, DLOCK_QUEUE_EVENT
// entries read with dlock_queue_pop_event): the koffi path's client.on('event'). A library
// without them still serves locks; adding an 'event' listener on the koffi path then says what
// it lacks (hasQueuedEvents false).
let hasQueuedEvents = true;
try {
  Object.assign(C, {
    client_set_event_queue: f('int dlock_client_set_event_queue(void *c, void *q, uint64_t tag)'),
    queue_pop_event: f('int dlock_queue_pop_event(void *q, _Out_ uint64_t *tag, _Out_ int *status, _Out_ void **lock, _Out_ void **leader, _Out_ void **event)'),
    event_free: f('void dlock_event_free(void *e)'),
    event_type_of: f('int dlock_event_type_of(void *e)'),
    event_type_name: f('const char *dlock_event_type_name(int t)'),
    event_lock_name: f('const char *dlock_event_lock_name(void *e)'),
    event_attempts: f('uint32_t dlock_event_attempts(void *e)'),
    event_elapsed_ms: f('int64_t dlock_event_elapsed_ms(void *e)'),
    event_fencing_token: f('uint64_t dlock_event_fencing_token(void *e)'),
    event_status: f('int dlock_event_status(void *e)'),
    event_detail: f('const char *dlock_event_detail(void *e)'),
  });
} catch (e) {
  hasQueuedEvents = false;
}
// The job rules' max hold (dlock_options_set_max_hold_ms): a library without it still serves
// locks; an acquire or campaign with a maxHoldMs other than 0 then says what it lacks
// (hasMaxHold false), on either path.
let hasMaxHold = true;
try {
  Object.assign(C, {
    options_set_max_hold_ms: f('int dlock_options_set_max_hold_ms(void *o, uint64_t ms)'),
  });
} catch (e) {
  hasMaxHold = false;
}
// Breaking a lock (dlock_break_with) and the closed time it leaves (dlock_info_closed_ms,
// dlock_info_closed_by): a library without them still serves locks; breakLock() then says what
// it lacks (hasBreak false), and inspect() shows closedMs 0 and closedBy ''.
let hasBreak = true;
try {
  Object.assign(C, {
    break_with: f('int dlock_break_with(void *c, const char *name, const char *reason, uint32_t flags, _Out_ void **broken)'),
    info_closed_ms: f('int64_t dlock_info_closed_ms(void *i)'),
    info_closed_by: f('const char *dlock_info_closed_by(void *i)'),
  });
} catch (e) {
  hasBreak = false;
}
// dlock_break_with_errbuf: the koffi path runs a break on libuv's pool, and this copies the
// library's message of a refused break into a buffer there. Without it (hasBreakErrbuf false)
// the koffi path calls dlock_break_with, whose message stays on the pool's thread (index.js then
// checks what it can before, in its own words).
let hasBreakErrbuf = true;
try {
  Object.assign(C, {
    break_with_errbuf: f('int dlock_break_with_errbuf(void *c, const char *name, const char *reason, ' +
      'uint32_t flags, _Out_ void **broken, _Out_ uint8_t *buf, size_t len)'),
  });
} catch (e) {
  hasBreakErrbuf = false;
}
// The job rules' min hold and lock delay (dlock_options_set_min_hold_ms,
// dlock_options_set_lock_delay_ms): as the max hold, a library without them still serves locks;
// an acquire or campaign with a minHoldMs or lockDelayMs other than 0 then says what it lacks.
let hasMinHold = true;
try {
  Object.assign(C, {
    options_set_min_hold_ms: f('int dlock_options_set_min_hold_ms(void *o, uint64_t ms)'),
  });
} catch (e) {
  hasMinHold = false;
}
let hasLockDelay = true;
try {
  Object.assign(C, {
    options_set_lock_delay_ms: f('int dlock_options_set_lock_delay_ms(void *o, uint64_t ms)'),
  });
} catch (e) {
  hasLockDelay = false;
}
// Reentrancy by a context (dlock_options_set_reentrant): as the min hold, a library without it
// still serves locks; an acquire or campaign with options.reentrant then says what it lacks.
let hasReentrant = true;
try {
  Object.assign(C, {
    options_set_reentrant: f('int dlock_options_set_reentrant(void *o, const char *context)'),
  });
} catch (e) {
  hasReentrant = false;
}
// Taking several of a semaphore's permits at once (dlock_options_set_take): a library without it
// still serves locks; options.take other than 1 then says what it lacks (hasTake false).
let hasTake = true;
try {
  Object.assign(C, {
    options_set_take: f('int dlock_options_set_take(void *o, uint32_t k)'),
  });
} catch (e) {
  hasTake = false;
}
// Release requests (dlock_request_release_errbuf, run on libuv's pool, and
// dlock_options_set_on_release_requested_queued): a library without them still serves locks;
// requestRelease() and options.onReleaseRequested then say what it lacks (hasReleaseRequest false).
let hasReleaseRequest = true;
try {
  Object.assign(C, {
    request_release_errbuf: f('int dlock_request_release_errbuf(void *c, const char *name, const char *reason, ' +
      '_Out_ uint8_t *buf, size_t len)'),
    options_set_on_release_requested_queued: f('int dlock_options_set_on_release_requested_queued(void *o, void *q, uint64_t tag)'),
  });
} catch (e) {
  hasReleaseRequest = false;
}
const version = C.version();
if (!/^0\./.test(version)) {
  const e = new Error(`libdlock: ${libraryPath} is libdlock ${version}; this binding needs 0.x`);
  e.code = 'ERR_DLOCK_LIBRARY';
  throw e;
}

module.exports = {
  koffi, C, libraryPath, version, hasQueue, hasErrbuf, hasValues, hasMetrics, hasQueuedEvents, hasMaxHold,
  hasBreak, hasBreakErrbuf, hasMinHold, hasLockDelay, hasReleaseRequest, hasReentrant, hasTake,
};
