/*
 * wgllm_tools.h - the second tier of wgllm's C API: what a tool needs that
 * an application does not. The `wgllm` command is written on wgllm.h plus
 * this header and nothing else.
 *
 * It covers writing model files (synthetic models, quantized copies,
 * shards), the WebGPU device (what adapter there is, the memory plan a
 * context would get, the generated kernels, autotuning them) and the
 * weight-type names.
 * Everything here is a thin wrapper over the library's own modules, so a
 * tool gets exactly what the library does.
 *
 * Tutorial
 * --------
 *
 *     // a synthetic model (real architecture and vocabulary, random weights)
 *     struct wgllm_tools_synth_params sp = wgllm_tools_synth_default_params();
 *     sp.shape = "tiny";
 *     sp.type = wgllm_tools_type_from_name("f16");  // quantize refuses quantized input
 *     struct wgllm_error err;
 *     if (wgllm_tools_synth_write(&sp, "tiny.gguf", &err) != WGLLM_STATUS_OK)
 *         fprintf(stderr, "%s\n", err.message);
 *
 *     // the same model quantized as llama.cpp's llama-quantize would
 *     struct wgllm_tools_quantize_params qp = wgllm_tools_quantize_default_params();
 *     qp.preset = "Q4_0";
 *     wgllm_tools_quantize_file("tiny.gguf", "tiny-q4_0.gguf", &qp, &err);
 *
 *     // and cut into shards of at most 4 MiB of tensor data
 *     struct wgllm_tools_split_params xp = wgllm_tools_split_default_params();
 *     xp.max_bytes = 4 << 20;
 *     int n;
 *     wgllm_tools_split("tiny.gguf", "tiny-split", &xp, &n, &err);
 *
 *     // the WebGPU adapter, if any
 *     struct wgllm_tools_gpu_info gi;
 *     if (wgllm_tools_gpu_info(&gi, &err) == WGLLM_STATUS_OK) printf("%s\n", gi.name);
 *
 * Conventions are wgllm.h's: an `enum wgllm_status` with a
 * `struct wgllm_error` naming the problem, parameter structs from
 * `*_default_params()`.
 */
#ifndef WGLLM_TOOLS_H
#define WGLLM_TOOLS_H

#include "wgllm.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Weight types
 * ------------------------------------------------------------------------- */

/* The ggml type id of a type name, case-insensitive ("q8_0" -> 8, "f16" ->
 * 1, "Q4_K" -> 12); -1 when unknown. */
int wgllm_tools_type_from_name(const char *name);
/* The ggml name of a type id ("q8_0"); "unknown(N)" for an id outside the table. */
const char *wgllm_tools_type_name(uint32_t type);

/* ---------------------------------------------------------------------------
 * Synthetic models: real architectures and real vocabularies with seeded
 * random weights, for tests and benchmarks. The files follow llama.cpp's
 * conventions (keys, tensor names, shapes), so llama.cpp loads them too.
 * ------------------------------------------------------------------------- */

struct wgllm_tools_synth_params {
    const char *shape;      /* one of wgllm_tools_synth_shapes(); default "tiny" */
    uint32_t type;          /* weight type (wgllm_tools_type_from_name): F32, F16, BF16, Q8_0, Q4_0,
                               Q4_1, Q5_0, Q5_1; default F32 */
    uint64_t seed;          /* same seed + shape + type -> identical bytes; default 1234 */
    const char *vocab_path; /* NULL: $WGLLM_SHARED/vocab/<the shape's vocabulary> ($WGLLM_SHARED
                               defaults to ../shared, relative to the working directory) */
    const char *name;       /* general.name; NULL: the shape's name */
    int n_layer;            /* 0: the shape's layer count; else this many (smaller tests) */
    uint64_t max_split_bytes; /* 0: one file; else shards `path`-0000i-of-0000N.gguf of at most this
                                 much tensor data each (path is then the prefix) */
};

struct wgllm_tools_synth_params wgllm_tools_synth_default_params(void);
/* The shape names, NULL-terminated ("tiny", "tiny-qwen2", "tiny-qwen3",
 * "tinyllama-1.1b", "qwen2-0.5b", ...). Static. */
const char *const *wgllm_tools_synth_shapes(void);
/* Writes the model to `path`. INVALID_ARGUMENT for an unknown shape or a
 * type that is not a supported weight type; IO or BAD_FORMAT (naming the
 * path) when the vocabulary cannot be read; IO when `path` cannot be
 * written. */
enum wgllm_status wgllm_tools_synth_write(const struct wgllm_tools_synth_params *p, const char *path,
                                          struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * Quantization: rewrites a model's weights in another format, choosing each
 * tensor's type exactly as llama.cpp's llama_model_quantize does (presets
 * Q4_K_M, Q5_K_M, Q3_K_M, ... with their per-tensor rules; no importance
 * matrix), one tensor in memory at a time.
 * ------------------------------------------------------------------------- */

struct wgllm_tools_quantize_params {
    const char *preset;     /* "Q4_K_M", "q8_0", "IQ4_XS", "F16", ... (wgllm_tools_quantize_ftype_from_name);
                               required */
    int n_threads;          /* <= 0: all cores */
    bool allow_requantize;  /* accept already-quantized input tensors (quality suffers) */
    bool pure;              /* every quantizable tensor gets the preset's type (llama.cpp --pure) */
    wgllm_progress_fn progress; /* fraction of tensor bytes done; return false to cancel; NULL: none */
    void *user_data;        /* passed to progress */
};

/* No preset, all cores, no requantizing, the per-tensor mix, no progress. */
struct wgllm_tools_quantize_params wgllm_tools_quantize_default_params(void);
/* llama.cpp's LLAMA_FTYPE of a preset or type name, case-insensitive
 * ("Q4_K_M" -> 15, "q8_0" -> 7, "Q4_K" -> 15, "f16" -> 1); -1 when unknown. */
int wgllm_tools_quantize_ftype_from_name(const char *name);
/* The canonical preset name of an ftype ("Q4_K_M"); NULL when unknown. */
const char *wgllm_tools_quantize_ftype_name(int ftype);
/* The preset names, space-separated (for usage messages). Static. */
const char *wgllm_tools_quantize_preset_list(void);
/* Reads `in` (any model wgllm reads, split or not) and writes `out`: every
 * key/value kept (general.file_type set to the preset's, split.* dropped),
 * each tensor converted. A quantized input tensor that would need
 * converting is refused unless allow_requantize. Messages name the file or
 * the tensor at fault. */
enum wgllm_status wgllm_tools_quantize_file(const char *in, const char *out,
                                            const struct wgllm_tools_quantize_params *p,
                                            struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * Splitting: re-writes a model as llama.cpp-compatible shards
 * (gguf-split's layout), streaming tensor by tensor.
 * ------------------------------------------------------------------------- */

struct wgllm_tools_split_params {
    uint64_t max_bytes;   /* tensor data per shard (a soft limit: a shard holds at least one tensor);
                             0: no byte limit */
    int64_t max_tensors;  /* tensors per shard; 0: no count limit. At least one limit must be set */
    /* Called after each shard is written: its number (1-based), the count,
     * its path, tensors and file bytes. NULL: none. */
    void (*on_shard)(int no, int count, const char *path, int64_t n_tensors, uint64_t file_bytes,
                     void *user_data);
    bool (*progress)(float done, void *user_data); /* fraction of tensor bytes written; false cancels */
    void *user_data;      /* passed to both callbacks */
};

/* 512 MiB per shard, no tensor-count limit, no callbacks. */
struct wgllm_tools_split_params wgllm_tools_split_default_params(void);
/* Writes the model at `in` as OUT_PREFIX-00001-of-0000N.gguf ...; the first
 * shard carries every key/value, all carry split.no / split.count /
 * split.tensors.count as gguf-split writes them. On failure nothing written
 * stays on disk. *n_shards (may be NULL) gets the count. */
enum wgllm_status wgllm_tools_split(const char *in, const char *out_prefix, const struct wgllm_tools_split_params *p,
                                    int *n_shards, struct wgllm_error *err);
/* A shard size: bytes, or a whole number with K, M or G (binary: 512M =
 * 512 MiB). False on anything else or 0. */
bool wgllm_tools_split_parse_size(const char *s, uint64_t *out);
/* The path of shard `no` (1-based) of `count`: "PREFIX-0000no-of-0000count.gguf",
 * as llama.cpp's llama_split_path; returns what snprintf returns. */
int wgllm_tools_split_path(char *buf, size_t size, const char *prefix, int no, int count);

/* ---------------------------------------------------------------------------
 * The WebGPU device
 * ------------------------------------------------------------------------- */

/* What the WebGPU adapter wgllm would use is, and the limits and features
 * the kernel generator specialises on. */
struct wgllm_tools_gpu_info {
    char name[256];                       /* adapter name, e.g. "NVIDIA H200" */
    char vendor[128], architecture[128];  /* as the adapter reports them ("" when not) */
    char description[256];                /* driver description ("" when none) */
    char library[512];                    /* path of the webgpu.h library in use (Dawn) */
    const char *backend;                  /* "vulkan", "metal", "d3d12", ... (static) */
    const char *type;                     /* "discrete GPU", "integrated GPU", "CPU", "unknown" (static) */
    bool is_cpu;                          /* a software adapter: WGLLM_BACKEND_AUTO keeps the CPU */
    uint32_t vendor_id, device_id;        /* PCI ids (0 when unknown) */
    uint64_t max_storage_binding_size;    /* bytes one storage binding may span */
    uint64_t max_buffer_size;             /* bytes of the largest buffer */
    uint32_t max_workgroup_storage;       /* bytes of workgroup memory */
    uint32_t max_invocations;             /* invocations per workgroup */
    uint32_t max_workgroup_size_x;        /* workgroup size along x */
    uint32_t max_workgroups_per_dim;      /* workgroups per dispatch dimension */
    uint32_t max_storage_buffers_per_stage; /* storage buffers one shader stage binds */
    uint32_t min_storage_offset_align;    /* alignment of storage binding offsets */
    bool shader_f16, subgroups;           /* features the device enabled */
    uint32_t subgroup_min_size, subgroup_max_size; /* subgroup sizes (0 when unknown) */
    uint32_t feature_ids[64];             /* the adapter's raw WGPUFeatureName values */
    int n_feature_ids;                    /* entries of feature_ids */
};

/* Opens the WebGPU device (env WGLLM_WEBGPU_LIB, else the project's Dawn),
 * copies its description into *out and closes it. UNSUPPORTED, naming what
 * was tried, when there is no library or no adapter. */
enum wgllm_status wgllm_tools_gpu_info(struct wgllm_tools_gpu_info *out, struct wgllm_error *err);

/* The WebGPU memory plan of a context: every GPU buffer is planned and
 * allocated once at init; these are its bytes per category. */
struct wgllm_tools_gpu_plan {
    char adapter[320];    /* the adapter in use, as wgllm_context_backend words it */
    uint64_t weights;     /* matrices in their GGUF formats */
    uint64_t vectors;     /* norms, biases, rope factors (f32) */
    uint64_t kv_cache;    /* f16 K and V of every layer (and the context shift's scratch) */
    uint64_t kv_full;     /* kv_cache if the sliding-window layers kept every position (no ring) */
    int ring;             /* cells a sliding-window layer keeps per sequence; 0: no ring */
    uint64_t activations; /* hidden states of one batch */
    uint64_t logits;      /* the logits buffer and its readback copy */
    uint64_t params;      /* the kernel-parameter arena and the step buffer */
    uint64_t total;       /* what the device allocated (buffers rounded to 16 bytes) */
    uint64_t budget;      /* the gpu_mem asked for (0: none) */
    int n_buffers;        /* GPU buffers */
    int n_pipelines;      /* compute pipelines compiled on the device (a device reused in the process keeps its earlier ones) */
    int n_dispatches;     /* dispatches of a one-token decode step (greedy sampling included) */
    int n_dispatches_layer; /* of them, those of one (the first) layer */
    uint64_t token_bytes; /* weight bytes a decode step reads (the embedding table's one row; MoE: the used experts) */
    int n_param_slots;    /* slots of the parameter arena */
    int n_split_tensors;  /* tensors split by rows (over the binding size) */
    int n_ctx;            /* KV positions per sequence (after any shrink) */
    int n_seq;            /* sequences */
    int n_batch;          /* tokens per pass */
    int out_rows;         /* logits rows one pass keeps */
    char note[320];       /* what was shrunk to fit and why ("" when nothing) */
};

/* Creates a WebGPU context for `model` with n_ctx positions (0: as
 * wgllm_context_init) under gpu_mem bytes (0: the device's limits only),
 * allocating everything for real, fills *plan and frees the context. Errors
 * (no adapter, the plan cannot fit) name the problem. */
enum wgllm_status wgllm_tools_gpu_plan(struct wgllm_model *model, int n_ctx, uint64_t gpu_mem,
                                       struct wgllm_tools_gpu_plan *plan, struct wgllm_error *err);

/* Writes every WGSL kernel the WebGPU backend generates as DIR/NAME.wgsl
 * (NAME: kernel, then the RoPE layout where there is one, then the weight
 * or cache type: "matvec_q4_0", "rope_neox_f32", "attn_batch_f16"; the
 * folder is made when missing), the exact text the backend compiles, for
 * people to read. The kernels are those of the tune the current adapter
 * gets (what `wgllm tune` cached for it, else its defaults) or, when there
 * is no adapter, the default tune. *n_files: how many files; adapter: the
 * adapter's name ("" without one); tune (may be NULL): the tunables as
 * key=value lines. IO errors name the path. */
enum wgllm_status wgllm_tools_dump_wgsl(const char *dir, int *n_files, char *adapter, size_t adapter_cap, FILE *tune,
                                        struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * Autotuning the WebGPU kernels: sweeps the kernels' tunables on this
 * adapter with a model's own matrix shapes (each candidate checked against
 * the default kernels first) and stores the best in a per-adapter cache
 * that later runs read.
 * ------------------------------------------------------------------------- */

struct wgllm_tools_tune_params {
    bool quick;          /* a few candidates per group instead of the full sweep */
    double budget_s;     /* wall-clock bound of the sweep; <= 0: 300 s (quick: 90 s) */
    const char *cache;   /* the cache file; NULL: wgllm_tools_tune_cache_path */
    /* Called once the device is open, before the sweep: the adapter and the
     * number of distinct matrix shapes. NULL: none. */
    void (*on_start)(void *user_data, const struct wgllm_tools_gpu_info *gpu, int n_shapes);
    void (*progress)(void *user_data, const char *line); /* progress lines; NULL: silent */
    void *user_data;     /* passed to both callbacks */
};

/* Not quick, the default budget and cache, no callbacks. */
struct wgllm_tools_tune_params wgllm_tools_tune_default_params(void);
/* The cache file: $WGLLM_TUNE_CACHE, else $XDG_CACHE_HOME/wgllm/webgpu-tune.txt,
 * else ~/.cache/wgllm/webgpu-tune.txt, written into buf. NULL when none can
 * be named, or when WGLLM_TUNE_CACHE is "" or "off". */
const char *wgllm_tools_tune_cache_path(char *buf, size_t cap);
/* Tunes for `model`'s matrices, stores the best in the cache (and checks
 * that it reads back the same), then writes "# ADAPTER" and the tunables as
 * key=value lines (the cache's section body) to `result` (may be NULL).
 * UNSUPPORTED when the model has no matrix in a format the kernels support
 * or there is no adapter; IO when no cache file can be named or written. */
enum wgllm_status wgllm_tools_tune(const struct wgllm_model *model, const struct wgllm_tools_tune_params *p,
                                   FILE *result, struct wgllm_error *err);

/* ---------------------------------------------------------------------------
 * Utilities the project's programs share with the library: the one string
 * builder, the one read-a-whole-file helper and the one array grower (every
 * module that builds text or slurps a small file uses these instead of its own
 * realloc-doubling loop, so the size arithmetic is checked in one place and
 * out of memory is a flag the caller tests, never a crash), and setting an
 * error.
 *
 *   struct wgllm_strbuf sb = {0};           // or .limit = N for a byte budget
 *   wgllm_strbuf_printf(&sb, "{\"n\":%d}", n);
 *   if (sb.oom || sb.over) ...;             // something was not appended
 *   char *s = wgllm_strbuf_take(&sb);       // caller frees; sb is empty again
 * ------------------------------------------------------------------------- */

struct wgllm_strbuf {
    char *data;   /* NUL-terminated whenever not NULL; owned by the builder */
    size_t len;   /* bytes of text, not counting the NUL */
    size_t cap;   /* bytes allocated at data */
    size_t limit; /* most bytes of text it may hold; 0 = no limit beyond memory */
    bool oom;     /* an append failed for lack of memory (or its size overflowed) */
    bool over;    /* an append was refused because it would pass `limit` */
};

/* Makes room for n more bytes (plus the NUL) without changing the text.
 * false, setting oom or over, when it cannot; the text is then unchanged.
 * Each append below fails the same way and appends nothing: a failed append
 * never leaves half a piece behind, and later appends are still tried (the
 * flags stay set so the caller can tell the text is incomplete). */
bool wgllm_strbuf_reserve(struct wgllm_strbuf *sb, size_t n);
/* Appends n bytes of s (which may hold NULs). */
bool wgllm_strbuf_put(struct wgllm_strbuf *sb, const void *s, size_t n);
/* Appends the NUL-terminated s. */
bool wgllm_strbuf_puts(struct wgllm_strbuf *sb, const char *s);
/* Appends one byte. */
bool wgllm_strbuf_putc(struct wgllm_strbuf *sb, char c);
/* Appends printf-formatted text. */
bool wgllm_strbuf_printf(struct wgllm_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool wgllm_strbuf_vprintf(struct wgllm_strbuf *sb, const char *fmt, va_list ap);
/* Hands the NUL-terminated text to the caller (who frees it) and leaves sb
 * empty with its limit kept and its flags cleared. An empty builder gives a
 * fresh "" so the result is never NULL except when that malloc fails. */
char *wgllm_strbuf_take(struct wgllm_strbuf *sb);
/* Empties the text but keeps its memory for reuse (and the limit and flags). */
void wgllm_strbuf_clear(struct wgllm_strbuf *sb);
/* Frees the text; sb is empty again (limit kept, flags cleared). */
void wgllm_strbuf_free(struct wgllm_strbuf *sb);

/* Reads the whole file at `path` into *data (malloc'd, NUL-terminated so text
 * can be used as a string; *len, when not NULL, is its byte count, which
 * counts any NULs inside). max_bytes bounds what a hostile or mistaken path
 * can make it allocate (0 = no bound). Works on pipes and other files whose
 * size is not known in advance. Errors name the path: WGLLM_STATUS_IO when it
 * cannot be opened or read, WGLLM_STATUS_BAD_FORMAT when it is over
 * max_bytes, WGLLM_STATUS_OUT_OF_MEMORY. On failure *data is NULL. */
enum wgllm_status wgllm_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                                  struct wgllm_error *err);

/* Grows the array *p of `elem`-byte elements, capacity *cap, so that it holds
 * at least `need` (doubling from 16, size arithmetic checked). false, with *p
 * and *cap unchanged, when that is out of memory or would not fit size_t. */
bool wgllm_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Fills *err (when not NULL) and returns `status`, so failures read
 * `return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "...", ...);` */
enum wgllm_status wgllm_error_set(struct wgllm_error *err, enum wgllm_status status,
                                  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif /* WGLLM_TOOLS_H */
