// Helpers shared by the peer tests and the benchmark: where things live, how to run
// the `wgllm` command, and the comparison math (softmax, KL, argmax) in float64.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const WGLLM = process.env.WGLLM_BIN || join(ROOT, 'build/release/wgllm');
export const MODELS = process.env.WGLLM_MODELS || join(ROOT, 'build/models');
/* ../shared beside the checkout (as CI lays it out), or $WGLLM_SHARED */
export const SHARED = process.env.WGLLM_SHARED || resolve(ROOT, '../shared');
export const VOCAB_DIR = join(SHARED, 'vocab');

export const modelPath = (shape, type) => join(MODELS, `${shape}-${type}.gguf`);

/* WebGPU for the wgllm processes the tests start: SwiftShader's Vulkan ICD
 * (Debian's chromium-common) unless VK_ICD_FILENAMES already names one (a
 * real GPU's wins), as the C tests' test_webgpu_open does. */
export function useWebgpuEnv() {
  const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';
  if (!process.env.VK_ICD_FILENAMES && existsSync(icd)) process.env.VK_ICD_FILENAMES = icd;
  process.env.XDG_RUNTIME_DIR ??= '/tmp';
}

/* Runs wgllm with argv (no shell), from the repo root. Returns spawnSync's result
 * with stdout/stderr as strings. */
export function runWgllm(args, { timeoutMs = 120000, input, cpu } = {}) {
  if (!existsSync(WGLLM)) throw new Error(`${WGLLM} missing: run make -j2 first`);
  return spawnSync(WGLLM, args, { cwd: ROOT, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 256 << 20, input,
    env: cpuEnv(cpu) });
}

/* The environment for kernel level `cpu`: 'best' (or undefined) lets wgllm pick
 * the best kernels this CPU has; 'avx2', 'neon' or 'scalar' caps them (WGLLM_CPU);
 * 'webgpu' is the WebGPU backend (backendArgs), with the CPU's best kernels for
 * whatever stays on the host. */
export function cpuEnv(cpu) {
  const env = { ...process.env };
  if (cpu && cpu !== 'best' && cpu !== 'webgpu') env.WGLLM_CPU = cpu;
  else if (cpu === 'best' || cpu === 'webgpu') delete env.WGLLM_CPU;
  return env;
}

/* The command-line arguments that select the backend of kernel level `cpu`. */
export const backendArgs = (cpu) => (cpu === 'webgpu' ? ['-b', 'webgpu'] : []);

/* The kernel levels this machine can run, best first: on an AVX-512 x86-64
 * ['best', 'avx2', 'scalar'], on an AVX2-only one ['best', 'scalar'], on arm64
 * with dot products ['best', 'neon', 'scalar']. $PEER_LEVELS (comma-separated)
 * overrides. One machine so checks the kernels that other CPUs run. */
export function kernelLevels() {
  if (process.env.PEER_LEVELS) return process.env.PEER_LEVELS.split(',');
  let flags = '';
  try {
    flags = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => /^(flags|Features)\s*:/.test(l)) || '';
  } catch { /* not Linux: the best level only */ }
  const has = (f) => new RegExp(`\\b${f}\\b`).test(flags);
  const levels = ['best'];
  if (process.arch === 'x64') {
    if (has('avx512f') && has('avx2')) levels.push('avx2');
    if (has('avx2')) levels.push('scalar');
  } else if (process.arch === 'arm64') {
    if (has('asimddp')) levels.push('neon');
    levels.push('scalar');
  }
  return levels;
}

function mustSucceed(args, r) {
  if (r.error) throw r.error;
  if (r.status !== 0)
    throw new Error(`wgllm ${args.join(' ')} failed (status ${r.status}, signal ${r.signal}): ${r.stderr.slice(-2000)}`);
  return r;
}

/* Last non-empty stdout line parsed as JSON (wgllm prints progress on stderr). */
function lastJson(args, r) {
  const lines = r.stdout.split('\n').map((l) => l.trim()).filter(Boolean);
  if (!lines.length) throw new Error(`wgllm ${args.join(' ')} printed nothing on stdout`);
  try { return JSON.parse(lines[lines.length - 1]); }
  catch (e) { throw new Error(`wgllm ${args.join(' ')}: stdout is not JSON: ${lines[lines.length - 1].slice(0, 300)}`); }
}

/* `wgllm tokenize`: text is a string or a byte buffer. Text that is not safe as one
 * argv element (invalid UTF-8, leading '-', empty, NUL) goes through --file. */
let tmpDir = null;
export function wgllmTokenize(model, text, opts = {}) {
  const { args, r } = wgllmTokenizeRun(model, text, opts);
  return lastIds(args, mustSucceed(args, r));
}

/* `tokenize --ids` prints the ids space-separated on one line (empty for no tokens). */
function lastIds(args, r) {
  const lines = r.stdout.split('\n');
  if (lines.length < 2 || lines[lines.length - 1] !== '')
    throw new Error(`wgllm ${args.join(' ')}: expected one line of ids, got ${JSON.stringify(r.stdout)}`);
  const line = lines[lines.length - 2].trim();
  if (line === '') return [];
  if (!/^[0-9]+( [0-9]+)*$/.test(line)) throw new Error(`wgllm ${args.join(' ')}: not a line of ids: ${JSON.stringify(line)}`);
  return line.split(' ').map(Number);
}

/* Many texts (strings or byte Buffers, none holding a NUL) through one `wgllm
 * tokenize --split0` process: an array with, per text, its ids or an Error
 * naming what wgllm said. */
export function wgllmTokenizeMany(model, texts, { addSpecial = true, parseSpecial = false } = {}) {
  if (texts.length === 0) return [];
  tmpDir ??= mkdtempSync(join(tmpdir(), 'wgllm-peer-'));
  const f = join(tmpDir, 'texts.bin');
  const parts = [];
  for (const t of texts) {
    const b = typeof t === 'string' ? Buffer.from(t, 'utf8') : Buffer.from(t);
    if (b.includes(0)) throw new Error('wgllmTokenizeMany: a text holds a NUL byte');
    parts.push(b, Buffer.from([0]));
  }
  writeFileSync(f, Buffer.concat(parts));
  const args = ['tokenize', '-m', model, '--file', f, '--split0', '--ids'];
  if (!addSpecial) args.push('--no-special');
  if (parseSpecial) args.push('--parse-special');
  const r = mustSucceed(args, runWgllm(args));
  const lines = r.stdout.split('\n');
  if (lines.length !== texts.length + 1 || lines[texts.length] !== '')
    throw new Error(`wgllm ${args.join(' ')}: ${lines.length - 1} lines for ${texts.length} texts`);
  return lines.slice(0, texts.length).map((line) => {
    if (line.startsWith('error: ')) return new Error(line);
    if (line === '') return [];
    if (!/^[0-9]+( [0-9]+)*$/.test(line)) return new Error(`not a line of ids: ${JSON.stringify(line)}`);
    return line.split(' ').map(Number);
  });
}

/* The same, returning the raw process result (for inputs without a reference). */
export function wgllmTokenizeRaw(model, text, opts = {}) {
  return wgllmTokenizeRun(model, text, opts).r;
}

function wgllmTokenizeRun(model, text, { addSpecial = true, parseSpecial = false } = {}) {
  const args = ['tokenize', '-m', model];
  const isStr = typeof text === 'string';
  if (isStr && text.length > 0 && !text.startsWith('-') && !text.includes('\0')) {
    args.push('-p', text);
  } else {
    tmpDir ??= mkdtempSync(join(tmpdir(), 'wgllm-peer-'));
    const f = join(tmpDir, 'text.bin');
    writeFileSync(f, isStr ? Buffer.from(text, 'utf8') : Buffer.from(text));
    args.push('--file', f);
  }
  if (!addSpecial) args.push('--no-special');
  if (parseSpecial) args.push('--parse-special');
  args.push('--ids');
  return { args, r: runWgllm(args) };
}
process.on('exit', () => { if (tmpDir) rmSync(tmpDir, { recursive: true, force: true }); });

/* `wgllm logits`: returns an array of Float32Array rows (n_tokens x n_vocab). */
export function wgllmLogits(model, tokens, nVocab, { threads = 2, cpu, batch } = {}) {
  tmpDir ??= mkdtempSync(join(tmpdir(), 'wgllm-peer-'));
  const out = join(tmpDir, 'logits.f32');
  const args = ['logits', '-m', model, '--tokens', tokens.join(','), '-o', out, '-t', String(threads), ...backendArgs(cpu)];
  if (batch) args.push('--batch', String(batch));
  mustSucceed(args, runWgllm(args, { cpu }));
  const buf = readFileSync(out);
  if (buf.length !== tokens.length * nVocab * 4)
    throw new Error(`wgllm logits wrote ${buf.length} bytes, expected ${tokens.length} x ${nVocab} x 4`);
  const all = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const rows = [];
  for (let i = 0; i < tokens.length; i++) rows.push(all.slice(i * nVocab, (i + 1) * nVocab));
  return rows;
}

export function wgllmGreedy(model, promptIds, n, { cpu } = {}) {
  const args = ['run', '-m', model, '--prompt-ids', promptIds.join(','), '-n', String(n), '--ids', ...backendArgs(cpu)];
  return lastJson(args, mustSucceed(args, runWgllm(args, { cpu })));
}

/* The machine's memory read bandwidth as `wgllm bench --membw` measures it: { membw_gb_s, threads }. */
export function wgllmMembw(threads = 2) {
  const args = ['bench', '--membw', '-t', String(threads), '--json'];
  return lastJson(args, mustSucceed(args, runWgllm(args, { timeoutMs: 300000 })));
}

export function wgllmBench(model, { pp = 128, tg = 32, reps = 3, threads = 2 } = {}) {
  const args = ['bench', '-m', model, '-p', String(pp), '-n', String(tg), '-r', String(reps), '-t', String(threads), '--json'];
  return lastJson(args, mustSucceed(args, runWgllm(args, { timeoutMs: 1800000 })));
}

// ---- comparison math (float64) ----

/* log-softmax of raw logits, in float64. */
export function logSoftmax(logits) {
  let m = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > m) m = logits[i];
  let s = 0;
  for (let i = 0; i < logits.length; i++) s += Math.exp(logits[i] - m);
  const lse = m + Math.log(s);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i] - lse;
  return out;
}

/* KL(p || q) = sum p (log p - log q) with both given as log-probabilities; terms with
 * p == 0 contribute 0. A q of -Infinity where p > 0 gives Infinity (a real bug). */
export function klLog(logP, logQ) {
  let kl = 0;
  for (let i = 0; i < logP.length; i++) {
    const lp = logP[i];
    if (lp === -Infinity) continue;
    kl += Math.exp(lp) * (lp - logQ[i]);
  }
  return Math.max(kl, 0);
}

export function argmax(row) {
  let m = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[m]) m = i;
  return m;
}

export function hasNonFinite(row) {
  for (let i = 0; i < row.length; i++) if (!Number.isFinite(row[i])) return true;
  return false;
}
