/*
 * forward_webgpu.c - the decoder forward pass on WebGPU (see
 * forward_webgpu.h): the memory plan, weight streaming, the list of
 * dispatches of one token (built once: pipelines, parameter slots and bind
 * groups), and decode = write the step's token/position + attention length,
 * record the list into one batch, submit, read the logits back.
 *
 * Step order follows the CPU backend (backend/cpu/forward.c): get_rows ->
 * per layer RMSNorm -> Q/K/V mat-vecs (+ qwen2 biases; qwen3 per-head q/k
 * RMSNorm) -> RoPE -> K,V stored as f16 -> attention -> output projection ->
 * residual add -> RMSNorm -> gate/up -> SwiGLU -> down -> residual add; final
 * RMSNorm -> logits. Rounding mirrors the CPU backend too (kernels.c): mat-vec
 * inputs to the weight's vec_dot_type, q and attention probabilities to
 * f16, lossless sums where the CPU sums in double, and the RoPE cos/sin
 * table made on the host each step by the CPU's own wgllm_op_rope_cache.
 *
 * Parameters: one uniform buffer of 256-byte slots (the arena). Slots are
 * deduplicated at build time (the layers share most of them) and written
 * once at init, except the attention slot, which holds the number of cached
 * positions and is rewritten before every submit. Queue writes are ordered
 * with submits on the queue timeline, so rewriting a slot after submitting
 * the batch that reads it never changes what that batch sees: the arena
 * needs no fences, and prompt tokens are queued back to back.
 */
#include "backend/webgpu/forward_webgpu.h"
#include "backend/cpu/ops.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PIECES 16
#define SLOT_BYTES 256
#define UPLOAD_CHUNK ((size_t)16 << 20)       /* bytes per queue write */
#define UPLOAD_SYNC_BYTES ((uint64_t)64 << 20) /* queued bytes before waiting: bounds Dawn's staging */

/* A matrix on the GPU: rows split across buffers when needed. */
struct gweight {
    uint32_t type;
    int64_t ne0, ne1;
    size_t row_size;
    int n_pieces;
    struct {
        struct wgllm_gpu_buffer *buf;
        int64_t row0, rows;
    } piece[MAX_PIECES];
};

struct gop {
    struct wgllm_gpu_pipeline *pipe;
    struct wgllm_gpu_bindgroup *bg;
    uint32_t x, y, z;
    /* until the bind group exists */
    int slot, nb;
    struct wgllm_gpu_binding b[6];
};

struct wgllm_webgpu_ctx {
    struct wgllm_model *model;
    struct wgllm_gpu *gpu;
    const struct wgllm_wgsl_tune *tune;
    int n_ctx, n_past;

    struct gweight *w;  /* 7 per layer, then tok_embd, output */
    int n_w;
    struct wgllm_gpu_buffer *vecs;                 /* every f32 vector */
    struct wgllm_gpu_buffer **kc, **vc;            /* per layer */
    struct wgllm_gpu_buffer *x, *xn, *q, *k, *v, *qr, *kr, *att, *tmp, *gate, *up, *ffh, *logits;
    struct wgllm_gpu_buffer *xr; /* a mat-vec input rounded as the CPU rounds it (ROUND_ACT) */
    struct wgllm_gpu_buffer *rope_cs; /* the step's RoPE cos/sin pairs, made on the host (n_rot floats) */
    struct wgllm_gpu_buffer *scores;  /* attention scores/probabilities: n_ctx floats per head */
    float *rope_host;                 /* host copy of rope_cs */
    struct wgllm_gpu_buffer *step;                 /* u32: [0] token, [1] position */
    struct wgllm_gpu_buffer *arena, *readback;

    struct gop *ops;
    int n_ops, cap_ops, n_ops_layers; /* ops [0, n_ops_layers) fill the KV cache; the rest make logits */
    struct wgllm_kparams *slots;      /* host copy of the arena */
    int n_slots, cap_slots;
    struct wgllm_kparams attn_kp;     /* slot 0 */

    float *logits_host; /* logits_cap rows */
    int logits_cap, n_logits;
    struct wgllm_webgpu_plan plan;
};

/* ---- plan and upload ---------------------------------------------------- */

static struct wgllm_gpu_buffer *gbuf(struct wgllm_webgpu_ctx *g, uint64_t bytes, int usage, const char *label,
                                     uint64_t *category, struct wgllm_error *err) {
    struct wgllm_gpu_buffer *b = wgllm_gpu_buffer_create(g->gpu, bytes ? bytes : 4, usage, label, err);
    if (b && category) *category += wgllm_gpu_buffer_size(b);
    return b;
}

/* Waits for all queued work by reading back 4 bytes through the context's
 * own readback buffer (no buffer is created). */
static enum wgllm_status gsync(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
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
            enum wgllm_status st = gsync(g, err);
            if (st) return st;
            *pending = 0;
        }
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
    int64_t max_rows = (int64_t)(max_bytes / w->row_size);
    int64_t disp_rows = (int64_t)info->max_workgroups_per_dim * g->tune->rows_matvec;
    if (disp_rows < max_rows) max_rows = disp_rows;
    while (max_rows > 1 && (max_rows * (int64_t)w->row_size) % 4) max_rows--;
    if (max_rows < 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s: a row of %zu bytes exceeds the device's "
                               "storage binding size %llu", w->name, w->row_size, (unsigned long long)max_bytes);
    gw->n_pieces = (int)((w->ne1 + max_rows - 1) / max_rows);
    if (gw->n_pieces > MAX_PIECES)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor %s needs %d pieces of at most %lld rows (limit %d)",
                               w->name, gw->n_pieces, (long long)max_rows, MAX_PIECES);
    if (gw->n_pieces > 1) g->plan.n_split_tensors++;
    for (int p = 0; p < gw->n_pieces; p++) {
        int64_t r0 = p * max_rows, rows = WGLLM_MIN(max_rows, w->ne1 - r0);
        size_t bytes = (size_t)rows * w->row_size;
        gw->piece[p].row0 = r0, gw->piece[p].rows = rows;
        gw->piece[p].buf = gbuf(g, bytes, WGLLM_GPU_STORAGE, w->name, &g->plan.weights, err);
        if (!gw->piece[p].buf) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        enum wgllm_status st =
            upload(g, gw->piece[p].buf, 0, (const char *)w->data + (size_t)r0 * w->row_size, bytes, pending, err);
        if (st) return st;
    }
    return WGLLM_STATUS_OK;
}

/* ---- the list of dispatches -------------------------------------------- */

static struct wgllm_gpu_pipeline *pipe_of(struct wgllm_webgpu_ctx *g, enum wgllm_kernel k, uint32_t type, bool neox,
                                          struct wgllm_error *err) {
    struct wgllm_kernel_key key = {.kernel = k, .type = type, .neox = neox};
    char *src = wgllm_wgsl_generate(&key, g->tune);
    if (!src) {
        wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "no WebGPU %s kernel for %s", wgllm_wgsl_kernel_name(k),
                        wgllm_type_name(type));
        return NULL;
    }
    char label[64];
    snprintf(label, sizeof label, "%s_%s", wgllm_wgsl_kernel_name(k), wgllm_type_name(type));
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(g->gpu, src, label, err);
    free(src);
    return p;
}

/* The arena slot holding kp (shared with an equal earlier one). */
static int slot_of(struct wgllm_webgpu_ctx *g, const struct wgllm_kparams *kp) {
    for (int i = 1; i < g->n_slots; i++)
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

struct builder {
    struct wgllm_webgpu_ctx *g;
    struct wgllm_error *err;
    bool failed;
    /* what xr holds: x rounded for vec_dot_type rtype (NULL: nothing valid) */
    struct wgllm_gpu_buffer *rsrc;
    uint32_t rtype;
    bool keep_round; /* the op being added does not write rsrc */
};

/* Adds a dispatch; bindings 1.. are whole buffers. slot -1: by value of kp. */
static void add_op(struct builder *bd, struct wgllm_gpu_pipeline *p, const struct wgllm_kparams *kp, int slot,
                   uint32_t x, int nb, struct wgllm_gpu_buffer *b1, struct wgllm_gpu_buffer *b2,
                   struct wgllm_gpu_buffer *b3, struct wgllm_gpu_buffer *b4) {
    struct wgllm_webgpu_ctx *g = bd->g;
    if (!bd->keep_round) bd->rsrc = NULL;
    if (bd->failed) return;
    if (!p) {
        bd->failed = true;
        return;
    }
    if (g->n_ops == g->cap_ops) {
        int cap = g->cap_ops ? 2 * g->cap_ops : 128;
        void *np = realloc(g->ops, (size_t)cap * sizeof *g->ops);
        if (!np) {
            wgllm_error_set(bd->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the dispatch list");
            bd->failed = true;
            return;
        }
        g->ops = np;
        g->cap_ops = cap;
    }
    struct gop *o = &g->ops[g->n_ops++];
    memset(o, 0, sizeof *o);
    o->pipe = p;
    o->x = x ? x : 1, o->y = 1, o->z = 1;
    o->slot = slot >= 0 ? slot : slot_of(g, kp);
    if (o->slot < 0) {
        wgllm_error_set(bd->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for kernel parameters");
        bd->failed = true;
        return;
    }
    struct wgllm_gpu_buffer *bs[4] = {b1, b2, b3, b4};
    o->nb = nb + 1;
    for (int i = 0; i < nb; i++) o->b[i + 1] = (struct wgllm_gpu_binding){bs[i], 0, 0};
}

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* y = W x. The input is first rounded as the CPU backend rounds it (to the
 * weight's vec_dot_type: Q8_0 blocks for Q8_0/Q4_0, f16 for F16), so that
 * both backends compute the same products and greedy decoding agrees even
 * on near-ties; consecutive mat-vecs of one input share the rounding. */
static void add_matvec(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                       struct wgllm_gpu_buffer *y) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t vt = wgllm_type_traits(w->type)->vec_dot_type;
    if (vt != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt)) {
        if (bd->rsrc != x || bd->rtype != vt) {
            struct wgllm_kparams kp = {.n = (uint32_t)w->ne0};
            add_op(bd, pipe_of(g, WGLLM_KERNEL_ROUND_ACT, vt, false, bd->err), &kp, -1,
                   ceil_div(ceil_div(kp.n, 32), g->tune->wg_elem), 2, x, g->xr, NULL, NULL);
            bd->rsrc = x, bd->rtype = vt;
        }
        x = g->xr;
    }
    bd->keep_round = true;
    struct wgllm_gpu_pipeline *p = pipe_of(g, WGLLM_KERNEL_MATVEC, w->type, false, bd->err);
    for (int i = 0; i < w->n_pieces; i++) {
        struct wgllm_kparams kp = {.n = (uint32_t)w->piece[i].rows, .k = (uint32_t)w->ne0, .c = (uint32_t)w->piece[i].row0};
        add_op(bd, p, &kp, -1, ceil_div(kp.n, g->tune->rows_matvec), 3, w->piece[i].buf, x, y, NULL);
    }
    bd->keep_round = false;
}

static void add_rms(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t w_off,
                    uint32_t n, uint32_t rows) {
    struct wgllm_webgpu_ctx *g = bd->g;
    struct wgllm_kparams kp = {.n = n, .b = w_off, .f0 = g->model->hp.rms_eps};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_RMS_NORM, 0, false, bd->err), &kp, -1, rows, 3, x, g->vecs, y, NULL);
}

static void add_add(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                    uint32_t n) {
    struct wgllm_webgpu_ctx *g = bd->g;
    struct wgllm_kparams kp = {.n = n, .b = y_off};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_ADD, 0, false, bd->err), &kp, -1, ceil_div(n, g->tune->wg_elem), 2, x,
           y, NULL, NULL);
}

/* Offsets (in floats) of the model's vectors inside the vecs buffer. */
struct vec_offsets {
    uint32_t *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm; /* per layer */
    uint32_t output_norm;
};

static void build_ops(struct builder *bd, const struct vec_offsets *vo) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_wgsl_tune *t = g->tune;
    const uint32_t E = (uint32_t)hp->n_embd, F = (uint32_t)hp->n_ff, dk = (uint32_t)hp->head_dim_k,
                   dv = (uint32_t)hp->head_dim_v;
    const uint32_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;

    /* slot 0: attention, rewritten every step */
    g->attn_kp = (struct wgllm_kparams){.n = 1, .k = dk, .m = dv, .e = KD, .i = VD,
                                        .g = (uint32_t)(hp->n_head / hp->n_head_kv), .j = (uint32_t)g->n_ctx,
                                        .f0 = 1.0f / sqrtf((float)dk)};
    if (slot_of(g, &g->attn_kp) != 0) {
        bd->failed = true;
        return;
    }

    const struct gweight *emb = &g->w[7 * hp->n_layer];
    struct wgllm_gpu_pipeline *pg = pipe_of(g, WGLLM_KERNEL_GET_ROWS, emb->type, false, bd->err);
    for (int i = 0; i < emb->n_pieces; i++) {
        struct wgllm_kparams kp = {.k = E, .b = 0, .c = 0};
        if (emb->n_pieces > 1) kp.d = (uint32_t)emb->piece[i].row0, kp.e = (uint32_t)emb->piece[i].rows;
        add_op(bd, pg, &kp, -1, ceil_div(E, t->wg_elem), 3, emb->piece[i].buf, g->step, g->x, NULL);
    }

    struct wgllm_gpu_pipeline *prope = pipe_of(g, WGLLM_KERNEL_ROPE, 0, neox, bd->err);
    struct wgllm_gpu_pipeline *pstore = pipe_of(g, WGLLM_KERNEL_STORE_F16, 0, false, bd->err);
    struct wgllm_gpu_pipeline *pattn = pipe_of(g, WGLLM_KERNEL_ATTN, WGLLM_TYPE_F16, false, bd->err);
    struct wgllm_gpu_pipeline *pswi = pipe_of(g, WGLLM_KERNEL_SWIGLU, 0, false, bd->err);
    for (int il = 0; il < hp->n_layer && !bd->failed; il++) {
        const struct gweight *W = &g->w[7 * il];
        const struct wgllm_layer *L = &m->layers[il];
        add_rms(bd, g->x, g->xn, vo->attn_norm[il], E, 1);
        /* q and k: straight into q/k, or through qr/kr and the per-head norm */
        add_matvec(bd, &W[0], g->xn, L->q_norm ? g->qr : g->q);
        add_matvec(bd, &W[1], g->xn, L->k_norm ? g->kr : g->k);
        add_matvec(bd, &W[2], g->xn, g->v);
        if (L->bq) add_add(bd, g->q, g->vecs, vo->bq[il], QD);
        if (L->bk) add_add(bd, g->k, g->vecs, vo->bk[il], KD);
        if (L->bv) add_add(bd, g->v, g->vecs, vo->bv[il], VD);
        if (L->q_norm) add_rms(bd, g->qr, g->q, vo->q_norm[il], dk, (uint32_t)hp->n_head);
        if (L->k_norm) add_rms(bd, g->kr, g->k, vo->k_norm[il], dk, (uint32_t)hp->n_head_kv);
        struct wgllm_kparams rq = {.n = (uint32_t)hp->n_head, .m = (uint32_t)hp->n_rot, .k = dk, .b = QD};
        struct wgllm_kparams rk = rq;
        rk.n = (uint32_t)hp->n_head_kv, rk.b = KD;
        add_op(bd, prope, &rq, -1, ceil_div((uint64_t)rq.n * (rq.m / 2), t->wg_elem), 2, g->q, g->rope_cs, NULL, NULL);
        add_op(bd, prope, &rk, -1, ceil_div((uint64_t)rk.n * (rk.m / 2), t->wg_elem), 2, g->k, g->rope_cs, NULL, NULL);
        struct wgllm_kparams sk = {.n = KD / 2, .b = 1, .e = KD / 2}, sv = {.n = VD / 2, .b = 1, .e = VD / 2};
        add_op(bd, pstore, &sk, -1, ceil_div(sk.n, t->wg_elem), 3, g->k, g->step, g->kc[il], NULL);
        add_op(bd, pstore, &sv, -1, ceil_div(sv.n, t->wg_elem), 3, g->v, g->step, g->vc[il], NULL);
        add_op(bd, pattn, NULL, 0, (uint32_t)hp->n_head, 4, g->q, g->kc[il], g->vc[il], g->att);
        if (!bd->failed) { /* the fifth buffer: the scores scratch */
            struct gop *o = &g->ops[g->n_ops - 1];
            o->b[o->nb++] = (struct wgllm_gpu_binding){g->scores, 0, 0};
        }
        add_matvec(bd, &W[3], g->att, g->tmp);
        add_add(bd, g->x, g->tmp, 0, E);
        add_rms(bd, g->x, g->xn, vo->ffn_norm[il], E, 1);
        add_matvec(bd, &W[4], g->xn, g->gate);
        add_matvec(bd, &W[5], g->xn, g->up);
        struct wgllm_kparams sw = {.n = F};
        add_op(bd, pswi, &sw, -1, ceil_div(F, t->wg_elem), 3, g->gate, g->up, g->ffh, NULL);
        add_matvec(bd, &W[6], g->ffh, g->tmp);
        add_add(bd, g->x, g->tmp, 0, E);
    }
    (void)OD;
    g->n_ops_layers = g->n_ops;
    add_rms(bd, g->x, g->xn, vo->output_norm, E, 1);
    add_matvec(bd, &g->w[7 * hp->n_layer + 1], g->xn, g->logits);
}

/* ---- create / free ------------------------------------------------------ */

void wgllm_webgpu_ctx_free(struct wgllm_webgpu_ctx *g) {
    if (!g) return;
    if (g->gpu) {
        for (int i = 0; i < g->n_ops; i++) wgllm_gpu_bindgroup_destroy(g->gpu, g->ops[i].bg);
        /* buffers go with the device; destroying them first keeps the counters honest */
        for (int i = 0; i < g->n_w; i++)
            for (int p = 0; p < g->w[i].n_pieces; p++)
                if (i != 7 * g->model->hp.n_layer + 1 || g->w[i].piece[p].buf != g->w[i - 1].piece[p].buf)
                    wgllm_gpu_buffer_destroy(g->gpu, g->w[i].piece[p].buf);
        for (int il = 0; g->kc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->kc[il]);
        for (int il = 0; g->vc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->vc[il]);
        struct wgllm_gpu_buffer *bs[] = {g->vecs, g->x,   g->xn,  g->q,      g->k,    g->v,        g->qr,    g->kr,
                                         g->att,  g->tmp, g->gate, g->up,    g->ffh,  g->logits,   g->step,  g->arena,
                                         g->readback, g->xr, g->rope_cs, g->scores};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) wgllm_gpu_buffer_destroy(g->gpu, bs[i]);
        wgllm_gpu_close(g->gpu);
    }
    free(g->w);
    free(g->kc);
    free(g->vc);
    free(g->ops);
    free(g->slots);
    free(g->logits_host);
    free(g->rope_host);
    free(g);
}

static bool weight_ok(const struct wgllm_weight *w, enum wgllm_kernel k, char *why, size_t cap) {
    if (wgllm_wgsl_supports(k, w->type)) return true;
    snprintf(why, cap, "tensor %s is %s, which has no WebGPU kernel yet (F32, F16, Q8_0, Q4_0 have)", w->name,
             wgllm_type_name(w->type));
    return false;
}

static enum wgllm_status create(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
    struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(g->gpu);
    const uint64_t E = hp->n_embd, F = hp->n_ff, dk = hp->head_dim_k, dv = hp->head_dim_v;
    const uint64_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    if (KD % 2 || VD % 2 || dk % 2)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: odd K/V widths (%llu, %llu) are not supported",
                               (unsigned long long)KD, (unsigned long long)VD);
    if (dk > (uint64_t)g->tune->wg_attn * g->tune->attn_max_dims || dv > (uint64_t)g->tune->wg_attn * g->tune->attn_max_dims)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: head dims %llu/%llu exceed the attention kernel's %u",
                               (unsigned long long)dk, (unsigned long long)dv, g->tune->wg_attn * g->tune->attn_max_dims);
    /* the KV cache of a layer must fit one binding: shrink the context, and say so */
    uint64_t per_pos = WGLLM_MAX(KD, VD) * 2, max_bind = WGLLM_MIN(info->max_storage_binding_size, info->max_buffer_size);
    if ((uint64_t)g->n_ctx * per_pos > max_bind) {
        int n = (int)(max_bind / per_pos);
        wgllm_log(WGLLM_LOG_WARN, "webgpu: context shrunk from %d to %d positions (a layer's KV cache must fit the "
                  "device's %llu-byte binding)", g->n_ctx, n, (unsigned long long)max_bind);
        g->n_ctx = n;
    }
    g->plan.n_ctx = g->n_ctx;

    /* small buffers first: the step buffer and readback are needed by the upload's waits */
    const uint64_t V = hp->n_vocab;
    g->step = gbuf(g, 16, WGLLM_GPU_STORAGE, "step", &g->plan.params, err);
    g->readback = g->step ? gbuf(g, V * 4, WGLLM_GPU_READBACK, "logits readback", &g->plan.logits, err) : NULL;
    if (!g->readback) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    uint32_t zero[4] = {0};
    wgllm_gpu_buffer_write(g->gpu, g->step, 0, zero, sizeof zero);

    /* weights */
    uint64_t pending = 0;
    g->n_w = 7 * hp->n_layer + 2;
    g->w = calloc((size_t)g->n_w, sizeof *g->w);
    g->kc = calloc((size_t)hp->n_layer, sizeof *g->kc);
    g->vc = calloc((size_t)hp->n_layer, sizeof *g->vc);
    if (!g->w || !g->kc || !g->vc) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (int il = 0; il < hp->n_layer && !st; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 7 && !st; j++) st = plan_weight(g, ws[j], &g->w[7 * il + j], &pending, err);
    }
    if (!st) st = plan_weight(g, &m->tok_embd, &g->w[7 * hp->n_layer], &pending, err);
    if (st) return st;
    if (m->output.data == m->tok_embd.data && m->output.type == m->tok_embd.type)
        g->w[7 * hp->n_layer + 1] = g->w[7 * hp->n_layer]; /* tied: the same buffers */
    else if ((st = plan_weight(g, &m->output, &g->w[7 * hp->n_layer + 1], &pending, err)))
        return st;

    /* vectors: one buffer, offsets in floats */
    uint32_t *offs = calloc((size_t)hp->n_layer * 7, sizeof(uint32_t));
    if (!offs) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    struct vec_offsets vo = {offs, offs + hp->n_layer, offs + 2 * hp->n_layer, offs + 3 * hp->n_layer,
                             offs + 4 * hp->n_layer, offs + 5 * hp->n_layer, offs + 6 * hp->n_layer, 0};
    struct {
        uint32_t *off;
        const float *data;
        uint64_t n;
    } vl[7 * 512 + 1];
    int nv = 0;
    uint64_t total = 0;
    if (hp->n_layer > 512) {
        free(offs);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU: %d layers (at most 512)", hp->n_layer);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const float *d[7] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm};
        const uint64_t n[7] = {E, E, QD, KD, VD, dk, dk};
        uint32_t *o[7] = {&vo.attn_norm[il], &vo.ffn_norm[il], &vo.bq[il], &vo.bk[il], &vo.bv[il], &vo.q_norm[il],
                          &vo.k_norm[il]};
        for (int j = 0; j < 7; j++)
            if (d[j]) vl[nv++] = (__typeof__(vl[0])){o[j], d[j], n[j]};
    }
    vl[nv++] = (__typeof__(vl[0])){&vo.output_norm, m->output_norm, E};
    for (int i = 0; i < nv; i++) *vl[i].off = (uint32_t)total, total += vl[i].n;
    g->vecs = gbuf(g, total * 4, WGLLM_GPU_STORAGE, "vectors", &g->plan.vectors, err);
    for (int i = 0; g->vecs && i < nv && !st; i++) st = upload(g, g->vecs, *vl[i].off * 4ull, vl[i].data, vl[i].n * 4, &pending, err);
    if (!g->vecs || st) {
        free(offs);
        return st ? st : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }

    /* KV cache and activations */
    for (int il = 0; il < hp->n_layer; il++) {
        g->kc[il] = gbuf(g, (uint64_t)g->n_ctx * KD * 2, WGLLM_GPU_STORAGE, "k cache", &g->plan.kv_cache, err);
        g->vc[il] = g->kc[il] ? gbuf(g, (uint64_t)g->n_ctx * VD * 2, WGLLM_GPU_STORAGE, "v cache", &g->plan.kv_cache, err) : NULL;
        if (!g->vc[il]) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    const bool qk_norm = m->layers[0].q_norm != NULL;
    struct {
        struct wgllm_gpu_buffer **b;
        uint64_t n;
        const char *name;
    } acts[] = {{&g->x, E, "x"},       {&g->xn, E, "xn"},   {&g->q, QD, "q"},          {&g->k, KD, "k"},
                {&g->v, VD, "v"},      {&g->att, OD, "att"}, {&g->tmp, E, "tmp"},       {&g->gate, F, "gate"},
                {&g->up, F, "up"},     {&g->ffh, F, "ffh"},  {&g->qr, qk_norm ? QD : 0, "qr"},
                {&g->kr, qk_norm ? KD : 0, "kr"}, {&g->xr, WGLLM_MAX(WGLLM_MAX(E, F), OD), "xr"}};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        if (!acts[i].n) continue;
        *acts[i].b = gbuf(g, acts[i].n * 4, WGLLM_GPU_STORAGE, acts[i].name, &g->plan.activations, err);
        if (!*acts[i].b) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->logits = gbuf(g, V * 4, WGLLM_GPU_STORAGE, "logits", &g->plan.logits, err);
    g->rope_cs = g->logits ? gbuf(g, (uint64_t)hp->n_rot * 4, WGLLM_GPU_STORAGE, "rope cos/sin", &g->plan.params, err) : NULL;
    g->scores = g->rope_cs ? gbuf(g, (uint64_t)hp->n_head * g->n_ctx * 4, WGLLM_GPU_STORAGE, "attention scores",
                                  &g->plan.activations, err) : NULL;
    g->rope_host = malloc((size_t)hp->n_rot * sizeof(float));
    if (!g->scores || !g->rope_host) {
        free(offs);
        if (!g->scores) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the RoPE table");
    }

    /* dispatches, then the arena they index, then their bind groups */
    struct builder bd = {g, err, false, NULL, 0, false};
    build_ops(&bd, &vo);
    free(offs);
    if (bd.failed) return err && err->status ? err->status : WGLLM_STATUS_UNSUPPORTED;
    g->arena = gbuf(g, (uint64_t)g->n_slots * SLOT_BYTES, WGLLM_GPU_UNIFORM, "param arena", &g->plan.params, err);
    if (!g->arena) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    for (int i = 0; i < g->n_slots; i++)
        wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)i * SLOT_BYTES, &g->slots[i], sizeof g->slots[i]);
    for (int i = 0; i < g->n_ops; i++) {
        struct gop *o = &g->ops[i];
        o->b[0] = (struct wgllm_gpu_binding){g->arena, (uint64_t)o->slot * SLOT_BYTES, sizeof(struct wgllm_kparams)};
        o->bg = wgllm_gpu_bindgroup_create(g->gpu, o->pipe, o->nb, o->b, err);
        if (!o->bg) {
            wgllm_error_prefix(err, "WebGPU dispatch %d: ", i);
            return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
        }
    }
    st = gsync(g, err);
    if (st) return st;
    g->plan.total = wgllm_gpu_bytes_allocated(g->gpu);
    g->plan.n_buffers = wgllm_gpu_buffer_count(g->gpu);
    g->plan.n_pipelines = wgllm_gpu_pipeline_count(g->gpu);
    g->plan.n_dispatches = g->n_ops;
    g->plan.n_param_slots = g->n_slots;
    g->logits_host = malloc(V * sizeof(float));
    if (!g->logits_host) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for logits");
    g->logits_cap = 1;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_webgpu_ctx_create(struct wgllm_model *model, int backend, int n_ctx,
                                          struct wgllm_webgpu_ctx **out, char *why, size_t why_cap,
                                          struct wgllm_error *err) {
    *out = NULL;
    const bool autosel = backend == WGLLM_BACKEND_AUTO;
    /* formats first: no need to open a device for a model the kernels cannot run */
    char reason[300] = "";
    bool ok = weight_ok(&model->tok_embd, WGLLM_KERNEL_GET_ROWS, reason, sizeof reason) &&
              weight_ok(&model->output, WGLLM_KERNEL_MATVEC, reason, sizeof reason);
    for (int il = 0; ok && il < model->hp.n_layer; il++) {
        const struct wgllm_layer *L = &model->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; ok && j < 7; j++) ok = weight_ok(ws[j], WGLLM_KERNEL_MATVEC, reason, sizeof reason);
    }
    if (!ok) {
        if (!autosel) return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "WebGPU backend: %s", reason);
        snprintf(why, why_cap, "cpu (auto: %s)", reason);
        return WGLLM_STATUS_OK;
    }
    struct wgllm_gpu *gpu;
    struct wgllm_error e2 = {0};
    if (wgllm_gpu_open(&gpu, &e2)) {
        if (!autosel) {
            if (err) *err = e2;
            return e2.status;
        }
        snprintf(why, why_cap, "cpu (auto: %s)", e2.message);
        return WGLLM_STATUS_OK;
    }
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(gpu);
    if (autosel && info->is_cpu) {
        snprintf(why, why_cap, "cpu (auto: the WebGPU adapter '%s' is a software/CPU adapter)", info->name);
        wgllm_gpu_close(gpu);
        return WGLLM_STATUS_OK;
    }
    struct wgllm_webgpu_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        wgllm_gpu_close(gpu);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    g->model = model;
    g->gpu = gpu;
    g->tune = wgllm_wgsl_tune_for(info);
    g->n_ctx = n_ctx;
    enum wgllm_status st = create(g, err);
    if (st) {
        wgllm_error_prefix(err, "WebGPU backend on %s: ", info->name);
        wgllm_webgpu_ctx_free(g);
        return st;
    }
    snprintf(why, why_cap, "webgpu: %s (%s, %s)%s", info->name, info->backend, info->type,
             autosel ? " (auto: a hardware adapter)" : "");
    *out = g;
    return WGLLM_STATUS_OK;
}

/* ---- decode ------------------------------------------------------------- */

int wgllm_webgpu_n_ctx(const struct wgllm_webgpu_ctx *g) { return g->n_ctx; }
int wgllm_webgpu_n_past(const struct wgllm_webgpu_ctx *g) { return g->n_past; }
void wgllm_webgpu_truncate(struct wgllm_webgpu_ctx *g, int n_past) {
    if (n_past < 0) n_past = 0;
    if (n_past < g->n_past) g->n_past = n_past;
}

enum wgllm_status wgllm_webgpu_decode(struct wgllm_webgpu_ctx *g, const int32_t *tokens, int n, bool all_logits,
                                      struct wgllm_error *err) {
    const int V = g->model->hp.n_vocab;
    if (n <= 0) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "decode of %d tokens", n);
    if (g->n_past + n > g->n_ctx)
        return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                               "%d tokens do not fit: %d of the context's %d positions are used", n, g->n_past, g->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "token %d at index %d is outside the vocabulary (%d)", tokens[i], i, V);
    const int rows = all_logits ? n : 1;
    if (rows > g->logits_cap) { /* host memory only: all_logits of a longer input */
        float *p = realloc(g->logits_host, (size_t)rows * V * sizeof(float));
        if (!p) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d rows of logits", rows);
        g->logits_host = p;
        g->logits_cap = rows;
    }
    for (int i = 0; i < n; i++) {
        const bool want = all_logits || i == n - 1;
        const uint32_t step[2] = {(uint32_t)tokens[i], (uint32_t)(g->n_past + i)};
        wgllm_gpu_buffer_write(g->gpu, g->step, 0, step, sizeof step);
        /* the CPU backend's own table: both backends rotate by libm's cos/sin */
        const struct wgllm_hparams *hp = &g->model->hp;
        wgllm_op_rope_cache(g->rope_host, (int)step[1], hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale,
                            g->model->rope_freqs);
        wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)hp->n_rot * sizeof(float));
        g->attn_kp.n = step[1] + 1;
        wgllm_gpu_buffer_write(g->gpu, g->arena, 0, &g->attn_kp, sizeof g->attn_kp);
        wgllm_gpu_batch_begin(g->gpu);
        const int n_ops = want ? g->n_ops : g->n_ops_layers;
        for (int j = 0; j < n_ops; j++) {
            const struct gop *o = &g->ops[j];
            wgllm_gpu_dispatch(g->gpu, o->pipe, o->bg, o->x, o->y, o->z);
        }
        if (want) wgllm_gpu_copy(g->gpu, g->logits, 0, g->readback, 0, (uint64_t)V * 4);
        enum wgllm_status st = wgllm_gpu_batch_submit(g->gpu, err);
        if (!st && want)
            st = wgllm_gpu_readback(g->gpu, g->readback, 0, g->logits_host + (size_t)(all_logits ? i : 0) * V,
                                    (size_t)V * 4, err);
        if (st) return st;
    }
    g->n_past += n;
    g->n_logits = rows;
    return WGLLM_STATUS_OK;
}

const float *wgllm_webgpu_logits(const struct wgllm_webgpu_ctx *g, int i) {
    if (i == -1) i = g->n_logits - 1;
    if (i < 0 || i >= g->n_logits) return NULL;
    return g->logits_host + (size_t)i * g->model->hp.n_vocab;
}

uint64_t wgllm_webgpu_host_memory(const struct wgllm_webgpu_ctx *g) {
    return (uint64_t)g->logits_cap * g->model->hp.n_vocab * sizeof(float);
}

uint64_t wgllm_webgpu_gpu_bytes(const struct wgllm_webgpu_ctx *g) { return wgllm_gpu_bytes_allocated(g->gpu); }

void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan) { *plan = g->plan; }
