// llama.cpp (through node-llama-cpp 3.21.1, CPU build) as the reference peer for
// wgllm: tokenization, teacher-forced next-token distributions, greedy generation
// and prompt/generation timing. Used by tests/peer/*.test.mjs and bench/.
//
// Why these choices:
// - getLlama({gpu:false, build:'never'}) uses the prebuilt CPU binaries that npm
//   installed; it never compiles or downloads anything.
// - node-llama-cpp's model.tokenize() always calls llama.cpp with add_special=false
//   (its 2nd argument is parse_special), so add_special is reproduced here from the
//   vocabulary's own add-BOS/add-EOS flags (llama_vocab_get_add_bos/eos), which is
//   exactly what llama_tokenize(add_special=true) does.
// - Full distributions: controlledEvaluate with generateNext.probabilities and the
//   default sampler config (temperature 0 = greedy sampler only) returns softmax of
//   the raw logits over the WHOLE vocabulary (AddonContext.cpp SampleToken), so no
//   top-k tail handling is needed.
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';

let llamaPromise = null;
let llamaThreads = 0;

/* One Llama instance per process (loading the bindings takes ~0.4 s). llama.cpp's
 * own logs are dropped below error level so test output stays readable. */
export function peerLlama({ threads = 2 } = {}) {
  if (llamaPromise && threads !== llamaThreads)
    throw new Error(`peerLlama: already created with ${llamaThreads} threads`);
  if (!llamaPromise) {
    llamaThreads = threads;
    llamaPromise = getLlama({
      gpu: false,
      build: 'never',
      maxThreads: threads,
      logLevel: LlamaLogLevel.error,
      // vocab-only loads log a harmless "missing tensor" error; keep stderr quiet
      // unless PEER_VERBOSE is set.
      logger: (level, message) => {
        if (process.env.PEER_VERBOSE) process.stderr.write(`[llama.cpp ${level}] ${message}`);
      },
    });
  }
  return llamaPromise;
}

/* A vocabulary-only model for tokenization. Caller disposes (await m.dispose()). */
export async function loadVocab(modelPath) {
  const llama = await peerLlama();
  return llama.loadModel({ modelPath, vocabOnly: true });
}

/* llama_tokenize(text, add_special, parse_special) for valid UTF-8 text. */
export function tokenizeWith(model, text, { addSpecial = true, parseSpecial = false } = {}) {
  const ids = Array.from(model.tokenize(text, parseSpecial));
  if (addSpecial) {
    // llama_tokenize adds BOS/EOS only when the vocabulary asks for them; it does
    // not check whether the text already started with BOS (that is only a warning).
    if (model.tokens.shouldPrependBosToken && model.tokens.bos != null) ids.unshift(model.tokens.bos);
    if (model.tokens.shouldAppendEosToken && model.tokens.eos != null) ids.push(model.tokens.eos);
  }
  return ids;
}

/* A full model plus a context sized for `contextSize` tokens. The KV cache is
 * llama.cpp's default F16, which wgllm reproduces (it rounds q, K, V and the
 * attention weights to f16 exactly where ggml does): with it the two agree to
 * KL ~1e-12 on F32/Q8_0 llama models, while an F32 peer cache would leave a
 * KL ~1e-7..1e-3 floor of pure cache-format difference. */
export async function loadModelContext(modelPath, { threads = 2, contextSize = 256, batchSize = 512, kvF32 = false, flashAttention = false } = {}) {
  const llama = await peerLlama({ threads });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
  const ctxOpts = { contextSize, batchSize: Math.min(batchSize, contextSize), threads: { ideal: threads, min: threads }, sequences: 1, flashAttention };
  if (kvF32) { ctxOpts.experimentalKvCacheKeyType = 'F32'; ctxOpts.experimentalKvCacheValueType = 'F32'; }
  const context = await model.createContext(ctxOpts);
  const sequence = context.getSequence();
  return {
    model, context, sequence,
    async dispose() { await context.dispose(); await model.dispose(); },
  };
}

export function vocabSize(model) {
  // llama_vocab_n_tokens: the number of entries in tokenizer.ggml.tokens
  const toks = model.fileInfo.metadata?.tokenizer?.ggml?.tokens;
  if (!Array.isArray(toks)) throw new Error('peer: model has no tokenizer.ggml.tokens array');
  return toks.length;
}

function renormalizeLog(row) {
  let m = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > m) m = row[i];
  let s = 0;
  for (let i = 0; i < row.length; i++) s += Math.exp(row[i] - m);
  const lse = m + Math.log(s);
  for (let i = 0; i < row.length; i++) row[i] -= lse;
  return row;
}

/* Teacher-forced next-token log-probabilities: row i is log p(. | tokens[0..i]) over
 * the full vocabulary, in float64. llama.cpp's softmax sums in float32, so its
 * probabilities add up to 1 only within ~1e-4 over a 32k vocabulary, which alone
 * would show as KL ~1e-4; each row is therefore renormalized in float64 (log p is
 * the raw logit minus a constant, so this recovers the exact softmax up to float32
 * rounding of each p). An underflowed probability becomes -Infinity. Evaluates in
 * chunks so that only a few vocabulary-sized Maps exist at a time. */
export async function nextTokenLogProbs(mc, tokens, { chunk = 8 } = {}) {
  const n = vocabSize(mc.model);
  await mc.sequence.clearHistory();
  const rows = [];
  for (let s = 0; s < tokens.length; s += chunk) {
    const part = tokens.slice(s, s + chunk).map((t) => [t, { generateNext: { probabilities: true } }]);
    const out = await mc.sequence.controlledEvaluate(part);
    for (let i = 0; i < part.length; i++) {
      const probs = out[i]?.next?.probabilities;
      if (!probs) throw new Error(`peer: no probabilities for position ${s + i}`);
      const row = new Float64Array(n).fill(-Infinity);
      for (const [tok, p] of probs) row[tok] = Math.log(p);
      rows.push(renormalizeLog(row));
    }
  }
  return rows;
}

/* Pure greedy generation (argmax of the raw logits, no penalties) of exactly n tokens
 * after promptIds, never stopping at EOG. With keepRows, rows[k] holds the full
 * log-probability row of step k so a caller can judge near-ties. */
export async function greedyGenerate(mc, promptIds, n, { keepRows = true } = {}) {
  await mc.sequence.clearHistory();
  const ids = [];
  const rows = [];
  let input = promptIds.map((t, i) => (i === promptIds.length - 1
    ? [t, { generateNext: { token: true, probabilities: keepRows, options: { temperature: 0 } } }]
    : t));
  const nv = vocabSize(mc.model);
  for (let step = 0; step < n; step++) {
    const out = await mc.sequence.controlledEvaluate(input);
    const next = out[input.length - 1]?.next;
    if (next?.token == null) throw new Error(`peer: greedy step ${step} produced no token`);
    ids.push(next.token);
    if (keepRows) {
      const row = new Float64Array(nv).fill(-Infinity);
      for (const [tok, p] of next.probabilities) row[tok] = Math.log(p);
      rows.push(renormalizeLog(row));
    }
    input = [[next.token, { generateNext: { token: true, probabilities: keepRows, options: { temperature: 0 } } }]];
  }
  return { ids, rows };
}

/* Times prompt processing and generation separately:
 * - pp: one controlledEvaluate() over the whole prompt (one llama_decode batch of
 *   nPrompt tokens, logits only for the last position, which is sampled greedily to
 *   get the first new token); t/s = nPrompt / elapsed.
 * - tg: then nGen single-token steps, each feeding the previous greedy token and
 *   sampling the next (one llama_decode of batch 1 + greedy sampling per step);
 *   t/s = nGen / elapsed. The KV cache holds the prompt, as in a real reply.
 * The history is cleared between repetitions; min/median/max over `reps`. */
export async function benchModel(mc, promptIds, nGen, reps) {
  const pp = [], tg = [];
  for (let r = 0; r < reps; r++) {
    await mc.sequence.clearHistory();
    const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
    const input = promptIds.map((t, i) => (i === promptIds.length - 1 ? [t, greedy] : t));
    let t0 = process.hrtime.bigint();
    const first = await mc.sequence.controlledEvaluate(input);
    let t1 = process.hrtime.bigint();
    pp.push(promptIds.length / (Number(t1 - t0) / 1e9));
    let tok = first[promptIds.length - 1].next.token;
    t0 = process.hrtime.bigint();
    for (let i = 0; i < nGen; i++) {
      const out = await mc.sequence.controlledEvaluate([[tok, greedy]]);
      tok = out[0].next.token;
    }
    t1 = process.hrtime.bigint();
    tg.push(nGen / (Number(t1 - t0) / 1e9));
  }
  const stats = (a) => { const s = [...a].sort((x, y) => x - y); return { min: s[0], median: s[Math.floor(s.length / 2)], max: s[s.length - 1] }; };
  return { pp: { tokens: promptIds.length, ...stats(pp) }, tg: { tokens: nGen, ...stats(tg) } };
}

/* Deterministic pseudo-random token ids in [lo, hi) (xorshift32), for benchmarks. */
export function seededIds(n, lo, hi, seed = 12345) {
  let x = seed >>> 0 || 1;
  const out = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    out.push(lo + (x % (hi - lo)));
  }
  return out;
}
