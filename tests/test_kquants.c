/*
 * test_kquants.c - the super-block formats (Q2_K..Q6_K, Q8_K) and IQ4_NL /
 * IQ4_XS: hand-built blocks that must dequantize to values worked out from
 * ggml's layout, round-trip error bounds of the reference quantizers, each
 * dot against the float dot of the dequantized rows, every dispatched (SIMD)
 * kernel against the scalar reference, the multi-token kernels against the
 * single-token ones (bit for bit), and the fast Q8_K quantizer against the
 * reference bytes.
 */
#define TEST_RNG_SEED 0x243F6A8885A308D3ULL /* this file's data */
#include "test.h"

#include "quant/kquants.h"

#include <dlfcn.h>
#include <stdint.h>


static const uint32_t ktypes[] = {WGLLM_TYPE_Q2_K, WGLLM_TYPE_Q3_K, WGLLM_TYPE_Q4_K,   WGLLM_TYPE_Q5_K,
                                  WGLLM_TYPE_Q6_K, WGLLM_TYPE_IQ4_NL, WGLLM_TYPE_IQ4_XS};
#define N_KTYPES (sizeof(ktypes) / sizeof(ktypes[0]))

/* Round-trip RMS error bound relative to the data's RMS, for N(0,1) data.
 * Measured values (this data, ggml's reference quantizers) are Q2_K 0.289,
 * Q3_K 0.146, Q4_K 0.068, Q5_K 0.035, Q6_K 0.017, IQ4_NL 0.074, IQ4_XS 0.074,
 * Q8_K 0.0061; the bounds leave ~20% room. */
static double rms_bound(uint32_t t) {
    switch (t) {
    case WGLLM_TYPE_Q2_K: return 0.35;
    case WGLLM_TYPE_Q3_K: return 0.175;
    case WGLLM_TYPE_Q4_K: return 0.082;
    case WGLLM_TYPE_Q5_K: return 0.042;
    case WGLLM_TYPE_Q6_K: return 0.021;
    case WGLLM_TYPE_IQ4_NL: return 0.09;
    case WGLLM_TYPE_IQ4_XS: return 0.09;
    case WGLLM_TYPE_Q8_K: return 0.0075;
    default: return 0;
    }
}

/* ---- layouts and known answers ----------------------------------------- */

TEST(traits_filled) {
    for (size_t i = 0; i < N_KTYPES; i++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(ktypes[i]);
        CHECK(t->to_float && t->from_float_ref && t->vec_dot && t->vec_dot_nr);
        CHECK(wgllm_type_supported(ktypes[i]));
        const uint32_t vdt = ktypes[i] == WGLLM_TYPE_IQ4_NL ? WGLLM_TYPE_Q8_0 : WGLLM_TYPE_Q8_K;
        CHECK_EQ_INT(t->vec_dot_type, vdt);
        CHECK(wgllm_type_traits(vdt)->from_float != NULL);
    }
    CHECK_EQ_INT(wgllm_row_size(WGLLM_TYPE_Q4_K, 512), 288);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q8_K)->to_float != NULL);
    CHECK(!wgllm_type_supported(WGLLM_TYPE_Q8_K)); /* activations only */
}

static void dequant(uint32_t type, const void *blk, float *y, int64_t n) {
    wgllm_type_traits_ref(type)->to_float(blk, y, n);
}

TEST(known_q4_K) {
    wgllm_block_q4_K b;
    memset(&b, 0, sizeof(b));
    b.d = wgllm_fp32_to_fp16(1.0f);
    b.dmin = wgllm_fp32_to_fp16(0.5f);
    /* sub-block 0: scale 1, min 2; sub-block 1: scale 2; sub-block 4: scale
     * 5 | (1 << 4) = 21 (low 4 bits in byte 8, high 2 in the top of byte 0),
     * min 3 (low bits in byte 8's high nibble) */
    b.scales[0] = 1 | (1 << 6);
    b.scales[1] = 2;
    b.scales[4] = 2;
    b.scales[8] = 5 | (3 << 4);
    b.qs[0] = 0x7 | (0x3 << 4); /* element 0 = 7, element 32 = 3 */
    b.qs[64 + 1] = 0x9;         /* element 128 + 1 = 9 */
    float y[256];
    dequant(WGLLM_TYPE_Q4_K, &b, y, 256);
    CHECK_NEAR(y[0], 1 * 7 - 0.5 * 2, 0);
    CHECK_NEAR(y[1], -1.0, 0);
    CHECK_NEAR(y[32], 2 * 3, 0);
    CHECK_NEAR(y[129], 21 * 9 - 0.5 * 3, 0);
    CHECK_NEAR(y[130], -1.5, 0);
    CHECK_NEAR(y[255], 0, 0);
}

TEST(known_q5_K) {
    wgllm_block_q5_K b;
    memset(&b, 0, sizeof(b));
    b.d = wgllm_fp32_to_fp16(0.5f);
    b.scales[0] = 3;                 /* sub-block 0 scale 3 */
    b.scales[3] = 4;                 /* sub-block 3 scale 4 */
    b.qs[5] = 0x2;                   /* element 5 low nibble 2 */
    b.qh[5] = 1;                     /* + 16 (bit 0: sub-block 0) */
    b.qs[32 + 7] = 0x50;             /* element 96 + 7 high nibble 5 */
    b.qh[7] = 1 << 3;                /* + 16 (bit 3: sub-block 3) */
    float y[256];
    dequant(WGLLM_TYPE_Q5_K, &b, y, 256);
    CHECK_NEAR(y[5], 0.5 * 3 * 18, 0);
    CHECK_NEAR(y[103], 0.5 * 4 * 21, 0);
    CHECK_NEAR(y[7], 0, 0);
}

TEST(known_q6_K) {
    wgllm_block_q6_K b;
    memset(&b, 0, sizeof(b));
    b.d = wgllm_fp32_to_fp16(0.25f);
    for (int j = 0; j < 16; j++) b.scales[j] = (int8_t)(j - 8);
    b.ql[0] = 0x5 | (0xA << 4);     /* element 0 low 5, element 64 low 10 */
    b.qh[0] = 2 | (3 << 4);         /* element 0 high 2 (+32), element 64 high 3 (+48) */
    b.ql[128 / 2 + 32 + 3] = 0x1;   /* element 128 + 32 + 3 = 163 low 1, high 0 */
    float y[256];
    dequant(WGLLM_TYPE_Q6_K, &b, y, 256);
    CHECK_NEAR(y[0], 0.25 * -8 * (5 + 32 - 32), 0);
    CHECK_NEAR(y[64], 0.25 * (64 / 16 - 8) * (10 + 48 - 32), 0);
    CHECK_NEAR(y[163], 0.25 * (163 / 16 - 8) * (1 - 32), 0);
    CHECK_NEAR(y[17], 0.25 * (1 - 8) * -32, 0);
}

TEST(known_q2_K_q3_K) {
    wgllm_block_q2_K b;
    memset(&b, 0, sizeof(b));
    b.d = wgllm_fp32_to_fp16(2.0f);
    b.dmin = wgllm_fp32_to_fp16(1.0f);
    b.scales[2] = 3 | (5 << 4);     /* sub-block 2: scale 3, min 5 */
    b.qs[0] = 3 << 2;               /* element 32 (shift 2) = 3 */
    b.qs[32 + 16] = 2 << 6;         /* element 128 + 96 + 16 = 240 (shift 6) = 2 */
    b.scales[15] = 1;
    float y[256];
    dequant(WGLLM_TYPE_Q2_K, &b, y, 256);
    CHECK_NEAR(y[32], 2 * 3 * 3 - 5, 0);
    CHECK_NEAR(y[33], -5, 0);
    CHECK_NEAR(y[240], 2 * 1 * 2, 0);

    wgllm_block_q3_K c;
    memset(&c, 0, sizeof(c));
    c.d = wgllm_fp32_to_fp16(1.0f);
    /* scales: 6-bit values stored +32; j=0 -> 32+3 (low 4 bits 3, high 2 bits 2),
     * j=9 -> 32-5 = 27 (low 11 in byte 1's high nibble, high 1 at byte 9 bits 4-5) */
    c.scales[0] = 3;
    c.scales[8] = 2;
    c.scales[1] = 11 << 4;
    c.scales[9] = 1 << 4;
    c.qs[1] = 2;                    /* element 1 low bits 2 */
    c.hmask[1] = 1;                 /* hbit set: value 2 (else 2 - 4) */
    c.qs[32 + 16 + 4] = 1;          /* element 128 + 20 = 148 (sub-block 9): low 1, no hbit: -3 */
    float z[256];
    dequant(WGLLM_TYPE_Q3_K, &c, z, 256);
    CHECK_NEAR(z[1], 3 * 2, 0);
    CHECK_NEAR(z[0], 3 * -4, 0);
    CHECK_NEAR(z[148], -5 * -3, 0);
}

TEST(known_iq4) {
    wgllm_block_iq4_nl b;
    memset(&b, 0, sizeof(b));
    b.d = wgllm_fp32_to_fp16(0.5f);
    b.qs[3] = 0x0F | (0x8 << 4); /* element 3 -> 113, element 19 -> 1 */
    float y[32];
    dequant(WGLLM_TYPE_IQ4_NL, &b, y, 32);
    CHECK_NEAR(y[3], 0.5 * 113, 0);
    CHECK_NEAR(y[19], 0.5 * 1, 0);
    CHECK_NEAR(y[0], 0.5 * -127, 0);

    wgllm_block_iq4_xs c;
    memset(&c, 0, sizeof(c));
    c.d = wgllm_fp32_to_fp16(1.0f);
    c.scales_l[2] = 0x5 << 4;       /* sub-block 5: low 4 bits 5 */
    c.scales_h = (uint16_t)(2 << 10); /* sub-block 5: high bits 2 -> 37 - 32 = 5 */
    c.qs[16 * 5 + 2] = 0xC;         /* element 160 + 2 -> 53 */
    float z[256];
    dequant(WGLLM_TYPE_IQ4_XS, &c, z, 256);
    CHECK_NEAR(z[162], 5 * 53, 0);
    CHECK_NEAR(z[0], -32 * -127, 0);
}

TEST(known_q8_K) {
    float x[256];
    for (int j = 0; j < 256; j++) x[j] = (float)(j % 16) * 0.5f;
    x[10] = -20.0f; /* largest magnitude: d = 20/127, x[10] -> -127 */
    wgllm_block_q8_K r, f;
    wgllm_type_traits_ref(WGLLM_TYPE_Q8_K)->from_float_ref(x, &r, 256);
    wgllm_type_traits(WGLLM_TYPE_Q8_K)->from_float(x, &f, 256);
    CHECK(memcmp(&r, &f, sizeof(r)) == 0);
    CHECK_EQ_INT(r.qs[10], -127);
    CHECK_NEAR(r.d, 20.0f / 127.0f, 1e-7);
    CHECK_EQ_INT(r.qs[2], 6);   /* 1.0 * 127/20 = 6.35 */
    CHECK_EQ_INT(r.qs[15], 48); /* 7.5 * 6.35 = 47.6 */
    int s0 = 0;
    for (int j = 0; j < 16; j++) s0 += r.qs[j];
    CHECK_EQ_INT(r.bsums[0], s0);
}

/* ---- round trips ------------------------------------------------------- */

TEST(round_trip_error) {
    const int64_t n = 256 * 32;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    void *q = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal();
    const uint32_t all[] = {WGLLM_TYPE_Q2_K, WGLLM_TYPE_Q3_K, WGLLM_TYPE_Q4_K,   WGLLM_TYPE_Q5_K, WGLLM_TYPE_Q6_K,
                            WGLLM_TYPE_IQ4_NL, WGLLM_TYPE_IQ4_XS, WGLLM_TYPE_Q8_K};
    for (size_t t = 0; t < sizeof(all) / sizeof(all[0]); t++) {
        const struct wgllm_type_traits *tr = wgllm_type_traits_ref(all[t]);
        tr->from_float_ref(x, q, n);
        tr->to_float(q, y, n);
        double e2 = 0, x2 = 0;
        for (int64_t i = 0; i < n; i++) {
            e2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
            x2 += (double)x[i] * x[i];
        }
        const double rel = sqrt(e2 / x2);
        if (getenv("WGLLM_VERBOSE")) fprintf(stderr, "  %s: relative rms %.4f\n", tr->name, rel);
        if (!(rel <= rms_bound(all[t]))) fprintf(stderr, "  %s: relative rms %.4f > %.4f\n", tr->name, rel, rms_bound(all[t]));
        CHECK(rel <= rms_bound(all[t]));
        CHECK(rel > 0);
    }
    /* all-zero input stays zero and finite */
    memset(x, 0, sizeof(float) * 512);
    for (size_t t = 0; t < sizeof(all) / sizeof(all[0]); t++) {
        const struct wgllm_type_traits *tr = wgllm_type_traits_ref(all[t]);
        tr->from_float_ref(x, q, 512);
        tr->to_float(q, y, 512);
        for (int i = 0; i < 512; i++) CHECK(y[i] == 0.0f);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- dots -------------------------------------------------------------- */

TEST(dots_match) {
    const int64_t n = 256 * 8;
    const int nrows = 5;
    float *w = malloc(sizeof(float) * n * nrows), *a = malloc(sizeof(float) * n);
    float *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
    uint8_t *wq = malloc((size_t)n * nrows * 4), *aq = malloc((size_t)n * 4), *aq2 = malloc((size_t)n * 4);
    for (int trial = 0; trial < 3; trial++) {
        for (int64_t i = 0; i < n * nrows; i++) w[i] = rng_normal() * (trial == 2 ? 1e-3f : 1.0f);
        for (int64_t i = 0; i < n; i++) a[i] = rng_normal() * (trial == 1 ? 50.0f : 1.0f);
        if (trial == 1) memset(a, 0, sizeof(float) * 256); /* an all-zero activation block */
        for (size_t t = 0; t < N_KTYPES; t++) {
            const struct wgllm_type_traits *ref = wgllm_type_traits_ref(ktypes[t]);
            const struct wgllm_type_traits *fast = wgllm_type_traits(ktypes[t]);
            const struct wgllm_type_traits *vref = wgllm_type_traits_ref(ref->vec_dot_type);
            const struct wgllm_type_traits *vfast = wgllm_type_traits(ref->vec_dot_type);
            const size_t rs = wgllm_row_size(ktypes[t], n);
            for (int r = 0; r < nrows; r++) ref->from_float_ref(w + r * n, wq + r * rs, n);
            vref->from_float(a, aq, n);
            vfast->from_float(a, aq2, n);
            CHECK(memcmp(aq, aq2, wgllm_row_size(ref->vec_dot_type, n)) == 0);
            ref->to_float(wq, wd, n);
            vref->to_float(aq, ad, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
            }
            float s_ref = 0, s_fast = 0;
            ref->vec_dot(n, &s_ref, wq, aq);
            fast->vec_dot(n, &s_fast, wq, aq);
            /* the dot agrees with the dequantized rows (layouts agree) */
            CHECK_NEAR(s_ref, exact, 1e-5 * mag + 1e-30);
            /* SIMD agrees with scalar */
            CHECK_NEAR(s_fast, s_ref, 1e-5 * mag);
            float s_nr[8] = {0}, s_nr_ref[8] = {0};
            fast->vec_dot_nr(n, s_nr, wq, rs, aq, nrows);
            ref->vec_dot_nr(n, s_nr_ref, wq, rs, aq, nrows);
            for (int r = 0; r < nrows; r++) {
                float s1 = 0;
                ref->vec_dot(n, &s1, wq + r * rs, aq);
                CHECK_NEAR(s_nr[r], s1, 1e-5 * mag * 10 + 1e-6 * fabs(s1));
                CHECK(s_nr_ref[r] == s1);
            }
            if (getenv("WGLLM_VERBOSE"))
                fprintf(stderr, "  %s: ref %.6g fast %.6g exact %.6g\n", ref->name, s_ref, s_fast, exact);
        }
    }
    free(w);
    free(a);
    free(wd);
    free(ad);
    free(wq);
    free(aq);
    free(aq2);
}

/* The multi-token kernels must give, for every (row, token), the very bits
 * of vec_dot: the model's agreement with llama.cpp depends on the order of
 * the float additions, and prompt processing must equal token-by-token. */
TEST(dot_mt_bit_identical) {
    static const int64_t ne0s[] = {256, 256 * 3, 256 * 8};
    const int max_tok = 9;
    int n_checked = 0;
    for (size_t t = 0; t < N_KTYPES; t++) {
        const struct wgllm_type_traits *fast = wgllm_type_traits(ktypes[t]);
        if (ktypes[t] == WGLLM_TYPE_Q4_K || ktypes[t] == WGLLM_TYPE_Q6_K)
            CHECK(fast->vec_dot_mt != NULL || !wgllm_cpu_caps()->avx2);
        CHECK(wgllm_type_traits_ref(ktypes[t])->vec_dot_mt == NULL);
        if (!fast->vec_dot_mt) continue;
        const struct wgllm_type_traits *vfast = wgllm_type_traits(fast->vec_dot_type);
        for (size_t e = 0; e < sizeof(ne0s) / sizeof(ne0s[0]); e++) {
            const int64_t n = ne0s[e];
            const size_t rs = wgllm_row_size(ktypes[t], n), ys = wgllm_row_size(fast->vec_dot_type, n);
            float *f = malloc(sizeof(float) * n);
            uint8_t *wq = malloc(rs), *aq = malloc(ys * max_tok);
            for (int64_t i = 0; i < n; i++) f[i] = rng_normal();
            fast->from_float_ref(f, wq, n);
            for (int k = 0; k < max_tok; k++) {
                const float scale = k == 3 ? 100.0f : 1.0f;
                for (int64_t i = 0; i < n; i++) f[i] = rng_normal() * scale;
                if (k == 5) memset(f, 0, sizeof(float) * 256); /* an all-zero block */
                vfast->from_float(f, aq + (size_t)k * ys, n);
            }
            float want[16], got[2 * 16];
            for (int k = 0; k < max_tok; k++) fast->vec_dot(n, &want[k], wq, aq + (size_t)k * ys);
            for (int nt = 1; nt <= max_tok; nt++) {
                /* tiles of at most WGLLM_VEC_DOT_MT_MAX, results two floats apart */
                for (int k = 0; k < 2 * 16; k++) got[k] = -1.0f;
                for (int k0 = 0; k0 < nt; k0 += WGLLM_VEC_DOT_MT_MAX) {
                    const int m = WGLLM_MIN(WGLLM_VEC_DOT_MT_MAX, nt - k0);
                    fast->vec_dot_mt(n, got + 2 * k0, 2, wq, aq + (size_t)k0 * ys, ys, m);
                }
                for (int k = 0; k < nt; k++) {
                    CHECK(memcmp(&got[2 * k], &want[k], sizeof(float)) == 0);
                    CHECK(got[2 * k + 1] == -1.0f); /* nothing written between the results */
                    n_checked++;
                }
            }
            free(f);
            free(wq);
            free(aq);
        }
    }
    CHECK(n_checked > 0 || !wgllm_cpu_caps()->avx2);
}

TEST(q8_K_fast_equals_ref) {
    const int64_t n = 256 * 16;
    float *x = malloc(sizeof(float) * n);
    wgllm_block_q8_K *r = malloc(sizeof(*r) * 16), *f = malloc(sizeof(*f) * 16);
    for (int trial = 0; trial < 4; trial++) {
        for (int64_t i = 0; i < n; i++) x[i] = rng_normal() * (trial + 1);
        /* exact ties after scaling and repeated maxima of both signs */
        x[3] = 2.5f;
        x[256 + 7] = 8.0f;
        x[256 + 9] = -8.0f;
        x[256 + 200] = 8.0f;
        for (int i = 0; i < 256; i++) x[512 + i] = (float)(i % 9) - 4.0f;
        memset(x + 768, 0, sizeof(float) * 256);
        wgllm_type_traits_ref(WGLLM_TYPE_Q8_K)->from_float_ref(x, r, n);
        wgllm_type_traits(WGLLM_TYPE_Q8_K)->from_float(x, f, n);
        CHECK(memcmp(r, f, sizeof(*r) * 16) == 0);
    }
    free(x);
    free(r);
    free(f);
}

/* ---- bit-compatibility with llama.cpp ---------------------------------- */

/* When node-llama-cpp is installed (tools/peer), its libggml-base.so holds
 * ggml's own quantizers: the bytes llama-quantize writes (no imatrix) must
 * equal wgllm's from_float_ref, and ggml's Q8_K reference those of Q8_K. */
typedef size_t (*ggml_quantize_fn)(const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                                   const float *imatrix);
typedef void (*ggml_row_fn)(const float *x, void *y, int64_t k);

TEST(bytes_equal_llama_cpp) {
    const char *lib = "tools/peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* the suite installs node-llama-cpp first (WGLLM_REQUIRE_PEER): there a missing peer fails */
        const char *req = getenv("WGLLM_REQUIRE_PEER");
        fprintf(stderr, "  (%s: %s not loadable: %s)\n", req && *req == '1' ? "FAIL" : "skipped", lib, dlerror());
        if (req && *req == '1') test_checks_failed_in_current++;
        return;
    }
    static const struct { uint32_t type; const char *fn; } fns[] = {
        {WGLLM_TYPE_Q2_K, "quantize_q2_K"},     {WGLLM_TYPE_Q3_K, "quantize_q3_K"},
        {WGLLM_TYPE_Q4_K, "quantize_q4_K"},     {WGLLM_TYPE_Q5_K, "quantize_q5_K"},
        {WGLLM_TYPE_Q6_K, "quantize_q6_K"},     {WGLLM_TYPE_IQ4_NL, "quantize_iq4_nl"},
        {WGLLM_TYPE_IQ4_XS, "quantize_iq4_xs"},
    };
    const int64_t n = 256 * 64;
    float *x = malloc(sizeof(float) * n);
    uint8_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
    for (int trial = 0; trial < 3; trial++) {
        for (int64_t i = 0; i < n; i++) x[i] = rng_normal() * (trial == 1 ? 0.02f : 1.0f) + (trial == 2 ? 0.3f : 0.0f);
        for (int64_t i = 0; i < 32; i++) x[256 + i] = 0.0f;     /* a zero sub-block */
        for (int64_t i = 0; i < 256; i++) x[1024 + i] = 1.0f;   /* a constant block */
        for (size_t t = 0; t < sizeof(fns) / sizeof(fns[0]); t++) {
            ggml_quantize_fn f = (ggml_quantize_fn)(uintptr_t)dlsym(h, fns[t].fn);
            CHECK(f != NULL);
            if (!f) continue;
            const size_t rs = wgllm_row_size(fns[t].type, n);
            memset(a, 0, rs);
            memset(b, 0, rs);
            f(x, a, 1, n, NULL);
            wgllm_type_traits_ref(fns[t].type)->from_float_ref(x, b, n);
            size_t first = rs;
            for (size_t i = 0; i < rs; i++)
                if (a[i] != b[i]) { first = i; break; }
            if (first != rs) fprintf(stderr, "  %s: first differing byte %zu of %zu\n", fns[t].fn, first, rs);
            CHECK(first == rs);
        }
        ggml_row_fn q8k = (ggml_row_fn)(uintptr_t)dlsym(h, "quantize_row_q8_K_ref");
        CHECK(q8k != NULL);
        if (q8k) {
            const size_t rs = wgllm_row_size(WGLLM_TYPE_Q8_K, n);
            q8k(x, a, n);
            wgllm_type_traits(WGLLM_TYPE_Q8_K)->from_float(x, b, n);
            CHECK(memcmp(a, b, rs) == 0);
        }
    }
    free(x);
    free(a);
    free(b);
    dlclose(h);
}

int main(void) {
    wgllm_quant_init();
    RUN(traits_filled);
    RUN(known_q4_K);
    RUN(known_q5_K);
    RUN(known_q6_K);
    RUN(known_q2_K_q3_K);
    RUN(known_iq4);
    RUN(known_q8_K);
    RUN(round_trip_error);
    RUN(dots_match);
    RUN(dot_mt_bit_identical);
    RUN(q8_K_fast_equals_ref);
    RUN(bytes_equal_llama_cpp);
    return test_summary("test_kquants");
}
