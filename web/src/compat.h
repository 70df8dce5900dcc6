/*
 * compat.h - what emscripten 3.1.6's libc (an older musl) lacks and the core
 * uses; force-included into every file of the wasm build (web/wasm.mk).
 */
#ifndef WGLLM_WEB_COMPAT_H
#define WGLLM_WEB_COMPAT_H
#include <stddef.h>

/* GNU qsort_r: the comparator gets a third, caller-given argument. */
void qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *), void *arg);

#endif
