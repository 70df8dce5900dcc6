/* test.c - the harness behind test.h. */
#include "test.h"

#include "backend/webgpu/hal.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "model/synth.h"
#include "vocab/vocab.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_checks_failed_in_current;
int test_passed, test_failed;

/* Whether name contains one of the comma-separated parts of list. */
static bool name_in_list(const char *name, const char *list) {
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        char part[128];
        snprintf(part, sizeof part, "%.*s", (int)WGLLM_MIN(n, sizeof part - 1), p);
        if (part[0] && strstr(name, part) != NULL) return true;
        p += n + (p[n] == ',');
    }
    return false;
}

void test_run(const char *name, void (*fn)(void)) {
    /* WGLLM_TEST_ONLY=a,b: run only the tests whose names contain one of
     * these (while working on them; the suite never sets it).
     * WGLLM_TEST_SKIP=a,b: all but those (the ThreadSanitizer pass of the
     * suite leaves out the cases that add compute but no threading) */
    const char *only = getenv("WGLLM_TEST_ONLY"), *skip = getenv("WGLLM_TEST_SKIP");
    if (only && *only && !name_in_list(name, only)) return;
    if (skip && *skip && name_in_list(name, skip)) {
        fprintf(stderr, "skip %s (WGLLM_TEST_SKIP)\n", name);
        return;
    }
    test_checks_failed_in_current = 0;
    /* each test's seconds, so the suite's slow cases are visible in its logs */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fn();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (test_checks_failed_in_current == 0) {
        test_passed++;
        fprintf(stderr, "ok   %s (%.1f s)\n", name, sec);
    } else {
        test_failed++;
        fprintf(stderr, "FAIL %s (%d checks, %.1f s)\n", name, test_checks_failed_in_current, sec);
    }
}

int test_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, test_passed, test_failed);
    return test_failed == 0 ? 0 : 1;
}

const char *test_shared_path(const char *rel) {
    static char buf[8][1024];
    static int next;
    char *b = buf[next++ % 8];
    const char *root = getenv("WGLLM_SHARED");
    snprintf(b, 1024, "%s/%s", root ? root : "../shared", rel);
    return b;
}

const char *test_tmp_path(const char *suffix) {
    static char buf[8][512];
    static int next, counter;
    char *b = buf[next++ % 8];
    const char *dir = getenv("TMPDIR");
    snprintf(b, 512, "%s/wgllm-test-%d-%d%s", dir ? dir : "/tmp", (int)getpid(), counter++, suffix);
    return b;
}

char *test_read_file(const char *path, size_t *len) {
    char *b;
    return wgllm_read_file(path, 0, &b, len, NULL) == WGLLM_STATUS_OK ? b : NULL;
}

void test_rerun_with_cpu_cap(const char *cap) {
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) return;
    self[len] = 0;
    fprintf(stderr, "-- again with WGLLM_CPU=%s\n", cap);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        setenv("WGLLM_CPU", cap, 1);
        unsetenv("WGLLM_BENCH");
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "FAIL the WGLLM_CPU=%s run\n", cap);
        test_failed++;
    }
}

struct wgllm_gpu *test_webgpu_open(const char *test_name, int *required) {
    const char *icd = "/usr/lib/chromium/vk_swiftshader_icd.json";
    FILE *f = fopen(icd, "r");
    if (f) {
        fclose(f);
        setenv("VK_ICD_FILENAMES", icd, 0);
    }
    if (!getenv("XDG_RUNTIME_DIR")) setenv("XDG_RUNTIME_DIR", "/tmp", 0);
    struct wgllm_gpu *g = NULL;
    struct wgllm_error err = {0};
    *required = 0;
    if (wgllm_gpu_open(&g, &err) == WGLLM_STATUS_OK) return g;
    printf("SKIP %s: %s\n", test_name, err.message);
    if (getenv("WGLLM_REQUIRE_WEBGPU")) {
        printf("%s: WGLLM_REQUIRE_WEBGPU is set, so a missing WebGPU device is a failure\n", test_name);
        *required = 1;
    }
    return NULL;
}

struct wgllm_gpu_buffer *test_gpu_upload(struct wgllm_gpu *g, const void *data, size_t bytes) {
    struct wgllm_error err = {0};
    struct wgllm_gpu_buffer *b = wgllm_gpu_buffer_create(g, bytes, WGLLM_GPU_STORAGE, "test", &err);
    if (!b) fprintf(stderr, "  buffer: %s\n", err.message);
    else if (data) wgllm_gpu_buffer_write(g, b, 0, data, bytes);
    return b;
}

bool test_gpu_read(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, void *dst, size_t bytes) {
    struct wgllm_error err = {0};
    if (!wgllm_gpu_buffer_read(g, b, 0, dst, bytes, &err)) return true;
    fprintf(stderr, "  readback: %s\n", err.message);
    return false;
}

bool test_gpu_dispatch(struct wgllm_gpu *g, const char *src, const char *label, const void *params,
                       size_t params_size, int nbuf, struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y) {
    struct wgllm_error err = {0};
    struct wgllm_gpu_pipeline *p = wgllm_gpu_pipeline_get(g, src, label, &err);
    struct wgllm_gpu_buffer *ub = p ? wgllm_gpu_buffer_create(g, params_size, WGLLM_GPU_UNIFORM, "params", &err) : NULL;
    bool ok = false;
    if (ub && nbuf < 15) {
        wgllm_gpu_buffer_write(g, ub, 0, params, params_size);
        struct wgllm_gpu_binding bd[16] = {{ub, 0, 0}};
        for (int i = 0; i < nbuf; i++) bd[i + 1] = (struct wgllm_gpu_binding){bufs[i], 0, 0};
        struct wgllm_gpu_bindgroup *bg = wgllm_gpu_bindgroup_create(g, p, nbuf + 1, bd, &err);
        if (bg) {
            wgllm_gpu_batch_begin(g);
            wgllm_gpu_dispatch(g, p, bg, x, y, 1);
            ok = !wgllm_gpu_batch_submit(g, &err);
            wgllm_gpu_bindgroup_destroy(g, bg);
        }
    }
    if (ub) wgllm_gpu_buffer_destroy(g, ub);
    if (!ok) fprintf(stderr, "  %s: %s\n", label, err.message[0] ? err.message : "too many bindings");
    return ok;
}

struct wgllm_request_params test_greedy(int max_tokens) {
    struct wgllm_request_params p = wgllm_request_default_params();
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0.0f;
    p.ignore_eos = true;
    return p;
}

const char *const test_prompts[8] = {
    "Once upon a time", "The lighthouse keeper climbed", "In winter the wind", "Nobody ever read",
    "A small brass lamp", "Fishermen talking a mile away", "The number of gulls", "Every evening at dusk",
};

const char *test_synth_path(const struct wgllm_synth_params *sp) {
    const char *path = test_tmp_path(sp->max_split_bytes ? "" : ".gguf");
    struct wgllm_error err = {0};
    if (wgllm_synth_write(sp, path, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  synth %s: %s\n", sp->shape ? sp->shape : "tiny", err.message);
        return NULL;
    }
    return path;
}

struct wgllm_model *test_synth_model(const struct wgllm_synth_params *sp) {
    const char *path = test_synth_path(sp);
    if (!path) return NULL;
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 2;
    struct wgllm_model *m = NULL;
    struct wgllm_error err = {0};
    if (wgllm_model_load(path, &mp, &m, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  load %s: %s\n", path, err.message);
    remove(path);
    return m;
}

int test_common_prefix(const struct wgllm_model *m, const char *a, const char *b, int *n_b) {
    int32_t ta[512], tb[512];
    const int na = wgllm_tokenize(m, a, strlen(a), ta, 512, true, false, NULL);
    const int nb = wgllm_tokenize(m, b, strlen(b), tb, 512, true, false, NULL);
    if (n_b) *n_b = nb;
    int n = 0;
    while (n < na && n < nb && ta[n] == tb[n]) n++;
    return n;
}

void test_gpt2_byte_text(int b, char out[4]) {
    int cp = b, k = 0;
#define PRINTABLE(x) (((x) >= 33 && (x) <= 126) || ((x) >= 161 && (x) <= 172) || ((x) >= 174 && (x) <= 255))
    if (!PRINTABLE(b)) {
        for (int x = 0; x < b; x++) k += !PRINTABLE(x);
        cp = 256 + k;
    }
#undef PRINTABLE
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

struct wgllm_vocab *test_byte_vocab(const char *const *special, const int32_t *types, int n_special,
                                    const char *name, const char *pre) {
    const int n = 256 + n_special;
    const char **texts = malloc(sizeof *texts * (size_t)n);
    int32_t *tt = malloc(sizeof *tt * (size_t)n);
    static char bytes[256][4];
    for (int b = 0; b < 256; b++) {
        test_gpt2_byte_text(b, bytes[b]);
        texts[b] = bytes[b];
        tt[b] = WGLLM_TOKEN_TYPE_NORMAL;
    }
    for (int i = 0; i < n_special; i++) {
        texts[256 + i] = special[i];
        tt[256 + i] = types[i];
    }
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.name", name);
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    wgllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, (uint64_t)n);
    wgllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", WGLLM_GGUF_TYPE_INT32, tt, (uint64_t)n);
    const char *merges[] = {"\x01 \x02"}; /* the bytes' symbols are other codepoints: never applies */
    wgllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    struct wgllm_gguf *g = NULL;
    struct wgllm_vocab *v = NULL;
    if (wgllm_gguf_writer_write(w, path, NULL, NULL, &err) != WGLLM_STATUS_OK ||
        wgllm_gguf_open(path, &g, &err) != WGLLM_STATUS_OK || wgllm_vocab_init(g, &v, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "  byte vocabulary: %s\n", err.message);
        v = NULL;
    }
    wgllm_gguf_free(g);
    wgllm_gguf_writer_free(w);
    remove(path);
    free(texts);
    free(tt);
    return v;
}

int test_chain_expected(const float *l, int nv, int top_k, float top_p, float min_p, float temp, int *ids,
                        double *prob) {
    int n = 0;
    for (int k = 0; k < top_k; k++) { /* the top_k by selection */
        int best = -1;
        for (int i = 0; i < nv; i++) {
            bool taken = false;
            for (int j = 0; j < n; j++) taken |= ids[j] == i;
            if (!taken && (best < 0 || l[i] > l[best])) best = i;
        }
        ids[n++] = best;
    }
    const double mx = l[ids[0]];
    if (top_p < 1.0f) {
        double z = 0, cum = 0;
        for (int i = 0; i < n; i++) z += exp(l[ids[i]] - mx);
        for (int i = 0; i < n; i++) {
            cum += exp(l[ids[i]] - mx) / z;
            if (cum >= top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        int k = 1;
        while (k < n && l[ids[k]] >= mx + log(min_p)) k++;
        n = k;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += exp((l[ids[i]] - mx) / temp);
    for (int i = 0; i < n; i++) prob[i] = exp((l[ids[i]] - mx) / temp) / total;
    return n;
}

/* Overwrites the value of `key` (type `type`, `n` bytes) in a GGUF file;
 * false when the key is not there. */
bool test_patch_key(const char *path, const char *key, uint32_t type, const void *v, size_t n) {
    size_t len;
    char *buf = test_read_file(path, &len);
    bool done = false;
    const size_t kl = strlen(key);
    for (size_t i = 8; buf && !done && i + kl + 4 + n <= len; i++) {
        uint64_t l;
        uint32_t t;
        memcpy(&l, buf + i - 8, 8);
        if (l != kl || memcmp(buf + i, key, kl)) continue;
        memcpy(&t, buf + i + kl, 4);
        if (t != type) break;
        memcpy(buf + i + kl + 4, v, n);
        done = true;
    }
    FILE *f = done ? fopen(path, "wb") : NULL;
    if (f) {
        done = fwrite(buf, 1, len, f) == len;
        fclose(f);
    }
    free(buf);
    return done;
}
