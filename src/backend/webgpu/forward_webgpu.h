/*
 * forward_webgpu.h - the WebGPU backend. A context reaches it only through
 * its table, wgllm_backend_webgpu_i (backend_impl.h); what is declared here
 * is for the callers that still look past that: the memory plan (`wgllm info
 * --plan`, tests).
 *
 * At init everything is planned and allocated once, fitted to the device's
 * limits and an optional memory budget: weights streamed from the mapped
 * GGUF into GPU buffers (split by rows where a tensor exceeds the device's
 * binding size), an f16 KV cache of n_seq sequences x n_ctx positions,
 * activations for n_batch tokens, output rows, a readback buffer and the
 * kernel-parameter arena; every pipeline is compiled and every bind group
 * created. A pass (tokens of any sequences, backend_impl.h) is then one
 * command batch and one submit, plus the readback of the rows whose outputs
 * are wanted; no GPU buffer is ever created afterwards.
 */
#ifndef WGLLM_FORWARD_WEBGPU_H
#define WGLLM_FORWARD_WEBGPU_H

#include "base/base.h"

struct wgllm_model;
struct wgllm_webgpu_ctx;
struct wgllm_context_params;

/* Bytes per category of the memory plan (wgllm info --plan). */
struct wgllm_webgpu_plan {
    uint64_t weights;     /* matrices in their GGUF formats */
    uint64_t vectors;     /* norms, biases, rope factors (f32) */
    uint64_t kv_cache;    /* f16 K and V of every layer, and the context shift's scratch */
    uint64_t kv_full;     /* kv_cache if the sliding-window layers kept n_ctx positions (no ring) */
    int ring;             /* cells of a sliding-window layer's ring per sequence; 0: no ring */
    uint64_t activations; /* hidden states of n_batch tokens */
    uint64_t logits;      /* the logits buffer and its readback copy */
    uint64_t params;      /* the kernel-parameter arena and the step buffer */
    uint64_t total;       /* what the device allocated (the sum, buffers rounded to 16 bytes) */
    int n_buffers, n_pipelines, n_param_slots, n_split_tensors;
    int n_dispatches;       /* dispatches of a one-token decode step (greedy: the argmax included) */
    int n_dispatches_layer; /* of them, those of one (the first) layer */
    uint64_t token_bytes;   /* weight bytes a decode step reads: every matrix but the embedding table (one row
                               of it), the experts' stacks at n_expert_used of n_expert */
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

/* The memory plan of a context (wgllm info --plan). */
void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan);
/* Command buffers submitted by the context's passes so far (a long pass is
 * cut into several: forward_webgpu.c's record; tests). */
uint64_t wgllm_webgpu_submits(const struct wgllm_webgpu_ctx *g);

/*
 * The WebGPU state of a context, NULL when it runs on the CPU: for the plan
 * of a running context (tests). It leaks the backend past the context's
 * interface (backend_impl.h), as wgllm_webgpu_ctx_create does for `wgllm info
 * --plan`; both go when the plan is reported through the public API.
 */
struct wgllm_context;
struct wgllm_webgpu_ctx *wgllm_context_webgpu(struct wgllm_context *ctx);

#endif
