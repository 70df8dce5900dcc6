/*
 * vexp_avx512.c - vexp.h's exponential and sum with AVX-512: eight floats
 * at a time in double, the table looked up with two-register permutes.
 */
#if defined(__x86_64__)
#include "quant/vexp.h"

#include <immintrin.h>
#include <math.h>

static inline __m256 vexp8(__m256 d, const __m512i tab[4]) {
    const __m512d xd = _mm512_cvtps_pd(d), inv = _mm512_set1_pd(WGLLM_VEXP_INV_LN2_32);
    const __m512d shift = _mm512_set1_pd(WGLLM_VEXP_SHIFT);
    __m512d kd = _mm512_add_pd(_mm512_mul_pd(inv, xd), shift); /* k = round(x * 32 / ln 2) in its low bits */
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i lo = _mm512_permutex2var_epi64(tab[0], idx, tab[1]), hi = _mm512_permutex2var_epi64(tab[2], idx, tab[3]);
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    const __m512d zz = _mm512_fmadd_pd(_mm512_set1_pd(WGLLM_VEXP_C0), r, _mm512_set1_pd(WGLLM_VEXP_C1));
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(WGLLM_VEXP_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(zz, _mm512_mul_pd(r, r), y);
    __m256 e = _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
    /* glibc's special cases: below the range 0 (-inf too), above it +inf; NaN stays NaN */
    e = _mm256_mask_blend_ps(_mm256_cmp_ps_mask(d, _mm256_set1_ps(WGLLM_VEXP_MIN), _CMP_LT_OQ), e, _mm256_setzero_ps());
    return _mm256_mask_blend_ps(_mm256_cmp_ps_mask(d, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ), e,
                                _mm256_set1_ps(INFINITY));
}

double wgllm_vec_exp_sum_avx512(const float *x, float *y, int64_t n, float m) {
    __m512i tab[4];
    for (int j = 0; j < 4; j++) tab[j] = _mm512_loadu_si512((const void *)(wgllm_vexp_tab + 8 * j));
    const __m256 mv = _mm256_set1_ps(m);
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), tab);
        _mm256_storeu_ps(y + i, e);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(e));
    }
    double lane[WGLLM_VEXP_LANES];
    _mm512_storeu_pd(lane, acc);
    for (int64_t j = i; j < n; j++) y[j] = expf(x[j] - m);
    return wgllm_vexp_finish(lane, y, i, n);
}
#endif
