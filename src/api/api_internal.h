/*
 * api_internal.h - what the OpenAI layer's files share: the <think> split
 * (reasoning.c) used by the answers (openai_response.c).
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

#endif
