/*
 * test_webgpu_moe.c - the mixture-of-experts kernels (kernels_moe.c) on the
 * WebGPU device against host references written from the CPU backend's
 * moe_ffn (backend/cpu/forward.c), op by op as test_webgpu.c does for the
 * dense kernels:
 *  - MATVEC_ID: the chosen experts' rows of a stack split in two pieces
 *    (experts [0, 2) and [2, 4) in two buffers), both input modes (one input
 *    per token: gate/up; one per choice: down), every mat-vec shape of the
 *    tune (workgroup reduction, a row per thread, subgroups), F32, F16,
 *    Q8_0, Q4_0 and a K-quant; no row of another choice is written;
 *  - MOE_ROUTE: the same ids as the CPU's top-k (ties to the lower index,
 *    rows of equal logits included) and the same weights within f32
 *    rounding, with and without renormalisation, and gpt-oss's top-k of the
 *    raw logits weighted by their softmax;
 *  - MOE_SUM: the weighted sum with no shared expert, a plain one and a
 *    sigmoid-gated one, with and without granite's scale;
 *  - MOE_GLU_OAI and MOE_BIAS (gpt-oss): each choice's expert's biases
 *    (by the routing buffer's ids), SwiGLU-OAI with gate/up past its limit;
 *  - MOE_BUCKET: each expert's choices listed in token order, as the CPU
 *    groups them, from the pass's tokens only;
 *  - MATMUL_ID (prefill grouped by expert): bit for bit MATMUL over each
 *    expert's rows, and MATVEC_ID's results within rounding, in several
 *    formats, both mat-mat shapes, experts of no token or of every token;
 *    every weight format of MATVEC_ID in the direct shape.
 * The model-level checks (every MoE architecture against the CPU backend)
 * are in test_webgpu_model.c.
 */
#include "backend/cpu/ops.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "quant/quant.h"
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull /* this file's data */
#include "test.h"

static struct wgllm_gpu *G;

static struct wgllm_gpu_buffer *upload(const void *data, size_t bytes) { return test_gpu_upload(G, data, bytes); }
static bool readback(struct wgllm_gpu_buffer *b, void *dst, size_t bytes) { return test_gpu_read(G, b, dst, bytes); }

/* One kernel as generated for tune, params in a fresh uniform buffer,
 * bindings 1.. = bufs; false (printed) when anything fails. */
static bool run(enum wgllm_kernel k, uint32_t type, const struct wgllm_wgsl_tune *tune, const union wgllm_kparams *kp,
                int nbuf, struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y) {
    const struct wgllm_kernel_key key = {.kernel = k, .type = type, .neox = false};
    char *src = wgllm_wgsl_generate(&key, tune);
    if (!src) {
        fprintf(stderr, "  no WGSL for %s/%s\n", wgllm_wgsl_kernel_name(k), wgllm_type_name(type));
        return false;
    }
    const bool ok = test_gpu_dispatch(G, src, wgllm_wgsl_kernel_name(k), kp, sizeof *kp, nbuf, bufs, x, y);
    free(src);
    return ok;
}

/* ---- MATVEC_ID ------------------------------------------------------------ */

/* The mat-vec shapes a tune can give (as test_webgpu.c's matvec_tunes). */
static int tunes_of(struct wgllm_wgsl_tune *t) {
    t[0] = *wgllm_wgsl_default_tune();
    t[1] = *wgllm_wgsl_cpu_adapter_tune();
    if (!wgllm_gpu_get_info(G)->subgroups) return 2;
    t[2] = t[0];
    t[2].matvec_subgroups = true;
    t[2].wg_matvec = 128, t[2].rows_matvec = 3;
    return 3;
}

/* Rows of a weight format: quantized from random floats where the format
 * has a quantizer, else random blocks (the grid formats) kept when they
 * dequantize to finite values of sane size; deq gets them dequantized. */
static char *random_rows(uint32_t type, int rows, int K, float *deq) {
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    const size_t rs = wgllm_row_size(type, K);
    char *w = malloc(rs * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)K);
    for (int r = 0; r < rows; r++) {
        char *wr = w + (size_t)r * rs;
        float *dr = deq + (size_t)r * K;
        for (bool ok = false; !ok;) {
            if (tr->from_float_ref || type == WGLLM_TYPE_F32) {
                for (int i = 0; i < K; i++) src[i] = rng_frand();
                if (type == WGLLM_TYPE_F32) memcpy(wr, src, rs);
                else tr->from_float_ref(src, wr, K);
            } else {
                for (size_t i = 0; i < rs; i++) wr[i] = (char)rng_u32();
            }
            tr->to_float(wr, dr, K);
            ok = true;
            for (int i = 0; i < K && ok; i++) ok = isfinite(dr[i]) && fabsf(dr[i]) < 1e4f;
        }
    }
    free(src);
    return w;
}

TEST(matvec_id_formats) {
    enum { X = 4, M = 67, K = 256, T = 3, U = 2 }; /* experts, rows each, width, tokens, used */
    const uint32_t types[] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_K};
    /* token t's choices (ids at word 5 of S: ids_at is honoured), an expert chosen twice across tokens */
    const uint32_t ids[5 + T * U] = {99, 99, 99, 99, 99, 3, 0, 1, 3, 2, 1};
    struct wgllm_wgsl_tune tunes[3];
    const int n_tunes = tunes_of(tunes);
    float *deq = malloc(sizeof(float) * X * M * K), *src = malloc(sizeof(float) * K);
    float *x = malloc(sizeof(float) * T * U * K), *y = malloc(sizeof(float) * T * U * M);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const struct wgllm_type_traits *tr = wgllm_type_traits(type);
        const size_t rs = wgllm_row_size(type, K);
        char *w = random_rows(type, X * M, K, deq);
        for (int i = 0; i < T * U * K; i++) x[i] = rng_frand();
        for (int tv = 0; tv < n_tunes; tv++)
            for (int per_choice = 0; per_choice < 2; per_choice++) {
                const struct wgllm_wgsl_tune *tu = &tunes[tv];
                const uint32_t groups = (M + tu->rows_matvec - 1) / tu->rows_matvec;
                /* two pieces of two experts each; y starts as a sentinel */
                for (int i = 0; i < T * U * M; i++) y[i] = -12345.0f;
                struct wgllm_gpu_buffer *b[5] = {upload(w, rs * 2 * M), upload(w + rs * 2 * M, rs * 2 * M),
                                                 upload(x, sizeof(float) * T * U * K),
                                                 upload(y, sizeof(float) * T * U * M), upload(ids, sizeof ids)};
                bool ok = b[0] && b[1] && b[2] && b[3] && b[4];
                for (int piece = 0; ok && piece < 2; piece++) {
                    const union wgllm_kparams kp = {.matvec_id = {.rows = M, .x_div = per_choice ? 1 : U, .k = K,
                                                                  .ids_at = 5, .e0 = 2u * piece, .n_exp = 2,
                                                                  .used = U, .groups = groups}};
                    struct wgllm_gpu_buffer *bb[4] = {b[piece], b[2], b[3], b[4]};
                    ok = run(WGLLM_KERNEL_MATVEC_ID, type, tu, &kp, 4, bb, groups * U, T);
                }
                ok = ok && readback(b[3], y, sizeof(float) * T * U * M);
                CHECK(ok);
                double worst = 0;
                for (int q = 0; ok && q < T * U; q++) {
                    const float *xr = x + (size_t)(per_choice ? q : q / U) * K;
                    for (int r = 0; r < M; r++) {
                        const float *wr = deq + ((size_t)ids[5 + q] * M + r) * K;
                        double ref = 0, mag = 0;
                        for (int i = 0; i < K; i++) ref += (double)wr[i] * xr[i], mag += fabs((double)wr[i] * xr[i]);
                        const double e = fabs(y[(size_t)q * M + r] - ref) / (mag + 1e-6);
                        if (e > worst || e != e) worst = e;
                    }
                }
                CHECK(worst <= 2e-6);
                if (worst > 2e-6 || tv == 0)
                    printf("  matvec_id %-5s %s (%s): rel err vs dequant %.2e\n", tr->name,
                           per_choice ? "input per choice" : "input per token",
                           tu->matvec_thread_rows ? "thread rows" : tu->matvec_subgroups ? "subgroups" : "reduction", worst);
                for (int i = 0; i < 5; i++) wgllm_gpu_buffer_destroy(G, b[i]);
            }
        free(w);
    }
    free(deq), free(src), free(x), free(y);
}

/* ---- MOE_ROUTE ------------------------------------------------------------ */

/* The CPU backend's routing of one row (forward.c, moe_ffn). */
static void route_ref(const float *l, int n, int k, bool norm, bool softmax_w, int32_t *sel, float *w) {
    float *p = malloc(sizeof(float) * (size_t)n);
    memcpy(p, l, sizeof(float) * (size_t)n);
    if (!softmax_w) wgllm_op_softmax(p, n);
    float sum = 0.0f;
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int j = 0; j < i && !taken; j++) taken = sel[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[i] = best;
        w[i] = p[best];
        sum += w[i];
    }
    if (softmax_w) wgllm_op_softmax(w, k); /* gpt-oss: over the chosen logits only */
    if (norm) {
        sum = fmaxf(sum, 6.103515625e-5f);
        for (int i = 0; i < k; i++) w[i] /= sum;
    }
    free(p);
}

TEST(moe_route_like_cpu) {
    static const int cases[][2] = {{8, 2}, {4, 2}, {60, 4}, {128, 8}, {256, 1}, {16, 16}}; /* experts, used */
    enum { T = 37 };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int mode = 0; mode < 3; mode++) { /* 0, 1: without / with renormalisation; 2: gpt-oss's */
            const int X = cases[c][0], K = cases[c][1], norm = mode == 1, smw = mode == 2;
            float *l = malloc(sizeof(float) * T * X), *wref = malloc(sizeof(float) * T * K);
            int32_t *sref = malloc(sizeof(int32_t) * T * K);
            uint32_t *s = calloc((size_t)T * K * 2 + 3, sizeof(uint32_t));
            for (int i = 0; i < T * X; i++) l[i] = 3.0f * rng_frand();
            /* ties: a row of equal logits, a row whose best two are equal, logits 2^-20 apart */
            for (int e = 0; e < X; e++) l[e] = 0.5f;
            l[X + X - 1] = l[X + 1] = 9.0f;
            for (int e = 0; e < X; e++) l[2 * X + e] = 1.0f + (float)((e * 7) % X) * 9.5367431640625e-07f;
            for (int t = 0; t < T; t++) route_ref(l + (size_t)t * X, X, K, norm, smw, sref + (size_t)t * K, wref + (size_t)t * K);
            struct wgllm_gpu_buffer *b[2] = {upload(l, sizeof(float) * T * X), upload(s, sizeof(uint32_t) * ((size_t)T * K * 2 + 3))};
            /* ids from word 3 (ids_at is honoured), weights after them */
            const union wgllm_kparams kp = {.moe_route = {.rows = T, .n_expert = (uint32_t)X, .used = (uint32_t)K,
                                                          .ids_at = 3, .w_at = 3 + T * K, .norm = (uint32_t)norm,
                                                          .softmax_w = (uint32_t)smw}};
            const struct wgllm_wgsl_tune *tu = wgllm_wgsl_default_tune();
            bool ok = b[0] && b[1] && run(WGLLM_KERNEL_MOE_ROUTE, WGLLM_TYPE_F32, tu, &kp, 2, b,
                                           (T + tu->wg_elem - 1) / tu->wg_elem, 1) &&
                      readback(b[1], s, sizeof(uint32_t) * ((size_t)T * K * 2 + 3));
            CHECK(ok);
            int bad_ids = 0;
            double worst = 0;
            for (int q = 0; ok && q < T * K; q++) {
                if ((int32_t)s[3 + q] != sref[q]) {
                    if (bad_ids++ < 4) printf("  route %d/%d row %d choice %d: gpu %u, cpu %d\n", X, K, q / K, q % K, s[3 + q], sref[q]);
                    continue;
                }
                float wg;
                memcpy(&wg, &s[3 + T * K + q], 4);
                const double e = fabs((double)wg - wref[q]) / fabs((double)wref[q]);
                if (e > worst || e != e) worst = e;
            }
            CHECK_EQ_INT(bad_ids, 0);
            CHECK(worst <= 1e-5); /* the GPU's exp is within a few ulps of expf */
            if (worst > 1e-5 || c == 3) printf("  route %d experts, %d used, mode %d: ids equal, weights rel err %.2e\n", X, K, mode, worst);
            CHECK(!s[0] && !s[1] && !s[2]); /* nothing before ids_at */
            wgllm_gpu_buffer_destroy(G, b[0]), wgllm_gpu_buffer_destroy(G, b[1]);
            free(l), free(wref), free(sref), free(s);
        }
}

/* ---- MOE_SUM -------------------------------------------------------------- */

TEST(moe_sum_like_cpu) {
    enum { E = 96, T = 3, U = 3 };
    float r[T * U * E], sh[T * E], gl[T + 1], x0[T * E], x[T * E];
    uint32_t s[2 * T * U];
    for (int i = 0; i < T * U * E; i++) r[i] = rng_frand();
    for (int i = 0; i < T * E; i++) sh[i] = rng_frand(), x0[i] = rng_frand();
    for (int t = 0; t <= T; t++) gl[t] = 4.0f * rng_frand();
    for (int q = 0; q < T * U; q++) {
        const float w = 0.5f * (rng_frand() + 1.0f);
        s[q] = 0;
        memcpy(&s[T * U + q], &w, 4);
    }
    for (int shared = 0; shared < 3; shared++)
        for (int scaled = 0; scaled < 2; scaled++) {
            const float rs = scaled ? 0.22f : 1.0f;
            struct wgllm_gpu_buffer *b[5] = {upload(x0, sizeof x0), upload(r, sizeof r), upload(s, sizeof s),
                                             upload(sh, sizeof sh), upload(gl, sizeof gl)};
            const union wgllm_kparams kp = {.moe_sum = {.width = E, .used = U, .w_at = T * U, .shared = (uint32_t)shared,
                                                        .g_off = 1, .scaled = (uint32_t)scaled, .scale = rs}};
            const struct wgllm_wgsl_tune *tu = wgllm_wgsl_default_tune();
            bool ok = b[0] && b[1] && b[2] && b[3] && b[4] &&
                      run(WGLLM_KERNEL_MOE_SUM, WGLLM_TYPE_F32, tu, &kp, 5, b, (E + tu->wg_elem - 1) / tu->wg_elem, T) &&
                      readback(b[0], x, sizeof x);
            CHECK(ok);
            double worst = 0;
            for (int t = 0; ok && t < T; t++) {
                const float v = gl[1 + t], g = (v / (1.0f + expf(-v))) / v;
                for (int i = 0; i < E; i++) {
                    float w0, sum;
                    memcpy(&w0, &s[T * U + t * U], 4);
                    sum = w0 * r[(t * U) * E + i];
                    for (int j = 1; j < U; j++) {
                        float wj;
                        memcpy(&wj, &s[T * U + t * U + j], 4);
                        sum += wj * r[(t * U + j) * E + i];
                    }
                    if (shared) sum += shared == 2 ? sh[t * E + i] * g : sh[t * E + i];
                    if (rs != 1.0f) sum *= rs;
                    const float want = x0[t * E + i] + sum;
                    const double e = fabs((double)x[t * E + i] - want) / (fabs(want) + 1.0);
                    if (e > worst || e != e) worst = e;
                }
            }
            CHECK(worst <= 1e-6);
            if (worst > 1e-6) printf("  moe_sum shared %d scaled %d: rel err %.2e\n", shared, scaled, worst);
            for (int i = 0; i < 5; i++) wgllm_gpu_buffer_destroy(G, b[i]);
        }
}

/* ---- MOE_GLU_OAI, MOE_BIAS ------------------------------------------------ */

/* As the CPU's moe_ffn for gpt-oss: each choice's gate and up rows plus its
 * expert's biases (the matrix product's f32 add), then wgllm_op_swiglu_oai;
 * the down rows plus theirs. Values up to +-12 so the limit of 7 clips. */
TEST(moe_glu_oai_and_bias_like_cpu) {
    enum { X = 5, FE = 40, T = 3, U = 2, N = T * U * FE, VOFF = 7 };
    float g[N], u[N], y[N] = {0}, d[N], d0[N], v[VOFF + 3 * X * FE];
    uint32_t s[T * U];
    for (int i = 0; i < N; i++) g[i] = 12.0f * rng_frand(), u[i] = 12.0f * rng_frand(), d0[i] = rng_frand();
    for (int i = 0; i < VOFF + 3 * X * FE; i++) v[i] = 2.0f * rng_frand();
    for (int q = 0; q < T * U; q++) s[q] = (uint32_t)((q * 3 + 1) % X);
    const float *bg = v + VOFF, *bu = v + VOFF + X * FE, *bd = v + VOFF + 2 * X * FE;
    struct wgllm_gpu_buffer *b[5] = {upload(g, sizeof g), upload(u, sizeof u), upload(y, sizeof y), upload(s, sizeof s),
                                     upload(v, sizeof v)};
    struct wgllm_gpu_buffer *bb[3] = {upload(d0, sizeof d0), b[3], b[4]};
    const struct wgllm_wgsl_tune *tu = wgllm_wgsl_default_tune();
    const union wgllm_kparams ko = {.moe_bias = {.count = N, .width = FE, .b_off = VOFF, .ids_at = 0,
                                                 .u_off = VOFF + X * FE, .alpha = 1.702f, .limit = 7.0f}};
    const union wgllm_kparams kb = {.moe_bias = {.count = N, .width = FE, .b_off = VOFF + 2 * X * FE, .ids_at = 0}};
    const uint32_t groups = (N + tu->wg_elem - 1) / tu->wg_elem;
    bool ok = b[0] && b[1] && b[2] && b[3] && b[4] && bb[0] &&
              run(WGLLM_KERNEL_MOE_GLU_OAI, WGLLM_TYPE_F32, tu, &ko, 5, b, groups, 1) && readback(b[2], y, sizeof y) &&
              run(WGLLM_KERNEL_MOE_BIAS, WGLLM_TYPE_F32, tu, &kb, 3, bb, groups, 1) && readback(bb[0], d, sizeof d);
    CHECK(ok);
    double worst_glu = 0, worst_bias = 0;
    int clipped = 0;
    for (int i = 0; ok && i < N; i++) {
        const int q = i / FE, r = i % FE, e = (int)s[q];
        const float gb = g[i] + bg[e * FE + r], ub = u[i] + bu[e * FE + r];
        float want;
        wgllm_op_swiglu_oai(&gb, &ub, &want, 1, 1.702f, 7.0f);
        clipped += gb > 7.0f || fabsf(ub) > 7.0f;
        const double eg = fabs((double)y[i] - want) / (fabs(want) + 1.0);
        if (eg > worst_glu || eg != eg) worst_glu = eg;
        const double eb = fabs((double)d[i] - (d0[i] + bd[e * FE + r]));
        if (eb > worst_bias || eb != eb) worst_bias = eb;
    }
    CHECK(clipped > N / 10);       /* the limit is exercised */
    CHECK(worst_glu <= 1e-6);      /* the GPU's exp within a few ulps of expf */
    CHECK(worst_bias == 0.0);      /* one f32 add, as the CPU's */
    printf("  moe_glu_oai: rel err %.2e (%d of %d clipped); moe_bias: max err %.2e\n", worst_glu, clipped, N, worst_bias);
    for (int i = 0; i < 5; i++) wgllm_gpu_buffer_destroy(G, b[i]);
    wgllm_gpu_buffer_destroy(G, bb[0]);
}

/* ---- MOE_BUCKET, MATMUL_ID (prefill grouped by expert) --------------------- */

/* Routings of T tokens x U distinct experts of X: 0: random among the
 * first X - 1 (the last expert gets no token), 1: choice 0 of every token
 * is expert 1 (all tokens on one expert), the rest random. */
static void make_routing(int mode, int T, int U, int X, uint32_t *ids) {
    for (int t = 0; t < T; t++)
        for (int j = 0; j < U; j++) {
            uint32_t e;
            bool taken;
            do {
                e = mode == 1 && j == 0 ? 1u : rng_u32() % (uint32_t)(X - 1);
                taken = false;
                for (int i = 0; i < j; i++) taken = taken || ids[t * U + i] == e;
            } while (taken);
            ids[t * U + j] = e;
        }
}

/* The CPU's grouping (moe_ffn): each expert's choices in token order. */
static void bucket_ref(const uint32_t *ids, int nq, int X, uint32_t *off, uint32_t *list) {
    uint32_t o = 0;
    for (int e = 0; e < X; e++) {
        off[e] = o;
        for (int q = 0; q < nq; q++)
            if (ids[q] == (uint32_t)e) list[o++] = (uint32_t)q;
    }
    off[X] = o;
}

/* MOE_BUCKET on the GPU: the offsets and lists of the host's grouping, in
 * token order, from the pass's T tokens only (the rows after them hold
 * stale ids, as the routing buffer's rows past a pass do); nothing else of
 * the buffer is written. */
TEST(moe_bucket_like_host) {
    static const int cases[][3] = {{6, 70, 2}, {6, 70, 1}, {128, 37, 8}, {256, 300, 4}, {8, 1, 2}}; /* X, T, U */
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int mode = 0; mode < 2; mode++) {
            const int X = cases[c][0], T = cases[c][1], U = cases[c][2], CAP = T + 9;
            const uint32_t ids_at = 3, off_at = ids_at + (uint32_t)(CAP * U) + 5, list_at = off_at + (uint32_t)X + 1 + 2;
            const size_t words = list_at + (size_t)CAP * U + 4;
            uint32_t *s = malloc(words * 4), *want = malloc(words * 4);
            for (size_t i = 0; i < words; i++) s[i] = 0xdeadbeefu;
            make_routing(mode, CAP, U, X, s + ids_at); /* rows T.. are the stale ones */
            memcpy(want, s, words * 4);
            bucket_ref(s + ids_at, T * U, X, want + off_at, want + list_at);
            struct wgllm_gpu_buffer *b = upload(s, words * 4);
            const union wgllm_kparams kp = {.moe_bucket = {.n_expert = (uint32_t)X, .used = (uint32_t)U,
                                                           .ids_at = ids_at, .off_at = off_at, .list_at = list_at}};
            const bool ok = b && run(WGLLM_KERNEL_MOE_BUCKET, WGLLM_TYPE_F32, wgllm_wgsl_default_tune(), &kp, 1, &b, 1,
                                     (uint32_t)T) &&
                            readback(b, s, words * 4);
            CHECK(ok);
            size_t bad = 0, first = 0;
            for (size_t i = 0; ok && i < words; i++)
                if (s[i] != want[i] && !bad++) first = i;
            CHECK_EQ_INT(bad, 0);
            if (bad) printf("  bucket %d experts, %d tokens x %d, mode %d: %zu words differ, first at %zu (%u, want %u)\n",
                            X, T, U, mode, bad, first, s[first], want[first]);
            wgllm_gpu_buffer_destroy(G, b);
            free(s), free(want);
        }
}

/* Where expert e (of a piece of NP experts of M rows) starts in its
 * piece's buffer, as MATMUL's w_off counts: elements for F32, u32 words
 * otherwise (the test's sizes keep it whole). */
static uint32_t expert_w_off(uint32_t type, int e, int M, int K) {
    const size_t rs = wgllm_row_size(type, K), bytes = (size_t)e * M * rs;
    CHECK(bytes % 4 == 0);
    return type == WGLLM_TYPE_F32 ? (uint32_t)((size_t)e * M * K) : (uint32_t)(bytes / 4);
}

/* MATMUL_ID after MOE_BUCKET, over a stack split in two pieces (experts
 * [0, 3) and [3, 6)), both input modes, both mat-mat shapes of the tune
 * (mm_direct; tiles in workgroup memory, 16 x 16 and the default 64 x 64,
 * for some formats: compiling them takes SwiftShader seconds),
 * routings with an expert of no token, all tokens on one expert (70 of
 * them: more than a tile of each tune) and one choice per token (the input per choice, down's, with the
 * first). Checked two ways:
 *  - bit for bit against MATMUL over each expert's rows and every x row
 *    (MATMUL_ID is MATMUL's kernel with another tile map: each output is
 *    the same sum in the same order, whatever tile its token falls in);
 *  - against MATVEC_ID on the same routing within 1e-6 of the sum of
 *    |w x| (the decode path: MATVEC sums each block's products before its
 *    scale, MATMUL dequantises each weight first, so the last bits differ,
 *    as they do between the dense MATVEC and MATMUL);
 * and every output slot is written, nothing past them. */
TEST(matmul_id_like_matmul_and_matvec_id) {
    enum { X = 6, M = 67, K = 256, T = 70, UMAX = 2, GUARD = 64 };
    const uint32_t types[] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_K,
                              WGLLM_TYPE_MXFP4};
    static const int routings[][2] = {{0, 2}, {1, 2}, {1, 1}}; /* make_routing mode, used */
    /* mm_direct (every format), small workgroup-memory tiles (quicker to compile on SwiftShader: two
       formats) and the GPU default's 64 x 64 tiles (256 threads, seconds to compile: one format) */
    struct wgllm_wgsl_tune tunes[4] = {*wgllm_wgsl_default_tune(), *wgllm_wgsl_cpu_adapter_tune(),
                                       *wgllm_wgsl_default_tune(), *wgllm_wgsl_default_tune()};
    tunes[0].mm_tile_n = tunes[0].mm_tile_m = 16, tunes[0].mm_micro_n = tunes[0].mm_micro_m = 2;
    /* and split along K with subgroup reductions (mm_split_k), where the adapter has subgroups */
    tunes[3].mm_split_k = 64, tunes[3].mm_tile_n = 4, tunes[3].mm_tile_m = 8;
    const int n_tunes = wgllm_gpu_get_info(G)->subgroups ? 4 : 3;
    CHECK(n_tunes == 4 || !wgllm_gpu_get_info(G)->is_cpu); /* SwiftShader has subgroups */
    float *src = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * T * UMAX * K);
    const size_t ny = (size_t)T * UMAX * M + GUARD;
    float *y = malloc(sizeof(float) * ny), *yv = malloc(sizeof(float) * ny), *yd = malloc(sizeof(float) * X * T * UMAX * M);
    float *deq = malloc(sizeof(float) * X * M * K);
    for (int i = 0; i < T * UMAX * K; i++) x[i] = rng_frand();
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const struct wgllm_type_traits *tr = wgllm_type_traits(type);
        const size_t rs = wgllm_row_size(type, K);
        char *w = random_rows(type, X * M, K, deq);
        struct wgllm_gpu_buffer *wb[2] = {upload(w, rs * 3 * M), upload(w + rs * 3 * M, rs * 3 * M)};
        struct wgllm_gpu_buffer *xb = upload(x, sizeof(float) * T * UMAX * K);
        for (int tv = 0; tv < n_tunes; tv++)
            for (int per_choice = 0; per_choice < 2; per_choice++) {
                const struct wgllm_wgsl_tune *tu = &tunes[tv];
                /* the tiles' loads are MATMUL's (test_webgpu): the tiled map with a format of each kind of load */
                if (tv == 0 && type != WGLLM_TYPE_Q8_0 && type != WGLLM_TYPE_Q4_K) continue;
                if (tv == 2 && type != WGLLM_TYPE_Q4_0) continue;
                if (tv == 3 && type != WGLLM_TYPE_Q4_0 && type != WGLLM_TYPE_Q4_K) continue;
                const int NX = per_choice ? T * UMAX : T;
                const uint32_t tiles = (M + tu->mm_tile_n - 1) / tu->mm_tile_n,
                               groups = (M + tu->rows_matvec - 1) / tu->rows_matvec;
                /* MATMUL of each expert over every x row (whatever the routing) */
                struct wgllm_gpu_buffer *ydb = upload(yd, sizeof(float) * (size_t)NX * M);
                bool ok = wb[0] && wb[1] && xb && ydb;
                for (int e = 0; ok && e < X; e++) {
                    const union wgllm_kparams kd = {.matvec = {.rows = M, .k = K, .w_off = expert_w_off(type, e % 3, M, K),
                                                               .tokens = (uint32_t)NX}};
                    struct wgllm_gpu_buffer *bd[3] = {wb[e / 3], xb, ydb};
                    ok = run(WGLLM_KERNEL_MATMUL, type, tu, &kd, 3, bd, tiles,
                             ((uint32_t)NX + tu->mm_tile_m - 1) / tu->mm_tile_m) &&
                         readback(ydb, yd + (size_t)e * NX * M, sizeof(float) * (size_t)NX * M);
                }
                CHECK(ok);
                wgllm_gpu_buffer_destroy(G, ydb);
                for (size_t ri = 0; ok && ri < sizeof routings / sizeof *routings; ri++) {
                    const int U = routings[ri][1], NQ = T * U;
                    if (per_choice && NQ != NX) continue; /* one input per choice: as many x rows as choices */
                    /* S: ids, then the bucket's offsets and list */
                    const uint32_t off_at = (uint32_t)NQ, list_at = off_at + X + 1;
                    uint32_t s[T * UMAX + X + 1 + T * UMAX];
                    memset(s, 0xff, sizeof s);
                    make_routing(routings[ri][0], T, U, X, s);
                    for (size_t i = 0; i < ny; i++) y[i] = yv[i] = -12345.0f;
                    struct wgllm_gpu_buffer *sb = upload(s, sizeof s), *yb = upload(y, sizeof(float) * ny),
                                            *yvb = upload(yv, sizeof(float) * ny);
                    ok = sb && yb && yvb;
                    const union wgllm_kparams bk = {.moe_bucket = {.n_expert = X, .used = (uint32_t)U, .off_at = off_at,
                                                                   .list_at = list_at}};
                    ok = ok && run(WGLLM_KERNEL_MOE_BUCKET, WGLLM_TYPE_F32, tu, &bk, 1, &sb, 1, T);
                    for (int piece = 0; ok && piece < 2; piece++) {
                        const union wgllm_kparams kp = {.matmul_id = {.rows = M, .x_div = per_choice ? 1u : (uint32_t)U,
                                                                      .k = K, .list_at = list_at, .e0 = 3u * piece,
                                                                      .off_at = off_at, .tiles = tiles}};
                        struct wgllm_gpu_buffer *bb[4] = {wb[piece], xb, yb, sb};
                        ok = run(WGLLM_KERNEL_MATMUL_ID, type, tu, &kp, 4, bb, tiles * 3,
                                 (T + tu->mm_tile_m - 1) / tu->mm_tile_m);
                        const union wgllm_kparams kv = {.matvec_id = {.rows = M, .x_div = per_choice ? 1u : (uint32_t)U,
                                                                      .k = K, .e0 = 3u * piece, .n_exp = 3,
                                                                      .used = (uint32_t)U, .groups = groups}};
                        struct wgllm_gpu_buffer *bv[4] = {wb[piece], xb, yvb, sb};
                        ok = ok && run(WGLLM_KERNEL_MATVEC_ID, type, tu, &kv, 4, bv, groups * (uint32_t)U, T);
                    }
                    ok = ok && readback(yb, y, sizeof(float) * ny) && readback(yvb, yv, sizeof(float) * ny);
                    CHECK(ok);
                    int differ = 0, guard = 0;
                    double worst = 0;
                    for (int q = 0; ok && q < NQ; q++) {
                        const int e = (int)s[q], xr = per_choice ? q : q / U;
                        for (int r = 0; r < M; r++) {
                            const float got = y[(size_t)q * M + r], mm = yd[((size_t)e * NX + xr) * M + r];
                            if (memcmp(&got, &mm, 4) && differ++ < 3)
                                printf("  matmul_id %s choice %d row %d: %.9g, matmul %.9g\n", tr->name, q, r, got, mm);
                            const float *wr = deq + ((size_t)e * M + r) * K, *xv = x + (size_t)xr * K;
                            double mag = 0;
                            for (int i = 0; i < K; i++) mag += fabs((double)wr[i] * xv[i]);
                            const double d = fabs((double)got - yv[(size_t)q * M + r]) / (mag + 1e-6);
                            if (d > worst || d != d) worst = d;
                        }
                    }
                    for (size_t i = (size_t)NQ * M; ok && i < ny; i++) guard += y[i] != -12345.0f;
                    CHECK_EQ_INT(differ, 0);
                    CHECK_EQ_INT(guard, 0);
                    CHECK(worst <= 1e-6);
                    if (differ || guard || worst > 1e-6 || (ri == 1 && per_choice == 0))
                        printf("  matmul_id %-5s %s, routing %zu, %s: %d differ from matmul, rel diff to matvec_id %.2e\n",
                               tr->name, tu->mm_split_k ? "split-K" : tu->mm_direct ? "direct" : tv ? "tiled 64x64" : "tiled 16x16", ri,
                               per_choice ? "input per choice" : "input per token", differ, worst);
                    struct wgllm_gpu_buffer *fr[3] = {sb, yb, yvb};
                    for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, fr[i]);
                }
            }
        wgllm_gpu_buffer_destroy(G, wb[0]), wgllm_gpu_buffer_destroy(G, wb[1]), wgllm_gpu_buffer_destroy(G, xb);
        free(w);
    }
    free(src), free(x), free(y), free(yv), free(yd), free(deq);
}

/* Every weight format MATVEC_ID has, MATMUL_ID has too (no format falls
 * back to the per-token path), and gives MATMUL's bits for each expert and
 * MATVEC_ID's results within rounding (1e-6 of sum |w x|), with the
 * cpu-adapter tune (mm_direct: quick to compile on SwiftShader; the other
 * shape's loads are MATMUL's, test_webgpu). */
TEST(matmul_id_every_format) {
    enum { X = 3, M = 10, K = 256, T = 12, U = 2 }; /* experts of whole words in every format (even row sizes) */
    const struct wgllm_wgsl_tune *tu = wgllm_wgsl_cpu_adapter_tune();
    float x[T * K], y[T * U * M], yv[T * U * M], yd[X * T * M];
    float *deq = malloc(sizeof(float) * X * M * K);
    uint32_t s[T * U + X + 1 + T * U];
    for (int i = 0; i < T * K; i++) x[i] = rng_frand();
    make_routing(0, T, U, X + 1, s); /* experts 0..2 */
    int n_formats = 0;
    for (uint32_t type = 0; type < WGLLM_TYPE_COUNT; type++) {
        if (!wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC_ID, type)) continue;
        CHECK(wgllm_wgsl_supports(WGLLM_KERNEL_MATMUL_ID, type));
        n_formats++;
        const size_t rs = wgllm_row_size(type, K);
        char *w = random_rows(type, X * M, K, deq);
        for (int i = 0; i < T * U * M; i++) y[i] = yv[i] = -12345.0f;
        struct wgllm_gpu_buffer *wb = upload(w, rs * X * M), *xb = upload(x, sizeof x), *sb = upload(s, sizeof s),
                                *yb = upload(y, sizeof y), *yvb = upload(yv, sizeof yv), *ydb = upload(yd, sizeof(float) * T * M);
        const uint32_t off_at = T * U, list_at = off_at + X + 1, tiles = (M + tu->mm_tile_n - 1) / tu->mm_tile_n,
                       groups = (M + tu->rows_matvec - 1) / tu->rows_matvec;
        const union wgllm_kparams bk = {.moe_bucket = {.n_expert = X, .used = U, .off_at = off_at, .list_at = list_at}};
        const union wgllm_kparams km = {.matmul_id = {.rows = M, .x_div = U, .k = K, .list_at = list_at,
                                                      .off_at = off_at, .tiles = tiles}};
        const union wgllm_kparams kv = {.matvec_id = {.rows = M, .x_div = U, .k = K, .n_exp = X, .used = U,
                                                      .groups = groups}};
        struct wgllm_gpu_buffer *bm[4] = {wb, xb, yb, sb}, *bv[4] = {wb, xb, yvb, sb};
        bool ok = wb && xb && sb && yb && yvb && ydb && run(WGLLM_KERNEL_MOE_BUCKET, WGLLM_TYPE_F32, tu, &bk, 1, &sb, 1, T) &&
                  run(WGLLM_KERNEL_MATMUL_ID, type, tu, &km, 4, bm, tiles * X, (T + tu->mm_tile_m - 1) / tu->mm_tile_m) &&
                  run(WGLLM_KERNEL_MATVEC_ID, type, tu, &kv, 4, bv, groups * U, T) && readback(yb, y, sizeof y) &&
                  readback(yvb, yv, sizeof yv);
        for (int e = 0; ok && e < X; e++) {
            const union wgllm_kparams kd = {.matvec = {.rows = M, .k = K, .w_off = expert_w_off(type, e, M, K), .tokens = T}};
            struct wgllm_gpu_buffer *bd[3] = {wb, xb, ydb};
            ok = run(WGLLM_KERNEL_MATMUL, type, tu, &kd, 3, bd, tiles, (T + tu->mm_tile_m - 1) / tu->mm_tile_m) &&
                 readback(ydb, yd + (size_t)e * T * M, sizeof(float) * T * M);
        }
        CHECK(ok);
        int differ = 0;
        double worst = 0;
        for (int q = 0; ok && q < T * U; q++)
            for (int r = 0; r < M; r++) {
                const float got = y[q * M + r], mm = yd[((size_t)s[q] * T + q / U) * M + r];
                differ += memcmp(&got, &mm, 4) != 0;
                double mag = 0;
                for (int i = 0; i < K; i++) mag += fabs((double)deq[((size_t)s[q] * M + r) * K + i] * x[(q / U) * K + i]);
                const double d = fabs((double)got - yv[q * M + r]) / (mag + 1e-6);
                if (d > worst || d != d) worst = d;
            }
        CHECK_EQ_INT(differ, 0);
        CHECK(worst <= 1e-6);
        if (differ || worst > 1e-6)
            printf("  matmul_id %s: %d differ from matmul, rel diff to matvec_id %.2e\n", wgllm_type_name(type), differ, worst);
        struct wgllm_gpu_buffer *fr[6] = {wb, xb, sb, yb, yvb, ydb};
        for (int i = 0; i < 6; i++) wgllm_gpu_buffer_destroy(G, fr[i]);
        free(w);
    }
    printf("  matmul_id: %d formats, each as matmul bit for bit and as matvec_id within 1e-6\n", n_formats);
    CHECK(n_formats >= 20);
    free(deq);
}

int main(void) {
    wgllm_quant_init();
    int required;
    if (!(G = test_webgpu_open("test_webgpu_moe", &required))) return required ? 1 : test_summary("test_webgpu_moe");
    RUN(matvec_id_formats);
    RUN(moe_route_like_cpu);
    RUN(moe_sum_like_cpu);
    RUN(moe_glu_oai_and_bias_like_cpu);
    RUN(moe_bucket_like_host);
    RUN(matmul_id_like_matmul_and_matvec_id);
    RUN(matmul_id_every_format);
    wgllm_gpu_close(G);
    return test_summary("test_webgpu_moe");
}
