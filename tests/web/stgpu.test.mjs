// stgpu.test.mjs - WebGPU on a page WITHOUT cross-origin isolation (no
// COOP/COEP headers, so no SharedArrayBuffer and no threads), the static-host
// case: backend 'webgpu' runs the single-threaded WebGPU core
// (wgllm-core-st-gpu.js: Asyncify, the browser GPU HAL) on SwiftShader; its
// greedy tokens equal native `wgllm run` on WebGPU (Dawn) and the CPU, a
// stream adds up to the same text, the page keeps painting meanwhile, the
// weights are streamed, two requests batch, embeddings and snapshots work, it
// runs in a Worker too, a GPU wait ends only on a lost device, and the capability
// report names the core and the backend; `auto` on a hardware adapter picks
// the WebGPU core, on SwiftShader (a software adapter) the single-threaded
// CPU core, saying why.
// Run through tests/web/run.sh (which builds web/dist and the native tool).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { root, chromium, startServer, WGLLM, MODELS, WEBGPU_FLAGS, synthModel, nativeRun as nativeRunOf } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';
const PROMPT = 'Once upon a time';
const N = 12; // tokens: SwiftShader is slow

let server, browser, page;
const pageErrors = [];

const nativeRun = (prompt, n, backend, model = MODEL) => nativeRunOf(prompt, n, backend, model);

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'wgllm-core-st-gpu.js')), 'web/dist is built (make wasm)');
  synthModel(MODEL, 'tiny', 'q8_0');
  server = await startServer({ models: MODELS, isolate: false });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: WEBGPU_FLAGS, timeout: 60000 });
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await page.goto(`${server.url}/blank.html`);
  const r = await page.evaluate(async () => {
    window.wgllm = await import('/dist/wgllm.js');
    const a = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
    return { isolated: crossOriginIsolated, sab: typeof SharedArrayBuffer, adapter: !!a };
  });
  assert.deepEqual(r, { isolated: false, sab: 'undefined', adapter: true }, 'a plain page with a WebGPU adapter');
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.close();
});

test('no COOP/COEP: backend webgpu runs the single-threaded WebGPU core with native greedy tokens; stream; capability report',
  { timeout: 120000 }, async () => {
    const gpu = nativeRun(PROMPT, N, 'webgpu');
    assert.match(gpu.stderr, /webgpu: SwiftShader/, 'the native reference ran on WebGPU');
    const cpu = nativeRun(PROMPT, N, 'cpu');
    const r = await page.evaluate(async ({ url, n }) => {
      window.gpuEngine = await wgllm.createEngine({ model: url, backend: 'webgpu' });
      let frames = 0;
      let running = true;
      const tick = () => { frames++; if (running) requestAnimationFrame(tick); };
      requestAnimationFrame(tick);
      const t0 = performance.now();
      const c = await gpuEngine.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, ignore_eos: true });
      const ms = performance.now() - t0;
      running = false;
      const parts = [];
      let finish = null;
      for await (const k of await gpuEngine.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0,
        ignore_eos: true, stream: true })) {
        parts.push(k.choices[0].text);
        if (k.choices[0].finish_reason) finish = k.choices[0].finish_reason;
      }
      return { text: c.choices[0].text, usage: c.usage, frames, ms, parts, finish, info: gpuEngine.info,
               caps: gpuEngine.capabilities };
    }, { url: `/models/${MODEL}`, n: N });
    assert.equal(r.info.threaded, false);
    assert.equal(r.info.crossOriginIsolated, false);
    assert.equal(r.info.core, 'single-threaded-webgpu');
    assert.match(r.info.core_detail, /not cross-origin isolated.*Asyncify/);
    assert.equal(r.caps.core, 'single-threaded-webgpu');
    assert.equal(r.caps.backend, 'webgpu');
    assert.match(r.caps.reason, /^webgpu: .+ \(browser, CPU\)$/);
    assert.ok(r.caps.adapter && r.caps.adapter.length > 0, `adapter: ${r.caps.adapter}`);
    assert.ok(r.caps.gpu_memory > 1e6, `GPU memory ${r.caps.gpu_memory}`);
    assert.equal(r.info.weights_streamed, true, 'the weights went from OPFS into GPU buffers');
    assert.equal(r.usage.completion_tokens, N);
    assert.equal(r.text, gpu.text, 'single-threaded browser WebGPU = native WebGPU (Dawn)');
    assert.equal(r.text, cpu.text, 'single-threaded browser WebGPU = native CPU');
    assert.ok(r.parts.length > 2, `several chunks: ${r.parts.length}`);
    assert.equal(r.parts.join(''), r.text, 'the stream adds up to the same text');
    assert.equal(r.finish, 'length');
    // the GPU's waits unwind to the event loop: frames keep coming while it generates
    assert.ok(r.frames >= Math.max(3, (r.ms / 1000) * 10), `${r.frames} frames in ${r.ms.toFixed(0)} ms`);
    const b = r.usage.extra.decode_tokens_per_s;
    console.log(`# WebGPU on SwiftShader, tiny q8_0 decode, single-threaded core (no COOP/COEP): ${b.toFixed(2)} tok/s; ` +
      `native (Dawn) ${gpu.tokS.toFixed(2)} tok/s`);
    assert.ok(b > 0.5, `decode ${b} tok/s`);
  });

test("no COOP/COEP, WebGPU: return_progress streams llama.cpp's prompt_progress before the tokens", { timeout: 90000 },
  async () => {
    const r = await page.evaluate(async () => {
      const prompt = Array.from({ length: 8 }, (_, i) => `Line ${i}: the river runs past the mill.`).join(' ');
      const seen = [];
      let usage = null;
      for await (const k of await gpuEngine.completions.create({ prompt, max_tokens: 3, temperature: 0, ignore_eos: true,
        stream: true, return_progress: true, stream_options: { include_usage: true } })) {
        if (k.prompt_progress) seen.push({ p: k.prompt_progress, text: k.choices[0].text });
        else if (k.choices[0]?.text) seen.push({ text: k.choices[0].text });
        if (k.usage) usage = k.usage;
      }
      return { seen, usage };
    });
    const prog = r.seen.filter((x) => x.p).map((x) => x.p);
    assert.ok(prog.length >= 2, JSON.stringify(r.seen));
    const firstText = r.seen.findIndex((x) => !x.p);
    assert.ok(firstText > 0 && r.seen.slice(firstText).every((x) => !x.p), 'every prompt_progress before the first token');
    assert.equal(prog[0].processed, prog[0].cache);
    assert.equal(prog.at(-1).processed, prog.at(-1).total);
    assert.equal(prog.at(-1).total, r.usage.prompt_tokens);
    assert.equal(prog[0].cache, r.usage.prompt_tokens_details?.cached_tokens ?? prog[0].cache);
    for (let i = 1; i < prog.length; i++) assert.ok(prog[i].processed > prog[i - 1].processed);
    for (const x of r.seen.filter((y) => y.p)) assert.equal(x.text, '');
  });

test('no COOP/COEP: the demo page runs WebGPU, says which core and why, and shows the prompt being read',
  { timeout: 120000 }, async () => {
    const demo = await browser.newPage();
    const errors = [];
    demo.on('pageerror', (e) => errors.push(e.message));
    try {
      await demo.goto(`${server.url}/demo/`);
      await demo.selectOption('#backend', 'webgpu');
      await demo.fill('#url', `/models/${MODEL}`);
      await demo.fill('#maxTokens', '4');
      await demo.click('#loadUrl');
      await demo.waitForFunction(() => !document.getElementById('msg').disabled, null, { timeout: 60000 });
      const core = await demo.$eval('#core', (d) => d.textContent);
      assert.match(core, /^core: single-threaded-webgpu \(.*not cross-origin isolated.*\); backend webgpu: webgpu: /, core);
      // every status line the page shows while it answers
      await demo.evaluate(() => {
        window.statusSeen = [];
        new MutationObserver(() => window.statusSeen.push(document.getElementById('status').textContent))
          .observe(document.getElementById('status'), { childList: true, characterData: true, subtree: true });
      });
      await demo.fill('#msg', 'Tell me about the river that runs past the old mill near the town.');
      await demo.click('#send');
      await demo.waitForFunction(() => /decode [\d.]+ tok\/s/.test(document.getElementById('status').textContent),
        null, { timeout: 60000 });
      const seen = await demo.evaluate(() => window.statusSeen);
      assert.ok(seen.some((t) => /^reading the prompt: \d+ \/ \d+ tokens/.test(t)), seen.join(' | '));
      const reply = await demo.$eval('#log .assistant', (d) => d.textContent);
      assert.ok(reply.length > 0, 'a reply was streamed into the log');
      // auto on SwiftShader (a software adapter): the CPU core, and the page says why
      await demo.selectOption('#backend', 'auto');
      await demo.click('#loadUrl');
      await demo.waitForFunction(() => /loaded in/.test(document.getElementById('status').textContent), null,
        { timeout: 60000 });
      assert.match(await demo.$eval('#core', (d) => d.textContent), /^core: single-threaded \(.*\); backend cpu: .*software/i);
      assert.deepEqual(errors, []);
    } finally {
      await demo.close();
    }
  });

test('no COOP/COEP, WebGPU: embeddings like the CPU core; snapshots saved and restored skip the prefill', { timeout: 90000 },
  async () => {
    const r = await page.evaluate(async (url) => {
      const prompt = 'You are the keeper of an old lighthouse on a rocky island. Every evening you climb the spiral ' +
        'stairs, light the lamp, and write the weather, the ships and the gulls into a logbook. Today';
      const req = { prompt, max_tokens: 4, temperature: 0, ignore_eos: true };
      const gv = (await gpuEngine.embeddings.create({ input: 'The lighthouse keeper' })).data[0].embedding;
      const first = await gpuEngine.completions.create(req);
      const snap = await gpuEngine.snapshots.save();
      await gpuEngine.unload();
      const g2 = await wgllm.createEngine({ model: url, backend: 'webgpu' });
      const restored = await g2.snapshots.restore(snap);
      const again = await g2.completions.create(req);
      await g2.unload();
      const cpu = await wgllm.createEngine({ model: url, backend: 'cpu' });
      const cv = (await cpu.embeddings.create({ input: 'The lighthouse keeper' })).data[0].embedding;
      const cpuCore = cpu.info.core;
      await cpu.unload();
      let cos = 0;
      for (let i = 0; i < cv.length; i++) cos += gv[i] * cv[i];
      return { cos, n: gv.length, snapBytes: snap.length, restored, cpuCore, first: first.choices[0].text,
               again: again.choices[0].text, usage: again.usage };
    }, `/models/${MODEL}`);
    assert.equal(r.cpuCore, 'single-threaded');
    assert.ok(r.n > 0 && r.cos > 0.9999, `WebGPU vs CPU embedding: cosine ${r.cos} over ${r.n} dims`);
    assert.ok(r.snapBytes > 1000, `snapshot file: ${r.snapBytes} bytes`);
    assert.equal(r.restored, r.snapBytes);
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 30, `cached ${cached} of ${r.usage.prompt_tokens} prompt tokens after the restore`);
    assert.equal(r.again, r.first, 'the restored KV gives the cold run\'s text');
  });

// tiny f32 (71 MB) is larger than the wasm memory's initial 64 MiB: a copy
// of the weights in the heap would show in its size.
test('no COOP/COEP, WebGPU: weights streamed from bytes and from range requests never enter the wasm memory',
  { timeout: 90000 }, async () => {
    const F32 = 'tiny-f32.gguf';
    synthModel(F32, 'tiny', 'f32');
    const size = fs.statSync(path.join(MODELS, F32)).size;
    const want = nativeRun(PROMPT, 3, 'webgpu', F32).text;
    const r = await page.evaluate(async (url) => {
      const gen = async (e) => (await e.completions.create({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0,
        ignore_eos: true })).choices[0].text;
      const bytes = await (await fetch(url)).arrayBuffer();
      const a = await wgllm.createEngine({ model: bytes, backend: 'webgpu' });
      const out = { bytes: a.info, bytesText: await gen(a) };
      await a.unload();
      const b = await wgllm.createEngine({ model: url, backend: 'webgpu', store: false });
      out.net = b.info;
      out.netText = await gen(b);
      await b.unload();
      return out;
    }, `/models/${F32}`);
    for (const k of ['bytes', 'net']) {
      assert.equal(r[k].core, 'single-threaded-webgpu');
      assert.equal(r[k].weights_streamed, true, `${k}: streamed`);
      assert.ok(r[k].wasm_memory_bytes < size, `${k}: ${r[k].wasm_memory_bytes} bytes of wasm memory, model ${size}`);
      assert.equal(r[`${k}Text`], want, `${k}: the tokens of native WebGPU`);
    }
    assert.equal(r.net.source, 'network');
  });

// Two requests at once on two slots: both drive loops step the one engine,
// whose suspended calls must not overlap (core.js runs them one at a time).
test('no COOP/COEP, WebGPU: two concurrent requests are batched and each gets its own greedy text', { timeout: 60000 },
  async () => {
    const want = nativeRun(PROMPT, N, 'webgpu').text;
    const r = await page.evaluate(async ({ url, n }) => {
      const e = await wgllm.createEngine({ model: url, backend: 'webgpu', nSlots: 2 });
      const req = (prompt) => e.completions.create({ prompt, max_tokens: n, temperature: 0, ignore_eos: true });
      const [a, b] = await Promise.all([req('Once upon a time'), req('The lighthouse')]);
      const b1 = await req('The lighthouse');
      await e.unload();
      return { a: a.choices[0].text, b: b.choices[0].text, b1: b1.choices[0].text };
    }, { url: `/models/${MODEL}`, n: N });
    assert.equal(r.a, want);
    assert.equal(r.b, r.b1, 'the second request alongside the first = alone');
    assert.notEqual(r.b, r.a);
  });

test('no COOP/COEP: the worker engine runs the single-threaded WebGPU core too', { timeout: 60000 }, async () => {
  const want = nativeRun(PROMPT, N, 'webgpu').text;
  const r = await page.evaluate(async ({ url, n }) => {
    const e = await wgllm.createWorkerEngine({ model: url, backend: 'webgpu' });
    const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, info };
  }, { url: `/models/${MODEL}`, n: N });
  assert.equal(r.info.worker, true);
  assert.equal(r.info.core, 'single-threaded-webgpu');
  assert.equal(r.info.backend, 'webgpu');
  assert.equal(r.text, want);
});

// A GPU wait gives up only when the device is lost: an uncaptured error
// while a readback takes 12 s (past the 10 s grace) does not end the wait
// (the readback answers, then the error is reported); a lost device ends a
// readback that never answers. The page's WebGPU is wrapped so that the test
// controls mapAsync and device.lost.
test('no COOP/COEP, WebGPU: a GPU wait ends only when the device is lost, not on an uncaptured error', { timeout: 90000 },
  async () => {
    const p = await browser.newPage();
    try {
      await p.goto(`${server.url}/blank.html`);
      const r = await p.evaluate(async (url) => {
        const reqDev = GPUAdapter.prototype.requestDevice;
        let dev = null, fireLost = null;
        GPUAdapter.prototype.requestDevice = async function (d) {
          dev = await reqDev.call(this, d);
          Object.defineProperty(dev, 'lost', { value: new Promise((res) => { fireLost = res; }) });
          return dev;
        };
        let mapMode = 'normal';
        const mapAsync = GPUBuffer.prototype.mapAsync;
        GPUBuffer.prototype.mapAsync = function (...a) {
          if (mapMode === 'never') return new Promise(() => {});
          const done = mapAsync.apply(this, a);
          return mapMode === 'slow' ? done.then((v) => new Promise((res) => setTimeout(() => res(v), 12000))) : done;
        };
        const wgllm = await import('/dist/wgllm.js');
        const e = await wgllm.createEngine({ model: url, backend: 'webgpu' });
        const gen = async () => {
          const t0 = performance.now();
          try {
            const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: 2, temperature: 0, ignore_eos: true });
            return { text: c.choices[0].text, ms: performance.now() - t0 };
          } catch (x) { return { error: x.message, ms: performance.now() - t0 }; }
        };
        const ok = await gen();
        mapMode = 'slow';
        const pending = gen();
        await new Promise((res) => setTimeout(res, 500));
        dev.onuncapturederror({ error: { message: 'injected validation error' } });
        const slow = await pending;
        mapMode = 'never';
        const lostRun = gen();
        await new Promise((res) => setTimeout(res, 500));
        fireLost({ reason: 'unknown', message: 'injected loss' });
        const lost = await lostRun;
        return { ok, slow, lost, core: e.info.core };
      }, `/models/${MODEL}`);
      assert.equal(r.core, 'single-threaded-webgpu');
      assert.ok(r.ok.text !== undefined, `the first request: ${JSON.stringify(r.ok)}`);
      assert.ok(r.slow.ms > 11000, `the slow readback was waited for: ${r.slow.ms.toFixed(0)} ms`);
      assert.match(r.slow.error ?? '', /injected validation error/, 'the error is reported once the readback answered');
      assert.doesNotMatch(r.slow.error ?? '', /never answered|lost/);
      assert.match(r.lost.error ?? '', /lost/, `a lost device ends the wait: ${JSON.stringify(r.lost)}`);
      assert.ok(r.lost.ms > 9000 && r.lost.ms < 40000, `after the grace: ${r.lost.ms.toFixed(0)} ms`);
    } finally {
      await p.close();
    }
  });

// `auto` on a hardware adapter: SwiftShader dressed up as one (its adapter
// info without the software markers, for core.js's probe and the HAL alike).
// The HAL then tunes the kernels for a GPU, which SwiftShader runs some 30x
// slower than its CPU tuning (0.3 tok/s): two tokens only.
test("no COOP/COEP: 'auto' on a hardware adapter picks the single-threaded WebGPU core", { timeout: 60000 }, async () => {
  const want = nativeRun(PROMPT, N, 'webgpu').text;
  const p = await browser.newPage();
  try {
    await p.goto(`${server.url}/blank.html`);
    const r = await p.evaluate(async (url) => {
      const real = Object.getOwnPropertyDescriptor(GPUAdapter.prototype, 'info').get;
      Object.defineProperty(GPUAdapter.prototype, 'info', { configurable: true, get() {
        const i = real.call(this);
        return { vendor: 'acme', architecture: 'test-gpu', device: 'Acme Test GPU', description: '', isFallbackAdapter: false,
                 subgroupMinSize: i.subgroupMinSize, subgroupMaxSize: i.subgroupMaxSize };
      } });
      Object.defineProperty(GPUAdapter.prototype, 'isFallbackAdapter', { configurable: true, get: () => false });
      const wgllm = await import('/dist/wgllm.js');
      const e = await wgllm.createEngine({ model: url, backend: 'auto' });
      const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: 2, temperature: 0, ignore_eos: true });
      await e.unload();
      return { caps: e.capabilities, text: c.choices[0].text, n: c.usage.completion_tokens };
    }, `/models/${MODEL}`);
    assert.equal(r.caps.core, 'single-threaded-webgpu');
    assert.equal(r.caps.backend, 'webgpu');
    assert.match(r.caps.reason, /^webgpu: Acme Test GPU \(browser, /);
    assert.equal(r.n, 2);
    assert.ok(r.text.length > 0 && want.startsWith(r.text), `${JSON.stringify(r.text)} begins native's ${JSON.stringify(want)}`);
  } finally {
    await p.close();
  }
});

test("no COOP/COEP: 'auto' on SwiftShader picks the single-threaded CPU core and says why", { timeout: 60000 }, async () => {
  const r = await page.evaluate(async ({ url, n }) => {
    const e = await wgllm.createEngine({ model: url, backend: 'auto' });
    const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, ignore_eos: true });
    await e.unload();
    return { caps: e.capabilities, info: e.info, text: c.choices[0].text };
  }, { url: `/models/${MODEL}`, n: N });
  assert.equal(r.caps.backend, 'cpu');
  assert.match(r.caps.reason, /^cpu \(auto: the WebGPU adapter '.+' is a software\/CPU adapter; the single-threaded CPU core\)$/);
  assert.equal(r.info.core, 'single-threaded');
  assert.equal(r.caps.core, 'single-threaded');
  assert.equal(r.caps.adapter, null);
  assert.equal(r.caps.gpu_memory, 0);
  assert.equal(r.text, nativeRun(PROMPT, N, 'cpu').text);
  assert.deepEqual(pageErrors, []);
});
