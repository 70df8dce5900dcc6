/*
 * vocab_wpm.c - the WordPiece tokenizer (tokenizer.ggml.model "bert"):
 * BERT's basic split (whitespace, punctuation, CJK ideographs), first-
 * codepoint NFD and lowercasing, then a greedy longest match of each word
 * over a trie of every token's text, as llama.cpp's
 * llm_tokenizer_wpm_session.
 */
#include "vocab/vocab_internal.h"

enum wgllm_status wgllm_vocab_wpm_init(struct wgllm_vocab *v, struct wgllm_error *err) {
    /* the longest-match walk costs up to this many steps per input byte */
    if (v->max_token_len > VOCAB_WPM_MAX_TEXT)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "vocab: a WordPiece token is %u bytes long; at most %d are supported",
                               v->max_token_len, VOCAB_WPM_MAX_TEXT);
    const char **texts = wgllm_malloc_array((uint64_t)v->n_tokens, sizeof *texts);
    uint32_t *lens = wgllm_malloc_array((uint64_t)v->n_tokens, sizeof *lens);
    bool built = texts && lens;
    for (int32_t i = 0; built && i < v->n_tokens; i++) {
        texts[i] = v->toks[i].text;
        lens[i] = v->toks[i].len;
    }
    built = built && wgllm_trie_init(&v->wpm_trie, texts, lens, v->n_tokens, false);
    free(texts);
    free(lens);
    if (!built)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "vocab: out of memory for %d tokens", v->n_tokens);
    return WGLLM_STATUS_OK;
}

/* ------------------------------------------------------------------------
 * WordPiece (llama.cpp's llm_tokenizer_wpm_session)
 * ---------------------------------------------------------------------- */

/* BERT's "Chinese character" blocks (with the HF quirk 0x2B920, not 0x2B820) */
static bool wpm_is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word (already prefixed with U+2581, the GGUF
 * form of a word start; "##" continuations are stored without prefix). A
 * word with any unmatched position becomes a single [UNK]. */
static void wpm_word(const struct wgllm_vocab *v, const char *w, size_t n, struct ids *out) {
    const struct wgllm_trie *t = &v->wpm_trie;
    size_t start = out->n;
    for (size_t i = 0; i < n;) {
        int32_t id = -1;
        size_t end = i;
        uint32_t u = 0;
        for (size_t q = i; q < n && (u = wgllm_trie_child(t, u, (uint8_t)w[q])) != WGLLM_TRIE_NONE; q++)
            if (t->key[u] >= 0) {
                id = t->key[u];
                while (t->key_next[id] >= 0) id = t->key_next[id]; /* the last id with a text wins */
                end = q + 1;
            }
        if (id < 0) { out->n = start; break; }
        ids_push(out, id);
        i = end;
    }
    if (out->n == start && v->unk >= 0) ids_push(out, v->unk);
}

/* Splits on whitespace; punctuation, ASCII symbols and CJK ideographs are
 * words of their own; NUL, U+FFFD and controls vanish; all else is
 * first-codepoint-NFD'd and lowercased. */
static bool wpm_text(const struct wgllm_vocab *v, const char *text, size_t len, struct ids *out) {
    if (len == 0) return true;
    uint32_t *cpts = wgllm_malloc_array(len, sizeof *cpts);
    char *word = wgllm_malloc_array((uint64_t)len * 4 + 8, 1);
    if (!cpts || !word) { free(cpts); free(word); return false; }
    size_t n = wgllm_unicode_decode(text, len, cpts);
    size_t wl = 3;
    memcpy(word, "\xe2\x96\x81", 3);
    for (size_t i = 0; i <= n; i++) {
        uint32_t c = i < n ? wgllm_unicode_nfd_first(cpts[i]) : ' ';
        uint32_t f = wgllm_unicode_flags(c);
        bool alone = (f & WGLLM_UCF_PUNCTUATION) || (c < 0x7F && (f & WGLLM_UCF_SYMBOL)) || wpm_is_chinese(c);
        if ((f & WGLLM_UCF_WHITESPACE) || alone) {
            if (wl > 3) wpm_word(v, word, wl, out);
            wl = 3;
        }
        if (f & WGLLM_UCF_WHITESPACE) continue;
        if (c == 0 || c == 0xFFFD || (f & WGLLM_UCF_CONTROL)) continue;
        wl += (size_t)wgllm_unicode_encode(wgllm_unicode_tolower(c), word + wl);
        if (alone) {
            wpm_word(v, word, wl, out);
            wl = 3;
        }
    }
    free(cpts);
    free(word);
    return !out->oom;
}

bool wgllm_vocab_wpm_tokenize(const struct wgllm_vocab *v, const char *text, const struct wgllm_frags *fr,
                              bool add_special, struct ids *out) {
    bool ok = true;
    if (add_special && v->add_bos && v->bos >= 0) ids_push(out, v->bos);
    for (size_t i = 0; ok && i < fr->n; i++) {
        if (fr->v[i].token >= 0) ids_push(out, fr->v[i].token);
        else ok = wpm_text(v, text + fr->v[i].off, fr->v[i].len, out);
    }
    if (ok && add_special && v->add_sep && v->sep >= 0) ids_push(out, v->sep);
    return ok;
}
