/*
 * ops.c - row operations of the CPU backend (see ops.h). They are a small
 * part of the time of a forward pass (the matrix products are the rest), so
 * they are plain C that the compiler vectorises; what matters here is
 * rounding like the peer.
 */
#include "backend/cpu/ops.h"
#include "quant/vexp.h"

#include <math.h>

void wgllm_op_rms_norm(const float *x, const float *w, float *y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n); /* rounded to float before eps is added, as ggml does */
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void wgllm_op_layer_norm(const float *x, const float *w, const float *b, float *y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)x[i];
    const float mean = (float)sum / (float)n;
    double sum2 = 0.0;
    for (int i = 0; i < n; i++) {
        const float v = x[i] - mean;
        y[i] = v;
        sum2 += (double)(v * v);
    }
    const float var = (float)(sum2 / n);
    const float scale = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < n; i++) y[i] = (y[i] * scale) * w[i] + b[i];
}

void wgllm_op_softmax(float *x, int n) { wgllm_op_softmax_sink(x, n, -INFINITY); }

void wgllm_op_softmax_sink(float *x, int n, float sink) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    max = sink > max ? sink : max;
    /* the exponentials and their sum in eight lanes (quant/vexp.h: the same bits at every level) */
    double sum = wgllm_vec_exp_sum(x, x, n, max);
    /* the sink's term comes last, as ggml adds it after the row's sum (0 for -inf) */
    sum += (double)expf(sink - max);
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void wgllm_op_swiglu(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}

void wgllm_op_swiglu_oai(const float *g, const float *u, float *y, int n, float alpha, float limit) {
    for (int i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float v = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        y[i] = (x / (1.0f + expf(alpha * (-x)))) * (v + 1.0f);
    }
}

/* ggml's GELU (tanh form) in f32: the same expression in the same order, so
 * that the f16 it is rounded to is the entry of ggml's table. */
static float gelu_tanh(float x) {
    const float a = 0.044715f, s = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(s * x * (1.0f + a * x * x)));
}

/* ggml's table lookup: the input rounded to f16, its GELU rounded to f16,
 * exact outside [-10, 10]. */
static float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return wgllm_fp16_to_fp32(wgllm_fp32_to_fp16(gelu_tanh(wgllm_fp16_to_fp32(wgllm_fp32_to_fp16(x)))));
}

void wgllm_op_geglu(const float *g, const float *u, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = gelu_f16(g[i]) * u[i];
}

void wgllm_op_gelu(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = gelu_f16(x[i]);
}

void wgllm_op_gelu_f16_table(wgllm_fp16 *t) {
    for (uint32_t h = 0; h < 65536; h++)
        t[h] = wgllm_fp32_to_fp16(gelu_tanh(wgllm_fp16_to_fp32((wgllm_fp16)h)));
}

void wgllm_op_softcap(float *x, int n, float cap) {
    const float inv = 1.0f / cap;
    for (int i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
}
