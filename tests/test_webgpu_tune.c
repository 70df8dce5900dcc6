/*
 * test_webgpu_tune.c - the WebGPU autotuner and its per-adapter cache
 * (backend/webgpu/tune.h): the cache round trip with several adapters,
 * corrupt caches refused with a reason (and ignored with a warning by
 * wgllm_wgsl_tune_for, never a crash), and on a real device (Dawn +
 * SwiftShader here) a short sweep on the `tiny` model's shapes that writes
 * the cache, reads back the same values, and a forward pass with a cached
 * non-default tune that still agrees with the CPU backend.
 *
 * The GPU part prints SKIP without a WebGPU library or adapter (a failure
 * when WGLLM_REQUIRE_WEBGPU is set); the cache tests always run.
 */
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "backend/webgpu/tune.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test.h"
#include "wgllm.h"

static struct wgllm_gpu_info fake_info(const char *name, uint32_t device_id) {
    struct wgllm_gpu_info in;
    memset(&in, 0, sizeof in);
    snprintf(in.name, sizeof in.name, "%s", name);
    snprintf(in.description, sizeof in.description, "driver 1.2.3");
    in.backend = "vulkan";
    in.type = "discrete GPU";
    in.vendor_id = 0x10de;
    in.device_id = device_id;
    in.max_invocations = 256;
    in.max_workgroup_storage = 16384;
    return in;
}

static bool write_text(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static struct wgllm_wgsl_tune other_tune(void) {
    struct wgllm_wgsl_tune t = *wgllm_wgsl_default_tune();
    t.wg_matvec = 128, t.rows_matvec = 2, t.wg_elem = 256, t.mm_tile_n = 32, t.mm_tile_m = 32, t.mm_micro_n = 2,
    t.mm_micro_m = 2;
    return t;
}

/* The built-in tunes fit every WebGPU device: the spec's guaranteed
 * minimums are 256 invocations and 16 KiB of workgroup memory. */
TEST(defaults_fit_the_minimum_limits) {
    char why[200] = "";
    CHECK(wgllm_wgsl_tune_valid(wgllm_wgsl_default_tune(), 256, 16384, why, sizeof why));
    CHECK(wgllm_wgsl_tune_valid(wgllm_wgsl_cpu_adapter_tune(), 256, 16384, why, sizeof why));
    if (why[0]) printf("  %s\n", why);
    struct wgllm_wgsl_tune t = *wgllm_wgsl_default_tune();
    t.mm_tile_k = 64; /* (64 + 64) * 64 floats: 32 KiB */
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why));
    CHECK(strstr(why, "workgroup memory") != NULL);
    CHECK(wgllm_wgsl_tune_valid(&t, 256, 32768, why, sizeof why));
    t.mm_direct = true; /* no workgroup memory at all */
    CHECK(wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why));
    t = *wgllm_wgsl_default_tune();
    t.matvec_subgroups = t.matvec_thread_rows = true;
    CHECK(!wgllm_wgsl_tune_valid(&t, 256, 16384, why, sizeof why));
}

TEST(cache_round_trip_per_adapter) {
    const char *path = test_tmp_path("/sub/dir/tune.txt"); /* folders are created */
    struct wgllm_gpu_info a = fake_info("GPU A", 1), b = fake_info("GPU B", 2);
    struct wgllm_wgsl_tune ta = other_tune(), tb = *wgllm_wgsl_default_tune(), back;
    tb.matvec_thread_rows = true, tb.rows_matvec = 32, tb.wg_row = 256;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &back, &err), WGLLM_STATUS_IO); /* no file yet */
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &a, &ta, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &b, &tb, &err), WGLLM_STATUS_OK);
    memset(&back, 0, sizeof back);
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &back, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_tune_equal(&back, &ta));
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &b, &back, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_tune_equal(&back, &tb));
    /* replacing A keeps B */
    ta.wg_elem = 32;
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &a, &ta, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &back, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(back.wg_elem, 32);
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &b, &back, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_tune_equal(&back, &tb));
    size_t len;
    char *text = test_read_file(path, &len);
    CHECK(text && strstr(text, "version=1\n") && strstr(text, "name=GPU B\n"));
    int sections = 0;
    for (const char *s = text; s && (s = strstr(s, "[adapter]")); s++) sections++;
    CHECK_EQ_INT(sections, 2);
    free(text);
    /* another driver version or device id of the same name is another adapter */
    struct wgllm_gpu_info a2 = a;
    snprintf(a2.description, sizeof a2.description, "driver 1.2.4");
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a2, &back, &err), WGLLM_STATUS_UNSUPPORTED);
    a2 = a, a2.device_id = 3;
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a2, &back, &err), WGLLM_STATUS_UNSUPPORTED);
    /* a tune the kernels cannot take is not stored */
    struct wgllm_wgsl_tune bad = ta;
    bad.mm_tile_k = 48;
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &a, &bad, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "mm_tile_k") != NULL);
    remove(path);
}

/* Every corrupt file is refused with a reason and leaves *t alone; the
 * backend's wgllm_wgsl_tune_for falls back to the defaults (warning). */
TEST(corrupt_cache_ignored) {
    const char *path = test_tmp_path(".tune");
    struct wgllm_gpu_info a = fake_info("GPU A", 1);
    const char *head = "version=1\n[adapter]\nvendor_id=4318\ndevice_id=1\nname=GPU A\nbackend=vulkan\ndriver=driver 1.2.3\n";
    static const struct {
        const char *body;
        const char *reason;
    } cases[] = {
        {"\x01\x02garbage without lines", "no '='"},
        {"version=2\n[adapter]\n", "version 2"},
        {"[adapter]\nname=x\n", "before the version"},
        {"# only a comment\n", "no version"},
        {NULL, "wg_matvec=abc"},
        {NULL, "mm_tile_k=48"},    /* parses, but the kernels cannot take it */
        {NULL, "wg_matvec=-64"},
        {NULL, "mm_tile_n=99999999999999999999"},
        {NULL, "surprise=1"},      /* a key this version does not know */
        {NULL, "no equals sign"},
        {NULL, "wg_matvec=48"},    /* not a power of two */
        {NULL, "mm_tile_n=512\nmm_micro_n=1\nmm_micro_m=1"}, /* threads over the limit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        if (cases[i].body) snprintf(text, sizeof text, "%s", cases[i].body);
        else snprintf(text, sizeof text, "%s%s\n", head, cases[i].reason);
        CHECK(write_text(path, text, strlen(text)));
        struct wgllm_wgsl_tune t = other_tune(), before = t;
        struct wgllm_error err = {0};
        enum wgllm_status st = wgllm_tune_cache_load(path, &a, &t, &err);
        CHECK_EQ_INT(st, WGLLM_STATUS_BAD_FORMAT);
        CHECK(wgllm_tune_equal(&t, &before));
        CHECK(strstr(err.message, path) != NULL);
        if (st != WGLLM_STATUS_BAD_FORMAT) printf("  case %zu accepted: %s\n", i, text);
    }
    /* a NUL byte inside, and an empty file */
    CHECK(write_text(path, "version=1\n\0[adapter]\n", 21));
    struct wgllm_wgsl_tune t;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &t, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(write_text(path, "", 0));
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &t, &err), WGLLM_STATUS_BAD_FORMAT);
    /* the backend's choice: the defaults, not a crash */
    setenv("WGLLM_TUNE_CACHE", path, 1);
    CHECK(wgllm_wgsl_tune_for(&a) == wgllm_wgsl_default_tune());
    /* storing over a corrupt file rewrites it */
    struct wgllm_wgsl_tune ot = other_tune();
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &a, &ot, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_tune_cache_load(path, &a, &t, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_tune_equal(&t, &ot));
    unsetenv("WGLLM_TUNE_CACHE");
    remove(path);
}

TEST(tune_for_reads_the_cache) {
    const char *path = test_tmp_path(".tune");
    struct wgllm_gpu_info a = fake_info("GPU A", 1), cpu = fake_info("Software", 9);
    cpu.is_cpu = true;
    struct wgllm_wgsl_tune ot = other_tune();
    struct wgllm_error err = {0};
    setenv("WGLLM_TUNE_CACHE", path, 1);
    remove(path);
    CHECK(wgllm_wgsl_tune_for(&a) == wgllm_wgsl_default_tune());
    CHECK(wgllm_wgsl_tune_for(&cpu) == wgllm_wgsl_cpu_adapter_tune());
    CHECK_EQ_INT(wgllm_tune_cache_store(path, &a, &ot, &err), WGLLM_STATUS_OK);
    const struct wgllm_wgsl_tune *t1 = wgllm_wgsl_tune_for(&a), *t2 = wgllm_wgsl_tune_for(&a);
    CHECK(t1 && wgllm_tune_equal(t1, &ot));
    CHECK(t1 == t2);
    for (int i = 0; i < 20; i++) CHECK(wgllm_wgsl_tune_for(&a) == t1); /* remembered once, not per call */
    CHECK(wgllm_wgsl_tune_for(&cpu) == wgllm_wgsl_cpu_adapter_tune()); /* no entry for it */
    setenv("WGLLM_WEBGPU_GPU_TUNE", "1", 1); /* forces the built-in GPU defaults */
    CHECK(wgllm_wgsl_tune_for(&a) == wgllm_wgsl_default_tune());
    CHECK(wgllm_wgsl_tune_for(&cpu) == wgllm_wgsl_default_tune());
    unsetenv("WGLLM_WEBGPU_GPU_TUNE");
    setenv("WGLLM_TUNE_CACHE", "off", 1);
    CHECK(wgllm_wgsl_tune_for(&a) == wgllm_wgsl_default_tune());
    char buf[1024];
    CHECK(wgllm_tune_cache_path(buf, sizeof buf) == NULL);
    unsetenv("WGLLM_TUNE_CACHE");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    CHECK(wgllm_tune_cache_path(buf, sizeof buf) && !strcmp(buf, "/x/cache/wgllm/webgpu-tune.txt"));
    unsetenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (home && home[0]) {
        char want[1024];
        snprintf(want, sizeof want, "%s/.cache/wgllm/webgpu-tune.txt", home);
        CHECK(wgllm_tune_cache_path(buf, sizeof buf) && !strcmp(buf, want));
    }
    remove(path);
}

/* ---- on the device ---------------------------------------------------------------- */

static struct wgllm_gpu *G;

static struct wgllm_model *tiny_model(uint32_t type) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny";
    sp.type = type;
    sp.seed = 3;
    return test_synth_model(&sp);
}

static int n_progress, n_rejected;
static int n_prologue;
static void count_progress(void *ud, const char *line) {
    (void)ud;
    n_progress++;
    n_rejected += strstr(line, "rejected") != NULL;
    n_prologue += strstr(line, "mat-vec prologue 1/1 (") != NULL; /* the other setting, timed */
    if (getenv("WGLLM_TEST_VERBOSE")) printf("    %s\n", line);
}

/* Breaks every candidate mat-mat kernel (its K loop skips a chunk or every
 * other block: less work, so faster) and leaves the reference kernels
 * alone. */
static int n_mutated;
static char *break_candidates(void *ud, bool is_default, char *src) {
    (void)ud;
    const char *from = "k0 += TK)", *to = "k0 += TK + 32u)";
    char *at = strstr(src, from);
    if (!at) {
        from = "blk < nblk; blk++", to = "blk < nblk; blk += 2u"; /* mm_direct */
        at = strstr(src, from);
    }
    if (is_default || !at) return src;
    char *m = malloc(strlen(src) + strlen(to) + 1);
    memcpy(m, src, (size_t)(at - src));
    strcpy(m + (at - src), to);
    strcat(m, at + strlen(from));
    free(src);
    n_mutated++;
    return m;
}

TEST(fast_wrong_candidate_never_wins) {
    struct wgllm_tune_shape sh = {WGLLM_TYPE_Q8_0, 96, 512, 4};
    struct wgllm_tune_params p = wgllm_tune_default_params();
    p.quick = true;
    p.tokens = 8, p.reps = 1, p.max_candidates = 2, p.budget_s = 120;
    p.groups = 2; /* mat-mat only */
    p.progress = count_progress;
    p.wgsl_hook = break_candidates;
    n_progress = n_rejected = 0;
    struct wgllm_wgsl_tune best;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_tune_run(G, &sh, 1, &p, &best, &err), WGLLM_STATUS_OK);
    CHECK(n_mutated >= 1);
    CHECK_EQ_INT(n_rejected, n_mutated);
    const struct wgllm_wgsl_tune *d = wgllm_wgsl_tune_defaults_for(wgllm_gpu_get_info(G));
    CHECK(wgllm_tune_equal(&best, d));
}

TEST(sweep_writes_the_cache) {
    struct wgllm_model *m = tiny_model(WGLLM_TYPE_Q4_0);
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_tune_shape sh[16];
    const int n = wgllm_tune_model_shapes(m, sh, 16);
    /* tiny: wq/wo 256x256, wk/wv 128x256, gate/up 512x256, down 256x512 (+ output vocab x 256) */
    CHECK(n >= 5);
    int total = 0;
    for (int i = 0; i < n; i++) total += sh[i].count;
    CHECK_EQ_INT(total, 2 * 7 + 1);
    wgllm_model_free(m);
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(G);
    struct wgllm_tune_params p = wgllm_tune_default_params();
    p.quick = true;
    p.tokens = 4, p.reps = 1, p.row_cap = 256, p.max_candidates = 1, p.budget_s = 120;
    p.progress = count_progress;
    struct wgllm_wgsl_tune best;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_tune_run(G, sh, n, &p, &best, &err), WGLLM_STATUS_OK);
    if (err.message[0]) fprintf(stderr, "  %s\n", err.message);
    /* the 4 defaults + 1 candidate per group, the shapes, the end */
    CHECK(n_progress >= n + 4 * 2 + 1);
    CHECK_EQ_INT(n_prologue, 1); /* the prologue's rounding against ROUND_ACT's, each checked and timed */
    CHECK_EQ_INT(n_rejected, 0); /* every candidate tried computes what the defaults compute */
    char why[200];
    CHECK(wgllm_wgsl_tune_valid(&best, info->max_invocations, info->max_workgroup_storage, why, sizeof why));
    const char *path = test_tmp_path(".tune");
    CHECK_EQ_INT(wgllm_tune_cache_store(path, info, &best, &err), WGLLM_STATUS_OK);
    setenv("WGLLM_TUNE_CACHE", path, 1);
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_tune_for(info);
    CHECK(wgllm_tune_equal(t, &best));
    struct wgllm_wgsl_tune back;
    CHECK_EQ_INT(wgllm_tune_cache_load(path, info, &back, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_tune_equal(&back, &best));
    unsetenv("WGLLM_TUNE_CACHE");
    remove(path);
    /* nothing supported: a clear error */
    struct wgllm_tune_shape kq = {WGLLM_TYPE_I32, 256, 256, 1}; /* not a weight format */
    CHECK_EQ_INT(wgllm_tune_run(G, &kq, 1, &p, &best, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "no matrix shape") != NULL);
}

/* A forward pass with a cached tune agrees with the CPU backend: a prompt
 * of n_prompt tokens in one pass (the mat-mats, MATMUL, from 8 tokens),
 * then `steps` single tokens (the mat-vecs). */
static void tuned_forward(const struct wgllm_wgsl_tune *tp, int n_prompt, int steps) {
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(G);
    const struct wgllm_wgsl_tune t = *tp;
    const char *path = test_tmp_path(".tune");
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_tune_cache_store(path, info, &t, &err), WGLLM_STATUS_OK);
    setenv("WGLLM_TUNE_CACHE", path, 1);
    CHECK(wgllm_tune_equal(wgllm_wgsl_tune_for(info), &t));
    struct wgllm_model *m = tiny_model(WGLLM_TYPE_Q8_0);
    CHECK(m != NULL);
    struct wgllm_context *c[2] = {NULL, NULL};
    for (int b = 0; m && b < 2; b++) {
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_ctx = 16;
        cp.backend = b ? WGLLM_BACKEND_WEBGPU : WGLLM_BACKEND_CPU;
        if (wgllm_context_init(m, &cp, &c[b], &err)) fprintf(stderr, "  context: %s\n", err.message);
    }
    CHECK(c[0] && c[1]);
    if (c[0] && c[1]) {
        const int V = wgllm_model_n_vocab(m);
        int32_t tok[3] = {1, 450, 4996 % V}, prompt[12];
        for (int i = 0; i < n_prompt && i < 12; i++) prompt[i] = (i * 977 + 3) % V;
        for (int s = n_prompt ? -1 : 0; s < steps && s < 3; s++) {
            const int32_t *in = s < 0 ? prompt : &tok[s];
            const int n = s < 0 ? n_prompt : 1;
            CHECK_EQ_INT(wgllm_decode(c[0], in, n, false, &err), WGLLM_STATUS_OK);
            CHECK_EQ_INT(wgllm_decode(c[1], in, n, false, &err), WGLLM_STATUS_OK);
            const float *a = wgllm_get_logits(c[0]), *g = wgllm_get_logits(c[1]);
            CHECK(a && g);
            if (!a || !g) break;
            double md = 0, ss = 0;
            for (int i = 0; i < V; i++) {
                const double d = fabs((double)a[i] - g[i]);
                md = d > md || d != d ? d : md;
                ss += (double)a[i] * a[i];
            }
            const double rel = md / sqrt(ss / V + 1e-30);
            printf("  tuned forward%s%s %s %d: rel |diff| %.2e, top-1 cpu %d gpu %d\n", t.matvec_subgroups ? " (subgroups)" : "",
                   t.mm_split_k ? " (split-K mat-mat)" : "", s < 0 ? "prompt of" : "step", s < 0 ? n : s, rel,
                   wgllm_argmax(a, V), wgllm_argmax(g, V));
            /* as test_webgpu_model's Q8_0 bound: activation-grid flips aside, rounding noise */
            CHECK(rel < 1e-1);
            CHECK_EQ_INT(wgllm_argmax(a, V), wgllm_argmax(g, V));
        }
    }
    for (int b = 0; b < 2; b++) wgllm_context_free(c[b]);
    wgllm_model_free(m);
    unsetenv("WGLLM_TUNE_CACHE");
    remove(path);
}

/* A tune that differs from this adapter's defaults in every kernel family
 * the forward pass uses; then the subgroupAdd mat-vec where the adapter has
 * subgroups (its `enable subgroups;` needs the device feature). */
TEST(tuned_forward_agrees_with_cpu) {
    const struct wgllm_gpu_info *info = wgllm_gpu_get_info(G);
    struct wgllm_wgsl_tune t = *wgllm_wgsl_tune_defaults_for(info);
    t.rows_matvec = t.matvec_thread_rows ? 32 : 2; /* cheap on software adapters too */
    t.wg_matvec = t.matvec_thread_rows ? 1 : 128;
    t.wg_elem = 128, t.wg_row = 32, t.wg_attn = 64, t.attn_max_dims = 2;
    tuned_forward(&t, 0, 3);
    /* the mat-vecs' inputs rounded and normalized by dispatches of their own (10 a layer, not 6) */
    t.matvec_split_round = true;
    tuned_forward(&t, 0, 2);
    t.matvec_split_round = false;
    if (!info->subgroups) return;
    t.matvec_thread_rows = false, t.matvec_subgroups = true, t.wg_matvec = 64, t.rows_matvec = 4;
    tuned_forward(&t, 0, 2);
    /* the mat-mats split along K, subgroup reductions (mm_split_k): a 12-token prompt */
    t.mm_direct = false, t.mm_split_k = 64, t.mm_tile_n = 4, t.mm_tile_m = 8;
    tuned_forward(&t, 12, 1);
}

int main(void) {
    wgllm_quant_init();
    unsetenv("WGLLM_WEBGPU_GPU_TUNE");
    RUN(defaults_fit_the_minimum_limits);
    RUN(cache_round_trip_per_adapter);
    RUN(corrupt_cache_ignored);
    RUN(tune_for_reads_the_cache);
    int required;
    if (!(G = test_webgpu_open("test_webgpu_tune (device part)", &required))) return required ? 1 : test_summary("test_webgpu_tune");
    RUN(sweep_writes_the_cache);
    RUN(fast_wrong_candidate_never_wins);
    RUN(tuned_forward_agrees_with_cpu);
    wgllm_gpu_close(G);
    return test_summary("test_webgpu_tune");
}
