// `wgllm serve --route`: a `model` naming a route is served by the target the
// routing policy picks (src/runtime/route.c) -- the local engine or an
// --upstream (here a second wgllm serve) -- from the local engine's warm
// prefix of the prompt, its measured prefill rate, and the upstream's
// measured latency. A long cold conversation goes to the (fast) upstream; a
// local-only field (logprobs) forces it local, which warms the cache; the
// same conversation again then stays local; the decision and its inputs come
// back as `wgllm.route` (the last chunk of a stream too) and in /metrics. An
// upstream chosen that cannot be reached falls back to the local engine
// (nothing had reached the client); the policy then sees it unhealthy.
// Bad --route values and costs stop the server with a message naming them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { MODEL, MODEL_ID, TEMPLATE, BIN, startServer, startServerWith, stopServers } from '../../tools/peer/serve.mjs';

let up, router;
const ROUTER_ARGS = () => ['-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--parallel', '2', '--ctx-size', '512',
  '--threads', '1', '--chat-template', TEMPLATE, '--upstream', `fast=${up.url}/v1`, '--route', 'auto=local,fast'];
before(async () => {
  up = await startServer(['--ctx-size', '512']);
  router = await startServerWith(ROUTER_ARGS());
});
after(stopServers);

async function post(body, path = '/v1/chat/completions') {
  const r = await fetch(router.url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* the caller looks at text */ }
  return { status: r.status, json, text };
}

// about 360 prompt tokens: long enough that computing it cold takes longer than the upstream's first piece
const LONG = [{ role: 'system', content: 'the river ran past the mill, '.repeat(45) },
  { role: 'user', content: 'Where did the river go?' }];
const cand = (route, target) => route.candidates.find((c) => c.target === target);

test('routes: cold long prompt upstream, local-only field local, the same conversation again local (warm)', async () => {
  // the upstream's latency is measured on the calls sent to it: a short one first
  for (let i = 0; i < 2; i++) {
    const r = await post({ model: 'fast', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1, temperature: 0 });
    assert.equal(r.status, 200, r.text);
  }
  const cold = await post({ model: 'auto', messages: LONG, max_tokens: 4, temperature: 0 });
  assert.equal(cold.status, 200, cold.text);
  const rc = cold.json.wgllm.route;
  assert.equal(rc.name, 'auto');
  assert.equal(rc.target, 'fast', JSON.stringify(rc));
  const lc = cand(rc, 'local'), fc = cand(rc, 'fast');
  assert.equal(lc.cached_tokens, 0);
  assert.equal(lc.prefill_tok_s, 0); // no local request yet: the policy assumes default_prefill_tok_s (200)
  assert.ok(lc.prompt_tokens > 300, JSON.stringify(lc));
  assert.ok(fc.latency_ms > 0 && fc.healthy && fc.eligible, JSON.stringify(fc));
  assert.ok(fc.estimated_ttft_ms < lc.estimated_ttft_ms);
  assert.equal(cold.json.model, 'fast'); // answered by the upstream
  assert.ok(cold.json.choices[0].message.content.length > 0);

  // logprobs is local-only: the upstream is refused, whatever its score
  const forced = await post({ model: 'auto', messages: LONG, max_tokens: 4, temperature: 0, logprobs: true });
  assert.equal(forced.status, 200, forced.text);
  const rf = forced.json.wgllm.route;
  assert.equal(rf.target, 'local', JSON.stringify(rf));
  assert.equal(cand(rf, 'fast').eligible, false);
  assert.match(cand(rf, 'fast').refused, /logprobs/);
  assert.ok(forced.json.choices[0].logprobs.content.length > 0);

  // the same conversation again: its prefix is warm locally now, and stays local
  const warm = await post({ model: 'auto', messages: LONG, max_tokens: 4, temperature: 0 });
  assert.equal(warm.status, 200, warm.text);
  const rw = warm.json.wgllm.route;
  assert.equal(rw.target, 'local', JSON.stringify(rw));
  const lw = cand(rw, 'local');
  assert.equal(lw.cached_tokens, lw.prompt_tokens - 1);
  assert.ok(lw.prefill_tok_s > 0); // measured by the requests before
  assert.ok(lw.estimated_ttft_ms < cand(rw, 'fast').estimated_ttft_ms);
  assert.equal(warm.json.usage.prompt_tokens_details?.cached_tokens ?? lw.cached_tokens, lw.cached_tokens);
  assert.equal(warm.json.model, MODEL_ID);

  // streaming: the decision rides on the last chunk
  const r = await fetch(router.url + '/v1/chat/completions', { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'auto', messages: LONG, max_tokens: 4, temperature: 0, stream: true }) });
  const events = (await r.text()).split('\n\n').filter((e) => e.startsWith('data: ') && !e.includes('[DONE]'))
    .map((e) => JSON.parse(e.slice(6)));
  const withRoute = events.filter((e) => e.wgllm);
  assert.equal(withRoute.length, 1);
  assert.equal(events.indexOf(withRoute[0]), events.length - 1);
  assert.equal(withRoute[0].wgllm.route.target, 'local');

  // Anthropic's Messages (served as the chat it means) carry the decision too
  const msg = await post({ model: 'auto', system: LONG[0].content, messages: [LONG[1]], max_tokens: 4 }, '/v1/messages');
  assert.equal(msg.status, 200, msg.text);
  assert.equal(msg.json.type, 'message');
  assert.equal(msg.json.wgllm.route.target, 'local');

  // completions too
  const comp = await post({ model: 'auto', prompt: 'Once upon a time', max_tokens: 2, temperature: 0 }, '/v1/completions');
  assert.equal(comp.status, 200, comp.text);
  assert.ok(['local', 'fast'].includes(comp.json.wgllm.route.target));

  const metrics = await (await fetch(router.url + '/metrics')).text();
  const value = (name, target) => {
    const m = new RegExp(`^wgllm_${name}\\{route="auto",target="${target}"\\} (\\S+)$`, 'm').exec(metrics);
    assert.ok(m, `${name} ${target} in\n${metrics}`);
    return Number(m[1]);
  };
  assert.equal(value('route_decisions_total', 'fast') + value('route_decisions_total', 'local'), 6);
  assert.ok(value('route_decisions_total', 'local') >= 3);
  assert.ok(value('route_decisions_total', 'fast') >= 1);
  assert.equal(value('route_refused_total', 'fast'), 1);
  assert.ok(value('route_estimated_ttft_ms', 'fast') > 0);
  assert.match(metrics, /^wgllm_prefill_tokens_per_second [1-9]/m);
});

test('routes: /v1/models lists the route, unknown models name it, a request no target takes is a 400', async () => {
  const models = await (await fetch(router.url + '/v1/models')).json();
  const r = models.data.find((m) => m.id === 'auto');
  assert.equal(r.owned_by, 'route');
  assert.deepEqual(r.meta.targets, ['local', 'fast']);
  assert.ok(!models.data.find((m) => m.id === 'local')); // the served model's name for routes, not a model
  const unknown = await post({ model: 'nope', messages: LONG });
  assert.equal(unknown.status, 404);
  assert.match(unknown.json.error.message, /'fast', 'auto'/);
  // too long for the local context and local-only for the upstream: nobody can take it
  const huge = await post({ model: 'auto', messages: [{ role: 'user', content: 'word '.repeat(700) }],
    max_tokens: 2, logprobs: true });
  assert.equal(huge.status, 400, huge.text);
  assert.equal(huge.json.error.code, 'route_no_target');
  assert.match(huge.json.error.message, /route 'auto'.*local: .*context.*fast: .*logprobs/);
  // a field wrong for every target is the request's own error
  const bad = await post({ model: 'auto', messages: LONG, temperature: 'hot' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'temperature');
});

test('routes: an upstream that fails falls back to the local engine, then cools and loses to it', async () => {
  // two routers: each fallback needs a local engine that has measured nothing yet (a measured rate makes
  // the local engine faster than an upstream's default 500 ms, and the policy would not pick the upstream)
  const args = ['-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--ctx-size', '512', '--threads', '1',
    '--chat-template', TEMPLATE, '--upstream', 'dead=http://127.0.0.1:9/v1', '--route', 'down=dead,local'];
  const [r2, r3] = await Promise.all([startServerWith(args), startServerWith(args)]);
  const ask = async (model, extra = {}, server = r2) => {
    const r = await fetch(server.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: LONG, max_tokens: 2, temperature: 0, ...extra }) });
    return { status: r.status, text: await r.text() };
  };
  // never tried: healthy, at the default 500 ms, against 1.8 s of cold prefill at the default rate: the
  // policy picks it, it cannot be reached, and the local engine answers instead (nothing had been sent)
  const first = await ask('down');
  assert.equal(first.status, 200, first.text);
  const r1 = JSON.parse(first.text).wgllm.route;
  assert.equal(r1.target, 'local', JSON.stringify(r1));
  assert.equal(r1.fallback.from, 'dead');
  assert.match(r1.fallback.error, /127\.0\.0\.1:9|connect|reach/i);
  assert.equal(JSON.parse(first.text).model, MODEL_ID);
  // its failure cooled it down (and the fallback warmed the local engine): local, with no fallback
  const second = await ask('down');
  assert.equal(second.status, 200, second.text);
  const rt = JSON.parse(second.text).wgllm.route;
  assert.equal(rt.target, 'local', JSON.stringify(rt));
  assert.equal(rt.fallback, undefined);
  assert.equal(cand(rt, 'dead').healthy, false); // the replica table's state, as the policy got it
  assert.equal(cand(rt, 'local').cached_tokens, cand(rt, 'local').prompt_tokens - 1); // warmed by the fallback
  // a stream falls back the same way, the decision on its last chunk
  const streamed = await ask('down', { stream: true }, r3);
  assert.equal(streamed.status, 200);
  const events = streamed.text.split('\n\n').filter((e) => e.startsWith('data: ') && !e.includes('[DONE]'))
    .map((e) => JSON.parse(e.slice(6)));
  assert.ok(!events.some((e) => e.error), streamed.text);
  assert.ok(events.some((e) => e.choices?.[0]?.delta?.content), streamed.text);
  assert.equal(events.at(-1).wgllm.route.fallback.from, 'dead');
  assert.equal(events.filter((e) => e.wgllm).length, 1);
  const metrics = await (await fetch(r2.url + '/metrics')).text();
  assert.match(metrics, /^wgllm_route_decisions_total\{route="down",target="dead"\} 1$/m);
  assert.match(metrics, /^wgllm_route_decisions_total\{route="down",target="local"\} 1$/m);
  assert.match(metrics, /^wgllm_route_fallbacks_total\{route="down",target="dead"\} 1$/m);
  assert.match(await (await fetch(r3.url + '/metrics')).text(), /^wgllm_route_fallbacks_total\{route="down",target="dead"\} 1$/m);
});

test('routes: bad --route values and costs stop the server naming them', () => {
  const run = (extra, env = {}) => spawnSync(BIN, ['serve', '-m', MODEL, '--port', '0', '--threads', '1',
    '--upstream', 'fast=http://127.0.0.1:9/v1', ...extra], { env: { ...process.env, ...env }, encoding: 'utf8',
    timeout: 20000 });
  let r = run(['--route', 'x=local,nope']);
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--route x=local,nope: client: route 'x': no endpoint named 'nope'/);
  r = run(['--route', 'x=']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--route x=: expected NAME=TARGET/);
  r = run(['--route', 'x=local,,fast']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /an empty target/);
  r = run(['--route', 'fast=local']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /the name is taken by an endpoint/);
  r = run(['--route', 'x=local'], { WGLLM_UPSTREAM_FAST_COST: 'cheap' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /WGLLM_UPSTREAM_FAST_COST=cheap: expected a number/);
  r = run(['--route', 'x=local'], { WGLLM_ROUTE_X_COST_WEIGHT: '-1' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /WGLLM_ROUTE_X_COST_WEIGHT=-1/);
});
