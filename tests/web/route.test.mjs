// route.test.mjs - the JS router (wgllm.createRouter) in headless Chromium:
// a route of the page's worker engine and a real `wgllm serve` (loopback,
// --cors) picks its target with the core's routing policy (wgllm_web_route,
// the C code `wgllm serve --route` runs): a long cold conversation goes to
// the server (the engine has no measured prefill rate yet), a local-only
// field (logprobs) forces it local, which warms the engine's cache, and the
// same conversation then stays local; answers and a stream's last chunk carry
// `wgllm.route`; a server that cannot be reached falls back to the engine;
// bad routes are refused when the router is made.
// Run through tests/web/run.sh (which builds web/dist and the native tool).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { openPage, startNativeServe, synthModel } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';
let files, native, browser, page;


before(async () => {
  const model = synthModel(MODEL, 'tiny', 'q8_0');
  ({ files, browser, page } = await openPage());
  // the server gets the page engine's chat template (the tiny model has none)
  const chatml = await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); return wgllm.CHATML; });
  const template = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'wgllm-route-')), 'chatml.jinja');
  fs.writeFileSync(template, chatml);
  native = await startNativeServe(model, template, ['--ctx-size', '512', '--cors', '*']);
  await page.evaluate(async ({ url, server }) => {
    window.engine = await wgllm.createWorkerEngine({ model: url, chatTemplate: wgllm.CHATML, backend: 'cpu',
      nThreads: 1, nCtx: 512, nSlots: 1, store: false });
    window.router = wgllm.createRouter({ routes: { auto: [{ engine }, { baseURL: `${server}/v1`, name: 'fast' }] } });
  }, { url: `/models/${MODEL}`, server: native.url });
});

after(async () => {
  if (native) native.proc.kill('SIGKILL');
  if (browser) await browser.close();
  if (files) await files.close();
});

test('router: cold long conversation remote, local-only field local, the same again local (warm)', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async () => {
    const LONG = [{ role: 'system', content: 'the river ran past the mill, '.repeat(45) },
      { role: 'user', content: 'Where did the river go?' }];
    const ask = (extra = {}) => router.chat.completions.create({ model: 'auto', messages: LONG, max_tokens: 4,
      temperature: 0, ...extra });
    const cold = await ask();
    const forced = await ask({ logprobs: true });
    const warm = await ask();
    let last = null, n = 0;
    for await (const c of await ask({ stream: true })) { last = c; n++; }
    const stats = router.stats;
    let unknown = null;
    try { await router.chat.completions.create({ model: 'nope', messages: LONG }); } catch (e) { unknown = { status: e.status, message: e.message }; }
    return { cold: { route: cold.wgllm.route, model: cold.model, text: cold.choices[0].message.content },
      forced: { route: forced.wgllm.route, logprobs: forced.choices[0].logprobs?.content?.length ?? 0 },
      warm: { route: warm.wgllm.route, cached: warm.usage.prompt_tokens_details?.cached_tokens },
      stream: { n, route: last?.wgllm?.route }, stats, unknown };
  });
  const cand = (route, t) => route.candidates.find((c) => c.target === t);
  assert.equal(r.cold.route.target, 'fast', JSON.stringify(r.cold.route));
  assert.equal(cand(r.cold.route, 'local').cached_tokens, 0);
  assert.ok(cand(r.cold.route, 'local').prompt_tokens > 300);
  assert.equal(r.cold.model, MODEL); // the server's answer
  assert.equal(r.forced.route.target, 'local', JSON.stringify(r.forced.route));
  assert.match(cand(r.forced.route, 'fast').refused, /logprobs/);
  assert.ok(r.forced.logprobs > 0);
  assert.equal(r.warm.route.target, 'local', JSON.stringify(r.warm.route));
  const lw = cand(r.warm.route, 'local');
  assert.equal(lw.cached_tokens, lw.prompt_tokens - 1);
  assert.equal(r.warm.cached, lw.cached_tokens); // what the policy was told is what the engine reused
  assert.ok(cand(r.warm.route, 'fast').latency_ms > 0); // measured on the cold call
  assert.ok(r.stream.n >= 2);
  assert.equal(r.stream.route.target, 'local');
  assert.ok(r.stats.auto[0].latency_ms > 0 && r.stats.auto[0].healthy);
  assert.equal(r.unknown.status, 404);
  assert.match(r.unknown.message, /no route named 'nope'/);
});

test('router: a server that cannot be reached falls back to the local engine', { timeout: 60000 }, async () => {
  const r = await page.evaluate(async (url) => {
    // a fresh engine: with a measured prefill rate the policy would not pick the server
    const e2 = await wgllm.createWorkerEngine({ model: url, chatTemplate: wgllm.CHATML, backend: 'cpu', nThreads: 1,
      nCtx: 512, nSlots: 1, store: false });
    const rt = wgllm.createRouter({ routes: { down: [{ baseURL: 'http://127.0.0.1:9/v1', name: 'dead' }, { engine: e2 }] } });
    const LONG = [{ role: 'system', content: 'the river ran past the mill, '.repeat(45) }, { role: 'user', content: 'Where?' }];
    const first = await rt.chat.completions.create({ model: 'down', messages: LONG, max_tokens: 2, temperature: 0 });
    const second = await rt.chat.completions.create({ model: 'down', messages: LONG, max_tokens: 2, temperature: 0 });
    const out = { first: first.wgllm.route, text: first.choices[0].message.content, second: second.wgllm.route,
      stats: rt.stats.down };
    await e2.unload();
    return out;
  }, `/models/${MODEL}`);
  assert.equal(r.first.target, 'local', JSON.stringify(r.first));
  assert.equal(r.first.fallback.from, 'dead');
  assert.ok(r.text.length > 0);
  assert.equal(r.second.target, 'local');
  assert.equal(r.second.fallback, undefined);
  assert.equal(r.second.candidates.find((c) => c.target === 'dead').healthy, false); // cooling after its failure
  assert.equal(r.stats[0].healthy, false);
});

test('router: bad routes are refused naming them', { timeout: 30000 }, async () => {
  const errs = await page.evaluate(async () => {
    const tryMake = (o) => { try { wgllm.createRouter(o); return null; } catch (e) { return e.message; } };
    return [
      tryMake({ routes: { x: [] } }),
      tryMake({ routes: { x: [{ engine }, { baseURL: 'http://127.0.0.1:9/v1', cost: 'cheap' }] } }),
      tryMake({ routes: { x: [{ baseURL: 'http://127.0.0.1:9/v1' }] } }),
      tryMake({ routes: { x: [{ engine }, { baseURL: 'ftp://x' }] } }),
      tryMake({ routes: { x: [{ engine }] }, costWeight: -1 }),
    ];
  });
  assert.match(errs[0], /route 'x' needs 1 to 16 targets/);
  assert.match(errs[1], /route 'x' target 1: cost cheap is not a price/);
  assert.match(errs[2], /route 'x' needs exactly one local engine \(it has 0\)/);
  assert.match(errs[3], /route 'x' target 1 needs baseURL starting with http/);
  assert.match(errs[4], /costWeight -1/);
});
