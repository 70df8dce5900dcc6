/*
 * quantize_cmd.c - `wgllm quantize IN.gguf OUT.gguf TYPE [--allow-requantize]
 * [--pure] [-t N]`: the command-line face of wgllm_tools_quantize_file, with the
 * argument order of llama.cpp's llama-quantize.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool quantize_progress(float p, void *user) {
    int *last = user;
    int pct = (int)(p * 100.0f);
    if (pct != *last) {
        *last = pct;
        fprintf(stderr, "\rquantize: %3d%%", pct);
        fflush(stderr);
    }
    return true;
}

static int quantize_usage(const char *why) {
    if (why) fprintf(stderr, "wgllm quantize: %s\n", why);
    fprintf(stderr,
            "usage: wgllm quantize IN.gguf OUT.gguf TYPE [--allow-requantize] [--pure] [-t N]\n"
            "  TYPE: %s\n"
            "        (Q3_K, Q4_K, Q5_K mean Q3_K_M, Q4_K_M, Q5_K_M, as in llama.cpp)\n"
            "  --allow-requantize  accept already-quantized input (loses quality)\n"
            "  --pure              every weight matrix gets TYPE (no per-tensor mix)\n"
            "  -t N                threads (default: all cores)\n",
            wgllm_tools_quantize_preset_list());
    return 2;
}

/* argv[0] is the first argument after "quantize". */
int wgllm_cli_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int npos = 0;
    struct wgllm_tools_quantize_params p = wgllm_tools_quantize_default_params();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = true;
        } else if (!strcmp(a, "--pure")) {
            p.pure = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            char *end = NULL;
            if (i + 1 >= argc) return quantize_usage("-t needs a number");
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 0 || v > 1024) return quantize_usage("bad thread count");
            p.n_threads = (int)v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(NULL);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "wgllm quantize: unknown option '%s'\n", a);
            return quantize_usage(NULL);
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            return quantize_usage("too many arguments");
        }
    }
    if (npos != 3) return quantize_usage("needs IN.gguf OUT.gguf TYPE");
    if (wgllm_tools_quantize_ftype_from_name(pos[2]) < 0) {
        /* the library says why (an I-quant preset: what it needs), before opening any file */
        struct wgllm_tools_quantize_params q = p;
        struct wgllm_error e = {0};
        q.preset = pos[2];
        const enum wgllm_status why = wgllm_tools_quantize_file(pos[0], pos[1], &q, &e);
        fprintf(stderr, "wgllm %s\n", e.message[0] ? e.message : "quantize: unknown type");
        return why == WGLLM_STATUS_UNSUPPORTED ? 1 : quantize_usage(NULL);
    }
    p.preset = pos[2];
    int last = -1;
    if (isatty(2)) {
        p.progress = quantize_progress;
        p.user_data = &last;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_tools_quantize_file(pos[0], pos[1], &p, &err);
    if (last >= 0) fprintf(stderr, "\n");
    if (st != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm %s\n", err.message);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "quantize: wrote %s (%s) in %.1f s\n", pos[1],
            wgllm_tools_quantize_ftype_name(wgllm_tools_quantize_ftype_from_name(pos[2])),
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
