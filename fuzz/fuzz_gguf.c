/*
 * fuzz_gguf.c - libFuzzer target for everything a model file reaches: the
 * GGUF reader (from memory, and through a source that hands the header out
 * in growing prefixes, which must agree), the tokenizer built from its
 * metadata, the model binding (hyper-parameters and tensor shapes), and
 * for a file that binds, a small CPU context and one decode step.
 *
 * Seeds: fuzz/corpus/fuzz_gguf/ (small synthetic models). A finding is an
 * ASan/UBSan report, a leak, an allocation past -malloc_limit_mb, or a
 * timeout: a header must never size work or memory that its bytes do not
 * back.
 */
#include "gguf/gguf.h"
#include "model/model.h"
#include "vocab/vocab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct buf {
    const uint8_t *p;
    size_t n;
};

static enum wgllm_status buf_read(void *user, int file, uint64_t offset, void *dst, size_t n,
                                  struct wgllm_error *err) {
    const struct buf *b = user;
    if (file != 0 || offset > b->n || n > b->n - offset) __builtin_trap(); /* the reader promised in-range reads */
    memcpy(dst, b->p + offset, n);
    (void)err;
    return WGLLM_STATUS_OK;
}

/* Every key through the getters, every tensor's bytes through read_tensor. */
static void walk(const struct wgllm_gguf *g) {
    for (int64_t i = 0; i < wgllm_gguf_n_kv(g); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 127 ? kv->key.len : 127), kv->key.data);
        if (strlen(key) != kv->key.len) continue; /* a NUL inside: not a lookup key */
        if (wgllm_gguf_find(g, key) != &kv->value) __builtin_trap();
        uint32_t u;
        float f;
        bool b;
        struct wgllm_gguf_str s;
        (void)wgllm_gguf_get_u32(g, key, &u, NULL);
        (void)wgllm_gguf_get_f32(g, key, &f, NULL);
        (void)wgllm_gguf_get_bool(g, key, &b, NULL);
        (void)wgllm_gguf_get_str(g, key, &s, NULL);
        if (kv->value.type == WGLLM_GGUF_TYPE_ARRAY && kv->value.v.arr.data && kv->value.v.arr.n > 0) {
            volatile int64_t x = wgllm_gguf_arr_int(&kv->value, kv->value.v.arr.n - 1);
            (void)x;
        }
    }
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        uint8_t tmp[64];
        size_t n = t->size < sizeof tmp ? (size_t)t->size : sizeof tmp;
        if (wgllm_gguf_read_tensor(g, t, t->size - n, tmp, n, NULL) != WGLLM_STATUS_OK) __builtin_trap();
    }
}

static void run_model(struct wgllm_model *m) {
    char desc[4096];
    wgllm_model_describe(m, desc, sizeof desc);
    static const char text[] = "Hello world, <s> and </s> \xe2\x96\x81 \xff";
    int32_t toks[64];
    int32_t n = wgllm_tokenize(m, text, sizeof text - 1, toks, 64, true, true, NULL);
    for (int32_t i = 0; i < n; i++) {
        char piece[256];
        (void)wgllm_token_to_piece(m, toks[i], piece, sizeof piece, true);
    }
    if (m->vocab_only || n <= 0) return;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 8;
    cp.n_batch = 4;
    cp.n_threads = 1;
    struct wgllm_context *c = NULL;
    if (wgllm_context_init(m, &cp, &c, NULL) != WGLLM_STATUS_OK) return;
    if (n > 4) n = 4;
    (void)wgllm_decode(c, toks, n, false, NULL);
    wgllm_context_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int once;
    if (!once) {
        setenv("WGLLM_LOG", "error", 0); /* hostile files warn a lot: keep the log readable */
        wgllm_base_init();
        once = 1;
    }
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    const enum wgllm_status st = wgllm_gguf_open_memory(data, size, &g, &err);
    /* the same bytes through a source: the same verdict and the same contents */
    struct buf b = {data, size};
    const uint64_t sizes[1] = {size};
    struct wgllm_model_source src = {.n_files = 1, .sizes = sizes, .read = buf_read, .user = &b};
    struct wgllm_gguf *gs = NULL;
    const enum wgllm_status ss = wgllm_gguf_open_source(&src, &gs, NULL);
    /* a source is stricter (split.count must match its one file), never laxer */
    if (st != WGLLM_STATUS_OK && ss == WGLLM_STATUS_OK) __builtin_trap();
    if (gs && (wgllm_gguf_n_kv(gs) != wgllm_gguf_n_kv(g) || wgllm_gguf_n_tensors(gs) != wgllm_gguf_n_tensors(g)))
        __builtin_trap();
    if (gs) walk(gs);
    wgllm_gguf_free(gs);
    if (st != WGLLM_STATUS_OK) return 0;
    walk(g);
    /* the model takes g (and frees it on failure) */
    struct wgllm_model *m = calloc(1, sizeof *m);
    if (!m) {
        wgllm_gguf_free(g);
        return 0;
    }
    if (wgllm_model_init_from_gguf(g, m, &err) == WGLLM_STATUS_OK) {
        m->n_threads = 1;
        run_model(m);
        wgllm_model_free(m);
    } else {
        free(m);
    }
    return 0;
}
