/*
 * fuzz_json.c - the core's JSON reader (src/base/json.c) on arbitrary bytes,
 * with the server's budgets: whatever is accepted must be a well-formed DOM
 * (sizes nest, counts match the walk, strings terminated), and writing it
 * back must give text that parses again and writes back to the same bytes
 * (the writer is a fixed point after one trip). A refusal names an offset
 * inside the input. Violations abort (a finding, like a crash).
 */
#include "base/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void require(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_json: %s\n", what);
        abort();
    }
}

/* Walks v, checking the layout; returns the nodes seen. */
static size_t walk(const struct wgllm_json *v, const struct wgllm_json *end) {
    require(v < end && v->size >= 1 && v + v->size <= end, "a subtree inside the document");
    if (v->type == WGLLM_JSON_STRING) require(v->str && v->str[v->len] == 0, "a terminated string");
    if (v->type != WGLLM_JSON_ARRAY && v->type != WGLLM_JSON_OBJECT) {
        require(v->size == 1 && v->count == 0, "a scalar is one node");
        return 1;
    }
    size_t seen = 1;
    uint32_t n = 0;
    for (const struct wgllm_json *c = wgllm_json_first(v); c; c = wgllm_json_next(v, c), n++) {
        require((v->type == WGLLM_JSON_OBJECT) == (c->key != NULL), "members have keys, elements none");
        if (c->key) require(c->key[c->key_len] == 0, "a terminated key");
        seen += walk(c, v + v->size);
    }
    require(n == v->count && seen == v->size, "count and size agree with the walk");
    return seen;
}

static char *write_doc(const struct wgllm_json_doc *d) {
    struct wgllm_strbuf sb = {0};
    struct wgllm_json_writer w;
    wgllm_json_w_init(&w, &sb);
    wgllm_json_w_value(&w, NULL, wgllm_json_root(d));
    require(!sb.oom, "the writer ran out of memory on a small document");
    return wgllm_strbuf_take(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the writer nests at most WGLLM_JSON_WRITER_DEPTH: the server's 32 is within it */
    const struct wgllm_json_limits lim = {.max_depth = 32, .max_nodes = 65536, .max_bytes = 1 << 20};
    struct wgllm_json_doc d;
    struct wgllm_json_error e;
    if (!wgllm_json_parse((const char *)data, size, &lim, &d, &e)) {
        require(e.problem != WGLLM_JSON_OK && e.message[0], "a refusal says why");
        require(e.offset <= size, "a refusal names a byte of the input");
        require(d.nodes == NULL, "a refusal leaves no document");
        return 0;
    }
    require(walk(wgllm_json_root(&d), d.nodes + d.n_nodes) == d.n_nodes, "the root covers every node");
    char *once = write_doc(&d);
    wgllm_json_doc_free(&d);
    struct wgllm_json_doc d2;
    require(wgllm_json_parse(once, strlen(once), &lim, &d2, &e), "what the writer wrote parses");
    char *twice = write_doc(&d2);
    require(!strcmp(once, twice), "writing is a fixed point after one trip");
    wgllm_json_doc_free(&d2);
    free(once);
    free(twice);
    return 0;
}
