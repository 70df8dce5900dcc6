// `wgllm serve --api-key-file`: several keys, each a tenant with the models it
// may use, requests and tokens per minute (429 with Retry-After), and its own
// KV cache partition (cached_tokens never cross tenants); bad key files stop
// the server with the entry and field named.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODEL_ID, startServer, stopServers } from '../../tools/peer/serve.mjs';

after(stopServers);
const dir = mkdtempSync(join(tmpdir(), 'wgllm-tenants-'));
const keyFile = (o) => {
  const f = join(dir, `keys-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(f, JSON.stringify(o));
  return f;
};
const MSGS = [{ role: 'user', content: 'The lighthouse keeper climbed the spiral stairs every evening at dusk.' }];

async function chat(url, key, extra = {}) {
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: MODEL_ID, messages: MSGS, max_tokens: 4, temperature: 0, ...extra }) });
  return { status: r.status, retry: r.headers.get('retry-after'), json: await r.json() };
}

test('tenants: keys, allowed models, rate limits, and KV caches that never cross tenants', async () => {
  process.env.WGLLM_TEST_BOB_KEY = 'bob-secret-key';
  const file = keyFile({ keys: [
    { name: 'alice', key: 'alice-secret-key', models: [MODEL_ID], requests_per_minute: 3 },
    { name: 'bob', key_env: 'WGLLM_TEST_BOB_KEY', tokens_per_minute: 60 },
    { name: 'carol', key: 'carol-secret-key', models: ['some-other-model'] },
    { name: 'dave', key: 'dave-secret-key' }] });
  const { url } = await startServer(['--api-key-file', file]).finally(() => delete process.env.WGLLM_TEST_BOB_KEY);
  assert.equal((await chat(url, 'nobody-at-all')).status, 401);
  // alice: three requests a minute, then 429 with Retry-After
  for (let i = 0; i < 3; i++) assert.equal((await chat(url, 'alice-secret-key')).status, 200);
  const limited = await chat(url, 'alice-secret-key');
  assert.equal(limited.status, 429, JSON.stringify(limited.json));
  assert.equal(limited.json.error.code, 'rate_limit_exceeded');
  assert.ok(Number(limited.retry) >= 1 && Number(limited.retry) <= 20, limited.retry);
  // bob: 60 tokens a minute; each request costs its prompt and its answer
  let statuses = [];
  for (let i = 0; i < 5 && !statuses.includes(429); i++) statuses.push((await chat(url, 'bob-secret-key')).status);
  assert.deepEqual(statuses.slice(0, 1), [200]);
  assert.ok(statuses.includes(429), statuses.join());
  // carol may not use this model: 403 naming it, on every route that runs it
  const c = await chat(url, 'carol-secret-key');
  assert.equal(c.status, 403);
  assert.equal(c.json.error.code, 'model_not_allowed');
  assert.equal(c.json.error.param, 'model');
  const t = await fetch(`${url}/tokenize`, { method: 'POST', headers: { authorization: 'Bearer carol-secret-key' },
    body: JSON.stringify({ content: 'x' }) });
  assert.equal(t.status, 403);
  // the same conversation (same context_key) from dave after alice: nothing of alice's cache is reused
  const d1 = await chat(url, 'dave-secret-key', { context_key: 'k' });
  assert.equal(d1.status, 200);
  assert.equal(d1.json.usage.prompt_tokens_details.cached_tokens, 0);
  const d2 = await chat(url, 'dave-secret-key', { context_key: 'k' });
  assert.ok(d2.json.usage.prompt_tokens_details.cached_tokens > 0, 'a tenant reuses its own cache');
  const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer dave-secret-key' } })).text();
  assert.match(metrics, /^wgllm_tenant_rate_limited_total\{tenant="alice"\} 1$/m);
  assert.match(metrics, /^wgllm_tenant_requests_total\{tenant="alice"\} 3$/m);
});

test('tenants: bad key files stop the server, naming the entry and the field', async () => {
  const cases = [
    [{ keys: [{ name: 'a', key: 'short' }] }, /keys\[0\]: the key must have 8 characters/],
    [{ keys: [{ name: 'a', key: 'aaaaaaaaaa' }, { name: 'a', key: 'bbbbbbbbbb' }] }, /keys\[1\]: the name 'a' is used twice/],
    [{ keys: [{ name: 'a', key: 'aaaaaaaaaa' }, { name: 'b', key: 'aaaaaaaaaa' }] }, /keys\[1\]: has the same key as 'a'/],
    [{ keys: [{ name: 'a', key: 'aaaaaaaaaa', rpm: 3 }] }, /keys\[0\]: unknown field 'rpm'/],
    [{ keys: [{ name: 'a', key_env: 'WGLLM_SURELY_UNSET_VAR' }] }, /WGLLM_SURELY_UNSET_VAR/],
    [{ keys: [{ name: 'a', key: 'aaaaaaaaaa', requests_per_minute: -1 }] }, /requests_per_minute/],
    [{ keys: [] }, /expected a JSON object/],
  ];
  for (const [o, re] of cases) {
    await assert.rejects(startServer(['--api-key-file', keyFile(o)]), (e) => re.test(e.message), String(re));
  }
  await assert.rejects(startServer(['--api-key-file', keyFile({ keys: [{ name: 'a', key: 'aaaaaaaaaa' }] }), '--api-key', 'x1234567']),
    /exclude each other/);
});
