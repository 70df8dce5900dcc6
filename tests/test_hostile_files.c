/*
 * test_hostile_files.c - the other files wgllm reads back: KV snapshot
 * files (wgllm_engine_snapshots_import: every count checked against the
 * model and the buffer before anything is allocated) and the WebGPU tune
 * cache (tune.c: a tune is a set of sizes the kernel generator loops over,
 * so products of them must not wrap). Regressions of what the fuzzers
 * (fuzz/fuzz_snapshot.c, fuzz/fuzz_tune.c) look for.
 */
#include "test.h"

#include "backend/webgpu/tune.h"
#include "model/model.h"
#include "model/synth.h"

/* ---- snapshot files ---------------------------------------------------------- */

struct bb {
    uint8_t p[1 << 16];
    size_t n;
};
static void put(struct bb *b, const void *s, size_t n) {
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put32(struct bb *b, uint32_t v) { put(b, &v, 4); }
static void put64(struct bb *b, uint64_t v) { put(b, &v, 8); }

static void snap_header(struct bb *b, uint64_t fp, uint32_t count) {
    b->n = 0;
    put(b, "WGLLMKV", 8);
    put32(b, 1);
    put32(b, 1); /* CPU layout */
    put64(b, fp);
    put32(b, count);
    put32(b, 0);
}

/* One snapshot claiming n tokens (ids from `tok`; at most 64 written) and
 * `bytes` of state, holding `have` bytes of it. */
static void snap_add(struct bb *b, uint32_t n, int32_t tok, uint64_t bytes, size_t have) {
    put32(b, n);
    put32(b, 0);
    put64(b, bytes);
    for (uint32_t i = 0; i < n && i < 64; i++) put32(b, (uint32_t)(tok + (int32_t)i)); /* the file may lie about n */
    memset(b->p + b->n, 0x11, have);
    b->n += have;
}

static void expect_import(struct wgllm_engine *e, const struct bb *b, enum wgllm_status want, const char *needle,
                          int line) {
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_engine_snapshots_import(e, b->p, b->n, &err);
    if (st != want || (needle && !strstr(err.message, needle))) {
        fprintf(stderr, "  line %d: status %d (want %d), message \"%s\" (want \"%s\")\n", line, (int)st, (int)want,
                err.message, needle ? needle : "");
        test_checks_failed_in_current++;
    }
}
#define EXPECT_IMPORT(e, b, st, needle) expect_import(e, b, st, needle, __LINE__)

TEST(hostile_snapshot_files) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.n_layer = 1;
    struct wgllm_model *m = test_synth_model(&sp);
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 1;
    ep.n_ctx = 32;
    ep.n_threads = 1;
    ep.no_thread = true;
    ep.snapshot_bytes = (size_t)1 << 20;
    ep.min_snapshot_tokens = 1;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_engine_init(m, &ep, &e, &err), WGLLM_STATUS_OK);
    if (!e) {
        wgllm_model_free(m);
        return;
    }
    const uint64_t fp = wgllm_model_fingerprint(m);
    /* per token: 1 layer x 4 KV heads x (32 + 32) dims x 2 bytes */
    const uint64_t per = (uint64_t)m->hp.n_layer * m->hp.n_head_kv * (m->hp.head_dim_k + m->hp.head_dim_v) * 2;
    static struct bb b;
    snap_header(&b, fp, 1);
    snap_add(&b, 3, 1, 3 * per, 3 * per);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_OK, NULL);
    b.n -= 1;
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "snapshot file truncated: snapshot 1");
    snap_header(&b, fp ^ 1, 0);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "belong to another model");
    snap_header(&b, fp, 0xffffffffu); /* four billion snapshots in 32 bytes */
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "snapshot 1 of 4294967295 has no header");
    snap_header(&b, fp, 1);
    snap_add(&b, 33, 1, 33 * per, 0); /* more tokens than the context */
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "has 33 tokens (the context holds 32)");
    snap_header(&b, fp, 1);
    snap_add(&b, 0xffffffffu, 1, 0, 0);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "tokens (the context holds 32)");
    snap_header(&b, fp, 1);
    snap_add(&b, 2, 1, UINT64_MAX, 0); /* a state size that would wrap */
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "bytes of KV state for 2 tokens");
    snap_header(&b, fp, 1);
    snap_add(&b, 2, m->hp.n_vocab - 1, 2 * per, 2 * per);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "outside the vocabulary");
    snap_header(&b, fp, 1);
    snap_add(&b, 2, -5, 2 * per, 2 * per);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "token -5 at index 0 is outside the vocabulary");
    snap_header(&b, fp, 1);
    snap_add(&b, 2, 1, 2 * per, 2 * per + 3);
    EXPECT_IMPORT(e, &b, WGLLM_STATUS_INVALID_ARGUMENT, "3 bytes after its 1 snapshots");
    /* what was accepted comes back out and goes in again */
    void *out = NULL;
    size_t out_size = 0;
    CHECK_EQ_INT(wgllm_engine_snapshots_export(e, &out, &out_size, &err), WGLLM_STATUS_OK);
    CHECK(out_size == 32 + 16 + 3 * 4 + 3 * per);
    CHECK_EQ_INT(wgllm_engine_snapshots_import(e, out, out_size, &err), WGLLM_STATUS_OK);
    free(out);
    wgllm_engine_free(e);
    wgllm_model_free(m);
}

/* ---- the tune cache ------------------------------------------------------------ */

static struct wgllm_gpu_info adapter(void) {
    struct wgllm_gpu_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "Test GPU");
    snprintf(info.description, sizeof info.description, "driver");
    info.backend = "vulkan";
    info.vendor_id = 1;
    info.device_id = 2;
    info.max_invocations = 1024;
    info.max_workgroup_storage = 32768;
    return info;
}

static enum wgllm_status load_text(const char *text, struct wgllm_wgsl_tune *t, struct wgllm_error *err) {
    const char *path = test_tmp_path(".txt");
    FILE *f = fopen(path, "w");
    if (!f) return WGLLM_STATUS_IO;
    fputs(text, f);
    fclose(f);
    const struct wgllm_gpu_info info = adapter();
    enum wgllm_status st = wgllm_tune_cache_load(path, &info, t, err);
    remove(path);
    return st;
}

#define SECTION "version=1\n[adapter]\nvendor_id=1\ndevice_id=2\nname=Test GPU\nbackend=vulkan\ndriver=driver\n"

TEST(hostile_tune_cache) {
    struct wgllm_wgsl_tune t;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(load_text(SECTION "wg_matvec=128\n", &t, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(t.wg_matvec, 128);
    /* 65536 x 65536 is 2^32: a 32-bit product wraps to 0 registers, and the
     * generator would then unroll four billion of them */
    CHECK_EQ_INT(load_text(SECTION "mm_micro_n=65536\nmm_micro_m=65536\nmm_tile_n=65536\nmm_tile_m=65536\nmm_direct=1\n", &t,
                           &err),
                 WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "micro tile 65536x65536 is over 64 registers") != NULL);
    CHECK_EQ_INT(load_text(SECTION "wg_matvec=99999999999999999999\n", &t, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "bad entry wg_matvec") != NULL);
    CHECK_EQ_INT(load_text(SECTION "attn_max_dims=65536\n", &t, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK_EQ_INT(load_text("version=1\n[adapter]\n\x01\x02", &t, &err), WGLLM_STATUS_UNSUPPORTED);
}

int main(void) {
    wgllm_base_init();
    RUN(hostile_snapshot_files);
    RUN(hostile_tune_cache);
    return test_summary("test_hostile_files");
}
