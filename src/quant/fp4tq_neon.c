/*
 * fp4tq_neon.c - arm64 NEON dots of MXFP4, NVFP4 and Q1_0 (with Q8_0) and TQ1_0 /
 * TQ2_0 (with Q8_K), bit-identical to the scalar reference: each block's integer
 * sum is formed with NEON (exact), then the blocks are added in the
 * reference's order with its float expression (the order ggml's NEON
 * kernels keep too: one float sum per block).
 *
 * As quant_neon.c, the integer dots exist twice: with SDOT (vdotq_s32,
 * target "+dotprod") and with widening multiplies for cores without it;
 * wgllm_fp4tq_install_neon picks one from the run-time CPU caps. MXFP4's
 * table lookup is vqtbl1q_s8; TQ1_0's trit k of byte q is
 * ((q * 3^k) mod 256) * 3 >> 8, with NEON's byte multiply.
 */
#include "quant/fp4tq.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define FP16(h) wgllm_fp16_table[h]
#define QK_K WGLLM_QK_K
#define DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

static inline DOTPROD_TARGET int32x4_t dot_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    return vdotq_s32(acc, a, b);
}

/* |a * b| <= 16384 fits int16; pairs widen into int32 before adding on */
static inline int32x4_t dot_mull(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

/* sum(y) of a Q8_K block (its 16 partial sums) */
static inline int32_t q8k_sum(const wgllm_block_q8_K *y) {
    return vaddvq_s32(vaddq_s32(vpaddlq_s16(vld1q_s16(y->bsums)), vpaddlq_s16(vld1q_s16(y->bsums + 8))));
}

/* trits of 16 bytes times multipliers p (mod 256), as int8 0..2 */
static inline int8x16_t tq1_trits(uint8x16_t q, uint8x16_t p) {
    const uint8x16_t r = vmulq_u8(q, p);
    const uint8x8_t lo = vshrn_n_u16(vmull_u8(vget_low_u8(r), vdup_n_u8(3)), 8);
    const uint8x8_t hi = vshrn_n_u16(vmull_high_u8(r, vdupq_n_u8(3)), 8);
    return vreinterpretq_s8_u8(vcombine_u8(lo, hi));
}

/* Q1_0: sum of +-y over one Q8_0 sub-block (bits of 4 bytes spread over 32
 * elements, y negated where a bit is clear); the sum needs no multiply. */
static inline int32_t q1_0_sub(const uint8_t *bits, const int8_t *yq) {
    static const uint8_t spread[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t b4;
    memcpy(&b4, bits, 4);
    const uint8x16_t w = vreinterpretq_u8_u32(vdupq_n_u32(b4));
    int32_t sum = 0;
    for (int h = 0; h < 2; h++) {
        const uint8x16_t set = vtstq_u8(vqtbl1q_u8(w, vld1q_u8(spread + 16 * h)), vld1q_u8(bit));
        const int8x16_t yv = vld1q_s8(yq + 16 * h);
        sum += vaddlvq_s8(vbslq_s8(set, yv, vnegq_s8(yv)));
    }
    return sum;
}

static void vec_dot_q1_0_q8_0_neon(int64_t n, float *s, const void *vx, const void *vy) {
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

/* NVFP4: per 16-element sub-block an exact integer (widening multiplies:
 * 16 products, no SDOT variant needed), the reference's float term after. */
static void vec_dot_nvfp4_q8_0_neon(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_nvfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int8x16_t table = vld1q_s8(wgllm_kvalues_mxfp4);
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++)
        for (int p = 0; p < 2; p++) { /* sub-blocks 2p, 2p + 1: one Q8_0 block */
            const uint8x16_t q = vld1q_u8(x[i].qs + 16 * p);
            const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
            const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
            const wgllm_block_q8_0 *yb = &y[2 * i + p];
            for (int h = 0; h < 2; h++) {
                /* elements of sub-block 2p + h: lo[8h..8h+7] then hi[8h..8h+7] */
                const int8x16_t v = h ? vcombine_s8(vget_high_s8(lo), vget_high_s8(hi)) : vcombine_s8(vget_low_s8(lo), vget_low_s8(hi));
                const int32_t sumi = vaddvq_s32(dot_mull(vdupq_n_s32(0), v, vld1q_s8(yb->qs + 16 * h)));
                sumf += FP16(yb->d) * wgllm_ue4m3_half(x[i].d[2 * p + h]) * (float)sumi;
            }
        }
    *s = sumf;
}

/* The three dots over an integer dot DOT(acc, a, b), for each variant. */
#define FQ_NEON_KERNELS(SUF, ATTR, DOT)                                                                         \
    static ATTR void vec_dot_mxfp4_q8_0_##SUF(int64_t n, float *s, const void *vx, const void *vy) {          \
        const wgllm_block_mxfp4 *x = vx;                                                                       \
        const wgllm_block_q8_0 *y = vy;                                                                        \
        const int8x16_t table = vld1q_s8(wgllm_kvalues_mxfp4);                                                  \
        float sumf = 0;                                                                                        \
        for (int64_t i = 0; i < n / WGLLM_QK_MXFP4; i++) {                                                     \
            const uint8x16_t q = vld1q_u8(x[i].qs);                                                            \
            const int8x16_t lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));                             \
            const int8x16_t hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));                                          \
            const int32x4_t acc = DOT(DOT(vdupq_n_s32(0), lo, vld1q_s8(y[i].qs)), hi, vld1q_s8(y[i].qs + 16)); \
            const float d = FP16(y[i].d) * wgllm_e8m0_half(x[i].e);                                            \
            sumf += d * (float)vaddvq_s32(acc);                                                                 \
        }                                                                                                      \
        *s = sumf;                                                                                             \
    }                                                                                                          \
    static ATTR void vec_dot_tq2_0_q8_K_##SUF(int64_t n, float *s, const void *vx, const void *vy) {          \
        const wgllm_block_tq2_0 *x = vx;                                                                       \
        const wgllm_block_q8_K *y = vy;                                                                        \
        float sumf = 0;                                                                                        \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                               \
            int32x4_t acc = vdupq_n_s32(0);                                                                    \
            /* 16 bytes at 32h + 16g: elements 128h + 32l + 16g + m in bits 2l */                               \
            for (int h = 0; h < 2; h++)                                                                        \
                for (int g = 0; g < 2; g++) {                                                                  \
                    const uint8x16_t q = vld1q_u8(x[i].qs + 32 * h + 16 * g);                                  \
                    const int8_t *yq = y[i].qs + 128 * h + 16 * g;                                             \
                    const uint8x16_t m3 = vdupq_n_u8(3);                                                       \
                    acc = DOT(acc, vreinterpretq_s8_u8(vandq_u8(q, m3)), vld1q_s8(yq));                        \
                    acc = DOT(acc, vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 2), m3)), vld1q_s8(yq + 32));    \
                    acc = DOT(acc, vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q, 4), m3)), vld1q_s8(yq + 64));    \
                    acc = DOT(acc, vreinterpretq_s8_u8(vshrq_n_u8(q, 6)), vld1q_s8(yq + 96));                  \
                }                                                                                              \
            const int sumi = vaddvq_s32(acc) - q8k_sum(&y[i]);                                                 \
            sumf += (float)sumi * (y[i].d * FP16(x[i].d));                                                     \
        }                                                                                                      \
        *s = sumf;                                                                                             \
    }                                                                                                          \
    static ATTR void vec_dot_tq1_0_q8_K_##SUF(int64_t n, float *s, const void *vx, const void *vy) {          \
        const wgllm_block_tq1_0 *x = vx;                                                                       \
        const wgllm_block_q8_K *y = vy;                                                                        \
        static const uint8_t pow3[5] = {1, 3, 9, 27, 81};                                                      \
        static const uint8_t pqh[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};                   \
        float sumf = 0;                                                                                        \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                               \
            const uint8x16_t q0 = vld1q_u8(x[i].qs), q1 = vld1q_u8(x[i].qs + 16), q2 = vld1q_u8(x[i].qs + 32); \
            uint32_t qh;                                                                                       \
            memcpy(&qh, x[i].qh, sizeof qh);                                                                   \
            int32x4_t acc = vdupq_n_s32(0);                                                                    \
            for (int k = 0; k < 5; k++) {                                                                      \
                /* elements 32k + m: trit k of qs[m]; 160 + 16k + m: trit k of qs[32 + m] */                   \
                const uint8x16_t p = vdupq_n_u8(pow3[k]);                                                      \
                acc = DOT(acc, tq1_trits(q0, p), vld1q_s8(y[i].qs + 32 * k));                                  \
                acc = DOT(acc, tq1_trits(q1, p), vld1q_s8(y[i].qs + 32 * k + 16));                             \
                acc = DOT(acc, tq1_trits(q2, p), vld1q_s8(y[i].qs + 160 + 16 * k));                            \
            }                                                                                                  \
            /* elements 240 + 4k + j: trit k of qh[j] */                                                       \
            acc = DOT(acc, tq1_trits(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(pqh)),                    \
                      vld1q_s8(y[i].qs + 240));                                                                \
            const int sumi = vaddvq_s32(acc) - q8k_sum(&y[i]);                                                 \
            sumf += (float)sumi * (FP16(x[i].d) * y[i].d);                                                     \
        }                                                                                                      \
        *s = sumf;                                                                                             \
    }

FQ_NEON_KERNELS(sdot, DOTPROD_TARGET, dot_sdot)
FQ_NEON_KERNELS(mull, , dot_mull)

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_mxfp4_sdot, vec_dot_mxfp4_q8_0_sdot)
WGLLM_VEC_DOT_NR(nr_tq1_0_sdot, vec_dot_tq1_0_q8_K_sdot)
WGLLM_VEC_DOT_NR(nr_tq2_0_sdot, vec_dot_tq2_0_q8_K_sdot)
WGLLM_VEC_DOT_NR(nr_mxfp4_mull, vec_dot_mxfp4_q8_0_mull)
WGLLM_VEC_DOT_NR(nr_tq1_0_mull, vec_dot_tq1_0_q8_K_mull)
WGLLM_VEC_DOT_NR(nr_tq2_0_mull, vec_dot_tq2_0_q8_K_mull)
WGLLM_VEC_DOT_NR(nr_q1_0_neon, vec_dot_q1_0_q8_0_neon)
WGLLM_VEC_DOT_NR(nr_nvfp4_neon, vec_dot_nvfp4_q8_0_neon)

void wgllm_fp4tq_install_neon(struct wgllm_type_traits *t, bool has_dotprod) {
    t[WGLLM_TYPE_MXFP4].vec_dot = has_dotprod ? vec_dot_mxfp4_q8_0_sdot : vec_dot_mxfp4_q8_0_mull;
    t[WGLLM_TYPE_MXFP4].vec_dot_nr = has_dotprod ? nr_mxfp4_sdot : nr_mxfp4_mull;
    t[WGLLM_TYPE_TQ1_0].vec_dot = has_dotprod ? vec_dot_tq1_0_q8_K_sdot : vec_dot_tq1_0_q8_K_mull;
    t[WGLLM_TYPE_TQ1_0].vec_dot_nr = has_dotprod ? nr_tq1_0_sdot : nr_tq1_0_mull;
    t[WGLLM_TYPE_TQ2_0].vec_dot = has_dotprod ? vec_dot_tq2_0_q8_K_sdot : vec_dot_tq2_0_q8_K_mull;
    t[WGLLM_TYPE_TQ2_0].vec_dot_nr = has_dotprod ? nr_tq2_0_sdot : nr_tq2_0_mull;
    t[WGLLM_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_neon;
    t[WGLLM_TYPE_Q1_0].vec_dot_nr = nr_q1_0_neon;
    t[WGLLM_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_neon;
    t[WGLLM_TYPE_NVFP4].vec_dot_nr = nr_nvfp4_neon;
}

#endif
