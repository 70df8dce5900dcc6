/*
 * bench_cmd.c - `wgllm bench -m MODEL [-p 128] [-n 32] [-r 3] [--json]`:
 * prompt and generation tokens/s as llama-bench measures them; with
 * --parallel / --prefix-reuse the engine's tables (bench_engine.c).
 */
#include "cli.h"
#include "wgllm_tools.h"

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

/* Like llama-bench: pp = one batch of n_prompt tokens into an empty cache;
 * tg = n_gen single-token decodes from an empty cache; a warm-up run first. */
int wgllm_cli_bench(const struct opts *o) {
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
        if (o->json) {
            printf("{\"model\": \"%s\", \"threads\": %d, \"size_bytes\": %llu, "
                   "\"pp\": {\"tokens\": %d, \"min\": %.3f, \"median\": %.3f, \"max\": %.3f}, "
                   "\"tg\": {\"tokens\": %d, \"min\": %.3f, \"median\": %.3f, \"max\": %.3f}}\n",
                   name, threads, (unsigned long long)wgllm_model_size(m), o->n_prompt, sp.min, sp.median, sp.max,
                   o->n_predict, sg.min, sg.median, sg.max);
        } else {
            if (isatty(2)) fprintf(stderr, "\r                 \r");
            printf("%-32s %8s %7s %12s %12s %12s\n", "model", "size MiB", "threads", "test", "t/s median", "min..max");
            printf("%-32s %8.1f %7d %12s %12.2f %5.2f..%.2f\n", name, wgllm_model_size(m) / 1048576.0, threads, "pp", sp.median,
                   sp.min, sp.max);
            printf("%-32s %8.1f %7d %12s %12.2f %5.2f..%.2f\n", name, wgllm_model_size(m) / 1048576.0, threads, "tg",
                   sg.median, sg.min, sg.max);
            printf("(pp = %d-token prompt, tg = %d generated tokens, %d runs after a warm-up, cpu: %s)\n", o->n_prompt,
                   o->n_predict, o->reps, wgllm_cpu_features());
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
