/*
 * quant.h - tensor element types: the GGUF/ggml block layouts, conversion to
 * and from f32, and the dot-product kernels the CPU backend multiplies with.
 *
 * Type ids are ggml's (they are what GGUF files store). A weight row of type
 * T is multiplied with an activation row converted to traits(T)->vec_dot_type
 * (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, F16 for F16, ...), exactly the
 * pairing llama.cpp uses, so that results agree with it to rounding.
 *
 * Kernels: a portable scalar reference for every format, plus SIMD versions
 * (AVX2/FMA, AVX-512/VNNI on x86-64; NEON on arm64) chosen at run time by
 * wgllm_quant_init(). Tests compare every SIMD kernel with the reference.
 */
#ifndef WGLLM_QUANT_H
#define WGLLM_QUANT_H

#include "base/base.h"

enum wgllm_type {
    WGLLM_TYPE_F32 = 0,
    WGLLM_TYPE_F16 = 1,
    WGLLM_TYPE_Q4_0 = 2,
    WGLLM_TYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2, Q4_3 */
    WGLLM_TYPE_Q5_0 = 6,
    WGLLM_TYPE_Q5_1 = 7,
    WGLLM_TYPE_Q8_0 = 8,
    WGLLM_TYPE_Q8_1 = 9,
    WGLLM_TYPE_Q2_K = 10,
    WGLLM_TYPE_Q3_K = 11,
    WGLLM_TYPE_Q4_K = 12,
    WGLLM_TYPE_Q5_K = 13,
    WGLLM_TYPE_Q6_K = 14,
    WGLLM_TYPE_Q8_K = 15,
    WGLLM_TYPE_IQ2_XXS = 16,
    WGLLM_TYPE_IQ2_XS = 17,
    WGLLM_TYPE_IQ3_XXS = 18,
    WGLLM_TYPE_IQ1_S = 19,
    WGLLM_TYPE_IQ4_NL = 20,
    WGLLM_TYPE_IQ3_S = 21,
    WGLLM_TYPE_IQ2_S = 22,
    WGLLM_TYPE_IQ4_XS = 23,
    WGLLM_TYPE_I8 = 24,
    WGLLM_TYPE_I16 = 25,
    WGLLM_TYPE_I32 = 26,
    WGLLM_TYPE_I64 = 27,
    WGLLM_TYPE_F64 = 28,
    WGLLM_TYPE_IQ1_M = 29,
    WGLLM_TYPE_BF16 = 30,
    /* 31-33: removed Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 */
    WGLLM_TYPE_TQ1_0 = 34,
    WGLLM_TYPE_TQ2_0 = 35,
    /* 36-38: removed IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 */
    WGLLM_TYPE_MXFP4 = 39,
    WGLLM_TYPE_NVFP4 = 40,
    WGLLM_TYPE_Q1_0 = 41,
    WGLLM_TYPE_COUNT = 42
};

/* Block layouts (ggml's, byte for byte). */
#define WGLLM_QK4_0 32
typedef struct { wgllm_fp16 d; uint8_t qs[WGLLM_QK4_0 / 2]; } wgllm_block_q4_0;
#define WGLLM_QK4_1 32
typedef struct { wgllm_fp16 d, m; uint8_t qs[WGLLM_QK4_1 / 2]; } wgllm_block_q4_1;
#define WGLLM_QK5_0 32
typedef struct { wgllm_fp16 d; uint8_t qh[4]; uint8_t qs[WGLLM_QK5_0 / 2]; } wgllm_block_q5_0;
#define WGLLM_QK5_1 32
typedef struct { wgllm_fp16 d, m; uint8_t qh[4]; uint8_t qs[WGLLM_QK5_1 / 2]; } wgllm_block_q5_1;
#define WGLLM_QK8_0 32
typedef struct { wgllm_fp16 d; int8_t qs[WGLLM_QK8_0]; } wgllm_block_q8_0;
#define WGLLM_QK8_1 32
/* s = d * sum(qs), kept so that Q4_1/Q5_1 dots can add the min term cheaply. */
typedef struct { wgllm_fp16 d, s; int8_t qs[WGLLM_QK8_1]; } wgllm_block_q8_1;

_Static_assert(sizeof(wgllm_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(wgllm_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(wgllm_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(wgllm_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(wgllm_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(wgllm_block_q8_1) == 36, "q8_1 layout");

/* y[0..n) = dequantized x. n is a multiple of the block size. */
typedef void (*wgllm_to_float_fn)(const void *x, float *y, int64_t n);
/* y = quantized x[0..n). n is a multiple of the block size. */
typedef void (*wgllm_from_float_fn)(const float *x, void *y, int64_t n);
/* *s = dot(x, y) over n elements: x a row of the weight type, y a row of
 * its vec_dot_type. n is a multiple of the block size. */
typedef void (*wgllm_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* s[r] = dot(row r of x, y) for r in [0, nrows): the rows of x lie x_stride
 * bytes apart. Kernels that do several rows at once load each activation
 * block once for all of them, which is what makes a mat-vec fast. */
typedef void (*wgllm_vec_dot_nr_fn)(int64_t n, float *s, const void *x, size_t x_stride,
                                    const void *y, int nrows);

/* s[t * s_stride] = dot(x, token row t of y) for t in [0, n_tokens), with
 * n_tokens <= WGLLM_VEC_DOT_MT_MAX: the token rows (vec_dot_type) lie
 * y_stride bytes apart. Each result is bit-identical to vec_dot(n, ., x,
 * row t) of the same table; the kernel unpacks each weight block once for
 * all tokens, which is what makes prompt processing fast. */
#define WGLLM_VEC_DOT_MT_MAX 8
typedef void (*wgllm_vec_dot_mt_fn)(int64_t n, float *s, size_t s_stride, const void *x, const void *y,
                                    size_t y_stride, int n_tokens);

struct wgllm_type_traits {
    const char *name;          /* "q4_0"; NULL for an id that names no type */
    int64_t blck_size;         /* elements per block */
    size_t type_size;          /* bytes per block */
    bool is_quantized;
    wgllm_to_float_fn to_float;        /* NULL when wgllm cannot read it yet */
    wgllm_from_float_fn from_float_ref; /* reference quantizer (files, tests); NULL if none */
    wgllm_from_float_fn from_float;     /* fastest quantizer (activations); NULL if none */
    enum wgllm_type vec_dot_type;
    wgllm_vec_dot_fn vec_dot;           /* NULL when not a weight type wgllm multiplies */
    wgllm_vec_dot_nr_fn vec_dot_nr;     /* several rows at once; non-NULL whenever vec_dot is */
    wgllm_vec_dot_mt_fn vec_dot_mt;     /* several tokens at once; NULL where no kernel has one */
};

/* A vec_dot_nr from a vec_dot: nr rows of xs bytes each against one y (the
 * formats without a multi-row kernel of their own). */
#define WGLLM_VEC_DOT_NR(name, dot)                                                              \
    static void name(int64_t n, float *s, const void *x, size_t xs, const void *y, int nr) {     \
        for (int r = 0; r < nr; r++) dot(n, s + r, (const char *)x + (size_t)r * xs, y);          \
    }

/* One format's reference entry: its quantizer is also its fastest one until a
 * SIMD level installs another. */
static inline void wgllm_type_set(struct wgllm_type_traits *t, enum wgllm_type type, wgllm_to_float_fn tof,
                                  wgllm_from_float_fn fref, enum wgllm_type vdt, wgllm_vec_dot_fn vd,
                                  wgllm_vec_dot_nr_fn nr) {
    t[type].to_float = tof;
    t[type].from_float_ref = fref;
    t[type].from_float = fref;
    t[type].vec_dot_type = vdt;
    t[type].vec_dot = vd;
    t[type].vec_dot_nr = nr;
}

/* Detects the CPU and installs the fastest kernels. Idempotent, thread-safe. */
void wgllm_quant_init(void);
/* Traits of a type id; for ids outside the enum, a static entry with name NULL. */
const struct wgllm_type_traits *wgllm_type_traits(uint32_t type);
/* The scalar reference traits (tests compare the dispatched kernels against these). */
const struct wgllm_type_traits *wgllm_type_traits_ref(uint32_t type);
/* Name for messages ("q4_0"), or "unknown(N)". Thread-unsafe for unknown ids. */
const char *wgllm_type_name(uint32_t type);
/* Type id from its name ("q4_0", "Q4_0", "f16"); -1 when unknown. */
int wgllm_type_from_name(const char *name);
/* Bytes of a row of n elements (n a multiple of the block size). */
size_t wgllm_row_size(uint32_t type, int64_t n);
/* True when the type can be a weight of a model wgllm runs on the CPU. */
bool wgllm_type_supported(uint32_t type);

/* fp16 rows (F16C/AVX-512 when present). */
void wgllm_fp16_to_fp32_row(const wgllm_fp16 *x, float *y, int64_t n);
void wgllm_fp32_to_fp16_row(const float *x, wgllm_fp16 *y, int64_t n);

/* ---- internal: installed by wgllm_quant_init, defined in quant_<isa>.c ---- */
/* K-quants and IQ4_NL/IQ4_XS (kquants.c, kquants_avx2.c). */
void wgllm_kquants_install_ref(struct wgllm_type_traits *t);
#if defined(__x86_64__)
void wgllm_kquants_install_avx2(struct wgllm_type_traits *t);
#endif
#if defined(__x86_64__)
/* Replace entries of t (indexed by type id) with the kernels of that ISA. */
void wgllm_quant_install_avx2(struct wgllm_type_traits *t);
void wgllm_quant_install_avx512(struct wgllm_type_traits *t, bool has_bf16);
void wgllm_fp16_to_fp32_row_avx2(const wgllm_fp16 *x, float *y, int64_t n);
void wgllm_fp32_to_fp16_row_avx2(const float *x, wgllm_fp16 *y, int64_t n);
void wgllm_fp16_to_fp32_row_avx512(const wgllm_fp16 *x, float *y, int64_t n);
void wgllm_fp32_to_fp16_row_avx512(const float *x, wgllm_fp16 *y, int64_t n);
#endif
#if defined(__aarch64__)
/* NEON kernels; the integer dots use SDOT when has_dotprod (quant_neon.c). */
void wgllm_quant_install_neon(struct wgllm_type_traits *t, bool has_dotprod);
void wgllm_fp16_to_fp32_row_neon(const wgllm_fp16 *x, float *y, int64_t n);
void wgllm_fp32_to_fp16_row_neon(const float *x, wgllm_fp16 *y, int64_t n);
#endif

#if defined(__wasm_simd128__)
/* WebAssembly SIMD128 kernels, bit-identical to the reference (quant_wasm.c). */
void wgllm_quant_install_wasm(struct wgllm_type_traits *t);
#endif

#endif
