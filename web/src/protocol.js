// protocol.js - the engine's message protocol, host side: the one
// implementation that both the dedicated worker (worker.js) and the service
// worker (sw-host.js) run. A session is one connection (the worker's global
// port, or one MessagePort per page in the service worker); it answers
// {id, op, args}:
// load -> progress events then {type:'result', value: info}; openai
// {endpoint, body, modelId} -> {type:'started'} (or the refusal as an error),
// {type:'chunk', chunk} events (a stream's JSON texts), then {status, answer,
// timings}; embed; snapshots (save/restore/flush); cancel; interrupt; unload;
// status (what the host reports about itself).
// Errors come back as {type:'error', message, code}: the page rejects with them.
//
// The protocol is defined for whatever arrives: a message that is not
// {id, op, args} or names no known op gets an error reply ('protocol'), never
// an exception that kills the host. What a load means (one model per worker,
// or a model shared by every page of an origin) is the host's: the session
// only asks it (host.load / host.core / host.unload / host.interrupt /
// host.status), so the rules of each live in one place.

export const refuse = (message, code) => { const e = new Error(message); e.code = code; return e; };

/**
 * One connection's session. host: {load(args, onProgress) -> Promise<info>,
 * core() -> the loaded core (throws 'state' when there is none), unload(),
 * interrupt(jobs), status()}; post(message) sends to the connection.
 * Returns {handle(message), close()}: close() cancels the session's requests
 * still running (its page is gone: their tokens would go nowhere).
 */
export function createSession(host, post) {
  const jobs = new Map(); // request id -> cancel()
  const reply = (id, value) => post({ id, type: 'result', value });
  // an OpenAI error keeps its status, type and param (the Error's fields)
  const fail = (id, e) => post({ id, type: 'error', message: e && e.message ? e.message : String(e), code: e && e.code,
    ...(e && e.status !== undefined ? { status: e.status, errorType: e.type, param: e.param } : {}) });

  async function handle(msg) {
    const id = msg != null && typeof msg === 'object' ? msg.id : undefined;
    try {
      if (msg == null || typeof msg !== 'object' || typeof msg.op !== 'string')
        throw refuse('wgllm: a worker message is {id, op, args} with op a string', 'protocol');
      const { op } = msg;
      const args = msg.args ?? {};
      if (typeof args !== 'object') throw refuse(`wgllm: the args of '${op}' must be an object`, 'protocol');
      switch (op) {
      case 'load':
        reply(id, await host.load(args, (progress) => post({ type: 'progress', progress })));
        break;
      case 'openai': {
        // the request's JSON text; the chunks (JSON texts) as they come; a refusal is thrown at once
        const h = host.core().openai(args.endpoint, args.body, args.modelId, (chunk) => post({ id, type: 'chunk', chunk }));
        post({ id, type: 'started' });
        jobs.set(id, h.cancel);
        try {
          reply(id, await h.result);
        } finally {
          jobs.delete(id);
        }
        break;
      }
      case 'route': // the routing policy's decision (createRouter): a JSON text
        reply(id, host.core().route(args.endpoint, args.body, args.targets));
        break;
      case 'embed':
        reply(id, await host.core().embed(args.text, args.opts ?? undefined));
        break;
      case 'snapshots': {
        const c = host.core();
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
        host.interrupt(jobs);
        break;
      case 'unload':
        await host.unload();
        reply(id, true);
        break;
      case 'status':
        reply(id, host.status());
        break;
      default:
        throw refuse(`wgllm: unknown worker operation '${op}'`, 'protocol');
      }
    } catch (e) {
      if (id != null) fail(id, e);
      else post({ id: null, type: 'error', message: e && e.message ? e.message : String(e), code: e && e.code });
    }
  }

  function close() {
    for (const cancel of jobs.values()) cancel();
    jobs.clear();
  }

  return { handle, close, get running() { return jobs.size; } };
}
