// `wgllm split` against llama.cpp: shards written by wgllm load in llama.cpp
// (node-llama-cpp, by the first shard's path, as llama.cpp finds the rest from
// split.count and the file names) and generate the same greedy tokens as
// llama.cpp on the unsplit file and as wgllm on the shards.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModelContext, greedyGenerate } from '../../tools/peer/peer.mjs';
import { modelPath, runWgllm, wgllmGreedy } from '../../tools/peer/wgllm.mjs';

const dir = mkdtempSync(join(tmpdir(), 'wgllm-split-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const PROMPT = [1, 15043, 3186, 29892, 445, 338, 263];

test('llama.cpp loads wgllm shards and generates the same tokens', { timeout: 300000 }, async () => {
  const src = modelPath('tiny', 'q8_0');
  if (!existsSync(src)) {
    const r = runWgllm(['synth', '--shape', 'tiny', '--type', 'q8_0', '-o', src]);
    assert.equal(r.status, 0, r.stderr);
  }
  const prefix = join(dir, 'tiny');
  const r = runWgllm(['split', src, prefix, '--split-max-size', '4M']);
  assert.equal(r.status, 0, r.stderr);
  const shards = readdirSync(dir).filter((f) => f.endsWith('.gguf')).sort();
  assert.ok(shards.length >= 3, `shards: ${shards}`);
  assert.equal(shards[0], `tiny-00001-of-${String(shards.length).padStart(5, '0')}.gguf`);
  const first = join(dir, shards[0]);

  const N = 16;
  const whole = await loadModelContext(src, { contextSize: 64 });
  const want = (await greedyGenerate(whole, PROMPT, N, { keepRows: false })).ids;
  await whole.dispose();
  const split = await loadModelContext(first, { contextSize: 64 });
  const got = (await greedyGenerate(split, PROMPT, N, { keepRows: false })).ids;
  await split.dispose();
  assert.deepEqual(got, want, 'llama.cpp: split model = unsplit model');
  const ours = wgllmGreedy(first, PROMPT, N);
  const ids = Array.isArray(ours) ? ours : ours.ids ?? ours.tokens;
  assert.deepEqual(ids.slice(0, N), want, 'wgllm on the shards = llama.cpp');
});
