/*
 * quant_wasm.c - WebAssembly SIMD128 kernels (the browser build, emcc
 * -msimd128): the Q4_0 x Q8_0, Q8_0 x Q8_0 (one token and several), Q4_K x
 * Q8_K and Q6_K x Q8_K dots and the Q8_0 activation quantizer (several times the scalar kernels
 * under V8; `WGLLM_BENCH=1 make wasm-test` prints by how much).
 *
 * Bit-exactness: the browser is checked token for token against the native
 * portable kernels (tests/web), so these give the scalar reference's results
 * bit for bit, not just within tolerance. The quantized dots compute each
 * block's integer sum with SIMD (exact: for the K-quants the scaled
 * sub-block sums too, integer addition being associative), then add the
 * blocks up in the reference's order with its float expression; wasm has no fused
 * multiply-add, so the same C expression rounds the same way. The quantizer
 * rounds half to even with f32x4.nearest, as the scalar round_even does.
 *
 * F16 stays on the scalar table lookups: a SIMD128 fp16 -> f32 conversion
 * (bit moves, selects for subnormals and Inf/NaN) ran at a third of their
 * speed under V8 with emscripten 3.1.6's LLVM 14, dot and row alike; but
 * several F16 rows against one y (the attention) run four rows per pass.
 *
 * Q4_0 and Q8_0 matrices whose shape the interleaved layout takes are
 * multiplied by repack_wasm.c instead (same results, bit for bit); these
 * per-row dots serve the other shapes and the experts.
 *
 * Compiled only where __wasm_simd128__ is defined (web/wasm.mk excludes the
 * x86/ARM files; the native Makefile compiles this file to nothing).
 */
#include "quant/kquants.h"
#include "quant/quant.h"

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>

#define FP16(h) wgllm_fp16_lookup(h)

/* ---- integer helpers ----------------------------------------------------- */

/* Sum of a[i] * b[i] over 16 int8 pairs, in 4 int32 lanes. */
static inline v128_t dot_i8(v128_t a, v128_t b) {
    const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b));
    const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b));
    return wasm_i32x4_add(lo, hi);
}

/* [sum(p0), sum(p1), sum(p2), sum(p3)]: four horizontal sums at once. */
static inline v128_t hsum4_i32(v128_t p0, v128_t p1, v128_t p2, v128_t p3) {
    const v128_t s01 = wasm_i32x4_add(wasm_i32x4_shuffle(p0, p1, 0, 4, 1, 5), wasm_i32x4_shuffle(p0, p1, 2, 6, 3, 7));
    const v128_t s23 = wasm_i32x4_add(wasm_i32x4_shuffle(p2, p3, 0, 4, 1, 5), wasm_i32x4_shuffle(p2, p3, 2, 6, 3, 7));
    return wasm_i32x4_add(wasm_i32x4_shuffle(s01, s23, 0, 1, 4, 5), wasm_i32x4_shuffle(s01, s23, 2, 3, 6, 7));
}

static inline int32_t hsum_i32(v128_t p) {
    return wasm_i32x4_extract_lane(p, 0) + wasm_i32x4_extract_lane(p, 1) + wasm_i32x4_extract_lane(p, 2) +
           wasm_i32x4_extract_lane(p, 3);
}

/* Integer dot of one Q4_0 block with one Q8_0 block, in 4 lanes. */
static inline v128_t block_q4_0(const wgllm_block_q4_0 *x, const wgllm_block_q8_0 *y) {
    const v128_t v = wasm_v128_load(x->qs);
    const v128_t eight = wasm_i8x16_splat(8);
    const v128_t lo = wasm_i8x16_sub(wasm_v128_and(v, wasm_i8x16_splat(0x0F)), eight);
    const v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(v, 4), eight);
    return wasm_i32x4_add(dot_i8(lo, wasm_v128_load(y->qs)), dot_i8(hi, wasm_v128_load(y->qs + 16)));
}

static inline v128_t block_q8_0(const wgllm_block_q8_0 *x, const wgllm_block_q8_0 *y) {
    return wasm_i32x4_add(dot_i8(wasm_v128_load(x->qs), wasm_v128_load(y->qs)),
                          dot_i8(wasm_v128_load(x->qs + 16), wasm_v128_load(y->qs + 16)));
}

/* ---- quantized dots ------------------------------------------------------- */

/* The reference: sumf += sumi * dx * dy (Q4_0), sumf += sumi * (dx * dy)
 * (Q8_0), block after block. Four blocks' sums are formed as one vector of
 * floats (lane-wise the same expression), then added in block order. */
static void vec_dot_q4_0_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    float sumf = 0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const v128_t si = hsum4_i32(block_q4_0(x + i, y + i), block_q4_0(x + i + 1, y + i + 1),
                                    block_q4_0(x + i + 2, y + i + 2), block_q4_0(x + i + 3, y + i + 3));
        const v128_t dx = wasm_f32x4_make(FP16(x[i].d), FP16(x[i + 1].d), FP16(x[i + 2].d), FP16(x[i + 3].d));
        const v128_t dy = wasm_f32x4_make(FP16(y[i].d), FP16(y[i + 1].d), FP16(y[i + 2].d), FP16(y[i + 3].d));
        const v128_t f = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(si), dx), dy);
        sumf += wasm_f32x4_extract_lane(f, 0);
        sumf += wasm_f32x4_extract_lane(f, 1);
        sumf += wasm_f32x4_extract_lane(f, 2);
        sumf += wasm_f32x4_extract_lane(f, 3);
    }
    for (; i < nb; i++) sumf += hsum_i32(block_q4_0(x + i, y + i)) * FP16(x[i].d) * FP16(y[i].d);
    *s = sumf;
}

static void vec_dot_q8_0_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q8_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    const int64_t nb = n / WGLLM_QK8_0;
    float sumf = 0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const v128_t si = hsum4_i32(block_q8_0(x + i, y + i), block_q8_0(x + i + 1, y + i + 1),
                                    block_q8_0(x + i + 2, y + i + 2), block_q8_0(x + i + 3, y + i + 3));
        const v128_t dx = wasm_f32x4_make(FP16(x[i].d), FP16(x[i + 1].d), FP16(x[i + 2].d), FP16(x[i + 3].d));
        const v128_t dy = wasm_f32x4_make(FP16(y[i].d), FP16(y[i + 1].d), FP16(y[i + 2].d), FP16(y[i + 3].d));
        const v128_t f = wasm_f32x4_mul(wasm_f32x4_convert_i32x4(si), wasm_f32x4_mul(dx, dy));
        sumf += wasm_f32x4_extract_lane(f, 0);
        sumf += wasm_f32x4_extract_lane(f, 1);
        sumf += wasm_f32x4_extract_lane(f, 2);
        sumf += wasm_f32x4_extract_lane(f, 3);
    }
    for (; i < nb; i++) sumf += hsum_i32(block_q8_0(x + i, y + i)) * (FP16(x[i].d) * FP16(y[i].d));
    *s = sumf;
}

/* ---- several tokens at once (prompt processing) --------------------------- */

/* A weight block widened to 4 x 8 int16 once, then dotted with each token's
 * activation block. The integer sums are those of block_q4_0/block_q8_0 and
 * the float expressions those of the single-token kernels, so every result
 * is bit-identical to vec_dot (the contract of vec_dot_mt). */
static inline void widen_q4_0(const wgllm_block_q4_0 *x, v128_t u[4]) {
    const v128_t v = wasm_v128_load(x->qs);
    const v128_t eight = wasm_i8x16_splat(8);
    const v128_t lo = wasm_i8x16_sub(wasm_v128_and(v, wasm_i8x16_splat(0x0F)), eight);
    const v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(v, 4), eight);
    u[0] = wasm_i16x8_extend_low_i8x16(lo);
    u[1] = wasm_i16x8_extend_high_i8x16(lo);
    u[2] = wasm_i16x8_extend_low_i8x16(hi);
    u[3] = wasm_i16x8_extend_high_i8x16(hi);
}

static inline void widen_q8_0(const wgllm_block_q8_0 *x, v128_t u[4]) {
    const v128_t a = wasm_v128_load(x->qs), b = wasm_v128_load(x->qs + 16);
    u[0] = wasm_i16x8_extend_low_i8x16(a);
    u[1] = wasm_i16x8_extend_high_i8x16(a);
    u[2] = wasm_i16x8_extend_low_i8x16(b);
    u[3] = wasm_i16x8_extend_high_i8x16(b);
}

static inline v128_t dot_widened(const v128_t u[4], const int8_t *q) {
    const v128_t a = wasm_v128_load(q), b = wasm_v128_load(q + 16);
    const v128_t p = wasm_i32x4_add(wasm_i32x4_dot_i16x8(u[0], wasm_i16x8_extend_low_i8x16(a)),
                                    wasm_i32x4_dot_i16x8(u[1], wasm_i16x8_extend_high_i8x16(a)));
    const v128_t r = wasm_i32x4_add(wasm_i32x4_dot_i16x8(u[2], wasm_i16x8_extend_low_i8x16(b)),
                                    wasm_i32x4_dot_i16x8(u[3], wasm_i16x8_extend_high_i8x16(b)));
    return wasm_i32x4_add(p, r);
}

/* SCALE4(si, dx, dy) and SCALE1(sumi, dx, dy): the float expression of the
 * single-token kernel, for 4 blocks and for one. */
#define SCALE4_Q4_0(si, dx, dy) wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(si), dx), dy)
#define SCALE1_Q4_0(si, dx, dy) ((si) * (dx) * (dy))
#define SCALE4_Q8_0(si, dx, dy) wasm_f32x4_mul(wasm_f32x4_convert_i32x4(si), wasm_f32x4_mul(dx, dy))
#define SCALE1_Q8_0(si, dx, dy) ((si) * ((dx) * (dy)))

#define MT_KERNEL(name, XT, WIDEN, SCALE4, SCALE1)                                                        \
    static void name(int64_t n, float *s, size_t ss, const void *vx, const void *vy, size_t ys, int nt) {  \
        const XT *x = vx;                                                                                \
        const int64_t nb = n / WGLLM_QK8_0;                                                              \
        float sumf[WGLLM_VEC_DOT_MT_MAX] = {0};                                                          \
        int64_t i = 0;                                                                                   \
        for (; i + 4 <= nb; i += 4) {                                                                    \
            v128_t u[4][4];                                                                              \
            for (int k = 0; k < 4; k++) WIDEN(x + i + k, u[k]);                                          \
            const v128_t dx =                                                                            \
                wasm_f32x4_make(FP16(x[i].d), FP16(x[i + 1].d), FP16(x[i + 2].d), FP16(x[i + 3].d));     \
            for (int t = 0; t < nt; t++) {                                                               \
                const wgllm_block_q8_0 *y = (const wgllm_block_q8_0 *)((const char *)vy + (size_t)t * ys); \
                const v128_t si = hsum4_i32(dot_widened(u[0], y[i].qs), dot_widened(u[1], y[i + 1].qs),  \
                                            dot_widened(u[2], y[i + 2].qs), dot_widened(u[3], y[i + 3].qs)); \
                const v128_t dy =                                                                        \
                    wasm_f32x4_make(FP16(y[i].d), FP16(y[i + 1].d), FP16(y[i + 2].d), FP16(y[i + 3].d)); \
                const v128_t f = SCALE4(si, dx, dy);                                                     \
                sumf[t] += wasm_f32x4_extract_lane(f, 0);                                                \
                sumf[t] += wasm_f32x4_extract_lane(f, 1);                                                \
                sumf[t] += wasm_f32x4_extract_lane(f, 2);                                                \
                sumf[t] += wasm_f32x4_extract_lane(f, 3);                                                \
            }                                                                                            \
        }                                                                                                \
        for (; i < nb; i++) {                                                                            \
            v128_t u[4];                                                                                 \
            WIDEN(x + i, u);                                                                             \
            for (int t = 0; t < nt; t++) {                                                               \
                const wgllm_block_q8_0 *y = (const wgllm_block_q8_0 *)((const char *)vy + (size_t)t * ys); \
                sumf[t] += SCALE1(hsum_i32(dot_widened(u, y[i].qs)), FP16(x[i].d), FP16(y[i].d));        \
            }                                                                                            \
        }                                                                                                \
        for (int t = 0; t < nt; t++) s[(size_t)t * ss] = sumf[t];                                        \
    }
MT_KERNEL(mt_q4_0_wasm, wgllm_block_q4_0, widen_q4_0, SCALE4_Q4_0, SCALE1_Q4_0)
MT_KERNEL(mt_q8_0_wasm, wgllm_block_q8_0, widen_q8_0, SCALE4_Q8_0, SCALE1_Q8_0)

/* ---- K-quants (super-blocks of 256, Q8_K activations) ------------------- */

/* Q4_K: 8 sub-blocks of 32 with 6-bit scale and min; the quants of
 * sub-blocks 2k and 2k+1 are the low and high nibbles of qs[32k..32k+32). */
static void vec_dot_q4_K_q8_K_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    const v128_t mask = wasm_i8x16_splat(0x0F);
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_K; i++) {
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) wgllm_kq_scale_min_k4(j, x[i].scales, &sc[j], &m[j]);
        v128_t acc = wasm_i32x4_splat(0);
        for (int k = 0; k < 4; k++) {
            const uint8_t *q = x[i].qs + 32 * k;
            const int8_t *a = y[i].qs + 64 * k;
            const v128_t q0 = wasm_v128_load(q), q1 = wasm_v128_load(q + 16);
            const v128_t lo = wasm_i32x4_add(dot_i8(wasm_v128_and(q0, mask), wasm_v128_load(a)),
                                             dot_i8(wasm_v128_and(q1, mask), wasm_v128_load(a + 16)));
            const v128_t hi = wasm_i32x4_add(dot_i8(wasm_u8x16_shr(q0, 4), wasm_v128_load(a + 32)),
                                             dot_i8(wasm_u8x16_shr(q1, 4), wasm_v128_load(a + 48)));
            acc = wasm_i32x4_add(acc, wasm_i32x4_mul(lo, wasm_i32x4_splat(sc[2 * k])));
            acc = wasm_i32x4_add(acc, wasm_i32x4_mul(hi, wasm_i32x4_splat(sc[2 * k + 1])));
        }
        const int sumi = hsum_i32(acc);
        int summ = 0;
        for (int j = 0; j < 8; j++) summ += m[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        const float d = FP16(x[i].d) * y[i].d, dm = FP16(x[i].dmin) * y[i].d;
        sumf += d * (float)sumi - dm * (float)summ;
    }
    *s = sumf;
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales; in each half h of 128,
 * element 32g + l is the low (g < 2) or high nibble of ql[64h + l +
 * 32(g & 1)] with bits 2g, 2g+1 of qh[32h + l] above it, minus 32. */
static void vec_dot_q6_K_q8_K_wasm(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q6_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    const v128_t m4 = wasm_i8x16_splat(0x0F), m2 = wasm_i8x16_splat(0x30), off = wasm_i8x16_splat(32);
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_K; i++) {
        v128_t acc = wasm_i32x4_splat(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *a = y[i].qs + 128 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int half = 0; half < 2; half++) { /* l in [16 half, 16 half + 16) */
                const v128_t l0 = wasm_v128_load(ql + 16 * half), l1 = wasm_v128_load(ql + 32 + 16 * half);
                const v128_t hb = wasm_v128_load(qh + 16 * half);
                const v128_t q[4] = {
                    wasm_v128_or(wasm_v128_and(l0, m4), wasm_v128_and(wasm_i8x16_shl(hb, 4), m2)),
                    wasm_v128_or(wasm_v128_and(l1, m4), wasm_v128_and(wasm_i8x16_shl(hb, 2), m2)),
                    wasm_v128_or(wasm_u8x16_shr(l0, 4), wasm_v128_and(hb, m2)),
                    wasm_v128_or(wasm_u8x16_shr(l1, 4), wasm_v128_and(wasm_u8x16_shr(hb, 2), m2)),
                };
                for (int g = 0; g < 4; g++) {
                    const v128_t p = dot_i8(wasm_i8x16_sub(q[g], off), wasm_v128_load(a + 32 * g + 16 * half));
                    acc = wasm_i32x4_add(acc, wasm_i32x4_mul(p, wasm_i32x4_splat(sc[2 * g + half])));
                }
            }
        }
        sumf += FP16(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    *s = sumf;
}

#define NR_LOOP(name, dot)                                                                     \
    static void name(int64_t n, float *s, const void *x, size_t xs, const void *y, int nr) {  \
        for (int r = 0; r < nr; r++) dot(n, s + r, (const char *)x + (size_t)r * xs, y);     \
    }
NR_LOOP(nr_q4_K_wasm, vec_dot_q4_K_q8_K_wasm)
NR_LOOP(nr_q6_K_wasm, vec_dot_q6_K_q8_K_wasm)

/* ---- F16 rows ------------------------------------------------------------- */

/* F16 rows against one F16 y (the attention: the scores against the cached
 * keys, the probabilities against each row of V), four rows at a time, one
 * per lane: each row's sum is the scalar vec_dot_f16's, a float product
 * promoted to double and added, element after element (the same bits), but
 * the four rows' chains of double additions overlap instead of each waiting
 * on its own (the scalar loop is bound by that latency). The fp16 values
 * still come from the table (see the top). */
static void nr_f16_wasm(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) {
    const wgllm_fp16 *y = vy;
    int r = 0;
    for (; r + 4 <= nr; r += 4) {
        const wgllm_fp16 *x0 = (const wgllm_fp16 *)((const char *)vx + (size_t)r * xs);
        const wgllm_fp16 *x1 = (const wgllm_fp16 *)((const char *)x0 + xs), *x2 = (const wgllm_fp16 *)((const char *)x1 + xs),
                         *x3 = (const wgllm_fp16 *)((const char *)x2 + xs);
        v128_t a01 = wasm_f64x2_splat(0.0), a23 = wasm_f64x2_splat(0.0);
        for (int64_t i = 0; i < n; i++) {
            const v128_t p = wasm_f32x4_mul(wasm_f32x4_make(FP16(x0[i]), FP16(x1[i]), FP16(x2[i]), FP16(x3[i])),
                                            wasm_f32x4_splat(FP16(y[i])));
            a01 = wasm_f64x2_add(a01, wasm_f64x2_promote_low_f32x4(p));
            a23 = wasm_f64x2_add(a23, wasm_f64x2_promote_low_f32x4(wasm_i64x2_shuffle(p, p, 1, 1)));
        }
        s[r] = (float)wasm_f64x2_extract_lane(a01, 0);
        s[r + 1] = (float)wasm_f64x2_extract_lane(a01, 1);
        s[r + 2] = (float)wasm_f64x2_extract_lane(a23, 0);
        s[r + 3] = (float)wasm_f64x2_extract_lane(a23, 1);
    }
    const wgllm_vec_dot_fn dot = wgllm_type_traits_ref(WGLLM_TYPE_F16)->vec_dot;
    for (; r < nr; r++) dot(n, s + r, (const char *)vx + (size_t)r * xs, vy);
}

/* ---- Q8_0 activation quantizer ------------------------------------------ */

/* quant.c's q8_0_from_float: d = amax/127 as fp16, q = x * (127/amax)
 * rounded half to even; |q| <= 127, so the saturating narrows never clamp. */
static void q8_0_from_float_wasm(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++, x += WGLLM_QK8_0) {
        v128_t v[8];
        v128_t m = wasm_f32x4_splat(0.0f);
        for (int k = 0; k < 8; k++) {
            v[k] = wasm_v128_load(x + 4 * k);
            m = wasm_f32x4_max(m, wasm_f32x4_abs(v[k]));
        }
        m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
        m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
        const float amax = wasm_f32x4_extract_lane(m, 0);
        y[i].d = wgllm_fp32_to_fp16(amax / 127.f);
        const v128_t id = wasm_f32x4_splat(amax != 0.0f ? 127.f / amax : 0.0f);
        v128_t q[8];
        for (int k = 0; k < 8; k++) q[k] = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(v[k], id)));
        for (int k = 0; k < 2; k++) {
            const v128_t a = wasm_i16x8_narrow_i32x4(q[4 * k], q[4 * k + 1]);
            const v128_t b = wasm_i16x8_narrow_i32x4(q[4 * k + 2], q[4 * k + 3]);
            wasm_v128_store(y[i].qs + 16 * k, wasm_i8x16_narrow_i16x8(a, b));
        }
    }
}

/* ---- install --------------------------------------------------------------- */

void wgllm_quant_install_wasm(struct wgllm_type_traits *t) {
    t[WGLLM_TYPE_Q8_0].from_float = q8_0_from_float_wasm;
    t[WGLLM_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_wasm;
    t[WGLLM_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_wasm;
    t[WGLLM_TYPE_Q4_0].vec_dot_mt = mt_q4_0_wasm;
    t[WGLLM_TYPE_Q8_0].vec_dot_mt = mt_q8_0_wasm;
    t[WGLLM_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_wasm;
    t[WGLLM_TYPE_Q4_K].vec_dot_nr = nr_q4_K_wasm;
    t[WGLLM_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_wasm;
    t[WGLLM_TYPE_Q6_K].vec_dot_nr = nr_q6_K_wasm;
    t[WGLLM_TYPE_F16].vec_dot_nr = nr_f16_wasm;
}

#endif
