/*
 * sampler.c - picks the next token from logits with llama.cpp's chain and
 * order: logit bias, repetition / presence / frequency penalties over a window
 * of accepted tokens, top-k, typical-p, top-p, min-p, temperature, then a draw
 * from a seeded generator. Also reports OpenAI-style logprobs of the raw
 * logits. Every buffer is sized once for the vocabulary at init, so the
 * per-token path never allocates.
 */
#include "base/base.h"

#include <math.h>

struct cand {
    float logit;
    int32_t id;
    float p;     /* probability within the current candidate set */
    float score; /* typical-p: distance of the surprise from the entropy */
};

struct wgllm_sampler {
    struct wgllm_sampler_params p;
    int n_vocab;
    uint64_t rng[2];
    struct cand *cand; /* n_vocab */
    struct cand *top;  /* n_probs: selection buffer for the raw alternatives */
    float *work;       /* n_vocab: logits after bias and penalties */
    struct wgllm_logit_bias *bias;
    /* penalty history: a ring of the last penalty_last_n accepted tokens (none
     * when the window is "all"), each token's count in the window, and the
     * list of distinct tokens with a count so penalties cost O(distinct) */
    int32_t *ring;
    int ring_cap, ring_len, ring_head;
    int32_t *count;    /* n_vocab */
    int32_t *distinct; /* n_vocab */
    int32_t *slot;     /* n_vocab: index in distinct, or -1 */
    int n_distinct;
    /* this call's softmax mass, relative to the best candidate, of the tokens
     * left out of a pre-selected candidate prefix; 0 when the list is whole */
    double tail_mass;
};

struct wgllm_sampler_params wgllm_sampler_default_params(void) {
    struct wgllm_sampler_params p = {
        .temperature = 0.0f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .seed = 0,
        .typical_p = 1.0f,
        .repeat_penalty = 1.0f,
        .penalty_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .n_probs = 0,
    };
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

static void seed_rng(struct wgllm_sampler *s) {
    uint64_t seed = s->p.seed;
    s->rng[0] = splitmix64(&seed);
    s->rng[1] = splitmix64(&seed);
}

void wgllm_sampler_free(struct wgllm_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->top);
    free(s->work);
    free(s->bias);
    free(s->ring);
    free(s->count);
    free(s->distinct);
    free(s->slot);
    free(s);
}

struct wgllm_sampler *wgllm_sampler_init(const struct wgllm_sampler_params *params, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    struct wgllm_sampler *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->p = params ? *params : wgllm_sampler_default_params();
    s->n_vocab = n_vocab;
    const size_t V = (size_t)n_vocab;
    if (s->p.n_probs < 0) s->p.n_probs = 0;
    if (s->p.n_probs > n_vocab) s->p.n_probs = n_vocab;
    if (s->p.penalty_last_n < -1) s->p.penalty_last_n = -1;
    int n_bias = s->p.logit_bias ? s->p.n_logit_bias : 0;
    if (n_bias < 0) n_bias = 0;
    s->cand = malloc(V * sizeof(*s->cand));
    s->top = malloc((size_t)(s->p.n_probs > 0 ? s->p.n_probs : 1) * sizeof(*s->top));
    s->work = malloc(V * sizeof(*s->work));
    s->bias = malloc((size_t)(n_bias > 0 ? n_bias : 1) * sizeof(*s->bias));
    s->count = calloc(V, sizeof(*s->count));
    s->distinct = malloc(V * sizeof(*s->distinct));
    s->slot = malloc(V * sizeof(*s->slot));
    s->ring_cap = s->p.penalty_last_n > 0 ? s->p.penalty_last_n : 0;
    s->ring = malloc((size_t)(s->ring_cap > 0 ? s->ring_cap : 1) * sizeof(*s->ring));
    if (!s->cand || !s->top || !s->work || !s->bias || !s->count || !s->distinct || !s->slot || !s->ring) {
        wgllm_sampler_free(s);
        return NULL;
    }
    if (n_bias) memcpy(s->bias, s->p.logit_bias, (size_t)n_bias * sizeof(*s->bias));
    s->p.logit_bias = s->bias;
    s->p.n_logit_bias = n_bias;
    for (size_t i = 0; i < V; i++) s->slot[i] = -1;
    seed_rng(s);
    return s;
}

static void hist_add(struct wgllm_sampler *s, int32_t t) {
    if (s->count[t]++ == 0) {
        s->slot[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void hist_remove(struct wgllm_sampler *s, int32_t t) {
    if (--s->count[t] == 0) {
        int at = s->slot[t];
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[at] = last;
        s->slot[last] = at;
        s->slot[t] = -1;
    }
}

void wgllm_sampler_accept(struct wgllm_sampler *s, int32_t token) {
    WGLLM_ASSERT(s);
    if (token < 0 || token >= s->n_vocab || s->p.penalty_last_n == 0) return;
    if (s->ring_cap > 0) {
        if (s->ring_len == s->ring_cap) {
            hist_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = token;
            s->ring_len++;
        }
    }
    hist_add(s, token);
}

void wgllm_sampler_reset(struct wgllm_sampler *s) {
    WGLLM_ASSERT(s);
    for (int i = 0; i < s->n_distinct; i++) {
        s->count[s->distinct[i]] = 0;
        s->slot[s->distinct[i]] = -1;
    }
    s->n_distinct = 0;
    s->ring_len = s->ring_head = 0;
    seed_rng(s);
}

/* The one argmax (the CPU backend and the tests use it too): the first index
 * of the largest value, so ties go to the smallest id as on the device
 * (WGLLM_KERNEL_ARGMAX); a NaN never compares larger, so it is only picked
 * at index 0 when nothing else beats it. */
int32_t wgllm_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* "a ranks before b": larger logit, ties to the smaller id so results do not
 * depend on the selection algorithm */
static inline bool cand_before(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (cand_before(x, y)) return -1;
    if (cand_before(y, x)) return 1;
    return 0;
}

static int cmp_score_asc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->id - y->id;
}

/* min-heap on rank: the root is the worst of the kept candidates */
static void heap_sift_down(struct cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(&h[w], &h[l])) w = l;
        if (r < n && cand_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        struct cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k best of vals[0..n) (NaNs skipped) into out, sorted best first: a
 * bounded heap, O(n log k), instead of sorting the whole vocabulary. */
static int select_top(const float *vals, int n, int k, struct cand *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        float v = vals[i];
        if (v != v) continue;
        struct cand c = {v, i, 0.0f, 0.0f};
        if (m < k) {
            int j = m++;
            out[j] = c;
            /* sift up */
            while (j > 0) {
                int parent = (j - 1) / 2;
                if (!cand_before(&out[parent], &out[j])) break;
                struct cand t = out[parent];
                out[parent] = out[j];
                out[j] = t;
                j = parent;
            }
        } else if (cand_before(&c, &out[0])) {
            out[0] = c;
            heap_sift_down(out, m, 0);
        }
    }
    qsort(out, (size_t)m, sizeof(*out), cmp_cand_desc);
    return m;
}

/* Fills p with the softmax of the n candidates' logits; returns the max. */
static float cand_softmax(struct cand *c, int n) {
    float max = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - (double)max);
    for (int i = 0; i < n; i++) c[i].p = (float)(exp((double)c[i].logit - (double)max) / sum);
    return max;
}

static void apply_bias_and_penalties(struct wgllm_sampler *s, float *w) {
    const int V = s->n_vocab;
    for (int i = 0; i < s->p.n_logit_bias; i++) {
        int32_t t = s->bias[i].token;
        if (t >= 0 && t < V) w[t] += s->bias[i].bias;
    }
    const float rep = s->p.repeat_penalty, freq = s->p.frequency_penalty, pres = s->p.presence_penalty;
    if (s->p.penalty_last_n == 0 || (rep == 1.0f && freq == 0.0f && pres == 0.0f)) return;
    for (int i = 0; i < s->n_distinct; i++) {
        int32_t t = s->distinct[i];
        int32_t c = s->count[t];
        float v = w[t];
        /* dividing a negative logit would raise it, so those are multiplied */
        v = v <= 0.0f ? v * rep : v / rep;
        v -= (float)c * freq + (float)(c > 0) * pres;
        w[t] = v;
    }
}

/* The draw after the filters; n >= 1, cand sorted best first on entry. */
static int32_t sample_filtered(struct wgllm_sampler *s, int n) {
    struct cand *c = s->cand;
    if (!(c[0].logit > -INFINITY)) return c[0].id; /* everything banned */

    /* typical-p: keep the tokens whose surprise is closest to the entropy
     * until they cover typical_p of the mass */
    if (s->p.typical_p < 1.0f && n > 1) {
        cand_softmax(c, n);
        double entropy = 0.0;
        for (int i = 0; i < n; i++)
            if (c[i].p > 0.0f) entropy -= (double)c[i].p * log((double)c[i].p);
        for (int i = 0; i < n; i++)
            c[i].score = c[i].p > 0.0f ? (float)fabs(-log((double)c[i].p) - entropy) : INFINITY;
        qsort(c, (size_t)n, sizeof(*c), cmp_score_asc);
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum > s->p.typical_p) {
                n = i + 1;
                break;
            }
        }
        qsort(c, (size_t)n, sizeof(*c), cmp_cand_desc);
    }

    /* top-p on the probabilities of the remaining set (temperature 1) */
    if (s->p.top_p < 1.0f && n > 1) {
        /* the mass outside a pre-selected prefix still counts (see
         * candidates_without_top_k) */
        const double max = c[0].logit;
        double z = s->tail_mass;
        for (int i = 0; i < n; i++) z += exp((double)c[i].logit - max);
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - max) / z;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }

    /* min-p: p_i >= min_p * p_max, i.e. logit_i >= logit_max + log(min_p) */
    if (s->p.min_p > 0.0f && n > 1) {
        const float cut = c[0].logit + logf(s->p.min_p);
        int k = 1;
        while (k < n && c[k].logit >= cut) k++;
        n = k;
    }

    /* temperature, then the draw */
    const double inv_t = 1.0 / (double)s->p.temperature, max = c[0].logit;
    double total = 0.0;
    for (int i = 0; i < n; i++) total += exp(((double)c[i].logit - max) * inv_t);
    const double r = rng_uniform(s->rng) * total;
    double acc = 0.0;
    int last_ok = 0;
    for (int i = 0; i < n; i++) {
        double e = exp(((double)c[i].logit - max) * inv_t);
        if (e <= 0.0) continue;
        last_ok = i;
        acc += e;
        if (r < acc) return c[i].id;
    }
    return c[last_ok].id; /* rounding left r at the very top */
}

/* Top-k is off: the candidate list for the rest of the chain, best first,
 * without sorting the whole vocabulary when the filters allow. Top-p and
 * min-p each keep a prefix of the sorted list, so when that prefix provably
 * ends inside the best PREFIX_SEL tokens (judged with the softmax over the
 * whole vocabulary, which is what top-p sees here), the tail never matters.
 * Typical-p needs the whole distribution's entropy, so it takes the full sort;
 * with no filter at all the draw needs no order. Returns the count. */
enum { PREFIX_SEL = 1024 };
static int candidates_without_top_k(struct wgllm_sampler *s, const float *w) {
    const int V = s->n_vocab;
    const bool typical = s->p.typical_p < 1.0f, top_p = s->p.top_p < 1.0f, min_p = s->p.min_p > 0.0f;
    int n = 0;
    if (!typical && (top_p || min_p) && V > 2 * PREFIX_SEL) {
        n = select_top(w, V, PREFIX_SEL, s->cand);
        if (n == PREFIX_SEL && s->cand[0].logit > -INFINITY) {
            const double max = s->cand[0].logit;
            const struct cand *last = &s->cand[n - 1];
            double z = 0.0, kept = 0.0;
            for (int i = 0; i < V; i++)
                if (w[i] == w[i]) z += exp((double)w[i] - max);
            for (int i = 0; i < n; i++) kept += exp((double)s->cand[i].logit - max);
            s->tail_mass = z - kept > 0.0 ? z - kept : 0.0;
            if (min_p && (double)last->logit < max + log((double)s->p.min_p)) return n;
            /* the last kept token is excluded: top-p must stop before it */
            if (top_p && (kept - exp((double)last->logit - max)) / z >= (double)s->p.top_p + 1e-6) return n;
            s->tail_mass = 0.0;
        }
        n = 0;
    }
    for (int i = 0; i < V; i++)
        if (w[i] == w[i]) s->cand[n++] = (struct cand){w[i], i, 0.0f, 0.0f};
    if (typical || top_p || min_p) qsort(s->cand, (size_t)n, sizeof(*s->cand), cmp_cand_desc);
    else {
        /* the draw renormalises against the first entry: make it the best */
        int b = 0;
        for (int i = 1; i < n; i++)
            if (cand_before(&s->cand[i], &s->cand[b])) b = i;
        struct cand t = s->cand[0];
        s->cand[0] = s->cand[b];
        s->cand[b] = t;
    }
    return n;
}

int32_t wgllm_sampler_sample_ex(struct wgllm_sampler *s, const float *logits, struct wgllm_token_logprob *top,
                                int *n_top, float *logprob) {
    return wgllm_sampler_sample_masked(s, logits, NULL, top, n_top, logprob);
}

int32_t wgllm_sampler_sample_masked(struct wgllm_sampler *s, const float *logits, const uint8_t *allowed,
                                    struct wgllm_token_logprob *top, int *n_top, float *logprob) {
    WGLLM_ASSERT(s && logits);
    const int V = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)V * sizeof(*w));
    apply_bias_and_penalties(s, w);
    /* a token the mask forbids is out before the chain runs (llama.cpp's grammar-first order) */
    if (allowed)
        for (int i = 0; i < V; i++)
            if (!allowed[i]) w[i] = -INFINITY;

    int32_t tok;
    s->tail_mass = 0.0;
    if (s->p.temperature <= 0.0f) {
        tok = wgllm_argmax(w, V);
    } else {
        int n;
        if (s->p.top_k > 0 && s->p.top_k < V) {
            n = select_top(w, V, s->p.top_k, s->cand);
        } else {
            n = candidates_without_top_k(s, w);
        }
        tok = n > 0 ? sample_filtered(s, n) : wgllm_argmax(w, V);
    }

    const bool want_top = top && s->p.n_probs > 0;
    if (n_top) *n_top = 0;
    if (want_top || logprob) {
        /* log-sum-exp of the raw logits, in double */
        float max = -INFINITY;
        for (int i = 0; i < V; i++)
            if (logits[i] > max) max = logits[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += (double)expf(logits[i] - max);
        const double lse = (double)max + log(sum);
        if (logprob) *logprob = (float)((double)logits[tok] - lse);
        if (want_top) {
            int m = select_top(logits, V, s->p.n_probs, s->top);
            for (int i = 0; i < m; i++)
                top[i] = (struct wgllm_token_logprob){s->top[i].id, (float)((double)s->top[i].logit - lse)};
            if (n_top) *n_top = m;
        }
    }
    return tok;
}

int32_t wgllm_sampler_sample(struct wgllm_sampler *s, const float *logits) {
    return wgllm_sampler_sample_ex(s, logits, NULL, NULL, NULL);
}
