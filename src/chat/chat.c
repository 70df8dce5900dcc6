/*
 * chat.c - the message-list rendering API on top of the Jinja interpreter
 * (jinja.c): plain {role, content} messages are turned into the same JSON the
 * richer entry point takes, so both paths share one set of value semantics.
 */
#include "chat/chat.h"

#include "base/base.h"
#include "base/strbuf.h"

/* Appends s as the inside of a JSON string literal. */
static void json_escape(struct wgllm_strbuf *sb, const char *s) {
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            wgllm_strbuf_putc(sb, '\\');
            wgllm_strbuf_putc(sb, (char)*p);
        } else if (*p < 0x20) {
            wgllm_strbuf_printf(sb, "\\u%04x", *p);
        } else {
            wgllm_strbuf_putc(sb, (char)*p);
        }
    }
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
    struct wgllm_strbuf js = {0};
    wgllm_strbuf_putc(&js, '[');
    for (size_t i = 0; i < n_msgs && !js.oom; i++) {
        wgllm_strbuf_puts(&js, i ? ",{\"role\":\"" : "{\"role\":\"");
        json_escape(&js, msgs[i].role);
        wgllm_strbuf_puts(&js, "\",\"content\":\"");
        json_escape(&js, msgs[i].content);
        wgllm_strbuf_puts(&js, "\"}");
    }
    wgllm_strbuf_putc(&js, ']');
    if (js.oom) {
        wgllm_strbuf_free(&js);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "chat template: out of memory");
    }
    enum wgllm_status st = wgllm_chat_template_render_json_spans(t, js.data, NULL, NULL, add_generation_prompt, bos_token,
                                                                 eos_token, out, spans, n_spans, err);
    wgllm_strbuf_free(&js);
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
