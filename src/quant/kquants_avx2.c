/*
 * kquants_avx2.c - AVX2 kernels of the super-block formats: the Q8_K
 * activation quantizer (byte-identical to ggml's quantize_row_q8_K_ref,
 * which llama.cpp's x86 build uses) and the dots of Q2_K..Q6_K/IQ4_XS with
 * Q8_K and IQ4_NL with Q8_0.
 *
 * Each dot computes the same per-super-block integer sums as the scalar
 * reference in kquants.c (exact); Q4_K/Q5_K/Q6_K/IQ4 then accumulate the
 * scaled sums in float vectors as llama.cpp does, which differs from the
 * scalar reference only by float rounding of those additions (tests bound
 * it). The multi-token variants (vec_dot_mt, prompt processing) unpack each
 * weight block once for a tile of tokens and are bit-identical to vec_dot.
 */
#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/simd_x86.h"
#include <math.h>

#define FP16(h) wgllm_fp16_table[h]
#define QK_K WGLLM_QK_K

/* Weights usually stream from a mapped file, where the hardware prefetcher
 * stops at each 4 KiB page: fetch a few blocks ahead (past the row's end is
 * harmless, a prefetch never faults). */
static inline void kq_prefetch(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Unsigned bytes x (small) times signed bytes y, scaled per int16 pair sum. */
static inline __m256i dot_us(__m256i x, __m256i y, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), scale16);
}

/* int16 lanes 0..7 = scale 2g, 8..15 = scale 2g+1 (two 16-element
 * sub-blocks) from eight int16 scales in both 128-bit lanes (x2): one byte
 * shuffle (two scalar broadcasts cost five). */
static const int8_t kq_pair_mask[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}};
static inline __m256i scale_pair_of(__m256i x2, int g) {
    return _mm256_shuffle_epi8(x2, _mm256_loadu_si256((const __m256i *)kq_pair_mask[g]));
}

/* ---- Q8_K quantizer ---------------------------------------------------- */

static void q8_K_from_float_avx2(const float *x, void *vy, int64_t k) {
    wgllm_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(vmax, 1), _mm256_castps256_ps128(vmax));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* the reference takes the sign of the first element of largest magnitude */
        float max = 0;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.f / max;
        const __m256 mul = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int t = 0; t < 4; t++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * t), mul);
                q[t] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), lim);
            }
            const __m256i a = _mm256_packs_epi32(q[0], q[1]);
            const __m256i b = _mm256_packs_epi32(q[2], q[3]);
            const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), p);
            /* two 16-element sums: widen to int16 and add pairs down */
            const __m256i ones8 = _mm256_set1_epi8(1);
            const __m256i s16 = _mm256_maddubs_epi16(ones8, p); /* 16 sums of 2 */
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); /* 8 sums of 4 */
            const __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            __m128i t = _mm_hadd_epi32(lo, hi); /* sums of 8: [0..7],[8..15],[16..23],[24..31] */
            t = _mm_hadd_epi32(t, t);
            y[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(t);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- Q4_K / Q5_K ------------------------------------------------------- */

/* Q4_K/Q5_K packed scales -> 8 scales (bytes 0..7) and 8 mins (bytes 8..15). */
static inline void k4_unpack_scales(const uint8_t *s, uint8_t out[16]) {
    uint32_t w[3], u[4];
    memcpy(w, s, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[0] = w[0] & k1;
    u[1] = (w[2] & k2) | (((w[0] >> 6) & k3) << 4);
    u[2] = w[1] & k1;
    u[3] = ((w[2] >> 4) & k2) | (((w[1] >> 6) & k3) << 4);
    memcpy(out, u, 16);
}

/* sum_j mins[j] * (bsums[2j] + bsums[2j+1]) for the 8 mins in bytes 8..15 of
 * sm, spread over the 8 lanes: the caller subtracts it lane-wise from its
 * float accumulator (a horizontal sum per super-block and token cost a fifth
 * of a mat-vec). */
static inline __m256i k4_min_term(const uint8_t sm[16], const int16_t *bsums) {
    const __m128i m8 = _mm_loadl_epi64((const __m128i *)(sm + 8));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)); /* m0 m0 m1 m1 ... */
    const __m256i b = _mm256_loadu_si256((const __m256i *)bsums);
    return _mm256_madd_epi16(m16, b);
}

/* Float accumulation across super-blocks (like llama.cpp): within a block the
 * integer sum is exact, so this differs from the scalar reference only by the
 * rounding of the final additions. */


/* ---- Q6_K -------------------------------------------------------------- */


/* ---- Q2_K / Q3_K ------------------------------------------------------- */

/* Q3_K's 16 six-bit scales (stored +32) as bytes 0..15 in sub-block order,
 * computed in a register: through memory, the 16-byte load after four
 * 4-byte stores misses store forwarding, a stall per super-block that made
 * the Q3_K dot the slowest of the formats (5 GB/s of weights, now 12). */
static inline __m128i q3_scales_v(const uint8_t *s) {
    int32_t a2;
    memcpy(&a2, s + 8, 4);
    const __m128i a01 = _mm_loadl_epi64((const __m128i *)s);
    const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a01, _mm_srli_epi32(a01, 4)), _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(a2), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_or_si128(lo, _mm_slli_epi32(hi, 4));
}

/* ---- IQ4_NL / IQ4_XS --------------------------------------------------- */

/* 16 packed bytes -> 32 signed table values in element order. */
static inline __m256i iq4_values(const uint8_t *p, __m256i table) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(v, _mm256_set1_epi8(0x0F)));
}

/* x, y signed bytes with |x| <= 127: int16 pair sums of x*y (fit: 2*127*127). */
static inline __m256i dot_ss16(__m256i x, __m256i y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}


static void vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq4_nl *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 accf = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / WGLLM_QK4_NL; i++) {
        _mm_prefetch((const char *)(x + i) + 576, _MM_HINT_T0);
        const __m256i v = iq4_values(x[i].qs, table);
        const __m256i yy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot_ss16(v, yy), ones));
        accf = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), p, accf);
    }
    *s = hsum_ps(accf);
}

/* ---- several tokens per weight row -------------------------------------- */

/* Each body below is also its format's vec_dot (one token, KQ_ONE): per
 * token it does the same float operations whatever the tile (same products,
 * same fmadd into the same lanes, same final reduction), so a tile's results
 * are bit-identical to vec_dot's; only the weight unpacking (nibbles,
 * scales) is done once per block for all tokens. The bodies are
 * always inlined so that the common full tile gets a constant token count
 * (the token loops then unroll and the accumulators stay in registers).
 * The integer accumulators are zeroed for all WGLLM_VEC_DOT_MT_MAX tokens:
 * otherwise GCC's unrolled generic path warns they may be read unset. */
#define KQ_INLINE static inline __attribute__((always_inline))
#define KQ_UNROLL _Pragma("GCC unroll 8")
#define KQ_YQ(vy, ys, t, i) (((const wgllm_block_q8_K *)((const char *)(vy) + (size_t)(t) * (ys)) + (i))->qs)
#define KQ_YB(vy, ys, t, i) ((const wgllm_block_q8_K *)((const char *)(vy) + (size_t)(t) * (ys)) + (i))

KQ_INLINE void q4_K_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_q4_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        uint8_t sm[16];
        k4_unpack_scales(x[i].scales, sm);
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i s0 = _mm256_set1_epi16(sm[2 * j]), s1 = _mm256_set1_epi16(sm[2 * j + 1]);
            KQ_UNROLL for (int t = 0; t < nt; t++) {
                const int8_t *yq = KQ_YQ(vy, ys, t, i) + 64 * j;
                acc[t] = _mm256_add_epi32(acc[t], dot_us(lo, _mm256_loadu_si256((const __m256i *)yq), s0));
                acc[t] = _mm256_add_epi32(acc[t], dot_us(hi, _mm256_loadu_si256((const __m256i *)(yq + 32)), s1));
            }
        }
        const float xd = FP16(x[i].d), xdmin = FP16(x[i].dmin);
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const wgllm_block_q8_K *y = KQ_YB(vy, ys, t, i);
            const float dy = y->d;
            accf[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * dy), _mm256_cvtepi32_ps(acc[t]), accf[t]);
            accf[t] = _mm256_fnmadd_ps(_mm256_set1_ps(xdmin * dy), _mm256_cvtepi32_ps(k4_min_term(sm, y->bsums)), accf[t]);
        }
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

KQ_INLINE void q5_K_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_q5_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i one = _mm256_set1_epi8(1);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        uint8_t sc[16];
        k4_unpack_scales(x[i].scales, sc);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), one);
            const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j + 1)), one);
            const __m256i v0 = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h0, 4));
            const __m256i v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_slli_epi16(h1, 4));
            const __m256i s0 = _mm256_set1_epi16(sc[2 * j]), s1 = _mm256_set1_epi16(sc[2 * j + 1]);
            KQ_UNROLL for (int t = 0; t < nt; t++) {
                const int8_t *yq = KQ_YQ(vy, ys, t, i) + 64 * j;
                acc[t] = _mm256_add_epi32(acc[t], dot_us(v0, _mm256_loadu_si256((const __m256i *)yq), s0));
                acc[t] = _mm256_add_epi32(acc[t], dot_us(v1, _mm256_loadu_si256((const __m256i *)(yq + 32)), s1));
            }
        }
        const float xd = FP16(x[i].d), xdmin = FP16(x[i].dmin);
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const wgllm_block_q8_K *y = KQ_YB(vy, ys, t, i);
            const float dy = y->d;
            accf[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * dy), _mm256_cvtepi32_ps(acc[t]), accf[t]);
            accf[t] = _mm256_fnmadd_ps(_mm256_set1_ps(xdmin * dy), _mm256_cvtepi32_ps(k4_min_term(sc, y->bsums)), accf[t]);
        }
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

KQ_INLINE void q6_K_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_q6_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m256i sh = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            KQ_UNROLL for (int g = 0; g < 4; g++) {
                const __m256i l = (g & 1) ? l1 : l0;
                const __m256i lq = g < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                const __m256i hq = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
                const __m256i v = _mm256_or_si256(lq, _mm256_slli_epi16(hq, 4));
                const __m256i sp = scale_pair_of(sh, g);
                KQ_UNROLL for (int t = 0; t < nt; t++) {
                    const int8_t *yq = KQ_YQ(vy, ys, t, i) + 128 * h + 32 * g;
                    acc[t] = _mm256_add_epi32(acc[t], dot_us(v, _mm256_loadu_si256((const __m256i *)yq), sp));
                }
            }
        }
        const float xd = FP16(x[i].d);
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const wgllm_block_q8_K *y = KQ_YB(vy, ys, t, i);
            /* quants are stored +32: subtract 32 * sum(scale * bsum), lane-wise */
            const __m256i offs = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
            const __m256i a = _mm256_sub_epi32(acc[t], _mm256_slli_epi32(offs, 5));
            accf[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y->d), _mm256_cvtepi32_ps(a), accf[t]);
        }
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

KQ_INLINE void iq4_xs_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_iq4_xs *x = vx;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        uint32_t sl;
        memcpy(&sl, x[i].scales_l, 4);
        const uint32_t sh = x[i].scales_h;
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i va = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
            const __m256i vb = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
            const int la = (int)(((sl >> (8 * k)) & 0xf) | (((sh >> (4 * k)) & 3) << 4)) - 32;
            const int lb = (int)(((sl >> (8 * k + 4)) & 0xf) | (((sh >> (4 * k + 2)) & 3) << 4)) - 32;
            const __m256i sa = _mm256_set1_epi16((short)la), sb = _mm256_set1_epi16((short)lb);
            KQ_UNROLL for (int t = 0; t < nt; t++) {
                const int8_t *yq = KQ_YQ(vy, ys, t, i) + 64 * k;
                acc[t] = _mm256_add_epi32(
                    acc[t], _mm256_madd_epi16(dot_ss16(va, _mm256_loadu_si256((const __m256i *)yq)), sa));
                acc[t] = _mm256_add_epi32(
                    acc[t], _mm256_madd_epi16(dot_ss16(vb, _mm256_loadu_si256((const __m256i *)(yq + 32))), sb));
            }
        }
        const float xd = FP16(x[i].d);
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const __m256 d = _mm256_set1_ps(xd * KQ_YB(vy, ys, t, i)->d);
            accf[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(acc[t]), accf[t]);
        }
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

/* Q2_K: two-bit quants, a four-bit scale and min per 16 elements; the mins
 * enter as dmin * d_y * sum(min * bsum), subtracted lane-wise from the same
 * float accumulator (a horizontal sum per super-block and token was a fifth
 * of a mat-vec's time). */
KQ_INLINE void q2_K_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_q2_K *x = vx;
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        const __m256i scl = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4));
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m256i sh = (h ? _mm256_permute2x128_si256(scl, scl, 0x11) : _mm256_permute2x128_si256(scl, scl, 0x00));
            KQ_UNROLL for (int g = 0; g < 4; g++) {
                const __m256i v = _mm256_and_si256(g ? _mm256_srli_epi16(q, 2 * g) : q, m2);
                const __m256i sp = scale_pair_of(sh, g);
                KQ_UNROLL for (int t = 0; t < nt; t++) {
                    const int8_t *yq = KQ_YQ(vy, ys, t, i) + 128 * h + 32 * g;
                    acc[t] = _mm256_add_epi32(acc[t], dot_us(v, _mm256_loadu_si256((const __m256i *)yq), sp));
                }
            }
        }
        const float xd = FP16(x[i].d), dmin = FP16(x[i].dmin);
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const wgllm_block_q8_K *y = KQ_YB(vy, ys, t, i);
            const __m256i summ = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)y->bsums));
            accf[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * y->d), _mm256_cvtepi32_ps(acc[t]), accf[t]);
            accf[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * y->d), _mm256_cvtepi32_ps(summ), accf[t]);
        }
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

/* Q3_K: two low bits and a high bit (hmask) per quant, stored +4; six-bit
 * scales stored +32, one per 16 elements. */
KQ_INLINE void q3_K_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_q3_K *x = vx;
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i m4 = _mm256_set1_epi8(4);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    KQ_UNROLL for (int t = 0; t < nt; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        kq_prefetch(x + i + 4, sizeof(*x));
        const __m256i scl = _mm256_sub_epi16(_mm256_cvtepu8_epi16(q3_scales_v(x[i].scales)),
                                             _mm256_set1_epi16(32));
        /* values are stored +4: each token starts from -4 * sum(scale * bsum), lane-wise (no horizontal sum) */
        __m256i acc[WGLLM_VEC_DOT_MT_MAX];
        KQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int t = 0; t < nt; t++) {
            const __m256i offs = _mm256_madd_epi16(scl, _mm256_loadu_si256((const __m256i *)KQ_YB(vy, ys, t, i)->bsums));
            acc[t] = _mm256_sub_epi32(acc[t], _mm256_slli_epi32(offs, 2));
        }
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        KQ_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m256i hh = h ? _mm256_srli_epi16(hm, 4) : hm;
            const __m256i sh = (h ? _mm256_permute2x128_si256(scl, scl, 0x11) : _mm256_permute2x128_si256(scl, scl, 0x00));
            KQ_UNROLL for (int g = 0; g < 4; g++) {
                /* high bit g of the hmask byte -> 4 */
                const __m256i hb = g < 2 ? _mm256_slli_epi16(hh, 2 - g) : g == 2 ? hh : _mm256_srli_epi16(hh, 1);
                const __m256i v = _mm256_or_si256(_mm256_and_si256(g ? _mm256_srli_epi16(q, 2 * g) : q, m2),
                                                  _mm256_and_si256(hb, m4));
                const __m256i sp = scale_pair_of(sh, g);
                KQ_UNROLL for (int t = 0; t < nt; t++) {
                    const int8_t *yq = KQ_YQ(vy, ys, t, i) + 128 * h + 32 * g;
                    acc[t] = _mm256_add_epi32(acc[t], dot_us(v, _mm256_loadu_si256((const __m256i *)yq), sp));
                }
            }
        }
        const float xd = FP16(x[i].d);
        KQ_UNROLL for (int t = 0; t < nt; t++)
            accf[t] = _mm256_fmadd_ps(_mm256_set1_ps(xd * KQ_YB(vy, ys, t, i)->d), _mm256_cvtepi32_ps(acc[t]), accf[t]);
    }
    KQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

#define KQ_MT(name, body)                                                                                      \
    static void name(int64_t n, float *s, size_t ss, const void *x, const void *y, size_t ys, int nt) {        \
        WGLLM_ASSERT(nt >= 1 && nt <= WGLLM_VEC_DOT_MT_MAX);                                                    \
        if (nt == 8) body(n, s, ss, x, y, ys, 8);  \
        else if (nt == 4) body(n, s, ss, x, y, ys, 4);                                                            \
        else body(n, s, ss, x, y, ys, nt);                                                                     \
    }
KQ_MT(mt_q2_K_avx2, q2_K_mt_body)
KQ_MT(mt_q3_K_avx2, q3_K_mt_body)
KQ_MT(mt_q4_K_avx2, q4_K_mt_body)
KQ_MT(mt_q5_K_avx2, q5_K_mt_body)
KQ_MT(mt_q6_K_avx2, q6_K_mt_body)
KQ_MT(mt_iq4_xs_avx2, iq4_xs_mt_body)

/* ---- install ----------------------------------------------------------- */

/* one token: the multi-token bodies' own arithmetic */
#define KQ_ONE(name, body) \
    static void name(int64_t n, float *s, const void *vx, const void *vy) { body(n, s, 0, vx, vy, 0, 1); }
KQ_ONE(vec_dot_q2_K_q8_K_avx2, q2_K_mt_body)
KQ_ONE(vec_dot_q3_K_q8_K_avx2, q3_K_mt_body)
KQ_ONE(vec_dot_q4_K_q8_K_avx2, q4_K_mt_body)
KQ_ONE(vec_dot_q5_K_q8_K_avx2, q5_K_mt_body)
KQ_ONE(vec_dot_q6_K_q8_K_avx2, q6_K_mt_body)
KQ_ONE(vec_dot_iq4_xs_q8_K_avx2, iq4_xs_mt_body)

WGLLM_VEC_DOT_NR(nr_q2_K_avx2, vec_dot_q2_K_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_q3_K_avx2, vec_dot_q3_K_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_q4_K_avx2, vec_dot_q4_K_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_q5_K_avx2, vec_dot_q5_K_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_q6_K_avx2, vec_dot_q6_K_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_iq4_nl_avx2, vec_dot_iq4_nl_q8_0_avx2)
WGLLM_VEC_DOT_NR(nr_iq4_xs_avx2, vec_dot_iq4_xs_q8_K_avx2)

void wgllm_kquants_install_avx2(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_Q8_K].from_float = q8_K_from_float_avx2;
#define SET(T, f, nr)                      \
    t[WGLLM_TYPE_##T].vec_dot = f;         \
    t[WGLLM_TYPE_##T].vec_dot_nr = nr;
    SET(Q2_K, vec_dot_q2_K_q8_K_avx2, nr_q2_K_avx2)
    SET(Q3_K, vec_dot_q3_K_q8_K_avx2, nr_q3_K_avx2)
    SET(Q4_K, vec_dot_q4_K_q8_K_avx2, nr_q4_K_avx2)
    SET(Q5_K, vec_dot_q5_K_q8_K_avx2, nr_q5_K_avx2)
    SET(Q6_K, vec_dot_q6_K_q8_K_avx2, nr_q6_K_avx2)
    SET(IQ4_NL, vec_dot_iq4_nl_q8_0_avx2, nr_iq4_nl_avx2)
    SET(IQ4_XS, vec_dot_iq4_xs_q8_K_avx2, nr_iq4_xs_avx2)
#undef SET
    t[WGLLM_TYPE_Q2_K].vec_dot_mt = mt_q2_K_avx2;
    t[WGLLM_TYPE_Q3_K].vec_dot_mt = mt_q3_K_avx2;
    t[WGLLM_TYPE_Q4_K].vec_dot_mt = mt_q4_K_avx2;
    t[WGLLM_TYPE_Q5_K].vec_dot_mt = mt_q5_K_avx2;
    t[WGLLM_TYPE_Q6_K].vec_dot_mt = mt_q6_K_avx2;
    t[WGLLM_TYPE_IQ4_XS].vec_dot_mt = mt_iq4_xs_avx2;
}

#endif
