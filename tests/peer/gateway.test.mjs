// `wgllm serve --upstream`: a second server forwards requests whose `model`
// names an upstream to the first one (through the C client, libcurl), so the
// official `openai` client gets the same greedy text either way, streaming
// too; plus malformed requests against the gateway (4xx, and it keeps
// serving). Loopback only; both servers pick free ports and are killed at the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, MODEL_ID, CTX, OpenAI, startServer, stopServers } from '../../tools/peer/serve.mjs';

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
  const emb = await post(JSON.stringify({ model: 'local2', input: 'x' }), '/v1/embeddings');
  assert.equal(emb.status, 400);
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
  let n = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content && ++n === 2) ac.abort();
    }
  } catch (e) {
    assert.ok(ac.signal.aborted, String(e));
  }
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
