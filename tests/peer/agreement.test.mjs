// wgllm's forward pass against llama.cpp's on the same synthetic GGUF files:
// teacher-forced next-token distributions (KL, top-1) for every architecture x
// weight type, greedy generation for f32/f16/q8_0, and clean failure on damaged files.
//
// Tolerances (mean over the 64 positions of KL(llama.cpp || wgllm), nats). Measured
// reference point: on such synthetic models (peaked: KL to uniform ~6 nats) merely
// switching llama.cpp's own KV cache from F32 to F16 (2^-11 relative rounding of K
// and V only) gives mean KL 1e-5..2.5e-5, max 1.7e-4; the peer's self-agreement
// (same file, F32 KV, two runs) is 3e-17. KL grows with the square of the logit error.
//   f32                  1e-4  both sides compute in f32; allows wgllm an F16 KV cache
//                              (~2e-5 above) with 4x margin, nothing more.
//   f16                  1e-3  llama.cpp's CPU matmul rounds activations to f16
//                              (2^-11) before the dot; wgllm may keep f32.
//   bf16, q8_0           3e-3  activations rounded to bf16 (2^-8) or q8_0 (~1/254 of
//                              the block max) by llama.cpp: ~8x the f16 error, so up
//                              to ~60x its KL if wgllm does not round the same way.
//   q4_0 q4_1 q5_0 q5_1  1e-2  as q8_0 (activations as q8_0/q8_1) plus accumulation
//                              of coarser weights in a different order.
//   q2_k..q6_k iq4_nl    1e-2  as q4_0 (activations as q8_K, q8_0 for iq4_nl); the
//   iq4_xs                     weight bytes equal llama.cpp's (test_kquants checks them
//                              against its libggml-base). Measured means on the three
//                              tiny shapes: 1e-6..2.8e-3, top-1 1330/1344: ~1e-3 where
//                              one activation quant rounds the other way (a 1-ulp
//                              difference in the dot's float sum order suffices) and
//                              the difference grows through the layers, as for q5_0/q4_1.
//   iq3_s iq3_xxs iq2_s  1e-2  the I-quants, files llama.cpp quantized itself (run.sh); wgllm's
//   iq2_xs iq2_xxs             dots are bit-identical to ggml's generic ones (test_iquants) at
//   iq1_m iq1_s                every level, so what is left is the activation rounding above.
//                              Measured means: 7e-14..9.8e-4 (max 4.8e-3), top-1 447/448; one
//                              model's KL moves 1e-13 <-> 9e-4 between kernel levels whose I-quant
//                              dots are identical (iq1_m best vs avx2): a Q8_K rounding flip seeded
//                              by another kernel's float order (the F16 KV dots), as for q4_k.
// These were set before wgllm existed; the table printed below shows measured values:
// tighten them to ~5x the measured means once known.
// A bound only means something if a real bug would exceed it by far. Each model's
// "shift KL" column is the mean KL(p_i || p_(i-1)): what wgllm would score if it
// were off by one position (a RoPE/KV-cache bug shows about as much). The test fails
// if the shift KL is not at least 100x the bound, i.e. if the synthetic model is too
// flat for the bound to catch such a bug.
//
// Top-1: llama.cpp's argmax must equal wgllm's at every position for f32 models,
// and at >= 99% of all positions over all models together (near-ties can flip the
// argmax of a quantized model legitimately; 99% of 24 x 64 allows 15 such flips).
//
// Greedy: wgllm's greedy tokens must equal llama.cpp's until a step where the two
// may legitimately rank differently. That is decided from what this run measured,
// not from one CPU's rounding: the teacher-forced pass above gives, for each model,
// the largest error wgllm makes in the log-probability margin between llama.cpp's
// top two tokens ("noise", nats). A divergence is accepted only where llama.cpp's
// own margin for its token is below max(TIE_NATS, min(TIE_FACTOR x noise,
// sqrt(8 x bound))) (noise also measured again at the step where the runs
// part, see compare), and it is reported as a near-tie; only the tokens before it
// count. The last term caps the allowance by the KL bound: where two tokens share
// the mass, a margin error d costs KL ~ d^2/8, so no model within its bound can
// claim more. A wrong RoPE, mask or bias shows as a KL far above the bound first
// (the mutation tests at the end check that it does), so the allowance cannot
// hide one.
//
// Kernel levels: every model is compared at each level this machine has (best,
// then WGLLM_CPU=avx2 and scalar on an AVX-512 x86-64; neon and scalar on arm64),
// against one llama.cpp pass, so one machine checks the kernels other CPUs run.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadVocab, tokenizeWith, loadModelContext, nextTokenLogProbs, greedyGenerate, vocabSize } from '../../tools/peer/peer.mjs';
import { modelPath, wgllmLogits, wgllmGreedy, runWgllm, logSoftmax, klLog, argmax, hasNonFinite, kernelLevels, useWebgpuEnv } from '../../tools/peer/wgllm.mjs';
import { withF32, withF32Tensor, withU32, withArch } from '../../tools/peer/gguf.mjs';

const SHAPES = (process.env.PEER_SHAPES ||
  'tiny,tiny-qwen2,tiny-qwen3,tiny-gemma3,tiny-gemma2,tiny-phi3,tiny-granite,tiny-olmo2,tiny-smollm3').split(',');
const ALL_TYPES = 'f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs'.split(',');
// The llama shape checks every type's kernels at every level. The qwen2 and qwen3
// shapes add biases and q/k norms, the gemma and phi3 shapes their block (post-norms,
// GeGLU, soft-caps, sliding window; fused matrices, scaled queries), to those same
// kernels: one type per kind of activation rounding is enough there (f32, f16, q8_0,
// q4_0 and q4_k: none, f16, q8_0, q8_0 of coarser weights, q8_K), and keeps the suite
// within its time. $PEER_TYPES, when set, is the list for every shape.
const FEW_TYPES = ['f32', 'f16', 'q8_0', 'q4_0', 'q4_k'];
// granite's scales, olmo2's post-norm-only block and smollm3's no-RoPE layers: f32 for the block
// itself, q8_0 and q4_k for the activation rounding through it, at every level; f16 and q4_0 at
// the best level only (EXTRA).
const FEWER_TYPES = ['f32', 'q8_0', 'q4_k'];
const SHAPE_TYPES = { 'tiny-qwen2': FEW_TYPES, 'tiny-qwen3': FEW_TYPES, 'tiny-gemma3': FEW_TYPES, 'tiny-gemma2': FEW_TYPES, 'tiny-phi3': FEW_TYPES,
  'tiny-granite': FEWER_TYPES, 'tiny-olmo2': FEWER_TYPES, 'tiny-smollm3': FEWER_TYPES };
const typesFor = (shape) => (process.env.PEER_TYPES ? process.env.PEER_TYPES.split(',') : SHAPE_TYPES[shape] ?? ALL_TYPES);
const GREEDY_TYPES = ['f32', 'f16', 'q8_0'];
// The greedy run checks the token-by-token path, which is the same code for every
// block: granite, olmo2 and smollm3 add their block to it in f32 only (llama.cpp's
// greedy run is most of a model's time here).
const SHAPE_GREEDY = { 'tiny-granite': ['f32'], 'tiny-olmo2': ['f32'], 'tiny-smollm3': ['f32'] };
const greedyFor = (shape, type) => (SHAPE_GREEDY[shape] ?? GREEDY_TYPES).includes(type);
// RoPE variants real files carry (Llama 3.1 frequency factors, linear scaling), in
// two types each: llama.cpp must read the metadata the same way wgllm does.
// Phi-3.5's LongRoPE, with the short factors (context within the original length) and the long ones.
const LEVELS = kernelLevels();
const BEST = ['best'];
// The WebGPU backend as one more "level" (tools/peer/wgllm.mjs: -b webgpu; Dawn + SwiftShader
// on a machine without a GPU) for the blocks it computes with kernels of its own: the mixture
// of experts. $PEER_WEBGPU=0 leaves it out; without an adapter its rows skip unless
// $WGLLM_REQUIRE_WEBGPU is set. $PEER_LEVELS=best,webgpu adds it to every model.
const GPU = process.env.PEER_WEBGPU === '0' || LEVELS.includes('webgpu') ? [] : ['webgpu'];
const EXTRA = process.env.PEER_SHAPES ? [] : [['tiny-ropefreqs', ['f32', 'q8_0']], ['tiny-ropescale', ['f32', 'q8_0']],
  ['tiny-phi3-longrope', ['f32', 'q8_0']], ['tiny-phi3-longctx', ['f32', 'q8_0']],
  // The blocks below add no kernel of their own (their matrix products are the ones the shapes
  // above check at every level), so they run at the best level only:
  // YaRN (llama), and mistral3's YaRN keys with its attention temperature past the original context;
  ['tiny-yarn', ['f32'], BEST], ['tiny-mistral3', ['f32'], BEST],
  // mixture of experts: qwen3moe (renormalized; q8_0 for the experts' activation rounding), Mixtral
  // (llama with experts), olmoe (not renormalized), and the shared experts: qwen2moe's
  // sigmoid-gated one, granitemoe's plain one (with granite's scales). Not in K-quants here: the
  // router's choice turns a quantization-sized difference at a near-tie into a different expert
  // (tiny-qwen3moe q4_k: mean KL 3e-3 at the AVX2 level, 4e-4 on scalar).
  // On WebGPU (GPU) the router, the routing (softmax, top-k, renormalisation), the chosen experts'
  // mat-vecs and the weighted sum are the backend's own kernels: qwen3moe q8_0 against llama.cpp
  // here (a WebGPU row costs one to two minutes on SwiftShader); every MoE shape is compared with
  // the CPU backend, which agrees with llama.cpp above, in test_webgpu_model.
  ['tiny-qwen3moe', ['f32'], BEST], ['tiny-qwen3moe', ['q8_0'], [...BEST, ...GPU]], ['tiny-mixtral', ['f32'], BEST],
  ['tiny-olmoe', ['f32'], BEST], ['tiny-qwen2moe', ['f32'], BEST], ['tiny-granitemoe', ['f32'], BEST],
  // gpt-oss: attention sinks, biases everywhere, the softmax over the chosen router logits and
  // SwiGLU-OAI, in f32, q8_0 (the real files' attention format) and MXFP4 (their experts'), at
  // the best level: the MXFP4 dots of every level are the llama shape's above (measured at avx2
  // and scalar: mean KL within 1.1x of the best level's). On WebGPU the sinks (the attention
  // kernel's ATTN_SINK version), the router's softmax over its chosen logits, the experts' biases
  // and SwiGLU-OAI are kernels of its own: q8_0 against llama.cpp here (every type against the CPU
  // backend in test_webgpu_model)
  ['tiny-gptoss', ['f32', 'mxfp4'], BEST], ['tiny-gptoss', ['q8_0'], [...BEST, ...GPU]],
  // MXFP4, NVFP4, the ternary formats and Q1_0: their own dot kernels (every level), on the llama shape only
  ['tiny', ['mxfp4', 'nvfp4', 'tq2_0', 'tq1_0', 'q1_0']],
  // the I-quants: files llama.cpp itself quantized (tests/peer/run.sh: every matrix in the type),
  // at the best level: their dots are bit-identical to the reference at every level (test_iquants),
  // so the other levels would only re-measure the other kernels' rounding. IQ3_XXS on WebGPU too:
  // test_webgpu_model compares the other I-quants' WebGPU logits with the CPU's, but on its
  // prompt this file meets a CPU rounding near-tie that WebGPU and llama.cpp resolve alike
  ['tiny', ['iq3_s', 'iq2_s', 'iq2_xs', 'iq2_xxs', 'iq1_m', 'iq1_s'], BEST], ['tiny', ['iq3_xxs'], [...BEST, ...GPU]],
  // granite's, olmo2's and smollm3's blocks in the types of the other new blocks: f32, q8_0 and q4_k
  // at every level (SHAPE_TYPES), f16 and q4_0 at the best (their kernels are the llama shapes')
  ...['tiny-granite', 'tiny-olmo2', 'tiny-smollm3'].filter((sh) => SHAPES.includes(sh) && !process.env.PEER_TYPES)
    .map((sh) => [sh, ['f16', 'q4_0'], BEST])];
const MATRIX = [...SHAPES.map((s) => [s, typesFor(s)]), ...EXTRA];
const N_POS = 64;
const N_PROMPT = 16, N_GEN = 32;
const BOUND = { f32: 1e-4, f16: 1e-3, bf16: 3e-3, q8_0: 3e-3, q4_0: 1e-2, q4_1: 1e-2, q5_0: 1e-2, q5_1: 1e-2,
  q2_k: 1e-2, q3_k: 1e-2, q4_k: 1e-2, q5_k: 1e-2, q6_k: 1e-2, iq4_nl: 1e-2, iq4_xs: 1e-2,
  mxfp4: 1e-2, nvfp4: 1e-2, tq2_0: 1e-2, tq1_0: 1e-2, q1_0: 1e-2,
  iq3_s: 1e-2, iq3_xxs: 1e-2, iq2_s: 1e-2, iq2_xs: 1e-2, iq2_xxs: 1e-2, iq1_m: 1e-2, iq1_s: 1e-2 };
// greedy near-ties (see above): the floor, and the multiple of the measured noise
const TIE_NATS = 1e-3;
const TIE_FACTOR = 2;

const PARAGRAPH =
  'The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a ' +
  'small brass lamp and a notebook in which he recorded the weather, the ships that ' +
  'passed, and the number of gulls resting on the rocks below. In winter the wind ' +
  'rattled the windows so hard that he wrote with gloves on, and in summer the sea was ' +
  'so calm that he could hear fishermen talking a mile away. Nobody ever read his notes.';

const sequences = new Map();   // shape -> 64 token ids
async function sequenceFor(shape) {
  if (!sequences.has(shape)) {
    const v = await loadVocab(modelPath(shape, 'f32'));
    const ids = tokenizeWith(v, PARAGRAPH, { addSpecial: true });
    await v.dispose();
    assert.ok(ids.length >= N_POS, `paragraph gives only ${ids.length} tokens for ${shape}`);
    sequences.set(shape, ids.slice(0, N_POS));
  }
  return sequences.get(shape);
}

/* llama.cpp's side of one model, computed once for all kernel levels: the
 * teacher-forced log-probabilities and (for greedyFor) its greedy run. */
async function peerRun(file, shape, type, { greedy: wantGreedy = greedyFor(shape, type) } = {}) {
  const seq = await sequenceFor(shape);
  const mc = await loadModelContext(file, { contextSize: 256 });
  try {
    const nv = vocabSize(mc.model);
    const rows = await nextTokenLogProbs(mc, seq);
    let greedy = null;
    if (wantGreedy) {
      const prompt = seq.slice(0, N_PROMPT);
      // node-llama-cpp hands over a step's distribution as a Map of the whole vocabulary,
      // which costs more than the step: the ids alone here, and a step's row only where
      // wgllm's run parts from llama.cpp's (rowAt: llama.cpp's teacher-forced pass over
      // the prompt and its own tokens up to that step)
      const ref = await greedyGenerate(mc, prompt, N_GEN, { keepRows: false });
      // wgllm stops at EOG; llama.cpp was run without stopping: compare up to
      // the first EOG of llama.cpp's sequence (wgllm may or may not print it)
      const n = ref.ids.findIndex((t) => mc.model.isEogToken(t));
      const rowCache = new Map();
      const rowAt = async (k) => {
        if (!rowCache.has(k)) {
          const m = await loadModelContext(file, { contextSize: 256 });
          try {
            rowCache.set(k, (await nextTokenLogProbs(m, [...prompt, ...ref.ids.slice(0, k)])).at(-1));
          } finally {
            await m.dispose();
          }
        }
        return rowCache.get(k);
      };
      greedy = { prompt, ids: ref.ids, rowAt, n: n < 0 ? N_GEN : n };
    }
    return { seq, nv, rows, greedy };
  } finally {
    await mc.dispose();
  }
}

/* wgllm (on `file`, at kernel level `cpu`) against llama.cpp's run `ref`:
 * returns the table row and the list of what is out of bounds (empty: agrees). */
// gemma in passes of 8 tokens: its sliding-window layers (window 8) keep
// rings of 16 cells, which the 64 positions wrap four times
const RING_BATCH = /tiny-gemma[23]-/;
async function compare(file, ref, type, cpu) {
  const problems = [];
  const row = { bound: BOUND[type] };
  const ours = wgllmLogits(file, ref.seq, ref.nv, { cpu, batch: RING_BATCH.test(file) ? 8 : undefined });
  let klSum = 0, maxKl = 0, shift = 0, agree = 0, noise = 0;
  const firstBad = [];
  for (let i = 0; i < N_POS; i++) {
    if (hasNonFinite(ours[i])) { problems.push(`wgllm logits at position ${i} contain NaN/Inf`); return { row, problems }; }
    const p = ref.rows[i], q = logSoftmax(ours[i]);
    const kl = klLog(p, q);
    klSum += kl; maxKl = Math.max(maxKl, kl);
    if (i > 0) shift += klLog(p, ref.rows[i - 1]);
    const a = argmax(p), b = argmax(q);
    if (a === b) agree++;
    else if (firstBad.length < 5) firstBad.push(`pos ${i}: llama.cpp ${a} (logp ${p[a].toFixed(4)}), wgllm ${b} (llama.cpp logp ${p[b].toFixed(4)})`);
    // the error in the margin between llama.cpp's top two tokens
    let r = a === 0 ? 1 : 0;
    for (let j = 0; j < p.length; j++) if (j !== a && p[j] > p[r]) r = j;
    noise = Math.max(noise, Math.abs((p[a] - p[r]) - (q[a] - q[r])));
  }
  row.kl = klSum / N_POS; row.maxKl = maxKl; row.shift = shift / (N_POS - 1); row.noise = noise;
  row.top1 = `${agree}/${N_POS}`; row.agree = agree;
  if (!(row.shift >= 100 * row.bound))
    problems.push(`synthetic model too flat: shift KL ${fmt(row.shift)} < 100 x bound ${fmt(row.bound)}, so the bound could not catch a position bug`);
  if (!(row.kl <= row.bound)) problems.push(`mean KL(llama.cpp || wgllm) = ${fmt(row.kl)} > bound ${fmt(row.bound)} (max ${fmt(maxKl)})`);
  if (type === 'f32' && agree !== N_POS) problems.push(`top-1 differs at ${N_POS - agree} positions: ${firstBad.join('; ')}`);

  if (ref.greedy) {
    const g = ref.greedy;
    const got = wgllmGreedy(file, g.prompt, N_GEN, { cpu });
    if (!Array.isArray(got)) { problems.push('wgllm run --ids did not print a JSON array'); return { row, problems }; }
    let allowed = Math.max(TIE_NATS, Math.min(TIE_FACTOR * noise, Math.sqrt(8 * row.bound)));
    let k = 0;
    while (k < g.n && k < got.length && got[k] === g.ids[k]) k++;
    let note = '';
    if (k < g.n && k < got.length && problems.length) {
      // already out of bounds (a mutation, or a bug): no near-tie to judge
      problems.push(`greedy differs at step ${k}: llama.cpp [${g.ids}] vs wgllm [${got}]`);
    } else if (k < g.n && k < got.length) {
      const row = await g.rowAt(k);
      const gap = row[g.ids[k]] - row[got[k]];
      // The teacher-forced pass may have met no activation rounding that goes the
      // other way (its noise is then ~1e-6), while the greedy run meets one: the
      // noise is measured again where the runs part, by wgllm's batched pass over
      // llama.cpp's own tokens up to that step (a bug of the token-by-token path
      // does not show there, so it is not excused by it).
      if (!(gap < allowed)) {
        const pre = [...g.prompt, ...g.ids.slice(0, k)];
        const q = logSoftmax(wgllmLogits(file, pre, ref.nv, { cpu })[pre.length - 1]);
        const d = Math.abs(gap - (q[g.ids[k]] - q[got[k]]));
        allowed = Math.max(allowed, Math.min(TIE_FACTOR * d, Math.sqrt(8 * row.bound)));
      }
      if (!(gap < allowed))
        problems.push(`greedy differs at step ${k}: llama.cpp [${g.ids}] vs wgllm [${got}] (llama.cpp prefers its token by ` +
          `${gap.toFixed(5)} nats; allowed ${allowed.toExponential(2)} = max(${TIE_NATS}, min(${TIE_FACTOR} x measured noise ${noise.toExponential(2)}, sqrt(8 x bound))))`);
      note = ` (near-tie at ${k}, gap ${gap.toExponential(1)} < ${allowed.toExponential(1)})`;
    } else if (!(got.length >= g.n && got.length <= N_GEN)) {
      problems.push(`wgllm generated ${got.length} tokens, llama.cpp's greedy run has ${g.n} before EOG: [${g.ids}] vs [${got}]`);
    }
    row.greedy = `${k}/${g.n}${note}`;
  }
  return { row, problems };
}

const rows = [];        // table rows
const top1 = new Map([...LEVELS, ...GPU].map((l) => [l, { agree: 0, total: 0 }]));

function fmt(x) { return x === undefined ? '-' : x.toExponential(2); }
after(() => {
  if (!rows.length) return;
  const lines = ['', 'model               | kernels |  mean KL   |   max KL   |  bound   | shift KL  |  noise   | top-1   | greedy',
    '--------------------|---------|------------|------------|----------|-----------|----------|---------|-------'];
  for (const r of rows)
    lines.push(`${r.name.padEnd(20)}| ${r.cpu.padEnd(8)}| ${fmt(r.kl).padStart(10)} | ${fmt(r.maxKl).padStart(10)} | ${fmt(r.bound).padStart(8)} | ${fmt(r.shift).padStart(9)} | ${fmt(r.noise).padStart(8)} | ${String(r.top1 ?? '-').padStart(7)} | ${r.greedy ?? '-'}`);
  for (const [l, t] of top1)
    lines.push(`top-1 over all models, kernels ${l}: ${t.agree}/${t.total} = ${(100 * t.agree / Math.max(1, t.total)).toFixed(2)}%`);
  console.log(lines.join('\n'));
});

// ---- mutations: the comparison must fail a model that is subtly wrong ----
// wgllm reads a copy of the file with one thing changed, llama.cpp the original:
// what a bug in wgllm's RoPE, its biases or its norms would look like.
const mutWork = mkdtempSync(join(tmpdir(), 'wgllm-mut-'));
after(() => rmSync(mutWork, { recursive: true, force: true }));
const MUTATIONS = [
  ['wrong RoPE base (x2)', 'tiny', 'q8_0', (b) => withF32(b, 'llama.rope.freq_base', (v) => v * 2)],
  ['wrong RoPE base (x1.25), qwen3', 'tiny-qwen3', 'q8_0', (b) => withF32(b, 'qwen3.rope.freq_base', (v) => v * 1.25)],
  ['a missing K bias (layer 0)', 'tiny-qwen2', 'q8_0', (b) => withF32Tensor(b, 'blk.0.attn_k.bias', () => 0)],
  ['a sign-flipped V bias (layer 1)', 'tiny-qwen2', 'f16', (b) => withF32Tensor(b, 'blk.1.attn_v.bias', (v) => -v)],
  ['a wrong norm (layer 1 FFN norm +10%)', 'tiny', 'f32', (b) => withF32Tensor(b, 'blk.1.ffn_norm.weight', (v) => v * 1.1)],
  // gemma: the sliding window, gemma2's local layers rotating with rope.freq_base (gemma3's
  // use 10000 whatever it says), the attention soft-cap and a post-norm must each be
  // computed as llama.cpp does
  ['a wider sliding window (8 -> 12), gemma3', 'tiny-gemma3', 'q8_0', (b) => withU32(b, 'gemma3.attention.sliding_window', (v) => v + 4)],
  ['wrong RoPE base (x2), gemma2', 'tiny-gemma2', 'q8_0', (b) => withF32(b, 'gemma2.rope.freq_base', (v) => v * 2)],
  ['a wrong attention soft-cap (x1.5), gemma2', 'tiny-gemma2', 'q8_0', (b) => withF32(b, 'gemma2.attn_logit_softcapping', (v) => v * 1.5)],
  ['a wrong post-FFN norm (layer 1 +10%), gemma2', 'tiny-gemma2', 'f32', (b) => withF32Tensor(b, 'blk.1.post_ffw_norm.weight', (v) => v * 1.1)],
  // phi3's LongRoPE: the long factors past the original context, and the attention factor on cos/sin
  ['the short LongRoPE factors where the long ones apply, phi3', 'tiny-phi3-longctx', 'q8_0', (b) => withU32(b, 'phi3.rope.scaling.original_context_length', () => 4096)],
  ['a wrong RoPE attention factor (x1.05), phi3', 'tiny-phi3-longrope', 'f32', (b) => withF32(b, 'phi3.rope.scaling.attn_factor', (v) => v * 1.05)],
  // granite's residual scale, olmo2's post-FFN norm, and smollm3's no-RoPE layer: the step
  // is not in the file (llama.cpp fixes it at 4), so the mutation makes wgllm read the file
  // as mistral (the same block, RoPE on every layer; 'mistral' is as long as 'smollm3');
  // each is caught by its teacher-forced KL (10x-100x the bound), without a greedy run
  ['a wrong residual scale (x1.1), granite', 'tiny-granite', 'q8_0', (b) => withF32(b, 'granite.residual_scale', (v) => v * 1.1), { greedy: false }],
  ['a wrong post-FFN norm (layer 1 +10%), olmo2', 'tiny-olmo2', 'f32', (b) => withF32Tensor(b, 'blk.1.post_ffw_norm.weight', (v) => v * 1.1), { greedy: false }],
  ['RoPE on the no-RoPE layer (read as mistral), smollm3', 'tiny-smollm3', 'q8_0', (b) => withArch(b, 'smollm3', 'mistral'), { greedy: false }],
  // YaRN's ramp is placed by the original context; mistral3's queries past it are scaled by the temperature
  ['a wrong YaRN original context (x4), llama', 'tiny-yarn', 'f32', (b) => withU32(b, 'llama.rope.scaling.original_context_length', (v) => v * 4), { greedy: false }],
  ['one more expert used per token (2 -> 3), qwen3moe', 'tiny-qwen3moe', 'f32', (b) => withU32(b, 'qwen3moe.expert_used_count', (v) => v + 1), { greedy: false }],
  // gpt-oss: the sinks of a local layer left out of the softmax, and its sliding window
  ['no attention sinks (layer 0), gpt-oss', 'tiny-gptoss', 'f32', (b) => withF32Tensor(b, 'blk.0.attn_sinks.weight', () => -Infinity), { greedy: false }],
  ['a wider sliding window (8 -> 12), gpt-oss', 'tiny-gptoss', 'mxfp4', (b) => withU32(b, 'gpt-oss.attention.sliding_window', (v) => v + 4), { greedy: false }],
  ['a wrong attention temperature scale (x2), mistral3', 'tiny-mistral3', 'f32', (b) => withF32(b, 'mistral3.attention.temperature_scale', (v) => v * 2), { greedy: false }],
];
const peerRuns = new Map();   // name -> llama.cpp's run, kept until the last test that uses it
const bestOk = new Map();     // name -> whether the unmutated model agreed at the best level
// A mutation test reuses llama.cpp's run of the matrix and its verdict on the unmutated
// model (declared right after that model's levels, so the run is dropped as soon as it
// is done with); a model outside this run's matrix ($PEER_SHAPES) gets both computed.
const mutationTest = ([what, shape, type, mutate, opts], last = true) => {
  const name = `${shape}-${type}`;
  test(`the comparison fails ${what}: ${name}`, async () => {
    try { await mutated(what, shape, type, mutate, opts); } finally { if (last) peerRuns.delete(name); }
  });
};
async function mutated(what, shape, type, mutate, opts) {
  const name = `${shape}-${type}`;
  const file = modelPath(shape, type);
  assert.ok(existsSync(file), `${file} missing`);
  const bad = join(mutWork, `${name}-mutated.gguf`);
  writeFileSync(bad, mutate(readFileSync(file)));
  let ref = peerRuns.get(name);
  if (ref && opts?.greedy === false) ref = { ...ref, greedy: null };
  if (!ref) ref = await peerRun(file, shape, type, opts);
  if (bestOk.has(name)) {
    assert.ok(bestOk.get(name), `the unmutated model must agree first (it failed its own test above)`);
  } else {
    const good = await compare(file, ref, type, 'best');
    assert.deepEqual(good.problems, [], `the unmutated model must agree first: ${good.problems.join('; ')}`);
  }
  const { row, problems } = await compare(bad, ref, type, 'best');
  assert.ok(problems.length > 0, `${what} went unnoticed: mean KL ${fmt(row.kl)} (bound ${fmt(row.bound)}), greedy ${row.greedy}`);
  rows.push({ name: `${name}*`, cpu: 'mutated', ...row });
}
// whether `wgllm devices` finds an adapter (asked once), and what it said otherwise
let webgpuOk, webgpuWhy = '';
function webgpuUsable() {
  if (webgpuOk === undefined) {
    useWebgpuEnv();
    const r = runWgllm(['devices'], { timeoutMs: 60000 });
    webgpuOk = r.status === 0 && /^webgpu: (?!not available)/m.test(r.stdout);
    webgpuWhy = ((r.stdout || '').match(/^webgpu: .*$/m) || [r.stderr || ''])[0].trim();
  }
  return webgpuOk;
}
const mutationsOf = (name) => MUTATIONS.filter(([, shape, type]) => `${shape}-${type}` === name);
const inMatrix = new Set();
// An entry tagged 'webgpu' repeats a model of the matrix on WebGPU alone: its mutations are the
// first entry's, and llama.cpp's run is its own (the first entry has dropped it by then).
for (const [shape, types, levels = LEVELS, tag] of MATRIX) {
  for (const type of types) {
    const file = modelPath(shape, type);
    const name = `${shape}-${type}`;
    inMatrix.add(name);
    const muts = tag === 'webgpu' ? [] : mutationsOf(name);
    for (const cpu of levels) {
      const label = cpu === 'best' ? '' : cpu === 'webgpu' ? ' (WebGPU)' : ` (WGLLM_CPU=${cpu})`;
      test(`logits agree with llama.cpp: ${name}${label}`, async (t) => {
        assert.ok(existsSync(file), `${file} missing: run tests/peer/run.sh (it synthesizes the models)`);
        if (cpu === 'webgpu' && !webgpuUsable()) {
          if (process.env.WGLLM_REQUIRE_WEBGPU) assert.fail(`no WebGPU adapter: ${webgpuWhy}`);
          t.skip(`no WebGPU adapter: ${webgpuWhy}`);
          return;
        }
        if (!peerRuns.has(name)) peerRuns.set(name, await peerRun(file, shape, type));
        const ref = peerRuns.get(name);
        if (cpu === levels[levels.length - 1] && !muts.length) peerRuns.delete(name);
        const { row, problems } = await compare(file, ref, type, cpu);
        if (cpu === 'best') bestOk.set(name, problems.length === 0);
        rows.push({ name, cpu, ...row });
        if (row.agree !== undefined) { top1.get(cpu).agree += row.agree; top1.get(cpu).total += N_POS; }
        assert.deepEqual(problems, [], `${name} (kernels ${cpu}): ${problems.join('; ')}`);
      });
    }
    muts.forEach((m, i) => mutationTest(m, i === muts.length - 1));
  }
}
for (const m of MUTATIONS) if (!inMatrix.has(`${m[1]}-${m[2]}`)) mutationTest(m);

for (const cpu of LEVELS) {
  test(`aggregate top-1 agreement >= 99% over all models (kernels ${cpu})`, () => {
    const t = top1.get(cpu);
    assert.ok(t.total > 0, 'no model was compared');
    assert.ok(t.agree >= 0.99 * t.total, `top-1 agreement ${t.agree}/${t.total} < 99%`);
  });
}

// ---- damaged files: clear error, non-zero exit, no crash ----
const work = mkdtempSync(join(tmpdir(), 'wgllm-bad-'));
after(() => rmSync(work, { recursive: true, force: true }));

function damaged(kind) {
  const src = readFileSync(modelPath('tiny', 'f32'));
  let buf;
  if (kind === 'truncated-1000') buf = src.subarray(0, 1000);
  else if (kind === 'truncated-data') buf = src.subarray(0, Math.floor(src.length * 0.6));
  else {
    buf = Buffer.from(src);
    if (kind === 'huge-tensor-count') buf.writeBigUInt64LE(1n << 40n, 8);   // header n_tensors
    if (kind === 'huge-key-length') buf.writeBigUInt64LE(1n << 50n, 24);    // first KV key length
    if (kind === 'bad-magic') buf.write('GGUX', 0, 'latin1');
  }
  const p = join(work, `${kind}.gguf`);
  writeFileSync(p, buf);
  return p;
}

for (const kind of ['truncated-1000', 'truncated-data', 'huge-tensor-count', 'huge-key-length', 'bad-magic']) {
  test(`wgllm run refuses a damaged GGUF cleanly: ${kind}`, () => {
    assert.ok(existsSync(modelPath('tiny', 'f32')), 'tiny-f32 model missing');
    const p = damaged(kind);
    const r = runWgllm(['run', '-m', p, '--prompt-ids', '1,2,3', '-n', '4', '--ids'], { timeoutMs: 60000 });
    assert.equal(r.error, undefined, `${kind}: ${r.error}`);
    assert.equal(r.signal, null, `${kind}: wgllm died by signal ${r.signal}; stderr: ${r.stderr.slice(-500)}`);
    assert.notEqual(r.status, 0, `${kind}: wgllm exited 0 on a damaged file; stdout: ${r.stdout.slice(0, 200)}`);
    assert.ok(!/AddressSanitizer|runtime error|Segmentation/.test(r.stderr), `${kind}: sanitizer/crash report: ${r.stderr.slice(-500)}`);
    assert.match(r.stderr, /trunc|end of file|eof|short|size|bound|exceed|offset|magic|invalid|corrupt|too (large|many|big)|count|length/i,
      `${kind}: error message does not name the problem: ${JSON.stringify(r.stderr.slice(-300))}`);
  });
}
