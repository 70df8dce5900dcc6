/*
 * threadpool.h - a fixed set of worker threads that run one function on all
 * threads at once (fork-join), the only parallel construct the CPU backend
 * needs. Workers spin briefly between jobs (a forward pass issues hundreds of
 * short jobs per token) and then sleep, so an idle engine costs no CPU.
 */
#ifndef WGLLM_THREADPOOL_H
#define WGLLM_THREADPOOL_H

#include "base/base.h"

struct wgllm_threadpool;

/* Runs with ith in [0, nth); the caller's thread is ith 0. */
typedef void (*wgllm_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means the number of online cores. NULL on failure. */
struct wgllm_threadpool *wgllm_threadpool_init(int n_threads);
void wgllm_threadpool_free(struct wgllm_threadpool *tp);
int wgllm_threadpool_n_threads(const struct wgllm_threadpool *tp);
/* Calls fn(arg, i, n) on every thread and returns when all are done. Not reentrant. */
void wgllm_threadpool_run(struct wgllm_threadpool *tp, wgllm_task_fn fn, void *arg);
/* Inside a task: waits until every thread of the pool has reached it. */
void wgllm_threadpool_barrier(struct wgllm_threadpool *tp);
/* The number of online cores. */
int wgllm_n_cores(void);

/* Static split of [0, n) into nth parts; part ith is [*lo, *hi). `align`
 * rounds the part size up to a multiple (e.g. keep cache lines together). */
static inline void wgllm_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo,
                                     int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    if (align > 1) per = (per + align - 1) / align * align;
    *lo = WGLLM_MIN(n, per * ith);
    *hi = WGLLM_MIN(n, *lo + per);
}

#endif
