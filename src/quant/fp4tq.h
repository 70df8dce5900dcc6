/*
 * fp4tq.h - the microscaling FP4 format MXFP4 and the ternary formats
 * TQ1_0 / TQ2_0 (BitNet b1.58, TriLM): block layouts, byte for byte as ggml
 * stores them in GGUF files, and the install functions that put their
 * kernels into the traits tables of quant.c.
 *
 * Also NVFP4 (E2M1 codes as MXFP4's, 16-element sub-blocks with UE4M3
 * scales) and the 1-bit Q1_0 (a sign per weight, blocks of 128 scaled by the mean
 * magnitude). Pairing (as llama.cpp's ggml-cpu type traits): MXFP4 weights
 * dot with Q8_0 activations (both 32-element blocks), Q1_0 with Q8_0 (four
 * activation blocks per weight block), TQ1_0 / TQ2_0 with Q8_K.
 */
#ifndef WGLLM_FP4TQ_H
#define WGLLM_FP4TQ_H

#include "quant/kquants.h"

#include <math.h>

#define WGLLM_QK_MXFP4 32

/* e: a shared power-of-two scale (E8M0: 2^(e - 127)); qs: 4-bit E2M1 codes,
 * element j < 16 in the low nibble of qs[j], j + 16 in the high one. */
typedef struct {
    uint8_t e;
    uint8_t qs[WGLLM_QK_MXFP4 / 2];
} wgllm_block_mxfp4;
/* 256 trits: qs[0..31] hold 5 each (elements 32n + m in trit n of qs[m]),
 * qs[32..47] 5 each (160 + 16n + m), qh[4] 4 each (240 + 4n + j), every
 * byte a base-3 fixed-point fraction (trit 0 most significant); d = amax. */
typedef struct {
    uint8_t qs[(WGLLM_QK_K - 4 * WGLLM_QK_K / 64) / 5];
    uint8_t qh[WGLLM_QK_K / 64];
    wgllm_fp16 d;
} wgllm_block_tq1_0;
/* 256 values q - 1, q in {0, 1, 2}: element 128h + 32l + m is bits 2l..2l+1
 * of qs[32h + m]. */
typedef struct {
    uint8_t qs[WGLLM_QK_K / 4];
    wgllm_fp16 d;
} wgllm_block_tq2_0;

#define WGLLM_QK_NVFP4 64
/* four sub-blocks of 16 E2M1 codes, each with a UE4M3 scale d[s]; element
 * 16s + j < 16s + 8 in the low nibble of qs[8s + j], 16s + 8 + j in its high */
typedef struct {
    uint8_t d[WGLLM_QK_NVFP4 / 16];
    uint8_t qs[WGLLM_QK_NVFP4 / 2];
} wgllm_block_nvfp4;

/* A UE4M3 scale (4 exponent bits, bias 7, 3 mantissa bits; 0 and 0x7F read
 * as 0), halved as wgllm_e8m0_half is for the doubled E2M1 table: ggml's
 * ggml_ue4m3_to_fp32, exact (every value is a small integer times a power
 * of two). */
static inline float wgllm_ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 0xF, m = x & 7;
    const float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

#define WGLLM_QK1_0 128
/* bit j of qs[j / 8] set: element j is +d, else -d */
typedef struct {
    wgllm_fp16 d;
    uint8_t qs[WGLLM_QK1_0 / 8];
} wgllm_block_q1_0;

_Static_assert(sizeof(wgllm_block_mxfp4) == 17, "mxfp4 layout");
_Static_assert(sizeof(wgllm_block_q1_0) == 18, "q1_0 layout");
_Static_assert(sizeof(wgllm_block_nvfp4) == 36, "nvfp4 layout");
_Static_assert(sizeof(wgllm_block_tq1_0) == 54, "tq1_0 layout");
_Static_assert(sizeof(wgllm_block_tq2_0) == 66, "tq2_0 layout");

/* The E2M1 values, doubled so that they are integers (ggml's kvalues_mxfp4);
 * the block scale is halved to match (wgllm_e8m0_half). */
extern const int8_t wgllm_kvalues_mxfp4[16];

/* 2^(e - 128), i.e. half the E8M0 scale, bit-exactly as ggml computes it
 * (e = 0 and 1 are the subnormals 2^-128, 2^-127). */
static inline float wgllm_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- internal: called by quant.c's init ---------------------------------
 * The scalar reference kernels (to_float, from_float_ref, from_float,
 * vec_dot_type, vec_dot, vec_dot_nr) of the three types into t. */
void wgllm_fp4tq_install_ref(struct wgllm_type_traits *t);
#if defined(__x86_64__)
/* The dots with AVX2 (fp4tq_avx2.c) and AVX-512 VNNI (fp4tq_avx512.c). */
void wgllm_fp4tq_install_avx2(struct wgllm_type_traits *t);
void wgllm_fp4tq_install_avx512(struct wgllm_type_traits *t);
#endif
#if defined(__aarch64__)
/* NEON dots (SDOT when has_dotprod), bit-identical to the reference (fp4tq_neon.c). */
void wgllm_fp4tq_install_neon(struct wgllm_type_traits *t, bool has_dotprod);
#endif
#if defined(__wasm_simd128__)
/* SIMD128 dots, bit-identical to the reference (fp4tq_wasm.c). */
void wgllm_fp4tq_install_wasm(struct wgllm_type_traits *t);
#endif

#endif
