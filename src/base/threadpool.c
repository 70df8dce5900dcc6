/*
 * threadpool.c - fork-join workers: a generation counter announces each job;
 * workers spin on it for a short while (jobs come every few microseconds
 * during a forward pass) and then sleep on a futex until the next one.
 *
 * Every wait in here (a worker for the next job, the caller for the workers
 * to finish, a thread at a barrier) is the same: spin for up to SPIN_NS
 * watching one 32-bit counter, then sleep on that counter's address (Linux
 * futex, emscripten_futex_wait in wasm, a condition variable elsewhere). The
 * thread that changes a counter wakes its sleepers only when some thread
 * has announced that it sleeps, so a busy pool makes no system calls.
 * Spinning without bound is what made 2 threads slower than 1 in the
 * browser and on an oversubscribed machine: the spinner holds the core that
 * the thread it waits for needs.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#if defined(__EMSCRIPTEN__)
#include <emscripten/threading.h>
#include <math.h>
#define WAIT_FUTEX_WASM 1
#elif defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#define WAIT_FUTEX_LINUX 1
#endif

/* How long a waiter spins before it sleeps. Long enough to cover the gap
 * between two jobs of one forward pass (a few microseconds) and the gap
 * between tokens (sampling, a few tens), short enough that an idle or
 * descheduled peer does not cost a core for long. */
#define SPIN_NS 100000

struct wgllm_threadpool {
    int n_threads;
    pthread_t *threads;
    atomic_uint gen;       /* bumped to start a job */
    atomic_uint n_done;    /* workers finished with the current job */
    atomic_bool stop;
    atomic_int bar_count;  /* threads arrived at the current barrier */
    atomic_uint bar_phase; /* bumped by the last thread to arrive */
    atomic_int sleepers;   /* threads asleep (or about to be) on any counter */
    wgllm_task_fn fn;
    void *arg;
#if !defined(WAIT_FUTEX_WASM) && !defined(WAIT_FUTEX_LINUX)
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

struct worker_arg {
    struct wgllm_threadpool *tp;
    int ith;
};

int wgllm_n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- sleeping on a counter ----------------------------------------------- */

/* Sleeps while *addr == seen (returns at once if it differs; may return
 * spuriously: callers re-check). */
static void sleep_on(struct wgllm_threadpool *tp, atomic_uint *addr, unsigned seen) {
#if defined(WAIT_FUTEX_WASM)
    (void)tp;
    emscripten_futex_wait((void *)addr, seen, INFINITY);
#elif defined(WAIT_FUTEX_LINUX)
    (void)tp;
    syscall(SYS_futex, (void *)addr, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
    pthread_mutex_lock(&tp->mu);
    if (atomic_load(addr) == seen) pthread_cond_wait(&tp->cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
#endif
}

/* Wakes every thread asleep on addr. */
static void wake_all(struct wgllm_threadpool *tp, atomic_uint *addr) {
#if defined(WAIT_FUTEX_WASM)
    (void)tp;
    emscripten_futex_wake((void *)addr, 1 << 30);
#elif defined(WAIT_FUTEX_LINUX)
    (void)tp;
    syscall(SYS_futex, (void *)addr, FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
#else
    (void)addr;
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
#endif
}

/* After a change of *addr that someone may wait for. The seq_cst store of
 * the change and this seq_cst load pair with the sleeper's seq_cst
 * increment and re-check in wait_change: either the sleeper sees the new
 * value, or we see the sleeper (and the futex itself re-checks the value
 * under its own lock, so a wake cannot fall between check and sleep). */
static void notify(struct wgllm_threadpool *tp, atomic_uint *addr) {
    if (atomic_load(&tp->sleepers) > 0) wake_all(tp, addr);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until *addr != seen (or the pool stops, when watch_stop); returns
 * the new value. */
static unsigned wait_change(struct wgllm_threadpool *tp, atomic_uint *addr, unsigned seen, bool watch_stop) {
    unsigned v;
    uint64_t t0 = 0;
    for (unsigned spins = 0;; spins++) {
        if ((v = atomic_load_explicit(addr, memory_order_acquire)) != seen) return v;
        if (watch_stop && atomic_load_explicit(&tp->stop, memory_order_acquire)) return v;
        CPU_RELAX();
        if ((spins & 63) != 63) continue;
        const uint64_t t = now_ns();
        if (!t0) t0 = t;
        if (t - t0 < SPIN_NS) continue;
        atomic_fetch_add(&tp->sleepers, 1);
        if ((v = atomic_load(addr)) == seen && !(watch_stop && atomic_load(&tp->stop))) sleep_on(tp, addr, seen);
        atomic_fetch_sub(&tp->sleepers, 1);
        t0 = 0; /* woken: spin again before the next sleep */
    }
}

/* ---- the pool ------------------------------------------------------------ */

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct wgllm_threadpool *tp = wa.tp;
    unsigned seen = 0; /* gen starts at 0 and no job can run before the pool is built */
    for (;;) {
        const unsigned g = wait_change(tp, &tp->gen, seen, true);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = g;
        tp->fn(tp->arg, wa.ith, tp->n_threads);
        if (atomic_fetch_add(&tp->n_done, 1) + 1 == (unsigned)tp->n_threads - 1) notify(tp, &tp->n_done);
    }
    return NULL;
}

struct wgllm_threadpool *wgllm_threadpool_init(int n_threads) {
    if (n_threads <= 0) n_threads = wgllm_n_cores();
    struct wgllm_threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) return NULL;
    tp->n_threads = n_threads;
#if !defined(WAIT_FUTEX_WASM) && !defined(WAIT_FUTEX_LINUX)
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
#endif
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->n_done, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->bar_count, 0);
    atomic_init(&tp->bar_phase, 0);
    atomic_init(&tp->sleepers, 0);
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
    atomic_store(&tp->stop, true);
    /* a worker may be past its stop check and about to sleep on gen: a
     * change of gen plus a wake reaches it either way */
    atomic_fetch_add(&tp->gen, 1);
    wake_all(tp, &tp->gen);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
#if !defined(WAIT_FUTEX_WASM) && !defined(WAIT_FUTEX_LINUX)
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
#endif
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
    atomic_store(&tp->n_done, 0);
    atomic_fetch_add(&tp->gen, 1);
    notify(tp, &tp->gen);
    fn(arg, 0, tp->n_threads);
    const unsigned want = (unsigned)tp->n_threads - 1;
    for (unsigned d = atomic_load(&tp->n_done); d != want; d = atomic_load(&tp->n_done))
        wait_change(tp, &tp->n_done, d, false);
}

void wgllm_threadpool_barrier(struct wgllm_threadpool *tp) {
    if (tp->n_threads == 1) return;
    const unsigned phase = atomic_load_explicit(&tp->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->bar_count, 1, memory_order_acq_rel) == tp->n_threads - 1) {
        atomic_store_explicit(&tp->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&tp->bar_phase, 1);
        notify(tp, &tp->bar_phase);
    } else {
        wait_change(tp, &tp->bar_phase, phase, false);
    }
}
