import { loadModelContext, nextTokenLogProbs, seededIds } from '/work/main/tools/peer/peer.mjs';
import { wgllmLogits, logSoftmax, klLog, argmax } from '/work/main/tools/peer/wgllm.mjs';
const path = process.argv[2]; const kvF32 = process.argv[3] === 'f32';
const mc = await loadModelContext(path, { kvF32 });
const V = mc.model.tokens ? null : null;
const toks = [1, ...seededIds(63, 100, 30000, 7)];
const peer = await nextTokenLogProbs(mc, toks);
const ours = wgllmLogits(path, toks, peer[0].length);
let kl = 0, top = 0, maxkl = 0;
for (let i = 0; i < toks.length; i++) {
  const q = logSoftmax(ours[i]); const k = klLog(peer[i], q); kl += k; maxkl = Math.max(maxkl, k);
  if (argmax(peer[i]) === argmax(q)) top++; if (process.env.PER) console.log(i, k.toExponential(2), argmax(peer[i]) === argmax(q));
}
console.log(path, 'kv', kvF32 ? 'f32' : 'f16', 'meanKL', (kl / toks.length).toExponential(3), 'maxKL', maxkl.toExponential(3), 'top1', top + '/' + toks.length, 'peak p', Math.exp(Math.max(...peer[5])).toFixed(3));
await mc.dispose();
