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
 * A lazy grammar (triggers) leaves the text free until one of its trigger
 * texts appears in it, as llama.cpp's lazy grammars for tool calls: from
 * there the text must fit the grammar, fed what came from the trigger on.
 * While it waits nothing is masked (on the host or the device).
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

/* A lazy grammar waits for a trigger text; one that the text after its
 * trigger does not fit is dropped (the rest of the answer is free, as
 * before it). */
enum mode { MODE_ACTIVE, MODE_WAITING, MODE_DROPPED };

struct wgllm_constraint {
    struct wgllm_grammar *g;
    struct wgllm_grammar_state *st;
    const struct wgllm_grammar_vocab *gv;
    uint8_t *allowed;
    uint32_t *bits; /* wgllm_constraint_bits: allowed as ceil(n_vocab / 32) words */
    int n_vocab;
    enum mode mode;
    const struct wgllm_model *model;
    char **triggers;
    int n_triggers;
    size_t max_trigger;
    char *tail; /* waiting: the generated text's last bytes, where a trigger may be beginning */
    size_t n_tail;
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
                                        const char *const *triggers, int n_triggers, struct wgllm_constraint **out,
                                        struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_constraint *c = calloc(1, sizeof *c);
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->n_vocab = wgllm_model_n_vocab(e->model);
    c->model = e->model;
    if (n_triggers > 0) {
        c->mode = MODE_WAITING;
        c->triggers = calloc((size_t)n_triggers, sizeof *c->triggers);
        for (int i = 0; c->triggers && i < n_triggers; i++) {
            if (!triggers[i] || !triggers[i][0]) {
                wgllm_constraint_free(c);
                return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "grammar: trigger %d is empty", i);
            }
            if (!(c->triggers[i] = strdup(triggers[i]))) break;
            c->n_triggers = i + 1;
            const size_t n = strlen(triggers[i]);
            if (n > c->max_trigger) c->max_trigger = n;
        }
        if (c->n_triggers != n_triggers) {
            wgllm_constraint_free(c);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
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
    for (int i = 0; i < c->n_triggers; i++) free(c->triggers[i]);
    free(c->triggers);
    free(c->tail);
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

bool wgllm_constraint_active(const struct wgllm_constraint *c) { return c->mode == MODE_ACTIVE; }

/* Waiting: the token's text joins the tail; at the first trigger in it the
 * grammar starts, fed the text from the trigger on. */
static enum wgllm_status wait_for_trigger(struct wgllm_constraint *c, int32_t token) {
    char buf[256], *piece = buf;
    int32_t n = wgllm_token_to_piece(c->model, token, buf, (int32_t)sizeof buf, true);
    if (n < 0 && (piece = malloc((size_t)-n))) n = wgllm_token_to_piece(c->model, token, piece, -n, true);
    if (n < 0) n = 0, piece = piece ? piece : buf;
    char *t = realloc(c->tail, c->n_tail + (size_t)n);
    if (!t) {
        if (piece != buf) free(piece);
        c->mode = MODE_DROPPED; /* out of memory: unconstrained rather than failed */
        return WGLLM_STATUS_OK;
    }
    c->tail = t;
    memcpy(c->tail + c->n_tail, piece, (size_t)n);
    c->n_tail += (size_t)n;
    if (piece != buf) free(piece);
    size_t at = (size_t)-1;
    for (int i = 0; i < c->n_triggers; i++) {
        const size_t k = strlen(c->triggers[i]);
        for (size_t j = 0; j + k <= c->n_tail && j < at; j++)
            if (!memcmp(c->tail + j, c->triggers[i], k)) at = j;
    }
    if (at != (size_t)-1) {
        struct wgllm_error gerr;
        c->mode = wgllm_grammar_state_accept_text(c->st, c->tail + at, c->n_tail - at, &gerr) == WGLLM_STATUS_OK
                      ? MODE_ACTIVE
                      : MODE_DROPPED;
        c->n_tail = 0;
        return WGLLM_STATUS_OK;
    }
    /* only a trigger's beginning can still matter */
    const size_t keep = c->max_trigger - 1;
    if (c->n_tail > keep) {
        memmove(c->tail, c->tail + c->n_tail - keep, keep);
        c->n_tail = keep;
    }
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_constraint_accept(struct wgllm_constraint *c, int32_t token, struct wgllm_error *err) {
    if (c->mode == MODE_WAITING) return wait_for_trigger(c, token);
    if (c->mode == MODE_DROPPED) return WGLLM_STATUS_OK;
    return wgllm_grammar_state_accept_token(c->st, c->gv, token, err);
}

bool wgllm_constraint_complete(const struct wgllm_constraint *c) {
    return c->mode == MODE_ACTIVE && wgllm_grammar_state_can_end(c->st) && !wgllm_grammar_state_can_continue(c->st);
}
