'use strict';
// A contender for the "two OS processes" test: N times, under the lock, reads "value token"
// from a file, checks its fencing token is greater than the last writer's, writes
// "value+1 own_token". Exits 1 on a fencing violation.
const fs = require('node:fs');
const { Client } = require('libdlock');

const [url, name, file, n] = process.argv.slice(2);
(async () => {
  const client = new Client(url);
  for (let i = 0; i < Number(n); i++) {
    await client.using(name, { leaseMs: 10000, waitMs: -1 }, async (lock) => {
      const [value, last] = fs.readFileSync(file, 'utf8').split(' ').map(BigInt);
      if (lock.fencingToken <= last) {
        console.error(`fencing violation: ${lock.fencingToken} <= ${last}`);
        process.exit(1);
      }
      fs.writeFileSync(`${file}.tmp`, `${value + 1n} ${lock.fencingToken}`);
      fs.renameSync(`${file}.tmp`, file);
    });
  }
  await client.close();
})().catch((e) => { console.error(e); process.exit(1); });
