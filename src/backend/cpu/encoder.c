/*
 * encoder.c - the CPU backend of encoder models (bert: BGE, arctic-embed;
 * its table: wgllm_backend_cpu_encoder_i, which backend/context.c picks for
 * a model whose hparams say `encoder`). The block is llama.cpp's for
 * LLM_ARCH_BERT (src/models/bert.cpp):
 *
 *   x = LayerNorm(tok_embd[t] + token_types[0] + position_embd[pos])
 *   per layer:  a = softmax(q k^T / sqrt(head_dim)) v over the whole input
 *               h = LayerNorm(x + W_o a + b_o)                  (attn_output_norm)
 *               x = LayerNorm(h + W_down gelu(W_up h + b_up) + b_down)  (layer_output_norm)
 *
 * nomic-bert is the same graph with RoPE (neox) on q and k instead of the
 * position table, and SwiGLU (down(silu(gate h) * up h)) instead of GELU.
 *
 * There is no causal mask: every token of a sequence sees every other one, so a
 * sequence must come whole in one pass (positions 0..n-1) and nothing is
 * cached between passes (the sequence operations have nothing to act on).
 * Attention is all f32 as in llama.cpp without flash attention (its K and V
 * are graph tensors, not an f16 cache); GELU goes through the f16 table as
 * ggml's does. The output rows are the last layer's hidden states, which the
 * caller pools (runtime/engine.c).
 */
#include "backend/backend_impl.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "base/threadpool.h"
#include "model/model.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct enc_ctx {
    struct wgllm_model *model;
    int n_ctx, n_seq, n_batch, n_threads;
    struct wgllm_threadpool *tp;
    /* scratch, n_batch rows each */
    float *x, *h, *q, *k, *v, *att, *up;
    float *gate;     /* SwiGLU's gate rows (nomic-bert), else NULL */
    float *rope_cs;  /* n_batch x n_rot RoPE table of the pass's positions (nomic-bert), else NULL */
    float *vt;       /* V transposed: [n_embd][n_batch], tokens in seq_tok order */
    void *act_buf;   /* activations in a weight's vec_dot_type */
    size_t act_bytes;
    float *scores;   /* n_threads x n_ctx */
    float *type_row; /* token_types row 0 (zeros without the tensor) */
    int32_t *seq_tok;          /* the pass's tokens grouped by sequence, each in position order */
    int32_t *seq_first, *seq_len; /* n_seq: where a sequence's tokens start in seq_tok, how many */
    /* the pass (read by all threads) */
    const struct wgllm_ubatch *ub;
    uint64_t bytes;
};

/* ---- the pass ------------------------------------------------------------- */

/* rows [lo, hi) of this thread's share of n */
#define SHARE(n) wgllm_split_range((n), ith, nth, 1, &lo, &hi)

/* x[t] (+)= row `r` of w, converted to f32 */
static void add_row(const struct wgllm_weight *w, int64_t r, float *x, float *tmp, int E) {
    wgllm_type_traits(w->type)->to_float((const char *)w->data + (size_t)r * w->row_size, tmp, E);
    for (int i = 0; i < E; i++) x[i] += tmp[i];
}

/* One head of token t over its sequence: scores q.k in f32, softmax of the
 * scores times kq_scale (ggml_soft_max_ext), then each output dimension as
 * one f32 dot product of V's transposed row with the probabilities, the
 * order ggml's mul_mat of V^T and KQ sums in. */
static void attend(struct enc_ctx *c, int t, int hd, float *s) {
    const struct wgllm_hparams *hp = &c->model->hp;
    const int D = hp->head_dim_k, QD = hp->n_head * D, B = c->n_batch;
    const wgllm_vec_dot_fn dot = wgllm_type_traits(WGLLM_TYPE_F32)->vec_dot;
    const int seq = c->ub->seq[t], first = c->seq_first[seq], n = c->seq_len[seq];
    const float *q = c->q + (size_t)t * QD + (size_t)hd * D;
    for (int j = 0; j < n; j++) {
        const int tj = c->seq_tok[first + j];
        dot(D, &s[j], c->k + (size_t)tj * QD + (size_t)hd * D, q);
        s[j] *= hp->kq_scale;
    }
    wgllm_op_softmax(s, n);
    float *out = c->att + (size_t)t * QD + (size_t)hd * D;
    for (int d = 0; d < D; d++) dot(n, &out[d], c->vt + (size_t)(hd * D + d) * B + first, s);
}

static void encoder_worker(void *arg, int ith, int nth) {
    struct enc_ctx *c = arg;
    const struct wgllm_model *m = c->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_ubatch *ub = c->ub;
    struct wgllm_threadpool *tp = c->tp;
    const int E = hp->n_embd, F = hp->n_ff, QD = hp->n_head * hp->head_dim_k, n = ub->n, B = c->n_batch;
    const float eps = hp->norm_eps;
    float *s = c->scores + (size_t)ith * c->n_ctx;
    int64_t lo, hi;

    /* embeddings: token + type 0 + position (or the RoPE table of the
     * position), then their LayerNorm; h is free scratch until the first layer */
    SHARE(n);
    for (int64_t t = lo; t < hi; t++) {
        float *xt = c->x + t * E, *tmp = c->h + t * E;
        wgllm_type_traits(m->tok_embd.type)->to_float((const char *)m->tok_embd.data +
                                                          (size_t)ub->token[t] * m->tok_embd.row_size, xt, E);
        for (int i = 0; i < E; i++) xt[i] += c->type_row[i];
        if (m->pos_embd.tensor) add_row(&m->pos_embd, ub->pos[t], xt, tmp, E);
        if (c->rope_cs) wgllm_rope_table_for(c->rope_cs + t * hp->n_rot, ub->pos[t], m, NULL, false);
        wgllm_op_layer_norm(xt, m->embd_norm, m->embd_norm_b, xt, E, eps);
    }
    wgllm_threadpool_barrier(tp);

    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        /* q, k, v (one activation conversion when they share a type) */
        const uint32_t tq = wgllm_cpu_vdt(&L->wq);
        const bool same = wgllm_cpu_vdt(&L->wk) == tq && wgllm_cpu_vdt(&L->wv) == tq;
        struct wgllm_cpu_act a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->x, E, n, E, tq);
        wgllm_threadpool_barrier(tp);
        wgllm_cpu_matmul(&L->wq, a, n, c->q, QD, ith, nth, false, L->bq);
        if (!same) { /* mixed types: k and v convert in turn */
            wgllm_threadpool_barrier(tp);
            a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->x, E, n, E, wgllm_cpu_vdt(&L->wk));
            wgllm_threadpool_barrier(tp);
        }
        wgllm_cpu_matmul(&L->wk, a, n, c->k, QD, ith, nth, false, L->bk);
        if (!same) {
            wgllm_threadpool_barrier(tp);
            a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->x, E, n, E, wgllm_cpu_vdt(&L->wv));
            wgllm_threadpool_barrier(tp);
        }
        wgllm_cpu_matmul(&L->wv, a, n, c->v, QD, ith, nth, false, L->bv);
        wgllm_threadpool_barrier(tp);
        if (L->rope) { /* nomic-bert: q and k of every head rotated by the token's position */
            const int D = hp->head_dim_k, items = n * hp->n_head;
            const bool neox = hp->rope_type == WGLLM_ROPE_NEOX;
            wgllm_split_range(items, ith, nth, 1, &lo, &hi);
            for (int64_t it = lo; it < hi; it++) {
                const int64_t t = it / hp->n_head, hd = it % hp->n_head;
                const float *cs = c->rope_cs + t * hp->n_rot;
                wgllm_op_rope(c->q + t * QD + hd * D, cs, hp->n_rot, neox);
                wgllm_op_rope(c->k + t * QD + hd * D, cs, hp->n_rot, neox);
            }
            wgllm_threadpool_barrier(tp);
        }
        /* V transposed, its columns in sequence order */
        SHARE(n);
        for (int64_t i = lo; i < hi; i++) {
            const float *vr = c->v + (size_t)c->seq_tok[i] * QD;
            for (int d = 0; d < QD; d++) c->vt[(size_t)d * B + i] = vr[d];
        }
        wgllm_threadpool_barrier(tp);
        for (int64_t it = ith; it < (int64_t)n * hp->n_head; it += nth)
            attend(c, (int)(it / hp->n_head), (int)(it % hp->n_head), s);
        wgllm_threadpool_barrier(tp);

        /* h = LayerNorm(x + W_o att + b_o) */
        a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->att, QD, n, QD, wgllm_cpu_vdt(&L->wo));
        wgllm_threadpool_barrier(tp);
        wgllm_cpu_matmul(&L->wo, a, n, c->h, E, ith, nth, false, L->bo);
        wgllm_threadpool_barrier(tp);
        SHARE(n);
        for (int64_t t = lo; t < hi; t++) {
            float *ht = c->h + t * E;
            const float *xt = c->x + t * E;
            for (int i = 0; i < E; i++) ht[i] += xt[i];
            wgllm_op_layer_norm(ht, L->attn_out_norm, L->attn_out_norm_b, ht, E, eps);
        }
        wgllm_threadpool_barrier(tp);

        /* x = LayerNorm(h + W_down gelu(W_up h + b_up) + b_down), or with
         * silu(W_gate h) * W_up h (nomic-bert) */
        a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->h, E, n, E, wgllm_cpu_vdt(&L->w_up));
        wgllm_threadpool_barrier(tp);
        {
            int64_t f0, f1;
            wgllm_split_range(F, ith, nth, 16, &f0, &f1);
            wgllm_cpu_matmul_range(&L->w_up, a, n, c->up, F, f0, f1, false, L->b_up);
            if (L->w_gate.tensor) {
                /* the gate's own conversion of h when its type differs: only
                 * this thread's rows are read, so the up rows above are kept */
                struct wgllm_cpu_act ag = a;
                if (wgllm_cpu_vdt(&L->w_gate) != wgllm_cpu_vdt(&L->w_up)) {
                    wgllm_threadpool_barrier(tp);
                    ag = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->h, E, n, E,
                                               wgllm_cpu_vdt(&L->w_gate));
                    wgllm_threadpool_barrier(tp);
                }
                wgllm_cpu_matmul_range(&L->w_gate, ag, n, c->gate, F, f0, f1, false, NULL);
                for (int t = 0; t < n && f1 > f0; t++) {
                    float *u = c->up + (size_t)t * F + f0;
                    wgllm_op_swiglu(c->gate + (size_t)t * F + f0, u, u, (int)(f1 - f0));
                }
            } else {
                for (int t = 0; t < n && f1 > f0; t++) wgllm_op_gelu(c->up + (size_t)t * F + f0, (int)(f1 - f0));
            }
        }
        wgllm_threadpool_barrier(tp);
        a = wgllm_cpu_act_prepare(c->act_buf, c->act_bytes, ith, nth, c->up, F, n, F, wgllm_cpu_vdt(&L->w_down));
        wgllm_threadpool_barrier(tp);
        wgllm_cpu_matmul(&L->w_down, a, n, c->x, E, ith, nth, false, L->b_down);
        wgllm_threadpool_barrier(tp);
        SHARE(n);
        for (int64_t t = lo; t < hi; t++) {
            float *xt = c->x + t * E;
            const float *ht = c->h + t * E;
            for (int i = 0; i < E; i++) xt[i] += ht[i];
            wgllm_op_layer_norm(xt, L->layer_out_norm, L->layer_out_norm_b, xt, E, eps);
        }
        wgllm_threadpool_barrier(tp);
    }
    /* the wanted rows, in batch order */
    SHARE(ub->n_out);
    for (int64_t j = lo; j < hi; j++)
        memcpy(ub->out + (size_t)j * E, c->x + (size_t)ub->out_idx[j] * E, sizeof(float) * (size_t)E);
}

/* Groups the pass's tokens by sequence and checks that each sequence is
 * whole: positions 0..n-1, each once (an encoder keeps nothing between
 * passes, so a sequence split over two passes would see only part of
 * itself). */
static enum wgllm_status group_sequences(struct enc_ctx *c, const struct wgllm_ubatch *ub, struct wgllm_error *err) {
    for (int s = 0; s < c->n_seq; s++) c->seq_len[s] = 0;
    for (int t = 0; t < ub->n; t++) c->seq_len[ub->seq[t]]++;
    int at = 0;
    for (int s = 0; s < c->n_seq; s++) {
        c->seq_first[s] = at;
        at += c->seq_len[s];
    }
    for (int i = 0; i < ub->n; i++) c->seq_tok[i] = -1;
    for (int t = 0; t < ub->n; t++) {
        const int s = ub->seq[t], p = ub->pos[t];
        if (p >= c->seq_len[s] || c->seq_tok[c->seq_first[s] + p] >= 0)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "%s is an encoder: a sequence must come whole in one pass (positions 0..n-1), but "
                                   "sequence %d has %d token(s) here and token %d is at position %d",
                                   c->model->arch_name, s, c->seq_len[s], t, p);
        c->seq_tok[c->seq_first[s] + p] = t;
    }
    return WGLLM_STATUS_OK;
}

static enum wgllm_status enc_decode(void *b, const struct wgllm_ubatch *ub, struct wgllm_error *err) {
    struct enc_ctx *c = b;
    if (!ub->embeddings)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s is an embedding model (an encoder without an output layer): it computes "
                               "embeddings, not logits, so it cannot generate text",
                               c->model->arch_name);
    enum wgllm_status st = group_sequences(c, ub, err);
    if (st) return st;
    c->ub = ub;
    wgllm_threadpool_run(c->tp, encoder_worker, c);
    c->ub = NULL;
    return WGLLM_STATUS_OK;
}

/* ---- create / free -------------------------------------------------------- */

static void enc_free(void *b) {
    struct enc_ctx *c = b;
    if (!c) return;
    wgllm_threadpool_free(c->tp);
    void *bufs[] = {c->x,        c->h,      c->q,       c->k,       c->v,
                    c->att,      c->up,     c->vt,      c->act_buf, c->scores, c->gate, c->rope_cs,
                    c->type_row, c->seq_tok, c->seq_first, c->seq_len};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) wgllm_free_aligned(bufs[i]);
    free(c);
}

static void *enc_alloc(struct enc_ctx *c, uint64_t a, uint64_t b, bool *ok) {
    size_t bytes;
    if (!wgllm_size_mul(a, b, &bytes)) {
        *ok = false;
        return NULL;
    }
    void *p = wgllm_alloc_aligned(bytes ? bytes : 1);
    if (!p) *ok = false;
    c->bytes += bytes;
    return p;
}

static enum wgllm_status enc_init(struct wgllm_model *model, const struct wgllm_context_params *p, void **out,
                                  int *n_ctx, int *n_batch, char *desc, size_t desc_cap, struct wgllm_error *err) {
    *out = NULL;
    const struct wgllm_hparams *hp = &model->hp;
    WGLLM_ASSERT(hp->encoder);
    enum wgllm_status wst = wgllm_cpu_weights_prepare(model, err);
    if (wst) return wst;
    struct enc_ctx *c = calloc(1, sizeof *c);
    if (!c) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    c->model = model;
    /* a sequence is one pass, and no longer than the position table */
    c->n_ctx = WGLLM_MIN(WGLLM_MIN(p->n_ctx, hp->n_ctx_train), p->n_batch);
    c->n_batch = p->n_batch;
    c->n_seq = p->n_seq;
    c->n_threads = p->n_threads;
    c->tp = wgllm_threadpool_init(c->n_threads);
    const uint64_t B = (uint64_t)c->n_batch, E = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff;
    const uint64_t QD = (uint64_t)hp->n_head * (uint64_t)hp->head_dim_k, K = WGLLM_MAX(WGLLM_MAX(E, F), QD);
    bool ok = c->tp != NULL;
    c->x = enc_alloc(c, B * E, sizeof(float), &ok);
    c->h = enc_alloc(c, B * E, sizeof(float), &ok);
    c->q = enc_alloc(c, B * QD, sizeof(float), &ok);
    c->k = enc_alloc(c, B * QD, sizeof(float), &ok);
    c->v = enc_alloc(c, B * QD, sizeof(float), &ok);
    c->vt = enc_alloc(c, B * QD, sizeof(float), &ok);
    c->att = enc_alloc(c, B * QD, sizeof(float), &ok);
    c->up = enc_alloc(c, B * F, sizeof(float), &ok);
    bool gated = false, rope = false;
    for (int il = 0; il < hp->n_layer; il++) {
        gated |= model->layers[il].w_gate.tensor != NULL;
        rope |= model->layers[il].rope;
    }
    if (gated) c->gate = enc_alloc(c, B * F, sizeof(float), &ok);
    if (rope) c->rope_cs = enc_alloc(c, B * (uint64_t)hp->n_rot, sizeof(float), &ok);
    c->act_bytes = (size_t)(B * K * 4); /* no vec_dot_type row is more than 4 bytes an element */
    c->act_buf = enc_alloc(c, B * K, 4, &ok);
    c->scores = enc_alloc(c, (uint64_t)c->n_threads * (uint64_t)c->n_ctx, sizeof(float), &ok);
    c->type_row = enc_alloc(c, E, sizeof(float), &ok);
    c->seq_tok = enc_alloc(c, B, sizeof(int32_t), &ok);
    c->seq_first = enc_alloc(c, (uint64_t)c->n_seq, sizeof(int32_t), &ok);
    c->seq_len = enc_alloc(c, (uint64_t)c->n_seq, sizeof(int32_t), &ok);
    if (!ok) {
        enc_free(c);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "out of memory allocating an encoder context of %d tokens a pass", p->n_batch);
    }
    if (model->type_embd.tensor)
        wgllm_type_traits(model->type_embd.type)->to_float(model->type_embd.data, c->type_row, hp->n_embd);
    else
        memset(c->type_row, 0, sizeof(float) * (size_t)hp->n_embd);
    snprintf(desc, desc_cap, "cpu (encoder)");
    *n_ctx = c->n_ctx;
    *n_batch = c->n_batch;
    *out = c;
    return WGLLM_STATUS_OK;
}

static uint64_t enc_host_memory(const void *b) { return ((const struct enc_ctx *)b)->bytes; }

/* ---- sequences: an encoder caches nothing ----------------------------------- *
 * A sequence's state is 0 bytes (wgllm_context_seq_state_size), so copying,
 * saving and loading one has nothing to move. */

static void enc_seq_copy(void *b, int src, int dst, int n) { (void)b, (void)src, (void)dst, (void)n; }

static void enc_seq_save(void *b, int seq, int n, void *dst) { (void)b, (void)seq, (void)n, (void)dst; }

static void enc_seq_load(void *b, int seq, int n, const void *src) { (void)b, (void)seq, (void)n, (void)src; }

static enum wgllm_status enc_seq_shift(void *b, int seq, int n, int keep, int discard, struct wgllm_error *err) {
    const struct enc_ctx *c = b;
    return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s is an encoder: it keeps no context to shift",
                           c->model->arch_name);
}

const struct wgllm_backend_i wgllm_backend_cpu_encoder_i = {
    .name = "cpu",
    .init = enc_init,
    .free = enc_free,
    .decode = enc_decode,
    .seq_copy = enc_seq_copy,
    .seq_save = enc_seq_save,
    .seq_load = enc_seq_load,
    .seq_shift = enc_seq_shift,
    .host_memory = enc_host_memory,
};
