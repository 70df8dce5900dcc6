/*
 * threadpool.c - fork-join workers: a generation counter announces each job;
 * workers spin on it for a short while (jobs come every few microseconds
 * during a forward pass) and then sleep on a futex until the next one.
 *
 * Every wait in here (a worker for the next job, the caller for the workers
 * to finish, a thread at a barrier) is the same, on one 32-bit counter:
 * spin with pause a little, then spin yielding the core each round, then
 * sleep on the counter's address (Linux futex, emscripten_futex_wait in
 * wasm, a condition variable elsewhere). The thread that changes a counter
 * wakes sleepers only when some thread has announced that it sleeps, so a
 * busy pool makes no system calls. Spinning without yielding is what made 2
 * threads 10-20x slower than 1 in the browser and on an oversubscribed
 * machine: the spinner holds the core that the thread it waits for needs.
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

/* How long a waiter spins before it sleeps. A worker waiting for the next
 * job spins across the gap between two tokens (sampling, detokenizing: up
 * to a few hundred microseconds; a futex wake-up per token cost 15% of the
 * decode speed of a small model); waits inside a job (barriers, the join)
 * are shorter. Past SPIN_PAUSES pause instructions the spin yields the core
 * on each round, so a descheduled peer that shares it can run. */
#define SPIN_NS_JOB 2000000
#define SPIN_NS_SYNC 1000000
#define SPIN_PAUSES 2000
/* wasm has no pause instruction: SPIN_PAUSES rounds pass in a microsecond or
 * two, after which every wait went through the futex (Atomics.wait), whose
 * wake-ups cost tens of microseconds at each of the ~200 waits of a decode
 * step. So in wasm the first phase is timed instead, as long as the pool fits
 * the cores (browser, TinyLlama q4_0, 2 threads on 2 cores: decode 18.9 ->
 * 20.2 tok/s); with more threads than cores it stays short, because a long
 * spin then holds the core that the awaited thread needs (4 threads on 2
 * cores under node: 16 -> 12 tok/s with the long spin). */
#define SPIN_FAST_NS 100000

struct wgllm_threadpool {
    int n_threads;
    pthread_t *threads;
    atomic_uint gen;       /* bumped to start a job */
    atomic_uint n_done;    /* workers finished with the current job */
    atomic_bool stop;
    atomic_int bar_count;  /* threads arrived at the current barrier */
    atomic_uint bar_phase; /* bumped by the last thread to arrive */
    atomic_int sleepers;   /* threads asleep (or about to be) on any counter */
    uint64_t spin_fast_ns; /* wasm: the first phase of a wait, timed (see SPIN_FAST_NS) */
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

/* One round of the spin's second phase: let another thread have this core.
 * sched_yield does that natively; in wasm it does nothing, so the thread
 * blocks on the counter for at most 50 us instead (counted as a sleeper, so
 * a change wakes it at once). */
static inline void yield_core(struct wgllm_threadpool *tp, atomic_uint *addr, unsigned seen) {
#if defined(WAIT_FUTEX_WASM)
    atomic_fetch_add(&tp->sleepers, 1);
    if (atomic_load(addr) == seen) emscripten_futex_wait((void *)addr, seen, 0.05);
    atomic_fetch_sub(&tp->sleepers, 1);
#else
    (void)tp, (void)addr, (void)seen;
    sched_yield();
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until *addr != seen (or the pool stops, when watch_stop); returns
 * the new value. */
static unsigned wait_change(struct wgllm_threadpool *tp, atomic_uint *addr, unsigned seen, bool watch_stop,
                            uint64_t spin_ns) {
    unsigned v;
    uint64_t t0 = 0, tf = 0;
    for (unsigned spins = 0;; spins++) {
        if ((v = atomic_load_explicit(addr, memory_order_acquire)) != seen) return v;
        if (watch_stop && atomic_load_explicit(&tp->stop, memory_order_acquire)) return v;
        if (spins < SPIN_PAUSES) {
            CPU_RELAX();
            continue;
        }
        if (tp->spin_fast_ns) {
            const uint64_t t = now_ns();
            if (!tf) tf = t;
            if (t - tf < tp->spin_fast_ns) continue;
        }
        yield_core(tp, addr, seen);
        const uint64_t t = now_ns();
        if (!t0) t0 = t;
        if (t - t0 < spin_ns) continue;
        atomic_fetch_add(&tp->sleepers, 1);
        if ((v = atomic_load(addr)) == seen && !(watch_stop && atomic_load(&tp->stop))) sleep_on(tp, addr, seen);
        atomic_fetch_sub(&tp->sleepers, 1);
        t0 = 0, tf = 0, spins = 0; /* woken: spin again before the next sleep */
    }
}

/* ---- the pool ------------------------------------------------------------ */

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct wgllm_threadpool *tp = wa.tp;
    unsigned seen = 0; /* gen starts at 0 and no job can run before the pool is built */
    for (;;) {
        const unsigned g = wait_change(tp, &tp->gen, seen, true, SPIN_NS_JOB);
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
#if defined(WAIT_FUTEX_WASM)
    tp->spin_fast_ns = n_threads <= wgllm_n_cores() ? SPIN_FAST_NS : 0;
#endif
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
        wait_change(tp, &tp->n_done, d, false, SPIN_NS_SYNC);
}

void wgllm_threadpool_barrier(struct wgllm_threadpool *tp) {
    if (tp->n_threads == 1) return;
    const unsigned phase = atomic_load_explicit(&tp->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&tp->bar_count, 1, memory_order_acq_rel) == tp->n_threads - 1) {
        atomic_store_explicit(&tp->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&tp->bar_phase, 1);
        notify(tp, &tp->bar_phase);
    } else {
        wait_change(tp, &tp->bar_phase, phase, false, SPIN_NS_SYNC);
    }
}
