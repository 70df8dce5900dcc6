/*
 * ops.h - the element-wise and row operations of a transformer on f32 rows,
 * written to round the way ggml's CPU backend does (sum of squares in double
 * for RMSNorm, RoPE angles by repeated multiplication, ...) so that results
 * stay within float noise of llama.cpp.
 */
#ifndef WGLLM_CPU_OPS_H
#define WGLLM_CPU_OPS_H

#include "base/base.h"

/* y = (x * 1/sqrt(mean(x^2) + eps)) * w   (w may be NULL) */
void wgllm_op_rms_norm(const float *x, const float *w, float *y, int n, float eps);

/* Precomputes the rotation for one position: cs[2*i] = cos, cs[2*i+1] = sin
 * of the angle of pair i (n_rot/2 pairs). */
void wgllm_op_rope_cache(float *cs, int pos, int n_rot, float freq_base, float freq_scale,
                         const float *freq_factors);
/* Rotates one head of head_dim values in place; neox pairs (i, i+n_rot/2),
 * normal pairs (2i, 2i+1). */
void wgllm_op_rope(float *x, const float *cs, int n_rot, bool neox);

/* In place: x[i] = exp(x[i] - max) / sum, sums in double. */
void wgllm_op_softmax(float *x, int n);

/* y[i] = silu(g[i]) * u[i] */
void wgllm_op_swiglu(const float *g, const float *u, float *y, int n);

/* Index of the largest value (first on ties). */
int wgllm_op_argmax(const float *x, int n);

#endif
