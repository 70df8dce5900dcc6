// protocol.test.mjs - the worker protocol (web/src/worker.js over core.js and
// wgllm_web.c) against hostile input, in headless Chromium with the real
// package (web/dist): NUL characters and lone surrogates in message text,
// requests too large for the wasm memory, two `load` messages at once or
// during a generation, and messages of unknown type or with malformed
// fields. Each case checks the clear error (or the text handled as text) and
// that the same worker then still answers a normal request.
// Run through tests/web/run.sh (which builds and installs what is missing).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { root, chromium, startServer, MODELS, FLAGS, synthModel } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';

let server, browser, page;

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'wgllm.js')), 'web/dist is built (make wasm)');
  synthModel(MODEL, 'tiny', 'q8_0');
  server = await startServer({ models: MODELS });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, timeout: 60000 });
  page = await browser.newPage();
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await page.goto(`${server.url}/blank.html`);
  await page.evaluate(async (model) => {
    window.wgllm = await import('/dist/wgllm.js');
    window.MODEL_URL = new URL(model, location.href).href;
    // A bare worker driven message by message: replies by id (a promise
    // that settles with the raw reply), id-less replies in `loose`, and
    // the worker's error events (an exception that escaped it) in `errors`.
    window.bareWorker = () => {
      const w = new Worker('/dist/worker.js', { type: 'module' });
      const waiters = new Map();
      w.loose = [];
      w.errors = [];
      w.onmessage = (ev) => {
        const m = ev.data;
        if (m && (m.type === 'progress' || m.type === 'chunk' || m.type === 'started')) return;
        const f = m && waiters.get(m.id);
        if (f) { waiters.delete(m.id); f(m); } else w.loose.push(m);
      };
      w.onerror = (e) => { w.errors.push(e.message || 'error'); };
      w.rpc = (id, op, args) => new Promise((res) => { waiters.set(id, res); w.postMessage({ id, op, args }); });
      // the reply, or 'no reply' after ms (a hung promise shows as that)
      w.rpcWithin = (ms, id, op, args) => Promise.race([w.rpc(id, op, args),
        new Promise((res) => setTimeout(() => res({ id, type: 'no reply' }), ms))]);
      // a generation as the page's engine sends it: {kind, ...the OpenAI request} -> op 'openai' with
      // the request's JSON; the reply as {type: 'result', value: the answer + text, finish} or
      // {type: 'error', status, param, code, message} (a refusal, or the answer's error)
      const asOpenAI = ({ kind, ...rest }) => ({ endpoint: kind === 'chat' ? 'chat' : 'completions',
        body: JSON.stringify(rest), modelId: 'm' });
      const shape = (m) => {
        if (m.type !== 'result') return m;
        const a = JSON.parse(m.value.answer);
        if (a.error) return { id: m.id, type: 'error', status: m.value.status, message: `wgllm: ${a.error.message}`,
          code: a.error.code, param: a.error.param };
        const c = a.choices[0];
        return { id: m.id, type: 'result', value: { ...a, text: c.text ?? c.message.content, finish: c.finish_reason } };
      };
      w.gen = (id, req) => w.rpc(id, 'openai', asOpenAI(req)).then(shape);
      w.genWithin = (ms, id, req) => w.rpcWithin(ms, id, 'openai', asOpenAI(req)).then(shape);
      return w;
    };
    window.loadArgs = (extra) => ({ model: MODEL_URL, chatTemplate: wgllm.CHATML, store: false, ...extra });
    window.greedy = { kind: 'completion', prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true };
  }, `/models/${MODEL}`);
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.close();
});

test('protocol: NUL and lone surrogates in message text are text or a clear error, never cut short', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async () => {
    const w = bareWorker();
    const out = {};
    out.load = await w.rpc(1, 'load', loadArgs());
    out.before = await w.gen(2, greedy);
    const tail = ' and a long tail of words after it';
    const q = (id, prompt) => w.genWithin(30000, id, { kind: 'completion', prompt, max_tokens: 2, temperature: 0 });
    out.cut = await q(3, 'A');
    out.nul = await q(4, `A\u0000${tail}`);
    out.nulOnly = await q(5, '\u0000\u0000');
    out.surrogates = await q(6, `lone \uD800 and \uDC00 and \uDFFF\uD800${tail}`);
    const chat = (id, content, extra) => w.genWithin(30000, id,
      { kind: 'chat', messages: [{ role: 'user', content }], max_tokens: 2, temperature: 0, ...extra });
    out.chatNul = await chat(7, `hi\u0000${tail}`);
    out.chatSurrogate = await chat(8, 'hi \uD83D there');
    out.stopNul = await chat(9, 'hi', { stop: ['a\u0000b'] });
    out.roleNul = await w.genWithin(30000, 10, { kind: 'chat', messages: [{ role: 'us\u0000er', content: 'x' }] });
    const emb = async (id, text) => Array.from((await w.rpcWithin(30000, id, 'embed', { text })).value ?? []);
    out.embA = await emb(11, 'A');
    out.embNul = await emb(12, `A\u0000${tail}`);
    out.after = await w.gen(13, greedy);
    out.errors = w.errors;
    w.terminate();
    return out;
  });
  assert.equal(r.load.type, 'result', JSON.stringify(r.load));
  assert.equal(r.before.type, 'result');
  assert.equal(r.cut.type, 'result');
  // the prompt crosses with its length: the text after the NUL counts
  assert.equal(r.nul.type, 'result', JSON.stringify(r.nul));
  assert.ok(r.nul.value.usage.prompt_tokens > r.cut.value.usage.prompt_tokens + 3,
    `text after a NUL is not dropped: ${r.nul.value.usage.prompt_tokens} vs ${r.cut.value.usage.prompt_tokens} tokens`);
  assert.equal(r.nulOnly.type, 'result', JSON.stringify(r.nulOnly));
  // chat messages and stops go through NUL-terminated C strings: refused (a 400 naming the field), not cut
  for (const [k, param] of [['chatNul', 'messages[0].content'], ['stopNul', 'stop'], ['roleNul', 'messages[0].role']]) {
    assert.equal(r[k].type, 'error', `${k}: ${JSON.stringify(r[k])}`);
    assert.equal(r[k].status, 400);
    assert.equal(r[k].param, param);
    assert.match(r[k].message, /NUL/);
  }
  // a lone surrogate is a \ud800 escape in the request's JSON, which the OpenAI layer refuses, as the server does
  for (const k of ['surrogates', 'chatSurrogate']) {
    assert.equal(r[k].type, 'error', `${k}: ${JSON.stringify(r[k])}`);
    assert.equal(r[k].code, 'invalid_json');
  }
  assert.equal(r.embA.length, 256);
  assert.equal(r.embNul.length, 256);
  assert.notDeepEqual(r.embNul, r.embA, 'the embedded text goes on after the NUL');
  assert.equal(r.after.type, 'result');
  assert.equal(r.after.value.text, r.before.value.text, 'the engine still answers the same');
  assert.deepEqual(r.errors, []);
});

test('protocol: requests too large for the wasm memory fail clearly; the worker loads and serves again', { timeout: 180000 }, async () => {
  const r = await page.evaluate(async () => {
    const w = bareWorker();
    const out = {};
    // a KV cache for 16M positions: far beyond the 4 GiB the wasm memory can grow to
    out.hugeCtx = await w.rpcWithin(60000, 1, 'load', loadArgs({ nCtx: 1 << 24 }));
    out.badCtx = await w.rpcWithin(10000, 2, 'load', loadArgs({ nCtx: 2 ** 40 }));
    // a GGUF whose one tensor claims 2^31 x 2^31 floats (8 EiB), in 64 bytes of file
    const parts = [];
    const u32 = (v) => { const b = new DataView(new ArrayBuffer(4)); b.setUint32(0, v, true); parts.push(b.buffer); };
    const u64 = (v) => { const b = new DataView(new ArrayBuffer(8)); b.setBigUint64(0, BigInt(v), true); parts.push(b.buffer); };
    const str = (t) => { const e = new TextEncoder().encode(t); u64(e.length); parts.push(e); };
    parts.push(new TextEncoder().encode('GGUF')); u32(3); u64(1); u64(1);
    str('general.architecture'); u32(8); str('llama');
    str('token_embd.weight'); u32(2); u64(2 ** 31); u64(2 ** 31); u32(0); u64(0);
    const head = await new Blob(parts).arrayBuffer();
    const bytes = new Uint8Array(Math.ceil(head.byteLength / 32) * 32 + 64);
    bytes.set(new Uint8Array(head));
    out.hugeTensor = await w.rpcWithin(60000, 30, 'load', loadArgs({ model: bytes }));
    out.load = await w.rpcWithin(60000, 3, 'load', loadArgs());
    out.before = await w.gen(4, greedy);
    out.hugeMax = await w.genWithin(30000, 5, { ...greedy, max_tokens: 2 ** 31 });
    out.bigMax = await w.genWithin(60000, 6, { ...greedy, max_tokens: 1e6, ignore_eos: false });
    // 4 MiB of prompt: far more than the context holds
    out.bigPrompt = await w.genWithin(90000, 7, { ...greedy, prompt: 'word '.repeat(1 << 20) });
    out.after = await w.gen(8, greedy);
    out.errors = w.errors;
    w.terminate();
    return out;
  });
  assert.equal(r.hugeCtx.type, 'error', JSON.stringify(r.hugeCtx));
  assert.match(r.hugeCtx.message, /memory|too large|exceed|overflow/i);
  assert.equal(r.badCtx.type, 'error', JSON.stringify(r.badCtx));
  assert.equal(r.badCtx.code, 'argument');
  console.log(`# huge nCtx: ${r.hugeCtx.message}; max_tokens 1e6: ${r.bigMax.type} ${r.bigMax.message ?? r.bigMax.value?.finish}; 4 MiB prompt: ${r.bigPrompt.message}`);
  assert.equal(r.hugeTensor.type, 'error', JSON.stringify(r.hugeTensor));
  assert.equal(r.hugeTensor.code, 'load');
  console.log(`# a tensor of 2^62 floats: ${r.hugeTensor.message}`);
  assert.equal(r.load.type, 'result', `the next load works: ${JSON.stringify(r.load)}`);
  assert.equal(r.before.type, 'result');
  assert.equal(r.hugeMax.type, 'error', JSON.stringify(r.hugeMax));
  assert.equal(r.hugeMax.status, 400); // more than max(65536, the context): as the server's --max-tokens default
  assert.equal(r.hugeMax.param, 'max_tokens');
  assert.notEqual(r.bigMax.type, 'no reply', 'max_tokens 1e6 ends (a result or an error)');
  assert.notEqual(r.bigPrompt.type, 'no reply');
  assert.equal(r.bigPrompt.type, 'error', JSON.stringify(r.bigPrompt).slice(0, 300));
  assert.equal(r.after.type, 'result');
  assert.equal(r.after.value.text, r.before.value.text);
  assert.deepEqual(r.errors, []);
});

test('protocol: a second load, during a load or a generation, is refused; the first model serves on', { timeout: 180000 }, async () => {
  const r = await page.evaluate(async () => {
    const w = bareWorker();
    const out = {};
    const first = w.rpc(1, 'load', loadArgs());
    out.second = await w.rpcWithin(60000, 2, 'load', loadArgs({ nCtx: 512 }));
    out.first = await first;
    out.genDuringLoad = null;
    const long = w.gen(3, { ...greedy, max_tokens: 400 });
    out.loadDuringGen = await w.rpcWithin(60000, 4, 'load', loadArgs({ nCtx: 512 }));
    out.long = await long;
    out.after = await w.gen(5, greedy);
    // unload while a load runs: waits for it, then frees what it loaded
    out.unload = await w.rpc(6, 'unload', {});
    const again = w.rpc(7, 'load', loadArgs({ nCtx: 1024 }));
    const genWhileLoading = await w.genWithin(60000, 8, greedy);
    out.genWhileLoading = genWhileLoading;
    out.again = await again;
    out.afterReload = await w.gen(9, greedy);
    out.errors = w.errors;
    w.terminate();
    // two engines on one worker: the second's load is refused and the first keeps its replies
    const shared = new Worker('/dist/worker.js', { type: 'module' });
    const e1 = await wgllm.createWorkerEngine({ worker: shared, model: MODEL_URL, store: false });
    const e2 = await wgllm.createWorkerEngine({ worker: shared, model: MODEL_URL, store: false }).then(() => 'loaded', (e) => e.code);
    out.sharedSecond = e2;
    out.sharedFirst = (await e1.completions.create({ prompt: greedy.prompt, max_tokens: 6, temperature: 0, ignore_eos: true })).choices[0].text;
    await e1.unload();
    return out;
  });
  assert.equal(r.first.type, 'result', JSON.stringify(r.first));
  assert.equal(r.second.type, 'error', JSON.stringify(r.second));
  assert.equal(r.second.code, 'busy');
  assert.equal(r.loadDuringGen.type, 'error', JSON.stringify(r.loadDuringGen));
  assert.equal(r.loadDuringGen.code, 'busy');
  assert.equal(r.long.type, 'result');
  assert.equal(r.long.value.usage.completion_tokens, 400, 'the generation ran to its end');
  assert.equal(r.after.type, 'result');
  assert.equal(r.unload.type, 'result');
  assert.equal(r.genWhileLoading.type, 'error');
  assert.match(r.genWhileLoading.message, /loading/);
  assert.equal(r.again.type, 'result', JSON.stringify(r.again));
  assert.equal(r.afterReload.type, 'result');
  assert.equal(r.afterReload.value.text, r.after.value.text);
  assert.equal(r.sharedSecond, 'busy');
  assert.equal(r.sharedFirst, r.after.value.text);
  assert.deepEqual(r.errors, []);
});

test('protocol: messages of unknown type or with malformed fields get error replies; the worker lives', { timeout: 120000 }, async () => {
  const r = await page.evaluate(async () => {
    const w = bareWorker();
    const out = {};
    out.load = await w.rpc(1, 'load', loadArgs());
    out.before = await w.gen(2, greedy);
    for (const m of [null, 42, 'load', [1, 2], { op: 7 }]) w.postMessage(m); // no id: replies with id null
    const cases = {
      unknown: ['nope', {}],
      argsString: ['openai', 'x'],
      noArgs: ['openai', undefined],
      badKind: ['openai', { endpoint: 'poem', body: '{"prompt":"x"}' }],
      bodyNotText: ['openai', { endpoint: 'completions', body: { prompt: 'x' } }],
      nullMessage: ['openai', { endpoint: 'chat', body: '{"messages":[null]}' }],
      emptyMessages: ['openai', { endpoint: 'chat', body: '{"messages":[]}' }],
      promptNumber: ['openai', { endpoint: 'completions', body: '{"prompt":5}' }],
      maxTokensString: ['openai', { endpoint: 'completions', body: '{"prompt":"x","max_tokens":"abc"}' }],
      temperatureNaN: ['openai', { endpoint: 'completions', body: '{"prompt":"x","temperature":NaN}' }],
      unknownField: ['openai', { endpoint: 'completions', body: '{"prompt":"x","kind":"completion"}' }],
      tooManyStops: ['openai', { endpoint: 'completions',
        body: JSON.stringify({ prompt: 'x', stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }) }],
      embedNoText: ['embed', {}],
      embedBadPooling: ['embed', { text: 'x', opts: { pooling: 'max' } }],
      snapshotsBadOp: ['snapshots', { op: 'zap' }],
      restoreNoBytes: ['snapshots', { op: 'restore' }],
      restoreGarbage: ['snapshots', { op: 'restore', bytes: new Uint8Array([1, 2, 3, 4]) }],
      loadNoModel: ['load', {}],
    };
    let id = 10;
    for (const [k, [op, args]] of Object.entries(cases)) out[k] = await w.rpcWithin(20000, id++, op, args);
    out.cancelUnknown = await w.rpcWithin(2000, id++, 'cancel', { id: 12345 }); // answers nothing, harms nothing
    out.after = await w.gen(99, greedy);
    out.loose = w.loose;
    out.errors = w.errors;
    w.terminate();
    return out;
  });
  assert.equal(r.load.type, 'result');
  for (const k of ['unknown', 'argsString', 'noArgs', 'badKind', 'bodyNotText', 'nullMessage', 'emptyMessages',
    'promptNumber', 'maxTokensString', 'temperatureNaN', 'unknownField', 'tooManyStops', 'embedNoText',
    'embedBadPooling', 'snapshotsBadOp', 'restoreNoBytes', 'restoreGarbage', 'loadNoModel']) {
    assert.equal(r[k].type, 'error', `${k}: ${JSON.stringify(r[k])}`);
    assert.ok(r[k].message.startsWith('wgllm: '), `${k}: ${r[k].message}`);
  }
  assert.equal(r.unknown.code, 'protocol');
  // the OpenAI layer's refusals: the server's status, param and code
  for (const [k, param, code] of [['nullMessage', 'messages[0].role', null], ['emptyMessages', 'messages', null],
    ['promptNumber', 'prompt', null], ['maxTokensString', 'max_tokens', null], ['temperatureNaN', null, 'invalid_json'],
    ['unknownField', 'kind', null], ['tooManyStops', 'stop', null]]) {
    assert.equal(r[k].status, 400, `${k}: ${JSON.stringify(r[k])}`);
    assert.equal(r[k].param, param, k);
    assert.equal(r[k].code, code, k);
  }
  assert.equal(r.loadNoModel.code, 'busy', 'a load into a worker that holds a model is refused first');
  assert.equal(r.cancelUnknown.type, 'no reply');
  assert.equal(r.loose.length, 5, `each id-less message got an error reply: ${JSON.stringify(r.loose)}`);
  for (const m of r.loose) assert.ok(m.type === 'error' && m.id === null && m.code === 'protocol', JSON.stringify(m));
  assert.equal(r.after.type, 'result');
  assert.equal(r.after.value.text, r.before.value.text);
  assert.deepEqual(r.errors, []);
});
