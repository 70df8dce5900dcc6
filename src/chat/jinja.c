/*
 * jinja.c - the Jinja subset interpreter behind chat templates: a
 * tree-walking interpreter over the AST from jinja_parse.c whose value
 * semantics follow @huggingface/jinja (the reference chat templates are
 * checked against), not Python's Jinja2, where the two differ (string
 * concatenation of numbers, `==` on objects by identity, JavaScript's trim()
 * whitespace set, JSON formatting of tojson).
 *
 * Memory: every value lives in the render's arena, freed in one go, so error
 * paths (longjmp out of any depth) never leak. Recursion depth is bounded so
 * no input can overflow the stack.
 */
#include "chat/jinja_internal.h"
#include "vocab/vocab.h" /* struct wgllm_text_span */

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* interpreter                                                               */
/* ------------------------------------------------------------------------- */

struct scope { struct scope *parent; struct jdict vars; };

struct interp {
    struct jctx *c;
    struct scope *global;
    struct sbuf *out;    /* where text goes now: the rendering, or a macro's or set block's body */
    int depth;           /* of eval / exec_list / macro calls, held to the depth budget */
    int macro_depth;     /* macro calls in progress, for the depth error's message */
    int ctl;             /* 1 break, 2 continue */
};

enum { F_RAISE = 1, F_NAMESPACE, F_RANGE, F_STRFTIME, F_DICT };

static jv *scope_lookup(struct jctx *c, struct scope *s, const char *k, size_t n) {
    jv *v = NULL;
    size_t walked = 0;
    for (; s && !(v = wgllm_jinja_dict_find(&s->vars, k, n)); s = s->parent) walked++;
    /* deep nests of loops make long scope chains: walking them is work too
     * (real templates walk a few, which stay free) */
    if (walked > 4) jcharge(c, walked);
    return v;
}

static _Noreturn void rt_fail(struct interp *I, const struct node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void rt_fail(struct interp *I, const struct node *n, const char *fmt, ...) {
    char buf[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    wgllm_jinja_fail(I->c, WGLLM_STATUS_UNSUPPORTED, "line %d, column %d: %s", n->line, n->col, buf);
}

/* Every recursion of the interpreter (eval, exec_list, macro calls) passes
 * here: the depth budget is what keeps the C stack bounded. */
static void enter(struct interp *I, const struct node *n) {
    if (++I->depth <= I->c->lim.max_depth) return;
    if (n) I->c->at = n;
    if (I->macro_depth && I->c->at)
        wgllm_jinja_fail(I->c, WGLLM_STATUS_UNSUPPORTED,
              "template exceeds its depth budget (%d levels) at line %d, column %d (macro recursion, %d calls deep)",
              I->c->lim.max_depth, I->c->at->line, I->c->at->col, I->macro_depth);
    wgllm_jinja_over(I->c, "depth", (uint64_t)I->c->lim.max_depth, "levels");
}

static jv eval(struct interp *I, const struct node *n, struct scope *s);
static void exec_list(struct interp *I, const struct nlist *l, struct scope *s);


static bool is_num(jv v) { return v.t == J_INT || v.t == J_FLOAT; }
static double num(jv v) { return v.t == J_INT ? (double)v.u.i : v.t == J_FLOAT ? v.u.f : v.t == J_BOOL ? v.u.b : 0; }

/* JavaScript `==` on the underlying values, as the reference compares */
static bool loose_eq(struct jctx *c, jv a, jv b) {
    if ((a.t == J_UNDEF || a.t == J_NONE) || (b.t == J_UNDEF || b.t == J_NONE))
        return (a.t == J_UNDEF || a.t == J_NONE) && (b.t == J_UNDEF || b.t == J_NONE);
    if (a.t == J_STR && b.t == J_STR) {
        if (a.u.s.n != b.u.s.n) return false;
        jcharge_bytes(c, a.u.s.n);
        return memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    }
    bool an = is_num(a) || a.t == J_BOOL, bn = is_num(b) || b.t == J_BOOL;
    if (an && bn) return num(a) == num(b);
    if (a.t == J_ARR && b.t == J_ARR) return a.u.a == b.u.a;
    if ((a.t == J_DICT || a.t == J_NS) && a.t == b.t) return a.u.d == b.u.d;
    return false;
}
/* `===` (used by `in` and the equalto test) */
static bool strict_eq(struct jctx *c, jv a, jv b) {
    jcharge(c, 1); /* callers walk lists with it */
    if (a.t != b.t && !(is_num(a) && is_num(b))) return false;
    if (a.t == J_UNDEF || a.t == J_NONE) return true;
    return loose_eq(c, a, b);
}

static jv concat2(struct interp *I, jv a, jv b) {
    struct sbuf sb = {.c = I->c};
    wgllm_jinja_sb_put(&sb, "", 0);
    wgllm_jinja_to_concat(I->c, &sb, a);
    wgllm_jinja_to_concat(I->c, &sb, b);
    return wgllm_jinja_sb_to_value(I->c, &sb);
}

static jv str_of(struct interp *I, jv v) {
    if (v.t == J_STR) return v;
    struct sbuf sb = {.c = I->c};
    wgllm_jinja_sb_put(&sb, "", 0);
    wgllm_jinja_to_text(I->c, &sb, v);
    return wgllm_jinja_sb_to_value(I->c, &sb);
}

static jv eval_bin(struct interp *I, const struct node *n, struct scope *s) {
    jv a = eval(I, n->a, s);
    const char *op = n->s;
    if (!strcmp(op, "and")) return wgllm_jinja_truthy(a) ? eval(I, n->b, s) : a;
    if (!strcmp(op, "or")) return wgllm_jinja_truthy(a) ? a : eval(I, n->b, s);
    jv b = eval(I, n->b, s);
    if (!strcmp(op, "==")) return jv_bool(loose_eq(I->c, a, b));
    if (!strcmp(op, "!=")) return jv_bool(!loose_eq(I->c, a, b));
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
        int64_t r;
        if (!fl && (!strcmp(op, "+") || !strcmp(op, "-") || !strcmp(op, "*"))) {
            /* integers are 64-bit here (numbers in the reference): past that is an error, not a wrap */
            bool over = op[0] == '+' ? __builtin_add_overflow(a.u.i, b.u.i, &r)
                      : op[0] == '-' ? __builtin_sub_overflow(a.u.i, b.u.i, &r)
                      : __builtin_mul_overflow(a.u.i, b.u.i, &r);
            if (over) rt_fail(I, n, "integer overflow in %lld %s %lld", (long long)a.u.i, op, (long long)b.u.i);
            return jv_int(r);
        }
        if (!strcmp(op, "+")) return jv_float(x + y);
        if (!strcmp(op, "-")) return jv_float(x - y);
        if (!strcmp(op, "*")) return jv_float(x * y);
        if (!strcmp(op, "/")) return jv_float(x / y);
        if (!strcmp(op, "//")) {
            if (!fl) { /* floor division, in integers so no double rounding or cast can go wrong */
                if (b.u.i == 0) rt_fail(I, n, "integer division by zero");
                if (a.u.i == INT64_MIN && b.u.i == -1) rt_fail(I, n, "integer overflow in %lld // -1", (long long)a.u.i);
                r = a.u.i / b.u.i;
                if (a.u.i % b.u.i != 0 && (a.u.i < 0) != (b.u.i < 0)) r--;
                return jv_int(r);
            }
            return jv_float(floor(x / y));
        }
        if (!strcmp(op, "%")) {
            if (!fl) {
                if (b.u.i == 0) rt_fail(I, n, "integer modulo by zero");
                if (b.u.i == -1) return jv_int(0); /* INT64_MIN % -1 traps in C */
                return jv_int(a.u.i % b.u.i); /* JavaScript's remainder keeps the dividend's sign */
            }
            return jv_float(fmod(x, y));
        }
        if (!strcmp(op, "<")) return jv_bool(x < y);
        if (!strcmp(op, ">")) return jv_bool(x > y);
        if (!strcmp(op, "<=")) return jv_bool(x <= y);
        if (!strcmp(op, ">=")) return jv_bool(x >= y);
    } else if (a.t == J_ARR && b.t == J_ARR && !strcmp(op, "+")) {
        jcharge(I->c, a.u.a->n + b.u.a->n);
        jv r = wgllm_jinja_arr_new(I->c);
        for (size_t i = 0; i < a.u.a->n; i++) wgllm_jinja_arr_push(I->c, r.u.a, a.u.a->v[i]);
        for (size_t i = 0; i < b.u.a->n; i++) wgllm_jinja_arr_push(I->c, r.u.a, b.u.a->v[i]);
        return r;
    } else if (b.t == J_ARR && (in || notin)) {
        bool found = false;
        for (size_t i = 0; i < b.u.a->n && !found; i++) found = strict_eq(I->c, b.u.a->v[i], a);
        return jv_bool(in ? found : !found);
    }
    if ((a.t == J_STR || b.t == J_STR) && !strcmp(op, "+")) return concat2(I, a, b);
    if (a.t == J_STR && b.t == J_STR) {
        if (in || notin) {
            jcharge_bytes(I->c, b.u.s.n);
            bool found = a.u.s.n == 0 || memmem(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL;
            return jv_bool(in ? found : !found);
        }
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        jcharge_bytes(I->c, m);
        int cmp = memcmp(a.u.s.p, b.u.s.p, m);
        if (!cmp) cmp = a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
        if (!strcmp(op, "<")) return jv_bool(cmp < 0);
        if (!strcmp(op, ">")) return jv_bool(cmp > 0);
        if (!strcmp(op, "<=")) return jv_bool(cmp <= 0);
        if (!strcmp(op, ">=")) return jv_bool(cmp >= 0);
    }
    if (a.t == J_STR && (b.t == J_DICT || b.t == J_NS) && (in || notin)) {
        bool found = wgllm_jinja_dict_find(b.u.d, a.u.s.p, a.u.s.n) != NULL;
        return jv_bool(in ? found : !found);
    }
    rt_fail(I, n, "unsupported operation: %s %s %s", wgllm_jinja_type_name(a.t), op, wgllm_jinja_type_name(b.t));
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

static jv get_member(struct interp *I, const struct node *n, jv o, const char *k, size_t kn) {
    if (o.t == J_DICT || o.t == J_NS) {
        jv *v = wgllm_jinja_dict_find(o.u.d, k, kn);
        return v ? *v : jv_undef();
    }
    if (o.t == J_ARR && kn == 6 && !memcmp(k, "length", 6)) return jv_int((int64_t)o.u.a->n);
    if (o.t == J_STR && kn == 6 && !memcmp(k, "length", 6)) return jv_int((int64_t)o.u.s.n);
    if (o.t == J_UNDEF || o.t == J_NONE)
        rt_fail(I, n, "cannot read attribute '%.*s' of %s", (int)(kn > 60 ? 60 : kn), k, wgllm_jinja_type_name(o.t));
    return jv_undef();
}

static jv do_slice(struct interp *I, const struct node *n, jv o, jv jstart, jv jstop, jv jstep) {
    size_t len = o.t == J_ARR ? o.u.a->n : o.t == J_STR ? o.u.s.n : 0;
    if (o.t != J_ARR && o.t != J_STR) rt_fail(I, n, "cannot slice a %s", wgllm_jinja_type_name(o.t));
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
    /* the element count first, in unsigned arithmetic: a step near INT64_MAX
     * or INT64_MIN must not be added to an index (it would wrap past the end) */
    uint64_t span = step > 0 ? (start < stop ? (uint64_t)(stop - start) : 0)
                             : (start > stop ? (uint64_t)(start - stop) : 0);
    uint64_t ustep = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
    uint64_t count = span ? (span - 1) / ustep + 1 : 0;
    if (o.t == J_STR && step == 1)
        return wgllm_jinja_sub(I->c, o, (size_t)start, (size_t)count); /* strings are immutable */
    jcharge(I->c, count);
    if (o.t == J_ARR) {
        jv r = wgllm_jinja_arr_new(I->c);
        for (uint64_t k = 0; k < count; k++) wgllm_jinja_arr_push(I->c, r.u.a, o.u.a->v[start + (int64_t)k * step]);
        return r;
    }
    struct sbuf sb = {.c = I->c};
    wgllm_jinja_sb_put(&sb, "", 0);
    for (uint64_t k = 0; k < count; k++) wgllm_jinja_sb_put_sub(&sb, o, (size_t)(start + (int64_t)k * step), 1);
    return wgllm_jinja_sb_to_value(I->c, &sb);
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
static jv str_strip(struct jctx *c, jv v, bool left, bool right, jv chars) {
    const char *p = v.u.s.p;
    size_t n = v.u.s.n;
    if (chars.t == J_STR) {
        /* each byte stripped is a search of chars */
        while (left && n && (jcharge_bytes(c, chars.u.s.n), memchr(chars.u.s.p, *p, chars.u.s.n))) { p++; n--; }
        while (right && n && (jcharge_bytes(c, chars.u.s.n), memchr(chars.u.s.p, p[n - 1], chars.u.s.n))) n--;
        return wgllm_jinja_sub(c, v, (size_t)(p - v.u.s.p), n);
    }
    size_t w;
    while (left && n && (w = ws_len_at(p, n)) > 0) { p += w; n -= w; }
    while (right && n && (w = ws_len_before(p, n)) > 0) n -= w;
    jcharge_bytes(c, v.u.s.n - n);
    return wgllm_jinja_sub(c, v, (size_t)(p - v.u.s.p), n);
}

static jv str_case(struct interp *I, jv v, int mode) { /* 0 lower 1 upper 2 capitalize 3 title */
    char *o = wgllm_jinja_alloc(I->c, v.u.s.n + 1);
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
    return jv_str_t(o, v.u.s.n, v.u.s.t); /* byte for byte: the same spans */
}

static jv str_replace(struct interp *I, jv v, jv from, jv to, int64_t count) {
    if (from.t != J_STR || to.t != J_STR) return v;
    struct sbuf sb = {.c = I->c};
    wgllm_jinja_sb_put(&sb, "", 0);
    size_t i = 0;
    int64_t done = 0;
    jcharge_bytes(I->c, v.u.s.n);
    while (i <= v.u.s.n) {
        if (count >= 0 && done >= count) break;
        jcharge(I->c, 1);
        const char *hit;
        if (from.u.s.n == 0) hit = v.u.s.p + i;
        else hit = memmem(v.u.s.p + i, v.u.s.n - i, from.u.s.p, from.u.s.n);
        if (!hit) break;
        size_t at = (size_t)(hit - v.u.s.p);
        wgllm_jinja_sb_put_sub(&sb, v, i, at - i);
        wgllm_jinja_sb_put_str(&sb, to);
        done++;
        if (from.u.s.n == 0) {
            if (at < v.u.s.n) wgllm_jinja_sb_put_sub(&sb, v, at, 1);
            i = at + 1;
        } else {
            i = at + from.u.s.n;
        }
    }
    if (i < v.u.s.n) wgllm_jinja_sb_put_sub(&sb, v, i, v.u.s.n - i);
    return wgllm_jinja_sb_to_value(I->c, &sb);
}

static jv str_split(struct interp *I, jv v, jv sep, int64_t maxsplit) {
    jv r = wgllm_jinja_arr_new(I->c);
    const char *p = v.u.s.p;
    size_t n = v.u.s.n;
    jcharge_bytes(I->c, n);
    if (sep.t != J_STR) { /* whitespace runs */
        size_t i = 0;
        while (i < n) {
            while (i < n && is_ws(p[i])) i++;
            if (i >= n) break;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)r.u.a->n >= maxsplit) j = n;
            else while (j < n && !is_ws(p[j])) j++;
            jcharge(I->c, 1);
            wgllm_jinja_arr_push(I->c, r.u.a, wgllm_jinja_sub(I->c, v, i, j - i));
            i = j;
        }
        return r;
    }
    if (sep.u.s.n == 0) wgllm_jinja_fail(I->c, WGLLM_STATUS_UNSUPPORTED, "split: empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = (maxsplit >= 0 && (int64_t)r.u.a->n >= maxsplit) ? NULL
                          : memmem(p + i, n - i, sep.u.s.p, sep.u.s.n);
        jcharge(I->c, 1);
        if (!hit) { wgllm_jinja_arr_push(I->c, r.u.a, wgllm_jinja_sub(I->c, v, i, n - i)); break; }
        wgllm_jinja_arr_push(I->c, r.u.a, wgllm_jinja_sub(I->c, v, i, (size_t)(hit - (p + i))));
        i = (size_t)(hit - p) + sep.u.s.n;
    }
    return r;
}

static jv dict_items(struct interp *I, jv d) {
    jcharge(I->c, d.u.d->n);
    jv r = wgllm_jinja_arr_new(I->c);
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv pair = wgllm_jinja_arr_new(I->c);
        wgllm_jinja_arr_push(I->c, pair.u.a, wgllm_jinja_dict_key(d.u.d, i));
        wgllm_jinja_arr_push(I->c, pair.u.a, d.u.d->v[i]);
        wgllm_jinja_arr_push(I->c, r.u.a, pair);
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
            jcharge_bytes(I->c, p.u.s.n);
            bool r = p.u.s.n <= o.u.s.n &&
                     !memcmp(M("startswith") ? o.u.s.p : o.u.s.p + o.u.s.n - p.u.s.n, p.u.s.p, p.u.s.n);
            *out = jv_bool(r);
            return true;
        }
        if (M("strip")) { *out = str_strip(I->c, o, true, true, arg(A, 0, "chars")); return true; }
        if (M("lstrip")) { *out = str_strip(I->c, o, true, false, arg(A, 0, "chars")); return true; }
        if (M("rstrip")) { *out = str_strip(I->c, o, false, true, arg(A, 0, "chars")); return true; }
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
            jcharge(I->c, o.u.d->n);
            jv r = wgllm_jinja_arr_new(I->c);
            for (size_t i = 0; i < o.u.d->n; i++)
                wgllm_jinja_arr_push(I->c, r.u.a, M("keys") ? wgllm_jinja_dict_key(o.u.d, i) : o.u.d->v[i]);
            *out = r;
            return true;
        }
        if (M("get")) {
            jv k = arg(A, 0, "key");
            jv *v = k.t == J_STR ? wgllm_jinja_dict_find(o.u.d, k.u.s.p, k.u.s.n) : NULL;
            *out = v ? *v : (A->npos > 1 ? A->pos[1] : jv_none());
            return true;
        }
    }
    if (o.t == J_ARR && M("append")) {
        wgllm_jinja_arr_push(I->c, o.u.a, arg(A, 0, "x"));
        *out = jv_none();
        return true;
    }
#undef M
    return false;
}

static jv call_macro(struct interp *I, const struct node *call, const struct node *mac, const struct args *A) {
    I->macro_depth++;
    enter(I, call);
    struct scope *ms = wgllm_jinja_alloc(I->c, sizeof *ms);
    ms->parent = I->global;
    for (size_t i = 0; i < mac->l1.n; i++) {
        const struct node *p = mac->l1.v[i];
        jv v = jv_undef();
        bool got = false;
        for (size_t k = 0; k < A->nkw; k++)
            if (A->kl[k] == p->sn && !memcmp(A->kn[k], p->s, p->sn)) { v = A->kv[k]; got = true; }
        if (!got && i < A->npos) { v = A->pos[i]; got = true; }
        if (!got && p->a) v = eval(I, p->a, ms);
        wgllm_jinja_dict_set(I->c, &ms->vars, p->s, p->sn, v);
    }
    struct sbuf *saved = I->out;
    struct sbuf body = {.c = I->c};
    wgllm_jinja_sb_put(&body, "", 0);
    I->out = &body;
    exec_list(I, &mac->l2, ms);
    I->out = saved;
    I->depth--;
    I->macro_depth--;
    return wgllm_jinja_sb_to_value(I->c, &body);
}

static jv eval_call(struct interp *I, const struct node *n, struct scope *s) {
    struct args A;
    if (n->a->k == N_MEMBER) {
        jv o = eval(I, n->a->a, s);
        jv f = (o.t == J_DICT || o.t == J_NS) ? get_member(I, n, o, n->a->s, n->a->sn) : jv_undef();
        eval_args(I, n, s, &A);
        /* a macro kept in a namespace or dict; the object is evaluated once
         * (evaluating it again per call nests into 2^depth evaluations) */
        if (f.t == J_MACRO) return call_macro(I, n, f.u.m, &A);
        jv r;
        if (call_method(I, n, o, n->a->s, n->a->sn, &A, &r)) return r;
        rt_fail(I, n, "unknown method '%.*s' of a %s", (int)(n->a->sn > 60 ? 60 : n->a->sn), n->a->s,
                wgllm_jinja_type_name(o.t));
    }
    jv f = eval(I, n->a, s);
    eval_args(I, n, s, &A);
    if (f.t == J_MACRO) return call_macro(I, n, f.u.m, &A);
    if (f.t == J_FUNC) {
        switch (f.u.fn) {
        case F_RAISE: {
            jv m = str_of(I, arg(&A, 0, "message"));
            wgllm_jinja_fail(I->c, WGLLM_STATUS_INVALID_ARGUMENT, "raise_exception: %.*s", (int)(m.u.s.n > 300 ? 300 : m.u.s.n), m.u.s.p);
        }
        case F_NAMESPACE: case F_DICT: {
            jv d = wgllm_jinja_dict_new(I->c, f.u.fn == F_NAMESPACE ? J_NS : J_DICT);
            if (A.npos && A.pos[0].t == J_DICT) jcharge(I->c, A.pos[0].u.d->n);
            if (A.npos && A.pos[0].t == J_DICT)
                for (size_t i = 0; i < A.pos[0].u.d->n; i++)
                    wgllm_jinja_dict_set_key(I->c, d.u.d, wgllm_jinja_dict_key(A.pos[0].u.d, i), A.pos[0].u.d->v[i]);
            for (size_t k = 0; k < A.nkw; k++) wgllm_jinja_dict_set(I->c, d.u.d, A.kn[k], A.kl[k], A.kv[k]);
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
            /* the length in unsigned arithmetic (no element is start + k * step past
             * int64), each element a step, the list allocated once */
            uint64_t span = step > 0 ? (start < stop ? (uint64_t)stop - (uint64_t)start : 0)
                                     : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
            uint64_t ustep = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
            uint64_t count = span ? (span - 1) / ustep + 1 : 0;
            jcharge(I->c, count);
            if (count > I->c->lim.max_memory / sizeof(jv))
                wgllm_jinja_over(I->c, "memory", I->c->lim.max_memory, "bytes");
            jv r = wgllm_jinja_arr_new(I->c);
            if (count) {
                r.u.a->v = wgllm_jinja_alloc(I->c, (size_t)count * sizeof *r.u.a->v);
                r.u.a->n = r.u.a->cap = (size_t)count;
                for (uint64_t k = 0; k < count; k++)
                    r.u.a->v[k] = jv_int((int64_t)((uint64_t)start + k * (uint64_t)step));
            }
            return r;
        }
        case F_STRFTIME: {
            jv fmt = arg(&A, 0, "format");
            if (fmt.t != J_STR) rt_fail(I, n, "strftime_now expects a format string");
            char *z = wgllm_jinja_strdup(I->c, fmt.u.s.p, fmt.u.s.n);
            time_t now = time(NULL);
            struct tm tmv;
            gmtime_r(&now, &tmv);
            char buf[256];
            size_t k = strftime(buf, sizeof buf, z, &tmv);
            return jv_str(wgllm_jinja_strdup(I->c, buf, k), k);
        }
        }
    }
    if (n->a->k == N_NAME) rt_fail(I, n, "unknown function '%.*s'", (int)(n->a->sn > 60 ? 60 : n->a->sn), n->a->s);
    rt_fail(I, n, "cannot call a %s", wgllm_jinja_type_name(f.t));
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
        if (v.t != J_INT) rt_fail(I, n, "odd/even test on a %s", wgllm_jinja_type_name(v.t));
        return (v.u.i % 2 != 0) == T("odd");
    }
    if (T("lower") || T("upper")) {
        if (v.t != J_STR) return false;
        jv c2 = str_case(I, v, T("upper"));
        return memcmp(c2.u.s.p, v.u.s.p, v.u.s.n) == 0;
    }
    if (T("equalto") || T("eq") || T("==")) return strict_eq(I->c, v, A->npos ? A->pos[0] : jv_undef());
    if (T("ne") || T("!=")) return !strict_eq(I->c, v, A->npos ? A->pos[0] : jv_undef());
    if (T("in")) {
        jv c2 = A->npos ? A->pos[0] : jv_undef();
        if (c2.t == J_ARR) {
            for (size_t i = 0; i < c2.u.a->n; i++) if (strict_eq(I->c, c2.u.a->v[i], v)) return true;
            return false;
        }
        if (c2.t == J_STR && v.t == J_STR) jcharge_bytes(I->c, c2.u.s.n);
        if (c2.t == J_STR && v.t == J_STR) return memmem(c2.u.s.p, c2.u.s.n, v.u.s.p, v.u.s.n) != NULL || v.u.s.n == 0;
        if (c2.t == J_DICT && v.t == J_STR) return wgllm_jinja_dict_find(c2.u.d, v.u.s.p, v.u.s.n) != NULL;
        return false;
    }
#undef T
    rt_fail(I, n, "unknown test '%.*s'", (int)(nl > 60 ? 60 : nl), name);
}

static jv select_filter(struct interp *I, const struct node *n, jv v, const struct args *A, bool attr, bool keep) {
    if (v.t != J_ARR) rt_fail(I, n, "select/reject filters need a list, got a %s", wgllm_jinja_type_name(v.t));
    size_t first = attr ? 1 : 0;
    jv tname = A->npos > first ? A->pos[first] : jv_undef();
    struct args TA = {0};
    for (size_t i = first + 1; i < A->npos && TA.npos < 8; i++) TA.pos[TA.npos++] = A->pos[i];
    jcharge(I->c, v.u.a->n);
    jv r = wgllm_jinja_arr_new(I->c);
    for (size_t i = 0; i < v.u.a->n; i++) {
        jv x = v.u.a->v[i];
        if (attr) {
            jv an = A->npos ? A->pos[0] : jv_undef();
            if (an.t != J_STR) rt_fail(I, n, "selectattr needs an attribute name");
            x = (x.t == J_DICT || x.t == J_NS) ? get_member(I, n, x, an.u.s.p, an.u.s.n) : jv_undef();
        }
        bool ok = tname.t == J_STR ? run_test(I, n, tname.u.s.p, tname.u.s.n, x, &TA) : wgllm_jinja_truthy(x);
        if (ok == keep) wgllm_jinja_arr_push(I->c, r.u.a, v.u.a->v[i]);
    }
    return r;
}

static jv apply_filter(struct interp *I, const struct node *n, const char *name, size_t nl, jv v, const struct args *A, struct scope *s) {
#define F(x) (nl == strlen(x) && !memcmp(name, x, nl))
    if (F("default") || F("d")) {
        jv dv = A->npos ? A->pos[0] : jv_str("", 0);
        bool boolean = A->npos > 1 && wgllm_jinja_truthy(A->pos[1]);
        if (v.t == J_UNDEF || (boolean && !wgllm_jinja_truthy(v))) return dv;
        return v;
    }
    if (F("tojson")) {
        jv ind = arg(A, 0, "indent");
        struct sbuf sb = {.c = I->c};
        wgllm_jinja_sb_put(&sb, "", 0);
        wgllm_jinja_to_json(I->c, &sb, v, ind.t == J_INT && ind.u.i > 0 && ind.u.i < 64 ? (int)ind.u.i : 0, 0, true);
        return wgllm_jinja_sb_to_value(I->c, &sb);
    }
    if (F("string")) {
        if (v.t == J_ARR || v.t == J_DICT || v.t == J_NS) {
            struct sbuf sb = {.c = I->c};
            wgllm_jinja_sb_put(&sb, "", 0);
            wgllm_jinja_to_json(I->c, &sb, v, 0, 0, false);
            return wgllm_jinja_sb_to_value(I->c, &sb);
        }
        return str_of(I, v);
    }
    if (F("safe")) return v;
    if (F("length") || F("count")) {
        if (v.t == J_STR) { /* the reference counts UTF-16 code units */
            jcharge_bytes(I->c, v.u.s.n);
            int64_t k = 0;
            for (size_t i = 0; i < v.u.s.n; i++) {
                unsigned char ch = (unsigned char)v.u.s.p[i];
                if ((ch & 0xc0) != 0x80) k += ch >= 0xf0 ? 2 : 1;
            }
            return jv_int(k);
        }
        if (v.t == J_ARR) return jv_int((int64_t)v.u.a->n);
        if (v.t == J_DICT) return jv_int((int64_t)v.u.d->n);
        rt_fail(I, n, "length of a %s", wgllm_jinja_type_name(v.t));
    }
    if (F("list")) {
        if (v.t == J_ARR) return v;
        if (v.t == J_DICT) return call_method(I, n, v, "keys", 4, A, &v), v;
        if (v.t == J_STR) {
            jcharge(I->c, v.u.s.n);
            jv r = wgllm_jinja_arr_new(I->c);
            for (size_t i = 0; i < v.u.s.n;) {
                size_t k = 1;
                while (i + k < v.u.s.n && ((unsigned char)v.u.s.p[i + k] & 0xc0) == 0x80) k++;
                wgllm_jinja_arr_push(I->c, r.u.a, wgllm_jinja_sub(I->c, v, i, k));
                i += k;
            }
            return r;
        }
        rt_fail(I, n, "list of a %s", wgllm_jinja_type_name(v.t));
    }
    if (F("items")) {
        if (v.t == J_DICT) return dict_items(I, v);
        if (v.t == J_UNDEF) return wgllm_jinja_arr_new(I->c);
        rt_fail(I, n, "items of a %s", wgllm_jinja_type_name(v.t));
    }
    if (F("selectattr")) return select_filter(I, n, v, A, true, true);
    if (F("rejectattr")) return select_filter(I, n, v, A, true, false);
    if (F("select")) return select_filter(I, n, v, A, false, true);
    if (F("reject")) return select_filter(I, n, v, A, false, false);
    if (F("map")) {
        if (v.t != J_ARR) rt_fail(I, n, "map of a %s", wgllm_jinja_type_name(v.t));
        jv at = arg(A, 99, "attribute");
        jcharge(I->c, v.u.a->n);
        jv r = wgllm_jinja_arr_new(I->c);
        for (size_t i = 0; i < v.u.a->n; i++) {
            jv x = v.u.a->v[i];
            if (at.t == J_STR) {
                x = (x.t == J_DICT || x.t == J_NS) ? get_member(I, n, x, at.u.s.p, at.u.s.n) : jv_undef();
                if (x.t == J_UNDEF) x = arg(A, 99, "default");
            } else if (A->npos && A->pos[0].t == J_STR) {
                x = apply_filter(I, n, A->pos[0].u.s.p, A->pos[0].u.s.n, x, &(struct args){0}, s);
            }
            wgllm_jinja_arr_push(I->c, r.u.a, x);
        }
        return r;
    }
    if (F("first") || F("last")) {
        if (v.t == J_ARR) return v.u.a->n ? v.u.a->v[F("first") ? 0 : v.u.a->n - 1] : jv_undef();
        if (v.t == J_STR) return v.u.s.n ? wgllm_jinja_sub(I->c, v, F("first") ? 0 : v.u.s.n - 1, 1) : jv_undef();
        rt_fail(I, n, "first/last of a %s", wgllm_jinja_type_name(v.t));
    }
    if (F("join")) {
        if (v.t != J_ARR) rt_fail(I, n, "join of a %s", wgllm_jinja_type_name(v.t));
        jv sep = A->npos ? A->pos[0] : jv_str("", 0);
        jcharge(I->c, v.u.a->n);
        struct sbuf sb = {.c = I->c};
        wgllm_jinja_sb_put(&sb, "", 0);
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i && sep.t == J_STR) wgllm_jinja_sb_put_str(&sb, sep);
            wgllm_jinja_to_concat(I->c, &sb, v.u.a->v[i]);
        }
        return wgllm_jinja_sb_to_value(I->c, &sb);
    }
    if (F("int")) {
        if (v.t == J_INT) return v;
        if (v.t == J_FLOAT) {
            /* a double outside int64 (or NaN) has no integer: converting it would be undefined */
            if (!(v.u.f >= -9223372036854775808.0 && v.u.f < 9223372036854775808.0))
                rt_fail(I, n, "int(): %g does not fit in a 64-bit integer", v.u.f);
            return jv_int((int64_t)v.u.f);
        }
        if (v.t == J_BOOL) return jv_int(v.u.b);
        if (v.t == J_STR) {
            char *z = wgllm_jinja_strdup(I->c, v.u.s.p, v.u.s.n);
            errno = 0;
            int64_t k = strtoll(z, NULL, 10);
            if (errno == ERANGE) rt_fail(I, n, "int(): '%.40s' does not fit in a 64-bit integer", z);
            return jv_int(k);
        }
        return jv_int(0);
    }
    if (F("float")) {
        if (is_num(v)) return jv_float(num(v));
        if (v.t == J_STR) { char *z = wgllm_jinja_strdup(I->c, v.u.s.p, v.u.s.n); return jv_float(strtod(z, NULL)); }
        return jv_float(0);
    }
    if (F("abs") && is_num(v)) {
        if (v.t == J_INT && v.u.i == INT64_MIN) rt_fail(I, n, "integer overflow in abs(%lld)", (long long)v.u.i);
        return v.t == J_INT ? jv_int(v.u.i < 0 ? -v.u.i : v.u.i) : jv_float(fabs(v.u.f));
    }
    if (F("unique") && v.t == J_ARR) {
        jv r = wgllm_jinja_arr_new(I->c);
        for (size_t i = 0; i < v.u.a->n; i++) {
            bool seen = false;
            for (size_t k = 0; k < r.u.a->n && !seen; k++) seen = strict_eq(I->c, r.u.a->v[k], v.u.a->v[i]);
            if (!seen) wgllm_jinja_arr_push(I->c, r.u.a, v.u.a->v[i]);
        }
        return r;
    }
    if (v.t == J_STR) {
        if (F("trim")) return str_strip(I->c, v, true, true, jv_undef());
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
            if (width < 0) width = 0;
            bool first = wgllm_jinja_truthy(arg(A, 1, "first"));
            struct sbuf sb = {.c = I->c};
            wgllm_jinja_sb_put(&sb, "", 0);
            /* lines but blank ones get the indent (the first only with first=true);
             * a huge width runs into the memory budget, one chunk at a time */
            for (size_t i = 0; i < v.u.s.n; i++) {
                if (i == 0 && first && v.u.s.p[0] != '\n') wgllm_jinja_sb_pad(&sb, ' ', (uint64_t)width);
                wgllm_jinja_sb_put_sub(&sb, v, i, 1);
                if (v.u.s.p[i] == '\n' && i + 1 < v.u.s.n && v.u.s.p[i + 1] != '\n')
                    wgllm_jinja_sb_pad(&sb, ' ', (uint64_t)width);
            }
            return wgllm_jinja_sb_to_value(I->c, &sb);
        }
    }
#undef F
    rt_fail(I, n, "unknown filter '%.*s' for a %s", (int)(nl > 60 ? 60 : nl), name, wgllm_jinja_type_name(v.t));
}

static jv eval(struct interp *I, const struct node *n, struct scope *s) {
    I->c->at = n;
    jcharge(I->c, 1);
    enter(I, n);
    jv r = jv_undef();
    switch (n->k) {
    case N_LIT: r = n->lit; break;
    case N_NAME: {
        jv *v = scope_lookup(I->c, s, n->s, n->sn);
        r = v ? *v : jv_undef();
        break;
    }
    case N_LIST: {
        r = wgllm_jinja_arr_new(I->c);
        for (size_t i = 0; i < n->l1.n; i++) wgllm_jinja_arr_push(I->c, r.u.a, eval(I, n->l1.v[i], s));
        break;
    }
    case N_DICT: {
        r = wgllm_jinja_dict_new(I->c, J_DICT);
        for (size_t i = 0; i < n->l1.n; i++) {
            jv k = eval(I, n->l1.v[i], s);
            if (k.t != J_STR) k = str_of(I, k);
            wgllm_jinja_dict_set_key(I->c, r.u.d, k, eval(I, n->l2.v[i], s));
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
            r = i >= 0 && i < (int64_t)o.u.s.n ? wgllm_jinja_sub(I->c, o, (size_t)i, 1) : jv_undef();
        } else if (o.t == J_UNDEF || o.t == J_NONE) {
            rt_fail(I, n, "cannot index %s", wgllm_jinja_type_name(o.t));
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
        if (n->s[0] == 'n') r = jv_bool(!wgllm_jinja_truthy(v));
        else if (v.t == J_INT && n->s[0] == '-' && v.u.i == INT64_MIN) rt_fail(I, n, "integer overflow in -(%lld)", (long long)v.u.i);
        else if (v.t == J_INT) r = jv_int(n->s[0] == '-' ? -v.u.i : v.u.i);
        else if (v.t == J_FLOAT) r = jv_float(n->s[0] == '-' ? -v.u.f : v.u.f);
        else rt_fail(I, n, "unary %c on a %s", n->s[0], wgllm_jinja_type_name(v.t));
        break;
    }
    case N_BIN: r = eval_bin(I, n, s); break;
    case N_COND:
        if (wgllm_jinja_truthy(eval(I, n->b, s))) r = eval(I, n->a, s);
        else r = n->c ? eval(I, n->c, s) : jv_undef();
        break;
    default: rt_fail(I, n, "statement used as an expression");
    }
    I->depth--;
    return r;
}

/* The `loop` object of iteration i: its keys are shared, so one costs only its values. */
static jv loop_object(struct interp *I, const struct jarr *items, size_t cnt, size_t i) {
    static const char *keys[9] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                  "length", "previtem", "nextitem"};
    static size_t lens[9] = {5, 6, 8, 9, 5, 4, 6, 8, 8};
    jv loop = wgllm_jinja_dict_new(I->c, J_DICT);
    struct jdict *d = loop.u.d;
    d->kp = keys; /* wgllm_jinja_dict_set copies the arrays before it adds a key, so these stay as they are */
    d->kn = lens;
    d->v = wgllm_jinja_alloc(I->c, 9 * sizeof *d->v);
    d->n = d->cap = 9;
    d->v[0] = jv_int((int64_t)i + 1);
    d->v[1] = jv_int((int64_t)i);
    d->v[2] = jv_int((int64_t)(cnt - i));
    d->v[3] = jv_int((int64_t)(cnt - i - 1));
    d->v[4] = jv_bool(i == 0);
    d->v[5] = jv_bool(i == cnt - 1);
    d->v[6] = jv_int((int64_t)cnt);
    d->v[7] = i > 0 ? items->v[i - 1] : jv_undef();
    d->v[8] = i + 1 < cnt ? items->v[i + 1] : jv_undef();
    return loop;
}

static void exec_for(struct interp *I, const struct node *n, struct scope *s) {
    struct scope *ls = wgllm_jinja_alloc(I->c, sizeof *ls);
    ls->parent = s;
    jv it = eval(I, n->a, ls);
    if (it.t == J_DICT) {
        jcharge(I->c, it.u.d->n);
        jv k = wgllm_jinja_arr_new(I->c);
        for (size_t i = 0; i < it.u.d->n; i++) wgllm_jinja_arr_push(I->c, k.u.a, wgllm_jinja_dict_key(it.u.d, i));
        it = k;
    }
    if (it.t != J_ARR) rt_fail(I, n, "for loop over a %s", wgllm_jinja_type_name(it.t));
    const struct nlist *vars = &n->l1;
    /* bind the loop variable(s) into scope t */
#define BIND(SC, x)                                                                            \
    do {                                                                                      \
        if (vars->n == 1) wgllm_jinja_dict_set(I->c, &(SC)->vars, vars->v[0]->s, vars->v[0]->sn, (x));     \
        else {                                                                                \
            if ((x).t != J_ARR || (x).u.a->n != vars->n)                                      \
                rt_fail(I, n, "cannot unpack a %s into %u loop variables", wgllm_jinja_type_name((x).t), vars->n); \
            for (size_t q = 0; q < vars->n; q++)                                              \
                wgllm_jinja_dict_set(I->c, &(SC)->vars, vars->v[q]->s, vars->v[q]->sn, (x).u.a->v[q]);     \
        }                                                                                     \
    } while (0)
    jv items = it;
    if (n->b) { /* `for x in xs if cond`: the items that pass, in a scope of their own */
        items = wgllm_jinja_arr_new(I->c);
        struct scope *ts = wgllm_jinja_alloc(I->c, sizeof *ts);
        ts->parent = ls;
        for (size_t i = 0; i < it.u.a->n; i++) {
            jv x = it.u.a->v[i];
            jcharge(I->c, 1);
            BIND(ts, x);
            if (wgllm_jinja_truthy(eval(I, n->b, ts))) wgllm_jinja_arr_push(I->c, items.u.a, x);
        }
    }
    /* The body may append to the list it walks (nothing else changes a list):
     * the walk covers the items it had when it began. */
    const size_t cnt = items.u.a->n;
    for (size_t i = 0; i < cnt; i++) {
        jv x = items.u.a->v[i];
        jcharge(I->c, 1);
        /* only a body that names `loop` gets the object: a long loop otherwise costs no memory per turn */
        if (n->uses_loop) wgllm_jinja_dict_setz(I->c, &ls->vars, "loop", loop_object(I, items.u.a, cnt, i));
        BIND(ls, x);
        exec_list(I, &n->c->l1, ls);
        if (I->ctl == 1) { I->ctl = 0; break; }
        I->ctl = 0;
    }
#undef BIND
    if (cnt == 0 && n->d) exec_list(I, &n->d->l1, ls);
}

static void exec_node(struct interp *I, const struct node *n, struct scope *s) {
    I->c->at = n;
    jcharge(I->c, 1);
    switch (n->k) {
    case N_TEXT: wgllm_jinja_sb_put(I->out, n->s, n->sn); return;
    case N_OUTPUT: wgllm_jinja_to_text(I->c, I->out, eval(I, n->a, s)); return;
    case N_IF:
        if (wgllm_jinja_truthy(eval(I, n->a, s))) exec_list(I, &n->l1, s);
        else exec_list(I, &n->l2, s);
        return;
    case N_FOR: exec_for(I, n, s); return;
    case N_SET: {
        jv v;
        if (n->b) v = eval(I, n->b, s);
        else {
            struct sbuf *saved = I->out;
            struct sbuf body = {.c = I->c};
            wgllm_jinja_sb_put(&body, "", 0);
            I->out = &body;
            exec_list(I, &n->l1, s);
            I->out = saved;
            v = wgllm_jinja_sb_to_value(I->c, &body);
        }
        if (n->a->k == N_NAME) {
            wgllm_jinja_dict_set(I->c, &s->vars, n->a->s, n->a->sn, v);
        } else {
            jv o = eval(I, n->a->a, s);
            if (o.t != J_NS && o.t != J_DICT)
                rt_fail(I, n, "cannot set an attribute on a %s", wgllm_jinja_type_name(o.t));
            wgllm_jinja_dict_set(I->c, o.u.d, n->a->s, n->a->sn, v);
        }
        return;
    }
    case N_MACRO: {
        jv m = {.t = J_MACRO};
        m.u.m = n;
        wgllm_jinja_dict_set(I->c, &s->vars, n->s, n->sn, m);
        return;
    }
    case N_BREAK: I->ctl = 1; return;
    case N_CONTINUE: I->ctl = 2; return;
    default: rt_fail(I, n, "expression used as a statement");
    }
}

static void exec_list(struct interp *I, const struct nlist *l, struct scope *s) {
    enter(I, l->n ? l->v[0] : NULL);
    for (size_t i = 0; i < l->n && !I->ctl; i++) exec_node(I, l->v[i], s);
    I->depth--;
}

/* ------------------------------------------------------------------------- */
/* public API                                                                */
/* ------------------------------------------------------------------------- */



enum wgllm_status wgllm_chat_template_render_json_spans(const struct wgllm_chat_template *t,
                                                        const char *messages_json, const char *tools_json,
                                                        const char *kwargs_json, bool add_generation_prompt, const char *bos_token,
                                                        const char *eos_token, char **out,
                                                        struct wgllm_text_span **spans, size_t *n_spans,
                                                        struct wgllm_error *err) {
    *out = NULL;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (!t || !messages_json)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat template: NULL template or messages");
    struct jarena arena = {0};
    struct jctx c = {.arena = &arena, .err = err};
    wgllm_jinja_ctx_limits(&c, &t->params);
    struct sbuf result = {.c = &c, .heap = true};
    if (setjmp(c.jb)) {
        free(result.p);
        wgllm_jinja_arena_free(&arena);
        return c.status;
    }
    struct scope *g = wgllm_jinja_alloc(&c, sizeof *g);
    if (kwargs_json) {
        /* first, so that a key cannot replace messages, tools or the tokens set below */
        struct jsonp kp = {.c = &c, .p = kwargs_json, .start = kwargs_json, .end = kwargs_json + strlen(kwargs_json),
                           .request = true};
        jv kw = wgllm_jinja_json_value(&kp);
        if (kw.t != J_DICT) wgllm_jinja_fail(&c, WGLLM_STATUS_INVALID_ARGUMENT, "template arguments must be a JSON object");
        for (size_t i = 0; i < kw.u.d->n; i++) wgllm_jinja_dict_set(&c, &g->vars, kw.u.d->kp[i], kw.u.d->kn[i], kw.u.d->v[i]);
    }
    struct jsonp jp = {.c = &c, .p = messages_json, .start = messages_json,
                       .end = messages_json + strlen(messages_json), .request = true};
    jv msgs = wgllm_jinja_json_value(&jp);
    if (msgs.t != J_ARR) wgllm_jinja_fail(&c, WGLLM_STATUS_INVALID_ARGUMENT, "messages must be a JSON array");
    wgllm_jinja_dict_setz(&c, &g->vars, "messages", msgs);
    if (tools_json) {
        struct jsonp tp = {.c = &c, .p = tools_json, .start = tools_json, .end = tools_json + strlen(tools_json),
                           .request = true};
        wgllm_jinja_dict_setz(&c, &g->vars, "tools", wgllm_jinja_json_value(&tp));
    }
    wgllm_jinja_dict_setz(&c, &g->vars, "add_generation_prompt", jv_bool(add_generation_prompt));
    const char *bos = bos_token ? bos_token : "", *eos = eos_token ? eos_token : "";
    wgllm_jinja_dict_setz(&c, &g->vars, "bos_token", jv_str(bos, strlen(bos)));
    wgllm_jinja_dict_setz(&c, &g->vars, "eos_token", jv_str(eos, strlen(eos)));
    static const struct { const char *name; int fn; } funcs[] = {
        {"raise_exception", F_RAISE}, {"namespace", F_NAMESPACE}, {"range", F_RANGE},
        {"strftime_now", F_STRFTIME}, {"dict", F_DICT}};
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++) {
        jv f = {.t = J_FUNC};
        f.u.fn = funcs[i].fn;
        wgllm_jinja_dict_setz(&c, &g->vars, funcs[i].name, f);
    }
    struct interp I = {.c = &c, .global = g, .out = &result};
    wgllm_jinja_sb_put(&result, "", 0);
    exec_list(&I, &t->body, g);
    if (spans && result.sn) {
        *spans = malloc(result.sn * sizeof **spans);
        if (!*spans) wgllm_jinja_fail(&c, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory (%zu spans)", result.sn);
        for (size_t i = 0; i < result.sn; i++) (*spans)[i] = (struct wgllm_text_span){result.sv[i].off, result.sv[i].len};
        *n_spans = result.sn;
    }
    *out = result.p;
    wgllm_jinja_arena_free(&arena);
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_chat_template_render_json(const struct wgllm_chat_template *t, const char *messages_json,
                                                  const char *tools_json, bool add_generation_prompt,
                                                  const char *bos_token, const char *eos_token, char **out,
                                                  struct wgllm_error *err) {
    return wgllm_chat_template_render_json_spans(t, messages_json, tools_json, NULL, add_generation_prompt, bos_token,
                                                 eos_token, out, NULL, NULL, err);
}
