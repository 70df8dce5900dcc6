/*
 * jinja.c - the Jinja subset interpreter behind chat templates: preprocessing
 * (trim_blocks/lstrip_blocks as transformers sets them), lexer, parser to an AST,
 * and a tree-walking interpreter whose value semantics follow @huggingface/jinja
 * (the reference chat templates are checked against), not Python's Jinja2, where
 * the two differ (string concatenation of numbers, `==` on objects by identity,
 * JavaScript's trim() whitespace set, JSON formatting of tojson).
 *
 * Memory: every value and AST node lives in an arena freed in one go, so error
 * paths (longjmp out of any depth) never leak. Recursion depth is bounded so no
 * input can overflow the stack.
 */
#include "chat/chat.h"

#include "base/base.h"

#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* arena                                                                     */
/* ------------------------------------------------------------------------- */

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct jarena {
    struct arena_block *head;
};

struct jctx {
    struct jarena *arena;
    jmp_buf jb;
    struct wgllm_error *err;
    enum wgllm_status status;
};

static void *jalloc(struct jctx *c, size_t n);

static _Noreturn void jfail(struct jctx *c, enum wgllm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void jfail(struct jctx *c, enum wgllm_status st, const char *fmt, ...) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    wgllm_error_set(c->err, st, "chat template: %s", buf);
    c->status = st;
    longjmp(c->jb, 1);
}

static void *jalloc(struct jctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct arena_block *b = c->arena->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) jfail(c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (%zu bytes)", n);
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

static void arena_free(struct jarena *a) {
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

static char *jstrdup(struct jctx *c, const char *s, size_t n) {
    char *p = jalloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------------- */
/* values                                                                    */
/* ------------------------------------------------------------------------- */

enum jt { J_UNDEF, J_NONE, J_BOOL, J_INT, J_FLOAT, J_STR, J_ARR, J_DICT, J_NS, J_MACRO, J_FUNC };

struct jarr;
struct jdict;
struct node;

typedef struct jv {
    enum jt t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        struct jarr *a;
        struct jdict *d;   /* J_DICT and J_NS */
        const struct node *m;
        int fn;
    } u;
} jv;

struct jarr { size_t n, cap; jv *v; };
struct jdict { size_t n, cap; const char **kp; size_t *kn; jv *v; };

static jv jv_undef(void) { jv v = {.t = J_UNDEF}; return v; }
static jv jv_none(void) { jv v = {.t = J_NONE}; return v; }
static jv jv_bool(bool b) { jv v = {.t = J_BOOL}; v.u.b = b; return v; }
static jv jv_int(int64_t i) { jv v = {.t = J_INT}; v.u.i = i; return v; }
static jv jv_float(double f) { jv v = {.t = J_FLOAT}; v.u.f = f; return v; }
static jv jv_str(const char *p, size_t n) { jv v = {.t = J_STR}; v.u.s.p = p; v.u.s.n = n; return v; }

static jv jv_arr_new(struct jctx *c) {
    jv v = {.t = J_ARR};
    v.u.a = jalloc(c, sizeof *v.u.a);
    return v;
}
static void arr_push(struct jctx *c, struct jarr *a, jv x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}
static jv jv_dict_new(struct jctx *c, enum jt t) {
    jv v = {.t = t};
    v.u.d = jalloc(c, sizeof *v.u.d);
    return v;
}
static jv *dict_find(const struct jdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->kn[i] == kn && memcmp(d->kp[i], k, kn) == 0) return &d->v[i];
    return NULL;
}
static void dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, jv x) {
    jv *slot = dict_find(d, k, kn);
    if (slot) { *slot = x; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        const char **kp = jalloc(c, cap * sizeof *kp);
        size_t *knn = jalloc(c, cap * sizeof *knn);
        jv *v = jalloc(c, cap * sizeof *v);
        if (d->n) {
            memcpy(kp, d->kp, d->n * sizeof *kp);
            memcpy(knn, d->kn, d->n * sizeof *knn);
            memcpy(v, d->v, d->n * sizeof *v);
        }
        d->kp = kp; d->kn = knn; d->v = v; d->cap = cap;
    }
    d->kp[d->n] = k;
    d->kn[d->n] = kn;
    d->v[d->n++] = x;
}
static void dict_setz(struct jctx *c, struct jdict *d, const char *k, jv x) {
    dict_set(c, d, k, strlen(k), x);
}

static const char *jt_name(enum jt t) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float", "string",
                                  "list", "dict", "namespace", "macro", "function"};
    return names[t];
}

static bool jv_truthy(jv v) {
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
/* string builder                                                            */
/* ------------------------------------------------------------------------- */

struct sbuf { char *p; size_t n, cap; struct jctx *c; };

/* Builders grow inside the arena, so a longjmp out of any depth leaks nothing. */
static void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = jalloc(b->c, cap);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_putc(struct sbuf *b, char ch) { sb_put(b, &ch, 1); }

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

static void json_str(struct sbuf *b, const char *s, size_t n) {
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
}

static void to_json(struct jctx *c, struct sbuf *b, jv v, int indent, int depth, bool undef_null) {
    if (depth > 200) jfail(c, WGLLM_STATUS_UNSUPPORTED, "tojson: nesting deeper than 200");
    char num[64];
    switch (v.t) {
    case J_UNDEF: sb_puts(b, undef_null ? "null" : "undefined"); return;
    case J_NONE: sb_puts(b, "null"); return;
    case J_BOOL: sb_puts(b, v.u.b ? "true" : "false"); return;
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT:
        if (!isfinite(v.u.f)) { sb_puts(b, "null"); return; }
        fmt_js_number(num, sizeof num, v.u.f); sb_puts(b, num); return;
    case J_STR: json_str(b, v.u.s.p, v.u.s.n); return;
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
                to_json(c, b, v.u.a->v[i], indent, depth + 1, undef_null);
            } else {
                json_str(b, v.u.d->kp[i], v.u.d->kn[i]);
                sb_puts(b, ": ");
                to_json(c, b, v.u.d->v[i], indent, depth + 1, undef_null);
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
static void to_text(struct jctx *c, struct sbuf *b, jv v) {
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
    case J_STR: sb_put(b, v.u.s.p, v.u.s.n); return;
    case J_ARR: case J_DICT: case J_NS: to_json(c, b, v, 0, 0, false); return;
    case J_MACRO: case J_FUNC: sb_puts(b, "[function]"); return;
    }
}

/* The text `a + b` and `a ~ b` use (JavaScript's value.toString()). */
static void to_concat(struct jctx *c, struct sbuf *b, jv v) {
    char num[64];
    switch (v.t) {
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT: fmt_js_number(num, sizeof num, v.u.f); sb_puts(b, num); return;
    case J_ARR: case J_DICT: case J_NS:
        jfail(c, WGLLM_STATUS_UNSUPPORTED, "cannot concatenate a %s to a string", jt_name(v.t));
    default: to_text(c, b, v); return;
    }
}

static jv sb_to_value(struct jctx *c, struct sbuf *b) {
    jv v = b->p ? jv_str(b->p, b->n) : jv_str("", 0);
    (void)c;
    b->p = NULL;
    b->n = b->cap = 0;
    return v;
}

/* ------------------------------------------------------------------------- */
/* JSON input (messages, tools)                                              */
/* ------------------------------------------------------------------------- */

struct jsonp { struct jctx *c; const char *p, *end, *start; int depth; };

static _Noreturn void json_fail(struct jsonp *j, const char *what) {
    jfail(j->c, WGLLM_STATUS_INVALID_ARGUMENT, "JSON input: %s at offset %ld", what,
          (long)(j->p - j->start));
}
static void json_ws(struct jsonp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}
static void utf8_put(struct sbuf *b, uint32_t cp) {
    char o[4];
    if (cp < 0x80) { o[0] = (char)cp; sb_put(b, o, 1); }
    else if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); sb_put(b, o, 2); }
    else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); sb_put(b, o, 3);
    } else {
        o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); sb_put(b, o, 4);
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
    sb_put(&b, "", 0);
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
    return sb_to_value(j->c, &b);
}
static jv json_value(struct jsonp *j) {
    json_ws(j);
    if (j->p >= j->end) json_fail(j, "unexpected end");
    if (++j->depth > 200) json_fail(j, "nesting deeper than 200");
    jv r;
    char ch = *j->p;
    if (ch == '"') {
        r = json_string(j);
    } else if (ch == '[') {
        j->p++;
        r = jv_arr_new(j->c);
        json_ws(j);
        if (j->p < j->end && *j->p == ']') j->p++;
        else for (;;) {
            arr_push(j->c, r.u.a, json_value(j));
            json_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == ']') { j->p++; break; }
            json_fail(j, "expected , or ]");
        }
    } else if (ch == '{') {
        j->p++;
        r = jv_dict_new(j->c, J_DICT);
        json_ws(j);
        if (j->p < j->end && *j->p == '}') j->p++;
        else for (;;) {
            json_ws(j);
            if (j->p >= j->end || *j->p != '"') json_fail(j, "expected a key string");
            jv k = json_string(j);
            json_ws(j);
            if (j->p >= j->end || *j->p != ':') json_fail(j, "expected :");
            j->p++;
            dict_set(j->c, r.u.d, k.u.s.p, k.u.s.n, json_value(j));
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


/* ------------------------------------------------------------------------- */
/* lexer                                                                     */
/* ------------------------------------------------------------------------- */

enum tk { T_EOF, T_TEXT, T_VOPEN, T_VCLOSE, T_SOPEN, T_SCLOSE, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

struct token {
    enum tk t;
    const char *s;  /* text / name / op / decoded string */
    size_t n;
    int64_t i;
    double f;
    int line, col;
};

struct lexer {
    struct jctx *c;
    const char *src;
    size_t len, pos;
    struct token *toks;
    size_t ntok, cap;
};

static void lex_pos(const struct lexer *L, size_t pos, int *line, int *col) {
    int ln = 1, cl = 1;
    for (size_t i = 0; i < pos && i < L->len; i++) {
        if (L->src[i] == '\n') { ln++; cl = 1; } else cl++;
    }
    *line = ln;
    *col = cl;
}

static _Noreturn void lex_fail(struct lexer *L, size_t pos, const char *what) {
    int line, col;
    lex_pos(L, pos, &line, &col);
    jfail(L->c, WGLLM_STATUS_BAD_FORMAT, "syntax error at line %d, column %d: %s", line, col, what);
}

static struct token *lex_push(struct lexer *L, enum tk t, const char *s, size_t n, size_t pos) {
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct token *nt = jalloc(L->c, cap * sizeof *nt);
        if (L->ntok) memcpy(nt, L->toks, L->ntok * sizeof *nt);
        L->toks = nt;
        L->cap = cap;
    }
    struct token *tk = &L->toks[L->ntok++];
    memset(tk, 0, sizeof *tk);
    tk->t = t;
    tk->s = s;
    tk->n = n;
    lex_pos(L, pos, &tk->line, &tk->col);
    return tk;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

/* rstrip of the last text token (for `{%-`, `{{-`, `{#-`) */
static void lex_rstrip_prev(struct lexer *L) {
    if (L->ntok && L->toks[L->ntok - 1].t == T_TEXT) {
        struct token *tk = &L->toks[L->ntok - 1];
        while (tk->n && is_ws(tk->s[tk->n - 1])) tk->n--;
    }
}

/* transformers' preprocessing as the reference implements it: drop one final
 * newline; lstrip_blocks removes spaces/tabs at a line start before `{%`, `{#`
 * (and `{-`); trim_blocks removes the newline right after `%}`, `#}` (and `-}`). */
static char *preprocess(struct jctx *c, const char *src, size_t len, size_t *out_len) {
    if (len && src[len - 1] == '\n') len--;
    char *a = jalloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        bool line_start = i == 0 || src[i - 1] == '\n' || src[i - 1] == '\r';
        if (line_start) {
            size_t k = i;
            while (k < len && (src[k] == ' ' || src[k] == '\t')) k++;
            if (k > i && k + 1 < len && src[k] == '{' && (src[k + 1] == '#' || src[k + 1] == '%' || src[k + 1] == '-')) {
                i = k;
                continue;
            }
        }
        a[n++] = src[i++];
    }
    char *b = jalloc(c, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        b[m++] = a[i];
        if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < n && a[i + 1] == '\n') i++;
    }
    b[m] = 0;
    *out_len = m;
    return b;
}

static const char *OPS3[] = {"not", NULL};
static const char *OPS2[] = {"==", "!=", "<=", ">=", "//", "**", NULL};

static void lex_expr(struct lexer *L, bool stmt) {
    int brace = 0;
    for (;;) {
        while (L->pos < L->len && is_ws(L->src[L->pos])) L->pos++;
        if (L->pos >= L->len) lex_fail(L, L->pos, stmt ? "unclosed {% tag" : "unclosed {{ tag");
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        size_t start = L->pos;
        /* closing tags */
        if (brace == 0) {
            bool trim = false;
            size_t k = 0;
            if (p[0] == '-' && left >= 3 && p[2] == '}' && (p[1] == '}' || p[1] == '%')) { trim = true; k = 1; }
            if (left >= k + 2 && p[k + 1] == '}' && ((!stmt && p[k] == '}') || (stmt && p[k] == '%'))) {
                lex_push(L, stmt ? T_SCLOSE : T_VCLOSE, p, k + 2, start);
                L->pos += k + 2;
                if (trim) while (L->pos < L->len && is_ws(L->src[L->pos])) L->pos++;
                return;
            }
        }
        char ch = p[0];
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t n = 0;
            while (n < left && (isalnum((unsigned char)p[n]) || p[n] == '_')) n++;
            lex_push(L, T_NAME, p, n, start);
            L->pos += n;
        } else if (isdigit((unsigned char)ch)) {
            size_t n = 0;
            while (n < left && isdigit((unsigned char)p[n])) n++;
            bool fl = n + 1 < left && p[n] == '.' && isdigit((unsigned char)p[n + 1]);
            if (fl) { n++; while (n < left && isdigit((unsigned char)p[n])) n++; }
            char tmp[64];
            size_t m = n < 63 ? n : 63;
            memcpy(tmp, p, m);
            tmp[m] = 0;
            struct token *tk = lex_push(L, fl ? T_FLOAT : T_INT, p, n, start);
            if (fl) tk->f = strtod(tmp, NULL);
            else tk->i = strtoll(tmp, NULL, 10);
            L->pos += n;
        } else if (ch == '"' || ch == '\'') {
            struct sbuf b = {.c = L->c};
            size_t i = 1;
            sb_put(&b, "", 0);
            for (;;) {
                if (i >= left) { lex_fail(L, start, "unterminated string literal"); }
                char d = p[i++];
                if (d == ch) break;
                if (d == '\\') {
                    if (i >= left) { lex_fail(L, start, "unterminated string literal"); }
                    char e = p[i++];
                    switch (e) {
                    case 'n': d = '\n'; break;
                    case 't': d = '\t'; break;
                    case 'r': d = '\r'; break;
                    case 'b': d = '\b'; break;
                    case 'f': d = '\f'; break;
                    case 'v': d = '\v'; break;
                    case '\'': case '"': case '\\': d = e; break;
                    default: sb_putc(&b, '\\'); d = e; break;
                    }
                }
                sb_putc(&b, d);
            }
            jv s = sb_to_value(L->c, &b);
            lex_push(L, T_STR, s.u.s.p, s.u.s.n, start);
            L->pos += i;
        } else {
            size_t n = 0;
            for (int k = 0; OPS2[k]; k++)
                if (left >= 2 && memcmp(p, OPS2[k], 2) == 0) n = 2;
            if (!n) {
                if (!strchr("+-*/%~|.,:()[]{}<>=!", ch)) lex_fail(L, start, "unexpected character");
                n = 1;
                if (ch == '{') brace++;
                if (ch == '}') brace--;
                if (ch == '!') lex_fail(L, start, "unexpected '!'");
            }
            lex_push(L, T_OP, p, n, start);
            L->pos += n;
        }
    }
    (void)OPS3;
}

static void lex_all(struct lexer *L) {
    bool lstrip_next = false;
    while (L->pos < L->len) {
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        size_t k = 0;
        while (k + 1 < left && !(p[k] == '{' && (p[k + 1] == '{' || p[k + 1] == '%' || p[k + 1] == '#'))) k++;
        if (k + 1 >= left) k = left;
        if (k > 0) {
            const char *s = p;
            size_t n = k;
            if (lstrip_next) while (n && is_ws(*s)) { s++; n--; }
            if (n) lex_push(L, T_TEXT, s, n, L->pos);
            L->pos += k;
        }
        lstrip_next = false;
        if (L->pos >= L->len) break;
        p = L->src + L->pos;
        size_t start = L->pos;
        bool trim_left = L->pos + 2 < L->len && p[2] == '-';
        if (trim_left) lex_rstrip_prev(L);
        if (p[1] == '#') {
            const char *e = NULL;
            for (size_t i = L->pos + 2; i + 1 < L->len; i++)
                if (L->src[i] == '#' && L->src[i + 1] == '}') { e = L->src + i; break; }
            if (!e) lex_fail(L, start, "unclosed comment");
            if (e > p + 2 && e[-1] == '-') lstrip_next = true;
            L->pos = (size_t)(e - L->src) + 2;
            if (lstrip_next) { while (L->pos < L->len && is_ws(L->src[L->pos])) L->pos++; lstrip_next = false; }
            continue;
        }
        bool stmt = p[1] == '%';
        lex_push(L, stmt ? T_SOPEN : T_VOPEN, p, 2, start);
        L->pos += trim_left ? 3 : 2;
        lex_expr(L, stmt);
    }
    lex_push(L, T_EOF, "", 0, L->len);
}

/* ------------------------------------------------------------------------- */
/* AST and parser                                                            */
/* ------------------------------------------------------------------------- */

enum nk {
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_CALLBLOCK,
    N_LIT, N_NAME, N_LIST, N_DICT, N_MEMBER, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BIN, N_COND, N_KWARG,
};

struct nlist { struct node **v; size_t n, cap; };

struct node {
    enum nk k;
    int line, col;
    const char *s;   /* names, op text, text */
    size_t sn;
    jv lit;
    bool neg;        /* `is not` */
    struct node *a, *b, *c, *d;
    struct nlist l1, l2;
};

struct parser {
    struct jctx *c;
    struct lexer *L;
    size_t i;
    int depth;
};

static void nl_push(struct jctx *c, struct nlist *l, struct node *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct node **nv = jalloc(c, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static struct token *pk(struct parser *P) { return &P->L->toks[P->i]; }

static _Noreturn void parse_fail(struct parser *P, const char *fmt, const char *arg) {
    struct token *t = pk(P);
    char what[200];
    snprintf(what, sizeof what, fmt, arg);
    jfail(P->c, WGLLM_STATUS_BAD_FORMAT, "syntax error at line %d, column %d: %s (near '%.*s')",
          t->line, t->col, what, (int)(t->n > 20 ? 20 : t->n), t->s);
}

static struct node *mk(struct parser *P, enum nk k) {
    struct node *n = jalloc(P->c, sizeof *n);
    n->k = k;
    n->line = pk(P)->line;
    n->col = pk(P)->col;
    return n;
}

static bool is_op(struct parser *P, const char *op) {
    struct token *t = pk(P);
    return t->t == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static bool is_kw(struct parser *P, const char *kw) {
    struct token *t = pk(P);
    return t->t == T_NAME && t->n == strlen(kw) && memcmp(t->s, kw, t->n) == 0;
}
static bool is_kw_at(struct parser *P, size_t off, const char *kw) {
    struct token *t = &P->L->toks[P->i + off < P->L->ntok ? P->i + off : P->L->ntok - 1];
    return t->t == T_NAME && t->n == strlen(kw) && memcmp(t->s, kw, t->n) == 0;
}
static void expect_op(struct parser *P, const char *op) {
    if (!is_op(P, op)) parse_fail(P, "expected '%s'", op);
    P->i++;
}
static void expect_kw(struct parser *P, const char *kw) {
    if (!is_kw(P, kw)) parse_fail(P, "expected '%s'", kw);
    P->i++;
}
static struct token *expect_name(struct parser *P) {
    if (pk(P)->t != T_NAME) parse_fail(P, "expected a name%s", "");
    return &P->L->toks[P->i++];
}
static void expect_sclose(struct parser *P) {
    if (pk(P)->t != T_SCLOSE) parse_fail(P, "expected '%s'", "%}");
    P->i++;
}

static void enter(struct parser *P) {
    if (++P->depth > 200) parse_fail(P, "nesting deeper than %s", "200");
}

static struct node *p_expr(struct parser *P);

static void p_args(struct parser *P, struct node *call) {
    /* after '(' */
    while (!is_op(P, ")")) {
        if (pk(P)->t == T_NAME && P->L->toks[P->i + 1].t == T_OP && P->L->toks[P->i + 1].n == 1 &&
            P->L->toks[P->i + 1].s[0] == '=') {
            struct node *kw = mk(P, N_KWARG);
            struct token *t = expect_name(P);
            kw->s = t->s;
            kw->sn = t->n;
            P->i++;
            kw->a = p_expr(P);
            nl_push(P->c, &call->l2, kw);
        } else {
            nl_push(P->c, &call->l1, p_expr(P));
        }
        if (!is_op(P, ",")) break;
        P->i++;
    }
    expect_op(P, ")");
}

static struct node *p_primary(struct parser *P) {
    enter(P);
    struct token *t = pk(P);
    struct node *n;
    if (t->t == T_STR) {
        n = mk(P, N_LIT);
        /* adjacent string literals concatenate */
        struct sbuf b = {.c = P->c};
        sb_put(&b, "", 0);
        while (pk(P)->t == T_STR) { sb_put(&b, pk(P)->s, pk(P)->n); P->i++; }
        n->lit = sb_to_value(P->c, &b);
    } else if (t->t == T_INT) {
        n = mk(P, N_LIT); n->lit = jv_int(t->i); P->i++;
    } else if (t->t == T_FLOAT) {
        n = mk(P, N_LIT); n->lit = jv_float(t->f); P->i++;
    } else if (t->t == T_NAME) {
        n = mk(P, N_NAME);
        n->s = t->s;
        n->sn = t->n;
        P->i++;
#define KW(x) (t->n == strlen(x) && memcmp(t->s, x, t->n) == 0)
        if (KW("true") || KW("True")) { n->k = N_LIT; n->lit = jv_bool(true); }
        else if (KW("false") || KW("False")) { n->k = N_LIT; n->lit = jv_bool(false); }
        else if (KW("none") || KW("None")) { n->k = N_LIT; n->lit = jv_none(); }
#undef KW
    } else if (is_op(P, "(")) {
        P->i++;
        n = p_expr(P);
        if (is_op(P, ",")) { /* tuple */
            struct node *l = mk(P, N_LIST);
            nl_push(P->c, &l->l1, n);
            while (is_op(P, ",")) {
                P->i++;
                if (is_op(P, ")")) break;
                nl_push(P->c, &l->l1, p_expr(P));
            }
            n = l;
        }
        expect_op(P, ")");
    } else if (is_op(P, "[")) {
        P->i++;
        n = mk(P, N_LIST);
        while (!is_op(P, "]")) {
            nl_push(P->c, &n->l1, p_expr(P));
            if (!is_op(P, ",")) break;
            P->i++;
        }
        expect_op(P, "]");
    } else if (is_op(P, "{")) {
        P->i++;
        n = mk(P, N_DICT);
        while (!is_op(P, "}")) {
            nl_push(P->c, &n->l1, p_expr(P));
            expect_op(P, ":");
            nl_push(P->c, &n->l2, p_expr(P));
            if (!is_op(P, ",")) break;
            P->i++;
        }
        expect_op(P, "}");
    } else {
        parse_fail(P, "expected an expression%s", "");
    }
    /* postfix: .name, [index/slice], (call) */
    for (;;) {
        if (is_op(P, ".")) {
            P->i++;
            struct node *m = mk(P, N_MEMBER);
            struct token *nt = pk(P);
            if (nt->t != T_NAME && nt->t != T_INT) parse_fail(P, "expected an attribute name%s", "");
            m->s = nt->s;
            m->sn = nt->n;
            P->i++;
            m->a = n;
            n = m;
        } else if (is_op(P, "[")) {
            P->i++;
            struct node *x = mk(P, N_INDEX);
            x->a = n;
            struct node *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (is_op(P, ":")) {
                    slice = true;
                    P->i++;
                    if (++np > 2) parse_fail(P, "too many ':' in slice%s", "");
                    continue;
                }
                if (is_op(P, "]")) break;
                if (parts[np]) parse_fail(P, "expected ']'%s", "");
                parts[np] = p_expr(P);
            }
            expect_op(P, "]");
            if (slice) { x->k = N_SLICE; x->b = parts[0]; x->c = parts[1]; x->d = parts[2]; }
            else {
                if (!parts[0]) parse_fail(P, "empty index%s", "");
                x->b = parts[0];
            }
            n = x;
        } else if (is_op(P, "(")) {
            P->i++;
            struct node *call = mk(P, N_CALL);
            call->a = n;
            p_args(P, call);
            n = call;
        } else {
            break;
        }
    }
    P->depth--;
    return n;
}

static struct node *p_unary(struct parser *P);

/* filters `|` and tests `is` bind tighter than any binary operator */
static struct node *p_filtered(struct parser *P) {
    struct node *n = p_primary(P);
    for (;;) {
        if (is_op(P, "|")) {
            P->i++;
            struct node *f = mk(P, N_FILTER);
            struct token *t = expect_name(P);
            f->s = t->s;
            f->sn = t->n;
            f->a = n;
            if (is_op(P, "(")) { P->i++; p_args(P, f); }
            n = f;
        } else if (is_kw(P, "is")) {
            P->i++;
            struct node *f = mk(P, N_TEST);
            if (is_kw(P, "not")) { f->neg = true; P->i++; }
            struct token *t = pk(P);
            if (t->t != T_NAME) parse_fail(P, "expected a test name after 'is'%s", "");
            f->s = t->s;
            f->sn = t->n;
            P->i++;
            f->a = n;
            if (is_op(P, "(")) { P->i++; p_args(P, f); }
            else if (pk(P)->t == T_STR || pk(P)->t == T_INT || pk(P)->t == T_FLOAT) nl_push(P->c, &f->l1, p_primary(P));
            n = f;
        } else {
            break;
        }
    }
    return n;
}

static struct node *p_unary(struct parser *P) {
    if (is_op(P, "-") || is_op(P, "+")) {
        enter(P);
        struct node *u = mk(P, N_UNARY);
        u->s = pk(P)->s;
        u->sn = 1;
        P->i++;
        u->a = p_unary(P);
        P->depth--;
        return u;
    }
    return p_filtered(P);
}

static struct node *bin(struct parser *P, const char *op, struct node *a, struct node *b) {
    struct node *n = mk(P, N_BIN);
    n->s = op;
    n->sn = strlen(op);
    n->a = a;
    n->b = b;
    return n;
}

static struct node *p_mul(struct parser *P) {
    struct node *n = p_unary(P);
    for (;;) {
        const char *op = is_op(P, "*") ? "*" : is_op(P, "/") ? "/" : is_op(P, "//") ? "//" : is_op(P, "%") ? "%" : NULL;
        if (!op) return n;
        P->i++;
        n = bin(P, op, n, p_unary(P));
    }
}
static struct node *p_add(struct parser *P) {
    struct node *n = p_mul(P);
    for (;;) {
        const char *op = is_op(P, "+") ? "+" : is_op(P, "-") ? "-" : NULL;
        if (!op) return n;
        P->i++;
        n = bin(P, op, n, p_mul(P));
    }
}
static struct node *p_concat(struct parser *P) {
    struct node *n = p_add(P);
    while (is_op(P, "~")) {
        P->i++;
        n = bin(P, "~", n, p_add(P));
    }
    return n;
}
static struct node *p_compare(struct parser *P) {
    struct node *n = p_concat(P);
    for (;;) {
        const char *op = NULL;
        static const char *ops[] = {"==", "!=", "<=", ">=", "<", ">"};
        for (int k = 0; k < 6 && !op; k++) if (is_op(P, ops[k])) op = ops[k];
        if (op) { P->i++; }
        else if (is_kw(P, "in")) { op = "in"; P->i++; }
        else if (is_kw(P, "not") && is_kw_at(P, 1, "in")) { op = "not in"; P->i += 2; }
        else return n;
        n = bin(P, op, n, p_concat(P));
    }
}
static struct node *p_not(struct parser *P) {
    if (is_kw(P, "not")) {
        enter(P);
        struct node *u = mk(P, N_UNARY);
        u->s = "not";
        u->sn = 3;
        P->i++;
        u->a = p_not(P);
        P->depth--;
        return u;
    }
    return p_compare(P);
}
static struct node *p_and(struct parser *P) {
    struct node *n = p_not(P);
    while (is_kw(P, "and")) { P->i++; n = bin(P, "and", n, p_not(P)); }
    return n;
}
static struct node *p_or(struct parser *P) {
    struct node *n = p_and(P);
    while (is_kw(P, "or")) { P->i++; n = bin(P, "or", n, p_and(P)); }
    return n;
}

static struct node *p_expr(struct parser *P) {
    enter(P);
    struct node *n = p_or(P);
    if (is_kw(P, "if")) {
        P->i++;
        struct node *t = mk(P, N_COND);
        t->a = n;
        t->b = p_or(P);
        if (is_kw(P, "else")) { P->i++; t->c = p_expr(P); }
        n = t;
    }
    P->depth--;
    return n;
}

/* statements */
static void p_body(struct parser *P, struct nlist *out, const char *const *stops);

static bool at_stmt_kw(struct parser *P, const char *const *stops) {
    if (pk(P)->t != T_SOPEN) return false;
    for (int k = 0; stops[k]; k++) if (is_kw_at(P, 1, stops[k])) return true;
    return false;
}

static struct node *p_if(struct parser *P) {
    /* at the condition, after 'if' / 'elif' */
    struct node *n = mk(P, N_IF);
    n->a = p_expr(P);
    expect_sclose(P);
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    p_body(P, &n->l1, stops);
    if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endif %%} for the if at line %s", "?");
    P->i++;
    if (is_kw(P, "elif")) {
        P->i++;
        enter(P);
        nl_push(P->c, &n->l2, p_if(P));
        P->depth--;
        return n;
    }
    if (is_kw(P, "else")) {
        P->i++;
        expect_sclose(P);
        static const char *const stops2[] = {"endif", NULL};
        p_body(P, &n->l2, stops2);
        if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endif %%}%s", "");
        P->i++;
    }
    expect_kw(P, "endif");
    expect_sclose(P);
    return n;
}

static struct node *p_stmt(struct parser *P) {
    /* at the keyword after {% */
    struct token *t = pk(P);
    if (is_kw(P, "if")) {
        P->i++;
        return p_if(P);
    }
    if (is_kw(P, "for")) {
        P->i++;
        struct node *n = mk(P, N_FOR);
        do {
            struct node *v = mk(P, N_NAME);
            struct token *nt = expect_name(P);
            v->s = nt->s;
            v->sn = nt->n;
            nl_push(P->c, &n->l1, v);
            if (!is_op(P, ",")) break;
            P->i++;
        } while (1);
        expect_kw(P, "in");
        n->a = p_or(P);
        if (is_kw(P, "if")) { P->i++; n->b = p_or(P); }
        if (is_kw(P, "recursive")) parse_fail(P, "recursive loops are not supported%s", "");
        expect_sclose(P);
        static const char *const stops[] = {"else", "endfor", NULL};
        struct node *body = mk(P, N_LIST);
        p_body(P, &body->l1, stops);
        n->c = body;
        if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endfor %%}%s", "");
        P->i++;
        if (is_kw(P, "else")) {
            P->i++;
            expect_sclose(P);
            static const char *const stops2[] = {"endfor", NULL};
            struct node *eb = mk(P, N_LIST);
            p_body(P, &eb->l1, stops2);
            n->d = eb;
            if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endfor %%}%s", "");
            P->i++;
        }
        expect_kw(P, "endfor");
        expect_sclose(P);
        return n;
    }
    if (is_kw(P, "set")) {
        P->i++;
        struct node *n = mk(P, N_SET);
        struct node *target = mk(P, N_NAME);
        struct token *nt = expect_name(P);
        target->s = nt->s;
        target->sn = nt->n;
        if (is_op(P, ".")) {
            P->i++;
            struct node *m = mk(P, N_MEMBER);
            struct token *at = expect_name(P);
            m->s = at->s;
            m->sn = at->n;
            m->a = target;
            target = m;
        } else if (is_op(P, ",")) {
            parse_fail(P, "tuple assignment in set is not supported%s", "");
        }
        n->a = target;
        if (is_op(P, "=")) {
            P->i++;
            n->b = p_expr(P);
            expect_sclose(P);
        } else {
            expect_sclose(P);
            static const char *const stops[] = {"endset", NULL};
            p_body(P, &n->l1, stops);
            if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endset %%}%s", "");
            P->i++;
            expect_kw(P, "endset");
            expect_sclose(P);
        }
        return n;
    }
    if (is_kw(P, "macro")) {
        P->i++;
        struct node *n = mk(P, N_MACRO);
        struct token *nt = expect_name(P);
        n->s = nt->s;
        n->sn = nt->n;
        expect_op(P, "(");
        while (!is_op(P, ")")) {
            struct node *prm = mk(P, N_NAME);
            struct token *pt = expect_name(P);
            prm->s = pt->s;
            prm->sn = pt->n;
            if (is_op(P, "=")) { P->i++; prm->a = p_expr(P); }
            nl_push(P->c, &n->l1, prm);
            if (!is_op(P, ",")) break;
            P->i++;
        }
        expect_op(P, ")");
        expect_sclose(P);
        static const char *const stops[] = {"endmacro", NULL};
        p_body(P, &n->l2, stops);
        if (pk(P)->t != T_SOPEN) parse_fail(P, "missing {%% endmacro %%}%s", "");
        P->i++;
        expect_kw(P, "endmacro");
        expect_sclose(P);
        return n;
    }
    if (is_kw(P, "break") || is_kw(P, "continue")) {
        struct node *n = mk(P, is_kw(P, "break") ? N_BREAK : N_CONTINUE);
        P->i++;
        expect_sclose(P);
        return n;
    }
    if (is_kw(P, "generation") || is_kw(P, "endgeneration")) { /* transformers' marker tag */
        P->i++;
        expect_sclose(P);
        struct node *n = mk(P, N_TEXT);
        n->s = "";
        return n;
    }
    if (t->t == T_NAME) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(t->n > 60 ? 60 : t->n), t->s);
        parse_fail(P, "unsupported or unexpected statement '%s'", name);
    }
    parse_fail(P, "expected a statement keyword%s", "");
}

static void p_body(struct parser *P, struct nlist *out, const char *const *stops) {
    enter(P);
    for (;;) {
        struct token *t = pk(P);
        if (t->t == T_EOF) {
            if (stops) {
                int k = 0;
                while (stops[k + 1]) k++;
                parse_fail(P, "unexpected end of template, expected {%% %s %%}", stops[k]);
            }
            break;
        }
        if (stops && at_stmt_kw(P, stops)) break;
        if (t->t == T_TEXT) {
            struct node *n = mk(P, N_TEXT);
            n->s = t->s;
            n->sn = t->n;
            P->i++;
            nl_push(P->c, out, n);
        } else if (t->t == T_VOPEN) {
            P->i++;
            struct node *n = mk(P, N_OUTPUT);
            n->a = p_expr(P);
            if (pk(P)->t != T_VCLOSE) parse_fail(P, "expected '%s'", "}}");
            P->i++;
            nl_push(P->c, out, n);
        } else if (t->t == T_SOPEN) {
            P->i++;
            nl_push(P->c, out, p_stmt(P));
        } else {
            parse_fail(P, "unexpected token%s", "");
        }
    }
    P->depth--;
}

/* ------------------------------------------------------------------------- */
/* interpreter                                                               */
/* ------------------------------------------------------------------------- */

struct scope { struct scope *parent; struct jdict vars; };

struct interp {
    struct jctx *c;
    struct scope *global;
    struct sbuf *out;
    int depth;
    int ctl; /* 1 break, 2 continue */
};

enum { F_RAISE = 1, F_NAMESPACE, F_RANGE, F_STRFTIME, F_DICT };

static jv *scope_lookup(struct scope *s, const char *k, size_t n) {
    for (; s; s = s->parent) {
        jv *v = dict_find(&s->vars, k, n);
        if (v) return v;
    }
    return NULL;
}

static _Noreturn void rt_fail(struct interp *I, const struct node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void rt_fail(struct interp *I, const struct node *n, const char *fmt, ...) {
    char buf[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jfail(I->c, WGLLM_STATUS_UNSUPPORTED, "line %d, column %d: %s", n->line, n->col, buf);
}

static jv eval(struct interp *I, const struct node *n, struct scope *s);
static void exec_list(struct interp *I, const struct nlist *l, struct scope *s);


static bool is_num(jv v) { return v.t == J_INT || v.t == J_FLOAT; }
static double num(jv v) { return v.t == J_INT ? (double)v.u.i : v.t == J_FLOAT ? v.u.f : v.t == J_BOOL ? v.u.b : 0; }

/* JavaScript `==` on the underlying values, as the reference compares */
static bool loose_eq(jv a, jv b) {
    if ((a.t == J_UNDEF || a.t == J_NONE) || (b.t == J_UNDEF || b.t == J_NONE))
        return (a.t == J_UNDEF || a.t == J_NONE) && (b.t == J_UNDEF || b.t == J_NONE);
    if (a.t == J_STR && b.t == J_STR) return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    bool an = is_num(a) || a.t == J_BOOL, bn = is_num(b) || b.t == J_BOOL;
    if (an && bn) return num(a) == num(b);
    if (a.t == J_ARR && b.t == J_ARR) return a.u.a == b.u.a;
    if ((a.t == J_DICT || a.t == J_NS) && a.t == b.t) return a.u.d == b.u.d;
    return false;
}
/* `===` (used by `in` and the equalto test) */
static bool strict_eq(jv a, jv b) {
    if (a.t != b.t && !(is_num(a) && is_num(b))) return false;
    if (a.t == J_UNDEF || a.t == J_NONE) return true;
    return loose_eq(a, b);
}

static jv concat2(struct interp *I, jv a, jv b) {
    struct sbuf sb = {.c = I->c};
    sb_put(&sb, "", 0);
    to_concat(I->c, &sb, a);
    to_concat(I->c, &sb, b);
    return sb_to_value(I->c, &sb);
}

static jv str_of(struct interp *I, jv v) {
    if (v.t == J_STR) return v;
    struct sbuf sb = {.c = I->c};
    sb_put(&sb, "", 0);
    to_text(I->c, &sb, v);
    return sb_to_value(I->c, &sb);
}

static jv eval_bin(struct interp *I, const struct node *n, struct scope *s) {
    jv a = eval(I, n->a, s);
    const char *op = n->s;
    if (!strcmp(op, "and")) return jv_truthy(a) ? eval(I, n->b, s) : a;
    if (!strcmp(op, "or")) return jv_truthy(a) ? a : eval(I, n->b, s);
    jv b = eval(I, n->b, s);
    if (!strcmp(op, "==")) return jv_bool(loose_eq(a, b));
    if (!strcmp(op, "!=")) return jv_bool(!loose_eq(a, b));
    bool in = !strcmp(op, "in"), notin = !strcmp(op, "not in");
    if (a.t == J_UNDEF || b.t == J_UNDEF) {
        if (b.t == J_UNDEF && (in || notin)) return jv_bool(notin);
        rt_fail(I, n, "cannot apply '%s' to an undefined value", op);
    }
    if (a.t == J_NONE || b.t == J_NONE) rt_fail(I, n, "cannot apply '%s' to none", op);
    if (!strcmp(op, "~")) return concat2(I, a, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a.t == J_FLOAT || b.t == J_FLOAT;
        double x = num(a), y = num(b);
        if (!strcmp(op, "+")) return fl ? jv_float(x + y) : jv_int((int64_t)((uint64_t)a.u.i + (uint64_t)b.u.i));
        if (!strcmp(op, "-")) return fl ? jv_float(x - y) : jv_int((int64_t)((uint64_t)a.u.i - (uint64_t)b.u.i));
        if (!strcmp(op, "*")) return fl ? jv_float(x * y) : jv_int((int64_t)((uint64_t)a.u.i * (uint64_t)b.u.i));
        if (!strcmp(op, "/")) return jv_float(x / y);
        if (!strcmp(op, "//")) {
            if (!fl) {
                if (b.u.i == 0) rt_fail(I, n, "integer division by zero");
                return jv_float(floor(x / y)).u.f == floor(x / y) ? jv_int((int64_t)floor(x / y)) : jv_int(0);
            }
            return jv_float(floor(x / y));
        }
        if (!strcmp(op, "%")) {
            if (!fl) {
                if (b.u.i == 0 || (b.u.i == -1)) return jv_int(0);
                return jv_int(a.u.i % b.u.i); /* JavaScript's remainder keeps the dividend's sign */
            }
            return jv_float(fmod(x, y));
        }
        if (!strcmp(op, "<")) return jv_bool(x < y);
        if (!strcmp(op, ">")) return jv_bool(x > y);
        if (!strcmp(op, "<=")) return jv_bool(x <= y);
        if (!strcmp(op, ">=")) return jv_bool(x >= y);
    } else if (a.t == J_ARR && b.t == J_ARR && !strcmp(op, "+")) {
        jv r = jv_arr_new(I->c);
        for (size_t i = 0; i < a.u.a->n; i++) arr_push(I->c, r.u.a, a.u.a->v[i]);
        for (size_t i = 0; i < b.u.a->n; i++) arr_push(I->c, r.u.a, b.u.a->v[i]);
        return r;
    } else if (b.t == J_ARR && (in || notin)) {
        bool found = false;
        for (size_t i = 0; i < b.u.a->n && !found; i++) found = strict_eq(b.u.a->v[i], a);
        return jv_bool(in ? found : !found);
    }
    if ((a.t == J_STR || b.t == J_STR) && !strcmp(op, "+")) return concat2(I, a, b);
    if (a.t == J_STR && b.t == J_STR) {
        if (in || notin) {
            bool found = a.u.s.n == 0 || memmem(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL;
            return jv_bool(in ? found : !found);
        }
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int cmp = memcmp(a.u.s.p, b.u.s.p, m);
        if (!cmp) cmp = a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
        if (!strcmp(op, "<")) return jv_bool(cmp < 0);
        if (!strcmp(op, ">")) return jv_bool(cmp > 0);
        if (!strcmp(op, "<=")) return jv_bool(cmp <= 0);
        if (!strcmp(op, ">=")) return jv_bool(cmp >= 0);
    }
    if (a.t == J_STR && (b.t == J_DICT || b.t == J_NS) && (in || notin)) {
        bool found = dict_find(b.u.d, a.u.s.p, a.u.s.n) != NULL;
        return jv_bool(in ? found : !found);
    }
    rt_fail(I, n, "unsupported operation: %s %s %s", jt_name(a.t), op, jt_name(b.t));
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

static jv get_member(struct interp *I, const struct node *n, jv o, const char *k, size_t kn) {
    if (o.t == J_DICT || o.t == J_NS) {
        jv *v = dict_find(o.u.d, k, kn);
        return v ? *v : jv_undef();
    }
    if (o.t == J_ARR && kn == 6 && !memcmp(k, "length", 6)) return jv_int((int64_t)o.u.a->n);
    if (o.t == J_STR && kn == 6 && !memcmp(k, "length", 6)) return jv_int((int64_t)o.u.s.n);
    if (o.t == J_UNDEF || o.t == J_NONE)
        rt_fail(I, n, "cannot read attribute '%.*s' of %s", (int)(kn > 60 ? 60 : kn), k, jt_name(o.t));
    return jv_undef();
}

static jv do_slice(struct interp *I, const struct node *n, jv o, jv jstart, jv jstop, jv jstep) {
    size_t len = o.t == J_ARR ? o.u.a->n : o.t == J_STR ? o.u.s.n : 0;
    if (o.t != J_ARR && o.t != J_STR) rt_fail(I, n, "cannot slice a %s", jt_name(o.t));
    int64_t step = jstep.t == J_INT ? jstep.u.i : 1;
    if (step == 0) rt_fail(I, n, "slice step cannot be zero");
    int64_t L = (int64_t)len, start, stop;
    if (step > 0) {
        start = jstart.t == J_INT ? norm_index(jstart.u.i, len) : 0;
        stop = jstop.t == J_INT ? norm_index(jstop.u.i, len) : L;
        if (start < 0) start = 0;
        if (start > L) start = L;
        if (stop < 0) stop = 0;
        if (stop > L) stop = L;
    } else {
        start = jstart.t == J_INT ? norm_index(jstart.u.i, len) : L - 1;
        stop = jstop.t == J_INT ? norm_index(jstop.u.i, len) : -1;
        if (start >= L) start = L - 1;
        if (start < -1) start = -1;
        if (stop < -1) stop = -1;
        if (stop >= L) stop = L - 1;
    }
    if (o.t == J_ARR) {
        jv r = jv_arr_new(I->c);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) arr_push(I->c, r.u.a, o.u.a->v[i]);
        return r;
    }
    struct sbuf sb = {.c = I->c};
    sb_put(&sb, "", 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) sb_putc(&sb, o.u.s.p[i]);
    return sb_to_value(I->c, &sb);
}

/* JavaScript's String.prototype.trim whitespace: ASCII + Unicode White_Space + BOM */
static size_t ws_len_at(const char *p, size_t n) {
    unsigned char c0 = (unsigned char)p[0];
    if (c0 == ' ' || (c0 >= 9 && c0 <= 13)) return 1;
    if (n >= 2 && c0 == 0xc2 && (unsigned char)p[1] == 0xa0) return 2;
    if (n >= 3 && c0 == 0xe1 && (unsigned char)p[1] == 0x9a && (unsigned char)p[2] == 0x80) return 3;
    if (n >= 3 && c0 == 0xe2 && (unsigned char)p[1] == 0x80) {
        unsigned char c2 = (unsigned char)p[2];
        if (c2 <= 0x8a || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf) return 3;
    }
    if (n >= 3 && c0 == 0xe2 && (unsigned char)p[1] == 0x81 && (unsigned char)p[2] == 0x9f) return 3;
    if (n >= 3 && c0 == 0xe3 && (unsigned char)p[1] == 0x80 && (unsigned char)p[2] == 0x80) return 3;
    if (n >= 3 && c0 == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf) return 3;
    return 0;
}
static size_t ws_len_before(const char *p, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t w = ws_len_at(p + n - k, k);
        if (w == k) return k;
    }
    return 0;
}
static jv str_strip(jv v, bool left, bool right, jv chars) {
    const char *p = v.u.s.p;
    size_t n = v.u.s.n;
    if (chars.t == J_STR) {
        while (left && n && memchr(chars.u.s.p, *p, chars.u.s.n)) { p++; n--; }
        while (right && n && memchr(chars.u.s.p, p[n - 1], chars.u.s.n)) n--;
        return jv_str(p, n);
    }
    size_t w;
    while (left && n && (w = ws_len_at(p, n)) > 0) { p += w; n -= w; }
    while (right && n && (w = ws_len_before(p, n)) > 0) n -= w;
    return jv_str(p, n);
}

static jv str_case(struct interp *I, jv v, int mode) { /* 0 lower 1 upper 2 capitalize 3 title */
    char *o = jalloc(I->c, v.u.s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        unsigned char uc = (unsigned char)ch;
        switch (mode) {
        case 0: o[i] = (char)tolower(uc); break;
        case 1: o[i] = (char)toupper(uc); break;
        case 2: o[i] = (char)(i == 0 ? toupper(uc) : tolower(uc)); break;
        default:
            o[i] = (char)(word_start ? toupper(uc) : tolower(uc));
            word_start = !(isalnum(uc) || uc >= 0x80);
        }
    }
    return jv_str(o, v.u.s.n);
}

static jv str_replace(struct interp *I, jv v, jv from, jv to, int64_t count) {
    if (from.t != J_STR || to.t != J_STR) return v;
    struct sbuf sb = {.c = I->c};
    sb_put(&sb, "", 0);
    size_t i = 0;
    int64_t done = 0;
    while (i <= v.u.s.n) {
        if (count >= 0 && done >= count) break;
        const char *hit;
        if (from.u.s.n == 0) hit = v.u.s.p + i;
        else hit = memmem(v.u.s.p + i, v.u.s.n - i, from.u.s.p, from.u.s.n);
        if (!hit) break;
        size_t at = (size_t)(hit - v.u.s.p);
        sb_put(&sb, v.u.s.p + i, at - i);
        sb_put(&sb, to.u.s.p, to.u.s.n);
        done++;
        if (from.u.s.n == 0) {
            if (at < v.u.s.n) sb_putc(&sb, v.u.s.p[at]);
            i = at + 1;
        } else {
            i = at + from.u.s.n;
        }
    }
    if (i < v.u.s.n) sb_put(&sb, v.u.s.p + i, v.u.s.n - i);
    return sb_to_value(I->c, &sb);
}

static jv str_split(struct interp *I, jv v, jv sep, int64_t maxsplit) {
    jv r = jv_arr_new(I->c);
    const char *p = v.u.s.p;
    size_t n = v.u.s.n;
    if (sep.t != J_STR) { /* whitespace runs */
        size_t i = 0;
        while (i < n) {
            while (i < n && is_ws(p[i])) i++;
            if (i >= n) break;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)r.u.a->n >= maxsplit) j = n;
            else while (j < n && !is_ws(p[j])) j++;
            arr_push(I->c, r.u.a, jv_str(p + i, j - i));
            i = j;
        }
        return r;
    }
    if (sep.u.s.n == 0) jfail(I->c, WGLLM_STATUS_UNSUPPORTED, "split: empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = (maxsplit >= 0 && (int64_t)r.u.a->n >= maxsplit) ? NULL
                          : memmem(p + i, n - i, sep.u.s.p, sep.u.s.n);
        if (!hit) { arr_push(I->c, r.u.a, jv_str(p + i, n - i)); break; }
        arr_push(I->c, r.u.a, jv_str(p + i, (size_t)(hit - (p + i))));
        i = (size_t)(hit - p) + sep.u.s.n;
    }
    return r;
}

static jv dict_items(struct interp *I, jv d) {
    jv r = jv_arr_new(I->c);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv pair = jv_arr_new(I->c);
        arr_push(I->c, pair.u.a, jv_str(d.u.d->kp[i], d.u.d->kn[i]));
        arr_push(I->c, pair.u.a, d.u.d->v[i]);
        arr_push(I->c, r.u.a, pair);
    }
    return r;
}

struct args { jv pos[8]; size_t npos; const char *kn[8]; size_t kl[8]; jv kv[8]; size_t nkw; };

static void eval_args(struct interp *I, const struct node *call, struct scope *s, struct args *A) {
    memset(A, 0, sizeof *A);
    if (call->l1.n > 8 || call->l2.n > 8) rt_fail(I, call, "more than 8 arguments");
    for (size_t i = 0; i < call->l1.n; i++) A->pos[A->npos++] = eval(I, call->l1.v[i], s);
    for (size_t i = 0; i < call->l2.n; i++) {
        A->kn[A->nkw] = call->l2.v[i]->s;
        A->kl[A->nkw] = call->l2.v[i]->sn;
        A->kv[A->nkw++] = eval(I, call->l2.v[i]->a, s);
    }
}
static jv arg(const struct args *A, size_t i, const char *kw) {
    for (size_t k = 0; k < A->nkw; k++)
        if (A->kl[k] == strlen(kw) && !memcmp(A->kn[k], kw, A->kl[k])) return A->kv[k];
    return i < A->npos ? A->pos[i] : jv_undef();
}

static bool run_test(struct interp *I, const struct node *n, const char *name, size_t nl, jv v, const struct args *A);

static jv apply_filter(struct interp *I, const struct node *n, const char *name, size_t nl, jv v, const struct args *A, struct scope *s);

/* string / dict / list methods, `obj.method(args)` */
static bool call_method(struct interp *I, const struct node *n, jv o, const char *m, size_t ml, const struct args *A, jv *out) {
#define M(x) (ml == strlen(x) && !memcmp(m, x, ml))
    if (o.t == J_STR) {
        if (M("startswith") || M("endswith")) {
            jv p = arg(A, 0, "prefix");
            if (p.t != J_STR) rt_fail(I, n, "%.*s expects a string", (int)ml, m);
            bool r = p.u.s.n <= o.u.s.n &&
                     !memcmp(M("startswith") ? o.u.s.p : o.u.s.p + o.u.s.n - p.u.s.n, p.u.s.p, p.u.s.n);
            *out = jv_bool(r);
            return true;
        }
        if (M("strip")) { *out = str_strip(o, true, true, arg(A, 0, "chars")); return true; }
        if (M("lstrip")) { *out = str_strip(o, true, false, arg(A, 0, "chars")); return true; }
        if (M("rstrip")) { *out = str_strip(o, false, true, arg(A, 0, "chars")); return true; }
        if (M("lower")) { *out = str_case(I, o, 0); return true; }
        if (M("upper")) { *out = str_case(I, o, 1); return true; }
        if (M("capitalize")) { *out = str_case(I, o, 2); return true; }
        if (M("title")) { *out = str_case(I, o, 3); return true; }
        if (M("split")) {
            jv ms = arg(A, 1, "maxsplit");
            *out = str_split(I, o, arg(A, 0, "sep"), ms.t == J_INT ? ms.u.i : -1);
            return true;
        }
        if (M("replace")) {
            jv cnt = arg(A, 2, "count");
            *out = str_replace(I, o, arg(A, 0, "old"), arg(A, 1, "new"), cnt.t == J_INT ? cnt.u.i : -1);
            return true;
        }
        if (M("join")) { *out = apply_filter(I, n, "join", 4, arg(A, 0, "iterable"), &(struct args){.pos = {o}, .npos = 1}, NULL); return true; }
    }
    if (o.t == J_DICT) {
        if (M("items")) { *out = dict_items(I, o); return true; }
        if (M("keys") || M("values")) {
            jv r = jv_arr_new(I->c);
            for (size_t i = 0; i < o.u.d->n; i++)
                arr_push(I->c, r.u.a, M("keys") ? jv_str(o.u.d->kp[i], o.u.d->kn[i]) : o.u.d->v[i]);
            *out = r;
            return true;
        }
        if (M("get")) {
            jv k = arg(A, 0, "key");
            jv *v = k.t == J_STR ? dict_find(o.u.d, k.u.s.p, k.u.s.n) : NULL;
            *out = v ? *v : (A->npos > 1 ? A->pos[1] : jv_none());
            return true;
        }
    }
    if (o.t == J_ARR && M("append")) {
        arr_push(I->c, o.u.a, arg(A, 0, "x"));
        *out = jv_none();
        return true;
    }
#undef M
    return false;
}

static jv call_macro(struct interp *I, const struct node *call, const struct node *mac, const struct args *A) {
    if (++I->depth > 100) rt_fail(I, call, "macro recursion deeper than 100");
    struct scope *ms = jalloc(I->c, sizeof *ms);
    ms->parent = I->global;
    for (size_t i = 0; i < mac->l1.n; i++) {
        const struct node *p = mac->l1.v[i];
        jv v = jv_undef();
        bool got = false;
        for (size_t k = 0; k < A->nkw; k++)
            if (A->kl[k] == p->sn && !memcmp(A->kn[k], p->s, p->sn)) { v = A->kv[k]; got = true; }
        if (!got && i < A->npos) { v = A->pos[i]; got = true; }
        if (!got && p->a) v = eval(I, p->a, ms);
        dict_set(I->c, &ms->vars, p->s, p->sn, v);
    }
    struct sbuf *saved = I->out;
    struct sbuf body = {.c = I->c};
    sb_put(&body, "", 0);
    I->out = &body;
    exec_list(I, &mac->l2, ms);
    I->out = saved;
    I->depth--;
    return sb_to_value(I->c, &body);
}

static jv eval_call(struct interp *I, const struct node *n, struct scope *s) {
    struct args A;
    if (n->a->k == N_MEMBER) {
        jv o = eval(I, n->a->a, s);
        jv f = (o.t == J_DICT || o.t == J_NS) ? get_member(I, n, o, n->a->s, n->a->sn) : jv_undef();
        if (f.t != J_MACRO) {
            eval_args(I, n, s, &A);
            jv r;
            if (call_method(I, n, o, n->a->s, n->a->sn, &A, &r)) return r;
            rt_fail(I, n, "unknown method '%.*s' of a %s", (int)(n->a->sn > 60 ? 60 : n->a->sn), n->a->s, jt_name(o.t));
        }
    }
    jv f = eval(I, n->a, s);
    eval_args(I, n, s, &A);
    if (f.t == J_MACRO) return call_macro(I, n, f.u.m, &A);
    if (f.t == J_FUNC) {
        switch (f.u.fn) {
        case F_RAISE: {
            jv m = str_of(I, arg(&A, 0, "message"));
            jfail(I->c, WGLLM_STATUS_INVALID_ARGUMENT, "raise_exception: %.*s", (int)(m.u.s.n > 300 ? 300 : m.u.s.n), m.u.s.p);
        }
        case F_NAMESPACE: case F_DICT: {
            jv d = jv_dict_new(I->c, f.u.fn == F_NAMESPACE ? J_NS : J_DICT);
            if (A.npos && A.pos[0].t == J_DICT)
                for (size_t i = 0; i < A.pos[0].u.d->n; i++)
                    dict_set(I->c, d.u.d, A.pos[0].u.d->kp[i], A.pos[0].u.d->kn[i], A.pos[0].u.d->v[i]);
            for (size_t k = 0; k < A.nkw; k++) dict_set(I->c, d.u.d, A.kn[k], A.kl[k], A.kv[k]);
            return d;
        }
        case F_RANGE: {
            int64_t start = 0, stop, step = 1;
            if (A.npos == 1) stop = A.pos[0].t == J_INT ? A.pos[0].u.i : 0;
            else {
                start = A.pos[0].t == J_INT ? A.pos[0].u.i : 0;
                stop = A.npos > 1 && A.pos[1].t == J_INT ? A.pos[1].u.i : 0;
                if (A.npos > 2 && A.pos[2].t == J_INT) step = A.pos[2].u.i;
            }
            if (step == 0) rt_fail(I, n, "range() step cannot be zero");
            jv r = jv_arr_new(I->c);
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                if (r.u.a->n > 1000000) rt_fail(I, n, "range() longer than 1000000");
                arr_push(I->c, r.u.a, jv_int(i));
            }
            return r;
        }
        case F_STRFTIME: {
            jv fmt = arg(&A, 0, "format");
            if (fmt.t != J_STR) rt_fail(I, n, "strftime_now expects a format string");
            char *z = jstrdup(I->c, fmt.u.s.p, fmt.u.s.n);
            time_t now = time(NULL);
            struct tm tmv;
            gmtime_r(&now, &tmv);
            char buf[256];
            size_t k = strftime(buf, sizeof buf, z, &tmv);
            return jv_str(jstrdup(I->c, buf, k), k);
        }
        }
    }
    if (n->a->k == N_NAME) rt_fail(I, n, "unknown function '%.*s'", (int)(n->a->sn > 60 ? 60 : n->a->sn), n->a->s);
    rt_fail(I, n, "cannot call a %s", jt_name(f.t));
}

static bool run_test(struct interp *I, const struct node *n, const char *name, size_t nl, jv v, const struct args *A) {
#define T(x) (nl == strlen(x) && !memcmp(name, x, nl))
    if (T("defined")) return v.t != J_UNDEF;
    if (T("undefined")) return v.t == J_UNDEF;
    if (T("none")) return v.t == J_NONE;
    if (T("string")) return v.t == J_STR;
    if (T("number")) return is_num(v);
    if (T("integer")) return v.t == J_INT;
    if (T("float")) return v.t == J_FLOAT;
    if (T("boolean")) return v.t == J_BOOL;
    if (T("true")) return v.t == J_BOOL && v.u.b;
    if (T("false")) return v.t == J_BOOL && !v.u.b;
    if (T("iterable")) return v.t == J_ARR || v.t == J_STR;
    if (T("mapping")) return v.t == J_DICT;
    if (T("sequence")) return v.t == J_ARR || v.t == J_DICT || v.t == J_STR;
    if (T("callable")) return v.t == J_MACRO || v.t == J_FUNC;
    if (T("odd") || T("even")) {
        if (v.t != J_INT) rt_fail(I, n, "odd/even test on a %s", jt_name(v.t));
        return (v.u.i % 2 != 0) == T("odd");
    }
    if (T("lower") || T("upper")) {
        if (v.t != J_STR) return false;
        jv c2 = str_case(I, v, T("upper"));
        return memcmp(c2.u.s.p, v.u.s.p, v.u.s.n) == 0;
    }
    if (T("equalto") || T("eq") || T("==")) return strict_eq(v, A->npos ? A->pos[0] : jv_undef());
    if (T("ne") || T("!=")) return !strict_eq(v, A->npos ? A->pos[0] : jv_undef());
    if (T("in")) {
        jv c2 = A->npos ? A->pos[0] : jv_undef();
        if (c2.t == J_ARR) {
            for (size_t i = 0; i < c2.u.a->n; i++) if (strict_eq(c2.u.a->v[i], v)) return true;
            return false;
        }
        if (c2.t == J_STR && v.t == J_STR) return memmem(c2.u.s.p, c2.u.s.n, v.u.s.p, v.u.s.n) != NULL || v.u.s.n == 0;
        if (c2.t == J_DICT && v.t == J_STR) return dict_find(c2.u.d, v.u.s.p, v.u.s.n) != NULL;
        return false;
    }
#undef T
    rt_fail(I, n, "unknown test '%.*s'", (int)(nl > 60 ? 60 : nl), name);
}

static jv select_filter(struct interp *I, const struct node *n, jv v, const struct args *A, bool attr, bool keep) {
    if (v.t != J_ARR) rt_fail(I, n, "select/reject filters need a list, got a %s", jt_name(v.t));
    size_t first = attr ? 1 : 0;
    jv tname = A->npos > first ? A->pos[first] : jv_undef();
    struct args TA = {0};
    for (size_t i = first + 1; i < A->npos && TA.npos < 8; i++) TA.pos[TA.npos++] = A->pos[i];
    jv r = jv_arr_new(I->c);
    for (size_t i = 0; i < v.u.a->n; i++) {
        jv x = v.u.a->v[i];
        if (attr) {
            jv an = A->npos ? A->pos[0] : jv_undef();
            if (an.t != J_STR) rt_fail(I, n, "selectattr needs an attribute name");
            x = (x.t == J_DICT || x.t == J_NS) ? get_member(I, n, x, an.u.s.p, an.u.s.n) : jv_undef();
        }
        bool ok = tname.t == J_STR ? run_test(I, n, tname.u.s.p, tname.u.s.n, x, &TA) : jv_truthy(x);
        if (ok == keep) arr_push(I->c, r.u.a, v.u.a->v[i]);
    }
    return r;
}

static jv apply_filter(struct interp *I, const struct node *n, const char *name, size_t nl, jv v, const struct args *A, struct scope *s) {
#define F(x) (nl == strlen(x) && !memcmp(name, x, nl))
    if (F("default") || F("d")) {
        jv dv = A->npos ? A->pos[0] : jv_str("", 0);
        bool boolean = A->npos > 1 && jv_truthy(A->pos[1]);
        if (v.t == J_UNDEF || (boolean && !jv_truthy(v))) return dv;
        return v;
    }
    if (F("tojson")) {
        jv ind = arg(A, 0, "indent");
        struct sbuf sb = {.c = I->c};
        sb_put(&sb, "", 0);
        to_json(I->c, &sb, v, ind.t == J_INT && ind.u.i > 0 && ind.u.i < 64 ? (int)ind.u.i : 0, 0, true);
        return sb_to_value(I->c, &sb);
    }
    if (F("string")) {
        if (v.t == J_ARR || v.t == J_DICT || v.t == J_NS) {
            struct sbuf sb = {.c = I->c};
            sb_put(&sb, "", 0);
            to_json(I->c, &sb, v, 0, 0, false);
            return sb_to_value(I->c, &sb);
        }
        return str_of(I, v);
    }
    if (F("safe")) return v;
    if (F("length") || F("count")) {
        if (v.t == J_STR) { /* the reference counts UTF-16 code units */
            int64_t k = 0;
            for (size_t i = 0; i < v.u.s.n; i++) {
                unsigned char ch = (unsigned char)v.u.s.p[i];
                if ((ch & 0xc0) != 0x80) k += ch >= 0xf0 ? 2 : 1;
            }
            return jv_int(k);
        }
        if (v.t == J_ARR) return jv_int((int64_t)v.u.a->n);
        if (v.t == J_DICT) return jv_int((int64_t)v.u.d->n);
        rt_fail(I, n, "length of a %s", jt_name(v.t));
    }
    if (F("list")) {
        if (v.t == J_ARR) return v;
        if (v.t == J_DICT) return call_method(I, n, v, "keys", 4, A, &v), v;
        if (v.t == J_STR) {
            jv r = jv_arr_new(I->c);
            for (size_t i = 0; i < v.u.s.n;) {
                size_t k = 1;
                while (i + k < v.u.s.n && ((unsigned char)v.u.s.p[i + k] & 0xc0) == 0x80) k++;
                arr_push(I->c, r.u.a, jv_str(v.u.s.p + i, k));
                i += k;
            }
            return r;
        }
        rt_fail(I, n, "list of a %s", jt_name(v.t));
    }
    if (F("items")) {
        if (v.t == J_DICT) return dict_items(I, v);
        if (v.t == J_UNDEF) return jv_arr_new(I->c);
        rt_fail(I, n, "items of a %s", jt_name(v.t));
    }
    if (F("selectattr")) return select_filter(I, n, v, A, true, true);
    if (F("rejectattr")) return select_filter(I, n, v, A, true, false);
    if (F("select")) return select_filter(I, n, v, A, false, true);
    if (F("reject")) return select_filter(I, n, v, A, false, false);
    if (F("map")) {
        if (v.t != J_ARR) rt_fail(I, n, "map of a %s", jt_name(v.t));
        jv at = arg(A, 99, "attribute");
        jv r = jv_arr_new(I->c);
        for (size_t i = 0; i < v.u.a->n; i++) {
            jv x = v.u.a->v[i];
            if (at.t == J_STR) {
                x = (x.t == J_DICT || x.t == J_NS) ? get_member(I, n, x, at.u.s.p, at.u.s.n) : jv_undef();
                if (x.t == J_UNDEF) x = arg(A, 99, "default");
            } else if (A->npos && A->pos[0].t == J_STR) {
                x = apply_filter(I, n, A->pos[0].u.s.p, A->pos[0].u.s.n, x, &(struct args){0}, s);
            }
            arr_push(I->c, r.u.a, x);
        }
        return r;
    }
    if (F("first") || F("last")) {
        if (v.t == J_ARR) return v.u.a->n ? v.u.a->v[F("first") ? 0 : v.u.a->n - 1] : jv_undef();
        if (v.t == J_STR) return v.u.s.n ? jv_str(v.u.s.p + (F("first") ? 0 : v.u.s.n - 1), 1) : jv_undef();
        rt_fail(I, n, "first/last of a %s", jt_name(v.t));
    }
    if (F("join")) {
        if (v.t != J_ARR) rt_fail(I, n, "join of a %s", jt_name(v.t));
        jv sep = A->npos ? A->pos[0] : jv_str("", 0);
        struct sbuf sb = {.c = I->c};
        sb_put(&sb, "", 0);
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i && sep.t == J_STR) sb_put(&sb, sep.u.s.p, sep.u.s.n);
            to_concat(I->c, &sb, v.u.a->v[i]);
        }
        return sb_to_value(I->c, &sb);
    }
    if (F("int")) {
        if (v.t == J_INT) return v;
        if (v.t == J_FLOAT) return jv_int((int64_t)v.u.f);
        if (v.t == J_BOOL) return jv_int(v.u.b);
        if (v.t == J_STR) { char *z = jstrdup(I->c, v.u.s.p, v.u.s.n); return jv_int(strtoll(z, NULL, 10)); }
        return jv_int(0);
    }
    if (F("float")) {
        if (is_num(v)) return jv_float(num(v));
        if (v.t == J_STR) { char *z = jstrdup(I->c, v.u.s.p, v.u.s.n); return jv_float(strtod(z, NULL)); }
        return jv_float(0);
    }
    if (F("abs") && is_num(v)) return v.t == J_INT ? jv_int(v.u.i < 0 ? -v.u.i : v.u.i) : jv_float(fabs(v.u.f));
    if (F("unique") && v.t == J_ARR) {
        jv r = jv_arr_new(I->c);
        for (size_t i = 0; i < v.u.a->n; i++) {
            bool seen = false;
            for (size_t k = 0; k < r.u.a->n && !seen; k++) seen = strict_eq(r.u.a->v[k], v.u.a->v[i]);
            if (!seen) arr_push(I->c, r.u.a, v.u.a->v[i]);
        }
        return r;
    }
    if (v.t == J_STR) {
        if (F("trim")) return str_strip(v, true, true, jv_undef());
        if (F("upper")) return str_case(I, v, 1);
        if (F("lower")) return str_case(I, v, 0);
        if (F("capitalize")) return str_case(I, v, 2);
        if (F("title")) return str_case(I, v, 3);
        if (F("replace")) {
            jv cnt = arg(A, 2, "count");
            return str_replace(I, v, A->npos > 0 ? A->pos[0] : jv_undef(), A->npos > 1 ? A->pos[1] : jv_undef(),
                               cnt.t == J_INT ? cnt.u.i : -1);
        }
        if (F("indent")) {
            jv w = arg(A, 0, "width");
            int64_t width = w.t == J_INT ? w.u.i : 4;
            if (width < 0 || width > 64) width = 4;
            bool first = jv_truthy(arg(A, 1, "first"));
            struct sbuf sb = {.c = I->c};
            sb_put(&sb, "", 0);
            for (size_t i = 0; i < v.u.s.n; i++) {
                if (i == 0 && first) for (int k = 0; k < width; k++) sb_putc(&sb, ' ');
                sb_putc(&sb, v.u.s.p[i]);
                if (v.u.s.p[i] == '\n' && i + 1 < v.u.s.n && v.u.s.p[i + 1] != '\n')
                    for (int k = 0; k < width; k++) sb_putc(&sb, ' ');
            }
            return sb_to_value(I->c, &sb);
        }
    }
#undef F
    rt_fail(I, n, "unknown filter '%.*s' for a %s", (int)(nl > 60 ? 60 : nl), name, jt_name(v.t));
}

static jv eval(struct interp *I, const struct node *n, struct scope *s) {
    if (++I->depth > 400) rt_fail(I, n, "expression nesting deeper than 400");
    jv r = jv_undef();
    switch (n->k) {
    case N_LIT: r = n->lit; break;
    case N_NAME: {
        jv *v = scope_lookup(s, n->s, n->sn);
        r = v ? *v : jv_undef();
        break;
    }
    case N_LIST: {
        r = jv_arr_new(I->c);
        for (size_t i = 0; i < n->l1.n; i++) arr_push(I->c, r.u.a, eval(I, n->l1.v[i], s));
        break;
    }
    case N_DICT: {
        r = jv_dict_new(I->c, J_DICT);
        for (size_t i = 0; i < n->l1.n; i++) {
            jv k = eval(I, n->l1.v[i], s);
            if (k.t != J_STR) k = str_of(I, k);
            dict_set(I->c, r.u.d, k.u.s.p, k.u.s.n, eval(I, n->l2.v[i], s));
        }
        break;
    }
    case N_MEMBER: r = get_member(I, n, eval(I, n->a, s), n->s, n->sn); break;
    case N_INDEX: {
        jv o = eval(I, n->a, s);
        jv k = eval(I, n->b, s);
        if ((o.t == J_DICT || o.t == J_NS) && k.t == J_STR) r = get_member(I, n, o, k.u.s.p, k.u.s.n);
        else if (o.t == J_ARR && k.t == J_INT) {
            int64_t i = norm_index(k.u.i, o.u.a->n);
            r = i >= 0 && i < (int64_t)o.u.a->n ? o.u.a->v[i] : jv_undef();
        } else if (o.t == J_STR && k.t == J_INT) {
            int64_t i = norm_index(k.u.i, o.u.s.n);
            r = i >= 0 && i < (int64_t)o.u.s.n ? jv_str(o.u.s.p + i, 1) : jv_undef();
        } else if (o.t == J_UNDEF || o.t == J_NONE) {
            rt_fail(I, n, "cannot index %s", jt_name(o.t));
        } else {
            r = jv_undef();
        }
        break;
    }
    case N_SLICE: {
        jv o = eval(I, n->a, s);
        jv a = n->b ? eval(I, n->b, s) : jv_undef();
        jv b = n->c ? eval(I, n->c, s) : jv_undef();
        jv c = n->d ? eval(I, n->d, s) : jv_undef();
        r = do_slice(I, n, o, a, b, c);
        break;
    }
    case N_CALL: r = eval_call(I, n, s); break;
    case N_FILTER: {
        jv v = eval(I, n->a, s);
        struct args A;
        eval_args(I, n, s, &A);
        r = apply_filter(I, n, n->s, n->sn, v, &A, s);
        break;
    }
    case N_TEST: {
        jv v = eval(I, n->a, s);
        struct args A;
        eval_args(I, n, s, &A);
        bool b = run_test(I, n, n->s, n->sn, v, &A);
        r = jv_bool(n->neg ? !b : b);
        break;
    }
    case N_UNARY: {
        jv v = eval(I, n->a, s);
        if (n->s[0] == 'n') r = jv_bool(!jv_truthy(v));
        else if (v.t == J_INT) r = jv_int(n->s[0] == '-' ? (int64_t)(0 - (uint64_t)v.u.i) : v.u.i);
        else if (v.t == J_FLOAT) r = jv_float(n->s[0] == '-' ? -v.u.f : v.u.f);
        else rt_fail(I, n, "unary %c on a %s", n->s[0], jt_name(v.t));
        break;
    }
    case N_BIN: r = eval_bin(I, n, s); break;
    case N_COND:
        if (jv_truthy(eval(I, n->b, s))) r = eval(I, n->a, s);
        else r = n->c ? eval(I, n->c, s) : jv_undef();
        break;
    default: rt_fail(I, n, "statement used as an expression");
    }
    I->depth--;
    return r;
}

static void exec_for(struct interp *I, const struct node *n, struct scope *s) {
    struct scope *ls = jalloc(I->c, sizeof *ls);
    ls->parent = s;
    jv it = eval(I, n->a, ls);
    if (it.t == J_DICT) {
        jv k = jv_arr_new(I->c);
        for (size_t i = 0; i < it.u.d->n; i++) arr_push(I->c, k.u.a, jv_str(it.u.d->kp[i], it.u.d->kn[i]));
        it = k;
    }
    if (it.t != J_ARR) rt_fail(I, n, "for loop over a %s", jt_name(it.t));
    const struct nlist *vars = &n->l1;
    /* bind the loop variable(s) into scope t */
#define BIND(SC, x)                                                                            \
    do {                                                                                      \
        if (vars->n == 1) dict_set(I->c, &(SC)->vars, vars->v[0]->s, vars->v[0]->sn, (x));     \
        else {                                                                                \
            if ((x).t != J_ARR || (x).u.a->n != vars->n)                                      \
                rt_fail(I, n, "cannot unpack a %s into %zu loop variables", jt_name((x).t), vars->n); \
            for (size_t q = 0; q < vars->n; q++)                                              \
                dict_set(I->c, &(SC)->vars, vars->v[q]->s, vars->v[q]->sn, (x).u.a->v[q]);     \
        }                                                                                     \
    } while (0)
    jv items = jv_arr_new(I->c);
    for (size_t i = 0; i < it.u.a->n; i++) {
        jv x = it.u.a->v[i];
        if (n->b) {
            struct scope *ts = jalloc(I->c, sizeof *ts);
            ts->parent = ls;
            BIND(ts, x);
            if (!jv_truthy(eval(I, n->b, ts))) continue;
        }
        arr_push(I->c, items.u.a, x);
    }
    size_t cnt = items.u.a->n;
    for (size_t i = 0; i < cnt; i++) {
        jv x = items.u.a->v[i];
        jv loop = jv_dict_new(I->c, J_DICT);
        dict_setz(I->c, loop.u.d, "index", jv_int((int64_t)i + 1));
        dict_setz(I->c, loop.u.d, "index0", jv_int((int64_t)i));
        dict_setz(I->c, loop.u.d, "revindex", jv_int((int64_t)(cnt - i)));
        dict_setz(I->c, loop.u.d, "revindex0", jv_int((int64_t)(cnt - i - 1)));
        dict_setz(I->c, loop.u.d, "first", jv_bool(i == 0));
        dict_setz(I->c, loop.u.d, "last", jv_bool(i == cnt - 1));
        dict_setz(I->c, loop.u.d, "length", jv_int((int64_t)cnt));
        dict_setz(I->c, loop.u.d, "previtem", i > 0 ? items.u.a->v[i - 1] : jv_undef());
        dict_setz(I->c, loop.u.d, "nextitem", i + 1 < cnt ? items.u.a->v[i + 1] : jv_undef());
        dict_setz(I->c, &ls->vars, "loop", loop);
        BIND(ls, x);
        exec_list(I, &n->c->l1, ls);
        if (I->ctl == 1) { I->ctl = 0; break; }
        I->ctl = 0;
    }
#undef BIND
    if (cnt == 0 && n->d) exec_list(I, &n->d->l1, ls);
}

static void exec_node(struct interp *I, const struct node *n, struct scope *s) {
    switch (n->k) {
    case N_TEXT: sb_put(I->out, n->s, n->sn); return;
    case N_OUTPUT: to_text(I->c, I->out, eval(I, n->a, s)); return;
    case N_IF:
        if (jv_truthy(eval(I, n->a, s))) exec_list(I, &n->l1, s);
        else exec_list(I, &n->l2, s);
        return;
    case N_FOR: exec_for(I, n, s); return;
    case N_SET: {
        jv v;
        if (n->b) v = eval(I, n->b, s);
        else {
            struct sbuf *saved = I->out;
            struct sbuf body = {.c = I->c};
            sb_put(&body, "", 0);
            I->out = &body;
            exec_list(I, &n->l1, s);
            I->out = saved;
            v = sb_to_value(I->c, &body);
        }
        if (n->a->k == N_NAME) {
            dict_set(I->c, &s->vars, n->a->s, n->a->sn, v);
        } else {
            jv o = eval(I, n->a->a, s);
            if (o.t != J_NS && o.t != J_DICT) rt_fail(I, n, "cannot set an attribute on a %s", jt_name(o.t));
            dict_set(I->c, o.u.d, n->a->s, n->a->sn, v);
        }
        return;
    }
    case N_MACRO: {
        jv m = {.t = J_MACRO};
        m.u.m = n;
        dict_set(I->c, &s->vars, n->s, n->sn, m);
        return;
    }
    case N_BREAK: I->ctl = 1; return;
    case N_CONTINUE: I->ctl = 2; return;
    default: rt_fail(I, n, "expression used as a statement");
    }
}

static void exec_list(struct interp *I, const struct nlist *l, struct scope *s) {
    if (++I->depth > 400) rt_fail(I, l->n ? l->v[0] : NULL, "nesting deeper than 400");
    for (size_t i = 0; i < l->n && !I->ctl; i++) exec_node(I, l->v[i], s);
    I->depth--;
}

/* ------------------------------------------------------------------------- */
/* public API                                                                */
/* ------------------------------------------------------------------------- */

struct wgllm_chat_template {
    struct jarena arena;
    struct nlist body;
};

enum wgllm_status wgllm_chat_template_parse(const char *src, size_t len, struct wgllm_chat_template **out,
                                            struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_chat_template *t = calloc(1, sizeof *t);
    if (!t) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "chat template: out of memory");
    struct jctx c = {.arena = &t->arena, .err = err};
    if (setjmp(c.jb)) {
        arena_free(&t->arena);
        free(t);
        return c.status;
    }
    struct lexer L = {.c = &c};
    L.src = preprocess(&c, src ? src : "", src ? len : 0, &L.len);
    lex_all(&L);
    struct parser P = {.c = &c, .L = &L};
    p_body(&P, &t->body, NULL);
    *out = t;
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}

void wgllm_chat_template_free(struct wgllm_chat_template *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t);
}

enum wgllm_status wgllm_chat_template_render_json(const struct wgllm_chat_template *t, const char *messages_json,
                                                  const char *tools_json, bool add_generation_prompt,
                                                  const char *bos_token, const char *eos_token, char **out,
                                                  struct wgllm_error *err) {
    *out = NULL;
    if (!t || !messages_json)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat template: NULL template or messages");
    struct jarena arena = {0};
    struct jctx c = {.arena = &arena, .err = err};
    struct sbuf result = {.c = &c};
    if (setjmp(c.jb)) {
        arena_free(&arena);
        return c.status;
    }
    struct scope *g = jalloc(&c, sizeof *g);
    struct jsonp jp = {.c = &c, .p = messages_json, .start = messages_json, .end = messages_json + strlen(messages_json)};
    jv msgs = json_value(&jp);
    if (msgs.t != J_ARR) jfail(&c, WGLLM_STATUS_INVALID_ARGUMENT, "messages must be a JSON array");
    dict_setz(&c, &g->vars, "messages", msgs);
    if (tools_json) {
        struct jsonp tp = {.c = &c, .p = tools_json, .start = tools_json, .end = tools_json + strlen(tools_json)};
        dict_setz(&c, &g->vars, "tools", json_value(&tp));
    }
    dict_setz(&c, &g->vars, "add_generation_prompt", jv_bool(add_generation_prompt));
    const char *bos = bos_token ? bos_token : "", *eos = eos_token ? eos_token : "";
    dict_setz(&c, &g->vars, "bos_token", jv_str(bos, strlen(bos)));
    dict_setz(&c, &g->vars, "eos_token", jv_str(eos, strlen(eos)));
    static const struct { const char *name; int fn; } funcs[] = {
        {"raise_exception", F_RAISE}, {"namespace", F_NAMESPACE}, {"range", F_RANGE},
        {"strftime_now", F_STRFTIME}, {"dict", F_DICT}};
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++) {
        jv f = {.t = J_FUNC};
        f.u.fn = funcs[i].fn;
        dict_setz(&c, &g->vars, funcs[i].name, f);
    }
    struct interp I = {.c = &c, .global = g, .out = &result};
    sb_put(&result, "", 0);
    exec_list(&I, &t->body, g);
    *out = malloc(result.n + 1);
    if (!*out) jfail(&c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (output of %zu bytes)", result.n);
    memcpy(*out, result.p, result.n + 1);
    arena_free(&arena);
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}
