/*
 * webgpu_plan.c - the WebGPU backend's memory plan and buffers
 * (webgpu_internal.h): the plan fitted to the device's limits and the
 * caller's budget before anything is allocated (fit_plan: n_batch, the
 * output rows per pass and n_ctx shrink, with a note saying why), then
 * every buffer: the weights (split by rows where a tensor exceeds a binding;
 * uploaded from the mapped file, or streamed from it through one bounded
 * staging block), the f32 vectors in one buffer, the KV cache, the
 * activations and output rows, the step, readback and sampling buffers.
 *
 * KV cache: per layer one f16 K buffer and one V buffer, each [n_seq][n_ctx]
 * rows of n_head_kv * head_dim, and a scratch of one layer's n_ctx rows for
 * the context shift.
 */
#include "backend/webgpu/webgpu_internal.h"
#include "backend/backend.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPLOAD_CHUNK ((size_t)16 << 20)       /* bytes per queue write */
#define UPLOAD_SYNC_BYTES ((uint64_t)64 << 20) /* queued bytes before waiting: bounds Dawn's staging */
#define OUT_BYTES ((uint64_t)16 << 20)         /* logits rows one pass keeps on the GPU (at least n_seq rows) */

struct wgllm_gpu_buffer *wgllm_webgpu_gbuf(struct wgllm_webgpu_ctx *g, uint64_t bytes, int usage, const char *label,
                                          uint64_t *category, struct wgllm_error *err) {
    struct wgllm_gpu_buffer *b = wgllm_gpu_buffer_create(g->gpu, bytes ? bytes : 4, usage, label, err);
    if (b && category) *category += wgllm_gpu_buffer_size(b);
    return b;
}

enum wgllm_status wgllm_webgpu_sync(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
    wgllm_gpu_batch_begin(g->gpu);
    wgllm_gpu_copy(g->gpu, g->step, 0, g->readback, 0, 16);
    enum wgllm_status st = wgllm_gpu_batch_submit(g->gpu, err);
    uint32_t v;
    if (!st) st = wgllm_gpu_readback(g->gpu, g->readback, 0, &v, 4, err);
    return st;
}

/* Streams bytes from the mapped file into a buffer in bounded chunks. */
static enum wgllm_status upload(struct wgllm_webgpu_ctx *g, struct wgllm_gpu_buffer *b, uint64_t off, const void *src,
                                size_t bytes, uint64_t *pending, struct wgllm_error *err) {
    const char *s = src;
    while (bytes) {
        size_t n = WGLLM_MIN(bytes, UPLOAD_CHUNK);
        wgllm_gpu_buffer_write(g->gpu, b, off, s, n);
        off += n, s += n, bytes -= n;
        *pending += n;
        if (*pending >= UPLOAD_SYNC_BYTES) {
            enum wgllm_status st = wgllm_webgpu_sync(g, err);
            if (st) return st;
            *pending = 0;
        }
    }
    return WGLLM_STATUS_OK;
}

/* The same for a weight left in the file (a streamed model): read into one
 * bounded staging block, chunk by chunk, so the weights never sit in memory. */
static enum wgllm_status upload_streamed(struct wgllm_webgpu_ctx *g, const struct wgllm_weight *w,
                                         struct wgllm_gpu_buffer *b, uint64_t src_off, size_t bytes, uint64_t *pending,
                                         struct wgllm_error *err) {
    if (!g->staging && !(g->staging = malloc(UPLOAD_CHUNK)))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the upload staging block");
    for (uint64_t off = 0; off < bytes;) {
        size_t n = (size_t)WGLLM_MIN((uint64_t)bytes - off, (uint64_t)UPLOAD_CHUNK);
        enum wgllm_status st = wgllm_weight_read(g->model, w, src_off + off, g->staging, n, err);
        if (!st) st = upload(g, b, off, g->staging, n, pending, err);
        if (st) return st;
        off += n;
    }
    return WGLLM_STATUS_OK;
}

/* Rows per piece: within the binding size and the dispatch limit of the
 * mat-vec (rows_matvec rows per workgroup), and whole u32 words. */
static enum wgllm_status plan_weight(struct wgllm_webgpu_ctx *g, const struct wgllm_weight *w, struct gweight *gw,
                                     uint64_t *pending, struct wgllm_error *err) {
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g->gpu);
    gw->type = w->type, gw->ne0 = w->ne0, gw->ne1 = w->ne1, gw->row_size = w->row_size;
    uint64_t max_bytes = WGLLM_MIN(info->max_storage_binding_size, info->max_buffer_size);
    /* WGLLM_WEBGPU_MAX_WEIGHT_BYTES: a smaller piece size, so that the split
     * path runs (tests) or a browser's 128 MiB limit is mimicked natively */
    const char *cap = getenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES");
    if (cap && strtoull(cap, NULL, 10) > 0) max_bytes = WGLLM_MIN(max_bytes, strtoull(cap, NULL, 10));
    int64_t max_rows = (int64_t)(max_bytes / w->row_size);
    int64_t disp_rows = (int64_t)info->max_workgroups_per_dim * g->tune->rows_matvec;
    if (disp_rows < max_rows) max_rows = disp_rows;
    while (max_rows > 1 && (max_rows * (int64_t)w->row_size) % 4) max_rows--;
    if (max_rows < 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s: a row of %zu bytes exceeds the device's "
                               "storage binding size %llu", w->name, w->row_size, (unsigned long long)max_bytes);
    const int64_t n_pieces = (w->ne1 + max_rows - 1) / max_rows;
    if (n_pieces > MAX_PIECES) /* checked before it is stored: ctx_free walks n_pieces */
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s needs %lld pieces of at most %lld rows (limit %d)",
                               w->name, (long long)n_pieces, (long long)max_rows, MAX_PIECES);
    gw->n_pieces = (int)n_pieces;
    if (gw->n_pieces > 1) g->plan.n_split_tensors++;
    for (int p = 0; p < gw->n_pieces; p++) {
        int64_t r0 = p * max_rows, rows = WGLLM_MIN(max_rows, w->ne1 - r0);
        size_t bytes = (size_t)rows * w->row_size;
        gw->piece[p].row0 = r0, gw->piece[p].rows = rows;
        gw->piece[p].buf = wgllm_webgpu_gbuf(g, bytes, WGLLM_GPU_STORAGE, w->name, &g->plan.weights, err);
        if (!gw->piece[p].buf) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        enum wgllm_status st = w->data ? upload(g, gw->piece[p].buf, 0, (const char *)w->data + (size_t)r0 * w->row_size,
                                                bytes, pending, err)
                                       : upload_streamed(g, w, gw->piece[p].buf, (uint64_t)r0 * w->row_size, bytes,
                                                         pending, err);
        if (st) return st;
    }
    return WGLLM_STATUS_OK;
}

static bool weight_ok(const struct wgllm_weight *w, enum wgllm_kernel k, char *why, size_t cap) {
    if (wgllm_wgsl_supports(k, w->type)) return true;
    snprintf(why, cap, "tensor %s is %s, which has no WebGPU kernel yet (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS have)", w->name,
             wgllm_type_name(w->type));
    return false;
}

static uint64_t round16(uint64_t b) { return (b + 15) & ~(uint64_t)15; }

/* GPU bytes of everything but the KV cache, as create() allocates it, for
 * batches of B tokens and OC output rows (an upper bound: the vectors and
 * the parameter arena are counted generously). */
static uint64_t plan_fixed(const struct wgllm_webgpu_ctx *g, uint64_t B, uint64_t OC) {
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const uint64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab, dk = hp->head_dim_k, dv = hp->head_dim_v;
    const uint64_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    uint64_t fixed = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 7; j++) fixed += round16((uint64_t)ws[j]->row_size * ws[j]->ne1);
        fixed += (2 * E + QD + KD + VD + 2 * dk) * 4; /* vectors, at most */
    }
    fixed += round16((uint64_t)m->tok_embd.row_size * m->tok_embd.ne1);
    if (m->output.tensor != m->tok_embd.tensor) fixed += round16((uint64_t)m->output.row_size * m->output.ne1);
    fixed += B * (2 * E + QD + KD + VD + OD + E + 3 * F + (m->layers[0].q_norm ? QD + KD : 0) +
                  WGLLM_MAX(WGLLM_MAX(E, F), OD) + hp->n_rot + 4) * 4;
    fixed += OC * (2 * E + OD + V) * 4 + OC * WGLLM_MAX(V, E) * 4 + 64 * 1024; /* outputs, readback, parameter arena */
    return fixed;
}

/* Fits the plan to the device and the budget before anything is allocated:
 * n_batch shrinks so that an activation of the batch fits one binding;
 * n_ctx so that a layer's K or V cache of all sequences fits one binding.
 * With a budget (gpu_mem), the output rows per pass and then n_batch shrink
 * first (down to n_seq rows and 32 tokens: they cost speed, not results)
 * while the budget cannot hold min(n_ctx, 256) positions, then n_ctx
 * shrinks to what the budget holds. Says what changed and why (plan.note
 * and a warning). */
static enum wgllm_status fit_plan(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g->gpu);
    const uint64_t E = hp->n_embd, F = hp->n_ff, dk = hp->head_dim_k, dv = hp->head_dim_v;
    const uint64_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const uint64_t max_bind = WGLLM_MIN(info->max_storage_binding_size, info->max_buffer_size);
    const int n_ctx0 = g->n_ctx, n_batch0 = g->n_batch, out0 = g->out_cap;
    char why[160] = "";

    const uint64_t row_max = WGLLM_MAX(WGLLM_MAX(E, F), WGLLM_MAX(QD, OD)) * 4;
    if ((uint64_t)g->n_batch * row_max > max_bind) {
        g->n_batch = (int)(max_bind / row_max);
        snprintf(why, sizeof why, "a batch's activations must fit the device's %llu-byte binding",
                 (unsigned long long)max_bind);
    }
    /* grids that grow with the batch along x: element-wise ops over all rows
     * (SwiGLU, the activation rounding) and one workgroup per head row */
    const uint64_t max_wg = info->max_workgroups_per_dim;
    const uint64_t per_tok = WGLLM_MAX(WGLLM_MAX(ceil_div(F, g->tune->wg_elem), ceil_div(WGLLM_MAX(E, OD), 32ull * g->tune->wg_elem)),
                                       (uint64_t)hp->n_head);
    if ((uint64_t)g->n_batch * per_tok > max_wg) {
        g->n_batch = (int)(max_wg / per_tok);
        snprintf(why, sizeof why, "a batch's element-wise grids must fit the device's %llu workgroups per dimension",
                 (unsigned long long)max_wg);
    }
    const uint64_t kv_row = WGLLM_MAX(KD, VD) * 2;
    if ((uint64_t)g->n_seq * g->n_ctx * kv_row > max_bind) {
        g->n_ctx = (int)(max_bind / (kv_row * (uint64_t)g->n_seq));
        snprintf(why, sizeof why, "a layer's K/V cache of %d sequences must fit the device's %llu-byte binding",
                 g->n_seq, (unsigned long long)max_bind);
    }
    g->out_cap = WGLLM_MIN(g->out_cap, g->n_batch);
    /* bytes per position of every slot, and of the context shift's scratch */
    const uint64_t kv_pos = (uint64_t)hp->n_layer * g->n_seq * (KD + VD) * 2 + WGLLM_MAX(KD, VD) * 2;
    uint64_t fixed = plan_fixed(g, (uint64_t)g->n_batch, (uint64_t)g->out_cap);
    g->plan.budget = g->gpu_mem;
    if (g->gpu_mem && fixed + kv_pos * (uint64_t)g->n_ctx > g->gpu_mem) {
        const uint64_t want = fixed + kv_pos * (uint64_t)g->n_ctx;
        const int min_ctx = WGLLM_MIN(g->n_ctx, 256);
        while (fixed + kv_pos * (uint64_t)min_ctx > g->gpu_mem && (g->out_cap > g->n_seq || g->n_batch > 32)) {
            if (g->out_cap > g->n_seq) g->out_cap = WGLLM_MAX(g->n_seq, g->out_cap / 2);
            else g->n_batch = WGLLM_MAX(32, g->n_batch / 2), g->out_cap = WGLLM_MIN(g->out_cap, g->n_batch);
            fixed = plan_fixed(g, (uint64_t)g->n_batch, (uint64_t)g->out_cap);
        }
        if (fixed + kv_pos > g->gpu_mem)
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "the GPU memory budget of %.1f MiB is too small: "
                                   "weights and scratch need %.1f MiB before any KV cache (%d sequences, batches of "
                                   "%d tokens)", g->gpu_mem / 1048576.0, fixed / 1048576.0, g->n_seq, g->n_batch);
        if (fixed + kv_pos * (uint64_t)g->n_ctx > g->gpu_mem) g->n_ctx = (int)((g->gpu_mem - fixed) / kv_pos);
        snprintf(why, sizeof why, "%d sequences x %d positions need %.1f MiB, more than the GPU memory budget of "
                 "%.1f MiB", g->n_seq, n_ctx0, want / 1048576.0, g->gpu_mem / 1048576.0);
    }
    if (g->n_ctx < 1)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "no room for a KV cache of %d sequences", g->n_seq);
    g->n_batch = WGLLM_MIN(g->n_batch, g->n_ctx * g->n_seq);
    g->out_cap = WGLLM_MIN(g->out_cap, g->n_batch);
    if (why[0]) {
        char *note = g->plan.note;
        const size_t cap = sizeof g->plan.note;
        int k = 0;
        if (g->n_ctx != n_ctx0) k += snprintf(note + k, cap - k, "context %d -> %d positions, ", n_ctx0, g->n_ctx);
        if (g->n_batch != n_batch0 && k < (int)cap)
            k += snprintf(note + k, cap - k, "batches %d -> %d tokens, ", n_batch0, g->n_batch);
        if (g->out_cap != WGLLM_MIN(out0, n_batch0) && k < (int)cap)
            k += snprintf(note + k, cap - k, "output rows per pass %d -> %d, ", WGLLM_MIN(out0, n_batch0), g->out_cap);
        if (k < (int)cap) snprintf(note + k, cap - k, "because %s", why);
        wgllm_log(WGLLM_LOG_WARN, "webgpu: %s", note);
    }
    g->plan.n_ctx = g->n_ctx;
    g->plan.n_ctx_requested = n_ctx0;
    g->plan.n_seq = g->n_seq;
    g->plan.n_batch = g->n_batch;
    g->plan.estimate = fixed + kv_pos * (uint64_t)g->n_ctx;
    return WGLLM_STATUS_OK;
}

/* Formats first (wgllm_webgpu_ctx_create): no device is opened for a model
 * the kernels cannot run. */
bool wgllm_webgpu_formats_ok(const struct wgllm_model *model, char *why, size_t cap) {
    bool ok = weight_ok(&model->tok_embd, WGLLM_KERNEL_GET_ROWS, why, cap) &&
              weight_ok(&model->output, WGLLM_KERNEL_MATVEC, why, cap);
    for (int il = 0; ok && il < model->hp.n_layer; il++) {
        const struct wgllm_layer *L = &model->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; ok && j < 7; j++) ok = weight_ok(ws[j], WGLLM_KERNEL_MATVEC, why, cap);
    }
    return ok;
}

/* The plan, then every buffer in the order the upload's waits need them
 * (webgpu_internal.h). */
enum wgllm_status wgllm_webgpu_plan_alloc(struct wgllm_webgpu_ctx *g, struct vec_offsets *vo_out,
                                          struct wgllm_error *err) {
    struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const uint64_t E = hp->n_embd, F = hp->n_ff, dk = hp->head_dim_k, dv = hp->head_dim_v;
    const uint64_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    if (KD % 2 || VD % 2 || dk % 2)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: odd K/V widths (%llu, %llu) are not supported",
                               (unsigned long long)KD, (unsigned long long)VD);
    if (dk > (uint64_t)g->tune->wg_attn * g->tune->attn_max_dims || dv > (uint64_t)g->tune->wg_attn * g->tune->attn_max_dims)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: head dims %llu/%llu exceed the attention kernel's %u",
                               (unsigned long long)dk, (unsigned long long)dv, g->tune->wg_attn * g->tune->attn_max_dims);
    const uint64_t V = hp->n_vocab;
    g->out_cap = (int)WGLLM_MAX((uint64_t)g->n_seq, OUT_BYTES / (V * 4));
    enum wgllm_status st = fit_plan(g, err);
    if (st) return st;
    const uint64_t B = (uint64_t)g->n_batch, OC = (uint64_t)g->out_cap;

    /* small buffers first: the step buffer and readback are needed by the upload's waits */
    g->step = wgllm_webgpu_gbuf(g, 4 * B * 4, WGLLM_GPU_STORAGE, "step", &g->plan.params, err);
    g->readback = g->step ? wgllm_webgpu_gbuf(g, OC * WGLLM_MAX(V, E) * 4, WGLLM_GPU_READBACK, "output readback", &g->plan.logits, err) : NULL;
    for (int i = 0; i < 2 && g->readback; i++)
        if (!(g->id_rb[i] = wgllm_webgpu_gbuf(g, 16, WGLLM_GPU_READBACK, "id readback", &g->plan.params, err))) g->readback = NULL;
    if (!g->readback) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    g->samp_in = wgllm_webgpu_gbuf(g, OC * 8 * 4, WGLLM_GPU_STORAGE, "sample rows in", &g->plan.params, err);
    g->samp_out = g->samp_in ? wgllm_webgpu_gbuf(g, OC * 2 * 4, WGLLM_GPU_STORAGE, "sample rows out", &g->plan.params, err) : NULL;
    g->samp_mask_words = (uint32_t)((V + 31) / 32);
    g->samp_mask = g->samp_out ? wgllm_webgpu_gbuf(g, OC * g->samp_mask_words * 4, WGLLM_GPU_STORAGE, "sample rows mask",
                                                   &g->plan.params, err)
                               : NULL;
    if (!g->samp_mask) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    g->samp_host = calloc(OC * 8, sizeof(uint32_t));
    g->samp_row = calloc(OC, sizeof(int));
    if (!g->samp_host || !g->samp_row) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    g->step_host = calloc(4 * B, sizeof(uint32_t));
    g->rope_host = wgllm_malloc_array((uint64_t)B * (uint64_t)hp->n_rot, sizeof(float)); /* NULL past size_t (wasm32) */
    if (!g->step_host || !g->rope_host)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    wgllm_gpu_buffer_write(g->gpu, g->step, 0, g->step_host, 4 * B * 4);

    /* weights */
    uint64_t pending = 0;
    g->n_w = 7 * hp->n_layer + 2;
    g->w = calloc((size_t)g->n_w, sizeof *g->w);
    g->kc = calloc((size_t)hp->n_layer, sizeof *g->kc);
    g->vc = calloc((size_t)hp->n_layer, sizeof *g->vc);
    if (!g->w || !g->kc || !g->vc) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int il = 0; il < hp->n_layer && !st; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 7 && !st; j++) st = plan_weight(g, ws[j], &g->w[7 * il + j], &pending, err);
    }
    if (!st) st = plan_weight(g, &m->tok_embd, &g->w[7 * hp->n_layer], &pending, err);
    if (st) return st;
    if (m->output.tensor == m->tok_embd.tensor && m->output.type == m->tok_embd.type)
        g->w[7 * hp->n_layer + 1] = g->w[7 * hp->n_layer]; /* tied: the same buffers */
    else if ((st = plan_weight(g, &m->output, &g->w[7 * hp->n_layer + 1], &pending, err)))
        return st;
    free(g->staging);
    g->staging = NULL;

    /* vectors: one buffer, offsets in floats */
    if (hp->n_layer > 512) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: %d layers (at most 512)", hp->n_layer);
    uint32_t *offs = calloc((size_t)hp->n_layer * 7, sizeof(uint32_t));
    if (!offs) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    struct vec_offsets vo = {offs, offs + hp->n_layer, offs + 2 * hp->n_layer, offs + 3 * hp->n_layer,
                             offs + 4 * hp->n_layer, offs + 5 * hp->n_layer, offs + 6 * hp->n_layer, 0};
    /* what goes where: up to 7 vectors per layer and the output norm; on the
     * heap, as 7 * 512 + 1 of them would take 86 KB of stack */
    struct vec_src {
        uint32_t *off;
        const float *data;
        uint64_t n;
    } *vl = calloc((size_t)hp->n_layer * 7 + 1, sizeof *vl);
    if (!vl) {
        free(offs);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int nv = 0;
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const float *d[7] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm};
        const uint64_t n[7] = {E, E, QD, KD, VD, dk, dk};
        uint32_t *o[7] = {&vo.attn_norm[il], &vo.ffn_norm[il], &vo.bq[il], &vo.bk[il], &vo.bv[il], &vo.q_norm[il],
                          &vo.k_norm[il]};
        for (int j = 0; j < 7; j++)
            if (d[j]) vl[nv++] = (struct vec_src){o[j], d[j], n[j]};
    }
    vl[nv++] = (struct vec_src){&vo.output_norm, m->output_norm, E};
    for (int i = 0; i < nv; i++) *vl[i].off = (uint32_t)total, total += vl[i].n;
    g->vecs = wgllm_webgpu_gbuf(g, total * 4, WGLLM_GPU_STORAGE, "vectors", &g->plan.vectors, err);
    for (int i = 0; g->vecs && i < nv && !st; i++) st = upload(g, g->vecs, *vl[i].off * 4ull, vl[i].data, vl[i].n * 4, &pending, err);
    free(vl);
    if (!g->vecs || st) {
        free(offs);
        return st ? st : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }

    /* KV cache and activations */
    const uint64_t rows = (uint64_t)g->n_seq * g->n_ctx;
    for (int il = 0; il < hp->n_layer; il++) {
        g->kc[il] = wgllm_webgpu_gbuf(g, rows * KD * 2, WGLLM_GPU_STORAGE, "k cache", &g->plan.kv_cache, err);
        g->vc[il] = g->kc[il] ? wgllm_webgpu_gbuf(g, rows * VD * 2, WGLLM_GPU_STORAGE, "v cache", &g->plan.kv_cache, err) : NULL;
        if (!g->vc[il]) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->shift_tmp = wgllm_webgpu_gbuf(g, (uint64_t)g->n_ctx * WGLLM_MAX(KD, VD) * 2, WGLLM_GPU_STORAGE, "shift scratch",
                        &g->plan.kv_cache, err);
    g->shift_bg = calloc((size_t)hp->n_layer, sizeof *g->shift_bg);
    if (!g->shift_tmp || !g->shift_bg) {
        free(offs);
        return g->shift_tmp ? wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory")
                            : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    const bool qk_norm = m->layers[0].q_norm != NULL;
    struct {
        struct wgllm_gpu_buffer **b;
        uint64_t n;
        const char *name;
    } acts[] = {{&g->x, B * E, "x"},       {&g->xn, B * E, "xn"},   {&g->q, B * QD, "q"},   {&g->k, B * KD, "k"},
                {&g->v, B * VD, "v"},      {&g->att, B * OD, "att"}, {&g->tmp, B * E, "tmp"}, {&g->gate, B * F, "gate"},
                {&g->up, B * F, "up"},     {&g->ffh, B * F, "ffh"},  {&g->qr, qk_norm ? B * QD : 0, "qr"},
                {&g->kr, qk_norm ? B * KD : 0, "kr"}, {&g->xr, B * WGLLM_MAX(WGLLM_MAX(E, F), OD), "xr"},
                {&g->xo, OC * E, "xo"},   {&g->att_o, OC * OD, "att_o"}};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        if (!acts[i].n) continue;
        *acts[i].b = wgllm_webgpu_gbuf(g, acts[i].n * 4, WGLLM_GPU_STORAGE, acts[i].name, &g->plan.activations, err);
        if (!*acts[i].b) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->logits = wgllm_webgpu_gbuf(g, OC * V * 4, WGLLM_GPU_STORAGE, "logits", &g->plan.logits, err);
    g->rope_cs = g->logits ? wgllm_webgpu_gbuf(g, B * hp->n_rot * 4, WGLLM_GPU_STORAGE, "rope cos/sin", &g->plan.params, err) : NULL;
    if (!g->rope_cs) {
        free(offs);
        return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    *vo_out = vo; /* the caller frees vo_out->attn_norm (all the offsets) */
    return WGLLM_STATUS_OK;
}
