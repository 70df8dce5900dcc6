/*
 * tools.c - include/wgllm_tools.h: thin wrappers that give the project's own
 * tools (the `wgllm` command) the library's synthetic models, quantizer,
 * splitter, WebGPU device listing, memory plan, generated kernels and
 * autotuner without their internal headers. Each function converts its public parameters to the
 * module's and calls it; nothing here has logic of its own.
 */
#include "wgllm_tools.h"

#include "backend/webgpu/forward_webgpu.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/tune.h"
#include "base/base.h"
#include "gguf/gguf.h"
#include "gguf/split_write.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

/* ---- weight types ------------------------------------------------------ */

int wgllm_tools_type_from_name(const char *name) { return wgllm_type_from_name(name); }
const char *wgllm_tools_type_name(uint32_t type) { return wgllm_type_name(type); }

/* ---- synthetic models -------------------------------------------------- */

struct wgllm_tools_synth_params wgllm_tools_synth_default_params(void) {
    const struct wgllm_synth_params d = wgllm_synth_default_params();
    struct wgllm_tools_synth_params p = {
        .shape = d.shape,
        .type = d.type,
        .seed = d.seed,
        .vocab_path = d.vocab_path,
        .name = d.name,
        .n_layer = d.n_layer,
        .max_split_bytes = d.max_split_bytes,
    };
    return p;
}

const char *const *wgllm_tools_synth_shapes(void) { return wgllm_synth_shape_names(); }

enum wgllm_status wgllm_tools_synth_write(const struct wgllm_tools_synth_params *p, const char *path,
                                          struct wgllm_error *err) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    if (p) {
        sp.shape = p->shape;
        sp.type = p->type;
        sp.seed = p->seed;
        sp.vocab_path = p->vocab_path;
        sp.name = p->name;
        sp.n_layer = p->n_layer;
        sp.max_split_bytes = p->max_split_bytes;
    }
    return wgllm_synth_write(&sp, path, err);
}

/* ---- quantization ------------------------------------------------------ */

struct wgllm_tools_quantize_params wgllm_tools_quantize_default_params(void) {
    const struct wgllm_quantize_params d = wgllm_quantize_default_params();
    struct wgllm_tools_quantize_params p = {
        .preset = NULL,
        .n_threads = d.n_threads,
        .allow_requantize = d.allow_requantize,
        .pure = d.pure,
        .progress = NULL,
        .user_data = NULL,
    };
    return p;
}

int wgllm_tools_quantize_ftype_from_name(const char *name) { return wgllm_quantize_ftype_from_name(name); }
const char *wgllm_tools_quantize_ftype_name(int ftype) { return wgllm_quantize_ftype_name(ftype); }
const char *wgllm_tools_quantize_preset_list(void) { return wgllm_quantize_preset_list(); }

enum wgllm_status wgllm_tools_quantize_file(const char *in, const char *out,
                                            const struct wgllm_tools_quantize_params *p,
                                            struct wgllm_error *err) {
    struct wgllm_quantize_params qp = wgllm_quantize_default_params();
    if (p) {
        qp.preset = p->preset;
        qp.n_threads = p->n_threads;
        qp.allow_requantize = p->allow_requantize;
        qp.pure = p->pure;
        qp.progress = p->progress;
        qp.user = p->user_data;
    }
    return wgllm_quantize_file(in, out, &qp, err);
}

/* ---- splitting --------------------------------------------------------- */

struct wgllm_tools_split_params wgllm_tools_split_default_params(void) {
    const struct wgllm_gguf_split_params d = wgllm_gguf_split_default_params();
    struct wgllm_tools_split_params p = {
        .max_bytes = d.max_bytes,
        .max_tensors = d.max_tensors,
        .on_shard = NULL,
        .progress = NULL,
        .user_data = NULL,
    };
    return p;
}

enum wgllm_status wgllm_tools_split(const char *in, const char *out_prefix, const struct wgllm_tools_split_params *p,
                                    int *n_shards, struct wgllm_error *err) {
    struct wgllm_gguf_split_params sp = wgllm_gguf_split_default_params();
    if (p) {
        sp.max_bytes = p->max_bytes;
        sp.max_tensors = p->max_tensors;
        sp.on_shard = p->on_shard;
        sp.progress = p->progress;
        sp.user = p->user_data;
    }
    return wgllm_gguf_split(in, out_prefix, &sp, n_shards, err);
}

bool wgllm_tools_split_parse_size(const char *s, uint64_t *out) { return wgllm_gguf_split_parse_size(s, out); }

int wgllm_tools_split_path(char *buf, size_t size, const char *prefix, int no, int count) {
    return wgllm_gguf_split_path(buf, size, prefix, no, count);
}

/* ---- the WebGPU device ------------------------------------------------- */

static void copy_gpu_info(struct wgllm_tools_gpu_info *o, const struct wgllm_gpu_info *in) {
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof o->name, "%s", in->name);
    snprintf(o->vendor, sizeof o->vendor, "%s", in->vendor);
    snprintf(o->architecture, sizeof o->architecture, "%s", in->architecture);
    snprintf(o->description, sizeof o->description, "%s", in->description);
    snprintf(o->library, sizeof o->library, "%s", in->library);
    o->backend = in->backend;
    o->type = in->type;
    o->is_cpu = in->is_cpu;
    o->vendor_id = in->vendor_id;
    o->device_id = in->device_id;
    o->max_storage_binding_size = in->max_storage_binding_size;
    o->max_buffer_size = in->max_buffer_size;
    o->max_workgroup_storage = in->max_workgroup_storage;
    o->max_invocations = in->max_invocations;
    o->max_workgroup_size_x = in->max_workgroup_size_x;
    o->max_workgroups_per_dim = in->max_workgroups_per_dim;
    o->max_storage_buffers_per_stage = in->max_storage_buffers_per_stage;
    o->min_storage_offset_align = in->min_storage_offset_align;
    o->shader_f16 = in->shader_f16;
    o->subgroups = in->subgroups;
    o->subgroup_min_size = in->subgroup_min_size;
    o->subgroup_max_size = in->subgroup_max_size;
    int n = in->n_feature_ids;
    if (n < 0) n = 0;
    if (n > (int)(sizeof o->feature_ids / sizeof o->feature_ids[0])) n = (int)(sizeof o->feature_ids / sizeof o->feature_ids[0]);
    memcpy(o->feature_ids, in->feature_ids, sizeof(uint32_t) * (size_t)n);
    o->n_feature_ids = n;
}

enum wgllm_status wgllm_tools_gpu_info(struct wgllm_tools_gpu_info *out, struct wgllm_error *err) {
    struct wgllm_gpu *g = NULL;
    enum wgllm_status st = wgllm_gpu_open(&g, err);
    if (st) return st;
    copy_gpu_info(out, wgllm_gpu_get_info(g));
    wgllm_gpu_close(g);
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_tools_dump_wgsl(const char *dir, int *n_files, char *adapter, size_t adapter_cap, FILE *tune,
                                        struct wgllm_error *err) {
    *n_files = 0;
    if (adapter_cap) adapter[0] = 0;
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_default_tune();
    struct wgllm_gpu *g = NULL;
    if (!wgllm_gpu_open(&g, NULL)) { /* no adapter: the default tune */
        const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g);
        if (adapter_cap) snprintf(adapter, adapter_cap, "%s", info->name);
        t = wgllm_wgsl_tune_for(info); /* valid for the process */
        wgllm_gpu_close(g);
    }
    if (tune) wgllm_tune_fprint(tune, t);
    return wgllm_wgsl_dump(dir, t, n_files, err);
}

enum wgllm_status wgllm_tools_gpu_plan(struct wgllm_model *model, int n_ctx, uint64_t gpu_mem,
                                       struct wgllm_tools_gpu_plan *plan, struct wgllm_error *err) {
    memset(plan, 0, sizeof(*plan));
    struct wgllm_webgpu_ctx *g = NULL;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = n_ctx, cp.backend = WGLLM_BACKEND_WEBGPU, cp.gpu_mem = gpu_mem;
    enum wgllm_status st = wgllm_webgpu_ctx_create(model, &cp, &g, plan->adapter, sizeof plan->adapter, err);
    if (st) return st;
    struct wgllm_webgpu_plan pl;
    wgllm_webgpu_get_plan(g, &pl);
    plan->weights = pl.weights;
    plan->vectors = pl.vectors;
    plan->kv_cache = pl.kv_cache;
    plan->kv_full = pl.kv_full;
    plan->ring = pl.ring;
    plan->activations = pl.activations;
    plan->logits = pl.logits;
    plan->params = pl.params;
    plan->total = pl.total;
    plan->budget = pl.budget;
    plan->n_buffers = pl.n_buffers;
    plan->n_pipelines = pl.n_pipelines;
    plan->n_dispatches = pl.n_dispatches;
    plan->n_dispatches_layer = pl.n_dispatches_layer;
    plan->token_bytes = pl.token_bytes;
    plan->n_param_slots = pl.n_param_slots;
    plan->n_split_tensors = pl.n_split_tensors;
    plan->n_ctx = pl.n_ctx;
    plan->n_seq = pl.n_seq;
    plan->n_batch = pl.n_batch;
    plan->out_rows = pl.out_rows;
    snprintf(plan->note, sizeof plan->note, "%s", pl.note);
    wgllm_webgpu_ctx_free(g);
    return WGLLM_STATUS_OK;
}

/* ---- autotuning -------------------------------------------------------- */

struct wgllm_tools_tune_params wgllm_tools_tune_default_params(void) {
    struct wgllm_tools_tune_params p = {0};
    return p;
}

const char *wgllm_tools_tune_cache_path(char *buf, size_t cap) { return wgllm_tune_cache_path(buf, cap); }

enum wgllm_status wgllm_tools_tune(const struct wgllm_model *model, const struct wgllm_tools_tune_params *p,
                                   FILE *result, struct wgllm_error *err) {
    const struct wgllm_tools_tune_params d = wgllm_tools_tune_default_params();
    if (!p) p = &d;
    char pathbuf[1024];
    const char *path = p->cache ? p->cache : wgllm_tune_cache_path(pathbuf, sizeof pathbuf);
    if (!path)
        return wgllm_error_set(err, WGLLM_STATUS_IO,
                               "no cache file: set --cache FILE (WGLLM_TUNE_CACHE is off, or HOME is unset)");
    struct wgllm_tune_shape shapes[64];
    const int n = wgllm_tune_model_shapes(model, shapes, 64);
    if (n == 0)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "the model has no matrix in a format the WebGPU kernels support (F32, F16, Q8_0, Q4_0)");
    struct wgllm_gpu *g = NULL;
    enum wgllm_status st = wgllm_gpu_open(&g, err);
    if (st) return st;
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g);
    if (p->on_start) {
        struct wgllm_tools_gpu_info ti;
        copy_gpu_info(&ti, info);
        p->on_start(p->user_data, &ti, n);
    }
    struct wgllm_tune_params tpar = wgllm_tune_default_params();
    tpar.quick = p->quick;
    tpar.budget_s = p->budget_s > 0 ? p->budget_s : p->quick ? 90 : 300;
    if (info->is_cpu) tpar.reps = 1, tpar.tokens = 16, tpar.row_cap = 1024; /* software adapters are ~1000x slower */
    tpar.progress = p->progress;
    tpar.ud = p->user_data;
    struct wgllm_wgsl_tune best;
    st = wgllm_tune_run(g, shapes, n, &tpar, &best, err);
    if (!st) st = wgllm_tune_cache_store(path, info, &best, err);
    if (!st) {
        struct wgllm_wgsl_tune back;
        st = wgllm_tune_cache_load(path, info, &back, err); /* what later runs will read */
        if (!st && !wgllm_tune_equal(&back, &best))
            st = wgllm_error_set(err, WGLLM_STATUS_IO, "the cache %s reads back different values", path);
    }
    if (!st && result) {
        fprintf(result, "# %s\n", info->name);
        wgllm_tune_fprint(result, &best);
    }
    wgllm_gpu_close(g);
    return st;
}
