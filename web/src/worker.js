// worker.js - the Web Worker side of createWorkerEngine (wgllm.js): owns one
// wasm core (core.js) and answers the page's messages {id, op, args}:
// load -> progress events then {type:'result', value: info}; openai
// {endpoint, body, modelId} -> {type:'started'} (or the refusal as an error),
// {type:'chunk', chunk} events (a stream's JSON texts), then {status, answer,
// timings}; embed; snapshots (save/restore/flush); cancel; interrupt; unload.
// Errors come back as {type:'error', message, code}: the page rejects with them.
//
// The protocol is defined for whatever arrives: a message that is not
// {id, op, args} or names no known op gets an error reply ('protocol'), never
// an exception that kills the worker. A worker holds one model: a `load`
// while another load runs, or while a model is loaded (a generation may be
// running on it), is refused ('busy') and changes nothing, so the engine
// keeps serving the model its last successful load reported; `unload` first
// (it waits for a load in progress), then load again. A failed load leaves
// the worker empty and ready for the next one.

import { loadCore } from './core.js';

let core = null;
let loading = null; // the load in progress (a promise), so a second one is refused
const jobs = new Map(); // request id -> cancel()

const reply = (id, value) => postMessage({ id, type: 'result', value });
// an OpenAI error keeps its status, type and param (the Error's fields)
const fail = (id, e) => postMessage({ id, type: 'error', message: e && e.message ? e.message : String(e), code: e && e.code,
  ...(e && e.status !== undefined ? { status: e.status, errorType: e.type, param: e.param } : {}) });
const refuse = (message, code) => { const e = new Error(message); e.code = code; return e; };
const needCore = () => {
  if (core) return core;
  throw refuse(loading ? 'wgllm: the model is still loading' : 'wgllm: no model loaded', 'state');
};

self.onmessage = async (ev) => {
  const msg = ev.data;
  const id = msg != null && typeof msg === 'object' ? msg.id : undefined;
  try {
    if (msg == null || typeof msg !== 'object' || typeof msg.op !== 'string')
      throw refuse('wgllm: a worker message is {id, op, args} with op a string', 'protocol');
    const { op } = msg;
    const args = msg.args ?? {};
    if (typeof args !== 'object') throw refuse(`wgllm: the args of '${op}' must be an object`, 'protocol');
    switch (op) {
    case 'load': {
      if (loading) throw refuse('wgllm: a model is already loading in this worker', 'busy');
      if (core) throw refuse('wgllm: this worker already holds a model (unload it first)', 'busy');
      loading = loadCore({ ...args, onProgress: (progress) => postMessage({ type: 'progress', progress }) });
      try {
        core = await loading;
      } finally {
        loading = null;
      }
      reply(id, core.info);
      break;
    }
    case 'openai': {
      // the request's JSON text; the chunks (JSON texts) as they come; a refusal is thrown at once
      const h = needCore().openai(args.endpoint, args.body, args.modelId, (chunk) => postMessage({ id, type: 'chunk', chunk }));
      postMessage({ id, type: 'started' });
      jobs.set(id, h.cancel);
      try {
        reply(id, await h.result);
      } finally {
        jobs.delete(id);
      }
      break;
    }
    case 'route': { // the routing policy's decision (createRouter): a JSON text
      reply(id, needCore().route(args.endpoint, args.body, args.targets));
      break;
    }
    case 'embed': {
      reply(id, await needCore().embed(args.text, args.opts ?? undefined));
      break;
    }
    case 'snapshots': {
      const c = needCore();
      const { op: what, bytes } = args;
      if (what !== 'save' && what !== 'restore' && what !== 'flush')
        throw refuse(`wgllm: unknown snapshots operation '${what}' (save, restore or flush)`, 'protocol');
      if (what === 'restore' && !(bytes instanceof Uint8Array || bytes instanceof ArrayBuffer))
        throw refuse('wgllm: snapshots restore needs bytes (a Uint8Array or an ArrayBuffer)', 'argument');
      reply(id, what === 'save' ? await c.saveSnapshots() : what === 'restore' ? await c.restoreSnapshots(bytes)
        : await c.flushSnapshots());
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
      if (loading) await loading.catch(() => {}); // then unload what it loaded
      if (core) await core.unload();
      core = null;
      reply(id, true);
      break;
    default:
      throw refuse(`wgllm: unknown worker operation '${op}'`, 'protocol');
    }
  } catch (e) {
    if (id != null) fail(id, e);
    else postMessage({ id: null, type: 'error', message: e && e.message ? e.message : String(e), code: e && e.code });
  }
};
