/*
 * repack_wasm.c - WebAssembly SIMD128 products over the interleaved
 * Q4_0/Q8_0 layout (repack.h), for the browser build (emcc -msimd128).
 *
 * Why: the per-row vec_dot kernels of quant_wasm.c re-widen the activation
 * block for every row and pay a horizontal sum and two fp16 lookups per row
 * and block. Here a 16-byte slice of a panel holds 4 consecutive quants of 4
 * rows, so one activation vector serves 4 rows at once, the row sums come
 * out lane-wise, and each token's activations are laid out for the slices
 * once per call, not once per row.
 *
 * A slice is read as 8 uint16 lanes, lanes 2r and 2r+1 being row r's bytes
 * (0,1) and (2,3). Masks and one shift, no widening, give four int16
 * vectors of quants: the low nibble of the even byte (v & 0x000F, x1), of
 * the odd byte (v & 0x0F00, x256), the high nibble of the even byte
 * (v & 0x00F0, x16) and of the odd byte (v >> 12, x1); i32x4.dot_i16x8 with
 * the matching activations [a_i a_j] x 4 pre-scaled by 256, 1, 16 and 256
 * gives each row's sum times 256 in its own lane, removed by an exact
 * arithmetic shift at the end of the block (the largest sum, 32 x 15 x
 * 127 x 256, fits int32). Q8_0 slices: the even byte (v & 0x00FF) and the
 * odd one (v >> 8), both x1. The layout's unsigned offsets (nibble 0..15 for
 * q-8, byte q+128 for Q8_0) are removed exactly by starting each sum at
 * -8*sum(a) or -128*sum(a) (times the scale).
 *
 * Bit-exactness: the browser is checked token for token against the native
 * build's portable per-row kernels (WGLLM_CPU=scalar, which has no repacked
 * path), so these results equal vec_dot_q4_0_q8_0 / vec_dot_q8_0_q8_0 of
 * quant.c bit for bit, not the fused-multiply-add reference of repack.c:
 * every (row, token) is a float sum in block order of the same expression
 * (Q4_0: sumi * dx * dy, Q8_0: sumi * (dx * dy)), here computed lane-wise;
 * wasm has no fused multiply-add, so each operation rounds as the scalar
 * C does. tests/wasm/test_repack_wasm.c checks it under node.
 *
 * Q4_0 products go to the relaxed-SIMD module instead (repack_relaxed.c)
 * where the browser validates it.
 *
 * Compiled only where __wasm_simd128__ is defined (the native Makefile
 * compiles this file to nothing).
 */
#include "quant/repack.h"

#if defined(__wasm_simd128__)
#include "quant/kquants.h"
#include "quant/repack_relaxed.h"

#include <wasm_simd128.h>

/* The relaxed-SIMD kernel module (repack_relaxed.c), through
 * web/src/relaxed.lib.js; wgllm_cpu_caps()->relaxed_simd says whether this
 * browser validates it. */
extern void wgllm_relaxed_q4_0(const struct wgllm_relaxed_args *args);
extern void wgllm_relaxed_q4_K(const struct wgllm_relaxed_args *args);

#define TILE 4   /* tokens that share one unpacked weight slice */
#define CHUNK 32 /* CHUNK*TILE token-blocks of activations laid out at a time (CHUNK*TILE*272 B of stack) */
#define GROUP 16 /* panels whose float sums stay live across chunks (GROUP*4*TILE*16 B) */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* One token's block of activations, ready for the slices: for slice m of a
 * Q4_0 block, act[4m..4m+3] multiply the four nibble vectors (see the top);
 * for slice g of a Q8_0 block, act[2g], act[2g+1] the even and odd bytes.
 * corr: the offset correction in every lane. */
struct act_block {
    v128_t act[16];
    v128_t corr;
};

struct act_chunk {
    struct act_block a[CHUNK * TILE]; /* block b of token t at [(b - b0) * T + t] */
    float dy[CHUNK * TILE];
};

/* [x[i] x[j]] x 4 as int16, times k. */
static ALWAYS_INLINE v128_t pairs(const int8_t *x, int i, int j, int k) {
    const v128_t v = wasm_i16x8_make(x[i], x[j], x[i], x[j], x[i], x[j], x[i], x[j]);
    return wasm_i16x8_mul(v, wasm_i16x8_splat((int16_t)k));
}

/* The sum of a Q8_0 block's 32 activations (the offset corrections of both kernels). */
static int32_t block_sum(const wgllm_block_q8_0 *xb) {
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) sum += xb->qs[i];
    return sum;
}

static void layout_chunk(const char *x, size_t xs, int T, int64_t b0, int64_t b1, bool q4, struct act_chunk *c) {
    for (int t = 0; t < T; t++) {
        const wgllm_block_q8_0 *xb = (const wgllm_block_q8_0 *)(x + (size_t)t * xs);
        for (int64_t b = b0; b < b1; b++) {
            struct act_block *o = &c->a[(b - b0) * T + t];
            const int8_t *a = xb[b].qs;
            const int32_t sum = block_sum(&xb[b]);
            if (q4) {
                for (int m = 0; m < 4; m++) {
                    o->act[4 * m + 0] = pairs(a, 4 * m, 4 * m + 2, 256);
                    o->act[4 * m + 1] = pairs(a, 4 * m + 1, 4 * m + 3, 1);
                    o->act[4 * m + 2] = pairs(a, 16 + 4 * m, 16 + 4 * m + 2, 16);
                    o->act[4 * m + 3] = pairs(a, 16 + 4 * m + 1, 16 + 4 * m + 3, 256);
                }
                o->corr = wasm_i32x4_splat(-8 * 256 * sum);
            } else {
                for (int g = 0; g < 8; g++) {
                    o->act[2 * g] = pairs(a, 4 * g, 4 * g + 2, 1);
                    o->act[2 * g + 1] = pairs(a, 4 * g + 1, 4 * g + 3, 1);
                }
                o->corr = wasm_i32x4_splat(-128 * sum);
            }
            c->dy[(b - b0) * T + t] = wgllm_fp16_lookup(xb[b].d);
        }
    }
}

static ALWAYS_INLINE v128_t scales4(const wgllm_fp16 *s) {
    return wasm_f32x4_make(wgllm_fp16_lookup(s[0]), wgllm_fp16_lookup(s[1]), wgllm_fp16_lookup(s[2]),
                           wgllm_fp16_lookup(s[3]));
}

#define DOT(e, a) wasm_i32x4_dot_i16x8(e, a)

/* Blocks [b0, b1) of one panel (pd) for T tokens into acc[4 row groups][T]. */
static ALWAYS_INLINE void panel_q4_0(const uint8_t *pd, size_t sb, int64_t b0, int64_t b1, const struct act_chunk *c,
                                     int T, v128_t acc[4][TILE]) {
    const v128_t m0 = wasm_i16x8_splat(0x000F), m1 = wasm_i16x8_splat(0x0F00), m2 = wasm_i16x8_splat(0x00F0);
    for (int64_t b = b0; b < b1; b++) {
        const struct act_block *a = c->a + (b - b0) * T;
        const uint8_t *q = pd + sb + (size_t)b * 256;
        const wgllm_fp16 *sc = (const wgllm_fp16 *)(pd + (size_t)b * 32);
        v128_t s[4][TILE];
#pragma clang loop unroll(full)
        for (int g = 0; g < 4; g++)
#pragma clang loop unroll(full)
            for (int t = 0; t < T; t++) s[g][t] = a[t].corr;
#pragma clang loop unroll(full)
        for (int m = 0; m < 4; m++)
#pragma clang loop unroll(full)
            for (int g = 0; g < 4; g++) {
                const v128_t v = wasm_v128_load(q + 64 * m + 16 * g);
                const v128_t e0 = wasm_v128_and(v, m0), e1 = wasm_v128_and(v, m1), e2 = wasm_v128_and(v, m2),
                             e3 = wasm_u16x8_shr(v, 12);
#pragma clang loop unroll(full)
                for (int t = 0; t < T; t++) {
                    const v128_t *x = a[t].act + 4 * m;
                    s[g][t] = wasm_i32x4_add(s[g][t], wasm_i32x4_add(wasm_i32x4_add(DOT(e0, x[0]), DOT(e1, x[1])),
                                                                     wasm_i32x4_add(DOT(e2, x[2]), DOT(e3, x[3]))));
                }
            }
#pragma clang loop unroll(full)
        for (int g = 0; g < 4; g++) {
            const v128_t dx = scales4(sc + 4 * g);
#pragma clang loop unroll(full)
            for (int t = 0; t < T; t++) { /* sumi * dx * dy, as vec_dot_q4_0_q8_0 */
                const v128_t si = wasm_i32x4_shr(s[g][t], 8);
                const v128_t f = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(si), dx),
                                                wasm_f32x4_splat(c->dy[(b - b0) * T + t]));
                acc[g][t] = wasm_f32x4_add(acc[g][t], f);
            }
        }
    }
}

static ALWAYS_INLINE void panel_q8_0(const uint8_t *pd, size_t sb, int64_t b0, int64_t b1, const struct act_chunk *c,
                                     int T, v128_t acc[4][TILE]) {
    const v128_t lo = wasm_i16x8_splat(0x00FF);
    for (int64_t b = b0; b < b1; b++) {
        const struct act_block *a = c->a + (b - b0) * T;
        const uint8_t *q = pd + sb + (size_t)b * 512;
        const wgllm_fp16 *sc = (const wgllm_fp16 *)(pd + (size_t)b * 32);
        v128_t s[4][TILE];
#pragma clang loop unroll(full)
        for (int g = 0; g < 4; g++)
#pragma clang loop unroll(full)
            for (int t = 0; t < T; t++) s[g][t] = a[t].corr;
#pragma clang loop unroll(full)
        for (int k = 0; k < 8; k++)
#pragma clang loop unroll(full)
            for (int g = 0; g < 4; g++) {
                const v128_t v = wasm_v128_load(q + 64 * k + 16 * g);
                const v128_t ev = wasm_v128_and(v, lo), od = wasm_u16x8_shr(v, 8);
#pragma clang loop unroll(full)
                for (int t = 0; t < T; t++)
                    s[g][t] = wasm_i32x4_add(s[g][t], wasm_i32x4_add(DOT(ev, a[t].act[2 * k]), DOT(od, a[t].act[2 * k + 1])));
            }
#pragma clang loop unroll(full)
        for (int g = 0; g < 4; g++) {
            const v128_t dx = scales4(sc + 4 * g);
#pragma clang loop unroll(full)
            for (int t = 0; t < T; t++) { /* sumi * (dx * dy), as vec_dot_q8_0_q8_0 */
                const v128_t d = wasm_f32x4_mul(dx, wasm_f32x4_splat(c->dy[(b - b0) * T + t]));
                acc[g][t] = wasm_f32x4_add(acc[g][t], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s[g][t]), d));
            }
        }
    }
}

/* One 16-byte slice (4 quants of 4 rows) against its activations x[]: the
 * rows' integer sums added to acc (see the top for the lanes). */
static ALWAYS_INLINE v128_t slice_q4_0(v128_t acc, v128_t v, const v128_t *x) {
    const v128_t e0 = wasm_v128_and(v, wasm_i16x8_splat(0x000F)), e1 = wasm_v128_and(v, wasm_i16x8_splat(0x0F00)),
                 e2 = wasm_v128_and(v, wasm_i16x8_splat(0x00F0)), e3 = wasm_u16x8_shr(v, 12);
    return wasm_i32x4_add(acc, wasm_i32x4_add(wasm_i32x4_add(DOT(e0, x[0]), DOT(e1, x[1])),
                                              wasm_i32x4_add(DOT(e2, x[2]), DOT(e3, x[3]))));
}

static ALWAYS_INLINE v128_t slice_q8_0(v128_t acc, v128_t v, const v128_t *x) {
    const v128_t ev = wasm_v128_and(v, wasm_i16x8_splat(0x00FF)), od = wasm_u16x8_shr(v, 8);
    return wasm_i32x4_add(acc, wasm_i32x4_add(DOT(ev, x[0]), DOT(od, x[1])));
}

/* Decode (one token) over two panels at once, pa and pa + panel. Why: a
 * 128-bit kernel computes for long enough per byte that a single stream of
 * cache-line misses leaves the memory idle (5 GB/s from DRAM against 9.5 in
 * cache); two interleaved streams keep twice as many misses in flight. The
 * row groups stay a rolled loop, so that the weights of one group and the
 * two sums fit the 16 registers that V8 has (unrolled, it spills). */
static ALWAYS_INLINE void panel2_t1(const uint8_t *pa, size_t panel, size_t sb, int64_t b0, int64_t b1,
                                    const struct act_chunk *c, bool q4, v128_t acca[4][TILE], v128_t accb[4][TILE]) {
    const uint8_t *pb = pa + panel;
    const size_t qb = q4 ? 256 : 512;
    for (int64_t b = b0; b < b1; b++) {
        const struct act_block *a = c->a + (b - b0);
        const uint8_t *qa = pa + sb + (size_t)b * qb, *qbp = pb + sb + (size_t)b * qb;
        v128_t sa[4], sbv[4];
#pragma clang loop unroll(disable)
        for (int g = 0; g < 4; g++) {
            v128_t ga = a->corr, gb = a->corr;
            if (q4) {
#pragma clang loop unroll(full)
                for (int m = 0; m < 4; m++) {
                    ga = slice_q4_0(ga, wasm_v128_load(qa + 64 * m + 16 * g), a->act + 4 * m);
                    gb = slice_q4_0(gb, wasm_v128_load(qbp + 64 * m + 16 * g), a->act + 4 * m);
                }
            } else {
#pragma clang loop unroll(full)
                for (int k = 0; k < 8; k++) {
                    ga = slice_q8_0(ga, wasm_v128_load(qa + 64 * k + 16 * g), a->act + 2 * k);
                    gb = slice_q8_0(gb, wasm_v128_load(qbp + 64 * k + 16 * g), a->act + 2 * k);
                }
            }
            sa[g] = ga;
            sbv[g] = gb;
        }
        const v128_t dy = wasm_f32x4_splat(c->dy[b - b0]);
        const wgllm_fp16 *sca = (const wgllm_fp16 *)(pa + (size_t)b * 32), *scb = (const wgllm_fp16 *)(pb + (size_t)b * 32);
#pragma clang loop unroll(full)
        for (int g = 0; g < 4; g++) {
            const v128_t dxa = scales4(sca + 4 * g), dxb = scales4(scb + 4 * g);
            if (q4) { /* sumi * dx * dy, as vec_dot_q4_0_q8_0 */
                acca[g][0] = wasm_f32x4_add(acca[g][0], wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_shr(sa[g], 8)), dxa), dy));
                accb[g][0] = wasm_f32x4_add(accb[g][0], wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_shr(sbv[g], 8)), dxb), dy));
            } else { /* sumi * (dx * dy), as vec_dot_q8_0_q8_0 */
                acca[g][0] = wasm_f32x4_add(acca[g][0], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sa[g]), wasm_f32x4_mul(dxa, dy)));
                accb[g][0] = wasm_f32x4_add(accb[g][0], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sbv[g]), wasm_f32x4_mul(dxb, dy)));
            }
        }
    }
}

static void panel2_q4_0_t1(const uint8_t *pa, size_t panel, size_t sb, int64_t b0, int64_t b1, const struct act_chunk *c,
                           v128_t acca[4][TILE], v128_t accb[4][TILE]) {
    panel2_t1(pa, panel, sb, b0, b1, c, true, acca, accb);
}

static void panel2_q8_0_t1(const uint8_t *pa, size_t panel, size_t sb, int64_t b0, int64_t b1, const struct act_chunk *c,
                           v128_t acca[4][TILE], v128_t accb[4][TILE]) {
    panel2_t1(pa, panel, sb, b0, b1, c, false, acca, accb);
}

typedef void (*panel_fn)(const uint8_t *pd, size_t sb, int64_t b0, int64_t b1, const struct act_chunk *c,
                         v128_t acc[4][TILE]);

#define PANEL_T(fmt, T)                                                                                   \
    static void panel_##fmt##_t##T(const uint8_t *pd, size_t sb, int64_t b0, int64_t b1,                \
                                   const struct act_chunk *c, v128_t acc[4][TILE]) {                    \
        panel_##fmt(pd, sb, b0, b1, c, T, acc);                                                          \
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

/* ---- the relaxed-SIMD module ------------------------------------------------ */

#define RELAXED_MAX_BLOCKS 2048 /* token-blocks of a tile: the per-block arrays stay on the stack (16 KiB) */

/* The module's restatement of the layouts (repack_relaxed.h) against their
 * sources (the offsets that repack.h gives by functions: test_repack_wasm). */
_Static_assert(WGLLM_RELAXED_ROWS == WGLLM_REPACK_ROWS, "panel rows");
_Static_assert(WGLLM_RELAXED_Q8_0_BLOCK == sizeof(wgllm_block_q8_0), "q8_0 block");
_Static_assert(WGLLM_RELAXED_Q8_K_BLOCK == sizeof(wgllm_block_q8_K), "q8_K block");
_Static_assert(WGLLM_RELAXED_Q4_K_RECORD == WGLLM_REPACK_Q4_K_RECORD, "q4_K record");

/* Panels [p0, p1) of a Q4_0 or Q4_K matrix against n tokens, in tiles of up
 * to TILE: what each tile needs of its activations is laid out here (Q4_0:
 * the block scales and the nibbles' offset corrections; Q4_K: the sub-block
 * activation sums that vec_dot_q4_K_q8_K adds from bsums), the products run
 * in the module (same bits as the SIMD128 kernels above and the reference
 * dots: see repack_relaxed.c). Q4_K has no SIMD128 kernel over the layout:
 * the CPU repacks it only where the module runs (repack.c). */
static void relaxed_matmul(const struct wgllm_repacked *w, int64_t p0, int64_t p1, const void *x, size_t x_stride, int n,
                           float *y, int ldy, bool accumulate) {
    const bool k = w->type == WGLLM_TYPE_Q4_K;
    const int64_t nb = w->ne0 / (k ? WGLLM_QK_K : 32);
    float dy[RELAXED_MAX_BLOCKS];
    union { /* Q4_0: a tile's token-blocks; Q4_K: 8 sub-blocks per super-block (ne0 / 256 of them) */
        int32_t corr[RELAXED_MAX_BLOCKS];
        int16_t bsum[TILE * (WGLLM_REPACK_MAX_BLOCKS / 8) * 8];
    } u;
    _Alignas(16) float acc[64];
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0);
    for (int t0 = 0; t0 < n; t0 += TILE) {
        const int T = WGLLM_MIN(TILE, n - t0);
        const char *xt = (const char *)x + (size_t)t0 * x_stride;
        for (int t = 0; t < T; t++) {
            const char *xr = xt + (size_t)t * x_stride;
            for (int64_t b = 0; b < nb; b++) {
                if (k) {
                    const wgllm_block_q8_K *xb = (const wgllm_block_q8_K *)xr + b;
                    for (int s = 0; s < 8; s++) u.bsum[(t * nb + b) * 8 + s] = (int16_t)(xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
                    continue;
                }
                const wgllm_block_q8_0 *xb = (const wgllm_block_q8_0 *)xr + b;
                u.corr[t * nb + b] = -8 * block_sum(xb);
                dy[t * nb + b] = wgllm_fp16_lookup(xb->d);
            }
        }
        const struct wgllm_relaxed_args args = {
            .w = (uint32_t)(uintptr_t)((const uint8_t *)w->data + (size_t)p0 * panel),
            .panel = (uint32_t)panel,
            .sb = k ? 0 : (uint32_t)wgllm_repack_scale_bytes(w->ne0),
            .nb = (uint32_t)nb,
            .np = (uint32_t)(p1 - p0),
            .nt = (uint32_t)T,
            .x = (uint32_t)(uintptr_t)xt,
            .x_stride = (uint32_t)x_stride,
            .dy = (uint32_t)(uintptr_t)dy,
            .sums = (uint32_t)(uintptr_t)(k ? (const void *)u.bsum : (const void *)u.corr),
            .acc = (uint32_t)(uintptr_t)acc,
            .y = (uint32_t)(uintptr_t)(y + (size_t)t0 * ldy + p0 * WGLLM_REPACK_ROWS),
            .ldy = (uint32_t)ldy,
            .accumulate = accumulate,
        };
        (k ? wgllm_relaxed_q4_K : wgllm_relaxed_q4_0)(&args);
    }
}

/* Token tiles of up to TILE; within one, groups of GROUP panels whose sums
 * stay in acc while the activations are laid out CHUNK blocks at a time (so
 * the stack holds ~40 KiB whatever ne0 is); then each row's sum is stored. */
void wgllm_repacked_matmul_wasm(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                                size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    if (w->type == WGLLM_TYPE_Q4_K) {
        WGLLM_ASSERT(wgllm_cpu_caps()->relaxed_simd);
        relaxed_matmul(w, r0 / WGLLM_REPACK_ROWS, r1 / WGLLM_REPACK_ROWS, x, x_stride, n, y, ldy, accumulate);
        return;
    }
    WGLLM_ASSERT(w->type == WGLLM_TYPE_Q4_0 || w->type == WGLLM_TYPE_Q8_0);
    const int64_t nb = w->ne0 / 32;
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0), sb = wgllm_repack_scale_bytes(w->ne0);
    const bool q4 = w->type == WGLLM_TYPE_Q4_0;
    const panel_fn *fns = q4 ? panels_q4_0 : panels_q8_0;
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
    if (q4 && nb * WGLLM_MIN(n, TILE) <= RELAXED_MAX_BLOCKS && wgllm_cpu_caps()->relaxed_simd) {
        relaxed_matmul(w, p0, p1, x, x_stride, n, y, ldy, accumulate);
        return;
    }
    struct act_chunk chunk;
    v128_t acc[GROUP][4][TILE];
    for (int t0 = 0; t0 < n; t0 += TILE) {
        const int T = WGLLM_MIN(TILE, n - t0);
        const char *xt = (const char *)x + (size_t)t0 * x_stride;
        const int64_t cb = CHUNK * TILE / T; /* blocks per chunk: all of a row up to ne0 = 4096 when T = 1 */
        const bool single = nb <= cb;
        if (single) layout_chunk(xt, x_stride, T, 0, nb, q4, &chunk);
        for (int64_t g0 = p0; g0 < p1; g0 += GROUP) {
            const int64_t g1 = WGLLM_MIN(p1, g0 + GROUP);
            for (int64_t p = g0; p < g1; p++)
                for (int g = 0; g < 4; g++)
                    for (int t = 0; t < T; t++) acc[p - g0][g][t] = wasm_f32x4_splat(0.0f);
            for (int64_t b0 = 0; b0 < nb; b0 += cb) {
                const int64_t b1 = WGLLM_MIN(nb, b0 + cb);
                if (!single) layout_chunk(xt, x_stride, T, b0, b1, q4, &chunk);
                int64_t p = g0;
                if (T == 1)
                    for (; p + 2 <= g1; p += 2)
                        (q4 ? panel2_q4_0_t1 : panel2_q8_0_t1)((const uint8_t *)w->data + (size_t)p * panel, panel, sb, b0,
                                                              b1, &chunk, acc[p - g0], acc[p + 1 - g0]);
                for (; p < g1; p++)
                    fns[T]((const uint8_t *)w->data + (size_t)p * panel, sb, b0, b1, &chunk, acc[p - g0]);
            }
            for (int64_t p = g0; p < g1; p++)
                for (int t = 0; t < T; t++) {
                    float *d = y + (size_t)(t0 + t) * ldy + p * WGLLM_REPACK_ROWS;
                    for (int g = 0; g < 4; g++) {
                        const v128_t v = acc[p - g0][g][t];
                        wasm_v128_store(d + 4 * g, accumulate ? wasm_f32x4_add(wasm_v128_load(d + 4 * g), v) : v);
                    }
                }
        }
    }
}

#endif
