/*
 * test_webgpu_sample.c - sampling on the GPU (WGLLM_KERNEL_SAMPLE, as
 * wgllm_context_generate runs it on WebGPU): the frequencies of thousands of
 * draws match the distribution the CPU sampler chain defines (top-k, top-p
 * at temperature 1, min-p, temperature), tokens the chain cuts never come,
 * ties go to the lower index, and the same seed and position give the same
 * token. On Dawn + SwiftShader in the default suite.
 */
#include "test.h"

#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"

#include <math.h>

static struct wgllm_gpu *G;

#define V 1000
#define N_DRAWS 1200 /* each top-k round is a pass over V: small k keep it seconds on SwiftShader */


/* Draws N_DRAWS tokens, position i for draw i, into out (one submit). */
static bool draw(const float *logits, const union wgllm_kparams *kp, uint32_t *out) {
    struct wgllm_error err = {0};
    char *src = wgllm_wgsl_generate(&(struct wgllm_kernel_key){.kernel = WGLLM_KERNEL_SAMPLE, .type = 0, .neox = false}, NULL);
    struct wgllm_gpu_pipeline *pipe = src ? wgllm_gpu_pipeline_get(G, src, "sample", &err) : NULL;
    free(src);
    if (!pipe) {
        fprintf(stderr, "  pipeline: %s\n", err.message);
        return false;
    }
    static uint32_t pos[N_DRAWS];
    for (int i = 0; i < N_DRAWS; i++) pos[i] = (uint32_t)i + 1;
    struct wgllm_gpu_buffer *x = wgllm_gpu_buffer_create(G, V * 4, WGLLM_GPU_STORAGE, "logits", &err);
    struct wgllm_gpu_buffer *st = wgllm_gpu_buffer_create(G, 64, WGLLM_GPU_STORAGE, "step", &err);
    struct wgllm_gpu_buffer *pb = wgllm_gpu_buffer_create(G, sizeof pos, WGLLM_GPU_STORAGE, "positions", &err);
    struct wgllm_gpu_buffer *res = wgllm_gpu_buffer_create(G, sizeof pos, WGLLM_GPU_STORAGE, "ids", &err);
    struct wgllm_gpu_buffer *u = wgllm_gpu_buffer_create(G, 256, WGLLM_GPU_UNIFORM, "params", &err);
    bool ok = x && st && pb && res && u;
    struct wgllm_gpu_bindgroup *bg = NULL;
    if (ok) {
        wgllm_gpu_buffer_write(G, x, 0, logits, V * 4);
        wgllm_gpu_buffer_write(G, pb, 0, pos, sizeof pos);
        wgllm_gpu_buffer_write(G, u, 0, kp, sizeof *kp);
        const struct wgllm_gpu_binding b[3] = {{u, 0, sizeof *kp}, {x, 0, 0}, {st, 0, 0}};
        bg = wgllm_gpu_bindgroup_create(G, pipe, 3, b, &err);
        ok = bg != NULL;
    }
    if (ok) {
        wgllm_gpu_batch_begin(G);
        for (int i = 0; i < N_DRAWS; i++) {
            wgllm_gpu_copy(G, pb, (uint64_t)i * 4, st, (uint64_t)kp->sample.len_at * 4, 4);
            wgllm_gpu_dispatch(G, pipe, bg, 1, 1, 1);
            wgllm_gpu_copy(G, st, (uint64_t)kp->sample.out_at * 4, res, (uint64_t)i * 4, 4);
        }
        ok = wgllm_gpu_batch_submit(G, &err) == WGLLM_STATUS_OK &&
             wgllm_gpu_buffer_read(G, res, 0, out, sizeof pos, &err) == WGLLM_STATUS_OK;
    }
    if (!ok) fprintf(stderr, "  sample: %s\n", err.message);
    if (bg) wgllm_gpu_bindgroup_destroy(G, bg);
    struct wgllm_gpu_buffer *bufs[5] = {x, st, pb, res, u};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) wgllm_gpu_buffer_destroy(G, bufs[i]);
    return ok;
}

/* Six leading logits at scattered ids (two of them tied), the rest far below. */
static void make_logits(float *l) {
    for (int i = 0; i < V; i++) l[i] = -8.0f + 0.001f * (float)(i % 97);
    const int ids[6] = {10, 500, 3, 999, 42, 7};
    const float v[6] = {3.0f, 2.6f, 2.2f, 2.2f, 1.0f, 0.2f};
    for (int i = 0; i < 6; i++) l[ids[i]] = v[i];
}

/* Each chain setting: observed frequencies within 4.5 standard deviations of
 * the expected probabilities, and nothing outside the kept set. */
static void check_chain(int top_k, float top_p, float min_p, float temp, uint32_t seed) {
    static float l[V];
    static uint32_t out[N_DRAWS];
    int ids[V];
    double prob[V];
    make_logits(l);
    const int n = test_chain_expected(l, V, top_k, top_p, min_p, temp, ids, prob);
    const union wgllm_kparams kp = {.sample = {.n_vocab = V, .top_k = (uint32_t)top_k, .out_at = 0, .len_at = 4,
                                               .seed = seed, .temperature = temp, .top_p = top_p, .min_p = min_p}};
    CHECK(draw(l, &kp, out));
    int count[V] = {0}, outside = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        if (out[i] >= V) {
            outside++;
            continue;
        }
        count[out[i]]++;
    }
    for (int i = 0; i < n; i++) count[ids[i]] = -count[ids[i]] - 1; /* mark the kept ones */
    for (int i = 0; i < V; i++)
        if (count[i] > 0) outside += count[i];
    CHECK_EQ_INT(outside, 0);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double obs = -(count[ids[i]] + 1), want = prob[i] * N_DRAWS;
        const double sd = sqrt(N_DRAWS * prob[i] * (1 - prob[i])) + 1e-9;
        worst = fmax(worst, fabs(obs - want) / sd);
    }
    printf("  top_k %d top_p %.2f min_p %.2f temp %.2f: %d kept, worst deviation %.2f sd\n", top_k, top_p, min_p, temp,
           n, worst);
    CHECK(worst < 4.5);
}

TEST(draws_follow_the_cpu_chain) {
    check_chain(5, 1.0f, 0.0f, 1.0f, 1); /* top-k alone */
    check_chain(8, 0.8f, 0.0f, 0.7f, 2); /* top-p cuts the 4th and later */
    check_chain(8, 1.0f, 0.2f, 1.5f, 3); /* min-p: exp(-1.61) of the top */
    check_chain(10, 0.95f, 0.05f, 0.8f, 4);
}

TEST(same_seed_same_tokens_and_ties_to_the_lower_index) {
    static float l[V];
    static uint32_t a[N_DRAWS], b[N_DRAWS], c[N_DRAWS];
    make_logits(l);
    union wgllm_kparams kp = {.sample = {.n_vocab = V, .top_k = 8, .len_at = 4, .seed = 7, .temperature = 1.0f,
                                         .top_p = 0.95f, .min_p = 0.05f}};
    CHECK(draw(l, &kp, a) && draw(l, &kp, b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    kp.sample.seed = 8;
    CHECK(draw(l, &kp, c));
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* top_k 1 is the argmax; with the 3rd/4th candidates raised into a tie at the top, the lower id */
    kp.sample.top_k = 1;
    CHECK(draw(l, &kp, a));
    int not_argmax = 0;
    for (int i = 0; i < N_DRAWS; i++) not_argmax += a[i] != 10;
    CHECK_EQ_INT(not_argmax, 0);
    l[3] = l[999] = 5.0f;
    CHECK(draw(l, &kp, a));
    not_argmax = 0;
    for (int i = 0; i < N_DRAWS; i++) not_argmax += a[i] != 3;
    CHECK_EQ_INT(not_argmax, 0);
}

int main(void) {
    int required;
    if (!(G = test_webgpu_open("test_webgpu_sample", &required))) return required ? 1 : test_summary("test_webgpu_sample");
    RUN(draws_follow_the_cpu_chain);
    RUN(same_seed_same_tokens_and_ties_to_the_lower_index);
    wgllm_gpu_close(G);
    return test_summary("test_webgpu_sample");
}
