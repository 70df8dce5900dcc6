/*
 * snapshot_file.c - the persisted form of the engine's KV snapshots
 * (wgllm_engine_snapshots_export / _import): the whole store, with the
 * conversations still in idle slots, written as one buffer, and a buffer
 * checked whole (magic, version, model fingerprint, KV layout, sizes, token
 * ids) before any of it enters the store. Both run on the engine thread.
 *
 * Little-endian: "WGLLMKV\0", u32 version 1, u32 KV layout (1 CPU: V rows per
 * dim; 2 WebGPU: V rows per position), u64 model fingerprint, u32 count, u32
 * 0; then per snapshot u32 tokens n, u32 0, u64 state bytes, n i32 tokens,
 * the state (wgllm_context_seq_save of positions [0, n)).
 */
#include "runtime/engine_internal.h"

#define SNAP_MAGIC "WGLLMKV"
#define SNAP_VERSION 1u

struct snap_io {
    void *data;
    const void *in;
    size_t size;
    struct wgllm_error *err;
    enum wgllm_status st;
};

static uint32_t kv_layout(const struct wgllm_engine *e) {
    return strncmp(wgllm_context_backend(e->ctx), "webgpu", 6) ? 1u : 2u;
}

static void put_bytes(unsigned char **p, const void *src, size_t n) {
    memcpy(*p, src, n);
    *p += n;
}

static void export_op(struct wgllm_engine *e, void *arg) {
    struct snap_io *io = arg;
    for (int s = 0; s < e->p.n_slots; s++) /* the conversations still in their slots */
        if (e->slots[s].state == SLOT_IDLE) wgllm_snapshot_save(e, s);
    size_t size = 32;
    for (int i = 0; i < e->n_snaps; i++) size += 16 + sizeof(int32_t) * (size_t)e->snaps[i].n + e->snaps[i].bytes;
    unsigned char *buf = malloc(size), *p = buf;
    if (!buf) {
        io->st = wgllm_error_set(io->err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for %zu bytes of snapshots", size);
        return;
    }
    const uint32_t hdr[2] = {SNAP_VERSION, kv_layout(e)}, cnt[2] = {(uint32_t)e->n_snaps, 0};
    const uint64_t fp = wgllm_model_fingerprint(e->model);
    put_bytes(&p, SNAP_MAGIC, 8);
    put_bytes(&p, hdr, 8);
    put_bytes(&p, &fp, 8);
    put_bytes(&p, cnt, 8);
    for (int i = 0; i < e->n_snaps; i++) {
        const struct snapshot *sn = &e->snaps[i];
        const uint32_t n[2] = {(uint32_t)sn->n, 0};
        const uint64_t bytes = sn->bytes;
        put_bytes(&p, n, 8);
        put_bytes(&p, &bytes, 8);
        put_bytes(&p, sn->tokens, sizeof(int32_t) * (size_t)sn->n);
        put_bytes(&p, sn->state, sn->bytes);
    }
    WGLLM_ASSERT((size_t)(p - buf) == size);
    io->data = buf;
    io->size = size;
}

enum wgllm_status wgllm_engine_snapshots_export(struct wgllm_engine *e, void **data, size_t *size,
                                                struct wgllm_error *err) {
    *data = NULL;
    *size = 0;
    struct snap_io io = {.err = err};
    wgllm_engine_run_on_thread(e, export_op, &io);
    if (io.st) return io.st;
    *data = io.data;
    *size = io.size;
    return WGLLM_STATUS_OK;
}

/* Checks the whole buffer before anything changes; counts the snapshots. */
static enum wgllm_status import_check(const struct wgllm_engine *e, const unsigned char *b, size_t size,
                                      uint32_t *count, struct wgllm_error *err) {
    if (size < 32 || memcmp(b, SNAP_MAGIC, 8))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "not a wgllm snapshot file (%zu bytes, no \"WGLLMKV\" header)", size);
    uint32_t hdr[2], cnt[2];
    uint64_t fp;
    memcpy(hdr, b + 8, 8);
    memcpy(&fp, b + 16, 8);
    memcpy(cnt, b + 24, 8);
    if (hdr[0] != SNAP_VERSION)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "snapshot file version %u (this wgllm reads %u)",
                               hdr[0], SNAP_VERSION);
    const uint64_t mine = wgllm_model_fingerprint(e->model);
    if (fp != mine || hdr[1] != kv_layout(e))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "the snapshots belong to another model or backend (model fingerprint %016llx, KV "
                               "layout %u; this engine: %016llx, %u)", (unsigned long long)fp, hdr[1],
                               (unsigned long long)mine, kv_layout(e));
    size_t off = 32;
    for (uint32_t i = 0; i < cnt[0]; i++) {
        uint32_t n[2];
        uint64_t bytes;
        if (size - off < 16)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "snapshot file truncated: snapshot %u of %u has no header at byte %zu", i + 1,
                                   cnt[0], off);
        memcpy(n, b + off, 8);
        memcpy(&bytes, b + off + 8, 8);
        if (n[0] == 0 || n[0] > (uint32_t)e->n_ctx)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "snapshot %u at byte %zu has %u tokens (the context holds %d)", i + 1, off, n[0],
                                   e->n_ctx);
        const size_t want = wgllm_context_seq_state_size(e->ctx, (int)n[0]);
        if (want == SIZE_MAX) /* wasm32: more KV state than a 32-bit size_t can hold */
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "snapshot %u at byte %zu: the KV state of %u tokens is larger than this process "
                                   "can address", i + 1, off, n[0]);
        if (bytes != want)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "snapshot %u at byte %zu: %llu bytes of KV state for %u tokens (expected %zu)",
                                   i + 1, off, (unsigned long long)bytes, n[0], want);
        size_t body = SIZE_MAX;
        if (!wgllm_size_mul_add(n[0], sizeof(int32_t), want, &body) || size - off - 16 < body)
            return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                   "snapshot file truncated: snapshot %u at byte %zu needs %zu bytes, %zu are left",
                                   i + 1, off, body, size - off - 16);
        const int32_t V = wgllm_model_n_vocab(e->model);
        for (uint32_t t = 0; t < n[0]; t++) {
            int32_t tok;
            memcpy(&tok, b + off + 16 + 4 * (size_t)t, 4);
            if (tok < 0 || tok >= V)
                return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                       "snapshot %u: token %d at index %u is outside the vocabulary (%d)", i + 1,
                                       tok, t, V);
        }
        off += 16 + body;
    }
    if (off != size)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "snapshot file has %zu bytes after its %u snapshots", size - off, cnt[0]);
    *count = cnt[0];
    return WGLLM_STATUS_OK;
}

static void import_op(struct wgllm_engine *e, void *arg) {
    struct snap_io *io = arg;
    const unsigned char *b = io->in;
    uint32_t count = 0;
    io->st = import_check(e, b, io->size, &count, io->err);
    if (io->st) return;
    size_t off = 32;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t n[2];
        uint64_t bytes;
        memcpy(n, b + off, 8);
        memcpy(&bytes, b + off + 8, 8);
        const unsigned char *tok = b + off + 16;
        const unsigned char *state = b + off + 16 + sizeof(int32_t) * (size_t)n[0];
        off += 16 + sizeof(int32_t) * (size_t)n[0] + bytes;
        int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n[0]);
        if (!tokens) continue;
        memcpy(tokens, tok, sizeof(int32_t) * (size_t)n[0]);
        /* an imported prefix belongs to the shared partition */
        if (wgllm_snapshot_covered(e, NULL, tokens, (int)n[0]) || !wgllm_snapshot_make_room(e, bytes)) {
            free(tokens);
            continue;
        }
        void *copy = malloc(bytes);
        if (!copy) {
            free(tokens);
            continue;
        }
        memcpy(copy, state, bytes);
        wgllm_snapshot_add(e, NULL, tokens, (int)n[0], copy, bytes);
    }
}

enum wgllm_status wgllm_engine_snapshots_import(struct wgllm_engine *e, const void *data, size_t size,
                                                struct wgllm_error *err) {
    if (!data && size)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "snapshot import: NULL data of %zu bytes", size);
    struct snap_io io = {.in = data, .size = size, .err = err};
    wgllm_engine_run_on_thread(e, import_op, &io);
    return io.st;
}

