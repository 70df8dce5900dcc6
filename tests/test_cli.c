/*
 * test_cli.c - the `wgllm` command as a user runs it: the binary built beside
 * this test (build/<mode>/wgllm) is run through the shell with files for
 * stdin/stdout/stderr, and its output and exit status are checked.
 */
#include "test.h"

#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "backend/webgpu/tune.h"
#include "chat/chat.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <libgen.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

static char wgllm_bin[PATH_MAX];
static char model_path[512];

struct run {
    int status; /* exit code, or 128 + signal */
    char *out, *err;
    size_t out_len, err_len;
};

/* Runs `wgllm ARGS` with `input` on stdin. */
static struct run run_cli(const char *args, const char *input) {
    struct run r = {0};
    char in_path[512], out_path[512], err_path[512], cmd[4 * PATH_MAX + 2048];
    snprintf(in_path, sizeof(in_path), "%s", test_tmp_path(".in"));
    snprintf(out_path, sizeof(out_path), "%s", test_tmp_path(".out"));
    snprintf(err_path, sizeof(err_path), "%s", test_tmp_path(".err"));
    FILE *f = fopen(in_path, "wb");
    if (f) {
        if (input) fputs(input, f);
        fclose(f);
    }
    snprintf(cmd, sizeof(cmd), "'%s' %s < '%s' > '%s' 2> '%s'", wgllm_bin, args, in_path, out_path, err_path);
    int st = system(cmd);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    r.out = test_read_file(out_path, &r.out_len);
    r.err = test_read_file(err_path, &r.err_len);
    if (!r.out) r.out = calloc(1, 1);
    if (!r.err) r.err = calloc(1, 1);
    remove(in_path), remove(out_path), remove(err_path);
    return r;
}

static void run_free(struct run *r) {
    free(r->out);
    free(r->err);
}

TEST(tokenize_prints_ids_on_one_line) {
    char args[1024];
    snprintf(args, sizeof(args), "tokenize -m '%s' -p 'Hello world' --ids", test_shared_path("vocab/ggml-vocab-llama-spm.gguf"));
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_STR(r.out, "1 15043 3186\n");
    run_free(&r);
    /* digits are text, not a prompt length */
    snprintf(args, sizeof(args), "tokenize -m '%s' -p 33 --ids --no-special", test_shared_path("vocab/ggml-vocab-llama-spm.gguf"));
    r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK(r.out_len > 1 && r.out[0] != '1');
    run_free(&r);
}

TEST(info_and_run) {
    char args[1024];
    snprintf(args, sizeof(args), "info -m '%s'", model_path);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strstr(r.out, "architecture:  llama") != NULL);
    CHECK(strstr(r.out, "memory:") != NULL);
    run_free(&r);
    snprintf(args, sizeof(args), "run -m '%s' -p 'Once upon a time' -n 8 -t 2", model_path);
    r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strncmp(r.out, "Once upon a time", 16) == 0);
    CHECK(strstr(r.err, "generation: 8 tokens") != NULL);
    run_free(&r);
}

/* bench prints the weight bytes a token reads as GB/s, and --membw the
 * bandwidth to compare it with (as JSON too, for bench/peer_bench.mjs). */
TEST(bench_reports_bytes_and_bandwidth) {
    char args[1024];
    snprintf(args, sizeof(args), "bench -m '%s' -p 4 -n 2 -r 1 -t 1 --json", model_path);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    const char *db = strstr(r.out, "\"decode_bytes\": ");
    CHECK(db != NULL && strtoull(db + 16, NULL, 10) > 0);
    run_free(&r);
    r = run_cli("bench --membw -t 1 --json", NULL);
    CHECK_EQ_INT(r.status, 0);
    static const char key[] = "\"membw_gb_s\": ";
    const char *bw = strstr(r.out, key);
    CHECK(bw != NULL && strtod(bw + strlen(key), NULL) > 0.1); /* from the first digit: 10.05 was read as 0.05 */
    run_free(&r);
}

TEST(bad_input_gives_named_errors) {
    char args[1024], bad[512];
    snprintf(bad, sizeof(bad), "%s", test_tmp_path(".gguf"));
    size_t len;
    char *data = test_read_file(model_path, &len);
    FILE *f = fopen(bad, "wb");
    fwrite(data, 1, len / 3, f);
    fclose(f);
    free(data);
    snprintf(args, sizeof(args), "run -m '%s' -p hi -n 4", bad);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK(strstr(r.err, "gguf") != NULL);
    CHECK(strstr(r.err, "past end of file") != NULL || strstr(r.err, "truncated") != NULL);
    run_free(&r);
    remove(bad);
    r = run_cli("run -m /nonexistent.gguf -p hi", NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK(strstr(r.err, "/nonexistent.gguf") != NULL);
    run_free(&r);
    r = run_cli("bench -m x --frobnicate", NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK(strstr(r.err, "--frobnicate") != NULL);
    run_free(&r);
    r = run_cli("synth --shape nope", NULL);
    CHECK(r.status != 0);
    CHECK(strstr(r.err, "nope") != NULL);
    run_free(&r);
}

TEST(chat_keeps_earlier_turns_cached) {
    char args[1024];
    snprintf(args, sizeof(args), "chat -m '%s' --template-file '%s' -n 6 -t 2", model_path,
             test_shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    struct run r = run_cli(args, "hello there\nhow are you today\n/reset\nagain\n");
    CHECK_EQ_INT(r.status, 0);
    /* three replies; the second reuses the first turn from the KV cache */
    int cached[3] = {-1, -1, -1}, n = 0;
    for (const char *p = r.err; (p = strstr(p, " cached;")) && n < 3; p++) {
        const char *q = p;
        while (q > r.err && q[-1] != ' ') q--;
        cached[n++] = atoi(q);
    }
    CHECK_EQ_INT(n, 3);
    CHECK(cached[1] > 20);
    CHECK(strstr(r.err, "[conversation reset]") != NULL);
    run_free(&r);
    /* a model without a template and none given: a clear error */
    snprintf(args, sizeof(args), "chat -m '%s'", model_path);
    r = run_cli(args, "hi\n");
    CHECK_EQ_INT(r.status, 1);
    CHECK(strstr(r.err, "chat template") != NULL);
    run_free(&r);
}

/* `wgllm template --template-file`: the template, messages and tools files
 * each keep their own length, whichever is longer (a real template far longer
 * than the messages, and a one-line one far shorter), and the output is what
 * the interpreter renders in-process. */
static void check_template_file(const char *tmpl_path, const char *msgs_path, const char *tools_path) {
    char args[2048];
    snprintf(args, sizeof(args), "template -m '%s' --template-file '%s' --messages '%s'%s%s%s --add-generation-prompt",
             model_path, tmpl_path, msgs_path, tools_path ? " --tools '" : "", tools_path ? tools_path : "",
             tools_path ? "'" : "");
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    if (r.status != 0) fprintf(stderr, "  %s: %s\n", tmpl_path, r.err);
    size_t tl = 0, ml = 0, ol = 0;
    char *src = test_read_file(tmpl_path, &tl), *msgs = test_read_file(msgs_path, &ml);
    char *tools = tools_path ? test_read_file(tools_path, &ol) : NULL;
    struct wgllm_chat_template *t = NULL;
    struct wgllm_error err = {0};
    char *want = NULL;
    CHECK(src && msgs);
    CHECK(src && wgllm_chat_template_parse(src, tl, &t, &err) == WGLLM_STATUS_OK);
    CHECK(t && wgllm_chat_template_render_json(t, msgs, tools, true, "<s>", "</s>", &want, &err) == WGLLM_STATUS_OK);
    CHECK(want && strcmp(r.out, want) == 0);
    free(want);
    wgllm_chat_template_free(t);
    free(src), free(msgs), free(tools);
    run_free(&r);
}

TEST(template_files_keep_their_lengths) {
    char msgs[512], tools[512], shrt[512], tmpl[3][1024]; /* test_tmp_path / test_shared_path reuse one buffer */
    snprintf(msgs, sizeof(msgs), "%s", test_tmp_path(".json"));
    snprintf(tools, sizeof(tools), "%s", test_tmp_path(".json"));
    snprintf(shrt, sizeof(shrt), "%s", test_tmp_path(".jinja"));
    snprintf(tmpl[0], sizeof(tmpl[0]), "%s", test_shared_path("templates/meta-llama-Llama-3.1-8B-Instruct.jinja"));
    snprintf(tmpl[1], sizeof(tmpl[1]), "%s", test_shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    snprintf(tmpl[2], sizeof(tmpl[2]), "%s", test_shared_path("templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"));
    FILE *f = fopen(msgs, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("[{\"role\":\"system\",\"content\":\"You are helpful.\"},{\"role\":\"user\",\"content\":\"Hello! "
          "This message is long enough that the messages file is longer than the short template below.\"}]", f);
    fclose(f);
    f = fopen(tools, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the weather.\","
          "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]", f);
    fclose(f);
    f = fopen(shrt, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{% for m in messages %}{{ m.content }}{% endfor %}", f);
    fclose(f);
    check_template_file(tmpl[0], msgs, NULL);
    check_template_file(tmpl[1], msgs, tools);
    check_template_file(tmpl[2], msgs, NULL);
    check_template_file(shrt, msgs, NULL);
    check_template_file(shrt, msgs, tools);
    remove(msgs), remove(tools), remove(shrt);
}

/* run --ctx smaller than prompt + -n: fails clearly at the full context, or
 * with --context-shift goes on; the tokens before the first shift are the
 * same either way. */
TEST(run_context_full_or_shift) {
    char args[1024];
    snprintf(args, sizeof(args), "run -m '%s' -p 'Once upon a time' -n 40 --ctx 16 --ids --ignore-eos -t 1", model_path);
    struct run full = run_cli(args, NULL);
    CHECK_EQ_INT(full.status, 1);
    CHECK(strstr(full.err, "16 of the context's 16 positions") != NULL);
    CHECK(strstr(full.err, "--context-shift") != NULL);
    snprintf(args, sizeof(args), "run -m '%s' -p 'Once upon a time' -n 40 --ctx 16 --ids --ignore-eos -t 1 "
             "--context-shift --keep 2", model_path);
    struct run shifted = run_cli(args, NULL);
    CHECK_EQ_INT(shifted.status, 0);
    int n = 0;
    for (const char *p = shifted.out; *p; p++) n += *p == ',';
    CHECK_EQ_INT(n + 1, 40);
    const char *end = strrchr(full.out, ']');
    CHECK(end && strncmp(shifted.out, full.out, (size_t)(end - full.out)) == 0); /* same first tokens */
    run_free(&full);
    run_free(&shifted);
    struct run bad = run_cli("run -m x -p hi --keep -2", NULL);
    CHECK_EQ_INT(bad.status, 2);
    CHECK(strstr(bad.err, "--keep") != NULL);
    run_free(&bad);
}

/* A sliding-window model in passes of 4 tokens: info says what its rings
 * (window 8 + 4 cells) save, and run --context-shift keeps full caches for
 * those layers (a ring cannot be shifted) and goes past the context. */
TEST(sliding_window_rings_in_info_and_run) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny-gemma3";
    sp.type = WGLLM_TYPE_Q8_0;
    const char *path = test_synth_path(&sp);
    CHECK(path != NULL);
    if (!path) return;
    char args[1024];
    snprintf(args, sizeof(args), "info -m '%s' --ctx 64 --batch 4", path);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strstr(r.out, "with rings of 12 cells on the sliding-window layers") != NULL);
    CHECK(strstr(r.out, "with full caches: saves") != NULL);
    run_free(&r);
    snprintf(args, sizeof(args), "run -m '%s' -p 'Once upon a time' -n 24 --ctx 16 --batch 4 --ids --ignore-eos -t 1 "
             "--context-shift --keep 2", path);
    r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    if (r.status) fprintf(stderr, "  %s\n", r.err);
    run_free(&r);
    remove(path);
}

/* `wgllm help` is the command table: every command once, exit 0 on stdout;
 * no command: the same on stderr with 2; an unknown one: a usage error. */
TEST(help_is_the_command_table) {
    static const char *const names[] = {"info", "run", "tokenize", "template", "logits", "bench", "chat",
                                        "devices", "tune", "synth", "quantize", "split", "serve"};
    struct run r = run_cli("--help", NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strncmp(r.out, "usage: wgllm <command> [options]\n", 33) == 0);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char line[32];
        snprintf(line, sizeof(line), "\n  %-8s ", names[i]);
        CHECK(strstr(r.out, line) != NULL);
    }
    CHECK(strstr(r.out, "common options: -t/--threads N") != NULL);
    struct run none = run_cli("", NULL);
    CHECK_EQ_INT(none.status, 2);
    CHECK_STR(none.err, r.out);
    run_free(&none);
    run_free(&r);
    r = run_cli("frobnicate", NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK(strstr(r.err, "unknown command 'frobnicate'") != NULL);
    run_free(&r);
    r = run_cli("quantize --help", NULL); /* its own arguments */
    CHECK_EQ_INT(r.status, 0);
    CHECK(strstr(r.err, "usage: wgllm quantize") != NULL);
    run_free(&r);
}

/* Every file of DIR/LABEL.wgsl is the kernel as the generator makes it under t. */
static int dumped_files_match(const char *dir, const struct wgllm_wgsl_tune *t) {
    static struct wgllm_kernel_key keys[512];
    const int n = wgllm_wgsl_all_keys(keys, 512);
    int same = 0;
    for (int i = 0; i < n && i < 512; i++) {
        char label[64], path[1024];
        wgllm_wgsl_key_label(&keys[i], label, sizeof label);
        snprintf(path, sizeof path, "%s/%s.wgsl", dir, label);
        size_t len;
        char *got = test_read_file(path, &len), *want = wgllm_wgsl_generate(&keys[i], t);
        if (got && want && !strcmp(got, want)) same++;
        else fprintf(stderr, "  %s: %s\n", path, got ? "differs from the generator's" : "missing");
        free(got);
        free(want);
        remove(path);
    }
    return same == n ? n : -1;
}

/* `wgllm devices --dump-wgsl DIR` writes every generated kernel, byte for
 * byte what the backend compiles: for the adapter's tune, or (no library:
 * WGLLM_WEBGPU_LIB names none) the default tune; a folder that cannot be
 * made is a named error. */
TEST(devices_dump_wgsl) {
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s", test_tmp_path(".wgsl"));
    snprintf(args, sizeof args, "devices --dump-wgsl '%s'", dir);
    const char *lib = getenv("WGLLM_WEBGPU_LIB");
    char *saved = lib ? strdup(lib) : NULL;
    setenv("WGLLM_WEBGPU_LIB", "/nonexistent/libwebgpu.so", 1);
    struct run r = run_cli(args, NULL);
    if (saved) setenv("WGLLM_WEBGPU_LIB", saved, 1);
    else unsetenv("WGLLM_WEBGPU_LIB");
    free(saved);
    CHECK_EQ_INT(r.status, 0);
    CHECK(strstr(r.out, "no adapter: the default tune") != NULL);
    CHECK(strstr(r.out, "\nmm_tile_n=64\n") != NULL); /* the tune's lines */
    const int n = dumped_files_match(dir, wgllm_wgsl_default_tune());
    CHECK(n > 40);
    char want[64];
    snprintf(want, sizeof want, "wrote %d kernels to ", n);
    CHECK(strstr(r.out, want) != NULL);
    run_free(&r);
    /* with the adapter the tests use, when there is one */
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_cli devices_dump_wgsl (adapter)", &required);
    CHECK(g || !required);
    if (g) {
        r = run_cli(args, NULL);
        CHECK_EQ_INT(r.status, 0);
        CHECK(strstr(r.out, wgllm_gpu_get_info(g)->name) != NULL);
        CHECK_EQ_INT(dumped_files_match(dir, wgllm_wgsl_tune_for(wgllm_gpu_get_info(g))), n);
        run_free(&r);
        wgllm_gpu_close(g);
    }
    rmdir(dir);
    snprintf(args, sizeof args, "devices --dump-wgsl /nonexistent/dir/x");
    r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK(strstr(r.err, "/nonexistent/dir/x: cannot make the folder") != NULL);
    run_free(&r);
}

/* `wgllm template` without --template-file finds the template as the engine
 * does (wgllm_model_chat_template): the file's own, else none fits here. */
TEST(template_finds_the_models_template) {
    char args[2048], msgs[512];
    snprintf(msgs, sizeof(msgs), "%s", test_tmp_path(".json"));
    FILE *f = fopen(msgs, "wb");
    fputs("[{\"role\": \"user\", \"content\": \"hi\"}]", f);
    fclose(f);
    snprintf(args, sizeof(args), "template -m '%s' --messages '%s' --add-generation-prompt",
             test_shared_path("vocab/ggml-vocab-phi-3.gguf"), msgs);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_STR(r.out, "<s><|user|>\nhi<|end|>\n<|assistant|>\n");
    run_free(&r);
    snprintf(args, sizeof(args), "template -m '%s' --messages '%s'", model_path, msgs);
    r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK(strstr(r.err, "no tokenizer.chat_template") != NULL);
    run_free(&r);
    remove(msgs);
}

struct collect {
    int32_t tok[64];
    int n;
};
static bool collect_token(int32_t tok, void *ud) {
    struct collect *c = ud;
    c->tok[c->n++] = tok;
    return c->n < 64;
}

/* wgllm_generate on the CPU is the decode -> sample loop: the same tokens as
 * one written by hand, greedy and sampled (the sampler's generator goes on
 * across calls), and the last token given is left undecoded. */
TEST(generate_is_the_decode_sample_loop) {
    struct wgllm_error err;
    struct wgllm_model *m;
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 2;
    CHECK(wgllm_model_load(model_path, &mp, &m, &err) == WGLLM_STATUS_OK);
    if (!m) return;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 64;
    struct wgllm_context *c;
    CHECK(wgllm_context_init(m, &cp, &c, &err) == WGLLM_STATUS_OK);
    const int32_t prompt[4] = {1, 100, 200, 300};
    for (int sampled = 0; sampled < 2; sampled++) {
        struct wgllm_sampler_params sp = wgllm_sampler_default_params();
        sp.temperature = sampled ? 0.9f : 0.0f;
        sp.seed = 7;
        CHECK(!wgllm_generate_on_device(c, &sp));
        struct wgllm_sampler *s = wgllm_sampler_init(&sp, wgllm_model_n_vocab(m));
        int32_t want[12];
        wgllm_context_truncate(c, 0);
        CHECK(wgllm_decode(c, prompt, 4, false, &err) == WGLLM_STATUS_OK);
        for (int i = 0; i < 12; i++) {
            want[i] = wgllm_sampler_sample(s, wgllm_get_logits(c));
            wgllm_sampler_accept(s, want[i]);
            if (i < 11) CHECK(wgllm_decode(c, &want[i], 1, false, &err) == WGLLM_STATUS_OK);
        }
        wgllm_sampler_reset(s);
        wgllm_context_truncate(c, 0);
        CHECK(wgllm_decode(c, prompt, 4, false, &err) == WGLLM_STATUS_OK);
        struct collect got = {{0}, 0};
        int n_out = -1;
        CHECK(wgllm_generate(c, &sp, s, 5, collect_token, &got, &n_out, &err) == WGLLM_STATUS_OK);
        CHECK_EQ_INT(n_out, 5);
        CHECK_EQ_INT(wgllm_context_n_past(c), 4 + 4); /* the fifth token is not decoded */
        CHECK(wgllm_decode(c, &got.tok[4], 1, false, &err) == WGLLM_STATUS_OK);
        CHECK(wgllm_generate(c, &sp, s, 7, collect_token, &got, &n_out, &err) == WGLLM_STATUS_OK);
        CHECK_EQ_INT(got.n, 12);
        for (int i = 0; i < 12; i++) CHECK_EQ_INT(got.tok[i], want[i]);
        CHECK(wgllm_generate(c, &sp, NULL, 1, collect_token, &got, &n_out, &err) == WGLLM_STATUS_INVALID_ARGUMENT);
        wgllm_sampler_free(s);
    }
    /* a full context: CONTEXT_FULL with the tokens given so far standing */
    struct wgllm_sampler_params sp = wgllm_sampler_default_params();
    struct wgllm_sampler *s = wgllm_sampler_init(&sp, wgllm_model_n_vocab(m));
    wgllm_context_truncate(c, 0);
    CHECK(wgllm_decode(c, prompt, 4, false, &err) == WGLLM_STATUS_OK);
    struct collect got = {{0}, 0};
    int n_out = 0;
    CHECK(wgllm_generate(c, &sp, s, 64, collect_token, &got, &n_out, &err) == WGLLM_STATUS_CONTEXT_FULL);
    CHECK_EQ_INT(n_out, 61); /* 4 + 60 decoded fill 64 positions; the 61st cannot be */
    CHECK_EQ_INT(got.n, 61);
    wgllm_sampler_free(s);
    wgllm_context_free(c);
    wgllm_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) snprintf(self, sizeof(self), "%s", argv[0]);
    /* build/<mode>/tests/test_cli -> build/<mode>/wgllm */
    char *dir = dirname(dirname(self));
    snprintf(wgllm_bin, sizeof(wgllm_bin), "%s/wgllm", dir);
    if (access(wgllm_bin, X_OK) != 0) {
        fprintf(stderr, "no wgllm binary at %s (build it with make)\n", wgllm_bin);
        test_failed++;
        return test_summary("test_cli");
    }
    wgllm_base_init();
    wgllm_quant_init();
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.type = WGLLM_TYPE_Q8_0;
    const char *path = test_synth_path(&sp);
    if (!path) {
        test_failed++;
        return test_summary("test_cli");
    }
    snprintf(model_path, sizeof(model_path), "%s", path);
    RUN(tokenize_prints_ids_on_one_line);
    RUN(info_and_run);
    RUN(bad_input_gives_named_errors);
    RUN(bench_reports_bytes_and_bandwidth);
    RUN(chat_keeps_earlier_turns_cached);
    RUN(run_context_full_or_shift);
    RUN(sliding_window_rings_in_info_and_run);
    RUN(template_files_keep_their_lengths);
    RUN(help_is_the_command_table);
    RUN(template_finds_the_models_template);
    RUN(generate_is_the_decode_sample_loop);
    RUN(devices_dump_wgsl);
    remove(model_path);
    return test_summary("test_cli");
}
