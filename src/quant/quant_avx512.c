/*
 * quant_avx512.c - AVX-512 (F/BW/VL/VNNI, optional BF16) dot kernels, used
 * over the AVX2 ones when the CPU has VNNI. Integer dots use vpdpbusd
 * (unsigned x signed bytes): a signed weight q is fed as q + c (unsigned)
 * and c * sum(y) is subtracted, computed by a second vpdpbusd on the same
 * activation bytes. The hot formats (Q4_0, Q8_0) take two blocks per 512-bit
 * register, plus 4-row kernels that load each activation block once.
 */
#include "quant/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define FP16(h) wgllm_fp16_table[h]

/* ---- helpers ----------------------------------------------------------- */

static inline float hsum256(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* [a x8 | b x8]: the scale of two blocks laid out as their int32 sums are. */
static inline __m512 scale2(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

static inline __m512i load2x32(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Two Q4 blocks -> 64 bytes [b0 low nibbles | b0 high | b1 low | b1 high],
 * i.e. both blocks' elements in order, each in [0, 15]. */
static inline __m512i nibbles2x32(const uint8_t *a, const uint8_t *b) {
    const __m256i va = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a));
    const __m256i vb = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b));
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(va), vb, 1);
    v = _mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4); /* 128-bit lanes 1 and 3 */
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

static inline __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 0x10 in byte j where bit j of the 32-bit qh is set. */
static inline __m256i bit5_32(const uint8_t *qh) {
    uint32_t u;
    memcpy(&u, qh, sizeof(u));
    return _mm256_maskz_mov_epi8((__mmask32)u, _mm256_set1_epi8(0x10));
}

/* ---- float dots -------------------------------------------------------- */

static void vec_dot_f32_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    double sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

static inline __m512 f16x16(const wgllm_fp16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

static void vec_dot_f16_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_fp16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(f16x16(x + i), f16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(f16x16(x + i + 16), f16x16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(f16x16(x + i + 32), f16x16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(f16x16(x + i + 48), f16x16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(f16x16(x + i), f16x16(y + i), a0);
    double sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) sum += (double)(FP16(x[i]) * FP16(y[i]));
    *s = (float)sum;
}

/* vec_dot_f16_avx512 of several rows against one y (the attention's scores:
 * a query against every cached key), y converted once: each row's sum is
 * the same sequence of operations as vec_dot_f16_avx512's, so the same bits. */
static void vec_dot_nr_f16_avx512(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) {
    const wgllm_fp16 *y = vy;
    enum { MAXV = 256 }; /* y up to 4096 elements converted (16 KiB); longer rows one by one */
    if (n > 16 * MAXV) {
        for (int r = 0; r < nr; r++) vec_dot_f16_avx512(n, s + r, (const char *)vx + (size_t)r * xs, y);
        return;
    }
    __m512 yv[MAXV];
    for (int64_t i = 0; i + 16 <= n; i += 16) yv[i / 16] = f16x16(y + i);
    for (int r = 0; r < nr; r++) {
        const wgllm_fp16 *x = (const wgllm_fp16 *)((const char *)vx + (size_t)r * xs);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t i = 0;
        for (; i + 64 <= n; i += 64) {
            a0 = _mm512_fmadd_ps(f16x16(x + i), yv[i / 16], a0);
            a1 = _mm512_fmadd_ps(f16x16(x + i + 16), yv[i / 16 + 1], a1);
            a2 = _mm512_fmadd_ps(f16x16(x + i + 32), yv[i / 16 + 2], a2);
            a3 = _mm512_fmadd_ps(f16x16(x + i + 48), yv[i / 16 + 3], a3);
        }
        for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(f16x16(x + i), yv[i / 16], a0);
        double sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        for (; i < n; i++) sum += (double)(FP16(x[i]) * FP16(y[i]));
        s[r] = (float)sum;
    }
}

static inline __m512 bf16x16(const wgllm_bf16 *p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

static void vec_dot_bf16_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_bf16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(bf16x16(x + i), bf16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(bf16x16(x + i + 16), bf16x16(y + i + 16), a1);
    }
    double sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) sum += (double)(wgllm_bf16_to_fp32(x[i]) * wgllm_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ggml's AVX512_BF16 path: vdpbf16ps, 64 elements per step, two sums.
 * (vdpbf16ps treats denormal inputs as zero, as ggml's does.) */
static void vec_dot_bf16_avx512bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_bf16 *x = vx, *y = vy;
    __m512 c1 = _mm512_setzero_ps(), c2 = c1;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        c1 = _mm512_dpbf16_ps(c1, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
        c2 = _mm512_dpbf16_ps(c2, (__m512bh)_mm512_loadu_si512(x + i + 32), (__m512bh)_mm512_loadu_si512(y + i + 32));
    }
    double sum = (double)_mm512_reduce_add_ps(c1) + (double)_mm512_reduce_add_ps(c2);
    for (; i < n; i++) sum += (double)(wgllm_bf16_to_fp32(x[i]) * wgllm_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ---- Q4_0 x Q8_0 ------------------------------------------------------- */

/* sum(nib*y) - 8*sum(y) for one block, as 8 int32 partial sums -> float. */
static inline __m256 q4_0_block256(const wgllm_block_q4_0 *x, const wgllm_block_q8_0 *y) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(x->qs), qy);
    const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), qy);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(d, c));
}

static void vec_dot_q4_0_q8_0_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i qy0 = load2x32(y[i].qs, y[i + 1].qs);
        const __m512i qy1 = load2x32(y[i + 2].qs, y[i + 3].qs);
        __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles2x32(x[i].qs, x[i + 1].qs), qy0);
        __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles2x32(x[i + 2].qs, x[i + 3].qs), qy1);
        d0 = _mm512_sub_epi32(d0, _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, qy0));
        d1 = _mm512_sub_epi32(d1, _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, qy1));
        const __m512 s0 = scale2(FP16(x[i].d) * FP16(y[i].d), FP16(x[i + 1].d) * FP16(y[i + 1].d));
        const __m512 s1 = scale2(FP16(x[i + 2].d) * FP16(y[i + 2].d), FP16(x[i + 3].d) * FP16(y[i + 3].d));
        acc0 = _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(d0), acc0);
        acc1 = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(d1), acc1);
    }
    __m256 acc = _mm256_setzero_ps();
    for (; i < nb; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q4_0_block256(x + i, y + i), acc);
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum256(acc);
}

/* 4 rows: per pair of activation blocks, its bytes, 8*sum and scale are
 * computed once and used for all four weight rows. */
static void vec_dot_nr_q4_0_avx512(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) {
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    const __m512i eight = _mm512_set1_epi8(8);
    int r = 0;
    for (; r + 4 <= nr; r += 4) {
        const wgllm_block_q4_0 *x[4];
        for (int k = 0; k < 4; k++) x[k] = (const wgllm_block_q4_0 *)((const char *)vx + (size_t)(r + k) * xs);
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int64_t i = 0;
        for (; i + 2 <= nb; i += 2) {
            const __m512i qy = load2x32(y[i].qs, y[i + 1].qs);
            /* -8*sum(y), shared by the rows, seeds each row's vpdpbusd */
            const __m512i negc =
                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, qy));
            const __m512 dy = scale2(FP16(y[i].d), FP16(y[i + 1].d));
            for (int k = 0; k < 4; k++) {
                const __m512i d = _mm512_dpbusd_epi32(negc, nibbles2x32(x[k][i].qs, x[k][i + 1].qs), qy);
                const __m512 sc = _mm512_mul_ps(dy, scale2(FP16(x[k][i].d), FP16(x[k][i + 1].d)));
                acc[k] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(d), acc[k]);
            }
        }
        for (int k = 0; k < 4; k++) {
            float t = _mm512_reduce_add_ps(acc[k]);
            if (i < nb) t += FP16(x[k][i].d) * FP16(y[i].d) * hsum256(q4_0_block256(x[k] + i, y + i));
            s[r + k] = t;
        }
    }
    for (; r < nr; r++) vec_dot_q4_0_q8_0_avx512(n, s + r, (const char *)vx + (size_t)r * xs, vy);
}

/* ---- Q8_0 x Q8_0 ------------------------------------------------------- */

/* x + 128 is unsigned; subtract 128*sum(y). */
static inline __m256 q8_0_block256(const wgllm_block_q8_0 *x, const wgllm_block_q8_0 *y) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i sx = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), _mm256_set1_epi8((char)0x80));
    const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), sx, qy);
    const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), qy);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(d, c));
}

static void vec_dot_q8_0_q8_0_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q8_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i qy0 = load2x32(y[i].qs, y[i + 1].qs);
        const __m512i qy1 = load2x32(y[i + 2].qs, y[i + 3].qs);
        const __m512i qx0 = _mm512_xor_si512(load2x32(x[i].qs, x[i + 1].qs), bias);
        const __m512i qx1 = _mm512_xor_si512(load2x32(x[i + 2].qs, x[i + 3].qs), bias);
        __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx0, qy0);
        __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx1, qy1);
        d0 = _mm512_sub_epi32(d0, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, qy0));
        d1 = _mm512_sub_epi32(d1, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, qy1));
        const __m512 s0 = scale2(FP16(x[i].d) * FP16(y[i].d), FP16(x[i + 1].d) * FP16(y[i + 1].d));
        const __m512 s1 = scale2(FP16(x[i + 2].d) * FP16(y[i + 2].d), FP16(x[i + 3].d) * FP16(y[i + 3].d));
        acc0 = _mm512_fmadd_ps(s0, _mm512_cvtepi32_ps(d0), acc0);
        acc1 = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(d1), acc1);
    }
    __m256 acc = _mm256_setzero_ps();
    for (; i < nb; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d)), q8_0_block256(x + i, y + i), acc);
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum256(acc);
}

static void vec_dot_nr_q8_0_avx512(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) {
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    int r = 0;
    for (; r + 4 <= nr; r += 4) {
        const wgllm_block_q8_0 *x[4];
        for (int k = 0; k < 4; k++) x[k] = (const wgllm_block_q8_0 *)((const char *)vx + (size_t)(r + k) * xs);
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int64_t i = 0;
        for (; i + 2 <= nb; i += 2) {
            const __m512i qy = load2x32(y[i].qs, y[i + 1].qs);
            const __m512i negc =
                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, qy));
            const __m512 dy = scale2(FP16(y[i].d), FP16(y[i + 1].d));
            for (int k = 0; k < 4; k++) {
                const __m512i qx = _mm512_xor_si512(load2x32(x[k][i].qs, x[k][i + 1].qs), bias);
                const __m512i d = _mm512_dpbusd_epi32(negc, qx, qy);
                const __m512 sc = _mm512_mul_ps(dy, scale2(FP16(x[k][i].d), FP16(x[k][i + 1].d)));
                acc[k] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(d), acc[k]);
            }
        }
        for (int k = 0; k < 4; k++) {
            float t = _mm512_reduce_add_ps(acc[k]);
            if (i < nb) t += FP16(x[k][i].d) * FP16(y[i].d) * hsum256(q8_0_block256(x[k] + i, y + i));
            s[r + k] = t;
        }
    }
    for (; r < nr; r++) vec_dot_q8_0_q8_0_avx512(n, s + r, (const char *)vx + (size_t)r * xs, vy);
}

/* ---- Q4_1 / Q5_0 / Q5_1 (one block per 256-bit register) --------------- */

static void vec_dot_q4_1_q8_1_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    const int64_t nb = n / WGLLM_QK8_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float summs = 0;
    int64_t i = 0;
    for (; i < nb; i++) {
        summs += FP16(x[i].m) * FP16(y[i].s);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(x[i].qs), qy);
        const __m256 sc = _mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d));
        if (i & 1)
            acc1 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc1);
        else
            acc0 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc0);
    }
    *s = hsum256(_mm256_add_ps(acc0, acc1)) + summs;
}

static void vec_dot_q5_0_q8_0_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), bit5_32(x[i].qh));
        __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qx, qy);
        d = _mm256_sub_epi32(d, _mm256_dpbusd_epi32(_mm256_setzero_si256(), sixteen, qy));
        const __m256 sc = _mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d));
        if (i & 1)
            acc1 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc1);
        else
            acc0 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc0);
    }
    *s = hsum256(_mm256_add_ps(acc0, acc1));
}

static void vec_dot_q5_1_q8_1_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    const int64_t nb = n / WGLLM_QK8_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        summs += FP16(x[i].m) * FP16(y[i].s);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), bit5_32(x[i].qh));
        const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qx, qy);
        const __m256 sc = _mm256_set1_ps(FP16(x[i].d) * FP16(y[i].d));
        if (i & 1)
            acc1 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc1);
        else
            acc0 = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(d), acc0);
    }
    *s = hsum256(_mm256_add_ps(acc0, acc1)) + summs;
}

/* ---- fp16 rows --------------------------------------------------------- */

void wgllm_fp16_to_fp32_row_avx512(const wgllm_fp16 *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f16x16(x + i));
    for (; i < n; i++) y[i] = FP16(x[i]);
}

void wgllm_fp32_to_fp16_row_avx512(const float *x, wgllm_fp16 *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = wgllm_fp32_to_fp16(x[i]);
}

static void f16_to_float_avx512(const void *x, float *y, int64_t n) { wgllm_fp16_to_fp32_row_avx512(x, y, n); }
static void f16_from_float_avx512(const float *x, void *y, int64_t n) { wgllm_fp32_to_fp16_row_avx512(x, y, n); }

/* ---- install ----------------------------------------------------------- */

void wgllm_quant_install_avx512(struct wgllm_type_traits *t, bool has_bf16) {
    t[WGLLM_TYPE_F32].vec_dot = vec_dot_f32_avx512;
    t[WGLLM_TYPE_F16].to_float = f16_to_float_avx512;
    t[WGLLM_TYPE_F16].from_float = f16_from_float_avx512;
    t[WGLLM_TYPE_F16].vec_dot = vec_dot_f16_avx512;
    t[WGLLM_TYPE_F16].vec_dot_nr = vec_dot_nr_f16_avx512;
    t[WGLLM_TYPE_BF16].vec_dot = has_bf16 ? vec_dot_bf16_avx512bf16 : vec_dot_bf16_avx512;
    t[WGLLM_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx512;
    t[WGLLM_TYPE_Q4_0].vec_dot_nr = vec_dot_nr_q4_0_avx512;
    t[WGLLM_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_avx512;
    t[WGLLM_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx512;
    t[WGLLM_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_avx512;
    t[WGLLM_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx512;
    t[WGLLM_TYPE_Q8_0].vec_dot_nr = vec_dot_nr_q8_0_avx512;
}

#endif
