/*
 * sampler.c - picks the next token from logits: greedy, or temperature with
 * top-k, top-p and min-p filtering in llama.cpp's order (top-k, top-p, min-p,
 * temperature, then a draw). Buffers are sized once for the vocabulary.
 */
#include "base/base.h"

#include <math.h>

struct wgllm_sampler {
    struct wgllm_sampler_params p;
    int n_vocab;
    uint64_t rng[2];
    struct cand {
        float logit;
        int32_t id;
    } *cand;
};

struct wgllm_sampler_params wgllm_sampler_default_params(void) {
    struct wgllm_sampler_params p = {.temperature = 0.0f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 0};
    return p;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* xoroshiro128+: uniform double in [0, 1) */
static double rng_uniform(uint64_t *s) {
    const uint64_t s0 = s[0];
    uint64_t s1 = s[1];
    const uint64_t r = s0 + s1;
    s1 ^= s0;
    s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
    s[1] = (s1 << 37) | (s1 >> 27);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

struct wgllm_sampler *wgllm_sampler_init(const struct wgllm_sampler_params *params, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    struct wgllm_sampler *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->p = params ? *params : wgllm_sampler_default_params();
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
    if (!s->cand) {
        free(s);
        return NULL;
    }
    uint64_t seed = s->p.seed;
    s->rng[0] = splitmix64(&seed);
    s->rng[1] = splitmix64(&seed);
    return s;
}

void wgllm_sampler_free(struct wgllm_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s);
}

int32_t wgllm_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int cmp_cand_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int32_t wgllm_sampler_sample(struct wgllm_sampler *s, const float *logits) {
    const int V = s->n_vocab;
    if (s->p.temperature <= 0.0f) return wgllm_argmax(logits, V);
    int n = V;
    for (int i = 0; i < V; i++) s->cand[i] = (struct cand){logits[i], i};
    /* top-k: partial selection would be faster, but a full sort of the
     * vocabulary costs well under the forward pass that produced it */
    qsort(s->cand, (size_t)n, sizeof(*s->cand), cmp_cand_desc);
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    /* probabilities at temperature 1 for the filters, as llama.cpp does */
    const float max = s->cand[0].logit;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(s->cand[i].logit - max));
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)(s->cand[i].logit - max)) / sum;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        const float cut = max + logf(s->p.min_p);
        int k = 1;
        while (k < n && s->cand[k].logit >= cut) k++;
        n = k;
    }
    /* temperature, then draw */
    double total = 0.0;
    for (int i = 0; i < n; i++) total += exp((double)((s->cand[i].logit - max) / s->p.temperature));
    double r = rng_uniform(s->rng) * total, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)((s->cand[i].logit - max) / s->p.temperature));
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
