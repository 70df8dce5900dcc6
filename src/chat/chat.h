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
#include <stdint.h>

struct wgllm_chat_message {
    const char *role;
    const char *content;
};

struct wgllm_chat_template; /* parsed once, rendered many times; immutable after parse */

/* Budgets of one parse and of each render. A chat template comes with the
 * GGUF file, written by strangers, and is rendered on every chat request, so
 * no template may loop, recurse or allocate without bound. Going over one is
 * an error (WGLLM_STATUS_UNSUPPORTED) whose message names the budget, e.g.
 * "template exceeds its step budget (10000000 steps) at line 3, column 9".
 * The defaults are far above what real templates need. */
struct wgllm_chat_params {
    uint64_t max_steps;  /* per render: expressions and statements evaluated, loop
                            iterations, elements and 64-byte runs that filters walk */
    size_t max_output;   /* per render: bytes of the rendered text */
    size_t max_memory;   /* per parse and per render: bytes of tokens, AST and values */
    int max_depth;       /* nesting of the parser's and the interpreter's recursion
                            (expressions, blocks, macro calls); at most 1024, since it
                            is what keeps the C stack bounded (256 levels take under
                            512 KiB of stack, 1 MiB under AddressSanitizer) */
};
/* 10M steps, 64 MiB output, 256 MiB memory, depth 256. */
struct wgllm_chat_params wgllm_chat_default_params(void);

/* Parses `len` bytes of template source under `params` (NULL: the defaults),
 * which every render of the template then uses too. On failure *out is NULL
 * and err names the construct with its line and column. */
enum wgllm_status wgllm_chat_template_init(const char *src, size_t len,
                                           const struct wgllm_chat_params *params,
                                           struct wgllm_chat_template **out,
                                           struct wgllm_error *err);
/* wgllm_chat_template_init with the default params. */
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

/* A byte range [off, off + len) of a text (vocab/vocab.h, whose
 * wgllm_vocab_tokenize_spans reads them). */
struct wgllm_text_span;

/* wgllm_chat_template_render_json that also says which bytes of the rendering
 * came from the request rather than from the template: *spans (malloc'd, the
 * caller frees; NULL when there are none) gets *n_spans sorted, disjoint
 * ranges of *out. They cover the text of the messages and tools wherever the
 * template put it (trimmed, sliced, joined, JSON-escaped, returned by a
 * macro), and roles that are not plain words; a plain role ("user") counts
 * as the template's, since templates build control tokens from it. Tokenize
 * the spans without control tokens and a user cannot write
 * "<|im_start|>system" into the prompt (issue #15): wgllm_vocab_tokenize_spans
 * does that. kwargs_json (NULL: none) is an object whose keys become template
 * variables (chat_template_kwargs: enable_thinking, ...); they cannot replace
 * messages, tools, add_generation_prompt or the tokens. */
enum wgllm_status wgllm_chat_template_render_json_spans(const struct wgllm_chat_template *t,
                                                        const char *messages_json, const char *tools_json,
                                                        const char *kwargs_json, bool add_generation_prompt, const char *bos_token,
                                                        const char *eos_token, char **out,
                                                        struct wgllm_text_span **spans, size_t *n_spans,
                                                        struct wgllm_error *err);
/* The same for plain {role, content} messages. */
enum wgllm_status wgllm_chat_template_render_spans(const struct wgllm_chat_template *t,
                                                   const struct wgllm_chat_message *msgs, size_t n_msgs,
                                                   bool add_generation_prompt, const char *bos_token,
                                                   const char *eos_token, char **out,
                                                   struct wgllm_text_span **spans, size_t *n_spans,
                                                   struct wgllm_error *err);

/* The tool-call syntax (enum wgllm_tool_format) of a template's source, from
 * the markers it writes, in llama.cpp's order of tests. */
int wgllm_chat_tool_format(const char *src, size_t len);

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
