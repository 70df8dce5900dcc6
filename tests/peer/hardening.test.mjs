// `wgllm serve` under abuse (hardening, issue #15): each case checks the
// status, the OpenAI-shaped JSON error where HTTP can carry one, and that
// /health still answers afterwards. Raw sockets where a client library would
// hide the abuse (early answers, endless uploads, idle connections); hostile
// upstreams are tiny node HTTP servers inside the test; SIGTERM runs on the
// ASan build (build/asan/wgllm, `make MODE=asan`). Loopback only; every
// process and socket is closed at the end.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, MODEL, ROOT, TEMPLATE } from '../../tools/peer/serve.mjs';

const ASAN_BIN = join(ROOT, 'build', 'asan', 'wgllm');
const TMP = mkdtempSync(join(tmpdir(), 'wgllm-hardening-'));
const MSGS = [{ role: 'user', content: 'Tell me a story.' }];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const procs = [];
const closers = [];
after(async () => {
  for (const c of closers) await c();
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  rmSync(TMP, { recursive: true, force: true });
});

/* Starts `wgllm serve` (bin, model and flags chosen by the test) on a free
 * loopback port; resolves with { url, port, proc, log() }. */
function serve(extra = [], { bin = BIN, model = MODEL, env } = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--parallel', '2',
      '--ctx-size', '256', '--threads', '1', '--chat-template', TEMPLATE, ...extra],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
    procs.push(p);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${log}`)), 60000);
    p.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ url: `http://127.0.0.1:${m[1]}`, port: Number(m[1]), proc: p, log: () => log });
      }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${log}`)); });
  });
}

/* Runs `wgllm serve` with flags that must be refused; resolves with { code, err }. */
function serveRefused(extra) {
  return new Promise((resolve) => {
    const p = spawn(BIN, ['serve', '-m', MODEL, '--port', '0', ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
    procs.push(p);
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => resolve({ code, err }));
  });
}

async function post(url, path, body, headers = {}) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* the caller checks */ }
  return { status: r.status, json, text, headers: r.headers };
}

/* An OpenAI error object with the given status (and param/code when given). */
function assertError(r, status, param, code) {
  assert.equal(r.status, status, r.text?.slice(0, 300));
  assert.ok(r.json && typeof r.json.error === 'object', `not an OpenAI error: ${r.text?.slice(0, 300)}`);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  for (const k of ['type', 'param', 'code']) assert.ok(k in r.json.error, `error.${k} missing`);
  if (param !== undefined) assert.equal(r.json.error.param, param, r.json.error.message);
  if (code !== undefined) assert.equal(r.json.error.code, code, r.json.error.message);
}

async function assertHealthy(url) {
  const h = await fetch(`${url}/health`);
  assert.equal(h.status, 200);
  assert.equal((await h.json()).status, 'ok');
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^wgllm_${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `metric ${name} missing`);
  return Number(m[1]);
}

async function waitFor(what, fn, ms = 10000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) assert.fail(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/* One raw HTTP exchange: writes `head` (and then `body` pieces, if given),
 * collects what comes back until the server closes or `ms` pass. Resolves
 * with { status, headers, body, closed, raw }. */
function raw(port, head, { body = [], ms = 5000, endAfter = true } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0), done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const text = data.toString('latin1');
      const m = /^HTTP\/1\.[01] (\d+)/.exec(text);
      const split = text.indexOf('\r\n\r\n');
      const headers = {};
      for (const line of text.slice(0, split < 0 ? 0 : split).split('\r\n').slice(1)) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ status: m ? Number(m[1]) : 0, headers, body: split < 0 ? '' : text.slice(split + 4), closed, raw: text });
    };
    const timer = setTimeout(() => finish(false), ms);
    s.on('data', (d) => { data = Buffer.concat([data, d]); });
    s.on('end', () => finish(true));
    s.on('close', () => finish(true));
    s.on('error', () => finish(true));
    s.on('connect', async () => {
      s.write(head);
      for (const b of body) {
        if (done) break;
        if (typeof b === 'number') await sleep(b); else s.write(b);
      }
      if (endAfter && !done) s.end();
    });
  });
}

/* The body of a chunked response, decoded (enough for JSON errors). */
function dechunk(body) {
  let out = '', rest = body;
  for (;;) {
    const i = rest.indexOf('\r\n');
    if (i < 0) return out || body;
    const n = parseInt(rest.slice(0, i), 16);
    if (!(n > 0)) return out;
    out += rest.slice(i + 2, i + 2 + n);
    rest = rest.slice(i + 2 + n + 2);
  }
}

/* A model file whose tokenizer is `none`: the synthetic tiny-qwen2 with
 * tokenizer.ggml.model "gpt2" turned into "none" (same length); its
 * vocabulary is then qwen2.vocab_size, as llama.cpp reads such a file. */
function noneTokenizerModel() {
  const path = join(TMP, 'none-tokenizer.gguf');
  const r = spawnSync(BIN, ['synth', '--shape', 'tiny-qwen2', '--type', 'q8_0', '--seed', '1', '-o', path]);
  assert.equal(r.status, 0, String(r.stderr));
  const buf = readFileSync(path);
  const key = Buffer.from('tokenizer.ggml.model');
  const k = buf.indexOf(key);
  assert.ok(k > 0);
  const v = k + key.length + 4 + 8; // type u32, string length u64
  assert.equal(buf.toString('latin1', v, v + 4), 'gpt2');
  buf.write('none', v, 'latin1');
  writeFileSync(path, buf);
  return path;
}

// ---- the cases ------------------------------------------------------------

test('a model without a tokenizer: text requests are 400s, the server lives', async () => {
  const s = await serve([], { model: noneTokenizerModel() });
  for (const stream of [false, true]) {
    const r = await post(s.url, '/v1/completions', { prompt: 'hello', max_tokens: 2, stream });
    assertError(r, 400);
    assert.match(r.json.error.message, /no tokenizer/);
    await assertHealthy(s.url);
  }
  assertError(await post(s.url, '/v1/embeddings', { input: 'hello', pooling: 'mean' }), 400);
  assertError(await post(s.url, '/v1/chat/completions', { messages: MSGS, max_tokens: 2 }), 400);
  await assertHealthy(s.url);
});

test('the API key is checked before the body is read; an empty --api-key is refused', async () => {
  const empty = await serveRefused(['--api-key', '']);
  assert.equal(empty.code, 2);
  assert.match(empty.err, /bad value '' for --api-key: an empty key would leave the server open/);
  const s = await serve(['--api-key', 'sekrit']);
  // a body of a megabyte announced and never sent: the 401 comes at once, from the headers alone
  const t0 = Date.now();
  const r = await raw(s.port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    'Content-Length: 1000000\r\n\r\n', { endAfter: false, ms: 5000 });
  assert.ok(Date.now() - t0 < 3000, `the answer waited for the body (${Date.now() - t0} ms)`);
  assertError({ status: r.status, json: JSON.parse(r.body), text: r.raw }, 401, null, 'invalid_api_key');
  assert.equal(r.closed, true);
  // a wrong key, and the GET routes too; /health stays open
  assertError(await post(s.url, '/v1/completions', { prompt: 'x' }, { authorization: 'Bearer sekrit2' }), 401);
  const models = await fetch(`${s.url}/v1/models`);
  assert.equal(models.status, 401);
  await assertHealthy(s.url);
  const ok = await post(s.url, '/v1/completions', { prompt: 'Once', max_tokens: 2 }, { authorization: 'Bearer sekrit' });
  assert.equal(ok.status, 200, ok.text);
});

test('body, header, URL, JSON depth and value limits: 413/431/414/400 in the error shape', async () => {
  const s = await serve();
  const head = (extra = '') => `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}`;
  // an announced body over 8 MiB: refused before it is sent
  const big = await raw(s.port, head('Content-Length: 9437184\r\n\r\n'), { endAfter: false });
  assertError({ status: big.status, json: JSON.parse(big.body), text: big.raw }, 413, null, 'request_too_large');
  await assertHealthy(s.url);
  // headers: too many bytes, too many of them
  const fat = Array.from({ length: 40 }, (_, i) => `X-Pad-${i}: ${'a'.repeat(1000)}\r\n`).join('');
  const r1 = await raw(s.port, head(`${fat}Content-Length: 2\r\n\r\n{}`));
  assertError({ status: r1.status, json: JSON.parse(r1.body), text: r1.raw }, 431, null, 'headers_too_large');
  const many = Array.from({ length: 150 }, (_, i) => `X-H${i}: 1\r\n`).join('');
  const r2 = await raw(s.port, head(`${many}Content-Length: 2\r\n\r\n{}`));
  assertError({ status: r2.status, json: JSON.parse(r2.body), text: r2.raw }, 431, null, 'headers_too_large');
  // past libmicrohttpd's own per-connection memory: an error status (its own page) or a close, never a hang
  const huge = await raw(s.port, head(`X-Huge: ${'b'.repeat(400 << 10)}\r\nContent-Length: 2\r\n\r\n{}`));
  assert.ok(huge.closed || huge.status >= 400, `status ${huge.status}`);
  await assertHealthy(s.url);
  const url = await raw(s.port, `GET /v1/${'u'.repeat(9000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assertError({ status: url.status, json: JSON.parse(url.body), text: url.raw }, 414, null, 'url_too_long');
  // JSON nesting and value count, checked before cJSON builds a tree
  assertError(await post(s.url, '/v1/completions', `{"prompt":"x","stop":${'['.repeat(40)}${']'.repeat(40)}}`), 400,
    null, 'json_too_deep');
  assertError(await post(s.url, '/v1/completions', '{"a":'.repeat(100000)), 400, null, 'json_too_deep');
  assertError(await post(s.url, '/v1/completions', { prompt: 'x', stop: Array(70000).fill(1) }), 400, null,
    'json_too_many_values');
  const bad = Buffer.from('{"prompt":"\xff"}', 'latin1');
  assertError(await post(s.url, '/v1/completions', bad), 400, null, 'invalid_utf8');
  await assertHealthy(s.url);
});

test('request fields are bounded; NaN, infinities and meaningless numbers are 400s naming the field', async () => {
  const s = await serve(['--max-tokens', '1000']);
  const base = { prompt: 'Once upon a time', temperature: 0 };
  const cases = [
    [{ max_tokens: 1001 }, 'max_tokens'],
    [{ max_tokens: 1e9 }, 'max_tokens'],
    [{ max_tokens: 0 }, 'max_tokens'],
    [{ temperature: -1 }, 'temperature'],
    [{ repeat_penalty: 0 }, 'repeat_penalty'],
    [{ repeat_penalty: -1 }, 'repeat_penalty'],
    [{ presence_penalty: 3 }, 'presence_penalty'],
    [{ frequency_penalty: -3 }, 'frequency_penalty'],
    [{ top_p: 1.5 }, 'top_p'],
    [{ n: 1e9 }, 'n'],
    [{ logprobs: 6 }, 'logprobs'],
    [{ stop: Array(17).fill('x') }, 'stop'],
    [{ stop: ['y'.repeat(2000)] }, 'stop'],
    [{ context_key: 'k'.repeat(2000) }, 'context_key'],
    [{ logit_bias: Object.fromEntries(Array.from({ length: 32001 }, (_, i) => [String(i), 1])) }, 'logit_bias'],
  ];
  for (const [extra, param] of cases) {
    const r = await post(s.url, '/v1/completions', { ...base, ...extra });
    assertError(r, 400, param);
  }
  // numbers JSON can only spell as overflowing literals: infinities
  for (const field of ['temperature', 'presence_penalty', 'frequency_penalty', 'repeat_penalty', 'top_p', 'max_tokens']) {
    for (const lit of ['1e999', '-1e999']) {
      const r = await post(s.url, '/v1/completions', `{"prompt":"x","${field}":${lit}}`);
      assertError(r, 400, field);
    }
  }
  assertError(await post(s.url, '/v1/chat/completions', { messages: MSGS, logprobs: true, top_logprobs: 21 }), 400,
    'top_logprobs');
  // a window larger than the context is clamped to it, not allocated
  const r = await post(s.url, '/v1/completions', { ...base, max_tokens: 2, repeat_last_n: 1 << 30 });
  assert.equal(r.status, 200, r.text);
  await assertHealthy(s.url);
});

test('a prompt that cannot fit is refused by its bytes, before it is tokenized', async () => {
  const s = await serve();
  const t0 = Date.now();
  const r = await post(s.url, '/v1/completions', { prompt: 'word '.repeat(1 << 20) }); // 5 MiB
  assertError(r, 400, 'prompt', 'context_length_exceeded');
  assert.match(r.json.error.message, /bytes, so at least \d+ tokens/);
  assert.ok(Date.now() - t0 < 5000);
  const c = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x'.repeat(4 << 20) }] });
  assertError(c, 400, 'messages', 'context_length_exceeded');
  // just over the context in tokens: the tokenizer's count, not the byte bound
  const t = await post(s.url, '/v1/completions', { prompt: 'word '.repeat(300) });
  assertError(t, 400, 'prompt', 'context_length_exceeded');
  assert.match(t.json.error.message, /the prompt has \d+ tokens/);
  await assertHealthy(s.url);
});

test('no generation is unbounded: --context-shift without max_tokens ends after one context', async () => {
  const s = await serve(['--ctx-size', '64', '--context-shift']);
  const r = await post(s.url, '/v1/completions', { prompt: 'Once upon a time', temperature: 0, ignore_eos: true });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, 'length');
  assert.equal(r.json.usage.completion_tokens, 64);
  assert.ok(await metric(s.url, 'context_shifts_total') >= 1);
});

/* Reads an SSE response until `want` data events carried text; resolves with the reader (the stream stays open). */
async function streamUntil(url, path, body, want, signal) {
  const r = await fetch(url + path, { method: 'POST', body: JSON.stringify({ ...body, stream: true }), signal });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  let text = '', got = 0;
  while (got < want) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
    got = (text.match(/"(text|content)":"[^"]/g) || []).length;
  }
  assert.ok(got >= want, `the stream ended before ${want} pieces: ${text.slice(-300)}`);
  return reader;
}

test('a client that disconnects cancels its request: streaming or not, queued or running', async () => {
  // one slot, so that a second request queues; generations that would run for minutes
  const s = await serve(['--parallel', '1', '--ctx-size', '512', '--context-shift', '--max-tokens', '1000000']);
  const long = { prompt: 'Once upon a time', max_tokens: 1000000, ignore_eos: true, temperature: 0 };
  const cancelled = () => metric(s.url, 'requests_cancelled_total');
  const gauge = (name) => metric(s.url, name);
  // running stream A holds the slot
  const acA = new AbortController();
  await streamUntil(s.url, '/v1/completions', long, 2, acA.signal);
  assert.equal(await gauge('active_slots'), 1);
  // queued stream B, queued non-streaming C: each cancelled by its client leaving, while A runs on
  for (const stream of [true, false]) {
    const before = await cancelled();
    const ac = new AbortController();
    const p = fetch(`${s.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ ...long, stream }),
      signal: ac.signal }).then((r) => (stream ? r.body.getReader().read() : r.text())).catch((e) => e);
    await waitFor('the request to queue', async () => (await gauge('queue_depth')) === 1);
    ac.abort();
    await p;
    await waitFor(`the queued ${stream ? 'stream' : 'request'} to be cancelled`, async () => (await cancelled()) === before + 1);
    assert.equal(await gauge('queue_depth'), 0);
    assert.equal(await gauge('active_slots'), 1); // A still runs
  }
  // the running stream A
  let before = await cancelled();
  acA.abort();
  await waitFor('the running stream to be cancelled', async () => (await cancelled()) === before + 1);
  await waitFor('the slot to be free', async () => (await gauge('active_slots')) === 0);
  // a running non-streaming request D
  before = await cancelled();
  const acD = new AbortController();
  const d = fetch(`${s.url}/v1/completions`, { method: 'POST', body: JSON.stringify(long), signal: acD.signal })
    .catch((e) => e);
  await waitFor('D to run', async () => (await gauge('active_slots')) === 1 && (await metric(s.url, 'generated_tokens_total')) > 0);
  acD.abort();
  await d;
  await waitFor('the running request to be cancelled', async () => (await cancelled()) === before + 1);
  await waitFor('the slot to be free', async () => (await gauge('active_slots')) === 0);
  await assertHealthy(s.url);
  const ok = await post(s.url, '/v1/completions', { prompt: 'Once', max_tokens: 2 });
  assert.equal(ok.status, 200);
});

test('connection limits (total, per address) and idle timeouts; a long stream is not dropped', async () => {
  const held = [];
  const hold = (port) => new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    const st = { closed: false, at: 0, t0: Date.now() };
    c.on('close', () => { st.closed = true; st.at = Date.now() - st.t0; });
    c.on('error', () => {});
    c.on('connect', () => resolve({ c, st }));
    held.push(c);
  });
  closers.push(async () => { for (const c of held) c.destroy(); });
  // per address: 3 connections (idle); the 4th is closed at accept
  const s = await serve(['--max-connections-per-ip', '3', '--idle-timeout', '2']);
  const three = [await hold(s.port), await hold(s.port), await hold(s.port)];
  await sleep(200);
  const fourth = await raw(s.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', { ms: 1500 });
  assert.equal(fourth.status, 0, 'a connection over the per-address limit was served');
  assert.equal(fourth.closed, true);
  // the idle ones are closed by the idle timeout (2 s), then the address is served again
  await waitFor('idle connections to be closed', async () => three.every((h) => h.st.closed), 6000);
  for (const h of three) assert.ok(h.st.at >= 1500, `closed after ${h.st.at} ms, before the idle timeout`);
  await assertHealthy(s.url);
  // total: 2 connections
  const t = await serve(['--max-connections', '2', '--max-connections-per-ip', '0']);
  const two = [await hold(t.port), await hold(t.port)];
  await sleep(200);
  const third = await raw(t.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', { ms: 1500 });
  assert.equal(third.status, 0, 'a connection over the total limit was served');
  for (const h of two) h.c.destroy();
  await waitFor('/health once the connections are gone', async () => {
    const r = await raw(t.port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', { ms: 1500 });
    return r.status === 200;
  });
  // a 1 s idle timeout: a stream of several seconds, and a stream queued behind a long request, both complete
  const u = await serve(['--idle-timeout', '1', '--parallel', '1', '--ctx-size', '16384']);
  // the two requests must outlast the idle timeout whatever this machine's speed: a
  // pair that ended within 1.5 s proves nothing, so it is sent again with twice the tokens
  for (let n = 800; ; n *= 2) {
    const t0 = Date.now();
    const whole = post(u.url, '/v1/completions', { prompt: 'Once', max_tokens: n, ignore_eos: true })
      .catch((e) => ({ status: String(e) }));
    await sleep(100);
    const streamed = await fetch(`${u.url}/v1/completions`, { method: 'POST',
      body: JSON.stringify({ prompt: 'Once', max_tokens: n, ignore_eos: true, stream: true }) });
    const text = await streamed.text();
    assert.match(text, /"finish_reason":"length"/);
    assert.match(text, /data: \[DONE\]\n\n$/);
    assert.equal((await whole).status, 200);
    if (Date.now() - t0 > 1500) break;
    assert.ok(n < 6400, `too fast to prove anything (${Date.now() - t0} ms for 2 x ${n} tokens)`);
  }
  await assertHealthy(u.url);
});

test('an upload that never ends is cut off: over the body limit, or past the read deadline', async () => {
  const s = await serve(['--read-timeout', '2']);
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
  // endless 64 KiB chunks: closed once past 8 MiB
  const piece = Buffer.from(`10000\r\n${'x'.repeat(0x10000)}\r\n`);
  let sent = 0;
  const endless = { [Symbol.iterator]: function* () { for (let i = 0; i < 100000; i++) { sent += piece.length; yield piece; if (i % 16 === 15) yield 1; } } };
  const t0 = Date.now();
  const r = await raw(s.port, head, { body: endless, ms: 30000, endAfter: false });
  assert.equal(r.closed, true, 'the endless upload was not cut off');
  assert.ok(sent < 64 << 20, `${sent} bytes went in before the cut`);
  assert.ok(Date.now() - t0 < 20000);
  await assertHealthy(s.url);
  // a trickle: a byte every 300 ms, cut at the 2 s read deadline
  const trickle = { [Symbol.iterator]: function* () { for (let i = 0; i < 200; i++) { yield Buffer.from('1\r\nx\r\n'); yield 300; } } };
  const t1 = Date.now();
  const tr = await raw(s.port, head, { body: trickle, ms: 30000, endAfter: false });
  assert.equal(tr.closed, true);
  const took = Date.now() - t1;
  assert.ok(took >= 1800 && took < 10000, `cut after ${took} ms`);
  await assertHealthy(s.url);
});

test('CORS is off unless --cors; with it, preflight answers what a browser client with a key sends', async () => {
  const preflight = (port, origin) => raw(port, `OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: ${origin}\r\n` +
    'Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n');
  const off = await serve();
  const p0 = await preflight(off.port, 'http://app.example');
  assert.equal(p0.status, 204);
  assert.equal(p0.headers['access-control-allow-origin'], undefined);
  const g0 = await fetch(`${off.url}/v1/models`, { headers: { origin: 'http://app.example' } });
  assert.equal(g0.status, 200);
  assert.equal(g0.headers.get('access-control-allow-origin'), null);
  const s = await serve(['--cors', 'http://app.example,http://other.example', '--api-key', 'k']);
  const p1 = await preflight(s.port, 'http://app.example');
  assert.equal(p1.status, 204); // no key on a preflight: browsers never send one
  assert.equal(p1.headers['access-control-allow-origin'], 'http://app.example');
  assert.match(p1.headers['access-control-allow-methods'], /\bPOST\b/);
  const allowed = p1.headers['access-control-allow-headers'].toLowerCase().split(/\s*,\s*/);
  for (const h of ['authorization', 'content-type']) assert.ok(allowed.includes(h), `${h} not allowed`);
  const p2 = await preflight(s.port, 'http://evil.example');
  assertError({ status: p2.status, json: JSON.parse(dechunk(p2.body)), text: p2.raw }, 403, null, 'cors_origin_not_allowed');
  assert.equal(p2.headers['access-control-allow-origin'], undefined);
  const r = await post(s.url, '/v1/completions', { prompt: 'Once', max_tokens: 2 },
    { origin: 'http://other.example', authorization: 'Bearer k' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://other.example');
  const e = await post(s.url, '/v1/completions', { prompt: 'Once' }, { origin: 'http://other.example' });
  assertError(e, 401);
  assert.equal(e.headers.get('access-control-allow-origin'), 'http://other.example'); // the page can read the error
  const any = await serve(['--cors', '*']);
  const p3 = await preflight(any.port, 'http://whoever.example');
  assert.equal(p3.headers['access-control-allow-origin'], '*');
  await assertHealthy(s.url);
});

/* The exit of a server process: { code, signal } once it ends (or null after ms). */
function exited(proc, ms) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) { resolve({ code: proc.exitCode, signal: proc.signalCode }); return; }
    const t = setTimeout(() => resolve(null), ms);
    proc.on('exit', (code, signal) => { clearTimeout(t); resolve({ code, signal }); });
  });
}

function assertNoSanitizerReport(log) {
  for (const bad of ['AddressSanitizer', 'LeakSanitizer', 'runtime error:', 'heap-use-after-free'])
    assert.ok(!log.includes(bad), `sanitizer report in the server's log:\n${log.slice(-4000)}`);
}

test('SIGTERM: new connections refused, in-flight requests finish, then a clean exit (ASan build)', { timeout: 240000 },
  async () => {
    assert.ok(existsSync(ASAN_BIN), `${ASAN_BIN} is missing: build it with make MODE=asan`);
    // intercept_tls_get_addr=0: see tests/run.sh (the GCC 12 runtime's tracer crash at exit)
    const env = { ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0', UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1' };
    // 1. within the deadline: both in-flight requests complete normally
    const s = await serve(['--shutdown-timeout', '60', '--ctx-size', '512'], { bin: ASAN_BIN, env });
    const req = { prompt: 'Once upon a time', max_tokens: 120, ignore_eos: true, temperature: 0 };
    const whole = post(s.url, '/v1/completions', req);
    const reader = await streamUntil(s.url, '/v1/completions', req, 1);
    await waitFor('both requests to run', async () => (await metric(s.url, 'active_slots')) === 2);
    s.proc.kill('SIGTERM');
    await waitFor('the listening socket to close', () => new Promise((resolve) => {
      const c = net.connect(s.port, '127.0.0.1');
      c.on('connect', () => { c.destroy(); resolve(false); });
      c.on('error', (e) => resolve(e.code === 'ECONNREFUSED'));
    }), 10000);
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    assert.match(text, /"finish_reason":"length"/);
    assert.match(text, /data: \[DONE\]\n\n$/);
    const w = await whole;
    assert.equal(w.status, 200, w.text);
    assert.equal(w.json.usage.completion_tokens, 120);
    const e1 = await exited(s.proc, 60000);
    assert.deepEqual(e1, { code: 0, signal: null }, s.log().slice(-2000));
    assertNoSanitizerReport(s.log());
    assert.match(s.log(), /stopped/);
    // 2. past the deadline: what still runs is cancelled, with a 503 / an error event, and the exit is clean
    const t = await serve(['--shutdown-timeout', '1', '--ctx-size', '512', '--context-shift', '--max-tokens', '1000000'],
      { bin: ASAN_BIN, env });
    const endless = { ...req, max_tokens: 1000000 };
    const w2 = post(t.url, '/v1/completions', endless);
    const r2 = await streamUntil(t.url, '/v1/completions', endless, 1);
    await waitFor('both requests to run', async () => (await metric(t.url, 'active_slots')) === 2);
    const t0 = Date.now();
    t.proc.kill('SIGTERM');
    let text2 = '';
    for (;;) {
      const { value, done } = await r2.read();
      if (done) break;
      text2 += Buffer.from(value).toString();
    }
    assert.match(text2, /data: \{"error":\{[^\n]*"code":"shutting_down"/);
    assert.match(text2, /data: \[DONE\]\n\n$/);
    assertError(await w2, 503, null, 'shutting_down');
    const e2 = await exited(t.proc, 30000);
    assert.deepEqual(e2, { code: 0, signal: null }, t.log().slice(-2000));
    assert.ok(Date.now() - t0 < 15000, `took ${Date.now() - t0} ms to stop`);
    assert.match(t.log(), /cancelling 2 requests/);
    assertNoSanitizerReport(t.log());
  });

/* A hostile OpenAI-compatible upstream: the first path segment picks the abuse. */
async function hostileUpstream() {
  const stats = { bytes: 0, closed: 0 };
  const server = http.createServer(async (req, res) => {
    for await (const _ of req) { /* the request body: ignored */ }
    const mode = req.url.split('/')[1];
    let open = true;
    res.on('close', () => { open = false; stats.closed++; });
    const write = async (s) => {
      stats.bytes += s.length;
      if (!res.write(s)) await new Promise((r) => { res.once('drain', r); res.once('close', r); });
    };
    const sse = () => res.writeHead(200, { 'content-type': 'text/event-stream' });
    if (mode === 'event64') { // one event of 64 MiB that never ends
      sse();
      await write('data: {"choices":[{"delta":{"content":"');
      const mb = 'x'.repeat(1 << 20);
      for (let i = 0; i < 64 && open; i++) await write(mb);
      res.end();
    } else if (mode === 'endless') { // text events for ever
      sse();
      const ev = 'data: {"choices":[{"index":0,"delta":{"content":"la "},"finish_reason":null}]}\n\n';
      for (let i = 0; i < 1e7 && open; i++) await write(ev);
      res.end();
    } else if (mode === 'comments') { // keep-alive comments for ever: no data, no end
      sse();
      const c = `: ${'z'.repeat(1022)}\n\n`;
      for (let i = 0; i < 1e6 && open; i++) await write(c);
      res.end();
    } else if (mode === 'hugejson') { // a JSON answer (not SSE) of 100 MiB, chunked
      res.writeHead(200, { 'content-type': 'application/json' });
      await write('{"choices":[{"message":{"content":"');
      const mb = 'y'.repeat(1 << 20);
      for (let i = 0; i < 100 && open; i++) await write(mb);
      res.end('"},"finish_reason":"stop"}]}');
    } else if (mode === 'announced') { // a Content-Length of 1 GiB
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(1 << 30) });
      await write('{"choices":');
      await sleep(3000);
      res.destroy();
    } else if (mode === 'usage' || mode === 'usagejson') { // absurd usage numbers, as SSE or as one JSON answer
      const usage = '"usage":{"prompt_tokens":1e300,"completion_tokens":-5,"total_tokens":1e308,' +
        '"prompt_tokens_details":{"cached_tokens":1e20}}';
      if (mode === 'usage') {
        sse();
        await write('data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n');
        await write('data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n');
        await write(`data: {"choices":[],${usage}}\n\ndata: [DONE]\n\n`);
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],${usage}}`);
      }
    } else {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"no such abuse"}}');
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));
  return { url: `http://127.0.0.1:${server.address().port}`, stats };
}

test('the gateway bounds what a hostile upstream sends', { timeout: 180000 }, async () => {
  const up = await hostileUpstream();
  const modes = ['event64', 'endless', 'comments', 'hugejson', 'announced', 'usage', 'usagejson'];
  const g = await serve(modes.flatMap((m) => ['--upstream', `${m}=${up.url}/${m}/v1`]));
  const rss = () => {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${g.proc.pid}/status`, 'utf8'));
    return Number(m[1]) << 10;
  };
  const peak0 = rss();
  const chat = (model, extra = {}) => post(g.url, '/v1/chat/completions', { model, messages: MSGS, ...extra });
  // one event of 64 MiB: cut at the event limit (8 MiB), streaming or not
  let t0 = Date.now();
  const e1 = await chat('event64', { stream: true });
  assert.equal(e1.status, 200);
  assert.match(e1.text, /data: \{"error":\{"message":"[^"]*one event larger than 8 MiB/);
  assert.match(e1.text, /data: \[DONE\]/);
  assertError(await chat('event64'), 502);
  assert.ok(Date.now() - t0 < 30000, `${Date.now() - t0} ms`);
  assert.ok(up.stats.bytes < 40 << 20, `the upstream got to send ${up.stats.bytes} bytes`);
  await assertHealthy(g.url);
  // an endless stream of text: ends as "length" once far past max_tokens, streaming or not
  const e2 = await chat('endless', { max_tokens: 5 });
  assert.equal(e2.status, 200, e2.text);
  assert.equal(e2.json.choices[0].finish_reason, 'length');
  assert.ok(e2.json.choices[0].message.content.length <= 3 * (2 * 5 + 16));
  const e3 = await chat('endless', { max_tokens: 5, stream: true });
  assert.match(e3.text, /"finish_reason":"length"/);
  await assertHealthy(g.url);
  // endless keep-alive comments: cut at the stream limit (64 MiB)
  t0 = Date.now();
  const e4 = await chat('comments', { stream: true });
  assert.match(e4.text, /data: \{"error":\{"message":"[^"]*more than 64 MiB/);
  assert.ok(Date.now() - t0 < 60000);
  // a JSON answer of 100 MiB, and one announced as 1 GiB: refused at the body limit
  t0 = Date.now();
  const e5 = await chat('hugejson');
  assertError(e5, 502);
  assert.match(e5.json.error.message, /larger than 64 MiB/);
  const e6 = await chat('announced');
  assertError(e6, 502);
  assert.match(e6.json.error.message, /larger than 64 MiB/);
  assert.ok(Date.now() - t0 < 60000);
  // the gateway's memory never held one of those answers whole
  assert.ok(rss() - peak0 < 160 << 20, `peak RSS grew by ${(rss() - peak0) >> 20} MiB`);
  await assertHealthy(g.url);
  // absurd usage numbers are clamped, never overflowed
  for (const [model, stream] of [['usage', false], ['usage', true], ['usagejson', false], ['usagejson', true]]) {
    const u = await chat(model, stream ? { stream: true, stream_options: { include_usage: true } } : {});
    assert.equal(u.status, 200, u.text);
    const usage = stream ? JSON.parse(/data: (\{[^\n]*"usage":\{"prompt[^\n]*)\n/.exec(u.text)[1]).usage : u.json.usage;
    assert.equal(usage.prompt_tokens, 1 << 30);
    assert.equal(usage.completion_tokens, 0);
    assert.equal(usage.total_tokens, 1 << 30);
    assert.ok(usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens);
  }
  await assertHealthy(g.url);
});

test('web/serve.mjs refuses path traversal and NUL bytes', async () => {
  const { startServer } = await import('../../web/serve.mjs');
  const pub = join(TMP, 'pub');
  const { mkdirSync } = await import('node:fs');
  mkdirSync(pub, { recursive: true });
  mkdirSync(join(TMP, 'pub-secret'), { recursive: true });
  writeFileSync(join(pub, 'ok.txt'), 'fine');
  writeFileSync(join(TMP, 'secret.txt'), 'SECRET');
  writeFileSync(join(TMP, 'pub-secret', 'x.txt'), 'SECRET');
  const srv = await startServer({ mounts: { '/m/': pub } });
  closers.push(() => srv.close());
  const get = (path) => raw(srv.port, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, { endAfter: false });
  assert.equal((await get('/m/ok.txt')).status, 200);
  const attacks = ['/m/../secret.txt', '/m/%2e%2e/secret.txt', '/m/%2E%2E/secret.txt', '/m/..%2fsecret.txt',
    '/m/%2e%2e%2fsecret.txt', '/m/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd', '/m/..%5csecret.txt',
    '/m/..%2fpub-secret%2fx.txt', '/m/%2e%2e%2fpub-secret/x.txt', '/m//etc/passwd', '/m/%2fetc%2fpasswd',
    '/m/ok.txt%00', '/m/%00', '/m/ok%00.txt', '/m/%zz', '//etc/passwd', '/m/.%2e/secret.txt'];
  for (const a of attacks) {
    const r = await get(a);
    assert.ok([400, 403, 404].includes(r.status), `${a}: status ${r.status}`);
    assert.ok(!r.body.includes('SECRET'), `${a} leaked a file`);
    assert.equal((await get('/m/ok.txt')).status, 200, `the server did not survive ${a}`);
  }
});
