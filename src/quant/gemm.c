/*
 * gemm.c - the float-weight GEMM's driver (gemm.h): picks the micro-kernel
 * set for this CPU, converts the activations to f32 once, and walks the
 * tiles in a cache-friendly order.
 *
 * Loop order: tokens in tiles whose f32 rows fit in an eighth of L3 (up to
 * 4 MiB); inside a token tile, rows in blocks of a quarter of L2 (up to 256
 * KiB of weights), and inside a block every group of tokens passes over the
 * block's rows, so a weight block is read from memory once per token tile
 * and from L2 after that, and the tile's activations from L3. Tiles sized
 * for L2 instead (512 KiB: 23 tokens of a 5632-wide row) made each thread
 * stream its weights 6 times for a 128-token prompt, which two threads
 * sharing the memory bus felt (F16 prompt 0.94x the native llama.cpp).
 */
#include "quant/gemm.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static const struct wgllm_gemm_isa *isa;

/* f32 activation rows of one token tile, weight rows of one row block */
static int64_t x_tile_bytes = 4 << 20, w_block_bytes = 256 << 10;


static void pick_isa(void) {
    wgllm_quant_init();
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) /* glibc; elsewhere the defaults */
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 > 0) x_tile_bytes = WGLLM_MAX((int64_t)512 << 10, WGLLM_MIN((int64_t)l3 / 8, (int64_t)4 << 20));
    if (l2 > 0) w_block_bytes = WGLLM_MAX((int64_t)64 << 10, WGLLM_MIN((int64_t)l2 / 4, (int64_t)256 << 10));
#endif
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *c = wgllm_cpu_caps();
    if (c->avx2 && c->fma && c->f16c) isa = &wgllm_gemm_isa_avx2;
    if (isa && c->avx512f && c->avx512bw && c->avx512vl)
        isa = c->avx512bf16 ? &wgllm_gemm_isa_avx512bf16 : &wgllm_gemm_isa_avx512;
#endif
}

static wgllm_gemm_micro_fn micro_for(uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_F32: return isa->f32;
    case WGLLM_TYPE_F16: return isa->f16;
    case WGLLM_TYPE_BF16: return isa->bf16;
    default: return NULL;
    }
}


static void store(float *y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

/* One token: the rows in RM parts, a tile taking row i of each part, so
 * that the tile reads RM long sequential streams (adjacent rows would make
 * RM streams a row long, on which the hardware prefetcher never got going:
 * 18 instead of 28 GB/s on one core). */
static void matvec(wgllm_gemm_micro_fn micro, int RM, int64_t K, const void *w, size_t w_stride, int64_t nrows,
                   const void *x, float *y, bool accumulate) {
    const int64_t q = nrows / RM;
    float out[WGLLM_GEMM_MAX_TILE];
    for (int64_t i = 0; i < q; i++) {
        micro(K, (const char *)w + (size_t)i * w_stride, (size_t)q * w_stride, RM, x, 0, 1, out);
        for (int r = 0; r < RM; r++) store(y + i + r * q, out[r], accumulate);
    }
    const int64_t rest = nrows - q * RM;
    if (rest > 0) {
        micro(K, (const char *)w + (size_t)(q * RM) * w_stride, w_stride, (int)rest, x, 0, 1, out);
        for (int r = 0; r < rest; r++) store(y + q * RM + r, out[r], accumulate);
    }
}

static bool gemm_run(uint32_t type, int64_t K, const void *w, size_t w_stride, int64_t nrows, const void *x,
                     size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    const wgllm_gemm_micro_fn micro = micro_for(type);
    WGLLM_ASSERT(micro && K > 0);
    if (n <= 0 || nrows <= 0) return true;
    const int RM = isa->rm, RN = isa->rn;
    const uint32_t vdt = wgllm_type_traits(type)->vec_dot_type;
    int TT = n;
    float small[8192], *scratch = NULL;
    const bool raw = vdt == WGLLM_TYPE_F32 || (type == WGLLM_TYPE_BF16 && isa->bf16_raw);
    if (!raw) {
        const int64_t fit = x_tile_bytes / (K * (int64_t)sizeof(float));
        TT = (int)WGLLM_MAX(1, WGLLM_MIN((int64_t)n, fit));
        if (TT > RN) TT -= TT % RN;
        /* a mat-vec (every token of a generation) converts into the stack:
         * no allocation on the per-token path for rows up to 8192 */
        if ((size_t)TT * (size_t)K <= sizeof(small) / sizeof(small[0])) scratch = small;
        else if (!(scratch = malloc((size_t)TT * (size_t)K * sizeof(float)))) return false;
    }
    int64_t RB = WGLLM_MAX((int64_t)RM, (int64_t)(w_block_bytes / w_stride));
    RB -= RB % RM;
    const wgllm_to_float_fn to_float = wgllm_type_traits(vdt)->to_float;
    for (int t0 = 0; t0 < n; t0 += TT) {
        const int nt = WGLLM_MIN(TT, n - t0);
        const char *xf;
        size_t xfs;
        if (scratch) {
            for (int t = 0; t < nt; t++) to_float((const char *)x + (size_t)(t0 + t) * x_stride, scratch + (size_t)t * K, K);
            xf = (const char *)scratch, xfs = (size_t)K * sizeof(float);
        } else {
            xf = (const char *)x + (size_t)t0 * x_stride, xfs = x_stride;
        }
        if (nt == 1) { /* a mat-vec */
            matvec(micro, RM, K, w, w_stride, nrows, xf, y + (size_t)t0 * ldy, accumulate);
            continue;
        }
        for (int64_t rb = 0; rb < nrows; rb += RB) {
            const int64_t re = WGLLM_MIN(nrows, rb + RB);
            for (int tt = 0; tt < nt; tt += RN) {
                const int nn = WGLLM_MIN(RN, nt - tt);
                for (int64_t r = rb; r < re; r += RM) {
                    const int mm = (int)WGLLM_MIN((int64_t)RM, re - r);
                    float out[WGLLM_GEMM_MAX_TILE];
                    micro(K, (const char *)w + (size_t)r * w_stride, w_stride, mm, xf + (size_t)tt * xfs, xfs, nn, out);
                    for (int t = 0; t < nn; t++) {
                        float *yt = y + (size_t)(t0 + tt + t) * ldy + r;
                        for (int i = 0; i < mm; i++) store(yt + i, out[i * nn + t], accumulate);
                    }
                }
            }
        }
    }
    if (scratch != small) free(scratch);
    return true;
}

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

wgllm_gemm_fn wgllm_gemm_kernel(uint32_t type, const char **name) {
    pthread_once(&isa_once, pick_isa);
    if (name) *name = isa ? isa->name : "none";
    return isa && micro_for(type) ? gemm_run : NULL;
}

/* ---- the panel layout ---------------------------------------------------- */

bool wgllm_gemm_panels_supported(uint32_t type, int64_t K, int64_t nrows) {
    pthread_once(&isa_once, pick_isa);
    return isa && isa->panels_f16 && (type == WGLLM_TYPE_F16 || type == WGLLM_TYPE_BF16) && K > 0 && nrows > 0 &&
           nrows % WGLLM_GEMM_PANEL_ROWS == 0;
}

void wgllm_gemm_pack_panels(uint32_t type, int64_t K, const void *src, size_t src_stride, int64_t nrows, void *dst) {
    WGLLM_ASSERT((type == WGLLM_TYPE_F16 || type == WGLLM_TYPE_BF16) && nrows % WGLLM_GEMM_PANEL_ROWS == 0);
    enum { R = WGLLM_GEMM_PANEL_ROWS, KC = 64 }; /* a chunk's 2 KiB of panel stays in L1 while 16 rows fill it */
    for (int64_t p = 0; p < nrows / R; p++) {
        uint16_t *d = (uint16_t *)dst + (size_t)p * R * (size_t)K;
        for (int64_t kb = 0; kb < K; kb += KC)
            for (int r = 0; r < R; r++) {
                const uint16_t *row = (const uint16_t *)((const char *)src + (size_t)(p * R + r) * src_stride);
                for (int64_t k = kb; k < WGLLM_MIN(K, kb + KC); k++) d[(size_t)k * R + r] = row[k];
            }
    }
}

/* The tokens a group of ng (1..12) is packed and multiplied as: one of the
 * kernels' T (1, 4 or 12), the rest repeating the last token. */
static int group_tokens(int ng) { return ng == 1 ? 1 : ng <= 4 ? 4 : 12; }

/* The same loop order as gemm_run: tokens in tiles of f32 rows that fit
 * x_tile_bytes, rows in blocks of w_block_bytes, every group of 12 tokens
 * of a tile passing over a block while it is in L2. */
bool wgllm_gemm_panels(uint32_t type, int64_t K, const void *w, int64_t nrows, const void *x, size_t x_stride, int n,
                       float *y, int ldy, bool accumulate) {
    pthread_once(&isa_once, pick_isa);
    WGLLM_ASSERT(wgllm_gemm_panels_supported(type, K, nrows));
    if (n <= 0) return true;
    enum { G = 12, R = WGLLM_GEMM_PANEL_ROWS };
    int TT = (int)WGLLM_MAX(1, WGLLM_MIN((int64_t)n, x_tile_bytes / (K * (int64_t)sizeof(float))));
    if (TT > G) TT -= TT % G;
    const int64_t K16 = WGLLM_PAD(K, 16); /* a group's pack: T * K16 floats */
    const size_t cap = (size_t)(TT > G ? TT : group_tokens(TT)) * (size_t)K16; /* TT > G is a multiple of G */
    float small[8192], *xp = small;
    if (cap > sizeof(small) / sizeof(small[0]) && !(xp = malloc(cap * sizeof(float))))
        return false;
    const size_t panel_bytes = (size_t)K * R * sizeof(uint16_t);
    void (*const panels)(int64_t, const void *, int, const float *, int, float *) =
        type == WGLLM_TYPE_F16 ? isa->panels_f16 : isa->panels_bf16;
    int64_t RB = WGLLM_MAX((int64_t)2 * R, (int64_t)(w_block_bytes / (K * (int64_t)sizeof(uint16_t))));
    RB -= RB % (2 * R);
    for (int t0 = 0; t0 < n; t0 += TT) {
        const int nt = WGLLM_MIN(TT, n - t0), ngroups = (nt + G - 1) / G;
        for (int g = 0; g < ngroups; g++) {
            const int ng = WGLLM_MIN(G, nt - g * G), T = group_tokens(ng);
            isa->pack_x(type, (const char *)x + (size_t)(t0 + g * G) * x_stride, x_stride, ng, T, K, xp + (size_t)g * G * K16);
        }
        for (int64_t rb = 0; rb < nrows; rb += RB) {
            const int64_t re = WGLLM_MIN(nrows, rb + RB);
            for (int g = 0; g < ngroups; g++) {
                const int ng = WGLLM_MIN(G, nt - g * G), T = group_tokens(ng);
                for (int64_t r = rb; r < re;) {
                    const int P = T == 1 && re - r >= 4 * R ? 4 : re - r >= 2 * R ? 2 : 1;
                    float out[G * 2 * R];
                    panels(K, (const char *)w + (size_t)(r / R) * panel_bytes, P, xp + (size_t)g * G * K16, T,
                                    out);
                    for (int t = 0; t < ng; t++) {
                        float *yt = y + (size_t)(t0 + g * G + t) * ldy + r;
                        for (int i = 0; i < P * R; i++) store(yt + i, out[t * P * R + i], accumulate);
                    }
                    r += P * R;
                }
            }
        }
    }
    if (xp != small) free(xp);
    return true;
}
