/*
 * webgpu_graph.c - the dispatches of one pass of the WebGPU backend
 * (webgpu_internal.h), built once at init: which kernel with which
 * parameters and bindings, per layer; each parameter block in a slot of one
 * uniform arena (equal blocks share a slot), every pipeline compiled and
 * every bind group created, so a pass only records what is listed here.
 *
 * Step order follows the CPU backend (backend/cpu/forward.c): get_rows ->
 * per layer RMSNorm -> Q/K/V mat-vecs (+ qwen2 biases; qwen3 per-head q/k
 * RMSNorm) -> RoPE -> K,V stored as f16 at (sequence, position) ->
 * attention of each token over its own sequence (with gpt-oss's sinks:
 * ATTN_SINK) -> output projection (+ gpt-oss's bias) -> residual add -> RMSNorm -> gate/up -> SwiGLU -> down -> residual add; in
 * the last layer only the rows with outputs go on after attention (gathered
 * into xo), then the final RMSNorm and (unless embeddings are wanted) the
 * logits; a pass without outputs stops after the last attention. Rounding
 * mirrors the CPU backend (kernels.c): mat-vec inputs to the weight's
 * vec_dot_type, q and attention probabilities to f16, lossless sums where
 * the CPU sums in double, and the RoPE cos/sin table made on the host by
 * the code the CPU uses (backend/rope.h).
 *
 * The blocks beyond llama's (model.h) are parameters of these dispatches,
 * not dispatches of their own: the embedding scale in get_rows; the
 * attention and query scales, the score soft-cap and the sliding window in
 * the attention; the logit soft-cap, the logit scale and granite's residual
 * scale in the mat-vec epilogue; a post-norm (gemma, olmo2) is an RMSNorm
 * that adds into the stream in place of the residual add; without pre-norms
 * (olmo2) the products read x itself; whole-projection q/k norms (olmo2) are
 * one norm row per token; a layer without RoPE (smollm3) skips its two RoPE
 * dispatches, a local layer rotates by the second cos/sin table; GeGLU is
 * SWIGLU's twin, looking GELU up in the CPU's f16 table. An encoder's
 * (bert's) list is webgpu_encoder.c's, from the primitives exported at the
 * end of this file.
 *
 * A decode step (a pass of fewer than MM_MIN_TOKENS tokens) runs a llama
 * layer in 6 dispatches, not 21: q|k|v in one mat-vec (+ biases) whose
 * prologue takes the RMSNorm and rounds its output (key.pro WGLLM_PRO_NORM:
 * each workgroup normalizes and rounds the token's row into workgroup
 * memory), RoPE with the K/V store (ROPE_STORE), attention, o with the
 * rounding of its input in its prologue (WGLLM_PRO_ROUND) adding into x
 * (WGLLM_EPI_ACC), gate|up with the GLU (MATVEC_SWIGLU/GEGLU) and the
 * norm+rounding prologue, down with the rounding prologue adding into x.
 * The separate RMS_NORM_ROUND and ROUND_ACT stay in the list for passes of
 * many tokens, whose MATMULs read xr (and where a prologue cannot be had:
 * the packed row over the device's workgroup memory, F32 weights, the tune's
 * matvec_split_round; then a layer takes 10). A pass of many tokens runs
 * the MATMUL twins of the fused mat-vecs (and the adds and GLU between
 * them) instead. Each fused op gives the bits of the ops it replaces
 * (test_webgpu_fused.c); where the weights cannot fuse (split in pieces,
 * rows of different lengths or vec_dot types) the separate ops remain.
 *
 * Every dispatch is recorded once with its grid for one token and how the
 * grid grows with the batch (struct gop): the kernels take the token index
 * from the grid (gid.y / wid.y, or rows for the row kernels), so parameter
 * slots never change and are written once at init (no per-step parameter
 * writes; only the sampler's and the context shift's own slots are
 * rewritten, by forward_webgpu.c).
 */
#include "backend/webgpu/webgpu_internal.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wgllm_gpu_pipeline *pipe_key(struct wgllm_webgpu_ctx *g, const struct wgllm_kernel_key *key,
                                           struct wgllm_error *err) {
    char *src = wgllm_wgsl_generate(key, g->tune);
    if (!src) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no WebGPU %s kernel for %s", wgllm_wgsl_kernel_name(key->kernel),
                        wgllm_type_name(key->type));
        return NULL;
    }
    char label[64];
    snprintf(label, sizeof label, "%s_%s", wgllm_wgsl_kernel_name(key->kernel), wgllm_type_name(key->type));
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(g->gpu, src, label, err);
    free(src);
    return p;
}

static struct wgllm_gpu_pipeline *pipe_of(struct wgllm_webgpu_ctx *g, enum wgllm_kernel k, uint32_t type, bool neox,
                                          struct wgllm_error *err) {
    const struct wgllm_kernel_key key = {.kernel = k, .type = type, .neox = neox};
    return pipe_key(g, &key, err);
}

/* The arena slot holding kp (shared with an equal earlier one). */
static int slot_of(struct wgllm_webgpu_ctx *g, const union wgllm_kparams *kp) {
    for (int i = 0; i < g->n_slots; i++)
        if (!memcmp(&g->slots[i], kp, sizeof *kp)) return i;
    if (g->n_slots == g->cap_slots) {
        int cap = g->cap_slots ? 2 * g->cap_slots : 64;
        void *p = realloc(g->slots, (size_t)cap * sizeof *g->slots);
        if (!p) return -1;
        g->slots = p;
        g->cap_slots = cap;
    }
    g->slots[g->n_slots] = *kp;
    return g->n_slots++;
}

/* Adds a dispatch with grid x for one token growing as `grow` says (per and
 * div for GROW_XE / GROW_Y); bindings 1.. are whole buffers. Returns it (NULL
 * after a failure). */
static struct gop *add_op(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                          enum grow grow, uint32_t x, int nb, struct wgllm_gpu_buffer *b1,
                          struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4) {
    struct wgllm_webgpu_ctx *g = bd->g;
    if (!bd->keep_round) bd->rsrc = NULL;
    if (bd->failed) return NULL;
    if (!p) {
        bd->failed = true;
        return NULL;
    }
    if (g->n_ops == g->cap_ops) {
        int cap = g->cap_ops ? 2 * g->cap_ops : 128;
        void *np = realloc(g->ops, (size_t)cap * sizeof *g->ops);
        if (!np) {
            wgllm_error_set(bd->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the dispatch list");
            bd->failed = true;
            return NULL;
        }
        g->ops = np;
        g->cap_ops = cap;
    }
    struct gop *o = &g->ops[g->n_ops++];
    memset(o, 0, sizeof *o);
    o->pipe = p;
    o->x = x ? x : 1;
    o->grow = (uint8_t)grow;
    o->per = 1, o->div = 1;
    o->tok = -1;
    o->slot = slot_of(g, kp);
    if (o->slot < 0) {
        wgllm_error_set(bd->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for kernel parameters");
        bd->failed = true;
        return NULL;
    }
    struct wgllm_gpu_buffer *bs[4] = {b1, b2, b3, b4};
    o->nb = nb + 1;
    for (int i = 0; i < nb; i++) o->b[i + 1] = (struct wgllm_gpu_binding){bs[i], 0, 0};
    return o;
}

/* An element-wise op over `per` elements of each row, all rows in one grid. */
static struct gop *add_elems(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                             uint32_t per, uint32_t div, int nb, struct wgllm_gpu_buffer *b1,
                             struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4) {
    struct gop *o = add_op(bd, p, kp, GROW_XE, 1, nb, b1, b2, b3, b4);
    if (o) o->per = per, o->div = div;
    return o;
}

/* Appends a buffer binding to an op that has more than add_op's four. */
static void bind_more(struct gop *o, struct wgllm_gpu_buffer *b) {
    if (!o) return;
    WGLLM_ASSERT(o->nb < (int)(sizeof o->b / sizeof o->b[0]));
    o->b[o->nb++] = (struct wgllm_gpu_binding){b, 0, 0};
}


/* y[t] = W x[t] for the rows of the batch. The input is first rounded as
 * the CPU backend rounds it (to the weight's vec_dot_type: Q8_0 blocks for
 * Q8_0/Q4_0, f16 for F16), so that both backends compute the same products
 * and greedy decoding agrees even on near-ties; consecutive mat-vecs of one
 * input share the rounding. `cap` is the row capacity of y (n_batch or
 * out_cap), for per-token ops of row-split weights. */
/* What a mat-vec does to its outputs before storing them (WGLLM_EPI_*):
 * the final soft-cap and logit scale, granite's residual scale. */
struct epilogue {
    float softcap, scale; /* 0: no soft-cap; 1: no scale */
    bool acc;             /* y += the result (a projection into the residual stream) */
};
static const struct epilogue EPI_NONE = {0.0f, 1.0f, false};

static void set_epilogue(struct wgllm_kp_matvec *kp, struct epilogue e) {
    if (e.softcap > 0.0f) kp->epi |= WGLLM_EPI_SOFTCAP, kp->cap = e.softcap, kp->inv_cap = 1.0f / e.softcap;
    if (e.scale != 1.0f) kp->epi |= WGLLM_EPI_SCALE, kp->scale = e.scale;
    if (e.acc) kp->epi |= WGLLM_EPI_ACC;
}

/* The MATMUL twin of a whole weight's MATVEC, for passes of many tokens (x
 * already rounded). */
static void add_mm(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y,
                   int cap, struct epilogue epi) {
    struct wgllm_webgpu_ctx *g = bd->g;
    /* tokens = the row capacity of y: the last token tile may compute rows
     * past the pass's tokens, into scratch rows of y */
    union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->ne1, .k = (uint32_t)w->ne0, .tokens = (uint32_t)cap}};
    set_epilogue(&kp.matvec, epi);
    struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATMUL, w->type, false, bd->err), &kp, GROW_Y,
                           ceil_div(kp.matvec.rows, g->tune->mm_tile_n), 3, w->piece[0].buf, x, y, NULL);
    if (o) o->div = g->tune->mm_tile_m, o->when = WHEN_MANY;
}

/* The prologue (key.pro, kernels_fused.c) a decode mat-vec of key's
 * weights (K inputs) reading `in` takes in place of the dispatches before
 * it: WGLLM_PRO_NORM when `in` is the output of the RMS_NORM_ROUND added
 * just before and the caller is its only reader (`norm_ok`): that op then
 * runs only in passes of many tokens (for the MATMULs, mm), *src is the
 * norm's input, *norm_off its weights; WGLLM_PRO_ROUND when `in` would need
 * a ROUND_ACT: that one is added for many tokens only (mm), *src = in.
 * WGLLM_PRO_NONE (nothing added) when xr holds the rounding already, the
 * weights need none, the tune splits it off, or the row (f32 values, else
 * packed) and the kernel's other workgroup arrays do not fit the device's
 * workgroup memory. */
static uint8_t add_prologue(struct builder *bd, struct wgllm_kernel_key *key, struct wgllm_gpu_buffer *in, uint32_t K,
                            int cap, bool mm, bool norm_ok, struct wgllm_gpu_buffer **src, uint32_t *norm_off) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t vt = wgllm_type_traits(key->type)->vec_dot_type;
    const bool rounded = bd->rsrc == in && bd->rtype == vt;
    key->pro = WGLLM_PRO_NONE, key->kx = 0;
    if (g->tune->matvec_split_round || vt == WGLLM_TYPE_F32 || bd->failed) return WGLLM_PRO_NONE;
    const bool norm = rounded && norm_ok && bd->norm_op == g->n_ops - 1 && bd->norm_y == in;
    if (rounded && !norm) return WGLLM_PRO_NONE;
    struct wgllm_kernel_key k = *key;
    k.pro = norm ? WGLLM_PRO_NORM : WGLLM_PRO_ROUND, k.kx = K;
    k.pro_f32 = true; /* f32 values where they fit (read as they are), else packed */
    uint32_t bytes = wgllm_wgsl_pro_bytes(&k, g->tune);
    if (bytes > bd->wg_storage) k.pro_f32 = false, bytes = wgllm_wgsl_pro_bytes(&k, g->tune);
    if (!bytes || bytes > bd->wg_storage) return WGLLM_PRO_NONE;
    *key = k;
    if (norm) {
        g->ops[bd->norm_op].when = WHEN_MANY;
        *src = bd->norm_x, *norm_off = bd->norm_off;
    } else {
        if (mm) {
            const union wgllm_kparams kp = {.round_act = {.count = K * (uint32_t)cap}};
            struct gop *o = add_elems(bd, pipe_of(g, WGLLM_KERNEL_ROUND_ACT, vt, false, bd->err), &kp, K,
                                      32 * g->tune->wg_elem, 2, in, g->xr, NULL, NULL);
            if (o) o->when = WHEN_MANY;
        }
        *src = in, *norm_off = 0;
    }
    /* xr holds the rounding in passes of many tokens only: no later mat-vec may take it for granted */
    bd->rsrc = NULL;
    return k.pro;
}

static void add_matvec(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                       struct wgllm_gpu_buffer *y, int cap, struct epilogue epi) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t vt = wgllm_type_traits(w->type)->vec_dot_type;
    if (w->n_pieces == 1) { /* the rounding in the decode mat-vec's prologue */
        const bool mm = cap >= MM_MIN_TOKENS && wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL, w->type);
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = w->type};
        struct wgllm_gpu_buffer *src = x;
        uint32_t noff = 0;
        if (add_prologue(bd, &key, x, (uint32_t)w->ne0, cap, mm, false, &src, &noff)) {
            bd->keep_round = true;
            union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->ne1, .k = (uint32_t)w->ne0}};
            set_epilogue(&kp.matvec, epi);
            struct gop *o = add_op(bd, pipe_key(g, &key, bd->err), &kp, GROW_Y,
                                   ceil_div(kp.matvec.rows, g->tune->rows_matvec), 3, w->piece[0].buf, src, y, NULL);
            if (o && mm) o->when = WHEN_FEW;
            if (mm) add_mm(bd, w, g->xr, y, cap, epi);
            bd->keep_round = false;
            return;
        }
    }
    if (vt != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt)) {
        if (bd->rsrc != x || bd->rtype != vt) {
            const union wgllm_kparams kp = {.round_act = {.count = (uint32_t)w->ne0 * (uint32_t)cap}};
            add_elems(bd, pipe_of(g, WGLLM_KERNEL_ROUND_ACT, vt, false, bd->err), &kp, (uint32_t)w->ne0,
                      32 * g->tune->wg_elem, 2, x, g->xr, NULL, NULL);
            bd->rsrc = x, bd->rtype = vt;
        }
        x = g->xr;
    }
    bd->keep_round = true;
    if (w->n_pieces == 1) {
        const bool mm = cap >= MM_MIN_TOKENS && wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL, w->type);
        union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->ne1, .k = (uint32_t)w->ne0}};
        set_epilogue(&kp.matvec, epi);
        struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATVEC, w->type, false, bd->err), &kp, GROW_Y,
                               ceil_div(kp.matvec.rows, g->tune->rows_matvec), 3, w->piece[0].buf, x, y, NULL);
        if (o && mm) o->when = WHEN_FEW;
        if (mm) add_mm(bd, w, x, y, cap, epi);
    } else {
        /* MATVEC writes token t's rows at c + t * (rows of the piece): with
         * several pieces each token gets its own dispatches */
        for (int t = 0; t < cap; t++)
            for (int i = 0; i < w->n_pieces; i++) {
                union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->piece[i].rows, .k = (uint32_t)w->ne0,
                                                     .x_off = (uint32_t)(t * w->ne0),
                                                     .y_off = (uint32_t)(t * w->ne1 + w->piece[i].row0)}};
                set_epilogue(&kp.matvec, epi);
                struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATVEC, w->type, false, bd->err), &kp, GROW_Y,
                                       ceil_div(kp.matvec.rows, g->tune->rows_matvec), 3, w->piece[i].buf, x, y, NULL);
                if (o) o->tok = t, o->div = 1u << 30; /* y = 1 */
            }
    }
    bd->keep_round = false;
}

static struct gop *add_rows(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                            uint32_t n, uint32_t y_stride);

static void add_rms(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t w_off,
                    uint32_t n, uint32_t rows_per_tok) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const union wgllm_kparams kp = {.rms_norm = {.width = n, .w_off = w_off, .eps = g->model->hp.rms_eps}};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_RMS_NORM, 0, false, bd->err), &kp, GROW_X, rows_per_tok, 3, x, g->vecs, y, NULL);
}

/* x[t] += y[t] (a projection into the residual stream): through the
 * post-norm at w_off when the layer has one (gemma, olmo2: the norm adds
 * into x itself, no dispatch more than the plain add), times the residual
 * scale (granite: put on the mat-vec's epilogue by the caller otherwise). */
static void add_residual(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t n,
                         const float *post_norm, uint32_t w_off) {
    struct wgllm_webgpu_ctx *g = bd->g;
    if (!post_norm) {
        add_rows(bd, x, y, 0, n, n);
        return;
    }
    const union wgllm_kparams kp = {.rms_norm = {.width = n, .w_off = w_off, .eps = g->model->hp.rms_eps, .add = 1,
                                                 .scale = g->model->hp.residual_scale}};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_RMS_NORM, 0, false, bd->err), &kp, GROW_X, 1, 3, y, g->vecs, x, NULL);
}

/* x[t] += y[t] (y_stride n), or x[t] += y (y_stride 0: a bias at y_off). */
static struct gop *add_rows(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                            uint32_t n, uint32_t y_stride) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const union wgllm_kparams kp = {.add_rows = {.width = n, .y_off = y_off, .y_stride = y_stride}};
    return add_op(bd, pipe_of(g, WGLLM_KERNEL_ADD_ROWS, 0, false, bd->err), &kp, GROW_Y, ceil_div(n, g->tune->wg_elem),
                  2, x, y, NULL, NULL);
}

/* ---- the fused decode kernels (kernels_fused.c) ----------------------------
 * A pass of few tokens (the decode step) runs a layer as RMSNorm+rounding+
 * q|k|v, RoPE+cache store, attention, rounding+o (+residual), RMSNorm+
 * rounding+gate|up+GLU, rounding+down (+residual); a pass of many tokens
 * keeps the MATMUL twins and the ops they need between them. Each fused op
 * gives the bits of the ops it replaces. */

/* Weights one fused mat-vec can take: whole (one buffer each), of one row
 * length and one vec_dot_type (one rounded input), each with a MATVEC. */
static bool fusable(const struct gweight *const *w, int n) {
    const uint32_t vt = wgllm_type_traits(w[0]->type)->vec_dot_type;
    for (int i = 0; i < n; i++)
        if (w[i]->n_pieces != 1 || w[i]->ne0 != w[0]->ne0 || wgllm_type_traits(w[i]->type)->vec_dot_type != vt ||
            !wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, w[i]->type))
            return false;
    return true;
}

/* RMSNorm of x into y that also rounds y for `next`'s mat-vec (into xr,
 * as add_matvec would round it next): one dispatch instead of two. */
static void add_rms_for(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t w_off,
                        uint32_t n, const struct gweight *next) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t vt = next ? wgllm_type_traits(next->type)->vec_dot_type : WGLLM_TYPE_F32;
    if (vt == WGLLM_TYPE_F32 || !wgllm_wgsl_supports(WGLLM_KERNEL_RMS_NORM_ROUND, vt) ||
        n % (vt == WGLLM_TYPE_Q8_K ? 256u : 32u)) {
        add_rms(bd, x, y, w_off, n, 1);
        return;
    }
    const union wgllm_kparams kp = {.rms_norm = {.width = n, .w_off = w_off, .eps = g->model->hp.rms_eps}};
    if (add_op(bd, pipe_of(g, WGLLM_KERNEL_RMS_NORM_ROUND, vt, false, bd->err), &kp, GROW_X, 1, 4, x, g->vecs, y, g->xr)) {
        bd->rsrc = y, bd->rtype = vt;
        bd->norm_op = g->n_ops - 1, bd->norm_x = x, bd->norm_y = y, bd->norm_off = w_off;
    }
}

/* q, k, v = Wq|Wk|Wv ain (+ biases) into yq, yk, g->v: one MATVEC_QKV when
 * the three fuse, else three mat-vecs and the bias adds. */
static void add_qkv(struct builder *bd, const struct gweight *W, struct wgllm_gpu_buffer *ain, struct wgllm_gpu_buffer *yq,
                    struct wgllm_gpu_buffer *yk, const float *const bias[3], const uint32_t bias_off[3]) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const struct gweight *ws[3] = {&W[0], &W[1], &W[2]};
    struct wgllm_gpu_buffer *ys[3] = {yq, yk, g->v};
    const bool any_bias = bias[0] || bias[1] || bias[2], all_bias = bias[0] && bias[1] && bias[2];
    if (!fusable(ws, 3) || any_bias != all_bias) {
        for (int i = 0; i < 3; i++) add_matvec(bd, ws[i], ain, ys[i], g->n_batch, EPI_NONE);
        for (int i = 0; i < 3; i++)
            if (bias[i]) add_rows(bd, ys[i], g->vecs, bias_off[i], (uint32_t)ws[i]->ne1, 0);
        return;
    }
    const bool mm = g->n_batch >= MM_MIN_TOKENS;
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC_QKV, .type = W[0].type, .type2 = W[1].type,
                                   .type3 = W[2].type, .bias = all_bias};
    struct wgllm_gpu_buffer *src = NULL;
    uint32_t noff = 0;
    const uint8_t pro = add_prologue(bd, &key, ain, (uint32_t)W[0].ne0, g->n_batch, mm, true, &src, &noff);
    struct wgllm_gpu_buffer *xin = pro ? g->xr : wgllm_webgpu_add_round(bd, ain, wgllm_type_traits(W[0].type)->vec_dot_type,
                                                                        (uint32_t)W[0].ne0, g->n_batch);
    bd->keep_round = true;
    const union wgllm_kparams kp = {.matvec_qkv = {.rows_q = (uint32_t)W[0].ne1, .rows_k = (uint32_t)W[1].ne1,
                                                   .rows_v = (uint32_t)W[2].ne1, .k = (uint32_t)W[0].ne0,
                                                   .bq_off = all_bias ? bias_off[0] : 0,
                                                   .bk_off = all_bias ? bias_off[1] : 0,
                                                   .norm_off = noff,
                                                   .bv_off = all_bias ? bias_off[2] : 0,
                                                   .norm_eps = pro == WGLLM_PRO_NORM ? g->model->hp.rms_eps : 0.0f}};
    const uint32_t rows = kp.matvec_qkv.rows_q + kp.matvec_qkv.rows_k + kp.matvec_qkv.rows_v;
    struct gop *o = add_op(bd, pipe_key(g, &key, bd->err), &kp, GROW_Y, ceil_div(rows, g->tune->rows_matvec), 4,
                           W[0].piece[0].buf, W[1].piece[0].buf, W[2].piece[0].buf, pro ? src : xin);
    for (int i = 0; i < 3; i++) bind_more(o, ys[i]);
    if (all_bias || pro == WGLLM_PRO_NORM) bind_more(o, g->vecs);
    if (o && mm) o->when = WHEN_FEW;
    if (mm)
        for (int i = 0; i < 3; i++) {
            add_mm(bd, ws[i], xin, ys[i], g->n_batch, EPI_NONE);
            struct gop *b = bias[i] ? add_rows(bd, ys[i], g->vecs, bias_off[i], (uint32_t)ws[i]->ne1, 0) : NULL;
            if (b) b->when = WHEN_MANY;
        }
    bd->keep_round = false;
}

/* ffh = act(Wg fin) * (Wu fin) for cap rows: one MATVEC_SWIGLU/GEGLU when
 * gate and up fuse (false otherwise: nothing added). */
static bool add_glu(struct builder *bd, const struct gweight *W, struct wgllm_gpu_buffer *fin, int cap, bool gelu) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const struct gweight *ws[2] = {&W[4], &W[5]};
    if (!fusable(ws, 2) || W[4].ne1 != W[5].ne1) return false;
    const bool mm = cap >= MM_MIN_TOKENS;
    struct wgllm_kernel_key key = {.kernel = gelu ? WGLLM_KERNEL_MATVEC_GEGLU : WGLLM_KERNEL_MATVEC_SWIGLU,
                                   .type = W[4].type, .type2 = W[5].type};
    struct wgllm_gpu_buffer *src = NULL;
    uint32_t noff = 0;
    const uint8_t pro = add_prologue(bd, &key, fin, (uint32_t)W[4].ne0, cap, mm, true, &src, &noff);
    struct wgllm_gpu_buffer *xin = pro ? g->xr : wgllm_webgpu_add_round(bd, fin, wgllm_type_traits(W[4].type)->vec_dot_type,
                                                                        (uint32_t)W[4].ne0, cap);
    bd->keep_round = true;
    const uint32_t F = (uint32_t)W[4].ne1;
    union wgllm_kparams kp = {.matvec = {.rows = F, .k = (uint32_t)W[4].ne0}};
    if (pro == WGLLM_PRO_NORM) kp.matvec.norm_off = noff, kp.matvec.norm_eps = g->model->hp.rms_eps;
    struct gop *o = add_op(bd, pipe_key(g, &key, bd->err), &kp, GROW_Y, ceil_div(F, g->tune->rows_matvec), 4,
                           W[4].piece[0].buf, W[5].piece[0].buf, pro ? src : xin, g->ffh);
    if (gelu) bind_more(o, g->gelu_tab);
    if (pro == WGLLM_PRO_NORM) bind_more(o, g->vecs);
    if (o && mm) o->when = WHEN_FEW;
    if (mm) {
        add_mm(bd, &W[4], xin, g->gate, cap, EPI_NONE);
        add_mm(bd, &W[5], xin, g->up, cap, EPI_NONE);
        const union wgllm_kparams sw = {.swiglu = {.count = F * (uint32_t)cap}};
        struct gop *e = add_elems(bd, pipe_of(g, gelu ? WGLLM_KERNEL_GEGLU : WGLLM_KERNEL_SWIGLU, 0, false, bd->err), &sw,
                                  F, g->tune->wg_elem, gelu ? 4 : 3, g->gate, g->up, g->ffh, gelu ? g->gelu_tab : NULL);
        if (e) e->when = WHEN_MANY;
    }
    bd->keep_round = false;
    return true;
}

static void build_ops(struct builder *bd, const struct vec_offsets *vo) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_wgsl_tune *t = g->tune;
    const uint32_t E = (uint32_t)hp->n_embd, F = (uint32_t)hp->n_ff, dk = (uint32_t)hp->head_dim_k,
                   dv = (uint32_t)hp->head_dim_v, B = (uint32_t)g->n_batch;
    const uint32_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;

    const struct gweight *emb = &g->w[7 * hp->n_layer];
    struct wgllm_gpu_pipeline *pg = pipe_of(g, WGLLM_KERNEL_GET_ROWS, emb->type, false, bd->err);
    for (int i = 0; i < emb->n_pieces; i++) {
        union wgllm_kparams kp = {.get_rows = {.width = E, .ids_off = 0, .y_off = 0, .scale = hp->embd_scale}};
        if (emb->n_pieces > 1)
            kp.get_rows.piece_row0 = (uint32_t)emb->piece[i].row0, kp.get_rows.piece_rows = (uint32_t)emb->piece[i].rows;
        add_op(bd, pg, &kp, GROW_Y, ceil_div(E, t->wg_elem), 3, emb->piece[i].buf, g->step, g->x, NULL);
    }

    struct wgllm_gpu_pipeline *prs = pipe_of(g, WGLLM_KERNEL_ROPE_STORE, 0, neox, bd->err);
    /* gpt-oss: every layer has its sinks, the attention kernel's version with them */
    struct wgllm_gpu_pipeline *pattn = pipe_of(g, g->sinks ? WGLLM_KERNEL_ATTN_SINK : WGLLM_KERNEL_ATTN_BATCH,
                                               WGLLM_TYPE_F16, false, bd->err);
    const bool gelu = hp->ffn_act == WGLLM_FFN_GELU;
    struct wgllm_gpu_pipeline *pswi = pipe_of(g, gelu ? WGLLM_KERNEL_GEGLU : WGLLM_KERNEL_SWIGLU, 0, false, bd->err);
    /* granite's residual scale rides on the projections' epilogue; with a
     * post-norm it is the norm's (add_residual) */
    const struct epilogue res_epi = {0.0f, hp->residual_scale, false};
    /* without a post-norm or bias between them, the projection adds into x in its own store */
    const struct epilogue acc_epi = {0.0f, hp->residual_scale, true};
    for (int il = 0; il < hp->n_layer && !bd->failed; il++) {
        if (il < 2) g->layer0_ops[il] = g->n_ops;
        const struct gweight *W = &g->w[7 * il];
        const struct wgllm_layer *L = &m->layers[il];
        /* the attention's input: the pre-norm of x, or x itself (olmo2) */
        struct wgllm_gpu_buffer *ain = g->x;
        if (L->attn_norm) add_rms_for(bd, g->x, g->xn, vo->attn_norm[il], E, &W[0]), ain = g->xn;
        /* q and k: straight into q/k, or through qr/kr and the q/k norm:
         * per head (qwen3, gemma3) or over the whole projection (olmo2);
         * the biases (qwen2) go to q/k themselves, as the CPU adds them */
        const float *const bias[3] = {L->bq, L->bk, L->bv};
        const uint32_t bias_off[3] = {L->bq ? vo->bq[il] : 0, L->bk ? vo->bk[il] : 0, L->bv ? vo->bv[il] : 0};
        if ((L->q_norm || L->k_norm) && (L->bq || L->bk)) { /* as before the fused kernels: no such model is known */
            add_matvec(bd, &W[0], ain, L->q_norm ? g->qr : g->q, g->n_batch, EPI_NONE);
            add_matvec(bd, &W[1], ain, L->k_norm ? g->kr : g->k, g->n_batch, EPI_NONE);
            add_matvec(bd, &W[2], ain, g->v, g->n_batch, EPI_NONE);
            if (L->bq) add_rows(bd, g->q, g->vecs, vo->bq[il], QD, 0);
            if (L->bk) add_rows(bd, g->k, g->vecs, vo->bk[il], KD, 0);
            if (L->bv) add_rows(bd, g->v, g->vecs, vo->bv[il], VD, 0);
        } else {
            add_qkv(bd, W, ain, L->q_norm ? g->qr : g->q, L->k_norm ? g->kr : g->k, bias, bias_off);
        }
        const bool whole = hp->qk_norm_whole;
        if (L->q_norm) add_rms(bd, g->qr, g->q, vo->q_norm[il], whole ? QD : dk, whole ? 1 : (uint32_t)hp->n_head);
        if (L->k_norm) add_rms(bd, g->kr, g->k, vo->k_norm[il], whole ? KD : dk, whole ? 1 : (uint32_t)hp->n_head_kv);
        /* RoPE of q and k (smollm3's every 4th layer has none; a local layer
         * may have its own table) and the f16 K, V rows into the caches, in
         * one dispatch. The step buffer's rows (cache rows) start at word B,
         * a ring's rows at 5B: a local layer's ring is a parameter of the
         * same dispatch (backend/kv_window.h). */
        const uint32_t cs_off = L->swa && g->rope_swa_off ? (uint32_t)(g->rope_swa_off / 4) : 0;
        const bool ring = g->ring && L->swa;
        const uint32_t row_at = ring ? 5 * B : B;
        const union wgllm_kparams rs = {.rope_store = {.heads = (uint32_t)hp->n_head, .n_rot = (uint32_t)hp->n_rot,
                                                       .head_dim = dk, .q_stride = QD, .k_stride = KD, .cs_off = cs_off,
                                                       .v_stride = VD, .row_at = row_at, .rotate = L->rope ? 1 : 0}};
        const uint64_t units = (L->rope ? (uint64_t)hp->n_head * (hp->n_rot / 2) : 0) + KD / 2 + VD / 2;
        struct gop *rso = add_op(bd, prs, &rs, GROW_Y, ceil_div(units, t->wg_elem), 4, g->q, g->k, g->v, g->rope_cs);
        bind_more(rso, g->step);
        bind_more(rso, g->kc[il]);
        bind_more(rso, g->vc[il]);
        const float cap = hp->attn_softcap;
        const union wgllm_kparams ak = {.attn = {.dk = dk, .dv = dv, .k_stride = KD, .v_stride = VD,
                                                 .gqa = (uint32_t)(hp->n_head / hp->n_head_kv), .q_stride = QD,
                                                 .o_stride = OD, .row_at = row_at, .len_at = 2 * B,
                                                 .ring = ring ? (uint32_t)g->ring : 0,
                                                 .window = L->swa ? (uint32_t)hp->n_swa : 0,
                                                 .scale = hp->kq_scale, .q_scale = hp->q_scale,
                                                 .softcap = cap > 0.0f ? cap : 0.0f,
                                                 .inv_softcap = cap > 0.0f ? 1.0f / cap : 0.0f,
                                                 .temp_at = hp->attn_temp_scale != 0.0f ? 4 * B : 0}};
        struct gop *o = add_op(bd, pattn, &ak, GROW_Y, (uint32_t)hp->n_head, 4, g->q, g->kc[il], g->vc[il], g->att);
        if (o) o->b[o->nb++] = (struct wgllm_gpu_binding){g->step, 0, 0};
        if (o && g->sinks) {
            const uint64_t sks = wgllm_webgpu_sink_stride(m);
            o->b[o->nb++] = (struct wgllm_gpu_binding){g->sinks, (uint64_t)il * sks, (uint64_t)hp->n_head * 4};
        }
        /* In the last layer only the rows whose outputs are wanted go on after
         * attention (the others only had to fill the KV cache), as on the CPU:
         * they are gathered (x and att as F32 tables, the step's output rows
         * as ids) into xo / att_o, and the ops from here on run per output. */
        struct wgllm_gpu_buffer *xa = g->x, *aa = g->att;
        int cap_rows = g->n_batch;
        if (il == hp->n_layer - 1) {
            g->n_ops_layers = g->n_ops;
            struct wgllm_gpu_pipeline *pgf = pipe_of(g, WGLLM_KERNEL_GET_ROWS, WGLLM_TYPE_F32, false, bd->err);
            /* the step buffer's output rows (ids of the gathered rows) start at word 3B */
            const union wgllm_kparams gx = {.get_rows = {.width = E, .ids_off = 3 * B, .scale = 1.0f}},
                                      ga = {.get_rows = {.width = OD, .ids_off = 3 * B, .scale = 1.0f}};
            add_op(bd, pgf, &gx, GROW_Y, ceil_div(E, t->wg_elem), 3, g->x, g->step, g->xo, NULL);
            add_op(bd, pgf, &ga, GROW_Y, ceil_div(OD, t->wg_elem), 3, g->att, g->step, g->att_o, NULL);
            xa = g->xo, aa = g->att_o, cap_rows = g->out_cap;
        }
        if (!L->post_attn_norm && !L->bo) {
            add_matvec(bd, &W[3], aa, xa, cap_rows, acc_epi);
        } else {
            add_matvec(bd, &W[3], aa, g->tmp, cap_rows, L->post_attn_norm ? EPI_NONE : res_epi);
            if (L->bo) add_rows(bd, g->tmp, g->vecs, vo->bo[il], E, 0); /* gpt-oss: before the residual, as the CPU */
            add_residual(bd, xa, g->tmp, E, L->post_attn_norm, L->post_attn_norm ? vo->post_attn_norm[il] : 0);
        }
        /* the FFN's input: the pre-norm of x, or x itself (olmo2) */
        struct wgllm_gpu_buffer *fin = xa;
        if (L->ffn_norm) add_rms_for(bd, xa, g->xn, vo->ffn_norm[il], E, hp->n_expert > 0 ? NULL : &W[4]), fin = g->xn;
        if (hp->n_expert > 0) { /* the experts' FFN (webgpu_moe.c) */
            wgllm_webgpu_moe_ffn(g, bd, il, vo, fin, xa, cap_rows);
            continue;
        }
        if (!add_glu(bd, W, fin, cap_rows, gelu)) {
            add_matvec(bd, &W[4], fin, g->gate, cap_rows, EPI_NONE);
            add_matvec(bd, &W[5], fin, g->up, cap_rows, EPI_NONE);
            const union wgllm_kparams sw = {.swiglu = {.count = F * (uint32_t)cap_rows}};
            add_elems(bd, pswi, &sw, F, t->wg_elem, gelu ? 4 : 3, g->gate, g->up, g->ffh, gelu ? g->gelu_tab : NULL);
        }
        if (!L->post_ffn_norm) {
            add_matvec(bd, &W[6], g->ffh, xa, cap_rows, acc_epi);
        } else {
            add_matvec(bd, &W[6], g->ffh, g->tmp, cap_rows, EPI_NONE);
            add_residual(bd, xa, g->tmp, E, L->post_ffn_norm, vo->post_ffn_norm[il]);
        }
    }
    /* the final norm of the output rows, then the logits (soft-capped, gemma2; scaled, granite) */
    add_rms(bd, g->xo, g->xn, vo->output_norm, E, 1);
    g->n_ops_norm = g->n_ops;
    const struct epilogue out_epi = {hp->final_softcap > 0.0f ? hp->final_softcap : 0.0f, hp->logit_scale, false};
    add_matvec(bd, &g->w[7 * hp->n_layer + 1], g->xn, g->logits, g->out_cap, out_epi);
    g->n_ops_logits = g->n_ops;
    const union wgllm_kparams am = {.argmax = {.count = (uint32_t)hp->n_vocab}};
    struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_ARGMAX, 0, false, bd->err), &am, GROW_Y, 1, 2, g->logits, g->step,
                           NULL, NULL);
    if (o) o->div = 1u << 30; /* one row: y = 1 */
    /* [n_ops_logits + 1]: sampling instead of the argmax; its own slot (the
     * marker keeps it from being shared), rewritten by webgpu_generate */
    const union wgllm_kparams sk = {.sample = {.n_vocab = (uint32_t)hp->n_vocab, .len_at = 2 * (uint32_t)g->n_batch,
                                               .private_slot = KP_PRIVATE_SAMPLE, .top_k = 1, .temperature = 1.0f,
                                               .top_p = 1.0f}};
    o = add_op(bd, pipe_of(g, WGLLM_KERNEL_SAMPLE, 0, false, bd->err), &sk, GROW_Y, 1, 2, g->logits, g->step, NULL,
               NULL);
    if (o) o->div = 1u << 30;
}

enum wgllm_status wgllm_webgpu_graph_build(struct wgllm_webgpu_ctx *g, const struct vec_offsets *vo,
                                          struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &g->model->hp;
    /* dispatches, then the arena they index, then their bind groups */
    struct wgllm_webgpu_limits lim;
    wgllm_webgpu_limits_of(wgllm_gpu_get_info(g->gpu), g->tune, &lim);
    struct builder bd = {g, err, false, NULL, 0, false, lim.max_wg_storage, -1, NULL, NULL, 0};
    /* an encoder (bert): its own list, without sampling or a context shift */
    if (hp->encoder) wgllm_webgpu_encoder_ops(&bd, vo);
    else build_ops(&bd, vo);
    if (bd.failed) return err && err->status ? err->status : WGLLM_STATUS_UNSUPPORTED;
    int samp_slot = -1;
    if (!hp->encoder) {
        const union wgllm_kparams srk = {.sample = {.n_vocab = (uint32_t)hp->n_vocab, .private_slot = KP_PRIVATE_SAMPLE_ROWS}};
        samp_slot = slot_of(g, &srk);
        g->samp_pipe = pipe_of(g, WGLLM_KERNEL_SAMPLE_ROWS, 0, false, err);
        if (samp_slot < 0 || !g->samp_pipe)
            return samp_slot < 0 ? wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory")
                                 : err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    }
    g->shift_slot = g->n_slots; /* one more slot: the context shift's, written per shift */
    g->arena = wgllm_webgpu_gbuf(g, (uint64_t)(g->n_slots + 1) * SLOT_BYTES, WGLLM_GPU_UNIFORM, "param arena", &g->plan.params, err);
    if (!g->arena) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    /* an encoder has neither (its sequence operations have nothing to act on) */
    g->shift_pipe = hp->encoder ? NULL : pipe_of(g, WGLLM_KERNEL_ROPE_SHIFT_F16, WGLLM_TYPE_F16, hp->rope_type == WGLLM_ROPE_NEOX, err);
    if (!hp->encoder && !g->shift_pipe) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    for (int il = 0; il < hp->n_layer && !hp->encoder; il++) {
        struct wgllm_gpu_binding sb[4] = {
            {g->arena, (uint64_t)g->shift_slot * SLOT_BYTES, sizeof(union wgllm_kparams)},
            {g->shift_tmp, 0, 0}, {g->rope_cs, 0, 0}, {g->kc[il], 0, 0}};
        /* a local layer with its own RoPE turns by the second table (webgpu_seq_shift writes both) */
        if (g->model->layers[il].swa && g->rope_swa_off) sb[2] = (struct wgllm_gpu_binding){g->rope_cs, g->rope_swa_off, 0};
        if (!(g->shift_bg[il] = wgllm_gpu_bindgroup_create(g->gpu, g->shift_pipe, 4, sb, err)))
            return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    }
    const struct wgllm_gpu_binding srb[5] = {
        {g->arena, (uint64_t)samp_slot * SLOT_BYTES, sizeof(union wgllm_kparams)},
        {g->logits, 0, 0}, {g->samp_in, 0, 0}, {g->samp_out, 0, 0}, {g->samp_mask, 0, 0}};
    if (!hp->encoder && !(g->samp_bg = wgllm_gpu_bindgroup_create(g->gpu, g->samp_pipe, 5, srb, err)))
        return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    for (int i = 0; i < g->n_slots; i++)
        wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)i * SLOT_BYTES, &g->slots[i], sizeof g->slots[i]);
    for (int i = 0; i < g->n_ops; i++) {
        struct gop *o = &g->ops[i];
        o->b[0] = (struct wgllm_gpu_binding){g->arena, (uint64_t)o->slot * SLOT_BYTES, sizeof(union wgllm_kparams)};
        o->bg = wgllm_gpu_bindgroup_create(g->gpu, o->pipe, o->nb, o->b, err);
        if (!o->bg) {
            wgllm_error_prefix(err, "WebGPU dispatch %d: ", i);
            return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
        }
    }
    return WGLLM_STATUS_OK;
}

/* ---- for webgpu_encoder.c (webgpu_internal.h) ------------------------------ */

struct wgllm_gpu_pipeline *wgllm_webgpu_pipe(struct wgllm_webgpu_ctx *g, enum wgllm_kernel k, uint32_t type,
                                             bool neox, struct wgllm_error *err) {
    return pipe_of(g, k, type, neox, err);
}

struct gop *wgllm_webgpu_add_op(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                                enum grow grow, uint32_t x, int nb, struct wgllm_gpu_buffer *b1,
                                struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4) {
    return add_op(bd, p, kp, grow, x, nb, b1, b2, b3, b4);
}

void wgllm_webgpu_add_elems(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                            uint32_t per, uint32_t div, int nb, struct wgllm_gpu_buffer *b1,
                            struct wgllm_gpu_buffer *b2, struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4) {
    add_elems(bd, p, kp, per, div, nb, b1, b2, b3, b4);
}

void wgllm_webgpu_add_matvec(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                             struct wgllm_gpu_buffer *y, int cap) {
    add_matvec(bd, w, x, y, cap, EPI_NONE);
}

void wgllm_webgpu_add_rows(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                           uint32_t n, uint32_t y_stride) {
    add_rows(bd, x, y, y_off, n, y_stride);
}

/* ---- for webgpu_moe.c (webgpu_internal.h) ------------------------------- */

struct wgllm_gpu_buffer *wgllm_webgpu_add_round(struct builder *bd, struct wgllm_gpu_buffer *x, uint32_t vt,
                                                uint32_t width, int cap) {
    struct wgllm_webgpu_ctx *g = bd->g;
    if (vt == WGLLM_TYPE_F32 || !wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt)) return x;
    if (bd->rsrc != x || bd->rtype != vt) { /* as add_matvec rounds its input */
        const union wgllm_kparams kp = {.round_act = {.count = width * (uint32_t)cap}};
        add_elems(bd, pipe_of(g, WGLLM_KERNEL_ROUND_ACT, vt, false, bd->err), &kp, width, 32 * g->tune->wg_elem, 2, x,
                  g->xr, NULL, NULL);
        bd->rsrc = x, bd->rtype = vt;
    }
    return g->xr;
}
