/*
 * chat.h - chat templates: a Jinja subset interpreter (jinja.c) that renders a
 * model's `tokenizer.chat_template` for a list of messages, byte-identical to
 * the Hugging Face reference implementation (@huggingface/jinja), which applies
 * transformers' trim_blocks=True / lstrip_blocks=True.
 */
#ifndef WGLLM_CHAT_H
#define WGLLM_CHAT_H

#include "wgllm.h"

#include <stdbool.h>
#include <stddef.h>

struct wgllm_chat_message {
    const char *role;
    const char *content;
};

struct wgllm_chat_template; /* parsed once, rendered many times; immutable after parse */

/* Parses `len` bytes of template source. On failure *out is NULL and err names
 * the construct with its line and column. */
enum wgllm_status wgllm_chat_template_parse(const char *src, size_t len,
                                            struct wgllm_chat_template **out,
                                            struct wgllm_error *err);
void wgllm_chat_template_free(struct wgllm_chat_template *t);

/* Renders into a malloc'd NUL-terminated string (*out, caller frees). bos/eos may
 * be NULL (rendered as ""). raise_exception() in the template and run-time errors
 * give WGLLM_STATUS_INVALID_ARGUMENT / UNSUPPORTED with the message. */
enum wgllm_status wgllm_chat_template_render(const struct wgllm_chat_template *t,
                                             const struct wgllm_chat_message *msgs, size_t n_msgs,
                                             bool add_generation_prompt, const char *bos_token,
                                             const char *eos_token, char **out,
                                             struct wgllm_error *err);

/* The richer variant: messages as an OpenAI-style JSON array (objects may carry
 * tool_calls, tool_call_id, ...), tools as a JSON array or NULL (then `tools` is
 * undefined in the template, as in transformers when none are given). */
enum wgllm_status wgllm_chat_template_render_json(const struct wgllm_chat_template *t,
                                                  const char *messages_json,
                                                  const char *tools_json,
                                                  bool add_generation_prompt,
                                                  const char *bos_token, const char *eos_token,
                                                  char **out, struct wgllm_error *err);

/* ---- built-in templates (templates.c) ---------------------------------- */

/* The Jinja source of a built-in template by name: "chatml", "llama2",
 * "llama3", "gemma", "phi3", "mistral"; NULL for any other name. The string
 * is static. */
const char *wgllm_chat_template_builtin(const char *name);
/* The i-th built-in name (0-based), NULL past the end: for listings and tests. */
const char *wgllm_chat_template_builtin_name(size_t i);

/* A built-in template name chosen by the vocabulary's special tokens, for a
 * model whose GGUF has no tokenizer.chat_template: <|im_start|> -> chatml,
 * <|start_header_id|> -> llama3, <start_of_turn> -> gemma, <|user|> and
 * <|end|> -> phi3, [INST] -> mistral; NULL when none fits. */
struct wgllm_vocab;
const char *wgllm_chat_template_detect(const struct wgllm_vocab *v);

/* The one way a model's chat template is found (the engine and `wgllm
 * template` both use it): the GGUF's tokenizer.chat_template, else the
 * built-in one wgllm_chat_template_detect picks. *src / *len point into the
 * file's mapping or a static string (not NUL-terminated in the first case);
 * *builtin (may be NULL) gets the built-in's name, or NULL for the file's.
 * false when the model has neither. */
struct wgllm_gguf;
bool wgllm_chat_template_find(const struct wgllm_gguf *g, const struct wgllm_vocab *v, const char **src,
                              size_t *len, const char **builtin);

#endif
