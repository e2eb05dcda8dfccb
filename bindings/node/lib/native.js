'use strict';
// Finds and loads libdlock.so with koffi and declares the C ABI (include/dlock/dlock.h).
//
// Search order: $DLOCK_LIBRARY (a path), then `pkg-config --variable=libdir dlock`, then the
// system's loader path (libdlock.so.0, the SONAME).
//
// Pointers are BigInts (koffi 3). Every `void *arg` of a callback is declared intptr_t: the
// binding passes small integer ids through the library, never JS objects.

const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const koffi = require('koffi');

const SONAME = 'libdlock.so.0';

function candidates() {
  const env = process.env.DLOCK_LIBRARY;
  if (env) return { list: [['DLOCK_LIBRARY', env]], explicit: true };
  const list = [];
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
  throw new Error('dlock: cannot load libdlock.so; set DLOCK_LIBRARY to its path, or install it ' +
    `where pkg-config or the loader finds it. Tried: ${tried.join('; ')}`);
}

const { lib, path: libraryPath } = load();

const AcquireFn = koffi.proto('void dlock_acquire_fn(int status, void *lock, intptr_t arg)');
const DoneFn = koffi.proto('void dlock_done_fn(int status, intptr_t arg)');
const LostFn = koffi.proto('void dlock_lost_fn(const char *name, uint64_t fencing_token, intptr_t arg)');

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
  options_set_on_lost: f('int dlock_options_set_on_lost(void *o, dlock_lost_fn *fn, intptr_t arg)'),
  // Blocking calls: the binding runs these only on libuv's thread pool (koffi's .async), never
  // on the JS thread, and only for calls that cannot wait for another holder.
  acquire: f('int dlock_acquire(void *c, const char *name, void *o, _Out_ void **out)'),
  release: f('int dlock_release(void *l)'),
  extend: f('int dlock_extend(void *l, uint64_t lease_ms)'),
  lock_fencing_token: f('uint64_t dlock_lock_fencing_token(void *l)'),
  lock_is_valid: f('int dlock_lock_is_valid(void *l)'),
  lock_remaining_ms: f('int64_t dlock_lock_remaining_ms(void *l)'),
  lock_attempts: f('uint32_t dlock_lock_attempts(void *l)'),
};

let hasAsync = true;
try {
  Object.assign(C, {
    acquire_async: f('int dlock_acquire_async(void *c, const char *name, void *o, dlock_acquire_fn *done, intptr_t arg)'),
    acquire_cancel: f('int dlock_acquire_cancel(void *c, intptr_t arg)'),
    release_async: f('int dlock_release_async(void *l, dlock_done_fn *done, intptr_t arg)'),
    extend_async: f('int dlock_extend_async(void *l, uint64_t lease_ms, dlock_done_fn *done, intptr_t arg)'),
  });
} catch (e) {
  hasAsync = false;
}

const version = C.version();
if (!/^0\./.test(version)) {
  throw new Error(`dlock: ${libraryPath} is libdlock ${version}; this binding needs 0.x`);
}

module.exports = { koffi, C, AcquireFn, DoneFn, LostFn, libraryPath, version, hasAsync };
