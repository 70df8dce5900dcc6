/*
 * gemm_avx512.c - the float-weight GEMM's AVX-512 micro-kernels (gemm.h):
 * over rows, tiles of up to 4 rows x 6 tokens, one 16-lane accumulator per
 * (row, token) (24 of the 32 registers), 16 elements a step; the tail of a
 * row is a masked load. Each accumulator is reduced the same way at the end,
 * so a result does not depend on the tile it was computed in. Over F16/BF16
 * panels (the second half), outer products of 16 rows by up to 12 tokens.
 */
#include "quant/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define RM 4
#define RN 6
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* 16 F16 or BF16 values as f32 (exact). */
static ALWAYS_INLINE __m512 to_f32(uint32_t type, __m256i v) {
    if (type == WGLLM_TYPE_F16) return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); /* BF16 */
}

static ALWAYS_INLINE __m512 load_w(uint32_t type, const void *p, int64_t k, __mmask16 m, bool tail) {
    if (type == WGLLM_TYPE_F32)
        return tail ? _mm512_maskz_loadu_ps(m, (const float *)p + k) : _mm512_loadu_ps((const float *)p + k);
    const uint16_t *h = (const uint16_t *)p + k;
    return to_f32(type, tail ? _mm256_maskz_loadu_epi16(m, h) : _mm256_loadu_si256((const __m256i *)h));
}

/* acc[r][t] += w row r . x row t over the 16 elements at k (the first
 * popcount(m) of them for the tail, where the rest may not exist). */
static ALWAYS_INLINE void step(uint32_t type, const char *const *w, const int M, const char *const *x, const int N,
                               int64_t k, __mmask16 m, bool tail, __m512 acc[RM][RN]) {
    __m512 wv[RM];
#pragma GCC unroll 4
    for (int r = 0; r < M; r++) wv[r] = load_w(type, w[r], k, m, tail);
#pragma GCC unroll 6
    for (int t = 0; t < N; t++) {
        const float *xt = (const float *)x[t] + k;
        const __m512 xv = tail ? _mm512_maskz_loadu_ps(m, xt) : _mm512_loadu_ps(xt);
#pragma GCC unroll 4
        for (int r = 0; r < M; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
}

/* The same for BF16 weights times BF16 activations as they are, 32 elements:
 * vdpbf16ps adds the products of 32 pairs into 16 f32 lanes, twice the work
 * of an f32 FMA per instruction and no conversion at all (denormal inputs
 * count as zero, as in ggml's kernels for this instruction). */
static ALWAYS_INLINE void step_dp(const char *const *w, const int M, const char *const *x, const int N, int64_t k,
                                  __mmask32 m, bool tail, __m512 acc[RM][RN]) {
    __m512bh wv[RM];
#pragma GCC unroll 4
    for (int r = 0; r < M; r++) {
        const uint16_t *wr = (const uint16_t *)w[r] + k;
        wv[r] = (__m512bh)(tail ? _mm512_maskz_loadu_epi16(m, wr) : _mm512_loadu_si512(wr));
    }
#pragma GCC unroll 6
    for (int t = 0; t < N; t++) {
        const uint16_t *xt = (const uint16_t *)x[t] + k;
        const __m512bh xv = (__m512bh)(tail ? _mm512_maskz_loadu_epi16(m, xt) : _mm512_loadu_si512(xt));
#pragma GCC unroll 4
        for (int r = 0; r < M; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
}

/* One tile of RM rows x N tokens; dp: BF16 pairs through step_dp (type is
 * then BF16 and x BF16 rows). Rows past m and tokens past n repeat the last
 * ones and are not stored: a result does not depend on its neighbours, and
 * a few tile shapes keep this file small to compile (under the fuzz
 * build's sanitizers every shape was seconds of compile time). */
static ALWAYS_INLINE void tile(uint32_t type, bool dp, int64_t K, const char *w, size_t ws, int m, const char *x,
                               size_t xs, int n, const int N, float *out) {
    const char *wr[RM], *xr[RN];
    for (int r = 0; r < RM; r++) wr[r] = w + (size_t)(r < m ? r : m - 1) * ws;
    for (int t = 0; t < N; t++) xr[t] = x + (size_t)(t < n ? t : n - 1) * xs;
    __m512 acc[RM][RN];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 6
        for (int t = 0; t < N; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t k = 0;
    if (dp) {
        for (; k + 32 <= K; k += 32) step_dp(wr, RM, xr, N, k, 0, false, acc);
        if (k < K) step_dp(wr, RM, xr, N, k, (__mmask32)((1u << (K - k)) - 1), true, acc);
    } else {
        for (; k + 16 <= K; k += 16) step(type, wr, RM, xr, N, k, 0, false, acc);
        if (k < K) step(type, wr, RM, xr, N, k, (__mmask16)((1u << (K - k)) - 1), true, acc);
    }
    for (int r = 0; r < m; r++)
        for (int t = 0; t < n; t++) out[r * n + t] = _mm512_reduce_add_ps(acc[r][t]);
}

/* One function per weight type: tiles of 1, 2, 4 or 6 tokens (a mat-vec is 1). */
#define MICRO(fn, DP, T)                                                                                   \
    static void fn(int64_t K, const void *vw, size_t ws, int m, const void *vx, size_t xs, int n, float *out) { \
        const char *w = vw, *x = vx;                                                                       \
        switch (n) {                                                                                       \
        case 1: tile(T, DP, K, w, ws, m, x, xs, n, 1, out); return;                                        \
        case 2: tile(T, DP, K, w, ws, m, x, xs, n, 2, out); return;                                        \
        case 3:                                                                                            \
        case 4: tile(T, DP, K, w, ws, m, x, xs, n, 4, out); return;                                        \
        default: tile(T, DP, K, w, ws, m, x, xs, n, 6, out); return;                                       \
        }                                                                                                  \
    }
MICRO(micro_f32, false, WGLLM_TYPE_F32)
MICRO(micro_f16, false, WGLLM_TYPE_F16)
MICRO(micro_bf16, false, WGLLM_TYPE_BF16)
MICRO(micro_bf16_dp, true, WGLLM_TYPE_BF16)

/* ---- the panel layout (gemm.h): outer products ----------------------------
 * P panels (16 rows each, one register after conversion) times T tokens:
 * per element k, P weight loads and T broadcast activations feed P x T
 * FMAs, no horizontal sum. A (row, token) result is one FMA chain per block
 * of WGLLM_GEMM_PANEL_KB elements, the blocks' sums added in order: the
 * same whatever P, T and the rows or tokens around it.
 * The activations (pack_x) are f32 in chunks of 16 elements, the T tokens'
 * chunks side by side (xp[(k / 16 * T + t) * 16 + k % 16]): a pack is a
 * conversion and a store per 16 elements, and a broadcast's cache line
 * serves 16 elements of one token. */

static ALWAYS_INLINE void panel_tile(uint32_t type, const int P, const int T, int64_t K, const uint16_t *pw,
                                     size_t pstride, const float *xp, float *out) {
    __m512 tot[4][12]; /* [P][T]: fixed sizes, so that the inlined tiles live in registers */
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) tot[p][t] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < K; kb += WGLLM_GEMM_PANEL_KB) {
        const int64_t ke = WGLLM_MIN(K, kb + WGLLM_GEMM_PANEL_KB);
        __m512 acc[4][12];
#pragma GCC unroll 4
        for (int p = 0; p < P; p++)
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
        for (int64_t k = kb; k < ke; k++) {
            __m512 wv[4];
#pragma GCC unroll 4
            for (int p = 0; p < P; p++)
                wv[p] = to_f32(type, _mm256_loadu_si256((const __m256i *)(pw + (size_t)p * pstride + (size_t)k * 16)));
            const float *xk = xp + (size_t)(k >> 4) * T * 16 + (k & 15);
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) {
                const __m512 xv = _mm512_set1_ps(xk[t * 16]);
#pragma GCC unroll 4
                for (int p = 0; p < P; p++) acc[p][t] = _mm512_fmadd_ps(wv[p], xv, acc[p][t]);
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < P; p++)
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) tot[p][t] = _mm512_add_ps(tot[p][t], acc[p][t]);
    }
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) _mm512_storeu_ps(out + (size_t)t * P * 16 + p * 16, tot[p][t]);
}

/* P of 1, 2 or 4 (4 for one token only: a decode's four streams), T of 1,
 * 4 or 12 (gemm.c packs a group of tokens as one of these). */
#define PANELS(fn, TY)                                                                        \
    static void fn(int64_t K, const void *pw, int P, const float *xp, int T, float *out) {    \
        const size_t ps = (size_t)K * 16;                                                     \
        if (T == 1) {                                                                         \
            if (P == 4) panel_tile(TY, 4, 1, K, pw, ps, xp, out);                             \
            else if (P == 2) panel_tile(TY, 2, 1, K, pw, ps, xp, out);                        \
            else panel_tile(TY, 1, 1, K, pw, ps, xp, out);                                    \
        } else if (T == 4) {                                                                  \
            if (P == 2) panel_tile(TY, 2, 4, K, pw, ps, xp, out);                             \
            else panel_tile(TY, 1, 4, K, pw, ps, xp, out);                                    \
        } else {                                                                              \
            if (P == 2) panel_tile(TY, 2, 12, K, pw, ps, xp, out);                            \
            else panel_tile(TY, 1, 12, K, pw, ps, xp, out);                                   \
        }                                                                                     \
    }
PANELS(panels_f16, WGLLM_TYPE_F16)
PANELS(panels_bf16, WGLLM_TYPE_BF16)

/* T activation rows of the weight type (F16 or BF16; ng of them, the rest
 * repeating the last) into the kernels' chunks; the last chunk's elements
 * past K are zeros. */
static void pack_x(uint32_t type, const void *x, size_t x_stride, int ng, int T, int64_t K, float *xp) {
    for (int t = 0; t < T; t++) {
        const uint16_t *xt = (const uint16_t *)((const char *)x + (size_t)WGLLM_MIN(t, ng - 1) * x_stride);
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 m = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1);
            _mm512_storeu_ps(xp + (size_t)((k >> 4) * T + t) * 16, to_f32(type, _mm256_maskz_loadu_epi16(m, xt + k)));
        }
    }
}

const struct wgllm_gemm_isa wgllm_gemm_isa_avx512 = {"avx512", RM, RN, micro_f32, micro_f16, micro_bf16, false,
                                                     panels_f16, panels_bf16, pack_x};
const struct wgllm_gemm_isa wgllm_gemm_isa_avx512bf16 = {"avx512bf16", RM, RN, micro_f32, micro_f16, micro_bf16_dp,
                                                         true, panels_f16, panels_bf16, pack_x};

#endif
