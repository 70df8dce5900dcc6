/*
 * wgllm.h - the public C API of wgllm.
 *
 * wgllm runs open-weight language models stored as GGUF files (the llama.cpp
 * format) on the user's own hardware. This header is the only one an
 * application includes.
 *
 * Tutorial
 * --------
 *
 *     struct wgllm_error err;
 *     struct wgllm_model *model;
 *     struct wgllm_model_params mp = wgllm_model_default_params();
 *     if (wgllm_model_load("model.gguf", &mp, &model, &err) != WGLLM_STATUS_OK) {
 *         fprintf(stderr, "%s\n", err.message);   // names the problem
 *         return 1;
 *     }
 *     struct wgllm_context_params cp = wgllm_context_default_params();
 *     struct wgllm_context *ctx;
 *     wgllm_context_init(model, &cp, &ctx, &err);
 *
 *     int32_t toks[512];
 *     int n = wgllm_tokenize(model, "Hello", 5, toks, 512, true, false, &err);
 *     wgllm_decode(ctx, toks, n, false, &err);         // prompt -> KV cache
 *     const float *logits = wgllm_get_logits(ctx);      // last position
 *     int32_t next = wgllm_argmax(logits, wgllm_model_n_vocab(model));
 *     ...feed `next` back with wgllm_decode(ctx, &next, 1, false, &err)...
 *
 *     wgllm_context_free(ctx);
 *     wgllm_model_free(model);
 *
 * Conventions
 * -----------
 * - Recoverable failures (bad files, bad arguments, full context) return an
 *   `enum wgllm_status` and fill a `struct wgllm_error` whose message names the
 *   problem. `err` may be NULL when the caller does not want the text.
 * - Objects are opaque; each `*_init`/`*_load` has a matching `*_free`.
 * - Parameter structs come from `*_default_params()` and are then edited.
 * - Token ids are int32_t, as in llama.cpp.
 */
#ifndef WGLLM_H
#define WGLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

enum wgllm_status {
    WGLLM_STATUS_OK = 0,
    WGLLM_STATUS_INVALID_ARGUMENT, /* the caller passed something out of range */
    WGLLM_STATUS_IO,               /* a file could not be opened, read or written */
    WGLLM_STATUS_BAD_FORMAT,       /* a file is corrupt, truncated or hostile */
    WGLLM_STATUS_UNSUPPORTED,      /* valid input that wgllm cannot handle (yet) */
    WGLLM_STATUS_OUT_OF_MEMORY,    /* an allocation failed */
    WGLLM_STATUS_CONTEXT_FULL,     /* the tokens do not fit in the context */
};

struct wgllm_error {
    enum wgllm_status status; /* the same value the failing call returned */
    char message[512];        /* human-readable, names the field/offset/argument */
};

/* A short constant name for a status ("bad format"). */
const char *wgllm_status_name(enum wgllm_status status);

/* ---------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------- */

struct wgllm_model;

/* Called during load with a fraction in [0, 1]; return false to cancel. */
typedef bool (*wgllm_progress_fn)(float progress, void *user_data);

struct wgllm_model_params {
    int n_threads;                  /* threads for CPU work; 0 = all cores */
    wgllm_progress_fn progress;     /* NULL = no progress reports */
    void *progress_user_data;       /* passed to `progress` */
};

struct wgllm_model_params wgllm_model_default_params(void);

/*
 * Loads a GGUF model. `path` may name the first shard of a split model
 * (`name-00001-of-00003.gguf`); the other shards are found beside it. The
 * file is memory-mapped, validated completely before use, and stays mapped
 * until wgllm_model_free(). On failure *out is NULL.
 */
enum wgllm_status wgllm_model_load(const char *path, const struct wgllm_model_params *params,
                                   struct wgllm_model **out, struct wgllm_error *err);
void wgllm_model_free(struct wgllm_model *model);

int wgllm_model_n_vocab(const struct wgllm_model *model);
int wgllm_model_n_ctx_train(const struct wgllm_model *model);
int wgllm_model_n_embd(const struct wgllm_model *model);
int wgllm_model_n_layer(const struct wgllm_model *model);
const char *wgllm_model_arch(const struct wgllm_model *model); /* "llama", "qwen2", ... */
/* Bytes of weights (tensor data) in the model. */
uint64_t wgllm_model_size(const struct wgllm_model *model);
/* Writes a multi-line human-readable description (info command). Returns
 * the number of characters that the full text needs, like snprintf. */
int wgllm_model_describe(const struct wgllm_model *model, char *buf, size_t size);

/* ---------------------------------------------------------------------------
 * Tokens
 * ------------------------------------------------------------------------- */

/*
 * Tokenizes `len` bytes of `text`. `add_special` adds BOS/EOS as the model's
 * metadata asks; `parse_special` recognises control tokens written in the text
 * (off for user text). Returns the number of tokens, or, when more than
 * `max_tokens` would be produced, minus the number needed (nothing is lost:
 * call again with a larger buffer). Returns INT32_MIN on error.
 */
int32_t wgllm_tokenize(const struct wgllm_model *model, const char *text, size_t len,
                       int32_t *tokens, int32_t max_tokens, bool add_special,
                       bool parse_special, struct wgllm_error *err);

/*
 * Writes the text of one token into buf (not NUL-terminated) and returns its
 * length, or minus the length needed when buf is too small. A piece may be an
 * incomplete UTF-8 sequence (byte tokens): use wgllm_detokenizer for streaming.
 * `special` renders control tokens (<s>) as their text instead of nothing.
 */
int32_t wgllm_token_to_piece(const struct wgllm_model *model, int32_t token, char *buf,
                             int32_t size, bool special);

int32_t wgllm_token_bos(const struct wgllm_model *model); /* -1 when none */
int32_t wgllm_token_eos(const struct wgllm_model *model); /* -1 when none */
/* True for every end-of-generation token (EOS, EOT, EOM, ...). */
bool wgllm_token_is_eog(const struct wgllm_model *model, int32_t token);

/* ---------------------------------------------------------------------------
 * Contexts: a KV cache plus the scratch memory of one forward pass
 * ------------------------------------------------------------------------- */

struct wgllm_context;

struct wgllm_context_params {
    int n_ctx;     /* KV-cache length in tokens; 0 = the model's training context, capped at 4096 */
    int n_batch;   /* most tokens one forward pass processes; longer inputs are split */
    int n_threads; /* 0 = the model's n_threads */
};

struct wgllm_context_params wgllm_context_default_params(void);

/* Allocates everything a forward pass will ever need, once. */
enum wgllm_status wgllm_context_init(struct wgllm_model *model,
                                     const struct wgllm_context_params *params,
                                     struct wgllm_context **out, struct wgllm_error *err);
void wgllm_context_free(struct wgllm_context *ctx);

int wgllm_context_n_ctx(const struct wgllm_context *ctx);
/* Bytes the context allocated (KV cache + scratch + logits); constant after init
 * except that the logits buffer grows once to the largest all_logits decode. */
uint64_t wgllm_context_memory(const struct wgllm_context *ctx);
/* Number of tokens currently in the KV cache (the next token's position). */
int wgllm_context_n_past(const struct wgllm_context *ctx);
/* Forgets every cached position >= n_past (0 clears the cache). */
void wgllm_context_truncate(struct wgllm_context *ctx, int n_past);

/*
 * Runs the model over `n` tokens placed after the cached ones. When
 * `all_logits` is true the logits of every one of the n positions are kept
 * (wgllm_get_logits_ith), else only those of the last. Fails with
 * WGLLM_STATUS_CONTEXT_FULL, changing nothing, when the tokens do not fit.
 */
enum wgllm_status wgllm_decode(struct wgllm_context *ctx, const int32_t *tokens, int n,
                               bool all_logits, struct wgllm_error *err);

/* Logits (n_vocab floats) of the last position of the last decode. */
const float *wgllm_get_logits(const struct wgllm_context *ctx);
/* Logits of position i (0-based within the last decode; needs all_logits). */
const float *wgllm_get_logits_ith(const struct wgllm_context *ctx, int i);

/* ---------------------------------------------------------------------------
 * Sampling
 * ------------------------------------------------------------------------- */

struct wgllm_sampler;

struct wgllm_sampler_params {
    float temperature; /* <= 0: greedy (argmax) */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;     /* seed of the sampler's own random generator */
};

struct wgllm_sampler_params wgllm_sampler_default_params(void);
struct wgllm_sampler *wgllm_sampler_init(const struct wgllm_sampler_params *params, int n_vocab);
void wgllm_sampler_free(struct wgllm_sampler *s);
int32_t wgllm_sampler_sample(struct wgllm_sampler *s, const float *logits);
int32_t wgllm_argmax(const float *logits, int n);

/* ---------------------------------------------------------------------------
 * Streaming detokenizer: turns tokens into text that never splits a UTF-8
 * character, so that each chunk can be printed or sent as it comes.
 * ------------------------------------------------------------------------- */

struct wgllm_detokenizer;

struct wgllm_detokenizer *wgllm_detokenizer_init(const struct wgllm_model *model);
void wgllm_detokenizer_free(struct wgllm_detokenizer *d);
/* Adds a token; returns the complete UTF-8 text now available (valid until the
 * next call), *len set to its byte length. */
const char *wgllm_detokenizer_push(struct wgllm_detokenizer *d, int32_t token, size_t *len);
/* Whatever bytes remain (an invalid trailing sequence), flushed. */
const char *wgllm_detokenizer_flush(struct wgllm_detokenizer *d, size_t *len);

/* ---------------------------------------------------------------------------
 * Misc
 * ------------------------------------------------------------------------- */

/* Microseconds from a monotonic clock. */
int64_t wgllm_time_us(void);
/* "AVX512_VNNI AVX512 AVX2 FMA F16C" etc.: the CPU features the kernels use. */
const char *wgllm_cpu_features(void);

#ifdef __cplusplus
}
#endif

#endif /* WGLLM_H */
