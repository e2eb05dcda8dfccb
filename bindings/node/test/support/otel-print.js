'use strict';
// Preloaded (node --require) by tracing.test.js to run a README example as printed: registers
// the test TracerProvider and context manager globally, as an SDK would, and prints each span at
// exit as a line "span {json}".
const { api, TestContextManager, TestTracerProvider } = require('./otel');

api.context.setGlobalContextManager(new TestContextManager());
const provider = new TestTracerProvider();
api.trace.setGlobalTracerProvider(provider);
const ids = new Map();  // span id -> name, for the parents
process.on('exit', () => {
  for (const s of provider.spans) ids.set(s.context.spanId, s.name);
  for (const s of provider.spans) {
    process.stdout.write(`span ${JSON.stringify({
      name: s.name, parent: s.parent === undefined ? null : (ids.get(s.parent.spanId) ?? '?'), ended: s.ends,
      status: s.status.code, attributes: s.attributes, links: s.links.map((l) => ids.get(l.context.spanId) ?? '?'),
    })}\n`);
  }
});
