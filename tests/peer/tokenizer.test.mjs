// wgllm's tokenizer against llama.cpp's on the same GGUF vocabularies: the synthetic
// models' vocabularies (tiny = SentencePiece, tiny-qwen2 = byte-level BPE with the
// GPT-2 vocabulary) and the real vocab-only files in ../shared/vocab (except BERT,
// whose WordPiece tokenizer is not wgllm's concern here). Every text is compared with
// add_special on and off; special-token-looking texts also with parse_special.
// Valid UTF-8 goes through node-llama-cpp; invalid byte strings through llama.cpp's
// llama_tokenize called directly (tools/peer/bytes_tokenize.mjs), since a JS string
// cannot carry invalid UTF-8.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadVocab, tokenizeWith } from '../../tools/peer/peer.mjs';
import { tokenizeBytes } from '../../tools/peer/bytes_tokenize.mjs';
import { modelPath, VOCAB_DIR, wgllmTokenize, wgllmTokenizeMany, wgllmTokenizeRaw } from '../../tools/peer/wgllm.mjs';

const TEXTS = [
  // plain English
  'Hello world! This is a simple English sentence, with punctuation; and "quotes".',
  "It's a dog's life, isn't it? I'll see you'd've done it. DON'T SHOUT.",
  // code with indentation
  'def f(x):\n    if x > 0:\n        return x * 2\n\treturn -x\n',
  'int main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf("%d\\n", i);\n\t}\n}\n',
  '   leading spaces',
  'trailing spaces    ',
  // CJK
  '日本語のテキストと中文字符，还有한국어 문장。',
  '東京タワーは333メートルです',
  // emoji (incl. ZWJ sequences and skin tones)
  'emoji 🦙🚀👍🏽 and a family 👨‍👩‍👧‍👦 !',
  '🙂🙂🙂',
  // long runs of whitespace
  'a' + ' '.repeat(40) + 'b',
  '\n\n\n\n\n\n\n',
  '\t\t\t  \t',
  '  \n  \n\n \t\n',
  ' ',
  '\n',
  'x\r\ny\r\n\r\n',
  // digits
  '1234567890 3.14159 1,000,000 0x1F 2024-06-01 007 12345678901234567890',
  '1 22 333 4444 55555 666666',
  // mixed scripts
  'Привет мир, γειά σου κόσμε, مرحبا بالعالم, שלום, नमस्ते, สวัสดี, Ünïcödé façade naïve',
  'mixedCase_snake-kebab.dot/slash\\back $HOME ~/x @user #tag',
  '\u00a0nbsp\u2003em-space\u200bzero-width\u3000ideographic',
  // a dash first, and the empty string (both go through --file)
  '-leading dash',
  '',
  // text that looks like special tokens (also run with parse_special)
  '<s>Hello</s> <unk> <|endoftext|> <|im_start|>user',
];
const SPECIALISH = new Set([TEXTS[TEXTS.length - 1]]);

// invalid UTF-8 (and the odd valid neighbour) as raw bytes, only via --file
const BYTES = [
  Buffer.from([0x61, 0xff, 0xfe, 0x62]),                    // bytes that never occur in UTF-8
  Buffer.from([0xe6, 0x97, 0x78]),                          // truncated 3-byte sequence
  Buffer.from([0xc0, 0xaf, 0x20, 0x41]),                    // overlong encoding of '/'
  Buffer.from([0x80, 0x80, 0x61, 0x62, 0x63]),              // lone continuation bytes
  Buffer.from([0xed, 0xa0, 0x80, 0x20, 0x7a]),              // UTF-16 surrogate encoded
  Buffer.from([0x68, 0x69, 0x20, 0xf0, 0x9f, 0xa6]),        // emoji cut short at the end
  Buffer.from([0xf4, 0x90, 0x80, 0x80]),                    // above U+10FFFF
];

/* llama.cpp's own test strings for the vocab-only files. */
function inpStrings(file) {
  const p = `${file}.inp`;
  if (!existsSync(p)) return [];
  return readFileSync(p, 'utf8').split('\n__ggml_vocab_test__\n').filter((s, i, a) => i < a.length - 1 || s !== '');
}

const show = (s) => JSON.stringify(typeof s === 'string' ? s : `<bytes ${Buffer.from(s).toString('hex')}>`).slice(0, 120);

/* Compares every case for one vocabulary; collects all disagreements, then fails
 * naming each (first 12) with both id lists. */
async function compareVocab(t, file, extra = []) {
  const texts = [...TEXTS, ...extra];
  const cases = [];
  for (const text of texts) {
    for (const addSpecial of [true, false]) cases.push({ text, addSpecial, parseSpecial: false });
    if (SPECIALISH.has(text)) cases.push({ text, addSpecial: true, parseSpecial: true });
  }
  for (const bytes of BYTES)
    for (const addSpecial of [true, false]) cases.push({ text: bytes, addSpecial, parseSpecial: false });

  // peer ids: node-llama-cpp for strings, direct llama_tokenize for bytes
  const vocab = await loadVocab(file);
  const direct = tokenizeBytes(file, cases.map((c) => ({
    bytes: typeof c.text === 'string' ? Buffer.from(c.text, 'utf8') : c.text,
    addSpecial: c.addSpecial, parseSpecial: c.parseSpecial,
  })));
  for (let i = 0; i < cases.length; i++) {
    const c = cases[i];
    if (typeof c.text === 'string') {
      assert.ok(direct[i] !== null, `llama.cpp aborted on valid UTF-8 ${show(c.text)}`);
      c.peer = tokenizeWith(vocab, c.text, c);
      // the two routes into llama.cpp must agree on valid UTF-8: this checks the
      // add_special emulation in peer.mjs, i.e. the peer itself
      assert.deepEqual(c.peer, direct[i], `peer self-check (node-llama-cpp vs llama_tokenize) on ${show(c.text)}`);
    } else {
      c.peer = direct[i];
    }
  }
  await vocab.dispose();

  // wgllm's ids: one process per (add_special, parse_special) pair, not one per text (the suite's time)
  for (const addSpecial of [true, false])
    for (const parseSpecial of [false, true]) {
      const group = cases.filter((c) => c.peer !== null && c.addSpecial === addSpecial && c.parseSpecial === parseSpecial &&
        !Buffer.from(typeof c.text === 'string' ? Buffer.from(c.text, 'utf8') : c.text).includes(0));
      const got = wgllmTokenizeMany(file, group.map((c) => c.text), { addSpecial, parseSpecial });
      group.forEach((c, i) => { c.got = got[i]; });
    }
  const bad = [];
  let noRef = 0;
  for (const c of cases) {
    if (c.peer === null) {
      // llama.cpp aborts on this input (see bytes_tokenize.mjs): no reference ids,
      // but wgllm must still answer or refuse cleanly, never die by a signal
      const r = wgllmTokenizeRaw(file, c.text, c);
      if (r.signal) bad.push(`${show(c.text)}: wgllm died by ${r.signal} (llama.cpp aborts here too, but wgllm must not)`);
      noRef++;
      continue;
    }
    let got = c.got;
    if (got === undefined) {
      try { got = wgllmTokenize(file, c.text, c); } catch (e) { got = e; }
    }
    if (got instanceof Error) { bad.push(`${show(c.text)} add_special=${c.addSpecial}: ${got.message.split('\n')[0]}`); continue; }
    if (JSON.stringify(got) !== JSON.stringify(c.peer))
      bad.push(`${show(c.text)} add_special=${c.addSpecial} parse_special=${c.parseSpecial}\n    llama.cpp: [${c.peer}]\n    wgllm:     [${got}]`);
  }
  t.diagnostic(`${cases.length - bad.length - noRef}/${cases.length} agree, ${noRef} without a llama.cpp reference (it aborts on them)`);
  if (bad.length) assert.fail(`${bad.length}/${cases.length} tokenizations differ for ${file}:\n  ${bad.slice(0, 12).join('\n  ')}`);
}

for (const shape of ['tiny', 'tiny-qwen2']) {
  const file = modelPath(shape, 'f32');
  test(`tokenizer agrees with llama.cpp: ${shape} (${file})`, async (t) => {
    assert.ok(existsSync(file), `${file} missing: run tests/peer/run.sh (it synthesizes the models)`);
    await compareVocab(t, file);
  });
}

for (const name of ['llama-spm', 'phi-3', 'gpt-2', 'deepseek-coder']) {
  const file = join(VOCAB_DIR, `ggml-vocab-${name}.gguf`);
  test(`tokenizer agrees with llama.cpp: vocab ${name}`, { skip: !existsSync(file) && `${file} missing` }, async (t) => {
    await compareVocab(t, file, inpStrings(file));
  });
}
