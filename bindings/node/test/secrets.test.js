'use strict';
// A URL's secrets never show: not in an error's message, not in a client's toString(). The
// password in these URLs, Xq7Zk9, is cut by an unencoded '/', '?' or '#' in some: no piece of it
// may show.
const test = require('node:test');
const assert = require('node:assert/strict');

const { Client } = require('libdlock');
const { PORT } = require('./support/helpers');

const PIECES = ['Xq7', 'Zk9'];

function assertNoPiece(text, what) {
  for (const piece of PIECES) assert.ok(!text.includes(piece), `${what} shows '${piece}': ${text}`);
}

test('open: errors of URLs whose password holds / # ? show no piece of it', async () => {
  for (const url of [`redis://app:Xq7/Zk9@127.0.0.1:${PORT}`, `redis://:Xq7#Zk9@127.0.0.1:${PORT}`,
    `redis://u:Xq7?Zk9@127.0.0.1:${PORT}`, `redis://u:12/Xq7Zk9@127.0.0.1:${PORT}`,
    `redis-sentinel://127.0.0.1:${PORT}/m?sentinel_password=Xq7&Zk9`]) {
    const err = await Client.connect(url).catch((e) => e);
    assert.equal(err.code, 'ERR_DLOCK_EINVAL', `${url}: ${err}`);
    assertNoPiece(err.message, url);
    assert.match(err.message, /percent-encode/);
  }
});

test('toString() shows the URL as the library does: passwords and sentinel_password hidden', async () => {
  for (const [url, shown] of [
    ['redis://:Xq7#Zk9@127.0.0.1:1', 'redis://:***@127.0.0.1:1'],
    ['redis://app:Xq7/Zk9@127.0.0.1:1/0', 'redis://app:***@127.0.0.1:1/0'],
    ['redis-sentinel://127.0.0.1:1/m?sentinel_password=Xq7Zk9&connect_timeout_ms=100',
      'redis-sentinel://127.0.0.1:1/m?sentinel_password=***&connect_timeout_ms=100'],
  ]) {
    const c = new Client(url);
    assert.equal(String(c), `Client(${shown})`);
    const err = await c.ready().catch((e) => e);
    assert.ok(err instanceof Error, url);
    assertNoPiece(err.message, url);
    await c.close();
  }
});
