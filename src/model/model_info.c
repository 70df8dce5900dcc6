/*
 * model_info.c - the public facts of a loaded model that live in lower
 * layers (the CPU's repacked copies, the chat template the vocabulary and
 * metadata point to, the pooling an embedding model declares), for wgllm.h callers that must not include model.h,
 * chat.h or vocab.h (the `wgllm` command among them).
 */
#include "wgllm.h"

#include "chat/chat.h"
#include "model/model.h"
#include "vocab/vocab.h"

#include <stdio.h>

uint64_t wgllm_model_repacked_size(const struct wgllm_model *model) {
    /* the count sits under the model's mutex, which locking does not change
     * as far as callers can see: the model itself is never const */
    return wgllm_model_repacked_bytes((struct wgllm_model *)model);
}

enum wgllm_status wgllm_model_pooling(const struct wgllm_model *model, enum wgllm_pooling *out, struct wgllm_error *err) {
    char key[64];
    snprintf(key, sizeof(key), "%s.pooling_type", model->arch_name);
    uint32_t pt;
    if (!wgllm_gguf_find(model->gguf, key) || wgllm_gguf_get_u32(model->gguf, key, &pt, NULL))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the model declares no pooling ('%s'): it is a generation model; "
                               "pass a pooling explicitly to embed with it anyway", key);
    if (pt > WGLLM_POOLING_LAST)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "pooling type %u of '%s' is not supported", pt, key);
    *out = (enum wgllm_pooling)pt;
    return WGLLM_STATUS_OK;
}

const char *wgllm_model_chat_template(const struct wgllm_model *model, size_t *len, const char **builtin) {
    const char *src = NULL;
    size_t n = 0;
    const char *b = NULL;
    if (!wgllm_chat_template_find(model->gguf, model->vocab, &src, &n, &b)) src = NULL, n = 0, b = NULL;
    if (len) *len = n;
    if (builtin) *builtin = b;
    return src;
}

enum wgllm_status wgllm_chat_apply_template(const struct wgllm_model *model, const char *tmpl, size_t tmpl_len,
                                            const char *messages_json, const char *tools_json,
                                            bool add_generation_prompt, char **out, struct wgllm_error *err) {
    *out = NULL;
    if (!messages_json) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "no messages given");
    if (!tmpl && !(tmpl = wgllm_model_chat_template(model, &tmpl_len, NULL)))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the model has no chat template (tokenizer.chat_template) and none was given");
    const int32_t bos = wgllm_vocab_bos(model->vocab), eos = wgllm_vocab_eos(model->vocab);
    const char *bos_text = bos >= 0 ? wgllm_vocab_token_text(model->vocab, bos) : "";
    const char *eos_text = eos >= 0 ? wgllm_vocab_token_text(model->vocab, eos) : "";
    struct wgllm_chat_template *t = NULL;
    enum wgllm_status st = wgllm_chat_template_parse(tmpl, tmpl_len, &t, err);
    if (!st)
        st = wgllm_chat_template_render_json(t, messages_json, tools_json, add_generation_prompt, bos_text, eos_text,
                                             out, err);
    wgllm_chat_template_free(t);
    return st;
}
