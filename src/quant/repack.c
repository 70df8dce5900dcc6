/*
 * repack.c - the interleaved Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS layout (see repack.h): the copy
 * from the GGUF layout, the scalar reference product, and the choice of SIMD
 * kernel (repack_amx.c, repack_avx512.c, repack_avx2.c; repack_wasm.c in the
 * browser build) for this CPU.
 */
#include "quant/repack.h"

#include "quant/kquants.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>

/* ---- layout ------------------------------------------------------------ */

static bool kernel_takes(uint32_t type);

static bool shape_ok(uint32_t type, int64_t ne0, int64_t ne1) {
    const int64_t bs = wgllm_repack_is_k(type) ? WGLLM_QK_K : 32;
    return (type == WGLLM_TYPE_Q4_0 || type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_IQ4_NL || type == WGLLM_TYPE_Q5_0 ||
            type == WGLLM_TYPE_Q4_1 || type == WGLLM_TYPE_Q5_1 || wgllm_repack_is_k(type)) && ne0 > 0 &&
           ne0 % bs == 0 && ne0 / 32 <= WGLLM_REPACK_MAX_BLOCKS && ne1 > 0 && ne1 % WGLLM_REPACK_ROWS == 0;
}

/* One Q4_K or Q5_K panel: rows src[0..16) into nb records (layout in repack.h). */
static void repack_panel_q45_K(uint32_t type, const uint8_t *src, size_t row_size, int64_t nb, uint8_t *dst) {
    const size_t rs = type == WGLLM_TYPE_Q5_K ? WGLLM_REPACK_Q5_K_RECORD : WGLLM_REPACK_Q4_K_RECORD;
    const size_t q = wgllm_repack_k45_quant_bytes(type);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            /* Q4_K and Q5_K share d, dmin and scales; Q5_K adds qh before qs */
            wgllm_block_q5_K blk;
            const uint8_t *bs = row + (size_t)b * wgllm_type_traits(type)->type_size;
            if (type == WGLLM_TYPE_Q5_K) {
                memcpy(&blk, bs, sizeof(blk));
            } else {
                wgllm_block_q4_K b4;
                memcpy(&b4, bs, sizeof(b4));
                blk.d = b4.d, blk.dmin = b4.dmin;
                memcpy(blk.scales, b4.scales, sizeof(blk.scales));
                memcpy(blk.qs, b4.qs, sizeof(blk.qs));
            }
            uint8_t *rec = dst + (size_t)b * rs;
            for (int c = 0; c < 4; c++)
                for (int m = 0; m < 8; m++) memcpy(rec + wgllm_repack_k45_low(type == WGLLM_TYPE_Q5_K, c, m) + 4 * j, blk.qs + 32 * c + 4 * m, 4);
            if (type == WGLLM_TYPE_Q5_K)
                for (int m = 0; m < 8; m++) memcpy(rec + wgllm_repack_k45_high(m) + 4 * j, blk.qh + 4 * m, 4);
            for (int s = 0; s < 8; s++) {
                uint8_t sc, mn;
                wgllm_kq_scale_min_k4(s, blk.scales, &sc, &mn);
                rec[q + s * 16 + j] = sc;
                rec[q + 128 + (s / 2) * 32 + 2 * j + (s & 1)] = mn;
            }
            memcpy(rec + q + 256 + 2 * j, &blk.d, 2);
            memcpy(rec + q + 288 + 2 * j, &blk.dmin, 2);
        }
    }
}

/* One IQ4_XS panel: rows src[0..16) into nb records (layout in repack.h). */
static void repack_panel_iq4_xs(const uint8_t *src, size_t row_size, int64_t nb, uint8_t *dst) {
    memset(dst, 0, (size_t)nb * WGLLM_REPACK_IQ4_XS_RECORD);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            wgllm_block_iq4_xs blk;
            memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
            uint8_t *rec = dst + (size_t)b * WGLLM_REPACK_IQ4_XS_RECORD;
            for (int s = 0; s < 8; s++) {
                for (int m = 0; m < 4; m++) memcpy(rec + (4 * s + m) * 64 + 4 * j, blk.qs + 16 * s + 4 * m, 4);
                rec[WGLLM_REPACK_IQ4_XS_SCALES + s * 16 + j] = (uint8_t)(int8_t)wgllm_kq_scale_iq4_xs(&blk, s);
            }
            memcpy(rec + WGLLM_REPACK_IQ4_XS_D + 2 * j, &blk.d, 2);
        }
    }
}

/* One Q2_K or Q3_K panel: rows src[0..16) into nb records (layout in repack.h);
 * the two blocks share qs (at their own offsets) and fp16 d. */
static void repack_panel_q23_K(uint32_t type, const uint8_t *src, size_t row_size, int64_t nb, uint8_t *dst) {
    const bool three = type == WGLLM_TYPE_Q3_K;
    const size_t rs = three ? WGLLM_REPACK_Q3_K_RECORD : WGLLM_REPACK_Q2_K_RECORD;
    memset(dst, 0, (size_t)nb * rs);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *rec = dst + (size_t)b * rs;
            if (three) {
                wgllm_block_q3_K blk;
                memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
                for (int v = 0; v < 16; v++) memcpy(rec + 64 * v + 4 * j, blk.qs + 4 * v, 4);
                for (int m = 0; m < 8; m++) memcpy(rec + WGLLM_REPACK_Q3_K_HIGH + 64 * m + 4 * j, blk.hmask + 4 * m, 4);
                for (int s = 0; s < 16; s++)
                    rec[WGLLM_REPACK_Q3_K_SCALES + 32 * (s / 2) + 2 * j + (s & 1)] = (uint8_t)(int8_t)wgllm_kq_scale_q3_K(s, blk.scales);
                memcpy(rec + WGLLM_REPACK_Q3_K_D + 2 * j, &blk.d, 2);
            } else {
                wgllm_block_q2_K blk;
                memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
                for (int v = 0; v < 16; v++) memcpy(rec + 64 * v + 4 * j, blk.qs + 4 * v, 4); /* 32h + 4m = 4(8h + m) */
                for (int p = 0; p < 8; p++) memcpy(rec + WGLLM_REPACK_Q2_K_SCALES + 32 * p + 2 * j, blk.scales + 2 * p, 2);
                memcpy(rec + WGLLM_REPACK_Q2_K_D + 2 * j, &blk.d, 2);
                memcpy(rec + WGLLM_REPACK_Q2_K_DMIN + 2 * j, &blk.dmin, 2);
            }
        }
    }
}

/* One Q6_K panel: rows src[0..16) into nb records (layout in repack.h). */
static void repack_panel_q6_K(const uint8_t *src, size_t row_size, int64_t nb, uint8_t *dst) {
    memset(dst, 0, (size_t)nb * WGLLM_REPACK_Q6_K_RECORD);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            wgllm_block_q6_K blk;
            memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
            uint8_t *rec = dst + (size_t)b * WGLLM_REPACK_Q6_K_RECORD;
            memcpy(rec + WGLLM_REPACK_Q6_K_D + 2 * j, &blk.d, 2);
            for (int s = 0; s < 16; s++) rec[WGLLM_REPACK_Q6_K_SCALES + s * 16 + j] = (uint8_t)blk.scales[s];
            for (int v = 0; v < 32; v++)
                for (int k = 0; k < 4; k++)
                    rec[wgllm_repack_q6_K_low(v) + 4 * j + k] =
                        (uint8_t)((wgllm_kq_q6_unsigned(&blk, 4 * v + k) & 0xF) | (wgllm_kq_q6_unsigned(&blk, 128 + 4 * v + k) & 0xF) << 4);
            for (int w = 0; w < 16; w++)
                for (int k = 0; k < 4; k++) {
                    uint8_t hb = 0;
                    for (int i = 0; i < 4; i++) hb |= (uint8_t)((wgllm_kq_q6_unsigned(&blk, 64 * i + 4 * w + k) >> 4) << (2 * i));
                    rec[wgllm_repack_q6_K_high(w) + 4 * j + k] = hb;
                }
        }
    }
}

/* Q5_0's and Q5_1's fifth bits (qh) as the high-bit vector's 4 bytes of a row (layout in repack.h). */
static void fifth_bits(const uint8_t qh_bytes[4], uint8_t *dst) {
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    for (int k = 0; k < 4; k++) {
        uint8_t h = 0;
        for (int m = 0; m < 4; m++)
            h |= (uint8_t)((((qh >> (4 * m + k)) & 1u) << m) | (((qh >> (16 + 4 * m + k)) & 1u) << (4 + m)));
        dst[k] = h;
    }
}

/* Where a nibble format's block keeps its fields (0: none; d is always first). */
struct nib_block {
    size_t size, m, qh, qs;
};
static struct nib_block nib_block_of(uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_Q5_0: return (struct nib_block){sizeof(wgllm_block_q5_0), 0, offsetof(wgllm_block_q5_0, qh), offsetof(wgllm_block_q5_0, qs)};
    case WGLLM_TYPE_Q4_1: return (struct nib_block){sizeof(wgllm_block_q4_1), offsetof(wgllm_block_q4_1, m), 0, offsetof(wgllm_block_q4_1, qs)};
    case WGLLM_TYPE_Q5_1:
        return (struct nib_block){sizeof(wgllm_block_q5_1), offsetof(wgllm_block_q5_1, m), offsetof(wgllm_block_q5_1, qh),
                                  offsetof(wgllm_block_q5_1, qs)};
    default: return (struct nib_block){sizeof(wgllm_block_q4_0), 0, 0, offsetof(wgllm_block_q4_0, qs)}; /* Q4_0, IQ4_NL */
    }
}

/* One panel: rows src[0..16) (row_size bytes apart) into dst. */
static void repack_panel(const uint8_t *src, size_t row_size, uint32_t type, int64_t nb, uint8_t *dst) {
    wgllm_fp16 *scales = (wgllm_fp16 *)dst, *mins = (wgllm_fp16 *)(dst + wgllm_repack_scale_bytes(nb * 32));
    uint8_t *quants = dst + wgllm_repack_quant_offset(type, nb * 32);
    const size_t qb = wgllm_repack_quant_bytes(type);
    /* the nibble formats: d, then m (Q4_1, Q5_1), qh (Q5_0, Q5_1) and qs, at their
     * block structs' offsets (IQ4_NL's block is Q4_0's bytes) */
    const struct nib_block f = nib_block_of(type);
    for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
        const uint8_t *row = src + (size_t)j * row_size;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = quants + (size_t)b * qb;
            if (type != WGLLM_TYPE_Q8_0) {
                const uint8_t *blk = row + (size_t)b * f.size;
                memcpy(&scales[b * WGLLM_REPACK_ROWS + j], blk, sizeof(wgllm_fp16));
                if (f.m) memcpy(&mins[b * WGLLM_REPACK_ROWS + j], blk + f.m, sizeof(wgllm_fp16));
                for (int m = 0; m < 4; m++) memcpy(q + m * 64 + j * 4, blk + f.qs + 4 * m, 4);
                if (f.qh) fifth_bits(blk + f.qh, q + 256 + j * 4);
            } else {
                wgllm_block_q8_0 blk;
                memcpy(&blk, row + (size_t)b * sizeof(blk), sizeof(blk));
                scales[b * WGLLM_REPACK_ROWS + j] = blk.d;
                for (int g = 0; g < 8; g++) {
                    uint32_t v;
                    memcpy(&v, blk.qs + 4 * g, 4);
                    v ^= 0x80808080u; /* q + 128 in each byte */
                    memcpy(q + g * 64 + j * 4, &v, 4);
                }
            }
        }
    }
}

struct wgllm_repacked wgllm_repacked_rows(const struct wgllm_repacked *w, int64_t r0, int64_t n) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && n % WGLLM_REPACK_ROWS == 0 && r0 >= 0 && n > 0 && r0 + n <= w->ne1);
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0);
    struct wgllm_repacked v = *w;
    v.ne1 = n;
    v.size = panel * (size_t)(n / WGLLM_REPACK_ROWS);
    v.data = (uint8_t *)w->data + panel * (size_t)(r0 / WGLLM_REPACK_ROWS);
    return v;
}

enum wgllm_status wgllm_repack(const void *src, uint32_t type, int64_t ne0, int64_t ne1,
                               struct wgllm_repacked *out, struct wgllm_error *err) {
    memset(out, 0, sizeof(*out));
    if (!shape_ok(type, ne0, ne1))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "repack: type %s with %lld x %lld elements has no interleaved layout "
                               "(needs q4_0/q4_1/q5_0/q5_1/q8_0/iq4_nl with ne0 %% 32 == 0 or q2_K/q3_K/q4_K/q5_K/q6_K/iq4_xs with ne0 %% 256 == 0, ne0 <= %d, ne1 %% %d == 0)",
                               wgllm_type_name(type), (long long)ne0, (long long)ne1,
                               WGLLM_REPACK_MAX_BLOCKS * 32, WGLLM_REPACK_ROWS);
    const size_t panel = wgllm_repack_panel_bytes(type, ne0);
    uint64_t size;
    if (wgllm_mul_overflow(panel, (uint64_t)(ne1 / WGLLM_REPACK_ROWS), &size) || size > SIZE_MAX)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "repack: %lld x %lld matrix too large",
                               (long long)ne0, (long long)ne1);
    uint8_t *data = wgllm_alloc_large((size_t)size);
    if (!data)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "repack: cannot allocate %llu bytes",
                               (unsigned long long)size);
    const size_t row_size = wgllm_row_size(type, ne0);
    for (int64_t p = 0; p < ne1 / WGLLM_REPACK_ROWS; p++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)p * WGLLM_REPACK_ROWS * row_size;
        if (type == WGLLM_TYPE_Q4_K || type == WGLLM_TYPE_Q5_K)
            repack_panel_q45_K(type, s, row_size, ne0 / WGLLM_QK_K, data + (size_t)p * panel);
        else if (type == WGLLM_TYPE_Q6_K) repack_panel_q6_K(s, row_size, ne0 / WGLLM_QK_K, data + (size_t)p * panel);
        else if (type == WGLLM_TYPE_Q2_K || type == WGLLM_TYPE_Q3_K)
            repack_panel_q23_K(type, s, row_size, ne0 / WGLLM_QK_K, data + (size_t)p * panel);
        else if (type == WGLLM_TYPE_IQ4_XS)
            repack_panel_iq4_xs(s, row_size, ne0 / WGLLM_QK_K, data + (size_t)p * panel);
        else repack_panel(s, row_size, type, ne0 / 32, data + (size_t)p * panel);
    }
    out->type = type;
    out->ne0 = ne0;
    out->ne1 = ne1;
    out->data = data;
    out->size = (size_t)size;
    wgllm_error_clear(err);
    return WGLLM_STATUS_OK;
}

void wgllm_repacked_free(struct wgllm_repacked *w) {
    if (!w) return;
    wgllm_free_aligned(w->data);
    memset(w, 0, sizeof(*w));
}

int wgllm_repack_row_group(void) { return WGLLM_REPACK_ROWS; }

/* ---- scalar reference -------------------------------------------------- */

/* The 256-element formats: one record (super-block) of row j against one
 * activation block, added to acc as the SIMD kernels add it. */
typedef float (*ref_record_fn)(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc);

/* Q4_K/Q5_K: the exact integer sums, then acc = fma(d*d_x, sum, acc) and
 * acc = fma(-(dmin*d_x), min_sum, acc). */
static float ref_record_q45_K(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc) {
    const size_t q = wgllm_repack_k45_quant_bytes(type);
    const bool five = type == WGLLM_TYPE_Q5_K;
    int32_t sum = 0, msum = 0;
    for (int s = 0; s < 8; s++) {
        const int c = s / 2, shift = 4 * (s & 1);
        int32_t dot = 0;
        for (int m = 0; m < 8; m++)
            for (int k = 0; k < 4; k++) {
                int v = (rec[wgllm_repack_k45_low(five, c, m) + 4 * j + k] >> shift) & 0x0F;
                if (five) v |= ((rec[wgllm_repack_k45_high(m) + 4 * j + k] >> s) & 1) << 4;
                dot += v * xb->qs[64 * c + 32 * (s & 1) + 4 * m + k];
            }
        sum += rec[q + s * 16 + j] * dot;
        msum += rec[q + 128 + (s / 2) * 32 + 2 * j + (s & 1)] * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
    }
    wgllm_fp16 d, dmin;
    memcpy(&d, rec + q + 256 + 2 * j, 2);
    memcpy(&dmin, rec + q + 288 + 2 * j, 2);
    acc = fmaf(wgllm_fp16_lookup(d) * xb->d, (float)sum, acc);
    return fmaf(-(wgllm_fp16_lookup(dmin) * xb->d), (float)msum, acc);
}

/* Q2_K: as Q4_K, with 16 sub-blocks of 16 and 4-bit scales and mins. */
static float ref_record_q2_K(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc) {
    int32_t sum = 0, msum = 0;
    for (int s = 0; s < 16; s++) {
        int32_t dot = 0;
        for (int e = 16 * s; e < 16 * s + 16; e++) {
            const int h = e / 128, g = (e % 128) / 32, m = (e % 32) / 4, k = e % 4;
            dot += ((rec[64 * (8 * h + m) + 4 * j + k] >> (2 * g)) & 3) * xb->qs[e];
        }
        const uint8_t sc = rec[WGLLM_REPACK_Q2_K_SCALES + 32 * (s / 2) + 2 * j + (s & 1)];
        sum += (sc & 0xF) * dot;
        msum += (sc >> 4) * xb->bsums[s];
    }
    wgllm_fp16 d, dmin;
    memcpy(&d, rec + WGLLM_REPACK_Q2_K_D + 2 * j, 2);
    memcpy(&dmin, rec + WGLLM_REPACK_Q2_K_DMIN + 2 * j, 2);
    acc = fmaf(wgllm_fp16_lookup(d) * xb->d, (float)sum, acc);
    return fmaf(-(wgllm_fp16_lookup(dmin) * xb->d), (float)msum, acc);
}

/* Q3_K: sum_s scale_s * (dot_s - 4*bsum_s) over the unsigned values
 * low | high << 2, exact, then acc = fma(d*d_x, sum, acc). */
static float ref_record_q3_K(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc) {
    int32_t sum = 0;
    for (int s = 0; s < 16; s++) {
        int32_t dot = 0;
        for (int e = 16 * s; e < 16 * s + 16; e++) {
            const int h = e / 128, g = (e % 128) / 32, m = (e % 32) / 4, k = e % 4;
            const int lo = (rec[64 * (8 * h + m) + 4 * j + k] >> (2 * g)) & 3;
            const int hi = (rec[WGLLM_REPACK_Q3_K_HIGH + 64 * m + 4 * j + k] >> (4 * h + g)) & 1;
            dot += (lo | hi << 2) * xb->qs[e];
        }
        sum += (int8_t)rec[WGLLM_REPACK_Q3_K_SCALES + 32 * (s / 2) + 2 * j + (s & 1)] * (dot - 4 * xb->bsums[s]);
    }
    wgllm_fp16 d;
    memcpy(&d, rec + WGLLM_REPACK_Q3_K_D + 2 * j, 2);
    return fmaf(wgllm_fp16_lookup(d) * xb->d, (float)sum, acc);
}

/* Q6_K: sum_s scale_s * (dot_s - 32*bsum_s), exact, then acc = fma(d*d_x, sum, acc). */
static float ref_record_q6_K(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc) {
    int32_t sum = 0;
    for (int s = 0; s < 16; s++) {
        int32_t dot = 0;
        for (int e = 16 * s; e < 16 * s + 16; e++) {
            const int v = (e % 128) / 4, k = e % 4, wv = (e % 64) / 4, i = e / 64;
            const uint8_t nib = rec[wgllm_repack_q6_K_low(v) + 4 * j + k];
            const int q = (e < 128 ? nib & 0xF : nib >> 4) | ((rec[wgllm_repack_q6_K_high(wv) + 4 * j + k] >> (2 * i)) & 3) << 4;
            dot += q * xb->qs[e];
        }
        sum += (int8_t)rec[WGLLM_REPACK_Q6_K_SCALES + s * 16 + j] * (dot - 32 * xb->bsums[s]);
    }
    wgllm_fp16 d;
    memcpy(&d, rec + WGLLM_REPACK_Q6_K_D + 2 * j, 2);
    return fmaf(wgllm_fp16_lookup(d) * xb->d, (float)sum, acc);
}

/* IQ4_XS: sum_s scale_s * dot_s, exact, then acc = fma(d*d_x, sum, acc). */
static float ref_record_iq4_xs(uint32_t type, const uint8_t *rec, int j, const wgllm_block_q8_K *xb, float acc) {
    int32_t sum = 0;
    for (int s = 0; s < 8; s++) {
        int32_t dot = 0;
        for (int m = 0; m < 4; m++)
            for (int k = 0; k < 4; k++) {
                const uint8_t v = rec[(4 * s + m) * 64 + 4 * j + k];
                dot += wgllm_kvalues_iq4nl[v & 0xF] * xb->qs[32 * s + 4 * m + k] +
                       wgllm_kvalues_iq4nl[v >> 4] * xb->qs[32 * s + 16 + 4 * m + k];
            }
        sum += (int8_t)rec[WGLLM_REPACK_IQ4_XS_SCALES + s * 16 + j] * dot;
    }
    wgllm_fp16 d;
    memcpy(&d, rec + WGLLM_REPACK_IQ4_XS_D + 2 * j, 2);
    return fmaf(wgllm_fp16_lookup(d) * xb->d, (float)sum, acc);
}

/* Per (row, token): the records in order from acc = 0. */
static void matmul_ref_k(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                         int n, float *y, int ldy, bool accumulate) {
    const ref_record_fn step = w->type == WGLLM_TYPE_Q6_K     ? ref_record_q6_K
                               : w->type == WGLLM_TYPE_IQ4_XS ? ref_record_iq4_xs
                               : w->type == WGLLM_TYPE_Q2_K   ? ref_record_q2_K
                               : w->type == WGLLM_TYPE_Q3_K   ? ref_record_q3_K
                                                              : ref_record_q45_K;
    const int64_t nb = w->ne0 / WGLLM_QK_K;
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0), rs = panel / (size_t)nb;
    for (int64_t p = r0 / WGLLM_REPACK_ROWS; p < r1 / WGLLM_REPACK_ROWS; p++) {
        const uint8_t *pd = (const uint8_t *)w->data + (size_t)p * panel;
        for (int t = 0; t < n; t++) {
            const wgllm_block_q8_K *xb = (const wgllm_block_q8_K *)((const char *)x + (size_t)t * x_stride);
            for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) acc = step(w->type, pd + (size_t)b * rs, j, &xb[b], acc);
                float *dst = y + (size_t)t * ldy + p * WGLLM_REPACK_ROWS + j;
                *dst = accumulate ? *dst + acc : acc;
            }
        }
    }
}

void wgllm_repacked_matmul_ref(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    if (wgllm_repack_is_k(w->type)) {
        matmul_ref_k(w, r0, r1, x, x_stride, n, y, ldy, accumulate);
        return;
    }
    const int64_t nb = w->ne0 / 32;
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0), qb = wgllm_repack_quant_bytes(w->type);
    const uint32_t type = w->type;
    const bool nl = type == WGLLM_TYPE_IQ4_NL, q8 = type == WGLLM_TYPE_Q8_0;
    const bool five = type == WGLLM_TYPE_Q5_0 || type == WGLLM_TYPE_Q5_1, min = wgllm_repack_has_min(type);
    /* the offset a kernel removes as -bias * sum(activation block) (none with a min) */
    const int32_t bias = type == WGLLM_TYPE_Q4_0 ? 8 : type == WGLLM_TYPE_Q5_0 ? 16 : nl || q8 ? 128 : 0;
    for (int64_t p = r0 / WGLLM_REPACK_ROWS; p < r1 / WGLLM_REPACK_ROWS; p++) {
        const uint8_t *pd = (const uint8_t *)w->data + (size_t)p * panel;
        const wgllm_fp16 *scales = (const wgllm_fp16 *)pd;
        const wgllm_fp16 *mins = (const wgllm_fp16 *)(pd + wgllm_repack_scale_bytes(w->ne0));
        const uint8_t *quants = pd + wgllm_repack_quant_offset(type, w->ne0);
        for (int t = 0; t < n; t++) {
            const char *xt = (const char *)x + (size_t)t * x_stride;
            const wgllm_block_q8_0 *x0 = (const wgllm_block_q8_0 *)xt;
            const wgllm_block_q8_1 *x1 = (const wgllm_block_q8_1 *)xt;
            for (int j = 0; j < WGLLM_REPACK_ROWS; j++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *q = quants + (size_t)b * qb;
                    const int8_t *a = min ? x1[b].qs : x0[b].qs;
                    int32_t sum_a = 0, dot = 0;
                    for (int i = 0; i < 32; i++) sum_a += a[i];
                    if (q8) {
                        for (int g = 0; g < 8; g++)
                            for (int k = 0; k < 4; k++) dot += q[g * 64 + j * 4 + k] * a[4 * g + k];
                    } else {
                        for (int m = 0; m < 4; m++)
                            for (int k = 0; k < 4; k++) {
                                const uint8_t v = q[m * 64 + j * 4 + k], h = five ? q[256 + j * 4 + k] : 0;
                                int lo = (v & 0x0F) | ((h >> m) & 1) << 4, hi = (v >> 4) | ((h >> (4 + m)) & 1) << 4;
                                if (nl) /* the looked-up value + 128, as the kernels' u8 */
                                    lo = wgllm_kvalues_iq4nl[lo] + 128, hi = wgllm_kvalues_iq4nl[hi] + 128;
                                dot += lo * a[4 * m + k] + hi * a[16 + 4 * m + k];
                            }
                    }
                    dot -= bias * sum_a;
                    const float dx = wgllm_fp16_lookup(min ? x1[b].d : x0[b].d);
                    acc = fmaf(wgllm_fp16_lookup(scales[b * WGLLM_REPACK_ROWS + j]) * dx, (float)dot, acc);
                    if (min) acc = fmaf(wgllm_fp16_lookup(mins[b * WGLLM_REPACK_ROWS + j]), wgllm_fp16_lookup(x1[b].s), acc);
                }
                float *dst = y + (size_t)t * ldy + p * WGLLM_REPACK_ROWS + j;
                *dst = accumulate ? *dst + acc : acc;
            }
        }
    }
}

/* ---- the tile loop of the 256-element formats (repack.h) ----------------- */

static void prepare_k(const char *x, size_t xs, int T, int64_t nb, struct wgllm_repack_pre_k *pre) {
    for (int t = 0; t < T; t++) {
        const wgllm_block_q8_K *xb = (const wgllm_block_q8_K *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            pre->dx[b][t] = xb[b].d;
            const int16_t *bs = xb[b].bsums;
            for (int k = 0; k < 4; k++) pre->bsum2[b][k][t] = wgllm_repack_bsum2(bs, k);
        }
    }
}

void wgllm_repack_drive_k(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                          int n, float *y, int ldy, bool accumulate, const wgllm_repack_panel_k_fn *panels) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    const int64_t nb = w->ne0 / WGLLM_QK_K;
    WGLLM_ASSERT(nb <= WGLLM_REPACK_MAX_SB);
    const size_t panel = wgllm_repack_panel_bytes(w->type, w->ne0);
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
    const int64_t group =
        n <= WGLLM_REPACK_TILE ? WGLLM_MAX(1, p1 - p0) : WGLLM_MAX(1, (int64_t)(1 << 20) / (int64_t)panel);
    struct wgllm_repack_pre_k pre;
    for (int64_t g0 = p0; g0 < p1; g0 += group) {
        const int64_t g1 = WGLLM_MIN(p1, g0 + group);
        for (int t0 = 0; t0 < n; t0 += WGLLM_REPACK_TILE) {
            const int T = WGLLM_MIN(WGLLM_REPACK_TILE, n - t0);
            const char *xt = (const char *)x + (size_t)t0 * x_stride;
            prepare_k(xt, x_stride, T, nb, &pre);
            for (int64_t p = g0; p < g1; p++)
                panels[T]((const uint8_t *)w->data + (size_t)p * panel, nb, xt, x_stride, &pre,
                          y + (size_t)t0 * ldy + p * WGLLM_REPACK_ROWS, ldy, accumulate);
        }
    }
}

/* ---- dispatch ---------------------------------------------------------- */

static wgllm_repacked_matmul_fn kernel;
static const char *kernel_name = "none";
/* The types the kernel takes, one bit per type: the layout holds all of
 * shape_ok's, but not every ISA's kernel multiplies each of them faster. */
static uint64_t kernel_types;
#define TYPE_BIT(t) ((uint64_t)1 << (t))
#define BASE_TYPES (TYPE_BIT(WGLLM_TYPE_Q4_0) | TYPE_BIT(WGLLM_TYPE_Q8_0)) /* every SIMD kernel's */

static void pick_kernel(void) {
    wgllm_quant_init();
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *c = wgllm_cpu_caps();
    if (c->avx2 && c->fma && c->f16c) {
        kernel = wgllm_repacked_matmul_avx2;
        kernel_name = "avx2";
        kernel_types = BASE_TYPES | TYPE_BIT(WGLLM_TYPE_IQ4_NL) | TYPE_BIT(WGLLM_TYPE_Q5_0) | TYPE_BIT(WGLLM_TYPE_Q4_1) |
                       TYPE_BIT(WGLLM_TYPE_Q5_1) | TYPE_BIT(WGLLM_TYPE_Q4_K) | TYPE_BIT(WGLLM_TYPE_IQ4_XS);
        if (c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni) {
            kernel = wgllm_repacked_matmul_avx512;
            kernel_name = "avx512";
            /* Q5_K and Q6_K: at 256 bits their repacked products were no faster
             * than the per-row kernels, or slower, so AVX2 CPUs keep those;
             * Q2_K and Q3_K have no AVX2 kernel over the layout */
            kernel_types |= TYPE_BIT(WGLLM_TYPE_Q5_K) | TYPE_BIT(WGLLM_TYPE_Q6_K) | TYPE_BIT(WGLLM_TYPE_Q2_K) |
                            TYPE_BIT(WGLLM_TYPE_Q3_K);
            /* the same types: AMX takes prompts of all but Q2_K/Q3_K and hands
             * decode and the rest to the AVX-512 kernel */
            if (c->amx_int8) {
                kernel = wgllm_repacked_matmul_amx;
                kernel_name = "amx";
            }
        }
    }
#elif defined(__wasm_simd128__)
    kernel = wgllm_repacked_matmul_wasm;
    kernel_name = "simd128";
    kernel_types = BASE_TYPES;
    /* Q4_K: only in the relaxed-SIMD module (repack_relaxed.c) */
    if (wgllm_cpu_caps()->relaxed_simd) kernel_types |= TYPE_BIT(WGLLM_TYPE_Q4_K);
#endif
}

static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

wgllm_repacked_matmul_fn wgllm_repack_kernel(const char **name) {
    pthread_once(&kernel_once, pick_kernel);
    if (name) *name = kernel_name;
    return kernel;
}

static bool kernel_takes(uint32_t type) { return type < 64 && (kernel_types >> type & 1); }

bool wgllm_repack_supported(uint32_t type, int64_t ne0, int64_t ne1) {
    return shape_ok(type, ne0, ne1) && wgllm_repack_kernel(NULL) != NULL && kernel_takes(type);
}

void wgllm_repacked_matmul(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x, size_t x_stride,
                           int n, float *y, int ldy, bool accumulate) {
    wgllm_repacked_matmul_fn k = wgllm_repack_kernel(NULL);
    if (k && !kernel_takes(w->type)) k = NULL;
    (k ? k : wgllm_repacked_matmul_ref)(w, r0, r1, x, x_stride, n, y, ldy, accumulate);
}
