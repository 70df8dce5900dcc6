/*
 * kquants.c - the scalar reference kernels of the super-block formats
 * (Q2_K..Q6_K, Q8_K) and of IQ4_NL/IQ4_XS: dequantize, ggml's reference
 * quantizers, and the dot products against Q8_K (Q8_0 for IQ4_NL).
 *
 * Bit-exactness with ggml: the quantizers follow ggml-quants.c's rules
 * (quantize_row_*_ref, make_qx_quants, make_q3_quants, make_qkx2_quants, the
 * IQ4 grid search) operation for operation in float arithmetic, with the
 * same rounding helper (nearest_int: round half to even through the 1.5*2^23
 * trick), so the bytes of a file written by wgllm equal llama.cpp's. This
 * needs no FMA contraction: GCC's -std=c11 implies -ffp-contract=off, clang
 * gets the pragma below (ggml-base is built for baseline x86-64, no FMA).
 *
 * IQ4_NL/IQ4_XS: llama-quantize writes them with quantize_iq4_nl/_xs (a
 * search over 15 scales, ntry = 7); ggml's quantize_row_iq4_nl_ref uses no
 * search (ntry = -1). from_float_ref here is the former, which is what files
 * from llama.cpp hold.
 *
 * Dots: within a super-block every product is summed in integers (exact),
 * then scaled once in float, so the SIMD versions (kquants_avx2.c), which
 * compute the same integers, give bit-identical results.
 */
#include "quant/kquants.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define FP16(h) wgllm_fp16_lookup(h)
#define TO_FP16(f) wgllm_fp32_to_fp16(f)
#define KMAX(a, b) ((a) > (b) ? (a) : (b))
#define KMIN(a, b) ((a) < (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f
#define QK_K WGLLM_QK_K

const int8_t wgllm_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* ---- ggml's helpers ---------------------------------------------------- */

/* Round to nearest, ties to even, for |fval| < 2^22 (ggml's nearest_int). */
static inline int nearest_int(float fval) {
    WGLLM_ASSERT(fabsf(fval) <= 4194303.f);
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* Symmetric quants in [-nmax, nmax-1] (+nmax), best of 19 scales by weighted
 * least squares (rmse_type 1: weights x^2 when qw is NULL). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw) {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            L[i] = (int8_t)(nmax + KMAX(-nmax, KMIN(nmax - 1, l)));
        }
        return 1 / iscale;
    }
    bool return_early = false;
    if (rmse_type < 0) {
        rmse_type = -rmse_type;
        return_early = true;
    }
#define QX_WEIGHT(i)                                                                                  \
    (qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x[i]) \
                                                                                      : sqrtf(fabsf(x[i])))
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = KMAX(-nmax, KMIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = QX_WEIGHT(i);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = KMAX(-nmax, KMIN(nmax - 1, l));
            float w = QX_WEIGHT(i);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + KMAX(-nmax, KMIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
#undef QX_WEIGHT
    return scale;
}

/* Q3_K's sub-block quantizer: symmetric, then up to 5 rounds of moving single
 * quants while that improves the weighted fit. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse) {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (do_rmse) {
        float sumlx = 0;
        float suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = KMAX(-nmax, KMIN(nmax - 1, l));
            L[i] = (int8_t)l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                float w = x[i] * x[i];
                float slx = sumlx - w * x[i] * L[i];
                if (slx > 0) {
                    float sl2 = suml2 - w * L[i] * L[i];
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = KMAX(-nmax, KMIN(nmax - 1, new_l));
                    if (new_l != L[i]) {
                        slx += w * x[i] * new_l;
                        sl2 += w * new_l * new_l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                            L[i] = (int8_t)new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed) break;
        }
        for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = KMAX(-nmax, KMIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
    }
    return 1 / iscale;
}

/* Asymmetric quants in [0, nmax] with a min: the plain fit, then nstep+1
 * candidate scales solved by weighted least squares for (scale, min). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)KMAX(0, KMIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = KMAX(0, KMIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- Q8_K (activations) ------------------------------------------------ */

/* ggml's quantize_row_q8_K_ref, which is also what llama.cpp's x86 build
 * runs for activations. An all-zero block gets zero bsums (ggml leaves them
 * as they were; nothing reads them then since every product is 0). */
static void q8_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q8_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float max = 0;
        float amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)KMIN(127, v);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void q8_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q8_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++)
        for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}

/* ---- Q2_K -------------------------------------------------------------- */

static void q2_K_pack(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void q2_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q2_K *y = vy;
    uint8_t L[QK_K];
    uint8_t Laux[16];
    float weights[16];
    float mins[QK_K / 16];
    float scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float max_scale = 0;
        float max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = TO_FP16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = TO_FP16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                int l = nearest_int(iscale * mins[j]);
                y[i].scales[j] |= (uint8_t)(l << 4);
            }
            y[i].dmin = TO_FP16(max_min / q4scale);
        } else {
            y[i].dmin = TO_FP16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = FP16(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = FP16(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)KMAX(0, KMIN(3, l));
            }
        }
        q2_K_pack(L, y[i].qs);
    }
}

/* Element e of a Q2_K/Q3_K block: 2 low bits at qs[32*(e/128) + e%32],
 * shift 2*((e/32)%4); scale index e/16. */
static inline int q2_bits(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; }

static void q2_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q2_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d), min = FP16(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            const uint8_t sc = x[i].scales[e / 16];
            const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
            y[e] = dl * q2_bits(x[i].qs, e) - ml;
        }
    }
}

static void vec_dot_q2_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q2_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int l = 0; l < 16; l++) si += q2_bits(x[i].qs, 16 * j + l) * y[i].qs[16 * j + l];
            sumi += (x[i].scales[j] & 0xF) * si;
            summ += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        const float d = FP16(x[i].d) * y[i].d, dm = FP16(x[i].dmin) * y[i].d;
        sumf += d * (float)sumi - dm * (float)summ;
    }
    *s = sumf;
}

/* ---- Q3_K -------------------------------------------------------------- */

static void q3_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q3_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float max_scale = 0;
        float amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(KMAX(-32, KMIN(31, l)) + 32);
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = TO_FP16(1 / iscale);
        } else {
            y[i].d = TO_FP16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const int sc = wgllm_kq_scale_q3_K(j, y[i].scales);
            float d = FP16(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = KMAX(-4, KMIN(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        memset(y[i].hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] = (int8_t)(L[j] - 4);
            }
            if (++m == QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        q2_K_pack((const uint8_t *)L, y[i].qs);
    }
}

/* Signed 3-bit value of element e: low bits minus 4 unless its hmask bit is set. */
static inline int q3_value(const wgllm_block_q3_K *b, int e) {
    const int hbit = (b->hmask[e % 32] >> (e / 32)) & 1;
    return q2_bits(b->qs, e) - (hbit ? 0 : 4);
}

static void q3_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q3_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d_all = FP16(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            const float dl = d_all * wgllm_kq_scale_q3_K(e / 16, x[i].scales);
            y[e] = dl * q3_value(&x[i], e);
        }
    }
}

static void vec_dot_q3_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q3_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int l = 0; l < 16; l++) si += q3_value(&x[i], 16 * j + l) * y[i].qs[16 * j + l];
            sumi += wgllm_kq_scale_q3_K(j, x[i].scales) * si;
        }
        sumf += FP16(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sumf;
}

/* ---- Q4_K / Q5_K ------------------------------------------------------- */

/* Packs 8 (scale, min) pairs of 6 bits into Q4_K/Q5_K's 12 bytes. */
static void k4_pack_scales(const uint8_t *ls, const uint8_t *lm, uint8_t *s) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j - 0] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* The shared part of quantize_row_q4_K_ref / _q5_K_ref: per 32-element
 * sub-block make_qkx2_quants, 6-bit scales, then requantize to L. */
static void k4_quantize_block(const float *x, int nmax, float rmin, int nstep, wgllm_fp16 *dd,
                              wgllm_fp16 *ddmin, uint8_t *packed, uint8_t *L) {
    uint8_t Laux[32];
    float weights[32];
    float mins[QK_K / 32];
    float scales[QK_K / 32];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < QK_K / 32; ++j) {
        ls[j] = (uint8_t)nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)nearest_int(inv_min * mins[j]);
        ls[j] = KMIN(63, ls[j]);
        lm[j] = KMIN(63, lm[j]);
    }
    k4_pack_scales(ls, lm, packed);
    *dd = TO_FP16(max_scale / 63.f);
    *ddmin = TO_FP16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        wgllm_kq_scale_min_k4(j, packed, &sc, &m);
        const float d = FP16(*dd) * sc;
        if (!d) continue;
        const float dm = FP16(*ddmin) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)KMAX(0, KMIN(nmax, l));
        }
    }
}

static void q4_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        k4_quantize_block(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* Element e of Q4_K: byte qs[32*(e/64) + e%32], high nibble when (e/32) is odd. */
static inline int q4k_value(const uint8_t *qs, int e) {
    const uint8_t b = qs[32 * (e / 64) + e % 32];
    return (e / 32) & 1 ? b >> 4 : b & 0xF;
}

static void q4_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q4_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d), min = FP16(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            uint8_t sc, m;
            wgllm_kq_scale_min_k4(e / 32, x[i].scales, &sc, &m);
            y[e] = d * sc * q4k_value(x[i].qs, e) - min * m;
        }
    }
}

static void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q4_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            wgllm_kq_scale_min_k4(j, x[i].scales, &sc, &m);
            int si = 0;
            for (int l = 0; l < 32; l++) si += q4k_value(x[i].qs, 32 * j + l) * y[i].qs[32 * j + l];
            sumi += sc * si;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        const float d = FP16(x[i].d) * y[i].d, dm = FP16(x[i].dmin) * y[i].d;
        sumf += d * (float)sumi - dm * (float)summ;
    }
    *s = sumf;
}

static void q5_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        k4_quantize_block(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int nn = 0; nn < QK_K; nn += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[nn + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[nn + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

/* Element e of Q5_K: Q4_K's nibble plus 16 when bit e/32 of qh[e%32] is set. */
static inline int q5k_value(const wgllm_block_q5_K *b, int e) {
    return q4k_value(b->qs, e) + (((b->qh[e % 32] >> (e / 32)) & 1) << 4);
}

static void q5_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q5_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d), min = FP16(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            uint8_t sc, m;
            wgllm_kq_scale_min_k4(e / 32, x[i].scales, &sc, &m);
            y[e] = d * sc * q5k_value(&x[i], e) - min * m;
        }
    }
}

static void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q5_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            wgllm_kq_scale_min_k4(j, x[i].scales, &sc, &m);
            int si = 0;
            for (int l = 0; l < 32; l++) si += q5k_value(&x[i], 32 * j + l) * y[i].qs[32 * j + l];
            sumi += sc * si;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        const float d = FP16(x[i].d) * y[i].d, dm = FP16(x[i].dmin) * y[i].d;
        sumf += d * (float)sumi - dm * (float)summ;
    }
    *s = sumf;
}

/* ---- Q6_K -------------------------------------------------------------- */

static void q6_K_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_q6_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float max_scale = 0;
        float max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, NULL);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(y[i]));
            y[i].d = TO_FP16(0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = TO_FP16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = (int8_t)KMIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            float d = FP16(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = KMAX(-32, KMIN(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* Element e of Q6_K, in [-32, 31]. */
static inline int q6_value(const wgllm_block_q6_K *b, int e) { return wgllm_kq_q6_unsigned(b, e) - 32; }

static void q6_K_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_q6_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = FP16(x[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = d * x[i].scales[e / 16] * q6_value(&x[i], e);
    }
}

static void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_q6_K *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int l = 0; l < 16; l++) si += q6_value(&x[i], 16 * j + l) * y[i].qs[16 * j + l];
            sumi += x[i].scales[j] * si;
        }
        sumf += FP16(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sumf;
}

/* ---- IQ4_NL / IQ4_XS --------------------------------------------------- */

/* Index of the table value nearest to x (ties to the lower one). */
static inline int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl without importance weights, for one
 * super-block of super_block_size elements in sub-blocks of 32. scales_h and
 * scales_l are used only when there are several sub-blocks (IQ4_XS). */
static void iq4_quantize_impl(int super_block_size, const float *x, wgllm_fp16 *dh, uint8_t *q4,
                              uint16_t *scales_h, uint8_t *scales_l, int ntry) {
    const int block_size = 32;
    const int8_t *values = wgllm_kvalues_iq4nl;
    float scales[QK_K / 32];
    float weight[32];
    uint8_t L[QK_K];

    memset(q4, 0, (size_t)super_block_size / 2);
    *dh = TO_FP16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < super_block_size / block_size; ++ib) {
        const float *xb = x + ib * block_size;
        uint8_t *Lb = L + ib * block_size;
        for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < block_size; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, (size_t)block_size);
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < block_size; ++j) {
            float al = id * xb[j];
            int l = best_index_int8(16, values, al);
            Lb[j] = (uint8_t)l;
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < block_size; ++j) {
                float al = id * xb[j];
                int l = best_index_int8(16, values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if (super_block_size / block_size > 1) {
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = TO_FP16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < super_block_size / block_size; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = KMAX(-32, KMIN(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + ib * block_size;
            const float *xb = x + ib * block_size;
            for (int j = 0; j < block_size; ++j) Lb[j] = (uint8_t)best_index_int8(16, values, idl * xb[j]);
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf);
            uint8_t l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        *dh = TO_FP16(scales[0]);
        if (ntry > 0) {
            float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < super_block_size; ++j) L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
        }
    }
    for (int i = 0; i < super_block_size / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

static void iq4_nl_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < k / WGLLM_QK4_NL; i++) {
        uint16_t unused_h;
        iq4_quantize_impl(WGLLM_QK4_NL, x + WGLLM_QK4_NL * i, &y[i].d, y[i].qs, &unused_h, NULL, 7);
    }
}

static void iq4_nl_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < k / WGLLM_QK4_NL; i++, y += WGLLM_QK4_NL) {
        const float d = FP16(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * wgllm_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + 16] = d * wgllm_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static void vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq4_nl *x = vx;
    const wgllm_block_q8_0 *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / WGLLM_QK4_NL; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += wgllm_kvalues_iq4nl[x[i].qs[j] & 0xf] * y[i].qs[j] +
                    wgllm_kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sumf += (FP16(x[i].d) * FP16(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

static void iq4_xs_from_float_ref(const float *x, void *vy, int64_t k) {
    wgllm_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++)
        iq4_quantize_impl(QK_K, x + QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, 7);
}


static void iq4_xs_to_float(const void *vx, float *y, int64_t k) {
    const wgllm_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = FP16(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib, y += 32) {
            const float dl = d * wgllm_kq_scale_iq4_xs(&x[i], ib);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * wgllm_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * wgllm_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

static void vec_dot_iq4_xs_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq4_xs *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *qs = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int si = 0;
            for (int j = 0; j < 16; j++)
                si += wgllm_kvalues_iq4nl[qs[j] & 0xf] * q8[j] + wgllm_kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
            sumi += wgllm_kq_scale_iq4_xs(&x[i], ib) * si;
        }
        sumf += FP16(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sumf;
}

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_q2_K, vec_dot_q2_K_q8_K)
WGLLM_VEC_DOT_NR(nr_q3_K, vec_dot_q3_K_q8_K)
WGLLM_VEC_DOT_NR(nr_q4_K, vec_dot_q4_K_q8_K)
WGLLM_VEC_DOT_NR(nr_q5_K, vec_dot_q5_K_q8_K)
WGLLM_VEC_DOT_NR(nr_q6_K, vec_dot_q6_K_q8_K)
WGLLM_VEC_DOT_NR(nr_iq4_nl, vec_dot_iq4_nl_q8_0)
WGLLM_VEC_DOT_NR(nr_iq4_xs, vec_dot_iq4_xs_q8_K)

void wgllm_kquants_install_ref(struct wgllm_type_traits *t) {
    wgllm_type_set(t, WGLLM_TYPE_Q8_K, q8_K_to_float, q8_K_from_float_ref, WGLLM_TYPE_Q8_K, NULL, NULL);
    wgllm_type_set(t, WGLLM_TYPE_Q2_K, q2_K_to_float, q2_K_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_q2_K_q8_K, nr_q2_K);
    wgllm_type_set(t, WGLLM_TYPE_Q3_K, q3_K_to_float, q3_K_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_q3_K_q8_K, nr_q3_K);
    wgllm_type_set(t, WGLLM_TYPE_Q4_K, q4_K_to_float, q4_K_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_q4_K_q8_K, nr_q4_K);
    wgllm_type_set(t, WGLLM_TYPE_Q5_K, q5_K_to_float, q5_K_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_q5_K_q8_K, nr_q5_K);
    wgllm_type_set(t, WGLLM_TYPE_Q6_K, q6_K_to_float, q6_K_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_q6_K_q8_K, nr_q6_K);
    wgllm_type_set(t, WGLLM_TYPE_IQ4_NL, iq4_nl_to_float, iq4_nl_from_float_ref, WGLLM_TYPE_Q8_0, vec_dot_iq4_nl_q8_0,
           nr_iq4_nl);
    wgllm_type_set(t, WGLLM_TYPE_IQ4_XS, iq4_xs_to_float, iq4_xs_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_iq4_xs_q8_K,
           nr_iq4_xs);
}
