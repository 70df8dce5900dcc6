/*
 * template_cmd.c - `wgllm template`: renders a model's chat template (or
 * --template-file, or the built-in one its special tokens point to) for an
 * OpenAI-style messages JSON array and prints the prompt exactly, with no
 * added newline, so it can be compared byte for byte from a shell. Only the
 * GGUF metadata is read (no weights).
 */
#include "cli/cli.h"

#include "base/base.h"
#include "chat/chat.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wgllm_cli_template(const struct opts *o) {
    if (!o->model || !o->messages) {
        fprintf(stderr, "wgllm template: needs -m MODEL and --messages FILE.json\n(run `wgllm help` for usage)\n");
        return 2;
    }
    int rc = 1;
    struct wgllm_error err = {0};
    struct wgllm_gguf *g = NULL;
    struct wgllm_vocab *v = NULL;
    struct wgllm_chat_template *t = NULL;
    char *file_src = NULL, *msgs = NULL, *tools = NULL, *out = NULL;
    if (wgllm_gguf_open(o->model, &g, &err) != WGLLM_STATUS_OK ||
        wgllm_vocab_init(g, &v, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm template: %s: %s\n", o->model, err.message);
        goto done;
    }
    const char *src = NULL;
    size_t len = 0;
    struct wgllm_gguf_str s;
    if (o->template_file) {
        if (!(file_src = wgllm_cli_read_file(o->template_file, &len))) goto done;
        src = file_src;
    } else if (wgllm_gguf_find(g, "tokenizer.chat_template") &&
               wgllm_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == WGLLM_STATUS_OK) {
        src = s.data;
        len = (size_t)s.len;
    } else {
        const char *name = wgllm_chat_template_detect(v);
        src = name ? wgllm_chat_template_builtin(name) : NULL;
        if (!src) {
            fprintf(stderr, "wgllm template: %s has no tokenizer.chat_template and no built-in template fits; "
                            "give one with --template-file\n", o->model);
            goto done;
        }
        fprintf(stderr, "wgllm template: no tokenizer.chat_template; using the built-in '%s'\n", name);
        len = strlen(src);
    }
    size_t json_len; /* not len: that is the template's */
    if (!(msgs = wgllm_cli_read_file(o->messages, &json_len))) goto done;
    if (o->tools && !(tools = wgllm_cli_read_file(o->tools, &json_len))) goto done;
    int32_t bos = wgllm_vocab_bos(v), eos = wgllm_vocab_eos(v);
    const char *bos_text = bos >= 0 ? wgllm_vocab_token_text(v, bos) : "";
    const char *eos_text = eos >= 0 ? wgllm_vocab_token_text(v, eos) : "";
    if (wgllm_chat_template_parse(src, len, &t, &err) != WGLLM_STATUS_OK ||
        wgllm_chat_template_render_json(t, msgs, tools, o->add_generation_prompt, bos_text, eos_text, &out,
                                        &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm template: %s\n", err.message);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    wgllm_chat_template_free(t);
    free(file_src);
    free(msgs);
    free(tools);
    wgllm_vocab_free(v);
    wgllm_gguf_free(g);
    return rc;
}
