/*
 * fp4tq_avx2.c - AVX2 dots of MXFP4, NVFP4 and Q1_0 (with Q8_0) and TQ1_0 / TQ2_0
 * (with Q8_K).
 *
 * MXFP4 is IQ4_NL's shape with another 16-value table: a byte shuffle turns
 * the nibbles into the doubled E2M1 values, whose exact integer block sums
 * are accumulated, scaled, in float vectors as llama.cpp's AVX2 kernel does.
 *
 * The ternary dots multiply unsigned trits (0..2, maddubs) and subtract the
 * Q8_K block sums for the -1 offset, in eight int32 lanes partitioned as in
 * llama.cpp's AVX2 kernels, whose float lanes (fmadd over the super-blocks,
 * summed at the end) they reproduce: on the tiny model that took the mean
 * KL to llama.cpp from 1.3e-3 (the scalar reference's one float sum per
 * super-block) to 5e-13 - a single activation rounding the other way, after
 * an ulp of difference, costs that much in a ternary net.
 *
 * All of these differ from the scalar reference only by the order of the
 * float additions of exact integer block sums (tests bound it).
 */
#include "quant/fp4tq.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/simd_x86.h"

#define FP16(h) wgllm_fp16_table[h]
#define QK_K WGLLM_QK_K

/* One super-block into llama.cpp's float lanes: int32 lane k holds the
 * products of bytes 4k..4k+3 of each 32-byte piece, minus Q8_K's block sums
 * 2k and 2k+1 (the -1 offset); lanes accumulate d * that over the row and
 * are summed at the end, as ggml's AVX2 tq dots do. */
static inline __m256 tq_lanes(__m256 accf, __m256i acc, const wgllm_block_q8_K *y, float d) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
    acc = _mm256_sub_epi32(acc, _mm256_madd_epi16(b, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(d), accf);
}

/* unsigned bytes t (small) times signed bytes y, as int32 lanes */
static inline __m256i dot_u8s8(__m256i t, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(t, y), _mm256_set1_epi16(1));
}

/* ---- MXFP4 ------------------------------------------------------------- */

/* One block's 32 products as eight int32 lanes (bytes 4k..4k+3 of
 * [low nibbles | high nibbles], llama.cpp's partition). */
static inline __m256i mxfp4_block(const wgllm_block_mxfp4 *x, const wgllm_block_q8_0 *y, __m256i table) {
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    const __m256i v = _mm256_shuffle_epi8(table, _mm256_and_si256(q, _mm256_set1_epi8(0x0F)));
    const __m256i yy = _mm256_loadu_si256((const __m256i *)y->qs);
    /* |v| <= 12: maddubs on |v| and y with v's sign */
    return dot_u8s8(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yy, v));
}

/* Blocks in pairs, one float accumulator each, a last odd block added in
 * scalar: the float order of llama.cpp's AVX2 kernel (which its AVX-512
 * builds run too). */
static void vec_dot_mxfp4_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_mxfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK_MXFP4;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_mxfp4));
    __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        _mm_prefetch((const char *)(x + i) + 544, _MM_HINT_T0);
        const __m256i p1 = mxfp4_block(&x[i], &y[i], table), p2 = mxfp4_block(&x[i + 1], &y[i + 1], table);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(y[i].d) * wgllm_e8m0_half(x[i].e)), _mm256_cvtepi32_ps(p1), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(y[i + 1].d) * wgllm_e8m0_half(x[i + 1].e)), _mm256_cvtepi32_ps(p2), acc2);
    }
    float sumf = hsum_ps(_mm256_add_ps(acc1, acc2));
    for (; i < nb; i++) sumf += FP16(y[i].d) * wgllm_e8m0_half(x[i].e) * (float)hsum_i32(mxfp4_block(&x[i], &y[i], table));
    *s = sumf;
}

/* Several tokens (prompt processing): per token exactly the float
 * operations of vec_dot_mxfp4_q8_0_avx2 (same integer lanes, same fmadd into
 * the same two accumulators, same reduction and tail), so each result is
 * bit-identical to it - and to the AVX-512 kernel, whose 16 lanes are these
 * two accumulators side by side; only the table lookup of each weight block
 * is done once for all tokens. Always inlined so that the full tile gets a
 * constant token count (the token loops unroll). */
#define FQ_INLINE static inline __attribute__((always_inline))
#define FQ_UNROLL _Pragma("GCC unroll 8")

FQ_INLINE void mxfp4_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_mxfp4 *x = vx;
    const int64_t nb = n / WGLLM_QK_MXFP4;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wgllm_kvalues_mxfp4));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc1[WGLLM_VEC_DOT_MT_MAX], acc2[WGLLM_VEC_DOT_MT_MAX];
    FQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) acc1[t] = acc2[t] = _mm256_setzero_ps();
#define FQ_Y(t, i) ((const wgllm_block_q8_0 *)((const char *)vy + (size_t)(t) * ys) + (i))
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        _mm_prefetch((const char *)(x + i) + 544, _MM_HINT_T0);
        const __m128i ta = _mm_loadu_si128((const __m128i *)x[i].qs), tb = _mm_loadu_si128((const __m128i *)x[i + 1].qs);
        const __m256i va = _mm256_shuffle_epi8(
            table, _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(ta), _mm_srli_epi16(ta, 4), 1), m4));
        const __m256i vb = _mm256_shuffle_epi8(
            table, _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(tb), _mm_srli_epi16(tb, 4), 1), m4));
        const __m256i aa = _mm256_sign_epi8(va, va), ab = _mm256_sign_epi8(vb, vb);
        const float ea = wgllm_e8m0_half(x[i].e), eb = wgllm_e8m0_half(x[i + 1].e);
        FQ_UNROLL for (int t = 0; t < nt; t++) {
            const wgllm_block_q8_0 *y = FQ_Y(t, i);
            const __m256i p1 = dot_u8s8(aa, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[0].qs), va));
            const __m256i p2 = dot_u8s8(ab, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[1].qs), vb));
            acc1[t] = _mm256_fmadd_ps(_mm256_set1_ps(FP16(y[0].d) * ea), _mm256_cvtepi32_ps(p1), acc1[t]);
            acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(FP16(y[1].d) * eb), _mm256_cvtepi32_ps(p2), acc2[t]);
        }
    }
    FQ_UNROLL for (int t = 0; t < nt; t++) {
        float sumf = hsum_ps(_mm256_add_ps(acc1[t], acc2[t]));
        for (int64_t j = i; j < nb; j++) {
            const wgllm_block_q8_0 *y = FQ_Y(t, j);
            sumf += FP16(y->d) * wgllm_e8m0_half(x[j].e) * (float)hsum_i32(mxfp4_block(&x[j], y, table));
        }
        s[(size_t)t * ss] = sumf;
    }
#undef FQ_Y
}

static void mt_mxfp4_avx2(int64_t n, float *s, size_t ss, const void *x, const void *y, size_t ys, int nt) {
    WGLLM_ASSERT(nt >= 1 && nt <= WGLLM_VEC_DOT_MT_MAX);
    if (nt == 8) mxfp4_mt_body(n, s, ss, x, y, ys, 8);
    else if (nt == 4) mxfp4_mt_body(n, s, ss, x, y, ys, 4);
    else mxfp4_mt_body(n, s, ss, x, y, ys, nt);
}

/* ---- NVFP4 ------------------------------------------------------------- */

/* ggml's AVX2 order: per block two vectors of 32 products (sub-blocks 0,1
 * against the first Q8_0 block, 2,3 the second; lanes 0-3 one sub-block,
 * 4-7 the next), each fmadd-ed with its sub-blocks' d_x * d_y into one
 * accumulator, summed at the end. */
static inline __m256i nvfp4_pair(const uint8_t *qs, const int8_t *yq, __m128i table) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    /* elements in order: sub-block a = lo[0..7] hi[0..7], b = lo[8..15] hi[8..15] */
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(lo, hi)), _mm_unpackhi_epi64(lo, hi), 1);
    const __m256i yy = _mm256_loadu_si256((const __m256i *)yq);
    return dot_u8s8(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yy, v));
}

static void vec_dot_nvfp4_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_nvfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const __m128i table = _mm_loadu_si128((const __m128i *)wgllm_kvalues_mxfp4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++) {
        const float dy0 = FP16(y[2 * i].d), dy1 = FP16(y[2 * i + 1].d);
        const __m256 s01 = _mm256_set_m128(_mm_set1_ps(wgllm_ue4m3_half(x[i].d[1]) * dy0), _mm_set1_ps(wgllm_ue4m3_half(x[i].d[0]) * dy0));
        const __m256 s23 = _mm256_set_m128(_mm_set1_ps(wgllm_ue4m3_half(x[i].d[3]) * dy1), _mm_set1_ps(wgllm_ue4m3_half(x[i].d[2]) * dy1));
        acc = _mm256_fmadd_ps(s01, _mm256_cvtepi32_ps(nvfp4_pair(x[i].qs, y[2 * i].qs, table)), acc);
        acc = _mm256_fmadd_ps(s23, _mm256_cvtepi32_ps(nvfp4_pair(x[i].qs + 16, y[2 * i + 1].qs, table)), acc);
    }
    *s = hsum_ps(acc);
}

/* ---- Q1_0 -------------------------------------------------------------- */

/* Signs from bits: byte b of the 4 sub-block bytes spread over elements
 * 8b..8b+7, each lane testing its bit; y negated where the bit is clear.
 * Float order of ggml's AVX2 kernel: per block, eight lanes of d_y * sum over
 * the four Q8_0 sub-blocks (mul, then fmadd), fmadd by the block's d into
 * the row's lanes, one horizontal sum at the end. */
static void vec_dot_q1_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q1_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / WGLLM_QK1_0; i++) {
        const wgllm_block_q8_0 *yb = &y[4 * i];
        __m256 accb = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            uint32_t b4;
            memcpy(&b4, x[i].qs + 4 * k, 4);
            const __m256i clear = _mm256_cmpeq_epi8(
                _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)b4), spread), bit), _mm256_setzero_si256());
            const __m256i yy = _mm256_loadu_si256((const __m256i *)yb[k].qs);
            const __m256i sy = _mm256_sub_epi8(_mm256_xor_si256(yy, clear), clear); /* -y where clear */
            const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(ones, sy));
            const __m256 dy = _mm256_set1_ps(FP16(yb[k].d));
            accb = k == 0 ? _mm256_mul_ps(dy, p) : _mm256_fmadd_ps(dy, p, accb);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d)), accb, acc);
    }
    *s = hsum_ps(acc);
}

/* ---- TQ2_0 ------------------------------------------------------------- */

static void vec_dot_tq2_0_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq2_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 accf = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int l = 0; l < 4; l++) {
                const __m256i t = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3);
                const __m256i yy = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * l));
                acc = _mm256_add_epi32(acc, dot_u8s8(t, yy));
            }
        }
        accf = tq_lanes(accf, acc, &y[i], y[i].d * FP16(x[i].d));
    }
    *s = hsum_ps(accf);
}

/* ---- TQ1_0 ------------------------------------------------------------- */

/* Per byte: trit = ((q * p mod 256) * 3) >> 8, p the multiplier (3^k) of
 * the byte's 16-bit lane. AVX2 has no byte multiply: the even and odd bytes
 * go through 16-bit products separately (q * 81 < 2^16). */
static inline __m256i tq1_trits(__m256i q, __m256i p) {
    const __m256i ff = _mm256_set1_epi16(0xFF), three = _mm256_set1_epi16(3);
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(q, ff), p), ff);
    const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(q, 8), p), ff);
    const __m256i tlo = _mm256_srli_epi16(_mm256_mullo_epi16(lo, three), 8);
    const __m256i thi = _mm256_srli_epi16(_mm256_mullo_epi16(hi, three), 8);
    return _mm256_or_si256(tlo, _mm256_slli_epi16(thi, 8));
}

/* [a x8 | b x8] in 16-bit lanes */
static inline __m256i pow_pair(int a, int b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)a)), _mm_set1_epi16((short)b), 1);
}

static void vec_dot_tq1_0_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq1_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    static const int pow3[5] = {1, 3, 9, 27, 81};
    /* qh's 16 elements 240 + 4k + j (trit k of qh[j]): bytes 4k..4k+3 times 3^k */
    const __m128i pqh = _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27);
    __m256 accf = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* eight vectors of 32 trits, vector v the elements 32v..32v+31:
         * v < 5: trit v of qs[0..31]; 5, 6: trits (0, 1), (2, 3) of
         * qs[32..47] in the two lanes; 7: trit 4 of qs[32..47] | qh */
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        const __m256i q11 = _mm256_broadcastsi128_si256(q1);
        const __m256i q1h = _mm256_inserti128_si256(_mm256_castsi128_si256(q1), _mm_set1_epi32((int)qh), 1);
        const __m256i p1h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(81)), pqh, 1);
        __m256i acc = _mm256_setzero_si256();
        for (int v = 0; v < 5; v++)
            acc = _mm256_add_epi32(acc, dot_u8s8(tq1_trits(q0, _mm256_set1_epi16((short)pow3[v])),
                                                 _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * v))));
        acc = _mm256_add_epi32(acc, dot_u8s8(tq1_trits(q11, pow_pair(1, 3)), _mm256_loadu_si256((const __m256i *)(y[i].qs + 160))));
        acc = _mm256_add_epi32(acc, dot_u8s8(tq1_trits(q11, pow_pair(9, 27)), _mm256_loadu_si256((const __m256i *)(y[i].qs + 192))));
        acc = _mm256_add_epi32(acc, dot_u8s8(tq1_trits(q1h, p1h), _mm256_loadu_si256((const __m256i *)(y[i].qs + 224))));
        accf = tq_lanes(accf, acc, &y[i], y[i].d * FP16(x[i].d));
    }
    *s = hsum_ps(accf);
}

/* ---- ternary, several tokens ---------------------------------------------
 * As mxfp4_mt_body: the trits of each super-block are decoded once (eight
 * vectors of 32, vector v the elements 32v..32v+31), then per token the
 * integer lanes and float operations of the single-token kernels above, so
 * every result equals vec_dot's bit for bit (and the AVX-512 kernels', which
 * fold onto the same lanes). */

FQ_INLINE void tq_mt_tail(__m256 *accf, const __m256i tv[8], int64_t i, float xd, const void *vy, size_t ys, int nt) {
    FQ_UNROLL for (int t = 0; t < nt; t++) {
        const wgllm_block_q8_K *y = (const wgllm_block_q8_K *)((const char *)vy + (size_t)t * ys) + i;
        __m256i acc = _mm256_setzero_si256();
        for (int v = 0; v < 8; v++) acc = _mm256_add_epi32(acc, dot_u8s8(tv[v], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * v))));
        accf[t] = tq_lanes(accf[t], acc, y, y->d * xd);
    }
}

FQ_INLINE void tq2_0_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_tq2_0 *x = vx;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    FQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i tv[8];
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int l = 0; l < 4; l++) tv[4 * h + l] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3);
        }
        tq_mt_tail(accf, tv, i, FP16(x[i].d), vy, ys, nt);
    }
    FQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

FQ_INLINE void tq1_0_mt_body(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {
    const wgllm_block_tq1_0 *x = vx;
    static const int pow3[5] = {1, 3, 9, 27, 81};
    const __m128i pqh = _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27);
    const __m256i p1h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(81)), pqh, 1);
    __m256 accf[WGLLM_VEC_DOT_MT_MAX];
    FQ_UNROLL for (int t = 0; t < WGLLM_VEC_DOT_MT_MAX; t++) accf[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        const __m256i q11 = _mm256_broadcastsi128_si256(q1);
        const __m256i q1h = _mm256_inserti128_si256(_mm256_castsi128_si256(q1), _mm_set1_epi32((int)qh), 1);
        __m256i tv[8];
        for (int v = 0; v < 5; v++) tv[v] = tq1_trits(q0, _mm256_set1_epi16((short)pow3[v]));
        tv[5] = tq1_trits(q11, pow_pair(1, 3));
        tv[6] = tq1_trits(q11, pow_pair(9, 27));
        tv[7] = tq1_trits(q1h, p1h);
        tq_mt_tail(accf, tv, i, FP16(x[i].d), vy, ys, nt);
    }
    FQ_UNROLL for (int t = 0; t < nt; t++) s[(size_t)t * ss] = hsum_ps(accf[t]);
}

#define FQ_MT(name, body)                                                                               \
    static void name(int64_t n, float *s, size_t ss, const void *x, const void *y, size_t ys, int nt) { \
        WGLLM_ASSERT(nt >= 1 && nt <= WGLLM_VEC_DOT_MT_MAX);                                             \
        if (nt == 8) body(n, s, ss, x, y, ys, 8);                                                       \
        else if (nt == 4) body(n, s, ss, x, y, ys, 4);                                                  \
        else body(n, s, ss, x, y, ys, nt);                                                              \
    }
FQ_MT(mt_tq2_0_avx2, tq2_0_mt_body)
FQ_MT(mt_tq1_0_avx2, tq1_0_mt_body)

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_mxfp4_avx2, vec_dot_mxfp4_q8_0_avx2)
WGLLM_VEC_DOT_NR(nr_tq1_0_avx2, vec_dot_tq1_0_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_tq2_0_avx2, vec_dot_tq2_0_q8_K_avx2)
WGLLM_VEC_DOT_NR(nr_q1_0_avx2, vec_dot_q1_0_q8_0_avx2)
WGLLM_VEC_DOT_NR(nr_nvfp4_avx2, vec_dot_nvfp4_q8_0_avx2)

void wgllm_fp4tq_install_avx2(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_avx2;
    t[WGLLM_TYPE_MXFP4].vec_dot_nr = nr_mxfp4_avx2;
    t[WGLLM_TYPE_MXFP4].vec_dot_mt = mt_mxfp4_avx2;
    t[WGLLM_TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_avx2;
    t[WGLLM_TYPE_TQ1_0].vec_dot_nr = nr_tq1_0_avx2;
    t[WGLLM_TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_avx2;
    t[WGLLM_TYPE_TQ2_0].vec_dot_nr = nr_tq2_0_avx2;
    t[WGLLM_TYPE_TQ1_0].vec_dot_mt = mt_tq1_0_avx2;
    /* Q1_0, NVFP4: no AVX-512 kernels (llama.cpp's x86 builds run these too) */
    t[WGLLM_TYPE_Q1_0].vec_dot = vec_dot_q1_0_q8_0_avx2;
    t[WGLLM_TYPE_Q1_0].vec_dot_nr = nr_q1_0_avx2;
    t[WGLLM_TYPE_NVFP4].vec_dot = vec_dot_nvfp4_q8_0_avx2;
    t[WGLLM_TYPE_NVFP4].vec_dot_nr = nr_nvfp4_avx2;
    t[WGLLM_TYPE_TQ2_0].vec_dot_mt = mt_tq2_0_avx2;
}

#endif
