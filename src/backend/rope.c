/*
 * rope.c - the RoPE table and rotation shared by the backends (rope.h).
 */
#include "backend/rope.h"
#include "model/model.h"

#include <math.h>

void wgllm_op_rope_cache_yarn(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                              const float *freq_factors, float ext_factor, const float corr[2]) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float extrap = theta / ff;
        float t = freq_scale * extrap;
        if (ext_factor != 0.0f) {
            /* 1 on the fast pairs below corr[0] (they keep their trained
             * angles), 0 on the slow ones past corr[1] (interpolated) */
            const float y = ((float)i - corr[0]) / fmaxf(0.001f, corr[1] - corr[0]);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            t = t * (1.0f - mix) + extrap * mix;
        }
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void wgllm_op_rope_cache(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                         const float *freq_factors) {
    wgllm_op_rope_cache_yarn(cs, pos, n_rot, freq_base, freq_scale, freq_factors, 0.0f, NULL);
}

/* The pair whose wavelength fits n_ctx_orig / beta times into the original
 * context: YaRN's ramp runs between those of beta_fast and beta_slow. */
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float beta, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void wgllm_rope_yarn_corr(const struct wgllm_hparams *hp, float base, float corr[2]) {
    const float lo = floorf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, hp->yarn_beta_fast, base));
    const float hi = ceilf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, hp->yarn_beta_slow, base));
    corr[0] = fmaxf(0.0f, lo);
    corr[1] = fminf((float)(hp->n_rot - 1), hi);
}

void wgllm_rope_table_for(float *cs, int pos, const struct wgllm_model *m, const float *factors, bool swa) {
    const struct wgllm_hparams *hp = &m->hp;
    const float base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
    const float scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    float corr[2] = {0.0f, 0.0f};
    if (hp->yarn_ext_factor != 0.0f) wgllm_rope_yarn_corr(hp, base, corr);
    wgllm_op_rope_cache_yarn(cs, pos, hp->n_rot, base, scale, factors, hp->yarn_ext_factor, corr);
    /* ggml multiplies cos and sin by the attention factor after computing
     * them, YaRN's magnitude (of this table's scale) folded in */
    float mscale = hp->yarn_attn_factor;
    if (hp->yarn_ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / scale);
    if (mscale != 1.0f)
        for (int i = 0; i < hp->n_rot; i++) cs[i] *= mscale;
}

void wgllm_rope_table(float *cs, int pos, const struct wgllm_model *m) {
    wgllm_rope_table_for(cs, pos, m, m->rope_freqs, false);
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
