/*
 * kernels_enc.c - WGSL of the two kernels only the encoder (bert,
 * nomic-bert; webgpu_encoder.c) needs beyond the decoders' (see the enum in
 * kernels.h): LayerNorm with weight and bias, and GELU alone (GEGLU without
 * its up factor). Both work in place on rows of f32. kernels.c's generator
 * reaches them through wgllm_wgsl_batch_body and prepends the parameter
 * block. The encoder's attention is ATTN_BATCH's F32 version
 * (kernels_attn.c).
 */
#include "backend/webgpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reduction across the workgroup of the per-thread (hi, lo) sums in
 * rh/rl (error-free: two_sum), leaving the total in rh[0] + rl[0]. */
#define REDUCE_WGSL                                         \
    "  rh[tid] = hi;\n"                                     \
    "  rl[tid] = lo;\n"                                     \
    "  workgroupBarrier();\n"                               \
    "  for (var s = WGR / 2u; s > 0u; s >>= 1u) {\n"        \
    "    if (tid < s) {\n"                                  \
    "      let t = two_sum(rh[tid], rh[tid + s]);\n"        \
    "      rh[tid] = t.x;\n"                                \
    "      rl[tid] = rl[tid] + rl[tid + s] + t.y;\n"        \
    "    }\n"                                               \
    "    workgroupBarrier();\n"                             \
    "  }\n"

/*
 * As wgllm_op_layer_norm: the sum of the row kept without loss (hi + lo,
 * for the CPU's double), rounded to f32 and divided by n in f32 (its
 * (float)sum / (float)n); the squares of x - mean rounded to f32 summed the
 * same way, their mean rounded once (div_exact: its (float)(sum2 / n));
 * then (v * scale) * w + b. Each thread writes only the elements it read,
 * after the last reduction's barrier, so the row can be normalized in place.
 */
static char *layer_norm(const struct wgllm_wgsl_tune *t) {
    const char *fmt = "const WGR: u32 = %uu;\n%s"
                      "@group(0) @binding(1) var<storage, read_write> X: array<f32>;\n"
                      "@group(0) @binding(2) var<storage, read> W: array<f32>;\n"
                      "var<workgroup> rh: array<f32, WGR>;\n"
                      "var<workgroup> rl: array<f32, WGR>;\n"
                      "@compute @workgroup_size(WGR)\n"
                      "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
                      "  let tid = lid.x;\n"
                      "  let xb = p.a + wid.x * p.n;\n"
                      "  var hi = 0.0;\n"
                      "  var lo = 0.0;\n"
                      "  for (var i = tid; i < p.n; i += WGR) {\n"
                      "    let t = two_sum(hi, X[xb + i]);\n"
                      "    hi = t.x;\n"
                      "    lo += t.y;\n"
                      "  }\n" REDUCE_WGSL
                      "  let mean = (rh[0] + rl[0]) / f32(p.n);\n"
                      "  workgroupBarrier();\n"
                      "  hi = 0.0;\n"
                      "  lo = 0.0;\n"
                      "  for (var i = tid; i < p.n; i += WGR) {\n"
                      "    let v = X[xb + i] - mean;\n"
                      "    let t = two_sum(hi, v * v);\n"
                      "    hi = t.x;\n"
                      "    lo += t.y;\n"
                      "  }\n" REDUCE_WGSL
                      "  let vr = div_exact(rh[0], rl[0], f32(p.n));\n"
                      "  let scale = 1.0 / sqrt(vr + p.f0);\n"
                      "  for (var i = tid; i < p.n; i += WGR) {\n"
                      "    X[xb + i] = ((X[xb + i] - mean) * scale) * W[p.b + i] + W[p.c + i];\n"
                      "  }\n"
                      "}\n";
    const char *h = wgllm_wgsl_f16_helpers();
    const size_t n = strlen(fmt) + strlen(h) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, t->wg_row, h);
    return s;
}

/* The CPU encoder's wgllm_op_gelu: GEGLU's lookup of the f16 GELU table
 * (kernels.c), without the up factor. */
static char *gelu(const struct wgllm_wgsl_tune *t) {
    const char *fmt = "const WGE: u32 = %uu;\n%s"
                      "@group(0) @binding(1) var<storage, read_write> X: array<f32>;\n"
                      "@group(0) @binding(2) var<storage, read> T: array<u32>;\n"
                      "%s"
                      "@compute @workgroup_size(WGE)\n"
                      "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
                      "  let i = gid.x;\n"
                      "  if (i >= p.n) { return; }\n"
                      "  X[p.a + i] = gelu(X[p.a + i]);\n"
                      "}\n";
    const char *h = wgllm_wgsl_f16_helpers(), *gf = wgllm_wgsl_gelu_helper();
    const size_t n = strlen(fmt) + strlen(h) + strlen(gf) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, t->wg_elem, h, gf);
    return s;
}

char *wgllm_wgsl_encoder_body(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    switch (key->kernel) {
    case WGLLM_KERNEL_LAYER_NORM: return layer_norm(t);
    case WGLLM_KERNEL_GELU: return gelu(t);
    default: return NULL;
    }
}

const char *wgllm_wgsl_encoder_kernel_name(enum wgllm_kernel k) {
    switch (k) {
    case WGLLM_KERNEL_LAYER_NORM: return "layer_norm";
    case WGLLM_KERNEL_GELU: return "gelu";
    default: return "unknown";
    }
}
