/*
 * main.c - the `wgllm` command: the table of its sub-commands and the
 * dispatch. Each command lives in its own file (NAME_cmd.c, declared in
 * cli.h); the common options are parsed once here for the commands that take
 * them (opts.c). `wgllm help` is the table's help text between a header and
 * the common options.
 *
 * Errors print one line naming the problem and exit 1 (2 for usage).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

struct cli_command {
    const char *name;
    /* its lines of `wgllm help`, after the name column: the arguments and
     * what it does, continuation lines indented to the column */
    const char *help;
    int (*run)(const struct opts *o);       /* takes the common options, or */
    int (*run_args)(int argc, char **argv); /* parses its own (argv after the name) */
};

static const struct cli_command commands[] = {
    {"info",
     "-m MODEL                  describe a GGUF model (architecture, shapes, types, memory)\n",
     .run = wgllm_cli_info},
    {"run",
     "-m MODEL -p PROMPT [-n N] generate text (greedy unless --temp > 0)\n"
     "           [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--ctx N] [--ignore-eos]\n"
     "           [--prompt-ids 1,2,3] [--ids]  token ids in / generated ids out (JSON)\n"
     "           [--context-shift [--keep N]]  when the context (--ctx) fills up, drop the oldest half\n"
     "           of the tokens after the first N (default: the prompt) and go on, instead of failing\n",
     .run = wgllm_cli_run},
    {"tokenize",
     "-m MODEL (-p TEXT | --file PATH) [--ids] [--no-special] [--parse-special]\n"
     "           [--file PATH --split0 --ids]  many texts, each ended by a NUL byte: one line of ids\n"
     "           (or \"error: ...\") per text, with the model loaded once\n",
     .run = wgllm_cli_tokenize},
    {"template",
     "-m MODEL --messages F.json [--tools F.json] [--template-file F] [--add-generation-prompt]\n"
     "           print the chat prompt (the model's template, or a built-in one by its special tokens)\n",
     .run = wgllm_cli_template},
    {"logits",
     "-m MODEL --tokens 1,2,3 -o OUT.f32   raw float32 logits of every position\n",
     .run = wgllm_cli_logits},
    {"bench",
     "-m MODEL [-p 128] [-n 32] [-r 3] [--json]   prompt and generation tokens/s\n"
     "           [--parallel 1,4,8] [--prefix-reuse 1000]   the engine: concurrent streams, cache reuse\n"
     "           [--json-schema FILE]              constrained vs unconstrained decoding\n"
     "           --membw [-t N]                    the memory read bandwidth (a decode's GB/s compares to it)\n",
     .run = wgllm_cli_bench},
    {"chat",
     "-m MODEL [--template-file F] [-n N] [--temp T]   interactive chat; /reset starts over,\n"
     "           Ctrl-C stops a reply, Ctrl-D exits; earlier turns stay in the KV cache\n"
     "           [--ctx N] [--context-shift [--keep N]]   a reply that fills the context shifts it (as run)\n",
     .run = wgllm_cli_chat},
    {"devices",
     "[--dump-wgsl DIR]         list the compute devices (WebGPU adapter, limits, features);\n"
     "           --dump-wgsl writes the generated kernels as DIR/NAME.wgsl (this adapter's tune)\n",
     .run = wgllm_cli_devices},
    {"tune",
     "-m MODEL [--quick] [--cache FILE] [--budget S]   autotune the WebGPU kernels on this\n"
     "           adapter with the model's matrix shapes; the best is cached per adapter\n",
     .run = wgllm_cli_tune},
    {"synth",
     "--shape NAME [--type q8_0] [--seed 1] [-o OUT.gguf]   write a synthetic model\n",
     .run = wgllm_cli_synth},
    {"quantize",
     "IN.gguf OUT.gguf TYPE [--allow-requantize] [--pure] [-t N]   convert the weights\n"
     "           (TYPE: Q4_K_M, Q5_K_M, Q3_K_M, Q6_K, Q8_0, Q4_0, IQ4_XS, F16, ... as llama.cpp)\n",
     .run_args = wgllm_cli_quantize},
    {"split",
     "IN.gguf OUT_PREFIX [--split-max-size 512M] [--split-max-tensors N]   write shards\n"
     "           OUT_PREFIX-00001-of-0000N.gguf (llama.cpp's gguf-split layout; load the first)\n",
     .run_args = wgllm_cli_split},
    {"serve",
     "-m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-size N] [--api-key KEY]\n"
     "           [--chat-template FILE]   OpenAI-compatible HTTP server (`wgllm serve --help`)\n",
     .run_args = wgllm_cli_serve},
};

static const char *usage_head =
    "usage: wgllm <command> [options]\n"
    "\n"
    "commands:\n";

static const char *usage_tail =
    "\n"
    "common options: -t/--threads N (default: all cores); --batch N (tokens per forward pass, default\n"
    "                512; sliding-window layers keep rings of window + N cells)\n"
    "                -b/--backend cpu|webgpu|auto (run, bench, logits, info; default cpu; auto = WebGPU\n"
    "                on a hardware GPU adapter, else the CPU; info --plan prints the WebGPU memory plan)\n"
    "                --gpu-mem SIZE (WebGPU memory budget, e.g. 512M or 2G: the context shrinks to fit)\n"
    "                --stream-weights (WebGPU only: map nothing; the weights go from the file to the GPU\n"
    "                in bounded chunks and never sit in memory, as in the browser)\n";

static void usage(FILE *f) {
    fputs(usage_head, f);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-8s %s", commands[i].name, commands[i].help);
    fputs(usage_tail, f);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const struct cli_command *c = NULL;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]) && !c; i++)
        if (!strcmp(argv[1], commands[i].name)) c = &commands[i];
    if (c && c->run_args) return c->run_args(argc - 2, argv + 2);
    /* the options are checked first, also for an unknown command (as before the table) */
    struct opts o;
    int rc = wgllm_cli_parse_opts(argc - 2, argv + 2, &o);
    if (rc) return rc;
    if (!c) return wgllm_cli_usage_error("unknown command '%s'", argv[1]);
    return c->run(&o);
}
