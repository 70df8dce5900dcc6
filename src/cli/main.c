/*
 * main.c - the `wgllm` command: info, run, tokenize, logits, bench, synth.
 *
 * Every sub-command parses its own flags with the small table-free parser
 * below; errors print one line naming the problem and exit 1 (2 for usage).
 */
#include "wgllm.h"

#include "backend/backend.h"
#include "backend/webgpu/forward_webgpu.h"
#include "model/model.h"
#include "model/synth.h"
#include "server/server.h"
#include "quant/quant.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *usage_text =
    "usage: wgllm <command> [options]\n"
    "\n"
    "commands:\n"
    "  info     -m MODEL                  describe a GGUF model (architecture, shapes, types, memory)\n"
    "  run      -m MODEL -p PROMPT [-n N] generate text (greedy unless --temp > 0)\n"
    "           [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--ctx N] [--ignore-eos]\n"
    "           [--prompt-ids 1,2,3] [--ids]  token ids in / generated ids out (JSON)\n"
    "           [--context-shift [--keep N]]  when the context (--ctx) fills up, drop the oldest half\n"
    "           of the tokens after the first N (default: the prompt) and go on, instead of failing\n"
    "  tokenize -m MODEL (-p TEXT | --file PATH) [--ids] [--no-special] [--parse-special]\n"
    "  template -m MODEL --messages F.json [--tools F.json] [--template-file F] [--add-generation-prompt]\n"
    "           print the chat prompt (the model's template, or a built-in one by its special tokens)\n"
    "  logits   -m MODEL --tokens 1,2,3 -o OUT.f32   raw float32 logits of every position\n"
    "  bench    -m MODEL [-p 128] [-n 32] [-r 3] [--json]   prompt and generation tokens/s\n"
    "           [--parallel 1,4,8] [--prefix-reuse 1000]   the engine: concurrent streams, cache reuse\n"
    "  chat     -m MODEL [--template-file F] [-n N] [--temp T]   interactive chat; /reset starts over,\n"
    "           Ctrl-C stops a reply, Ctrl-D exits; earlier turns stay in the KV cache\n"
    "           [--ctx N] [--context-shift [--keep N]]   a reply that fills the context shifts it (as run)\n"
    "  devices                            list the compute devices (WebGPU adapter, limits, features)\n"
    "  tune     -m MODEL [--quick] [--cache FILE] [--budget S]   autotune the WebGPU kernels on this\n"
    "           adapter with the model's matrix shapes; the best is cached per adapter\n"
    "  synth    --shape NAME [--type q8_0] [--seed 1] [-o OUT.gguf]   write a synthetic model\n"
    "  quantize IN.gguf OUT.gguf TYPE [--allow-requantize] [--pure] [-t N]   convert the weights\n"
    "           (TYPE: Q4_K_M, Q5_K_M, Q3_K_M, Q6_K, Q8_0, Q4_0, IQ4_XS, F16, ... as llama.cpp)\n"
    "  split    IN.gguf OUT_PREFIX [--split-max-size 512M] [--split-max-tensors N]   write shards\n"
    "           OUT_PREFIX-00001-of-0000N.gguf (llama.cpp's gguf-split layout; load the first)\n"
    "  serve    -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-size N] [--api-key KEY]\n"
    "           [--chat-template FILE]   OpenAI-compatible HTTP server (`wgllm serve --help`)\n"
    "\n"
    "common options: -t/--threads N (default: all cores)\n"
    "                -b/--backend cpu|webgpu|auto (run, bench, logits, info; default cpu; auto = WebGPU\n"
    "                on a hardware GPU adapter, else the CPU; info --plan prints the WebGPU memory plan)\n"
    "                --gpu-mem SIZE (WebGPU memory budget, e.g. 512M or 2G: the context shrinks to fit)\n"
    "                --stream-weights (WebGPU only: map nothing; the weights go from the file to the GPU\n"
    "                in bounded chunks and never sit in memory, as in the browser)\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "wgllm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run `wgllm help` for usage)\n");
    return 2;
}

/* ---- option parsing ---------------------------------------------------- */

#include "cli/cli.h"

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
static int parse_opts(int argc, char **argv, struct opts *o) {
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
        if (!v) return usage_error("option %s needs a value", a);          \
        i++;                                                               \
    } while (0)
#define INT_VALUE(dst)                                                     \
    do {                                                                   \
        NEED_VALUE();                                                      \
        if (!parse_int(v, &(dst))) return usage_error("bad number '%s'", v); \
    } while (0)
#define FLOAT_VALUE(dst)                                                     \
    do {                                                                     \
        NEED_VALUE();                                                        \
        if (!parse_float(v, &(dst))) return usage_error("bad number '%s'", v); \
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
        else if (FLAG("--top-k")) INT_VALUE(o->top_k);
        else if (FLAG("--temp")) FLOAT_VALUE(o->temp);
        else if (FLAG("--top-p")) FLOAT_VALUE(o->top_p);
        else if (FLAG("--min-p")) FLOAT_VALUE(o->min_p);
        else if (FLAG("--seed") || FLAG("-s")) {
            NEED_VALUE();
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (errno || *end || end == v) return usage_error("bad seed '%s'", v);
            o->seed_set = true;
        }
        else if (FLAG("--parallel")) { NEED_VALUE(); o->parallel = v; }
        else if (FLAG("--prefix-reuse")) INT_VALUE(o->prefix_reuse);
        else if (FLAG("-b") || FLAG("--backend")) {
            NEED_VALUE();
            if (!strcmp(v, "cpu")) o->backend = WGLLM_BACKEND_CPU;
            else if (!strcmp(v, "webgpu")) o->backend = WGLLM_BACKEND_WEBGPU;
            else if (!strcmp(v, "auto")) o->backend = WGLLM_BACKEND_AUTO;
            else return usage_error("unknown backend '%s' (cpu, webgpu or auto)", v);
        }
        else if (FLAG("--plan")) o->plan = true;
        else if (FLAG("--gpu-mem")) {
            NEED_VALUE();
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            const double mul = *end == 'G' || *end == 'g' ? 1073741824.0 : *end == 'M' || *end == 'm' ? 1048576.0
                               : *end == 'K' || *end == 'k' ? 1024.0 : 1.0;
            if (mul > 1.0) end++;
            if (errno || *end || end == v || !(x > 0) || x * mul > 1e18) return usage_error("bad --gpu-mem '%s' (bytes, or a number with K, M or G)", v);
            o->gpu_mem = (uint64_t)(x * mul);
        }
        else if (FLAG("--stream-weights")) o->stream_weights = true;
        else if (FLAG("--quick")) o->quick = true;
        else if (FLAG("--cache")) { NEED_VALUE(); o->cache = v; }
        else if (FLAG("--budget")) INT_VALUE(o->budget);
        else if (FLAG("--ids")) o->ids = true;
        else if (FLAG("--no-special")) o->no_special = true;
        else if (FLAG("--parse-special")) o->parse_special = true;
        else if (FLAG("--json")) o->json = true;
        else if (FLAG("--ignore-eos")) o->ignore_eos = true;
        else if (FLAG("--context-shift")) o->context_shift = true;
        else if (FLAG("--keep")) INT_VALUE(o->keep);
        else return usage_error("unknown option '%s'", a);
    }
    if (o->threads < 0) return usage_error("--threads must be >= 0, got %s", "a negative number");
    if (o->keep < -1) return usage_error("--keep must be >= -1 (-1: the whole prompt)%s", "");
    return 0;
}

/* "1,2,3" or "[1, 2, 3]" -> ids; returns count or -1 (message printed). */
static int parse_ids(const char *s, int32_t **out) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return -1;
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
        if (n == cap) {
            int32_t *q = realloc(ids, (cap *= 2) * sizeof(int32_t));
            if (!q) {
                free(ids);
                return -1;
            }
            ids = q;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return (int)n;
}

static void print_ids_json(FILE *f, const int32_t *ids, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputs("]\n", f);
}

/* ---- model loading with progress --------------------------------------- */

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

static struct wgllm_context *new_context(struct wgllm_model *m, const struct opts *o, int n_ctx) {
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = n_ctx;
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

/* Reads a whole file; NULL with a message on failure. */
char *wgllm_cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wgllm: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, r;
    char *buf = malloc(cap + 1);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *q = realloc(buf, (cap *= 2) + 1);
            if (!q) free(buf);
            buf = q;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "wgllm: out of memory reading '%s'\n", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Tokenizes text; returns count (ids malloc'd) or -1 after printing why. */
static int tokenize_text(struct wgllm_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t **out) {
    struct wgllm_error err;
    int32_t n = wgllm_tokenize_alloc(m, text, len, add_special, parse_special, out, &err);
    if (n < 0) fprintf(stderr, "wgllm: error: %s\n", err.message);
    return n;
}

/* ---- commands -------------------------------------------------------- */

static int cmd_info(const struct opts *o) {
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    int need = wgllm_model_describe(m, NULL, 0);
    char *buf = malloc((size_t)need + 1);
    wgllm_model_describe(m, buf, (size_t)need + 1);
    fputs(buf, stdout);
    free(buf);
    if (wgllm_model_n_layer(m) > 0) {
        int n_ctx = o->ctx > 0 ? o->ctx : (wgllm_model_n_ctx_train(m) < 4096 ? wgllm_model_n_ctx_train(m) : 4096);
        struct wgllm_context *c = new_context(m, o, n_ctx);
        if (c) {
            /* the CPU backend repacks Q4_0/Q8_0 matrices when its first context is made */
            const uint64_t rp = wgllm_model_repacked_bytes(m);
            char rps[64] = "";
            if (rp) snprintf(rps, sizeof rps, " + %.1f MiB repacked for the CPU", rp / 1048576.0);
            printf("memory:        %.1f MiB weights (mapped)%s + %.1f MiB context (KV cache for %d tokens and scratch)\n",
                   wgllm_model_size(m) / 1048576.0, rps, wgllm_context_memory(c) / 1048576.0, n_ctx);
            wgllm_context_free(c);
        }
    }
    printf("cpu:           %s\n", wgllm_cpu_features());
    int rc = 0;
    if (o->plan && wgllm_model_n_layer(m) > 0) { /* the WebGPU memory plan, allocated for real */
        int n_ctx = o->ctx > 0 ? o->ctx : (wgllm_model_n_ctx_train(m) < 4096 ? wgllm_model_n_ctx_train(m) : 4096);
        struct wgllm_webgpu_ctx *g = NULL;
        char why[320] = "";
        struct wgllm_error err;
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_ctx = n_ctx, cp.backend = WGLLM_BACKEND_WEBGPU, cp.gpu_mem = o->gpu_mem;
        if (wgllm_webgpu_ctx_create(m, &cp, &g, why, sizeof why, &err) != WGLLM_STATUS_OK) {
            fprintf(stderr, "wgllm: error: %s\n", err.message);
            rc = 1;
        } else {
            struct wgllm_webgpu_plan pl;
            wgllm_webgpu_get_plan(g, &pl);
            printf("webgpu plan:   %s, %d sequence(s) x %d positions, batches of %d tokens\n", why, pl.n_seq, pl.n_ctx,
                   pl.n_batch);
            if (pl.budget) printf("  budget       %10.2f MiB (--gpu-mem)\n", pl.budget / 1048576.0);
            if (pl.note[0]) printf("  shrunk:      %s\n", pl.note);
            printf("  weights      %10.2f MiB (%d tensors split by rows)\n", pl.weights / 1048576.0, pl.n_split_tensors);
            printf("  vectors      %10.2f MiB\n", pl.vectors / 1048576.0);
            printf("  kv cache     %10.2f MiB (f16)\n", pl.kv_cache / 1048576.0);
            printf("  activations  %10.2f MiB\n", pl.activations / 1048576.0);
            printf("  logits       %10.2f MiB (%d rows per pass, with readback)\n", pl.logits / 1048576.0, pl.out_rows);
            printf("  params       %10.2f MiB (%d arena slots)\n", pl.params / 1048576.0, pl.n_param_slots);
            printf("  total        %10.2f MiB in %d buffers; %d pipelines, %d dispatches per token\n",
                   pl.total / 1048576.0, pl.n_buffers, pl.n_pipelines, pl.n_dispatches);
            wgllm_webgpu_ctx_free(g);
        }
    }
    wgllm_model_free(m);
    return rc;
}

static int cmd_tokenize(const struct opts *o) {
    if (!o->prompt && !o->file) return usage_error("tokenize needs -p TEXT or --file PATH%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    size_t len;
    char *text = o->file ? wgllm_cli_read_file(o->file, &len) : strdup(o->prompt);
    if (!text) {
        wgllm_model_free(m);
        return 1;
    }
    if (!o->file) len = strlen(text);
    int32_t *ids;
    int n = tokenize_text(m, text, len, !o->no_special, o->parse_special, &ids);
    free(text);
    if (n < 0) {
        wgllm_model_free(m);
        return 1;
    }
    if (o->ids) { /* as llama-tokenize --ids: one line, space-separated */
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    } else {
        for (int i = 0; i < n; i++) {
            char piece[256];
            int32_t k = wgllm_token_to_piece(m, ids[i], piece, sizeof(piece), true);
            printf("%6d -> '%.*s'\n", ids[i], k > 0 ? k : 0, piece);
        }
    }
    free(ids);
    wgllm_model_free(m);
    return 0;
}

static int cmd_logits(const struct opts *o) {
    if (!o->tokens || !o->out) return usage_error("logits needs --tokens IDS and -o OUT.f32%s", "");
    int32_t *ids;
    int n = parse_ids(o->tokens, &ids);
    if (n <= 0) {
        if (n == 0) fprintf(stderr, "wgllm: --tokens is empty\n");
        return 1;
    }
    struct wgllm_model *m = wgllm_cli_load_model(o);
    struct wgllm_context *c = m ? new_context(m, o, n) : NULL;
    int rc = 1;
    struct wgllm_error err;
    if (c && wgllm_decode(c, ids, n, true, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
    } else if (c) {
        FILE *f = fopen(o->out, "wb");
        if (!f) {
            fprintf(stderr, "wgllm: cannot write '%s': %s\n", o->out, strerror(errno));
        } else {
            const int V = wgllm_model_n_vocab(m);
            bool ok = true;
            for (int i = 0; i < n && ok; i++) ok = fwrite(wgllm_get_logits_ith(c, i), sizeof(float), (size_t)V, f) == (size_t)V;
            ok = (fclose(f) == 0) && ok;
            if (!ok) fprintf(stderr, "wgllm: error writing '%s'\n", o->out);
            rc = ok ? 0 : 1;
        }
    }
    wgllm_context_free(c);
    wgllm_model_free(m);
    free(ids);
    return rc;
}

/* The CLI's output of one generated token (greedy on the GPU); false stops. */
struct run_emit {
    const struct opts *o;
    struct wgllm_model *m;
    struct wgllm_detokenizer *d;
    int32_t *gen;
    int n_gen;
};
static bool run_emit_token(int32_t tok, void *ud) {
    struct run_emit *r = ud;
    if (!r->o->ignore_eos && wgllm_token_is_eog(r->m, tok)) return false;
    r->gen[r->n_gen++] = tok;
    if (!r->o->ids) {
        size_t len;
        const char *txt = wgllm_detokenizer_push(r->d, tok, &len);
        fwrite(txt, 1, len, stdout);
        fflush(stdout);
    }
    return r->n_gen < r->o->n_predict;
}

static int cmd_run(const struct opts *o) {
    if (!o->prompt && !o->prompt_ids && !o->file) return usage_error("run needs -p PROMPT or --prompt-ids IDS%s", "");
    if (o->n_predict < 0) return usage_error("-n must be >= 0%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    int32_t *ids = NULL;
    int n;
    if (o->prompt_ids) {
        n = parse_ids(o->prompt_ids, &ids);
    } else {
        size_t len;
        char *text = o->file ? wgllm_cli_read_file(o->file, &len) : strdup(o->prompt);
        if (text && !o->file) len = strlen(text);
        n = text ? tokenize_text(m, text, len, true, o->parse_special, &ids) : -1;
        free(text);
    }
    if (n <= 0) {
        if (n == 0) fprintf(stderr, "wgllm: the prompt is empty\n");
        free(ids);
        wgllm_model_free(m);
        return 1;
    }
    int n_ctx = o->ctx > 0 ? o->ctx : n + o->n_predict;
    struct wgllm_context *c = new_context(m, o, n_ctx);
    if (!c) {
        free(ids);
        wgllm_model_free(m);
        return 1;
    }
    struct wgllm_sampler_params sp = wgllm_sampler_default_params();
    sp.temperature = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.seed = o->seed;
    struct wgllm_sampler *s = wgllm_sampler_init(&sp, wgllm_model_n_vocab(m));
    struct wgllm_detokenizer *d = wgllm_detokenizer_init(m);
    int32_t *gen = malloc(((size_t)o->n_predict + 1) * sizeof(int32_t));
    struct wgllm_error err;
    int rc = 0, n_gen = 0;
    int64_t t0 = wgllm_time_us();
    enum wgllm_status st = wgllm_decode(c, ids, n, false, &err);
    int64_t t1 = wgllm_time_us();
    if (!o->ids && !o->prompt_ids) {
        fwrite(o->file ? "" : o->prompt, 1, o->file ? 0 : strlen(o->prompt), stdout);
        fflush(stdout);
    }
    /* on WebGPU, greedy or a plain sampler chain: tokens picked on the GPU,
     * step N+1 queued before token N is read */
    const bool on_device = wgllm_context_can_generate(c, &sp);
#define GPU_GENERATE(n_) wgllm_context_generate(c, &sp, (n_), run_emit_token, &re, &n_out, &err)
    if (st == WGLLM_STATUS_OK && on_device && o->n_predict > 0) {
        struct run_emit re = {o, m, d, gen, 0};
        int n_out;
        st = GPU_GENERATE(o->n_predict);
        /* a full context: shift it (the rule of the loop below), decode the last token given, go on */
        while (st == WGLLM_STATUS_CONTEXT_FULL && o->context_shift && re.n_gen > 0 && re.n_gen < o->n_predict) {
            const int n_past = wgllm_context_n_past(c);
            int keep = o->keep < 0 ? n : o->keep + (ids[0] == wgllm_token_bos(m));
            st = wgllm_context_shift(c, keep < n_past / 2 ? keep : n_past / 2, 0, &err);
            if (st == WGLLM_STATUS_OK) st = wgllm_decode(c, &gen[re.n_gen - 1], 1, false, &err);
            if (st == WGLLM_STATUS_OK)
                st = GPU_GENERATE(o->n_predict - re.n_gen);
        }
        n_gen = re.n_gen;
    } else
    while (st == WGLLM_STATUS_OK && n_gen < o->n_predict) {
        int32_t tok = wgllm_sampler_sample(s, wgllm_get_logits(c));
        if (!o->ignore_eos && wgllm_token_is_eog(m, tok)) break;
        gen[n_gen++] = tok;
        if (!o->ids) {
            size_t len;
            const char *txt = wgllm_detokenizer_push(d, tok, &len);
            fwrite(txt, 1, len, stdout);
            fflush(stdout);
        }
        if (n_gen == o->n_predict) break;
        const int n_past = wgllm_context_n_past(c);
        if (o->context_shift && n_past >= wgllm_context_n_ctx(c)) { /* llama.cpp's rule: keep, drop half the rest */
            int keep = o->keep < 0 ? n : o->keep + (ids[0] == wgllm_token_bos(m));
            st = wgllm_context_shift(c, keep < n_past / 2 ? keep : n_past / 2, 0, &err);
            if (st != WGLLM_STATUS_OK) break;
        }
        st = wgllm_decode(c, &tok, 1, false, &err);
    }
    int64_t t2 = wgllm_time_us();
    if (st != WGLLM_STATUS_OK) {
        fprintf(stderr, "\nwgllm: error: %s%s\n", err.message,
                st == WGLLM_STATUS_CONTEXT_FULL && n_gen > 0 ? " (--context-shift goes on past a full context)" : "");
        rc = 1;
    }
    if (o->ids) {
        print_ids_json(stdout, gen, n_gen);
    } else {
        size_t len;
        const char *txt = wgllm_detokenizer_flush(d, &len);
        fwrite(txt, 1, len, stdout);
        fputc('\n', stdout);
    }
    fprintf(stderr, "\nprompt: %d tokens, %.2f tok/s | generation: %d tokens, %.2f tok/s", n,
            n / ((t1 - t0) / 1e6), n_gen, n_gen > 1 ? (n_gen - 1) / ((t2 - t1) / 1e6) : 0.0);
    if (wgllm_context_gpu_memory(c)) /* constant after load: the plan allocated everything */
        fprintf(stderr, " | GPU memory %.1f MiB", wgllm_context_gpu_memory(c) / 1048576.0);
    fprintf(stderr, " | %s\n", wgllm_context_backend(c));
    free(gen);
    wgllm_detokenizer_free(d);
    wgllm_sampler_free(s);
    wgllm_context_free(c);
    wgllm_model_free(m);
    free(ids);
    return rc;
}

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
static int cmd_bench(const struct opts *o) {
    if (o->parallel || o->prefix_reuse > 0) {
        struct wgllm_model *m = wgllm_cli_load_model(o);
        if (!m) return 1;
        int rc = wgllm_cli_bench_engine(m, o);
        wgllm_model_free(m);
        return rc;
    }
    if (o->n_prompt <= 0 || o->n_predict <= 0 || o->reps <= 0) return usage_error("bench needs -p, -n and -r > 0%s", "");
    struct wgllm_model *m = wgllm_cli_load_model(o);
    if (!m) return 1;
    struct wgllm_context *c = new_context(m, o, WGLLM_MAX(o->n_prompt, o->n_predict));
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
    free(pp);
    free(tg);
    free(toks);
    wgllm_context_free(c);
    wgllm_model_free(m);
    return rc;
}

static int cmd_synth(const struct opts *o) {
    if (!o->shape) {
        fprintf(stderr, "wgllm: synth needs --shape; shapes:");
        for (const char *const *s = wgllm_synth_shape_names(); *s; s++) fprintf(stderr, " %s", *s);
        fprintf(stderr, "\n");
        return 2;
    }
    struct wgllm_synth_params p = wgllm_synth_default_params();
    p.shape = o->shape;
    const char *type = o->type ? o->type : "q8_0";
    int t = wgllm_type_from_name(type);
    if (t < 0) return usage_error("unknown type '%s'", type);
    p.type = (uint32_t)t;
    p.seed = o->seed;
    char path[512];
    if (o->out) {
        snprintf(path, sizeof(path), "%s", o->out);
    } else {
        snprintf(path, sizeof(path), "models/%s-%s.gguf", o->shape, type);
        if (access("models", F_OK) != 0 && mkdir("models", 0755) != 0) {
            fprintf(stderr, "wgllm: cannot create folder 'models'\n");
            return 1;
        }
    }
    struct wgllm_error err;
    int64_t t0 = wgllm_time_us();
    if (wgllm_synth_write(&p, path, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s, %s, seed %llu) in %.1f s\n", path, o->shape, type, (unsigned long long)o->seed,
            (wgllm_time_us() - t0) / 1e6);
    printf("%s\n", path);
    return 0;
}

int wgllm_cli_quantize(int argc, char **argv); /* quantize_cmd.c */

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve")) return wgllm_serve_main(argc - 2, argv + 2); /* own flags: src/server */
    if (!strcmp(argv[1], "quantize")) return wgllm_cli_quantize(argc - 2, argv + 2); /* positional args: quantize_cmd.c */
    if (!strcmp(argv[1], "split")) return wgllm_cli_split(argc - 2, argv + 2); /* positional args: split_cmd.c */
    struct opts o;
    int rc = parse_opts(argc - 2, argv + 2, &o);
    if (rc) return rc;
    const char *cmd = argv[1];
    if (!strcmp(cmd, "info")) return cmd_info(&o);
    if (!strcmp(cmd, "run")) return cmd_run(&o);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(&o);
    if (!strcmp(cmd, "template")) return wgllm_cli_template(&o);
    if (!strcmp(cmd, "chat")) return wgllm_cli_chat(&o);
    if (!strcmp(cmd, "logits")) return cmd_logits(&o);
    if (!strcmp(cmd, "bench")) return cmd_bench(&o);
    if (!strcmp(cmd, "synth")) return cmd_synth(&o);
    if (!strcmp(cmd, "devices")) return wgllm_cli_devices(&o);
    if (!strcmp(cmd, "tune")) return wgllm_cli_tune(&o);
    return usage_error("unknown command '%s'", cmd);
}
