import { execFileSync } from 'child_process'; import { readFileSync } from 'fs';
const [m, V, toks] = process.argv.slice(2);
function run(cpu) { const env = { ...process.env }; if (cpu) env.WGLLM_CPU = cpu; else delete env.WGLLM_CPU;
  execFileSync('build/release/wgllm', ['logits', '-m', m, '--tokens', toks, '-o', '/tmp/l.f32', '-t', '1'], { env });
  const b = readFileSync('/tmp/l.f32'); return new Float32Array(b.buffer, b.byteOffset, b.length / 4); }
const a = run('scalar'), b = run('avx2'), c = run('');
const n = a.length / V;
for (let i = 0; i < n; i++) { let d1 = 0, d2 = 0; for (let j = i * V; j < (i + 1) * V; j++) { d1 = Math.max(d1, Math.abs(a[j] - b[j])); d2 = Math.max(d2, Math.abs(b[j] - c[j])); } console.log(i, d1, d2); }
