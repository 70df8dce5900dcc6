/*
 * test_webgpu_plan.c - the WebGPU memory plan (webgpu_plan.h) under hostile
 * values. The sizing runs without a device, so most of this drives
 * wgllm_webgpu_plan_sizes directly with any limits and hyper-parameters:
 * n_ctx / n_seq / n_batch near INT_MAX, widths whose products pass 2^32 and
 * 2^64, tiny and zero device limits, zero sizes, a 32-bit size_t
 * (wgllm_set_size_limit, as on wasm32). Each must end in a plan within the
 * limits or an error naming the quantity -- never a wrapped size, a crash or
 * a huge allocation.
 *
 * Normal models must plan exactly as before the sizing was split out: the
 * numbers below are what the previous code (commit a8da46c) planned on
 * SwiftShader for three synthetic shapes x four settings; the pure sizing
 * is checked against them with SwiftShader's limits (no device), and, on
 * the device (Dawn + SwiftShader; a failure without one under
 * WGLLM_REQUIRE_WEBGPU), the whole allocated plan, buffer counts included.
 */
#include "test.h"

#include "backend/webgpu/forward_webgpu.h"
#include "backend/webgpu/hal.h"
#include "backend/webgpu/kernels.h"
#include "backend/webgpu/webgpu_plan.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <limits.h>

/* ---- what the plan gives --------------------------------------------------
 * The numbers of the code before the plan was made checkable (captured on
 * SwiftShader then), plus what came since: each output row's grammar mask
 * (a bit per token, the device-side sampling of constrained requests), which
 * adds one buffer, its bytes to `params` and `total`, its words to the
 * estimate, and so a few positions less where a budget binds; and the fused
 * decode kernels, whose fewer distinct parameter blocks take a few arena
 * slots less from `params` and `total` (the estimate keeps its margin). */

struct expect {
    const char *tag; /* shape/setting */
    uint64_t weights, vectors, kv_cache, activations, logits, params, total, estimate;
    int n_buffers, n_split, n_ctx, n_ctx_requested, n_seq, n_batch, out_rows;
    const char *note;
};

/* settings: default (n_ctx 0 = the training 512, n_batch 512), seq4 (256 x 4
 * sequences, batches of 64), budget (512 x 2 in 70 MiB), split (128, batches
 * of 32, weight pieces of at most 4000000 bytes) */
static const struct expect EXPECT[] = {
    {"tiny/default", 70254592, 5120, 655360, 7608320, 33536000, 612480, 112671872, 112865624, 45, 0, 512, 512, 1, 512, 131, ""},
    {"tiny/seq4", 70254592, 5120, 1114112, 1048576, 16384000, 274464, 89080864, 89208832, 45, 0, 256, 256, 4, 64, 64, ""},
    {"tiny/budget", 70254592, 5120, 691200, 1839104, 512000, 33200, 73335216, 73399696, 45, 0, 300, 512, 2, 128, 2,
     "context 512 -> 300 positions, batches 512 -> 128 tokens, output rows per pass 131 -> 2, because 2 "
     "sequences x 512 positions need 108.1 MiB, more than the GPU memory budget of 70.0 MiB"},
    {"tiny/split", 70254592, 5120, 163840, 524288, 8192000, 215712, 79355552, 79375616, 61, 2, 128, 128, 1, 32, 32, ""},
    {"tiny-qwen2/default", 56181760, 9216, 655360, 7510016, 33370656, 675472, 98402480, 98541684, 44, 0, 512, 512, 1, 512, 83, ""},
    {"tiny-qwen2/seq4", 56181760, 9216, 1114112, 1048576, 25731584, 430624, 84515872, 84638464, 44, 0, 256, 256, 4, 64, 64, ""},
    {"tiny-qwen2/budget", 56181760, 9216, 1179648, 7380992, 8041120, 277040, 73069776, 73144496, 44, 0, 512, 512, 2, 512, 20,
     "output rows per pass 83 -> 20, because 2 sequences x 512 positions need 94.5 MiB, more than the GPU "
     "memory budget of 70.0 MiB"},
    {"tiny-qwen2/split", 56181760, 9216, 163840, 524288, 12865792, 328480, 70073376, 70054272, 56, 1, 128, 128, 1, 32, 32, ""},
    {"tiny-qwen3/default", 56181760, 6144, 655360, 8296448, 33370656, 674704, 99185072, 99328116, 46, 0, 512, 512, 1, 512, 83, ""},
    {"tiny-qwen3/seq4", 56181760, 6144, 1114112, 1146880, 25731584, 429856, 84610336, 84736768, 46, 0, 256, 256, 4, 64, 64, ""},
    {"tiny-qwen3/budget", 56181760, 6144, 647424, 8167424, 8041120, 276272, 73320144, 73398704, 46, 0, 281, 512, 2, 512, 20,
     "context 512 -> 281 positions, output rows per pass 83 -> 20, because 2 sequences x 512 positions "
     "need 95.2 MiB, more than the GPU memory budget of 70.0 MiB"},
    {"tiny-qwen3/split", 56181760, 6144, 163840, 573440, 12865792, 327712, 70118688, 70103424, 58, 1, 128, 128, 1, 32, 32, ""},
};
#define N_SHAPES 3
#define N_SETTINGS 4
static const char *const SHAPES[N_SHAPES] = {"tiny", "tiny-qwen2", "tiny-qwen3"};
static const struct {
    int n_ctx, n_seq, n_batch;
    uint64_t gpu_mem;
    const char *max_weight_bytes;
} SETTINGS[N_SETTINGS] = {{0, 1, 0, 0, NULL}, {256, 4, 64, 0, NULL}, {512, 2, 512, 70ull << 20, NULL}, {128, 1, 32, 0, "4000000"}};

static struct wgllm_model *MODELS[N_SHAPES];

/* SwiftShader's limits (TOOLCHAIN.md; `wgllm devices`) with the tune of a software adapter. */
static struct wgllm_webgpu_limits swiftshader_limits(void) {
    const struct wgllm_wgsl_tune *t = wgllm_wgsl_cpu_adapter_tune();
    return (struct wgllm_webgpu_limits){.max_buffer_size = 1ull << 30, .max_storage_binding_size = 1ull << 30,
                                        .max_workgroups_per_dim = 65535, .wg_elem = t->wg_elem,
                                        .rows_matvec = t->rows_matvec, .wg_attn = t->wg_attn,
                                        .attn_max_dims = t->attn_max_dims};
}

/* Limits no device has, so that only the widths decide. */
static struct wgllm_webgpu_limits huge_limits(void) {
    struct wgllm_webgpu_limits l = swiftshader_limits();
    l.max_buffer_size = l.max_storage_binding_size = 1ull << 40;
    l.max_workgroups_per_dim = UINT32_MAX;
    return l;
}

static uint64_t r16(uint64_t b) { return ((b ? b : 4) + 15) & ~(uint64_t)15; }

/* The invariants of every plan that succeeded: within the limits and what was asked. */
static void check_within(const struct wgllm_webgpu_limits *l, const struct wgllm_webgpu_sizes *sz, int n_ctx0,
                         int n_batch0, int line) {
    const uint64_t bind = WGLLM_MIN(l->max_buffer_size, l->max_storage_binding_size);
    const uint64_t storage[] = {sz->step, sz->samp_in, sz->samp_out, sz->vectors, sz->k_cache, sz->v_cache, sz->shift,
                                sz->logits, sz->rope_cs};
    int bad = 0;
    for (size_t i = 0; i < sizeof storage / sizeof *storage; i++) bad += storage[i] > bind;
    for (int i = 0; i < WGLLM_ACT_COUNT; i++) bad += sz->act[i] > bind;
    bad += sz->readback > l->max_buffer_size;
    bad += sz->n_ctx < 1 || sz->n_ctx > n_ctx0 || sz->n_batch < 1 || sz->n_batch > n_batch0;
    bad += (int64_t)sz->n_ctx * sz->n_seq > INT32_MAX || sz->n_batch > (int64_t)sz->n_ctx * sz->n_seq;
    bad += sz->out_cap < 1 || sz->out_cap > sz->n_batch || sz->estimate == UINT64_MAX;
    if (bad) {
        fprintf(stderr, "  line %d: a plan outside its limits (n_ctx %d, n_batch %d, out %d, estimate %llu)\n", line,
                sz->n_ctx, sz->n_batch, sz->out_cap, (unsigned long long)sz->estimate);
        test_checks_failed_in_current++;
    }
}

/* Plans m; checks the status and that the message holds every needle (NULL ends). */
static enum wgllm_status plan_expect(const struct wgllm_model *m, const struct wgllm_webgpu_limits *l,
                                     struct wgllm_webgpu_sizes *sz, enum wgllm_status want, const char *n1,
                                     const char *n2, int line) {
    const int n_ctx0 = sz->n_ctx, n_batch0 = sz->n_batch;
    struct wgllm_error err = {0};
    const enum wgllm_status st = wgllm_webgpu_plan_sizes(m, l, sz, &err);
    if (st != want || (n1 && !strstr(err.message, n1)) || (n2 && !strstr(err.message, n2))) {
        fprintf(stderr, "  line %d: status %d (want %d): \"%s\" (want \"%s\", \"%s\")\n", line, (int)st, (int)want,
                err.message, n1 ? n1 : "", n2 ? n2 : "");
        test_checks_failed_in_current++;
    }
    if (st == WGLLM_STATUS_OK) check_within(l, sz, n_ctx0, n_batch0, line);
    return st;
}
#define PLAN_OK(m, l, sz) plan_expect(m, l, sz, WGLLM_STATUS_OK, NULL, NULL, __LINE__)
#define PLAN_ERR(m, l, sz, st, n1, n2) plan_expect(m, l, sz, st, n1, n2, __LINE__)

static struct wgllm_webgpu_sizes ask(int n_ctx, int n_seq, int n_batch, uint64_t gpu_mem) {
    return (struct wgllm_webgpu_sizes){.n_ctx = n_ctx, .n_seq = n_seq, .n_batch = n_batch, .gpu_mem = gpu_mem};
}

/* A copy of a model to make hostile: its own hyper-parameters, layers and
 * output weights (the vectors and data are shared, and never read here). */
struct fake {
    struct wgllm_model m;
    struct wgllm_layer layers[512];
};
static struct fake *fake_of(const struct wgllm_model *src) {
    struct fake *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->m = *src;
    memcpy(f->layers, src->layers, sizeof *f->layers * (size_t)src->hp.n_layer);
    f->m.layers = f->layers;
    return f;
}

/* ---- normal models plan as before ---------------------------------------- */

TEST(normal_models_plan_as_before_without_device) {
    for (int s = 0; s < N_SHAPES; s++) {
        const struct wgllm_model *m = MODELS[s];
        for (int k = 0; k < N_SETTINGS; k++) {
            const struct expect *e = &EXPECT[s * N_SETTINGS + k];
            struct wgllm_webgpu_limits l = swiftshader_limits();
            if (SETTINGS[k].max_weight_bytes) l.max_weight_bytes = strtoull(SETTINGS[k].max_weight_bytes, NULL, 10);
            const int n_ctx = SETTINGS[k].n_ctx ? SETTINGS[k].n_ctx : WGLLM_MIN(m->hp.n_ctx_train, 4096);
            const int n_batch = WGLLM_MIN(SETTINGS[k].n_batch ? SETTINGS[k].n_batch : 512, n_ctx * SETTINGS[k].n_seq);
            struct wgllm_webgpu_sizes sz = ask(n_ctx, SETTINGS[k].n_seq, n_batch, SETTINGS[k].gpu_mem);
            const int before = test_checks_failed_in_current;
            if (PLAN_OK(m, &l, &sz)) continue;
            CHECK_EQ_INT(sz.n_ctx, e->n_ctx);
            CHECK_EQ_INT(sz.n_batch, e->n_batch);
            CHECK_EQ_INT(sz.out_cap, e->out_rows);
            CHECK_EQ_INT(sz.estimate, e->estimate);
            CHECK_STR(sz.note, e->note);
            /* the categories the device counted, from the sizes (rounded to 16 as the HAL does) */
            uint64_t act = 0;
            for (int i = 0; i < WGLLM_ACT_COUNT; i++) act += sz.act[i] ? r16(sz.act[i]) : 0;
            CHECK_EQ_INT(act, e->activations);
            CHECK_EQ_INT((uint64_t)m->hp.n_layer * (r16(sz.k_cache) + r16(sz.v_cache)) + r16(sz.shift), e->kv_cache);
            CHECK_EQ_INT(r16(sz.readback) + r16(sz.logits), e->logits);
            CHECK_EQ_INT(r16(sz.vectors), e->vectors);
            if (test_checks_failed_in_current != before) fprintf(stderr, "  (%s)\n", e->tag);
        }
    }
}

TEST(normal_models_plan_as_before_on_device) {
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_webgpu_plan (device part)", &required);
    if (!g) {
        CHECK(!required);
        return;
    }
    wgllm_gpu_close(g); /* each context opens its own */
    for (int s = 0; s < N_SHAPES; s++)
        for (int k = 0; k < N_SETTINGS; k++) {
            const struct expect *e = &EXPECT[s * N_SETTINGS + k];
            struct wgllm_context_params cp = wgllm_context_default_params();
            cp.n_ctx = SETTINGS[k].n_ctx, cp.n_seq = SETTINGS[k].n_seq, cp.n_batch = SETTINGS[k].n_batch;
            cp.gpu_mem = SETTINGS[k].gpu_mem, cp.backend = WGLLM_BACKEND_WEBGPU;
            if (SETTINGS[k].max_weight_bytes) setenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES", SETTINGS[k].max_weight_bytes, 1);
            struct wgllm_webgpu_ctx *ctx = NULL;
            char why[320];
            struct wgllm_error err = {0};
            const enum wgllm_status st = wgllm_webgpu_ctx_create(MODELS[s], &cp, &ctx, why, sizeof why, &err);
            unsetenv("WGLLM_WEBGPU_MAX_WEIGHT_BYTES");
            CHECK_EQ_INT(st, WGLLM_STATUS_OK);
            if (st || !ctx) {
                fprintf(stderr, "  %s: %s\n", e->tag, err.message);
                continue;
            }
            struct wgllm_webgpu_plan p;
            wgllm_webgpu_get_plan(ctx, &p);
            const int before = test_checks_failed_in_current;
            CHECK_EQ_INT(p.weights, e->weights);
            CHECK_EQ_INT(p.vectors, e->vectors);
            CHECK_EQ_INT(p.kv_cache, e->kv_cache);
            CHECK_EQ_INT(p.activations, e->activations);
            CHECK_EQ_INT(p.logits, e->logits);
            CHECK_EQ_INT(p.params, e->params);
            CHECK_EQ_INT(p.total, e->total);
            CHECK_EQ_INT(p.estimate, e->estimate);
            CHECK_EQ_INT(p.n_buffers, e->n_buffers);
            CHECK_EQ_INT(p.n_split_tensors, e->n_split);
            CHECK_EQ_INT(p.n_ctx, e->n_ctx);
            CHECK_EQ_INT(p.n_ctx_requested, e->n_ctx_requested);
            CHECK_EQ_INT(p.n_seq, e->n_seq);
            CHECK_EQ_INT(p.n_batch, e->n_batch);
            CHECK_EQ_INT(p.out_rows, e->out_rows);
            CHECK_STR(p.note, e->note);
            if (test_checks_failed_in_current != before) fprintf(stderr, "  (%s)\n", e->tag);
            wgllm_webgpu_ctx_free(ctx);
        }
}

/* ---- hostile requests ------------------------------------------------------ */

/* The blocks beyond llama's plan what their graph binds: gemma3's local
 * layers their own cos/sin table at a 256-byte boundary of rope_cs (a
 * binding offset of the context shift) and GeGLU's f16 table; olmo2's
 * whole-projection q/k norms and post-norms in the vectors; llama none of it. */
TEST(new_blocks_plan_their_tables) {
    static const char *const shapes[] = {"tiny", "tiny-gemma3", "tiny-olmo2"};
    for (int i = 0; i < 3; i++) {
        struct wgllm_synth_params sp = wgllm_synth_default_params();
        sp.shape = shapes[i];
        sp.type = WGLLM_TYPE_Q8_0;
        struct wgllm_model *m = test_synth_model(&sp);
        CHECK(m != NULL);
        if (!m) continue;
        const struct wgllm_hparams *hp = &m->hp;
        const struct wgllm_webgpu_limits l = swiftshader_limits();
        struct wgllm_webgpu_sizes sz = ask(64, 1, 100, 0);
        CHECK_EQ_INT(wgllm_webgpu_plan_sizes(m, &l, &sz, NULL), WGLLM_STATUS_OK);
        const uint64_t table = (uint64_t)sz.n_batch * hp->n_rot * 4;
        const uint64_t E = hp->n_embd, QD = (uint64_t)hp->n_head * hp->head_dim_k,
                       KD = (uint64_t)hp->n_head_kv * hp->head_dim_k;
        if (i == 1) {
            CHECK(sz.rope_swa_off >= table && sz.rope_swa_off % 256 == 0 && sz.rope_swa_off < table + 256);
            CHECK(sz.rope_cs == sz.rope_swa_off + table);
            CHECK_EQ_INT((int)sz.rope_host, 2 * sz.n_batch * hp->n_rot);
            CHECK_EQ_INT((int)sz.gelu_table, 65536 * 2);
        } else {
            CHECK(sz.rope_swa_off == 0 && sz.rope_cs == table && sz.gelu_table == 0);
        }
        if (i == 2) /* per layer q_norm (QD), k_norm (KD), two post-norms; the output norm */
            CHECK(sz.vectors == 4 * ((uint64_t)hp->n_layer * (QD + KD + 2 * E) + E));
        wgllm_model_free(m);
    }
}

/* An encoder (bert, nomic-bert; webgpu_encoder.c) plans no KV cache, no
 * logits and no grammar masks; every row of a pass may be an output (n_embd
 * wide), a sequence is at most one pass; its vectors are the biases and
 * LayerNorms of every layer with the embeddings' norm and token type row;
 * bert's GELU looks its f16 table up, nomic-bert's SwiGLU has none. */
TEST(encoders_plan_no_cache) {
    static const char *const shapes[] = {"tiny-bert", "tiny-nomic-bert"};
    for (int i = 0; i < 2; i++) {
        struct wgllm_synth_params sp = wgllm_synth_default_params();
        sp.shape = shapes[i];
        sp.type = WGLLM_TYPE_Q8_0;
        struct wgllm_model *m = test_synth_model(&sp);
        CHECK(m != NULL);
        if (!m) continue;
        const struct wgllm_hparams *hp = &m->hp;
        const struct wgllm_webgpu_limits l = swiftshader_limits();
        struct wgllm_webgpu_sizes sz = ask(512, 4, 100, 0);
        CHECK_EQ_INT(wgllm_webgpu_plan_sizes(m, &l, &sz, NULL), WGLLM_STATUS_OK);
        const uint64_t E = hp->n_embd, F = hp->n_ff, QD = (uint64_t)hp->n_head * hp->head_dim_k;
        CHECK(sz.k_cache == 0 && sz.v_cache == 0 && sz.shift == 0 && sz.logits == 0 && sz.samp_mask == 0);
        CHECK_EQ_INT(sz.out_cap, sz.n_batch);
        CHECK(sz.n_ctx <= sz.n_batch && sz.readback == (uint64_t)sz.n_batch * E * 4);
        CHECK(sz.act[WGLLM_ACT_XO] == 0 && sz.act[WGLLM_ACT_ATT_O] == 0);
        /* bert: q/k/v/o/up/down biases and two LayerNorms (weight + bias) a layer; nomic-bert: the norms only */
        const uint64_t per_layer = i == 0 ? 3 * QD + E + F + E + 4 * E : 4 * E;
        CHECK(sz.vectors == 4 * ((uint64_t)hp->n_layer * per_layer + 3 * E));
        CHECK_EQ_INT((int)sz.gelu_table, i == 0 ? 65536 * 2 : 0);
        CHECK(sz.estimate < (64ull << 20));
        wgllm_model_free(m);
    }
}

TEST(requests_near_int_max) {
    const struct wgllm_model *m = MODELS[0];
    const struct wgllm_webgpu_limits ss = swiftshader_limits(), big = huge_limits();
    /* SwiftShader: the K/V cache of 256 sequences bounds n_ctx, the binding n_batch */
    struct wgllm_webgpu_sizes sz = ask(INT_MAX, 256, INT_MAX, 0);
    PLAN_OK(m, &ss, &sz);
    CHECK(strstr(sz.note, "K/V cache of 256 sequences") != NULL);
    CHECK_EQ_INT(sz.n_ctx, (1 << 30) / (256 * 128 * 2)); /* kv rows of 4 heads x 32 dims, f16 */
    /* one sequence: n_ctx alone near INT_MAX, the batch alone near INT_MAX */
    sz = ask(INT_MAX, 1, 1, 0);
    PLAN_OK(m, &ss, &sz);
    sz = ask(1, 1, INT_MAX, 0);
    PLAN_OK(m, &ss, &sz);
    CHECK_EQ_INT(sz.n_batch, 1); /* at most n_ctx x n_seq tokens */
    sz = ask(INT_MAX - 1, 255, INT_MAX - 1, 0);
    PLAN_OK(m, &ss, &sz);
    /* limits past every width: what remains is the 32-bit cache rows (u32 in the step buffer) */
    sz = ask(INT_MAX, 256, INT_MAX, 0);
    PLAN_OK(m, &big, &sz);
    CHECK(strstr(sz.note, "32-bit indices") != NULL);
    CHECK_EQ_INT(sz.n_ctx, INT32_MAX / 256);
    CHECK_EQ_INT(sz.k_cache, (uint64_t)sz.n_ctx * 256 * 128 * 2); /* exact, past 2^32 */
    CHECK(sz.k_cache > UINT32_MAX);
    /* the same with a budget: the budget decides, computed without wrapping */
    sz = ask(INT_MAX, 256, INT_MAX, 300ull << 20);
    PLAN_OK(m, &big, &sz);
    CHECK(sz.estimate <= 300ull << 20);
    CHECK(strstr(sz.note, "GPU memory budget") != NULL);
    /* a budget of one byte, and of the whole 64-bit range */
    sz = ask(INT_MAX, 256, INT_MAX, 1);
    PLAN_ERR(m, &big, &sz, WGLLM_STATUS_OUT_OF_MEMORY, "budget", "too small");
    sz = ask(INT_MAX, 256, INT_MAX, UINT64_MAX);
    PLAN_OK(m, &big, &sz);
}

TEST(zero_and_negative_requests) {
    const struct wgllm_model *m = MODELS[0];
    const struct wgllm_webgpu_limits l = swiftshader_limits();
    struct wgllm_webgpu_sizes sz = ask(0, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_ctx 0", NULL);
    sz = ask(512, 0, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_seq 0", NULL);
    sz = ask(512, 1, 0, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_batch 0", NULL);
    sz = ask(INT_MIN, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_ctx -2147483648", NULL);
    sz = ask(512, 1, -1, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_batch -1", NULL);
}

/* ---- hostile hyper-parameters ---------------------------------------------- */

TEST(zero_hyper_parameters) {
    struct fake *f = fake_of(MODELS[0]);
    CHECK(f != NULL);
    if (!f) return;
    const struct wgllm_webgpu_limits l = swiftshader_limits();
    static const struct {
        size_t off;
        const char *name;
    } fields[] = {{offsetof(struct wgllm_hparams, n_embd), "n_embd"},       {offsetof(struct wgllm_hparams, n_head), "n_head"},
                  {offsetof(struct wgllm_hparams, n_head_kv), "n_head_kv"}, {offsetof(struct wgllm_hparams, head_dim_k), "head_dim_k"},
                  {offsetof(struct wgllm_hparams, head_dim_v), "head_dim_v"}, {offsetof(struct wgllm_hparams, n_ff), "n_ff"},
                  {offsetof(struct wgllm_hparams, n_vocab), "n_vocab"},     {offsetof(struct wgllm_hparams, n_layer), "n_layer"}};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        for (int v = 0; v >= -1; v--) {
            f->m.hp = MODELS[0]->hp;
            memcpy((char *)&f->m.hp + fields[i].off, &v, sizeof v);
            char want[64];
            snprintf(want, sizeof want, "%s is %d", fields[i].name, v);
            struct wgllm_webgpu_sizes sz = ask(512, 1, 512, 0);
            PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, want, NULL);
        }
    f->m.hp = MODELS[0]->hp;
    f->m.hp.n_rot = -5;
    struct wgllm_webgpu_sizes sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "n_rot is -5", NULL);
    /* n_rot 0 is a model without rotation: zero-size rope buffers, still a plan */
    f->m.hp.n_rot = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_OK(&f->m, &l, &sz);
    CHECK_EQ_INT(sz.rope_cs, 0);
    /* more layers than the vector offsets' table, checked before any layer is read */
    f->m.hp = MODELS[0]->hp;
    f->m.hp.n_layer = 513;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "513 layers", NULL);
    /* a weight without rows, or rows of no bytes */
    f->m.hp = MODELS[0]->hp;
    f->layers[1].w_up.ne1 = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "blk.1.ffn_up.weight", "nothing to plan");
    f->layers[1] = MODELS[0]->layers[1];
    f->m.output.row_size = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "output.weight", "nothing to plan");
    free(f);
}

TEST(widths_past_2_32) {
    struct fake *f = fake_of(MODELS[0]);
    CHECK(f != NULL);
    if (!f) return;
    const struct wgllm_webgpu_limits ss = swiftshader_limits(), big = huge_limits();
    /* n_head x head_dim = 2^32 floats per token: no SwiftShader binding holds one row */
    f->m.hp.n_head = 1 << 26, f->m.hp.head_dim_k = f->m.hp.head_dim_v = 64;
    struct wgllm_webgpu_sizes sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &ss, &sz, WGLLM_STATUS_UNSUPPORTED, "widest activation row needs 17179869184 bytes",
             "allows 1073741824");
    /* with 2^40-byte bindings the batch shrinks to fit, the grid of one workgroup per head row too */
    sz = ask(512, 1, 512, 0);
    PLAN_OK(&f->m, &big, &sz);
    CHECK_EQ_INT(sz.n_batch, 63); /* UINT32_MAX / 2^26 workgroups */
    CHECK_EQ_INT(sz.act[WGLLM_ACT_Q], 63ull << 34); /* exact, not mod 2^32 */
    /* ... but not past the dispatch limit of a real device */
    struct wgllm_webgpu_limits wg = big;
    wg.max_workgroups_per_dim = 65535;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &wg, &sz, WGLLM_STATUS_UNSUPPORTED, "element-wise grid needs 67108864 workgroups", "65535");
    /* n_vocab near INT_MAX: the output rows of 256 sequences need 2^41 bytes */
    f->m.hp = MODELS[0]->hp;
    f->m.hp.n_vocab = INT_MAX;
    sz = ask(512, 256, 512, 0);
    PLAN_ERR(&f->m, &ss, &sz, WGLLM_STATUS_UNSUPPORTED, "output readback buffer needs 2199023254528 bytes",
             "maxBufferSize");
    /* n_ff near INT_MAX: one token's rows are past a SwiftShader binding */
    f->m.hp = MODELS[0]->hp;
    f->m.hp.n_ff = INT_MAX;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &ss, &sz, WGLLM_STATUS_UNSUPPORTED, "needs 8589934588 bytes", NULL);
    free(f);
}

TEST(widths_past_2_64) {
    struct fake *f = fake_of(MODELS[0]);
    CHECK(f != NULL);
    if (!f) return;
    struct wgllm_webgpu_limits l = huge_limits();
    l.max_buffer_size = l.max_storage_binding_size = UINT64_MAX - 1; /* limits never the problem */
    l.wg_attn = l.attn_max_dims = UINT32_MAX;
    /* n_head x head_dim near 2^62: one token's element-wise grid is past any device */
    f->m.hp.n_head = f->m.hp.n_head_kv = INT_MAX;
    f->m.hp.head_dim_k = f->m.hp.head_dim_v = INT_MAX - 1;
    struct wgllm_webgpu_sizes sz = ask(INT_MAX, 256, INT_MAX, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "element-wise grid needs", NULL);
    /* K/V rows of 2^32 bytes: batch x row (2^64), n_seq x n_ctx x row (2^71) and the
     * whole plan (2^65) pass 2^64; every shrink must see that, and the total fail */
    f->m.hp.n_head = f->m.hp.n_head_kv = 2;
    f->m.hp.head_dim_k = f->m.hp.head_dim_v = 1 << 30;
    sz = ask(INT_MAX, 256, INT_MAX, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "the plan needs more than 2^64 bytes", NULL);
    /* the same widths under a budget: no product wraps under it */
    sz = ask(INT_MAX, 256, INT_MAX, 1ull << 40);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_OUT_OF_MEMORY, "budget", "too small");
    /* weights of 16 pieces that each fit, 2^68 bytes in all: the total would wrap */
    f->m.hp = MODELS[0]->hp;
    l.rows_matvec = UINT32_MAX;
    f->m.tok_embd.row_size = (size_t)1 << 24;
    f->m.tok_embd.ne1 = ((int64_t)1 << 44) - 16; /* 16 pieces of 2^40 - 1 rows */
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "more than 2^64 bytes", NULL);
    /* one piece more than allowed, and a row count whose rounding up would overflow */
    f->m.tok_embd.ne1 = ((int64_t)1 << 44) - 15;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "token_embd.weight needs 17 pieces", NULL);
    f->m.tok_embd.ne1 = INT64_MAX;
    f->m.tok_embd.row_size = 1024;
    sz = ask(512, 1, 512, 0);
    const struct wgllm_webgpu_limits ss = swiftshader_limits();
    PLAN_ERR(&f->m, &ss, &sz, WGLLM_STATUS_UNSUPPORTED, "token_embd.weight needs", "pieces");
    free(f);
}

/* ---- hostile devices ------------------------------------------------------- */

TEST(tiny_and_zero_device_limits) {
    const struct wgllm_model *m = MODELS[0];
    struct wgllm_webgpu_limits l = swiftshader_limits();
    /* a 64 KiB binding: token_embd's 32000 rows would take 32 pieces (limit 16) */
    l.max_buffer_size = l.max_storage_binding_size = 64 << 10;
    struct wgllm_webgpu_sizes sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "pieces", "(limit 16)");
    /* smaller than one row of a weight */
    l.max_buffer_size = l.max_storage_binding_size = 64;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "exceeds the device's storage binding size 64", NULL);
    /* bindings enough for the weights (4 MiB pieces) but not for the logits of one row per sequence */
    l.max_buffer_size = l.max_storage_binding_size = 4 << 20;
    sz = ask(512, 64, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "needs 8192000 bytes", "the device allows 4194304");
    /* a small maxBufferSize under a large binding: the smaller one rules */
    l.max_storage_binding_size = 1ull << 30;
    sz = ask(512, 64, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "the device allows 4194304", NULL);
    /* the same with one sequence: it fits, shrunk */
    sz = ask(512, 1, 512, 0);
    PLAN_OK(m, &l, &sz);
    /* zero limits */
    l = swiftshader_limits();
    l.max_buffer_size = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "storage binding size 0", NULL);
    l = swiftshader_limits();
    l.max_workgroups_per_dim = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "workgroups per dimension 0", NULL);
    l = swiftshader_limits();
    l.wg_elem = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_INVALID_ARGUMENT, "wg_elem 0", NULL);
    l = swiftshader_limits();
    l.wg_attn = 0;
    sz = ask(512, 1, 512, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "attention kernel's 0", NULL);
}

/* ---- mixture of experts ----------------------------------------------------
 * A stack of experts (wgllm_weight.n_expert) splits only between experts
 * (MATVEC_ID offsets the rows by the expert id), so a piece holds whole
 * experts in whole u32 words; an expert larger than a binding is refused
 * naming the stack; the MoE activations shrink the batch to fit a binding. */
TEST(moe_stacks_split_between_experts) {
    struct wgllm_webgpu_limits l = swiftshader_limits();
    struct wgllm_weight w = {.type = WGLLM_TYPE_F32, .ne0 = 256, .ne1 = 8 * 192, .row_size = 1024, .n_expert = 8,
                             .name = "blk.0.ffn_gate_exps.weight"};
    int64_t rows;
    int pieces;
    struct wgllm_error err = {0};
    /* 640 KiB: 3 experts of 192 KiB a piece (3 pieces), not 640 rows (which would cut an expert) */
    l.max_buffer_size = l.max_storage_binding_size = 640 << 10;
    CHECK_EQ_INT(wgllm_webgpu_weight_rows(&l, &w, &rows, &pieces, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(rows, 3 * 192);
    CHECK_EQ_INT(pieces, 3);
    /* the dispatch limit is per expert (MATVEC_ID's grid), not per stack: 64 x 4 rows do not cap the stack */
    l.max_workgroups_per_dim = 4;
    CHECK_EQ_INT(wgllm_webgpu_weight_rows(&l, &w, &rows, &pieces, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(rows, 3 * 192);
    l = swiftshader_limits();
    /* Q8_0 experts of 34-byte-block rows: 64 rows x 68 bytes, whole words per piece */
    struct wgllm_weight q = {.type = WGLLM_TYPE_Q8_0, .ne0 = 64, .ne1 = 4 * 3, .row_size = 68, .n_expert = 4,
                             .name = "blk.1.ffn_down_exps.weight"};
    l.max_buffer_size = l.max_storage_binding_size = 500;
    CHECK_EQ_INT(wgllm_webgpu_weight_rows(&l, &q, &rows, &pieces, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(rows, 6); /* 2 experts: 408 bytes */
    CHECK_EQ_INT(pieces, 2);
    /* one expert larger than a binding */
    l.max_buffer_size = l.max_storage_binding_size = 128 << 10;
    CHECK_EQ_INT(wgllm_webgpu_weight_rows(&l, &w, &rows, &pieces, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "blk.0.ffn_gate_exps.weight") && strstr(err.message, "one expert"));
    /* rows that are not n_expert equal experts */
    w.ne1 = 8 * 192 + 1;
    l = swiftshader_limits();
    CHECK_EQ_INT(wgllm_webgpu_weight_rows(&l, &w, &rows, &pieces, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "blk.0.ffn_gate_exps.weight") != NULL);
    /* a model: its stacks refused by name under a binding smaller than an expert (tiny-qwen3moe F32:
       experts of 256 rows x 1 KiB), and its batch shrunk so that the choices' rows fit a binding */
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = "tiny-qwen3moe";
    sp.type = WGLLM_TYPE_F32;
    struct wgllm_model *m = test_synth_model(&sp);
    CHECK(m != NULL);
    if (!m) return;
    l.max_buffer_size = l.max_storage_binding_size = 200 << 10;
    struct wgllm_webgpu_sizes sz = ask(64, 1, 64, 0);
    PLAN_ERR(m, &l, &sz, WGLLM_STATUS_UNSUPPORTED, "blk.0.ffn_gate_exps.weight", "one expert");
    l = swiftshader_limits();
    sz = ask(512, 1, 512, 0);
    PLAN_OK(m, &l, &sz);
    const uint64_t plain = sz.estimate;
    l.max_buffer_size = l.max_storage_binding_size = 8 << 20; /* the weights fit; 2 x 256 x 4 bytes a token's choices */
    sz = ask(512, 1, 8192, 0);
    sz.n_ctx = 8192;
    PLAN_OK(m, &l, &sz);
    CHECK(sz.n_batch < 8192 && (uint64_t)sz.n_batch * 2 * 256 * 4 <= (8u << 20));
    CHECK(plain > wgllm_model_size(m)); /* the routers, experts and their activations counted */
    wgllm_model_free(m);
}

/* ---- a 32-bit size_t (wasm32) ---------------------------------------------- */

TEST(host_arrays_on_32_bit_size_t) {
    struct fake *f = fake_of(MODELS[0]);
    CHECK(f != NULL);
    if (!f) return;
    const struct wgllm_webgpu_limits l = huge_limits();
    /* n_rot 2^20: the host's rope table of 8192 tokens is 2^35 bytes */
    f->m.hp.n_rot = 1 << 20;
    struct wgllm_webgpu_sizes sz = ask(8192, 1, 8192, 0);
    PLAN_OK(&f->m, &l, &sz);
    CHECK_EQ_INT(sz.rope_host, (uint64_t)8192 << 20);
    wgllm_set_size_limit(UINT32_MAX);
    sz = ask(8192, 1, 8192, 0);
    PLAN_ERR(&f->m, &l, &sz, WGLLM_STATUS_OUT_OF_MEMORY, "rope table copy needs 34359738368 bytes", "address");
    /* ... and the normal model still plans on it */
    const struct wgllm_webgpu_limits ss = swiftshader_limits();
    sz = ask(512, 1, 512, 0);
    PLAN_OK(MODELS[0], &ss, &sz);
    wgllm_set_size_limit(0);
    free(f);
}

/* ---- through the public API, on the device --------------------------------- */

TEST(hostile_contexts_on_device) {
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_webgpu_plan (device part)", &required);
    if (!g) {
        CHECK(!required);
        return;
    }
    wgllm_gpu_close(g);
    /* n_ctx near INT_MAX and 256 sequences in a 300 MiB budget: a plan, shrunk */
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.backend = WGLLM_BACKEND_WEBGPU, cp.n_ctx = INT_MAX, cp.n_seq = 256, cp.n_batch = INT_MAX;
    cp.gpu_mem = 300ull << 20;
    struct wgllm_context *c = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_context_init(MODELS[0], &cp, &c, &err), WGLLM_STATUS_OK);
    if (c) {
        CHECK(wgllm_context_n_ctx(c) >= 1 && wgllm_context_n_ctx(c) < 4096);
        CHECK(wgllm_context_gpu_memory(c) <= 300ull << 20);
        wgllm_context_free(c);
    } else {
        fprintf(stderr, "  %s\n", err.message);
    }
    /* n_seq 2 x n_ctx INT_MAX used to overflow int in the batch bound */
    cp.n_seq = 2, cp.gpu_mem = 200ull << 20;
    CHECK_EQ_INT(wgllm_context_init(MODELS[0], &cp, &c, &err), WGLLM_STATUS_OK);
    if (c) wgllm_context_free(c);
    /* a hostile model: an error before any buffer, and the context freed */
    struct fake *f = fake_of(MODELS[0]);
    CHECK(f != NULL);
    if (!f) return;
    f->m.hp.n_vocab = INT_MAX;
    cp = wgllm_context_default_params();
    cp.backend = WGLLM_BACKEND_WEBGPU, cp.n_seq = 4;
    struct wgllm_webgpu_ctx *ctx = NULL;
    char why[320];
    err = (struct wgllm_error){0};
    CHECK_EQ_INT(wgllm_webgpu_ctx_create(&f->m, &cp, &ctx, why, sizeof why, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(ctx == NULL);
    CHECK(strstr(err.message, "output readback buffer needs 34359738352 bytes") != NULL);
    CHECK(strstr(err.message, "the device allows 1073741824") != NULL);
    if (!strstr(err.message, "the device allows")) fprintf(stderr, "  %s\n", err.message);
    free(f);
}

/* ---- dispatches of a decode step ------------------------------------------
 * A llama layer decodes in 6 dispatches when the mat-vecs round (and
 * normalize) their inputs in their prologues, 10 without (workgroup memory
 * too small for even the packed row: WGLLM_WEBGPU_MAX_WG_STORAGE), 8 with F32
 * weights (nothing to round: RMSNorm before q|k|v and gate|up). The blocks
 * beyond llama's add their own: qwen3's q/k norms 2, gemma2's post-norms 2
 * (each projection then writes tmp, rounding its input in its prologue);
 * an MoE FFN keeps its router's and experts' dispatches (webgpu_moe.c). */
TEST(decode_dispatches_per_layer_on_device) {
    int required;
    struct wgllm_gpu *g = test_webgpu_open("test_webgpu_plan (device part)", &required);
    if (!g) {
        CHECK(!required);
        return;
    }
    wgllm_gpu_close(g);
    static const struct {
        const char *shape;
        uint32_t type;
        const char *wg_storage; /* WGLLM_WEBGPU_MAX_WG_STORAGE, NULL: the device's */
        int per_layer, per_step;
    } cases[] = {
        {"tiny", WGLLM_TYPE_Q8_0, NULL, 6, 18},     {"tiny", WGLLM_TYPE_Q8_0, "1", 10, 27},
        {"tiny", WGLLM_TYPE_Q8_0, "1100", 6, 18}, /* room for the packed rows only (test_webgpu_model's) */
        {"tiny", WGLLM_TYPE_F32, NULL, 8, 22},      {"tiny", WGLLM_TYPE_F16, NULL, 6, 18},
        {"tiny-qwen2", WGLLM_TYPE_Q8_0, NULL, 6, 18}, {"tiny-qwen3", WGLLM_TYPE_Q8_0, NULL, 8, 22},
        {"tiny-gemma2", WGLLM_TYPE_Q8_0, NULL, 8, 38}, {"tiny-gemma2", WGLLM_TYPE_Q8_0, "1", 12, 55},
        {"tiny-qwen3moe", WGLLM_TYPE_Q8_0, NULL, 0, 0}, {"tiny-qwen3moe", WGLLM_TYPE_Q8_0, "1", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct wgllm_synth_params sp = wgllm_synth_default_params();
        sp.shape = cases[i].shape, sp.type = cases[i].type;
        struct wgllm_model *m = test_synth_model(&sp);
        CHECK(m != NULL);
        if (!m) continue;
        if (cases[i].wg_storage) setenv("WGLLM_WEBGPU_MAX_WG_STORAGE", cases[i].wg_storage, 1);
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_ctx = 64, cp.n_batch = 16, cp.backend = WGLLM_BACKEND_WEBGPU;
        struct wgllm_webgpu_ctx *ctx = NULL;
        char why[320];
        struct wgllm_error err = {0};
        const enum wgllm_status st = wgllm_webgpu_ctx_create(m, &cp, &ctx, why, sizeof why, &err);
        unsetenv("WGLLM_WEBGPU_MAX_WG_STORAGE");
        CHECK_EQ_INT(st, WGLLM_STATUS_OK);
        if (!st && ctx) {
            struct wgllm_webgpu_plan p;
            wgllm_webgpu_get_plan(ctx, &p);
            printf("  %s %s, workgroup memory %s: %d dispatches a step, %d a layer\n", cases[i].shape,
                   wgllm_type_name(cases[i].type), cases[i].wg_storage ? cases[i].wg_storage : "the device's",
                   p.n_dispatches, p.n_dispatches_layer);
            if (cases[i].per_layer) {
                CHECK_EQ_INT(p.n_dispatches_layer, cases[i].per_layer);
                CHECK_EQ_INT(p.n_dispatches, cases[i].per_step);
            }
            wgllm_webgpu_ctx_free(ctx);
        } else {
            fprintf(stderr, "  %s: %s\n", cases[i].shape, err.message);
        }
        wgllm_model_free(m);
    }
}

int main(void) {
    for (int s = 0; s < N_SHAPES; s++) {
        struct wgllm_synth_params sp = wgllm_synth_default_params();
        sp.shape = SHAPES[s];
        if (!(MODELS[s] = test_synth_model(&sp))) {
            printf("test_webgpu_plan: cannot make the %s model\n", SHAPES[s]);
            return 1; /* a setup that fails is a failure */
        }
    }
    RUN(normal_models_plan_as_before_without_device);
    RUN(requests_near_int_max);
    RUN(zero_and_negative_requests);
    RUN(zero_hyper_parameters);
    RUN(widths_past_2_32);
    RUN(widths_past_2_64);
    RUN(tiny_and_zero_device_limits);
    RUN(host_arrays_on_32_bit_size_t);
    RUN(moe_stacks_split_between_experts);
    RUN(new_blocks_plan_their_tables);
    RUN(encoders_plan_no_cache);
    RUN(normal_models_plan_as_before_on_device);
    RUN(hostile_contexts_on_device);
    RUN(decode_dispatches_per_layer_on_device);
    for (int s = 0; s < N_SHAPES; s++) wgllm_model_free(MODELS[s]);
    return test_summary("test_webgpu_plan");
}
