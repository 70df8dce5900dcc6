// OpenAI's Responses API (/v1/responses) of `wgllm serve` through the official
// `openai` client unchanged: output_text and usage equal to the chat completion
// of the same conversation (greedy), the SDK's stream helper assembling the same
// Response from the events, function calls that satisfy their parameters
// (tool_choice required / a named function) and their outputs sent back,
// text.format json_schema, a reasoning template's reasoning item, and refusals.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SHARED, MODEL_ID, OpenAI, startServer, stopServers } from '../../tools/peer/serve.mjs';

let client;
before(async () => {
  const { url } = await startServer(['--ctx-size', '2048']);
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(stopServers);

const INSTR = 'You are terse.';
const USER = 'Tell me a story about a dragon.';

test('responses: output_text and usage equal the chat completion; the stream helper assembles the same Response', async () => {
  const r = await client.responses.create({ model: MODEL_ID, instructions: INSTR, input: USER, max_output_tokens: 12,
    temperature: 0 });
  const c = await client.chat.completions.create({ model: MODEL_ID, max_tokens: 12, temperature: 0,
    messages: [{ role: 'system', content: INSTR }, { role: 'user', content: USER }] });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.status, c.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, c.usage.completion_tokens);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].content[0].type, 'output_text');
  // input as message items with parts: the same conversation
  const items = await client.responses.create({ model: MODEL_ID, max_output_tokens: 12, temperature: 0, input: [
    { role: 'developer', content: INSTR }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: USER }] }] });
  assert.equal(items.output_text, r.output_text);
  const stream = client.responses.stream({ model: MODEL_ID, instructions: INSTR, input: USER, max_output_tokens: 12,
    temperature: 0 });
  const types = [];
  let seq = -1;
  stream.on('event', (e) => {
    types.push(e.type);
    assert.equal(e.sequence_number, seq + 1);
    seq = e.sequence_number;
  });
  const f = await stream.finalResponse();
  assert.equal(f.output_text, r.output_text);
  assert.equal(f.status, r.status);
  assert.equal(f.usage.output_tokens, r.usage.output_tokens);
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.equal(types.at(-1), r.status === 'completed' ? 'response.completed' : 'response.incomplete');
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done'])
    assert.ok(types.includes(t), t);
});

const TOOLS = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'], additionalProperties: false } },
{ type: 'function', name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 },
  b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'], additionalProperties: false } }];

test('responses: function_call items satisfy their parameters, streamed the same; outputs go back', async () => {
  let first;
  for (const tool_choice of ['required', { type: 'function', name: 'add' }]) {
    const req = { model: MODEL_ID, input: 'What is the weather in Paris?', tools: TOOLS, tool_choice,
      max_output_tokens: 300, temperature: 0 };
    const r = await client.responses.create(req);
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1, JSON.stringify(r.output));
    for (const c of calls) {
      const a = JSON.parse(c.arguments);
      if (c.name === 'add') assert.ok(Number.isInteger(a.a) && a.a >= 0 && a.a <= 99 && Number.isInteger(a.b));
      else assert.ok(typeof a.city === 'string' && a.city.length <= 12 && a.days >= 1 && a.days <= 7, c.arguments);
      assert.ok(c.call_id && c.id.startsWith('fc_'));
    }
    if (typeof tool_choice === 'object') assert.ok(calls.every((c) => c.name === 'add'));
    const f = await client.responses.stream(req).finalResponse();
    assert.deepEqual(f.output.filter((o) => o.type === 'function_call').map((c) => [c.name, c.arguments]),
      calls.map((c) => [c.name, c.arguments]));
    first ??= { req, calls };
  }
  const input = [{ role: 'user', content: first.req.input }, ...first.calls.map(({ call_id, name, arguments: a }) =>
    ({ type: 'function_call', call_id, name, arguments: a })),
  ...first.calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: '{"ok": true}' }))];
  const next = await client.responses.create({ model: MODEL_ID, input, tools: TOOLS, tool_choice: 'none',
    max_output_tokens: 6, temperature: 0 });
  const chat = await client.chat.completions.create({ model: MODEL_ID, max_tokens: 6, temperature: 0, tool_choice: 'none',
    tools: TOOLS.map(({ name, description, parameters }) => ({ type: 'function', function: { name, description, parameters } })),
    messages: [{ role: 'user', content: first.req.input }, { role: 'assistant', content: null, tool_calls: first.calls.map((c) =>
      ({ id: c.call_id, type: 'function', function: { name: c.name, arguments: c.arguments } })) },
    ...first.calls.map((c) => ({ role: 'tool', tool_call_id: c.call_id, content: '{"ok": true}' }))] });
  assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(next.output_text, chat.choices[0].message.content ?? '');
});

test('responses: text.format json_schema; a reasoning template gives a reasoning item; refusals name the field', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 0,
    maximum: 120 } }, required: ['name', 'age'], additionalProperties: false };
  const j = await client.responses.create({ model: MODEL_ID, input: USER, max_output_tokens: 120, temperature: 0,
    text: { format: { type: 'json_schema', name: 'person', schema, strict: true } } });
  if (j.status === 'completed') assert.deepEqual(Object.keys(JSON.parse(j.output_text)), ['name', 'age']);
  else assert.ok(j.output_text.startsWith('{'));
  const { url } = await startServer(['--chat-template', `${SHARED}/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja`]);
  const think = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const req = { model: MODEL_ID, input: USER, max_output_tokens: 10, temperature: 0 };
  const t = await think.responses.create(req);
  assert.equal(t.output[0].type, 'reasoning');
  assert.ok(t.output[0].content[0].text.length > 0);
  const ts = await think.responses.stream(req).finalResponse();
  assert.equal(ts.output[0].type, 'reasoning');
  assert.equal(ts.output[0].content[0].text, t.output[0].content[0].text);
  for (const [extra, param] of [[{ previous_response_id: 'resp_1' }, 'previous_response_id'],
    [{ tools: [{ type: 'web_search' }] }, 'tools[0]'], [{ bogus: 1 }, 'bogus'], [{ input: [] }, 'input'],
    [{ input: [{ type: 'input_image', image_url: 'x' }] }, 'input[0]'], [{ text: { format: { type: 'yaml' } } }, 'text.format']]) {
    await assert.rejects(client.responses.create({ model: MODEL_ID, input: USER, max_output_tokens: 4, ...extra }),
      (e) => e.status === 400 && e.error?.param === param, param);
  }
});
