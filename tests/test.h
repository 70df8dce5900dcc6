/*
 * test.h - the small harness every C test executable uses.
 *
 *   TEST(name) { CHECK(x == 1); CHECK_EQ_INT(a, b); ... }
 *   int main(void) { RUN(name); ...; return test_summary("test_foo"); }
 *
 * Each executable ends with one line "test_foo: N passed, N failed"; a check
 * that fails prints its file, line and the values, and the test goes on so
 * one run shows every failure.
 */
#ifndef WGLLM_TEST_H
#define WGLLM_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int test_checks_failed_in_current;
extern int test_passed, test_failed;

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_checks_failed_in_current++;                                          \
        }                                                                             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                            \
    do {                                                                              \
        long long va_ = (long long)(a), vb_ = (long long)(b);                         \
        if (va_ != vb_) {                                                             \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__,      \
                    __LINE__, #a, #b, va_, vb_);                                      \
            test_checks_failed_in_current++;                                          \
        }                                                                             \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                         \
    do {                                                                              \
        double va_ = (double)(a), vb_ = (double)(b);                                  \
        if (!(fabs(va_ - vb_) <= (tol))) {                                            \
            fprintf(stderr, "  %s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n",         \
                    __FILE__, __LINE__, #a, #b, (double)(tol), va_, vb_);             \
            test_checks_failed_in_current++;                                          \
        }                                                                             \
    } while (0)

#define CHECK_STR(a, b)                                                               \
    do {                                                                              \
        const char *va_ = (a), *vb_ = (b);                                            \
        if (strcmp(va_, vb_) != 0) {                                                  \
            fprintf(stderr, "  %s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__,  \
                    __LINE__, #a, #b, va_, vb_);                                      \
            test_checks_failed_in_current++;                                          \
        }                                                                             \
    } while (0)

#define RUN(name) test_run(#name, name)

/* The tests' random numbers: one xorshift64 stream per executable, seeded
 * by TEST_RNG_SEED when the file defines it before including this header
 * (each test keeps the data it was written against). rng_u32 takes bits
 * 16..47 of the state, rng_uniform / rng_normal build on it, and rng_frand
 * (uniform in [-1, 1) from the top 24 bits) is the WebGPU tests' draw. */
#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ULL
#endif
static inline uint64_t rng_next(void) {
    static uint64_t state = TEST_RNG_SEED;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}
static inline uint32_t rng_u32(void) { return (uint32_t)(rng_next() >> 16); }
static inline float rng_uniform(void) { return (float)(rng_u32() & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f; }
/* approximately N(0, 1) (Irwin-Hall of 4) */
static inline float rng_normal(void) {
    return (rng_uniform() + rng_uniform() + rng_uniform() + rng_uniform()) * 0.8660254f;
}
static inline float rng_frand(void) { return (float)((rng_next() >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f; }
/* sum a[i] * b[i] in double (the exact value a kernel's float dot is checked
 * against), and in *mag the sum of the terms' magnitudes (the scale of its bound) */
static inline double test_dot_f64(const float *a, const float *b, int64_t n, double *mag) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) d += (double)a[i] * b[i], m += fabs((double)a[i] * b[i]);
    *mag = m;
    return d;
}

void test_run(const char *name, void (*fn)(void));
/* Prints the closing line and returns the process exit code. */
int test_summary(const char *suite);
/* Path of a file under the shared data folder (../shared, or $WGLLM_SHARED). */
const char *test_shared_path(const char *rel);
/* Runs this executable again with WGLLM_CPU=cap (WGLLM_BENCH unset), so the
 * kernels of a lower dispatch level are checked too; a failing child counts
 * as one failed test. */
void test_rerun_with_cpu_cap(const char *cap);
/* A whole file, malloc'd and NUL-terminated (not counted in *len); NULL when unreadable. */
char *test_read_file(const char *path, size_t *len);
/* Overwrites the value of `key` (GGUF type `type`, `n` bytes) in a GGUF file
 * in place; false when the key is not there with that type. */
bool test_patch_key(const char *path, const char *key, uint32_t type, const void *v, size_t n);
/* A fresh temporary file path (removed by the OS's tmp cleaning, not by us). */
const char *test_tmp_path(const char *suffix);

/* WebGPU tests: points Vulkan at SwiftShader unless VK_ICD_FILENAMES is set
 * (a real GPU's ICD wins) and opens the device. NULL after printing why
 * ("SKIP NAME: ..."), with *required set when WGLLM_REQUIRE_WEBGPU makes a
 * missing device a failure. */
struct wgllm_gpu;
struct wgllm_gpu *test_webgpu_open(const char *test_name, int *required);
/* Kernel tests on device g: a storage buffer holding `bytes` of data (NULL:
 * zeroed), its contents read back, and one dispatch (x, y, 1) of a WGSL
 * source with `params` (params_size bytes) in a fresh uniform buffer at
 * binding 0 and bufs at bindings 1..nbuf. Each prints what failed and
 * returns NULL / false. */
struct wgllm_gpu_buffer;
struct wgllm_gpu_buffer *test_gpu_upload(struct wgllm_gpu *g, const void *data, size_t bytes);
bool test_gpu_read(struct wgllm_gpu *g, struct wgllm_gpu_buffer *b, void *dst, size_t bytes);
bool test_gpu_dispatch(struct wgllm_gpu *g, const char *src, const char *label, const void *params,
                       size_t params_size, int nbuf, struct wgllm_gpu_buffer **bufs, uint32_t x, uint32_t y);

/* Engine tests: request parameters for greedy decoding of max_tokens tokens
 * (EOS ignored), and eight short prompts to run side by side. */
#include "wgllm.h"
struct wgllm_request_params test_greedy(int max_tokens);

/* Synthetic models (model/synth.h): written to a fresh temporary path (a
 * prefix when sp->max_split_bytes asks for shards); NULL after printing why. */
struct wgllm_synth_params;
const char *test_synth_path(const struct wgllm_synth_params *sp);
/* The same, loaded (mapped; n_threads 2) and its file removed (the mapping
 * keeps the data); NULL after printing why. */
struct wgllm_model *test_synth_model(const struct wgllm_synth_params *sp);
/* Prompt tokens (BOS added) that texts a and b share at the start: what the
 * engine's prefix reuse may skip; *n_b (may be NULL) gets b's token count. */
int test_common_prefix(const struct wgllm_model *m, const char *a, const char *b, int *n_b);
extern const char *const test_prompts[8];

/* The sampler chain (top-k, then top-p, min-p, temperature) on the host, in
 * double, for checking device draws: the kept candidates' ids (by logit,
 * largest first; ties to the lower id) and probabilities; returns how many
 * are kept. */
int test_chain_expected(const float *l, int nv, int top_k, float top_p, float min_p, float temp, int *ids,
                        double *prob);

/* A byte-level BPE vocabulary whose tokens 0..255 are the 256 bytes (with
 * no merge that applies, so raw text is one token per byte) followed by
 * n_special special tokens (types: WGLLM_TOKEN_TYPE_*), written as GGUF
 * with general.name and tokenizer.ggml.pre as given, then opened; NULL
 * after printing why. */
struct wgllm_vocab;
/* GPT-2's printable codepoint of byte b, as UTF-8 (that vocabulary's token text of the byte). */
void test_gpt2_byte_text(int b, char out[4]);
struct wgllm_vocab *test_byte_vocab(const char *const *special, const int32_t *types, int n_special,
                                    const char *name, const char *pre);

#endif
