/*
 * repack_amx.c - AMX-INT8 mat-mat products over the interleaved layout
 * (repack.h) of every repacked format, for prompts (16 tokens or more; a
 * decode, and rows longer than MAX_NB blocks of the 32-element formats, go to
 * the AVX-512 kernel). The tile unit gives exact integer dots; AVX-512 scales
 * and adds them in float, block after block, as the reference does, so the
 * results are bit-identical to it.
 *
 * The 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): per tile of
 * 16 tokens, panel and block, one tdpbssd multiplies the tokens' 32
 * activations (the A tile, read in place from the Q8_0/Q8_1 rows) by the
 * block's 16 x 32 weights (the B tile). A panel's block is already a B tile
 * in AMX's VNNI order (4 consecutive quants of a row per 32-bit lane) except
 * for its values: it is rewritten into a 512-byte scratch as signed bytes
 * (Q8_0: q itself, not q + 128; the nibble formats: their value, offset and
 * table applied), so tdpbssd gives the exact dot with no -bias*sum(x)
 * correction to add afterwards.
 *
 * Q4_K and Q5_K: one tdpbssd per 32-element sub-block; a chunk's nibble
 * vectors, low or high nibbles taken (Q5_K: the fifth bit added), are the B
 * tile of one sub-block; the rows' 6-bit scales and the mins term are applied
 * in the epilogue, exactly (see scaled_sum).
 *
 * Q6_K and IQ4_XS: the signed sub-block scales go into the weights as exact
 * 16-bit products whose two bytes are two B tiles of K = 64, so a super-block
 * needs 2 C tiles, not one per sub-block (see panel_wide). Tried for Q4_K and
 * Q5_K too (with the mins as a third C tile, or by vpmaddwd): 5-10% slower
 * than their per-sub-block tiles, whose unpack is only a mask and a shift.
 *
 * Cost: per 16 x 16 x 32 step a tile load of A (16 rows, 32 bytes each, off
 * the cache lines), one of B, tdpbssd at K = 32 (the per-block scale forbids
 * a longer K) and a 1 KiB tile store take some 40-50 cycles of the tile unit,
 * and the float epilogue (16 x cvt, mul, fma) about as long on the vector
 * ports; they overlap only in part, so this measured 1.3-1.5x the AVX-512
 * kernel at 16 to 512 tokens (one Sapphire Rapids vCPU, Q4_0 and Q8_0), not
 * the 3-4x the multiply alone would allow. Q4_K: 1.4-1.6x the AVX-512
 * kernel at 64 tokens (its 6-bit scales applied as exact float fmas, not
 * vpmulld: 1.3x with vpmulld), +29% on a Q4_K_M model's 128-token prompt.
 * Q5_K 1.6x, Q6_K 2.1-2.3x, IQ4_XS 1.8x (one vCPU, 64 tokens).
 */
#include "quant/repack.h"

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TOK 16      /* tokens per tile (rows of the A and C tiles) */
#define MAX_NB 1024 /* blocks per row the per-tile scales below hold (ne0 <= 32768) */
#define ALWAYS_INLINE inline __attribute__((always_inline))
/* GCC's tileloadd and ldtilecfg asm statements declare no memory read, so
 * without this the stores of what they read could be moved past them or
 * dropped as dead. */
#define MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

int wgllm_repack_amx_mutant;

/* The 64-byte operand of ldtilecfg (palette 1). Tiles 0/1: C (int32, TOK x
 * 16), 2/3: A (TOK x 32 bytes), 4/5: B (8 x 64 bytes); two of each so that
 * consecutive blocks use different tiles and can overlap. Wide (Q6_K,
 * IQ4_XS: K = 64): A TOK x 64 bytes, B 16 x 64 bytes, and 6/7 two more B. */
struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void configure(int T, bool wide) {
    struct tile_config c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int i = 0; i < 2; i++) {
        c.rows[i] = (uint8_t)T, c.colsb[i] = 64;
        c.rows[2 + i] = (uint8_t)T, c.colsb[2 + i] = wide ? 64 : 32;
        c.rows[4 + i] = wide ? 16 : 8, c.colsb[4 + i] = 64;
        if (wide) c.rows[6 + i] = 16, c.colsb[6 + i] = 64;
    }
    MEMORY_BARRIER();
    _tile_loadconfig(&c);
}

/* Per token tile, each block's activation scale (and Q8_1's s) for the 16
 * tokens; zero for the rows past a short last tile, whose sums are dropped. */
struct tok_pre {
    float dx[MAX_NB][TOK];
    float sx[MAX_NB][TOK];
};

static void prepare(const char *x, size_t xs, int T, int64_t nb, bool min, void *pre_) {
    struct tok_pre *pre = pre_;
    for (int64_t b = 0; b < nb; b++)
        for (int t = 0; t < TOK; t++) {
            const char *xt = x + (size_t)t * xs;
            if (t >= T) {
                pre->dx[b][t] = 0.0f;
                if (min) pre->sx[b][t] = 0.0f;
            } else if (min) {
                pre->dx[b][t] = wgllm_fp16_lookup(((const wgllm_block_q8_1 *)xt)[b].d);
                pre->sx[b][t] = wgllm_fp16_lookup(((const wgllm_block_q8_1 *)xt)[b].s);
            } else {
                pre->dx[b][t] = wgllm_fp16_lookup(((const wgllm_block_q8_0 *)xt)[b].d);
            }
        }
}

enum { K_Q8_0, K_Q4_0, K_IQ4_NL, K_Q5_0, K_Q4_1, K_Q5_1 };

/* The value of each nibble (Q5: of its low 4 bits; the fifth adds 16). */
static __m512i nibble_table(int kind, int off) {
    int8_t t[16];
    for (int i = 0; i < 16; i++)
        t[i] = (int8_t)(kind == K_IQ4_NL ? wgllm_kvalues_iq4nl[i]
                        : kind == K_Q4_0 ? i - 8
                        : kind == K_Q5_0 ? i - 16
                                         : i) + (int8_t)off;
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* Block q of a panel as a B tile of signed values (dst: 8 x 64 bytes):
 * tile row r holds, in bytes 4j..4j+3, row j's elements 4r..4r+3, so the
 * nibble vector m gives rows m (low nibbles) and 4 + m (high). */
static ALWAYS_INLINE void unpack(const uint8_t *q, int kind, __m512i table, __m512i flip, int8_t *dst) {
    if (kind == K_Q8_0) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            _mm512_store_si512((void *)(dst + 64 * g), _mm512_xor_si512(_mm512_load_si512((const void *)(q + 64 * g)), flip));
        return;
    }
    const __m512i mask = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const bool five = kind == K_Q5_0 || kind == K_Q5_1;
    const __m512i hb = five ? _mm512_load_si512((const void *)(q + 256)) : mask;
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const __m512i v = _mm512_load_si512((const void *)(q + 64 * m));
        __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, mask));
        __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask));
        if (five) {
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(1 << m))), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hb, _mm512_set1_epi8((char)(16 << m))), hi, sixteen);
        }
        _mm512_store_si512((void *)(dst + 64 * m), lo);
        _mm512_store_si512((void *)(dst + 64 * (4 + m)), hi);
    }
}

/* acc[t] (rows of the panel, token t) += d_w*d_x * dot (then + m*s_x), as the reference adds a block. */
static ALWAYS_INLINE void add_block(const int32_t *c, const uint8_t *pd, const uint8_t *mins, int64_t b,
                                    const struct tok_pre *pre, __m512 *acc, bool min) {
    const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pd + b * 32)));
    const __m512 wm = min ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(mins + b * 32))) : ws;
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) {
        const __m512 d = _mm512_mul_ps(ws, _mm512_set1_ps(pre->dx[b][t]));
        acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + 16 * t))), acc[t]);
        if (min) acc[t] = _mm512_fmadd_ps(wm, _mm512_set1_ps(pre->sx[b][t]), acc[t]);
    }
}

/* Per-call state of the panel loop. */
struct amx_job {
    size_t sb, qb, bs, xoff; /* quants' offset in a panel, bytes per block; activation block size, qs offset */
    __m512i table, flip;
    bool swap; /* mutant: the two blocks of a pair added in the wrong order */
    bool plus_one; /* mutant (the 256-element formats): the weight values off by one */
    bool wide;     /* the tiles of panel_wide (configure) */
};

/* panel_FMT: a format's panel, its kernel `body` with `arg` (kind or variant) */
#define PANEL(fmt, body, arg)                                                                                 \
    static void panel_##fmt(const struct amx_job *job, const uint8_t *pd, int64_t nb, const char *x, size_t xs,  \
                            const void *pre, int T, float *y, int ldy, bool accumulate) {                        \
        body(job, pd, nb, x, xs, pre, T, y, ldy, accumulate, arg);                                              \
    }

/* y's T token rows (ldy apart) = or += the panel's sums acc[t]. */
static ALWAYS_INLINE void store_acc(const __m512 *acc, int T, float *y, int ldy, bool accumulate) {
    for (int t = 0; t < T; t++) {
        float *d = y + (size_t)t * ldy;
        _mm512_storeu_ps(d, accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), acc[t]) : acc[t]);
    }
}

/* Blocks b, b + 1 (x: block b's qs of the tile's first token; bt: their
 * two B tiles) on tiles 0/2/4 and 1/3/5: the exact dots into c[0], c[1]. */
static ALWAYS_INLINE void dots_pair(const char *x, size_t xs, size_t bs, const int8_t *bt, int32_t *c) {
    _tile_loadd(2, x, (long)xs);
    _tile_loadd(4, bt, 64);
    _tile_loadd(3, x + bs, (long)xs);
    _tile_loadd(5, bt + 512, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, c, 64);
    _tile_stored(1, c + TOK * 16, 64);
}

/* One panel (16 rows) times a tile of T tokens (x: its first token row's
 * first qs): y (+)= W . x. Blocks go in pairs, software-pipelined so that
 * the tile unit and the vector units overlap: while pair k's dots are added
 * up in float, pair k + 1's are multiplied and pair k + 2 unpacked (a B
 * tile read right after its stores, or a C tile right after its tile store,
 * would wait for them; the alternating buffers keep each a pair apart). */
static ALWAYS_INLINE void panel(const struct amx_job *job, const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                                const struct tok_pre *pre, int T, float *y, int ldy, bool accumulate, int kind) {
    const bool min = kind == K_Q4_1 || kind == K_Q5_1;
    const uint8_t *mins = pd + wgllm_repack_scale_bytes(nb * 32), *quants = pd + job->sb;
    const size_t qb = job->qb, bs = job->bs;
    _Alignas(64) int8_t bt[2][2 * 512];         /* pair k's B tiles in bt[k & 1] */
    _Alignas(64) int32_t c[2][2 * TOK * 16];    /* pair k's C tiles in c[k & 1] */
    /* a short tile stores T rows of C; the others, added to sums that are not
     * stored, are zeroed so that no uninitialized bytes are read */
    if (T < TOK) memset(c, 0, sizeof(c));
    __m512 acc[TOK];
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) acc[t] = _mm512_setzero_ps();
    const int64_t np = nb / 2;
    for (int64_t k = 0; k < np && k < 2; k++) {
        unpack(quants + (size_t)(2 * k) * qb, kind, job->table, job->flip, bt[k]);
        unpack(quants + (size_t)(2 * k + 1) * qb, kind, job->table, job->flip, bt[k] + 512);
    }
    MEMORY_BARRIER();
    if (np > 0) dots_pair(x, xs, bs, bt[0], c[0]);
    const int f = job->swap;
    for (int64_t k = 0; k < np; k++) {
        if (k + 1 < np) dots_pair(x + (size_t)(2 * k + 2) * bs, xs, bs, bt[(k + 1) & 1], c[(k + 1) & 1]);
        if (k + 2 < np) {
            unpack(quants + (size_t)(2 * k + 4) * qb, kind, job->table, job->flip, bt[k & 1]);
            unpack(quants + (size_t)(2 * k + 5) * qb, kind, job->table, job->flip, bt[k & 1] + 512);
        }
        MEMORY_BARRIER();
        const int32_t *ck = c[k & 1];
        add_block(ck + f * TOK * 16, pd, mins, 2 * k + f, pre, acc, min);
        add_block(ck + (1 - f) * TOK * 16, pd, mins, 2 * k + 1 - f, pre, acc, min);
    }
    if (nb & 1) { /* the last block of an odd count */
        const int64_t b = nb - 1;
        unpack(quants + (size_t)b * qb, kind, job->table, job->flip, bt[0]);
        MEMORY_BARRIER();
        _tile_loadd(2, x + (size_t)b * bs, (long)xs);
        _tile_loadd(4, bt[0], 64);
        _tile_zero(0);
        _tile_dpbssd(0, 2, 4);
        _tile_stored(0, c[0], 64);
        add_block(c[0], pd, mins, b, pre, acc, min);
    }
    store_acc(acc, T, y, ldy, accumulate);
}

/* ---- Q4_K and Q5_K ---------------------------------------------------------
 * Per super-block b of a panel and sub-block s, chunk c = s / 2's 8 nibble
 * vectors, low (s even) or high (s odd) nibbles taken (Q5_K: with the fifth
 * bit from the chunk's high-bit vectors), are a B tile of values 0..15
 * (0..31); the tokens' 32 activations of s, read in place from the Q8_K
 * rows, the A tile. The 8 C tiles of b (exact dots per sub-block) times the
 * rows' 6-bit scales are summed exactly (in float: see panel_q45_K), the
 * mins term comes from the activations' 32-element sums (vpmaddwd), then
 * two fused multiply-adds per super-block, as the reference and the
 * AVX-512 kernel do. */

/* Per token tile: each super-block's activation scale and its pairs of
 * 32-element sums (int16: sub-block 2k low, 2k + 1 high); zero past T. */
struct tok_pre_k {
    float dx[WGLLM_REPACK_MAX_SB][TOK];
    int32_t bsum2[WGLLM_REPACK_MAX_SB][4][TOK];
};

/* sums: the 32-element sums too (Q4_K, Q5_K's mins term). */
static void prepare_k(const char *x, size_t xs, int T, int64_t nb, bool sums, void *pre_) {
    struct tok_pre_k *pre = pre_;
    for (int t = 0; t < TOK; t++) {
        if (t >= T) {
            for (int64_t b = 0; b < nb; b++) {
                pre->dx[b][t] = 0.0f;
                for (int k = 0; k < 4; k++) pre->bsum2[b][k][t] = 0;
            }
            continue;
        }
        const wgllm_block_q8_K *xb = (const wgllm_block_q8_K *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            pre->dx[b][t] = xb[b].d;
            if (!sums) continue;
            const int16_t *bs = xb[b].bsums;
            for (int k = 0; k < 4; k++) pre->bsum2[b][k][t] = wgllm_repack_bsum2(bs, k);
        }
    }
}

/* Chunk c of record rec as two B tiles (dst: sub-block 2c's, then 2c + 1's);
 * Q5_K (five): high-bit vector m's bits 2c and 2c + 1 put at bit 4 of the
 * values; mutant: every value + 1. */
static ALWAYS_INLINE void unpack_k(const uint8_t *rec, int c, bool five, bool mutant, int8_t *dst) {
    const __m512i mask = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1), m10 = _mm512_set1_epi8(0x10);
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        const __m512i v = _mm512_load_si512((const void *)(rec + wgllm_repack_k45_low(five, c, m)));
        __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
        if (five) {
            /* bit i of each byte to bit 4: a 16-bit shift moves no other
             * byte's bit there once masked (shifts of at most 4) */
            const __m512i hb = _mm512_load_si512((const void *)(rec + wgllm_repack_k45_high(m)));
            const int i = 2 * c;
            const __m512i b0 = i <= 4 ? _mm512_slli_epi16(hb, (unsigned)(4 - i)) : _mm512_srli_epi16(hb, (unsigned)(i - 4));
            const __m512i b1 = i + 1 <= 4 ? _mm512_slli_epi16(hb, (unsigned)(3 - i)) : _mm512_srli_epi16(hb, (unsigned)(i - 3));
            lo = _mm512_ternarylogic_epi32(lo, b0, m10, 0xF8); /* lo | (b0 & m10) */
            hi = _mm512_ternarylogic_epi32(hi, b1, m10, 0xF8);
        }
        if (mutant) lo = _mm512_add_epi8(lo, one), hi = _mm512_add_epi8(hi, one);
        _mm512_store_si512((void *)(dst + 64 * m), lo);
        _mm512_store_si512((void *)(dst + 512 + 64 * m), hi);
    }
}

static ALWAYS_INLINE __m512i scales16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)p));
}

/* sum_s scale_s * dot_s for one token's 8 C rows (cb + 16 t, TOK * 16 apart)
 * as the float of the exact int32 sum, with no vpmulld (2 uops on one port):
 * partial sums that are integers below 2^24 are exact in float. Q4_K:
 * each half of 4 sub-blocks is at most 4 * 63 * 32*15*128 < 2^24, so exact,
 * and their one addition rounds as (float) of the exact sum does (halves
 * from +0, so a zero sum is +0 too). Q5_K (values to 31): pairs are exact
 * (2 * 63 * 32*31*128 < 2^24), added in int32, converted once. */
static ALWAYS_INLINE __m512 scaled_sum(const int32_t *cb, int t, const __m512 *fs, bool five) {
#define C_ROW(s) _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + (s) * TOK * 16 + 16 * t)))
    const __m512 zero = _mm512_setzero_ps();
    if (!five) {
        __m512 h0 = _mm512_fmadd_ps(C_ROW(0), fs[0], zero), h1 = _mm512_fmadd_ps(C_ROW(4), fs[4], zero);
#pragma GCC unroll 4
        for (int s = 1; s < 4; s++) h0 = _mm512_fmadd_ps(C_ROW(s), fs[s], h0), h1 = _mm512_fmadd_ps(C_ROW(4 + s), fs[4 + s], h1);
        return _mm512_add_ps(h0, h1);
    }
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        sum = _mm512_add_epi32(sum, _mm512_cvtps_epi32(_mm512_fmadd_ps(C_ROW(2 * p + 1), fs[2 * p + 1],
                                                                       _mm512_fmadd_ps(C_ROW(2 * p), fs[2 * p], zero))));
    return _mm512_cvtepi32_ps(sum);
#undef C_ROW
}

/* One Q4_K (five false) or Q5_K panel times a tile of T tokens (x: the
 * tile's first token row). Super-blocks software-pipelined as the pairs
 * above: while b's dots are scaled and added, token group g (4 tokens) at a
 * time, chunk g of b + 1 is multiplied and chunk g of b + 2 unpacked. */
static ALWAYS_INLINE void panel_q45_K(const struct amx_job *job, const uint8_t *pd, int64_t nb, const char *x,
                                      size_t xs, const void *pre_, int T, float *y, int ldy, bool accumulate,
                                      bool five) {
    const struct tok_pre_k *pre = pre_;
    const size_t REC = five ? WGLLM_REPACK_Q5_K_RECORD : WGLLM_REPACK_Q4_K_RECORD;
    const size_t QB = wgllm_repack_k45_quant_bytes(five ? WGLLM_TYPE_Q5_K : WGLLM_TYPE_Q4_K);
    const bool mutant = job->plus_one;
    _Alignas(64) int8_t bt[2][4 * 1024];       /* super-block b's 8 B tiles in bt[b & 1] */
    _Alignas(64) int32_t cc[2][8 * TOK * 16];  /* its 8 C tiles in cc[b & 1] */
    if (T < TOK) memset(cc, 0, sizeof(cc));
    const char *xq = x + offsetof(wgllm_block_q8_K, qs);
    const size_t xb = sizeof(wgllm_block_q8_K);
    __m512 acc[TOK];
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb && b < 2; b++)
        for (int c = 0; c < 4; c++) unpack_k(pd + (size_t)b * REC, c, five, mutant, bt[b] + 1024 * c);
    MEMORY_BARRIER();
    if (nb > 0)
        for (int c = 0; c < 4; c++) dots_pair(xq + 64 * c, xs, 32, bt[0] + 1024 * c, cc[0] + 2 * c * TOK * 16);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *sc = pd + (size_t)b * REC + QB;
        const int32_t *cb = cc[b & 1];
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + 256)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + 288)));
        __m512 fs[8]; /* the rows' 6-bit scales of each sub-block */
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) fs[s] = _mm512_cvtepi32_ps(scales16(sc + 16 * s));
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            if (b + 1 < nb)
                dots_pair(xq + (size_t)(b + 1) * xb + 64 * g, xs, 32, bt[(b + 1) & 1] + 1024 * g,
                          cc[(b + 1) & 1] + 2 * g * TOK * 16);
            if (b + 2 < nb) unpack_k(pd + (size_t)(b + 2) * REC, g, five, mutant, bt[b & 1] + 1024 * g);
            MEMORY_BARRIER();
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const int t = 4 * g + u;
                __m512i m32 = _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(sc + 128))),
                                                _mm512_set1_epi32(pre->bsum2[b][0][t]));
#pragma GCC unroll 4
                for (int k = 1; k < 4; k++)
                    m32 = _mm512_add_epi32(m32, _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(sc + 128 + 32 * k))),
                                                                  _mm512_set1_epi32(pre->bsum2[b][k][t])));
                const __m512 dx = _mm512_set1_ps(pre->dx[b][t]);
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), scaled_sum(cb, t, fs, five), acc[t]);
                acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(m32), acc[t]);
            }
        }
    }
    store_acc(acc, T, y, ldy, accumulate);
}

PANEL(q4_K, panel_q45_K, false)
PANEL(q5_K, panel_q45_K, true)

/* ---- Q6_K and IQ4_XS -------------------------------------------------------
 * The sub-block scales (int8) go into the weights. The stored unsigned byte
 * u (Q6_K's q + 32 in 0..63, IQ4_XS's table value + 128 in 1..241) times
 * its scale comes out of vpmaddubsw exact and unsaturated (at most 63 * 128
 * or 241 * 32); minus off * scale it is w = q * scale, |w| <= 4096, the
 * signed value times its scale. w's low byte (unsigned) and
 * high byte (signed) are two B tiles of K = 64 elements, so a super-block
 * takes 4 chunks x 2 tdp (tdpbsud, tdpbssd) into 2 C tiles, and the row's
 * integer sum_s scale_s * dot_s (the reference's, exact) is 256 * C_h + C_l:
 * one 2 KiB tile store and a shift, add and fused multiply-add per token,
 * where a tile per sub-block (16 of them for Q6_K) would need a store and a
 * multiply each. The cost is in the unpack (two vpmaddubsw per 64 weights). */

/* Per sub-block s of a record: the rows' scales placed for vpmaddubsw (even
 * bytes of each row's 4, odd bytes) and off * scale in each 16-bit lane. */
struct sub_scale {
    __m512i even, odd, off;
};

static ALWAYS_INLINE struct sub_scale sub_scale(const uint8_t *scales16, int log2_off) {
    /* lane L (128 bits) holds rows 4L..4L+3: bytes 4j+1, 4j+3 <- row j's scale */
    const __m512i idx = _mm512_set_epi8(15, -1, 15, -1, 14, -1, 14, -1, 13, -1, 13, -1, 12, -1, 12, -1,
                                        11, -1, 11, -1, 10, -1, 10, -1, 9, -1, 9, -1, 8, -1, 8, -1,
                                        7, -1, 7, -1, 6, -1, 6, -1, 5, -1, 5, -1, 4, -1, 4, -1,
                                        3, -1, 3, -1, 2, -1, 2, -1, 1, -1, 1, -1, 0, -1, 0, -1);
    const __m512i odd = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)scales16)), idx);
    return (struct sub_scale){.even = _mm512_srli_epi16(odd, 8), .odd = odd,
                              .off = _mm512_srai_epi16(odd, (unsigned)(8 - log2_off))};
}

/* One vector of 64 unsigned values u (row j's in bytes 4j..4j+3) times its
 * sub-block's scales: the low and high bytes of u * scale - off * scale. */
static ALWAYS_INLINE void scale_split(__m512i u, const struct sub_scale *s, int8_t *lo, int8_t *hi) {
    const __m512i pe = _mm512_sub_epi16(_mm512_maddubs_epi16(u, s->even), s->off);
    const __m512i po = _mm512_sub_epi16(_mm512_maddubs_epi16(u, s->odd), s->off);
    const __m512i low = _mm512_set1_epi16(0x00FF);
    _mm512_store_si512((void *)lo, _mm512_ternarylogic_epi32(pe, _mm512_slli_epi16(po, 8), low, 0xEC)); /* (pe & low) | po << 8 */
    _mm512_store_si512((void *)hi, _mm512_ternarylogic_epi32(po, _mm512_srli_epi16(pe, 8), low, 0xDC)); /* (po & ~low) | pe >> 8 */
}
/* Quarter q of record rec (Q6_K: vectors 8q..8q+7, whose low nibbles are
 * rows 8(q & 1).. of chunk q / 2 and high nibbles those of chunk 2 + q / 2;
 * IQ4_XS: sub-blocks 2q, 2q + 1, chunk q) into the B tiles dst (the 4
 * chunks' low bytes, then their high bytes, 1 KiB each). */
static ALWAYS_INLINE void unpack_q6_K(const uint8_t *rec, int q, bool mutant, int8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), one = _mm512_set1_epi8(1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int s = 2 * q + h; /* vectors 4s..4s+3: sub-blocks s (low nibbles) and 8 + s (high) */
        const struct sub_scale slo = sub_scale(rec + WGLLM_REPACK_Q6_K_SCALES + 16 * s, 5);
        const struct sub_scale shi = sub_scale(rec + WGLLM_REPACK_Q6_K_SCALES + 16 * (8 + s), 5);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const int v = 4 * s + i, chunk = v / 16, row = v % 16;
            const __m512i nib = _mm512_load_si512((const void *)(rec + wgllm_repack_q6_K_low(v)));
            const __m512i hb = _mm512_load_si512((const void *)(rec + wgllm_repack_q6_K_high(v & 15)));
            const __m512i hl = v < 16 ? _mm512_slli_epi16(hb, 4) : _mm512_slli_epi16(hb, 2);
            const __m512i hh = v < 16 ? hb : _mm512_srli_epi16(hb, 2);
            __m512i lo = _mm512_ternarylogic_epi32(_mm512_and_si512(nib, m4), hl, m30, 0xF8);
            __m512i hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(nib, 4), m4), hh, m30, 0xF8);
            if (mutant) lo = _mm512_add_epi8(lo, one), hi = _mm512_add_epi8(hi, one);
            scale_split(lo, &slo, dst + 1024 * chunk + 64 * row, dst + 4096 + 1024 * chunk + 64 * row);
            scale_split(hi, &shi, dst + 1024 * (2 + chunk) + 64 * row, dst + 4096 + 1024 * (2 + chunk) + 64 * row);
        }
    }
}

static ALWAYS_INLINE void unpack_iq4_xs(const uint8_t *rec, int q, bool mutant, int8_t *dst) {
    const __m512i mask = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m512i lut = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)wgllm_kvalues_iq4nl)),
                                         _mm512_set1_epi8((char)0x80)); /* value + 128 */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int s = 2 * q + h;
        const struct sub_scale sc = sub_scale(rec + WGLLM_REPACK_IQ4_XS_SCALES + 16 * s, 7);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m512i v = _mm512_load_si512((const void *)(rec + 64 * (4 * s + m)));
            __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, mask));
            __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask));
            if (mutant) lo = _mm512_add_epi8(lo, one), hi = _mm512_add_epi8(hi, one);
            const int row = 8 * h + m;
            scale_split(lo, &sc, dst + 1024 * q + 64 * row, dst + 4096 + 1024 * q + 64 * row);
            scale_split(hi, &sc, dst + 1024 * q + 64 * (row + 4), dst + 4096 + 1024 * q + 64 * (row + 4));
        }
    }
}

/* Chunk g (activations 64g..64g+63 of the super-block at xq) times its two B
 * tiles, into C tiles 0 (high bytes) and 1 (low bytes); tiles 2/4/5 and
 * 3/6/7 alternate so that consecutive chunks can overlap. */
static ALWAYS_INLINE void chunk_wide(const char *xq, size_t xs, const int8_t *bt, int g) {
    if (g & 1) {
        _tile_loadd(3, xq + 64 * g, (long)xs);
        _tile_loadd(6, bt + 4096 + 1024 * g, 64);
        _tile_loadd(7, bt + 1024 * g, 64);
        _tile_dpbssd(0, 3, 6);
        _tile_dpbsud(1, 3, 7);
    } else {
        _tile_loadd(2, xq + 64 * g, (long)xs);
        _tile_loadd(4, bt + 4096 + 1024 * g, 64);
        _tile_loadd(5, bt + 1024 * g, 64);
        _tile_dpbssd(0, 2, 4);
        _tile_dpbsud(1, 2, 5);
    }
}

/* One Q6_K (iq4 false) or IQ4_XS panel times a tile of T tokens: while
 * super-block b's sums are added, 4 tokens at a time, chunk g of b + 1 is
 * multiplied and quarter g of b + 2 unpacked, as panel_q45_K does. */
static ALWAYS_INLINE void panel_wide(const struct amx_job *job, const uint8_t *pd, int64_t nb, const char *x,
                                     size_t xs, const void *pre_, int T, float *y, int ldy, bool accumulate,
                                     bool iq4) {
    const struct tok_pre_k *pre = pre_;
    const size_t REC = iq4 ? WGLLM_REPACK_IQ4_XS_RECORD : WGLLM_REPACK_Q6_K_RECORD;
    const size_t D = iq4 ? WGLLM_REPACK_IQ4_XS_D : WGLLM_REPACK_Q6_K_D;
    const bool mutant = job->plus_one;
    _Alignas(64) int8_t bt[2][8192];          /* super-block b's 8 B tiles in bt[b & 1] */
    _Alignas(64) int32_t cc[2][2 * TOK * 16]; /* its C tiles (high, low bytes) in cc[b & 1] */
    if (T < TOK) memset(cc, 0, sizeof(cc));
    const char *xq = x + offsetof(wgllm_block_q8_K, qs);
    const size_t xb = sizeof(wgllm_block_q8_K);
#define UNPACK(b, q, dst) (iq4 ? unpack_iq4_xs(pd + (size_t)(b) * REC, q, mutant, dst) : unpack_q6_K(pd + (size_t)(b) * REC, q, mutant, dst))
    __m512 acc[TOK];
#pragma GCC unroll 16
    for (int t = 0; t < TOK; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb && b < 2; b++)
        for (int q = 0; q < 4; q++) UNPACK(b, q, bt[b]);
    MEMORY_BARRIER();
    if (nb > 0) {
        _tile_zero(0);
        _tile_zero(1);
        for (int g = 0; g < 4; g++) chunk_wide(xq, xs, bt[0], g);
        _tile_stored(0, cc[0], 64);
        _tile_stored(1, cc[0] + TOK * 16, 64);
    }
    for (int64_t b = 0; b < nb; b++) {
        const int32_t *cb = cc[b & 1];
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pd + (size_t)b * REC + D)));
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            if (b + 1 < nb) {
                if (g == 0) {
                    _tile_zero(0);
                    _tile_zero(1);
                }
                chunk_wide(xq + (size_t)(b + 1) * xb, xs, bt[(b + 1) & 1], g);
                if (g == 3) {
                    _tile_stored(0, cc[(b + 1) & 1], 64);
                    _tile_stored(1, cc[(b + 1) & 1] + TOK * 16, 64);
                }
            }
            if (b + 2 < nb) UNPACK(b + 2, g, bt[b & 1]);
            MEMORY_BARRIER();
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const int t = 4 * g + u;
                const __m512i hi = _mm512_load_si512((const void *)(cb + 16 * t));
                const __m512i lo = _mm512_load_si512((const void *)(cb + TOK * 16 + 16 * t));
                const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo));
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(pre->dx[b][t])), sum, acc[t]);
            }
        }
    }
#undef UNPACK
    store_acc(acc, T, y, ldy, accumulate);
}

PANEL(q6_K, panel_wide, false)
PANEL(iq4_xs, panel_wide, true)

typedef void (*panel_fn)(const struct amx_job *job, const uint8_t *pd, int64_t nb, const char *x, size_t xs,
                         const void *pre, int T, float *y, int ldy, bool accumulate);
typedef void (*prepare_fn)(const char *x, size_t xs, int T, int64_t nb, bool min, void *pre);
PANEL(q8_0, panel, K_Q8_0)
PANEL(q4_0, panel, K_Q4_0)
PANEL(iq4_nl, panel, K_IQ4_NL)
PANEL(q5_0, panel, K_Q5_0)
PANEL(q4_1, panel, K_Q4_1)
PANEL(q5_1, panel, K_Q5_1)

static int kind_of(uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_Q8_0: return K_Q8_0;
    case WGLLM_TYPE_Q4_0: return K_Q4_0;
    case WGLLM_TYPE_IQ4_NL: return K_IQ4_NL;
    case WGLLM_TYPE_Q5_0: return K_Q5_0;
    case WGLLM_TYPE_Q4_1: return K_Q4_1;
    case WGLLM_TYPE_Q5_1: return K_Q5_1;
    default: return -1;
    }
}

/* Rows [r0, r1) and n tokens (16 or more) of w, nb blocks per row: per
 * L2-sized group of panels and tile of 16 tokens, the tile's activation
 * scales into pre (prep), then each panel. Releases the tiles at the end. */
static void drive(const struct amx_job *job, const struct wgllm_repacked *w, int64_t r0, int64_t r1, const char *x,
                  size_t x_stride, int n, float *y, int ldy, bool accumulate, int64_t nb, bool min, void *pre,
                  prepare_fn prep, panel_fn fn) {
    const int mutant = wgllm_repack_amx_mutant;
    const size_t panel_bytes = wgllm_repack_panel_bytes(w->type, w->ne0);
    const int64_t p0 = r0 / WGLLM_REPACK_ROWS, p1 = r1 / WGLLM_REPACK_ROWS;
    /* panels per L2-resident group, as in the AVX-512 kernel */
    const int64_t group = n <= TOK ? p1 - p0 : WGLLM_MAX(1, (int64_t)(1 << 20) / (int64_t)panel_bytes);
    int configured = 0;
    for (int64_t g0 = p0; g0 < p1; g0 += group) {
        const int64_t g1 = WGLLM_MIN(p1, g0 + group);
        for (int t0 = 0; t0 < n; t0 += TOK) {
            const int T = WGLLM_MIN(TOK, n - t0);
            /* a short last tile: A and C tiles of T rows, so nothing past x is read */
            const int rows = mutant == WGLLM_REPACK_AMX_MUTANT_TAIL && T < TOK && T > 1 ? T - 1 : T;
            if (rows != configured) configure(configured = rows, job->wide);
            const char *xt = x + (size_t)t0 * x_stride;
            prep(xt, x_stride, T, nb, min, pre);
            for (int64_t p = g0; p < g1; p++)
                fn(job, (const uint8_t *)w->data + (size_t)p * panel_bytes, nb, xt + job->xoff, x_stride, pre, T,
                   y + (size_t)t0 * ldy + p * WGLLM_REPACK_ROWS, ldy, accumulate);
        }
    }
    _tile_release();
}

/* The 256-element formats, 16 tokens or more. noinline: its stack (about
 * 100 KiB) is not added to the caller's. */
static __attribute__((noinline)) void matmul_k(const struct wgllm_repacked *w, int64_t r0, int64_t r1,
                                               const void *x, size_t x_stride, int n, float *y, int ldy,
                                               bool accumulate) {
    const bool q45 = w->type == WGLLM_TYPE_Q4_K || w->type == WGLLM_TYPE_Q5_K;
    const struct amx_job job = {.plus_one = wgllm_repack_amx_mutant == WGLLM_REPACK_AMX_MUTANT_OFFSET, .wide = !q45};
    const int64_t nb = w->ne0 / WGLLM_QK_K;
    WGLLM_ASSERT(nb <= WGLLM_REPACK_MAX_SB);
    const panel_fn fn = w->type == WGLLM_TYPE_Q4_K   ? panel_q4_K
                        : w->type == WGLLM_TYPE_Q5_K ? panel_q5_K
                        : w->type == WGLLM_TYPE_Q6_K ? panel_q6_K
                                                     : panel_iq4_xs;
    struct tok_pre_k pre;
    drive(&job, w, r0, r1, x, x_stride, n, y, ldy, accumulate, nb, q45, &pre, prepare_k, fn);
}

void wgllm_repacked_matmul_amx(const struct wgllm_repacked *w, int64_t r0, int64_t r1, const void *x,
                               size_t x_stride, int n, float *y, int ldy, bool accumulate) {
    WGLLM_ASSERT(r0 % WGLLM_REPACK_ROWS == 0 && r1 % WGLLM_REPACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= w->ne1);
    /* Q2_K and Q3_K: the AVX-512 kernel at every n */
    if (wgllm_repack_is_k(w->type) && w->type != WGLLM_TYPE_Q2_K && w->type != WGLLM_TYPE_Q3_K && n >= TOK &&
        r0 != r1) {
        matmul_k(w, r0, r1, x, x_stride, n, y, ldy, accumulate);
        return;
    }
    const int kind = kind_of(w->type);
    const int64_t nb = w->ne0 / 32;
    if (kind < 0 || n < TOK || nb > MAX_NB || r0 == r1) {
        wgllm_repacked_matmul_avx512(w, r0, r1, x, x_stride, n, y, ldy, accumulate);
        return;
    }
    static const panel_fn fns[] = {panel_q8_0, panel_q4_0, panel_iq4_nl, panel_q5_0, panel_q4_1, panel_q5_1};
    const int mutant = wgllm_repack_amx_mutant;
    const bool min = wgllm_repack_has_min(w->type);
    struct amx_job job = {
        .sb = wgllm_repack_quant_offset(w->type, w->ne0),
        .qb = wgllm_repack_quant_bytes(w->type),
        .bs = min ? sizeof(wgllm_block_q8_1) : sizeof(wgllm_block_q8_0),
        .xoff = min ? offsetof(wgllm_block_q8_1, qs) : offsetof(wgllm_block_q8_0, qs),
        .table = nibble_table(kind, mutant == WGLLM_REPACK_AMX_MUTANT_OFFSET),
        .flip = _mm512_set1_epi8((char)(mutant == WGLLM_REPACK_AMX_MUTANT_OFFSET ? 0x81 : 0x80)),
        .swap = mutant == WGLLM_REPACK_AMX_MUTANT_ORDER,
    };
    struct tok_pre pre;
    drive(&job, w, r0, r1, x, x_stride, n, y, ldy, accumulate, nb, min, &pre, prepare, fns[kind]);
}

#endif
