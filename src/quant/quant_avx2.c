/*
 * quant_avx2.c - AVX2/FMA/F16C kernels: the activation quantizers (bit-exact
 * with llama.cpp's x86 quantize_row_q8_0/_q8_1), fp16/bf16 conversions and
 * the dot products of every weight format wgllm multiplies. Used on any
 * AVX2 CPU; quant_avx512.c overrides some of them where AVX-512 VNNI exists.
 */
#include "quant/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/simd_x86.h"

#define FP16(h) wgllm_fp16_table[h]

/* ---- helpers ----------------------------------------------------------- */

static inline int hsum_epi32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The 16 bytes of a 4-bit block -> 32 bytes in element order (low nibbles
 * are elements 0..15, high nibbles 16..31), each in [0, 15]. */
static inline __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 bits (little-endian) -> 32 bytes: 0xFF where bit j is set, else 0. */
static inline __m256i bits32(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof(u));
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                              0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* Sum of x*y in groups of 4 bytes, x and y signed (|x| <= 128). */
static inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Same with x unsigned and small (x*y pairs fit int16). */
static inline __m256i dot_u8(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

/* ---- activation quantizers (llama.cpp's AVX2 code path, byte for byte) -- */

/* Quantizes 32 floats with multiplier id, rounding half to even; returns the
 * four int32 vectors before packing. */
static inline float block_q8_prepare(const float *x, __m256i q[4]) {
    __m256 v[4];
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float m = _mm_cvtss_f32(m4);
    const __m256 id = _mm256_set1_ps(m != 0.0f ? 127.f / m : 0.0f);
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return m;
}

static inline void block_q8_store(int8_t *qs, const __m256i q[4]) {
    const __m256i a = _mm256_packs_epi32(q[0], q[1]);
    const __m256i b = _mm256_packs_epi32(q[2], q[3]);
    /* packs work per 128-bit lane; the permutation restores element order */
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
}

static void q8_0_from_float_avx2(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++, x += WGLLM_QK8_0) {
        __m256i q[4];
        const float m = block_q8_prepare(x, q);
        y[i].d = wgllm_fp32_to_fp16(m / 127.f);
        block_q8_store(y[i].qs, q);
    }
}

static void q8_1_from_float_avx2(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK8_1; i++, x += WGLLM_QK8_1) {
        __m256i q[4];
        const float m = block_q8_prepare(x, q);
        const float d = m / 127.f;
        y[i].d = wgllm_fp32_to_fp16(d);
        const int sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        y[i].s = wgllm_fp32_to_fp16(d * (float)sum);
        block_q8_store(y[i].qs, q);
    }
}

/* ---- fp16 / bf16 rows -------------------------------------------------- */

void wgllm_fp16_to_fp32_row_avx2(const wgllm_fp16 *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = FP16(x[i]);
}

void wgllm_fp32_to_fp16_row_avx2(const float *x, wgllm_fp16 *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = wgllm_fp32_to_fp16(x[i]);
}

static void f16_to_float_avx2(const void *x, float *y, int64_t n) { wgllm_fp16_to_fp32_row_avx2(x, y, n); }
static void f16_from_float_avx2(const float *x, void *y, int64_t n) { wgllm_fp32_to_fp16_row_avx2(x, y, n); }

static inline __m256 bf16x8_load(const wgllm_bf16 *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static void bf16_to_float_avx2(const void *vx, float *y, int64_t n) {
    const wgllm_bf16 *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, bf16x8_load(x + i));
    for (; i < n; i++) y[i] = wgllm_bf16_to_fp32(x[i]);
}

/* Same rounding as wgllm_fp32_to_bf16 (nearest even, NaN kept quiet), in
 * integer arithmetic so that denormals survive as they do in ggml. */
static void bf16_from_float_avx2(const float *x, void *vy, int64_t n) {
    wgllm_bf16 *y = vy;
    int64_t i = 0;
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * k));
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            const __m256i rounded =
                _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
            const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
            r[k] = _mm256_blendv_epi8(rounded, qnan, nan);
        }
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    for (; i < n; i++) y[i] = wgllm_fp32_to_bf16(x[i]);
}

/* ---- float dots -------------------------------------------------------- */

static void vec_dot_f32_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    double sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

static void vec_dot_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_fp16 *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * k)));
            const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8 * k)));
            acc[k] = _mm256_fmadd_ps(a, b, acc[k]);
        }
    double sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += (double)(FP16(x[i]) * FP16(y[i]));
    *s = (float)sum;
}

/* vec_dot_f16_avx2 of several rows against one y, y converted once: each
 * row's sum the same operations as vec_dot_f16_avx2's (the same bits). */
static void vec_dot_nr_f16_avx2(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) {
    const wgllm_fp16 *y = vy;
    enum { MAXV = 512 }; /* y up to 4096 elements converted (16 KiB); longer rows one by one */
    if (n > 8 * MAXV) {
        for (int r = 0; r < nr; r++) vec_dot_f16_avx2(n, s + r, (const char *)vx + (size_t)r * xs, y);
        return;
    }
    __m256 yv[MAXV];
    for (int64_t i = 0; i + 8 <= n; i += 8) yv[i / 8] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
    for (int r = 0; r < nr; r++) {
        const wgllm_fp16 *x = (const wgllm_fp16 *)((const char *)vx + (size_t)r * xs);
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int64_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int k = 0; k < 4; k++) {
                const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * k)));
                acc[k] = _mm256_fmadd_ps(a, yv[i / 8 + k], acc[k]);
            }
        double sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        for (; i < n; i++) sum += (double)(FP16(x[i]) * FP16(y[i]));
        s[r] = (float)sum;
    }
}

static void vec_dot_bf16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_bf16 *x = vx, *y = vy;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(bf16x8_load(x + i + 8 * k), bf16x8_load(y + i + 8 * k), acc[k]);
    double sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += (double)(wgllm_bf16_to_fp32(x[i]) * wgllm_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ---- quantized dots ---------------------------------------------------- */

/* Each dot keeps two independent accumulators so consecutive blocks do not
 * wait on each other's FMA latency. */

static inline __m256 q4_0_block(const wgllm_block_q4_0 *x, const wgllm_block_q8_0 *y) {
    const __m256i qx = _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return _mm256_cvtepi32_ps(dot_i8(qx, qy));
}

static void vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q4_0_block(x + i, y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i + 1].d) * FP16(y[i + 1].d)), q4_0_block(x + i + 1, y + i + 1),
                               acc1);
    }
    for (; i < nb; i++)
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q4_0_block(x + i, y + i), acc0);
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

static inline __m256 q8_0_block(const wgllm_block_q8_0 *x, const wgllm_block_q8_0 *y) {
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return _mm256_cvtepi32_ps(dot_i8(qx, qy));
}

static void vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q8_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q8_0_block(x + i, y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i + 1].d) * FP16(y[i + 1].d)), q8_0_block(x + i + 1, y + i + 1),
                               acc1);
    }
    for (; i < nb; i++)
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q8_0_block(x + i, y + i), acc0);
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

static void vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    const int64_t nb = n / WGLLM_QK8_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        summs += FP16(x[i].m) * FP16(y[i].s);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 q = _mm256_cvtepi32_ps(dot_u8(nibbles32(x[i].qs), qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q, acc);
    }
    *s = hsum_ps(acc) + summs;
}

static void vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        /* where the 5th bit is clear, or-ing 0xF0 makes the byte nibble - 16 */
        const __m256i hi = _mm256_andnot_si256(bits32(x[i].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), hi);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 q = _mm256_cvtepi32_ps(dot_i8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q, acc);
    }
    *s = hsum_ps(acc);
}

static void vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    const int64_t nb = n / WGLLM_QK8_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        summs += FP16(x[i].m) * FP16(y[i].s);
        const __m256i hi = _mm256_and_si256(bits32(x[i].qh), _mm256_set1_epi8(0x10));
        const __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), hi);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256 q = _mm256_cvtepi32_ps(dot_u8(qx, qy));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q, acc);
    }
    *s = hsum_ps(acc) + summs;
}

/* ---- multi-row: 4 weight rows against one activation -------------------- */

/* The activation block and its scale are loaded once for four rows. */
#define NR4_KERNEL(name, XT, BLOCKFN, single)                                                  \
    static void name(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) { \
        const wgllm_block_q8_0 *y = vy;                                                        \
        const int64_t nb = n / WGLLM_QK8_0;                                                    \
        int r = 0;                                                                             \
        for (; r + 4 <= nr; r += 4) {                                                          \
            const XT *x0 = (const XT *)((const char *)vx + (size_t)r * xs);                    \
            const XT *x1 = (const XT *)((const char *)x0 + xs);                                \
            const XT *x2 = (const XT *)((const char *)x1 + xs);                                \
            const XT *x3 = (const XT *)((const char *)x2 + xs);                                \
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                        \
            for (int64_t i = 0; i < nb; i++) {                                                 \
                const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);               \
                const float dy = FP16(y[i].d);                                                 \
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x0[i].d) * dy), BLOCKFN(x0 + i, qy), a0); \
                a1 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x1[i].d) * dy), BLOCKFN(x1 + i, qy), a1); \
                a2 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x2[i].d) * dy), BLOCKFN(x2 + i, qy), a2); \
                a3 = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x3[i].d) * dy), BLOCKFN(x3 + i, qy), a3); \
            }                                                                                  \
            s[r] = hsum_ps(a0);                                                                \
            s[r + 1] = hsum_ps(a1);                                                            \
            s[r + 2] = hsum_ps(a2);                                                            \
            s[r + 3] = hsum_ps(a3);                                                            \
        }                                                                                      \
        for (; r < nr; r++) single(n, s + r, (const char *)vx + (size_t)r * xs, vy);           \
    }

static inline __m256 q4_0_block_y(const wgllm_block_q4_0 *x, __m256i qy) {
    return _mm256_cvtepi32_ps(dot_i8(_mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8)), qy));
}
static inline __m256 q8_0_block_y(const wgllm_block_q8_0 *x, __m256i qy) {
    return _mm256_cvtepi32_ps(dot_i8(_mm256_loadu_si256((const __m256i *)x->qs), qy));
}
NR4_KERNEL(vec_dot_nr_q4_0_avx2, wgllm_block_q4_0, q4_0_block_y, vec_dot_q4_0_q8_0_avx2)
NR4_KERNEL(vec_dot_nr_q8_0_avx2, wgllm_block_q8_0, q8_0_block_y, vec_dot_q8_0_q8_0_avx2)

/* ---- install ----------------------------------------------------------- */

void wgllm_quant_install_avx2(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_F32].vec_dot = vec_dot_f32_avx2;
    t[WGLLM_TYPE_F16].to_float = f16_to_float_avx2;
    t[WGLLM_TYPE_F16].from_float = f16_from_float_avx2;
    t[WGLLM_TYPE_F16].vec_dot = vec_dot_f16_avx2;
    t[WGLLM_TYPE_F16].vec_dot_nr = vec_dot_nr_f16_avx2;
    t[WGLLM_TYPE_BF16].to_float = bf16_to_float_avx2;
    t[WGLLM_TYPE_BF16].from_float = bf16_from_float_avx2;
    t[WGLLM_TYPE_BF16].vec_dot = vec_dot_bf16_avx2;
    t[WGLLM_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx2;
    t[WGLLM_TYPE_Q4_0].vec_dot_nr = vec_dot_nr_q4_0_avx2;
    t[WGLLM_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_avx2;
    t[WGLLM_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx2;
    t[WGLLM_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_avx2;
    t[WGLLM_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx2;
    t[WGLLM_TYPE_Q8_0].vec_dot_nr = vec_dot_nr_q8_0_avx2;
    t[WGLLM_TYPE_Q8_0].from_float = q8_0_from_float_avx2;
    t[WGLLM_TYPE_Q8_1].from_float = q8_1_from_float_avx2;
}

#endif
