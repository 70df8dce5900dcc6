/*
 * webgpu_encoder.c - the WebGPU backend's encoder pass (bert: BGE,
 * arctic-embed; nomic-bert), the GPU twin of backend/cpu/encoder.c: its
 * list of dispatches, built once at init from webgpu_graph.c's primitives
 * (webgpu_internal.h), and the step data of a pass. The block is llama.cpp's
 * LLM_ARCH_BERT:
 *
 *   x = LayerNorm(tok_embd[t] + token_types[0] + position_embd[pos])
 *   per layer:  a = softmax(q k^T * kq_scale) v over the whole sequence
 *               h = LayerNorm(x + W_o a + b_o)                  (attn_output_norm)
 *               x = LayerNorm(h + W_down gelu(W_up h + b_up) + b_down)  (layer_output_norm)
 *
 * nomic-bert: q/k/v from one fused attn_qkv (model.c makes three views of
 * it), neox RoPE on q and k instead of the position table, no biases but
 * the LayerNorms', SwiGLU (down(silu(gate h) * up h)) instead of GELU.
 *
 * Nothing is cached: a sequence comes whole in one pass, so the pass's own
 * k and v activations are the attention's "cache". The host orders the
 * pass's tokens by sequence, each in position order (the encoder's tokens
 * are independent rows until attention, so the order is free), which makes
 * each sequence a run of consecutive rows: ATTN_BATCH, given the
 * sequence's last row and its length, attends over exactly those rows,
 * in both directions. Its F32 version keeps q, K, V and the probabilities
 * in f32 as the CPU encoder does (llama.cpp's graph without flash
 * attention). After the last layer the wanted rows are gathered into xn in
 * the caller's output order and read back (forward_webgpu.c).
 *
 * Rounding follows the CPU encoder: mat-vec inputs to the weight's
 * vec_dot_type (add_matvec), biases added to the product as the CPU's
 * matmul adds them, then the residual, LayerNorm with lossless sums where
 * the CPU sums in double (kernels_enc.c), GELU through the CPU's f16 table.
 *
 * The step buffer's regions (n_batch words each), for token i of the
 * grouped order: 0 its token id, 1 the last row of its sequence, 2 its
 * sequence's length, 3 the grouped row of each wanted output (in the
 * caller's order), 4 its position (the position table's row).
 */
#include "backend/backend_impl.h"
#include "backend/rope.h"
#include "backend/webgpu/webgpu_internal.h"
#include "model/model.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

/* A table's rows by the ids at step word ids_off into y: one dispatch per piece. */
static void add_gather(struct builder *bd, const struct gweight *w, uint32_t ids_off, struct wgllm_gpu_buffer *y) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const uint32_t E = (uint32_t)g->model->hp.n_embd;
    struct wgllm_gpu_pipeline *p = wgllm_webgpu_pipe(g, WGLLM_KERNEL_GET_ROWS, w->type, false, bd->err);
    for (int i = 0; i < w->n_pieces; i++) {
        union wgllm_kparams kp = {.get_rows = {.width = E, .ids_off = ids_off, .scale = 1.0f}};
        if (w->n_pieces > 1)
            kp.get_rows.piece_row0 = (uint32_t)w->piece[i].row0, kp.get_rows.piece_rows = (uint32_t)w->piece[i].rows;
        wgllm_webgpu_add_op(bd, p, &kp, GROW_Y, ceil_div(E, g->tune->wg_elem), 3, w->piece[i].buf, g->step, y, NULL);
    }
}

/* Each row of x (n_embd wide) LayerNormed in place by the weights and biases at w_off, b_off. */
static void add_layer_norm(struct builder *bd, struct wgllm_gpu_buffer *x, uint32_t w_off, uint32_t b_off) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const union wgllm_kparams kp = {.layer_norm = {.width = (uint32_t)g->model->hp.n_embd, .w_off = w_off,
                                                   .b_off = b_off, .eps = g->model->hp.norm_eps}};
    wgllm_webgpu_add_op(bd, wgllm_webgpu_pipe(g, WGLLM_KERNEL_LAYER_NORM, WGLLM_TYPE_F32, false, bd->err), &kp, GROW_X,
                        1, 2, x, g->vecs, NULL, NULL);
}

/* y[t] = W x[t] + bias (the bias at vector offset b_off when the layer has one). */
static void add_linear(struct builder *bd, const struct gweight *w, struct wgllm_gpu_buffer *x,
                       struct wgllm_gpu_buffer *y, const float *bias, uint32_t b_off) {
    wgllm_webgpu_add_matvec(bd, w, x, y, bd->g->n_batch);
    if (bias) wgllm_webgpu_add_rows(bd, y, bd->g->vecs, b_off, (uint32_t)w->ne1, 0);
}

void wgllm_webgpu_encoder_ops(struct builder *bd, const struct vec_offsets *vo) {
    struct wgllm_webgpu_ctx *g = bd->g;
    const struct wgllm_model *m = g->model;
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_wgsl_tune *t = g->tune;
    const uint32_t E = (uint32_t)hp->n_embd, F = (uint32_t)hp->n_ff, dk = (uint32_t)hp->head_dim_k,
                   dv = (uint32_t)hp->head_dim_v, B = (uint32_t)g->n_batch;
    const uint32_t QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv, OD = hp->n_head * dv;

    /* the host's grouping scratch (n_seq and n_batch fit int: context.c) */
    g->enc_host = malloc(sizeof(int) * (2 * (size_t)g->n_seq + (size_t)g->n_batch));
    if (!g->enc_host) {
        wgllm_error_set(bd->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the encoder's pass");
        bd->failed = true;
        return;
    }

    /* embeddings: token, + type 0, + position (bert), then their LayerNorm */
    add_gather(bd, &g->w[7 * hp->n_layer], 0, g->x);
    if (m->type_embd.tensor) wgllm_webgpu_add_rows(bd, g->x, g->vecs, vo->type_row, E, 0);
    if (m->pos_embd.tensor) {
        add_gather(bd, &g->w[7 * hp->n_layer + 1], 4 * B, g->tmp);
        wgllm_webgpu_add_rows(bd, g->x, g->tmp, 0, E, E);
    }
    add_layer_norm(bd, g->x, vo->embd_norm, vo->embd_norm_b);

    struct wgllm_gpu_pipeline *prope = wgllm_webgpu_pipe(g, WGLLM_KERNEL_ROPE, 0, hp->rope_type == WGLLM_ROPE_NEOX,
                                                         bd->err);
    struct wgllm_gpu_pipeline *pattn = wgllm_webgpu_pipe(g, WGLLM_KERNEL_ATTN_BATCH, WGLLM_TYPE_F32, false, bd->err);
    for (int il = 0; il < hp->n_layer && !bd->failed; il++) {
        const struct gweight *W = &g->w[7 * il];
        const struct wgllm_layer *L = &m->layers[il];
        /* q, k, v from one rounding of x, then their biases */
        wgllm_webgpu_add_matvec(bd, &W[0], g->x, g->q, g->n_batch);
        wgllm_webgpu_add_matvec(bd, &W[1], g->x, g->k, g->n_batch);
        wgllm_webgpu_add_matvec(bd, &W[2], g->x, g->v, g->n_batch);
        if (L->bq) wgllm_webgpu_add_rows(bd, g->q, g->vecs, vo->bq[il], QD, 0);
        if (L->bk) wgllm_webgpu_add_rows(bd, g->k, g->vecs, vo->bk[il], KD, 0);
        if (L->bv) wgllm_webgpu_add_rows(bd, g->v, g->vecs, vo->bv[il], VD, 0);
        if (L->rope) { /* nomic-bert */
            const union wgllm_kparams rq = {.rope = {.heads = (uint32_t)hp->n_head, .n_rot = (uint32_t)hp->n_rot,
                                                     .head_dim = dk, .tok_stride = QD}};
            const union wgllm_kparams rk = {.rope = {.heads = (uint32_t)hp->n_head_kv, .n_rot = (uint32_t)hp->n_rot,
                                                     .head_dim = dk, .tok_stride = KD}};
            wgllm_webgpu_add_op(bd, prope, &rq, GROW_Y, ceil_div((uint64_t)rq.rope.heads * (rq.rope.n_rot / 2), t->wg_elem),
                                2, g->q, g->rope_cs, NULL, NULL);
            wgllm_webgpu_add_op(bd, prope, &rk, GROW_Y, ceil_div((uint64_t)rk.rope.heads * (rk.rope.n_rot / 2), t->wg_elem),
                                2, g->k, g->rope_cs, NULL, NULL);
        }
        /* every token over its whole sequence: rows ROW[t]+1-LEN[t] .. ROW[t] of this pass's k and v */
        const union wgllm_kparams ak = {.attn = {.dk = dk, .dv = dv, .k_stride = KD, .v_stride = VD,
                                                 .gqa = (uint32_t)(hp->n_head / hp->n_head_kv), .q_stride = QD,
                                                 .o_stride = OD, .row_at = B, .len_at = 2 * B,
                                                 .scale = hp->kq_scale, .q_scale = 1.0f}};
        struct gop *o = wgllm_webgpu_add_op(bd, pattn, &ak, GROW_Y, (uint32_t)hp->n_head, 4, g->q, g->k, g->v, g->att);
        if (o) o->b[o->nb++] = (struct wgllm_gpu_binding){g->step, 0, 0};
        /* h = LayerNorm(x + W_o a + b_o), in tmp */
        add_linear(bd, &W[3], g->att, g->tmp, L->bo, L->bo ? vo->bo[il] : 0);
        wgllm_webgpu_add_rows(bd, g->tmp, g->x, 0, E, E);
        add_layer_norm(bd, g->tmp, vo->attn_out_norm[il], vo->attn_out_norm_b[il]);
        /* x = LayerNorm(h + W_down act(h) + b_down) */
        struct wgllm_gpu_buffer *act = g->up;
        if (W[4].n_pieces) { /* nomic-bert: silu(gate h) * up h */
            wgllm_webgpu_add_matvec(bd, &W[4], g->tmp, g->gate, g->n_batch);
            add_linear(bd, &W[5], g->tmp, g->up, L->b_up, L->b_up ? vo->b_up[il] : 0);
            const union wgllm_kparams sw = {.swiglu = {.count = F * B}};
            wgllm_webgpu_add_elems(bd, wgllm_webgpu_pipe(g, WGLLM_KERNEL_SWIGLU, 0, false, bd->err), &sw, F, t->wg_elem,
                                   3, g->gate, g->up, g->ffh, NULL);
            act = g->ffh;
        } else { /* bert: gelu(W_up h + b_up), in place */
            add_linear(bd, &W[5], g->tmp, g->up, L->b_up, L->b_up ? vo->b_up[il] : 0);
            const union wgllm_kparams gk = {.gelu = {.count = F * B}};
            wgllm_webgpu_add_elems(bd, wgllm_webgpu_pipe(g, WGLLM_KERNEL_GELU, WGLLM_TYPE_F32, false, bd->err), &gk, F,
                                   t->wg_elem, 2, g->up, g->gelu_tab, NULL, NULL);
        }
        add_linear(bd, &W[6], act, g->x, L->b_down, L->b_down ? vo->b_down[il] : 0);
        wgllm_webgpu_add_rows(bd, g->x, g->tmp, 0, E, E);
        add_layer_norm(bd, g->x, vo->layer_out_norm[il], vo->layer_out_norm_b[il]);
    }
    /* the wanted rows (step region 3), in the caller's order, into xn: what a pass reads back */
    g->n_ops_layers = g->n_ops;
    const union wgllm_kparams gx = {.get_rows = {.width = E, .ids_off = 3 * B, .scale = 1.0f}};
    wgllm_webgpu_add_op(bd, wgllm_webgpu_pipe(g, WGLLM_KERNEL_GET_ROWS, WGLLM_TYPE_F32, false, bd->err), &gx, GROW_Y,
                        ceil_div(E, t->wg_elem), 3, g->x, g->step, g->xn, NULL);
    g->n_ops_norm = g->n_ops_logits = g->n_ops;
}

enum wgllm_status wgllm_webgpu_encoder_step(struct wgllm_webgpu_ctx *g, const struct wgllm_ubatch *ub,
                                            struct wgllm_error *err) {
    const struct wgllm_model *m = g->model;
    if (!ub->embeddings)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s is an embedding model (an encoder without an output layer): it computes "
                               "embeddings, not logits, so it cannot generate text",
                               m->arch_name);
    /* each sequence's first grouped row and length, then each token's row
     * (position p of sequence s at first[s] + p), checking that every
     * sequence is whole: an encoder keeps nothing between passes, so a
     * sequence split over two would see only part of itself */
    int *first = g->enc_host, *len = first + g->n_seq, *row = len + g->n_seq;
    for (int s = 0; s < g->n_seq; s++) len[s] = 0;
    for (int t = 0; t < ub->n; t++) len[ub->seq[t]]++;
    for (int s = 0, at = 0; s < g->n_seq; s++) first[s] = at, at += len[s];
    const uint32_t B = (uint32_t)g->n_batch;
    uint32_t *st = g->step_host;
    for (int i = 0; i < ub->n; i++) st[i] = UINT32_MAX; /* region 0 marks the rows taken */
    for (int t = 0; t < ub->n; t++) {
        const int s = ub->seq[t], p = ub->pos[t];
        if (p >= len[s] || st[first[s] + p] != UINT32_MAX)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "%s is an encoder: a sequence must come whole in one pass (positions 0..n-1), but "
                                   "sequence %d has %d token(s) here and token %d is at position %d",
                                   m->arch_name, s, len[s], t, p);
        const int i = row[t] = first[s] + p;
        st[i] = (uint32_t)ub->token[t];
        st[B + i] = (uint32_t)(first[s] + len[s] - 1);
        st[2 * B + i] = (uint32_t)len[s];
        st[4 * B + i] = (uint32_t)p;
    }
    for (int j = 0; j < ub->n_out; j++) st[3 * B + j] = (uint32_t)row[ub->out_idx[j]];
    for (int a = 0; a < 5; a++)
        if (a != 3 || ub->n_out)
            wgllm_gpu_buffer_write(g->gpu, g->step, (uint64_t)a * B * 4, st + a * B, (size_t)(a == 3 ? ub->n_out : ub->n) * 4);
    bool rope = false;
    for (int il = 0; il < m->hp.n_layer; il++) rope |= m->layers[il].rope;
    if (rope) { /* nomic-bert: the CPU's cos/sin rows of each grouped row's position */
        const int n_rot = m->hp.n_rot;
        for (int t = 0; t < ub->n; t++)
            wgllm_rope_table_for(g->rope_host + (size_t)row[t] * n_rot, ub->pos[t], m, NULL, false);
        wgllm_gpu_buffer_write(g->gpu, g->rope_cs, 0, g->rope_host, (size_t)ub->n * n_rot * sizeof(float));
    }
    return WGLLM_STATUS_OK;
}
