/*
 * threadpool.c - fork-join workers: a generation counter announces each job;
 * workers spin on it for a short while (jobs come every few microseconds
 * during a forward pass) and then block on a condition variable.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 200000 /* about 0.1-1 ms of pause loops before sleeping */

/* Waiting for other threads: pause, and past a while yield the core, since
 * with more threads than free cores the one we wait for may need ours. */
static inline void spin_pause(int spins) {
    if (spins < 2000)
        CPU_RELAX();
    else
        sched_yield();
}

struct wgllm_threadpool {
    int n_threads;
    pthread_t *threads;
    atomic_uint gen;      /* bumped to start a job */
    atomic_int n_done;    /* workers finished with the current job */
    atomic_bool stop;
    atomic_int bar_count; /* threads arrived at the current barrier */
    atomic_uint bar_phase; /* bumped by the last thread to arrive */
    wgllm_task_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

struct worker_arg {
    struct wgllm_threadpool *tp;
    int ith;
};

int wgllm_n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct wgllm_threadpool *tp = wa.tp;
    unsigned seen = 0; /* gen starts at 0 and no job can run before the pool is built */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_acquire)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen &&
                   !atomic_load_explicit(&tp->stop, memory_order_acquire))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = g;
        tp->fn(tp->arg, wa.ith, tp->n_threads);
        atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel);
    }
    return NULL;
}

struct wgllm_threadpool *wgllm_threadpool_init(int n_threads) {
    if (n_threads <= 0) n_threads = wgllm_n_cores();
    struct wgllm_threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->n_done, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->bar_count, 0);
    atomic_init(&tp->bar_phase, 0);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) {
        free(tp);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        if (!wa || (wa->tp = tp, wa->ith = i, pthread_create(&tp->threads[i], NULL, worker_main, wa)) != 0) {
            free(wa);
            tp->n_threads = i; /* free() joins the ones started */
            wgllm_threadpool_free(tp);
            return NULL;
        }
    }
    return tp;
}

void wgllm_threadpool_free(struct wgllm_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int wgllm_threadpool_n_threads(const struct wgllm_threadpool *tp) { return tp->n_threads; }

void wgllm_threadpool_run(struct wgllm_threadpool *tp, wgllm_task_fn fn, void *arg) {
    if (tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_done, 0, memory_order_release);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    fn(arg, 0, tp->n_threads);
    for (int spins = 0; atomic_load_explicit(&tp->n_done, memory_order_acquire) != tp->n_threads - 1; spins++)
        spin_pause(spins);
}

void wgllm_threadpool_barrier(struct wgllm_threadpool *tp) {
    if (tp->n_threads == 1) return;
    unsigned phase = atomic_load_explicit(&tp->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->bar_count, 1, memory_order_acq_rel) == tp->n_threads - 1) {
        atomic_store_explicit(&tp->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&tp->bar_phase, 1, memory_order_acq_rel);
    } else {
        for (int spins = 0; atomic_load_explicit(&tp->bar_phase, memory_order_acquire) == phase; spins++)
            spin_pause(spins);
    }
}
