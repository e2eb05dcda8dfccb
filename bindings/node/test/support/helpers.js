'use strict';
// Shared by the tests: the throwaway redis-server that bindings/test.sh started (REDIS_PORT),
// redis-cli.
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');

const PORT = process.env.REDIS_PORT;
if (!PORT) throw new Error('REDIS_PORT is not set (run bindings/test.sh node)');
const URL = `redis://127.0.0.1:${PORT}`;

function cli(...args) {
  return execFileSync('redis-cli', ['-p', PORT, ...args.map(String)], { encoding: 'utf8' }).trim();
}
const key = (name) => `dlock:{${name}}`;
const unique = (prefix = 't') => `${prefix}-${crypto.randomBytes(5).toString('hex')}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(pred, ms = 5000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await sleep(10);
  }
  return pred();
}
const threads = () => fs.readdirSync('/proc/self/task').length;

module.exports = { PORT, URL, cli, key, unique, sleep, waitFor, threads };
