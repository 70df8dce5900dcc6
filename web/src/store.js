// store.js - the browser model store: where a model's bytes come from and how
// they reach the wasm core.
//
// Sources (the `model` option of createEngine / createWorkerEngine):
// - a URL (string or URL): downloaded shard by shard into the Origin Private
//   File System (OPFS), streamed chunk by chunk (never a whole shard in one
//   JS ArrayBuffer), with progress; each finished shard is recorded in the
//   model's manifest (with its size, ETag and Last-Modified), so an
//   interrupted download restarts at the first missing shard and a reload
//   loads from OPFS without fetching again - unless the server's file changed:
//   then the stored shards are dropped and it is downloaded again. A
//   split model (`name-00001-of-00003.gguf`, as `wgllm split` writes) is given
//   by any shard's URL or by the list of its URLs.
// - 'opfs:NAME': a model stored before (listModels / deleteModel).
// - a File/Blob (or a list of them, the shards of a split model): read directly.
// - an ArrayBuffer or typed array: the bytes themselves.
//
// How the core reads them: each file is copied, in bounded slices, straight
// into one malloc'd block of the wasm heap and appears in the core's file
// system as a file whose mmap hands over that block, so the GGUF reader's
// mmap costs no second copy. The heap block is the only full copy of the
// model (the CPU backend computes on the weights there). Without OPFS (e.g.
// a private window) a URL streams straight into the heap, with no resume.
// Streamed weights (WebGPU; core.js): the core reads parts of the files
// itself (wgllm_web.lib.js) - slices of the File / OPFS file, or range
// requests to a URL whose server answers them (probeRanges, RangeReader: a
// window of them in flight ahead of the reader) - and nothing is copied into
// the heap here.

const STORE_DIR = 'wgllm-models';
const MANIFEST = 'manifest.json';
const SLICE = 8 << 20; // bytes copied per step from a File into the heap
const SHARD_RE = /-(\d{5})-of-(\d{5})\.gguf$/;

function storeError(message, code = 'store') {
  const e = new Error(`wgllm: ${message}`);
  e.code = code;
  return e;
}

const mib = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;
// The core's memory: wasmMemory in the threaded core; the single-threaded one
// (no pthreads) has no M.wasmMemory, and HEAPU8 follows its growth.
export const wasmBuffer = (M) => (M.wasmMemory ? M.wasmMemory.buffer : M.HEAPU8.buffer);

/** The OPFS folder of the store, or null where OPFS is missing or refused. */
async function storeRoot(create = true) {
  try {
    if (typeof navigator === 'undefined' || !navigator.storage || !navigator.storage.getDirectory) return null;
    const root = await navigator.storage.getDirectory();
    return await root.getDirectoryHandle(STORE_DIR, { create });
  } catch {
    return null;
  }
}

/** True where models can be kept in OPFS. */
export async function storeAvailable() {
  return (await storeRoot()) !== null;
}

async function readManifest(dir) {
  try {
    const f = await (await dir.getFileHandle(MANIFEST)).getFile();
    const m = JSON.parse(await f.text());
    return m && Array.isArray(m.shards) ? m : null;
  } catch {
    return null;
  }
}

async function writeManifest(dir, m) {
  const w = await (await dir.getFileHandle(MANIFEST, { create: true })).createWritable();
  await w.write(JSON.stringify(m));
  await w.close();
}

/** Size of a stored file, or -1 when it is missing. */
async function storedSize(dir, name) {
  try {
    return (await (await dir.getFileHandle(name)).getFile()).size;
  } catch {
    return -1;
  }
}

/**
 * The models in the store: [{name, shards, bytes, complete, urls}]. `complete`
 * is false for a download that stopped part-way (loading it by URL resumes it).
 */
export async function listModels() {
  const root = await storeRoot();
  if (!root) return [];
  const out = [];
  for await (const [name, h] of root.entries()) {
    if (h.kind !== 'directory') continue;
    const m = await readManifest(h);
    if (!m) continue;
    let bytes = 0;
    let complete = m.shards.length > 0;
    for (const s of m.shards) {
      const size = await storedSize(h, s.file);
      if (s.done && size === s.size) bytes += size;
      else complete = false;
    }
    out.push({ name, shards: m.shards.length, bytes, complete, urls: m.urls || [] });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

/** Removes a stored model; resolves to false when there was none of that name. */
export async function deleteModel(name) {
  const root = await storeRoot();
  if (!root) return false;
  try {
    await root.removeEntry(checkName(name), { recursive: true });
    return true;
  } catch (e) {
    if (e && e.name === 'NotFoundError') return false;
    throw storeError(`deleting the stored model '${name}' failed: ${e.message}`);
  }
}

// ---- persisted KV snapshots -------------------------------------------------
// One file per key (by default the model's name) in OPFS folder
// wgllm-snapshots/: what wgllm_engine_snapshots_export wrote, restored at the
// next load so that a returning user's long prompt is not prefilled again.

const SNAP_DIR = 'wgllm-snapshots';

async function snapDir(create) {
  try {
    if (typeof navigator === 'undefined' || !navigator.storage || !navigator.storage.getDirectory) return null;
    return await (await navigator.storage.getDirectory()).getDirectoryHandle(SNAP_DIR, { create });
  } catch {
    return null;
  }
}

/** The stored snapshot file of `key` (a Uint8Array), or null when there is none (or no OPFS). */
export async function readSnapshots(key) {
  const dir = await snapDir(false);
  if (!dir) return null;
  try {
    const f = await (await dir.getFileHandle(`${checkName(key)}.kv`)).getFile();
    return new Uint8Array(await f.arrayBuffer());
  } catch (e) {
    if (e && e.name === 'NotFoundError') return null;
    throw e;
  }
}

/** Stores `bytes` as the snapshot file of `key`; false where OPFS is missing. */
export async function writeSnapshots(key, bytes) {
  const dir = await snapDir(true);
  if (!dir) return false;
  const w = await (await dir.getFileHandle(`${checkName(key)}.kv`, { create: true })).createWritable();
  try {
    await w.write(bytes);
    await w.close();
  } catch (e) {
    try { await w.abort(); } catch { /* already closed */ }
    if (e && e.name === 'QuotaExceededError')
      throw storeError(`the browser's storage is full: ${mib(bytes.length)} of KV snapshots do not fit`, 'quota');
    throw e;
  }
  return true;
}

/** Removes the snapshot file of `key`; false when there was none. */
export async function deleteSnapshots(key) {
  const dir = await snapDir(false);
  if (!dir) return false;
  try {
    await dir.removeEntry(`${checkName(key)}.kv`);
    return true;
  } catch (e) {
    if (e && e.name === 'NotFoundError') return false;
    throw e;
  }
}

function checkName(name) {
  if (typeof name !== 'string' || !name || name.length > 200 || /[/\\\0]/.test(name) || name === '.' || name === '..')
    throw storeError(`bad model name ${JSON.stringify(name)} (a file name without slashes)`, 'argument');
  return name;
}

// ---- URLs ------------------------------------------------------------------

const baseName = (u) => decodeURIComponent(new URL(u).pathname.split('/').pop() || 'model.gguf');

/** The shard URLs of a model given by one URL (all shards when it names one) or a list. */
export function shardUrls(model, base) {
  const abs = (u) => new URL(String(u), base).href;
  if (Array.isArray(model)) {
    if (model.length === 0) throw storeError('the list of model URLs is empty', 'argument');
    return model.map(abs);
  }
  const url = new URL(abs(model));
  const m = url.pathname.match(SHARD_RE);
  if (!m) return [url.href];
  const count = Number(m[2]);
  if (count < 1 || Number(m[1]) < 1 || Number(m[1]) > count)
    throw storeError(`shard number ${Number(m[1])} of ${count} in ${url.href} is out of range`, 'argument');
  const prefix = url.pathname.slice(0, url.pathname.length - m[0].length);
  const urls = [];
  for (let i = 1; i <= count; i++) {
    const u = new URL(url.href);
    u.pathname = `${prefix}-${String(i).padStart(5, '0')}-of-${m[2]}.gguf`;
    urls.push(u.href);
  }
  return urls;
}

/** The store name of a model at these URLs: its file name without shard suffix and .gguf. */
export function storeNameOf(urls) {
  const n = baseName(urls[0]).replace(SHARD_RE, '').replace(/\.gguf$/i, '');
  return (n || 'model').replace(/[/\\\0]/g, '_').slice(0, 200);
}

// The file names the core sees: the shard names the GGUF reader looks for.
function shardFileNames(names, n) {
  if (n === 1) return [names[0] && names[0].endsWith('.gguf') ? names[0] : 'model.gguf'];
  const ok = names.every((s, i) => { const m = s && s.match(SHARD_RE); return m && Number(m[1]) === i + 1 && Number(m[2]) === n; })
    && names.every((s) => s.replace(SHARD_RE, '') === names[0].replace(SHARD_RE, ''));
  if (ok) return names;
  return names.map((_, i) => `model-${String(i + 1).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.gguf`);
}

// ---- downloading into OPFS -----------------------------------------------------

// What a server says about a file: {size, etag, lastModified, ranged}
// (size -1 when it does not say), from one GET of its first byte (a range
// request: works where HEAD is refused, e.g. signed URLs); a server that
// ignores ranges answers 200 and its body is dropped unread. Throws a store
// error on a failed request.
const etagOf = (h) => { const e = h.get('etag'); return e ? e.replace(/^W\//, '') : null; }; // gzip weakens, the value stays
async function remoteInfo(url, what) {
  let res;
  try {
    res = await fetch(url, { headers: { Range: 'bytes=0-0' }, cache: 'no-store' });
  } catch (e) {
    throw storeError(`fetching ${what} (${url}) failed: ${e.message}`, 'fetch');
  }
  const m = /\/(\d+)\s*$/.exec(res.headers.get('content-range') || '');
  const ranged = res.status === 206 && !!m;
  const info = { status: res.status, ranged, etag: etagOf(res.headers), lastModified: res.headers.get('last-modified'),
    size: ranged ? Number(m[1]) : res.status === 200 && res.headers.get('content-length') &&
      !/^(?!identity)./i.test(res.headers.get('content-encoding') || '') ? Number(res.headers.get('content-length')) : -1 };
  try { if (ranged) await res.arrayBuffer(); else await res.body?.cancel(); } catch { /* gone already */ }
  if (!res.ok) throw storeError(`fetching ${what} (${url}) failed: HTTP ${res.status}`, 'fetch');
  return info;
}

/* True when what the server says now (`now`) is another version of the file
 * than the one recorded (`was`, from the manifest): another ETag, or (where
 * either has none) another Last-Modified, or another size. */
function changedFile(was, now) {
  if (was.size >= 0 && now.size >= 0 && was.size !== now.size) return `${was.size} bytes before, ${now.size} now`;
  if (was.etag && now.etag) return was.etag !== now.etag ? `ETag ${was.etag} before, ${now.etag} now` : '';
  if (was.lastModified && now.lastModified && was.lastModified !== now.lastModified)
    return `Last-Modified ${was.lastModified} before, ${now.lastModified} now`;
  return '';
}

// Streamed reads of a URL: READ_CHUNK-aligned range requests, READ_WINDOW of
// them in flight ahead of the reader, so that the core's sequential reads of
// the weights take about one download's time instead of a round trip each.
const READ_CHUNK = 8 << 20;
const READ_WINDOW = 4;

/**
 * Reads parts of a URL with range requests (wgllm_web.lib.js calls read()).
 * Large reads (at least half a chunk: the weights) and reads that go on
 * where the last one ended go through aligned chunks, with up to `window`
 * chunks requested ahead of the read, in order;
 * chunks behind the reader or beyond the window are dropped (their requests
 * aborted), so at most (read + window) chunks are held. Other small reads
 * (samples of weights) that no held chunk covers are one exact request each. Every answer is checked against the file's size and ETag:
 * a file that changed on the server is an error, never mixed in. close()
 * aborts what is in flight (on error, after the load, at unload).
 * opts: {chunk, window} (window 0: exactly what is asked, one request per read);
 * globalThis.wgllmReadAhead overrides the defaults (tuning, tests).
 */
export class RangeReader {
  constructor(url, size, info = {}, opts = {}) {
    const g = (typeof globalThis !== 'undefined' && globalThis.wgllmReadAhead) || {};
    this.url = url;
    this.size = size;
    this.etag = info.etag ?? null;
    this.lastModified = info.lastModified ?? null;
    this.chunk = Math.max(4096, opts.chunk ?? g.chunk ?? READ_CHUNK);
    this.window = Math.max(0, opts.window ?? g.window ?? READ_WINDOW);
    this.chunks = new Map(); // index -> {ctrl, p}
    this.lastEnd = -1; // where the last read ended
  }

  async fetchRange(a, b, signal) { // [a, b)
    const res = await fetch(this.url, { headers: { Range: `bytes=${a}-${b - 1}` }, signal, cache: 'no-store' });
    const cr = res.headers.get('content-range') || '';
    const total = /\/(\d+)\s*$/.exec(cr); // also on a 416: bytes */SIZE
    const now = { size: total ? Number(total[1]) : -1, etag: etagOf(res.headers), lastModified: res.headers.get('last-modified') };
    const changed = changedFile({ size: this.size, etag: this.etag, lastModified: this.lastModified }, now);
    const m = /^bytes (\d+)-(\d+)\/(\d+)\s*$/.exec(cr);
    if (changed || res.status !== 206 || !m) {
      try { await res.body?.cancel(); } catch { /* gone already */ }
      if (changed) throw storeError(`the remote file changed during the load (${changed}); load the model again`, 'fetch');
      throw new Error(`HTTP ${res.status} to a range request`);
    }
    if (Number(m[1]) !== a || Number(m[2]) !== b - 1) throw new Error(`the server sent bytes ${m[1]}-${m[2]} for ${a}-${b - 1}`);
    const bytes = new Uint8Array(await res.arrayBuffer());
    if (bytes.length !== b - a) throw new Error(`${bytes.length} bytes for a range of ${b - a}`);
    return bytes;
  }

  chunkAt(i) {
    let c = this.chunks.get(i);
    if (!c) {
      const ctrl = new AbortController();
      const a = i * this.chunk;
      c = { ctrl, p: this.fetchRange(a, Math.min(this.size, a + this.chunk), ctrl.signal) };
      c.p.catch(() => {}); // seen by the read that needs it, or dropped with it
      this.chunks.set(i, c);
    }
    return c;
  }

  drop(i) {
    const c = this.chunks.get(i);
    if (!c) return;
    this.chunks.delete(i);
    c.ctrl.abort();
  }

  /** The n bytes at off (a Uint8Array of n bytes). */
  async read(off, n) {
    if (n <= 0) return new Uint8Array(0);
    const C = this.chunk;
    const first = Math.floor(off / C);
    const last = Math.floor((off + n - 1) / C);
    let covered = true;
    for (let i = first; i <= last && covered; i++) covered = this.chunks.has(i);
    // in order: at most a chunk past where the last read ended
    const sequential = this.lastEnd >= 0 && off >= this.lastEnd && off - this.lastEnd <= C;
    this.lastEnd = off + n;
    const streaming = this.window > 0 && (n >= C / 2 || sequential);
    if (!covered && !streaming) return this.fetchRange(off, off + n);
    try {
      if (streaming) { // the window moves with the reader: topped up at every read, not only on a miss
        const end = Math.min(last + this.window, Math.floor((this.size - 1) / C));
        for (const i of [...this.chunks.keys()]) if (i < first || i > end) this.drop(i);
        for (let i = first; i <= end; i++) this.chunkAt(i); // in order: the read's chunks, then the window
      }
      const parts = [];
      for (let i = first; i <= last; i++) parts.push(await this.chunkAt(i).p);
      if (parts.length === 1) return parts[0].subarray(off - first * C, off - first * C + n);
      const out = new Uint8Array(n);
      let o = 0;
      parts.forEach((p, k) => {
        const from = k === 0 ? off - first * C : 0;
        const to = Math.min(p.length, off + n - (first + k) * C);
        out.set(p.subarray(from, to), o);
        o += to - from;
      });
      return out;
    } catch (e) {
      this.close(); // nothing of a failed window is kept
      throw e;
    }
  }

  /** Aborts the requests in flight and drops the held chunks (reads still work afterwards). */
  close() {
    for (const i of [...this.chunks.keys()]) this.drop(i);
  }
}

/**
 * For the URL files of a model that is not kept in OPFS: asks each for its
 * first byte as a range request. When every server answers 206 with the
 * file's size, sets each file's size and reader (a RangeReader), and
 * resolves to true: the core can then read any part of them (streamed
 * weights) instead of copying them whole into the wasm memory. False when
 * any server ignores ranges or fails.
 */
export async function probeRanges(files, opts = {}) {
  const infos = [];
  for (const f of files) {
    if (!f.url) { infos.push(null); continue; }
    try {
      const info = await remoteInfo(f.url, f.name);
      if (!info.ranged) return false;
      infos.push(info);
    } catch {
      return false; // the load that follows reports the failure
    }
  }
  files.forEach((f, i) => {
    if (!infos[i]) return;
    f.size = infos[i].size;
    f.ranged = true;
    f.reader = new RangeReader(f.url, f.size, infos[i], opts);
  });
  return true;
}

/** Aborts the read-ahead of the files' readers (after the load, at unload). */
export function closeReaders(files) {
  for (const f of files || []) if (f.reader) f.reader.close();
}

async function fetchOk(url, what) {
  let res;
  try {
    res = await fetch(url);
  } catch (e) {
    throw storeError(`fetching ${what} (${url}) failed: ${e.message}`, 'fetch');
  }
  if (!res.ok) throw storeError(`fetching ${what} (${url}) failed: HTTP ${res.status}`, 'fetch');
  return res;
}

/** {quota, usage, available} of the origin's storage (navigator.storage.estimate), or null where unknown. */
async function storageEstimate() {
  try {
    if (typeof navigator === 'undefined' || !navigator.storage || !navigator.storage.estimate) return null;
    const e = await navigator.storage.estimate();
    if (!e || !Number.isFinite(e.quota) || !Number.isFinite(e.usage)) return null;
    return { quota: e.quota, usage: e.usage, available: Math.max(0, e.quota - e.usage) };
  } catch {
    return null;
  }
}

const quotaError = (need, est) => storeError(`storing the model in the browser (OPFS) needs ${mib(need)}, ` +
  `${est ? mib(est.available) : 'less'} available (free space with deleteModel, or load with store: false)`, 'quota');

async function clearDir(dir) {
  const old = [];
  for await (const [entry] of dir.entries()) old.push(entry);
  for (const entry of old) await dir.removeEntry(entry, { recursive: true });
}

/**
 * Makes sure every shard of the model at `urls` is complete in OPFS,
 * downloading the missing ones; returns {dir, name, shards: [{file, size}]}.
 * progress(loaded, total, fraction, shard, shards); loaded/total in bytes;
 * shard (1-based) only while that shard is being fetched.
 *
 * The manifest records, for each finished shard, the size, ETag and
 * Last-Modified its server gave. Every load by URL first asks the server
 * about each shard (one range request of its first byte): when a stored
 * shard's file changed there, all stored shards are dropped and the model is
 * downloaded again (versions are never mixed); when the server cannot be
 * reached, a complete stored model loads as it is. The sizes it learns are
 * checked against navigator.storage.estimate() before anything is written.
 */
async function download(urls, root, progress) {
  const name = storeNameOf(urls);
  const dir = await root.getDirectoryHandle(name, { create: true });
  let m = await readManifest(dir);
  const same = m && m.urls && m.urls.length === urls.length && m.urls.every((u, i) => u === urls[i]);
  const fresh = () => ({ name, urls, shards: urls.map((u, i) => ({ file: shardFileNames(urls.map(baseName), urls.length)[i], size: -1, done: false })) });
  if (!same) {
    // another model under this name (or none): start over
    await clearDir(dir);
    m = fresh();
    await writeManifest(dir, m);
  }
  const whatOf = (i) => (urls.length > 1 ? `shard ${i + 1} of ${urls.length}` : 'the model');
  let sizes = await Promise.all(m.shards.map(async (s) => (s.done && (await storedSize(dir, s.file)) === s.size ? s.size : -1)));
  // what the server says about each shard now
  const infos = await Promise.all(urls.map((u, i) => remoteInfo(u, whatOf(i)).catch((e) => e)));
  const missing = sizes.some((x) => x < 0);
  const failed = infos.find((x) => x instanceof Error);
  if (failed && missing) throw failed; // the download cannot go on
  if (failed) console.warn(`wgllm: the stored model '${name}' was not checked against its server (${failed.message}); loading it as stored`);
  else {
    const changed = m.shards.map((s, i) => (sizes[i] >= 0 ? changedFile(s, infos[i]) : '')).find(Boolean);
    if (changed) {
      // the remote file is another version than the stored shards: drop them all, never mix
      console.warn(`wgllm: the remote model '${name}' changed (${changed}); its stored shards are dropped and it is downloaded again`);
      await clearDir(dir);
      m = fresh();
      await writeManifest(dir, m);
      sizes = sizes.map(() => -1);
    }
  }
  // room for what is missing (where the server says the sizes)
  const need = failed ? 0 : infos.reduce((a, x, i) => a + (sizes[i] < 0 && x.size > 0 ? x.size : 0), 0);
  const est = need ? await storageEstimate() : null;
  if (est && need > est.available) throw quotaError(need, est);
  // bytes: of the shards whose size is known so far (later shards' sizes
  // come with their responses); the fraction goes by shards, so it never
  // moves backwards when a new shard's size becomes known
  const known = () => sizes.reduce((a, x) => a + Math.max(0, x), 0);
  let loaded = known();
  let stored = sizes.filter((x) => x >= 0).length;
  if (stored) progress(loaded, known(), stored / urls.length, undefined, urls.length); // what OPFS already holds
  for (let i = 0; i < urls.length; i++) {
    if (sizes[i] >= 0) continue;
    const s = m.shards[i];
    const what = whatOf(i);
    const res = await fetchOk(urls[i], what);
    const total = Number(res.headers.get('content-length')) || 0;
    const got0 = { size: total || -1, etag: etagOf(res.headers), lastModified: res.headers.get('last-modified') };
    const during = infos[i] && !(infos[i] instanceof Error) ? changedFile(infos[i], got0) : '';
    if (during) {
      try { await res.body?.cancel(); } catch { /* gone already */ }
      throw storeError(`the remote file of ${what} (${urls[i]}) changed during the download (${during}); ` +
        'load the model again', 'fetch');
    }
    sizes[i] = total;
    const fh = await dir.getFileHandle(s.file, { create: true });
    const w = await fh.createWritable({ keepExistingData: false });
    let got = 0;
    try {
      const reader = res.body.getReader();
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          const done = m.shards.filter((x) => x.done).length;
          throw storeError(`the download of ${what} (${urls[i]}) was interrupted at ${got} of ${total || '?'} bytes ` +
            `(${e.message}); ${done} of ${urls.length} shard${urls.length > 1 ? 's are' : ' is'} stored: ` +
            'load the model again to resume from the first missing shard', 'fetch');
        }
        if (chunk.done) break;
        try {
          await w.write(chunk.value);
        } catch (e) {
          if (e && e.name === 'QuotaExceededError') {
            const left = infos.reduce((a, x, k) => a + (k >= i && m.shards[k] && !m.shards[k].done && x && x.size > 0 ? x.size : 0), 0);
            throw quotaError(Math.max(left, total, got + chunk.value.length), await storageEstimate());
          }
          throw storeError(`storing ${what} in the browser (OPFS) failed at ${got} bytes: ${e.message}`);
        }
        got += chunk.value.length;
        loaded += chunk.value.length;
        if (!total) sizes[i] = got;
        progress(loaded, Math.max(known(), loaded), (stored + (total ? got / total : 0)) / urls.length, i + 1, urls.length);
      }
      if (total && got !== total)
        throw storeError(`the download of ${what} (${urls[i]}) ended at ${got} of ${total} bytes; load the model again to resume`, 'fetch');
      await w.close();
    } catch (e) {
      try { await w.abort(); } catch { /* already closed */ }
      throw e;
    }
    s.size = got;
    s.etag = got0.etag;
    s.lastModified = got0.lastModified;
    s.done = true;
    sizes[i] = got;
    stored++;
    await writeManifest(dir, m); // the shard counts as stored only from here on
  }
  progress(loaded, loaded, 1, undefined, urls.length);
  // best effort: ask that the browser not evict the store under storage pressure (pages only)
  try { if (navigator.storage.persist) navigator.storage.persist().catch(() => {}); } catch { /* not offered here */ }
  return { dir, name, shards: m.shards };
}

async function storedSources(dir, name, shards) {
  const out = [];
  for (const s of shards) {
    let file, handle;
    try {
      handle = await dir.getFileHandle(s.file);
      file = await handle.getFile();
    } catch {
      throw storeError(`the stored model '${name}' misses its file ${s.file}; delete it (deleteModel) and load it again`);
    }
    if (s.size >= 0 && file.size !== s.size)
      throw storeError(`the stored model '${name}': ${s.file} holds ${file.size} bytes, its manifest says ${s.size}; ` +
        'delete it (deleteModel) and load it again');
    out.push({ name: s.file, size: file.size, blob: file, handle });
  }
  return out;
}

// ---- sources ---------------------------------------------------------------------

/**
 * Resolves a `model` option to the files the core will read:
 * {files: [{name, size, blob | bytes | fetch}], origin, storeName?}.
 * progress(stage, fraction, loaded, total, extra) reports the download.
 * opts: {base: URL for relative URLs, store: false to bypass OPFS}.
 */
export async function resolveModel(model, progress, opts = {}) {
  const base = opts.base ?? (typeof location !== 'undefined' ? location.href : undefined);
  if (typeof model === 'string' && model.startsWith('opfs:')) {
    const name = checkName(model.slice(5));
    const root = await storeRoot(false);
    let dir = null;
    if (root) try { dir = await root.getDirectoryHandle(name); } catch { dir = null; }
    if (!dir) throw storeError(`no model named '${name}' in the browser's store (listModels() shows what is there)`, 'argument');
    const m = await readManifest(dir);
    if (!m || !m.shards.length || !m.shards.every((s) => s.done))
      throw storeError(`the stored model '${name}' is incomplete; load it by its URL to finish the download`);
    return { files: await storedSources(dir, name, m.shards), origin: 'opfs', storeName: name };
  }
  if (typeof model === 'string' || model instanceof URL || (Array.isArray(model) && model.every((u) => typeof u === 'string' || u instanceof URL))) {
    const urls = shardUrls(model, base);
    const root = opts.store === false ? null : await storeRoot();
    const report = (loaded, total, frac, shard, shards) => progress('download', frac, loaded, total, { shard, shards });
    if (root) {
      const { dir, name, shards } = await download(urls, root, report);
      return { files: await storedSources(dir, name, shards), origin: 'opfs', storeName: name };
    }
    // no OPFS: each shard is fetched when its turn comes and streamed straight into the heap (no resume)
    const names = shardFileNames(urls.map(baseName), urls.length);
    const files = urls.map((url, i) => ({ name: names[i], size: -1, url,
      fetch: () => fetchOk(url, urls.length > 1 ? `shard ${i + 1} of ${urls.length}` : 'the model') }));
    return { files, origin: 'network' };
  }
  const isBlob = (x) => typeof Blob !== 'undefined' && x instanceof Blob;
  if (isBlob(model) || (Array.isArray(model) && model.length && model.every(isBlob))) {
    const list = Array.isArray(model) ? model : [model];
    const sorted = list.length > 1 && list.every((f) => typeof f.name === 'string' && SHARD_RE.test(f.name))
      ? [...list].sort((a, b) => a.name.localeCompare(b.name)) : list;
    const names = shardFileNames(sorted.map((f) => (typeof f.name === 'string' ? f.name : '')), sorted.length);
    return { files: sorted.map((f, i) => ({ name: names[i], size: f.size, blob: f })), origin: 'file' };
  }
  let bytes;
  if (model instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && model instanceof SharedArrayBuffer)) bytes = new Uint8Array(model);
  else if (ArrayBuffer.isView(model)) bytes = new Uint8Array(model.buffer, model.byteOffset, model.byteLength);
  else throw storeError('`model` must be a URL (or a list of shard URLs), "opfs:NAME", a File/Blob (or a list), ' +
    'an ArrayBuffer or a typed array', 'argument');
  return { files: [{ name: 'model.gguf', size: bytes.length, bytes }], origin: 'memory' };
}

// ---- into the wasm heap ------------------------------------------------------------

/* An OPFS file read through a sync access handle (dedicated workers only):
 * straight into the heap when the browser accepts a view of the shared
 * memory, else through one SLICE-sized buffer. False when not possible (the
 * caller reads the File in slices). */
async function readSync(f, size, alloc, heap, step) {
  if (!f.handle || typeof f.handle.createSyncAccessHandle !== 'function') return false;
  let h;
  try {
    h = await f.handle.createSyncAccessHandle();
  } catch {
    return false; // e.g. another tab holds it
  }
  try {
    if (h.getSize() !== size) throw storeError(`${f.name} changed while it was being read`);
    const ptr = alloc(size);
    let direct = true;
    let bounce = null;
    for (let off = 0; off < size; off += SLICE) {
      const n = Math.min(SLICE, size - off);
      let got;
      if (direct) {
        try {
          got = h.read(new Uint8Array(heap().buffer, ptr + off, n), { at: off });
        } catch {
          direct = false; // no shared views: bounce through a private buffer
        }
      }
      if (!direct) {
        bounce ??= new Uint8Array(SLICE);
        got = h.read(bounce.subarray(0, n), { at: off });
        heap().set(bounce.subarray(0, got), ptr + off);
      }
      if (got !== n) throw storeError(`reading ${f.name} gave ${got} bytes at offset ${off} instead of ${n}`);
      step(n);
    }
    return true;
  } finally {
    h.close();
  }
}

/**
 * Copies the files into malloc'd blocks of the core's heap and makes them
 * files of its file system (in a fresh folder) whose mmap returns the block.
 * progress(loaded, total, fraction): bytes (total: of the sizes known so
 * far); the fraction goes by bytes when every size is known in advance, else
 * by files, so it never moves backwards. Returns {path (the first file), release()}:
 * release() frees the blocks that no mmap took (call it after the load).
 */
export async function mountInHeap(M, files, dirPath, progress) {
  const FS = M.FS;
  const total = files.reduce((a, f) => a + Math.max(0, f.size), 0);
  const sized = files.every((f) => f.size >= 0);
  let known = total;
  let loaded = 0;
  const blocks = [];
  const release = () => {
    for (const b of blocks) if (!b.taken && b.ptr) { M._free(b.ptr); b.ptr = 0; }
  };
  try {
    FS.mkdir(dirPath);
    for (const [idx, f] of files.entries()) {
      let size = f.size;
      let ptr = 0;
      let block = null;
      let fileDone = 0;
      const step = (n) => {
        loaded += n;
        fileDone += n;
        const frac = sized ? (total ? loaded / total : 1) : (idx + (size > 0 ? Math.min(1, fileDone / size) : 0)) / files.length;
        progress(loaded, Math.max(known, loaded), frac);
      };
      const heap = () => new Uint8Array(wasmBuffer(M)); // a fresh view: the memory may have grown
      const malloc = (n) => {
        const p = M._malloc(Math.max(1, n)) >>> 0;
        if (!p) throw storeError(`no room in the wasm memory for ${f.name} (${mib(n)}; the limit is 4 GiB)`, 'memory');
        return p;
      };
      const alloc = (n) => { // the file's block: registered at once, so a failure part-way frees it
        const p = malloc(n);
        block = { ptr: p, size: n, taken: false };
        blocks.push(block);
        return p;
      };
      if (f.bytes) {
        ptr = alloc(size);
        heap().set(f.bytes, ptr);
        step(size);
      } else if (f.blob && await readSync(f, size, (n) => { ptr = alloc(n); return ptr; }, heap, step)) {
        // read in place through a sync access handle (workers)
      } else if (f.blob) {
        if (!ptr) ptr = alloc(size);
        for (let off = 0; off < size; off += SLICE) {
          const part = new Uint8Array(await f.blob.slice(off, Math.min(size, off + SLICE)).arrayBuffer());
          if (part.length !== Math.min(SLICE, size - off))
            throw storeError(`reading ${f.name} gave ${part.length} bytes at offset ${off}; the file changed or is unreadable`);
          heap().set(part, ptr + off);
          step(part.length);
        }
      } else if (f.fetch) {
        const res = await f.fetch();
        size = Number(res.headers.get('content-length')) || -1;
        if (size > 0) known += size;
        const reader = res.body.getReader();
        if (size >= 0) {
          ptr = alloc(size);
          let off = 0;
          for (;;) {
            let chunk;
            try { chunk = await reader.read(); } catch (e) {
              throw storeError(`the download of ${f.url} was interrupted at ${off} of ${size} bytes (${e.message})`, 'fetch');
            }
            if (chunk.done) break;
            if (off + chunk.value.length > size) throw storeError(`${f.url} sent more bytes than its Content-Length (${size})`, 'fetch');
            heap().set(chunk.value, ptr + off);
            off += chunk.value.length;
            step(chunk.value.length);
          }
          if (off !== size) throw storeError(`the download of ${f.url} ended at ${off} of ${size} bytes`, 'fetch');
        } else {
          // no Content-Length: the only case that gathers a whole file in JS first
          const parts = [];
          let n = 0;
          for (;;) {
            const chunk = await reader.read();
            if (chunk.done) break;
            parts.push(chunk.value);
            n += chunk.value.length;
            step(chunk.value.length);
          }
          size = n;
          ptr = alloc(size);
          let off = 0;
          for (const p of parts) { heap().set(p, ptr + off); off += p.length; }
        }
      }
      block.size = size;
      const path = `${dirPath}/${f.name}`;
      FS.writeFile(path, new Uint8Array(0));
      const node = FS.lookupPath(path).node;
      node.usedBytes = size; // what stat() reports
      node.stream_ops = {
        ...node.stream_ops,
        read(stream, buffer, offset, length, position) {
          const n = Math.max(0, Math.min(length, size - position));
          if (n > 0) buffer.set(new Uint8Array(wasmBuffer(M), block.ptr + position, n), offset);
          return n;
        },
        write() { throw new FS.ErrnoError(63); }, // EPERM-like: these files are read-only
        mmap(stream, address, length, position) {
          if (!block.taken && position === 0 && length === size) {
            block.taken = true; // the mapping owns the block now: munmap frees it
            return { ptr: block.ptr, allocated: true };
          }
          // another mapping of the same file: a copy, as MEMFS would make
          console.warn(`wgllm: a second mapping of ${f.name} (${mib(length)}) was copied in the wasm memory`);
          const p = malloc(length); // owned by that mapping (munmap frees it)
          new Uint8Array(wasmBuffer(M)).set(new Uint8Array(wasmBuffer(M), block.ptr + position, Math.min(length, size - position)), p);
          return { ptr: p, allocated: true };
        },
      };
    }
  } catch (e) {
    release();
    throw e;
  }
  return { path: `${dirPath}/${files[0].name}`, release };
}
