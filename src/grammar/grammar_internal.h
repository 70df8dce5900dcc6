/*
 * grammar_internal.h - the compiled grammar shared by the reader (gbnf.c)
 * and the matcher (match.c).
 */
#ifndef WGLLM_GRAMMAR_INTERNAL_H
#define WGLLM_GRAMMAR_INTERNAL_H

#include "base/strbuf.h"
#include "grammar/grammar.h"

struct wgllm_grule {
    char *name;
    struct wgllm_gelem *e; /* alternatives separated by ALT, ending with END */
    size_t n;
    bool defined;
    bool named;     /* a rule of the text (in the name table), not one a group or repetition made */
    size_t used_at; /* 1 + the byte offset of its first use, 0 when unused (for messages) */
};

struct wgllm_grammar {
    struct wgllm_grule *rules;
    uint32_t n_rules;
    size_t cap_rules;
    uint32_t root;
    /* rule names -> ids (open addressing, seeded hash; UINT32_MAX = empty) */
    uint32_t *slots;
    size_t n_slots;
    uint32_t n_named;
    struct wgllm_hash_key key;
    struct wgllm_grammar_params params; /* the budgets the matcher keeps (root cleared) */
    /* made by wgllm_grammar_prepare for the matcher: every rule's elements
     * in one array, so a parse position is one index */
    struct wgllm_gelem *flat;
    uint32_t n_flat;
    uint32_t *rule_base;  /* n_rules: where rule i starts in flat */
    uint32_t *alt_begin;  /* n_rules + 1: rule i's alternatives are alts[alt_begin[i] .. alt_begin[i + 1]) */
    uint32_t *alts;       /* the flat position where each alternative starts */
    uint32_t *after;      /* n_flat: for a terminal, the position after its class */
    uint32_t (*ascii)[4]; /* n_flat: for a character class, which code points < 128 it matches */
};

/* Builds the matcher's tables (end of a successful parse); false when out of memory. */
bool wgllm_grammar_prepare(struct wgllm_grammar *g);
void wgllm_grammar_unprepare(struct wgllm_grammar *g);

#endif
