'use strict';
// A client's metrics in JS (client.metrics(), client.metricsText() after close) and in
// prom-client (registerMetrics). Needs no metrics library: prom-client is required only when
// registerMetrics() is called without a registry, and never by anything else.
//
// The samples are the library's (dlock_client_metrics, docs/metrics.md): each has its family's
// name, type ('counter', 'gauge' or 'histogram') and help, its own name (the family's, or for a
// histogram with _bucket, _sum or _count), its labels and its value.

// ----- samples ----------------------------------------------------------------------------------

const ESCAPES = { '\\': '\\', '"': '"', n: '\n' };
const labelCache = new Map();  // the library's few label strings, parsed once

// 'kind="shared",outcome="acquired"' (the text's form, with its escapes) as a frozen object.
function parseLabels(text) {
  let labels = labelCache.get(text);
  if (labels !== undefined) return labels;
  labels = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) break;
    const key = text.slice(i, eq).trim();
    i = eq + 2;  // past ="
    let value = '';
    while (i < text.length && text[i] !== '"') {
      if (text[i] === '\\' && i + 1 < text.length) {
        i++;
        value += ESCAPES[text[i]] ?? `\\${text[i]}`;
      } else {
        value += text[i];
      }
      i++;
    }
    labels[key] = value;
    i++;  // past the closing quote
    if (text[i] === ',') i++;
  }
  Object.freeze(labels);
  if (labelCache.size < 4096) labelCache.set(text, labels);
  return labels;
}

// The samples, from rows of [family, type, help, name, labels text, value] (the addon's form;
// the koffi path makes the same).
function samplesOf(rows) {
  return rows.map(([family, type, help, name, labels, value]) => ({
    family, type, help, name, labels: { ...parseLabels(labels) }, value,
  }));
}

// What a closed client reports from then on: its last samples, its gauges at 0 (it holds no lock
// and waits for none any more).
function closedSamples(samples) {
  return samples.map((s) => (s.type === 'gauge' ? { ...s, value: 0 } : s));
}

function escapeLabel(v) {
  return String(v).replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function escapeHelp(v) {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatValue(v) {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

// The Prometheus text (0.0.4) of samples, as the library writes its own.
function renderText(samples) {
  let out = '';
  let family = null;
  for (const s of samples) {
    if (s.family !== family) {
      family = s.family;
      out += `# HELP ${family} ${escapeHelp(s.help)}\n# TYPE ${family} ${s.type}\n`;
    }
    const labels = Object.entries(s.labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',');
    out += `${s.name}${labels ? `{${labels}}` : ''} ${formatValue(s.value)}\n`;
  }
  return out;
}

// ----- prom-client --------------------------------------------------------------------------------

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const OWN_LABELS = new Set(['kind', 'outcome', 'cause', 'le']);  // dlock's, and the histograms'

function loadPromClient() {
  try {
    return require('prom-client');
  } catch (e) {
    const err = new Error('registerMetrics: no registry was given and prom-client cannot be loaded ' +
      `(${e.message.split('\n')[0]}): npm install prom-client, or pass your registry. ` +
      'client.metrics() and client.metricsText() need no library.');
    err.code = 'ERR_DLOCK_PROM_CLIENT';
    throw err;
  }
}

// registry -> { entries: [{ ref: WeakRef(Client), labels, key }], collectors: Map(family ->
// collector), snapshot: Map(family -> values) | null }.
const registries = new WeakMap();

// One prom-client "metric" per family and registry, shared by the clients registered there: the
// duck type prom-client's Registry reads (name, help, type, get(), reset(), aggregator), as its
// own Counter, Gauge and Histogram are. Its samples are read at each scrape.
function makeCollector(state, family, type, help) {
  return {
    name: family,
    help,
    type,
    aggregator: 'sum',  // prom-client's cluster mode: the workers' counts add up
    get() {
      if (state.snapshot === null) {
        state.snapshot = readAll(state);
        // One read per scrape: registry.metrics() asks every family in one synchronous pass.
        queueMicrotask(() => { state.snapshot = null; });
      }
      return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator,
        values: state.snapshot.get(family) ?? [] };
    },
    reset() {},  // registry.resetMetrics(): the library's counters never go down
  };
}

// Every live client's samples of this registry, by family, as prom-client's values: the
// client's const labels first; a histogram's samples named (_bucket, _sum, _count), a counter's
// not (prom-client writes the family's name, and appends _total itself for OpenMetrics).
function readAll(state) {
  const byFamily = new Map();
  state.entries = state.entries.filter((e) => e.ref.deref() !== undefined);
  for (const e of state.entries) {
    let samples;
    try {
      samples = e.ref.deref()[kSamples]();
    } catch {
      continue;  // a scrape goes on without it
    }
    if (samples === null) continue;  // closing, or closed before it was read
    for (const s of samples) {
      let values = byFamily.get(s.family);
      if (values === undefined) byFamily.set(s.family, values = []);
      const v = { labels: { ...e.labels, ...s.labels }, value: s.value };
      if (s.name !== s.family) v.metricName = s.name;
      values.push(v);
    }
  }
  return byFamily;
}

function checkLabels(labels, typeError) {
  if (labels === undefined || labels === null) return {};
  if (typeof labels !== 'object' || Array.isArray(labels)) {
    throw typeError('ERR_INVALID_ARG_TYPE', 'options.labels must be an object of label names and values');
  }
  const out = {};
  for (const [k, v] of Object.entries(labels)) {
    if (!LABEL_NAME.test(k) || k.startsWith('__')) {
      throw typeError('ERR_INVALID_ARG_VALUE', `options.labels: '${k}' is not a Prometheus label name`);
    }
    if (OWN_LABELS.has(k)) {
      throw typeError('ERR_INVALID_ARG_VALUE', `options.labels: '${k}' is a label of dlock's own families`);
    }
    if (typeof v !== 'string' && typeof v !== 'number') {
      throw typeError('ERR_INVALID_ARG_TYPE', `options.labels.${k} must be a string or a number`);
    }
    out[k] = String(v);
  }
  return out;
}

// The key that tells two label sets apart (their order aside).
function labelKey(labels) {
  return JSON.stringify(Object.keys(labels).sort().map((k) => [k, labels[k]]));
}

const kSamples = Symbol('samples');  // Client[kSamples](): its samples, or null (index.js)

/**
 * Makes registry.metrics() (prom-client's Registry; its default `register` when registry is
 * undefined or null) include client's families, read at each scrape. options.labels: const
 * labels on every sample of this client, e.g. { client: 'orders' }. The clients of one registry
 * must be told apart: a second one is refused unless each has labels, each set different.
 * Returns unregister(): its samples leave the registry (the families too, with the last client).
 * The registry holds the client weakly; a closed client reports its last counts.
 */
function makeRegisterMetrics({ Client, typeError, describe, needMetrics }) {
  return function registerMetrics(client, registry, options) {
    if (!(client instanceof Client)) {
      throw typeError('ERR_INVALID_ARG_TYPE', `client must be a dlock Client, got ${describe(client)}`);
    }
    if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
      throw typeError('ERR_INVALID_ARG_TYPE', `options must be an object, got ${describe(options)}`);
    }
    for (const k of Object.keys(options ?? {})) {
      if (k !== 'labels') throw typeError('ERR_INVALID_ARG_VALUE', `unknown option '${k}' (known: labels)`);
    }
    const labels = checkLabels(options?.labels, typeError);
    needMetrics('registerMetrics');
    if (registry === undefined || registry === null) registry = loadPromClient().register;
    if (typeof registry !== 'object' || typeof registry.registerMetric !== 'function' ||
        typeof registry.removeSingleMetric !== 'function') {
      throw typeError('ERR_INVALID_ARG_TYPE', `registry must be a prom-client Registry, got ${describe(registry)}`);
    }
    const samples = client.metrics();  // throws for a client not connected yet, or closed
    let state = registries.get(registry);
    if (state === undefined) {
      state = { entries: [], collectors: new Map(), snapshot: null };
      registries.set(registry, state);
    }
    state.entries = state.entries.filter((e) => e.ref.deref() !== undefined);
    const key = labelKey(labels);
    for (const e of state.entries) {
      const other = e.ref.deref();
      if (other === client) throw typeError('ERR_INVALID_ARG_VALUE', `${client} is registered in this registry already`);
      if (Object.keys(labels).length === 0 || Object.keys(e.labels).length === 0 || e.key === key) {
        throw typeError('ERR_INVALID_ARG_VALUE', `${client} and ${other} would write the same series in this ` +
          'registry: register each with different labels, e.g. { labels: { client: \'orders\' } }');
      }
    }
    const added = [];
    try {
      for (const s of samples) {
        if (state.collectors.has(s.family)) continue;
        const c = makeCollector(state, s.family, s.type, s.help);
        registry.registerMetric(c);  // throws when the name is taken by another metric
        state.collectors.set(s.family, c);
        added.push(c);
      }
    } catch (e) {
      for (const c of added) {
        state.collectors.delete(c.name);
        if (registry.getSingleMetric?.(c.name) === c) registry.removeSingleMetric(c.name);
      }
      throw e;
    }
    const entry = { ref: new WeakRef(client), labels, key };
    state.entries.push(entry);
    state.snapshot = null;
    return function unregister() {
      const i = state.entries.indexOf(entry);
      if (i < 0) return;
      state.entries.splice(i, 1);
      state.snapshot = null;
      if (state.entries.some((e) => e.ref.deref() !== undefined)) return;
      // By the family's name: an OpenMetrics registry renames its counters (without _total).
      for (const [family, c] of state.collectors) {
        if (typeof registry.getSingleMetric !== 'function' || registry.getSingleMetric(family) === c) {
          registry.removeSingleMetric(family);
        }
      }
      registries.delete(registry);
    };
  };
}

module.exports = { parseLabels, samplesOf, closedSamples, renderText, makeRegisterMetrics, kSamples };
