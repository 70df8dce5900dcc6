// serve_common.mjs - what the `wgllm serve` benchmarks (load.mjs, soak.mjs)
// share: their --name value arguments, the synthetic model made once, and a
// server started on a loopback port whose URL it prints.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const BIN = process.env.WGLLM_BIN || join(ROOT, 'build', 'release', 'wgllm');
const TEMPLATE = join(ROOT, '..', 'shared', 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja');

/* the value after --name on the command line, or def */
export const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};

/* `model`, synthesized (`wgllm synth --shape SHAPE --type TYPE --seed 1`) when missing; exits on failure */
export function ensureModel(model, shape, type) {
  if (existsSync(model)) return;
  mkdirSync(dirname(model), { recursive: true });
  const r = spawnSync(BIN, ['synth', '--shape', shape, '--type', type, '--seed', '1', '-o', model], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(1);
}

/* Starts `wgllm serve` on 127.0.0.1 (a free port, the Qwen chat template when
 * ../shared has it; `extra` arguments after the others); resolves to { srv, base, log() } once it listens. The
 * process is killed when this one exits. */
export async function startServe(model, { parallel, threads, extra = [] }) {
  const args = ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--parallel', String(parallel),
    '--threads', String(threads), '--ctx-size', '1024', '--max-queue', '1024', ...extra];
  if (existsSync(TEMPLATE)) args.push('--chat-template', TEMPLATE);
  const srv = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  srv.stderr.on('data', (d) => { log += d; });
  const base = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${log}`)), 120000);
    srv.stderr.on('data', () => {
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    srv.on('exit', (c) => { clearTimeout(t); reject(new Error(`server exited ${c}: ${log}`)); });
  });
  process.on('exit', () => srv.kill('SIGKILL'));
  return { srv, base, log: () => log };
}
