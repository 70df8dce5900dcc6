/*
 * repack_avx512.c - AVX-512 VNNI products over the interleaved Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/
 * IQ4_NL/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS layout (repack.h). Per block, each 64-byte weight vector (16 rows x 4
 * quants) is loaded and unpacked once and fed to vpdpbusd against 4
 * broadcast activation bytes of each token of a tile of up to TILE tokens;
 * the integer sums of a token start from its -bias*sum(x) correction, which
 * is computed once per tile and block, shared by all panels.
 *
 * Q4_K and Q5_K: vpdpbusd gives each sub-block's exact integer sum per row, which
 * vpmulld scales by the row's 6-bit scale; the mins times the activation's
 * 32-element sums go through vpmaddwd, two sub-blocks at a time. Q6_K: the
 * same per 16-element sub-block, whose sum starts from -32*bsum (the quants
 * are stored +32).
 *
 * Loop order: panels are taken in groups of about 1 MiB so that, for a
 * prompt, a group stays in L2 while every tile of tokens passes over it.
 */
#include "quant/repack.h"

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TILE 4
/* Software prefetch distance in bytes of a panel's quants: the hardware
 * prefetcher alone left a mat-vec at ~10 of the ~12 GB/s a core can read. */
#define PF 2048
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Per block, per token of the tile: the integer correction and the scale.
 * Q4_1 and Q5_1 have no correction (their quants are taken unsigned, with a
 * min instead of an offset); their Q8_1 block's s, which the min multiplies,
 * takes its place (the struct stays at 64 KiB of stack). */
struct tile_pre {
    union {
        int32_t corr[WGLLM_REPACK_MAX_BLOCKS][TILE];
        float sx[WGLLM_REPACK_MAX_BLOCKS][TILE];
    };
    float dx[WGLLM_REPACK_MAX_BLOCKS][TILE];
};

static ALWAYS_INLINE __m512i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm512_set1_epi32(v);
}

/* corr = -bias * sum(qs), from sad(qs ^ 0x80, 0) = sum(qs) + 32*128. */
static void tile_prepare(const char *x, size_t xs, int T, int64_t nb, int32_t bias, struct tile_pre *pre) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < T; t++) {
        const wgllm_block_q8_0 *xb = (const wgllm_block_q8_0 *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            const __m256i q = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)xb[b].qs), flip);
            const __m256i s = _mm256_sad_epu8(q, _mm256_setzero_si256());
            __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s2 = _mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2));
            pre->corr[b][t] = -bias * (_mm_cvtsi128_si32(s2) - 32 * 128);
            pre->dx[b][t] = wgllm_fp16_lookup(xb[b].d);
        }
    }
}

/* Q8_1 activations (Q4_1, Q5_1): the scale and s of each block. */
static void tile_prepare_q8_1(const char *x, size_t xs, int T, int64_t nb, struct tile_pre *pre) {
    for (int t = 0; t < T; t++) {
        const wgllm_block_q8_1 *xb = (const wgllm_block_q8_1 *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            pre->dx[b][t] = wgllm_fp16_lookup(xb[b].d);
            pre->sx[b][t] = wgllm_fp16_lookup(xb[b].s);
        }
    }
}

static ALWAYS_INLINE void store_tile(const __m512 *acc, int T, float *y, int ldy, bool accumulate) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *d = y + (size_t)t * ldy;
        _mm512_storeu_ps(d, accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), acc[t]) : acc[t]);
    }
}

/* One panel (16 rows) times T tokens (x: the tile's first token row) of a
 * format of nibble vectors (`kind`, a constant where inlined): Q4_0 and Q4_1
 * as they are; IQ4_NL each nibble looked up as value + 128; Q5_0 and Q5_1
 * with 16 added where the block's fifth vector of high bits says. The tile's
 * correction is -bias * sum(activations) with bias 8, 128 and 16; Q4_1 and
 * Q5_1 have none but add each row's min times the Q8_1 block's s. */
enum { NIB_Q4_0, NIB_IQ4_NL, NIB_Q5_0, NIB_Q4_1, NIB_Q5_1 };
static ALWAYS_INLINE void panel_nib(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,
                                    const struct tile_pre *pre, int T, float *y, int ldy, bool accumulate, int kind) {
    const __m512i mask = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const bool five = kind == NIB_Q5_0 || kind == NIB_Q5_1, min = kind == NIB_Q4_1 || kind == NIB_Q5_1;
    const size_t qb = five ? 320 : 256;
    const uint8_t *mins = pd + wgllm_repack_scale_bytes(nb * 32); /* Q4_1, Q5_1 */
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pd + b * 32)));
        const uint8_t *q = pd + sb + b * qb;
        const __m512i hb = five ? _mm512_load_si512((const void *)(q + 256)) : mask;
        const int8_t *a[TILE];
        __m512i ia[TILE], ib[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const char *xt = x + (size_t)t * xs;
            a[t] = min ? ((const wgllm_block_q8_1 *)xt)[b].qs : ((const wgllm_block_q8_0 *)xt)[b].qs;
            ia[t] = min ? _mm512_setzero_si512() : _mm512_set1_epi32(pre->corr[b][t]);
            ib[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m512i v = _mm512_load_si512((const void *)(q + 64 * m));
            _mm_prefetch((const char *)(q + 64 * m + PF), _MM_HINT_T0);
            __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
            if (kind == NIB_IQ4_NL) {
                lo = _mm512_shuffle_epi8(table, lo);
                hi = _mm512_shuffle_epi8(table, hi);
            } else if (five) {
                lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << m))), lo, sixteen);
                hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(16 << m))), hi, sixteen);
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                ia[t] = _mm512_dpbusd_epi32(ia[t], lo, bcast32(a[t] + 4 * m));
                ib[t] = _mm512_dpbusd_epi32(ib[t], hi, bcast32(a[t] + 16 + 4 * m));
            }
        }
        const __m512 wm = min ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(mins + b * 32))) : ws;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 d = _mm512_mul_ps(ws, _mm512_set1_ps(pre->dx[b][t]));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(ia[t], ib[t])), acc[t]);
            if (min) acc[t] = _mm512_fmadd_ps(wm, _mm512_set1_ps(pre->sx[b][t]), acc[t]);
        }
    }
    store_tile(acc, T, y, ldy, accumulate);
}
static ALWAYS_INLINE void panel_q8_0(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,
                                     const struct tile_pre *pre, int T, float *y, int ldy, bool accumulate) {
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pd + b * 32)));
        const uint8_t *q = pd + sb + b * 512;
        const int8_t *a[TILE];
        __m512i ia[TILE], ib[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_0 *)(x + (size_t)t * xs))[b].qs;
            ia[t] = _mm512_set1_epi32(pre->corr[b][t]);
            ib[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int g = 0; g < 8; g += 2) {
            const __m512i v0 = _mm512_load_si512((const void *)(q + 64 * g));
            const __m512i v1 = _mm512_load_si512((const void *)(q + 64 * g + 64));
            _mm_prefetch((const char *)(q + 64 * g + PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 64 * g + 64 + PF), _MM_HINT_T0);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                ia[t] = _mm512_dpbusd_epi32(ia[t], v0, bcast32(a[t] + 4 * g));
                ib[t] = _mm512_dpbusd_epi32(ib[t], v1, bcast32(a[t] + 4 * g + 4));
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 d = _mm512_mul_ps(ws, _mm512_set1_ps(pre->dx[b][t]));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(ia[t], ib[t])), acc[t]);
        }
    }
    store_tile(acc, T, y, ldy, accumulate);
}

typedef void (*panel_fn)(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,
                         const struct tile_pre *pre, float *y, int ldy, bool accumulate);

/* One function per format and tile size (the tables below), so that T is a constant inside. */
#define PANEL_T(name, call)                                                                              \
    static void name(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs, const struct tile_pre *pre, \
                     float *y, int ldy, bool accumulate) {                                                  \
        call;                                                                                               \
    }
#define PANELS_NIB(fmt, kind)                                                                                    \
    PANEL_T(panel_##fmt##_t1, panel_nib(pd, sb, nb, x, xs, pre, 1, y, ldy, accumulate, kind))                 \
    PANEL_T(panel_##fmt##_t2, panel_nib(pd, sb, nb, x, xs, pre, 2, y, ldy, accumulate, kind))                 \
    PANEL_T(panel_##fmt##_t3, panel_nib(pd, sb, nb, x, xs, pre, 3, y, ldy, accumulate, kind))                 \
    PANEL_T(panel_##fmt##_t4, panel_nib(pd, sb, nb, x, xs, pre, 4, y, ldy, accumulate, kind))
PANELS_NIB(q4_0, NIB_Q4_0)
PANELS_NIB(iq4_nl, NIB_IQ4_NL)
PANELS_NIB(q5_0, NIB_Q5_0)
PANELS_NIB(q4_1, NIB_Q4_1)
PANELS_NIB(q5_1, NIB_Q5_1)
PANEL_T(panel_q8_0_t1, panel_q8_0(pd, sb, nb, x, xs, pre, 1, y, ldy, accumulate))
PANEL_T(panel_q8_0_t2, panel_q8_0(pd, sb, nb, x, xs, pre, 2, y, ldy, accumulate))
PANEL_T(panel_q8_0_t3, panel_q8_0(pd, sb, nb, x, xs, pre, 3, y, ldy, accumulate))
PANEL_T(panel_q8_0_t4, panel_q8_0(pd, sb, nb, x, xs, pre, 4, y, ldy, accumulate))

static const panel_fn panels_q4_0[TILE + 1] = {NULL, panel_q4_0_t1, panel_q4_0_t2, panel_q4_0_t3, panel_q4_0_t4};
static const panel_fn panels_q8_0[TILE + 1] = {NULL, panel_q8_0_t1, panel_q8_0_t2, panel_q8_0_t3, panel_q8_0_t4};
static const panel_fn panels_iq4_nl[TILE + 1] = {NULL, panel_iq4_nl_t1, panel_iq4_nl_t2, panel_iq4_nl_t3,
                                                 panel_iq4_nl_t4};
static const panel_fn panels_q5_0[TILE + 1] = {NULL, panel_q5_0_t1, panel_q5_0_t2, panel_q5_0_t3, panel_q5_0_t4};
static const panel_fn panels_q4_1[TILE + 1] = {NULL, panel_q4_1_t1, panel_q4_1_t2, panel_q4_1_t3, panel_q4_1_t4};
static const panel_fn panels_q5_1[TILE + 1] = {NULL, panel_q5_1_t1, panel_q5_1_t2, panel_q5_1_t3, panel_q5_1_t4};

/* ---- Q4_K ---------------------------------------------------------------- */



static ALWAYS_INLINE __m512i scales16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)p));
}

/* Bit i of each byte of hb at bit 4 (Q5_K's fifth bits). */
static ALWAYS_INLINE __m512i bit5(__m512i hb, int i) {
    const __m512i m10 = _mm512_set1_epi8(0x10);
    return i <= 4 ? _mm512_and_si512(_mm512_slli_epi16(hb, (unsigned)(4 - i)), m10)
                  : _mm512_and_si512(_mm512_srli_epi16(hb, (unsigned)(i - 4)), m10);
}

/* One Q4_K (five = false) or Q5_K panel times T tokens. */
static ALWAYS_INLINE void panel_q45_K(const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                      const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy, bool accumulate,
                                      bool five) {
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const size_t rs = five ? WGLLM_REPACK_Q5_K_RECORD : WGLLM_REPACK_Q4_K_RECORD, qb = five ? 2560 : 2048;
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * rs;
        const int8_t *a[TILE];
        __m512i i32[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_K *)(x + (size_t)t * xs))[b].qs;
            i32[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i sa[TILE], sb[TILE];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) sa[t] = sb[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const uint8_t *q = rec + wgllm_repack_k45_low(five, c, m);
                const __m512i v = _mm512_load_si512((const void *)q);
                _mm_prefetch((const char *)(q + PF), _MM_HINT_T0);
                __m512i lo = _mm512_and_si512(v, mask);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
                if (five) {
                    const __m512i hb = _mm512_load_si512((const void *)(rec + wgllm_repack_k45_high(m)));
                    lo = _mm512_or_si512(lo, bit5(hb, 2 * c));
                    hi = _mm512_or_si512(hi, bit5(hb, 2 * c + 1));
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    sa[t] = _mm512_dpbusd_epi32(sa[t], lo, bcast32(a[t] + 64 * c + 4 * m));
                    sb[t] = _mm512_dpbusd_epi32(sb[t], hi, bcast32(a[t] + 64 * c + 32 + 4 * m));
                }
            }
            const __m512i s0 = scales16(rec + qb + (2 * c) * 16), s1 = scales16(rec + qb + (2 * c + 1) * 16);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                i32[t] = _mm512_add_epi32(i32[t], _mm512_add_epi32(_mm512_mullo_epi32(sa[t], s0),
                                                                   _mm512_mullo_epi32(sb[t], s1)));
        }
        __m512i mn[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            mn[k] = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(rec + qb + 128 + k * 32)));
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + qb + 256)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + qb + 288)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512i m32 = _mm512_madd_epi16(mn[0], _mm512_set1_epi32(pre->bsum2[b][0][t]));
#pragma GCC unroll 4
            for (int k = 1; k < 4; k++)
                m32 = _mm512_add_epi32(m32, _mm512_madd_epi16(mn[k], _mm512_set1_epi32(pre->bsum2[b][k][t])));
            const __m512 dx = _mm512_set1_ps(pre->dx[b][t]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i32[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(m32), acc[t]);
        }
    }
    store_tile(acc, T, y, ldy, accumulate);
}

/* panel_FMT_tT: the T-token panel of a format's kernel `body` (flag: its variant) */
#define PANEL_K_T(fmt, T, body, flag)                                                                       \
    static void panel_##fmt##_t##T(const uint8_t *pd, int64_t nb, const char *x, size_t xs,                \
                                   const struct wgllm_repack_pre_k *pre, float *y, int ldy, bool accumulate) {      \
        body(pd, nb, x, xs, pre, T, y, ldy, accumulate, flag);                                              \
    }
PANEL_K_T(q4_K, 1, panel_q45_K, false)
PANEL_K_T(q4_K, 2, panel_q45_K, false)
PANEL_K_T(q4_K, 3, panel_q45_K, false)
PANEL_K_T(q4_K, 4, panel_q45_K, false)
/* Q5_K, one token: m outer, as the record is laid out, the 8 sub-blocks'
 * sums in 8 independent vpdpbusd chains (exact integers: the loop order
 * does not change the result). */
static void panel_q5_K_t1(const uint8_t *pd, int64_t nb, const char *x, size_t xs, const struct wgllm_repack_pre_k *pre,
                          float *y, int ldy, bool accumulate) {
    const __m512i mask = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * WGLLM_REPACK_Q5_K_RECORD;
        const int8_t *a = ((const wgllm_block_q8_K *)x)[b].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
#pragma GCC unroll 8
        for (int m = 0; m < 8; m++) {
            const uint8_t *q = rec + 320 * m;
            _mm_prefetch((const char *)(q + PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 64 + PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 128 + PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 192 + PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 256 + PF), _MM_HINT_T0);
            const __m512i hb = _mm512_load_si512((const void *)(q + 256));
#define Q5_STEP(c, sl, sh)                                                                                   \
    do {                                                                                                     \
        const __m512i v = _mm512_load_si512((const void *)(q + 64 * (c)));                                   \
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, mask), bit5(hb, 2 * (c)));                    \
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), mask), bit5(hb, 2 * (c) + 1)); \
        sl = _mm512_dpbusd_epi32(sl, lo, bcast32(a + 64 * (c) + 4 * m));                                    \
        sh = _mm512_dpbusd_epi32(sh, hi, bcast32(a + 64 * (c) + 32 + 4 * m));                               \
    } while (0)
            Q5_STEP(0, s0, s1);
            Q5_STEP(1, s2, s3);
            Q5_STEP(2, s4, s5);
            Q5_STEP(3, s6, s7);
#undef Q5_STEP
        }
        const uint8_t *sc = rec + 2560;
        __m512i i32 = _mm512_add_epi32(_mm512_mullo_epi32(s0, scales16(sc)), _mm512_mullo_epi32(s1, scales16(sc + 16)));
        i32 = _mm512_add_epi32(i32, _mm512_add_epi32(_mm512_mullo_epi32(s2, scales16(sc + 32)), _mm512_mullo_epi32(s3, scales16(sc + 48))));
        i32 = _mm512_add_epi32(i32, _mm512_add_epi32(_mm512_mullo_epi32(s4, scales16(sc + 64)), _mm512_mullo_epi32(s5, scales16(sc + 80))));
        i32 = _mm512_add_epi32(i32, _mm512_add_epi32(_mm512_mullo_epi32(s6, scales16(sc + 96)), _mm512_mullo_epi32(s7, scales16(sc + 112))));
        __m512i m32 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            m32 = _mm512_add_epi32(m32, _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(sc + 128 + k * 32))),
                                                          _mm512_set1_epi32(pre->bsum2[b][k][0])));
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + 256)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + 288)));
        const __m512 dx = _mm512_set1_ps(pre->dx[b][0]);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i32), acc);
        acc = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(m32), acc);
    }
    store_tile(&acc, 1, y, 0, accumulate);
}
PANEL_K_T(q5_K, 2, panel_q45_K, true)
PANEL_K_T(q5_K, 3, panel_q45_K, true)
PANEL_K_T(q5_K, 4, panel_q45_K, true)
static const wgllm_repack_panel_k_fn panels_q4_K[TILE + 1] = {NULL, panel_q4_K_t1, panel_q4_K_t2, panel_q4_K_t3, panel_q4_K_t4};
static const wgllm_repack_panel_k_fn panels_q5_K[TILE + 1] = {NULL, panel_q5_K_t1, panel_q5_K_t2, panel_q5_K_t3, panel_q5_K_t4};


/* ---- Q6_K ---------------------------------------------------------------- */


/* Vector v's 6-bit quants: elements 4v.. (lo) and 128+4v.. (hi) of 16 rows. */
static ALWAYS_INLINE void q6_unpack(const uint8_t *rec, int v, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i nib = _mm512_load_si512((const void *)(rec + wgllm_repack_q6_K_low(v)));
    const __m512i hb = _mm512_load_si512((const void *)(rec + wgllm_repack_q6_K_high(v & 15)));
    _mm_prefetch((const char *)(rec + wgllm_repack_q6_K_low(v) + PF), _MM_HINT_T0);
    if (v < 16) {
        *lo = _mm512_or_si512(_mm512_and_si512(nib, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
        *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nib, 4), m4), _mm512_and_si512(hb, m30));
    } else {
        *lo = _mm512_or_si512(_mm512_and_si512(nib, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
        *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nib, 4), m4),
                              _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
    }
}

static ALWAYS_INLINE void panel_q6_K(const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                     const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy, bool accumulate) {
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * WGLLM_REPACK_Q6_K_RECORD;
        const int8_t *a[TILE];
        __m512i i32[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_K *)(x + (size_t)t * xs))[b].qs;
            i32[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i sa[TILE], sb[TILE];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const int16_t *bs = ((const wgllm_block_q8_K *)(x + (size_t)t * xs))[b].bsums;
                sa[t] = _mm512_set1_epi32(-32 * bs[g]); /* the quants are stored +32 */
                sb[t] = _mm512_set1_epi32(-32 * bs[8 + g]);
            }
#pragma GCC unroll 4
            for (int v = 4 * g; v < 4 * g + 4; v++) {
                __m512i lo, hi;
                q6_unpack(rec, v, &lo, &hi);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    sa[t] = _mm512_dpbusd_epi32(sa[t], lo, bcast32(a[t] + 4 * v));
                    sb[t] = _mm512_dpbusd_epi32(sb[t], hi, bcast32(a[t] + 128 + 4 * v));
                }
            }
            const __m512i s0 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + g * 16)));
            const __m512i s1 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + (8 + g) * 16)));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                i32[t] = _mm512_add_epi32(i32[t], _mm512_add_epi32(_mm512_mullo_epi32(sa[t], s0),
                                                                   _mm512_mullo_epi32(sb[t], s1)));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + WGLLM_REPACK_Q6_K_D)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(pre->dx[b][t])), _mm512_cvtepi32_ps(i32[t]), acc[t]);
    }
    store_tile(acc, T, y, ldy, accumulate);
}

#define PANEL_6_T(T)                                                                                        \
    static void panel_q6_K_t##T(const uint8_t *pd, int64_t nb, const char *x, size_t xs,                   \
                                const struct wgllm_repack_pre_k *pre, float *y, int ldy, bool accumulate) {         \
        panel_q6_K(pd, nb, x, xs, pre, T, y, ldy, accumulate);                                              \
    }
/* One token: the high-bit vector w serves vectors w and w+16, whose four
 * sub-blocks are four independent vpdpbusd chains (exact integer sums, so
 * the loop order does not change the result). */
static void panel_q6_K_t1(const uint8_t *pd, int64_t nb, const char *x, size_t xs, const struct wgllm_repack_pre_k *pre,
                          float *y, int ldy, bool accumulate) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * WGLLM_REPACK_Q6_K_RECORD;
        const int8_t *a = ((const wgllm_block_q8_K *)x)[b].qs;
        __m512i i32 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            /* sub-blocks g, 4+g (low nibbles of v = w, w+16), 8+g, 12+g (high) */
            const int16_t *bs = ((const wgllm_block_q8_K *)x)[b].bsums; /* the quants are stored +32 */
            __m512i s0 = _mm512_set1_epi32(-32 * bs[g]), s1 = _mm512_set1_epi32(-32 * bs[4 + g]);
            __m512i s2 = _mm512_set1_epi32(-32 * bs[8 + g]), s3 = _mm512_set1_epi32(-32 * bs[12 + g]);
#pragma GCC unroll 4
            for (int w = 4 * g; w < 4 * g + 4; w++) {
                const uint8_t *q = rec + 192 * w; /* low-bit vectors w, w+16, high-bit vector w */
                const __m512i n0 = _mm512_load_si512((const void *)q);
                const __m512i n1 = _mm512_load_si512((const void *)(q + 64));
                const __m512i hb = _mm512_load_si512((const void *)(q + 128));
                _mm_prefetch((const char *)(q + PF), _MM_HINT_T0);
                _mm_prefetch((const char *)(q + 64 + PF), _MM_HINT_T0);
                _mm_prefetch((const char *)(q + 128 + PF), _MM_HINT_T0);
                const __m512i lo0 = _mm512_or_si512(_mm512_and_si512(n0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
                const __m512i hi0 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n0, 4), m4), _mm512_and_si512(hb, m30));
                const __m512i lo1 = _mm512_or_si512(_mm512_and_si512(n1, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
                const __m512i hi1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(n1, 4), m4),
                                                    _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
                s0 = _mm512_dpbusd_epi32(s0, lo0, bcast32(a + 4 * w));
                s1 = _mm512_dpbusd_epi32(s1, lo1, bcast32(a + 64 + 4 * w));
                s2 = _mm512_dpbusd_epi32(s2, hi0, bcast32(a + 128 + 4 * w));
                s3 = _mm512_dpbusd_epi32(s3, hi1, bcast32(a + 192 + 4 * w));
            }
            const __m512i c0 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + g * 16)));
            const __m512i c1 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + (4 + g) * 16)));
            const __m512i c2 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + (8 + g) * 16)));
            const __m512i c3 = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_Q6_K_SCALES + (12 + g) * 16)));
            i32 = _mm512_add_epi32(i32, _mm512_add_epi32(_mm512_add_epi32(_mm512_mullo_epi32(s0, c0), _mm512_mullo_epi32(s1, c1)),
                                                         _mm512_add_epi32(_mm512_mullo_epi32(s2, c2), _mm512_mullo_epi32(s3, c3))));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + WGLLM_REPACK_Q6_K_D)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(pre->dx[b][0])), _mm512_cvtepi32_ps(i32), acc);
    }
    store_tile(&acc, 1, y, 0, accumulate);
}
PANEL_6_T(2)
PANEL_6_T(3)
PANEL_6_T(4)
static const wgllm_repack_panel_k_fn panels_q6_K[TILE + 1] = {NULL, panel_q6_K_t1, panel_q6_K_t2, panel_q6_K_t3, panel_q6_K_t4};


/* ---- IQ4_XS -------------------------------------------------------------- */

/* One IQ4_XS panel times T tokens: vpdpbusd on the table values + 128 (u8),
 * each sub-block's sum starting from -128 * its activation sum. */
static ALWAYS_INLINE void panel_iq4_xs(const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                       const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy, bool accumulate) {
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const __m512i lut = _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl)), _mm512_set1_epi8((char)0x80));
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * WGLLM_REPACK_IQ4_XS_RECORD;
        const int8_t *a[TILE];
        __m512i i32[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_K *)(x + (size_t)t * xs))[b].qs;
            i32[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m512i sa[TILE];
            /* -128 * (sum of the sub-block's 32 activations): the int16 pair of bsum2 */
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const int32_t p2 = pre->bsum2[b][s / 2][t];
                sa[t] = _mm512_set1_epi32(-128 * (int32_t)(int16_t)(s & 1 ? (uint32_t)p2 >> 16 : (uint32_t)p2 & 0xFFFF));
            }
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                const __m512i v = _mm512_load_si512((const void *)(rec + (4 * s + m) * 64));
                _mm_prefetch((const char *)(rec + (4 * s + m) * 64 + PF), _MM_HINT_T0);
                const __m512i wl = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, mask));
                const __m512i wh = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask));
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    sa[t] = _mm512_dpbusd_epi32(sa[t], wl, bcast32(a[t] + 32 * s + 4 * m));
                    sa[t] = _mm512_dpbusd_epi32(sa[t], wh, bcast32(a[t] + 32 * s + 16 + 4 * m));
                }
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_IQ4_XS_SCALES + s * 16)));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) i32[t] = _mm512_add_epi32(i32[t], _mm512_mullo_epi32(sa[t], sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + WGLLM_REPACK_IQ4_XS_D)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(pre->dx[b][t])), _mm512_cvtepi32_ps(i32[t]), acc[t]);
    }
    store_tile(acc, T, y, ldy, accumulate);
}

#define PANEL_XS_T(T)                                                                                       \
    static void panel_iq4_xs_t##T(const uint8_t *pd, int64_t nb, const char *x, size_t xs,                 \
                                  const struct wgllm_repack_pre_k *pre, float *y, int ldy, bool accumulate) {       \
        panel_iq4_xs(pd, nb, x, xs, pre, T, y, ldy, accumulate);                                            \
    }
PANEL_XS_T(1)
PANEL_XS_T(2)
PANEL_XS_T(3)
PANEL_XS_T(4)
static const wgllm_repack_panel_k_fn panels_iq4_xs[TILE + 1] = {NULL, panel_iq4_xs_t1, panel_iq4_xs_t2, panel_iq4_xs_t3,
                                                   panel_iq4_xs_t4};

/* ---- Q2_K and Q3_K ---------------------------------------------------------- */

/* One Q2_K (three false) or Q3_K panel times T tokens. Per sub-block pair p
 * (sub-blocks 2p, 2p + 1: vectors 8h..8h+3 and 8h+4..8h+7 at shift 2g,
 * p = 4h + g) two vpdpbusd chains give the exact dots (Q3_K: the high bit
 * added as 4, each chain starting from -4 * its bsum); they fit int16
 * (16 * 3 * 128; 16 * 4 * 128), so one vpmaddwd of the pair packed in 16-bit
 * halves by the rows' two scales adds both scaled sums, and for Q2_K one more
 * the mins times the activations' bsums. */
static ALWAYS_INLINE void panel_q23_K(const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                      const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy, bool accumulate,
                                      bool three) {
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4), low4 = _mm512_set1_epi16(0x0F),
                  lo16 = _mm512_set1_epi32(0xFFFF);
    const size_t REC = three ? WGLLM_REPACK_Q3_K_RECORD : WGLLM_REPACK_Q2_K_RECORD;
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * REC;
        for (size_t o = 0; o < REC; o += 64) _mm_prefetch((const char *)(rec + o + PF), _MM_HINT_T0);
        const wgllm_block_q8_K *xb[TILE];
        __m512i i32[TILE], m32[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            xb[t] = (const wgllm_block_q8_K *)(x + (size_t)t * xs) + b;
            i32[t] = m32[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const int h = p / 4, g = p % 4, hs = 4 * h + g; /* Q3_K: the high bits' bit */
            /* The 2-bit fields in place, 4^g times their value, where that fits a u8
             * (Q2_K: 3 * 64; Q3_K with its high bit: 7 * 16, so not for g = 3), and
             * the chains' exact sums shifted back once below: a shift per chain
             * instead of one per vector, as the shifts share port 0 with vpdpbusd
             * (one-thread Q2_K mat-vec from L2: 27.5 -> 34.5 GB/s) */
            const bool in_place = !three || g < 3;
            const int sh = in_place ? 2 * g : 0;
            __m512i sa[TILE], sb[TILE];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                if (three) { /* the values are stored + 4 */
                    sa[t] = _mm512_set1_epi32(-4 * (int32_t)xb[t]->bsums[2 * p] * (1 << sh));
                    sb[t] = _mm512_set1_epi32(-4 * (int32_t)xb[t]->bsums[2 * p + 1] * (1 << sh));
                } else {
                    sa[t] = sb[t] = _mm512_setzero_si512();
                }
            }
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const __m512i v = _mm512_load_si512((const void *)(rec + 64 * (8 * h + m)));
                __m512i w = in_place ? _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << sh)))
                                     : _mm512_and_si512(_mm512_srli_epi16(v, (unsigned)(2 * g)), m3);
                if (three) {
                    const __m512i hb = _mm512_load_si512((const void *)(rec + WGLLM_REPACK_Q3_K_HIGH + 64 * m));
                    if (in_place) { /* 4 << sh where bit hs is set (a test on port 5, no shift) */
                        const __mmask64 hk = _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << hs)));
                        w = _mm512_mask_add_epi8(w, hk, w, _mm512_set1_epi8((char)(4 << sh)));
                    } else { /* bit hs of each byte to bit 2 (16-bit shifts of at most 5 keep each byte's own bit there) */
                        const __m512i hv = hs >= 2 ? _mm512_srli_epi16(hb, (unsigned)(hs - 2)) : _mm512_slli_epi16(hb, (unsigned)(2 - hs));
                        w = _mm512_ternarylogic_epi32(w, hv, m4, 0xF8); /* w | (hv & 4) */
                    }
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m512i a = bcast32(xb[t]->qs + 128 * h + 32 * g + 4 * m);
                    if (m < 4) sa[t] = _mm512_dpbusd_epi32(sa[t], w, a);
                    else sb[t] = _mm512_dpbusd_epi32(sb[t], w, a);
                }
            }
            const __m256i sc8 = _mm256_load_si256((const __m256i *)(rec + (three ? WGLLM_REPACK_Q3_K_SCALES : WGLLM_REPACK_Q2_K_SCALES) + 32 * p));
            /* Q3_K: signed scales; Q2_K: scale | min << 4 */
            const __m512i sc = three ? _mm512_cvtepi8_epi16(sc8) : _mm512_cvtepu8_epi16(sc8);
            const __m512i sp = three ? sc : _mm512_and_si512(sc, low4), mp = _mm512_srli_epi16(sc, 4);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                if (sh) { /* exact: multiples of 4^g */
                    sa[t] = _mm512_srai_epi32(sa[t], (unsigned)sh);
                    sb[t] = _mm512_srai_epi32(sb[t], (unsigned)sh);
                }
                /* (sa & 0xFFFF) | sb << 16 */
                const __m512i pair = _mm512_ternarylogic_epi32(sa[t], _mm512_slli_epi32(sb[t], 16), lo16, 0xEC);
                i32[t] = _mm512_add_epi32(i32[t], _mm512_madd_epi16(pair, sp));
                if (!three) {
                    int32_t bp; /* bsums[2p] | bsums[2p + 1] << 16 */
                    memcpy(&bp, xb[t]->bsums + 2 * p, sizeof(bp));
                    m32[t] = _mm512_add_epi32(m32[t], _mm512_madd_epi16(mp, _mm512_set1_epi32(bp)));
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + (three ? WGLLM_REPACK_Q3_K_D : WGLLM_REPACK_Q2_K_D))));
        const __m512 dm = three ? d : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + WGLLM_REPACK_Q2_K_DMIN)));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 dx = _mm512_set1_ps(pre->dx[b][t]);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i32[t]), acc[t]);
            if (!three) acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(m32[t]), acc[t]);
        }
    }
    store_tile(acc, T, y, ldy, accumulate);
}

PANEL_K_T(q2_K, 1, panel_q23_K, false)
PANEL_K_T(q2_K, 2, panel_q23_K, false)
PANEL_K_T(q2_K, 3, panel_q23_K, false)
PANEL_K_T(q2_K, 4, panel_q23_K, false)
PANEL_K_T(q3_K, 1, panel_q23_K, true)
PANEL_K_T(q3_K, 2, panel_q23_K, true)
PANEL_K_T(q3_K, 3, panel_q23_K, true)
PANEL_K_T(q3_K, 4, panel_q23_K, true)
static const wgllm_repack_panel_k_fn panels_q2_K[TILE + 1] = {NULL, panel_q2_K_t1, panel_q2_K_t2, panel_q2_K_t3, panel_q2_K_t4};
static const wgllm_repack_panel_k_fn panels_q3_K[TILE + 1] = {NULL, panel_q3_K_t1, panel_q3_K_t2, panel_q3_K_t3, panel_q3_K_t4};

void wgllm_repacked_matmul_avx512(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                  size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    if (wgllm_repack_is_k(w->type)) {
        wgllm_repack_drive_k(w, r0, r1, x, x_stride, n, y, ldy, accumulate,
                             w->type == WGLLM_TYPE_Q4_K   ? panels_q4_K
                             : w->type == WGLLM_TYPE_Q5_K ? panels_q5_K
                             : w->type == WGLLM_TYPE_Q6_K ? panels_q6_K
                             : w->type == WGLLM_TYPE_Q2_K ? panels_q2_K
                             : w->type == WGLLM_TYPE_Q3_K ? panels_q3_K
                                                          : panels_iq4_xs);
        return;
    }
    const uint32_t type = w->type;
    WGLLM_ASSERT(type == WGLLM_TYPE_Q4_0 || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_IQ4_NL ||
                 type == WGLLM_TYPE_Q5_0 || type == WGLLM_TYPE_Q4_1 || type == WGLLM_TYPE_Q5_1);
    const int64_t nb = w->ne0 / 32;
    WGLLM_ASSERT(nb <= WGLLM_REPACK_MAX_BLOCKS);
    const size_t panel = wgllm_repack_panel_bytes(type, w->ne0), sb = wgllm_repack_quant_offset(type, w->ne0);
    const panel_fn *fns = WGLLM_REPACK_PANELS_OF(type, panels_);
    const int32_t bias = type == WGLLM_TYPE_Q4_0 ? 8 : type == WGLLM_TYPE_Q5_0 ? 16 : 128;
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
    /* panels per L2-resident group; a single tile of tokens needs no grouping */
    const int64_t group = n <= TILE ? WGLLM_MAX(1, p1 - p0) : WGLLM_MAX(1, (int64_t)(1 << 20) / (int64_t)panel);
    struct tile_pre pre;
    for (int64_t g0 = p0; g0 < p1; g0 += group) {
        const int64_t g1 = WGLLM_MIN(p1, g0 + group);
        for (int t0 = 0; t0 < n; t0 += TILE) {
            const int T = WGLLM_MIN(TILE, n - t0);
            const char *xt = (const char *)x + (size_t)t0 * x_stride;
            if (wgllm_repack_has_min(type)) tile_prepare_q8_1(xt, x_stride, T, nb, &pre);
            else tile_prepare(xt, x_stride, T, nb, bias, &pre);
            for (int64_t p = g0; p < g1; p++)
                fns[T]((const uint8_t *)w->data + (size_t)p * panel, sb, nb, xt, x_stride, &pre,
                       y + (size_t)t0 * ldy + p * WGLLM_REPACK_ROWS, ldy, accumulate);
        }
    }
}

#endif
