/*
 * test_simd128.c - the WebAssembly SIMD128 kernels (src/quant/quant_wasm.c)
 * against the scalar reference, bit for bit: the browser build must give
 * the native portable build's tokens (tests/web compares them), so a kernel
 * that is merely close is a failure here. Built and run under node by
 * `make wasm-test` (web/wasm.mk); not part of the native build.
 *
 * WGLLM_BENCH=1 also prints each kernel's speed next to the reference's.
 */
#include "../test.h"

#include "quant/fp4tq.h"
#include "quant/iquants.h"
#include "quant/kquants.h"
#include "quant/quant.h"

#include <math.h>
#include <time.h>

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)(rnd() & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f; }

/* Blocks of different scales, all-zero blocks and outliers, as real
 * activations have. */
static void fill(float *x, int n) {
    for (int b = 0; b < n; b += 32) {
        const int kind = (int)(rnd() % 6);
        const float scale = kind == 1 ? 300.0f : kind == 2 ? 1e-3f : 1.0f;
        for (int j = b; j < b + 32 && j < n; j++) x[j] = kind == 0 ? 0.0f : scale * (rndf() + rndf() + rndf());
        if (kind == 3) x[b + (int)(rnd() % 32)] = -40.0f;
    }
}

static bool same_bits(float a, float b) { return !memcmp(&a, &b, sizeof(a)); }

#ifdef __wasm_simd128__
TEST(kernels_are_installed) {
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q4_0)->vec_dot != wgllm_type_traits_ref(WGLLM_TYPE_Q4_0)->vec_dot);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q8_0)->vec_dot != wgllm_type_traits_ref(WGLLM_TYPE_Q8_0)->vec_dot);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float != wgllm_type_traits_ref(WGLLM_TYPE_Q8_0)->from_float);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q4_K)->vec_dot != wgllm_type_traits_ref(WGLLM_TYPE_Q4_K)->vec_dot);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q6_K)->vec_dot != wgllm_type_traits_ref(WGLLM_TYPE_Q6_K)->vec_dot);
    CHECK(wgllm_type_traits(WGLLM_TYPE_F16)->vec_dot_nr != wgllm_type_traits_ref(WGLLM_TYPE_F16)->vec_dot_nr);
}
#endif

/* Every row length from one block to several groups of four, plus a long one. */
static const int lengths[] = {32, 64, 96, 128, 160, 224, 256, 288, 4096, 4128};
#define N_LEN (int)(sizeof(lengths) / sizeof(lengths[0]))

TEST(quantized_dots_bit_identical) {
    static float x[4128], y[4128];
    static uint8_t qx[4128 * 2], qy[4128 * 2];
    const uint32_t types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0};
    int bad = 0;
    for (int ti = 0; ti < 2; ti++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(types[ti]), *r = wgllm_type_traits_ref(types[ti]);
        for (int li = 0; li < N_LEN; li++) {
            const int n = lengths[li];
            for (int rep = 0; rep < 20; rep++) {
                fill(x, n);
                fill(y, n);
                r->from_float_ref(x, qx, n);
                wgllm_type_traits_ref(WGLLM_TYPE_Q8_0)->from_float(y, qy, n);
                float a = NAN, b = NAN;
                t->vec_dot(n, &a, qx, qy);
                r->vec_dot(n, &b, qx, qy);
                if (!same_bits(a, b) && bad++ < 5)
                    fprintf(stderr, "  %s n=%d: %.9g vs reference %.9g\n", t->name, n, a, b);
                /* the multi-row entry goes through the same kernel */
                float m[3] = {0};
                t->vec_dot_nr(n, m, qx, 0, qy, 3);
                if (!same_bits(m[2], b) && bad++ < 5) fprintf(stderr, "  %s n=%d: vec_dot_nr differs\n", t->name, n);
            }
        }
    }
    CHECK(bad == 0);
}

/* vec_dot_mt: each token's result bit-identical to vec_dot (its contract). */
TEST(multi_token_dots_equal_single) {
    enum { N = 4128, T = WGLLM_VEC_DOT_MT_MAX };
    static float x[N];
    static uint8_t qx[N * 2], qy[T][N * 2];
    const uint32_t types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0};
    int bad = 0;
    for (int ti = 0; ti < 2; ti++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(types[ti]);
        CHECK(t->vec_dot_mt != NULL);
        if (!t->vec_dot_mt) continue;
        for (int li = 0; li < N_LEN; li++) {
            const int n = lengths[li];
            fill(x, n);
            wgllm_type_traits_ref(types[ti])->from_float_ref(x, qx, n);
            for (int k = 0; k < T; k++) {
                fill(x, n);
                wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float(x, qy[k], n);
            }
            for (int nt = 1; nt <= T; nt++) {
                float got[2 * T];
                t->vec_dot_mt(n, got, 2, qx, qy, sizeof(qy[0]), nt);
                for (int k = 0; k < nt; k++) {
                    float want = NAN;
                    t->vec_dot(n, &want, qx, qy[k]);
                    if (!same_bits(got[2 * k], want) && bad++ < 5)
                        fprintf(stderr, "  %s n=%d nt=%d token %d: %.9g vs %.9g\n", t->name, n, nt, k, got[2 * k], want);
                }
            }
        }
    }
    CHECK(bad == 0);
}

TEST(k_quant_dots_bit_identical) {
    static float x[8 * 256], y[8 * 256];
    static uint8_t qx[8 * 256], qy[8 * 292];
    const uint32_t types[] = {WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K};
    int bad = 0, checked = 0;
    for (int ti = 0; ti < 2; ti++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(types[ti]), *r = wgllm_type_traits_ref(types[ti]);
        for (int nb = 1; nb <= 8; nb++) {
            const int n = 256 * nb;
            for (int rep = 0; rep < 25; rep++) {
                fill(x, n);
                fill(y, n);
                r->from_float_ref(x, qx, n);
                wgllm_type_traits_ref(WGLLM_TYPE_Q8_K)->from_float(y, qy, n);
                float a = NAN, b = NAN, m[2] = {0};
                t->vec_dot(n, &a, qx, qy);
                r->vec_dot(n, &b, qx, qy);
                t->vec_dot_nr(n, m, qx, 0, qy, 2);
                checked++;
                if ((!same_bits(a, b) || !same_bits(m[1], b)) && bad++ < 5)
                    fprintf(stderr, "  %s n=%d: %.9g (nr %.9g) vs reference %.9g\n", t->name, n, a, m[1], b);
            }
        }
    }
    CHECK(bad == 0 && checked == 400);
}

/* MXFP4 (blocks of 32: odd counts too), NVFP4, Q1_0 and the ternary formats, from the
 * quantizer and from random bytes (every code, TQ2_0's unused 3 and TQ1_0's
 * bytes past 242 included). */
TEST(fp4tq_dots_bit_identical) {
    static float x[8 * 256], y[8 * 256];
    static uint8_t qx[8 * 256], qy[8 * 292];
    const uint32_t types[] = {WGLLM_TYPE_MXFP4, WGLLM_TYPE_TQ2_0, WGLLM_TYPE_TQ1_0, WGLLM_TYPE_Q1_0, WGLLM_TYPE_NVFP4};
    int bad = 0, checked = 0;
    for (int ti = 0; ti < 5; ti++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(types[ti]), *r = wgllm_type_traits_ref(types[ti]);
        CHECK(t->vec_dot != r->vec_dot);
        const struct wgllm_type_traits *vt = wgllm_type_traits_ref(r->vec_dot_type);
        for (int nb = 1; nb <= 8; nb++) {
            const int n = types[ti] == WGLLM_TYPE_MXFP4 ? 32 * (8 * nb - 1) : 256 * nb;
            for (int rep = 0; rep < 20; rep++) {
                fill(x, n);
                fill(y, n);
                r->from_float_ref(x, qx, n);
                if (rep % 2) { /* random bytes, sane scales */
                    const size_t bs = r->type_size, rs = wgllm_row_size(types[ti], n);
                    for (size_t i = 0; i < rs; i++) qx[i] = (uint8_t)rnd();
                    for (size_t b = 0; b < rs / bs; b++) {
                        const wgllm_fp16 d = wgllm_fp32_to_fp16(0.01f + (float)(rnd() % 100) / 50.0f);
                        if (types[ti] == WGLLM_TYPE_MXFP4) qx[b * bs] = (uint8_t)(118 + rnd() % 16);
                        else if (types[ti] == WGLLM_TYPE_Q1_0) memcpy(qx + b * bs, &d, 2);
                        else memcpy(qx + b * bs + bs - 2, &d, 2);
                    }
                }
                vt->from_float(y, qy, n);
                float a = NAN, b = NAN, m[2] = {0};
                t->vec_dot(n, &a, qx, qy);
                r->vec_dot(n, &b, qx, qy);
                t->vec_dot_nr(n, m, qx, 0, qy, 2);
                checked++;
                if ((!same_bits(a, b) || !same_bits(m[1], b)) && bad++ < 5)
                    fprintf(stderr, "  %s n=%d: %.9g (nr %.9g) vs reference %.9g\n", t->name, n, a, m[1], b);
            }
        }
    }
    CHECK(bad == 0 && checked == 800);
}

/* The seven I-quants (no wgllm quantizer: random bytes with sane fp16
 * scales reach every grid index, sign pattern and scale). */
TEST(iquant_dots_bit_identical) {
    static float y[8 * 256];
    static uint8_t qx[8 * 256], qy[8 * 292];
    const uint32_t types[] = {WGLLM_TYPE_IQ2_XXS, WGLLM_TYPE_IQ2_XS, WGLLM_TYPE_IQ2_S, WGLLM_TYPE_IQ3_XXS,
                              WGLLM_TYPE_IQ3_S,   WGLLM_TYPE_IQ1_S,  WGLLM_TYPE_IQ1_M};
    int bad = 0, checked = 0;
    for (int ti = 0; ti < 7; ti++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(types[ti]), *r = wgllm_type_traits_ref(types[ti]);
        CHECK(t->vec_dot != r->vec_dot);
        for (int nb = 1; nb <= 8; nb++) {
            const int n = 256 * nb;
            for (int rep = 0; rep < 10; rep++) {
                const size_t bs = r->type_size, rs = wgllm_row_size(types[ti], n);
                for (size_t i = 0; i < rs; i++) qx[i] = (uint8_t)rnd();
                for (size_t b = 0; b < rs / bs; b++) {
                    const wgllm_fp16 d = wgllm_fp32_to_fp16(0.01f + (float)(rnd() % 100) / 50.0f);
                    if (types[ti] == WGLLM_TYPE_IQ1_M) { /* its scale: the top nibbles of the last four u16 */
                        uint16_t sc[4];
                        memcpy(sc, qx + b * bs + bs - 8, 8);
                        for (int k = 0; k < 4; k++) sc[k] = (uint16_t)((sc[k] & 0x0FFF) | ((d >> (4 * k)) & 0xF) << 12);
                        memcpy(qx + b * bs + bs - 8, sc, 8);
                    } else {
                        memcpy(qx + b * bs, &d, 2);
                    }
                }
                fill(y, n);
                wgllm_type_traits_ref(WGLLM_TYPE_Q8_K)->from_float(y, qy, n);
                float a = NAN, b = NAN, m[2] = {0};
                t->vec_dot(n, &a, qx, qy);
                r->vec_dot(n, &b, qx, qy);
                t->vec_dot_nr(n, m, qx, 0, qy, 2);
                checked++;
                if ((!same_bits(a, b) || !same_bits(m[1], b)) && bad++ < 5)
                    fprintf(stderr, "  %s n=%d: %.9g (nr %.9g) vs reference %.9g\n", t->name, n, a, m[1], b);
            }
        }
    }
    CHECK(bad == 0 && checked == 560);
}

/* Several F16 rows against one y (the attention's scores and its V rows):
 * vec_dot_nr bit-identical to the reference vec_dot row by row, for row
 * counts around its passes of four, lengths odd and even, rows wider than
 * their length (the KV cache's strides), and values from subnormal to the
 * largest finite ones. */
TEST(f16_rows_bit_identical) {
    enum { NMAX = 300, RMAX = 11, STRIDE = NMAX + 5 };
    static wgllm_fp16 x[RMAX * STRIDE], y[NMAX];
    const struct wgllm_type_traits *t = wgllm_type_traits(WGLLM_TYPE_F16), *r = wgllm_type_traits_ref(WGLLM_TYPE_F16);
    const int ns[] = {1, 3, 64, 65, 128, 300};
    int bad = 0;
    for (int ni = 0; ni < 6; ni++)
        for (int nr = 1; nr <= RMAX; nr++) {
            const int n = ns[ni];
            for (int i = 0; i < RMAX * STRIDE; i++) {
                const uint32_t k = rnd() % 16;
                x[i] = k == 0 ? (wgllm_fp16)(rnd() & 0x83FF) /* subnormal */ : k == 1 ? 0x7BFF : k == 2 ? 0x8000
                     : wgllm_fp32_to_fp16(rndf() * (k < 8 ? 4.0f : 0.01f));
            }
            for (int i = 0; i < n; i++) y[i] = wgllm_fp32_to_fp16(rndf() * (i % 7 == 0 ? 60000.0f : 1.0f));
            float got[RMAX], want;
            t->vec_dot_nr(n, got, x, STRIDE * sizeof(wgllm_fp16), y, nr);
            for (int k = 0; k < nr; k++) {
                r->vec_dot(n, &want, x + (size_t)k * STRIDE, y);
                if (!same_bits(got[k], want) && bad++ < 5)
                    fprintf(stderr, "  f16 n=%d nr=%d row %d: %.9g vs reference %.9g\n", n, nr, k, got[k], want);
            }
        }
    CHECK(bad == 0);
}

TEST(q8_0_quantizer_bytes_identical) {
    static float x[4096];
    static uint8_t a[4096 * 2], b[4096 * 2];
    const size_t bytes = wgllm_row_size(WGLLM_TYPE_Q8_0, 4096);
    int bad = 0;
    for (int rep = 0; rep < 50; rep++) {
        fill(x, 4096);
        if (rep == 1) /* exact .5 ties after scaling: amax 127 makes id 1 */
            for (int j = 0; j < 32; j++) x[j] = j == 0 ? 127.0f : (float)(j % 9) - 4.5f;
        memset(a, 0x55, sizeof(a));
        memset(b, 0xAA, sizeof(b));
        wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float(x, a, 4096);
        wgllm_type_traits_ref(WGLLM_TYPE_Q8_0)->from_float(x, b, 4096);
        if (memcmp(a, b, bytes) && bad++ < 3) fprintf(stderr, "  q8_0 from_float differs (rep %d)\n", rep);
    }
    CHECK(bad == 0);
}

/* ---- WGLLM_BENCH=1: kernel vs reference speed (not asserted) ------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(void) {
    enum { N = 4096, ROWS = 512 };
    static float x[N];
    const uint32_t types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K};
    for (int ti = 0; ti < 4; ti++) {
        const uint32_t type = types[ti];
        const struct wgllm_type_traits *t = wgllm_type_traits(type), *r = wgllm_type_traits_ref(type);
        const size_t row = wgllm_row_size(type, N);
        uint8_t *w = malloc(row * ROWS), *qy = malloc(wgllm_row_size(WGLLM_TYPE_Q8_K, N) + N * 4);
        for (int k = 0; k < ROWS; k++) {
            fill(x, N);
            r->from_float_ref(x, w + (size_t)k * row, N);
        }
        fill(x, N);
        wgllm_type_traits(t->vec_dot_type)->from_float(x, qy, N);
        double best[2] = {1e9, 1e9};
        float s;
        for (int rep = 0; rep < 5; rep++)
            for (int v = 0; v < 2; v++) {
                const wgllm_vec_dot_fn f = v ? r->vec_dot : t->vec_dot;
                const double t0 = now_s();
                for (int k = 0; k < ROWS; k++) f(N, &s, w + (size_t)k * row, qy);
                best[v] = fmin(best[v], now_s() - t0);
            }
        const double gb = (double)row * ROWS / 1e9;
        printf("bench %-5s simd128 %6.2f GB/s   scalar %6.2f GB/s   (x%.1f)\n", t->name, gb / best[0], gb / best[1],
               best[1] / best[0]);
        if (t->vec_dot_mt) { /* 8 tokens: one multi-token call vs 8 single ones, per row */
            const size_t ys = wgllm_row_size(t->vec_dot_type, N);
            uint8_t *y8 = malloc(ys * 8);
            for (int k = 0; k < 8; k++) memcpy(y8 + (size_t)k * ys, qy, ys);
            double b8[2] = {1e9, 1e9};
            float o[8];
            for (int rep = 0; rep < 3; rep++)
                for (int v = 0; v < 2; v++) {
                    const double t0 = now_s();
                    for (int k = 0; k < ROWS; k++) {
                        if (v) {
                            for (int j = 0; j < 8; j++) t->vec_dot(N, &o[j], w + (size_t)k * row, y8 + (size_t)j * ys);
                        } else {
                            t->vec_dot_mt(N, o, 1, w + (size_t)k * row, y8, ys, 8);
                        }
                    }
                    b8[v] = fmin(b8[v], now_s() - t0);
                }
            printf("bench %-5s 8 tokens: vec_dot_mt %.2f ms   8 x vec_dot %.2f ms\n", t->name, b8[0] * 1e3, b8[1] * 1e3);
            free(y8);
        }
        free(w);
        free(qy);
    }
}

int main(void) {
    wgllm_quant_init();
#ifdef __wasm_simd128__
    RUN(kernels_are_installed);
#endif
    RUN(quantized_dots_bit_identical);
    RUN(multi_token_dots_equal_single);
    RUN(k_quant_dots_bit_identical);
    RUN(fp4tq_dots_bit_identical);
    RUN(iquant_dots_bit_identical);
    RUN(f16_rows_bit_identical);
    RUN(q8_0_quantizer_bytes_identical);
    const char *b = getenv("WGLLM_BENCH");
    if (b && !strcmp(b, "1")) bench();
    return test_summary("test_simd128 (wasm)");
}
