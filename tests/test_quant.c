/*
 * test_quant.c - the quant module: traits table, ggml block layouts (known
 * answers derived by hand from ggml's reference quantizers), round-trip
 * error bounds, and every dispatched (SIMD) kernel against the scalar
 * reference. The process re-runs itself with WGLLM_CPU=avx2 so that the
 * AVX2 kernels are checked too on an AVX-512 machine (on arm64 with SDOT,
 * with WGLLM_CPU=neon for the kernels without it).
 *
 * WGLLM_BENCH=1 also prints the GB/s of each weight format's dot product
 * over a 64 MiB weight matrix on one thread (not asserted).
 */
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ULL /* this file's data */
#include "test.h"

#include "quant/quant.h"
#include "quant/vexp.h"

#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------- */


/* Random data with structure that stresses kernels: mostly gaussian-ish
 * values, some all-zero blocks, some blocks of large magnitude, some with a
 * single outlier. `big` bounds magnitudes (fp16 types must stay finite). */
static void fill_data(float *x, int64_t n, float big) {
    for (int64_t b = 0; b < n; b += 32) {
        const int kind = (int)(rng_u32() % 8);
        const float scale = kind == 1 ? big : kind == 2 ? 1e-3f : 1.0f;
        for (int64_t j = b; j < n && j < b + 32; j++) {
            x[j] = kind == 0 ? 0.0f : scale * (rng_uniform() + rng_uniform() + rng_uniform());
        }
        if (kind == 3 && b + 5 < n) x[b + 5] = -big * 0.5f;
    }
}

static const uint32_t weight_types[] = {WGLLM_TYPE_F32,  WGLLM_TYPE_F16,  WGLLM_TYPE_BF16, WGLLM_TYPE_Q4_0,
                                        WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_0, WGLLM_TYPE_Q5_1, WGLLM_TYPE_Q8_0};
#define N_WEIGHT_TYPES (sizeof(weight_types) / sizeof(weight_types[0]))

/* Magnitudes each format can hold: fp16 fields (d, m, and Q8_1's s = d *
 * sum(q), up to 32 * amax) must stay finite. */
static float big_for(uint32_t type) {
    switch (type) {
    case WGLLM_TYPE_F16: case WGLLM_TYPE_Q4_1: case WGLLM_TYPE_Q5_1: case WGLLM_TYPE_Q8_1: return 1000.0f;
    default: return 1e5f;
    }
}

/* ---- traits table ------------------------------------------------------ */

TEST(traits_table) {
    static const struct { uint32_t id; const char *name; int64_t blck; size_t size; } expect[] = {
        {0, "f32", 1, 4},          {1, "f16", 1, 2},          {2, "q4_0", 32, 18},       {3, "q4_1", 32, 20},
        {6, "q5_0", 32, 22},       {7, "q5_1", 32, 24},       {8, "q8_0", 32, 34},       {9, "q8_1", 32, 36},
        {10, "q2_K", 256, 84},     {11, "q3_K", 256, 110},    {12, "q4_K", 256, 144},    {13, "q5_K", 256, 176},
        {14, "q6_K", 256, 210},    {15, "q8_K", 256, 292},    {16, "iq2_xxs", 256, 66},  {17, "iq2_xs", 256, 74},
        {18, "iq3_xxs", 256, 98},  {19, "iq1_s", 256, 50},    {20, "iq4_nl", 32, 18},    {21, "iq3_s", 256, 110},
        {22, "iq2_s", 256, 82},    {23, "iq4_xs", 256, 136},  {24, "i8", 1, 1},          {25, "i16", 1, 2},
        {26, "i32", 1, 4},         {27, "i64", 1, 8},         {28, "f64", 1, 8},         {29, "iq1_m", 256, 56},
        {30, "bf16", 1, 2},        {34, "tq1_0", 256, 54},    {35, "tq2_0", 256, 66},    {39, "mxfp4", 32, 17},
        {40, "nvfp4", 64, 36},     {41, "q1_0", 128, 18},
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        const struct wgllm_type_traits *t = wgllm_type_traits(expect[i].id);
        CHECK(t->name != NULL);
        if (!t->name) continue;
        CHECK_STR(t->name, expect[i].name);
        CHECK_EQ_INT(t->blck_size, expect[i].blck);
        CHECK_EQ_INT(t->type_size, expect[i].size);
        CHECK_EQ_INT(wgllm_type_from_name(expect[i].name), expect[i].id);
        CHECK_EQ_INT(wgllm_row_size(expect[i].id, expect[i].blck * 3), expect[i].size * 3);
    }
    static const uint32_t unnamed[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 1000, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof(unnamed) / sizeof(unnamed[0]); i++) {
        CHECK(wgllm_type_traits(unnamed[i])->name == NULL);
        CHECK(wgllm_type_traits(unnamed[i])->vec_dot == NULL);
        CHECK(wgllm_type_traits_ref(unnamed[i])->name == NULL);
    }
    CHECK_STR(wgllm_type_name(2), "q4_0");
    CHECK_STR(wgllm_type_name(4), "unknown(4)");
    CHECK_EQ_INT(wgllm_type_from_name("Q4_0"), 2);
    CHECK_EQ_INT(wgllm_type_from_name("Q4_k"), 12);
    CHECK_EQ_INT(wgllm_type_from_name("q4_2"), -1);
    CHECK_EQ_INT(wgllm_type_from_name(""), -1);
    CHECK(wgllm_type_traits(WGLLM_TYPE_Q4_0)->is_quantized);
    CHECK(!wgllm_type_traits(WGLLM_TYPE_F16)->is_quantized);
    /* the pairing llama.cpp uses */
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_Q4_0)->vec_dot_type, WGLLM_TYPE_Q8_0);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_Q5_0)->vec_dot_type, WGLLM_TYPE_Q8_0);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_Q8_0)->vec_dot_type, WGLLM_TYPE_Q8_0);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_Q4_1)->vec_dot_type, WGLLM_TYPE_Q8_1);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_Q5_1)->vec_dot_type, WGLLM_TYPE_Q8_1);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_F16)->vec_dot_type, WGLLM_TYPE_F16);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_BF16)->vec_dot_type, WGLLM_TYPE_BF16);
    CHECK_EQ_INT(wgllm_type_traits(WGLLM_TYPE_F32)->vec_dot_type, WGLLM_TYPE_F32);
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++) {
        CHECK(wgllm_type_supported(weight_types[i]));
        CHECK(wgllm_type_traits(weight_types[i])->vec_dot_nr != NULL);
    }
    CHECK(!wgllm_type_supported(WGLLM_TYPE_I32)); /* not a weight format */
    CHECK(!wgllm_type_supported(WGLLM_TYPE_Q8_1)); /* activation-only format */
}

/* ---- known answers ----------------------------------------------------- */

/* Bytes derived from ggml's reference rules by hand (float32 arithmetic):
 * for 0..31, Q4_0 has d = 31/-8 = -3.875 (fp16 0xC3C0) and q = (int)(8.5 -
 * j/3.875); Q5_0 has d = -1.9375 and q = (int)(16.5 - j/1.9375); Q4_1 has
 * d = 31/15, m = 0, q = (int)(j*15/31 + 0.5); Q5_1 has d = 1, m = 0, q = j.
 * For j - 15 (j = 0..31) Q8_0 has d = 16/127 (fp16 0x3008), q = round(x *
 * 7.9375); Q8_1 also s = d * sum(q) = 16.0 (fp16 0x4C00). */
static const uint8_t kat_q4_0[] = {0xc0, 0xc3, 0x48, 0x48, 0x37, 0x37, 0x37, 0x37, 0x26,
                                   0x26, 0x26, 0x26, 0x15, 0x15, 0x15, 0x15, 0x04, 0x04};
static const uint8_t kat_q4_1[] = {0x22, 0x40, 0x00, 0x00, 0x80, 0x80, 0x91, 0x91, 0xa2, 0xa2,
                                   0xb3, 0xb3, 0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7};
static const uint8_t kat_q5_0[] = {0xc0, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x80, 0x7f, 0x7f, 0x6e, 0x6e,
                                   0x5d, 0x5d, 0x4c, 0x4c, 0x3b, 0x3b, 0x2a, 0x2a, 0x19, 0x19, 0x08};
static const uint8_t kat_q5_1[] = {0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00, 0x11, 0x22, 0x33,
                                   0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
static const uint8_t kat_q8_0[] = {0x08, 0x30, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9, 0xc0, 0xc8, 0xd0,
                                   0xd8, 0xe0, 0xe8, 0xf0, 0xf8, 0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30,
                                   0x38, 0x40, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f};
static const uint8_t kat_q8_1[] = {0x08, 0x30, 0x00, 0x4c, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9, 0xc0,
                                   0xc8, 0xd0, 0xd8, 0xe0, 0xe8, 0xf0, 0xf8, 0x00, 0x08, 0x10, 0x18, 0x20,
                                   0x28, 0x30, 0x38, 0x40, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f};

static void check_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what) {
    if (memcmp(got, want, n) != 0) {
        fprintf(stderr, "  %s bytes differ:\n    got ", what);
        for (size_t i = 0; i < n; i++) fprintf(stderr, "%02x ", got[i]);
        fprintf(stderr, "\n    want");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", want[i]);
        fprintf(stderr, "\n");
        test_checks_failed_in_current++;
    }
}

TEST(known_answers) {
    float ramp[32], centered[32];
    for (int j = 0; j < 32; j++) ramp[j] = (float)j, centered[j] = (float)(j - 15);
    uint8_t buf[64];
    const struct { uint32_t type; const float *x; const uint8_t *want; size_t size; } k[] = {
        {WGLLM_TYPE_Q4_0, ramp, kat_q4_0, sizeof(kat_q4_0)},   {WGLLM_TYPE_Q4_1, ramp, kat_q4_1, sizeof(kat_q4_1)},
        {WGLLM_TYPE_Q5_0, ramp, kat_q5_0, sizeof(kat_q5_0)},   {WGLLM_TYPE_Q5_1, ramp, kat_q5_1, sizeof(kat_q5_1)},
        {WGLLM_TYPE_Q8_0, centered, kat_q8_0, sizeof(kat_q8_0)}, {WGLLM_TYPE_Q8_1, centered, kat_q8_1, sizeof(kat_q8_1)},
    };
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        CHECK_EQ_INT(wgllm_type_traits(k[i].type)->type_size, k[i].size);
        memset(buf, 0xAA, sizeof(buf));
        wgllm_type_traits_ref(k[i].type)->from_float_ref(k[i].x, buf, 32);
        check_bytes(buf, k[i].want, k[i].size, wgllm_type_name(k[i].type));
        /* no tie and id exact here, so the fast quantizers agree too */
        memset(buf, 0xAA, sizeof(buf));
        wgllm_type_traits(k[i].type)->from_float(k[i].x, buf, 32);
        check_bytes(buf, k[i].want, k[i].size, "from_float");
        /* dequantizing gives d * q (+ m) */
        float y[32];
        wgllm_type_traits(k[i].type)->to_float(k[i].want, y, 32);
        for (int j = 0; j < 32; j++) CHECK(fabsf(y[j] - k[i].x[j]) <= 2.0f);
    }
    /* Q4_0 dequant of the known block: element 0 is (8-8)*d, element 16 is (4-8)*-3.875 */
    float y[32];
    wgllm_type_traits(WGLLM_TYPE_Q4_0)->to_float(kat_q4_0, y, 32);
    CHECK_EQ_INT(y[0] == 0.0f, 1);
    CHECK_NEAR(y[16], 15.5, 0);
    CHECK_NEAR(y[31], 31.0, 0);

    /* Rounding of exact ties: with amax = 127 both quantizers use id = 1.
     * ggml's reference rounds 2.5 away from zero (3), llama.cpp's x86
     * activation quantizer (and ours) to even (2). */
    float tie[32] = {0};
    tie[0] = 127.0f, tie[1] = 2.5f, tie[2] = -2.5f, tie[3] = 3.5f;
    wgllm_block_q8_0 a, b;
    wgllm_type_traits_ref(WGLLM_TYPE_Q8_0)->from_float_ref(tie, &a, 32);
    wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float(tie, &b, 32);
    CHECK_EQ_INT(a.qs[1], 3);
    CHECK_EQ_INT(a.qs[2], -3);
    CHECK_EQ_INT(b.qs[1], 2);
    CHECK_EQ_INT(b.qs[2], -2);
    CHECK_EQ_INT(b.qs[3], 4);
    CHECK_EQ_INT(a.d, b.d);
    wgllm_block_q8_1 c;
    wgllm_type_traits(WGLLM_TYPE_Q8_1)->from_float(tie, &c, 32);
    CHECK_EQ_INT(c.qs[1], 2);
    CHECK_NEAR(wgllm_fp16_to_fp32(c.s), (127 + 2 - 2 + 4) * (127.0f / 127.0f), 0.07);
}

/* ---- round trip error bounds ------------------------------------------- */

TEST(round_trip_bounds) {
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    const uint32_t types[] = {WGLLM_TYPE_F16,  WGLLM_TYPE_BF16, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_1,
                              WGLLM_TYPE_Q5_0, WGLLM_TYPE_Q5_1, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_1};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const uint32_t type = types[ti];
        const struct wgllm_type_traits *t = wgllm_type_traits(type);
        fill_data(x, N, big_for(type));
        t->from_float_ref(x, q, N);
        t->to_float(q, y, N);
        int bad = 0;
        for (int b = 0; b < N; b += 32) {
            float amax = 0, mn = x[b], mx = x[b];
            for (int j = b; j < b + 32; j++) {
                amax = fmaxf(amax, fabsf(x[j]));
                mn = fminf(mn, x[j]);
                mx = fmaxf(mx, x[j]);
            }
            for (int j = b; j < b + 32; j++) {
                const float e = fabsf(x[j] - y[j]);
                const float sub = 1.0f / (1 << 25); /* abs. error of an fp16 d in the subnormal range */
                float bound;
                switch (type) {
                case WGLLM_TYPE_F16: bound = fabsf(x[j]) * (1.0f / 2048) + 6e-8f; break;
                case WGLLM_TYPE_BF16: bound = fabsf(x[j]) * (1.0f / 256); break;
                /* one step (the clamped end of the range), plus fp16 rounding of d */
                case WGLLM_TYPE_Q4_0: bound = amax / 8 * 1.01f + 8 * sub; break;
                case WGLLM_TYPE_Q5_0: bound = amax / 16 * 1.01f + 16 * sub; break;
                /* half a step, plus fp16 rounding of d (x up to 31 steps) and of m */
                case WGLLM_TYPE_Q4_1: bound = (mx - mn) / 15 * 0.52f + fabsf(mn) / 1024 + 16 * sub; break;
                case WGLLM_TYPE_Q5_1: bound = (mx - mn) / 31 * 0.54f + fabsf(mn) / 1024 + 32 * sub; break;
                default: bound = amax / 127 * 0.57f + 127 * sub; break; /* Q8_0, Q8_1 */
                }
                if (!(e <= bound)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s: x[%d]=%g back %g err %g > %g\n", t->name, j, x[j], y[j], e, bound);
                }
            }
        }
        CHECK_EQ_INT(bad, 0);
        /* the fast to_float is the reference one, value for value */
        static float yr[N];
        wgllm_type_traits_ref(type)->to_float(q, yr, N);
        CHECK(memcmp(y, yr, sizeof(y)) == 0);
    }
}

/* ---- quantizers: fast == reference bytes ------------------------------- */

TEST(quantizers_match) {
    enum { N = 32 * 300 };
    static float x[N];
    static uint8_t a[N * 4], b[N * 4], c[N * 4];
    const uint32_t types[] = {WGLLM_TYPE_F32,  WGLLM_TYPE_F16,  WGLLM_TYPE_BF16, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_1,
                              WGLLM_TYPE_Q5_0, WGLLM_TYPE_Q5_1, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_1};
    const int64_t lens[] = {32, 64, 96, 320, N};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const uint32_t type = types[ti];
        const struct wgllm_type_traits *t = wgllm_type_traits(type), *r = wgllm_type_traits_ref(type);
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            const int64_t n = lens[li];
            const size_t bytes = wgllm_row_size(type, n);
            fill_data(x, n, big_for(type));
            memset(a, 0x55, bytes), memset(b, 0x66, bytes), memset(c, 0x77, bytes);
            t->from_float(x, a, n);
            r->from_float(x, b, n);
            r->from_float_ref(x, c, n);
            if (memcmp(a, b, bytes) != 0) {
                fprintf(stderr, "  %s n=%lld: dispatched from_float != scalar from_float\n", t->name, (long long)n);
                test_checks_failed_in_current++;
            }
            if (type == WGLLM_TYPE_Q8_0 || type == WGLLM_TYPE_Q8_1) {
                /* activation quantizer vs reference: only exact ties or a
                 * 1-ulp different multiplier may differ, by one step */
                const size_t bs = t->type_size, hdr = bs - 32;
                int diff = 0;
                for (size_t blk = 0; blk < bytes / bs; blk++) {
                    CHECK(!memcmp(a + blk * bs, c + blk * bs, 2)); /* d */
                    for (size_t j = hdr; j < bs; j++) {
                        const int d = (int8_t)a[blk * bs + j] - (int8_t)c[blk * bs + j];
                        CHECK(d >= -1 && d <= 1);
                        diff += d != 0;
                    }
                }
                CHECK((size_t)diff * 1000 <= (size_t)n);
            } else if (memcmp(a, c, bytes) != 0) {
                fprintf(stderr, "  %s n=%lld: from_float != from_float_ref\n", t->name, (long long)n);
                test_checks_failed_in_current++;
            }
        }
    }
    /* bf16 rounding and NaN, through the SIMD path (16 at a time) */
    float v[32];
    for (int j = 0; j < 32; j++) v[j] = rng_uniform() * 1e10f;
    union { uint32_t u; float f; } bits;
    bits.u = 0x3F808000u, v[0] = bits.f; /* tie, even below: rounds down */
    bits.u = 0x3F818000u, v[1] = bits.f; /* tie, odd below: rounds up */
    bits.u = 0x7FC00001u, v[2] = bits.f; /* NaN stays NaN */
    bits.u = 0x00000123u, v[3] = bits.f; /* denormal */
    wgllm_bf16 h[32];
    wgllm_type_traits(WGLLM_TYPE_BF16)->from_float(v, h, 32);
    CHECK_EQ_INT(h[0], 0x3F80);
    CHECK_EQ_INT(h[1], 0x3F82);
    CHECK((h[2] & 0x7F80) == 0x7F80 && (h[2] & 0x7F) != 0);
    for (int j = 0; j < 32; j++) CHECK_EQ_INT(h[j], wgllm_fp32_to_bf16(v[j]));
}

/* ---- fp16 rows --------------------------------------------------------- */

TEST(fp16_rows) {
    enum { N = 1 << 16 };
    static wgllm_fp16 h[N], h2[N];
    static float f[N];
    int n = 0;
    for (uint32_t i = 0; i < N; i++)
        if ((i & 0x7C00) != 0x7C00 || (i & 0x3FF) == 0) h[n++] = (wgllm_fp16)i; /* all but NaN */
    wgllm_fp16_to_fp32_row(h, f, n);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += memcmp(&f[i], &(float){wgllm_fp16_to_fp32(h[i])}, 4) != 0;
    CHECK_EQ_INT(bad, 0);
    wgllm_fp32_to_fp16_row(f, h2, n);
    CHECK(memcmp(h, h2, (size_t)n * 2) == 0);
    /* rounding: random floats over the whole half range, subnormals, overflow */
    for (int i = 0; i < N; i++) {
        union { uint32_t u; float f; } v = {.u = (rng_u32() % 0x48000000u) | (rng_u32() & 0x80000000u)};
        f[i] = v.f;
    }
    wgllm_fp32_to_fp16_row(f, h2, N - 3);
    bad = 0;
    for (int i = 0; i < N - 3; i++) bad += h2[i] != wgllm_fp32_to_fp16(f[i]);
    CHECK_EQ_INT(bad, 0);
}

/* ---- dot kernels: dispatched == reference ------------------------------- */

/* Quantizes x as type and returns the dequantized values in back. */
static void make_row(uint32_t type, const float *x, void *q, float *back, int64_t n, bool activation) {
    const struct wgllm_type_traits *r = wgllm_type_traits_ref(type);
    (activation ? r->from_float : r->from_float_ref)(x, q, n);
    r->to_float(q, back, n);
}

TEST(vec_dot_match) {
    enum { NMAX = 32 * 131, ROWS = 9 };
    static float x[NMAX], y[NMAX], xb[NMAX], yb[NMAX];
    static uint8_t qx[ROWS * NMAX * 4], qy[NMAX * 4];
    const int64_t qlens[] = {32, 64, 96, 128, 160, 224, 32 * 131};
    const int64_t flens[] = {1, 7, 16, 33, 100, 1000, 4096 + 31};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        const uint32_t type = weight_types[ti];
        const struct wgllm_type_traits *t = wgllm_type_traits(type), *r = wgllm_type_traits_ref(type);
        const uint32_t vdt = t->vec_dot_type;
        const bool quant = t->blck_size > 1;
        for (size_t li = 0; li < 7; li++) {
            const int64_t n = quant ? qlens[li] : flens[li];
            const size_t row = wgllm_row_size(type, n);
            for (int rep = 0; rep < 3; rep++) {
                fill_data(y, n, big_for(type));
                make_row(vdt, y, qy, yb, n, true);
                float s_nr[ROWS], s_nr_ref[ROWS];
                double mag_k[ROWS];
                for (int k = 0; k < ROWS; k++) {
                    fill_data(x, n, big_for(type));
                    make_row(type, x, qx + (size_t)k * row, xb, n, false);
                    double mag = 0;
                    for (int64_t j = 0; j < n; j++) mag += fabs((double)xb[j] * yb[j]);
                    float s_fast = NAN, s_ref = NAN;
                    t->vec_dot(n, &s_fast, qx + (size_t)k * row, qy);
                    r->vec_dot(n, &s_ref, qx + (size_t)k * row, qy);
                    const double tol = 1e-5 * mag + 1e-30;
                    if (!(fabs((double)s_fast - s_ref) <= tol)) {
                        fprintf(stderr, "  %s n=%lld: vec_dot %.9g vs ref %.9g (|terms| %.3g)\n", t->name,
                                (long long)n, s_fast, s_ref, mag);
                        test_checks_failed_in_current++;
                    }
                    /* and the reference agrees with the dequantized math */
                    double exact = 0;
                    for (int64_t j = 0; j < n; j++) exact += (double)xb[j] * yb[j];
                    /* (Q8_1's s is d*sum(q) rounded to fp16, so the min term of
                     * Q4_1/Q5_1 is only as exact as that) */
                    if (vdt != WGLLM_TYPE_Q8_1 && !(fabs(exact - s_ref) <= 1e-5 * mag + 1e-30)) {
                        fprintf(stderr, "  %s n=%lld: ref %.9g vs dequantized math %.9g\n", t->name, (long long)n,
                                s_ref, exact);
                        test_checks_failed_in_current++;
                    }
                    s_nr_ref[k] = s_ref;
                    mag_k[k] = mag;
                }
                for (int nr = 1; nr <= ROWS; nr += (nr < 5 ? 1 : 4)) {
                    for (int k = 0; k < ROWS; k++) s_nr[k] = NAN;
                    t->vec_dot_nr(n, s_nr, qx, row, qy, nr);
                    for (int k = 0; k < ROWS; k++) {
                        if (k >= nr) {
                            CHECK(isnan(s_nr[k])); /* writes nothing past nrows */
                            continue;
                        }
                        CHECK(fabs((double)s_nr[k] - s_nr_ref[k]) <= 1e-5 * mag_k[k] + 1e-30);
                    }
                }
            }
        }
    }
}

/* F16's multi-row dot (the attention's scores: one query against each
 * cached key, rows a head's stride apart) gives exactly vec_dot's bits, so
 * the scores do not depend on how many keys one call takes. */
TEST(f16_rows_dot_same_bits) {
    const struct wgllm_type_traits *t = wgllm_type_traits(WGLLM_TYPE_F16);
    /* (the kernels convert y once for up to 4096 elements, longer rows one by one) */
    static const int64_t lens[] = {16, 17, 64, 80, 96, 128, 256, 512, 600, 4096, 4100};
    enum { NR = 9, STRIDE = 4200 };
    wgllm_fp16 *x = malloc(sizeof(wgllm_fp16) * NR * STRIDE), *y = malloc(sizeof(wgllm_fp16) * STRIDE);
    for (int i = 0; i < NR * STRIDE; i++) x[i] = wgllm_fp32_to_fp16(3.0f * rng_uniform());
    for (int i = 0; i < STRIDE; i++) y[i] = wgllm_fp32_to_fp16(3.0f * rng_uniform());
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        float nr[NR + 1], one;
        nr[NR] = -1.0f;
        t->vec_dot_nr(lens[li], nr, x, STRIDE * sizeof(wgllm_fp16), y, NR);
        CHECK(nr[NR] == -1.0f);
        for (int r = 0; r < NR; r++) {
            t->vec_dot(lens[li], &one, x + (size_t)r * STRIDE, y);
            CHECK(!memcmp(&one, &nr[r], sizeof one));
        }
    }
    free(x);
    free(y);
}

/* ---- benchmark (WGLLM_BENCH=1) ----------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(void) {
    enum { N = 4096, DISTINCT = 64 };
    static float x[N];
    static uint8_t qy[N * 4];
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        const uint32_t type = weight_types[ti];
        const struct wgllm_type_traits *t = wgllm_type_traits(type);
        const size_t row = wgllm_row_size(type, N);
        const char *mb = getenv("WGLLM_BENCH_MB"); /* default 64 MiB; small sizes show compute speed */
        const int64_t rows = ((int64_t)(mb ? atoi(mb) : 64) << 20) / (int64_t)row;
        uint8_t *w = wgllm_alloc_aligned((size_t)rows * row);
        for (int k = 0; k < DISTINCT; k++) {
            fill_data(x, N, 4.0f);
            wgllm_type_traits_ref(type)->from_float_ref(x, w + (size_t)k * row, N);
        }
        for (int64_t k = DISTINCT; k < rows; k++) memcpy(w + (size_t)k * row, w + (size_t)(k % DISTINCT) * row, row);
        fill_data(x, N, 4.0f);
        wgllm_type_traits(t->vec_dot_type)->from_float(x, qy, N);
        float *s = malloc(sizeof(float) * (size_t)rows);
        double best1 = 1e9, best4 = 1e9;
        for (int rep = 0; rep < (mb ? 40 : 4); rep++) {
            double t0 = now_s();
            for (int64_t k = 0; k < rows; k++) t->vec_dot(N, s + k, w + (size_t)k * row, qy);
            double t1 = now_s();
            for (int64_t k = 0; k < rows; k += 16)
                t->vec_dot_nr(N, s + k, w + (size_t)k * row, row, qy, (int)WGLLM_MIN(16, rows - k));
            double t2 = now_s();
            best1 = fmin(best1, t1 - t0), best4 = fmin(best4, t2 - t1);
        }
        const double gb = (double)rows * row / 1e9;
        printf("bench %-5s vec_dot %6.2f GB/s   vec_dot_nr %6.2f GB/s   (%lld rows x %d)\n", t->name, gb / best1,
               gb / best4, (long long)rows, N);
        free(s);
        wgllm_free_aligned(w);
    }
}

/* ---- main -------------------------------------------------------------- */

/* Re-runs this executable capped at AVX2 (arm64: NEON without SDOT) so both
 * SIMD levels get checked. */
/* The softmax's exponentials and sum (quant/vexp.h): the dispatched level
 * gives libm expf's bits and the reference's sum, on a sweep of the floats
 * from 0 down past the underflow, the special values, any length (tails)
 * and in place. */
TEST(exp_sum_same_bits_as_expf) {
    enum { CHUNK = 4099 };
    static float x[CHUNK], y[CHUNK], z[CHUNK];
    long bad = 0, n_all = 0;
    uint32_t u = 0x80000000u; /* -0.0, then more and more negative */
    while (u < 0xC2E00000u) { /* to -112 */
        int n = 0;
        for (; n < CHUNK && u < 0xC2E00000u; n++, u += 61) memcpy(&x[n], &u, 4);
        const double a = wgllm_vec_exp_sum(x, y, n, 0.0f), b = wgllm_vec_exp_sum_ref(x, z, n, 0.0f);
        for (int i = 0; i < n; i++) bad += memcmp(&y[i], &z[i], 4) != 0;
        bad += memcmp(&a, &b, sizeof a) != 0;
        n_all += n;
    }
    if (bad) fprintf(stderr, "  %ld of %ld exponentials or sums differ from the reference\n", bad, n_all);
    CHECK_EQ_INT((int)bad, 0);
    /* the special values, with a shift m, every length up to 40 (the vector tails), in place */
    const float sp[] = {-INFINITY, 0.0f, -0.0f, 1.5f, 88.5f, 88.8f, 200.0f, -87.5f, -103.9f, -103.98f, -104.0f,
                        -150.0f, -1e30f, 3.0f, -2.25f, 0.125f};
    for (int n = 0; n <= 40; n++) {
        for (int i = 0; i < n; i++) x[i] = sp[(i * 7 + n) % 16] + (i % 3 ? 0.0f : 0.5f);
        const float m = n % 2 ? 2.0f : -1.0f;
        const double b = wgllm_vec_exp_sum_ref(x, z, n, m);
        const double a = wgllm_vec_exp_sum(x, x, n, m); /* in place */
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        CHECK(memcmp(x, z, sizeof(float) * (size_t)n) == 0);
    }
    x[0] = NAN, x[1] = -1.0f;
    const double a = wgllm_vec_exp_sum(x, y, 9, 0.0f);
    CHECK(isnan(y[0]) && isnan(a) && y[1] == expf(-1.0f));
}

static void run_avx2_child(void) {
    const struct wgllm_cpu_caps *caps = wgllm_cpu_caps();
#if defined(__aarch64__)
    const char *cap = "neon";
    if (getenv("WGLLM_CPU") || !caps->dotprod) return;
#else
    const char *cap = "avx2";
    if (getenv("WGLLM_CPU") || !caps->avx512vnni || !caps->avx2) return;
#endif
    test_rerun_with_cpu_cap(cap);
}

int main(void) {
    wgllm_quant_init();
    RUN(traits_table);
    RUN(known_answers);
    RUN(round_trip_bounds);
    RUN(quantizers_match);
    RUN(fp16_rows);
    RUN(vec_dot_match);
    RUN(f16_rows_dot_same_bits);
    RUN(exp_sum_same_bits_as_expf);
    const char *b = getenv("WGLLM_BENCH");
    if (b && !strcmp(b, "1")) bench();
    run_avx2_child();
    return test_summary(getenv("WGLLM_CPU") ? "test_quant (WGLLM_CPU capped)" : "test_quant");
}
