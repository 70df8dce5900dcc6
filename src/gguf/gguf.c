/*
 * gguf.c - the GGUF reader: mapping, validation, lookup, split models, and
 * reading through a source (header only, by growing prefixes; tensor data on
 * demand) for bytes that cannot be mapped, such as a browser's OPFS file.
 *
 * Every count, length and offset read from a file is checked against the
 * bytes that remain before it is used (overflow-checked), so a truncated or
 * hostile file fails with a message naming the field and its byte offset.
 * Parsed values point into the mapping; only arrays of strings/arrays get
 * `items` storage, from an arena owned by the context.
 */
#include "gguf/gguf.h"

#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Arrays of arrays nest at most this deep (the top-level array is depth 1). */
#define GGUF_MAX_DEPTH 8
/* Smallest possible encodings, used to bound counts by the bytes left. */
#define GGUF_MIN_KV_BYTES 13     /* key length 8 + type 4 + a 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24 /* name length 8 + n_dims 4 + type 4 + offset 8 */
#define GGUF_MAX_SPLITS 65535    /* split.count is a u16 */

/* ---------------------------------------------------------------------------
 * small helpers
 * ------------------------------------------------------------------------- */

const char *wgllm_gguf_type_name(enum wgllm_gguf_type t) {
    static const char *const names[WGLLM_GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
    };
    if ((unsigned)t >= WGLLM_GGUF_TYPE_COUNT) return "unknown";
    return names[t];
}

size_t wgllm_gguf_type_size(uint32_t t) {
    switch (t) {
    case WGLLM_GGUF_TYPE_UINT8: case WGLLM_GGUF_TYPE_INT8: case WGLLM_GGUF_TYPE_BOOL: return 1;
    case WGLLM_GGUF_TYPE_UINT16: case WGLLM_GGUF_TYPE_INT16: return 2;
    case WGLLM_GGUF_TYPE_UINT32: case WGLLM_GGUF_TYPE_INT32: case WGLLM_GGUF_TYPE_FLOAT32: return 4;
    case WGLLM_GGUF_TYPE_UINT64: case WGLLM_GGUF_TYPE_INT64: case WGLLM_GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Copies at most 64 bytes of an untrusted name into buf for messages,
 * replacing unprintable bytes so a hostile name cannot garble the text. */
static const char *gguf_printable(char *buf, size_t cap, const char *s, uint64_t len) {
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap && i < 64; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > 64 && n + 4 < cap) { buf[n++] = '.'; buf[n++] = '.'; buf[n++] = '.'; }
    buf[n] = '\0';
    return buf;
}

bool wgllm_gguf_str_eq(struct wgllm_gguf_str a, const char *s) {
    size_t n = strlen(s);
    return a.len == n && memcmp(a.data, s, n) == 0;
}

static bool gguf_str_eq2(struct wgllm_gguf_str a, struct wgllm_gguf_str b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

/* ---------------------------------------------------------------------------
 * arena for array items, and name -> index hash tables
 * ------------------------------------------------------------------------- */

struct gguf_arena_block {
    struct gguf_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

static void *gguf_arena_alloc(struct gguf_arena_block **head, size_t size) {
    if (size > SIZE_MAX - sizeof(struct gguf_arena_block) - sizeof(max_align_t)) return NULL;
    size = WGLLM_PAD(size, sizeof(max_align_t));
    struct gguf_arena_block *b = *head;
    if (!b || b->cap - b->used < size) {
        size_t cap = WGLLM_MAX(size, (size_t)1 << 16);
        b = malloc(sizeof(*b) + cap);
        if (!b) return NULL;
        b->next = *head;
        b->used = 0;
        b->cap = cap;
        *head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    return p;
}

static void gguf_arena_free(struct gguf_arena_block *b) {
    while (b) {
        struct gguf_arena_block *next = b->next;
        free(b);
        b = next;
    }
}

/* Open addressing; slots hold index+1 (0 = empty). Names come from the
 * file, so the hash is keyed per index (base.h): no file can pick names that
 * collide and make opening it quadratic. */
struct gguf_index {
    int64_t *slots;
    uint64_t mask;
    struct wgllm_hash_key key;
};

/* n is a count the reader has bounded by the file size already. */
static bool gguf_index_init(struct gguf_index *ix, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    ix->slots = wgllm_calloc_array(cap, sizeof(int64_t));
    ix->mask = cap - 1;
    ix->key = wgllm_hash_key_new();
    return ix->slots != NULL;
}

/* Inserts `idx` under `name` unless present; returns the existing index or -1. */
static int64_t gguf_index_insert(struct gguf_index *ix, struct wgllm_gguf_str name, int64_t idx,
                                 struct wgllm_gguf_str (*name_of)(const void *, int64_t),
                                 const void *owner) {
    uint64_t h = wgllm_hash(&ix->key, 0, name.data, (size_t)name.len) & ix->mask;
    for (;;) {
        int64_t s = ix->slots[h];
        if (s == 0) {
            ix->slots[h] = idx + 1;
            return -1;
        }
        if (gguf_str_eq2(name_of(owner, s - 1), name)) return s - 1;
        h = (h + 1) & ix->mask;
    }
}

static int64_t gguf_index_find(const struct gguf_index *ix, const char *name,
                               struct wgllm_gguf_str (*name_of)(const void *, int64_t),
                               const void *owner) {
    if (!ix->slots) return -1;
    size_t len = strlen(name);
    uint64_t h = wgllm_hash(&ix->key, 0, name, len) & ix->mask;
    for (;;) {
        int64_t s = ix->slots[h];
        if (s == 0) return -1;
        if (wgllm_gguf_str_eq(name_of(owner, s - 1), name)) return s - 1;
        h = (h + 1) & ix->mask;
    }
}

/* ---------------------------------------------------------------------------
 * the context
 * ------------------------------------------------------------------------- */

struct gguf_file {
    const uint8_t *data; /* the whole file, or (sourced) the header prefix in buf */
    uint64_t size;       /* of the whole file */
    void *map;           /* non-NULL when we mmapped it */
    void *buf;           /* the header prefix read through a source (owned) */
    bool sourced;        /* read through a source: tensors' data stays NULL */
    uint32_t version, alignment;
    uint64_t data_start;
    int64_t n_kv;
    struct wgllm_gguf_kv *kv;
    int64_t n_tensors;
    struct wgllm_gguf_tensor *tensors;
};

struct wgllm_gguf {
    int n_files;
    struct gguf_file *files;
    struct gguf_arena_block *arena;
    int64_t n_tensors;
    struct wgllm_gguf_tensor *tensors; /* all files, in file order */
    struct gguf_index kv_index;        /* over files[0].kv */
    struct gguf_index tensor_index;
    /* Opened through a source: a copy whose sizes and names are owned. */
    bool sourced;
    struct wgllm_gguf_source src;
    uint64_t *src_sizes;
    char **src_names;
    void (*src_release)(void *user); /* frees src.user when the ctx owns it */
};

static struct wgllm_gguf_str gguf_kv_name(const void *owner, int64_t i) {
    return ((const struct wgllm_gguf_kv *)owner)[i].key;
}
static struct wgllm_gguf_str gguf_tensor_name(const void *owner, int64_t i) {
    return ((const struct wgllm_gguf_tensor *)owner)[i].name;
}

/* ---------------------------------------------------------------------------
 * parsing one file
 * ------------------------------------------------------------------------- */

/* `size` is the file's size: every check about the file uses it, so a
 * truncated or hostile file fails the same way however much of it is read.
 * Only the first `avail` bytes are at `p` (all of them when mapped); needing
 * bytes past `avail` is not an error about the file: the reader records in
 * `more` how many bytes it needs and gives up, and the caller reads a larger
 * prefix and parses again. */
struct gguf_reader {
    const uint8_t *p;
    uint64_t size, avail, pos;
    uint64_t more; /* 0, or the prefix length that the parse needs */
    struct gguf_arena_block **arena;
    struct wgllm_error *err;
};

/* n bytes from the current position lie inside the file; are they read yet? */
static enum wgllm_status gguf_have(struct gguf_reader *r, uint64_t n) {
    if (r->avail - r->pos >= n) return WGLLM_STATUS_OK;
    r->more = r->pos + n;
    return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                           "the header continues past the %llu bytes read so far",
                           (unsigned long long)r->avail);
}

static enum wgllm_status gguf_need(struct gguf_reader *r, uint64_t n, const char *field) {
    if (r->size - r->pos < n)
        return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                               "%s at offset %llu needs %llu bytes but the file ends at %llu",
                               field, (unsigned long long)r->pos, (unsigned long long)n,
                               (unsigned long long)r->size);
    return gguf_have(r, n);
}

#define GGUF_TRY(x)                                                                       \
    do {                                                                                  \
        enum wgllm_status st_ = (x);                                                      \
        if (st_ != WGLLM_STATUS_OK) return st_;                                           \
    } while (0)

static enum wgllm_status gguf_read(struct gguf_reader *r, void *dst, uint64_t n, const char *field) {
    GGUF_TRY(gguf_need(r, n, field));
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status gguf_read_u32(struct gguf_reader *r, uint32_t *v, const char *field) {
    return gguf_read(r, v, 4, field);
}
static enum wgllm_status gguf_read_u64(struct gguf_reader *r, uint64_t *v, const char *field) {
    return gguf_read(r, v, 8, field);
}

static enum wgllm_status gguf_read_str(struct gguf_reader *r, struct wgllm_gguf_str *s,
                                       const char *field) {
    uint64_t at = r->pos, len;
    GGUF_TRY(gguf_read_u64(r, &len, field));
    if (len > r->size - r->pos)
        return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                               "%s length %llu at offset %llu exceeds the %llu bytes left in the "
                               "file (size %llu)",
                               field, (unsigned long long)len, (unsigned long long)at,
                               (unsigned long long)(r->size - r->pos), (unsigned long long)r->size);
    GGUF_TRY(gguf_have(r, len));
    s->data = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status gguf_check_type(struct gguf_reader *r, uint32_t t, uint64_t at,
                                         const char *field) {
    if (t >= WGLLM_GGUF_TYPE_COUNT)
        return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                               "%s %u at offset %llu is not a GGUF value type", field, t,
                               (unsigned long long)at);
    return WGLLM_STATUS_OK;
}

static enum wgllm_status gguf_parse_value(struct gguf_reader *r, uint32_t type, int depth,
                                          struct wgllm_gguf_value *out);

/* The body of an ARRAY value: element type, count, elements. */
static enum wgllm_status gguf_parse_array(struct gguf_reader *r, int depth,
                                          struct wgllm_gguf_value *out) {
    if (depth > GGUF_MAX_DEPTH)
        return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                               "arrays nested deeper than %d at offset %llu", GGUF_MAX_DEPTH,
                               (unsigned long long)r->pos);
    uint32_t et;
    uint64_t at = r->pos, n;
    GGUF_TRY(gguf_read_u32(r, &et, "array element type"));
    GGUF_TRY(gguf_check_type(r, et, at, "array element type"));
    uint64_t n_at = r->pos;
    GGUF_TRY(gguf_read_u64(r, &n, "array count"));
    out->type = WGLLM_GGUF_TYPE_ARRAY;
    out->v.arr.type = (enum wgllm_gguf_type)et;
    out->v.arr.n = n;
    out->v.arr.data = NULL;
    out->v.arr.items = NULL;
    uint64_t left = r->size - r->pos;
    size_t es = wgllm_gguf_type_size(et);
    /* Smallest encoding of one element bounds the count before any allocation. */
    uint64_t min_elem = es ? es : (et == WGLLM_GGUF_TYPE_STRING ? 8 : 12);
    if (n > left / min_elem)
        return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                               "array count %llu of %s at offset %llu cannot fit in the %llu "
                               "bytes left in the file (size %llu; each element takes at least %llu)",
                               (unsigned long long)n, wgllm_gguf_type_name(et),
                               (unsigned long long)n_at, (unsigned long long)left,
                               (unsigned long long)r->size, (unsigned long long)min_elem);
    if (es) {
        GGUF_TRY(gguf_have(r, n * es)); /* n * es <= left: no overflow */
        out->v.arr.data = r->p + r->pos;
        if (et == WGLLM_GGUF_TYPE_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (r->p[r->pos + i] > 1)
                    return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                                           "bool array element %llu at offset %llu is %u, not 0 or 1",
                                           (unsigned long long)i,
                                           (unsigned long long)(r->pos + i), r->p[r->pos + i]);
        }
        r->pos += n * es;
        return WGLLM_STATUS_OK;
    }
    if (n == 0) return WGLLM_STATUS_OK;
    size_t items_size;
    struct wgllm_gguf_value *items = NULL;
    if (wgllm_size_mul(n, sizeof(*items), &items_size)) items = gguf_arena_alloc(r->arena, items_size);
    if (!items)
        return wgllm_error_set(r->err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "no memory for %llu array elements (offset %llu)",
                               (unsigned long long)n, (unsigned long long)n_at);
    out->v.arr.items = items;
    for (uint64_t i = 0; i < n; i++) {
        enum wgllm_status st = gguf_parse_value(r, et, depth, &items[i]);
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(r->err, "array element %llu: ", (unsigned long long)i);
            return st;
        }
    }
    return WGLLM_STATUS_OK;
}

/* One value of a known type (already checked < COUNT). `depth` counts the
 * arrays that enclose it. */
static enum wgllm_status gguf_parse_value(struct gguf_reader *r, uint32_t type, int depth,
                                          struct wgllm_gguf_value *out) {
    memset(out, 0, sizeof(*out));
    out->type = (enum wgllm_gguf_type)type;
    uint64_t at = r->pos;
    switch (type) {
    case WGLLM_GGUF_TYPE_UINT8: { uint8_t v; GGUF_TRY(gguf_read(r, &v, 1, "u8 value")); out->v.u64 = v; break; }
    case WGLLM_GGUF_TYPE_INT8: { int8_t v; GGUF_TRY(gguf_read(r, &v, 1, "i8 value")); out->v.i64 = v; break; }
    case WGLLM_GGUF_TYPE_UINT16: { uint16_t v; GGUF_TRY(gguf_read(r, &v, 2, "u16 value")); out->v.u64 = v; break; }
    case WGLLM_GGUF_TYPE_INT16: { int16_t v; GGUF_TRY(gguf_read(r, &v, 2, "i16 value")); out->v.i64 = v; break; }
    case WGLLM_GGUF_TYPE_UINT32: { uint32_t v; GGUF_TRY(gguf_read(r, &v, 4, "u32 value")); out->v.u64 = v; break; }
    case WGLLM_GGUF_TYPE_INT32: { int32_t v; GGUF_TRY(gguf_read(r, &v, 4, "i32 value")); out->v.i64 = v; break; }
    case WGLLM_GGUF_TYPE_UINT64: { uint64_t v; GGUF_TRY(gguf_read(r, &v, 8, "u64 value")); out->v.u64 = v; break; }
    case WGLLM_GGUF_TYPE_INT64: { int64_t v; GGUF_TRY(gguf_read(r, &v, 8, "i64 value")); out->v.i64 = v; break; }
    case WGLLM_GGUF_TYPE_FLOAT32: { float v; GGUF_TRY(gguf_read(r, &v, 4, "f32 value")); out->v.f64 = v; break; }
    case WGLLM_GGUF_TYPE_FLOAT64: { double v; GGUF_TRY(gguf_read(r, &v, 8, "f64 value")); out->v.f64 = v; break; }
    case WGLLM_GGUF_TYPE_BOOL: {
        uint8_t v;
        GGUF_TRY(gguf_read(r, &v, 1, "bool value"));
        if (v > 1)
            return wgllm_error_set(r->err, WGLLM_STATUS_BAD_FORMAT,
                                   "bool value at offset %llu is %u, not 0 or 1",
                                   (unsigned long long)at, v);
        out->v.u64 = v;
        break;
    }
    case WGLLM_GGUF_TYPE_STRING: GGUF_TRY(gguf_read_str(r, &out->v.str, "string")); break;
    case WGLLM_GGUF_TYPE_ARRAY: GGUF_TRY(gguf_parse_array(r, depth + 1, out)); break;
    default: WGLLM_ABORT("unchecked gguf type %u", type);
    }
    return WGLLM_STATUS_OK;
}

static const struct wgllm_gguf_kv *gguf_file_find(const struct gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (wgllm_gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

/* The header of one file: key/values, tensor infos, data section bounds. */
static enum wgllm_status gguf_parse_header(struct gguf_file *f, struct gguf_reader *r) {
    struct wgllm_error *err = r->err;
    char nbuf[80];

    uint32_t magic;
    GGUF_TRY(gguf_read_u32(r, &magic, "gguf: magic"));
    if (magic != WGLLM_GGUF_MAGIC)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: magic at offset 0 is 0x%08x, not \"GGUF\" (0x%08x): not a "
                               "GGUF file",
                               magic, WGLLM_GGUF_MAGIC);
    GGUF_TRY(gguf_read_u32(r, &f->version, "gguf: version"));
    if (f->version == 1)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "gguf: version 1 (offset 4) is not supported; convert the file to "
                               "version 3");
    if (f->version != 2 && f->version != 3) {
        if (f->version != 0 && (f->version & 0xffff) == 0)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "gguf: version field at offset 4 is 0x%08x: a big-endian file, "
                                   "which is not supported",
                                   f->version);
        return wgllm_error_set(err, f->version == 0 ? WGLLM_STATUS_BAD_FORMAT
                                                    : WGLLM_STATUS_UNSUPPORTED,
                               "gguf: version %u at offset 4 is not supported (only 2 and 3)",
                               f->version);
    }
    uint64_t n_tensors, n_kv;
    GGUF_TRY(gguf_read_u64(r, &n_tensors, "gguf: tensor count"));
    GGUF_TRY(gguf_read_u64(r, &n_kv, "gguf: key/value count"));
    uint64_t left = r->size - r->pos;
    if (n_tensors > left / GGUF_MIN_TENSOR_BYTES || n_tensors > INT64_MAX / 2)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: tensor count %llu at offset 8 cannot fit in the %llu bytes "
                               "left in the file (size %llu)",
                               (unsigned long long)n_tensors, (unsigned long long)left,
                               (unsigned long long)r->size);
    if (n_kv > left / GGUF_MIN_KV_BYTES ||
        n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES > left)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key/value count %llu at offset 16 (with %llu tensors) cannot "
                               "fit in the %llu bytes left in the file (size %llu)",
                               (unsigned long long)n_kv, (unsigned long long)n_tensors,
                               (unsigned long long)left, (unsigned long long)r->size);

    /* key/values */
    f->n_kv = (int64_t)n_kv;
    f->kv = wgllm_calloc_array(n_kv, sizeof(*f->kv));
    if (!f->kv) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory for %llu keys", (unsigned long long)n_kv);
    struct gguf_index kix;
    if (!gguf_index_init(&kix, (int64_t)n_kv))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory for the key index");
    enum wgllm_status st = WGLLM_STATUS_OK;
    for (uint64_t i = 0; i < n_kv && st == WGLLM_STATUS_OK; i++) {
        struct wgllm_gguf_kv *kv = &f->kv[i];
        uint64_t key_at = r->pos;
        st = gguf_read_str(r, &kv->key, "key");
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "gguf: key/value %llu: ", (unsigned long long)i);
            break;
        }
        gguf_printable(nbuf, sizeof(nbuf), kv->key.data, kv->key.len);
        int64_t dup = gguf_index_insert(&kix, kv->key, (int64_t)i, gguf_kv_name, f->kv);
        if (dup >= 0) {
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                 "gguf: duplicate key '%s' at offset %llu (key/value %llu repeats "
                                 "key/value %lld)",
                                 nbuf, (unsigned long long)key_at, (unsigned long long)i,
                                 (long long)dup);
            break;
        }
        uint32_t type;
        uint64_t type_at = r->pos;
        st = gguf_read_u32(r, &type, "value type");
        if (st == WGLLM_STATUS_OK) st = gguf_check_type(r, type, type_at, "value type");
        if (st == WGLLM_STATUS_OK) st = gguf_parse_value(r, type, 0, &kv->value);
        if (st != WGLLM_STATUS_OK) wgllm_error_prefix(err, "gguf: key '%s': ", nbuf);
    }
    free(kix.slots);
    GGUF_TRY(st);

    /* alignment */
    f->alignment = WGLLM_GGUF_DEFAULT_ALIGNMENT;
    const struct wgllm_gguf_kv *akv = gguf_file_find(f, "general.alignment");
    if (akv) {
        if (akv->value.type != WGLLM_GGUF_TYPE_UINT32)
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "gguf: key 'general.alignment' has type %s, expected u32",
                                   wgllm_gguf_type_name(akv->value.type));
        uint64_t a = akv->value.v.u64;
        if (a == 0 || (a & (a - 1)) != 0)
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "gguf: key 'general.alignment' is %llu, not a nonzero power of two",
                                   (unsigned long long)a);
        f->alignment = (uint32_t)a;
    }

    /* tensor infos */
    f->n_tensors = (int64_t)n_tensors;
    f->tensors = wgllm_calloc_array(n_tensors, sizeof(*f->tensors));
    if (!f->tensors) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory for %llu tensors", (unsigned long long)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct wgllm_gguf_tensor *t = &f->tensors[i];
        uint64_t info_at = r->pos;
        st = gguf_read_str(r, &t->name, "tensor name");
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "gguf: tensor %llu: ", (unsigned long long)i);
            return st;
        }
        gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
        uint64_t at = r->pos;
        st = gguf_read_u32(r, &t->n_dims, "n_dims");
        if (st == WGLLM_STATUS_OK && t->n_dims > WGLLM_GGUF_MAX_DIMS)
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                 "n_dims %u at offset %llu is more than %d", t->n_dims,
                                 (unsigned long long)at, WGLLM_GGUF_MAX_DIMS);
        uint64_t nel = 1;
        for (uint32_t d = 0; d < WGLLM_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims && st == WGLLM_STATUS_OK; d++) {
            at = r->pos;
            int64_t ne;
            st = gguf_read(r, &ne, 8, "ne");
            if (st != WGLLM_STATUS_OK) break;
            if (ne < 0)
                st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                     "ne[%u] = %lld at offset %llu is negative", d, (long long)ne,
                                     (unsigned long long)at);
            else if (wgllm_mul_overflow(nel, (uint64_t)ne, &nel) || nel > (uint64_t)INT64_MAX)
                st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                     "dims overflow: element count exceeds 2^63 at ne[%u] = %lld "
                                     "(offset %llu)",
                                     d, (long long)ne, (unsigned long long)at);
            else
                t->ne[d] = (uint64_t)ne;
        }
        at = r->pos;
        if (st == WGLLM_STATUS_OK) st = gguf_read_u32(r, &t->type, "type");
        const struct wgllm_type_traits *tt = NULL;
        if (st == WGLLM_STATUS_OK) {
            tt = wgllm_type_traits(t->type);
            if (!tt || !tt->name || tt->blck_size <= 0 || tt->type_size == 0)
                st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                     "unknown tensor type %u at offset %llu", t->type,
                                     (unsigned long long)at);
        }
        if (st == WGLLM_STATUS_OK && t->ne[0] % (uint64_t)tt->blck_size != 0)
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                 "ne[0] = %llu is not a multiple of the %s block size %lld "
                                 "(tensor info at offset %llu)",
                                 (unsigned long long)t->ne[0], tt->name, (long long)tt->blck_size,
                                 (unsigned long long)info_at);
        if (st == WGLLM_STATUS_OK) {
            uint64_t sz = t->ne[0] / (uint64_t)tt->blck_size;
            bool ovf = wgllm_mul_overflow(sz, tt->type_size, &sz);
            for (int d = 1; d < WGLLM_GGUF_MAX_DIMS; d++) ovf |= wgllm_mul_overflow(sz, t->ne[d], &sz);
            if (ovf)
                st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                     "dims overflow: byte size of %llux%llux%llux%llu %s overflows "
                                     "(tensor info at offset %llu)",
                                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                                     (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                                     tt->name, (unsigned long long)info_at);
            t->size = sz;
        }
        at = r->pos;
        if (st == WGLLM_STATUS_OK) st = gguf_read_u64(r, &t->offset, "data offset");
        if (st == WGLLM_STATUS_OK && t->offset % f->alignment != 0)
            st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                 "data offset %llu at offset %llu is not a multiple of the "
                                 "alignment %u",
                                 (unsigned long long)t->offset, (unsigned long long)at,
                                 f->alignment);
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "gguf: tensor '%s': ", nbuf);
            return st;
        }
    }

    /* data section */
    uint64_t ds;
    if (wgllm_add_overflow(r->pos, f->alignment - 1, &ds))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "gguf: data section offset overflows");
    f->data_start = ds / f->alignment * f->alignment;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct wgllm_gguf_tensor *t = &f->tensors[i];
        uint64_t begin, end;
        if (wgllm_add_overflow(f->data_start, t->offset, &begin) ||
            wgllm_add_overflow(begin, t->size, &end) || end > f->size) {
            gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "gguf: tensor '%s': data [offset %llu, size %llu] extends past "
                                   "end of file (size %llu)",
                                   nbuf, (unsigned long long)(f->data_start + t->offset),
                                   (unsigned long long)t->size, (unsigned long long)f->size);
        }
        t->data = f->sourced ? NULL : f->data + begin;
    }
    return WGLLM_STATUS_OK;
}

/* Parses and validates one whole file into f (data/size already set; only
 * the first `avail` bytes of it at f->data). On failure *more is the prefix
 * length to read before parsing again, or 0 when the file itself is bad. */
static enum wgllm_status gguf_parse_file(struct gguf_file *f, struct gguf_arena_block **arena,
                                         uint64_t avail, uint64_t *more, struct wgllm_error *err) {
    struct gguf_reader rd = {.p = f->data, .size = f->size, .avail = avail, .pos = 0,
                             .arena = arena, .err = err};
    struct gguf_reader *r = &rd;
    enum wgllm_status st = gguf_parse_header(f, r);
    *more = rd.more;
    return st;
}

/* ---------------------------------------------------------------------------
 * opening
 * ------------------------------------------------------------------------- */

static void gguf_file_release(struct gguf_file *f) {
    free(f->kv);
    free(f->tensors);
    free(f->buf);
    if (f->map) munmap(f->map, (size_t)f->size);
    memset(f, 0, sizeof(*f));
}

void wgllm_gguf_free(struct wgllm_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_files; i++) gguf_file_release(&g->files[i]);
    free(g->files);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    gguf_arena_free(g->arena);
    if (g->src_release) g->src_release(g->src.user);
    if (g->src_names)
        for (int i = 0; i < g->src.n_files; i++) free(g->src_names[i]);
    free(g->src_names);
    free(g->src_sizes);
    free(g);
}

/* Opens `path` read-only: a non-empty regular file; *fd stays open. */
static enum wgllm_status gguf_open_fd(const char *path, int *fd_out, uint64_t *size,
                                      struct wgllm_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot open '%s': %s", path,
                               strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: '%s' is not a regular file", path);
    }
    if (stt.st_size == 0) {
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: '%s' is empty (magic at offset 0 missing)", path);
    }
    *fd_out = fd;
    *size = (uint64_t)stt.st_size;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status gguf_map(const char *path, struct gguf_file *f, struct wgllm_error *err) {
    int fd;
    uint64_t size;
    GGUF_TRY(gguf_open_fd(path, &fd, &size, err));
    size_t map_size;
    if (!wgllm_size_from_u64(size, &map_size)) { /* wasm32: a file past 4 GiB */
        close(fd);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                               "gguf: '%s' has %llu bytes, more than this process can map", path,
                               (unsigned long long)size);
    }
    void *m = mmap(NULL, map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return wgllm_error_set(err, WGLLM_STATUS_IO, "gguf: cannot map '%s' (%llu bytes): %s", path,
                               (unsigned long long)size, strerror(e));
    f->map = m;
    f->data = m;
    f->size = size;
    return WGLLM_STATUS_OK;
}

/* Reads an integer metadata value of any integer type; false if absent/not int. */
static bool gguf_value_int(const struct wgllm_gguf_value *v, int64_t *out) {
    switch (v->type) {
    case WGLLM_GGUF_TYPE_UINT8: case WGLLM_GGUF_TYPE_UINT16: case WGLLM_GGUF_TYPE_UINT32:
    case WGLLM_GGUF_TYPE_UINT64:
        if (v->v.u64 > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v->v.u64;
        return true;
    case WGLLM_GGUF_TYPE_INT8: case WGLLM_GGUF_TYPE_INT16: case WGLLM_GGUF_TYPE_INT32:
    case WGLLM_GGUF_TYPE_INT64:
        *out = v->v.i64;
        return true;
    default: return false;
    }
}

/* A split key of file f: -1 absent; -2 present with a non-integer type. */
static int64_t gguf_split_key(const struct gguf_file *f, const char *key) {
    const struct wgllm_gguf_kv *kv = gguf_file_find(f, key);
    int64_t v;
    if (!kv) return -1;
    if (!gguf_value_int(&kv->value, &v) || v < 0) return -2;
    return v;
}

/* Builds the merged tensor list and indexes (after every file parsed). */
static enum wgllm_status gguf_finish(struct wgllm_gguf *g, struct wgllm_error *err) {
    int64_t total = 0;
    for (int i = 0; i < g->n_files; i++) total += g->files[i].n_tensors;
    g->tensors = wgllm_calloc_array((uint64_t)total, sizeof(*g->tensors));
    if (!g->tensors || !gguf_index_init(&g->tensor_index, total) ||
        !gguf_index_init(&g->kv_index, g->files[0].n_kv))
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory for %lld tensors",
                               (long long)total);
    int64_t k = 0;
    for (int i = 0; i < g->n_files; i++) {
        for (int64_t j = 0; j < g->files[i].n_tensors; j++, k++) {
            g->tensors[k] = g->files[i].tensors[j];
            g->tensors[k].split = i;
            int64_t dup = gguf_index_insert(&g->tensor_index, g->tensors[k].name, k,
                                            gguf_tensor_name, g->tensors);
            if (dup >= 0) {
                char nbuf[80];
                gguf_printable(nbuf, sizeof(nbuf), g->tensors[k].name.data, g->tensors[k].name.len);
                return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                       "gguf: duplicate tensor name '%s' (tensor %lld of file %d "
                                       "repeats tensor %lld of file %d)",
                                       nbuf, (long long)j, i + 1, (long long)dup,
                                       g->tensors[dup].split + 1);
            }
        }
    }
    g->n_tensors = total;
    /* Keys are already unique (checked per file). */
    for (int64_t i = 0; i < g->files[0].n_kv; i++)
        gguf_index_insert(&g->kv_index, g->files[0].kv[i].key, i, gguf_kv_name, g->files[0].kv);
    return WGLLM_STATUS_OK;
}

static struct wgllm_gguf *gguf_new(int n_files) {
    struct wgllm_gguf *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->files = calloc((size_t)n_files, sizeof(*g->files));
    if (!g->files) {
        free(g);
        return NULL;
    }
    return g;
}

enum wgllm_status wgllm_gguf_open_memory(const void *data, size_t size, struct wgllm_gguf **out,
                                         struct wgllm_error *err) {
    *out = NULL;
    if (!data && size)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "gguf: NULL buffer");
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    g->n_files = 1;
    g->files[0].data = data;
    g->files[0].size = size;
    uint64_t more;
    enum wgllm_status st = gguf_parse_file(&g->files[0], &g->arena, size, &more, err);
    if (st == WGLLM_STATUS_OK) st = gguf_finish(g, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_gguf_free(g);
        return st;
    }
    *out = g;
    return WGLLM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * split checks and the shared open sequence
 * ------------------------------------------------------------------------- */

/* How the number of files was decided, which the split.count message names. */
enum gguf_count_rule {
    GGUF_COUNT_PLAIN_NAME, /* one file, its name not a shard name */
    GGUF_COUNT_SPLIT_NAME, /* the MMMMM of PREFIX-NNNNN-of-MMMMM.gguf */
    GGUF_COUNT_SOURCE,     /* the caller's wgllm_gguf_source.n_files */
};

/* split.count of the first file against the number of files there are. */
static enum wgllm_status gguf_check_split_count(const struct gguf_file *f0, int n_files,
                                                enum gguf_count_rule rule,
                                                struct wgllm_error *err) {
    int64_t count = gguf_split_key(f0, "split.count");
    if (count == -2 || count > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.count' must be an integer in 0..%d", GGUF_MAX_SPLITS);
    if (count <= 0) count = 1;
    if (count == n_files) return WGLLM_STATUS_OK;
    switch (rule) {
    case GGUF_COUNT_PLAIN_NAME:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the file name does not follow "
                               "PREFIX-NNNNN-of-MMMMM.gguf, so the other shards cannot be found",
                               (long long)count);
    case GGUF_COUNT_SPLIT_NAME:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the file name says %d shards",
                               (long long)count, n_files);
    default:
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: split.count is %lld but the source gives %d file%s",
                               (long long)count, n_files, n_files == 1 ? "" : "s");
    }
}

/* Shard i (0-based) of a split into `count` files. */
static enum wgllm_status gguf_check_split_file(const struct gguf_file *f, int i, int64_t count,
                                               struct wgllm_error *err) {
    int64_t no = gguf_split_key(f, "split.no");
    int64_t c = gguf_split_key(f, "split.count");
    if (no != i)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.no' is %s%lld, expected %d",
                               no == -1 ? "missing " : no == -2 ? "not an integer " : "",
                               (long long)(no < 0 ? 0 : no), i);
    if (c != -1 && c != count)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.count' is %lld, but the first shard says %lld",
                               (long long)c, (long long)count);
    return WGLLM_STATUS_OK;
}

/* split.tensors.count of the first shard against the tensors of all. */
static enum wgllm_status gguf_check_split_tensors(const struct wgllm_gguf *g,
                                                  struct wgllm_error *err) {
    int64_t want = gguf_split_key(&g->files[0], "split.tensors.count"), sum = 0;
    for (int i = 0; i < g->n_files; i++) sum += g->files[i].n_tensors;
    if (want != sum)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key 'split.tensors.count' is %s%lld but the %d shards hold "
                               "%lld tensors",
                               want == -1 ? "missing " : "", (long long)want, g->n_files,
                               (long long)sum);
    return WGLLM_STATUS_OK;
}

/* How a file gets into g->files[i] (parsed), and its name for messages. */
struct gguf_loader {
    enum wgllm_status (*load)(struct wgllm_gguf *g, int i, void *ctx, struct wgllm_error *err);
    const char *(*name)(void *ctx, int i);
    void *ctx;
};

/* The open sequence of every kind of file: the first file, split.count
 * against n_files, then every other shard and its split keys, then the
 * merged tables. g holds one zeroed file slot. An error gets the name of
 * the file it is about as prefix. */
static enum wgllm_status gguf_open_files(struct wgllm_gguf *g, int n_files,
                                         enum gguf_count_rule rule, const struct gguf_loader *ld,
                                         struct wgllm_error *err) {
    int cur = 0;
    enum wgllm_status st = ld->load(g, 0, ld->ctx, err);
    if (st == WGLLM_STATUS_OK) st = gguf_check_split_count(&g->files[0], n_files, rule, err);
    if (st == WGLLM_STATUS_OK && n_files > 1) {
        struct gguf_file *files = realloc(g->files, (size_t)n_files * sizeof(*files));
        if (!files) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
        } else {
            g->files = files;
            memset(&files[1], 0, (size_t)(n_files - 1) * sizeof(*files));
            for (int i = 0; i < n_files && st == WGLLM_STATUS_OK; i++) {
                cur = i;
                if (i > 0) {
                    g->n_files = i + 1;
                    st = ld->load(g, i, ld->ctx, err);
                }
                if (st == WGLLM_STATUS_OK) st = gguf_check_split_file(&g->files[i], i, n_files, err);
            }
            if (st == WGLLM_STATUS_OK) {
                cur = 0;
                st = gguf_check_split_tensors(g, err);
            }
        }
    }
    if (st == WGLLM_STATUS_OK) {
        cur = 0;
        st = gguf_finish(g, err);
    }
    if (st != WGLLM_STATUS_OK) wgllm_error_prefix(err, "%s: ", ld->name(ld->ctx, cur));
    return st;
}

/* ---------------------------------------------------------------------------
 * files found by name: one file, or every shard of PREFIX-NNNNN-of-MMMMM.gguf
 * ------------------------------------------------------------------------- */

/* Matches "PREFIX-NNNNN-of-MMMMM.gguf"; fills prefix length, shard number, count. */
static bool gguf_split_name(const char *path, size_t *prefix_len, int *no, int *count) {
    static const char pat[] = "-#####-of-#####.gguf";
    size_t n = strlen(path), m = sizeof(pat) - 1;
    if (n <= m) return false;
    const char *s = path + n - m;
    int a = 0, b = 0;
    for (size_t i = 0; i < m; i++) {
        if (pat[i] == '#') {
            if (s[i] < '0' || s[i] > '9') return false;
            if (i < 6) a = a * 10 + (s[i] - '0');
            else b = b * 10 + (s[i] - '0');
        } else if (s[i] != pat[i]) {
            return false;
        }
    }
    *prefix_len = n - m;
    *no = a;
    *count = b;
    return true;
}

int wgllm_gguf_split_path(char *buf, size_t size, const char *prefix, int no, int count) {
    return snprintf(buf, size, "%s-%05d-of-%05d.gguf", prefix, no, count);
}

struct gguf_shards {
    const char *path;
    char *prefix; /* NULL: `path` is the only file */
    int count;
    char *buf; /* one shard's path (gguf_shard_path) */
    size_t cap;
};

static enum wgllm_status gguf_shards_init(struct gguf_shards *s, const char *path,
                                          struct wgllm_error *err) {
    memset(s, 0, sizeof(*s));
    s->path = path;
    s->count = 1;
    size_t plen = 0;
    int no = 0, count = 0;
    if (!gguf_split_name(path, &plen, &no, &count)) return WGLLM_STATUS_OK;
    if (count < 1 || no < 1 || no > count || count > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: '%s': shard number %d of %d in the file name is out of range",
                               path, no, count);
    s->cap = strlen(path) + 32;
    s->prefix = malloc(plen + 1);
    s->buf = malloc(s->cap);
    if (!s->prefix || !s->buf) {
        free(s->prefix);
        free(s->buf);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    }
    memcpy(s->prefix, path, plen);
    s->prefix[plen] = '\0';
    s->count = count;
    return WGLLM_STATUS_OK;
}

static void gguf_shards_free(struct gguf_shards *s) {
    free(s->prefix);
    free(s->buf);
}

/* The path of file i (0-based); valid until the next call. */
static const char *gguf_shard_path(void *ctx, int i) {
    struct gguf_shards *s = ctx;
    if (!s->prefix) return s->path;
    wgllm_gguf_split_path(s->buf, s->cap, s->prefix, i + 1, s->count);
    return s->buf;
}

static enum wgllm_status gguf_map_load(struct wgllm_gguf *g, int i, void *ctx,
                                       struct wgllm_error *err) {
    struct gguf_file *f = &g->files[i];
    GGUF_TRY(gguf_map(gguf_shard_path(ctx, i), f, err));
    uint64_t more;
    return gguf_parse_file(f, &g->arena, f->size, &more, err);
}

enum wgllm_status wgllm_gguf_open(const char *path, struct wgllm_gguf **out,
                                  struct wgllm_error *err) {
    *out = NULL;
    struct gguf_shards sh;
    GGUF_TRY(gguf_shards_init(&sh, path, err));
    enum wgllm_status st;
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) {
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    } else {
        g->n_files = 1;
        struct gguf_loader ld = {gguf_map_load, gguf_shard_path, &sh};
        st = gguf_open_files(g, sh.count, sh.prefix ? GGUF_COUNT_SPLIT_NAME : GGUF_COUNT_PLAIN_NAME,
                             &ld, err);
        if (st != WGLLM_STATUS_OK) {
            wgllm_gguf_free(g);
            g = NULL;
        }
    }
    gguf_shards_free(&sh);
    *out = g;
    return st;
}

/* ---------------------------------------------------------------------------
 * reading through a source
 * ------------------------------------------------------------------------- */

/* The first read of a header; most fit (a 150k-token vocabulary does not). */
#define GGUF_FIRST_READ ((uint64_t)256 << 10)
/* The most a header may take when read into memory (the mapped reader copies
 * nothing, so it has no such limit): real ones, vocabularies of 256k tokens
 * included, are tens of MB; a hostile length must not make a browser tab
 * allocate gigabytes. */
#define GGUF_MAX_HEADER ((uint64_t)512 << 20)

static const char *gguf_src_name(const struct wgllm_gguf *g, int i, char *buf, size_t cap) {
    if (g->src.names && g->src.names[i]) return g->src.names[i];
    snprintf(buf, cap, "file %d", i + 1);
    return buf;
}

/* Reads [off, off + n) of file i through the source; the message names the range. */
static enum wgllm_status gguf_source_read(const struct wgllm_gguf *g, int i, uint64_t off,
                                          void *dst, size_t n, struct wgllm_error *err) {
    if (n == 0) return WGLLM_STATUS_OK;
    struct wgllm_error e = {0};
    enum wgllm_status st = g->src.read(g->src.user, i, off, dst, n, &e);
    if (st == WGLLM_STATUS_OK) return st;
    return wgllm_error_set(err, st, "cannot read bytes [%llu, %llu) (%zu bytes): %s",
                           (unsigned long long)off, (unsigned long long)(off + n), n,
                           e.message[0] ? e.message : wgllm_status_name(st));
}

static void gguf_arena_splice(struct gguf_arena_block **head, struct gguf_arena_block *list) {
    if (!list) return;
    struct gguf_arena_block *tail = list;
    while (tail->next) tail = tail->next;
    tail->next = *head;
    *head = list;
}

/* Reads a prefix of file i and parses it, reading more until the header fits. */
static enum wgllm_status gguf_source_load(struct wgllm_gguf *g, int i, void *ctx,
                                          struct wgllm_error *err) {
    (void)ctx;
    struct gguf_file *f = &g->files[i];
    uint64_t size = g->src.sizes[i], have = 0, want = WGLLM_MIN(size, GGUF_FIRST_READ);
    uint8_t *buf = NULL;
    for (;;) {
        if (want >= (uint64_t)SIZE_MAX) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                                   "gguf: the header needs %llu bytes, more than this process "
                                   "can address",
                                   (unsigned long long)want);
        }
        uint8_t *nb = realloc(buf, want ? (size_t)want : 1);
        if (!nb) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY,
                                   "gguf: no memory for %llu header bytes", (unsigned long long)want);
        }
        buf = nb;
        enum wgllm_status st = gguf_source_read(g, i, have, buf + have, (size_t)(want - have), err);
        if (st != WGLLM_STATUS_OK) {
            free(buf);
            wgllm_error_prefix(err, "gguf: reading the header: ");
            return st;
        }
        have = want;
        f->data = buf;
        f->size = size;
        f->sourced = true;
        /* Items of a parse that is retried are dropped with their arena. */
        struct gguf_arena_block *arena = NULL;
        uint64_t more = 0;
        st = gguf_parse_file(f, &arena, have, &more, err);
        if (st == WGLLM_STATUS_OK || more == 0) {
            f->buf = buf;
            gguf_arena_splice(&g->arena, arena);
            return st;
        }
        free(f->kv);
        free(f->tensors);
        memset(f, 0, sizeof(*f));
        gguf_arena_free(arena);
        /* Counts and lengths were checked against the file size first. */
        WGLLM_ASSERT(more > have && more <= size);
        if (more > GGUF_MAX_HEADER) {
            free(buf);
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "gguf: the header (key/values and tensor infos) needs more than %llu "
                                   "bytes (%llu so far): too large to read into memory",
                                   (unsigned long long)GGUF_MAX_HEADER, (unsigned long long)more);
        }
        want = have > size / 2 ? size : have * 2;
        if (want < more) want = more;
        if (want > GGUF_MAX_HEADER) want = WGLLM_MAX(more, GGUF_MAX_HEADER);
    }
}

struct gguf_source_names {
    const struct wgllm_gguf *g;
    char buf[32];
};

static const char *gguf_source_name(void *ctx, int i) {
    struct gguf_source_names *c = ctx;
    return gguf_src_name(c->g, i, c->buf, sizeof(c->buf));
}

static enum wgllm_status gguf_open_source_as(const struct wgllm_gguf_source *src,
                                             enum gguf_count_rule rule, struct wgllm_gguf **out,
                                             struct wgllm_error *err) {
    *out = NULL;
    if (!src || !src->sizes || !src->read || src->n_files < 1 || src->n_files > GGUF_MAX_SPLITS)
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: a source needs 1..%d files (got %d), their sizes and a read "
                               "function",
                               GGUF_MAX_SPLITS, src ? src->n_files : 0);
    int n = src->n_files;
    struct wgllm_gguf *g = gguf_new(1);
    if (!g) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    g->n_files = 1;
    g->sourced = true;
    g->src = *src;
    g->src.names = NULL;
    bool oom = false;
    g->src_sizes = malloc((size_t)n * sizeof(*g->src_sizes));
    if (g->src_sizes) memcpy(g->src_sizes, src->sizes, (size_t)n * sizeof(*g->src_sizes));
    else oom = true;
    g->src.sizes = g->src_sizes;
    if (src->names && !oom) {
        g->src_names = calloc((size_t)n, sizeof(*g->src_names));
        oom = !g->src_names;
        for (int i = 0; i < n && !oom; i++)
            if (src->names[i] && !(g->src_names[i] = strdup(src->names[i]))) oom = true;
        g->src.names = (const char *const *)g->src_names;
    }
    if (oom) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    }
    struct gguf_source_names names = {.g = g};
    struct gguf_loader ld = {gguf_source_load, gguf_source_name, &names};
    enum wgllm_status st = gguf_open_files(g, n, rule, &ld, err);
    if (st != WGLLM_STATUS_OK) {
        wgllm_gguf_free(g);
        return st;
    }
    *out = g;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_open_source(const struct wgllm_gguf_source *src,
                                         struct wgllm_gguf **out, struct wgllm_error *err) {
    return gguf_open_source_as(src, GGUF_COUNT_SOURCE, out, err);
}

/* The source of wgllm_gguf_open_unmapped: the files stay open, read with pread. */
struct gguf_pread_files {
    int n;
    int *fds;
};

static void gguf_pread_free(void *user) {
    struct gguf_pread_files *pf = user;
    if (!pf) return;
    for (int i = 0; i < pf->n; i++) close(pf->fds[i]);
    free(pf->fds);
    free(pf);
}

static enum wgllm_status gguf_pread_read(void *user, int file, uint64_t offset, void *dst,
                                         size_t n, struct wgllm_error *err) {
    struct gguf_pread_files *pf = user;
    WGLLM_ASSERT(file >= 0 && file < pf->n);
    uint8_t *d = dst;
    size_t done = 0;
    while (done < n) {
        size_t chunk = WGLLM_MIN(n - done, (size_t)1 << 30);
        ssize_t r = pread(pf->fds[file], d + done, chunk, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return wgllm_error_set(err, WGLLM_STATUS_IO, "pread at offset %llu failed: %s",
                                   (unsigned long long)(offset + done), strerror(errno));
        if (r == 0)
            return wgllm_error_set(err, WGLLM_STATUS_IO,
                                   "the file ends at offset %llu (did it shrink while open?)",
                                   (unsigned long long)(offset + done));
        done += (size_t)r;
    }
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_open_unmapped(const char *path, struct wgllm_gguf **out,
                                           struct wgllm_error *err) {
    *out = NULL;
    struct gguf_shards sh;
    GGUF_TRY(gguf_shards_init(&sh, path, err));
    int n = sh.count;
    enum wgllm_status st = WGLLM_STATUS_OK;
    uint64_t *sizes = calloc((size_t)n, sizeof(*sizes));
    char **names = calloc((size_t)n, sizeof(*names));
    struct gguf_pread_files *pf = calloc(1, sizeof(*pf));
    if (pf) pf->fds = calloc((size_t)n, sizeof(*pf->fds));
    if (!sizes || !names || !pf || !pf->fds)
        st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
    for (int i = 0; i < n && st == WGLLM_STATUS_OK; i++) {
        const char *p = gguf_shard_path(&sh, i);
        if (!(names[i] = strdup(p))) {
            st = wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "gguf: no memory");
            break;
        }
        st = gguf_open_fd(p, &pf->fds[i], &sizes[i], err);
        if (st != WGLLM_STATUS_OK) {
            wgllm_error_prefix(err, "%s: ", p);
            break;
        }
        pf->n = i + 1;
    }
    if (st == WGLLM_STATUS_OK) {
        struct wgllm_gguf_source src = {
            .n_files = n,
            .sizes = sizes,
            .names = (const char *const *)names,
            .read = gguf_pread_read,
            .user = pf,
        };
        st = gguf_open_source_as(&src, sh.prefix ? GGUF_COUNT_SPLIT_NAME : GGUF_COUNT_PLAIN_NAME,
                                 out, err);
        if (st == WGLLM_STATUS_OK) {
            (*out)->src_release = gguf_pread_free;
            pf = NULL;
        }
    }
    gguf_pread_free(pf);
    if (names)
        for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    gguf_shards_free(&sh);
    return st;
}

bool wgllm_gguf_mapped(const struct wgllm_gguf *g) { return !g->sourced; }

enum wgllm_status wgllm_gguf_read_tensor(const struct wgllm_gguf *g,
                                         const struct wgllm_gguf_tensor *t, uint64_t offset,
                                         void *dst, size_t n, struct wgllm_error *err) {
    char nbuf[80];
    if (offset > t->size || n > t->size - offset) {
        gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT,
                               "gguf: tensor '%s': bytes [%llu, +%zu) are outside its %llu bytes",
                               nbuf, (unsigned long long)offset, n, (unsigned long long)t->size);
    }
    if (n == 0) return WGLLM_STATUS_OK;
    WGLLM_ASSERT(dst != NULL && t->split >= 0 && t->split < g->n_files);
    if (!g->sourced) {
        memcpy(dst, (const uint8_t *)t->data + offset, n);
        return WGLLM_STATUS_OK;
    }
    /* begin + size was checked against the file size at open: no overflow. */
    uint64_t at = g->files[t->split].data_start + t->offset + offset;
    enum wgllm_status st = gguf_source_read(g, t->split, at, dst, n, err);
    if (st != WGLLM_STATUS_OK) {
        char fbuf[32];
        gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
        wgllm_error_prefix(err, "gguf: tensor '%s' in %s: ", nbuf,
                           gguf_src_name(g, t->split, fbuf, sizeof(fbuf)));
    }
    return st;
}

/* ---------------------------------------------------------------------------
 * accessors
 * ------------------------------------------------------------------------- */

uint32_t wgllm_gguf_version(const struct wgllm_gguf *g) { return g->files[0].version; }
uint32_t wgllm_gguf_alignment(const struct wgllm_gguf *g) { return g->files[0].alignment; }
int wgllm_gguf_n_splits(const struct wgllm_gguf *g) { return g->n_files; }

uint64_t wgllm_gguf_file_size(const struct wgllm_gguf *g) {
    uint64_t s = 0;
    for (int i = 0; i < g->n_files; i++) s += g->files[i].size;
    return s;
}

uint64_t wgllm_gguf_data_offset(const struct wgllm_gguf *g, int split) {
    WGLLM_ASSERT(split >= 0 && split < g->n_files);
    return g->files[split].data_start;
}

int64_t wgllm_gguf_n_kv(const struct wgllm_gguf *g) { return g->files[0].n_kv; }

const struct wgllm_gguf_kv *wgllm_gguf_kv_at(const struct wgllm_gguf *g, int64_t i) {
    WGLLM_ASSERT(i >= 0 && i < g->files[0].n_kv);
    return &g->files[0].kv[i];
}

const struct wgllm_gguf_value *wgllm_gguf_find(const struct wgllm_gguf *g, const char *key) {
    int64_t i = gguf_index_find(&g->kv_index, key, gguf_kv_name, g->files[0].kv);
    return i < 0 ? NULL : &g->files[0].kv[i].value;
}

static enum wgllm_status gguf_missing(struct wgllm_error *err, const char *key) {
    return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "gguf: missing key '%s'", key);
}

enum wgllm_status wgllm_gguf_get_u32(const struct wgllm_gguf *g, const char *key, uint32_t *out,
                                     struct wgllm_error *err) {
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, key);
    if (!v) return gguf_missing(err, key);
    int64_t x;
    if (!gguf_value_int(v, &x))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key '%s' has type %s, expected an integer", key,
                               wgllm_gguf_type_name(v->type));
    if (x < 0 || x > (int64_t)UINT32_MAX)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key '%s' is %lld, outside the u32 range", key, (long long)x);
    *out = (uint32_t)x;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_get_f32(const struct wgllm_gguf *g, const char *key, float *out,
                                     struct wgllm_error *err) {
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, key);
    if (!v) return gguf_missing(err, key);
    if (v->type != WGLLM_GGUF_TYPE_FLOAT32 && v->type != WGLLM_GGUF_TYPE_FLOAT64)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key '%s' has type %s, expected f32", key,
                               wgllm_gguf_type_name(v->type));
    *out = (float)v->v.f64;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_get_bool(const struct wgllm_gguf *g, const char *key, bool *out,
                                      struct wgllm_error *err) {
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, key);
    if (!v) return gguf_missing(err, key);
    if (v->type != WGLLM_GGUF_TYPE_BOOL)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key '%s' has type %s, expected bool", key,
                               wgllm_gguf_type_name(v->type));
    *out = v->v.u64 != 0;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_gguf_get_str(const struct wgllm_gguf *g, const char *key,
                                     struct wgllm_gguf_str *out, struct wgllm_error *err) {
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, key);
    if (!v) return gguf_missing(err, key);
    if (v->type != WGLLM_GGUF_TYPE_STRING)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "gguf: key '%s' has type %s, expected str", key,
                               wgllm_gguf_type_name(v->type));
    *out = v->v.str;
    return WGLLM_STATUS_OK;
}

/* A float from the file as an integer: saturated, NaN as 0 (a plain cast of
 * a value outside int64's range is undefined behaviour). */
static int64_t gguf_float_to_int(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

int64_t wgllm_gguf_arr_int(const struct wgllm_gguf_value *arr, uint64_t i) {
    WGLLM_ASSERT(arr->type == WGLLM_GGUF_TYPE_ARRAY && i < arr->v.arr.n);
    const uint8_t *p = arr->v.arr.data;
    WGLLM_ASSERT(p != NULL);
    switch (arr->v.arr.type) {
    case WGLLM_GGUF_TYPE_UINT8: case WGLLM_GGUF_TYPE_BOOL: return p[i];
    case WGLLM_GGUF_TYPE_INT8: return (int8_t)p[i];
    case WGLLM_GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case WGLLM_GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case WGLLM_GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case WGLLM_GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case WGLLM_GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (int64_t)v; }
    case WGLLM_GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    case WGLLM_GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p + 4 * i, 4); return gguf_float_to_int(v); }
    case WGLLM_GGUF_TYPE_FLOAT64: { double v; memcpy(&v, p + 8 * i, 8); return gguf_float_to_int(v); }
    default: WGLLM_ABORT("gguf_arr_int on an array of %s", wgllm_gguf_type_name(arr->v.arr.type));
    }
}

double wgllm_gguf_arr_float(const struct wgllm_gguf_value *arr, uint64_t i) {
    WGLLM_ASSERT(arr->type == WGLLM_GGUF_TYPE_ARRAY && i < arr->v.arr.n);
    const uint8_t *p = arr->v.arr.data;
    switch (arr->v.arr.type) {
    case WGLLM_GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case WGLLM_GGUF_TYPE_FLOAT64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
    case WGLLM_GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    default: return (double)wgllm_gguf_arr_int(arr, i);
    }
}

int64_t wgllm_gguf_n_tensors(const struct wgllm_gguf *g) { return g->n_tensors; }

const struct wgllm_gguf_tensor *wgllm_gguf_tensor_at(const struct wgllm_gguf *g, int64_t i) {
    WGLLM_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const struct wgllm_gguf_tensor *wgllm_gguf_find_tensor(const struct wgllm_gguf *g,
                                                       const char *name) {
    int64_t i = gguf_index_find(&g->tensor_index, name, gguf_tensor_name, g->tensors);
    return i < 0 ? NULL : &g->tensors[i];
}
