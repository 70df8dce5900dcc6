/*
 * iquants_avx2.c - AVX2 dots of the grid formats with Q8_K (the kernels of
 * iquants_x86.h with vpmaddubsw + vpmaddwd), bit-identical to iquants.c.
 */
#include "quant/iquants.h"

#if defined(__x86_64__)
#define IQ_VNNI 0
#define IQ_FN(name) name##_avx2
#include "quant/iquants_x86.h"

void wgllm_iquants_install_avx2(struct wgllm_type_traits *t) { install_avx2(t); }
#endif
