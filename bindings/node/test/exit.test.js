'use strict';
// Locks a process forgets are released when it exits: the binding closes every client still
// open on 'exit'. And an idle open client still does not keep a process alive.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');

const { Client } = require('libdlock');
const { URL, cli, key, unique } = require('./support/helpers');

// Runs support/forget.js; resolves with { code, stdout, ms } once it exited (fails after 20 s:
// it would have been kept alive).
function runChild(mode, names) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, [path.join(__dirname, 'support', 'forget.js'), URL, mode, ...names],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child (${mode}) did not exit within 20 s: something kept it alive`));
    }, 20000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

for (const mode of ['end', 'exit', 'throw', 'queued']) {
  test(`a forgotten lock is released when its process exits (${mode})`, async () => {
    const names = [unique(`exit-${mode}`), unique(`exit-${mode}`), unique(`exit-${mode}`)];
    const r = await runChild(mode, names);
    assert.match(r.stdout, /held 3/, r.stderr);
    assert.equal(r.code, mode === 'throw' ? 1 : 0, r.stderr);
    for (const n of names) assert.equal(cli('EXISTS', key(n)), '0', `lock ${n} still held after its process exited`);
    const client = await Client.connect(URL);
    try {
      const t0 = Date.now();
      const lock = await client.acquire(names[0], { waitMs: 0, leaseMs: 5000 });
      // One try, not a wait: bounded like any call, connect_timeout_ms + timeout_ms (5 s).
      assert.ok(Date.now() - t0 < 5000 + 3000);
      await lock.release();
    } finally {
      await client.close();
    }
  });
}
