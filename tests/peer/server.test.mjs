// `wgllm serve` against the official `openai` npm client (installed under
// tools/peer) and plain fetch: chat and completions (streaming and not),
// usage with cached tokens, stop strings, length limits, embeddings (float and
// base64), /v1/models, /health, /metrics, /tokenize and /detokenize (against
// llama.cpp's tokenizer), OpenAI-shaped errors, API keys and a client that
// abandons a stream. Loopback only; servers pick a free port
// (--port 0) and are killed at the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { BIN, MODEL, MODEL_ID, CTX, OpenAI, startServer, stopServers } from '../../tools/peer/serve.mjs';
import { loadVocab, tokenizeWith } from '../../tools/peer/peer.mjs';
import { useWebgpuEnv } from '../../tools/peer/wgllm.mjs';

let base, client;
before(async () => {
  ({ url: base } = await startServer());
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(stopServers);

const MSGS = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];

async function post(path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

function assertError(r, status, param, code) {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.equal(typeof r.json.error?.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  assert.ok('type' in r.json.error && 'param' in r.json.error && 'code' in r.json.error);
  if (param !== undefined) assert.equal(r.json.error.param, param, r.json.error.message);
  if (code !== undefined) assert.equal(r.json.error.code, code, r.json.error.message);
}

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = new RegExp(`^wgllm_${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `metric ${name} missing in:\n${text}`);
  return Number(m[1]);
}

test('health, models, metrics', async () => {
  const h = await fetch(`${base}/health`);
  assert.equal(h.status, 200);
  assert.equal((await h.json()).status, 'ok');
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL_ID]);
  const text = await (await fetch(`${base}/metrics`)).text();
  assert.match(text, /# TYPE wgllm_requests_submitted_total counter/);
  assert.ok(await metric('http_requests_total') >= 1);
  assert.equal(await metric('device_sampled_tokens_total'), 0); // the CPU backend samples on the host
});

test('chat: non-streaming and streaming agree (greedy)', async () => {
  const req = { model: MODEL_ID, messages: MSGS, max_tokens: 12, temperature: 0, ignore_eos: true };
  const full = await client.chat.completions.create(req);
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.equal(full.usage.completion_tokens, 12);
  assert.ok(full.usage.prompt_tokens > 10);
  assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + 12);
  const text = full.choices[0].message.content;
  assert.ok(text.length > 0);

  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let streamed = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) streamed += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(streamed, text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);
});

test('completions: text, logprobs, stream', async () => {
  const req = { model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true };
  const r = await client.completions.create({ ...req, logprobs: 1 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (const v of lp.token_logprobs) assert.ok(v <= 0 && Number.isFinite(v));
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...req, prompt: ['Once upon a time'], stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, r.choices[0].text);
});

test('usage reports cached prompt tokens on a repeated prompt with the same context_key', async () => {
  const req = { model: MODEL_ID, messages: MSGS, max_tokens: 4, temperature: 0, context_key: 'conv-1' };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.ok(a.usage.prompt_tokens > 4);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
  assert.ok(b.usage.prompt_tokens_details.cached_tokens < b.usage.prompt_tokens);
  assert.ok(await metric('cache_hits_total') >= 1);
});

test('stop strings end the text before the stop; max_tokens gives finish_reason length', async () => {
  const base_ = { model: MODEL_ID, messages: MSGS, max_tokens: 24, temperature: 0, ignore_eos: true };
  const full = (await client.chat.completions.create(base_)).choices[0].message.content;
  // a stop string of plain ASCII letters taken from the middle of the greedy text
  let cut = Math.floor(full.length / 3);
  while (cut < full.length && !/^[A-Za-z]{3}$/.test(full.slice(cut, cut + 3))) cut++;
  const stop = full.slice(cut, cut + 3);
  assert.equal(stop.length, 3, `no ASCII stop candidate in ${JSON.stringify(full)}`);
  const r = await client.chat.completions.create({ ...base_, stop: [stop, 'never-appears-zzz'] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  const one = await client.chat.completions.create({ ...base_, stop });
  assert.equal(one.choices[0].message.content, r.choices[0].message.content);
  const short = await client.chat.completions.create({ ...base_, max_tokens: 3 });
  assert.equal(short.choices[0].finish_reason, 'length');
  assert.equal(short.usage.completion_tokens, 3);
});

test('sampling fields are accepted and seeded sampling is reproducible', async () => {
  const req = { model: MODEL_ID, messages: MSGS, max_tokens: 8, temperature: 1.0, top_p: 0.9, seed: 42,
    presence_penalty: 0.5, frequency_penalty: 0.5, top_k: 20, min_p: 0.01, repeat_penalty: 1.1, user: 'u1',
    cache_prompt: true, n: 1 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const g = await client.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 3, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const lp = g.choices[0].logprobs.content;
  assert.equal(lp.length, 3);
  assert.equal(lp.map((e) => e.token).join(''), g.choices[0].message.content);
  for (const e of lp) assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
});

test('top_logprobs: chat and completions, streaming and not; top-1 is the greedy choice', async () => {
  const chatReq = { model: MODEL_ID, messages: MSGS, max_tokens: 4, temperature: 0, ignore_eos: true,
    logprobs: true, top_logprobs: 3 };
  const full = await client.chat.completions.create(chatReq);
  const content = full.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k].logprob <= e.top_logprobs[k - 1].logprob);
  }
  let streamedLp = [], text = '';
  for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.logprobs?.content) streamedLp.push(...c.logprobs.content);
  }
  assert.equal(text, full.choices[0].message.content);
  assert.deepEqual(streamedLp, content);
  assertError(await post('/v1/chat/completions', { messages: MSGS, top_logprobs: 2 }), 400, 'top_logprobs');

  const cmplReq = { model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true,
    logprobs: 2 };
  const r = await client.completions.create(cmplReq);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.top_logprobs.length, 4);
  for (let i = 0; i < 4; i++) {
    const alts = Object.entries(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 2);
    assert.equal(alts[0][0], lp.tokens[i]);
    assert.equal(alts[0][1], lp.token_logprobs[i]);
  }
  let sTop = [], sText = '';
  for await (const chunk of await client.completions.create({ ...cmplReq, stream: true })) {
    sText += chunk.choices[0]?.text ?? '';
    if (chunk.choices[0]?.logprobs) sTop.push(...chunk.choices[0].logprobs.top_logprobs);
  }
  assert.equal(sText, r.choices[0].text);
  assert.deepEqual(sTop, lp.top_logprobs);
});

test('logit_bias steers the choice', async () => {
  const req = { model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, ignore_eos: true };
  const plain = await post('/v1/completions', req);
  const b1 = await post('/v1/completions', { ...req, logit_bias: { 1234: 100 } });
  const b2 = await post('/v1/completions', { ...req, logit_bias: { 1234: 50, 1235: 100 } });
  for (const r of [plain, b1, b2]) assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.notEqual(b1.json.choices[0].text, plain.json.choices[0].text);
  assert.notEqual(b2.json.choices[0].text, b1.json.choices[0].text);
  // -100 bans: banning what +100 forced gives the plain greedy text back
  const b3 = await post('/v1/completions', { ...req, logit_bias: { 1234: -100 } });
  assert.equal(b3.json.choices[0].text, plain.json.choices[0].text);
});

test('embeddings: float and base64 decode to the same numbers', async () => {
  const input = ['hello world', 'a second text'];
  const f = await post('/v1/embeddings', { model: MODEL_ID, input, pooling: 'mean', encoding_format: 'float' });
  assert.equal(f.status, 200, JSON.stringify(f.json));
  assert.equal(f.json.data.length, 2);
  const b = await post('/v1/embeddings', { model: MODEL_ID, input, pooling: 'mean', encoding_format: 'base64' });
  assert.equal(b.status, 200);
  for (let i = 0; i < 2; i++) {
    const vf = f.json.data[i].embedding;
    const buf = Buffer.from(b.json.data[i].embedding, 'base64');
    const vb = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
    assert.equal(vb.length, vf.length);
    assert.ok(vf.length > 0);
    for (let k = 0; k < vf.length; k++) assert.equal(vb[k], Math.fround(vf[k]));
    const norm = Math.sqrt(vf.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
  }
  assert.notDeepEqual(f.json.data[0].embedding, f.json.data[1].embedding);
  assert.ok(f.json.usage.prompt_tokens > 0);
  // the official client (asks for base64 and decodes it itself)
  const c = await client.embeddings.create({ model: MODEL_ID, input: 'hello world', pooling: 'mean' });
  assert.deepEqual(c.data[0].embedding.map(Math.fround), f.json.data[0].embedding.map(Math.fround));
  const last = await post('/v1/embeddings', { input: 'hello world', pooling: 'last' });
  assert.equal(last.status, 200);
  assert.notDeepEqual(last.json.data[0].embedding, f.json.data[0].embedding);
  // a generation model without a pooling type: a clear 400 naming the field
  assertError(await post('/v1/embeddings', { input: 'hello' }), 400, 'pooling');
  assertError(await post('/v1/embeddings', { input: [1, 2, 3], pooling: 'mean' }), 400, 'input');
  assertError(await post('/v1/embeddings', { input: 'x', pooling: 'mean', encoding_format: 'hex' }), 400,
    'encoding_format');
});

test('structured output: response_format json_schema / json_object, grammar; bad schemas and grammars are 400s', async () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 },
      tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } },
    required: ['name', 'age'], additionalProperties: false,
  };
  const check = (text) => {
    const v = JSON.parse(text);
    assert.deepEqual(Object.keys(v).filter((k) => !['name', 'age', 'tags'].includes(k)), [], text);
    assert.equal(typeof v.name, 'string');
    assert.ok(v.name.length <= 12, text);
    assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, text);
    if ('tags' in v) assert.ok(Array.isArray(v.tags) && v.tags.length <= 2 && v.tags.every((t) => t === 'a' || t === 'b'), text);
  };
  const response_format = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };
  for (const seed of [0, 1, 2]) {
    const req = { model: MODEL_ID, messages: MSGS, max_tokens: 200, temperature: seed ? 1 : 0, seed, response_format };
    // the SDK's parse() reads message.parsed from the json_schema answer
    const r = await client.chat.completions.parse(req);
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    check(r.choices[0].message.content);
    assert.deepEqual(r.choices[0].message.parsed, JSON.parse(r.choices[0].message.content));
    // streamed: the same text as the whole answer (greedy), chunk by chunk
    if (!seed) {
      let text = '';
      for await (const c of await client.chat.completions.create({ ...req, stream: true })) text += c.choices[0]?.delta?.content ?? '';
      assert.equal(text, r.choices[0].message.content);
    }
  }
  // json_object: any object; on a random model its strings can run to max_tokens (the C test
  // checks such a prefix against the grammar), a finished one must parse
  for (const seed of [1, 2, 3]) {
    const obj = await client.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 48, temperature: 1,
      top_k: 3, seed, response_format: { type: 'json_object' } });
    const text = obj.choices[0].message.content;
    assert.equal(text[0], '{', text);
    assert.ok(['stop', 'length'].includes(obj.choices[0].finish_reason));
    if (obj.choices[0].finish_reason !== 'stop') continue;
    const parsed = JSON.parse(text);
    assert.equal(typeof parsed, 'object');
    assert.ok(!Array.isArray(parsed) && parsed !== null, text);
  }
  const g = await post('/v1/completions', { prompt: 'Answer:', max_tokens: 8, temperature: 0, grammar: 'root ::= "yes" | "no"' });
  assert.equal(g.status, 200);
  assert.ok(['yes', 'no'].includes(g.json.choices[0].text), g.json.choices[0].text);
  const js = await post('/v1/completions', { prompt: 'N:', max_tokens: 8, temperature: 0, json_schema: { type: 'integer', minimum: 3, maximum: 7 } });
  assert.ok([3, 4, 5, 6, 7].includes(JSON.parse(js.json.choices[0].text)), js.json.choices[0].text);
  assertError(await post('/v1/chat/completions', { messages: MSGS, response_format: { type: 'json_schema',
    json_schema: { name: 'x', schema: { type: 'string', format: 'hostname' } } } }), 400, 'response_format', 'invalid_schema');
  assertError(await post('/v1/completions', { prompt: 'x', grammar: 'root ::= ("a"' }), 400, 'grammar', 'invalid_grammar');
  assertError(await post('/v1/chat/completions', { messages: MSGS, response_format: { type: 'yaml' } }), 400, 'response_format');
});

test('errors: OpenAI shape and status', async () => {
  assertError(await post('/v1/chat/completions', '{"messages": ['), 400, null, 'invalid_json');
  assertError(await post('/v1/chat/completions', { model: MODEL_ID }), 400, 'messages');
  assertError(await post('/v1/chat/completions', { messages: 'hi' }), 400, 'messages');
  assertError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 5 }] }), 400,
    'messages[0].content');
  assertError(await post('/v1/chat/completions', { messages: MSGS, temperature: 'hot' }), 400, 'temperature');
  assertError(await post('/v1/chat/completions', { messages: MSGS, max_tokens: -1 }), 400, 'max_tokens');
  assertError(await post('/v1/chat/completions', { messages: MSGS, n: 2 }), 400, 'n');
  assertError(await post('/v1/chat/completions', { messages: MSGS, logit_bias: { abc: 1 } }), 400, 'logit_bias');
  assertError(await post('/v1/chat/completions', { messages: MSGS, frobnicate: 1 }), 400, 'frobnicate');
  // repeat_penalty has WebLLM's spelling too: one field, so both at once is refused
  assertError(await post('/v1/chat/completions', { messages: MSGS, repetition_penalty: 0 }), 400, 'repetition_penalty');
  assertError(await post('/v1/chat/completions', { messages: MSGS, repetition_penalty: 1.1, repeat_penalty: 1.1 }),
    400, 'repetition_penalty');
  const rp = await post('/v1/chat/completions', { messages: MSGS, max_tokens: 2, temperature: 0, repetition_penalty: 1.1 });
  assert.equal(rp.status, 200, JSON.stringify(rp.json));
  // U+0000 cannot reach the engine's C strings: refused there (a prompt takes it: it goes with its length)
  assertError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'a\u0000b' }] }), 400,
    'messages[0].content');
  assertError(await post('/v1/chat/completions', { messages: MSGS, stop: ['a\u0000'] }), 400, 'stop');
  assertError(await post('/v1/chat/completions', '{"messages":[{"role":"user","content":"\\ud800"}]}'), 400, null,
    'invalid_json');
  assertError(await post('/v1/completions', { max_tokens: 2 }), 400, 'prompt');
  assertError(await post('/v1/chat/completions', { model: 'gpt-nonexistent', messages: MSGS }), 404, 'model',
    'model_not_found');
  const long = 'word '.repeat(CTX * 2);
  assertError(await post('/v1/chat/completions', { messages: [{ role: 'user', content: long }] }), 400, 'messages',
    'context_length_exceeded');
  assertError(await post('/v1/completions', { prompt: long, stream: true }), 400, 'prompt', 'context_length_exceeded');
  const r404 = await fetch(`${base}/v1/nothing-here`);
  assert.equal(r404.status, 404);
  assert.ok((await r404.json()).error.message.includes('/v1/nothing-here'));
  // invalid UTF-8 and an oversized body
  const bad = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]) });
  assert.equal(bad.status, 400);
  const huge = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'x'.repeat(9 << 20) }) }).catch((e) => ({ status: 'closed', e }));
  assert.ok(huge.status === 413 || huge.status === 'closed', String(huge.status));
  // the openai client surfaces the same errors as exceptions
  await assert.rejects(client.chat.completions.create({ model: 'gpt-nonexistent', messages: MSGS }),
    (e) => e.status === 404);
  // still serving
  const ok = await client.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('API key: 401 without the right key, 200 with it', async () => {
  const { url } = await startServer(['--api-key', 'sekrit']);
  const body = JSON.stringify({ messages: MSGS, max_tokens: 2 });
  const noKey = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body });
  assert.equal(noKey.status, 401);
  assert.equal((await noKey.json()).error.code, 'invalid_api_key');
  const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 2 }),
    (e) => e.status === 401);
  const right = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sekrit', maxRetries: 0 });
  const r = await right.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 2 });
  assert.equal(r.choices.length, 1);
  assert.equal((await fetch(`${url}/health`)).status, 200);
});

test('a client that abandons a stream cancels its request; the server keeps serving', async () => {
  // its own server with a long context, so that the abandoned generation
  // (seconds of tokens) cannot finish before the server notices
  const { url } = await startServer(['--ctx-size', '4096']);
  const metric = async (name) => Number(new RegExp(`^wgllm_${name} (\\S+)$`, 'm')
    .exec(await (await fetch(`${url}/metrics`)).text())[1]);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const before_ = await metric('requests_cancelled_total');
  assert.equal(before_, 0);
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: MODEL_ID, messages: MSGS, stream: true,
    max_tokens: 3000, ignore_eos: true, temperature: 0 }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      // abort and stop reading: chunks already buffered would otherwise still come out of the iterator
      if (chunk.choices[0]?.delta?.content && ++n === 2) { ac.abort(); break; }
    }
  } catch (e) {
    assert.ok(ac.signal.aborted, String(e)); // the client ends (or throws) only because of the abort
  }
  assert.equal(n, 2);
  let cancelled = before_;
  for (let i = 0; i < 100 && cancelled === before_; i++) {
    await new Promise((r) => setTimeout(r, 50));
    cancelled = await metric('requests_cancelled_total');
  }
  assert.equal(cancelled, before_ + 1);
  assert.ok(await metric('generated_tokens_total') < 3000);
  const ok = await client.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 2 });
  assert.equal(ok.choices[0].message.role, 'assistant');
});

test('a full queue answers 503 in the error shape', async () => {
  const { url } = await startServer(['--max-queue', '0']);
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: MSGS }) });
  assert.equal(r.status, 503);
  const j = await r.json();
  assert.equal(j.error.code, 'queue_full');
  assert.equal((await fetch(`${url}/health`)).status, 200);
});

test('a full context: context_length_exceeded by default, --context-shift goes on', async () => {
  const req = { model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 60, temperature: 0, ignore_eos: true };
  const { url: plain } = await startServer(['--ctx-size', '32']);
  const r = await fetch(`${plain}/v1/completions`, { method: 'POST', body: JSON.stringify(req) });
  assert.equal(r.status, 400);
  const j = await r.json();
  assert.equal(j.error.code, 'context_length_exceeded');
  assert.match(j.error.message, /32 positions.*shifting is off/);
  const { url } = await startServer(['--ctx-size', '32', '--context-shift', '--keep', '2']);
  const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const done = await c.completions.create(req);
  assert.equal(done.choices[0].finish_reason, 'length');
  assert.equal(done.usage.completion_tokens, 60);
  const shifts = /^wgllm_context_shifts_total (\S+)$/m.exec(await (await fetch(`${url}/metrics`)).text());
  assert.ok(Number(shifts[1]) >= 2);
});

test('--backend webgpu serves the same greedy text as the CPU server (SwiftShader here)', { timeout: 120000 }, async () => {
  useWebgpuEnv();
  let gpu;
  try {
    gpu = await startServer(['--backend', 'webgpu']);
  } catch (e) {
    if (process.env.WGLLM_REQUIRE_WEBGPU) throw e;
    return; // no WebGPU here and none required
  }
  const req = { prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true };
  const want = (await post('/v1/completions', req)).json;
  const r = await fetch(`${gpu.url}/v1/completions`, { method: 'POST', body: JSON.stringify(req) });
  assert.equal(r.status, 200);
  const got = await r.json();
  assert.equal(got.choices[0].text, want.choices[0].text);
  assert.equal(got.usage.completion_tokens, 8);
  const bad = await new Promise((resolve) => {
    const p = spawn(BIN, ['serve', '-m', MODEL, '--backend', 'metal'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => resolve({ code, err }));
  });
  assert.equal(bad.code, 2);
  assert.match(bad.err, /unknown backend 'metal'/);
});

test("/tokenize and /detokenize: llama.cpp server's routes, llama.cpp's tokens", async () => {
  const vocab = await loadVocab(MODEL);
  for (const [content, addSpecial, parseSpecial] of [['Hello world, héllo 😀!', false, true], ['<s>x</s> y', true, true],
    ['<s>x</s> y', false, false], ['', true, true]]) {
    const r = await post('/tokenize', { content, add_special: addSpecial, parse_special: parseSpecial });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(r.json.tokens, Array.from(tokenizeWith(vocab, content, { addSpecial, parseSpecial })), content);
  }
  // the defaults are llama.cpp server's: no BOS, specials parsed
  const d = await post('/tokenize', { content: '<s>x' });
  assert.deepEqual(d.json.tokens, Array.from(tokenizeWith(vocab, '<s>x', { addSpecial: false, parseSpecial: true })));
  // pieces: a string when whole UTF-8, else the bytes
  const p = await post('/tokenize', { content: 'ab 😀', with_pieces: true });
  assert.ok(p.json.tokens.every((t) => Number.isInteger(t.id) && (typeof t.piece === 'string' || Array.isArray(t.piece))));
  const bytes = Buffer.concat(p.json.tokens.map((t) => (typeof t.piece === 'string' ? Buffer.from(t.piece) : Buffer.from(t.piece))));
  assert.equal(bytes.toString().trimStart(), 'ab 😀');
  // round trip
  const t = await post('/tokenize', { content: 'Once upon a time, 1234.' });
  const back = await post('/detokenize', { tokens: t.json.tokens });
  assert.equal(back.status, 200);
  assert.equal(back.json.content.trimStart(), 'Once upon a time, 1234.');
  // refusals name the field
  assertError(await post('/tokenize', { text: 'x' }), 400, 'text');
  assertError(await post('/tokenize', { content: 5 }), 400, 'content');
  assertError(await post('/detokenize', { tokens: [1, 1e9] }), 400, 'tokens');
  assertError(await post('/detokenize', { tokens: [1.5] }), 400, 'tokens');
  assertError(await post('/detokenize', { tokens: 'abc' }), 400, 'tokens');
  assertError(await post('/detokenize', '{"tokens": ['), 400, null, 'invalid_json');
});
