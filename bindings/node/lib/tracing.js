'use strict';
// OpenTelemetry spans for acquires and holds: DlockInstrumentation, an OpenTelemetry
// instrumentation (the shape @opentelemetry/instrumentation's registerInstrumentations and the
// NodeSDK take) that needs none of OpenTelemetry's packages but @opentelemetry/api.
//
// The spans are made here, in the binding, and not from the library's events: an acquire's
// context (the caller's active span) is known only where the call is made, and an event comes
// after the call returned, outside it. So each acquire (campaign, using(), a Mutex's) runs in a
// 'dlock.acquire' span, a child of the caller's active context, and a held lock has a
// 'dlock.hold' span from the acquire's end to its release or loss: a sibling of the acquire span
// (the same parent), linked to it, so that a trace shows the wait and then the hold, one after
// the other, under the caller's span (with no span active, the hold is the acquire span's child:
// one trace all the same). using() and Mutex.runExclusive() run their function with the hold
// span active: the work done under the lock nests under it.
//
// @opentelemetry/api is never a dependency (an optional peer): it is required when an
// instrumentation is first enabled, not before, and without one enabled an acquire pays one
// null check. Without the API an enabled instrumentation makes no spans (a warning says why).
// Spans follow the OpenTelemetry trace API's rules for instrumentation libraries: kind INTERNAL,
// status left UNSET on success and ERROR (with the error's message and error.type) on failure.

const NAME = 'libdlock';
const VERSION = require('../package.json').version;

// What index.js reads on each acquire: the enabled instrumentation, or null (no spans).
const state = { active: null };

let api;  // @opentelemetry/api once required; null when it cannot be; undefined before
let warned = false;

function loadApi() {
  if (api === undefined) {
    try {
      api = require('@opentelemetry/api');
    } catch (e) {
      api = null;
      if (!warned) {
        warned = true;
        process.emitWarning(`libdlock: a DlockInstrumentation was enabled, but @opentelemetry/api cannot be ` +
          `loaded from ${__dirname} (${e.message.split('\n')[0]}): no spans are made`, {
          type: 'DlockTracingWarning',
          code: 'DLOCK_NO_OPENTELEMETRY_API',
          detail: 'Install @opentelemetry/api (version 1) in the application: npm install @opentelemetry/api',
        });
      }
    }
  }
  return api;
}

function checkConfig(config) {
  if (config === undefined || config === null) return { enabled: true, requireParentSpan: false };
  if (typeof config !== 'object' || Array.isArray(config)) {
    const e = new TypeError(`DlockInstrumentation config must be an object, got ${typeof config}`);
    e.code = 'ERR_INVALID_ARG_TYPE';
    throw e;
  }
  const out = { enabled: true, requireParentSpan: false };
  for (const k of ['enabled', 'requireParentSpan']) {
    if (config[k] === undefined) continue;
    if (typeof config[k] !== 'boolean') {
      const e = new TypeError(`DlockInstrumentation config.${k} must be a boolean, got ${typeof config[k]}`);
      e.code = 'ERR_INVALID_ARG_TYPE';
      throw e;
    }
    out[k] = config[k];
  }
  return out;
}

function checkProvider(tracerProvider) {
  if (tracerProvider === null || typeof tracerProvider !== 'object' || typeof tracerProvider.getTracer !== 'function') {
    const e = new TypeError('tracerProvider must be an OpenTelemetry TracerProvider (an object with getTracer())');
    e.code = 'ERR_INVALID_ARG_TYPE';
    throw e;
  }
  return tracerProvider;
}

/**
 * Spans for libdlock's acquires and holds. As OpenTelemetry's own instrumentations: enabled when
 * made (config.enabled: false to make it disabled), tracing to the global TracerProvider unless
 * setTracerProvider() (or registerInstrumentations, or the NodeSDK) gives another. config:
 * { enabled, requireParentSpan (no spans for an acquire made outside any span) }; the
 * constructor also takes tracerProvider. One instrumentation makes the spans at a time: the
 * last enabled.
 */
class DlockInstrumentation {
  #config;
  #provider = null;  // null: the global TracerProvider
  #tracer = null;    // made when enabled (the API's getTracer, or the provider's)
  #on = false;

  constructor(config) {
    let provider = null;
    let rest = config;
    if (config !== undefined && config !== null && typeof config === 'object' && 'tracerProvider' in config) {
      ({ tracerProvider: provider, ...rest } = config);
      if (provider !== undefined) provider = checkProvider(provider);
    }
    this.#config = checkConfig(rest);
    /** The instrumentation scope's name: the tracer's ('libdlock'). */
    this.instrumentationName = NAME;
    /** The instrumentation scope's version: this package's. */
    this.instrumentationVersion = VERSION;
    if (provider) this.setTracerProvider(provider);
    if (this.#config.enabled) this.enable();
  }

  /** Starts making spans (requires @opentelemetry/api on first use). Idempotent. */
  enable() {
    this.#config.enabled = true;
    if (this.#on) {
      state.active = this;
      return;
    }
    const a = loadApi();
    if (a === null) return;
    if (this.#tracer === null) this.#tracer = a.trace.getTracer(NAME, VERSION);
    this.#on = true;
    state.active = this;
  }

  /** Stops making spans: acquires from now on have none (holds with a span still end theirs). */
  disable() {
    this.#config.enabled = false;
    this.#on = false;
    if (state.active === this) state.active = null;
  }

  /** Whether it makes spans now. */
  isEnabled() { return this.#on; }

  /** Traces to this TracerProvider from now on (registerInstrumentations and the NodeSDK call it). */
  setTracerProvider(tracerProvider) {
    this.#provider = checkProvider(tracerProvider);
    this.#tracer = this.#provider.getTracer(NAME, VERSION);
  }

  /** dlock's metrics are the client's own (client.metrics(), registerMetrics): nothing to do. */
  setMeterProvider() {}

  /** dlock logs nothing: nothing to do (older registerInstrumentations call it unchecked). */
  setLoggerProvider() {}

  /** config: { enabled, requireParentSpan }; enabled is only read by enable()'s callers. */
  setConfig(config) {
    this.#config = checkConfig(config);
  }

  getConfig() { return { ...this.#config }; }

  // For the spans (index.js never calls it without an enabled instrumentation).
  get tracer() { return this.#tracer; }
  get requireParentSpan() { return this.#config.requireParentSpan; }
}

// ----- the spans ---------------------------------------------------------------------------------

const KIND_NAMES = ['exclusive', 'shared'];
const decoder = new TextDecoder();

// A name given as bytes is read as UTF-8, as the client's events read it.
function nameText(name) {
  return typeof name === 'string' ? name : decoder.decode(name);
}

function kindOf(o) {
  if (o.permits !== undefined && o.permits > 0) return 'semaphore';
  return KIND_NAMES[o.kind ?? 0] ?? String(o.kind);
}

// The outcome of a failed acquire, as dlock_acquires_total's outcome label says it.
function acquireOutcome(err) {
  switch (err?.code) {
    case 'ERR_DLOCK_NOT_ACQUIRED': return 'not_acquired';
    case 'ERR_DLOCK_ECANCELLED': return 'cancelled';
    default: return 'error';
  }
}

// A tracer (an SDK, a span processor) that threw: told to OpenTelemetry's diagnostic logger, as
// OpenTelemetry's own instrumentations do; the lock's call goes on as if untraced.
function spanError(e) {
  try {
    api.diag.error('libdlock: a span call threw', e);
  } catch { /* nothing more to do */ }
}

function failed(span, err) {
  span.setAttribute('error.type', typeof err?.code === 'string' ? err.code : (err?.name ?? '_OTHER'));
  if (err instanceof Error) span.recordException(err);
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/**
 * Runs an acquire (run(): its promise of a Lock) in a 'dlock.acquire' span and gives the Lock a
 * 'dlock.hold' span (setHold(lock, hold)). name: as given; o: the checked options; scheme: the
 * backend's URL scheme (never the URL: it may hold a password); holds: the client's open holds.
 * Only called with state.active set.
 */
function traceAcquire(name, o, scheme, holds, run, setHold) {
  const inst = state.active;
  const ctx = api.context.active();
  if (inst.requireParentSpan && api.trace.getSpan(ctx) === undefined) return run();
  const tracer = inst.tracer;
  const lockAttrs = { 'dlock.lock.name': nameText(name), 'dlock.lock.kind': kindOf(o) };
  if (o.permits !== undefined && o.permits > 0) lockAttrs['dlock.lock.permits'] = o.permits;
  if (scheme !== null) lockAttrs['dlock.backend'] = scheme;
  const waitMs = o.campaign === true ? -1 : Number(o.waitMs ?? -1);
  let span;
  try {
    span = tracer.startSpan('dlock.acquire', {
      kind: api.SpanKind.INTERNAL,
      attributes: { ...lockAttrs, 'dlock.operation': o.campaign === true ? 'campaign' : 'acquire', 'dlock.acquire.wait_ms': waitMs },
    }, ctx);
  } catch (e) {
    spanError(e);
    return run();
  }
  return run().then((lock) => {
    try {
      const token = String(lock.fencingToken);
      span.setAttributes({ 'dlock.outcome': 'acquired', 'dlock.acquire.attempts': lock.attempts, 'dlock.lock.fencing_token': token });
      span.end();
      // A sibling of the acquire span under the caller's span; under the acquire span when the
      // caller had none (one trace all the same). Linked to the acquire span either way.
      const hold = tracer.startSpan('dlock.hold', {
        kind: api.SpanKind.INTERNAL,
        attributes: { ...lockAttrs, 'dlock.lock.fencing_token': token },
        links: [{ context: span.spanContext() }],
      }, api.trace.getSpan(ctx) !== undefined ? ctx : api.trace.setSpan(ctx, span));
      const rec = { span: hold, holds, ended: false };
      holds.add(rec);
      setHold(lock, rec);
    } catch (e) {
      spanError(e);  // a tracer that throws must not cost the caller its lock
    }
    return lock;
  }, (err) => {
    try {
      span.setAttribute('dlock.outcome', acquireOutcome(err));
      failed(span, err);
      span.end();
    } catch (e) {
      spanError(e);
    }
    throw err;
  });
}

/**
 * Ends a hold's span (once): outcome 'released', 'lost' (err: the LockLostError; its cause is the
 * loss's code), 'error' (a release that failed otherwise), 'closed' (its client's close()
 * released it), 'collected' (garbage-collected while held, released by the finalizer).
 */
function endHold(rec, outcome, err) {
  if (rec.ended) return;
  rec.ended = true;
  rec.holds.delete(rec);
  const span = rec.span;
  try {
    span.setAttribute('dlock.outcome', outcome);
    if (err !== undefined) {
      if (typeof err.cause === 'string') span.setAttribute('dlock.lost_cause', err.cause);
      failed(span, err);
    }
    span.end();
  } catch (e) {
    spanError(e);
  }
}

// A release's outcome, for its hold's span.
function afterRelease(rec, promise) {
  promise.then(() => endHold(rec, 'released'),
    (err) => endHold(rec, err?.code === 'ERR_DLOCK_NOT_HELD' ? 'lost' : 'error', err));
}

// fn() with the hold's span active (using(), runExclusive()): the work under the lock nests under it.
function withinHold(rec, fn) {
  return api.context.with(api.trace.setSpan(api.context.active(), rec.span), fn);
}

module.exports = { DlockInstrumentation, state, traceAcquire, endHold, afterRelease, withinHold };
