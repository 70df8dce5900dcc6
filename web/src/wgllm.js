// wgllm.js - the browser package's entry point: an OpenAI-style engine over
// the wasm core, either on the page (createEngine) or in a Web Worker
// (createWorkerEngine, same API, the page never blocks).
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

let idCounter = 0;
const newId = (prefix) => `${prefix}-${Date.now().toString(36)}${(++idCounter).toString(36)}`;
const now = () => Math.floor(Date.now() / 1000);

// Request fields the engine understands (OpenAI names, plus a few of llama.cpp's).
function requestOf(kind, p) {
  if (p.n != null && p.n !== 1) throw new Error('wgllm: only n = 1 is supported');
  return {
    kind,
    prompt: p.prompt,
    messages: p.messages,
    max_tokens: p.max_tokens ?? p.max_completion_tokens,
    temperature: p.temperature,
    top_p: p.top_p,
    top_k: p.top_k,
    min_p: p.min_p,
    seed: p.seed,
    repetition_penalty: p.repetition_penalty,
    presence_penalty: p.presence_penalty,
    frequency_penalty: p.frequency_penalty,
    stop: p.stop,
    ignore_eos: p.ignore_eos,
  };
}

function usageOf(r) {
  return {
    prompt_tokens: r.usage.prompt_tokens,
    completion_tokens: r.usage.completion_tokens,
    total_tokens: r.usage.prompt_tokens + r.usage.completion_tokens,
    prompt_tokens_details: { cached_tokens: r.usage.cached_tokens },
    extra: {
      ttft_ms: r.timings.ttft_ms,
      prefill_tokens_per_s: r.timings.prefill_tok_s,
      decode_tokens_per_s: r.timings.decode_tok_s,
      total_ms: r.timings.total_ms,
    },
  };
}

// An async iterator over chunks built from streamed text; breaking out of the
// loop early cancels the request.
function streamOf(backend, req, makeChunk, makeLast, includeUsage) {
  const queue = [];
  let wake = null;
  let finished = false;
  let failure = null;
  let final = null;
  const push = (t) => {
    if (!t) return;
    queue.push(t);
    if (wake) { wake(); wake = null; }
  };
  const h = backend.generate(req, push);
  h.result.then((r) => { final = r; }, (e) => { failure = e; }).finally(() => {
    finished = true;
    if (wake) { wake(); wake = null; }
  });
  let first = true;
  async function* gen() {
    try {
      for (;;) {
        if (queue.length) {
          const text = queue.splice(0).join('');
          yield makeChunk(text, first);
          first = false;
          continue;
        }
        if (finished) break;
        await new Promise((res) => { wake = res; });
      }
      if (failure) throw failure;
      yield makeLast(final);
      if (includeUsage) yield { ...makeLast(final), choices: [], usage: usageOf(final) };
    } finally {
      if (!finished) h.cancel();
    }
  }
  return gen();
}

function openaiApi(backend, modelName) {
  const chatCreate = async (p = {}) => {
    const req = requestOf('chat', p);
    const id = newId('chatcmpl');
    const created = now();
    if (p.stream) {
      return streamOf(backend, req,
        (text, first) => ({
          id, object: 'chat.completion.chunk', created, model: modelName,
          choices: [{ index: 0, delta: first ? { role: 'assistant', content: text } : { content: text },
                      logprobs: null, finish_reason: null }],
        }),
        (r) => ({
          id, object: 'chat.completion.chunk', created, model: modelName,
          choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: r.finish }],
        }),
        !!(p.stream_options && p.stream_options.include_usage));
    }
    const r = await backend.generate(req, null).result;
    return {
      id, object: 'chat.completion', created, model: modelName,
      choices: [{ index: 0, message: { role: 'assistant', content: r.text }, logprobs: null, finish_reason: r.finish }],
      usage: usageOf(r),
    };
  };
  const complCreate = async (p = {}) => {
    const req = requestOf('completion', p);
    const id = newId('cmpl');
    const created = now();
    if (p.stream) {
      return streamOf(backend, req,
        (text) => ({
          id, object: 'text_completion', created, model: modelName,
          choices: [{ index: 0, text, logprobs: null, finish_reason: null }],
        }),
        (r) => ({
          id, object: 'text_completion', created, model: modelName,
          choices: [{ index: 0, text: '', logprobs: null, finish_reason: r.finish }],
        }),
        !!(p.stream_options && p.stream_options.include_usage));
    }
    const r = await backend.generate(req, null).result;
    return {
      id, object: 'text_completion', created, model: modelName,
      choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: r.finish }],
      usage: usageOf(r),
    };
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
    chat: { completions: { create: chatCreate } },
    completions: { create: complCreate },
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
    // the capability report: backend chosen and why, adapter, GPU memory
    get capabilities() {
      const i = backend.info;
      return { backend: i.backend, reason: i.backend_detail, adapter: i.adapter, gpu_memory: i.gpu_memory,
               webgpu: typeof navigator !== 'undefined' && !!navigator.gpu, threads: i.threads,
               crossOriginIsolated: i.crossOriginIsolated };
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
  return openaiApi(core, modelNameOf(options.model));
}

// Request ids are unique across engines: two engines on one worker
// (options.worker) each take only their own replies.
let workerCallId = 0;

/** The same engine, running in a Web Worker (web/dist/worker.js). */
export async function createWorkerEngine(options = {}) {
  checkBackend(options.backend);
  const own = !options.worker; // a worker made here ends with the engine or its failed load
  const worker = options.worker ?? new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const pending = new Map(); // id -> {resolve, reject, onText}
  let onProgress = typeof options.onProgress === 'function' ? options.onProgress : null;
  let dead = null;
  const onMessage = (ev) => {
    const m = ev.data;
    if (!m || typeof m !== 'object') return;
    if (m.type === 'progress') { if (onProgress) try { onProgress(m.progress); } catch { /* caller's */ } return; }
    const p = pending.get(m.id);
    if (!p) return;
    if (m.type === 'text') { if (p.onText) p.onText(m.text); return; }
    pending.delete(m.id);
    if (m.type === 'error') { const e = new Error(m.message); e.code = m.code; p.reject(e); } else p.resolve(m.value);
  };
  const onError = (ev) => {
    dead = new Error(`wgllm: the worker failed: ${ev.message || 'unknown error'}`);
    for (const p of pending.values()) p.reject(dead);
    pending.clear();
  };
  worker.addEventListener('message', onMessage);
  worker.addEventListener('error', onError);
  const call = (op, args, onText) => {
    if (dead) return { id: 0, promise: Promise.reject(dead) };
    const id = ++workerCallId;
    const promise = new Promise((resolve, reject) => pending.set(id, { resolve, reject, onText }));
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
    generate(req, onText) {
      const c = call('generate', req, onText);
      return { result: c.promise, cancel: () => worker.postMessage({ op: 'cancel', args: { id: c.id } }) };
    },
    embed: (text, opts) => call('embed', { text, opts }).promise,
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
