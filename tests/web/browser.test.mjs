// browser.test.mjs - the browser package (web/dist, `make wasm`) in a real
// headless Chromium (Debian's /usr/bin/chromium driven by playwright-core):
// the worker engine loads a synthetic model over HTTP with progress, greedy
// text equals the native `wgllm run` on the same file, streaming chunks add
// up to the same text, interrupt() stops a long generation, the page keeps
// painting frames meanwhile, embeddings, a corrupt file's error, and the
// on-page engine; then the WebGPU backend over navigator.gpu (SwiftShader):
// same tokens as native `wgllm run` on CPU and Dawn (tiny, and gemma3's
// block), the capability report,
// `auto` choosing the CPU on a software adapter, no page stalls, and the
// fallback without navigator.gpu. Loopback only; the browser and the server
// close at the end.
// Run through tests/web/run.sh (which builds and installs what is missing).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { root, chromium, startServer, WGLLM, MODELS, WEBGPU_FLAGS as FLAGS, synthModel, nativeRun as nativeRunOf } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';
const PROMPT = 'Once upon a time';

let server, browser, page;
const pageErrors = [];

// The generated text of the native greedy run (stdout is prompt + text + "\n").
// kernels 'scalar' (WGLLM_CPU) runs the portable kernels that the wasm build
// has: bit-identical logits. The x86 SIMD kernels sum in another order, and on
// random synthetic weights a near-tie flips the argmax after ~14 tokens.
function nativeText(prompt, n, kernels, model = MODEL) {
  const env = { ...process.env };
  if (kernels) env.WGLLM_CPU = kernels; else delete env.WGLLM_CPU;
  const out = execFileSync(WGLLM, ['run', '-m', path.join(MODELS, model), '-p', prompt, '-n', String(n), '-t', '1', '--ignore-eos'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30000, env });
  assert.ok(out.startsWith(prompt), `native output starts with the prompt: ${JSON.stringify(out)}`);
  return out.slice(prompt.length).replace(/\n$/, '');
}

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'wgllm.js')), 'web/dist is built (make wasm)');
  synthModel(MODEL, 'tiny', 'q8_0');
  server = await startServer({ models: MODELS });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, timeout: 60000 });
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await page.goto(`${server.url}/blank.html`);
  assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'the page is cross-origin isolated');
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.close();
});

test('the worker engine loads the model over HTTP with progress', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async (url) => {
    const events = [];
    window.engine = await wgllm.createWorkerEngine({ model: url, chatTemplate: wgllm.CHATML,
      onProgress: (p) => events.push(p) });
    return { events, info: engine.info };
  }, `/models/${MODEL}`);
  assert.ok(r.events.length >= 2, `progress events: ${r.events.length}`);
  const ps = r.events.map((e) => e.progress);
  for (let i = 1; i < ps.length; i++) assert.ok(ps[i] >= ps[i - 1], `progress is monotone: ${ps}`);
  assert.equal(ps.at(-1), 1);
  assert.ok(r.events.some((e) => e.stage === 'download' && e.total === fs.statSync(path.join(MODELS, MODEL)).size));
  assert.ok(r.events.some((e) => e.stage === 'load'));
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.worker, true);
  assert.equal(r.info.arch, 'llama');
  assert.equal(r.info.n_embd, 256);
});

test('greedy completion equals the native wgllm run', { timeout: 60000 }, async () => {
  const want = nativeText(PROMPT, 8);
  assert.equal(nativeText(PROMPT, 8, 'scalar'), want, 'native SIMD and portable kernels agree on 8 tokens');
  const r = await page.evaluate((prompt) => engine.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true }), PROMPT);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
});

// The Q4_0 products run in the relaxed-SIMD kernel module where the
// browser validates it (Chromium does): the threaded core, two threads, must
// still give the portable native kernels' text (the module's bits are
// SIMD128's; tests/wasm/test_repack_wasm.c checks them kernel by kernel).
test('threaded core, q4_0, 2 threads: relaxed-SIMD products, same text as native', { timeout: 90000 }, async () => {
  const model = 'tiny-q4_0.gguf';
  synthModel(model, 'tiny', 'q4_0');
  const want = nativeText(PROMPT, 24, 'scalar', model);
  const r = await page.evaluate(async ({ url, prompt }) => {
    const e = await wgllm.createWorkerEngine({ model: url, nThreads: 2 });
    const c = await e.completions.create({ prompt, max_tokens: 24, temperature: 0, ignore_eos: true });
    await e.unload();
    return { text: c.choices[0].text, info: e.info };
  }, { url: `/models/${model}`, prompt: PROMPT });
  assert.equal(r.info.threaded, true);
  assert.equal(r.info.threads, 2);
  assert.equal(r.info.relaxed_simd, true, 'Chromium validates the relaxed-SIMD module');
  assert.equal(r.text, want);
});

// Without nThreads the threaded core takes half the logical cores, at most
// 4 (wllama's default): navigator.hardwareConcurrency is set for the page
// before its scripts run, and the on-page engine reads it.
test('default compute threads: half of hardwareConcurrency, 1 to 4', { timeout: 90000 }, async () => {
  const got = {};
  for (const hc of [8, 16, 3]) {
    const p = await browser.newPage();
    try {
      await p.addInitScript((n) => {
        Object.defineProperty(Navigator.prototype, 'hardwareConcurrency', { get: () => n, configurable: true });
      }, hc);
      await p.goto(`${server.url}/blank.html`);
      got[hc] = await p.evaluate(async (url) => {
        const w = await import('/dist/wgllm.js');
        const e = await w.createEngine({ model: url });
        const r = { threads: e.info.threaded ? e.info.threads : -1, hc: navigator.hardwareConcurrency };
        await e.unload();
        return r;
      }, `/models/${MODEL}`);
    } finally {
      await p.close();
    }
  }
  assert.deepEqual(got, { 8: { threads: 4, hc: 8 }, 16: { threads: 4, hc: 16 }, 3: { threads: 1, hc: 3 } });
});

test('streamed completion chunks concatenate to the same text', { timeout: 60000 }, async () => {
  const want = nativeText(PROMPT, 48, 'scalar');
  const r = await page.evaluate(async (prompt) => {
    const parts = [];
    let last;
    for await (const c of await engine.completions.create({ prompt, max_tokens: 48, temperature: 0, stream: true, ignore_eos: true })) {
      parts.push(c.choices[0].text);
      last = c;
    }
    return { parts, last };
  }, PROMPT);
  assert.ok(r.parts.length > 2, `several chunks: ${r.parts.length}`);
  assert.equal(r.parts.join(''), want);
  assert.equal(r.last.choices[0].finish_reason, 'length');
});

test('chat completions: OpenAI shape, streaming equals non-streaming', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async () => {
    const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }];
    const full = await engine.chat.completions.create({ messages, max_tokens: 16, temperature: 0 });
    let text = '';
    let role = null;
    let finish = null;
    let usage = null;
    const stream = await engine.chat.completions.create({ messages, max_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true } });
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      const ch = c.choices[0];
      if (!ch) continue;
      if (ch.delta.role) role = ch.delta.role;
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    return { full, text, role, finish, usage };
  });
  assert.equal(r.full.object, 'chat.completion');
  assert.equal(r.full.choices[0].message.role, 'assistant');
  assert.ok(r.full.choices[0].message.content.length > 0);
  assert.ok(r.full.usage.prompt_tokens > 10, 'the template wrapped the messages');
  assert.equal(r.text, r.full.choices[0].message.content);
  assert.equal(r.role, 'assistant');
  assert.equal(r.finish, r.full.choices[0].finish_reason);
  assert.equal(r.usage.completion_tokens, r.full.usage.completion_tokens);
});

test('interrupt() stops a long generation; the page keeps painting', { timeout: 90000 }, async () => {
  const r = await page.evaluate(async (prompt) => {
    let frames = 0;
    let running = true;
    const tick = () => { frames++; if (running) requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    const t0 = performance.now();
    let chunks = 0;
    let finish = null;
    const stream = await engine.completions.create({ prompt, max_tokens: 1500, temperature: 0, ignore_eos: true,
      stream: true });
    for await (const c of stream) {
      chunks++;
      if (chunks === 40) engine.interrupt();
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    const ms = performance.now() - t0;
    running = false;
    const after = await engine.completions.create({ prompt, max_tokens: 4, temperature: 0 });
    return { chunks, finish, ms, frames, after: after.choices[0].finish_reason };
  }, PROMPT);
  assert.equal(r.finish, 'abort');
  assert.ok(r.chunks >= 40 && r.chunks < 1000, `stopped early: ${r.chunks} chunks`);
  assert.ok(r.frames >= Math.max(3, (r.ms / 1000) * 10), `${r.frames} frames in ${r.ms.toFixed(0)} ms`);
  assert.equal(r.after, 'length', 'the engine serves requests after an interrupt');
});

test('tokens per second in the browser (worker, 1 thread)', { timeout: 60000 }, async () => {
  const r = await page.evaluate((prompt) => engine.completions.create({ prompt, max_tokens: 128, temperature: 0,
    ignore_eos: true }), PROMPT);
  const x = r.usage.extra;
  console.log(`# browser tok/s (tiny q8_0, wasm CPU, 1 thread): prefill ${x.prefill_tokens_per_s.toFixed(1)}, ` +
              `decode ${x.decode_tokens_per_s.toFixed(1)}`);
  assert.equal(r.usage.completion_tokens, 128);
  assert.ok(x.decode_tokens_per_s > 1);
});

test('embeddings: normalized vectors of n_embd floats', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async () => {
    const e = await engine.embeddings.create({ input: ['hello world', 'hello world', 'a different text'] });
    return e;
  });
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, 3);
  const [a, b, c] = r.data.map((d) => d.embedding);
  assert.equal(a.length, 256);
  const norm = Math.hypot(...a);
  assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
  assert.deepEqual(a, b);
  assert.notDeepEqual(a, c);
});

test('unload() ends the worker engine', { timeout: 30000 }, async () => {
  const msg = await page.evaluate(async () => {
    await engine.unload();
    try { await engine.completions.create({ prompt: 'x', max_tokens: 1 }); return null; } catch (e) { return e.message; }
  });
  assert.ok(msg && /worker|unload/i.test(msg), `after unload: ${msg}`);
});

test('a corrupt model file gives a clear error', { timeout: 60000 }, async () => {
  const msg = await page.evaluate(async () => {
    const bytes = new Uint8Array(4096);
    bytes.set([0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]); // GGUF v3, absurd tensor count
    try { await wgllm.createWorkerEngine({ model: bytes.buffer }); return null; } catch (e) { return e.message; }
  });
  assert.ok(msg, 'loading failed');
  assert.match(msg, /loading the model failed: .*gguf/i);
});

test('createEngine (on the page) gives the same greedy text', { timeout: 60000 }, async () => {
  const want = nativeText(PROMPT, 8);
  const r = await page.evaluate(async ({ url, prompt }) => {
    const e = await wgllm.createEngine({ model: url });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    await e.unload();
    return { text: c.choices[0].text, worker: !!e.info.worker };
  }, { url: `/models/${MODEL}`, prompt: PROMPT });
  assert.equal(r.worker, false);
  assert.equal(r.text, want);
  assert.deepEqual(pageErrors, []);
});

test('the demo page loads a model by URL and streams a chat reply', { timeout: 60000 }, async () => {
  const demo = await browser.newPage();
  const errors = [];
  demo.on('pageerror', (e) => errors.push(e.message));
  try {
    await demo.goto(`${server.url}/demo/`);
    await demo.fill('#url', `/models/${MODEL}`);
    await demo.fill('#maxTokens', '16');
    await demo.click('#loadUrl');
    await demo.waitForFunction(() => !document.getElementById('msg').disabled, null, { timeout: 30000 });
    assert.equal(await demo.$eval('#bar', (b) => b.value), 1);
    await demo.fill('#msg', 'Hello there');
    await demo.click('#send');
    await demo.waitForFunction(() => /decode [\d.]+ tok\/s/.test(document.getElementById('status').textContent),
      null, { timeout: 30000 });
    const reply = await demo.$eval('#log .assistant', (d) => d.textContent);
    assert.ok(reply.length > 0, 'a reply was streamed into the log');
    // a GGUF file dropped on the page loads (on the CPU backend, chosen in the page)
    await demo.selectOption('#backend', 'cpu');
    await demo.evaluate(async (url) => {
      const bytes = await (await fetch(url)).arrayBuffer();
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], 'dropped.gguf'));
      document.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, `/models/${MODEL}`);
    await demo.waitForFunction(() => /loaded in/.test(document.getElementById('status').textContent) &&
      /backend cpu/.test(document.getElementById('status').textContent), null, { timeout: 30000 });
    assert.match(await demo.$eval('#status', (d) => d.textContent), /from file/);
    assert.deepEqual(errors, []);
  } finally {
    await demo.close();
  }
});

// ---- the WebGPU backend in the browser (web/src/hal_browser.c over navigator.gpu) ----

const nativeRun = (prompt, n, backend, model = MODEL) => nativeRunOf(prompt, n, backend, model);

test('backend webgpu: greedy tokens equal native wgllm run (cpu and webgpu); capability report', { timeout: 120000 }, async () => {
  const gpu = nativeRun(PROMPT, 32, 'webgpu');
  assert.match(gpu.stderr, /webgpu: SwiftShader/, 'the native reference ran on WebGPU');
  const cpu8 = nativeText(PROMPT, 8);
  const r = await page.evaluate(async (url) => {
    window.gpuEngine = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', chatTemplate: wgllm.CHATML });
    const c = await gpuEngine.completions.create({ prompt: 'Once upon a time', max_tokens: 32, temperature: 0, ignore_eos: true });
    return { text: c.choices[0].text, usage: c.usage, caps: gpuEngine.capabilities, info: gpuEngine.info };
  }, `/models/${MODEL}`);
  assert.equal(r.caps.backend, 'webgpu');
  assert.equal(r.info.backend, 'webgpu');
  assert.match(r.caps.reason, /^webgpu: .+ \(browser, CPU\)$/);
  assert.ok(r.caps.adapter && r.caps.adapter.length > 0, `adapter: ${r.caps.adapter}`);
  assert.ok(r.caps.gpu_memory > 1e6, `GPU memory ${r.caps.gpu_memory}`);
  assert.equal(r.caps.webgpu, true);
  assert.equal(r.usage.completion_tokens, 32);
  assert.equal(r.text, gpu.text, 'browser WebGPU = native WebGPU (Dawn) over 32 tokens');
  assert.ok(r.text.startsWith(cpu8), 'the first 8 tokens equal the native CPU backend');
  const b = r.usage.extra.decode_tokens_per_s;
  console.log(`# WebGPU on SwiftShader, tiny q8_0 decode: browser ${b.toFixed(2)} tok/s, native (Dawn) ${gpu.tokS.toFixed(2)} tok/s`);
  assert.ok(b > 0.5, `decode ${b} tok/s`);
});

// gemma3's block on WebGPU (sliding-window layers with their own RoPE table,
// GeGLU through the CPU's f16 table, post-norms, q/k norms, scaled
// embeddings and queries): 5 prompt tokens and 16 more run past its window of 8.
test('backend webgpu runs gemma3: greedy tokens equal native wgllm run on WebGPU and on the CPU', { timeout: 180000 }, async () => {
  const G3 = 'tiny-gemma3-q4_0.gguf';
  synthModel(G3, 'tiny-gemma3', 'q4_0');
  const gpu = nativeRun(PROMPT, 16, 'webgpu', G3);
  assert.match(gpu.stderr, /webgpu: SwiftShader/, 'the native reference ran on WebGPU');
  const cpu = nativeRun(PROMPT, 16, 'cpu', G3);
  const r = await page.evaluate(async (url) => {
    const e = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu' });
    const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true });
    const out = { text: c.choices[0].text, n: c.usage.completion_tokens, backend: e.info.backend, arch: e.info.arch };
    await e.unload();
    return out;
  }, `/models/${G3}`);
  assert.equal(r.backend, 'webgpu');
  assert.equal(r.arch, 'gemma3');
  assert.equal(r.n, 16);
  assert.equal(r.text, gpu.text, 'browser WebGPU = native WebGPU (Dawn) on gemma3');
  assert.equal(r.text, cpu.text, 'browser WebGPU = native CPU on gemma3');
});

test('backend webgpu: streaming, stop strings and chat agree with the CPU engine', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async (url) => {
    const cpu = await wgllm.createWorkerEngine({ model: url, backend: 'cpu', chatTemplate: wgllm.CHATML });
    const messages = [{ role: 'user', content: 'Say hello.' }];
    const req = { messages, max_tokens: 12, temperature: 0 };
    const want = (await cpu.chat.completions.create(req)).choices[0].message.content;
    await cpu.unload();
    const full = (await gpuEngine.chat.completions.create(req)).choices[0].message.content;
    let streamed = '';
    let chunks = 0;
    for await (const c of await gpuEngine.chat.completions.create({ ...req, stream: true })) {
      streamed += c.choices[0]?.delta?.content ?? '';
      chunks++;
    }
    const plain = (await gpuEngine.completions.create({ prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true })).choices[0].text;
    const stop = plain.slice(4, 7);
    const stopped = await gpuEngine.completions.create({ prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
      ignore_eos: true, stop: [stop] });
    return { want, full, streamed, chunks, plain, stop, stopped: stopped.choices[0] };
  }, `/models/${MODEL}`);
  assert.equal(r.full, r.want, 'chat on WebGPU = chat on the CPU engine');
  assert.equal(r.streamed, r.full);
  assert.ok(r.chunks > 2, `chunks: ${r.chunks}`);
  assert.equal(r.stopped.finish_reason, 'stop');
  assert.equal(r.stopped.text, r.plain.slice(0, r.plain.indexOf(r.stop)), `stop ${JSON.stringify(r.stop)}`);
});

test('backend webgpu: interrupt(), embeddings like the CPU engine, a clear error for unknown backends', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async () => {
    let chunks = 0;
    let finish = null;
    for await (const c of await gpuEngine.completions.create({ prompt: 'Once', max_tokens: 500, temperature: 0, ignore_eos: true, stream: true })) {
      if (++chunks === 5) gpuEngine.interrupt();
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    const gv = (await gpuEngine.embeddings.create({ input: 'The lighthouse keeper' })).data[0].embedding;
    const cpu = await wgllm.createWorkerEngine({ model: '/models/tiny-q8_0.gguf', backend: 'cpu' });
    const cv = (await cpu.embeddings.create({ input: 'The lighthouse keeper' })).data[0].embedding;
    await cpu.unload();
    let cos = 0;
    for (let i = 0; i < cv.length; i++) cos += gv[i] * cv[i];
    await gpuEngine.unload();
    let backendError = null;
    try { await wgllm.createEngine({ model: '/models/none.gguf', backend: 'metal' }); } catch (e) { backendError = e.message; }
    return { chunks, finish, cos, n: gv.length, backendError };
  });
  assert.equal(r.finish, 'abort');
  assert.ok(r.chunks >= 5 && r.chunks < 100, `stopped early: ${r.chunks} chunks`);
  assert.ok(r.n > 0 && r.cos > 0.9999, `WebGPU vs CPU embedding: cosine ${r.cos} over ${r.n} dims`);
  assert.match(r.backendError, /unknown backend 'metal'/);
});

test('backend webgpu streams the weights from OPFS / bytes / range requests into GPU buffers: the wasm memory stays small', { timeout: 180000 }, async () => {
  // tiny f32: 71 MB, more than the wasm memory's initial 64 MB, so a copy in the heap shows
  const F32 = 'tiny-f32.gguf';
  if (!fs.existsSync(path.join(MODELS, F32)))
    execFileSync(WGLLM, ['synth', '--shape', 'tiny', '--type', 'f32', '-o', path.join(MODELS, F32)]);
  const size = fs.statSync(path.join(MODELS, F32)).size;
  const ref = nativeRun(PROMPT, 3, 'webgpu', F32);
  const r = await page.evaluate(async (url) => {
    const gen = async (e) => (await e.completions.create({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0, ignore_eos: true })).choices[0].text;
    const events = [];
    const a = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', onProgress: (p) => events.push(p) });
    const out = { gpu: a.info, gpuText: await gen(a), events };
    await a.unload();
    const b = await wgllm.createWorkerEngine({ model: url, backend: 'cpu' }); // the same file from OPFS, into the heap
    out.cpu = b.info;
    await b.unload();
    const h = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', streamWeights: false }); // uploaded from the heap
    out.heap = h.info;
    out.heapText = await gen(h);
    await h.unload();
    const bytes = await (await fetch(url)).arrayBuffer();
    const c = await wgllm.createEngine({ model: bytes, backend: 'webgpu' }); // on the page, from an ArrayBuffer
    out.bytes = c.info;
    out.bytesText = await gen(c);
    await c.unload();
    const d = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', store: false }); // range requests
    out.net = d.info;
    out.netText = await gen(d);
    await d.unload();
    return out;
  }, `/models/${F32}`);
  assert.equal(r.gpu.weights_streamed, true);
  assert.equal(r.gpu.source, 'opfs');
  assert.equal(r.cpu.weights_streamed, false);
  assert.equal(r.heap.weights_streamed, false);
  assert.equal(r.heap.backend, 'webgpu');
  assert.equal(r.heapText, ref.text);
  assert.ok(r.heap.wasm_memory_bytes >= size, 'streamWeights: false copies the file into the heap');
  assert.equal(r.bytes.weights_streamed, true);
  assert.equal(r.gpuText, ref.text, 'streamed weights: the same tokens as native WebGPU on the mapped file');
  assert.equal(r.bytesText, ref.text);
  assert.equal(r.net.source, 'network');
  assert.equal(r.net.weights_streamed, true, 'a URL not kept in OPFS streams through range requests');
  assert.equal(r.netText, ref.text);
  assert.ok(r.net.wasm_memory_bytes < size, `from the network: ${r.net.wasm_memory_bytes} bytes of wasm memory`);
  const mib = (n) => `${(n / 1048576).toFixed(0)} MiB`;
  console.log(`# tiny f32 (${mib(size)}): wasm memory after load: WebGPU streamed ${mib(r.gpu.wasm_memory_bytes)}, ` +
    `CPU ${mib(r.cpu.wasm_memory_bytes)}; from bytes ${mib(r.bytes.wasm_memory_bytes)}`);
  // the wasm memory only grows: smaller than the model means the weights were never in it
  assert.ok(r.cpu.wasm_memory_bytes >= size, 'the CPU backend holds the weights in the heap');
  assert.ok(r.gpu.wasm_memory_bytes < size, `streamed: ${r.gpu.wasm_memory_bytes} bytes of wasm memory, model ${size}`);
  assert.ok(r.bytes.wasm_memory_bytes < size, `from bytes: ${r.bytes.wasm_memory_bytes} bytes of wasm memory`);
  // progress: the upload reports bytes read, up to the whole file, monotonically
  const loads = r.events.filter((e) => e.stage === 'load' && e.total === size);
  assert.ok(loads.length >= 3, `upload progress events: ${loads.length}`);
  assert.ok(loads[loads.length - 1].loaded >= 0.99 * size);
  const ps = r.events.map((e) => e.progress);
  assert.deepEqual(ps, [...ps].sort((x, y) => x - y), 'progress never goes back');
});

test("backend 'auto' on SwiftShader chooses the CPU and says why", { timeout: 60000 }, async () => {
  const r = await page.evaluate(async (url) => {
    const e = await wgllm.createWorkerEngine({ model: url, backend: 'auto' });
    const caps = e.capabilities;
    await e.unload();
    return caps;
  }, `/models/${MODEL}`);
  assert.equal(r.backend, 'cpu');
  assert.match(r.reason, /^cpu \(auto: the WebGPU adapter '.+' is a software\/CPU adapter\)$/);
  assert.equal(r.adapter, null);
  assert.equal(r.gpu_memory, 0);
});

test('on the page, WebGPU generation keeps the page painting (the HAL never blocks the main thread)', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async (url) => {
    const e = await wgllm.createEngine({ model: url, backend: 'webgpu' });
    let frames = 0;
    let running = true;
    const tick = () => { frames++; if (running) requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    const t0 = performance.now();
    const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true });
    const ms = performance.now() - t0;
    running = false;
    const caps = e.capabilities;
    await e.unload();
    return { frames, ms, text: c.choices[0].text, caps };
  }, `/models/${MODEL}`);
  assert.equal(r.caps.backend, 'webgpu');
  assert.equal(r.text, nativeRun(PROMPT, 24, 'webgpu').text);
  assert.ok(r.frames >= Math.max(3, (r.ms / 1000) * 10), `${r.frames} frames in ${r.ms.toFixed(0)} ms`);
});

test('without navigator.gpu: webgpu is refused clearly, auto falls back to the CPU', { timeout: 60000 }, async () => {
  const p = await browser.newPage();
  try {
    await p.goto(`${server.url}/blank.html`);
    const r = await p.evaluate(async (url) => {
      Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined, configurable: true });
      const wgllm = await import('/dist/wgllm.js');
      let error = null;
      try { await wgllm.createEngine({ model: url, backend: 'webgpu' }); } catch (e) { error = e.message; }
      const e = await wgllm.createEngine({ model: url, backend: 'auto' });
      const caps = e.capabilities;
      const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true });
      await e.unload();
      return { error, caps, n: c.usage.completion_tokens };
    }, `/models/${MODEL}`);
    assert.match(r.error, /loading the model failed: no WebGPU device: this browser has no WebGPU \(navigator.gpu is missing/);
    assert.equal(r.caps.backend, 'cpu');
    assert.match(r.caps.reason, /^cpu \(auto: no WebGPU device: .*navigator.gpu is missing/);
    assert.equal(r.caps.webgpu, false);
    assert.equal(r.n, 4);
  } finally {
    await p.close();
  }
});

test('the browser GPU HAL call by call (web/src/hal_selftest.c on navigator.gpu)', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async () => {
    const { default: createWgllmCore } = await import('/dist/wgllm-core.js');
    const M = await createWgllmCore({ print: () => {}, printErr: () => {} });
    const src = 'fn main() { let x: f32 = undefined_thing; }';
    const b = new TextEncoder().encode(src);
    const p = M._malloc(b.length + 1);
    new Uint8Array(M.wasmMemory.buffer).set([...b, 0], p);
    const t = M._wgllm_web_hal_selftest_start(p);
    M._free(p);
    while (!M._wgllm_web_hal_selftest_done(t)) {
      const r = Atomics.waitAsync(new Int32Array(M.wasmMemory.buffer), t >> 2, Atomics.load(new Int32Array(M.wasmMemory.buffer), t >> 2), 200);
      if (r.async) await r.value;
    }
    const report = JSON.parse(M.UTF8ToString(M._wgllm_web_hal_selftest_report(t)));
    M._wgllm_web_hal_selftest_free(t);
    M.PThread.terminateAllThreads();
    return report;
  });
  if (process.env.WGLLM_WEB_VERBOSE) console.log(r);
  assert.equal(r.ok, true, r.error || r.open_error);
  assert.equal(r.is_cpu, true, 'SwiftShader is a software adapter');
  assert.ok(r.max_binding >= 128 << 20 && r.max_invocations >= 256, `limits ${r.max_binding} ${r.max_invocations}`);
  assert.equal(r.subgroups, true);
  assert.equal(r.shader_f16, false);
  assert.equal(r.mismatches, 0, 'dispatch + copy + buffer_read round trip (direct and deferred writes)');
  assert.equal(r.readback, 37, 'readback at an offset');
  assert.equal(r.cached, true, 'the same WGSL gives the cached pipeline');
  assert.equal(r.pipelines, 1, 'the failed compile is not cached');
  assert.match(r.compile_error, /compiling WGSL kernel 'bad' failed: .*undefined_thing/);
  assert.match(r.bindgroup_error, /creating a bind group failed: ./);
  assert.equal(r.buffers, 3);
  assert.equal(r.bytes, 2 * 16384 + 64);
  assert.equal(r.buffers_after, 0);
  assert.equal(r.bytes_after, 0);
});

test('KV snapshots persist in OPFS: after a reload the same long prompt is not prefilled again', { timeout: 120000 }, async () => {
  const p2 = await browser.newPage();
  p2.on('pageerror', (e) => pageErrors.push(e.message));
  const open = async () => {
    await p2.goto(`${server.url}/blank.html`);
    await p2.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
  };
  const system = 'You are the keeper of an old lighthouse on a rocky island. Every evening you climb the ' +
    'spiral stairs, light the lamp, and write the weather, the ships and the gulls into a logbook.';
  const req = { messages: [{ role: 'system', content: system }, { role: 'user', content: 'What did you see today?' }],
                max_tokens: 8, temperature: 0 };
  await open();
  const first = await p2.evaluate(async ([url, req]) => {
    await wgllm.deleteSnapshots('snaptest');
    const e = await wgllm.createWorkerEngine({ model: url, backend: 'cpu', chatTemplate: wgllm.CHATML, persistSnapshots: 'snaptest' });
    const r = await e.chat.completions.create(req);
    await e.snapshots.flush();
    const info = e.info.snapshots;
    await e.unload();
    return { text: r.choices[0].message.content, usage: r.usage, info };
  }, [`/models/${MODEL}`, req]);
  assert.equal(first.info.restored_bytes, 0, 'nothing stored before');
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  await p2.reload();
  await open();
  const again = await p2.evaluate(async ([url, req]) => {
    const e = await wgllm.createWorkerEngine({ model: url, backend: 'cpu', chatTemplate: wgllm.CHATML, persistSnapshots: 'snaptest' });
    const r = await e.chat.completions.create(req);
    let foreign = null;
    try { await e.snapshots.restore(new TextEncoder().encode('not a snapshot file at all, just text')); } catch (x) { foreign = x.message; }
    await e.unload();
    // another backend's layout is refused: save on WebGPU, restore into a CPU engine
    const g = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', chatTemplate: wgllm.CHATML });
    await g.chat.completions.create(req);
    const gpuFile = await g.snapshots.save();
    const gStreamed = g.info.weights_streamed;
    await g.unload();
    // a second streamed WebGPU engine of the same file takes it (the fingerprint read through the source agrees)
    const g2 = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu', chatTemplate: wgllm.CHATML });
    const gpuRestored = await g2.snapshots.restore(gpuFile);
    await g2.unload();
    const c = await wgllm.createWorkerEngine({ model: url, backend: 'cpu', chatTemplate: wgllm.CHATML });
    let other = null;
    try { await c.snapshots.restore(gpuFile); } catch (x) { other = x.message; }
    await c.unload();
    await wgllm.deleteSnapshots('snaptest');
    return { text: r.choices[0].message.content, usage: r.usage, info: e.info.snapshots, foreign, gpuBytes: gpuFile.length, other,
      gStreamed, gpuRestored };
  }, [`/models/${MODEL}`, req]);
  await p2.close();
  assert.ok(again.info.restored_bytes > 1000, `restored ${again.info.restored_bytes} bytes`);
  const cached = again.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= again.usage.prompt_tokens - 12 && cached > 30,
    `cached ${cached} of ${again.usage.prompt_tokens} prompt tokens after the reload`);
  assert.equal(again.text, first.text, 'the restored KV gives the cold run\'s reply');
  assert.match(again.foreign, /not a wgllm snapshot file/);
  assert.ok(again.gpuBytes > 1000, `WebGPU snapshot file: ${again.gpuBytes} bytes`);
  assert.match(again.other, /another model or backend/);
  assert.equal(again.gStreamed, true);
  assert.ok(again.gpuRestored > 0, `restored ${again.gpuRestored} snapshot(s) into a new streamed WebGPU engine`);
});
