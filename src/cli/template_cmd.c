/*
 * template_cmd.c - `wgllm template`: renders a model's chat template (or
 * --template-file, or the built-in one its special tokens point to, found as
 * the engine finds it: wgllm_model_chat_template) for an OpenAI-style
 * messages JSON array and prints the prompt exactly, with no added newline,
 * so it can be compared byte for byte from a shell. The model is loaded with
 * its weights left in the file (stream_weights): only the metadata is read.
 */
#include "cli.h"

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
    struct wgllm_model *m = NULL;
    char *file_src = NULL, *msgs = NULL, *tools = NULL, *out = NULL;
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = o->threads;
    mp.stream_weights = true; /* nothing mapped, no weight read: the template needs the metadata only */
    if (wgllm_model_load(o->model, &mp, &m, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm template: %s\n", err.message);
        goto done;
    }
    const char *src = NULL;
    size_t src_len = 0, msgs_len = 0, tools_len = 0;
    if (o->template_file) {
        if (!(file_src = wgllm_cli_read_file(o->template_file, &src_len))) goto done;
        src = file_src;
    } else {
        const char *builtin;
        if (!(src = wgllm_model_chat_template(m, &src_len, &builtin))) {
            fprintf(stderr, "wgllm template: %s has no tokenizer.chat_template and no built-in template fits; "
                            "give one with --template-file\n", o->model);
            goto done;
        }
        if (builtin) fprintf(stderr, "wgllm template: no tokenizer.chat_template; using the built-in '%s'\n", builtin);
    }
    /* each file keeps its own length: the template is parsed with src_len alone */
    if (!(msgs = wgllm_cli_read_file(o->messages, &msgs_len))) goto done;
    if (o->tools && !(tools = wgllm_cli_read_file(o->tools, &tools_len))) goto done;
    if (wgllm_chat_apply_template(m, src, src_len, msgs, tools, o->add_generation_prompt, &out, &err) !=
        WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm template: %s\n", err.message);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    free(file_src);
    free(msgs);
    free(tools);
    wgllm_model_free(m);
    return rc;
}
