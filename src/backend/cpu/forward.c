/*
 * forward.c - the CPU backend (its table: wgllm_backend_cpu_i, backend_impl.h):
 * a KV cache for n_seq sequences + scratch, planned and allocated once, the
 * decoder forward pass over a pass of tokens that may belong to different
 * sequences, and the sequence operations (copy, snapshot, context shift) on
 * that cache. Inputs come validated by backend/context.c, which also owns
 * the host rows the outputs are written to.
 *
 * The whole pass is one fork-join job: every thread walks the same list of
 * steps, does its share of each (rows of a matrix product, heads of
 * attention) and meets the others at a barrier. Weights stay in their GGUF
 * block format, except those with a repacked kernel (Q4_0/Q8_0, and the
 * K-quants on x86-64: quant/repack.h), which the first CPU context of a
 * model copies into the repacked layout (matmul.c); each matrix product
 * first converts its input rows to the weight type's vec_dot_type (Q8_0 for
 * Q4_0/Q8_0, ...) as llama.cpp does.
 * Nothing is allocated per token.
 */
#include "backend/backend_impl.h"
#include "backend/kv_window.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "base/threadpool.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/repack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_ACT_SLOTS 3 /* distinct vec_dot_types one matmul group can need (q, k, v) */

struct cpu_ctx {
    struct wgllm_model *model;
    int n_ctx, n_seq, n_batch, n_threads;
    struct wgllm_threadpool *tp;

    /* K: [layer][seq][cell][n_head_kv * head_dim_k]
     * V: [layer][seq][n_head_kv * head_dim_v][cell] (transposed, see attend_head)
     * A layer keeps n_ctx cells per sequence, a local layer with a ring
     * (kv_window.h) `ring`; position p lives in cell p mod cells. */
    wgllm_fp16 *k_cache, *v_cache;
    struct cpu_kv_layer {
        size_t k0, v0;       /* the layer's first element */
        size_t seq_k, seq_v; /* elements per sequence */
        int cells;           /* cells per sequence */
    } *kvl;
    int ring;

    /* scratch, n_batch rows each */
    float *x, *xn, *q, *k, *v, *att, *gate, *up;
    void *act_buf[N_ACT_SLOTS];
    size_t act_slot_bytes;
    float *scores;     /* n_threads x n_ctx */
    wgllm_fp16 *tmp16; /* n_threads x (n_ctx + head_dim) */
    float *rope_cs;    /* n_batch x n_rot */
    float *rope_cs_swa; /* the same for the sliding-window layers when their RoPE differs, else NULL */
    const float *rope_factors; /* wgllm_model_rope_factors for this context's n_ctx */

    /* the pass being computed (read by all threads) */
    const int32_t *tok, *pos, *seq;
    int n_tok;
    const int32_t *out_idx; /* ascending token indices whose outputs are kept */
    int n_out;
    float *out_logits; /* the context's rows; NULL when computing embeddings */
    float *out_embd;   /* the context's rows; NULL when computing logits */
    void (*progress)(int done, int total, void *user); /* the pass's (wgllm_ubatch), NULL = none */
    void *progress_user;
    uint64_t bytes;    /* allocated, for host_memory */

    /* mixture of experts (model->hp.n_expert > 0), for n_batch tokens x
     * n_expert_used choices = R rows grouped by expert */
    struct {
        float *logits;       /* n_batch x n_expert: router logits, then probabilities */
        int32_t *sel;        /* n_batch x used: the chosen experts, most probable first */
        float *w;            /* n_batch x used: their weights */
        int32_t *row_of;     /* n_batch x used: the row of (token, choice) */
        int32_t *tok_of;     /* R: the token of a row */
        int32_t *cnt, *off;  /* n_expert (+1): rows per expert, the first row of each */
        float *rows;         /* R x n_embd: gathered f32 inputs, then the experts' outputs */
        void *xq[2];         /* R rows of the gate's / up's input in their vec_dot_type */
        float *g, *u;        /* R x n_ff_exp */
        void *dq;            /* R rows of the down projection's input in its vec_dot_type */
        float *shg;          /* n_batch: the shared expert's gate, sigmoid(sh_gate_inp . x) */
    } moe;
};

/* ---- matrix products (matmul.c) ------------------------------------------- */

/* Rows [0,n) of src in `type`, into activation slot `slot` of the context. */
static struct wgllm_cpu_act act_prepare(struct cpu_ctx *c, int ith, int nth, int slot, const float *src, int ld, int n, int64_t K,
                         uint32_t type) {
    return wgllm_cpu_act_prepare(c->act_buf[slot], c->act_slot_bytes, ith, nth, src, ld, n, K, type);
}

/* ---- attention -------------------------------------------------------- */

/* One head of one token: softmax(cap(q.K^T) * kq_scale) . V over the
 * positions the layer sees: 0..pos, or on a sliding-window layer the n_swa
 * most recent ones (llama.cpp masks position j when pos - j >= n_swa).
 * q (already multiplied by q_scale) and the probabilities are rounded to
 * f16 first because ggml multiplies them with the f16 cache in f16 (its
 * vec_dot_type). The soft-cap (gemma2) comes before the scale, as in
 * llama.cpp's graph; a layer's sink (gpt-oss) joins the softmax's
 * denominator only. */
static void attend_head(struct cpu_ctx *c, int il, int seq, int pos, int h, const float *q, float *out,
                        int ith) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const int j0 = c->model->layers[il].swa ? WGLLM_MAX(0, pos - hp->n_swa + 1) : 0;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int kvh = h / (hp->n_head / hp->n_head_kv);
    const size_t krow = (size_t)hp->n_head_kv * dk;
    const struct cpu_kv_layer *kl = &c->kvl[il];
    const int R = kl->cells;
    const wgllm_fp16 *K = c->k_cache + kl->k0 + (size_t)seq * kl->seq_k + (size_t)kvh * dk;
    /* V is stored transposed ([dim][cell]) as ggml does without flash
     * attention, so that each output dimension is one f16 dot product over
     * positions, summed in the same order as llama.cpp (in two pieces where
     * the window wraps around a ring). */
    const wgllm_fp16 *Vt = c->v_cache + kl->v0 + (size_t)seq * kl->seq_v + (size_t)kvh * dv * R;
    float *s = c->scores + (size_t)ith * c->n_ctx;
    wgllm_fp16 *tmp = c->tmp16 + (size_t)ith * (c->n_ctx + dk); /* q, then the probabilities */
    wgllm_fp32_to_fp16_row(q, tmp, dk);
    const float scale = hp->kq_scale, cap = hp->attn_softcap;
    const int n = pos + 1 - j0;
    /* the scores: q against each cached key, as many rows at once as lie
     * before the ring wraps (the same bits as one dot16 per key) */
    const wgllm_vec_dot_nr_fn dots16 = wgllm_type_traits(WGLLM_TYPE_F16)->vec_dot_nr;
    const int k0 = j0 % R, nk1 = WGLLM_MIN(n, R - k0);
    dots16(dk, s, K + (size_t)k0 * krow, krow * sizeof(wgllm_fp16), tmp, nk1);
    if (nk1 < n) dots16(dk, s + nk1, K, krow * sizeof(wgllm_fp16), tmp, n - nk1);
    if (cap > 0.0f) wgllm_op_softcap(s, n, cap);
    for (int j = 0; j < n; j++) s[j] *= scale;
    const float *sinks = c->model->layers[il].attn_sinks; /* gpt-oss */
    wgllm_op_softmax_sink(s, n, sinks ? sinks[h] : -INFINITY);
    wgllm_fp32_to_fp16_row(s, tmp, n);
    /* each output dimension: the probabilities against its row of V (all
     * rows in one call: the probabilities converted once) */
    const int c0 = j0 % R, n1 = WGLLM_MIN(n, R - c0);
    const size_t vs = (size_t)R * sizeof(wgllm_fp16);
    if (n1 == n) {
        dots16(n, out, Vt + c0, vs, tmp, dv);
    } else { /* a window across the ring's wrap: two pieces per dimension */
        for (int d = 0; d < dv; d++) {
            float rest;
            dots16(n1, &out[d], Vt + (size_t)d * R + c0, vs, tmp, 1);
            dots16(n - n1, &rest, Vt + (size_t)d * R, vs, tmp + n1, 1);
            out[d] += rest;
        }
    }
}

/* ---- mixture of experts ------------------------------------------------ */

/* Expert e of a stack (wgllm_weight.n_expert) as a weight of its own; a
 * repacked stack's expert is the run of its panels (matmul.c repacks a stack
 * only when each expert is whole panels), described in *rp. */
static struct wgllm_weight expert_view(const struct wgllm_weight *w, int e, struct wgllm_repacked *rp) {
    struct wgllm_weight v = *w;
    v.ne1 = w->ne1 / w->n_expert;
    v.data = (const char *)w->data + (size_t)e * (size_t)v.ne1 * w->row_size;
    v.copy = w->copy ? (char *)w->copy + (size_t)e * (size_t)v.ne1 * w->row_size : NULL;
    v.rp = NULL;
    if (w->rp) {
        *rp = wgllm_repacked_rows(w->rp, (int64_t)e * v.ne1, v.ne1);
        v.rp = rp;
    }
    return v;
}

/* Converts f32 rows src[idx[r]] (ld floats apart; idx NULL: row r) for r in
 * [0, n) into `type` at dst, each thread its share of rows. */
static struct wgllm_cpu_act moe_gather(void *dst, const float *src, int ld, const int32_t *idx, int n, int64_t K, uint32_t type,
                             int ith, int nth) {
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    const size_t stride = type == WGLLM_TYPE_F32 ? (size_t)K * sizeof(float) : wgllm_row_size(type, K);
    int64_t lo, hi;
    wgllm_split_range(n, ith, nth, 1, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = src + (size_t)(idx ? idx[r] : r) * (size_t)ld;
        char *d = (char *)dst + (size_t)r * stride;
        if (type == WGLLM_TYPE_F32) memcpy(d, x, (size_t)K * sizeof(float));
        else tr->from_float(x, d, K);
    }
    return (struct wgllm_cpu_act){dst, stride};
}

/* The shared expert of a MoE layer on every row of fin: its SwiGLU FFN into
 * c->xn (fin may be c->xn: it is read before the barrier that precedes the
 * down projection) and, where the layer has one, its gate sigmoid(g . x)
 * into c->moe.shg, computed as llama.cpp does (silu(v) / v). Ends at a
 * barrier. */
static void shared_expert(struct cpu_ctx *c, const struct wgllm_layer *L, const float *fin, int nr, int ith,
                          int nth) {
    const struct wgllm_hparams *hp = &c->model->hp;
    struct wgllm_threadpool *tp = c->tp;
    const int E = hp->n_embd, FS = hp->n_ff_shexp;
    const uint32_t tg = wgllm_cpu_vdt(&L->sh_gate), tu = wgllm_cpu_vdt(&L->sh_up);
    struct wgllm_cpu_act ag = act_prepare(c, ith, nth, 0, fin, E, nr, E, tg);
    struct wgllm_cpu_act au = tu == tg ? ag : act_prepare(c, ith, nth, 1, fin, E, nr, E, tu);
    struct wgllm_cpu_act ai = {0};
    if (L->sh_gate_inp.ne1) {
        const uint32_t ti = wgllm_cpu_vdt(&L->sh_gate_inp);
        ai = ti == tg ? ag : ti == tu ? au : act_prepare(c, ith, nth, 2, fin, E, nr, E, ti);
    }
    wgllm_threadpool_barrier(tp);
    int64_t f0, f1;
    wgllm_split_range(FS, ith, nth, 16, &f0, &f1);
    wgllm_cpu_matmul_range(&L->sh_gate, ag, nr, c->gate, FS, f0, f1, false, NULL);
    wgllm_cpu_matmul_range(&L->sh_up, au, nr, c->up, FS, f0, f1, false, NULL);
    for (int t = 0; t < nr; t++)
        wgllm_op_swiglu(c->gate + (size_t)t * FS + f0, c->up + (size_t)t * FS + f0, c->gate + (size_t)t * FS + f0,
                        (int)(f1 - f0));
    if (L->sh_gate_inp.ne1 && ith == 0) {
        wgllm_cpu_matmul_range(&L->sh_gate_inp, ai, nr, c->moe.shg, 1, 0, 1, false, NULL);
        for (int t = 0; t < nr; t++) {
            const float v = c->moe.shg[t];
            c->moe.shg[t] = (v / (1.0f + expf(-v))) / v;
        }
    }
    wgllm_threadpool_barrier(tp);
    struct wgllm_cpu_act ad = act_prepare(c, ith, nth, 0, c->gate, FS, nr, FS, wgllm_cpu_vdt(&L->sh_down));
    wgllm_threadpool_barrier(tp);
    wgllm_cpu_matmul(&L->sh_down, ad, nr, c->xn, E, ith, nth, false, NULL);
    wgllm_threadpool_barrier(tp);
}

/* x[t] += sum of the chosen experts' SwiGLU FFNs of fin[t], weighted, as
 * llama.cpp's build_moe_ffn: softmax over the router's logits, the
 * n_expert_used most probable (ties: the lower index), their probabilities
 * renormalized (moe_norm_w: divided by their sum, at least 2^-14); or, for
 * gpt-oss (moe_softmax_weight), the router's biased logits chosen as they
 * are and their softmax the weights, with biased experts and SwiGLU-OAI
 * (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE: alpha 1.702, limit 7, fixed); each
 * expert's rows read once per pass for all the tokens that chose it
 * (MUL_MAT_ID); the weighted outputs summed in the order chosen, then
 * added to the stream. Ends at a barrier. */
static void moe_ffn(struct cpu_ctx *c, const struct wgllm_layer *L, const float *fin, int nr, int ith, int nth) {
    const struct wgllm_hparams *hp = &c->model->hp;
    struct wgllm_threadpool *tp = c->tp;
    const int E = hp->n_embd, X = hp->n_expert, K = hp->n_expert_used, FE = hp->n_ff_exp, R = nr * K;
    int64_t lo, hi;

    struct wgllm_cpu_act ar = act_prepare(c, ith, nth, 0, fin, E, nr, E, wgllm_cpu_vdt(&L->gate_inp));
    wgllm_threadpool_barrier(tp);
    wgllm_cpu_matmul(&L->gate_inp, ar, nr, c->moe.logits, X, ith, nth, false, NULL);
    wgllm_threadpool_barrier(tp);

    wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *p = c->moe.logits + (size_t)t * X;
        if (L->b_gate_inp)
            for (int e = 0; e < X; e++) p[e] += L->b_gate_inp[e];
        if (!hp->moe_softmax_weight) wgllm_op_softmax(p, X);
        int32_t *sel = c->moe.sel + (size_t)t * K;
        float *w = c->moe.w + (size_t)t * K, sum = 0.0f;
        for (int i = 0; i < K; i++) {
            int best = -1;
            for (int e = 0; e < X; e++) {
                bool taken = false;
                for (int j = 0; j < i && !taken; j++) taken = sel[j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[i] = best;
            w[i] = p[best];
            sum += w[i];
        }
        if (hp->moe_softmax_weight) wgllm_op_softmax(w, K); /* over the chosen logits only */
        if (hp->moe_norm_w) {
            sum = fmaxf(sum, 6.103515625e-5f);
            for (int i = 0; i < K; i++) w[i] /= sum;
        }
    }
    wgllm_threadpool_barrier(tp);

    if (ith == 0) { /* rows grouped by expert, tokens in order within each */
        memset(c->moe.cnt, 0, sizeof(int32_t) * (size_t)X);
        for (int r = 0; r < R; r++) c->moe.cnt[c->moe.sel[r]]++;
        c->moe.off[0] = 0;
        for (int e = 0; e < X; e++) c->moe.off[e + 1] = c->moe.off[e] + c->moe.cnt[e];
        memset(c->moe.cnt, 0, sizeof(int32_t) * (size_t)X);
        for (int r = 0; r < R; r++) {
            const int e = c->moe.sel[r], row = c->moe.off[e] + c->moe.cnt[e]++;
            c->moe.row_of[r] = row;
            c->moe.tok_of[row] = r / K;
        }
    }
    wgllm_threadpool_barrier(tp);

    const uint32_t tg = wgllm_cpu_vdt(&L->w_gate), tu = wgllm_cpu_vdt(&L->w_up);
    const struct wgllm_cpu_act xg = moe_gather(tg == WGLLM_TYPE_F32 ? (void *)c->moe.rows : c->moe.xq[0], fin, E,
                                     c->moe.tok_of, R, E, tg, ith, nth);
    const struct wgllm_cpu_act xu = tu == tg ? xg
                                   : moe_gather(tu == WGLLM_TYPE_F32 ? (void *)c->moe.rows : c->moe.xq[1], fin, E,
                                                c->moe.tok_of, R, E, tu, ith, nth);
    wgllm_threadpool_barrier(tp);
    int64_t f0, f1;
    wgllm_split_range(FE, ith, nth, 16, &f0, &f1);
    for (int e = 0; e < X && f1 > f0; e++) {
        const int n = c->moe.off[e + 1] - c->moe.off[e], r0 = c->moe.off[e];
        if (!n) continue;
        struct wgllm_repacked gr, ur;
        const struct wgllm_weight gv = expert_view(&L->w_gate, e, &gr), uv = expert_view(&L->w_up, e, &ur);
        const struct wgllm_cpu_act ag = {(const char *)xg.data + (size_t)r0 * xg.stride, xg.stride};
        const struct wgllm_cpu_act au = {(const char *)xu.data + (size_t)r0 * xu.stride, xu.stride};
        /* gpt-oss: the expert's biases (ggml_add_id), then SwiGLU-OAI */
        const float *bg = L->b_gate_exps ? L->b_gate_exps + (size_t)e * FE : NULL;
        const float *bu = L->b_up_exps ? L->b_up_exps + (size_t)e * FE : NULL;
        wgllm_cpu_matmul_range(&gv, ag, n, c->moe.g + (size_t)r0 * FE, FE, f0, f1, false, bg);
        wgllm_cpu_matmul_range(&uv, au, n, c->moe.u + (size_t)r0 * FE, FE, f0, f1, false, bu);
        for (int t = 0; t < n; t++) {
            float *g = c->moe.g + (size_t)(r0 + t) * FE + f0;
            const float *u = c->moe.u + (size_t)(r0 + t) * FE + f0;
            if (hp->ffn_act == WGLLM_FFN_SWIGLU_OAI) wgllm_op_swiglu_oai(g, u, g, (int)(f1 - f0), 1.702f, 7.0f);
            else wgllm_op_swiglu(g, u, g, (int)(f1 - f0));
        }
    }
    wgllm_threadpool_barrier(tp);
    const uint32_t td = wgllm_cpu_vdt(&L->w_down);
    const struct wgllm_cpu_act xd =
        td == WGLLM_TYPE_F32 ? (struct wgllm_cpu_act){c->moe.g, (size_t)FE * sizeof(float)}
                             : moe_gather(c->moe.dq, c->moe.g, FE, NULL, R, FE, td, ith, nth);
    wgllm_threadpool_barrier(tp);
    int64_t e0, e1;
    wgllm_split_range(E, ith, nth, 16, &e0, &e1);
    for (int e = 0; e < X && e1 > e0; e++) {
        const int n = c->moe.off[e + 1] - c->moe.off[e], r0 = c->moe.off[e];
        if (!n) continue;
        struct wgllm_repacked dr;
        const struct wgllm_weight dv = expert_view(&L->w_down, e, &dr);
        const struct wgllm_cpu_act ad = {(const char *)xd.data + (size_t)r0 * xd.stride, xd.stride};
        const float *bd = L->b_down_exps ? L->b_down_exps + (size_t)e * E : NULL;
        wgllm_cpu_matmul_range(&dv, ad, n, c->moe.rows + (size_t)r0 * E, E, e0, e1, false, bd);
    }
    wgllm_threadpool_barrier(tp);
    if (L->sh_gate.ne1) shared_expert(c, L, fin, nr, ith, nth);
    /* (routed sum + shared expert [x gate]) [x granite's residual scale], then the stream's add */
    const float rs = hp->residual_scale;
    wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *x = c->x + (size_t)t * E;
        const float *sh = L->sh_gate.ne1 ? c->xn + (size_t)t * E : NULL;
        const float shg = L->sh_gate_inp.ne1 ? c->moe.shg[t] : 1.0f;
        const int32_t *rows = c->moe.row_of + (size_t)t * K;
        const float *w = c->moe.w + (size_t)t * K;
        for (int i = 0; i < E; i++) {
            float s = w[0] * c->moe.rows[(size_t)rows[0] * E + i];
            for (int j = 1; j < K; j++) s += w[j] * c->moe.rows[(size_t)rows[j] * E + i];
            if (sh) s += L->sh_gate_inp.ne1 ? sh[i] * shg : sh[i];
            if (rs != 1.0f) s *= rs;
            x[i] += s;
        }
    }
    wgllm_threadpool_barrier(tp);
}

/* ---- the forward pass ------------------------------------------------- */

/* x += W a for the nr rows, each thread its share of W's rows; ends at a
 * barrier. With a post-norm (gemma, olmo2), a residual scale (granite) or
 * a bias (gpt-oss's attention output, added before the stream as there)
 * W a (+ bias) goes to xn first, is RMS-normed with those weights and/or multiplied
 * by the scale row by row, and then added (llama.cpp: norm or ggml_scale,
 * then ggml_add with the residual). */
static void add_projection(struct cpu_ctx *c, const struct wgllm_weight *w, struct wgllm_cpu_act a, int nr, const float *post_norm,
                           const float *bias, int ith, int nth) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const int E = hp->n_embd;
    struct wgllm_threadpool *tp = c->tp;
    const float rs = hp->residual_scale;
    if (!post_norm && rs == 1.0f && !bias) {
        wgllm_cpu_matmul(w, a, nr, c->x, E, ith, nth, true, NULL);
        wgllm_threadpool_barrier(tp);
        return;
    }
    wgllm_cpu_matmul(w, a, nr, c->xn, E, ith, nth, false, bias);
    wgllm_threadpool_barrier(tp);
    int64_t lo, hi;
    wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *y = c->xn + t * E, *x = c->x + t * E;
        if (post_norm) wgllm_op_rms_norm(y, post_norm, y, E, hp->rms_eps);
        if (rs != 1.0f)
            for (int i = 0; i < E; i++) y[i] *= rs;
        for (int i = 0; i < E; i++) x[i] += y[i];
    }
    wgllm_threadpool_barrier(tp);
}

static void forward_worker(void *arg, int ith, int nth) {
    struct cpu_ctx *c = arg;
    const struct wgllm_model *m = c->model;
    const struct wgllm_hparams *hp = &m->hp;
    struct wgllm_threadpool *tp = c->tp;
    const int E = hp->n_embd, F = hp->n_ff, n = c->n_tok;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;
    int64_t lo, hi;

    /* embeddings + rope angles of each token's position */
    const struct wgllm_type_traits *et = wgllm_type_traits(m->tok_embd.type);
    wgllm_split_range(n, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *xt = c->x + t * E;
        et->to_float((const char *)m->tok_embd.data + (size_t)c->tok[t] * m->tok_embd.row_size, xt, E);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < E; i++) xt[i] *= hp->embd_scale;
        wgllm_rope_table_for(c->rope_cs + t * hp->n_rot, c->pos[t], m, c->rope_factors, false);
        if (c->rope_cs_swa) wgllm_rope_table_for(c->rope_cs_swa + t * hp->n_rot, c->pos[t], m, c->rope_factors, true);
    }
    wgllm_threadpool_barrier(tp);

    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        /* the layers before are done (the barrier that ended the last one) */
        if (ith == 0 && il > 0 && c->progress) c->progress(il, hp->n_layer, c->progress_user);
        /* In the last layer only the rows whose outputs are wanted go on
         * after attention (the others only had to fill the KV cache); they
         * are compacted to rows 0..n_out. */
        const bool last = il == hp->n_layer - 1;
        const int nr = last ? c->n_out : n;

        /* attention norm (none in olmo2: the stream itself goes in), then q/k/v */
        const float *ain = L->attn_norm ? c->xn : c->x;
        if (L->attn_norm) {
            wgllm_split_range(n, ith, nth, 1, &lo, &hi);
            for (int64_t t = lo; t < hi; t++)
                wgllm_op_rms_norm(c->x + t * E, L->attn_norm, c->xn + t * E, E, hp->rms_eps);
            wgllm_threadpool_barrier(tp);
        }
        struct wgllm_cpu_act aq = act_prepare(c, ith, nth, 0, ain, E, n, E, wgllm_cpu_vdt(&L->wq));
        struct wgllm_cpu_act ak = wgllm_cpu_vdt(&L->wk) == wgllm_cpu_vdt(&L->wq) ? aq : act_prepare(c, ith, nth, 1, ain, E, n, E, wgllm_cpu_vdt(&L->wk));
        struct wgllm_cpu_act av = wgllm_cpu_vdt(&L->wv) == wgllm_cpu_vdt(&L->wq) ? aq
                        : wgllm_cpu_vdt(&L->wv) == wgllm_cpu_vdt(&L->wk) ? ak
                                                     : act_prepare(c, ith, nth, 2, ain, E, n, E, wgllm_cpu_vdt(&L->wv));
        wgllm_threadpool_barrier(tp);
        wgllm_cpu_matmul(&L->wq, aq, n, c->q, QD, ith, nth, false, L->bq);
        wgllm_cpu_matmul(&L->wk, ak, n, c->k, KD, ith, nth, false, L->bk);
        wgllm_cpu_matmul(&L->wv, av, n, c->v, VD, ith, nth, false, L->bv);
        wgllm_threadpool_barrier(tp);
        if (hp->qk_norm_whole) { /* olmo2: q and k normed as whole rows, before the split into heads */
            wgllm_split_range(n, ith, nth, 1, &lo, &hi);
            for (int64_t t = lo; t < hi; t++) {
                wgllm_op_rms_norm(c->q + t * QD, L->q_norm, c->q + t * QD, QD, hp->rms_eps);
                wgllm_op_rms_norm(c->k + t * KD, L->k_norm, c->k + t * KD, KD, hp->rms_eps);
            }
            wgllm_threadpool_barrier(tp);
        }

        /* per-head q/k norm (qwen3, gemma3), RoPE (the local table on a
         * sliding-window layer; none on smollm3's no-RoPE layers), the query
         * scale, and the new keys/values into the cache */
        const bool head_norm = !hp->qk_norm_whole;
        const float *rope_l = L->swa && c->rope_cs_swa ? c->rope_cs_swa : c->rope_cs;
        const int items = n * (hp->n_head + hp->n_head_kv);
        wgllm_split_range(items, ith, nth, 1, &lo, &hi);
        for (int64_t it = lo; it < hi; it++) {
            const int t = (int)(it / (hp->n_head + hp->n_head_kv));
            const int hh = (int)(it % (hp->n_head + hp->n_head_kv));
            const float *cs = rope_l + (size_t)t * hp->n_rot;
            if (hh < hp->n_head) {
                float *qh = c->q + (size_t)t * QD + (size_t)hh * dk;
                if (L->q_norm && head_norm) wgllm_op_rms_norm(qh, L->q_norm, qh, dk, hp->rms_eps);
                if (L->rope) wgllm_op_rope(qh, cs, hp->n_rot, neox);
                if (hp->attn_temp_scale != 0.0f) {
                    const float ts = wgllm_hparams_attn_temp(hp, c->pos[t]);
                    for (int d = 0; d < dk; d++) qh[d] *= ts;
                }
                if (hp->q_scale != 1.0f)
                    for (int d = 0; d < dk; d++) qh[d] *= hp->q_scale;
            } else {
                const int h = hh - hp->n_head;
                float *kh = c->k + (size_t)t * KD + (size_t)h * dk;
                if (L->k_norm && head_norm) wgllm_op_rms_norm(kh, L->k_norm, kh, dk, hp->rms_eps);
                if (L->rope) wgllm_op_rope(kh, cs, hp->n_rot, neox);
                const struct cpu_kv_layer *kl = &c->kvl[il];
                const size_t cell = (size_t)(c->pos[t] % kl->cells);
                const size_t sq = (size_t)c->seq[t];
                wgllm_fp32_to_fp16_row(kh, c->k_cache + kl->k0 + sq * kl->seq_k + cell * KD + (size_t)h * dk, dk);
                const float *vh = c->v + (size_t)t * VD + (size_t)h * dv;
                wgllm_fp16 *vt = c->v_cache + kl->v0 + sq * kl->seq_v + (size_t)h * dv * kl->cells + cell;
                for (int d = 0; d < dv; d++) vt[(size_t)d * kl->cells] = wgllm_fp32_to_fp16(vh[d]);
            }
        }
        wgllm_threadpool_barrier(tp);

        /* attention: row r of att belongs to token t (t = r, or the r-th output in the last
         * layer). Items are dealt out round-robin: a later token attends to more positions,
         * so contiguous shares would leave the thread with the early tokens idle. */
        for (int64_t it = ith; it < (int64_t)nr * hp->n_head; it += nth) {
            const int r = (int)(it / hp->n_head), h = (int)(it % hp->n_head);
            const int t = last ? c->out_idx[r] : r;
            attend_head(c, il, c->seq[t], c->pos[t], h, c->q + (size_t)t * QD + (size_t)h * dk,
                        c->att + (size_t)r * OD + (size_t)h * dv, ith);
        }
        if (last && ith == 0) /* ascending indices: compacting in place is safe */
            for (int r = 0; r < nr; r++)
                if (c->out_idx[r] != r) memcpy(c->x + (size_t)r * E, c->x + (size_t)c->out_idx[r] * E, sizeof(float) * (size_t)E);
        wgllm_threadpool_barrier(tp);
        if (nr == 0) continue;

        /* output projection into the residual stream (through the post-norm, gemma) */
        struct wgllm_cpu_act ao = act_prepare(c, ith, nth, 0, c->att, OD, nr, OD, wgllm_cpu_vdt(&L->wo));
        wgllm_threadpool_barrier(tp);
        add_projection(c, &L->wo, ao, nr, L->post_attn_norm, L->bo, ith, nth);

        /* feed-forward (on the stream itself without a pre-norm, olmo2): SwiGLU, or GeGLU (gemma) */
        const float *fin = L->ffn_norm ? c->xn : c->x;
        if (L->ffn_norm) {
            wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
            for (int64_t t = lo; t < hi; t++)
                wgllm_op_rms_norm(c->x + t * E, L->ffn_norm, c->xn + t * E, E, hp->rms_eps);
            wgllm_threadpool_barrier(tp);
        }
        if (L->gate_inp.ne1) {
            moe_ffn(c, L, fin, nr, ith, nth);
            continue;
        }
        struct wgllm_cpu_act ag = act_prepare(c, ith, nth, 0, fin, E, nr, E, wgllm_cpu_vdt(&L->w_gate));
        struct wgllm_cpu_act au =
            wgllm_cpu_vdt(&L->w_up) == wgllm_cpu_vdt(&L->w_gate) ? ag : act_prepare(c, ith, nth, 1, fin, E, nr, E, wgllm_cpu_vdt(&L->w_up));
        wgllm_threadpool_barrier(tp);
        {
            int64_t f0, f1;
            wgllm_split_range(F, ith, nth, 16, &f0, &f1);
            wgllm_cpu_matmul_range(&L->w_gate, ag, nr, c->gate, F, f0, f1, false, NULL);
            wgllm_cpu_matmul_range(&L->w_up, au, nr, c->up, F, f0, f1, false, NULL);
            for (int t = 0; t < nr; t++) {
                float *g = c->gate + (size_t)t * F + f0;
                const float *u = c->up + (size_t)t * F + f0;
                if (hp->ffn_act == WGLLM_FFN_GELU) wgllm_op_geglu(g, u, g, (int)(f1 - f0));
                else wgllm_op_swiglu(g, u, g, (int)(f1 - f0));
            }
        }
        wgllm_threadpool_barrier(tp);
        struct wgllm_cpu_act ad = act_prepare(c, ith, nth, 0, c->gate, F, nr, F, wgllm_cpu_vdt(&L->w_down));
        wgllm_threadpool_barrier(tp);
        add_projection(c, &L->w_down, ad, nr, L->post_ffn_norm, NULL, ith, nth);
    }

    /* final norm of the output rows, then logits or embeddings */
    const int nr = c->n_out;
    if (nr == 0) return;
    wgllm_split_range(nr, ith, nth, 1, &lo, &hi);
    float *dst = c->out_embd ? c->out_embd : c->xn;
    for (int64_t t = lo; t < hi; t++) wgllm_op_rms_norm(c->x + t * E, m->output_norm, dst + t * E, E, hp->rms_eps);
    if (c->out_embd) return;
    wgllm_threadpool_barrier(tp);
    struct wgllm_cpu_act a = act_prepare(c, ith, nth, 0, c->xn, E, nr, E, wgllm_cpu_vdt(&m->output));
    wgllm_threadpool_barrier(tp);
    wgllm_cpu_matmul(&m->output, a, nr, c->out_logits, hp->n_vocab, ith, nth, false, NULL);
    if (hp->final_softcap > 0.0f || hp->logit_scale != 1.0f) {
        /* each thread caps (gemma2) or scales (granite) the rows' columns it
         * computed (matmul's split) */
        int64_t r0, r1;
        wgllm_split_range(m->output.ne1, ith, nth, 16, &r0, &r1);
        for (int t = 0; t < nr && r1 > r0; t++) {
            float *l = c->out_logits + (size_t)t * hp->n_vocab + r0;
            if (hp->final_softcap > 0.0f) wgllm_op_softcap(l, (int)(r1 - r0), hp->final_softcap);
            if (hp->logit_scale != 1.0f)
                for (int64_t j = 0; j < r1 - r0; j++) l[j] *= hp->logit_scale;
        }
    }
}

/* ---- create / free ----------------------------------------------------- */

static void cpu_free(void *b) {
    struct cpu_ctx *c = b;
    if (!c) return;
    wgllm_threadpool_free(c->tp);
    free(c->kvl);
    void *bufs[] = {c->k_cache, c->v_cache, c->x,     c->xn,         c->q,          c->k,
                    c->v,       c->att,     c->gate,  c->up,         c->scores,     c->tmp16,
                    c->rope_cs, c->act_buf[0], c->act_buf[1], c->act_buf[2], c->rope_cs_swa,
                    c->moe.logits, c->moe.sel, c->moe.w, c->moe.row_of, c->moe.tok_of, c->moe.cnt, c->moe.off,
                    c->moe.rows, c->moe.xq[0], c->moe.xq[1], c->moe.g, c->moe.u, c->moe.dq, c->moe.shg};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) wgllm_free_aligned(bufs[i]);
    free(c);
}

static void *ctx_alloc(struct cpu_ctx *c, size_t bytes) {
    c->bytes += bytes;
    return wgllm_alloc_aligned(bytes);
}

/* The experts' scratch (cpu_ctx.moe) for n_batch tokens; false when it
 * cannot be addressed or allocated. */
static bool moe_alloc(struct cpu_ctx *c) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const uint64_t B = (uint64_t)c->n_batch, X = (uint64_t)hp->n_expert, R = B * (uint64_t)hp->n_expert_used;
    size_t logits, choice, rowsz, rows, ff;
    /* f32-sized bounds: any vec_dot_type row is at most 4 bytes per element */
    if (!wgllm_size_mul(B * X, sizeof(float), &logits) || !wgllm_size_mul(R, sizeof(int32_t), &choice) ||
        !wgllm_size_mul(R * 4, (uint64_t)hp->n_embd, &rows) || !wgllm_size_mul(R * 4, (uint64_t)hp->n_ff_exp, &ff) ||
        !wgllm_size_mul(X + 1, sizeof(int32_t), &rowsz))
        return false;
    c->moe.logits = ctx_alloc(c, logits);
    c->moe.sel = ctx_alloc(c, choice);
    c->moe.w = ctx_alloc(c, choice);
    c->moe.row_of = ctx_alloc(c, choice);
    c->moe.tok_of = ctx_alloc(c, choice);
    c->moe.cnt = ctx_alloc(c, rowsz);
    c->moe.off = ctx_alloc(c, rowsz);
    c->moe.rows = ctx_alloc(c, rows);
    c->moe.xq[0] = ctx_alloc(c, rows);
    c->moe.xq[1] = ctx_alloc(c, rows);
    c->moe.g = ctx_alloc(c, ff);
    c->moe.u = ctx_alloc(c, ff);
    c->moe.dq = ctx_alloc(c, ff);
    c->moe.shg = ctx_alloc(c, (size_t)B * sizeof(float));
    return c->moe.logits && c->moe.sel && c->moe.w && c->moe.row_of && c->moe.tok_of && c->moe.cnt && c->moe.off &&
           c->moe.rows && c->moe.xq[0] && c->moe.xq[1] && c->moe.g && c->moe.u && c->moe.dq && c->moe.shg;
}

static enum wgllm_status cpu_init(struct wgllm_model *model, const struct wgllm_context_params *p, void **out,
                                  int *n_ctx, int *n_batch, char *desc, size_t desc_cap, struct wgllm_error *err) {
    *out = NULL;
    const struct wgllm_hparams *hp = &model->hp;
    enum wgllm_status wst = wgllm_cpu_weights_prepare(model, err);
    if (wst) return wst;
    struct cpu_ctx *c = calloc(1, sizeof(*c));
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->model = model;
    c->n_ctx = p->n_ctx;
    c->n_seq = p->n_seq;
    c->n_batch = p->n_batch;
    c->n_threads = p->n_threads;
    c->tp = wgllm_threadpool_init(c->n_threads);
    /* The model's dimensions were checked at load (each at most 2^30); the
     * sizes here multiply them with n_ctx, n_seq and n_batch, so each is
     * computed in checked 64 bits and must fit size_t (32 bits on wasm32). */
    /* F: the dense FFN's length, or a MoE layer's shared expert's */
    const uint64_t B = (uint64_t)c->n_batch, E = (uint64_t)hp->n_embd,
                   F = (uint64_t)WGLLM_MAX(hp->n_ff, hp->n_ff_shexp);
    const uint64_t QD = (uint64_t)hp->n_head * hp->head_dim_k, KD = (uint64_t)hp->n_head_kv * hp->head_dim_k,
                   VD = (uint64_t)hp->n_head_kv * hp->head_dim_v, OD = (uint64_t)hp->n_head * hp->head_dim_v;
    const uint64_t kmax = WGLLM_MAX(WGLLM_MAX(E, F), OD);
    size_t kv_k_bytes = 0, kv_v_bytes = 0, be, bq, bk, bv, bo, bf, scores, tmp16, rope;
    /* each layer's cells: n_ctx, or the ring of a local layer */
    c->ring = wgllm_kv_ring(model, c->n_ctx, c->n_batch, p->swa_full);
    c->kvl = calloc((size_t)hp->n_layer, sizeof *c->kvl);
    if (!c->kvl) {
        cpu_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    size_t kv_k = 0, kv_v = 0; /* elements */
    bool fits = true;
    for (int il = 0; il < hp->n_layer && fits; il++) {
        struct cpu_kv_layer *kl = &c->kvl[il];
        kl->cells = wgllm_kv_layer_cells(model, il, c->n_ctx, c->ring);
        kl->k0 = kv_k, kl->v0 = kv_v;
        size_t lk, lv;
        fits = wgllm_size_mul((uint64_t)kl->cells, KD, &kl->seq_k) && wgllm_size_mul((uint64_t)kl->cells, VD, &kl->seq_v) &&
               wgllm_size_mul(kl->seq_k, (uint64_t)c->n_seq, &lk) && wgllm_size_mul(kl->seq_v, (uint64_t)c->n_seq, &lv) &&
               wgllm_size_mul_add(1, kv_k, lk, &kv_k) && wgllm_size_mul_add(1, kv_v, lv, &kv_v);
    }
    fits = fits && wgllm_size_mul(kv_k, sizeof(wgllm_fp16), &kv_k_bytes) &&
                wgllm_size_mul(kv_v, sizeof(wgllm_fp16), &kv_v_bytes) &&
                wgllm_size_mul(B * sizeof(float), E, &be) && wgllm_size_mul(B * sizeof(float), QD, &bq) &&
                wgllm_size_mul(B * sizeof(float), KD, &bk) && wgllm_size_mul(B * sizeof(float), VD, &bv) &&
                wgllm_size_mul(B * sizeof(float), OD, &bo) && wgllm_size_mul(B * sizeof(float), F, &bf) &&
                /* f32-sized bound: any vec_dot_type row is at most 4 bytes/element */
                wgllm_size_mul(B * 4, kmax, &c->act_slot_bytes) &&
                wgllm_size_mul((uint64_t)c->n_threads * sizeof(float), (uint64_t)c->n_ctx, &scores) &&
                wgllm_size_mul((uint64_t)c->n_threads * sizeof(wgllm_fp16),
                               (uint64_t)c->n_ctx + (uint64_t)hp->head_dim_k, &tmp16) &&
                wgllm_size_mul(B * sizeof(float), (uint64_t)hp->n_rot, &rope);
    if (!fits) {
        cpu_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "a context of %d x %d tokens for this model (%d layers, KV width %llu) needs more "
                               "memory than this process can address",
                               p->n_seq, p->n_ctx, hp->n_layer, (unsigned long long)WGLLM_MAX(KD, VD));
    }
    c->k_cache = ctx_alloc(c, kv_k_bytes);
    c->v_cache = ctx_alloc(c, kv_v_bytes);
    c->x = ctx_alloc(c, be);
    c->xn = ctx_alloc(c, be);
    c->q = ctx_alloc(c, bq);
    c->k = ctx_alloc(c, bk);
    c->v = ctx_alloc(c, bv);
    c->att = ctx_alloc(c, bo);
    c->gate = ctx_alloc(c, bf);
    c->up = ctx_alloc(c, bf);
    for (int i = 0; i < N_ACT_SLOTS; i++) c->act_buf[i] = ctx_alloc(c, c->act_slot_bytes);
    c->scores = ctx_alloc(c, scores);
    c->tmp16 = ctx_alloc(c, tmp16);
    c->rope_cs = ctx_alloc(c, rope);
    c->rope_factors = wgllm_model_rope_factors(model, c->n_ctx);
    const bool swa_rope = wgllm_model_has_swa_rope(model);
    if (swa_rope) c->rope_cs_swa = ctx_alloc(c, rope);
    bool ok = c->tp && c->k_cache && c->v_cache && c->x && c->xn && c->q && c->k && c->v && c->att && c->gate &&
              c->up && c->scores && c->tmp16 && c->rope_cs && (!swa_rope || c->rope_cs_swa);
    if (ok && hp->n_expert > 0 && !moe_alloc(c)) {
        cpu_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "out of memory for the experts' scratch of a batch of %d tokens (%d experts, %d used)",
                               p->n_batch, hp->n_expert, hp->n_expert_used);
    }
    for (int i = 0; i < N_ACT_SLOTS; i++) ok = ok && c->act_buf[i];
    if (!ok) {
        double kv = ((double)kv_k_bytes + (double)kv_v_bytes) / 1048576.0;
        cpu_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "out of memory allocating a context of %d x %d tokens (KV cache %.1f MiB)", p->n_seq,
                               p->n_ctx, kv);
    }
    snprintf(desc, desc_cap, "cpu");
    *n_ctx = c->n_ctx;
    *n_batch = c->n_batch;
    *out = c;
    return WGLLM_STATUS_OK;
}

static uint64_t cpu_host_memory(const void *b) { return ((const struct cpu_ctx *)b)->bytes; }

/* ---- a pass ------------------------------------------------------------ */

static enum wgllm_status cpu_decode(void *b, const struct wgllm_ubatch *ub, struct wgllm_error *err) {
    struct cpu_ctx *c = b;
    c->tok = ub->token;
    c->pos = ub->pos;
    c->seq = ub->seq;
    c->n_tok = ub->n;
    c->out_idx = ub->out_idx;
    c->n_out = ub->n_out;
    c->out_logits = ub->embeddings ? NULL : ub->out;
    c->out_embd = ub->embeddings ? ub->out : NULL;
    c->progress = ub->progress;
    c->progress_user = ub->progress_user;
    wgllm_threadpool_run(c->tp, forward_worker, c);
    return WGLLM_STATUS_OK;
}

/* ---- sequences --------------------------------------------------------- */

/* Cells [0, min(n, cells)) of each layer: all n positions of a full cache,
 * the whole ring of a local layer past it. */
static void cpu_seq_copy(void *b, int src, int dst, int n) {
    struct cpu_ctx *c = b;
    const struct wgllm_hparams *hp = &c->model->hp;
    const size_t KD = (size_t)hp->n_head_kv * hp->head_dim_k, VD = (size_t)hp->n_head_kv * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct cpu_kv_layer *kl = &c->kvl[il];
        const size_t m = (size_t)WGLLM_MIN(n, kl->cells);
        wgllm_fp16 *k = c->k_cache + kl->k0;
        memcpy(k + (size_t)dst * kl->seq_k, k + (size_t)src * kl->seq_k, m * KD * sizeof(wgllm_fp16));
        wgllm_fp16 *v = c->v_cache + kl->v0;
        for (size_t d = 0; d < VD; d++)
            memcpy(v + (size_t)dst * kl->seq_v + d * kl->cells, v + (size_t)src * kl->seq_v + d * kl->cells,
                   m * sizeof(wgllm_fp16));
    }
}

/* Copies `len` elements of `count` positions from cell c0 of a ring of
 * `cells` (rows of `len` elements) to / from buf in position order; the
 * positions wrap to cell 0 past the end. Returns buf's end. */
static char *ring_io(wgllm_fp16 *ring, int cells, int c0, int count, size_t len, char *buf, bool save) {
    const int first = WGLLM_MIN(count, cells - c0);
    const size_t b1 = (size_t)first * len * sizeof(wgllm_fp16), b2 = (size_t)(count - first) * len * sizeof(wgllm_fp16);
    if (save) memcpy(buf, ring + (size_t)c0 * len, b1), memcpy(buf + b1, ring, b2);
    else memcpy(ring + (size_t)c0 * len, buf, b1), memcpy(ring, buf + b1, b2);
    return buf + b1 + b2;
}

/* Snapshots hold, per layer, the keys then the values of every V row of
 * positions [n - m, n), m = min(n, cells): every position of a full cache,
 * the live cells of a ring (backend_impl.h). */
static void seq_state_io(struct cpu_ctx *c, int seq, int n, char *buf, bool save) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const size_t KD = (size_t)hp->n_head_kv * hp->head_dim_k, VD = (size_t)hp->n_head_kv * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct cpu_kv_layer *kl = &c->kvl[il];
        const int m = WGLLM_MIN(n, kl->cells), c0 = (n - m) % kl->cells;
        buf = ring_io(c->k_cache + kl->k0 + (size_t)seq * kl->seq_k, kl->cells, c0, m, KD, buf, save);
        for (size_t d = 0; d < VD; d++)
            buf = ring_io(c->v_cache + kl->v0 + (size_t)seq * kl->seq_v + d * kl->cells, kl->cells, c0, m, 1, buf,
                          save);
    }
}

static void cpu_seq_save(void *b, int seq, int n, void *dst) { seq_state_io(b, seq, n, dst, true); }
static void cpu_seq_load(void *b, int seq, int n, const void *src) { seq_state_io(b, seq, n, (char *)src, false); }

/* ---- context shift ----------------------------------------------------- */

/* The keys were stored rotated for their old position p; RoPE angles are
 * linear in the position (frequency scale and factors included), so
 * rotating by the position delta gives the key of p + delta, as llama.cpp's
 * K-shift does. Values carry no position: they only move, and neither do
 * the keys of a layer without RoPE (smollm3's every 4th layer). llama.cpp
 * (the release the peer binds) rotates those too, since smollm3 leaves its
 * per-layer rope_pattern at "all layers"; its shifted cache is wrong there,
 * wgllm's is not. */
struct shift_job {
    struct cpu_ctx *c;
    int seq, keep, discard, n_move;
    const float *cs;     /* the rotation of the delta (-discard) */
    const float *cs_swa; /* the same for sliding-window layers whose RoPE differs; NULL: cs */
};

static void shift_worker(void *arg, int ith, int nth) {
    const struct shift_job *j = arg;
    struct cpu_ctx *c = j->c;
    const struct wgllm_hparams *hp = &c->model->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const size_t KD = (size_t)hp->n_head_kv * dk;
    const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;
    float row[1024];
    WGLLM_ASSERT(dk <= 1024);
    int64_t lo, hi; /* items: (layer, kv head) */
    wgllm_split_range((int64_t)hp->n_layer * hp->n_head_kv, ith, nth, 1, &lo, &hi);
    for (int64_t it = lo; it < hi; it++) {
        const int il = (int)(it / hp->n_head_kv), h = (int)(it % hp->n_head_kv);
        const struct wgllm_layer *L = &c->model->layers[il];
        const float *cs = L->swa && j->cs_swa ? j->cs_swa : j->cs;
        /* context.c refuses the shift of a ring: every layer has n_ctx cells here */
        const struct cpu_kv_layer *kl = &c->kvl[il];
        wgllm_fp16 *k = c->k_cache + kl->k0 + (size_t)j->seq * kl->seq_k + (size_t)h * dk;
        for (int p = 0; p < j->n_move; p++) { /* ascending: each source is read before it is overwritten */
            const wgllm_fp16 *src = k + (size_t)(j->keep + j->discard + p) * KD;
            wgllm_fp16 *dst = k + (size_t)(j->keep + p) * KD;
            if (!L->rope) { /* a layer without RoPE (smollm3): its keys carry no position, they only move */
                memmove(dst, src, (size_t)dk * sizeof(wgllm_fp16));
                continue;
            }
            wgllm_fp16_to_fp32_row(src, row, dk);
            wgllm_op_rope(row, cs, hp->n_rot, neox);
            wgllm_fp32_to_fp16_row(row, dst, dk);
        }
        wgllm_fp16 *v = c->v_cache + kl->v0 + (size_t)j->seq * kl->seq_v + (size_t)h * dv * c->n_ctx;
        for (int d = 0; d < dv; d++)
            memmove(v + (size_t)d * c->n_ctx + j->keep, v + (size_t)d * c->n_ctx + j->keep + j->discard,
                    (size_t)j->n_move * sizeof(wgllm_fp16));
    }
}

static enum wgllm_status cpu_seq_shift(void *b, int seq, int n, int keep, int discard, struct wgllm_error *err) {
    struct cpu_ctx *c = b;
    /* as llama.cpp's K-shift: the same factors and attention factor (which
     * so multiplies the moved keys once more, as there) */
    wgllm_rope_table_for(c->rope_cs, -discard, c->model, c->rope_factors, false);
    if (c->rope_cs_swa) wgllm_rope_table_for(c->rope_cs_swa, -discard, c->model, c->rope_factors, true);
    struct shift_job j = {c, seq, keep, discard, n - keep - discard, c->rope_cs, c->rope_cs_swa};
    wgllm_threadpool_run(c->tp, shift_worker, &j);
    return WGLLM_STATUS_OK;
}

/* ---- the table --------------------------------------------------------- */

const struct wgllm_backend_i wgllm_backend_cpu_i = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .decode = cpu_decode,
    .seq_copy = cpu_seq_copy,
    .seq_save = cpu_seq_save,
    .seq_load = cpu_seq_load,
    .seq_shift = cpu_seq_shift,
    .host_memory = cpu_host_memory,
    .device_memory = NULL,
    .can_sample = NULL, /* generation runs on the host: the sampler reads the logits */
    .generate = NULL,
    .decode_sampled = NULL, /* the engine samples every row on the host */
};
