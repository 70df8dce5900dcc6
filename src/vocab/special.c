/*
 * special.c - the special-token partition of special.h.
 *
 * One Aho-Corasick pass counts the occurrences of each special token
 * (overlapping ones included). The tokens are then taken in priority order,
 * in groups whose occurrences fit a buffer the size of the text: one more
 * pass collects a group's occurrences, sorted by token then position, and
 * each is claimed if every byte of it is still free (a bitmap). So memory
 * stays linear in the text, and time is linear in the text times the
 * number of passes, which only grows when special tokens end inside each
 * other (Gemma's runs of spaces: about 30 per byte).
 */
#include "vocab/special.h"
#include "base/strbuf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

bool wgllm_special_set_init(struct wgllm_special_set *s, const struct wgllm_special *tok, const char *const *texts,
                            int32_t n) {
    memset(s, 0, sizeof *s);
    s->tok = wgllm_malloc_array((uint64_t)n + 1, sizeof *s->tok);
    uint32_t *lens = wgllm_malloc_array((uint64_t)n + 1, sizeof *lens);
    bool ok = s->tok && lens;
    if (ok) {
        for (int32_t i = 0; i < n; i++) {
            s->tok[i] = tok[i];
            lens[i] = tok[i].len;
        }
        s->n = n;
        ok = wgllm_trie_init(&s->trie, texts, lens, n, true);
    }
    free(lens);
    if (!ok) wgllm_special_set_free(s);
    return ok;
}

void wgllm_special_set_free(struct wgllm_special_set *s) {
    free(s->tok);
    wgllm_trie_free(&s->trie);
    memset(s, 0, sizeof *s);
}

static void frags_push(struct wgllm_frags *f, struct wgllm_frag x) {
    if (f->n == f->cap && !wgllm_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v)) {
        f->oom = true;
        return;
    }
    f->v[f->n++] = x;
}

static bool c_isspace(char c) { return (unsigned char)c < 0x80 && isspace((unsigned char)c); }

/* Whether [off, off + n) overlaps one of the sorted, disjoint spans. */
static bool overlaps(const struct wgllm_text_span *sp, size_t n_sp, size_t off, size_t n) {
    size_t lo = 0, hi = n_sp; /* the first span that ends after off */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sp[mid].off + sp[mid].len > off) hi = mid;
        else lo = mid + 1;
    }
    return lo < n_sp && sp[lo].off < off + n;
}

/* the claimed bytes: tokens and the whitespace they stripped */
static bool bit(const uint64_t *b, size_t i) { return b[i >> 6] >> (i & 63) & 1; }
static void set_bit(uint64_t *b, size_t i) { b[i >> 6] |= (uint64_t)1 << (i & 63); }

static bool range_free(const uint64_t *b, size_t p, size_t n) {
    size_t i = p;
    const size_t end = p + n;
    for (; i < end && (i & 63); i++)
        if (bit(b, i)) return false;
    for (; i + 64 <= end; i += 64)
        if (b[i >> 6]) return false;
    for (; i < end; i++)
        if (bit(b, i)) return false;
    return true;
}

struct claim {
    uint32_t pos;
    int32_t k; /* index into the set */
};

static int cmp_claim(const void *a, const void *b) {
    const struct claim *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

struct claims {
    struct claim *v;
    size_t n, cap;
};

static bool claims_push(struct claims *c, struct claim x) {
    if (c->n == c->cap && !wgllm_grow((void **)&c->v, &c->cap, c->n + 1, sizeof *c->v)) return false;
    c->v[c->n++] = x;
    return true;
}

static bool eligible(const struct wgllm_special_set *s, int32_t k, bool parse_special) {
    return parse_special || !s->tok[k].control;
}

/* The text frags of [a, b): the free bytes there, as runs. */
static void push_text(struct wgllm_frags *out, const uint64_t *gone, size_t a, size_t b) {
    while (a < b) {
        while (a < b && bit(gone, a)) a++;
        size_t e = a;
        while (e < b && !bit(gone, e)) e++;
        if (e > a) frags_push(out, (struct wgllm_frag){-1, a, e - a});
        a = e;
    }
}

bool wgllm_special_partition(const struct wgllm_special_set *s, const char *text, size_t len, bool parse_special,
                             const struct wgllm_text_span *plain, size_t n_plain, struct wgllm_frags *out) {
    memset(out, 0, sizeof *out);
    if (len == 0) return true;
    const struct wgllm_trie *t = &s->trie;
    uint32_t *cnt = NULL;
    uint64_t total = 0;
    if (t->n_nodes > 1) {
        uint32_t u = 0;
        for (size_t i = 0; i < len; i++) {
            u = wgllm_trie_step(t, u, (uint8_t)text[i]);
            for (uint32_t m = t->key[u] >= 0 ? u : t->out[u]; m; m = t->out[m])
                for (int32_t k = t->key[m]; k >= 0; k = t->key_next[k]) {
                    if (!eligible(s, k, parse_special)) continue;
                    if (!cnt && !(cnt = wgllm_calloc_array((uint64_t)s->n, sizeof *cnt))) return false;
                    cnt[k]++;
                    total++;
                }
        }
    }
    if (total == 0) { /* the common case: no special token in the text */
        frags_push(out, (struct wgllm_frag){-1, 0, len});
        return !out->oom;
    }

    const uint64_t budget = len > 4096 ? len : 4096;
    const uint64_t n_pos = total < budget ? total : budget;
    uint32_t *pos = wgllm_malloc_array(n_pos, sizeof *pos);
    uint32_t *next = wgllm_malloc_array((uint64_t)s->n, sizeof *next); /* fill cursor per token */
    uint64_t *gone = wgllm_calloc_array(((uint64_t)len + 63) / 64, sizeof *gone);
    struct claims cl = {0};
    bool ok = pos && next && gone;
    for (int32_t g0 = 0, g1; ok && g0 < s->n; g0 = g1) {
        uint64_t sum = 0;
        for (g1 = g0; g1 < s->n && (g1 == g0 || sum + cnt[g1] <= budget); g1++) sum += cnt[g1];
        if (sum == 0) continue;
        uint32_t o = 0;
        for (int32_t k = g0; k < g1; k++) {
            next[k] = o;
            o += cnt[k];
        }
        uint32_t u = 0;
        for (size_t i = 0; i < len; i++) {
            u = wgllm_trie_step(t, u, (uint8_t)text[i]);
            for (uint32_t m = t->key[u] >= 0 ? u : t->out[u]; m; m = t->out[m])
                for (int32_t k = t->key[m]; k >= 0; k = t->key_next[k])
                    if (k >= g0 && k < g1 && eligible(s, k, parse_special))
                        pos[next[k]++] = (uint32_t)(i + 1 - s->tok[k].len);
        }
        for (int32_t k = g0; ok && k < g1; k++) {
            const struct wgllm_special *sp = &s->tok[k];
            for (uint32_t j = next[k] - cnt[k]; ok && j < next[k]; j++) {
                const size_t p = pos[j];
                if (sp->control && n_plain && overlaps(plain, n_plain, p, sp->len)) continue; /* text there */
                if (!range_free(gone, p, sp->len)) continue;
                for (size_t q = p; q < p + sp->len; q++) set_bit(gone, q);
                ok = claims_push(&cl, (struct claim){(uint32_t)p, k});
                if (sp->lstrip)
                    for (size_t q = p; q > 0 && !bit(gone, q - 1) && c_isspace(text[q - 1]); q--) set_bit(gone, q - 1);
                if (sp->rstrip)
                    for (size_t q = p + sp->len; q < len && !bit(gone, q) && c_isspace(text[q]); q++) set_bit(gone, q);
            }
        }
    }
    if (ok) {
        if (cl.n) qsort(cl.v, cl.n, sizeof *cl.v, cmp_claim);
        size_t cur = 0;
        for (size_t i = 0; i < cl.n; i++) {
            push_text(out, gone, cur, cl.v[i].pos);
            frags_push(out, (struct wgllm_frag){s->tok[cl.v[i].k].id, 0, 0});
            cur = cl.v[i].pos + s->tok[cl.v[i].k].len;
        }
        push_text(out, gone, cur, len);
        ok = !out->oom;
    }
    free(cnt);
    free(pos);
    free(next);
    free(gone);
    free(cl.v);
    return ok;
}
