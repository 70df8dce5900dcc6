/*
 * trie.c - builds the byte trie of trie.h: the keys are sorted, laid out
 * depth-first (each key adds the nodes past its common prefix with the
 * previous one), then renumbered breadth-first so that the Aho-Corasick
 * fail link of every node points to a node already linked.
 */
#include "vocab/trie.h"

#include <stdlib.h>
#include <string.h>

struct key_ref {
    const char *text;
    uint32_t len;
    int32_t index;
};

static int cmp_key(const void *a, const void *b) {
    const struct key_ref *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = n ? memcmp(x->text, y->text, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void wgllm_trie_free(struct wgllm_trie *t) {
    free(t->edge_begin);
    free(t->edge_byte);
    free(t->edge_child);
    free(t->key);
    free(t->key_next);
    free(t->depth);
    free(t->fail);
    free(t->out);
    memset(t, 0, sizeof *t);
}

bool wgllm_trie_init(struct wgllm_trie *t, const char *const *texts, const uint32_t *lens, int32_t n, bool links) {
    memset(t, 0, sizeof *t);
    if (n < 0) return false;
    uint64_t total = 1;
    uint32_t max_len = 0;
    for (int32_t i = 0; i < n; i++) {
        total += lens[i];
        if (lens[i] > max_len) max_len = lens[i];
    }
    if (total >= INT32_MAX) return false; /* node ids are 32-bit */
    const uint32_t cap = (uint32_t)total;

    struct key_ref *keys = wgllm_malloc_array((uint64_t)n + 1, sizeof *keys);
    /* depth-first layout */
    uint32_t *parent = wgllm_malloc_array(cap, sizeof *parent);
    uint8_t *byte = wgllm_malloc_array(cap, 1);
    uint32_t *dfs_depth = wgllm_malloc_array(cap, sizeof *dfs_depth);
    int32_t *dfs_key = wgllm_malloc_array(cap, sizeof *dfs_key);
    uint32_t *path = wgllm_malloc_array((uint64_t)max_len + 1, sizeof *path);
    /* children lists, then the breadth-first order */
    uint32_t *n_child = wgllm_calloc_array((uint64_t)cap + 1, sizeof *n_child);
    uint32_t *child = wgllm_malloc_array(cap, sizeof *child);
    uint32_t *order = wgllm_malloc_array(cap, sizeof *order);
    uint32_t *new_id = wgllm_malloc_array(cap, sizeof *new_id);
    uint32_t *bfs_parent = wgllm_malloc_array(cap, sizeof *bfs_parent);
    bool ok = keys && parent && byte && dfs_depth && dfs_key && path && n_child && child && order && new_id && bfs_parent;
    t->key_next = wgllm_malloc_array((uint64_t)n + 1, sizeof *t->key_next);
    ok = ok && t->key_next;

    uint32_t nodes = 1;
    if (ok) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) {
            t->key_next[i] = -1;
            if (lens[i] > 0) keys[m++] = (struct key_ref){texts[i], lens[i], i};
        }
        if (m) qsort(keys, (size_t)m, sizeof *keys, cmp_key);
        parent[0] = 0;
        byte[0] = 0;
        dfs_depth[0] = 0;
        dfs_key[0] = -1;
        path[0] = 0;
        const struct key_ref *prev = NULL;
        for (int32_t k = 0; k < m; k++) {
            const struct key_ref *cur = &keys[k];
            uint32_t lcp = 0;
            if (prev) {
                const uint32_t lim = prev->len < cur->len ? prev->len : cur->len;
                while (lcp < lim && prev->text[lcp] == cur->text[lcp]) lcp++;
                if (lcp == cur->len && prev->len == cur->len) { /* the same text: a later index */
                    t->key_next[prev->index] = cur->index;
                    prev = cur;
                    continue;
                }
            }
            uint32_t u = path[lcp];
            for (uint32_t d = lcp; d < cur->len; d++) {
                const uint32_t v = nodes++;
                parent[v] = u;
                byte[v] = (uint8_t)cur->text[d];
                dfs_depth[v] = d + 1;
                dfs_key[v] = -1;
                path[d + 1] = v;
                u = v;
            }
            dfs_key[u] = cur->index;
            prev = cur;
        }

        /* children in depth-first order are sorted by byte */
        for (uint32_t v = 1; v < nodes; v++) n_child[parent[v] + 1]++;
        for (uint32_t u = 0; u < nodes; u++) n_child[u + 1] += n_child[u];
        for (uint32_t u = 0; u < nodes; u++) new_id[u] = n_child[u]; /* new_id: the fill cursor for now */
        for (uint32_t v = 1; v < nodes; v++) child[new_id[parent[v]]++] = v;

        uint32_t head = 0, tail = 1;
        order[0] = 0;
        while (head < tail) {
            const uint32_t u = order[head++];
            for (uint32_t e = n_child[u]; e < n_child[u + 1]; e++) order[tail++] = child[e];
        }
        for (uint32_t i = 0; i < nodes; i++) new_id[order[i]] = i;

        t->n_nodes = nodes;
        t->edge_begin = wgllm_malloc_array((uint64_t)nodes + 1, sizeof *t->edge_begin);
        t->edge_byte = wgllm_malloc_array(nodes, 1);
        t->edge_child = wgllm_malloc_array(nodes, sizeof *t->edge_child);
        t->key = wgllm_malloc_array(nodes, sizeof *t->key);
        t->depth = wgllm_malloc_array(nodes, sizeof *t->depth);
        ok = t->edge_begin && t->edge_byte && t->edge_child && t->key && t->depth;
        if (ok && links) {
            t->fail = wgllm_malloc_array(nodes, sizeof *t->fail);
            t->out = wgllm_malloc_array(nodes, sizeof *t->out);
            ok = t->fail && t->out;
        }
    }
    if (ok) {
        uint32_t e = 0;
        for (uint32_t i = 0; i < nodes; i++) {
            const uint32_t u = order[i];
            t->edge_begin[i] = e;
            t->key[i] = dfs_key[u];
            t->depth[i] = dfs_depth[u];
            for (uint32_t c = n_child[u]; c < n_child[u + 1]; c++, e++) {
                t->edge_byte[e] = byte[child[c]];
                t->edge_child[e] = new_id[child[c]];
                bfs_parent[new_id[child[c]]] = i;
            }
        }
        t->edge_begin[nodes] = e;
        if (links) {
            t->fail[0] = 0;
            t->out[0] = 0;
            for (uint32_t i = 1; i < nodes; i++) {
                const uint32_t p = bfs_parent[i];
                const uint8_t c = byte[order[i]];
                const uint32_t f = p == 0 ? 0 : wgllm_trie_step(t, t->fail[p], c);
                t->fail[i] = f;
                t->out[i] = t->key[f] >= 0 ? f : t->out[f];
            }
        }
    }
    free(keys);
    free(parent);
    free(byte);
    free(dfs_depth);
    free(dfs_key);
    free(path);
    free(n_child);
    free(child);
    free(order);
    free(new_id);
    free(bfs_parent);
    if (!ok) wgllm_trie_free(t);
    return ok;
}
