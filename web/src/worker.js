// worker.js - the Web Worker side of createWorkerEngine (wgllm.js): owns one
// wasm core (core.js) and answers the page's messages with the engine
// protocol (protocol.js, shared with the service worker host sw-host.js).
//
// A worker holds one model: a `load` while another load runs, or while a
// model is loaded (a generation may be running on it), is refused ('busy')
// and changes nothing, so the engine keeps serving the model its last
// successful load reported; `unload` first (it waits for a load in
// progress), then load again. A failed load leaves the worker empty and ready
// for the next one. interrupt() stops every request of the worker.

import { loadCore } from './core.js';
import { createSession, refuse } from './protocol.js';

let core = null;
let loading = null; // the load in progress (a promise), so a second one is refused

const host = {
  async load(args, onProgress) {
    if (loading) throw refuse('wgllm: a model is already loading in this worker', 'busy');
    if (core) throw refuse('wgllm: this worker already holds a model (unload it first)', 'busy');
    loading = loadCore({ ...args, onProgress });
    try {
      core = await loading;
    } finally {
      loading = null;
    }
    return core.info;
  },
  core() {
    if (core) return core;
    throw refuse(loading ? 'wgllm: the model is still loading' : 'wgllm: no model loaded', 'state');
  },
  interrupt() {
    if (core) core.interrupt();
  },
  async unload() {
    if (loading) await loading.catch(() => {}); // then unload what it loaded
    if (core) await core.unload();
    core = null;
  },
  status: () => ({ host: 'worker', loaded: !!core, loading: !!loading }),
};

const session = createSession(host, (m) => postMessage(m));
self.onmessage = (ev) => session.handle(ev.data);
