/*
 * vexp.h - expf over a row and the sum of the results, for the softmax of
 * CPU attention: one definition of both that every kernel level computes
 * to the same bits.
 *
 * The exponential is libm's expf: the scalar level calls it, the vector
 * levels evaluate the algorithm glibc's expf is built on (ARM's optimized
 * routines: x * 32 / ln 2 = k + r, 2^(k/32) from a 32-entry table, a cubic
 * for 2^(r/32), all in double, with the multiply-adds fused as glibc's FMA
 * variant fuses them), which gives its bits on every float of the softmax
 * range (test_quant checks this at each level). The sum is of the float
 * results converted to double, in eight lanes (lane j: elements j, j + 8,
 * ... in order), then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)):
 * an order a vector adds in without a chain of dependent adds.
 */
#ifndef WGLLM_QUANT_VEXP_H
#define WGLLM_QUANT_VEXP_H

#include <stdint.h>

/* y[i] = expf(x[i] - m) for i < n (y may be x); returns their sum in the
 * order above. */
double wgllm_vec_exp_sum(const float *x, float *y, int64_t n, float m);
/* The scalar level's (tests compare the dispatched one against it). */
double wgllm_vec_exp_sum_ref(const float *x, float *y, int64_t n, float m);

/* ---- internal: the vector levels and their shared constants ---- */
#define WGLLM_VEXP_LANES 8
extern const uint64_t wgllm_vexp_tab[32]; /* bits of 2^(i/32), less i << 47 */
#define WGLLM_VEXP_INV_LN2_32 (0x1.71547652b82fep+0 * 32)
#define WGLLM_VEXP_SHIFT 0x1.8p+52
#define WGLLM_VEXP_C0 (0x1.c6af84b912394p-5 / 32 / 32 / 32)
#define WGLLM_VEXP_C1 (0x1.ebfce50fac4f3p-3 / 32 / 32)
#define WGLLM_VEXP_C2 (0x1.62e42ff0c52d6p-1 / 32)
#define WGLLM_VEXP_MIN (-0x1.9fe368p6f) /* below: 0 (the result underflows) */
/* Adds y[i0 .. n) to the lanes (lane (i - i0) % 8 for i0 a multiple of 8) and folds them. */
double wgllm_vexp_finish(double lane[WGLLM_VEXP_LANES], const float *y, int64_t i0, int64_t n);
#if defined(__x86_64__)
double wgllm_vec_exp_sum_avx2(const float *x, float *y, int64_t n, float m);
double wgllm_vec_exp_sum_avx512(const float *x, float *y, int64_t n, float m);
#endif

#endif
