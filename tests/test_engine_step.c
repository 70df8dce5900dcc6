/*
 * test_engine_step.c - an engine without its thread (no_thread, as the
 * single-threaded wasm build runs it): the caller's wgllm_engine_step calls
 * give the same greedy tokens as the threaded engine, streaming happens on
 * the caller's thread, wgllm_request_wait and wgllm_embed drive the steps
 * themselves, several
 * requests share ticks, and a cancel ends a running or a queued request at
 * the next step.
 */
#include "test.h"

#include "model/synth.h"
#include "quant/quant.h"

#include <pthread.h>

static struct wgllm_model *model;

static struct wgllm_engine *new_engine(bool no_thread, int n_slots) {
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = n_slots;
    ep.n_ctx = 128;
    ep.n_batch = 64;
    ep.n_threads = 1;
    ep.no_thread = no_thread;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err;
    if (wgllm_engine_init(model, &ep, &e, &err) != WGLLM_STATUS_OK) fprintf(stderr, "engine: %s\n", err.message);
    return e;
}

struct stream {
    pthread_t thread;
    int calls;
    bool other_thread;
};

static bool on_token(const char *text, size_t len, int32_t token, float logprob, void *ud) {
    struct stream *s = ud;
    s->calls++;
    if (!pthread_equal(pthread_self(), s->thread)) s->other_thread = true;
    return true;
}

TEST(steps_give_the_threaded_engines_tokens) {
    enum { N = 16 };
    struct wgllm_engine *threaded = new_engine(false, 1), *stepped = new_engine(true, 1);
    CHECK(threaded && stepped);
    if (!threaded || !stepped) return;
    struct wgllm_request_params p = test_greedy(N);
    struct wgllm_result want;
    CHECK_EQ_INT(wgllm_query(threaded, "Once upon a time", &p, &want, NULL), WGLLM_STATUS_OK);

    struct stream s = {.thread = pthread_self()};
    p.on_token = on_token;
    p.user_data = &s;
    struct wgllm_request *r = NULL;
    CHECK_EQ_INT(wgllm_engine_submit_query(stepped, "Once upon a time", 16, &p, &r, NULL), WGLLM_STATUS_OK);
    CHECK(!wgllm_request_done(r)); /* nothing runs until a step */
    int steps = 0;
    while (wgllm_engine_step(stepped)) steps++;
    CHECK(wgllm_request_done(r));
    CHECK(steps >= N - 1 && steps <= N + 1); /* one prefill tick, then one token per tick */
    struct wgllm_result got;
    wgllm_request_wait(r, &got);
    CHECK_EQ_INT(got.finish, WGLLM_FINISH_LENGTH);
    CHECK_EQ_INT(got.n_tokens, N);
    CHECK(got.n_tokens == want.n_tokens && !memcmp(got.tokens, want.tokens, sizeof(int32_t) * N));
    CHECK(got.text && want.text && !strcmp(got.text, want.text));
    CHECK(s.calls > 0 && !s.other_thread);
    CHECK(!wgllm_engine_step(stepped)); /* idle */
    /* embeddings: the blocking call steps the engine itself */
    float va[256], vb[256];
    int na = 0, nb = 0;
    CHECK_EQ_INT(wgllm_embed(threaded, "hello world", 11, WGLLM_POOLING_MEAN, true, va, 256, &na, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_embed(stepped, "hello world", 11, WGLLM_POOLING_MEAN, true, vb, 256, &nb, NULL), WGLLM_STATUS_OK);
    CHECK(na == 256 && nb == 256 && !memcmp(va, vb, sizeof(va)));
    wgllm_result_free(&got);
    wgllm_result_free(&want);
    wgllm_engine_free(threaded);
    wgllm_engine_free(stepped);
}

TEST(wait_drives_the_steps_and_requests_share_ticks) {
    struct wgllm_engine *e = new_engine(true, 2);
    CHECK(e != NULL);
    if (!e) return;
    struct wgllm_request_params p = test_greedy(8);
    struct wgllm_result a;
    CHECK_EQ_INT(wgllm_query(e, "The lighthouse keeper", &p, &a, NULL), WGLLM_STATUS_OK); /* blocking form */
    CHECK_EQ_INT(a.n_tokens, 8);
    struct wgllm_request *r1 = NULL, *r2 = NULL, *r3 = NULL;
    CHECK_EQ_INT(wgllm_engine_submit_query(e, "The lighthouse keeper", 21, &p, &r1, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_engine_submit_query(e, "In winter the wind", 18, &p, &r2, NULL), WGLLM_STATUS_OK);
    struct wgllm_request_params long_p = test_greedy(100);
    CHECK_EQ_INT(wgllm_engine_submit_query(e, "Nobody ever read", 16, &long_p, &r3, NULL), WGLLM_STATUS_OK);
    int steps = 0;
    while (!wgllm_request_done(r1) || !wgllm_request_done(r2)) {
        wgllm_engine_step(e);
        steps++;
    }
    CHECK(steps <= 10); /* both slots advance in the same ticks */
    CHECK(!wgllm_request_done(r3)); /* queued behind them */
    struct wgllm_result b, c;
    wgllm_request_wait(r1, &b);
    wgllm_request_wait(r2, &c);
    CHECK(b.n_tokens == 8 && !memcmp(a.tokens, b.tokens, sizeof(int32_t) * 8));
    CHECK_EQ_INT(c.n_tokens, 8);
    /* a cancel ends r3 at the next step */
    wgllm_engine_step(e);
    wgllm_request_cancel(r3);
    wgllm_engine_step(e);
    CHECK(wgllm_request_done(r3));
    struct wgllm_result d;
    wgllm_request_wait(r3, &d);
    CHECK_EQ_INT(d.finish, WGLLM_FINISH_CANCELLED);
    CHECK(d.n_tokens < 100);
    wgllm_result_free(&a);
    wgllm_result_free(&b);
    wgllm_result_free(&c);
    wgllm_result_free(&d);
    wgllm_engine_free(e);
}

TEST(cancel_ends_running_and_queued_requests) {
    struct wgllm_engine *e = new_engine(true, 1);
    CHECK(e != NULL);
    if (!e) return;
    struct wgllm_request_params p = test_greedy(50);
    struct stream s = {.thread = pthread_self()};
    p.on_token = on_token;
    p.user_data = &s;
    struct wgllm_request *r1 = NULL, *r2 = NULL;
    CHECK_EQ_INT(wgllm_engine_submit_query(e, "A small brass lamp", 18, &p, &r1, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_engine_submit_query(e, "Every evening", 13, &p, &r2, NULL), WGLLM_STATUS_OK);
    wgllm_engine_step(e);
    /* waiting on a cancelled request steps the engine once more */
    wgllm_request_cancel(r1);
    wgllm_request_cancel(r2);
    struct wgllm_result a, b;
    wgllm_request_wait(r1, &a);
    wgllm_request_wait(r2, &b);
    CHECK_EQ_INT(a.finish, WGLLM_FINISH_CANCELLED);
    CHECK_EQ_INT(b.finish, WGLLM_FINISH_CANCELLED);
    CHECK_EQ_INT(b.n_tokens, 0);
    wgllm_result_free(&a);
    wgllm_result_free(&b);
    wgllm_engine_free(e);
}

int main(void) {
    wgllm_base_init();
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny";
    sp.type = WGLLM_TYPE_Q4_0;
    if (!(model = test_synth_model(&sp))) {
        test_failed++;
        return test_summary("test_engine_step");
    }
    RUN(steps_give_the_threaded_engines_tokens);
    RUN(wait_drives_the_steps_and_requests_share_ticks);
    RUN(cancel_ends_running_and_queued_requests);
    wgllm_model_free(model);
    return test_summary("test_engine_step");
}
