/*
 * repack_relaxed.h - the call between the core (repack_wasm.c) and the
 * relaxed-SIMD kernel module (repack_relaxed.c, built by another compiler
 * into a module of its own: web/relaxed.mjs). Freestanding, as that module
 * is: one struct of 32-bit addresses and counts in the shared memory.
 */
#ifndef WGLLM_REPACK_RELAXED_H
#define WGLLM_REPACK_RELAXED_H

#include <stdint.h>

/* What the module reads of the layouts (repack.h, quant.h, kquants.h),
 * restated here because the module sees no other header; repack_wasm.c
 * checks each against its source. */
#define WGLLM_RELAXED_ROWS 16            /* rows per panel */
#define WGLLM_RELAXED_Q4_0_QUANTS 256    /* Q4_0: quant bytes per block of a panel (after 32 bytes of scales per block) */
#define WGLLM_RELAXED_Q8_0_BLOCK 34      /* wgllm_block_q8_0: fp16 d, 32 int8 */
#define WGLLM_RELAXED_Q4_K_RECORD 2368   /* Q4_K: bytes per super-block of a panel */
#define WGLLM_RELAXED_Q4_K_SCALES 2048   /* ... the 16 rows' scales per sub-block, after the quants */
#define WGLLM_RELAXED_Q4_K_MINS 2176     /* ... their mins per sub-block pair */
#define WGLLM_RELAXED_Q4_K_D 2304        /* ... their fp16 d */
#define WGLLM_RELAXED_Q4_K_DMIN 2336     /* ... their fp16 dmin */
#define WGLLM_RELAXED_Q8_K_BLOCK 292     /* wgllm_block_q8_K: float d, 256 int8, 16 int16 bsums */

/* nt tokens (1..4) against np 16-row panels of the interleaved layout, Q4_0
 * (wgllm_relaxed_q4_0) or Q4_K (wgllm_relaxed_q4_K). */
struct wgllm_relaxed_args {
    uint32_t w;          /* the first panel */
    uint32_t panel;      /* bytes from one panel to the next */
    uint32_t sb;         /* Q4_0: bytes of scales at the start of a panel */
    uint32_t nb;         /* blocks (Q4_0: 32 elements; Q4_K: 256) in a row */
    uint32_t np;         /* panels */
    uint32_t nt;         /* tokens, 1..4 */
    uint32_t x;          /* the first token's nb activation blocks (Q4_0: wgllm_block_q8_0; Q4_K: wgllm_block_q8_K) */
    uint32_t x_stride;   /* bytes from one token's blocks to the next's */
    uint32_t dy;         /* Q4_0: nt x nb floats, the tokens' block scales */
    uint32_t sums;       /* the activations' sums, laid out by the caller: Q4_0: nt x nb int32, -8 x a
                          * block's sum (the nibbles' offset); Q4_K: nt x nb x 8 int16, each 32-element
                          * sub-block's sum */
    uint32_t acc;        /* scratch of 64 floats, 16-byte aligned */
    uint32_t y;          /* token t's np x 16 floats at byte y + 4 t ldy */
    uint32_t ldy;        /* floats from one token's outputs to the next's */
    uint32_t accumulate; /* nonzero: add to y */
};

#endif
