/*
 * merge.c - the pairwise merge loop of SentencePiece and BPE (merge.h).
 *
 * The order is llama.cpp's: pop the candidate pair with the lowest
 * (key, left position); a popped pair that no longer exists is skipped (a
 * symbol remembers the key of the pair it starts now, `cur`, and an entry
 * whose key differs is stale). Popping the minimum over all entries and
 * skipping the stale ones merges the same pairs in the same order as
 * popping the minimum over the pairs that exist, so the tokens are the same.
 *
 * The queue is not one binary heap, because on a long word a heap pays a
 * cache miss per level for every merge (on 8 MiB of one letter, half of
 * the time went to sifting). Entries of one key mostly arrive left to
 * right -- all the initial pairs do, and so do the pairs a sweep of merges
 * creates -- so each key has a *run*: a FIFO list of its entries in
 * increasing left position, and a small heap orders the runs by their
 * first entry. An entry that would
 * break its run's order goes to an ordinary heap instead, and the minimum
 * is the smaller of the two heaps' tops. Every step is O(1) on the inputs
 * that hurt, and O(log n) at worst.
 */
#include "vocab/merge.h"

#include "base/strbuf.h"
#include "vocab/unicode.h"

#define NIL UINT32_MAX

struct wgllm_merge_node {
    uint32_t left, next;
};

struct wgllm_merge_run {
    uint32_t key;
    uint32_t head, tail; /* nodes; NIL when the run is empty */
    uint32_t last;       /* left position of the last entry appended */
    uint32_t rpos;       /* index in rheap, or NIL */
    uint32_t slot;       /* index in run_slot */
};

static inline uint64_t entry(uint32_t key, uint32_t left) { return (uint64_t)key << 32 | left; }

/* Grows *p (of *cap elements) to hold at least `need`; false (and m->oom) when out of memory. */
static bool grow(struct wgllm_merge *m, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    if (wgllm_grow(p, cap, need, elem)) return true;
    m->oom = true;
    return false;
}

/* ---- the heap of out-of-order entries (4-ary min-heap of u64) ---------- */

static void heap_push(struct wgllm_merge *m, uint64_t e) {
    if (!grow(m, (void **)&m->heap, &m->cap_heap, m->n_heap + 1, sizeof *m->heap)) return;
    size_t i = m->n_heap++;
    while (i > 0 && m->heap[(i - 1) / 4] > e) {
        m->heap[i] = m->heap[(i - 1) / 4];
        i = (i - 1) / 4;
    }
    m->heap[i] = e;
}

static void heap_pop(struct wgllm_merge *m) {
    const uint64_t e = m->heap[--m->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 4 * i + 1, best = i;
        uint64_t bv = e;
        for (size_t k = c; k < c + 4 && k < m->n_heap; k++)
            if (m->heap[k] < bv) {
                best = k;
                bv = m->heap[k];
            }
        if (best == i) break;
        m->heap[i] = bv;
        i = best;
    }
    if (m->n_heap) m->heap[i] = e;
}

/* ---- runs and the heap of runs ---------------------------------------- */

static uint64_t run_first(const struct wgllm_merge *m, uint32_t r) {
    return entry(m->run[r].key, m->node[m->run[r].head].left);
}

static void rheap_place(struct wgllm_merge *m, size_t i, uint32_t r) {
    m->rheap[i] = r;
    m->run[r].rpos = (uint32_t)i;
}

static void rheap_up(struct wgllm_merge *m, size_t i, uint32_t r) {
    const uint64_t e = run_first(m, r);
    while (i > 0 && run_first(m, m->rheap[(i - 1) / 4]) > e) {
        rheap_place(m, i, m->rheap[(i - 1) / 4]);
        i = (i - 1) / 4;
    }
    rheap_place(m, i, r);
}

static void rheap_down(struct wgllm_merge *m, size_t i, uint32_t r) {
    const uint64_t e = run_first(m, r);
    for (;;) {
        size_t c = 4 * i + 1, best = i;
        uint64_t bv = e;
        for (size_t k = c; k < c + 4 && k < m->n_rheap; k++) {
            uint64_t f = run_first(m, m->rheap[k]);
            if (f < bv) {
                best = k;
                bv = f;
            }
        }
        if (best == i) break;
        rheap_place(m, i, m->rheap[best]);
        i = best;
    }
    rheap_place(m, i, r);
}

/* splitmix64 under a per-state seed: keys come from the file (SentencePiece
 * scores), so the run table is not indexed by them directly */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t run_get(struct wgllm_merge *m, uint32_t key, uint64_t seed) {
    if (2 * (m->n_run + 1) > m->run_mask + 1) { /* keep the table at most half full */
        size_t cap = m->run_mask ? 2 * (m->run_mask + 1) : 64;
        uint32_t *slots = wgllm_calloc_array(cap, sizeof *slots);
        if (!slots) {
            m->oom = true;
            return NIL;
        }
        free(m->run_slot);
        m->run_slot = slots;
        m->run_mask = cap - 1;
        for (size_t r = 0; r < m->n_run; r++) {
            size_t s = mix(m->run[r].key ^ seed) & m->run_mask;
            while (slots[s]) s = (s + 1) & m->run_mask;
            slots[s] = (uint32_t)r + 1;
            m->run[r].slot = (uint32_t)s;
        }
    }
    size_t s = mix(key ^ seed) & m->run_mask;
    for (; m->run_slot[s]; s = (s + 1) & m->run_mask)
        if (m->run[m->run_slot[s] - 1].key == key) return m->run_slot[s] - 1;
    if (!grow(m, (void **)&m->run, &m->cap_run, m->n_run + 1, sizeof *m->run)) return NIL;
    if (!grow(m, (void **)&m->rheap, &m->cap_rheap, m->n_run + 1, sizeof *m->rheap)) return NIL;
    const uint32_t r = (uint32_t)m->n_run++;
    m->run[r] = (struct wgllm_merge_run){.key = key, .head = NIL, .tail = NIL, .rpos = NIL, .slot = (uint32_t)s};
    m->run_slot[s] = r + 1;
    return r;
}

static void push(struct wgllm_merge *m, uint32_t key, uint32_t left, uint64_t seed) {
    const uint32_t r = run_get(m, key, seed);
    if (r == NIL) return;
    struct wgllm_merge_run *R = &m->run[r];
    if (R->head != NIL && left <= R->last) { /* would break the run's order */
        heap_push(m, entry(key, left));
        return;
    }
    uint32_t n = m->free_node;
    if (n != NIL) {
        m->free_node = m->node[n].next;
    } else {
        if (!grow(m, (void **)&m->node, &m->cap_node, m->n_node + 1, sizeof *m->node)) return;
        n = (uint32_t)m->n_node++;
    }
    m->node[n] = (struct wgllm_merge_node){left, NIL};
    R = &m->run[r];
    R->last = left;
    if (R->head == NIL) {
        R->head = R->tail = n;
        rheap_up(m, m->n_rheap++, r);
    } else {
        m->node[R->tail].next = n;
        R->tail = n;
    }
}

/* Takes the lowest entry; false when the queue is empty. */
static bool pop(struct wgllm_merge *m, uint64_t *out) {
    const bool have_run = m->n_rheap > 0, have_heap = m->n_heap > 0;
    if (!have_run && !have_heap) return false;
    const uint64_t a = have_run ? run_first(m, m->rheap[0]) : UINT64_MAX;
    if (have_heap && (!have_run || m->heap[0] < a)) {
        *out = m->heap[0];
        heap_pop(m);
        return true;
    }
    *out = a;
    const uint32_t r = m->rheap[0];
    struct wgllm_merge_run *R = &m->run[r];
    const uint32_t h = R->head;
    R->head = m->node[h].next;
    m->node[h].next = m->free_node;
    m->free_node = h;
    if (R->head != NIL) {
        rheap_down(m, 0, r);
    } else {
        R->tail = NIL;
        R->rpos = NIL;
        const uint32_t last = m->rheap[--m->n_rheap];
        if (m->n_rheap) rheap_down(m, 0, last);
    }
    return true;
}

/* ---- the loop ------------------------------------------------------------ */

/* (Re)computes the pair that symbol `left` starts and queues it. */
static void set_pair(struct wgllm_merge *m, const char *text, int32_t left, wgllm_merge_key_fn key,
                     const void *ctx, uint64_t seed) {
    if (left < 0) return;
    const int32_t right = m->next[left];
    uint32_t k = WGLLM_MERGE_NONE;
    if (right >= 0) k = key(ctx, text, m->off[left], m->off[right], wgllm_merge_end(m, right));
    m->cur[left] = k;
    if (k != WGLLM_MERGE_NONE) push(m, k, (uint32_t)left, seed);
}

bool wgllm_merge_run(struct wgllm_merge *m, const char *text, size_t len, wgllm_merge_key_fn key,
                     const void *ctx) {
    WGLLM_ASSERT(len > 0);
    if (len > (size_t)INT32_MAX) return false;
    size_t n = 0; /* symbols: one per character */
    for (size_t off = 0; off < len; n++) off += WGLLM_MIN(wgllm_unicode_len_utf8(text[off]), len - off);
    size_t cap = m->cap_sym;
    if (n > cap) {
        free(m->off);
        free(m->prev);
        free(m->next);
        free(m->cur);
        cap = WGLLM_MAX(n, cap + cap / 2);
        m->off = wgllm_malloc_array(cap, sizeof *m->off);
        m->prev = wgllm_malloc_array(cap, sizeof *m->prev);
        m->next = wgllm_malloc_array(cap, sizeof *m->next);
        m->cur = wgllm_malloc_array(cap, sizeof *m->cur);
        m->cap_sym = cap;
        if (!m->off || !m->prev || !m->next || !m->cur) {
            wgllm_merge_free(m);
            return false;
        }
    }
    /* empty the queue of the last word: only the table slots it used */
    for (size_t r = 0; r < m->n_run; r++) m->run_slot[m->run[r].slot] = 0;
    m->n_run = m->n_rheap = m->n_heap = m->n_node = 0;
    m->free_node = NIL;
    m->oom = false;
    m->len = (uint32_t)len;
    if (!m->seed) m->seed = wgllm_hash_key_new().k0 | 1;
    const uint64_t seed = m->seed;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        m->off[i] = (uint32_t)off;
        m->prev[i] = (int32_t)i - 1;
        m->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        m->cur[i] = WGLLM_MERGE_NONE;
        off += WGLLM_MIN(wgllm_unicode_len_utf8(text[off]), len - off);
    }
    if (n == 2) { /* the common short word: one candidate, no queue */
        if (key(ctx, text, 0, m->off[1], m->len) != WGLLM_MERGE_NONE) m->next[0] = -1;
        return true;
    }
    for (size_t i = 0; i + 1 < n; i++) set_pair(m, text, (int32_t)i, key, ctx, seed);
    uint64_t e;
    while (!m->oom && pop(m, &e)) {
        const int32_t left = (int32_t)(uint32_t)e;
        if (m->cur[left] != (uint32_t)(e >> 32)) continue; /* stale: that pair changed since */
        const int32_t right = m->next[left];
        /* right joins left: it leaves the list, and the pair it started with it */
        m->cur[right] = WGLLM_MERGE_NONE;
        m->next[left] = m->next[right];
        if (m->next[right] >= 0) m->prev[m->next[right]] = left;
        set_pair(m, text, m->prev[left], key, ctx, seed);
        set_pair(m, text, left, key, ctx, seed);
    }
    return !m->oom;
}

void wgllm_merge_free(struct wgllm_merge *m) {
    free(m->off);
    free(m->prev);
    free(m->next);
    free(m->cur);
    free(m->node);
    free(m->run);
    free(m->run_slot);
    free(m->rheap);
    free(m->heap);
    memset(m, 0, sizeof *m);
}
