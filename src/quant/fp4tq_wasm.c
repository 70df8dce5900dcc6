/*
 * fp4tq_wasm.c - WebAssembly SIMD128 dots of MXFP4, NVFP4 and Q1_0 (with Q8_0) and
 * TQ1_0 / TQ2_0 (with Q8_K), for the browser build (emcc -msimd128).
 *
 * Bit-exactness, as quant_wasm.c: the browser must give the native portable
 * build's tokens, so each block's integer sum is formed with SIMD (exact)
 * and the blocks are added in the scalar reference's order with its float
 * expression (wasm has no fused multiply-add). MXFP4's table lookup is a
 * byte swizzle; the ternary trits are decoded in 16-bit lanes (SIMD128 has
 * no byte multiply): TQ1_0's trit k of byte q is ((q * 3^k) & 255) * 3 >> 8.
 *
 * Compiled only where __wasm_simd128__ is defined (the native Makefile
 * compiles this file to nothing).
 */
#include "quant/fp4tq.h"

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>

#define FP16(h) wgllm_fp16_lookup(h)
#define QK_K WGLLM_QK_K

/* Sum of a[i] * b[i] over 16 int8 pairs, in 4 int32 lanes. */
static inline v128_t dot_i8(v128_t a, v128_t b) {
    const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b));
    const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b));
    return wasm_i32x4_add(lo, hi);
}

static inline int32_t hsum_i32(v128_t p) {
    return wasm_i32x4_extract_lane(p, 0) + wasm_i32x4_extract_lane(p, 1) + wasm_i32x4_extract_lane(p, 2) +
           wasm_i32x4_extract_lane(p, 3);
}

/* sum(y) of a Q8_K block (its 16 partial sums) */
static inline int32_t q8k_sum(const wgllm_block_q8_K *y) {
    const v128_t a = wasm_v128_load(y->bsums), b = wasm_v128_load(y->bsums + 8);
    const v128_t one = wasm_i16x8_splat(1);
    return hsum_i32(wasm_i32x4_add(wasm_i32x4_dot_i16x8(a, one), wasm_i32x4_dot_i16x8(b, one)));
}

/* ---- MXFP4 ------------------------------------------------------------- */

static void vec_dot_mxfp4_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_mxfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const v128_t table = wasm_v128_load(wgllm_kvalues_mxfp4);
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_MXFP4; i++) {
        const v128_t q = wasm_v128_load(x[i].qs);
        const v128_t lo = wasm_i8x16_swizzle(table, wasm_v128_and(q, wasm_i8x16_splat(0x0F)));
        const v128_t hi = wasm_i8x16_swizzle(table, wasm_u8x16_shr(q, 4));
        const int32_t sumi = hsum_i32(wasm_i32x4_add(dot_i8(lo, wasm_v128_load(y[i].qs)),
                                                     dot_i8(hi, wasm_v128_load(y[i].qs + 16))));
        const float d = FP16(y[i].d) * wgllm_e8m0_half(x[i].e);
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

/* ---- NVFP4 ------------------------------------------------------------- */

/* Per 16-element sub-block an exact integer, then the reference's float
 * term FP16(d_y) * d_s * sumi, sub-block after sub-block. */
static void vec_dot_nvfp4_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_nvfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const v128_t table = wasm_v128_load(wgllm_kvalues_mxfp4);
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++)
        for (int p = 0; p < 2; p++) { /* sub-blocks 2p, 2p + 1: one Q8_0 block */
            const v128_t q = wasm_v128_load(x[i].qs + 16 * p);
            const v128_t lo = wasm_i8x16_swizzle(table, wasm_v128_and(q, wasm_i8x16_splat(0x0F)));
            const v128_t hi = wasm_i8x16_swizzle(table, wasm_u8x16_shr(q, 4));
            const wgllm_block_q8_0 *yb = &y[2 * i + p];
            for (int h = 0; h < 2; h++) {
                /* elements of sub-block 2p + h: lo[8h..8h+7] then hi[8h..8h+7] */
                const v128_t v = h ? wasm_i64x2_shuffle(lo, hi, 1, 3) : wasm_i64x2_shuffle(lo, hi, 0, 2);
                const int32_t sumi = hsum_i32(dot_i8(v, wasm_v128_load(yb->qs + 16 * h)));
                sumf += FP16(yb->d) * wgllm_ue4m3_half(x[i].d[2 * p + h]) * (float)sumi;
            }
        }
    *s = sumf;
}

/* ---- Q1_0 -------------------------------------------------------------- */

/* sum of +-y over one Q8_0 sub-block: byte b of the 4 bit bytes spread over
 * elements 8b..8b+7, each lane testing its bit, y negated where clear */
static inline int32_t q1_0_sub(const uint8_t *bits, const int8_t *yq) {
    uint32_t b4;
    memcpy(&b4, bits, 4);
    const v128_t w = wasm_i32x4_splat((int32_t)b4);
    const v128_t bit = wasm_i8x16_make(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const v128_t s0 = wasm_i8x16_make(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const v128_t s1 = wasm_i8x16_make(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    v128_t acc = wasm_i32x4_splat(0);
    for (int h = 0; h < 2; h++) {
        const v128_t clear = wasm_i8x16_eq(wasm_v128_and(wasm_i8x16_swizzle(w, h ? s1 : s0), bit), wasm_i8x16_splat(0));
        const v128_t yv = wasm_v128_load(yq + 16 * h);
        const v128_t sy = wasm_i8x16_sub(wasm_v128_xor(yv, clear), clear);
        acc = wasm_i32x4_add(acc, wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_extadd_pairwise_i8x16(sy)));
    }
    return hsum_i32(acc);
}

static void vec_dot_q1_0_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q1_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK1_0; i++) {
        float sumi = 0;
        for (int k = 0; k < 4; k++) sumi += FP16(y[4 * i + k].d) * (float)q1_0_sub(x[i].qs + 4 * k, y[4 * i + k].qs);
        sumf += FP16(x[i].d) * sumi;
    }
    *s = sumf;
}

/* ---- TQ2_0 ------------------------------------------------------------- */

static void vec_dot_tq2_0_q8_K_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq2_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    const v128_t m3 = wasm_i8x16_splat(3);
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        v128_t acc = wasm_i32x4_splat(0);
        /* 16 bytes at 32h + 16g: elements 128h + 32l + 16g + m in bits 2l */
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 2; g++) {
                const v128_t q = wasm_v128_load(x[i].qs + 32 * h + 16 * g);
                for (int l = 0; l < 4; l++) {
                    const v128_t t = wasm_v128_and(wasm_u8x16_shr(q, 2 * l), m3);
                    acc = wasm_i32x4_add(acc, dot_i8(t, wasm_v128_load(y[i].qs + 128 * h + 32 * l + 16 * g)));
                }
            }
        const int sumi = hsum_i32(acc) - q8k_sum(&y[i]);
        sumf += (float)sumi * (y[i].d * FP16(x[i].d));
    }
    *s = sumf;
}

/* ---- TQ1_0 ------------------------------------------------------------- */

/* Eight trits (as int16) of eight bytes (u16 lanes) times their multipliers. */
static inline v128_t tq1_trits(v128_t q16, v128_t p) {
    const v128_t r = wasm_v128_and(wasm_i16x8_mul(q16, p), wasm_i16x8_splat(0xFF));
    return wasm_u16x8_shr(wasm_i16x8_mul(r, wasm_i16x8_splat(3)), 8);
}

/* trits . y for 16 bytes b (u8) with multipliers plo (bytes 0..7), phi (8..15)
 * against 16 int8 activations */
static inline v128_t tq1_dot16(v128_t b, v128_t plo, v128_t phi, const int8_t *yq) {
    const v128_t yv = wasm_v128_load(yq);
    return wasm_i32x4_add(
        wasm_i32x4_dot_i16x8(tq1_trits(wasm_u16x8_extend_low_u8x16(b), plo), wasm_i16x8_extend_low_i8x16(yv)),
        wasm_i32x4_dot_i16x8(tq1_trits(wasm_u16x8_extend_high_u8x16(b), phi), wasm_i16x8_extend_high_i8x16(yv)));
}

static void vec_dot_tq1_0_q8_K_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq1_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    static const int16_t pow3[5] = {1, 3, 9, 27, 81};
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const v128_t q0 = wasm_v128_load(x[i].qs), q1 = wasm_v128_load(x[i].qs + 16), q2 = wasm_v128_load(x[i].qs + 32);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        v128_t acc = wasm_i32x4_splat(0);
        for (int k = 0; k < 5; k++) {
            const v128_t p = wasm_i16x8_splat(pow3[k]);
            /* elements 32k + m: trit k of qs[m]; 160 + 16k + m: trit k of qs[32 + m] */
            acc = wasm_i32x4_add(acc, tq1_dot16(q0, p, p, y[i].qs + 32 * k));
            acc = wasm_i32x4_add(acc, tq1_dot16(q1, p, p, y[i].qs + 32 * k + 16));
            acc = wasm_i32x4_add(acc, tq1_dot16(q2, p, p, y[i].qs + 160 + 16 * k));
        }
        /* elements 240 + 4k + j: trit k of qh[j] */
        acc = wasm_i32x4_add(acc, tq1_dot16(wasm_i32x4_splat((int32_t)qh), wasm_i16x8_make(1, 1, 1, 1, 3, 3, 3, 3),
                                            wasm_i16x8_make(9, 9, 9, 9, 27, 27, 27, 27), y[i].qs + 240));
        const int sumi = hsum_i32(acc) - q8k_sum(&y[i]);
        sumf += (float)sumi * (FP16(x[i].d) * y[i].d);
    }
    *s = sumf;
}

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_mxfp4_wasm, vec_dot_mxfp4_q8_0_wasm)
WGLLM_VEC_DOT_NR(nr_tq1_0_wasm, vec_dot_tq1_0_q8_K_wasm)
WGLLM_VEC_DOT_NR(nr_tq2_0_wasm, vec_dot_tq2_0_q8_K_wasm)
WGLLM_VEC_DOT_NR(nr_q1_0_wasm, vec_dot_q1_0_q8_0_wasm)
WGLLM_VEC_DOT_NR(nr_nvfp4_wasm, vec_dot_nvfp4_q8_0_wasm)

void wgllm_fp4tq_install_wasm(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_wasm;
    t[WGLLM_TYPE_MXFP4].vec_dot_nr = nr_mxfp4_wasm;
    t[WGLLM_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_wasm;
    t[WGLLM_TYPE_TQ1_0].vec_dot_nr = nr_tq1_0_wasm;
    t[WGLLM_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_wasm;
    t[WGLLM_TYPE_TQ2_0].vec_dot_nr = nr_tq2_0_wasm;
    t[WGLLM_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_wasm;
    t[WGLLM_TYPE_Q1_0].vec_dot_nr = nr_q1_0_wasm;
    t[WGLLM_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_wasm;
    t[WGLLM_TYPE_NVFP4].vec_dot_nr = nr_nvfp4_wasm;
}

#endif
