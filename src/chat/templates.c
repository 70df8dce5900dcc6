/*
 * templates.c - built-in chat templates by name (chatml, llama2, llama3,
 * gemma, phi3, mistral) for models whose GGUF carries no
 * tokenizer.chat_template, and the choice of one from the vocabulary's
 * special tokens. The sources are written in the shape each model family's
 * own template has (same turn markers, same whitespace), so they render the
 * same prompt the family was trained on for plain system/user/assistant chats.
 * tests/peer/chat.test.mjs renders them with @huggingface/jinja as well.
 */
#include "chat/chat.h"

#include "gguf/gguf.h"
#include "vocab/vocab.h"

#include <string.h>

static const char k_chatml[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

/* Llama 2 chat: the system prompt goes inside the first [INST] block */
static const char k_llama2[] =
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "{%- set system_message = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' -%}\n"
    "{%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "{%- set system_message = '' -%}\n"
    "{%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"
    "{%- endif -%}\n"
    "{%- if message['role'] == 'user' -%}\n"
    "{{- bos_token + '[INST] ' + (system_message if loop.first else '') + message['content'] | trim + ' [/INST]' -}}\n"
    "{%- else -%}\n"
    "{{- ' ' + message['content'] | trim + ' ' + eos_token -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

static const char k_llama3[] =
    "{{- bos_token -}}\n"
    "{%- for message in messages -%}\n"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "{%- endif -%}\n";

/* Gemma: no system role (it prefixes the first user turn), assistant is "model" */
static const char k_gemma[] =
    "{{- bos_token -}}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "{%- set first_user_prefix = messages[0]['content'] | trim + '\\n\\n' -%}\n"
    "{%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "{%- set first_user_prefix = '' -%}\n"
    "{%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"
    "{%- endif -%}\n"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<start_of_turn>model\\n' -}}\n"
    "{%- endif -%}\n";

static const char k_phi3[] =
    "{%- for message in messages -%}\n"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|assistant|>\\n' -}}\n"
    "{%- else -%}\n"
    "{{- eos_token -}}\n"
    "{%- endif -%}\n";

/* Mistral instruct (v1 layout): one BOS, [INST] per user turn, the system
 * prompt before the first user message */
static const char k_mistral[] =
    "{{- bos_token -}}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "{%- set system_message = messages[0]['content'] + '\\n\\n' -%}\n"
    "{%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "{%- set system_message = '' -%}\n"
    "{%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "{%- if message['role'] == 'user' -%}\n"
    "{{- '[INST] ' + (system_message if loop.first else '') + message['content'] + ' [/INST]' -}}\n"
    "{%- elif message['role'] == 'assistant' -%}\n"
    "{{- ' ' + message['content'] + eos_token -}}\n"
    "{%- else -%}\n"
    "{{- raise_exception('Only user and assistant roles are supported after an optional system message') -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

static const struct {
    const char *name;
    const char *src;
} k_builtins[] = {
    {"chatml", k_chatml}, {"llama2", k_llama2}, {"llama3", k_llama3},
    {"gemma", k_gemma},   {"phi3", k_phi3},     {"mistral", k_mistral},
};

const char *wgllm_chat_template_builtin(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof k_builtins / sizeof k_builtins[0]; i++)
        if (strcmp(k_builtins[i].name, name) == 0) return k_builtins[i].src;
    return NULL;
}

const char *wgllm_chat_template_builtin_name(size_t i) {
    return i < sizeof k_builtins / sizeof k_builtins[0] ? k_builtins[i].name : NULL;
}

static bool has_token(const struct wgllm_vocab *v, const char *text) {
    /* special tokens are whole tokens: the text tokenizes to one id with parse_special */
    int32_t ids[4];
    int32_t n = wgllm_vocab_tokenize(v, text, strlen(text), ids, 4, false, true);
    if (n != 1) return false;
    const char *t = wgllm_vocab_token_text(v, ids[0]);
    return t && strcmp(t, text) == 0;
}

const char *wgllm_chat_template_detect(const struct wgllm_vocab *v) {
    if (!v || wgllm_vocab_type(v) == WGLLM_VOCAB_TYPE_NONE) return NULL;
    if (has_token(v, "<|im_start|>")) return "chatml";
    if (has_token(v, "<|start_header_id|>")) return "llama3";
    if (has_token(v, "<start_of_turn>")) return "gemma";
    if (has_token(v, "<|user|>") && has_token(v, "<|end|>")) return "phi3";
    if (has_token(v, "[INST]")) return "mistral";
    return NULL;
}

bool wgllm_chat_template_find(const struct wgllm_gguf *g, const struct wgllm_vocab *v, const char **src,
                              size_t *len, const char **builtin) {
    *src = NULL, *len = 0;
    if (builtin) *builtin = NULL;
    struct wgllm_gguf_str t;
    if (g && wgllm_gguf_find(g, "tokenizer.chat_template") &&
        wgllm_gguf_get_str(g, "tokenizer.chat_template", &t, NULL) == WGLLM_STATUS_OK) {
        *src = t.data, *len = (size_t)t.len;
        return true;
    }
    const char *name = wgllm_chat_template_detect(v);
    const char *b = name ? wgllm_chat_template_builtin(name) : NULL;
    if (!b) return false;
    *src = b, *len = strlen(b);
    if (builtin) *builtin = name;
    return true;
}

static bool has(const char *src, size_t len, const char *marker) { return memmem(src, len, marker, strlen(marker)) != NULL; }

int wgllm_chat_tool_format(const char *src, size_t len) {
    if (!src) return WGLLM_TOOLS_GENERIC;
    if (has(src, len, "<|START_ACTION|>")) return WGLLM_TOOLS_COMMAND_R;
    if (has(src, len, "[TOOL_CALLS]")) return WGLLM_TOOLS_MISTRAL;
    if (has(src, len, "<｜tool▁calls▁begin｜>")) return WGLLM_TOOLS_DEEPSEEK_R1;
    if (has(src, len, ">>>all")) return WGLLM_TOOLS_FUNCTIONARY;
    if (has(src, len, "<|start_header_id|>") && has(src, len, "ipython")) return WGLLM_TOOLS_LLAMA3;
    if (has(src, len, "<tool_call>")) return WGLLM_TOOLS_HERMES;
    return WGLLM_TOOLS_GENERIC;
}

const char *wgllm_tool_format_name(enum wgllm_tool_format f) {
    static const char *const names[] = {"generic", "hermes", "llama3", "mistral", "deepseek-r1", "functionary", "command-r"};
    return (unsigned)f < sizeof names / sizeof *names ? names[f] : "unknown";
}
