/*
 * iquants_neon.c - arm64 NEON dots of the grid formats (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M with Q8_K), bit-identical to the
 * scalar reference: per 32-element group the grid entries are loaded as
 * two 16-byte vectors (wgllm_iq_raw_group), negated where the sign bits say
 * ((g ^ m) - m with m a byte mask from vtst), dotted with the activations
 * into int32 lanes and scaled by the halves' integer scales; the block's
 * integer is the reference's (exact) and its float steps follow.
 *
 * As quant_neon.c, the integer dots exist twice: with SDOT (vdotq_s32,
 * target "+dotprod") and with widening multiplies (|g * y| <= 62 * 127)
 * for cores without it; the install picks one from the run-time CPU caps.
 */
#include "quant/iquants.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define FP16(h) wgllm_fp16_table[h]
#define QK_K WGLLM_QK_K
#define DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

static inline DOTPROD_TARGET int32x4_t dot_sdot(int8x16_t a, int8x16_t b) { return vdotq_s32(vdupq_n_s32(0), a, b); }
static inline int32x4_t dot_mull(int8x16_t a, int8x16_t b) {
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))), vmull_high_s8(a, b));
}

/* 0xFF in the bytes of elements 16 h .. 16 h + 15 whose bit of neg is set */
static inline int8x16_t neg_mask(uint32_t neg, int h) {
    static const uint8_t spread[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t w = vreinterpretq_u8_u32(vdupq_n_u32(neg));
    return vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(w, vld1q_u8(spread + 16 * h)), vld1q_u8(bit)));
}

/* the 16 signed weights of half h */
static inline int8x16_t half_weights(const uint64_t *g, uint32_t neg, int h) {
    const int8x16_t v = vreinterpretq_s8_u64(vld1q_u64(g + 2 * h)), m = neg_mask(neg, h);
    return vsubq_s8(veorq_s8(v, m), m);
}

/* IQ1_M's offsets as sign bits: every element of an 8-group whose dneg bit is set */
static inline uint32_t dneg_bits(unsigned dneg) {
    uint32_t m = 0;
    for (int k = 0; k < 4; k++)
        if ((dneg >> k) & 1) m |= 0xFFu << (8 * k);
    return m;
}

/* One level (SUF, with its target attribute and integer dot): the block's
 * integer sum (and IQ1_M's offset sum in *sumd), then the seven dots. */
#define IQ_NEON_LEVEL(SUF, ATTR, DOT)                                                                  \
    static inline ATTR int32_t isum_##SUF(uint32_t type, const void *b, const int8_t *q8, int32_t *sumd) { \
        static const uint64_t ones[4] = {0x0101010101010101ULL, 0x0101010101010101ULL, 0x0101010101010101ULL, \
                                         0x0101010101010101ULL};                                       \
        int32x4_t acc = vdupq_n_s32(0), accd = vdupq_n_s32(0);                                         \
        struct wgllm_iq_raw r;                                                                         \
        for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {                                             \
            wgllm_iq_raw_group(type, b, ib, &r);                                                       \
            for (int h = 0; h < 2; h++) {                                                              \
                const int8x16_t y = vld1q_s8(q8 + 16 * h);                                             \
                acc = vmlaq_n_s32(acc, DOT(half_weights(r.g, r.neg, h), y), r.ls[h]);                  \
                if (type == WGLLM_TYPE_IQ1_M)                                                          \
                    accd = vmlaq_n_s32(accd, DOT(half_weights(ones, dneg_bits(r.dneg), h), y), r.ls[h]); \
            }                                                                                          \
        }                                                                                              \
        *sumd = vaddvq_s32(accd);                                                                      \
        return vaddvq_s32(acc);                                                                        \
    }                                                                                                  \
    static inline ATTR void dot23_##SUF(uint32_t type, size_t bsize, float mult, int64_t n, float *s,  \
                                        const void *vx, const void *vy) {                              \
        const uint8_t *x = vx;                                                                         \
        const wgllm_block_q8_K *y = vy;                                                                \
        float sumf = 0.f;                                                                              \
        int32_t unused;                                                                                \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                       \
            const void *b = x + (size_t)i * bsize;                                                     \
            const float d = FP16(*(const wgllm_fp16 *)b) * y[i].d;                                     \
            sumf += d * (float)isum_##SUF(type, b, y[i].qs, &unused);                                  \
        }                                                                                              \
        *s = mult * sumf;                                                                              \
    }                                                                                                  \
    static ATTR void iq2_xxs_##SUF(int64_t n, float *s, const void *x, const void *y) {                \
        dot23_##SUF(WGLLM_TYPE_IQ2_XXS, sizeof(wgllm_block_iq2_xxs), 0.125f, n, s, x, y);              \
    }                                                                                                  \
    static ATTR void iq2_xs_##SUF(int64_t n, float *s, const void *x, const void *y) {                 \
        dot23_##SUF(WGLLM_TYPE_IQ2_XS, sizeof(wgllm_block_iq2_xs), 0.125f, n, s, x, y);                \
    }                                                                                                  \
    static ATTR void iq2_s_##SUF(int64_t n, float *s, const void *x, const void *y) {                  \
        dot23_##SUF(WGLLM_TYPE_IQ2_S, sizeof(wgllm_block_iq2_s), 0.125f, n, s, x, y);                  \
    }                                                                                                  \
    static ATTR void iq3_xxs_##SUF(int64_t n, float *s, const void *x, const void *y) {                \
        dot23_##SUF(WGLLM_TYPE_IQ3_XXS, sizeof(wgllm_block_iq3_xxs), 0.25f, n, s, x, y);               \
    }                                                                                                  \
    static ATTR void iq3_s_##SUF(int64_t n, float *s, const void *x, const void *y) {                  \
        dot23_##SUF(WGLLM_TYPE_IQ3_S, sizeof(wgllm_block_iq3_s), 1.0f, n, s, x, y);                    \
    }                                                                                                  \
    static ATTR void iq1_s_##SUF(int64_t n, float *s, const void *vx, const void *vy) {                \
        const wgllm_block_iq1_s *x = vx;                                                               \
        const wgllm_block_q8_K *y = vy;                                                                \
        float sumf = 0.f;                                                                              \
        int32_t unused;                                                                                \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                       \
            const int32_t sumi = isum_##SUF(WGLLM_TYPE_IQ1_S, &x[i], y[i].qs, &unused);                \
            int32_t sumd = 0;                                                                          \
            for (int ib = 0; ib < QK_K / 32; ib++) {                                                   \
                const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;                                      \
                sumd += ls * (x[i].qh[ib] & 0x8000 ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]); \
            }                                                                                          \
            sumf += FP16(x[i].d) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);             \
        }                                                                                              \
        *s = sumf;                                                                                     \
    }                                                                                                  \
    static ATTR void iq1_m_##SUF(int64_t n, float *s, const void *vx, const void *vy) {                \
        const wgllm_block_iq1_m *x = vx;                                                               \
        const wgllm_block_q8_K *y = vy;                                                                \
        float sumf = 0.f;                                                                              \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                       \
            int32_t sumd;                                                                              \
            const int32_t sumi = isum_##SUF(WGLLM_TYPE_IQ1_M, &x[i], y[i].qs, &sumd);                  \
            sumf += FP16(wgllm_iq1m_scale(&x[i])) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd); \
        }                                                                                              \
        *s = sumf;                                                                                     \
    }                                                                                                  \
    WGLLM_VEC_DOT_NR(nr_iq2_xxs_##SUF, iq2_xxs_##SUF)                                                  \
    WGLLM_VEC_DOT_NR(nr_iq2_xs_##SUF, iq2_xs_##SUF)                                                    \
    WGLLM_VEC_DOT_NR(nr_iq2_s_##SUF, iq2_s_##SUF)                                                      \
    WGLLM_VEC_DOT_NR(nr_iq3_xxs_##SUF, iq3_xxs_##SUF)                                                  \
    WGLLM_VEC_DOT_NR(nr_iq3_s_##SUF, iq3_s_##SUF)                                                      \
    WGLLM_VEC_DOT_NR(nr_iq1_s_##SUF, iq1_s_##SUF)                                                      \
    WGLLM_VEC_DOT_NR(nr_iq1_m_##SUF, iq1_m_##SUF)                                                      \
    static void install_##SUF(struct wgllm_type_traits *t) {                                           \
        t[WGLLM_TYPE_IQ2_XXS].vec_dot = iq2_xxs_##SUF, t[WGLLM_TYPE_IQ2_XXS].vec_dot_nr = nr_iq2_xxs_##SUF; \
        t[WGLLM_TYPE_IQ2_XS].vec_dot = iq2_xs_##SUF, t[WGLLM_TYPE_IQ2_XS].vec_dot_nr = nr_iq2_xs_##SUF; \
        t[WGLLM_TYPE_IQ2_S].vec_dot = iq2_s_##SUF, t[WGLLM_TYPE_IQ2_S].vec_dot_nr = nr_iq2_s_##SUF;    \
        t[WGLLM_TYPE_IQ3_XXS].vec_dot = iq3_xxs_##SUF, t[WGLLM_TYPE_IQ3_XXS].vec_dot_nr = nr_iq3_xxs_##SUF; \
        t[WGLLM_TYPE_IQ3_S].vec_dot = iq3_s_##SUF, t[WGLLM_TYPE_IQ3_S].vec_dot_nr = nr_iq3_s_##SUF;    \
        t[WGLLM_TYPE_IQ1_S].vec_dot = iq1_s_##SUF, t[WGLLM_TYPE_IQ1_S].vec_dot_nr = nr_iq1_s_##SUF;    \
        t[WGLLM_TYPE_IQ1_M].vec_dot = iq1_m_##SUF, t[WGLLM_TYPE_IQ1_M].vec_dot_nr = nr_iq1_m_##SUF;    \
    }

IQ_NEON_LEVEL(sdot, DOTPROD_TARGET, dot_sdot)
IQ_NEON_LEVEL(mull, , dot_mull)

void wgllm_iquants_install_neon(struct wgllm_type_traits *t, bool has_dotprod) {
    if (has_dotprod) install_sdot(t);
    else install_mull(t);
}
#endif
