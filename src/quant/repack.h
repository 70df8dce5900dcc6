/*
 * repack.h - Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS weight matrices
 * copied at load into a row-
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
 *   mins:   Q4_1 and Q5_1 only: the same for the rows' fp16 mins m;
 *   quants: for each block b, QB bytes (Q4_0: 256, Q8_0: 512) made of
 *           64-byte vectors; in vector v, bytes 4j..4j+3 belong to row j:
 *     Q4_0: vector m (0..3) holds row j's qs[4m..4m+3] unchanged, so its low
 *           nibbles are elements 4m..4m+3 and its high nibbles elements
 *           16+4m..16+4m+3, as u8 in 0..15 (the -8 is applied as
 *           -8*sum(activation block));
 *     Q8_0: vector g (0..7) holds row j's qs[4g..4g+3] xor 0x80, i.e. q+128
 *           as u8 (the +128 is removed as -128*sum(activation block));
 *     IQ4_NL: as Q4_0 (its blocks are Q4_0's bytes); a nibble indexes the
 *           format's 16 values, which a kernel looks up as value+128 (u8) and
 *           corrects by -128*sum(activation block), as Q8_0's;
 *     Q5_0: Q4_0's four nibble vectors, then a fifth of high bits: its byte
 *           4j+k holds in bit m the fifth bit of row j's element 4m+k and in
 *           bit 4+m that of element 16+4m+k (vector m's two nibbles), so a
 *           kernel adds 16 where a bit test says; values 0..31, the -16 applied
 *           as -16*sum(activation block);
 *     Q4_1: as Q4_0, the nibbles 0..15 taken as they are (no offset);
 *     Q5_1: as Q5_0, the values 0..31 taken as they are.
 * Q4_1 and Q5_1 rows are x = d*q + m: a row's dot adds m times the Q8_1
 * activation block's s (= d_x*sum(activation block)) after d*d_x*sum(q*a),
 * as a second fused multiply-add.
 * The same layout serves every ISA (AVX2 reads a vector as two 8-row halves,
 * wasm SIMD128 as four 4-row slices; for AMX a block's vectors are a B tile
 * in its VNNI order, K = 32 by N = 16 rows, once made signed values).
 *
 * Q4_K and Q5_K (256-element super-blocks) have no separate scale section:
 * each super-block b of a panel is one record of WGLLM_REPACK_Q4_K_RECORD /
 * WGLLM_REPACK_Q5_K_RECORD bytes, records back to back (so a mat-vec streams
 * one panel front to back):
 *   0    quants: 32 vectors of 64 bytes; vector 8c+m holds in bytes
 *        4j..4j+3 row j's qs[32c+4m..32c+4m+3] unchanged: low nibbles are
 *        elements 4m..4m+3 of sub-block 2c, high nibbles those of 2c+1;
 *        in Q5_K the vectors go m-major, 320 bytes per m: vectors (c, m) for
 *        c = 0..3, then high-bit vector m, which holds in bytes 4j..4j+3 row
 *        j's qh[4m..4m+3] unchanged (bit i of qh[l] is the fifth bit of
 *        element 32i+l), so that a mat-vec, m outer, reads the record front
 *        to back (wgllm_repack_k45_low / _high give the offsets);
 *   Q    (Q = 2048 for Q4_K, 2560 for Q5_K) scales: for sub-block s (0..7),
 *        the 16 rows' 6-bit scales as bytes;
 *   Q+128 mins: for sub-block pair k (0..3), the 16 rows' two 6-bit mins of
 *        sub-blocks 2k, 2k+1 (2 bytes per row);
 *   Q+256 d: the 16 rows' fp16 super-block scales;
 *   Q+288 dmin: the 16 rows' fp16 super-block min scales.
 * A row's dot is d*d_x*sum_s scale_s*dot_s - dmin*d_x*sum_s min_s*bsum_s,
 * the integer sums exact, as the vec_dot of kquants.c computes it.
 *
 * Q6_K likewise, records of WGLLM_REPACK_Q6_K_RECORD bytes:
 *   0    quants: for w = 0..15, 192 bytes: low-bit vectors w and w+16, then
 *        high-bit vector w (so a mat-vec reads the record front to back).
 *        In low-bit vector v, bytes 4j..4j+3 hold row j's elements 4v..4v+3
 *        (low nibbles) and 128+4v..128+4v+3 (high nibbles), 4 low bits each
 *        of the unsigned quant q+32 (0..63); in high-bit vector w, byte 4j+k
 *        holds in bits 2i..2i+1 (i = 0..3) the 2 high bits of row j's
 *        element 64i+4w+k (wgllm_repack_q6_K_low / _high give the offsets);
 *   3072 scales: for sub-block s (0..15, 16 elements each), the 16 rows' int8 scales;
 *   3328 d: the 16 rows' fp16 scales;
 *   3360 padding to 64 bytes.
 * A row's dot is d*d_x*sum_s scale_s*(dot_s - 32*bsum_s), exact in integers.
 *
 * IQ4_XS, records of WGLLM_REPACK_IQ4_XS_RECORD bytes:
 *   0    quants: for sub-block s (0..7, 32 elements), 4 vectors of 64 bytes;
 *        vector 4s+m holds in bytes 4j..4j+3 row j's qs[16s+4m..16s+4m+3]
 *        unchanged: low nibbles index elements 4m..4m+3 of the sub-block,
 *        high nibbles 16+4m..16+4m+3;
 *   2048 scales: for sub-block s, the 16 rows' scales (6-bit value - 32) as int8;
 *   2176 d: the 16 rows' fp16 scales;
 *   2208 padding to 64 bytes.
 * A row's dot is d*d_x*sum_s scale_s*sum_i kvalues[idx_i]*x_i, exact in integers.
 *
 * Q2_K, records of WGLLM_REPACK_Q2_K_RECORD bytes (as many as its 16 blocks):
 *   0    quants: 16 vectors of 64 bytes; vector 8h+m holds in bytes 4j..4j+3
 *        row j's qs[32h+4m..32h+4m+3] unchanged: bits 2g..2g+1 of byte k are
 *        element 128h+32g+4m+k (sub-block 8h+2g+m/4);
 *   1024 scales: for sub-block pair p (0..7), row j's scales[2p], scales[2p+1]
 *        (scale | min << 4) at bytes 2j, 2j+1 of 32;
 *   1280 d, 1312 dmin: the 16 rows' fp16 scales.
 * A row's dot is d*d_x*sum_s scale_s*dot_s - dmin*d_x*sum_s min_s*bsum_s,
 * exact in integers, added as Q4_K's.
 *
 * Q3_K, records of WGLLM_REPACK_Q3_K_RECORD bytes:
 *   0    low bits: Q2_K's 16 vectors, of the block's qs;
 *   1024 high bits: 8 vectors; vector m holds in bytes 4j..4j+3 row j's
 *        hmask[4m..4m+3] unchanged: bit 4h+g of byte k is the high bit of
 *        element 128h+32g+4m+k (the value is low | high << 2, minus 4);
 *   1536 scales: for sub-block pair p, row j's two scales (6-bit - 32, int8)
 *        at bytes 2j, 2j+1 of 32;
 *   1792 d: the 16 rows' fp16 scales; 1824 padding to 64 bytes.
 * A row's dot is d*d_x*sum_s scale_s*(dot_s - 4*bsum_s), exact in integers.
 *
 * Activations are rows of the weight's vec_dot_type blocks (Q8_0; Q8_1 for
 * Q4_1 and Q5_1; Q8_K for the K-quants and IQ4_XS), as its from_float makes them, so results equal the vec_dot ones up
 * to float summation order.
 */
#ifndef WGLLM_REPACK_H
#define WGLLM_REPACK_H

#include "quant/quant.h"

#define WGLLM_REPACK_ROWS 16        /* rows per panel */
#define WGLLM_REPACK_MAX_BLOCKS 2048 /* ne0 / 32 at most (ne0 <= 65536) */

#define WGLLM_REPACK_Q4_K_RECORD 2368 /* bytes per Q4_K super-block of a panel (64-byte multiple) */
#define WGLLM_REPACK_Q5_K_RECORD 2880 /* bytes per Q5_K super-block of a panel (64-byte multiple) */
#define WGLLM_REPACK_Q6_K_RECORD 3392 /* bytes per Q6_K super-block of a panel (64-byte multiple) */
#define WGLLM_REPACK_IQ4_XS_RECORD 2240 /* bytes per IQ4_XS super-block of a panel (64-byte multiple) */
#define WGLLM_REPACK_Q2_K_RECORD 1344 /* bytes per Q2_K super-block of a panel (64-byte multiple) */
#define WGLLM_REPACK_Q3_K_RECORD 1856 /* bytes per Q3_K super-block of a panel (64-byte multiple) */
/* Record offsets named once (the layouts above): Q6_K's scales and d, IQ4_XS's scales and d. */
#define WGLLM_REPACK_Q6_K_SCALES 3072
#define WGLLM_REPACK_Q6_K_D 3328
#define WGLLM_REPACK_IQ4_XS_SCALES 2048
#define WGLLM_REPACK_IQ4_XS_D 2176
#define WGLLM_REPACK_Q2_K_SCALES 1024
#define WGLLM_REPACK_Q2_K_D 1280
#define WGLLM_REPACK_Q2_K_DMIN 1312
#define WGLLM_REPACK_Q3_K_HIGH 1024
#define WGLLM_REPACK_Q3_K_SCALES 1536
#define WGLLM_REPACK_Q3_K_D 1792

/* A weight matrix in the interleaved layout. */
struct wgllm_repacked {
    uint32_t type;      /* a type wgllm_repack accepts */
    int64_t ne0, ne1;   /* elements per row, rows */
    void *data;         /* 64-byte aligned, owned (wgllm_free_aligned) */
    size_t size;
};

/* True when this CPU has a repacked kernel for (type, ne0, ne1): type Q4_0
 * or Q8_0, 0 < ne0 <= 65536 with ne0 % 32 == 0, ne1 > 0 with ne1 % 16 == 0,
 * and AVX2+FMA+F16C or AVX-512 VNNI (WGLLM_CPU=scalar turns it off), or the
 * wasm build's SIMD128; IQ4_NL, Q5_0, Q4_1 and Q5_1 as Q4_0's shapes, on x86
 * with AVX2+FMA+F16C or AVX-512 VNNI (not wasm); type Q4_K with
 * ne0 % 256 == 0, on x86 with AVX2+FMA+F16C or AVX-512 VNNI, and in wasm
 * where the relaxed-SIMD module runs (repack_relaxed.c); IQ4_XS as Q4_K's
 * shapes on x86 with AVX2+FMA+F16C or AVX-512 VNNI; Q2_K, Q3_K, Q5_K and
 * Q6_K likewise, with AVX-512 VNNI only. With AMX-INT8 the same as with AVX-512 VNNI (the
 * AMX kernel hands what it does not take to the AVX-512 one). */
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
/* Rows [r0, r0 + n) of w as a matrix of their own, sharing w's data (not to
 * be freed): r0 and n multiples of WGLLM_REPACK_ROWS (one expert of a
 * repacked stack of experts). */
struct wgllm_repacked wgllm_repacked_rows(const struct wgllm_repacked *w, int64_t r0, int64_t n);
/* y[t*ldy + r] (= or +=) W[r] . x[t] for rows r in [r0, r1) (multiples of the row group) and tokens t in [0, n).
 * x: n rows of activations in the weight type's vec_dot_type (Q8_0; Q8_1 for
 * Q4_1 and Q5_1; Q8_K for the K-quants and IQ4_XS), x_stride bytes apart. Uses the fastest
 * kernel of this CPU (the scalar reference when there is none). Allocates
 * nothing; uses about 64 KiB of stack (140 KiB with AMX). */
void wgllm_repacked_matmul(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                           int n, float *y, int ldy, bool accumulate);

/* ---- internal: layout sizes and the kernels (tests call them directly) ---- */

/* The 256-element formats of the layout (Q8_K activations, records per super-block). */
static inline bool wgllm_repack_is_k(uint32_t type) {
    return type == WGLLM_TYPE_Q2_K || type == WGLLM_TYPE_Q3_K || type == WGLLM_TYPE_Q4_K || type == WGLLM_TYPE_Q5_K ||
           type == WGLLM_TYPE_Q6_K || type == WGLLM_TYPE_IQ4_XS;
}
/* Bytes per block of one panel's quants (the 32-element formats). */
static inline size_t wgllm_repack_quant_bytes(uint32_t type) {
    return type == WGLLM_TYPE_Q4_0 || type == WGLLM_TYPE_IQ4_NL || type == WGLLM_TYPE_Q4_1 ? 256
           : type == WGLLM_TYPE_Q5_0 || type == WGLLM_TYPE_Q5_1                            ? 320
                                                                                            : 512;
}
/* Bytes of one panel's scale section (the 32-element formats); Q4_1's and
 * Q5_1's min section, which follows it, has as many. */
static inline size_t wgllm_repack_scale_bytes(int64_t ne0) { return WGLLM_PAD((size_t)(ne0 / 32) * 32, 64); }
/* The 32-element formats with a min section (Q8_1 activations). */
static inline bool wgllm_repack_has_min(uint32_t type) { return type == WGLLM_TYPE_Q4_1 || type == WGLLM_TYPE_Q5_1; }
/* An ISA file's panel table for a 32-element format: the tables are named
 * prefix##q4_0, ..q5_0, ..q4_1, ..q5_1, ..iq4_nl, ..q8_0 in every such file. */
#define WGLLM_REPACK_PANELS_OF(type, prefix)                                                            \
    ((type) == WGLLM_TYPE_Q4_0     ? prefix##q4_0                                                          \
     : (type) == WGLLM_TYPE_Q5_0   ? prefix##q5_0                                                          \
     : (type) == WGLLM_TYPE_Q4_1   ? prefix##q4_1                                                          \
     : (type) == WGLLM_TYPE_Q5_1   ? prefix##q5_1                                                          \
     : (type) == WGLLM_TYPE_IQ4_NL ? prefix##iq4_nl                                                        \
                                   : prefix##q8_0)
/* Offset in a panel of the quants (the 32-element formats): after the scales, and the mins. */
static inline size_t wgllm_repack_quant_offset(uint32_t type, int64_t ne0) {
    return wgllm_repack_scale_bytes(ne0) * (wgllm_repack_has_min(type) ? 2 : 1);
}
/* Q4_K/Q5_K: bytes of a record before its scales (quants, and Q5_K's high bits). */
static inline size_t wgllm_repack_k45_quant_bytes(uint32_t type) { return type == WGLLM_TYPE_Q5_K ? 2560 : 2048; }
/* Q4_K (five false) / Q5_K: offsets in a record of quant vector (c, m) and high-bit vector m. */
static inline size_t wgllm_repack_k45_low(bool five, int c, int m) {
    return (size_t)(five ? 320 * m + 64 * c : 512 * c + 64 * m);
}
static inline size_t wgllm_repack_k45_high(int m) { return (size_t)(320 * m + 256); }
/* Q6_K: offsets in a record of low-bit vector v (0..31) and high-bit vector w (0..15). */
static inline size_t wgllm_repack_q6_K_low(int v) { return (size_t)(192 * (v & 15) + 64 * (v >> 4)); }
static inline size_t wgllm_repack_q6_K_high(int w) { return (size_t)(192 * w + 128); }
/* Bytes of one panel (16 rows). */
static inline size_t wgllm_repack_panel_bytes(uint32_t type, int64_t ne0) {
    if (type == WGLLM_TYPE_Q4_K) return (size_t)(ne0 / 256) * WGLLM_REPACK_Q4_K_RECORD;
    if (type == WGLLM_TYPE_Q5_K) return (size_t)(ne0 / 256) * WGLLM_REPACK_Q5_K_RECORD;
    if (type == WGLLM_TYPE_Q6_K) return (size_t)(ne0 / 256) * WGLLM_REPACK_Q6_K_RECORD;
    if (type == WGLLM_TYPE_IQ4_XS) return (size_t)(ne0 / 256) * WGLLM_REPACK_IQ4_XS_RECORD;
    if (type == WGLLM_TYPE_Q2_K) return (size_t)(ne0 / 256) * WGLLM_REPACK_Q2_K_RECORD;
    if (type == WGLLM_TYPE_Q3_K) return (size_t)(ne0 / 256) * WGLLM_REPACK_Q3_K_RECORD;
    return wgllm_repack_quant_offset(type, ne0) + (size_t)(ne0 / 32) * wgllm_repack_quant_bytes(type);
}

typedef void (*wgllm_repacked_matmul_fn)(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                         size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* Portable scalar reference: per (row, token), blocks in order, each added as
 * fma(d_w * d_x, (float)int_dot, acc) (Q4_1, Q5_1: then fma(m, s_x, acc)),
 * which the SIMD kernels do too, so all of them give bit-identical results. */
void wgllm_repacked_matmul_ref(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* The kernel wgllm_repacked_matmul uses on this CPU (NULL: none, the scalar
 * reference stands in); its name in *name ("amx", "avx512", "avx2", "simd128").
 * It takes the types that wgllm_repack_supported accepts on this CPU (for
 * the others wgllm_repacked_matmul runs the reference). */
wgllm_repacked_matmul_fn wgllm_repack_kernel(const char **name);
/* The 256-element formats' kernels share their tile loop: per tile of up to
 * WGLLM_REPACK_TILE tokens, each super-block's activation scale and its
 * 32-element sums (int16 pairs: sub-blocks 2k low, 2k+1 high), computed
 * once and read by every panel. */
#define WGLLM_REPACK_TILE 4
#define WGLLM_REPACK_MAX_SB (WGLLM_REPACK_MAX_BLOCKS * 32 / 256)
struct wgllm_repack_pre_k {
    int32_t bsum2[WGLLM_REPACK_MAX_SB][4][WGLLM_REPACK_TILE];
    float dx[WGLLM_REPACK_MAX_SB][WGLLM_REPACK_TILE];
};
/* A Q8_K block's 32-element sums of sub-blocks 2k (low int16) and 2k + 1
 * (high), from its 16-element bsums: the pair one vpmaddwd multiplies by a
 * row's two mins. */
static inline int32_t wgllm_repack_bsum2(const int16_t *bsums, int k) {
    const uint16_t lo = (uint16_t)(bsums[4 * k] + bsums[4 * k + 1]), hi = (uint16_t)(bsums[4 * k + 2] + bsums[4 * k + 3]);
    return (int32_t)((uint32_t)lo | (uint32_t)hi << 16);
}
/* One panel (16 rows) times the tile's tokens: y (+)= W . x for them. */
typedef void (*wgllm_repack_panel_k_fn)(const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                        const struct wgllm_repack_pre_k *pre, float *y, int ldy, bool accumulate);
/* Runs panels[T] (T = 1..WGLLM_REPACK_TILE) over rows r0..r1 and all n tokens,
 * panels in L2-sized groups when there are several tiles. */
void wgllm_repack_drive_k(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                          int n, float *y, int ldy, bool accumulate, const wgllm_repack_panel_k_fn *panels);

#if defined(__x86_64__)
void wgllm_repacked_matmul_avx2(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate);
void wgllm_repacked_matmul_avx512(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                  size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* AMX-INT8 (repack_amx.c): every repacked format but Q2_K/Q3_K for 16 tokens or
 * more; the rest it hands to wgllm_repacked_matmul_avx512. Needs AMX-INT8 usable
 * (wgllm_cpu_caps()->amx_int8) and AVX-512 VNNI; about 140 KiB of stack. */
void wgllm_repacked_matmul_amx(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate);
/* Tests only: a known bug the AMX kernel plants while this is set, which
 * test_repack must catch (0: none). */
enum {
    WGLLM_REPACK_AMX_MUTANT_OFFSET = 1, /* weight values off by one (the 32-element formats: their offset) */
    WGLLM_REPACK_AMX_MUTANT_ORDER,      /* two blocks added in the wrong order */
    WGLLM_REPACK_AMX_MUTANT_TAIL,       /* a short last tile of tokens one token shorter */
};
extern int wgllm_repack_amx_mutant;
#endif
#if defined(__wasm_simd128__)
/* Not bit-identical to the reference above but to the per-row vec_dot of
 * quant.c (no fused multiply-add; see repack_wasm.c). */
void wgllm_repacked_matmul_wasm(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate);
#endif

#endif
