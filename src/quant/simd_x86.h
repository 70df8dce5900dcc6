/*
 * simd_x86.h - the horizontal sums every x86 kernel file ends its dot
 * products with (AVX2 registers; the AVX-512 files reduce to these too).
 * Static inline: each file compiles them with its own -m flags.
 */
#ifndef WGLLM_QUANT_SIMD_X86_H
#define WGLLM_QUANT_SIMD_X86_H

#include <immintrin.h>

/* The sum of eight int32 lanes. */
static inline int hsum_i32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The sum of eight float lanes, in the pairwise order llama.cpp's AVX2 kernels use. */
static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

#endif
