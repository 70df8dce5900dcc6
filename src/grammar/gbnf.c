/*
 * gbnf.c - the GBNF reader: grammar text to compiled rules (grammar.h).
 *
 * The language is llama.cpp's, read the way its parser reads it, so a .gbnf
 * file means the same here: `name ::= alternatives`, a rule ends at a newline
 * outside parentheses, `#` comments, "literals" and [classes] with the
 * escapes \x \u \U \t \r \n \\ \" \[ \], `.`, ( groups ), `* + ? {m} {m,}
 * {m,n}`, and token references <[id]> / !<[id]> (and <text> when the caller
 * can resolve it). Repetitions expand into helper rules exactly as llama.cpp
 * expands them: S{m,n} is m copies of S then a chain of n-m optional ones.
 *
 * What llama.cpp reports by throwing, this reports as BAD_FORMAT with the
 * line, column and rule, and every size (elements, rules, repetition counts,
 * nesting) is budgeted before it is allocated, because the text may come in
 * an HTTP request.
 */
#include "grammar/grammar_internal.h"

#include <stdarg.h>

struct wgllm_grammar_params wgllm_grammar_default_params(void) {
    return (struct wgllm_grammar_params){
        .root = "root",
        .max_elements = 1u << 20,
        .max_rules = 1u << 16,
        .max_repeat = 2000,
        .max_depth = 256,
        .max_stacks = 4096,
        .max_nodes = 1u << 22,
    };
}

/* ---- the rule table ---------------------------------------------------------- */

static uint64_t name_hash(const struct wgllm_grammar *g, const char *s, size_t n) {
    return wgllm_hash(&g->key, 0, s, n);
}

static uint32_t find_rule(const struct wgllm_grammar *g, const char *s, size_t n) {
    if (!g->n_slots) return UINT32_MAX;
    for (size_t h = name_hash(g, s, n) & (g->n_slots - 1);; h = (h + 1) & (g->n_slots - 1)) {
        const uint32_t id = g->slots[h];
        if (id == UINT32_MAX) return UINT32_MAX;
        if (strlen(g->rules[id].name) == n && !memcmp(g->rules[id].name, s, n)) return id;
    }
}

static void put_slot(uint32_t *slots, size_t ns, size_t h, uint32_t id) {
    while (slots[h & (ns - 1)] != UINT32_MAX) h++;
    slots[h & (ns - 1)] = id;
}

/* The id of the rule named s[0, n), made (undefined) when new; UINT32_MAX
 * when over max_rules or out of memory. Only named rules are in the table. */
static uint32_t rule_id(struct wgllm_grammar *g, const char *s, size_t n, uint32_t max_rules) {
    const uint32_t found = find_rule(g, s, n);
    if (found != UINT32_MAX) return found;
    if (g->n_rules >= max_rules) return UINT32_MAX;
    if ((g->n_named + 1) * 2 > g->n_slots) {
        const size_t ns = g->n_slots ? g->n_slots * 2 : 64;
        uint32_t *slots = malloc(ns * sizeof *slots);
        if (!slots) return UINT32_MAX;
        memset(slots, 0xff, ns * sizeof *slots);
        for (uint32_t i = 0; i < g->n_rules; i++)
            if (g->rules[i].named) put_slot(slots, ns, name_hash(g, g->rules[i].name, strlen(g->rules[i].name)), i);
        free(g->slots);
        g->slots = slots, g->n_slots = ns;
    }
    char *name = malloc(n + 1);
    if (!name || !wgllm_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
        free(name);
        return UINT32_MAX;
    }
    memcpy(name, s, n);
    name[n] = 0;
    g->rules[g->n_rules] = (struct wgllm_grule){.name = name, .named = true};
    put_slot(g->slots, g->n_slots, name_hash(g, s, n), g->n_rules);
    g->n_named++;
    return g->n_rules++;
}

void wgllm_grammar_free(struct wgllm_grammar *g) {
    if (!g) return;
    for (uint32_t i = 0; i < g->n_rules; i++) free(g->rules[i].name), free(g->rules[i].e);
    free(g->rules);
    free(g->slots);
    wgllm_grammar_unprepare(g);
    free(g);
}

uint32_t wgllm_grammar_n_rules(const struct wgllm_grammar *g) { return g->n_rules; }
const struct wgllm_gelem *wgllm_grammar_rule(const struct wgllm_grammar *g, uint32_t i) { return g->rules[i].e; }
const char *wgllm_grammar_rule_name(const struct wgllm_grammar *g, uint32_t i) { return g->rules[i].name; }
uint32_t wgllm_grammar_root(const struct wgllm_grammar *g) { return g->root; }

/* ---- the reader ------------------------------------------------------------ */

/* A sequence of elements being built (a rule body or a repetition's item). */
struct seq {
    struct wgllm_gelem *e;
    size_t n, cap;
};

struct reader {
    const char *s;
    size_t n, i;
    const struct wgllm_grammar_params *p;
    struct wgllm_grammar *g;
    struct wgllm_error *err;
    enum wgllm_status st; /* the first failure; OK while reading */
    uint32_t depth;
    const char *rule; /* the rule being read, for messages */
    size_t n_elements;
};

static void where(const struct reader *r, size_t at, uint32_t *line, uint32_t *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at && i < r->n; i++) {
        if (r->s[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

__attribute__((format(printf, 4, 5))) static bool fail(struct reader *r, enum wgllm_status st, size_t at,
                                                       const char *fmt, ...) {
    if (r->st != WGLLM_STATUS_OK) return false;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    where(r, at, &line, &col);
    r->st = wgllm_error_set(r->err, st, "grammar: line %u column %u%s%s%s: %s", line, col,
                            r->rule ? " (rule '" : "", r->rule ? r->rule : "", r->rule ? "')" : "", msg);
    return false;
}

static int peek(const struct reader *r, size_t k) { return r->i + k < r->n ? (unsigned char)r->s[r->i + k] : -1; }

static bool word_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* spaces, tabs, comments; newlines too where a rule cannot end (newline_ok) */
static void space(struct reader *r, bool newline_ok) {
    for (;;) {
        const int c = peek(r, 0);
        if (c == ' ' || c == '\t') {
            r->i++;
        } else if (c == '#') {
            while (r->i < r->n && r->s[r->i] != '\n' && r->s[r->i] != '\r') r->i++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            r->i++;
        } else {
            return;
        }
    }
}

static bool push(struct reader *r, struct seq *q, uint32_t type, uint32_t value) {
    if (++r->n_elements > r->p->max_elements)
        return fail(r, WGLLM_STATUS_INVALID_ARGUMENT, r->i, "the grammar expands to more than %u elements",
                    r->p->max_elements);
    if (!wgllm_grow((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e))
        return fail(r, WGLLM_STATUS_OUT_OF_MEMORY, r->i, "out of memory");
    q->e[q->n++] = (struct wgllm_gelem){type, value};
    return true;
}

static bool append(struct reader *r, struct seq *q, const struct wgllm_gelem *e, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!push(r, q, e[k].type, e[k].value)) return false;
    return true;
}

/* Makes a generated rule with body q, which it takes. Its name (the rule's
 * own, then _N, as llama.cpp prints it) is for messages only: it is not in
 * the name table, so a user's rule of the same name stays a different rule. */
static uint32_t new_rule(struct reader *r, struct seq *q) {
    struct wgllm_grammar *g = r->g;
    char name[300];
    snprintf(name, sizeof name, "%.200s_%u", r->rule ? r->rule : "rule", g->n_rules);
    char *copy = strdup(name);
    if (g->n_rules >= r->p->max_rules || !copy ||
        !wgllm_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
        free(copy), free(q->e);
        *q = (struct seq){0};
        if (g->n_rules >= r->p->max_rules)
            fail(r, WGLLM_STATUS_INVALID_ARGUMENT, r->i, "the grammar needs more than %u rules", r->p->max_rules);
        else
            fail(r, WGLLM_STATUS_OUT_OF_MEMORY, r->i, "out of memory");
        return UINT32_MAX;
    }
    g->rules[g->n_rules] = (struct wgllm_grule){.name = copy, .e = q->e, .n = q->n, .defined = true};
    *q = (struct seq){0};
    return g->n_rules++;
}

static bool hex(struct reader *r, size_t digits, uint32_t *out) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; k++) {
        const int c = peek(r, 0);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting %zu hex digits", digits);
        v = v << 4 | (uint32_t)d;
        r->i++;
    }
    *out = v;
    return true;
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static bool character(struct reader *r, uint32_t *cp) {
    const size_t at = r->i;
    const int c = peek(r, 0);
    if (c < 0) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "unexpected end of the grammar");
    if (c == '\\') {
        const int e = peek(r, 1);
        r->i += 2;
        switch (e) {
        case 'x': return hex(r, 2, cp);
        case 'u': return hex(r, 4, cp);
        case 'U': return hex(r, 8, cp);
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case 'n': *cp = '\n'; return true;
        case '\\': case '"': case '[': case ']': *cp = (uint32_t)e; return true;
        default:
            return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "unknown escape '\\%c'", e > 32 && e < 127 ? e : '?');
        }
    }
    const unsigned char b = (unsigned char)c;
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (!len || r->i + (size_t)len > r->n) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "invalid UTF-8");
    uint32_t v = len == 1 ? b : b & (0x7f >> len);
    for (int k = 1; k < len; k++) {
        const unsigned char x = (unsigned char)r->s[r->i + (size_t)k];
        if ((x >> 6) != 2) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "invalid UTF-8");
        v = v << 6 | (x & 0x3f);
    }
    r->i += (size_t)len;
    *cp = v;
    return true;
}

static bool integer(struct reader *r, uint32_t *out) {
    const size_t at = r->i;
    uint64_t v = 0;
    if (peek(r, 0) < '0' || peek(r, 0) > '9') return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "expecting an integer");
    while (peek(r, 0) >= '0' && peek(r, 0) <= '9') {
        v = v * 10 + (uint64_t)(peek(r, 0) - '0');
        if (v > r->p->max_repeat)
            return fail(r, WGLLM_STATUS_INVALID_ARGUMENT, at, "repetition count above %u", r->p->max_repeat);
        r->i++;
    }
    *out = (uint32_t)v;
    return true;
}

/* Rewrites the last item (q[from..]) as item{lo,hi} (hi UINT32_MAX: no upper bound). */
static bool repeat(struct reader *r, struct seq *q, size_t from, uint32_t lo, uint32_t hi) {
    const size_t at = r->i;
    if (from == q->n) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "a repetition with nothing before it");
    if (hi != UINT32_MAX && hi < lo) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "repetition {%u,%u}: max < min", lo, hi);
    struct seq item = {0};
    if (!append(r, &item, q->e + from, q->n - from)) return free(item.e), false;
    if (lo == 0) {
        r->n_elements -= q->n - from;
        q->n = from;
    } else {
        for (uint32_t k = 1; k < lo; k++)
            if (!append(r, q, item.e, item.n)) return free(item.e), false;
    }
    /* the optional part: a chain of rules item_k ::= item item_{k-1} | (empty),
     * or one rule item* ::= item item* | (empty) without an upper bound */
    const uint32_t n_opt = hi == UINT32_MAX ? 1 : hi - lo;
    uint32_t last = UINT32_MAX;
    for (uint32_t k = 0; k < n_opt; k++) {
        struct seq body = {0};
        bool ok = append(r, &body, item.e, item.n);
        uint32_t self = UINT32_MAX;
        if (ok && hi == UINT32_MAX) {
            /* refers to itself: make the rule first, then fill in the reference */
            struct seq empty = {0};
            self = new_rule(r, &empty);
            ok = self != UINT32_MAX && push(r, &body, WGLLM_GELEM_REF, self);
        } else if (ok && k > 0) {
            ok = push(r, &body, WGLLM_GELEM_REF, last);
        }
        ok = ok && push(r, &body, WGLLM_GELEM_ALT, 0) && push(r, &body, WGLLM_GELEM_END, 0);
        if (!ok) return free(body.e), free(item.e), false;
        if (self != UINT32_MAX) {
            struct wgllm_grule *g = &r->g->rules[self];
            free(g->e);
            g->e = body.e, g->n = body.n;
            last = self;
        } else {
            last = new_rule(r, &body);
            if (last == UINT32_MAX) return free(item.e), false;
        }
    }
    free(item.e);
    return n_opt == 0 || push(r, q, WGLLM_GELEM_REF, last);
}

static bool alternatives(struct reader *r, struct seq *q, bool nested);

/* A sequence of items up to '|', ')' or the end of the rule. */
static bool sequence(struct reader *r, struct seq *q, bool nested) {
    size_t last = q->n; /* where the last item starts, for a repetition */
    for (;;) {
        const size_t at = r->i;
        const int c = peek(r, 0);
        if (c == '"') {
            r->i++;
            last = q->n;
            while (peek(r, 0) != '"') {
                uint32_t cp;
                if (!character(r, &cp) || !push(r, q, WGLLM_GELEM_CHAR, cp)) return false;
            }
            r->i++;
            space(r, nested);
        } else if (c == '[') {
            r->i++;
            uint32_t first = WGLLM_GELEM_CHAR;
            if (peek(r, 0) == '^') r->i++, first = WGLLM_GELEM_CHAR_NOT;
            last = q->n;
            while (peek(r, 0) != ']') {
                uint32_t cp;
                if (!character(r, &cp) || !push(r, q, q->n > last ? WGLLM_GELEM_CHAR_ALT : first, cp)) return false;
                if (peek(r, 0) == '-' && peek(r, 1) != ']') {
                    r->i++;
                    if (!character(r, &cp) || !push(r, q, WGLLM_GELEM_RNG_UPPER, cp)) return false;
                }
            }
            r->i++;
            space(r, nested);
        } else if (word_char(c)) {
            const size_t s = r->i;
            while (word_char(peek(r, 0))) r->i++;
            const uint32_t id = rule_id(r->g, r->s + s, r->i - s, r->p->max_rules);
            if (id == UINT32_MAX)
                return fail(r, WGLLM_STATUS_INVALID_ARGUMENT, at, "the grammar needs more than %u rules", r->p->max_rules);
            if (!r->g->rules[id].used_at) r->g->rules[id].used_at = at + 1;
            last = q->n;
            if (!push(r, q, WGLLM_GELEM_REF, id)) return false;
            space(r, nested);
        } else if (c == '(') {
            if (++r->depth > r->p->max_depth)
                return fail(r, WGLLM_STATUS_INVALID_ARGUMENT, at, "groups nested deeper than %u", r->p->max_depth);
            r->i++;
            space(r, true);
            struct seq sub = {0};
            if (!alternatives(r, &sub, true)) return free(sub.e), false;
            if (peek(r, 0) != ')') return free(sub.e), fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting ')'");
            r->i++;
            r->depth--;
            const uint32_t id = new_rule(r, &sub);
            if (id == UINT32_MAX) return false;
            last = q->n;
            if (!push(r, q, WGLLM_GELEM_REF, id)) return false;
            space(r, nested);
        } else if (c == '.') {
            r->i++;
            last = q->n;
            if (!push(r, q, WGLLM_GELEM_ANY, 0)) return false;
            space(r, nested);
        } else if (c == '<' || (c == '!' && peek(r, 1) == '<')) {
            const bool neg = c == '!';
            r->i += neg ? 2 : 1;
            int32_t tok = -1;
            if (peek(r, 0) == '[') {
                r->i++;
                uint64_t v = 0;
                if (peek(r, 0) < '0' || peek(r, 0) > '9') return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting a token id");
                while (peek(r, 0) >= '0' && peek(r, 0) <= '9') {
                    v = v * 10 + (uint64_t)(peek(r, 0) - '0');
                    if (v > INT32_MAX) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "token id out of range");
                    r->i++;
                }
                if (peek(r, 0) != ']' || peek(r, 1) != '>') return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting ']>'");
                r->i += 2;
                tok = (int32_t)v;
            } else {
                const size_t s = r->i;
                while (r->i < r->n && r->s[r->i] != '>' && r->s[r->i] != '\n') r->i++;
                if (peek(r, 0) != '>') return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "expecting '>' after a token");
                if (!r->p->token_of)
                    return fail(r, WGLLM_STATUS_UNSUPPORTED, at, "token '<%.*s>' needs a vocabulary: use <[id]>",
                                (int)(r->i - s > 60 ? 60 : r->i - s), r->s + s);
                tok = r->p->token_of(r->p->token_user, r->s + s, r->i - s);
                if (tok < 0)
                    return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "'<%.*s>' is not one token of this vocabulary",
                                (int)(r->i - s > 60 ? 60 : r->i - s), r->s + s);
                r->i++;
            }
            last = q->n;
            if (!push(r, q, neg ? WGLLM_GELEM_TOKEN_NOT : WGLLM_GELEM_TOKEN, (uint32_t)tok)) return false;
            space(r, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            r->i++;
            space(r, nested);
            if (!repeat(r, q, last, c == '+', c == '?' ? 1 : UINT32_MAX)) return false;
        } else if (c == '{') {
            r->i++;
            space(r, nested);
            uint32_t lo, hi;
            if (!integer(r, &lo)) return false;
            space(r, nested);
            if (peek(r, 0) == '}') {
                hi = lo;
            } else if (peek(r, 0) == ',') {
                r->i++;
                space(r, nested);
                hi = UINT32_MAX;
                if (peek(r, 0) >= '0' && peek(r, 0) <= '9') {
                    if (!integer(r, &hi)) return false;
                    space(r, nested);
                }
                if (peek(r, 0) != '}') return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting '}'");
            } else {
                return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting ',' or '}'");
            }
            r->i++;
            space(r, nested);
            if (!repeat(r, q, last, lo, hi)) return false;
        } else {
            return true;
        }
    }
}

static bool alternatives(struct reader *r, struct seq *q, bool nested) {
    if (!sequence(r, q, nested)) return false;
    while (peek(r, 0) == '|') {
        if (!push(r, q, WGLLM_GELEM_ALT, 0)) return false;
        r->i++;
        space(r, true);
        if (!sequence(r, q, nested)) return false;
    }
    return push(r, q, WGLLM_GELEM_END, 0);
}

static bool rule(struct reader *r) {
    const size_t at = r->i;
    const size_t s = r->i;
    while (word_char(peek(r, 0))) r->i++;
    if (r->i == s) return fail(r, WGLLM_STATUS_BAD_FORMAT, at, "expecting a rule name");
    const uint32_t id = rule_id(r->g, r->s + s, r->i - s, r->p->max_rules);
    if (id == UINT32_MAX)
        return fail(r, WGLLM_STATUS_INVALID_ARGUMENT, at, "the grammar needs more than %u rules", r->p->max_rules);
    r->rule = r->g->rules[id].name;
    space(r, false);
    if (peek(r, 0) != ':' || peek(r, 1) != ':' || peek(r, 2) != '=')
        return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting '::=' after the rule name");
    r->i += 3;
    space(r, true);
    struct seq body = {0};
    if (!alternatives(r, &body, false)) return free(body.e), false;
    /* a rule defined twice: the last definition counts, as in llama.cpp */
    struct wgllm_grule *g = &r->g->rules[id];
    if (g->defined) r->n_elements -= g->n;
    free(g->e);
    g->e = body.e, g->n = body.n, g->defined = true;
    if (peek(r, 0) == '\r') r->i += peek(r, 1) == '\n' ? 2 : 1;
    else if (peek(r, 0) == '\n') r->i++;
    else if (peek(r, 0) >= 0) return fail(r, WGLLM_STATUS_BAD_FORMAT, r->i, "expecting the end of the line");
    r->rule = NULL;
    space(r, true);
    return true;
}

/* Left recursion (a rule that can reach itself before consuming anything)
 * would make the matcher loop: refused, as llama.cpp refuses it. Both steps
 * are linear in the grammar and iterative, so a hostile chain of rules can
 * neither take quadratic time nor overflow the C stack:
 * 1. which rules can match the empty text (a worklist over alternatives
 *    made only of references, each counting its references not yet known
 *    to be nullable);
 * 2. a depth-first search over "can start with" edges (u -> v when v comes
 *    first in an alternative of u, or after nullable references only); an
 *    edge back into the search path is left recursion. */
static bool is_end(uint32_t t) { return t == WGLLM_GELEM_END || t == WGLLM_GELEM_ALT; }
static bool is_terminal(uint32_t t) { return t != WGLLM_GELEM_REF && !is_end(t); }

static bool check_left_recursion(struct reader *r) {
    struct wgllm_grammar *g = r->g;
    const uint32_t n = g->n_rules ? g->n_rules : 1;
    size_t n_alts = 0, n_refs = 0;
    for (uint32_t i = 0; i < g->n_rules; i++)
        for (size_t k = 0; k < g->rules[i].n; k++) {
            n_alts += is_end(g->rules[i].e[k].type);
            n_refs += g->rules[i].e[k].type == WGLLM_GELEM_REF;
        }
    bool *nullable = calloc(n, sizeof *nullable);
    uint32_t *alt_rule = malloc((n_alts + 1) * sizeof *alt_rule);
    uint32_t *pending = malloc((n_alts + 1) * sizeof *pending);
    size_t *occ_begin = calloc((size_t)n + 1, sizeof *occ_begin);
    uint32_t *occ = malloc((n_refs + 1) * sizeof *occ);
    size_t *edge_begin = calloc((size_t)n + 1, sizeof *edge_begin);
    uint32_t *edge = malloc((n_refs + 1) * sizeof *edge);
    uint32_t *work = malloc((size_t)n * sizeof *work);
    uint8_t *mark = calloc(n, 1);
    size_t *cursor = malloc((size_t)n * sizeof *cursor);
    bool ok = nullable && alt_rule && pending && occ_begin && occ && edge_begin && edge && work && mark && cursor;
    if (!ok) fail(r, WGLLM_STATUS_OUT_OF_MEMORY, 0, "out of memory");
    /* 1. nullable rules */
    size_t a = 0, nw = 0;
    for (uint32_t i = 0; ok && i < g->n_rules; i++) {
        const struct wgllm_gelem *e = g->rules[i].e;
        size_t start = 0;
        for (size_t k = 0; k < g->rules[i].n; k++) {
            if (!is_end(e[k].type)) continue;
            bool refs_only = true;
            uint32_t count = 0;
            for (size_t j = start; j < k; j++) {
                if (is_terminal(e[j].type)) refs_only = false;
                else count++;
            }
            alt_rule[a] = i;
            pending[a] = refs_only ? count : UINT32_MAX;
            if (refs_only)
                for (size_t j = start; j < k; j++) occ_begin[e[j].value + 1]++;
            if (refs_only && count == 0 && !nullable[i]) nullable[i] = true, work[nw++] = i;
            a++;
            start = k + 1;
        }
    }
    for (uint32_t v = 0; ok && v < n; v++) occ_begin[v + 1] += occ_begin[v];
    a = 0;
    for (uint32_t i = 0; ok && i < g->n_rules; i++) {
        const struct wgllm_gelem *e = g->rules[i].e;
        size_t start = 0;
        for (size_t k = 0; k < g->rules[i].n; k++) {
            if (!is_end(e[k].type)) continue;
            if (pending[a] != UINT32_MAX)
                for (size_t j = start; j < k; j++) occ[occ_begin[e[j].value]++] = (uint32_t)a;
            a++;
            start = k + 1;
        }
    }
    for (uint32_t v = n; ok && v > 0; v--) occ_begin[v] = occ_begin[v - 1];
    if (ok) occ_begin[0] = 0;
    while (ok && nw) {
        const uint32_t v = work[--nw];
        for (size_t o = occ_begin[v]; o < occ_begin[v + 1]; o++) {
            const uint32_t alt = occ[o];
            if (--pending[alt] == 0 && !nullable[alt_rule[alt]]) nullable[alt_rule[alt]] = true, work[nw++] = alt_rule[alt];
        }
    }
    /* 2. "can start with" edges, then the search */
    for (int pass = 0; ok && pass < 2; pass++) {
        for (uint32_t i = 0; i < g->n_rules; i++) {
            const struct wgllm_gelem *e = g->rules[i].e;
            bool open = true; /* still at the start of the alternative, up to nullable references */
            for (size_t k = 0; k < g->rules[i].n; k++) {
                if (is_end(e[k].type)) {
                    open = true;
                } else if (!open) {
                    continue;
                } else if (e[k].type == WGLLM_GELEM_REF) {
                    if (pass == 0) edge_begin[i + 1]++;
                    else edge[edge_begin[i]++] = e[k].value;
                    open = nullable[e[k].value];
                } else {
                    open = false;
                }
            }
        }
        if (pass == 0)
            for (uint32_t v = 0; v < n; v++) edge_begin[v + 1] += edge_begin[v];
        else {
            for (uint32_t v = n; v > 0; v--) edge_begin[v] = edge_begin[v - 1];
            edge_begin[0] = 0;
        }
    }
    for (uint32_t root = 0; ok && root < g->n_rules; root++) {
        if (mark[root]) continue;
        size_t sp = 0;
        work[sp] = root, cursor[sp] = edge_begin[root], sp++;
        mark[root] = 1;
        while (sp && ok) {
            const uint32_t u = work[sp - 1];
            if (cursor[sp - 1] == edge_begin[u + 1]) {
                mark[u] = 2;
                sp--;
                continue;
            }
            const uint32_t v = edge[cursor[sp - 1]++];
            if (mark[v] == 1) {
                r->rule = NULL;
                ok = fail(r, WGLLM_STATUS_BAD_FORMAT, g->rules[v].used_at ? g->rules[v].used_at - 1 : 0,
                          "rule '%s' is left-recursive (it can reach itself before matching any text); "
                          "write the recursion on the right or with * / +", g->rules[v].name);
            } else if (mark[v] == 0) {
                mark[v] = 1;
                work[sp] = v, cursor[sp] = edge_begin[v], sp++;
            }
        }
    }
    free(nullable), free(alt_rule), free(pending), free(occ_begin), free(occ);
    free(edge_begin), free(edge), free(work), free(mark), free(cursor);
    return ok;
}

enum wgllm_status wgllm_grammar_parse(const char *text, size_t len, const struct wgllm_grammar_params *params,
                                      struct wgllm_grammar **out, struct wgllm_error *err) {
    *out = NULL;
    const struct wgllm_grammar_params def = wgllm_grammar_default_params();
    const struct wgllm_grammar_params *p = params ? params : &def;
    struct wgllm_grammar *g = calloc(1, sizeof *g);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "grammar: out of memory");
    g->key = wgllm_hash_key_new();
    struct reader r = {.s = text, .n = len, .p = p, .g = g, .err = err};
    if (memchr(text, 0, len)) fail(&r, WGLLM_STATUS_BAD_FORMAT, (size_t)((const char *)memchr(text, 0, len) - text),
                                   "a NUL byte in the grammar");
    space(&r, true);
    while (r.st == WGLLM_STATUS_OK && r.i < r.n) rule(&r);
    const char *root = p->root ? p->root : "root";
    if (r.st == WGLLM_STATUS_OK) {
        for (uint32_t i = 0; i < g->n_rules; i++) {
            if (!g->rules[i].defined) {
                r.rule = NULL;
                fail(&r, WGLLM_STATUS_BAD_FORMAT, g->rules[i].used_at ? g->rules[i].used_at - 1 : 0,
                     "rule '%s' is used but never defined", g->rules[i].name);
                break;
            }
        }
    }
    if (r.st == WGLLM_STATUS_OK) {
        g->root = find_rule(g, root, strlen(root));
        if (g->root == UINT32_MAX)
            wgllm_error_set(err, r.st = WGLLM_STATUS_BAD_FORMAT, "grammar: no rule named '%s' (the start rule)", root);
    }
    if (r.st == WGLLM_STATUS_OK) check_left_recursion(&r);
    if (r.st == WGLLM_STATUS_OK && !wgllm_grammar_prepare(g))
        r.st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "grammar: out of memory");
    if (r.st != WGLLM_STATUS_OK) {
        wgllm_grammar_free(g);
        return r.st;
    }
    g->params = *p;
    g->params.root = NULL;
    *out = g;
    return WGLLM_STATUS_OK;
}
