/*
 * logits_cmd.c - `wgllm logits -m MODEL --tokens 1,2,3 -o OUT.f32`: one
 * decode of the tokens keeping every position's logits, written as raw
 * float32 rows of n_vocab (what the peer tests compare with llama.cpp).
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wgllm_cli_logits(const struct opts *o) {
    if (!o->tokens || !o->out) return wgllm_cli_usage_error("logits needs --tokens IDS and -o OUT.f32%s", "");
    int32_t *ids;
    int n = wgllm_cli_parse_ids(o->tokens, &ids);
    if (n <= 0) {
        if (n == 0) fprintf(stderr, "wgllm: --tokens is empty\n");
        return 1;
    }
    struct wgllm_model *m = wgllm_cli_load_model(o);
    struct wgllm_context *c = m ? wgllm_cli_new_context(m, o, n) : NULL;
    int rc = 1;
    struct wgllm_error err;
    if (c && wgllm_decode(c, ids, n, true, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
    } else if (c) {
        FILE *f = fopen(o->out, "wb");
        if (!f) {
            fprintf(stderr, "wgllm: cannot write '%s': %s\n", o->out, strerror(errno));
        } else {
            const int V = wgllm_model_n_vocab(m);
            bool ok = true;
            for (int i = 0; i < n && ok; i++) ok = fwrite(wgllm_get_logits_ith(c, i), sizeof(float), (size_t)V, f) == (size_t)V;
            ok = (fclose(f) == 0) && ok;
            if (!ok) fprintf(stderr, "wgllm: error writing '%s'\n", o->out);
            rc = ok ? 0 : 1;
        }
    }
    wgllm_context_free(c);
    wgllm_model_free(m);
    free(ids);
    return rc;
}
