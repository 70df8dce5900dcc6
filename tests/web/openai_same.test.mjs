// openai_same.test.mjs - `wgllm serve` and the browser package answer the same
// OpenAI request identically: one synthetic model, served natively (CPU) and
// loaded in headless Chromium (the wasm CPU backend, on the page), the same
// chat template, one slot and the same context on both; then a list of
// requests sent to both in the same order (so their KV caches go through the
// same states): greedy and seeded sampling on the defaults, stop strings,
// logprobs in both shapes, max_tokens, context_key reuse, the repetition
// penalty under both names, chat and completions, streamed and not; and
// invalid ones (unknown field, bad type, out of range, empty messages, an
// unknown model, a NUL, both penalty names). Answers are compared field by
// field, except id, created, system_fingerprint and the browser's timings
// (usage.extra); logprobs within 1e-3 (the native and the wasm kernels sum in
// different orders), everything else exactly; errors by status, type, param,
// code and message.
//
// Why this catches drift: the seeded requests leave temperature, top_k,
// top_p, min_p and the penalties at their defaults, so a default changed on
// one side changes that side's sampled text (and the comparison fails); a
// field one side refuses and the other takes shows as an error on one side
// only; a renamed field or a different error text as a differing message.
// Run through tests/web/run.sh (which builds and installs what is missing).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { openPage, startNativeServe, synthModel } from './setup.mjs';

const MODEL = 'tiny-q8_0.gguf';
const CTX = 2048; // the browser engine's default nCtx; one slot on both sides
const IGNORED = new Set(['id', 'created', 'system_fingerprint']);

let files, browser, page, native, base;


before(async () => {
  const model = synthModel(MODEL, 'tiny', 'q8_0');
  ({ files, browser, page } = await openPage());
  // the page engine (CPU, one thread, one slot) and its chat template, which the server gets too
  const chatml = await page.evaluate(async (url) => {
    window.wgllm = await import('/dist/wgllm.js');
    window.engine = await wgllm.createEngine({ model: url, chatTemplate: wgllm.CHATML, backend: 'cpu', nThreads: 1,
      nCtx: 2048, nSlots: 1, store: false });
    // one request as the page sends it: the answer (or every chunk) parsed, or the error's fields
    window.ask = async (route, body) => {
      const api = route === 'chat' ? engine.chat.completions : engine.completions;
      try {
        const r = await api.create(body);
        if (!body.stream) return { status: 200, json: r };
        const chunks = [];
        for await (const c of r) chunks.push(c);
        return { status: 200, chunks };
      } catch (e) {
        return { status: e.status, error: { message: e.message.replace(/^wgllm: /, ''), type: e.type, param: e.param, code: e.code } };
      }
    };
    return wgllm.CHATML;
  }, `/models/${MODEL}`);
  const template = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'wgllm-same-')), 'chatml.jinja');
  fs.writeFileSync(template, chatml);
  native = await startNativeServe(model, template, ['--ctx-size', String(CTX)]);
  base = native.url;
});

after(async () => {
  if (native) native.proc.kill('SIGKILL');
  if (browser) await browser.close();
  if (files) await files.close();
});

// The server's answer in the same shape as the page's.
async function askNative(route, body) {
  const r = await fetch(`${base}/v1/${route === 'chat' ? 'chat/completions' : 'completions'}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  if (r.status !== 200) return { status: r.status, error: JSON.parse(text).error };
  if (!body.stream) return { status: 200, json: JSON.parse(text) };
  const chunks = [];
  for (const ev of text.split('\n\n')) {
    const line = ev.split('\n').find((l) => l.startsWith('data: '));
    if (!line || line === 'data: [DONE]') continue;
    chunks.push(JSON.parse(line.slice(6)));
  }
  return { status: 200, chunks };
}

// Field-by-field equality: the path of the first difference, or null.
function diff(a, b, where = '$', inLogprob = false) {
  if (typeof a === 'number' && typeof b === 'number') {
    return (inLogprob ? Math.abs(a - b) <= 1e-3 : a === b) ? null : `${where}: ${a} vs ${b}`;
  }
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') {
    return a === b ? null : `${where}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
  }
  if (Array.isArray(a) !== Array.isArray(b)) return `${where}: array vs object`;
  const ka = Object.keys(a).filter((k) => !IGNORED.has(k) && !(where.endsWith('.usage') && k === 'extra'));
  const kb = Object.keys(b).filter((k) => !IGNORED.has(k) && !(where.endsWith('.usage') && k === 'extra'));
  if (ka.join(',') !== kb.join(',')) return `${where}: fields [${ka}] vs [${kb}]`;
  for (const k of ka) {
    // every number under a logprobs object is a log-probability (or a token's byte / offset, equal anyway)
    const d = diff(a[k], b[k], `${where}.${k}`, inLogprob || k === 'logprobs');
    if (d) return d;
  }
  return null;
}

const PROMPT = 'Once upon a time';
const MSGS = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];

async function same(route, body, what) {
  const n = await askNative(route, body);
  const b = await page.evaluate(([r, q]) => ask(r, q), [route, body]);
  const d = diff(n, b);
  assert.equal(d, null, `${what}: the server and the browser differ at ${d}\nserver: ${JSON.stringify(n).slice(0, 600)}\n` +
    `browser: ${JSON.stringify(b).slice(0, 600)}`);
  return n;
}

test('valid requests: the same answers, streamed and whole', { timeout: 300000 }, async () => {
  const greedy = await same('completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, ignore_eos: true },
    'greedy completion');
  assert.equal(greedy.json.choices[0].finish_reason, 'length');
  const text = greedy.json.choices[0].text;
  // a stop string that occurs in the greedy text: the answer ends before it
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
  const stopped = await same('completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, ignore_eos: true, stop: [stop] },
    'stop string');
  assert.equal(stopped.json.choices[0].finish_reason, 'stop');
  const seeded = await same('completions', { prompt: PROMPT, max_tokens: 8, seed: 42, ignore_eos: true },
    'seeded sampling on the default sampling parameters');
  assert.notEqual(seeded.json.choices[0].text, '', 'sampling produced text');
  await same('completions', { prompt: PROMPT, max_tokens: 6, seed: 7, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } }, 'seeded stream with usage');
  await same('completions', { prompt: PROMPT, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: 3 },
    'completion logprobs (legacy shape)');
  await same('completions', { prompt: PROMPT, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: 0, stream: true },
    'streamed completion logprobs');
  await same('completions', { prompt: PROMPT, max_tokens: 1, temperature: 0, ignore_eos: true }, 'max_tokens 1');
  await same('completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, ignore_eos: true, repetition_penalty: 1.5 },
    'repetition_penalty');
  await same('completions', { prompt: PROMPT, max_tokens: 8, temperature: 0, ignore_eos: true, repeat_penalty: 1.5 },
    'repeat_penalty');
  await same('chat', { messages: MSGS, max_tokens: 8, temperature: 0, ignore_eos: true }, 'greedy chat');
  await same('chat', { messages: MSGS, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } }, 'greedy chat stream');
  await same('chat', { messages: MSGS, max_tokens: 6, seed: 3, ignore_eos: true, stream: true }, 'seeded chat stream');
  await same('chat', { messages: MSGS, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 },
    'chat logprobs');
  await same('chat', { messages: MSGS, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2,
    stream: true }, 'streamed chat logprobs (one chunk before the finish)');
  // structured output: the same grammar-constrained tokens on both sides
  await same('chat', { messages: MSGS, max_tokens: 40, temperature: 0, response_format: { type: 'json_schema',
    json_schema: { name: 'p', schema: { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 99 },
      ok: { type: 'boolean' } }, required: ['n', 'ok'] } } } }, 'response_format json_schema');
  await same('completions', { prompt: PROMPT, max_tokens: 12, seed: 5, grammar: 'root ::= ("yes" | "no") " " [a-z]{1,6}' },
    'seeded grammar');
  // tool calls (ChatML has no call syntax: the generic JSON format), whole and streamed as delta.tool_calls
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object',
    properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'], additionalProperties: false } } }];
  const call = await same('chat', { messages: MSGS, max_tokens: 120, temperature: 0, tools, tool_choice: 'required' },
    'required tool call');
  assert.equal(call.json.choices[0].finish_reason, 'tool_calls');
  await same('chat', { messages: MSGS, max_tokens: 120, temperature: 0, tools, tool_choice: 'required', stream: true },
    'required tool call streamed');
  await same('chat', { messages: [...MSGS, call.json.choices[0].message, { role: 'tool',
    tool_call_id: call.json.choices[0].message.tool_calls[0].id, content: 'sunny' }], max_tokens: 40, temperature: 0, tools },
  'a tool answer, then auto');
  // context_key: the second request reuses the first one's cache, on both sides alike
  const k1 = await same('chat', { messages: MSGS, max_tokens: 4, temperature: 0, ignore_eos: true, context_key: 'conv' },
    'context_key, first');
  const k2 = await same('chat', { messages: [...MSGS, { role: 'assistant', content: k1.json.choices[0].message.content },
    { role: 'user', content: 'More.' }], max_tokens: 4, temperature: 0, ignore_eos: true, context_key: 'conv' },
  'context_key, second');
  assert.ok(k2.json.usage.prompt_tokens_details.cached_tokens > 0, 'the cache was reused');
});

test('invalid requests: the same errors', { timeout: 120000 }, async () => {
  const cases = [
    ['completions', { prompt: PROMPT, frobnicate: 1 }, 'frobnicate'],
    ['completions', { prompt: PROMPT, temperature: 'hot' }, 'temperature'],
    ['completions', { prompt: PROMPT, top_p: 2 }, 'top_p'],
    ['completions', { prompt: PROMPT, max_tokens: 0 }, 'max_tokens'],
    ['completions', { prompt: PROMPT, logprobs: 6 }, 'logprobs'],
    ['completions', { prompt: 5 }, 'prompt'],
    ['completions', { prompt: PROMPT, repeat_penalty: 1.1, repetition_penalty: 1.1 }, 'repetition_penalty'],
    ['completions', { prompt: PROMPT, model: 'gpt-nonexistent' }, 'model'],
    ['chat', { messages: [] }, 'messages'],
    ['chat', { messages: [{ role: 'user', content: 'a\u0000b' }] }, 'messages[0].content'],
    ['chat', { messages: MSGS, top_logprobs: 2 }, 'top_logprobs'],
    ['chat', { messages: MSGS, tool_choice: 'required' }, 'tool_choice'],
    ['chat', { messages: MSGS, tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools[0].function.name'],
    ['chat', { messages: MSGS, stream: 'yes' }, 'stream'],
    ['chat', { messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    ['chat', { messages: MSGS, response_format: { type: 'json_schema', json_schema: { schema: { not: {} } } } }, 'response_format'],
    ['completions', { prompt: PROMPT, grammar: 'root ::= (' }, 'grammar'],
  ];
  for (const [route, body, param] of cases) {
    const n = await same(route, body, `invalid: ${JSON.stringify(body).slice(0, 80)}`);
    assert.ok(n.status >= 400, `refused: ${JSON.stringify(body)}`);
    assert.equal(n.error.param, param);
  }
});
