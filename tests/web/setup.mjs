// setup.mjs - what the browser tests share: where the repo, the native tool
// and the synthetic models are, playwright-core's Chromium, the static server
// (web/serve.mjs), the Chromium flags of a headless run, a page opened on
// that server, and the native tool's answers (`wgllm run`, `wgllm serve`)
// that the browser's are compared with.

import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(root, 'web', 'package.json'));
export const { chromium } = require('playwright-core');
export const { startServer } = await import(path.join(root, 'web', 'serve.mjs'));

export const WGLLM = path.join(root, 'build', 'release', 'wgllm');
export const MODELS = path.join(root, 'build', 'models');
/* headless Chromium without the network services a test has no use for */
export const FLAGS = ['--headless=new', '--no-sandbox', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run', '--disable-quic'];
/* the same with WebGPU on SwiftShader (Vulkan), which has no shader-f16 */
export const WEBGPU_FLAGS = [...FLAGS, '--enable-unsafe-webgpu', '--enable-features=Vulkan',
  '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader'];

/* build/models/NAME, synthesized (`wgllm synth --shape SHAPE --type TYPE`) when missing; returns its path. */
export function synthModel(name, shape, type) {
  const file = path.join(MODELS, name);
  if (!fs.existsSync(file)) {
    fs.mkdirSync(MODELS, { recursive: true });
    execFileSync(WGLLM, ['synth', '--shape', shape, '--type', type, '-o', file]);
  }
  return file;
}

/* The static server over build/models and headless Chromium on its blank page
 * (web/dist must be built: `make wasm`); resolves with { files, browser, page }. */
export async function openPage(flags = FLAGS) {
  assert.ok(fs.existsSync(path.join(root, 'web', 'dist', 'wgllm.js')), 'web/dist is built (make wasm)');
  const files = await startServer({ models: MODELS });
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: flags, timeout: 60000 });
  const page = await browser.newPage();
  page.on('console', (m) => { if (process.env.WGLLM_WEB_VERBOSE) console.log('[page]', m.text()); });
  await page.goto(`${files.url}/blank.html`);
  return { files, browser, page };
}

/* Native `wgllm run` of build/models/MODEL on a backend (one thread, greedy,
 * --ignore-eos): the generated text and its generation tok/s. */
export function nativeRun(prompt, n, backend, model) {
  const env = { VK_ICD_FILENAMES: '/usr/lib/chromium/vk_swiftshader_icd.json', XDG_RUNTIME_DIR: '/tmp', ...process.env };
  delete env.WGLLM_CPU;
  const r = spawnSync(WGLLM, ['run', '-m', path.join(MODELS, model), '-p', prompt, '-n', String(n), '-t', '1',
    '--ignore-eos', '--backend', backend], { encoding: 'utf8', timeout: 60000, env });
  assert.equal(r.status, 0, `native run --backend ${backend}: ${r.stderr}`);
  assert.ok(r.stdout.startsWith(prompt));
  const m = r.stderr.match(/generation: \d+ tokens, ([\d.]+) tok\/s/);
  return { text: r.stdout.slice(prompt.length).replace(/\n$/, ''), tokS: m ? Number(m[1]) : 0, stderr: r.stderr };
}

/* Native `wgllm serve` of model on a loopback port (one slot, one thread, the
 * given chat template, then `extra` flags); resolves with { proc, url }. */
export function startNativeServe(model, template, extra = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(WGLLM, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--parallel', '1',
      '--threads', '1', '--chat-template', template, ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    const timer = setTimeout(() => reject(new Error(`wgllm serve did not start: ${log}`)), 30000);
    p.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: m[1] }); }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`wgllm serve exited ${code}: ${log}`)); });
  });
}
