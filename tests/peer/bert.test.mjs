// bert and nomic-bert embedding models against llama.cpp (node-llama-cpp's embedding context):
// synthetic tiny-bert (mean pooling) at f32, f16, q8_0, q4_0 and bge-small's
// shape (CLS pooling, 12 layers) at f16 and q8_0, tiny-nomic-bert (RoPE,
// SwiGLU, a fused attn_qkv) at f32 and q8_0, each embedded by `wgllm serve`'s
// /v1/embeddings (several inputs per request, so that sequences share the
// encoder's passes) and by the official openai client; cosine >= 0.9999 per
// input, inputs from one word to past 64 tokens (bge-small: past 256). Also
// the refusals a server of an embedding model gives: text generation, an input
// past the position table. WebGPU rows (`-b webgpu`, SwiftShader here: skipped
// without an adapter unless WGLLM_REQUIRE_WEBGPU is set): tiny-bert q8_0 and
// tiny-nomic-bert f32 through the WebGPU encoder, the same bound.
//
// Like for like: llama.cpp returns the pooled hidden state unnormalized
// (llama_get_embeddings_seq; node-llama-cpp passes it on as is); wgllm's
// /v1/embeddings normalizes (OpenAI's convention), which a cosine does not
// see, and the raw norms are compared through wgllm_embed in test_encoder.c.
// llama.cpp runs without flash attention here (defaultContextFlashAttention:
// false), where its encoder's attention is all f32, as wgllm's is.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { peerLlama } from '../../tools/peer/peer.mjs';
import { OpenAI, startServerWith, stopServers } from '../../tools/peer/serve.mjs';
import { WGLLM, modelPath, runWgllm, useWebgpuEnv } from '../../tools/peer/wgllm.mjs';

const MODELS = [
  ['tiny-bert', 'f32'], ['tiny-bert', 'f16'], ['tiny-bert', 'q8_0'], ['tiny-bert', 'q4_0'], ['bge-small', 'f16'],
  ['bge-small', 'q8_0'], ['tiny-nomic-bert', 'f32'], ['tiny-nomic-bert', 'q8_0'],
  // the WebGPU encoder (a pass of these four inputs: about a second on SwiftShader)
  ['tiny-bert', 'q8_0', 'webgpu'], ['tiny-nomic-bert', 'f32', 'webgpu'],
];
const LONG = 'The lighthouse keeper climbed the narrow stairs every evening, counting the steps, listening to '
  + 'the gulls and the sea, and lit the great lamp so that the fishing boats, far out in the dark water, '
  + 'could find their way home before the storm arrived from the north. In the morning he wrote the '
  + 'weather, the ships he had seen and the oil he had burned into the log.';
const TEXTS = ['hello', 'Embeddings place similar sentences near each other.', 'naïve café, 東京 and ünïcödé!', LONG];
const LONGER = Array(6).fill(LONG).join(' '); // ~300 tokens: bge-small's table has 512

function ensureModel(shape, type) {
  const p = modelPath(shape, type);
  if (!existsSync(p)) {
    mkdirSync(dirname(p), { recursive: true });
    const r = runWgllm(['synth', '--shape', shape, '--type', type, '--seed', '1', '-o', p]);
    assert.equal(r.status, 0, r.stderr);
  }
  return p;
}

after(() => stopServers());

async function startServer(model, backend) {
  const extra = backend ? ['--backend', backend] : [];
  const { url, log } = await startServerWith(['-m', model, '--host', '127.0.0.1', '--port', '0', '--parallel', '2',
    '--threads', '2', ...extra]);
  if (backend) assert.match(log, new RegExp(`backend ${backend}`), log); // it runs there, not on a fallback
  return url;
}

/* WebGPU on SwiftShader where the machine has it (tests/peer/server.test.mjs does the same). */
async function webgpuAvailable() {
  useWebgpuEnv();
  const r = runWgllm(['devices']);
  const ok = r.status === 0 && /^webgpu: (?!not available)/m.test(r.stdout);
  if (!ok && process.env.WGLLM_REQUIRE_WEBGPU) assert.fail(`no WebGPU adapter: ${r.stdout}${r.stderr}`);
  return ok;
}

async function post(url, path, body) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

function cosine(a, b) {
  assert.equal(a.length, b.length);
  let d = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { d += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return d / Math.sqrt(na * nb);
}

for (const [shape, type, backend] of MODELS) {
  test(`${shape} ${type}${backend ? ` on ${backend}` : ''}: /v1/embeddings agrees with llama.cpp`, async (t) => {
    if (backend === 'webgpu' && !(await webgpuAvailable())) return t.skip('no WebGPU adapter');
    const file = ensureModel(shape, type);
    const texts = shape === 'bge-small' ? [...TEXTS, LONGER] : TEXTS;
    const llama = await peerLlama();
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0, defaultContextFlashAttention: false });
    const ctxSize = model.trainContextSize;
    const ec = await model.createEmbeddingContext({ contextSize: ctxSize, batchSize: ctxSize, threads: 2 });
    const ref = [];
    const nTok = [];
    for (const t of texts) {
      nTok.push(ec.calculateInputLength(t));
      ref.push((await ec.getEmbeddingFor(t)).vector);
    }
    await ec.dispose();
    await model.dispose();
    assert.ok(nTok.at(-1) > (shape === 'bge-small' ? 256 : 64), `the long input has ${nTok.at(-1)} tokens`);

    const url = await startServer(file, backend);
    const r = await post(url, '/v1/embeddings', { input: texts, encoding_format: 'float' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const cos = r.json.data.map((d, i) => cosine(d.embedding, ref[i]));
    console.log(`# ${shape} ${type}${backend ? ` ${backend}` : ''}: tokens ${nTok.join(',')} cosine ${cos.map((c) => c.toFixed(10)).join(' ')}`);
    for (const c of cos) assert.ok(c >= 0.9999, `cosine ${c}`);
    // the official client (base64 on the wire) gets the same vectors
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none' });
    const oc = await client.embeddings.create({ model: basename(file), input: texts[1] });
    assert.equal(oc.data[0].embedding.length, ref[1].length);
    assert.ok(cosine(oc.data[0].embedding, ref[1]) >= 0.9999);
    assert.ok(oc.usage.prompt_tokens > 0);
  });
}

test('an embedding model refuses generation and inputs past its position table', async () => {
  const url = await startServer(ensureModel('tiny-bert', 'q8_0'));
  const g = await post(url, '/v1/completions', { prompt: 'hello', max_tokens: 4 });
  assert.equal(g.status, 400);
  assert.match(g.json.error.message, /embedding model \(a bert encoder\)/);
  const long = await post(url, '/v1/embeddings', { input: Array(200).fill('word').join(' ') });
  assert.equal(long.status, 400);
  assert.equal(long.json.error.code, 'context_length_exceeded');
  assert.match(long.json.error.message, /position table has 128/);
});
