// What the tests of `wgllm serve` share: the binary, the synthetic model
// (made once), the chat template, the openai client from tools/peer, and
// servers started on free loopback ports (--port 0) that are all killed by
// stopServers().
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { createRequire } from 'node:module';
import { ROOT, SHARED, WGLLM as BIN } from './wgllm.mjs';

export { ROOT, SHARED, BIN };
export const TEMPLATE = join(SHARED, 'templates', 'Qwen-Qwen2.5-7B-Instruct.jinja');
export const MODEL = join(ROOT, 'build', 'models', 'tiny-q8_0.gguf');
export const MODEL_ID = 'tiny-q8_0.gguf';
export const CTX = 256;

const requirePeer = createRequire(join(ROOT, 'tools', 'peer', 'package.json'));
export const { default: OpenAI } = await import(requirePeer.resolve('openai'));

if (!existsSync(MODEL)) {
  mkdirSync(dirname(MODEL), { recursive: true });
  const r = spawnSync(BIN, ['synth', '--shape', 'tiny', '--type', 'q8_0', '--seed', '1', '-o', MODEL]);
  assert.equal(r.status, 0, String(r.stderr));
}

const servers = [];

/* Starts `wgllm serve` on the tiny model and resolves with { url, proc }. */
export function startServer(extra = []) {
  return startServerWith(['-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', '2',
    '--ctx-size', String(CTX), '--threads', '1', '--chat-template', TEMPLATE, ...extra]);
}

/* The same with the whole argument list of `wgllm serve` (a free port: --port 0). */
export function startServerWith(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ['serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    servers.push(p);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${log}`)), 30000);
    p.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve({ url: m[1], proc: p, log }); }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${log}`)); });
  });
}

export function stopServers() { for (const p of servers) p.kill('SIGKILL'); }

/* Reads a streamed chat answer until its n-th content chunk, then aborts it through ac;
 * resolves with the content chunks read (fewer than n: the answer ended first). */
export async function readThenAbort(stream, ac, n) {
  let k = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content && ++k === n) ac.abort();
    }
  } catch (e) {
    assert.ok(ac.signal.aborted, String(e));
  }
  return k;
}
