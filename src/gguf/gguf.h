/*
 * gguf.h - reading and writing GGUF files (versions 2 and 3).
 *
 * The reader memory-maps the file(s) and validates every count, length and
 * offset against the file size before anything is used, so a truncated or
 * hostile file yields an error naming the field and its byte offset, never a
 * crash. Strings and tensor data point into the mapping; nothing is copied.
 * Split models (`name-00001-of-00003.gguf`) open as one context.
 *
 * The writer declares key/values and tensors first, then streams tensor data
 * through a callback so that multi-GB synthetic models never sit in memory.
 */
#ifndef WGLLM_GGUF_H
#define WGLLM_GGUF_H

#include "base/base.h"

#define WGLLM_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define WGLLM_GGUF_DEFAULT_ALIGNMENT 32
#define WGLLM_GGUF_MAX_DIMS 4

enum wgllm_gguf_type {
    WGLLM_GGUF_TYPE_UINT8 = 0,
    WGLLM_GGUF_TYPE_INT8 = 1,
    WGLLM_GGUF_TYPE_UINT16 = 2,
    WGLLM_GGUF_TYPE_INT16 = 3,
    WGLLM_GGUF_TYPE_UINT32 = 4,
    WGLLM_GGUF_TYPE_INT32 = 5,
    WGLLM_GGUF_TYPE_FLOAT32 = 6,
    WGLLM_GGUF_TYPE_BOOL = 7,
    WGLLM_GGUF_TYPE_STRING = 8,
    WGLLM_GGUF_TYPE_ARRAY = 9,
    WGLLM_GGUF_TYPE_UINT64 = 10,
    WGLLM_GGUF_TYPE_INT64 = 11,
    WGLLM_GGUF_TYPE_FLOAT64 = 12,
    WGLLM_GGUF_TYPE_COUNT
};

const char *wgllm_gguf_type_name(enum wgllm_gguf_type t);
/* Bytes of one element of a fixed-size value type; 0 for STRING, ARRAY and unknown ids. */
size_t wgllm_gguf_type_size(uint32_t t);

/* A string inside the mapped file: NOT NUL-terminated. */
struct wgllm_gguf_str {
    const char *data;
    uint64_t len;
};

struct wgllm_gguf_value {
    enum wgllm_gguf_type type;
    union {
        uint64_t u64; /* UINT8..UINT64, BOOL */
        int64_t i64;  /* INT8..INT64 */
        double f64;   /* FLOAT32, FLOAT64 */
        struct wgllm_gguf_str str;
        struct {
            enum wgllm_gguf_type type; /* element type */
            uint64_t n;                /* element count */
            /* For numeric/bool elements: the packed little-endian elements in
             * the file (possibly unaligned; read with memcpy or the getters). */
            const void *data;
            /* For STRING and ARRAY elements: n parsed values (owned by the ctx). */
            struct wgllm_gguf_value *items;
        } arr;
    } v;
};

struct wgllm_gguf_kv {
    struct wgllm_gguf_str key;
    struct wgllm_gguf_value value;
};

struct wgllm_gguf_tensor {
    struct wgllm_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[WGLLM_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
    uint32_t type;                    /* ggml type id (see quant/quant.h) */
    uint64_t offset;                  /* from the start of its file's data section */
    uint64_t size;                    /* bytes */
    const void *data;                 /* into the mapping; NULL when not mapped (open_source) */
    int split;                        /* which file of a split model (0-based) */
};

struct wgllm_gguf;

/* Opens and validates `path` (and its sibling shards when it is a split model).
 * On failure returns non-OK, *out = NULL, and err names the problem. */
enum wgllm_status wgllm_gguf_open(const char *path, struct wgllm_gguf **out,
                                  struct wgllm_error *err);
/* ---- reading without a mapping ---------------------------------------
 * When a model's bytes are not in this process's address space -- a browser's
 * OPFS file or user-picked File, read asynchronously by the host -- the
 * reader pulls only the header (key/values and tensor infos) through `read`,
 * growing its request until the header fits, and leaves tensor data where it
 * is: every tensor's `data` is NULL and wgllm_gguf_read_tensor copies ranges
 * of it on demand. So a multi-GB model never has to sit in memory whole,
 * which is what lets the browser stream weights straight into GPU buffers.
 * Validation and messages are the same as for a mapped file. */
/* struct wgllm_model_source (the byte source of a streamed model) is public: wgllm.h. */

/* Opens a model whose bytes come from `src` (see above). The split keys
 * (split.no, split.count, split.tensors.count) are checked against the files
 * given, as wgllm_gguf_open checks them against the shards it finds. */
enum wgllm_status wgllm_gguf_open_source(const struct wgllm_model_source *src, struct wgllm_gguf **out,
                                         struct wgllm_error *err);
/* Like wgllm_gguf_open (split shards found by name), but nothing is mapped:
 * the files stay open and tensor data is read with pread on demand. */
enum wgllm_status wgllm_gguf_open_unmapped(const char *path, struct wgllm_gguf **out,
                                           struct wgllm_error *err);
/* True when tensor data is addressable (every tensor's `data` is set): files
 * opened with wgllm_gguf_open or wgllm_gguf_open_memory. */
bool wgllm_gguf_mapped(const struct wgllm_gguf *g);
/* Copies bytes [offset, offset + n) of tensor t's data into dst, from the
 * mapping or through the source; a range outside the tensor is
 * INVALID_ARGUMENT. Errors name the tensor. */
enum wgllm_status wgllm_gguf_read_tensor(const struct wgllm_gguf *g, const struct wgllm_gguf_tensor *t,
                                         uint64_t offset, void *dst, size_t n, struct wgllm_error *err);

/* Parses an in-memory buffer (not copied; must outlive the ctx). For tests/fuzzing. */
enum wgllm_status wgllm_gguf_open_memory(const void *data, size_t size, struct wgllm_gguf **out,
                                         struct wgllm_error *err);
void wgllm_gguf_free(struct wgllm_gguf *g);

uint32_t wgllm_gguf_version(const struct wgllm_gguf *g);
uint32_t wgllm_gguf_alignment(const struct wgllm_gguf *g);
int wgllm_gguf_n_splits(const struct wgllm_gguf *g);
uint64_t wgllm_gguf_file_size(const struct wgllm_gguf *g); /* all splits together */

int64_t wgllm_gguf_n_kv(const struct wgllm_gguf *g);
const struct wgllm_gguf_kv *wgllm_gguf_kv_at(const struct wgllm_gguf *g, int64_t i);
/* NULL when absent. Keys of a split model come from its first file. */
const struct wgllm_gguf_value *wgllm_gguf_find(const struct wgllm_gguf *g, const char *key);

/* Typed getters. Each returns OK and sets *out when `key` exists with a
 * compatible type (any integer type for the int getters when the value fits,
 * either float type for get_f32), UNSUPPORTED-free BAD_FORMAT with a message
 * naming the key when the type is wrong, and INVALID_ARGUMENT with "missing
 * key" when absent -- callers with defaults test wgllm_gguf_find first. */
enum wgllm_status wgllm_gguf_get_u32(const struct wgllm_gguf *g, const char *key, uint32_t *out,
                                     struct wgllm_error *err);
enum wgllm_status wgllm_gguf_get_f32(const struct wgllm_gguf *g, const char *key, float *out,
                                     struct wgllm_error *err);
enum wgllm_status wgllm_gguf_get_bool(const struct wgllm_gguf *g, const char *key, bool *out,
                                      struct wgllm_error *err);
/* A NUL-terminated copy is not made: returns the view. */
enum wgllm_status wgllm_gguf_get_str(const struct wgllm_gguf *g, const char *key,
                                     struct wgllm_gguf_str *out, struct wgllm_error *err);
/* Element i of a numeric array value, converted. Asserts i < n. */
int64_t wgllm_gguf_arr_int(const struct wgllm_gguf_value *arr, uint64_t i);
double wgllm_gguf_arr_float(const struct wgllm_gguf_value *arr, uint64_t i);
/* True when the NUL-terminated s equals the view. */
bool wgllm_gguf_str_eq(struct wgllm_gguf_str a, const char *s);

/* Absolute file offset where the data section of file `split` (0-based) starts. */
uint64_t wgllm_gguf_data_offset(const struct wgllm_gguf *g, int split);
/* Writes "PREFIX-NNNNN-of-MMMMM.gguf" (no = 1-based shard number) like
 * llama.cpp's llama_split_path; returns what snprintf returns. */
int wgllm_gguf_split_path(char *buf, size_t size, const char *prefix, int no, int count);

int64_t wgllm_gguf_n_tensors(const struct wgllm_gguf *g);
const struct wgllm_gguf_tensor *wgllm_gguf_tensor_at(const struct wgllm_gguf *g, int64_t i);
const struct wgllm_gguf_tensor *wgllm_gguf_find_tensor(const struct wgllm_gguf *g,
                                                       const char *name);

/* ---- writer ------------------------------------------------------------ */

struct wgllm_gguf_writer;

struct wgllm_gguf_writer *wgllm_gguf_writer_init(void);
void wgllm_gguf_writer_free(struct wgllm_gguf_writer *w);
/* Setters copy their arguments. Setting a key twice replaces the value. */
void wgllm_gguf_writer_set_u32(struct wgllm_gguf_writer *w, const char *key, uint32_t v);
void wgllm_gguf_writer_set_u16(struct wgllm_gguf_writer *w, const char *key, uint16_t v);
void wgllm_gguf_writer_set_i32(struct wgllm_gguf_writer *w, const char *key, int32_t v);
void wgllm_gguf_writer_set_f32(struct wgllm_gguf_writer *w, const char *key, float v);
void wgllm_gguf_writer_set_bool(struct wgllm_gguf_writer *w, const char *key, bool v);
void wgllm_gguf_writer_set_str(struct wgllm_gguf_writer *w, const char *key, const char *v);
/* Copies a key/value read from another file (any type, arrays included). */
void wgllm_gguf_writer_set_value(struct wgllm_gguf_writer *w, const char *key,
                                 const struct wgllm_gguf_value *v);
/* Numeric array: `n` elements of `type`, packed little-endian in `data`. */
void wgllm_gguf_writer_set_arr(struct wgllm_gguf_writer *w, const char *key,
                               enum wgllm_gguf_type type, const void *data, uint64_t n);
void wgllm_gguf_writer_set_arr_str(struct wgllm_gguf_writer *w, const char *key,
                                   const char *const *strs, uint64_t n);
/* Declares a tensor; its data comes from the fill callback at write time. */
void wgllm_gguf_writer_add_tensor(struct wgllm_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne);

/* Fills `size` bytes of tensor `index` (declaration order). Return false to abort. */
typedef bool (*wgllm_gguf_fill_fn)(int64_t index, void *buf, uint64_t size, void *user);

/* Writes the file (version 3, alignment from general.alignment or 32).
 * The buffer handed to `fill` is the tensor's full size. */
enum wgllm_status wgllm_gguf_writer_write(struct wgllm_gguf_writer *w, const char *path,
                                          wgllm_gguf_fill_fn fill, void *user,
                                          struct wgllm_error *err);

/* Writes llama.cpp-compatible shards PREFIX-00001-of-0000N.gguf (as
 * gguf-split does): tensors in declaration order, a new shard starting when
 * the next tensor's (padded) data would push the current one past
 * `max_bytes_per_split` (a soft limit: every shard holds at least one
 * tensor). The first shard carries all key/values; every shard carries
 * split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32),
 * plus general.alignment when set. `fill` gets global tensor indices.
 * With no tensors, one shard is written. */
enum wgllm_status wgllm_gguf_writer_write_split(struct wgllm_gguf_writer *w,
                                                const char *path_prefix,
                                                uint64_t max_bytes_per_split,
                                                wgllm_gguf_fill_fn fill, void *user,
                                                struct wgllm_error *err);
/* Shards that write_split would produce for this limit (>= 1). */
int wgllm_gguf_writer_split_count(const struct wgllm_gguf_writer *w, uint64_t max_bytes_per_split);

#endif
