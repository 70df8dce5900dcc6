// Every byte-level BPE pre-tokenizer wgllm knows, against llama.cpp's. There are no
// vocabulary files for most of those models here, but llama.cpp chooses the
// pre-tokenizer (and the add-BOS / ignore-merges flags that go with it) purely from
// the `tokenizer.ggml.pre` string. So the GPT-2 vocabulary is rewritten once per name
// with only that string changed, and both tokenizers run on a text set built to
// tell the regexes apart: case runs (ASCII and not, titlecase), combining marks,
// digit runs of 1-7, contractions in both cases, punctuation and whitespace runs,
// CRLF, emoji sequences, code. The names come from wgllm's own table in
// src/vocab/vocab_bpe.c, so a name added there is tested here without further edits.
//
// llama.cpp (like wgllm) runs \p{..} regexes on category-collapsed text, so for
// tekken / gpt-4o every non-ASCII letter counts as both upper- and lowercase; the
// expected ids here are llama.cpp's, not Hugging Face's, on such text.
//
// Per name, all texts are first tokenized as one document (one wgllm process); only
// when that disagrees is each text tried alone, to name the ones that differ.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadVocab, tokenizeWith } from '../../tools/peer/peer.mjs';
import { ROOT, VOCAB_DIR, wgllmTokenize, wgllmTokenizeRaw } from '../../tools/peer/wgllm.mjs';

const BASE = join(VOCAB_DIR, 'ggml-vocab-gpt-2.gguf');

// The list: these must be in wgllm's table.
const REQUIRED = ['default', 'gpt-2', 'llama3', 'llama-bpe', 'qwen2', 'deepseek-llm', 'deepseek-coder',
  'falcon', 'starcoder', 'refact', 'mpt', 'smollm', 'phi-2', 'tekken', 'gpt-4o', 'dbrx', 'smaug-bpe'];

const TEXTS = [
  "Hello World HELLO world hELLO WoRlD HTTPServer getHTTPResponseCode iPhone XMLHttpRequest",
  "It's they're we've I'm you'll he'd IT'S THEY'RE WE'VE I'M YOU'LL HE'D it'S don'T 'x 's",
  "ÉCOLE école Élan déjà-vu STRASSE straße ẞ Σίσυφος ΣΊΣΥΦΟΣ σ ς Ǆemal ǅemal ǆemal ǈ ǋ",
  "ÀÉÎõü ÑandÚ McDonald's O'Neil l'été L'ÉTÉ",
  "日本語のテキスト、カタカナ ひらがな 漢字。中文字符，한국어 문장！ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
  "ภาษาไทย สวัสดีครับ น้ำ ที่นี่ ก่อน",
  "नमस्ते दुनिया क्षत्रिय हिन्दी ।",
  "e\u0301te\u0301 Ae\u0308 a\u0300\u0301\u0302b Z\u0335a\u0336",
  "1 12 123 1234 12345 123456 1234567 a1b22c333 3.14159 1,000,000 ١٢٣ ½ ²³ Ⅻ",
  "x9 9x 99999999 0000007",
  "!!! ... ?!?! ;;; --- ((( ))) {{}} [[]] <<>> ``` ~~~ ^^^ $$$ %%% &&& *** ||| \\\\ // @@ ## ''",
  "a  b   c    d\te\t\tf \t g\n\nh\r\ni\r\n\r\nj\rk \n l  \n\n  m",
  "   leading and trailing   ",
  "\n\n\n",
  "end with space ",
  "emoji 🦙🚀👍🏽👨‍👩‍👧‍👦🏳️‍🌈 ❤️ ✨ 🇯🇵 done",
  "def f(x):\n    if x > 0:\n        return x ** 2  # square\n\treturn -x\n",
  "int main(void) { printf(\"%d\\n\", a[i]->b); return 0; } // C++ i++ x+=1 a/b",
  "path/to/file.txt https://example.com/a?b=c&d=e#frag user@mail.org C:\\Windows\\ ~/.bashrc",
  "mixedCase_snake-kebab.dot/slash\\back $HOME @user #tag `code` a^b a|b a~b",
  "\u00a0nbsp\u2003em\u200bzw\u3000ideo\u2028ls\u0085nel",
  "Привет, МИР! ПрИвЕт мир. Ёж ёж",
  "«quotes» „German“ “curly” ‘single’ — – … ¡Hola! ¿Qué?",
  "ǅ ǈǉ ǋǌ ᾈ ᾼ ᾳ ʰʲ ˢ ꜱ ª º",
  "a'b a'S a's A'Ll A'LL a're",
  "tab\there/slash\n/next line\r\n/win",
];

function preNames() {
  const src = readFileSync(join(ROOT, 'src/vocab/vocab_bpe.c'), 'utf8');
  const table = src.slice(src.indexOf('k_pre_defs[] = {'));
  const body = table.slice(0, table.indexOf('\n};'));
  const names = [];
  // an entry starts with its names: one or more adjacent string literals
  for (const m of body.matchAll(/^\s*\{((?:\s*"[^"]*")+)\s*,/gm))
    names.push(...[...m[1].matchAll(/"([^"]*)"/g)].map((x) => x[1]).join('').split('|'));
  return names;
}

// ---- GGUF metadata rewrite (the vocab files have no tensors) ----

function ggufReplacePre(buf, pre) {
  let o = 0;
  const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(o)); o += 8; return v; };
  const str = () => { const n = u64(); const s = buf.toString('utf8', o, o + n); o += n; return s; };
  const SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) { const t = u32(); const n = u64(); for (let i = 0; i < n; i++) skip(t); return; }
    if (!(type in SIZES)) throw new Error(`gguf: unknown value type ${type} at ${o}`);
    o += SIZES[type];
  };
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('gguf: bad magic');
  o = 4;
  const version = u32();
  if (version !== 3) throw new Error(`gguf: version ${version}`);
  const nTensors = u64();
  if (nTensors !== 0) throw new Error('gguf: expected a vocabulary-only file');
  const nKv = u64();
  let span = null;
  for (let k = 0; k < nKv; k++) {
    const start = o;
    const key = str();
    const type = u32();
    skip(type);
    if (key === 'tokenizer.ggml.pre') { assert.equal(type, 8); span = [start, o, key]; }
  }
  const enc = (s) => { const b = Buffer.from(s, 'utf8'); const l = Buffer.alloc(8); l.writeBigUInt64LE(BigInt(b.length)); return Buffer.concat([l, b]); };
  const kv = Buffer.concat([enc('tokenizer.ggml.pre'), Buffer.from([8, 0, 0, 0]), enc(pre)]);
  let head;
  if (o !== buf.length) throw new Error(`gguf: ${buf.length - o} bytes after the metadata`);
  if (span) {
    head = Buffer.concat([buf.subarray(0, span[0]), kv, buf.subarray(span[1], o)]);
  } else {
    head = Buffer.concat([buf.subarray(0, o), kv]);
    head.writeBigUInt64LE(BigInt(nKv + 1), 16);
  }
  // no tensors, so no data section: nothing follows the metadata (the originals
  // are not padded either, and llama.cpp reads them so)
  return head;
}

const names = preNames();
const dir = mkdtempSync(join(tmpdir(), 'wgllm-pretok-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const base = readFileSync(BASE);

test('wgllm knows every pre-tokenizer the issue lists', () => {
  for (const n of REQUIRED) assert.ok(names.includes(n), `'${n}' missing from k_pre_defs`);
});

test('the GGUF rewrite changes only tokenizer.ggml.pre', () => {
  const f = join(dir, 'same.gguf');
  writeFileSync(f, ggufReplacePre(base, 'gpt-2'));
  const g = readFileSync(f);
  // the original's own pre string: the file must come back byte-identical
  assert.ok(g.equals(base));
  const h = ggufReplacePre(base, 'tekken');
  assert.equal(h.length, base.length + 1);
  assert.ok(h.includes(Buffer.from('tokenizer.ggml.pre\x08\0\0\0\x06\0\0\0\0\0\0\0tekken', 'latin1')));
});

const DOC = TEXTS.join('\n\n');

// llama.cpp refuses a name it does not know (e.g. 'gpt-neox', which the issue
// mentions but llama.cpp has never accepted); wgllm must refuse it as well.
test('an unknown pre-tokenizer name is refused by both', async () => {
  const f = join(dir, 'gpt-neox.gguf');
  writeFileSync(f, ggufReplacePre(base, 'gpt-neox'));
  await assert.rejects(loadVocab(f));
  const r = wgllmTokenizeRaw(f, 'hello');
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /gpt-neox/);
});

for (const pre of names) {
  test(`pre-tokenizer '${pre}' agrees with llama.cpp`, async () => {
    const f = join(dir, `${pre}.gguf`);
    writeFileSync(f, ggufReplacePre(base, pre));
    const model = await loadVocab(f);
    try {
      const want = tokenizeWith(model, DOC);
      const got = wgllmTokenize(f, DOC);
      if (JSON.stringify(got) === JSON.stringify(want)) return;
      const bad = [];
      for (const t of TEXTS) {
        const w = tokenizeWith(model, t), g = wgllmTokenize(f, t);
        if (JSON.stringify(w) !== JSON.stringify(g))
          bad.push(`  ${JSON.stringify(t)}\n    llama.cpp ${w.join(' ')}\n    wgllm     ${g.join(' ')}`);
      }
      assert.fail(`'${pre}': ${bad.length ? bad.length + ' text(s) differ:\n' + bad.join('\n') : 'only the joined document differs'}`);
    } finally {
      await model.dispose();
    }
  });
}
