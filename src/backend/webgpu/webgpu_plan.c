/*
 * webgpu_plan.c - the WebGPU backend's memory plan and buffers
 * (webgpu_internal.h): the plan fitted to the device's limits and the
 * caller's budget before anything is allocated (wgllm_webgpu_plan_sizes, webgpu_plan.h: n_batch, the
 * output rows per pass and n_ctx shrink, with a note saying why), then
 * every buffer: the weights (split by rows where a tensor exceeds a binding;
 * uploaded from the mapped file, or streamed from it through one bounded
 * staging block), the f32 vectors in one buffer, the KV cache, the
 * activations and output rows, the step, readback and sampling buffers.
 *
 * KV cache: per layer one f16 K buffer and one V buffer, each [n_seq][n_ctx]
 * rows of n_head_kv * head_dim ([n_seq][ring] on a sliding-window layer
 * with a ring, backend/kv_window.h), and a scratch of one layer's n_ctx rows
 * for the context shift. An encoder (bert) has none: its attention reads
 * the pass's own k and v (webgpu_encoder.c), its outputs are n_embd-wide
 * hidden states of up to every row of the pass (no logits), and its
 * position table sits in the output's place.
 */
#include "backend/webgpu/webgpu_internal.h"
#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/kv_window.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPLOAD_CHUNK ((size_t)16 << 20)       /* bytes per queue write */
#define UPLOAD_SYNC_BYTES ((uint64_t)64 << 20) /* queued bytes before waiting: bounds Dawn's staging */
#define OUT_BYTES ((uint64_t)16 << 20)         /* logits rows one pass keeps on the GPU (at least n_seq rows) */
#define GELU_TABLE_BYTES ((uint64_t)65536 * 2)  /* GeGLU's table: an f16 per f16 input */

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

/* ---- sizes (webgpu_plan.h) ------------------------------------------------
 * Saturating 64-bit arithmetic: a result past 2^64 stays UINT64_MAX, which
 * exceeds every device limit and every budget, so an overflow can only end
 * in an error naming the quantity, never in a small wrapped size. */
#define SAT UINT64_MAX
static uint64_t smul(uint64_t a, uint64_t b) {
    uint64_t r;
    return wgllm_mul_overflow(a, b, &r) ? SAT : r;
}
static uint64_t sadd(uint64_t a, uint64_t b) {
    uint64_t r;
    return wgllm_add_overflow(a, b, &r) ? SAT : r;
}
static uint64_t smul3(uint64_t a, uint64_t b, uint64_t c) { return smul(smul(a, b), c); }
static uint64_t round16(uint64_t b) { return b > SAT - 15 ? SAT : (b + 15) & ~(uint64_t)15; }
static uint64_t sceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/* A byte count for messages: saturated ones overflowed. */
static const char *bytes_str(uint64_t v, char *buf, size_t cap) {
    if (v == SAT) snprintf(buf, cap, "more than 2^64");
    else snprintf(buf, cap, "%llu", (unsigned long long)v);
    return buf;
}

const char *const wgllm_webgpu_act_names[WGLLM_ACT_COUNT] = {"x",  "xn",  "q",   "k",  "v",  "att", "tmp",  "gate",
                                                              "up", "ffh", "qr", "kr", "xr", "xo",  "att_o"};

void wgllm_webgpu_limits_of(const struct wgllm_gpu_info *info, const struct wgllm_wgsl_tune *tune,
                            struct wgllm_webgpu_limits *lim) {
    *lim = (struct wgllm_webgpu_limits){.max_buffer_size = info->max_buffer_size,
                                        .max_storage_binding_size = info->max_storage_binding_size,
                                        .max_workgroups_per_dim = info->max_workgroups_per_dim,
                                        .max_wg_storage = info->max_workgroup_storage,
                                        .wg_elem = tune->wg_elem,
                                        .rows_matvec = tune->rows_matvec,
                                        .wg_attn = tune->wg_attn,
                                        .attn_max_dims = tune->attn_max_dims};
    /* WGLLM_WEBGPU_MAX_WEIGHT_BYTES: a smaller piece size, so that the split
     * path runs (tests) or a browser's 128 MiB limit is mimicked natively */
    const char *cap = getenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES");
    if (cap) lim->max_weight_bytes = strtoull(cap, NULL, 10);
    /* WGLLM_WEBGPU_MAX_WG_STORAGE: less workgroup memory, so that a
     * mat-vec prologue that does not fit falls back (tests), as on a
     * device with WebGPU's 16 KiB minimum */
    const char *wgs = getenv("WGLLM_WEBGPU_MAX_WG_STORAGE");
    if (wgs && strtoull(wgs, NULL, 10) < lim->max_wg_storage) lim->max_wg_storage = (uint32_t)strtoull(wgs, NULL, 10);
}

/* Rows per piece: within the binding size and the dispatch limit of the
 * mat-vec (rows_matvec rows per workgroup), and whole u32 words. */
enum wgllm_status wgllm_webgpu_weight_rows(const struct wgllm_webgpu_limits *lim, const struct wgllm_weight *w,
                                           int64_t *max_rows_out, int *n_pieces_out, struct wgllm_error *err) {
    if (w->ne0 < 1 || w->ne1 < 1 || w->row_size < 1)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "WebGPU: tensor %s has %lld x %lld elements in rows of %zu bytes: nothing to plan",
                               w->name, (long long)w->ne0, (long long)w->ne1, w->row_size);
    uint64_t max_bytes = WGLLM_MIN(lim->max_storage_binding_size, lim->max_buffer_size);
    if (lim->max_weight_bytes > 0) max_bytes = WGLLM_MIN(max_bytes, lim->max_weight_bytes);
    uint64_t max_rows = max_bytes / w->row_size;
    const uint64_t disp_rows = (uint64_t)lim->max_workgroups_per_dim * lim->rows_matvec;
    /* a stack of experts splits only between experts (MATVEC_ID and MATMUL_ID offset rows by the expert) */
    const uint64_t unit = w->n_expert > 0 ? (uint64_t)w->ne1 / (uint64_t)w->n_expert : 1;
    if (w->n_expert > 0 && (unit < 1 || (uint64_t)w->ne1 % (uint64_t)w->n_expert))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: expert stack %s: %lld rows are not %d "
                               "experts of equal rows", w->name, (long long)w->ne1, w->n_expert);
    if (w->n_expert <= 0 && disp_rows < max_rows) max_rows = disp_rows;
    max_rows -= max_rows % unit;
    while (max_rows >= unit && max_rows > 1 && (max_rows * (uint64_t)w->row_size) % 4) max_rows -= unit; /* no overflow: <= max_bytes */
    if (w->n_expert > 0 && max_rows < unit)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: expert stack %s: one expert of %llu rows of %zu "
                               "bytes does not fit the device's storage binding size %llu", w->name,
                               (unsigned long long)unit, w->row_size, (unsigned long long)max_bytes);
    if (max_rows < 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s: a row of %zu bytes exceeds the device's "
                               "storage binding size %llu", w->name, w->row_size, (unsigned long long)max_bytes);
    /* rounded up without ne1 + max_rows - 1, which a hostile ne1 overflows */
    const uint64_t n_pieces = ((uint64_t)w->ne1 - 1) / max_rows + 1;
    if (n_pieces > MAX_PIECES) /* checked before it is stored: ctx_free walks n_pieces */
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s needs %llu pieces of at most %llu rows (limit %d)",
                               w->name, (unsigned long long)n_pieces, (unsigned long long)max_rows, MAX_PIECES);
    *max_rows_out = (int64_t)max_rows; /* < ne1 * MAX_PIECES or ne1 itself: fits */
    *n_pieces_out = (int)n_pieces;
    return WGLLM_STATUS_OK;
}

static const struct wgllm_weight *layer_weight(const struct wgllm_layer *L, int j) {
    const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return ws[j];
}

/* The model's widths in 64 bits (each >= 1 once check_hparams passed). */
struct widths {
    uint64_t E, F, V, dk, dv, QD, KD, VD, OD, rot, n_layer, n_head;
};

static struct widths widths_of(const struct wgllm_hparams *hp) {
    const uint64_t dk = (uint64_t)hp->head_dim_k, dv = (uint64_t)hp->head_dim_v;
    return (struct widths){.E = (uint64_t)hp->n_embd, .F = (uint64_t)hp->n_ff, .V = (uint64_t)hp->n_vocab, .dk = dk,
                           .dv = dv, .QD = (uint64_t)hp->n_head * dk, .KD = (uint64_t)hp->n_head_kv * dk,
                           .VD = (uint64_t)hp->n_head_kv * dv, .OD = (uint64_t)hp->n_head * dv,
                           .rot = (uint64_t)hp->n_rot, .n_layer = (uint64_t)hp->n_layer, .n_head = (uint64_t)hp->n_head};
}

uint64_t wgllm_webgpu_sink_stride(const struct wgllm_model *m) {
    return ((uint64_t)m->hp.n_head * 4 + 255) & ~(uint64_t)255;
}

/* A layer's f32 vectors in the order the vectors buffer holds them (NULL:
 * absent) and their lengths: olmo2's q/k norms span the whole projection;
 * the next seven an encoder's (bert's other biases and LayerNorms), the
 * last four gpt-oss's router and expert biases (each expert's in turn). */
#define LAYER_VECS 20
static void layer_vectors(const struct wgllm_model *m, const struct wgllm_layer *L, const struct widths *w,
                          const float *d[LAYER_VECS], uint64_t n[LAYER_VECS]) {
    const bool whole = m->hp.qk_norm_whole;
    const float *dd[LAYER_VECS] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm,
                                   L->post_attn_norm, L->post_ffn_norm, L->bo, L->b_up, L->b_down,
                                   L->attn_out_norm, L->attn_out_norm_b, L->layer_out_norm, L->layer_out_norm_b,
                                   L->b_gate_inp, L->b_gate_exps, L->b_up_exps, L->b_down_exps};
    const uint64_t X = m->hp.n_expert > 0 ? (uint64_t)m->hp.n_expert : 0, FE = m->hp.n_ff_exp > 0 ? (uint64_t)m->hp.n_ff_exp : 0;
    const uint64_t nn[LAYER_VECS] = {w->E, w->E, w->QD, w->KD, w->VD, whole ? w->QD : w->dk, whole ? w->KD : w->dk,
                                     w->E, w->E, w->E, w->F, w->E, w->E, w->E, w->E, w->E,
                                     X, smul(X, FE), smul(X, FE), smul(X, w->E)};
    for (int j = 0; j < LAYER_VECS; j++) d[j] = dd[j], n[j] = nn[j];
}

/* GeGLU models and bert (its FFN's GELU; nomic-bert's SwiGLU has a gate) look GELU up in the CPU's table. */
static bool needs_gelu_table(const struct wgllm_model *m) {
    return m->hp.ffn_act == WGLLM_FFN_GELU || (m->hp.encoder && !m->layers[0].w_gate.tensor);
}

/* GPU bytes of everything but the KV cache, as create() allocates it, for
 * batches of B tokens and OC output rows (an upper bound: the vectors and
 * the parameter arena are counted generously). Saturates. */
static uint64_t plan_fixed(const struct wgllm_model *m, const struct widths *w, uint64_t B, uint64_t OC) {
    /* an encoder's output rows are hidden states: no logits, no sampling */
    const uint64_t E = w->E, F = w->F, V = m->hp.encoder ? 0 : w->V, QD = w->QD, KD = w->KD, VD = w->VD, OD = w->OD;
    uint64_t fixed = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        for (int j = 0; j < 7; j++) {
            const struct wgllm_weight *wt = layer_weight(&m->layers[il], j);
            fixed = sadd(fixed, round16(smul(wt->row_size, (uint64_t)wt->ne1)));
        }
        const float *d[LAYER_VECS];
        uint64_t n[LAYER_VECS];
        layer_vectors(m, &m->layers[il], w, d, n);
        /* vectors, at most: the llama block's seven counted whether present or
         * not (as plans always were), the post-norms where the layer has them */
        for (int j = 0; j < LAYER_VECS; j++)
            if (j < 7 || d[j]) fixed = sadd(fixed, smul(n[j], 4));
    }
    fixed = sadd(fixed, wgllm_webgpu_moe_weight_bytes(m)); /* the router and shared experts */
    if (m->layers[0].attn_sinks) fixed = sadd(fixed, smul(w->n_layer, wgllm_webgpu_sink_stride(m)));
    fixed = sadd(fixed, round16(smul(m->tok_embd.row_size, (uint64_t)m->tok_embd.ne1)));
    /* an encoder's position table (where the output would be) and its embeddings' vectors */
    if (m->pos_embd.tensor) fixed = sadd(fixed, round16(smul(m->pos_embd.row_size, (uint64_t)m->pos_embd.ne1)));
    if (m->hp.encoder) fixed = sadd(fixed, smul(3 * E, 4));
    if (m->output.tensor != m->tok_embd.tensor)
        fixed = sadd(fixed, round16(smul(m->output.row_size, (uint64_t)m->output.ne1)));
    uint64_t per_tok = 0; /* floats per token of the activations, the rope table and the step words */
    const uint64_t terms[] = {smul(2, E), QD, KD, VD, OD, E, smul(3, F), m->layers[0].q_norm ? sadd(QD, KD) : 0,
                              WGLLM_MAX(WGLLM_MAX(E, F), OD), w->rot, wgllm_model_has_swa_rope(m) ? w->rot : 0, 4,
                              wgllm_webgpu_moe_tok_floats(m)};
    for (size_t i = 0; i < sizeof terms / sizeof *terms; i++) per_tok = sadd(per_tok, terms[i]);
    fixed = sadd(fixed, smul3(B, per_tok, 4));
    /* outputs, readback, parameter arena; the sampled rows' words (8 in, 2 out) and grammar mask (a bit per token) */
    fixed = sadd(fixed, smul3(OC, sadd(sadd(smul(2, E), OD), V), 4));
    fixed = sadd(fixed, smul3(OC, 10 + (V + 31) / 32, 4));
    fixed = sadd(fixed, sadd(smul3(OC, WGLLM_MAX(V, E), 4), 64 * 1024));
    if (needs_gelu_table(m)) fixed = sadd(fixed, GELU_TABLE_BYTES);
    return fixed;
}

static enum wgllm_status check_hparams(const struct wgllm_model *m, const struct wgllm_webgpu_limits *lim,
                                       const struct wgllm_webgpu_sizes *sz, struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &m->hp;
    const struct {
        const char *name;
        int v;
    } need[] = {{"n_embd", hp->n_embd},       {"n_head", hp->n_head},         {"n_head_kv", hp->n_head_kv},
                {"head_dim_k", hp->head_dim_k}, {"head_dim_v", hp->head_dim_v}, {"n_ff", hp->n_ff},
                {"n_vocab", hp->n_vocab},     {"n_layer", hp->n_layer}};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (need[i].v < 1)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: the model's %s is %d (at least 1)",
                                   need[i].name, need[i].v);
    /* also bounds 7 * n_layer + 2 weights and the vector offsets' table */
    if (hp->n_layer > 512) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: %d layers (at most 512)", hp->n_layer);
    if (hp->n_rot < 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: the model's n_rot is %d", hp->n_rot);
    const struct {
        const char *name;
        int v;
    } req[] = {{"n_ctx", sz->n_ctx}, {"n_seq", sz->n_seq}, {"n_batch", sz->n_batch}};
    for (size_t i = 0; i < sizeof req / sizeof *req; i++)
        if (req[i].v < 1)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: %s %d (at least 1)", req[i].name, req[i].v);
    if (lim->wg_elem < 1 || lim->rows_matvec < 1 || lim->max_workgroups_per_dim < 1)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: a tune or device limit of 0 (wg_elem %u, "
                               "rows_matvec %u, workgroups per dimension %u)", lim->wg_elem, lim->rows_matvec,
                               lim->max_workgroups_per_dim);
    const struct widths w = widths_of(hp);
    if (w.KD % 2 || w.VD % 2 || w.dk % 2)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: odd K/V widths (%llu, %llu) are not supported",
                               (unsigned long long)w.KD, (unsigned long long)w.VD);
    const uint64_t attn = (uint64_t)lim->wg_attn * lim->attn_max_dims;
    if (w.dk > attn || w.dv > attn)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: head dims %llu/%llu exceed the attention kernel's %llu",
                               (unsigned long long)w.dk, (unsigned long long)w.dv, (unsigned long long)attn);
    /* every weight's pieces, before anything is allocated */
    int64_t rows;
    int pieces;
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (int il = 0; il < hp->n_layer && !st; il++)
        for (int j = 0; j < 7 && !st; j++)
            if (layer_weight(&m->layers[il], j)->tensor) /* an encoder without a gate (bert) */
                st = wgllm_webgpu_weight_rows(lim, layer_weight(&m->layers[il], j), &rows, &pieces, err);
    if (!st) st = wgllm_webgpu_weight_rows(lim, &m->tok_embd, &rows, &pieces, err);
    /* an encoder has no output; its position table goes in the output's place */
    const struct wgllm_weight *last = hp->encoder ? &m->pos_embd : &m->output;
    if (!st && last->tensor) st = wgllm_webgpu_weight_rows(lim, last, &rows, &pieces, err);
    if (!st) st = wgllm_webgpu_moe_check(m, lim, err);
    return st;
}

/* Floats of every f32 vector the vectors buffer holds (as plan_alloc lays them out). */
static uint64_t vector_floats(const struct wgllm_model *m, const struct widths *w) {
    uint64_t total = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const float *d[LAYER_VECS];
        uint64_t n[LAYER_VECS];
        layer_vectors(m, &m->layers[il], w, d, n);
        for (int j = 0; j < LAYER_VECS; j++)
            if (d[j]) total = sadd(total, n[j]);
    }
    /* the output norm; an encoder's embedding norm (weight, bias) and token type row instead */
    return sadd(total, m->hp.encoder ? smul(3, w->E) : w->E);
}

/* Fits the plan to the device and the budget before anything is allocated:
 * n_batch shrinks so that an activation of the batch fits one binding;
 * n_ctx so that a layer's K or V cache of all sequences fits one binding
 * (and the cache rows of all sequences stay 32-bit indices). With a budget
 * (gpu_mem), the output rows per pass and then n_batch shrink first (down to
 * n_seq rows and 32 tokens: they cost speed, not results) while the budget
 * cannot hold min(n_ctx, 256) positions, then n_ctx shrinks to what the
 * budget holds. Says what changed and why (sz->note). Then every buffer is
 * sized and checked against the device's limits. */
enum wgllm_status wgllm_webgpu_plan_sizes(const struct wgllm_model *m, const struct wgllm_webgpu_limits *lim,
                                          struct wgllm_webgpu_sizes *sz, struct wgllm_error *err) {
    sz->note[0] = 0;
    enum wgllm_status st = check_hparams(m, lim, sz, err);
    if (st) return st;
    const struct wgllm_hparams *hp = &m->hp;
    const struct widths w = widths_of(hp);
    const uint64_t E = w.E, F = w.F, V = w.V, QD = w.QD, KD = w.KD, VD = w.VD, OD = w.OD;
    const uint64_t max_bind = WGLLM_MIN(lim->max_storage_binding_size, lim->max_buffer_size);
    char why[160] = "", b1[32];
    /* An encoder (bert) keeps no KV cache and has no logits: its outputs
     * are hidden states of the pass's own rows, every one of which may be
     * wanted (a sequence must come whole in one pass, so its outputs cannot
     * be split over passes). */
    const bool enc = hp->encoder;
    /* output rows one pass keeps: OUT_BYTES of logits, at least one per sequence */
    sz->out_cap = enc ? sz->n_batch : (int)WGLLM_MAX((uint64_t)sz->n_seq, OUT_BYTES / smul(V, 4));
    const int n_ctx0 = sz->n_ctx, n_batch0 = sz->n_batch, out0 = sz->out_cap;
    /* the logits of a pass and their readback copy within a binding, down to one row per sequence */
    const uint64_t out_row = smul(enc ? E : WGLLM_MAX(V, E), 4);
    if (smul((uint64_t)sz->out_cap, out_row) > max_bind && sz->out_cap > sz->n_seq) {
        sz->out_cap = (int)WGLLM_MAX((uint64_t)sz->n_seq, max_bind / out_row);
        snprintf(why, sizeof why, "a pass's output rows must fit the device's %llu-byte binding",
                 (unsigned long long)max_bind);
    }

    const uint64_t row_max = smul(WGLLM_MAX(WGLLM_MAX(WGLLM_MAX(E, F), WGLLM_MAX(QD, OD)),
                                            WGLLM_MAX(WGLLM_MAX(KD, VD), WGLLM_MAX(w.rot, wgllm_webgpu_moe_row_floats(m)))), 4);
    if (smul((uint64_t)sz->n_batch, row_max) > max_bind) {
        if (row_max > max_bind)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: one token's widest activation row needs %s "
                                   "bytes, the device allows %llu per binding", bytes_str(row_max, b1, sizeof b1),
                                   (unsigned long long)max_bind);
        sz->n_batch = (int)(max_bind / row_max);
        snprintf(why, sizeof why, "a batch's activations must fit the device's %llu-byte binding",
                 (unsigned long long)max_bind);
    }
    /* grids that grow with the batch along x: element-wise ops over all rows
     * (SwiGLU, the activation rounding) and one workgroup per head row */
    const uint64_t max_wg = lim->max_workgroups_per_dim;
    const uint64_t per_tok = WGLLM_MAX(WGLLM_MAX(sceil_div(F, lim->wg_elem), sceil_div(WGLLM_MAX(E, OD), smul(32, lim->wg_elem))),
                                       w.n_head);
    if (smul((uint64_t)sz->n_batch, per_tok) > max_wg) {
        if (per_tok > max_wg)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: one token's element-wise grid needs %llu "
                                   "workgroups, the device allows %llu per dimension", (unsigned long long)per_tok,
                                   (unsigned long long)max_wg);
        sz->n_batch = (int)(max_wg / per_tok);
        snprintf(why, sizeof why, "a batch's element-wise grids must fit the device's %llu workgroups per dimension",
                 (unsigned long long)max_wg);
    }
    const uint64_t kv_row = enc ? 0 : smul(WGLLM_MAX(KD, VD), 2);
    if (smul3((uint64_t)sz->n_seq, (uint64_t)sz->n_ctx, kv_row) > max_bind) {
        const uint64_t per_pos = smul(kv_row, (uint64_t)sz->n_seq);
        if (per_pos > max_bind)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: one position of a layer's K/V cache for %d "
                                   "sequences needs %s bytes, the device allows %llu per binding", sz->n_seq,
                                   bytes_str(per_pos, b1, sizeof b1), (unsigned long long)max_bind);
        sz->n_ctx = (int)(max_bind / per_pos); /* < the n_ctx asked: fits */
        snprintf(why, sizeof why, "a layer's K/V cache of %d sequences must fit the device's %llu-byte binding",
                 sz->n_seq, (unsigned long long)max_bind);
    }
    /* cache rows are u32 in the step buffer and int in the host's row arithmetic */
    if ((int64_t)sz->n_seq * sz->n_ctx > INT32_MAX) {
        sz->n_ctx = INT32_MAX / sz->n_seq;
        snprintf(why, sizeof why, "the cache rows of %d sequences must have 32-bit indices", sz->n_seq);
    }
    sz->out_cap = WGLLM_MIN(sz->out_cap, sz->n_batch);
    /* bytes per position of every slot, and of the context shift's scratch;
     * rings are fixed bytes (at the batch asked: shrinking only makes them
     * smaller, or a full cache below the ring's size, so the estimate only
     * errs high) */
    int ring = wgllm_kv_ring(m, sz->n_ctx, sz->n_batch, sz->swa_full);
    uint64_t n_local = 0;
    for (int il = 0; ring && il < hp->n_layer; il++) n_local += m->layers[il].swa;
    const uint64_t kv_pos = enc ? 0 : sadd(smul3(w.n_layer - n_local, (uint64_t)sz->n_seq, smul(sadd(KD, VD), 2)), kv_row);
    const uint64_t ring_bytes = smul3(n_local, smul((uint64_t)sz->n_seq, (uint64_t)ring), smul(sadd(KD, VD), 2));
    uint64_t fixed = sadd(plan_fixed(m, &w, (uint64_t)sz->n_batch, (uint64_t)sz->out_cap), ring_bytes);
    if (sz->gpu_mem && sadd(fixed, smul(kv_pos, (uint64_t)sz->n_ctx)) > sz->gpu_mem) {
        const uint64_t want = sadd(fixed, smul(kv_pos, (uint64_t)sz->n_ctx));
        const int min_ctx = WGLLM_MIN(sz->n_ctx, 256);
        while (sadd(fixed, smul(kv_pos, (uint64_t)min_ctx)) > sz->gpu_mem && (sz->out_cap > sz->n_seq || sz->n_batch > 32)) {
            if (sz->out_cap > sz->n_seq) sz->out_cap = WGLLM_MAX(sz->n_seq, sz->out_cap / 2);
            else sz->n_batch = WGLLM_MAX(32, sz->n_batch / 2), sz->out_cap = WGLLM_MIN(sz->out_cap, sz->n_batch);
            fixed = sadd(plan_fixed(m, &w, (uint64_t)sz->n_batch, (uint64_t)sz->out_cap), ring_bytes);
        }
        if (sadd(fixed, kv_pos) > sz->gpu_mem)
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "the GPU memory budget of %.1f MiB is too small: "
                                   "weights and scratch need %.1f MiB before any KV cache (%d sequences, batches of "
                                   "%d tokens)", sz->gpu_mem / 1048576.0, fixed / 1048576.0, sz->n_seq, sz->n_batch);
        if (sadd(fixed, smul(kv_pos, (uint64_t)sz->n_ctx)) > sz->gpu_mem)
            sz->n_ctx = (int)((sz->gpu_mem - fixed) / kv_pos); /* < the n_ctx asked: fits */
        snprintf(why, sizeof why, "%d sequences x %d positions need %.1f MiB, more than the GPU memory budget of "
                 "%.1f MiB", sz->n_seq, n_ctx0, want / 1048576.0, sz->gpu_mem / 1048576.0);
    }
    if (sz->n_ctx < 1)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "no room for a KV cache of %d sequences", sz->n_seq);
    sz->n_batch = (int)WGLLM_MIN((int64_t)sz->n_batch, (int64_t)sz->n_ctx * sz->n_seq);
    sz->out_cap = WGLLM_MIN(sz->out_cap, sz->n_batch);
    if (enc) { /* every row of a pass may be an output; a sequence is at most one pass */
        sz->out_cap = sz->n_batch;
        sz->n_ctx = WGLLM_MIN(sz->n_ctx, sz->n_batch);
    }
    if (why[0]) {
        char *note = sz->note;
        const size_t cap = sizeof sz->note;
        int k = 0;
        if (sz->n_ctx != n_ctx0) k += snprintf(note + k, cap - k, "context %d -> %d positions, ", n_ctx0, sz->n_ctx);
        if (sz->n_batch != n_batch0 && k < (int)cap)
            k += snprintf(note + k, cap - k, "batches %d -> %d tokens, ", n_batch0, sz->n_batch);
        if (sz->out_cap != WGLLM_MIN(out0, n_batch0) && k < (int)cap)
            k += snprintf(note + k, cap - k, "output rows per pass %d -> %d, ", WGLLM_MIN(out0, n_batch0), sz->out_cap);
        if (k < (int)cap) snprintf(note + k, cap - k, "because %s", why);
    }
    /* the ring of what was planned */
    sz->ring = ring = wgllm_kv_ring(m, sz->n_ctx, sz->n_batch, sz->swa_full);
    n_local = 0;
    for (int il = 0; ring && il < hp->n_layer; il++) n_local += m->layers[il].swa;
    sz->estimate = sadd(sadd(plan_fixed(m, &w, (uint64_t)sz->n_batch, (uint64_t)sz->out_cap),
                             smul3(n_local, smul((uint64_t)sz->n_seq, (uint64_t)ring), smul(sadd(KD, VD), 2))),
                        enc ? 0 : smul(sadd(smul3(w.n_layer - n_local, (uint64_t)sz->n_seq, smul(sadd(KD, VD), 2)), kv_row),
                                       (uint64_t)sz->n_ctx));
    /* each buffer is checked below; their sum (weights of 16 pieces past a
     * binding each, say) must not wrap either */
    if (sz->estimate == SAT)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: the plan needs more than 2^64 bytes (weights, "
                               "KV cache and scratch of %d sequences x %d positions)", sz->n_seq, sz->n_ctx);

    /* every buffer, as plan_alloc creates it */
    const uint64_t B = (uint64_t)sz->n_batch, OC = (uint64_t)sz->out_cap, rows = (uint64_t)sz->n_seq * sz->n_ctx;
    const bool qk_norm = m->layers[0].q_norm != NULL;
    /* tokens, cache rows, lengths, output rows, query temperatures, and the
     * ring rows only with a ring: other models plan as before */
    const uint64_t step_regions = ring ? WGLLM_STEP_REGIONS : WGLLM_STEP_REGIONS - 1;
    sz->step = smul3(step_regions, B, 4);
    sz->readback = smul(OC, out_row);
    sz->samp_in = smul3(OC, 8, 4);
    sz->samp_out = smul3(OC, 2, 4);
    sz->samp_mask = enc ? 0 : smul3(OC, (V + 31) / 32, 4); /* a grammar's allowed tokens, one bit each, per output row */
    const uint64_t n_vec = vector_floats(m, &w);
    if (n_vec > UINT32_MAX) /* the kernels address the vectors by u32 float offsets */
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: the model's vectors hold %s floats, more than "
                               "32-bit offsets reach", bytes_str(n_vec, b1, sizeof b1));
    sz->vectors = smul(n_vec, 4);
    sz->k_cache = enc ? 0 : smul3(rows, KD, 2);
    sz->v_cache = enc ? 0 : smul3(rows, VD, 2);
    sz->k_ring = ring ? smul3(smul((uint64_t)sz->n_seq, (uint64_t)ring), KD, 2) : sz->k_cache;
    sz->v_ring = ring ? smul3(smul((uint64_t)sz->n_seq, (uint64_t)ring), VD, 2) : sz->v_cache;
    sz->shift = enc ? 0 : smul3((uint64_t)sz->n_ctx, WGLLM_MAX(KD, VD), 2);
    const uint64_t act_rows[WGLLM_ACT_COUNT] = {
        [WGLLM_ACT_X] = smul(B, E),    [WGLLM_ACT_XN] = smul(B, E),   [WGLLM_ACT_Q] = smul(B, QD),
        [WGLLM_ACT_K] = smul(B, KD),   [WGLLM_ACT_V] = smul(B, VD),   [WGLLM_ACT_ATT] = smul(B, OD),
        [WGLLM_ACT_TMP] = smul(B, E),  [WGLLM_ACT_GATE] = smul(B, F), [WGLLM_ACT_UP] = smul(B, F),
        [WGLLM_ACT_FFH] = smul(B, F),  [WGLLM_ACT_QR] = qk_norm ? smul(B, QD) : 0,
        [WGLLM_ACT_KR] = qk_norm ? smul(B, KD) : 0, [WGLLM_ACT_XR] = smul(B, WGLLM_MAX(WGLLM_MAX(E, F), OD)),
        [WGLLM_ACT_XO] = enc ? 0 : smul(OC, E),  [WGLLM_ACT_ATT_O] = enc ? 0 : smul(OC, OD)};
    for (int i = 0; i < WGLLM_ACT_COUNT; i++) sz->act[i] = smul(act_rows[i], 4);
    sz->logits = enc ? 0 : smul3(OC, V, 4);
    /* the local layers' table at the next 256-byte boundary (a binding offset of the context shift) */
    const uint64_t rope_bytes = smul3(B, w.rot, 4);
    const bool swa_rope = wgllm_model_has_swa_rope(m);
    sz->rope_swa_off = swa_rope ? (rope_bytes > SAT - 255 ? SAT : (rope_bytes + 255) & ~(uint64_t)255) : 0;
    sz->rope_cs = swa_rope ? sadd(sz->rope_swa_off, rope_bytes) : rope_bytes;
    sz->gelu_table = needs_gelu_table(m) ? GELU_TABLE_BYTES : 0;
    /* storage buffers within a binding (and a buffer); the readback only within a buffer */
    const struct {
        const char *name;
        uint64_t bytes;
        bool storage;
    } bufs[] = {{"step", sz->step, true},         {"output readback", sz->readback, false},
                {"sample rows in", sz->samp_in, true}, {"sample rows out", sz->samp_out, true},
                {"sample rows mask", sz->samp_mask, true},
                {"vectors", sz->vectors, true},   {"k cache", sz->k_cache, true},
                {"v cache", sz->v_cache, true},   {"shift scratch", sz->shift, true},
                {"logits", sz->logits, true},     {"rope cos/sin", sz->rope_cs, true}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs + WGLLM_ACT_COUNT; i++) {
        const bool is_act = i >= sizeof bufs / sizeof *bufs;
        const size_t a = i - sizeof bufs / sizeof *bufs;
        const char *name = is_act ? wgllm_webgpu_act_names[a] : bufs[i].name;
        const uint64_t bytes = is_act ? sz->act[a] : bufs[i].bytes;
        const bool storage = is_act || bufs[i].storage;
        const uint64_t limit = storage ? max_bind : lim->max_buffer_size;
        if (bytes > limit)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: the %s buffer needs %s bytes, the device "
                                   "allows %llu (%s)", name, bytes_str(bytes, b1, sizeof b1), (unsigned long long)limit,
                                   storage ? "maxStorageBufferBindingSize" : "maxBufferSize");
    }
    /* host copies: element counts whose bytes fit size_t (32 bits on wasm32) */
    const struct {
        const char *name;
        uint64_t n;
        size_t elem;
        size_t *out;
    } host[] = {{"step", smul(step_regions, B), sizeof(uint32_t), &sz->step_host},
                {"rope table", smul3(swa_rope ? 2 : 1, B, w.rot), sizeof(float), &sz->rope_host},
                {"sampled rows", smul(OC, 8), sizeof(uint32_t), &sz->samp_host},
                {"output row index", OC, sizeof(int), &sz->samp_row}};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) {
        size_t bytes;
        if (!wgllm_size_mul(host[i].n, host[i].elem, &bytes))
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "WebGPU: the host's %s copy needs %s bytes, more "
                                   "than this process can address", host[i].name,
                                   bytes_str(smul(host[i].n, host[i].elem), b1, sizeof b1));
        *host[i].out = (size_t)host[i].n;
    }
    return WGLLM_STATUS_OK;
}

/* Streams a weight's rows into its pieces (wgllm_webgpu_weight_rows). */
enum wgllm_status wgllm_webgpu_plan_weight(struct wgllm_webgpu_ctx *g, const struct wgllm_webgpu_limits *lim,
                                     const struct wgllm_weight *w, struct gweight *gw, uint64_t *pending,
                                     struct wgllm_error *err) {
    gw->type = w->type, gw->ne0 = w->ne0, gw->ne1 = w->ne1, gw->row_size = w->row_size;
    int64_t max_rows;
    int n_pieces;
    enum wgllm_status st = wgllm_webgpu_weight_rows(lim, w, &max_rows, &n_pieces, err);
    if (st) return st;
    gw->n_pieces = n_pieces;
    if (gw->n_pieces > 1) g->plan.n_split_tensors++;
    for (int p = 0; p < gw->n_pieces; p++) {
        const int64_t r0 = p * max_rows, rows = WGLLM_MIN(max_rows, w->ne1 - r0);
        /* a piece is at most a binding; the row offset is inside the tensor */
        const uint64_t off = (uint64_t)r0 * w->row_size, bytes64 = (uint64_t)rows * w->row_size;
        size_t bytes, off_sz;
        if (!wgllm_size_from_u64(bytes64, &bytes) || !wgllm_size_from_u64(off, &off_sz))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s: a piece of %llu bytes at %llu is past "
                                   "what this process can address", w->name, (unsigned long long)bytes64,
                                   (unsigned long long)off);
        gw->piece[p].row0 = r0, gw->piece[p].rows = rows;
        gw->piece[p].buf = wgllm_webgpu_gbuf(g, bytes64, WGLLM_GPU_STORAGE, w->name, &g->plan.weights, err);
        if (!gw->piece[p].buf) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        st = w->data ? upload(g, gw->piece[p].buf, 0, (const char *)w->data + off_sz, bytes, pending, err)
                     : upload_streamed(g, w, gw->piece[p].buf, off, bytes, pending, err);
        if (st) return st;
    }
    return WGLLM_STATUS_OK;
}

static bool weight_ok(const struct wgllm_weight *w, enum wgllm_kernel k, char *why, size_t cap) {
    if (wgllm_wgsl_supports(k, w->type)) return true;
    snprintf(why, cap, "tensor %s is %s, which has no WebGPU kernel yet (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0 have)", w->name,
             wgllm_type_name(w->type));
    return false;
}

/* Formats first (wgllm_webgpu_ctx_create): no device is opened for a model
 * the kernels cannot run. */
bool wgllm_webgpu_formats_ok(const struct wgllm_model *model, char *why, size_t cap) {
    /* The block features wgllm_model_extra_features lists (gemma's scales,
     * post-norms, GeGLU, soft-caps and sliding window, LongRoPE, granite's
     * scales, olmo2's norms, smollm3's layers without RoPE, mistral3's query
     * temperature) are computed by the graph (webgpu_graph.c), the encoders
     * (bert, nomic-bert) by their own list (webgpu_encoder.c), mixtures of
     * experts by webgpu_moe.c, and YaRN is in the host's RoPE table; what
     * remains to refuse is a weight format without a kernel (with -b auto
     * the CPU runs it). */
    const struct wgllm_hparams *hp = &model->hp;
    /* an encoder: a position table (bert) instead of the output */
    bool ok = weight_ok(&model->tok_embd, WGLLM_KERNEL_GET_ROWS, why, cap) &&
              (hp->encoder ? !model->pos_embd.tensor || weight_ok(&model->pos_embd, WGLLM_KERNEL_GET_ROWS, why, cap)
                           : weight_ok(&model->output, WGLLM_KERNEL_MATVEC, why, cap));
    for (int il = 0; ok && il < model->hp.n_layer; il++) {
        const struct wgllm_layer *L = &model->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; ok && j < 7; j++) ok = !ws[j]->tensor || weight_ok(ws[j], WGLLM_KERNEL_MATVEC, why, cap);
    }
    return ok && wgllm_webgpu_moe_formats_ok(model, why, cap);
}

/* The plan (wgllm_webgpu_plan_sizes), then every buffer in the order the
 * upload's waits need them (webgpu_internal.h), each of the size the plan
 * checked. */
enum wgllm_status wgllm_webgpu_plan_alloc(struct wgllm_webgpu_ctx *g, struct vec_offsets *vo_out,
                                          struct wgllm_error *err) {
    struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    struct wgllm_webgpu_limits lim;
    wgllm_webgpu_limits_of(wgllm_gpu_get_info(g->gpu), g->tune, &lim);
    struct wgllm_webgpu_sizes sz = {.n_ctx = g->n_ctx, .n_seq = g->n_seq, .n_batch = g->n_batch, .gpu_mem = g->gpu_mem,
                                    .swa_full = g->swa_full};
    enum wgllm_status st = wgllm_webgpu_plan_sizes(m, &lim, &sz, err);
    if (st) return st;
    if (sz.note[0]) wgllm_log(WGLLM_LOG_WARN, "webgpu: %s", sz.note);
    snprintf(g->plan.note, sizeof g->plan.note, "%s", sz.note);
    g->plan.budget = g->gpu_mem;
    g->plan.n_ctx_requested = g->n_ctx;
    g->n_ctx = sz.n_ctx, g->n_batch = sz.n_batch, g->out_cap = sz.out_cap;
    g->plan.n_ctx = g->n_ctx;
    g->ring = g->plan.ring = sz.ring;
    g->plan.n_seq = g->n_seq;
    g->plan.n_batch = g->n_batch;
    g->plan.estimate = sz.estimate;
    const uint64_t E = hp->n_embd;

    /* small buffers first: the step buffer and readback are needed by the upload's waits */
    g->step = wgllm_webgpu_gbuf(g, sz.step, WGLLM_GPU_STORAGE, "step", &g->plan.params, err);
    g->readback = g->step ? wgllm_webgpu_gbuf(g, sz.readback, WGLLM_GPU_READBACK, "output readback", &g->plan.logits, err) : NULL;
    for (int i = 0; i < 2 && g->readback; i++)
        if (!(g->id_rb[i] = wgllm_webgpu_gbuf(g, 16, WGLLM_GPU_READBACK, "id readback", &g->plan.params, err))) g->readback = NULL;
    if (!g->readback) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    g->samp_in = wgllm_webgpu_gbuf(g, sz.samp_in, WGLLM_GPU_STORAGE, "sample rows in", &g->plan.params, err);
    g->samp_out = g->samp_in ? wgllm_webgpu_gbuf(g, sz.samp_out, WGLLM_GPU_STORAGE, "sample rows out", &g->plan.params, err) : NULL;
    g->samp_mask_words = (uint32_t)(((uint64_t)hp->n_vocab + 31) / 32);
    g->samp_mask = g->samp_out ? wgllm_webgpu_gbuf(g, sz.samp_mask, WGLLM_GPU_STORAGE, "sample rows mask",
                                                   &g->plan.params, err)
                               : NULL;
    if (!g->samp_mask) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    /* counts the plan checked to fit size_t */
    g->samp_host = calloc(sz.samp_host, sizeof(uint32_t));
    g->samp_row = calloc(sz.samp_row, sizeof(int));
    if (!g->samp_host || !g->samp_row) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    g->step_host = calloc(sz.step_host, sizeof(uint32_t));
    g->rope_host = wgllm_malloc_array(sz.rope_host, sizeof(float)); /* n_rot 0: one byte, never NULL for it */
    if (!g->step_host || !g->rope_host)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    wgllm_gpu_buffer_write(g->gpu, g->step, 0, g->step_host, sz.step_host * sizeof(uint32_t));

    /* weights (n_layer <= 512: the plan checked) */
    uint64_t pending = 0;
    g->n_w = 7 * hp->n_layer + 2;
    g->w = calloc((size_t)g->n_w, sizeof *g->w);
    g->kc = calloc((size_t)hp->n_layer, sizeof *g->kc);
    g->vc = calloc((size_t)hp->n_layer, sizeof *g->vc);
    if (!g->w || !g->kc || !g->vc) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int il = 0; il < hp->n_layer && !st; il++)
        for (int j = 0; j < 7 && !st; j++)
            if (layer_weight(&m->layers[il], j)->tensor) /* else n_pieces 0: bert has no gate */
                st = wgllm_webgpu_plan_weight(g, &lim, layer_weight(&m->layers[il], j), &g->w[7 * il + j], &pending, err);
    if (!st) st = wgllm_webgpu_plan_weight(g, &lim, &m->tok_embd, &g->w[7 * hp->n_layer], &pending, err);
    if (st) return st;
    if (hp->encoder) { /* no output layer: the position table (bert; nomic-bert has none) in its place */
        if (m->pos_embd.tensor && (st = wgllm_webgpu_plan_weight(g, &lim, &m->pos_embd, &g->w[7 * hp->n_layer + 1], &pending, err)))
            return st;
    } else if (m->output.tensor == m->tok_embd.tensor && m->output.type == m->tok_embd.type)
        g->w[7 * hp->n_layer + 1] = g->w[7 * hp->n_layer]; /* tied: the same buffers */
    else if ((st = wgllm_webgpu_plan_weight(g, &lim, &m->output, &g->w[7 * hp->n_layer + 1], &pending, err)))
        return st;
    if ((st = wgllm_webgpu_moe_alloc(g, &lim, &pending, err))) return st;
    free(g->staging);
    g->staging = NULL;

    /* vectors: one buffer, offsets in floats (their sum fits u32: the plan checked) */
    uint32_t *offs = calloc((size_t)hp->n_layer * LAYER_VECS, sizeof(uint32_t));
    if (!offs) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    struct vec_offsets vo = {0};
    uint32_t **per_layer[LAYER_VECS] = {&vo.attn_norm, &vo.ffn_norm, &vo.bq, &vo.bk, &vo.bv, &vo.q_norm,
                                        &vo.k_norm, &vo.post_attn_norm, &vo.post_ffn_norm, &vo.bo, &vo.b_up,
                                        &vo.b_down, &vo.attn_out_norm, &vo.attn_out_norm_b, &vo.layer_out_norm,
                                        &vo.layer_out_norm_b, &vo.b_gate_inp, &vo.b_gate_exps, &vo.b_up_exps,
                                        &vo.b_down_exps};
    for (int j = 0; j < LAYER_VECS; j++) *per_layer[j] = offs + (size_t)j * hp->n_layer; /* attn_norm = offs */
    /* what goes where: up to LAYER_VECS vectors per layer and the output norm;
     * on the heap, as 9 * 512 + 1 of them would take 110 KB of stack */
    struct vec_src {
        uint32_t *off;
        const float *data;
        uint64_t n;
    } *vl = calloc((size_t)hp->n_layer * LAYER_VECS + 3, sizeof *vl);
    /* an encoder's token type 0 row, as f32 (the CPU encoder adds zeros without the tensor) */
    float *type_row = hp->encoder ? calloc((size_t)E, sizeof(float)) : NULL;
    if (hp->encoder && type_row && m->type_embd.tensor) {
        void *raw = malloc(m->type_embd.row_size);
        st = raw ? wgllm_weight_read(m, &m->type_embd, 0, raw, m->type_embd.row_size, err)
                 : wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
        if (!st) wgllm_type_traits(m->type_embd.type)->to_float(raw, type_row, (int64_t)E);
        free(raw);
    }
    if (!vl || (hp->encoder && !type_row) || st) {
        free(offs), free(vl), free(type_row);
        return st ? st : wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int nv = 0;
    uint64_t total = 0;
    const struct widths wd = widths_of(hp);
    for (int il = 0; il < hp->n_layer; il++) {
        const float *d[LAYER_VECS];
        uint64_t n[LAYER_VECS];
        layer_vectors(m, &m->layers[il], &wd, d, n);
        for (int j = 0; j < LAYER_VECS; j++)
            if (d[j]) vl[nv++] = (struct vec_src){&(*per_layer[j])[il], d[j], n[j]};
    }
    if (hp->encoder) {
        vl[nv++] = (struct vec_src){&vo.embd_norm, m->embd_norm, E};
        vl[nv++] = (struct vec_src){&vo.embd_norm_b, m->embd_norm_b, E};
        vl[nv++] = (struct vec_src){&vo.type_row, type_row, E};
    } else {
        vl[nv++] = (struct vec_src){&vo.output_norm, m->output_norm, E};
    }
    for (int i = 0; i < nv; i++) *vl[i].off = (uint32_t)total, total += vl[i].n;
    WGLLM_ASSERT(total * 4 == sz.vectors); /* the layout the plan counted */
    g->vecs = wgllm_webgpu_gbuf(g, sz.vectors, WGLLM_GPU_STORAGE, "vectors", &g->plan.vectors, err);
    /* each vector is in host memory already (the model's), so its bytes fit size_t; checked all the same */
    for (int i = 0; g->vecs && i < nv && !st; i++) {
        size_t bytes;
        st = wgllm_size_mul(vl[i].n, sizeof(float), &bytes)
                 ? upload(g, g->vecs, *vl[i].off * 4ull, vl[i].data, bytes, &pending, err)
                 : wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: a vector of %llu floats is past size_t",
                                   (unsigned long long)vl[i].n);
    }
    /* the attention sinks (gpt-oss): each layer's at an offset a binding may
     * start at, as the attention kernel reads its layer's from 0 */
    const uint64_t sks = wgllm_webgpu_sink_stride(m);
    if (!st && g->vecs && m->layers[0].attn_sinks) {
        g->sinks = wgllm_webgpu_gbuf(g, (uint64_t)hp->n_layer * sks, WGLLM_GPU_STORAGE, "attention sinks",
                                     &g->plan.vectors, err);
        for (int il = 0; g->sinks && il < hp->n_layer && !st; il++)
            st = upload(g, g->sinks, (uint64_t)il * sks, m->layers[il].attn_sinks, (size_t)hp->n_head * sizeof(float),
                        &pending, err);
        if (!g->sinks && !st) st = err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    free(vl);
    free(type_row);
    if (!g->vecs || st) {
        free(offs);
        return st ? st : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }

    /* KV cache and activations; kv_full: what full caches would take instead of the rings */
    uint64_t ring_saved = 0;
    for (int il = 0; il < hp->n_layer && !hp->encoder; il++) { /* an encoder caches nothing */
        const bool ring = sz.ring && m->layers[il].swa;
        if (ring) ring_saved += (sz.k_cache - sz.k_ring) + (sz.v_cache - sz.v_ring);
        g->kc[il] = wgllm_webgpu_gbuf(g, ring ? sz.k_ring : sz.k_cache, WGLLM_GPU_STORAGE, "k cache", &g->plan.kv_cache, err);
        g->vc[il] = g->kc[il] ? wgllm_webgpu_gbuf(g, ring ? sz.v_ring : sz.v_cache, WGLLM_GPU_STORAGE, "v cache",
                                                  &g->plan.kv_cache, err) : NULL;
        if (!g->vc[il]) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->shift_tmp = wgllm_webgpu_gbuf(g, sz.shift, WGLLM_GPU_STORAGE, "shift scratch", &g->plan.kv_cache, err);
    g->plan.kv_full = g->plan.kv_cache + ring_saved;
    g->shift_bg = calloc((size_t)hp->n_layer, sizeof *g->shift_bg);
    if (!g->shift_tmp || !g->shift_bg) {
        free(offs);
        return g->shift_tmp ? wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory")
                            : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    struct wgllm_gpu_buffer **acts[WGLLM_ACT_COUNT] = {
        [WGLLM_ACT_X] = &g->x,       [WGLLM_ACT_XN] = &g->xn,     [WGLLM_ACT_Q] = &g->q,     [WGLLM_ACT_K] = &g->k,
        [WGLLM_ACT_V] = &g->v,       [WGLLM_ACT_ATT] = &g->att,   [WGLLM_ACT_TMP] = &g->tmp, [WGLLM_ACT_GATE] = &g->gate,
        [WGLLM_ACT_UP] = &g->up,     [WGLLM_ACT_FFH] = &g->ffh,   [WGLLM_ACT_QR] = &g->qr,   [WGLLM_ACT_KR] = &g->kr,
        [WGLLM_ACT_XR] = &g->xr,     [WGLLM_ACT_XO] = &g->xo,     [WGLLM_ACT_ATT_O] = &g->att_o};
    for (int i = 0; i < WGLLM_ACT_COUNT; i++) {
        if (!sz.act[i]) continue;
        *acts[i] = wgllm_webgpu_gbuf(g, sz.act[i], WGLLM_GPU_STORAGE, wgllm_webgpu_act_names[i], &g->plan.activations, err);
        if (!*acts[i]) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->logits = wgllm_webgpu_gbuf(g, sz.logits, WGLLM_GPU_STORAGE, "logits", &g->plan.logits, err);
    g->rope_cs = g->logits ? wgllm_webgpu_gbuf(g, sz.rope_cs, WGLLM_GPU_STORAGE, "rope cos/sin", &g->plan.params, err) : NULL;
    g->rope_swa_off = sz.rope_swa_off;
    if (sz.gelu_table) {
        wgllm_fp16 *tab = malloc(sz.gelu_table);
        if (!tab) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the GELU table");
        wgllm_op_gelu_f16_table(tab);
        g->gelu_tab = wgllm_webgpu_gbuf(g, sz.gelu_table, WGLLM_GPU_STORAGE, "gelu table", &g->plan.params, err);
        st = g->gelu_tab ? upload(g, g->gelu_tab, 0, tab, (size_t)sz.gelu_table, &pending, err)
                         : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        free(tab);
        if (st) return st;
    }
    g->rope_factors = wgllm_model_rope_factors(m, g->n_ctx);
    if (!g->rope_cs) {
        free(offs);
        return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    *vo_out = vo; /* the caller frees vo_out->attn_norm (all the offsets) */
    return WGLLM_STATUS_OK;
}
