// Tool calls and structured output of `wgllm serve` through the official
// `openai` npm client unchanged: zodFunction tools with tool_choice required /
// a named function (parse() checks the arguments with zod), the same call
// streamed and assembled by the SDK's stream helper, a tool's answer sent
// back through the template, zodResponseFormat, and a corpus of JSON Schemas
// whose answers ajv validates. The model has random weights (tiny shape,
// Qwen 2.5's template: Hermes <tool_call> syntax), so only the grammar can
// make its answers valid.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ROOT, MODEL_ID, OpenAI, startServer, stopServers } from '../../tools/peer/serve.mjs';

const requirePeer = createRequire(join(ROOT, 'tools', 'peer', 'package.json'));
const { z } = await import(requirePeer.resolve('zod'));
const { zodFunction, zodResponseFormat } = await import(requirePeer.resolve('openai/helpers/zod'));
// JSON Schema 2020-12 (prefixItems, $defs), the draft the converter follows
const { default: Ajv } = await import(requirePeer.resolve('ajv/dist/2020'));

let base, client;
before(async () => {
  // the tools' descriptions in Qwen's system prompt need more than the default 256 positions
  ({ url: base } = await startServer(['--ctx-size', '2048']));
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(stopServers);

const USER = [{ role: 'user', content: 'What is the weather in Paris for the next days?' }];
const Weather = z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7), unit: z.enum(['c', 'f']) });
const Add = z.object({ a: z.number().int().min(0).max(99), b: z.number().int().min(0).max(99) });
const TOOLS = [zodFunction({ name: 'get_weather', parameters: Weather, description: 'The weather in a city' }),
  zodFunction({ name: 'add', parameters: Add })];

test('tools: required and named calls through the SDK satisfy the zod schemas, streamed or not', async () => {
  for (const [seed, tool_choice] of [[1, 'required'], [2, 'required'], [3, { type: 'function', function: { name: 'add' } }]]) {
    const req = { model: MODEL_ID, messages: USER, tools: TOOLS, tool_choice, max_tokens: 300, temperature: 1, seed };
    // parse() validates every call's arguments with its zod schema (it throws on a mismatch)
    const r = await client.chat.completions.parse(req);
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
    assert.ok(m.tool_calls.length >= 1);
    for (const c of m.tool_calls) {
      assert.equal(c.type, 'function');
      assert.match(c.id, /^call_/);
      assert.ok(['get_weather', 'add'].includes(c.function.name));
      const schema = c.function.name === 'add' ? Add : Weather;
      assert.deepEqual(c.function.parsed_arguments, schema.parse(JSON.parse(c.function.arguments)));
    }
    if (typeof tool_choice === 'object') assert.ok(m.tool_calls.every((c) => c.function.name === 'add'));
    // the SDK's stream helper assembles delta.tool_calls into the same message
    const stream = client.chat.completions.stream(req);
    const full = await stream.finalChatCompletion();
    const sm = full.choices[0].message;
    assert.equal(full.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(sm.tool_calls.map((c) => [c.function.name, c.function.arguments]),
      m.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  }
});

test('tools: a call and its answer go back through the template; auto and none answer as usual', async () => {
  const first = await client.chat.completions.create({ model: MODEL_ID, messages: USER, tools: TOOLS,
    tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 5 });
  const call = first.choices[0].message.tool_calls[0];
  const messages = [...USER, first.choices[0].message,
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ ok: true, value: 21 }) }];
  for (const tool_choice of ['auto', 'none']) {
    const r = await client.chat.completions.create({ model: MODEL_ID, messages, tools: TOOLS, tool_choice,
      max_tokens: 16, temperature: 0 });
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    if (tool_choice === 'none') assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.ok(r.usage.prompt_tokens > 100, 'the template rendered the tools, the call and its answer');
  }
});

test('tools: bad definitions and choices are 400s naming the field', async () => {
  const bad = async (extra, param) => {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: USER, ...extra }) });
    const j = await r.json();
    assert.equal(r.status, 400, JSON.stringify(j));
    assert.equal(j.error.param, param, j.error.message);
  };
  await bad({ tools: [{ type: 'function', function: { name: 'no spaces' } }] }, 'tools[0].function.name');
  await bad({ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'missing' } } }, 'tool_choice');
  await bad({ tool_choice: 'required' }, 'tool_choice');
  await bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }],
    tool_choice: 'required' }, 'tools[0].function.parameters');
});

// Schemas with the keywords the converter supports; each answer that finishes must validate.
const CORPUS = [
  { type: 'object', properties: { id: { type: 'string', format: 'uuid' }, when: { type: 'string', format: 'date' } },
    required: ['id', 'when'], additionalProperties: false },
  { type: 'array', items: { type: 'integer', minimum: -5, maximum: 5 }, minItems: 1, maxItems: 4 },
  { type: 'object', properties: { kind: { const: 'point' }, xy: { type: 'array', prefixItems: [{ type: 'number' }, { type: 'number' }],
    items: false } }, required: ['kind', 'xy'], additionalProperties: false },
  { anyOf: [{ type: 'boolean' }, { type: 'null' }, { enum: ['red', 'green'] }] },
  { $defs: { leaf: { type: 'object', properties: { v: { type: 'integer', exclusiveMinimum: 0, maximum: 9 } }, required: ['v'],
    additionalProperties: false } }, type: 'object', properties: { a: { $ref: '#/$defs/leaf' }, b: { $ref: '#/$defs/leaf' } },
  required: ['a'], additionalProperties: false },
  { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' }, mail: { type: 'string', format: 'email' } },
    required: ['code'], additionalProperties: false },
  { allOf: [{ type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 3 } }, required: ['a'] },
    { type: 'object', properties: { b: { type: 'boolean' } }, required: ['b'] }] },
  { type: 'object', properties: { name: { type: 'string', minLength: 2, maxLength: 8 }, n: { type: 'number', minimum: 0 } },
    required: ['name', 'n'], additionalProperties: false },
];

test('structured output: a corpus of schemas, every finished answer valid by ajv; zodResponseFormat', async () => {
  const ajv = new Ajv({ strict: false });
  ajv.addFormat('uuid', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i);
  ajv.addFormat('date', /^\d{4}-\d{2}-\d{2}$/);
  ajv.addFormat('email', /^[^@\s]+@[^@\s]+\.[^@\s]+$/);
  let finished = 0;
  for (const [i, schema] of CORPUS.entries()) {
    const validate = ajv.compile(schema);
    for (const seed of [1, 2]) {
      const r = await client.chat.completions.create({ model: MODEL_ID, messages: USER, max_tokens: 200, temperature: 1,
        top_k: 8, seed, response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema } } });
      const text = r.choices[0].message.content;
      if (r.choices[0].finish_reason !== 'stop') continue; // a random model's string may run to max_tokens
      finished++;
      const v = JSON.parse(text);
      assert.ok(validate(v), `schema ${i}: ${text}: ${ajv.errorsText(validate.errors)}`);
    }
  }
  console.log(`${finished} of ${2 * CORPUS.length} answers finished`);
  assert.ok(finished >= CORPUS.length, `only ${finished} of ${2 * CORPUS.length} answers finished`);
  const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120) });
  const p = await client.chat.completions.parse({ model: MODEL_ID, messages: USER, max_tokens: 200, temperature: 1, seed: 4,
    response_format: zodResponseFormat(Person, 'person') });
  assert.equal(p.choices[0].finish_reason, 'stop');
  assert.deepEqual(p.choices[0].message.parsed, Person.parse(JSON.parse(p.choices[0].message.content)));
});
