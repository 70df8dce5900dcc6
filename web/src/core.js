// core.js - the JS host of the wasm core (wgllm-core.js/.wasm): loads the
// module, puts the model into its file system, and runs requests through the
// flat C functions of web/src/wgllm_web.c. Used on the page (createEngine) and
// inside the worker (worker.js); the OpenAI-shaped API is in wgllm.js.
// A generation is an OpenAI request's JSON text in and the JSON texts of
// `wgllm serve` out (the core's OpenAI layer checks and answers it): no
// request field, default or C enum is known here.
//
// Nothing here blocks: the engine runs on its own pthread; streamed text is
// collected in C and JS waits for it with Atomics.waitAsync on a counter in
// the shared heap (falling back to short timers where waitAsync is missing).
// Pages that are not cross-origin isolated (no SharedArrayBuffer) get a
// single-threaded core: there JS drives the engine itself, running ticks
// (wgllm_web_step) for a few milliseconds at a time and giving the event loop
// a turn in between. Two of them: wgllm-core-st.js runs the CPU backend;
// wgllm-core-st-gpu.js (the same objects linked with Asyncify and the
// browser GPU HAL) runs WebGPU, its calls that wait for the browser (load,
// step, embed, snapshots) return Promises (the wasm stack unwinds while a GPU
// promise or a read is pending), and they run one at a time (serial below).
// `auto` there probes the adapter first: a hardware one gets the WebGPU
// core, a software one (SwiftShader) or none the CPU core, which is faster.
//
// The model's bytes come through the model store (store.js: URL via OPFS,
// File, stored name, bytes). On WebGPU they are streamed: the core reads the
// header and then each weight, in chunks of at most 16 MiB, from the OPFS
// file / File / bytes straight into GPU buffers (wgllm_web_js_read), so the
// weights never sit in the wasm heap, which can only grow. The CPU backend
// computes on the weights in the heap: there the files are copied once, in
// slices, into the heap, where the core's mmap finds them (so are URLs
// fetched without OPFS, which cannot be read at any offset).

import { readSnapshots, writeSnapshots, resolveModel, mountInHeap, probeRanges, closeReaders, wasmBuffer } from './store.js';

// The threaded core is imported only when it can run: its module needs
// SharedArrayBuffer as soon as it is instantiated.
const CORE_FILES = { threaded: './wgllm-core.js', 'single-threaded': './wgllm-core-st.js',
  'single-threaded-webgpu': './wgllm-core-st-gpu.js' };
const importCore = (core) => import(CORE_FILES[core]).then((m) => m.default);

// What `auto` on a single-threaded page would get from navigator.gpu, before
// a core is chosen: {hardware, why}. The software test is the browser HAL's
// (hal_webgpu.lib.js wgllm_hal_js_open), so both cores judge an adapter alike.
async function probeAdapter() {
  const gpu = typeof navigator !== 'undefined' ? navigator.gpu : undefined;
  if (!gpu) return { hardware: false, why: 'this browser has no WebGPU (navigator.gpu is missing)' };
  let adapter = null;
  try { adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' }); } catch { /* as none */ }
  if (!adapter) return { hardware: false, why: 'no WebGPU adapter (navigator.gpu.requestAdapter() returned null)' };
  const info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
  const text = [info.vendor, info.architecture, info.device, info.description].join(' ');
  const software = !!(info.isFallbackAdapter || adapter.isFallbackAdapter ||
    /swiftshader|llvmpipe|lavapipe|softpipe|warp|basic render|software/i.test(text));
  const name = info.device || info.description || [info.vendor, info.architecture].filter(Boolean).join(' ') || 'WebGPU adapter';
  return software ? { hardware: false, why: `the WebGPU adapter '${name}' is a software/CPU adapter` } : { hardware: true, name };
}

function toError(message, code) {
  const e = new Error(message);
  if (code) e.code = code;
  return e;
}

let loadCount = 0;

// endpoints of wgllm_web_openai (enum wgllm_openai_endpoint), by the name of the route
const ENDPOINTS = { completions: 0, chat: 1 };

// An OpenAI error object ({message, type, param, code}) with its HTTP status,
// as the Error the API rejects with (what the openai client's APIError carries).
export function openaiError(err, status) {
  const e = toError(`wgllm: ${err && err.message ? err.message : 'the request failed'}`);
  e.code = err?.code ?? null; // null as in the server's JSON: OpenAI gives most 400s no code
  e.status = status;
  e.type = err?.type ?? null;
  e.param = err?.param ?? null;
  return e;
}

// The load's sizes: positive integers that fit the C ints they become.
function checkedCount(v, name, def, max) {
  if (v == null) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max)
    throw toError(`wgllm: ${name} must be an integer from 1 to ${max} (got ${JSON.stringify(v) ?? String(v)})`, 'argument');
  return v;
}

// The error of a failed load, naming the stored copy when there is one.
function failedLoad(M, src, msg) {
  const where = src.storeName ? ` (the copy stored in the browser as '${src.storeName}'; deleteModel('${src.storeName}') removes it)` : '';
  if (M.PThread && M.PThread.terminateAllThreads) M.PThread.terminateAllThreads();
  return toError(`wgllm: loading the model failed: ${msg}${where}`, 'load');
}

// Half of navigator.hardwareConcurrency (pages, workers and service workers
// have it), at least one.
function defaultThreads() {
  const hc = typeof navigator !== 'undefined' && Number.isInteger(navigator.hardwareConcurrency) ?
    navigator.hardwareConcurrency : 1;
  return Math.max(1, Math.floor(hc / 2));
}

/**
 * Starts the wasm core and loads a model. Options: model (see store.js),
 * onProgress({stage, progress, loaded, total, shard?, shards?}), store (false:
 * URLs bypass OPFS), backend ('auto' default | 'webgpu' | 'cpu'), chatTemplate
 * (Jinja text, e.g. chatml), nThreads, nCtx, nSlots. Resolves to a core engine
 * (generate/embed/interrupt/unload; info says the backend).
 */
export async function loadCore(opts = {}) {
  const started = {};
  try {
    return await loadIn(opts, started);
  } catch (e) {
    // whatever failed (a block the heap could not give, a bad option, the
    // load itself): the module's pthread pool ends with it, so failed loads
    // do not pile up workers (failedLoad may have ended them already)
    const M = started.M;
    if (M && M.PThread && M.PThread.terminateAllThreads) M.PThread.terminateAllThreads();
    throw e;
  }
}

async function loadIn(opts, started) {
  // threads need SharedArrayBuffer, which only cross-origin isolated pages
  // (COOP/COEP headers) have; opts.threaded: false forces the other build
  const isolated = typeof SharedArrayBuffer !== 'undefined' &&
    !(typeof crossOriginIsolated !== 'undefined' && !crossOriginIsolated);
  const threaded = opts.threaded !== false && isolated;
  if (opts.model == null) throw toError('wgllm: no model given (options.model)', 'argument');
  const onProgress = typeof opts.onProgress === 'function' ? opts.onProgress : () => {};
  const BACKENDS = { cpu: 0, webgpu: 1, auto: 2 }; // enum wgllm_backend
  const asked = opts.backend ?? 'auto';
  if (!(asked in BACKENDS))
    throw toError(`wgllm: unknown backend '${asked}' (use 'auto', 'webgpu' or 'cpu')`, 'argument');
  // Which core, and why (info.core, info.core_detail).
  let core = 'threaded';
  let coreWhy = 'the page is cross-origin isolated: the engine and the compute threads are pthreads';
  let backend = asked;
  let autoWhy = null; // `auto` settled here, before the core: what backend_detail says
  if (!threaded) {
    const noThreads = isolated ? 'threaded: false was asked' :
      'the page is not cross-origin isolated (no COOP/COEP headers, so no SharedArrayBuffer)';
    if (asked === 'auto') {
      const probe = await probeAdapter();
      if (!probe.hardware) {
        backend = 'cpu';
        autoWhy = `cpu (auto: ${probe.why}; the single-threaded CPU core)`;
      }
    }
    core = backend === 'cpu' ? 'single-threaded' : 'single-threaded-webgpu';
    coreWhy = backend === 'cpu' ? `${noThreads}: one thread, driven from this event loop` :
      `${noThreads}: one thread, driven from this event loop; WebGPU's waits unwind to it (Asyncify)`;
  }
  const gpuCore = core === 'single-threaded-webgpu';
  // checked before anything is fetched; 0 (or unset) is the default
  const nCtx = checkedCount(opts.nCtx || undefined, 'nCtx', 2048, 1 << 24);
  const nSlots = checkedCount(opts.nSlots || undefined, 'nSlots', 1, 256);
  // Unless asked, half the logical cores (as wllama), at most 4: the other
  // half stays with the page, the browser and the OS, whose work would
  // otherwise deschedule a compute thread that every barrier waits for (a
  // 2-core machine keeps one thread); see web/README.md.
  const nThreads = threaded ? Math.max(1, Math.min(opts.nThreads || defaultThreads(), 4)) : 1;
  // the bar: download 0-0.4, reading into the wasm memory 0.4-0.5, parsing/validating the rest
  let lastProgress = 0; // load progress arrives asynchronously from the loading thread: keep it monotone
  const report = (stage, frac, loaded, total, extra) => {
    const progress = Math.max(lastProgress,
      stage === 'download' ? frac * 0.4 : stage === 'read' ? 0.4 + frac * 0.1 : 0.5 + frac * 0.5);
    lastProgress = progress;
    try { onProgress({ stage, progress, loaded, total, ...extra }); } catch { /* the caller's bug, not ours */ }
  };
  const src = await resolveModel(opts.model, report, { store: opts.store });
  // opts.coreModules: the cores' factories, imported statically by a host
  // where import() is not allowed (a service worker: sw-host.js)
  const createWgllmCore = opts.coreModules?.[core] ?? await importCore(core);
  const M = await createWgllmCore({
    print: (t) => console.log(t),
    printErr: (t) => console.warn(t),
  });
  started.M = M;
  const enc = new TextEncoder();
  const mem = () => wasmBuffer(M);
  // Every block the core gets from JS is checked: the wasm memory stops at
  // 4 GiB, and malloc then returns 0 (writing there would corrupt the heap).
  // Pointers are unsigned: above 2 GiB the export returns them negative.
  const alloc = (n, what) => {
    const p = M._malloc(Math.max(1, n)) >>> 0;
    if (!p) throw toError(`wgllm: out of wasm memory (${n} bytes for ${what}; the limit is 4 GiB)`, 'memory');
    return p;
  };
  // Strings go to C as UTF-8 with their byte length: a NUL (U+0000) is text
  // there, not the end. Lone surrogates become U+FFFD (TextEncoder), as in
  // any UTF-8 encoder. Returns [pointer, bytes] (caller frees).
  const cbytes = (s, what) => {
    const b = enc.encode(s);
    const p = alloc(b.length + 1, what);
    const h = new Uint8Array(mem());
    h.set(b, p);
    h[p + b.length] = 0;
    return [p, b.length];
  };
  const cstr = (s, what) => cbytes(s, what)[0]; // for paths and names (no NUL in them)
  // "a\0b\0..." with its byte length (caller frees). The C side reads
  // NUL-terminated strings out of it, so a string with a NUL of its own is
  // used for file names only.
  const cpacked = (strings, what) => {
    const parts = strings.map((s) => enc.encode(String(s)));
    const n = parts.reduce((a, b) => a + b.length + 1, 0);
    const p = alloc(n, what);
    const h = new Uint8Array(mem());
    let o = p;
    for (const b of parts) { h.set(b, o); o += b.length; h[o++] = 0; }
    return [p, n];
  };
  const readBytes = (p, n) => new Uint8Array(mem(), p >>> 0, n).slice(); // copy out of the shared heap
  const lastError = () => M.UTF8ToString(M._wgllm_web_last_error());
  const tmplPtr = opts.chatTemplate ? cstr(String(opts.chatTemplate), 'the chat template') : 0;

  // The WebGPU single-threaded core: the calls that may wait for the browser
  // resolve once the wasm stack has rewound and returned (ccall async). Only
  // one such call can be suspended at a time (Asyncify keeps one saved
  // stack), so they queue here; the calls in between (take, cancel, submit)
  // never wait.
  let chain = Promise.resolve();
  const serial = (fn) => {
    const p = chain.then(fn);
    chain = p.then(() => {}, () => {});
    return p;
  };
  const acall = (name, args) => serial(() => M.ccall(name, 'number', args.map(() => 'number'), args, { async: true }));

  // A load runs on a pthread (WebGPU's HAL waits there for this thread's
  // promises); this thread only waits asynchronously for it to finish.
  const awaitLoad = async (ld) => {
    while (!M._wgllm_web_load_done(ld)) {
      const h = new Int32Array(mem());
      const seen = Atomics.load(h, ld >>> 2);
      if (M._wgllm_web_load_done(ld)) break;
      if (typeof Atomics.waitAsync === 'function') {
        const r = Atomics.waitAsync(h, ld >>> 2, seen, 200);
        if (r.async) await r.value;
      } else {
        await new Promise((res) => setTimeout(res, 5));
      }
    }
    const engineFailed = M._wgllm_web_load_engine_failed(ld) !== 0;
    return { st: M._wgllm_web_load_finish(ld), engineFailed };
  };

  let st = 0;
  let streamed = false;
  let loadError = '';
  // Streamed: the files stay here (Module.wgllmSources) and the core reads
  // them in chunks. Only where WebGPU may run and every file can be read at
  // any offset; `auto` falls back to the heap and the CPU when the model
  // loaded but WebGPU could not start (no adapter, a software one, a format
  // without kernels).
  const srcId = ++loadCount;
  let streamable = (threaded || gpuCore) && backend !== 'cpu' && opts.streamWeights !== false &&
    typeof navigator !== 'undefined' && !!navigator.gpu && src.files.every((f) => f.blob || f.bytes || f.url);
  // URLs not kept in OPFS: read with range requests where the server answers them,
  // a window of them in flight ahead of the reader (store.js RangeReader)
  if (streamable && src.files.some((f) => f.url)) streamable = await probeRanges(src.files);
  if (streamable) {
    M.wgllmSources = M.wgllmSources || {};
    M.wgllmSources[srcId] = src.files;
    const total = src.files.reduce((a, f) => a + f.size, 0);
    let got = 0;
    M.onStreamRead = (n) => { got += n; report('load', Math.min(1, got / total), got, total); };
    const sizes = alloc(8 * src.files.length, 'file sizes');
    new Float64Array(mem(), sizes, src.files.length).set(src.files.map((f) => f.size));
    const [names] = cpacked(src.files.map((f) => f.name), 'file names');
    const args = [srcId, src.files.length, sizes, names, nThreads, nCtx, nSlots, tmplPtr, BACKENDS[backend]];
    const ld = gpuCore ? await acall('wgllm_web_load_stream_start', args) : M._wgllm_web_load_stream_start(...args);
    M._free(sizes);
    M._free(names);
    const r = ld ? await awaitLoad(ld) : { st: 0, engineFailed: false };
    M.onStreamRead = null;
    closeReaders(src.files); // the read-ahead of URLs: nothing more is read in order
    if (r.st) {
      st = r.st;
      streamed = true;
    } else {
      delete M.wgllmSources[srcId];
      loadError = lastError();
      if (backend !== 'auto' || !r.engineFailed) {
        if (tmplPtr) M._free(tmplPtr);
        throw failedLoad(M, src, loadError);
      }
    }
  }
  if (!st) {
    M.onLoadProgress = (p) => report('load', p);
    const dir = `/model-${srcId}`;
    const mounted = await mountInHeap(M, src.files, dir, (loaded, total, frac) =>
      report(src.origin === 'network' ? 'download' : 'read', frac, loaded, total));
    const pathPtr = cstr(mounted.path, 'the model path');
    // the single-threaded CPU core loads synchronously here, the WebGPU one
    // within its call (which resolves when the load is done)
    const args = [pathPtr, nThreads, nCtx, nSlots, tmplPtr, BACKENDS[backend]];
    const ld = threaded ? M._wgllm_web_load_start(...args) : gpuCore ? await acall('wgllm_web_load_start', args) : 0;
    st = threaded || gpuCore ? 0 : M._wgllm_web_load(pathPtr, nThreads, nCtx, nSlots, tmplPtr);
    M._free(pathPtr);
    if (ld) st = (await awaitLoad(ld)).st;
    M.onLoadProgress = null;
    mounted.release(); // blocks that no mmap took (a failed load)
    for (const f of src.files) try { M.FS.unlink(`${dir}/${f.name}`); } catch { /* the mapping keeps the bytes */ }
    if (!st) {
      if (tmplPtr) M._free(tmplPtr);
      throw failedLoad(M, src, lastError().split(`${dir}/`).join('')); // the core's file system path means nothing to the caller
    }
  }
  if (tmplPtr) M._free(tmplPtr);
  report('load', 1);
  const detail = autoWhy ?? M.UTF8ToString(M._wgllm_web_backend(st));
  const onGpu = detail.startsWith('webgpu');

  const info = {
    backend: onGpu ? 'webgpu' : 'cpu',
    // what it runs on and why, e.g. "cpu (auto: the WebGPU adapter 'google swiftshader' is a software/CPU adapter)"
    backend_detail: detail,
    adapter: onGpu ? detail.replace(/^webgpu: (.*) \(browser, [^)]*\).*$/, '$1') : null,
    gpu_memory: M._wgllm_web_model_info(st, 5), // bytes, fixed at load
    threads: onGpu ? 1 : nThreads,
    threaded, // false: a single-threaded core, driven from this event loop
    // 'threaded' | 'single-threaded' (CPU) | 'single-threaded-webgpu', and why
    core,
    core_detail: coreWhy,
    arch: M.UTF8ToString(M._wgllm_web_model_arch(st)),
    n_vocab: M._wgllm_web_model_info(st, 0),
    n_ctx_train: M._wgllm_web_model_info(st, 1),
    n_embd: M._wgllm_web_model_info(st, 2),
    n_layer: M._wgllm_web_model_info(st, 3),
    weight_bytes: M._wgllm_web_model_info(st, 4),
    simd128: true,
    // true: the Q4_0 and Q4_K products run in the relaxed-SIMD kernel module (where the browser validates it)
    relaxed_simd: M.UTF8ToString(M._wgllm_web_cpu_features()).split(' ').includes('RELAXED_SIMD'),
    source: src.origin, // where the bytes came from: 'opfs', 'network', 'file' or 'memory'
    // true: the weights went from the files straight into GPU buffers (never in the wasm heap)
    weights_streamed: streamed,
    store: src.storeName ?? null,
    wasm_memory_bytes: mem().byteLength, // the heap right after the load (it never shrinks)
    crossOriginIsolated: typeof crossOriginIsolated !== 'undefined' ? crossOriginIsolated : false,
  };

  const lenPtr = alloc(4, 'a length');
  const active = new Set(); // jobs in flight, for interrupt() and unload()
  let unloaded = false;

  const waitSeq = async (idx, seen) => {
    const h = new Int32Array(mem());
    if (typeof Atomics.waitAsync === 'function') {
      const r = Atomics.waitAsync(h, idx, seen, 200);
      if (r.async) await r.value;
    } else if (Atomics.load(h, idx) === seen) {
      await new Promise((res) => setTimeout(res, 2));
    }
  };

  // Single-threaded core: engine ticks for about SLICE_MS, then a turn of
  // the event loop. Mostly a MessageChannel task (setTimeout(0) is clamped
  // to 4 ms, which would cost a small model much of its speed), but at least
  // every TIMER_MS a timer task: Chromium runs posted messages before timers,
  // so with messages alone the page's own timers would starve.
  const SLICE_MS = 8;
  const POLL_MS = 50; // how often a pass suspended on the GPU is looked at for new lines
  const TIMER_MS = 16;
  const channel = threaded ? null : new MessageChannel();
  // one resolver per message posted, in order: requests in flight together
  // (nSlots > 1) each yield here, and none of their turns may be lost
  const turns = [];
  if (channel) channel.port1.onmessage = () => { const res = turns.shift(); if (res) res(); };
  let lastTimer = 0;
  const yieldTurn = () => new Promise((res) => {
    const now = performance.now();
    if (now - lastTimer >= TIMER_MS) {
      lastTimer = now;
      setTimeout(res, 0);
    } else {
      turns.push(res);
      channel.port2.postMessage(0);
    }
  });
  const stepSlice = (job) => {
    const t0 = performance.now();
    while (!M._wgllm_web_job_done(job) && M._wgllm_web_step(st, job) && performance.now() - t0 < SLICE_MS) { /* ticks */ }
  };
  // the same on the WebGPU core, where a tick awaits the GPU (its readback)
  const stepSliceAsync = async (job) => {
    const t0 = performance.now();
    while (!M._wgllm_web_job_done(job) && (await acall('wgllm_web_step', [st, job])) &&
           performance.now() - t0 < SLICE_MS) { /* ticks */ }
  };

  // Drives one OpenAI job to its end: each line of its text (a chunk's JSON)
  // to onChunk as it comes; resolves with the HTTP status, the final JSON text
  // and the timings (which are not part of the answer).
  const drive = async (job, onChunk) => {
    const idx = M._wgllm_web_job_seq(job) >>> 2;
    const dec = new TextDecoder();
    let partial = '';
    const takeLines = () => { // (take never waits: it may run while a step is suspended on the GPU)
      const p = M._wgllm_web_job_take(job, lenPtr);
      const n = new Int32Array(mem())[lenPtr >>> 2];
      if (n > 0) {
        const lines = (partial + dec.decode(readBytes(p, n), { stream: true })).split('\n');
        partial = lines.pop(); // a line is whole once its newline is in
        if (onChunk) for (const l of lines) onChunk(l);
      }
    };
    for (;;) {
      const seen = Atomics.load(new Int32Array(mem()), idx);
      const done = M._wgllm_web_job_done(job);
      takeLines();
      if (done) break;
      if (threaded) {
        await waitSeq(idx, seen);
      } else if (gpuCore) {
        // a long prompt's pass waits on the GPU submission by submission: the
        // lines it adds meanwhile (return_progress) go out as they come
        let settled = false;
        const stepping = stepSliceAsync(job).finally(() => { settled = true; });
        while (!settled) {
          await Promise.race([stepping, new Promise((res) => setTimeout(res, POLL_MS))]);
          if (!settled) takeLines();
        }
        await stepping;
        await yieldTurn();
      } else {
        stepSlice(job);
        await yieldTurn();
      }
    }
    const num = (k) => M._wgllm_web_job_num(job, k);
    return {
      status: num(11),
      answer: M.UTF8ToString(M._wgllm_web_job_answer(job)),
      timings: { ttft_ms: num(5), prefill_tok_s: num(6), decode_tok_s: num(7), total_ms: num(8) },
    };
  };

  const checkLoaded = () => { if (unloaded) throw toError('wgllm: the engine was unloaded', 'unloaded'); };

  /**
   * An OpenAI request: endpoint 'chat' | 'completions', body its JSON text
   * (as a client would POST it), modelId the name answers show. A request
   * the layer refuses throws here (openaiError: status, type, param, code).
   * Else returns {result: Promise<{status, answer, timings}>, cancel()};
   * a stream's chunks (JSON texts) go to onChunk as they come.
   */
  function openai(endpoint, body, modelId, onChunk) {
    checkLoaded();
    if (!(endpoint in ENDPOINTS)) throw toError(`wgllm: unknown endpoint '${endpoint}' (chat or completions)`, 'argument');
    if (typeof body !== 'string') throw toError('wgllm: the request body must be a JSON text', 'argument');
    const [bodyPtr, bodyLen] = cbytes(body, 'the request');
    let idPtr;
    try {
      idPtr = cstr(String(modelId ?? ''), 'the model name');
    } catch (e) {
      M._free(bodyPtr);
      throw e;
    }
    const job = M._wgllm_web_openai(st, ENDPOINTS[endpoint], bodyPtr, bodyLen, idPtr);
    M._free(bodyPtr);
    M._free(idPtr);
    if (!job) throw toError(`wgllm: ${lastError()}`, 'memory');
    // refused before it started (the layer's 4xx, a full queue): done at once, with its error
    if (M._wgllm_web_job_done(job) && M._wgllm_web_job_num(job, 11) !== 200) {
      const status = M._wgllm_web_job_num(job, 11);
      const answer = M.UTF8ToString(M._wgllm_web_job_answer(job));
      M._wgllm_web_job_free(job);
      let err;
      try { err = JSON.parse(answer).error; } catch { err = { message: answer || 'the request failed' }; }
      throw openaiError(err, status);
    }
    const entry = { job, cancel: () => M._wgllm_web_job_cancel(job) };
    active.add(entry);
    const result = drive(job, onChunk).finally(() => {
      active.delete(entry);
      M._wgllm_web_job_free(job);
      persist();
    });
    return { result, cancel: entry.cancel };
  }

  // Waits for a job without streamed text (embedding, snapshots); throws its message.
  const finishJob = async (job) => {
    const idx = M._wgllm_web_job_seq(job) >>> 2;
    for (;;) { // (the single-threaded core finishes these at once)
      const seen = Atomics.load(new Int32Array(mem()), idx);
      if (M._wgllm_web_job_done(job)) break;
      await waitSeq(idx, seen);
    }
    if (M._wgllm_web_job_num(job, 0) !== 0)
      throw toError(`wgllm: ${M.UTF8ToString(M._wgllm_web_job_message(job))}`, 'request');
  };
  const runJob = async (job, read) => {
    if (!job) throw toError(`wgllm: ${lastError()}`, 'request');
    const entry = { job, cancel: () => {} };
    active.add(entry);
    try {
      await finishJob(job);
      return read(job);
    } finally {
      active.delete(entry);
      M._wgllm_web_job_free(job);
    }
  };

  /** Embeds one text: pooling 'mean'|'cls'|'last'|'model'; resolves to a Float32Array. */
  async function embed(text, { pooling = 'mean', normalize = true } = {}) {
    checkLoaded();
    const pool = { model: -1, none: 0, mean: 1, cls: 2, last: 3 }[pooling];
    if (pool === undefined) throw toError(`wgllm: unknown pooling '${pooling}'`, 'argument');
    if (typeof text !== 'string') throw toError('wgllm: the text to embed must be a string', 'argument');
    const [p, n] = cbytes(text, 'the text to embed');
    const args = [st, p, n, pool, normalize ? 1 : 0];
    let job;
    try {
      job = gpuCore ? await acall('wgllm_web_embed', args) : M._wgllm_web_embed(...args);
    } finally {
      M._free(p);
    }
    return runJob(job, (j) => {
      const n = M._wgllm_web_job_num(j, 10);
      return new Float32Array(new Float32Array(mem(), M._wgllm_web_job_vec(j) >>> 0, n)); // a copy, off the shared heap
    });
  }

  /** The engine's prefix snapshots (wgllm_engine_snapshots_export) as a Uint8Array. */
  async function saveSnapshots() {
    checkLoaded();
    const job = gpuCore ? await acall('wgllm_web_snapshots', [st, 0, 0, 0]) : M._wgllm_web_snapshots(st, 0, 0, 0);
    return runJob(job, (j) => {
      const p = M._wgllm_web_job_blob(j, lenPtr);
      return readBytes(p, new Int32Array(mem())[lenPtr >>> 2]);
    });
  }

  /** Adds the snapshots of an exported file; a file of another model or backend is refused. */
  async function restoreSnapshots(bytes) {
    checkLoaded();
    const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = alloc(b.length, 'the snapshots');
    new Uint8Array(mem()).set(b, p);
    let job;
    try {
      job = gpuCore ? await acall('wgllm_web_snapshots', [st, 1, p, b.length]) : M._wgllm_web_snapshots(st, 1, p, b.length);
    } finally {
      M._free(p);
    }
    return runJob(job, () => b.length);
  }

  // persistSnapshots: restore the stored file now, store it again after each request
  const snapKey = opts.persistSnapshots
    ? (typeof opts.persistSnapshots === 'string' ? opts.persistSnapshots : src.storeName ?? src.files[0]?.name ?? 'model')
    : null;
  let saving = null, dirty = false;
  const persist = () => {
    if (!snapKey || unloaded) return;
    if (saving) { dirty = true; return; }
    saving = (async () => {
      do {
        dirty = false;
        try { await writeSnapshots(snapKey, await saveSnapshots()); } catch (e) {
          if (!unloaded) console.warn(`wgllm: storing KV snapshots failed: ${e.message}`);
        }
      } while (dirty && !unloaded);
      saving = null;
    })();
  };
  info.snapshots = null;
  if (snapKey) {
    info.snapshots = { key: snapKey, restored_bytes: 0 };
    try {
      const stored = await readSnapshots(snapKey);
      if (stored) info.snapshots.restored_bytes = await restoreSnapshots(stored);
    } catch (e) {
      info.snapshots.error = e.message; // another model's or a damaged file: start cold, say why
      console.warn(`wgllm: the stored KV snapshots were not restored: ${e.message}`);
    }
  }

  function interrupt() {
    for (const e of active) e.cancel();
  }

  async function unload() {
    if (unloaded) return;
    interrupt();
    if (saving) await saving;
    while (active.size) await new Promise((res) => setTimeout(res, 5));
    unloaded = true;
    await serial(() => M._wgllm_web_unload(st)); // after any call still suspended (WebGPU core)
    closeReaders(src.files); // URL reads still in flight are aborted
    if (M.wgllmSources) delete M.wgllmSources[srcId];
    M._free(lenPtr);
    if (channel) channel.port1.close(); // a host that outlives its engines (a service worker) keeps no port per load
    if (M.PThread && M.PThread.terminateAllThreads) M.PThread.terminateAllThreads();
  }

  /** Waits until the snapshots of finished requests are stored (persistSnapshots). */
  const flushSnapshots = async () => { while (saving) await saving; };

  /**
   * The routing policy's decision (wgllm.h, "Routes", in the core) for a
   * request on a route whose local target is this engine: endpoint and body
   * as for openai() (body's `model` the route's name), targets the route's
   * JSON text as the router measures it ({route, cost_weight, targets: [{name,
   * kind, cost, latency_ms, in_flight, healthy}]}). Returns the decision's JSON text.
   */
  function route(endpoint, body, targets) {
    checkLoaded();
    if (!(endpoint in ENDPOINTS)) throw toError(`wgllm: unknown endpoint '${endpoint}' (chat or completions)`, 'argument');
    const [bodyPtr, bodyLen] = cbytes(String(body), 'the request');
    let tPtr, tLen;
    try {
      [tPtr, tLen] = cbytes(String(targets), 'the route');
    } catch (e) {
      M._free(bodyPtr);
      throw e;
    }
    const out = M._wgllm_web_route(st, ENDPOINTS[endpoint], bodyPtr, bodyLen, tPtr, tLen);
    M._free(bodyPtr);
    M._free(tPtr);
    if (!out) throw toError(`wgllm: ${lastError()}`, 'argument');
    const text = M.UTF8ToString(out);
    M._free(out);
    return text;
  }

  // running(): requests in flight (a host shared by several pages reports it)
  return { info, openai, embed, interrupt, unload, saveSnapshots, restoreSnapshots, flushSnapshots, route,
    running: () => active.size };
}
