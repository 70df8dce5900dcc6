/*
 * kernels.c - WGSL generation for the WebGPU backend (see kernels.h). Each
 * kernel is a template in C; the weight format is injected as three WGSL
 * functions (row_base, wget: one element, rdot: this thread's share of a
 * row's dot product with dequantisation in registers), the tunables as
 * constants. The generated text is the pipeline cache's key.
 */
#include "backend/webgpu/kernels.h"
#include "base/strbuf.h"
#include "quant/quant.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct wgllm_wgsl_tune default_tune = {
    .wg_matvec = 64,
    .rows_matvec = 4,
    .wg_row = 128,
    .wg_elem = 64,
    .wg_attn = 64,
    .attn_max_dims = 4,
    /* 256 threads, 4x4 outputs each, 16 KiB of workgroup memory (the
     * WebGPU minimum every adapter has) */
    .mm_tile_n = 64,
    .mm_tile_m = 64,
    .mm_tile_k = 32,
    .mm_micro_n = 4,
    .mm_micro_m = 4,
};

const struct wgllm_wgsl_tune *wgllm_wgsl_default_tune(void) { return &default_tune; }

static const struct wgllm_wgsl_tune cpu_adapter_tune = {
    .wg_matvec = 1,
    .rows_matvec = 64,
    .wg_row = 64,
    .wg_elem = 64,
    .wg_attn = 32,
    .attn_max_dims = 8,
    .matvec_thread_rows = true,
    /* SwiftShader runs a workgroup's threads as SIMD lanes of one CPU
     * thread: no barriers, one row and 16 tokens per thread. As fast as the
     * shared-memory tiles there (~0.2-0.3 GFLOP/s either way on 2 cores),
     * and it compiles in ~50 ms instead of ~2 s. */
    .mm_tile_n = 64,
    .mm_tile_m = 16,
    .mm_tile_k = 32,
    .mm_micro_n = 1,
    .mm_micro_m = 16,
    .mm_direct = true,
};

const struct wgllm_wgsl_tune *wgllm_wgsl_cpu_adapter_tune(void) { return &cpu_adapter_tune; }

/* Each kernel's view of the parameter block puts its fields where its WGSL
 * reads them (kernels.h): the letter beside each field is checked here. */
#define KP_AT(view, field, letter)                                                              \
    _Static_assert(offsetof(struct wgllm_kp_##view, field) == offsetof(struct wgllm_kp_raw, letter), \
                   "wgllm_kp_" #view "." #field " must sit at p." #letter)
_Static_assert(sizeof(union wgllm_kparams) == 64 && sizeof(struct wgllm_kp_raw) == 64, "the block is 64 bytes");
_Static_assert(sizeof(struct wgllm_kp_matvec) == 64, "wgllm_kp_matvec is the whole block");
KP_AT(matvec, rows, n); KP_AT(matvec, k, k); KP_AT(matvec, w_off, a); KP_AT(matvec, x_off, b);
KP_AT(matvec, y_off, c); KP_AT(matvec, tokens, h); KP_AT(matvec, norm_off, h); KP_AT(matvec, norm_eps, f3); KP_AT(matvec, epi, j); KP_AT(matvec, scale, f0);
KP_AT(matvec, cap, f1); KP_AT(matvec, inv_cap, f2);
_Static_assert(sizeof(struct wgllm_kp_get_rows) == 64, "wgllm_kp_get_rows is the whole block");
KP_AT(get_rows, width, k); KP_AT(get_rows, w_off, a); KP_AT(get_rows, ids_off, b); KP_AT(get_rows, y_off, c);
KP_AT(get_rows, piece_row0, d); KP_AT(get_rows, piece_rows, e); KP_AT(get_rows, scale, f0);
_Static_assert(sizeof(struct wgllm_kp_rms_norm) == 64, "wgllm_kp_rms_norm is the whole block");
KP_AT(rms_norm, width, n); KP_AT(rms_norm, x_off, a); KP_AT(rms_norm, w_off, b); KP_AT(rms_norm, y_off, c);
KP_AT(rms_norm, eps, f0); KP_AT(rms_norm, add, d); KP_AT(rms_norm, scale, f1);
_Static_assert(sizeof(struct wgllm_kp_rope) == 64, "wgllm_kp_rope is the whole block");
KP_AT(rope, heads, n); KP_AT(rope, n_rot, m); KP_AT(rope, head_dim, k); KP_AT(rope, x_off, a);
KP_AT(rope, tok_stride, b); KP_AT(rope, cs_off, c);
_Static_assert(sizeof(struct wgllm_kp_swiglu) == 64, "wgllm_kp_swiglu is the whole block");
KP_AT(swiglu, count, n); KP_AT(swiglu, g_off, a); KP_AT(swiglu, u_off, b); KP_AT(swiglu, y_off, c);
_Static_assert(sizeof(struct wgllm_kp_argmax) == 64, "wgllm_kp_argmax is the whole block");
KP_AT(argmax, count, n); KP_AT(argmax, x_off, a); KP_AT(argmax, out_at, b);
_Static_assert(sizeof(struct wgllm_kp_round_act) == 64, "wgllm_kp_round_act is the whole block");
KP_AT(round_act, count, n); KP_AT(round_act, x_off, a); KP_AT(round_act, y_off, c);
_Static_assert(sizeof(struct wgllm_kp_attn) == 64, "wgllm_kp_attn is the whole block");
KP_AT(attn, dv, m); KP_AT(attn, dk, k); KP_AT(attn, q_stride, a); KP_AT(attn, row_at, b); KP_AT(attn, len_at, c);
KP_AT(attn, o_stride, d); KP_AT(attn, k_stride, e); KP_AT(attn, gqa, g); KP_AT(attn, v_stride, i);
KP_AT(attn, scale, f0); KP_AT(attn, window, h); KP_AT(attn, q_scale, f1); KP_AT(attn, softcap, f2);
KP_AT(attn, inv_softcap, f3); KP_AT(attn, temp_at, j); KP_AT(attn, ring, n);
_Static_assert(sizeof(struct wgllm_kp_store_kv) == 64, "wgllm_kp_store_kv is the whole block");
KP_AT(store_kv, words, n); KP_AT(store_kv, x_stride, k); KP_AT(store_kv, x_off, a); KP_AT(store_kv, row_at, b);
KP_AT(store_kv, y_off, c); KP_AT(store_kv, y_stride, e);
_Static_assert(sizeof(struct wgllm_kp_add_rows) == 64, "wgllm_kp_add_rows is the whole block");
KP_AT(add_rows, width, n); KP_AT(add_rows, y_stride, m); KP_AT(add_rows, x_off, a); KP_AT(add_rows, y_off, b);
_Static_assert(sizeof(struct wgllm_kp_rope_shift) == 64, "wgllm_kp_rope_shift is the whole block");
KP_AT(rope_shift, words, n); KP_AT(rope_shift, n_rot, m); KP_AT(rope_shift, head_dim, k); KP_AT(rope_shift, y_off, c);
KP_AT(rope_shift, row_words, e);
_Static_assert(sizeof(struct wgllm_kp_sample) == 64, "wgllm_kp_sample is the whole block");
KP_AT(sample, n_vocab, n); KP_AT(sample, top_k, k); KP_AT(sample, x_off, a); KP_AT(sample, out_at, b);
KP_AT(sample, seed, c); KP_AT(sample, len_at, d); KP_AT(sample, private_slot, h); KP_AT(sample, temperature, f0);
KP_AT(sample, top_p, f1); KP_AT(sample, min_p, f2);
_Static_assert(sizeof(struct wgllm_kp_layer_norm) == 64, "wgllm_kp_layer_norm is the whole block");
KP_AT(layer_norm, width, n); KP_AT(layer_norm, x_off, a); KP_AT(layer_norm, w_off, b); KP_AT(layer_norm, b_off, c);
KP_AT(layer_norm, eps, f0);
_Static_assert(sizeof(struct wgllm_kp_gelu) == 64, "wgllm_kp_gelu is the whole block");
KP_AT(gelu, count, n); KP_AT(gelu, x_off, a);
#undef KP_AT

static const char *params_wgsl =
    "struct P { n: u32, m: u32, k: u32, a: u32, b: u32, c: u32, d: u32, e: u32,\n"
    "           g: u32, h: u32, i: u32, j: u32, f0: f32, f1: f32, f2: f32, f3: f32 };\n"
    "@group(0) @binding(0) var<uniform> p: P;\n";

/* f16 rounding (pack2x16float rounds to nearest even, as F16C and the CPU
 * backend's wgllm_fp32_to_fp16 do: test_webgpu checks it on ties), and an
 * error-free sum: with it a sum kept as hi + lo is exact to ~2^-48, which
 * stands in for the CPU backend's sums in double. */
static const char *round_wgsl =
    /* Integer rounding rather than unpack2x16float(pack2x16float(v)): a
     * compiler may fold that pair into v (NVIDIA's Vulkan driver does), and
     * then nothing is rounded. Normal range: round the mantissa to 10 bits,
     * half to even; below 2^-14 the f16 spacing is 2^-24; above 65504, inf. */
    "fn to_f16(v: f32) -> f32 {\n"
    "  if (abs(v) < 6.103515625e-05) { return round(v * 16777216.0) * 5.9604644775390625e-08; }\n"
    "  let u = bitcast<u32>(v);\n"
    "  if ((u & 0x7f800000u) == 0x7f800000u) { return v; }\n"
    "  let r = bitcast<f32>((u + 0xfffu + ((u >> 13u) & 1u)) & 0xffffe000u);\n"
    "  if (abs(r) > 65504.0) { return bitcast<f32>((u & 0x80000000u) | 0x7f800000u); }\n"
    "  return r;\n"
    "}\n"
    "fn two_sum(a: f32, b: f32) -> vec2<f32> {\n"
    "  let s = a + b;\n"
    "  let bb = s - a;\n"
    "  return vec2<f32>(s, (a - (s - bb)) + (b - bb));\n"
    "}\n"
    /* (hi + lo) / n rounded once, as (float)(double sum / n): q = hi / n,
     * then the exact remainder hi - q*n (Dekker's product: no fma needed). */
    "fn split(a: f32) -> vec2<f32> { let c = 4097.0 * a; let h = c - (c - a); return vec2<f32>(h, a - h); }\n"
    "fn div_exact(hi: f32, lo: f32, n: f32) -> f32 {\n"
    "  let q = hi / n;\n"
    "  let pr = q * n;\n"
    "  let a = split(q);\n"
    "  let b = split(n);\n"
    "  let pe = ((a.x * b.x - pr) + a.x * b.y + a.y * b.x) + a.y * b.y;\n"
    "  return q + (((hi - pr) - pe) + lo) / n;\n"
    "}\n";

/* tanh for the soft-caps and GELU: WGSL's builtin has no stated precision
 * (and may overflow to NaN through exp for large arguments), so a series
 * near 0, where 1 - e^-2x cancels, and the exp form elsewhere; a few f32
 * ulps from libm's tanhf either way. */
static const char *tanh_wgsl =
    "fn tanh_f(x: f32) -> f32 {\n"
    "  let a = abs(x);\n"
    "  var t: f32;\n"
    "  if (a < 0.125) {\n"
    "    let z = a * a;\n"
    "    t = a + a * z * (-0.33333333333333333 + z * (0.13333333333333333 + z * (-0.053968253968253968 + z * 0.021869488536155203)));\n"
    "  } else {\n"
    "    let e = exp(-2.0 * a);\n"
    "    t = (1.0 - e) / (1.0 + e);\n"
    "  }\n"
    "  return select(t, -t, x < 0.0);\n"
    "}\n";

/* The mat-vec / mat-mat epilogue (WGLLM_EPI_*), in the CPU's order. */
static const char *epi_wgsl =
    "fn epi(v: f32) -> f32 {\n"
    "  var r = v;\n"
    "  if ((p.j & 1u) != 0u) { r = tanh_f(r * p.f2) * p.f1; }\n"
    "  if ((p.j & 2u) != 0u) { r = r * p.f0; }\n"
    "  return r;\n"
    "}\n"
    /* the store, adding into Y with WGLLM_EPI_ACC (the residual stream: y + v
     * is the CPU's x += tmp, the same single rounding) */
    "fn put(i: u32, v: f32) {\n"
    "  if ((p.j & 4u) != 0u) { Y[i] = Y[i] + epi(v); } else { Y[i] = epi(v); }\n"
    "}\n";

/* Byte access to a flat array<u32> named W (little-endian). Offsets of the
 * 16-bit fields of Q8_0/Q4_0 blocks are always even. */
static const char *bytes_wgsl =
    "fn ld8(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }\n"
    "fn ld16(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu; }\n"
    "fn ld32(o: u32) -> u32 {\n"
    "  let i = o >> 2u;\n"
    "  if ((o & 2u) == 0u) { return W[i]; }\n"
    "  return (W[i] >> 16u) | (W[i + 1u] << 16u);\n"
    "}\n"
    "fn f16at(o: u32) -> f32 { return unpack2x16float(ld16(o)).x; }\n"
    "fn sx8(v: u32) -> f32 { return f32(bitcast<i32>(v << 24u) >> 24u); }\n";


/* ---- formats read 8 elements at a time -------------------------------------
 * The formats below define w8(rb, c, u): elements 8u..8u+7 (u < 4) of the
 * row's 32-element chunk c, dequantised in f32 exactly as the CPU's
 * to_float computes them (same products, same order). wget, rdot and the
 * mat-mat tile loads are derived from it (generic_w8_*). Blocks of 256
 * (K-quants) are addressed as 8 chunks of 32. */

/* Q4_K/Q5_K: sub-block j's 6-bit scale and min from the 12 bytes at s
 * (wgllm_kq_scale_min_k4). */
static const char *k4_scales_wgsl =
    "fn sc_k4(s: u32, j: u32) -> vec2<f32> {\n"
    "  if (j < 4u) { return vec2<f32>(f32(ld8(s + j) & 63u), f32(ld8(s + j + 4u) & 63u)); }\n"
    "  let a = ld8(s + j + 4u);\n"
    "  return vec2<f32>(f32((a & 15u) | ((ld8(s + j - 4u) >> 6u) << 4u)), f32((a >> 4u) | ((ld8(s + j) >> 6u) << 4u)));\n"
    "}\n";

/* The block bytes per row (K elements) of a w8 format, 0 when not one. */
static uint32_t w8_block(uint32_t type, uint32_t *bytes) {
    switch (type) {
    case WGLLM_TYPE_Q4_K: *bytes = 144; return 256;
    case WGLLM_TYPE_Q5_K: *bytes = 176; return 256;
    case WGLLM_TYPE_Q6_K: *bytes = 210; return 256;
    case WGLLM_TYPE_Q2_K: *bytes = 84; return 256;
    case WGLLM_TYPE_Q3_K: *bytes = 110; return 256;
    case WGLLM_TYPE_IQ4_XS: *bytes = 136; return 256;
    case WGLLM_TYPE_Q4_1: *bytes = 20; return 32;
    case WGLLM_TYPE_Q5_0: *bytes = 22; return 32;
    case WGLLM_TYPE_Q5_1: *bytes = 24; return 32;
    case WGLLM_TYPE_IQ4_NL: *bytes = 18; return 32;
    case WGLLM_TYPE_MXFP4: *bytes = 17; return 32;
    case WGLLM_TYPE_TQ2_0: *bytes = 66; return 256;
    case WGLLM_TYPE_TQ1_0: *bytes = 54; return 256;
    case WGLLM_TYPE_Q1_0: *bytes = 18; return 128;
    case WGLLM_TYPE_NVFP4: *bytes = 36; return 64;
    case WGLLM_TYPE_IQ2_XXS: *bytes = 66; return 256;
    case WGLLM_TYPE_IQ2_XS: *bytes = 74; return 256;
    case WGLLM_TYPE_IQ2_S: *bytes = 82; return 256;
    case WGLLM_TYPE_IQ3_XXS: *bytes = 98; return 256;
    case WGLLM_TYPE_IQ3_S: *bytes = 110; return 256;
    case WGLLM_TYPE_IQ1_S: *bytes = 50; return 256;
    case WGLLM_TYPE_IQ1_M: *bytes = 56; return 256;
    default: return 0;
    }
}

static bool emit_w8(struct wgllm_strbuf *b, uint32_t type) {
    uint32_t bs, qk = w8_block(type, &bs);
    if (!qk) return false;
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<u32>;\n%s", bytes_wgsl);
    wgllm_strbuf_printf(b, "fn row_base(r: u32) -> u32 { return p.a * 4u + r * (p.k / %uu) * %uu; }\n", qk, bs);
    switch (type) {
    case WGLLM_TYPE_Q4_K:
    case WGLLM_TYPE_Q5_K: {
        const bool q5 = type == WGLLM_TYPE_Q5_K;
        /* d, dmin, scales[12], (Q5_K: qh[32]), qs[128]: element 32j + l is
         * nibble j&1 of qs[32(j/2) + l] (+16 when bit j of qh[l]) */
        wgllm_strbuf_printf(b, "%s", k4_scales_wgsl);
        wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 8u) * %uu;\n"
                  "  let j = c %% 8u;\n"
                  "  let sm = sc_k4(o + 4u, j);\n"
                  "  let d = f16at(o) * sm.x;\n"
                  "  let m = f16at(o + 2u) * sm.y;\n"
                  "  let qo = o + %uu + 32u * (j / 2u) + 8u * u;\n"
                  "  let sh = (j & 1u) * 4u;\n"
                  "  let q0 = ld32(qo);\n"
                  "  let q1 = ld32(qo + 4u);\n", bs, q5 ? 48u : 16u);
        if (q5)
            wgllm_strbuf_printf(b, "  let h0 = ld32(o + 16u + 8u * u);\n"
                      "  let h1 = ld32(o + 20u + 8u * u);\n");
        else
            wgllm_strbuf_printf(b, "  let h0 = 0u;\n  let h1 = 0u;\n");
        wgllm_strbuf_printf(b, "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    v[t] = d * f32(((q0 >> (8u * t + sh)) & 15u) | (((h0 >> (8u * t + j)) & 1u) << 4u)) - m;\n"
                  "    v[t + 4u] = d * f32(((q1 >> (8u * t + sh)) & 15u) | (((h1 >> (8u * t + j)) & 1u) << 4u)) - m;\n"
                  "  }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    }
    case WGLLM_TYPE_Q6_K:
        /* ql[128], qh[64], scales[16] (i8), d: element 128h + 32g + l takes
         * nibble g/2 of ql[64h + 32(g&1) + l] and bits 2g of qh[32h + l],
         * minus 32, times d * scales[(128h + 32g + l) / 16] */
        wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 8u) * 210u;\n"
                  "  let h = (c %% 8u) / 4u;\n"
                  "  let g = c %% 4u;\n"
                  "  let d = f16at(o + 208u) * sx8(ld8(o + 192u + 8u * h + 2u * g + u / 2u));\n"
                  "  let lo = o + 64u * h + 32u * (g & 1u) + 8u * u;\n"
                  "  let ho = o + 128u + 32u * h + 8u * u;\n"
                  "  let l0 = ld32(lo);\n"
                  "  let l1 = ld32(lo + 4u);\n"
                  "  let g0 = ld32(ho);\n"
                  "  let g1 = ld32(ho + 4u);\n"
                  "  let sh = select(0u, 4u, g >= 2u);\n"
                  "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    v[t] = d * f32(i32(((l0 >> (8u * t + sh)) & 15u) | (((g0 >> (8u * t + 2u * g)) & 3u) << 4u)) - 32);\n"
                  "    v[t + 4u] = d * f32(i32(((l1 >> (8u * t + sh)) & 15u) | (((g1 >> (8u * t + 2u * g)) & 3u) << 4u)) - 32);\n"
                  "  }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    case WGLLM_TYPE_Q2_K:
    case WGLLM_TYPE_Q3_K: {
        /* Q2_K: scales[16] (min << 4 | scale), qs[64], d, dmin. Q3_K: hmask[32],
         * qs[64], scales[12] (6-bit, signed by -32), d. Element 128n + 32j + l
         * has bits 2j..2j+1 of qs[32n + l]; Q3_K subtracts 4 unless bit
         * (e / 32) of hmask[l] is set. Scale of 16 elements: e / 16. */
        const bool q3 = type == WGLLM_TYPE_Q3_K;
        wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 8u) * %uu;\n"
                  "  let cc = c %% 8u;\n"
                  "  let qo = o + %uu + 32u * (cc / 4u) + 8u * u;\n"
                  "  let sh = 2u * (cc %% 4u);\n"
                  "  let q0 = ld32(qo);\n"
                  "  let q1 = ld32(qo + 4u);\n"
                  "  let j = 2u * cc + u / 2u;\n", bs, q3 ? 32u : 16u);
        if (q3)
            wgllm_strbuf_printf(b, "  let lo = select(ld8(o + 96u + j - 8u) >> 4u, ld8(o + 96u + j) & 15u, j < 8u);\n"
                      "  let hi = (ld8(o + 104u + j %% 4u) >> (2u * (j / 4u))) & 3u;\n"
                      "  let dl = f16at(o + 108u) * f32(i32(lo | (hi << 4u)) - 32);\n"
                      "  let m0 = ld32(o + 8u * u);\n"
                      "  let m1 = ld32(o + 8u * u + 4u);\n"
                      "  var v: array<f32, 8>;\n"
                      "  for (var t = 0u; t < 4u; t++) {\n"
                      "    v[t] = dl * f32(i32((q0 >> (8u * t + sh)) & 3u) - select(4, 0, ((m0 >> (8u * t + cc)) & 1u) == 1u));\n"
                      "    v[t + 4u] = dl * f32(i32((q1 >> (8u * t + sh)) & 3u) - select(4, 0, ((m1 >> (8u * t + cc)) & 1u) == 1u));\n"
                      "  }\n");
        else
            wgllm_strbuf_printf(b, "  let sc = ld8(o + j);\n"
                      "  let dl = f16at(o + 80u) * f32(sc & 15u);\n"
                      "  let ml = f16at(o + 82u) * f32(sc >> 4u);\n"
                      "  var v: array<f32, 8>;\n"
                      "  for (var t = 0u; t < 4u; t++) {\n"
                      "    v[t] = dl * f32((q0 >> (8u * t + sh)) & 3u) - ml;\n"
                      "    v[t + 4u] = dl * f32((q1 >> (8u * t + sh)) & 3u) - ml;\n"
                      "  }\n");
        wgllm_strbuf_printf(b, "  return v;\n}\n");
        return true;
    }
    case WGLLM_TYPE_TQ2_0:
        /* qs[64], d: element 128h + 32l + m is bits 2l of qs[32h + m], minus 1 */
        wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 8u) * 66u;\n"
                  "  let cc = c %% 8u;\n"
                  "  let qo = o + 32u * (cc / 4u) + 8u * u;\n"
                  "  let sh = 2u * (cc %% 4u);\n"
                  "  let d = f16at(o + 64u);\n"
                  "  let q0 = ld32(qo);\n"
                  "  let q1 = ld32(qo + 4u);\n"
                  "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    v[t] = f32(i32((q0 >> (8u * t + sh)) & 3u) - 1) * d;\n"
                  "    v[t + 4u] = f32(i32((q1 >> (8u * t + sh)) & 3u) - 1) * d;\n"
                  "  }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    case WGLLM_TYPE_NVFP4:
        /* d[4] (UE4M3, halved as wgllm_ue4m3_half), qs[32]: element 16s + j
         * is the low nibble of qs[8s + j] (j < 8), 16s + 8 + j the high one,
         * MXFP4's doubled E2M1 values times d[s] */
        wgllm_strbuf_printf(b, "var<private> KV: array<f32, 16> = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,\n"
                  "  0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);\n"
                  "fn ue4m3_half(x: u32) -> f32 {\n"
                  "  if (x == 0u || x == 0x7Fu) { return 0.0; }\n"
                  "  let e = (x >> 3u) & 15u;\n"
                  "  let m = f32(x & 7u);\n"
                  "  return select(ldexp(1.0 + m / 8.0, i32(e) - 7), ldexp(m, -9), e == 0u) * 0.5;\n"
                  "}\n"
                  "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 2u) * 36u;\n"
                  "  let sb = 2u * (c %% 2u) + u / 2u;\n"
                  "  let d = ue4m3_half(ld8(o + sb));\n"
                  "  let sh = 4u * (u %% 2u);\n"
                  "  let q0 = ld32(o + 4u + 8u * sb);\n"
                  "  let q1 = ld32(o + 8u + 8u * sb);\n"
                  "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    v[t] = KV[(q0 >> (8u * t + sh)) & 15u] * d;\n"
                  "    v[t + 4u] = KV[(q1 >> (8u * t + sh)) & 15u] * d;\n"
                  "  }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    case WGLLM_TYPE_Q1_0:
        /* d, qs[16]: element j of the block is +d when bit j % 8 of qs[j / 8] is set, else -d */
        wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 4u) * 18u;\n"
                  "  let d = f16at(o);\n"
                  "  let bits = ld8(o + 2u + 4u * (c %% 4u) + u);\n"
                  "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 8u; t++) { v[t] = select(-d, d, ((bits >> t) & 1u) == 1u); }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    case WGLLM_TYPE_TQ1_0:
        /* qs[48], qh[4], d: base-3 fixed-point bytes, trit k of byte q is
         * ((q * 3^k) & 255) * 3 >> 8. Elements 32k + m: trit k of qs[m]
         * (k < 5); 160 + 16k + m: trit k of qs[32 + m]; 240 + 4k + j: trit
         * k of qh[j] (wgllm_block_tq1_0). */
        wgllm_strbuf_printf(b, "var<private> P3: array<u32, 5> = array<u32, 5>(1u, 3u, 9u, 27u, 81u);\n"
                  "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n"
                  "  let o = rb + (c / 8u) * 54u;\n"
                  "  let d = f16at(o + 52u);\n"
                  "  var v: array<f32, 8>;\n"
                  "  for (var t = 0u; t < 8u; t++) {\n"
                  "    let e = 32u * (c %% 8u) + 8u * u + t;\n"
                  "    var bi = e %% 32u;\n"
                  "    var k = e / 32u;\n"
                  "    if (e >= 240u) { bi = 48u + (e - 240u) %% 4u; k = (e - 240u) / 4u; }\n"
                  "    else if (e >= 160u) { bi = 32u + (e - 160u) %% 16u; k = (e - 160u) / 16u; }\n"
                  "    let r = (ld8(o + bi) * P3[k]) & 255u;\n"
                  "    v[t] = f32(i32((r * 3u) >> 8u) - 1) * d;\n"
                  "  }\n"
                  "  return v;\n"
                  "}\n");
        return true;
    case WGLLM_TYPE_IQ2_XXS:
    case WGLLM_TYPE_IQ2_XS:
    case WGLLM_TYPE_IQ2_S:
    case WGLLM_TYPE_IQ3_XXS:
    case WGLLM_TYPE_IQ3_S:
    case WGLLM_TYPE_IQ1_S:
    case WGLLM_TYPE_IQ1_M: { /* the grid formats: kernels_iquants.c */
        char *iq = wgllm_wgsl_iq_w8(type);
        if (iq) wgllm_strbuf_printf(b, "%s", iq);
        else b->oom = true;
        free(iq);
        return true;
    }
    default: break;
    }
    /* Blocks of 32 with 16 bytes of nibbles: element l < 16 is the low
     * nibble of byte l, l + 16 the high one; units 0, 1 low, 2, 3 high. */
    const bool iq4 = type == WGLLM_TYPE_IQ4_NL || type == WGLLM_TYPE_IQ4_XS;
    if (iq4)
        wgllm_strbuf_printf(b, "var<private> KV: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,\n"
                  "  1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);\n");
    /* MXFP4: the E2M1 values doubled (wgllm_kvalues_mxfp4); its 17-byte
     * blocks put nibbles at odd offsets, which ld32 (even offsets) cannot read */
    const bool mx = type == WGLLM_TYPE_MXFP4;
    if (mx)
        wgllm_strbuf_printf(b, "var<private> KV: array<f32, 16> = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,\n"
                  "  0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);\n"
                  "fn ld32u(o: u32) -> u32 {\n"
                  "  let i = o >> 2u;\n"
                  "  let s = (o & 3u) * 8u;\n"
                  "  if (s == 0u) { return W[i]; }\n"
                  "  return (W[i] >> s) | (W[i + 1u] << (32u - s));\n"
                  "}\n"
                  "fn e8m0_half(e: u32) -> f32 { return bitcast<f32>(select(0x00200000u << e, (e - 1u) << 23u, e >= 2u)); }\n");
    wgllm_strbuf_printf(b, "fn w8(rb: u32, c: u32, u: u32) -> array<f32, 8> {\n");
    switch (type) {
    case WGLLM_TYPE_IQ4_XS: /* d, scales_h (u16), scales_l[4], qs[128]: 8 sub-blocks of 32 as IQ4_NL */
        wgllm_strbuf_printf(b, "  let o = rb + (c / 8u) * 136u;\n"
                  "  let ib = c %% 8u;\n"
                  "  let ls = ((ld8(o + 4u + ib / 2u) >> (4u * (ib %% 2u))) & 15u) | (((ld16(o + 2u) >> (2u * ib)) & 3u) << 4u);\n"
                  "  let d = f16at(o) * f32(i32(ls) - 32);\n"
                  "  let qo = o + 8u + 16u * ib + 8u * (u & 1u);\n");
        break;
    case WGLLM_TYPE_IQ4_NL: /* d, qs[16] */
        wgllm_strbuf_printf(b, "  let o = rb + c * 18u;\n  let d = f16at(o);\n  let qo = o + 2u + 8u * (u & 1u);\n");
        break;
    case WGLLM_TYPE_MXFP4: /* e (E8M0), qs[16] */
        wgllm_strbuf_printf(b, "  let o = rb + c * 17u;\n  let d = e8m0_half(ld8(o));\n  let qo = o + 1u + 8u * (u & 1u);\n");
        break;
    case WGLLM_TYPE_Q4_1: /* d, m, qs[16] */
        wgllm_strbuf_printf(b, "  let o = rb + c * 20u;\n  let d = f16at(o);\n  let m = f16at(o + 2u);\n  let qo = o + 4u + 8u * (u & 1u);\n");
        break;
    case WGLLM_TYPE_Q5_0: /* d, qh (u32: bit l is element l's fifth bit), qs[16] */
        wgllm_strbuf_printf(b, "  let o = rb + c * 22u;\n  let d = f16at(o);\n  let qh = ld32(o + 2u) >> (8u * u);\n  let qo = o + 6u + 8u * (u & 1u);\n");
        break;
    case WGLLM_TYPE_Q5_1: /* d, m, qh, qs[16] */
        wgllm_strbuf_printf(b, "  let o = rb + c * 24u;\n  let d = f16at(o);\n  let m = f16at(o + 2u);\n  let qh = ld32(o + 4u) >> (8u * u);\n"
                  "  let qo = o + 8u + 8u * (u & 1u);\n");
        break;
    default: return false;
    }
    wgllm_strbuf_printf(b, "  let sh = 4u * (u / 2u);\n"
              "  let q0 = %s(qo);\n"
              "  let q1 = %s(qo + 4u);\n"
              "  var v: array<f32, 8>;\n"
              "  for (var t = 0u; t < 8u; t++) {\n"
              "    let q = (select(q1, q0, t < 4u) >> (8u * (t %% 4u) + sh)) & 15u;\n", mx ? "ld32u" : "ld32",
           mx ? "ld32u" : "ld32");
    switch (type) { /* as the CPU's to_float writes each */
    case WGLLM_TYPE_IQ4_XS:
    case WGLLM_TYPE_IQ4_NL: wgllm_strbuf_printf(b, "    v[t] = d * KV[q];\n"); break;
    case WGLLM_TYPE_MXFP4: wgllm_strbuf_printf(b, "    v[t] = KV[q] * d;\n"); break;
    case WGLLM_TYPE_Q4_1: wgllm_strbuf_printf(b, "    v[t] = f32(q) * d + m;\n"); break;
    case WGLLM_TYPE_Q5_0: wgllm_strbuf_printf(b, "    v[t] = f32(i32(q | (((qh >> t) & 1u) << 4u)) - 16) * d;\n"); break;
    case WGLLM_TYPE_Q5_1: wgllm_strbuf_printf(b, "    v[t] = f32(q | (((qh >> t) & 1u) << 4u)) * d + m;\n"); break;
    default: break;
    }
    wgllm_strbuf_printf(b, "  }\n  return v;\n}\n");
    return true;
}

/* wget and rdot of a w8 format. */
static void emit_w8_common(struct wgllm_strbuf *b, bool with_dot) {
    wgllm_strbuf_printf(b, "fn wget(rb: u32, e: u32) -> f32 { let v = w8(rb, e / 32u, (e / 8u) %% 4u); return v[e %% 8u]; }\n");
    if (with_dot)
        wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                  "  var acc = 0.0;\n"
                  "  for (var c = tid; c < p.k / 32u; c += WGM) {\n"
                  "    let xo = xb + c * 32u;\n"
                  "    var s = 0.0;\n"
                  "    for (var u = 0u; u < 4u; u++) {\n"
                  "      let v = w8(rb, c, u);\n"
                  "      let xi = xo + 8u * u;\n"
                  "      for (var t = 0u; t < 8u; t++) { s += v[t] * X[xi + t]; }\n"
                  "    }\n"
                  "    acc += s;\n"
                  "  }\n"
                  "  return acc;\n"
                  "}\n");
}

/* The format functions over W (binding 1) and x (binding 2, MATVEC only).
 * row_base: where row r starts (elements for F32, words for F16, bytes for
 * the block formats); wget: element e of the row at rb; rdot: this thread's
 * partial dot of the row with x[xb..], threads striding by WGM. */
static bool emit_format(struct wgllm_strbuf *b, uint32_t type, bool with_dot) {
    switch (type) {
    case WGLLM_TYPE_F32:
        wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<f32>;\n"
                  "fn row_base(r: u32) -> u32 { return p.a + r * p.k; }\n"
                  "fn wget(rb: u32, e: u32) -> f32 { return W[rb + e]; }\n");
        if (with_dot)
            wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                      "  var acc = 0.0;\n"
                      "  for (var i = tid; i < p.k; i += WGM) { acc += W[rb + i] * X[xb + i]; }\n"
                      "  return acc;\n"
                      "}\n");
        return true;
    case WGLLM_TYPE_F16:
        wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<u32>;\n"
                  "fn row_base(r: u32) -> u32 { return p.a + r * (p.k / 2u); }\n"
                  "fn wget(rb: u32, e: u32) -> f32 { let v = unpack2x16float(W[rb + e / 2u]); return select(v.x, v.y, (e & 1u) == 1u); }\n");
        if (with_dot)
            wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                      "  var acc = 0.0;\n"
                      "  for (var i = tid; i < p.k / 2u; i += WGM) {\n"
                      "    let v = unpack2x16float(W[rb + i]);\n"
                      "    acc += v.x * X[xb + 2u * i] + v.y * X[xb + 2u * i + 1u];\n"
                      "  }\n"
                      "  return acc;\n"
                      "}\n");
        return true;
    case WGLLM_TYPE_BF16: /* the high half of an f32: words hold elements 2i (low), 2i + 1 (high) */
        wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<u32>;\n"
                  "fn row_base(r: u32) -> u32 { return p.a + r * (p.k / 2u); }\n"
                  "fn wget(rb: u32, e: u32) -> f32 { let w = W[rb + e / 2u]; return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u)); }\n");
        if (with_dot)
            wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                      "  var acc = 0.0;\n"
                      "  for (var i = tid; i < p.k / 2u; i += WGM) {\n"
                      "    let w = W[rb + i];\n"
                      "    acc += bitcast<f32>(w << 16u) * X[xb + 2u * i] + bitcast<f32>(w & 0xffff0000u) * X[xb + 2u * i + 1u];\n"
                      "  }\n"
                      "  return acc;\n"
                      "}\n");
        return true;
    case WGLLM_TYPE_Q8_0:
        wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<u32>;\n%s", bytes_wgsl);
        wgllm_strbuf_printf(b, "fn row_base(r: u32) -> u32 { return p.a * 4u + r * (p.k / 32u) * 34u; }\n"
                  "fn wget(rb: u32, e: u32) -> f32 {\n"
                  "  let o = rb + (e / 32u) * 34u;\n"
                  "  return f16at(o) * sx8(ld8(o + 2u + (e %% 32u)));\n"
                  "}\n");
        if (with_dot)
            wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                      "  var acc = 0.0;\n"
                      "  for (var blk = tid; blk < p.k / 32u; blk += WGM) {\n"
                      "    let o = rb + blk * 34u;\n"
                      "    let xo = xb + blk * 32u;\n"
                      "    var s = 0.0;\n"
                      "    for (var j = 0u; j < 8u; j++) {\n"
                      "      let q = ld32(o + 2u + 4u * j);\n"
                      "      let xi = xo + 4u * j;\n"
                      "      s += sx8(q) * X[xi] + sx8(q >> 8u) * X[xi + 1u] + sx8(q >> 16u) * X[xi + 2u] + sx8(q >> 24u) * X[xi + 3u];\n"
                      "    }\n"
                      "    acc += f16at(o) * s;\n"
                      "  }\n"
                      "  return acc;\n"
                      "}\n");
        return true;
    case WGLLM_TYPE_Q4_0:
        wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> W: array<u32>;\n%s", bytes_wgsl);
        wgllm_strbuf_printf(b, "fn row_base(r: u32) -> u32 { return p.a * 4u + r * (p.k / 32u) * 18u; }\n"
                  "fn wget(rb: u32, e: u32) -> f32 {\n"
                  "  let o = rb + (e / 32u) * 18u;\n"
                  "  let i = e %% 32u;\n"
                  "  let q = ld8(o + 2u + (i %% 16u));\n"
                  "  let v = select(q & 15u, q >> 4u, i >= 16u);\n"
                  "  return f16at(o) * (f32(v) - 8.0);\n"
                  "}\n");
        if (with_dot)
            wgllm_strbuf_printf(b, "fn rdot(rb: u32, xb: u32, tid: u32) -> f32 {\n"
                      "  var acc = 0.0;\n"
                      "  for (var blk = tid; blk < p.k / 32u; blk += WGM) {\n"
                      "    let o = rb + blk * 18u;\n"
                      "    let xo = xb + blk * 32u;\n"
                      "    var s = 0.0;\n"
                      "    for (var j = 0u; j < 4u; j++) {\n"
                      "      let q = ld32(o + 2u + 4u * j);\n"
                      "      for (var t = 0u; t < 4u; t++) {\n"
                      "        let bt = (q >> (8u * t)) & 0xffu;\n"
                      "        let i = 4u * j + t;\n"
                      "        s += (f32(bt & 15u) - 8.0) * X[xo + i] + (f32(bt >> 4u) - 8.0) * X[xo + i + 16u];\n"
                      "      }\n"
                      "    }\n"
                      "    acc += f16at(o) * s;\n"
                      "  }\n"
                      "  return acc;\n"
                      "}\n");
        return true;
    default:
        if (!emit_w8(b, type)) return false;
        emit_w8_common(b, with_dot);
        return true;
    }
}

static bool weight_type_ok(uint32_t t) {
    uint32_t bs;
    return t == WGLLM_TYPE_F32 || t == WGLLM_TYPE_F16 || t == WGLLM_TYPE_BF16 || t == WGLLM_TYPE_Q8_0 ||
           t == WGLLM_TYPE_Q4_0 || w8_block(t, &bs);
}

bool wgllm_wgsl_supports(enum wgllm_kernel k, uint32_t type) {
    switch (k) {
    case WGLLM_KERNEL_MATVEC:
    case WGLLM_KERNEL_GET_ROWS:
    case WGLLM_KERNEL_MATMUL:
    case WGLLM_KERNEL_MATVEC_ID:
    case WGLLM_KERNEL_MATMUL_ID:
    case WGLLM_KERNEL_MATVEC_QKV:
    case WGLLM_KERNEL_MATVEC_SWIGLU:
    case WGLLM_KERNEL_MATVEC_GEGLU: return weight_type_ok(type);
    case WGLLM_KERNEL_ROUND_ACT:
    case WGLLM_KERNEL_RMS_NORM_ROUND:
        return type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1 || type == WGLLM_TYPE_Q8_K || type == WGLLM_TYPE_F16 ||
               type == WGLLM_TYPE_BF16;
    default: return true;
    }
}

const char *wgllm_wgsl_kernel_name(enum wgllm_kernel k) {
    static const char *names[] = {"matvec", "get_rows", "rms_norm", "rope", "swiglu", "argmax", "round_act", "matmul",
                                  "geglu", "rms_norm_round"};
    if (k >= WGLLM_KERNEL_MATVEC_QKV) return wgllm_wgsl_fused_kernel_name(k);
    if (k >= WGLLM_KERNEL_MATVEC_ID) return wgllm_wgsl_moe_kernel_name(k);
    if (k >= WGLLM_KERNEL_ATTN_BATCH) return wgllm_wgsl_batch_kernel_name(k);
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

int wgllm_wgsl_all_keys(struct wgllm_kernel_key *out, int cap) {
    /* the kernels, each with the types of its versions: -1 = every type
     * wgllm_wgsl_supports accepts, else the one type the backend uses */
    static const struct {
        enum wgllm_kernel k;
        int32_t type; /* -1: all supported types */
        bool both_rope;
    } kernels[] = {
        {WGLLM_KERNEL_MATVEC, -1, false},        {WGLLM_KERNEL_GET_ROWS, -1, false},
        {WGLLM_KERNEL_RMS_NORM, WGLLM_TYPE_F32, false}, {WGLLM_KERNEL_ROPE, WGLLM_TYPE_F32, true},
        {WGLLM_KERNEL_SWIGLU, WGLLM_TYPE_F32, false},   {WGLLM_KERNEL_GEGLU, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_ARGMAX, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_ROUND_ACT, -1, false},
        {WGLLM_KERNEL_MATMUL, -1, false},        {WGLLM_KERNEL_ATTN_BATCH, WGLLM_TYPE_F16, false},
        {WGLLM_KERNEL_STORE_KV, WGLLM_TYPE_F32, false}, {WGLLM_KERNEL_ADD_ROWS, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_ROPE_SHIFT_F16, WGLLM_TYPE_F16, true}, {WGLLM_KERNEL_SAMPLE, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_SAMPLE_ROWS, WGLLM_TYPE_F32, false},
        /* the encoder's: attention over f32 K/V, LayerNorm, GELU */
        {WGLLM_KERNEL_ATTN_BATCH, WGLLM_TYPE_F32, false}, {WGLLM_KERNEL_LAYER_NORM, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_GELU, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_MATVEC_ID, -1, false},     {WGLLM_KERNEL_MOE_ROUTE, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_MOE_SUM, WGLLM_TYPE_F32, false},
        /* gpt-oss's: attention with sinks, the experts' biases and SwiGLU-OAI */
        {WGLLM_KERNEL_ATTN_SINK, WGLLM_TYPE_F16, false}, {WGLLM_KERNEL_MOE_BIAS, WGLLM_TYPE_F32, false},
        {WGLLM_KERNEL_MOE_GLU_OAI, WGLLM_TYPE_F32, false},
        /* the experts' prefill: the routing bucketed by expert, the grouped mat-mat */
        {WGLLM_KERNEL_MOE_BUCKET, WGLLM_TYPE_F32, false}, {WGLLM_KERNEL_MATMUL_ID, -1, false},
        /* the fused decode kernels (each weight of a fused mat-vec of the one type) */
        {WGLLM_KERNEL_RMS_NORM_ROUND, -1, false}, {WGLLM_KERNEL_MATVEC_QKV, -1, false},
        {WGLLM_KERNEL_MATVEC_SWIGLU, -1, false}, {WGLLM_KERNEL_MATVEC_GEGLU, -1, false},
        {WGLLM_KERNEL_ROPE_STORE, WGLLM_TYPE_F32, true},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
        for (uint32_t t = 0; t < WGLLM_TYPE_COUNT; t++) {
            if (kernels[i].type >= 0 ? t != (uint32_t)kernels[i].type : !wgllm_wgsl_supports(kernels[i].k, t)) continue;
            for (int neox = 0; neox <= (kernels[i].both_rope ? 1 : 0); neox++) {
                if (n < cap) out[n] = (struct wgllm_kernel_key){.kernel = kernels[i].k, .type = t, .neox = neox != 0, .type2 = t, .type3 = t};
                n++;
            }
        }
    return wgllm_wgsl_fused_pro_keys(out, n, cap); /* and the mat-vecs with a prologue */
    return n;
}

void wgllm_wgsl_key_label(const struct wgllm_kernel_key *key, char *buf, size_t cap) {
    const bool rope = key->kernel == WGLLM_KERNEL_ROPE || key->kernel == WGLLM_KERNEL_ROPE_SHIFT_F16 ||
                      key->kernel == WGLLM_KERNEL_ROPE_STORE;
    snprintf(buf, cap, "%s%s%s%s_%s", wgllm_wgsl_kernel_name(key->kernel), rope ? (key->neox ? "_neox" : "_norm") : "",
             key->pro == WGLLM_PRO_ROUND ? "_round" : key->pro == WGLLM_PRO_NORM ? "_norm_round" : "",
             key->pro && key->pro_f32 ? "_f32in" : "", wgllm_type_name(key->type));
}

enum wgllm_status wgllm_wgsl_dump(const char *dir, const struct wgllm_wgsl_tune *tune, int *n_files,
                                  struct wgllm_error *err) {
    *n_files = 0;
    if (mkdir(dir, 0777) && errno != EEXIST)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "%s: cannot make the folder: %s", dir, strerror(errno));
    struct wgllm_kernel_key keys[512];
    const int n = wgllm_wgsl_all_keys(keys, 512);
    WGLLM_ASSERT(n <= 512);
    for (int i = 0; i < n; i++) {
        char label[64], path[4096];
        wgllm_wgsl_key_label(&keys[i], label, sizeof label);
        snprintf(path, sizeof path, "%s/%s.wgsl", dir, label);
        char *src = wgllm_wgsl_generate(&keys[i], tune);
        if (!src) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the %s kernel", label);
        FILE *f = fopen(path, "wb");
        const size_t len = strlen(src);
        const bool ok = f && fwrite(src, 1, len, f) == len;
        const int e = errno;
        free(src);
        if (f && fclose(f) && ok) return wgllm_error_set(err, WGLLM_STATUS_IO, "%s: %s", path, strerror(errno));
        if (!ok) return wgllm_error_set(err, WGLLM_STATUS_IO, "%s: %s", path, strerror(e));
        (*n_files)++;
    }
    return WGLLM_STATUS_OK;
}

static void gen_matvec(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    if (t->matvec_thread_rows) { /* rdot's stride WGM is 1: a thread walks its whole row */
        wgllm_strbuf_printf(b, "const WGM: u32 = 1u;\nconst ROWS: u32 = %uu;\n", t->rows_matvec);
        wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
                  "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n%s%s", tanh_wgsl, epi_wgsl);
        emit_format(b, key->type, true);
        wgllm_strbuf_printf(b, "@compute @workgroup_size(ROWS)\n"
                  "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
                  "  let row = gid.x;\n"
                  "  let tok = gid.y;\n"
                  "  if (row >= p.n) { return; }\n"
                  "  put(p.c + tok * p.n + row, rdot(row_base(row), p.b + tok * p.k, 0u));\n"
                  "}\n");
        return;
    }
    wgllm_strbuf_printf(b, "const WGM: u32 = %uu;\nconst ROWS: u32 = %uu;\n", t->wg_matvec, t->rows_matvec);
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n%s%s", tanh_wgsl, epi_wgsl);
    emit_format(b, key->type, true);
    if (t->matvec_subgroups) {
        /* subgroupAdd, then one partial per subgroup in workgroup memory and
         * one barrier (instead of log2(WGM)). Subgroups are taken to be
         * consecutive ranges of a 1-D workgroup, as Vulkan/Metal/D3D lay
         * them out; the tuner checks every candidate's results anyway. */
        wgllm_strbuf_printf(b, "var<workgroup> red: array<f32, WGM>;\n"
                  "@compute @workgroup_size(WGM)\n"
                  "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,\n"
                  "        @builtin(subgroup_invocation_id) sli: u32, @builtin(subgroup_size) sgs: u32) {\n"
                  "  let tid = lid.x;\n"
                  "  let tok = wid.y;\n"
                  "  let xb = p.b + tok * p.k;\n"
                  "  let nsg = (WGM + sgs - 1u) / sgs;\n"
                  "  for (var rr = 0u; rr < ROWS; rr++) {\n"
                  "    let row = wid.x * ROWS + rr;\n"
                  "    var acc = 0.0;\n"
                  "    if (row < p.n) { acc = rdot(row_base(row), xb, tid); }\n"
                  "    let s = subgroupAdd(acc);\n"
                  "    if (sli == 0u) { red[tid / sgs] = s; }\n"
                  "    workgroupBarrier();\n"
                  "    if (tid == 0u && row < p.n) {\n"
                  "      var tot = 0.0;\n"
                  "      for (var i = 0u; i < nsg; i++) { tot += red[i]; }\n"
                  "      put(p.c + tok * p.n + row, tot);\n"
                  "    }\n"
                  "    workgroupBarrier();\n"
                  "  }\n"
                  "}\n");
        return;
    }
    wgllm_strbuf_printf(b, "var<workgroup> red: array<f32, WGM>;\n"
              "@compute @workgroup_size(WGM)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
              "  let tid = lid.x;\n"
              "  let tok = wid.y;\n"
              "  let xb = p.b + tok * p.k;\n"
              "  for (var rr = 0u; rr < ROWS; rr++) {\n"
              "    let row = wid.x * ROWS + rr;\n"
              "    var acc = 0.0;\n"
              "    if (row < p.n) { acc = rdot(row_base(row), xb, tid); }\n"
              "    red[tid] = acc;\n"
              "    workgroupBarrier();\n"
              "    for (var s = WGM / 2u; s > 0u; s >>= 1u) {\n"
              "      if (tid < s) { red[tid] += red[tid + s]; }\n"
              "      workgroupBarrier();\n"
              "    }\n"
              "    if (tid == 0u && row < p.n) { put(p.c + tok * p.n + row, red[0]); }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "}\n");
}

static void gen_get_rows(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n", t->wg_elem);
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> IDS: array<u32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n");
    emit_format(b, key->type, false);
    wgllm_strbuf_printf(b, "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let e = gid.x;\n"
              "  let tok = gid.y;\n"
              "  if (e >= p.k) { return; }\n"
              "  var id = IDS[p.b + tok];\n"
              "  if (p.e != 0u) {\n"
              "    if (id < p.d || id >= p.d + p.e) { return; }\n"
              "    id = id - p.d;\n"
              "  }\n"
              "  Y[p.c + tok * p.k + e] = wget(row_base(id), e) * p.f0;\n"
              "}\n");
}

/* As wgllm_op_rms_norm: the squares (rounded to f32) summed without loss
 * (hi + lo pairs), the mean rounded to f32, then 1/sqrt(mean + eps). */
static void emit_round32(struct wgllm_strbuf *b, uint32_t type, const char *src);
static void emit_round32_text(struct wgllm_strbuf *b, uint32_t type);

/* With `round` (RMS_NORM_ROUND, key.type the vec_dot_type): the normalized
 * row, once stored, is read back after a storage barrier and rounded into
 * R for the mat-vecs that follow, in the same dispatch (one workgroup owns
 * the row). */
static void gen_rms_norm(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    const bool round = key->kernel == WGLLM_KERNEL_RMS_NORM_ROUND;
    wgllm_strbuf_printf(b, "const WGR: u32 = %uu;\n%s", t->wg_row, round_wgsl);
    if (round) emit_round32(b, key->type, "Y");
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> NW: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n");
    if (round) wgllm_strbuf_printf(b, "@group(0) @binding(4) var<storage, read_write> RY: array<f32>;\n");
    wgllm_strbuf_printf(b, 
              "var<workgroup> rh: array<f32, WGR>;\n"
              "var<workgroup> rl: array<f32, WGR>;\n"
              "@compute @workgroup_size(WGR)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
              "  let tid = lid.x;\n"
              "  let xb = p.a + wid.x * p.n;\n"
              "  let yb = p.c + wid.x * p.n;\n"
              "  var hi = 0.0;\n"
              "  var lo = 0.0;\n"
              "  for (var i = tid; i < p.n; i += WGR) {\n"
              "    let v = X[xb + i];\n"
              "    let t = two_sum(hi, v * v);\n"
              "    hi = t.x;\n"
              "    lo += t.y;\n"
              "  }\n"
              "  rh[tid] = hi;\n"
              "  rl[tid] = lo;\n"
              "  workgroupBarrier();\n"
              "  for (var s = WGR / 2u; s > 0u; s >>= 1u) {\n"
              "    if (tid < s) {\n"
              "      let t = two_sum(rh[tid], rh[tid + s]);\n"
              "      rh[tid] = t.x;\n"
              "      rl[tid] = rl[tid] + rl[tid + s] + t.y;\n"
              "    }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "  let mean = div_exact(rh[0], rl[0], f32(p.n));\n"
              "  let scale = 1.0 / sqrt(mean + p.f0);\n"
              "  if (p.d == 1u) {\n"
              "    for (var i = tid; i < p.n; i += WGR) { Y[yb + i] = Y[yb + i] + ((X[xb + i] * scale) * NW[p.b + i]) * p.f1; }\n"
              "    return;\n"
              "  }\n"
              "  for (var i = tid; i < p.n; i += WGR) { Y[yb + i] = (X[xb + i] * scale) * NW[p.b + i]; }\n");
    if (round)
        wgllm_strbuf_printf(b, "  storageBarrier();\n"
                  "  for (var i0 = tid * 32u; i0 < p.n; i0 += WGR * 32u) { round32(i0, yb, yb); }\n");
    wgllm_strbuf_printf(b, "}\n");
}

/* The cos/sin pairs come from the host (the CPU backend's table), so both
 * backends rotate by the same libm values: a device's sin/cos may be far
 * less precise (SwiftShader's differ from libm by ~1e-4 at 1000 rad). */
static void gen_rope(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\nconst NEOX: bool = %s;\n", t->wg_elem, key->neox ? "true" : "false");
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read_write> X: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> CS: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let hf = p.m / 2u;\n"
              "  if (gid.x >= p.n * hf) { return; }\n"
              "  let hd = gid.x / hf;\n"
              "  let i = gid.x %% hf;\n"
              "  let tok = gid.y;\n"
              "  let c = CS[p.c + tok * p.m + 2u * i];\n"
              "  let s = CS[p.c + tok * p.m + 2u * i + 1u];\n"
              "  let base = p.a + tok * p.b + hd * p.k;\n"
              "  var ia = base + 2u * i;\n"
              "  var ib = ia + 1u;\n"
              "  if (NEOX) { ia = base + i; ib = base + i + hf; }\n"
              "  let x0 = X[ia];\n"
              "  let x1 = X[ib];\n"
              "  X[ia] = x0 * c - x1 * s;\n"
              "  X[ib] = x0 * s + x1 * c;\n"
              "}\n");
}

static void gen_swiglu(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n", t->wg_elem);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> G: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> U: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let i = gid.x;\n"
              "  if (i >= p.n) { return; }\n"
              "  let g = G[p.a + i];\n"
              "  Y[p.c + i] = (g / (1.0 + exp(-g))) * U[p.b + i];\n"
              "}\n");
}

/* GeGLU as ggml computes it on the CPU (wgllm_op_geglu): the GELU of the
 * input rounded to f16 is looked up in the CPU's own table
 * (wgllm_op_gelu_f16_table, uploaded once), so both backends agree bit for
 * bit; a device's tanh differs from libm's by ulps, which the f16 rounding
 * would turn into 2^-11 jumps. The f16 bits come from the exact to_f16. */
static const char *gelu_wgsl =
    "fn gelu(x: f32) -> f32 {\n"
    "  if (x <= -10.0) { return 0.0; }\n"
    "  if (x >= 10.0) { return x; }\n"
    "  let h = pack2x16float(vec2<f32>(to_f16(x), 0.0)) & 0xffffu;\n"
    "  let v = unpack2x16float(T[h >> 1u]);\n"
    "  return select(v.x, v.y, (h & 1u) == 1u);\n"
    "}\n";

static void gen_geglu(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n%s", t->wg_elem, round_wgsl);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> G: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read> U: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "@group(0) @binding(4) var<storage, read> T: array<u32>;\n"
              "%s"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let i = gid.x;\n"
              "  if (i >= p.n) { return; }\n"
              "  Y[p.c + i] = gelu(G[p.a + i]) * U[p.b + i];\n"
              "}\n", gelu_wgsl);
}

static void gen_argmax(struct wgllm_strbuf *b, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGR: u32 = %uu;\n", t->wg_row);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read_write> OUT: array<u32>;\n"
              "var<workgroup> bv: array<f32, WGR>;\n"
              "var<workgroup> bi: array<u32, WGR>;\n"
              "@compute @workgroup_size(WGR)\n"
              "fn main(@builtin(local_invocation_id) lid: vec3<u32>) {\n"
              "  let tid = lid.x;\n"
              "  var v = -3.4e38;\n"
              "  var idx = 0xffffffffu;\n"
              "  for (var i = tid; i < p.n; i += WGR) {\n"
              "    let x = X[p.a + i];\n"
              "    if (idx == 0xffffffffu || x > v) { v = x; idx = i; }\n"
              "  }\n"
              "  bv[tid] = v;\n"
              "  bi[tid] = idx;\n"
              "  workgroupBarrier();\n"
              "  for (var s = WGR / 2u; s > 0u; s >>= 1u) {\n"
              "    if (tid < s) {\n"
              "      let ov = bv[tid + s];\n"
              "      let oi = bi[tid + s];\n"
              "      if (oi != 0xffffffffu && (bi[tid] == 0xffffffffu || ov > bv[tid] || (ov == bv[tid] && oi < bi[tid]))) {\n"
              "        bv[tid] = ov;\n"
              "        bi[tid] = oi;\n"
              "      }\n"
              "    }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              "  if (tid == 0u) { OUT[p.b] = bi[0]; }\n"
              "}\n");
}

/* a / b rounded to nearest as IEEE division is: WGSL's division may be off
 * by 2.5 ulp (SwiftShader's is), which moves a quantizer's scale. One
 * correction step, then the neighbour with the smallest exact remainder
 * a - c*b (Dekker's product; a quotient is never exactly halfway). */
static const char *div_rn_wgsl =
    "fn prod_err(a: f32, b: f32, pr: f32) -> f32 { let x = split(a); let y = split(b); return ((x.x * y.x - pr) + x.x * y.y + x.y * y.x) + x.y * y.y; }\n"
    "fn resid(a: f32, b: f32, c: f32) -> f32 { let pr = c * b; return (a - pr) - prod_err(c, b, pr); }\n"
    "fn div_rn(a: f32, b: f32) -> f32 {\n"
    "  let q0 = a / b;\n"
    "  let q = q0 + resid(a, b, q0) / b;\n"
    "  let qm = bitcast<f32>(bitcast<u32>(q) - 1u);\n"
    "  let qp = bitcast<f32>(bitcast<u32>(q) + 1u);\n"
    "  var best = q;\n"
    "  var rb = abs(resid(a, b, q));\n"
    "  let r1 = abs(resid(a, b, qm));\n"
    "  if (r1 < rb) { best = qm; rb = r1; }\n"
    "  if (abs(resid(a, b, qp)) < rb) { best = qp; }\n"
    "  return best;\n"
    "}\n";

/* round32(i0, xo, yo): elements i0 .. i0+31 of the array `src` (RX when
 * NULL) from xo, rounded as the CPU rounds a mat-vec input of vec_dot_type
 * `type`, into RY from yo (Q8_K: the 256-element block around them sets the
 * scale). ROUND_ACT's body and the tail of RMS_NORM_ROUND. */
static void emit_round32(struct wgllm_strbuf *b, uint32_t type, const char *src) {
    if (type == WGLLM_TYPE_Q8_K || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1)
        wgllm_strbuf_printf(b, "%s", div_rn_wgsl); /* uses round_wgsl's split(): order is free in WGSL */
    struct wgllm_strbuf f = {0};
    emit_round32_text(&f, type);
    if (f.oom) {
        b->oom = true;
        return;
    }
    for (const char *c = f.data; *c; c++) /* the source array's name */
        if (src && !strncmp(c, "RX[", 3)) wgllm_strbuf_printf(b, "%s[", src), c += 2;
        else wgllm_strbuf_printf(b, "%c", *c);
    wgllm_strbuf_free(&f);
    /* the stores into RY (a fused mat-vec's prologue packs them instead:
     * kernels_fused.c); f32(q) * d is the CPU's value of quant q of scale d */
    if (type == WGLLM_TYPE_Q8_K || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1)
        wgllm_strbuf_printf(b, "fn rstore_q(i: u32, q: i32, d: f32) { RY[i] = f32(q) * d; }\n");
    else wgllm_strbuf_printf(b, "fn rstore_f(i: u32, v: f32) { RY[i] = v; }\n");
}

char *wgllm_wgsl_round32(uint32_t type) {
    if (!wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, type)) return NULL;
    struct wgllm_strbuf b = {0};
    if (type == WGLLM_TYPE_Q8_K || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1)
        wgllm_strbuf_printf(&b, "%s", div_rn_wgsl);
    emit_round32_text(&b, type);
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

static void emit_round32_text(struct wgllm_strbuf *b, uint32_t type) {
    wgllm_strbuf_printf(b, "fn round32(i0: u32, xo: u32, yo: u32) {\n");
    if (type == WGLLM_TYPE_Q8_K) /* q8_K_from_float_ref: 256-element blocks scaled by the signed
                                   * value of largest magnitude (the first such), f32 scale */
        wgllm_strbuf_printf(b, "  let b0 = xo + (i0 / 256u) * 256u;\n"
                  "  var amax = 0.0;\n"
                  "  var mx = 0.0;\n"
                  "  for (var j = 0u; j < 256u; j++) {\n"
                  "    let v = RX[b0 + j];\n"
                  "    if (abs(v) > amax) { amax = abs(v); mx = v; }\n"
                  "  }\n"
                  "  if (amax == 0.0) {\n"
                  "    for (var j = 0u; j < 32u; j++) { rstore_q(yo + i0 + j, 0, 0.0); }\n"
                  "    return;\n"
                  "  }\n"
                  "  let iscale = div_rn(-127.0, mx);\n"
                  "  let d = div_rn(1.0, iscale);\n"
                  /* through i32: a quant of -0.0 is 0, and d * 0 keeps d's sign as the CPU's does */
                  "  for (var j = 0u; j < 32u; j++) { rstore_q(yo + i0 + j, min(127, i32(round(iscale * RX[xo + i0 + j]))), d); }\n"
                  "}\n");
    else if (type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1) /* WGSL's round() is half-to-even, like the CPU's
        quantizer; Q8_1's values are Q8_0's (its sum field only enters the CPU's dot) */
        wgllm_strbuf_printf(b, "  var amax = 0.0;\n"
                  "  for (var j = 0u; j < 32u; j++) { amax = max(amax, abs(RX[xo + i0 + j])); }\n"
                  "  let d = to_f16(div_rn(amax, 127.0));\n"
                  "  var id = 0.0;\n"
                  "  if (amax != 0.0) { id = div_rn(127.0, amax); }\n"
                  /* through i32 as the CPU's int8: no -0.0 */
                  "  for (var j = 0u; j < 32u; j++) { rstore_q(yo + i0 + j, i32(round(RX[xo + i0 + j] * id)), d); }\n"
                  "}\n");
    else if (type == WGLLM_TYPE_BF16) /* wgllm_fp32_to_bf16: half to even, NaN kept quiet */
        wgllm_strbuf_printf(b, "  for (var j = 0u; j < 32u && i0 + j < p.n; j++) {\n"
                  "    let u = bitcast<u32>(RX[xo + i0 + j]);\n"
                  "    var r = ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) << 16u;\n"
                  "    if ((u & 0x7fffffffu) > 0x7f800000u) { r = ((u >> 16u) | 64u) << 16u; }\n"
                  "    rstore_f(yo + i0 + j, bitcast<f32>(r));\n"
                  "  }\n"
                  "}\n");
    else
        wgllm_strbuf_printf(b, "  for (var j = 0u; j < 32u && i0 + j < p.n; j++) { rstore_f(yo + i0 + j, to_f16(RX[xo + i0 + j])); }\n"
                  "}\n");
}

static void gen_round_act(struct wgllm_strbuf *b, const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *t) {
    wgllm_strbuf_printf(b, "const WGE: u32 = %uu;\n%s", t->wg_elem, round_wgsl);
    emit_round32(b, key->type, NULL);
    wgllm_strbuf_printf(b, "@group(0) @binding(1) var<storage, read> RX: array<f32>;\n"
              "@group(0) @binding(2) var<storage, read_write> RY: array<f32>;\n"
              "@compute @workgroup_size(WGE)\n"
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
              "  let i0 = gid.x * 32u;\n"
              "  if (i0 >= p.n) { return; }\n"
              "  round32(i0, p.a, p.c);\n"
              "}\n");
}

/* ---- mat-mat (prefill) ------------------------------------------------------ */

/* The dequantisation of one "unit" of a 32-element block into the weight
 * tile WS, which is stored transposed (WS[kk * TN + row]) so that the
 * threads of a row group read consecutive words in the inner loop. A unit
 * is what one u32 of quants holds: Q8_0 4 elements, Q4_0 8 (4 low nibbles
 * at i.., 4 high at i+16..); F32/F16 use units of 4 elements. UPB units per
 * block. wunit(rb, blk, u, kk, row): block blk of the row at rb, unit u,
 * the block's first element at tile column kk. */
static uint32_t emit_mm_unit(struct wgllm_strbuf *b, uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_F32:
    case WGLLM_TYPE_F16:
    case WGLLM_TYPE_BF16:
        wgllm_strbuf_printf(b, "fn wunit(rb: u32, blk: u32, u: u32, kk: u32, row: u32) {\n"
                  "  let e = blk * 32u + 4u * u;\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    var v = 0.0;\n"
                  "    if (e + t < p.k) { v = wget(rb, e + t); }\n"
                  "    WS[(kk + 4u * u + t) * TN + row] = v;\n"
                  "  }\n"
                  "}\n");
        return 8;
    case WGLLM_TYPE_Q8_0:
        wgllm_strbuf_printf(b, "fn wunit(rb: u32, blk: u32, u: u32, kk: u32, row: u32) {\n"
                  "  let o = rb + blk * 34u;\n"
                  "  let d = f16at(o);\n"
                  "  let q = ld32(o + 2u + 4u * u);\n"
                  "  let c = kk + 4u * u;\n"
                  "  WS[c * TN + row] = d * sx8(q);\n"
                  "  WS[(c + 1u) * TN + row] = d * sx8(q >> 8u);\n"
                  "  WS[(c + 2u) * TN + row] = d * sx8(q >> 16u);\n"
                  "  WS[(c + 3u) * TN + row] = d * sx8(q >> 24u);\n"
                  "}\n");
        return 8;
    case WGLLM_TYPE_Q4_0:
        wgllm_strbuf_printf(b, "fn wunit(rb: u32, blk: u32, u: u32, kk: u32, row: u32) {\n"
                  "  let o = rb + blk * 18u;\n"
                  "  let d = f16at(o);\n"
                  "  let q = ld32(o + 2u + 4u * u);\n"
                  "  for (var t = 0u; t < 4u; t++) {\n"
                  "    let bt = (q >> (8u * t)) & 0xffu;\n"
                  "    let c = kk + 4u * u + t;\n"
                  "    WS[c * TN + row] = d * (f32(bt & 15u) - 8.0);\n"
                  "    WS[(c + 16u) * TN + row] = d * (f32(bt >> 4u) - 8.0);\n"
                  "  }\n"
                  "}\n");
        return 4;
    default: /* a w8 format: units of 8 consecutive elements */
        wgllm_strbuf_printf(b, "fn wunit(rb: u32, blk: u32, u: u32, kk: u32, row: u32) {\n"
                  "  let v = w8(rb, blk, u);\n"
                  "  for (var t = 0u; t < 8u; t++) { WS[(kk + 8u * u + t) * TN + row] = v[t]; }\n"
                  "}\n");
        return 4;
    }
}

/* Per K chunk: all threads dequantise the TN x TK weight tile (units spread
 * over the threads) and load the TM x TK tile of X, zeros past the edges;
 * barrier; each thread accumulates its RN x RM outputs from workgroup memory
 * (rows tr + i*(TN/RN), tokens tt + j*(TM/RM): neighbouring threads take
 * neighbouring rows); barrier. Rows past n and tokens past h are never
 * written. */
/* Block blk (32 elements) of the row at rb, dequantised into registers. */
static void emit_mm_block(struct wgllm_strbuf *b, uint32_t type) {
    wgllm_strbuf_printf(b, "fn wblock(rb: u32, blk: u32) -> array<f32, 32> {\n"
              "  var v: array<f32, 32>;\n");
    switch (type) {
    case WGLLM_TYPE_F32:
    case WGLLM_TYPE_F16:
    case WGLLM_TYPE_BF16:
        wgllm_strbuf_printf(b, "  for (var e = 0u; e < 32u; e++) {\n"
                  "    v[e] = 0.0;\n"
                  "    if (blk * 32u + e < p.k) { v[e] = wget(rb, blk * 32u + e); }\n"
                  "  }\n");
        break;
    case WGLLM_TYPE_Q8_0:
        wgllm_strbuf_printf(b, "  let o = rb + blk * 34u;\n"
                  "  let d = f16at(o);\n"
                  "  for (var j = 0u; j < 8u; j++) {\n"
                  "    let q = ld32(o + 2u + 4u * j);\n"
                  "    v[4u * j] = d * sx8(q);\n"
                  "    v[4u * j + 1u] = d * sx8(q >> 8u);\n"
                  "    v[4u * j + 2u] = d * sx8(q >> 16u);\n"
                  "    v[4u * j + 3u] = d * sx8(q >> 24u);\n"
                  "  }\n");
        break;
    case WGLLM_TYPE_Q4_0:
        wgllm_strbuf_printf(b, "  let o = rb + blk * 18u;\n"
                  "  let d = f16at(o);\n"
                  "  for (var j = 0u; j < 4u; j++) {\n"
                  "    let q = ld32(o + 2u + 4u * j);\n"
                  "    for (var t = 0u; t < 4u; t++) {\n"
                  "      let bt = (q >> (8u * t)) & 0xffu;\n"
                  "      v[4u * j + t] = d * (f32(bt & 15u) - 8.0);\n"
                  "      v[4u * j + t + 16u] = d * (f32(bt >> 4u) - 8.0);\n"
                  "    }\n"
                  "  }\n");
        break;
    default: /* a w8 format */
        wgllm_strbuf_printf(b, "  for (var u = 0u; u < 4u; u++) {\n"
                  "    let w = w8(rb, blk, u);\n"
                  "    for (var t = 0u; t < 8u; t++) { v[8u * u + t] = w[t]; }\n"
                  "  }\n");
        break;
    }
    wgllm_strbuf_printf(b, "  return v;\n}\n");
}

/* The two mat-mat kernels' shared WGSL (printf formats: %% is %): the entry
 * point with each thread's rows (tr + i*GN) and tokens (tt + j*TM/RM) of the
 * TN x TM tile and its accumulators; and the store of the accumulators. */
#define MM_MAIN_HEAD                                                                              \
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n" \
    "  let tl = tile(wid);\n"                                                                      \
    "  let r0 = tl.x;\n"                                                                           \
    "  let t0 = wid.y * TM;\n"                                                                     \
    "%s"                                                                                           \
    "  if (t0 >= nt) { return; }\n"                                                                \
    "  let tr = tid %% GN;\n"                                                                      \
    "  let tt = tid / GN;\n"                                                                       \
    "  var acc: array<f32, RN * RM>;\n"                                                            \
    "  for (var i = 0u; i < RN * RM; i++) { acc[i] = 0.0; }\n"                                     \
    "  let nblk = (p.k + 31u) / 32u;\n"
#define MM_STORE                                                                                  \
    "  for (var j = 0u; j < RM; j++) {\n"                                                          \
    "    let tok = t0 + tt + j * (TM / RM);\n"                                                     \
    "    if (tok >= nt) { continue; }\n"                                                           \
    "    for (var i = 0u; i < RN; i++) {\n"                                                        \
    "      let r = r0 + tr + i * GN;\n"                                                           \
    "      if (r < p.n) { put(yat(tok) + r, acc[j * RN + i]); }\n"                                  \
    "    }\n"                                                                                      \
    "  }\n"                                                                                        \
    "}\n"

/* MATMUL's map of a tile to its weight rows and tokens (the interface
 * wgllm_wgsl_mm takes, kernels.h): every token of the batch in order. */
static const char *mm_dense_map =
    "fn tile(wid: vec3<u32>) -> vec2<u32> { return vec2<u32>(wid.x * TN, p.h); }\n"
    "fn wrow(r: u32) -> u32 { return row_base(r); }\n"
    "fn xat(t: u32) -> u32 { return p.b + t * p.k; }\n"
    "fn yat(t: u32) -> u32 { return p.c + t * p.n; }\n";

/* The shared-memory-free mat-mat: the same thread -> (rows, tokens) map as
 * below, each weight block dequantised once per thread and used for all of
 * its RM tokens straight from storage. */
static void gen_matmul_direct(struct wgllm_strbuf *b, uint32_t type, const struct wgllm_wgsl_tune *t, const char *map) {
    wgllm_strbuf_printf(b, "const TN: u32 = %uu;\nconst TM: u32 = %uu;\nconst RN: u32 = %uu;\nconst RM: u32 = %uu;\n", t->mm_tile_n,
           t->mm_tile_m, t->mm_micro_n, t->mm_micro_m);
    wgllm_strbuf_printf(b, "const GN: u32 = TN / RN;\nconst NT: u32 = GN * (TM / RM);\n");
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n%s%s", tanh_wgsl, epi_wgsl);
    emit_format(b, type, false);
    emit_mm_block(b, type);
    wgllm_strbuf_printf(b, "%s@compute @workgroup_size(NT)\n"
              MM_MAIN_HEAD
              "  if (t0 + tt >= nt) { return; }\n" /* no token of this thread (no barriers here) */
              "  var xr: array<u32, RM>;\n" /* the tokens' x rows, looked up once */
              "  for (var j = 0u; j < RM; j++) {\n"
              "    let tok = t0 + tt + j * (TM / RM);\n"
              "    if (tok < nt) { xr[j] = xat(tok); }\n"
              "  }\n"
              "  for (var i = 0u; i < RN; i++) {\n"
              "    let r = r0 + tr + i * GN;\n"
              "    if (r >= p.n) { continue; }\n"
              "    let rb = wrow(r);\n"
              "    for (var blk = 0u; blk < nblk; blk++) {\n"
              "      let wv = wblock(rb, blk);\n"
              "      for (var j = 0u; j < RM; j++) {\n"
              "        let tok = t0 + tt + j * (TM / RM);\n"
              "        if (tok >= nt) { continue; }\n"
              "        let xb = xr[j] + blk * 32u;\n"
              "        var s = 0.0;\n"
              "        let ne = min(32u, p.k - blk * 32u);\n" /* a partial last block: F32/F16 rows only */
              "        for (var e = 0u; e < ne; e++) { s += wv[e] * X[xb + e]; }\n"
              "        acc[j * RN + i] += s;\n"
              "      }\n"
              "    }\n"
              "  }\n"
              MM_STORE, map, "  let nt = tl.y;\n");
}

/* The tiled mat-mat. A tile past the last token returns at once (MATMUL_ID's
 * tiles of experts with few tokens): its count goes through workgroup
 * memory (XS[0], overwritten after; Tint makes workgroupUniformLoad a
 * barrier, the load, a barrier) so that the return is uniform and the
 * barriers after it stay valid. A thread whose tokens are all past the
 * count only helps load the tiles (an expert's tile of a few tokens costs
 * about the sums of those tokens). */
static void gen_matmul_tiled(struct wgllm_strbuf *b, uint32_t type, const struct wgllm_wgsl_tune *t, const char *map) {
    wgllm_strbuf_printf(b, "const TN: u32 = %uu;\nconst TM: u32 = %uu;\nconst TK: u32 = %uu;\nconst RN: u32 = %uu;\nconst RM: u32 = %uu;\n",
           t->mm_tile_n, t->mm_tile_m, t->mm_tile_k, t->mm_micro_n, t->mm_micro_m);
    wgllm_strbuf_printf(b, "const GN: u32 = TN / RN;\nconst NT: u32 = GN * (TM / RM);\nconst NB: u32 = TK / 32u;\n");
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "var<workgroup> WS: array<f32, TN * TK>;\n"
              "var<workgroup> XS: array<f32, TM * TK>;\n%s%s", tanh_wgsl, epi_wgsl);
    emit_format(b, type, false);
    const uint32_t upb = emit_mm_unit(b, type);
    wgllm_strbuf_printf(b, "const UPB: u32 = %uu;\n", upb);
    wgllm_strbuf_printf(b, "%s@compute @workgroup_size(NT)\n"
              MM_MAIN_HEAD
              "  for (var k0 = 0u; k0 < p.k; k0 += TK) {\n"
              "    let b0 = k0 / 32u;\n"
              "    for (var w = tid; w < TN * NB * UPB; w += NT) {\n"
              "      let row = w / (NB * UPB);\n"
              "      let bi = (w / UPB) %% NB;\n"
              "      let u = w %% UPB;\n"
              "      let r = r0 + row;\n"
              "      if (r < p.n && b0 + bi < nblk) {\n"
              "        wunit(wrow(r), b0 + bi, u, bi * 32u, row);\n"
              "      } else {\n"
              "        for (var e = 0u; e < 32u / UPB; e++) { WS[(bi * 32u + u * (32u / UPB) + e) * TN + row] = 0.0; }\n"
              "      }\n"
              "    }\n"
              "    for (var x = tid; x < TM * TK; x += NT) {\n"
              "      let tok = x / TK;\n"
              "      let kk = x %% TK;\n"
              "      var v = 0.0;\n"
              "      if (t0 + tok < nt && k0 + kk < p.k) { v = X[xat(t0 + tok) + k0 + kk]; }\n"
              "      XS[kk * TM + tok] = v;\n"
              "    }\n"
              "    workgroupBarrier();\n"
              "    if (t0 + tt < nt) {\n" /* else no token of this thread: no sums */
              "      for (var kk = 0u; kk < TK; kk++) {\n"
              "        var wv: array<f32, RN>;\n"
              "        for (var i = 0u; i < RN; i++) { wv[i] = WS[kk * TN + tr + i * GN]; }\n"
              "        for (var j = 0u; j < RM; j++) {\n"
              "          let xv = XS[kk * TM + tt + j * (TM / RM)];\n"
              "          for (var i = 0u; i < RN; i++) { acc[j * RN + i] += wv[i] * xv; }\n"
              "        }\n"
              "      }\n"
              "    }\n"
              "    workgroupBarrier();\n"
              "  }\n"
              MM_STORE, map,
              "  if (tid == 0u) { XS[0] = f32(tl.y); }\n"
              "  let nt = u32(workgroupUniformLoad(&XS[0]));\n");
}

/* The mat-mat split along K (tune mm_split_k): thread tid takes blocks
 * tid, tid + NT, ... of each of the tile's rows, dequantised once into
 * registers for all of the tile's tokens; then one subgroupAdd per output,
 * the subgroups' partials in workgroup memory (subgroups taken to be
 * consecutive ranges of the workgroup, as in the subgroup mat-vec; the
 * tuner checks every candidate's results anyway), one barrier, and the
 * first V threads sum them. The token count goes through workgroup memory
 * (workgroupUniformLoad) so that the early return and the subgroupAdds stay
 * in uniform control flow. */
static void gen_matmul_split_k(struct wgllm_strbuf *b, uint32_t type, const struct wgllm_wgsl_tune *t, const char *map) {
    wgllm_strbuf_printf(b, "const TN: u32 = %uu;\nconst TM: u32 = %uu;\nconst NT: u32 = %uu;\nconst V: u32 = TN * TM;\n",
                        t->mm_tile_n, t->mm_tile_m, t->mm_split_k);
    wgllm_strbuf_printf(b, "@group(0) @binding(2) var<storage, read> X: array<f32>;\n"
              "@group(0) @binding(3) var<storage, read_write> Y: array<f32>;\n"
              "var<workgroup> red: array<f32, (NT / 4u) * V>;\n" /* subgroups have at least 4 invocations */
              "var<workgroup> ntok: u32;\n%s%s", tanh_wgsl, epi_wgsl);
    emit_format(b, type, false);
    emit_mm_block(b, type);
    wgllm_strbuf_printf(b, "%s@compute @workgroup_size(NT)\n"
              "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32,\n"
              "        @builtin(subgroup_invocation_id) sli: u32, @builtin(subgroup_size) sgs: u32) {\n"
              "  let tl = tile(wid);\n"
              "  let r0 = tl.x;\n"
              "  let t0 = wid.y * TM;\n"
              "  if (tid == 0u) { ntok = tl.y; }\n"
              "  let nt = workgroupUniformLoad(&ntok);\n"
              "  if (t0 >= nt) { return; }\n"
              "  var acc: array<f32, V>;\n"
              "  for (var v = 0u; v < V; v++) { acc[v] = 0.0; }\n"
              "  let nblk = (p.k + 31u) / 32u;\n"
              "  var xr: array<u32, TM>;\n" /* the tokens' x rows, looked up once */
              "  for (var j = 0u; j < TM; j++) {\n"
              "    if (t0 + j < nt) { xr[j] = xat(t0 + j); }\n"
              "  }\n"
              "  for (var i = 0u; i < TN; i++) {\n"
              "    let r = r0 + i;\n"
              "    if (r >= p.n) { break; }\n"
              "    let rb = wrow(r);\n"
              "    for (var blk = tid; blk < nblk; blk += NT) {\n"
              "      let wv = wblock(rb, blk);\n"
              "      let ne = min(32u, p.k - blk * 32u);\n" /* a partial last block: F32/F16 rows only */
              "      for (var j = 0u; j < TM; j++) {\n"
              "        if (t0 + j >= nt) { break; }\n"
              "        let xb = xr[j] + blk * 32u;\n"
              "        var s = 0.0;\n"
              "        for (var e = 0u; e < ne; e++) { s += wv[e] * X[xb + e]; }\n"
              "        acc[j * TN + i] += s;\n"
              "      }\n"
              "    }\n"
              "  }\n"
              "  let sg = tid / sgs;\n"
              "  for (var v = 0u; v < V; v++) {\n"
              "    let s = subgroupAdd(acc[v]);\n"
              "    if (sli == 0u) { red[sg * V + v] = s; }\n"
              "  }\n"
              "  workgroupBarrier();\n"
              "  let nsg = (NT + sgs - 1u) / sgs;\n"
              "  for (var v = tid; v < V; v += NT) {\n"
              "    let r = r0 + v %% TN;\n"
              "    let tok = t0 + v / TN;\n"
              "    if (r < p.n && tok < nt) {\n"
              "      var tot = 0.0;\n"
              "      for (var g = 0u; g < nsg; g++) { tot += red[g * V + v]; }\n"
              "      put(yat(tok) + r, tot);\n"
              "    }\n"
              "  }\n"
              "}\n", map);
}

/* A mat-mat with the tile map `map` (kernels.h, wgllm_wgsl_mm) over the
 * weight format's one dequant routine: MATMUL's, and MATMUL_ID's
 * (kernels_moe.c). */
static void gen_mm(struct wgllm_strbuf *b, uint32_t type, const struct wgllm_wgsl_tune *t, const char *map) {
    if (t->mm_split_k) gen_matmul_split_k(b, type, t, map);
    else if (t->mm_direct) gen_matmul_direct(b, type, t, map);
    else gen_matmul_tiled(b, type, t, map);
}

static bool pow2(uint32_t v) { return v && !(v & (v - 1)); }

bool wgllm_wgsl_tune_valid(const struct wgllm_wgsl_tune *t, uint32_t max_invocations, uint32_t max_wg_storage,
                           char *why, size_t why_cap) {
#define BAD(...)                                    \
    do {                                            \
        if (why) snprintf(why, why_cap, __VA_ARGS__); \
        return false;                               \
    } while (0)
    if (!pow2(t->wg_matvec) || !pow2(t->wg_row) || !pow2(t->wg_attn)) BAD("wg_matvec, wg_row and wg_attn must be powers of two");
    if (!t->rows_matvec || !t->wg_elem || !t->attn_max_dims) BAD("rows_matvec, wg_elem and attn_max_dims must be > 0");
    if (t->matvec_subgroups && t->matvec_thread_rows) BAD("matvec_subgroups and matvec_thread_rows exclude each other");
    const uint32_t mv_threads = t->matvec_thread_rows ? t->rows_matvec : t->wg_matvec;
    if (mv_threads > max_invocations || t->wg_row > max_invocations || t->wg_elem > max_invocations ||
        t->wg_attn > max_invocations)
        BAD("a workgroup size is over the adapter's %u invocations", max_invocations);
    if (!t->mm_micro_n || !t->mm_micro_m || !t->mm_tile_n || !t->mm_tile_m) BAD("mat-mat tiles must be > 0");
    if (t->mm_split_k) { /* the split-K mat-mat: its own threads and workgroup memory */
        if (!pow2(t->mm_split_k) || t->mm_split_k < 4) BAD("mm_split_k %u is not a power of two >= 4", t->mm_split_k);
        if (t->mm_direct) BAD("mm_split_k and mm_direct exclude each other");
        if (t->mm_split_k > max_invocations) BAD("mm_split_k %u is over the adapter's %u invocations", t->mm_split_k, max_invocations);
        if ((uint64_t)t->mm_tile_n * t->mm_tile_m > 64) BAD("split-K mat-mat tile %ux%u is over 64 outputs", t->mm_tile_n, t->mm_tile_m);
        const uint64_t sk_bytes = (uint64_t)(t->mm_split_k / 4) * t->mm_tile_n * t->mm_tile_m * 4 + 4;
        if (sk_bytes > max_wg_storage) BAD("split-K mat-mat needs %llu bytes of workgroup memory, over %u", (unsigned long long)sk_bytes, max_wg_storage);
    } else {
        if (t->mm_tile_k == 0 || t->mm_tile_k % 32) BAD("mm_tile_k %u is not a multiple of 32", t->mm_tile_k);
        if (t->mm_tile_n % t->mm_micro_n || t->mm_tile_m % t->mm_micro_m)
            BAD("mat-mat tile %ux%u is not a multiple of the micro tile %ux%u", t->mm_tile_n, t->mm_tile_m, t->mm_micro_n,
                t->mm_micro_m);
        if ((uint64_t)t->mm_micro_n * t->mm_micro_m > 64) BAD("mat-mat micro tile %ux%u is over 64 registers", t->mm_micro_n, t->mm_micro_m);
        const uint64_t mm_threads = (uint64_t)(t->mm_tile_n / t->mm_micro_n) * (t->mm_tile_m / t->mm_micro_m);
        if (mm_threads > max_invocations) BAD("mat-mat needs %llu threads, over %u", (unsigned long long)mm_threads, max_invocations);
        const uint64_t mm_bytes = t->mm_direct ? 0 : (uint64_t)(t->mm_tile_n + t->mm_tile_m) * t->mm_tile_k * 4;
        if (mm_bytes > max_wg_storage) BAD("mat-mat needs %llu bytes of workgroup memory, over %u", (unsigned long long)mm_bytes, max_wg_storage);
    }
    /* ATTN_BATCH: q (wg_attn * attn_max_dims floats), four per-thread arrays, two words */
    const uint64_t attn_bytes = ((uint64_t)t->wg_attn * t->attn_max_dims + 4u * t->wg_attn + 2u) * 4;
    if (attn_bytes > max_wg_storage) BAD("attention needs %llu bytes of workgroup memory, over %u", (unsigned long long)attn_bytes, max_wg_storage);
    return true;
#undef BAD
}

char *wgllm_wgsl_generate(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune) {
    if (!tune) tune = &default_tune;
    if (!wgllm_wgsl_supports(key->kernel, key->type)) return NULL;
    struct wgllm_strbuf b = {0};
    wgllm_strbuf_printf(&b, "// wgllm %s (%s)\n", wgllm_wgsl_kernel_name(key->kernel), wgllm_type_name(key->type));
    const bool mv = key->kernel == WGLLM_KERNEL_MATVEC || key->kernel == WGLLM_KERNEL_MATVEC_ID ||
                    key->kernel == WGLLM_KERNEL_MATVEC_QKV || key->kernel == WGLLM_KERNEL_MATVEC_SWIGLU ||
                    key->kernel == WGLLM_KERNEL_MATVEC_GEGLU;
    const bool mm = key->kernel == WGLLM_KERNEL_MATMUL || key->kernel == WGLLM_KERNEL_MATMUL_ID;
    if ((mv && tune->matvec_subgroups && !tune->matvec_thread_rows) || (mm && tune->mm_split_k))
        wgllm_strbuf_printf(&b, "enable subgroups;\n"); /* directives come before every declaration */
    wgllm_strbuf_printf(&b, "%s", params_wgsl);
    switch (key->kernel) {
    case WGLLM_KERNEL_MATVEC: /* with a prologue: kernels_fused.c's */
        if (!key->pro) gen_matvec(&b, key, tune);
        else { char *body = wgllm_wgsl_fused_body(key, tune); if (body) wgllm_strbuf_printf(&b, "%s", body); else b.oom = true; free(body); }
        break;
    case WGLLM_KERNEL_GET_ROWS: gen_get_rows(&b, key, tune); break;
    case WGLLM_KERNEL_RMS_NORM:
    case WGLLM_KERNEL_RMS_NORM_ROUND: gen_rms_norm(&b, key, tune); break;
    case WGLLM_KERNEL_ROPE: gen_rope(&b, key, tune); break;
    case WGLLM_KERNEL_SWIGLU: gen_swiglu(&b, tune); break;
    case WGLLM_KERNEL_GEGLU: gen_geglu(&b, tune); break;
    case WGLLM_KERNEL_ARGMAX: gen_argmax(&b, tune); break;
    case WGLLM_KERNEL_ROUND_ACT: gen_round_act(&b, key, tune); break;
    case WGLLM_KERNEL_MATMUL: gen_mm(&b, key->type, tune, mm_dense_map); break;
    case WGLLM_KERNEL_MATVEC_ID:
    case WGLLM_KERNEL_MOE_ROUTE:
    case WGLLM_KERNEL_MOE_SUM:
    case WGLLM_KERNEL_MOE_BIAS:
    case WGLLM_KERNEL_MOE_GLU_OAI:
    case WGLLM_KERNEL_MOE_BUCKET:
    case WGLLM_KERNEL_MATMUL_ID: { char *body = wgllm_wgsl_moe_body(key, tune); if (body) wgllm_strbuf_printf(&b, "%s", body); else b.oom = true; free(body); } break;
    case WGLLM_KERNEL_MATVEC_QKV:
    case WGLLM_KERNEL_MATVEC_SWIGLU:
    case WGLLM_KERNEL_MATVEC_GEGLU:
    case WGLLM_KERNEL_ROPE_STORE: { char *body = wgllm_wgsl_fused_body(key, tune); if (body) wgllm_strbuf_printf(&b, "%s", body); else b.oom = true; free(body); } break;
    default: { char *body = wgllm_wgsl_batch_body(key, tune); if (body) wgllm_strbuf_printf(&b, "%s", body); else b.oom = true; free(body); } break;
    }
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

const char *wgllm_wgsl_f16_helpers(void) { return round_wgsl; }
const char *wgllm_wgsl_epi_helper(void) { return epi_wgsl; }
const char *wgllm_wgsl_tanh_helper(void) { return tanh_wgsl; }
const char *wgllm_wgsl_gelu_helper(void) { return gelu_wgsl; }

char *wgllm_wgsl_format(uint32_t type, bool with_dot) {
    struct wgllm_strbuf b = {0};
    if (!weight_type_ok(type) || !emit_format(&b, type, with_dot) || b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

char *wgllm_wgsl_mm(uint32_t type, const struct wgllm_wgsl_tune *tune, const char *map) {
    struct wgllm_strbuf b = {0};
    if (!weight_type_ok(type)) return NULL;
    gen_mm(&b, type, tune, map);
    if (b.oom) {
        wgllm_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}
