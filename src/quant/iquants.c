/*
 * iquants.c - the scalar reference kernels of the grid formats IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: one decoder per format
 * (a 32-element group to signed grid values and integer scales, the layout
 * iquants.h describes), dequantization and the dots against Q8_K built on
 * it. The one quantizer, IQ3_S's, is in iquants_quant.c.
 *
 * Bit-exactness with ggml: to_float computes each group's float scale with
 * ggml's expressions (dequantize_row_iq*: d * (0.5 + s) * 0.25 for IQ2, ...),
 * then multiplies it by the signed grid value (a sign flip is exact, so this
 * equals ggml's scale * grid * +-1). The dots sum every product times its
 * odd integer scale in one int per super-block, then do ggml's generic float
 * steps (d_x * d_y * sum, one constant factor at the end); the IQ1 offsets
 * come from Q8_K's bsums for IQ1_S and from the activations for IQ1_M, as
 * ggml's generic kernels take them.
 */
#include "quant/iquants.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define FP16(h) wgllm_fp16_lookup(h)
#define QK_K WGLLM_QK_K

static inline int grid_byte(uint64_t g, int j) { return (int)((g >> (8 * j)) & 0xFF); }
static inline int grid_sbyte(uint64_t g, int j) { return (int8_t)((g >> (8 * j)) & 0xFF); }
static inline uint32_t rd_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline uint16_t rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* 8 elements of an IQ2 grid entry with the sign bits of sbyte (bit j: minus) */
static void put8(int8_t *w, uint64_t grid, unsigned sbyte) {
    for (int j = 0; j < 8; j++) w[j] = (int8_t)((sbyte >> j) & 1 ? -grid_byte(grid, j) : grid_byte(grid, j));
}
/* 4 + 4 elements of two IQ3 grid entries with the 8 sign bits of sbyte */
static void put4x2(int8_t *w, uint32_t g1, uint32_t g2, unsigned sbyte) {
    for (int j = 0; j < 4; j++) {
        const int a = (int)((g1 >> (8 * j)) & 0xFF), b = (int)((g2 >> (8 * j)) & 0xFF);
        w[j] = (int8_t)((sbyte >> j) & 1 ? -a : a);
        w[j + 4] = (int8_t)((sbyte >> (j + 4)) & 1 ? -b : b);
    }
}

void wgllm_iq_decode_group(uint32_t type, const void *block, int ib, struct wgllm_iq_group *g) {
    memset(g->dsign, 0, sizeof g->dsign);
    switch (type) {
    case WGLLM_TYPE_IQ2_XXS: {
        const wgllm_block_iq2_xxs *b = block;
        const uint8_t *q = (const uint8_t *)(b->qs + 4 * ib);
        const uint32_t aux = rd_u32(q + 4);
        for (int l = 0; l < 4; l++) put8(g->w + 8 * l, wgllm_iq2xxs_grid[q[l]], wgllm_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        g->ls[0] = g->ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case WGLLM_TYPE_IQ2_XS: {
        const wgllm_block_iq2_xs *b = block;
        for (int l = 0; l < 4; l++) {
            const uint16_t q = b->qs[4 * ib + l];
            put8(g->w + 8 * l, wgllm_iq2xs_grid[q & 511], wgllm_ksigns_iq2xs[q >> 9]);
        }
        g->ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        g->ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case WGLLM_TYPE_IQ2_S: {
        const wgllm_block_iq2_s *b = block;
        const uint8_t *qs = b->qs + 4 * ib, *signs = b->qs + QK_K / 8 + 4 * ib;
        for (int l = 0; l < 4; l++)
            put8(g->w + 8 * l, wgllm_iq2s_grid[qs[l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300)], signs[l]);
        g->ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        g->ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case WGLLM_TYPE_IQ3_XXS: {
        const wgllm_block_iq3_xxs *b = block;
        const uint8_t *q3 = b->qs + 8 * ib;
        const uint32_t aux = rd_u32(b->qs + QK_K / 4 + 4 * ib);
        for (int l = 0; l < 4; l++)
            put4x2(g->w + 8 * l, wgllm_iq3xxs_grid[q3[2 * l]], wgllm_iq3xxs_grid[q3[2 * l + 1]],
                   wgllm_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        g->ls[0] = g->ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case WGLLM_TYPE_IQ3_S: {
        const wgllm_block_iq3_s *b = block;
        const uint8_t *qs = b->qs + 8 * ib, *signs = b->signs + 4 * ib;
        const unsigned qh = b->qh[ib];
        for (int l = 0; l < 4; l++)
            put4x2(g->w + 8 * l, wgllm_iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                   wgllm_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], signs[l]);
        const int s = ib % 2 ? b->scales[ib / 2] >> 4 : b->scales[ib / 2] & 0xF;
        g->ls[0] = g->ls[1] = 2 * s + 1;
        break;
    }
    case WGLLM_TYPE_IQ1_S: {
        const wgllm_block_iq1_s *b = block;
        const uint8_t *qs = b->qs + 4 * ib;
        const unsigned qh = b->qh[ib];
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = wgllm_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
            for (int j = 0; j < 8; j++) g->w[8 * l + j] = (int8_t)grid_sbyte(grid, j);
            g->dsign[l] = qh & 0x8000 ? -1 : 1;
        }
        g->ls[0] = g->ls[1] = 2 * (int)((qh >> 12) & 7) + 1;
        break;
    }
    case WGLLM_TYPE_IQ1_M: {
        const wgllm_block_iq1_m *b = block;
        const uint8_t *qs = b->qs + 4 * ib, *qh = b->qh + 2 * ib;
        for (int l = 0; l < 4; l++) {
            const unsigned h = l % 2 ? qh[l / 2] >> 4 : qh[l / 2] & 0xF;
            const uint64_t grid = wgllm_iq1s_grid[qs[l] | ((h & 7) << 8)];
            for (int j = 0; j < 8; j++) g->w[8 * l + j] = (int8_t)grid_sbyte(grid, j);
            g->dsign[l] = h & 8 ? -1 : 1;
        }
        const unsigned sc = rd_u16(b->scales + 2 * (ib / 2)) >> (6 * (ib % 2));
        g->ls[0] = 2 * (int)(sc & 7) + 1;
        g->ls[1] = 2 * (int)((sc >> 3) & 7) + 1;
        break;
    }
    default:
        memset(g, 0, sizeof *g);
    }
}

/* ---- dequantize -------------------------------------------------------- */

/* ggml's float scale of 16 elements with integer scale ls = 2 s + 1 of a
 * block of scale d (dequantize_row_*'s expressions, in its order). */
static inline float group_scale(uint32_t type, float d, int ls) {
    const int s = (ls - 1) / 2;
    switch (type) {
    case WGLLM_TYPE_IQ3_XXS: return d * (0.5f + (float)s) * 0.5f;
    case WGLLM_TYPE_IQ3_S:
    case WGLLM_TYPE_IQ1_S:
    case WGLLM_TYPE_IQ1_M: return d * (float)ls;
    default: return d * (0.5f + (float)s) * 0.25f; /* the IQ2 formats */
    }
}

static void iq_to_float(uint32_t type, size_t bsize, const void *vx, float *y, int64_t n) {
    const uint8_t *x = vx;
    struct wgllm_iq_group g;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const void *b = x + (size_t)i * bsize;
        const float d = type == WGLLM_TYPE_IQ1_M ? FP16(wgllm_iq1m_scale(b)) : FP16(*(const wgllm_fp16 *)b);
        for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
            wgllm_iq_decode_group(type, b, ib, &g);
            for (int h = 0; h < 2; h++) {
                const float dl = group_scale(type, d, g.ls[h]);
                for (int j = 16 * h; j < 16 * h + 16; j++)
                    y[j] = g.dsign[j / 8] ? dl * ((float)g.w[j] + (float)g.dsign[j / 8] * WGLLM_IQ1_DELTA)
                                          : dl * (float)g.w[j];
            }
        }
    }
}

#define TO_FLOAT(name, T, blk)                                                                   \
    static void name(const void *x, float *y, int64_t n) { iq_to_float(WGLLM_TYPE_##T, sizeof(blk), x, y, n); }
TO_FLOAT(iq2_xxs_to_float, IQ2_XXS, wgllm_block_iq2_xxs)
TO_FLOAT(iq2_xs_to_float, IQ2_XS, wgllm_block_iq2_xs)
TO_FLOAT(iq2_s_to_float, IQ2_S, wgllm_block_iq2_s)
TO_FLOAT(iq3_xxs_to_float, IQ3_XXS, wgllm_block_iq3_xxs)
TO_FLOAT(iq3_s_to_float, IQ3_S, wgllm_block_iq3_s)
TO_FLOAT(iq1_s_to_float, IQ1_S, wgllm_block_iq1_s)
TO_FLOAT(iq1_m_to_float, IQ1_M, wgllm_block_iq1_m)

/* ---- dots against Q8_K ------------------------------------------------- */

/* The super-block's integer: sum over groups and halves of ls * (w . q8). */
static int32_t block_isum(uint32_t type, const void *b, const int8_t *q8) {
    struct wgllm_iq_group g;
    int32_t bsum = 0;
    for (int ib = 0; ib < QK_K / 32; ib++, q8 += 32) {
        wgllm_iq_decode_group(type, b, ib, &g);
        for (int h = 0; h < 2; h++) {
            int32_t s = 0;
            for (int j = 16 * h; j < 16 * h + 16; j++) s += g.w[j] * q8[j];
            bsum += g.ls[h] * s;
        }
    }
    return bsum;
}

/* IQ2 / IQ3: sumf += d_x d_y bsum per block, times a constant at the end
 * (1/8 for the IQ2 grids' magnitudes 8..43, 1/4 for IQ3_XXS, 1 for IQ3_S). */
static void iq_vec_dot(uint32_t type, size_t bsize, float mult, int64_t n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const void *b = x + (size_t)i * bsize;
        const float d = FP16(*(const wgllm_fp16 *)b) * y[i].d;
        sumf += d * (float)block_isum(type, b, y[i].qs);
    }
    *s = mult * sumf;
}

#define VEC_DOT(name, T, blk, mult)                                                              \
    static void name(int64_t n, float *s, const void *x, const void *y) {                        \
        iq_vec_dot(WGLLM_TYPE_##T, sizeof(blk), mult, n, s, x, y);                               \
    }
VEC_DOT(vec_dot_iq2_xxs_q8_K, IQ2_XXS, wgllm_block_iq2_xxs, 0.125f)
VEC_DOT(vec_dot_iq2_xs_q8_K, IQ2_XS, wgllm_block_iq2_xs, 0.125f)
VEC_DOT(vec_dot_iq2_s_q8_K, IQ2_S, wgllm_block_iq2_s, 0.125f)
VEC_DOT(vec_dot_iq3_xxs_q8_K, IQ3_XXS, wgllm_block_iq3_xxs, 0.25f)
VEC_DOT(vec_dot_iq3_s_q8_K, IQ3_S, wgllm_block_iq3_s, 1.0f)

/* IQ1: d_x d_y (sumi + 1/8 sumd), sumd the offsets' integer: for IQ1_S
 * ls * sign * (the group's two bsums), for IQ1_M per 8 elements the sign
 * times their activation sum, times the half's ls. */
static void vec_dot_iq1_s_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_s *x = vx;
    const wgllm_block_q8_K *y = vy;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int32_t sumi = block_isum(WGLLM_TYPE_IQ1_S, &x[i], y[i].qs);
        int32_t sumd = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
            const int sign = x[i].qh[ib] & 0x8000 ? -1 : 1;
            sumd += ls * sign * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sumf += FP16(x[i].d) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

static void vec_dot_iq1_m_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const wgllm_block_iq1_m *x = vx;
    const wgllm_block_q8_K *y = vy;
    struct wgllm_iq_group g;
    float sumf = 0.f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int32_t sumi = block_isum(WGLLM_TYPE_IQ1_M, &x[i], y[i].qs);
        int32_t sumd = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            wgllm_iq_decode_group(WGLLM_TYPE_IQ1_M, &x[i], ib, &g);
            for (int k = 0; k < 4; k++) {
                int32_t a = 0;
                for (int j = 0; j < 8; j++) a += y[i].qs[32 * ib + 8 * k + j];
                sumd += g.ls[k / 2] * g.dsign[k] * a;
            }
        }
        sumf += FP16(wgllm_iq1m_scale(&x[i])) * y[i].d * ((float)sumi + WGLLM_IQ1_DELTA * (float)sumd);
    }
    *s = sumf;
}

/* ---- install ----------------------------------------------------------- */

WGLLM_VEC_DOT_NR(nr_iq2_xxs, vec_dot_iq2_xxs_q8_K)
WGLLM_VEC_DOT_NR(nr_iq2_xs, vec_dot_iq2_xs_q8_K)
WGLLM_VEC_DOT_NR(nr_iq2_s, vec_dot_iq2_s_q8_K)
WGLLM_VEC_DOT_NR(nr_iq3_xxs, vec_dot_iq3_xxs_q8_K)
WGLLM_VEC_DOT_NR(nr_iq3_s, vec_dot_iq3_s_q8_K)
WGLLM_VEC_DOT_NR(nr_iq1_s, vec_dot_iq1_s_q8_K)
WGLLM_VEC_DOT_NR(nr_iq1_m, vec_dot_iq1_m_q8_K)

void wgllm_iquants_install_ref(struct wgllm_type_traits *t) {
    wgllm_type_set(t, WGLLM_TYPE_IQ2_XXS, iq2_xxs_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq2_xxs_q8_K, nr_iq2_xxs);
    wgllm_type_set(t, WGLLM_TYPE_IQ2_XS, iq2_xs_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq2_xs_q8_K, nr_iq2_xs);
    wgllm_type_set(t, WGLLM_TYPE_IQ2_S, iq2_s_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq2_s_q8_K, nr_iq2_s);
    wgllm_type_set(t, WGLLM_TYPE_IQ3_XXS, iq3_xxs_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq3_xxs_q8_K, nr_iq3_xxs);
    wgllm_type_set(t, WGLLM_TYPE_IQ3_S, iq3_s_to_float, wgllm_iq3_s_from_float_ref, WGLLM_TYPE_Q8_K, vec_dot_iq3_s_q8_K,
                   nr_iq3_s);
    wgllm_type_set(t, WGLLM_TYPE_IQ1_S, iq1_s_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq1_s_q8_K, nr_iq1_s);
    wgllm_type_set(t, WGLLM_TYPE_IQ1_M, iq1_m_to_float, NULL, WGLLM_TYPE_Q8_K, vec_dot_iq1_m_q8_K, nr_iq1_m);
}
