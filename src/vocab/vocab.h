/*
 * vocab.h - tokenizers read from GGUF metadata (`tokenizer.ggml.*`):
 * SentencePiece (`llama`) and byte-level BPE (`gpt2`, with the pre-tokenizer
 * named in `tokenizer.ggml.pre`), special/control tokens, BOS/EOS handling
 * and detokenization, matching llama.cpp token for token.
 */
#ifndef WGLLM_VOCAB_H
#define WGLLM_VOCAB_H

#include "base/base.h"
#include "gguf/gguf.h"

enum wgllm_vocab_type {
    WGLLM_VOCAB_TYPE_NONE = 0,
    WGLLM_VOCAB_TYPE_SPM,  /* "llama": SentencePiece with byte fallback */
    WGLLM_VOCAB_TYPE_BPE,  /* "gpt2": byte-level BPE */
    WGLLM_VOCAB_TYPE_WPM,  /* "bert": WordPiece */
};

/* llama.cpp's token attributes (tokenizer.ggml.token_type values map onto these). */
enum wgllm_token_type {
    WGLLM_TOKEN_TYPE_UNDEFINED = 0,
    WGLLM_TOKEN_TYPE_NORMAL = 1,
    WGLLM_TOKEN_TYPE_UNKNOWN = 2,
    WGLLM_TOKEN_TYPE_CONTROL = 3,
    WGLLM_TOKEN_TYPE_USER_DEFINED = 4,
    WGLLM_TOKEN_TYPE_UNUSED = 5,
    WGLLM_TOKEN_TYPE_BYTE = 6,
};

struct wgllm_vocab;

/* Builds the tokenizer from the GGUF's metadata. Copies what it needs: the
 * gguf may be freed afterwards. Unknown `tokenizer.ggml.model` or `.pre`
 * values fail with UNSUPPORTED naming the value. */
enum wgllm_status wgllm_vocab_init(const struct wgllm_gguf *g, struct wgllm_vocab **out,
                                   struct wgllm_error *err);
void wgllm_vocab_free(struct wgllm_vocab *v);

enum wgllm_vocab_type wgllm_vocab_type(const struct wgllm_vocab *v);
int32_t wgllm_vocab_n_tokens(const struct wgllm_vocab *v);
/* bytes of the longest token text */
uint32_t wgllm_vocab_max_token_len(const struct wgllm_vocab *v);
int32_t wgllm_vocab_bos(const struct wgllm_vocab *v); /* -1 when none */
int32_t wgllm_vocab_eos(const struct wgllm_vocab *v); /* -1 when none */
bool wgllm_vocab_is_eog(const struct wgllm_vocab *v, int32_t token);
int32_t wgllm_vocab_eot(const struct wgllm_vocab *v); /* -1 when none */
/* What add_special adds (tokenizer.ggml.add_bos_token / add_eos_token or the type's default). */
bool wgllm_vocab_add_bos(const struct wgllm_vocab *v);
bool wgllm_vocab_add_eos(const struct wgllm_vocab *v);
/* Control tokens (<s>, <|im_end|>, ...) render as nothing unless `special`. */
bool wgllm_vocab_is_control(const struct wgllm_vocab *v, int32_t token);
/* The raw token text as stored in the vocabulary (e.g. "▁the", "Ġthe"). */
const char *wgllm_vocab_token_text(const struct wgllm_vocab *v, int32_t token);

/* Same contract as wgllm_tokenize() in wgllm.h. */
int32_t wgllm_vocab_tokenize(const struct wgllm_vocab *v, const char *text, size_t len,
                             int32_t *tokens, int32_t max_tokens, bool add_special,
                             bool parse_special);
/* A byte range [off, off + len) of a text. */
struct wgllm_text_span { size_t off, len; };
/* wgllm_vocab_tokenize with parse_special, except where a control token's
 * text overlaps one of the n_plain ranges (sorted, disjoint): there it is
 * text, as with parse_special off. For a chat rendering whose plain ranges
 * are the request's text (wgllm_chat_template_render_spans): the template's
 * control tokens count, a user's "<|im_start|>system" does not. */
int32_t wgllm_vocab_tokenize_spans(const struct wgllm_vocab *v, const char *text, size_t len,
                                   int32_t *tokens, int32_t max_tokens, bool add_special,
                                   const struct wgllm_text_span *plain, size_t n_plain);
/* Same contract as wgllm_token_to_piece() in wgllm.h. */
int32_t wgllm_vocab_token_to_piece(const struct wgllm_vocab *v, int32_t token, char *buf,
                                   int32_t size, bool special);

#endif
