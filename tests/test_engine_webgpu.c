/*
 * test_engine_webgpu.c - the local engine on the WebGPU backend (Dawn +
 * SwiftShader without a GPU), on the two-layer `tiny` synthetic model:
 * greedy results equal the CPU engine's on the same requests, a request
 * alone equals the same request batched with 7 others, a context_key
 * follow-up computes only its suffix and matches a cold run, a snapshot
 * restore matches the first run, embeddings agree with the CPU's, no
 * GPU buffer is created after the engine has loaded, and a context shift
 * leaves the same K/V cache as the CPU's and the same generated tokens.
 * Device sampling: greedy and seeded requests are sampled on the GPU (only
 * ids read back; the tokens as host sampling picks them, the same seed the
 * same text), settings the device lacks (logprobs, penalties) fall back to
 * the host, also batched together with a device-sampled request.
 * Grammar-constrained requests too: the mask goes up with each step and
 * only ids come back (tokens as host sampling's, 8 bytes read back a token).
 *
 * Without a WebGPU library or adapter it prints SKIP and passes, unless
 * WGLLM_REQUIRE_WEBGPU is set.
 */
#include "test.h"

#include "backend/backend.h"
#include "backend/webgpu/hal.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <math.h>

static struct wgllm_model *model;
static struct wgllm_engine *gpu8; /* WebGPU, 8 slots: shared by the tests (pipelines compile once per engine) */
static const char *turn1 = "The lighthouse keeper climbed the spiral stairs every evening at dusk";
static const char *turn2 = "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lamp";

static struct wgllm_engine *new_engine(enum wgllm_backend backend, int n_slots, int n_ctx, size_t snapshot_bytes) {
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.backend = backend;
    ep.n_slots = n_slots;
    ep.n_ctx = n_ctx;
    ep.n_batch = 64;
    ep.snapshot_bytes = snapshot_bytes;
    ep.min_snapshot_tokens = 8;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err = {0};
    if (wgllm_engine_init(model, &ep, &e, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  engine: %s\n", err.message);
    return e;
}

enum { N = 8 };

/* Greedy tokens of the first n_alone prompts alone (one after the other),
 * then of all 8 at once. */
static void run_prompts(struct wgllm_engine *e, int n_alone, int32_t alone[8][N], int32_t together[8][N]) {
    struct wgllm_request_params p = test_greedy(N);
    for (int i = 0; i < n_alone; i++) {
        struct wgllm_result r;
        CHECK_EQ_INT(wgllm_query(e, test_prompts[i], &p, &r, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(r.n_tokens, N);
        if (r.n_tokens == N) memcpy(alone[i], r.tokens, sizeof(alone[i]));
        wgllm_result_free(&r);
    }
    struct wgllm_request *req[8];
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(wgllm_engine_submit_query(e, test_prompts[i], strlen(test_prompts[i]), &p, &req[i], NULL), WGLLM_STATUS_OK);
    for (int i = 0; i < 8; i++) {
        struct wgllm_result r;
        wgllm_request_wait(req[i], &r);
        CHECK_EQ_INT(r.n_tokens, N);
        if (r.n_tokens == N) memcpy(together[i], r.tokens, sizeof(together[i]));
        wgllm_result_free(&r);
    }
}

TEST(same_tokens_as_the_cpu_engine_alone_and_batched) {
    int32_t ca[8][N] = {{0}}, cb[8][N] = {{0}}, ga[8][N] = {{0}}, gb[8][N] = {{0}};
    struct wgllm_engine *ce = new_engine(WGLLM_BACKEND_CPU, 8, 128, 0);
    CHECK(ce != NULL);
    if (!ce) return;
    run_prompts(ce, 8, ca, cb);
    wgllm_engine_free(ce);
    struct wgllm_engine *ge = gpu8;
    const uint64_t loaded = wgllm_gpu_buffers_created();
    const int64_t t0 = wgllm_time_us();
    run_prompts(ge, 2, ga, gb); /* SwiftShader is slow: two alone, the CPU's alone stand for the rest */
    const double s = (wgllm_time_us() - t0) / 1e6;
    CHECK_EQ_INT(wgllm_gpu_buffers_created(), loaded); /* nothing created while serving */
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(ge, &m);
    printf("  webgpu engine: 10 requests, %llu prompt + %llu generated tokens in %llu ticks, %.1f s\n",
           (unsigned long long)m.prompt_tokens, (unsigned long long)m.generated_tokens, (unsigned long long)m.ticks, s);
    int same_cpu = 0, same_batched = 0, cpu_batched = 0;
    for (int i = 0; i < 8; i++) {
        same_cpu += !memcmp(gb[i], ca[i], sizeof(ca[i]));
        same_batched += i < 2 && !memcmp(ga[i], gb[i], sizeof(ga[i]));
        cpu_batched += !memcmp(ca[i], cb[i], sizeof(ca[i]));
    }
    CHECK_EQ_INT(cpu_batched, 8);
    CHECK_EQ_INT(same_cpu, 8);     /* WebGPU batched = CPU alone */
    CHECK_EQ_INT(same_batched, 2); /* WebGPU alone = WebGPU batched with 7 others */
}

TEST(context_key_suffix_and_snapshot_restore) {
    struct wgllm_request_params p = test_greedy(6);
    const char *other = "In summer the sea was so calm that he could hear fishermen talking a mile away";
    struct wgllm_result cold, w1, w2, o, back;
    CHECK_EQ_INT(wgllm_query(gpu8, turn2, &p, &cold, NULL), WGLLM_STATUS_OK); /* cold, in another engine */
    const uint64_t before = wgllm_gpu_buffers_created();
    struct wgllm_engine *e = new_engine(WGLLM_BACKEND_WEBGPU, 1, 128, 16 << 20);
    CHECK(e != NULL);
    if (!e) return;
    p.context_key = "conversation";
    const uint64_t loaded = wgllm_gpu_buffers_created();
    CHECK(loaded > before);
    CHECK_EQ_INT(wgllm_query(e, turn1, &p, &w1, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_query(e, turn2, &p, &w2, NULL), WGLLM_STATUS_OK);
    int n2;
    const int lcp = test_common_prefix(model, turn1, turn2, &n2);
    CHECK(lcp > 10);
    CHECK_EQ_INT(w2.usage.prompt_tokens, n2);
    CHECK_EQ_INT(w2.usage.cached_tokens, lcp); /* only the suffix was computed */
    CHECK(w2.n_tokens == cold.n_tokens && !memcmp(w2.tokens, cold.tokens, sizeof(int32_t) * (size_t)cold.n_tokens));
    /* The cold prompt went through the tiled MATMUL (8 tokens or more), the
     * warm suffix through MATVEC: the same products summed in another order,
     * which these random models amplify to a few 1e-3 in logprobs (measured
     * up to 5.5e-3 on SwiftShader). Wrong or shifted KV changes the tokens. */
    const double lp_tol = 2e-2;
    for (int i = 0; i < cold.n_tokens && i < w2.n_tokens; i++) CHECK_NEAR(w2.logprobs[i], cold.logprobs[i], lp_tol);
    /* another key takes the only slot (the conversation is saved as a snapshot),
     * then the conversation comes back from its snapshot */
    p.context_key = "other";
    CHECK_EQ_INT(wgllm_query(e, other, &p, &o, NULL), WGLLM_STATUS_OK);
    p.context_key = "conversation";
    CHECK_EQ_INT(wgllm_query(e, turn2, &p, &back, NULL), WGLLM_STATUS_OK);
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(e, &m);
    CHECK(m.snapshots_saved >= 1);
    CHECK_EQ_INT(m.snapshots_restored, 1);
    CHECK_EQ_INT(back.usage.cached_tokens, n2 - 1);
    CHECK(back.n_tokens == cold.n_tokens && !memcmp(back.tokens, cold.tokens, sizeof(int32_t) * (size_t)cold.n_tokens));
    for (int i = 0; i < cold.n_tokens && i < back.n_tokens; i++) CHECK_NEAR(back.logprobs[i], cold.logprobs[i], lp_tol);
    CHECK_EQ_INT(wgllm_gpu_buffers_created(), loaded);
    wgllm_result_free(&cold);
    wgllm_result_free(&w1);
    wgllm_result_free(&w2);
    wgllm_result_free(&o);
    wgllm_result_free(&back);
    wgllm_engine_free(e);
}

TEST(embeddings_agree_with_the_cpu) {
    struct wgllm_engine *ce = new_engine(WGLLM_BACKEND_CPU, 2, 128, 0);
    struct wgllm_engine *ge = gpu8;
    CHECK(ce && ge);
    if (ce && ge) {
        const int E = wgllm_model_n_embd(model);
        float *a = calloc((size_t)E, sizeof(float)), *b = calloc((size_t)E, sizeof(float));
        int na = 0, nb = 0;
        const char *text = "A small brass lamp on the table by the window";
        CHECK_EQ_INT(wgllm_embed(ce, text, strlen(text), WGLLM_POOLING_MEAN, true, a, E, &na, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_embed(ge, text, strlen(text), WGLLM_POOLING_MEAN, true, b, E, &nb, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(na, E);
        CHECK_EQ_INT(nb, E);
        double dot = 0, md = 0;
        for (int i = 0; i < E; i++) dot += (double)a[i] * b[i], md = fmax(md, fabs((double)a[i] - b[i]));
        printf("  embeddings: cosine %.9f, max |diff| %.2e\n", dot, md);
        CHECK(dot > 0.99999);
        CHECK(md < 1e-4);
        free(a);
        free(b);
    }
    wgllm_engine_free(ce);
}

/* ---- context shift ------------------------------------------------------ */

/* Snapshots hold per layer n keys (rows) then the values: the CPU's as VD
 * rows of n positions, WebGPU's as n rows of VD (as each cache holds them).
 * Converts between the two (to_gpu: CPU -> WebGPU). */
static void snap_convert(const struct wgllm_hparams *hp, int n, const wgllm_fp16 *src, wgllm_fp16 *dst, bool to_gpu) {
    const size_t KD = (size_t)hp->n_head_kv * hp->head_dim_k, VD = (size_t)hp->n_head_kv * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        const wgllm_fp16 *s = src + (size_t)il * n * (KD + VD);
        wgllm_fp16 *d = dst + (size_t)il * n * (KD + VD);
        memcpy(d, s, (size_t)n * KD * sizeof(wgllm_fp16));
        for (int p = 0; p < n; p++)
            for (size_t j = 0; j < VD; j++) {
                const size_t rows = n * KD + (size_t)p * VD + j, cols = n * KD + j * n + p;
                d[to_gpu ? rows : cols] = s[to_gpu ? cols : rows];
            }
    }
}

/* f16 bits as integers ordered like the values (adjacent values differ by 1). */
static int f16_ordered(wgllm_fp16 h) { return h & 0x8000 ? -(int)(h & 0x7fff) : (int)h; }

static struct wgllm_model *shape_model_of(const char *shape, uint32_t type, uint64_t seed) {
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = shape;
    sp.type = type;
    sp.seed = seed;
    return test_synth_model(&sp);
}

static struct wgllm_model *shape_model(const char *shape) { return shape_model_of(shape, WGLLM_TYPE_Q8_0, 5); }

/* The same cache state (the CPU's, loaded into WebGPU sequence 1) shifted
 * on both backends: V rows equal bit for bit, K within one f16 ulp (only
 * the final rounding may differ), the kept rows and the other sequence (which
 * WebGPU decoded itself) untouched. Normal RoPE (tiny), NEOX (tiny-qwen2),
 * frequency factors (tiny-ropefreqs), local layers with a RoPE of their own
 * (tiny-gemma3), LongRoPE's factors and attention factor (tiny-phi3-longctx)
 * and a last layer without RoPE (tiny-smollm3). A rotation by one position
 * too few, NEOX pairs taken as normal ones, the global table on a local
 * layer or a rotation of an unrotated layer moves thousands of keys. */
TEST(seq_shift_leaves_the_cpu_cache) {
    static const char *shapes[] = {"tiny", "tiny-qwen2", "tiny-ropefreqs", "tiny-gemma3", "tiny-phi3-longctx",
                                   "tiny-smollm3"};
    enum { NT = 44, KEEP = 4, DISCARD = 19, NS = NT - DISCARD };
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        struct wgllm_model *m = shape_model(shapes[si]);
        CHECK(m != NULL);
        if (!m) continue;
        const struct wgllm_hparams *hp = &m->hp;
        const int nv = wgllm_model_n_vocab(m);
        int32_t tok[NT];
        for (int i = 0; i < NT; i++) tok[i] = (int32_t)((i * 7919 + 101) % nv);
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_ctx = 64;
        cp.n_threads = 2;
        struct wgllm_context *cc = NULL, *gc = NULL;
        struct wgllm_error err = {0};
        CHECK_EQ_INT(wgllm_context_init(m, &cp, &cc, &err), WGLLM_STATUS_OK);
        cp.backend = WGLLM_BACKEND_WEBGPU;
        cp.n_seq = 2;
        CHECK_EQ_INT(wgllm_context_init(m, &cp, &gc, &err), WGLLM_STATUS_OK);
        if (!cc || !gc) {
            fprintf(stderr, "  %s: %s\n", shapes[si], err.message);
            wgllm_context_free(cc), wgllm_context_free(gc), wgllm_model_free(m);
            continue;
        }
        CHECK_EQ_INT(wgllm_decode(cc, tok, NT, false, NULL), WGLLM_STATUS_OK);
        int32_t pos[NT], seq[NT];
        for (int i = 0; i < NT; i++) pos[i] = i, seq[i] = 0;
        struct wgllm_batch bt = {.n = NT, .token = tok, .pos = pos, .seq = seq};
        CHECK_EQ_INT(wgllm_context_decode_batch(gc, &bt, false, NULL), WGLLM_STATUS_OK);
        const size_t sz = wgllm_context_seq_state_size(cc, NT), nel = sz / sizeof(wgllm_fp16);
        CHECK_EQ_INT((int)wgllm_context_seq_state_size(gc, NT), (int)sz);
        wgllm_fp16 *cpu = malloc(sz), *conv = malloc(sz), *gpu = malloc(sz), *other = malloc(sz), *other2 = malloc(sz);
        wgllm_context_seq_save(cc, 0, NT, cpu);
        snap_convert(hp, NT, cpu, conv, true);
        wgllm_context_seq_load(gc, 1, NT, conv);
        wgllm_context_seq_save(gc, 0, NT, other);

        CHECK_EQ_INT(wgllm_context_shift(cc, KEEP, DISCARD, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_context_seq_shift(gc, 1, NT, KEEP, DISCARD, &err), WGLLM_STATUS_OK);
        wgllm_context_seq_save(cc, 0, NS, cpu);
        wgllm_context_seq_save(gc, 1, NS, gpu);
        snap_convert(hp, NS, gpu, conv, false);
        wgllm_context_seq_save(gc, 0, NT, other2);
        CHECK(memcmp(other, other2, sz) == 0); /* sequence 0 untouched */

        const size_t KD = (size_t)hp->n_head_kv * hp->head_dim_k, VD = (size_t)hp->n_head_kv * hp->head_dim_v;
        int v_diff = 0, k_far = 0, k_ulp = 0, kept_diff = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            const wgllm_fp16 *a = cpu + (size_t)il * NS * (KD + VD), *b = conv + (size_t)il * NS * (KD + VD);
            for (size_t i = 0; i < (size_t)NS * VD; i++) v_diff += a[NS * KD + i] != b[NS * KD + i];
            for (size_t i = 0; i < (size_t)NS * KD; i++) {
                const int d = abs(f16_ordered(a[i]) - f16_ordered(b[i]));
                k_far += d > 1;
                k_ulp += d == 1;
                kept_diff += i < KEEP * KD && d != 0;
            }
        }
        printf("  %s: %d of %zu moved K values one f16 ulp from the CPU's, %d further; V: %d differ\n", shapes[si],
               k_ulp, (size_t)hp->n_layer * (NS - KEEP) * KD, k_far, v_diff);
        CHECK_EQ_INT(v_diff, 0);
        CHECK_EQ_INT(k_far, 0);
        CHECK_EQ_INT(kept_diff, 0);
        (void)nel;
        free(cpu), free(conv), free(gpu), free(other), free(other2);
        /* bad ranges are refused on WebGPU as on the CPU */
        CHECK_EQ_INT(wgllm_context_seq_shift(gc, 1, NT, 30, 20, NULL), WGLLM_STATUS_INVALID_ARGUMENT);
        CHECK_EQ_INT(wgllm_context_seq_shift(gc, 2, NT, 1, 2, NULL), WGLLM_STATUS_INVALID_ARGUMENT);
        wgllm_context_free(cc);
        wgllm_context_free(gc);
        wgllm_model_free(m);
    }
}

/* Greedy generation past a small context with context_shift on: the
 * WebGPU engine shifts as often as the CPU engine and gives its tokens. */
TEST(context_shift_generation_matches_the_cpu_engine) {
    enum { CTX = 32, GEN = 60 };
    struct wgllm_engine *eng[2] = {NULL, NULL};
    int32_t toks[2][GEN] = {{0}};
    uint64_t shifts[2] = {0, 0};
    for (int b = 0; b < 2; b++) {
        struct wgllm_engine_params ep = wgllm_engine_default_params();
        ep.backend = b ? WGLLM_BACKEND_WEBGPU : WGLLM_BACKEND_CPU;
        ep.n_slots = 1;
        ep.n_ctx = CTX;
        ep.n_batch = 32;
        ep.context_shift = true;
        struct wgllm_error err = {0};
        if (wgllm_engine_init(model, &ep, &eng[b], &err) != WGLLM_STATUS_OK) fprintf(stderr, "  engine: %s\n", err.message);
        CHECK(eng[b] != NULL);
        if (!eng[b]) continue;
        struct wgllm_request_params p = test_greedy(GEN);
        struct wgllm_result r;
        CHECK_EQ_INT(wgllm_query(eng[b], "The lighthouse keeper", &p, &r, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(r.n_tokens, GEN);
        if (r.n_tokens == GEN) memcpy(toks[b], r.tokens, sizeof toks[b]);
        wgllm_result_free(&r);
        struct wgllm_engine_metrics mt;
        wgllm_engine_metrics(eng[b], &mt);
        shifts[b] = mt.context_shifts;
        wgllm_engine_free(eng[b]);
    }
    printf("  %llu shifts on the CPU, %llu on WebGPU\n", (unsigned long long)shifts[0], (unsigned long long)shifts[1]);
    CHECK(shifts[0] >= 2);
    CHECK(shifts[1] == shifts[0]);
    int same = 0;
    while (same < GEN && toks[0][same] == toks[1][same]) same++;
    if (same < GEN) printf("  tokens differ from %d on\n", same);
    CHECK_EQ_INT(same, GEN);
}

/* Architectures beyond llama's block (gemma3: local layers with their own
 * RoPE past the window of 8, GeGLU, post-norms, scaled embeddings and
 * queries; phi3: fused matrices split at load, NEOX RoPE): the WebGPU
 * engine's greedy tokens are the CPU engine's, prompt (one pass of 9
 * tokens: mat-mats) and 24 generated tokens. The two backends' f32 sums
 * differ in order (~1e-7), and tiny-gemma3 turns that into a 2^-11 jump
 * wherever a value sits on an f16 or Q8_0 rounding boundary (GeGLU's f16
 * input, the K/V cache; see test_webgpu_model's compare_arch): the seed is
 * one whose greedy path has no near-tie within such a jump (seed 5 has a
 * 0.06 gap at step 5, and the tokens part there). */
TEST(gemma3_and_phi3_greedy_tokens_as_the_cpu_engine) {
    static const char *shapes[] = {"tiny-gemma3", "tiny-phi3"};
    enum { GEN = 24 };
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        struct wgllm_model *m = shape_model_of(shapes[si], WGLLM_TYPE_Q4_0, 3);
        CHECK(m != NULL);
        if (!m) continue;
        int32_t toks[2][GEN] = {{0}};
        for (int b = 0; b < 2; b++) {
            struct wgllm_engine_params ep = wgllm_engine_default_params();
            ep.backend = b ? WGLLM_BACKEND_WEBGPU : WGLLM_BACKEND_CPU;
            ep.n_slots = 1;
            ep.n_ctx = 64;
            ep.n_batch = 32;
            struct wgllm_engine *e = NULL;
            struct wgllm_error err = {0};
            if (wgllm_engine_init(m, &ep, &e, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  engine: %s\n", err.message);
            CHECK(e != NULL);
            if (!e) continue;
            CHECK(b == 0 || strncmp(wgllm_engine_backend(e), "webgpu", 6) == 0);
            struct wgllm_request_params p = test_greedy(GEN);
            struct wgllm_result r;
            CHECK_EQ_INT(wgllm_query(e, test_prompts[1], &p, &r, NULL), WGLLM_STATUS_OK);
            CHECK_EQ_INT(r.n_tokens, GEN);
            if (r.n_tokens == GEN) memcpy(toks[b], r.tokens, sizeof toks[b]);
            wgllm_result_free(&r);
            wgllm_engine_free(e);
        }
        int same = 0;
        while (same < GEN && toks[0][same] == toks[1][same]) same++;
        printf("  %s: %d of %d greedy tokens as the CPU engine's\n", shapes[si], same, GEN);
        CHECK_EQ_INT(same, GEN);
        wgllm_model_free(m);
    }
}

/* ---- device sampling ------------------------------------------------------ */

static uint64_t device_sampled(struct wgllm_engine *e) {
    struct wgllm_engine_metrics m;
    wgllm_engine_metrics(e, &m);
    return m.device_sampled_tokens;
}

static bool query_ok(struct wgllm_engine *e, const char *prompt, const struct wgllm_request_params *p,
                     struct wgllm_result *r) {
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_query(e, prompt, p, r, &err);
    if (st != WGLLM_STATUS_OK) fprintf(stderr, "  query: %s\n", err.message);
    return st == WGLLM_STATUS_OK && r->finish == WGLLM_FINISH_LENGTH && r->n_tokens == p->max_tokens;
}

static bool same_tokens(const struct wgllm_result *a, const struct wgllm_result *b) {
    return a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens) &&
           a->text_len == b->text_len && !memcmp(a->text, b->text, a->text_len);
}

/* Greedy on WebGPU: sampled on the device (the counter counts every token),
 * the tokens the CPU engine gives and those host sampling gives on WebGPU
 * (n_probs forces it: the pick is the same argmax), logprobs as the host's
 * log-softmax up to f32. */
TEST(greedy_requests_are_sampled_on_the_device) {
    const char *prompt = test_prompts[1];
    struct wgllm_request_params p = test_greedy(N);
    struct wgllm_result dev, host, cpu;
    struct wgllm_engine *ce = new_engine(WGLLM_BACKEND_CPU, 1, 128, 0);
    CHECK(ce != NULL);
    if (!ce) return;
    CHECK(query_ok(ce, prompt, &p, &cpu));
    CHECK_EQ_INT(device_sampled(ce), 0); /* the CPU backend never samples on a device */
    wgllm_engine_free(ce);
    const uint64_t d0 = device_sampled(gpu8);
    CHECK(query_ok(gpu8, prompt, &p, &dev));
    const uint64_t d1 = device_sampled(gpu8);
    CHECK_EQ_INT(d1 - d0, N);
    p.sampling.n_probs = 1; /* host sampling, as the engine sampled before */
    CHECK(query_ok(gpu8, prompt, &p, &host));
    CHECK_EQ_INT(device_sampled(gpu8), d1);
    CHECK(same_tokens(&dev, &cpu));
    CHECK(same_tokens(&dev, &host));
    for (int i = 0; i < dev.n_tokens && i < host.n_tokens; i++) CHECK_NEAR(dev.logprobs[i], host.logprobs[i], 1e-4);
    CHECK(host.top_logprobs != NULL && dev.top_logprobs == NULL);
    wgllm_result_free(&dev);
    wgllm_result_free(&host);
    wgllm_result_free(&cpu);
}

/* Logprobs (n_probs) and a repetition penalty are the host's: the counter
 * does not move and the results are the CPU engine's. */
TEST(logprobs_and_penalties_fall_back_to_the_host) {
    const char *prompt = test_prompts[4];
    struct wgllm_request_params lp = test_greedy(N), pen = test_greedy(N);
    lp.sampling.n_probs = 3;
    pen.sampling.repeat_penalty = 1.5f;
    pen.sampling.penalty_last_n = 64;
    struct wgllm_result gl, gp, cl, cpn;
    struct wgllm_engine *ce = new_engine(WGLLM_BACKEND_CPU, 1, 128, 0);
    CHECK(ce != NULL);
    if (!ce) return;
    CHECK(query_ok(ce, prompt, &lp, &cl));
    CHECK(query_ok(ce, prompt, &pen, &cpn));
    wgllm_engine_free(ce);
    const uint64_t d0 = device_sampled(gpu8);
    CHECK(query_ok(gpu8, prompt, &lp, &gl));
    CHECK(query_ok(gpu8, prompt, &pen, &gp));
    CHECK_EQ_INT(device_sampled(gpu8), d0);
    CHECK(same_tokens(&gl, &cl));
    CHECK(same_tokens(&gp, &cpn));
    CHECK_EQ_INT(gl.n_top, 3);
    for (int i = 0; gl.top_logprobs && cl.top_logprobs && i < gl.n_tokens * 3; i++) {
        CHECK_EQ_INT(gl.top_logprobs[i].token, cl.top_logprobs[i].token);
        CHECK_NEAR(gl.top_logprobs[i].logprob, cl.top_logprobs[i].logprob, 1e-3);
    }
    wgllm_result_free(&gl);
    wgllm_result_free(&gp);
    wgllm_result_free(&cl);
    wgllm_result_free(&cpn);
}

/* One device-sampled and one host-sampled request in the same batches: each
 * gives what it gives alone; the counter moves by the device one's tokens. */
TEST(mixed_batch_of_device_and_host_sampling) {
    enum { G = 12 };
    struct wgllm_request_params pd = test_greedy(G), ph = test_greedy(G);
    ph.sampling.n_probs = 2;
    const char *a = test_prompts[2], *b = test_prompts[5];
    struct wgllm_result alone_d, alone_h, rd, rh;
    CHECK(query_ok(gpu8, a, &pd, &alone_d));
    CHECK(query_ok(gpu8, b, &ph, &alone_h));
    const uint64_t d0 = device_sampled(gpu8);
    struct wgllm_request *qd = NULL, *qh = NULL;
    CHECK_EQ_INT(wgllm_engine_submit_query(gpu8, a, strlen(a), &pd, &qd, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_engine_submit_query(gpu8, b, strlen(b), &ph, &qh, NULL), WGLLM_STATUS_OK);
    if (!qd || !qh) return;
    wgllm_request_wait(qd, &rd);
    wgllm_request_wait(qh, &rh);
    CHECK_EQ_INT(rd.status, WGLLM_STATUS_OK);
    CHECK_EQ_INT(rh.status, WGLLM_STATUS_OK);
    CHECK_EQ_INT(rd.finish, WGLLM_FINISH_LENGTH);
    CHECK_EQ_INT(rh.finish, WGLLM_FINISH_LENGTH);
    CHECK_EQ_INT(device_sampled(gpu8) - d0, G);
    CHECK(same_tokens(&rd, &alone_d));
    CHECK(same_tokens(&rh, &alone_h));
    CHECK(rh.top_logprobs != NULL && rh.n_top == 2);
    CHECK_EQ_INT(rd.usage.completion_tokens, G);
    CHECK_EQ_INT(rh.usage.completion_tokens, G);
    wgllm_result_free(&alone_d);
    wgllm_result_free(&alone_h);
    wgllm_result_free(&rd);
    wgllm_result_free(&rh);
}

/* temperature 0.8, top_k 40 is drawn on the device: the same seed gives the
 * same text, alone or batched with other requests. */
TEST(seeded_device_sampling_is_deterministic) {
    enum { G = 16 };
    struct wgllm_request_params p = test_greedy(G);
    p.sampling.temperature = 0.8f;
    p.sampling.top_k = 40;
    p.sampling.seed = 1234;
    const char *prompt = test_prompts[0];
    struct wgllm_result r1, r2, r3;
    const uint64_t d0 = device_sampled(gpu8);
    CHECK(query_ok(gpu8, prompt, &p, &r1));
    CHECK(query_ok(gpu8, prompt, &p, &r2));
    CHECK_EQ_INT(device_sampled(gpu8) - d0, 2 * G);
    CHECK(same_tokens(&r1, &r2));
    /* batched with a greedy request */
    struct wgllm_request_params g = test_greedy(G);
    struct wgllm_request *qs = NULL, *qg = NULL;
    CHECK_EQ_INT(wgllm_engine_submit_query(gpu8, test_prompts[3], strlen(test_prompts[3]), &g, &qg, NULL),
                 WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_engine_submit_query(gpu8, prompt, strlen(prompt), &p, &qs, NULL), WGLLM_STATUS_OK);
    if (!qs || !qg) return;
    struct wgllm_result rg;
    wgllm_request_wait(qg, &rg);
    wgllm_request_wait(qs, &r3);
    CHECK(same_tokens(&r1, &r3));
    /* other seeds draw other texts (one of three at least differs) */
    int differ = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        struct wgllm_result o;
        p.sampling.seed = seed;
        CHECK(query_ok(gpu8, prompt, &p, &o));
        differ += !same_tokens(&o, &r1);
        wgllm_result_free(&o);
    }
    CHECK(differ > 0);
    printf("  seed 1234: \"%.*s\"\n", (int)r1.text_len, r1.text);
    wgllm_result_free(&r1);
    wgllm_result_free(&r2);
    wgllm_result_free(&r3);
    wgllm_result_free(&rg);
}


/* ---- grammar-constrained requests sampled on the device ------------------ */

static const char *json_gbnf = "root ::= \"{\\\"name\\\": \\\"\" [a-z]{1,8} \"\\\", \\\"age\\\": \" [0-9]{1,2} \"}\"\n";

/* A constrained request's result: the grammar completed it (STOP, below the
 * cap), with `dev` tokens sampled on the device and `rb` bytes read back. */
static bool constrained_query(const char *prompt, const struct wgllm_request_params *p, struct wgllm_result *r,
                              uint64_t *dev, uint64_t *rb) {
    struct wgllm_error err = {0};
    const uint64_t d0 = device_sampled(gpu8), b0 = wgllm_gpu_readback_bytes();
    const enum wgllm_status st = wgllm_query(gpu8, prompt, p, r, &err);
    *dev = device_sampled(gpu8) - d0;
    *rb = wgllm_gpu_readback_bytes() - b0;
    if (st != WGLLM_STATUS_OK) fprintf(stderr, "  query: %s\n", err.message);
    return st == WGLLM_STATUS_OK && r->finish == WGLLM_FINISH_STOP && r->n_tokens > 4 && r->n_tokens < p->max_tokens;
}

/* The grammar's mask goes to the GPU with each step: greedy and top-k 1
 * draws equal host sampling's tokens (n_probs forces the host path, which
 * reads each row back and masks it there) with the same raw logprobs, every
 * token counts as device-sampled, and what comes back is 8 bytes a token,
 * never a logits row. A seeded top-k 40 draw keeps to the grammar, ends
 * where it completes and repeats with the seed. */
TEST(constrained_requests_are_sampled_on_the_device) {
    const int nv = wgllm_model_n_vocab(model);
    struct wgllm_request_params p = test_greedy(64);
    p.ignore_eos = false;
    p.grammar = json_gbnf;
    p.grammar_len = strlen(json_gbnf);
    struct wgllm_request_params k1 = p; /* the chain's path on the device, one candidate: the pick is determined */
    k1.sampling.temperature = 0.7f, k1.sampling.top_k = 1, k1.sampling.top_p = 0.9f, k1.sampling.seed = 9;
    const struct wgllm_request_params *reqs[2] = {&p, &k1};
    for (int q = 0; q < 2; q++) {
        struct wgllm_request_params hp = *reqs[q];
        hp.sampling.n_probs = 1;
        struct wgllm_result dev, host;
        uint64_t nd = 0, rb = 0, hnd = 0, hrb = 0;
        CHECK(constrained_query(test_prompts[2 + q], reqs[q], &dev, &nd, &rb));
        CHECK(constrained_query(test_prompts[2 + q], &hp, &host, &hnd, &hrb));
        printf("  %s: %d tokens \"%.*s\"; read back %llu bytes on the device path, %llu on the host's\n",
               q ? "top_k 1" : "greedy", dev.n_tokens, (int)dev.text_len, dev.text, (unsigned long long)rb,
               (unsigned long long)hrb);
        CHECK_EQ_INT(nd, dev.n_tokens);
        CHECK_EQ_INT(hnd, 0);
        CHECK_EQ_INT(rb, 8 * (uint64_t)dev.n_tokens); /* an id and a logprob per token */
        CHECK(hrb >= (uint64_t)host.n_tokens * (uint64_t)nv * 4);
        CHECK(same_tokens(&dev, &host));
        for (int i = 0; i < dev.n_tokens && i < host.n_tokens; i++) CHECK_NEAR(dev.logprobs[i], host.logprobs[i], 1e-4);
        wgllm_result_free(&dev);
        wgllm_result_free(&host);
    }
    /* sampled from 40 candidates: the text is the grammar's, the same seed the same text */
    struct wgllm_request_params sp = p;
    sp.sampling.temperature = 1.0f, sp.sampling.top_k = 40, sp.sampling.seed = 4321;
    struct wgllm_result a, b;
    uint64_t nd = 0, rb = 0;
    CHECK(constrained_query(test_prompts[0], &sp, &a, &nd, &rb));
    CHECK_EQ_INT(nd, a.n_tokens);
    CHECK_EQ_INT(rb, 8 * (uint64_t)a.n_tokens);
    CHECK(constrained_query(test_prompts[0], &sp, &b, &nd, &rb));
    CHECK(same_tokens(&a, &b));
    CHECK(a.text_len > 20 && !memcmp(a.text, "{\"name\": \"", 10) && a.text[a.text_len - 1] == '}');
    printf("  top_k 40 seed 4321: \"%.*s\"\n", (int)a.text_len, a.text);
    wgllm_result_free(&a);
    wgllm_result_free(&b);
}


static double log_softmax(const float *l, int nv, int tok) {
    double mx = l[0], sum = 0;
    for (int i = 1; i < nv; i++) mx = fmax(mx, l[i]);
    for (int i = 0; i < nv; i++) sum += exp(l[i] - mx);
    return l[tok] - mx - log(sum);
}

/* The context call under the engine: rows read back land where decode_batch
 * puts them (bit for bit) between rows sampled on the device, greedy picks
 * are the argmax of those rows with their log-softmax, and the chain's draws
 * follow the distribution the host chain defines (many sequences holding the
 * same token give equal rows, each drawn at its own position). */
TEST(sampled_rows_between_rows_read_back) {
    enum { S = 32, PASSES = 4 }; /* the draws of 4 passes (the suite's time) tell a wrong chain by far more than 4.5 sd */
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.backend = WGLLM_BACKEND_WEBGPU;
    cp.n_ctx = 4;
    cp.n_seq = S;
    cp.n_batch = S;
    struct wgllm_context *c = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_context_init(model, &cp, &c, &err), WGLLM_STATUS_OK);
    if (!c) {
        fprintf(stderr, "  context: %s\n", err.message);
        return;
    }
    const int nv = wgllm_model_n_vocab(model);
    struct wgllm_sampler_params greedy = wgllm_sampler_default_params(), chain = greedy, pen = greedy;
    greedy.temperature = 0.0f;
    chain.temperature = 1.0f, chain.top_k = 6, chain.top_p = 0.97f, chain.min_p = 0.02f, chain.seed = 77;
    pen.repeat_penalty = 1.2f;
    CHECK(wgllm_context_can_sample_rows(c, &greedy) && wgllm_context_can_sample_rows(c, &chain));
    CHECK(!wgllm_context_can_sample_rows(c, &pen));
    int32_t tok[S], pos[S], seq[S], st[S];
    float lp[S];
    bool out[S];
    struct wgllm_row_sample rs[S];
    for (int i = 0; i < S; i++) tok[i] = (int32_t)(100 + 37 * i), pos[i] = 0, seq[i] = i, out[i] = true;
    const struct wgllm_batch b = {.n = S, .token = tok, .pos = pos, .seq = seq, .output = out};
    float *rows = malloc(sizeof(float) * (size_t)S * nv);
    CHECK_EQ_INT(wgllm_context_decode_batch(c, &b, false, &err), WGLLM_STATUS_OK);
    for (int j = 0; j < S; j++) memcpy(rows + (size_t)j * nv, wgllm_context_output_logits(c, j), sizeof(float) * nv);
    for (int j = 0; j < S; j++) rs[j] = (struct wgllm_row_sample){j % 3 ? &greedy : NULL, 1, NULL}, st[j] = -1;
    rs[S - 1].sp = &pen; /* refused whole: nothing runs */
    CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, NULL), WGLLM_STATUS_UNSUPPORTED);
    rs[S - 1].sp = NULL;
    CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, &err), WGLLM_STATUS_OK);
    int host_same = 0, argmax_same = 0, n_dev = 0;
    for (int j = 0; j < S; j++) {
        const float *l = rows + (size_t)j * nv;
        if (!rs[j].sp) {
            host_same += !memcmp(wgllm_context_output_logits(c, j), l, sizeof(float) * nv);
            CHECK_EQ_INT(st[j], -1);
            continue;
        }
        n_dev++;
        argmax_same += st[j] == wgllm_argmax(l, nv);
        if (st[j] >= 0 && st[j] < nv) CHECK_NEAR(lp[j], log_softmax(l, nv, st[j]), 1e-4);
    }
    CHECK_EQ_INT(host_same, S - n_dev);
    CHECK_EQ_INT(argmax_same, n_dev);
    /* draws: every sequence holds the same token (equal rows), positions differ */
    for (int i = 0; i < S; i++) tok[i] = 4242;
    CHECK_EQ_INT(wgllm_context_decode_batch(c, &b, false, &err), WGLLM_STATUS_OK);
    memcpy(rows, wgllm_context_output_logits(c, 0), sizeof(float) * nv);
    int ids[6];
    double prob[6];
    const int n = test_chain_expected(rows, nv, chain.top_k, chain.top_p, chain.min_p, chain.temperature, ids, prob);
    int count[6] = {0}, outside = 0, again = 0;
    int32_t first[S];
    for (int pass = 0; pass < PASSES; pass++) {
        for (int j = 0; j < S; j++) rs[j] = (struct wgllm_row_sample){&chain, 1 + pass * S + j, NULL};
        CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, &err), WGLLM_STATUS_OK);
        for (int j = 0; j < S; j++) {
            int k = 0;
            while (k < n && ids[k] != st[j]) k++;
            if (k < n) count[k]++;
            else outside++;
            if (pass == 0) first[j] = st[j];
        }
    }
    for (int j = 0; j < S; j++) rs[j] = (struct wgllm_row_sample){&chain, 1 + j, NULL};
    CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, &err), WGLLM_STATUS_OK);
    for (int j = 0; j < S; j++) again += st[j] == first[j]; /* same seed and position, same token */
    CHECK_EQ_INT(again, S);
    CHECK_EQ_INT(outside, 0);
    double worst = 0;
    const double N_DRAWS = PASSES * S;
    for (int k = 0; k < n; k++) {
        const double sd = sqrt(N_DRAWS * prob[k] * (1 - prob[k])) + 1e-9;
        worst = fmax(worst, fabs(count[k] - N_DRAWS * prob[k]) / sd);
    }
    printf("  chain on %d equal rows: %d kept, worst deviation %.2f sd over %d draws\n", S, n, worst, (int)N_DRAWS);
    CHECK(worst < 4.5);
    free(rows);
    wgllm_context_free(c);
}

/* Masks at the context call: a row allowed one token (the row's lowest)
 * gives it, greedy or drawn, with the raw log-softmax; a mask that takes out
 * the row's top 8 and every odd id gives the argmax of what is left, and
 * draws that follow the host chain on the masked row (the masked tokens as
 * -inf, as wgllm_sampler_sample_masked takes them out before top-k); an
 * empty mask is refused before anything runs; only ids come back. */
TEST(masked_rows_pick_only_allowed_tokens) {
    enum { S = 32, PASSES = 4, ONE = 2 }; /* 116 draws: the suite's time; a wrong chain is off by far more than 4 sd */
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.backend = WGLLM_BACKEND_WEBGPU;
    cp.n_ctx = 4;
    cp.n_seq = S;
    cp.n_batch = S;
    struct wgllm_context *c = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_context_init(model, &cp, &c, &err), WGLLM_STATUS_OK);
    if (!c) {
        fprintf(stderr, "  context: %s\n", err.message);
        return;
    }
    const int nv = wgllm_model_n_vocab(model), words = (nv + 31) / 32;
    struct wgllm_sampler_params greedy = wgllm_sampler_default_params(), chain = greedy;
    greedy.temperature = 0.0f;
    chain.temperature = 1.0f, chain.top_k = 6, chain.top_p = 0.97f, chain.min_p = 0.02f, chain.seed = 5;
    int32_t tok[S], pos[S], seq[S], st[S];
    float lp[S];
    bool out[S];
    struct wgllm_row_sample rs[S];
    for (int i = 0; i < S; i++) tok[i] = 4242, pos[i] = 0, seq[i] = i, out[i] = true;
    const struct wgllm_batch b = {.n = S, .token = tok, .pos = pos, .seq = seq, .output = out};
    float *row = malloc(sizeof(float) * (size_t)nv), *masked = malloc(sizeof(float) * (size_t)nv);
    uint32_t *one = calloc((size_t)words, 4), *some = calloc((size_t)words, 4), *none = calloc((size_t)words, 4);
    CHECK_EQ_INT(wgllm_context_decode_batch(c, &b, false, &err), WGLLM_STATUS_OK);
    memcpy(row, wgllm_context_output_logits(c, 0), sizeof(float) * (size_t)nv);
    int lo = 0;
    for (int i = 1; i < nv; i++)
        if (row[i] < row[lo]) lo = i;
    one[lo >> 5] |= 1u << (lo & 31);
    memcpy(masked, row, sizeof(float) * (size_t)nv);
    for (int i = 1; i < nv; i += 2) masked[i] = -INFINITY;
    for (int k = 0; k < 8; k++) masked[wgllm_argmax(masked, nv)] = -INFINITY;
    for (int i = 0; i < nv; i++)
        if (masked[i] != -INFINITY) some[i >> 5] |= 1u << (i & 31);
    const int want_greedy = wgllm_argmax(masked, nv);
    CHECK(want_greedy != wgllm_argmax(row, nv));
    /* rows 0, 1: the one token, greedy and drawn; 2: the masked argmax; the rest: draws */
    for (int j = 0; j < S; j++) rs[j] = (struct wgllm_row_sample){&chain, 1 + j, some};
    rs[0] = (struct wgllm_row_sample){&greedy, 1, one};
    rs[1].mask = one;
    rs[ONE].sp = &greedy;
    rs[5].mask = none; /* refused whole: nothing runs */
    CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, NULL), WGLLM_STATUS_INVALID_ARGUMENT);
    rs[5].mask = some;
    int ids[6];
    double prob[6];
    const int n = test_chain_expected(masked, nv, chain.top_k, chain.top_p, chain.min_p, chain.temperature, ids, prob);
    int count[6] = {0}, outside = 0, draws = 0;
    const uint64_t rb0 = wgllm_gpu_readback_bytes();
    for (int pass = 0; pass < PASSES; pass++) {
        for (int j = 3; j < S; j++) rs[j].pos = 1 + pass * S + j;
        CHECK_EQ_INT(wgllm_context_decode_batch_sampled(c, &b, rs, st, lp, &err), WGLLM_STATUS_OK);
        CHECK_EQ_INT(st[0], lo);
        CHECK_EQ_INT(st[1], lo);
        CHECK_EQ_INT(st[ONE], want_greedy);
        CHECK_NEAR(lp[0], log_softmax(row, nv, lo), 1e-4);
        CHECK_NEAR(lp[ONE], log_softmax(row, nv, want_greedy), 1e-4);
        for (int j = 3; j < S; j++, draws++) {
            int k = 0;
            while (k < n && ids[k] != st[j]) k++;
            if (k < n) {
                count[k]++;
                CHECK_NEAR(lp[j], log_softmax(row, nv, st[j]), 1e-4);
            } else {
                outside++;
            }
        }
    }
    CHECK_EQ_INT(wgllm_gpu_readback_bytes() - rb0, (uint64_t)PASSES * S * 8);
    CHECK_EQ_INT(outside, 0);
    double worst = 0;
    for (int k = 0; k < n; k++) {
        const double sd = sqrt(draws * prob[k] * (1 - prob[k])) + 1e-9;
        worst = fmax(worst, fabs(count[k] - draws * prob[k]) / sd);
    }
    printf("  masked chain: %d kept, worst deviation %.2f sd over %d draws\n", n, worst, draws);
    CHECK(n >= 2);
    CHECK(worst < 4.5);
    free(row), free(masked), free(one), free(some), free(none);
    wgllm_context_free(c);
}

/* A mixture-of-experts model (tiny-qwen2moe: routed experts and the
 * sigmoid-gated shared expert, webgpu_moe.c) through the engine on WebGPU:
 * 4 prompts batched give the CPU engine's tokens alone; in a one-slot engine
 * with snapshots a context_key follow-up computes only its suffix, another
 * key takes the slot, and the conversation comes back from its snapshot,
 * all with the tokens of a cold run (the routing is per token, so a batch,
 * a suffix pass and a restored cache must route each token as alone). */
static struct wgllm_engine *moe_engine(struct wgllm_model *m, enum wgllm_backend backend, int n_slots,
                                       size_t snapshot_bytes) {
    struct wgllm_engine_params ep = wgllm_engine_default_params();
    ep.backend = backend;
    ep.n_slots = n_slots;
    ep.n_ctx = 128;
    ep.n_batch = 64;
    ep.snapshot_bytes = snapshot_bytes;
    ep.min_snapshot_tokens = 8;
    struct wgllm_engine *e = NULL;
    struct wgllm_error err = {0};
    if (wgllm_engine_init(m, &ep, &e, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  engine: %s\n", err.message);
    return e;
}

TEST(moe_batching_prefix_reuse_and_snapshots) {
    enum { NP = 4 };
    struct wgllm_model *m = shape_model_of("tiny-qwen2moe", WGLLM_TYPE_Q8_0, 5);
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_engine *ce = moe_engine(m, WGLLM_BACKEND_CPU, NP, 0);
    struct wgllm_engine *ge = moe_engine(m, WGLLM_BACKEND_WEBGPU, NP, 0);
    struct wgllm_engine *g1 = moe_engine(m, WGLLM_BACKEND_WEBGPU, 1, 16 << 20);
    CHECK(ce && ge && g1);
    if (!ce || !ge || !g1) goto done;
    CHECK(strncmp(wgllm_engine_backend(ge), "webgpu", 6) == 0);
    struct wgllm_request_params p = test_greedy(N);
    int32_t cpu[NP][N] = {{0}};
    for (int i = 0; i < NP; i++) {
        struct wgllm_result r;
        CHECK(query_ok(ce, test_prompts[i], &p, &r));
        if (r.n_tokens == N) memcpy(cpu[i], r.tokens, sizeof cpu[i]);
        wgllm_result_free(&r);
    }
    struct wgllm_request *req[NP];
    for (int i = 0; i < NP; i++)
        CHECK_EQ_INT(wgllm_engine_submit_query(ge, test_prompts[i], strlen(test_prompts[i]), &p, &req[i], NULL),
                     WGLLM_STATUS_OK);
    int same = 0;
    for (int i = 0; i < NP; i++) {
        struct wgllm_result r;
        wgllm_request_wait(req[i], &r);
        same += r.n_tokens == N && !memcmp(r.tokens, cpu[i], sizeof cpu[i]);
        wgllm_result_free(&r);
    }
    CHECK_EQ_INT(same, NP); /* WebGPU batched = CPU alone */
    /* prefix reuse and a snapshot round trip on WebGPU, against the CPU's cold run */
    struct wgllm_result cold, w1, w2, o, back;
    const char *other = "In summer the sea was so calm that he could hear fishermen talking a mile away";
    CHECK(query_ok(ce, turn2, &p, &cold));
    const uint64_t loaded = wgllm_gpu_buffers_created();
    p.context_key = "conversation";
    CHECK(query_ok(g1, turn1, &p, &w1));
    CHECK(query_ok(g1, turn2, &p, &w2));
    int n2;
    const int lcp = test_common_prefix(m, turn1, turn2, &n2);
    CHECK(lcp > 10);
    CHECK_EQ_INT(w2.usage.cached_tokens, lcp); /* only the suffix was computed */
    CHECK(same_tokens(&w2, &cold));
    p.context_key = "other";
    CHECK(query_ok(g1, other, &p, &o));
    p.context_key = "conversation";
    CHECK(query_ok(g1, turn2, &p, &back));
    struct wgllm_engine_metrics mt;
    wgllm_engine_metrics(g1, &mt);
    CHECK(mt.snapshots_saved >= 1);
    CHECK_EQ_INT(mt.snapshots_restored, 1);
    CHECK_EQ_INT(back.usage.cached_tokens, n2 - 1);
    CHECK(same_tokens(&back, &cold));
    CHECK_EQ_INT(wgllm_gpu_buffers_created(), loaded); /* nothing created while serving */
    wgllm_result_free(&cold), wgllm_result_free(&w1), wgllm_result_free(&w2), wgllm_result_free(&o);
    wgllm_result_free(&back);
done:
    wgllm_engine_free(g1);
    wgllm_engine_free(ge);
    wgllm_engine_free(ce);
    wgllm_model_free(m);
}

int main(void) {
    wgllm_quant_init();
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_engine_webgpu", &required);
    if (!g) return required ? 1 : test_summary("test_engine_webgpu");
    wgllm_gpu_close(g);
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny";
    sp.type = WGLLM_TYPE_Q8_0;
    sp.seed = 11;
    if (!(model = test_synth_model(&sp))) return 1;
    const uint64_t before = wgllm_gpu_buffers_created();
    gpu8 = new_engine(WGLLM_BACKEND_WEBGPU, 8, 128, 0);
    CHECK(gpu8 != NULL);
    CHECK(wgllm_gpu_buffers_created() > before);
    if (gpu8) {
        RUN(same_tokens_as_the_cpu_engine_alone_and_batched);
        RUN(context_key_suffix_and_snapshot_restore);
        RUN(embeddings_agree_with_the_cpu);
        RUN(seq_shift_leaves_the_cpu_cache);
        RUN(context_shift_generation_matches_the_cpu_engine);
        RUN(gemma3_and_phi3_greedy_tokens_as_the_cpu_engine);
        RUN(greedy_requests_are_sampled_on_the_device);
        RUN(logprobs_and_penalties_fall_back_to_the_host);
        RUN(mixed_batch_of_device_and_host_sampling);
        RUN(seeded_device_sampling_is_deterministic);
        RUN(sampled_rows_between_rows_read_back);
        RUN(constrained_requests_are_sampled_on_the_device);
        RUN(masked_rows_pick_only_allowed_tokens);
        RUN(moe_batching_prefix_reuse_and_snapshots);
    }
    wgllm_engine_free(gpu8);
    wgllm_model_free(model);
    return test_summary("test_engine_webgpu");
}
