/*
 * test_stream.c - models whose weights stay in the file (stream_weights, and
 * wgllm_model_load_source, what the browser uses): the WebGPU backend uploads
 * them in bounded chunks and must compute exactly what it computes on the
 * mapped file (logits bit for bit), also when a weight is split into pieces
 * and when the model is split into shards; the fingerprint and the model
 * facts are the same; the CPU backend, and `auto` choosing the CPU, refuse
 * with a message naming stream_weights; a read that fails part-way through
 * the upload is an error naming the file, not a crash or a leak.
 *
 * The GPU parts run on Dawn + SwiftShader; without a WebGPU device they print
 * SKIP, unless WGLLM_REQUIRE_WEBGPU is set.
 */
#include "backend/webgpu/hal.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test.h"
#include "wgllm.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static int have_gpu;

static const char *synth(const char *shape, uint32_t type, uint64_t split_bytes) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = shape;
    sp.type = type;
    sp.seed = 11;
    sp.max_split_bytes = split_bytes;
    return test_synth_path(&sp);
}

static struct wgllm_model *load(const char *path, bool stream) {
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 2;
    mp.stream_weights = stream;
    struct wgllm_model *m = NULL;
    struct wgllm_error err = {0};
    if (wgllm_model_load(path, &mp, &m, &err)) fprintf(stderr, "  load %s: %s\n", path, err.message);
    return m;
}

static struct wgllm_context *new_ctx(struct wgllm_model *m, enum wgllm_backend b, struct wgllm_error *err) {
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 16;
    cp.backend = b;
    struct wgllm_context *c = NULL;
    wgllm_context_init(m, &cp, &c, err);
    return c;
}

/* Greedy steps on a WebGPU context; the logits of every step go to out. */
static bool run_steps(struct wgllm_model *m, int n_steps, float *out) {
    struct wgllm_error err = {0};
    struct wgllm_context *c = new_ctx(m, WGLLM_BACKEND_WEBGPU, &err);
    if (!c) {
        fprintf(stderr, "  context: %s\n", err.message);
        return false;
    }
    const int V = wgllm_model_n_vocab(m);
    int32_t prompt[3] = {1, 42, 7};
    bool ok = !wgllm_decode(c, prompt, 3, false, &err);
    for (int s = 0; ok && s < n_steps; s++) {
        const float *l = wgllm_get_logits(c);
        memcpy(out + (size_t)s * V, l, (size_t)V * sizeof(float));
        int32_t next = wgllm_argmax(l, V);
        ok = !wgllm_decode(c, &next, 1, false, &err);
    }
    if (!ok) fprintf(stderr, "  decode: %s\n", err.message);
    wgllm_context_free(c);
    return ok;
}

/* Mapped and streamed loads of `path` agree: facts, fingerprint, and (on a
 * GPU) the logits of every step, bit for bit. */
static void same_as_mapped(const char *path) {
    struct wgllm_model *a = load(path, false), *b = load(path, true);
    CHECK(a && b);
    if (!a || !b) goto out;
    CHECK(wgllm_model_streamed(b) && !wgllm_model_streamed(a));
    CHECK(b->tok_embd.data == NULL && b->layers[0].wq.data == NULL);
    CHECK_EQ_INT(wgllm_model_size(a), wgllm_model_size(b));
    CHECK(wgllm_model_fingerprint(a) == wgllm_model_fingerprint(b));
    CHECK(!memcmp(a->vectors, b->vectors, sizeof(float) * (size_t)a->hp.n_embd)); /* output_norm, read on load */
    if (have_gpu) {
        enum { STEPS = 4 };
        const size_t V = (size_t)wgllm_model_n_vocab(a);
        float *la = malloc(STEPS * V * sizeof(float)), *lb = malloc(STEPS * V * sizeof(float));
        CHECK(la && lb && run_steps(a, STEPS, la) && run_steps(b, STEPS, lb));
        CHECK(la && lb && !memcmp(la, lb, STEPS * V * sizeof(float)));
        free(la);
        free(lb);
    }
out:
    wgllm_model_free(a);
    wgllm_model_free(b);
}

TEST(streamed_equals_mapped) {
    const char *path = synth("tiny", WGLLM_TYPE_Q8_0, 0);
    CHECK(path != NULL);
    if (!path) return;
    same_as_mapped(path);
    /* weights in pieces: a piece's rows start inside the tensor */
    setenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES", "1048576", 1);
    same_as_mapped(path);
    unsetenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES");
    remove(path);
}

TEST(streamed_split_model) {
    const char *prefix = synth("tiny-qwen2", WGLLM_TYPE_Q4_0, 200000);
    CHECK(prefix != NULL);
    if (!prefix) return;
    char first[600];
    int n = 0; /* how many shards synth wrote */
    for (int c = 2; c < 100 && !n; c++) {
        wgllm_gguf_split_path(first, sizeof first, prefix, 1, c);
        if (!access(first, R_OK)) n = c;
    }
    CHECK(n > 1);
    if (n > 1) same_as_mapped(first);
    for (int i = 1; i <= n; i++) {
        char p[600];
        wgllm_gguf_split_path(p, sizeof p, prefix, i, n);
        remove(p);
    }
}

TEST(cpu_refuses_a_streamed_model) {
    const char *path = synth("tiny", WGLLM_TYPE_Q4_0, 0);
    struct wgllm_model *m = path ? load(path, true) : NULL;
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_error err = {0};
    struct wgllm_context *c = new_ctx(m, WGLLM_BACKEND_CPU, &err);
    CHECK(c == NULL && err.status == WGLLM_STATUS_UNSUPPORTED && strstr(err.message, "stream_weights"));
    wgllm_context_free(c);
    /* auto: WebGPU on a hardware adapter; on a software one (SwiftShader) it
     * chooses the CPU, which has no weights here: an error saying both */
    err = (struct wgllm_error){0};
    c = new_ctx(m, WGLLM_BACKEND_AUTO, &err);
    if (c) {
        CHECK(!strncmp(wgllm_context_backend(c), "webgpu", 6));
    } else {
        printf("  auto: %s\n", err.message);
        CHECK(strstr(err.message, "cpu (auto: ") && strstr(err.message, "stream_weights"));
    }
    wgllm_context_free(c);
    wgllm_model_free(m);
    remove(path);
}

/* A source over a file that fails once `budget` bytes were read. */
struct failing {
    int fd;
    uint64_t size, budget, done;
};

static enum wgllm_status failing_read(void *user, int file, uint64_t off, void *dst, size_t n, struct wgllm_error *err) {
    struct failing *f = user;
    (void)file;
    if (f->done + n > f->budget) return wgllm_error_set(err, WGLLM_STATUS_IO, "the disk went away");
    f->done += n;
    ssize_t got = pread(f->fd, dst, n, (off_t)off);
    if (got != (ssize_t)n) return wgllm_error_set(err, WGLLM_STATUS_IO, "short read");
    return WGLLM_STATUS_OK;
}

TEST(a_read_failing_during_the_upload) {
    const char *path = synth("tiny", WGLLM_TYPE_Q8_0, 0);
    CHECK(path != NULL);
    if (!path) return;
    struct failing f = {.fd = open(path, O_RDONLY | O_CLOEXEC), .budget = UINT64_MAX};
    CHECK(f.fd >= 0);
    f.size = (uint64_t)lseek(f.fd, 0, SEEK_END);
    const char *name = "tiny.gguf";
    struct wgllm_model_source src = {.n_files = 1, .sizes = &f.size, .names = &name, .read = failing_read, .user = &f};
    struct wgllm_model *m = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_model_load_source(&src, name, NULL, &m, &err), WGLLM_STATUS_OK);
    CHECK(m && wgllm_model_streamed(m));
    /* the header and the vectors were read; the matrices were not */
    CHECK(f.done < f.size / 2);
    if (m && have_gpu) {
        f.budget = f.done + f.size / 3; /* fails a third of the way into the weights */
        struct wgllm_context *c = new_ctx(m, WGLLM_BACKEND_WEBGPU, &err);
        printf("  %s\n", err.message);
        CHECK(c == NULL && err.status == WGLLM_STATUS_IO && strstr(err.message, "the disk went away") &&
              strstr(err.message, "tiny.gguf"));
        wgllm_context_free(c);
        /* and with the file readable again, the same model uploads */
        f.budget = UINT64_MAX;
        err = (struct wgllm_error){0};
        c = new_ctx(m, WGLLM_BACKEND_WEBGPU, &err);
        CHECK(c != NULL);
        wgllm_context_free(c);
    }
    wgllm_model_free(m);
    close(f.fd);
    remove(path);
}

int main(void) {
    wgllm_quant_init();
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_stream (GPU parts)", &required);
    if (required) return 1;
    have_gpu = g != NULL;
    wgllm_gpu_close(g);
    RUN(streamed_equals_mapped);
    RUN(streamed_split_model);
    RUN(cpu_refuses_a_streamed_model);
    RUN(a_read_failing_during_the_upload);
    return test_summary("test_stream");
}
