/*
 * merge.h - the merge loop of SentencePiece and byte-level BPE: a word
 * starts as its UTF-8 characters, and the adjacent pair with the best
 * priority (lowest key; ties go to the leftmost pair) is merged until no
 * pair has a priority. Which pairs exist and what they are worth is the
 * tokenizer's business (a callback); this file keeps the symbols and the
 * queue of candidate pairs, in time O(n log n) at worst and close to O(n)
 * on the inputs that hurt a plain heap (a 32 MiB "word" of one repeated
 * character, which no pre-tokenizer splits), in memory linear in n.
 */
#ifndef WGLLM_VOCAB_MERGE_H
#define WGLLM_VOCAB_MERGE_H

#include "base/base.h"

/* The key of a pair that cannot merge. */
#define WGLLM_MERGE_NONE UINT32_MAX

/* The priority of merging the symbols text[a, b) and text[b, c): a key
 * (lower merges first), or WGLLM_MERGE_NONE. */
typedef uint32_t (*wgllm_merge_key_fn)(const void *ctx, const char *text, uint32_t a, uint32_t b, uint32_t c);

struct wgllm_merge_node;
struct wgllm_merge_run;

/* Reusable state; zero-initialise, free with wgllm_merge_free. */
struct wgllm_merge {
    /* per symbol */
    uint32_t *off;        /* where its text starts */
    int32_t *prev, *next; /* the live symbols as a list; -1 ends it */
    uint32_t *cur;        /* key of the pair it starts now, or WGLLM_MERGE_NONE */
    size_t cap_sym;
    uint32_t len; /* of the text of the last run */
    /* the queue (merge.c) */
    struct wgllm_merge_node *node;
    size_t n_node, cap_node;
    uint32_t free_node;
    struct wgllm_merge_run *run;
    size_t n_run, cap_run;
    uint32_t *run_slot; /* key -> run index + 1, open addressing */
    size_t run_mask;
    uint32_t *rheap; /* runs with entries, by their first entry */
    size_t n_rheap, cap_rheap;
    uint64_t seed; /* of the run table's hash (random, from base.h) */
    uint64_t *heap; /* entries that came out of order: key << 32 | left */
    size_t n_heap, cap_heap;
    bool oom;
};

/* Splits text[0, len) (len > 0) into characters (a lead byte's length, cut
 * at the end) and merges. False when out of memory, or when the word has
 * 2^31 bytes or more (sizes are 32-bit here). */
bool wgllm_merge_run(struct wgllm_merge *m, const char *text, size_t len, wgllm_merge_key_fn key,
                     const void *ctx);
/* The symbols after a run, in order: `for (i = 0; i >= 0; i = m->next[i])`,
 * each spanning [wgllm_merge_begin(m, i), wgllm_merge_end(m, i)). */
static inline uint32_t wgllm_merge_begin(const struct wgllm_merge *m, int32_t i) { return m->off[i]; }
static inline uint32_t wgllm_merge_end(const struct wgllm_merge *m, int32_t i) {
    return m->next[i] >= 0 ? m->off[m->next[i]] : m->len;
}
void wgllm_merge_free(struct wgllm_merge *m);

#endif
