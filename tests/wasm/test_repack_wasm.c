/*
 * test_repack_wasm.c - the SIMD128 products over the interleaved Q4_0/Q8_0
 * layout (src/quant/repack_wasm.c) against the scalar per-row reference
 * vec_dot of quant.c, bit for bit: the browser build must give the native
 * portable build's tokens (tests/web compares them). Shapes cross the
 * kernel's activation chunks (128 blocks for one token, 32 for a tile of 4)
 * and panel groups (256 rows); odd and even panel counts (one token runs
 * panels in pairs); token counts cross its tiles of 4; sub-ranges of rows,
 * accumulate on and off, activation strides wider than a row. Also: the
 * build dispatches to it. Run twice by `make wasm-test`: the Q4_0
 * products go through the relaxed-SIMD module (repack_relaxed.c) in the run
 * with node's relaxed SIMD on (--relaxed), through SIMD128 in the other.
 * Built and run under node by `make wasm-test` (web/wasm.mk).
 *
 * WGLLM_BENCH=1 also prints mat-vec GB/s, repacked vs the per-row SIMD128
 * vec_dot loop (not asserted).
 */
#include "../test.h"

#include "quant/quant.h"
#include "quant/repack.h"
#include "quant/repack_relaxed.h"

#include <time.h>

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)(rnd() & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f; }

/* Blocks of different magnitudes, all-zero blocks and outliers. */
static void fill(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        const int kind = (int)(rnd() % 5);
        const float amp = kind == 1 ? 200.0f : kind == 2 ? 1e-3f : 0.05f + 3.0f * (float)(rnd() % 1000) / 1000.0f;
        for (int64_t j = b; j < b + 32; j++) x[j] = kind == 0 ? 0.0f : amp * rndf();
        if (kind == 3) x[b + (int)(rnd() % 32)] = -40.0f;
    }
}

static bool same_bits(float a, float b) { return !memcmp(&a, &b, sizeof(a)); }

/* When set, every third Q4_0 weight block gets one of these scales: zero,
 * negative zero, subnormals, the smallest normal, the largest finite ones
 * (the relaxed module converts fp16 with arithmetic, not the table). */
static bool special_scales;
static const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0x8401};

static int printed; /* mismatches shown, over all cases */

/* One case: a ne1 x ne0 matrix, n tokens at `stride` bytes, rows [r0, r1). */
static int check_case(uint32_t type, int64_t ne0, int64_t ne1, int n, size_t extra, int64_t r0, int64_t r1,
                      bool accumulate) {
    const uint32_t vdt = wgllm_type_traits_ref(type)->vec_dot_type; /* Q8_0, or Q8_K for Q4_K */
    const size_t row = wgllm_row_size(type, ne0), xrow = wgllm_row_size(vdt, ne0), stride = xrow + extra;
    uint8_t *w = malloc(row * (size_t)ne1), *x = calloc((size_t)n, stride);
    float *f = malloc(sizeof(float) * (size_t)ne0), *y = malloc(sizeof(float) * (size_t)n * ne1),
          *want = malloc(sizeof(float) * (size_t)n * ne1);
    for (int64_t r = 0; r < ne1; r++) {
        fill(f, ne0);
        wgllm_type_traits_ref(type)->from_float_ref(f, w + (size_t)r * row, ne0);
        if (special_scales && type == WGLLM_TYPE_Q4_0)
            for (int64_t b = r % 3; b < ne0 / 32; b += 3) {
                wgllm_block_q4_0 *blk = (wgllm_block_q4_0 *)(w + (size_t)r * row) + b;
                blk->d = specials[(r + b) % (sizeof(specials) / sizeof(specials[0]))];
            }
    }
    for (int t = 0; t < n; t++) {
        fill(f, ne0);
        wgllm_type_traits_ref(vdt)->from_float(f, x + (size_t)t * stride, ne0);
    }
    for (int64_t i = 0; i < (int64_t)n * ne1; i++) y[i] = want[i] = (float)(rnd() % 7) - 3.0f;
    const wgllm_vec_dot_fn ref = wgllm_type_traits_ref(type)->vec_dot;
    for (int t = 0; t < n; t++)
        for (int64_t r = r0; r < r1; r++) {
            float s;
            ref(ne0, &s, w + (size_t)r * row, x + (size_t)t * stride);
            float *d = want + (size_t)t * ne1 + r;
            *d = accumulate ? *d + s : s;
        }
    struct wgllm_repacked rp;
    struct wgllm_error err;
    int bad = 0;
    if (wgllm_repack(w, type, ne0, ne1, &rp, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  repack failed: %s\n", err.message);
        bad = 1;
    } else {
        wgllm_repacked_matmul(&rp, r0, r1, x, stride, n, y, (int)ne1, accumulate);
        for (int64_t i = 0; i < (int64_t)n * ne1; i++)
            if (!same_bits(y[i], want[i]) && bad++ < 1 && printed++ < 8)
                fprintf(stderr, "  %s %lldx%lld n=%d rows %lld..%lld acc=%d: [t %lld, r %lld] %.9g vs reference %.9g\n",
                        wgllm_type_name(type), (long long)ne0, (long long)ne1, n, (long long)r0, (long long)r1,
                        accumulate, (long long)(i / ne1), (long long)(i % ne1), y[i], want[i]);
        wgllm_repacked_free(&rp);
    }
    free(w);
    free(x);
    free(f);
    free(y);
    free(want);
    return bad;
}

#ifdef __wasm_simd128__
TEST(dispatches_to_simd128) {
    const char *name = NULL;
    CHECK(wgllm_repack_kernel(&name) != NULL);
    CHECK_STR(name, "simd128");
    CHECK(wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 256));
    CHECK(wgllm_repack_supported(WGLLM_TYPE_Q8_0, 2048, 256));
    CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_0, 2048, 250));
}

/* `--relaxed` (the second run of `make wasm-test`, node with relaxed SIMD
 * on): the Q4_0 products must go through the relaxed-SIMD module, so
 * the cases below test it; without the flag node cannot validate the module
 * and they test the SIMD128 kernel. */
static bool want_relaxed;

/* The layout as the relaxed module restates it (repack_relaxed.h; the
 * sizes are static assertions in repack_wasm.c). */
TEST(relaxed_module_layout_constants) {
    CHECK_EQ_INT(wgllm_repack_panel_bytes(WGLLM_TYPE_Q4_0, 32), wgllm_repack_scale_bytes(32) + WGLLM_RELAXED_Q4_0_QUANTS);
    const size_t q = wgllm_repack_k45_quant_bytes(WGLLM_TYPE_Q4_K); /* scales, mins, d, dmin follow (repack.h) */
    CHECK_EQ_INT(q, WGLLM_RELAXED_Q4_K_SCALES);
    CHECK_EQ_INT(q + 128, WGLLM_RELAXED_Q4_K_MINS);
    CHECK_EQ_INT(q + 256, WGLLM_RELAXED_Q4_K_D);
    CHECK_EQ_INT(q + 288, WGLLM_RELAXED_Q4_K_DMIN);
}

TEST(relaxed_module_where_it_validates) {
    CHECK(wgllm_cpu_caps()->relaxed_simd == want_relaxed);
    /* Q4_K has a kernel over the layout only in the module */
    CHECK(wgllm_repack_supported(WGLLM_TYPE_Q4_K, 256, 16) == want_relaxed);
    CHECK((strstr(wgllm_cpu_features(), "RELAXED_SIMD") != NULL) == want_relaxed);
}
#endif

TEST(bit_identical_to_vec_dot) {
    const uint32_t types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0};
    /* ne0: one block, an odd count, exactly one chunk, chunks and a bit */
    const int64_t ne0s[] = {32, 96, 2048, 32 * (2 * 64 + 5)};
    const int ns[] = {1, 2, 3, 4, 5, 9};
    int bad = 0;
    for (int ti = 0; ti < 2; ti++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 6; j++) {
                const int64_t ne0 = ne0s[k];
                const bool acc = (j & 1) != 0;
                bad += check_case(types[ti], ne0, 48, ns[j], (size_t)(j % 3) * 4, 0, 48, acc);
            }
    /* more than one group of 16 panels, rows from the middle */
    bad += check_case(WGLLM_TYPE_Q4_0, 256, 16 * 35, 1, 0, 16 * 3, 16 * 33, false);
    bad += check_case(WGLLM_TYPE_Q8_0, 256, 16 * 35, 6, 8, 16 * 1, 16 * 34, true);
    bad += check_case(WGLLM_TYPE_Q4_0, 5632, 16 * 18, 4, 0, 0, 16 * 18, false);
    bad += check_case(WGLLM_TYPE_Q4_0, 5632, 16 * 5, 1, 0, 0, 16 * 5, true);
    bad += check_case(WGLLM_TYPE_Q8_0, 5632, 16 * 5, 1, 4, 16, 16 * 5, false);
    CHECK_EQ_INT(bad, 0);
}

/* Q4_K (only in the relaxed-SIMD module): one token and tiles, row ranges,
 * accumulate, strides, 1 to 3 super-blocks and TinyLlama's widths. */
TEST(q4_K_bit_identical_to_vec_dot) {
    if (!want_relaxed) {
        CHECK(!wgllm_repack_supported(WGLLM_TYPE_Q4_K, 256, 16));
        return;
    }
    int bad = 0;
    const int ns[] = {1, 2, 3, 4, 5, 9};
    for (int j = 0; j < 6; j++) {
        bad += check_case(WGLLM_TYPE_Q4_K, 256, 48, ns[j], (size_t)(j % 3) * 4, 0, 48, (j & 1) != 0);
        bad += check_case(WGLLM_TYPE_Q4_K, 768, 16 * 5, ns[j], 8, 16, 16 * 4, (j & 1) == 0);
    }
    bad += check_case(WGLLM_TYPE_Q4_K, 2048, 16 * 6, 1, 0, 0, 16 * 6, false);
    bad += check_case(WGLLM_TYPE_Q4_K, 5632, 16 * 3, 4, 0, 0, 16 * 3, true);
    CHECK_EQ_INT(bad, 0);
}

TEST(special_scales_bit_identical) {
    special_scales = true;
    int bad = 0;
    bad += check_case(WGLLM_TYPE_Q4_0, 256, 16 * 7, 1, 0, 0, 16 * 7, false);
    bad += check_case(WGLLM_TYPE_Q4_0, 2048, 16 * 4, 1, 4, 16, 16 * 4, true);
    bad += check_case(WGLLM_TYPE_Q4_0, 256, 16 * 3, 3, 0, 0, 16 * 3, false);
    special_scales = false;
    CHECK_EQ_INT(bad, 0);
}

/* ---- WGLLM_BENCH=1 ------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(void) {
    enum { NE0 = 2048, NE1 = 5632 };
    const uint32_t types[] = {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        const size_t row = wgllm_row_size(type, NE0), xrow = wgllm_row_size(WGLLM_TYPE_Q8_0, NE0);
        uint8_t *w = malloc(row * NE1), *x = malloc(xrow);
        float *f = malloc(sizeof(float) * NE0), *y = malloc(sizeof(float) * NE1);
        for (int r = 0; r < NE1; r++) {
            fill(f, NE0);
            wgllm_type_traits_ref(type)->from_float_ref(f, w + (size_t)r * row, NE0);
        }
        fill(f, NE0);
        wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float(f, x, NE0);
        struct wgllm_repacked rp;
        struct wgllm_error err;
        if (wgllm_repack(w, type, NE0, NE1, &rp, &err)) continue;
        const wgllm_vec_dot_fn dot = wgllm_type_traits(type)->vec_dot;
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < 25; rep++) {
            double t0 = now_s();
            wgllm_repacked_matmul(&rp, 0, NE1, x, xrow, 1, y, NE1, false);
            best[0] = fmin(best[0], now_s() - t0);
            t0 = now_s();
            for (int r = 0; r < NE1; r++) dot(NE0, y + r, w + (size_t)r * row, x);
            best[1] = fmin(best[1], now_s() - t0);
        }
        const double gb = (double)row * NE1 / 1e9;
        printf("bench %-5s mat-vec %dx%d: repacked %s %6.2f GB/s   per-row vec_dot %6.2f GB/s   (x%.2f)\n",
               wgllm_type_name(type), NE1, NE0, type == WGLLM_TYPE_Q4_0 && wgllm_cpu_caps()->relaxed_simd ? "relaxed" : "simd128", gb / best[0], gb / best[1], best[1] / best[0]);
        wgllm_repacked_free(&rp);
        free(w);
        free(x);
        free(f);
        free(y);
    }
}

int main(int argc, char **argv) {
    wgllm_quant_init();
#ifdef __wasm_simd128__
    want_relaxed = argc > 1 && !strcmp(argv[1], "--relaxed");
    RUN(dispatches_to_simd128);
    RUN(relaxed_module_layout_constants);
    RUN(relaxed_module_where_it_validates);
#else
    (void)argc, (void)argv;
#endif
    RUN(bit_identical_to_vec_dot);
    RUN(special_scales_bit_identical);
#ifdef __wasm_simd128__
    RUN(q4_K_bit_identical_to_vec_dot);
#endif
    const char *b = getenv("WGLLM_BENCH");
    if (b && !strcmp(b, "1")) bench();
    return test_summary("test_repack_wasm (wasm)");
}
