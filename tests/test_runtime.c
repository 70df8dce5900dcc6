/* test_runtime.c - thread pool, barrier, sampler and the CPU row ops. */
#include "test.h"

#include "backend/cpu/ops.h"
#include "base/threadpool.h"

#include <stdatomic.h>

struct tp_job {
    atomic_int counter;
    int phase_ok;
    int *slots;
    struct wgllm_threadpool *tp;
};

static void tp_fn(void *arg, int ith, int nth) {
    struct tp_job *j = arg;
    atomic_fetch_add(&j->counter, 1);
    /* each thread writes its slot, barrier, then thread 0 checks all were written */
    for (int round = 0; round < 50; round++) {
        j->slots[ith] = round;
        wgllm_threadpool_barrier(j->tp);
        if (ith == 0)
            for (int i = 0; i < nth; i++)
                if (j->slots[i] != round) j->phase_ok = 0;
        wgllm_threadpool_barrier(j->tp);
    }
}

TEST(threadpool_runs_every_thread_and_barrier_orders) {
    for (int n = 1; n <= 4; n++) {
        struct wgllm_threadpool *tp = wgllm_threadpool_init(n);
        CHECK(tp != NULL);
        if (!tp) continue;
        int slots[4] = {0};
        struct tp_job j = {.phase_ok = 1, .slots = slots, .tp = tp};
        atomic_init(&j.counter, 0);
        for (int r = 0; r < 100; r++) wgllm_threadpool_run(tp, tp_fn, &j);
        CHECK_EQ_INT(atomic_load(&j.counter), 100 * n);
        CHECK(j.phase_ok);
        wgllm_threadpool_free(tp);
    }
}

TEST(split_range_covers_everything_once) {
    for (int nth = 1; nth <= 5; nth++)
        for (int64_t n = 0; n < 70; n += 7) {
            int64_t covered = 0, prev_hi = 0;
            for (int i = 0; i < nth; i++) {
                int64_t lo, hi;
                wgllm_split_range(n, i, nth, 4, &lo, &hi);
                CHECK(lo == prev_hi || lo == hi);
                if (hi > lo) prev_hi = hi;
                covered += hi - lo;
            }
            CHECK_EQ_INT(covered, n);
        }
}

TEST(sampler_greedy_and_filters) {
    float logits[100];
    for (int i = 0; i < 100; i++) logits[i] = (float)((i * 37) % 100) / 10.0f;
    int best = wgllm_argmax(logits, 100);
    CHECK_EQ_INT(logits[best], 9.9f);
    struct wgllm_sampler_params p = wgllm_sampler_default_params();
    p.temperature = 0.0f;
    struct wgllm_sampler *s = wgllm_sampler_init(&p, 100);
    CHECK_EQ_INT(wgllm_sampler_sample(s, logits), best);
    wgllm_sampler_free(s);
    /* top_k = 1 at any temperature is greedy */
    p.temperature = 5.0f;
    p.top_k = 1;
    s = wgllm_sampler_init(&p, 100);
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(wgllm_sampler_sample(s, logits), best);
    wgllm_sampler_free(s);
    /* same seed -> same draws; draws stay inside the top-k set */
    p.top_k = 5;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 7;
    struct wgllm_sampler *a = wgllm_sampler_init(&p, 100), *b = wgllm_sampler_init(&p, 100);
    int distinct[100] = {0};
    for (int i = 0; i < 200; i++) {
        int x = wgllm_sampler_sample(a, logits), y = wgllm_sampler_sample(b, logits);
        CHECK_EQ_INT(x, y);
        CHECK(logits[x] >= 9.5f); /* the five largest are 9.5 .. 9.9 */
        distinct[x] = 1;
    }
    int nd = 0;
    for (int i = 0; i < 100; i++) nd += distinct[i];
    CHECK(nd >= 3); /* at temperature 5 the draws spread over the set */
    wgllm_sampler_free(a);
    wgllm_sampler_free(b);
    /* min_p keeps only tokens within a factor of the best */
    p.top_k = 0;
    p.min_p = 0.5f;
    p.temperature = 1.0f;
    s = wgllm_sampler_init(&p, 100);
    for (int i = 0; i < 100; i++) CHECK(logits[wgllm_sampler_sample(s, logits)] >= 9.9f + logf(0.5f) - 1e-5f);
    wgllm_sampler_free(s);
}

TEST(rms_norm_and_softmax) {
    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, w[8] = {1, 1, 1, 1, 2, 2, 2, 2}, y[8];
    wgllm_op_rms_norm(x, w, y, 8, 0.0f);
    double ms = 0;
    for (int i = 0; i < 8; i++) ms += x[i] * x[i];
    ms /= 8;
    for (int i = 0; i < 8; i++) CHECK_NEAR(y[i], x[i] / sqrt(ms) * w[i], 1e-5);
    float s[4] = {1, 2, 3, 1000};
    wgllm_op_softmax(s, 4);
    CHECK_NEAR(s[3], 1.0, 1e-6);
    CHECK_NEAR(s[0] + s[1] + s[2] + s[3], 1.0, 1e-6);
}

TEST(rope_rotates_pairs_and_keeps_norm) {
    float cs[8], x[8] = {1, 0, 0, 1, 1, 1, 0.5f, -2}, y[8];
    memcpy(y, x, sizeof(x));
    wgllm_op_rope_cache(cs, 3, 8, 10000.0f, 1.0f, NULL);
    /* first pair angle = pos * base^0 = 3 rad */
    CHECK_NEAR(cs[0], cos(3.0), 1e-6);
    CHECK_NEAR(cs[1], sin(3.0), 1e-6);
    CHECK_NEAR(cs[2], cos(3.0 * pow(10000.0, -2.0 / 8)), 1e-5);
    wgllm_op_rope(y, cs, 8, false);
    CHECK_NEAR(y[0], cos(3.0), 1e-6); /* (1,0) rotated by 3 rad */
    CHECK_NEAR(y[1], sin(3.0), 1e-6);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 8; i++) n0 += x[i] * x[i], n1 += y[i] * y[i];
    CHECK_NEAR(n0, n1, 1e-4);
    /* neox pairs element i with i + 4 */
    float z[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    wgllm_op_rope(z, cs, 8, true);
    CHECK_NEAR(z[0], cos(3.0), 1e-6);
    CHECK_NEAR(z[4], sin(3.0), 1e-6);
    /* position 0 is the identity */
    wgllm_op_rope_cache(cs, 0, 8, 10000.0f, 1.0f, NULL);
    memcpy(y, x, sizeof(x));
    wgllm_op_rope(y, cs, 8, false);
    for (int i = 0; i < 8; i++) CHECK_NEAR(y[i], x[i], 0);
}

int main(void) {
    wgllm_base_init();
    RUN(threadpool_runs_every_thread_and_barrier_orders);
    RUN(split_range_covers_everything_once);
    RUN(sampler_greedy_and_filters);
    RUN(rms_norm_and_softmax);
    RUN(rope_rotates_pairs_and_keeps_norm);
    return test_summary("test_runtime");
}
