/*
 * forward_webgpu.h - the WebGPU forward pass behind wgllm_context (the CPU
 * backend's forward.c dispatches here when a context runs on WebGPU).
 *
 * At init everything is planned and allocated once: weights streamed from
 * the mapped GGUF into GPU buffers (split by rows where a tensor exceeds the
 * device's binding size), an f16 KV cache, activations, logits, a readback
 * buffer and the kernel-parameter arena; every pipeline is compiled and
 * every bind group created. A decode step is then one command batch (all
 * layers, one submit) plus the readback of the logits; no GPU buffer is ever
 * created afterwards. Tokens of a prompt go through one at a time (mat-vec
 * kernels only; a mat-mat prefill is still to come).
 */
#ifndef WGLLM_FORWARD_WEBGPU_H
#define WGLLM_FORWARD_WEBGPU_H

#include "base/base.h"

struct wgllm_model;
struct wgllm_webgpu_ctx;

/* Bytes per category of the memory plan (wgllm info --plan). */
struct wgllm_webgpu_plan {
    uint64_t weights;     /* matrices in their GGUF formats */
    uint64_t vectors;     /* norms, biases, rope factors (f32) */
    uint64_t kv_cache;    /* f16 K and V of every layer */
    uint64_t activations; /* one token's hidden states */
    uint64_t logits;      /* the logits buffer and its readback copy */
    uint64_t params;      /* the kernel-parameter arena and the step buffer */
    uint64_t total;       /* what the device allocated (the sum, buffers rounded to 16 bytes) */
    int n_buffers, n_pipelines, n_dispatches, n_param_slots, n_split_tensors;
    int n_ctx;            /* KV positions (after any shrink to the device's limits) */
};

/*
 * Creates a WebGPU context for `model` with `n_ctx` positions, for
 * `backend` WGLLM_BACKEND_WEBGPU or WGLLM_BACKEND_AUTO (enum wgllm_backend).
 * With AUTO, returns OK with *out NULL when the CPU should run instead (no
 * adapter, a software adapter, a weight format without kernels) and writes
 * the reason into why; otherwise why describes the adapter in use. Errors
 * (WEBGPU only, or a failure while allocating) name the problem.
 */
enum wgllm_status wgllm_webgpu_ctx_create(struct wgllm_model *model, int backend, int n_ctx,
                                          struct wgllm_webgpu_ctx **out, char *why, size_t why_cap,
                                          struct wgllm_error *err);
void wgllm_webgpu_ctx_free(struct wgllm_webgpu_ctx *g);

int wgllm_webgpu_n_ctx(const struct wgllm_webgpu_ctx *g);
int wgllm_webgpu_n_past(const struct wgllm_webgpu_ctx *g);
void wgllm_webgpu_truncate(struct wgllm_webgpu_ctx *g, int n_past);
/* As wgllm_decode: n tokens after the cached ones, one submit each. */
enum wgllm_status wgllm_webgpu_decode(struct wgllm_webgpu_ctx *g, const int32_t *tokens, int n, bool all_logits,
                                      struct wgllm_error *err);
/* Logits row i of the last decode (i = -1: the last); NULL out of range. */
const float *wgllm_webgpu_logits(const struct wgllm_webgpu_ctx *g, int i);
/* Host memory of the context (the logits rows). */
uint64_t wgllm_webgpu_host_memory(const struct wgllm_webgpu_ctx *g);
/* GPU bytes allocated now (constant after init). */
uint64_t wgllm_webgpu_gpu_bytes(const struct wgllm_webgpu_ctx *g);
void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan);

#endif
