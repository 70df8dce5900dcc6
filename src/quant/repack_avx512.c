/*
 * repack_avx512.c - AVX-512 VNNI products over the interleaved Q4_0/Q8_0
 * layout (repack.h). Per block, each 64-byte weight vector (16 rows x 4
 * quants) is loaded and unpacked once and fed to vpdpbusd against 4
 * broadcast activation bytes of each token of a tile of up to TILE tokens;
 * the integer sums of a token start from its -bias*sum(x) correction, which
 * is computed once per tile and block, shared by all panels.
 *
 * Loop order: panels are taken in groups of about 1 MiB so that, for a
 * prompt, a group stays in L2 while every tile of tokens passes over it.
 */
#include "quant/repack.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TILE 4
/* Software prefetch distance in bytes of a panel's quants: the hardware
 * prefetcher alone left a mat-vec at ~10 of the ~12 GB/s a core can read. */
#define PF 2048
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Per block, per token of the tile: the integer correction and the scale. */
struct tile_pre {
    int32_t corr[WGLLM_REPACK_MAX_BLOCKS][TILE];
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

static ALWAYS_INLINE void store_tile(const __m512 *acc, int T, float *y, int ldy, bool accumulate) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *d = y + (size_t)t * ldy;
        _mm512_storeu_ps(d, accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), acc[t]) : acc[t]);
    }
}

/* One panel (16 rows) times T tokens (x: the tile's first token row). */
static ALWAYS_INLINE void panel_q4_0(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,
                                     const struct tile_pre *pre, int T, float *y, int ldy, bool accumulate) {
    const __m512i mask = _mm512_set1_epi8(0x0F);
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pd + b * 32)));
        const uint8_t *q = pd + sb + b * 256;
        const int8_t *a[TILE];
        __m512i ia[TILE], ib[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a[t] = ((const wgllm_block_q8_0 *)(x + (size_t)t * xs))[b].qs;
            ia[t] = _mm512_set1_epi32(pre->corr[b][t]);
            ib[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m512i v = _mm512_load_si512((const void *)(q + 64 * m));
            _mm_prefetch((const char *)(q + 64 * m + PF), _MM_HINT_T0);
            const __m512i lo = _mm512_and_si512(v, mask);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                ia[t] = _mm512_dpbusd_epi32(ia[t], lo, bcast32(a[t] + 4 * m));
                ib[t] = _mm512_dpbusd_epi32(ib[t], hi, bcast32(a[t] + 16 + 4 * m));
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

#define PANEL_T(fmt, T)                                                                                     \
    static void panel_##fmt##_t##T(const uint8_t *pd, size_t sb, int64_t nb, const char *x, size_t xs,     \
                                   const struct tile_pre *pre, float *y, int ldy, bool accumulate) {       \
        panel_##fmt(pd, sb, nb, x, xs, pre, T, y, ldy, accumulate);                                        \
    }
PANEL_T(q4_0, 1)
PANEL_T(q4_0, 2)
PANEL_T(q4_0, 3)
PANEL_T(q4_0, 4)
PANEL_T(q8_0, 1)
PANEL_T(q8_0, 2)
PANEL_T(q8_0, 3)
PANEL_T(q8_0, 4)

static const panel_fn panels_q4_0[TILE + 1] = {NULL, panel_q4_0_t1, panel_q4_0_t2, panel_q4_0_t3, panel_q4_0_t4};
static const panel_fn panels_q8_0[TILE + 1] = {NULL, panel_q8_0_t1, panel_q8_0_t2, panel_q8_0_t3, panel_q8_0_t4};

void wgllm_repacked_matmul_avx512(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                  size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    WGLLM_ASSERT(w->type == WGLLM_TYPE_Q4_0 || w->type == WGLLM_TYPE_Q8_0);
    const int64_t nb = w->ne0 / 32;
    WGLLM_ASSERT(nb <= WGLLM_REPACK_MAX_BLOCKS);
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0), sb = wgllm_repack_scale_bytes(w->ne0);
    const bool q4 = w->type == WGLLM_TYPE_Q4_0;
    const panel_fn *fns = q4 ? panels_q4_0 : panels_q8_0;
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
    /* panels per L2-resident group; a single tile of tokens needs no grouping */
    const int64_t group = n <= TILE ? WGLLM_MAX(1, p1 - p0) : WGLLM_MAX(1, (int64_t)(1 << 20) / (int64_t)panel);
    struct tile_pre pre;
    for (int64_t g0 = p0; g0 < p1; g0 += group) {
        const int64_t g1 = WGLLM_MIN(p1, g0 + group);
        for (int t0 = 0; t0 < n; t0 += TILE) {
            const int T = WGLLM_MIN(TILE, n - t0);
            const char *xt = (const char *)x + (size_t)t0 * x_stride;
            tile_prepare(xt, x_stride, T, nb, q4 ? 8 : 128, &pre);
            for (int64_t p = g0; p < g1; p++)
                fns[T]((const uint8_t *)w->data + (size_t)p * panel, sb, nb, xt, x_stride, &pre,
                       y + (size_t)t0 * ldy + p * WGLLM_REPACK_ROWS, ldy, accumulate);
        }
    }
}

#endif
