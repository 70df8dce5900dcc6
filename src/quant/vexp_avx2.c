/*
 * vexp_avx2.c - vexp.h's exponential and sum with AVX2: four floats at a
 * time in double, the table gathered.
 */
#if defined(__x86_64__)
#include "quant/vexp.h"

#include <immintrin.h>
#include <math.h>

static inline __m128 vexp4(__m128 d) {
    const __m256d xd = _mm256_cvtps_pd(d), inv = _mm256_set1_pd(WGLLM_VEXP_INV_LN2_32);
    const __m256d shift = _mm256_set1_pd(WGLLM_VEXP_SHIFT);
    __m256d kd = _mm256_add_pd(_mm256_mul_pd(inv, xd), shift); /* k = round(x * 32 / ln 2) in its low bits */
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64((const long long *)wgllm_vexp_tab, idx, 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d zz = _mm256_fmadd_pd(_mm256_set1_pd(WGLLM_VEXP_C0), r, _mm256_set1_pd(WGLLM_VEXP_C1));
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(WGLLM_VEXP_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(zz, _mm256_mul_pd(r, r), y);
    __m128 e = _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
    /* glibc's special cases: below the range 0 (-inf too), above it +inf; NaN stays NaN */
    e = _mm_andnot_ps(_mm_cmplt_ps(d, _mm_set1_ps(WGLLM_VEXP_MIN)), e);
    return _mm_blendv_ps(e, _mm_set1_ps(INFINITY), _mm_cmpgt_ps(d, _mm_set1_ps(0x1.62e42ep6f)));
}

double wgllm_vec_exp_sum_avx2(const float *x, float *y, int64_t n, float m) {
    const __m128 mv = _mm_set1_ps(m);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd(); /* lanes 0-3, 4-7 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128 e0 = vexp4(_mm_sub_ps(_mm_loadu_ps(x + i), mv)), e1 = vexp4(_mm_sub_ps(_mm_loadu_ps(x + i + 4), mv));
        _mm_storeu_ps(y + i, e0);
        _mm_storeu_ps(y + i + 4, e1);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(e0));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(e1));
    }
    double lane[WGLLM_VEXP_LANES];
    _mm256_storeu_pd(lane, acc0);
    _mm256_storeu_pd(lane + 4, acc1);
    for (int64_t j = i; j < n; j++) y[j] = expf(x[j] - m);
    return wgllm_vexp_finish(lane, y, i, n);
}
#endif
