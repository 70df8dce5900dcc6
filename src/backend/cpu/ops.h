/*
 * ops.h - the element-wise and row operations of the CPU backend on f32
 * rows, written to round the way ggml's CPU backend does (sums of squares and
 * of the softmax in double, ...) so that results stay within float noise of
 * llama.cpp. RoPE, which the WebGPU backend shares, is in backend/rope.h
 * (included here for this header's users).
 */
#ifndef WGLLM_CPU_OPS_H
#define WGLLM_CPU_OPS_H

#include "backend/rope.h"
#include "base/base.h"

/* y = (x * 1/sqrt(mean(x^2) + eps)) * w   (w may be NULL) */
void wgllm_op_rms_norm(const float *x, const float *w, float *y, int n, float eps);

/* y = (x - mean) / sqrt(var + eps) * w + b, as ggml_norm then the weight's
 * mul and the bias's add: mean and variance summed in double, each rounded
 * to float (bert's LayerNorm). */
void wgllm_op_layer_norm(const float *x, const float *w, const float *b, float *y, int n, float eps);

/* In place: x[i] = exp(x[i] - max) / sum, sums in double. */
void wgllm_op_softmax(float *x, int n);

/* In place: the softmax of x with one more logit `sink` in its
 * denominator (gpt-oss's attention sinks, as ggml_soft_max_add_sinks: the
 * max includes it, its exponential is added to the sum last); -INFINITY:
 * wgllm_op_softmax. */
void wgllm_op_softmax_sink(float *x, int n, float sink);

/* y[i] = silu(g[i]) * u[i] */
void wgllm_op_swiglu(const float *g, const float *u, float *y, int n);

/* ggml_swiglu_oai: with x = min(g[i], limit) and v = clamp(u[i], -limit,
 * limit), y[i] = x * sigmoid(alpha x) * (v + 1) (gpt-oss's experts) */
void wgllm_op_swiglu_oai(const float *g, const float *u, float *y, int n, float alpha, float limit);

/* y[i] = gelu(g[i]) * u[i], GELU with the tanh approximation, rounded as
 * ggml's CPU backend computes it: the input rounded to f16, the GELU of
 * that rounded to f16 again (its lookup table), exact outside [-10, 10]. */
void wgllm_op_geglu(const float *g, const float *u, float *y, int n);
/* That GELU of every f16 input h (0..65535): t[h] = f16(gelu(h)) for
 * |h| < 10, so that another backend (WebGPU) looks up exactly what
 * wgllm_op_geglu computes; entries outside (-10, 10) are unused there. */
void wgllm_op_gelu_f16_table(wgllm_fp16 *t);

/* In place: x[i] = gelu(x[i]) as wgllm_op_geglu rounds it (ggml_gelu). */
void wgllm_op_gelu(float *x, int n);

/* In place: x[i] = cap * tanh(x[i] * (1/cap)), as ggml's scale, tanh, scale. */
void wgllm_op_softcap(float *x, int n, float cap);

#endif
