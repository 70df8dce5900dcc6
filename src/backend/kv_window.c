/*
 * kv_window.c - the sliding-window ring's sizes and the rule of which
 * prefixes a ring still provides (kv_window.h), in one place for the CPU
 * and WebGPU backends, the context and `wgllm info`.
 */
#include "backend/kv_window.h"
#include "model/model.h"

int wgllm_kv_ring(const struct wgllm_model *m, int n_ctx, int n_batch, bool full) {
    const struct wgllm_hparams *hp = &m->hp;
    if (full || hp->n_swa <= 0 || hp->encoder) return 0;
    bool any = false;
    for (int il = 0; il < hp->n_layer && !any; il++) any = m->layers[il].swa;
    /* 64 bits: n_swa and n_batch may each be near INT_MAX */
    const int64_t ring = (int64_t)hp->n_swa + n_batch;
    return any && ring < n_ctx ? (int)ring : 0;
}

int wgllm_kv_layer_cells(const struct wgllm_model *m, int il, int n_ctx, int ring) {
    return ring > 0 && m->layers[il].swa ? ring : n_ctx;
}

bool wgllm_kv_can_continue(const struct wgllm_model *m, int pos_min, int n) {
    return n == 0 || pos_min <= 0 || (int64_t)n - m->hp.n_swa >= pos_min;
}

uint64_t wgllm_kv_bytes(const struct wgllm_model *m, int n_ctx, int n_seq, int ring) {
    const struct wgllm_hparams *hp = &m->hp;
    if (hp->encoder) return 0;
    const uint64_t row = (uint64_t)hp->n_head_kv * (uint64_t)(hp->head_dim_k + hp->head_dim_v) * sizeof(wgllm_fp16);
    uint64_t cells = 0, bytes;
    for (int il = 0; il < hp->n_layer; il++) cells += (uint64_t)wgllm_kv_layer_cells(m, il, n_ctx, ring);
    if (wgllm_mul_overflow(cells, row, &bytes) || wgllm_mul_overflow(bytes, (uint64_t)n_seq, &bytes)) return UINT64_MAX;
    return bytes;
}
