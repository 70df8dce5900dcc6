/*
 * hal_common.c - the parts of the GPU HAL (hal.h) written on top of the HAL
 * itself, shared by every implementation (hal_native.c over Dawn,
 * web/src/hal_browser.c over navigator.gpu, web/src/hal_none.c): the staged
 * read of a storage buffer and the hash of the pipeline caches.
 */
#include "backend/webgpu/hal.h"

uint64_t wgllm_gpu_text_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

enum wgllm_status wgllm_gpu_buffer_read(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, void *dst,
                                        size_t size, struct wgllm_error *err) {
    WGLLM_ASSERT(offset % 4 == 0);
    uint64_t csize = (size + 3) & ~(uint64_t)3;
    struct wgllm_gpu_buffer *rb = wgllm_gpu_buffer_create(g, csize, WGLLM_GPU_READBACK, "staging", err);
    if (!rb) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    wgllm_gpu_batch_begin(g);
    wgllm_gpu_copy(g, b, offset, rb, 0, csize);
    enum wgllm_status st = wgllm_gpu_batch_submit(g, err);
    if (!st) st = wgllm_gpu_readback(g, rb, 0, dst, size, err);
    wgllm_gpu_buffer_destroy(g, rb);
    return st;
}
