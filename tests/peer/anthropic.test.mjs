// Anthropic's Messages API (/v1/messages) of `wgllm serve` through the official
// `@anthropic-ai/sdk` client unchanged: text turns, streaming (the SDK's
// stream helper assembles the same message), tool_use / tool_result turns
// with tool_choice any / tool, thinking blocks on a reasoning template, stop
// sequences, x-api-key, and errors in Anthropic's shape. Each answer is
// compared with the chat completion the same conversation gets from
// /v1/chat/completions (greedy): both are the one chat path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ROOT, SHARED, MODEL_ID, OpenAI, startServer, stopServers } from '../../tools/peer/serve.mjs';

const requirePeer = createRequire(join(ROOT, 'tools', 'peer', 'package.json'));
const { default: Anthropic } = await import(requirePeer.resolve('@anthropic-ai/sdk'));

let base, anthropic, openai;
before(async () => {
  // tool definitions in Qwen's system prompt need more than the default 256 positions
  ({ url: base } = await startServer(['--ctx-size', '2048', '--api-key', 'sesame']));
  anthropic = new Anthropic({ baseURL: base, apiKey: 'sesame', maxRetries: 0, timeout: 120000 });
  openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sesame', maxRetries: 0, timeout: 120000 });
});
after(stopServers);

const SYSTEM = 'You are terse.';
const USER = 'Tell me a story about a dragon.';

test('messages: text, usage and stop_reason equal the chat completion; streamed the same', async () => {
  const m = await anthropic.messages.create({ model: MODEL_ID, max_tokens: 12, temperature: 0, system: SYSTEM,
    messages: [{ role: 'user', content: USER }] });
  const c = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 12, temperature: 0,
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }] });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, MODEL_ID);
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  assert.equal(m.content[0].text, c.choices[0].message.content);
  assert.equal(m.stop_reason, c.choices[0].finish_reason === 'length' ? 'max_tokens' : 'end_turn');
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
  assert.equal(m.usage.output_tokens, c.usage.completion_tokens);
  // content as text blocks, system as blocks: the same conversation
  const blocks = await anthropic.messages.create({ model: MODEL_ID, max_tokens: 12, temperature: 0,
    system: [{ type: 'text', text: SYSTEM }], messages: [{ role: 'user', content: [{ type: 'text', text: USER }] }] });
  assert.equal(blocks.content[0].text, m.content[0].text);
  // the SDK's stream helper: events in order, the same message at the end
  const stream = anthropic.messages.stream({ model: MODEL_ID, max_tokens: 12, temperature: 0, system: SYSTEM,
    messages: [{ role: 'user', content: USER }] });
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const f = await stream.finalMessage();
  assert.equal(f.content[0].text, m.content[0].text);
  assert.equal(f.stop_reason, m.stop_reason);
  assert.equal(f.usage.output_tokens, m.usage.output_tokens);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.ok(types.includes('content_block_start') && types.includes('content_block_delta') && types.includes('content_block_stop'));
  // stop_sequences end the text before them
  const full = m.content[0].text;
  const k = full.indexOf(' ', 3);
  if (k > 0) {
    const s = await anthropic.messages.create({ model: MODEL_ID, max_tokens: 12, temperature: 0, system: SYSTEM,
      messages: [{ role: 'user', content: USER }], stop_sequences: [full.slice(k, k + 2)] });
    assert.equal(s.content[0]?.text ?? '', full.slice(0, k));
  }
});

const TOOLS = [{ name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'], additionalProperties: false } },
{ name: 'add', input_schema: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 },
  b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'], additionalProperties: false } }];

test('messages: tool_use blocks satisfy input_schema (any, tool), streamed the same; tool_result turns go back', async () => {
  const valid = (b) => (b.name === 'add'
    ? Number.isInteger(b.input.a) && b.input.a >= 0 && b.input.a <= 99 && Number.isInteger(b.input.b)
    : typeof b.input.city === 'string' && b.input.city.length <= 12 && Number.isInteger(b.input.days) && b.input.days >= 1 && b.input.days <= 7);
  let first;
  for (const [seed, tool_choice] of [[1, { type: 'any' }], [3, { type: 'tool', name: 'add' }]]) {
    // no seed field in the Messages API: greedy, so that the stream and the whole answer agree
    const req = { model: MODEL_ID, max_tokens: 300, temperature: 0, tools: TOOLS, tool_choice,
      messages: [{ role: 'user', content: `What is the weather in Paris? (${seed})` }] };
    const m = await anthropic.messages.create(req);
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1);
    for (const b of uses) {
      assert.ok(typeof b.id === 'string' && b.id.length > 0);
      assert.ok(valid(b), JSON.stringify(b));
    }
    if (tool_choice.type === 'tool') assert.ok(uses.every((b) => b.name === 'add'));
    const f = await anthropic.messages.stream(req).finalMessage();
    assert.equal(f.stop_reason, 'tool_use');
    assert.deepEqual(f.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
      uses.map((b) => [b.name, b.input]));
    first ??= { req, m };
  }
  // the answer to the call goes back: the chat path sees the same conversation as the chat API's
  const use = first.m.content.find((b) => b.type === 'tool_use');
  const messages = [...first.req.messages, { role: 'assistant', content: first.m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"ok": true}' }, { type: 'text', text: 'Thanks.' }] }];
  const next = await anthropic.messages.create({ model: MODEL_ID, max_tokens: 6, temperature: 0, tools: TOOLS,
    tool_choice: { type: 'none' }, messages });
  const chat = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 6, temperature: 0,
    tools: TOOLS.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } })),
    tool_choice: 'none', messages: [{ role: 'user', content: first.req.messages[0].content },
      { role: 'assistant', content: null, tool_calls: first.m.content.filter((b) => b.type === 'tool_use')
        .map((b) => ({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } })) },
      { role: 'tool', tool_call_id: use.id, content: '{"ok": true}' }, { role: 'user', content: 'Thanks.' }] });
  assert.equal(next.usage.input_tokens + next.usage.cache_read_input_tokens, chat.usage.prompt_tokens);
  assert.equal(next.content[0]?.text ?? '', chat.choices[0].message.content ?? '');
});

test('messages: a reasoning template answers with a thinking block first', async () => {
  const { url } = await startServer(['--chat-template', `${SHARED}/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja`]);
  const client = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const req = { model: MODEL_ID, max_tokens: 10, temperature: 0, messages: [{ role: 'user', content: USER }] };
  const m = await client.messages.create(req);
  assert.equal(m.content[0].type, 'thinking', JSON.stringify(m.content));
  assert.ok(m.content[0].thinking.length > 0);
  const f = await client.messages.stream(req).finalMessage();
  assert.equal(f.content[0].type, 'thinking');
  assert.equal(f.content[0].thinking, m.content[0].thinking);
});

test('messages: refusals are Anthropic errors naming the field; the key is checked', async () => {
  const bad = async (body, status = 400) => {
    const r = await fetch(`${base}/v1/messages`, { method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sesame', 'anthropic-version': '2023-06-01' },
      body: typeof body === 'string' ? body : JSON.stringify(body) });
    const j = await r.json();
    assert.equal(r.status, status, JSON.stringify(j));
    assert.equal(j.type, 'error');
    assert.equal(typeof j.error.message, 'string');
    return j.error;
  };
  const msgs = [{ role: 'user', content: 'hi' }];
  assert.match((await bad({ model: MODEL_ID, messages: msgs })).message, /max_tokens/);
  assert.match((await bad({ model: MODEL_ID, max_tokens: 4, messages: msgs, betas: ['x'] })).message, /betas/);
  assert.match((await bad({ model: MODEL_ID, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image',
    source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] })).message, /image/);
  assert.match((await bad({ model: MODEL_ID, max_tokens: 4, messages: msgs, tools: [{ type: 'web_search_20250305',
    name: 'web_search' }] })).message, /server tool/);
  assert.match((await bad({ model: MODEL_ID, max_tokens: 4, messages: [{ role: 'system', content: 'x' }] })).message,
    /messages\[0\]/);
  assert.equal((await bad({ model: 'claude-nope', max_tokens: 4, messages: msgs }, 404)).type, 'not_found_error');
  assert.equal((await bad('{"model":', 400)).type, 'invalid_request_error');
  await assert.rejects(anthropic.messages.create({ model: MODEL_ID, max_tokens: 4, messages: msgs, temperature: 5 }),
    (e) => e.status === 400 && e instanceof Anthropic.BadRequestError);
  const wrong = new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model: MODEL_ID, max_tokens: 4, messages: msgs }),
    (e) => e.status === 401 && e instanceof Anthropic.AuthenticationError);
});

test('messages through a gateway: the chat it means goes to the upstream, the Message comes back', async () => {
  process.env.WGLLM_UPSTREAM_UP_KEY = 'sesame';
  const gwy = await startServer(['--upstream', `up=${base}/v1`]).finally(() => delete process.env.WGLLM_UPSTREAM_UP_KEY);
  const via = new Anthropic({ baseURL: gwy.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const req = { max_tokens: 12, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: USER }] };
  const direct = await anthropic.messages.create({ ...req, model: MODEL_ID });
  const m = await via.messages.create({ ...req, model: 'up' });
  assert.equal(m.model, 'up');
  assert.deepEqual(m.content, direct.content);
  assert.equal(m.stop_reason, direct.stop_reason);
  const f = await via.messages.stream({ ...req, model: 'up' }).finalMessage();
  assert.deepEqual(f.content, direct.content);
});
