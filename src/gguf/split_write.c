/*
 * split_write.c - `wgllm split`'s engine: a mapped GGUF model re-written as
 * llama.cpp-compatible shards (see split_write.h).
 *
 * Each shard is an ordinary GGUF file made with the writer (gguf_write.c):
 * the key/values are copied from the input's parsed values, the tensor data
 * is copied from the input's mapping by the writer's fill callback, one
 * tensor at a time, so memory holds at most the largest tensor.
 */
#include "gguf/split_write.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__) && !defined(__EMSCRIPTEN__)
#include <sys/mman.h>
#endif

struct wgllm_gguf_split_params wgllm_gguf_split_default_params(void) {
    struct wgllm_gguf_split_params p = {0};
    p.max_bytes = (uint64_t)512 << 20;
    return p;
}

bool wgllm_gguf_split_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    uint64_t v = 0;
    const char *c = s;
    for (; *c >= '0' && *c <= '9'; c++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    unsigned shift = 0;
    if (*c == 'K' || *c == 'k') shift = 10;
    else if (*c == 'M' || *c == 'm') shift = 20;
    else if (*c == 'G' || *c == 'g') shift = 30;
    if (shift) {
        c++;
        if (c[0] == 'i' && c[1] == 'B') c += 2;
    }
    if (*c != '\0' || v == 0 || v > (UINT64_MAX >> shift)) return false;
    *out = v << shift;
    return true;
}

static uint32_t split_alignment(const struct wgllm_gguf *g) {
    uint32_t a = wgllm_gguf_alignment(g);
    return a ? a : WGLLM_GGUF_DEFAULT_ALIGNMENT;
}

int64_t wgllm_gguf_split_plan(const struct wgllm_gguf *g, const struct wgllm_gguf_split_params *p,
                              int64_t *starts) {
    uint64_t align = split_alignment(g);
    int64_t n = 0, in_shard = 0;
    uint64_t bytes = 0;
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) {
        uint64_t sz = WGLLM_PAD(wgllm_gguf_tensor_at(g, i)->size, align);
        bool full = in_shard > 0 && ((p->max_bytes && bytes + sz > p->max_bytes) ||
                                     (p->max_tensors && in_shard >= p->max_tensors));
        if (i == 0 || full) {
            if (starts) starts[n] = i;
            n++;
            in_shard = 0;
            bytes = 0;
        }
        in_shard++;
        bytes += sz;
    }
    if (n == 0) {
        if (starts) starts[0] = 0;
        n = 1;
    }
    return n;
}

/* A NUL-terminated copy of a view (keys and names inside the mapping are not). */
static char *split_cstr(struct wgllm_gguf_str s) {
    char *c = malloc((size_t)s.len + 1);
    if (!c) return NULL;
    memcpy(c, s.data, (size_t)s.len);
    c[s.len] = '\0';
    return c;
}

struct split_fill {
    const struct wgllm_gguf *g;
    int64_t first;       /* global index of the shard's tensor 0 */
    uint64_t done, total; /* tensor bytes, for progress */
    const struct wgllm_gguf_split_params *p;
    bool cancelled;
};

static bool split_fill_cb(int64_t index, void *buf, uint64_t size, void *user) {
    struct split_fill *f = user;
    const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(f->g, f->first + index);
    WGLLM_ASSERT(t->size == size);
    memcpy(buf, t->data, (size_t)size);
#if defined(__linux__) && !defined(__EMSCRIPTEN__)
    /* The input is read once, in order: drop its pages from this process
     * (they stay in the page cache) so that the resident memory of a split
     * stays at about one tensor instead of growing to the whole model. The
     * mapping is private and never written, so a later touch re-reads the file. */
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(pg - 1), b = ((uintptr_t)t->data + (uintptr_t)size) & ~(pg - 1);
    if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
#endif
    f->done += size;
    if (f->p->progress && !f->p->progress(f->total ? (float)f->done / (float)f->total : 1.0f, f->p->user)) {
        f->cancelled = true;
        return false;
    }
    return true;
}

static bool split_is_split_key(const char *k) {
    return !strcmp(k, "split.no") || !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count");
}

/* One shard: tensors [t0, t1) of g. */
static enum wgllm_status split_write_shard(const struct wgllm_gguf *g, const char *path, int no,
                                           int count, int64_t t0, int64_t t1,
                                           struct split_fill *fill, struct wgllm_error *err) {
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (int64_t i = 0; i < wgllm_gguf_n_kv(g) && st == WGLLM_STATUS_OK; i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(g, i);
        char *key = split_cstr(kv->key);
        if (!key) st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "split: no memory");
        else if (!split_is_split_key(key) && (no == 0 || !strcmp(key, "general.alignment")))
            wgllm_gguf_writer_set_value(w, key, &kv->value);
        free(key);
    }
    /* after the model's keys, in gguf-split's order and types */
    wgllm_gguf_writer_set_u16(w, "split.no", (uint16_t)no);
    wgllm_gguf_writer_set_u16(w, "split.count", (uint16_t)count);
    wgllm_gguf_writer_set_i32(w, "split.tensors.count", (int32_t)wgllm_gguf_n_tensors(g));
    for (int64_t i = t0; i < t1 && st == WGLLM_STATUS_OK; i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
        char *name = split_cstr(t->name);
        if (!name) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "split: no memory");
            break;
        }
        wgllm_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne);
        free(name);
    }
    if (st == WGLLM_STATUS_OK) {
        fill->first = t0;
        st = wgllm_gguf_writer_write(w, path, split_fill_cb, fill, err);
        if (st != WGLLM_STATUS_OK && fill->cancelled)
            st = wgllm_error_set(err, WGLLM_STATUS_IO, "split: cancelled while writing '%s'", path);
    }
    wgllm_gguf_writer_free(w);
    return st;
}

/* True when `path` names the same file as one of the input's shards: writing
 * it would truncate data that is still mapped. */
static bool split_is_input(const char *path, const struct stat *in, int n_in) {
    struct stat s;
    if (stat(path, &s) != 0) return false;
    for (int i = 0; i < n_in; i++)
        if (s.st_dev == in[i].st_dev && s.st_ino == in[i].st_ino) return true;
    return false;
}

enum wgllm_status wgllm_gguf_split(const char *in_path, const char *out_prefix,
                                   const struct wgllm_gguf_split_params *p, int *n_shards,
                                   struct wgllm_error *err) {
    if (!in_path || !out_prefix || !*out_prefix || !p)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "split: input path and output prefix needed");
    if (p->max_bytes == 0 && p->max_tensors <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "split: set a shard size (max_bytes) or a tensor count per shard (max_tensors)");
    if (p->max_tensors < 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "split: max_tensors must be >= 0, got %lld",
                               (long long)p->max_tensors);
    struct wgllm_gguf *g = NULL;
    enum wgllm_status st = wgllm_gguf_open(in_path, &g, err);
    if (st != WGLLM_STATUS_OK) return st;

    const struct wgllm_gguf_value *av = wgllm_gguf_find(g, "general.alignment");
    if (av && av->type != WGLLM_GGUF_TYPE_UINT32) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "split: '%s': general.alignment is a %s, not a u32",
                               in_path, wgllm_gguf_type_name(av->type));
    }
    if (wgllm_gguf_n_tensors(g) > INT32_MAX) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "split: too many tensors for split.tensors.count");
    }
    int64_t n = wgllm_gguf_split_plan(g, p, NULL);
    if (n > 65535) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "split: %lld shards needed, more than split.count (u16) can say; "
                               "choose a larger shard size", (long long)n);
    }
    int64_t *starts = malloc((size_t)(n + 1) * sizeof(*starts));
    size_t cap = strlen(out_prefix) + 32, in_cap = strlen(in_path) + 32;
    char *path = malloc(cap), *in_shard = malloc(in_cap);
    int n_in = wgllm_gguf_n_splits(g);
    struct stat *in_st = calloc((size_t)n_in, sizeof(*in_st));
    if (!starts || !path || !in_shard || !in_st) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "split: no memory");
        goto out;
    }
    wgllm_gguf_split_plan(g, p, starts);
    starts[n] = wgllm_gguf_n_tensors(g);

    /* The input's files: the path given, and for a split input its siblings
     * (same "-NNNNN-of-MMMMM.gguf" naming as the reader follows). */
    for (int i = 0; i < n_in; i++) {
        const char *ip = in_path;
        size_t len = strlen(in_path), suffix = strlen("-00001-of-00001.gguf");
        if (n_in > 1 && len > suffix) {
            snprintf(in_shard, in_cap, "%.*s", (int)(len - suffix), in_path);
            char *prefix = strdup(in_shard);
            if (prefix) wgllm_gguf_split_path(in_shard, in_cap, prefix, i + 1, n_in);
            free(prefix);
            ip = in_shard;
        }
        if (stat(ip, &in_st[i]) != 0) memset(&in_st[i], 0, sizeof(in_st[i]));
    }
    for (int64_t s = 0; s < n; s++) {
        wgllm_gguf_split_path(path, cap, out_prefix, (int)s + 1, (int)n);
        if (split_is_input(path, in_st, n_in)) {
            st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                                 "split: output shard '%s' is the input file itself; choose another prefix", path);
            goto out;
        }
    }

    struct split_fill fill = {.g = g, .p = p};
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) fill.total += wgllm_gguf_tensor_at(g, i)->size;
    for (int64_t s = 0; s < n; s++) {
        wgllm_gguf_split_path(path, cap, out_prefix, (int)s + 1, (int)n);
        st = split_write_shard(g, path, (int)s, (int)n, starts[s], starts[s + 1], &fill, err);
        if (st != WGLLM_STATUS_OK) {
            /* the writer removed the shard it failed on; remove the finished ones */
            for (int64_t k = 0; k < s; k++) {
                wgllm_gguf_split_path(path, cap, out_prefix, (int)k + 1, (int)n);
                unlink(path);
            }
            goto out;
        }
        if (p->on_shard) {
            struct stat sb;
            p->on_shard((int)s + 1, (int)n, path, starts[s + 1] - starts[s],
                        stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0, p->user);
        }
    }
    if (n_shards) *n_shards = (int)n;
out:
    free(in_st);
    free(in_shard);
    free(path);
    free(starts);
    wgllm_gguf_free(g);
    return st;
}
