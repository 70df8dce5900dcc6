/* test_route.c - the routing policy (wgllm.h, "Routes") on fixed inputs:
 * a warm local prefix beats a fast upstream, a cold long prompt goes to the
 * faster upstream, the cost weight flips a decision, an unhealthy upstream
 * loses to any healthy target, refused targets (local-only fields) never
 * win, the queue wait and the defaults for unmeasured rates, ties, and the
 * decision's JSON. (Gathering the inputs: tests/test_client.c, the engine's
 * cached-token query: tests/test_engine.c, the server: tests/peer/route.test.mjs.) */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "wgllm.h"

static struct wgllm_route_candidate local(int prompt, int cached, double prefill_tok_s) {
    return (struct wgllm_route_candidate){.name = "local", .kind = WGLLM_ROUTE_LOCAL, .prompt_tokens = prompt,
                                          .cached_tokens = cached, .prefill_tok_s = prefill_tok_s, .n_slots = 4};
}

static struct wgllm_route_candidate remote(const char *name, int prompt, double latency_ms) {
    return (struct wgllm_route_candidate){.name = name, .kind = WGLLM_ROUTE_REMOTE, .prompt_tokens = prompt,
                                          .latency_ms = latency_ms, .healthy = true};
}

static int decide2(const struct wgllm_route_params *p, struct wgllm_route_candidate a, struct wgllm_route_candidate b,
                   struct wgllm_route_decision *d) {
    memset(d, 0, sizeof *d);
    d->route = "r";
    d->c[0] = a, d->c[1] = b, d->n = 2;
    return wgllm_route_decide(p, d, 0);
}

TEST(warm_local_beats_fast_upstream) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    /* 2000 prompt tokens, 1990 of them cached: 10 to compute at 100 tok/s = 100 ms, against 300 ms */
    CHECK_EQ_INT(decide2(&p, local(2000, 1990, 100), remote("up", 2000, 300), &d), 0);
    CHECK_NEAR(d.c[0].ttft_ms, 100, 1e-9);
    CHECK_NEAR(d.c[1].ttft_ms, 300, 1e-9);
    CHECK_NEAR(d.c[0].score, 100, 1e-9); /* free: the score is the estimate */
}

TEST(cold_long_prompt_goes_to_faster_upstream) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    CHECK_EQ_INT(decide2(&p, local(2000, 0, 100), remote("up", 2000, 300), &d), 1);
    CHECK_NEAR(d.c[0].ttft_ms, 20000, 1e-6);
    /* a short cold prompt is still local */
    CHECK_EQ_INT(decide2(&p, local(20, 0, 100), remote("up", 20, 300), &d), 0);
}

TEST(cost_weight_flips_the_decision) {
    struct wgllm_route_decision d;
    struct wgllm_route_params p = wgllm_route_default_params();
    struct wgllm_route_candidate up = remote("paid", 2000, 300);
    up.cost = 10; /* per 1M tokens: (2000 + 256 expected) tokens cost 0.02256 */
    CHECK_EQ_INT(decide2(&p, local(2000, 0, 1000), up, &d), 1); /* 2000 ms against 300 + 22.56 */
    CHECK_NEAR(d.c[1].cost_units, 0.02256, 1e-12);
    CHECK_NEAR(d.c[1].score, 300 + 1000 * 0.02256, 1e-9);
    p.cost_weight = 1e6; /* a unit of cost is now worth 1000 s: 22560 ms of penalty */
    CHECK_EQ_INT(decide2(&p, local(2000, 0, 1000), up, &d), 0);
    /* a local engine's cached tokens cost nothing: warm, the priced local engine beats the upstream */
    struct wgllm_route_candidate priced = local(2000, 0, 1000);
    priced.cost = 100; /* (2000 + 256) tokens: 0.2256, 225.6 ms at cost_weight 1000 */
    p.cost_weight = 1000;
    CHECK_EQ_INT(decide2(&p, priced, remote("free", 2000, 300), &d), 1);
    CHECK_NEAR(d.c[0].cost_units, 0.2256, 1e-12);
    priced.cached_tokens = 1990; /* 10 ms of prefill and (10 + 256) priced tokens: 26.6 ms */
    CHECK_EQ_INT(decide2(&p, priced, remote("free", 2000, 300), &d), 0);
    CHECK_NEAR(d.c[0].cost_units, 100 * 266 / 1e6, 1e-12);
    p.cost_weight = 1e6;
    /* max_tokens is what is priced when given */
    memset(&d, 0, sizeof d);
    d.c[0] = up, d.n = 1;
    wgllm_route_decide(&p, &d, 1000);
    CHECK_NEAR(d.c[0].cost_units, 10 * 3000 / 1e6, 1e-12);
    CHECK_EQ_INT(d.completion_tokens, 1000);
}

TEST(unhealthy_upstream_loses_to_any_healthy_target) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    struct wgllm_route_candidate cool = remote("cooling", 2000, 10);
    cool.healthy = false;
    /* 10 ms against 20 s, but cooling: the slow healthy local engine wins */
    CHECK_EQ_INT(decide2(&p, local(2000, 0, 100), cool, &d), 0);
    /* two upstreams: the unhealthy fast one loses to the healthy slow one, in either order */
    CHECK_EQ_INT(decide2(&p, cool, remote("slow", 2000, 5000), &d), 1);
    CHECK_EQ_INT(decide2(&p, remote("slow", 2000, 5000), cool, &d), 0);
    /* when all are unhealthy the score decides among them */
    struct wgllm_route_candidate cool2 = remote("cooling2", 2000, 50);
    cool2.healthy = false;
    CHECK_EQ_INT(decide2(&p, cool2, cool, &d), 1);
}

TEST(refused_targets_never_win) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    struct wgllm_route_candidate up = remote("up", 2000, 1);
    up.refused = "'grammar' is local-only";
    /* a local-only field: local, however slow */
    CHECK_EQ_INT(decide2(&p, local(2000, 0, 1), up, &d), 0);
    struct wgllm_route_candidate l = local(2000, 0, 1);
    l.refused = "the prompt has 5000 tokens; the context holds 4096 per slot";
    CHECK_EQ_INT(decide2(&p, l, up, &d), -1);
    CHECK_EQ_INT(d.chosen, -1);
    up.refused = NULL;
    CHECK_EQ_INT(decide2(&p, l, up, &d), 1);
}

TEST(queue_wait_defaults_and_ties) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    /* all 4 slots busy, 3 queued, requests of 1000 ms: (3 + 1) * 1000 / 4 = 1000 ms before the prefill */
    struct wgllm_route_candidate l = local(110, 10, 100);
    l.busy_slots = 4, l.queue_depth = 3, l.request_ms = 1000;
    CHECK_EQ_INT(decide2(&p, l, remote("up", 110, 2500), &d), 0);
    CHECK_NEAR(d.c[0].ttft_ms, 1000 + 1000, 1e-9);
    l.queue_depth = 7; /* 2000 ms of wait: now the upstream is faster */
    CHECK_EQ_INT(decide2(&p, l, remote("up", 110, 2500), &d), 1);
    l.queue_depth = 0, l.busy_slots = 3; /* a free slot: no wait */
    CHECK_EQ_INT(decide2(&p, l, remote("up", 110, 2500), &d), 0);
    CHECK_NEAR(d.c[0].ttft_ms, 1000, 1e-9);
    /* unmeasured: the defaults (200 tok/s; 500 ms) */
    CHECK_EQ_INT(decide2(&p, local(200, 0, 0), remote("up", 200, 0), &d), 1);
    CHECK_NEAR(d.c[0].ttft_ms, 1000, 1e-9);
    CHECK_NEAR(d.c[1].ttft_ms, 500, 1e-9);
    /* calls in flight slow an upstream down: 400 * (1 + 0.25 * 4) = 800 */
    struct wgllm_route_candidate busy = remote("busy", 10, 400);
    busy.in_flight = 4;
    CHECK_EQ_INT(decide2(&p, busy, remote("idle", 10, 700), &d), 1);
    CHECK_NEAR(d.c[0].ttft_ms, 800, 1e-9);
    /* a tie keeps the earlier target, and the same inputs give the same answer */
    CHECK_EQ_INT(decide2(&p, remote("a", 10, 300), remote("b", 10, 300), &d), 0);
    CHECK_EQ_INT(decide2(&p, remote("a", 10, 300), remote("b", 10, 300), &d), 0);
}

TEST(decision_json_reports_inputs_and_scores) {
    struct wgllm_route_decision d;
    const struct wgllm_route_params p = wgllm_route_default_params();
    struct wgllm_route_candidate up = remote("up\"x", 2000, 300);
    up.refused = "'logprobs' is local-only";
    decide2(&p, local(2000, 1990, 100), up, &d);
    char *j = wgllm_route_json(&d);
    CHECK(j != NULL);
    if (!j) return;
    CHECK(strstr(j, "\"name\":\"r\",\"target\":\"local\"") != NULL);
    CHECK(strstr(j, "\"cached_tokens\":1990") != NULL);
    CHECK(strstr(j, "\"estimated_ttft_ms\":100") != NULL);
    CHECK(strstr(j, "\"target\":\"up\\\"x\",\"kind\":\"remote\",\"eligible\":false,\"refused\":\"'logprobs' is local-only\"") != NULL);
    CHECK(strstr(j, "\"latency_ms\":300") != NULL);
    free(j);
    memset(&d, 0, sizeof d);
    d.route = "none";
    wgllm_route_decide(&p, &d, 0);
    j = wgllm_route_json(&d);
    CHECK(j && strstr(j, "\"target\":null") && strstr(j, "\"candidates\":[]"));
    free(j);
}

TEST(local_only_parameters) {
    struct wgllm_request_params p = wgllm_request_default_params();
    CHECK(wgllm_route_local_only(&p) == NULL);
    p.sampling.top_k = 3;
    CHECK_STR(wgllm_route_local_only(&p), "top_k");
    p.context_key = "conv";
    CHECK_STR(wgllm_route_local_only(&p), "context_key");
    p = wgllm_request_default_params();
    p.sampling.temperature = 0.1f; /* OpenAI has these */
    p.sampling.top_p = 0.5f;
    CHECK(wgllm_route_local_only(&p) == NULL);
    p.add_special = false;
    CHECK_STR(wgllm_route_local_only(&p), "add_special");
}

int main(void) {
    RUN(warm_local_beats_fast_upstream);
    RUN(cold_long_prompt_goes_to_faster_upstream);
    RUN(cost_weight_flips_the_decision);
    RUN(unhealthy_upstream_loses_to_any_healthy_target);
    RUN(refused_targets_never_win);
    RUN(queue_wait_defaults_and_ties);
    RUN(decision_json_reports_inputs_and_scores);
    RUN(local_only_parameters);
    return test_summary("test_route");
}
