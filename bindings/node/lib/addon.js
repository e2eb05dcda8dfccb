'use strict';
// Finds dlock.node, the binding's native addon (addon/dlock_node.c), for the library that
// lib/native.js loaded. With it, a client runs on Node's own libuv loop on the JS thread
// (dlock_client_open_hooks): acquire, release, extend and loss reports need no thread hop.
// Without it, the binding takes the koffi path (index.js): the library's own thread, and
// outcomes through a completion queue.
//
// Where it looks (the first that loads wins):
//   - $DLOCK_NODE_ADDON when it is a path (a file ending in .node);
//   - next to the library loaded (build/dlock.node beside build/libdlock.so, or the bundled
//     prebuilds/<platform>-<arch>/dlock.node beside the bundled libdlock.so.0), the library's
//     own directory first, then its symlink's;
//   - this package's prebuilds/<platform>-<arch>/dlock.node.
// DLOCK_NODE_ADDON=0 takes the koffi path without looking; DLOCK_NODE_ADDON=1 makes a missing or
// unloadable addon an error (ERR_DLOCK_ADDON) instead of a quiet fallback.

const fs = require('node:fs');
const path = require('node:path');

const ABI = 10;  // dlock_node.c's ADDON_ABI
const FILE = 'dlock.node';
const PREBUILDS = path.join(__dirname, '..', 'prebuilds', `${process.platform}-${process.arch}`);

function candidates(libraryPath) {
  const env = process.env.DLOCK_NODE_ADDON;
  const list = [];
  if (env && env.endsWith('.node')) list.push(path.resolve(env));
  if (path.isAbsolute(libraryPath)) {
    try {
      list.push(path.join(path.dirname(fs.realpathSync(libraryPath)), FILE));
    } catch { /* loaded, so it exists; a race at worst */ }
    list.push(path.join(path.dirname(libraryPath), FILE));
  }
  list.push(path.join(PREBUILDS, FILE));
  return [...new Set(list)];
}

// { addon, path } or { addon: null, reason }.
function find(libraryPath) {
  const env = process.env.DLOCK_NODE_ADDON;
  if (env === '0') return { addon: null, reason: 'DLOCK_NODE_ADDON=0' };
  const tried = [];
  for (const p of candidates(libraryPath)) {
    if (!fs.existsSync(p)) continue;
    try {
      const addon = require(p);
      if (addon.abi !== ABI) {
        tried.push(`${p}: ABI ${addon.abi}, this binding needs ${ABI}`);
        continue;
      }
      return { addon, path: p };
    } catch (e) {
      tried.push(`${p}: ${e.message}`);
    }
  }
  const reason = tried.length ? tried.join('; ') : `no ${FILE} found (${candidates(libraryPath).join(', ')})`;
  if (env === '1') {
    const e = new Error(`libdlock: DLOCK_NODE_ADDON=1 but the addon cannot be loaded: ${reason}`);
    e.code = 'ERR_DLOCK_ADDON';
    throw e;
  }
  return { addon: null, reason };
}

module.exports = { find, ABI, FILE };
