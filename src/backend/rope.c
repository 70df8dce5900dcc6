/*
 * rope.c - the RoPE table and rotation shared by the backends (rope.h).
 */
#include "backend/rope.h"
#include "model/model.h"

#include <math.h>

void wgllm_op_rope_cache(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                         const float *freq_factors) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float t = freq_scale * (theta / ff);
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void wgllm_rope_table(float *cs, int pos, const struct wgllm_model *m) {
    const struct wgllm_hparams *hp = &m->hp;
    wgllm_op_rope_cache(cs, pos, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale, m->rope_freqs);
}

void wgllm_rope_table_for(float *cs, int pos, const struct wgllm_model *m, const float *factors, bool swa) {
    const struct wgllm_hparams *hp = &m->hp;
    wgllm_op_rope_cache(cs, pos, hp->n_rot, swa ? hp->rope_freq_base_swa : hp->rope_freq_base,
                        swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale, factors);
    /* ggml multiplies cos and sin by the attention factor after computing them */
    if (hp->rope_attn_factor != 1.0f)
        for (int i = 0; i < hp->n_rot; i++) cs[i] *= hp->rope_attn_factor;
}

void wgllm_op_rope(float *x, const float *cs, int n_rot, bool neox) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}
