/*
 * test_webgpu.c - the WebGPU backend's op-level tests, like ggml's
 * test-backend-ops: every generated kernel x weight format x a few shapes
 * runs on the WebGPU device and on the CPU implementation (quant traits,
 * backend/cpu/ops.h) with the same seeded inputs, compared within stated
 * tolerances; plus HAL round trips and checks of the declared webgpu.h ABI
 * (a wrong enum value or struct layout fails here).
 *
 * Runs on Dawn + SwiftShader on machines without a GPU (VK_ICD_FILENAMES is
 * set here when unset and SwiftShader's ICD is installed). Without the
 * library or an adapter it prints SKIP and passes, unless
 * WGLLM_REQUIRE_WEBGPU is set.
 */
#include "backend/cpu/ops.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "quant/quant.h"
#define TEST_RNG_SEED 0x12345678abcdefull /* this file's data */
#include "test.h"

#include <time.h>

static struct wgllm_gpu *G;

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rng_frand() * scale;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct wgllm_gpu_buffer *upload(const void *data, size_t bytes) {
    struct wgllm_error err = {0};
    struct wgllm_gpu_buffer *b = wgllm_gpu_buffer_create(G, bytes, WGLLM_GPU_STORAGE, "test", &err);
    if (!b) {
        fprintf(stderr, "  buffer: %s\n", err.message);
        return NULL;
    }
    if (data) wgllm_gpu_buffer_write(G, b, 0, data, bytes);
    return b;
}

/* Runs one kernel: params in a fresh uniform buffer, bindings 1.. = bufs.
 * Returns false (with the message printed) when anything fails. */
static bool run_wgsl(const char *src, const char *label, const union wgllm_kparams *kp, int nbuf,
                     struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y, int reps) {
    struct wgllm_error err = {0};
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(G, src, label, &err);
    if (!p) {
        fprintf(stderr, "  %s\n", err.message);
        return false;
    }
    struct wgllm_gpu_buffer *ub = wgllm_gpu_buffer_create(G, sizeof *kp, WGLLM_GPU_UNIFORM, "params", &err);
    if (!ub) return false;
    wgllm_gpu_buffer_write(G, ub, 0, kp, sizeof *kp);
    struct wgllm_gpu_binding bd[8] = {{ub, 0, 0}};
    for (int i = 0; i < nbuf; i++) bd[i + 1] = (struct wgllm_gpu_binding){bufs[i], 0, 0};
    struct wgllm_gpu_bindgroup *bg = wgllm_gpu_bindgroup_create(G, p, nbuf + 1, bd, &err);
    bool ok = bg != NULL;
    if (bg) {
        wgllm_gpu_batch_begin(G);
        for (int r = 0; r < reps; r++) wgllm_gpu_dispatch(G, p, bg, x, y, 1);
        if (wgllm_gpu_batch_submit(G, &err)) ok = false;
        wgllm_gpu_bindgroup_destroy(G, bg);
    }
    if (!ok) fprintf(stderr, "  %s\n", err.message);
    wgllm_gpu_buffer_destroy(G, ub);
    return ok;
}

/* Runs one kernel as generated for `tune` (NULL: the defaults). */
static bool run_kernel_tuned(const struct wgllm_kernel_key *key, const struct wgllm_wgsl_tune *tune,
                             const union wgllm_kparams *kp, int nbuf, struct wgllm_gpu_buffer **bufs, uint32_t x,
                             uint32_t y, int reps) {
    char *src = wgllm_wgsl_generate(key, tune);
    if (!src) {
        fprintf(stderr, "  no WGSL for %s/%s\n", wgllm_wgsl_kernel_name(key->kernel), wgllm_type_name(key->type));
        return false;
    }
    bool ok = run_wgsl(src, wgllm_wgsl_kernel_name(key->kernel), kp, nbuf, bufs, x, y, reps);
    free(src);
    return ok;
}

static bool run_kernel(const struct wgllm_kernel_key *key, const union wgllm_kparams *kp, int nbuf,
                       struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y, int reps) {
    return run_kernel_tuned(key, NULL, kp, nbuf, bufs, x, y, reps);
}

static bool read_f32(struct wgllm_gpu_buffer *b, float *dst, size_t n) {
    struct wgllm_error err = {0};
    if (wgllm_gpu_buffer_read(G, b, 0, dst, n * sizeof(float), &err)) {
        fprintf(stderr, "  readback: %s\n", err.message);
        return false;
    }
    return true;
}

static uint32_t cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* ---- HAL and ABI ---------------------------------------------------------- */

TEST(hal_round_trip) {
    const int n = 1000;
    float *x = malloc(n * sizeof *x), *y = calloc(n, sizeof *y);
    fill(x, n, 10.0f);
    uint64_t bytes0 = wgllm_gpu_bytes_allocated(G);
    struct wgllm_gpu_buffer *a = upload(x, n * sizeof *x);
    struct wgllm_gpu_buffer *b = upload(NULL, n * sizeof *x);
    CHECK(a && b);
    if (a && b) {
        CHECK_EQ_INT(wgllm_gpu_bytes_allocated(G) - bytes0, 2 * 4000);
        wgllm_gpu_batch_begin(G);
        wgllm_gpu_copy(G, a, 0, b, 0, n * sizeof *x);
        struct wgllm_error err = {0};
        CHECK_EQ_INT(wgllm_gpu_batch_submit(G, &err), WGLLM_STATUS_OK);
        CHECK(read_f32(b, y, n));
        CHECK(memcmp(x, y, n * sizeof *x) == 0);
        /* a write whose size is not a multiple of 4 */
        const char msg[7] = "webgpu";
        char back[8] = {0};
        wgllm_gpu_buffer_write(G, a, 8, msg, 7);
        CHECK_EQ_INT(wgllm_gpu_buffer_read(G, a, 8, back, 7, &err), WGLLM_STATUS_OK);
        CHECK_STR(back, "webgpu");
    }
    wgllm_gpu_buffer_destroy(G, a);
    wgllm_gpu_buffer_destroy(G, b);
    CHECK_EQ_INT(wgllm_gpu_bytes_allocated(G), bytes0);
    free(x);
    free(y);
}

TEST(abi_info_and_limits) {
    const struct wgllm_gpu_info *in = wgllm_gpu_get_info(G);
    printf("  adapter: %s (%s, %s), max storage binding %llu MiB, workgroup storage %u, invocations %u, "
           "shader-f16 %s, subgroups %s\n",
           in->name, in->backend, in->type, (unsigned long long)(in->max_storage_binding_size >> 20),
           in->max_workgroup_storage, in->max_invocations, in->shader_f16 ? "yes" : "no", in->subgroups ? "yes" : "no");
    CHECK(in->name[0] != 0);
    CHECK(strcmp(in->backend, "unknown") != 0);
    /* limits the spec guarantees at least: a shifted WGPULimits layout reads garbage here */
    CHECK(in->max_storage_binding_size >= (128u << 20));
    CHECK(in->max_buffer_size >= (256u << 20));
    CHECK(in->max_workgroup_storage >= 16384 && in->max_workgroup_storage <= (1u << 20));
    CHECK(in->max_invocations >= 256 && in->max_invocations <= 4096);
    CHECK(in->max_workgroups_per_dim >= 65535);
    CHECK(in->min_storage_offset_align >= 4 && in->min_storage_offset_align <= 256);
    if (strstr(in->name, "SwiftShader")) {
        /* what Chromium reports for the same adapter (TOOLCHAIN.md) */
        CHECK(in->is_cpu);
        CHECK_STR(in->backend, "vulkan");
        CHECK_EQ_INT(in->max_storage_binding_size, 1u << 30);
        CHECK_EQ_INT(in->max_workgroup_storage, 32768);
        CHECK(!in->shader_f16);
        CHECK(in->subgroups);
    }
}

TEST(abi_subgroups_feature) {
    /* If the Subgroups feature id were wrong the device would not have it
     * enabled and this shader would not compile. */
    const struct wgllm_gpu_info *in = wgllm_gpu_get_info(G);
    if (!in->subgroups) {
        printf("  (adapter without subgroups: skipped)\n");
        return;
    }
    const char *src = "enable subgroups;\n"
                      "@group(0) @binding(0) var<storage, read_write> O: array<u32>;\n"
                      "@compute @workgroup_size(64)\n"
                      "fn main(@builtin(local_invocation_index) i: u32) { O[i] = subgroupAdd(1u); }\n";
    struct wgllm_error err = {0};
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(G, src, "subgroups", &err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "  %s\n", err.message);
        return;
    }
    struct wgllm_gpu_buffer *o = upload(NULL, 64 * 4);
    struct wgllm_gpu_binding bd = {o, 0, 0};
    struct wgllm_gpu_bindgroup *bg = wgllm_gpu_bindgroup_create(G, p, 1, &bd, &err);
    CHECK(bg != NULL);
    if (bg) {
        wgllm_gpu_batch_begin(G);
        wgllm_gpu_dispatch(G, p, bg, 1, 1, 1);
        CHECK_EQ_INT(wgllm_gpu_batch_submit(G, &err), WGLLM_STATUS_OK);
        uint32_t v[64];
        CHECK_EQ_INT(wgllm_gpu_buffer_read(G, o, 0, v, sizeof v, &err), WGLLM_STATUS_OK);
        CHECK(v[0] >= 1 && v[0] <= 128 && (v[0] & (v[0] - 1)) == 0); /* the subgroup size */
        if (in->subgroup_max_size) CHECK(v[0] >= in->subgroup_min_size && v[0] <= in->subgroup_max_size);
        wgllm_gpu_bindgroup_destroy(G, bg);
    }
    wgllm_gpu_buffer_destroy(G, o);
}

TEST(pipeline_errors_and_cache) {
    struct wgllm_error err = {0};
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(G, "fn main( { nonsense", "bad", &err);
    CHECK(p == NULL);
    CHECK(strstr(err.message, "bad") != NULL);
    struct wgllm_kernel_key k = {.kernel = WGLLM_KERNEL_ADD_ROWS, .type = WGLLM_TYPE_F32, .neox = false};
    char *src = wgllm_wgsl_generate(&k, NULL);
    int before = wgllm_gpu_pipeline_count(G);
    struct wgllm_gpu_pipeline *p1 = wgllm_gpu_pipeline_get(G, src, "add_rows", &err);
    struct wgllm_gpu_pipeline *p2 = wgllm_gpu_pipeline_get(G, src, "add_rows", &err);
    CHECK(p1 != NULL && p1 == p2);
    CHECK(wgllm_gpu_pipeline_count(G) <= before + 1);
    free(src);
}

/* ---- weights ---------------------------------------------------------------- */

/* Quantizes m x k random floats to `type`; returns the bytes and (via deq)
 * what the CPU reads back from them. */
/* Random bytes with fp16 block scales of 0.01..1 (every grid index, sign and
 * sub-block scale of a format wgllm has no quantizer for). */
static void random_blocks(uint32_t type, char *q, int k) {
    const size_t rs = wgllm_row_size(type, k), bs = wgllm_type_traits(type)->type_size;
    for (size_t i = 0; i < rs; i++) q[i] = (char)(rand() & 0xFF);
    for (size_t b = 0; b < rs / bs; b++) {
        const wgllm_fp16 d = wgllm_fp32_to_fp16(0.01f + (float)(rand() % 100) / 100.0f);
        if (type == WGLLM_TYPE_IQ1_M) { /* its scale's four nibbles top the last four u16 */
            uint16_t sc[4];
            memcpy(sc, q + b * bs + bs - 8, 8);
            for (int j = 0; j < 4; j++) sc[j] = (uint16_t)((sc[j] & 0x0FFF) | ((d >> (4 * j)) & 0xF) << 12);
            memcpy(q + b * bs + bs - 8, sc, 8);
        } else {
            memcpy(q + b * bs, &d, 2);
        }
    }
}

static void *make_weights(uint32_t type, int m, int k, float *deq, size_t *bytes) {
    const struct wgllm_type_traits *tr = wgllm_type_traits(type);
    size_t rs = wgllm_row_size(type, k);
    *bytes = rs * (size_t)m;
    char *w = malloc(*bytes + 4);
    float *src = malloc((size_t)k * sizeof *src);
    for (int r = 0; r < m; r++) {
        fill(src, (size_t)k, 1.0f);
        if (type == WGLLM_TYPE_F32) memcpy(w + r * rs, src, rs);
        else if (type == WGLLM_TYPE_F16) wgllm_fp32_to_fp16_row(src, (wgllm_fp16 *)(w + r * rs), k);
        else if (tr->from_float_ref) tr->from_float_ref(src, w + r * rs, k);
        else random_blocks(type, w + r * rs, k); /* the I-quants: no wgllm quantizer */
        tr->to_float(w + r * rs, deq + (size_t)r * k, k);
    }
    free(src);
    return w;
}

static const uint32_t wtypes[] = {WGLLM_TYPE_F32, WGLLM_TYPE_F16, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_0};

/* The mat-vec variants: workgroup reduction (the GPU default), one row per
 * thread (the cpu-adapter default), subgroupAdd (when the adapter has
 * subgroups; SwiftShader does, with 4-wide subgroups). */
static int matvec_tunes(struct wgllm_wgsl_tune *t) {
    t[0] = *wgllm_wgsl_default_tune();
    t[1] = *wgllm_wgsl_cpu_adapter_tune();
    if (!wgllm_gpu_get_info(G)->subgroups) return 2;
    t[2] = t[0];
    t[2].matvec_subgroups = true;
    t[3] = t[2];
    t[3].wg_matvec = 128, t[3].rows_matvec = 3;
    return 4;
}

TEST(matvec_formats) {
    /* rows x cols x tokens: one block, odd block counts (unaligned Q8_0/Q4_0
     * rows), rows not a multiple of rows_matvec, two tokens */
    static const int shapes[][3] = {{1, 32, 1}, {67, 96, 1}, {130, 256, 2}, {256, 1024, 1}};
    struct wgllm_wgsl_tune tunes[4];
    const int n_tunes = matvec_tunes(tunes);
    for (int tv = 0; tv < n_tunes; tv++)
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++) {
        const uint32_t type = wtypes[ti];
        const struct wgllm_type_traits *tr = wgllm_type_traits(type);
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int M = shapes[si][0], K = shapes[si][1], T = shapes[si][2];
            float *deq = malloc((size_t)M * K * sizeof *deq);
            size_t wbytes;
            void *w = make_weights(type, M, K, deq, &wbytes);
            float *x = malloc((size_t)T * K * sizeof *x), *y = malloc((size_t)T * M * sizeof *y);
            fill(x, (size_t)T * K, 1.0f);
            struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(x, (size_t)T * K * 4), upload(NULL, (size_t)T * M * 4)};
            const union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)M, .k = (uint32_t)K}};
            struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = type, .neox = false};
            const struct wgllm_wgsl_tune *tu = &tunes[tv];
            for (int i = 0; i < T * M; i++) y[i] = -12345.0f;
            wgllm_gpu_buffer_write(G, bufs[2], 0, y, (size_t)T * M * 4);
            bool ok = run_kernel_tuned(&key, tu, &kp, 3, bufs, cdiv(M, tu->rows_matvec), T, 1) &&
                      read_f32(bufs[2], y, (size_t)T * M);
            CHECK(ok);
            /* Reference: the CPU's dequantized weights . x in double; the
             * bound scales with sum |w x| (f32 accumulation in another order). */
            double worst = 0, worst_dot = 0;
            void *xq = malloc(wgllm_row_size(tr->vec_dot_type, K) + 64);
            for (int t = 0; ok && t < T; t++) {
                const struct wgllm_type_traits *vt = wgllm_type_traits(tr->vec_dot_type);
                if (tr->vec_dot_type == WGLLM_TYPE_F32) memcpy(xq, x + (size_t)t * K, (size_t)K * 4);
                else if (tr->vec_dot_type == WGLLM_TYPE_F16) wgllm_fp32_to_fp16_row(x + (size_t)t * K, xq, K);
                else vt->from_float(x + (size_t)t * K, xq, K);
                for (int r = 0; r < M; r++) {
                    double ref = 0, mag = 0;
                    for (int i = 0; i < K; i++) {
                        ref += (double)deq[(size_t)r * K + i] * x[(size_t)t * K + i];
                        mag += fabs((double)deq[(size_t)r * K + i] * x[(size_t)t * K + i]);
                    }
                    double got = y[(size_t)t * M + r];
                    double e = fabs(got - ref) / (mag + 1e-6);
                    if (e > worst) worst = e;
                    float cpu;
                    tr->vec_dot(K, &cpu, (const char *)w + (size_t)r * wgllm_row_size(type, K), xq);
                    double ed = fabs(got - cpu) / (mag + 1e-6);
                    if (ed > worst_dot) worst_dot = ed;
                }
            }
            free(xq);
            CHECK(worst <= 2e-6);
            /* the CPU backend rounds x to vec_dot_type (Q8_0 for the
             * quantized formats, F16 for F16): within that rounding */
            CHECK(worst_dot <= (type == WGLLM_TYPE_F32 ? 2e-6 : 1e-2));
            if (worst > 2e-6 || si == 3)
                printf("  matvec %-5s %4dx%-5d x%d (%s): rel err vs dequant %.2e, vs CPU vec_dot %.2e\n", tr->name, M, K, T,
                       tu->matvec_thread_rows ? "thread rows" : tu->matvec_subgroups ? "subgroups" : "workgroup reduction",
                       worst, worst_dot);
            for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
            free(w);
            free(deq);
            free(x);
            free(y);
        }
    }
}

TEST(matvec_offsets) {
    /* weights starting at a word offset (a sub-range of a shared buffer),
     * x and y at offsets: what a memory plan with one buffer per kind uses */
    const uint32_t type = WGLLM_TYPE_Q4_0;
    const int M = 40, K = 64, OFF_W = 36 /* words */, OFF_X = 5, OFF_Y = 3;
    float *deq = malloc((size_t)M * K * sizeof *deq);
    size_t wbytes;
    void *w = make_weights(type, M, K, deq, &wbytes);
    char *wb = calloc(1, OFF_W * 4 + wbytes + 4);
    memcpy(wb + OFF_W * 4, w, wbytes);
    float x[5 + 64], y[3 + 40];
    fill(x, 5 + 64, 1.0f);
    struct wgllm_gpu_buffer *bufs[3] = {upload(wb, OFF_W * 4 + wbytes), upload(x, sizeof x), upload(NULL, sizeof y)};
    const union wgllm_kparams kp = {.matvec = {.rows = M, .k = K, .w_off = OFF_W, .x_off = OFF_X,
                                               .y_off = OFF_Y}};
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = type, .neox = false};
    CHECK(run_kernel(&key, &kp, 3, bufs, cdiv(M, wgllm_wgsl_default_tune()->rows_matvec), 1, 1) && read_f32(bufs[2], y, 43));
    for (int r = 0; r < M; r++) {
        double ref = 0, mag = 0;
        for (int i = 0; i < K; i++) {
            ref += (double)deq[r * K + i] * x[OFF_X + i];
            mag += fabs((double)deq[r * K + i] * x[OFF_X + i]);
        }
        CHECK_NEAR(y[OFF_Y + r], ref, 2e-6 * mag + 1e-7);
    }
    for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
    free(w);
    free(wb);
    free(deq);
}

/* ---- mat-mat (prefill) -------------------------------------------------------- */

/* One MATMUL case: M rows x K, T tokens; W placed at word A_OFF of its
 * buffer (after garbage bytes), x at float 7, y at float C_OFF of a buffer
 * prefilled with a sentinel. */
struct mm_case {
    uint32_t type;
    int M, K, T;
    uint32_t a_off, c_off;
};

struct mm_result {
    bool ran;
    double err_ref; /* max |y - ref| / sum |w x|, ref = dequantized W . x in double */
    double err_mv;  /* the same against MATVEC's output on the same buffers */
    int stray;      /* sentinels overwritten outside y's range */
};

#define MM_SENTINEL -12345.0f
#define MM_X_OFF 7

/* Runs the case with `tune`'s MATMUL (or the WGSL `src` when given) and
 * the default MATVEC, and measures both against the CPU reference. */
static struct mm_result mm_run(const struct mm_case *c, const struct wgllm_wgsl_tune *tune, const char *src) {
    struct mm_result res = {0};
    const int M = c->M, K = c->K, T = c->T;
    float *deq = malloc((size_t)M * K * sizeof *deq);
    size_t wbytes;
    void *w = make_weights(c->type, M, K, deq, &wbytes);
    const size_t wall = c->a_off * 4u + wbytes;
    unsigned char *wb = malloc(wall + 4);
    for (size_t i = 0; i < wall + 4; i++) wb[i] = (unsigned char)(i * 37 + 11); /* garbage before and after W */
    memcpy(wb + c->a_off * 4u, w, wbytes);
    const size_t nx = MM_X_OFF + (size_t)T * K, ny = c->c_off + (size_t)T * M + 64;
    float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *ymv = malloc(ny * sizeof *y);
    fill(x, nx, 1.0f);
    for (size_t i = 0; i < ny; i++) y[i] = MM_SENTINEL;
    struct wgllm_gpu_buffer *bufs[3] = {upload(wb, wall), upload(x, nx * 4), upload(y, ny * 4)};
    struct wgllm_gpu_buffer *bmv[3] = {bufs[0], bufs[1], upload(y, ny * 4)};
    const union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)M, .k = (uint32_t)K, .w_off = c->a_off,
                                               .x_off = MM_X_OFF, .y_off = c->c_off, .tokens = (uint32_t)T}};
    const struct wgllm_wgsl_tune *tu = tune ? tune : wgllm_wgsl_default_tune();
    const uint32_t gx = cdiv(M, tu->mm_tile_n), gy = cdiv(T, tu->mm_tile_m);
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATMUL, .type = c->type, .neox = false};
    struct wgllm_kernel_key kmv = {.kernel = WGLLM_KERNEL_MATVEC, .type = c->type, .neox = false};
    res.ran = bufs[0] && bufs[1] && bufs[2] && bmv[2] &&
              (src ? run_wgsl(src, "matmul_mutant", &kp, 3, bufs, gx, gy, 1) : run_kernel_tuned(&key, tu, &kp, 3, bufs, gx, gy, 1)) &&
              read_f32(bufs[2], y, ny) &&
              run_kernel(&kmv, &kp, 3, bmv, cdiv(M, wgllm_wgsl_default_tune()->rows_matvec), T, 1) && read_f32(bmv[2], ymv, ny);
    for (size_t i = 0; res.ran && i < ny; i++)
        if ((i < c->c_off || i >= c->c_off + (size_t)T * M) && y[i] != MM_SENTINEL) res.stray++;
    for (int t = 0; res.ran && t < T; t++)
        for (int r = 0; r < M; r++) {
            double ref = 0, mag = 0;
            const float *xt = x + MM_X_OFF + (size_t)t * K, *wr = deq + (size_t)r * K;
            for (int i = 0; i < K; i++) {
                ref += (double)wr[i] * xt[i];
                mag += fabs((double)wr[i] * xt[i]);
            }
            const size_t o = c->c_off + (size_t)t * M + r;
            const double e = fabs(y[o] - ref) / (mag + 1e-6), emv = fabs(y[o] - ymv[o]) / (mag + 1e-6);
            /* NaN (a never-written sentinel is not NaN, but garbage can be) counts as worst */
            res.err_ref = e > res.err_ref || e != e ? (e != e ? 1e30 : e) : res.err_ref;
            res.err_mv = emv > res.err_mv || emv != emv ? (emv != emv ? 1e30 : emv) : res.err_mv;
        }
    for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
    wgllm_gpu_buffer_destroy(G, bmv[2]);
    free(w), free(wb), free(deq), free(x), free(y), free(ymv);
    return res;
}

/* f32 sums of K products in another order than the double reference: the
 * error grows like sqrt(K) ulps of sum |w x|; 1e-5 of it holds for K=2048
 * with room, while a skipped or doubled K chunk, a wrong row or token is
 * off by O(1). Against MATVEC the same bound (both are f32 sums). */
#define MM_TOL 1e-5

static bool mm_ok(const struct mm_result *r) { return r->ran && r->err_ref <= MM_TOL && r->err_mv <= MM_TOL && r->stray == 0; }

/* tokens 1..130 (1, under a tile, over one, several), rows not a multiple
 * of any tile, K 256 and 2048, weights at a word offset, y at an offset
 * (sizes kept small: SwiftShader runs ~0.05-0.2 GFLOP/s) */
static const struct mm_case mm_cases[] = {
    {0, 67, 256, 1, 12, 3}, {0, 67, 256, 3, 0, 0},    {0, 100, 256, 17, 36, 5},
    {0, 45, 256, 64, 4, 11}, {0, 70, 256, 130, 20, 1}, {0, 37, 2048, 17, 2, 7},
};

/* Every format with the cpu-adapter tune (mm_direct: no workgroup memory);
 * the GPU default tune (workgroup-memory tiles; 256 threads: up to ~20 s to
 * compile on a loaded SwiftShader) with Q4_0 only, whose unpacking is the
 * most involved: matmul_odd_tiles covers the other formats' tile loads. */
TEST(matmul_formats) {
    const struct wgllm_wgsl_tune *tunes[2] = {wgllm_wgsl_default_tune(), wgllm_wgsl_cpu_adapter_tune()};
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++)
        for (size_t ci = 0; ci < sizeof mm_cases / sizeof *mm_cases; ci++)
            for (int u = 0; u < 2; u++) {
                if (u == 0 && wtypes[ti] != WGLLM_TYPE_Q4_0) continue;
                struct mm_case c = mm_cases[ci];
                c.type = wtypes[ti];
                struct mm_result r = mm_run(&c, tunes[u], NULL);
                CHECK(mm_ok(&r));
                if (!mm_ok(&r) || ci >= 4)
                    printf("  matmul %-5s %3dx%-4d x%-3d (%s tune): rel err vs dequant %.2e, vs matvec %.2e, stray %d\n",
                           wgllm_type_name(c.type), c.M, c.K, c.T, u ? "cpu" : "gpu", r.err_ref, r.err_mv, r.stray);
            }
}

/* Odd tiles: micro tiles of 1 and 8, a tile_k of 96 (three blocks, which
 * does not divide K = 256), fewer threads than weight units; the last two
 * without workgroup memory; then F32 rows of K = 100 (a partial block). */
TEST(matmul_odd_tiles) {
    static const uint32_t odd[][6] = {{16, 8, 32, 1, 1, 0}, {8, 32, 96, 2, 8, 0}, {64, 4, 32, 8, 1, 0},
                                      {16, 8, 32, 2, 4, 1}, {8, 8, 32, 8, 1, 1}};
    for (size_t oi = 0; oi < sizeof odd / sizeof *odd + 2; oi++) {
        const bool tail = oi >= sizeof odd / sizeof *odd; /* F32, K = 100: shared, then direct */
        const uint32_t *o = tail ? odd[oi - sizeof odd / sizeof *odd + 2] : odd[oi];
        struct wgllm_wgsl_tune t = *wgllm_wgsl_default_tune();
        t.mm_tile_n = o[0], t.mm_tile_m = o[1], t.mm_tile_k = o[2], t.mm_micro_n = o[3], t.mm_micro_m = o[4];
        t.mm_direct = o[5];
        char why[200];
        CHECK(wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why));
        /* one format per tile (each pipeline costs seconds to compile on SwiftShader) */
        struct mm_case c = {wtypes[oi % 4], 37, 256, 19, 8, 2};
        if (tail) c = (struct mm_case){WGLLM_TYPE_F32, 33, 100, 5, 3, 1};
        struct mm_result r = mm_run(&c, &t, NULL);
        CHECK(mm_ok(&r));
        printf("  matmul %-5s K %d tile %ux%ux%u micro %ux%u%s: err %.2e / %.2e, stray %d\n", wgllm_type_name(c.type), c.K,
               o[0], o[1], o[2], o[3], o[4], o[5] ? " direct" : "", r.err_ref, r.err_mv, r.stray);
    }
}

/* The checks above must catch a wrong kernel: deliberate off-by-ones (a row
 * edge that writes one row too many, a K loop that skips a chunk, a token
 * tile shifted by one) run through the same comparison and must fail it. */
/* Runs Q4_0's MATMUL under tune t with `from` replaced by `to` in its WGSL
 * on a case that covers rows, tokens and K past every tile: the comparison
 * of mm_ok must reject it. */
static void mutant_must_fail(const struct wgllm_wgsl_tune *t, const char *from, const char *to) {
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATMUL, .type = WGLLM_TYPE_Q4_0, .neox = false};
    char *src = wgllm_wgsl_generate(&key, t);
    char *at = src ? strstr(src, from) : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(src);
        return;
    }
    const size_t lo = strlen(from), ln = strlen(to);
    char *m = malloc(strlen(src) + ln + 1);
    memcpy(m, src, (size_t)(at - src));
    strcpy(m + (at - src), to);
    strcat(m, at + lo);
    struct mm_case c = {WGLLM_TYPE_Q4_0, 67, 256, 70, 4, 3};
    struct mm_result r = mm_run(&c, t, m);
    CHECK(r.ran && !mm_ok(&r));
    printf("  mutant '%s': err %.2e, stray %d (caught: %s)\n", to, r.err_ref, r.stray, mm_ok(&r) ? "no" : "yes");
    free(m);
    free(src);
}

TEST(matmul_mutants_fail) {
    static const char *mut[][2] = {
        {"if (r < p.n) { put(", "if (r <= p.n) { put("},
        {"k0 += TK)", "k0 += TK + 32u)"},
        {"let t0 = wid.y * TM;", "let t0 = wid.y * TM + 1u;"},
        {"blk < nblk; blk++", "blk < nblk; blk += 2u"}, /* the direct kernel (below) */
        {"let tok = t0 + tt + j * (TM / RM);\n    if (tok < nt) { xr[j]", "let tok = t0 + tt + j;\n    if (tok < nt) { xr[j]"},
    };
    struct wgllm_wgsl_tune t = *wgllm_wgsl_default_tune(); /* small tiles: quick to compile */
    t.mm_tile_n = t.mm_tile_m = 16, t.mm_tile_k = 32, t.mm_micro_n = t.mm_micro_m = 2;
    for (size_t mi = 0; mi < sizeof mut / sizeof *mut; mi++) {
        t.mm_direct = mi >= 3;
        mutant_must_fail(&t, mut[mi][0], mut[mi][1]);
    }
}

/* The mat-mat split along K with subgroup reductions (tune mm_split_k),
 * where the adapter has subgroups (SwiftShader has): every format and case
 * above with a 4x8 tile of 64 threads (rows and tokens past the tile's
 * edges, K 256 and 2048: several blocks per thread and none for some);
 * then other tiles and thread counts, one format each (a 1x1 tile, 256
 * threads over K 256: most threads have no block). */
static bool split_k_tune(struct wgllm_wgsl_tune *t, uint32_t tn, uint32_t tm, uint32_t threads) {
    *t = *wgllm_wgsl_default_tune();
    t->mm_split_k = threads, t->mm_tile_n = tn, t->mm_tile_m = tm;
    char why[200];
    const bool ok = wgllm_wgsl_tune_valid(t, 256, 16384, why, sizeof why);
    if (!ok) printf("  split-K tune %ux%u/%u invalid: %s\n", tn, tm, threads, why);
    return ok;
}

TEST(matmul_split_k) {
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(G);
    if (info->is_cpu) CHECK(info->subgroups); /* SwiftShader's: this test must run there */
    if (!info->subgroups) {
        printf("  (no subgroups on this adapter: the split-K mat-mat is never chosen here)\n");
        return;
    }
    struct wgllm_wgsl_tune t;
    CHECK(split_k_tune(&t, 4, 8, 64));
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++)
        for (size_t ci = 0; ci < sizeof mm_cases / sizeof *mm_cases; ci++) {
            struct mm_case c = mm_cases[ci];
            c.type = wtypes[ti];
            struct mm_result r = mm_run(&c, &t, NULL);
            CHECK(mm_ok(&r));
            if (!mm_ok(&r) || ci >= 4)
                printf("  split-K %-5s %3dx%-4d x%-3d: rel err vs dequant %.2e, vs matvec %.2e, stray %d\n",
                       wgllm_type_name(c.type), c.M, c.K, c.T, r.err_ref, r.err_mv, r.stray);
        }
    static const uint32_t odd[][3] = {{1, 1, 256}, {8, 8, 4}, {2, 16, 128}, {16, 4, 32}};
    for (size_t oi = 0; oi < sizeof odd / sizeof *odd; oi++) {
        CHECK(split_k_tune(&t, odd[oi][0], odd[oi][1], odd[oi][2]));
        struct mm_case c = {wtypes[oi % 4], 37, 256, 19, 8, 2};
        if (oi == 0) c = (struct mm_case){WGLLM_TYPE_F32, 33, 100, 5, 3, 1}; /* a partial last block */
        struct mm_result r = mm_run(&c, &t, NULL);
        CHECK(mm_ok(&r));
        printf("  split-K %-5s K %d tile %ux%u, %u threads: err %.2e / %.2e, stray %d\n", wgllm_type_name(c.type), c.K,
               odd[oi][0], odd[oi][1], odd[oi][2], r.err_ref, r.err_mv, r.stray);
    }
    /* tunes it must refuse */
    char why[200];
    t.mm_split_k = 48;
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why) && strstr(why, "power of two"));
    CHECK(split_k_tune(&t, 8, 8, 64));
    t.mm_tile_m = 16;
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why) && strstr(why, "over 64 outputs"));
    CHECK(split_k_tune(&t, 8, 8, 128));
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 8192, why, sizeof why) && strstr(why, "workgroup memory"));
    t.mm_direct = true;
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why) && strstr(why, "exclude"));
}

/* ... and its checks catch a wrong split-K kernel: blocks skipped, the
 * subgroups' partials dropped, a lane's own sum stored instead of its
 * subgroup's, the outputs' row and token swapped. 4 threads over 8 blocks,
 * so that each thread has two. */
TEST(matmul_split_k_mutants_fail) {
    if (!wgllm_gpu_get_info(G)->subgroups) {
        CHECK(!wgllm_gpu_get_info(G)->is_cpu);
        return;
    }
    static const char *mut[][2] = {
        {"blk += NT)", "blk += NT + 1u)"},
        {"g < nsg; g++", "g + 1u < nsg; g++"},
        {"red[sg * V + v] = s;", "red[sg * V + v] = acc[v];"},
        {"let r = r0 + v % TN;\n    let tok = t0 + v / TN;", "let r = r0 + v / TM;\n    let tok = t0 + v % TM;"},
    };
    struct wgllm_wgsl_tune t;
    CHECK(split_k_tune(&t, 4, 8, 4));
    for (size_t mi = 0; mi < sizeof mut / sizeof *mut; mi++) mutant_must_fail(&t, mut[mi][0], mut[mi][1]);
}

/* Timings of the prefill mat-mat against T mat-vecs (informational). */
TEST(matmul_timing) {
    const int M = 512, K = 512, T = 32;
    const struct wgllm_wgsl_tune *tu = wgllm_gpu_get_info(G)->is_cpu ? wgllm_wgsl_cpu_adapter_tune() : wgllm_wgsl_default_tune();
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++) {
        const uint32_t type = wtypes[ti];
        float *deq = malloc((size_t)M * K * sizeof *deq);
        size_t wbytes;
        void *w = make_weights(type, M, K, deq, &wbytes);
        float *x = malloc((size_t)T * K * 4), y0;
        fill(x, (size_t)T * K, 1.0f);
        struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(x, (size_t)T * K * 4), upload(NULL, (size_t)T * M * 4)};
        const union wgllm_kparams kp = {.matvec = {.rows = M, .k = K, .tokens = T}};
        struct wgllm_kernel_key kmm = {.kernel = WGLLM_KERNEL_MATMUL, .type = type, .neox = false}, kmv = {.kernel = WGLLM_KERNEL_MATVEC, .type = type, .neox = false};
        double ms[2];
        for (int v = 0; v < 2; v++) {
            const struct wgllm_kernel_key *k = v ? &kmv : &kmm;
            uint32_t gx = v ? cdiv(M, tu->rows_matvec) : cdiv(M, tu->mm_tile_n), gy = v ? T : cdiv(T, tu->mm_tile_m);
            CHECK(run_kernel_tuned(k, tu, &kp, 3, bufs, gx, gy, 1) && read_f32(bufs[2], &y0, 1)); /* warm-up */
            double t0 = now_ms();
            CHECK(run_kernel_tuned(k, tu, &kp, 3, bufs, gx, gy, 1) && read_f32(bufs[2], &y0, 1));
            ms[v] = now_ms() - t0;
        }
        printf("  timing: %-5s %dx%d x %d tokens: matmul %.1f ms (%.1f GFLOP/s), %d matvecs %.1f ms\n", wgllm_type_name(type),
               M, K, T, ms[0], 2.0 * M * K * T / (ms[0] * 1e6), T, ms[1]);
        for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(w), free(deq), free(x);
    }
}

TEST(get_rows_formats) {
    const int M = 9, K = 96;
    const uint32_t ids[4] = {3, 0, 8, 3};
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++) {
        const uint32_t type = wtypes[ti];
        float *deq = malloc((size_t)M * K * sizeof *deq), y[4 * 96];
        size_t wbytes;
        void *w = make_weights(type, M, K, deq, &wbytes);
        struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(ids, sizeof ids), upload(NULL, sizeof y)};
        const union wgllm_kparams kp = {.get_rows = {.width = K, .scale = 1.0f}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_GET_ROWS, .type = type, .neox = false};
        CHECK(run_kernel(&key, &kp, 3, bufs, cdiv(K, wgllm_wgsl_default_tune()->wg_elem), 4, 1) && read_f32(bufs[2], y, 4 * 96));
        int bad = 0;
        for (int t = 0; t < 4; t++)
            for (int e = 0; e < K; e++)
                if (fabsf(y[t * K + e] - deq[ids[t] * K + e]) > 1e-6f * fabsf(deq[ids[t] * K + e])) bad++;
        if (bad) fprintf(stderr, "  get_rows %s: %d elements differ\n", wgllm_type_name(type), bad);
        CHECK_EQ_INT(bad, 0);
        for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(w);
        free(deq);
    }
}

/* ---- row and element-wise ops ---------------------------------------------------- */

TEST(rms_norm) {
    static const int ns[] = {100, 4096};
    for (int si = 0; si < 2; si++) {
        const int n = ns[si], R = 3;
        float *x = malloc((size_t)R * n * 4), *w = malloc((size_t)n * 4), *y = malloc((size_t)R * n * 4), *ref = malloc((size_t)n * 4);
        fill(x, (size_t)R * n, 3.0f);
        fill(w, (size_t)n, 1.0f);
        struct wgllm_gpu_buffer *bufs[3] = {upload(x, (size_t)R * n * 4), upload(w, (size_t)n * 4), upload(NULL, (size_t)R * n * 4)};
        const union wgllm_kparams kp = {.rms_norm = {.width = (uint32_t)n, .eps = 1e-5f}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_RMS_NORM, .type = WGLLM_TYPE_F32, .neox = false};
        CHECK(run_kernel(&key, &kp, 3, bufs, R, 1, 1) && read_f32(bufs[2], y, (size_t)R * n));
        /* the sum of squares is lossless on both sides: the same scale, the same bits,
         * up to the device's sqrt/division (exact on SwiftShader; Vulkan allows ulps) */
        double worst = 0;
        int differ = 0;
        for (int r = 0; r < R; r++) {
            wgllm_op_rms_norm(x + (size_t)r * n, w, ref, n, 1e-5f);
            for (int i = 0; i < n; i++) {
                worst = fmax(worst, fabs(y[(size_t)r * n + i] - ref[i]) / (fabs(ref[i]) + 1e-3));
                differ += y[(size_t)r * n + i] != ref[i];
            }
        }
        printf("  rms_norm n=%d: %d of %d differ from the CPU's bits, max rel %.1e\n", n, differ, R * n, worst);
        CHECK(worst < 1e-6);
        for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(x), free(w), free(y), free(ref);
    }
}

/* The kernel rotates by the host's cos/sin table (wgllm_op_rope_cache), so
 * it must reproduce wgllm_op_rope to the last bit (a device that fuses
 * x0*c - x1*s into an fma could differ by an ulp: allowed, reported). */
TEST(rope_modes) {
    const int n_head = 4, head_dim = 64, T = 3;
    const int pos[3] = {0, 7, 1000};
    static const int rots[] = {64, 32};
    for (int neox = 0; neox < 2; neox++)
        for (int ri = 0; ri < 2; ri++) {
            const int n_rot = rots[ri];
            const int row = n_head * head_dim;
            float x[3 * 256], ref[3 * 256], y[3 * 256], cs[3 * 64];
            fill(x, (size_t)T * row, 2.0f);
            memcpy(ref, x, sizeof x);
            const float base = 10000.0f, fscale = 1.0f;
            for (int t = 0; t < T; t++) {
                wgllm_op_rope_cache(cs + t * n_rot, pos[t], n_rot, base, fscale, NULL);
                for (int h = 0; h < n_head; h++) wgllm_op_rope(ref + t * row + h * head_dim, cs + t * n_rot, n_rot, neox);
            }
            struct wgllm_gpu_buffer *bufs[2] = {upload(x, sizeof x), upload(cs, sizeof(float) * (size_t)T * n_rot)};
            const union wgllm_kparams kp = {.rope = {.heads = n_head, .head_dim = head_dim, .n_rot = (uint32_t)n_rot,
                                                     .tok_stride = (uint32_t)row}};
            struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ROPE, .type = WGLLM_TYPE_F32, .neox = neox};
            CHECK(run_kernel(&key, &kp, 2, bufs, cdiv(n_head * n_rot / 2, wgllm_wgsl_default_tune()->wg_elem), T, 1) &&
                  read_f32(bufs[0], y, (size_t)T * row));
            double worst = 0;
            int differ = 0;
            for (int i = 0; i < T * row; i++) {
                worst = fmax(worst, fabs(y[i] - ref[i]) / (fabs(ref[i]) + 1e-3));
                differ += y[i] != ref[i];
            }
            if (differ) printf("  rope neox=%d n_rot=%d: %d values differ by up to %.1e (rel)\n", neox, n_rot, differ, worst);
            CHECK(worst < 1e-6);
            for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        }
}

/* to_f16 in WGSL (pack2x16float) must round as the CPU backend's
 * wgllm_fp32_to_fp16 does, to nearest even: exact halfway cases, values
 * next to them, f16 subnormals, the overflow edge; ROUND_ACT F16 applies it
 * to every element. Q8_0 rounding (round() is half to even) is checked
 * against the CPU's activation quantizer on values with exact .5 ties. */
TEST(round_act_like_cpu) {
    enum { N = 4096 };
    static float x[N], y[N];
    int n = 0;
    const float ulp = 1.0f / 1024; /* f16 ulp at 1.0 */
    for (int k = 0; k < 256 && n + 8 <= N; k++) {
        const float base = 1.0f + k * ulp;
        const float mid = base + ulp / 2; /* an exact tie: even neighbour wins */
        x[n++] = mid, x[n++] = -mid, x[n++] = nextafterf(mid, 0), x[n++] = nextafterf(mid, 10);
        x[n++] = ldexpf(mid, -20), x[n++] = ldexpf(mid, -15), x[n++] = ldexpf(mid, 10), x[n++] = ldexpf(-mid, 5);
    }
    x[n++] = 65504.0f, x[n++] = 65519.0f, x[n++] = 65520.0f, x[n++] = 1e-8f, x[n++] = ldexpf(1.0f, -25),
    x[n++] = ldexpf(3.0f, -26), x[n++] = 0.0f, x[n++] = -0.0f;
    srand(3);
    while (n < N) x[n++] = ((float)rand() / RAND_MAX - 0.5f) * 8.0f;
    struct wgllm_gpu_buffer *bufs[2] = {upload(x, sizeof x), upload(NULL, sizeof y)};
    const union wgllm_kparams kp = {.round_act = {.count = N}};
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ROUND_ACT, .type = WGLLM_TYPE_F16, .neox = false};
    CHECK(run_kernel(&key, &kp, 2, bufs, cdiv(N / 32, wgllm_wgsl_default_tune()->wg_elem), 1, 1) && read_f32(bufs[1], y, N));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const float want = wgllm_fp16_to_fp32(wgllm_fp32_to_fp16(x[i]));
        if (memcmp(&want, &y[i], 4)) {
            if (bad < 5) printf("  to_f16(%.9g): gpu %.9g, cpu %.9g\n", x[i], y[i], want);
            bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* Q8_0: blocks whose amax is 127 make id = 1, so x = k + 0.5 are ties */
    for (int i = 0; i < N; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((i * 7) % 250 - 125) + ((i & 1) ? 0.5f : 0.25f);
    wgllm_gpu_buffer_write(G, bufs[0], 0, x, sizeof x);
    struct wgllm_kernel_key kq = {.kernel = WGLLM_KERNEL_ROUND_ACT, .type = WGLLM_TYPE_Q8_0, .neox = false};
    CHECK(run_kernel(&kq, &kp, 2, bufs, cdiv(N / 32, wgllm_wgsl_default_tune()->wg_elem), 1, 1) && read_f32(bufs[1], y, N));
    void *qb = malloc(wgllm_row_size(WGLLM_TYPE_Q8_0, N));
    float *deq = malloc(sizeof(float) * N);
    wgllm_type_traits(WGLLM_TYPE_Q8_0)->from_float(x, qb, N);
    wgllm_type_traits(WGLLM_TYPE_Q8_0)->to_float(qb, deq, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += memcmp(&deq[i], &y[i], 4) != 0;
    CHECK_EQ_INT(bad, 0);
    free(qb), free(deq);
    for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
}

TEST(swiglu_add) {
    const int n = 1000;
    float g[1000], u[1000], y[1000], ref[1000];
    fill(g, n, 6.0f);
    fill(u, n, 2.0f);
    wgllm_op_swiglu(g, u, ref, n);
    struct wgllm_gpu_buffer *bufs[3] = {upload(g, sizeof g), upload(u, sizeof u), upload(NULL, sizeof y)};
    const union wgllm_kparams kp = {.swiglu = {.count = n}};
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_SWIGLU, .type = WGLLM_TYPE_F32, .neox = false};
    CHECK(run_kernel(&key, &kp, 3, bufs, cdiv(n, wgllm_wgsl_default_tune()->wg_elem), 1, 1) && read_f32(bufs[2], y, n));
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(y[i] - ref[i]) / (fabs(ref[i]) + 1e-6));
    CHECK(worst < 1e-5);
    /* add_rows, in place: two rows of 500, g[t] += u[t], then g[t] += u[0]
     * (a broadcast bias: y stride 0) */
    struct wgllm_gpu_buffer *ab[2] = {bufs[0], bufs[1]};
    struct wgllm_kernel_key kadd = {.kernel = WGLLM_KERNEL_ADD_ROWS, .type = WGLLM_TYPE_F32, .neox = false};
    union wgllm_kparams ka = {.add_rows = {.width = n / 2, .y_stride = n / 2}};
    CHECK(run_kernel(&kadd, &ka, 2, ab, cdiv(n / 2, wgllm_wgsl_default_tune()->wg_elem), 2, 1) && read_f32(bufs[0], y, n));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += y[i] != g[i] + u[i];
    CHECK_EQ_INT(bad, 0);
    ka.add_rows.y_stride = 0;
    float y2[1000];
    CHECK(run_kernel(&kadd, &ka, 2, ab, cdiv(n / 2, wgllm_wgsl_default_tune()->wg_elem), 2, 1) && read_f32(bufs[0], y2, n));
    bad = 0;
    for (int i = 0; i < n; i++) bad += y2[i] != y[i] + u[i % (n / 2)];
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
}

/* The encoder's kernels (kernels_enc.c) against the CPU encoder's ops:
 * LayerNorm in place with weight and bias (the sums lossless on both sides:
 * the same mean and scale up to the device's sqrt and division, so an ulp
 * or two at most; SwiftShader gives the CPU's bits), and GELU through the
 * CPU's own f16 table (bit for bit). */
TEST(encoder_layer_norm_and_gelu) {
    static const int ns[] = {100, 384};
    for (int si = 0; si < 2; si++) {
        const int n = ns[si], R = 3;
        float *x = malloc((size_t)R * n * 4), *w = malloc((size_t)2 * n * 4), *y = malloc((size_t)R * n * 4),
              *ref = malloc((size_t)n * 4);
        fill(x, (size_t)R * n, 3.0f);
        for (int i = 0; i < R * n; i++) x[i] += 0.5f; /* a mean to take away */
        fill(w, (size_t)2 * n, 1.0f);                /* weights, then biases */
        struct wgllm_gpu_buffer *bufs[2] = {upload(x, (size_t)R * n * 4), upload(w, (size_t)2 * n * 4)};
        const union wgllm_kparams kp = {.layer_norm = {.width = (uint32_t)n, .b_off = (uint32_t)n, .eps = 1e-12f}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_LAYER_NORM, .type = WGLLM_TYPE_F32, .neox = false};
        CHECK(run_kernel(&key, &kp, 2, bufs, R, 1, 1) && read_f32(bufs[0], y, (size_t)R * n));
        double worst = 0;
        for (int r = 0; r < R; r++) {
            wgllm_op_layer_norm(x + (size_t)r * n, w, w + n, ref, n, 1e-12f);
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(y[(size_t)r * n + i] - ref[i]) / (fabs(ref[i]) + 1e-3));
        }
        printf("  layer_norm n=%d: max rel %.1e\n", n, worst);
        CHECK(worst < 1e-6); /* the same bits on SwiftShader; Vulkan allows sqrt and division ulps */
        for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(x), free(w), free(y), free(ref);
    }
    enum { N = 1000 };
    float x[N], y[N], ref[N];
    fill(x, N, 12.0f); /* past +-10 too, where GELU is exact */
    memcpy(ref, x, sizeof x);
    wgllm_op_gelu(ref, N);
    wgllm_fp16 *tab = malloc(65536 * sizeof(wgllm_fp16));
    wgllm_op_gelu_f16_table(tab);
    struct wgllm_gpu_buffer *gb[2] = {upload(x, sizeof x), upload(tab, 65536 * sizeof(wgllm_fp16))};
    const union wgllm_kparams kg = {.gelu = {.count = N}};
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_GELU, .type = WGLLM_TYPE_F32, .neox = false};
    CHECK(run_kernel(&key, &kg, 2, gb, cdiv(N, wgllm_wgsl_default_tune()->wg_elem), 1, 1) && read_f32(gb[0], y, N));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != ref[i];
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, gb[i]);
    free(tab);
}

/* ---- batched attention (ATTN_BATCH, what every pass runs) ------------------ */

/* One case: tokens of up to two sequences, each token at a position after a
 * cached history, attending to its own sequence's rows up to its own. */
struct attn_case {
    int dk, dv, n_head, n_head_kv;
    int n_parts;
    struct {
        int seq, hist, tokens; /* tokens at positions hist .. hist + tokens - 1 */
    } part[2];
};

#define ATTN_CTX 160 /* cache rows per sequence */
#define F32_ROUNDOFF (1.0 / 16777216.0) /* f32 unit roundoff, 2^-24 */

/*
 * The reference: q rounded to f16 exactly as the kernel (and the CPU
 * backend's attend_head) rounds it, the f16 cache values, scores, softmax
 * and output in double, the probabilities NOT rounded. The kernel's result
 * then differs from it by (per output element, sums over the positions j):
 *   - the f16 rounding of each probability: at most half an f16 ulp,
 *     p_j * 2^-11, or 2^-25 absolute below f16's normal range;
 *   - the probabilities' f32 error before that rounding, relative d: the
 *     scores' f32 dot products (at most dk * 2^-24 * sum_i |q_i K_ji| *
 *     scale each), taken twice (exp(s - max) and the normalizer), plus
 *     WGSL's exp (3 + 2|x| ulp of 2^-23 by the spec, |x| at most the
 *     scores' spread) once per exp a probability goes through: its own,
 *     and the normalizer's rescales (one per position tile a thread walks,
 *     one per level of the workgroup's merge), plus a few ulps of products;
 *   - the f32 sum over the positions: (n + 2) * 2^-24 of sum_j p_j |V_j|.
 * So tol = sum_j (p_j (2^-11 (1 + d) + d) + 2^-25) |V_j| + 1.01 (n + 2) 2^-24 sum_j p_j |V_j|,
 * a bound on the error, not on its typical size: no result depends on
 * where a probability falls relative to an f16 rounding boundary (a wrong
 * position, head or stride moves an output by ~p |V|, far above it).
 */
static bool attn_batch_case(const struct attn_case *c, const struct wgllm_wgsl_tune *tune, const char *src,
                            double *worst_ratio) {
    const int dk = c->dk, dv = c->dv, H = c->n_head, HK = c->n_head_kv, gqa = H / HK;
    /* strides with a little padding, so that each one is used where it belongs */
    const int qa = H * dk + 4, od = H * dv + 2, ke = HK * dk + 2, vi = HK * dv + 6;
    int T = 0;
    for (int p = 0; p < c->n_parts; p++) T += c->part[p].tokens;
    const int rows = 2 * ATTN_CTX;
    float *q = malloc((size_t)T * qa * 4), *K = malloc((size_t)rows * ke * 4), *V = malloc((size_t)rows * vi * 4);
    float *o = malloc((size_t)T * od * 4);
    wgllm_fp16 *K16 = malloc((size_t)rows * ke * 2), *V16 = malloc((size_t)rows * vi * 2); /* ke, vi even: whole words */
    uint32_t *st = malloc((size_t)(2 * T + 9) * 4);
    double *s = malloc((size_t)rows * sizeof(double)), *a = malloc((size_t)rows * sizeof(double));
    fill(q, (size_t)T * qa, 3.0f); /* scores of a few units: a peaked softmax */
    fill(K, (size_t)rows * ke, 1.0f);
    fill(V, (size_t)rows * vi, 1.0f);
    wgllm_fp32_to_fp16_row(K, K16, (int64_t)rows * ke);
    wgllm_fp32_to_fp16_row(V, V16, (int64_t)rows * vi);
    wgllm_fp16_to_fp32_row(K16, K, (int64_t)rows * ke); /* the reference reads what the cache holds */
    wgllm_fp16_to_fp32_row(V16, V, (int64_t)rows * vi);
    /* the step buffer: ROW[t] at 5 + t, LEN[t] at 7 + T + t (offsets, as the backend's step buffer has) */
    const uint32_t row_at = 5, len_at = 7 + (uint32_t)T;
    int t = 0;
    for (int p = 0; p < c->n_parts; p++)
        for (int i = 0; i < c->part[p].tokens; i++, t++) {
            const int pos = c->part[p].hist + i;
            st[row_at + t] = (uint32_t)(c->part[p].seq * ATTN_CTX + pos);
            st[len_at + t] = (uint32_t)pos + 1;
        }
    const float sentinel = 12345.0f;
    for (size_t i = 0; i < (size_t)T * od; i++) o[i] = sentinel;
    struct wgllm_gpu_buffer *bufs[5] = {upload(q, (size_t)T * qa * 4), upload(K16, (size_t)rows * ke * 2),
                                        upload(V16, (size_t)rows * vi * 2), upload(o, (size_t)T * od * 4),
                                        upload(st, (size_t)(2 * T + 9) * 4)};
    const float scale = 1.0f / sqrtf((float)dk);
    const union wgllm_kparams kp = {.attn = {.dk = (uint32_t)dk, .dv = (uint32_t)dv, .q_stride = (uint32_t)qa,
                                             .o_stride = (uint32_t)od, .k_stride = (uint32_t)ke, .v_stride = (uint32_t)vi,
                                             .gqa = (uint32_t)gqa, .row_at = row_at, .len_at = len_at, .scale = scale,
                                             .q_scale = 1.0f}};
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ATTN_BATCH, .type = WGLLM_TYPE_F16, .neox = false};
    bool ok = (src ? run_wgsl(src, "attn_batch mutant", &kp, 5, bufs, (uint32_t)H, (uint32_t)T, 1)
                   : run_kernel_tuned(&key, tune, &kp, 5, bufs, (uint32_t)H, (uint32_t)T, 1)) &&
              read_f32(bufs[3], o, (size_t)T * od);
    int bad = 0, stray = 0;
    *worst_ratio = 0;
    for (t = 0; ok && t < T; t++) {
        const int n = (int)st[len_at + t], base = (int)st[row_at + t] + 1 - n;
        for (int h = 0; h < H; h++) {
            const int kvh = h / gqa;
            double mx = -1e300, maxa = 0;
            for (int j = 0; j < n; j++) {
                double d = 0, ad = 0;
                for (int i = 0; i < dk; i++) {
                    const double qi = wgllm_fp16_to_fp32(wgllm_fp32_to_fp16(q[(size_t)t * qa + h * dk + i]));
                    const double kv = K[(size_t)(base + j) * ke + kvh * dk + i];
                    d += qi * kv, ad += fabs(qi * kv);
                }
                s[j] = d * scale, a[j] = ad * scale;
                mx = fmax(mx, s[j]), maxa = fmax(maxa, a[j]);
            }
            double z = 0, spread = 0;
            for (int j = 0; j < n; j++) z += exp(s[j] - mx), spread = fmax(spread, mx - s[j]);
            int levels = 0;
            for (uint32_t w = tune->wg_attn; w > 1; w >>= 1) levels++;
            const int n_exp = 2 + (int)((uint32_t)n / tune->wg_attn + 1) + levels;
            const double d = 2 * (dk * F32_ROUNDOFF * maxa) + n_exp * (3 + 2 * spread) * 2 * F32_ROUNDOFF + 4 * F32_ROUNDOFF;
            for (int dd = 0; dd < dv; dd++) {
                double r = 0, tol = 0, pv = 0;
                for (int j = 0; j < n; j++) {
                    const double pj = exp(s[j] - mx) / z, vj = V[(size_t)(base + j) * vi + kvh * dv + dd];
                    r += pj * vj;
                    tol += (pj * ((1 + d) / 2048 + d) + 1.0 / 33554432) * fabs(vj);
                    pv += pj * fabs(vj);
                }
                tol += 1.01 * (n + 2) * F32_ROUNDOFF * pv;
                const double e = fabs(o[(size_t)t * od + h * dv + dd] - r);
                *worst_ratio = fmax(*worst_ratio, e / tol);
                bad += !(e <= tol);
            }
        }
        for (int i = H * dv; i < od; i++) stray += o[(size_t)t * od + i] != sentinel;
    }
    for (int i = 0; i < 5; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
    free(q), free(K), free(V), free(o), free(K16), free(V16), free(st), free(s), free(a);
    if ((bad || stray) && !src) fprintf(stderr, "  %d outputs over the bound, %d padding words written\n", bad, stray);
    return ok && !bad && !stray;
}

/* Head dims 32..256 (dk != dv too), GQA ratios 1..5, lengths crossing the
 * position tiles (wg_attn: 64 by default, 32 on software adapters), tokens
 * after a cached history and two sequences in one batch; under the default
 * tune and the software adapter's. */
TEST(attention_batch) {
    static const struct attn_case cases[] = {
        {64, 64, 4, 4, 1, {{0, 0, 70}}},                 /* GQA 1: lengths 1..70 from an empty cache */
        {128, 128, 8, 2, 2, {{0, 100, 3}, {1, 60, 9}}},  /* GQA 4: histories, 61..69 cross 64 */
        {96, 64, 6, 3, 2, {{1, 31, 3}, {0, 127, 2}}},    /* GQA 2, dk != dv: 32..34 and 128..129 */
        {80, 80, 5, 1, 1, {{1, 0, 33}}},                 /* GQA 5, dims not a multiple of the tile */
        {256, 256, 2, 1, 1, {{0, 5, 4}}},                /* the largest head dims the tunes allow */
        {32, 32, 4, 2, 2, {{0, 150, 10}, {1, 150, 10}}}, /* the full context of both sequences */
    };
    const struct wgllm_wgsl_tune *tunes[2] = {wgllm_wgsl_default_tune(), wgllm_wgsl_cpu_adapter_tune()};
    for (int ti = 0; ti < 2; ti++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            const struct attn_case *c = &cases[ci];
            double ratio;
            const bool ok = attn_batch_case(c, tunes[ti], NULL, &ratio);
            printf("  attn_batch %s dk=%d dv=%d heads %d/%d: worst error %.3f of the bound\n",
                   ti ? "cpu-adapter tune" : "default tune", c->dk, c->dv, c->n_head, c->n_head_kv, ratio);
            CHECK(ok);
        }
    /* the bound is tight enough to see a kernel that is slightly wrong */
    static const char *mut[][2] = {
        {"wlen = len;", "wlen = len - 1u;"},                                     /* one position short */
        {"let kvh = h / p.g;", "let kvh = h / (2u * p.g);"},                     /* the wrong kv head */
        {"let cnt = min(WGA, n - j0);", "let cnt = min(WGA - 1u, n - j0);"},      /* a tile's last position */
        {"for (var w = WGA / 2u; w > 0u;", "for (var w = WGA / 4u; w > 0u;"},     /* half the normalizer */
    };
    struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ATTN_BATCH, .type = WGLLM_TYPE_F16, .neox = false};
    for (size_t mi = 0; mi < sizeof mut / sizeof *mut; mi++) {
        char *src = wgllm_wgsl_generate(&key, NULL);
        char *at = src ? strstr(src, mut[mi][0]) : NULL;
        CHECK(at != NULL);
        if (!at) {
            free(src);
            continue;
        }
        const size_t lo = strlen(mut[mi][0]), ln = strlen(mut[mi][1]);
        char *m = malloc(strlen(src) + ln + 1);
        memcpy(m, src, (size_t)(at - src));
        strcpy(m + (at - src), mut[mi][1]);
        strcat(m, at + lo);
        double ratio;
        const bool ok = attn_batch_case(&cases[1], wgllm_wgsl_default_tune(), m, &ratio);
        printf("  mutant '%s': worst error %.1f of the bound (caught: %s)\n", mut[mi][1], ratio, ok ? "no" : "yes");
        CHECK(!ok);
        free(m);
        free(src);
    }
}

TEST(argmax) {
    static const int ns[] = {1, 300, 50000};
    for (int si = 0; si < 3; si++) {
        const int n = ns[si];
        float *x = malloc((size_t)n * 4);
        fill(x, (size_t)n, 5.0f);
        if (n > 100) { /* a tie: the first index wins */
            x[n / 3] = 7.0f;
            x[n / 2] = 7.0f;
        }
        uint32_t out[4] = {0};
        struct wgllm_gpu_buffer *bufs[2] = {upload(x, (size_t)n * 4), upload(NULL, 16)};
        const union wgllm_kparams kp = {.argmax = {.count = (uint32_t)n}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_ARGMAX, .type = WGLLM_TYPE_F32, .neox = false};
        struct wgllm_error err = {0};
        CHECK(run_kernel(&key, &kp, 2, bufs, 1, 1, 1));
        CHECK_EQ_INT(wgllm_gpu_buffer_read(G, bufs[1], 0, out, 4, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(out[0], wgllm_argmax(x, n));
        for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(x);
    }
}

/* Timings of the decode mat-vec on this adapter (informational). */
TEST(matvec_timing) {
    const int M = 1024, K = 1024, reps = 3;
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes; ti++) {
        const uint32_t type = wtypes[ti];
        float *deq = malloc((size_t)M * K * sizeof *deq);
        size_t wbytes;
        void *w = make_weights(type, M, K, deq, &wbytes);
        float *x = malloc((size_t)K * 4), y0;
        fill(x, K, 1.0f);
        struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(x, (size_t)K * 4), upload(NULL, (size_t)M * 4)};
        const union wgllm_kparams kp = {.matvec = {.rows = M, .k = K}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = type, .neox = false};
        uint32_t groups = cdiv(M, wgllm_wgsl_default_tune()->rows_matvec);
        CHECK(run_kernel(&key, &kp, 3, bufs, groups, 1, 1) && read_f32(bufs[2], &y0, 1)); /* warm-up, compile */
        double t0 = now_ms();
        CHECK(run_kernel(&key, &kp, 3, bufs, groups, 1, reps) && read_f32(bufs[2], &y0, 1));
        double ms = (now_ms() - t0) / reps;
        printf("  timing: matvec %-5s %dx%d: %.2f ms per dispatch (%.2f GB/s of weights)\n", wgllm_type_name(type), M, K, ms,
               wbytes / (ms * 1e6));
        for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(w), free(deq), free(x);
    }
}

/* ---- formats in 8-element units (K-quants, ...) ------------------------------- */

/* Beyond the four formats above (most read through their own w8() in
 * kernels.c): each runs MATVEC (every mat-vec variant), GET_ROWS and MATMUL
 * (registers and workgroup memory). Rows of K a multiple of 256. */
static const uint32_t w8_types[] = {WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q5_K, WGLLM_TYPE_Q6_K, WGLLM_TYPE_Q2_K,  WGLLM_TYPE_Q3_K,
                                    WGLLM_TYPE_IQ4_XS, WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_0, WGLLM_TYPE_Q5_1, WGLLM_TYPE_IQ4_NL,
                                    WGLLM_TYPE_BF16, WGLLM_TYPE_MXFP4, WGLLM_TYPE_TQ2_0, WGLLM_TYPE_TQ1_0,
                                    WGLLM_TYPE_IQ2_XXS, WGLLM_TYPE_IQ2_XS, WGLLM_TYPE_IQ2_S, WGLLM_TYPE_IQ3_XXS,
                                    WGLLM_TYPE_IQ3_S, WGLLM_TYPE_IQ1_S, WGLLM_TYPE_IQ1_M,
                                    WGLLM_TYPE_Q1_0, WGLLM_TYPE_NVFP4};

/* x rounded as the CPU rounds a mat-vec input for `type` (its vec_dot_type). */
static void round_like_cpu(uint32_t type, const float *x, float *xr, void *xq, int k) {
    const struct wgllm_type_traits *vt = wgllm_type_traits(wgllm_type_traits(type)->vec_dot_type);
    vt->from_float(x, xq, k);
    vt->to_float(xq, xr, k);
}

/* MATVEC against the CPU: on x already rounded to the weight's vec_dot_type
 * (what the forward pass's ROUND_ACT feeds it), the result must be the
 * dequantized W . x in double to f32 summation noise (2e-6 of sum |w x|),
 * and the CPU's own vec_dot on the quantized x to 1e-5 (its block sums
 * round d * sumi in f32). Every format with the default tune and one other
 * (in turn), Q4_K and Q5_K with every tune. */
TEST(matvec_w8_formats) {
    /* one super-block; 3 per row (Q6_K rows of 630 bytes: rows start at odd
     * half-words); rows not a multiple of rows_matvec, two tokens; K 1024 */
    static const int shapes[][3] = {{1, 256, 1}, {67, 768, 1}, {130, 512, 2}, {64, 1024, 1}};
    struct wgllm_wgsl_tune tunes[4];
    const int n_tunes = matvec_tunes(tunes);
    for (size_t ti = 0; ti < sizeof w8_types / sizeof *w8_types; ti++) {
        const uint32_t type = w8_types[ti];
        const struct wgllm_type_traits *tr = wgllm_type_traits(type);
        CHECK(wgllm_wgsl_supports(WGLLM_KERNEL_MATVEC, type) && wgllm_wgsl_supports(WGLLM_KERNEL_ROUND_ACT, tr->vec_dot_type));
        /* Q4_1/Q5_1 . Q8_1 on the CPU take the min term from Q8_1's block sum,
         * stored as f16 (of d * sum with d before its own f16 rounding): up to
         * 2^-11 of that term (observed 5e-5 of sum |w x|) */
        const double dot_tol = tr->vec_dot_type == WGLLM_TYPE_Q8_1 ? 5e-4 : 1e-5;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int M = shapes[si][0], K = shapes[si][1], T = shapes[si][2];
            float *deq = malloc((size_t)M * K * sizeof *deq);
            size_t wbytes;
            void *w = make_weights(type, M, K, deq, &wbytes);
            float *x = malloc((size_t)T * K * sizeof *x), *y = malloc((size_t)T * M * sizeof *y);
            void *xq = malloc((size_t)T * wgllm_row_size(tr->vec_dot_type, K));
            const size_t xqs = wgllm_row_size(tr->vec_dot_type, K);
            for (int t = 0; t < T; t++) {
                float *xt = x + (size_t)t * K;
                fill(xt, (size_t)K, 1.0f);
                round_like_cpu(type, xt, xt, (char *)xq + t * xqs, K);
            }
            struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(x, (size_t)T * K * 4), upload(NULL, (size_t)T * M * 4)};
            for (int tv = 0; tv < n_tunes; tv++) {
                /* (each tune is a pipeline to compile per type, ~0.5 s under ASan here) the
                 * default tune with every type, the others in turn: the reductions differ,
                 * not the format's block dot they share; the first two types with all */
                if (tv > 0 && ti >= 2 && tv != 1 + (int)(ti % (size_t)(n_tunes - 1))) continue;
                const struct wgllm_wgsl_tune *tu = &tunes[tv];
                const union wgllm_kparams kp = {.matvec = {.rows = (uint32_t)M, .k = (uint32_t)K}};
                struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_MATVEC, .type = type, .neox = false};
                for (int i = 0; i < T * M; i++) y[i] = -12345.0f;
                wgllm_gpu_buffer_write(G, bufs[2], 0, y, (size_t)T * M * 4);
                bool ok = run_kernel_tuned(&key, tu, &kp, 3, bufs, cdiv(M, tu->rows_matvec), T, 1) &&
                          read_f32(bufs[2], y, (size_t)T * M);
                CHECK(ok);
                double worst = 0, worst_dot = 0;
                for (int t = 0; ok && t < T; t++)
                    for (int r = 0; r < M; r++) {
                        double ref = 0, mag = 0;
                        for (int i = 0; i < K; i++) {
                            ref += (double)deq[(size_t)r * K + i] * x[(size_t)t * K + i];
                            mag += fabs((double)deq[(size_t)r * K + i] * x[(size_t)t * K + i]);
                        }
                        const double got = y[(size_t)t * M + r];
                        float cpu;
                        tr->vec_dot(K, &cpu, (const char *)w + (size_t)r * wgllm_row_size(type, K), (char *)xq + t * xqs);
                        const double e = fabs(got - ref) / (mag + 1e-6), ed = fabs(got - cpu) / (mag + 1e-6);
                        worst = e > worst || e != e ? (e != e ? 1e30 : e) : worst;
                        worst_dot = ed > worst_dot || ed != ed ? (ed != ed ? 1e30 : ed) : worst_dot;
                    }
                CHECK(worst <= 2e-6);
                CHECK(worst_dot <= dot_tol);
                if (worst > 2e-6 || worst_dot > dot_tol || si == 3)
                    printf("  matvec %-5s %4dx%-5d x%d (%s): rel err vs dequant %.2e, vs CPU vec_dot %.2e\n", tr->name, M, K, T,
                           tu->matvec_thread_rows ? "thread rows" : tu->matvec_subgroups ? "subgroups" : "workgroup reduction",
                           worst, worst_dot);
            }
            for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
            free(w), free(deq), free(x), free(y), free(xq);
        }
    }
}

/* GET_ROWS returns the CPU's dequantized values: exactly on SwiftShader; a
 * driver that fuses d * q - m into an fma may differ in the last bit of the
 * product, so the bound is 2^-22 of the row's largest value (a wrong nibble,
 * bit or scale is off by a quant step, ~1/64 of it or more). */
TEST(get_rows_w8_formats) {
    const int M = 9, K = 512;
    const uint32_t ids[4] = {3, 0, 8, 3};
    for (size_t ti = 0; ti < sizeof w8_types / sizeof *w8_types; ti++) {
        const uint32_t type = w8_types[ti];
        float *deq = malloc((size_t)M * K * sizeof *deq), *y = malloc(4 * (size_t)K * sizeof *y);
        size_t wbytes;
        void *w = make_weights(type, M, K, deq, &wbytes);
        struct wgllm_gpu_buffer *bufs[3] = {upload(w, wbytes), upload(ids, sizeof ids), upload(NULL, 4 * (size_t)K * 4)};
        const union wgllm_kparams kp = {.get_rows = {.width = K, .scale = 1.0f}};
        struct wgllm_kernel_key key = {.kernel = WGLLM_KERNEL_GET_ROWS, .type = type, .neox = false};
        CHECK(run_kernel(&key, &kp, 3, bufs, cdiv(K, wgllm_wgsl_default_tune()->wg_elem), 4, 1) && read_f32(bufs[2], y, 4 * (size_t)K));
        int bad = 0, inexact = 0;
        for (int t = 0; t < 4; t++) {
            const float *want = deq + (size_t)ids[t] * K;
            float big = 0;
            for (int e = 0; e < K; e++) big = fmaxf(big, fabsf(want[e]));
            for (int e = 0; e < K; e++) {
                inexact += memcmp(&y[t * K + e], &want[e], 4) != 0;
                bad += !(fabsf(y[t * K + e] - want[e]) <= 0x1p-22f * big);
            }
        }
        if (inexact) printf("  get_rows %s: %d of %d elements differ from the CPU's (%d beyond the bound)\n", wgllm_type_name(type),
                            inexact, 4 * K, bad);
        CHECK_EQ_INT(bad, 0);
        for (int i = 0; i < 3; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
        free(w), free(deq), free(y);
    }
}

/* MATMUL: the cpu-adapter tune (registers) and workgroup-memory tiles (small
 * ones, quick to compile on SwiftShader; a tile_k of 96 that does not divide
 * the 256-element blocks) on two cases, 17 tokens over 100 rows and 17 over
 * 37 rows of 8 blocks, for every format: its w8 unpacking in both loaders.
 * The tile edges (one token, three, 64 and 130; rows past a tile) are the
 * same code for every format of a block size, so the other cases of
 * mm_cases run for one format of each: Q4_K (256) and Q4_1 (32). */
TEST(matmul_w8_formats) {
    struct wgllm_wgsl_tune sh = *wgllm_wgsl_default_tune();
    sh.mm_tile_n = 16, sh.mm_tile_m = 8, sh.mm_tile_k = 96, sh.mm_micro_n = 2, sh.mm_micro_m = 4;
    char why[200];
    CHECK(wgllm_wgsl_tune_valid(&sh, 256, 16384, why, sizeof why));
    for (size_t ti = 0; ti < sizeof w8_types / sizeof *w8_types; ti++)
        for (size_t ci = 0; ci < sizeof mm_cases / sizeof *mm_cases; ci++)
            for (int u = 0; u < 2; u++) {
                const bool edges = w8_types[ti] == WGLLM_TYPE_Q4_K || w8_types[ti] == WGLLM_TYPE_Q4_1;
                if ((u == 0 || !edges) && ci != 2 && ci != 5) continue;
                struct mm_case c = mm_cases[ci];
                c.type = w8_types[ti];
                struct mm_result r = mm_run(&c, u ? wgllm_wgsl_cpu_adapter_tune() : &sh, NULL);
                CHECK(mm_ok(&r));
                if (!mm_ok(&r) || ci >= 4 || u == 0)
                    printf("  matmul %-5s %3dx%-4d x%-3d (%s): rel err vs dequant %.2e, vs matvec %.2e, stray %d\n",
                           wgllm_type_name(c.type), c.M, c.K, c.T, u ? "registers" : "workgroup tiles", r.err_ref, r.err_mv,
                           r.stray);
            }
}

/* ROUND_ACT Q8_K equals the CPU's activation quantizer (then dequantized)
 * bit for bit: random blocks, blocks whose largest magnitude is -127 or
 * +127 (scale -1 or 1: x = k + 0.5 are ties, half to even), a block whose
 * largest magnitude appears with both signs (the first one sets the sign),
 * a zero block. */
TEST(round_act_q8_k_q8_1_bf16_like_cpu) {
    enum { N = 4096 };
    static float x[N], y[N], want[N];
    srand(11);
    for (int i = 0; i < N; i++) x[i] = ((float)rand() / RAND_MAX - 0.5f) * 6.0f;
    for (int i = 256; i < 768; i++) x[i] = (float)((i * 7) % 250 - 125) + ((i & 1) ? 0.5f : 0.25f);
    x[256] = -127.0f, x[512 + 17] = 127.0f;
    x[768 + 3] = 9.0f, x[768 + 200] = -9.0f;
    for (int i = 1024; i < 1280; i++) x[i] = 0.0f;
    struct wgllm_gpu_buffer *bufs[2] = {upload(x, sizeof x), upload(NULL, sizeof y)};
    const union wgllm_kparams kp = {.round_act = {.count = N}};
    /* Q8_1 (Q4_1/Q5_1's vec_dot_type) and BF16 on the same values: random
     * 32-blocks test the scale 127/amax, ties and NaN-free bf16 rounding */
    static const uint32_t types[] = {WGLLM_TYPE_Q8_K, WGLLM_TYPE_Q8_1, WGLLM_TYPE_BF16};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        struct wgllm_kernel_key kq = {.kernel = WGLLM_KERNEL_ROUND_ACT, .type = types[ti], .neox = false};
        CHECK(run_kernel(&kq, &kp, 2, bufs, cdiv(N / 32, wgllm_wgsl_default_tune()->wg_elem), 1, 1) && read_f32(bufs[1], y, N));
        const struct wgllm_type_traits *tr = wgllm_type_traits(types[ti]);
        void *qb = malloc(wgllm_row_size(types[ti], N));
        for (int v = 0; v < 2; v++) { /* the runtime quantizer (SIMD where built) and the reference */
            if (v && types[ti] == WGLLM_TYPE_Q8_1) continue; /* its reference rounds half away from zero */
            (v ? tr->from_float_ref : tr->from_float)(x, qb, N);
            tr->to_float(qb, want, N);
            int bad = 0;
            for (int i = 0; i < N; i++) {
                if (!memcmp(&want[i], &y[i], 4)) continue;
                if (bad < 5) printf("  %s(%.9g) at %d: gpu %.9g, cpu %.9g\n", tr->name, x[i], i, y[i], want[i]);
                bad++;
            }
            CHECK_EQ_INT(bad, 0);
        }
        free(qb);
    }
    for (int i = 0; i < 2; i++) wgllm_gpu_buffer_destroy(G, bufs[i]);
}

int main(void) {
    wgllm_quant_init();
    int required;
    if (!(G = test_webgpu_open("test_webgpu", &required))) return required ? 1 : test_summary("test_webgpu");
    RUN(hal_round_trip);
    RUN(abi_info_and_limits);
    RUN(abi_subgroups_feature);
    RUN(pipeline_errors_and_cache);
    RUN(matvec_formats);
    RUN(matvec_offsets);
    RUN(matmul_formats);
    RUN(matmul_odd_tiles);
    RUN(matmul_mutants_fail);
    RUN(matmul_split_k);
    RUN(matmul_split_k_mutants_fail);
    RUN(get_rows_formats);
    RUN(rms_norm);
    RUN(rope_modes);
    RUN(round_act_like_cpu);
    RUN(swiglu_add);
    RUN(encoder_layer_norm_and_gelu);
    RUN(attention_batch);
    RUN(argmax);
    RUN(matvec_w8_formats);
    RUN(get_rows_w8_formats);
    RUN(matmul_w8_formats);
    RUN(round_act_q8_k_q8_1_bf16_like_cpu);
    RUN(matvec_timing);
    RUN(matmul_timing);
    wgllm_gpu_close(G);
    return test_summary("test_webgpu");
}
