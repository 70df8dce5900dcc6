// Soak test for `wgllm serve` (not in the default suite): many concurrent
// streaming clients for minutes, a share of them abandoning their stream
// mid-way, on loopback. Reports errors, cancellations (the server's count
// against the clients'), RSS at start / end / peak, p50/p99 time to first
// token, and whether the server ends idle (no request left behind).
//   node bench/soak.mjs [--minutes 5] [--clients 32] [--cancel 0.25] [--parallel 4]
//        [--threads 2] [--max-tokens 64] [--model build/models/tiny-q8_0.gguf]
// Exits 1 on any error, a leftover request or a server that died.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { ROOT, arg, ensureModel, startServe } from './serve_common.mjs';

const MODEL = arg('model', join(ROOT, 'build', 'models', 'tiny-q8_0.gguf'));
const MINUTES = Number(arg('minutes', 5));
const CLIENTS = Number(arg('clients', 32));
const CANCEL = Number(arg('cancel', 0.25));
const PARALLEL = Number(arg('parallel', 4));
const THREADS = Number(arg('threads', 2));
const MAX_TOKENS = Number(arg('max-tokens', 64));

ensureModel(MODEL, 'tiny', 'q8_0');
const { srv, base } = await startServe(MODEL, { parallel: PARALLEL, threads: THREADS });

const status = (key) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${srv.pid}/status`, 'utf8'))[1]) * 1024;
const metric = async (name) => Number(new RegExp(`^wgllm_${name} (\\S+)$`, 'm')
  .exec(await (await fetch(`${base}/metrics`)).text())[1]);

const TOPICS = ['a dragon', 'the sea', 'a robot', 'winter', 'a city', 'music', 'a garden', 'the moon'];

/* One streaming chat request, abandoned after `abortAfter` pieces when given.
 * Resolves with { ttft, tokens, cancelled }. */
async function one(i, abortAfter) {
  const t0 = performance.now();
  const ac = new AbortController();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ messages: [{ role: 'user', content: `Write about ${TOPICS[i % TOPICS.length]} (#${i}).` }],
      max_tokens: MAX_TOKENS, temperature: 0.7, seed: i, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, tokens = 0, pieces = 0, buf = '', done = false;
  const dec = new TextDecoder();
  try {
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
        if (j.choices?.[0]?.delta?.content) {
          ttft ??= performance.now() - t0;
          if (abortAfter !== undefined && ++pieces >= abortAfter) {
            ac.abort();
            return { ttft, tokens: pieces, cancelled: true };
          }
        }
        if (j.usage) tokens = j.usage.completion_tokens;
      }
    }
  } catch (e) {
    if (ac.signal.aborted) return { ttft, tokens: pieces, cancelled: true };
    throw e;
  }
  if (!done) throw new Error('stream ended without [DONE]');
  return { ttft: ttft ?? performance.now() - t0, tokens, cancelled: false };
}

const pct = (a, p) => (a.length ? a[Math.min(a.length - 1, Math.floor(p / 100 * a.length))] : NaN);
const MiB = (b) => (b / (1 << 20)).toFixed(1);

const rssStart = status('VmRSS');
let rssPeakSeen = rssStart;
const sampler = setInterval(() => { try { rssPeakSeen = Math.max(rssPeakSeen, status('VmRSS')); } catch { /* gone */ } }, 1000);
const end = performance.now() + MINUTES * 60000;
const ttfts = [];
let reqs = 0, tokens = 0, errors = 0, cancels = 0, seq = 0, firstErr = null;
const cancelledBefore = await metric('requests_cancelled_total');
const t0 = performance.now();
await Promise.all(Array.from({ length: CLIENTS }, async () => {
  while (performance.now() < end) {
    const i = seq++;
    // a deterministic share of the requests is abandoned after 1..8 pieces
    const abortAfter = (i * 7919) % 1000 < CANCEL * 1000 ? 1 + (i % 8) : undefined;
    try {
      const r = await one(i, abortAfter);
      reqs++;
      tokens += r.tokens;
      if (r.ttft !== null) ttfts.push(r.ttft);
      if (r.cancelled) cancels++;
    } catch (e) {
      errors++;
      firstErr ??= e;
    }
  }
}));
const secs = (performance.now() - t0) / 1000;
clearInterval(sampler);
// the server settles: every abandoned request cancelled, nothing queued or running
let idle = false;
for (let k = 0; k < 100 && !idle; k++) {
  await new Promise((r) => setTimeout(r, 100));
  idle = (await metric('active_slots')) === 0 && (await metric('queue_depth')) === 0;
}
const cancelledServer = (await metric('requests_cancelled_total')) - cancelledBefore;
const rssEnd = status('VmRSS'), rssPeak = Math.max(status('VmHWM'), rssPeakSeen);
ttfts.sort((a, b) => a - b);
const alive = srv.exitCode === null && (await fetch(`${base}/health`)).status === 200;
console.log(`wgllm serve soak: ${MODEL.split('/').pop()} --parallel ${PARALLEL} --threads ${THREADS}, ${CLIENTS} ` +
  `streaming clients, ${MAX_TOKENS} tokens per request, ${(CANCEL * 100).toFixed(0)}% abandoned, ` +
  `${secs.toFixed(0)} s, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.table([{ requests: reqs, 'req/s': (reqs / secs).toFixed(2), 'tok/s': (tokens / secs).toFixed(1),
  'abandoned (clients)': cancels, 'cancelled (server)': cancelledServer, errors,
  'ttft p50 ms': pct(ttfts, 50).toFixed(0), 'ttft p99 ms': pct(ttfts, 99).toFixed(0),
  'RSS start MiB': MiB(rssStart), 'RSS end MiB': MiB(rssEnd), 'RSS peak MiB': MiB(rssPeak), 'idle at end': idle }]);
if (firstErr) console.error(`first error: ${firstErr.message}`);
srv.kill('SIGKILL');
// an abandoned stream may finish on its own before the server notices: the server's count is at most the clients'
process.exit(errors > 0 || !idle || !alive || cancelledServer > cancels ? 1 : 0);
