/*
 * opts.c - what the commands of `wgllm` share: the common option parser
 * (one parser for the flags of every command that takes -m, -p, -n, ...), token-id
 * lists, and loading a model, a context or a file with the messages every
 * command prints the same way.
 */
#include "cli.h"

#include "wgllm_tools.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int wgllm_cli_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "wgllm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run `wgllm help` for usage)\n");
    return 2;
}

/* ---- option parsing ---------------------------------------------------- */

static bool parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < INT_MIN || v > INT_MAX) return false;
    *out = (int)v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || end == s || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Returns 0 on success, else the exit code of a usage error. */
int wgllm_cli_parse_opts(int argc, char **argv, struct opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_predict = 64;
    o->n_prompt = 128;
    o->reps = 3;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->seed = 1;
    o->keep = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define FLAG(name) (!strcmp(a, name))
#define NEED_VALUE()                                                       \
    do {                                                                   \
        if (!v) return wgllm_cli_usage_error("option %s needs a value", a);          \
        i++;                                                               \
    } while (0)
#define INT_VALUE(dst)                                                     \
    do {                                                                   \
        NEED_VALUE();                                                      \
        if (!parse_int(v, &(dst))) return wgllm_cli_usage_error("bad number '%s'", v); \
    } while (0)
#define FLOAT_VALUE(dst)                                                     \
    do {                                                                     \
        NEED_VALUE();                                                        \
        if (!parse_float(v, &(dst))) return wgllm_cli_usage_error("bad number '%s'", v); \
    } while (0)
        if (FLAG("-m") || FLAG("--model")) { NEED_VALUE(); o->model = v; }
        else if (FLAG("-p") || FLAG("--prompt")) {
            NEED_VALUE();
            o->prompt = v;               /* run/tokenize: the text */
            parse_int(v, &o->n_prompt);  /* bench: a prompt length */
        }
        else if (FLAG("--file") || FLAG("-f")) { NEED_VALUE(); o->file = v; }
        else if (FLAG("-o") || FLAG("--output")) { NEED_VALUE(); o->out = v; }
        else if (FLAG("--shape")) { NEED_VALUE(); o->shape = v; }
        else if (FLAG("--type")) { NEED_VALUE(); o->type = v; }
        else if (FLAG("--tokens")) { NEED_VALUE(); o->tokens = v; }
        else if (FLAG("--prompt-ids")) { NEED_VALUE(); o->prompt_ids = v; }
        else if (FLAG("--template-file")) { NEED_VALUE(); o->template_file = v; }
        else if (FLAG("--messages")) { NEED_VALUE(); o->messages = v; }
        else if (FLAG("--tools")) { NEED_VALUE(); o->tools = v; }
        else if (FLAG("--add-generation-prompt")) o->add_generation_prompt = true;
        else if (FLAG("-n") || FLAG("--n-predict")) INT_VALUE(o->n_predict);
        else if (FLAG("-r") || FLAG("--repetitions")) INT_VALUE(o->reps);
        else if (FLAG("-t") || FLAG("--threads")) INT_VALUE(o->threads);
        else if (FLAG("-c") || FLAG("--ctx")) INT_VALUE(o->ctx);
        else if (FLAG("--batch")) INT_VALUE(o->batch);
        else if (FLAG("--top-k")) INT_VALUE(o->top_k);
        else if (FLAG("--temp")) FLOAT_VALUE(o->temp);
        else if (FLAG("--top-p")) FLOAT_VALUE(o->top_p);
        else if (FLAG("--min-p")) FLOAT_VALUE(o->min_p);
        else if (FLAG("--seed") || FLAG("-s")) {
            NEED_VALUE();
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (errno || *end || end == v) return wgllm_cli_usage_error("bad seed '%s'", v);
            o->seed_set = true;
        }
        else if (FLAG("--parallel")) { NEED_VALUE(); o->parallel = v; }
        else if (FLAG("--prefix-reuse")) INT_VALUE(o->prefix_reuse);
        else if (FLAG("--json-schema")) { NEED_VALUE(); o->json_schema = v; }
        else if (FLAG("-b") || FLAG("--backend")) {
            NEED_VALUE();
            if (!strcmp(v, "cpu")) o->backend = WGLLM_BACKEND_CPU;
            else if (!strcmp(v, "webgpu")) o->backend = WGLLM_BACKEND_WEBGPU;
            else if (!strcmp(v, "auto")) o->backend = WGLLM_BACKEND_AUTO;
            else return wgllm_cli_usage_error("unknown backend '%s' (cpu, webgpu or auto)", v);
        }
        else if (FLAG("--plan")) o->plan = true;
        else if (FLAG("--membw")) o->membw = true;
        else if (FLAG("--gpu-mem")) {
            NEED_VALUE();
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            const double mul = *end == 'G' || *end == 'g' ? 1073741824.0 : *end == 'M' || *end == 'm' ? 1048576.0
                               : *end == 'K' || *end == 'k' ? 1024.0 : 1.0;
            if (mul > 1.0) end++;
            if (errno || *end || end == v || !(x > 0) || x * mul > 1e18) return wgllm_cli_usage_error("bad --gpu-mem '%s' (bytes, or a number with K, M or G)", v);
            o->gpu_mem = (uint64_t)(x * mul);
        }
        else if (FLAG("--stream-weights")) o->stream_weights = true;
        else if (FLAG("--quick")) o->quick = true;
        else if (FLAG("--cache")) { NEED_VALUE(); o->cache = v; }
        else if (FLAG("--budget")) INT_VALUE(o->budget);
        else if (FLAG("--dump-wgsl")) { NEED_VALUE(); o->dump_wgsl = v; }
        else if (FLAG("--ids")) o->ids = true;
        else if (FLAG("--no-special")) o->no_special = true;
        else if (FLAG("--parse-special")) o->parse_special = true;
        else if (FLAG("--split0")) o->split0 = true;
        else if (FLAG("--json")) o->json = true;
        else if (FLAG("--ignore-eos")) o->ignore_eos = true;
        else if (FLAG("--context-shift")) o->context_shift = true;
        else if (FLAG("--keep")) INT_VALUE(o->keep);
        else return wgllm_cli_usage_error("unknown option '%s'", a);
    }
    if (o->threads < 0) return wgllm_cli_usage_error("--threads must be >= 0, got %s", "a negative number");
    if (o->keep < -1) return wgllm_cli_usage_error("--keep must be >= -1 (-1: the whole prompt)%s", "");
    return 0;
}

/* "1,2,3" or "[1, 2, 3]" -> ids; returns count or -1 (message printed). */
int wgllm_cli_parse_ids(const char *s, int32_t **out) {
    size_t cap = 0, n = 0;
    int32_t *ids = NULL;
    if (!wgllm_grow((void **)&ids, &cap, 16, sizeof *ids)) goto oom; /* never NULL, even for no ids */
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '[' || *p == ']' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "wgllm: bad token id at '%.20s'\n", p);
            free(ids);
            return -1;
        }
        if (n == INT_MAX || !wgllm_grow((void **)&ids, &cap, n + 1, sizeof *ids)) goto oom;
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return (int)n;
oom:
    fprintf(stderr, "wgllm: out of memory reading token ids\n");
    free(ids);
    return -1;
}

void wgllm_cli_print_ids_json(FILE *f, const int32_t *ids, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputs("]\n", f);
}

/* ---- model, context, file ---------------------------------------------- */

static bool progress_cb(float p, void *ud) {
    (void)ud;
    if (isatty(2)) {
        fprintf(stderr, "\rloading model: %3d%%", (int)(p * 100.0f + 0.5f));
        if (p >= 1.0f) fprintf(stderr, "\r                     \r");
    }
    return true;
}

struct wgllm_model *wgllm_cli_load_model(const struct opts *o) {
    if (!o->model) {
        fprintf(stderr, "wgllm: no model given (use -m MODEL.gguf)\n");
        return NULL;
    }
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = o->threads;
    mp.progress = progress_cb;
    mp.stream_weights = o->stream_weights;
    struct wgllm_model *m;
    struct wgllm_error err;
    if (wgllm_model_load(o->model, &mp, &m, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return NULL;
    }
    return m;
}

struct wgllm_context *wgllm_cli_new_context(struct wgllm_model *m, const struct opts *o, int n_ctx) {
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = n_ctx;
    if (o->batch) cp.n_batch = o->batch; /* a negative one gets wgllm_context_init's error */
    cp.swa_full = o->context_shift;       /* a sliding-window ring cannot be shifted */
    cp.n_threads = o->threads;
    cp.backend = o->backend;
    cp.gpu_mem = o->gpu_mem;
    struct wgllm_context *c;
    struct wgllm_error err;
    if (wgllm_context_init(m, &cp, &c, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return NULL;
    }
    if (o->backend != WGLLM_BACKEND_CPU)
        fprintf(stderr, "backend: %s; GPU memory %.1f MiB\n", wgllm_context_backend(c),
                wgllm_context_gpu_memory(c) / 1048576.0);
    return c;
}

/* Reads a whole file; NULL with a message on failure. No size bound: the
 * user named the file, and a prompt may be large. */
char *wgllm_cli_read_file(const char *path, size_t *len) {
    char *data;
    struct wgllm_error err;
    if (wgllm_read_file(path, 0, &data, len, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: %s\n", err.message);
        return NULL;
    }
    return data;
}

/* Tokenizes text; returns count (ids malloc'd) or -1 after printing why. */
int wgllm_cli_tokenize_text(struct wgllm_model *m, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out) {
    struct wgllm_error err;
    int32_t n = wgllm_tokenize_alloc(m, text, len, add_special, parse_special, out, &err);
    if (n < 0) fprintf(stderr, "wgllm: error: %s\n", err.message);
    return n;
}
