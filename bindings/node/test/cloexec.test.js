'use strict';
// Nothing the binding opens leaks into child processes: the completion queue's descriptor that
// libuv watches is the library's close-on-exec copy (dlock_queue_fd_dup), not a dup() that
// drops the flag. Checked on every descriptor opened since before the binding loaded (the
// runner may hand the process inherited ones), after a lock was taken, through
// /proc/self/fdinfo (the O_CLOEXEC bit of "flags:", octal 02000000).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');

const before = new Set(fs.readdirSync('/proc/self/fd'));
const { Client } = require('libdlock');
const { URL, unique } = require('./support/helpers');

const O_CLOEXEC = 0o2000000;

test('every descriptor above 2 is close-on-exec once the binding has run', { skip: process.platform !== 'linux' }, async () => {
  const client = new Client(URL);
  try {
    const lock = await client.acquire(unique('cloexec'));
    await lock.release();
  } finally {
    await client.close();
  }
  const leaking = [];
  for (const name of fs.readdirSync('/proc/self/fdinfo')) {
    const fd = Number(name);
    if (fd <= 2 || before.has(name)) continue;
    let info;
    try {
      info = fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
    } catch (e) {
      continue;  // closed meanwhile (the directory's own descriptor)
    }
    const m = /^flags:\s*([0-7]+)/m.exec(info);
    if (m && (parseInt(m[1], 8) & O_CLOEXEC) === 0) {
      let target = '?';
      try { target = fs.readlinkSync(`/proc/self/fd/${fd}`); } catch (e) { /* gone */ }
      leaking.push(`${fd} -> ${target}`);
    }
  }
  assert.deepEqual(leaking, [], `descriptors a child process would inherit: ${leaking.join(', ')}`);
});
