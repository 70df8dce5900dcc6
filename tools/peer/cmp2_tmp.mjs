import { seededIds } from '/work/main/tools/peer/peer.mjs';
import { wgllmLogits, logSoftmax, klLog, argmax } from '/work/main/tools/peer/wgllm.mjs';
const path = process.argv[2];
const toks = [1, ...seededIds(63, 100, 30000, 7)];
const V = Number(process.argv[3]);
process.env.WGLLM_CPU = 'scalar';
const a = wgllmLogits(path, toks, V);
delete process.env.WGLLM_CPU;
const b = wgllmLogits(path, toks, V);
let kl = 0, md = 0;
for (let i = 0; i < toks.length; i++) { kl += klLog(logSoftmax(a[i]), logSoftmax(b[i])); for (let j = 0; j < V; j++) md = Math.max(md, Math.abs(a[i][j] - b[i][j])); }
console.log(path, 'scalar vs simd meanKL', (kl / toks.length).toExponential(3), 'max |dlogit|', md);
