/*
 * kquants.h - ggml's super-block weight formats (K-quants Q2_K..Q6_K, the
 * Q8_K activation format) and the 4-bit non-linear formats IQ4_NL/IQ4_XS:
 * their block layouts, byte for byte as ggml stores them in GGUF files, and
 * the install functions that put their kernels into the traits tables of
 * quant.c.
 *
 * Pairing (as llama.cpp): Q2_K..Q6_K and IQ4_XS weights dot with Q8_K
 * activations; IQ4_NL (32-element blocks) dots with Q8_0.
 */
#ifndef WGLLM_KQUANTS_H
#define WGLLM_KQUANTS_H

#include "quant/quant.h"

#define WGLLM_QK_K 256
#define WGLLM_K_SCALE_SIZE 12
#define WGLLM_QK4_NL 32

/* 16 sub-blocks of 16: 4-bit scale | 4-bit min per sub-block, 2-bit quants. */
typedef struct {
    uint8_t scales[WGLLM_QK_K / 16];
    uint8_t qs[WGLLM_QK_K / 4];
    wgllm_fp16 d, dmin;
} wgllm_block_q2_K;
/* 16 sub-blocks of 16: 6-bit signed scales packed in 12 bytes, 3-bit quants
 * (2 low bits in qs, the high bit in hmask). */
typedef struct {
    uint8_t hmask[WGLLM_QK_K / 8];
    uint8_t qs[WGLLM_QK_K / 4];
    uint8_t scales[12];
    wgllm_fp16 d;
} wgllm_block_q3_K;
/* 8 sub-blocks of 32: 6-bit scale and min each, packed in 12 bytes. */
typedef struct {
    wgllm_fp16 d, dmin;
    uint8_t scales[WGLLM_K_SCALE_SIZE];
    uint8_t qs[WGLLM_QK_K / 2];
} wgllm_block_q4_K;
typedef struct {
    wgllm_fp16 d, dmin;
    uint8_t scales[WGLLM_K_SCALE_SIZE];
    uint8_t qh[WGLLM_QK_K / 8];
    uint8_t qs[WGLLM_QK_K / 2];
} wgllm_block_q5_K;
/* 16 sub-blocks of 16: int8 scales, 6-bit quants (4 low in ql, 2 high in qh). */
typedef struct {
    uint8_t ql[WGLLM_QK_K / 2];
    uint8_t qh[WGLLM_QK_K / 4];
    int8_t scales[WGLLM_QK_K / 16];
    wgllm_fp16 d;
} wgllm_block_q6_K;
/* Activations: float scale, int8 quants, and the sums of each 16 quants
 * (the K-quant dots use them for their min / offset terms). */
typedef struct {
    float d;
    int8_t qs[WGLLM_QK_K];
    int16_t bsums[WGLLM_QK_K / 16];
} wgllm_block_q8_K;
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[WGLLM_QK4_NL / 2];
} wgllm_block_iq4_nl;
/* 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in scales_h). */
typedef struct {
    wgllm_fp16 d;
    uint16_t scales_h;
    uint8_t scales_l[WGLLM_QK_K / 64];
    uint8_t qs[WGLLM_QK_K / 2];
} wgllm_block_iq4_xs;

_Static_assert(sizeof(wgllm_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(wgllm_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(wgllm_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(wgllm_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(wgllm_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(wgllm_block_q8_K) == 292, "q8_K layout");
_Static_assert(sizeof(wgllm_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(wgllm_block_iq4_xs) == 136, "iq4_xs layout");

/* The 16 values of IQ4_NL / IQ4_XS quants. */
extern const int8_t wgllm_kvalues_iq4nl[16];

/* Sub-block j (0..7) scale and min of a Q4_K/Q5_K block's packed scales. */
static inline void wgllm_kq_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Sub-block j (0..15) signed scale of a Q3_K block's packed scales. */
/* IQ4_XS sub-block ib's scale, in [-32, 31]. */
static inline int wgllm_kq_scale_iq4_xs(const wgllm_block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32;
}
/* Element e of a Q6_K block as stored, q + 32 in [0, 63]: e = 128*h + 32*g + l
 * takes the low nibble of ql[64h + l + 32*(g&1)] (high nibble for g >= 2) and
 * bits 2g of qh[32h + l]. */
static inline int wgllm_kq_q6_unsigned(const wgllm_block_q6_K *b, int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const uint8_t lo = b->ql[64 * h + l + 32 * (g & 1)];
    return (g >= 2 ? lo >> 4 : lo & 0xF) | (((b->qh[32 * h + l] >> (2 * g)) & 3) << 4);
}
static inline int wgllm_kq_scale_q3_K(int j, const uint8_t *s) {
    int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/* ---- internal: called by quant.c's init ---------------------------------
 * Fill the scalar reference kernels (to_float, from_float_ref, from_float,
 * vec_dot_type, vec_dot, vec_dot_nr) of the types above into the table t
 * (indexed by type id). */
void wgllm_kquants_install_ref(struct wgllm_type_traits *t);
#if defined(__x86_64__)
/* Replace the dots (and the Q8_K quantizer) with AVX2 versions. */
void wgllm_kquants_install_avx2(struct wgllm_type_traits *t);
#endif

#endif
