// The CommonJS side of the declarations (index.d.ts, the exports map's require branch).
import dlock = require('libdlock');
import assert = require('node:assert/strict');

const { Client, LockLostError, BackendError } = dlock;
assert.equal(typeof Client, 'function');
const lost: dlock.LockLostError = new LockLostError('gone');
assert.equal(lost.code, 'ERR_DLOCK_NOT_HELD');
assert.equal(new BackendError(5).code, 'ERR_DLOCK_EBACKEND');
console.log('require: ok');
