/*
 * base.h - what every wgllm module shares: error reporting, assertions,
 * checked allocation, logging, fp16/bf16 conversion.
 */
#ifndef WGLLM_BASE_H
#define WGLLM_BASE_H

#include "wgllm.h"
#include "wgllm_tools.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* wgllm_error_set is declared in wgllm_tools.h (the programs use it too). */
/* Prefixes the message already in err with more context ("loading x.gguf: "). */
void wgllm_error_prefix(struct wgllm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears *err to OK (when not NULL). */
void wgllm_error_clear(struct wgllm_error *err);

/* Programmer errors only: prints file:line and aborts. */
#define WGLLM_ASSERT(x)                                                                   \
    do {                                                                                  \
        if (!(x)) wgllm_abort(__FILE__, __LINE__, "assertion failed: %s", #x);           \
    } while (0)
#define WGLLM_ABORT(...) wgllm_abort(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void wgllm_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logging to stderr; level from WGLLM_LOG (error|warn|info|debug), default warn. */
enum wgllm_log_level { WGLLM_LOG_ERROR, WGLLM_LOG_WARN, WGLLM_LOG_INFO, WGLLM_LOG_DEBUG };
void wgllm_log(enum wgllm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Aligned allocation (64-byte, for SIMD), zero-filled; free with wgllm_free_aligned. */
void *wgllm_alloc_aligned(size_t size);
void wgllm_free_aligned(void *p);
/* The same for a block read end to end many times (a model's weights in the
 * CPU's layouts): from 2 MiB up, where huge pages are available, it is 2 MiB-
 * aligned and asks for them, so a decode step's stream of weights misses the
 * TLB 512 times less often. Free with wgllm_free_aligned. */
void *wgllm_alloc_large(size_t size);
/* Transparent huge pages can be had: Linux with THP "always" or "madvise",
 * and WGLLM_NO_HUGEPAGE unset (or 0); false elsewhere (wasm). */
bool wgllm_huge_pages_available(void);

/* ---- checked sizes ---------------------------------------------------------
 * Counts and sizes that come from outside (file headers, hyper-parameters,
 * tokenizer arrays, snapshot and cache files) are computed in 64 bits with
 * every step checked, and a result that becomes an allocation or an index
 * must then fit size_t -- which is 32 bits on wasm32, where a plain cast of
 * a 64-bit count times an element size would silently truncate and the
 * write that follows would run past a too-small buffer. */

/* Overflow-checked 64-bit arithmetic: true (and *out unspecified) on overflow. */
static inline int wgllm_mul_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int wgllm_add_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
/* The largest size this process will compute an allocation for: SIZE_MAX,
 * unless a test lowers it (wgllm_set_size_limit) to take the wasm32 paths
 * on a 64-bit host. */
extern size_t wgllm_size_limit;
/* Sets wgllm_size_limit (0 restores SIZE_MAX); for tests only. */
void wgllm_set_size_limit(size_t limit);
/* v as a size_t; false when it does not fit (see above). */
static inline bool wgllm_size_from_u64(uint64_t v, size_t *out) {
    if (v > (uint64_t)wgllm_size_limit) return false;
    *out = (size_t)v;
    return true;
}
/* a * b (+ c) as a size_t; false on 64-bit overflow or when it does not fit. */
static inline bool wgllm_size_mul(uint64_t a, uint64_t b, size_t *out) {
    uint64_t r;
    return !wgllm_mul_overflow(a, b, &r) && wgllm_size_from_u64(r, out);
}
static inline bool wgllm_size_mul_add(uint64_t a, uint64_t b, uint64_t c, size_t *out) {
    uint64_t r;
    return !wgllm_mul_overflow(a, b, &r) && !wgllm_add_overflow(r, c, &r) && wgllm_size_from_u64(r, out);
}
/* malloc / calloc of n elements of `size` bytes, NULL when n * size
 * overflows or does not fit (as when out of memory). */
void *wgllm_malloc_array(uint64_t n, size_t size);
void *wgllm_calloc_array(uint64_t n, size_t size);

/* ---- seeded hashing ----------------------------------------------------------
 * Hash tables keyed by file contents (GGUF keys and tensor names, token
 * texts, merges) use SipHash-1-3 under a random key, so that a file cannot
 * choose names that all land in one bucket and make loading or tokenizing
 * quadratic. Each table takes its own key. */
struct wgllm_hash_key {
    uint64_t k0, k1;
};
/* A fresh key: the process's random key (getentropy, once) mixed with a counter. */
struct wgllm_hash_key wgllm_hash_key_new(void);
/* SipHash-1-3 of p[0, n) under k, with `tweak` folded into the key (0 when
 * unused; hashing a pair passes the first part's hash as the tweak). */
uint64_t wgllm_hash(const struct wgllm_hash_key *k, uint64_t tweak, const void *p, size_t n);

/* IEEE half and bfloat16 conversions (round to nearest even, like ggml). */
typedef uint16_t wgllm_fp16;
typedef uint16_t wgllm_bf16;
float wgllm_fp16_to_fp32(wgllm_fp16 h);
wgllm_fp16 wgllm_fp32_to_fp16(float f);
static inline float wgllm_bf16_to_fp32(wgllm_bf16 h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}
static inline wgllm_bf16 wgllm_fp32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffff) > 0x7f800000) return (wgllm_bf16)((v.u >> 16) | 64); /* quiet NaN */
    return (wgllm_bf16)((v.u + (0x7fff + ((v.u >> 16) & 1))) >> 16);
}
/* Table-driven fp16->fp32 for hot loops (filled by wgllm_base_init). */
extern float wgllm_fp16_table[1 << 16];
static inline float wgllm_fp16_lookup(wgllm_fp16 h) { return wgllm_fp16_table[h]; }
/* Idempotent, thread-safe one-time init of tables and CPU feature detection. */
void wgllm_base_init(void);

/* CPU features detected at run time. */
struct wgllm_cpu_caps {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avxvnni;
    bool amx_int8; /* usable: the OS saves the tiles and (Linux) granted this process their use */
    bool neon, dotprod;
    bool simd128, relaxed_simd; /* wasm: relaxed SIMD where the browser validates it (repack_relaxed.c) */
};
const struct wgllm_cpu_caps *wgllm_cpu_caps(void);

#define WGLLM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define WGLLM_MAX(a, b) ((a) > (b) ? (a) : (b))
#define WGLLM_PAD(x, n) (((x) + (n) - 1) / (n) * (n))

#endif
