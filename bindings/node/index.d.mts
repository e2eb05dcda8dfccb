// Types of the ES module entry (index.mjs): the same names as index.d.ts.
export * from './index.js';
import * as dlock from './index.js';
export default dlock;
