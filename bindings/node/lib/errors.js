'use strict';
// The binding's error classes. Needs no library: a user may `instanceof` them (and read `codes`)
// before libdlock.so was ever loaded.
//
// Every failure the library reports is a DlockError whose class follows its status, so users can
// catch by class, and whose code is 'ERR_DLOCK_' + the library's name for the status
// (dlock_status_str without "DLOCK_"): stable, Node-style, and a status a newer library appends
// comes with its own name.

// The dlock_status numbers of dlock.h, by name ("numbers never change; new codes only appended").
const STATUS_NAMES = ['OK', 'NOT_ACQUIRED', 'NOT_HELD', 'EINVAL', 'EIO', 'EBACKEND', 'EAUTH',
  'ECANCELLED', 'ENOMEM', 'EINTERNAL'];
const codes = Object.freeze(Object.fromEntries(STATUS_NAMES.map((n, i) => [n, i])));

// Names for numbers this file does not know: set once the library is loaded (dlock_status_str).
let resolveName = null;
function setStatusNames(fn) { resolveName = fn; }

function statusName(status) {
  return STATUS_NAMES[status] ?? (resolveName ? resolveName(status) : 'UNKNOWN');
}

/** A failure reported by libdlock. message: the library's own words for that call. */
class DlockError extends Error {
  constructor(status, message, options) {
    super(message || `DLOCK_${statusName(status)}`, options);
    this.status = status;                        // the dlock_status number
    this.code = `ERR_DLOCK_${statusName(status)}`;  // 'ERR_DLOCK_NOT_ACQUIRED', ...
  }
}

// The classes of one status take (message, options), so that users can make them too (in tests,
// in mocks); BackendError, for three statuses, and DlockError take the status first.

/** Someone else holds the lock and the wait ran out (DLOCK_NOT_ACQUIRED). */
class NotAcquiredError extends DlockError {
  constructor(message, options) { super(1, message, options); }
}
/**
 * The lock is not held: lost in the background (expired, deleted or taken over, or not renewed
 * in time), released when its client was closed, or already released (DLOCK_NOT_HELD).
 */
class LockLostError extends DlockError {
  constructor(message, options) { super(2, message, options); }
}
/** The library refused an argument, URL or option value (DLOCK_EINVAL). */
class InvalidArgumentError extends DlockError {
  constructor(message, options) { super(3, message, options); }
}
/**
 * The backend failed: unreachable or timed out (DLOCK_EIO, the default), answered with an error
 * (DLOCK_EBACKEND), or refused the credentials (DLOCK_EAUTH); code tells which.
 */
class BackendError extends DlockError {
  constructor(status = 4, message, options) { super(status, message, options); }
}
/** A pending acquire was cancelled: an AbortSignal, Mutex.cancel() or the client's close() (DLOCK_ECANCELLED). */
class CancelledError extends DlockError {
  constructor(message, options) { super(7, message, options); }
}

// name on the prototype (not an own property): shows in stack traces and String(err), stays out
// of JSON and assert's deep comparisons.
for (const C of [DlockError, NotAcquiredError, LockLostError, InvalidArgumentError, BackendError, CancelledError]) {
  Object.defineProperty(C.prototype, 'name', { value: C.name, writable: true, configurable: true });
}

const ONE_STATUS = new Map([[1, NotAcquiredError], [2, LockLostError], [3, InvalidArgumentError], [7, CancelledError]]);

/** The error of the class that matches status. */
function errorFor(status, message, options) {
  const One = ONE_STATUS.get(status);
  if (One !== undefined) return new One(message, options);
  if (status === 4 || status === 5 || status === 6) return new BackendError(status, message, options);
  return new DlockError(status, message, options);
}

module.exports = {
  codes, statusName, setStatusNames, errorFor,
  DlockError, NotAcquiredError, LockLostError, InvalidArgumentError, BackendError, CancelledError,
};
