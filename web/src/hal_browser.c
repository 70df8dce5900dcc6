/*
 * hal_browser.c - the GPU layer (src/backend/webgpu/hal.h) of the wasm build,
 * over the page's navigator.gpu through the JS library hal_webgpu.lib.js.
 *
 * Who runs what, so that nothing blocks the browser:
 *  - The GPU objects live on the module's main runtime thread (the page, or
 *    the Worker of createWorkerEngine), as integer ids in a JS table.
 *  - The HAL is called by the engine's threads (pthreads, which may block);
 *    every JS call is proxied synchronously to the main thread (the library
 *    functions are __proxy: 'sync') and returns at once there.
 *  - Asynchronous WebGPU calls (adapter and device, mapAsync, the error
 *    scopes of pipeline and bind group creation) return after starting their
 *    promise; the promise's handler completes a struct hal_wait in the shared
 *    heap and Atomics.notify's it, while the pthread sleeps in
 *    emscripten_futex_wait. The main thread never waits or spins.
 *  - Calling the HAL from the main thread itself would deadlock on those
 *    waits, so wgllm_gpu_open refuses there (load the model on a pthread).
 *
 * The single-threaded WebGPU core (wgllm-core-st-gpu.js, built without
 * -pthread and linked with Asyncify, for pages without cross-origin
 * isolation) compiles this same file: there every call runs on the page's
 * (or Worker's) only thread, and the one difference is how a wait sleeps
 * (hal_sleep): instead of a futex it calls the async import
 * wgllm_web_js_wait (wgllm_web.lib.js), which unwinds the whole wasm stack
 * to JS, lets the event loop run the promise, and rewinds once the JS side
 * has completed the struct hal_wait. So the page never blocks either way.
 *
 * Fewer thread crossings: dispatches, copies and small buffer writes are
 * recorded here and handed over in one call at submit (one command encoder,
 * one queue submit); large writes go at once, in chunks of at most
 * WRITE_CHUNK bytes straight from the wasm heap (queue.writeBuffer copies).
 * A token step costs two crossings (submit, readback) instead of hundreds.
 */
#include "backend/webgpu/hal.h"

#include <emscripten.h>
#ifdef __EMSCRIPTEN_PTHREADS__
#include <emscripten/threading.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HAL_MSG 1024
#define WRITE_CHUNK ((size_t)16 << 20) /* bytes per direct queue write */
#define DEFER_MAX 4096                 /* writes up to this size wait for the next submit */
#define WAIT_MS 120000.0               /* longest wait for navigator.gpu's adapter and device */
#define FAULT_GRACE_MS 10000.0         /* after the device is lost, how long its pending promises get to reject */

/* Completed by the JS side (WGHAL.done): state 0 -> 1, then status and msg. */
struct hal_wait {
    _Atomic int32_t state;
    int32_t status;
    char msg[HAL_MSG];
};

/* JS library (hal_webgpu.lib.js); ids are small integers, 0 = none. */
extern int wgllm_hal_js_open(struct hal_wait *w, double *nums, char *strs);
extern void wgllm_hal_js_close(int dev);
extern int wgllm_hal_js_buffer_create(int dev, double size, int usage, const char *label);
extern void wgllm_hal_js_release(int id);
extern int wgllm_hal_js_run(int dev, const double *rec, int n, const uint8_t *data, int submit);
extern void wgllm_hal_js_write(int dev, int id, double off, const void *ptr, double size);
extern void wgllm_hal_js_readback(struct hal_wait *w, int dev, int id, double off, double msize, void *dst, double size);
extern int wgllm_hal_js_pipeline(struct hal_wait *w, int dev, const char *src, const char *label);
extern int wgllm_hal_js_bindgroup(struct hal_wait *w, int dev, int pipeline, int n, const double *entries);
extern int wgllm_hal_js_take_error(int dev, char *msg, int cap);
extern int wgllm_hal_js_lost(int dev);
#ifndef __EMSCRIPTEN_PTHREADS__
/* wgllm_web.lib.js: the async import (Asyncify) of the single-threaded core */
extern int wgllm_web_js_wait(_Atomic int32_t *flag, double ms);
#endif

struct wgllm_gpu_buffer {
    int id;
    uint64_t size;
    int usage;
};

struct wgllm_gpu_pipeline {
    int id;
};

struct wgllm_gpu_bindgroup {
    int id;
};

struct wgllm_gpu {
    int dev; /* the device's id in the JS table */
    struct wgllm_gpu_info info;
    struct wgllm_gpu_pipe_cache pipes;

    /* the open batch and the deferred writes: records of 7 doubles (see
     * wgllm_hal_js_run) and the bytes of the writes */
    double *rec;
    int n_rec, cap_rec;
    uint8_t *data;
    size_t n_data, cap_data;
    bool in_batch;
    bool oom; /* a record could not be stored: the next submit fails */

    uint64_t bytes;
    int n_buffers;
};

/* ---- waiting ------------------------------------------------------------ */

static struct hal_wait *wait_new(void) { return calloc(1, sizeof(struct hal_wait)); }

/* Sleeps until JS completes `w` or about `ms` pass, whichever comes first:
 * a futex wait on a pthread; in the single-threaded core an Asyncify sleep
 * (the stack unwinds to JS, which resumes it when the promise answers). */
static void hal_sleep(struct hal_wait *w, double ms) {
#ifdef __EMSCRIPTEN_PTHREADS__
    emscripten_futex_wait((void *)&w->state, 0, ms);
#else
    wgllm_web_js_wait(&w->state, ms);
#endif
}

/* Sleeps until JS completes `w`. On a timeout `w` is leaked on purpose: the
 * promise may still write into it later. */
static bool wait_done(struct hal_wait *w) {
    double t0 = emscripten_get_now();
    while (atomic_load(&w->state) == 0) {
        if (emscripten_get_now() - t0 > WAIT_MS) return false;
        hal_sleep(w, 1000.0);
    }
    return true;
}

/* Sleeps until JS completes `w`, a wait for GPU work. There is no time
 * limit: on a slow adapter (SwiftShader, a 1B model's prefill) a pass may
 * take minutes, which is progress, not a failure; nor is an uncaptured
 * validation error a reason to stop (the promise still answers, with the
 * error). The wait gives up only when the device is lost (its pending
 * promises then reject, which normally ends the wait first) and the promise
 * still has not answered FAULT_GRACE_MS later; `w` is leaked then, as in
 * wait_done. */
static bool wait_gpu(struct wgllm_gpu *g, struct hal_wait *w) {
    double lost_at = 0;
    while (atomic_load(&w->state) == 0) {
        hal_sleep(w, 1000.0);
        if (atomic_load(&w->state) != 0) break;
        if (lost_at == 0 && wgllm_hal_js_lost(g->dev)) lost_at = emscripten_get_now();
        if (lost_at != 0 && emscripten_get_now() - lost_at > FAULT_GRACE_MS) return false;
    }
    return true;
}

static enum wgllm_status take_error(struct wgllm_gpu *g, struct wgllm_error *err, const char *what) {
    char msg[HAL_MSG];
    if (!wgllm_hal_js_take_error(g->dev, msg, sizeof msg)) return WGLLM_STATUS_OK;
    return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s: %s", what, msg);
}

/* ---- open / close ------------------------------------------------------- */

enum wgllm_status wgllm_gpu_open(struct wgllm_gpu **out, struct wgllm_error *err) {
    *out = NULL;
#ifdef __EMSCRIPTEN_PTHREADS__
    if (emscripten_is_main_runtime_thread())
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the browser WebGPU layer must be opened from a pthread (the main thread cannot wait "
                               "for WebGPU's promises)");
#endif
    struct wgllm_gpu *g = calloc(1, sizeof *g);
    struct hal_wait *w = wait_new();
    double nums[16] = {0};
    char strs[768] = {0};
    if (!g || !w) {
        free(g);
        free(w);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the GPU device");
    }
    wgllm_hal_js_open(w, nums, strs);
    if (!wait_done(w)) {
        free(g);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no answer from navigator.gpu within %.0f s",
                               WAIT_MS / 1000);
    }
    if (w->status) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no WebGPU device: %s", w->msg);
        free(w);
        free(g);
        return WGLLM_STATUS_UNSUPPORTED;
    }
    free(w);
    g->dev = (int)nums[15];
    struct wgllm_gpu_info *in = &g->info;
    snprintf(in->name, sizeof in->name, "%s", strs);
    snprintf(in->vendor, sizeof in->vendor, "%s", strs + 256);
    snprintf(in->architecture, sizeof in->architecture, "%s", strs + 384);
    snprintf(in->description, sizeof in->description, "%s", strs + 512);
    in->max_storage_binding_size = (uint64_t)nums[0];
    in->max_buffer_size = (uint64_t)nums[1];
    in->max_workgroup_storage = (uint32_t)nums[2];
    in->max_invocations = (uint32_t)nums[3];
    in->max_workgroup_size_x = (uint32_t)nums[4];
    in->max_workgroups_per_dim = (uint32_t)nums[5];
    in->min_storage_offset_align = (uint32_t)nums[6];
    in->min_uniform_offset_align = (uint32_t)nums[7];
    in->max_storage_buffers_per_stage = (uint32_t)nums[8];
    in->subgroup_min_size = (uint32_t)nums[9];
    in->subgroup_max_size = (uint32_t)nums[10];
    in->shader_f16 = nums[11] != 0;
    in->subgroups = nums[12] != 0;
    in->is_cpu = nums[13] != 0;
    in->backend = "browser";
    in->type = in->is_cpu ? "CPU" : "unknown"; /* browsers do not say discrete or integrated */
    snprintf(in->library, sizeof in->library, "navigator.gpu");
    *out = g;
    return WGLLM_STATUS_OK;
}

void wgllm_gpu_close(struct wgllm_gpu *g) {
    if (!g) return;
    for (int i = 0; i < g->pipes.n; i++) free(g->pipes.e[i].p);
    wgllm_gpu_pipe_cache_free(&g->pipes);
    free(g->rec);
    free(g->data);
    wgllm_hal_js_close(g->dev); /* destroys the device and its objects */
    free(g);
}

const struct wgllm_gpu_info *wgllm_gpu_get_info(const struct wgllm_gpu *g) { return &g->info; }

/* ---- recording ---------------------------------------------------------- */

static bool rec_push(struct wgllm_gpu *g, double op, double a, double b, double c, double d, double e, double f) {
    if (g->n_rec == g->cap_rec) {
        int cap = g->cap_rec ? 2 * g->cap_rec : 256;
        double *p = realloc(g->rec, (size_t)cap * 7 * sizeof(double));
        if (!p) {
            g->oom = true;
            return false;
        }
        g->rec = p;
        g->cap_rec = cap;
    }
    double *r = g->rec + (size_t)g->n_rec++ * 7;
    r[0] = op, r[1] = a, r[2] = b, r[3] = c, r[4] = d, r[5] = e, r[6] = f;
    return true;
}

/* Hands the deferred writes (and, when submit, the batch) to JS. */
static int flush(struct wgllm_gpu *g, int submit) {
    int rc = 0;
    if (g->n_rec || submit) rc = wgllm_hal_js_run(g->dev, g->rec, g->n_rec, g->data, submit);
    g->n_rec = 0;
    g->n_data = 0;
    return rc;
}

/* ---- buffers ------------------------------------------------------------ */

struct wgllm_gpu_buffer *wgllm_gpu_buffer_create(struct wgllm_gpu *g, uint64_t size, int usage, const char *label,
                                                 struct wgllm_error *err) {
    size = (size + 15) & ~(uint64_t)15;
    if (size == 0) size = 16;
    if (size > g->info.max_buffer_size) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "GPU buffer '%s' of %llu bytes exceeds the device's maxBufferSize %llu",
                        label ? label : "", (unsigned long long)size, (unsigned long long)g->info.max_buffer_size);
        return NULL;
    }
    struct wgllm_gpu_buffer *b = calloc(1, sizeof *b);
    int id = b ? wgllm_hal_js_buffer_create(g->dev, (double)size, usage, label) : 0;
    if (!id) {
        free(b);
        char msg[HAL_MSG] = "";
        wgllm_hal_js_take_error(g->dev, msg, sizeof msg);
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "could not create GPU buffer '%s' of %llu bytes%s%s",
                        label ? label : "", (unsigned long long)size, msg[0] ? ": " : "", msg);
        return NULL;
    }
    b->id = id;
    b->size = size;
    b->usage = usage;
    g->bytes += size;
    g->n_buffers++;
    return b;
}

void wgllm_gpu_buffer_destroy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b) {
    if (!b) return;
    if (!g->in_batch) flush(g, 0); /* deferred writes may target it */
    wgllm_hal_js_release(b->id);
    g->bytes -= b->size;
    g->n_buffers--;
    free(b);
}

uint64_t wgllm_gpu_buffer_size(const struct wgllm_gpu_buffer *b) { return b->size; }

void wgllm_gpu_buffer_write(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, uint64_t offset, const void *data,
                            size_t size) {
    WGLLM_ASSERT(offset % 4 == 0 && offset + size <= b->size);
    size_t padded = (size + 3) & ~(size_t)3;
    if (padded <= DEFER_MAX || g->in_batch) {
        /* copied now (the caller may reuse `data`), written before the next submit */
        if (g->n_data + padded > g->cap_data) {
            size_t cap = g->cap_data ? g->cap_data : 16384;
            while (cap < g->n_data + padded) cap *= 2;
            uint8_t *p = realloc(g->data, cap);
            if (!p) {
                g->oom = true;
                return;
            }
            g->data = p;
            g->cap_data = cap;
        }
        memcpy(g->data + g->n_data, data, size);
        memset(g->data + g->n_data + size, 0, padded - size);
        if (rec_push(g, 3, b->id, (double)offset, (double)g->n_data, (double)padded, 0, 0)) g->n_data += padded;
        return;
    }
    flush(g, 0); /* keep the queue order of the deferred small writes */
    const uint8_t *s = data;
    size_t main_part = size & ~(size_t)3;
    for (size_t o = 0; o < main_part; o += WRITE_CHUNK) {
        size_t n = WGLLM_MIN(WRITE_CHUNK, main_part - o);
        wgllm_hal_js_write(g->dev, b->id, (double)(offset + o), s + o, (double)n);
    }
    if (size > main_part) {
        uint8_t tail[4] = {0};
        memcpy(tail, s + main_part, size - main_part);
        wgllm_hal_js_write(g->dev, b->id, (double)(offset + main_part), tail, 4);
    }
}

enum wgllm_status wgllm_gpu_readback(struct wgllm_gpu *g, struct wgllm_gpu_buffer *rb, uint64_t offset, void *dst,
                                     size_t size, struct wgllm_error *err) {
    WGLLM_ASSERT(rb->usage & WGLLM_GPU_READBACK);
    WGLLM_ASSERT(offset % 8 == 0 && offset + size <= rb->size);
    WGLLM_ASSERT(!g->in_batch);
    flush(g, 0);
    size_t msize = (size + 3) & ~(size_t)3;
    struct hal_wait *w = wait_new();
    if (!w) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a readback");
    wgllm_hal_js_readback(w, g->dev, rb->id, (double)offset, (double)msize, dst, (double)size);
    if (!wait_gpu(g, w)) {
        enum wgllm_status st = take_error(g, err, "GPU readback: the device was lost and the readback never answered");
        return st ? st : wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "GPU readback: the device was lost");
    }
    enum wgllm_status st = WGLLM_STATUS_OK;
    if (w->status) {
        st = take_error(g, err, "GPU readback");
        if (!st) st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s", w->msg);
    }
    free(w);
    if (st) return st;
    return take_error(g, err, "GPU work before the readback");
}

/* ---- pipelines and bind groups ------------------------------------------ */

struct wgllm_gpu_pipeline *wgllm_gpu_pipeline_get(struct wgllm_gpu *g, const char *wgsl, const char *label,
                                                  struct wgllm_error *err) {
    struct wgllm_gpu_pipeline *cached = wgllm_gpu_pipe_cache_find(&g->pipes, wgsl);
    if (cached) return cached;
    struct hal_wait *w = wait_new();
    if (!w) {
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a pipeline");
        return NULL;
    }
    int id = wgllm_hal_js_pipeline(w, g->dev, wgsl, label);
    if (!wait_gpu(g, w)) {
        char what[160];
        snprintf(what, sizeof what, "compiling WGSL kernel '%s': the device was lost", label ? label : "");
        if (!take_error(g, err, what)) wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s", what);
        return NULL;
    }
    if (w->status) {
        wgllm_hal_js_release(id);
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "compiling WGSL kernel '%s' failed: %s", label ? label : "",
                        w->msg[0] ? w->msg : "(no message)");
        free(w);
        return NULL;
    }
    free(w);
    struct wgllm_gpu_pipeline *p = calloc(1, sizeof *p);
    if (!p || !wgllm_gpu_pipe_cache_add(&g->pipes, wgsl, p)) {
        free(p);
        wgllm_hal_js_release(id);
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a pipeline");
        return NULL;
    }
    p->id = id;
    return p;
}

int wgllm_gpu_pipeline_count(const struct wgllm_gpu *g) { return g->pipes.n; }

struct wgllm_gpu_bindgroup *wgllm_gpu_bindgroup_create(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, int n,
                                                       const struct wgllm_gpu_binding *b, struct wgllm_error *err) {
    WGLLM_ASSERT(n > 0 && n <= 16);
    double ent[16 * 3];
    for (int i = 0; i < n; i++) {
        ent[3 * i] = b[i].buffer->id;
        ent[3 * i + 1] = (double)b[i].offset;
        ent[3 * i + 2] = (double)(b[i].size ? b[i].size : b[i].buffer->size - b[i].offset);
    }
    struct hal_wait *w = wait_new();
    struct wgllm_gpu_bindgroup *r = calloc(1, sizeof *r);
    if (!w || !r) {
        free(w);
        free(r);
        wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for a bind group");
        return NULL;
    }
    int id = wgllm_hal_js_bindgroup(w, g->dev, p->id, n, ent);
    if (!wait_gpu(g, w)) {
        free(r);
        if (!take_error(g, err, "creating a bind group: the device was lost"))
            wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "creating a bind group: the device was lost");
        return NULL;
    }
    if (w->status || !id) {
        if (id) wgllm_hal_js_release(id);
        wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "creating a bind group failed: %s",
                        w->msg[0] ? w->msg : "(no message)");
        free(w);
        free(r);
        return NULL;
    }
    free(w);
    r->id = id;
    return r;
}

void wgllm_gpu_bindgroup_destroy(struct wgllm_gpu *g, struct wgllm_gpu_bindgroup *bg) {
    (void)g;
    if (!bg) return;
    wgllm_hal_js_release(bg->id);
    free(bg);
}

/* ---- batches -------------------------------------------------------------- */

void wgllm_gpu_batch_begin(struct wgllm_gpu *g) {
    WGLLM_ASSERT(!g->in_batch);
    g->in_batch = true;
}

void wgllm_gpu_dispatch(struct wgllm_gpu *g, struct wgllm_gpu_pipeline *p, struct wgllm_gpu_bindgroup *bg,
                        uint32_t x, uint32_t y, uint32_t z) {
    WGLLM_ASSERT(g->in_batch);
    rec_push(g, 1, p->id, bg->id, x, y, z, 0);
}

void wgllm_gpu_copy(struct wgllm_gpu *g, struct wgllm_gpu_buffer *src, uint64_t src_off, struct wgllm_gpu_buffer *dst,
                    uint64_t dst_off, uint64_t size) {
    WGLLM_ASSERT(g->in_batch);
    rec_push(g, 2, src->id, (double)src_off, dst->id, (double)dst_off, 0, (double)size);
}

enum wgllm_status wgllm_gpu_batch_submit(struct wgllm_gpu *g, struct wgllm_error *err) {
    WGLLM_ASSERT(g->in_batch);
    g->in_batch = false;
    if (g->oom) {
        g->oom = false;
        g->n_rec = 0;
        g->n_data = 0;
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory recording a GPU batch");
    }
    flush(g, 1);
    return take_error(g, err, "GPU batch");
}

uint64_t wgllm_gpu_bytes_allocated(const struct wgllm_gpu *g) { return g->bytes; }
int wgllm_gpu_buffer_count(const struct wgllm_gpu *g) { return g->n_buffers; }
