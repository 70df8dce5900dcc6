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
    /* false (default): the file is memory-mapped and the weights are read in
     * at load. true: nothing is mapped; the weights stay in the file and are
     * read in bounded chunks only when a backend copies them -- the WebGPU
     * backend uploads them straight into GPU buffers -- so they never sit in
     * this process's memory (what the browser does with OPFS files). Such a
     * model runs only on the WebGPU backend (`auto` means WebGPU for it); a
     * CPU context refuses it. */
    bool stream_weights;
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

/* Where a model's bytes come from when they are not a file on disk (the
 * browser's ranged URL reads and stored shards): the loader asks for ranges. */
struct wgllm_model_source {
    int n_files;                 /* 1, or every shard of a split model, in order (1..65535) */
    const uint64_t *sizes;       /* bytes of each file (copied at open) */
    const char *const *names;    /* each file's name for messages (copied); NULL: "file N" */
    /* Copies n bytes at `offset` of file `file` into dst. Only called with
     * ranges inside sizes[file]. Returns OK, or a status with err naming what
     * failed (the reader adds which file and range). */
    enum wgllm_status (*read)(void *user, int file, uint64_t offset, void *dst, size_t n,
                              struct wgllm_error *err);
    void *user;                  /* passed to read; must outlive the context */
};
/* Loads a model whose bytes come from `src`: always streamed (the weights
 * are read in bounded chunks when a context needs them, never held whole,
 * as with wgllm_model_params.stream_weights). `name` prefixes error
 * messages. The split keys are checked against the files given. */
enum wgllm_status wgllm_model_load_source(const struct wgllm_model_source *src, const char *name,
                                          const struct wgllm_model_params *params, struct wgllm_model **out,
                                          struct wgllm_error *err);

int wgllm_model_n_vocab(const struct wgllm_model *model);
int wgllm_model_n_ctx_train(const struct wgllm_model *model);
int wgllm_model_n_embd(const struct wgllm_model *model);
int wgllm_model_n_layer(const struct wgllm_model *model);
const char *wgllm_model_arch(const struct wgllm_model *model); /* "llama", "qwen2", ... */
/* Bytes of weights (tensor data) in the model. */
uint64_t wgllm_model_size(const struct wgllm_model *model);
/* Bytes of weights one decode step (one token) reads: every matrix, but one
 * row of the embedding table and, of a mixture of experts, only the used
 * experts' share of each stack. A memory-bound decode runs at about
 * bandwidth / this many tokens per second. */
uint64_t wgllm_model_decode_bytes(const struct wgllm_model *model);
/* A 64-bit identity of the model's architecture, shapes and (sampled)
 * weights: saved KV state is only ever restored into the model it came from. */
uint64_t wgllm_model_fingerprint(const struct wgllm_model *model);
/* Writes a multi-line human-readable description (info command). Returns
 * the number of characters that the full text needs, like snprintf. */
int wgllm_model_describe(const struct wgllm_model *model, char *buf, size_t size);

/* Bytes of the CPU backend's copies of the weights (made when the model's
 * first CPU context is created; 0 before): the matrices it has repacked
 * kernels for (Q4_0/Q8_0, on x86-64 also Q4_1/Q5_0/Q5_1/IQ4_NL/Q4_K, with
 * AVX-512 VNNI Q5_K/Q6_K/IQ4_XS) in their repacked layout, and on Linux with
 * transparent huge pages the other matrices as they are, on huge pages
 * (WGLLM_NO_HUGEPAGE=1: not those). Memory on top of the mapped weights,
 * whose pages of those matrices are given back to the page cache. */
uint64_t wgllm_model_repacked_size(const struct wgllm_model *model);

/*
 * The model's chat template, found the one way the engine finds it: the
 * GGUF's tokenizer.chat_template, else the built-in template ("chatml",
 * "llama3", "gemma", "phi3", "mistral", ...) its special tokens point to.
 * Returns the Jinja source (valid while the model lives; not NUL-terminated
 * when it comes from the file) and its length in *len; *builtin (may be
 * NULL) gets the built-in's name, or NULL for the file's own. NULL when the
 * model has neither.
 */
const char *wgllm_model_chat_template(const struct wgllm_model *model, size_t *len, const char **builtin);

/*
 * Renders a chat template for OpenAI-style JSON: `messages_json` an array
 * of message objects (role, content, and tool_calls, tool_call_id, ... as
 * the template reads them), `tools_json` an array of tool definitions or
 * NULL (then `tools` is undefined in the template). `tmpl`/`tmpl_len` is
 * the Jinja source; NULL means the model's (wgllm_model_chat_template;
 * UNSUPPORTED when there is none). bos_token and eos_token are the model's
 * BOS and EOS texts. *out gets the prompt, malloc'd and NUL-terminated (the
 * caller frees it). Parse and render errors name the line and column.
 */
enum wgllm_status wgllm_chat_apply_template(const struct wgllm_model *model, const char *tmpl, size_t tmpl_len,
                                            const char *messages_json, const char *tools_json,
                                            bool add_generation_prompt, char **out, struct wgllm_error *err);

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
/* The same into a buffer it allocates (*out, free() it): returns the number
 * of tokens, or -1 with err filled. */
int32_t wgllm_tokenize_alloc(const struct wgllm_model *model, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t **out, struct wgllm_error *err);

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

/* Where a context runs its forward pass. */
enum wgllm_backend {
    WGLLM_BACKEND_CPU,    /* the CPU backend (every feature) */
    WGLLM_BACKEND_WEBGPU, /* WebGPU (Dawn's webgpu.h); fails when no adapter */
    WGLLM_BACKEND_AUTO,   /* WebGPU on a hardware GPU adapter, else the CPU (wgllm_context_backend says why) */
};

struct wgllm_context_params {
    int n_ctx;     /* KV-cache length in tokens, per sequence; 0 = the model's training context, capped at 4096 */
    int n_batch;   /* most tokens one forward pass processes; longer inputs are split */
    int n_threads; /* 0 = the model's n_threads */
    int n_seq;     /* sequence slots sharing the weights (the engine's parallel streams); the
                      single-sequence calls below use slot 0; default 1 */
    enum wgllm_backend backend; /* default WGLLM_BACKEND_CPU */
    uint64_t gpu_mem;  /* WebGPU: bytes the context may allocate on the GPU (0 = the device's limits only);
                          a plan that does not fit shrinks the batch and then n_ctx (wgllm_context_n_ctx),
                          with a warning saying from what to what, instead of failing later */
    bool swa_full; /* sliding-window layers keep all n_ctx positions, as the other layers (llama.cpp's
                      swa_full); false: only a ring of n_swa + n_batch cells each, which context shift
                      cannot move (wgllm_context_shift answers UNSUPPORTED then) */
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
/* The backend the context runs on and, for WEBGPU/AUTO, the adapter or why
 * the CPU was chosen, e.g. "webgpu: NVIDIA ... (vulkan, discrete GPU)" or
 * "cpu (auto: the only WebGPU adapter, SwiftShader ..., is a CPU adapter)". */
const char *wgllm_context_backend(const struct wgllm_context *ctx);
/* GPU memory the context allocated (weights, KV cache, activations, kernel
 * parameters): fixed at init, never grows while decoding; 0 on the CPU. */
uint64_t wgllm_context_gpu_memory(const struct wgllm_context *ctx);
/* Bytes of the context's f16 KV cache (all sequences, all layers) and, in
 * *full (may be NULL), what it would take if the sliding-window layers kept
 * all n_ctx positions (swa_full); the two are equal without a ring. *ring:
 * the cells a sliding-window layer keeps per sequence, 0 without a ring. */
uint64_t wgllm_context_kv_memory(const struct wgllm_context *ctx, uint64_t *full, int *ring);
/* Number of tokens currently in the KV cache (the next token's position). */
int wgllm_context_n_past(const struct wgllm_context *ctx);
/* Forgets every cached position >= n_past (0 clears the cache). With a
 * sliding-window ring, a decode after it fails (INVALID_ARGUMENT) where the
 * ring no longer holds the window of position n_past; 0 always works. */
void wgllm_context_truncate(struct wgllm_context *ctx, int n_past);
/*
 * Makes room in a full context as llama.cpp's context shift does: keeps the
 * first `keep` cached tokens, forgets the `discard` after them (discard <= 0:
 * half of those after `keep`) and moves the rest down, re-rotating their keys
 * for their new positions; n_past drops by the number discarded. The moved
 * tokens keep what they attended to before, so what follows is an
 * approximation of a run without the discarded tokens (exact for the kept
 * ones). Both backends (CPU and WebGPU) support it; a context whose
 * sliding-window layers keep only a ring (swa_full false) answers
 * UNSUPPORTED, as llama.cpp's SWA cache does: the ring has already dropped
 * the kept tokens that the window of the moved ones would see.
 */
enum wgllm_status wgllm_context_shift(struct wgllm_context *ctx, int keep, int discard, struct wgllm_error *err);

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
 *
 * The chain follows llama.cpp's order: logit bias -> repetition / presence /
 * frequency penalties over the last `penalty_last_n` accepted tokens -> top-k
 * -> typical-p -> top-p -> min-p -> temperature -> a draw from the sampler's
 * own seeded generator (same seed and same inputs => same tokens). With
 * temperature <= 0 the result is the argmax after bias and penalties.
 * A sampler allocates everything at init; sampling never allocates.
 * ------------------------------------------------------------------------- */

struct wgllm_sampler;

struct wgllm_logit_bias {
    int32_t token;
    float bias; /* added to the logit; -INFINITY bans the token */
};

struct wgllm_token_logprob {
    int32_t token;
    float logprob; /* log-softmax of the raw logits (before bias, penalties, temperature) */
};

struct wgllm_sampler_params {
    float temperature; /* <= 0: greedy (argmax after bias and penalties) */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;     /* seed of the sampler's own random generator */
    float typical_p;   /* >= 1: off */
    float repeat_penalty;    /* 1: off; divides positive logits, multiplies negative ones */
    int penalty_last_n;      /* window of accepted tokens the penalties see; 0: off, -1: all */
    float presence_penalty;  /* subtracted once from every token seen in the window; 0: off */
    float frequency_penalty; /* subtracted count times; 0: off */
    const struct wgllm_logit_bias *logit_bias; /* copied at init; out-of-range tokens ignored */
    int n_logit_bias;
    int n_probs; /* how many top alternatives sample_ex reports; 0: none */
};

/* temperature 0, top_k 40, top_p 0.95, min_p 0.05, typical_p 1,
 * repeat_penalty 1, penalty_last_n 64, presence/frequency 0, no bias, n_probs 0 */
struct wgllm_sampler_params wgllm_sampler_default_params(void);
/* NULL when n_vocab <= 0 or out of memory. */
struct wgllm_sampler *wgllm_sampler_init(const struct wgllm_sampler_params *params, int n_vocab);
void wgllm_sampler_free(struct wgllm_sampler *s);
/* Adds a token to the penalty history (prompt tokens too, if they should count). */
void wgllm_sampler_accept(struct wgllm_sampler *s, int32_t token);
/* Clears the penalty history and re-seeds the generator with params.seed. */
void wgllm_sampler_reset(struct wgllm_sampler *s);
int32_t wgllm_sampler_sample(struct wgllm_sampler *s, const float *logits);
/* As wgllm_sampler_sample (and, like it, does not accept the token). Each of
 * top, n_top and logprob may be NULL. top has room for params.n_probs entries:
 * it receives the min(n_probs, n_vocab) most likely tokens under the raw
 * logits, sorted by descending logprob, *n_top their count. *logprob is the
 * raw log-softmax at the chosen token. */
int32_t wgllm_sampler_sample_ex(struct wgllm_sampler *s, const float *logits, struct wgllm_token_logprob *top,
                                int *n_top, float *logprob);
/* As wgllm_sampler_sample_ex, choosing only among tokens t with allowed[t]
 * != 0 (at least one must be; allowed NULL = all); top and logprob still
 * describe the raw logits, so a forbidden alternative keeps its logprob. */
int32_t wgllm_sampler_sample_masked(struct wgllm_sampler *s, const float *logits, const uint8_t *allowed,
                                    struct wgllm_token_logprob *top, int *n_top, float *logprob);
int32_t wgllm_argmax(const float *logits, int n);

/* ---------------------------------------------------------------------------
 * Generation: the decode -> sample loop of one sequence, on the device when
 * the backend can pick tokens there
 * ------------------------------------------------------------------------- */

/* Gets each generated token; return false to stop (the token still counts
 * in *n_out). */
typedef bool (*wgllm_generate_fn)(int32_t token, void *user_data);

/* True when wgllm_generate on this context with these settings picks the
 * tokens on the device (WebGPU, greedy or a plain top-k 1..64 / top-p /
 * min-p / temperature chain: no penalties, typical_p, logit bias or
 * n_probs); false means the CPU sampler runs. */
bool wgllm_generate_on_device(const struct wgllm_context *ctx, const struct wgllm_sampler_params *params);

/*
 * Generates up to n tokens after a wgllm_decode: the first is picked from
 * the decode's last logits, each next one after decoding the previous one.
 * On the device (wgllm_generate_on_device) only token ids come back and step
 * k+1 is queued before token k is read; its draws come from a generator that
 * hashes params->seed and the position (the same seed gives the same tokens,
 * not the CPU sampler's). Otherwise `sampler` (made from the same params;
 * INVALID_ARGUMENT when it is NULL then) samples on the CPU, accepting each
 * token into its penalty history, and keeps its generator state across
 * calls. on_token gets every token; *n_out (may be NULL)
 * counts them. Either way the last token given is not decoded: n_past then
 * counts the tokens before it, and wgllm_get_logits may be stale (NULL after
 * device generation), so decode that token before generating again.
 * CONTEXT_FULL when the positions run out (the tokens given so far stand;
 * wgllm_context_shift, decode the last one, call again to go on).
 */
enum wgllm_status wgllm_generate(struct wgllm_context *ctx, const struct wgllm_sampler_params *params,
                                 struct wgllm_sampler *sampler, int n, wgllm_generate_fn on_token,
                                 void *user_data, int *n_out, struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * Stop strings: a streaming matcher that holds back text that could still
 * become a stop string, so no partial stop ever reaches the stream, and never
 * splits a UTF-8 character when it holds back.
 * ------------------------------------------------------------------------- */

struct wgllm_stop_matcher;

/* Copies the strings; stops may be NULL (n_stops 0), NULL and empty entries
 * are ignored. NULL when out of memory. */
struct wgllm_stop_matcher *wgllm_stop_matcher_init(const char *const *stops, int n_stops);
void wgllm_stop_matcher_free(struct wgllm_stop_matcher *m);
/* Feeds text; returns the text now safe to emit (valid until the next call)
 * and its length in *out_len. When a stop string completes, *stopped = true,
 * the text returned ends right before the earliest stop string, and later
 * calls return nothing (with *stopped true again). Never returns NULL. */
const char *wgllm_stop_matcher_push(struct wgllm_stop_matcher *m, const char *text, size_t len, size_t *out_len,
                                    bool *stopped);
/* End of generation without a stop: releases what was held back. */
const char *wgllm_stop_matcher_flush(struct wgllm_stop_matcher *m, size_t *out_len);
/* Forgets held text and the stopped state, for the next request. */
void wgllm_stop_matcher_reset(struct wgllm_stop_matcher *m);

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
 * Engine: many requests served concurrently from one loaded model
 *
 * One engine thread advances every request by scheduler ticks. Each tick a
 * planner builds one batch: first one token for every stream that is
 * generating (so streams never wait behind a long prompt), then prompt chunks
 * up to the prefill budget. Requests name an optional `context_key`: the
 * sequence slot that served the key keeps its KV cache when the request ends,
 * and a later request with the same key computes only the tokens after the
 * longest common prefix. More keys than slots: idle slots are evicted least
 * recently used (saved as prefix snapshots in host memory when there is room,
 * so a returning conversation, or a shared system prompt, is restored rather
 * than recomputed).
 *
 *     struct wgllm_engine *eng;
 *     struct wgllm_engine_params ep = wgllm_engine_default_params();
 *     wgllm_engine_init(model, &ep, &eng, &err);
 *     struct wgllm_request_params rp = wgllm_request_default_params();
 *     rp.max_tokens = 64;
 *     struct wgllm_result res;
 *     wgllm_query(eng, "Once upon a time", &rp, &res, &err);   // blocking
 *     printf("%s\n", res.text);
 *     wgllm_result_free(&res);
 *     wgllm_engine_free(eng);
 *
 * wgllm_engine_submit_* return at once with a request handle; wait for it
 * with wgllm_request_wait (which frees the handle), cancel it from any thread
 * with wgllm_request_cancel.
 *
 * Sampling: on the CPU backend every token is sampled on the host by the
 * sampler chain above. On WebGPU a request whose sampling settings the
 * device implements -- no repetition / presence / frequency penalties, no
 * typical_p, no logit bias, n_probs 0, and either greedy (temperature <= 0)
 * or top_k 1..64 with top_p, min_p and temperature -- is sampled on the GPU:
 * only the token id and its logprob are read back instead of the whole row
 * of logits (wgllm_engine_metrics' device_sampled_tokens counts them). Other
 * requests are sampled on the host as on the CPU, request by request, so one
 * batch may mix both. A grammar (request `grammar`) does not change where:
 * on the GPU its allowed tokens for the step go up as a bitset (n_vocab / 8
 * bytes) made from the parse state before the step, and the device's sampler
 * takes the others out before the chain, as the host does. Greedy picks are
 * the same either way (the argmax of the same logits). A device draw takes its uniform from a hash of the seed
 * and the token's position, not from the CPU sampler's generator: the same
 * seed and prompt give the same text again on the same backend, but not the
 * text the CPU backend (or host sampling) draws for that seed. The logprobs
 * are the same log-softmax, computed in f32 on the device.
 * ------------------------------------------------------------------------- */

struct wgllm_engine;
struct wgllm_request;

struct wgllm_engine_params {
    int n_slots;           /* sequence slots = streams generating at once (default 4) */
    int n_ctx;             /* KV positions per slot; 0 = the model's training context, capped at 4096 */
    int n_batch;           /* tokens per tick, decode and prefill together (default 512) */
    int prefill_budget;    /* prompt tokens per tick at most; 0 = n_batch */
    int n_threads;         /* 0 = the model's */
    int max_queue;         /* requests waiting for a slot before submit refuses (default 256) */
    size_t snapshot_bytes; /* host memory for prefix snapshots; 0 = none (default 256 MiB) */
    int max_snapshots;     /* (default 16) */
    int min_snapshot_tokens; /* shorter prefixes are not worth saving (default 32) */
    const char *chat_template; /* Jinja text used by chat instead of the model's; NULL = the model's */
    /* When a generating request's slot is full: false (default) ends the
     * request with WGLLM_STATUS_CONTEXT_FULL (finish ERROR; what it generated
     * so far is in the result), or with finish LENGTH when its max_tokens is
     * 0 ("until the end"); true shifts the context as llama.cpp does --
     * keeps the first context_keep tokens, drops half of the others (the
     * oldest) and goes on. A shifted slot's cache is reused by a later request
     * (context_key) only up to its kept tokens. Prompts longer than the
     * context fail at submit either way. On a model with sliding-window
     * layers, true also keeps their whole caches (swa_full): a ring cannot
     * be shifted. */
    bool context_shift;
    int context_keep; /* tokens a shift keeps after the BOS (llama.cpp's n_keep); -1 = the whole
                         prompt (default); capped at half the context */
    enum wgllm_backend backend; /* where the forward pass runs (default WGLLM_BACKEND_CPU) */
    uint64_t gpu_mem;           /* WebGPU memory budget (wgllm_context_params.gpu_mem) */
    bool no_thread;        /* no engine thread: the caller advances it with wgllm_engine_step
                              (single-threaded wasm); wgllm_request_wait steps it too */
};

struct wgllm_engine_params wgllm_engine_default_params(void);
enum wgllm_status wgllm_engine_init(struct wgllm_model *model, const struct wgllm_engine_params *params,
                                    struct wgllm_engine **out, struct wgllm_error *err);
/* Cancels what is still running, joins the engine thread, frees the engine.
 * Wait for every submitted request before: a handle not waited for leaks. */
void wgllm_engine_free(struct wgllm_engine *eng);

/* Called on the engine thread for each piece of generated text (never a
 * partial UTF-8 character or a partial stop string). `logprob` is the model's
 * log-probability of the token. Return false to cancel the request. */
typedef bool (*wgllm_token_fn)(const char *text, size_t len, int32_t token, float logprob, void *user_data);

/* How far a request's prompt has been read (llama.cpp server's
 * prompt_progress): processed / total overall, (processed - cached) /
 * (total - cached) of the part that is computed. */
struct wgllm_prompt_progress {
    int total;      /* prompt tokens */
    int cached;     /* of those, reused from the KV cache or a snapshot */
    int processed;  /* in the KV cache now, cached ones included */
    double time_ms; /* since the request got its slot */
};
/* Called on the engine thread as the prompt is read: once when the request
 * gets its slot (processed = cached), after every pass that computed some of
 * it, and within a long pass (the CPU: after each layer; WebGPU: after each
 * bounded submission, which it then waits for), processed never going back;
 * the last call has processed = total. Return false to cancel the request. */
typedef bool (*wgllm_prompt_progress_fn)(const struct wgllm_prompt_progress *p, void *user_data);

struct wgllm_request_params {
    int max_tokens;                       /* generated tokens at most (default 256); 0 = until EOS or a full
                                             context (then LENGTH; with context_shift, n_ctx tokens); a
                                             max_tokens that does not fit fails with CONTEXT_FULL
                                             when context_shift is off */
    struct wgllm_sampler_params sampling; /* wgllm_sampler_default_params() */
    const char *const *stop;              /* stop strings (copied); the text ends before the first match */
    int n_stop;
    const char *context_key;              /* NULL = no reuse across requests (copied) */
    const char *cache_partition;          /* whose KV caches this request may reuse: slots, snapshots
                                             and context_keys of the same partition only (a tenant, an
                                             API key); NULL = the shared one (copied) */
    bool ignore_eos;                      /* keep generating past end-of-generation tokens */
    bool add_special;                     /* query: add BOS as the model asks (default true) */
    const char *grammar;                  /* GBNF text (llama.cpp's grammar language, copied) that the
                                             generated text must match, from its rule `root`; NULL = none.
                                             A bad grammar fails the submit (INVALID_ARGUMENT or
                                             BAD_FORMAT naming line:column); the request then samples on
                                             the host, and ends (STOP) when the grammar is complete */
    size_t grammar_len;                   /* bytes of grammar */
    const char *const *grammar_triggers;  /* a lazy grammar (llama.cpp's, for tool calls): the text is
                                             free until one of these texts appears in it; from where it
                                             begins the text must fit the grammar (if what came with it
                                             does not, the grammar is dropped). NULL = from the start
                                             (copied) */
    int n_grammar_triggers;
    wgllm_token_fn on_token;              /* NULL = no streaming */
    wgllm_prompt_progress_fn on_prompt_progress; /* NULL = none (wgllm_prompt_progress_fn) */
    void *user_data;                      /* passed to on_token and on_prompt_progress */
};

struct wgllm_request_params wgllm_request_default_params(void);

/* Structured output: the GBNF grammar (for wgllm_request_params.grammar) of
 * the JSON texts a JSON Schema admits, in llama.cpp's form (whitespace rule,
 * property order: required ones in the order of `properties`, then any
 * in-order subset of the others). Enforced: type (one or a list),
 * properties / required / additionalProperties, items / prefixItems /
 * minItems / maxItems, enum / const, anyOf / oneOf, allOf of object
 * schemas, local $ref (recursive too), string minLength / maxLength /
 * pattern (a regular-expression subset) / format (date, time, date-time,
 * uuid, email), integer minimum / maximum / exclusive*, number minimum 0,
 * nullable; annotations are ignored. Anything else is UNSUPPORTED naming the
 * keyword and where it is; a malformed schema INVALID_ARGUMENT. *gbnf is
 * malloc'd (free it). */
enum wgllm_status wgllm_json_schema_to_grammar(const char *schema, size_t len, char **gbnf, struct wgllm_error *err);

enum wgllm_finish_reason {
    WGLLM_FINISH_STOP,      /* an end-of-generation token or a stop string */
    WGLLM_FINISH_LENGTH,    /* max_tokens */
    WGLLM_FINISH_CANCELLED, /* wgllm_request_cancel, on_token returned false, or engine freed */
    WGLLM_FINISH_ERROR,     /* see status and message (CONTEXT_FULL: the context filled up, shifting off) */
};

struct wgllm_usage {
    int prompt_tokens;     /* tokens of the rendered prompt */
    int cached_tokens;     /* of those, reused from the KV cache or a snapshot (not computed) */
    int completion_tokens; /* generated */
};

struct wgllm_timings {
    double queued_ms;     /* from submit to a slot */
    double ttft_ms;       /* from submit to the first generated token */
    double prefill_tok_s; /* computed prompt tokens per second of prefill */
    double decode_tok_s;  /* generated tokens per second after the first */
    double total_ms;
};

struct wgllm_result {
    enum wgllm_status status;  /* OK unless finish == ERROR */
    char message[256];         /* the error, when there is one */
    enum wgllm_finish_reason finish;
    char *text;                /* generated text, NUL-terminated (malloc'd; wgllm_result_free) */
    size_t text_len;
    int32_t *tokens;           /* generated token ids (malloc'd) */
    float *logprobs;           /* log-probability of each generated token (malloc'd) */
    int n_tokens;
    /* With sampling.n_probs > 0: for generated token i, its n_top most likely
     * alternatives at top_logprobs[i * n_top ...] (malloc'd), else NULL. */
    struct wgllm_token_logprob *top_logprobs;
    int n_top;
    struct wgllm_usage usage;
    struct wgllm_timings timings;
    /* An upstream's answer (the gateway's client, wgllm_client_chat_json):
     * the tool calls it returned, as OpenAI's JSON array
     * [{"id", "type": "function", "function": {"name", "arguments"}}]
     * (malloc'd), else NULL. A local engine's calls are in `text`, in the
     * model's own syntax, and the OpenAI layer splits them out. */
    char *tool_calls_json;
    /* An upstream's answer: the reasoning_content it sent beside the text
     * (malloc'd, NUL-terminated), else NULL. A local engine's <think> block
     * is in `text`. */
    char *reasoning_content;
};

void wgllm_result_free(struct wgllm_result *r);

/* Raw prompt, no template. */
enum wgllm_status wgllm_engine_submit_query(struct wgllm_engine *eng, const char *prompt, size_t len,
                                            const struct wgllm_request_params *params,
                                            struct wgllm_request **out, struct wgllm_error *err);

struct wgllm_message {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content;
};

/* Messages rendered with the model's chat template (or the engine's
 * chat_template); UNSUPPORTED when there is none. */
enum wgllm_status wgllm_engine_submit_chat(struct wgllm_engine *eng, const struct wgllm_message *msgs, int n_msgs,
                                           const struct wgllm_request_params *params,
                                           struct wgllm_request **out, struct wgllm_error *err);
/* Messages as an OpenAI-style JSON array (role, content, and tool_calls,
 * tool_call_id, name as the template reads them), `tools_json` the tool
 * definitions (a JSON array, NULL: `tools` undefined in the template) and
 * `kwargs_json` extra template variables (a JSON object such as
 * {"enable_thinking": false}, NULL: none), rendered with the engine's chat
 * template. The messages' and tools' text is tokenized as text: control
 * tokens are parsed in the template's own text only. */
enum wgllm_status wgllm_engine_submit_chat_json(struct wgllm_engine *eng, const char *messages_json,
                                                const char *tools_json, const char *kwargs_json,
                                                const struct wgllm_request_params *params,
                                                struct wgllm_request **out, struct wgllm_error *err);

/* The prompt tokens the submit of the same request would compute over
 * (*ids malloc'd, *n of them; the same checks and errors as the submit, a
 * prompt longer than the context included), without submitting it: what a
 * router (wgllm.h, "Routes") asks before it picks a target. */
enum wgllm_status wgllm_engine_prompt_tokens_query(struct wgllm_engine *eng, const char *prompt, size_t len,
                                                   bool add_special, int32_t **ids, int *n, struct wgllm_error *err);
enum wgllm_status wgllm_engine_prompt_tokens_chat(struct wgllm_engine *eng, const struct wgllm_message *msgs,
                                                  int n_msgs, int32_t **ids, int *n, struct wgllm_error *err);
enum wgllm_status wgllm_engine_prompt_tokens_chat_json(struct wgllm_engine *eng, const char *messages_json,
                                                       const char *tools_json, const char *kwargs_json, int32_t **ids,
                                                       int *n, struct wgllm_error *err);
/* How many leading tokens of tokens[0, n) a request of cache_partition
 * (NULL: the shared one) submitted now would reuse instead of computing:
 * the longest prefix held by a slot or a prefix snapshot of the same
 * partition, at most n - 1 (one prompt token is always computed). A
 * context_key changes which slot keeps a conversation, not this count.
 * Runs on the engine thread between ticks (waits for the current one). */
int wgllm_engine_cached_tokens(struct wgllm_engine *eng, const int32_t *tokens, int n, const char *cache_partition);

/* How the model of a chat template writes a tool call, told from the
 * template's text as llama.cpp's chat parser tells it. */
enum wgllm_tool_format {
    WGLLM_TOOLS_GENERIC = 0,  /* the template has no call syntax: the answer is JSON, {"tool_calls": [{"name",
                                 "arguments"}, ...]} or {"response": "..."}, as llama.cpp's generic format */
    WGLLM_TOOLS_HERMES,       /* <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes 2 Pro, Qwen 2.5, Qwen 3) */
    WGLLM_TOOLS_LLAMA3,       /* {"name": ..., "parameters": {...}} (Llama 3.1 / 3.2 / 3.3: the ipython role) */
    WGLLM_TOOLS_MISTRAL,      /* [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "9 chars"}] (Mistral Nemo, Small) */
    WGLLM_TOOLS_DEEPSEEK_R1,  /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
                                 <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> */
    WGLLM_TOOLS_FUNCTIONARY,  /* >>>NAME\n{...} (functionary v3.2) */
    WGLLM_TOOLS_COMMAND_R,    /* <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|> */
};
/* What the engine's chat template does, probed once at engine init by
 * rendering small conversations (as llama.cpp's chat layer probes it):
 * what tells the OpenAI layer how to hand it tool calls and text of its own. */
struct wgllm_template_caps {
    enum wgllm_tool_format tool_format; /* the syntax its model writes calls in */
    int thinks;            /* wgllm_engine_template_thinks */
    bool system_role;      /* it shows a system message (Gemma's refuses one) */
    bool string_arguments; /* it writes a call's `arguments` string as given (DeepSeek-R1's concatenates it);
                              false: it wants the object (tojson of a string would quote it) */
};
struct wgllm_template_caps wgllm_engine_template_caps(const struct wgllm_engine *eng);
/* Its name: "generic", "hermes", "llama3", "mistral", "deepseek-r1", "functionary", "command-r". */
const char *wgllm_tool_format_name(enum wgllm_tool_format f);

/* Blocks until the request ends, fills *result, frees the handle. */
void wgllm_request_wait(struct wgllm_request *req, struct wgllm_result *result);
/* Asks the request to stop (takes effect at the next tick). Safe from any thread
 * until wgllm_request_wait returns. */
void wgllm_request_cancel(struct wgllm_request *req);
/* Reasoning models: 0 when the engine's chat template has no <think>
 * blocks, 1 when it has, 2 when it also ends the generation prompt inside
 * one (DeepSeek-R1's), so that answers begin in the reasoning. */
int wgllm_engine_template_thinks(const struct wgllm_engine *eng);
/* True once the request has ended (wgllm_request_wait then returns at once). */
bool wgllm_request_done(struct wgllm_request *req);
/* Waits up to timeout_ms for the request to end; true when it has. The handle
 * stays valid (free it with wgllm_request_wait): the owner of a request can
 * wait in slices and cancel it between them (a server whose client left). */
bool wgllm_request_wait_for(struct wgllm_request *req, int timeout_ms);
/* KV positions per slot: the longest prompt + generation a request gets. */
int wgllm_engine_n_ctx(const struct wgllm_engine *eng);
/* Engines made with no_thread: admits queued requests and runs one tick on
 * the calling thread; true while requests remain queued or running. */
bool wgllm_engine_step(struct wgllm_engine *eng);

/* Blocking forms: submit + wait. The status is the submit's, or the result's. */
enum wgllm_status wgllm_query(struct wgllm_engine *eng, const char *prompt, const struct wgllm_request_params *params,
                              struct wgllm_result *result, struct wgllm_error *err);
enum wgllm_status wgllm_chat(struct wgllm_engine *eng, const struct wgllm_message *msgs, int n_msgs,
                             const struct wgllm_request_params *params, struct wgllm_result *result,
                             struct wgllm_error *err);

enum wgllm_pooling { WGLLM_POOLING_MODEL = -1, WGLLM_POOLING_NONE = 0, WGLLM_POOLING_MEAN = 1,
                     WGLLM_POOLING_CLS = 2, WGLLM_POOLING_LAST = 3 };

/* The pooling an embedding model declares (`<arch>.pooling_type`);
 * UNSUPPORTED naming the key for a generation model, which has none. */
enum wgllm_status wgllm_model_pooling(const struct wgllm_model *model, enum wgllm_pooling *out, struct wgllm_error *err);

/* Embeds text into out[0..n_embd): the final normalized hidden states pooled
 * as `pooling` says (WGLLM_POOLING_MODEL: the GGUF's `<arch>.pooling_type`;
 * UNSUPPORTED when the model has none and no pooling is given), optionally
 * L2-normalized. Returns the vector length in *n_out. */
enum wgllm_status wgllm_embed(struct wgllm_engine *eng, const char *text, size_t len, enum wgllm_pooling pooling,
                              bool normalize, float *out, int max_out, int *n_out, struct wgllm_error *err);

struct wgllm_engine_metrics {
    uint64_t requests_submitted, requests_finished, requests_cancelled, requests_failed, requests_refused;
    uint64_t prompt_tokens, prompt_tokens_cached, generated_tokens;
    uint64_t cache_hits;        /* requests that reused a cached prefix */
    uint64_t evictions, snapshots_saved, snapshots_restored;
    uint64_t ticks;
    int queue_depth, active_slots, idle_slots;
    uint64_t snapshot_bytes_used;
    uint64_t context_shifts; /* slots shifted because they were full (context_shift) */
    uint64_t device_sampled_tokens; /* tokens (end-of-generation ones too) picked on the device (WebGPU: only
                                       their ids came back, not the logits); 0 on the CPU */
    int n_slots;
    /* moving averages (weight 0.2 on the newest) of finished generations, 0 before the first: prefill
     * tok/s (prompts of 16 or more computed tokens), decode tok/s, and a whole request's ms */
    double prefill_tok_s, decode_tok_s, request_ms;
};

void wgllm_engine_metrics(struct wgllm_engine *eng, struct wgllm_engine_metrics *out);
/* Where the engine's forward pass runs and why (wgllm_context_backend's
 * wording), and the GPU bytes it holds (0 on the CPU). */
const char *wgllm_engine_backend(const struct wgllm_engine *eng);
uint64_t wgllm_engine_gpu_memory(const struct wgllm_engine *eng);

/*
 * Persisting prefix snapshots (a browser keeps them in OPFS, a server on
 * disk): export writes the snapshots the engine holds -- first saving every
 * idle slot's conversation into the store, within snapshot_bytes and
 * max_snapshots -- into one malloc'd buffer (*data, *size; release with
 * free()). The format is versioned and carries wgllm_model_fingerprint() and
 * the backend's KV layout; import checks both and every length, then adds the
 * snapshots to the store (least recently used ones make room), where later
 * requests find them as if they had been evicted in this process. Both run
 * on the engine's thread between ticks (they wait for it); safe to call
 * while requests run.
 */
enum wgllm_status wgllm_engine_snapshots_export(struct wgllm_engine *eng, void **data, size_t *size,
                                                struct wgllm_error *err);
enum wgllm_status wgllm_engine_snapshots_import(struct wgllm_engine *eng, const void *data, size_t size,
                                                struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * OpenAI layer: request JSON -> engine parameters, results -> answer JSON
 *
 * The one implementation of the OpenAI API's rules, used by `wgllm serve` and
 * by the browser package (which passes the request's JSON text and gets these
 * same answer texts back), so field names, defaults, validation and errors
 * are the same everywhere. Transport is the caller's: HTTP and SSE framing
 * ("data: ...\n\n"), ids, cancellation.
 *
 *     struct wgllm_openai_params ap = {.model = model, .model_id = "tiny.gguf"};
 *     struct wgllm_openai_request rq;
 *     struct wgllm_openai_error e;
 *     if (!wgllm_openai_parse(&ap, WGLLM_OPENAI_CHAT, body, len, &rq, &e)) {
 *         answer(e.status, wgllm_openai_error_json(&e)); ...
 *     }
 *     wgllm_engine_submit_chat(eng, rq.msgs, rq.n_msgs, &rq.rp, &req, &err);
 *     ... wgllm_openai_response(&ap, &rq, id, &result) ...
 *     wgllm_openai_request_free(&rq);
 *
 * Fields (chat /v1/chat/completions, completions /v1/completions):
 * model, max_tokens (chat also max_completion_tokens), temperature, top_p,
 * top_k, min_p, typical_p, presence_penalty, frequency_penalty,
 * repeat_penalty (also spelled repetition_penalty, as WebLLM and
 * transformers do: one field, giving both is refused), repeat_last_n, seed,
 * stop, logit_bias, logprobs (chat: bool + top_logprobs 0..20; completions:
 * 0..5), n (1 only), user, stream, stream_options.include_usage,
 * ignore_eos, cache_prompt (accepted; the engine always reuses), context_key
 * (the engine's KV reuse key). Chat: messages (roles system, developer =
 * system, user, assistant, tool; content a string, null or text parts;
 * assistant tool_calls, tool_call_id, name), response_format (text,
 * json_object, json_schema), tools, tool_choice (none, auto, required, a
 * named function), parallel_tool_calls, chat_template_kwargs,
 * reasoning_format, store, metadata; grammar and json_schema (both
 * endpoints, local only). Completions: prompt (a string or one
 * string in an array), echo (false only), suffix (null only), best_of (1).
 * Unknown fields are refused (400 naming the field), never ignored: a client
 * never silently loses a parameter it thinks it set. Strings that become C
 * strings (roles, contents, stops, context_key, model) may not hold U+0000;
 * a prompt may (it goes with its length).
 *
 * Defaults are llama.cpp server's: temperature 0.8, top_k 40, top_p 0.95,
 * min_p 0.05, repeat_penalty 1 (off) over repeat_last_n 64, max_tokens
 * until the end of generation or of the context (capped by params.max_tokens),
 * a seed drawn per request.
 *
 * Embeddings (/v1/embeddings): model, input (a string or 1..256 strings),
 * encoding_format float | base64, dimensions (this model's only), user,
 * pooling mean | last | cls (default: the model's).
 *
 * Body limits: at most 8 MiB, 32 levels of nesting and 65536 values, valid
 * UTF-8 (codes request_too_large, json_too_deep, json_too_many_values,
 * invalid_utf8, invalid_json; each message names the byte).
 * ------------------------------------------------------------------------- */

enum wgllm_openai_endpoint {
    WGLLM_OPENAI_COMPLETIONS = 0,
    WGLLM_OPENAI_CHAT = 1,
    WGLLM_OPENAI_EMBEDDINGS = 2,
};

/* An OpenAI error: the HTTP status and the fields of {"error": {...}}. */
struct wgllm_openai_error {
    int status;        /* 400, 404, 413, 500, 503 */
    const char *type;  /* "invalid_request_error" or "server_error" */
    char param[64];    /* the offending field, "" = null */
    const char *code;  /* NULL = null; "context_length_exceeded", "model_not_found", ... */
    char message[512];
};

/* What the layer knows of the one who serves. */
struct wgllm_openai_params {
    const struct wgllm_model *model; /* bounds (vocabulary, embedding size) and token texts */
    struct wgllm_engine *engine;     /* embeddings run on it */
    const char *model_id;            /* the `model` answers show, and a name requests may give */
    const char *model_alias;         /* another name requests may give (the server: -m as given); NULL = none */
    int max_tokens;                  /* the largest max_tokens a request may ask; 0 = 2^30 */
    int n_ctx;                       /* KV positions per slot: repeat_last_n is capped to it; 0 = no cap */
    /* Forwarding (the server's --upstream): a `model` that is not this one's
     * and that upstream() names (returns non-NULL) is parsed for that
     * upstream: no model or vocabulary checks there, no logprobs, and no
     * grammar or json_schema (local-only). The chat fields the upstream's own
     * template and parser handle (messages as given, tools, tool_choice,
     * parallel_tool_calls, response_format, chat_template_kwargs,
     * reasoning_format) go to it as forward_json; so do an embeddings
     * request's input, encoding_format, dimensions and user (pooling is
     * local-only). NULL = none. */
    const char *(*upstream)(void *user, const char *model);
    void *upstream_user;
    const char *upstream_names; /* "a, b": what a 404 for an unknown model lists beside model_id; NULL = none */
};

/* Where a stream is in the <think> split of a chat answer (src/api/reasoning.c). */
struct wgllm_openai_think {
    int mode;
    char hold[16]; /* bytes that may still be a tag */
    size_t n_hold;
};

/* Where a stream is in the tool-call split of a chat answer (src/api/tools.c):
 * text that is or may become a call is held until it is known. */
struct wgllm_openai_toolsplit {
    char *held;   /* malloc'd */
    size_t n_held, cap;
    bool calls;   /* the held text began a call (or is JSON the format answers in) */
    bool seen;    /* some non-space text came */
};

/* tool_choice */
enum wgllm_openai_tool_choice { WGLLM_TOOL_CHOICE_AUTO = 0, WGLLM_TOOL_CHOICE_NONE, WGLLM_TOOL_CHOICE_REQUIRED,
                                WGLLM_TOOL_CHOICE_FUNCTION };

struct wgllm_openai_request {
    enum wgllm_openai_endpoint endpoint;
    const char *upstream;      /* forwarded there (what upstream() returned), NULL = served here */
    bool stream, include_usage, logprobs;
    bool return_progress;      /* llama.cpp server's: a stream tells how far the prompt has been read
                                  (wgllm_openai_chunk_progress); ignored without stream */
    int top_logprobs;
    struct wgllm_message *msgs; /* chat; strings owned by the request */
    int n_msgs;
    char *prompt;              /* completions (NUL-terminated; prompt_len bytes, which may hold NULs) */
    size_t prompt_len;
    struct wgllm_request_params rp; /* for wgllm_engine_submit_*; on_token / user_data are the caller's */
    /* embeddings */
    char **inputs;
    size_t *input_lens;
    int n_inputs;
    bool base64;
    enum wgllm_pooling pooling;
    /* storage behind rp */
    struct wgllm_logit_bias *bias;
    char **stops;
    char *context_key;
    char *grammar;             /* GBNF from grammar, json_schema or response_format */
    const char *grammar_param; /* which of them, for errors */
    /* chat on a reasoning model (wgllm_engine_template_thinks) with reasoning_format other than "none":
     * <think> blocks become reasoning_content; `think` follows the stream */
    bool reasoning;
    bool think_open; /* the answer begins inside the block */
    struct wgllm_openai_think think;
    /* chat served here: the messages as the template reads them (JSON; tool
     * calls' arguments as objects), the tools it is shown (NULL: none) and
     * chat_template_kwargs (NULL: none); wgllm_openai_submit renders them */
    char *messages_json, *tools_json, *kwargs_json;
    /* tools: answers are split into content and tool_calls in tool_format's
     * syntax (enum wgllm_tool_format) when `tools` is set */
    bool tools;
    int tool_format;
    enum wgllm_openai_tool_choice tool_choice;
    bool parallel_tool_calls;
    struct wgllm_openai_toolsplit split;
    /* for an upstream: a JSON object of the fields it is sent as given. Chat:
     * messages, and tools ... reasoning_format when present, for
     * wgllm_client_chat_json (the calls it answers come back in
     * wgllm_result.tool_calls_json). Embeddings: input, encoding_format,
     * dimensions, user, for wgllm_client_embed_json. */
    char *forward_json;
};

/* Most chunks wgllm_openai_chunks_end writes. */
#define WGLLM_OPENAI_END_CHUNKS 4

/* Submits a parsed chat or completions request served here (not upstream)
 * to eng: the completions prompt as a query, the chat messages through the
 * template with the tools and chat_template_kwargs. */
enum wgllm_status wgllm_openai_submit(struct wgllm_engine *eng, const struct wgllm_openai_request *req,
                                      struct wgllm_request **out, struct wgllm_error *err);
/* The prompt tokens that submit would compute over (wgllm_engine_prompt_tokens_*). */
enum wgllm_status wgllm_openai_prompt_tokens(struct wgllm_engine *eng, const struct wgllm_openai_request *req,
                                             int32_t **ids, int *n, struct wgllm_error *err);

/* Parses and validates a request body (len bytes of JSON text) for `endpoint`.
 * false with *err set (status, param, code, message); the request is then
 * empty (free it anyway: harmless). */
bool wgllm_openai_parse(const struct wgllm_openai_params *p, enum wgllm_openai_endpoint endpoint, const char *body,
                        size_t len, struct wgllm_openai_request *req, struct wgllm_openai_error *err);
void wgllm_openai_request_free(struct wgllm_openai_request *req);

void wgllm_openai_error_set(struct wgllm_openai_error *e, int status, const char *type, const char *param,
                            const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* An engine failure (submit or result) as an error; req (may be NULL) names
 * the field a full context blames (messages or prompt). */
void wgllm_openai_error_from_engine(struct wgllm_openai_error *e, const struct wgllm_openai_request *req,
                                    enum wgllm_status st, const char *msg);

/* Every answer below is malloc'd JSON text (no SSE framing, no newline in it),
 * NULL when out of memory. `id` is the caller's ("chatcmpl-...", "cmpl-...";
 * wgllm_openai_new_id makes one). */
void wgllm_openai_new_id(const struct wgllm_openai_request *req, char *id, size_t cap);
/* {"error": {...}} */
char *wgllm_openai_error_json(const struct wgllm_openai_error *e);
/* "stop", "length", or "abort" for a cancelled request (WebLLM's word: the
 * browser answers an interrupted request; the server never does). */
const char *wgllm_openai_finish_name(enum wgllm_finish_reason f);
/* The whole (non-streaming) answer to a result whose finish is not ERROR. */
char *wgllm_openai_response(const struct wgllm_openai_params *p, const struct wgllm_openai_request *req,
                            const char *id, const struct wgllm_result *r);
/* A stream, chunk by chunk: first (chat: the role chunk; NULL for completions),
 * then one per piece of on_token (NULL: nothing to send for this piece), then
 * the end: up to WGLLM_OPENAI_END_CHUNKS chunks for `r` into out[] (with
 * top_logprobs, every token's logprobs in one chunk, since the engine hands
 * the alternatives over only in the result; the tool calls, as
 * delta.tool_calls[i] with id, type, function name and the whole arguments;
 * the finish chunk; the include_usage chunk), or, when r failed, one error
 * object; returns how many (0 when out of memory). Text that may begin a
 * tool call is held back from the token chunks until it is known. */
char *wgllm_openai_chunk_first(const struct wgllm_openai_params *p, const struct wgllm_openai_request *req,
                               const char *id);
/* The chunk of one streamed piece into *chunk, or NULL when there is nothing
 * to send yet (a piece without text, or text the <think> split still holds);
 * false only when out of memory. */
bool wgllm_openai_chunk_token(const struct wgllm_openai_params *p, struct wgllm_openai_request *req, const char *id,
                              const char *text, size_t len, int32_t token, float logprob, char **chunk);
/* A stream's chunk of prompt progress (req->return_progress; as llama.cpp
 * server's): an empty choice (chat: delta {"role":"assistant","content":null})
 * and "prompt_progress": {"total", "cache", "processed", "time_ms"}. */
char *wgllm_openai_chunk_progress(const struct wgllm_openai_params *p, const struct wgllm_openai_request *req,
                                  const char *id, const struct wgllm_prompt_progress *pp);
/* The chunks that end a stream into out[0..n): logprobs (when asked), the
 * finish chunk, usage (when asked), or the error object of a failed result.
 * Returns n; 0 only when out of memory (then none is made: a stream never
 * ends with some of them and not the others). */
int wgllm_openai_chunks_end(const struct wgllm_openai_params *p, struct wgllm_openai_request *req,
                            const char *id, const struct wgllm_result *r, char *out[WGLLM_OPENAI_END_CHUNKS]);
/* Runs an embeddings request on p->engine (blocking) and answers it; NULL
 * with *err on failure. */
/* llama.cpp server's token routes on p->model, each a request body in and
 * the answer JSON out (malloc'd), or NULL with *err (400 naming the field).
 * /tokenize: {"content": "...", "add_special": false, "parse_special": true,
 * "with_pieces": false} -> {"tokens": [ids]}, or with pieces [{"id", "piece"}]
 * where a piece that is not whole UTF-8 is its bytes as numbers.
 * /detokenize: {"tokens": [ids]} -> {"content": "..."} (the pieces, control
 * tokens as their text). `model` may be given and is not checked. */
char *wgllm_openai_tokenize(const struct wgllm_openai_params *p, const char *body, size_t len,
                            struct wgllm_openai_error *err);
char *wgllm_openai_detokenize(const struct wgllm_openai_params *p, const char *body, size_t len,
                              struct wgllm_openai_error *err);

/* Anthropic's Messages API (/v1/messages, src/api/anthropic.c) on this
 * layer. A Messages body becomes the chat body it means (malloc'd), which
 * then goes through wgllm_openai_parse(WGLLM_OPENAI_CHAT) like any chat:
 * system, user / assistant turns with text, tool_use and tool_result blocks,
 * tools (input_schema), tool_choice (auto, any, tool, none;
 * disable_parallel_tool_use), stop_sequences, max_tokens (required),
 * temperature (default 1), top_p, top_k, stream, metadata.user_id, thinking
 * (disabled: enable_thinking false). Other fields, image and document
 * blocks, and server tools are refused (400 naming them); thinking blocks
 * of earlier turns are dropped. The answers: wgllm_anthropic_response turns
 * the layer's chat response into a Message (thinking, text and tool_use
 * blocks; stop_reason end_turn, max_tokens or tool_use: a stop sequence
 * shows as end_turn); a stream's chat chunks, each in turn, become SSE
 * events (`event:` and `data:` lines) through wgllm_anthropic_stream_chunk:
 * message_start, content_block_start / _delta / _stop, message_delta with
 * the usage, message_stop (the chat request must include the usage chunk:
 * wgllm_anthropic_to_chat asks for it), or an `error` event. */
struct wgllm_anthropic_stream {
    bool started, ended; /* message_start sent; message_stop or error sent */
    int block;           /* the open content block's kind (0 = none) */
    int index;           /* the open (or next) block's index */
    char stop_reason[16];
};
char *wgllm_anthropic_to_chat(const char *body, size_t len, struct wgllm_openai_error *err);
char *wgllm_anthropic_response(const char *chat_response_json);
/* {"type": "error", "error": {"type": ..., "message": ...}}, the type from the status. */
char *wgllm_anthropic_error_json(const struct wgllm_openai_error *e);
void wgllm_anthropic_stream_init(struct wgllm_anthropic_stream *s);
/* The events for one chat chunk ("" when it makes none); NULL: out of memory. */
char *wgllm_anthropic_stream_chunk(struct wgllm_anthropic_stream *s, const char *chunk_json);

/* OpenAI's Responses API (/v1/responses, src/api/responses.c) on this layer,
 * as Anthropic's above: the body becomes the chat body it means
 * (instructions; input as a string or message / function_call /
 * function_call_output items; function tools, tool_choice,
 * parallel_tool_calls, text.format, max_output_tokens, temperature, top_p,
 * stream; reasoning, metadata, user, store, truncation and include
 * accepted; previous_response_id refused: no responses are kept), the
 * chat response a Response (output items reasoning, message, function_call;
 * status completed or incomplete), and a stream's chat chunks its events
 * (response.created ... response.completed, each with its sequence_number)
 * through an opaque state made per stream. */
struct wgllm_responses_stream;
char *wgllm_responses_to_chat(const char *body, size_t len, struct wgllm_openai_error *err);
char *wgllm_responses_response(const char *chat_response_json);
struct wgllm_responses_stream *wgllm_responses_stream_init(void); /* NULL: out of memory */
void wgllm_responses_stream_free(struct wgllm_responses_stream *s);
/* The events for one chat chunk ("" when it makes none); NULL: out of memory. */
char *wgllm_responses_stream_chunk(struct wgllm_responses_stream *s, const char *chunk_json);

char *wgllm_openai_embeddings(const struct wgllm_openai_params *p, const struct wgllm_openai_request *req,
                              struct wgllm_openai_error *err);

/* ---------------------------------------------------------------------------
 * Routes
 * ------------------------------------------------------------------------- */

/*
 * The routing policy: which target of a route (the local engine or one of
 * several OpenAI-compatible upstreams) takes a request.
 *
 * One implementation, dependency-free (src/runtime/route.c, in libwgllm and
 * the wasm core), used by `wgllm serve --route`, by the C client's routes
 * (src/client/client.h, wgllm_client_add_route) and by the browser package's
 * createRouter. The caller gathers each candidate's inputs (what the engine
 * and the replica table measure); the policy is a pure function of them, so
 * the same inputs always give the same decision.
 *
 * Estimated time to first token (ms):
 *   local:  (prompt_tokens - cached_tokens) / prefill_tok_s * 1000 + wait_ms,
 *           wait_ms = 0 when a slot is free and nothing is queued, else
 *           (queue_depth + 1) * request_ms / n_slots
 *           (prefill_tok_s, request_ms: the engine's moving averages;
 *           default_prefill_tok_s / default_request_ms before any were measured)
 *   remote: latency_ms * (1 + busy_factor * in_flight)
 *           (latency_ms: the moving average of its fastest healthy replica's
 *           time to first piece; default_latency_ms before any was measured)
 * Cost (in the unit of `cost`, e.g. dollars):
 *   cost * (prompt_tokens + completion_tokens) / 1e6, with completion_tokens the
 *   request's max_tokens, or expected_completion_tokens when it has none; a
 *   local engine's cached tokens are left out (they are not computed again).
 * Score (lower wins): ttft_ms + cost_weight * cost_units.
 *
 * Hard rules, before the score: a candidate with `refused` set (a local-only
 * field for an upstream, a prompt longer than the local context, an
 * operation the endpoint lacks) never wins; an upstream none of whose
 * replicas is healthy and out of cooldown loses to every healthy candidate
 * (the local engine is always healthy). Ties go to the earlier candidate in
 * the route's list.
 */
#define WGLLM_ROUTE_MAX_CANDIDATES 16

enum wgllm_route_kind {
    WGLLM_ROUTE_LOCAL,  /* a wgllm_engine in this process */
    WGLLM_ROUTE_REMOTE, /* an OpenAI-compatible upstream (one or more replicas) */
};

struct wgllm_route_params {
    double cost_weight;            /* ms of estimated TTFT one unit of cost is worth (default 1000) */
    double default_prefill_tok_s;  /* local prefill rate before one was measured (default 200) */
    double default_request_ms;     /* local request time before one was measured (default 2000) */
    double default_latency_ms;     /* upstream latency before one was measured (default 500) */
    double busy_factor;            /* upstream slowdown per call in flight (default 0.25) */
    int expected_completion_tokens; /* completion tokens priced when max_tokens is unset (default 256) */
};

struct wgllm_route_params wgllm_route_default_params(void);

struct wgllm_route_candidate {
    /* ---- inputs (the caller fills these) ---- */
    const char *name;          /* the target's name (not owned) */
    enum wgllm_route_kind kind;
    const char *refused;       /* why it cannot take this request; NULL = it can (not owned) */
    double cost;               /* per 1M tokens (prompt + completion), in any unit; 0 = free */
    int prompt_tokens;         /* the request's prompt tokens (remote: the local count, or an estimate) */
    /* local */
    int cached_tokens;         /* leading prompt tokens already in a slot or snapshot (wgllm_engine_cached_tokens) */
    double prefill_tok_s;      /* measured prefill rate; 0 = none yet */
    double request_ms;         /* measured time of a whole request; 0 = none yet */
    int queue_depth;           /* requests waiting for a slot */
    int busy_slots, n_slots;   /* slots generating / all slots */
    /* remote */
    double latency_ms;         /* measured time to first piece; 0 = none yet */
    int in_flight;             /* calls in flight to it */
    bool healthy;              /* some replica is healthy and not cooling down */
    /* ---- outputs (wgllm_route_decide fills these) ---- */
    double ttft_ms;            /* estimated time to first token */
    double cost_units;         /* estimated cost of the request */
    double score;              /* ttft_ms + cost_weight * cost_units */
};

/* The decision of one request: its candidates (inputs and outputs) and the
 * one chosen. */
struct wgllm_route_decision {
    const char *route;         /* the route's name (not owned) */
    struct wgllm_route_candidate c[WGLLM_ROUTE_MAX_CANDIDATES];
    int n;
    int chosen;                /* index into c, -1 when every candidate refused */
    int completion_tokens;     /* what the cost was computed with */
    /* set by a caller whose chosen target failed before any of the answer was
     * delivered and that sent the request to another (then `chosen`): */
    int fallback_from;         /* that target's index, -1 = none (wgllm_route_decide sets -1) */
    char fallback_error[256];  /* why it failed */
    char notes[WGLLM_ROUTE_MAX_CANDIDATES][192]; /* storage a gatherer may point c[i].refused at */
};

/* Fills every candidate's outputs and d->chosen (also returned): the
 * lowest (unhealthy, score, index) among those not refused; -1 when all are. */
int wgllm_route_decide(const struct wgllm_route_params *p, struct wgllm_route_decision *d, int max_tokens);

/* The decision as a JSON object (malloc'd, NULL when out of memory):
 * {"name", "target" (null when none), "candidates": [{"target", "kind":
 * "local"|"remote", "eligible", "refused"?, "healthy", "prompt_tokens",
 * "cached_tokens", "prefill_tok_s", "queue_depth", "busy_slots", "latency_ms",
 * "in_flight", "cost_per_mtok", "estimated_ttft_ms", "estimated_cost",
 * "score"}], "fallback"?: {"from", "error"}} -- the `wgllm.route` field of
 * answers. */
char *wgllm_route_json(const struct wgllm_route_decision *d);

/* The first parameter of p that only a local engine honours (an OpenAI-
 * compatible upstream has no such field, or no way to be told): context_key,
 * ignore_eos, add_special = false, and top_k, min_p, typical_p,
 * repeat_penalty, penalty_last_n, n_probs away from
 * wgllm_sampler_default_params(); NULL when there is none. A request with
 * one refuses every remote target. */
const char *wgllm_route_local_only(const struct wgllm_request_params *p);

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
