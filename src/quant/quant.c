/*
 * quant.c - the type-traits table (names, block sizes, kernels), the portable
 * scalar reference kernels for every format wgllm computes with, and the
 * run-time dispatch that swaps in the SIMD kernels of quant_<isa>.c.
 *
 * Bit-exactness with ggml:
 *  - from_float_ref is ggml's reference quantizer (quantize_row_*_ref): the
 *    bytes a file written by wgllm holds are those llama.cpp would write.
 *  - from_float for Q8_0/Q8_1 (the activation quantizer) follows llama.cpp's
 *    x86 AVX/AVX2 quantize_row_q8_0/_q8_1, which is what the peer runs on
 *    these machines: id = 127/amax (not 1/(amax/127)) and round half to even
 *    (_mm256_round_ps) instead of roundf. The scalar version here does the
 *    same, so every dispatch level gives identical bytes; they differ from
 *    the reference only on exact .5 ties and 1-ulp differences of id.
 */
#include "quant/quant.h"

#include "quant/fp4tq.h"
#include "quant/iquants.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <strings.h>

/* ---- fp16 helpers ------------------------------------------------------ */

/* The table is filled by wgllm_base_init, which wgllm_quant_init runs first;
 * every kernel is reached through the traits accessors, which init. */
#define FP16(h) wgllm_fp16_lookup(h)
#define TO_FP16(f) wgllm_fp32_to_fp16(f)

/* ---- F32 / F16 / BF16 -------------------------------------------------- */

static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void f16_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_fp16 *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = FP16(x[i]);
}
static void f16_from_float(const float *x, void *vy, int64_t n) {
    wgllm_fp16 *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = TO_FP16(x[i]);
}
static void bf16_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_bf16 *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = wgllm_bf16_to_fp32(x[i]);
}
static void bf16_from_float(const float *x, void *vy, int64_t n) {
    wgllm_bf16 *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = wgllm_fp32_to_bf16(x[i]);
}

/* Float dots accumulate in double: the reference should be the most exact. */
static void vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}
static void vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_fp16 *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(FP16(x[i]) * FP16(y[i]));
    *s = (float)sum;
}
static void vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_bf16 *x = vx, *y = vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(wgllm_bf16_to_fp32(x[i]) * wgllm_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ---- block ranges (the reference quantizers of Q4/Q5) ------------------ */

/* The value of largest magnitude, with its sign (the first one on ties; a
 * NaN never wins): the symmetric formats map it to their lowest level. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* The smallest and largest values: the affine formats' range. */
static void min_max(const float *x, int n, float *min, float *max) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *max = hi;
}

/* ---- Q4_0 / Q4_1 ------------------------------------------------------- */

static void q4_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q4_0 *y = vy;
    const int qk = WGLLM_QK4_0;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float max = signed_absmax(x, qk);
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int j = 0; j < qk / 2; j++) {
            const uint8_t a = (uint8_t)WGLLM_MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t b = (uint8_t)WGLLM_MIN(15, (int8_t)(x[qk / 2 + j] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

static void q4_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q4_0 *x = vx;
    const int qk = WGLLM_QK4_0;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < qk / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + qk / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_1_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q4_1 *y = vy;
    const int qk = WGLLM_QK4_1;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        float min, max;
        min_max(x, qk, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(min);
        for (int j = 0; j < qk / 2; j++) {
            const uint8_t a = (uint8_t)WGLLM_MIN(15, (int8_t)((x[j] - min) * id + 0.5f));
            const uint8_t b = (uint8_t)WGLLM_MIN(15, (int8_t)((x[qk / 2 + j] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

static void q4_1_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q4_1 *x = vx;
    const int qk = WGLLM_QK4_1;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        for (int j = 0; j < qk / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + qk / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- Q5_0 / Q5_1 ------------------------------------------------------- */

static void q5_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q5_0 *y = vy;
    const int qk = WGLLM_QK5_0;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float max = signed_absmax(x, qk);
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            const uint8_t a = (uint8_t)WGLLM_MIN(31, (int8_t)(x[j] * id + 16.5f));
            const uint8_t b = (uint8_t)WGLLM_MIN(31, (int8_t)(x[qk / 2 + j] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
            qh |= ((a & 0x10u) >> 4) << j;
            qh |= ((b & 0x10u) >> 4) << (j + qk / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

static void q5_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q5_0 *x = vx;
    const int qk = WGLLM_QK5_0;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < qk / 2; j++) {
            const int a = ((x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int b = ((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = a * d;
            y[j + qk / 2] = b * d;
        }
    }
}

static void q5_1_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q5_1 *y = vy;
    const int qk = WGLLM_QK5_1;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        float min, max;
        min_max(x, qk, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        y[i].m = TO_FP16(min);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; j++) {
            /* ggml does not clamp here: (max-min)*id + 0.5 stays below 32 */
            const uint8_t a = (uint8_t)((x[j] - min) * id + 0.5f);
            const uint8_t b = (uint8_t)((x[qk / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
            qh |= ((a & 0x10u) >> 4) << j;
            qh |= ((b & 0x10u) >> 4) << (j + qk / 2);
        }
        memcpy(y[i].qh, &qh, sizeof(qh));
    }
}

static void q5_1_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q5_1 *x = vx;
    const int qk = WGLLM_QK5_1;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d), m = FP16(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < qk / 2; j++) {
            const int a = (x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int b = (x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = a * d + m;
            y[j + qk / 2] = b * d + m;
        }
    }
}

/* ---- Q8_0 / Q8_1 ------------------------------------------------------- */

static float block_amax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = WGLLM_MAX(amax, fabsf(x[j]));
    return amax;
}

static void q8_0_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_0 *y = vy;
    const int qk = WGLLM_QK8_0;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float d = block_amax(x, qk) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        for (int j = 0; j < qk; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Round half to even without depending on the fenv rounding mode: adding
 * 1.5*2^23 leaves no fraction bits, so the FPU's RNE does the rounding. */
static inline float round_even(float v) {
    volatile float big = 12582912.0f;
    return (v + big) - big;
}

/* llama.cpp's x86 activation quantizer, in scalar form (see file comment). */
static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_0 *y = vy;
    const int qk = WGLLM_QK8_0;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float amax = block_amax(x, qk);
        y[i].d = TO_FP16(amax / 127.f);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < qk; j++) y[i].qs[j] = (int8_t)round_even(x[j] * id);
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q8_0 *x = vx;
    const int qk = WGLLM_QK8_0;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < qk; j++) y[j] = x[i].qs[j] * d;
    }
}

static void q8_1_from_float_ref(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_1 *y = vy;
    const int qk = WGLLM_QK8_1;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float d = block_amax(x, qk) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_FP16(d);
        int sum = 0;
        for (int j = 0; j < qk; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = TO_FP16(sum * d);
    }
}

static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    wgllm_block_q8_1 *y = vy;
    const int qk = WGLLM_QK8_1;
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
        const float amax = block_amax(x, qk);
        const float d = amax / 127.f;
        y[i].d = TO_FP16(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < qk; j++) {
            y[i].qs[j] = (int8_t)round_even(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = TO_FP16(d * (float)sum);
    }
}

static void q8_1_to_float(const void *vx, float *y, int64_t n) {
    const wgllm_block_q8_1 *x = vx;
    const int qk = WGLLM_QK8_1;
    for (int64_t i = 0; i < n / qk; i++, y += qk) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < qk; j++) y[j] = x[i].qs[j] * d;
    }
}

/* ---- quantized dots (ggml's generic kernels: int per block, float sum) -- */

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK8_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + WGLLM_QK8_0 / 2];
        }
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

static void vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK8_1 / 2; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + WGLLM_QK8_1 / 2];
        }
        sumf += (FP16(x[i].d) * FP16(y[i].d)) * sumi + FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sumf;
}

static void vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK8_0 / 2; j++) {
            const int a = ((x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int b = ((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            sumi += a * y[i].qs[j] + b * y[i].qs[j + WGLLM_QK8_0 / 2];
        }
        sumf += sumi * FP16(x[i].d) * FP16(y[i].d);
    }
    *s = sumf;
}

static void vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_1 *x = vx;
    const wgllm_block_q8_1 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK8_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK8_1 / 2; j++) {
            const int a = (x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int b = (x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            sumi += a * y[i].qs[j] + b * y[i].qs[j + WGLLM_QK8_1 / 2];
        }
        sumf += (FP16(x[i].d) * FP16(y[i].d)) * sumi + FP16(x[i].m) * FP16(y[i].s);
    }
    *s = sumf;
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q8_0 *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < WGLLM_QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += sumi * (FP16(x[i].d) * FP16(y[i].d));
    }
    *s = sumf;
}

/* ---- multi-row fallbacks ----------------------------------------------- */

/* One per weight type: a row loop over that type's vec_dot in the table the
 * function was installed from (ref or dispatched), found by type id. */
static struct wgllm_type_traits traits_ref[WGLLM_TYPE_COUNT + 1];
static struct wgllm_type_traits traits_fast[WGLLM_TYPE_COUNT + 1];

#define NR_LOOP(name, table, type)                                                        \
    static void name(int64_t n, float *s, const void *x, size_t xs, const void *y, int nr) { \
        const wgllm_vec_dot_fn f = table[type].vec_dot;                                   \
        for (int r = 0; r < nr; r++) f(n, s + r, (const char *)x + (size_t)r * xs, y);    \
    }
#define NR_PAIR(T)                                                                        \
    NR_LOOP(nr_ref_##T, traits_ref, WGLLM_TYPE_##T)                                       \
    NR_LOOP(nr_fast_##T, traits_fast, WGLLM_TYPE_##T)
NR_PAIR(F32)
NR_PAIR(F16)
NR_PAIR(BF16)
NR_PAIR(Q4_0)
NR_PAIR(Q4_1)
NR_PAIR(Q5_0)
NR_PAIR(Q5_1)
NR_PAIR(Q8_0)

/* ---- the tables -------------------------------------------------------- */

static const struct { const char *name; int64_t blck; size_t size; bool quant; } type_info[WGLLM_TYPE_COUNT] = {
    [WGLLM_TYPE_F32] = {"f32", 1, 4, false},          [WGLLM_TYPE_F16] = {"f16", 1, 2, false},
    [WGLLM_TYPE_Q4_0] = {"q4_0", 32, 18, true},       [WGLLM_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [WGLLM_TYPE_Q5_0] = {"q5_0", 32, 22, true},       [WGLLM_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [WGLLM_TYPE_Q8_0] = {"q8_0", 32, 34, true},       [WGLLM_TYPE_Q8_1] = {"q8_1", 32, 36, true},
    [WGLLM_TYPE_Q2_K] = {"q2_K", 256, 84, true},      [WGLLM_TYPE_Q3_K] = {"q3_K", 256, 110, true},
    [WGLLM_TYPE_Q4_K] = {"q4_K", 256, 144, true},     [WGLLM_TYPE_Q5_K] = {"q5_K", 256, 176, true},
    [WGLLM_TYPE_Q6_K] = {"q6_K", 256, 210, true},     [WGLLM_TYPE_Q8_K] = {"q8_K", 256, 292, true},
    [WGLLM_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, true}, [WGLLM_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, true},
    [WGLLM_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, true}, [WGLLM_TYPE_IQ1_S] = {"iq1_s", 256, 50, true},
    [WGLLM_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},   [WGLLM_TYPE_IQ3_S] = {"iq3_s", 256, 110, true},
    [WGLLM_TYPE_IQ2_S] = {"iq2_s", 256, 82, true},    [WGLLM_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [WGLLM_TYPE_I8] = {"i8", 1, 1, false},            [WGLLM_TYPE_I16] = {"i16", 1, 2, false},
    [WGLLM_TYPE_I32] = {"i32", 1, 4, false},          [WGLLM_TYPE_I64] = {"i64", 1, 8, false},
    [WGLLM_TYPE_F64] = {"f64", 1, 8, false},          [WGLLM_TYPE_IQ1_M] = {"iq1_m", 256, 56, true},
    [WGLLM_TYPE_BF16] = {"bf16", 1, 2, false},        [WGLLM_TYPE_TQ1_0] = {"tq1_0", 256, 54, true},
    [WGLLM_TYPE_TQ2_0] = {"tq2_0", 256, 66, true},    [WGLLM_TYPE_MXFP4] = {"mxfp4", 32, 17, true},
    [WGLLM_TYPE_NVFP4] = {"nvfp4", 64, 36, true},     [WGLLM_TYPE_Q1_0] = {"q1_0", 128, 18, true},
};

#define KERNELS(T, tof, fref, ffast, vdt, vd)                                             \
    do {                                                                                  \
        struct wgllm_type_traits *t = &traits_ref[WGLLM_TYPE_##T];                         \
        t->to_float = tof;                                                                \
        t->from_float_ref = fref;                                                         \
        t->from_float = ffast;                                                            \
        t->vec_dot_type = WGLLM_TYPE_##vdt;                                               \
        t->vec_dot = vd;                                                                  \
    } while (0)

static void (*fp16_to_fp32_row_fn)(const wgllm_fp16 *, float *, int64_t);
static void (*fp32_to_fp16_row_fn)(const float *, wgllm_fp16 *, int64_t);

static void fp16_to_fp32_row_scalar(const wgllm_fp16 *x, float *y, int64_t n) { f16_to_float(x, y, n); }
static void fp32_to_fp16_row_scalar(const float *x, wgllm_fp16 *y, int64_t n) { f16_from_float(x, y, n); }

static void quant_init_once(void) {
    wgllm_base_init();
    for (int i = 0; i <= WGLLM_TYPE_COUNT; i++) {
        struct wgllm_type_traits *t = &traits_ref[i];
        memset(t, 0, sizeof(*t));
        t->vec_dot_type = (enum wgllm_type)i;
        if (i < WGLLM_TYPE_COUNT && type_info[i].name) {
            t->name = type_info[i].name;
            t->blck_size = type_info[i].blck;
            t->type_size = type_info[i].size;
            t->is_quantized = type_info[i].quant;
        }
    }
    KERNELS(F32, f32_to_float, f32_from_float, f32_from_float, F32, vec_dot_f32);
    KERNELS(F16, f16_to_float, f16_from_float, f16_from_float, F16, vec_dot_f16);
    KERNELS(BF16, bf16_to_float, bf16_from_float, bf16_from_float, BF16, vec_dot_bf16);
    KERNELS(Q4_0, q4_0_to_float, q4_0_from_float_ref, q4_0_from_float_ref, Q8_0, vec_dot_q4_0_q8_0);
    KERNELS(Q4_1, q4_1_to_float, q4_1_from_float_ref, q4_1_from_float_ref, Q8_1, vec_dot_q4_1_q8_1);
    KERNELS(Q5_0, q5_0_to_float, q5_0_from_float_ref, q5_0_from_float_ref, Q8_0, vec_dot_q5_0_q8_0);
    KERNELS(Q5_1, q5_1_to_float, q5_1_from_float_ref, q5_1_from_float_ref, Q8_1, vec_dot_q5_1_q8_1);
    KERNELS(Q8_0, q8_0_to_float, q8_0_from_float_ref, q8_0_from_float, Q8_0, vec_dot_q8_0_q8_0);
    KERNELS(Q8_1, q8_1_to_float, q8_1_from_float_ref, q8_1_from_float, Q8_1, NULL);
    traits_ref[WGLLM_TYPE_F32].vec_dot_nr = nr_ref_F32;
    traits_ref[WGLLM_TYPE_F16].vec_dot_nr = nr_ref_F16;
    traits_ref[WGLLM_TYPE_BF16].vec_dot_nr = nr_ref_BF16;
    traits_ref[WGLLM_TYPE_Q4_0].vec_dot_nr = nr_ref_Q4_0;
    traits_ref[WGLLM_TYPE_Q4_1].vec_dot_nr = nr_ref_Q4_1;
    traits_ref[WGLLM_TYPE_Q5_0].vec_dot_nr = nr_ref_Q5_0;
    traits_ref[WGLLM_TYPE_Q5_1].vec_dot_nr = nr_ref_Q5_1;
    traits_ref[WGLLM_TYPE_Q8_0].vec_dot_nr = nr_ref_Q8_0;

    wgllm_kquants_install_ref(traits_ref);
    wgllm_fp4tq_install_ref(traits_ref);
    wgllm_iquants_install_ref(traits_ref);
    /* HOOK(ref): more formats install their reference kernels here */

    memcpy(traits_fast, traits_ref, sizeof(traits_fast));
    traits_fast[WGLLM_TYPE_F32].vec_dot_nr = nr_fast_F32;
    traits_fast[WGLLM_TYPE_F16].vec_dot_nr = nr_fast_F16;
    traits_fast[WGLLM_TYPE_BF16].vec_dot_nr = nr_fast_BF16;
    traits_fast[WGLLM_TYPE_Q4_0].vec_dot_nr = nr_fast_Q4_0;
    traits_fast[WGLLM_TYPE_Q4_1].vec_dot_nr = nr_fast_Q4_1;
    traits_fast[WGLLM_TYPE_Q5_0].vec_dot_nr = nr_fast_Q5_0;
    traits_fast[WGLLM_TYPE_Q5_1].vec_dot_nr = nr_fast_Q5_1;
    traits_fast[WGLLM_TYPE_Q8_0].vec_dot_nr = nr_fast_Q8_0;
    fp16_to_fp32_row_fn = fp16_to_fp32_row_scalar;
    fp32_to_fp16_row_fn = fp32_to_fp16_row_scalar;

#if defined(__x86_64__)
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
    if (caps->avx2 && caps->fma && caps->f16c) {
        wgllm_quant_install_avx2(traits_fast);
        fp16_to_fp32_row_fn = wgllm_fp16_to_fp32_row_avx2;
        fp32_to_fp16_row_fn = wgllm_fp32_to_fp16_row_avx2;
        if (caps->avx512f && caps->avx512bw && caps->avx512vl && caps->avx512vnni) {
            wgllm_quant_install_avx512(traits_fast, caps->avx512bf16);
            fp16_to_fp32_row_fn = wgllm_fp16_to_fp32_row_avx512;
            fp32_to_fp16_row_fn = wgllm_fp32_to_fp16_row_avx512;
        }
        wgllm_kquants_install_avx2(traits_fast);
        wgllm_fp4tq_install_avx2(traits_fast);
        if (caps->avx512f && caps->avx512bw && caps->avx512vl && caps->avx512vnni) wgllm_fp4tq_install_avx512(traits_fast);
        wgllm_iquants_install_avx2(traits_fast);
        if (caps->avx512f && caps->avx512bw && caps->avx512vl && caps->avx512vnni) wgllm_iquants_install_avx512(traits_fast);
        /* HOOK(x86): more formats install their x86 kernels here */
    }
#endif
    /* HOOK(arm64): NEON kernels install here */
#if defined(__aarch64__)
    const struct wgllm_cpu_caps *arm = wgllm_cpu_caps();
    if (arm->neon) {
        wgllm_quant_install_neon(traits_fast, arm->dotprod);
        wgllm_fp4tq_install_neon(traits_fast, arm->dotprod);
        wgllm_iquants_install_neon(traits_fast, arm->dotprod);
        fp16_to_fp32_row_fn = wgllm_fp16_to_fp32_row_neon;
        fp32_to_fp16_row_fn = wgllm_fp32_to_fp16_row_neon;
    }
#endif
#if defined(__wasm_simd128__)
    wgllm_quant_install_wasm(traits_fast);
    wgllm_fp4tq_install_wasm(traits_fast);
    wgllm_iquants_install_wasm(traits_fast);
#endif
}

static pthread_once_t quant_once = PTHREAD_ONCE_INIT;

void wgllm_quant_init(void) { pthread_once(&quant_once, quant_init_once); }

const struct wgllm_type_traits *wgllm_type_traits(uint32_t type) {
    wgllm_quant_init();
    return &traits_fast[type < WGLLM_TYPE_COUNT ? type : WGLLM_TYPE_COUNT];
}

const struct wgllm_type_traits *wgllm_type_traits_ref(uint32_t type) {
    wgllm_quant_init();
    return &traits_ref[type < WGLLM_TYPE_COUNT ? type : WGLLM_TYPE_COUNT];
}

const char *wgllm_type_name(uint32_t type) {
    if (type < WGLLM_TYPE_COUNT && type_info[type].name) return type_info[type].name;
    static char buf[32];
    snprintf(buf, sizeof(buf), "unknown(%u)", type);
    return buf;
}

int wgllm_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < WGLLM_TYPE_COUNT; i++)
        if (type_info[i].name && !strcasecmp(type_info[i].name, name)) return i;
    return -1;
}

size_t wgllm_row_size(uint32_t type, int64_t n) {
    WGLLM_ASSERT(type < WGLLM_TYPE_COUNT && type_info[type].name);
    WGLLM_ASSERT(n >= 0 && n % type_info[type].blck == 0);
    return (size_t)(n / type_info[type].blck) * type_info[type].size;
}

bool wgllm_type_supported(uint32_t type) {
    return type < WGLLM_TYPE_COUNT && wgllm_type_traits(type)->vec_dot != NULL &&
           wgllm_type_traits(type)->to_float != NULL;
}

void wgllm_fp16_to_fp32_row(const wgllm_fp16 *x, float *y, int64_t n) {
    wgllm_quant_init();
    fp16_to_fp32_row_fn(x, y, n);
}

void wgllm_fp32_to_fp16_row(const float *x, wgllm_fp16 *y, int64_t n) {
    wgllm_quant_init();
    fp32_to_fp16_row_fn(x, y, n);
}
