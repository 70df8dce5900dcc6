// cpu.test.mjs - the wasm CPU backend in headless Chromium: on a page served
// WITHOUT cross-origin isolation (no COOP/COEP headers, so no
// SharedArrayBuffer) the package picks the single-threaded core, which the JS
// drives tick by tick; it loads the model and its greedy tokens equal the
// native `wgllm run` (portable kernels: the SIMD128 kernels are
// bit-identical to them) for Q8_0, Q4_0, Q4_K and Q6_K, on the page and in a worker,
// while the page keeps running timers; the model store (OPFS, File, bytes)
// and the backend choice there. Then tokens per second of the
// single-threaded core against the threaded one (isolated page, 1 and 2
// threads) and native, printed for bench notes, not asserted.
// Run through tests/web/run.sh (which builds web/dist and the native tool).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { root, chromium, startServer, WGLLM, MODELS, FLAGS } from './setup.mjs';

const PROMPT = 'Once upon a time';

let plain, isolated, browser, page;
const pageErrors = [];

function ensureModel(type) {
  const file = path.join(MODELS, `tiny-${type}.gguf`);
  if (!fs.existsSync(file)) {
    fs.mkdirSync(MODELS, { recursive: true });
    execFileSync(WGLLM, ['synth', '--shape', 'tiny', '--type', type, '-o', file]);
  }
  return `tiny-${type}.gguf`;
}

// The native greedy text with the portable kernels (stdout is prompt + text + "\n").
function nativeText(model, prompt, n) {
  const out = execFileSync(WGLLM, ['run', '-m', path.join(MODELS, model), '-p', prompt, '-n', String(n), '-t', '1',
    '--ignore-eos'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30000,
    env: { ...process.env, WGLLM_CPU: 'scalar' } });
  assert.ok(out.startsWith(prompt), `native output starts with the prompt: ${JSON.stringify(out)}`);
  return out.slice(prompt.length).replace(/\n$/, '');
}

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'wgllm-core-st.js')), 'web/dist is built (make wasm)');
  for (const type of ['q8_0', 'q4_0', 'q4_K', 'q6_K']) ensureModel(type);
  plain = await startServer({ models: MODELS, isolate: false });
  isolated = await startServer({ models: MODELS });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, timeout: 60000 });
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await page.goto(`${plain.url}/blank.html`);
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
});

after(async () => {
  if (browser) await browser.close();
  if (plain) await plain.close();
  if (isolated) await isolated.close();
});

test('a page without cross-origin isolation gets the single-threaded core', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async () => {
    const e = await wgllm.createEngine({ model: '/models/tiny-q8_0.gguf', nThreads: 4 });
    const info = e.info;
    await e.unload();
    return { info, isolated: crossOriginIsolated, sab: typeof SharedArrayBuffer };
  });
  assert.equal(r.isolated, false);
  assert.equal(r.sab, 'undefined');
  assert.equal(r.info.threaded, false);
  assert.equal(r.info.threads, 1);
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.arch, 'llama');
});

for (const type of ['q8_0', 'q4_0', 'q4_K', 'q6_K']) {
  test(`single-threaded greedy text equals native (${type}), streamed, timers keep running`, { timeout: 90000 }, async () => {
    const model = ensureModel(type);
    const want = nativeText(model, PROMPT, 48);
    const r = await page.evaluate(async ({ url, prompt }) => {
      const e = await wgllm.createEngine({ model: url });
      let ticks = 0;
      const timer = setInterval(() => { ticks++; }, 5);
      const t0 = performance.now();
      const parts = [];
      let finish = null;
      for await (const c of await e.completions.create({ prompt, max_tokens: 48, temperature: 0, ignore_eos: true,
        stream: true })) {
        parts.push(c.choices[0].text);
        if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
      }
      const ms = performance.now() - t0;
      clearInterval(timer);
      const full = await e.completions.create({ prompt, max_tokens: 48, temperature: 0, ignore_eos: true });
      await e.unload();
      return { parts, finish, ms, ticks, full: full.choices[0].text, threaded: e.info.threaded };
    }, { url: `/models/${model}`, prompt: PROMPT });
    assert.equal(r.threaded, false);
    assert.equal(r.full, want);
    assert.equal(r.parts.join(''), want);
    assert.ok(r.parts.length > 2, `several chunks: ${r.parts.length}`);
    assert.equal(r.finish, 'length');
    // the page's timers kept running: a 5 ms interval timer fired at least
    // every ~50 ms (the core yields to a timer task every 16 ms of work)
    assert.ok(r.ticks >= Math.floor(r.ms / 50), `${r.ticks} timer ticks in ${r.ms.toFixed(0)} ms`);
  });
}

test('the worker engine on a non-isolated page: single-threaded, same text, interrupt', { timeout: 90000 }, async () => {
  const want = nativeText('tiny-q4_0.gguf', PROMPT, 16);
  const r = await page.evaluate(async (prompt) => {
    const e = await wgllm.createWorkerEngine({ model: '/models/tiny-q4_0.gguf' });
    const c = await e.completions.create({ prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
    let chunks = 0;
    let finish = null;
    for await (const x of await e.completions.create({ prompt, max_tokens: 2000, temperature: 0, ignore_eos: true,
      stream: true })) {
      if (++chunks === 10) e.interrupt();
      if (x.choices[0].finish_reason) finish = x.choices[0].finish_reason;
    }
    const emb = await e.embeddings.create({ input: 'hello world' });
    await e.unload();
    return { text: c.choices[0].text, info: e.info, chunks, finish, dim: emb.data[0].embedding.length };
  }, PROMPT);
  assert.equal(r.info.threaded, false);
  assert.equal(r.info.worker, true);
  assert.equal(r.info.relaxed_simd, true, 'the single-threaded core uses the relaxed-SIMD module too');
  assert.equal(r.text, want);
  assert.equal(r.finish, 'abort');
  assert.ok(r.chunks >= 10 && r.chunks < 1000, `stopped early: ${r.chunks} chunks`);
  assert.equal(r.dim, 256);
  assert.deepEqual(pageErrors, []);
});

// The model store and the backend choice in the single-threaded core (no
// M.wasmMemory there: store.js and core.js read the heap through HEAPU8).
test('single-threaded core: the model store (OPFS, File, bytes, worker) and the backend choice', { timeout: 120000 },
  async () => {
    const want = nativeText('tiny-q4_K.gguf', PROMPT, 8);
    const r = await page.evaluate(async (prompt) => {
      // requests for the model, and the bytes of their bodies
      const fetches = () => {
        const e = performance.getEntriesByType('resource').filter((x) => x.name.includes('/models/tiny-q4_K'));
        return { n: e.length, bytes: e.reduce((a, x) => a + x.encodedBodySize, 0) };
      };
      const run = async (opts) => {
        performance.clearResourceTimings();
        const e = await wgllm.createEngine(opts);
        const fetched = fetches();
        const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
        await e.unload();
        const i = e.info;
        return { text: c.choices[0].text, fetched, source: i.source, store: i.store, threaded: i.threaded, backend: i.backend,
                 detail: i.backend_detail, mem: i.wasm_memory_bytes, weights: i.weight_bytes };
      };
      await wgllm.deleteModel('tiny-q4_K');
      const first = await run({ model: '/models/tiny-q4_K.gguf' });
      const again = await run({ model: '/models/tiny-q4_K.gguf' });
      const stored = (await wgllm.listModels()).map((m) => m.name);
      const bytes = await (await fetch('/models/tiny-q4_K.gguf')).arrayBuffer();
      const file = await run({ model: new File([bytes], 'tiny.gguf'), backend: 'cpu' });
      const mem = await run({ model: new Uint8Array(bytes) });
      const w = await wgllm.createWorkerEngine({ model: 'opfs:tiny-q4_K' });
      const wc = await w.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
      await w.unload();
      let webgpu = null;
      try { await wgllm.createEngine({ model: new Uint8Array(bytes), backend: 'webgpu' }); } catch (e) { webgpu = e.message; }
      return { first, again, stored, file, mem, worker: { text: wc.choices[0].text, source: w.info.source,
               threaded: w.info.threaded }, webgpu };
    }, PROMPT);
    // downloaded into OPFS, then read from there; the second load fetches nothing
    assert.deepEqual([r.first.source, r.first.store, r.first.fetched.n > 0], ['opfs', 'tiny-q4_K', true]);
    // the second load only checks that the remote file did not change (one 1-byte range request per shard)
    assert.deepEqual([r.again.source, r.again.store, r.again.fetched.n], ['opfs', 'tiny-q4_K', 1]);
    assert.ok(r.again.fetched.bytes <= 1, `the check downloads nothing: ${r.again.fetched.bytes} bytes`);
    assert.ok(r.stored.includes('tiny-q4_K'), `stored: ${r.stored}`);
    assert.equal(r.file.source, 'file');
    assert.equal(r.mem.source, 'memory');
    for (const x of [r.first, r.again, r.file, r.mem]) {
      assert.equal(x.text, want);
      assert.equal(x.threaded, false);
      assert.equal(x.backend, 'cpu');
      assert.ok(x.mem > x.weights, `wasm memory ${x.mem} holds the weights (${x.weights})`);
    }
    // this browser has no WebGPU adapter (no WebGPU flags): auto keeps the CPU core and says why
    assert.match(r.first.detail, /^cpu \(auto: .*WebGPU.*; the single-threaded CPU core\)$/);
    assert.equal(r.file.detail, 'cpu');
    assert.deepEqual(r.worker, { text: want, source: 'opfs', threaded: false });
    assert.match(r.webgpu, /no WebGPU (device|adapter)/, 'webgpu tried the single-threaded WebGPU core, which found no adapter');
  });

// Decode tok/s over 128 tokens; prints one line per configuration, then native `wgllm bench`.
test('tokens per second: single-threaded vs threaded vs native (printed)', { timeout: 180000 }, async () => {
  const speed = async (p, url, opts) => p.evaluate(async ({ url: u, opts: o, prompt }) => {
    const e = await wgllm.createEngine({ model: u, ...o });
    await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true }); // warm-up
    const r = await e.completions.create({ prompt, max_tokens: 128, temperature: 0, ignore_eos: true });
    await e.unload();
    return { ...r.usage.extra, threaded: e.info.threaded, threads: e.info.threads };
  }, { url, opts, prompt: PROMPT });
  const iso = await browser.newPage();
  try {
    await iso.goto(`${isolated.url}/blank.html`);
    assert.equal(await iso.evaluate(() => crossOriginIsolated), true);
    await iso.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
    for (const type of ['q4_0', 'q8_0', 'q4_K']) {
      const url = `/models/tiny-${type}.gguf`;
      const rows = [
        ['single-threaded', await speed(page, url, {})],
        ['threads=1', await speed(iso, url, { nThreads: 1 })],
        ['threads=2', await speed(iso, url, { nThreads: 2 })],
      ];
      for (const [name, x] of rows) {
        console.log(`# browser tiny ${type} ${name} (threaded ${x.threaded}, ${x.threads} thread(s)): ` +
                    `prefill ${x.prefill_tokens_per_s.toFixed(1)} tok/s, decode ${x.decode_tokens_per_s.toFixed(1)} tok/s`);
        assert.ok(x.decode_tokens_per_s > 1);
      }
      assert.equal(rows[0][1].threaded, false);
      assert.equal(rows[1][1].threaded, true);
      for (const t of [1, 2]) { // native, same model and length (portable kernels excluded: the dispatched ones)
        const out = execFileSync(WGLLM, ['bench', '-m', path.join(MODELS, `tiny-${type}.gguf`), '-t', String(t), '-p', '16',
          '-n', '128'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60000 });
        const tg = out.split('\n').find((l) => / tg /.test(l));
        console.log(`# native tiny ${type} threads=${t}: ${tg ? tg.trim().replace(/\s+/g, ' ') : out}`);
      }
    }
  } finally {
    await iso.close();
  }
});
