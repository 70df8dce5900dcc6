/*
 * gpu_gen.h - single-sequence generation on a WebGPU context for the browser
 * package (gpu_gen.c), used by wgllm_web.c until the engine runs on WebGPU.
 */
#ifndef WGLLM_WEB_GPU_GEN_H
#define WGLLM_WEB_GPU_GEN_H

#include <stdatomic.h>

#include "wgllm.h"

struct web_gpu_gen;

/* Makes a context of n_ctx positions on `backend` (WEBGPU or AUTO) and
 * writes wgllm_context_backend's description to desc. When AUTO chose the
 * CPU, returns OK with *out NULL (desc says why): run the engine instead.
 * Must run on a pthread (the browser HAL waits for JS promises). */
enum wgllm_status web_gpu_gen_init(struct wgllm_model *model, enum wgllm_backend backend, int n_ctx,
                                   const char *chat_template, struct web_gpu_gen **out, char *desc, size_t desc_cap,
                                   struct wgllm_error *err);
void web_gpu_gen_free(struct web_gpu_gen *g);
uint64_t web_gpu_gen_gpu_bytes(const struct web_gpu_gen *g);

/* Runs one request to its end on the calling thread (waits while another
 * runs): `text` is the raw prompt, or with chat the messages are rendered by
 * the chat template. Streams through rp->on_token; stops early when *cancel
 * becomes non-zero. Fills *res as wgllm_request_wait does (the caller frees
 * it with wgllm_result_free). */
void web_gpu_gen_run(struct web_gpu_gen *g, bool chat, const char *text, const struct wgllm_message *msgs, int n_msgs,
                     const struct wgllm_request_params *rp, const _Atomic int32_t *cancel, struct wgllm_result *res);

#endif
