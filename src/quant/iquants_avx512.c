/*
 * iquants_avx512.c - AVX-512 VNNI dots of the grid formats with Q8_K (the
 * kernels of iquants_x86.h with vpdpbusd on 256-bit registers: one
 * instruction for the u8 x s8 sums of four), bit-identical to iquants.c.
 */
#include "quant/iquants.h"

#if defined(__x86_64__)
#define IQ_VNNI 1
#define IQ_FN(name) name##_avx512
#include "quant/iquants_x86.h"

void wgllm_iquants_install_avx512(struct wgllm_type_traits *t) { install_avx512(t); }
#endif
