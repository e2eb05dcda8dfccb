'use strict';
// libdlock.so is loaded on first use, not by require()/import: a missing library fails where it
// is used, saying what to install, and DLOCK_LIBRARY set after the import still counts. Each
// case runs in a child process (a process loads the library once).
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');

const { URL } = require('./support/helpers');

const PKG = path.join(__dirname, '..');
const LIBRARY = process.env.DLOCK_LIBRARY;

// Runs a CommonJS (or, with esm, ES module) script in node from the package's directory (so
// 'libdlock' resolves to it); resolves with its stdout.
function run(script, env, esm = false) {
  return new Promise((resolve, reject) => {
    const args = esm ? ['--input-type=module', '-e', script] : ['-e', script];
    const childEnv = { ...process.env, ...env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    execFile(process.execPath, args, { cwd: PKG, env: childEnv, timeout: 30000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${err.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

test('require() and import load nothing; the first Client does', async () => {
  const out = await run(`
    const d = require('libdlock');
    const before = d._internals.loaded();
    const c = new d.Client(${JSON.stringify(URL)});
    console.log(before, d._internals.loaded());
    c.close();`, {});
  assert.equal(out, 'false true');
  const esm = await run(`
    import * as d from 'libdlock';
    console.log(typeof d.Client, d.default._internals.loaded());`, {}, true);
  assert.equal(esm, 'function false');
});

test('a library that cannot be loaded: require() works, first use says what to install', async () => {
  const out = await run(`
    const d = require('libdlock');
    const { NotAcquiredError } = d;  // classes need no library
    const errs = [];
    try { new d.Client('redis://127.0.0.1:1'); } catch (e) { errs.push(e); }
    d.Client.connect('redis://127.0.0.1:1').catch((e) => {
      errs.push(e);
      try { d.version(); } catch (e2) { errs.push(e2); }
      console.log(JSON.stringify(errs.map((x) => [x.code, x.message])));
    });`, { DLOCK_LIBRARY: '/nonexistent/libdlock.so' });
  const errs = JSON.parse(out);
  assert.equal(errs.length, 3);
  for (const [code, message] of errs) {
    assert.equal(code, 'ERR_DLOCK_LIBRARY');
    assert.match(message, /DLOCK_LIBRARY \(\/nonexistent\/libdlock\.so\)/);  // what was tried
    assert.match(message, /apt install libdlock0/);                          // what to install
    assert.match(message, /npm tarball/);
  }
});

test('DLOCK_LIBRARY set after the import, before first use, is the one loaded', { skip: !LIBRARY }, async () => {
  const out = await run(`
    import { Client, library } from 'libdlock';
    process.env.DLOCK_LIBRARY = ${JSON.stringify(LIBRARY)};
    const c = await Client.connect(${JSON.stringify(URL)});
    const lock = await c.acquire('load-' + process.pid);
    await lock.release();
    await c.close();
    console.log(library().path);`, { DLOCK_LIBRARY: undefined }, true);
  assert.equal(out, LIBRARY);
});
