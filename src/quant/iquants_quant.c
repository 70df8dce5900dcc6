/*
 * iquants_quant.c - ggml's IQ3_S quantizer without an importance matrix
 * (quantize_iq3_s with quant_weights NULL, what llama-quantize runs for
 * IQ3_S tensors when it is given none), byte for byte: wgllm's IQ3_S files
 * must be llama.cpp's.
 *
 * Per group of 32: weights x^2, magnitudes |x| with the signs kept apart, a
 * search over 19 inverse scales (15 + 0.2 is) / max for the 4-element grid
 * points nearest the rounded levels (a point off the grid is replaced by
 * its best neighbour among the grid points at the 3 smallest distances,
 * ggml's iq3xs_init_impl table, built here from the same grid), the scale
 * of the best weighted fit, then one more pass at that scale where a point
 * was off the grid; the block scale is max / 31 * 1.033 in fp16 and each
 * group's scale a 4-bit odd multiple of it. Float operations in ggml's
 * order (no FMA contraction: GCC's -std=c11 implies -ffp-contract=off).
 */
#include "quant/iquants.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K WGLLM_QK_K
#define KMAP_SIZE 4096 /* 4 levels of 3 bits */
#define BS 32          /* IQ3S_BLOCK_SIZE */

/* kmap[u]: the grid index of level vector u, or -(offset + 1) into
 * neighbours (a count, then that many grid indices) when u is off the grid */
static int kmap[KMAP_SIZE];
static uint16_t *neighbours;
static bool tables_ok;

static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

static inline int grid_byte(uint32_t g, int k) { return (int)((g >> (8 * k)) & 0xFF); }

static int cmp_pair(const void *a, const void *b) {
    const int *l = a, *r = b;
    return l[0] < r[0] ? -1 : l[0] > r[0] ? 1 : l[1] < r[1] ? -1 : l[1] > r[1] ? 1 : 0;
}

/* the grid points at the 3 smallest squared distances from level vector u */
static int nearest_points(int u, int *dist2, uint16_t *out) {
    int pos[4];
    for (int k = 0; k < 4; k++) pos[k] = 2 * ((u >> (3 * k)) & 7) + 1;
    for (int j = 0; j < 512; j++) {
        int d2 = 0;
        for (int k = 0; k < 4; k++) d2 += (grid_byte(wgllm_iq3s_grid[j], k) - pos[k]) * (grid_byte(wgllm_iq3s_grid[j], k) - pos[k]);
        dist2[2 * j] = d2;
        dist2[2 * j + 1] = j;
    }
    qsort(dist2, 512, 2 * sizeof(int), cmp_pair);
    int n = 0, d2 = dist2[0], nhave = 1;
    for (int j = 0; j < 512; j++) {
        if (dist2[2 * j] > d2) {
            if (nhave == 3) break;
            d2 = dist2[2 * j];
            nhave++;
        }
        if (out) out[n] = (uint16_t)dist2[2 * j + 1];
        n++;
    }
    return n;
}

static void tables_init(void) {
    for (int i = 0; i < KMAP_SIZE; i++) kmap[i] = -1;
    for (int j = 0; j < 512; j++) {
        int u = 0;
        for (int k = 0; k < 4; k++) u |= ((grid_byte(wgllm_iq3s_grid[j], k) - 1) / 2) << (3 * k);
        kmap[u] = j;
    }
    int *dist2 = malloc(2 * 512 * sizeof(int));
    size_t total = 0;
    if (!dist2) return;
    for (int u = 0; u < KMAP_SIZE; u++)
        if (kmap[u] < 0) total += 1 + (size_t)nearest_points(u, dist2, NULL);
    neighbours = malloc(total * sizeof(uint16_t));
    if (!neighbours) {
        free(dist2);
        return;
    }
    int at = 0;
    for (int u = 0; u < KMAP_SIZE; u++) {
        if (kmap[u] >= 0) continue;
        const int n = nearest_points(u, dist2, neighbours + at + 1);
        neighbours[at] = (uint16_t)n;
        kmap[u] = -(at + 1);
        at += 1 + n;
    }
    free(dist2);
    tables_ok = true;
}

/* the neighbour of best weighted fit at this scale (the first on ties) */
static int best_neighbour(const uint16_t *nb, const float *xval, const float *w, float scale, int8_t *L) {
    float best_d2 = FLT_MAX;
    int gi = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            const float q = (float)grid_byte(wgllm_iq3s_grid[nb[j]], i);
            const float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            gi = nb[j];
        }
    }
    for (int i = 0; i < 4; i++) L[i] = (int8_t)((grid_byte(wgllm_iq3s_grid[gi], i) - 1) / 2);
    return gi;
}

static int levels_index(const int8_t *L) {
    int u = 0;
    for (int i = 0; i < 4; i++) u |= L[i] << (3 * i);
    return u;
}

static void quantize_block(const float *xbl, wgllm_block_iq3_s *y) {
    const int kMaxQ = 8;
    float scales[QK_K / BS], weight[BS], xval[BS], waux[BS];
    int8_t L[BS], Laux[BS];
    bool on_grid[BS / 4], on_grid_aux[BS / 4];
    uint8_t block_signs[BS / 8];
    memset(y, 0, sizeof *y);
    float max_scale = 0;
    /* ggml advances its qs / signs pointers only past groups it quantized
     * (an all-zero group is skipped before), while qh is indexed by the
     * group: the same here, so that the bytes stay llama.cpp's */
    int qs_at = 0, signs_at = 0;
    for (int ib = 0; ib < QK_K / BS; ib++) {
        const float *xb = xbl + BS * ib;
        for (int i = 0; i < BS; i++) weight[i] = xb[i] * xb[i];
        for (int i = 0; i < BS; i++) waux[i] = sqrtf(weight[i]);
        for (int k = 0; k < BS / 8; k++) {
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                if (xb[8 * k + i] >= 0) xval[8 * k + i] = xb[8 * k + i];
                else {
                    xval[8 * k + i] = -xb[8 * k + i];
                    s |= (uint8_t)(1 << i);
                }
            }
            block_signs[k] = s;
        }
        float max = xval[0];
        for (int i = 1; i < BS; i++) max = max > xval[i] ? max : xval[i];
        memset(L, 0, BS);
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        float best = 0, scale = max / (2 * kMaxQ - 1);
        for (int k = 0; k < BS / 4; k++) on_grid[k] = false;
        for (int is = -9; is <= 9; is++) {
            const float id = (2 * kMaxQ - 1 + is * 0.2f) / max, this_scale = 1 / id;
            for (int k = 0; k < BS / 4; k++) {
                for (int i = 0; i < 4; i++) {
                    const int l = nearest_int(0.5f * (id * xval[4 * k + i] - 1));
                    Laux[4 * k + i] = (int8_t)(l < 0 ? 0 : l > kMaxQ - 1 ? kMaxQ - 1 : l);
                }
                const int u = levels_index(Laux + 4 * k);
                on_grid_aux[k] = kmap[u] >= 0;
                if (kmap[u] < 0) best_neighbour(neighbours - kmap[u] - 1, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < BS; i++) {
                const float w = weight[i], q = 2 * Laux[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                memcpy(L, Laux, BS);
                memcpy(on_grid, on_grid_aux, sizeof on_grid);
            }
        }
        int n_off = 0;
        for (int k = 0; k < BS / 4; k++) n_off += !on_grid[k];
        if (n_off > 0 && scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < BS / 4; k++) {
                int8_t l4[4];
                for (int i = 0; i < 4; i++) {
                    const int l = nearest_int(0.5f * (id * xval[4 * k + i] - 1));
                    l4[i] = (int8_t)(l < 0 ? 0 : l > kMaxQ - 1 ? kMaxQ - 1 : l);
                }
                const int u = levels_index(l4);
                int gi = kmap[u];
                if (gi < 0) gi = best_neighbour(neighbours - kmap[u] - 1, xval + 4 * k, waux + 4 * k, scale, L + 4 * k);
                for (int i = 0; i < 4; i++) L[4 * k + i] = (int8_t)((grid_byte(wgllm_iq3s_grid[gi], i) - 1) / 2);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < BS; i++) {
                const float w = weight[i], q = 2 * L[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) { /* as ggml: never expected, but the scale is stored unsigned */
            scale = -scale;
            for (int k = 0; k < BS / 8; k++) block_signs[k] = (uint8_t)~block_signs[k];
        }
        for (int k = 0; k < BS / 4; k++) {
            const int gi = kmap[levels_index(L + 4 * k)]; /* on the grid by construction */
            y->qs[qs_at + k] = (uint8_t)(gi & 255);
            y->qh[(ib * (BS / 4) + k) / 8] |= (uint8_t)((gi >> 8) << ((ib * (BS / 4) + k) % 8));
        }
        memcpy(y->signs + signs_at, block_signs, BS / 8);
        qs_at += BS / 4;
        signs_at += BS / 8;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = wgllm_fp32_to_fp16(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / BS; ib += 2) {
        int l1 = nearest_int(0.5f * (id * scales[ib] - 1)), l2 = nearest_int(0.5f * (id * scales[ib + 1] - 1));
        l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
        l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
        y->scales[ib / 2] = (uint8_t)(l1 | (l2 << 4));
    }
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

void wgllm_iq3_s_from_float_ref(const float *x, void *vy, int64_t n) {
    pthread_once(&tables_once, tables_init);
    wgllm_block_iq3_s *y = vy;
    if (!tables_ok) { /* out of memory for the 20 KB table: zero blocks, as for all-zero input */
        memset(y, 0, sizeof *y * (size_t)(n / QK_K));
        return;
    }
    for (int64_t i = 0; i < n / QK_K; i++) quantize_block(x + QK_K * i, &y[i]);
}
