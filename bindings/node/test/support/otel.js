'use strict';
// A minimal OpenTelemetry "SDK" for the tests (the package has @opentelemetry/api only): a
// TracerProvider whose tracers keep every span they start, in order, and a context manager over
// AsyncLocalStorage, as the SDK's own (AsyncLocalStorageContextManager) works. Implements the
// API's TracerProvider, Tracer, Span and ContextManager interfaces, nothing more.
const api = require('@opentelemetry/api');
const { AsyncLocalStorage } = require('node:async_hooks');
const crypto = require('node:crypto');

class TestContextManager {
  #als = new AsyncLocalStorage();

  active() { return this.#als.getStore() ?? api.ROOT_CONTEXT; }

  with(ctx, fn, thisArg, ...args) {
    return this.#als.run(ctx, () => fn.call(thisArg, ...args));
  }

  bind(ctx, target) {
    if (typeof target !== 'function') return target;
    const manager = this;
    return function bound(...args) { return manager.with(ctx, target, this, ...args); };
  }

  enable() { return this; }

  disable() {
    this.#als.disable();
    return this;
  }
}

let sequence = 0;  // orders the starts and ends of every span

class TestSpan {
  constructor(tracer, name, options, parent) {
    this.tracer = tracer;  // { name, version }
    this.name = name;
    this.kind = options.kind ?? api.SpanKind.INTERNAL;
    this.attributes = { ...options.attributes };
    this.links = [...(options.links ?? [])];
    this.parent = parent;  // the parent's SpanContext, or undefined for a root
    this.context = {
      traceId: parent?.traceId ?? crypto.randomBytes(16).toString('hex'),
      spanId: crypto.randomBytes(8).toString('hex'),
      traceFlags: api.TraceFlags.SAMPLED,
    };
    this.status = { code: api.SpanStatusCode.UNSET };
    this.events = [];
    this.ends = 0;
    this.startedAt = ++sequence;
    this.endedAt = null;
  }

  get ended() { return this.ends > 0; }

  spanContext() { return this.context; }

  setAttribute(key, value) {
    if (!this.ended) this.attributes[key] = value;
    return this;
  }

  setAttributes(attributes) {
    for (const [k, v] of Object.entries(attributes)) this.setAttribute(k, v);
    return this;
  }

  addEvent(name, attributes) {
    this.events.push({ name, attributes: { ...attributes } });
    return this;
  }

  addLink(link) {
    this.links.push(link);
    return this;
  }

  addLinks(links) {
    this.links.push(...links);
    return this;
  }

  setStatus(status) {
    if (!this.ended) this.status = { ...status };
    return this;
  }

  updateName(name) {
    this.name = name;
    return this;
  }

  end() {
    if (this.ends++ === 0) this.endedAt = ++sequence;
  }

  isRecording() { return !this.ended; }

  recordException(exception) {
    this.addEvent('exception', {
      'exception.type': exception.code ?? exception.name,
      'exception.message': exception.message,
      'exception.stacktrace': exception.stack,
    });
  }
}

class TestTracer {
  constructor(provider, name, version) {
    this.provider = provider;
    this.name = name;
    this.version = version;
  }

  startSpan(name, options = {}, ctx = api.context.active()) {
    const span = new TestSpan({ name: this.name, version: this.version }, name, options,
      options.root ? undefined : api.trace.getSpanContext(ctx));
    this.provider.spans.push(span);
    return span;
  }

  // startActiveSpan(name, fn), (name, options, fn), (name, options, context, fn)
  startActiveSpan(name, ...args) {
    const fn = args.pop();
    const [options = {}, ctx = api.context.active()] = args;
    const span = this.startSpan(name, options, ctx);
    return api.context.with(api.trace.setSpan(ctx, span), fn, undefined, span);
  }
}

class TestTracerProvider {
  spans = [];

  getTracer(name, version) { return new TestTracer(this, name, version); }

  named(name) { return this.spans.filter((s) => s.name === name); }
}

module.exports = { api, TestContextManager, TestTracerProvider, TestSpan };
