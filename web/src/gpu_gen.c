/*
 * gpu_gen.c - generation on a WebGPU context for the browser package, one
 * request at a time: the engine (src/runtime/engine.c) schedules multi-
 * sequence batches, which today run on the CPU backend only, so until it
 * runs on WebGPU the browser's WebGPU path drives a single-sequence
 * wgllm_context directly, like the native `wgllm run`: tokenize (or render
 * the chat template), prefill, then sample / detokenize / match stop strings
 * token by token, streaming through the request's on_token callback.
 *
 * Runs on a pthread (the HAL blocks while JS's promises resolve on the main
 * thread). Requests are serialised by a mutex: one KV cache, cleared per
 * request (no prefix reuse here).
 */
#include "gpu_gen.h"

#include "chat/chat.h"
#include "model/model.h"
#include "vocab/vocab.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct web_gpu_gen {
    struct wgllm_model *model;
    struct wgllm_context *ctx;
    struct wgllm_chat_template *tmpl;
    char tmpl_error[300];
    pthread_mutex_t mu;
};

static void load_template(struct web_gpu_gen *g, const char *src) {
    size_t len = src ? strlen(src) : 0;
    if (!src) {
        struct wgllm_gguf_str t;
        if (wgllm_gguf_find(g->model->gguf, "tokenizer.chat_template") &&
            wgllm_gguf_get_str(g->model->gguf, "tokenizer.chat_template", &t, NULL) == WGLLM_STATUS_OK) {
            src = t.data;
            len = (size_t)t.len;
        } else {
            const char *name = wgllm_chat_template_detect(g->model->vocab);
            src = name ? wgllm_chat_template_builtin(name) : NULL;
            if (!src) {
                snprintf(g->tmpl_error, sizeof g->tmpl_error,
                         "the model has no chat template (tokenizer.chat_template) and none was given");
                return;
            }
            len = strlen(src);
        }
    }
    struct wgllm_error err;
    if (wgllm_chat_template_parse(src, len, &g->tmpl, &err) != WGLLM_STATUS_OK)
        snprintf(g->tmpl_error, sizeof g->tmpl_error, "the chat template does not parse: %.200s", err.message);
}

enum wgllm_status web_gpu_gen_init(struct wgllm_model *model, enum wgllm_backend backend, int n_ctx,
                                   const char *chat_template, struct web_gpu_gen **out, char *desc, size_t desc_cap,
                                   struct wgllm_error *err) {
    *out = NULL;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = 1;
    cp.backend = backend;
    struct wgllm_context *ctx;
    enum wgllm_status st = wgllm_context_init(model, &cp, &ctx, err);
    if (st) return st;
    snprintf(desc, desc_cap, "%s", wgllm_context_backend(ctx));
    if (wgllm_context_gpu_memory(ctx) == 0) { /* auto chose the CPU: the caller runs the engine */
        wgllm_context_free(ctx);
        return WGLLM_STATUS_OK;
    }
    struct web_gpu_gen *g = calloc(1, sizeof *g);
    if (!g) {
        wgllm_context_free(ctx);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    g->model = model;
    g->ctx = ctx;
    pthread_mutex_init(&g->mu, NULL);
    load_template(g, chat_template);
    *out = g;
    return WGLLM_STATUS_OK;
}

void web_gpu_gen_free(struct web_gpu_gen *g) {
    if (!g) return;
    wgllm_context_free(g->ctx);
    if (g->tmpl) wgllm_chat_template_free(g->tmpl);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

uint64_t web_gpu_gen_gpu_bytes(const struct web_gpu_gen *g) { return wgllm_context_gpu_memory(g->ctx); }

/* The prompt's token ids (malloc'd), as the engine makes them; -1 on error. */
static int prompt_ids(struct web_gpu_gen *g, bool chat, const char *text, const struct wgllm_message *msgs,
                      int n_msgs, bool add_special, int32_t **ids, struct wgllm_error *err) {
    if (!chat) return wgllm_tokenize_alloc(g->model, text, strlen(text), add_special, false, ids, err);
    if (!g->tmpl) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "chat: %s", g->tmpl_error);
        return -1;
    }
    struct wgllm_chat_message *cm = malloc(sizeof(*cm) * (size_t)n_msgs);
    if (!cm) {
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
        return -1;
    }
    for (int i = 0; i < n_msgs; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    const struct wgllm_vocab *v = g->model->vocab;
    const int32_t bos = wgllm_vocab_bos(v), eos = wgllm_vocab_eos(v);
    const char *bos_text = bos >= 0 ? wgllm_vocab_token_text(v, bos) : "";
    const char *eos_text = eos >= 0 ? wgllm_vocab_token_text(v, eos) : "";
    char *rendered = NULL;
    enum wgllm_status st =
        wgllm_chat_template_render(g->tmpl, cm, (size_t)n_msgs, true, bos_text, eos_text, &rendered, err);
    free(cm);
    if (st) return -1;
    const size_t bl = strlen(bos_text); /* BOS only when the template did not write it */
    const bool has_bos = bl > 0 && strncmp(rendered, bos_text, bl) == 0;
    int n = wgllm_tokenize_alloc(g->model, rendered, strlen(rendered), !has_bos, true, ids, err);
    free(rendered);
    return n;
}

/* Appends to a malloc'd growing buffer; false when out of memory. */
static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

static void fail(struct wgllm_result *res, const struct wgllm_error *err) {
    res->status = err->status ? err->status : WGLLM_STATUS_INVALID_ARGUMENT;
    res->finish = WGLLM_FINISH_ERROR;
    snprintf(res->message, sizeof res->message, "%s", err->message);
}

void web_gpu_gen_run(struct web_gpu_gen *g, bool chat, const char *text, const struct wgllm_message *msgs, int n_msgs,
                     const struct wgllm_request_params *rp, const _Atomic int32_t *cancel, struct wgllm_result *res) {
    memset(res, 0, sizeof *res);
    struct wgllm_error err = {0};
    const int64_t t_start = wgllm_time_us();
    pthread_mutex_lock(&g->mu);
    int32_t *ids = NULL;
    int n = prompt_ids(g, chat, text, msgs, n_msgs, rp->add_special, &ids, &err);
    const int n_ctx = wgllm_context_n_ctx(g->ctx);
    if (n == 0) wgllm_error_set(&err, WGLLM_STATUS_INVALID_ARGUMENT, "the prompt is empty");
    else if (n >= n_ctx)
        wgllm_error_set(&err, WGLLM_STATUS_CONTEXT_FULL, "the prompt has %d tokens; the context holds %d", n, n_ctx);
    if (n <= 0 || n >= n_ctx) {
        pthread_mutex_unlock(&g->mu);
        free(ids);
        fail(res, &err);
        return;
    }
    res->usage.prompt_tokens = n;
    const int max_gen = rp->max_tokens > 0 ? WGLLM_MIN(rp->max_tokens, n_ctx - n) : n_ctx - n;
    struct wgllm_sampler *s = wgllm_sampler_init(&rp->sampling, wgllm_model_n_vocab(g->model));
    struct wgllm_detokenizer *d = wgllm_detokenizer_init(g->model);
    struct wgllm_stop_matcher *sm = wgllm_stop_matcher_init(rp->stop, rp->n_stop);
    res->tokens = malloc(sizeof(int32_t) * (size_t)(max_gen + 1));
    res->logprobs = malloc(sizeof(float) * (size_t)(max_gen + 1));
    size_t cap = 0;
    if (!s || !d || !sm || !res->tokens || !res->logprobs) {
        wgllm_error_set(&err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a request");
        fail(res, &err);
        goto done;
    }
    for (int i = 0; i < n; i++) wgllm_sampler_accept(s, ids[i]);
    wgllm_context_truncate(g->ctx, 0);
    enum wgllm_status st = wgllm_decode(g->ctx, ids, n, false, &err);
    const int64_t t_prefill = wgllm_time_us();
    int64_t t_first = 0;
    res->finish = WGLLM_FINISH_LENGTH;
    while (st == WGLLM_STATUS_OK && res->n_tokens < max_gen) {
        if (*cancel) {
            res->finish = WGLLM_FINISH_CANCELLED;
            break;
        }
        float lp = 0;
        int32_t tok = wgllm_sampler_sample_ex(s, wgllm_get_logits(g->ctx), NULL, NULL, &lp);
        if (!t_first) t_first = wgllm_time_us();
        if (!rp->ignore_eos && wgllm_token_is_eog(g->model, tok)) {
            res->finish = WGLLM_FINISH_STOP;
            break;
        }
        wgllm_sampler_accept(s, tok);
        res->tokens[res->n_tokens] = tok;
        res->logprobs[res->n_tokens++] = lp;
        size_t len, out_len;
        bool stopped = false;
        const char *piece = wgllm_detokenizer_push(d, tok, &len);
        const char *emit = wgllm_stop_matcher_push(sm, piece, len, &out_len, &stopped);
        if (out_len) {
            if (!append(&res->text, &res->text_len, &cap, emit, out_len)) {
                wgllm_error_set(&err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the generated text");
                st = err.status;
                break;
            }
            if (rp->on_token && !rp->on_token(emit, out_len, tok, lp, rp->user_data)) {
                res->finish = WGLLM_FINISH_CANCELLED;
                break;
            }
        }
        if (stopped) {
            res->finish = WGLLM_FINISH_STOP;
            break;
        }
        if (res->n_tokens == max_gen) break;
        st = wgllm_decode(g->ctx, &tok, 1, false, &err);
    }
    if (st) {
        fail(res, &err);
    } else if (res->finish != WGLLM_FINISH_STOP && res->finish != WGLLM_FINISH_CANCELLED) {
        size_t len, out_len;
        bool stopped = false;
        const char *rest = wgllm_detokenizer_flush(d, &len);
        const char *a = wgllm_stop_matcher_push(sm, rest, len, &out_len, &stopped);
        if (out_len && append(&res->text, &res->text_len, &cap, a, out_len) && rp->on_token)
            rp->on_token(a, out_len, -1, 0, rp->user_data);
        if (stopped) res->finish = WGLLM_FINISH_STOP;
        else {
            const char *b = wgllm_stop_matcher_flush(sm, &out_len);
            if (out_len && append(&res->text, &res->text_len, &cap, b, out_len) && rp->on_token)
                rp->on_token(b, out_len, -1, 0, rp->user_data);
        }
    }
    {
        const int64_t t_end = wgllm_time_us();
        res->timings.ttft_ms = t_first ? (t_first - t_start) / 1e3 : 0;
        res->timings.prefill_tok_s = t_prefill > t_start ? n / ((t_prefill - t_start) / 1e6) : 0;
        res->timings.decode_tok_s =
            res->n_tokens > 1 && t_end > t_first ? (res->n_tokens - 1) / ((t_end - t_first) / 1e6) : 0;
        res->timings.total_ms = (t_end - t_start) / 1e3;
        res->usage.completion_tokens = res->n_tokens;
    }
done:
    if (!res->text) res->text = calloc(1, 1);
    pthread_mutex_unlock(&g->mu);
    wgllm_stop_matcher_free(sm);
    wgllm_detokenizer_free(d);
    wgllm_sampler_free(s);
    free(ids);
}
