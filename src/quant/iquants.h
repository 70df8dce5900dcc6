/*
 * iquants.h - ggml's grid ("I-quant") weight formats IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: block layouts, byte for byte as ggml
 * stores them in GGUF files, the lookup tables that give their codes a
 * meaning (iquants_tables.c), and the install functions that put their
 * kernels into the traits tables of quant.c.
 *
 * Every format is a super-block of 256 elements read as 32 groups of 8 (IQ3:
 * 64 groups of 4) whose magnitudes are one entry of a fixed grid, with a
 * sign per element (IQ2/IQ3) or one shared offset of +-1/8 per group (IQ1),
 * scaled by an odd integer per 16 or 32 elements times an fp16 per block.
 * Pairing (as llama.cpp's ggml-cpu type traits): all seven dot with Q8_K.
 *
 * The dots reduce each super-block to one exact integer sum (grid values
 * times activations times the integer sub-block scales), then scale it in
 * float as ggml's generic kernels do; the SIMD kernels compute the same
 * integers, so every level is bit-identical to the reference.
 */
#ifndef WGLLM_IQUANTS_H
#define WGLLM_IQUANTS_H

#include "quant/kquants.h"

/* 8 groups of 32: qs[4 ib .. 4 ib + 3] as two u32, the first holding the four
 * 8-bit grid indices, the second four 7-bit sign indices (bits 7l..7l+6,
 * into ksigns_iq2xs) and the 4-bit scale s in bits 28..31: (2 s + 1) / 8. */
typedef struct {
    wgllm_fp16 d;
    uint16_t qs[WGLLM_QK_K / 8];
} wgllm_block_iq2_xxs;
/* qs[4 ib + l]: 9-bit grid index | 7-bit sign index << 9; scales[ib]: two
 * 4-bit scales, the low one for elements 0..15 of group ib. */
typedef struct {
    wgllm_fp16 d;
    uint16_t qs[WGLLM_QK_K / 8];
    uint8_t scales[WGLLM_QK_K / 32];
} wgllm_block_iq2_xs;
/* qs[0..31]: low 8 bits of the 10-bit grid indices, qs[32..63]: one sign
 * byte per 8 elements; qh[ib]: bits 2l..2l+1 the high bits of index 4 ib + l;
 * scales as IQ2_XS. */
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[WGLLM_QK_K / 4];
    uint8_t qh[WGLLM_QK_K / 32];
    uint8_t scales[WGLLM_QK_K / 32];
} wgllm_block_iq2_s;
/* qs[0..63]: 8-bit indices of 4-element grid entries; qs[64..95]: per group
 * of 32 a u32 of four 7-bit sign indices and the 4-bit scale (2 s + 1) / 4. */
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[3 * WGLLM_QK_K / 8];
} wgllm_block_iq3_xxs;
/* qs: low 8 bits of 9-bit indices of 4-element grid entries, qh[ib] bit k the
 * high bit of index 8 ib + k, signs: one bit per element, scales: 4-bit
 * (2 s + 1) per group of 32, two per byte. */
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[WGLLM_QK_K / 4];
    uint8_t qh[WGLLM_QK_K / 32];
    uint8_t signs[WGLLM_QK_K / 8];
    uint8_t scales[WGLLM_QK_K / 64];
} wgllm_block_iq3_s;
/* qs[4 ib + l]: low 8 bits of the 11-bit index into iq1s_grid of group l of
 * 32-element group ib; qh[ib]: bits 3l..3l+2 the high bits, 12..14 the
 * scale s (2 s + 1), bit 15 the sign of the offset IQ1S_DELTA. */
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[WGLLM_QK_K / 8];
    uint16_t qh[WGLLM_QK_K / 32];
} wgllm_block_iq1_s;
/* qs as IQ1_S; qh[2 ib + h]: per group of 8 a nibble (3 high index bits, the
 * offset's sign in bit 3), low nibble first; scales: per group of 32 two
 * 3-bit scales (16 elements each) in a u16's bits 0..5 (two groups per u16),
 * the block's fp16 scale spread over the four top nibbles of the four u16. */
typedef struct {
    uint8_t qs[WGLLM_QK_K / 8];
    uint8_t qh[WGLLM_QK_K / 16];
    uint8_t scales[WGLLM_QK_K / 32];
} wgllm_block_iq1_m;

_Static_assert(sizeof(wgllm_block_iq2_xxs) == 66, "iq2_xxs layout");
_Static_assert(sizeof(wgllm_block_iq2_xs) == 74, "iq2_xs layout");
_Static_assert(sizeof(wgllm_block_iq2_s) == 82, "iq2_s layout");
_Static_assert(sizeof(wgllm_block_iq3_xxs) == 98, "iq3_xxs layout");
_Static_assert(sizeof(wgllm_block_iq3_s) == 110, "iq3_s layout");
_Static_assert(sizeof(wgllm_block_iq1_s) == 50, "iq1_s layout");
_Static_assert(sizeof(wgllm_block_iq1_m) == 56, "iq1_m layout");

/* The offset IQ1_S and IQ1_M add to every grid value, +- this (ggml's
 * IQ1S_DELTA / IQ1M_DELTA, both 1/8). */
#define WGLLM_IQ1_DELTA 0.125f

/* ggml-common.h's tables (iquants_tables.c). The IQ2 grids hold 8 bytes per
 * entry (magnitudes 8, 25, 43), the IQ3 grids 4 (odd magnitudes), iq1s_grid
 * 8 int8 bytes of -1, 0, 1. ksigns_iq2xs[i] is i with bit 7 set to the
 * parity of i (the eighth sign of an even number of minus signs);
 * kmask_iq2xs[j] = 1 << j. */
extern const uint8_t wgllm_kmask_iq2xs[8];
extern const uint8_t wgllm_ksigns_iq2xs[128];
extern const uint64_t wgllm_iq2xxs_grid[256];
extern const uint64_t wgllm_iq2xs_grid[512];
extern const uint64_t wgllm_iq2s_grid[1024];
extern const uint32_t wgllm_iq3xxs_grid[256];
extern const uint32_t wgllm_iq3s_grid[512];
extern const uint64_t wgllm_iq1s_grid[2048];

/* IQ1_M's block scale: the top nibbles of its four scale u16 (ggml's iq1m_scale_t). */
static inline wgllm_fp16 wgllm_iq1m_scale(const wgllm_block_iq1_m *b) {
    uint16_t sc[4];
    memcpy(sc, b->scales, sizeof sc);
    return (wgllm_fp16)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* One 32-element group ib (0..7) of a super-block, decoded: w[j] the signed
 * grid value of element 32 ib + j, ls[h] the odd integer scale of its
 * elements 16 h .. 16 h + 15, and for IQ1 dsign[k] (+-1) the sign of the
 * offset of elements 8 k .. 8 k + 7 (0 for the other formats). These are the
 * format's definition; the reference kernels below and the tests use them. */
struct wgllm_iq_group {
    int8_t w[32];
    int ls[2];
    int8_t dsign[4];
};
void wgllm_iq_decode_group(uint32_t type, const void *block, int ib, struct wgllm_iq_group *g);

/* Group ib of a block in the form the NEON and SIMD128 kernels load: the 32
 * grid magnitudes (IQ1: the int8 values) as four little-endian u64 (byte j
 * is element j; IQ3's two 4-byte entries per u64), neg bit j set where
 * element j is negated (0 for IQ1), the integer scales of the two halves,
 * and for IQ1 dneg bit k set where the offset of elements 8k..8k+7 is
 * negative. Static inline with a constant type, the switch folds away. */
struct wgllm_iq_raw {
    uint64_t g[4];
    uint32_t neg;
    int ls[2];
    unsigned dneg;
};
static inline uint64_t wgllm_iq_pair(uint32_t a, uint32_t b) { return (uint64_t)a | (uint64_t)b << 32; }
static inline uint32_t wgllm_iq_ksigns4(uint32_t aux) {
    return (uint32_t)wgllm_ksigns_iq2xs[aux & 127] | (uint32_t)wgllm_ksigns_iq2xs[(aux >> 7) & 127] << 8 |
           (uint32_t)wgllm_ksigns_iq2xs[(aux >> 14) & 127] << 16 | (uint32_t)wgllm_ksigns_iq2xs[(aux >> 21) & 127] << 24;
}
static inline void wgllm_iq_raw_group(uint32_t type, const void *block, int ib, struct wgllm_iq_raw *r) {
    uint32_t aux;
    r->dneg = 0;
    switch (type) {
    case WGLLM_TYPE_IQ2_XXS: {
        const uint8_t *q = (const uint8_t *)(((const wgllm_block_iq2_xxs *)block)->qs + 4 * ib);
        memcpy(&aux, q + 4, 4);
        for (int l = 0; l < 4; l++) r->g[l] = wgllm_iq2xxs_grid[q[l]];
        r->neg = wgllm_iq_ksigns4(aux);
        r->ls[0] = r->ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case WGLLM_TYPE_IQ2_XS: {
        const wgllm_block_iq2_xs *b = block;
        const uint16_t *q = b->qs + 4 * ib;
        r->neg = 0;
        for (int l = 0; l < 4; l++) {
            r->g[l] = wgllm_iq2xs_grid[q[l] & 511];
            r->neg |= (uint32_t)wgllm_ksigns_iq2xs[q[l] >> 9] << (8 * l);
        }
        r->ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        r->ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case WGLLM_TYPE_IQ2_S: {
        const wgllm_block_iq2_s *b = block;
        const uint8_t *qs = b->qs + 4 * ib;
        for (int l = 0; l < 4; l++) r->g[l] = wgllm_iq2s_grid[qs[l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300)];
        memcpy(&r->neg, b->qs + WGLLM_QK_K / 8 + 4 * ib, 4);
        r->ls[0] = 2 * (b->scales[ib] & 0xF) + 1;
        r->ls[1] = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case WGLLM_TYPE_IQ3_XXS: {
        const wgllm_block_iq3_xxs *b = block;
        const uint8_t *q = b->qs + 8 * ib;
        memcpy(&aux, b->qs + WGLLM_QK_K / 4 + 4 * ib, 4);
        for (int l = 0; l < 4; l++) r->g[l] = wgllm_iq_pair(wgllm_iq3xxs_grid[q[2 * l]], wgllm_iq3xxs_grid[q[2 * l + 1]]);
        r->neg = wgllm_iq_ksigns4(aux);
        r->ls[0] = r->ls[1] = 2 * (int)(aux >> 28) + 1;
        break;
    }
    case WGLLM_TYPE_IQ3_S: {
        const wgllm_block_iq3_s *b = block;
        const uint8_t *q = b->qs + 8 * ib;
        const unsigned h = b->qh[ib];
        for (int l = 0; l < 4; l++)
            r->g[l] = wgllm_iq_pair(wgllm_iq3s_grid[q[2 * l] | ((h << (8 - 2 * l)) & 256)],
                                    wgllm_iq3s_grid[q[2 * l + 1] | ((h << (7 - 2 * l)) & 256)]);
        memcpy(&r->neg, b->signs + 4 * ib, 4);
        r->ls[0] = r->ls[1] = 2 * (ib % 2 ? b->scales[ib / 2] >> 4 : b->scales[ib / 2] & 0xF) + 1;
        break;
    }
    case WGLLM_TYPE_IQ1_S: {
        const wgllm_block_iq1_s *b = block;
        const uint8_t *qs = b->qs + 4 * ib;
        const unsigned qh = b->qh[ib];
        for (int l = 0; l < 4; l++) r->g[l] = wgllm_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
        r->neg = 0;
        r->ls[0] = r->ls[1] = 2 * (int)((qh >> 12) & 7) + 1;
        r->dneg = qh & 0x8000 ? 0xF : 0;
        break;
    }
    default: { /* IQ1_M */
        const wgllm_block_iq1_m *b = block;
        const uint8_t *qs = b->qs + 4 * ib, *qh = b->qh + 2 * ib;
        for (int l = 0; l < 4; l++) {
            const unsigned h = l % 2 ? qh[l / 2] >> 4 : qh[l / 2] & 0xF;
            r->g[l] = wgllm_iq1s_grid[qs[l] | ((h & 7) << 8)];
            r->dneg |= (h >> 3) << l;
        }
        uint16_t sc;
        memcpy(&sc, b->scales + 2 * (ib / 2), 2);
        const unsigned s = (unsigned)sc >> (6 * (ib % 2));
        r->neg = 0;
        r->ls[0] = 2 * (int)(s & 7) + 1;
        r->ls[1] = 2 * (int)((s >> 3) & 7) + 1;
        break;
    }
    }
}

/* ggml's IQ3_S quantizer without an importance matrix (quantize_iq3_s with
 * NULL weights: what llama-quantize writes for IQ3_S without --imatrix),
 * byte for byte (iquants_quant.c); n a multiple of 256. */
void wgllm_iq3_s_from_float_ref(const float *x, void *y, int64_t n);

/* ---- internal: called by quant.c's init ---------------------------------
 * The scalar reference kernels (to_float, vec_dot_type, vec_dot, vec_dot_nr;
 * no quantizer) of the seven types into t. */
void wgllm_iquants_install_ref(struct wgllm_type_traits *t);
#if defined(__x86_64__)
/* The dots with AVX2 (iquants_avx2.c) and AVX-512 VNNI (iquants_avx512.c). */
void wgllm_iquants_install_avx2(struct wgllm_type_traits *t);
void wgllm_iquants_install_avx512(struct wgllm_type_traits *t);
#endif
#if defined(__aarch64__)
/* NEON dots (SDOT when has_dotprod), bit-identical to the reference (iquants_neon.c). */
void wgllm_iquants_install_neon(struct wgllm_type_traits *t, bool has_dotprod);
#endif
#if defined(__wasm_simd128__)
/* SIMD128 dots, bit-identical to the reference (iquants_wasm.c). */
void wgllm_iquants_install_wasm(struct wgllm_type_traits *t);
#endif

#endif
