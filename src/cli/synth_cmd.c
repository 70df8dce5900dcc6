/*
 * synth_cmd.c - `wgllm synth --shape NAME [--type q8_0] [--seed 1] [-o
 * OUT.gguf]`: writes a synthetic model (a real architecture and vocabulary,
 * seeded random weights); without -o it goes to models/SHAPE-TYPE.gguf.
 * The path is printed on stdout.
 */
#include "cli.h"
#include "wgllm_tools.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int wgllm_cli_synth(const struct opts *o) {
    if (!o->shape) {
        fprintf(stderr, "wgllm: synth needs --shape; shapes:");
        for (const char *const *s = wgllm_tools_synth_shapes(); *s; s++) fprintf(stderr, " %s", *s);
        fprintf(stderr, "\n");
        return 2;
    }
    struct wgllm_tools_synth_params p = wgllm_tools_synth_default_params();
    p.shape = o->shape;
    const char *type = o->type ? o->type : "q8_0";
    int t = wgllm_tools_type_from_name(type);
    if (t < 0) return wgllm_cli_usage_error("unknown type '%s'", type);
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
    if (wgllm_tools_synth_write(&p, path, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "wgllm: error: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s, %s, seed %llu) in %.1f s\n", path, o->shape, type, (unsigned long long)o->seed,
            (wgllm_time_us() - t0) / 1e6);
    printf("%s\n", path);
    return 0;
}
