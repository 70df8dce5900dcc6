/*
 * split_cmd.c - `wgllm split IN.gguf OUT_PREFIX [--split-max-size 512M]
 * [--split-max-tensors N]`: the command-line face of wgllm_tools_split,
 * with the argument names of llama.cpp's gguf-split. Shards come out as
 * OUT_PREFIX-00001-of-0000N.gguf; load a split model by its first shard.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int split_usage(const char *why, const char *arg) {
    if (why) {
        fprintf(stderr, "wgllm split: ");
        fprintf(stderr, why, arg ? arg : "");
        fprintf(stderr, "\n");
    }
    fprintf(stderr,
            "usage: wgllm split IN.gguf OUT_PREFIX [--split-max-size SIZE] [--split-max-tensors N]\n"
            "  writes OUT_PREFIX-00001-of-0000N.gguf ... (llama.cpp's gguf-split layout)\n"
            "  --split-max-size SIZE     tensor data per shard: bytes or K/M/G (binary, 512M = 512 MiB);\n"
            "                            default 512M; a shard holds at least one tensor\n"
            "  --split-max-tensors N     at most N tensors per shard (alone: no size limit)\n");
    return 2;
}

static void split_on_shard(int no, int count, const char *path, int64_t n_tensors, uint64_t bytes, void *user) {
    (void)user;
    fprintf(stderr, "%s[%d/%d] %s: %lld tensors, %.1f MiB\n", isatty(2) ? "\r" : "", no, count, path,
            (long long)n_tensors, (double)bytes / (1 << 20));
}

static bool split_progress(float p, void *user) {
    int *last = user;
    int pct = (int)(p * 100.0f);
    if (pct != *last) {
        *last = pct;
        fprintf(stderr, "\rsplit: %3d%%", pct);
        fflush(stderr);
    }
    return true;
}

/* argv[0] is the first argument after "split". */
int wgllm_cli_split(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0;
    bool size_set = false, tensors_set = false;
    struct wgllm_tools_split_params p = wgllm_tools_split_default_params();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--split-max-size")) {
            if (i + 1 >= argc) return split_usage("--split-max-size needs a size (e.g. 512M)", NULL);
            if (!wgllm_tools_split_parse_size(argv[++i], &p.max_bytes))
                return split_usage("bad size '%s' (want bytes or a whole number with K, M or G, e.g. 512M)", argv[i]);
            size_set = true;
        } else if (!strcmp(a, "--split-max-tensors")) {
            char *end = NULL;
            if (i + 1 >= argc) return split_usage("--split-max-tensors needs a number", NULL);
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || end == argv[i] || v <= 0) return split_usage("bad tensor count '%s' (want a number > 0)", argv[i]);
            p.max_tensors = v;
            tensors_set = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            split_usage(NULL, NULL);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            return split_usage("unknown option '%s'", a);
        } else if (npos < 2) {
            pos[npos++] = a;
        } else {
            return split_usage("too many arguments (extra: '%s')", a);
        }
    }
    if (npos != 2) return split_usage("needs IN.gguf and OUT_PREFIX", NULL);
    if (tensors_set && !size_set) p.max_bytes = 0; /* as gguf-split: one mode unless both are given */
    int last = -1;
    p.on_shard = split_on_shard;
    if (isatty(2)) {
        p.progress = split_progress;
        p.user_data = &last;
    }
    struct wgllm_error err = {0};
    int n = 0;
    if (wgllm_tools_split(pos[0], pos[1], &p, &n, &err) != WGLLM_STATUS_OK) {
        if (last >= 0) fprintf(stderr, "\n");
        fprintf(stderr, "wgllm %s\n", err.message);
        return 1;
    }
    if (last >= 0) fprintf(stderr, "\n");
    char first[4096];
    wgllm_tools_split_path(first, sizeof(first), pos[1], 1, n);
    fprintf(stderr, "split: %d shard%s; load the model with -m %s\n", n, n == 1 ? "" : "s", first);
    return 0;
}
