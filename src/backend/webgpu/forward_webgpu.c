/*
 * forward_webgpu.c - the WebGPU backend (its table: wgllm_backend_webgpu_i,
 * backend_impl.h; see forward_webgpu.h): the memory plan (fitted to the
 * device's limits and the caller's budget), weight streaming, the list of
 * dispatches of one pass (built once: pipelines, parameter slots and bind
 * groups), the pass itself: write the pass's per-token data, record the list
 * into one command batch sized for the pass's tokens, submit once, read back
 * only the rows whose outputs are wanted, into the context's host rows; the
 * sequence operations and generation on the GPU. Inputs come validated by
 * backend/context.c.
 *
 * Step order follows the CPU backend (backend/cpu/forward.c): get_rows ->
 * per layer RMSNorm -> Q/K/V mat-vecs (+ qwen2 biases; qwen3 per-head q/k
 * RMSNorm) -> RoPE -> K,V stored as f16 at (sequence, position) ->
 * attention of each token over its own sequence -> output projection ->
 * residual add -> RMSNorm -> gate/up -> SwiGLU -> down -> residual add; in
 * the last layer only the rows with outputs go on after attention (gathered
 * into xo), then the final RMSNorm and (unless embeddings are wanted) the
 * logits; a pass without outputs stops after the last attention. Rounding mirrors the CPU backend (kernels.c):
 * mat-vec inputs to the weight's vec_dot_type, q and attention
 * probabilities to f16, lossless sums where the CPU sums in double, and the
 * RoPE cos/sin table made on the host by the code the CPU uses (backend/rope.h).
 *
 * Every dispatch is recorded once with its grid for one token and how the
 * grid grows with the batch (struct gop): the kernels take the token index
 * from the grid (gid.y / wid.y, or rows for the row kernels), so parameter
 * slots never change and are written once at init (no per-step parameter
 * writes at all). The per-token data (token id, cache row, attention length,
 * output rows) go through one "step" buffer, the cos/sin table through
 * another; queue writes are ordered with submits, so a batch is queued
 * without waiting for the previous one unless its outputs are read back.
 *
 * KV cache: per layer one f16 K buffer and one V buffer, each [n_seq][n_ctx]
 * rows of n_head_kv * head_dim; sequence operations are buffer copies, a
 * context shift copies and re-rotates through a scratch of one layer's
 * n_ctx rows (WebGPU copies may not overlap within one buffer, and a kernel
 * moving rows in place would race across workgroups).
 */
#include "backend/webgpu/forward_webgpu.h"
#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/rope.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parameter blocks of SAMPLE and SAMPLE_ROWS carry a marker in their
 * private_slot field (which neither kernel reads) so that slot_of never
 * finds them equal to another dispatch's block and shares the slot:
 * webgpu_generate rewrites SAMPLE's slot per call (temperature, seed, ...),
 * which must not change an ARGMAX (or other) dispatch whose block happened
 * to match, and SAMPLE_ROWS's {n_vocab} would otherwise equal ARGMAX's.
 * The values spell "SAMP" and "ROWS" in little-endian ASCII (a dump of the
 * arena shows them). */
#define KP_PRIVATE_SAMPLE 0x53414d50u
#define KP_PRIVATE_SAMPLE_ROWS 0x524f5753u

#define MAX_PIECES 16
#define SLOT_BYTES 256
#define UPLOAD_CHUNK ((size_t)16 << 20)       /* bytes per queue write */
#define UPLOAD_SYNC_BYTES ((uint64_t)64 << 20) /* queued bytes before waiting: bounds Dawn's staging */
#define OUT_BYTES ((uint64_t)16 << 20)         /* logits rows one pass keeps on the GPU (at least n_seq rows) */

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

/* How a dispatch's grid grows with the count (tokens of the chunk, or its
 * outputs for the ops after the layers). */
enum grow {
    GROW_Y,  /* y = ceil(count / div): kernels that take the token from the grid's y */
    GROW_X,  /* x = x * count: row kernels (one workgroup per row) */
    GROW_XE, /* x = ceil(per * count / div): element-wise over all rows at once */
};

/* Which passes a dispatch belongs to (mat-vec or mat-mat versions of one product). */
enum { WHEN_ALWAYS, WHEN_FEW /* count < MM_MIN_TOKENS */, WHEN_MANY /* count >= MM_MIN_TOKENS */ };

struct gop {
    struct wgllm_gpu_pipeline *pipe;
    struct wgllm_gpu_bindgroup *bg;
    uint32_t x, per, div;
    uint8_t grow;
    uint8_t when; /* WHEN_*: the token counts it runs for */
    int tok; /* >= 0: an op of that one token (row-split weights), run when tok < count */
    /* until the bind group exists */
    int slot, nb;
    struct wgllm_gpu_binding b[6];
};

struct wgllm_webgpu_ctx {
    struct wgllm_model *model;
    void *staging; /* a streamed model's upload block (UPLOAD_CHUNK bytes), freed after the upload */
    struct wgllm_gpu *gpu;
    const struct wgllm_wgsl_tune *tune;
    int n_ctx, n_seq, n_batch, out_cap;
    uint64_t gpu_mem;

    struct gweight *w;  /* 7 per layer, then tok_embd, output */
    int n_w;
    struct wgllm_gpu_buffer *vecs;                 /* every f32 vector */
    struct wgllm_gpu_buffer **kc, **vc;            /* per layer, [n_seq][n_ctx] rows */
    /* activations, n_batch rows each (xo and logits: out_cap rows) */
    struct wgllm_gpu_buffer *x, *xn, *q, *k, *v, *qr, *kr, *att, *tmp, *gate, *up, *ffh, *xo, *att_o, *logits;
    struct wgllm_gpu_buffer *xr;      /* a mat-vec input rounded as the CPU rounds it (ROUND_ACT) */
    struct wgllm_gpu_buffer *rope_cs; /* cos/sin pairs of each token's position (n_batch x n_rot floats) */
    struct wgllm_gpu_buffer *step;    /* u32 [4][n_batch]: token ids, cache rows, attention lengths, output rows */
    struct wgllm_gpu_buffer *arena, *readback;
    /* context shift: n_ctx rows of K or V of one layer; ROPE_SHIFT_F16 from it into each layer's K cache
       (bind groups per layer, parameters in the arena's last slot, written per shift) */
    struct wgllm_gpu_buffer *shift_tmp;
    struct wgllm_gpu_pipeline *shift_pipe;
    struct wgllm_gpu_bindgroup **shift_bg;
    int shift_slot;
    struct wgllm_gpu_buffer *id_rb[2]; /* greedy on the GPU: the sampled ids, read back alternately */
    /* device sampling of a pass's output rows (decode_sampled): SAMPLE_ROWS reads 8 words per
       sampled row from samp_in and writes id + logprob to samp_out; host copies of out_cap rows */
    struct wgllm_gpu_buffer *samp_in, *samp_out;
    struct wgllm_gpu_pipeline *samp_pipe;
    struct wgllm_gpu_bindgroup *samp_bg;
    uint32_t *samp_host; /* out_cap x 8 words */
    int *samp_row;       /* out_cap: the output row of each row read back, then of each sampled one */
    float *rope_host;
    uint32_t *step_host;

    struct gop *ops;
    int n_ops, cap_ops;
    int n_ops_layers, n_ops_norm; /* [0, layers): up to the last attention (all tokens); [layers, norm): the rest
                                     of the last layer and the final norm (output rows only); then the logits */
    int n_ops_logits;             /* [norm, logits): the logits; [logits, n_ops): argmax of logits row 0 into the
                                     step's token 0 (greedy on the GPU) */
    union wgllm_kparams *slots;   /* host copy of the arena */
    int n_slots, cap_slots;
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
        gw->piece[p].buf = gbuf(g, bytes, WGLLM_GPU_STORAGE, w->name, &g->plan.weights, err);
        if (!gw->piece[p].buf) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        enum wgllm_status st = w->data ? upload(g, gw->piece[p].buf, 0, (const char *)w->data + (size_t)r0 * w->row_size,
                                                bytes, pending, err)
                                       : upload_streamed(g, w, gw->piece[p].buf, (uint64_t)r0 * w->row_size, bytes,
                                                         pending, err);
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

/* ---- the list of dispatches -------------------------------------------- */

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

struct builder {
    struct wgllm_webgpu_ctx *g;
    struct wgllm_error *err;
    bool failed;
    /* what xr holds: x rounded for vec_dot_type rtype (NULL: nothing valid) */
    struct wgllm_gpu_buffer *rsrc;
    uint32_t rtype;
    bool keep_round; /* the op being added does not write rsrc */
};

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

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* An element-wise op over `per` elements of each row, all rows in one grid. */
static void add_elems(struct builder *bd, struct wgllm_gpu_pipeline *p, const union wgllm_kparams *kp, uint32_t per,
                      uint32_t div, int nb, struct wgllm_gpu_buffer *b1, struct wgllm_gpu_buffer *b2,
                      struct wgllm_gpu_buffer *b3) {
    struct gop *o = add_op(bd, p, kp, GROW_XE, 1, nb, b1, b2, b3, NULL);
    if (o) o->per = per, o->div = div;
}

/* Passes of at least this many tokens run the mat-vecs as the tiled MATMUL
 * (where the weight type has one): each dequantized weight then serves a
 * tile of tokens. Below it MATVEC per token wastes no tile on absent tokens.
 * Both versions are recorded at load (bind groups and parameters fixed);
 * record() picks one by the pass's token count. */
#define MM_MIN_TOKENS 8

/* y[t] = W x[t] for the rows of the batch. The input is first rounded as
 * the CPU backend rounds it (to the weight's vec_dot_type: Q8_0 blocks for
 * Q8_0/Q4_0, f16 for F16), so that both backends compute the same products
 * and greedy decoding agrees even on near-ties; consecutive mat-vecs of one
 * input share the rounding. `cap` is the row capacity of y (n_batch or
 * out_cap), for per-token ops of row-split weights. */
static void add_matvec(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                       struct wgllm_gpu_buffer *y, int cap) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t vt = wgllm_type_traits(w->type)->vec_dot_type;
    if (vt != WGLLM_TYPE_F32 && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, vt)) {
        if (bd->rsrc != x || bd->rtype != vt) {
            const union wgllm_kparams kp = {.round_act = {.count = (uint32_t)w->ne0 * (uint32_t)cap}};
            add_elems(bd, pipe_of(g, WGLLM_KERNEL_ROUND_ACT, vt, false, bd->err), &kp, (uint32_t)w->ne0,
                      32 * g->tune->wg_elem, 2, x, g->xr, NULL);
            bd->rsrc = x, bd->rtype = vt;
        }
        x = g->xr;
    }
    bd->keep_round = true;
    if (w->n_pieces == 1) {
        const bool mm = cap >= MM_MIN_TOKENS && wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL, w->type);
        union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->ne1, .k = (uint32_t)w->ne0}};
        struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATVEC, w->type, false, bd->err), &kp, GROW_Y,
                               ceil_div(kp.matvec.rows, g->tune->rows_matvec), 3, w->piece[0].buf, x, y, NULL);
        if (o && mm) o->when = WHEN_FEW;
        if (mm) {
            /* tokens = the row capacity of y: the last token tile may
             * compute rows past the pass's tokens, into scratch rows of y */
            kp.matvec.tokens = (uint32_t)cap;
            o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATMUL, w->type, false, bd->err), &kp, GROW_Y,
                       ceil_div(kp.matvec.rows, g->tune->mm_tile_n), 3, w->piece[0].buf, x, y, NULL);
            if (o) o->div = g->tune->mm_tile_m, o->when = WHEN_MANY;
        }
    } else {
        /* MATVEC writes token t's rows at c + t * (rows of the piece): with
         * several pieces each token gets its own dispatches */
        for (int t = 0; t < cap; t++)
            for (int i = 0; i < w->n_pieces; i++) {
                const union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)w->piece[i].rows, .k = (uint32_t)w->ne0,
                                                           .x_off = (uint32_t)(t * w->ne0),
                                                           .y_off = (uint32_t)(t * w->ne1 + w->piece[i].row0)}};
                struct gop *o = add_op(bd, pipe_of(g, WGLLM_KERNEL_MATVEC, w->type, false, bd->err), &kp, GROW_Y,
                                       ceil_div(kp.matvec.rows, g->tune->rows_matvec), 3, w->piece[i].buf, x, y, NULL);
                if (o) o->tok = t, o->div = 1u << 30; /* y = 1 */
            }
    }
    bd->keep_round = false;
}

static void add_rms(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t w_off,
                    uint32_t n, uint32_t rows_per_tok) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const union wgllm_kparams kp = {.rms_norm = {.width = n, .w_off = w_off, .eps = g->model->hp.rms_eps}};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_RMS_NORM, 0, false, bd->err), &kp, GROW_X, rows_per_tok, 3, x, g->vecs, y, NULL);
}

/* x[t] += y[t] (y_stride n), or x[t] += y (y_stride 0: a bias at y_off). */
static void add_rows(struct builder *bd, struct wgllm_gpu_buffer *x, struct wgllm_gpu_buffer *y, uint32_t y_off,
                     uint32_t n, uint32_t y_stride) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const union wgllm_kparams kp = {.add_rows = {.width = n, .y_off = y_off, .y_stride = y_stride}};
    add_op(bd, pipe_of(g, WGLLM_KERNEL_ADD_ROWS, 0, false, bd->err), &kp, GROW_Y, ceil_div(n, g->tune->wg_elem), 2, x,
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
                   dv = (uint32_t)hp->head_dim_v, B = (uint32_t)g->n_batch;
    const uint32_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;

    const struct gweight *emb = &g->w[7 * hp->n_layer];
    struct wgllm_gpu_pipeline *pg = pipe_of(g, WGLLM_KERNEL_GET_ROWS, emb->type, false, bd->err);
    for (int i = 0; i < emb->n_pieces; i++) {
        union wgllm_kparams kp = {.get_rows = {.width = E, .ids_off = 0, .y_off = 0}};
        if (emb->n_pieces > 1)
            kp.get_rows.piece_row0 = (uint32_t)emb->piece[i].row0, kp.get_rows.piece_rows = (uint32_t)emb->piece[i].rows;
        add_op(bd, pg, &kp, GROW_Y, ceil_div(E, t->wg_elem), 3, emb->piece[i].buf, g->step, g->x, NULL);
    }

    struct wgllm_gpu_pipeline *prope = pipe_of(g, WGLLM_KERNEL_ROPE, 0, neox, bd->err);
    struct wgllm_gpu_pipeline *pstore = pipe_of(g, WGLLM_KERNEL_STORE_KV, 0, false, bd->err);
    struct wgllm_gpu_pipeline *pattn = pipe_of(g, WGLLM_KERNEL_ATTN_BATCH, WGLLM_TYPE_F16, false, bd->err);
    struct wgllm_gpu_pipeline *pswi = pipe_of(g, WGLLM_KERNEL_SWIGLU, 0, false, bd->err);
    for (int il = 0; il < hp->n_layer && !bd->failed; il++) {
        const struct gweight *W = &g->w[7 * il];
        const struct wgllm_layer *L = &m->layers[il];
        add_rms(bd, g->x, g->xn, vo->attn_norm[il], E, 1);
        /* q and k: straight into q/k, or through qr/kr and the per-head norm */
        add_matvec(bd, &W[0], g->xn, L->q_norm ? g->qr : g->q, g->n_batch);
        add_matvec(bd, &W[1], g->xn, L->k_norm ? g->kr : g->k, g->n_batch);
        add_matvec(bd, &W[2], g->xn, g->v, g->n_batch);
        if (L->bq) add_rows(bd, g->q, g->vecs, vo->bq[il], QD, 0);
        if (L->bk) add_rows(bd, g->k, g->vecs, vo->bk[il], KD, 0);
        if (L->bv) add_rows(bd, g->v, g->vecs, vo->bv[il], VD, 0);
        if (L->q_norm) add_rms(bd, g->qr, g->q, vo->q_norm[il], dk, (uint32_t)hp->n_head);
        if (L->k_norm) add_rms(bd, g->kr, g->k, vo->k_norm[il], dk, (uint32_t)hp->n_head_kv);
        const union wgllm_kparams rq = {.rope = {.heads = (uint32_t)hp->n_head, .n_rot = (uint32_t)hp->n_rot,
                                                 .head_dim = dk, .tok_stride = QD}};
        const union wgllm_kparams rk = {.rope = {.heads = (uint32_t)hp->n_head_kv, .n_rot = (uint32_t)hp->n_rot,
                                                 .head_dim = dk, .tok_stride = KD}};
        add_op(bd, prope, &rq, GROW_Y, ceil_div((uint64_t)rq.rope.heads * (rq.rope.n_rot / 2), t->wg_elem), 2, g->q,
               g->rope_cs, NULL, NULL);
        add_op(bd, prope, &rk, GROW_Y, ceil_div((uint64_t)rk.rope.heads * (rk.rope.n_rot / 2), t->wg_elem), 2, g->k,
               g->rope_cs, NULL, NULL);
        /* the step buffer's rows (cache rows) start at word B */
        const union wgllm_kparams sk = {.store_kv = {.words = KD / 2, .x_stride = KD, .row_at = B, .y_stride = KD / 2}};
        const union wgllm_kparams sv = {.store_kv = {.words = VD / 2, .x_stride = VD, .row_at = B, .y_stride = VD / 2}};
        add_op(bd, pstore, &sk, GROW_Y, ceil_div(sk.store_kv.words, t->wg_elem), 3, g->k, g->step, g->kc[il], NULL);
        add_op(bd, pstore, &sv, GROW_Y, ceil_div(sv.store_kv.words, t->wg_elem), 3, g->v, g->step, g->vc[il], NULL);
        const union wgllm_kparams ak = {.attn = {.dk = dk, .dv = dv, .k_stride = KD, .v_stride = VD,
                                                 .gqa = (uint32_t)(hp->n_head / hp->n_head_kv), .q_stride = QD,
                                                 .o_stride = OD, .row_at = B, .len_at = 2 * B,
                                                 .scale = 1.0f / sqrtf((float)dk)}};
        struct gop *o = add_op(bd, pattn, &ak, GROW_Y, (uint32_t)hp->n_head, 4, g->q, g->kc[il], g->vc[il], g->att);
        if (o) o->b[o->nb++] = (struct wgllm_gpu_binding){g->step, 0, 0};
        /* In the last layer only the rows whose outputs are wanted go on after
         * attention (the others only had to fill the KV cache), as on the CPU:
         * they are gathered (x and att as F32 tables, the step's output rows
         * as ids) into xo / att_o, and the ops from here on run per output. */
        struct wgllm_gpu_buffer *xa = g->x, *aa = g->att;
        int cap = g->n_batch;
        if (il == hp->n_layer - 1) {
            g->n_ops_layers = g->n_ops;
            struct wgllm_gpu_pipeline *pgf = pipe_of(g, WGLLM_KERNEL_GET_ROWS, WGLLM_TYPE_F32, false, bd->err);
            /* the step buffer's output rows (ids of the gathered rows) start at word 3B */
            const union wgllm_kparams gx = {.get_rows = {.width = E, .ids_off = 3 * B}},
                                      ga = {.get_rows = {.width = OD, .ids_off = 3 * B}};
            add_op(bd, pgf, &gx, GROW_Y, ceil_div(E, t->wg_elem), 3, g->x, g->step, g->xo, NULL);
            add_op(bd, pgf, &ga, GROW_Y, ceil_div(OD, t->wg_elem), 3, g->att, g->step, g->att_o, NULL);
            xa = g->xo, aa = g->att_o, cap = g->out_cap;
        }
        add_matvec(bd, &W[3], aa, g->tmp, cap);
        add_rows(bd, xa, g->tmp, 0, E, E);
        add_rms(bd, xa, g->xn, vo->ffn_norm[il], E, 1);
        add_matvec(bd, &W[4], g->xn, g->gate, cap);
        add_matvec(bd, &W[5], g->xn, g->up, cap);
        const union wgllm_kparams sw = {.swiglu = {.count = F * (uint32_t)cap}};
        add_elems(bd, pswi, &sw, F, t->wg_elem, 3, g->gate, g->up, g->ffh);
        add_matvec(bd, &W[6], g->ffh, g->tmp, cap);
        add_rows(bd, xa, g->tmp, 0, E, E);
    }
    /* the final norm of the output rows, then the logits */
    add_rms(bd, g->xo, g->xn, vo->output_norm, E, 1);
    g->n_ops_norm = g->n_ops;
    add_matvec(bd, &g->w[7 * hp->n_layer + 1], g->xn, g->logits, g->out_cap);
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

/* ---- create / free ------------------------------------------------------ */

void wgllm_webgpu_ctx_free(struct wgllm_webgpu_ctx *g) {
    if (!g) return;
    free(g->staging);
    if (g->gpu) {
        for (int i = 0; i < g->n_ops; i++) wgllm_gpu_bindgroup_destroy(g->gpu, g->ops[i].bg);
        for (int il = 0; g->shift_bg && il < g->model->hp.n_layer; il++) wgllm_gpu_bindgroup_destroy(g->gpu, g->shift_bg[il]);
        wgllm_gpu_bindgroup_destroy(g->gpu, g->samp_bg);
        /* buffers go with the device; destroying them first keeps the counters honest */
        for (int i = 0; g->w && i < g->n_w; i++)
            for (int p = 0; p < g->w[i].n_pieces; p++)
                if (i != 7 * g->model->hp.n_layer + 1 || g->w[i].piece[p].buf != g->w[i - 1].piece[p].buf)
                    wgllm_gpu_buffer_destroy(g->gpu, g->w[i].piece[p].buf);
        for (int il = 0; g->kc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->kc[il]);
        for (int il = 0; g->vc && il < g->model->hp.n_layer; il++) wgllm_gpu_buffer_destroy(g->gpu, g->vc[il]);
        struct wgllm_gpu_buffer *bs[] = {g->vecs, g->x,   g->xn,  g->q,      g->k,    g->v,        g->qr,    g->kr,
                                         g->att,  g->tmp, g->gate, g->up,    g->ffh,  g->logits,   g->step,  g->arena,
                                         g->readback, g->xr, g->rope_cs, g->xo, g->att_o, g->id_rb[0], g->id_rb[1],
                                         g->shift_tmp, g->samp_in, g->samp_out};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) wgllm_gpu_buffer_destroy(g->gpu, bs[i]);
        wgllm_gpu_close(g->gpu);
    }
    free(g->w);
    free(g->kc);
    free(g->vc);
    free(g->shift_bg);
    free(g->ops);
    free(g->slots);
    free(g->rope_host);
    free(g->step_host);
    free(g->samp_host);
    free(g->samp_row);
    free(g);
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

static enum wgllm_status create(struct wgllm_webgpu_ctx *g, struct wgllm_error *err) {
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
    g->step = gbuf(g, 4 * B * 4, WGLLM_GPU_STORAGE, "step", &g->plan.params, err);
    g->readback = g->step ? gbuf(g, OC * WGLLM_MAX(V, E) * 4, WGLLM_GPU_READBACK, "output readback", &g->plan.logits, err) : NULL;
    for (int i = 0; i < 2 && g->readback; i++)
        if (!(g->id_rb[i] = gbuf(g, 16, WGLLM_GPU_READBACK, "id readback", &g->plan.params, err))) g->readback = NULL;
    if (!g->readback) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    g->samp_in = gbuf(g, OC * 8 * 4, WGLLM_GPU_STORAGE, "sample rows in", &g->plan.params, err);
    g->samp_out = g->samp_in ? gbuf(g, OC * 2 * 4, WGLLM_GPU_STORAGE, "sample rows out", &g->plan.params, err) : NULL;
    if (!g->samp_out) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
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
    g->vecs = gbuf(g, total * 4, WGLLM_GPU_STORAGE, "vectors", &g->plan.vectors, err);
    for (int i = 0; g->vecs && i < nv && !st; i++) st = upload(g, g->vecs, *vl[i].off * 4ull, vl[i].data, vl[i].n * 4, &pending, err);
    free(vl);
    if (!g->vecs || st) {
        free(offs);
        return st ? st : err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }

    /* KV cache and activations */
    const uint64_t rows = (uint64_t)g->n_seq * g->n_ctx;
    for (int il = 0; il < hp->n_layer; il++) {
        g->kc[il] = gbuf(g, rows * KD * 2, WGLLM_GPU_STORAGE, "k cache", &g->plan.kv_cache, err);
        g->vc[il] = g->kc[il] ? gbuf(g, rows * VD * 2, WGLLM_GPU_STORAGE, "v cache", &g->plan.kv_cache, err) : NULL;
        if (!g->vc[il]) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->shift_tmp = gbuf(g, (uint64_t)g->n_ctx * WGLLM_MAX(KD, VD) * 2, WGLLM_GPU_STORAGE, "shift scratch",
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
        *acts[i].b = gbuf(g, acts[i].n * 4, WGLLM_GPU_STORAGE, acts[i].name, &g->plan.activations, err);
        if (!*acts[i].b) {
            free(offs);
            return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
        }
    }
    g->logits = gbuf(g, OC * V * 4, WGLLM_GPU_STORAGE, "logits", &g->plan.logits, err);
    g->rope_cs = g->logits ? gbuf(g, B * hp->n_rot * 4, WGLLM_GPU_STORAGE, "rope cos/sin", &g->plan.params, err) : NULL;
    if (!g->rope_cs) {
        free(offs);
        return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    }

    /* dispatches, then the arena they index, then their bind groups */
    struct builder bd = {g, err, false, NULL, 0, false};
    build_ops(&bd, &vo);
    free(offs);
    if (bd.failed) return err && err->status ? err->status : WGLLM_STATUS_UNSUPPORTED;
    const union wgllm_kparams srk = {.sample = {.n_vocab = (uint32_t)hp->n_vocab, .private_slot = KP_PRIVATE_SAMPLE_ROWS}};
    const int samp_slot = slot_of(g, &srk);
    g->samp_pipe = pipe_of(g, WGLLM_KERNEL_SAMPLE_ROWS, 0, false, err);
    if (samp_slot < 0 || !g->samp_pipe)
        return samp_slot < 0 ? wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory")
                             : err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    g->shift_slot = g->n_slots; /* one more slot: the context shift's, written per shift */
    g->arena = gbuf(g, (uint64_t)(g->n_slots + 1) * SLOT_BYTES, WGLLM_GPU_UNIFORM, "param arena", &g->plan.params, err);
    if (!g->arena) return err ? err->status : WGLLM_STATUS_OUT_OF_MEMORY;
    g->shift_pipe = pipe_of(g, WGLLM_KERNEL_ROPE_SHIFT_F16, WGLLM_TYPE_F16, hp->rope_type == WGLLM_ROPE_NEOX, err);
    if (!g->shift_pipe) return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_gpu_binding sb[4] = {
            {g->arena, (uint64_t)g->shift_slot * SLOT_BYTES, sizeof(union wgllm_kparams)},
            {g->shift_tmp, 0, 0}, {g->rope_cs, 0, 0}, {g->kc[il], 0, 0}};
        if (!(g->shift_bg[il] = wgllm_gpu_bindgroup_create(g->gpu, g->shift_pipe, 4, sb, err)))
            return err ? err->status : WGLLM_STATUS_UNSUPPORTED;
    }
    const struct wgllm_gpu_binding srb[4] = {
        {g->arena, (uint64_t)samp_slot * SLOT_BYTES, sizeof(union wgllm_kparams)},
        {g->logits, 0, 0}, {g->samp_in, 0, 0}, {g->samp_out, 0, 0}};
    if (!(g->samp_bg = wgllm_gpu_bindgroup_create(g->gpu, g->samp_pipe, 4, srb, err)))
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
    st = gsync(g, err);
    if (st) return st;
    g->plan.total = wgllm_gpu_bytes_allocated(g->gpu);
    g->plan.n_buffers = wgllm_gpu_buffer_count(g->gpu);
    g->plan.n_pipelines = wgllm_gpu_pipeline_count(g->gpu);
    for (int i = 0; i < g->n_ops_logits; i++) g->plan.n_dispatches += g->ops[i].tok <= 0;
    g->plan.n_param_slots = g->n_slots;
    g->plan.out_rows = g->out_cap;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_webgpu_ctx_create(struct wgllm_model *model, const struct wgllm_context_params *params,
                                          struct wgllm_webgpu_ctx **out, char *why, size_t why_cap,
                                          struct wgllm_error *err) {
    *out = NULL;
    const bool autosel = params->backend == WGLLM_BACKEND_AUTO;
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
    g->n_ctx = params->n_ctx > 0 ? params->n_ctx : WGLLM_MIN(model->hp.n_ctx_train, 4096);
    g->n_seq = params->n_seq > 0 ? params->n_seq : 1;
    g->n_batch = params->n_batch > 0 ? params->n_batch : 512;
    g->n_batch = WGLLM_MIN(g->n_batch, g->n_ctx * g->n_seq);
    g->gpu_mem = params->gpu_mem;
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

/* ---- a pass ------------------------------------------------------------ */

static void record(struct wgllm_webgpu_ctx *g, int i0, int i1, int count) {
    for (int i = i0; i < i1; i++) {
        const struct gop *o = &g->ops[i];
        if (o->tok >= count) continue;
        if (o->when == (count >= MM_MIN_TOKENS ? WHEN_FEW : WHEN_MANY)) continue;
        uint32_t x = o->x, y = 1;
        switch (o->grow) {
        case GROW_Y: y = ceil_div((uint64_t)count, o->div); break;
        case GROW_X: x = o->x * (uint32_t)count; break;
        case GROW_XE: x = ceil_div((uint64_t)o->per * (uint64_t)count, o->div); break;
        }
        wgllm_gpu_dispatch(g->gpu, o->pipe, o->bg, x, y, 1);
    }
}

/* One pass over tokens [0, n) of the arrays (n <= n_batch; n_out <= out_cap
 * of them with `want` set): one command batch, one submit; the output rows
 * are read back into `out` (the context's host rows). */
static enum wgllm_status run_pass(struct wgllm_webgpu_ctx *g, const int32_t *tok, const int32_t *pos,
                                  const int32_t *seq, const bool *want, int n, bool embeddings, float *out,
                                  const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                  struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint32_t B = (uint32_t)g->n_batch;
    uint32_t *st = g->step_host;
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        st[i] = (uint32_t)tok[i];
        st[B + i] = (uint32_t)(seq[i] * g->n_ctx + pos[i]);
        st[2 * B + i] = (uint32_t)pos[i] + 1;
        if (want[i]) st[3 * B + n_out++] = (uint32_t)i;
        /* the table the CPU backend rotates by (backend/rope.h): both use libm's cos/sin */
        float *cs = g->rope_host + (size_t)i * hp->n_rot;
        if (i > 0 && pos[i] == pos[i - 1])
            memcpy(cs, cs - hp->n_rot, sizeof(float) * (size_t)hp->n_rot);
        else
            wgllm_rope_table(cs, pos[i], g->model);
    }
    for (int a = 0; a < 4; a++)
        if (a < 3 || n_out) wgllm_gpu_buffer_write(g->gpu, g->step, (uint64_t)a * B * 4, st + a * B, (size_t)(a < 3 ? n : n_out) * 4);
    wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)n * hp->n_rot * sizeof(float));
    wgllm_gpu_batch_begin(g->gpu);
    record(g, 0, g->n_ops_layers, n);
    const uint64_t width = embeddings ? (uint64_t)hp->n_embd : (uint64_t)hp->n_vocab;
    int n_host = n_out, n_dev = 0; /* rows read back, rows sampled here */
    if (n_out && rs) {
        n_host = 0;
        for (int j = 0; j < n_out; j++)
            if (!rs[j].sp) g->samp_row[n_host++] = j;
        for (int j = 0; j < n_out; j++) {
            const struct wgllm_sampler_params *sp = rs[j].sp;
            if (!sp) continue;
            uint32_t *w = g->samp_host + 8 * n_dev;
            const bool greedy = sp->temperature <= 0.0f;
            w[0] = (uint32_t)j;
            w[1] = greedy ? 0u : (uint32_t)sp->top_k;
            w[2] = (uint32_t)(sp->seed ^ (sp->seed >> 32)); /* as generate seeds SAMPLE */
            w[3] = (uint32_t)rs[j].pos;
            memcpy(&w[4], &sp->temperature, 4);
            memcpy(&w[5], &sp->top_p, 4);
            memcpy(&w[6], &sp->min_p, 4);
            w[7] = 0;
            g->samp_row[n_out - 1 - n_dev++] = j; /* from the end: the host rows fill the front */
        }
        wgllm_gpu_buffer_write(g->gpu, g->samp_in, 0, g->samp_host, (size_t)n_dev * 8 * 4);
    }
    if (n_out) {
        record(g, g->n_ops_layers, embeddings ? g->n_ops_norm : g->n_ops_logits, n_out);
        if (n_host == n_out) {
            wgllm_gpu_copy(g->gpu, embeddings ? g->xn : g->logits, 0, g->readback, 0, (uint64_t)n_out * width * 4);
        } else {
            /* the rows read back, packed at the front of the readback, then the sampled ids */
            for (int i = 0; i < n_host; i++)
                wgllm_gpu_copy(g->gpu, g->logits, (uint64_t)g->samp_row[i] * width * 4, g->readback,
                               (uint64_t)i * width * 4, width * 4);
            wgllm_gpu_dispatch(g->gpu, g->samp_pipe, g->samp_bg, (uint32_t)n_dev, 1, 1);
            wgllm_gpu_copy(g->gpu, g->samp_out, 0, g->readback, (uint64_t)n_host * width * 4, (uint64_t)n_dev * 8);
        }
    }
    enum wgllm_status s = wgllm_gpu_batch_submit(g->gpu, err);
    if (!s && n_host == n_out && n_out)
        s = wgllm_gpu_readback(g->gpu, g->readback, 0, out, (size_t)n_out * width * 4, err);
    if (!s && n_host < n_out) {
        /* into out: k rows then 2 words per sampled row (n_out rows of width >= 2 floats hold them) */
        const size_t head = (size_t)n_host * width;
        s = wgllm_gpu_readback(g->gpu, g->readback, 0, out, head * 4 + (size_t)n_dev * 8, err);
        if (s) return s;
        for (int d = 0; d < n_dev; d++) {
            const int j = g->samp_row[n_out - 1 - d];
            uint32_t w[2];
            memcpy(w, out + head + 2 * (size_t)d, 8);
            s_tok[j] = (int32_t)w[0];
            memcpy(&s_lp[j], &w[1], 4);
        }
        /* each host row to its output's place, the last first (a row only moves up) */
        for (int i = n_host - 1; i >= 0; i--)
            if (g->samp_row[i] != i)
                memmove(out + (size_t)g->samp_row[i] * width, out + (size_t)i * width, width * 4);
    }
    return s;
}

/* The backend's decode: the tokens as passes of at most out_cap outputs
 * each (a pass per group is equivalent: a sequence's tokens come in
 * increasing positions, so a later pass finds the earlier ones' keys and
 * values in the cache). */
static enum wgllm_status decode_rows(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                     const struct wgllm_row_sample *rs, int32_t *s_tok, float *s_lp,
                                     struct wgllm_error *err) {
    const int32_t *tok = ub->token, *pos = ub->pos, *seq = ub->seq;
    const bool *want = ub->output;
    const int n = ub->n;
    const size_t width = ub->embeddings ? (size_t)g->model->hp.n_embd : (size_t)g->model->hp.n_vocab;
    int row0 = 0, i0 = 0;
    while (i0 < n) {
        int i1 = i0, no = 0;
        for (; i1 < n; i1++)
            if (want[i1]) {
                if (no == g->out_cap) break;
                no++;
            }
        enum wgllm_status s = run_pass(g, tok + i0, pos + i0, seq + i0, want + i0, i1 - i0, ub->embeddings,
                                       ub->out + row0 * width, rs ? rs + row0 : NULL, s_tok ? s_tok + row0 : NULL,
                                       s_lp ? s_lp + row0 : NULL, err);
        if (s) return s;
        row0 += no;
        i0 = i1;
    }
    return WGLLM_STATUS_OK;
}

static enum wgllm_status webgpu_decode(void *b, const struct wgllm_ubatch *ub, struct wgllm_error *err) {
    return decode_rows(b, ub, NULL, NULL, NULL, err);
}

/* The backend's decode_sampled: as decode, each pass's sampled rows picked
 * by one SAMPLE_ROWS dispatch after the logits, only their ids and logprobs
 * read back (with the rows of the others). */
static enum wgllm_status webgpu_decode_sampled(void *b, const struct wgllm_ubatch *ub,
                                               const struct wgllm_row_sample *rs, int32_t *tok, float *lp,
                                               struct wgllm_error *err) {
    return decode_rows(b, ub, rs, tok, lp, err);
}

/* ---- generation on the GPU --------------------------------------------- */

/* Queues one decode step of sequence 0 at `pos`: its token is `tok`, or
 * (tok < 0) the id the previous step's argmax left in the step buffer;
 * the step's own argmax goes there too and is copied to id_rb[rb]. */
static enum wgllm_status queue_greedy_step(struct wgllm_webgpu_ctx *g, bool sampled, int32_t tok, int pos, int rb,
                                           struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint64_t B = (uint64_t)g->n_batch;
    const uint32_t v[3] = {(uint32_t)pos, (uint32_t)pos + 1, 0}; /* cache row (sequence 0), length, output row */
    if (tok >= 0) {
        const uint32_t t = (uint32_t)tok;
        wgllm_gpu_buffer_write(g->gpu, g->step, 0, &t, 4);
    }
    for (int a = 0; a < 3; a++) wgllm_gpu_buffer_write(g->gpu, g->step, (uint64_t)(a + 1) * B * 4, &v[a], 4);
    wgllm_rope_table(g->rope_host, pos, g->model);
    wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)hp->n_rot * sizeof(float));
    wgllm_gpu_batch_begin(g->gpu);
    record(g, 0, g->n_ops_layers, 1);
    record(g, g->n_ops_layers, g->n_ops_logits, 1);
    const int pick = g->n_ops_logits + (sampled ? 1 : 0); /* the argmax, or the sampler */
    record(g, pick, pick + 1, 1);
    wgllm_gpu_copy(g->gpu, g->step, 0, g->id_rb[rb], 0, 16);
    return wgllm_gpu_batch_submit(g->gpu, err);
}

/* The first sampled token, from the logits row the prompt's pass left on
 * the GPU (one output row): only the SAMPLE dispatch, seeded by position n_past. */
static enum wgllm_status sample_first(struct wgllm_webgpu_ctx *g, const struct wgllm_gen_state *gs, int32_t *tok,
                                      struct wgllm_error *err) {
    if (*gs->n_logits != 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "sampling on the GPU starts from a decode that kept one row of logits (it kept %d)",
                               *gs->n_logits);
    const uint32_t len = (uint32_t)*gs->n_past;
    wgllm_gpu_buffer_write(g->gpu, g->step, 2 * (uint64_t)g->n_batch * 4, &len, 4);
    wgllm_gpu_batch_begin(g->gpu);
    record(g, g->n_ops_logits + 1, g->n_ops_logits + 2, 1);
    wgllm_gpu_copy(g->gpu, g->step, 0, g->id_rb[0], 0, 16);
    enum wgllm_status st = wgllm_gpu_batch_submit(g->gpu, err);
    uint32_t id[4];
    if (!st) st = wgllm_gpu_readback(g->gpu, g->id_rb[0], 0, id, 16, err);
    if (!st) *tok = (int32_t)id[0];
    return st;
}

/* What WGLLM_KERNEL_SAMPLE implements of the CPU sampler chain. */
static bool webgpu_can_sample(const struct wgllm_sampler_params *sp) {
    return sp->temperature > 0.0f && sp->top_k > 0 && sp->top_k <= 64 && sp->typical_p >= 1.0f &&
           (sp->repeat_penalty == 1.0f || sp->penalty_last_n == 0) && sp->presence_penalty == 0.0f &&
           sp->frequency_penalty == 0.0f && sp->n_logit_bias == 0 && sp->n_probs == 0;
}

/* The backend's generate (backend.h's wgllm_context_generate; the context
 * has checked that a decode left logits and that n > 0): each step's token
 * picked on the GPU, by the argmax (sp NULL) or the SAMPLE op, whose
 * parameter slot is written here. */
static enum wgllm_status webgpu_generate(void *b, const struct wgllm_sampler_params *sp, struct wgllm_gen_state *gs,
                                         int n, bool (*on_token)(int32_t, void *), void *user, int *n_out,
                                         struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = b;
    *n_out = 0;
    const bool sampled = sp != NULL;
    if (sampled) {
        if (!webgpu_can_sample(sp))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "sampling on the GPU takes temperature > 0, top_k "
                                   "1..64, top_p, min_p and a seed; no penalties, typical_p, logit bias or n_probs");
        const struct gop *o = &g->ops[g->n_ops_logits + 1];
        const union wgllm_kparams sk = {.sample = {.n_vocab = (uint32_t)g->model->hp.n_vocab,
                                                   .len_at = 2 * (uint32_t)g->n_batch,
                                                   .private_slot = KP_PRIVATE_SAMPLE, .top_k = (uint32_t)sp->top_k,
                                                   .seed = (uint32_t)(sp->seed ^ (sp->seed >> 32)),
                                                   .temperature = sp->temperature, .top_p = sp->top_p,
                                                   .min_p = sp->min_p}};
        wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)o->slot * SLOT_BYTES, &sk, sizeof sk);
    }
    const int V = g->model->hp.n_vocab;
    /* the first token: greedy from the logits already on the host; sampled,
     * the GPU samples it too (re-running the last position's head on the
     * logits row it left) */
    int32_t tok = -1;
    const float *l = gs->logits + (size_t)(*gs->n_logits - 1) * V;
    for (int i = 0; i < V; i++)
        if (tok < 0 || l[i] > l[tok]) tok = i;
    if (sampled) {
        enum wgllm_status s0 = sample_first(g, gs, &tok, err);
        if (s0) return s0;
    }
    const int p0 = *gs->n_past;
    enum wgllm_status s = WGLLM_STATUS_OK;
    int queued = 0; /* steps queued: step k consumes token k-1 at position p0 + k - 1 and makes token k */
    for (int k = 0; k < n; k++) {
        /* keep one step ahead: step k+1 is queued before token k is read */
        while (!s && queued < WGLLM_MIN(k + 1, n - 1) && p0 + queued < g->n_ctx) {
            s = queue_greedy_step(g, sampled, queued == 0 ? tok : -1, p0 + queued, (queued + 1) % 2, err);
            queued++;
        }
        if (s) break;
        if (k > 0) {
            uint32_t id[4];
            s = wgllm_gpu_readback(g->gpu, g->id_rb[k % 2], 0, id, 16, err);
            if (s) break;
            tok = (int32_t)id[0];
        }
        (*n_out)++;
        *gs->n_past = p0 + k; /* tokens before this one are in the cache */
        if (!on_token(tok, user)) break;
        if (k + 1 < n && p0 + k >= g->n_ctx) {
            s = wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL, "the context's %d positions are used", g->n_ctx);
            break;
        }
    }
    if (!s && queued > *n_out - 1 && *n_out > 0) { /* a step queued past the end: wait for it, drop its token */
        uint32_t id[4];
        s = wgllm_gpu_readback(g->gpu, g->id_rb[(queued) % 2], 0, id, 16, err);
    }
    *gs->n_logits = 0; /* the host logits are those of the prompt, not of the last step */
    return s;
}

/* ---- sequences ------------------------------------------------------------ */

static void webgpu_seq_copy(void *b, int src, int dst, int n) {
    struct wgllm_webgpu_ctx *g = b;
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint64_t kr = (uint64_t)hp->n_head_kv * hp->head_dim_k * 2, vr = (uint64_t)hp->n_head_kv * hp->head_dim_v * 2;
    const uint64_t ss = (uint64_t)g->n_ctx;
    /* WebGPU copies never have one buffer as both source and target: go
     * through a scratch activation buffer (free between passes), in pieces */
    struct wgllm_gpu_buffer *via = g->gate;
    const uint64_t cap = wgllm_gpu_buffer_size(via);
    wgllm_gpu_batch_begin(g->gpu);
    for (int il = 0; il < hp->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            struct wgllm_gpu_buffer *c = kv ? g->vc[il] : g->kc[il];
            const uint64_t row = kv ? vr : kr, piece = cap / row * row, bytes = (uint64_t)n * row;
            WGLLM_ASSERT(piece > 0);
            for (uint64_t o = 0; o < bytes; o += piece) {
                const uint64_t sz = WGLLM_MIN(piece, bytes - o);
                wgllm_gpu_copy(g->gpu, c, src * ss * row + o, via, 0, sz);
                wgllm_gpu_copy(g->gpu, via, 0, c, dst * ss * row + o, sz);
            }
        }
    struct wgllm_error err = {0};
    if (wgllm_gpu_batch_submit(g->gpu, &err)) wgllm_log(WGLLM_LOG_ERROR, "webgpu: sequence copy: %s", err.message);
}

/* Snapshots hold, per layer, the n keys then the n values (rows as the cache
 * holds them). Saving goes through the readback buffer in pieces. */
static void seq_io(struct wgllm_webgpu_ctx *g, int seq, int n, char *buf, bool save) {
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint64_t rb = wgllm_gpu_buffer_size(g->readback);
    for (int il = 0; il < hp->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            struct wgllm_gpu_buffer *c = kv ? g->vc[il] : g->kc[il];
            const uint64_t row = (uint64_t)hp->n_head_kv * (kv ? hp->head_dim_v : hp->head_dim_k) * 2;
            const uint64_t off = (uint64_t)seq * g->n_ctx * row, bytes = (uint64_t)n * row;
            if (!save) {
                wgllm_gpu_buffer_write(g->gpu, c, off, buf, bytes);
                buf += bytes;
                continue;
            }
            const uint64_t piece = rb / row * row;
            for (uint64_t o = 0; o < bytes; o += piece) {
                const uint64_t sz = WGLLM_MIN(piece, bytes - o);
                struct wgllm_error err = {0};
                wgllm_gpu_batch_begin(g->gpu);
                wgllm_gpu_copy(g->gpu, c, off + o, g->readback, 0, sz);
                if (wgllm_gpu_batch_submit(g->gpu, &err) || wgllm_gpu_readback(g->gpu, g->readback, 0, buf + o, sz, &err))
                    wgllm_log(WGLLM_LOG_ERROR, "webgpu: sequence save: %s", err.message);
            }
            buf += bytes;
        }
}

static void webgpu_seq_save(void *b, int seq, int n, void *dst) { seq_io(b, seq, n, dst, true); }
static void webgpu_seq_load(void *b, int seq, int n, const void *src) { seq_io(b, seq, n, (char *)src, false); }

/* As the CPU backend's shift (backend/cpu/forward.c): RoPE angles are linear
 * in the position, so turning a cached key by the delta's rotation gives the
 * key of its new position; the same host table (backend/rope.h's of
 * -discard) makes both backends turn by the same angles. Per layer: the
 * moved K rows go to the scratch and come back turned (ROPE_SHIFT_F16), the
 * V rows go to the scratch and back; all layers in one submit. */
static enum wgllm_status webgpu_seq_shift(void *b, int seq, int n, int keep, int discard, struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = b;
    const int n_move = n - keep - discard;
    const struct wgllm_hparams *hp = &g->model->hp;
    const uint64_t KD = (uint64_t)hp->n_head_kv * hp->head_dim_k, VD = (uint64_t)hp->n_head_kv * hp->head_dim_v;
    wgllm_rope_table(g->rope_host, -discard, g->model);
    wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)hp->n_rot * sizeof(float));
    const uint64_t row0 = (uint64_t)seq * g->n_ctx;
    const union wgllm_kparams kp = {.rope_shift = {.words = (uint32_t)((uint64_t)n_move * KD / 2),
                                                   .row_words = (uint32_t)(KD / 2), .head_dim = (uint32_t)hp->head_dim_k,
                                                   .n_rot = (uint32_t)hp->n_rot,
                                                   .y_off = (uint32_t)((row0 + (uint64_t)keep) * KD / 2)}};
    wgllm_gpu_buffer_write(g->gpu, g->arena, (uint64_t)g->shift_slot * SLOT_BYTES, &kp, sizeof kp);
    const uint32_t wg = ceil_div(kp.rope_shift.words, g->tune->wg_elem);
    const uint32_t gx = WGLLM_MIN(wg, wgllm_gpu_get_info(g->gpu)->max_workgroups_per_dim), gy = ceil_div(wg, gx);
    wgllm_gpu_batch_begin(g->gpu);
    for (int il = 0; il < hp->n_layer; il++) {
        wgllm_gpu_copy(g->gpu, g->kc[il], (row0 + keep + discard) * KD * 2, g->shift_tmp, 0, (uint64_t)n_move * KD * 2);
        wgllm_gpu_dispatch(g->gpu, g->shift_pipe, g->shift_bg[il], gx, gy, 1);
        wgllm_gpu_copy(g->gpu, g->vc[il], (row0 + keep + discard) * VD * 2, g->shift_tmp, 0, (uint64_t)n_move * VD * 2);
        wgllm_gpu_copy(g->gpu, g->shift_tmp, 0, g->vc[il], (row0 + keep) * VD * 2, (uint64_t)n_move * VD * 2);
    }
    enum wgllm_status st = wgllm_gpu_batch_submit(g->gpu, err);
    if (st) wgllm_error_prefix(err, "webgpu: context shift: ");
    return st;
}

/* ---- memory, the table ------------------------------------------------- */

static uint64_t webgpu_host_memory(const void *b) {
    const struct wgllm_webgpu_ctx *g = b;
    return (uint64_t)g->n_batch * (4 * 4 + g->model->hp.n_rot * 4); /* the step and RoPE tables */
}

static uint64_t webgpu_device_memory(const void *b) {
    return wgllm_gpu_bytes_allocated(((const struct wgllm_webgpu_ctx *)b)->gpu);
}

void wgllm_webgpu_get_plan(const struct wgllm_webgpu_ctx *g, struct wgllm_webgpu_plan *plan) { *plan = g->plan; }

static enum wgllm_status webgpu_init(struct wgllm_model *model, const struct wgllm_context_params *p, void **out,
                                     int *n_ctx, int *n_batch, char *desc, size_t desc_cap, struct wgllm_error *err) {
    struct wgllm_webgpu_ctx *g = NULL;
    enum wgllm_status st = wgllm_webgpu_ctx_create(model, p, &g, desc, desc_cap, err);
    *out = g;
    if (g) *n_ctx = g->n_ctx, *n_batch = g->n_batch;
    return st;
}

static void webgpu_free(void *b) { wgllm_webgpu_ctx_free(b); }

const struct wgllm_backend_i wgllm_backend_webgpu_i = {
    .name = "webgpu",
    .init = webgpu_init,
    .free = webgpu_free,
    .decode = webgpu_decode,
    .seq_copy = webgpu_seq_copy,
    .seq_save = webgpu_seq_save,
    .seq_load = webgpu_seq_load,
    .seq_shift = webgpu_seq_shift,
    .host_memory = webgpu_host_memory,
    .device_memory = webgpu_device_memory,
    .can_sample = webgpu_can_sample,
    .generate = webgpu_generate,
    .decode_sampled = webgpu_decode_sampled,
};

struct wgllm_webgpu_ctx *wgllm_context_webgpu(struct wgllm_context *c) {
    return wgllm_context_backend_state(c, &wgllm_backend_webgpu_i);
}
