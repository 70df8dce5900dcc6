// Constrained decoding speed: wgllm against llama.cpp (node-llama-cpp 3.21.1,
// CPU build) on the same GGUF file and JSON Schema, greedy.
//
// usage: node bench/grammar.mjs [-n 48] [-r 3] [-t 2] MODEL.gguf SCHEMA.json
//
// Both sides generate up to n tokens after the same short prompt, without and
// with the schema's grammar, and report decode tokens/s (after the first
// token) as the median of r runs:
//   llama.cpp: sequence.evaluate() with temperature 0, and for the constrained
//     run a LlamaGrammarEvaluationState of llama.createGrammarForJsonSchema()
//     (node-llama-cpp's schema converter, llama.cpp's grammar sampler); it stops
//     at n tokens or an end-of-generation token;
//   wgllm: `wgllm bench --json-schema` (the engine, one slot; the grammar from
//     wgllm_json_schema_to_grammar; the request ends when the grammar is done).
// The text differs between the two (different kernels pick different argmaxes on
// a random-weight model), so the comparison is tokens/s, not tokens.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import { peerLlama, loadModelContext, tokenizeWith } from '../tools/peer/peer.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const requirePeer = createRequire(join(ROOT, 'tools', 'peer', 'package.json'));
const { LlamaGrammarEvaluationState } = await import(requirePeer.resolve('node-llama-cpp'));

const argv = process.argv.slice(2);
const o = { n: 48, r: 3, t: 2 };
const files = [];
for (let i = 0; i < argv.length; i++) {
  if (['-n', '-r', '-t'].includes(argv[i])) o[argv[i][1]] = Number(argv[++i]);
  else files.push(argv[i]);
}
if (files.length !== 2) {
  console.error('usage: node bench/grammar.mjs [-n 48] [-r 3] [-t 2] MODEL.gguf SCHEMA.json');
  process.exit(2);
}
const [modelPath, schemaPath] = files;
const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
const PROMPT = 'Reply with the JSON object:';
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

const llama = await peerLlama({ threads: o.t });
const mc = await loadModelContext(modelPath, { threads: o.t, contextSize: 512 });
const t0 = performance.now();
const grammar = await llama.createGrammarForJsonSchema(schema);
const compileMs = performance.now() - t0;
const prompt = tokenizeWith(mc.model, PROMPT);
const peer = {};
for (const constrained of [false, true]) {
  const tps = [];
  let tokens = 0;
  for (let r = 0; r < o.r; r++) {
    await mc.sequence.clearHistory();
    const grammarEvaluationState = constrained ? new LlamaGrammarEvaluationState({ model: mc.model, grammar }) : undefined;
    let n = 0, tFirst = 0, tEnd = 0;
    for await (const tok of mc.sequence.evaluate(prompt, { temperature: 0, grammarEvaluationState })) {
      tEnd = performance.now();
      if (n === 0) tFirst = tEnd;
      if (constrained && mc.model.isEogToken(tok)) break;
      if (++n >= o.n) break;
    }
    tokens = n;
    tps.push(n > 1 ? (n - 1) / ((tEnd - tFirst) / 1e3) : 0);
  }
  peer[constrained ? 'json schema' : 'unconstrained'] = { tokens, tps: median(tps) };
}
await mc.dispose();

const out = execFileSync(join(ROOT, 'build', 'release', 'wgllm'),
  ['bench', '-m', modelPath, '--json-schema', schemaPath, '-n', String(o.n), '-r', String(o.r), '-t', String(o.t)],
  { encoding: 'utf8' });
const ours = {};
let conv = '';
for (const line of out.split('\n')) {
  const m = /^(unconstrained|json schema)\s+(\d+)\s+([\d.]+)\s+([\d.]+)/.exec(line);
  if (m) ours[m[1]] = { tokens: Number(m[2]), tps: Number(m[4]) };
  const c = /in ([\d.]+) ms/.exec(line);
  if (c) conv = c[1];
}
console.log(`machine: ${os.cpus()[0].model}, ${os.cpus().length} cpus; ${o.t} threads; model ${modelPath}; schema ${schemaPath}`);
console.log(`schema -> grammar: wgllm ${conv} ms, node-llama-cpp ${compileMs.toFixed(2)} ms`);
console.log(`${'decoding'.padEnd(14)} ${'wgllm tok'.padStart(9)} ${'wgllm t/s'.padStart(10)} ${'llama tok'.padStart(9)} ${'llama t/s'.padStart(10)}`);
for (const k of ['unconstrained', 'json schema'])
  console.log(`${k.padEnd(14)} ${String(ours[k]?.tokens ?? '?').padStart(9)} ${(ours[k]?.tps ?? NaN).toFixed(2).padStart(10)} ` +
    `${String(peer[k].tokens).padStart(9)} ${peer[k].tps.toFixed(2).padStart(10)}`);
const ratio = (x) => (x['json schema'].tps / x['unconstrained'].tps * 100).toFixed(1);
console.log(`constrained / unconstrained: wgllm ${ratio(ours)}%, llama.cpp ${ratio(peer)}%`);
