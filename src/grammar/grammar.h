/*
 * grammar.h - grammar-constrained decoding (issue #16): GBNF grammars as
 * llama.cpp reads them (gbnf.c), and the matcher (match.c) that says which
 * tokens of a vocabulary may come next and follows the tokens chosen.
 *
 *   struct wgllm_grammar *g;
 *   if (wgllm_grammar_parse(text, len, &gp, &g, &err) != WGLLM_STATUS_OK) ...   // err names line:col
 *   struct wgllm_grammar_vocab *gv = wgllm_grammar_vocab_init(pieces, lens, is_eog, n_tokens);
 *   struct wgllm_grammar_state *st;  wgllm_grammar_state_init(g, &st, &err);
 *   for (;;) {
 *       wgllm_grammar_state_mask(st, gv, allowed);    // allowed[t] = 1 or 0
 *       ... sample among the allowed tokens ...
 *       wgllm_grammar_state_accept_token(st, gv, t, &err);
 *   }
 *
 * The model is llama.cpp's, so users' .gbnf files mean the same here: a rule
 * is alternatives of sequences of terminals (code-point classes, token ids)
 * and rule references; a parse position is a stack of element positions;
 * the state is the set of stacks that the text so far leaves open. Stacks
 * are interned (a stack is its top element plus the id of the stack under
 * it), so equal stacks are one id, a state is a short sorted id list, and a
 * state seen before finds its token mask in a cache instead of walking the
 * vocabulary again. The mask walks a byte trie of the token texts, so tokens
 * that share a prefix are matched once for that prefix.
 *
 * Every size has a budget (params): a grammar that would expand past it, a
 * state with too many parses, or too many interned stacks is an error that
 * names the budget, never unbounded memory or time.
 */
#ifndef WGLLM_GRAMMAR_H
#define WGLLM_GRAMMAR_H

#include "base/base.h"

/* One element of a compiled rule (the same model as llama.cpp's). */
enum wgllm_gelem_type {
    WGLLM_GELEM_END = 0,   /* end of the rule */
    WGLLM_GELEM_ALT,       /* start of the next alternative */
    WGLLM_GELEM_REF,       /* value: rule id */
    WGLLM_GELEM_CHAR,      /* a class of code points starting with value */
    WGLLM_GELEM_CHAR_NOT,  /* a negated class starting with value */
    WGLLM_GELEM_RNG_UPPER, /* the class's previous code point up to value, inclusive */
    WGLLM_GELEM_CHAR_ALT,  /* one more code point of the class */
    WGLLM_GELEM_ANY,       /* any code point (.) */
    WGLLM_GELEM_TOKEN,     /* the token with id value (<[id]>) */
    WGLLM_GELEM_TOKEN_NOT, /* any one token but value (!<[id]>) */
};

struct wgllm_gelem {
    uint32_t type; /* enum wgllm_gelem_type */
    uint32_t value;
};

struct wgllm_grammar_params {
    const char *root;       /* the start rule; default "root" */
    uint32_t max_elements;  /* compiled elements after repetition expansion (default 1 << 20) */
    uint32_t max_rules;     /* rules, with the ones that groups and repetitions make (default 1 << 16) */
    uint32_t max_repeat;    /* largest count in x{m,n} (default 2000, llama.cpp's threshold) */
    uint32_t max_depth;     /* nesting of ( ) groups (default 256) */
    uint32_t max_stacks;    /* parses one state may hold (default 4096) */
    uint32_t max_nodes;     /* interned stack nodes a state may reach (default 1 << 22) */
    /* resolves a <text> token reference to a token id (-1: none); NULL: only <[id]> is accepted */
    int32_t (*token_of)(void *user, const char *text, size_t len);
    void *token_user;
};
struct wgllm_grammar_params wgllm_grammar_default_params(void);

struct wgllm_grammar;

/* Compiles GBNF text. Errors (BAD_FORMAT, or INVALID_ARGUMENT for a budget)
 * name line:column and the rule: an unknown escape, an undefined or
 * left-recursive rule, a missing root. */
enum wgllm_status wgllm_grammar_parse(const char *text, size_t len, const struct wgllm_grammar_params *p,
                                      struct wgllm_grammar **out, struct wgllm_error *err);
void wgllm_grammar_free(struct wgllm_grammar *g);

uint32_t wgllm_grammar_n_rules(const struct wgllm_grammar *g);
/* rule i's elements (ending with END) and its name (generated ones are name_N) */
const struct wgllm_gelem *wgllm_grammar_rule(const struct wgllm_grammar *g, uint32_t i);
const char *wgllm_grammar_rule_name(const struct wgllm_grammar *g, uint32_t i);
uint32_t wgllm_grammar_root(const struct wgllm_grammar *g);

/* ---- the tokens a grammar sees --------------------------------------------
 * Token texts as the grammar matches them: llama.cpp matches each token's
 * piece with control tokens rendered (so "<|im_end|>" is those characters);
 * a token with an empty piece is never allowed; an end-of-generation token
 * is allowed exactly when the grammar can end. */
struct wgllm_grammar_vocab;
struct wgllm_grammar_vocab *wgllm_grammar_vocab_init(const char *const *pieces, const uint32_t *lens,
                                                     const bool *is_eog, int32_t n_tokens);
void wgllm_grammar_vocab_free(struct wgllm_grammar_vocab *gv);
int32_t wgllm_grammar_vocab_n_tokens(const struct wgllm_grammar_vocab *gv);

/* ---- matching -------------------------------------------------------------- */
struct wgllm_grammar_state;

enum wgllm_status wgllm_grammar_state_init(const struct wgllm_grammar *g, struct wgllm_grammar_state **out,
                                           struct wgllm_error *err);
void wgllm_grammar_state_free(struct wgllm_grammar_state *st);

/* The text so far may end here (some parse is complete). */
bool wgllm_grammar_state_can_end(const struct wgllm_grammar_state *st);
/* Some parse can take more input. */
bool wgllm_grammar_state_can_continue(const struct wgllm_grammar_state *st);

/* Follows bytes of text. A byte sequence the grammar does not allow, or
 * invalid UTF-8, is INVALID_ARGUMENT naming the offset, and the state is
 * unchanged. A code point may be split across calls. */
enum wgllm_status wgllm_grammar_state_accept_text(struct wgllm_grammar_state *st, const char *text, size_t len,
                                                  struct wgllm_error *err);
/* Follows one token: its piece, or a <[id]> terminal. An end-of-generation
 * token is accepted only where the grammar can end (it then changes nothing). */
enum wgllm_status wgllm_grammar_state_accept_token(struct wgllm_grammar_state *st,
                                                   const struct wgllm_grammar_vocab *gv, int32_t token,
                                                   struct wgllm_error *err);
/* allowed[t] = 1 for each token that may come next, 0 for the others
 * (n_tokens bytes). An error only when a budget is exceeded. */
enum wgllm_status wgllm_grammar_state_mask(struct wgllm_grammar_state *st, const struct wgllm_grammar_vocab *gv,
                                           uint8_t *allowed, struct wgllm_error *err);

/* how many masks came from the cache, for tests and benchmarks */
uint64_t wgllm_grammar_state_mask_cache_hits(const struct wgllm_grammar_state *st);

/* ---- JSON Schema rules inside a larger grammar (schema.c) -----------------
 * What tool calls need: each function's `parameters` schema becomes a rule,
 * and hand-written rules wrap them in a model family's call syntax. Rule
 * names are made unique (name, name-1, ...); the functions return the name
 * given to the rule, NULL on failure (the builder then keeps the error and
 * every later call fails too). wgllm_json_schema_to_grammar is the one-schema
 * case. */
struct wgllm_schema_grammar;
struct wgllm_strbuf;
enum wgllm_status wgllm_schema_grammar_init(struct wgllm_schema_grammar **out, struct wgllm_error *err);
void wgllm_schema_grammar_free(struct wgllm_schema_grammar *b);
/* The rule of one schema (JSON text); its $refs resolve inside it. */
const char *wgllm_schema_grammar_add(struct wgllm_schema_grammar *b, const char *schema, size_t len, const char *name,
                                     struct wgllm_error *err);
/* A hand-written rule (GBNF body); it may name `space` and the rules made so far. */
const char *wgllm_schema_grammar_rule(struct wgllm_schema_grammar *b, const char *name, const char *body);
/* Appends the GBNF literal of n bytes ("..." with escapes) to sb. */
void wgllm_schema_grammar_literal(struct wgllm_strbuf *sb, const char *s, size_t n);
/* The grammar text, starting at rule `root` (*out malloc'd). */
enum wgllm_status wgllm_schema_grammar_finish(struct wgllm_schema_grammar *b, const char *root, char **out,
                                              struct wgllm_error *err);

#endif
