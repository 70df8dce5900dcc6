/*
 * cli.h - what the files of the `wgllm` command share: the command table's
 * entry points, the common options and the helpers that parse and load them
 * (opts.c). Every command lives in its own file (NAME_cmd.c) and is written
 * on the public headers wgllm.h and wgllm_tools.h only; main.c is the table
 * and the dispatch.
 *
 * Conventions: a command returns the process's exit code: 0 on success, 1
 * when something failed (one line on stderr naming the problem), 2 for a
 * usage error (wgllm_cli_usage_error).
 */
#ifndef WGLLM_CLI_H
#define WGLLM_CLI_H

#include "wgllm.h"

#include <stdio.h>

/* The common options: every command that takes them gets them parsed
 * (wgllm_cli_parse_opts) before it runs. */
struct opts {
    const char *model, *prompt, *file, *out, *shape, *type, *tokens, *prompt_ids;
    int n_predict, n_prompt, reps, threads, ctx, top_k;
    int batch; /* --batch N: tokens per forward pass (0: the default, 512) */
    float temp, top_p, min_p;
    uint64_t seed;
    bool ids, no_special, parse_special, json, ignore_eos, seed_set;
    bool split0; /* tokenize --split0: the file holds NUL-terminated texts */
    const char *parallel; /* bench: "1,4,8" concurrent streams through the engine */
    int prefix_reuse;     /* bench: shared-prefix length for the cache-reuse timing */
    const char *json_schema; /* bench: a JSON Schema file: constrained vs unconstrained decoding */
    const char *template_file, *messages, *tools; /* template, chat: Jinja source; template: JSON arrays */
    bool add_generation_prompt;                    /* template */
    enum wgllm_backend backend;                    /* run, bench, logits, info: -b cpu|webgpu|auto */
    bool plan;                                     /* info --plan: the WebGPU memory plan */
    bool membw;                                    /* bench --membw: the machine's memory read bandwidth */
    bool context_shift;                            /* run, chat: shift a full context instead of failing */
    int keep;                                      /* run, chat: tokens a shift keeps after the BOS; -1 = the prompt */
    uint64_t gpu_mem;                              /* --gpu-mem: WebGPU memory budget in bytes (0 = none) */
    bool stream_weights;                           /* --stream-weights: weights stay in the file until uploaded */
    bool quick;                                    /* tune: a few candidates per group */
    const char *cache;                             /* tune: the cache file (default: the per-user cache) */
    int budget;                                    /* tune: seconds for the whole sweep (0: default) */
    const char *dump_wgsl;                         /* devices --dump-wgsl DIR: write the generated kernels */
};

/* ---- the commands (one file each) -------------------------------------- */

/* Commands on the common options. */
int wgllm_cli_info(const struct opts *o);     /* info_cmd.c */
int wgllm_cli_run(const struct opts *o);      /* run_cmd.c */
int wgllm_cli_tokenize(const struct opts *o); /* tokenize_cmd.c */
int wgllm_cli_template(const struct opts *o); /* template_cmd.c */
int wgllm_cli_logits(const struct opts *o);   /* logits_cmd.c */
int wgllm_cli_bench(const struct opts *o);    /* bench_cmd.c */
int wgllm_cli_chat(const struct opts *o);     /* chat_cmd.c */
int wgllm_cli_devices(const struct opts *o);  /* devices_cmd.c */
int wgllm_cli_tune(const struct opts *o);     /* tune_cmd.c */
int wgllm_cli_synth(const struct opts *o);    /* synth_cmd.c */
/* Commands with arguments of their own: argv[0] is the first argument after
 * the command's name. */
int wgllm_cli_quantize(int argc, char **argv); /* quantize_cmd.c */
int wgllm_cli_split(int argc, char **argv);    /* split_cmd.c */
/* `wgllm serve`: the OpenAI-compatible HTTP server (src/server/server.c,
 * native only; its own flags, `wgllm serve --help`). */
int wgllm_cli_serve(int argc, char **argv);

/* `wgllm bench --parallel ... --prefix-reuse N`: the engine's tables (bench_engine.c). */
int wgllm_cli_bench_engine(struct wgllm_model *m, const struct opts *o);

/* ---- shared helpers (opts.c) ------------------------------------------- */

/* Parses the common options of argv[0..argc) into *o (defaults first).
 * Returns 0, else the exit code of a usage error (printed). */
int wgllm_cli_parse_opts(int argc, char **argv, struct opts *o);
/* Prints "wgllm: " + fmt (with arg) + the hint to run `wgllm help`; returns 2. */
int wgllm_cli_usage_error(const char *fmt, const char *arg);
/* "1,2,3" or "[1, 2, 3]" -> *out (malloc'd); returns the count, or -1 after
 * printing why. */
int wgllm_cli_parse_ids(const char *s, int32_t **out);
/* ids as one JSON array line: [1, 2, 3] */
void wgllm_cli_print_ids_json(FILE *f, const int32_t *ids, int n);
/* The model of -m (with -t, --stream-weights), with progress on a terminal,
 * or NULL after printing why. */
struct wgllm_model *wgllm_cli_load_model(const struct opts *o);
/* A context of n_ctx positions with -t, -b and --gpu-mem; on a backend other
 * than the CPU it prints which one runs and its GPU memory. NULL after
 * printing why. */
struct wgllm_context *wgllm_cli_new_context(struct wgllm_model *m, const struct opts *o, int n_ctx);
/* A whole file, NUL-terminated (*len its length), or NULL after printing why. */
char *wgllm_cli_read_file(const char *path, size_t *len);
/* Tokenizes text; returns the count (*out malloc'd) or -1 after printing why. */
int wgllm_cli_tokenize_text(struct wgllm_model *m, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out);

#endif
