/*
 * tokenize_cmd.c - `wgllm tokenize -m MODEL (-p TEXT | --file PATH) [--ids]
 * [--no-special] [--parse-special]`: token ids and their pieces, or with
 * --ids one line of ids as llama-tokenize --ids prints them. With --split0
 * the file holds many texts, each ended by a NUL byte, and each gets its
 * line (a failure is "error: MESSAGE" on its line): what a test that
 * compares thousands of texts runs instead of one process per text.
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
    if (o->split0) {
        if (!o->file || !o->ids) {
            free(text);
            wgllm_model_free(m);
            return wgllm_cli_usage_error("--split0 needs --file PATH and --ids%s", "");
        }
        for (size_t at = 0; at < len;) {
            const char *end = memchr(text + at, 0, len - at);
            const size_t n_text = end ? (size_t)(end - (text + at)) : len - at;
            int32_t *ids = NULL;
            struct wgllm_error err;
            const int32_t n = wgllm_tokenize_alloc(m, text + at, n_text, !o->no_special, o->parse_special, &ids, &err);
            if (n < 0) {
                /* one line per text whatever happens: a newline in the message would shift the others */
                for (char *c = err.message; *c; c++)
                    if (*c == '\n' || *c == '\r') *c = ' ';
                printf("error: %s\n", err.message);
            } else {
                for (int32_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
                putchar('\n');
            }
            free(ids);
            at += n_text + 1;
        }
        free(text);
        wgllm_model_free(m);
        return 0;
    }
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
