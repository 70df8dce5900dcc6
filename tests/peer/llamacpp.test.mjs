// `wgllm serve --upstream` in front of a real llama.cpp server: llama-server
// built from the source node-llama-cpp ships (tools/llamacpp/build.sh, cached),
// on the same synthetic model. The official `openai` client gets through the
// gateway what it gets from llama-server directly: chat, completions and
// embeddings (greedy: the same tokens), streamed too; llama-server's errors
// keep their status and message; a stream the client abandons at the gateway
// is cancelled on llama-server.
// Loopback only; the servers pick free ports and are killed at the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { MODEL, MODEL_ID, TEMPLATE, ROOT, OpenAI, startServer, stopServers, readThenAbort } from '../../tools/peer/serve.mjs';

const procs = [];

/* Starts llama-server on the tiny model; resolves with its base URL. */
function startLlama(bin, extra = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(join(bin, 'llama-server'), ['-m', MODEL, '--host', '127.0.0.1', '--port', '0', '-c', '1024',
      '-np', '2', '-t', '1', '--jinja', '--chat-template-file', TEMPLATE, '--no-webui', '--metrics', ...extra],
    { stdio: ['ignore', 'ignore', 'pipe'] });
    procs.push(p);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`llama-server did not start: ${log.slice(-2000)}`)), 60000);
    p.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`llama-server exited ${code}: ${log.slice(-2000)}`)); });
  });
}

let llama, llamaEmb, gwy, direct, directEmb, via;
before(async () => {
  const b = spawnSync('bash', [join(ROOT, 'tools/llamacpp/build.sh'), 'llama-server'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 1800000 });
  assert.equal(b.status, 0, 'tools/llamacpp/build.sh llama-server failed');
  const bin = b.stdout.trim().split('\n').at(-1);
  // --embeddings restricts a llama-server to embeddings: a second one serves them
  [llama, llamaEmb] = await Promise.all([startLlama(bin), startLlama(bin, ['--embeddings', '--pooling', 'mean'])]);
  gwy = await startServer(['--upstream', `lc=${llama}/v1`, '--upstream', `lcemb=${llamaEmb}/v1`]);
  const opts = { apiKey: 'unused', maxRetries: 0, timeout: 120000 };
  direct = new OpenAI({ baseURL: `${llama}/v1`, ...opts });
  directEmb = new OpenAI({ baseURL: `${llamaEmb}/v1`, ...opts });
  via = new OpenAI({ baseURL: `${gwy.url}/v1`, ...opts });
});
after(() => {
  for (const p of procs) p.kill('SIGKILL');
  stopServers();
});

const MSGS = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];
// The byte tokens <0x80>..<0xFF> of the tiny model's SentencePiece vocabulary
// (ids 131..258): a random model draws them where a real one completes a
// character, and llama-server answers 500 ("does not match the expected ...
// format") for text that is not UTF-8. Banned on both sides alike.
const logit_bias = Object.fromEntries(Array.from({ length: 128 }, (_, i) => [String(131 + i), -100]));

async function chatStream(client, req) {
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true,
    stream_options: { include_usage: true } })) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

test('chat through the gateway equals chat on llama-server (greedy), streamed too', async () => {
  const req = { messages: MSGS, max_tokens: 12, temperature: 0, seed: 1, logit_bias };
  const a = await direct.chat.completions.create({ ...req, model: MODEL_ID });
  const b = await via.chat.completions.create({ ...req, model: 'lc' });
  assert.ok(a.choices[0].message.content.length > 0, JSON.stringify(a));
  assert.equal(b.model, 'lc');
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.choices[0].finish_reason, a.choices[0].finish_reason);
  assert.deepEqual([b.usage.prompt_tokens, b.usage.completion_tokens], [a.usage.prompt_tokens, a.usage.completion_tokens]);
  const sa = await chatStream(direct, { ...req, model: MODEL_ID });
  const sb = await chatStream(via, { ...req, model: 'lc' });
  assert.equal(sa.text, a.choices[0].message.content, 'llama-server streams what it answers whole');
  assert.equal(sb.text, sa.text);
  assert.equal(sb.finish, sa.finish);
  assert.ok(sb.chunks >= 3, String(sb.chunks));
  assert.equal(sb.usage.completion_tokens, sa.usage.completion_tokens);
  assert.equal(sb.usage.prompt_tokens, sa.usage.prompt_tokens);
  // sampled at a temperature: the seed reaches llama-server, the same draw both ways
  const hot = { messages: MSGS, max_tokens: 12, temperature: 1, seed: 7, logit_bias };
  const ha = await direct.chat.completions.create({ ...hot, model: MODEL_ID });
  const hb = await via.chat.completions.create({ ...hot, model: 'lc' });
  assert.equal(hb.choices[0].message.content, ha.choices[0].message.content);
});

// llama.cpp server's return_progress: a stream tells how far the prompt has been read. wgllm
// serving the model itself (the gateway's local model) against llama-server on the same prompt.
async function progressStream(client, req) {
  const progress = [], kinds = [];
  let text = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true, return_progress: true })) {
    if (chunk.prompt_progress) {
      progress.push(chunk.prompt_progress);
      kinds.push('progress');
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.deepEqual(chunk.choices.map((c) => c.delta?.content ?? null), chunk.choices.map(() => null));
    }
    const piece = chunk.choices.map((c) => c.delta?.content ?? '').join('');
    if (piece) kinds.push('text');
    text += piece;
  }
  return { progress, kinds, text };
}

test("return_progress: prompt_progress chunks as llama-server sends them, before the first token", async () => {
  const long = Array.from({ length: 12 }, (_, i) => `Line ${i}: the river runs past the mill.`).join(' ');
  const req = { messages: [{ role: 'user', content: long }], max_tokens: 4, temperature: 0, logit_bias };
  const a = await progressStream(direct, { ...req, model: MODEL_ID });
  const b = await progressStream(via, { ...req, model: MODEL_ID });
  assert.ok(a.progress.length >= 1, 'llama-server sent no prompt_progress');
  assert.ok(b.progress.length >= 1, 'wgllm sent no prompt_progress');
  for (const { progress, kinds } of [a, b]) {
    assert.ok(kinds.lastIndexOf('progress') < kinds.indexOf('text'), kinds.join(','));
    for (const p of progress) assert.deepEqual(Object.keys(p).sort(), ['cache', 'processed', 'time_ms', 'total']);
    const last = progress.at(-1);
    assert.equal(last.processed, last.total);
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].processed >= progress[i - 1].processed);
  }
  assert.equal(b.progress.at(-1).total, a.progress.at(-1).total, 'the same prompt tokens');
  assert.equal(b.text, a.text);
  // without return_progress, none
  let any = false;
  for await (const chunk of await via.chat.completions.create({ ...req, model: MODEL_ID, stream: true }))
    any ||= 'prompt_progress' in chunk;
  assert.equal(any, false);
});

test('completions through the gateway equal llama-server\'s, streamed and with stop strings', async () => {
  const req = { prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logit_bias };
  const a = await direct.completions.create({ ...req, model: MODEL_ID });
  const b = await via.completions.create({ ...req, model: 'lc' });
  assert.ok(a.choices[0].text.length > 0, JSON.stringify(a));
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.equal(b.choices[0].finish_reason, a.choices[0].finish_reason);
  assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  let streamed = '';
  for await (const chunk of await via.completions.create({ ...req, model: 'lc', stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, a.choices[0].text);
  const full = a.choices[0].text;
  const cut = full.slice(Math.floor(full.length / 2)).search(/\S\S/) + Math.floor(full.length / 2);
  if (cut >= Math.floor(full.length / 2)) {
    const stop = full.slice(cut, cut + 2);
    const sa = await direct.completions.create({ ...req, model: MODEL_ID, stop: [stop] });
    const sb = await via.completions.create({ ...req, model: 'lc', stop: [stop] });
    assert.equal(sb.choices[0].text, sa.choices[0].text);
    assert.equal(sb.choices[0].finish_reason, 'stop');
  }
});

test('embeddings through the gateway equal llama-server\'s, float and base64', async () => {
  const input = ['Once upon a time', 'there was a cat'];
  const a = await directEmb.embeddings.create({ model: MODEL_ID, input, encoding_format: 'float' });
  const b = await via.embeddings.create({ model: 'lcemb', input, encoding_format: 'float' });
  assert.equal(a.data.length, 2);
  assert.equal(b.model, 'lcemb');
  assert.deepEqual(b.data.map((d) => [d.index, d.embedding]), a.data.map((d) => [d.index, d.embedding]));
  assert.deepEqual(b.usage, a.usage);
  // the SDK asks for base64 by default and decodes it (llama-server's base64 holds its
  // float32 values, which may differ from its float answer in the last bit)
  const c = await directEmb.embeddings.create({ model: MODEL_ID, input });
  const d = await via.embeddings.create({ model: 'lcemb', input });
  assert.deepEqual(d.data.map((x) => x.embedding), c.data.map((x) => x.embedding));
  c.data[0].embedding.forEach((v, i) => assert.ok(Math.abs(v - a.data[0].embedding[i]) < 1e-6, `${i}: ${v}`));
});

test("llama-server's errors keep their status and message through the gateway", async () => {
  const post = async (url, path, body) => {
    const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body) });
    return { status: r.status, json: await r.json() };
  };
  // a prompt longer than a slot's context: llama-server's 400
  const long = { messages: [{ role: 'user', content: 'word '.repeat(5000) }], max_tokens: 4, logit_bias };
  const a = await post(llama, '/v1/chat/completions', { ...long, model: MODEL_ID });
  const b = await post(gwy.url, '/v1/chat/completions', { ...long, model: 'lc' });
  assert.ok(a.status >= 400 && a.status < 500, JSON.stringify(a));
  assert.equal(b.status, a.status, JSON.stringify(b));
  assert.ok(b.json.error.message.includes(a.json.error.message), `${b.json.error.message} / ${a.json.error.message}`);
  // embeddings from the generating server: llama-server's 501
  const ea = await post(llama, '/v1/embeddings', { model: MODEL_ID, input: 'x' });
  const eb = await post(gwy.url, '/v1/embeddings', { model: 'lc', input: 'x' });
  assert.equal(ea.status, 501, JSON.stringify(ea));
  assert.equal(eb.status, 501, JSON.stringify(eb));
  assert.ok(eb.json.error.message.includes(ea.json.error.message), eb.json.error.message);
  // streamed: the error ends the stream
  const r = await fetch(`${gwy.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...long, model: 'lc', stream: true }) });
  const text = await r.text();
  assert.ok(text.includes(a.json.error.message), text);
  assert.match(text, /data: \[DONE\]/);
});

/* llama-server's /metrics value `name` (llamacpp:name). */
async function llamaMetric(name) {
  const text = await (await fetch(`${llama}/metrics`)).text();
  const m = new RegExp(`^llamacpp:${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `no llamacpp:${name} in ${text}`);
  return Number(m[1]);
}

test('abandoning a stream at the gateway cancels it on llama-server', async () => {
  // what the whole generation would be: to the end of the slot's context (the model's 512)
  const whole = await direct.chat.completions.create({ model: MODEL_ID, messages: MSGS, max_tokens: 3000,
    temperature: 0, logit_bias });
  assert.equal(whole.choices[0].finish_reason, 'length');
  const full = whole.usage.completion_tokens;
  const before = await llamaMetric('tokens_predicted_total');
  const ac = new AbortController();
  const stream = await via.chat.completions.create({ model: 'lc', messages: MSGS, stream: true, max_tokens: 3000,
    temperature: 0, logit_bias }, { signal: ac.signal });
  const n = await readThenAbort(stream, ac, 2);
  assert.ok(n >= 2, `the generation ended after ${n} content chunks, before the abort: nothing was cancelled`);
  let busy = 1;
  for (let i = 0; i < 100 && busy > 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    busy = await llamaMetric('requests_processing');
  }
  assert.equal(busy, 0, 'llama-server still generates for the abandoned stream');
  const predicted = await llamaMetric('tokens_predicted_total') - before;
  console.log(`llama-server generated ${predicted} of ${full} tokens for the abandoned stream`);
  assert.ok(predicted < full / 2, `llama-server generated ${predicted} of the ${full} tokens`);
  const ok = await via.chat.completions.create({ model: 'lc', messages: MSGS, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});
