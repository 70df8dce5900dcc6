/*
 * tokens.c - the public tokenizer API of wgllm.h over the model's vocab, and
 * the streaming detokenizer that holds back incomplete UTF-8 sequences.
 */
#include "base/strbuf.h"
#include "model/model.h"

int32_t wgllm_tokenize(const struct wgllm_model *model, const char *text, size_t len, int32_t *tokens,
                       int32_t max_tokens, bool add_special, bool parse_special, struct wgllm_error *err) {
    if (!text && len) {
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "tokenize: NULL text");
        return INT32_MIN;
    }
    if (len > (size_t)INT32_MAX / 2) {
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "tokenize: text of %zu bytes is too long", len);
        return INT32_MIN;
    }
    const int32_t n =
        wgllm_vocab_tokenize(model->vocab, text ? text : "", len, tokens, max_tokens, add_special, parse_special);
    /* the vocabulary has no error channel: say here what failed, so that err is always set with INT32_MIN */
    if (n == INT32_MIN && wgllm_vocab_type(model->vocab) == WGLLM_VOCAB_TYPE_NONE)
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tokenize: the model has no tokenizer (tokenizer.ggml.model is 'none')");
    else if (n == INT32_MIN)
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "tokenize: out of memory tokenizing %zu bytes", len);
    return n;
}

int32_t wgllm_tokenize_alloc(const struct wgllm_model *model, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t **out, struct wgllm_error *err) {
    *out = NULL;
    int32_t n = wgllm_tokenize(model, text, len, NULL, 0, add_special, parse_special, err);
    if (n == INT32_MIN) return -1;
    const int32_t cap = n < 0 ? -n : n;
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)cap + 1));
    if (!ids) {
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d tokens", cap);
        return -1;
    }
    n = wgllm_tokenize(model, text, len, ids, cap, add_special, parse_special, err);
    if (n < 0) { /* the count cannot change between the two calls */
        free(ids);
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "tokenization failed");
        return -1;
    }
    *out = ids;
    return n;
}

int32_t wgllm_token_to_piece(const struct wgllm_model *model, int32_t token, char *buf, int32_t size, bool special) {
    if (token < 0 || token >= wgllm_vocab_n_tokens(model->vocab)) return 0;
    return wgllm_vocab_token_to_piece(model->vocab, token, buf, size, special);
}

int32_t wgllm_token_bos(const struct wgllm_model *model) { return wgllm_vocab_bos(model->vocab); }
int32_t wgllm_token_eos(const struct wgllm_model *model) { return wgllm_vocab_eos(model->vocab); }
bool wgllm_token_is_eog(const struct wgllm_model *model, int32_t token) {
    return wgllm_vocab_is_eog(model->vocab, token);
}

/* ---- streaming detokenizer -------------------------------------------- */

struct wgllm_detokenizer {
    const struct wgllm_model *model;
    char *buf;       /* pending bytes + the text handed out last */
    size_t cap, len; /* len: bytes pending (incomplete UTF-8 tail) */
    char *out;
    size_t out_cap;
};

struct wgllm_detokenizer *wgllm_detokenizer_init(const struct wgllm_model *model) {
    struct wgllm_detokenizer *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->model = model;
    d->cap = 256;
    d->out_cap = 256;
    d->buf = malloc(d->cap);
    d->out = malloc(d->out_cap);
    if (!d->buf || !d->out) {
        wgllm_detokenizer_free(d);
        return NULL;
    }
    return d;
}

void wgllm_detokenizer_free(struct wgllm_detokenizer *d) {
    if (!d) return;
    free(d->buf);
    free(d->out);
    free(d);
}

/* Length of the longest prefix of s that ends on a UTF-8 character boundary,
 * treating a trailing sequence that could still complete as pending. */
static size_t utf8_complete_prefix(const unsigned char *s, size_t n) {
    /* look back at most 3 bytes for the start of an unfinished sequence */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xc0) == 0x80) continue; /* continuation byte */
        size_t need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

const char *wgllm_detokenizer_push(struct wgllm_detokenizer *d, int32_t token, size_t *len) {
    *len = 0;
    char piece[256];
    int32_t n = wgllm_token_to_piece(d->model, token, piece, (int32_t)sizeof(piece), false);
    const char *src = piece;
    char *big = NULL;
    if (n < 0) { /* a very long token: rare, allocate once for it */
        big = malloc((size_t)-n);
        if (!big) return "";
        n = wgllm_token_to_piece(d->model, token, big, -n, false);
        src = big;
    }
    if (!wgllm_grow((void **)&d->buf, &d->cap, d->len + (size_t)n, 1)) {
        free(big);
        return "";
    }
    memcpy(d->buf + d->len, src, (size_t)n);
    free(big);
    d->len += (size_t)n;
    size_t ready = utf8_complete_prefix((const unsigned char *)d->buf, d->len);
    if (!wgllm_grow((void **)&d->out, &d->out_cap, ready + 1, 1)) return "";
    memcpy(d->out, d->buf, ready);
    d->out[ready] = 0;
    memmove(d->buf, d->buf + ready, d->len - ready);
    d->len -= ready;
    *len = ready;
    return d->out;
}

const char *wgllm_detokenizer_flush(struct wgllm_detokenizer *d, size_t *len) {
    if (!wgllm_grow((void **)&d->out, &d->out_cap, d->len + 1, 1)) {
        *len = 0;
        return "";
    }
    memcpy(d->out, d->buf, d->len);
    d->out[d->len] = 0;
    *len = d->len;
    d->len = 0;
    return d->out;
}
