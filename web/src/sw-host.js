// sw-host.js - the engine hosted in a Service Worker, shared by every page of
// the origin (createServiceWorkerEngine in wgllm.js is the page side): a
// model loaded by one page stays loaded across navigations and tabs, and the
// next page that asks for the same model (same URL or store name, same load
// options) gets it at once, with no reload.
//
// Wire: a page posts {wgllm: 'connect', session} to the service worker with
// a MessagePort; on that port the session speaks the engine protocol
// (protocol.js, the same one the dedicated worker speaks). The page also
// posts {wgllm: 'heartbeat', session} to the service worker itself every few
// seconds: a message event restarts Chromium's idle timer (~30 s), messages
// on a MessagePort do not, so the heartbeat is what keeps the worker (and
// the model in it) alive while a page is open. When every page is gone the
// heartbeats stop and the browser stops the worker: the model is dropped.
//
// A session is gone when its page is (clients.get finds no client: a closed
// tab, a navigation) or its heartbeats stopped: its running requests are
// cancelled so that they do not hold the engine's slots for nobody, and it
// lets go of the model, which stays loaded for the next page. An explicit
// unload() by the last page using the model frees it. Another model replaces
// the loaded one only when no page uses it ('busy' otherwise).
//
// Cores: a service worker can start no nested Worker and has no
// SharedArrayBuffer, and must not block, so it runs the single-threaded
// cores, imported here statically (import() is not allowed in a service
// worker): the CPU one, or the WebGPU one (Asyncify) where the worker's
// navigator has WebGPU (Chromium exposes it in service workers); `auto`
// falls back to the CPU core when it is missing or a software adapter, and
// info.service_worker says what the worker had.
//
// An app's own (module) service worker can host the engine too:
//   import { hostEngine } from './wgllm/sw-host.js'; hostEngine(self);

import { loadCore } from './core.js';
import { createSession, refuse } from './protocol.js';
import createCoreST from './wgllm-core-st.js';
import createCoreSTGPU from './wgllm-core-st-gpu.js';

const CORES = { 'single-threaded': createCoreST, 'single-threaded-webgpu': createCoreSTGPU };
// a session whose page sent no heartbeat for this long is gone (the page
// sends one every HEARTBEAT_MS of wgllm.js; a frozen page misses several)
const SESSION_TIMEOUT_MS = 30000;
const SWEEP_MS = 1000;

// What makes two loads the same engine: the model's name (an absolute URL,
// opfs:NAME, a File's name, size and date) and every option that changes
// what is loaded. Bytes have no name: each such load is its own engine.
let unnamed = 0;
function keyOf(args) {
  const m = args.model;
  let name = null;
  if (typeof m === 'string') name = m;
  else if (Array.isArray(m) && m.length && m.every((x) => typeof x === 'string')) name = m.join('\n');
  else if (typeof File !== 'undefined' && m instanceof File) name = `file:${m.name}:${m.size}:${m.lastModified}`;
  if (name === null) return `bytes:${++unnamed}`;
  const o = ['chatTemplate', 'nCtx', 'nSlots', 'store', 'backend', 'persistSnapshots', 'streamWeights'].map((k) => args[k] ?? null);
  return JSON.stringify([name, ...o]);
}
const nameOf = (m) => (typeof m === 'string' ? m : Array.isArray(m) ? String(m[0]) : m && m.name ? m.name : 'bytes');

/** Hosts the engine in the service worker `scope` (its global): call once, at the worker's start. */
export function hostEngine(scope = self) {
  let engine = null; // the shared engine: {key, name, ready, core, users: Set<session>, progress: Set<fn>}
  let loads = 0; // models loaded since this worker started (what a page can check "no reload" with)
  const sessions = new Map(); // session id -> {id, port, session, clientId, lastBeat, engine}
  let sweeper = null;
  const hasGpu = () => typeof navigator !== 'undefined' && !!navigator.gpu;

  function startLoad(key, args, old) {
    const e = { key, name: nameOf(args.model), core: null, users: new Set(), progress: new Set(), number: ++loads };
    // threaded: false whatever the worker's isolation says: no nested Workers here
    e.ready = (async () => {
      if (old) await old.ready.then((c) => c.unload(), () => {});
      return loadCore({ ...args, threaded: false, coreModules: CORES,
        onProgress: (p) => { for (const f of e.progress) f(p); } });
    })().then((c) => { e.core = c; return c; }, (err) => { if (engine === e) engine = null; throw err; });
    e.ready.catch(() => {}); // each waiting session reports the failure
    return e;
  }

  // s lets go of its model; unload: the page asked, and when it was the last
  // user the model is freed (a page that is merely gone leaves it loaded)
  async function release(s, unload) {
    const e = s.engine;
    if (!e) return;
    s.engine = null;
    e.users.delete(s);
    if (unload && e.users.size === 0 && engine === e) {
      engine = null;
      await e.ready.then((c) => c.unload(), () => {});
    }
  }

  function hostFor(s) {
    return {
      async load(args, onProgress) {
        if (s.engine || s.loading) throw refuse('wgllm: this engine already holds a model (unload it first)', 'busy');
        const key = keyOf(args);
        let reused = true;
        if (!engine || engine.key !== key) {
          if (engine && engine.users.size)
            throw refuse(`wgllm: the service worker serves another model ('${engine.name}') to ${engine.users.size} ` +
              'engine(s) of this origin; it is replaced once they unload or their pages are gone', 'busy');
          engine = startLoad(key, args, engine);
          reused = false;
        }
        const e = engine;
        e.users.add(s); // from now on: a page that waits for it keeps it from being replaced
        e.progress.add(onProgress);
        s.loading = true;
        try {
          await e.ready;
        } catch (err) {
          e.users.delete(s);
          throw err;
        } finally {
          e.progress.delete(onProgress);
          s.loading = false;
        }
        if (s.gone) { e.users.delete(s); throw refuse('wgllm: the page is gone', 'state'); }
        s.engine = e;
        return { ...e.core.info, service_worker: serviceWorkerInfo(reused) };
      },
      core() {
        if (s.engine) return s.engine.core;
        throw refuse(s.loading ? 'wgllm: the model is still loading' : 'wgllm: no model loaded', 'state');
      },
      // this page's requests only: the others' go on
      interrupt(jobs) { for (const cancel of jobs.values()) cancel(); },
      unload: () => release(s, true),
      status: () => serviceWorkerInfo(undefined),
    };
  }

  function serviceWorkerInfo(reused) {
    return {
      host: 'service-worker',
      loads, // models loaded by this worker since it started
      reused, // this engine found its model loaded (or loading) by another page
      model: engine ? engine.name : null,
      engines: engine ? engine.users.size : 0, // engines (pages) using the model
      sessions: sessions.size,
      requests: engine && engine.core ? engine.core.running() : 0, // requests in flight on the model, every page's
      webgpu: hasGpu(), // navigator.gpu in the service worker: what `auto` and 'webgpu' can use
      core_reason: 'a service worker: no nested Workers or SharedArrayBuffer, so a single-threaded core' +
        (hasGpu() ? ' (WebGPU is exposed here)' : ' (no WebGPU in this service worker: the CPU core)'),
    };
  }

  function drop(s) {
    if (s.gone) return;
    s.gone = true;
    sessions.delete(s.id);
    s.session.close(); // its streams end: nobody reads them
    release(s, false);
    try { s.port.close(); } catch { /* already closed */ }
    if (!sessions.size && sweeper) { clearInterval(sweeper); sweeper = null; }
  }

  // Sessions of pages that are gone: a closed or navigated page has no client
  // any more; a page whose heartbeats stopped is treated the same.
  async function sweep() {
    const now = Date.now();
    for (const s of [...sessions.values()]) {
      if (now - s.lastBeat > SESSION_TIMEOUT_MS) { drop(s); continue; }
      if (s.clientId && scope.clients) {
        let c;
        try { c = await scope.clients.get(s.clientId); } catch { c = undefined; }
        if (!c) drop(s);
      }
    }
  }

  scope.addEventListener('message', (ev) => {
    const m = ev.data;
    if (!m || typeof m !== 'object' || typeof m.wgllm !== 'string' || typeof m.session !== 'string') return; // the app's
    if (m.wgllm === 'connect') {
      const port = ev.ports && ev.ports[0];
      if (!port || sessions.has(m.session)) return;
      const s = { id: m.session, port, clientId: ev.source && ev.source.id, lastBeat: Date.now(), engine: null,
                  loading: false, gone: false };
      s.session = createSession(hostFor(s), (msg) => { if (!s.gone) port.postMessage(msg); });
      port.onmessage = (pe) => {
        if (pe.data && pe.data.op === 'bye') { drop(s); return; } // the page is leaving (pagehide)
        s.session.handle(pe.data);
      };
      sessions.set(s.id, s);
      if (!sweeper) sweeper = setInterval(sweep, SWEEP_MS);
    } else if (m.wgllm === 'heartbeat') {
      const s = sessions.get(m.session);
      if (s) s.lastBeat = Date.now();
      // a session this worker does not know: the browser restarted it and the
      // page's port leads nowhere; the page fails its engine's requests
      else if (ev.source) ev.source.postMessage({ wgllm: 'lost', session: m.session });
    }
  });
}
