'use strict';
// The TypeScript declarations, as a TypeScript user meets them: tsc (typescript 5, pinned in the
// lockfile) compiles test/ts/ (an ES module with `await using`, whose wrong calls must be
// refused, and a CommonJS file) against the package's own types, and the output runs.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const PKG = path.join(__dirname, '..');

function run(file, args, options) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 120000, ...options }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${path.basename(args[0] ?? file)} failed: ${err.message}\n${stdout}${stderr}`));
      else resolve(stdout);
    });
  });
}

test('await using compiles with the declarations and runs', async () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-ts-'));
  try {
    // The output runs outside the package, as in an app: 'libdlock' from its node_modules.
    fs.mkdirSync(path.join(out, 'node_modules'));
    fs.symlinkSync(PKG, path.join(out, 'node_modules', 'libdlock'));
    fs.symlinkSync(path.join(PKG, 'node_modules', 'prom-client'), path.join(out, 'node_modules', 'prom-client'));
    fs.mkdirSync(path.join(out, 'node_modules', '@opentelemetry'));
    fs.symlinkSync(path.join(PKG, 'node_modules', '@opentelemetry', 'api'), path.join(out, 'node_modules', '@opentelemetry', 'api'));
    const tsc = path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc');
    await run(process.execPath, [tsc, '-p', path.join(__dirname, 'ts', 'tsconfig.json'), '--outDir', out]);
    const esm = await run(process.execPath, [path.join(out, 'await-using.mjs')], { cwd: out });
    assert.match(esm, /^await using: ok/m);
    const cjs = await run(process.execPath, [path.join(out, 'require.cjs')], { cwd: out });
    assert.match(cjs, /^require: ok/m);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});
