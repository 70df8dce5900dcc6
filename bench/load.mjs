// Load benchmark for `wgllm serve`: 1, 8 and 32 concurrent streaming chat
// clients, each phase a bounded time, on loopback. Reports requests/s,
// generated tokens/s, p50/p99 time to first token and errors (must be 0).
//   node bench/load.mjs [--model build/models/tinyllama-1.1b-q4_0.gguf] [--seconds 20]
//        [--parallel 8] [--threads 2] [--max-tokens 32] [--clients 1,8,32] [--replicas N]
// --replicas N (N >= 1): N servers of --threads each behind a gateway
// (`wgllm serve --upstream pool=URL1,...,URLN`) that the clients call instead:
// its aggregate against one server's. Through a gateway ignore_eos is local-only,
// so requests may end early at an end-of-generation token (tok/s counts what came).
// The model is synthesized once if missing. Exits 1 when any request failed.
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { ROOT, arg, ensureModel, startServe } from './serve_common.mjs';

const MODEL = arg('model', join(ROOT, 'build', 'models', 'tinyllama-1.1b-q4_0.gguf'));
const SECONDS = Number(arg('seconds', 20));
const PARALLEL = Number(arg('parallel', 8));
const THREADS = Number(arg('threads', 2));
const MAX_TOKENS = Number(arg('max-tokens', 32));
const CLIENTS = arg('clients', '1,8,32').split(',').map(Number);

const REPLICAS = Number(arg('replicas', 0));

ensureModel(MODEL, 'tinyllama-1.1b', 'q4_0');
const servers = [];
for (let i = 0; i < Math.max(1, REPLICAS); i++) servers.push(await startServe(MODEL, { parallel: PARALLEL, threads: THREADS }));
let { srv, base } = servers[0];
if (REPLICAS > 0) {
  // the gateway forwards only: its own engine gets one thread and one slot
  ({ srv, base } = await startServe(MODEL, { parallel: 1, threads: 1, extra: ['--upstream',
    `pool=${servers.map((s) => `${s.base}/v1`).join(',')}`, '--upstream-check', '0'] }));
}

const TOPICS = ['a dragon', 'the sea', 'a robot', 'winter', 'a city', 'music', 'a garden', 'the moon'];

// One streaming request; resolves with its time to first token and token count.
async function one(i) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: `Write about ${TOPICS[i % TOPICS.length]} (#${i}).` }],
      max_tokens: MAX_TOKENS, temperature: 0.7, seed: i, stream: true,
      ...(REPLICAS > 0 ? { model: 'pool' } : { ignore_eos: true }),
      stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, tokens = 0, buf = '', done = false;
  const dec = new TextDecoder();
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ')) continue;
      const data = ev.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const j = JSON.parse(data);
      if (j.error) throw new Error(j.error.message);
      if (ttft === null && j.choices?.[0]?.delta?.content) ttft = performance.now() - t0;
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  if (!done) throw new Error('stream ended without [DONE]');
  return { ttft: ttft ?? performance.now() - t0, tokens };
}

const pct = (a, p) => (a.length ? a[Math.min(a.length - 1, Math.floor(p / 100 * a.length))] : NaN);

const rows = [];
for (const n of CLIENTS) {
  const end = performance.now() + SECONDS * 1000;
  const ttfts = [];
  let reqs = 0, tokens = 0, errors = 0, seq = 0, firstErr = null;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: n }, async () => {
    while (performance.now() < end) {
      try {
        const r = await one(seq++);
        reqs++;
        tokens += r.tokens;
        ttfts.push(r.ttft);
      } catch (e) {
        errors++;
        firstErr ??= e;
      }
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  ttfts.sort((a, b) => a - b);
  rows.push({ clients: n, seconds: secs.toFixed(1), requests: reqs, 'req/s': (reqs / secs).toFixed(2),
    'tok/s': (tokens / secs).toFixed(1), 'ttft p50 ms': pct(ttfts, 50).toFixed(0),
    'ttft p99 ms': pct(ttfts, 99).toFixed(0), errors });
  if (firstErr) console.error(`clients=${n}: first error: ${firstErr.message}`);
}
console.log(`wgllm serve ${MODEL.split('/').pop()} --parallel ${PARALLEL} --threads ${THREADS}` +
  `${REPLICAS > 0 ? `, ${REPLICAS} of them behind a gateway` : ''}, ` +
  `${MAX_TOKENS} tokens per request, ${SECONDS} s per phase, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.table(rows);
srv.kill('SIGKILL');
for (const s of servers) s.srv.kill('SIGKILL');
process.exit(rows.some((r) => r.errors > 0) ? 1 : 0);
