/*
 * test_split.c - `wgllm split` (gguf/split_write.c and src/cli/split_cmd.c):
 * a synthetic model split into shards has gguf-split's keys and layout,
 * the same tensor bytes, and loads (by its first shard) to logits identical
 * to the unsplit model; bad arguments and impossible outputs give clear
 * errors and leave no shards behind.
 */
#include "test.h"

#include "gguf/split_write.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "wgllm.h"

#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char wgllm_bin[PATH_MAX];
static char model_path[512];

static bool exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}

static void remove_shards(const char *prefix, int n) {
    char p[1024];
    for (int i = 1; i <= n; i++) {
        wgllm_gguf_split_path(p, sizeof(p), prefix, i, n);
        unlink(p);
    }
}

/* Greedy logits of a fixed prompt: the last position's logits after each of
 * 3 decode steps, concatenated (caller frees). */
static float *logits_of(const char *path, int *n_out) {
    struct wgllm_error err;
    struct wgllm_model *m = NULL;
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 1;
    if (wgllm_model_load(path, &mp, &m, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  load %s: %s\n", path, err.message);
        return NULL;
    }
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 64;
    struct wgllm_context *ctx = NULL;
    float *out = NULL;
    if (wgllm_context_init(m, &cp, &ctx, &err) != WGLLM_STATUS_OK) goto done;
    int nv = wgllm_model_n_vocab(m);
    out = malloc(sizeof(float) * (size_t)nv * 3);
    int32_t toks[3] = {1, 15043, 3186};
    for (int step = 0; step < 3; step++) {
        int32_t t = step == 0 ? toks[0] : toks[step];
        if (wgllm_decode(ctx, &t, 1, false, &err) != WGLLM_STATUS_OK) {
            free(out);
            out = NULL;
            goto done;
        }
        memcpy(out + (size_t)step * nv, wgllm_get_logits(ctx), sizeof(float) * (size_t)nv);
    }
    *n_out = nv * 3;
done:
    if (!out) fprintf(stderr, "  logits %s: %s\n", path, err.message);
    wgllm_context_free(ctx);
    wgllm_model_free(m);
    return out;
}

TEST(parse_size) {
    uint64_t v = 0;
    CHECK(wgllm_gguf_split_parse_size("512M", &v) && v == (uint64_t)512 << 20);
    CHECK(wgllm_gguf_split_parse_size("512MiB", &v) && v == (uint64_t)512 << 20);
    CHECK(wgllm_gguf_split_parse_size("2G", &v) && v == (uint64_t)2 << 30);
    CHECK(wgllm_gguf_split_parse_size("64k", &v) && v == 65536);
    CHECK(wgllm_gguf_split_parse_size("1000", &v) && v == 1000);
    CHECK(!wgllm_gguf_split_parse_size("0", &v));
    CHECK(!wgllm_gguf_split_parse_size("", &v));
    CHECK(!wgllm_gguf_split_parse_size("M", &v));
    CHECK(!wgllm_gguf_split_parse_size("-5M", &v));
    CHECK(!wgllm_gguf_split_parse_size("5T", &v));
    CHECK(!wgllm_gguf_split_parse_size("5MB", &v));
    CHECK(!wgllm_gguf_split_parse_size("1.5G", &v));
    CHECK(!wgllm_gguf_split_parse_size("99999999999999999999", &v));
    CHECK(!wgllm_gguf_split_parse_size("17179869184G", &v)); /* 2^34 GiB overflows */
}

static int64_t key_int(const struct wgllm_gguf *g, const char *key, enum wgllm_gguf_type want_type) {
    const struct wgllm_gguf_value *v = wgllm_gguf_find(g, key);
    if (!v) return -100;
    if (v->type != want_type) return -200;
    return want_type == WGLLM_GGUF_TYPE_INT32 ? v->v.i64 : (int64_t)v->v.u64;
}

/* Opens one shard on its own (from memory, so the reader does not follow the siblings). */
static struct wgllm_gguf *open_alone(const char *path, char **buf) {
    size_t n = 0;
    *buf = test_read_file(path, &n);
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    if (!*buf || wgllm_gguf_open_memory(*buf, n, &g, &err) != WGLLM_STATUS_OK) return NULL;
    return g;
}

TEST(shards_have_gguf_split_layout_and_same_logits) {
    struct wgllm_error err;
    struct wgllm_gguf *in = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(model_path, &in, &err), WGLLM_STATUS_OK);
    if (!in) return;
    int64_t n_tensors = wgllm_gguf_n_tensors(in);

    const char *prefix = test_tmp_path("-split");
    struct wgllm_gguf_split_params p = wgllm_gguf_split_default_params();
    p.max_bytes = (uint64_t)4 << 20;
    int64_t planned = wgllm_gguf_split_plan(in, &p, NULL);
    CHECK(planned >= 3);
    int n = 0;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, prefix, &p, &n, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(n, planned);

    int64_t seen = 0;
    char path[1024];
    for (int s = 0; s < n; s++) {
        wgllm_gguf_split_path(path, sizeof(path), prefix, s + 1, n);
        char *buf = NULL;
        struct wgllm_gguf *g = open_alone(path, &buf);
        CHECK(g != NULL);
        if (!g) {
            free(buf);
            continue;
        }
        CHECK_EQ_INT(key_int(g, "split.no", WGLLM_GGUF_TYPE_UINT16), s);
        CHECK_EQ_INT(key_int(g, "split.count", WGLLM_GGUF_TYPE_UINT16), n);
        CHECK_EQ_INT(key_int(g, "split.tensors.count", WGLLM_GGUF_TYPE_INT32), n_tensors);
        /* all metadata in the first shard, only the split keys elsewhere */
        if (s == 0) {
            CHECK_EQ_INT(wgllm_gguf_n_kv(g), wgllm_gguf_n_kv(in) + 3);
            CHECK(wgllm_gguf_find(g, "tokenizer.ggml.tokens") != NULL);
            CHECK(wgllm_gguf_find(g, "general.architecture") != NULL);
            /* the model's keys first, in order, then the split keys (as gguf-split) */
            for (int64_t k = 0; k < wgllm_gguf_n_kv(in); k++)
                CHECK(wgllm_gguf_kv_at(g, k)->key.len == wgllm_gguf_kv_at(in, k)->key.len &&
                      !memcmp(wgllm_gguf_kv_at(g, k)->key.data, wgllm_gguf_kv_at(in, k)->key.data,
                              wgllm_gguf_kv_at(in, k)->key.len));
            CHECK(wgllm_gguf_str_eq(wgllm_gguf_kv_at(g, wgllm_gguf_n_kv(in))->key, "split.no"));
        } else {
            CHECK_EQ_INT(wgllm_gguf_n_kv(g), 3);
        }
        uint64_t shard_bytes = 0;
        CHECK(wgllm_gguf_data_offset(g, 0) % wgllm_gguf_alignment(g) == 0);
        for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++, seen++) {
            const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
            const struct wgllm_gguf_tensor *o = wgllm_gguf_tensor_at(in, seen);
            CHECK(t->offset % wgllm_gguf_alignment(g) == 0);
            CHECK(t->name.len == o->name.len && !memcmp(t->name.data, o->name.data, t->name.len));
            CHECK_EQ_INT(t->type, o->type);
            CHECK_EQ_INT(t->size, o->size);
            CHECK(t->size == o->size && !memcmp(t->data, o->data, t->size));
            shard_bytes += WGLLM_PAD(t->size, 32);
        }
        /* the soft limit: over it only with a single tensor */
        CHECK(shard_bytes <= p.max_bytes || wgllm_gguf_n_tensors(g) == 1);
        wgllm_gguf_free(g);
        free(buf);
    }
    CHECK_EQ_INT(seen, n_tensors);

    /* the reader sees the split model as the original: same tensors */
    wgllm_gguf_split_path(path, sizeof(path), prefix, 1, n);
    struct wgllm_gguf *sp = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(path, &sp, &err), WGLLM_STATUS_OK);
    if (sp) {
        CHECK_EQ_INT(wgllm_gguf_n_splits(sp), n);
        CHECK_EQ_INT(wgllm_gguf_n_tensors(sp), n_tensors);
        wgllm_gguf_free(sp);
    }

    /* the loader on the first shard gives logits identical to the unsplit model */
    int na = 0, nb = 0;
    float *a = logits_of(model_path, &na), *b = logits_of(path, &nb);
    CHECK(a && b && na == nb && na > 0);
    if (a && b && na == nb) CHECK(memcmp(a, b, sizeof(float) * (size_t)na) == 0);
    free(a);
    free(b);

    /* splitting the split model again (by tensor count) reads every shard */
    const char *prefix2 = test_tmp_path("-resplit");
    struct wgllm_gguf_split_params p2 = wgllm_gguf_split_default_params();
    p2.max_bytes = 0;
    p2.max_tensors = 5;
    int n2 = 0;
    CHECK_EQ_INT(wgllm_gguf_split(path, prefix2, &p2, &n2, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(n2, (n_tensors + 4) / 5);
    char path2[1024];
    wgllm_gguf_split_path(path2, sizeof(path2), prefix2, n2, n2);
    char *buf = NULL;
    struct wgllm_gguf *last = open_alone(path2, &buf);
    CHECK(last != NULL);
    if (last) CHECK_EQ_INT(wgllm_gguf_n_tensors(last), n_tensors - 5 * (n2 - 1));
    wgllm_gguf_free(last);
    free(buf);
    wgllm_gguf_split_path(path2, sizeof(path2), prefix2, 1, n2);
    b = logits_of(path2, &nb);
    a = logits_of(model_path, &na);
    CHECK(a && b && na == nb);
    if (a && b && na == nb) CHECK(memcmp(a, b, sizeof(float) * (size_t)na) == 0);
    free(a);
    free(b);

    /* one huge shard: still named -00001-of-00001 and loadable */
    const char *prefix3 = test_tmp_path("-one");
    struct wgllm_gguf_split_params p3 = wgllm_gguf_split_default_params();
    int n3 = 0;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, prefix3, &p3, &n3, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(n3, 1);
    wgllm_gguf_split_path(path2, sizeof(path2), prefix3, 1, 1);
    CHECK(exists(path2));

    remove_shards(prefix, n);
    remove_shards(prefix2, n2);
    remove_shards(prefix3, n3);
    wgllm_gguf_free(in);
}

TEST(bad_arguments_give_clear_errors) {
    struct wgllm_error err;
    struct wgllm_gguf_split_params p = wgllm_gguf_split_default_params();
    const char *prefix = test_tmp_path("-bad");

    CHECK_EQ_INT(wgllm_gguf_split("/nonexistent/m.gguf", prefix, &p, NULL, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "/nonexistent/m.gguf") != NULL);

    struct wgllm_gguf_split_params none = p;
    none.max_bytes = 0;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, prefix, &none, NULL, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "max_bytes") != NULL);
    none.max_tensors = -1;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, prefix, &none, NULL, &err), WGLLM_STATUS_INVALID_ARGUMENT);

    /* a limit below every tensor: one tensor per shard (the soft limit) */
    struct wgllm_gguf_split_params tiny = p;
    tiny.max_bytes = 1;
    tiny.max_tensors = 0;
    struct wgllm_gguf *in = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(model_path, &in, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_split_plan(in, &tiny, NULL), wgllm_gguf_n_tensors(in)); /* one tensor each */
    wgllm_gguf_free(in);

    /* a folder that does not exist: the error names the shard, nothing stays behind */
    struct wgllm_gguf_split_params small = p;
    small.max_bytes = (uint64_t)4 << 20;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, "/nonexistent-dir/x", &small, NULL, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "/nonexistent-dir/x-00001-of-") != NULL);

    /* a shard that cannot be written half-way: the finished ones are removed */
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", test_tmp_path("-dir"));
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    char pre[600], blocker[700];
    snprintf(pre, sizeof(pre), "%s/m", dir);
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(model_path, &g, &err), WGLLM_STATUS_OK);
    int n = g ? (int)wgllm_gguf_split_plan(g, &small, NULL) : 3;
    wgllm_gguf_free(g);
    wgllm_gguf_split_path(blocker, sizeof(blocker), pre, 2, n);
    CHECK_EQ_INT(mkdir(blocker, 0755), 0); /* shard 2's name is taken by a folder */
    CHECK_EQ_INT(wgllm_gguf_split(model_path, pre, &small, NULL, &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "-00002-of-") != NULL);
    wgllm_gguf_split_path(blocker, sizeof(blocker), pre, 1, n);
    CHECK(!exists(blocker));
    wgllm_gguf_split_path(blocker, sizeof(blocker), pre, 2, n);
    rmdir(blocker);
    rmdir(dir);

    /* writing over the input itself is refused (it is still mapped) */
    const char *sprefix = test_tmp_path("-self");
    int ns = 0;
    CHECK_EQ_INT(wgllm_gguf_split(model_path, sprefix, &small, &ns, &err), WGLLM_STATUS_OK);
    char first[1024];
    wgllm_gguf_split_path(first, sizeof(first), sprefix, 1, ns);
    CHECK_EQ_INT(wgllm_gguf_split(first, sprefix, &small, NULL, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "is the input file itself") != NULL);
    /* and the input is intact */
    struct wgllm_gguf *again = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(first, &again, &err), WGLLM_STATUS_OK);
    wgllm_gguf_free(again);
    remove_shards(sprefix, ns);

    /* a corrupt input names the problem */
    const char *junk = test_tmp_path(".gguf");
    FILE *f = fopen(junk, "wb");
    fputs("GGUF\3\0\0\0garbage", f);
    fclose(f);
    CHECK(wgllm_gguf_split(junk, prefix, &p, NULL, &err) == WGLLM_STATUS_BAD_FORMAT);
    CHECK(strstr(err.message, "gguf") != NULL);
    unlink(junk);
}

/* `wgllm split` as a user runs it: exit status and stderr. */
static int run_cli(const char *args, char **err_text) {
    char err_path[512], cmd[2 * PATH_MAX + 8192];
    snprintf(err_path, sizeof(err_path), "%s", test_tmp_path(".err"));
    snprintf(cmd, sizeof(cmd), "'%s' %s > /dev/null 2> '%s'", wgllm_bin, args, err_path);
    int st = system(cmd);
    size_t n;
    *err_text = test_read_file(err_path, &n);
    if (!*err_text) *err_text = calloc(1, 1);
    unlink(err_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

TEST(cli_split) {
    if (access(wgllm_bin, X_OK) != 0) {
        fprintf(stderr, "  no wgllm binary at %s (build it with make)\n", wgllm_bin);
        CHECK(false);
        return;
    }
    char args[PATH_MAX + 4096], *e = NULL;
    const char *prefix = test_tmp_path("-cli");
    snprintf(args, sizeof(args), "split '%s' '%s' --split-max-size 4M", model_path, prefix);
    CHECK_EQ_INT(run_cli(args, &e), 0);
    CHECK(strstr(e, "shards; load the model with -m") != NULL);
    CHECK(strstr(e, "[1/") != NULL);
    free(e);
    struct wgllm_error err;
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(model_path, &g, &err), WGLLM_STATUS_OK);
    struct wgllm_gguf_split_params p = wgllm_gguf_split_default_params();
    p.max_bytes = (uint64_t)4 << 20;
    int n = g ? (int)wgllm_gguf_split_plan(g, &p, NULL) : 0;
    wgllm_gguf_free(g);
    char first[1024];
    wgllm_gguf_split_path(first, sizeof(first), prefix, 1, n);
    CHECK(exists(first));
    /* the split model runs like the original: same greedy text */
    snprintf(args, sizeof(args), "run -m '%s' -p 'Once upon a time' -n 6 -t 1 > '%s.a' 2>/dev/null && "
             "'%s' run -m '%s' -p 'Once upon a time' -n 6 -t 1 > '%s.b' 2>/dev/null && cmp -s '%s.a' '%s.b'",
             model_path, prefix, wgllm_bin, first, prefix, prefix, prefix);
    CHECK_EQ_INT(run_cli(args, &e), 0);
    free(e);
    snprintf(args, sizeof(args), "%s.a", prefix);
    unlink(args);
    snprintf(args, sizeof(args), "%s.b", prefix);
    unlink(args);
    remove_shards(prefix, n);

    static const struct {
        const char *args, *want;
    } bad[] = {
        {"split", "needs IN.gguf and OUT_PREFIX"},
        {"split a.gguf", "needs IN.gguf and OUT_PREFIX"},
        {"split a b c", "too many arguments"},
        {"split a b --split-max-size", "needs a size"},
        {"split a b --split-max-size 12X", "bad size '12X'"},
        {"split a b --split-max-size 0", "bad size '0'"},
        {"split a b --split-max-tensors 0", "bad tensor count '0'"},
        {"split a b --split-max-tensors x", "bad tensor count 'x'"},
        {"split a b --frobnicate", "unknown option '--frobnicate'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = run_cli(bad[i].args, &e);
        if (rc != 2 || !strstr(e, bad[i].want))
            fprintf(stderr, "  `wgllm %s`: exit %d, stderr: %s\n", bad[i].args, rc, e);
        CHECK_EQ_INT(rc, 2);
        CHECK(strstr(e, bad[i].want) != NULL);
        free(e);
    }
    CHECK_EQ_INT(run_cli("split /nonexistent/in.gguf /tmp/wgllm-never", &e), 1);
    CHECK(strstr(e, "/nonexistent/in.gguf") != NULL);
    free(e);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) snprintf(self, sizeof(self), "%s", argv[0]);
    /* build/<mode>/tests/test_split -> build/<mode>/wgllm */
    snprintf(wgllm_bin, sizeof(wgllm_bin), "%s/wgllm", dirname(dirname(self)));
    wgllm_base_init();
    wgllm_quant_init();
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.type = WGLLM_TYPE_Q8_0;
    const char *path = test_synth_path(&sp);
    if (!path) {
        test_failed++;
        return test_summary("test_split");
    }
    snprintf(model_path, sizeof(model_path), "%s", path);
    RUN(parse_size);
    RUN(shards_have_gguf_split_layout_and_same_logits);
    RUN(bad_arguments_give_clear_errors);
    RUN(cli_split);
    unlink(model_path);
    return test_summary("test_split");
}
