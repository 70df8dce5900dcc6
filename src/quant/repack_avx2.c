/*
 * repack_avx2.c - AVX2/FMA/F16C products over the interleaved Q4_0/Q4_1/Q5_0/
 * Q5_1/Q8_0/IQ4_NL/Q4_K/IQ4_XS layout (repack.h), for CPUs without AVX-512
 * VNNI (Q5_K and Q6_K are repacked only where AVX-512 VNNI is: at 256 bits
 * their repacked products measured no faster than the per-row kernels, or
 * slower). A 64-byte weight vector is read as two 8-row halves, each panel
 * in two passes (rows 0-7, 8-15), one pass for a single token.
 * Without vpdpbusd, bytes are multiplied with vpmaddubsw:
 *   Q4_0: nibbles (0..15) x activation bytes; the int16 pair sums of a whole
 *         block fit (8 x 2 x 15 x 128 < 32768), so they add up in int16 and
 *         widen once per block; then -8*sum(x) is added; Q4_1, Q5_0, Q5_1
 *         and IQ4_NL go through the same routine (half_nib, which says how);
 *   Q8_0: |w| x (x with w's sign) (the stored w+128 is flipped back to w), a
 *         pair sum fits int16 (2 x 128 x 127) and is widened at once; this
 *         relies on activations in [-127, 127], which the Q8_0 quantizer gives;
 *   Q4_K: nibbles x Q8_K bytes ([-127, 127] too); a sub-block's int16 pair
 *         sums fit (8 x 2 x 15 x 127 < 32768) and are widened by one
 *         vpmaddwd with the rows' 6-bit scales (both int16 halves of a lane
 *         hold the scale); the mins times the activation's 32-element sums
 *         likewise, two sub-blocks per vpmaddwd;
 *   IQ4_XS: as IQ4_NL, each pair sum widened by a vpmaddwd with the row's
 *         sub-block scale instead of ones.
 */
#include "quant/repack.h"

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TILE 4
#define PF 2048 /* software prefetch distance (bytes), as in repack_avx512.c */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Per block, per token of the tile: the integer correction (Q4_0: -8*sum(x),
 * Q5_0: -16*sum(x)) and the scale. Q4_1 and Q5_1 have no correction but
 * the Q8_1 block's s, which the row's min multiplies, in its place (the
 * struct stays at 64 KiB of stack). */
struct tile_pre {
    union {
        int32_t corr[WGLLM_REPACK_MAX_BLOCKS][TILE];
        float sx[WGLLM_REPACK_MAX_BLOCKS][TILE];
    };
    float dx[WGLLM_REPACK_MAX_BLOCKS][TILE];
};

static ALWAYS_INLINE __m256i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm256_set1_epi32(v);
}

/* The float accumulators of NH halves x T tokens, zeroed. */
static ALWAYS_INLINE void zero_acc(__m256 acc[2][TILE], int NH, int T) {
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[h][t] = _mm256_setzero_ps();
}

/* Q8_0 activations: the scales, and corr = -bias * sum(qs) (from
 * sad(qs ^ 0x80, 0) = sum(qs) + 32*128) when bias is not 0. */
static void tile_prepare(const char *x, size_t xs, int T, int64_t nb, int32_t bias, struct tile_pre *pre) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < T; t++) {
        const wgllm_block_q8_0 *xb = (const wgllm_block_q8_0 *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            pre->dx[b][t] = wgllm_fp16_lookup(xb[b].d);
            if (!bias) continue;
            const __m256i q = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)xb[b].qs), flip);
            const __m256i s = _mm256_sad_epu8(q, _mm256_setzero_si256());
            __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s2 = _mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2));
            pre->corr[b][t] = -bias * (_mm_cvtsi128_si32(s2) - 32 * 128);
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

static ALWAYS_INLINE void store_half(const __m256 *acc, int T, float *y, int ldy, bool accumulate) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *d = y + (size_t)t * ldy;
        _mm256_storeu_ps(d, accumulate ? _mm256_add_ps(_mm256_loadu_ps(d), acc[t]) : acc[t]);
    }
}

/* Rows 8h..8h+7 of one panel times T tokens, for a format of nibble vectors
 * (`kind`, a constant where inlined), as repack_avx512.c's panel_nib:
 *   Q4_0, Q4_1: nibbles 0..15 (u8) x activations with vpmaddubsw; a whole
 *     block's int16 pair sums fit (8 x 2 x 15 x 128 < 32768) and widen once;
 *   Q5_0, Q5_1: 16 added where the fifth-bit vector says (values 0..31);
 *     the int16 sums of two vectors (4 x 2 x 31 x 128 < 32768) widen at once;
 *   IQ4_NL: a nibble looked up as its signed value w (-127..113) by vpshufb,
 *     multiplied as |w| x (x with w's sign), as the Q8_0 path does: a pair
 *     fits (2 x 127 x 127, activations in [-127, 127] as the quantizer makes
 *     them) but two do not, so each widens at once. That integer is the
 *     layout's sum((w+128)*x) - 128*sum(x) exactly, so no correction;
 *   Q4_0, Q5_0 then add -8*sum(x), -16*sum(x); Q4_1, Q5_1 add the row's min
 *     times the Q8_1 block's s as a second FMA.
 * The integer sums are exact, so the floats are the reference's. */
enum { NIB_Q4_0, NIB_IQ4_NL, NIB_Q5_0, NIB_Q4_1, NIB_Q5_1 };
static ALWAYS_INLINE void half_nib(const uint8_t *pd, size_t sb, int64_t nb, int h0, int NH, const char *x,
                                   size_t xs, const struct tile_pre *pre, int T, float *y, int ldy, bool accumulate,
                                   int kind) {
    const __m256i mask = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16), ones = _mm256_set1_epi16(1);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl));
    const bool five = kind == NIB_Q5_0 || kind == NIB_Q5_1, min = kind == NIB_Q4_1 || kind == NIB_Q5_1;
    const bool nl = kind == NIB_IQ4_NL, corr = kind == NIB_Q4_0 || kind == NIB_Q5_0;
    const size_t qb = five ? 320 : 256;
    const uint8_t *mins = pd + wgllm_repack_scale_bytes(nb * 32); /* Q4_1, Q5_1 */
    __m256 acc[2][TILE];
    zero_acc(acc, NH, T);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = pd + sb + b * qb + h0 * 32;
        /* fifth bits: those of the high nibbles of vector m at bit 4+m (hb),
         * of the low nibbles moved there too (hb4: bit m << 4) */
        __m256i hb[2], hb4[2];
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            hb[h] = five ? _mm256_load_si256((const __m256i *)(q + 256 + 32 * h)) : mask;
            hb4[h] = _mm256_slli_epi16(hb[h], 4);
        }
        const int8_t *a[TILE];
        __m256i s16[2][TILE], i32[2][TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const char *xt = x + (size_t)t * xs;
            a[t] = min ? ((const wgllm_block_q8_1 *)xt)[b].qs : ((const wgllm_block_q8_0 *)xt)[b].qs;
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) s16[h][t] = i32[h][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            _mm_prefetch((const char *)(q + 64 * m + PF), _MM_HINT_T0);
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + 64 * m + 32 * h));
                __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                if (nl) {
                    lo = _mm256_shuffle_epi8(table, lo);
                    hi = _mm256_shuffle_epi8(table, hi);
                    const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast32(a[t] + 4 * m), lo));
                        const __m256i ph =
                            _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast32(a[t] + 16 + 4 * m), hi));
                        i32[h][t] = _mm256_add_epi32(
                            i32[h][t], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
                    }
                    continue;
                }
                if (five) { /* a set bit (16 << m after the mask) becomes 16 */
                    const __m256i bit = _mm256_set1_epi8((char)(16 << m));
                    lo = _mm256_or_si256(lo, _mm256_min_epu8(_mm256_and_si256(hb4[h], bit), sixteen));
                    hi = _mm256_or_si256(hi, _mm256_min_epu8(_mm256_and_si256(hb[h], bit), sixteen));
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    s16[h][t] = _mm256_add_epi16(s16[h][t], _mm256_maddubs_epi16(lo, bcast32(a[t] + 4 * m)));
                    s16[h][t] = _mm256_add_epi16(s16[h][t], _mm256_maddubs_epi16(hi, bcast32(a[t] + 16 + 4 * m)));
                }
                if (five && (m & 1)) {
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_madd_epi16(s16[h][t], ones));
                        s16[h][t] = _mm256_setzero_si256();
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            const __m256 ws = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(pd + b * 32 + (h0 + h) * 16)));
            const __m256 wm =
                min ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(mins + b * 32 + (h0 + h) * 16))) : ws;
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                if (!nl && !five) i32[h][t] = _mm256_madd_epi16(s16[h][t], ones);
                if (corr) i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_set1_epi32(pre->corr[b][t]));
                const __m256 d = _mm256_mul_ps(ws, _mm256_set1_ps(pre->dx[b][t]));
                acc[h][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(i32[h][t]), acc[h][t]);
                if (min) acc[h][t] = _mm256_fmadd_ps(wm, _mm256_set1_ps(pre->sx[b][t]), acc[h][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) store_half(acc[h], T, y + (h0 + h) * 8, ldy, accumulate);
}
static ALWAYS_INLINE void half_q8_0(const uint8_t *pd, size_t sb, int64_t nb, int h0, int NH, const char *x,
                                    size_t xs, const struct tile_pre *pre, int T, float *y, int ldy, bool accumulate) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256 acc[2][TILE];
    zero_acc(acc, NH, T);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = pd + sb + b * 512 + h0 * 32;
        const int8_t *a[TILE];
        __m256i i32[2][TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_0 *)(x + (size_t)t * xs))[b].qs;
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) i32[h][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            _mm_prefetch((const char *)(q + 64 * g + PF), _MM_HINT_T0);
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) {
                const __m256i sw = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(q + 64 * g + 32 * h)), flip);
                const __m256i aw = _mm256_abs_epi8(sw);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(a[t] + 4 * g), sw));
                    i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_madd_epi16(p, ones));
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            const __m256 ws = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(pd + b * 32 + (h0 + h) * 16)));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const __m256 d = _mm256_mul_ps(ws, _mm256_set1_ps(pre->dx[b][t]));
                acc[h][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(i32[h][t]), acc[h][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) store_half(acc[h], T, y + (h0 + h) * 8, ldy, accumulate);
}

typedef void (*panel_fn)(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,
                         const struct tile_pre *pre, float *y, int ldy, bool accumulate);

/* One function per format and tile size (the tables below), so that T is a constant inside.
 * Several tokens: a panel is its two 8-row halves one after the other (the accumulators of
 * both would not fit the 16 registers). One token (a decode): both halves in one pass, so
 * each 64-byte line of weights is used whole as it arrives; in two passes the first used
 * half of each line and the second found the panel in L2 while the memory bus idled
 * (decode 0.8x the native llama.cpp's bandwidth). */
#define PANEL_T(name, T, half, ...)                                                                           \
    static void name(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs, const struct tile_pre *pre, \
                     float *y, int ldy, bool accumulate) {                                                    \
        if (T == 1) {                                                                                         \
            half(pd, sb, nb, 0, 2, x, xs, pre, T, __VA_ARGS__);                                              \
            return;                                                                                           \
        }                                                                                                     \
        half(pd, sb, nb, 0, 1, x, xs, pre, T, __VA_ARGS__);                                                  \
        half(pd, sb, nb, 1, 1, x, xs, pre, T, __VA_ARGS__);                                                  \
    }
#define PANELS_NIB(fmt, kind)                                                                 \
    PANEL_T(panel_##fmt##_t1, 1, half_nib, y, ldy, accumulate, kind)                          \
    PANEL_T(panel_##fmt##_t2, 2, half_nib, y, ldy, accumulate, kind)                          \
    PANEL_T(panel_##fmt##_t3, 3, half_nib, y, ldy, accumulate, kind)                          \
    PANEL_T(panel_##fmt##_t4, 4, half_nib, y, ldy, accumulate, kind)
PANELS_NIB(q4_0, NIB_Q4_0)
PANELS_NIB(iq4_nl, NIB_IQ4_NL)
PANELS_NIB(q5_0, NIB_Q5_0)
PANELS_NIB(q4_1, NIB_Q4_1)
PANELS_NIB(q5_1, NIB_Q5_1)
PANEL_T(panel_q8_0_t1, 1, half_q8_0, y, ldy, accumulate)
PANEL_T(panel_q8_0_t2, 2, half_q8_0, y, ldy, accumulate)
PANEL_T(panel_q8_0_t3, 3, half_q8_0, y, ldy, accumulate)
PANEL_T(panel_q8_0_t4, 4, half_q8_0, y, ldy, accumulate)

static const panel_fn panels_q4_0[TILE + 1] = {NULL, panel_q4_0_t1, panel_q4_0_t2, panel_q4_0_t3, panel_q4_0_t4};
static const panel_fn panels_q8_0[TILE + 1] = {NULL, panel_q8_0_t1, panel_q8_0_t2, panel_q8_0_t3, panel_q8_0_t4};
static const panel_fn panels_iq4_nl[TILE + 1] = {NULL, panel_iq4_nl_t1, panel_iq4_nl_t2, panel_iq4_nl_t3, panel_iq4_nl_t4};
static const panel_fn panels_q5_0[TILE + 1] = {NULL, panel_q5_0_t1, panel_q5_0_t2, panel_q5_0_t3, panel_q5_0_t4};
static const panel_fn panels_q4_1[TILE + 1] = {NULL, panel_q4_1_t1, panel_q4_1_t2, panel_q4_1_t3, panel_q4_1_t4};
static const panel_fn panels_q5_1[TILE + 1] = {NULL, panel_q5_1_t1, panel_q5_1_t2, panel_q5_1_t3, panel_q5_1_t4};

/* ---- Q4_K ---------------------------------------------------------------- */

#define QK WGLLM_QK_K


/* 8 rows' 6-bit scales (bytes) -> int16 pairs (s, s) per 32-bit lane */
static ALWAYS_INLINE __m256i scale_pairs(const uint8_t *p) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

/* Rows 8h0.. of NH 8-row halves of one Q4_K panel times T tokens (PANEL_T says why
 * a decode takes both halves at once). */
/* The 256-element kernels' per-super-block start: each token's Q8_K bytes of
 * block b, and zeroed integer sums. */
static ALWAYS_INLINE void k_block_start(const char *x, size_t xs, int64_t b, int T, int NH, const int8_t **a,
                                        __m256i i32[2][TILE]) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        a[t] = ((const wgllm_block_q8_K *)(x + (size_t)t * xs))[b].qs;
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) i32[h][t] = _mm256_setzero_si256();
    }
}

/* Sub-blocks 2c, 2c+1 of one Q4_K record for rows 8h0.. of NH halves:
 * i32 += scale * (their nibbles x the activations). */
static ALWAYS_INLINE void chunk_q4_K(const uint8_t *rec, int c, int h0, int NH, const int8_t *const *a, int T,
                                     __m256i i32[2][TILE]) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const size_t qb = 2048;
    __m256i lo16[2][TILE], hi16[2][TILE];
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) lo16[h][t] = hi16[h][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        const uint8_t *q = rec + wgllm_repack_k45_low(false, c, m) + h0 * 32;
        _mm_prefetch((const char *)(q + PF), _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            const __m256i v = _mm256_load_si256((const __m256i *)(q + 32 * h));
            const __m256i lo = _mm256_and_si256(v, mask);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                lo16[h][t] =
                    _mm256_add_epi16(lo16[h][t], _mm256_maddubs_epi16(lo, bcast32(a[t] + 64 * c + 4 * m)));
                hi16[h][t] = _mm256_add_epi16(hi16[h][t],
                                              _mm256_maddubs_epi16(hi, bcast32(a[t] + 64 * c + 32 + 4 * m)));
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) {
        const __m256i s0 = scale_pairs(rec + qb + (2 * c) * 16 + (h0 + h) * 8);
        const __m256i s1 = scale_pairs(rec + qb + (2 * c + 1) * 16 + (h0 + h) * 8);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_add_epi32(_mm256_madd_epi16(lo16[h][t], s0),
                                                                     _mm256_madd_epi16(hi16[h][t], s1)));
    }
}

static ALWAYS_INLINE void half_q4_K(const uint8_t *pd, int64_t nb, int h0, int NH, const char *x, size_t xs,
                                    const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy, bool accumulate) {
    const size_t rs = WGLLM_REPACK_Q4_K_RECORD, qb = 2048;
    __m256 acc[2][TILE];
    zero_acc(acc, NH, T);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * rs;
        const int8_t *a[TILE];
        __m256i i32[2][TILE];
        k_block_start(x, xs, b, T, NH, a, i32);
        /* unrolled for a decode (the two halves' products fit the registers); for
         * four tokens unrolled, GCC parked the int16 sums on the stack */
        if (NH == 2) {
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) chunk_q4_K(rec, c, h0, NH, a, T, i32);
        } else {
#pragma GCC unroll 1
            for (int c = 0; c < 4; c++) chunk_q4_K(rec, c, h0, NH, a, T, i32);
        }
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            const int hh = h0 + h;
            __m256i mn[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                mn[k] = _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(rec + qb + 128 + k * 32 + hh * 16)));
            const __m256 d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(rec + qb + 256 + hh * 16)));
            const __m256 dm = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(rec + qb + 288 + hh * 16)));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                __m256i m32 = _mm256_madd_epi16(mn[0], _mm256_set1_epi32(pre->bsum2[b][0][t]));
#pragma GCC unroll 4
                for (int k = 1; k < 4; k++)
                    m32 = _mm256_add_epi32(m32, _mm256_madd_epi16(mn[k], _mm256_set1_epi32(pre->bsum2[b][k][t])));
                const __m256 dx = _mm256_set1_ps(pre->dx[b][t]);
                acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i32[h][t]), acc[h][t]);
                acc[h][t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(m32), acc[h][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) store_half(acc[h], T, y + (h0 + h) * 8, ldy, accumulate);
}




/* ---- IQ4_XS -------------------------------------------------------------- */

/* 8 rows' int8 scales (bytes, -32..31) -> int16 pairs (s, s) per 32-bit lane */
static ALWAYS_INLINE __m256i scale_pairs_signed(const uint8_t *p) {
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
}

/* Rows 8h0.. of NH 8-row halves of one IQ4_XS panel times T tokens. The
 * table values are signed, so as IQ4_NL's: |w| x (x with w's sign), one
 * pair sum fitting int16; the vpmaddwd that widens it multiplies by the
 * row's sub-block scale at once (|pair| x 32 < 2^21, a super-block's sum
 * < 2^28), giving the reference's sum_s scale_s * dot_s exactly. */
static ALWAYS_INLINE void half_iq4_xs(const uint8_t *pd, int64_t nb, int h0, int NH, const char *x, size_t xs,
                                      const struct wgllm_repack_pre_k *pre, int T, float *y, int ldy,
                                      bool accumulate) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl));
    __m256 acc[2][TILE];
    zero_acc(acc, NH, T);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pd + (size_t)b * WGLLM_REPACK_IQ4_XS_RECORD;
        const int8_t *a[TILE];
        __m256i i32[2][TILE];
        k_block_start(x, xs, b, T, NH, a, i32);
        for (int s = 0; s < 8; s++) { /* s and m not unrolled: GCC then parked the products on the stack */
            __m256i sc[2];
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) sc[h] = scale_pairs_signed(rec + WGLLM_REPACK_IQ4_XS_SCALES + s * 16 + (h0 + h) * 8);
#pragma GCC unroll 1
            for (int m = 0; m < 4; m++) {
                const uint8_t *q = rec + (4 * s + m) * 64 + h0 * 32;
                _mm_prefetch((const char *)(q + PF), _MM_HINT_T0);
#pragma GCC unroll 2
                for (int h = 0; h < NH; h++) {
                    const __m256i v = _mm256_load_si256((const __m256i *)(q + 32 * h));
                    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, mask));
                    const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
                    const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const __m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast32(a[t] + 32 * s + 4 * m), lo));
                        const __m256i ph =
                            _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast32(a[t] + 32 * s + 16 + 4 * m), hi));
                        i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_madd_epi16(pl, sc[h]));
                        i32[h][t] = _mm256_add_epi32(i32[h][t], _mm256_madd_epi16(ph, sc[h]));
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++) {
            const __m256 d =
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(rec + WGLLM_REPACK_IQ4_XS_D + (h0 + h) * 16)));
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
                acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(pre->dx[b][t])),
                                            _mm256_cvtepi32_ps(i32[h][t]), acc[h][t]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) store_half(acc[h], T, y + (h0 + h) * 8, ldy, accumulate);
}

/* The 256-element formats' panel functions, one per tile size (PANEL_T says
 * why a decode takes both halves at once). */
#define PANEL_K_T(fmt, T)                                                                                   \
    static void panel_##fmt##_t##T(const uint8_t *pd, int64_t nb, const char *x, size_t xs,                \
                                   const struct wgllm_repack_pre_k *pre, float *y, int ldy, bool accumulate) {      \
        if (T == 1) {                                                                                       \
            half_##fmt(pd, nb, 0, 2, x, xs, pre, T, y, ldy, accumulate);                                    \
            return;                                                                                         \
        }                                                                                                   \
        half_##fmt(pd, nb, 0, 1, x, xs, pre, T, y, ldy, accumulate);                                        \
        half_##fmt(pd, nb, 1, 1, x, xs, pre, T, y, ldy, accumulate);                                        \
    }
#define PANELS_K(fmt) PANEL_K_T(fmt, 1) PANEL_K_T(fmt, 2) PANEL_K_T(fmt, 3) PANEL_K_T(fmt, 4)                  \
    static const wgllm_repack_panel_k_fn panels_##fmt[TILE + 1] = {NULL, panel_##fmt##_t1, panel_##fmt##_t2,   \
                                                                   panel_##fmt##_t3, panel_##fmt##_t4};
PANELS_K(q4_K)
PANELS_K(iq4_xs)

void wgllm_repacked_matmul_avx2(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    if (w->type == WGLLM_TYPE_Q4_K || w->type == WGLLM_TYPE_IQ4_XS) {
        wgllm_repack_drive_k(w, r0, r1, x, x_stride, n, y, ldy, accumulate,
                             w->type == WGLLM_TYPE_Q4_K ? panels_q4_K : panels_iq4_xs);
        return;
    }
    const uint32_t type = w->type;
    WGLLM_ASSERT(type == WGLLM_TYPE_Q4_0 || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_IQ4_NL ||
                 type == WGLLM_TYPE_Q5_0 || type == WGLLM_TYPE_Q4_1 || type == WGLLM_TYPE_Q5_1);
    const int64_t nb = w->ne0 / 32;
    WGLLM_ASSERT(nb <= WGLLM_REPACK_MAX_BLOCKS);
    const size_t panel = wgllm_repack_panel_bytes(type, w->ne0), sb = wgllm_repack_quant_offset(type, w->ne0);
    const panel_fn *fns = WGLLM_REPACK_PANELS_OF(type, panels_);
    /* IQ4_NL's and Q8_0's products are signed already (no correction) */
    const int32_t bias = type == WGLLM_TYPE_Q4_0 ? 8 : type == WGLLM_TYPE_Q5_0 ? 16 : 0;
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
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
