/* test_sampler.c - the sampler chain (src/runtime/sampler.c) and the streaming
 * stop-string matcher (src/runtime/stop.c). Expected values are worked out by
 * hand or recomputed here in double precision. */
#include "test.h"

#include "wgllm.h"

#include <stdbool.h>
#include <stdint.h>

static uint64_t lcg_state;
static float lcg_float(void) { /* uniform in [-4, 4) */
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg_state >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

static void random_logits(float *l, int n, uint64_t seed) {
    lcg_state = seed;
    for (int i = 0; i < n; i++) l[i] = lcg_float();
}

/* every filter off, so a test sees exactly the one it sets */
static struct wgllm_sampler_params plain_params(float temperature) {
    struct wgllm_sampler_params p = wgllm_sampler_default_params();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

/* bitmask of the tokens drawn in `draws` samples (n <= 32) */
static uint32_t drawn_set(const struct wgllm_sampler_params *p, const float *logits, int n, int draws) {
    struct wgllm_sampler *s = wgllm_sampler_init(p, n);
    if (!s) return 0xffffffffu;
    uint32_t set = 0;
    for (int i = 0; i < draws; i++) {
        int32_t t = wgllm_sampler_sample(s, logits);
        if (t < 0 || t >= n) return 0xffffffffu;
        set |= 1u << t;
    }
    wgllm_sampler_free(s);
    return set;
}

TEST(defaults_are_documented_values) {
    struct wgllm_sampler_params p = wgllm_sampler_default_params();
    CHECK(p.temperature == 0.0f);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK(p.typical_p == 1.0f);
    CHECK(p.repeat_penalty == 1.0f);
    CHECK_EQ_INT(p.penalty_last_n, 64);
    CHECK(p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    CHECK(p.logit_bias == NULL && p.n_logit_bias == 0 && p.n_probs == 0);
    CHECK(wgllm_sampler_init(&p, 0) == NULL);
}

TEST(greedy_is_argmax) {
    enum { V = 1000 };
    static float l[V];
    for (uint64_t seed = 1; seed <= 5; seed++) {
        random_logits(l, V, seed);
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        CHECK_EQ_INT(wgllm_argmax(l, V), best);
        struct wgllm_sampler_params p = wgllm_sampler_default_params();
        struct wgllm_sampler *s = wgllm_sampler_init(&p, V);
        CHECK_EQ_INT(wgllm_sampler_sample(s, l), best);
        float lp = 0;
        CHECK_EQ_INT(wgllm_sampler_sample_ex(s, l, NULL, NULL, &lp), best);
        wgllm_sampler_free(s);
        /* NULL params are the defaults: greedy */
        s = wgllm_sampler_init(NULL, V);
        CHECK_EQ_INT(wgllm_sampler_sample(s, l), best);
        wgllm_sampler_free(s);
    }
}

TEST(bias_bans_and_boosts) {
    float l[6] = {1.0f, 5.0f, 4.0f, 0.5f, -1.0f, 3.9f};
    struct wgllm_logit_bias b[2] = {{1, -INFINITY}, {77, 100.0f}}; /* 77 is out of range: ignored */
    struct wgllm_sampler_params p = plain_params(0.0f);
    p.logit_bias = b;
    p.n_logit_bias = 2;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, 6);
    b[0].token = 4; /* the sampler copied the list at init */
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 2);
    wgllm_sampler_free(s);
    /* banned at any temperature, whatever the filters */
    b[0].token = 1;
    p = plain_params(3.0f);
    p.logit_bias = b;
    p.n_logit_bias = 1;
    uint32_t set = drawn_set(&p, l, 6, 3000);
    CHECK((set & (1u << 1)) == 0);
    CHECK(set == 0x3d); /* every other token appears at temperature 3 */
    /* a positive bias moves the argmax */
    struct wgllm_logit_bias up = {3, 4.6f};
    p = plain_params(0.0f);
    p.logit_bias = &up;
    p.n_logit_bias = 1;
    s = wgllm_sampler_init(&p, 6);
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 3); /* 0.5 + 4.6 = 5.1 > 5 */
    wgllm_sampler_free(s);
}

TEST(repetition_penalty_by_hand) {
    struct wgllm_sampler_params p = plain_params(0.0f);
    p.repeat_penalty = 1.1f;
    /* positive logit divided: 2.0 / 1.1 = 1.818 < 1.9 */
    float pos[4] = {2.0f, 1.9f, -0.5f, -0.6f};
    struct wgllm_sampler *s = wgllm_sampler_init(&p, 4);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 0);
    wgllm_sampler_accept(s, 0);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 1);
    /* a repeat counts once for the repetition penalty: still 1.818 > 1.9/1.1 */
    wgllm_sampler_accept(s, 0);
    wgllm_sampler_accept(s, 1);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 0);
    wgllm_sampler_reset(s);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 0);
    wgllm_sampler_free(s);
    /* negative logit multiplied: -1.0 * 1.1 = -1.1 < -1.05 */
    float neg[3] = {-1.0f, -1.05f, -3.0f};
    s = wgllm_sampler_init(&p, 3);
    CHECK_EQ_INT(wgllm_sampler_sample(s, neg), 0);
    wgllm_sampler_accept(s, 0);
    CHECK_EQ_INT(wgllm_sampler_sample(s, neg), 1);
    wgllm_sampler_free(s);
    /* window of 2: token 0 drops out after two newer tokens */
    p.penalty_last_n = 2;
    s = wgllm_sampler_init(&p, 4);
    wgllm_sampler_accept(s, 0);
    wgllm_sampler_accept(s, 3);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 1);
    wgllm_sampler_accept(s, 3);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 0);
    wgllm_sampler_free(s);
    /* window 0: penalties off */
    p.penalty_last_n = 0;
    s = wgllm_sampler_init(&p, 4);
    wgllm_sampler_accept(s, 0);
    CHECK_EQ_INT(wgllm_sampler_sample(s, pos), 0);
    wgllm_sampler_free(s);
}

TEST(presence_and_frequency_by_hand) {
    float l[4] = {3.0f, 2.5f, 2.2f, 0.0f};
    struct wgllm_sampler_params p = plain_params(0.0f);
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.1f;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, 4);
    wgllm_sampler_accept(s, 0);
    /* 3.0 - 0.3 - 0.1 = 2.6 > 2.5 */
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 0);
    wgllm_sampler_accept(s, 0);
    /* 3.0 - 0.6 - 0.1 = 2.3 < 2.5 */
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 1);
    wgllm_sampler_accept(s, 1);
    /* 0: 2.3, 1: 2.5 - 0.4 = 2.1, 2: 2.2 */
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 0);
    wgllm_sampler_accept(s, 0);
    /* 0: 3.0 - 0.9 - 0.1 = 2.0, 1: 2.1, 2: 2.2 */
    CHECK_EQ_INT(wgllm_sampler_sample(s, l), 2);
    wgllm_sampler_free(s);

    /* the window: 100 repeats of token 0 with frequency 0.006 cost 0.6 over
     * the whole history (2.4 < 2.5) but only 0.384 over the last 64 */
    float m[2] = {3.0f, 2.5f};
    p = plain_params(0.0f);
    p.frequency_penalty = 0.006f;
    p.penalty_last_n = -1;
    struct wgllm_sampler *all = wgllm_sampler_init(&p, 2);
    p.penalty_last_n = 64;
    struct wgllm_sampler *win = wgllm_sampler_init(&p, 2);
    for (int i = 0; i < 100; i++) {
        wgllm_sampler_accept(all, 0);
        wgllm_sampler_accept(win, 0);
    }
    CHECK_EQ_INT(wgllm_sampler_sample(all, m), 1);
    CHECK_EQ_INT(wgllm_sampler_sample(win, m), 0);
    wgllm_sampler_free(all);
    wgllm_sampler_free(win);
}

TEST(top_k_one_is_greedy_and_top_k_keeps_k) {
    enum { V = 5000 };
    static float l[V];
    random_logits(l, V, 42);
    int32_t best = wgllm_argmax(l, V);
    struct wgllm_sampler_params p = plain_params(5.0f);
    p.top_k = 1;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, V);
    for (int i = 0; i < 50; i++) CHECK_EQ_INT(wgllm_sampler_sample(s, l), best);
    wgllm_sampler_free(s);
    /* top-k = 3 at a high temperature draws exactly the three largest */
    int32_t t3[3] = {-1, -1, -1};
    for (int k = 0; k < 3; k++) {
        int32_t b = -1;
        for (int i = 0; i < V; i++) {
            if (i == t3[0] || i == t3[1]) continue;
            if (b < 0 || l[i] > l[b]) b = i;
        }
        t3[k] = b;
    }
    p.top_k = 3;
    p.temperature = 50.0f;
    s = wgllm_sampler_init(&p, V);
    int seen[3] = {0, 0, 0};
    for (int i = 0; i < 600; i++) {
        int32_t t = wgllm_sampler_sample(s, l);
        bool in = false;
        for (int k = 0; k < 3; k++)
            if (t == t3[k]) in = true, seen[k] = 1;
        CHECK(in);
    }
    CHECK(seen[0] && seen[1] && seen[2]);
    wgllm_sampler_free(s);
}

TEST(top_p_keeps_expected_set) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct wgllm_sampler_params p = plain_params(1.0f);
    p.top_p = 0.75f; /* 0.5, 0.8 >= 0.75 -> {0, 1} */
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x3);
    p.top_p = 0.85f; /* 0.5, 0.8, 0.95 -> {0, 1, 2} */
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x7);
    p.top_p = 0.4f; /* the first alone covers it */
    CHECK_EQ_INT(drawn_set(&p, l, 4, 200), 0x1);
    p.top_p = 1.0f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 4000), 0xf);
}

TEST(min_p_keeps_expected_set) {
    float l[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    struct wgllm_sampler_params p = plain_params(1.0f);
    p.min_p = 0.45f; /* p >= 0.18 -> {0, 1, 2} */
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x7);
    p.min_p = 0.6f; /* p >= 0.24 -> {0, 1} */
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x3);
    p.min_p = 0.9f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 200), 0x1);
}

TEST(typical_p_keeps_expected_set) {
    /* p = .4 .3 .2 .1: entropy H = 1.27985; |-ln p - H| = .3636 .0759 .3296
     * 1.0227, so the typical order is 1, 2, 0, 3 with cumulative mass .3 .5
     * .9 1.0: typical_p .45 keeps {1, 2} (not the most likely token!) and
     * .6 keeps {0, 1, 2} */
    float l[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    struct wgllm_sampler_params p = plain_params(1.0f);
    p.typical_p = 0.45f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x6);
    p.typical_p = 0.6f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 2000), 0x7);
    p.typical_p = 0.25f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 200), 0x2);
    /* runs before top-p: typical {1, 2} renormalised to .6 .4, then top-p .5 keeps {1} */
    p.typical_p = 0.45f;
    p.top_p = 0.5f;
    CHECK_EQ_INT(drawn_set(&p, l, 4, 500), 0x2);
}

/* top-k off on a large vocabulary: top-p and min-p must see the softmax over
 * every token even when the sampler only orders the head of the list.
 * Logits: 10, 9.5, 9 at tokens 17, 42, 99 and 0 everywhere else: masses
 * e^10 = 22026, e^9.5 = 13360, e^9 = 8103 and 4997 for the flat rest, so the
 * cumulative shares are .4543 .7298 .8969, then 2.06e-5 per flat token (ties
 * go to the smaller id). Top-p .75 needs the third token only because the
 * flat rest counts; top-p .99 reaches far into the flat rest. */
TEST(top_p_min_p_without_top_k_on_large_vocab) {
    enum { V = 5000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    l[17] = 10.0f;
    l[42] = 9.5f;
    l[99] = 9.0f;
    const float tps[4] = {0.7f, 0.75f, 0.4f, 0.99f};
    const int expect_n[4] = {2, 3, 1, -1};
    for (int k = 0; k < 4; k++) {
        struct wgllm_sampler_params p = plain_params(1.0f);
        p.top_p = tps[k];
        struct wgllm_sampler *s = wgllm_sampler_init(&p, V);
        int seen17 = 0, seen42 = 0, seen99 = 0, other = 0, far = 0;
        for (int i = 0; i < 3000; i++) {
            int32_t t = wgllm_sampler_sample(s, l);
            seen17 += t == 17, seen42 += t == 42, seen99 += t == 99;
            other += t != 17 && t != 42 && t != 99;
            far += t >= 2000;
        }
        if (expect_n[k] > 0) {
            CHECK(seen17 > 0);
            CHECK((seen42 > 0) == (expect_n[k] >= 2));
            CHECK((seen99 > 0) == (expect_n[k] >= 3));
            CHECK_EQ_INT(other, 0);
        } else {
            CHECK(far > 0); /* .99 - .8969 = 4500 flat tokens: ids up to ~4600 */
        }
        wgllm_sampler_free(s);
    }
    /* min-p 0.5: cut at 10 + ln .5 = 9.31 -> {17, 42} */
    struct wgllm_sampler_params p = plain_params(1.0f);
    p.min_p = 0.5f;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, V);
    int ok = 1, s42 = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t t = wgllm_sampler_sample(s, l);
        ok &= t == 17 || t == 42;
        s42 += t == 42;
    }
    CHECK(ok);
    CHECK(s42 > 0);
    wgllm_sampler_free(s);
}

TEST(seed_determines_the_sequence) {
    enum { V = 50, N = 200 };
    float l[V];
    random_logits(l, V, 9);
    struct wgllm_sampler_params p = plain_params(1.0f);
    p.seed = 1234;
    struct wgllm_sampler *a = wgllm_sampler_init(&p, V), *b = wgllm_sampler_init(&p, V);
    p.seed = 1235;
    struct wgllm_sampler *c = wgllm_sampler_init(&p, V);
    int32_t sa[N];
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < N; i++) {
        sa[i] = wgllm_sampler_sample(a, l);
        same_ab += sa[i] == wgllm_sampler_sample(b, l);
        same_ac += sa[i] == wgllm_sampler_sample(c, l);
    }
    CHECK_EQ_INT(same_ab, N);
    CHECK(same_ac < N / 2);
    /* reset re-seeds: the same sequence again */
    wgllm_sampler_reset(a);
    int again = 0;
    for (int i = 0; i < N; i++) again += sa[i] == wgllm_sampler_sample(a, l);
    CHECK_EQ_INT(again, N);
    wgllm_sampler_free(a);
    wgllm_sampler_free(b);
    wgllm_sampler_free(c);
}

TEST(temperature_spreads_as_softmax) {
    float l[2] = {1.0f, 0.0f};
    const float temps[3] = {0.25f, 1.0f, 2.0f};
    double prev = 1.0;
    for (int k = 0; k < 3; k++) {
        struct wgllm_sampler_params p = plain_params(temps[k]);
        p.seed = 5;
        struct wgllm_sampler *s = wgllm_sampler_init(&p, 2);
        int zeros = 0;
        const int n = 20000;
        for (int i = 0; i < n; i++) zeros += wgllm_sampler_sample(s, l) == 0;
        double expect = 1.0 / (1.0 + exp(-1.0 / temps[k]));
        CHECK_NEAR((double)zeros / n, expect, 0.02);
        CHECK((double)zeros / n < prev); /* hotter -> flatter */
        prev = (double)zeros / n;
        wgllm_sampler_free(s);
    }
}

TEST(logprob_and_top_alternatives) {
    enum { V = 3000, K = 7 };
    static float l[V];
    random_logits(l, V, 77);
    /* reference log-softmax in double */
    double max = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++)
        if (l[i] > max) max = l[i];
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - max);
    const double lse = max + log(sum);
    /* the K best by selection over a copy */
    int32_t ref[K];
    for (int k = 0; k < K; k++) {
        int32_t b = -1;
        for (int i = 0; i < V; i++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= ref[j] == i;
            if (!used && (b < 0 || l[i] > l[b])) b = i;
        }
        ref[k] = b;
    }
    struct wgllm_sampler_params p = plain_params(1.5f);
    p.top_k = 100;
    p.n_probs = K;
    p.repeat_penalty = 1.3f; /* penalties and temperature must not touch the reported logprobs */
    p.seed = 3;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, V);
    wgllm_sampler_accept(s, ref[0]);
    for (int round = 0; round < 20; round++) {
        struct wgllm_token_logprob top[K];
        int n_top = -1;
        float lp = 1.0f;
        int32_t t = wgllm_sampler_sample_ex(s, l, top, &n_top, &lp);
        CHECK(t >= 0 && t < V);
        CHECK_NEAR(lp, (double)l[t] - lse, 1e-5);
        CHECK_EQ_INT(n_top, K);
        for (int k = 0; k < K; k++) {
            CHECK_EQ_INT(top[k].token, ref[k]);
            CHECK_NEAR(top[k].logprob, (double)l[ref[k]] - lse, 1e-5);
            if (k) CHECK(top[k].logprob <= top[k - 1].logprob);
        }
    }
    /* greedy reports too, and NULL outputs are fine */
    p.temperature = 0.0f;
    struct wgllm_sampler *g = wgllm_sampler_init(&p, V);
    float lp = 0;
    int32_t t = wgllm_sampler_sample_ex(g, l, NULL, NULL, &lp);
    CHECK_EQ_INT(t, ref[0]);
    CHECK_NEAR(lp, (double)l[ref[0]] - lse, 1e-5);
    CHECK_EQ_INT(wgllm_sampler_sample_ex(g, l, NULL, NULL, NULL), ref[0]);
    wgllm_sampler_free(g);
    wgllm_sampler_free(s);
}

/* ---- stop strings ------------------------------------------------------- */

struct sink {
    char text[4096];
    size_t len;
    bool stopped;
};

static void push(struct wgllm_stop_matcher *m, struct sink *k, const char *s) {
    size_t n = 0;
    bool st = false;
    const char *o = wgllm_stop_matcher_push(m, s, strlen(s), &n, &st);
    CHECK(o != NULL);
    if (k->len + n < sizeof(k->text)) memcpy(k->text + k->len, o, n);
    k->len += n;
    k->text[k->len] = 0;
    k->stopped = st;
}

static void flush(struct wgllm_stop_matcher *m, struct sink *k) {
    size_t n = 0;
    const char *o = wgllm_stop_matcher_flush(m, &n);
    CHECK(o != NULL);
    if (k->len + n < sizeof(k->text)) memcpy(k->text + k->len, o, n);
    k->len += n;
    k->text[k->len] = 0;
}

TEST(stop_split_across_pushes) {
    const char *stops[] = {"STOP"};
    struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 1);
    struct sink k = {0};
    push(m, &k, "Hel");
    CHECK_STR(k.text, "Hel");
    push(m, &k, "lo ST");
    CHECK_STR(k.text, "Hello ");
    CHECK(!k.stopped);
    push(m, &k, "OP");
    CHECK_STR(k.text, "Hello ");
    CHECK(k.stopped);
    push(m, &k, "more text");
    CHECK(k.stopped);
    flush(m, &k);
    CHECK_STR(k.text, "Hello ");
    /* reset makes it usable again */
    wgllm_stop_matcher_reset(m);
    struct sink k2 = {0};
    push(m, &k2, "a STOP b");
    CHECK_STR(k2.text, "a ");
    CHECK(k2.stopped);
    wgllm_stop_matcher_free(m);
}

TEST(stop_false_start_released) {
    const char *stops[] = {"STOP"};
    struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 1);
    struct sink k = {0};
    push(m, &k, "ST");
    CHECK_STR(k.text, "");
    push(m, &k, "ART");
    CHECK_STR(k.text, "START");
    push(m, &k, " STO");
    CHECK_STR(k.text, "START ");
    push(m, &k, "STOP"); /* "STOSTOP": the first S..O was a false start */
    CHECK_STR(k.text, "START STO");
    CHECK(k.stopped);
    wgllm_stop_matcher_free(m);
}

TEST(stop_several_with_prefixes) {
    const char *stops[] = {"</s><|end|>", "</s>", "\n\n", "\nUser:"};
    struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 4);
    struct sink k = {0};
    push(m, &k, "hi\n");
    CHECK_STR(k.text, "hi");
    push(m, &k, "Us");
    push(m, &k, "er");
    CHECK_STR(k.text, "hi");
    push(m, &k, "!");
    CHECK_STR(k.text, "hi\nUser!");
    push(m, &k, "x</");
    CHECK_STR(k.text, "hi\nUser!x");
    push(m, &k, "s>");
    CHECK_STR(k.text, "hi\nUser!x"); /* the shorter stop completes first */
    CHECK(k.stopped);
    wgllm_stop_matcher_free(m);
    /* the earliest stop in one chunk wins, whatever its index */
    m = wgllm_stop_matcher_init(stops, 4);
    struct sink k2 = {0};
    push(m, &k2, "a\n\nb</s>c");
    CHECK_STR(k2.text, "a");
    CHECK(k2.stopped);
    wgllm_stop_matcher_free(m);
    m = wgllm_stop_matcher_init(stops, 4);
    struct sink k3 = {0};
    push(m, &k3, "a</s>b\n\nc");
    CHECK_STR(k3.text, "a");
    wgllm_stop_matcher_free(m);
}

TEST(stop_utf8_content) {
    const char *stops[] = {"本当"};
    struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 1);
    struct sink k = {0};
    push(m, &k, "日本");
    CHECK_STR(k.text, "日");
    push(m, &k, "語");
    CHECK_STR(k.text, "日本語");
    push(m, &k, "é本");
    CHECK_STR(k.text, "日本語é");
    push(m, &k, "当に");
    CHECK_STR(k.text, "日本語é");
    CHECK(k.stopped);
    wgllm_stop_matcher_free(m);
    /* a stop starting with a continuation byte must not split "ñ" (C3 B1) */
    const char *odd[] = {"\xB1X"};
    m = wgllm_stop_matcher_init(odd, 1);
    struct sink k2 = {0};
    push(m, &k2, "añ");
    CHECK_STR(k2.text, "a");
    push(m, &k2, "Y");
    CHECK_STR(k2.text, "añY");
    wgllm_stop_matcher_free(m);
}

TEST(stop_flush_and_empty_lists) {
    const char *stops[] = {"STOP"};
    struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 1);
    struct sink k = {0};
    push(m, &k, "abc S");
    CHECK_STR(k.text, "abc ");
    flush(m, &k);
    CHECK_STR(k.text, "abc S");
    CHECK(!k.stopped);
    wgllm_stop_matcher_free(m);

    m = wgllm_stop_matcher_init(NULL, 0);
    struct sink k2 = {0};
    push(m, &k2, "ST");
    push(m, &k2, "OP here");
    CHECK_STR(k2.text, "STOP here");
    CHECK(!k2.stopped);
    flush(m, &k2);
    CHECK_STR(k2.text, "STOP here");
    wgllm_stop_matcher_free(m);

    const char *empty[] = {"", NULL};
    m = wgllm_stop_matcher_init(empty, 2);
    struct sink k3 = {0};
    push(m, &k3, "text");
    CHECK_STR(k3.text, "text");
    CHECK(!k3.stopped);
    wgllm_stop_matcher_free(m);
}

/* Random chunkings: what has been emitted is always a prefix of the text up
 * to the first stop (nothing is ever taken back), and at the end it is
 * exactly that text. */
TEST(stop_random_chunking_never_leaks) {
    const char *stops[] = {"<|im_end|>", "<|im", "END", "ENDING"};
    const char *texts[] = {
        "some words <|i then <|im_start|> and END",
        "ENDIN no <|im_en nope ENDING",
        "plain text with no stop at all <|",
        "ünïcødé 文字 <|im_end|> after",
    };
    lcg_state = 11;
    for (int t = 0; t < 4; t++) {
        const char *text = texts[t];
        size_t tl = strlen(text), expect = tl;
        for (int i = 0; i < 4; i++) {
            const char *h = strstr(text, stops[i]);
            if (h && (size_t)(h - text) < expect) expect = (size_t)(h - text);
        }
        for (int trial = 0; trial < 50; trial++) {
            struct wgllm_stop_matcher *m = wgllm_stop_matcher_init(stops, 4);
            size_t ol = 0, pos = 0;
            bool stopped = false, ok = true;
            while (pos < tl && !stopped) {
                size_t n = 1 + (size_t)((lcg_float() + 4.0f) * 1.5f);
                if (n > tl - pos) n = tl - pos;
                size_t got = 0;
                const char *o = wgllm_stop_matcher_push(m, text + pos, n, &got, &stopped);
                pos += n;
                if (ol + got > expect || memcmp(o, text + ol, got) != 0) ok = false;
                ol += got;
            }
            if (!stopped) {
                size_t got = 0;
                const char *o = wgllm_stop_matcher_flush(m, &got);
                if (ol + got > expect || memcmp(o, text + ol, got) != 0) ok = false;
                ol += got;
            }
            CHECK(ok);
            CHECK_EQ_INT(ol, expect);
            CHECK(stopped == (expect < tl));
            wgllm_stop_matcher_free(m);
        }
    }
}

int main(void) {
    RUN(defaults_are_documented_values);
    RUN(greedy_is_argmax);
    RUN(bias_bans_and_boosts);
    RUN(repetition_penalty_by_hand);
    RUN(presence_and_frequency_by_hand);
    RUN(top_k_one_is_greedy_and_top_k_keeps_k);
    RUN(top_p_keeps_expected_set);
    RUN(min_p_keeps_expected_set);
    RUN(typical_p_keeps_expected_set);
    RUN(top_p_min_p_without_top_k_on_large_vocab);
    RUN(seed_determines_the_sequence);
    RUN(temperature_spreads_as_softmax);
    RUN(logprob_and_top_alternatives);
    RUN(stop_split_across_pushes);
    RUN(stop_false_start_released);
    RUN(stop_several_with_prefixes);
    RUN(stop_utf8_content);
    RUN(stop_flush_and_empty_lists);
    RUN(stop_random_chunking_never_leaks);
    return test_summary("test_sampler");
}
