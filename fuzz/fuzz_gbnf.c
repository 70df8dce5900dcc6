/*
 * fuzz_gbnf.c - libFuzzer target for the GBNF reader and the matcher
 * (src/grammar, issue #16): the input is a grammar, or a grammar, a NUL and
 * a text to follow. A grammar that reads is then matched: the text (or a
 * fixed one) byte by byte, a token mask over a small vocabulary with
 * shared prefixes, multi-byte and broken UTF-8 pieces and an
 * end-of-generation token, and a few tokens taken from the mask, each of
 * which must then be accepted. The budgets are tighter than the defaults
 * so every input ends in milliseconds: 4,096 compiled elements (reading a
 * grammar costs 128 class tests per element, and an x{m,n} of a few bytes
 * reached the 65,536 allowed before in tens of milliseconds) and 64 parses
 * (a mask walk over 256 parses of a nested x+++ took up to 100 ms);
 * tests/test_grammar.c checks the default element budget and 64 parses.
 * The vocabulary is built once (as the engine does; masks only read it).
 * A crash, a sanitizer report, a leak, or a mask token that accept refuses
 * is a finding.
 * Seeds: fuzz/corpus/fuzz_gbnf.
 */
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const PIECES[] = {"a", "ab", "{", "{\"", "\"", "\":", " ", "1", "12", "-", "\xc3", "\xa9",
                                     "\xc3\xa9", "\xe2\x82\xac", "}", "null", ",", "\n", "<|x|>", "\xff", "</s>"};
enum { NP = sizeof PIECES / sizeof *PIECES };
static bool eog[NP];
static struct wgllm_grammar_vocab *gv;

static void make_vocab(void) {
    uint32_t lens[NP];
    for (int i = 0; i < NP; i++) lens[i] = (uint32_t)strlen(PIECES[i]);
    eog[NP - 1] = true;
    if (!(gv = wgllm_grammar_vocab_init(PIECES, lens, eog, NP))) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    if (!gv) make_vocab();
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    const char *follow = nul ? text + glen + 1 : "{\"a\": 12}";
    const size_t flen = nul ? size - glen - 1 : strlen(follow);
    struct wgllm_grammar_params p = wgllm_grammar_default_params();
    p.max_elements = 1 << 12;
    p.max_rules = 1 << 12;
    p.max_stacks = 64;
    p.max_nodes = 1 << 16;
    struct wgllm_grammar *g = NULL;
    struct wgllm_error err = {0};
    if (wgllm_grammar_parse(text, glen, &p, &g, &err) != WGLLM_STATUS_OK) {
        if (g || !err.message[0]) abort();
        return 0;
    }
    struct wgllm_grammar_state *st = NULL;
    if (wgllm_grammar_state_init(g, &st, &err) == WGLLM_STATUS_OK) {
        for (size_t i = 0; i < flen; i++)
            if (wgllm_grammar_state_accept_text(st, follow + i, 1, &err) != WGLLM_STATUS_OK) break;
        uint8_t mask[NP];
        for (int step = 0; step < 8; step++) {
            if (wgllm_grammar_state_mask(st, gv, mask, &err) != WGLLM_STATUS_OK) break;
            int pick = -1;
            for (int t = (step * 7) % NP, k = 0; k < NP && pick < 0; k++, t = (t + 1) % NP)
                if (mask[t]) pick = t;
            if (pick < 0) break;
            const enum wgllm_status s = wgllm_grammar_state_accept_token(st, gv, pick, &err);
            /* a masked token is accepted, unless a budget ran out on the way */
            if (s != WGLLM_STATUS_OK && !strstr(err.message, "more than")) abort();
            if (s != WGLLM_STATUS_OK || eog[pick]) break;
        }
    }
    wgllm_grammar_state_free(st);
    wgllm_grammar_free(g);
    return 0;
}
