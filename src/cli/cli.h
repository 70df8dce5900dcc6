/*
 * cli.h - what the files of the `wgllm` command share: the parsed options.
 */
#ifndef WGLLM_CLI_H
#define WGLLM_CLI_H

#include "wgllm.h"

struct opts {
    const char *model, *prompt, *file, *out, *shape, *type, *tokens, *prompt_ids;
    int n_predict, n_prompt, reps, threads, ctx, top_k;
    float temp, top_p, min_p;
    uint64_t seed;
    bool ids, no_special, parse_special, json, ignore_eos, seed_set;
    const char *parallel; /* bench: "1,4,8" concurrent streams through the engine */
    int prefix_reuse;     /* bench: shared-prefix length for the cache-reuse timing */
    const char *template_file, *messages, *tools; /* template, chat: Jinja source; template: JSON arrays */
    bool add_generation_prompt;                    /* template */
    enum wgllm_backend backend;                    /* run, bench, logits, info: -b cpu|webgpu|auto */
    bool plan;                                     /* info --plan: the WebGPU memory plan */
    bool context_shift;                            /* run, chat: shift a full context instead of failing */
    int keep;                                      /* run, chat: tokens a shift keeps after the BOS; -1 = the prompt */
    uint64_t gpu_mem;                              /* --gpu-mem: WebGPU memory budget in bytes (0 = none) */
    bool stream_weights;                           /* --stream-weights: weights stay in the file until uploaded */
    bool quick;                                    /* tune: a few candidates per group */
    const char *cache;                             /* tune: the cache file (default: tune.h's path) */
    int budget;                                    /* tune: seconds for the whole sweep (0: default) */
};

/* `wgllm bench --parallel ... --prefix-reuse N` (bench_engine.c). */
int wgllm_cli_bench_engine(struct wgllm_model *m, const struct opts *o);
/* `wgllm devices`: the WebGPU adapter, its limits and features (devices_cmd.c). */
int wgllm_cli_devices(const struct opts *o);
/* `wgllm tune -m MODEL [--quick] [--cache FILE] [--budget S]`: autotune the WebGPU kernels (tune_cmd.c). */
int wgllm_cli_tune(const struct opts *o);

/* `wgllm template -m MODEL --messages F.json ...`: print the rendered prompt (template_cmd.c). */
int wgllm_cli_template(const struct opts *o);

/* `wgllm split IN.gguf OUT_PREFIX [...]`: argv after "split" (split_cmd.c). */
int wgllm_cli_split(int argc, char **argv);

/* `wgllm chat -m MODEL`: interactive chat over the engine (chat_cmd.c). */
int wgllm_cli_chat(const struct opts *o);
/* The model with progress on a terminal, or NULL after printing why (main.c). */
struct wgllm_model *wgllm_cli_load_model(const struct opts *o);
/* A whole file, NUL-terminated, or NULL after printing why (main.c). */
char *wgllm_cli_read_file(const char *path, size_t *len);

#endif
