/*
 * rope.h - rotary position embedding as both backends apply it: the cos/sin
 * table of one position (made on the host, also for the WebGPU kernels, so
 * both backends rotate by the same libm values) and the rotation of one head
 * by it (the CPU's, and the reference the WGSL kernel must match bit for bit).
 * Angles are made as ggml makes them (theta by repeated multiplication), so
 * that keys stay within float noise of llama.cpp.
 */
#ifndef WGLLM_ROPE_H
#define WGLLM_ROPE_H

#include "base/base.h"

struct wgllm_model;

/* Precomputes the rotation for one position: cs[2*i] = cos, cs[2*i+1] = sin
 * of the angle of pair i (n_rot/2 pairs). */
void wgllm_op_rope_cache(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                         const float *freq_factors);
/* The same with YaRN's blend (wgllm_hparams.yarn_ext_factor; 0: none, and
 * corr may be NULL) between the pairs corr[0] and corr[1]. */
void wgllm_op_rope_cache_yarn(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                              const float *freq_factors, float ext_factor, const float corr[2]);
/* YaRN's ramp bounds for a table of frequency base `base` (llama.cpp's
 * ggml_rope_yarn_corr_dims). */
struct wgllm_hparams;
void wgllm_rope_yarn_corr(const struct wgllm_hparams *hp, float base, float corr[2]);
/* The same with the model's n_rot, frequency base and scale and its frequency
 * factors (n_rot floats into cs), YaRN and the attention factor included. pos may be negative: the rotation of a
 * position delta (a context shift). */
void wgllm_rope_table(float *cs, int pos, const struct wgllm_model *model);
/* The general form the CPU backend uses: the given frequency factors
 * (wgllm_model_rope_factors for its context), the local (swa) or global
 * base and scale, and LongRoPE's attention factor on cos and sin. */
void wgllm_rope_table_for(float *cs, int pos, const struct wgllm_model *model, const float *factors, bool swa);
/* Rotates one head of head_dim values in place; neox pairs (i, i+n_rot/2),
 * normal pairs (2i, 2i+1). */
void wgllm_op_rope(float *x, const float *cs, int n_rot, bool neox);

#endif
