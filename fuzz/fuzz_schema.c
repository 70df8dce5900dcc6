/*
 * fuzz_schema.c - libFuzzer target for JSON Schema to GBNF (src/grammar/
 * schema.c, issue #16): the input is a schema. A schema that converts must
 * give a grammar that the GBNF reader accepts and that can start a parse;
 * a converter failure must come with a message. A crash, a sanitizer
 * report, a leak, or a grammar of its own the reader refuses is a finding.
 * Seeds: fuzz/corpus/fuzz_schema.
 */
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *gbnf = NULL;
    struct wgllm_error err = {0};
    if (wgllm_json_schema_to_grammar((const char *)data, size, &gbnf, &err) != WGLLM_STATUS_OK) {
        if (gbnf || !err.message[0]) abort();
        return 0;
    }
    struct wgllm_grammar_params p = wgllm_grammar_default_params();
    p.max_stacks = 1 << 12;
    p.max_nodes = 1 << 18;
    struct wgllm_grammar *g = NULL;
    const enum wgllm_status s = wgllm_grammar_parse(gbnf, strlen(gbnf), &p, &g, &err);
    /* its own output reads, unless it is over the reader's size budgets */
    if (s != WGLLM_STATUS_OK && s != WGLLM_STATUS_INVALID_ARGUMENT) abort();
    struct wgllm_grammar_state *st = NULL;
    if (g && wgllm_grammar_state_init(g, &st, &err) == WGLLM_STATUS_OK)
        wgllm_grammar_state_accept_text(st, "{\"a\": [1, \"x\"]}", 15, &err);
    wgllm_grammar_state_free(st);
    wgllm_grammar_free(g);
    free(gbnf);
    return 0;
}
