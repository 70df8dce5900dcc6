/*
 * tune.h - autotuning of the WGSL tunables (struct wgllm_wgsl_tune) on the
 * current adapter, and the per-adapter cache that later runs read.
 *
 * The sweep times candidates of one group of tunables at a time (mat-vec
 * workgroup size / rows per workgroup / thread-rows mode; mat-mat tiles;
 * the decode mat-vec's rounding in its prologue or a dispatch before;
 * the element-wise workgroup size) on a model's real matrix shapes, each
 * candidate first checked against the adapter's default kernels on the same
 * random data (a fast wrong candidate never wins), within a wall-clock
 * budget. The cache is a small text file:
 *
 *   # comment
 *   version=1
 *   [adapter]
 *   vendor_id=4318  device_id=8708  name=...  backend=vulkan  driver=...
 *   wg_matvec=64 ... (one key=value per line)
 *
 * one [adapter] section per adapter; a section is used only when all five
 * identity fields match the adapter and the values pass
 * wgllm_wgsl_tune_valid on it.
 */
#ifndef WGLLM_WEBGPU_TUNE_H
#define WGLLM_WEBGPU_TUNE_H

#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"

struct wgllm_model;

#define WGLLM_TUNE_CACHE_VERSION 1

/* A matrix the model multiplies by: `rows` outputs of K inputs, `count`
 * times per token (layers). */
struct wgllm_tune_shape {
    uint32_t type;
    uint32_t rows, k;
    int count;
};

/* The distinct (type, rows, K) of the model's layer matrices and output, in
 * formats the WebGPU kernels support. Returns how many (at most cap). */
int wgllm_tune_model_shapes(const struct wgllm_model *m, struct wgllm_tune_shape *out, int cap);

struct wgllm_tune_params {
    bool quick;       /* a few candidates per group instead of the full sweep */
    double budget_s;  /* wall-clock bound of the whole sweep; candidates left untried are skipped */
    int reps;         /* dispatches per timed submit at least (more until a submit takes 20 ms; best of two) */
    int tokens;       /* tokens of the mat-mat (prefill) timings */
    uint32_t row_cap; /* rows timed per shape at most (a larger matrix costs proportionally) */
    int max_candidates; /* candidates timed per group besides the default, 0: all of the list */
    unsigned groups;    /* bit 0 mat-vec, 1 mat-mat, 2 element-wise, 3 mat-vec prologue; 0: all */
    /* Sees every kernel source the sweep compiles (is_default: a reference
     * kernel, else a candidate); takes the malloc'd src and returns the
     * source to compile, malloc'd (src itself, or a replacement after
     * freeing src). For tests (a wrong candidate must be rejected) and for
     * debugging; NULL: none. */
    char *(*wgsl_hook)(void *ud, bool is_default, char *src);
    /* progress lines ("matvec 3/12 ..."); NULL: silent */
    void (*progress)(void *ud, const char *line);
    void *ud;
};
struct wgllm_tune_params wgllm_tune_default_params(void);

/*
 * Sweeps the tunables on the open device for the given shapes, starting
 * from the adapter's defaults (wgllm_wgsl_tune_defaults_for), and writes
 * the best found into *out (the defaults where nothing beat them). Errors:
 * no supported shape, a GPU failure of the default kernels.
 */
enum wgllm_status wgllm_tune_run(struct wgllm_gpu *g, const struct wgllm_tune_shape *shapes, int n_shapes,
                                 const struct wgllm_tune_params *p, struct wgllm_wgsl_tune *out,
                                 struct wgllm_error *err);

/* The tune the kernels use on this adapter when nothing is cached: the
 * cpu-adapter defaults for software adapters (unless WGLLM_WEBGPU_GPU_TUNE
 * is set), else the GPU defaults. */
const struct wgllm_wgsl_tune *wgllm_wgsl_tune_defaults_for(const struct wgllm_gpu_info *info);

/* The cache file: $WGLLM_TUNE_CACHE, else $XDG_CACHE_HOME/wgllm/webgpu-tune.txt,
 * else ~/.cache/wgllm/webgpu-tune.txt. NULL when none can be named, or when
 * WGLLM_TUNE_CACHE is "" or "off" (caching disabled). */
const char *wgllm_tune_cache_path(char *buf, size_t cap);

/* Reads this adapter's entry of the cache at `path` into *t. Returns OK when
 * found and valid; WGLLM_STATUS_IO when there is no file,
 * WGLLM_STATUS_UNSUPPORTED when it has no entry for this adapter,
 * WGLLM_STATUS_BAD_FORMAT when it is corrupt (version, a bad line, values
 * the kernels cannot take), with a message saying which; *t is untouched
 * unless OK. */
enum wgllm_status wgllm_tune_cache_load(const char *path, const struct wgllm_gpu_info *info, struct wgllm_wgsl_tune *t,
                                        struct wgllm_error *err);
/* Writes (or replaces) this adapter's entry, keeping other adapters'
 * entries of a readable file; creates the folder. Atomic (temp + rename). */
enum wgllm_status wgllm_tune_cache_store(const char *path, const struct wgllm_gpu_info *info,
                                         const struct wgllm_wgsl_tune *t, struct wgllm_error *err);

/*
 * The tune the backend uses on this adapter: the cached one when present and
 * valid (a corrupt cache is ignored with a warning), else the defaults
 * (wgllm_wgsl_tune_defaults_for). WGLLM_WEBGPU_GPU_TUNE set skips the cache.
 * The pointer stays valid for the process (a few adapters are remembered).
 */
const struct wgllm_wgsl_tune *wgllm_wgsl_tune_for(const struct wgllm_gpu_info *info);

/* Field by field (the struct has padding: never memcmp it). */
bool wgllm_tune_equal(const struct wgllm_wgsl_tune *a, const struct wgllm_wgsl_tune *b);
/* Prints the tune as "key=value" lines (also the cache's section body). */
void wgllm_tune_fprint(FILE *f, const struct wgllm_wgsl_tune *t);

#endif
