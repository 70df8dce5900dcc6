// browser.mjs - memory and speed of the browser package against the native
// binary on the same model (TinyLlama-1.1B shape, Q4_0 by default): for each
// configuration a fresh headless Chromium (Debian's, driven by playwright-core,
// the flags of tests/web/browser.test.mjs, the server of web/serve.mjs) loads
// the model in the worker engine and generates greedily; node samples the
// memory of every process of that browser every ~100 ms (the sum of PSS from
// /proc/PID/smaps_rollup, and of RSS) during load and generation. Native runs
// (`/usr/bin/time -v wgllm run`) are sampled the same way. Prints one markdown
// table. A benchmark, not a test: slow (minutes); run it through
// bench/browser.sh, which builds what is missing.
//
//   node bench/browser.mjs [--model build/models/tinyllama-1.1b-q4_0.gguf]
//        [--prompt TEXT] [-n 16] [--gpu-prompt TEXT] [--gpu-n 4] [--gpu-timeout 300]
//        [--only cpu1,cpu2,opfs,webgpu,webgpu-opfs,webgpu-heap,native-cpu,native-webgpu,native-webgpu-stream,
//                wllama-cpu1,wllama-cpu2,wllama-webgpu]
// The wllama rows run the peer (npm @wllama/wllama, llama.cpp compiled to wasm,
// installed under bench/wllama by bench/browser.sh) in the same browser on the
// same file: wasm CPU with 1 and 2 threads, and its WebGPU attempt (all layers
// asked for the GPU; what it actually ran on comes from its own log).
// Env: WGLLM_BIN (default build/release/wgllm); WGLLM_WEB_VERBOSE=1 echoes the page's console.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(root, 'web', 'package.json'));
const { chromium } = require('playwright-core');
const { startServer } = await import(path.join(root, 'web', 'serve.mjs'));

const arg = (name, def) => {
  const i = process.argv.lastIndexOf(name); // the last one: bench/browser.sh passes its --model first
  return i > 0 ? process.argv[i + 1] : def;
};
const BIN = process.env.WGLLM_BIN || path.join(root, 'build', 'release', 'wgllm');
const MODEL = path.resolve(arg('--model', path.join(root, 'build', 'models', 'tinyllama-1.1b-q4_0.gguf')));
const PROMPT = arg('--prompt', 'Once upon a time, in a small village at the edge of a forest, there lived');
const GPU_PROMPT = arg('--gpu-prompt', 'Once upon a time');
const N = Number(arg('-n', 16));
const GPU_N = Number(arg('--gpu-n', 4));
const GPU_TIMEOUT_S = Number(arg('--gpu-timeout', 300));
const ONLY = arg('--only', 'native-cpu,native-webgpu,native-webgpu-stream,cpu1,cpu2,opfs,webgpu,webgpu-opfs,webgpu-heap,' +
                 'wllama-cpu1,wllama-cpu2,wllama-webgpu').split(',');
const WLLAMA = path.join(root, 'bench', 'wllama', 'node_modules', '@wllama', 'wllama', 'esm');
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const FLAGS = ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan',
  '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'];
const MiB = 1048576;

if (!fs.existsSync(MODEL)) { console.error(`browser bench: no model ${MODEL} (bench/browser.sh makes it)`); process.exit(1); }
if (!fs.existsSync(path.join(root, 'web', 'dist', 'wgllm.js'))) { console.error('browser bench: web/dist is not built (make wasm)'); process.exit(1); }

// ---- memory of a process tree: every descendant of this node process ----

function descendants(rootPid) {
  const kids = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let stat;
    try { stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8'); } catch { continue; }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!kids.has(ppid)) kids.set(ppid, []);
    kids.get(ppid).push(Number(d));
  }
  const out = [];
  const todo = [...(kids.get(rootPid) || [])];
  while (todo.length) {
    const p = todo.pop();
    out.push(p);
    todo.push(...(kids.get(p) || []));
  }
  return out;
}

/** {pss, rss, n} in bytes over the descendants of this process. */
function treeMemory() {
  let pss = 0, rss = 0, n = 0;
  for (const p of descendants(process.pid)) {
    let t;
    try { t = fs.readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'); } catch { continue; }
    const kb = (k) => Number((t.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm')) || [0, 0])[1]);
    pss += kb('Pss') * 1024;
    rss += kb('Rss') * 1024;
    n++;
  }
  return { pss, rss, n };
}

/** Samples treeMemory() every 100 ms; mark() (a new phase) and stop() read the
 * peaks. quiet() stops the periodic samples until the next mark(): one reading
 * of smaps_rollup over the browser's processes costs ~25 ms of a core, which
 * at 10 Hz took 25% off the 2-thread wasm decode on a 2-core machine (19.5 ->
 * 14.7 tok/s), so generation runs unsampled and its memory is read when it
 * ends (the KV cache and the scratch buffers are allocated by then). */
function sampler() {
  let cur = { pss: 0, rss: 0, procs: 0 };
  const all = { pss: 0, rss: 0, procs: 0 };
  const take = () => {
    const m = treeMemory();
    for (const o of [cur, all]) {
      o.pss = Math.max(o.pss, m.pss);
      o.rss = Math.max(o.rss, m.rss);
      o.procs = Math.max(o.procs, m.n);
    }
  };
  let timer = setInterval(take, 100);
  return {
    mark() {
      take();
      const p = cur;
      cur = { pss: 0, rss: 0, procs: 0 };
      take();
      if (!timer) timer = setInterval(take, 100);
      return p;
    },
    quiet() { take(); clearInterval(timer); timer = null; },
    stop() { take(); clearInterval(timer); timer = null; return all; },
  };
}

const mib = (b) => (b / MiB).toFixed(0);
const fix = (x, d = 1) => (x == null || Number.isNaN(x) ? '-' : x.toFixed(d));

// ---- native: /usr/bin/time -v wgllm run ----

async function native(backend, prompt, n, timeoutS, extra = []) {
  const env = { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR || '/tmp' };
  if (backend === 'webgpu' && !env.VK_ICD_FILENAMES && fs.existsSync(SWIFTSHADER_ICD)) env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  const args = ['-v', BIN, 'run', '-m', MODEL, '-p', prompt, '-n', String(n), '-t', '1', '--ignore-eos', '--backend', backend, ...extra];
  const s = sampler();
  const t0 = performance.now();
  const { code, stderr } = await new Promise((resolve) => {
    // its own process group, so that a timeout ends wgllm too, not only time(1)
    const c = spawn('/usr/bin/time', args, { env, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
    let err = '';
    const timer = setTimeout(() => { err += `\nover ${timeoutS} s: skipped`; process.kill(-c.pid, 'SIGKILL'); }, timeoutS * 1000);
    c.on('exit', () => clearTimeout(timer));
    c.stderr.on('data', (d) => { err += d; });
    c.on('close', (code) => resolve({ code, stderr: err }));
  });
  const wall = (performance.now() - t0) / 1000;
  const peak = s.stop();
  if (code !== 0) throw new Error(`native ${backend} failed (${code}): ${stderr.trim().split('\n').at(-1)}`);
  const m = stderr.match(/prompt: (\d+) tokens, ([\d.]+) tok\/s \| generation: (\d+) tokens, ([\d.]+) tok\/s/);
  const maxRss = Number((stderr.match(/Maximum resident set size \(kbytes\): (\d+)/) || [0, 0])[1]) * 1024;
  const gpu = (stderr.match(/GPU memory ([\d.]+) MiB/) || [])[1];
  const [np, pp, ng, tg] = m ? [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])] : [0, NaN, 0, NaN];
  // the load (and process start) is what the run spent outside prompt and generation
  const load = wall - np / pp - (ng > 1 ? (ng - 1) / tg : 0);
  return { peakPss: peak.pss, peakRss: maxRss, load, pp, tg, promptTokens: np, genTokens: ng,
    note: `max RSS from time -v${gpu ? `; GPU memory ${gpu} MiB` : ''}` };
}

// ---- the browser ----

// A fresh browser on the blank page with the package imported; with a profile
// folder (persistent: OPFS outlives the browser), else a throwaway one.
async function openBrowser(server, profile) {
  const opts = { executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, timeout: 60000 };
  const ctx = profile ? await chromium.launchPersistentContext(profile, opts) : await (await chromium.launch(opts)).newContext();
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.error('[page]', m.text()); });
  await page.goto(`${server.url}/blank.html`);
  await page.evaluate(async () => { window.wgllm = await import('/dist/wgllm.js'); });
  const close = async () => { const b = ctx.browser(); await ctx.close(); if (b) await b.close(); };
  return { page, errors, close };
}

async function inBrowser(server, { backend, threads, n, prompt, opfs, timeoutS, streamWeights = true }) {
  const url = `/models/${path.basename(MODEL)}`;
  let model = url;
  let profile = null;
  if (opfs) { // a first browser downloads the model into OPFS (not measured); a second one loads it from there
    profile = fs.mkdtempSync(path.join(os.tmpdir(), 'wgllm-bench-profile-'));
    const b = await openBrowser(server, profile);
    try {
      const name = await b.page.evaluate(async (url) => {
        const e = await wgllm.createWorkerEngine({ model: url, backend: 'cpu', store: true, streamWeights: false });
        await e.unload();
        return (await wgllm.listModels()).find((m) => m.complete)?.name;
      }, url);
      if (!name) throw new Error('the model did not land in OPFS');
      model = `opfs:${name}`;
    } finally {
      await b.close();
    }
  }
  const { page, errors, close } = await openBrowser(server, profile);
  let timer, s;
  try {
    await new Promise((r) => setTimeout(r, 500));
    const idle = treeMemory();
    s = sampler();
    const work = (async () => {
      const t0 = performance.now();
      const info = await page.evaluate(async ({ model, backend, threads, streamWeights }) => {
        window.engine = await wgllm.createWorkerEngine({ model, backend, nThreads: threads, store: false, streamWeights });
        return engine.info;
      }, { model, backend, threads, streamWeights });
      const load = (performance.now() - t0) / 1000;
      const loadPeak = s.mark();
      s.quiet();
      const r = await page.evaluate(({ prompt, n }) => engine.completions.create({ prompt, max_tokens: n, temperature: 0,
        ignore_eos: true }), { prompt, n });
      await new Promise((r) => setTimeout(r, 300));
      const genPeak = s.mark();
      const all = s.stop();
      await page.evaluate(() => engine.unload());
      return { info, load, loadPeak, genPeak, all, r };
    })();
    work.catch(() => {}); // after a timeout the browser closes under it
    const res = await Promise.race([work, new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`over ${timeoutS} s: skipped`)), timeoutS * 1000);
    })]);
    if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
    const x = res.r.usage.extra;
    return { idlePss: idle.pss, loadPss: res.loadPeak.pss, peakPss: res.all.pss, peakRss: res.all.rss,
      procs: res.all.procs, heap: res.info.wasm_memory_bytes, load: res.load, pp: x.prefill_tokens_per_s,
      tg: x.decode_tokens_per_s, promptTokens: res.r.usage.prompt_tokens, genTokens: res.r.usage.completion_tokens,
      note: `${res.info.backend_detail}, ${res.info.threads} thread(s), source ${res.info.source}` +
            (res.info.weights_streamed ? ', weights streamed to the GPU' : ', weights in the wasm heap') +
            (res.info.gpu_memory ? `; GPU memory ${(res.info.gpu_memory / MiB).toFixed(0)} MiB` : '') };
  } finally {
    clearTimeout(timer);
    if (s) s.stop();
    await close();
    if (profile) fs.rmSync(profile, { recursive: true, force: true });
  }
}

// ---- the peer in the browser: wllama ----

// wllama's own worker loads the file by URL and generates greedily; its log
// (llama.cpp's, through the logger) says where the layers went, its timings
// give prefill and decode speed (llama.cpp's, as llama-server reports them).
async function inWllama(server, { threads, gpu, n, prompt, timeoutS }) {
  if (!fs.existsSync(path.join(WLLAMA, 'index.js'))) throw new Error('wllama is not installed (bench/browser.sh installs it into bench/wllama)');
  const { page, errors, close } = await openBrowser(server, null);
  let timer, s;
  try {
    await new Promise((r) => setTimeout(r, 500));
    const idle = treeMemory();
    s = sampler();
    const work = (async () => {
      const t0 = performance.now();
      const info = await page.evaluate(async ({ url, threads, gpu }) => {
        const { Wllama } = await import('/wllama/index.js');
        window.wllamaLog = [];
        const t0 = performance.now(); // each line with the seconds since the load began
        const keep = (...a) => { window.wllamaLog.push(`${((performance.now() - t0) / 1000).toFixed(1)}s ${a.map(String).join(' ')}`); };
        const logger = { debug: keep, log: keep, warn: keep, error: keep };
        window.wllama = new Wllama({ default: '/wllama/wasm/wllama.wasm' }, { logger });
        await wllama.loadModelFromUrl(url, { n_threads: threads, n_ctx: 512, n_gpu_layers: gpu ? 99999 : 0 });
        return { multithread: wllama.isMultithread(), threads: wllama.getNumThreads(), webgpu: wllama.isSupportWebGPU() };
      }, { url: `/models/${path.basename(MODEL)}`, threads, gpu });
      const load = (performance.now() - t0) / 1000;
      const loadPeak = s.mark();
      s.quiet();
      const r = await page.evaluate(({ prompt, n }) => wllama.createCompletion({ prompt, max_tokens: n, temperature: 0,
        ignore_eos: true }), { prompt, n });
      await new Promise((r) => setTimeout(r, 300));
      s.mark();
      const all = s.stop();
      const log = await page.evaluate(() => window.wllamaLog);
      await page.evaluate(() => wllama.exit());
      return { info, load, loadPeak, all, r, log };
    })();
    work.catch(() => {});
    const res = await Promise.race([work, new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`over ${timeoutS} s: skipped`)), timeoutS * 1000);
    })]);
    if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
    if (process.env.WGLLM_WEB_VERBOSE) for (const l of res.log) console.error('[wllama]', l);
    const t = res.r.timings || {};
    // where llama.cpp put the layers and which backends it had, in its own words
    const ran = [...new Set(res.log.filter((l) => /offloaded \d+\/\d+ layers|using device|ggml_webgpu|WebGPU|shader-f16|CPU_REPACK|model buffer size/i.test(l))
      .map((l) => l.replace(/^[\d.]+s /, '').replace(/\s+/g, ' ').trim().slice(0, 160)))].slice(0, 6);
    // the load's phases: the download (into wllama's cache) ends where llama.cpp starts reading
    const at = (re) => { const l = res.log.find((x) => re.test(x)); return l ? Number(l.split('s ')[0]) : null; };
    const read = at(/Loading model\.\.\./), built = at(/llama_context: constructing/);
    return { idlePss: idle.pss, loadPss: res.loadPeak.pss, peakPss: res.all.pss, peakRss: res.all.rss, procs: res.all.procs,
      heap: null, load: res.load, pp: t.prompt_per_second, tg: t.predicted_per_second,
      promptTokens: t.prompt_n ?? res.r.usage?.prompt_tokens, genTokens: t.predicted_n ?? res.r.usage?.completion_tokens,
      note: `wllama 3.13.0, ${res.info.threads} thread(s)${res.info.multithread ? ' (multi-thread build)' : ' (single-thread build)'}, ` +
            `n_gpu_layers ${gpu ? 'all' : 0}, navigator.gpu ${res.info.webgpu ? 'present' : 'absent'}` +
            (read != null ? `; load: download + start ${read.toFixed(1)} s, llama.cpp reading the file ${built != null ? (built - read).toFixed(1) : '?'} s` : '') +
            `; its log: ${ran.join(' | ') || '(nothing on devices)'}` };
  } finally {
    clearTimeout(timer);
    if (s) s.stop();
    await close();
  }
}

// ---- the run ----

const CONFIGS = [
  { id: 'native-cpu', label: 'native `wgllm run`, cpu, 1 thread', run: () => native('cpu', PROMPT, N, 900) },
  { id: 'native-webgpu', label: 'native `wgllm run`, webgpu (Dawn)', run: () => native('webgpu', GPU_PROMPT, GPU_N, GPU_TIMEOUT_S) },
  { id: 'native-webgpu-stream', label: 'native `wgllm run`, webgpu (Dawn), --stream-weights', run: () => native('webgpu', GPU_PROMPT, GPU_N, GPU_TIMEOUT_S, ['--stream-weights']) },
  { id: 'cpu1', label: 'browser worker, cpu (wasm), 1 thread, URL', run: (sv) => inBrowser(sv, { backend: 'cpu', threads: 1, n: N, prompt: PROMPT, timeoutS: 900 }) },
  { id: 'cpu2', label: 'browser worker, cpu (wasm), 2 threads, URL', run: (sv) => inBrowser(sv, { backend: 'cpu', threads: 2, n: N, prompt: PROMPT, timeoutS: 900 }) },
  { id: 'opfs', label: 'browser worker, cpu (wasm), 1 thread, OPFS', run: (sv) => inBrowser(sv, { backend: 'cpu', threads: 1, n: N, prompt: PROMPT, opfs: true, timeoutS: 900 }) },
  { id: 'webgpu', label: 'browser worker, webgpu, URL (range requests, streamed)', run: (sv) => inBrowser(sv, { backend: 'webgpu', threads: 1, n: GPU_N, prompt: GPU_PROMPT, timeoutS: GPU_TIMEOUT_S }) },
  { id: 'webgpu-opfs', label: 'browser worker, webgpu, OPFS (streamed)', run: (sv) => inBrowser(sv, { backend: 'webgpu', threads: 1, n: GPU_N, prompt: GPU_PROMPT, opfs: true, timeoutS: GPU_TIMEOUT_S }) },
  { id: 'wllama-cpu1', label: 'wllama 3.13.0, cpu (wasm), 1 thread, URL', run: (sv) => inWllama(sv, { threads: 1, gpu: false, n: N, prompt: PROMPT, timeoutS: 900 }) },
  { id: 'wllama-cpu2', label: 'wllama 3.13.0, cpu (wasm), 2 threads, URL', run: (sv) => inWllama(sv, { threads: 2, gpu: false, n: N, prompt: PROMPT, timeoutS: 900 }) },
  { id: 'wllama-webgpu', label: 'wllama 3.13.0, webgpu asked (all layers), 1 thread, URL', run: (sv) => inWllama(sv, { threads: 1, gpu: true, n: GPU_N, prompt: GPU_PROMPT, timeoutS: GPU_TIMEOUT_S }) },
  { id: 'webgpu-heap', label: 'browser worker, webgpu, URL, streamWeights false (via the heap)', run: (sv) => inBrowser(sv, { backend: 'webgpu', threads: 1, n: GPU_N, prompt: GPU_PROMPT, timeoutS: GPU_TIMEOUT_S, streamWeights: false }) },
];

const size = fs.statSync(MODEL).size;
const server = await startServer({ models: path.dirname(MODEL), mounts: fs.existsSync(WLLAMA) ? { '/wllama/': WLLAMA } : {} });
const adapter = await new Promise((resolve) => {
  const env = { ...process.env, VK_ICD_FILENAMES: process.env.VK_ICD_FILENAMES || SWIFTSHADER_ICD, XDG_RUNTIME_DIR: '/tmp' };
  const c = spawn(BIN, ['devices'], { env, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  c.on('close', () => resolve((out.match(/^webgpu: (.*)$/m) || [])[1] || 'none'));
});
console.log(`model: ${path.relative(root, MODEL)} (${mib(size)} MiB); prompt ${JSON.stringify(PROMPT)}; ` +
            `${N} tokens generated on the CPU; on WebGPU prompt ${JSON.stringify(GPU_PROMPT)}, ${GPU_N} generated; greedy`);
console.log(`cpu: ${os.cpus()[0].model}, ${os.cpus().length} cores; native WebGPU adapter: ${adapter}; ` +
            `load average at start ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
const rows = [];
const notes = [];
for (const c of CONFIGS) {
  if (!ONLY.includes(c.id)) continue;
  process.stderr.write(`browser bench: ${c.label} ...\n`);
  try {
    const r = await c.run(server);
    rows.push(`| ${c.label} | ${mib(size)} | ${r.idlePss ? mib(r.idlePss) : '-'} | ${r.loadPss ? mib(r.loadPss) : '-'} | ` +
              `${mib(r.peakPss)} | ${mib(r.peakRss)} | ${r.heap ? mib(r.heap) : '-'} | ${fix(r.load)} | ` +
              `${r.promptTokens}/${r.genTokens} | ${fix(r.pp, 2)} | ${fix(r.tg, 2)} |`);
    notes.push(`- ${c.label}: ${r.note}${r.procs ? `; ${r.procs} processes` : ''}`);
  } catch (e) {
    rows.push(`| ${c.label} | ${mib(size)} | | | ${e.message.split('\n')[0].slice(0, 120)} | | | | | | |`);
  }
}
await server.close();
console.log(`load average at end ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
console.log('| configuration | model MiB | idle MiB | peak load MiB | peak MiB (PSS) | peak RSS MiB | wasm heap MiB | load s | ' +
            'tokens prompt/gen | prefill tok/s | decode tok/s |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
for (const r of rows) console.log(r);
console.log('\nidle: the browser with the page open before the load; peak load: during createWorkerEngine; ' +
            'peak: the whole load + generation (PSS summed over all processes of the browser, sampled every 100 ms during ' +
            'the load and read once when generation ends: sampling during it would take a core from the threads being timed); ' +
            'peak RSS: RSS summed the same way (counts shared pages once per process), native: max RSS from /usr/bin/time -v.');
for (const n of notes) console.log(n);
