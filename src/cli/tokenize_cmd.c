/*
 * tokenize_cmd.c - `wgllm tokenize -m MODEL (-p TEXT | --file PATH) [--ids]
 * [--no-special] [--parse-special]`: token ids and their pieces, or with
 * --ids one line of ids as llama-tokenize --ids prints them.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wgllm_cli_tokenize(const struct opts *o) {
    if (!o->prompt && !o->file) return wgllm_cli_usage_error("tokenize needs -p TEXT or --file PATH%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    size_t len;
    char *text = o->file ? wgllm_cli_read_file(o->file, &len) : strdup(o->prompt);
    if (!text) {
        wgllm_model_free(m);
        return 1;
    }
    if (!o->file) len = strlen(text);
    int32_t *ids;
    int n = wgllm_cli_tokenize_text(m, text, len, !o->no_special, o->parse_special, &ids);
    free(text);
    if (n < 0) {
        wgllm_model_free(m);
        return 1;
    }
    if (o->ids) { /* as llama-tokenize --ids: one line, space-separated */
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    } else {
        for (int i = 0; i < n; i++) {
            char piece[256];
            int32_t k = wgllm_token_to_piece(m, ids[i], piece, sizeof(piece), true);
            printf("%6d -> '%.*s'\n", ids[i], k > 0 ? k : 0, piece);
        }
    }
    free(ids);
    wgllm_model_free(m);
    return 0;
}
