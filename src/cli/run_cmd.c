/*
 * run_cmd.c - `wgllm run -m MODEL -p PROMPT [-n N] ...`: generates text
 * (greedy unless --temp > 0) with wgllm_generate, which picks the tokens on
 * the device where the backend can (WebGPU) and on the CPU otherwise;
 * --prompt-ids / --ids take and print token ids; --context-shift goes on
 * past a full context as llama.cpp does. Timings go to stderr.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The output of one generated token; false stops (an end-of-generation token unless --ignore-eos, or -n reached). */
struct run_emit {
    const struct opts *o;
    struct wgllm_model *m;
    struct wgllm_detokenizer *d;
    int32_t *gen;
    int n_gen;
};
static bool run_emit_token(int32_t tok, void *ud) {
    struct run_emit *r = ud;
    if (!r->o->ignore_eos && wgllm_token_is_eog(r->m, tok)) return false;
    r->gen[r->n_gen++] = tok;
    if (!r->o->ids) {
        size_t len;
        const char *txt = wgllm_detokenizer_push(r->d, tok, &len);
        fwrite(txt, 1, len, stdout);
        fflush(stdout);
    }
    return r->n_gen < r->o->n_predict;
}

int wgllm_cli_run(const struct opts *o) {
    if (!o->prompt && !o->prompt_ids && !o->file) return wgllm_cli_usage_error("run needs -p PROMPT or --prompt-ids IDS%s", "");
    if (o->n_predict < 0) return wgllm_cli_usage_error("-n must be >= 0%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    int32_t *ids = NULL;
    int n;
    if (o->prompt_ids) {
        n = wgllm_cli_parse_ids(o->prompt_ids, &ids);
    } else {
        size_t len;
        char *text = o->file ? wgllm_cli_read_file(o->file, &len) : strdup(o->prompt);
        if (text && !o->file) len = strlen(text);
        n = text ? wgllm_cli_tokenize_text(m, text, len, true, o->parse_special, &ids) : -1;
        free(text);
    }
    if (n <= 0) {
        if (n == 0) fprintf(stderr, "wgllm: the prompt is empty\n");
        free(ids);
        wgllm_model_free(m);
        return 1;
    }
    int n_ctx = o->ctx > 0 ? o->ctx : n + o->n_predict;
    struct wgllm_context *c = wgllm_cli_new_context(m, o, n_ctx);
    if (!c) {
        free(ids);
        wgllm_model_free(m);
        return 1;
    }
    struct wgllm_sampler_params sp = wgllm_sampler_default_params();
    sp.temperature = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.seed = o->seed;
    struct wgllm_sampler *s = wgllm_sampler_init(&sp, wgllm_model_n_vocab(m));
    struct wgllm_detokenizer *d = wgllm_detokenizer_init(m);
    int32_t *gen = malloc(((size_t)o->n_predict + 1) * sizeof(int32_t));
    struct wgllm_error err;
    int rc = 0, n_gen = 0;
    int64_t t0 = wgllm_time_us();
    enum wgllm_status st = wgllm_decode(c, ids, n, false, &err);
    int64_t t1 = wgllm_time_us();
    if (!o->ids && !o->prompt_ids) {
        fwrite(o->file ? "" : o->prompt, 1, o->file ? 0 : strlen(o->prompt), stdout);
        fflush(stdout);
    }
    /* on WebGPU, greedy or a plain sampler chain: tokens picked on the GPU,
     * step N+1 queued before token N is read; elsewhere the CPU sampler */
    if (st == WGLLM_STATUS_OK && o->n_predict > 0) {
        struct run_emit re = {o, m, d, gen, 0};
        int n_out;
        st = wgllm_generate(c, &sp, s, o->n_predict, run_emit_token, &re, &n_out, &err);
        /* a full context: llama.cpp's rule (keep the first tokens, drop half of the rest), decode the
         * last token given, go on */
        while (st == WGLLM_STATUS_CONTEXT_FULL && o->context_shift && re.n_gen > 0 && re.n_gen < o->n_predict) {
            const int n_past = wgllm_context_n_past(c);
            int keep = o->keep < 0 ? n : o->keep + (ids[0] == wgllm_token_bos(m));
            st = wgllm_context_shift(c, keep < n_past / 2 ? keep : n_past / 2, 0, &err);
            if (st == WGLLM_STATUS_OK) st = wgllm_decode(c, &gen[re.n_gen - 1], 1, false, &err);
            if (st == WGLLM_STATUS_OK)
                st = wgllm_generate(c, &sp, s, o->n_predict - re.n_gen, run_emit_token, &re, &n_out, &err);
        }
        n_gen = re.n_gen;
    }
    int64_t t2 = wgllm_time_us();
    if (st != WGLLM_STATUS_OK) {
        fprintf(stderr, "\nwgllm: error: %s%s\n", err.message,
                st == WGLLM_STATUS_CONTEXT_FULL && n_gen > 0 ? " (--context-shift goes on past a full context)" : "");
        rc = 1;
    }
    if (o->ids) {
        wgllm_cli_print_ids_json(stdout, gen, n_gen);
    } else {
        size_t len;
        const char *txt = wgllm_detokenizer_flush(d, &len);
        fwrite(txt, 1, len, stdout);
        fputc('\n', stdout);
    }
    fprintf(stderr, "\nprompt: %d tokens, %.2f tok/s | generation: %d tokens, %.2f tok/s", n,
            n / ((t1 - t0) / 1e6), n_gen, n_gen > 1 ? (n_gen - 1) / ((t2 - t1) / 1e6) : 0.0);
    if (wgllm_context_gpu_memory(c)) /* constant after load: the plan allocated everything */
        fprintf(stderr, " | GPU memory %.1f MiB", wgllm_context_gpu_memory(c) / 1048576.0);
    fprintf(stderr, " | %s\n", wgllm_context_backend(c));
    free(gen);
    wgllm_detokenizer_free(d);
    wgllm_sampler_free(s);
    wgllm_context_free(c);
    wgllm_model_free(m);
    free(ids);
    return rc;
}
