/*
 * api_internal.h - what the OpenAI layer's files share: the <think> split
 * (reasoning.c) and the tool-call split (tools.c) used by the answers
 * (openai_response.c), and the tools' request side used by openai.c.
 */
#ifndef WGLLM_API_INTERNAL_H
#define WGLLM_API_INTERNAL_H

#include "base/strbuf.h"
#include "wgllm.h"

void wgllm_openai_think_init(struct wgllm_openai_think *t, bool open);
/* Appends the content and reasoning parts of the next piece of text. */
void wgllm_openai_think_push(struct wgllm_openai_think *t, const char *text, size_t len, struct wgllm_strbuf *content,
                             struct wgllm_strbuf *reasoning);
/* At the end: what is still held goes where it looked like it belonged. */
void wgllm_openai_think_flush(struct wgllm_openai_think *t, struct wgllm_strbuf *content, struct wgllm_strbuf *reasoning);

/* Tool calls (tools.c). */
struct wgllm_json;
struct wgllm_json_doc;
/* A 400 naming param; fmt has two %s: the param, then a. Returns false. */
bool wgllm_openai_bad(struct wgllm_openai_error *e, const char *param, const char *fmt, const char *a);
/* Every member of body is named in list a or b (NULL-terminated; b may be NULL), else a 400 naming it. */
bool wgllm_openai_known_fields(const struct wgllm_json *body, const char *const *a, const char *const *b,
                               struct wgllm_openai_error *e);
/* JSON the layer made itself (an answer, a chunk), read back by the other dialects. */
bool wgllm_openai_parse_own(const char *json, struct wgllm_json_doc *d);
/* What one chat stream chunk carries (NULL: not there; text only when non-empty). */
struct wgllm_openai_chunk_view {
    const struct wgllm_json *root, *error, *reasoning, *content, *tool_calls, *finish, *usage;
};
void wgllm_openai_chunk_view(const struct wgllm_json_doc *d, struct wgllm_openai_chunk_view *v);
/* A request body's JSON under the layer's budgets, the limits it breaks mapped to their codes. */
bool wgllm_openai_parse_body(const char *body, size_t len, struct wgllm_json_doc *doc, struct wgllm_openai_error *e);
bool wgllm_openai_tools_parse(const struct wgllm_openai_params *ap, const struct wgllm_json *body,
                              struct wgllm_openai_request *g, struct wgllm_openai_error *e);
/* g->messages_json from the body's messages (whose roles and texts g->msgs holds). */
bool wgllm_openai_messages_json(const struct wgllm_openai_params *ap, const struct wgllm_json *body,
                                struct wgllm_openai_request *g, struct wgllm_openai_error *e);

struct wgllm_tool_call {
    char *id;        /* the model's (Mistral), else NULL: the answer makes one */
    char *name;
    char *arguments; /* JSON text */
};
struct wgllm_tool_calls {
    struct wgllm_strbuf content; /* the text around the calls */
    struct wgllm_tool_call *v;
    size_t cap;
    int n;
    bool oom;
};
/* Splits s[0, n) into content and calls in g's format (all content when it holds none). */
void wgllm_openai_tools_extract(const struct wgllm_openai_request *g, const char *s, size_t n,
                                struct wgllm_tool_calls *out);
void wgllm_tool_calls_free(struct wgllm_tool_calls *c);
/* The calls of an upstream's answer (wgllm_result.tool_calls_json), ids kept. */
void wgllm_tool_calls_from_json(const char *json, struct wgllm_tool_calls *out);
/* A stream's next piece of content: what may be sent now goes to `content`,
 * what is or may become a call is held in g->split. */
void wgllm_openai_toolsplit_push(struct wgllm_openai_request *g, const char *text, size_t len,
                                 struct wgllm_strbuf *content);
void wgllm_openai_toolsplit_free(struct wgllm_openai_toolsplit *t);

#endif
