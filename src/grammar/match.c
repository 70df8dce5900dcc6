/*
 * match.c - the grammar matcher (grammar.h): parse states, text and token
 * acceptance, and token masks.
 *
 * A parse position is a stack of flat element positions. Stacks are
 * interned nodes (top, below): equal stacks are the same id, pushing is
 * one lookup, and a state is a sorted list of ids, which is what lets a
 * state seen before find its mask in the cache. Expanding a stack to its
 * terminal-topped forms (through rule references and their alternatives)
 * uses a worklist and a visited mark per id, so a grammar's shape cannot
 * recurse on the C stack or expand one stack twice.
 *
 * The mask walks a byte trie of the token pieces depth first, carrying the
 * set of stacks after the bytes so far: a prefix shared by many tokens is
 * matched once, and a byte no stack accepts prunes every token below it.
 * Stacks the walk makes are "scratch": they live in a second table and are
 * dropped when the mask is done, so masks do not grow the state's memory.
 *
 * Semantics follow llama.cpp's matcher: a token is allowed when each of its
 * complete code points is accepted in turn and a trailing partial UTF-8
 * sequence could still match; an end-of-generation token when some parse is
 * complete; a token with an empty piece never.
 */
#include "grammar/grammar_internal.h"
#include "vocab/trie.h"

/* ---- the matcher's tables --------------------------------------------------- */

static bool is_end(uint32_t t) { return t == WGLLM_GELEM_END || t == WGLLM_GELEM_ALT; }
static bool is_char_start(uint32_t t) {
    return t == WGLLM_GELEM_CHAR || t == WGLLM_GELEM_CHAR_NOT || t == WGLLM_GELEM_ANY;
}
static bool is_token(uint32_t t) { return t == WGLLM_GELEM_TOKEN || t == WGLLM_GELEM_TOKEN_NOT; }

/* Does the class at p match code point c (llama.cpp's reading of a class). */
static bool match_slow(const struct wgllm_gelem *e, uint32_t p, uint32_t c) {
    const bool positive = e[p].type == WGLLM_GELEM_CHAR || e[p].type == WGLLM_GELEM_ANY;
    bool found = false;
    uint32_t q = p;
    do {
        if (e[q + 1].type == WGLLM_GELEM_RNG_UPPER) {
            found = found || (e[q].value <= c && c <= e[q + 1].value);
            q += 2;
        } else if (e[q].type == WGLLM_GELEM_ANY) {
            found = true;
            q += 1;
        } else {
            found = found || e[q].value == c;
            q += 1;
        }
    } while (e[q].type == WGLLM_GELEM_CHAR_ALT);
    return found == positive;
}

static void set_ascii_range(uint32_t *bits, uint32_t lo, uint32_t hi) {
    if (lo > hi || lo > 127) return;
    if (hi > 127) hi = 127;
    for (uint32_t c = lo; c <= hi; c++) bits[c >> 5] |= 1u << (c & 31);
}

/* The ASCII row of match_slow for the class at p, made one class item at a
 * time: asking match_slow 128 times walks the whole class per character,
 * which made preparing a schema's grammar (long [^"\\\x7F\x00-\x1F] classes)
 * most of the schema's compile time. */
static void fill_ascii(const struct wgllm_gelem *e, uint32_t p, uint32_t bits[4]) {
    const bool positive = e[p].type == WGLLM_GELEM_CHAR || e[p].type == WGLLM_GELEM_ANY;
    uint32_t q = p;
    do {
        if (e[q + 1].type == WGLLM_GELEM_RNG_UPPER) {
            set_ascii_range(bits, e[q].value, e[q + 1].value);
            q += 2;
        } else if (e[q].type == WGLLM_GELEM_ANY) {
            set_ascii_range(bits, 0, 127);
            q += 1;
        } else {
            set_ascii_range(bits, e[q].value, e[q].value);
            q += 1;
        }
    } while (e[q].type == WGLLM_GELEM_CHAR_ALT);
    if (!positive)
        for (int w = 0; w < 4; w++) bits[w] = ~bits[w];
}

void wgllm_grammar_unprepare(struct wgllm_grammar *g) {
    free(g->flat), free(g->rule_base), free(g->alt_begin), free(g->alts), free(g->after), free(g->ascii);
    g->flat = NULL, g->rule_base = NULL, g->alt_begin = NULL, g->alts = NULL, g->after = NULL, g->ascii = NULL;
}

bool wgllm_grammar_prepare(struct wgllm_grammar *g) {
    size_t n = 0, n_alts = 0;
    for (uint32_t i = 0; i < g->n_rules; i++) {
        n += g->rules[i].n;
        for (size_t k = 0; k < g->rules[i].n; k++) n_alts += is_end(g->rules[i].e[k].type);
    }
    if (n >= UINT32_MAX / 2) return false;
    g->n_flat = (uint32_t)n;
    g->flat = malloc((n + 1) * sizeof *g->flat);
    g->rule_base = malloc(((size_t)g->n_rules + 1) * sizeof *g->rule_base);
    g->alt_begin = malloc(((size_t)g->n_rules + 1) * sizeof *g->alt_begin);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    g->after = calloc(n + 1, sizeof *g->after);
    g->ascii = calloc(n + 1, sizeof *g->ascii);
    if (!g->flat || !g->rule_base || !g->alt_begin || !g->alts || !g->after || !g->ascii) {
        wgllm_grammar_unprepare(g);
        return false;
    }
    uint32_t at = 0, na = 0;
    for (uint32_t i = 0; i < g->n_rules; i++) {
        g->rule_base[i] = at;
        g->alt_begin[i] = na;
        g->alts[na++] = at;
        for (size_t k = 0; k < g->rules[i].n; k++) {
            const struct wgllm_gelem x = g->rules[i].e[k];
            g->flat[at + k] = x;
            if (x.type == WGLLM_GELEM_ALT) g->alts[na++] = at + (uint32_t)k + 1;
        }
        at += (uint32_t)g->rules[i].n;
    }
    g->rule_base[g->n_rules] = at;
    g->alt_begin[g->n_rules] = na;
    g->flat[at] = (struct wgllm_gelem){WGLLM_GELEM_END, 0};
    for (uint32_t p = 0; p < at; p++) {
        const uint32_t t = g->flat[p].type;
        if (is_token(t)) {
            g->after[p] = p + 1;
        } else if (is_char_start(t)) {
            uint32_t q = p;
            do q += g->flat[q + 1].type == WGLLM_GELEM_RNG_UPPER ? 2 : 1;
            while (g->flat[q].type == WGLLM_GELEM_CHAR_ALT);
            g->after[p] = q;
            fill_ascii(g->flat, p, g->ascii[p]);
        }
    }
    return true;
}

static inline bool match(const struct wgllm_grammar *g, uint32_t p, uint32_t c) {
    return c < 128 ? (g->ascii[p][c >> 5] >> (c & 31)) & 1 : match_slow(g->flat, p, c);
}

/* Could some completion of a partial UTF-8 sequence (value so far, n_remain
 * bytes to come) match the class at p? As llama.cpp answers it. */
static bool match_partial(const struct wgllm_gelem *e, uint32_t p, uint32_t value, int n_remain) {
    const bool positive = e[p].type == WGLLM_GELEM_CHAR || e[p].type == WGLLM_GELEM_ANY;
    if (n_remain < 0 || (n_remain == 1 && value < 2)) return false;
    uint32_t low = value << (n_remain * 6);
    const uint32_t high = low | ((1u << (n_remain * 6)) - 1);
    if (low == 0) low = n_remain == 2 ? 1u << 11 : n_remain == 3 ? 1u << 16 : low;
    uint32_t q = p;
    do {
        if (e[q + 1].type == WGLLM_GELEM_RNG_UPPER) {
            if (e[q].value <= high && low <= e[q + 1].value) return positive;
            q += 2;
        } else if (e[q].type == WGLLM_GELEM_ANY) {
            return true;
        } else {
            if (low <= e[q].value && e[q].value <= high) return positive;
            q += 1;
        }
    } while (e[q].type == WGLLM_GELEM_CHAR_ALT);
    return !positive;
}

/* One byte of UTF-8 into (value, n_remain): 1 a code point is complete (in
 * *value), 0 more bytes are needed, -1 invalid. */
static int utf8_step(uint32_t *value, int *n_remain, uint8_t b) {
    if (*n_remain > 0) {
        if ((b >> 6) != 2) return -1;
        *value = *value << 6 | (b & 0x3f);
        return --*n_remain == 0 ? 1 : 0;
    }
    static const int8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, 2, 2, 3, 4};
    const int l = b >= 0xf8 ? -1 : len[b >> 4]; /* 0xf8-0xff begin nothing */
    if (l < 0) return -1;
    if (l == 1) {
        *value = b;
        return b ? 1 : -1; /* a NUL never matches: llama.cpp's pieces end there */
    }
    *value = b & (0xff >> (l + 1));
    *n_remain = l - 1;
    return 0;
}

/* ---- interned stacks ---------------------------------------------------------- */

struct node {
    uint32_t top, below; /* flat position; the stack under it (0: the empty stack) */
};

struct table {
    uint32_t *slot; /* node ids; UINT32_MAX = empty */
    size_t n_slots, n_used;
};

struct idset {
    uint32_t *v;
    size_t n, cap;
};

struct cache_entry {
    uint64_t hash;
    uint32_t *ids;
    size_t n_ids;
    uint32_t pv;
    int pn;
    uint8_t *bits; /* n_tokens bits */
};

#define CACHE_ENTRIES 128

struct memo_slot {
    uint64_t key; /* stack << 21 | code point; UINT64_MAX = empty */
    uint32_t off, len; /* its successors in vals */
};

struct memo {
    struct memo_slot *slot;
    size_t n_slots, n_used;
    struct idset vals, one;
};

struct wgllm_grammar_state {
    const struct wgllm_grammar *g;
    struct node *nodes;
    size_t n_nodes, cap_nodes;
    struct table keep, scratch; /* the state's stacks; the ones a mask walk makes */
    bool in_scratch;
    uint64_t seed;
    /* visited marks for one expansion batch */
    uint32_t *mark;
    size_t cap_mark;
    uint32_t epoch;
    struct idset work;
    struct idset cur; /* the state: sorted stack ids */
    uint32_t pv;      /* a code point begun by the text so far */
    int pn;           /* its bytes still to come (0: none) */
    bool over;        /* a budget was exceeded; what */
    char over_msg[160];
    struct memo memo; /* successors per (stack, code point) during a mask walk */
    struct cache_entry cache[CACHE_ENTRIES];
    size_t cache_next;
    uint64_t hits;
    int32_t cache_tokens; /* n_tokens the cached masks are for */
};

static void over(struct wgllm_grammar_state *st, const char *what, uint32_t limit) {
    if (st->over) return;
    st->over = true;
    snprintf(st->over_msg, sizeof st->over_msg, "grammar: %s (more than %u)", what, limit);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t node_hash(const struct wgllm_grammar_state *st, uint32_t top, uint32_t below) {
    return (size_t)mix(((uint64_t)top << 32 | below) ^ st->seed);
}

static uint32_t find(const struct wgllm_grammar_state *st, const struct table *t, uint32_t top, uint32_t below) {
    if (!t->n_slots) return UINT32_MAX;
    for (size_t h = node_hash(st, top, below) & (t->n_slots - 1);; h = (h + 1) & (t->n_slots - 1)) {
        const uint32_t id = t->slot[h];
        if (id == UINT32_MAX) return UINT32_MAX;
        if (st->nodes[id].top == top && st->nodes[id].below == below) return id;
    }
}

static bool insert(struct wgllm_grammar_state *st, struct table *t, uint32_t id) {
    if ((t->n_used + 1) * 2 > t->n_slots) {
        const size_t ns = t->n_slots ? t->n_slots * 2 : 1024;
        uint32_t *slot = malloc(ns * sizeof *slot);
        if (!slot) return false;
        memset(slot, 0xff, ns * sizeof *slot);
        for (size_t i = 0; i < t->n_slots; i++) {
            const uint32_t x = t->slot[i];
            if (x == UINT32_MAX) continue;
            size_t h = node_hash(st, st->nodes[x].top, st->nodes[x].below) & (ns - 1);
            while (slot[h] != UINT32_MAX) h = (h + 1) & (ns - 1);
            slot[h] = x;
        }
        free(t->slot);
        t->slot = slot, t->n_slots = ns;
    }
    size_t h = node_hash(st, st->nodes[id].top, st->nodes[id].below) & (t->n_slots - 1);
    while (t->slot[h] != UINT32_MAX) h = (h + 1) & (t->n_slots - 1);
    t->slot[h] = id;
    t->n_used++;
    return true;
}

/* The stack `top` over `below`; UINT32_MAX when a budget or memory ran out. */
static uint32_t intern(struct wgllm_grammar_state *st, uint32_t top, uint32_t below) {
    uint32_t id = find(st, &st->keep, top, below);
    if (id == UINT32_MAX && st->in_scratch) id = find(st, &st->scratch, top, below);
    if (id != UINT32_MAX) return id;
    if (st->n_nodes >= st->g->params.max_nodes) {
        over(st, "the parse needs too many stacks (max_nodes)", st->g->params.max_nodes);
        return UINT32_MAX;
    }
    if (!wgllm_grow((void **)&st->nodes, &st->cap_nodes, st->n_nodes + 1, sizeof *st->nodes)) {
        over(st, "out of memory for stacks", (uint32_t)st->n_nodes);
        return UINT32_MAX;
    }
    id = (uint32_t)st->n_nodes++;
    st->nodes[id] = (struct node){top, below};
    if (!insert(st, st->in_scratch ? &st->scratch : &st->keep, id)) {
        st->n_nodes--;
        over(st, "out of memory for stacks", (uint32_t)st->n_nodes);
        return UINT32_MAX;
    }
    return id;
}

/* Drops the scratch stacks (newest first, so every probe chain stays whole while emptying). */
static void drop_scratch(struct wgllm_grammar_state *st, size_t keep_nodes) {
    struct table *t = &st->scratch;
    for (size_t id = st->n_nodes; id-- > keep_nodes;) {
        for (size_t h = node_hash(st, st->nodes[id].top, st->nodes[id].below) & (t->n_slots - 1);;
             h = (h + 1) & (t->n_slots - 1)) {
            if (t->slot[h] == id) {
                t->slot[h] = UINT32_MAX;
                break;
            }
        }
    }
    t->n_used = 0;
    st->n_nodes = keep_nodes;
}

static bool set_add(struct idset *s, uint32_t id) {
    if (!wgllm_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
    s->v[s->n++] = id;
    return true;
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sort_ids(struct idset *s) {
    if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, cmp_u32);
}

/* A new expansion batch: every id unvisited. */
/* Room for marks up to id `need` - 1; new marks are zero (never the current epoch). */
static bool grow_marks(struct wgllm_grammar_state *st, size_t need) {
    const size_t old = st->cap_mark;
    if (need <= old) return true;
    if (!wgllm_grow((void **)&st->mark, &st->cap_mark, need, sizeof *st->mark)) {
        over(st, "out of memory for stacks", (uint32_t)st->n_nodes);
        return false;
    }
    memset(st->mark + old, 0, (st->cap_mark - old) * sizeof *st->mark);
    return true;
}

static bool batch(struct wgllm_grammar_state *st) {
    if (!grow_marks(st, st->cap_nodes + 1)) return false;
    if (++st->epoch == 0) {
        memset(st->mark, 0, st->cap_mark * sizeof *st->mark);
        st->epoch = 1;
    }
    return true;
}

static bool visit(struct wgllm_grammar_state *st, uint32_t id) {
    if (!grow_marks(st, (size_t)id + 1)) return false;
    if (st->mark[id] == st->epoch) return false;
    st->mark[id] = st->epoch;
    return true;
}

/* Adds to out every terminal-topped (or empty) stack that stack s stands
 * for, expanding rule references at the top. Within one batch a stack is
 * expanded once, so out has no duplicates. false on a budget. */
static bool expand(struct wgllm_grammar_state *st, uint32_t s, struct idset *out) {
    const struct wgllm_grammar *g = st->g;
    if (!visit(st, s)) return !st->over;
    st->work.n = 0;
    if (!set_add(&st->work, s)) return over(st, "out of memory", 0), false;
    while (st->work.n) {
        const uint32_t x = st->work.v[--st->work.n];
        if (x == 0 || g->flat[st->nodes[x].top].type != WGLLM_GELEM_REF) {
            if (!set_add(out, x)) return over(st, "out of memory", 0), false;
            if (out->n > g->params.max_stacks) {
                over(st, "a state holds too many parses: the grammar is too ambiguous (max_stacks)", g->params.max_stacks);
                return false;
            }
            continue;
        }
        const uint32_t p = st->nodes[x].top, rule = g->flat[p].value;
        uint32_t below = st->nodes[x].below;
        if (!is_end(g->flat[p + 1].type) && (below = intern(st, p + 1, below)) == UINT32_MAX) return false;
        for (uint32_t a = g->alt_begin[rule]; a < g->alt_begin[rule + 1]; a++) {
            const uint32_t start = g->alts[a];
            const uint32_t y = is_end(g->flat[start].type) ? below : intern(st, start, below);
            if (y == UINT32_MAX) return false;
            if (visit(st, y) && !set_add(&st->work, y)) return over(st, "out of memory", 0), false;
            if (st->over) return false;
        }
    }
    return true;
}

/* out = the stacks of `in` after code point c (sorted). */
/* The stacks one stack s becomes after code point c, appended to out (its own batch). */
static bool step_one(struct wgllm_grammar_state *st, uint32_t s, uint32_t c, struct idset *out) {
    const struct wgllm_grammar *g = st->g;
    const uint32_t p = st->nodes[s].top;
    if (is_token(g->flat[p].type) || !match(g, p, c)) return true;
    const uint32_t q = g->after[p];
    uint32_t next = st->nodes[s].below;
    if (!is_end(g->flat[q].type) && (next = intern(st, q, next)) == UINT32_MAX) return false;
    return expand(st, next, out);
}

/* During a mask walk the same stack meets the same code point under many
 * trie nodes (every token with the same prefix class): its successors are
 * remembered per (stack, code point) for the walk. */
static bool memo_step(struct wgllm_grammar_state *st, uint32_t s, uint32_t c, struct idset *out) {
    struct memo *m = &st->memo;
    const uint64_t key = (uint64_t)s << 21 | c; /* code points are < 2^21 */
    if ((m->n_used + 1) * 2 > m->n_slots) {
        const size_t ns = m->n_slots ? m->n_slots * 2 : 4096;
        struct memo_slot *slot = malloc(ns * sizeof *slot);
        if (!slot) return over(st, "out of memory", 0), false;
        for (size_t i = 0; i < ns; i++) slot[i].key = UINT64_MAX;
        for (size_t i = 0; i < m->n_slots; i++) {
            if (m->slot[i].key == UINT64_MAX) continue;
            size_t h = (size_t)mix(m->slot[i].key ^ st->seed) & (ns - 1);
            while (slot[h].key != UINT64_MAX) h = (h + 1) & (ns - 1);
            slot[h] = m->slot[i];
        }
        free(m->slot);
        m->slot = slot, m->n_slots = ns;
    }
    size_t h = (size_t)mix(key ^ st->seed) & (m->n_slots - 1);
    while (m->slot[h].key != UINT64_MAX && m->slot[h].key != key) h = (h + 1) & (m->n_slots - 1);
    if (m->slot[h].key == UINT64_MAX) {
        const size_t off = m->vals.n;
        m->one.n = 0;
        if (!batch(st) || !step_one(st, s, c, &m->one)) return false;
        for (size_t i = 0; i < m->one.n; i++)
            if (!set_add(&m->vals, m->one.v[i])) return over(st, "out of memory", 0), false;
        if (m->vals.n > UINT32_MAX) return over(st, "out of memory", 0), false;
        m->slot[h] = (struct memo_slot){key, (uint32_t)off, (uint32_t)(m->vals.n - off)};
        m->n_used++;
    }
    for (uint32_t i = 0; i < m->slot[h].len; i++)
        if (!set_add(out, m->vals.v[m->slot[h].off + i])) return over(st, "out of memory", 0), false;
    return true;
}

static void memo_clear(struct wgllm_grammar_state *st) {
    struct memo *m = &st->memo;
    for (size_t i = 0; i < m->n_slots; i++) m->slot[i].key = UINT64_MAX;
    m->n_used = 0;
    m->vals.n = 0;
}

/* out = the stacks of `in` after code point c (sorted, unique). */
static bool accept_cp(struct wgllm_grammar_state *st, const uint32_t *in, size_t n_in, uint32_t c, struct idset *out) {
    out->n = 0;
    if (st->in_scratch) {
        for (size_t i = 0; i < n_in; i++)
            if (in[i] != 0 && !memo_step(st, in[i], c, out)) return false;
        sort_ids(out);
        size_t k = 0;
        for (size_t i = 0; i < out->n; i++)
            if (!k || out->v[k - 1] != out->v[i]) out->v[k++] = out->v[i];
        out->n = k;
        if (out->n > st->g->params.max_stacks) {
            over(st, "a state holds too many parses: the grammar is too ambiguous (max_stacks)", st->g->params.max_stacks);
            return false;
        }
        return true;
    }
    if (!batch(st)) return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i] != 0 && !step_one(st, in[i], c, out)) return false;
    sort_ids(out);
    return true;
}

/* ---- states ------------------------------------------------------------------------ */

enum wgllm_status wgllm_grammar_state_init(const struct wgllm_grammar *g, struct wgllm_grammar_state **out,
                                           struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_grammar_state *st = calloc(1, sizeof *st);
    if (!st) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "grammar: out of memory");
    st->g = g;
    const struct wgllm_hash_key k = wgllm_hash_key_new();
    st->seed = k.k0 ^ k.k1;
    st->cache_tokens = -1;
    /* node 0 is the empty stack */
    bool ok = wgllm_grow((void **)&st->nodes, &st->cap_nodes, 1, sizeof *st->nodes);
    if (ok) st->nodes[0] = (struct node){UINT32_MAX, UINT32_MAX}, st->n_nodes = 1;
    ok = ok && batch(st);
    for (uint32_t a = g->alt_begin[g->root]; ok && a < g->alt_begin[g->root + 1]; a++) {
        const uint32_t start = g->alts[a];
        const uint32_t s = is_end(g->flat[start].type) ? 0 : intern(st, start, 0);
        ok = s != UINT32_MAX && expand(st, s, &st->cur);
    }
    if (!ok) {
        enum wgllm_status s = st->over ? wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "%s", st->over_msg)
                                       : wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "grammar: out of memory");
        wgllm_grammar_state_free(st);
        return s;
    }
    sort_ids(&st->cur);
    *out = st;
    return WGLLM_STATUS_OK;
}

void wgllm_grammar_state_free(struct wgllm_grammar_state *st) {
    if (!st) return;
    for (size_t i = 0; i < CACHE_ENTRIES; i++) free(st->cache[i].ids), free(st->cache[i].bits);
    free(st->nodes), free(st->keep.slot), free(st->scratch.slot), free(st->mark), free(st->work.v), free(st->cur.v);
    free(st->memo.slot), free(st->memo.vals.v), free(st->memo.one.v);
    free(st);
}

bool wgllm_grammar_state_can_end(const struct wgllm_grammar_state *st) {
    return st->pn == 0 && st->cur.n && st->cur.v[0] == 0;
}

bool wgllm_grammar_state_can_continue(const struct wgllm_grammar_state *st) {
    return st->cur.n && st->cur.v[st->cur.n - 1] != 0;
}

uint64_t wgllm_grammar_state_mask_cache_hits(const struct wgllm_grammar_state *st) { return st->hits; }

static enum wgllm_status budget_error(struct wgllm_grammar_state *st, struct wgllm_error *err) {
    st->over = false;
    return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "%s", st->over_msg);
}

static bool partial_ok(const struct wgllm_grammar_state *st, const uint32_t *set, size_t n, uint32_t pv, int pn);

/* Follows bytes from (set, pv, pn) into *out; -1 rejected, 0 accepted, -2 budget. */
static int follow(struct wgllm_grammar_state *st, const uint32_t *set, size_t n_set, uint32_t *pv, int *pn,
                  const char *text, size_t len, struct idset *out, struct idset *tmp, size_t *bad_at) {
    out->n = 0;
    for (size_t i = 0; i < n_set; i++)
        if (!set_add(out, set[i])) return over(st, "out of memory", 0), -2;
    for (size_t i = 0; i < len; i++) {
        const int r = utf8_step(pv, pn, (uint8_t)text[i]);
        if (r < 0) return *bad_at = i, -1;
        if (r == 0) continue;
        if (!accept_cp(st, out->v, out->n, *pv, tmp)) return -2;
        if (!tmp->n) return *bad_at = i, -1;
        struct idset t = *out;
        *out = *tmp, *tmp = t;
    }
    /* a code point left open must be one that some class could still take */
    if (*pn > 0 && !partial_ok(st, out->v, out->n, *pv, *pn)) return *bad_at = len ? len - 1 : 0, -1;
    return 0;
}

enum wgllm_status wgllm_grammar_state_accept_text(struct wgllm_grammar_state *st, const char *text, size_t len,
                                                  struct wgllm_error *err) {
    struct idset a = {0}, b = {0};
    uint32_t pv = st->pv;
    int pn = st->pn;
    size_t bad = 0;
    const int r = follow(st, st->cur.v, st->cur.n, &pv, &pn, text, len, &a, &b, &bad);
    free(b.v);
    if (r != 0) {
        free(a.v);
        if (r == -2) return budget_error(st, err);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "grammar: the text is not allowed at byte %zu", bad);
    }
    free(st->cur.v);
    st->cur = a, st->pv = pv, st->pn = pn;
    return WGLLM_STATUS_OK;
}

/* ---- the tokens ---------------------------------------------------------------------- */

struct wgllm_grammar_vocab {
    int32_t n;
    struct wgllm_trie trie; /* the pieces of the tokens that are not end-of-generation */
    bool *eog;
    char *blob; /* the pieces, back to back */
    size_t *off; /* n + 1 */
    uint32_t max_len;
};

struct wgllm_grammar_vocab *wgllm_grammar_vocab_init(const char *const *pieces, const uint32_t *lens,
                                                     const bool *is_eog, int32_t n_tokens) {
    if (n_tokens < 0) return NULL;
    struct wgllm_grammar_vocab *gv = calloc(1, sizeof *gv);
    if (!gv) return NULL;
    gv->n = n_tokens;
    const size_t n = (size_t)n_tokens;
    gv->eog = calloc(n + 1, sizeof *gv->eog);
    gv->off = calloc(n + 1, sizeof *gv->off);
    const char **texts = calloc(n + 1, sizeof *texts);
    uint32_t *tl = calloc(n + 1, sizeof *tl);
    size_t total = 0;
    bool ok = gv->eog && gv->off && texts && tl;
    for (size_t i = 0; ok && i < n; i++) {
        gv->off[i] = total;
        if (__builtin_add_overflow(total, (size_t)lens[i], &total)) ok = false;
    }
    if (ok) gv->off[n] = total, gv->blob = malloc(total + 1), ok = gv->blob != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        if (lens[i]) memcpy(gv->blob + gv->off[i], pieces[i], lens[i]);
        gv->eog[i] = is_eog && is_eog[i];
        /* an end-of-generation token is never text; a piece with a NUL never matches (llama.cpp's pieces end there) */
        const bool text = !gv->eog[i] && lens[i] && !memchr(pieces[i], 0, lens[i]);
        texts[i] = gv->blob + gv->off[i];
        tl[i] = text ? lens[i] : 0;
        if (tl[i] > gv->max_len) gv->max_len = tl[i];
    }
    ok = ok && wgllm_trie_init(&gv->trie, texts, tl, n_tokens, false);
    free(texts), free(tl);
    if (!ok) {
        wgllm_grammar_vocab_free(gv);
        return NULL;
    }
    return gv;
}

void wgllm_grammar_vocab_free(struct wgllm_grammar_vocab *gv) {
    if (!gv) return;
    wgllm_trie_free(&gv->trie);
    free(gv->eog), free(gv->blob), free(gv->off);
    free(gv);
}

int32_t wgllm_grammar_vocab_n_tokens(const struct wgllm_grammar_vocab *gv) { return gv->n; }

/* out = the stacks after the token terminal `token` (merged into out, sorted at the end). */
static bool accept_token_terminals(struct wgllm_grammar_state *st, int32_t token, struct idset *out) {
    const struct wgllm_grammar *g = st->g;
    if (!batch(st)) return false;
    for (size_t i = 0; i < out->n; i++) visit(st, out->v[i]);
    for (size_t i = 0; i < st->cur.n; i++) {
        const uint32_t s = st->cur.v[i];
        if (s == 0) continue;
        const struct wgllm_gelem e = g->flat[st->nodes[s].top];
        if (!(e.type == WGLLM_GELEM_TOKEN && e.value == (uint32_t)token) &&
            !(e.type == WGLLM_GELEM_TOKEN_NOT && e.value != (uint32_t)token))
            continue;
        const uint32_t q = g->after[st->nodes[s].top];
        uint32_t next = st->nodes[s].below;
        if (!is_end(g->flat[q].type) && (next = intern(st, q, next)) == UINT32_MAX) return false;
        if (!expand(st, next, out)) return false;
    }
    sort_ids(out);
    return true;
}

enum wgllm_status wgllm_grammar_state_accept_token(struct wgllm_grammar_state *st,
                                                   const struct wgllm_grammar_vocab *gv, int32_t token,
                                                   struct wgllm_error *err) {
    if (token < 0 || token >= gv->n)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "grammar: token %d is not in the vocabulary", token);
    if (gv->eog[token]) {
        if (wgllm_grammar_state_can_end(st)) return WGLLM_STATUS_OK;
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "grammar: token %d ends the generation where the grammar is not complete", token);
    }
    struct idset a = {0}, b = {0};
    uint32_t pv = st->pv;
    int pn = st->pn;
    size_t bad = 0;
    const size_t len = gv->off[token + 1] - gv->off[token];
    const char *piece = gv->blob + gv->off[token];
    int r = len && !memchr(piece, 0, len) ? follow(st, st->cur.v, st->cur.n, &pv, &pn, piece, len, &a, &b, &bad) : -1;
    if (r == -1) a.n = 0, pv = 0, pn = 0;
    if (r != -2 && !accept_token_terminals(st, token, &a)) r = -2;
    free(b.v);
    if (r == -2) {
        free(a.v);
        return budget_error(st, err);
    }
    if (!a.n) {
        free(a.v);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "grammar: token %d is not allowed here", token);
    }
    free(st->cur.v);
    st->cur = a, st->pv = pv, st->pn = pn;
    return WGLLM_STATUS_OK;
}

/* ---- masks -------------------------------------------------------------------------- */

static uint64_t state_hash(const struct wgllm_grammar_state *st) {
    uint64_t h = mix(st->seed ^ ((uint64_t)st->pv << 8 | (uint64_t)(st->pn & 0xff)));
    for (size_t i = 0; i < st->cur.n; i++) h = mix(h ^ st->cur.v[i]);
    return h;
}

static bool partial_ok(const struct wgllm_grammar_state *st, const uint32_t *set, size_t n, uint32_t pv, int pn) {
    for (size_t i = 0; i < n; i++) {
        if (set[i] == 0) continue;
        const uint32_t p = st->nodes[set[i]].top;
        if (is_char_start(st->g->flat[p].type) && match_partial(st->g->flat, p, pv, pn)) return true;
    }
    return false;
}

struct frame {
    uint32_t node, edge;  /* trie node; its next edge to follow */
    size_t set_off, set_n; /* its stacks, in the arena (a child inside a code point shares its parent's) */
    size_t arena_mark;     /* the arena's size to go back to when the frame is done */
    uint32_t pv;
    int pn;
};

static void allow_node(const struct wgllm_grammar_vocab *gv, uint32_t node, uint8_t *bits) {
    for (int32_t k = gv->trie.key[node]; k >= 0; k = gv->trie.key_next[k]) bits[k >> 3] |= (uint8_t)(1u << (k & 7));
}

/* The walk over the trie (bits zeroed by the caller). */
static bool walk(struct wgllm_grammar_state *st, const struct wgllm_grammar_vocab *gv, uint8_t *bits) {
    const struct wgllm_trie *t = &gv->trie;
    struct frame *fr = malloc(((size_t)gv->max_len + 2) * sizeof *fr);
    struct idset arena = {0}, next = {0};
    bool ok = fr != NULL;
    for (size_t i = 0; ok && i < st->cur.n; i++) ok = set_add(&arena, st->cur.v[i]);
    if (!ok) {
        free(fr), free(arena.v);
        over(st, "out of memory", 0);
        return false;
    }
    size_t sp = 0;
    fr[sp++] = (struct frame){0, t->edge_begin[0], 0, st->cur.n, arena.n, st->pv, st->pn};
    while (ok && sp) {
        struct frame *f = &fr[sp - 1];
        if (f->edge == t->edge_begin[f->node + 1]) {
            arena.n = f->arena_mark;
            sp--;
            continue;
        }
        const uint32_t e = f->edge++;
        const uint32_t child = t->edge_child[e];
        uint32_t pv = f->pv;
        int pn = f->pn;
        const int r = utf8_step(&pv, &pn, t->edge_byte[e]);
        if (r < 0) continue;
        const size_t mark = arena.n;
        size_t off = f->set_off, n = f->set_n;
        if (r == 0) {
            /* still inside a code point: the tokens that end here need a class that a completion could match */
            if (t->key[child] >= 0 && partial_ok(st, arena.v + off, n, pv, pn)) allow_node(gv, child, bits);
        } else {
            if (!accept_cp(st, arena.v + off, n, pv, &next)) {
                ok = false;
                break;
            }
            if (!next.n) continue;
            off = arena.n, n = next.n;
            for (size_t i = 0; ok && i < next.n; i++) ok = set_add(&arena, next.v[i]);
            if (!ok) {
                over(st, "out of memory", 0);
                break;
            }
            if (t->key[child] >= 0) allow_node(gv, child, bits);
            pn = 0;
        }
        if (t->edge_begin[child] == t->edge_begin[child + 1]) {
            arena.n = mark;
            continue;
        }
        fr[sp++] = (struct frame){child, t->edge_begin[child], off, n, mark, pv, pn};
    }
    free(fr), free(arena.v), free(next.v);
    return ok;
}

enum wgllm_status wgllm_grammar_state_mask(struct wgllm_grammar_state *st, const struct wgllm_grammar_vocab *gv,
                                           uint8_t *allowed, struct wgllm_error *err) {
    const size_t nbytes = ((size_t)gv->n + 7) / 8;
    if (st->cache_tokens != gv->n) {
        for (size_t i = 0; i < CACHE_ENTRIES; i++) {
            free(st->cache[i].ids), free(st->cache[i].bits);
            memset(&st->cache[i], 0, sizeof st->cache[i]);
        }
        st->cache_tokens = gv->n;
    }
    const uint64_t h = state_hash(st);
    const uint8_t *bits = NULL;
    for (size_t i = 0; i < CACHE_ENTRIES && !bits; i++) {
        const struct cache_entry *c = &st->cache[i];
        if (c->bits && c->hash == h && c->n_ids == st->cur.n && c->pv == st->pv && c->pn == st->pn &&
            (!st->cur.n || !memcmp(c->ids, st->cur.v, st->cur.n * sizeof *c->ids)))
            bits = c->bits;
    }
    if (bits) {
        st->hits++;
    } else {
        struct cache_entry *c = &st->cache[st->cache_next];
        free(c->ids), free(c->bits);
        memset(c, 0, sizeof *c);
        c->bits = calloc(nbytes + 1, 1);
        c->ids = malloc((st->cur.n + 1) * sizeof *c->ids);
        if (!c->bits || !c->ids) {
            free(c->bits), free(c->ids);
            memset(c, 0, sizeof *c);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "grammar: out of memory");
        }
        const size_t keep = st->n_nodes;
        st->in_scratch = true;
        const bool ok = walk(st, gv, c->bits);
        st->in_scratch = false;
        memo_clear(st);
        drop_scratch(st, keep);
        if (!ok) {
            free(c->bits), free(c->ids);
            memset(c, 0, sizeof *c);
            return budget_error(st, err);
        }
        /* token terminals, and the end of generation */
        for (size_t i = 0; i < st->cur.n; i++) {
            if (st->cur.v[i] == 0) continue;
            const struct wgllm_gelem e = st->g->flat[st->nodes[st->cur.v[i]].top];
            /* an end-of-generation token only ends, also where a <[id]> names it (llama.cpp's rule) */
            if (e.type == WGLLM_GELEM_TOKEN && e.value < (uint32_t)gv->n && !gv->eog[e.value]) {
                c->bits[e.value >> 3] |= (uint8_t)(1u << (e.value & 7));
            } else if (e.type == WGLLM_GELEM_TOKEN_NOT) {
                for (int32_t k = 0; k < gv->n; k++)
                    if ((uint32_t)k != e.value && !gv->eog[k]) c->bits[k >> 3] |= (uint8_t)(1u << (k & 7));
            }
        }
        if (wgllm_grammar_state_can_end(st))
            for (int32_t k = 0; k < gv->n; k++)
                if (gv->eog[k]) c->bits[k >> 3] |= (uint8_t)(1u << (k & 7));
        if (st->cur.n) memcpy(c->ids, st->cur.v, st->cur.n * sizeof *c->ids);
        c->n_ids = st->cur.n, c->pv = st->pv, c->pn = st->pn, c->hash = h;
        st->cache_next = (st->cache_next + 1) % CACHE_ENTRIES;
        bits = c->bits;
    }
    for (int32_t k = 0; k < gv->n; k++) allowed[k] = (bits[k >> 3] >> (k & 7)) & 1;
    return WGLLM_STATUS_OK;
}
