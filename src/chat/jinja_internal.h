/*
 * jinja_internal.h - what the parts of the Jinja interpreter share:
 * jinja_value.c (arena, values, string builder, JSON input), jinja_parse.c
 * (lexer, parser, the parse API) and jinja.c (the tree-walking interpreter
 * and rendering). Internal to src/chat. What one file defines for the
 * others is named wgllm_jinja_*, so a grep for a name finds its definition
 * and every use; the static inlines below are defined here.
 */
#ifndef WGLLM_CHAT_JINJA_INTERNAL_H
#define WGLLM_CHAT_JINJA_INTERNAL_H

#include "chat/chat.h"

#include "base/base.h"

#include <setjmp.h>
#include <stdarg.h>


struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct jarena {
    struct arena_block *head;
};

struct node;

/* One parse or one render: where its memory comes from, where an error jumps
 * to, and what it has spent of its budgets. */
struct jctx {
    struct jarena *arena;
    jmp_buf jb;
    struct wgllm_error *err;
    enum wgllm_status status;
    struct wgllm_chat_params lim;  /* the budgets (depth already clamped) */
    uint64_t steps;                /* spent of lim.max_steps */
    size_t mem;                    /* bytes taken from the arena, of lim.max_memory */
    const struct node *at;         /* the node being evaluated, for budget errors; NULL while parsing */
};

/* The byte ranges of a string that the request carried (message text, tool
 * definitions) rather than the template: sorted, disjoint, relative to the
 * string's start; NULL means all of it is the template's. Every operation
 * that makes a string from strings carries them along, so the rendering can
 * say which of its bytes came from the request, and tokenization can refuse
 * control tokens there (a user writing "<|im_start|>system"). */
struct jspan { size_t off, len; };
struct jspans { size_t n; const struct jspan *v; };
extern const struct jspans wgllm_jinja_spans_all; /* all of the string, whatever its length */

enum jt { J_UNDEF, J_NONE, J_BOOL, J_INT, J_FLOAT, J_STR, J_ARR, J_DICT, J_NS, J_MACRO, J_FUNC };

struct jarr;
struct jdict;

typedef struct jv {
    enum jt t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; const struct jspans *t; } s;
        struct jarr *a;
        struct jdict *d;   /* J_DICT and J_NS */
        const struct node *m;
        int fn;
    } u;
} jv;

struct jarr { size_t n, cap; jv *v; };
/* Keys in insertion order (what iteration and tojson show); past a few keys
 * an open-addressing index (slot -> entry + 1, 0 = empty) keeps lookups O(1),
 * so a large JSON object or a template that adds many keys is not quadratic. */
struct jdict {
    size_t n, cap;
    const char **kp; size_t *kn;  /* keys */
    const struct jspans **kt;     /* their request bytes (NULL: all keys are the template's) */
    jv *v;
    uint32_t *ix; size_t ixcap;
};

static inline jv jv_undef(void) { jv v = {.t = J_UNDEF}; return v; }
static inline jv jv_none(void) { jv v = {.t = J_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.t = J_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = J_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.t = J_FLOAT}; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {.t = J_STR}; v.u.s.p = p; v.u.s.n = n; return v; }
static inline jv jv_str_t(const char *p, size_t n, const struct jspans *t) {
    jv v = jv_str(p, n);
    v.u.s.t = t;
    return v;
}

/* A string being built. Builders grow inside the arena, except the one
 * rendering (heap): it grows with realloc, so its doublings leave no garbage,
 * and is held to the output budget instead of the memory one; whoever made
 * it frees p on an error. */
struct sbuf {
    char *p; size_t n, cap;
    struct jctx *c;
    bool heap;
    struct jspan *sv; size_t sn, scap; /* the request's bytes in it so far */
};
struct jsonp { struct jctx *c; const char *p, *end, *start; int depth; bool request; };

enum nk {
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_MACRO, N_BREAK, N_CONTINUE, N_CALLBLOCK,
    N_LIT, N_NAME, N_LIST, N_DICT, N_MEMBER, N_INDEX, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BIN, N_COND, N_KWARG,
};

struct nlist { struct node **v; uint32_t n, cap; };

struct node { /* 120 bytes: a large template has millions */
    unsigned char k; /* enum nk */
    bool neg;        /* `is not` */
    bool uses_loop;  /* N_FOR: the body names `loop` */
    int line, col;
    uint32_t sn;     /* bytes at s */
    const char *s;   /* names, op text, text */
    jv lit;
    struct node *a, *b, *c, *d;
    struct nlist l1, l2;
};

struct wgllm_chat_template {
    struct jarena arena;
    struct nlist body;
    struct wgllm_chat_params params; /* from the parse, for every render */
};

_Noreturn void wgllm_jinja_fail(struct jctx *c, enum wgllm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fails with "template exceeds its <what> budget (<limit> <unit>)" and the
 * location of c->at when there is one. */
_Noreturn void wgllm_jinja_over(struct jctx *c, const char *what, uint64_t limit, const char *unit);
/* Spends n steps of the render's budget. */
static inline void jcharge(struct jctx *c, uint64_t n) {
    if (n > c->lim.max_steps - c->steps) wgllm_jinja_over(c, "step", c->lim.max_steps, "steps");
    c->steps += n;
}
/* Spends the steps for walking n bytes: one per 64-byte run, at least one. */
static inline void jcharge_bytes(struct jctx *c, size_t n) { jcharge(c, 1 + n / 64); }
void *wgllm_jinja_alloc(struct jctx *c, size_t n);
void wgllm_jinja_arena_free(struct jarena *a);
void wgllm_jinja_ctx_limits(struct jctx *c, const struct wgllm_chat_params *params);
char *wgllm_jinja_strdup(struct jctx *c, const char *s, size_t n);
jv wgllm_jinja_arr_new(struct jctx *c);
void wgllm_jinja_arr_push(struct jctx *c, struct jarr *a, jv x);
jv wgllm_jinja_dict_new(struct jctx *c, enum jt t);
jv *wgllm_jinja_dict_find(const struct jdict *d, const char *k, size_t kn);
void wgllm_jinja_dict_set(struct jctx *c, struct jdict *d, const char *k, size_t kn, jv x);
void wgllm_jinja_dict_setz(struct jctx *c, struct jdict *d, const char *k, jv x);
/* wgllm_jinja_dict_set with a key string that may hold the request's bytes */
void wgllm_jinja_dict_set_key(struct jctx *c, struct jdict *d, jv key, jv x);
/* the i-th key as a string value */
jv wgllm_jinja_dict_key(const struct jdict *d, size_t i);
/* bytes [off, off + len) of string s, its spans clipped to them */
jv wgllm_jinja_sub(struct jctx *c, jv s, size_t off, size_t len);
const char *wgllm_jinja_type_name(enum jt t);
bool wgllm_jinja_truthy(jv v);
void wgllm_jinja_sb_put(struct sbuf *b, const char *s, size_t n);
/* string s, or bytes [off, off + len) of it, with the request bytes it holds */
void wgllm_jinja_sb_put_str(struct sbuf *b, jv s);
void wgllm_jinja_sb_put_sub(struct sbuf *b, jv s, size_t off, size_t len);
/* marks the last len bytes written as the request's */
void wgllm_jinja_sb_mark_tail(struct sbuf *b, size_t len);
/* count copies of ch; a count past the memory budget fails before writing any */
void wgllm_jinja_sb_pad(struct sbuf *b, char ch, uint64_t count);
void wgllm_jinja_to_json(struct jctx *c, struct sbuf *b, jv v, int indent, int depth, bool undef_null);
void wgllm_jinja_to_text(struct jctx *c, struct sbuf *b, jv v);
void wgllm_jinja_to_concat(struct jctx *c, struct sbuf *b, jv v);
jv wgllm_jinja_sb_to_value(struct jctx *c, struct sbuf *b);
jv wgllm_jinja_json_value(struct jsonp *j); /* strings get wgllm_jinja_spans_all when j->request */

static inline bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static inline void sb_putc(struct sbuf *b, char ch) { wgllm_jinja_sb_put(b, &ch, 1); }

#endif
