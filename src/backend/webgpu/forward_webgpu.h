/*
 * forward_webgpu.h - the WebGPU forward pass behind wgllm_context (the CPU
 * backend's forward.c dispatches here when a context runs on WebGPU).
 *
 * At init everything is planned and allocated once, fitted to the device's
 * limits and an optional memory budget: weights streamed from the mapped
 * GGUF into GPU buffers (split by rows where a tensor exceeds the device's
 * binding size), an f16 KV cache of n_seq sequences x n_ctx positions,
 * activations for n_batch tokens, output rows, a readback buffer and the
 * kernel-parameter arena; every pipeline is compiled and every bind group
 * created. A batch (tokens of any sequences, backend.h) is then one command
 * batch and one submit, plus the readback of the rows whose outputs are
 * wanted; no GPU buffer is ever created afterwards.
 */
#ifndef WGLLM_FORWARD_WEBGPU_H
#define WGLLM_FORWARD_WEBGPU_H

#include "base/base.h"

struct wgllm_model;
struct wgllm_webgpu_ctx;
struct wgllm_batch;
struct wgllm_context_params;

/* Bytes per category of the memory plan (wgllm info --plan). */
struct wgllm_webgpu_plan {
    uint64_t weights;     /* matrices in their GGUF formats */
    uint64_t vectors;     /* norms, biases, rope factors (f32) */
    uint64_t kv_cache;    /* f16 K and V of every layer */
    uint64_t activations; /* hidden states of n_batch tokens */
    uint64_t logits;      /* the logits buffer and its readback copy */
    uint64_t params;      /* the kernel-parameter arena and the step buffer */
    uint64_t total;       /* what the device allocated (the sum, buffers rounded to 16 bytes) */
    int n_buffers, n_pipelines, n_dispatches, n_param_slots, n_split_tensors;
    int n_ctx;            /* KV positions per sequence (after any shrink to the device's limits or the budget) */
    int n_ctx_requested, n_seq, n_batch;
    int out_rows;         /* output rows one pass keeps (larger output sets take several passes) */
    uint64_t budget;      /* the caller's gpu_mem (0: none) */
    uint64_t estimate;    /* what fit_plan expected the plan to take */
    char note[320];       /* what was shrunk and why ("" when nothing) */
};

/*
 * Creates a WebGPU context for `model` with the params' n_ctx, n_seq,
 * n_batch and gpu_mem (0 fields: the wgllm_context_init defaults), for
 * params->backend WGLLM_BACKEND_WEBGPU or WGLLM_BACKEND_AUTO. When the plan
 * does not fit the device's limits or gpu_mem, n_ctx (or n_batch) shrinks
 * with a warning (plan.note says from what to what and why).
 * With AUTO, returns OK with *out NULL when the CPU should run instead (no
 * adapter, a software adapter, a weight format without kernels) and writes
 * the reason into why; otherwise why describes the adapter in use. Errors
 * (WEBGPU only, or a failure while allocating) name the problem.
 */
enum wgllm_status wgllm_webgpu_ctx_create(struct wgllm_model *model, const struct wgllm_context_params *params,
                                          struct wgllm_webgpu_ctx **out, char *why, size_t why_cap,
                                          struct wgllm_error *err);
void wgllm_webgpu_ctx_free(struct wgllm_webgpu_ctx *g);

int wgllm_webgpu_n_ctx(const struct wgllm_webgpu_ctx *g);
int wgllm_webgpu_n_batch(const struct wgllm_webgpu_ctx *g);
int wgllm_webgpu_n_past(const struct wgllm_webgpu_ctx *g);
void wgllm_webgpu_truncate(struct wgllm_webgpu_ctx *g, int n_past);
/* As wgllm_decode on sequence 0: n tokens after the cached ones, one
 * submit per n_batch tokens (a batch of decode_batch underneath). */
enum wgllm_status wgllm_webgpu_decode(struct wgllm_webgpu_ctx *g, const int32_t *tokens, int n, bool all_logits,
                                      struct wgllm_error *err);
/* Logits row i of the last decode (i = -1: the last); NULL out of range. */
const float *wgllm_webgpu_logits(const struct wgllm_webgpu_ctx *g, int i);
/* As wgllm_context_decode_batch and its output getters (backend.h). */
enum wgllm_status wgllm_webgpu_decode_batch(struct wgllm_webgpu_ctx *g, const struct wgllm_batch *b, bool embeddings,
                                            struct wgllm_error *err);
int wgllm_webgpu_n_outputs(const struct wgllm_webgpu_ctx *g);
const float *wgllm_webgpu_output(const struct wgllm_webgpu_ctx *g, int j, bool embd);
/* As wgllm_context_seq_copy / _save / _load (same snapshot size as the CPU's). */
void wgllm_webgpu_seq_copy(struct wgllm_webgpu_ctx *g, int src, int dst, int n);
void wgllm_webgpu_seq_save(struct wgllm_webgpu_ctx *g, int seq, int n, void *dst);
void wgllm_webgpu_seq_load(struct wgllm_webgpu_ctx *g, int seq, int n, const void *src);
/* As wgllm_context_seq_shift (backend.h): positions [keep, keep + discard)
 * of the sequence dropped, [keep + discard, n) moved down by discard, their
 * keys re-rotated by RoPE of -discard as the CPU backend does (within an
 * f16 rounding); one submit. INVALID_ARGUMENT when the ranges do not fit. */
enum wgllm_status wgllm_webgpu_seq_shift(struct wgllm_webgpu_ctx *g, int seq, int n, int keep, int discard,
                                         struct wgllm_error *err);
/*
 * Greedy generation on the device, after a wgllm_webgpu_decode (sequence 0):
 * up to n tokens, the first the argmax of the decode's last logits, each
 * next one the argmax of the previous step's logits computed on the GPU.
 * Only the token id comes back; the next step's embedding lookup reads it
 * from the GPU buffer, so step k+1 is queued before token k is read back.
 * on_token gets each token and returns false to stop. *n_out counts the
 * tokens given; n_past then counts the tokens before the last one given (as
 * a host loop that does not decode its last token). The host logits are
 * stale afterwards (wgllm_webgpu_logits returns NULL).
 */
enum wgllm_status wgllm_webgpu_generate_greedy(struct wgllm_webgpu_ctx *g, int n, bool (*on_token)(int32_t, void *),
                                               void *user, int *n_out, struct wgllm_error *err);
struct wgllm_sampler_params;
/* True when the sampler settings can run on the GPU (wgllm_webgpu_generate_sampled):
 * temperature > 0, top_k 1..64, top_p, min_p, seed; no penalties, typical_p,
 * logit bias or n_probs. */
bool wgllm_webgpu_can_sample(const struct wgllm_sampler_params *sp);
/* As generate_greedy, with each token sampled on the GPU (top-k, top-p,
 * min-p, temperature, as the CPU chain orders them) from a uniform that
 * hashes the seed and the position: the same seed gives the same tokens, and
 * only ids are read back. The draws differ from the CPU sampler's generator. */
enum wgllm_status wgllm_webgpu_generate_sampled(struct wgllm_webgpu_ctx *g, const struct wgllm_sampler_params *sp,
                                                int n, bool (*on_token)(int32_t, void *), void *user, int *n_out,
                                                struct wgllm_error *err);
/* The WebGPU part of a context, NULL when it runs on the CPU (backend/cpu/forward.c). */
struct wgllm_context;
struct wgllm_webgpu_ctx *wgllm_context_webgpu(struct wgllm_context *ctx);
/* Host memory of the context (output rows, per-batch tables). */
uint64_t wgllm_webgpu_host_memory(const struct wgllm_webgpu_ctx *g);
/* GPU bytes allocated now (constant after init). */
uint64_t wgllm_webgpu_gpu_bytes(const struct wgllm_webgpu_ctx *g);
void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan);

#endif
