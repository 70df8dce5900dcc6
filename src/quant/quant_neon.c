/*
 * quant_neon.c - arm64 NEON kernels: the activation quantizers (byte for byte
 * the scalar q8_0_from_float/q8_1_from_float of quant.c), fp16/bf16 rows and
 * the dot products of every weight format wgllm multiplies.
 *
 * The file builds for baseline armv8-a. The integer dots exist twice: with
 * SDOT (vdotq_s32, compiled with target("+dotprod")) and with widening
 * multiplies (vmull_s8 + vpadalq_s16) for cores without it (Cortex-A53/A72);
 * wgllm_quant_install_neon picks one from the run-time CPU caps.
 */
#include "quant/quant.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define FP16(h) wgllm_fp16_table[h]

/* SDOT is optional from armv8.2-a on; GCC's arm_neon.h defines vdotq_s32
 * under arch=armv8.2-a+dotprod, so the callers must say the same to inline
 * it. These functions are only reached when getauxval reported SDOT (base.c). */
#define DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

/* ---- integer dot of 16 int8 pairs, accumulated in 4 int32 lanes -------- */

static inline DOTPROD_TARGET int32x4_t dot_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    return vdotq_s32(acc, a, b);
}

/* Products of two int8 fit int16 (|p| <= 16384), so vmull cannot overflow;
 * pairs are widened into int32 before any further addition. */
static inline int32x4_t dot_mull(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

/* ---- weight blocks -> two int8x16 (elements 0..15, 16..31) ------------- */

static inline void unpack_nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi) {
    const uint8x16_t v = vld1q_u8(qs);
    *lo = vandq_u8(v, vdupq_n_u8(0x0F));
    *hi = vshrq_n_u8(v, 4);
}

/* 0x10 in byte j where bit j of the little-endian 32-bit qh is set. */
static inline void unpack_high_bits(const uint8_t *qh, uint8x16_t *lo, uint8x16_t *hi) {
    uint32_t u;
    memcpy(&u, qh, sizeof(u));
    const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(u));
    static const uint8_t idx_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t idx_hi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vld1q_u8(bit), h = vdupq_n_u8(0x10);
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(idx_lo)), b), h);
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(idx_hi)), b), h);
}

static inline void unpack_q4_0(const wgllm_block_q4_0 *x, int8x16_t *a0, int8x16_t *a1) {
    uint8x16_t lo, hi;
    unpack_nibbles(x->qs, &lo, &hi);
    *a0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8));
    *a1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8));
}
static inline void unpack_q4_1(const wgllm_block_q4_1 *x, int8x16_t *a0, int8x16_t *a1) {
    uint8x16_t lo, hi;
    unpack_nibbles(x->qs, &lo, &hi);
    *a0 = vreinterpretq_s8_u8(lo);
    *a1 = vreinterpretq_s8_u8(hi);
}
static inline void unpack_q5_0(const wgllm_block_q5_0 *x, int8x16_t *a0, int8x16_t *a1) {
    uint8x16_t lo, hi, hlo, hhi;
    unpack_nibbles(x->qs, &lo, &hi);
    unpack_high_bits(x->qh, &hlo, &hhi);
    *a0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hlo)), vdupq_n_s8(16));
    *a1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, hhi)), vdupq_n_s8(16));
}
static inline void unpack_q5_1(const wgllm_block_q5_1 *x, int8x16_t *a0, int8x16_t *a1) {
    uint8x16_t lo, hi, hlo, hhi;
    unpack_nibbles(x->qs, &lo, &hi);
    unpack_high_bits(x->qh, &hlo, &hhi);
    *a0 = vreinterpretq_s8_u8(vorrq_u8(lo, hlo));
    *a1 = vreinterpretq_s8_u8(vorrq_u8(hi, hhi));
}
static inline void unpack_q8_0(const wgllm_block_q8_0 *x, int8x16_t *a0, int8x16_t *a1) {
    *a0 = vld1q_s8(x->qs);
    *a1 = vld1q_s8(x->qs + 16);
}

/* The min term of Q4_1/Q5_1 (m * sum(y) = m * s); none for the others. */
static inline float min_none(const void *x, const void *y) {
    (void)x, (void)y;
    return 0.0f;
}
static inline float min_q4_1(const wgllm_block_q4_1 *x, const wgllm_block_q8_1 *y) { return FP16(x->m) * FP16(y->s); }
static inline float min_q5_1(const wgllm_block_q5_1 *x, const wgllm_block_q8_1 *y) { return FP16(x->m) * FP16(y->s); }

/* ---- quantized dots: one generator, two dot flavours -------------------- */

/* Integer sum per block, scaled by dx*dy into float lanes; two blocks per
 * step on two accumulators so the fma chains overlap. */
#define QDOT(name, ATTR, DOT, XT, YT, UNPACK, MINF)                                               \
    static ATTR void name(int64_t n, float *s, const void *vx, const void *vy) {                  \
        const XT *x = vx;                                                                         \
        const YT *y = vy;                                                                         \
        const int64_t nb = n / 32;                                                                \
        float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;                                        \
        float summ = 0.0f;                                                                        \
        int64_t i = 0;                                                                            \
        for (; i + 2 <= nb; i += 2) {                                                             \
            int8x16_t a0, a1, b0, b1;                                                             \
            UNPACK(x + i, &a0, &a1);                                                              \
            UNPACK(x + i + 1, &b0, &b1);                                                          \
            int32x4_t p = DOT(vdupq_n_s32(0), a0, vld1q_s8(y[i].qs));                             \
            int32x4_t q = DOT(vdupq_n_s32(0), b0, vld1q_s8(y[i + 1].qs));                         \
            p = DOT(p, a1, vld1q_s8(y[i].qs + 16));                                               \
            q = DOT(q, b1, vld1q_s8(y[i + 1].qs + 16));                                           \
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), FP16(x[i].d) * FP16(y[i].d));              \
            acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(q), FP16(x[i + 1].d) * FP16(y[i + 1].d));      \
            summ += MINF(x + i, y + i) + MINF(x + i + 1, y + i + 1);                              \
        }                                                                                         \
        for (; i < nb; i++) {                                                                     \
            int8x16_t a0, a1;                                                                     \
            UNPACK(x + i, &a0, &a1);                                                              \
            int32x4_t p = DOT(vdupq_n_s32(0), a0, vld1q_s8(y[i].qs));                             \
            p = DOT(p, a1, vld1q_s8(y[i].qs + 16));                                               \
            acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), FP16(x[i].d) * FP16(y[i].d));              \
            summ += MINF(x + i, y + i);                                                           \
        }                                                                                         \
        *s = vaddvq_f32(vaddq_f32(acc0, acc1)) + summ;                                            \
    }

/* Four weight rows against one activation: each activation block is loaded
 * once for the four. Rows are spelled out so the accumulators stay in
 * registers (GCC -O2 does not unroll a k < 4 loop over an array of them). */
#define QDOT_ROW(x_, acc, summ, DOT, UNPACK, MINF)                                                 \
    do {                                                                                          \
        int8x16_t a0, a1;                                                                         \
        UNPACK(x_ + i, &a0, &a1);                                                                 \
        const int32x4_t p = DOT(DOT(vdupq_n_s32(0), a0, y0), a1, y1);                             \
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), FP16(x_[i].d) * dy);                             \
        summ += MINF(x_ + i, y + i);                                                              \
    } while (0)
#define QDOT_NR(name, ATTR, DOT, XT, YT, UNPACK, MINF, single)                                    \
    static ATTR void name(int64_t n, float *s, const void *vx, size_t xs, const void *vy, int nr) { \
        const YT *y = vy;                                                                         \
        const int64_t nb = n / 32;                                                                \
        int r = 0;                                                                                \
        for (; r + 4 <= nr; r += 4) {                                                             \
            const XT *x0 = (const XT *)((const char *)vx + (size_t)r * xs);                       \
            const XT *x1 = (const XT *)((const char *)x0 + xs);                                   \
            const XT *x2 = (const XT *)((const char *)x1 + xs);                                   \
            const XT *x3 = (const XT *)((const char *)x2 + xs);                                   \
            float32x4_t c0 = vdupq_n_f32(0.0f), c1 = c0, c2 = c0, c3 = c0;                        \
            float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;                                     \
            for (int64_t i = 0; i < nb; i++) {                                                    \
                const int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);              \
                const float dy = FP16(y[i].d);                                                    \
                QDOT_ROW(x0, c0, m0, DOT, UNPACK, MINF);                                          \
                QDOT_ROW(x1, c1, m1, DOT, UNPACK, MINF);                                          \
                QDOT_ROW(x2, c2, m2, DOT, UNPACK, MINF);                                          \
                QDOT_ROW(x3, c3, m3, DOT, UNPACK, MINF);                                          \
            }                                                                                     \
            s[r] = vaddvq_f32(c0) + m0;                                                           \
            s[r + 1] = vaddvq_f32(c1) + m1;                                                       \
            s[r + 2] = vaddvq_f32(c2) + m2;                                                       \
            s[r + 3] = vaddvq_f32(c3) + m3;                                                       \
        }                                                                                         \
        for (; r < nr; r++) single(n, s + r, (const char *)vx + (size_t)r * xs, vy);              \
    }

#define QDOT_PAIR(T, XT, YT, UNPACK, MINF)                                                        \
    QDOT(vec_dot_##T##_sdot, DOTPROD_TARGET, dot_sdot, XT, YT, UNPACK, MINF)                      \
    QDOT(vec_dot_##T##_mull, , dot_mull, XT, YT, UNPACK, MINF)                                    \
    QDOT_NR(vec_dot_nr_##T##_sdot, DOTPROD_TARGET, dot_sdot, XT, YT, UNPACK, MINF, vec_dot_##T##_sdot) \
    QDOT_NR(vec_dot_nr_##T##_mull, , dot_mull, XT, YT, UNPACK, MINF, vec_dot_##T##_mull)

QDOT_PAIR(q4_0, wgllm_block_q4_0, wgllm_block_q8_0, unpack_q4_0, min_none)
QDOT_PAIR(q4_1, wgllm_block_q4_1, wgllm_block_q8_1, unpack_q4_1, min_q4_1)
QDOT_PAIR(q5_0, wgllm_block_q5_0, wgllm_block_q8_0, unpack_q5_0, min_none)
QDOT_PAIR(q5_1, wgllm_block_q5_1, wgllm_block_q8_1, unpack_q5_1, min_q5_1)
QDOT_PAIR(q8_0, wgllm_block_q8_0, wgllm_block_q8_0, unpack_q8_0, min_none)

/* ---- activation quantizers (the scalar rule of quant.c, byte for byte) -- */

/* Loads a block of 32, returns amax and the quantized values as int32
 * lanes: x * (127/amax) rounded half to even (FCVTNS), as the scalar
 * round_even does; vmulq rounds the product once, like the scalar multiply. */
static inline float block_q8_prepare(const float *x, int32x4_t q[8]) {
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        m = vmaxq_f32(m, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(m);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int k = 0; k < 8; k++) q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
    return amax;
}

/* |q| <= 127 here, so the saturating narrows never clamp. */
static inline void block_q8_store(int8_t *qs, const int32x4_t q[8]) {
    for (int k = 0; k < 2; k++) {
        const int16x8_t a = vcombine_s16(vqmovn_s32(q[4 * k]), vqmovn_s32(q[4 * k + 1]));
        const int16x8_t b = vcombine_s16(vqmovn_s32(q[4 * k + 2]), vqmovn_s32(q[4 * k + 3]));
        vst1q_s8(qs + 16 * k, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
    }
}

static void q8_0_from_float_neon(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++, x += WGLLM_QK8_0) {
        int32x4_t q[8];
        const float amax = block_q8_prepare(x, q);
        y[i].d = wgllm_fp32_to_fp16(amax / 127.f);
        block_q8_store(y[i].qs, q);
    }
}

static void q8_1_from_float_neon(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK8_1; i++, x += WGLLM_QK8_1) {
        int32x4_t q[8];
        const float amax = block_q8_prepare(x, q);
        const float d = amax / 127.f;
        y[i].d = wgllm_fp32_to_fp16(d);
        int32x4_t sum = q[0];
        for (int k = 1; k < 8; k++) sum = vaddq_s32(sum, q[k]);
        y[i].s = wgllm_fp32_to_fp16(d * (float)vaddvq_s32(sum));
        block_q8_store(y[i].qs, q);
    }
}

/* ---- fp16 / bf16 rows -------------------------------------------------- */

/* FCVT is exact for fp16->fp32 and rounds to nearest even the other way
 * (Linux runs with FPCR's flush-to-zero off, so subnormals survive), which
 * is what wgllm_fp16_to_fp32/wgllm_fp32_to_fp16 do. */
static inline float32x4_t f16x4_load(const wgllm_fp16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

void wgllm_fp16_to_fp32_row_neon(const wgllm_fp16 *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, f16x4_load(x + i));
        vst1q_f32(y + i + 4, f16x4_load(x + i + 4));
    }
    for (; i < n; i++) y[i] = FP16(x[i]);
}

void wgllm_fp32_to_fp16_row_neon(const float *x, wgllm_fp16 *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vcombine_f16(vcvt_f16_f32(vld1q_f32(x + i)), vcvt_f16_f32(vld1q_f32(x + i + 4)));
        vst1q_u16(y + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) y[i] = wgllm_fp32_to_fp16(x[i]);
}

static void f16_to_float_neon(const void *x, float *y, int64_t n) { wgllm_fp16_to_fp32_row_neon(x, y, n); }
static void f16_from_float_neon(const float *x, void *y, int64_t n) { wgllm_fp32_to_fp16_row_neon(x, y, n); }

static inline float32x4_t bf16x4_load(const wgllm_bf16 *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

static void bf16_to_float_neon(const void *vx, float *y, int64_t n) {
    const wgllm_bf16 *x = vx;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, bf16x4_load(x + i));
    for (; i < n; i++) y[i] = wgllm_bf16_to_fp32(x[i]);
}

/* Same rounding as wgllm_fp32_to_bf16 (nearest even, NaN kept quiet), in
 * integer arithmetic so that denormals are rounded, not flushed. */
static void bf16_from_float_neon(const float *x, void *vy, int64_t n) {
    wgllm_bf16 *y = vy;
    int64_t i = 0;
    const uint32x4_t absmask = vdupq_n_u32(0x7fffffff), inf = vdupq_n_u32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
        uint16x4_t r[2];
        for (int k = 0; k < 2; k++) {
            const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i + 4 * k));
            const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
            const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
            const uint32x4_t nan = vcgtq_u32(vandq_u32(u, absmask), inf);
            const uint32x4_t qnan = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
            r[k] = vmovn_u32(vbslq_u32(nan, qnan, rounded));
        }
        vst1q_u16(y + i, vcombine_u16(r[0], r[1]));
    }
    for (; i < n; i++) y[i] = wgllm_fp32_to_bf16(x[i]);
}

/* ---- float dots (16 lanes in flight, scalar tail) ----------------------- */

static void vec_dot_f32_neon(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void vec_dot_f16_neon(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_fp16 *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, f16x4_load(x + i), f16x4_load(y + i));
        a1 = vfmaq_f32(a1, f16x4_load(x + i + 4), f16x4_load(y + i + 4));
        a2 = vfmaq_f32(a2, f16x4_load(x + i + 8), f16x4_load(y + i + 8));
        a3 = vfmaq_f32(a3, f16x4_load(x + i + 12), f16x4_load(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, f16x4_load(x + i), f16x4_load(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) sum += FP16(x[i]) * FP16(y[i]);
    *s = sum;
}

static void vec_dot_bf16_neon(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_bf16 *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, bf16x4_load(x + i), bf16x4_load(y + i));
        a1 = vfmaq_f32(a1, bf16x4_load(x + i + 4), bf16x4_load(y + i + 4));
        a2 = vfmaq_f32(a2, bf16x4_load(x + i + 8), bf16x4_load(y + i + 8));
        a3 = vfmaq_f32(a3, bf16x4_load(x + i + 12), bf16x4_load(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, bf16x4_load(x + i), bf16x4_load(y + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) sum += wgllm_bf16_to_fp32(x[i]) * wgllm_bf16_to_fp32(y[i]);
    *s = sum;
}

/* ---- install ----------------------------------------------------------- */

void wgllm_quant_install_neon(struct wgllm_type_traits *t, bool has_dotprod) {
    t[WGLLM_TYPE_F32].vec_dot = vec_dot_f32_neon;
    t[WGLLM_TYPE_F16].to_float = f16_to_float_neon;
    t[WGLLM_TYPE_F16].from_float = f16_from_float_neon;
    t[WGLLM_TYPE_F16].vec_dot = vec_dot_f16_neon;
    t[WGLLM_TYPE_BF16].to_float = bf16_to_float_neon;
    t[WGLLM_TYPE_BF16].from_float = bf16_from_float_neon;
    t[WGLLM_TYPE_BF16].vec_dot = vec_dot_bf16_neon;
    t[WGLLM_TYPE_Q8_0].from_float = q8_0_from_float_neon;
    t[WGLLM_TYPE_Q8_1].from_float = q8_1_from_float_neon;
#define SET_QDOT(T, t_, sfx)                                                   \
    t[WGLLM_TYPE_##T].vec_dot = vec_dot_##t_##_##sfx;                          \
    t[WGLLM_TYPE_##T].vec_dot_nr = vec_dot_nr_##t_##_##sfx;
    if (has_dotprod) {
        SET_QDOT(Q4_0, q4_0, sdot)
        SET_QDOT(Q4_1, q4_1, sdot)
        SET_QDOT(Q5_0, q5_0, sdot)
        SET_QDOT(Q5_1, q5_1, sdot)
        SET_QDOT(Q8_0, q8_0, sdot)
    } else {
        SET_QDOT(Q4_0, q4_0, mull)
        SET_QDOT(Q4_1, q4_1, mull)
        SET_QDOT(Q5_0, q5_0, mull)
        SET_QDOT(Q5_1, q5_1, mull)
        SET_QDOT(Q8_0, q8_0, mull)
    }
#undef SET_QDOT
}

#endif
