/*
 * vocab_spm.c - the SentencePiece tokenizer (tokenizer.ggml.model "llama"):
 * spaces escaped to U+2581 (with the space prefix), bigram merges by token
 * score, and byte fallback (<0xXX>) for what does not form a token, as
 * llama.cpp's llm_tokenizer_spm_session.
 */
#include "vocab/vocab_internal.h"

/* ------------------------------------------------------------------------
 * SentencePiece (llama.cpp's llm_tokenizer_spm_session)
 *
 * Pairs merge when their text is a token, best score first. llama.cpp also
 * keeps a map from merged text to the pair (rev_merge) to resegment symbols
 * that are not tokens; it is left out because it cannot be reached: every
 * merged symbol is a token by construction, and a symbol that is not one
 * (a single character) is never a key of that map, whose keys are tokens.
 * ---------------------------------------------------------------------- */

/* A score as a heap key: higher scores merge first, and equal scores (-0.0
 * and 0.0 included; NaNs were replaced at load) get equal keys. */
static uint32_t score_key(float f) {
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* orders like the floats */
    return ~asc;
}

static uint32_t spm_key(const void *ctx, const char *text, uint32_t a, uint32_t b, uint32_t c) {
    (void)b;
    const struct wgllm_vocab *v = ctx;
    if (c - a > v->max_token_len) return WGLLM_MERGE_NONE;
    int32_t id = text_to_token(v, text + a, c - a);
    return id < 0 ? WGLLM_MERGE_NONE : score_key(v->toks[id].score);
}

static int32_t spm_byte_to_token(const struct wgllm_vocab *v, uint8_t ch) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
    int32_t id = text_to_token(v, buf, 6);
    if (id >= 0) return id;
    char c = (char)ch;
    id = text_to_token(v, &c, 1);
    return id >= 0 ? id : v->unk; /* llama.cpp throws here; unk is the gentle choice */
}

static bool spm_text(const struct wgllm_vocab *v, const char *text, size_t len, struct wgllm_merge *mg,
                     struct ids *out) {
    if (len == 0) return true;
    if (!wgllm_merge_run(mg, text, len, spm_key, v)) return false;
    emit_symbols(v, text, mg, out, spm_byte_to_token); /* symbols that did not form tokens, as <0xXX> bytes */
    return true;
}

bool wgllm_vocab_spm_tokenize(const struct wgllm_vocab *v, const char *text, size_t len,
                              const struct wgllm_frags *fr, bool add_special, struct ids *out) {
    struct wgllm_merge mg = {0};
    bool prev_special = true; /* so the first text gets the space prefix */
    if (add_special && v->add_bos && v->bos >= 0) ids_push(out, v->bos);
    char *buf = wgllm_malloc_array((uint64_t)len * 3 + 4, 1); /* ' ' becomes 3 bytes */
    bool ok = buf != NULL;
    for (size_t i = 0; ok && i < fr->n; i++) {
        if (fr->v[i].token >= 0) {
            ids_push(out, fr->v[i].token);
            prev_special = true;
            continue;
        }
        /* escape whitespace: ' ' -> U+2581 */
        size_t bl = 0;
        if (v->add_space_prefix && prev_special) { memcpy(buf, "\xe2\x96\x81", 3); bl = 3; }
        for (size_t j = 0; j < fr->v[i].len; j++) {
            char c = text[fr->v[i].off + j];
            if (c == ' ') { memcpy(buf + bl, "\xe2\x96\x81", 3); bl += 3; }
            else buf[bl++] = c;
        }
        ok = spm_text(v, buf, bl, &mg, out);
        prev_special = false;
    }
    if (ok && add_special && v->add_eos && v->eos >= 0) ids_push(out, v->eos);
    free(buf);
    wgllm_merge_free(&mg);
    return ok;
}
