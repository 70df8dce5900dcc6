/*
 * bench_cmd.c - `wgllm bench -m MODEL [-p 128] [-n 32] [-r 3] [--json]`:
 * prompt and generation tokens/s as llama-bench measures them, and the
 * weight bytes a generated token reads as GB/s; with --parallel /
 * --prefix-reuse the engine's tables (bench_engine.c); `wgllm bench
 * --membw [-t N]` the machine's memory read bandwidth, which a decode's
 * GB/s is measured against.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stats {
    double min, median, max;
};

static struct stats summarize(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    struct stats s = {v[0], n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[n - 1]};
    return s;
}

/* ---- memory read bandwidth ---------------------------------------------- */

struct membw_part {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *membw_read(void *arg) {
    struct membw_part *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) s0 += j->p[i], s1 += j->p[i + 1], s2 += j->p[i + 2], s3 += j->p[i + 3];
    j->sum = s0 ^ s1 ^ s2 ^ s3;
    return NULL;
}

/* GB/s of `threads` threads each summing its part of 1 GiB (far past any
 * cache), the best of 5 passes, as a decode streams its weights. */
static volatile uint64_t membw_sink; /* the sums go here, so that the reads are not optimised away */

static double membw_gbs(int threads) {
    enum { MAXT = 256 };
    const size_t bytes = (size_t)1 << 30, n = bytes / sizeof(uint64_t);
    if (threads < 1) threads = 1;
    if (threads > MAXT) threads = MAXT;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0.0;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9E3779B97F4A7C15ull; /* pages really there */
    double best = 0.0;
    struct membw_part parts[MAXT];
    pthread_t th[MAXT];
    bool started[MAXT];
    for (int rep = 0; rep < 5; rep++) {
        const int64_t t0 = wgllm_time_us();
        for (int t = 0; t < threads; t++)
            parts[t] = (struct membw_part){buf + n / threads * t, t == threads - 1 ? n - n / threads * t : n / threads, 0};
        for (int t = 1; t < threads; t++) started[t] = pthread_create(&th[t], NULL, membw_read, &parts[t]) == 0;
        membw_read(&parts[0]);
        size_t read = parts[0].n; /* a part whose thread could not start is not counted */
        for (int t = 1; t < threads; t++)
            if (started[t]) pthread_join(th[t], NULL), read += parts[t].n;
        const double s = (wgllm_time_us() - t0) / 1e6;
        for (int t = 0; t < threads; t++) membw_sink ^= parts[t].sum;
        if (s > 0 && read * sizeof(uint64_t) / s / 1e9 > best) best = read * sizeof(uint64_t) / s / 1e9;
    }
    free(buf);
    return best;
}

static int bench_membw(const struct opts *o) {
    const int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    const double gbs = membw_gbs(threads);
    if (gbs <= 0) {
        fprintf(stderr, "wgllm: error: bench --membw: out of memory for its 1 GiB buffer\n");
        return 1;
    }
    if (o->json) printf("{\"membw_gb_s\": %.3f, \"threads\": %d}\n", gbs, threads);
    else printf("memory read bandwidth: %.2f GB/s (%d thread%s summing 1 GiB, best of 5)\n", gbs, threads,
                threads == 1 ? "" : "s");
    return 0;
}

/* Like llama-bench: pp = one batch of n_prompt tokens into an empty cache;
 * tg = n_gen single-token decodes from an empty cache; a warm-up run first. */
int wgllm_cli_bench(const struct opts *o) {
    if (o->membw) return bench_membw(o);
    if (o->parallel || o->prefix_reuse > 0 || o->json_schema) {
        struct wgllm_model *m = wgllm_cli_load_model(o);
        if (!m) return 1;
        int rc = wgllm_cli_bench_engine(m, o);
        wgllm_model_free(m);
        return rc;
    }
    if (o->n_prompt <= 0 || o->n_predict <= 0 || o->reps <= 0) return wgllm_cli_usage_error("bench needs -p, -n and -r > 0%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    struct wgllm_context *c = wgllm_cli_new_context(m, o, o->n_prompt > o->n_predict ? o->n_prompt : o->n_predict);
    if (!c) {
        wgllm_model_free(m);
        return 1;
    }
    const int V = wgllm_model_n_vocab(m);
    int32_t *toks = malloc((size_t)o->n_prompt * sizeof(int32_t));
    uint64_t r = 12345;
    for (int i = 0; i < o->n_prompt; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((r >> 33) % (uint64_t)V);
    }
    double *pp = malloc(sizeof(double) * (size_t)o->reps), *tg = malloc(sizeof(double) * (size_t)o->reps);
    struct wgllm_error err;
    int rc = 0;
    for (int rep = -1; rep < o->reps && !rc; rep++) { /* rep -1: warm-up */
        wgllm_context_truncate(c, 0);
        int64_t t0 = wgllm_time_us();
        if (wgllm_decode(c, toks, o->n_prompt, false, &err)) rc = 1;
        int64_t t1 = wgllm_time_us();
        wgllm_context_truncate(c, 0);
        int32_t tok = toks[0];
        for (int i = 0; i < o->n_predict && !rc; i++) {
            if (wgllm_decode(c, &tok, 1, false, &err)) rc = 1;
            tok = wgllm_argmax(wgllm_get_logits(c), V);
        }
        int64_t t2 = wgllm_time_us();
        if (rep >= 0) {
            pp[rep] = o->n_prompt / ((t1 - t0) / 1e6);
            tg[rep] = o->n_predict / ((t2 - t1) / 1e6);
        }
        if (!o->json && isatty(2)) fprintf(stderr, "\rbench: run %d/%d", rep + 1, o->reps);
    }
    if (rc) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
    } else {
        struct stats sp = summarize(pp, o->reps), sg = summarize(tg, o->reps);
        const char *name = strrchr(o->model, '/') ? strrchr(o->model, '/') + 1 : o->model;
        int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        const uint64_t db = wgllm_model_decode_bytes(m);
        if (o->json) {
            printf("{\"model\": \"%s\", \"threads\": %d, \"size_bytes\": %llu, \"decode_bytes\": %llu, "
                   "\"pp\": {\"tokens\": %d, \"min\": %.3f, \"median\": %.3f, \"max\": %.3f}, "
                   "\"tg\": {\"tokens\": %d, \"min\": %.3f, \"median\": %.3f, \"max\": %.3f}}\n",
                   name, threads, (unsigned long long)wgllm_model_size(m), (unsigned long long)db, o->n_prompt, sp.min,
                   sp.median, sp.max, o->n_predict, sg.min, sg.median, sg.max);
        } else {
            if (isatty(2)) fprintf(stderr, "\r                 \r");
            printf("%-32s %8s %7s %12s %12s %12s\n", "model", "size MiB", "threads", "test", "t/s median", "min..max");
            printf("%-32s %8.1f %7d %12s %12.2f %5.2f..%.2f\n", name, wgllm_model_size(m) / 1048576.0, threads, "pp", sp.median,
                   sp.min, sp.max);
            printf("%-32s %8.1f %7d %12s %12.2f %5.2f..%.2f\n", name, wgllm_model_size(m) / 1048576.0, threads, "tg",
                   sg.median, sg.min, sg.max);
            printf("(pp = %d-token prompt, tg = %d generated tokens, %d runs after a warm-up, cpu: %s)\n", o->n_prompt,
                   o->n_predict, o->reps, wgllm_cpu_features());
            printf("(a generated token reads %.2f MiB of weights: %.2f GB/s at the tg median; compare `wgllm bench "
                   "--membw`)\n", db / 1048576.0, db * sg.median / 1e9);
        }
    }
    const bool on_gpu = !strncmp(wgllm_context_backend(c), "webgpu", 6);
    const int n_ctx = wgllm_context_n_ctx(c);
    const double tg_median = rc ? 0.0 : summarize(tg, o->reps).median;
    free(pp);
    free(tg);
    free(toks);
    wgllm_context_free(c);
    /* on WebGPU: what a decode step costs in dispatches and bytes, from the
     * same plan built again (after the context is gone: no double memory) */
    struct wgllm_tools_gpu_plan pl;
    if (!rc && on_gpu && wgllm_tools_gpu_plan(m, n_ctx, o->gpu_mem, &pl, &err) == WGLLM_STATUS_OK) {
        const double gbs = pl.token_bytes * tg_median / 1e9;
        if (o->json)
            printf("{\"webgpu\": {\"dispatches_per_token\": %d, \"dispatches_per_layer\": %d, \"bytes_per_token\": %llu, "
                   "\"tg_gb_per_s\": %.3f}}\n", pl.n_dispatches, pl.n_dispatches_layer,
                   (unsigned long long)pl.token_bytes, gbs);
        else
            printf("(webgpu decode step: %d dispatches, %d per layer; %.2f MiB of weights read per token, %.2f GB/s at the tg "
                   "median)\n", pl.n_dispatches, pl.n_dispatches_layer, pl.token_bytes / 1048576.0, gbs);
    }
    wgllm_model_free(m);
    return rc;
}
