// `wgllm quantize` against llama.cpp's own llama_model_quantize, both ways:
// (a) the same F32 (and F16, BF16) synthetic model quantized by llama.cpp (libllama through
//     tools/peer/llama_quantize.py) and by wgllm to the same preset must hold the
//     same tensors with the same types and byte-identical data, the same metadata in
//     the same order: the same file, byte for byte;
// (b) a file quantized by wgllm loads in llama.cpp and the two engines'
//     teacher-forced next-token distributions agree (mean KL bound 1e-2 as for the
//     other 4-bit formats in agreement.test.mjs, top-1 >= 95% of 64 positions).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadVocab, tokenizeWith, loadModelContext, nextTokenLogProbs, vocabSize } from '../../tools/peer/peer.mjs';
import { ROOT, modelPath, runWgllm, wgllmLogits, logSoftmax, klLog, argmax } from '../../tools/peer/wgllm.mjs';

const BINS = join(ROOT, 'tools/peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64');
const PRESETS = { Q4_K_M: 15, Q5_K_M: 17, Q3_K_M: 12, Q3_K_S: 11, Q3_K_L: 13, Q4_K_S: 14, Q5_K_S: 16, Q6_K: 18, Q8_0: 7, Q4_0: 2, Q5_1: 9, IQ4_XS: 30, IQ4_NL: 25, IQ3_S: 26, IQ3_M: 27, Q2_K: 10, F16: 1,
  TQ1_0: 36, TQ2_0: 37, MXFP4_MOE: 38, Q1_0: 40 };
const SHAPES = ['tiny', 'tiny-qwen2'];
const UNIFORM = new Set(['Q8_0', 'Q4_0', 'Q5_1', 'F16']); // no rule of quantize.c's type_impl but the output's
const dir = mkdtempSync(join(tmpdir(), 'wgllm-quantize-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// ---- a small GGUF reader: key names, tensor infos and data -------------------
const TYPE_SIZE = { 0: [1, 4], 1: [1, 2], 30: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34],
  10: [256, 84], 11: [256, 110], 12: [256, 144], 13: [256, 176], 14: [256, 210], 20: [32, 18], 23: [256, 136],
  21: [256, 110], 34: [256, 54], 35: [256, 66], 39: [32, 17], 41: [128, 18] };
const SCALAR = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
function readGguf(path) {
  const b = readFileSync(path);
  let p = 0;
  const u32 = () => { const v = b.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(p)); p += 8; return v; };
  const str = () => { const n = u64(); const s = b.toString('utf8', p, p + n); p += n; return s; };
  const value = (t) => {
    if (t === 8) return str();
    if (t === 9) { const et = u32(), n = u64(); const a = []; for (let i = 0; i < n; i++) a.push(value(et)); return a; }
    const sz = SCALAR[t]; assert.ok(sz, `${path}: unknown gguf value type ${t}`);
    const v = t === 4 ? b.readUInt32LE(p) : t === 6 ? b.readFloatLE(p) : b.readUIntLE(p, Math.min(sz, 6));
    p += sz; return v;
  };
  assert.equal(b.readUInt32LE(0), 0x46554747, `${path}: not GGUF`);
  p = 8;
  const nt = u64(), nkv = u64();
  const kv = new Map();
  for (let i = 0; i < nkv; i++) { const k = str(); kv.set(k, value(u32())); }
  const tensors = [];
  for (let i = 0; i < nt; i++) {
    const name = str(), nd = u32(); const ne = []; for (let d = 0; d < nd; d++) ne.push(u64());
    const type = u32(), offset = u64();
    const ts = TYPE_SIZE[type]; assert.ok(ts, `${path}: tensor ${name} has unexpected type ${type}`);
    const n = ne.reduce((a, x) => a * x, 1);
    tensors.push({ name, ne, type, offset, size: n / ts[0] * ts[1] });
  }
  const align = kv.get('general.alignment') ?? 32;
  const base = Math.ceil(p / align) * align;
  for (const t of tensors) t.data = b.subarray(base + t.offset, base + t.offset + t.size);
  return { kv, tensors };
}

function f32Model(shape, type = 'f32') {
  const f = modelPath(shape, type);
  if (existsSync(f)) return f;
  const out = join(dir, `${shape}-${type}.gguf`);
  const r = runWgllm(['synth', '--shape', shape, '--type', type, '--seed', '1', '-o', out]);
  assert.equal(r.status, 0, r.stderr);
  return out;
}

function wgllmQuantize(inp, out, preset) {
  const r = runWgllm(['quantize', inp, out, preset, '-t', '2']);
  assert.equal(r.status, 0, `wgllm quantize ${preset}: ${r.stderr}`);
}

test('(a) tensor bytes equal llama.cpp llama_model_quantize, every preset', () => {
  assert.ok(existsSync(join(BINS, 'libllama.v0.4.0.so')), `${BINS}/libllama.v0.4.0.so missing (npm ci in tools/peer)`);
  const jobs = [];
  for (const shape of SHAPES)
    for (const [preset, ftype] of Object.entries(PRESETS))
      // a one-type preset gives every matrix the same type whatever the architecture: its
      // bytes are checked on tiny; the mixtures choose by tensor name and layer, so they
      // run on both shapes
      if (shape === SHAPES[0] || !UNIFORM.has(preset)) jobs.push({ shape, preset, ftype, inp: f32Model(shape), ref: join(dir, `${shape}-${preset}.llama.gguf`), ours: join(dir, `${shape}-${preset}.wgllm.gguf`) });
  // F16 and BF16 input: converted to f32 first, as llama.cpp does
  // MXFP4_MOE on a dense model is all Q8_0; on a MoE model its experts are MXFP4
  for (const [shape, type, preset] of [['tiny-qwen3', 'f16', 'Q4_K_M'], ['tiny', 'bf16', 'Q5_K_M'], ['tiny-qwen3moe', 'f32', 'MXFP4_MOE']])
    jobs.push({ shape: `${shape}-${type}`, preset, ftype: PRESETS[preset], inp: f32Model(shape, type),
      ref: join(dir, `${shape}-${type}-${preset}.llama.gguf`), ours: join(dir, `${shape}-${type}-${preset}.wgllm.gguf`) });
  const r = spawnSync('python3', [join(ROOT, 'tools/peer/llama_quantize.py'), BINS, ...jobs.map((j) => `${j.inp},${j.ref},${j.ftype}`)],
    { encoding: 'utf8', env: { ...process.env, GGML_NO_BACKTRACE: '1' }, timeout: 300000 });
  assert.equal(r.status, 0, `llama.cpp quantize failed: ${r.stderr}`);
  const lines = [];
  for (const j of jobs) {
    wgllmQuantize(j.inp, j.ours, j.preset);
    const a = readGguf(j.ref), b = readGguf(j.ours);
    assert.deepEqual([...b.kv.keys()], [...a.kv.keys()], `${j.shape} ${j.preset}: metadata keys or their order differ`);
    assert.equal(b.kv.get('general.file_type'), j.ftype, `${j.shape} ${j.preset}: general.file_type`);
    assert.equal(b.kv.get('general.quantization_version'), 2);
    assert.deepEqual(b.kv.get('tokenizer.ggml.tokens'), a.kv.get('tokenizer.ggml.tokens'));
    assert.deepEqual(b.tensors.map((t) => t.name), a.tensors.map((t) => t.name), `${j.shape} ${j.preset}: tensor order`);
    const mix = new Map();
    for (let i = 0; i < a.tensors.length; i++) {
      const x = a.tensors[i], y = b.tensors[i];
      assert.equal(y.type, x.type, `${j.shape} ${j.preset}: ${x.name} is type ${y.type} in wgllm's file, ${x.type} in llama.cpp's`);
      assert.deepEqual(y.ne, x.ne, `${j.shape} ${j.preset}: ${x.name} shape`);
      assert.ok(Buffer.compare(x.data, y.data) === 0, `${j.shape} ${j.preset}: ${x.name} (type ${x.type}) data differ`);
      mix.set(x.type, (mix.get(x.type) ?? 0) + 1);
    }
    // and so the whole file, header included
    assert.ok(Buffer.compare(readFileSync(j.ref), readFileSync(j.ours)) === 0, `${j.shape} ${j.preset}: the files differ`);
    lines.push(`${j.shape.padEnd(15)} ${j.preset.padEnd(7)} ${a.tensors.length} tensors identical (the whole file); types ${[...mix].map(([t, n]) => `${t}x${n}`).join(' ')}`);
  }
  console.log(lines.join('\n'));
});

const PARAGRAPH =
  'The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a ' +
  'small brass lamp and a notebook in which he recorded the weather, the ships that ' +
  'passed, and the number of gulls resting on the rocks below. In winter the wind ' +
  'rattled the windows so hard that he wrote with gloves on.';

// MXFP4: wgllm's own preset (no llama.cpp file to compare bytes with), so llama.cpp must at least read it the same
for (const [shape, preset] of [['tiny', 'Q4_K_M'], ['tiny-qwen2', 'Q4_K_M'], ['tiny', 'Q3_K_M'], ['tiny', 'IQ4_XS'], ['tiny', 'MXFP4']]) {
  test(`(b) wgllm-quantized ${shape} ${preset} runs in llama.cpp and agrees with wgllm`, async () => {
    const f = join(dir, `${shape}-${preset}.b.gguf`);
    wgllmQuantize(f32Model(shape), f, preset);
    const v = await loadVocab(f);
    const seq = tokenizeWith(v, PARAGRAPH, { addSpecial: true }).slice(0, 48);
    await v.dispose();
    const mc = await loadModelContext(f, { contextSize: 256 });
    try {
      const nv = vocabSize(mc.model);
      const peer = await nextTokenLogProbs(mc, seq);
      const ours = wgllmLogits(f, seq, nv);
      let kl = 0, agree = 0;
      for (let i = 0; i < seq.length; i++) {
        const q = logSoftmax(ours[i]);
        kl += klLog(peer[i], q);
        if (argmax(peer[i]) === argmax(q)) agree++;
      }
      kl /= seq.length;
      console.log(`${shape} ${preset}: mean KL ${kl.toExponential(2)}, top-1 ${agree}/${seq.length}`);
      assert.ok(kl <= 1e-2, `${shape} ${preset}: mean KL ${kl} > 1e-2`);
      assert.ok(agree >= 0.95 * seq.length, `${shape} ${preset}: top-1 ${agree}/${seq.length}`);
    } finally {
      await mc.dispose();
    }
  });
}
