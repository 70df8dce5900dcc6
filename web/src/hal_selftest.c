/*
 * hal_selftest.c - a round trip through every call of the browser GPU HAL
 * (hal_browser.c + hal_webgpu.lib.js), for tests/web/browser.test.mjs: the
 * forward pass uses the HAL only one way, so this checks the calls one by
 * one on the page's real WebGPU: open and limits, large (direct) and small
 * (deferred) writes, a compute dispatch, a copy, buffer_read, readback,
 * finish, the pipeline cache, a WGSL compile error's message, a bind group
 * error, and the counters. Runs on its own pthread (the HAL waits for JS
 * promises); JS waits on `seq` and reads the JSON report.
 */
#include "backend/webgpu/hal.h"

#include <emscripten.h>
#include <emscripten/threading.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hal_selftest {
    _Atomic int32_t seq; /* first field: JS waits on it */
    _Atomic int32_t done;
    char *bad_wgsl;
    char report[4096];
};

#define N_FLOATS 4096 /* 16 KiB: above the HAL's deferred-write limit */

static const char *double_wgsl =
    "@group(0) @binding(0) var<storage, read_write> a: array<f32>;\n"
    "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {\n"
    "  a[id.x] = a[id.x] * 2.0 + 1.0;\n"
    "}\n";

/* JSON-escapes s into a static-sized buffer. */
static void esc(char *dst, size_t cap, const char *s) {
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') dst[n++] = '\\', dst[n++] = (char)c;
        else if (c < 0x20) n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
        else dst[n++] = (char)c;
    }
    dst[n] = 0;
}

static void run(struct hal_selftest *t) {
    struct wgllm_error err = {0};
    struct wgllm_gpu *g;
    char e1[600], e2[600], e3[600], name[300];
    if (wgllm_gpu_open(&g, &err)) {
        esc(e1, sizeof e1, err.message);
        snprintf(t->report, sizeof t->report, "{\"ok\":false,\"open_error\":\"%s\"}", e1);
        return;
    }
    const struct wgllm_gpu_info *in = wgllm_gpu_get_info(g);
    float *host = malloc(sizeof(float) * N_FLOATS), *back = malloc(sizeof(float) * N_FLOATS);
    for (int i = 0; i < N_FLOATS; i++) host[i] = (float)i;
    struct wgllm_gpu_buffer *a = wgllm_gpu_buffer_create(g, sizeof(float) * N_FLOATS, WGLLM_GPU_STORAGE, "a", &err);
    struct wgllm_gpu_buffer *b = wgllm_gpu_buffer_create(g, sizeof(float) * N_FLOATS, WGLLM_GPU_STORAGE, "b", &err);
    struct wgllm_gpu_buffer *rb = wgllm_gpu_buffer_create(g, 64, WGLLM_GPU_READBACK, "rb", &err);
    const int n_buffers = wgllm_gpu_buffer_count(g);
    const uint64_t bytes = wgllm_gpu_bytes_allocated(g);
    wgllm_gpu_buffer_write(g, a, 0, host, sizeof(float) * N_FLOATS); /* direct */
    const float small[3] = {-1, -2, -3};
    wgllm_gpu_buffer_write(g, a, 4, small, 10); /* deferred; a 2-byte tail is zero-padded: 0 in the 3rd float */
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(g, double_wgsl, "double", &err);
    struct wgllm_gpu_pipeline *p2 = wgllm_gpu_pipeline_get(g, double_wgsl, "double", &err);
    struct wgllm_gpu_binding bind = {a, 0, 0};
    struct wgllm_gpu_bindgroup *bg = p ? wgllm_gpu_bindgroup_create(g, p, 1, &bind, &err) : NULL;
    int mismatches = -1;
    float rb_first = -1;
    enum wgllm_status st = WGLLM_STATUS_UNSUPPORTED;
    if (bg) {
        wgllm_gpu_batch_begin(g);
        wgllm_gpu_dispatch(g, p, bg, N_FLOATS / 64, 1, 1);
        wgllm_gpu_copy(g, a, 0, b, 0, sizeof(float) * N_FLOATS);
        wgllm_gpu_copy(g, a, 64, rb, 0, 64);
        st = wgllm_gpu_batch_submit(g, &err);
        if (!st) st = wgllm_gpu_readback(g, rb, 8, &rb_first, 4, &err); /* a[18] */
        if (!st) st = wgllm_gpu_buffer_read(g, b, 0, back, sizeof(float) * N_FLOATS, &err);
        if (!st) st = wgllm_gpu_finish(g, &err);
        if (!st) {
            mismatches = 0;
            for (int i = 0; i < N_FLOATS; i++) {
                float v = i >= 1 && i <= 3 ? (i == 3 ? 0.0f : small[i - 1]) : host[i];
                if (back[i] != v * 2 + 1) mismatches++;
            }
        }
    }
    esc(e1, sizeof e1, st ? err.message : "");
    /* a compile error must come back with the compiler's message */
    struct wgllm_error cerr = {0};
    struct wgllm_gpu_pipeline *bad = wgllm_gpu_pipeline_get(g, t->bad_wgsl, "bad", &cerr);
    esc(e2, sizeof e2, bad ? "" : cerr.message);
    /* a bind group past the end of its buffer is a validation error */
    struct wgllm_error berr = {0};
    struct wgllm_gpu_binding over = {a, 0, sizeof(float) * N_FLOATS * 2};
    struct wgllm_gpu_bindgroup *bad_bg = p ? wgllm_gpu_bindgroup_create(g, p, 1, &over, &berr) : NULL;
    esc(e3, sizeof e3, bad_bg ? "" : berr.message);
    const int pipelines = wgllm_gpu_pipeline_count(g);
    wgllm_gpu_bindgroup_destroy(g, bg);
    wgllm_gpu_bindgroup_destroy(g, bad_bg);
    wgllm_gpu_buffer_destroy(g, a);
    wgllm_gpu_buffer_destroy(g, b);
    wgllm_gpu_buffer_destroy(g, rb);
    esc(name, sizeof name, in->name);
    snprintf(t->report, sizeof t->report,
             "{\"ok\":%s,\"error\":\"%s\",\"adapter\":\"%s\",\"is_cpu\":%s,\"max_binding\":%llu,"
             "\"max_invocations\":%u,\"subgroups\":%s,\"shader_f16\":%s,\"mismatches\":%d,\"readback\":%g,"
             "\"cached\":%s,\"pipelines\":%d,\"compile_error\":\"%s\",\"bindgroup_error\":\"%s\","
             "\"buffers\":%d,\"bytes\":%llu,\"buffers_after\":%d,\"bytes_after\":%llu}",
             st ? "false" : "true", e1, name, in->is_cpu ? "true" : "false",
             (unsigned long long)in->max_storage_binding_size, in->max_invocations, in->subgroups ? "true" : "false",
             in->shader_f16 ? "true" : "false", mismatches, rb_first, p && p == p2 ? "true" : "false", pipelines, e2,
             e3, n_buffers, (unsigned long long)bytes, wgllm_gpu_buffer_count(g),
             (unsigned long long)wgllm_gpu_bytes_allocated(g));
    free(host);
    free(back);
    wgllm_gpu_close(g);
}

static void *selftest_main(void *p) {
    struct hal_selftest *t = p;
    run(t);
    atomic_store(&t->done, 1);
    atomic_fetch_add(&t->seq, 1);
    emscripten_futex_wake((void *)&t->seq, INT_MAX);
    return NULL;
}

/* Starts the self-test on a pthread; bad_wgsl is a kernel that must not
 * compile. Poll wgllm_web_hal_selftest_done, read the JSON with
 * wgllm_web_hal_selftest_report, free with wgllm_web_hal_selftest_free. */
EMSCRIPTEN_KEEPALIVE struct hal_selftest *wgllm_web_hal_selftest_start(const char *bad_wgsl) {
    struct hal_selftest *t = calloc(1, sizeof *t);
    if (!t || !(t->bad_wgsl = strdup(bad_wgsl))) {
        free(t);
        return NULL;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, selftest_main, t) != 0) {
        free(t->bad_wgsl);
        free(t);
        return NULL;
    }
    pthread_detach(th);
    return t;
}

EMSCRIPTEN_KEEPALIVE int wgllm_web_hal_selftest_done(struct hal_selftest *t) { return atomic_load(&t->done); }
EMSCRIPTEN_KEEPALIVE const char *wgllm_web_hal_selftest_report(struct hal_selftest *t) { return t->report; }
EMSCRIPTEN_KEEPALIVE void wgllm_web_hal_selftest_free(struct hal_selftest *t) {
    if (!t) return;
    free(t->bad_wgsl);
    free(t);
}
