/*
 * test_webgpu_fused.c - the fused decode kernels (kernels_fused.c and
 * RMS_NORM_ROUND) on the WebGPU device against the kernels they stand for,
 * run one after another on the same inputs: the results must be the same
 * bits (the backend's agreement with the CPU rests on those kernels, which
 * test_webgpu.c checks against the CPU; the mat-vec parts are also checked
 * here against the dequantized weights in double). Every mat-vec shape of
 * the tune (workgroup reduction, a row per thread, subgroups), uniform and
 * mixed weight types (a Q4_K_M layer's Q6_K v), biases, both RoPE pair
 * layouts, partial rotation and a layer without RoPE. The mat-vec
 * prologues (the input rounded, after its RMSNorm, in each workgroup) against
 * ROUND_ACT / RMS_NORM_ROUND then the mat-vec, for every rounding type
 * (Q8_0, Q8_1, Q8_K, F16, BF16), K not a multiple of any workgroup size,
 * and what does not fit falling back. A mutant of each kernel must fail
 * its comparison.
 */
#include "backend/cpu/ops.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "quant/quant.h"
#define TEST_RNG_SEED 0x5851f42d4c957f2dull /* this file's data */
#include "test.h"

#include <math.h>

static struct wgllm_gpu *G;

static struct wgllm_gpu_buffer *upload(const void *data, size_t bytes) { return test_gpu_upload(G, data, bytes); }
static bool readback(struct wgllm_gpu_buffer *b, void *dst, size_t bytes) { return test_gpu_read(G, b, dst, bytes); }

/* Generates key under tune, applies the mutation (from -> to) when given. */
static char *source(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune, const char *from,
                    const char *to) {
    char *src = wgllm_wgsl_generate(key, tune);
    if (!src || !from) return src;
    char *at = strstr(src, from);
    if (!at) {
        fprintf(stderr, "  mutation site '%s' not in the %s kernel\n", from, wgllm_wgsl_kernel_name(key->kernel));
        free(src);
        return NULL;
    }
    char *m = malloc(strlen(src) + strlen(to) + 1);
    memcpy(m, src, (size_t)(at - src));
    strcpy(m + (at - src), to);
    strcat(m, at + strlen(from));
    free(src);
    return m;
}

/* Runs a kernel (mutated when from is set), params in a fresh uniform
 * buffer, bindings 1.. = bufs; false (printed) when anything fails. */
static bool run(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune, const union wgllm_kparams *kp,
                int nbuf, struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y, const char *from, const char *to) {
    char *src = source(key, tune, from, to);
    if (!src) return false;
    const bool ok = test_gpu_dispatch(G, src, wgllm_wgsl_kernel_name(key->kernel), kp, sizeof *kp, nbuf, bufs, x, y);
    free(src);
    return ok;
}

static uint32_t cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

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

static const char *tune_name(const struct wgllm_wgsl_tune *t) {
    return t->matvec_thread_rows ? "thread rows" : t->matvec_subgroups ? "subgroups" : "workgroup reduction";
}

/* M rows of random weights of type (and their dequantized values). */
static char *weights(uint32_t type, int M, int K, float *deq) {
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    const size_t rs = wgllm_row_size(type, K);
    char *w = malloc(rs * (size_t)M + 4);
    float *src = malloc(sizeof(float) * (size_t)K);
    for (int r = 0; r < M; r++) {
        for (int i = 0; i < K; i++) src[i] = rng_frand();
        if (type == WGLLM_TYPE_F32) memcpy(w + r * rs, src, rs);
        else if (type == WGLLM_TYPE_F16) wgllm_fp32_to_fp16_row(src, (wgllm_fp16 *)(w + r * rs), K);
        else tr->from_float_ref(src, w + r * rs, K);
        tr->to_float(w + r * rs, deq + (size_t)r * K, K);
    }
    free(src);
    return w;
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rng_frand();
}

/* max |y - W x| / sum |w x| over rows and tokens (W dequantized, in double). */
static double dot_err(const float *y, const float *deq, const float *x, int M, int K, int T, int y_stride) {
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < M; r++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < K; i++) {
                ref += (double)deq[(size_t)r * K + i] * x[(size_t)t * K + i];
                mag += fabs((double)deq[(size_t)r * K + i] * x[(size_t)t * K + i]);
            }
            const double e = fabs(y[(size_t)t * y_stride + r] - ref) / (mag + 1e-6);
            if (e > worst) worst = e;
        }
    return worst;
}

/* ---- MATVEC_QKV ----------------------------------------------------------- */

enum { QM = 67, KM = 35, VM = 33, QK = 256, QT = 2 }; /* rows of q, k, v (none a multiple of a tile), K, tokens */

/* The fused q|k|v of types ty (biases when bias; mutated when from is set)
 * and three MATVECs plus ADD_ROWS; true when every output has the same bits. */
static bool qkv_case(const uint32_t ty[3], bool bias, const struct wgllm_wgsl_tune *tu, const char *from, const char *to,
                     double *err) {
    const int rows[3] = {QM, KM, VM};
    float *deq[3], *x = malloc(sizeof(float) * QK * QT), *b = malloc(sizeof(float) * (QM + KM + VM + 8));
    char *w[3];
    struct wgllm_gpu_buffer *wb[3], *yf[3], *yu[3];
    fill(x, QK * QT);
    fill(b, QM + KM + VM + 8);
    const uint32_t boff[3] = {5, 5 + QM, 5 + QM + KM}; /* at offsets: bq_off & co are honoured */
    for (int i = 0; i < 3; i++) {
        deq[i] = malloc(sizeof(float) * rows[i] * QK);
        w[i] = weights(ty[i], rows[i], QK, deq[i]);
        wb[i] = upload(w[i], wgllm_row_size(ty[i], QK) * rows[i]);
        yf[i] = upload(NULL, sizeof(float) * rows[i] * QT);
        yu[i] = upload(NULL, sizeof(float) * rows[i] * QT);
    }
    struct wgllm_gpu_buffer *xb = upload(x, sizeof(float) * QK * QT), *bb = upload(b, sizeof(float) * (QM + KM + VM + 8));
    const struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC_QKV, .type = ty[0], .type2 = ty[1],
                                         .type3 = ty[2], .bias = bias};
    const union wgllm_kparams kp = {.matvec_qkv = {.rows_q = QM, .rows_k = KM, .rows_v = VM, .k = QK,
                                                   .bq_off = bias ? boff[0] : 0, .bk_off = bias ? boff[1] : 0,
                                                   .bv_off = bias ? boff[2] : 0}};
    struct wgllm_gpu_buffer *fb[8] = {wb[0], wb[1], wb[2], xb, yf[0], yf[1], yf[2], bb};
    bool ok = run(&key, tu, &kp, bias ? 8 : 7, fb, cdiv(QM + KM + VM, tu->rows_matvec), QT, from, to);
    for (int i = 0; i < 3 && ok; i++) {
        const struct wgllm_kernel_key mk = {.kernel = WGLLM_KERNEL_MATVEC, .type = ty[i]};
        const union wgllm_kparams mp = {.matvec = {.rows = (uint32_t)rows[i], .k = QK}};
        struct wgllm_gpu_buffer *mb[3] = {wb[i], xb, yu[i]};
        ok = run(&mk, tu, &mp, 3, mb, cdiv((uint32_t)rows[i], tu->rows_matvec), QT, NULL, NULL);
        if (ok && bias) {
            const struct wgllm_kernel_key ak = {.kernel = WGLLM_KERNEL_ADD_ROWS, .type = WGLLM_TYPE_F32};
            const union wgllm_kparams ap = {.add_rows = {.width = (uint32_t)rows[i], .y_off = boff[i], .y_stride = 0}};
            struct wgllm_gpu_buffer *ab[2] = {yu[i], bb};
            ok = run(&ak, tu, &ap, 2, ab, cdiv((uint32_t)rows[i], tu->wg_elem), QT, NULL, NULL);
        }
    }
    bool same = ok;
    *err = 0;
    for (int i = 0; i < 3 && ok; i++) {
        float *f = malloc(sizeof(float) * rows[i] * QT), *u = malloc(sizeof(float) * rows[i] * QT);
        ok = readback(yf[i], f, sizeof(float) * rows[i] * QT) && readback(yu[i], u, sizeof(float) * rows[i] * QT);
        same = same && ok && !memcmp(f, u, sizeof(float) * rows[i] * QT);
        if (ok && !bias) {
            const double e = dot_err(f, deq[i], x, rows[i], QK, QT, rows[i]);
            if (e > *err) *err = e;
        }
        free(f);
        free(u);
    }
    for (int i = 0; i < 3; i++) {
        wgllm_gpu_buffer_destroy(G, wb[i]), wgllm_gpu_buffer_destroy(G, yf[i]), wgllm_gpu_buffer_destroy(G, yu[i]);
        free(w[i]), free(deq[i]);
    }
    wgllm_gpu_buffer_destroy(G, xb), wgllm_gpu_buffer_destroy(G, bb);
    free(x), free(b);
    return ok && same;
}

TEST(matvec_qkv_same_bits_as_three_matvecs) {
    static const uint32_t combos[][3] = {
        {WGLLM_TYPE_F32, WGLLM_TYPE_F32, WGLLM_TYPE_F32}, {WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_0},
        {WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0}, {WGLLM_TYPE_F16, WGLLM_TYPE_F16, WGLLM_TYPE_F16},
        {WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K}, /* a Q4_K_M layer */
    };
    struct wgllm_wgsl_tune tunes[3];
    const int n_tunes = tunes_of(tunes);
    for (int tv = 0; tv < n_tunes; tv++)
        for (size_t ci = 0; ci < sizeof combos / sizeof *combos; ci++)
            for (int bias = 0; bias <= (ci == 2); bias++) {
                double e;
                const bool ok = qkv_case(combos[ci], bias, &tunes[tv], NULL, NULL, &e);
                CHECK(ok);
                if (!bias) CHECK(e <= 2e-6);
                if (!ok || tv == 0)
                    printf("  qkv %s/%s/%s%s (%s): %s, rel err vs dequant %.2e\n", wgllm_type_name(combos[ci][0]),
                           wgllm_type_name(combos[ci][1]), wgllm_type_name(combos[ci][2]), bias ? " +bias" : "",
                           tune_name(&tunes[tv]), ok ? "same bits" : "DIFFERENT", e);
            }
}

/* ---- MATVEC_SWIGLU / MATVEC_GEGLU ------------------------------------------ */

enum { GM = 70, GK = 256, GT = 2 };

static bool glu_case(uint32_t tg, uint32_t tu_, bool gelu, const struct wgllm_wgsl_tune *tu, const char *from,
                     const char *to) {
    float *dg = malloc(sizeof(float) * GM * GK), *du = malloc(sizeof(float) * GM * GK), *x = malloc(sizeof(float) * GK * GT);
    char *wg = weights(tg, GM, GK, dg), *wu = weights(tu_, GM, GK, du);
    fill(x, GK * GT);
    wgllm_fp16 *tab = malloc(sizeof(wgllm_fp16) * 65536);
    wgllm_op_gelu_f16_table(tab);
    struct wgllm_gpu_buffer *bg = upload(wg, wgllm_row_size(tg, GK) * GM), *bu = upload(wu, wgllm_row_size(tu_, GK) * GM),
                            *xb = upload(x, sizeof(float) * GK * GT), *yf = upload(NULL, sizeof(float) * GM * GT),
                            *g = upload(NULL, sizeof(float) * GM * GT), *u = upload(NULL, sizeof(float) * GM * GT),
                            *yu = upload(NULL, sizeof(float) * GM * GT), *tb = upload(tab, sizeof(wgllm_fp16) * 65536);
    const struct wgllm_kernel_key key = {.kernel = gelu ? WGLLM_KERNEL_MATVEC_GEGLU : WGLLM_KERNEL_MATVEC_SWIGLU,
                                         .type = tg, .type2 = tu_};
    const union wgllm_kparams kp = {.matvec = {.rows = GM, .k = GK}};
    struct wgllm_gpu_buffer *fb[5] = {bg, bu, xb, yf, tb};
    bool ok = run(&key, tu, &kp, gelu ? 5 : 4, fb, cdiv(GM, tu->rows_matvec), GT, from, to);
    const struct wgllm_kernel_key kg = {.kernel = WGLLM_KERNEL_MATVEC, .type = tg}, ku = {.kernel = WGLLM_KERNEL_MATVEC, .type = tu_};
    struct wgllm_gpu_buffer *mg[3] = {bg, xb, g}, *mu[3] = {bu, xb, u};
    ok = ok && run(&kg, tu, &kp, 3, mg, cdiv(GM, tu->rows_matvec), GT, NULL, NULL) &&
         run(&ku, tu, &kp, 3, mu, cdiv(GM, tu->rows_matvec), GT, NULL, NULL);
    const struct wgllm_kernel_key ks = {.kernel = gelu ? WGLLM_KERNEL_GEGLU : WGLLM_KERNEL_SWIGLU, .type = WGLLM_TYPE_F32};
    const union wgllm_kparams sp = {.swiglu = {.count = GM * GT}};
    struct wgllm_gpu_buffer *sb[4] = {g, u, yu, tb};
    ok = ok && run(&ks, tu, &sp, gelu ? 4 : 3, sb, cdiv(GM * GT, tu->wg_elem), 1, NULL, NULL);
    float *a = malloc(sizeof(float) * GM * GT), *c = malloc(sizeof(float) * GM * GT);
    ok = ok && readback(yf, a, sizeof(float) * GM * GT) && readback(yu, c, sizeof(float) * GM * GT);
    const bool same = ok && !memcmp(a, c, sizeof(float) * GM * GT);
    struct wgllm_gpu_buffer *all[8] = {bg, bu, xb, yf, g, u, yu, tb};
    for (int i = 0; i < 8; i++) wgllm_gpu_buffer_destroy(G, all[i]);
    free(dg), free(du), free(x), free(wg), free(wu), free(tab), free(a), free(c);
    return same;
}

TEST(matvec_glu_same_bits_as_matvecs_and_glu) {
    static const uint32_t combos[][2] = {{WGLLM_TYPE_F32, WGLLM_TYPE_F32}, {WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0},
                                         {WGLLM_TYPE_F16, WGLLM_TYPE_F16}, {WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K}};
    struct wgllm_wgsl_tune tunes[3];
    const int n_tunes = tunes_of(tunes);
    for (int tv = 0; tv < n_tunes; tv++)
        for (size_t ci = 0; ci < sizeof combos / sizeof *combos; ci++)
            for (int gelu = 0; gelu <= 1; gelu++) {
                const bool ok = glu_case(combos[ci][0], combos[ci][1], gelu, &tunes[tv], NULL, NULL);
                CHECK(ok);
                if (!ok || tv == 0)
                    printf("  %s %s/%s (%s): %s\n", gelu ? "geglu" : "swiglu", wgllm_type_name(combos[ci][0]),
                           wgllm_type_name(combos[ci][1]), tune_name(&tunes[tv]), ok ? "same bits" : "DIFFERENT");
            }
}

/* ---- ROPE_STORE ------------------------------------------------------------ */

enum { RH = 4, RHK = 2, RD = 16, RT = 3, RROWS = 8 }; /* q heads, kv heads, head dim, tokens, cache rows */

/* ROPE_STORE against ROPE (q, k) + STORE_KV (k, v): q, and both caches, the same bits. */
static bool rope_store_case(bool neox, uint32_t n_rot, bool rotate, const char *from, const char *to) {
    const uint32_t QD = RH * RD, KD = RHK * RD, VD = RHK * RD, B = RT;
    float q[RT * RH * RD], k[RT * RHK * RD], v[RT * RHK * RD], cs[2 + RT * RD];
    fill(q, sizeof q / 4), fill(k, sizeof k / 4), fill(v, sizeof v / 4), fill(cs, sizeof cs / 4);
    /* the step buffer: cache rows at word B (tokens to rows 5, 1, 6) */
    const uint32_t st[2 * RT] = {0, 0, 0, 5, 1, 6};
    const uint32_t cache_words = RROWS * KD / 2;
    uint32_t junk[RROWS * RHK * RD / 2];
    for (size_t i = 0; i < sizeof junk / 4; i++) junk[i] = 0x3c003c00u + (uint32_t)i;
    struct wgllm_gpu_buffer *qf = upload(q, sizeof q), *kf = upload(k, sizeof k), *vf = upload(v, sizeof v),
                            *cb = upload(cs, sizeof cs), *sb = upload(st, sizeof st), *kcf = upload(junk, sizeof junk),
                            *vcf = upload(junk, sizeof junk), *qu = upload(q, sizeof q), *ku = upload(k, sizeof k),
                            *kcu = upload(junk, sizeof junk), *vcu = upload(junk, sizeof junk);
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_default_tune();
    const union wgllm_kparams rp = {.rope_store = {.heads = RH, .n_rot = n_rot, .head_dim = RD, .q_stride = QD,
                                                   .k_stride = KD, .cs_off = 2, .v_stride = VD, .row_at = B,
                                                   .rotate = rotate}};
    const struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ROPE_STORE, .type = WGLLM_TYPE_F32, .neox = neox};
    const uint32_t units = (rotate ? RH * n_rot / 2 : 0) + KD / 2 + VD / 2;
    struct wgllm_gpu_buffer *fb[7] = {qf, kf, vf, cb, sb, kcf, vcf};
    bool ok = run(&key, t, &rp, 7, fb, cdiv(units, t->wg_elem), RT, from, to);
    const struct wgllm_kernel_key kr = {.kernel = WGLLM_KERNEL_ROPE, .type = WGLLM_TYPE_F32, .neox = neox};
    const union wgllm_kparams rq = {.rope = {.heads = RH, .n_rot = n_rot, .head_dim = RD, .tok_stride = QD, .cs_off = 2}};
    const union wgllm_kparams rk = {.rope = {.heads = RHK, .n_rot = n_rot, .head_dim = RD, .tok_stride = KD, .cs_off = 2}};
    struct wgllm_gpu_buffer *bq[2] = {qu, cb}, *bk[2] = {ku, cb};
    if (rotate)
        ok = ok && run(&kr, t, &rq, 2, bq, cdiv(RH * n_rot / 2, t->wg_elem), RT, NULL, NULL) &&
             run(&kr, t, &rk, 2, bk, cdiv(RHK * n_rot / 2, t->wg_elem), RT, NULL, NULL);
    const struct wgllm_kernel_key ks = {.kernel = WGLLM_KERNEL_STORE_KV, .type = WGLLM_TYPE_F32};
    const union wgllm_kparams sk = {.store_kv = {.words = KD / 2, .x_stride = KD, .row_at = B, .y_stride = KD / 2}};
    const union wgllm_kparams sv = {.store_kv = {.words = VD / 2, .x_stride = VD, .row_at = B, .y_stride = VD / 2}};
    struct wgllm_gpu_buffer *s1[3] = {ku, sb, kcu}, *s2[3] = {vf, sb, vcu};
    ok = ok && run(&ks, t, &sk, 3, s1, cdiv(KD / 2, t->wg_elem), RT, NULL, NULL) &&
         run(&ks, t, &sv, 3, s2, cdiv(VD / 2, t->wg_elem), RT, NULL, NULL);
    float qa[sizeof q / 4], qb[sizeof q / 4];
    uint32_t ca[sizeof junk / 4], cb2[sizeof junk / 4], va[sizeof junk / 4], vb[sizeof junk / 4];
    ok = ok && readback(qf, qa, sizeof q) && readback(qu, qb, sizeof q) && readback(kcf, ca, cache_words * 4) &&
         readback(kcu, cb2, cache_words * 4) && readback(vcf, va, sizeof va) && readback(vcu, vb, sizeof vb);
    const bool same = ok && !memcmp(qa, qb, sizeof qa) && !memcmp(ca, cb2, cache_words * 4) && !memcmp(va, vb, sizeof va);
    /* something happened: the cache rows of the tokens were written */
    const bool wrote = ok && ca[5 * KD / 2] != junk[5 * KD / 2] && va[6 * VD / 2] != junk[6 * VD / 2];
    struct wgllm_gpu_buffer *all[11] = {qf, kf, vf, cb, sb, kcf, vcf, qu, ku, kcu, vcu};
    for (int i = 0; i < 11; i++) wgllm_gpu_buffer_destroy(G, all[i]);
    return same && wrote;
}

TEST(rope_store_same_bits_as_rope_and_store) {
    for (int neox = 0; neox <= 1; neox++)
        for (int variant = 0; variant < 3; variant++) { /* whole head, partial rotation, no RoPE */
            const uint32_t n_rot = variant == 1 ? RD / 2 : RD;
            const bool ok = rope_store_case(neox, n_rot, variant != 2, NULL, NULL);
            CHECK(ok);
            printf("  rope_store %s, n_rot %u%s: %s\n", neox ? "neox" : "normal", n_rot, variant == 2 ? ", no RoPE" : "",
                   ok ? "same bits" : "DIFFERENT");
        }
}

/* ---- RMS_NORM_ROUND --------------------------------------------------------- */

static bool rms_round_case(uint32_t vt, const char *from, const char *to) {
    enum { N = 512, ROWS = 3 };
    float x[N * ROWS], w[N];
    fill(x, N * ROWS), fill(w, N);
    for (int i = 0; i < N; i++) w[i] += 1.0f;
    struct wgllm_gpu_buffer *xb = upload(x, sizeof x), *wb = upload(w, sizeof w), *yf = upload(NULL, sizeof x),
                            *rf = upload(NULL, sizeof x), *yu = upload(NULL, sizeof x), *ru = upload(NULL, sizeof x);
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_default_tune();
    const union wgllm_kparams kp = {.rms_norm = {.width = N, .eps = 1e-5f}};
    const struct wgllm_kernel_key kf = {.kernel = WGLLM_KERNEL_RMS_NORM_ROUND, .type = vt};
    struct wgllm_gpu_buffer *fb[4] = {xb, wb, yf, rf};
    bool ok = run(&kf, t, &kp, 4, fb, ROWS, 1, from, to);
    const struct wgllm_kernel_key kn = {.kernel = WGLLM_KERNEL_RMS_NORM, .type = WGLLM_TYPE_F32};
    struct wgllm_gpu_buffer *nb[3] = {xb, wb, yu};
    ok = ok && run(&kn, t, &kp, 3, nb, ROWS, 1, NULL, NULL);
    const struct wgllm_kernel_key kr = {.kernel = WGLLM_KERNEL_ROUND_ACT, .type = vt};
    const union wgllm_kparams rp = {.round_act = {.count = N * ROWS}};
    struct wgllm_gpu_buffer *rb[2] = {yu, ru};
    ok = ok && run(&kr, t, &rp, 2, rb, cdiv(N * ROWS / 32, t->wg_elem), 1, NULL, NULL);
    float a[N * ROWS], b[N * ROWS], c[N * ROWS], d[N * ROWS];
    ok = ok && readback(yf, a, sizeof a) && readback(yu, b, sizeof b) && readback(rf, c, sizeof c) &&
         readback(ru, d, sizeof d);
    const bool same = ok && !memcmp(a, b, sizeof a) && !memcmp(c, d, sizeof c);
    struct wgllm_gpu_buffer *all[6] = {xb, wb, yf, rf, yu, ru};
    for (int i = 0; i < 6; i++) wgllm_gpu_buffer_destroy(G, all[i]);
    return same;
}

TEST(rms_norm_round_same_bits_as_norm_then_round) {
    const uint32_t vts[] = {WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_1, WGLLM_TYPE_Q8_K, WGLLM_TYPE_F16, WGLLM_TYPE_BF16};
    for (size_t i = 0; i < sizeof vts / sizeof *vts; i++) {
        const bool ok = rms_round_case(vts[i], NULL, NULL);
        CHECK(ok);
        printf("  rms_norm_round %s: %s\n", wgllm_type_name(vts[i]), ok ? "same bits" : "DIFFERENT");
    }
}

/* ---- the mat-vec prologues (WGLLM_PRO_ROUND / WGLLM_PRO_NORM) -------------- */

enum { PM = 37, PT = 2, PX = 3, PN = 5 }; /* rows (not a multiple of a tile), tokens, x's and the norm's offsets */

/* The workgroup memory the tests grant a prologue: WebGPU's minimum. */
#define PRO_LIMIT 16384u

/* The decode mat-vec `kernel` (MATVEC with the residual's ACC epilogue,
 * MATVEC_QKV with biases, MATVEC_SWIGLU or _GEGLU) of weights of `type`
 * (all of them), K inputs, with prologue `pro` keeping the row as f32 or
 * packed (mutated when from is set)
 * against the unfused pair: ROUND_ACT or RMS_NORM_ROUND into a buffer,
 * then the kernel without a prologue reading it. True when every output
 * has the same bits; *skipped when the prologue does not fit PRO_LIMIT. */
static bool pro_case(enum wgllm_kernel kernel, uint32_t type, uint8_t pro, bool f32, uint32_t K,
                     const struct wgllm_wgsl_tune *tu, const char *from, const char *to, bool *skipped) {
    const uint32_t vt = wgllm_type_traits(type)->vec_dot_type;
    const bool qkv = kernel == WGLLM_KERNEL_MATVEC_QKV, glu = !qkv && kernel != WGLLM_KERNEL_MATVEC;
    const bool gelu = kernel == WGLLM_KERNEL_MATVEC_GEGLU;
    const int nw = qkv ? 3 : glu ? 2 : 1, rows[3] = {PM, PM - 4, PM - 6};
    struct wgllm_kernel_key key = {.kernel = kernel, .type = type, .type2 = type, .type3 = type, .bias = qkv,
                                   .pro = pro, .pro_f32 = f32, .kx = K};
    *skipped = wgllm_wgsl_pro_bytes(&key, tu) > PRO_LIMIT;
    if (*skipped) return true;
    const size_t xn = (size_t)PX + (size_t)K * PT;
    float *x = malloc(sizeof(float) * xn), *vec = malloc(sizeof(float) * (PN + K + 3 * PM)), *deq = malloc(sizeof(float) * PM * K);
    fill(x, xn), fill(vec, PN + K + 3 * PM);
    for (uint32_t i = 0; i < K; i++) vec[PN + i] += 1.0f; /* the norm's weights near 1 */
    wgllm_fp16 *tab = malloc(sizeof(wgllm_fp16) * 65536);
    wgllm_op_gelu_f16_table(tab);
    char *w[3];
    struct wgllm_gpu_buffer *wb[3], *yf[3], *yu[3];
    float *y0 = malloc(sizeof(float) * PM * PT);
    fill(y0, PM * PT); /* what the residual holds before ACC adds into it */
    for (int i = 0; i < nw; i++) {
        w[i] = weights(type, rows[i], (int)K, deq);
        wb[i] = upload(w[i], wgllm_row_size(type, K) * rows[i]);
        yf[i] = upload(y0, sizeof(float) * PM * PT);
        yu[i] = upload(y0, sizeof(float) * PM * PT);
    }
    struct wgllm_gpu_buffer *xb = upload(x, sizeof(float) * xn), *vb = upload(vec, sizeof(float) * (PN + K + 3 * PM)),
                            *tb = upload(tab, sizeof(wgllm_fp16) * 65536), *rb = upload(NULL, sizeof(float) * K * PT),
                            *nb = upload(NULL, sizeof(float) * K * PT);
    /* the fused kernel, x read at PX, the norm's weights at PN, the biases after them */
    union wgllm_kparams kp = {.matvec = {.rows = PM, .k = K, .x_off = PX, .norm_off = PN, .norm_eps = 1e-5f,
                                         .epi = WGLLM_EPI_ACC}};
    if (qkv)
        kp = (union wgllm_kparams){.matvec_qkv = {.rows_q = PM, .rows_k = PM - 4, .rows_v = PM - 6, .k = K, .x_off = PX,
                                                  .bq_off = PN + K, .bk_off = PN + K + PM, .bv_off = PN + K + 2 * PM,
                                                  .norm_off = PN, .norm_eps = 1e-5f}};
    else if (glu) kp.matvec.epi = 0;
    struct wgllm_gpu_buffer *fb[8] = {0}, *ub[8];
    int nb_f = 0;
    for (int i = 0; i < nw; i++) fb[nb_f++] = wb[i];
    fb[nb_f++] = xb;
    for (int i = 0; i < (glu ? 1 : nw); i++) fb[nb_f++] = yf[i];
    memcpy(ub, fb, sizeof fb);
    for (int i = 0; i < (glu ? 1 : nw); i++) ub[nw + 1 + i] = yu[i];
    ub[nw] = rb; /* the unfused kernel reads the rounded row */
    if (gelu) fb[nb_f] = ub[nb_f] = tb, nb_f++;
    const int nb_u = nb_f + (qkv ? 1 : 0); /* QKV's biases */
    if (qkv || pro == WGLLM_PRO_NORM) fb[nb_f++] = vb;
    if (qkv) ub[nb_u - 1] = vb;
    const uint32_t total = qkv ? 3 * PM - 10 : PM;
    bool ok = run(&key, tu, &kp, nb_f, fb, cdiv(total, tu->rows_matvec), PT, from, to);
    /* the pair it stands for */
    if (pro == WGLLM_PRO_NORM) {
        const struct wgllm_kernel_key kr = {.kernel = WGLLM_KERNEL_RMS_NORM_ROUND, .type = vt};
        const union wgllm_kparams rp = {.rms_norm = {.width = K, .x_off = PX, .w_off = PN, .eps = 1e-5f}};
        struct wgllm_gpu_buffer *rbs[4] = {xb, vb, nb, rb};
        ok = ok && run(&kr, tu, &rp, 4, rbs, PT, 1, NULL, NULL);
    } else {
        const struct wgllm_kernel_key kr = {.kernel = WGLLM_KERNEL_ROUND_ACT, .type = vt};
        const union wgllm_kparams rp = {.round_act = {.count = K * PT, .x_off = PX}};
        struct wgllm_gpu_buffer *rbs[2] = {xb, rb};
        ok = ok && run(&kr, tu, &rp, 2, rbs, cdiv(K * PT / 32 + 1, tu->wg_elem), 1, NULL, NULL);
    }
    struct wgllm_kernel_key ku = key;
    ku.pro = WGLLM_PRO_NONE, ku.kx = 0;
    union wgllm_kparams up = kp;
    up.raw.b = 0; /* x_off: the rounded rows start at 0 */
    ok = ok && run(&ku, tu, &up, nb_u, ub, cdiv(total, tu->rows_matvec), PT, NULL, NULL);
    bool same = ok;
    for (int i = 0; i < (glu ? 1 : nw) && ok; i++) {
        float *a = malloc(sizeof(float) * PM * PT), *c = malloc(sizeof(float) * PM * PT);
        ok = readback(yf[i], a, sizeof(float) * PM * PT) && readback(yu[i], c, sizeof(float) * PM * PT);
        same = same && ok && !memcmp(a, c, sizeof(float) * PM * PT) && memcmp(a, y0, sizeof(float) * PM * PT);
        free(a), free(c);
    }
    for (int i = 0; i < nw; i++) wgllm_gpu_buffer_destroy(G, wb[i]), wgllm_gpu_buffer_destroy(G, yf[i]),
                                 wgllm_gpu_buffer_destroy(G, yu[i]), free(w[i]);
    struct wgllm_gpu_buffer *all[5] = {xb, vb, tb, rb, nb};
    for (int i = 0; i < 5; i++) wgllm_gpu_buffer_destroy(G, all[i]);
    free(x), free(vec), free(deq), free(tab), free(y0);
    return ok && same;
}

TEST(matvec_prologues_same_bits_as_round_or_norm_then_matvec) {
    /* weights of each rounding type: Q8_0 (Q4_0), Q8_1 (Q4_1), Q8_K (Q4_K,
     * Q6_K), F16, BF16; K = 1280: 40 blocks of 32 and 5 of 256, a multiple
     * of no workgroup size; K = 600 (F16/BF16): not even whole blocks of 32 */
    static const struct {
        uint32_t type, k;
    } cases[] = {{WGLLM_TYPE_Q4_0, 1280}, {WGLLM_TYPE_Q4_1, 1280}, {WGLLM_TYPE_Q4_K, 1280}, {WGLLM_TYPE_Q6_K, 1280},
                 {WGLLM_TYPE_F16, 1280},  {WGLLM_TYPE_BF16, 1280}, {WGLLM_TYPE_F16, 600},  {WGLLM_TYPE_BF16, 600}};
    static const enum wgllm_kernel kernels[] = {WGLLM_KERNEL_MATVEC, WGLLM_KERNEL_MATVEC_QKV, WGLLM_KERNEL_MATVEC_SWIGLU,
                                                WGLLM_KERNEL_MATVEC_GEGLU};
    struct wgllm_wgsl_tune tunes[3];
    const int n_tunes = tunes_of(tunes);
    int n = 0;
    for (int tv = 0; tv < n_tunes; tv++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
            for (size_t ki = 0; ki < sizeof kernels / sizeof *kernels; ki++)
                for (int f32 = 0; f32 <= 1; f32++)
                    for (uint8_t pro = WGLLM_PRO_ROUND; pro <= WGLLM_PRO_NORM; pro++) {
                        /* (kept to ~70 pipelines: ~150 ms each here, more under ASan) packed rows: every
                         * case with every kernel, the two prologues in turn (so each type and each kernel
                         * sees both), under the other shapes Q8_0 and F16 only; f32 rows: each
                         * case once (Q8_0 under every shape, with both prologues) */
                        const bool turn = (ci + ki) % 2 == (pro == WGLLM_PRO_NORM);
                        const bool main3 = ci == 0 || ci == 6;
                        if (f32 ? ki != ci % 4 || (!turn && ci != 0) || (tv > 0 && ci != 0) : !turn || (tv > 0 && !main3))
                            continue;
                        bool skipped;
                        const bool ok = pro_case(kernels[ki], cases[ci].type, pro, f32, cases[ci].k, &tunes[tv], NULL, NULL,
                                                 &skipped);
                        CHECK(ok);
                        n += !skipped;
                        if (!ok || (tv == 0 && ki == 0 && !f32))
                            printf("  %s %s K=%u, %s%s (%s): %s\n", wgllm_wgsl_kernel_name(kernels[ki]),
                                   wgllm_type_name(cases[ci].type), cases[ci].k, pro == WGLLM_PRO_NORM ? "norm+round" : "round",
                                   f32 ? ", f32 row" : "", tune_name(&tunes[tv]),
                                   skipped ? "does not fit" : ok ? "same bits" : "DIFFERENT");
                    }
    printf("  %d prologue cases, same bits\n", n);
    CHECK(n >= 55);
}

/* What fits and what falls back: the packed row plus the kernel's other
 * arrays against a device's workgroup memory; no prologue where the
 * weights need no rounding (F32), K breaks blocks or the tune is off. */
TEST(matvec_prologue_bytes_and_fallbacks) {
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_default_tune(); /* 64 threads (red: 512 B), wg_row 128 (nh: 1 KiB) */
    struct wgllm_kernel_key k = {.kernel = WGLLM_KERNEL_MATVEC, .type = WGLLM_TYPE_Q4_0, .pro = WGLLM_PRO_ROUND, .kx = 5632};
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 5632 + 176 * 4 + 512); /* TinyLlama's n_ff: 6.3 KiB */
    k.pro = WGLLM_PRO_NORM;
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 5632 + 176 * 4 + 512 + 1024);
    k.type = WGLLM_TYPE_Q4_K, k.pro = WGLLM_PRO_ROUND;
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 5632 + 22 * 4 + 512);
    k.type = WGLLM_TYPE_F16, k.kx = 8192; /* halves: 16 KiB alone, over WebGPU's minimum with red */
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 16384 + 512);
    CHECK(wgllm_wgsl_pro_bytes(&k, t) > PRO_LIMIT);
    bool skipped = false;
    CHECK(pro_case(WGLLM_KERNEL_MATVEC, WGLLM_TYPE_F16, WGLLM_PRO_ROUND, false, 8192, t, NULL, NULL, &skipped) && skipped);
    k.type = WGLLM_TYPE_Q4_0, k.kx = 5632, k.pro_f32 = true; /* as f32 values: 22 KiB, packed on such a device */
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 4 * 5632 + 512);
    k.pro_f32 = false;
    k.type = WGLLM_TYPE_F32; /* nothing to round */
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 0);
    CHECK(wgllm_wgsl_generate(&k, t) == NULL);
    k.type = WGLLM_TYPE_Q4_K, k.kx = 2816 + 32; /* not whole Q8_K blocks */
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 0);
    k.pro = WGLLM_PRO_NONE, k.kx = 2816;
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, t), 0);
    const struct wgllm_wgsl_tune *c = wgllm_wgsl_cpu_adapter_tune(); /* a row per thread: no red */
    k.type = WGLLM_TYPE_Q4_0, k.pro = WGLLM_PRO_NORM, k.kx = 2048;
    CHECK_EQ_INT(wgllm_wgsl_pro_bytes(&k, c), 2048 + 64 * 4 + 8 * c->wg_row);
}

/* ---- every weight format compiles; mutants fail --------------------------- */

TEST(fused_kernels_compile_for_every_format) {
    /* the GPU default's shape (the other shapes' text differs only in main(),
     * compiled above for five formats: ~150 ms a pipeline here) */
    const struct wgllm_wgsl_tune tunes[1] = {*wgllm_wgsl_default_tune()};
    int n = 0;
    for (int tv = 0; tv < 1; tv++)
        for (uint32_t t = 0; t < WGLLM_TYPE_COUNT; t++) {
            if (!wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, t)) continue;
            /* each format beside another (names suffixed per weight must not collide) */
            const uint32_t other = t == WGLLM_TYPE_Q6_K ? WGLLM_TYPE_Q4_K : WGLLM_TYPE_Q6_K;
            const struct wgllm_kernel_key keys[] = { /* the format as weight 0, 1 and 2 */
                {.kernel = WGLLM_KERNEL_MATVEC_QKV, .type = t, .type2 = other, .type3 = t, .bias = true},
                {.kernel = WGLLM_KERNEL_MATVEC_GEGLU, .type = other, .type2 = t},
                /* and with a prologue, xin() for X[] in the format's rdot: Q8_0's own rdot (the
                 * others' run in the prologue cases above; every 8-element format shares one) */
                {.kernel = WGLLM_KERNEL_MATVEC, .type = t, .pro = WGLLM_PRO_ROUND, .kx = 4096},
            };
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
                if (keys[k].pro && t != WGLLM_TYPE_Q8_0) continue;
                char *src = wgllm_wgsl_generate(&keys[k], &tunes[tv]);
                struct wgllm_error err = {0};
                struct wgllm_gpu_pipeline *p = src ? wgllm_gpu_pipeline_get(G, src, "fused", &err) : NULL;
                if (!p) printf("  %s %s (%s): %s\n", wgllm_wgsl_kernel_name(keys[k].kernel), wgllm_type_name(t),
                               tune_name(&tunes[tv]), src ? err.message : "no source");
                CHECK(p != NULL);
                n += p != NULL;
                free(src);
            }
        }
    printf("  %d fused mat-vec pipelines compiled\n", n);
}

TEST(fused_mutants_fail) {
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_default_tune();
    const uint32_t q8[3] = {WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0};
    double e;
    /* k's rows stop one short: its last row goes to v */
    CHECK(!qkv_case(q8, false, t, "if (row < p.n + p.m) {", "if (row + 1u < p.n + p.m) {", &e));
    /* the up row of the next row */
    CHECK(!glu_case(WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0, false, t, "rdot_1(row_base_1(row)", "rdot_1(row_base_1(row + 1u)"));
    /* K's second element of a pair turned the other way */
    CHECK(!rope_store_case(true, RD, true, "return x0 * s + x1 * c;", "return x0 * s - x1 * c;"));
    /* V's words one row off */
    CHECK(!rope_store_case(false, RD, true, "VC[row * nv + w]", "VC[(row + 1u) * nv + w]"));
    /* the first block of each row left unrounded */
    CHECK(!rms_round_case(WGLLM_TYPE_Q8_0, "for (var i0 = tid * 32u;", "for (var i0 = tid * 32u + 32u;"));
    /* the prologue: each Q8_0 block's scale taken from the next block */
    bool sk;
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC, WGLLM_TYPE_Q4_0, WGLLM_PRO_ROUND, false, 1280, t, "* XS[i / QB]", "* XS[i / QB + 1u]", &sk));
    /* the rows start before the workgroup's row is rounded (no barrier
     * after the prologue): with a row per thread, where each thread reads
     * blocks others round (in the reduction shapes a thread's blocks are
     * its own, and SwiftShader runs the lanes in order) */
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC_SWIGLU, WGLLM_TYPE_Q4_K, WGLLM_PRO_ROUND, false, 1280, wgllm_wgsl_cpu_adapter_tune(),
                    "round32(i0, xo, 0u); }\n  workgroupBarrier();", "round32(i0, xo, 0u); }\n", &sk));
    /* the norm's scale left out (the row rounded unnormalized) */
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC_QKV, WGLLM_TYPE_Q4_0, WGLLM_PRO_NORM, true, 1280, t, "(X[i] * nscale)", "(X[i] * 1.0)", &sk));
    /* the sum of squares over half the partials of a thread short of WGR */
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC_GEGLU, WGLLM_TYPE_F16, WGLLM_PRO_NORM, false, 600, t, "v < WGR; v += nt", "v < WGR / 2u; v += nt", &sk));
    /* F16's halves: the high half of each word read as the low */
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC, WGLLM_TYPE_F16, WGLLM_PRO_ROUND, false, 600, t, "(XH[i >> 1u] >> (16u * (i & 1u)))", "(XH[i >> 1u])", &sk));
    /* the f32 row: the quants stored without their block's scale */
    CHECK(!pro_case(WGLLM_KERNEL_MATVEC_SWIGLU, WGLLM_TYPE_Q4_K, WGLLM_PRO_ROUND, true, 1280, t, "XF[i] = f32(q) * d;", "XF[i] = f32(q);", &sk));
    printf("  11 mutants, each caught\n");
}

int main(void) {
    wgllm_quant_init();
    int required;
    if (!(G = test_webgpu_open("test_webgpu_fused", &required))) return required ? 1 : test_summary("test_webgpu_fused");
    RUN(matvec_qkv_same_bits_as_three_matvecs);
    RUN(matvec_glu_same_bits_as_matvecs_and_glu);
    RUN(rope_store_same_bits_as_rope_and_store);
    RUN(rms_norm_round_same_bits_as_norm_then_round);
    RUN(matvec_prologues_same_bits_as_round_or_norm_then_matvec);
    RUN(matvec_prologue_bytes_and_fallbacks);
    RUN(fused_kernels_compile_for_every_format);
    RUN(fused_mutants_fail);
    wgllm_gpu_close(G);
    return test_summary("test_webgpu_fused");
}
