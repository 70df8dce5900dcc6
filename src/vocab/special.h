/*
 * special.h - splitting text at special tokens (llama.cpp's
 * tokenizer_st_partition), for the tokenizers of vocab.c.
 *
 * The rule is llama.cpp's: special tokens are taken in priority order
 * (longest text first), and each one claims, left to right, every
 * occurrence that lies wholly in text not yet claimed; lstrip/rstrip tokens
 * also swallow the whitespace beside them. llama.cpp searches the text once
 * per special token (time: specials x text, 300 x the prompt for Qwen, 6k x
 * for Gemma); here one Aho-Corasick pass finds every occurrence, so the time
 * is linear in the text plus the occurrences, whatever the vocabulary.
 */
#ifndef WGLLM_VOCAB_SPECIAL_H
#define WGLLM_VOCAB_SPECIAL_H

#include "vocab/trie.h"
#include "vocab/vocab.h"

/* One special token, by priority (index 0 first). */
struct wgllm_special {
    int32_t id;
    uint32_t len;
    bool control; /* control or unknown: matched only with parse_special */
    bool lstrip, rstrip;
};

struct wgllm_special_set {
    struct wgllm_special *tok;
    int32_t n;
    struct wgllm_trie trie; /* keys: the indices of tok */
};

/* tok[0..n) are copied; texts[i] is tok[i]'s text. false when out of memory. */
bool wgllm_special_set_init(struct wgllm_special_set *s, const struct wgllm_special *tok, const char *const *texts,
                            int32_t n);
void wgllm_special_set_free(struct wgllm_special_set *s);

/* A piece of the partitioned text: a special token, or raw text. */
struct wgllm_frag {
    int32_t token; /* -1: raw text [off, off + len) */
    size_t off, len;
};

struct wgllm_frags {
    struct wgllm_frag *v;
    size_t n, cap;
    bool oom;
};

/* Splits text[0, len) into *out (zeroed first; free out->v): control tokens
 * only with parse_special, and none where it overlaps one of the sorted,
 * disjoint `plain` spans. false when out of memory. */
bool wgllm_special_partition(const struct wgllm_special_set *s, const char *text, size_t len, bool parse_special,
                             const struct wgllm_text_span *plain, size_t n_plain, struct wgllm_frags *out);

#endif
