/*
 * test_gemm.c - the float-weight GEMM (quant/gemm.h) for F32, F16 and BF16
 * weights: every result within 1e-5 of the sum of |terms| of the exact dot
 * (of the values the weights and the vec_dot_type activations hold), for
 * row lengths with and without a tail, tile edges in rows and tokens,
 * accumulate on and off, strides; and each (row, token) result the same
 * bits whatever else was computed with it (one token alone, the rows in
 * another range), which is what makes a prompt equal its tokens one by one.
 * The process re-runs itself with WGLLM_CPU=avx512 (where the CPU has
 * AVX512_BF16: its BF16 kernel without vdpbf16ps), avx2 and scalar (no
 * kernel there).
 *
 * WGLLM_BENCH=1 also prints mat-vec GB/s and 64-token mat-mat GFLOP/s on
 * one thread, GEMM vs the per-row vec_dot loop (not asserted).
 */
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ULL /* this file's data */
#include "test.h"

#include "quant/gemm.h"

#include <time.h>

static const uint32_t types[] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_BF16};

/* ne1 rows of `type`, row_bytes apart (>= the row size), from values of
 * varied magnitude (caller frees). */
static uint8_t *make_rows(uint32_t type, int64_t ne0, int64_t ne1, size_t row_bytes) {
    uint8_t *w = calloc((size_t)ne1, row_bytes);
    float *f = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < ne1; r++) {
        const float amp = 0.05f + 3.0f * (float)(rng_u32() % 1000) / 1000.0f;
        for (int64_t k = 0; k < ne0; k++) f[k] = amp * rng_uniform();
        wgllm_type_traits(type)->from_float(f, w + (size_t)r * row_bytes, ne0);
    }
    free(f);
    return w;
}

static double value_at(uint32_t type, const uint8_t *row, int64_t k) {
    if (type == WGLLM_TYPE_F32) return ((const float *)row)[k];
    if (type == WGLLM_TYPE_F16) return wgllm_fp16_lookup(((const wgllm_fp16 *)row)[k]);
    return wgllm_bf16_to_fp32(((const wgllm_bf16 *)row)[k]);
}

static bool has_kernel_here(void) {
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *c = wgllm_cpu_caps();
    return c->avx2 && c->fma && c->f16c;
#else
    return false;
#endif
}

TEST(kernel_present_where_the_cpu_has_one) {
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        CHECK((wgllm_gemm_kernel(types[i], NULL) != NULL) == has_kernel_here());
    CHECK(wgllm_gemm_kernel(WGLLM_TYPE_Q4_0, NULL) == NULL);
    /* no tokens (a pass whose last layer has no outputs) or no rows: nothing written */
    const wgllm_gemm_fn gemm = wgllm_gemm_kernel(WGLLM_TYPE_F16, NULL);
    if (gemm) {
        const wgllm_fp16 w[16] = {0}, x[16] = {0};
        float y = 7.0f;
        CHECK(gemm(WGLLM_TYPE_F16, 16, w, sizeof w, 1, x, sizeof x, 0, &y, 1, false) && y == 7.0f);
        CHECK(gemm(WGLLM_TYPE_F16, 16, w, sizeof w, 0, x, sizeof x, 1, &y, 1, false) && y == 7.0f);
    }
}

/* Results of y (n tokens of ldy, on top of the 0.5 * (i % 7) they started
 * from when accumulating) farther than 1e-5 of the sum of |terms| from the
 * exact dot of w's rows (type) and x's (vdt); the first few printed. */
static int off_the_exact_dot(uint32_t type, const uint8_t *w, size_t ws, uint32_t vdt, const uint8_t *x, size_t xs,
                             int64_t K, int64_t nrows, int n, const float *y, int ldy, bool accumulate,
                             const char *what) {
    int bad = 0;
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < nrows; r++) {
            double d = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                const double p = value_at(type, w + (size_t)r * ws, k) * value_at(vdt, x + (size_t)t * xs, k);
                d += p, mag += fabs(p);
            }
            const double base = accumulate ? 0.5 * (double)((t * ldy + r) % 7) : 0.0;
            if (fabs(y[(size_t)t * ldy + r] - base - d) > 1e-5 * mag + 1e-6 && bad++ < 3)
                fprintf(stderr, "  %s%s K=%lld row %lld token %d: %.7g, exact %.7g\n", wgllm_type_name(type), what,
                        (long long)K, (long long)r, t, y[(size_t)t * ldy + r] - base, d);
        }
    return bad;
}

/* The products of one shape against the exact dot, and against themselves
 * computed one token and a sub-range of rows at a time. */
static void check_shape(uint32_t type, int64_t K, int64_t nrows, int n, bool accumulate) {
    const wgllm_gemm_fn gemm = wgllm_gemm_kernel(type, NULL);
    CHECK(gemm != NULL);
    if (!gemm) return;
    const uint32_t vdt = wgllm_type_traits(type)->vec_dot_type;
    const size_t ws = wgllm_row_size(type, K) + 64, xs = wgllm_row_size(vdt, K) + 32;
    const int ldy = (int)nrows + 3;
    uint8_t *w = make_rows(type, K, nrows, ws), *x = make_rows(vdt, K, n, xs);
    float *y = malloc(sizeof(float) * (size_t)ldy * n), *y1 = malloc(sizeof(float) * (size_t)ldy * n);
    for (int i = 0; i < ldy * n; i++) y[i] = y1[i] = 0.5f * (float)(i % 7);
    CHECK(gemm(type, K, w, ws, nrows, x, xs, n, y, ldy, accumulate));
    int diff = 0;
    CHECK(off_the_exact_dot(type, w, ws, vdt, x, xs, K, nrows, n, y, ldy, accumulate, "") == 0);
    /* token by token, rows from an odd offset in two ranges */
    const int64_t split = nrows / 3;
    for (int t = 0; t < n; t++) {
        const uint8_t *xt = x + (size_t)t * xs;
        float *yt = y1 + (size_t)t * ldy;
        CHECK(gemm(type, K, w, ws, split, xt, xs, 1, yt, ldy, accumulate));
        CHECK(gemm(type, K, w + (size_t)split * ws, ws, nrows - split, xt, xs, 1, yt + split, ldy, accumulate));
    }
    for (int i = 0; i < ldy * n; i++) diff += memcmp(&y[i], &y1[i], sizeof(float)) != 0;
    if (diff) fprintf(stderr, "  %s K=%lld: %d results differ one token at a time\n", wgllm_type_name(type), (long long)K, diff);
    CHECK(diff == 0);
    free(w), free(x), free(y), free(y1);
}

TEST(products_against_the_exact_dot_and_token_by_token) {
    if (!has_kernel_here()) {
        CHECK(wgllm_gemm_kernel(WGLLM_TYPE_F16, NULL) == NULL);
        return;
    }
    static const int64_t Ks[] = {1, 7, 16, 40, 64, 257, 2048 + 24};
    static const struct { int64_t nrows; int n; } tiles[] = {{1, 1}, {5, 3}, {16, 7}, {37, 13}, {64, 64}};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
        for (size_t ki = 0; ki < sizeof(Ks) / sizeof(Ks[0]); ki++)
            for (size_t s = 0; s < sizeof(tiles) / sizeof(tiles[0]); s++)
                check_shape(types[ti], Ks[ki], tiles[s].nrows, tiles[s].n, (ki + s) % 2 == 1);
}

/* Large enough that a token tile (512 KiB to 4 MiB of f32 rows, by this
 * CPU's caches: 7 to 63 rows of 16392) holds fewer tokens than the prompt:
 * several tiles, and a last partial one. */
TEST(several_token_tiles) {
    if (!has_kernel_here()) return;
    check_shape(WGLLM_TYPE_F16, 16384 + 8, 9, 70, false);
    check_shape(WGLLM_TYPE_BF16, 16384 + 8, 9, 70, true);
}

/* ---- the panel layout (F16 and BF16 with AVX-512) ------------------------ */

static bool has_panels_here(void) {
#if defined(__x86_64__)
    const struct wgllm_cpu_caps *c = wgllm_cpu_caps();
    return c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl;
#else
    return false;
#endif
}

TEST(panels_where_the_cpu_has_them) {
    CHECK(wgllm_gemm_panels_supported(WGLLM_TYPE_F16, 64, 32) == has_panels_here());
    CHECK(!wgllm_gemm_panels_supported(WGLLM_TYPE_F16, 64, 40)); /* not whole panels */
    CHECK(!wgllm_gemm_panels_supported(WGLLM_TYPE_F16, 0, 32));
    CHECK(wgllm_gemm_panels_supported(WGLLM_TYPE_BF16, 64, 32) == has_panels_here());
    CHECK(!wgllm_gemm_panels_supported(WGLLM_TYPE_F32, 64, 32));
    CHECK(!wgllm_gemm_panels_supported(WGLLM_TYPE_Q4_0, 64, 32));
    /* the layout: row r's element k at panel r / 16, position k * 16 + r % 16 */
    enum { K = 37, N = 48 };
    uint16_t src[N][K + 3], dst[N * K];
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K + 3; k++) src[r][k] = (uint16_t)(r * 1000 + k);
    wgllm_gemm_pack_panels(WGLLM_TYPE_F16, K, src, sizeof src[0], N, dst);
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K; k++) bad += dst[(r / 16) * 16 * K + k * 16 + r % 16] != src[r][k];
    CHECK(bad == 0);
}

/* One shape in the panel layout: against the exact dot, and each result the
 * same bits computed one token at a time over two ranges of panels. */
static void check_panels(uint32_t type, int64_t K, int64_t nrows, int n, bool accumulate) {
    const size_t ws = wgllm_row_size(type, K) + 64, xs = wgllm_row_size(type, K) + 32;
    const int ldy = (int)nrows + 3;
    uint8_t *w = make_rows(type, K, nrows, ws), *x = make_rows(type, K, n, xs);
    uint16_t *pw = malloc(wgllm_row_size(type, K) * (size_t)nrows);
    float *y = malloc(sizeof(float) * (size_t)ldy * n), *y1 = malloc(sizeof(float) * (size_t)ldy * n);
    wgllm_gemm_pack_panels(type, K, w, ws, nrows, pw);
    for (int i = 0; i < ldy * n; i++) y[i] = y1[i] = 0.5f * (float)(i % 7);
    CHECK(wgllm_gemm_panels(type, K, pw, nrows, x, xs, n, y, ldy, accumulate));
    int diff = 0;
    CHECK(off_the_exact_dot(type, w, ws, type, x, xs, K, nrows, n, y, ldy, accumulate, " panels") == 0);
    const int64_t split = 16 * (nrows / 48); /* a whole number of panels, 0 for one or two */
    for (int t = 0; t < n; t++) {
        const uint8_t *xt = x + (size_t)t * xs;
        float *yt = y1 + (size_t)t * ldy;
        if (split) CHECK(wgllm_gemm_panels(type, K, pw, split, xt, xs, 1, yt, ldy, accumulate));
        CHECK(wgllm_gemm_panels(type, K, pw + (size_t)split * K, nrows - split, xt, xs, 1, yt + split, ldy, accumulate));
    }
    for (int i = 0; i < ldy * n; i++) diff += memcmp(&y[i], &y1[i], sizeof(float)) != 0;
    if (diff)
        fprintf(stderr, "  %s panels K=%lld: %d results differ one token at a time\n", wgllm_type_name(type),
                (long long)K, diff);
    CHECK(diff == 0);
    free(w), free(x), free(pw), free(y), free(y1);
}

TEST(panel_products_against_the_exact_dot_and_token_by_token) {
    if (!has_panels_here()) return;
    /* K around the 256-element blocks; rows for 4, 2 and 1 panels at once;
     * groups of 1, 4 and 12 tokens and partial ones */
    static const int64_t Ks[] = {1, 7, 255, 256, 257, 2048 + 24};
    static const struct { int64_t nrows; int n; } tiles[] = {{16, 1}, {48, 3}, {80, 7}, {112, 13}, {64, 64}, {32, 25}};
    static const uint32_t ptypes[] = {WGLLM_TYPE_F16, WGLLM_TYPE_BF16};
    for (int pi = 0; pi < 2; pi++) {
        for (size_t ki = 0; ki < sizeof(Ks) / sizeof(Ks[0]); ki++)
            for (size_t s = 0; s < sizeof(tiles) / sizeof(tiles[0]); s++)
                check_panels(ptypes[pi], Ks[ki], tiles[s].nrows, tiles[s].n, (ki + s + pi) % 2 == 1);
        check_panels(ptypes[pi], 16384 + 8, 48, 70, pi == 1); /* several token tiles, the last partial */
    }
}

/* ---- benchmark (WGLLM_BENCH=1) ----------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_one(uint32_t type, int64_t K, int64_t nrows) {
    const wgllm_gemm_fn gemm = wgllm_gemm_kernel(type, NULL);
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    const uint32_t vdt = tr->vec_dot_type;
    const size_t ws = wgllm_row_size(type, K), mat = ws * (size_t)nrows, xs = wgllm_row_size(vdt, K);
    const int copies = (int)((256u << 20) / mat) + 1; /* mat-vec from DRAM, not L3 */
    uint8_t *w = make_rows(type, K, nrows, ws), *ws_all = malloc(mat * (size_t)copies);
    for (int c = 0; c < copies; c++) memcpy(ws_all + (size_t)c * mat, w, mat);
    enum { NT = 64 };
    uint8_t *x = make_rows(vdt, K, NT, xs);
    float *y = malloc(sizeof(float) * (size_t)nrows * NT);
    double mv_row = 1e9, mv_gemm = 1e9, mm_row = 1e9, mm_gemm = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int c = 0; c < copies; c++)
            for (int64_t r = 0; r < nrows; r++) tr->vec_dot(K, y + r, ws_all + (size_t)c * mat + (size_t)r * ws, x);
        mv_row = WGLLM_MIN(mv_row, (now_s() - t0) / copies);
        t0 = now_s();
        for (int c = 0; c < copies; c++) gemm(type, K, ws_all + (size_t)c * mat, ws, nrows, x, xs, 1, y, (int)nrows, false);
        mv_gemm = WGLLM_MIN(mv_gemm, (now_s() - t0) / copies);
        t0 = now_s();
        for (int t = 0; t < NT; t++)
            for (int64_t r = 0; r < nrows; r++) tr->vec_dot(K, y + (size_t)t * nrows + r, w + (size_t)r * ws, x + (size_t)t * xs);
        mm_row = WGLLM_MIN(mm_row, now_s() - t0);
        t0 = now_s();
        gemm(type, K, w, ws, nrows, x, xs, NT, y, (int)nrows, false);
        mm_gemm = WGLLM_MIN(mm_gemm, now_s() - t0);
    }
    const double flop = 2.0 * (double)K * nrows * NT;
    printf("  %-5s %5lld x %5lld  mat-vec GB/s: vec_dot %6.1f  gemm %6.1f   %d-token GFLOP/s: vec_dot %6.1f  gemm %6.1f\n",
           wgllm_type_name(type), (long long)nrows, (long long)K, mat / mv_row / 1e9, mat / mv_gemm / 1e9, NT,
           flop / mm_row / 1e9, flop / mm_gemm / 1e9);
    if (wgllm_gemm_panels_supported(type, K, nrows)) {
        for (int c = 0; c < copies; c++)
            wgllm_gemm_pack_panels(type, K, w, ws, nrows, ws_all + (size_t)c * mat);
        double mv = 1e9, mm = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            for (int c = 0; c < copies; c++)
                wgllm_gemm_panels(type, K, ws_all + (size_t)c * mat, nrows, x, xs, 1, y, (int)nrows, false);
            mv = WGLLM_MIN(mv, (now_s() - t0) / copies);
            t0 = now_s();
            wgllm_gemm_panels(type, K, ws_all, nrows, x, xs, NT, y, (int)nrows, false);
            mm = WGLLM_MIN(mm, now_s() - t0);
        }
        printf("  %-5s %5lld x %5lld  panels: mat-vec GB/s %6.1f   %d-token GFLOP/s %6.1f\n", wgllm_type_name(type),
               (long long)nrows, (long long)K, mat / mv / 1e9, NT, flop / mm / 1e9);
    }
    free(w), free(ws_all), free(x), free(y);
}

static void bench(void) {
    const char *name = "none";
    wgllm_gemm_kernel(WGLLM_TYPE_F16, &name);
    printf("gemm benchmark, 1 thread, kernel %s\n", name);
    if (!has_kernel_here()) return;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        bench_one(types[i], 2048, 2048);
        bench_one(types[i], 5632, 2048);
    }
}

int main(void) {
    wgllm_quant_init();
    RUN(kernel_present_where_the_cpu_has_one);
    RUN(products_against_the_exact_dot_and_token_by_token);
    RUN(several_token_tiles);
    RUN(panels_where_the_cpu_has_them);
    RUN(panel_products_against_the_exact_dot_and_token_by_token);
    const char *b = getenv("WGLLM_BENCH");
    if (b && !strcmp(b, "1")) bench();
    if (!getenv("WGLLM_CPU")) {
        if (wgllm_cpu_caps()->avx512bf16) test_rerun_with_cpu_cap("avx512"); /* BF16 without vdpbf16ps */
        if (wgllm_cpu_caps()->avx512f) test_rerun_with_cpu_cap("avx2");
        test_rerun_with_cpu_cap("scalar");
    }
    return test_summary(getenv("WGLLM_CPU") ? "test_gemm (WGLLM_CPU capped)" : "test_gemm");
}
