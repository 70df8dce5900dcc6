// relaxed.mjs - builds src/quant/repack_relaxed.c into the relaxed-SIMD kernel
// module (see that file for why) with a current clang (npm @yowasp/clang, a
// devDependency of web/), twice: importing a shared memory (the threaded
// core) and a plain one (the single-threaded cores). Writes an emscripten JS
// library (web/src/relaxed.lib.js is the template) with both modules inlined
// as base64, so that every core, and every thread of one, can instantiate its
// own copy synchronously over the core's memory.
//
//   node web/relaxed.mjs OUT.lib.js
//
// Fails (and writes nothing) if a module imports anything but env.memory,
// has data segments or touches a global (the stack pointer): a stack or data
// of its own would be laid over the core's data.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = process.argv[2];
if (!out) {
  console.error('usage: node web/relaxed.mjs OUT.lib.js');
  process.exit(2);
}
let clang;
try {
  clang = await import('@yowasp/clang');
} catch {
  console.error('web/relaxed.mjs: @yowasp/clang is not installed (run `bash scripts/deps.sh test`, or `npm ci` in web/)');
  process.exit(1);
}
const { commands } = clang;
const src = 'repack_relaxed.c';
const files = {
  [src]: fs.readFileSync(path.join(root, 'src', 'quant', src)),
  quant: { 'repack_relaxed.h': fs.readFileSync(path.join(root, 'src', 'quant', 'repack_relaxed.h')) },
};
const quiet = { stdout: null, stderr: (b) => { if (b) process.stderr.write(b); } };
await commands.clang(null, {}, { fetchProgress: () => {} }); // loads LLVM without printing its progress

async function build(shared) {
  const cflags = ['--target=wasm32', '-O2', '-msimd128', '-mrelaxed-simd', '-ffp-contract=off', '-ffreestanding',
    '-nostdlib', '-I.', '-Wall', '-Wextra', '-Werror', ...(shared ? ['-matomics', '-mbulk-memory'] : [])];
  const obj = await commands.clang([...cflags, '-c', src, '-o', 'k.o'], files, quiet);
  const lflags = ['--no-entry', '--import-memory', '--strip-all', ...(shared ? ['--shared-memory', '--max-memory=4294967296'] : [])];
  const linked = await commands['wasm-ld']([...lflags, '-o', 'k.wasm', 'k.o'], { 'k.o': obj['k.o'] }, quiet);
  return linked['k.wasm'];
}

// The imports, read from the binary's import section (WebAssembly.Module
// cannot compile it where relaxed SIMD is off: node 20 without its flag), and
// the ids of its sections.
function importsOf(bytes) {
  let i = 8;
  const names = [], sections = [];
  const leb = () => { let r = 0, s = 0, b; do { b = bytes[i++]; r |= (b & 0x7f) << s; s += 7; } while (b & 0x80); return r >>> 0; };
  const str = () => { const n = leb(); const t = Buffer.from(bytes.subarray(i, i + n)).toString(); i += n; return t; };
  while (i < bytes.length) {
    const id = bytes[i++], size = leb(), end = i + size;
    sections.push(id);
    if (id === 2) {
      for (let n = leb(); n > 0; n--) {
        const m = str(), f = str(), kind = bytes[i++];
        names.push(`${m}.${f}:${kind}`);
        if (kind === 0) leb(); // function: type index
        else if (kind === 2) { const flags = bytes[i++]; leb(); if (flags & 1) leb(); } // memory limits
        else throw new Error(`import kind ${kind}`);
      }
    }
    i = end;
  }
  return { names, sections };
}

const mods = {};
for (const shared of [true, false]) {
  let bytes;
  try {
    bytes = await build(shared);
  } catch (e) {
    console.error(`web/relaxed.mjs: building the ${shared ? 'shared' : 'plain'} module of src/quant/${src} failed (${e.message})`);
    process.exit(1);
  }
  const { names, sections } = importsOf(bytes);
  if (names.length !== 1 || names[0] !== 'env.memory:2') {
    console.error(`web/relaxed.mjs: the ${shared ? 'shared' : 'plain'} module imports ${names.join(', ')}; only env.memory is allowed`);
    process.exit(1);
  }
  // Data segments, or a stack in use, would be laid over the core's own
  // memory. wasm-ld always defines __stack_pointer (global 0, the only one);
  // the code must never read or write it: no global.get 0 / global.set 0
  // anywhere, the index in any LEB form (the linker leaves relocated indices
  // padded to 5 bytes). A conservative scan: an immediate that happens to
  // hold those bytes fails the build, it cannot let a stack through.
  const lebZeroAt = (k) => { for (let n = 0; n < 5; n++) { if (bytes[k + n] === 0) return true; if (bytes[k + n] !== 0x80) return false; } return false; };
  const globalUse = bytes.findIndex((b, k) => (b === 0x23 || b === 0x24) && lebZeroAt(k + 1));
  if (sections.includes(11) || sections.includes(12) || globalUse >= 0) {
    console.error(`web/relaxed.mjs: the ${shared ? 'shared' : 'plain'} module has ` +
      `${globalUse >= 0 ? `a global access at byte ${globalUse} (a stack?)` : 'data segments'}; it may only compute on the core's memory`);
    process.exit(1);
  }
  mods[shared ? 'shared' : 'plain'] = Buffer.from(bytes).toString('base64');
}
const template = fs.readFileSync(path.join(root, 'web', 'src', 'relaxed.lib.js'), 'utf8');
const lib = template.replace('@RELAXED_SHARED_BASE64@', mods.shared).replace('@RELAXED_PLAIN_BASE64@', mods.plain);
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, lib);
