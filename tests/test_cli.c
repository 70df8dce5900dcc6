/*
 * test_cli.c - the `wgllm` command as a user runs it: the binary built beside
 * this test (build/<mode>/wgllm) is run through the shell with files for
 * stdin/stdout/stderr, and its output and exit status are checked.
 */
#include "test.h"

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

/* --template-file with a messages file longer than the template: the template
 * was parsed with the messages' length (a read past its buffer) */
TEST(template_file_and_long_messages) {
    char tpl[512], msgs[512], args[2048];
    snprintf(tpl, sizeof(tpl), "%s", test_tmp_path(".jinja"));
    snprintf(msgs, sizeof(msgs), "%s", test_tmp_path(".json"));
    FILE *f = fopen(tpl, "wb"), *g = fopen(msgs, "wb");
    CHECK(f && g);
    if (!f || !g) return;
    fputs("{{ messages[0].content | length }}", f);
    fputs("[{\"role\":\"user\",\"content\":\"", g);
    for (int i = 0; i < 5000; i++) fputc('x', g);
    fputs("\"}]", g);
    fclose(f);
    fclose(g);
    snprintf(args, sizeof(args), "template -m '%s' --template-file '%s' --messages '%s'",
             test_shared_path("vocab/ggml-vocab-phi-3.gguf"), tpl, msgs);
    struct run r = run_cli(args, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_STR(r.out, "5000");
    run_free(&r);
    remove(tpl);
    remove(msgs);
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
    RUN(template_file_and_long_messages);
    RUN(chat_keeps_earlier_turns_cached);
    RUN(run_context_full_or_shift);
    remove(model_path);
    return test_summary("test_cli");
}
