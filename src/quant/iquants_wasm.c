/*
 * iquants_wasm.c - WebAssembly SIMD128 dots of the grid formats (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M with Q8_K) for the browser
 * build (emcc -msimd128), bit-identical to the scalar reference as the
 * browser must give the native build's tokens: per 32-element group the
 * grid entries (wgllm_iq_raw_group) are loaded as two 16-byte vectors,
 * negated where the sign bits say ((g ^ m) - m, m from a byte swizzle and
 * compare), dotted with the activations in 16-bit lanes into int32 and
 * scaled by the halves' integer scales; the block's integer is exact and
 * its float steps are the reference's (wasm has no fused multiply-add).
 *
 * Compiled only where __wasm_simd128__ is defined (the native Makefile
 * compiles this file to nothing).
 */
#include "quant/iquants.h"

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

/* the 16 signed weights of half h: bytes of g negated where neg's bit is set */
static inline v128_t half_weights(const uint64_t *g, uint32_t neg, int h) {
    const v128_t spread = h ? wasm_i8x16_const(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)
                            : wasm_i8x16_const(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const v128_t bit = wasm_u8x16_const(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    const v128_t m = wasm_i8x16_eq(wasm_v128_and(wasm_i8x16_swizzle(wasm_i32x4_splat((int32_t)neg), spread), bit), bit);
    const v128_t v = wasm_v128_load(g + 2 * h);
    return wasm_i8x16_sub(wasm_v128_xor(v, m), m);
}

static inline uint32_t dneg_bits(unsigned dneg) {
    uint32_t m = 0;
    for (int k = 0; k < 4; k++)
        if ((dneg >> k) & 1) m |= 0xFFu << (8 * k);
    return m;
}

/* the block's integer sum; IQ1_M's offset sum in *sumd */
static inline int32_t isum(uint32_t type, const void *b, const int8_t *q8, int32_t *sumd) {
    static const uint64_t ones[4] = {0x0101010101010101ULL, 0x0101010101010101ULL, 0x0101010101010101ULL,
                                     0x0101010101010101ULL};
    v128_t acc = wasm_i32x4_splat(0), accd = wasm_i32x4_splat(0);
    struct wgllm_iq_raw r;
    for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
        wgllm_iq_raw_group(type, b, ib, &r);
        for (int h = 0; h < 2; h++) {
            const v128_t y = wasm_v128_load(q8 + 16 * h), ls = wasm_i32x4_splat(r.ls[h]);
            acc = wasm_i32x4_add(acc, wasm_i32x4_mul(dot_i8(half_weights(r.g, r.neg, h), y), ls));
            if (type == WGLLM_TYPE_IQ1_M)
                accd = wasm_i32x4_add(accd, wasm_i32x4_mul(dot_i8(half_weights(ones, dneg_bits(r.dneg), h), y), ls));
        }
    }
    *sumd = hsum_i32(accd);
    return hsum_i32(acc);
}

static inline void dot23(uint32_t type, size_t bsize, float mult, int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    int32_t unused;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const void *b = x + (size_t)i * bsize;
        const float d = FP16(*(const wgllm_fp16 *)b) * y[i].d;
        sumf += d * (float)isum(type, b, y[i].qs, &unused);
    }
    *s = mult * sumf;
}

#define DOT23(name, T, blk, mult)                                                                \
    static void name(int64_t n, float *s, const void *x, const void *y) {                        \
        dot23(WGLLM_TYPE_##T, sizeof(blk), mult, n, s, x, y);                                    \
    }
DOT23(iq2_xxs_wasm, IQ2_XXS, wgllm_block_iq2_xxs, 0.125f)
DOT23(iq2_xs_wasm, IQ2_XS, wgllm_block_iq2_xs, 0.125f)
DOT23(iq2_s_wasm, IQ2_S, wgllm_block_iq2_s, 0.125f)
DOT23(iq3_xxs_wasm, IQ3_XXS, wgllm_block_iq3_xxs, 0.25f)
DOT23(iq3_s_wasm, IQ3_S, wgllm_block_iq3_s, 1.0f)

static void iq1_s_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_s *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    int32_t unused;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int32_t sumi = isum(WGLLM_TYPE_IQ1_S, &x[i], y[i].qs, &unused);
        int32_t sumd = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
            sumd += ls * (x[i].qh[ib] & 0x8000 ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sumf += FP16(x[i].d) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

static void iq1_m_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_m *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumd;
        const int32_t sumi = isum(WGLLM_TYPE_IQ1_M, &x[i], y[i].qs, &sumd);
        sumf += FP16(wgllm_iq1m_scale(&x[i])) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

WGLLM_VEC_DOT_NR(nr_iq2_xxs, iq2_xxs_wasm)
WGLLM_VEC_DOT_NR(nr_iq2_xs, iq2_xs_wasm)
WGLLM_VEC_DOT_NR(nr_iq2_s, iq2_s_wasm)
WGLLM_VEC_DOT_NR(nr_iq3_xxs, iq3_xxs_wasm)
WGLLM_VEC_DOT_NR(nr_iq3_s, iq3_s_wasm)
WGLLM_VEC_DOT_NR(nr_iq1_s, iq1_s_wasm)
WGLLM_VEC_DOT_NR(nr_iq1_m, iq1_m_wasm)

void wgllm_iquants_install_wasm(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_IQ2_XXS].vec_dot = iq2_xxs_wasm, t[WGLLM_TYPE_IQ2_XXS].vec_dot_nr = nr_iq2_xxs;
    t[WGLLM_TYPE_IQ2_XS].vec_dot = iq2_xs_wasm, t[WGLLM_TYPE_IQ2_XS].vec_dot_nr = nr_iq2_xs;
    t[WGLLM_TYPE_IQ2_S].vec_dot = iq2_s_wasm, t[WGLLM_TYPE_IQ2_S].vec_dot_nr = nr_iq2_s;
    t[WGLLM_TYPE_IQ3_XXS].vec_dot = iq3_xxs_wasm, t[WGLLM_TYPE_IQ3_XXS].vec_dot_nr = nr_iq3_xxs;
    t[WGLLM_TYPE_IQ3_S].vec_dot = iq3_s_wasm, t[WGLLM_TYPE_IQ3_S].vec_dot_nr = nr_iq3_s;
    t[WGLLM_TYPE_IQ1_S].vec_dot = iq1_s_wasm, t[WGLLM_TYPE_IQ1_S].vec_dot_nr = nr_iq1_s;
    t[WGLLM_TYPE_IQ1_M].vec_dot = iq1_m_wasm, t[WGLLM_TYPE_IQ1_M].vec_dot_nr = nr_iq1_m;
}
#endif
