/*
 * gguf.c - the GGUF format: parsing and validating one file's header
 * (key/values, tensor infos, the data section's bounds), the merged tensor
 * table and name indexes of a model, and the lookups over them. Getting the
 * bytes (mapping, split shards, reading through a source) is gguf_file.c.
 *
 * Every count, length and offset read from a file is checked against the
 * bytes that remain before it is used (overflow-checked), so a truncated or
 * hostile file fails with a message naming the field and its byte offset.
 * Parsed values point into the file's bytes; only arrays of strings/arrays
 * get `items` storage, from an arena owned by the context.
 */
#include "gguf/gguf_internal.h"

#include "quant/quant.h"

#include <stddef.h>

/* Arrays of arrays nest at most this deep (the top-level array is depth 1). */
#define GGUF_MAX_DEPTH 8
/* Smallest possible encodings, used to bound counts by the bytes left. */
#define GGUF_MIN_KV_BYTES 13     /* key length 8 + type 4 + a 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24 /* name length 8 + n_dims 4 + type 4 + offset 8 */

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
const char *wgllm_gguf_printable(char *buf, size_t cap, const char *s, uint64_t len) {
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

void wgllm_gguf_arena_free(struct gguf_arena_block *b) {
    while (b) {
        struct gguf_arena_block *next = b->next;
        free(b);
        b = next;
    }
}

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

/* What the two indexes are over: files[0]'s keys, and the merged tensors. */
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
        wgllm_gguf_printable(nbuf, sizeof(nbuf), kv->key.data, kv->key.len);
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
        wgllm_gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
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
            wgllm_gguf_printable(nbuf, sizeof(nbuf), t->name.data, t->name.len);
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
enum wgllm_status wgllm_gguf_parse_file(struct gguf_file *f, struct gguf_arena_block **arena,
                                         uint64_t avail, uint64_t *more, struct wgllm_error *err) {
    struct gguf_reader rd = {.p = f->data, .size = f->size, .avail = avail, .pos = 0,
                             .arena = arena, .err = err};
    struct gguf_reader *r = &rd;
    enum wgllm_status st = gguf_parse_header(f, r);
    *more = rd.more;
    return st;
}

/* ---------------------------------------------------------------------------
 * the merged tables (after every file is parsed)
 * ------------------------------------------------------------------------- */

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
int64_t wgllm_gguf_split_key(const struct gguf_file *f, const char *key) {
    const struct wgllm_gguf_kv *kv = gguf_file_find(f, key);
    int64_t v;
    if (!kv) return -1;
    if (!gguf_value_int(&kv->value, &v) || v < 0) return -2;
    return v;
}

/* Builds the merged tensor list and indexes (after every file parsed). */
enum wgllm_status wgllm_gguf_finish(struct wgllm_gguf *g, struct wgllm_error *err) {
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
                wgllm_gguf_printable(nbuf, sizeof(nbuf), g->tensors[k].name.data, g->tensors[k].name.len);
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
