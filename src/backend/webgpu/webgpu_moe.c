/*
 * webgpu_moe.c - mixture-of-experts models on the WebGPU backend
 * (webgpu_internal.h): their weights beyond the dense block's seven (the
 * router and the shared expert; the expert stacks are the block's gate, up
 * and down, split by webgpu_plan.c only between experts), their buffers
 * (router logits, the routing buffer, each choice's gate / up / SwiGLU /
 * down rows) and the dispatches of their FFN, in the CPU backend's order
 * (backend/cpu/forward.c, moe_ffn):
 *
 *   router mat-vec [+ its bias, gpt-oss] -> MOE_ROUTE (softmax, top-k,
 *   renormalisation; gpt-oss: top-k of the logits, their softmax: ids and
 *   weights into the routing buffer) -> MATVEC_ID gate and up of each
 *   token's chosen experts -> SwiGLU [gpt-oss: MOE_GLU_OAI, the experts'
 *   gate/up biases and SwiGLU-OAI] -> MATVEC_ID down [+ MOE_BIAS, the
 *   experts' down biases] -> [shared expert:
 *   its gate/up/SwiGLU/down and, qwen2moe, its gate's logit] -> MOE_SUM
 *   (weighted sum + shared expert x sigmoid gate, x granite's residual
 *   scale, added to the stream)
 *
 * The expert ids never come back to the host: MATVEC_ID reads them from
 * the routing buffer, so a pass is still one submit and decode reads only
 * the chosen experts' rows. A pass of MM_MIN_TOKENS or more (prefill)
 * groups its tokens by expert instead, as llama.cpp's MUL_MAT_ID: after
 * MOE_ROUTE, MOE_BUCKET lists each expert's choices in token order in the
 * routing buffer (once per layer, for gate, up and down), and the three
 * mat-vecs become MATMUL_ID, MATMUL's tiles over each expert's rows and its
 * listed choices: an expert's weights are read once per tile of its tokens,
 * not once per token. Its outputs go to the slots MATVEC_ID writes, from
 * the same rounded inputs (so SwiGLU, the biases and MOE_SUM are the same
 * ops), with MATMUL's sums, as the dense layers' prefill. Both versions are
 * recorded (WHEN_FEW / WHEN_MANY); a stack whose grid would pass the
 * device's limit keeps MATVEC_ID for every pass.
 */
#include "backend/webgpu/webgpu_internal.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the route kernel's private arrays (kernels_moe.c) */
#define MOE_MAX_EXPERTS 256
#define MOE_MAX_USED 64

enum { MW_ROUTER, MW_SH_GATE, MW_SH_UP, MW_SH_DOWN, MW_SH_GATE_INP, MW_PER_LAYER };

struct wgllm_webgpu_moe {
    struct gweight *w; /* MW_PER_LAYER per layer (n_pieces 0: absent) */
    int n_w;
    /* n_batch rows each: router logits (n_expert), routing (ids then weights, n_expert_used each;
       then MOE_BUCKET's n_expert + 1 offsets and its list of n_batch x n_expert_used choices),
       the choices' gate / up / SwiGLU (n_expert_used x n_ff_exp; gate then holds the SwiGLU rounded
       for the down mat-vec) and down rows (n_expert_used x n_embd); the shared expert's gate / up /
       SwiGLU (n_ff_shexp) and its gate's logit (1) */
    struct wgllm_gpu_buffer *logits, *route, *gate, *up, *ffh, *out, *sgate, *sup, *sffh, *sgl;
};

static const struct wgllm_weight *moe_weight(const struct wgllm_layer *L, int j) {
    const struct wgllm_weight *ws[MW_PER_LAYER] = {&L->gate_inp, &L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_gate_inp};
    return ws[j];
}

bool wgllm_webgpu_moe_formats_ok(const struct wgllm_model *m, char *why, size_t cap) {
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return true;
    if (hp->n_expert > MOE_MAX_EXPERTS || hp->n_expert_used < 1 || hp->n_expert_used > MOE_MAX_USED ||
        hp->n_expert_used > hp->n_expert) {
        snprintf(why, cap, "%d experts with %d used per token exceed the WebGPU router's limits (at most %d experts, "
                 "1 to %d used); use the CPU backend", hp->n_expert, hp->n_expert_used, MOE_MAX_EXPERTS, MOE_MAX_USED);
        return false;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *stacks[3] = {&L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 3; j++)
            if (!wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC_ID, stacks[j]->type)) {
                snprintf(why, cap, "expert stack %s is %s, which has no WebGPU kernel yet", stacks[j]->name,
                         wgllm_type_name(stacks[j]->type));
                return false;
            }
        for (int j = 0; j < MW_PER_LAYER; j++) {
            const struct wgllm_weight *w = moe_weight(L, j);
            if (w->ne1 && !wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, w->type)) {
                snprintf(why, cap, "tensor %s is %s, which has no WebGPU kernel yet", w->name, wgllm_type_name(w->type));
                return false;
            }
        }
    }
    return true;
}

/* Rounded inputs are whole blocks of 32 (ROUND_ACT): a width the
 * experts' rounding would cut. */
static bool round_ok(const struct wgllm_weight *w, uint64_t width) {
    const uint32_t vt = wgllm_type_traits(w->type)->vec_dot_type;
    return vt == WGLLM_TYPE_F32 || !wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt) || width % 32 == 0;
}

enum wgllm_status wgllm_webgpu_moe_check(const struct wgllm_model *m, const struct wgllm_webgpu_limits *lim,
                                         struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return WGLLM_STATUS_OK;
    char why[256] = "";
    if (!wgllm_webgpu_moe_formats_ok(m, why, sizeof why))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: %s", why);
    const uint64_t X = (uint64_t)hp->n_expert, K = (uint64_t)hp->n_expert_used, FE = (uint64_t)hp->n_ff_exp,
                   E = (uint64_t)hp->n_embd;
    /* MATVEC_ID's grid: ceil(rows / rows_matvec) workgroups per choice along x */
    const uint64_t wide = FE > E ? FE : E, gx = ((wide + lim->rows_matvec - 1) / lim->rows_matvec) * K;
    if (gx > lim->max_workgroups_per_dim)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: the experts' mat-vec needs %llu workgroups "
                               "per dimension (%llu rows x %llu used), the device allows %u", (unsigned long long)gx,
                               (unsigned long long)wide, (unsigned long long)K, lim->max_workgroups_per_dim);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *stacks[3] = {&L->w_gate, &L->w_up, &L->w_down};
        const uint64_t rows[3] = {FE, FE, E}, widths[3] = {E, E, FE};
        for (int j = 0; j < 3; j++) {
            const struct wgllm_weight *w = stacks[j];
            if ((uint64_t)w->n_expert != X || (uint64_t)w->ne1 != X * rows[j] || (uint64_t)w->ne0 != widths[j])
                return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "WebGPU: expert stack %s is %lld x %lld "
                                       "in %d experts, not %llu experts of %llu x %llu", w->name, (long long)w->ne0,
                                       (long long)w->ne1, w->n_expert, (unsigned long long)X,
                                       (unsigned long long)widths[j], (unsigned long long)rows[j]);
            if (!round_ok(w, widths[j]))
                return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: expert stack %s: rows of %llu are not "
                                       "whole blocks of 32 for its input's rounding", w->name,
                                       (unsigned long long)widths[j]);
        }
        int64_t r;
        int pieces;
        for (int j = 0; j < MW_PER_LAYER; j++) {
            const struct wgllm_weight *w = moe_weight(L, j);
            if (!w->ne1) continue;
            enum wgllm_status st = wgllm_webgpu_weight_rows(lim, w, &r, &pieces, err);
            if (st) return st;
        }
    }
    return WGLLM_STATUS_OK;
}

uint64_t wgllm_webgpu_moe_weight_bytes(const struct wgllm_model *m) {
    uint64_t total = 0;
    for (int il = 0; m->hp.n_expert > 0 && il < m->hp.n_layer; il++)
        for (int j = 0; j < MW_PER_LAYER; j++) {
            const struct wgllm_weight *w = moe_weight(&m->layers[il], j);
            if (w->ne1) total += ((uint64_t)w->row_size * (uint64_t)w->ne1 + 15) & ~(uint64_t)15;
        }
    return total;
}

uint64_t wgllm_webgpu_moe_tok_floats(const struct wgllm_model *m) {
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return 0;
    const uint64_t K = (uint64_t)hp->n_expert_used, FS = hp->n_ff_shexp > 0 ? (uint64_t)hp->n_ff_shexp : 0;
    return (uint64_t)hp->n_expert + 3 * K + 3 * K * (uint64_t)hp->n_ff_exp + K * (uint64_t)hp->n_embd +
           (FS ? 3 * FS + 1 : 0);
}

uint64_t wgllm_webgpu_moe_row_floats(const struct wgllm_model *m) {
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return 0;
    const uint64_t K = (uint64_t)hp->n_expert_used, FE = (uint64_t)hp->n_ff_exp, E = (uint64_t)hp->n_embd;
    uint64_t r = WGLLM_MAX((uint64_t)hp->n_expert, WGLLM_MAX(K * FE, K * E));
    return WGLLM_MAX(r, hp->n_ff_shexp > 0 ? (uint64_t)hp->n_ff_shexp : 0);
}

enum wgllm_status wgllm_webgpu_moe_alloc(struct wgllm_webgpu_ctx *g, const struct wgllm_webgpu_limits *lim,
                                         uint64_t *pending, struct wgllm_error *err) {
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return WGLLM_STATUS_OK;
    struct wgllm_webgpu_moe *moe = g->moe = calloc(1, sizeof *moe);
    if (moe) moe->w = calloc((size_t)hp->n_layer * MW_PER_LAYER, sizeof *moe->w);
    if (!moe || !moe->w) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    moe->n_w = hp->n_layer * MW_PER_LAYER;
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (int il = 0; il < hp->n_layer && !st; il++)
        for (int j = 0; j < MW_PER_LAYER && !st; j++) {
            const struct wgllm_weight *w = moe_weight(&m->layers[il], j);
            if (w->ne1) st = wgllm_webgpu_plan_weight(g, lim, w, &moe->w[il * MW_PER_LAYER + j], pending, err);
        }
    if (st) return st;
    /* sizes within a binding: the plan's n_batch fits wgllm_webgpu_moe_row_floats per token */
    const uint64_t B = (uint64_t)g->n_batch, K = (uint64_t)hp->n_expert_used, FE = (uint64_t)hp->n_ff_exp,
                   X = (uint64_t)hp->n_expert,
                   E = (uint64_t)hp->n_embd, FS = hp->n_ff_shexp > 0 ? (uint64_t)hp->n_ff_shexp : 0;
    const struct {
        struct wgllm_gpu_buffer **b;
        uint64_t floats;
        const char *name;
    } bufs[] = {{&moe->logits, B * (uint64_t)hp->n_expert, "moe router logits"}, {&moe->route, B * 3 * K + X + 1, "moe routing"},
                {&moe->gate, B * K * FE, "moe gate"}, {&moe->up, B * K * FE, "moe up"},
                {&moe->ffh, B * K * FE, "moe ffh"}, {&moe->out, B * K * E, "moe out"},
                {&moe->sgate, B * FS, "moe shared gate"}, {&moe->sup, B * FS, "moe shared up"},
                {&moe->sffh, B * FS, "moe shared ffh"}, {&moe->sgl, FS ? B : 0, "moe shared gate logit"}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        if (!bufs[i].floats) continue;
        *bufs[i].b = wgllm_webgpu_gbuf(g, bufs[i].floats * 4, WGLLM_GPU_STORAGE, bufs[i].name, &g->plan.activations, err);
        if (!*bufs[i].b) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }
    return WGLLM_STATUS_OK;
}

/* A dispatch through the graph's builder; keep_round: it does not write xr,
 * so the input rounded for the experts' mat-vecs stays valid after it. */
static struct gop *moe_op(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp,
                          enum grow grow, uint32_t x, int nb, struct wgllm_gpu_buffer *b1, struct wgllm_gpu_buffer *b2,
                          struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4, bool keep_round) {
    bd->keep_round = keep_round;
    struct gop *o = wgllm_webgpu_add_op(bd, p, kp, grow, x, nb, b1, b2, b3, b4);
    bd->keep_round = false;
    return o;
}

/* The routing buffer's regions for cap rows: ids, weights (MOE_ROUTE),
 * then MOE_BUCKET's offsets and list. */
static uint32_t route_w_at(uint32_t cap, uint32_t K) { return cap * K; }
static uint32_t route_off_at(uint32_t cap, uint32_t K) { return 2 * cap * K; }
static uint32_t route_list_at(uint32_t cap, uint32_t K, uint32_t X) { return 2 * cap * K + X + 1; }

/* True when MATMUL_ID's grid for every piece of a stack of `rows`-row
 * experts fits the device (workgroups along x: row tiles x experts). */
static bool grouped_fits(const struct wgllm_webgpu_ctx *g, const struct gweight *w, uint32_t rows) {
    const uint64_t tiles = ceil_div(rows, g->tune->mm_tile_n);
    for (int i = 0; i < w->n_pieces; i++)
        if (tiles * (uint64_t)(w->piece[i].rows / rows) > wgllm_gpu_get_info(g->gpu)->max_workgroups_per_dim)
            return false;
    return wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL_ID, w->type);
}

/* The chosen experts' rows of one stack: a dispatch per piece (each piece
 * holds whole experts; a choice of an expert elsewhere is skipped there).
 * With `grouped` (grouped_fits; MOE_BUCKET's list is made in passes of
 * many tokens), those passes run MATMUL_ID instead, tiles of each expert's
 * listed choices. */
static void add_matvec_id(struct wgllm_webgpu_ctx *g, struct builder *bd, const struct gweight *w,
                          struct wgllm_gpu_buffer *x, uint32_t x_div, struct wgllm_gpu_buffer *y, uint32_t cap,
                          bool grouped) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint32_t X = (uint32_t)hp->n_expert, K = (uint32_t)hp->n_expert_used;
    const uint32_t rows = (uint32_t)(w->ne1 / X), groups = ceil_div(rows, g->tune->rows_matvec);
    struct wgllm_gpu_pipeline *p = wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MATVEC_ID, w->type, false, bd->err);
    for (int i = 0; i < w->n_pieces; i++) {
        const union wgllm_kparams kp = {.matvec_id = {.rows = rows, .x_div = x_div, .k = (uint32_t)w->ne0,
                                                      .ids_at = 0, .e0 = (uint32_t)(w->piece[i].row0 / rows),
                                                      .n_exp = (uint32_t)(w->piece[i].rows / rows), .used = K,
                                                      .groups = groups}};
        struct gop *o = moe_op(bd, p, &kp, GROW_Y, groups * K, 4, w->piece[i].buf, x, y, g->moe->route, true);
        if (o && grouped) o->when = WHEN_FEW;
    }
    if (!grouped) return;
    const uint32_t tiles = ceil_div(rows, g->tune->mm_tile_n);
    p = wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MATMUL_ID, w->type, false, bd->err);
    for (int i = 0; i < w->n_pieces; i++) {
        const uint32_t n_exp = (uint32_t)(w->piece[i].rows / rows);
        const union wgllm_kparams kp = {.matmul_id = {.rows = rows, .x_div = x_div, .k = (uint32_t)w->ne0,
                                                      .list_at = route_list_at(cap, K, X),
                                                      .e0 = (uint32_t)(w->piece[i].row0 / rows),
                                                      .off_at = route_off_at(cap, K), .tiles = tiles}};
        struct gop *o = moe_op(bd, p, &kp, GROW_Y, tiles * n_exp, 4, w->piece[i].buf, x, y, g->moe->route, true);
        if (o) o->div = g->tune->mm_tile_m, o->when = WHEN_MANY;
    }
}

void wgllm_webgpu_moe_ffn(struct wgllm_webgpu_ctx *g, struct builder *bd, int il, const struct vec_offsets *vo,
                          struct wgllm_gpu_buffer *fin,
                          struct wgllm_gpu_buffer *xa, int cap) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const struct wgllm_layer *L = &g->model->layers[il];
    struct wgllm_webgpu_moe *moe = g->moe;
    const struct gweight *W = &g->w[7 * il], *MW = &moe->w[il * MW_PER_LAYER];
    const uint32_t E = (uint32_t)hp->n_embd, X = (uint32_t)hp->n_expert, K = (uint32_t)hp->n_expert_used,
                   FE = (uint32_t)hp->n_ff_exp, FS = hp->n_ff_shexp > 0 ? (uint32_t)hp->n_ff_shexp : 0;
    const uint32_t wg = g->tune->wg_elem, C = (uint32_t)cap;
    /* the router's logits, then each row's choices into the routing buffer */
    wgllm_webgpu_add_matvec(bd, &MW[MW_ROUTER], fin, moe->logits, cap);
    if (L->b_gate_inp) wgllm_webgpu_add_rows(bd, moe->logits, g->vecs, vo->b_gate_inp[il], X, 0); /* gpt-oss */
    const union wgllm_kparams rk = {.moe_route = {.rows = C, .n_expert = X, .used = K, .ids_at = 0,
                                                  .w_at = route_w_at(C, K),
                                                  .norm = hp->moe_norm_w ? 1u : 0u,
                                                  .softmax_w = hp->moe_softmax_weight ? 1u : 0u}};
    struct gop *o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MOE_ROUTE, 0, false, bd->err), &rk, GROW_XE, 1,
                                          2, moe->logits, moe->route, NULL, NULL, false);
    if (o) o->per = 1, o->div = wg;
    /* a pass of many tokens: the choices grouped by expert for MATMUL_ID (the grid's y is the token count) */
    const bool grouped[3] = {grouped_fits(g, &W[4], FE), grouped_fits(g, &W[5], FE), grouped_fits(g, &W[6], E)};
    const union wgllm_kparams bu = {.moe_bucket = {.n_expert = X, .used = K, .ids_at = 0, .off_at = route_off_at(C, K),
                                                   .list_at = route_list_at(C, K, X)}};
    if (grouped[0] || grouped[1] || grouped[2]) {
        o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MOE_BUCKET, 0, false, bd->err), &bu, GROW_Y, 1, 1,
                   moe->route, NULL, NULL, NULL, true);
        if (o) o->div = 1, o->when = WHEN_MANY;
    }
    /* gate and up of the chosen experts (one rounded input per token, shared with the shared expert's) */
    struct wgllm_gpu_buffer *xg = wgllm_webgpu_add_round(bd, fin, wgllm_type_traits(W[4].type)->vec_dot_type, E, cap);
    add_matvec_id(g, bd, &W[4], xg, K, moe->gate, C, grouped[0]);
    struct wgllm_gpu_buffer *xu = wgllm_webgpu_add_round(bd, fin, wgllm_type_traits(W[5].type)->vec_dot_type, E, cap);
    add_matvec_id(g, bd, &W[5], xu, K, moe->up, C, grouped[1]);
    if (FS) {
        wgllm_webgpu_add_matvec(bd, &MW[MW_SH_GATE], fin, moe->sgate, cap);
        wgllm_webgpu_add_matvec(bd, &MW[MW_SH_UP], fin, moe->sup, cap);
        if (MW[MW_SH_GATE_INP].n_pieces) wgllm_webgpu_add_matvec(bd, &MW[MW_SH_GATE_INP], fin, moe->sgl, cap);
    }
    struct wgllm_gpu_pipeline *pswi = wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_SWIGLU, 0, false, bd->err);
    if (hp->ffn_act == WGLLM_FFN_SWIGLU_OAI) {
        /* gpt-oss: the chosen experts' gate and up biases, then SwiGLU-OAI
         * with llama.cpp's fixed alpha and limit (as the CPU's moe_ffn) */
        const union wgllm_kparams so = {.moe_bias = {.count = K * FE * C, .width = FE, .b_off = vo->b_gate_exps[il],
                                                     .ids_at = 0, .u_off = vo->b_up_exps[il], .alpha = 1.702f,
                                                     .limit = 7.0f}};
        o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MOE_GLU_OAI, 0, false, bd->err), &so, GROW_XE, 1, 4,
                   moe->gate, moe->up, moe->ffh, moe->route, false);
        if (o) o->b[o->nb++] = (struct wgllm_gpu_binding){g->vecs, 0, 0}, o->per = K * FE, o->div = wg;
    } else {
        const union wgllm_kparams sw = {.swiglu = {.count = K * FE * C}};
        o = moe_op(bd, pswi, &sw, GROW_XE, 1, 3, moe->gate, moe->up, moe->ffh, NULL, false);
        if (o) o->per = K * FE, o->div = wg;
    }
    /* the down input of each choice rounded as the CPU rounds it, into gate (free again) */
    struct wgllm_gpu_buffer *xd = moe->ffh;
    const uint32_t vd = wgllm_type_traits(W[6].type)->vec_dot_type;
    if (vd != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vd)) {
        const union wgllm_kparams ra = {.round_act = {.count = K * FE * C}};
        o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_ROUND_ACT, vd, false, bd->err), &ra, GROW_XE, 1, 2,
                                  moe->ffh, moe->gate, NULL, NULL, false);
        if (o) o->per = K * FE, o->div = 32 * wg;
        xd = moe->gate;
    }
    add_matvec_id(g, bd, &W[6], xd, 1, moe->out, C, grouped[2]);
    if (L->b_down_exps) { /* gpt-oss: each choice's expert's down bias */
        const union wgllm_kparams bk = {.moe_bias = {.count = K * E * C, .width = E, .b_off = vo->b_down_exps[il],
                                                     .ids_at = 0}};
        o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MOE_BIAS, 0, false, bd->err), &bk, GROW_XE, 1, 3,
                   moe->out, moe->route, g->vecs, NULL, false);
        if (o) o->per = K * E, o->div = wg;
    }
    /* the shared expert's SwiGLU and down, into tmp */
    if (FS) {
        const union wgllm_kparams ss = {.swiglu = {.count = FS * C}};
        o = moe_op(bd, pswi, &ss, GROW_XE, 1, 3, moe->sgate, moe->sup, moe->sffh, NULL, false);
        if (o) o->per = FS, o->div = wg;
        wgllm_webgpu_add_matvec(bd, &MW[MW_SH_DOWN], moe->sffh, g->tmp, cap);
    }
    const float rs = hp->residual_scale;
    const union wgllm_kparams su = {.moe_sum = {.width = E, .used = K, .w_at = route_w_at(C, K),
                                                .shared = !FS ? 0u : MW[MW_SH_GATE_INP].n_pieces ? 2u : 1u,
                                                .scaled = rs != 1.0f, .scale = rs}};
    o = moe_op(bd, wgllm_webgpu_pipe(bd->g, WGLLM_KERNEL_MOE_SUM, 0, false, bd->err), &su, GROW_Y, ceil_div(E, wg), 4,
                              xa, moe->out, moe->route, g->tmp, false);
    if (o) o->b[o->nb++] = (struct wgllm_gpu_binding){FS && moe->sgl ? moe->sgl : moe->logits, 0, 0};
}

void wgllm_webgpu_moe_free(struct wgllm_webgpu_ctx *g) {
    struct wgllm_webgpu_moe *moe = g->moe;
    if (!moe) return;
    if (g->gpu) {
        for (int i = 0; moe->w && i < moe->n_w; i++)
            for (int p = 0; p < moe->w[i].n_pieces; p++) wgllm_gpu_buffer_destroy(g->gpu, moe->w[i].piece[p].buf);
        struct wgllm_gpu_buffer *bs[] = {moe->logits, moe->route, moe->gate, moe->up,  moe->ffh,
                                         moe->out,    moe->sgate, moe->sup,  moe->sffh, moe->sgl};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) wgllm_gpu_buffer_destroy(g->gpu, bs[i]);
    }
    free(moe->w);
    free(moe);
    g->moe = NULL;
}
