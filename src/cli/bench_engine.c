/*
 * bench_engine.c - `wgllm bench --parallel 1,4,8 --prefix-reuse 1000`: what
 * the engine's batching and cache reuse buy, printed as tables.
 *
 * --parallel P: P streams submitted at once (P slots), each a short distinct
 *   prompt then -n generated tokens; aggregate throughput = all generated
 *   tokens / wall time from the first submit to the last token.
 * --prefix-reuse N: time to first token of a request whose first N tokens
 *   were seen before: cold (nothing cached), warm (same context_key, slot
 *   still resident) and restored (the slot was evicted into a snapshot).
 * --json-schema FILE: what constrained decoding costs: the schema's
 *   conversion to a grammar, then -n greedy tokens without and with the
 *   grammar (one engine, one slot, -r runs each, medians), decode tok/s and
 *   time to first token (the first constrained request also builds the
 *   model's piece table).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wgllm_engine *bench_engine(struct wgllm_model *m, const struct opts *o, int slots, int n_ctx) {
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.n_slots = slots;
    ep.n_ctx = n_ctx;
    ep.n_threads = o->threads;
    ep.backend = o->backend, ep.gpu_mem = o->gpu_mem;
    ep.snapshot_bytes = (size_t)1 << 30;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err;
    if (wgllm_engine_init(m, &ep, &e, &err) != WGLLM_STATUS_OK) fprintf(stderr, "wgllm: error: %s\n", err.message);
    return e;
}

static int bench_parallel(struct wgllm_model *m, const struct opts *o) {
    const int n_gen = o->n_predict > 0 ? o->n_predict : 32;
    printf("%-9s %10s %14s %16s %12s\n", "streams", "gen tokens", "wall s", "aggregate t/s", "per-stream t/s");
    const char *p = o->parallel;
    while (*p) {
        char *end;
        long P = strtol(p, &end, 10);
        if (end == p || P <= 0 || P > 64) {
            fprintf(stderr, "wgllm: bad --parallel list '%s' (numbers 1..64, comma-separated)\n", o->parallel);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
        struct wgllm_engine *e = bench_engine(m, o, (int)P, 64 + n_gen);
        if (!e) return 1;
        struct wgllm_request_params rp = wgllm_request_default_params();
        rp.max_tokens = n_gen;
        rp.ignore_eos = true;
        struct wgllm_request **req = calloc((size_t)P, sizeof(*req));
        char prompt[128];
        /* warm-up: one request through the engine */
        struct wgllm_result res;
        wgllm_query(e, "warm up", &rp, &res, NULL);
        wgllm_result_free(&res);
        int64_t t0 = wgllm_time_us();
        for (long i = 0; i < P; i++) {
            snprintf(prompt, sizeof(prompt), "Stream %ld tells a story about the number %ld and", i, i * 7919);
            struct wgllm_error err;
            if (wgllm_engine_submit_query(e, prompt, strlen(prompt), &rp, &req[i], &err) != WGLLM_STATUS_OK) {
                fprintf(stderr, "wgllm: error: %s\n", err.message);
                req[i] = NULL;
            }
        }
        long total = 0;
        double per_stream = 0;
        for (long i = 0; i < P; i++) {
            if (!req[i]) continue;
            wgllm_request_wait(req[i], &res);
            total += res.n_tokens;
            per_stream += res.timings.decode_tok_s;
            wgllm_result_free(&res);
        }
        double wall = (wgllm_time_us() - t0) / 1e6;
        printf("%-9ld %10ld %14.2f %16.2f %12.2f\n", P, total, wall, total / wall, per_stream / (double)P);
        free(req);
        wgllm_engine_free(e);
    }
    return 0;
}

/* Text of about n tokens (whole sentences). */
static char *text_of_tokens(struct wgllm_model *m, int n, const char *topic) {
    size_t cap = (size_t)n * 16 + 256, len = 0;
    char *t = malloc(cap);
    t[0] = 0;
    for (int k = 0;; k++) {
        int32_t cnt = wgllm_tokenize(m, t, len, NULL, 0, true, false, NULL);
        if ((cnt < 0 ? -cnt : cnt) >= n || len + 128 >= cap) break;
        len += (size_t)snprintf(t + len, cap - len, "The %s of day %d was recorded carefully in the log. ", topic, k);
    }
    return t;
}

static double ttft(struct wgllm_engine *e, const char *text, const char *key, int *cached) {
    struct wgllm_request_params rp = wgllm_request_default_params();
    rp.max_tokens = 1;
    rp.ignore_eos = true;
    rp.context_key = key;
    struct wgllm_result res;
    struct wgllm_error err;
    if (wgllm_query(e, text, &rp, &res, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return -1;
    }
    double t = res.timings.ttft_ms;
    *cached = res.usage.cached_tokens;
    wgllm_result_free(&res);
    return t;
}

static char *concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static int bench_prefix(struct wgllm_model *m, const struct opts *o) {
    const int N = o->prefix_reuse;
    char *shared = text_of_tokens(m, N, "weather"), *other = text_of_tokens(m, N, "tide");
    char *q1 = concat(shared, "Question one: what was the first entry?"),
         *q2 = concat(shared, "Question two: what was the last entry?");
    const int n_ctx = N + 256;
    int c_cold, c_warm, c_snap, c_tmp;
    /* cold: nothing in the cache */
    struct wgllm_engine *e = bench_engine(m, o, 2, n_ctx);
    if (!e) return 1;
    ttft(e, "warm up", NULL, &c_tmp);
    double cold = ttft(e, q2, NULL, &c_cold);
    wgllm_engine_free(e);
    /* warm: the conversation's slot is still resident */
    e = bench_engine(m, o, 2, n_ctx);
    ttft(e, q1, "conv", &c_tmp);
    double warm = ttft(e, q2, "conv", &c_warm);
    wgllm_engine_free(e);
    /* restored: one slot; another conversation evicted it into a snapshot */
    e = bench_engine(m, o, 1, n_ctx);
    ttft(e, q1, "conv", &c_tmp);
    ttft(e, other, "other", &c_tmp);
    double snap = ttft(e, q2, "conv", &c_snap);
    struct wgllm_engine_metrics met;
    wgllm_engine_metrics(e, &met);
    wgllm_engine_free(e);
    int32_t n_q2 = wgllm_tokenize(m, q2, strlen(q2), NULL, 0, true, false, NULL);
    printf("time to first token, follow-up of %d tokens sharing a %d-token prefix:\n", n_q2 < 0 ? -n_q2 : n_q2, N);
    printf("%-28s %10s %14s\n", "case", "ttft ms", "cached tokens");
    printf("%-28s %10.1f %14d   (prefill through the engine's chunks: %.1f tokens/s)\n", "cold (no cache)", cold,
           c_cold, (n_q2 < 0 ? -n_q2 : n_q2) / (cold / 1e3));
    printf("%-28s %10.1f %14d\n", "warm (context_key)", warm, c_warm);
    printf("%-28s %10.1f %14d   (snapshots restored: %llu)\n", "restored from snapshot", snap, c_snap,
           (unsigned long long)met.snapshots_restored);
    free(shared), free(other), free(q1), free(q2);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bench_grammar(struct wgllm_model *m, const struct opts *o) {
    size_t len = 0;
    char *schema = wgllm_cli_read_file(o->json_schema, &len);
    if (!schema) return 1;
    const int n_gen = o->n_predict > 0 ? o->n_predict : 64, reps = o->reps > 0 ? o->reps : 3;
    double conv[32];
    char *gbnf = NULL;
    struct wgllm_error err;
    for (int r = 0; r < reps && r < 32; r++) {
        free(gbnf);
        const int64_t t0 = wgllm_time_us();
        if (wgllm_json_schema_to_grammar(schema, len, &gbnf, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "wgllm: error: %s\n", err.message);
            free(schema);
            return 1;
        }
        conv[r] = (wgllm_time_us() - t0) / 1e3;
    }
    struct wgllm_engine *e = bench_engine(m, o, 1, 256 + n_gen);
    if (!e) return free(schema), free(gbnf), 1;
    struct wgllm_request_params rp = wgllm_request_default_params();
    rp.max_tokens = n_gen;
    rp.sampling.temperature = 0;
    const char *prompt = "Reply with the JSON object:";
    struct wgllm_result res;
    wgllm_query(e, "warm up", &rp, &res, NULL);
    wgllm_result_free(&res);
    printf("schema %s: %zu bytes -> grammar %zu bytes in %.2f ms (median of %d)\n", o->json_schema, len, strlen(gbnf),
           median(conv, reps < 32 ? reps : 32), reps);
    printf("%-14s %8s %10s %12s %10s\n", "decoding", "tokens", "ttft ms", "decode t/s", "finish");
    double first_ttft = 0;
    int rc = 0;
    for (int constrained = 0; constrained < 2 && !rc; constrained++) {
        double tps[32], ttft_ms[32];
        int toks = 0;
        const char *fin = "";
        rp.ignore_eos = !constrained; /* unconstrained: always n tokens; constrained: the grammar says when */
        rp.grammar = constrained ? gbnf : NULL;
        rp.grammar_len = constrained ? strlen(gbnf) : 0;
        for (int r = 0; r < reps && r < 32; r++) {
            if (wgllm_query(e, prompt, &rp, &res, &err) != WGLLM_STATUS_OK) {
                fprintf(stderr, "wgllm: error: %s\n", err.message);
                rc = 1;
                break;
            }
            tps[r] = res.timings.decode_tok_s, ttft_ms[r] = res.timings.ttft_ms;
            if (constrained && r == 0) first_ttft = res.timings.ttft_ms;
            toks = res.n_tokens;
            fin = res.finish == WGLLM_FINISH_STOP ? "stop" : res.finish == WGLLM_FINISH_LENGTH ? "length" : "other";
            wgllm_result_free(&res);
        }
        if (rc) break;
        const int n = reps < 32 ? reps : 32;
        printf("%-14s %8d %10.1f %12.2f %10s\n", constrained ? "json schema" : "unconstrained", toks, median(ttft_ms, n),
               median(tps, n), fin);
    }
    if (!rc) printf("first constrained request's ttft (builds the piece table): %.1f ms\n", first_ttft);
    wgllm_engine_free(e);
    free(schema), free(gbnf);
    return rc;
}

int wgllm_cli_bench_engine(struct wgllm_model *m, const struct opts *o) {
    int rc = 0;
    if (o->json_schema) return bench_grammar(m, o);
    if (o->parallel) rc = bench_parallel(m, o);
    if (!rc && o->prefix_reuse > 0) rc = bench_prefix(m, o);
    return rc;
}
