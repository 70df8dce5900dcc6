/*
 * vexp.c - the scalar level of vexp.h and its dispatch (the vector levels
 * are in quant_avx2.c and quant_avx512.c).
 */
#include "quant/vexp.h"
#include "base/base.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>

/* 2^(i/32) correctly rounded, with i << 47 taken off so that adding k << 47
 * for k = 32 q + i gives 2^(k/32) (glibc's __exp2f_data.tab) */
const uint64_t wgllm_vexp_tab[32] = {
    0x3ff0000000000000ULL, 0x3fefd9b0d3158574ULL, 0x3fefb5586cf9890fULL, 0x3fef9301d0125b51ULL,
    0x3fef72b83c7d517bULL, 0x3fef54873168b9aaULL, 0x3fef387a6e756238ULL, 0x3fef1e9df51fdee1ULL,
    0x3fef06fe0a31b715ULL, 0x3feef1a7373aa9cbULL, 0x3feedea64c123422ULL, 0x3feece086061892dULL,
    0x3feebfdad5362a27ULL, 0x3feeb42b569d4f82ULL, 0x3feeab07dd485429ULL, 0x3feea47eb03a5585ULL,
    0x3feea09e667f3bcdULL, 0x3fee9f75e8ec5f74ULL, 0x3feea11473eb0187ULL, 0x3feea589994cce13ULL,
    0x3feeace5422aa0dbULL, 0x3feeb737b0cdc5e5ULL, 0x3feec49182a3f090ULL, 0x3feed503b23e255dULL,
    0x3feee89f995ad3adULL, 0x3feeff76f2fb5e47ULL, 0x3fef199bdd85529cULL, 0x3fef3720dcef9069ULL,
    0x3fef5818dcfba487ULL, 0x3fef7c97337b9b5fULL, 0x3fefa4afa2a490daULL, 0x3fefd0765b6e4540ULL,
};

double wgllm_vexp_finish(double lane[WGLLM_VEXP_LANES], const float *y, int64_t i0, int64_t n) {
    for (int64_t i = i0; i < n; i++) lane[(i - i0) % WGLLM_VEXP_LANES] += (double)y[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double wgllm_vec_exp_sum_ref(const float *x, float *y, int64_t n, float m) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i] - m);
    double lane[WGLLM_VEXP_LANES] = {0};
    return wgllm_vexp_finish(lane, y, 0, n);
}

static double (*exp_sum_fn)(const float *, float *, int64_t, float);
static pthread_once_t exp_once = PTHREAD_ONCE_INIT;

static void exp_init(void) {
    exp_sum_fn = wgllm_vec_exp_sum_ref;
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
    if (caps->avx2 && caps->fma && caps->f16c) {
        exp_sum_fn = wgllm_vec_exp_sum_avx2;
        if (caps->avx512f && caps->avx512bw && caps->avx512vl && caps->avx512vnni) exp_sum_fn = wgllm_vec_exp_sum_avx512;
    }
#endif
}

double wgllm_vec_exp_sum(const float *x, float *y, int64_t n, float m) {
    pthread_once(&exp_once, exp_init);
    return exp_sum_fn(x, y, n, m);
}
