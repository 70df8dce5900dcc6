/*
 * fuzz_snapshot.c - libFuzzer target for the KV snapshot file import
 * (wgllm_engine_snapshots_import, engine.c): every count and length in the
 * file is checked against the model and the buffer before anything is
 * allocated or copied. The model is the synthetic "tiny" (one layer),
 * written once at the first input (its vocabulary from $WGLLM_SHARED), and
 * so is the engine (without a thread): after each input its snapshot store
 * is emptied (wgllm_snapshot_clear, as wgllm_engine_free does), which is all
 * that import and export change, and it must then hold no snapshot and no
 * bytes. (Making the engine anew for each input spent 80% of the time in
 * the engine's chat-template detection and KV allocation, which are not
 * what this target tests.)
 *
 * A file whose fingerprint field is 0 gets this model's fingerprint put
 * there first, so that the seeds (fuzz/corpus/fuzz_snapshot/, which carry
 * 0) reach the per-snapshot checks. A file the engine accepts must export
 * again, and the export must import.
 */
#include "model/model.h"
#include "model/synth.h"
#include "runtime/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct wgllm_model *model;
static struct wgllm_engine *e;

static void load_model(void) {
    setenv("WGLLM_LOG", "error", 0);
    char path[64];
    snprintf(path, sizeof path, "/tmp/wgllm-fuzz-snapshot-%ld.gguf", (long)getpid());
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.n_layer = 1;
    struct wgllm_error err = {0};
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 1;
    if (wgllm_synth_write(&sp, path, &err) || wgllm_model_load(path, &mp, &model, &err)) {
        fprintf(stderr, "fuzz_snapshot: %s (set WGLLM_SHARED)\n", err.message);
        abort();
    }
    remove(path);
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = 1;
    ep.n_ctx = 32;
    ep.n_batch = 16;
    ep.n_threads = 1;
    ep.no_thread = true;
    ep.snapshot_bytes = (size_t)1 << 20;
    ep.min_snapshot_tokens = 1;
    if (wgllm_engine_init(model, &ep, &e, NULL) != WGLLM_STATUS_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model) load_model();
    uint8_t *buf = malloc(size ? size : 1);
    if (size) memcpy(buf, data, size);
    static const uint8_t zero[8];
    if (size >= 24 && !memcmp(buf + 16, zero, 8)) {
        const uint64_t fp = wgllm_model_fingerprint(model);
        memcpy(buf + 16, &fp, 8);
    }
    struct wgllm_error err;
    if (wgllm_engine_snapshots_import(e, buf, size, &err) == WGLLM_STATUS_OK) {
        void *out = NULL;
        size_t out_size = 0;
        if (wgllm_engine_snapshots_export(e, &out, &out_size, &err) != WGLLM_STATUS_OK) __builtin_trap();
        if (wgllm_engine_snapshots_import(e, out, out_size, &err) != WGLLM_STATUS_OK) __builtin_trap();
        free(out);
    }
    free(buf);
    wgllm_snapshot_clear(e); /* the next input starts from an empty store */
    if (e->n_snaps || e->snap_bytes) __builtin_trap();
    return 0;
}
