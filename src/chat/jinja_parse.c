/*
 * jinja_parse.c - the front half of the Jinja subset interpreter behind chat
 * templates: the arena every value and AST node lives in (so error paths,
 * longjmp out of any depth, never leak), values and the string builder the
 * interpreter shares, the JSON reader for messages/tools, preprocessing
 * (trim_blocks/lstrip_blocks as transformers sets them), the lexer and the
 * parser to an AST. Parser recursion depth is bounded so no input can
 * overflow the stack. The interpreter is jinja.c.
 */
#include "chat/jinja_internal.h"

#include <ctype.h>
#include <math.h>
/* ------------------------------------------------------------------------- */
/* arena                                                                     */
/* ------------------------------------------------------------------------- */


_Noreturn void jfail(struct jctx *c, enum wgllm_status st, const char *fmt, ...) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    wgllm_error_set(c->err, st, "chat template: %s", buf);
    c->status = st;
    longjmp(c->jb, 1);
}

void *jalloc(struct jctx *c, size_t n) {
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

void arena_free(struct jarena *a) {
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

char *jstrdup(struct jctx *c, const char *s, size_t n) {
    char *p = jalloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------------------- */
/* values                                                                    */
/* ------------------------------------------------------------------------- */



jv jv_arr_new(struct jctx *c) {
    jv v = {.t = J_ARR};
    v.u.a = jalloc(c, sizeof *v.u.a);
    return v;
}
void arr_push(struct jctx *c, struct jarr *a, jv x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        jv *nv = jalloc(c, cap * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}
jv jv_dict_new(struct jctx *c, enum jt t) {
    jv v = {.t = t};
    v.u.d = jalloc(c, sizeof *v.u.d);
    return v;
}
jv *dict_find(const struct jdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->kn[i] == kn && memcmp(d->kp[i], k, kn) == 0) return &d->v[i];
    return NULL;
}
void dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, jv x) {
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
void dict_setz(struct jctx *c, struct jdict *d, const char *k, jv x) {
    dict_set(c, d, k, strlen(k), x);
}

const char *jt_name(enum jt t) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float", "string",
                                  "list", "dict", "namespace", "macro", "function"};
    return names[t];
}

bool jv_truthy(jv v) {
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


/* Builders grow inside the arena, so a longjmp out of any depth leaks nothing. */
void sb_put(struct sbuf *b, const char *s, size_t n) {
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

void to_json(struct jctx *c, struct sbuf *b, jv v, int indent, int depth, bool undef_null) {
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
void to_text(struct jctx *c, struct sbuf *b, jv v) {
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
void to_concat(struct jctx *c, struct sbuf *b, jv v) {
    char num[64];
    switch (v.t) {
    case J_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); sb_puts(b, num); return;
    case J_FLOAT: fmt_js_number(num, sizeof num, v.u.f); sb_puts(b, num); return;
    case J_ARR: case J_DICT: case J_NS:
        jfail(c, WGLLM_STATUS_UNSUPPORTED, "cannot concatenate a %s to a string", jt_name(v.t));
    default: to_text(c, b, v); return;
    }
}

jv sb_to_value(struct jctx *c, struct sbuf *b) {
    jv v = b->p ? jv_str(b->p, b->n) : jv_str("", 0);
    (void)c;
    b->p = NULL;
    b->n = b->cap = 0;
    return v;
}

/* ------------------------------------------------------------------------- */
/* JSON input (messages, tools)                                              */
/* ------------------------------------------------------------------------- */


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
jv json_value(struct jsonp *j) {
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
