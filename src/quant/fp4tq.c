/*
 * fp4tq.c - the scalar reference kernels of MXFP4, TQ1_0, TQ2_0 and Q1_0:
 * dequantize, ggml's reference quantizers, and the dots against Q8_0
 * (MXFP4, Q1_0) and Q8_K (TQ1_0, TQ2_0).
 *
 * Bit-exactness with ggml: the quantizers follow quantize_row_mxfp4_ref /
 * _tq1_0_ref / _tq2_0_ref (which llama-quantize calls; none takes an
 * importance matrix) operation for operation: MXFP4's exponent is
 * floor(log2(amax)) - 2 (so amax lands on the largest E2M1 magnitude 6, or
 * just under 12 in the doubled table) through the same libm log2f, and each
 * value takes the first code of smallest |value - x|; the ternary formats
 * round x / amax with lroundf and pack trits as ggml does (TQ1_0: base-3
 * fixed-point bytes, rounded up, so that q * 3^n >> 8 reads trit n back).
 * No FMA contraction: GCC's -std=c11 implies -ffp-contract=off, clang gets
 * the pragma below.
 *
 * Dots: per block every product is summed in integers (exact), then scaled
 * once in float, as ggml's generic kernels do; the SIMD versions compute the
 * same integers.
 */
#include "quant/fp4tq.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define FP16(h) wgllm_fp16_lookup(h)
#define TO_FP16(f) wgllm_fp32_to_fp16(f)
#define QK_K WGLLM_QK_K

const int8_t wgllm_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- MXFP4 ------------------------------------------------------------- */

/* The code whose (doubled) value times d is nearest x; the first on ties. */
static inline uint8_t mxfp4_best(float x, float d) {
    int best = 0;
    float best_err = fabsf(wgllm_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(wgllm_kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return (uint8_t)best;
}

static void mxfp4_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_mxfp4 *y = vy;
    const int qk = WGLLM_QK_MXFP4;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        float amax = 0.0f;
        for (int j = 0; j < qk; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* through int: ggml's direct float -> uint8_t conversion wraps the
         * same way on x86 for the (subnormal) amax below 2^-125 */
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = wgllm_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < qk / 2; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_best(x[j], d) | (mxfp4_best(x[qk / 2 + j], d) << 4));
    }
}

static void mxfp4_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_mxfp4 *x = vx;
    const int qk = WGLLM_QK_MXFP4;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = wgllm_e8m0_half(x[i].e);
        for (int j = 0; j < qk / 2; j++) {
            y[j] = wgllm_kvalues_mxfp4[x[i].qs[j] & 0x0F] * d;
            y[j + qk / 2] = wgllm_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

static void vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_mxfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_MXFP4; i++) {
        const float d = FP16(y[i].d) * wgllm_e8m0_half(x[i].e);
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK_MXFP4 / 2; j++)
            sumi += y[i].qs[j] * wgllm_kvalues_mxfp4[x[i].qs[j] & 0x0F] +
                    y[i].qs[j + WGLLM_QK_MXFP4 / 2] * wgllm_kvalues_mxfp4[x[i].qs[j] >> 4];
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

/* ---- NVFP4 ------------------------------------------------------------- */

/* ggml's ggml_fp32_to_ue4m3: clamp to 448, round the mantissa to 3 bits by
 * its next bit (ties away), subnormals as round(x * 2^9) >= 1, else 0. */
static uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t bits;
    memcpy(&bits, &x, 4);
    const int fexp = (int)((bits >> 23) & 0xFF) - 127;
    int e = fexp + 7;
    if (e <= 0) {
        int m = (int)(x * 512.0f + 0.5f);
        if (m > 7) m = 7;
        return m < 1 ? 0 : (uint8_t)m;
    }
    if (e >= 15) return 0x7E;
    int m = (int)((bits >> 20) & 7) + (int)((bits >> 19) & 1);
    if (m > 7) {
        m = 0;
        if (++e >= 15) return 0x7E;
    }
    return (uint8_t)((e << 3) | m);
}

static void nvfp4_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_nvfp4 *y = vy;
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++)
        for (int s = 0; s < 4; s++) {
            const float *xb = x + i * WGLLM_QK_NVFP4 + 16 * s;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                if (amax < fabsf(xb[j])) amax = fabsf(xb[j]);
            /* amax / 6 puts amax on the largest E2M1 magnitude */
            const uint8_t ue = fp32_to_ue4m3(amax / 6.0f);
            y[i].d[s] = ue;
            const float d = wgllm_ue4m3_half(ue);
            for (int j = 0; j < 8; j++)
                y[i].qs[8 * s + j] = (uint8_t)(mxfp4_best(xb[j], d) | (mxfp4_best(xb[8 + j], d) << 4));
        }
}

static void nvfp4_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_nvfp4 *x = vx;
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++)
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = wgllm_ue4m3_half(x[i].d[s]);
            for (int j = 0; j < 8; j++) {
                y[j] = wgllm_kvalues_mxfp4[x[i].qs[8 * s + j] & 0x0F] * d;
                y[j + 8] = wgllm_kvalues_mxfp4[x[i].qs[8 * s + j] >> 4] * d;
            }
        }
}

/* ggml's generic order: one float term per 16-element sub-block */
static void vec_dot_nvfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_nvfp4 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK_NVFP4; i++)
        for (int sb = 0; sb < 4; sb++) {
            const float d = wgllm_ue4m3_half(x[i].d[sb]);
            const wgllm_block_q8_0 *yb = &y[2 * i + sb / 2];
            const int8_t *yq = yb->qs + 16 * (sb % 2);
            int sumi = 0;
            for (int j = 0; j < 8; j++)
                sumi += yq[j] * wgllm_kvalues_mxfp4[x[i].qs[8 * sb + j] & 0x0F] +
                        yq[j + 8] * wgllm_kvalues_mxfp4[x[i].qs[8 * sb + j] >> 4];
            sumf += FP16(yb->d) * d * (float)sumi;
        }
    *s = sumf;
}

/* ---- Q1_0 -------------------------------------------------------------- */

/* ggml's quantize_row_q1_0_ref: d = mean |x| (summed in element order),
 * a set bit for x >= 0 (so -0.0 and 0 are +d, NaN is -d). */
static void q1_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q1_0 *y = vy;
    const int qk = WGLLM_QK1_0;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        float sum_abs = 0.0f;
        for (int j = 0; j < qk; j++) sum_abs += fabsf(x[j]);
        y[i].d = TO_FP16(sum_abs / qk);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < qk; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

static void q1_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q1_0 *x = vx;
    const int qk = WGLLM_QK1_0;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < qk; j++) y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

/* ggml's generic order: per Q8_0 sub-block an exact integer, scaled by the
 * activation's d and summed in float, then the weight's d per block. */
static void vec_dot_q1_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q1_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK1_0; i++) {
        float sumi = 0;
        for (int k = 0; k < 4; k++) {
            const wgllm_block_q8_0 *yb = &y[4 * i + k];
            int sb = 0;
            for (int j = 0; j < 32; j++) sb += (x[i].qs[4 * k + j / 8] >> (j % 8)) & 1 ? yb->qs[j] : -yb->qs[j];
            sumi += FP16(yb->d) * (float)sb;
        }
        sumf += FP16(x[i].d) * sumi;
    }
    *s = sumf;
}

/* ---- ternary: shared ------------------------------------------------------ */

static float tq_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX */
    return amax;
}

/* x / amax rounded to -1, 0, 1, stored as 0, 1, 2 */
static inline int tq_trit(float x, float id) { return (int)lroundf(x * id) + 1; }

/* ---- TQ2_0 ------------------------------------------------------------- */

static void tq2_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_tq2_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float d = tq_amax(x);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int l = 0; l < 4; l++) q |= (unsigned)(tq_trit(x[128 * h + 32 * l + m], id) & 3) << (2 * l);
                y[i].qs[32 * h + m] = (uint8_t)q;
            }
    }
}

static inline int tq2_value(const wgllm_block_tq2_0 *b, int e) {
    return ((b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1;
}

static void tq2_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = (float)tq2_value(&x[i], e) * d;
    }
}

static void vec_dot_tq2_0_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq2_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int e = 0; e < QK_K; e++) sumi += y[i].qs[e] * tq2_value(&x[i], e);
        sumf += (float)sumi * (y[i].d * FP16(x[i].d));
    }
    *s = sumf;
}

/* ---- TQ1_0 ------------------------------------------------------------- */

/* Trits t[0..k) (0..2, t[0] most significant) as one byte: the base-3
 * fraction sum t[i] 3^-(i+1) times 256, rounded up (243 = 3^5). */
static inline uint8_t tq1_pack(const int *t, int k) {
    unsigned q = 0;
    for (int i = 0; i < k; i++) q = q * 3 + (unsigned)t[i];
    for (int i = k; i < 5; i++) q *= 3; /* qh: four trits, the first most significant */
    return (uint8_t)((q * 256 + 242) / 243);
}

static void tq1_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_tq1_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float d = tq_amax(x);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        int t[5];
        for (int m = 0; m < 32; m++) {
            for (int k = 0; k < 5; k++) t[k] = tq_trit(x[32 * k + m], id);
            y[i].qs[m] = tq1_pack(t, 5);
        }
        for (int m = 0; m < 16; m++) {
            for (int k = 0; k < 5; k++) t[k] = tq_trit(x[160 + 16 * k + m], id);
            y[i].qs[32 + m] = tq1_pack(t, 5);
        }
        for (int j = 0; j < 4; j++) {
            for (int k = 0; k < 4; k++) t[k] = tq_trit(x[240 + 4 * k + j], id);
            y[i].qh[j] = tq1_pack(t, 4);
        }
    }
}

/* Trit k of a packed byte: the integer part of 3 * (q * 3^k mod 256) / 256. */
static inline int tq1_trit(uint8_t q, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t r = (uint8_t)(q * pow3[k]);
    return ((unsigned)r * 3) >> 8;
}

/* Element e's byte and trit position (the layout of wgllm_block_tq1_0). */
static inline int tq1_value(const wgllm_block_tq1_0 *b, int e) {
    if (e < 160) return tq1_trit(b->qs[e % 32], e / 32) - 1;
    if (e < 240) return tq1_trit(b->qs[32 + (e - 160) % 16], (e - 160) / 16) - 1;
    return tq1_trit(b->qh[(e - 240) % 4], (e - 240) / 4) - 1;
}

static void tq1_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_tq1_0 *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = (float)tq1_value(&x[i], e) * d;
    }
}

static void vec_dot_tq1_0_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_tq1_0 *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int e = 0; e < QK_K; e++) sumi += y[i].qs[e] * tq1_value(&x[i], e);
        sumf += (float)sumi * (FP16(x[i].d) * y[i].d);
    }
    *s = sumf;
}

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_mxfp4, vec_dot_mxfp4_q8_0)
WGLLM_VEC_DOT_NR(nr_tq1_0, vec_dot_tq1_0_q8_K)
WGLLM_VEC_DOT_NR(nr_tq2_0, vec_dot_tq2_0_q8_K)
WGLLM_VEC_DOT_NR(nr_q1_0, vec_dot_q1_0_q8_0)
WGLLM_VEC_DOT_NR(nr_nvfp4, vec_dot_nvfp4_q8_0)

void wgllm_fp4tq_install_ref(struct wgllm_type_traits *t) {
    wgllm_type_set(t, WGLLM_TYPE_MXFP4, mxfp4_to_float, mxfp4_from_float_ref, WGLLM_TYPE_Q8_0, vec_dot_mxfp4_q8_0, nr_mxfp4);
    wgllm_type_set(t, WGLLM_TYPE_TQ2_0, tq2_0_to_float, tq2_0_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_tq2_0_q8_K, nr_tq2_0);
    wgllm_type_set(t, WGLLM_TYPE_TQ1_0, tq1_0_to_float, tq1_0_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_tq1_0_q8_K, nr_tq1_0);
    wgllm_type_set(t, WGLLM_TYPE_NVFP4, nvfp4_to_float, nvfp4_from_float_ref, WGLLM_TYPE_Q8_0, vec_dot_nvfp4_q8_0, nr_nvfp4);
    wgllm_type_set(t, WGLLM_TYPE_Q1_0, q1_0_to_float, q1_0_from_float_ref, WGLLM_TYPE_Q8_0, vec_dot_q1_0_q8_0, nr_q1_0);
}
