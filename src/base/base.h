/*
 * base.h - what every wgllm module shares: error reporting, assertions,
 * checked allocation, logging, fp16/bf16 conversion.
 */
#ifndef WGLLM_BASE_H
#define WGLLM_BASE_H

#include "wgllm.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills *err (when not NULL) and returns `status`, so failures read
 * `return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "...", ...);` */
enum wgllm_status wgllm_error_set(struct wgllm_error *err, enum wgllm_status status,
                                  const char *fmt, ...) __attribute__((format(printf, 3, 4)));
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

/* Overflow-checked arithmetic for sizes read from untrusted files. */
static inline int wgllm_mul_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int wgllm_add_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

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
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avxvnni, amx_int8;
    bool neon, dotprod;
};
const struct wgllm_cpu_caps *wgllm_cpu_caps(void);

#define WGLLM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define WGLLM_MAX(a, b) ((a) > (b) ? (a) : (b))
#define WGLLM_PAD(x, n) (((x) + (n) - 1) / (n) * (n))

#endif
