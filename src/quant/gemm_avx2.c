/*
 * gemm_avx2.c - the float-weight GEMM's AVX2 micro-kernels (gemm.h): tiles
 * of up to 3 rows x 4 tokens, one 8-lane accumulator per (row, token) (12
 * of the 16 registers, 3 for the weights, 1 for an activation), 8 elements
 * a step; the tail of a row is copied into a zeroed chunk. Each accumulator
 * is reduced the same way at the end, so a result does not depend on the
 * tile it was computed in. 3 x 4 rather than 2 x 6: 7 loads for 12 FMAs
 * instead of 8, and a 4-token tile of f32 activations (32 KiB at K 2048)
 * that L1 holds; one core, F16, K 2048: 86 -> 104 GFLOP/s (the AVX-512
 * kernel's figure on Zen 4), and a mat-vec from L3 29 -> 44 GB/s on three
 * row streams. 4 x 3 needs 17 registers and spills (48 GFLOP/s).
 */
#include "quant/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#ifndef GEMM_AVX2_RM
#define GEMM_AVX2_RM 3
#define GEMM_AVX2_RN 4
#endif
#define RM GEMM_AVX2_RM
#define RN GEMM_AVX2_RN
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE __m256 load_w(uint32_t type, const void *p, int64_t k) {
    if (type == WGLLM_TYPE_F32) return _mm256_loadu_ps((const float *)p + k);
    const __m128i v = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    if (type == WGLLM_TYPE_F16) return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)); /* BF16 */
}

static ALWAYS_INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc[r][t] += w row r . x row t over the 8 elements at k. */
static ALWAYS_INLINE void step(uint32_t type, const char *w, size_t ws, const int M, const float *x, size_t xs,
                               const int N, int64_t k, __m256 acc[RM][RN]) {
    __m256 wv[RM];
#pragma GCC unroll 6
    for (int r = 0; r < M; r++) wv[r] = load_w(type, w + (size_t)r * ws, k);
#pragma GCC unroll 6
    for (int t = 0; t < N; t++) {
        const __m256 xv = _mm256_loadu_ps(x + (size_t)t * xs + k);
#pragma GCC unroll 6
        for (int r = 0; r < M; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
}

static ALWAYS_INLINE void tile(uint32_t type, int64_t K, const char *w, size_t ws, const int M, const char *xb,
                               size_t xbs, const int N, float *out) {
    const float *x = (const float *)xb;
    const size_t xs = xbs / sizeof(float);
    __m256 acc[RM][RN];
#pragma GCC unroll 6
    for (int r = 0; r < M; r++)
#pragma GCC unroll 6
        for (int t = 0; t < N; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) step(type, w, ws, M, x, xs, N, k, acc);
    if (k < K) { /* the last K - k < 8 elements, zero-padded to a chunk */
        const size_t esz = type == WGLLM_TYPE_F32 ? 4 : 2, nk = (size_t)(K - k);
        uint8_t wbuf[RM][32] = {{0}};
        float xbuf[RN][8] = {{0}};
        for (int r = 0; r < M; r++) memcpy(wbuf[r], w + (size_t)r * ws + (size_t)k * esz, nk * esz);
        for (int t = 0; t < N; t++) memcpy(xbuf[t], x + (size_t)t * xs + k, nk * sizeof(float));
        step(type, (const char *)wbuf, sizeof(wbuf[0]), M, xbuf[0], 8, N, 0, acc);
    }
#pragma GCC unroll 6
    for (int r = 0; r < M; r++)
#pragma GCC unroll 6
        for (int t = 0; t < N; t++) out[r * N + t] = hsum(acc[r][t]);
}

/* One function per weight type; M and N become constants in each case
 * (those above RM or RN are never asked for). */
#define CAP(v, hi) ((v) < (hi) ? (v) : (hi))
#define CASE_N(T, M)                                                  \
    switch (n) {                                                      \
    case 1: tile(T, K, w, ws, M, x, xs, 1, out); return;              \
    case 2: tile(T, K, w, ws, M, x, xs, CAP(2, RN), out); return;     \
    case 3: tile(T, K, w, ws, M, x, xs, CAP(3, RN), out); return;     \
    case 4: tile(T, K, w, ws, M, x, xs, CAP(4, RN), out); return;     \
    case 5: tile(T, K, w, ws, M, x, xs, CAP(5, RN), out); return;     \
    default: tile(T, K, w, ws, M, x, xs, RN, out); return;            \
    }
#define MICRO(fn, T)                                                                                     \
    static void fn(int64_t K, const void *vw, size_t ws, int m, const void *vx, size_t xs, int n,        \
                   float *out) {                                                                         \
        const char *w = vw, *x = vx;                                                                     \
        switch (m) {                                                                                     \
        case 1: CASE_N(T, 1)                                                                             \
        case 2: CASE_N(T, CAP(2, RM))                                                                    \
        case 3: CASE_N(T, CAP(3, RM))                                                                    \
        default: CASE_N(T, RM)                                                                           \
        }                                                                                                \
    }
MICRO(micro_f32, WGLLM_TYPE_F32)
MICRO(micro_f16, WGLLM_TYPE_F16)
MICRO(micro_bf16, WGLLM_TYPE_BF16)

const struct wgllm_gemm_isa wgllm_gemm_isa_avx2 = {"avx2", RM, RN, micro_f32, micro_f16, micro_bf16, false, NULL, NULL, NULL};

#endif
