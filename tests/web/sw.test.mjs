// sw.test.mjs - the service worker engine (createServiceWorkerEngine over
// web/dist/sw.js) in headless Chromium: page A registers the worker and loads
// a synthetic model there, and its greedy tokens equal native `wgllm run`;
// page B, a second tab of the same origin, gets the same loaded model with
// no reload (the worker's load counter stays at 1, and B's first token comes
// far sooner than A's load took); B streams while A streams; closing A in
// the middle of its stream leaves B's stream whole and the worker serving;
// the last engine's unload frees the model and another model is refused
// while a page uses the loaded one; with WebGPU in the service worker
// (SwiftShader here) backend 'webgpu' runs the single-threaded WebGPU core
// there, with native greedy tokens; when the browser stops the worker, an
// open engine's requests fail clearly (no hang) and a new engine loads again.
// Run through tests/web/run.sh (which builds web/dist and the native tool).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { root, chromium, startServer, WGLLM, MODELS, WEBGPU_FLAGS, synthModel } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';
const OTHER = 'tiny-q4_0.gguf';
const PROMPT = 'Once upon a time';
const N = 16;

let server, browser, context, pageA, pageB;
const pageErrors = [];

// The native greedy text; the portable (scalar) kernels are the wasm build's:
// bit-identical logits (see browser.test.mjs).
function nativeText(prompt, n) {
  const env = { ...process.env, WGLLM_CPU: 'scalar' };
  const out = execFileSync(WGLLM, ['run', '-m', path.join(MODELS, MODEL), '-p', prompt, '-n', String(n), '-t', '1', '--ignore-eos'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30000, env });
  assert.ok(out.startsWith(prompt), `native output starts with the prompt: ${JSON.stringify(out)}`);
  return out.slice(prompt.length).replace(/\n$/, '');
}

async function openPage() {
  const p = await context.newPage();
  p.on('pageerror', (e) => pageErrors.push(e.message));
  p.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await p.goto(`${server.url}/blank.html`);
  await p.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
  return p;
}

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'sw.js')), 'web/dist is built (make wasm)');
  synthModel(MODEL, 'tiny', 'q8_0');
  synthModel(OTHER, 'tiny', 'q4_0');
  // no COOP/COEP: the pages need none (the service worker is single-threaded either way)
  server = await startServer({ models: MODELS, isolate: false });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: WEBGPU_FLAGS, timeout: 60000 });
  context = await browser.newContext(); // one origin's storage: the two tabs share the service worker
  pageA = await openPage();
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.close();
});

// two slots: A's and B's streams run together; a context for A's 4000 tokens; the model
// stored in OPFS by the service worker (a fresh browser profile: A downloads it)
const OPTS = { model: `/models/${MODEL}`, nSlots: 2, nCtx: 8192 };

test('page A: the service worker loads the model; greedy tokens equal native wgllm', { timeout: 60000 }, async () => {
  const want = nativeText(PROMPT, N);
  const r = await pageA.evaluate(async ({ opts, n }) => {
    const t0 = performance.now();
    window.engine = await wgllm.createServiceWorkerEngine({ ...opts, onProgress: () => {} });
    const loadMs = performance.now() - t0;
    const c = await engine.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, ignore_eos: true });
    const reg = await navigator.serviceWorker.getRegistration('/dist/');
    return { loadMs, text: c.choices[0].text, tokens: c.usage.completion_tokens, info: engine.info, caps: engine.capabilities,
             script: reg && reg.active ? reg.active.scriptURL : null, status: await engine.serviceWorker.status() };
  }, { opts: OPTS, n: N });
  assert.match(r.script ?? '', /\/dist\/sw\.js$/, 'dist/sw.js is the active service worker');
  assert.equal(r.info.service_worker.host, 'service-worker');
  assert.equal(r.info.service_worker.loads, 1, 'one model load');
  assert.equal(r.info.service_worker.reused, false, 'the first page loaded it');
  assert.equal(r.info.core, 'single-threaded', 'a service worker runs the single-threaded core');
  assert.equal(r.info.backend, 'cpu');
  assert.equal(r.info.source, 'opfs', 'the service worker keeps the model in OPFS');
  assert.equal(r.caps.host, 'service-worker');
  assert.equal(typeof r.caps.webgpu, 'boolean');
  assert.match(r.caps.host_reason, /single-threaded core/);
  assert.equal(r.status.engines, 1);
  assert.equal(r.tokens, N);
  assert.equal(r.text, want, 'service worker greedy = native greedy');
  loadMsA = r.loadMs;
  textA = r.text;
});

let loadMsA = 0;
let textA = null;

test('page B (a second tab): the loaded model is reused, no reload; its first token comes far sooner than A\'s load', { timeout: 60000 },
  async () => {
    assert.ok(textA, 'page A loaded the model');
    pageB = await openPage();
    const r = await pageB.evaluate(async ({ opts, n }) => {
      const t0 = performance.now();
      window.engine = await wgllm.createServiceWorkerEngine(opts);
      const connectMs = performance.now() - t0;
      let firstMs = null;
      let text = '';
      for await (const k of await engine.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0,
        ignore_eos: true, stream: true })) {
        if (firstMs === null && k.choices[0]?.text) firstMs = performance.now() - t0;
        text += k.choices[0]?.text ?? '';
      }
      return { connectMs, firstMs, text, info: engine.info, status: await engine.serviceWorker.status() };
    }, { opts: OPTS, n: N });
    assert.equal(r.info.service_worker.reused, true, 'B found the model loaded');
    assert.equal(r.info.service_worker.loads, 1, 'the service worker loaded the model once for both pages');
    assert.equal(r.status.loads, 1);
    assert.equal(r.status.engines, 2, 'A and B use the one model');
    assert.equal(r.text, textA, 'B\'s stream = A\'s greedy text');
    console.log(`# A: service worker start + model load ${loadMsA.toFixed(0)} ms; B: connect ${r.connectMs.toFixed(0)} ms, ` +
      `first token ${r.firstMs.toFixed(0)} ms after createServiceWorkerEngine`);
    assert.ok(r.firstMs < loadMsA / 3, `B's first token (${r.firstMs.toFixed(0)} ms) far below A's load (${loadMsA.toFixed(0)} ms)`);
  });

test('B streams while A streams; closing A mid-stream leaves B\'s stream whole and the worker serving', { timeout: 60000 },
  async () => {
    assert.ok(pageB, 'page B has an engine');
    const M = 64;
    const want = nativeText(PROMPT, M);
    // A: a long stream, still running when its page closes
    await pageA.evaluate(() => {
      window.aChunks = 0;
      (async () => {
        for await (const k of await engine.completions.create({ prompt: 'In a hole in the ground', max_tokens: 4000,
          temperature: 0, ignore_eos: true, stream: true })) if (k.choices[0]?.text) window.aChunks++;
      })().catch(() => {});
    });
    await pageA.waitForFunction(() => window.aChunks >= 2, null, { timeout: 20000 });
    await pageB.evaluate(({ n }) => {
      window.bDone = (async () => {
        const parts = [];
        for await (const k of await engine.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0,
          ignore_eos: true, stream: true })) {
          parts.push(k.choices[0]?.text ?? '');
          window.bParts = parts.length;
        }
        return parts.join('');
      })();
      window.bParts = 0;
    }, { n: M });
    await pageB.waitForFunction(() => window.bParts >= 3, null, { timeout: 20000 });
    const aBefore = await pageA.evaluate(() => window.aChunks);
    await pageA.close(); // mid-stream: A's request was still running
    pageA = null;
    const r = await pageB.evaluate(async () => {
      const text = await window.bDone;
      // the worker lets A's session go (its page has no client any more)
      let status;
      for (let i = 0; i < 50; i++) {
        status = await engine.serviceWorker.status();
        if (status.sessions === 1) break;
        await new Promise((res) => setTimeout(res, 100));
      }
      // and cancels its request (else it would hold a slot for nobody until its 4000 tokens are out)
      for (let i = 0; i < 10 && status.requests !== 0; i++) {
        await new Promise((res) => setTimeout(res, 100));
        status = await engine.serviceWorker.status();
      }
      const again = await engine.completions.create({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true });
      return { text, status, again: again.choices[0].text };
    });
    assert.ok(aBefore >= 2, `A was streaming (${aBefore} chunks) when it closed`);
    assert.equal(r.text, want, 'B\'s stream, concurrent with A\'s and outliving it, = native greedy');
    assert.equal(r.status.sessions, 1, 'A\'s session is gone');
    assert.equal(r.status.engines, 1, 'B alone uses the model');
    assert.equal(r.status.requests, 0, 'A\'s request was cancelled with its page');
    assert.equal(r.status.loads, 1, 'still the one load');
    assert.equal(r.again, want.slice(0, r.again.length), 'B is served after A is gone');
    assert.ok(r.again.length > 0);
  });

test('another model is refused while a page uses the loaded one; the last unload frees it and the next load loads', { timeout: 60000 },
  async () => {
    assert.ok(pageB, 'page B has an engine');
    const r = await pageB.evaluate(async ({ opts, other }) => {
      let busy = null;
      try { await wgllm.createServiceWorkerEngine({ ...opts, model: other }); } catch (e) { busy = { code: e.code, message: e.message }; }
      // the unload waits for every request of the core to end: A's cancelled stream too
      const unload = await Promise.race([engine.unload().then(() => 'done'),
        new Promise((res) => setTimeout(() => res('still waiting after 10 s'), 10000))]);
      if (unload !== 'done') return { unload };
      const e2 = await wgllm.createServiceWorkerEngine({ ...opts, model: other });
      const c = await e2.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true });
      const s = await e2.serviceWorker.status();
      await e2.unload();
      return { unload, busy, info: e2.info, tokens: c.usage.completion_tokens, status: s };
    }, { opts: OPTS, other: `/models/${OTHER}` });
    assert.equal(r.unload, 'done', 'the last engine\'s unload finished');
    assert.ok(r.busy, 'a second model was refused');
    assert.equal(r.busy.code, 'busy');
    assert.equal(r.info.service_worker.reused, false);
    assert.equal(r.info.service_worker.loads, 2, 'the other model is the second load');
    assert.equal(r.status.model, `${server.url}/models/${OTHER}`);
    assert.equal(r.tokens, 4);
    assert.deepEqual(pageErrors, []);
  });

test('WebGPU in the service worker: backend webgpu runs the single-threaded WebGPU core there; greedy = native', { timeout: 90000 },
  async () => {
    assert.ok(pageB, 'page B is open');
    const n = 8;
    const want = nativeText(PROMPT, n);
    const r = await pageB.evaluate(async ({ opts, n }) => {
      const e = await wgllm.createServiceWorkerEngine({ ...opts, backend: 'webgpu' });
      const c = await e.completions.create({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, ignore_eos: true });
      const out = { text: c.choices[0].text, info: e.info, caps: e.capabilities };
      await e.unload();
      return out;
    }, { opts: OPTS, n });
    assert.equal(r.info.service_worker.webgpu, true, 'Chromium exposes navigator.gpu in service workers');
    assert.equal(r.caps.webgpu, true, 'the capability report gives the service worker\'s WebGPU');
    assert.equal(r.info.core, 'single-threaded-webgpu');
    assert.equal(r.info.backend, 'webgpu');
    assert.match(r.caps.reason, /^webgpu: /);
    assert.equal(r.info.service_worker.loads, 3);
    assert.equal(r.text, want, 'the service worker on WebGPU = native greedy');
  });

test('the browser stops the service worker: the open engine\'s requests fail clearly; a new engine loads again', { timeout: 60000 },
  async () => {
    assert.ok(pageB, 'page B is open');
    await pageB.evaluate(async (opts) => {
      window.e3 = await wgllm.createServiceWorkerEngine({ ...opts, heartbeatMs: 200 });
      window.e3Out = (async () => {
        let n = 0;
        try {
          for await (const k of await e3.completions.create({ prompt: 'Once upon a time', max_tokens: 4000, temperature: 0,
            ignore_eos: true, stream: true })) if (k.choices[0]?.text) window.e3Chunks = ++n;
          return { ended: 'normally', n };
        } catch (e) {
          return { ended: 'error', message: e.message, n };
        }
      })();
      window.e3Chunks = 0;
    }, OPTS);
    await pageB.waitForFunction(() => window.e3Chunks >= 2, null, { timeout: 20000 });
    // what the browser does to an idle worker, now: the model goes with it
    const cdp = await context.newCDPSession(pageB);
    await cdp.send('ServiceWorker.enable');
    await cdp.send('ServiceWorker.stopAllWorkers');
    const r = await pageB.evaluate(async (opts) => {
      const out = await Promise.race([window.e3Out, new Promise((res) => setTimeout(() => res({ ended: 'still running after 10 s' }), 10000))]);
      let after = null;
      try {
        await Promise.race([e3.completions.create({ prompt: 'x', max_tokens: 1 }),
          new Promise((res, rej) => setTimeout(() => rej(new Error('no answer after 3 s')), 3000))]);
      } catch (e) { after = e.message; }
      const e4 = await wgllm.createServiceWorkerEngine(opts);
      const c = await e4.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true });
      const info = e4.info.service_worker;
      await e4.unload();
      return { out, after, info, tokens: c.usage.completion_tokens };
    }, OPTS);
    assert.equal(r.out.ended, 'error', `the stream on the stopped worker ended: ${JSON.stringify(r.out)}`);
    assert.match(r.out.message, /service worker was restarted/);
    assert.match(r.after ?? '', /service worker was restarted/, 'later requests fail at once');
    assert.equal(r.info.reused, false, 'the restarted worker had no model');
    assert.equal(r.info.loads, 1, 'its first load');
    assert.equal(r.tokens, 4);
  });
