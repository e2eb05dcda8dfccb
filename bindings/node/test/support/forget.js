'use strict';
// A child for the exit tests: acquires locks with a long lease, prints their names, and ends
// without releasing them or closing its clients.
//   node forget.js URL MODE NAME...
// MODE: end (the script just runs out of work), exit (process.exit(0)), throw (an uncaught
// exception), queued (acquired by a waiting acquire, through the library's thread).
const { Client } = require('libdlock');

const [url, mode, ...names] = process.argv.slice(2);
(async () => {
  const a = await Client.connect(url);
  const b = new Client(url);  // a second client, never awaited as such
  for (const [i, name] of names.entries()) {
    const client = i % 2 ? b : a;
    await client.acquire(name, { leaseMs: 60000, waitMs: mode === 'queued' ? 5000 : 0 });
  }
  console.log(`held ${names.length}`);
  if (mode === 'exit') process.exit(0);
  if (mode === 'throw') setImmediate(() => { throw new Error('forgot to handle this'); });
})().catch((e) => { console.error(e); process.exit(2); });
