// wgllm.js - the browser package's entry point: an OpenAI-style engine over
// the wasm core, either on the page (createEngine) or in a Web Worker
// (createWorkerEngine, same API, the page never blocks), or in a Service
// Worker shared by the pages of the origin (createServiceWorkerEngine).
//
//   import * as wgllm from './wgllm.js';
//   const engine = await wgllm.createWorkerEngine({ model: 'model.gguf', onProgress: (p) => ... });
//   const r = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }] });
//   for await (const c of await engine.chat.completions.create({ messages, stream: true }))
//     out += c.choices[0]?.delta?.content ?? '';
//
// Both engines share the OpenAI shaping below; they differ only in the
// "backend" object (generate/embed/interrupt/unload) under it.

// A chat template for models whose GGUF has none (ChatML, as Qwen and many
// fine-tunes use); pass it as createEngine({ chatTemplate: wgllm.CHATML }).
export const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";


// The request as the JSON text a client would POST. The core's OpenAI layer
// (the one `wgllm serve` runs) checks and answers it: nothing about its fields
// is decided here. JSON.stringify drops what JSON cannot hold (undefined,
// functions), as fetch would.
function bodyOf(p) {
  let body;
  try {
    body = JSON.stringify(p ?? {});
  } catch (e) {
    const err = new Error(`wgllm: the request cannot be sent as JSON: ${e.message}`);
    err.code = 'argument';
    throw err;
  }
  return body ?? 'null';
}

// The timings of a request (the layer's answers carry none; the browser adds them to usage).
const extraOf = (t) => ({ ttft_ms: t.ttft_ms, prefill_tokens_per_s: t.prefill_tok_s,
                          decode_tokens_per_s: t.decode_tok_s, total_ms: t.total_ms });

function errorOf(err, status) {
  const e = new Error(`wgllm: ${err && err.message ? err.message : 'the request failed'}`);
  e.code = err?.code ?? null;
  e.status = status;
  e.type = err?.type ?? null;
  e.param = err?.param ?? null;
  return e;
}

// An async iterator over the stream's chunks (the server's, parsed); breaking
// out of the loop early cancels the request. An error event ends it with the
// error; the include_usage chunk gets the timings.
function streamOf(h) {
  const queue = [];
  let wake = null;
  let finished = false;
  let failure = null;
  let final = null;
  h.onChunk((line) => {
    queue.push(line);
    if (wake) { wake(); wake = null; }
  });
  const settled = h.result.then((r) => { final = r; }, (e) => { failure = e; }).finally(() => {
    finished = true;
    if (wake) { wake(); wake = null; }
  });
  async function* gen() {
    try {
      for (;;) {
        if (queue.length) {
          const c = JSON.parse(queue.shift());
          if (c.error) {
            await settled;
            throw errorOf(c.error, final ? final.status : 500);
          }
          if (c.usage) {
            await settled;
            if (final) c.usage.extra = extraOf(final.timings);
          }
          yield c;
          continue;
        }
        if (finished) break;
        await new Promise((res) => { wake = res; });
      }
      if (failure) throw failure;
    } finally {
      if (!finished) h.cancel();
    }
  }
  return gen();
}

function openaiApi(backend, modelName) {
  // One create per route: the request's JSON to the core, the server's JSON back.
  const create = (endpoint) => async (p = {}) => {
    const body = bodyOf(p);
    let sink = null;
    const early = []; // chunks that come before the iterator exists (the chat role chunk)
    const h = backend.openai(endpoint, body, modelName, (line) => { if (sink) sink(line); else early.push(line); });
    h.result.catch(() => {}); // a refusal rejects `started` too: that is the one reported
    await h.started;
    if (p != null && p.stream === true) { // the layer took `stream` only as a boolean
      return streamOf({ result: h.result, cancel: h.cancel, onChunk: (f) => { sink = f; early.splice(0).forEach(f); } });
    }
    const r = await h.result;
    const a = JSON.parse(r.answer);
    if (a.error) throw errorOf(a.error, r.status);
    if (a.usage) a.usage.extra = extraOf(r.timings);
    return a;
  };
  const embCreate = async (p = {}) => {
    const inputs = Array.isArray(p.input) ? p.input : [p.input];
    if (inputs.length === 0 || inputs.some((s) => typeof s !== 'string'))
      throw new Error('wgllm: embeddings input must be a string or an array of strings');
    const data = [];
    for (let i = 0; i < inputs.length; i++) {
      const v = await backend.embed(inputs[i], { pooling: p.pooling ?? 'mean', normalize: p.normalize ?? true });
      data.push({ object: 'embedding', index: i, embedding: p.encoding_format === 'float32' ? v : Array.from(v) });
    }
    return { object: 'list', data, model: modelName, usage: { prompt_tokens: 0, total_tokens: 0 } };
  };
  return {
    chat: { completions: { create: create('chat') } },
    completions: { create: create('completions') },
    embeddings: { create: embCreate },
    interrupt: () => backend.interrupt(),
    unload: () => backend.unload(),
    // KV prefix snapshots: save() -> Uint8Array (the engine's file), restore(bytes),
    // flush() waits until persistSnapshots has stored the finished requests' state
    snapshots: {
      save: () => backend.saveSnapshots(),
      restore: (bytes) => backend.restoreSnapshots(bytes),
      flush: () => backend.flushSnapshots(),
    },
    get info() { return backend.info; },
    // the routing policy's decision for a route whose local target is this engine (createRouter)
    _route: async (endpoint, body, targets) => backend.route(endpoint, body, targets),
    // the capability report: backend chosen and why, adapter, GPU memory
    get capabilities() {
      const i = backend.info;
      return { backend: i.backend, reason: i.backend_detail, adapter: i.adapter, gpu_memory: i.gpu_memory,
               webgpu: typeof navigator !== 'undefined' && !!navigator.gpu, threads: i.threads,
               crossOriginIsolated: i.crossOriginIsolated, core: i.core, core_reason: i.core_detail };
    },
  };
}

// the model store's helpers (OPFS): listModels() and deleteModel(name)
export { listModels, deleteModel, deleteSnapshots } from './store.js';

function modelNameOf(model) {
  if (Array.isArray(model) && model.length) model = model[0];
  if (typeof model === 'string' && model.startsWith('opfs:')) return model.slice(5);
  if (typeof model === 'string' || model instanceof URL) return String(model).split('/').pop().split('?')[0];
  if (model && typeof model.name === 'string') return model.name;
  return 'model.gguf';
}

function coreOptions(o) {
  return { chatTemplate: o.chatTemplate ?? o.chat_template, nThreads: o.nThreads, nCtx: o.nCtx, nSlots: o.nSlots,
           store: o.store, backend: o.backend, threaded: o.threaded, persistSnapshots: o.persistSnapshots,
           streamWeights: o.streamWeights };
}

function checkBackend(b) {
  if (b != null && !['auto', 'webgpu', 'cpu'].includes(b))
    throw new Error(`wgllm: unknown backend '${b}' (use 'auto', 'webgpu' or 'cpu')`);
}

/**
 * Loads the model and the wasm core on this thread (generation itself runs on
 * the core's own threads, but loading blocks the page: prefer createWorkerEngine).
 */
export async function createEngine(options = {}) {
  checkBackend(options.backend);
  const { loadCore } = await import('./core.js');
  const core = await loadCore({ ...coreOptions(options), model: options.model, onProgress: options.onProgress });
  // the core refuses a request by throwing at once: started is then never reached
  const backend = { ...core, openai: (...a) => ({ ...core.openai(...a), started: Promise.resolve() }) };
  Object.defineProperty(backend, 'info', { get: () => core.info });
  return openaiApi(backend, modelNameOf(options.model));
}

// Request ids are unique across engines: two engines on one worker
// (options.worker) each take only their own replies.
let workerCallId = 0;

/** The same engine, running in a Web Worker (web/dist/worker.js). */
export async function createWorkerEngine(options = {}) {
  checkBackend(options.backend);
  const own = !options.worker; // a worker made here ends with the engine or its failed load
  const worker = options.worker ?? new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const pending = new Map(); // id -> {resolve, reject, onChunk, started}
  let onProgress = typeof options.onProgress === 'function' ? options.onProgress : null;
  let dead = null;
  const onMessage = (ev) => {
    const m = ev.data;
    if (!m || typeof m !== 'object') return;
    if (m.type === 'progress') { if (onProgress) try { onProgress(m.progress); } catch { /* caller's */ } return; }
    const p = pending.get(m.id);
    if (!p) return;
    if (m.type === 'chunk') { if (p.onChunk) p.onChunk(m.chunk); return; }
    if (m.type === 'started') { if (p.started) p.started.resolve(); return; }
    pending.delete(m.id);
    if (m.type === 'error') {
      const e = new Error(m.message);
      e.code = m.code;
      if (m.status !== undefined) Object.assign(e, { status: m.status, type: m.errorType, param: m.param });
      if (p.started) p.started.reject(e);
      p.reject(e);
    } else {
      p.resolve(m.value);
    }
  };
  const onError = (ev) => {
    dead = new Error(`wgllm: the worker failed: ${ev.message || 'unknown error'}`);
    for (const p of pending.values()) { if (p.started) p.started.reject(dead); p.reject(dead); }
    pending.clear();
  };
  worker.addEventListener('message', onMessage);
  worker.addEventListener('error', onError);
  const call = (op, args, onChunk, started) => {
    if (dead) return { id: 0, promise: Promise.reject(dead) };
    const id = ++workerCallId;
    const promise = new Promise((resolve, reject) => pending.set(id, { resolve, reject, onChunk, started }));
    worker.postMessage({ id, op, args });
    return { id, promise };
  };
  let model = options.model;
  const abs = (u) => (typeof u === 'string' && !u.startsWith('opfs:') ? new URL(u, location.href).href : u instanceof URL ? u.href : u);
  if (typeof model === 'string' || model instanceof URL) model = abs(model); // the worker's base differs
  else if (Array.isArray(model)) model = model.map(abs);
  let info;
  try {
    info = await call('load', { ...coreOptions(options), model }).promise;
  } catch (e) {
    worker.removeEventListener('message', onMessage);
    worker.removeEventListener('error', onError);
    if (own) worker.terminate(); // not a worker (and its wasm memory) per failed load
    throw e;
  }
  onProgress = null;
  let unloaded = false;
  const backend = {
    info: { ...info, worker: true },
    openai(endpoint, body, modelId, onChunk) {
      let started;
      const startedP = new Promise((resolve, reject) => { started = { resolve, reject }; });
      startedP.catch(() => {}); // a dead worker rejects it whether or not anyone waits
      const c = call('openai', { endpoint, body, modelId }, onChunk, started);
      if (c.id === 0) started.reject(dead);
      return { started: startedP, result: c.promise, cancel: () => worker.postMessage({ op: 'cancel', args: { id: c.id } }) };
    },
    embed: (text, opts) => call('embed', { text, opts }).promise,
    route: (endpoint, body, targets) => call('route', { endpoint, body, targets }).promise,
    saveSnapshots: () => call('snapshots', { op: 'save' }).promise,
    restoreSnapshots: (bytes) => call('snapshots', { op: 'restore', bytes }).promise,
    flushSnapshots: () => call('snapshots', { op: 'flush' }).promise,
    interrupt: () => { worker.postMessage({ op: 'interrupt' }); },
    async unload() {
      if (unloaded) return;
      unloaded = true;
      try { await call('unload', {}).promise; } finally {
        worker.terminate();
        dead = new Error('wgllm: the engine was unloaded (its worker is gone)');
        for (const p of pending.values()) p.reject(dead);
        pending.clear();
      }
    },
  };
  return openaiApi(backend, modelNameOf(options.model));
}

// ---- routes: one name for a local engine and OpenAI-compatible servers -----

const COOLDOWN_MS = 10000; // a remote target that failed is unhealthy this long (the server's replicas: 10 s)

function routerError(message, status, code, param = null) {
  const e = new Error(`wgllm: ${message}`);
  Object.assign(e, { status, code, type: 'invalid_request_error', param });
  return e;
}

// A remote target's moving averages, as the server's replica table keeps them.
function remoteState() { return { latency: 0, inFlight: 0, coolUntil: 0, healthy: true }; }
function remoteDone(t, ok, ms) {
  t.inFlight--;
  if (ok) {
    t.healthy = true;
    t.coolUntil = 0;
    t.latency = t.latency > 0 ? 0.8 * t.latency + 0.2 * ms : ms;
  } else {
    t.healthy = false;
    t.coolUntil = Date.now() + COOLDOWN_MS;
  }
}

// An OpenAI-compatible server's streamed answer: its SSE events' JSON, in order.
async function* sseEvents(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(buf[i] === '\r' ? i + 4 : i + 2);
        const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data) continue;
        if (data === '[DONE]') return;
        yield JSON.parse(data);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// The stream with the decision on its last chunk (the server's wgllm.route): one chunk is held back.
async function* withRouteLast(chunks, route) {
  let held = null;
  for await (const c of chunks) {
    if (held) yield held;
    held = c;
  }
  if (held) yield { ...held, wgllm: { ...(held.wgllm ?? {}), route } };
}

/**
 * Routes, as `wgllm serve --route`: each a name for several targets -- one
 * local engine (createEngine / createWorkerEngine) and OpenAI-compatible
 * servers ({baseURL, apiKey, model, cost}) -- and a request whose `model`
 * names a route goes to the target the routing policy picks (the core's, the
 * same C code as the server's: wgllm.h, "Routes"), from the engine's warm
 * prefix of this prompt, its queue and measured prefill rate, and each
 * server's measured latency (time to its first byte), calls in flight,
 * health (a failure makes it unhealthy for 10 s) and cost per 1M tokens,
 * weighted by costWeight (ms per unit of cost, default 1000). A server that
 * fails (no answer, an error status) falls back to the local engine when it
 * could take the request. Answers carry the decision as `wgllm.route` (a
 * stream: on its last chunk), with `fallback: {from, error}` after one.
 *
 *   const router = wgllm.createRouter({ routes: { auto: [{ engine }, { baseURL: 'https://…/v1',
 *     apiKey, model: 'big', cost: 2.5 }] } });
 *   const r = await router.chat.completions.create({ model: 'auto', messages });
 *   r.wgllm.route.target  // 'local' or the server's name
 *
 * Each route needs its one local engine: the policy runs in that engine's
 * wasm core (a route of servers alone has no core to decide with).
 */
export function createRouter(options = {}) {
  const { routes, costWeight = 1000 } = options;
  const fetchFn = options.fetch ?? globalThis.fetch;
  if (!routes || typeof routes !== 'object' || !Object.keys(routes).length)
    throw new Error('wgllm: createRouter needs routes: { NAME: [targets] }');
  if (typeof costWeight !== 'number' || !(costWeight >= 0)) throw new Error(`wgllm: costWeight ${costWeight} must be a number >= 0`);
  const table = new Map();
  for (const [name, list] of Object.entries(routes)) {
    if (!Array.isArray(list) || !list.length || list.length > 16)
      throw new Error(`wgllm: route '${name}' needs 1 to 16 targets`);
    const targets = list.map((t, i) => {
      const where = `route '${name}' target ${i}`;
      if (!t || typeof t !== 'object') throw new Error(`wgllm: ${where} must be {engine} or {baseURL, ...}`);
      const cost = t.cost ?? 0;
      if (typeof cost !== 'number' || !(cost >= 0) || !Number.isFinite(cost))
        throw new Error(`wgllm: ${where}: cost ${t.cost} is not a price per 1M tokens (0 or more)`);
      if (t.engine) {
        if (typeof t.engine._route !== 'function') throw new Error(`wgllm: ${where}: engine is not a wgllm engine`);
        return { kind: 'local', name: t.name ?? 'local', engine: t.engine, cost };
      }
      if (typeof t.baseURL !== 'string' || !/^https?:\/\//.test(t.baseURL))
        throw new Error(`wgllm: ${where} needs baseURL starting with http:// or https:// (got '${t.baseURL ?? ''}')`);
      return { kind: 'remote', name: t.name ?? t.model ?? new URL(t.baseURL).host, baseURL: t.baseURL.replace(/\/+$/, ''),
               apiKey: t.apiKey, model: t.model, cost, state: remoteState() };
    });
    const locals = targets.filter((t) => t.kind === 'local');
    if (locals.length !== 1)
      throw new Error(`wgllm: route '${name}' needs exactly one local engine (it has ${locals.length}): the policy runs in its core`);
    const names = new Set(targets.map((t) => t.name));
    if (names.size !== targets.length) throw new Error(`wgllm: route '${name}' names a target twice (give them distinct names)`);
    table.set(name, { name, targets, local: locals[0] });
  }

  const remoteCall = async (t, endpoint, p, route) => {
    const body = { ...p };
    if (t.model) body.model = t.model; else delete body.model;
    const headers = { 'content-type': 'application/json' };
    if (t.apiKey) headers.authorization = `Bearer ${t.apiKey}`;
    t.state.inFlight++;
    const t0 = performance.now();
    let res;
    try {
      res = await fetchFn(`${t.baseURL}/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`,
        { method: 'POST', headers, body: JSON.stringify(body) });
    } catch (e) {
      remoteDone(t.state, false, 0);
      throw routerError(`route '${route.name}': '${t.name}' could not be reached: ${e.message}`, 502, 'upstream_unreachable');
    }
    const ms = performance.now() - t0;
    if (!res.ok) {
      remoteDone(t.state, res.status < 500, ms);
      let err = null;
      try { err = (await res.json()).error; } catch { /* not JSON */ }
      throw errorOf(err ?? { message: `'${t.name}' answered HTTP ${res.status}` }, res.status);
    }
    remoteDone(t.state, true, ms);
    return res;
  };

  const create = (endpoint) => async (p = {}) => {
    const route = table.get(p?.model);
    if (!route) throw routerError(`no route named '${p?.model}' (routes: ${[...table.keys()].join(', ')})`, 404, 'model_not_found', 'model');
    const now = Date.now();
    const inputs = route.targets.map((t) => (t.kind === 'local' ? { name: t.name, kind: 'local', cost: t.cost }
      : { name: t.name, kind: 'remote', cost: t.cost, latency_ms: t.state.latency, in_flight: t.state.inFlight,
          healthy: t.state.healthy && t.state.coolUntil <= now }));
    const targets = JSON.stringify({ route: route.name, cost_weight: costWeight, targets: inputs });
    const decision = JSON.parse(await route.local.engine._route(endpoint, bodyOf(p), targets));
    if (decision.target == null) {
      const why = decision.candidates.map((c) => `${c.target}: ${c.refused}`).join('; ');
      throw routerError(`route '${route.name}': no target can take this request (${why})`, 400, 'route_no_target', 'model');
    }
    const t = route.targets.find((x) => x.name === decision.target);
    const stream = p != null && p.stream === true;
    const local = async (d) => {
      const api = endpoint === 'chat' ? route.local.engine.chat.completions : route.local.engine.completions;
      const { model: _, ...rest } = p;
      const r = await api.create(rest);
      return stream ? withRouteLast(r, d) : { ...r, wgllm: { ...(r.wgllm ?? {}), route: d } };
    };
    if (t.kind === 'local') return local(decision);
    let res;
    try {
      res = await remoteCall(t, endpoint, p, route);
    } catch (e) {
      // nothing reached the caller yet: the local engine answers when it could (as the server's routes do)
      if (!decision.candidates.some((c) => c.kind === 'local' && c.eligible)) throw e;
      return local({ ...decision, target: route.local.name, fallback: { from: t.name, error: e.message } });
    }
    if (stream) return withRouteLast(sseEvents(res), decision);
    const a = await res.json();
    return { ...a, wgllm: { ...(a.wgllm ?? {}), route: decision } };
  };
  return {
    chat: { completions: { create: create('chat') } },
    completions: { create: create('completions') },
    /** Each route's remote targets as the router measures them. */
    get stats() {
      const out = {};
      for (const [n, r] of table)
        out[n] = r.targets.filter((t) => t.kind === 'remote').map((t) => ({ name: t.name, latency_ms: t.state.latency,
          in_flight: t.state.inFlight, healthy: t.state.healthy && t.state.coolUntil <= Date.now() }));
      return out;
    },
  };
}

// The page side of the service worker engine (sw-host.js hosts it): how often
// each engine tells the service worker that its page is still there. A
// message event restarts Chromium's idle timer of a service worker (~30 s);
// messages on a MessagePort do not.
const HEARTBEAT_MS = 10000;

// The registration's worker once it is active (a fresh one installs first).
async function activeWorkerOf(reg) {
  while (!reg.active) {
    const w = reg.installing || reg.waiting;
    if (!w) throw new Error('wgllm: the service worker registration has no worker');
    await new Promise((res) => {
      const f = () => { if (w.state === 'activated' || w.state === 'redundant') { w.removeEventListener('statechange', f); res(); } };
      w.addEventListener('statechange', f);
      f();
    });
    if (w.state === 'redundant' && !reg.active) throw new Error('wgllm: the service worker failed to install (see its console)');
  }
  return reg.active;
}

let swSessionCount = 0;

/**
 * The same engine, hosted by a Service Worker (web/dist/sw.js, registered
 * here unless options.serviceWorker is a registration or another script's
 * URL): every page and tab of the origin that asks for the same model with
 * the same options shares one loaded model, so the next page's first request
 * needs no reload. The API is createWorkerEngine's; info.service_worker
 * says whether the model was reused and how many loads the worker has made.
 */
export async function createServiceWorkerEngine(options = {}) {
  checkBackend(options.backend);
  if (typeof navigator === 'undefined' || !navigator.serviceWorker) {
    const e = new Error('wgllm: this page has no service workers (a secure context is needed: https or localhost)');
    e.code = 'unsupported';
    throw e;
  }
  let reg = options.serviceWorker;
  if (reg == null || typeof reg === 'string' || reg instanceof URL) {
    const url = reg ?? new URL('./sw.js', import.meta.url);
    reg = await navigator.serviceWorker.register(url, { type: 'module', ...(options.scope ? { scope: options.scope } : {}) });
  }
  const sw = await activeWorkerOf(reg);
  // a session id the heartbeats name (the service worker's sessions are per engine, not per page)
  const session = typeof crypto !== 'undefined' && crypto.randomUUID ? crypto.randomUUID()
    : `${Date.now()}-${Math.random()}-${++swSessionCount}`;
  const channel = new MessageChannel();
  const port = channel.port1;
  const listeners = { message: new Set(), error: new Set() };
  port.onmessage = (ev) => { for (const f of listeners.message) f(ev); };
  sw.postMessage({ wgllm: 'connect', session }, [channel.port2]);
  const beat = () => { try { (reg.active ?? sw).postMessage({ wgllm: 'heartbeat', session }); } catch { /* the next one */ } };
  const timer = setInterval(beat, options.heartbeatMs ?? HEARTBEAT_MS);
  let closed = false;
  const bye = () => { if (!closed) port.postMessage({ op: 'bye' }); }; // the page leaves: its requests end now
  const close = () => {
    if (closed) return;
    bye();
    closed = true;
    clearInterval(timer);
    removeEventListener('pagehide', close);
    navigator.serviceWorker.removeEventListener('message', onLost);
    port.close();
  };
  // the browser stopped the worker (and restarted it) while this page was
  // open: the port leads nowhere, so the requests fail instead of hanging
  const onLost = (ev) => {
    if (!ev.data || ev.data.wgllm !== 'lost' || ev.data.session !== session) return;
    for (const f of listeners.error) f({ message: 'the service worker was restarted: its engine is gone (create the engine again)' });
    close();
  };
  navigator.serviceWorker.addEventListener('message', onLost);
  if (navigator.serviceWorker.startMessages) navigator.serviceWorker.startMessages();
  addEventListener('pagehide', close);
  // the port, as the Worker that createWorkerEngine talks to
  const link = {
    postMessage: (m, t) => port.postMessage(m, t),
    addEventListener: (type, f) => { if (listeners[type]) listeners[type].add(f); },
    removeEventListener: (type, f) => { if (listeners[type]) listeners[type].delete(f); },
    terminate: close,
  };
  let api;
  try {
    api = await createWorkerEngine({ ...options, worker: link });
  } catch (e) {
    close();
    throw e;
  }
  // the host's own report (models loaded, engines using it), off the engine calls' ids
  let statusId = 0;
  const status = () => new Promise((resolve, reject) => {
    if (closed) { reject(new Error('wgllm: the engine was unloaded')); return; }
    const id = `sw-status-${++statusId}`;
    const f = (ev) => {
      if (!ev.data || ev.data.id !== id) return;
      listeners.message.delete(f);
      if (ev.data.type === 'error') reject(new Error(ev.data.message)); else resolve(ev.data.value);
    };
    listeners.message.add(f);
    port.postMessage({ id, op: 'status' });
  });
  const caps = Object.getOwnPropertyDescriptor(api, 'capabilities').get;
  Object.defineProperty(api, 'capabilities', {
    get: () => ({ ...caps.call(api), webgpu: api.info.service_worker.webgpu, host: 'service-worker',
                  host_reason: api.info.service_worker.core_reason }),
  });
  api.serviceWorker = { status, registration: reg, session };
  return api;
}
