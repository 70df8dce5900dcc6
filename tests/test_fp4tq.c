/*
 * test_fp4tq.c - MXFP4, TQ1_0 and TQ2_0: hand-built blocks that must
 * dequantize to values worked out from ggml's layout, round-trip error
 * bounds of the reference quantizers, each dot against the float dot of the
 * dequantized rows, every dispatched (SIMD) kernel against the scalar
 * reference (to the order of float additions of exact integer block sums),
 * and the quantizers' bytes against
 * llama.cpp's own (libggml-base of tools/peer). The process re-runs itself
 * with WGLLM_CPU=avx2 so that both x86 SIMD levels are checked.
 */
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ULL /* this file's data */
#include "test.h"

#include "quant/fp4tq.h"

#include <dlfcn.h>
#include <stdint.h>


/* arm64's NEON kernels add the blocks in the reference's order: bit for bit */
#if defined(__aarch64__)
#define FAST_IS_EXACT 1
#else
#define FAST_IS_EXACT 0
#endif

static const uint32_t ftypes[] = {WGLLM_TYPE_MXFP4, WGLLM_TYPE_TQ2_0, WGLLM_TYPE_TQ1_0, WGLLM_TYPE_Q1_0, WGLLM_TYPE_NVFP4};
#define N_FTYPES (sizeof(ftypes) / sizeof(ftypes[0]))

static void dequant(uint32_t type, const void *blk, float *y, int64_t n) {
    wgllm_type_traits_ref(type)->to_float(blk, y, n);
}

TEST(traits_filled) {
    for (size_t i = 0; i < N_FTYPES; i++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(ftypes[i]);
        CHECK(t->to_float && t->from_float_ref && t->vec_dot && t->vec_dot_nr);
        CHECK(wgllm_type_supported(ftypes[i]));
        const bool q8_0 = ftypes[i] == WGLLM_TYPE_MXFP4 || ftypes[i] == WGLLM_TYPE_Q1_0 || ftypes[i] == WGLLM_TYPE_NVFP4;
        CHECK_EQ_INT(t->vec_dot_type, q8_0 ? WGLLM_TYPE_Q8_0 : WGLLM_TYPE_Q8_K);
    }
    CHECK_EQ_INT(wgllm_row_size(WGLLM_TYPE_MXFP4, 64), 34);
    CHECK_EQ_INT(wgllm_row_size(WGLLM_TYPE_TQ1_0, 512), 108);
    CHECK_EQ_INT(wgllm_row_size(WGLLM_TYPE_TQ2_0, 256), 66);
    CHECK_EQ_INT(wgllm_row_size(WGLLM_TYPE_Q1_0, 256), 36);
}

TEST(known_nvfp4) {
    CHECK(wgllm_ue4m3_half(0x38) == 0.5f);           /* e 7, m 0: 1.0, halved */
    CHECK(wgllm_ue4m3_half(0x3C) == 0.75f);          /* 1.5 */
    CHECK(wgllm_ue4m3_half(0x01) == 0x1p-10f);       /* subnormal 2^-9 */
    CHECK(wgllm_ue4m3_half(0x7F) == 0 && wgllm_ue4m3_half(0x7E) == 224.0f);
    wgllm_block_nvfp4 b;
    memset(&b, 0, sizeof b);
    b.d[2] = 0x40;            /* 2.0 -> 1.0 */
    b.qs[16 + 3] = 0x7 | (0xA << 4); /* sub-block 2: element 32 + 3 -> 12, 32 + 11 -> -2 */
    float y[64];
    dequant(WGLLM_TYPE_NVFP4, &b, y, 64);
    CHECK_NEAR(y[35], 12, 0);
    CHECK_NEAR(y[43], -2, 0);
    CHECK_NEAR(y[3], 0, 0);
    /* quantizer: amax 6 -> scale 1.0 (UE4M3 0x38), 6 is code 7, -3 code 13 */
    float x[64] = {0};
    x[16] = 6.0f;
    x[17] = -3.0f;
    wgllm_type_traits_ref(WGLLM_TYPE_NVFP4)->from_float_ref(x, &b, 64);
    CHECK_EQ_INT(b.d[1], 0x38);
    CHECK_EQ_INT(b.qs[8] & 0xF, 7);
    CHECK_EQ_INT(b.qs[9] & 0xF, 13);
    CHECK_EQ_INT(b.d[0], 0);
}

TEST(known_q1_0) {
    float x[128];
    for (int j = 0; j < 128; j++) x[j] = j % 3 == 0 ? -1.5f : 0.5f; /* 43 of -1.5, 85 of 0.5 */
    x[7] = -0.0f;                                                   /* >= 0: a set bit */
    const float d_want = (43 * 1.5f + 84 * 0.5f) / 128;             /* mean |x| */
    wgllm_block_q1_0 b;
    wgllm_type_traits_ref(WGLLM_TYPE_Q1_0)->from_float_ref(x, &b, 128);
    CHECK_NEAR(wgllm_fp16_lookup(b.d), d_want, 1e-3);
    CHECK_EQ_INT(b.qs[0], 0xB6); /* elements 0..7: - + + - + + - +(-0.0) */
    float y[128];
    dequant(WGLLM_TYPE_Q1_0, &b, y, 128);
    CHECK(y[0] == -wgllm_fp16_lookup(b.d) && y[1] == wgllm_fp16_lookup(b.d) && y[7] == wgllm_fp16_lookup(b.d));
}

/* ---- known answers ----------------------------------------------------- */

TEST(known_mxfp4) {
    CHECK(wgllm_e8m0_half(127) == 0.5f);
    CHECK(wgllm_e8m0_half(130) == 4.0f);
    CHECK(wgllm_e8m0_half(1) == 0x1p-127f && wgllm_e8m0_half(0) == 0x1p-128f);
    wgllm_block_mxfp4 b;
    memset(&b, 0, sizeof b);
    b.e = 129;                      /* d = 2^(129-128) = 2 */
    b.qs[3] = 0x07 | (0xC << 4);    /* element 3 -> 12 * 2, element 19 -> -4 * 2 */
    b.qs[0] = 0x09;                 /* element 0 -> -1 * 2 */
    float y[32];
    dequant(WGLLM_TYPE_MXFP4, &b, y, 32);
    CHECK_NEAR(y[3], 24, 0);
    CHECK_NEAR(y[19], -8, 0);
    CHECK_NEAR(y[0], -2, 0);
    CHECK_NEAR(y[16], 0, 0);
    /* quantizer: amax 5.9 -> e = floor(log2 5.9) - 2 + 127 = 127, d = 0.5:
     * 5.9 is nearest 12 * 0.5 = 6 (code 7), -1.3 nearest -3 * 0.5 (code 11) */
    float x[32] = {0};
    x[0] = 5.9f;
    x[17] = -1.3f;
    x[5] = 0.2f; /* nearer 0 than 0.5: code 0 */
    wgllm_type_traits_ref(WGLLM_TYPE_MXFP4)->from_float_ref(x, &b, 32);
    CHECK_EQ_INT(b.e, 127);
    CHECK_EQ_INT(b.qs[0] & 0xF, 7);
    CHECK_EQ_INT(b.qs[1] >> 4, 11);
    CHECK_EQ_INT(b.qs[5], 0);
}

TEST(known_tq2_0) {
    wgllm_block_tq2_0 b;
    memset(&b, 0x55, sizeof b.qs); /* every q = 1: value 0 */
    b.d = wgllm_fp32_to_fp16(0.5f);
    b.qs[32 + 7] = (uint8_t)(0x55 & ~(3 << 4)) | (2 << 4); /* element 128 + 64 + 7 -> +1 */
    b.qs[3] = 0x54;                                        /* element 3 -> -1 */
    float y[256];
    dequant(WGLLM_TYPE_TQ2_0, &b, y, 256);
    CHECK_NEAR(y[199], 0.5, 0);
    CHECK_NEAR(y[3], -0.5, 0);
    CHECK_NEAR(y[0], 0, 0);
    int nz = 0;
    for (int i = 0; i < 256; i++) nz += y[i] != 0;
    CHECK_EQ_INT(nz, 2);
}

TEST(known_tq1_0) {
    /* a ramp of -1, 0, 1 round trips exactly, and each byte is ggml's
     * base-3 fraction: trits (2, 0, 1, 2, 0) -> q = 2*81 + 1*9 + 2*3 = 177,
     * ceil(177 * 256 / 243) = 187 */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 7) % 3) - 1.0f;
    wgllm_block_tq1_0 b;
    wgllm_type_traits_ref(WGLLM_TYPE_TQ1_0)->from_float_ref(x, &b, 256);
    float y[256];
    dequant(WGLLM_TYPE_TQ1_0, &b, y, 256);
    for (int i = 0; i < 256; i++) CHECK(y[i] == x[i]);
    float z[256] = {0};
    z[0] = 1;  /* trit 0 of qs[0]: 2 */
    z[32] = -1; /* trit 1: 0 */
    z[64] = 0;  /* trit 2: 1 */
    z[96] = 1;  /* trit 3: 2 */
    z[128] = -1;
    z[243] = 1; /* qh[3] trit 0 */
    wgllm_type_traits_ref(WGLLM_TYPE_TQ1_0)->from_float_ref(z, &b, 256);
    CHECK_EQ_INT(b.qs[0], 187);
    CHECK_EQ_INT(b.qh[3], (((2 * 27 + 13) * 3) * 256 + 242) / 243); /* trits 2,1,1,1 then x3 */
    CHECK(wgllm_fp16_lookup(b.d) == 1.0f);
}

/* ---- round trips ------------------------------------------------------- */

/* Relative rms error of N(0,1) data. Measured: MXFP4 0.115 (E2M1 under a
 * power-of-two scale), NVFP4 0.0955 (a finer scale per 16), Q1_0 0.585
 * (sqrt(1 - 2/pi) for a sign and the mean magnitude), TQ1_0 / TQ2_0 0.779
 * (three levels 0, +-amax: with amax ~3 sigma over 256 values most round to
 * 0; the formats are meant for ternary-trained weights, which they hold
 * exactly). The bounds leave ~15%. */
static double rms_bound(uint32_t t) {
    return t == WGLLM_TYPE_MXFP4 ? 0.135 : t == WGLLM_TYPE_NVFP4 ? 0.11 : t == WGLLM_TYPE_Q1_0 ? 0.70 : 0.90;
}

TEST(round_trip_error) {
    const int64_t n = 256 * 32;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    void *q = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal();
    for (size_t t = 0; t < N_FTYPES; t++) {
        const struct wgllm_type_traits *tr = wgllm_type_traits_ref(ftypes[t]);
        tr->from_float_ref(x, q, n);
        tr->to_float(q, y, n);
        double e2 = 0, x2 = 0;
        for (int64_t i = 0; i < n; i++) {
            e2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
            x2 += (double)x[i] * x[i];
        }
        const double rel = sqrt(e2 / x2);
        if (getenv("WGLLM_VERBOSE") || !(rel <= rms_bound(ftypes[t])))
            fprintf(stderr, "  %s: relative rms %.4f (bound %.3f)\n", tr->name, rel, rms_bound(ftypes[t]));
        CHECK(rel <= rms_bound(ftypes[t]) && rel > 0);
    }
    memset(x, 0, sizeof(float) * 512);
    for (size_t t = 0; t < N_FTYPES; t++) {
        const struct wgllm_type_traits *tr = wgllm_type_traits_ref(ftypes[t]);
        tr->from_float_ref(x, q, 512);
        tr->to_float(q, y, 512);
        for (int i = 0; i < 512; i++) CHECK(y[i] == 0.0f);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- dots -------------------------------------------------------------- */

/* The scalar dot equals the double dot of the dequantized rows to float
 * rounding of the per-block sums (1e-5 of sum |w a|); the SIMD dots equal
 * the scalar one to the same bound (float lanes add the exact integer block
 * sums in llama.cpp's order, not the reference's). Row lengths with an odd
 * number of MXFP4 blocks reach the AVX-512 kernel's single-block tail. */
TEST(dots_match) {
    static const int64_t lens[] = {256 * 8, 256 * 3 + 32 * 3};
    const int nrows = 5;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int64_t n = lens[li];
        float *w = malloc(sizeof(float) * n * nrows), *a = malloc(sizeof(float) * n);
        float *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
        uint8_t *wq = malloc((size_t)n * nrows * 2), *aq = malloc((size_t)n * 2);
        for (int trial = 0; trial < 3; trial++) {
            for (int64_t i = 0; i < n * nrows; i++) w[i] = rng_normal() * (trial == 2 ? 1e-3f : 1.0f);
            for (int64_t i = 0; i < n; i++) a[i] = rng_normal() * (trial == 1 ? 50.0f : 1.0f);
            if (trial == 1) memset(a, 0, sizeof(float) * 256);
            for (size_t t = 0; t < N_FTYPES; t++) {
                const struct wgllm_type_traits *ref = wgllm_type_traits_ref(ftypes[t]);
                const struct wgllm_type_traits *fast = wgllm_type_traits(ftypes[t]);
                if (n % ref->blck_size) continue;
                const struct wgllm_type_traits *vt = wgllm_type_traits(ref->vec_dot_type);
                const size_t rs = wgllm_row_size(ftypes[t], n);
                for (int r = 0; r < nrows; r++) ref->from_float_ref(w + r * n, wq + r * rs, n);
                vt->from_float(a, aq, n);
                ref->to_float(wq, wd, n);
                vt->to_float(aq, ad, n);
                double mag;
                const double exact_dot = test_dot_f64(wd, ad, n, &mag);
                float s_ref = 0, s_fast = 0;
                ref->vec_dot(n, &s_ref, wq, aq);
                fast->vec_dot(n, &s_fast, wq, aq);
                CHECK_NEAR(s_ref, exact_dot, 1e-5 * mag + 1e-30);
                CHECK_NEAR(s_fast, s_ref, 1e-5 * mag);
            CHECK(!FAST_IS_EXACT || memcmp(&s_fast, &s_ref, sizeof s_ref) == 0);
                CHECK(!FAST_IS_EXACT || memcmp(&s_fast, &s_ref, sizeof s_ref) == 0);
                float s_nr[8] = {0};
                fast->vec_dot_nr(n, s_nr, wq, rs, aq, nrows);
                for (int r = 0; r < nrows; r++) {
                    float s1 = 0;
                    fast->vec_dot(n, &s1, wq + r * rs, aq);
                    CHECK(s_nr[r] == s1);
                }
                if (getenv("WGLLM_VERBOSE"))
                    fprintf(stderr, "  %s: ref %.6g fast %.6g exact %.6g\n", ref->name, s_ref, s_fast, exact_dot);
            }
        }
        free(w), free(a), free(wd), free(ad), free(wq), free(aq);
    }
}

/* Every byte value in every position: the SIMD trit / nibble decoders must
 * read each code as the scalar one does (random quantizer output never has
 * TQ2_0's unused code 3 or TQ1_0's bytes above 242 / 255 rounding). */
TEST(dots_match_random_bytes) {
    const int64_t n = 256 * 4;
    uint8_t *wq = malloc((size_t)n), *aq = malloc((size_t)n * 2);
    float *a = malloc(sizeof(float) * n);
    for (int trial = 0; trial < 8; trial++) {
        for (int64_t i = 0; i < n; i++) a[i] = rng_normal();
        for (size_t t = 0; t < N_FTYPES; t++) {
            const struct wgllm_type_traits *ref = wgllm_type_traits_ref(ftypes[t]);
            const struct wgllm_type_traits *fast = wgllm_type_traits(ftypes[t]);
            const size_t rs = wgllm_row_size(ftypes[t], n);
            for (size_t i = 0; i < rs; i++) wq[i] = (uint8_t)rng_u32();
            /* sane scales: MXFP4 e near 127, the ternary d an f16 of 0.01..1 */
            const size_t bs = ref->type_size;
            for (size_t b = 0; b < rs / bs; b++) {
                const wgllm_fp16 d = wgllm_fp32_to_fp16(0.01f + (float)(rng_u32() % 100) / 100.0f);
                if (ftypes[t] == WGLLM_TYPE_MXFP4) wq[b * bs] = (uint8_t)(120 + rng_u32() % 12);
                else if (ftypes[t] == WGLLM_TYPE_Q1_0) memcpy(wq + b * bs, &d, 2);
                else memcpy(wq + b * bs + bs - 2, &d, 2);
            }
            wgllm_type_traits(ref->vec_dot_type)->from_float(a, aq, n);
            float s_ref = 0, s_fast = 0;
            ref->vec_dot(n, &s_ref, wq, aq);
            fast->vec_dot(n, &s_fast, wq, aq);
            /* the dequantized dot's magnitude sets the float tolerance */
            static float wd[256 * 4], ad[256 * 4];
            ref->to_float(wq, wd, n);
            wgllm_type_traits(ref->vec_dot_type)->to_float(aq, ad, n);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[i] * ad[i]);
            CHECK_NEAR(s_fast, s_ref, 1e-5 * mag);
        }
    }
    free(wq), free(aq), free(a);
}

/* The multi-token kernel (prompt processing) must give, for every (row,
 * token), the very bits of vec_dot (prompt processing must equal token by
 * token); at the AVX-512 level that also shows the AVX-512 vec_dot equals
 * the AVX2 one, whose mt kernel stays installed. Odd block counts reach the
 * tails. */
TEST(dot_mt_bit_identical) {
    static const int64_t ne0s[] = {32, 32 * 7, 256, 256 * 5};
    const int max_tok = 9;
    int n_checked = 0;
    for (size_t t = 0; t < N_FTYPES; t++) {
        const struct wgllm_type_traits *fast = wgllm_type_traits(ftypes[t]);
        if (ftypes[t] == WGLLM_TYPE_MXFP4) CHECK(fast->vec_dot_mt != NULL || !wgllm_cpu_caps()->avx2);
        CHECK(wgllm_type_traits_ref(ftypes[t])->vec_dot_mt == NULL);
        if (!fast->vec_dot_mt) continue;
        const struct wgllm_type_traits *vfast = wgllm_type_traits(fast->vec_dot_type);
        for (size_t e = 0; e < sizeof ne0s / sizeof *ne0s; e++) {
            const int64_t n = ne0s[e];
            if (n % fast->blck_size) continue;
            const size_t rs = wgllm_row_size(ftypes[t], n), ys = wgllm_row_size(fast->vec_dot_type, n);
            float *f = malloc(sizeof(float) * n);
            uint8_t *wq = malloc(rs), *aq = malloc(ys * max_tok);
            for (int64_t i = 0; i < n; i++) f[i] = rng_normal();
            fast->from_float_ref(f, wq, n);
            for (int k = 0; k < max_tok; k++) {
                for (int64_t i = 0; i < n; i++) f[i] = rng_normal() * (k == 3 ? 100.0f : 1.0f);
                if (k == 5) memset(f, 0, sizeof(float) * 32); /* an all-zero block */
                vfast->from_float(f, aq + (size_t)k * ys, n);
            }
            float want[16], got[2 * 16];
            for (int k = 0; k < max_tok; k++) fast->vec_dot(n, &want[k], wq, aq + (size_t)k * ys);
            for (int nt = 1; nt <= max_tok; nt++) {
                for (int k = 0; k < 2 * 16; k++) got[k] = -1.0f;
                for (int k0 = 0; k0 < nt; k0 += WGLLM_VEC_DOT_MT_MAX) {
                    const int m = WGLLM_MIN(WGLLM_VEC_DOT_MT_MAX, nt - k0);
                    fast->vec_dot_mt(n, got + 2 * k0, 2, wq, aq + (size_t)k0 * ys, ys, m);
                }
                for (int k = 0; k < nt; k++) {
                    CHECK(memcmp(&got[2 * k], &want[k], sizeof(float)) == 0);
                    CHECK(got[2 * k + 1] == -1.0f);
                    n_checked++;
                }
            }
            free(f), free(wq), free(aq);
        }
    }
    CHECK(n_checked > 0 || !wgllm_cpu_caps()->avx2);
}

/* ---- bit-compatibility with llama.cpp ---------------------------------- */

typedef size_t (*ggml_quantize_fn)(const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                                   const float *imatrix);
typedef void (*ggml_dequant_fn)(const void *x, float *y, int64_t k);

/* The bytes llama-quantize writes (quantize_mxfp4 / _tq1_0 / _tq2_0, no
 * imatrix) equal from_float_ref's, and ggml's dequantize_row_* reads them to
 * the same floats as to_float. */
TEST(bytes_equal_llama_cpp) {
    const char *lib = "tools/peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *req = getenv("WGLLM_REQUIRE_PEER");
        fprintf(stderr, "  (%s: %s not loadable: %s)\n", req && *req == '1' ? "FAIL" : "skipped", lib, dlerror());
        if (req && *req == '1') test_checks_failed_in_current++;
        return;
    }
    static const struct { uint32_t type; const char *q, *dq; } fns[] = {
        {WGLLM_TYPE_MXFP4, "quantize_mxfp4", "dequantize_row_mxfp4"},
        {WGLLM_TYPE_TQ2_0, "quantize_tq2_0", "dequantize_row_tq2_0"},
        {WGLLM_TYPE_TQ1_0, "quantize_tq1_0", "dequantize_row_tq1_0"},
        {WGLLM_TYPE_Q1_0, "quantize_q1_0", "dequantize_row_q1_0"},
        {WGLLM_TYPE_NVFP4, "quantize_nvfp4", "dequantize_row_nvfp4"},
    };
    const int64_t n = 256 * 64;
    float *x = malloc(sizeof(float) * n), *da = malloc(sizeof(float) * n), *db = malloc(sizeof(float) * n);
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    for (int trial = 0; trial < 4; trial++) {
        for (int64_t i = 0; i < n; i++) x[i] = rng_normal() * (trial == 1 ? 0.02f : 1.0f) + (trial == 2 ? 0.3f : 0.0f);
        for (int64_t i = 0; i < 32; i++) x[256 + i] = 0.0f;   /* a zero block */
        for (int64_t i = 0; i < 256; i++) x[1024 + i] = 1.0f; /* a constant block */
        for (int64_t i = 0; i < 64; i++) x[2048 + i] = (float)(i % 13) * 0.25f - 1.5f; /* ties on the grids */
        for (int64_t i = 0; i < 32; i++) x[4096 + i] = ldexpf(1.0f, (int)(i % 9) - 4); /* powers of two: log2 exact */
        if (trial == 3)
            for (int64_t i = 0; i < n; i++) x[i] = ldexpf(rng_normal(), (int)(rng_u32() % 60) - 30);
        for (size_t t = 0; t < sizeof fns / sizeof *fns; t++) {
            ggml_quantize_fn f = (ggml_quantize_fn)(uintptr_t)dlsym(h, fns[t].q);
            ggml_dequant_fn g = (ggml_dequant_fn)(uintptr_t)dlsym(h, fns[t].dq);
            CHECK(f != NULL && g != NULL);
            if (!f || !g) continue;
            const size_t rs = wgllm_row_size(fns[t].type, n);
            memset(a, 0, rs);
            memset(b, 0xAA, rs);
            f(x, a, 1, n, NULL);
            wgllm_type_traits_ref(fns[t].type)->from_float_ref(x, b, n);
            size_t first = rs;
            for (size_t i = 0; i < rs; i++)
                if (a[i] != b[i]) { first = i; break; }
            if (first != rs) fprintf(stderr, "  %s trial %d: first differing byte %zu of %zu\n", fns[t].q, trial, first, rs);
            CHECK(first == rs);
            g(a, da, n);
            wgllm_type_traits_ref(fns[t].type)->to_float(a, db, n);
            CHECK(memcmp(da, db, sizeof(float) * n) == 0);
        }
    }
    free(x), free(da), free(db), free(a), free(b);
    dlclose(h);
}

int main(void) {
    wgllm_quant_init();
    RUN(traits_filled);
    RUN(known_mxfp4);
    RUN(known_tq2_0);
    RUN(known_tq1_0);
    RUN(known_q1_0);
    RUN(known_nvfp4);
    RUN(round_trip_error);
    RUN(dots_match);
    RUN(dots_match_random_bytes);
    RUN(dot_mt_bit_identical);
    RUN(bytes_equal_llama_cpp);
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
    if (!getenv("WGLLM_CPU") && caps->avx2 && caps->avx512vnni) test_rerun_with_cpu_cap("avx2");
    return test_summary(getenv("WGLLM_CPU") ? "test_fp4tq (WGLLM_CPU capped)" : "test_fp4tq");
}
