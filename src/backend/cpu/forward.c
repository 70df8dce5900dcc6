/*
 * forward.c - the CPU backend: a wgllm_context (KV cache + scratch, planned
 * and allocated once) and the decoder forward pass over a batch of tokens.
 *
 * The whole pass is one fork-join job: every thread walks the same list of
 * steps, does its share of each (rows of a matrix product, heads of
 * attention) and meets the others at a barrier. Weights stay in their GGUF
 * block format; each matrix product first converts its input rows to the
 * weight type's vec_dot_type (Q8_0 for Q4_0/Q8_0, ...) as llama.cpp does.
 * Nothing is allocated per token.
 */
#include "backend/cpu/ops.h"
#include "base/threadpool.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/repack.h"

#include <math.h>

#define N_ACT_SLOTS 3 /* distinct vec_dot_types one matmul group can need (q, k, v) */

struct act {
    const void *data; /* row t starts at data + t * stride */
    size_t stride;
};

struct wgllm_context {
    struct wgllm_model *model;
    int n_ctx, n_batch, n_threads;
    struct wgllm_threadpool *tp;
    int n_past;

    wgllm_fp16 *k_cache; /* [layer][pos][n_head_kv * head_dim_k] */
    wgllm_fp16 *v_cache; /* [layer][n_head_kv * head_dim_v][pos]: transposed */
    size_t kv_layer_k, kv_layer_v; /* elements per layer */

    /* scratch, n_batch rows each */
    float *x, *xn, *q, *k, *v, *att, *gate, *up;
    void *act_buf[N_ACT_SLOTS];
    size_t act_slot_bytes;
    float *scores;  /* n_threads x n_ctx */
    wgllm_fp16 *tmp16; /* n_threads x (n_ctx + head_dim) */
    float *rope_cs; /* n_batch x n_rot */

    float *logits;     /* logits_cap rows of n_vocab */
    int logits_cap;    /* rows allocated */
    int n_logits;      /* rows valid after the last decode */

    /* the chunk being computed (read by all threads) */
    const int32_t *tokens;
    int n_tok, pos0;
    int out_first; /* first row whose logits are kept (n_tok-1 unless all) */
    float *out_logits;
    uint64_t bytes; /* allocated, for wgllm_context_memory */
};

/* ---- matrix products ---------------------------------------------------- */

/* Converts rows [0,n) of src (ld floats apart) to `type`, each thread taking
 * its share of rows; returns where the converted rows are. */
static struct act act_prepare(struct wgllm_context *c, int ith, int nth, int slot, const float *src,
                              int ld, int n, int64_t K, uint32_t type) {
    if (type == WGLLM_TYPE_F32) return (struct act){src, (size_t)ld * sizeof(float)};
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    size_t stride = wgllm_row_size(type, K);
    WGLLM_ASSERT(stride * (size_t)n <= c->act_slot_bytes);
    char *dst = c->act_buf[slot];
    int64_t lo, hi;
    if (n >= nth) {
        wgllm_split_range(n, ith, nth, 1, &lo, &hi);
        for (int64_t t = lo; t < hi; t++) tr->from_float(src + t * ld, dst + t * stride, K);
    } else {
        /* few rows (decode): split each row by blocks instead */
        int64_t nb = K / tr->blck_size;
        wgllm_split_range(nb, ith, nth, 1, &lo, &hi);
        if (hi > lo)
            for (int t = 0; t < n; t++)
                tr->from_float(src + t * ld + lo * tr->blck_size, dst + t * stride + (size_t)lo * tr->type_size,
                               (hi - lo) * tr->blck_size);
    }
    return (struct act){dst, stride};
}

/* y[t*ldy + r] (+)= W[r] . x[t] for this thread's share of the rows r0..r1. */
static void matmul_rows(const struct wgllm_weight *w, struct act x, int n, float *y, int ldy, int64_t r0,
                        int64_t r1, bool accumulate, const float *bias) {
    const wgllm_vec_dot_fn dot = wgllm_type_traits(w->type)->vec_dot;
    const char *wd = w->data;
    enum { RB = 16 };
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = WGLLM_MIN(r1, rb + RB);
        for (int t = 0; t < n; t++) {
            const char *xt = (const char *)x.data + (size_t)t * x.stride;
            float *yt = y + (size_t)t * ldy;
            for (int64_t r = rb; r < re; r++) {
                float s;
                dot(w->ne0, &s, wd + (size_t)r * w->row_size, xt);
                if (bias) s += bias[r];
                yt[r] = accumulate ? yt[r] + s : s;
            }
        }
    }
}

/* Rows r0..r1 (multiples of 16 except at the end) through the repacked
 * kernel when the weight has one, else row by row. */
static void matmul_range(const struct wgllm_weight *w, struct act x, int n, float *y, int ldy, int64_t r0,
                         int64_t r1, bool accumulate, const float *bias) {
    if (r1 <= r0) return;
    if (!w->rp) {
        matmul_rows(w, x, n, y, ldy, r0, r1, accumulate, bias);
        return;
    }
    wgllm_repacked_matmul(w->rp, r0, r1, x.data, x.stride, n, y, ldy, accumulate);
    if (bias)
        for (int t = 0; t < n; t++)
            for (int64_t r = r0; r < r1; r++) y[(size_t)t * ldy + r] += bias[r];
}

static void matmul(const struct wgllm_weight *w, struct act x, int n, float *y, int ldy, int ith, int nth,
                   bool accumulate, const float *bias) {
    int64_t r0, r1;
    wgllm_split_range(w->ne1, ith, nth, 16, &r0, &r1);
    matmul_range(w, x, n, y, ldy, r0, r1, accumulate, bias);
}

static uint32_t vdt(const struct wgllm_weight *w) { return wgllm_type_traits(w->type)->vec_dot_type; }

/* ---- attention -------------------------------------------------------- */

/* One head of one token: softmax(q.K^T * scale) . V over positions 0..pos.
 * q and the probabilities are rounded to f16 first because ggml multiplies
 * them with the f16 cache in f16 (its vec_dot_type). */
static void attend_head(struct wgllm_context *c, int il, int pos, int h, const float *q, float *out, int ith) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int kvh = h / (hp->n_head / hp->n_head_kv);
    const size_t krow = (size_t)hp->n_head_kv * dk;
    const wgllm_fp16 *K = c->k_cache + il * c->kv_layer_k + (size_t)kvh * dk;
    /* V is stored transposed ([dim][position]) as ggml does without flash
     * attention, so that each output dimension is one f16 dot product over
     * positions, summed in the same order as llama.cpp. */
    const wgllm_fp16 *Vt = c->v_cache + il * c->kv_layer_v + (size_t)kvh * dv * c->n_ctx;
    float *s = c->scores + (size_t)ith * c->n_ctx;
    wgllm_fp16 *tmp = c->tmp16 + (size_t)ith * (c->n_ctx + dk); /* q, then the probabilities */
    const wgllm_vec_dot_fn dot16 = wgllm_type_traits(WGLLM_TYPE_F16)->vec_dot;
    wgllm_fp32_to_fp16_row(q, tmp, dk);
    const float scale = 1.0f / sqrtf((float)dk);
    const int n = pos + 1;
    for (int j = 0; j < n; j++) {
        float d;
        dot16(dk, &d, K + (size_t)j * krow, tmp);
        s[j] = d * scale;
    }
    wgllm_op_softmax(s, n);
    wgllm_fp32_to_fp16_row(s, tmp, n);
    for (int d = 0; d < dv; d++) dot16(n, &out[d], Vt + (size_t)d * c->n_ctx, tmp);
}

/* ---- the forward pass ------------------------------------------------- */

static void forward_worker(void *arg, int ith, int nth) {
    struct wgllm_context *c = arg;
    const struct wgllm_model *m = c->model;
    const struct wgllm_hparams *hp = &m->hp;
    struct wgllm_threadpool *tp = c->tp;
    const int E = hp->n_embd, F = hp->n_ff, n = c->n_tok;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;
    int64_t lo, hi;

    /* embeddings + rope angles of the chunk's positions */
    const struct wgllm_type_traits *et = wgllm_type_traits(m->tok_embd.type);
    wgllm_split_range(n, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        et->to_float((const char *)m->tok_embd.data + (size_t)c->tokens[t] * m->tok_embd.row_size,
                     c->x + t * E, E);
        wgllm_op_rope_cache(c->rope_cs + t * hp->n_rot, c->pos0 + (int)t, hp->n_rot, hp->rope_freq_base,
                            hp->rope_freq_scale, m->rope_freqs);
    }
    wgllm_threadpool_barrier(tp);

    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        /* In the last layer only the rows whose logits are wanted go on
         * after attention (the others only had to fill the KV cache). */
        const bool last = il == hp->n_layer - 1;
        const int r0 = last ? c->out_first : 0, nr = n - r0;

        /* attention norm, then q/k/v */
        for (int64_t t = lo; t < hi; t++) wgllm_op_rms_norm(c->x + t * E, L->attn_norm, c->xn + t * E, E, hp->rms_eps);
        wgllm_threadpool_barrier(tp);
        struct act aq = act_prepare(c, ith, nth, 0, c->xn, E, n, E, vdt(&L->wq));
        struct act ak = vdt(&L->wk) == vdt(&L->wq) ? aq : act_prepare(c, ith, nth, 1, c->xn, E, n, E, vdt(&L->wk));
        struct act av = vdt(&L->wv) == vdt(&L->wq) ? aq
                        : vdt(&L->wv) == vdt(&L->wk) ? ak
                                                     : act_prepare(c, ith, nth, 2, c->xn, E, n, E, vdt(&L->wv));
        wgllm_threadpool_barrier(tp);
        matmul(&L->wq, aq, n, c->q, QD, ith, nth, false, L->bq);
        matmul(&L->wk, ak, n, c->k, KD, ith, nth, false, L->bk);
        matmul(&L->wv, av, n, c->v, VD, ith, nth, false, L->bv);
        wgllm_threadpool_barrier(tp);

        /* per-head q/k norm (qwen3), RoPE, and the new keys/values into the cache */
        const int items = n * (hp->n_head + hp->n_head_kv);
        wgllm_split_range(items, ith, nth, 1, &lo, &hi);
        for (int64_t it = lo; it < hi; it++) {
            const int t = (int)(it / (hp->n_head + hp->n_head_kv));
            const int hh = (int)(it % (hp->n_head + hp->n_head_kv));
            const float *cs = c->rope_cs + (size_t)t * hp->n_rot;
            if (hh < hp->n_head) {
                float *qh = c->q + (size_t)t * QD + (size_t)hh * dk;
                if (L->q_norm) wgllm_op_rms_norm(qh, L->q_norm, qh, dk, hp->rms_eps);
                wgllm_op_rope(qh, cs, hp->n_rot, neox);
            } else {
                const int h = hh - hp->n_head;
                float *kh = c->k + (size_t)t * KD + (size_t)h * dk;
                if (L->k_norm) wgllm_op_rms_norm(kh, L->k_norm, kh, dk, hp->rms_eps);
                wgllm_op_rope(kh, cs, hp->n_rot, neox);
                const size_t pos = (size_t)(c->pos0 + t);
                wgllm_fp32_to_fp16_row(kh, c->k_cache + il * c->kv_layer_k + pos * KD + (size_t)h * dk, dk);
                const float *vh = c->v + (size_t)t * VD + (size_t)h * dv;
                wgllm_fp16 *vt = c->v_cache + il * c->kv_layer_v + (size_t)h * dv * c->n_ctx + pos;
                for (int d = 0; d < dv; d++) vt[(size_t)d * c->n_ctx] = wgllm_fp32_to_fp16(vh[d]);
            }
        }
        wgllm_threadpool_barrier(tp);

        /* attention, rows r0.. only */
        wgllm_split_range((int64_t)nr * hp->n_head, ith, nth, 1, &lo, &hi);
        for (int64_t it = lo; it < hi; it++) {
            const int t = r0 + (int)(it / hp->n_head), h = (int)(it % hp->n_head);
            attend_head(c, il, c->pos0 + t, h, c->q + (size_t)t * QD + (size_t)h * dk,
                        c->att + (size_t)t * OD + (size_t)h * dv, ith);
        }
        wgllm_threadpool_barrier(tp);

        /* output projection into the residual stream */
        struct act ao = act_prepare(c, ith, nth, 0, c->att + (size_t)r0 * OD, OD, nr, OD, vdt(&L->wo));
        wgllm_threadpool_barrier(tp);
        matmul(&L->wo, ao, nr, c->x + (size_t)r0 * E, E, ith, nth, true, NULL);
        wgllm_threadpool_barrier(tp);

        /* feed-forward: SwiGLU */
        wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
        for (int64_t t = r0 + lo; t < r0 + hi; t++)
            wgllm_op_rms_norm(c->x + t * E, L->ffn_norm, c->xn + t * E, E, hp->rms_eps);
        wgllm_threadpool_barrier(tp);
        struct act ag = act_prepare(c, ith, nth, 0, c->xn + (size_t)r0 * E, E, nr, E, vdt(&L->w_gate));
        struct act au = vdt(&L->w_up) == vdt(&L->w_gate)
                            ? ag
                            : act_prepare(c, ith, nth, 1, c->xn + (size_t)r0 * E, E, nr, E, vdt(&L->w_up));
        wgllm_threadpool_barrier(tp);
        {
            int64_t f0, f1;
            wgllm_split_range(F, ith, nth, 16, &f0, &f1);
            matmul_range(&L->w_gate, ag, nr, c->gate, F, f0, f1, false, NULL);
            matmul_range(&L->w_up, au, nr, c->up, F, f0, f1, false, NULL);
            for (int t = 0; t < nr; t++)
                wgllm_op_swiglu(c->gate + (size_t)t * F + f0, c->up + (size_t)t * F + f0, c->gate + (size_t)t * F + f0,
                                (int)(f1 - f0));
        }
        wgllm_threadpool_barrier(tp);
        struct act ad = act_prepare(c, ith, nth, 0, c->gate, F, nr, F, vdt(&L->w_down));
        wgllm_threadpool_barrier(tp);
        matmul(&L->w_down, ad, nr, c->x + (size_t)r0 * E, E, ith, nth, true, NULL);
        wgllm_threadpool_barrier(tp);
        wgllm_split_range(n, ith, nth, 1, &lo, &hi); /* rows for the next layer's norm */
    }

    /* final norm and logits of rows out_first.. */
    const int r0 = c->out_first, nr = n - r0;
    wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
    for (int64_t t = r0 + lo; t < r0 + hi; t++) wgllm_op_rms_norm(c->x + t * E, m->output_norm, c->xn + t * E, E, hp->rms_eps);
    wgllm_threadpool_barrier(tp);
    struct act a = act_prepare(c, ith, nth, 0, c->xn + (size_t)r0 * E, E, nr, E, vdt(&m->output));
    wgllm_threadpool_barrier(tp);
    matmul(&m->output, a, nr, c->out_logits, hp->n_vocab, ith, nth, false, NULL);
}

/* ---- context ---------------------------------------------------------- */

struct wgllm_context_params wgllm_context_default_params(void) {
    struct wgllm_context_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0};
    return p;
}

void wgllm_context_free(struct wgllm_context *c) {
    if (!c) return;
    wgllm_threadpool_free(c->tp);
    void *bufs[] = {c->k_cache, c->v_cache, c->x, c->xn, c->q, c->k, c->v, c->att, c->gate, c->up,
                    c->scores, c->tmp16, c->rope_cs, c->logits, c->act_buf[0], c->act_buf[1], c->act_buf[2]};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) wgllm_free_aligned(bufs[i]);
    free(c);
}

static void *ctx_alloc(struct wgllm_context *c, size_t bytes) {
    c->bytes += bytes;
    return wgllm_alloc_aligned(bytes);
}

static bool grow_logits(struct wgllm_context *c, int rows) {
    if (rows <= c->logits_cap) return true;
    float *p = wgllm_alloc_aligned((size_t)rows * c->model->hp.n_vocab * sizeof(float));
    if (!p) return false;
    wgllm_free_aligned(c->logits);
    c->logits = p;
    c->logits_cap = rows;
    return true;
}

enum wgllm_status wgllm_context_init(struct wgllm_model *model, const struct wgllm_context_params *params,
                                     struct wgllm_context **out, struct wgllm_error *err) {
    *out = NULL;
    if (model->vocab_only)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "the model file holds only a vocabulary (no weights)");
    struct wgllm_context_params p = params ? *params : wgllm_context_default_params();
    const struct wgllm_hparams *hp = &model->hp;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "negative n_ctx, n_batch or n_threads");
    if (p.n_ctx == 0) p.n_ctx = WGLLM_MIN(hp->n_ctx_train, 4096);
    if (p.n_batch == 0) p.n_batch = 512;
    p.n_batch = WGLLM_MIN(p.n_batch, p.n_ctx);
    struct wgllm_context *c = calloc(1, sizeof(*c));
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->model = model;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    c->n_threads = p.n_threads ? p.n_threads : model->n_threads;
    c->tp = wgllm_threadpool_init(c->n_threads);
    const size_t B = (size_t)c->n_batch, E = hp->n_embd, F = hp->n_ff;
    const size_t QD = (size_t)hp->n_head * hp->head_dim_k, KD = (size_t)hp->n_head_kv * hp->head_dim_k,
                 VD = (size_t)hp->n_head_kv * hp->head_dim_v, OD = (size_t)hp->n_head * hp->head_dim_v;
    c->kv_layer_k = (size_t)c->n_ctx * KD;
    c->kv_layer_v = (size_t)c->n_ctx * VD;
    c->k_cache = ctx_alloc(c, hp->n_layer * c->kv_layer_k * sizeof(wgllm_fp16));
    c->v_cache = ctx_alloc(c, hp->n_layer * c->kv_layer_v * sizeof(wgllm_fp16));
    c->x = ctx_alloc(c, B * E * sizeof(float));
    c->xn = ctx_alloc(c, B * E * sizeof(float));
    c->q = ctx_alloc(c, B * QD * sizeof(float));
    c->k = ctx_alloc(c, B * KD * sizeof(float));
    c->v = ctx_alloc(c, B * VD * sizeof(float));
    c->att = ctx_alloc(c, B * OD * sizeof(float));
    c->gate = ctx_alloc(c, B * F * sizeof(float));
    c->up = ctx_alloc(c, B * F * sizeof(float));
    const size_t kmax = WGLLM_MAX(WGLLM_MAX(E, F), OD);
    c->act_slot_bytes = B * kmax * 4; /* f32-sized bound: any vec_dot_type row is at most 4 bytes/element */
    for (int i = 0; i < N_ACT_SLOTS; i++) c->act_buf[i] = ctx_alloc(c, c->act_slot_bytes);
    c->scores = ctx_alloc(c, (size_t)c->n_threads * c->n_ctx * sizeof(float));
    c->tmp16 = ctx_alloc(c, (size_t)c->n_threads * (c->n_ctx + hp->head_dim_k) * sizeof(wgllm_fp16));
    c->rope_cs = ctx_alloc(c, B * hp->n_rot * sizeof(float));
    bool ok = c->tp && c->k_cache && c->v_cache && c->x && c->xn && c->q && c->k && c->v && c->att && c->gate &&
              c->up && c->scores && c->tmp16 && c->rope_cs && grow_logits(c, 1);
    for (int i = 0; i < N_ACT_SLOTS; i++) ok = ok && c->act_buf[i];
    if (!ok) {
        wgllm_context_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "out of memory allocating a context of %d tokens (KV cache %.1f MiB)", p.n_ctx,
                               2.0 * hp->n_layer * (c->kv_layer_k + c->kv_layer_v) / 1048576.0);
    }
    *out = c;
    return WGLLM_STATUS_OK;
}

int wgllm_context_n_ctx(const struct wgllm_context *c) { return c->n_ctx; }
uint64_t wgllm_context_memory(const struct wgllm_context *c) {
    return c->bytes + (uint64_t)c->logits_cap * c->model->hp.n_vocab * sizeof(float);
}
int wgllm_context_n_past(const struct wgllm_context *c) { return c->n_past; }

void wgllm_context_truncate(struct wgllm_context *c, int n_past) {
    if (n_past < 0) n_past = 0;
    if (n_past < c->n_past) c->n_past = n_past;
}

enum wgllm_status wgllm_decode(struct wgllm_context *c, const int32_t *tokens, int n, bool all_logits,
                               struct wgllm_error *err) {
    const int n_vocab = c->model->hp.n_vocab;
    if (n <= 0) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "decode of %d tokens", n);
    if (c->n_past + n > c->n_ctx)
        return wgllm_error_set(err, WGLLM_STATUS_CONTEXT_FULL,
                               "%d tokens do not fit: %d of the context's %d positions are used", n, c->n_past,
                               c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "token %d at index %d is outside the vocabulary (%d)",
                                   tokens[i], i, n_vocab);
    if (all_logits && !grow_logits(c, n))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %d rows of logits", n);
    for (int done = 0; done < n; done += c->n_batch) {
        const int nt = WGLLM_MIN(c->n_batch, n - done);
        c->tokens = tokens + done;
        c->n_tok = nt;
        c->pos0 = c->n_past;
        /* rows of this chunk whose logits are kept: all, only the very last, or none
         * (an earlier chunk without all_logits still computes its last row: cheap) */
        c->out_first = all_logits ? 0 : nt - 1;
        c->out_logits = all_logits ? c->logits + (size_t)done * n_vocab : c->logits;
        wgllm_threadpool_run(c->tp, forward_worker, c);
        c->n_past += nt;
    }
    c->n_logits = all_logits ? n : 1;
    return WGLLM_STATUS_OK;
}

const float *wgllm_get_logits(const struct wgllm_context *c) {
    return c->logits + (size_t)(c->n_logits - 1) * c->model->hp.n_vocab;
}

const float *wgllm_get_logits_ith(const struct wgllm_context *c, int i) {
    if (i < 0 || i >= c->n_logits) return NULL;
    return c->logits + (size_t)i * c->model->hp.n_vocab;
}
