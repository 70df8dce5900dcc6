/*
 * repack_relaxed.c - the Q4_0 and Q4_K products over the interleaved layout
 * (repack.h) with WebAssembly relaxed-SIMD integer dots, one token (decode)
 * and tiles of up to four (a prompt), as a module of its own that shares the
 * core's memory.
 *
 * Why a module of its own: SIMD128 has no 8-bit dot product, so the SIMD128
 * kernel of repack_wasm.c spends four extractions, four i16 dots and four
 * adds on each 16 bytes of weights; i16x8.relaxed_dot_i8x16_i7x16_s (one
 * pmaddubsw on x86) takes 16 bytes of nibbles against 16 int8 activations at
 * once (TinyLlama-1.1B in Chromium, one thread: Q4_0 decode 11.4 -> 17.2
 * tok/s, Q4_K_M 7.0 -> 10.5; bench/RESULTS.md). Debian's emscripten (LLVM
 * 14) cannot emit relaxed SIMD, and a core that contained it would not load
 * where the browser lacks it (Safari, Firefox today), so this file is built
 * by a current clang (npm @yowasp/clang, web/relaxed.mjs) into a small
 * module that imports the core's memory; the core calls it through
 * web/src/relaxed.lib.js where the browser validates it, and keeps the
 * SIMD128 kernels everywhere else.
 *
 * Freestanding: no libc, no stack in linear memory (the module has no
 * __stack_pointer of its own: it would sit on the core's data), so the
 * accumulators live in a scratch the caller passes and nothing here takes an
 * address of a local. web/relaxed.mjs checks that the module imports nothing
 * but the memory.
 *
 * Same bits as the SIMD128 kernel and the reference dots of quant.c and
 * kquants.c: a row's integer sums are exact (the i7 operand is a nibble,
 * 0..15, so the dots never saturate, and no i16 lane sums more than sixteen
 * products of at most 15 x 128), and the float part is the reference's
 * expression in its order, block after block, built with -ffp-contract=off
 * so that no multiply-add is fused.
 */
#if defined(__wasm_relaxed_simd__)
#include "quant/repack_relaxed.h"

#include <wasm_simd128.h>

/* Q4_0 (repack.h): per block, the 16 rows' fp16 scales at panel + 32 b and
 * their quants at panel + sb + 256 b, slice (m, g) of 16 bytes at 64 m + 16 g
 * holding quant bytes 4m..4m+3 of the four rows of group g. */
#define PANEL_ROWS WGLLM_RELAXED_ROWS
#define Q4_0_QUANT_BYTES WGLLM_RELAXED_Q4_0_QUANTS
#define Q8_0_BLOCK_BYTES WGLLM_RELAXED_Q8_0_BLOCK

/* Four fp16 scales as floats, exactly: the magnitude's bits moved into a
 * float's place and scaled by 2^112 (exact for normals and subnormals
 * alike), inf and NaN given the float exponent, the sign put back. */
static inline v128_t scales4(const uint16_t *s) {
    const v128_t h = wasm_u32x4_load16x4(s);
    const v128_t mag = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 13);
    v128_t f = wasm_f32x4_mul(mag, wasm_f32x4_splat(0x1p112f));
    const v128_t special = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7C00)), wasm_i32x4_splat(0x7C00));
    f = wasm_v128_or(f, wasm_v128_and(special, wasm_i32x4_splat(0x7F800000)));
    return wasm_v128_or(f, wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16));
}

/* The i16 row sums of one 16-byte slice: lanes 2r and 2r+1 are row r's. */
static inline v128_t slice(v128_t sum, v128_t v, v128_t alo, v128_t ahi) {
    const v128_t lo = wasm_v128_and(v, wasm_i8x16_splat(0x0F)), hi = wasm_u8x16_shr(v, 4);
    return wasm_i16x8_add(sum, wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(alo, lo),
                                              wasm_i16x8_relaxed_dot_i8x16_i7x16(ahi, hi)));
}

/* Panels at once: four streams of cache-line misses in flight. The kernel
 * computes little enough per byte that one or two streams leave the memory
 * idle (whole TinyLlama decode under node, one thread: 2 panels 16.3, 4
 * panels 17.9, 6 18.0, 8 16.6 tok/s, its sums spilling). */
#define NP 4

/* Blocks of n panels (1..NP) starting at pa into acc (n x 16 floats); the
 * row groups a rolled loop, so that the NP i16 sums and the activations fit
 * V8's sixteen registers. */
static inline void panels(const struct wgllm_relaxed_args *p, const uint8_t *pa, int n, float *acc) {
    const float *dy = (const float *)(uintptr_t)p->dy;
    const int32_t *corr = (const int32_t *)(uintptr_t)p->sums;
    for (uint32_t b = 0; b < p->nb; b++) {
        const int8_t *a = (const int8_t *)(uintptr_t)(p->x + b * Q8_0_BLOCK_BYTES + 2);
        const uint8_t *q = pa + p->sb + b * Q4_0_QUANT_BYTES;
        const v128_t c = wasm_i32x4_splat(corr[b]), d = wasm_f32x4_splat(dy[b]);
#pragma clang loop unroll(disable)
        for (int g = 0; g < 4; g++) {
            v128_t sum[NP];
#pragma clang loop unroll(full)
            for (int k = 0; k < NP; k++) sum[k] = wasm_i16x8_splat(0);
#pragma clang loop unroll(full)
            for (int m = 0; m < 4; m++) {
                const v128_t alo = wasm_v128_load32_splat(a + 4 * m), ahi = wasm_v128_load32_splat(a + 16 + 4 * m);
#pragma clang loop unroll(full)
                for (int k = 0; k < NP; k++)
                    if (k < n) sum[k] = slice(sum[k], wasm_v128_load(q + k * p->panel + 64 * m + 16 * g), alo, ahi);
            }
#pragma clang loop unroll(full)
            for (int k = 0; k < NP; k++)
                if (k < n) { /* sumi * dx * dy, as vec_dot_q4_0_q8_0 */
                    const v128_t i = wasm_i32x4_add(wasm_i32x4_extadd_pairwise_i16x8(sum[k]), c);
                    const v128_t f = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(i),
                                                                   scales4((const uint16_t *)(pa + k * p->panel + b * 32) + 4 * g)), d);
                    wasm_v128_store(acc + 16 * k + 4 * g, wasm_f32x4_add(wasm_v128_load(acc + 16 * k + 4 * g), f));
                }
        }
    }
}

/* One panel against nt tokens (2..4: a prompt's tiles): each slice's
 * nibbles split once for all the tokens. acc: nt x 16 floats. */
static inline void panel_tokens(const struct wgllm_relaxed_args *p, const uint8_t *pd, int nt, float *acc) {
    const float *dy = (const float *)(uintptr_t)p->dy;
    const int32_t *corr = (const int32_t *)(uintptr_t)p->sums;
    for (uint32_t b = 0; b < p->nb; b++) {
        const uint8_t *q = pd + p->sb + b * Q4_0_QUANT_BYTES;
#pragma clang loop unroll(disable)
        for (int g = 0; g < 4; g++) {
            v128_t sum[4];
#pragma clang loop unroll(full)
            for (int t = 0; t < 4; t++) sum[t] = wasm_i16x8_splat(0);
#pragma clang loop unroll(full)
            for (int m = 0; m < 4; m++) {
                const v128_t v = wasm_v128_load(q + 64 * m + 16 * g);
                const v128_t lo = wasm_v128_and(v, wasm_i8x16_splat(0x0F)), hi = wasm_u8x16_shr(v, 4);
#pragma clang loop unroll(full)
                for (int t = 0; t < 4; t++)
                    if (t < nt) {
                        const int8_t *a = (const int8_t *)(uintptr_t)(p->x + t * p->x_stride + b * Q8_0_BLOCK_BYTES + 2);
                        sum[t] = wasm_i16x8_add(sum[t], wasm_i16x8_add(
                            wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(a + 4 * m), lo),
                            wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load32_splat(a + 16 + 4 * m), hi)));
                    }
            }
            const v128_t dx = scales4((const uint16_t *)(pd + b * 32) + 4 * g);
#pragma clang loop unroll(full)
            for (int t = 0; t < 4; t++)
                if (t < nt) { /* sumi * dx * dy, as vec_dot_q4_0_q8_0 */
                    const v128_t i = wasm_i32x4_add(wasm_i32x4_extadd_pairwise_i16x8(sum[t]),
                                                    wasm_i32x4_splat(corr[t * p->nb + b]));
                    const v128_t f = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(i), dx),
                                                    wasm_f32x4_splat(dy[t * p->nb + b]));
                    wasm_v128_store(acc + 16 * t + 4 * g, wasm_f32x4_add(wasm_v128_load(acc + 16 * t + 4 * g), f));
                }
        }
    }
}

/* Stores n x 16 sums of acc (consecutive) at o (or adds them). */
static inline void store(float *o, const float *acc, int n, uint32_t accumulate) {
    for (int k = 0; k < PANEL_ROWS * n; k += 4) {
        const v128_t v = wasm_v128_load(acc + k);
        wasm_v128_store(o + k, accumulate ? wasm_f32x4_add(wasm_v128_load(o + k), v) : v);
    }
}

/* A panel kernel: one panel against p->nt tokens into acc (nt x 16 floats). */
typedef void (*panel_fn)(const struct wgllm_relaxed_args *p, const uint8_t *pd, int nt, float *acc);

/* Panel by panel (each kernel is inlined at its call), each panel's 16 sums
 * per token stored to y. */
static inline void by_panel(const struct wgllm_relaxed_args *p, panel_fn f) {
    float *acc = (float *)(uintptr_t)p->acc, *y = (float *)(uintptr_t)p->y;
    const int nt = (int)p->nt;
    for (uint32_t i = 0; i < p->np; i++) {
        for (int k = 0; k < 16 * nt; k += 4) wasm_v128_store(acc + k, wasm_f32x4_splat(0.0f));
        f(p, (const uint8_t *)(uintptr_t)(p->w + i * p->panel), nt, acc);
        for (int t = 0; t < nt; t++) store(y + (uint32_t)t * p->ldy + i * PANEL_ROWS, acc + 16 * t, 1, p->accumulate);
    }
}

/* One token: NP panels at a time, then the rest. Several tokens: panel by
 * panel. */
__attribute__((export_name("wgllm_relaxed_q4_0"))) void wgllm_relaxed_q4_0(const struct wgllm_relaxed_args *p) {
    if (p->nt > 1) {
        by_panel(p, panel_tokens);
        return;
    }
    float *acc = (float *)(uintptr_t)p->acc, *y = (float *)(uintptr_t)p->y;
    for (uint32_t i = 0; i < p->np; i += NP) {
        const int n = p->np - i >= NP ? NP : (int)(p->np - i);
        for (int k = 0; k < 16 * NP; k += 4) wasm_v128_store(acc + k, wasm_f32x4_splat(0.0f));
        panels(p, (const uint8_t *)(uintptr_t)(p->w + i * p->panel), n, acc);
        store(y + i * PANEL_ROWS, acc, n, p->accumulate);
    }
}

/* ---- Q4_K ------------------------------------------------------------------ */

/* Record layout of repack.h (Q4_K): 32 quant vectors (c, m) of 64 bytes at
 * 512 c + 64 m, then the 16 rows' scales per sub-block (bytes), their mins
 * per sub-block pair (2 bytes a row), d and dmin (fp16). */
#define Q4_K_RECORD WGLLM_RELAXED_Q4_K_RECORD
#define Q4_K_SCALES WGLLM_RELAXED_Q4_K_SCALES
#define Q4_K_MINS WGLLM_RELAXED_Q4_K_MINS
#define Q4_K_D WGLLM_RELAXED_Q4_K_D
#define Q4_K_DMIN WGLLM_RELAXED_Q4_K_DMIN
#define Q8_K_BLOCK_BYTES WGLLM_RELAXED_Q8_K_BLOCK

/* Four rows' byte values (rows 0..3 at s) each twice, as int16 pairs. */
static inline v128_t byte_pairs(const uint8_t *s) {
    return wasm_i8x16_shuffle(wasm_v128_load32_zero(s), wasm_i8x16_splat(0), 0, 16, 0, 16, 1, 16, 1, 16, 2, 16, 2, 16,
                              3, 16, 3, 16);
}

/* One panel against nt tokens. Per row and super-block, as
 * vec_dot_q4_K_q8_K: sumi = sum_s scale_s * dot_s and summ = sum_s min_s *
 * bsum_s, exact (a sub-block's dot, 32 products of at most 15 x 128, is
 * summed in two i16 lanes of at most 16 products each), then
 * acc += (d * d_x) * sumi - (dmin * d_x) * summ in floats. */
static inline void panel_q4_K(const struct wgllm_relaxed_args *p, const uint8_t *pd, int nt, float *acc) {
    const int16_t *bsum = (const int16_t *)(uintptr_t)p->sums;
    for (uint32_t b = 0; b < p->nb; b++) {
        const uint8_t *rec = pd + b * Q4_K_RECORD;
#pragma clang loop unroll(disable)
        for (int g = 0; g < 4; g++) {
            v128_t sumi[4], summ[4];
#pragma clang loop unroll(full)
            for (int t = 0; t < 4; t++) sumi[t] = summ[t] = wasm_i32x4_splat(0);
#pragma clang loop unroll(disable)
            for (int c = 0; c < 4; c++) {
                v128_t slo[4], shi[4]; /* sub-blocks 2c and 2c+1 */
#pragma clang loop unroll(full)
                for (int t = 0; t < 4; t++) slo[t] = shi[t] = wasm_i16x8_splat(0);
#pragma clang loop unroll(full)
                for (int m = 0; m < 8; m++) {
                    const v128_t v = wasm_v128_load(rec + 512 * c + 64 * m + 16 * g);
                    const v128_t lo = wasm_v128_and(v, wasm_i8x16_splat(0x0F)), hi = wasm_u8x16_shr(v, 4);
#pragma clang loop unroll(full)
                    for (int t = 0; t < 4; t++)
                        if (t < nt) {
                            const int8_t *a = (const int8_t *)(uintptr_t)(p->x + t * p->x_stride + b * Q8_K_BLOCK_BYTES + 4);
                            slo[t] = wasm_i16x8_add(slo[t], wasm_i16x8_relaxed_dot_i8x16_i7x16(
                                                                wasm_v128_load32_splat(a + 64 * c + 4 * m), lo));
                            shi[t] = wasm_i16x8_add(shi[t], wasm_i16x8_relaxed_dot_i8x16_i7x16(
                                                                wasm_v128_load32_splat(a + 64 * c + 32 + 4 * m), hi));
                        }
                }
                const v128_t sclo = byte_pairs(rec + Q4_K_SCALES + 16 * (2 * c) + 4 * g);
                const v128_t schi = byte_pairs(rec + Q4_K_SCALES + 16 * (2 * c + 1) + 4 * g);
#pragma clang loop unroll(full)
                for (int t = 0; t < 4; t++)
                    if (t < nt)
                        sumi[t] = wasm_i32x4_add(sumi[t], wasm_i32x4_add(wasm_i32x4_dot_i16x8(slo[t], sclo),
                                                                         wasm_i32x4_dot_i16x8(shi[t], schi)));
                /* the mins of sub-blocks 2c, 2c+1 (a pair per row) against their activation sums */
                const v128_t mins = wasm_u16x8_load8x8(rec + Q4_K_MINS + 32 * c + 8 * g);
#pragma clang loop unroll(full)
                for (int t = 0; t < 4; t++)
                    if (t < nt) {
                        const v128_t bs = wasm_v128_load32_splat(bsum + ((uint32_t)t * p->nb + b) * 8 + 2 * c);
                        summ[t] = wasm_i32x4_add(summ[t], wasm_i32x4_dot_i16x8(mins, bs));
                    }
            }
            const v128_t dx = scales4((const uint16_t *)(rec + Q4_K_D) + 4 * g);
            const v128_t dmx = scales4((const uint16_t *)(rec + Q4_K_DMIN) + 4 * g);
#pragma clang loop unroll(full)
            for (int t = 0; t < 4; t++)
                if (t < nt) {
                    const v128_t dyt = wasm_v128_load32_splat((const void *)(uintptr_t)(p->x + t * p->x_stride + b * Q8_K_BLOCK_BYTES));
                    const v128_t d = wasm_f32x4_mul(dx, dyt), dm = wasm_f32x4_mul(dmx, dyt);
                    const v128_t f = wasm_f32x4_sub(wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(sumi[t])),
                                                    wasm_f32x4_mul(dm, wasm_f32x4_convert_i32x4(summ[t])));
                    wasm_v128_store(acc + 16 * t + 4 * g, wasm_f32x4_add(wasm_v128_load(acc + 16 * t + 4 * g), f));
                }
        }
    }
}

__attribute__((export_name("wgllm_relaxed_q4_K"))) void wgllm_relaxed_q4_K(const struct wgllm_relaxed_args *p) {
    by_panel(p, panel_q4_K);
}
#endif
