/*
 * tune_cmd.c - `wgllm tune -m MODEL [--quick] [--cache FILE] [--budget S]`:
 * sweeps the WebGPU kernels' tunables on this adapter with the model's own
 * matrix shapes (wgllm_tools_tune), prints progress on stderr and the result
 * on stdout, and stores the best in the per-adapter cache that later runs
 * read. Bounded by a wall-clock budget (default 300 s, --quick 90 s).
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct tune_progress {
    struct timespec t0;
    bool quick;
};

static void on_start(void *ud, const struct wgllm_tools_gpu_info *info, int n_shapes) {
    struct tune_progress *tp = ud;
    fprintf(stderr, "tune: %s (%s, %s), %d matrix shapes, %s sweep\n", info->name, info->backend, info->type, n_shapes,
            tp->quick ? "quick" : "full");
    clock_gettime(CLOCK_MONOTONIC, &tp->t0);
}

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
    const char *path = o->cache ? o->cache : wgllm_tools_tune_cache_path(pathbuf, sizeof pathbuf);
    if (!path) {
        fprintf(stderr, "wgllm: no cache file: set --cache FILE (WGLLM_TUNE_CACHE is off, or HOME is unset)\n");
        return 2;
    }
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    struct tune_progress tp = {.quick = o->quick};
    clock_gettime(CLOCK_MONOTONIC, &tp.t0);
    struct wgllm_tools_tune_params tpar = wgllm_tools_tune_default_params();
    tpar.quick = o->quick;
    tpar.budget_s = o->budget;
    tpar.cache = path;
    tpar.on_start = on_start;
    tpar.progress = on_progress;
    tpar.user_data = &tp;
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_tools_tune(m, &tpar, stdout, &err);
    wgllm_model_free(m);
    if (st) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "tune: saved to %s\n", path);
    return 0;
}
