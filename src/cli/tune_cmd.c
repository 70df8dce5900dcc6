/*
 * tune_cmd.c - `wgllm tune -m MODEL [--quick] [--cache FILE] [--budget S]`:
 * sweeps the WebGPU kernels' tunables on this adapter with the model's own
 * matrix shapes (backend/webgpu/tune.h), prints progress on stderr and the
 * result on stdout, and stores the best in the per-adapter cache that later
 * runs read. Bounded by a wall-clock budget (default 300 s, --quick 90 s).
 */
#include "backend/webgpu/hal.h"
#include "backend/webgpu/tune.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct tune_progress {
    struct timespec t0;
};

static void on_progress(void *ud, const char *line) {
    struct tune_progress *tp = ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double s = (ts.tv_sec - tp->t0.tv_sec) + (ts.tv_nsec - tp->t0.tv_nsec) / 1e9;
    fprintf(stderr, "[%6.1f s] %s\n", s, line);
}

int wgllm_cli_tune(const struct opts *o) {
    if (o->budget < 0) {
        fprintf(stderr, "wgllm: --budget must be >= 0 seconds\n");
        return 2;
    }
    char pathbuf[1024];
    const char *path = o->cache ? o->cache : wgllm_tune_cache_path(pathbuf, sizeof pathbuf);
    if (!path) {
        fprintf(stderr, "wgllm: no cache file: set --cache FILE (WGLLM_TUNE_CACHE is off, or HOME is unset)\n");
        return 2;
    }
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    struct wgllm_tune_shape shapes[64];
    const int n = wgllm_tune_model_shapes(m, shapes, 64);
    wgllm_model_free(m); /* the shapes are all the sweep needs; it makes its own random data */
    if (n == 0) {
        fprintf(stderr, "wgllm: error: the model has no matrix in a format the WebGPU kernels support (F32, F16, Q8_0, Q4_0)\n");
        return 1;
    }
    struct wgllm_gpu *g = NULL;
    struct wgllm_error err = {0};
    if (wgllm_gpu_open(&g, &err)) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return 1;
    }
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g);
    fprintf(stderr, "tune: %s (%s, %s), %d matrix shapes, %s sweep\n", info->name, info->backend, info->type, n,
            o->quick ? "quick" : "full");
    struct tune_progress tp;
    clock_gettime(CLOCK_MONOTONIC, &tp.t0);
    struct wgllm_tune_params tpar = wgllm_tune_default_params();
    tpar.quick = o->quick;
    tpar.budget_s = o->budget > 0 ? o->budget : o->quick ? 90 : 300;
    if (info->is_cpu) tpar.reps = 1, tpar.tokens = 16, tpar.row_cap = 1024; /* software adapters are ~1000x slower */
    tpar.progress = on_progress;
    tpar.ud = &tp;
    struct wgllm_wgsl_tune best;
    enum wgllm_status st = wgllm_tune_run(g, shapes, n, &tpar, &best, &err);
    if (st) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        wgllm_gpu_close(g);
        return 1;
    }
    st = wgllm_tune_cache_store(path, info, &best, &err);
    if (!st) {
        struct wgllm_wgsl_tune back;
        st = wgllm_tune_cache_load(path, info, &back, &err); /* what later runs will read */
        if (!st && !wgllm_tune_equal(&back, &best))
            st = wgllm_error_set(&err, WGLLM_STATUS_IO, "the cache %s reads back different values", path);
    }
    if (st) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        wgllm_gpu_close(g);
        return 1;
    }
    printf("# %s\n", info->name);
    wgllm_tune_fprint(stdout, &best);
    fprintf(stderr, "tune: saved to %s\n", path);
    wgllm_gpu_close(g);
    return 0;
}
