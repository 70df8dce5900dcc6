/*
 * gguf_internal.h - what the two halves of the GGUF reader share: the
 * context (struct wgllm_gguf, one struct gguf_file per shard), the item
 * arena and the name indexes, and the parse entry points that gguf_file.c
 * (opening: memory, mmap, shards, sources) calls in gguf.c (the format).
 * Internal to src/gguf; everything else uses gguf.h.
 */
#ifndef WGLLM_GGUF_INTERNAL_H
#define WGLLM_GGUF_INTERNAL_H

#include "gguf/gguf.h"

#include <stddef.h>

struct gguf_arena_block {
    struct gguf_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

/* Open addressing; slots hold index+1 (0 = empty). Names come from the
 * file, so the hash is keyed per index (base.h): no file can pick names that
 * collide and make opening it quadratic. */
struct gguf_index {
    int64_t *slots;
    uint64_t mask;
    struct wgllm_hash_key key;
};

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
    struct wgllm_model_source src;
    uint64_t *src_sizes;
    char **src_names;
    void (*src_release)(void *user); /* frees src.user when the ctx owns it */
};

#define GGUF_TRY(x)                                                                       \
    do {                                                                                  \
        enum wgllm_status st_ = (x);                                                      \
        if (st_ != WGLLM_STATUS_OK) return st_;                                           \
    } while (0)

/* Frees an arena's blocks (the list starting at b). */
void wgllm_gguf_arena_free(struct gguf_arena_block *b);

/* Up to 64 bytes of s[0, len), unprintable ones as '?' and "..." past them,
 * NUL-terminated in buf (cap bytes): a name from a file, fit for a message. */
const char *wgllm_gguf_printable(char *buf, size_t cap, const char *s, uint64_t len);

/* Parses and validates one whole file into f (data/size already set; only
 * the first `avail` bytes of it at f->data); array items come from *arena.
 * On failure *more is the prefix length to read before parsing again, or 0
 * when the file itself is bad. */
enum wgllm_status wgllm_gguf_parse_file(struct gguf_file *f, struct gguf_arena_block **arena,
                                        uint64_t avail, uint64_t *more, struct wgllm_error *err);

/* A split key of file f: -1 absent; -2 present with a non-integer type. */
int64_t wgllm_gguf_split_key(const struct gguf_file *f, const char *key);

/* Builds the merged tensor list and indexes (after every file parsed). */
enum wgllm_status wgllm_gguf_finish(struct wgllm_gguf *g, struct wgllm_error *err);

#endif
