/*
 * hal_common.c - the parts of the GPU HAL (hal.h) written on top of the HAL
 * itself, shared by every implementation (hal_native.c over Dawn,
 * web/src/hal_browser.c over navigator.gpu, web/src/hal_none.c): the staged
 * read of a storage buffer, the wait for the queue, and the pipeline cache.
 */
#include "backend/webgpu/hal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t text_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

struct wgllm_gpu_pipeline *wgllm_gpu_pipe_cache_find(const struct wgllm_gpu_pipe_cache *c, const char *wgsl) {
    const uint64_t h = text_hash(wgsl);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && !strcmp(c->e[i].src, wgsl)) return c->e[i].p;
    return NULL;
}

bool wgllm_gpu_pipe_cache_add(struct wgllm_gpu_pipe_cache *c, const char *wgsl, struct wgllm_gpu_pipeline *p) {
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 16;
        void *ne = realloc(c->e, (size_t)cap * sizeof *c->e);
        if (!ne) return false;
        c->e = ne;
        c->cap = cap;
    }
    char *copy = strdup(wgsl);
    if (!copy) return false;
    c->e[c->n++] = (struct wgllm_gpu_pipe_entry){text_hash(wgsl), copy, p};
    return true;
}

void wgllm_gpu_pipe_cache_free(struct wgllm_gpu_pipe_cache *c) {
    for (int i = 0; i < c->n; i++) free(c->e[i].src);
    free(c->e);
    memset(c, 0, sizeof *c);
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

enum wgllm_status wgllm_gpu_finish(struct wgllm_gpu *g, struct wgllm_error *err) {
    /* A 4-byte readback of a tiny buffer is the portable "wait for the queue". */
    struct wgllm_gpu_buffer *tmp = wgllm_gpu_buffer_create(g, 16, WGLLM_GPU_STORAGE, "finish", err);
    if (!tmp) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    uint32_t v;
    enum wgllm_status st = wgllm_gpu_buffer_read(g, tmp, 0, &v, 4, err);
    wgllm_gpu_buffer_destroy(g, tmp);
    return st;
}
