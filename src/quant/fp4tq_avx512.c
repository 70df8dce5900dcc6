/*
 * fp4tq_avx512.c - AVX-512 (F/BW/VL/VNNI) dots of MXFP4 (with Q8_0) and
 * TQ1_0 / TQ2_0 (with Q8_K), installed over the AVX2 ones when the CPU has
 * VNNI: vpdpbusd multiplies unsigned by signed bytes, so MXFP4's signed
 * table values go in as |v| with v's sign moved onto y, and the ternary
 * formats' unsigned trits (0..2) go in directly, sum(y) subtracted after.
 *
 * The integer block sums are those of the scalar reference (exact). MXFP4
 * takes two blocks per register and accumulates their scaled sums in float
 * lanes; the ternary dots fold their 16 int32 lanes onto the AVX2 kernels'
 * eight and then add in those kernels' (llama.cpp's) float order, so they
 * equal fp4tq_avx2.c's bit for bit. Against the scalar reference: float
 * addition order only (tests bound it).
 */
#include "quant/fp4tq.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/simd_x86.h"

#define FP16(h) wgllm_fp16_table[h]
#define QK_K WGLLM_QK_K

/* One super-block into llama.cpp's eight float lanes (fp4tq_avx2.c's
 * tq_lanes): the two 32-byte halves of each 64-byte piece fold onto the
 * same int32 lanes (exact), then the lanes of the AVX2 kernel follow. */
static inline __m256 tq_lanes(__m256 accf, __m512i acc, const wgllm_block_q8_K *y, float d) {
    __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
    a = _mm256_sub_epi32(a, _mm256_madd_epi16(b, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(d), accf);
}

static inline __m512i load2x32(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* [a x8 | b x8]: the scale of two blocks laid out as their int32 sums are. */
static inline __m512 scale2(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

/* ---- MXFP4 ------------------------------------------------------------- */

/* signed bytes v (|v| <= 12) . signed bytes y (|y| <= 127), int32 lanes */
static inline __m512i dot_s8s8(__m512i v, __m512i y) {
    const __mmask64 neg = _mm512_movepi8_mask(v);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(v),
                               _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y));
}

static void vec_dot_mxfp4_q8_0_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_mxfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK_MXFP4;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)wgllm_kvalues_mxfp4));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 accf = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        _mm_prefetch((const char *)(x + i) + 544, _MM_HINT_T0);
        /* 128-bit lanes: block i low nibbles, high nibbles, block i+1 low, high */
        const __m128i ta = _mm_loadu_si128((const __m128i *)x[i].qs);
        const __m128i tb = _mm_loadu_si128((const __m128i *)x[i + 1].qs);
        const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(ta), _mm_srli_epi16(ta, 4), 1);
        const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(tb), _mm_srli_epi16(tb, 4), 1);
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        const __m512i v = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
        const __m512i p = dot_s8s8(v, load2x32(y[i].qs, y[i + 1].qs));
        const __m512 d = scale2(FP16(y[i].d) * wgllm_e8m0_half(x[i].e), FP16(y[i + 1].d) * wgllm_e8m0_half(x[i + 1].e));
        accf = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), accf);
    }
    float sumf = _mm512_reduce_add_ps(accf);
    for (; i < nb; i++) { /* an odd last block */
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK_MXFP4 / 2; j++)
            sumi += y[i].qs[j] * wgllm_kvalues_mxfp4[x[i].qs[j] & 0x0F] +
                    y[i].qs[j + WGLLM_QK_MXFP4 / 2] * wgllm_kvalues_mxfp4[x[i].qs[j] >> 4];
        sumf += FP16(y[i].d) * wgllm_e8m0_half(x[i].e) * (float)sumi;
    }
    *s = sumf;
}

/* ---- TQ2_0 ------------------------------------------------------------- */

static void vec_dot_tq2_0_q8_K_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq2_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    __m256 accf = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* bytes 0..31: elements 32l + m; bytes 32..63: 128 + 32l + m */
        const __m512i q = _mm512_loadu_si512((const void *)x[i].qs);
        __m512i acc = _mm512_setzero_si512();
        for (int l = 0; l < 4; l++) {
            const __m512i t = _mm512_and_si512(_mm512_srli_epi16(q, 2 * l), m3);
            acc = _mm512_dpbusd_epi32(acc, t, load2x32(y[i].qs + 32 * l, y[i].qs + 128 + 32 * l));
        }
        accf = tq_lanes(accf, acc, &y[i], y[i].d * FP16(x[i].d));
    }
    *s = hsum_ps(accf);
}

/* ---- TQ1_0 ------------------------------------------------------------- */

/* As fp4tq_avx2.c's tq1_trits: per byte ((q * p mod 256) * 3) >> 8, p the
 * 16-bit lane's multiplier, even and odd bytes through separate products. */
static inline __m512i tq1_trits(__m512i q, __m512i p) {
    const __m512i ff = _mm512_set1_epi16(0xFF), three = _mm512_set1_epi16(3);
    const __m512i lo = _mm512_and_si512(_mm512_mullo_epi16(_mm512_and_si512(q, ff), p), ff);
    const __m512i hi = _mm512_and_si512(_mm512_mullo_epi16(_mm512_srli_epi16(q, 8), p), ff);
    const __m512i tlo = _mm512_srli_epi16(_mm512_mullo_epi16(lo, three), 8);
    const __m512i thi = _mm512_srli_epi16(_mm512_mullo_epi16(hi, three), 8);
    return _mm512_or_si512(tlo, _mm512_slli_epi16(thi, 8));
}

static inline __m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

static void vec_dot_tq1_0_q8_K_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq1_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    /* multipliers (3^k) in 16-bit lanes for the four 64-element vectors w,
     * w covering elements 64w..64w+63 (see fp4tq_avx2.c for the 32-element
     * pieces): [qs0 k=0 | qs0 k=1], [qs0 k=2 | qs0 k=3], [qs0 k=4 | qs1 k=0,1],
     * [qs1 k=2,3 | qs1 k=4, qh k=0..3] */
    const __m256i s1 = _mm256_set1_epi16(1), s3 = _mm256_set1_epi16(3), s9 = _mm256_set1_epi16(9),
                  s27 = _mm256_set1_epi16(27), s81 = _mm256_set1_epi16(81);
    const __m256i p01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(1)), _mm_set1_epi16(3), 1);
    const __m256i p23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(9)), _mm_set1_epi16(27), 1);
    const __m256i p4h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(81)),
                                                _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27), 1);
    const __m512i pw[4] = {join(s1, s3), join(s9, s27), join(s81, p01), join(p23, p4h)};
    __m256 accf = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        const __m256i q11 = _mm256_broadcastsi128_si256(q1);
        const __m256i q1h = _mm256_inserti128_si256(_mm256_castsi128_si256(q1), _mm_set1_epi32((int)qh), 1);
        const __m512i qw[4] = {join(q0, q0), join(q0, q0), join(q0, q11), join(q11, q1h)};
        __m512i acc = _mm512_setzero_si512();
        for (int w = 0; w < 4; w++)
            acc = _mm512_dpbusd_epi32(acc, tq1_trits(qw[w], pw[w]), _mm512_loadu_si512((const void *)(y[i].qs + 64 * w)));
        accf = tq_lanes(accf, acc, &y[i], y[i].d * FP16(x[i].d));
    }
    *s = hsum_ps(accf);
}

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_mxfp4_avx512, vec_dot_mxfp4_q8_0_avx512)
WGLLM_VEC_DOT_NR(nr_tq1_0_avx512, vec_dot_tq1_0_q8_K_avx512)
WGLLM_VEC_DOT_NR(nr_tq2_0_avx512, vec_dot_tq2_0_q8_K_avx512)

/* The AVX2 vec_dot_mt kernels stay installed: these vec_dots give the AVX2
 * ones' results bit for bit (MXFP4: lanes 0-7 and 8-15 are the AVX2 kernel's
 * two accumulators, _mm512_reduce_add_ps adds them and reduces in hsum_ps's
 * order, and the tails agree; TQ: the lanes fold onto the AVX2 ones), which
 * test_fp4tq's dot_mt_bit_identical checks at this level. */
void wgllm_fp4tq_install_avx512(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_avx512;
    t[WGLLM_TYPE_MXFP4].vec_dot_nr = nr_mxfp4_avx512;
    t[WGLLM_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_avx512;
    t[WGLLM_TYPE_TQ1_0].vec_dot_nr = nr_tq1_0_avx512;
    t[WGLLM_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_avx512;
    t[WGLLM_TYPE_TQ2_0].vec_dot_nr = nr_tq2_0_avx512;
}

#endif
