/*
 * test_repack.c - the interleaved Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/Q4_K/Q5_K/Q6_K/IQ4_XS layout (quant/repack.h): the
 * dispatched product against the per-row vec_dot over random matrices
 * (within 1e-5 of the sum of |terms|, from dequantized values), sub-ranges
 * of rows, accumulate on and off, strides; every SIMD kernel of this CPU
 * bit-identical to the scalar reference of the layout; the layout's bytes
 * at known places; unsupported shapes refused; the AMX kernel (where this
 * CPU has AMX-INT8) over tile edges, and planted bugs in it caught. The
 * process re-runs itself with WGLLM_CPU=avx512 (where AMX is: dispatch to the
 * AVX-512 kernel), WGLLM_CPU=avx2 (the AVX2 kernel) and WGLLM_CPU=scalar (no
 * kernel: supported() false, the reference stands in), on smaller shapes.
 *
 * WGLLM_BENCH=1 also prints mat-vec GB/s and 64-token mat-mat speed on one
 * thread, repacked vs the per-row vec_dot loop (not asserted).
 */
#define TEST_RNG_SEED 0x2545F4914F6CDD1DULL /* this file's data */
#include "test.h"

#include "quant/kquants.h"
#include "quant/repack.h"

#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------- */


/* Values with a different magnitude per 32-element block, as real rows have. */
static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
        const float amp = 0.05f + 3.0f * (float)(rng_u32() % 1000) / 1000.0f;
        for (int k = 0; k < 32; k++) x[i + k] = amp * rng_uniform();
    }
}

/* A random ne1 x ne0 matrix of `type` in the GGUF layout (caller frees). */
static uint8_t *make_matrix(uint32_t type, int64_t ne0, int64_t ne1) {
    const size_t row = wgllm_row_size(type, ne0);
    uint8_t *w = malloc(row * (size_t)ne1);
    float *f = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < ne1; r++) {
        fill(f, ne0);
        wgllm_type_traits_ref(type)->from_float_ref(f, w + (size_t)r * row, ne0);
    }
    free(f);
    return w;
}

/* The activations' type for a weight type (its vec_dot_type). */
static uint32_t act_type(uint32_t type) { return wgllm_type_traits(type)->vec_dot_type; }

/* n activation rows of `at` (Q8_0, Q8_1 or Q8_K), `stride` bytes apart (stride >= row size). */
static uint8_t *make_acts_of(uint32_t at, int64_t ne0, int n, size_t stride) {
    uint8_t *x = calloc((size_t)n, stride);
    float *f = malloc(sizeof(float) * (size_t)ne0);
    for (int t = 0; t < n; t++) {
        fill(f, ne0);
        wgllm_type_traits(at)->from_float(f, x + (size_t)t * stride, ne0);
    }
    free(f);
    return x;
}

#define N_TYPES 12
static const uint32_t types[N_TYPES] = {WGLLM_TYPE_Q4_0,   WGLLM_TYPE_Q8_0,   WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q5_K,
                                        WGLLM_TYPE_Q6_K,   WGLLM_TYPE_IQ4_XS, WGLLM_TYPE_IQ4_NL, WGLLM_TYPE_Q5_0,
                                        WGLLM_TYPE_Q4_1,   WGLLM_TYPE_Q5_1,   WGLLM_TYPE_Q2_K, WGLLM_TYPE_Q3_K};
/* the smallest row of each type's first shape: 64 (Q4_0/Q8_0), 256 (K-quants) */
static int64_t first_ne0(uint32_t type) { return wgllm_type_traits(type)->blck_size == 256 ? 256 : 64; }
static const int64_t ne0s[] = {64, 2048, 5632};
static const int64_t ne1s[] = {16, 48, 256};
static const int ns[] = {1, 3, 4, 7, 64};
/* The capped re-runs check dispatch, not new arithmetic (kernels_equal_reference
 * already compares every kernel): they skip the largest shapes to stay fast. */
static bool light;

/* ---- tests ------------------------------------------------------------- */

TEST(matches_vec_dot) {
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t i0 = 0; i0 < 3; i0++)
            for (size_t i1 = 0; i1 < 3; i1++) {
                const uint32_t type = types[ti], at = act_type(type);
                const int64_t ne0 = i0 ? ne0s[i0] : first_ne0(type), ne1 = ne1s[i1];
                if (light && (i0 == 2 || i1 == 2)) continue;
                const struct wgllm_type_traits *tr = wgllm_type_traits(type);
                const size_t row = wgllm_row_size(type, ne0);
                uint8_t *wq = make_matrix(type, ne0, ne1);
                struct wgllm_repacked rp;
                struct wgllm_error err;
                CHECK_EQ_INT(wgllm_repack(wq, type, ne0, ne1, &rp, &err), WGLLM_STATUS_OK);
                CHECK(rp.data && ((uintptr_t)rp.data & 63) == 0 && rp.type == type && rp.ne0 == ne0 && rp.ne1 == ne1);
                CHECK_EQ_INT(rp.size, (size_t)(ne1 / 16) * wgllm_repack_panel_bytes(type, ne0));
                /* |w| dequantized, for the error bound */
                float *wa = malloc(sizeof(float) * (size_t)(ne0 * ne1));
                for (int64_t r = 0; r < ne1; r++) tr->to_float(wq + (size_t)r * row, wa + r * ne0, ne0);
                for (int64_t k = 0; k < ne0 * ne1; k++) wa[k] = fabsf(wa[k]);
                for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); in++) {
                    const int n = ns[in];
                    /* an odd stride on purpose (aligned for Q8_K's float scale) */
                    const size_t xs = wgllm_row_size(at, ne0) + (at == WGLLM_TYPE_Q8_K ? 4 : 6);
                    const int ldy = (int)ne1 + 5;
                    uint8_t *x = make_acts_of(at, ne0, n, xs);
                    float *ref = malloc(sizeof(float) * (size_t)ldy * n);
                    float *bound = malloc(sizeof(float) * (size_t)ldy * n);
                    float *y = malloc(sizeof(float) * (size_t)ldy * n);
                    float *xa = malloc(sizeof(float) * (size_t)ne0);
                    for (int t = 0; t < n; t++) {
                        wgllm_type_traits(at)->to_float(x + (size_t)t * xs, xa, ne0);
                        for (int64_t r = 0; r < ne1; r++) {
                            tr->vec_dot(ne0, &ref[t * ldy + r], wq + (size_t)r * row, x + (size_t)t * xs);
                            double b = 0;
                            for (int64_t k = 0; k < ne0; k++) b += (double)wa[r * ne0 + k] * fabsf(xa[k]);
                            bound[t * ldy + r] = (float)(1e-5 * b) + 1e-30f;
                        }
                    }
                    /* full range and a sub-range, accumulate off and on */
                    const int64_t ranges[2][2] = {{0, ne1}, {ne1 > 16 ? 16 : 0, ne1 > 32 ? ne1 - 16 : 16}};
                    for (int ri = 0; ri < 2; ri++)
                        for (int acc = 0; acc < 2; acc++) {
                            const int64_t r0 = ranges[ri][0], r1 = ranges[ri][1];
                            for (int k = 0; k < ldy * n; k++) y[k] = (float)(k % 7) - 3.0f;
                            wgllm_repacked_matmul(&rp, r0, r1, x, xs, n, y, ldy, acc != 0);
                            int bad = 0;
                            for (int t = 0; t < n; t++)
                                for (int r = 0; r < ldy; r++) {
                                    const float init = (float)((t * ldy + r) % 7) - 3.0f;
                                    const float v = y[t * ldy + r];
                                    if (r < r0 || r >= r1) {
                                        bad += v != init; /* untouched */
                                    } else {
                                        const float want = ref[t * ldy + r] + (acc ? init : 0.0f);
                                        const float tol = bound[t * ldy + r] + (acc ? 1e-6f * fabsf(init) : 0.0f);
                                        if (!(fabsf(v - want) <= tol)) {
                                            if (bad < 3)
                                                fprintf(stderr, "  %s %lldx%lld n=%d rows %lld..%lld acc=%d: "
                                                        "y[%d][%d] = %.9g, vec_dot %.9g (tol %g)\n",
                                                        wgllm_type_name(type), (long long)ne1, (long long)ne0, n,
                                                        (long long)r0, (long long)r1, acc, t, r, v, want, tol);
                                            bad++;
                                        }
                                    }
                                }
                            CHECK_EQ_INT(bad, 0);
                        }
                    free(x), free(ref), free(bound), free(y), free(xa);
                }
                free(wa);
                free(wq);
                wgllm_repacked_free(&rp);
                CHECK(rp.data == NULL);
            }
}

/* The SIMD kernels this CPU runs (at most three): their names and functions. */
struct kern {
    const char *name;
    wgllm_repacked_matmul_fn fn;
};
#define MAX_KERNELS 3
static int simd_kernels(struct kern ks[MAX_KERNELS]) {
    int nk = 0;
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
    if (caps->avx2 && caps->fma && caps->f16c) ks[nk++] = (struct kern){"avx2", wgllm_repacked_matmul_avx2};
    if (caps->avx512f && caps->avx512bw && caps->avx512vl && caps->avx512vnni) {
        ks[nk++] = (struct kern){"avx512", wgllm_repacked_matmul_avx512};
        if (caps->amx_int8) ks[nk++] = (struct kern){"amx", wgllm_repacked_matmul_amx};
    }
#else
    (void)ks;
#endif
    return nk;
}

/* Every SIMD kernel this CPU runs gives exactly the scalar reference's floats. */
TEST(kernels_equal_reference) {
    struct kern ks[MAX_KERNELS];
    const int nk = simd_kernels(ks);
    if (nk == 0) fprintf(stderr, "  (no SIMD kernel on this CPU)\n");
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t i0 = 0; i0 < 2; i0++) {
            const uint32_t type = types[ti], at = act_type(type);
            const int64_t ne0 = i0 ? ne0s[i0] : first_ne0(type), ne1 = 48;
            const bool avx512_only = type == WGLLM_TYPE_Q5_K || type == WGLLM_TYPE_Q6_K || type == WGLLM_TYPE_Q2_K ||
                                     type == WGLLM_TYPE_Q3_K;
            uint8_t *wq = make_matrix(type, ne0, ne1);
            struct wgllm_repacked rp;
            CHECK_EQ_INT(wgllm_repack(wq, type, ne0, ne1, &rp, NULL), WGLLM_STATUS_OK);
            /* every tile size and remainder of the 4-token tiles, and many tiles */
            static const int kns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 64};
            for (size_t in = 0; in < sizeof(kns) / sizeof(kns[0]); in++) {
                const int n = kns[in];
                const size_t xs = wgllm_row_size(at, ne0);
                uint8_t *x = make_acts_of(at, ne0, n, xs);
                float *want = malloc(sizeof(float) * (size_t)ne1 * n), *got = malloc(sizeof(float) * (size_t)ne1 * n);
                for (int acc = 0; acc < 2; acc++) {
                    for (int k = 0; k < ne1 * n; k++) want[k] = (float)k * 0.25f;
                    wgllm_repacked_matmul_ref(&rp, 16, ne1, x, xs, n, want, (int)ne1, acc);
                    for (int kk = 0; kk < nk; kk++) {
                        if (avx512_only && !strcmp(ks[kk].name, "avx2")) continue;
                        for (int k = 0; k < ne1 * n; k++) got[k] = (float)k * 0.25f;
                        ks[kk].fn(&rp, 16, ne1, x, xs, n, got, (int)ne1, acc);
                        const bool same = memcmp(want, got, sizeof(float) * (size_t)ne1 * n) == 0;
                        if (!same)
                            fprintf(stderr, "  %s kernel %s %lldx%lld n=%d acc=%d differs from the reference\n",
                                    ks[kk].name, wgllm_type_name(type), (long long)ne1, (long long)ne0, n, acc);
                        CHECK(same);
                    }
                }
                free(x), free(want), free(got);
            }
            free(wq);
            wgllm_repacked_free(&rp);
        }
}

/* The 32-element formats at the extremes the kernels' 16-bit pair sums must
 * survive (vpmaddubsw saturates): every quant at its largest or smallest
 * value (IQ4_NL: -127 and 113; Q5_0/Q5_1: 31) against activations of +-127
 * everywhere, all of one sign or alternating, every SIMD kernel equal to
 * the reference bit for bit. */
TEST(kernels_equal_reference_at_extremes) {
    struct kern ks[MAX_KERNELS];
    const int nk = simd_kernels(ks);
    static const uint32_t et[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_IQ4_NL, WGLLM_TYPE_Q5_0,
                                  WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_1};
    enum { NE0 = 256, NE1 = 32, N = 20 }; /* 16 tokens and more: the AMX kernel's tiles too */
    for (size_t ti = 0; ti < sizeof(et) / sizeof(et[0]); ti++) {
        const uint32_t type = et[ti], at = act_type(type);
        const size_t row = wgllm_row_size(type, NE0), bs = wgllm_type_traits(type)->type_size;
        uint8_t *wq = make_matrix(type, NE0, NE1);
        /* the quant bytes (and Q5's fifth bits) sit at the end of each block */
        const size_t nq = type == WGLLM_TYPE_Q8_0 ? 32 : type == WGLLM_TYPE_Q5_0 || type == WGLLM_TYPE_Q5_1 ? 20 : 16;
        for (int r = 0; r < NE1; r++)
            for (int b = 0; b < NE0 / 32; b++) {
                /* rows: all-high, all-low, then mixed by block */
                const int hi = r % 3 == 0 || (r % 3 == 2 && b % 2 == 0);
                const uint8_t v = type == WGLLM_TYPE_Q8_0 ? (uint8_t)(hi ? 127 : -127) : hi ? 0xFF : 0x00;
                memset(wq + (size_t)r * row + (size_t)b * bs + bs - nq, v, nq);
            }
        const size_t xs = wgllm_row_size(at, NE0);
        uint8_t *x = make_acts_of(at, NE0, N, xs);
        const size_t ab = wgllm_type_traits(at)->type_size; /* qs: the block's last 32 bytes */
        for (int t = 0; t < N; t++)
            for (int b = 0; b < NE0 / 32; b++)
                for (int k = 0; k < 32; k++) {
                    const int neg = t % 3 == 1 || (t % 3 == 2 && k % 2 == 1);
                    x[(size_t)t * xs + (size_t)b * ab + ab - 32 + k] = (uint8_t)(int8_t)(neg ? -127 : 127);
                }
        struct wgllm_repacked rp;
        CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
        float want[NE1 * N], got[NE1 * N];
        for (int n = 1; n <= N; n++) {
            wgllm_repacked_matmul_ref(&rp, 0, NE1, x, xs, n, want, NE1, false);
            for (int kk = 0; kk < nk; kk++) {
                ks[kk].fn(&rp, 0, NE1, x, xs, n, got, NE1, false);
                const bool same = memcmp(want, got, sizeof(float) * (size_t)(NE1 * n)) == 0;
                if (!same) fprintf(stderr, "  %s kernel %s n=%d differs at the extremes\n", ks[kk].name, wgllm_type_name(type), n);
                CHECK(same);
            }
        }
        free(x), free(wq);
        wgllm_repacked_free(&rp);
    }
}

#if defined(__x86_64__)
/* The AMX kernel's formats: its tiles of 16 tokens and the short last one. */
static const uint32_t amx_types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_IQ4_NL, WGLLM_TYPE_Q5_0,
                                     WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_1, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q5_K,
                                     WGLLM_TYPE_Q6_K, WGLLM_TYPE_IQ4_XS};

/* One AMX case: kernel `fn` over rows [r0, r1) of a 64-row matrix and n
 * tokens, y (ldy odd, sentinels between and after the rows) compared
 * bytewise with the reference's, accumulate off and on. True when equal. */
static bool amx_case(uint32_t type, int64_t ne0, int n, int64_t r0, int64_t r1, bool quiet) {
    enum { NE1 = 64 };
    const uint32_t at = act_type(type);
    uint8_t *wq = make_matrix(type, ne0, NE1);
    struct wgllm_repacked rp;
    CHECK_EQ_INT(wgllm_repack(wq, type, ne0, NE1, &rp, NULL), WGLLM_STATUS_OK);
    /* packed rows, and a stride off the block size (aligned for Q8_K's float scale) */
    const size_t xs = wgllm_row_size(at, ne0) + (n % 2 ? (at == WGLLM_TYPE_Q8_K ? 4 : 6) : 0);
    uint8_t *x = make_acts_of(at, ne0, n, xs);
    const int ldy = NE1 + 3;
    const size_t ny = (size_t)ldy * n + 7;
    float *want = malloc(sizeof(float) * ny), *got = malloc(sizeof(float) * ny);
    bool same = true;
    for (int acc = 0; acc < 2; acc++) {
        for (size_t k = 0; k < ny; k++) want[k] = got[k] = (float)k * 0.25f - 3.0f;
        wgllm_repacked_matmul_ref(&rp, r0, r1, x, xs, n, want, ldy, acc);
        wgllm_repacked_matmul_amx(&rp, r0, r1, x, xs, n, got, ldy, acc);
        const bool eq = memcmp(want, got, sizeof(float) * ny) == 0;
        if (!eq && !quiet)
            fprintf(stderr, "  amx kernel %s ne0=%lld rows %lld..%lld n=%d acc=%d differs from the reference\n",
                    wgllm_type_name(type), (long long)ne0, (long long)r0, (long long)r1, n, acc);
        same = same && eq;
    }
    free(x), free(want), free(got), free(wq);
    wgllm_repacked_free(&rp);
    return same;
}

/* A 256-element format at the extremes of its integer sums, where the AMX
 * kernel's partial sums come closest to their limits (2^24 in float for
 * Q4_K and Q5_K; int16 products and vpmaddubsw's saturation for Q6_K and
 * IQ4_XS): scales and mins at their largest magnitude (Q4_K/Q5_K 63, Q6_K
 * -128, IQ4_XS -32), values at theirs (nibbles 15/14, Q5_K's fifth bits set,
 * Q6_K -32 or 31, IQ4_XS -127 or 113) at random, a few zero rows;
 * activations mostly -128 or mostly 127. Equal to the reference. */
static bool amx_extremes(uint32_t type) {
    enum { NE0 = 1024, NE1 = 32, N = 33 };
    uint32_t lcg = 1;
    uint8_t *wq = make_matrix(type, NE0, NE1);
    const size_t bsz = wgllm_row_size(type, WGLLM_QK_K);
    for (int r = 0; r < NE1; r++)
        for (int b = 0; b < NE0 / 256; b++) {
            uint8_t *blk = wq + (size_t)(r * (NE0 / 256) + b) * bsz;
            const bool zero = r % 8 == 1;
            uint8_t *q = NULL;
            size_t nq = 0;
            if (type == WGLLM_TYPE_Q4_K || type == WGLLM_TYPE_Q5_K) {
                wgllm_block_q5_K *k5 = (wgllm_block_q5_K *)blk; /* Q4_K's fields up to qs are the same */
                memset(k5->scales, 0xFF, sizeof(k5->scales));
                if (type == WGLLM_TYPE_Q5_K) memset(k5->qh, zero ? 0x00 : 0xFF, sizeof(k5->qh)), q = k5->qs;
                else q = ((wgllm_block_q4_K *)blk)->qs;
                nq = 128;
            } else if (type == WGLLM_TYPE_Q6_K) {
                wgllm_block_q6_K *k6 = (wgllm_block_q6_K *)blk;
                memset(k6->scales, 0x80, sizeof(k6->scales));
                q = k6->ql, nq = sizeof(k6->ql) + sizeof(k6->qh); /* ql, qh adjacent */
            } else {
                wgllm_block_iq4_xs *xs4 = (wgllm_block_iq4_xs *)blk;
                xs4->scales_h = 0, memset(xs4->scales_l, 0, sizeof(xs4->scales_l)); /* -32 */
                q = xs4->qs, nq = sizeof(xs4->qs);
            }
            for (size_t i = 0; i < nq; i++) {
                lcg = lcg * 1103515245u + 12345u;
                const uint8_t bits = (uint8_t)(lcg >> 16 & 0x11);
                /* Q4_K/Q5_K: 15 or 14 (zero rows 0); Q6_K: ql 0/1 with qh 0 (-32, -31) or 0xF-ish with 3 (31);
                 * IQ4_XS: index 0 or 1 (-127, -104) */
                q[i] = type == WGLLM_TYPE_IQ4_XS ? bits
                       : type == WGLLM_TYPE_Q6_K ? (uint8_t)((lcg >> 20 & 1) ? 0xFF ^ bits : bits)
                       : zero                    ? 0x00
                                                 : (uint8_t)(0xFF ^ bits);
            }
        }
    const size_t xs = wgllm_row_size(WGLLM_TYPE_Q8_K, NE0);
    uint8_t *x = make_acts_of(WGLLM_TYPE_Q8_K, NE0, N, xs);
    for (int t = 0; t < N; t++)
        for (int b = 0; b < NE0 / 256; b++) {
            wgllm_block_q8_K *xb = (wgllm_block_q8_K *)(x + (size_t)t * xs) + b;
            /* odd partial sums past 2^24: a rounding too many shows */
            for (int k = 0; k < 256; k++) {
                lcg = lcg * 1103515245u + 12345u;
                xb->qs[k] = (int8_t)((lcg >> 16 & 15) == 0 ? 127 : -128);
                if (t % 4 == 3) xb->qs[k] = (int8_t)-xb->qs[k] - 1; /* 127 mostly */
            }
            for (int k = 0; k < 16; k++) {
                int sum = 0;
                for (int i = 0; i < 16; i++) sum += xb->qs[16 * k + i];
                xb->bsums[k] = (int16_t)sum;
            }
        }
    struct wgllm_repacked rp;
    CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
    static float want[NE1 * N], got[NE1 * N];
    wgllm_repacked_matmul_ref(&rp, 0, NE1, x, xs, N, want, NE1, false);
    wgllm_repacked_matmul_amx(&rp, 0, NE1, x, xs, N, got, NE1, false);
    const bool same = memcmp(want, got, sizeof(want)) == 0;
    if (!same) fprintf(stderr, "  amx kernel %s at its extremes differs from the reference\n", wgllm_type_name(type));
    free(x), free(wq);
    wgllm_repacked_free(&rp);
    return same;
}

/* The AMX kernel gives exactly the reference's floats: every format it
 * takes, token counts below one tile (handed to AVX-512), at and past tile
 * edges, 16 to 48 rows from an offset; rows of 1 block (no pair), 2 (one
 * pair), 5 (pairs in the pipeline and an odd last block) and 4096 elements
 * (a long row: its token counts at the tile edges only). */
TEST(amx_equals_reference) {
    if (!wgllm_cpu_caps()->amx_int8) {
        fprintf(stderr, "  (no usable AMX-INT8 on this CPU: skipped)\n");
        return;
    }
    static const int n_amx[] = {1, 5, 16, 17, 31, 32, 33, 64, 100};
    static const int64_t ranges[][2] = {{0, 16}, {16, 48}, {16, 64}};
    for (size_t ti = 0; ti < sizeof(amx_types) / sizeof(amx_types[0]); ti++) {
        const uint32_t type = amx_types[ti];
        const int64_t bs = wgllm_type_traits(type)->blck_size, lens[] = {bs, 2 * bs, 5 * bs, 4096};
        for (size_t i0 = 0; i0 < 4; i0++)
            for (size_t in = 0; in < sizeof(n_amx) / sizeof(n_amx[0]); in++)
                for (size_t ri = 0; ri < 3; ri++) {
                    if (lens[i0] == 4096 && (ri != 1 || (n_amx[in] != 17 && n_amx[in] != 32))) continue;
                    CHECK(amx_case(type, lens[i0], n_amx[in], ranges[ri][0], ranges[ri][1], false));
                }
    }
    CHECK(amx_extremes(WGLLM_TYPE_Q4_K));
    CHECK(amx_extremes(WGLLM_TYPE_Q5_K));
    CHECK(amx_extremes(WGLLM_TYPE_Q6_K));
    CHECK(amx_extremes(WGLLM_TYPE_IQ4_XS));
}

/* Known bugs planted in the AMX kernel (repack.h) make amx_equals_reference's
 * comparison fail: a weight offset off by one, two blocks' sums added in the
 * other order (same integers, other rounding), a short tile a token short. */
TEST(amx_mutants_fail) {
    if (!wgllm_cpu_caps()->amx_int8) {
        fprintf(stderr, "  (no usable AMX-INT8 on this CPU: skipped)\n");
        return;
    }
    static const struct {
        int mutant;
        uint32_t type;
        int64_t ne0;
        int n;
    } m[] = {
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q8_0, 256, 32},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q4_0, 256, 32},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q5_1, 256, 32},
        {WGLLM_REPACK_AMX_MUTANT_ORDER, WGLLM_TYPE_Q4_0, 4096, 32},
        {WGLLM_REPACK_AMX_MUTANT_ORDER, WGLLM_TYPE_Q8_0, 4096, 32},
        {WGLLM_REPACK_AMX_MUTANT_TAIL, WGLLM_TYPE_Q4_0, 256, 21},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q4_K, 1280, 32},
        {WGLLM_REPACK_AMX_MUTANT_TAIL, WGLLM_TYPE_Q4_K, 512, 21},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q5_K, 1280, 32},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_Q6_K, 1280, 32},
        {WGLLM_REPACK_AMX_MUTANT_TAIL, WGLLM_TYPE_Q6_K, 512, 21},
        {WGLLM_REPACK_AMX_MUTANT_OFFSET, WGLLM_TYPE_IQ4_XS, 1280, 32},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        CHECK(amx_case(m[i].type, m[i].ne0, m[i].n, 16, 48, true)); /* sound without the bug */
        wgllm_repack_amx_mutant = m[i].mutant;
        const bool caught = !amx_case(m[i].type, m[i].ne0, m[i].n, 16, 48, true);
        wgllm_repack_amx_mutant = 0;
        fprintf(stderr, "  mutant %d on %s: caught: %s\n", m[i].mutant, wgllm_type_name(m[i].type), caught ? "yes" : "no");
        CHECK(caught);
    }
}
#endif

/* A run of a repacked matrix's rows (one expert of a stack) is that run
 * repacked on its own: the same bytes, the same products. */
TEST(rows_view_is_the_rows_repacked) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = types[ti], at = act_type(type);
        const int64_t ne0 = first_ne0(type), ne1 = 64;
        uint8_t *wq = make_matrix(type, ne0, ne1);
        struct wgllm_repacked all, part;
        CHECK_EQ_INT(wgllm_repack(wq, type, ne0, ne1, &all, NULL), WGLLM_STATUS_OK);
        const size_t rs = wgllm_row_size(type, ne0);
        CHECK_EQ_INT(wgllm_repack(wq + 32 * rs, type, ne0, 16, &part, NULL), WGLLM_STATUS_OK);
        const struct wgllm_repacked v = wgllm_repacked_rows(&all, 32, 16);
        CHECK(v.ne1 == 16 && v.size == part.size && v.type == type && v.ne0 == ne0);
        CHECK(memcmp(v.data, part.data, part.size) == 0);
        const int n = 3;
        const size_t xs = wgllm_row_size(at, ne0);
        uint8_t *x = make_acts_of(at, ne0, n, xs);
        float a[16 * 3], b[16 * 3];
        wgllm_repacked_matmul(&v, 0, 16, x, xs, n, a, 16, false);
        wgllm_repacked_matmul(&part, 0, 16, x, xs, n, b, 16, false);
        CHECK(memcmp(a, b, sizeof a) == 0);
        free(x), free(wq);
        wgllm_repacked_free(&all);
        wgllm_repacked_free(&part);
    }
}

/* Bytes at known places, derived by hand from the layout in repack.h. */
TEST(layout_bytes) {
    enum { NE0 = 64, NE1 = 32 };
    for (size_t ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        const size_t row = wgllm_row_size(type, NE0), bs = wgllm_type_traits(type)->type_size;
        uint8_t *wq = make_matrix(type, NE0, NE1);
        struct wgllm_repacked rp;
        CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
        const size_t sb = 64, qb = type == WGLLM_TYPE_Q4_0 ? 256 : 512, panel = sb + 2 * qb;
        CHECK_EQ_INT(wgllm_repack_panel_bytes(type, NE0), panel);
        const uint8_t *d = rp.data;
        /* row 21 = panel 1, lane 5; block 1 */
        const uint8_t *src = wq + 21 * row + bs; /* block 1 of row 21 */
        CHECK(!memcmp(d + panel + (1 * 16 + 5) * 2, src, 2)); /* its scale */
        const uint8_t *q = d + panel + sb + qb; /* block 1's quants */
        if (type == WGLLM_TYPE_Q4_0) {
            /* qs[9] sits in vector 2, lane 5, byte 1 */
            CHECK_EQ_INT(q[2 * 64 + 5 * 4 + 1], src[2 + 9]);
        } else {
            /* qs[30] sits in vector 7, lane 5, byte 2, flipped */
            CHECK_EQ_INT(q[7 * 64 + 5 * 4 + 2], src[2 + 30] ^ 0x80);
        }
        free(wq);
        wgllm_repacked_free(&rp);
    }
}

/* Q4_1 and Q5_1: the scale, min, nibble and fifth-bit sections at known places (repack.h). */
TEST(layout_bytes_q4_1_q5_1) {
    enum { NE0 = 96, NE1 = 32 }; /* 3 blocks: a padded scale section (96 -> 128 bytes) */
    for (int five = 0; five < 2; five++) {
        const uint32_t type = five ? WGLLM_TYPE_Q5_1 : WGLLM_TYPE_Q4_1;
        const size_t row = wgllm_row_size(type, NE0), bs = wgllm_type_traits(type)->type_size;
        uint8_t *wq = make_matrix(type, NE0, NE1);
        struct wgllm_repacked rp;
        CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
        const size_t sb = 128, qb = five ? 320 : 256, panel = 2 * sb + 3 * qb;
        CHECK_EQ_INT(wgllm_repack_panel_bytes(type, NE0), panel);
        CHECK_EQ_INT(wgllm_repack_quant_offset(type, NE0), 2 * sb);
        const uint8_t *d = rp.data;
        /* row 21 = panel 1, lane 5; block 2 */
        const uint8_t *src = wq + 21 * row + 2 * bs;
        CHECK(!memcmp(d + panel + (2 * 16 + 5) * 2, src, 2));      /* d */
        CHECK(!memcmp(d + panel + sb + (2 * 16 + 5) * 2, src + 2, 2)); /* m */
        const uint8_t *q = d + panel + 2 * sb + 2 * qb, *qs = src + (five ? 8 : 4);
        /* qs[9] sits in vector 2, lane 5, byte 1 */
        CHECK_EQ_INT(q[2 * 64 + 5 * 4 + 1], qs[9]);
        if (five) {
            /* element 9's fifth bit (qh bit 9) in bit 2 of byte 4*5+1 of the high-bit vector,
             * element 16+13's (qh bit 29) in bit 4+3 of byte 4*5+1 */
            uint32_t qh;
            memcpy(&qh, src + 4, 4);
            CHECK_EQ_INT((q[256 + 5 * 4 + 1] >> 2) & 1, (qh >> 9) & 1);
            CHECK_EQ_INT((q[256 + 5 * 4 + 1] >> 7) & 1, (qh >> 29) & 1);
        }
        free(wq);
        wgllm_repacked_free(&rp);
    }
}

/* Q4_K and Q5_K: a record's fields at known places (repack.h), from the GGUF block. */
TEST(layout_bytes_q45_K) {
    enum { NE0 = 512, NE1 = 32 };
    for (int five = 0; five < 2; five++) {
        const uint32_t type = five ? WGLLM_TYPE_Q5_K : WGLLM_TYPE_Q4_K;
        const size_t rs = five ? WGLLM_REPACK_Q5_K_RECORD : WGLLM_REPACK_Q4_K_RECORD, q = five ? 2560 : 2048;
        const size_t row = wgllm_row_size(type, NE0);
        uint8_t *wq = make_matrix(type, NE0, NE1);
        struct wgllm_repacked rp;
        CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
        const size_t panel = 2 * rs;
        CHECK_EQ_INT(wgllm_repack_panel_bytes(type, NE0), panel);
        CHECK_EQ_INT(rp.size, 2 * panel);
        /* row 21 = panel 1, lane 5; super-block 1 */
        wgllm_block_q5_K b5;
        wgllm_block_q4_K b4;
        const uint8_t *src = wq + 21 * row + wgllm_type_traits(type)->type_size;
        memcpy(&b5, src, sizeof(b5));
        memcpy(&b4, src, sizeof(b4));
        const wgllm_fp16 d = five ? b5.d : b4.d, dmin = five ? b5.dmin : b4.dmin;
        const uint8_t *scales = five ? b5.scales : b4.scales, *qs = five ? b5.qs : b4.qs;
        const uint8_t *rec = (const uint8_t *)rp.data + panel + rs;
        CHECK(!memcmp(rec + q + 256 + 5 * 2, &d, 2));
        CHECK(!memcmp(rec + q + 288 + 5 * 2, &dmin, 2));
        for (int s = 0; s < 8; s++) {
            uint8_t sc, mn;
            wgllm_kq_scale_min_k4(s, scales, &sc, &mn);
            CHECK_EQ_INT(rec[q + s * 16 + 5], sc);
            CHECK_EQ_INT(rec[q + 128 + (s / 2) * 32 + 5 * 2 + (s & 1)], mn);
        }
        /* qs[77] = chunk 2, byte 13 of it: vector (c 2, m 3), lane 5, byte 1 */
        CHECK_EQ_INT(rec[(five ? 320 * 3 + 64 * 2 : (8 * 2 + 3) * 64) + 5 * 4 + 1], qs[77]);
        /* qh[30]: high-bit vector 7, lane 5, byte 2 */
        if (five) CHECK_EQ_INT(rec[320 * 7 + 256 + 5 * 4 + 2], b5.qh[30]);
        free(wq);
        wgllm_repacked_free(&rp);
    }
}

/* Q6_K: a record's fields at known places (repack.h), from the GGUF block. */
TEST(layout_bytes_q6_K) {
    enum { NE0 = 512, NE1 = 32 };
    const size_t row = wgllm_row_size(WGLLM_TYPE_Q6_K, NE0);
    uint8_t *wq = make_matrix(WGLLM_TYPE_Q6_K, NE0, NE1);
    struct wgllm_repacked rp;
    CHECK_EQ_INT(wgllm_repack(wq, WGLLM_TYPE_Q6_K, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
    const size_t panel = 2 * WGLLM_REPACK_Q6_K_RECORD;
    CHECK_EQ_INT(wgllm_repack_panel_bytes(WGLLM_TYPE_Q6_K, NE0), panel);
    /* row 21 = panel 1, lane 5; super-block 1 */
    wgllm_block_q6_K blk;
    memcpy(&blk, wq + 21 * row + sizeof(blk), sizeof(blk));
    const uint8_t *rec = (const uint8_t *)rp.data + panel + WGLLM_REPACK_Q6_K_RECORD;
    CHECK(!memcmp(rec + 3328 + 5 * 2, &blk.d, 2));
    CHECK_EQ_INT((int8_t)rec[3072 + 11 * 16 + 5], blk.scales[11]);
    /* element 150 = half 1, group 0, l 22: low nibble of ql[64+22], bits 0-1 of qh[32+22];
     * in the layout: vector (150-128)/4 = 5, byte 2, high nibble; high bits: vector
     * (150%64)/4 = 5, byte 2, bits 2*(150/64) = 4..5 */
    const int q = (blk.ql[64 + 22] & 0xF) | ((blk.qh[32 + 22] & 3) << 4);
    CHECK_EQ_INT(rec[192 * 5 + 5 * 4 + 2] >> 4, q & 0xF);
    CHECK_EQ_INT((rec[192 * 5 + 128 + 5 * 4 + 2] >> 4) & 3, q >> 4);
    free(wq);
    wgllm_repacked_free(&rp);
}

/* Q2_K and Q3_K: a record's fields at known places (repack.h), from the GGUF block. */
TEST(layout_bytes_q23_K) {
    enum { NE0 = 512, NE1 = 32 };
    for (int three = 0; three < 2; three++) {
        const uint32_t type = three ? WGLLM_TYPE_Q3_K : WGLLM_TYPE_Q2_K;
        const size_t row = wgllm_row_size(type, NE0), rs = three ? WGLLM_REPACK_Q3_K_RECORD : WGLLM_REPACK_Q2_K_RECORD;
        uint8_t *wq = make_matrix(type, NE0, NE1);
        struct wgllm_repacked rp;
        CHECK_EQ_INT(wgllm_repack(wq, type, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_repack_panel_bytes(type, NE0), 2 * rs);
        /* row 21 = panel 1, lane 5; super-block 1 */
        const uint8_t *blk = wq + 21 * row + row / 2, *rec = (const uint8_t *)rp.data + 3 * rs;
        /* element 190 = h 1, g 1, l 30: bits 2-3 of qs[32 + 30]; in the layout vector
         * 8 + 30/4 = 15, byte 2 (Q3_K: its high bit, bit 5 of hmask[30], in high-bit vector 7) */
        if (three) {
            wgllm_block_q3_K b3;
            memcpy(&b3, blk, sizeof(b3));
            CHECK(!memcmp(rec + 1792 + 5 * 2, &b3.d, 2));
            /* sub-block 11 = pair 5, odd: byte 2*5 + 1, the 6-bit scale - 32 */
            CHECK_EQ_INT((int8_t)rec[1536 + 5 * 32 + 2 * 5 + 1], wgllm_kq_scale_q3_K(11, b3.scales));
            CHECK_EQ_INT((rec[64 * 15 + 5 * 4 + 2] >> 2) & 3, (b3.qs[32 + 30] >> 2) & 3);
            CHECK_EQ_INT((rec[1024 + 64 * 7 + 5 * 4 + 2] >> 5) & 1, (b3.hmask[30] >> 5) & 1);
        } else {
            wgllm_block_q2_K b2;
            memcpy(&b2, blk, sizeof(b2));
            CHECK(!memcmp(rec + 1280 + 5 * 2, &b2.d, 2));
            CHECK(!memcmp(rec + 1312 + 5 * 2, &b2.dmin, 2));
            CHECK_EQ_INT(rec[1024 + 5 * 32 + 2 * 5 + 1], b2.scales[11]);
            CHECK_EQ_INT((rec[64 * 15 + 5 * 4 + 2] >> 2) & 3, (b2.qs[32 + 30] >> 2) & 3);
        }
        free(wq);
        wgllm_repacked_free(&rp);
    }
}

/* IQ4_XS: a record's fields at known places (repack.h), from the GGUF block. */
TEST(layout_bytes_iq4_xs) {
    enum { NE0 = 512, NE1 = 32 };
    const size_t row = wgllm_row_size(WGLLM_TYPE_IQ4_XS, NE0);
    uint8_t *wq = make_matrix(WGLLM_TYPE_IQ4_XS, NE0, NE1);
    struct wgllm_repacked rp;
    CHECK_EQ_INT(wgllm_repack(wq, WGLLM_TYPE_IQ4_XS, NE0, NE1, &rp, NULL), WGLLM_STATUS_OK);
    const size_t panel = 2 * WGLLM_REPACK_IQ4_XS_RECORD;
    CHECK_EQ_INT(wgllm_repack_panel_bytes(WGLLM_TYPE_IQ4_XS, NE0), panel);
    wgllm_block_iq4_xs blk; /* row 21 = panel 1, lane 5; super-block 1 */
    memcpy(&blk, wq + 21 * row + sizeof(blk), sizeof(blk));
    const uint8_t *rec = (const uint8_t *)rp.data + panel + WGLLM_REPACK_IQ4_XS_RECORD;
    CHECK(!memcmp(rec + 2176 + 5 * 2, &blk.d, 2));
    /* sub-block 5's scale: high nibble of scales_l[2], bits 10-11 of scales_h */
    CHECK_EQ_INT((int8_t)rec[2048 + 5 * 16 + 5], (((blk.scales_l[2] >> 4) & 0xf) | (((blk.scales_h >> 10) & 3) << 4)) - 32);
    /* qs[93] = sub-block 5, byte 13: vector 4*5 + 3, lane 5, byte 1 */
    CHECK_EQ_INT(rec[(4 * 5 + 3) * 64 + 5 * 4 + 1], blk.qs[93]);
    free(wq);
    wgllm_repacked_free(&rp);
}

TEST(unsupported_shapes) {
    const bool simd = wgllm_repack_kernel(NULL) != NULL;
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 5632), simd);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q8_0, 64, 16), simd);
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q8_1, 2048, 5632)); /* an activation type */
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_1, 2048, 5630));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_F16, 2048, 5632));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 5630));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 8));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 0));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_0, 48, 16));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q8_0, 0, 16));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q8_0, (WGLLM_REPACK_MAX_BLOCKS + 1) * 32, 16));
    CHECK(!wgllm_repack_supported(999, 64, 16));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_K, 2048 + 32, 16)); /* not whole super-blocks */
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_K, 2048, 24));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q6_K, 2048 + 64, 16));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q3_K, 2048 + 32, 16));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_IQ3_S, 2048, 16)); /* no layout */
#if defined(__x86_64__)
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q4_K, 2048, 5632), simd);
    const char *kname = NULL;
    wgllm_repack_kernel(&kname);
    /* Q2_K, Q3_K, Q5_K, Q6_K: AVX-512 VNNI only; IQ4_XS, IQ4_NL, Q5_0, Q4_1, Q5_1: AVX2 too */
    const bool avx512 = simd && (!strcmp(kname, "avx512") || !strcmp(kname, "amx"));
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q2_K, 2048, 5632), avx512);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q3_K, 5632, 2048), avx512);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q6_K, 5632, 2048), avx512);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q5_K, 5632, 2048), avx512);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_IQ4_XS, 5632, 2048), simd);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_IQ4_NL, 2048, 16), simd);
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_IQ4_NL, 2048 + 16, 16));
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q5_0, 2048, 16), simd);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q4_1, 2048, 5632), simd);
    CHECK_EQ_INT(wgllm_repack_supported(WGLLM_TYPE_Q5_1, 5632, 2048), simd);
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q5_1, 2048 + 16, 16));
#endif
    CHECK_EQ_INT(wgllm_repack_row_group(), 16);
    struct wgllm_repacked rp;
    struct wgllm_error err;
    uint8_t dummy[64] = {0};
    CHECK_EQ_INT(wgllm_repack(dummy, WGLLM_TYPE_Q4_0, 64, 8, &rp, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(rp.data == NULL && strstr(err.message, "64 x 8") != NULL);
    CHECK_EQ_INT(wgllm_repack(dummy, WGLLM_TYPE_IQ3_S, 256, 16, &rp, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "iq3_s") != NULL);
    wgllm_repacked_free(&rp); /* a zeroed struct is fine */
}

TEST(dispatch_follows_cpu) {
    const char *name = NULL;
    const wgllm_repacked_matmul_fn k = wgllm_repack_kernel(&name);
    const char *cap = getenv("WGLLM_CPU");
    if (cap && !strcmp(cap, "scalar")) CHECK(k == NULL);
#if defined(__x86_64__)
    if (cap && !strcmp(cap, "avx2") && wgllm_cpu_caps()->avx2) CHECK(k == wgllm_repacked_matmul_avx2);
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
    if (!cap && caps->avx512vnni)
        CHECK(k == (caps->amx_int8 ? wgllm_repacked_matmul_amx : wgllm_repacked_matmul_avx512));
    if (cap && !strcmp(cap, "avx512") && caps->avx512vnni) CHECK(k == wgllm_repacked_matmul_avx512 && !caps->amx_int8);
    if (k == wgllm_repacked_matmul_amx) CHECK(!strcmp(name, "amx"));
#endif
    fprintf(stderr, "  kernel: %s\n", name);
}

/* ---- benchmark (WGLLM_BENCH=1) ----------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_one(uint32_t type, int64_t ne0, int64_t ne1) {
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    const size_t row = wgllm_row_size(type, ne0), mat = row * (size_t)ne1;
    /* mat-vec over copies totalling >= 256 MiB, so it runs from DRAM, not L3 */
    const int copies = (int)((256u << 20) / mat) + 1;
    uint8_t *wq = make_matrix(type, ne0, ne1);
    uint8_t *wqs = malloc(mat * (size_t)copies);
    struct wgllm_repacked rp;
    WGLLM_ASSERT(wgllm_repack(wq, type, ne0, ne1, &rp, NULL) == WGLLM_STATUS_OK);
    uint8_t *rps = wgllm_alloc_aligned(rp.size * (size_t)copies);
    for (int c = 0; c < copies; c++) {
        memcpy(wqs + (size_t)c * mat, wq, mat);
        memcpy(rps + (size_t)c * rp.size, rp.data, rp.size);
    }
    enum { NT = 64 };
    const size_t xs = wgllm_row_size(act_type(type), ne0);
    uint8_t *x = make_acts_of(act_type(type), ne0, NT, xs);
    float *y = malloc(sizeof(float) * (size_t)ne1 * NT);
    double t_row = 1e9, t_nr = 1e9, t_rp = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int c = 0; c < copies; c++)
            for (int64_t r = 0; r < ne1; r++) tr->vec_dot(ne0, y + r, wqs + (size_t)c * mat + (size_t)r * row, x);
        double t1 = now_s();
        for (int c = 0; c < copies; c++)
            for (int64_t r = 0; r < ne1; r += 16)
                tr->vec_dot_nr(ne0, y + r, wqs + (size_t)c * mat + (size_t)r * row, row, x, 16);
        double t2 = now_s();
        for (int c = 0; c < copies; c++) {
            struct wgllm_repacked v = rp;
            v.data = rps + (size_t)c * rp.size;
            wgllm_repacked_matmul(&v, 0, ne1, x, xs, 1, y, (int)ne1, false);
        }
        double t3 = now_s();
        t_row = fmin(t_row, (t1 - t0) / copies), t_nr = fmin(t_nr, (t2 - t1) / copies);
        t_rp = fmin(t_rp, (t3 - t2) / copies);
    }
    printf("bench %s %lldx%lld n=1:  vec_dot %6.2f GB/s  vec_dot_nr %6.2f GB/s  repacked %6.2f GB/s\n",
           tr->name, (long long)ne1, (long long)ne0, mat / t_row / 1e9, mat / t_nr / 1e9, mat / t_rp / 1e9);
    /* mat-mat, one matrix (cache-resident: compute speed), loop as forward.c's matmul_rows */
    double g_row = 1e9, g_rp = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int64_t rb = 0; rb < ne1; rb += 16)
            for (int t = 0; t < NT; t++)
                for (int64_t r = rb; r < rb + 16; r++)
                    tr->vec_dot(ne0, y + (size_t)t * ne1 + r, wq + (size_t)r * row, x + (size_t)t * xs);
        double t1 = now_s();
        wgllm_repacked_matmul(&rp, 0, ne1, x, xs, NT, y, (int)ne1, false);
        double t2 = now_s();
        g_row = fmin(g_row, t1 - t0), g_rp = fmin(g_rp, t2 - t1);
    }
    const double flop = 2.0 * (double)ne0 * (double)ne1 * NT;
    printf("bench %s %lldx%lld n=%d: vec_dot %6.1f GFLOP/s (%7.0f tok/s)  repacked %6.1f GFLOP/s (%7.0f tok/s)\n",
           tr->name, (long long)ne1, (long long)ne0, NT, flop / g_row / 1e9, NT / g_row, flop / g_rp / 1e9,
           NT / g_rp);
    free(wq), free(wqs), free(x), free(y);
    wgllm_free_aligned(rps);
    wgllm_repacked_free(&rp);
}

static void bench(void) {
    const char *name;
    wgllm_repack_kernel(&name);
    printf("bench: repacked kernel %s, 1 thread\n", name);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        if (!wgllm_repack_supported(types[ti], 2048, 5632)) continue; /* the reference: not worth timing */
        bench_one(types[ti], 2048, 5632);
        bench_one(types[ti], 5632, 2048);
    }
}

/* ---- main -------------------------------------------------------------- */

int main(void) {
    wgllm_quant_init();
    light = getenv("WGLLM_CPU") != NULL;
    RUN(dispatch_follows_cpu);
    RUN(layout_bytes);
    RUN(layout_bytes_q4_1_q5_1);
    RUN(layout_bytes_q45_K);
    RUN(layout_bytes_q6_K);
    RUN(layout_bytes_iq4_xs);
    RUN(layout_bytes_q23_K);
    RUN(unsupported_shapes);
    RUN(kernels_equal_reference);
    RUN(kernels_equal_reference_at_extremes);
#if defined(__x86_64__)
    RUN(amx_equals_reference);
    RUN(amx_mutants_fail);
#endif
    RUN(rows_view_is_the_rows_repacked);
    RUN(matches_vec_dot);
    const char *b = getenv("WGLLM_BENCH");
    if (b && !strcmp(b, "1")) bench();
    if (!getenv("WGLLM_CPU")) {
        /* AMX: the dispatch to the AVX-512 kernel without it */
        if (wgllm_cpu_caps()->amx_int8) test_rerun_with_cpu_cap("avx512");
        if (wgllm_cpu_caps()->avx512vnni && wgllm_cpu_caps()->avx2) test_rerun_with_cpu_cap("avx2");
        test_rerun_with_cpu_cap("scalar");
    }
    return test_summary(getenv("WGLLM_CPU") ? "test_repack (WGLLM_CPU capped)" : "test_repack");
}
