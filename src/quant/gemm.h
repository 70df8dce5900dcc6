/*
 * gemm.h - matrix products for float weights (F32, F16, BF16) as
 * register-tiled GEMMs: what llamafile's sgemm does for llama.cpp.
 *
 * The per-row vec_dot path converts a weight chunk and an activation chunk
 * for every single multiply-add, so a prompt over F16 weights was bound by
 * conversions (0.2-0.4x llama.cpp). Here a tile of rows x tokens keeps one
 * accumulator register per (row, token): each weight chunk is converted
 * once for all the tile's tokens, and the activations (the weight type's
 * vec_dot_type rows, as ggml makes them) are converted to f32 once per call,
 * which is exact (BF16 on a CPU with AVX512_BF16: both sides stay BF16 and
 * vdpbf16ps multiplies them, as ggml does there).
 *
 * Every (row, token) result is summed in the same order whatever the tile,
 * the number of tokens or the rows asked for, so a prompt gives the same
 * bits as the tokens one by one, and a mat-vec (one token) is the same
 * kernel.
 */
#ifndef WGLLM_GEMM_H
#define WGLLM_GEMM_H

#include "quant/quant.h"

/* y[t * ldy + r] (+)= dot(row r of w, token row t of x) for r in [0, nrows),
 * t in [0, n): w's rows (type F32, F16 or BF16, K elements) lie w_stride
 * bytes apart, x's rows (the type's vec_dot_type) x_stride bytes apart.
 * False when the scratch for the converted activations could not be
 * allocated (nothing was written; the caller takes the per-row path). */
typedef bool (*wgllm_gemm_fn)(uint32_t type, int64_t K, const void *w, size_t w_stride, int64_t nrows,
                              const void *x, size_t x_stride, int n, float *y, int ldy, bool accumulate);

/* The kernel for weights of `type` on this CPU (WGLLM_CPU applies), or NULL:
 * then the per-row vec_dot path is the one. name: "avx512", "avx2". */
wgllm_gemm_fn wgllm_gemm_kernel(uint32_t type, const char **name);

/* ---- the panel layout --------------------------------------------------------
 * F16 and BF16 matrices on a CPU with AVX-512, as the CPU backend copies them at load
 * (backend/cpu/matmul.c): rows in panels of 16, panel p holding rows
 * 16p..16p+15 as, for each element k (0..K-1), the 16 rows' element k
 * (32 bytes); panels back to back, so the matrix keeps its size and rows
 * [16p, ..) start at byte 16p * row size. A product over it is outer
 * products: a weight load serves up to 12 tokens and a broadcast activation
 * 16 rows, with no horizontal sums, where the row-major tiles above load a
 * 16-element chunk of 6 tokens' activations for every 4 rows' chunk (their
 * loads held the F16 prompt to 45% of the FMA peak; BF16's vdpbf16ps tiles
 * no better). Results differ from
 * the row layout's in summation order (within the same bounds). */
#define WGLLM_GEMM_PANEL_ROWS 16
/* A result is one FMA chain per block of this many elements, the blocks
 * added in order (a chain as long as a 5632-element row lost too much). */
#define WGLLM_GEMM_PANEL_KB 256

/* True when this CPU has a panel kernel for `type` (F16, BF16; AVX-512; not
 * under WGLLM_CPU=avx2 or scalar) and nrows is a multiple of 16. */
bool wgllm_gemm_panels_supported(uint32_t type, int64_t K, int64_t nrows);
/* dst (nrows * K elements of `type`) = src's nrows rows, src_stride bytes
 * apart, in the panel layout; nrows a multiple of 16. */
void wgllm_gemm_pack_panels(uint32_t type, int64_t K, const void *src, size_t src_stride, int64_t nrows, void *dst);
/* wgllm_gemm_fn over a matrix in the panel layout: nrows a multiple of 16,
 * w the first panel's bytes. False (nothing written) when the activations'
 * scratch could not be allocated. */
bool wgllm_gemm_panels(uint32_t type, int64_t K, const void *w, int64_t nrows, const void *x, size_t x_stride, int n,
                       float *y, int ldy, bool accumulate);

/* ---- the kernels' side (gemm.c drives, gemm_<isa>.c multiply) ----------------
 * A micro-kernel computes one tile: out[r * n + t] = dot(row r of w, x row t)
 * for r < m <= rm, t < n <= rn, x's rows x_stride bytes apart: f32 rows,
 * or for bf16_raw the BF16 activation rows as they are. */
typedef void (*wgllm_gemm_micro_fn)(int64_t K, const void *w, size_t w_stride, int m, const void *x,
                                    size_t x_stride, int n, float *out);
struct wgllm_gemm_isa {
    const char *name;
    int rm, rn;                         /* the largest tile (rm x rn <= WGLLM_GEMM_MAX_TILE) */
    wgllm_gemm_micro_fn f32, f16, bf16; /* per weight type */
    bool bf16_raw;                      /* bf16 multiplies BF16 pairs (vdpbf16ps): no f32 copy of x */
    /* Panels (NULL: none) of F16 and of BF16 weights: out[t * P * 16 + i] =
     * dot(row i of the P panels at w, token t) for P in {1, 2, 4} (4 only
     * with T = 1), T in {1, 4, 12}, xp the T tokens' activations as pack_x
     * makes them: f32 in chunks of 16 elements, the tokens' chunks side by
     * side (xp[(k / 16 * T + t) * 16 + k % 16]; T * 16 * ceil(K / 16)
     * floats), from ng rows of the weight type x_stride bytes apart (tokens
     * past ng repeat the last). */
    void (*panels_f16)(int64_t K, const void *w, int P, const float *xp, int T, float *out);
    void (*panels_bf16)(int64_t K, const void *w, int P, const float *xp, int T, float *out);
    void (*pack_x)(uint32_t type, const void *x, size_t x_stride, int ng, int T, int64_t K, float *xp);
};
#define WGLLM_GEMM_MAX_TILE 32

#if defined(__x86_64__)
extern const struct wgllm_gemm_isa wgllm_gemm_isa_avx2, wgllm_gemm_isa_avx512, wgllm_gemm_isa_avx512bf16;
#endif

#endif
