/*
 * gguf_write.c - the GGUF writer (version 3), single file or llama.cpp-style
 * split shards.
 *
 * Each key/value is kept already serialised (type tag + payload), which makes
 * copying values from another file, replacing and writing one code path.
 * Tensor data is never held for the whole model: each tensor is produced by
 * the caller's fill callback into one reusable buffer and written out.
 */
#include "gguf/gguf.h"

#include "base/strbuf.h"
#include "quant/quant.h"

#include <errno.h>
#include <unistd.h>

struct gguf_wkv {
    char *key;
    struct wgllm_strbuf val; /* u32 type + payload, exactly as in the file */
};

struct gguf_wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[WGLLM_GGUF_MAX_DIMS];
    uint64_t size;
};

struct wgllm_gguf_writer {
    struct gguf_wkv *kv;
    size_t n_kv, cap_kv;
    struct gguf_wtensor *t;
    size_t n_t, cap_t;
};

/* ---------------------------------------------------------------------------
 * buffers
 * ------------------------------------------------------------------------- */

static void *gguf_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) WGLLM_ABORT("gguf writer: out of memory (%zu bytes)", n);
    return q;
}

static char *gguf_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = gguf_xrealloc(NULL, n);
    memcpy(d, s, n);
    return d;
}

/* Serialised bytes live in a wgllm_strbuf; the writer's API has no error
 * path for building them, so out of memory aborts as gguf_xrealloc does. */
static void wbuf_put(struct wgllm_strbuf *b, const void *src, size_t n) {
    if (!wgllm_strbuf_put(b, src, n)) WGLLM_ABORT("gguf writer: out of memory (%zu more bytes)", n);
}
static void wbuf_u32(struct wgllm_strbuf *b, uint32_t v) { wbuf_put(b, &v, 4); }
static void wbuf_u64(struct wgllm_strbuf *b, uint64_t v) { wbuf_put(b, &v, 8); }
static void wbuf_str(struct wgllm_strbuf *b, const char *s, uint64_t len) {
    wbuf_u64(b, len);
    wbuf_put(b, s, (size_t)len);
}

/* ---------------------------------------------------------------------------
 * key/values
 * ------------------------------------------------------------------------- */

struct wgllm_gguf_writer *wgllm_gguf_writer_init(void) {
    struct wgllm_gguf_writer *w = calloc(1, sizeof(*w));
    if (!w) WGLLM_ABORT("gguf writer: out of memory");
    return w;
}

void wgllm_gguf_writer_free(struct wgllm_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        wgllm_strbuf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* The (emptied) value buffer for `key`, replacing an existing value in place
 * so the key keeps its position. */
static struct wgllm_strbuf *gguf_wkv_slot(struct wgllm_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            wgllm_strbuf_clear(&w->kv[i].val);
            return &w->kv[i].val;
        }
    if (!wgllm_grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv))
        WGLLM_ABORT("gguf writer: out of memory (%zu keys)", w->n_kv + 1);
    struct gguf_wkv *kv = &w->kv[w->n_kv++];
    memset(kv, 0, sizeof(*kv));
    kv->key = gguf_xstrdup(key);
    return &kv->val;
}

/* A scalar key: its type tag, then the n little-endian bytes at v. */
static void gguf_set_scalar(struct wgllm_gguf_writer *w, const char *key, enum wgllm_gguf_type type, const void *v,
                            size_t n) {
    struct wgllm_strbuf *b = gguf_wkv_slot(w, key);
    wbuf_u32(b, type);
    wbuf_put(b, v, n);
}

void wgllm_gguf_writer_set_u32(struct wgllm_gguf_writer *w, const char *key, uint32_t v) {
    gguf_set_scalar(w, key, WGLLM_GGUF_TYPE_UINT32, &v, 4);
}

void wgllm_gguf_writer_set_i32(struct wgllm_gguf_writer *w, const char *key, int32_t v) {
    gguf_set_scalar(w, key, WGLLM_GGUF_TYPE_INT32, &v, 4);
}

void wgllm_gguf_writer_set_u16(struct wgllm_gguf_writer *w, const char *key, uint16_t v) {
    gguf_set_scalar(w, key, WGLLM_GGUF_TYPE_UINT16, &v, 2);
}

void wgllm_gguf_writer_set_f32(struct wgllm_gguf_writer *w, const char *key, float v) {
    gguf_set_scalar(w, key, WGLLM_GGUF_TYPE_FLOAT32, &v, 4);
}

void wgllm_gguf_writer_set_bool(struct wgllm_gguf_writer *w, const char *key, bool v) {
    const uint8_t x = v ? 1 : 0;
    gguf_set_scalar(w, key, WGLLM_GGUF_TYPE_BOOL, &x, 1);
}

void wgllm_gguf_writer_set_str(struct wgllm_gguf_writer *w, const char *key, const char *v) {
    struct wgllm_strbuf *b = gguf_wkv_slot(w, key);
    wbuf_u32(b, WGLLM_GGUF_TYPE_STRING);
    wbuf_str(b, v, strlen(v));
}

/* Payload of a parsed value (no type tag), as the reader laid it out. */
static void gguf_put_payload(struct wgllm_strbuf *b, const struct wgllm_gguf_value *v) {
    switch (v->type) {
    case WGLLM_GGUF_TYPE_UINT8: case WGLLM_GGUF_TYPE_BOOL: { uint8_t x = (uint8_t)v->v.u64; wbuf_put(b, &x, 1); break; }
    case WGLLM_GGUF_TYPE_INT8: { int8_t x = (int8_t)v->v.i64; wbuf_put(b, &x, 1); break; }
    case WGLLM_GGUF_TYPE_UINT16: { uint16_t x = (uint16_t)v->v.u64; wbuf_put(b, &x, 2); break; }
    case WGLLM_GGUF_TYPE_INT16: { int16_t x = (int16_t)v->v.i64; wbuf_put(b, &x, 2); break; }
    case WGLLM_GGUF_TYPE_UINT32: { uint32_t x = (uint32_t)v->v.u64; wbuf_put(b, &x, 4); break; }
    case WGLLM_GGUF_TYPE_INT32: { int32_t x = (int32_t)v->v.i64; wbuf_put(b, &x, 4); break; }
    case WGLLM_GGUF_TYPE_UINT64: wbuf_put(b, &v->v.u64, 8); break;
    case WGLLM_GGUF_TYPE_INT64: wbuf_put(b, &v->v.i64, 8); break;
    case WGLLM_GGUF_TYPE_FLOAT32: { float x = (float)v->v.f64; wbuf_put(b, &x, 4); break; }
    case WGLLM_GGUF_TYPE_FLOAT64: wbuf_put(b, &v->v.f64, 8); break;
    case WGLLM_GGUF_TYPE_STRING: wbuf_str(b, v->v.str.data, v->v.str.len); break;
    case WGLLM_GGUF_TYPE_ARRAY: {
        enum wgllm_gguf_type et = v->v.arr.type;
        wbuf_u32(b, et);
        wbuf_u64(b, v->v.arr.n);
        size_t es = wgllm_gguf_type_size(et);
        if (es) {
            WGLLM_ASSERT(v->v.arr.n == 0 || v->v.arr.data != NULL);
            wbuf_put(b, v->v.arr.data, (size_t)(v->v.arr.n * es));
        } else {
            WGLLM_ASSERT(et == WGLLM_GGUF_TYPE_STRING || et == WGLLM_GGUF_TYPE_ARRAY);
            for (uint64_t i = 0; i < v->v.arr.n; i++) {
                WGLLM_ASSERT(v->v.arr.items[i].type == et);
                gguf_put_payload(b, &v->v.arr.items[i]);
            }
        }
        break;
    }
    default: WGLLM_ABORT("gguf writer: value type %u", (unsigned)v->type);
    }
}

void wgllm_gguf_writer_set_value(struct wgllm_gguf_writer *w, const char *key,
                                 const struct wgllm_gguf_value *v) {
    struct wgllm_strbuf *b = gguf_wkv_slot(w, key);
    wbuf_u32(b, v->type);
    gguf_put_payload(b, v);
}

void wgllm_gguf_writer_set_arr(struct wgllm_gguf_writer *w, const char *key,
                               enum wgllm_gguf_type type, const void *data, uint64_t n) {
    size_t es = wgllm_gguf_type_size(type);
    WGLLM_ASSERT(es != 0);
    struct wgllm_strbuf *b = gguf_wkv_slot(w, key);
    wbuf_u32(b, WGLLM_GGUF_TYPE_ARRAY);
    wbuf_u32(b, type);
    wbuf_u64(b, n);
    wbuf_put(b, data, (size_t)(n * es));
}

void wgllm_gguf_writer_set_arr_str(struct wgllm_gguf_writer *w, const char *key,
                                   const char *const *strs, uint64_t n) {
    struct wgllm_strbuf *b = gguf_wkv_slot(w, key);
    wbuf_u32(b, WGLLM_GGUF_TYPE_ARRAY);
    wbuf_u32(b, WGLLM_GGUF_TYPE_STRING);
    wbuf_u64(b, n);
    for (uint64_t i = 0; i < n; i++) wbuf_str(b, strs[i], strlen(strs[i]));
}

void wgllm_gguf_writer_add_tensor(struct wgllm_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne) {
    const struct wgllm_type_traits *tt = wgllm_type_traits(type);
    WGLLM_ASSERT(tt && tt->name && tt->blck_size > 0);
    WGLLM_ASSERT(n_dims <= WGLLM_GGUF_MAX_DIMS);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) WGLLM_ABORT("gguf writer: tensor '%s' added twice", name);
    if (!wgllm_grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        WGLLM_ABORT("gguf writer: out of memory (%zu tensors)", w->n_t + 1);
    struct gguf_wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof(*t));
    t->name = gguf_xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < WGLLM_GGUF_MAX_DIMS; d++) t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    if (t->ne[0] % (uint64_t)tt->blck_size != 0)
        WGLLM_ABORT("gguf writer: tensor '%s': ne[0] = %llu is not a multiple of %s's block %lld",
                    name, (unsigned long long)t->ne[0], tt->name, (long long)tt->blck_size);
    uint64_t sz = t->ne[0] / (uint64_t)tt->blck_size * tt->type_size;
    for (int d = 1; d < WGLLM_GGUF_MAX_DIMS; d++)
        if (wgllm_mul_overflow(sz, t->ne[d], &sz)) WGLLM_ABORT("gguf writer: tensor '%s' too big", name);
    t->size = sz;
}

/* ---------------------------------------------------------------------------
 * writing
 * ------------------------------------------------------------------------- */

static uint32_t gguf_writer_alignment(const struct wgllm_gguf_writer *w, int64_t *kv_index) {
    *kv_index = -1;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        *kv_index = (int64_t)i;
        uint32_t type, a;
        memcpy(&type, w->kv[i].val.data, 4);
        if (type != WGLLM_GGUF_TYPE_UINT32) return 0;
        memcpy(&a, w->kv[i].val.data + 4, 4);
        return a;
    }
    return WGLLM_GGUF_DEFAULT_ALIGNMENT;
}

static bool gguf_is_split_key(const char *k) {
    return strcmp(k, "split.no") == 0 || strcmp(k, "split.count") == 0 ||
           strcmp(k, "split.tensors.count") == 0;
}

struct gguf_out {
    FILE *f;
    const char *path;
    uint64_t pos;
    bool failed;
};

static void gguf_out_put(struct gguf_out *o, const void *p, size_t n) {
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed = true;
    o->pos += n;
}

static void gguf_out_pad(struct gguf_out *o, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t n = WGLLM_PAD(o->pos, (uint64_t)align) - o->pos;
    while (n > 0) {
        size_t k = (size_t)WGLLM_MIN(n, sizeof(zeros));
        gguf_out_put(o, zeros, k);
        n -= k;
    }
}

/* One file holding tensors [t0, t1). `all_kv`: the writer's key/values
 * (else only general.alignment); `extra`: serialised key/values appended
 * (the split keys), `n_extra` of them. */
static enum wgllm_status gguf_write_file(const struct wgllm_gguf_writer *w, const char *path,
                                         size_t t0, size_t t1, bool all_kv,
                                         const struct wgllm_strbuf *extra, uint64_t n_extra,
                                         wgllm_gguf_fill_fn fill, void *user,
                                         struct wgllm_error *err) {
    int64_t align_kv;
    uint32_t align = gguf_writer_alignment(w, &align_kv);
    if (align == 0 || (align & (align - 1)) != 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf writer: general.alignment must be a u32 power of two (got %u)",
                               align);
    FILE *f = fopen(path, "wb");
    if (!f)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf writer: cannot create '%s': %s", path,
                               strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    struct gguf_out o = {.f = f, .path = path};
    enum wgllm_status st = WGLLM_STATUS_OK;
    uint8_t *buf = NULL;
    uint64_t buf_cap = 0;

    uint64_t n_kv = n_extra;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!all_kv && (int64_t)i != align_kv) continue;
        if (extra && gguf_is_split_key(w->kv[i].key)) continue;
        n_kv++;
    }
    uint32_t hdr[2] = {WGLLM_GGUF_MAGIC, 3};
    uint64_t counts[2] = {(uint64_t)(t1 - t0), n_kv};
    gguf_out_put(&o, hdr, sizeof(hdr));
    gguf_out_put(&o, counts, sizeof(counts));
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!all_kv && (int64_t)i != align_kv) continue;
        if (extra && gguf_is_split_key(w->kv[i].key)) continue;
        uint64_t len = strlen(w->kv[i].key);
        gguf_out_put(&o, &len, 8);
        gguf_out_put(&o, w->kv[i].key, (size_t)len);
        gguf_out_put(&o, w->kv[i].val.data, w->kv[i].val.len);
    }
    if (extra) gguf_out_put(&o, extra->data, extra->len);

    uint64_t off = 0;
    for (size_t i = t0; i < t1; i++) {
        const struct gguf_wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        gguf_out_put(&o, &len, 8);
        gguf_out_put(&o, t->name, (size_t)len);
        gguf_out_put(&o, &t->n_dims, 4);
        gguf_out_put(&o, t->ne, 8 * (size_t)t->n_dims);
        gguf_out_put(&o, &t->type, 4);
        gguf_out_put(&o, &off, 8);
        off += WGLLM_PAD(t->size, (uint64_t)align);
        if (t->size > buf_cap) buf_cap = t->size;
    }
    gguf_out_pad(&o, align);

    if (t1 > t0 && buf_cap > 0) {
        buf = malloc((size_t)buf_cap);
        if (!buf) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                                 "gguf writer: no memory for a %llu-byte tensor buffer",
                                 (unsigned long long)buf_cap);
            goto out;
        }
    }
    for (size_t i = t0; i < t1 && !o.failed; i++) {
        const struct gguf_wtensor *t = &w->t[i];
        if (t->size > 0 && !fill((int64_t)i, buf, t->size, user)) {
            st = wgllm_error_set(err, WGLLM_STATUS_IO,
                                 "gguf writer: the data callback failed for tensor '%s'", t->name);
            goto out;
        }
        gguf_out_put(&o, buf, (size_t)t->size);
        gguf_out_pad(&o, align);
    }
out:
    free(buf);
    if (fclose(f) != 0) o.failed = true;
    if (st == WGLLM_STATUS_OK && o.failed)
        st = wgllm_error_set(err, WGLLM_STATUS_IO, "gguf writer: writing '%s' failed at byte %llu: %s",
                             path, (unsigned long long)o.pos, strerror(errno));
    if (st != WGLLM_STATUS_OK) unlink(path);
    return st;
}

enum wgllm_status wgllm_gguf_writer_write(struct wgllm_gguf_writer *w, const char *path,
                                          wgllm_gguf_fill_fn fill, void *user,
                                          struct wgllm_error *err) {
    return gguf_write_file(w, path, 0, w->n_t, true, NULL, 0, fill, user, err);
}

/* First tensor of each shard into starts[] (when not NULL); returns the count. */
static size_t gguf_plan_split(const struct wgllm_gguf_writer *w, uint64_t max_bytes,
                              size_t *starts) {
    int64_t akv;
    uint32_t align = gguf_writer_alignment(w, &akv);
    if (align == 0) align = 1; /* reported at write time */
    size_t n = 0;
    uint64_t cur = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t sz = WGLLM_PAD(w->t[i].size, (uint64_t)align);
        if (i == 0 || (cur > 0 && cur + sz > max_bytes)) {
            if (starts) starts[n] = i;
            n++;
            cur = 0;
        }
        cur += sz;
    }
    if (n == 0) {
        if (starts) starts[0] = 0;
        n = 1;
    }
    return n;
}

int wgllm_gguf_writer_split_count(const struct wgllm_gguf_writer *w, uint64_t max_bytes_per_split) {
    return (int)gguf_plan_split(w, max_bytes_per_split, NULL);
}

enum wgllm_status wgllm_gguf_writer_write_split(struct wgllm_gguf_writer *w,
                                                const char *path_prefix,
                                                uint64_t max_bytes_per_split,
                                                wgllm_gguf_fill_fn fill, void *user,
                                                struct wgllm_error *err) {
    if (max_bytes_per_split == 0)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf writer: max_bytes_per_split must be > 0");
    size_t n = gguf_plan_split(w, max_bytes_per_split, NULL);
    if (n > 65535)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf writer: %zu shards needed, more than split.count (u16) holds", n);
    if (w->n_t > INT32_MAX)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "gguf writer: too many tensors");
    size_t *starts = gguf_xrealloc(NULL, (n + 1) * sizeof(size_t));
    gguf_plan_split(w, max_bytes_per_split, starts);
    starts[n] = w->n_t;
    size_t cap = strlen(path_prefix) + 32;
    char *path = gguf_xrealloc(NULL, cap);
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (size_t s = 0; s < n && st == WGLLM_STATUS_OK; s++) {
        /* The split keys, serialised as gguf-split writes them. */
        struct wgllm_strbuf extra = {0};
        static const char *const keys[3] = {"split.no", "split.count", "split.tensors.count"};
        uint16_t no = (uint16_t)s, cnt = (uint16_t)n;
        int32_t total = (int32_t)w->n_t;
        for (int k = 0; k < 3; k++) {
            wbuf_str(&extra, keys[k], strlen(keys[k]));
            wbuf_u32(&extra, k < 2 ? WGLLM_GGUF_TYPE_UINT16 : WGLLM_GGUF_TYPE_INT32);
            if (k == 0) wbuf_put(&extra, &no, 2);
            if (k == 1) wbuf_put(&extra, &cnt, 2);
            if (k == 2) wbuf_put(&extra, &total, 4);
        }
        wgllm_gguf_split_path(path, cap, path_prefix, (int)s + 1, (int)n);
        st = gguf_write_file(w, path, starts[s], starts[s + 1], s == 0, &extra, 3, fill, user, err);
        wgllm_strbuf_free(&extra);
    }
    free(path);
    free(starts);
    return st;
}
