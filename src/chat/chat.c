/*
 * chat.c - the message-list rendering API on top of the Jinja interpreter
 * (jinja.c): plain {role, content} messages are turned into the same JSON the
 * richer entry point takes, so both paths share one set of value semantics.
 */
#include "chat/chat.h"

#include "base/base.h"

static bool json_escape(char **buf, size_t *n, size_t *cap, const char *s) {
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); ; p++) {
        if (*n + 8 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = realloc(*buf, nc);
            if (!nb) return false;
            *buf = nb;
            *cap = nc;
        }
        if (!*p) break;
        if (*p == '"' || *p == '\\') { (*buf)[(*n)++] = '\\'; (*buf)[(*n)++] = (char)*p; }
        else if (*p < 0x20) *n += (size_t)snprintf(*buf + *n, 8, "\\u%04x", *p);
        else (*buf)[(*n)++] = (char)*p;
    }
    return true;
}

static bool put(char **buf, size_t *n, size_t *cap, const char *s) {
    size_t l = strlen(s);
    if (*n + l + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *n + l + 1) nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return false;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *n, s, l + 1);
    *n += l;
    return true;
}

enum wgllm_status wgllm_chat_template_render_spans(const struct wgllm_chat_template *t,
                                                   const struct wgllm_chat_message *msgs, size_t n_msgs,
                                                   bool add_generation_prompt, const char *bos_token,
                                                   const char *eos_token, char **out,
                                                   struct wgllm_text_span **spans, size_t *n_spans,
                                                   struct wgllm_error *err) {
    *out = NULL;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (n_msgs && !msgs)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "chat template: NULL messages");
    char *js = NULL;
    size_t n = 0, cap = 0;
    bool ok = put(&js, &n, &cap, "[");
    for (size_t i = 0; i < n_msgs && ok; i++) {
        ok = put(&js, &n, &cap, i ? ",{\"role\":\"" : "{\"role\":\"") &&
             json_escape(&js, &n, &cap, msgs[i].role) && put(&js, &n, &cap, "\",\"content\":\"") &&
             json_escape(&js, &n, &cap, msgs[i].content) && put(&js, &n, &cap, "\"}");
    }
    ok = ok && put(&js, &n, &cap, "]");
    if (!ok) {
        free(js);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "chat template: out of memory");
    }
    enum wgllm_status st = wgllm_chat_template_render_json_spans(t, js, NULL, add_generation_prompt, bos_token,
                                                                 eos_token, out, spans, n_spans, err);
    free(js);
    return st;
}

enum wgllm_status wgllm_chat_template_render(const struct wgllm_chat_template *t,
                                             const struct wgllm_chat_message *msgs, size_t n_msgs,
                                             bool add_generation_prompt, const char *bos_token,
                                             const char *eos_token, char **out,
                                             struct wgllm_error *err) {
    return wgllm_chat_template_render_spans(t, msgs, n_msgs, add_generation_prompt, bos_token, eos_token, out,
                                            NULL, NULL, err);
}
