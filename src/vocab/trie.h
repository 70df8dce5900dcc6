/*
 * trie.h - a byte trie over a set of keys, with Aho-Corasick links: what
 * lets the tokenizers look text up by prefix instead of hashing every
 * candidate length. WordPiece walks it for the longest token at a position
 * (one step per byte, not one hash of each length); the special-token
 * partition runs the automaton once over the text to find every special
 * token in it (time linear in the text plus the matches, however many
 * special tokens the vocabulary has).
 *
 * Nodes are numbered from 0 (the root) in breadth-first order; a node's
 * edges are sorted by byte. Keys are identified by their index in the
 * array given to wgllm_trie_init; an empty key is ignored.
 */
#ifndef WGLLM_VOCAB_TRIE_H
#define WGLLM_VOCAB_TRIE_H

#include "base/base.h"

#define WGLLM_TRIE_NONE UINT32_MAX

struct wgllm_trie {
    uint32_t n_nodes;
    uint32_t *edge_begin; /* n_nodes + 1: node u's edges are [edge_begin[u], edge_begin[u + 1]) */
    uint8_t *edge_byte;
    uint32_t *edge_child;
    int32_t *key;      /* the lowest key index that ends at the node, or -1 */
    int32_t *key_next; /* per key: the next higher key index with the same text, or -1 */
    uint32_t *depth;   /* bytes from the root */
    /* with links only */
    uint32_t *fail; /* the node of the longest proper suffix that is in the trie */
    uint32_t *out;  /* the nearest node on the fail chain with a key, or 0 (the root: none) */
};

/* Builds the trie of n keys (texts[i], lens[i] bytes); links: also the
 * Aho-Corasick fail and output links. false when out of memory (the trie
 * is then empty). */
bool wgllm_trie_init(struct wgllm_trie *t, const char *const *texts, const uint32_t *lens, int32_t n, bool links);
void wgllm_trie_free(struct wgllm_trie *t);

/* The child of node u by byte c, or WGLLM_TRIE_NONE. */
static inline uint32_t wgllm_trie_child(const struct wgllm_trie *t, uint32_t u, uint8_t c) {
    uint32_t lo = t->edge_begin[u], hi = t->edge_begin[u + 1];
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (t->edge_byte[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->edge_begin[u + 1] && t->edge_byte[lo] == c ? t->edge_child[lo] : WGLLM_TRIE_NONE;
}

/* The automaton's move from node u on byte c (needs links): the longest
 * suffix of (u's text + c) that is a node. */
static inline uint32_t wgllm_trie_step(const struct wgllm_trie *t, uint32_t u, uint8_t c) {
    for (;;) {
        const uint32_t v = wgllm_trie_child(t, u, c);
        if (v != WGLLM_TRIE_NONE) return v;
        if (u == 0) return 0;
        u = t->fail[u];
    }
}

#endif
