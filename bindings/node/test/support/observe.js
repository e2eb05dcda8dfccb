'use strict';
// A child for the observer exit tests: observes NAME, prints its first report, then stops
// observing in the way MODE says and runs out of work. It must exit by itself: a stopped
// observer keeps nothing alive. It never closes its client unless MODE is close.
//   node observe.js URL MODE NAME
// MODE: cancel (observer.cancel()), break (out of a for await loop), abort (the signal),
// close (client.close() ends the loop), unref (observer.unref(): still observing, not holding
// the process), keep (still observing: an unref'd timer can only fire because the observer keeps
// the process alive; it prints, then cancels).
const { Client } = require('libdlock');

const [url, mode, name] = process.argv.slice(2);
const show = (leader) => (leader === null ? 'nobody' : `term ${leader.term}`);

(async () => {
  const client = await Client.connect(url);
  if (mode === 'break' || mode === 'close' || mode === 'abort') {
    const ac = new AbortController();
    const observer = client.observe(name, { signal: ac.signal });
    try {
      for await (const leader of observer) {
        console.log(`first: ${show(leader)}`);
        if (mode === 'break') break;
        if (mode === 'close') await client.close();
        if (mode === 'abort') ac.abort();
      }
      console.log(`ended, closed ${observer.closed}`);
    } catch (e) {
      console.log(`ended by ${e.name}, closed ${observer.closed}`);
    }
    return;
  }
  const observer = client.observe(name);
  observer.once('change', (leader) => {
    console.log(`first: ${show(leader)}`);
    if (mode === 'cancel') observer.cancel();
    if (mode === 'unref') observer.unref();
    if (mode === 'keep') {
      setTimeout(() => {
        console.log('kept alive');
        observer.cancel();
      }, 50).unref();
    }
  });
})().catch((e) => { console.error(e); process.exit(2); });
