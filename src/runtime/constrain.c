/*
 * constrain.c - grammar-constrained generation in the engine (issue #16):
 * the model's token pieces as the grammar matcher sees them (made once per
 * engine, on the first constrained request), and per request the grammar,
 * its parse state and the masking of each step's logits.
 *
 * A constrained request samples on the host: the sampler runs its chain on
 * the logits with every token the grammar does not allow taken out first,
 * which is llama.cpp's "grammar first" order (the result equals its
 * resample-on-rejection path); logprobs still describe the model's logits. The chosen token
 * then advances the parse; a grammar that can take nothing more ends the
 * request as a stop.
 *
 * Where the backend samples on the device (WebGPU), the same mask is made
 * from the parse state before the step's pass, as a bitset
 * (wgllm_constraint_bits) that the device's sampler applies, so that no
 * logits row comes back. It cannot see the logits, so it does not take out
 * NaN logits as the host path does (a model that gives NaN is broken
 * either way).
 */
#include "runtime/engine_internal.h"

#include <math.h>

struct wgllm_constraint {
    struct wgllm_grammar *g;
    struct wgllm_grammar_state *st;
    const struct wgllm_grammar_vocab *gv;
    uint8_t *allowed;
    uint32_t *bits; /* wgllm_constraint_bits: allowed as ceil(n_vocab / 32) words */
    int n_vocab;
};

static const char no_token_msg[] =
    "the grammar allows no token of this vocabulary here (the text so far cannot be continued)";

/* The engine's grammar vocabulary, made on first use (any thread). */
static const struct wgllm_grammar_vocab *engine_gvocab(struct wgllm_engine *e, struct wgllm_error *err) {
    pthread_mutex_lock(&e->gv_mu);
    if (!e->gvocab) {
        const int n = wgllm_model_n_vocab(e->model);
        char **pieces = calloc((size_t)n + 1, sizeof *pieces);
        uint32_t *lens = calloc((size_t)n + 1, sizeof *lens);
        bool *eog = calloc((size_t)n + 1, sizeof *eog);
        bool ok = pieces && lens && eog;
        char buf[256];
        for (int t = 0; ok && t < n; t++) {
            int32_t k = wgllm_token_to_piece(e->model, t, buf, (int32_t)sizeof buf, true);
            char *p = NULL;
            if (k < 0) { /* a long piece: ask again with the room it needs */
                p = malloc((size_t)-k);
                ok = p && wgllm_token_to_piece(e->model, t, p, -k, true) == -k;
                k = -k;
            } else {
                p = malloc((size_t)k + 1);
                ok = p != NULL;
                if (ok) memcpy(p, buf, (size_t)k);
            }
            pieces[t] = p, lens[t] = (uint32_t)k;
            eog[t] = wgllm_token_is_eog(e->model, t);
        }
        if (ok) e->gvocab = wgllm_grammar_vocab_init((const char *const *)pieces, lens, eog, n);
        for (int t = 0; pieces && t < n; t++) free(pieces[t]);
        free(pieces), free(lens), free(eog);
    }
    const struct wgllm_grammar_vocab *gv = e->gvocab;
    pthread_mutex_unlock(&e->gv_mu);
    if (!gv) wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the grammar's token table");
    return gv;
}

/* GBNF piece references like <|im_end|>: the token whose text that is. */
static int32_t token_of(void *user, const char *text, size_t len) {
    const struct wgllm_engine *e = user;
    int32_t tok[2];
    char *z = malloc(len + 1);
    if (!z) return -1;
    memcpy(z, text, len);
    z[len] = 0;
    const int32_t n = wgllm_tokenize(e->model, z, len, tok, 2, false, true, NULL);
    free(z);
    return n == 1 ? tok[0] : -1;
}

enum wgllm_status wgllm_constraint_init(struct wgllm_engine *e, const char *grammar, size_t len,
                                        struct wgllm_constraint **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_constraint *c = calloc(1, sizeof *c);
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->n_vocab = wgllm_model_n_vocab(e->model);
    struct wgllm_grammar_params gp = wgllm_grammar_default_params();
    gp.token_of = token_of;
    gp.token_user = e;
    enum wgllm_status s = wgllm_grammar_parse(grammar, len, &gp, &c->g, err);
    if (s == WGLLM_STATUS_OK) {
        c->gv = engine_gvocab(e, err);
        s = c->gv ? WGLLM_STATUS_OK : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    if (s == WGLLM_STATUS_OK) s = wgllm_grammar_state_init(c->g, &c->st, err);
    if (s == WGLLM_STATUS_OK) {
        c->allowed = malloc((size_t)c->n_vocab);
        c->bits = malloc(sizeof(uint32_t) * (((size_t)c->n_vocab + 31) / 32));
        if (!c->allowed || !c->bits) s = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (s != WGLLM_STATUS_OK) {
        wgllm_constraint_free(c);
        return s;
    }
    *out = c;
    return WGLLM_STATUS_OK;
}

void wgllm_constraint_free(struct wgllm_constraint *c) {
    if (!c) return;
    wgllm_grammar_state_free(c->st);
    wgllm_grammar_free(c->g);
    free(c->allowed);
    free(c->bits);
    free(c);
}

const uint8_t *wgllm_constraint_mask(struct wgllm_constraint *c, const float *logits, struct wgllm_error *err) {
    if (wgllm_grammar_state_mask(c->st, c->gv, c->allowed, err) != WGLLM_STATUS_OK) return NULL;
    int n_allowed = 0;
    for (int t = 0; t < c->n_vocab; t++) {
        if (isnan(logits[t])) c->allowed[t] = 0;
        n_allowed += c->allowed[t];
    }
    if (!n_allowed) {
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "%s", no_token_msg);
        return NULL;
    }
    return c->allowed;
}

const uint32_t *wgllm_constraint_bits(struct wgllm_constraint *c, struct wgllm_error *err) {
    if (wgllm_grammar_state_mask(c->st, c->gv, c->allowed, err) != WGLLM_STATUS_OK) return NULL;
    const int words = (c->n_vocab + 31) / 32;
    memset(c->bits, 0, sizeof(uint32_t) * (size_t)words); /* the bits past the vocabulary stay 0 */
    int n_allowed = 0;
    for (int t = 0; t < c->n_vocab; t++)
        if (c->allowed[t]) {
            c->bits[t >> 5] |= 1u << (t & 31);
            n_allowed++;
        }
    if (!n_allowed) {
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "%s", no_token_msg);
        return NULL;
    }
    return c->bits;
}

enum wgllm_status wgllm_constraint_accept(struct wgllm_constraint *c, int32_t token, struct wgllm_error *err) {
    return wgllm_grammar_state_accept_token(c->st, c->gv, token, err);
}

bool wgllm_constraint_complete(const struct wgllm_constraint *c) {
    return wgllm_grammar_state_can_end(c->st) && !wgllm_grammar_state_can_continue(c->st);
}
