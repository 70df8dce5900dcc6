/*
 * hal.h - the small GPU layer the WebGPU backend is written against: one
 * device (with its limits and features), storage/uniform/readback buffers,
 * compute pipelines compiled from WGSL (cached by source text), bind groups
 * made once, and batches (one command encoder and one submit for any number
 * of dispatches and copies). hal_native.c implements it on a webpgu.h
 * library loaded with dlopen (Dawn); a JavaScript implementation for the
 * browser can implement the same calls later.
 *
 * Buffers are meant to be created at load only: the counters below let
 * callers and tests check that the byte total stays constant afterwards.
 */
#ifndef WGLLM_GPU_HAL_H
#define WGLLM_GPU_HAL_H

#include "base/base.h"

struct wgllm_gpu;
struct wgllm_gpu_buffer;
struct wgllm_gpu_pipeline;
struct wgllm_gpu_bindgroup;

struct wgllm_gpu_info {
    char name[256];         /* adapter (device) name, e.g. "SwiftShader Device (Subzero)" */
    char vendor[128], architecture[128], description[256];
    const char *backend;    /* "vulkan", "metal", "d3d12", ... */
    const char *type;       /* "discrete GPU", "integrated GPU", "CPU", "unknown" */
    bool is_cpu;            /* a software adapter (auto-selection avoids it) */
    uint32_t vendor_id, device_id;
    uint64_t max_storage_binding_size, max_buffer_size;
    uint32_t max_workgroup_storage, max_invocations, max_workgroup_size_x, max_workgroups_per_dim;
    uint32_t min_storage_offset_align, min_uniform_offset_align, max_storage_buffers_per_stage;
    uint32_t subgroup_min_size, subgroup_max_size;
    bool shader_f16, subgroups; /* features the adapter has (and the device enabled) */
    uint32_t feature_ids[64]; /* the adapter's raw WGPUFeatureName values */
    int n_feature_ids;
    char library[512];          /* path of the webgpu.h library in use */
};

/* Loads the library (env WGLLM_WEBGPU_LIB, else the project's npm Dawn next to
 * the executable or the working directory), creates instance, adapter and
 * device with the adapter's own limits and the features above. Fails with
 * WGLLM_ERR_UNSUPPORTED when the library or an adapter is missing, naming
 * what was tried. */
enum wgllm_status wgllm_gpu_open(struct wgllm_gpu **out, struct wgllm_error *err);
/* Gives the device up. One that is idle and healthy (every buffer destroyed,
 * no error pending, nothing timed out) is kept, with its compiled pipelines,
 * for the next wgllm_gpu_open in the process under the same WGLLM_WEBGPU_LIB
 * and VK_ICD_FILENAMES: a second model, or the same one again, starts without
 * creating a device or compiling a pipeline twice. */
void wgllm_gpu_close(struct wgllm_gpu *g);
const struct wgllm_gpu_info *wgllm_gpu_get_info(const struct wgllm_gpu *g);

enum wgllm_gpu_usage {
    WGLLM_GPU_STORAGE = 1,  /* read/written by kernels; copy source and target */
    WGLLM_GPU_UNIFORM = 2,  /* kernel parameters */
    WGLLM_GPU_READBACK = 4, /* host-mappable copy target */
};

/* Size is rounded up to a multiple of 16. NULL on failure (err set). */
struct wgllm_gpu_buffer *wgllm_gpu_buffer_create(struct wgllm_gpu *g, uint64_t size, int usage, const char *label,
                                                 struct wgllm_error *err);
void wgllm_gpu_buffer_destroy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b);
uint64_t wgllm_gpu_buffer_size(const struct wgllm_gpu_buffer *b);
/* Queues a host-to-buffer copy (any size; a tail that is not a multiple of 4
 * is zero-padded). Ordered before later submits. */
void wgllm_gpu_buffer_write(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, const void *data,
                            size_t size);
/* Maps a READBACK buffer, copies [offset, offset+size) out and unmaps; waits
 * for all submitted work. offset multiple of 8, size of 4. */
enum wgllm_status wgllm_gpu_readback(struct wgllm_gpu *g, struct wgllm_gpu_buffer *rb, uint64_t offset, void *dst,
                                     size_t size, struct wgllm_error *err);
/* Convenience for tests and tools (not the forward path: it creates a
 * staging buffer): copies a STORAGE buffer range to the host. */
enum wgllm_status wgllm_gpu_buffer_read(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, void *dst,
                                        size_t size, struct wgllm_error *err);

/* Compiles (or finds in the cache) the compute pipeline of `wgsl`, entry
 * point "main". Compilation errors come back with the shader's message. */
struct wgllm_gpu_pipeline *wgllm_gpu_pipeline_get(struct wgllm_gpu *g, const char *wgsl, const char *label,
                                                  struct wgllm_error *err);
int wgllm_gpu_pipeline_count(const struct wgllm_gpu *g);

struct wgllm_gpu_binding {
    struct wgllm_gpu_buffer *buffer;
    uint64_t offset; /* multiple of the adapter's min offset alignment */
    uint64_t size;   /* 0: to the end of the buffer */
};
/* Bind group 0 of the pipeline with bindings 0..n-1 = b[0..n). Made once,
 * reused by every dispatch. */
struct wgllm_gpu_bindgroup *wgllm_gpu_bindgroup_create(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, int n,
                                                       const struct wgllm_gpu_binding *b, struct wgllm_error *err);
void wgllm_gpu_bindgroup_destroy(struct wgllm_gpu *g, struct wgllm_gpu_bindgroup *bg);

/* Batches: begin, any number of dispatches and copies, submit (one command
 * buffer, one queue submit). One batch at a time per device. */
void wgllm_gpu_batch_begin(struct wgllm_gpu *g);
void wgllm_gpu_dispatch(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, struct wgllm_gpu_bindgroup *bg,
                        uint32_t x, uint32_t y, uint32_t z);
void wgllm_gpu_copy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *src, uint64_t src_off, struct wgllm_gpu_buffer *dst,
                    uint64_t dst_off, uint64_t size);
enum wgllm_status wgllm_gpu_batch_submit(struct wgllm_gpu *g, struct wgllm_error *err);
/* Waits until all submitted work is done; reports a device error raised
 * meanwhile. Tests and tools only (it makes a staging buffer); the forward
 * path waits by reading back its own READBACK buffer. */
enum wgllm_status wgllm_gpu_finish(struct wgllm_gpu *g, struct wgllm_error *err);

/* For the HAL implementations (hal_common.c): the cache of compiled
 * pipelines keyed by their WGSL text, which both keep. It owns copies of the
 * texts, not the pipelines. */
struct wgllm_gpu_pipe_cache {
    struct wgllm_gpu_pipe_entry {
        uint64_t hash;
        char *src;
        struct wgllm_gpu_pipeline *p;
    } *e;
    int n, cap;
};
struct wgllm_gpu_pipeline *wgllm_gpu_pipe_cache_find(const struct wgllm_gpu_pipe_cache *c, const char *wgsl);
/* false when out of memory (then nothing changed). */
bool wgllm_gpu_pipe_cache_add(struct wgllm_gpu_pipe_cache *c, const char *wgsl, struct wgllm_gpu_pipeline *p);
void wgllm_gpu_pipe_cache_free(struct wgllm_gpu_pipe_cache *c);

/* Telemetry: buffers alive and their bytes (constant after load). */
uint64_t wgllm_gpu_bytes_allocated(const struct wgllm_gpu *g);
int wgllm_gpu_buffer_count(const struct wgllm_gpu *g);
/* Buffers ever created by every device of the process: tests check that a
 * component which hides its device (the engine) creates none after load. */
uint64_t wgllm_gpu_buffers_created(void);
/* Bytes wgllm_gpu_readback copied to the host from every device of the
 * process: tests check what a step reads back (an id, not a logits row).
 * Native HAL only, as wgllm_gpu_buffers_created. */
uint64_t wgllm_gpu_readback_bytes(void);

#endif
