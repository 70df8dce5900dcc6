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
 * tokenizer.ggml.model "gpt2" turned into "none" (same length) and its
 * (tied) token embedding resized to the vocabulary it then has: 0 rows. */
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
  const name = Buffer.from('token_embd.weight');
  const t = buf.indexOf(Buffer.concat([Buffer.from([name.length, 0, 0, 0, 0, 0, 0, 0]), name]));
  assert.ok(t > 0);
  const dims = t + 8 + name.length;
  assert.equal(buf.readUInt32LE(dims), 2);
  buf.writeBigUInt64LE(0n, dims + 4 + 8); // ne[1] = n_vocab
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
