/*
 * repack_relaxed.h - the call between the core (repack_wasm.c) and the
 * relaxed-SIMD kernel module (repack_relaxed.c, built by another compiler
 * into a module of its own: web/relaxed.mjs). Freestanding, as that module
 * is: one struct of 32-bit addresses and counts in the shared memory.
 */
#ifndef WGLLM_REPACK_RELAXED_H
#define WGLLM_REPACK_RELAXED_H

#include <stdint.h>

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
    uint32_t corr;       /* Q4_0: nt x nb int32, -8 x the sum of a block's activations (the nibbles' offset);
                          * Q4_K: nt x nb x 8 int16, the sums of each 32-element sub-block's activations */
    uint32_t acc;        /* scratch of 64 floats, 16-byte aligned */
    uint32_t y;          /* token t's np x 16 floats at byte y + 4 t ldy */
    uint32_t ldy;        /* floats from one token's outputs to the next's */
    uint32_t accumulate; /* nonzero: add to y */
};

#endif
