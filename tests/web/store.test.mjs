// store.test.mjs - the browser model store (web/src/store.js) in headless
// Chromium: a synthetic model split by `wgllm split` into 3 shards loads over
// HTTP with progress into OPFS and generates the same greedy text as native
// `wgllm run` on the same file; after a reload it loads from OPFS with no new
// download of its shards; a download cut on the 2nd shard resumes without
// fetching shard 1 again; picked Files (the shards) load on the page; a
// corrupt file gives a clear error; listModels/deleteModel. Range reads of a
// URL keep a window of requests in flight; a remote file that changed (ETag,
// size) is downloaded again, never mixed with stored shards; quota errors name
// the bytes needed and available. The server counts every shard request. Run
// through tests/web/run.sh (builds what is missing).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(root, 'web', 'package.json'));
const { chromium } = require('playwright-core');
const { startServer } = await import(path.join(root, 'web', 'serve.mjs'));

const WGLLM = path.join(root, 'build', 'release', 'wgllm');
const PROMPT = 'Once upon a time';
const FLAGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan',
  '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wgllm-store-'));
const whole = path.join(dir, 'whole.gguf');
const SHARDS = ['tiny-00001-of-00003.gguf', 'tiny-00002-of-00003.gguf', 'tiny-00003-of-00003.gguf'];
const FIRST = `/m/${SHARDS[0]}`;
const q4 = path.join(dir, 'q4.gguf');
const seed2 = path.join(dir, 'seed2.gguf');
const mibs = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;

let server, browser, page;
const pageErrors = [];
const pageWarnings = [];
const requests = new Map(); // file name -> GET count
let dropOnce = null; // file name whose next GET is cut half-way
let wantNative = '';

const count = (name) => requests.get(name) || 0;
let rangeRequests = 0;

// Serves dir under /m/ (counting GETs; cutting one response when asked); the rest is web/serve.mjs's.
// It ignores Range headers (answers 200 with the whole file), as some servers do; range
// requests (the probe of core.js for streamed weights, the store's check of stored shards)
// are counted apart. /r/NAME serves the same files answering ranges, after rangeDelay ms,
// and counts the range requests in flight at once. /c/NAME serves versions[NAME] (a file
// the test swaps), ignoring ranges, with its ETag.
let rangeDelay = 0;
const ranged = { count: 0, inFlight: 0, maxInFlight: 0 };
const versions = new Map(); // name -> path of the file served as /c/NAME now
let rangeFault = null; // {after, swap: a file | undefined}: /r/ range requests after `after` of them get a 500, or that file

function hook(req, res, headers) {
  const u = new URL(req.url, 'http://x');
  const top = u.pathname.slice(0, 3);
  if (top !== '/m/' && top !== '/r/' && top !== '/c/') return false;
  const name = path.basename(decodeURIComponent(u.pathname));
  const file = top === '/c/' ? versions.get(name) : path.join(dir, name);
  if (!file || !fs.existsSync(file)) { res.writeHead(404, headers); res.end('not found'); return true; }
  const data = fs.readFileSync(file);
  const st = fs.statSync(file);
  const tag = { ETag: `"${st.size}-${Math.floor(st.mtimeMs)}-${st.ino}"`, 'Last-Modified': st.mtime.toUTCString() };
  const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range || '');
  if (top === '/r/' && range) {
    ranged.count++;
    ranged.maxInFlight = Math.max(ranged.maxInFlight, ++ranged.inFlight);
    let body = data;
    let etc = tag;
    const fault = rangeFault && ranged.count > rangeFault.after ? rangeFault : null;
    if (fault && fault.swap) { // the file changed on the server
      const st2 = fs.statSync(fault.swap);
      body = fs.readFileSync(fault.swap);
      etc = { ETag: `"${st2.size}-${Math.floor(st2.mtimeMs)}-${st2.ino}"`, 'Last-Modified': st2.mtime.toUTCString() };
    }
    const a = Number(range[1]);
    const b = Math.min(Number(range[2]), body.length - 1);
    // In flight until its answer starts (or the client goes away): counted down before the
    // answer is written, since a client can read it and send its next request before the
    // server's end callback runs (on a loaded machine, a serial reader then looks like two).
    let open = true;
    const done = () => { if (open) { open = false; ranged.inFlight--; } };
    setTimeout(() => {
      if (!open) return; // the client went away during the delay
      done();
      if (fault && !fault.swap) { res.writeHead(500, headers); res.end('broken'); return; }
      if (a > b) {
        res.writeHead(416, { ...headers, ...etc, 'Content-Range': `bytes */${body.length}` });
        res.end();
        return;
      }
      res.writeHead(206, { ...headers, ...etc, 'Content-Type': 'application/octet-stream', 'Content-Length': b - a + 1,
        'Content-Range': `bytes ${a}-${b}/${body.length}` });
      res.end(body.subarray(a, b + 1));
    }, rangeDelay);
    res.on('close', done);
    return true;
  }
  if (req.headers.range) rangeRequests++;
  else requests.set(name, count(name) + 1);
  res.writeHead(200, { ...headers, ...tag, 'Content-Type': 'application/octet-stream', 'Content-Length': data.length });
  if (dropOnce === name && !req.headers.range) {
    dropOnce = null;
    res.write(data.subarray(0, data.length >> 1), () => setTimeout(() => res.socket.destroy(), 50));
    return true;
  }
  res.end(data);
  return true;
}

function nativeText(model, n) {
  const out = execFileSync(WGLLM, ['run', '-m', model, '-p', PROMPT, '-n', String(n), '-t', '1', '--ignore-eos'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30000 });
  assert.ok(out.startsWith(PROMPT), `native output starts with the prompt: ${JSON.stringify(out)}`);
  return out.slice(PROMPT.length).replace(/\n$/, '');
}

// Native greedy text on WebGPU (SwiftShader) from the split model, streaming its weights.
function nativeGpuText(n) {
  const env = { VK_ICD_FILENAMES: '/usr/lib/chromium/vk_swiftshader_icd.json', XDG_RUNTIME_DIR: '/tmp', ...process.env };
  const out = execFileSync(WGLLM, ['run', '-m', path.join(dir, SHARDS[0]), '-p', PROMPT, '-n', String(n), '-t', '1',
    '--ignore-eos', '--backend', 'webgpu', '--stream-weights'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60000, env });
  return out.slice(PROMPT.length).replace(/\n$/, '');
}

async function freshPage() {
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'warning') pageWarnings.push(m.text());
    if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text());
  });
  await page.goto(`${server.url}/blank.html`);
  assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'the page is cross-origin isolated');
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
}

// Loads `model` in a worker engine, generates 8 greedy tokens, unloads.
// Resolves to {events, info, text} or {error}.
const loadAndRun = (model) => page.evaluate(async ({ model, prompt }) => {
  const events = [];
  try {
    const e = await wgllm.createWorkerEngine({ model, onProgress: (p) => events.push(p) });
    const r = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { events, info, text: r.choices[0].text };
  } catch (e) {
    return { events, error: e.message };
  }
}, { model, prompt: PROMPT });

before(async () => {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'store.js')), 'web/dist is built (make wasm)');
  execFileSync(WGLLM, ['synth', '--shape', 'tiny', '--type', 'q8_0', '-o', whole], { stdio: 'ignore' });
  execFileSync(WGLLM, ['split', whole, path.join(dir, 'tiny'), '--split-max-size', '4M'], { stdio: 'ignore' });
  for (const s of SHARDS) assert.ok(fs.existsSync(path.join(dir, s)), `wgllm split wrote ${s}`);
  assert.ok(!fs.existsSync(path.join(dir, 'tiny-00001-of-00004.gguf')));
  wantNative = nativeText(path.join(dir, SHARDS[0]), 8);
  // other versions of a remote file: another size (q4_0), the same size with other weights (seed 2, split)
  execFileSync(WGLLM, ['synth', '--shape', 'tiny', '--type', 'q4_0', '-o', q4], { stdio: 'ignore' });
  execFileSync(WGLLM, ['synth', '--shape', 'tiny', '--type', 'q8_0', '--seed', '2', '-o', seed2], { stdio: 'ignore' });
  fs.mkdirSync(path.join(dir, 'b'));
  execFileSync(WGLLM, ['split', seed2, path.join(dir, 'b', 'tiny'), '--split-max-size', '4M'], { stdio: 'ignore' });
  for (const s of SHARDS) assert.ok(fs.existsSync(path.join(dir, 'b', s)), `wgllm split wrote b/${s}`);
  assert.equal(nativeText(whole, 8), wantNative, 'native: the shards generate what the unsplit file does');
  server = await startServer({ models: dir, hook });
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, timeout: 60000 });
  await freshPage();
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a split model loads over HTTP into OPFS with progress; greedy text equals native wgllm run', { timeout: 90000 }, async () => {
  const r = await loadAndRun(FIRST);
  assert.equal(r.error, undefined);
  assert.equal(r.text, wantNative);
  for (const s of SHARDS) assert.equal(count(s), 1, `${s} fetched once`);
  assert.equal(r.info.source, 'opfs');
  assert.equal(r.info.store, 'tiny');
  const dl = r.events.filter((e) => e.stage === 'download');
  assert.ok(dl.length >= 3, `download events: ${dl.length}`);
  assert.deepEqual([...new Set(dl.map((e) => e.shard))].filter(Boolean), [1, 2, 3], 'events name the shard being fetched');
  assert.ok(dl.every((e) => e.shards === 3));
  const bytes = SHARDS.reduce((a, s) => a + fs.statSync(path.join(dir, s)).size, 0);
  assert.equal(dl.at(-1).loaded, bytes);
  assert.equal(dl.at(-1).total, bytes);
  assert.ok(r.events.some((e) => e.stage === 'read') && r.events.some((e) => e.stage === 'load'));
  const ps = r.events.map((e) => e.progress);
  for (let i = 1; i < ps.length; i++) assert.ok(ps[i] >= ps[i - 1], `progress is monotone: ${ps}`);
  assert.equal(ps.at(-1), 1);
  const list = await page.evaluate(() => wgllm.listModels());
  assert.deepEqual(list.map(({ name, shards, bytes: b, complete }) => ({ name, shards, bytes: b, complete })),
    [{ name: 'tiny', shards: 3, bytes, complete: true }]);
});

test('after a reload the model loads from OPFS without fetching its shards', { timeout: 90000 }, async () => {
  await page.reload();
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
  const r = await loadAndRun(FIRST);
  assert.equal(r.error, undefined);
  assert.equal(r.text, wantNative);
  for (const s of SHARDS) assert.equal(count(s), 1, `${s} not fetched again`);
  assert.ok(!r.events.some((e) => e.stage === 'download' && e.shard > 0), 'nothing was downloaded');
  // by its store name, and from the page (createEngine) too
  const byName = await page.evaluate(async (prompt) => {
    const e = await wgllm.createEngine({ model: 'opfs:tiny' });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, source: info.source };
  }, PROMPT);
  assert.deepEqual(byName, { text: wantNative, source: 'opfs' });
  // on WebGPU the shards stream from OPFS into GPU buffers, and give native WebGPU's tokens
  const gpu = await page.evaluate(async (prompt) => {
    const e = await wgllm.createWorkerEngine({ model: 'opfs:tiny', backend: 'webgpu' });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, streamed: info.weights_streamed };
  }, PROMPT);
  assert.deepEqual(gpu, { text: nativeGpuText(8), streamed: true });
  for (const s of SHARDS) assert.equal(count(s), 1);
});

test('a download cut on shard 2 resumes at shard 2 without fetching shard 1 again', { timeout: 90000 }, async () => {
  assert.equal(await page.evaluate(() => wgllm.deleteModel('tiny')), true);
  assert.deepEqual(await page.evaluate(() => wgllm.listModels()), []);
  requests.clear();
  dropOnce = SHARDS[1];
  const r1 = await loadAndRun(FIRST);
  assert.ok(r1.error, 'the first load fails');
  assert.match(r1.error, /shard 2 of 3 .*interrupted.*1 of 3 shards are stored.*resume/);
  assert.deepEqual([count(SHARDS[0]), count(SHARDS[1]), count(SHARDS[2])], [1, 1, 0]);
  const list = await page.evaluate(() => wgllm.listModels());
  assert.equal(list.length, 1);
  assert.equal(list[0].complete, false);
  assert.equal(list[0].bytes, fs.statSync(path.join(dir, SHARDS[0])).size, 'only shard 1 counts as stored');
  const stored = await page.evaluate(async () => { try { await wgllm.createWorkerEngine({ model: 'opfs:tiny' }); return null; } catch (e) { return e.message; } });
  assert.match(stored, /'tiny' is incomplete/);

  const r2 = await loadAndRun(FIRST);
  assert.equal(r2.error, undefined);
  assert.equal(r2.text, wantNative);
  assert.deepEqual([count(SHARDS[0]), count(SHARDS[1]), count(SHARDS[2])], [1, 2, 1], 'shard 1 was not fetched again');
  assert.ok(r2.events.filter((e) => e.stage === 'download').every((e) => !e.shard || e.shard >= 2));
});

test('a damaged stored shard is named; loading by URL fetches only that shard again', { timeout: 90000 }, async () => {
  const cut = await page.evaluate(async (file) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('wgllm-models');
    const w = await (await (await dir.getDirectoryHandle('tiny')).getFileHandle(file)).createWritable({ keepExistingData: true });
    await w.truncate(1000);
    await w.close();
    try { await wgllm.createEngine({ model: 'opfs:tiny' }); return null; } catch (e) { return e.message; }
  }, SHARDS[1]);
  assert.match(cut, new RegExp(`stored model 'tiny': ${SHARDS[1]} holds 1000 bytes, its manifest says \\d+; delete it`));
  const before = SHARDS.map(count);
  const r = await loadAndRun(FIRST);
  assert.equal(r.error, undefined);
  assert.equal(r.text, wantNative);
  assert.deepEqual(SHARDS.map(count), [before[0], before[1] + 1, before[2]], 'only the damaged shard was fetched');
});

test('picked Files (the shards, in any order) load on the page', { timeout: 90000 }, async () => {
  await page.setContent('<input type="file" id="f" multiple>');
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
  await page.setInputFiles('#f', [SHARDS[2], SHARDS[0], SHARDS[1]].map((s) => path.join(dir, s)));
  const before = SHARDS.map(count);
  const r = await page.evaluate(async (prompt) => {
    const e = await wgllm.createEngine({ model: [...document.getElementById('f').files] });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, source: info.source };
  }, PROMPT);
  assert.deepEqual(r, { text: wantNative, source: 'file' });
  // the same Files posted to a worker engine
  const w = await page.evaluate(async (prompt) => {
    const e = await wgllm.createWorkerEngine({ model: [...document.getElementById('f').files] });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, source: info.source };
  }, PROMPT);
  assert.deepEqual(w, { text: wantNative, source: 'file' });
  assert.deepEqual(SHARDS.map(count), before, 'no requests');
  // the core's mmap took the heap blocks as they were: no second copy was made
  assert.deepEqual(pageWarnings.filter((w) => /copied/.test(w)), []);
  // without the store: straight from the network into memory, nothing kept
  const net = await page.evaluate(async ({ url, prompt }) => {
    const events = [];
    const e = await wgllm.createEngine({ model: url, store: false, onProgress: (p) => events.push(p) });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, source: info.source, store: info.store, events };
  }, { url: `${server.url}${FIRST}`, prompt: PROMPT });
  const { events, ...rest } = net;
  assert.deepEqual(rest, { text: wantNative, source: 'network', store: null });
  const ps = events.map((e) => e.progress);
  for (let i = 1; i < ps.length; i++) assert.ok(ps[i] >= ps[i - 1], `progress is monotone: ${ps}`);
  const dl = events.filter((e) => e.stage === 'download');
  assert.equal(dl.at(-1).loaded, SHARDS.reduce((a, x) => a + fs.statSync(path.join(dir, x)).size, 0));
  assert.equal(dl.at(-1).progress, 0.4);
  assert.deepEqual(SHARDS.map(count), before.map((n) => n + 1), 'each shard fetched once more');
  // WebGPU from a server that ignores ranges: the weights cannot be streamed, so they go
  // through the wasm memory, and the tokens are still native WebGPU's
  const probes = rangeRequests;
  const gpu = await page.evaluate(async ({ url, prompt }) => {
    const e = await wgllm.createWorkerEngine({ model: url, store: false, backend: 'webgpu' });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, streamed: info.weights_streamed, backend: info.backend };
  }, { url: `${server.url}${FIRST}`, prompt: PROMPT });
  assert.deepEqual(gpu, { text: nativeGpuText(8), streamed: false, backend: 'webgpu' });
  assert.ok(rangeRequests > probes, 'core.js asked for a range first');
  await page.goto(`${server.url}/blank.html`);
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
});

test('a corrupt file gives a clear error naming the stored copy', { timeout: 60000 }, async () => {
  const good = fs.readFileSync(whole);
  const bad = Buffer.from(good.subarray(0, good.length >> 1)); // cut in the middle of the tensor data
  fs.writeFileSync(path.join(dir, 'cut.gguf'), bad);
  const r = await loadAndRun('/m/cut.gguf');
  assert.ok(r.error, 'loading failed');
  assert.match(r.error, /loading the model failed: cut\.gguf: .*gguf: tensor '[^']+': data .* extends past end of file/);
  assert.ok(!r.error.includes('/model-'), 'no internal paths in the message');
  assert.match(r.error, /stored in the browser as 'cut'; deleteModel\('cut'\)/);
  // a file that is not GGUF at all, loaded from a picked File on the page
  const msg = await page.evaluate(async () => {
    try {
      await wgllm.createEngine({ model: new File([new Uint8Array(1000).fill(7)], 'junk.gguf') });
      return null;
    } catch (e) { return e.message; }
  });
  assert.match(msg, /loading the model failed: junk\.gguf: .*gguf: magic at offset 0 .*not a GGUF file/);
  assert.equal(await page.evaluate(() => wgllm.deleteModel('cut')), true);
  assert.equal(await page.evaluate(() => wgllm.deleteModel('cut')), false);
  assert.deepEqual((await page.evaluate(() => wgllm.listModels())).map((m) => m.name), ['tiny']);
  assert.deepEqual(pageErrors, []);
});

test('the demo page loads a split model by URL, lists it as stored and deletes it', { timeout: 90000 }, async () => {
  const demo = await browser.newPage(); // a fresh context: an empty store
  const errors = [];
  demo.on('pageerror', (e) => errors.push(e.message));
  try {
    await demo.goto(`${server.url}/demo/`);
    await demo.waitForFunction(() => document.getElementById('loadStored').disabled, null, { timeout: 10000 });
    await demo.fill('#url', FIRST);
    await demo.click('#loadUrl');
    await demo.waitForFunction(() => !document.getElementById('msg').disabled, null, { timeout: 60000 });
    assert.equal(await demo.$eval('#bar', (b) => b.value), 1);
    assert.match(await demo.$eval('#status', (d) => d.textContent), /from the browser's store \('tiny'\)/);
    await demo.waitForFunction(() => document.getElementById('stored').options.length === 1, null, { timeout: 10000 });
    assert.match(await demo.$eval('#stored', (s) => s.options[0].textContent), /^tiny \(.* MiB, 3 shards\)$/);
    await demo.click('#deleteStored');
    await demo.waitForFunction(() => document.getElementById('stored').options.length === 0, null, { timeout: 10000 });
    assert.deepEqual(errors, []);
  } finally {
    await demo.close();
  }
});

// Loads `url` on the page (createEngine), on WebGPU without the store: the weights are read by range requests.
const rangedRun = (url, readAhead) => page.evaluate(async ({ url, prompt, readAhead }) => {
  globalThis.wgllmReadAhead = readAhead ?? undefined;
  try {
    const t0 = performance.now();
    const e = await wgllm.createEngine({ model: url, store: false, backend: 'webgpu' });
    const ms = performance.now() - t0;
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, streamed: info.weights_streamed, source: info.source, ms };
  } finally {
    delete globalThis.wgllmReadAhead;
  }
}, { url, prompt: PROMPT, readAhead });

test('a URL read by range requests keeps a window of them in flight and gives the File\'s tokens', { timeout: 180000 }, async () => {
  const url = `${server.url}/r/whole.gguf`;
  // the same file picked as a File: the reference
  const fromFile = await page.evaluate(async ({ url, prompt }) => {
    const bytes = await (await fetch(url)).arrayBuffer();
    const e = await wgllm.createEngine({ model: new File([bytes], 'whole.gguf'), backend: 'webgpu' });
    const c = await e.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
    const info = e.info;
    await e.unload();
    return { text: c.choices[0].text, streamed: info.weights_streamed };
  }, { url: `${server.url}/m/whole.gguf`, prompt: PROMPT });
  assert.equal(fromFile.streamed, true);
  const base = await rangedRun(url); // no delay: what the load costs without the network
  rangeDelay = 40; // a round trip of a real network
  try {
    Object.assign(ranged, { count: 0, inFlight: 0, maxInFlight: 0 });
    const ahead = await rangedRun(url); // the defaults: 8 MiB chunks, 4 ahead
    const aheadStats = { ...ranged };
    Object.assign(ranged, { count: 0, inFlight: 0, maxInFlight: 0 });
    const serial = await rangedRun(url, { window: 0 }); // one request per read of the core, as before
    const serialStats = { ...ranged };
    Object.assign(ranged, { count: 0, inFlight: 0, maxInFlight: 0 });
    const small = await rangedRun(url, { chunk: 1 << 20, window: 4 });
    const smallStats = { ...ranged };
    console.log(`# range reads of ${mibs(fs.statSync(whole).size)} at ${rangeDelay} ms a request (load ${base.ms.toFixed(0)} ms without delay): ` +
      `read-ahead ${ahead.ms.toFixed(0)} ms (${aheadStats.count} requests, ${aheadStats.maxInFlight} at once), ` +
      `1 MiB chunks ${small.ms.toFixed(0)} ms (${smallStats.count} requests, ${smallStats.maxInFlight} at once), ` +
      `none ${serial.ms.toFixed(0)} ms (${serialStats.count} requests, ${serialStats.maxInFlight} at once)`);
    for (const r of [ahead, serial, small]) assert.deepEqual(r, { ...r, text: fromFile.text, streamed: true, source: 'network' });
    assert.ok(aheadStats.maxInFlight > 1, `more than one range request in flight: ${aheadStats.maxInFlight}`);
    assert.ok(smallStats.maxInFlight > 2, `a window of them with small chunks: ${smallStats.maxInFlight}`);
    assert.equal(serialStats.maxInFlight, 1, 'without read-ahead: one at a time');
    assert.ok(aheadStats.count < serialStats.count, `fewer requests: ${aheadStats.count} vs ${serialStats.count}`);
    assert.equal(ranged.inFlight, 0, 'nothing left in flight after unload');
  } finally {
    rangeDelay = 0;
  }
});

test('range reads: a file that changes on the server during the load, or a failed request, fails the load clearly', { timeout: 120000 }, async () => {
  const url = `${server.url}/r/whole.gguf`;
  const settle = async () => { // the read-ahead still in flight is aborted
    for (let i = 0; i < 100 && ranged.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 20));
    return ranged.inFlight;
  };
  rangeDelay = 20;
  try {
    for (const [fault, want] of [[{ after: 2, swap: q4 }, /the remote file changed during the load \((19391680 bytes before, 10609856 now|ETag .*)\); load the model again/],
      [{ after: 3 }, /HTTP 500 to a range request/]]) {
      Object.assign(ranged, { count: 0, inFlight: 0, maxInFlight: 0 });
      rangeFault = fault;
      const msg = await page.evaluate(async (url) => {
        try { await wgllm.createEngine({ model: url, store: false, backend: 'webgpu' }); return null; } catch (e) { return e.message; }
      }, url);
      rangeFault = null;
      assert.match(msg ?? '', /^wgllm: loading the model failed: whole\.gguf: /);
      assert.match(msg, want);
      assert.equal(await settle(), 0, 'no range request left in flight');
    }
  } finally {
    rangeFault = null;
    rangeDelay = 0;
  }
  // and the next load of the same URL works
  const ok = await rangedRun(url);
  assert.equal(ok.streamed, true);
});

test('a remote file that changed (ETag and size) is downloaded again, never mixed with the stored copy', { timeout: 180000 }, async () => {
  versions.set('ver.gguf', whole);
  const r1 = await loadAndRun('/c/ver.gguf');
  assert.equal(r1.error, undefined);
  assert.equal(r1.text, wantNative);
  assert.equal(count('ver.gguf'), 1);
  // unchanged: checked (a range request), loaded from OPFS
  const r2 = await loadAndRun('/c/ver.gguf');
  assert.equal(r2.error, undefined);
  assert.equal(r2.text, wantNative);
  assert.equal(count('ver.gguf'), 1, 'not fetched again');
  // the server has another version now: another ETag and size
  versions.set('ver.gguf', q4);
  const r3 = await loadAndRun('/c/ver.gguf');
  assert.equal(r3.error, undefined);
  assert.equal(r3.text, nativeText(q4, 8), 'the new file\'s tokens');
  assert.notEqual(r3.text, wantNative);
  assert.equal(count('ver.gguf'), 2, 'downloaded again');
  const list = (await page.evaluate(() => wgllm.listModels())).find((m) => m.name === 'ver');
  assert.deepEqual({ bytes: list.bytes, complete: list.complete }, { bytes: fs.statSync(q4).size, complete: true });
  // and the new copy stays: loaded again without a download
  const r4 = await loadAndRun('/c/ver.gguf');
  assert.equal(r4.text, r3.text);
  assert.equal(count('ver.gguf'), 2);
  // a server that cannot be asked (here: 404) does not stop a complete stored copy from loading
  versions.delete('ver.gguf');
  const r5 = await loadAndRun('/c/ver.gguf');
  assert.equal(r5.error, undefined);
  assert.equal(r5.text, r3.text);
});

test('a split download cut midway resumes; when the remote shards changed meanwhile (ETag) it starts again', { timeout: 180000 }, async () => {
  const vs = SHARDS.map((s) => s.replace(/^tiny/, 'vs'));
  const serve = (from) => vs.forEach((v, i) => versions.set(v, path.join(from, SHARDS[i])));
  const counts = () => vs.map(count);
  serve(dir);
  dropOnce = vs[1];
  const r1 = await loadAndRun(`/c/${vs[0]}`);
  assert.match(r1.error, /shard 2 of 3 .*interrupted.*1 of 3 shards are stored.*resume/);
  assert.deepEqual(counts(), [1, 1, 0]);
  // the same files: resumes at shard 2
  dropOnce = vs[2];
  const r2 = await loadAndRun(`/c/${vs[0]}`);
  assert.match(r2.error, /shard 3 of 3 .*interrupted.*2 of 3 shards are stored/);
  assert.deepEqual(counts(), [1, 2, 1]);
  let list = (await page.evaluate(() => wgllm.listModels())).find((m) => m.name === 'vs');
  assert.equal(list.complete, false);
  assert.equal(list.bytes, fs.statSync(path.join(dir, SHARDS[0])).size + fs.statSync(path.join(dir, SHARDS[1])).size,
    'the manifest counts only the finished shards');
  // now the server has another version (same sizes, other weights, other ETags): the stored shards are dropped
  serve(path.join(dir, 'b'));
  const r3 = await loadAndRun(`/c/${vs[0]}`);
  assert.equal(r3.error, undefined);
  assert.deepEqual(counts(), [2, 3, 2], 'every shard fetched again');
  assert.equal(r3.text, nativeText(seed2, 8), 'the new version\'s tokens');
  assert.notEqual(r3.text, wantNative);
  list = (await page.evaluate(() => wgllm.listModels())).find((m) => m.name === 'vs');
  assert.equal(list.complete, true);
});

test('storage quota: a too small estimate and a QuotaExceededError name the bytes needed and available', { timeout: 120000 }, async () => {
  versions.set('q.gguf', whole);
  const size = fs.statSync(whole).size;
  const estimated = await page.evaluate(async () => {
    const est = navigator.storage.estimate;
    navigator.storage.estimate = async () => ({ quota: 2 ** 20, usage: 0 });
    try { await wgllm.createEngine({ model: '/c/q.gguf' }); return null; } catch (e) { return e.message; } finally {
      navigator.storage.estimate = est;
    }
  });
  assert.equal(estimated, `wgllm: storing the model in the browser (OPFS) needs ${mibs(size)}, 1.0 MiB available ` +
    '(free space with deleteModel, or load with store: false)');
  assert.equal(count('q.gguf'), 0, 'nothing was downloaded');
  const full = await page.evaluate(async () => {
    const write = FileSystemWritableFileStream.prototype.write;
    FileSystemWritableFileStream.prototype.write = function (d) { // the shard's bytes do not fit; the manifest does
      return d instanceof Uint8Array ? Promise.reject(new DOMException('the quota is used up', 'QuotaExceededError')) : write.call(this, d);
    };
    try { await wgllm.createEngine({ model: '/c/q.gguf' }); return null; } catch (e) { return e.message; } finally {
      FileSystemWritableFileStream.prototype.write = write;
    }
  });
  assert.match(full, new RegExp(`^wgllm: storing the model in the browser \\(OPFS\\) needs ${mibs(size).replace('.', '\\.')}, \\d+\\.\\d MiB available`));
  const list = (await page.evaluate(() => wgllm.listModels())).find((m) => m.name === 'q');
  assert.deepEqual({ bytes: list.bytes, complete: list.complete }, { bytes: 0, complete: false });
  assert.deepEqual(pageErrors, []);
});
