// The ES module entry of libdlock: the CommonJS module (index.js) re-exported by name, so that
// `import { Client, Lock, LockLostError } from 'libdlock'` gives every export (Node's detection
// of a CommonJS module's names finds only some), and both module systems share one instance.
// Reads no value that would load the library: it loads on first use, as from require().
import dlock from './index.js';

export const {
  Client,
  Lock,
  Observer,
  Mutex,
  Semaphore,
  DlockError,
  NotAcquiredError,
  LockLostError,
  InvalidArgumentError,
  BackendError,
  CancelledError,
  version,
  library,
  registerMetrics,
  DlockInstrumentation,
  codes,
  MAX_NAME_BYTES,
  MAX_OWNER_BYTES,
  MAX_VALUE_BYTES,
  MAX_REASON_BYTES,
  MAX_LOCK_DELAY_MS,
} = dlock;
export default dlock;
