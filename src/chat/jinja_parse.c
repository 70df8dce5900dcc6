/*
 * jinja_parse.c - the front half of the Jinja subset interpreter behind chat
 * templates: preprocessing (trim_blocks/lstrip_blocks as transformers sets
 * them), the lexer and the parser to an AST, and the parse API. Parser
 * recursion depth is bounded so no input can overflow the stack. Values and
 * the arena are jinja_value.c; the interpreter is jinja.c.
 */
#include "chat/jinja_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>

/* ------------------------------------------------------------------------- */
/* lexer                                                                     */
/* ------------------------------------------------------------------------- */

enum tk { T_EOF, T_TEXT, T_VOPEN, T_VCLOSE, T_SOPEN, T_SCLOSE, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

struct token { /* 32 bytes: a large template has millions */
    enum tk t;
    uint32_t n;     /* bytes at s (templates are under 4 GiB: checked at parse) */
    const char *s;  /* text / name / op / decoded string */
    union { int64_t i; double f; };
    int line, col;
};

struct lexer {
    struct jctx *c;
    const char *src;
    size_t len, pos;
    struct token *toks;
    size_t ntok, cap;
    size_t at_pos;      /* line/column are known up to here: tokens come in */
    int at_line, at_col; /* source order, so finding them is linear overall */
};

static void lex_pos(struct lexer *L, size_t pos, int *line, int *col) {
    if (pos > L->len) pos = L->len;
    if (pos < L->at_pos || L->at_line == 0) { L->at_pos = 0; L->at_line = 1; L->at_col = 1; }
    for (size_t i = L->at_pos; i < pos; i++) {
        if (L->src[i] == '\n') { L->at_line++; L->at_col = 1; }
        else L->at_col++;
    }
    L->at_pos = pos;
    *line = L->at_line;
    *col = L->at_col;
}

static _Noreturn void lex_fail(struct lexer *L, size_t pos, const char *what) {
    int line, col;
    lex_pos(L, pos, &line, &col);
    wgllm_jinja_fail(L->c, WGLLM_STATUS_BAD_FORMAT, "syntax error at line %d, column %d: %s", line, col, what);
}

static struct token *lex_push(struct lexer *L, enum tk t, const char *s, size_t n, size_t pos) {
    /* Tokens are only needed while parsing: they live outside the arena and
     * go when the parse ends, but count toward the memory budget meanwhile. */
    if (L->ntok == L->cap) {
        struct jctx *c = L->c;
        size_t cap = L->cap ? L->cap * 2 : 256, grow = (cap - L->cap) * sizeof *L->toks;
        if (grow > c->lim.max_memory - c->mem) wgllm_jinja_over(c, "memory", c->lim.max_memory, "bytes");
        struct token *nt = realloc(L->toks, cap * sizeof *nt);
        if (!nt) wgllm_jinja_fail(c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (%zu tokens)", cap);
        c->mem += grow;
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
    char *a = wgllm_jinja_alloc(c, len + 1);
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
    /* second pass in place: it only drops bytes, so the write index m never passes the read index i */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        bool trim = a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') && i + 1 < n &&
                    a[i + 1] == '\n'; /* read before the write below, which may land on a[i - 1] */
        a[m++] = a[i];
        if (trim) i++;
    }
    a[m] = 0;
    *out_len = m;
    return a;
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
            if (fl) {
                tk->f = strtod(tmp, NULL);
            } else {
                /* integers are 64-bit: a longer literal is an error, not a silent clamp */
                errno = 0;
                tk->i = strtoll(tmp, NULL, 10);
                if (errno == ERANGE || n > 19) lex_fail(L, start, "integer literal out of range");
            }
            L->pos += n;
        } else if (ch == '"' || ch == '\'') {
            struct sbuf b = {.c = L->c};
            size_t i = 1;
            wgllm_jinja_sb_put(&b, "", 0);
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
            jv s = wgllm_jinja_sb_to_value(L->c, &b);
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
    size_t loop_refs; /* names `loop` parsed so far: a for loop whose body has none needs no loop object */
};

static void nl_push(struct jctx *c, struct nlist *l, struct node *n) {
    if (l->n == l->cap) {
        if (l->cap >= UINT32_MAX / 2)
            wgllm_jinja_fail(c, WGLLM_STATUS_UNSUPPORTED, "a block of more than %u statements", l->cap);
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        struct node **nv = wgllm_jinja_alloc(c, cap * sizeof *nv);
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
    wgllm_jinja_fail(P->c, WGLLM_STATUS_BAD_FORMAT, "syntax error at line %d, column %d: %s (near '%.*s')",
          t->line, t->col, what, (int)(t->n > 20 ? 20 : t->n), t->s);
}

static struct node *mk(struct parser *P, enum nk k) {
    struct node *n = wgllm_jinja_alloc(P->c, sizeof *n);
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

/* Each recursive descent passes here, so the depth budget bounds the C stack. */
static void enter(struct parser *P) {
    if (++P->depth > P->c->lim.max_depth)
        wgllm_jinja_fail(P->c, WGLLM_STATUS_UNSUPPORTED,
                         "template exceeds its depth budget (%d levels) at line %d, column %d", P->c->lim.max_depth,
                         pk(P)->line, pk(P)->col);
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
        wgllm_jinja_sb_put(&b, "", 0);
        while (pk(P)->t == T_STR) { wgllm_jinja_sb_put(&b, pk(P)->s, pk(P)->n); P->i++; }
        n->lit = wgllm_jinja_sb_to_value(P->c, &b);
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
        if (KW("loop")) P->loop_refs++;
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
        size_t refs = P->loop_refs;
        p_body(P, &body->l1, stops);
        n->c = body;
        n->uses_loop = P->loop_refs != refs;
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
        if (nt->n == 4 && !memcmp(nt->s, "loop", 4)) P->loop_refs++; /* `set loop.x = ...` */
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

enum wgllm_status wgllm_chat_template_init(const char *src, size_t len, const struct wgllm_chat_params *params,
                                           struct wgllm_chat_template **out, struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_chat_template *t = calloc(1, sizeof *t);
    if (!t) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "chat template: out of memory");
    struct jctx c = {.arena = &t->arena, .err = err};
    wgllm_jinja_ctx_limits(&c, params);
    t->params = c.lim;
    struct lexer L = {.c = &c};
    if (setjmp(c.jb)) {
        free(L.toks);
        wgllm_jinja_arena_free(&t->arena);
        free(t);
        return c.status;
    }
    if (src && len > UINT32_MAX)
        wgllm_jinja_fail(&c, WGLLM_STATUS_UNSUPPORTED, "a template of %zu bytes (4 GiB at most)", len);
    L.src = preprocess(&c, src ? src : "", src ? len : 0, &L.len);
    lex_all(&L);
    struct parser P = {.c = &c, .L = &L};
    p_body(&P, &t->body, NULL);
    free(L.toks);
    *out = t;
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_chat_template_parse(const char *src, size_t len, struct wgllm_chat_template **out,
                                            struct wgllm_error *err) {
    return wgllm_chat_template_init(src, len, NULL, out, err);
}

void wgllm_chat_template_free(struct wgllm_chat_template *t) {
    if (!t) return;
    wgllm_jinja_arena_free(&t->arena);
    free(t);
}
