/*
 * test_threadpool.c - the thread pool's waiting (src/base/threadpool.c):
 * waits spin for a while and then sleep on a futex, so this checks the
 * sleeping paths, which a busy forward pass rarely takes: jobs separated
 * by gaps longer than the spin, barriers where one thread arrives late,
 * a caller waiting on a slow worker, and an idle pool that uses no CPU.
 */
#include "test.h"

#include "base/threadpool.h"

#include <stdatomic.h>
#include <time.h>

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct job {
    struct wgllm_threadpool *tp;
    atomic_int ran;
    int slots[8];
    int ok;
    int late; /* this thread sleeps before each barrier (ms-scale: the others must sleep too) */
};

static void job_fn(void *arg, int ith, int nth) {
    struct job *j = arg;
    atomic_fetch_add(&j->ran, 1);
    for (int round = 0; round < 4; round++) {
        if (ith == j->late) sleep_us(2000);
        j->slots[ith] = round;
        wgllm_threadpool_barrier(j->tp);
        if (ith == 0)
            for (int i = 0; i < nth; i++)
                if (j->slots[i] != round) j->ok = 0;
        wgllm_threadpool_barrier(j->tp);
    }
}

TEST(jobs_after_gaps_and_late_barrier_arrivals) {
    for (int n = 2; n <= 4; n++) {
        struct wgllm_threadpool *tp = wgllm_threadpool_init(n);
        CHECK(tp != NULL);
        if (!tp) continue;
        struct job j = {.tp = tp, .ok = 1};
        atomic_init(&j.ran, 0);
        for (int r = 0; r < 12; r++) {
            j.late = r % n; /* the caller (0) is late too, so workers sleep at barriers and in the join */
            wgllm_threadpool_run(tp, job_fn, &j);
            sleep_us(r % 2 ? 3000 : 50); /* workers asleep for the next job, or still spinning */
        }
        CHECK_EQ_INT(atomic_load(&j.ran), 12 * n);
        CHECK(j.ok);
        wgllm_threadpool_free(tp);
    }
}

static void slow_worker_fn(void *arg, int ith, int nth) {
    atomic_int *done = arg;
    if (ith == nth - 1) sleep_us(5000); /* the caller waits past its spin */
    atomic_fetch_add(done, 1);
}

TEST(caller_sleeps_until_a_slow_worker_finishes) {
    struct wgllm_threadpool *tp = wgllm_threadpool_init(3);
    CHECK(tp != NULL);
    if (!tp) return;
    atomic_int done;
    atomic_init(&done, 0);
    for (int r = 0; r < 5; r++) {
        wgllm_threadpool_run(tp, slow_worker_fn, &done);
        CHECK_EQ_INT(atomic_load(&done), 3 * (r + 1)); /* run returned only after every thread */
    }
    wgllm_threadpool_free(tp);
}

static void nop_fn(void *arg, int ith, int nth) {
    (void)arg, (void)ith, (void)nth;
}

TEST(an_idle_pool_sleeps) {
    struct wgllm_threadpool *tp = wgllm_threadpool_init(4);
    CHECK(tp != NULL);
    if (!tp) return;
    wgllm_threadpool_run(tp, nop_fn, NULL);
    sleep_us(20000); /* past the spin */
    const double c0 = cpu_seconds();
    sleep_us(200000);
    const double used = cpu_seconds() - c0;
    /* three spinning workers would burn ~0.6 s of CPU here */
    CHECK(used < 0.05);
    if (used >= 0.05) fprintf(stderr, "  idle pool used %.3f s of CPU in 0.2 s\n", used);
    wgllm_threadpool_run(tp, nop_fn, NULL); /* and wakes up again */
    wgllm_threadpool_free(tp);
}

TEST(many_short_jobs) {
    struct wgllm_threadpool *tp = wgllm_threadpool_init(2);
    CHECK(tp != NULL);
    if (!tp) return;
    struct job j = {.tp = tp, .ok = 1, .late = -1};
    atomic_init(&j.ran, 0);
    for (int r = 0; r < 500; r++) wgllm_threadpool_run(tp, job_fn, &j);
    CHECK_EQ_INT(atomic_load(&j.ran), 1000);
    CHECK(j.ok);
    wgllm_threadpool_free(tp);
}

int main(void) {
    RUN(jobs_after_gaps_and_late_barrier_arrivals);
    RUN(caller_sleeps_until_a_slow_worker_finishes);
    RUN(an_idle_pool_sleeps);
    RUN(many_short_jobs);
    return test_summary("test_threadpool");
}
