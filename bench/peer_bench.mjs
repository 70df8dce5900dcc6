// Speed of wgllm against llama.cpp (node-llama-cpp 3.21.1, prebuilt CPU build) on
// the same GGUF files: prompt processing (pp) and generation (tg) in tokens/s.
//
// usage: node bench/peer_bench.mjs [--peer-only] [--native DIR] [--isa avx2] [-p 128] [-n 32] [-r 3] [-t 2] TYPE=PATH...
//
// Also measures the memory read bandwidth (`wgllm bench --membw`, same threads) and prints each
// decode figure as GB/s of weights read and as a share of that bandwidth.
//
// --native DIR: also llama.cpp built for this CPU (DIR/llama-bench, from
// tools/llamacpp/build.sh --native llama-bench), with llama-bench's own timing
// (-p P -n N -r R -t T, one warm-up run, the median of its samples), in the
// columns "native"; the prebuilt build is not always the stronger peer.
// --isa avx2: the run stands for an AVX2-only CPU (bench/run.sh --isa avx2 sets
// WGLLM_CPU=avx2 and builds DIR without AVX-512); only labels the table.
//
// llama.cpp side (see benchModel in tools/peer/peer.mjs): per repetition, the KV
// cache is cleared, then
//   pp = one llama_decode of all P prompt tokens (one batch; only the last position's
//        logits are computed and sampled greedily), timed alone: P / seconds;
//   tg = N single-token steps (decode 1 token + greedy sample, fed back), timed
//        together after the prompt: N / seconds.
// The model file is read once first (warmFile: every engine then finds it in the page cache),
// and one untimed warm-up (a 16-token prompt + 2 steps) first pages the weights in.
// Context: 512 tokens (or P + N + 16 when longer), batch 512 (or P), default F16 KV cache and flash-attention "auto"
// (llama.cpp's defaults), `threads` fixed through getLlama({maxThreads}) and the
// context's {ideal, min}. The median of r repetitions is reported, as wgllm bench does.
import { loadModelContext, benchModel, seededIds, vocabSize, peerLlama } from '../tools/peer/peer.mjs';
import { wgllmBench, wgllmMembw, WGLLM } from '../tools/peer/wgllm.mjs';
import { existsSync, mkdirSync, writeFileSync, openSync, readSync, closeSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';

const argv = process.argv.slice(2);
const opts = { p: 128, n: 32, r: 3, t: 2, peerOnly: false, native: null, isa: null };
const models = [];
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--peer-only') opts.peerOnly = true;
  else if (a === '--native') opts.native = argv[++i];
  else if (a === '--isa') opts.isa = argv[++i];
  else if (['-p', '-n', '-r', '-t'].includes(a)) opts[a[1]] = Number(argv[++i]);
  else if (a.includes('=')) { const [type, path] = a.split(/=(.*)/s); models.push({ type, path }); }
  else { console.error(`peer_bench: unknown argument ${a}`); process.exit(2); }
}
if (!models.length) { console.error('peer_bench: give TYPE=PATH for each model'); process.exit(2); }

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

/* llama-bench's pp and tg tokens/s on path: the median of its samples. */
function nativeBench(path) {
  const bin = join(opts.native, 'llama-bench');
  const r = spawnSync(bin, ['-m', path, '-p', String(opts.p), '-n', String(opts.n), '-r', String(opts.r), '-t', String(opts.t),
    '-o', 'json'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0)
    throw new Error(`${bin} failed (${r.error ?? r.signal ?? `exit ${r.status}`}): ${(r.stderr ?? '').slice(-1000)}`);
  const out = {};
  for (const t of JSON.parse(r.stdout)) {
    if (t.n_prompt > 0 && t.n_gen === 0) out.pp = { median: median(t.samples_ts), samples: t.samples_ts };
    if (t.n_gen > 0 && t.n_prompt === 0) out.tg = { median: median(t.samples_ts), samples: t.samples_ts };
  }
  if (!out.pp || !out.tg) throw new Error(`${bin}: no pp and tg results in ${r.stdout.slice(0, 500)}`);
  return out;
}

/* Reads the file once so that every engine finds it in the page cache: the F16/BF16 weights
 * stay mapped (not copied) on both sides, and whichever engine ran first on a cold file paid its
 * disk reads in the timed passes (wgllm runs first: its F16 decode read 15.8 then 22.4 tok/s). */
function warmFile(path) {
  const fd = openSync(path, 'r'), buf = Buffer.allocUnsafe(64 << 20);
  try { while (readSync(fd, buf, 0, buf.length, null) > 0); } finally { closeSync(fd); }
}

await peerLlama({ threads: opts.t });
// the machine's memory read bandwidth at the same thread count: each decode figure is also given
// as GB/s of weights (the bytes a token reads, `wgllm bench`'s decode_bytes) and as a share of it
const membw = opts.peerOnly ? null : wgllmMembw(opts.t).membw_gb_s;
const results = [];
for (const { type, path } of models) {
  if (!existsSync(path)) { console.error(`peer_bench: ${path} missing`); process.exit(1); }
  const res = { type, path };
  warmFile(path);
  if (!opts.peerOnly) {
    process.stderr.write(`wgllm bench ${type} ...\n`);
    res.wgllm = wgllmBench(path, { pp: opts.p, tg: opts.n, reps: opts.r, threads: opts.t });
  }
  process.stderr.write(`llama.cpp bench ${type} ...\n`);
  // 512 as llama.cpp's default, or what a long prompt needs (in one batch: llama.cpp splits it into ubatches of 512)
  const ctx = Math.max(512, opts.p + opts.n + 16);
  const mc = await loadModelContext(path, { threads: opts.t, contextSize: ctx, batchSize: Math.max(512, opts.p), kvF32: false,
    flashAttention: 'auto' });
  try {
    const nv = vocabSize(mc.model);
    await benchModel(mc, seededIds(16, 100, nv - 100, 7), 2, 1);   // warm-up, untimed
    res.llama = await benchModel(mc, seededIds(opts.p, 100, nv - 100), opts.n, opts.r);
  } finally {
    await mc.dispose();
  }
  if (opts.native) {
    process.stderr.write(`llama-bench (native) ${type} ...\n`);
    res.native = nativeBench(path);
  }
  results.push(res);
}

const f = (x) => (x == null ? '-' : x.toFixed(1));
const ratio = (a, b) => (a == null || b == null ? '-' : (a / b).toFixed(2));
const nat = opts.native != null;
const lines = [
  `pp ${opts.p} tokens, tg ${opts.n} tokens, ${opts.t} threads, median of ${opts.r}; ratio = wgllm / llama.cpp` +
    (nat ? ' (prebuilt); native = llama.cpp built for this CPU (llama-bench)' : '') +
    (opts.isa === 'avx2' ? `; AVX2 only: wgllm with WGLLM_CPU=${process.env.WGLLM_CPU ?? '?'}, native built without AVX-512, ` +
      'prebuilt = the variant node-llama-cpp picks for this CPU' : ''),
  '| type | wgllm pp t/s | llama.cpp pp t/s | ratio |' + (nat ? ' native pp t/s |' : '') +
    ' wgllm tg t/s | llama.cpp tg t/s | ratio |' + (nat ? ' native tg t/s |' : ''),
  '|------|-------------:|-----------------:|------:|' + (nat ? '-------------:|' : '') +
    '-------------:|-----------------:|------:|' + (nat ? '-------------:|' : ''),
];
for (const r of results) {
  const wp = r.wgllm?.pp?.median, lp = r.llama.pp.median, wt = r.wgllm?.tg?.median, lt = r.llama.tg.median;
  lines.push(`| ${r.type} | ${f(wp)} | ${f(lp)} | ${ratio(wp, lp)} |` + (nat ? ` ${f(r.native.pp.median)} |` : '') +
    ` ${f(wt)} | ${f(lt)} | ${ratio(wt, lt)} |` + (nat ? ` ${f(r.native.tg.median)} |` : ''));
}
if (membw) {
  lines.push('', `memory read bandwidth (wgllm bench --membw -t ${opts.t}): ${membw.toFixed(2)} GB/s; decode as GB/s of weights ` +
    '(the bytes a token reads x tg t/s) and as a share of it:',
  '| type | MiB read a token | wgllm tg GB/s | share | llama.cpp tg GB/s | share |' + (nat ? ' native tg GB/s | share |' : ''),
  '|------|-----------------:|--------------:|------:|------------------:|------:|' + (nat ? '---------------:|------:|' : ''));
  for (const r of results) {
    const b = r.wgllm?.decode_bytes;
    if (!b) continue;
    const gb = (t) => (t == null ? null : (b * t) / 1e9);
    const cell = (t) => (t == null ? '- | -' : `${gb(t).toFixed(1)} | ${Math.round((100 * gb(t)) / membw)}%`);
    lines.push(`| ${r.type} | ${(b / 1048576).toFixed(1)} | ${cell(r.wgllm.tg.median)} | ${cell(r.llama.tg.median)} |` +
      (nat ? ` ${cell(r.native.tg.median)} |` : ''));
  }
}
console.log(lines.join('\n'));

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
mkdirSync(join(root, 'build/bench'), { recursive: true });
const out = join(root, 'build/bench/results.json');
writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), cpu: os.cpus()[0]?.model, ncpu: os.cpus().length, membw_gb_s: membw, wgllm: opts.peerOnly ? null : WGLLM, opts, results }, null, 2));
console.error(`raw numbers: ${out}`);
