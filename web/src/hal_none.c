/*
 * hal_none.c - a GPU HAL (src/backend/webgpu/hal.h) for wasm builds without
 * WebGPU (`make wasm WASM_HAL=none`; the default is hal_browser.c over
 * navigator.gpu): there is no device, so
 * wgllm_gpu_open fails with UNSUPPORTED and the backend's `auto` choice falls
 * back to the CPU. Every other call needs a device that cannot exist here,
 * so reaching one is a programmer error.
 */
#include "backend/webgpu/hal.h"

enum wgllm_status wgllm_gpu_open(struct wgllm_gpu **out, struct wgllm_error *err) {
    *out = NULL;
    return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                           "this wasm build has no WebGPU HAL (built with WASM_HAL=none); use the CPU");
}

#define NO_DEVICE() WGLLM_ABORT("wgllm_gpu_*: no GPU device exists in this build")

void wgllm_gpu_close(struct wgllm_gpu *g) { (void)g; }
const struct wgllm_gpu_info *wgllm_gpu_get_info(const struct wgllm_gpu *g) { NO_DEVICE(); }
struct wgllm_gpu_buffer *wgllm_gpu_buffer_create(struct wgllm_gpu *g, uint64_t size, int usage, const char *label,
                                                 struct wgllm_error *err) { NO_DEVICE(); }
void wgllm_gpu_buffer_destroy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b) { (void)g; (void)b; }
uint64_t wgllm_gpu_buffer_size(const struct wgllm_gpu_buffer *b) { NO_DEVICE(); }
void wgllm_gpu_buffer_write(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, const void *data,
                            size_t size) { NO_DEVICE(); }
enum wgllm_status wgllm_gpu_readback(struct wgllm_gpu *g, struct wgllm_gpu_buffer *rb, uint64_t offset, void *dst,
                                     size_t size, struct wgllm_error *err) { NO_DEVICE(); }
struct wgllm_gpu_pipeline *wgllm_gpu_pipeline_get(struct wgllm_gpu *g, const char *wgsl, const char *label,
                                                  struct wgllm_error *err) { NO_DEVICE(); }
int wgllm_gpu_pipeline_count(const struct wgllm_gpu *g) { return 0; }
struct wgllm_gpu_bindgroup *wgllm_gpu_bindgroup_create(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, int n,
                                                       const struct wgllm_gpu_binding *b, struct wgllm_error *err) {
    NO_DEVICE();
}
void wgllm_gpu_bindgroup_destroy(struct wgllm_gpu *g, struct wgllm_gpu_bindgroup *bg) { (void)g; (void)bg; }
void wgllm_gpu_batch_begin(struct wgllm_gpu *g) { NO_DEVICE(); }
void wgllm_gpu_dispatch(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, struct wgllm_gpu_bindgroup *bg,
                        uint32_t x, uint32_t y, uint32_t z) { NO_DEVICE(); }
void wgllm_gpu_copy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *src, uint64_t src_off, struct wgllm_gpu_buffer *dst,
                    uint64_t dst_off, uint64_t size) { NO_DEVICE(); }
enum wgllm_status wgllm_gpu_batch_submit(struct wgllm_gpu *g, struct wgllm_error *err) { NO_DEVICE(); }
uint64_t wgllm_gpu_bytes_allocated(const struct wgllm_gpu *g) { return 0; }
int wgllm_gpu_buffer_count(const struct wgllm_gpu *g) { return 0; }
