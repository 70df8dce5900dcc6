/*
 * repack.h - Q4_0 / Q8_0 weight matrices copied at load into a row-
 * interleaved layout, and the matrix products (mat-vec and mat-mat) over it.
 *
 * The per-row vec_dot kernels spend their time on per-row overhead (one
 * scale at a time, a horizontal sum per row). Here 16 rows are interleaved
 * so that 32-bit lane j of a 512-bit register holds 4 consecutive quants of
 * row j: one vpdpbusd with 4 broadcast activation bytes advances all 16 rows,
 * one vcvtph2ps converts their 16 scales, and no horizontal sum is needed.
 * A mat-mat reuses each unpacked weight register for a tile of tokens.
 *
 * Layout (one "panel" per 16 rows, panels back to back, each 64-byte aligned):
 *   scales: for each block b (32 elements), the 16 rows' fp16 scales
 *           (32 bytes per block), the section padded to 64 bytes;
 *   quants: for each block b, QB bytes (Q4_0: 256, Q8_0: 512) made of
 *           64-byte vectors; in vector v, bytes 4j..4j+3 belong to row j:
 *     Q4_0: vector m (0..3) holds row j's qs[4m..4m+3] unchanged, so its low
 *           nibbles are elements 4m..4m+3 and its high nibbles elements
 *           16+4m..16+4m+3, as u8 in 0..15 (the -8 is applied as
 *           -8*sum(activation block));
 *     Q8_0: vector g (0..7) holds row j's qs[4g..4g+3] xor 0x80, i.e. q+128
 *           as u8 (the +128 is removed as -128*sum(activation block)).
 * The same layout serves every ISA (AVX2 reads a vector as two 8-row halves,
 * wasm SIMD128 as four 4-row slices).
 *
 * Activations are rows of Q8_0 blocks, as traits(Q8_0)->from_float makes
 * them, so results equal the vec_dot ones up to float summation order.
 */
#ifndef WGLLM_REPACK_H
#define WGLLM_REPACK_H

#include "quant/quant.h"

#define WGLLM_REPACK_ROWS 16        /* rows per panel */
#define WGLLM_REPACK_MAX_BLOCKS 2048 /* ne0 / 32 at most (ne0 <= 65536) */

/* A weight matrix in the interleaved layout. */
struct wgllm_repacked {
    uint32_t type;      /* WGLLM_TYPE_Q4_0 or WGLLM_TYPE_Q8_0 */
    int64_t ne0, ne1;   /* elements per row, rows */
    void *data;         /* 64-byte aligned, owned (wgllm_free_aligned) */
    size_t size;
};

/* True when this CPU has a repacked kernel for (type, ne0, ne1): type Q4_0
 * or Q8_0, 0 < ne0 <= 65536 with ne0 % 32 == 0, ne1 > 0 with ne1 % 16 == 0,
 * and AVX2+FMA+F16C or AVX-512 VNNI (WGLLM_CPU=scalar turns it off), or the
 * wasm build's SIMD128. */
bool wgllm_repack_supported(uint32_t type, int64_t ne0, int64_t ne1);
/* Rows a thread's share must be a multiple of (16). */
int wgllm_repack_row_group(void);
/* Copies a matrix in its GGUF layout (ne1 rows of wgllm_row_size(type, ne0)
 * bytes) into *out, which owns the copy afterwards (free with
 * wgllm_repacked_free). Fails with UNSUPPORTED for a type or shape the layout
 * does not take (see wgllm_repack_supported; the CPU is not checked here),
 * OUT_OF_MEMORY when the allocation fails; *out is zeroed then. */
enum wgllm_status wgllm_repack(const void *src, uint32_t type, int64_t ne0, int64_t ne1,
                               struct wgllm_repacked *out, struct wgllm_error *err);
/* Frees the data and zeroes *w; a zeroed struct is fine. */
void wgllm_repacked_free(struct wgllm_repacked *w);
/* y[t*ldy + r] (= or +=) W[r] . x[t] for rows r in [r0, r1) (multiples of the row group) and tokens t in [0, n).
 * x: n rows of Q8_0 activations, x_stride bytes apart. Uses the fastest
 * kernel of this CPU (the scalar reference when there is none). Allocates
 * nothing; uses about 64 KiB of stack. */
void wgllm_repacked_matmul(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                           int n, float *y, int ldy, bool accumulate);

/* ---- internal: layout sizes and the kernels (tests call them directly) ---- */

/* Bytes per block of one panel's quants. */
static inline size_t wgllm_repack_quant_bytes(uint32_t type) { return type == WGLLM_TYPE_Q4_0 ? 256 : 512; }
/* Bytes of one panel's scale section. */
static inline size_t wgllm_repack_scale_bytes(int64_t ne0) { return WGLLM_PAD((size_t)(ne0 / 32) * 32, 64); }
/* Bytes of one panel (16 rows). */
static inline size_t wgllm_repack_panel_bytes(uint32_t type, int64_t ne0) {
    return wgllm_repack_scale_bytes(ne0) + (size_t)(ne0 / 32) * wgllm_repack_quant_bytes(type);
}

typedef void (*wgllm_repacked_matmul_fn)(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                         size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* Portable scalar reference: per (row, token), blocks in order, each added as
 * fma(d_w * d_x, (float)int_dot, acc), which the SIMD kernels do too, so all
 * of them give bit-identical results. */
void wgllm_repacked_matmul_ref(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* The kernel wgllm_repacked_matmul uses on this CPU (NULL: none, the scalar
 * reference stands in); its name in *name ("avx512", "avx2", "simd128"). */
wgllm_repacked_matmul_fn wgllm_repack_kernel(const char **name);
#if defined(__x86_64__)
void wgllm_repacked_matmul_avx2(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate);
void wgllm_repacked_matmul_avx512(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                  size_t x_stride, int n, float *y, int ldy, bool accumulate);
#endif
#if defined(__wasm_simd128__)
/* Not bit-identical to the reference above but to the per-row vec_dot of
 * quant.c (no fused multiply-add; see repack_wasm.c). */
void wgllm_repacked_matmul_wasm(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate);
#endif

#endif
