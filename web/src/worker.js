// worker.js - the Web Worker side of createWorkerEngine (wgllm.js): owns one
// wasm core (core.js) and answers the page's messages {id, op, args}:
// load -> progress events then {type:'result', value: info}; generate ->
// {type:'text'} events then the result; embed; snapshots (save/restore/flush); cancel;
// interrupt; unload.
// Errors come back as {type:'error', message, code}: the page rejects with them.

import { loadCore } from './core.js';

let core = null;
const jobs = new Map(); // request id -> cancel()

const reply = (id, value) => postMessage({ id, type: 'result', value });
const fail = (id, e) => postMessage({ id, type: 'error', message: e && e.message ? e.message : String(e), code: e && e.code });

self.onmessage = async (ev) => {
  const { id, op, args } = ev.data;
  try {
    switch (op) {
    case 'load': {
      if (core) throw new Error('wgllm: this worker already holds a model');
      core = await loadCore({ ...args, onProgress: (progress) => postMessage({ type: 'progress', progress }) });
      reply(id, core.info);
      break;
    }
    case 'generate': {
      if (!core) throw new Error('wgllm: no model loaded');
      const h = core.generate(args, (text) => postMessage({ id, type: 'text', text }));
      jobs.set(id, h.cancel);
      try {
        reply(id, await h.result);
      } finally {
        jobs.delete(id);
      }
      break;
    }
    case 'embed': {
      if (!core) throw new Error('wgllm: no model loaded');
      reply(id, await core.embed(args.text, args.opts));
      break;
    }
    case 'snapshots': {
      if (!core) throw new Error('wgllm: no model loaded');
      const { op: what, bytes } = args;
      reply(id, what === 'save' ? await core.saveSnapshots() : what === 'restore' ? await core.restoreSnapshots(bytes)
        : await core.flushSnapshots());
      break;
    }
    case 'cancel': {
      const c = jobs.get(args.id);
      if (c) c();
      break;
    }
    case 'interrupt':
      if (core) core.interrupt();
      break;
    case 'unload':
      if (core) await core.unload();
      core = null;
      reply(id, true);
      break;
    default:
      throw new Error(`wgllm: unknown worker operation '${op}'`);
    }
  } catch (e) {
    if (id) fail(id, e);
    else console.error(e);
  }
};
