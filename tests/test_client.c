/* test_client.c - the endpoint client without a server: descriptor
 * validation, resolution, operation checks, local-only fields refused for
 * remote endpoints, a transport failure against a closed loopback port, and
 * the SSE framing of streamed answers (any split, limits, linear time), and
 * the replica table (parsing, the pick order, cooldowns).
 * (Forwarding to a live server is covered by tests/peer/gateway.test.mjs,
 * hostile upstreams by tests/peer/hardening.test.mjs.) */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/client.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test.h"

static struct wgllm_endpoint_desc gw(const char *name) {
    struct wgllm_endpoint_desc d = {.name = name, .kind = WGLLM_ENDPOINT_GATEWAY,
                                    .base_url = "http://127.0.0.1:9/v1", .timeout_s = 5};
    return d;
}

TEST(add_validates_descriptors) {
    struct wgllm_client *c;
    struct wgllm_error err;
    CHECK(wgllm_client_init(&c, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc d = gw("a");
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "already exists") != NULL);
    d = gw("");
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d = gw("b");
    d.base_url = "ftp://x";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "base_url") != NULL);
    d = gw("p");
    d.kind = WGLLM_ENDPOINT_PROVIDER;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT); /* no api_key_env */
    d.api_key_env = "WGLLM_TEST_SURELY_UNSET_KEY";
    unsetenv(d.api_key_env);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "WGLLM_TEST_SURELY_UNSET_KEY") != NULL);
    setenv("WGLLM_TEST_SURELY_UNSET_KEY", "k", 1);
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    unsetenv("WGLLM_TEST_SURELY_UNSET_KEY");
    d = gw("o");
    d.options_json = "[1]";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d.options_json = "{\"top_k\": 5, \"model\": \"x\"}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "'model'") != NULL);
    d.options_json = "{\"stream\": false}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    d.options_json = "{\"top_k\": 5}";
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc l = {.name = "local", .kind = WGLLM_ENDPOINT_LOCAL};
    CHECK(wgllm_client_add(c, &l, &err) == WGLLM_STATUS_INVALID_ARGUMENT); /* no engine */
    CHECK(wgllm_client_count(c) == 3);
    CHECK(!strcmp(wgllm_client_at(c, 2)->name, "o"));
    CHECK(wgllm_client_find(c, "o")->ops == WGLLM_OP_ALL);
    CHECK(wgllm_client_find(c, "zzz") == NULL);
    wgllm_client_free(c);
}

TEST(calls_resolve_check_and_refuse_local_only_fields) {
    struct wgllm_client *c;
    struct wgllm_error err;
    CHECK(wgllm_client_init(&c, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc d = gw("chat-only");
    d.ops = WGLLM_OP_CHAT;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    struct wgllm_request_params rp = wgllm_request_default_params();
    struct wgllm_result res;
    CHECK(wgllm_client_query(c, "nobody", "hi", &rp, &res, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "nobody") != NULL && res.finish == WGLLM_FINISH_ERROR);
    wgllm_result_free(&res);
    CHECK(wgllm_client_query(c, "chat-only", "hi", &rp, &res, &err) == WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "query") != NULL);
    wgllm_result_free(&res);
    float v[4];
    int n = -1;
    CHECK(wgllm_client_embed(c, "chat-only", "x", 1, WGLLM_POOLING_MODEL, true, v, 4, &n, &err) ==
          WGLLM_STATUS_UNSUPPORTED);
    CHECK(n == 0);
    const struct wgllm_message m[1] = {{"user", "hi"}};
    const char *fields[] = {"context_key", "top_k", "min_p", "ignore_eos", "n_probs"};
    for (int i = 0; i < 5; i++) {
        rp = wgllm_request_default_params();
        if (i == 0) rp.context_key = "conv";
        if (i == 1) rp.sampling.top_k = 3;
        if (i == 2) rp.sampling.min_p = 0.5f;
        if (i == 3) rp.ignore_eos = true;
        if (i == 4) rp.sampling.n_probs = 2;
        CHECK(wgllm_client_chat(c, "chat-only", m, 1, &rp, &res, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(err.message, fields[i]) != NULL);
        wgllm_result_free(&res);
    }
    /* nothing listens on port 9: a transport error naming the URL, not a hang */
    rp = wgllm_request_default_params();
    CHECK(wgllm_client_chat(c, "chat-only", m, 1, &rp, &res, &err) == WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "127.0.0.1:9") != NULL);
    CHECK(res.finish == WGLLM_FINISH_ERROR && res.text && res.text[0] == 0);
    wgllm_result_free(&res);
    wgllm_client_free(c);
}

/* ---- SSE framing ---- */

struct events {
    char all[512]; /* the events' data joined by '|' */
    int n;
    int stop_after; /* 0 = never */
};

static bool collect(const char *data, size_t len, void *user) {
    struct events *ev = user;
    CHECK(strlen(data) == len);
    size_t k = strlen(ev->all);
    snprintf(ev->all + k, sizeof(ev->all) - k, "%s%s", ev->n ? "|" : "", data);
    ev->n++;
    return !(ev->stop_after && ev->n >= ev->stop_after);
}

TEST(sse_events_whatever_the_split) {
    static const char text[] = "data: one\n\n: a comment\n\ndata: two\ndata:  three\r\n\r\nevent: x\ndata:{}\n\r\n"
                               "data: tail-without-end\n";
    const size_t n = sizeof(text) - 1;
    for (size_t piece = 1; piece <= n; piece++) {
        struct wgllm_sse p;
        struct events ev = {0};
        wgllm_sse_init(&p, collect, &ev);
        bool ok = true;
        for (size_t off = 0; off < n && ok; off += piece) ok = wgllm_sse_feed(&p, text + off, off + piece < n ? piece : n - off);
        CHECK(ok);
        CHECK_STR(ev.all, "one|two\n three|{}");
        CHECK_EQ_INT(ev.n, 3);
        wgllm_sse_free(&p);
    }
    /* on_event returning false stops the stream */
    struct wgllm_sse p;
    struct events ev = {.stop_after = 1};
    wgllm_sse_init(&p, collect, &ev);
    CHECK(!wgllm_sse_feed(&p, text, n));
    CHECK(p.aborted && ev.n == 1);
    wgllm_sse_free(&p);
}

TEST(sse_limits_and_linear_time) {
    struct wgllm_sse p;
    struct events ev = {0};
    /* one event that never ends, fed a byte at a time: refused at the event
     * limit, and in linear time (a rescan from the event's start on every
     * piece would take minutes here) */
    wgllm_sse_init(&p, collect, &ev);
    p.event_limit = (size_t)1 << 20;
    const clock_t t0 = clock();
    bool ok = wgllm_sse_feed(&p, "data: ", 6);
    size_t fed = 6;
    for (; ok && fed < ((size_t)2 << 20); fed++) ok = wgllm_sse_feed(&p, "x", 1);
    const double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(!ok && p.too_big && !p.aborted);
    CHECK(fed > p.event_limit && fed <= p.event_limit + 3);
    CHECK(p.buf.len <= p.event_limit + 2);
    CHECK(secs < 10.0);
    CHECK_EQ_INT(ev.n, 0);
    CHECK(!wgllm_sse_feed(&p, "\n\n", 2)); /* stays stopped */
    wgllm_sse_free(&p);
    /* small events without end: the stream's total is bounded too */
    memset(&ev, 0, sizeof(ev));
    wgllm_sse_init(&p, collect, &ev);
    p.total_limit = 4096;
    ok = true;
    int pieces = 0;
    for (; ok && pieces < 10000; pieces++) ok = wgllm_sse_feed(&p, ": keep-alive\n\n", 14);
    CHECK(!ok && p.too_big && p.total > p.total_limit);
    CHECK(pieces < 300);
    wgllm_sse_free(&p);
}

TEST(replicas_parse_pick_and_cool) {
    struct wgllm_replica_set *s = NULL;
    struct wgllm_error err = {0};
    CHECK(wgllm_replicas_init(&s, "x", "http://a/v1,ftp://b/v1", 0, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "ftp://b/v1") && strstr(err.message, "'x'"));
    CHECK(wgllm_replicas_init(&s, "x", "http://a/v1,", 0, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    char many[64 * 16 + 32] = "";
    for (int i = 0; i <= WGLLM_CLIENT_MAX_REPLICAS; i++) strcat(many, i ? ",http://h/v1" : "http://h/v1");
    CHECK(wgllm_replicas_init(&s, "x", many, 0, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "more than 64 replicas") != NULL);

    CHECK(wgllm_replicas_init(&s, "x", "http://a/v1/,http://b/v1,https://c/v1", 1, &err) == WGLLM_STATUS_OK);
    if (!s) return;
    CHECK_EQ_INT(wgllm_replicas_count(s), 3);
    CHECK_STR(wgllm_replicas_url(s, 0), "http://a/v1");
    /* equals in turn; then the fewest in flight */
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 0);
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 1);
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 2);
    wgllm_replicas_done(s, 1, true, false, 5.0);
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 1);       /* the only one with none in flight */
    CHECK_EQ_INT(wgllm_replicas_pick(s, 1u << 1), 2); /* 1 tried already: of the equals, the next in turn */
    wgllm_replicas_done(s, 0, true, false, 5.0);
    wgllm_replicas_done(s, 1, true, false, 5.0);
    wgllm_replicas_done(s, 2, true, false, 5.0);
    wgllm_replicas_done(s, 2, true, false, 5.0);
    /* a failure cools a replica: skipped while another is free, tried when all are cooling */
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 0);
    wgllm_replicas_done(s, 0, false, true, 0);
    struct wgllm_replica_stats st;
    wgllm_replicas_stats(s, 0, &st);
    CHECK(st.cooling && !st.healthy && st.failures == 1 && st.retries == 1 && st.in_flight == 0 && st.requests == 2);
    for (int i = 0; i < 4; i++) {
        const int k = wgllm_replicas_pick(s, 0);
        CHECK(k == 1 || k == 2);
        wgllm_replicas_done(s, k, true, false, 1.0);
    }
    CHECK_EQ_INT(wgllm_replicas_pick(s, 1u << 1 | 1u << 2), 0); /* the others tried: the cooling one */
    wgllm_replicas_done(s, 0, false, false, 0);
    const int k1 = wgllm_replicas_pick(s, 1u << 0);
    wgllm_replicas_done(s, k1, false, false, 0);
    const int k2 = wgllm_replicas_pick(s, 1u << 0 | 1u << k1);
    CHECK(k1 != k2 && k2 != 0);
    wgllm_replicas_done(s, k2, false, false, 0); /* all three cooling now */
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0), 0);   /* its cooldown ends first */
    wgllm_replicas_done(s, 0, true, false, 1.0);
    wgllm_replicas_stats(s, 0, &st);
    CHECK(!st.cooling && st.healthy && st.latency_ms > 0);
    CHECK_EQ_INT(wgllm_replicas_pick(s, 0x7), -1); /* all tried */
    /* the cooldown (1 s) ends */
    struct timespec ts = {1, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    wgllm_replicas_stats(s, k1, &st);
    CHECK(!st.cooling && !st.healthy); /* cooled off, but not known to be up */
    wgllm_replicas_free(s);
}

/* Routes: their validation, and the inputs the client gathers for the
 * policy (a local engine's prompt tokens and warmth, a remote endpoint's
 * replica health, local-only parameters refusing remote targets). */
TEST(routes_validate_and_gather) {
    struct wgllm_client *c;
    struct wgllm_error err;
    CHECK(wgllm_client_init(&c, &err) == WGLLM_STATUS_OK);
    struct wgllm_endpoint_desc d = gw("up");
    d.cost = -1;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "'up': cost -1") != NULL);
    d.cost = 2.5;
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_OK);
    struct wgllm_client_route_desc rd = {.name = "r", .targets = (const char *[]){"up", "nope"}, .n_targets = 2,
                                         .params = wgllm_route_default_params()};
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "route 'r': no endpoint named 'nope'") != NULL);
    rd.n_targets = 0;
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "needs 1 to 16 targets (got 0)") != NULL);
    rd.targets = (const char *[]){"up", "up"}, rd.n_targets = 2;
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "names 'up' twice") != NULL);
    rd.n_targets = 1, rd.params.cost_weight = -1;
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    rd.params.cost_weight = 1000, rd.name = "up";
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "taken by an endpoint") != NULL);
    rd.name = "r";
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_OK);
    CHECK(wgllm_client_is_route(c, "r") && !wgllm_client_is_route(c, "up"));
    d = gw("r");
    CHECK(wgllm_client_add(c, &d, &err) == WGLLM_STATUS_INVALID_ARGUMENT); /* the route has the name */

    /* a local engine beside the upstream */
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny";
    sp.type = WGLLM_TYPE_Q8_0;
    const char *path = test_synth_path(&sp);
    struct wgllm_model *model = NULL;
    struct wgllm_engine *eng = NULL;
    CHECK(path && wgllm_model_load(path, NULL, &model, &err) == WGLLM_STATUS_OK);
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 1;
    ep.n_ctx = 512;
    CHECK(model && wgllm_engine_init(model, &ep, &eng, &err) == WGLLM_STATUS_OK);
    if (!eng) {
        wgllm_model_free(model);
        wgllm_client_free(c);
        return;
    }
    struct wgllm_endpoint_desc ld = {.name = "here", .kind = WGLLM_ENDPOINT_LOCAL, .engine = eng};
    CHECK(wgllm_client_add(c, &ld, &err) == WGLLM_STATUS_OK);
    rd = (struct wgllm_client_route_desc){.name = "mix", .targets = (const char *[]){"here", "up"}, .n_targets = 2,
                                          .params = wgllm_route_default_params()};
    CHECK(wgllm_client_add_route(c, &rd, &err) == WGLLM_STATUS_OK);
    struct wgllm_request_params p = test_greedy(4);
    p.ignore_eos = false; /* local-only: it would refuse the upstream */
    struct wgllm_route_decision dec;
    const char *shortp = "Once upon a time";
    struct wgllm_route_request rq = {.op = WGLLM_OP_QUERY, .prompt = shortp, .prompt_len = strlen(shortp),
                                     .add_special = true, .max_tokens = 4, .params = &p};
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_OK);
    CHECK_STR(dec.c[dec.chosen].name, "here"); /* a few tokens at the default 200 tok/s beat 500 ms */
    CHECK(dec.c[0].prompt_tokens > 0 && dec.c[1].prompt_tokens == dec.c[0].prompt_tokens);
    CHECK(dec.c[1].healthy && dec.c[1].cost == 2.5);
    /* a long cold prompt: the upstream's default 500 ms is faster */
    char longp[2048] = "";
    for (int i = 0; i < 60; i++) strcat(longp, "the river ran past the mill, ");
    rq.prompt = longp, rq.prompt_len = strlen(longp);
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_OK);
    CHECK_STR(dec.c[dec.chosen].name, "up");
    CHECK_EQ_INT(dec.c[0].cached_tokens, 0);
    /* a call on the route goes there: the upstream cannot be reached (nothing was delivered yet), so
     * the local endpoint answers, which warms it */
    struct wgllm_result res;
    CHECK(wgllm_client_route_query(c, "mix", longp, &p, &dec, &res, &err) == WGLLM_STATUS_OK);
    CHECK(res.finish != WGLLM_FINISH_ERROR && res.n_tokens >= 1);
    wgllm_result_free(&res);
    CHECK_STR(dec.c[dec.chosen].name, "here");
    CHECK_EQ_INT(dec.fallback_from, 1);
    CHECK(dec.fallback_error[0] != 0);
    char *j = wgllm_route_json(&dec);
    CHECK(j && strstr(j, "\"target\":\"here\"") && strstr(j, "\"fallback\":{\"from\":\"up\",\"error\":"));
    free(j);
    /* the same prompt again is local: warm now, and the upstream is cooling */
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_OK);
    CHECK_STR(dec.c[dec.chosen].name, "here");
    CHECK_EQ_INT(dec.c[0].cached_tokens, dec.c[0].prompt_tokens - 1);
    CHECK(!dec.c[1].healthy);
    CHECK_EQ_INT(dec.fallback_from, -1);
    /* ... but not for another partition */
    rq.cache_partition = "someone-else";
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_OK);
    CHECK_EQ_INT(dec.c[0].cached_tokens, 0);
    rq.cache_partition = NULL;
    /* a local-only parameter refuses the upstream; so does the caller's own reason */
    p.sampling.top_k = 7;
    rq.prompt = shortp, rq.prompt_len = strlen(shortp);
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_OK);
    CHECK(dec.c[1].refused && strstr(dec.c[1].refused, "'top_k' is local-only"));
    rq.local_refused = "no grammar here";
    CHECK(wgllm_client_route(c, "mix", &rq, &dec, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "route 'mix': no target can take this request (here: no grammar here; up: client: 'top_k'") != NULL);
    CHECK(wgllm_client_route(c, "nope", &rq, &dec, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "no route named 'nope'") != NULL);
    /* a call on the route runs where the decision says */
    p.sampling.top_k = wgllm_sampler_default_params().top_k;
    CHECK(wgllm_client_route_query(c, "mix", shortp, &p, &dec, &res, &err) == WGLLM_STATUS_OK);
    CHECK_STR(dec.c[dec.chosen].name, "here");
    CHECK(res.n_tokens >= 1 && res.n_tokens <= 4);
    wgllm_result_free(&res);
    wgllm_client_free(c);
    wgllm_engine_free(eng);
    wgllm_model_free(model);
}

int main(void) {
    wgllm_base_init();
    wgllm_quant_init();
    RUN(add_validates_descriptors);
    RUN(sse_events_whatever_the_split);
    RUN(sse_limits_and_linear_time);
    RUN(calls_resolve_check_and_refuse_local_only_fields);
    RUN(replicas_parse_pick_and_cool);
    RUN(routes_validate_and_gather);
    return test_summary("test_client");
}
