/*
 * iquants_x86.h - the x86 dots of the grid formats (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M with Q8_K), written once for both x86 levels:
 * iquants_avx2.c includes it with IQ_VNNI 0 (vpmaddubsw + vpmaddwd),
 * iquants_avx512.c with IQ_VNNI 1 (vpdpbusd on 256-bit registers). Static
 * functions: each file compiles them with its own -m flags.
 *
 * Per 32-element group the grid entries are gathered into one register
 * (four 8-byte or eight 4-byte entries), the element signs are moved onto
 * the activations (vpsignb with a +-1 byte per element from the sign bits),
 * and the unsigned magnitudes dot the signed activations into eight int32
 * lanes, lanes 0..3 the group's first 16 elements, 4..7 its last 16; the
 * lanes times their integer scale accumulate in int32. No product can
 * saturate vpmaddubsw: magnitudes are at most 62 (IQ3_XXS), activations
 * 127, so a pair is at most 15748. The super-block's integer is then the
 * reference's (exact), and the float steps after it are the reference's
 * too: every result is bit-identical to iquants.c.
 */
#ifndef WGLLM_IQUANTS_X86_H
#define WGLLM_IQUANTS_X86_H

#include "quant/iquants.h"
#include "quant/simd_x86.h"

#include <immintrin.h>

#define IQ_FP16(h) wgllm_fp16_table[h]
#define IQ_QK_K WGLLM_QK_K

/* 32 unsigned u times signed s, summed in fours into int32 lanes */
static inline __m256i iq_dot_u8s8(__m256i u, __m256i s) {
#if IQ_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* +-1 per element from 32 sign bits (byte l of s32: elements 8 l .. 8 l + 7) */
static inline __m256i iq_signs(uint32_t s32) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s32), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
    return _mm256_or_si256(v, _mm256_set1_epi8(1));
}

static inline __m256i iq_scales(int ls0, int ls1) { return _mm256_setr_epi32(ls0, ls0, ls0, ls0, ls1, ls1, ls1, ls1); }

static inline uint32_t iq_rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* acc += ls * (grid . (q8 with signs)) of one group */
static inline __m256i iq_group(__m256i acc, __m256i grid, uint32_t signs, const int8_t *q8, int ls0, int ls1) {
    const __m256i y = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q8), iq_signs(signs));
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(iq_dot_u8s8(grid, y), iq_scales(ls0, ls1)));
}

static inline __m256i iq_grid64(const uint64_t *g, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)g[i3], (long long)g[i2], (long long)g[i1], (long long)g[i0]);
}

static inline uint32_t iq_ksigns4(uint32_t aux) {
    return (uint32_t)wgllm_ksigns_iq2xs[aux & 127] | (uint32_t)wgllm_ksigns_iq2xs[(aux >> 7) & 127] << 8 |
           (uint32_t)wgllm_ksigns_iq2xs[(aux >> 14) & 127] << 16 | (uint32_t)wgllm_ksigns_iq2xs[(aux >> 21) & 127] << 24;
}

static int32_t iq2_xxs_isum(const wgllm_block_iq2_xxs *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint8_t *q = (const uint8_t *)(b->qs + 4 * ib);
        const uint32_t aux = iq_rd32(q + 4);
        const int ls = 2 * (int)(aux >> 28) + 1;
        acc = iq_group(acc, iq_grid64(wgllm_iq2xxs_grid, q[0], q[1], q[2], q[3]), iq_ksigns4(aux), q8, ls, ls);
    }
    return hsum_i32(acc);
}

static int32_t iq2_xs_isum(const wgllm_block_iq2_xs *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint16_t *q = b->qs + 4 * ib;
        const uint32_t s = (uint32_t)wgllm_ksigns_iq2xs[q[0] >> 9] | (uint32_t)wgllm_ksigns_iq2xs[q[1] >> 9] << 8 |
                           (uint32_t)wgllm_ksigns_iq2xs[q[2] >> 9] << 16 | (uint32_t)wgllm_ksigns_iq2xs[q[3] >> 9] << 24;
        const __m256i g = iq_grid64(wgllm_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        acc = iq_group(acc, g, s, q8, 2 * (b->scales[ib] & 0xF) + 1, 2 * (b->scales[ib] >> 4) + 1);
    }
    return hsum_i32(acc);
}

static int32_t iq2_s_isum(const wgllm_block_iq2_s *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint8_t *qs = b->qs + 4 * ib;
        const unsigned qh = b->qh[ib];
        const __m256i g = iq_grid64(wgllm_iq2s_grid, qs[0] | ((qh << 8) & 0x300), qs[1] | ((qh << 6) & 0x300),
                                    qs[2] | ((qh << 4) & 0x300), qs[3] | ((qh << 2) & 0x300));
        acc = iq_group(acc, g, iq_rd32(b->qs + IQ_QK_K / 8 + 4 * ib), q8, 2 * (b->scales[ib] & 0xF) + 1,
                       2 * (b->scales[ib] >> 4) + 1);
    }
    return hsum_i32(acc);
}

static int32_t iq3_xxs_isum(const wgllm_block_iq3_xxs *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    const uint32_t *g = wgllm_iq3xxs_grid;
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint8_t *q = b->qs + 8 * ib;
        const uint32_t aux = iq_rd32(b->qs + IQ_QK_K / 4 + 4 * ib);
        const int ls = 2 * (int)(aux >> 28) + 1;
        const __m256i gv = _mm256_setr_epi32((int)g[q[0]], (int)g[q[1]], (int)g[q[2]], (int)g[q[3]], (int)g[q[4]],
                                             (int)g[q[5]], (int)g[q[6]], (int)g[q[7]]);
        acc = iq_group(acc, gv, iq_ksigns4(aux), q8, ls, ls);
    }
    return hsum_i32(acc);
}

static int32_t iq3_s_isum(const wgllm_block_iq3_s *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    const uint32_t *g = wgllm_iq3s_grid;
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint8_t *q = b->qs + 8 * ib;
        const unsigned h = b->qh[ib];
        const __m256i gv = _mm256_setr_epi32(
            (int)g[q[0] | ((h << 8) & 256)], (int)g[q[1] | ((h << 7) & 256)], (int)g[q[2] | ((h << 6) & 256)],
            (int)g[q[3] | ((h << 5) & 256)], (int)g[q[4] | ((h << 4) & 256)], (int)g[q[5] | ((h << 3) & 256)],
            (int)g[q[6] | ((h << 2) & 256)], (int)g[q[7] | ((h << 1) & 256)]);
        const int ls = 2 * (ib % 2 ? b->scales[ib / 2] >> 4 : b->scales[ib / 2] & 0xF) + 1;
        acc = iq_group(acc, gv, iq_rd32(b->signs + 4 * ib), q8, ls, ls);
    }
    return hsum_i32(acc);
}

/* IQ1: the grid bytes are -1, 0, 1: their signs go onto the activations and
 * 1 dots the result (0 where the grid is 0) */
static inline __m256i iq1_dot(__m256i grid, const int8_t *q8) {
    return iq_dot_u8s8(_mm256_set1_epi8(1), _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q8), grid));
}

static int32_t iq1_s_isum(const wgllm_block_iq1_s *b, const int8_t *q8) {
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++, q8 += 32) {
        const uint8_t *qs = b->qs + 4 * ib;
        const unsigned qh = b->qh[ib];
        const __m256i g = iq_grid64(wgllm_iq1s_grid, qs[0] | ((qh << 8) & 0x700), qs[1] | ((qh << 5) & 0x700),
                                    qs[2] | ((qh << 2) & 0x700), qs[3] | ((qh >> 1) & 0x700));
        const int ls = 2 * (int)((qh >> 12) & 7) + 1;
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(iq1_dot(g, q8), _mm256_set1_epi32(ls)));
    }
    return hsum_i32(acc);
}

static void IQ_FN(vec_dot_iq1_s)(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_s *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / IQ_QK_K; i++) {
        const int32_t sumi = iq1_s_isum(&x[i], y[i].qs);
        int32_t sumd = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
            const int sign = x[i].qh[ib] & 0x8000 ? -1 : 1;
            sumd += ls * sign * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sumf += IQ_FP16(x[i].d) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

/* IQ1_M: the offsets' integer in a second accumulator: the activations with
 * each 8-group's offset sign, summed, times the half's scale */
static void IQ_FN(vec_dot_iq1_m)(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_m *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / IQ_QK_K; i++) {
        const wgllm_block_iq1_m *b = &x[i];
        const int8_t *q8 = y[i].qs;
        uint16_t sc[4];
        memcpy(sc, b->scales, sizeof sc);
        __m256i acc = _mm256_setzero_si256(), accd = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++, q8 += 32) {
            const uint8_t *qs = b->qs + 4 * ib, *qh = b->qh + 2 * ib;
            const __m256i g = iq_grid64(wgllm_iq1s_grid, qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                                        qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700));
            const unsigned sb = (unsigned)sc[ib / 2] >> (6 * (ib % 2));
            const __m256i ls = iq_scales(2 * (int)(sb & 7) + 1, 2 * (int)((sb >> 3) & 7) + 1);
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(iq1_dot(g, q8), ls));
            const __m256i dsg = _mm256_setr_epi64x(qh[0] & 0x08 ? -1 : 1, qh[0] & 0x80 ? -1 : 1, qh[1] & 0x08 ? -1 : 1,
                                                   qh[1] & 0x80 ? -1 : 1);
            /* +-1 in every byte of each 8-byte lane */
            const __m256i dsb = _mm256_or_si256(_mm256_cmpgt_epi64(_mm256_setzero_si256(), dsg), _mm256_set1_epi8(1));
            accd = _mm256_add_epi32(accd, _mm256_mullo_epi32(iq1_dot(dsb, q8), ls));
        }
        const int32_t sumi = hsum_i32(acc), sumd = hsum_i32(accd);
        sumf += IQ_FP16(wgllm_iq1m_scale(b)) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

/* IQ2 / IQ3: d_x d_y bsum per block, the constant factor at the end (iquants.c) */
#define IQ_DOT(name, blk, isum, mult)                                                            \
    static void IQ_FN(name)(int64_t n, float *s, const void *vx, const void *vy) {               \
        const blk *x = vx;                                                                       \
        const wgllm_block_q8_K *y = vy;                                                          \
        float sumf = 0.f;                                                                        \
        for (int64_t i = 0; i < n / IQ_QK_K; i++) {                                              \
            const float d = IQ_FP16(x[i].d) * y[i].d;                                            \
            sumf += d * (float)isum(&x[i], y[i].qs);                                             \
        }                                                                                        \
        *s = mult * sumf;                                                                        \
    }
IQ_DOT(vec_dot_iq2_xxs, wgllm_block_iq2_xxs, iq2_xxs_isum, 0.125f)
IQ_DOT(vec_dot_iq2_xs, wgllm_block_iq2_xs, iq2_xs_isum, 0.125f)
IQ_DOT(vec_dot_iq2_s, wgllm_block_iq2_s, iq2_s_isum, 0.125f)
IQ_DOT(vec_dot_iq3_xxs, wgllm_block_iq3_xxs, iq3_xxs_isum, 0.25f)
IQ_DOT(vec_dot_iq3_s, wgllm_block_iq3_s, iq3_s_isum, 1.0f)

WGLLM_VEC_DOT_NR(IQ_FN(nr_iq2_xxs), IQ_FN(vec_dot_iq2_xxs))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq2_xs), IQ_FN(vec_dot_iq2_xs))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq2_s), IQ_FN(vec_dot_iq2_s))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq3_xxs), IQ_FN(vec_dot_iq3_xxs))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq3_s), IQ_FN(vec_dot_iq3_s))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq1_s), IQ_FN(vec_dot_iq1_s))
WGLLM_VEC_DOT_NR(IQ_FN(nr_iq1_m), IQ_FN(vec_dot_iq1_m))

/* The dots and their row loops into t (the references' to_float stay). */
static void IQ_FN(install)(struct wgllm_type_traits *t) {
#define IQ_SET(T, f)                                                                             \
    t[WGLLM_TYPE_##T].vec_dot = IQ_FN(vec_dot_##f);                                             \
    t[WGLLM_TYPE_##T].vec_dot_nr = IQ_FN(nr_##f)
    IQ_SET(IQ2_XXS, iq2_xxs);
    IQ_SET(IQ2_XS, iq2_xs);
    IQ_SET(IQ2_S, iq2_s);
    IQ_SET(IQ3_XXS, iq3_xxs);
    IQ_SET(IQ3_S, iq3_s);
    IQ_SET(IQ1_S, iq1_s);
    IQ_SET(IQ1_M, iq1_m);
#undef IQ_SET
}

#endif
