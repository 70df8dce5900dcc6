// wgllm's chat-template rendering against the Hugging Face reference
// (@huggingface/jinja, installed with node-llama-cpp under tools/peer): every
// template in ../shared/templates x a set of conversations, byte for byte.
// wgllm's side is build/release/tests/test_chat --render (see tests/test_chat.c).
// A conversation the reference rejects (raise_exception) must be rejected by
// wgllm too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync, mkdtempSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
// resolve the package the way tools/peer's own modules would
const requirePeer = createRequire(join(ROOT, 'tools', 'peer', 'package.json'));
const { Template } = await import(requirePeer.resolve('@huggingface/jinja').replace(/index\.cjs$/, 'index.js'));

const SHARED = process.env.WGLLM_SHARED || join(ROOT, '..', 'shared');
const TEMPLATES = join(SHARED, 'templates');
const BIN = process.env.WGLLM_TEST_CHAT || join(ROOT, 'build', 'release', 'tests', 'test_chat');

const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Get the weather.',
  parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' },
    days: { type: 'integer', description: 'Days ahead' } }, required: ['city'] } } }];

const CONVERSATIONS = {
  'system+user': [{ role: 'system', content: 'You are helpful.' }, { role: 'user', content: 'Hello!' }],
  'user only': [{ role: 'user', content: 'What is 2+2?' }],
  'multi-turn': [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello, how can I help?' },
    { role: 'user', content: 'Tell me a joke.' }, { role: 'assistant', content: '  Why did the chicken... ' },
    { role: 'user', content: 'Another one\n\nplease' }],
  'system+multi-turn': [{ role: 'system', content: '  Be terse.\n' }, { role: 'user', content: 'a' },
    { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }],
  'unicode': [{ role: 'user', content: 'héllo 世界 🦙 \u00a0 مرحبا' }, { role: 'assistant', content: 'ça va ✓' },
    { role: 'user', content: '\u3000全角\u3000' }],
  'jinja-like content': [{ role: 'user', content: '{{ x }} {% if y %}z{% endif %} {# c #} \\n "quotes" \'s' }],
  'assistant think': [{ role: 'user', content: 'q' }, { role: 'assistant', content: '<think>hmm</think>The answer.' },
    { role: 'user', content: 'ok' }],
  'starts with assistant': [{ role: 'assistant', content: 'I speak first' }, { role: 'user', content: 'ok' }],
  'tool call': { tools: TOOLS, messages: [{ role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'call12345', type: 'function',
      function: { name: 'get_weather', arguments: { city: 'Paris', days: 2 } } }] },
    { role: 'tool', tool_call_id: 'call12345', content: '{"temp": 21.5}' }] },
  'tools, plain chat': { tools: TOOLS, messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: 'hi' }] },
};

function reference(src, messages, tools, agp, bos = '<BOS>', eos = '<EOS>') {
  const vars = { messages, add_generation_prompt: agp, bos_token: bos, eos_token: eos };
  if (tools) vars.tools = tools;
  try {
    return { ok: true, text: new Template(src).render(vars) };
  } catch (e) {
    return { ok: false, text: String(e.message || e) };
  }
}

const tmp = mkdtempSync(join(tmpdir(), 'wgllm-chat-'));
function wgllm(file, messages, tools, agp) {
  const mf = join(tmp, 'messages.json');
  writeFileSync(mf, JSON.stringify(messages));
  const args = ['--render', file, mf, '--bos', '<BOS>', '--eos', '<EOS>'];
  if (tools) { const tf = join(tmp, 'tools.json'); writeFileSync(tf, JSON.stringify(tools)); args.push('--tools', tf); }
  if (agp) args.push('--add-generation-prompt');
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  return { ok: r.status === 0, text: r.status === 0 ? r.stdout : r.stderr };
}

// The same through the command a user runs: `wgllm template -m MODEL --template-file F`,
// whose bos/eos texts are the model's (the synthetic tiny model: LLaMA's <s> and </s>).
const WGLLM = process.env.WGLLM_BIN || join(ROOT, 'build', 'release', 'wgllm');
const CLI_MODEL = join(process.env.WGLLM_MODELS || join(ROOT, 'build', 'models'), 'tiny-q8_0.gguf');
function wgllmCli(file, messages, tools, agp) {
  const mf = join(tmp, 'cli-messages.json');
  writeFileSync(mf, JSON.stringify(messages));
  const args = ['template', '-m', CLI_MODEL, '--template-file', file, '--messages', mf];
  if (tools) { const tf = join(tmp, 'cli-tools.json'); writeFileSync(tf, JSON.stringify(tools)); args.push('--tools', tf); }
  if (agp) args.push('--add-generation-prompt');
  const r = spawnSync(WGLLM, args, { encoding: 'utf8' });
  return { ok: r.status === 0, text: r.status === 0 ? r.stdout : r.stderr };
}

const files = readdirSync(TEMPLATES).filter((f) => f.endsWith('.jinja')).sort();
test('templates found and wgllm built', () => {
  assert.ok(files.length >= 7, `only ${files.length} templates in ${TEMPLATES}`);
  assert.ok(existsSync(BIN), `${BIN} missing: run make`);
});

for (const file of files) {
  test(`chat template ${file}`, (t) => {
    const src = readFileSync(join(TEMPLATES, file), 'utf8');
    let compared = 0, rejected = 0;
    for (const [name, conv] of Object.entries(CONVERSATIONS)) {
      const messages = Array.isArray(conv) ? conv : conv.messages;
      const tools = Array.isArray(conv) ? undefined : conv.tools;
      for (const agp of [false, true]) {
        const ref = reference(src, messages, tools, agp);
        const got = wgllm(join(TEMPLATES, file), messages, tools, agp);
        const what = `${file} / ${name} / add_generation_prompt=${agp}`;
        if (!ref.ok) {
          assert.equal(got.ok, false, `${what}: the reference fails (${ref.text}) but wgllm rendered ${JSON.stringify(got.text)}`);
          rejected++;
          continue;
        }
        assert.equal(got.ok, true, `${what}: wgllm failed: ${got.text}`);
        assert.equal(got.text, ref.text, what);
        compared++;
      }
    }
    t.diagnostic(`${compared} renderings identical, ${rejected} rejected by both`);
    assert.ok(compared >= 4, `${file}: only ${compared} renderings compared`);
  });
}

for (const file of files) {
  test(`wgllm template --template-file ${file}`, (t) => {
    assert.ok(existsSync(CLI_MODEL), `${CLI_MODEL} missing: tests/peer/run.sh synthesizes it`);
    const src = readFileSync(join(TEMPLATES, file), 'utf8');
    let compared = 0;
    for (const [name, conv] of Object.entries(CONVERSATIONS)) {
      const messages = Array.isArray(conv) ? conv : conv.messages;
      const tools = Array.isArray(conv) ? undefined : conv.tools;
      for (const agp of [false, true]) {
        const ref = reference(src, messages, tools, agp, '<s>', '</s>');
        const got = wgllmCli(join(TEMPLATES, file), messages, tools, agp);
        const what = `wgllm template ${file} / ${name} / add_generation_prompt=${agp}`;
        if (!ref.ok) { assert.equal(got.ok, false, `${what}: the reference fails (${ref.text}) but wgllm rendered`); continue; }
        assert.equal(got.ok, true, `${what}: wgllm failed: ${got.text}`);
        assert.equal(got.text, ref.text, what);
        compared++;
      }
    }
    t.diagnostic(`${compared} renderings identical`);
    assert.ok(compared >= 4, `${file}: only ${compared} renderings compared`);
  });
}

// The built-in fallback templates (src/chat/templates.c), through the same comparison.
for (const name of ['chatml', 'llama2', 'llama3', 'gemma', 'phi3', 'mistral']) {
  test(`builtin template ${name}`, (t) => {
    const r = spawnSync(BIN, ['--builtin', name], { encoding: 'utf8' });
    assert.equal(r.status, 0, `test_chat --builtin ${name} failed`);
    const file = join(tmp, `builtin-${name}.jinja`);
    writeFileSync(file, r.stdout);
    let compared = 0, rejected = 0;
    for (const [cname, conv] of Object.entries(CONVERSATIONS)) {
      const messages = Array.isArray(conv) ? conv : conv.messages;
      const tools = Array.isArray(conv) ? undefined : conv.tools;
      for (const agp of [false, true]) {
        const ref = reference(r.stdout, messages, tools, agp);
        const got = wgllm(file, messages, tools, agp);
        const what = `builtin ${name} / ${cname} / add_generation_prompt=${agp}`;
        if (!ref.ok) {
          assert.equal(got.ok, false, `${what}: the reference fails (${ref.text}) but wgllm rendered ${JSON.stringify(got.text)}`);
          rejected++;
          continue;
        }
        assert.equal(got.ok, true, `${what}: wgllm failed: ${got.text}`);
        assert.equal(got.text, ref.text, what);
        compared++;
      }
    }
    t.diagnostic(`${compared} renderings identical, ${rejected} rejected by both`);
    assert.ok(compared >= 8, `builtin ${name}: only ${compared} renderings compared`);
  });
}
