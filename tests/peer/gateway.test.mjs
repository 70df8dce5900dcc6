// `wgllm serve --upstream`: a second server forwards requests whose `model`
// names an upstream to the first one (through the C client, libcurl), so the
// official `openai` client gets the same greedy text either way, streaming
// too; plus malformed requests against the gateway (4xx, and it keeps
// serving); tools, tool results and response_format forwarded as given, and
// the upstream's calls (whole, or streamed as OpenAI's deltas) coming back.
// Loopback only; the servers pick free ports and are killed at the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { MODEL, MODEL_ID, CTX, SHARED, OpenAI, startServer, stopServers, readThenAbort } from '../../tools/peer/serve.mjs';

let s1, s2, c1, c2;
before(async () => {
  s1 = await startServer();
  // the gateway serves the same file under another name, so only `model` decides the route
  s2 = await startServer(['--alias', 'gateway-local', '--upstream', `local2=${s1.url}/v1`,
    '--upstream', 'dead=http://127.0.0.1:9/v1']);
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 60000 };
  c1 = new OpenAI({ baseURL: `${s1.url}/v1`, ...opts });
  c2 = new OpenAI({ baseURL: `${s2.url}/v1`, ...opts });
});
after(stopServers);

const MSGS = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];

async function post(body, path = '/v1/chat/completions', headers = {}) {
  const r = await fetch(s2.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* checked by the caller */ }
  return { status: r.status, json, text };
}

test('/v1/models lists the local model and the upstreams', async () => {
  const ids = (await c2.models.list()).data.map((m) => m.id);
  assert.deepEqual(ids, ['gateway-local', 'local2', 'dead']);
});

test('chat through the gateway equals chat on the upstream (greedy), streaming too', async () => {
  const req = { messages: MSGS, max_tokens: 10, temperature: 0, seed: 1 };
  const direct = await c1.chat.completions.create({ ...req, model: MODEL_ID });
  const via = await c2.chat.completions.create({ ...req, model: 'local2' });
  assert.equal(via.model, 'local2');
  assert.equal(via.choices[0].message.content, direct.choices[0].message.content);
  assert.equal(via.choices[0].finish_reason, direct.choices[0].finish_reason);
  assert.equal(via.usage.completion_tokens, direct.usage.completion_tokens);
  assert.equal(via.usage.prompt_tokens, direct.usage.prompt_tokens);
  let streamed = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of await c2.chat.completions.create({ ...req, model: 'local2', stream: true,
    stream_options: { include_usage: true } })) {
    chunks++;
    assert.equal(chunk.model, 'local2');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) streamed += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(streamed, direct.choices[0].message.content);
  assert.equal(finish, direct.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, direct.usage.completion_tokens);
});

test('completions and stop strings through the gateway', async () => {
  const req = { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 };
  const direct = await c1.completions.create({ ...req, model: MODEL_ID });
  const via = await c2.completions.create({ ...req, model: 'local2' });
  assert.equal(via.choices[0].text, direct.choices[0].text);
  let streamed = '';
  for await (const chunk of await c2.completions.create({ ...req, model: 'local2', stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, direct.choices[0].text);
  const full = direct.choices[0].text;
  let cut = Math.floor(full.length / 3);
  while (cut < full.length && !/^[A-Za-z]{2}$/.test(full.slice(cut, cut + 2))) cut++;
  if (cut < full.length) {
    const stop = full.slice(cut, cut + 2);
    const s = await c2.completions.create({ ...req, model: 'local2', stop: [stop] });
    assert.equal(s.choices[0].text, full.slice(0, full.indexOf(stop)));
    assert.equal(s.choices[0].finish_reason, 'stop');
  }
});

test('local-only fields and upstream failures are clear errors', async () => {
  for (const extra of [{ context_key: 'k' }, { top_k: 5 }, { min_p: 0.2 }, { ignore_eos: true }]) {
    const r = await post(JSON.stringify({ model: 'local2', messages: MSGS, max_tokens: 2, ...extra }));
    assert.equal(r.status, 400, r.text);
    assert.ok(r.json.error.message.includes(Object.keys(extra)[0]), r.json.error.message);
    assert.equal(r.json.error.param, Object.keys(extra)[0]);
  }
  const lp = await post(JSON.stringify({ model: 'local2', messages: MSGS, logprobs: true }));
  assert.equal(lp.status, 400);
  assert.equal(lp.json.error.param, 'logprobs');
  // the upstream's own 4xx comes back with its status
  const bad = await post(JSON.stringify({ model: 'local2', messages: MSGS, max_tokens: 2, stop: Array(3).fill('x'),
    logit_bias: { 99999999: 1 } }));
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.json.error.message, /local2/);
  // an unreachable upstream: 502, not a hang or a crash
  const dead = await post(JSON.stringify({ model: 'dead', messages: MSGS, max_tokens: 2 }));
  assert.equal(dead.status, 502, dead.text);
  await assert.rejects(c2.chat.completions.create({ model: 'dead', messages: MSGS, max_tokens: 2 }),
    (e) => e.status === 502);
  // streaming from an unreachable upstream ends with an error event
  const s = await post(JSON.stringify({ model: 'dead', messages: MSGS, max_tokens: 2, stream: true }));
  assert.equal(s.status, 200);
  assert.match(s.text, /data: \{"error"/);
  assert.match(s.text, /data: \[DONE\]/);
  // embeddings go to the upstream, whose own 400 (this model has no pooling of its own) comes back
  const emb = await post(JSON.stringify({ model: 'local2', input: 'x' }), '/v1/embeddings');
  assert.equal(emb.status, 400, emb.text);
  assert.match(emb.json.error.message, /local2.*pooling/);
  // pooling is wgllm's own field: refused by name, not forwarded
  const pool = await post(JSON.stringify({ model: 'local2', input: 'x', pooling: 'mean' }), '/v1/embeddings');
  assert.equal(pool.status, 400, pool.text);
  assert.equal(pool.json.error.param, 'pooling');
  assert.match(pool.json.error.message, /local-only.*local2/);
});

test('malformed requests get 4xx and the gateway keeps serving', async () => {
  const cases = [
    ['{"model": "local2", "messages": [', 'bad JSON'],
    ['[1, 2, 3]', 'not an object'],
    ['"just a string"', 'a JSON string'],
    ['', 'empty body'],
    [JSON.stringify({ model: 'local2', messages: 5 }), 'messages wrong type'],
    [JSON.stringify({ model: 'local2', messages: [{ role: 5, content: 'x' }] }), 'role wrong type'],
    [JSON.stringify({ model: 'local2', messages: [{ role: 'wizard', content: 'x' }] }), 'unknown role'],
    [JSON.stringify({ model: 'local2', messages: MSGS, max_tokens: 'ten' }), 'max_tokens wrong type'],
    [JSON.stringify({ model: 'local2', messages: MSGS, stream: 'yes' }), 'stream wrong type'],
    [JSON.stringify({ model: 'local2', messages: MSGS, stop: [1] }), 'stop wrong type'],
    [JSON.stringify({ model: 'local2', messages: MSGS, temperature: 1e9 }), 'temperature out of range'],
    [JSON.stringify({ model: 'local2', messages: MSGS, bogus_field: true }), 'unknown field'],
    [JSON.stringify({ model: 42, messages: MSGS }), 'model wrong type'],
    [JSON.stringify({ model: 'nope', messages: MSGS }), 'unknown model'],
    ['{"model": "local2", "messages": [{"role": "user", "content": "\\ud800"}]}', 'lone surrogate escape'],
    ['{"a":'.repeat(5000), 'deep nesting'],
  ];
  for (const [body, what] of cases) {
    const r = await post(body);
    assert.ok(r.status >= 400 && r.status < 500, `${what}: ${r.status} ${r.text.slice(0, 200)}`);
    assert.equal(typeof r.json?.error?.message, 'string', `${what}: ${r.text.slice(0, 200)}`);
  }
  // invalid UTF-8 inside a string, aimed at the upstream route
  const raw = Buffer.concat([Buffer.from('{"model":"local2","messages":[{"role":"user","content":"'),
    Buffer.from([0xc3, 0x28, 0xfe]), Buffer.from('"}]}')]);
  const u = await fetch(`${s2.url}/v1/chat/completions`, { method: 'POST', body: raw });
  assert.equal(u.status, 400);
  // a body over the limit, chunked (no Content-Length to refuse it early)
  const big = new ReadableStream({
    start(ctl) {
      ctl.enqueue(new TextEncoder().encode('{"model":"local2","messages":[{"role":"user","content":"'));
      for (let i = 0; i < 10; i++) ctl.enqueue(new Uint8Array(1 << 20).fill(0x61));
      ctl.enqueue(new TextEncoder().encode('"}]}'));
      ctl.close();
    },
  });
  const h = await fetch(`${s2.url}/v1/chat/completions`, { method: 'POST', body: big, duplex: 'half' })
    .catch((e) => ({ status: 'closed', e }));
  assert.ok(h.status === 413 || h.status === 'closed', String(h.status));
  // still serving, locally and through the upstream
  assert.equal((await fetch(`${s2.url}/health`)).status, 200);
  const ok = await c2.chat.completions.create({ model: 'local2', messages: MSGS, max_tokens: 2 });
  assert.equal(ok.choices[0].message.role, 'assistant');
  const ok2 = await c2.chat.completions.create({ model: 'gateway-local', messages: MSGS, max_tokens: 2 });
  assert.equal(ok2.choices.length, 1);
});

test('abandoning a stream at the gateway cancels the request on the upstream', async (t) => {
  // a long-context upstream so the generation (seconds of tokens) outlives the abort
  const up = await startServer(['--ctx-size', '4096']);
  const gwy = await startServer(['--upstream', `long=${up.url}/v1`]);
  const metric = async (name) => Number(new RegExp(`^wgllm_${name} (\\S+)$`, 'm')
    .exec(await (await fetch(`${up.url}/metrics`)).text())[1]);
  const client = new OpenAI({ baseURL: `${gwy.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ model: 'long', messages: MSGS, stream: true,
    max_tokens: 3000, temperature: 0 }, { signal: ac.signal });
  const n = await readThenAbort(stream, ac, 2);
  // ignore_eos is local-only: the model and prompt are fixed (greedy), so a
  // generation that ends before the abort is a change to look at, not a skip
  assert.ok(n >= 2, `the generation ended after ${n} content chunks, before the abort: nothing was cancelled`);
  let cancelled = 0;
  for (let i = 0; i < 100 && cancelled === 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    cancelled = await metric('requests_cancelled_total');
  }
  assert.equal(cancelled, 1);
  assert.ok(await metric('generated_tokens_total') < 3000);
  const ok = await client.chat.completions.create({ model: 'long', messages: MSGS, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

const TOOL_USER = [{ role: 'user', content: 'What is the weather in Paris, and what is 2 + 3?' }];
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', parameters: {
    type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: 0, maximum: 99 } },
    required: ['a', 'b'], additionalProperties: false } } },
];
const callsOf = (m) => (m.tool_calls ?? []).map((c) => [c.type, c.function.name, c.function.arguments]);

test('tools, tool results and response_format reach a wgllm upstream; its calls come back, streamed too', async () => {
  // the tools in Qwen's system prompt need more than the default 256 positions
  const up = await startServer(['--ctx-size', '2048']);
  const gwy = await startServer(['--upstream', `tooly=${up.url}/v1`]);
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 120000 };
  const direct = new OpenAI({ baseURL: `${up.url}/v1`, ...opts });
  const via = new OpenAI({ baseURL: `${gwy.url}/v1`, ...opts });
  let last;
  for (const [seed, tool_choice] of [[1, 'required'], [3, { type: 'function', function: { name: 'add' } }]]) {
    // the same seed and sampler on both sides: the upstream draws the same tokens
    const req = { messages: TOOL_USER, tools: TOOLS, tool_choice, max_tokens: 300, temperature: 1, seed };
    const a = await direct.chat.completions.create({ ...req, model: MODEL_ID });
    const b = await via.chat.completions.create({ ...req, model: 'tooly' });
    assert.equal(a.choices[0].finish_reason, 'tool_calls', JSON.stringify(a.choices[0]));
    assert.equal(b.choices[0].finish_reason, 'tool_calls', JSON.stringify(b.choices[0]));
    assert.equal(b.model, 'tooly');
    assert.deepEqual(callsOf(b.choices[0].message), callsOf(a.choices[0].message));
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    const ids = b.choices[0].message.tool_calls.map((c) => c.id);
    assert.ok(ids.every((id) => /^call_/.test(id)) && new Set(ids).size === ids.length, ids.join());
    if (typeof tool_choice === 'object') assert.ok(b.choices[0].message.tool_calls.every((c) => c.function.name === 'add'));
    // streamed through the gateway, the SDK's helper assembles the same calls
    const full = await via.chat.completions.stream({ ...req, model: 'tooly' }).finalChatCompletion();
    assert.equal(full.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(callsOf(full.choices[0].message), callsOf(a.choices[0].message));
    last = a.choices[0].message;
  }
  // the call and the tool's answer go through the upstream's template: the same prompt there
  const messages = [...TOOL_USER, last, { role: 'tool', tool_call_id: last.tool_calls[0].id, content: '{"value": 5}' }];
  const req = { messages, tools: TOOLS, tool_choice: 'none', max_tokens: 6, temperature: 0 };
  const r1 = await direct.chat.completions.create({ ...req, model: MODEL_ID });
  const r2 = await via.chat.completions.create({ ...req, model: 'tooly' });
  assert.equal(r2.usage.prompt_tokens, r1.usage.prompt_tokens);
  assert.ok(r2.usage.prompt_tokens > 100, 'the tools, the call and its answer were rendered');
  assert.equal(r2.choices[0].message.content, r1.choices[0].message.content);
  // response_format json_schema: the upstream constrains its answer
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 0,
    maximum: 120 } }, required: ['name', 'age'], additionalProperties: false };
  const rf = { messages: TOOL_USER, max_tokens: 120, temperature: 1, seed: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema } } };
  const j1 = await direct.chat.completions.create({ ...rf, model: MODEL_ID });
  const j2 = await via.chat.completions.create({ ...rf, model: 'tooly' });
  assert.equal(j2.choices[0].message.content, j1.choices[0].message.content);
  if (j2.choices[0].finish_reason === 'stop') assert.deepEqual(Object.keys(JSON.parse(j2.choices[0].message.content)), ['name', 'age']);
  // GBNF and the bare json_schema field are local extensions: refused for an upstream, by name
  for (const [param, value] of [['grammar', 'root ::= "a"'], ['json_schema', { type: 'object' }]]) {
    const r = await fetch(`${gwy.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tooly', messages: TOOL_USER, [param]: value }) });
    const e = await r.json();
    assert.equal(r.status, 400, JSON.stringify(e));
    assert.equal(e.error.param, param);
    assert.match(e.error.message, /local-only.*tooly/);
  }
});

/* An upstream that answers as OpenAI's API does: two parallel calls, whole,
 * or streamed with the id and name first and the arguments in pieces; and
 * what it was sent, to compare with what the client gave the gateway. */
async function openaiUpstream() {
  const got = [];
  const calls = [
    { id: 'call_Ab1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 3}' } },
    { id: 'call_Cd2', type: 'function', function: { name: 'add', arguments: '{"a": 2, "b": 3}' } },
  ];
  const server = http.createServer(async (req, res) => {
    let body = '';
    for await (const d of req) body += d;
    const b = JSON.parse(body);
    got.push(b);
    const head = { id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const bad = b.messages[0].content === 'index past the limit';
    if (!b.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...head, object: 'chat.completion', choices: [{ index: 0, finish_reason: 'tool_calls',
        message: { role: 'assistant', content: null, tool_calls: calls } }],
      usage: { prompt_tokens: 20, completion_tokens: 30, total_tokens: 50 } }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const ev = (delta, finish = null) => res.write(`data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta,
      finish_reason: finish }] })}\n\n`);
    ev({ role: 'assistant', content: null });
    calls.forEach((c, i) => {
      const index = bad && i === 1 ? 1000 : i;
      ev({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] });
      const a = c.function.arguments;
      for (let k = 0; k < a.length; k += 5) ev({ tool_calls: [{ index, function: { arguments: a.slice(k, k + 5) } }] });
    });
    ev({}, 'tool_calls');
    res.end('data: [DONE]\n\n');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, got, calls, close: () => server.close() };
}

test("an OpenAI upstream's parallel calls and streamed argument pieces come back whole", async () => {
  const up = await openaiUpstream();
  try {
    const gwy = await startServer(['--upstream', `oai=${up.url}/v1#gpt-x`]);
    const via = new OpenAI({ baseURL: `${gwy.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const rf = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' }, strict: true } };
    const messages = [...TOOL_USER, { role: 'assistant', content: null, tool_calls: [up.calls[1]] },
      { role: 'tool', tool_call_id: 'call_Cd2', content: '5' }];
    const req = { model: 'oai', messages, tools: TOOLS, tool_choice: 'auto', parallel_tool_calls: true,
      response_format: rf, max_tokens: 50 };
    const whole = await via.chat.completions.create(req);
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    assert.equal(whole.choices[0].message.content, null);
    assert.deepEqual(whole.choices[0].message.tool_calls, up.calls);
    // what the upstream was sent: these fields as the client gave them, the endpoint's model name
    const sent = up.got.at(-1);
    assert.equal(sent.model, 'gpt-x');
    for (const k of ['messages', 'tools', 'tool_choice', 'parallel_tool_calls', 'response_format'])
      assert.deepEqual(sent[k], req[k], k);
    const streamed = await via.chat.completions.stream(req).finalChatCompletion();
    assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(streamed.choices[0].message.tool_calls.map(({ id, type, function: f }) => ({ id, type,
      function: { name: f.name, arguments: f.arguments } })), up.calls);
    assert.equal(up.got.at(-1).stream, true);
    // a call index past what the client takes is a clear error at the end of the stream
    const r = await fetch(`${gwy.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'oai', messages: [{ role: 'user', content: 'index past the limit' }], stream: true }) });
    const text = await r.text();
    assert.match(text, /data: \{"error":\{"message":"[^"]*tool call past the 64/);
    assert.equal((await fetch(`${gwy.url}/health`)).status, 200);
  } finally {
    up.close();
  }
});

test("embeddings go to an OpenAI upstream as given and its answer comes back unchanged", async () => {
  // 17 digits, as llama.cpp's server prints them: cJSON's 15-digit rule would change the last bit
  const vec = [-0.07736420631408691, 0.027385389432311058, -0.11487864702939987, 1e-05];
  const got = [];
  const server = http.createServer(async (req, res) => {
    let body = '';
    for await (const d of req) body += d;
    got.push({ url: req.url, body: JSON.parse(body) });
    if (got.at(-1).body.input === 'fail') {
      res.writeHead(422, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"input rejected here","type":"invalid_request_error"}}');
      return;
    }
    if (got.at(-1).body.input === 'garbage') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(got.length % 2 ? '{"data": [0.1, ' : '{"object":"list","embeddings":[]}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[${vec.join(',')}]}],` +
      '"model":"emb-x","usage":{"prompt_tokens":3,"total_tokens":3}}');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const gwy = await startServer(['--upstream', `oemb=http://127.0.0.1:${server.address().port}/v1#emb-x`]);
    const r = await fetch(`${gwy.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'oemb', input: ['a', 'b'], encoding_format: 'float', dimensions: 4, user: 'u1' }) });
    const text = await r.text();
    assert.equal(r.status, 200, text);
    const j = JSON.parse(text);
    assert.equal(j.model, 'oemb');
    assert.deepEqual(j.data[0].embedding, vec);
    assert.deepEqual(j.usage, { prompt_tokens: 3, total_tokens: 3 });
    assert.equal(got.at(-1).url, '/v1/embeddings');
    assert.deepEqual(got.at(-1).body, { input: ['a', 'b'], encoding_format: 'float', dimensions: 4, user: 'u1', model: 'emb-x' });
    // the upstream's own error, status and message
    const f = await fetch(`${gwy.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'oemb', input: 'fail' }) });
    const fj = await f.json();
    assert.equal(f.status, 422, JSON.stringify(fj));
    assert.match(fj.error.message, /oemb.*input rejected here/);
    // an answer that is not JSON, or has no data: 502, naming the upstream
    const bad = [];
    for (let i = 0; i < 2; i++) {
      const g = await fetch(`${gwy.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'oemb', input: 'garbage' }) });
      const gj = await g.json();
      assert.equal(g.status, 502, JSON.stringify(gj));
      bad.push(gj.error.message);
    }
    assert.ok(bad.some((m) => /oemb.*not read as JSON/.test(m)) && bad.some((m) => /oemb.*without a 'data'/.test(m)),
      bad.join(' / '));
    // checked at the gateway before anything is sent
    const n = got.length;
    for (const [body, param] of [[{ model: 'oemb', input: [1, 2] }, 'input'], [{ model: 'oemb', input: 'x', dimensions: 0 },
      'dimensions'], [{ model: 'oemb', input: 'x', bogus: 1 }, 'bogus']]) {
      const e = await fetch(`${gwy.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body) });
      assert.equal(e.status, 400, param);
      assert.equal((await e.json()).error.param, param);
    }
    assert.equal(got.length, n);
  } finally {
    server.close();
  }
});

test("a reasoning upstream's reasoning_content comes back, whole and streamed", async () => {
  // DeepSeek-R1's template opens the <think> block: a random model's answer is reasoning
  const r1 = ['--chat-template', `${SHARED}/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja`];
  const up = await startServer(r1);
  const gwy = await startServer(['--upstream', `think=${up.url}/v1`]);
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 60000 };
  const direct = new OpenAI({ baseURL: `${up.url}/v1`, ...opts });
  const via = new OpenAI({ baseURL: `${gwy.url}/v1`, ...opts });
  const req = { messages: MSGS, max_tokens: 12, temperature: 0 };
  const a = await direct.chat.completions.create({ ...req, model: MODEL_ID });
  const b = await via.chat.completions.create({ ...req, model: 'think' });
  assert.ok(a.choices[0].message.reasoning_content?.length > 0, JSON.stringify(a.choices[0].message));
  assert.equal(b.choices[0].message.reasoning_content, a.choices[0].message.reasoning_content);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  let reasoning = '', content = '';
  for await (const chunk of await via.chat.completions.create({ ...req, model: 'think', stream: true })) {
    for (const c of chunk.choices) {
      reasoning += c.delta?.reasoning_content ?? '';
      content += c.delta?.content ?? '';
    }
  }
  assert.equal(reasoning, a.choices[0].message.reasoning_content);
  assert.equal(content, a.choices[0].message.content);
  // reasoning_format goes to the upstream: "none" keeps the block in its content
  const n = await via.chat.completions.create({ ...req, model: 'think', reasoning_format: 'none' });
  assert.equal(n.choices[0].message.reasoning_content, undefined);
  assert.ok(n.choices[0].message.content.includes(a.choices[0].message.reasoning_content.trim().slice(0, 8)));
});

/* The gateway's wgllm_upstream_* metrics as {`${upstream} ${url}`: {name: value}}. */
async function upstreamMetrics(url) {
  const out = {};
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const m of text.matchAll(/^wgllm_upstream_(\w+?)(?:_total)?\{upstream="([^"]*)",url="([^"]*)"\} (\S+)$/gm))
    (out[`${m[2]} ${m[3]}`] ??= {})[m[1]] = Number(m[4]);
  return out;
}

/* A replica that fails: /500/v1 answers HTTP 500, /cut/v1 streams two pieces and then breaks the connection. */
async function flakyUpstream() {
  const hits = { '500': 0, cut: 0 };
  const server = http.createServer(async (req, res) => {
    for await (const _ of req) { /* the body */ }
    const mode = req.url.split('/')[1];
    hits[mode] = (hits[mode] ?? 0) + 1;
    if (mode === '500') {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"overloaded","type":"server_error"}}');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const piece of ['Once', ' upon'])
      res.write(`data: {"choices":[{"index":0,"delta":{"content":"${piece}"},"finish_reason":null}]}\n\n`);
    setTimeout(() => res.destroy(), 50);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, hits, close: () => server.close() };
}

async function streamText(client, req) {
  let text = '', error = null;
  try {
    for await (const chunk of await client.chat.completions.create({ ...req, stream: true }))
      text += chunk.choices[0]?.delta?.content ?? '';
  } catch (e) { error = e; }
  return { text, error };
}

test('replicas: no connection or a 5xx before the first token goes to the next replica, never after', async () => {
  const flaky = await flakyUpstream();
  try {
    const live = `${s1.url}/v1`;
    const gwy = await startServer(['--upstream-check', '0', '--upstream', `pool=http://127.0.0.1:9/v1,${live}`,
      '--upstream', `p500=${flaky.url}/500/v1,${live}`, '--upstream', `pcut=${flaky.url}/cut/v1,${live}`]);
    const via = new OpenAI({ baseURL: `${gwy.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const req = { messages: MSGS, max_tokens: 8, temperature: 0 };
    const want = (await c1.chat.completions.create({ ...req, model: MODEL_ID })).choices[0].message.content;
    // the first call of each pool goes to its first replica (ties are taken in turn): it fails, the live one answers
    for (const model of ['pool', 'p500']) {
      const r = await via.chat.completions.create({ ...req, model });
      assert.equal(r.choices[0].message.content, want, model);
      assert.equal((await streamText(via, { ...req, model })).text, want, `${model}, streamed`);
    }
    assert.equal(flaky.hits['500'], 1, 'the replica that failed cools down: the next call skips it');
    const m = await upstreamMetrics(gwy.url);
    assert.equal(m['pool http://127.0.0.1:9/v1'].failures, 1);
    assert.equal(m['pool http://127.0.0.1:9/v1'].retries, 1);
    assert.equal(m['pool http://127.0.0.1:9/v1'].cooling, 1);
    assert.equal(m['pool http://127.0.0.1:9/v1'].healthy, 0);
    assert.equal(m[`pool ${live}`].requests, 2);
    assert.equal(m[`p500 ${flaky.url}/500/v1`].failures, 1);
    assert.equal(m[`p500 ${live}`].healthy, 1);
    // a stream that broke after its first pieces is not sent again: the client gets the pieces, then an error
    const cut = await streamText(via, { ...req, model: 'pcut' });
    assert.equal(cut.text, 'Once upon');
    assert.ok(cut.error, 'the stream ended with an error');
    assert.equal(flaky.hits.cut, 1);
    const mc = await upstreamMetrics(gwy.url);
    assert.equal(mc[`pcut ${live}`].requests, 0, 'no retry after pieces reached the client');
    assert.equal(mc[`pcut ${flaky.url}/cut/v1`].retries, 0);
    assert.equal((await streamText(via, { ...req, model: 'pcut' })).text, want, 'the next call skips the cooling replica');
  } finally {
    flaky.close();
  }
});

test('replicas: calls spread by in-flight count; killing one mid-load loses no call that had not started streaming', async () => {
  const a = await startServer(['--parallel', '1', '--ctx-size', '1024']);
  const b = await startServer(['--parallel', '1', '--ctx-size', '1024']);
  // a cooldown longer than the test, however slow the build (ASan) makes it
  process.env.WGLLM_UPSTREAM_TWO_COOLDOWN = '600';
  const gwy = await startServer(['--upstream-check', '0', '--upstream', `two=${a.url}/v1,${b.url}/v1`])
    .finally(() => delete process.env.WGLLM_UPSTREAM_TWO_COOLDOWN);
  const via = new OpenAI({ baseURL: `${gwy.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const req = { model: 'two', messages: MSGS, max_tokens: 300, temperature: 0 };
  const submitted = async (u) => Number(/^wgllm_requests_submitted_total (\S+)$/m.exec(await (await fetch(`${u}/metrics`)).text())[1]);
  // six streams at once: three to each replica (one running, two queued there)
  let firstPiece;
  const sawPiece = new Promise((r) => { firstPiece = r; });
  const runs = Array.from({ length: 6 }, async () => {
    let text = '', error = null;
    try {
      for await (const chunk of await via.chat.completions.create({ ...req, stream: true })) {
        const piece = chunk.choices[0]?.delta?.content ?? '';
        if (piece) { text += piece; firstPiece(); }
      }
    } catch (e) { error = e; }
    return { text, error };
  });
  await sawPiece;
  const [na, nb] = [await submitted(a.url), await submitted(b.url)];
  assert.ok(na >= 1 && nb >= 1, `both replicas got calls (${na}, ${nb})`);
  a.proc.kill('SIGKILL');
  const results = await Promise.all(runs);
  const direct = new OpenAI({ baseURL: `${b.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const full = (await direct.chat.completions.create({ ...req, model: MODEL_ID })).choices[0].message.content;
  for (const r of results) {
    if (r.error) assert.ok(r.text.length > 0, `a call failed before any piece reached it: ${r.error}`);
    else assert.equal(r.text, full);
  }
  assert.ok(results.filter((r) => !r.error).length >= 4, results.map((r) => String(r.error)).join());
  const m = await upstreamMetrics(gwy.url);
  assert.ok(m[`two ${a.url}/v1`].retries >= 1, JSON.stringify(m));
  assert.equal(m[`two ${a.url}/v1`].cooling, 1);
});

test('replicas: health checks end and start cooldowns; keys and timeouts come from the environment', async () => {
  // a port nothing listens on yet
  const probe = http.createServer();
  await new Promise((r) => probe.listen(0, '127.0.0.1', r));
  const port = probe.address().port;
  await new Promise((r) => probe.close(r));
  const keyed = await startServer(['--api-key', 'sesame']);
  process.env.WGLLM_UPSTREAM_KEYED_UP_KEY = 'sesame';
  process.env.WGLLM_UPSTREAM_LATE_COOLDOWN = '600';
  let gwy;
  try {
    gwy = await startServer(['--upstream-check', '1', '--upstream', `late=http://127.0.0.1:${port}/v1`,
      '--upstream', `keyed-up=${keyed.url}/v1`, '--upstream', `nokey=${keyed.url}/v1`]);
  } finally {
    delete process.env.WGLLM_UPSTREAM_KEYED_UP_KEY;
    delete process.env.WGLLM_UPSTREAM_LATE_COOLDOWN;
  }
  const key = `late http://127.0.0.1:${port}/v1`;
  const until = async (cond, what) => {
    for (let i = 0; i < 60; i++) {
      const m = await upstreamMetrics(gwy.url);
      if (cond(m)) return m;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.fail(`${what}: ${JSON.stringify(await upstreamMetrics(gwy.url))}`);
  };
  await until((m) => m[key].failures >= 1 && m[key].cooling === 1 && m[key].healthy === 0, 'a failed check cools it down');
  // it comes up: the next check ends its 600 s cooldown
  const late = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"object":"list","data":[]}');
  });
  await new Promise((r) => late.listen(port, '127.0.0.1', r));
  try {
    await until((m) => m[key].healthy === 1 && m[key].cooling === 0, 'an answered check brings it back');
  } finally {
    late.close();
  }
  const via = new OpenAI({ baseURL: `${gwy.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const r = await via.chat.completions.create({ model: 'keyed-up', messages: MSGS, max_tokens: 2 });
  assert.equal(r.choices.length, 1, 'the key from WGLLM_UPSTREAM_KEYED_UP_KEY reached the upstream');
  await assert.rejects(via.chat.completions.create({ model: 'nokey', messages: MSGS, max_tokens: 2 }), (e) => e.status === 401);
});
