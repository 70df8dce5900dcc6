/*
 * jinja_value.c - what both halves of the Jinja subset interpreter stand on:
 * the arena every value and AST node lives in (so error paths, longjmp out of
 * any depth, never leak), values, the string builder, the text and JSON forms
 * of values, and the JSON reader for messages/tools. The lexer and parser are
 * jinja_parse.c, the interpreter jinja.c.
 */
#include "chat/jinja_internal.h"

#include <ctype.h>
#include <math.h>
/* ------------------------------------------------------------------------- */
/* budgets                                                                   */
/* ------------------------------------------------------------------------- */

struct wgllm_chat_params wgllm_chat_default_params(void) {
    struct wgllm_chat_params p = {
        .max_steps = 10000000,
        .max_output = (size_t)64 << 20,
        .max_memory = (size_t)256 << 20,
        .max_depth = 256,
    };
    return p;
}

/* The params a parse or render runs under: the caller's, or the defaults,
 * with the depth clamped to what the C stack takes. */
void wgllm_jinja_ctx_limits(struct jctx *c, const struct wgllm_chat_params *params) {
    c->lim = params ? *params : wgllm_chat_default_params();
    if (c->lim.max_depth > 1024) c->lim.max_depth = 1024;
    if (c->lim.max_depth < 1) c->lim.max_depth = 1;
}

_Noreturn void wgllm_jinja_fail(struct jctx *c, enum wgllm_status st, const char *fmt, ...) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    wgllm_error_set(c->err, st, "chat template: %s", buf);
    c->status = st;
    longjmp(c->jb, 1);
}

_Noreturn void wgllm_jinja_over(struct jctx *c, const char *what, uint64_t limit, const char *unit) {
    if (c->at)
        wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "template exceeds its %s budget (%llu %s) at line %d, column %d",
                         what, (unsigned long long)limit, unit, c->at->line, c->at->col);
    wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "template exceeds its %s budget (%llu %s)", what,
                     (unsigned long long)limit, unit);
}

/* ------------------------------------------------------------------------- */
/* arena                                                                     */
/* ------------------------------------------------------------------------- */

/* Every byte a parse or render holds comes from here, so the memory budget
 * is checked in one place. */
void *wgllm_jinja_alloc(struct jctx *c, size_t n) {
    if (n > c->lim.max_memory - c->mem || c->lim.max_memory - c->mem - n < 15)
        wgllm_jinja_over(c, "memory", c->lim.max_memory, "bytes");
    n = (n + 15) & ~(size_t)15;
    c->mem += n;
    struct arena_block *b = c->arena->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) wgllm_jinja_fail(c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (%zu bytes)", n);
        b->used = 0;
        b->cap = cap;
        b->next = c->arena->head;
        c->arena->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void wgllm_jinja_arena_free(struct jarena *a) {
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

char *wgllm_jinja_strdup(struct jctx *c, const char *s, size_t n) {
    char *p = wgllm_jinja_alloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------------- */
/* values                                                                    */
/* ------------------------------------------------------------------------- */



jv wgllm_jinja_arr_new(struct jctx *c) {
    jv v = {.t = J_ARR};
    v.u.a = wgllm_jinja_alloc(c, sizeof *v.u.a);
    return v;
}
void wgllm_jinja_arr_push(struct jctx *c, struct jarr *a, jv x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        jv *nv = wgllm_jinja_alloc(c, cap * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}
jv wgllm_jinja_dict_new(struct jctx *c, enum jt t) {
    jv v = {.t = t};
    v.u.d = wgllm_jinja_alloc(c, sizeof *v.u.d);
    return v;
}
static uint32_t key_hash(const char *k, size_t kn) { /* FNV-1a */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < kn; i++) h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}
jv *wgllm_jinja_dict_find(const struct jdict *d, const char *k, size_t kn) {
    if (d->ix) {
        size_t mask = d->ixcap - 1;
        for (size_t h = key_hash(k, kn) & mask;; h = (h + 1) & mask) {
            uint32_t e = d->ix[h];
            if (!e) return NULL;
            if (d->kn[e - 1] == kn && memcmp(d->kp[e - 1], k, kn) == 0) return &d->v[e - 1];
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->kn[i] == kn && memcmp(d->kp[i], k, kn) == 0) return &d->v[i];
    return NULL;
}
static void dict_index_put(struct jdict *d, size_t i) {
    size_t mask = d->ixcap - 1, h = key_hash(d->kp[i], d->kn[i]) & mask;
    while (d->ix[h]) h = (h + 1) & mask;
    d->ix[h] = (uint32_t)(i + 1);
}
static void dict_set_t(struct jctx *c, struct jdict *d, const char *k, size_t kn, const struct jspans *kt, jv x) {
    jv *slot = wgllm_jinja_dict_find(d, k, kn);
    if (slot) { *slot = x; return; }
    if (d->n >= UINT32_MAX / 2)
        wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "a dict of more than %u keys", UINT32_MAX / 2);
    if (d->n == d->cap || (kt && !d->kt)) {
        size_t cap = d->n < d->cap ? d->cap : d->cap ? d->cap * 2 : 4;
        const char **kp = wgllm_jinja_alloc(c, cap * sizeof *kp);
        size_t *knn = wgllm_jinja_alloc(c, cap * sizeof *knn);
        jv *v = wgllm_jinja_alloc(c, cap * sizeof *v);
        const struct jspans **ktt = kt || d->kt ? wgllm_jinja_alloc(c, cap * sizeof *ktt) : NULL;
        if (d->n) {
            memcpy(kp, d->kp, d->n * sizeof *kp);
            memcpy(knn, d->kn, d->n * sizeof *knn);
            memcpy(v, d->v, d->n * sizeof *v);
            if (d->kt) memcpy(ktt, d->kt, d->n * sizeof *ktt);
        }
        d->kp = kp; d->kn = knn; d->v = v; d->kt = ktt; d->cap = cap;
    }
    d->kp[d->n] = k;
    d->kn[d->n] = kn;
    if (d->kt) d->kt[d->n] = kt;
    d->v[d->n++] = x;
    if (d->n >= 16 && d->n * 2 > d->ixcap) { /* (re)build the index at half load */
        d->ixcap = d->ixcap ? d->ixcap * 2 : 32;
        d->ix = wgllm_jinja_alloc(c, d->ixcap * sizeof *d->ix);
        for (size_t i = 0; i < d->n; i++) dict_index_put(d, i);
    } else if (d->ix) {
        dict_index_put(d, d->n - 1);
    }
}
void wgllm_jinja_dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, jv x) {
    dict_set_t(c, d, k, kn, NULL, x);
}
void wgllm_jinja_dict_set_key(struct jctx *c, struct jdict *d, jv key, jv x) {
    dict_set_t(c, d, key.u.s.p, key.u.s.n, key.u.s.t, x);
}
jv wgllm_jinja_dict_key(const struct jdict *d, size_t i) {
    return jv_str_t(d->kp[i], d->kn[i], d->kt ? d->kt[i] : NULL);
}
void wgllm_jinja_dict_setz(struct jctx *c, struct jdict *d, const char *k, jv x) {
    wgllm_jinja_dict_set(c, d, k, strlen(k), x);
}

const char *wgllm_jinja_type_name(enum jt t) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float", "string",
                                  "list", "dict", "namespace", "macro", "function"};
    return names[t];
}

bool wgllm_jinja_truthy(jv v) {
    switch (v.t) {
    case J_UNDEF: case J_NONE: return false;
    case J_BOOL: return v.u.b;
    case J_INT: return v.u.i != 0;
    case J_FLOAT: return v.u.f != 0 && !isnan(v.u.f);
    case J_STR: return v.u.s.n > 0;
    case J_ARR: return v.u.a->n > 0;
    case J_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

/* ------------------------------------------------------------------------- */
/* request bytes in strings                                                  */
/* ------------------------------------------------------------------------- */

static const struct jspan span_all = {0, SIZE_MAX};
const struct jspans wgllm_jinja_spans_all = {1, &span_all};

static size_t span_end(const struct jspan *x) { return x->len > SIZE_MAX - x->off ? SIZE_MAX : x->off + x->len; }

/* the first span of t that ends after off (binary search) */
static size_t spans_from(const struct jspans *t, size_t off) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (span_end(&t->v[mid]) > off) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

jv wgllm_jinja_sub(struct jctx *c, jv s, size_t off, size_t len) {
    jv r = jv_str(s.u.s.p + off, len);
    const struct jspans *t = s.u.s.t;
    if (!t || !len) return r;
    size_t i0 = spans_from(t, off), k = 0;
    while (i0 + k < t->n && t->v[i0 + k].off < off + len) k++;
    if (k == 0) return r;
    if (k == 1 && t->v[i0].off <= off && span_end(&t->v[i0]) >= off + len) {
        r.u.s.t = &wgllm_jinja_spans_all;
        return r;
    }
    struct jspan *v = wgllm_jinja_alloc(c, k * sizeof *v);
    for (size_t i = 0; i < k; i++) {
        const struct jspan *x = &t->v[i0 + i];
        size_t a = x->off > off ? x->off : off, e = span_end(x) < off + len ? span_end(x) : off + len;
        v[i].off = a - off;
        v[i].len = e - a;
    }
    struct jspans *nt = wgllm_jinja_alloc(c, sizeof *nt);
    nt->n = k;
    nt->v = v;
    r.u.s.t = nt;
    return r;
}

/* marks [off, off + len) of b as request bytes; marks come in order, so a
 * new one extends the last when they touch */
static void sb_mark(struct sbuf *b, size_t off, size_t len) {
    if (!len) return;
    if (b->sn && span_end(&b->sv[b->sn - 1]) >= off) {
        struct jspan *l = &b->sv[b->sn - 1];
        if (off + len > span_end(l)) l->len = off + len - l->off;
        return;
    }
    if (b->sn == b->scap) {
        size_t cap = b->scap ? b->scap * 2 : 8;
        struct jspan *nv = wgllm_jinja_alloc(b->c, cap * sizeof *nv);
        if (b->sn) memcpy(nv, b->sv, b->sn * sizeof *nv);
        b->sv = nv;
        b->scap = cap;
    }
    b->sv[b->sn].off = off;
    b->sv[b->sn++].len = len;
}
void wgllm_jinja_sb_mark_tail(struct sbuf *b, size_t len) { sb_mark(b, b->n - len, len); }

/* ------------------------------------------------------------------------- */
/* string builder                                                            */
/* ------------------------------------------------------------------------- */


void wgllm_jinja_sb_put(struct sbuf *b, const char *s, size_t n) {
    struct jctx *c = b->c;
    /* bytes past the memory budget fail in wgllm_jinja_alloc; this keeps the sums below from wrapping */
    if (n > c->lim.max_memory || n > SIZE_MAX / 4 || b->n > SIZE_MAX / 4 - n)
        wgllm_jinja_over(c, "memory", c->lim.max_memory, "bytes");
    if (b->heap && b->n + n > c->lim.max_output) wgllm_jinja_over(c, "output", c->lim.max_output, "bytes");
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *np;
        if (b->heap) {
            np = realloc(b->p, cap);
            if (!np) wgllm_jinja_fail(c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (output of %zu bytes)", cap);
        } else {
            np = wgllm_jinja_alloc(c, cap);
            if (b->n) memcpy(np, b->p, b->n);
        }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void wgllm_jinja_sb_put_sub(struct sbuf *b, jv s, size_t off, size_t len) {
    size_t at = b->n;
    wgllm_jinja_sb_put(b, s.u.s.p + off, len);
    const struct jspans *t = s.u.s.t;
    if (!t) return;
    for (size_t i = spans_from(t, off); i < t->n && t->v[i].off < off + len; i++) {
        size_t a = t->v[i].off > off ? t->v[i].off : off;
        size_t e = span_end(&t->v[i]) < off + len ? span_end(&t->v[i]) : off + len;
        sb_mark(b, at + (a - off), e - a);
    }
}
void wgllm_jinja_sb_put_str(struct sbuf *b, jv s) { wgllm_jinja_sb_put_sub(b, s, 0, s.u.s.n); }
static void sb_puts(struct sbuf *b, const char *s) { wgllm_jinja_sb_put(b, s, strlen(s)); }
void wgllm_jinja_sb_pad(struct sbuf *b, char ch, uint64_t count) {
    if (count > b->c->lim.max_memory) wgllm_jinja_over(b->c, "memory", b->c->lim.max_memory, "bytes");
    char chunk[64];
    memset(chunk, ch, sizeof chunk);
    while (count) {
        size_t k = count < sizeof chunk ? (size_t)count : sizeof chunk;
        wgllm_jinja_sb_put(b, chunk, k);
        count -= k;
    }
}

/* JavaScript Number.prototype.toString for finite doubles: shortest round trip. */
static void fmt_js_number(char *out, size_t cap, double f) {
    if (isnan(f)) { snprintf(out, cap, "NaN"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-Infinity" : "Infinity"); return; }
    if (f == 0) { snprintf(out, cap, "0"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = d.ddde[+-]XX; rebuild in JS's notation */
    char digits[32];
    int nd = 0;
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') { neg = true; q++; }
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q)) digits[nd++] = *q;
    int e10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (e10 >= 21 || e10 <= -7) {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    } else if (e10 >= 0) {
        for (int i = 0; i <= e10 || i < nd; i++) {
            if (i == e10 + 1) PUT(".");
            PUT("%c", i < nd ? digits[i] : '0');
        }
    } else {
        PUT("0.");
        for (int i = 0; i < -e10 - 1; i++) PUT("0");
        PUT("%s", digits);
    }
#undef PUT
}

/* The JSON form of string v; if any of v is the request's, all of the form is
 * (escapes do not map byte for byte, and marking the quotes too costs nothing). */
static void json_str(struct sbuf *b, jv v) {
    const char *s = v.u.s.p;
    size_t n = v.u.s.n, at = b->n;
    sb_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (ch < 0x20) {
                char e[8];
                snprintf(e, sizeof e, "\\u%04x", ch);
                sb_puts(b, e);
            } else {
                sb_putc(b, (char)ch);
            }
        }
    }
    sb_putc(b, '"');
    if (v.u.s.t) sb_mark(b, at, b->n - at);
}

void wgllm_jinja_to_json(struct jctx *c, struct sbuf *b, jv v, int indent, int depth, bool undef_null) {
    /* a list may hold itself: the depth bound stops the descent, the steps
     * the breadth (two self-references are 2^depth values) */
    if (depth > 200) wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "tojson: nesting deeper than 200");
    jcharge(c, 1);
    char num[64];
    switch (v.t) {
    case J_UNDEF: sb_puts(b, undef_null ? "null" : "undefined"); return;
    case J_NONE: sb_puts(b, "null"); return;
    case J_BOOL: sb_puts(b, v.u.b ? "true" : "false"); return;
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT:
        if (!isfinite(v.u.f)) { sb_puts(b, "null"); return; }
        fmt_js_number(num, sizeof num, v.u.f); sb_puts(b, num); return;
    case J_STR: json_str(b, v); return;
    case J_ARR: case J_DICT: case J_NS: {
        bool arr = v.t == J_ARR;
        size_t n = arr ? v.u.a->n : v.u.d->n;
        sb_putc(b, arr ? '[' : '{');
        if (n == 0) { sb_putc(b, arr ? ']' : '}'); return; }
        for (size_t i = 0; i < n; i++) {
            if (i) sb_puts(b, indent ? "," : ", ");
            if (indent) {
                sb_putc(b, '\n');
                for (int k = 0; k < (depth + 1) * indent; k++) sb_putc(b, ' ');
            }
            if (arr) {
                wgllm_jinja_to_json(c, b, v.u.a->v[i], indent, depth + 1, undef_null);
            } else {
                json_str(b, wgllm_jinja_dict_key(v.u.d, i));
                sb_puts(b, ": ");
                wgllm_jinja_to_json(c, b, v.u.d->v[i], indent, depth + 1, undef_null);
            }
        }
        if (indent) {
            sb_putc(b, '\n');
            for (int k = 0; k < depth * indent; k++) sb_putc(b, ' ');
        }
        sb_putc(b, arr ? ']' : '}');
        return;
    }
    default: sb_puts(b, "null"); return;
    }
}

/* The text `{{ v }}` prints (RuntimeValue.toString in the reference). */
void wgllm_jinja_to_text(struct jctx *c, struct sbuf *b, jv v) {
    char num[64];
    switch (v.t) {
    case J_UNDEF: case J_NONE: return;
    case J_BOOL: sb_puts(b, v.u.b ? "true" : "false"); return;
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT:
        if (v.u.f == 0 && signbit(v.u.f)) { sb_puts(b, "-0.0"); return; }
        if (isfinite(v.u.f) && v.u.f == floor(v.u.f) && fabs(v.u.f) < 1e21) {
            snprintf(num, sizeof num, "%.1f", v.u.f);
        } else {
            fmt_js_number(num, sizeof num, v.u.f);
        }
        sb_puts(b, num);
        return;
    case J_STR: wgllm_jinja_sb_put_str(b, v); return;
    case J_ARR: case J_DICT: case J_NS: wgllm_jinja_to_json(c, b, v, 0, 0, false); return;
    case J_MACRO: case J_FUNC: sb_puts(b, "[function]"); return;
    }
}

/* The text `a + b` and `a ~ b` use (JavaScript's value.toString()). */
void wgllm_jinja_to_concat(struct jctx *c, struct sbuf *b, jv v) {
    char num[64];
    switch (v.t) {
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT: fmt_js_number(num, sizeof num, v.u.f); sb_puts(b, num); return;
    case J_ARR: case J_DICT: case J_NS:
        wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "cannot concatenate a %s to a string",
                         wgllm_jinja_type_name(v.t));
    default: wgllm_jinja_to_text(c, b, v); return;
    }
}

jv wgllm_jinja_sb_to_value(struct jctx *c, struct sbuf *b) {
    jv v = b->p ? jv_str(b->p, b->n) : jv_str("", 0);
    if (b->sn) {
        struct jspans *t = wgllm_jinja_alloc(c, sizeof *t);
        t->n = b->sn;
        t->v = b->sv;
        v.u.s.t = t;
    }
    b->p = NULL;
    b->n = b->cap = 0;
    b->sv = NULL;
    b->sn = b->scap = 0;
    return v;
}

/* ------------------------------------------------------------------------- */
/* JSON input (messages, tools)                                              */
/* ------------------------------------------------------------------------- */


static _Noreturn void json_fail(struct jsonp *j, const char *what) {
    wgllm_jinja_fail(j->c, WGLLM_STATUS_INVALID_ARGUMENT, "JSON input: %s at offset %ld", what,
          (long)(j->p - j->start));
}
static void json_ws(struct jsonp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}
static void utf8_put(struct sbuf *b, uint32_t cp) {
    char o[4];
    if (cp < 0x80) { o[0] = (char)cp; wgllm_jinja_sb_put(b, o, 1);
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 63));
        wgllm_jinja_sb_put(b, o, 2);
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); wgllm_jinja_sb_put(b, o, 3);
    } else {
        o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); wgllm_jinja_sb_put(b, o, 4);
    }
}
static int hex4(struct jsonp *j) {
    if (j->end - j->p < 4) json_fail(j, "truncated \\u escape");
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = *j->p++;
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= ch - '0';
        else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
        else json_fail(j, "bad \\u escape");
    }
    return v;
}
static jv json_string(struct jsonp *j) {
    struct sbuf b = {.c = j->c};
    j->p++; /* opening quote */
    wgllm_jinja_sb_put(&b, "", 0);
    for (;;) {
        if (j->p >= j->end) { json_fail(j, "unterminated string"); }
        char ch = *j->p++;
        if (ch == '"') break;
        if (ch != '\\') { sb_putc(&b, ch); continue; }
        if (j->p >= j->end) { json_fail(j, "unterminated escape"); }
        ch = *j->p++;
        switch (ch) {
        case 'n': sb_putc(&b, '\n'); break;
        case 't': sb_putc(&b, '\t'); break;
        case 'r': sb_putc(&b, '\r'); break;
        case 'b': sb_putc(&b, '\b'); break;
        case 'f': sb_putc(&b, '\f'); break;
        case '/': case '\\': case '"': sb_putc(&b, ch); break;
        case 'u': {
            uint32_t cp = (uint32_t)hex4(j);
            if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                j->p += 2;
                uint32_t lo = (uint32_t)hex4(j);
                if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else { utf8_put(&b, 0xfffd); cp = lo; }
            }
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            utf8_put(&b, cp);
            break;
        }
        default: json_fail(j, "bad escape");
        }
    }
    jv r = wgllm_jinja_sb_to_value(j->c, &b);
    if (j->request) r.u.s.t = &wgllm_jinja_spans_all;
    return r;
}

/* A role that is a plain word counts as the template's text: templates build
 * control tokens from it (phi-3 writes '<|' + role + '|>'). Any other role is
 * the request's like the rest, so it cannot carry control tokens either. */
static bool plain_role(jv v) {
    if (v.t != J_STR || v.u.s.n == 0 || v.u.s.n > 64) return false;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        if (!isalnum((unsigned char)ch) && ch != '_' && ch != '-') return false;
    }
    return true;
}
jv wgllm_jinja_json_value(struct jsonp *j) {
    json_ws(j);
    if (j->p >= j->end) json_fail(j, "unexpected end");
    if (++j->depth > 200) json_fail(j, "nesting deeper than 200");
    jv r;
    char ch = *j->p;
    if (ch == '"') {
        r = json_string(j);
    } else if (ch == '[') {
        j->p++;
        r = wgllm_jinja_arr_new(j->c);
        json_ws(j);
        if (j->p < j->end && *j->p == ']') j->p++;
        else for (;;) {
            wgllm_jinja_arr_push(j->c, r.u.a, wgllm_jinja_json_value(j));
            json_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == ']') { j->p++; break; }
            json_fail(j, "expected , or ]");
        }
    } else if (ch == '{') {
        j->p++;
        r = wgllm_jinja_dict_new(j->c, J_DICT);
        json_ws(j);
        if (j->p < j->end && *j->p == '}') j->p++;
        else for (;;) {
            json_ws(j);
            if (j->p >= j->end || *j->p != '"') json_fail(j, "expected a key string");
            jv k = json_string(j);
            json_ws(j);
            if (j->p >= j->end || *j->p != ':') json_fail(j, "expected :");
            j->p++;
            jv x = wgllm_jinja_json_value(j);
            if (k.u.s.n == 4 && !memcmp(k.u.s.p, "role", 4) && plain_role(x)) x.u.s.t = NULL;
            wgllm_jinja_dict_set_key(j->c, r.u.d, k, x);
            json_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == '}') { j->p++; break; }
            json_fail(j, "expected , or }");
        }
    } else if (j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
        j->p += 4; r = jv_bool(true);
    } else if (j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
        j->p += 5; r = jv_bool(false);
    } else if (j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
        j->p += 4; r = jv_none();
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        char tmp[64];
        size_t n = 0;
        while (j->p < j->end && n < sizeof tmp - 1 && strchr("+-0123456789.eE", *j->p)) tmp[n++] = *j->p++;
        tmp[n] = 0;
        char *e;
        double d = strtod(tmp, &e);
        if (e == tmp) json_fail(j, "bad number");
        /* the reference parses JSON into JavaScript numbers: integral -> integer */
        if (d == floor(d) && fabs(d) < 9007199254740992.0) r = jv_int((int64_t)d);
        else r = jv_float(d);
    } else {
        json_fail(j, "unexpected character");
    }
    j->depth--;
    return r;
}


