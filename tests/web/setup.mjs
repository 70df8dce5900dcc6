// setup.mjs - what the browser tests share: where the repo, the native tool
// and the synthetic models are, playwright-core's Chromium, the static server
// (web/serve.mjs), and the Chromium flags of a headless run.

import { execFileSync } from 'node:child_process';
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
