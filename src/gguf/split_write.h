/*
 * split_write.h - re-writing a GGUF model as llama.cpp-compatible shards
 * (what `wgllm split` and llama.cpp's gguf-split do), streaming tensor by
 * tensor from the mapped input so that the model never sits in memory.
 */
#ifndef WGLLM_GGUF_SPLIT_WRITE_H
#define WGLLM_GGUF_SPLIT_WRITE_H

#include "gguf/gguf.h"

struct wgllm_gguf_split_params {
    /* Tensor data per shard (each tensor padded to the alignment). A soft
     * limit: a shard always holds at least one tensor. 0: no byte limit. */
    uint64_t max_bytes;
    /* Tensors per shard. 0: no count limit. At least one limit must be set. */
    int64_t max_tensors;
    /* Called once per shard after it is written (may be NULL). */
    void (*on_shard)(int no, int count, const char *path, int64_t n_tensors, uint64_t file_bytes,
                     void *user);
    /* Fraction of tensor bytes written; return false to cancel (may be NULL). */
    bool (*progress)(float done, void *user);
    void *user;
};

/* 512 MiB per shard, no tensor-count limit, no callbacks. */
struct wgllm_gguf_split_params wgllm_gguf_split_default_params(void);

/* Shards the split would make of `g` (>= 1), filling starts[] (when not NULL,
 * room for the returned count) with each shard's first tensor index. */
int64_t wgllm_gguf_split_plan(const struct wgllm_gguf *g, const struct wgllm_gguf_split_params *p,
                              int64_t *starts);

/*
 * Writes the model at `in_path` (a single file, or the first shard of a split
 * model) as OUT_PREFIX-00001-of-0000N.gguf ... : the first shard carries every
 * key/value of the input, all shards the keys split.no (u16, 0-based),
 * split.count (u16) and split.tensors.count (i32), as gguf-split writes them,
 * and general.alignment when the input sets it; tensors keep their order,
 * data aligned. On failure nothing written stays on disk and err names the
 * problem; *n_shards (may be NULL) gets the count on success.
 */
enum wgllm_status wgllm_gguf_split(const char *in_path, const char *out_prefix,
                                   const struct wgllm_gguf_split_params *p, int *n_shards,
                                   struct wgllm_error *err);

/* Parses a shard size: bytes, or a whole number with K, M or G (binary:
 * 512M = 512 MiB; "512MiB" reads the same). False on anything else or 0.
 * (llama.cpp's gguf-split reads M as 10^6 bytes.) */
bool wgllm_gguf_split_parse_size(const char *s, uint64_t *out);

#endif
