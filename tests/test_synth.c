/* test_synth.c - synthetic models: metadata, tensor layout, weight statistics,
 * determinism, quantized variants, copied tokenizer, splits. */
#include "test.h"

#include "gguf/gguf.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <unistd.h>

static bool value_eq(const struct wgllm_gguf_value *a, const struct wgllm_gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case WGLLM_GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.data, b->v.str.data, a->v.str.len) == 0;
    case WGLLM_GGUF_TYPE_ARRAY: {
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) return false;
        if (a->v.arr.items) {
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (!value_eq(&a->v.arr.items[i], &b->v.arr.items[i])) return false;
            return true;
        }
        for (uint64_t i = 0; i < a->v.arr.n; i++)
            if (wgllm_gguf_arr_float(a, i) != wgllm_gguf_arr_float(b, i)) return false;
        return true;
    }
    default:
        return a->v.u64 == b->v.u64; /* same bits for every scalar representation */
    }
}

static uint32_t u32_key(const struct wgllm_gguf *g, const char *key) {
    uint32_t v = 0xffffffffu;
    struct wgllm_error err;
    if (wgllm_gguf_get_u32(g, key, &v, &err) != WGLLM_STATUS_OK) fprintf(stderr, "  %s\n", err.message);
    return v;
}

static void check_tensor(const struct wgllm_gguf *g, const char *name, uint32_t type, uint64_t ne0,
                         uint64_t ne1) {
    const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(g, name);
    if (!t) {
        fprintf(stderr, "  missing tensor %s\n", name);
        test_checks_failed_in_current++;
        return;
    }
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->n_dims != (ne1 > 1 ? 2u : 1u)) {
        fprintf(stderr, "  tensor %s: type %u ne %llu x %llu dims %u, want type %u %llu x %llu\n",
                name, t->type, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                t->n_dims, type, (unsigned long long)ne0, (unsigned long long)ne1);
        test_checks_failed_in_current++;
    }
}

/* mean and std of a tensor's values, dequantized */
static void stats(const struct wgllm_gguf_tensor *t, double *mean, double *std) {
    const struct wgllm_type_traits *tt = wgllm_type_traits(t->type);
    int64_t n = (int64_t)(t->ne[0] * t->ne[1]);
    float *f = malloc((size_t)n * sizeof(float));
    tt->to_float(t->data, f, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += f[i];
        s2 += (double)f[i] * f[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    free(f);
}

static const char *write_model(const char *shape, uint32_t type, uint64_t seed) {
    struct wgllm_synth_params p = wgllm_synth_default_params();
    p.shape = shape;
    p.type = type;
    p.seed = seed;
    const char *path = test_tmp_path(".gguf");
    struct wgllm_error err = {0};
    enum wgllm_status st = wgllm_synth_write(&p, path, &err);
    if (st != WGLLM_STATUS_OK) fprintf(stderr, "  %s\n", err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    return path;
}

TEST(test_shape_names) {
    const char *const *names = wgllm_synth_shape_names();
    int n = 0;
    for (; names[n]; n++) CHECK(wgllm_synth_shape(names[n]) != NULL);
    CHECK_EQ_INT(n, 33); /* ... the encoders tiny-bert, bge-small, tiny-nomic-bert among them, and tiny-gptoss */
    CHECK(wgllm_synth_shape("nope") == NULL);
    CHECK_EQ_INT(wgllm_synth_file_type(WGLLM_TYPE_Q8_0), 7);
    CHECK_EQ_INT(wgllm_synth_file_type(WGLLM_TYPE_BF16), 32);
    CHECK_EQ_INT(wgllm_synth_file_type(WGLLM_TYPE_TQ1_0), 36);
    CHECK_EQ_INT(wgllm_synth_file_type(WGLLM_TYPE_MXFP4), 38); /* llama.cpp's MXFP4_MOE: its only MXFP4 file type */
    CHECK_EQ_INT(wgllm_synth_file_type(WGLLM_TYPE_IQ2_XXS), -1); /* a type synth cannot write */
}

TEST(test_tiny_f32) {
    char path[512];
    snprintf(path, sizeof(path), "%s", write_model("tiny", WGLLM_TYPE_F32, 42));
    struct wgllm_gguf *g = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (!g) return;
    struct wgllm_gguf_str s;
    CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.architecture", &s, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_gguf_str_eq(s, "llama"));
    CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.name", &s, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_gguf_str_eq(s, "tiny"));
    CHECK_EQ_INT(u32_key(g, "general.file_type"), 0);
    CHECK_EQ_INT(u32_key(g, "llama.block_count"), 2);
    CHECK_EQ_INT(u32_key(g, "llama.context_length"), 512);
    CHECK_EQ_INT(u32_key(g, "llama.embedding_length"), 256);
    CHECK_EQ_INT(u32_key(g, "llama.feed_forward_length"), 512);
    CHECK_EQ_INT(u32_key(g, "llama.attention.head_count"), 8);
    CHECK_EQ_INT(u32_key(g, "llama.attention.head_count_kv"), 4);
    CHECK_EQ_INT(u32_key(g, "llama.rope.dimension_count"), 32);
    float f = 0;
    CHECK_EQ_INT(wgllm_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), WGLLM_STATUS_OK);
    CHECK_NEAR(f, 1e-5, 1e-9);
    CHECK_EQ_INT(wgllm_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), WGLLM_STATUS_OK);
    CHECK_NEAR(f, 10000.0, 1e-3);

    /* the tokenizer keys are exactly the vocabulary's */
    struct wgllm_gguf *v = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(test_shared_path("vocab/ggml-vocab-llama-spm.gguf"), &v, &err), WGLLM_STATUS_OK);
    int copied = 0;
    for (int64_t i = 0; v && i < wgllm_gguf_n_kv(v); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(v, i);
        if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10) != 0) continue;
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
        const struct wgllm_gguf_value *mv = wgllm_gguf_find(g, key);
        CHECK(mv != NULL);
        if (mv) CHECK(value_eq(mv, &kv->value));
        copied++;
    }
    CHECK(copied >= 8);
    CHECK(wgllm_gguf_find(g, "llama.vocab_size") != NULL);
    wgllm_gguf_free(v);

    const uint32_t F32 = WGLLM_TYPE_F32;
    CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 3 + 2 * 9);
    check_tensor(g, "token_embd.weight", F32, 256, 32000);
    check_tensor(g, "output_norm.weight", F32, 256, 1);
    check_tensor(g, "output.weight", F32, 256, 32000);
    for (int l = 0; l < 2; l++) {
        char nm[64];
#define T(suffix, ne0, ne1)                                                               \
    snprintf(nm, sizeof(nm), "blk.%d.%s", l, suffix);                                     \
    check_tensor(g, nm, F32, ne0, ne1)
        T("attn_norm.weight", 256, 1);
        T("attn_q.weight", 256, 256);
        T("attn_k.weight", 256, 128);
        T("attn_v.weight", 256, 128);
        T("attn_output.weight", 256, 256);
        T("ffn_norm.weight", 256, 1);
        T("ffn_gate.weight", 256, 512);
        T("ffn_up.weight", 256, 512);
        T("ffn_down.weight", 512, 256);
#undef T
    }
    CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_q.bias") == NULL);

    /* the scale table */
    double m, sd;
    stats(wgllm_gguf_find_tensor(g, "token_embd.weight"), &m, &sd);
    CHECK_NEAR(m, 0.0, 0.01);
    CHECK_NEAR(sd, 1.0, 0.02);
    stats(wgllm_gguf_find_tensor(g, "blk.1.attn_q.weight"), &m, &sd);
    CHECK_NEAR(sd, 1.0 / 16, 0.002);
    stats(wgllm_gguf_find_tensor(g, "blk.1.ffn_down.weight"), &m, &sd);
    CHECK_NEAR(sd, 0.5 / sqrt(512.0), 0.001);
    stats(wgllm_gguf_find_tensor(g, "blk.0.attn_norm.weight"), &m, &sd);
    CHECK_NEAR(m, 1.0, 0.02);
    CHECK(sd > 0.02 && sd < 0.08);
    stats(wgllm_gguf_find_tensor(g, "output.weight"), &m, &sd);
    CHECK_NEAR(sd, 0.5, 0.01);
    /* tensors differ from one another */
    const struct wgllm_gguf_tensor *a = wgllm_gguf_find_tensor(g, "blk.0.ffn_gate.weight");
    const struct wgllm_gguf_tensor *b = wgllm_gguf_find_tensor(g, "blk.0.ffn_up.weight");
    CHECK(a && b && memcmp(a->data, b->data, a->size) != 0);
    wgllm_gguf_free(g);
    unlink(path);
}

TEST(test_determinism_and_q8_0) {
    char p1[512], p2[512], p3[512], pf[512];
    snprintf(p1, sizeof(p1), "%s", write_model("tiny", WGLLM_TYPE_Q8_0, 7));
    snprintf(p2, sizeof(p2), "%s", write_model("tiny", WGLLM_TYPE_Q8_0, 7));
    snprintf(p3, sizeof(p3), "%s", write_model("tiny", WGLLM_TYPE_Q8_0, 8));
    size_t n1 = 0, n2 = 0, n3 = 0;
    uint8_t *b1 = (uint8_t *)test_read_file(p1, &n1), *b2 = (uint8_t *)test_read_file(p2, &n2), *b3 = (uint8_t *)test_read_file(p3, &n3);
    CHECK(b1 && b2 && b3);
    CHECK(n1 == n2 && n1 > 0 && memcmp(b1, b2, n1) == 0);
    CHECK(n1 == n3 && memcmp(b1, b3, n1) != 0);
    free(b1);
    free(b2);
    free(b3);

    struct wgllm_gguf *g = NULL, *gf = NULL;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_gguf_open(p1, &g, &err), WGLLM_STATUS_OK);
    snprintf(pf, sizeof(pf), "%s", write_model("tiny", WGLLM_TYPE_F32, 7));
    CHECK_EQ_INT(wgllm_gguf_open(pf, &gf, &err), WGLLM_STATUS_OK);
    if (g && gf) {
        CHECK_EQ_INT(u32_key(g, "general.file_type"), 7);
        check_tensor(g, "token_embd.weight", WGLLM_TYPE_Q8_0, 256, 32000);
        check_tensor(g, "blk.1.ffn_down.weight", WGLLM_TYPE_Q8_0, 512, 256);
        check_tensor(g, "blk.1.ffn_norm.weight", WGLLM_TYPE_F32, 256, 1);
        /* same seed: the q8_0 file is the f32 file quantized */
        const struct wgllm_gguf_tensor *q = wgllm_gguf_find_tensor(g, "blk.0.attn_k.weight");
        const struct wgllm_gguf_tensor *r = wgllm_gguf_find_tensor(gf, "blk.0.attn_k.weight");
        int64_t n = 256 * 128;
        float *dq = malloc(n * sizeof(float));
        wgllm_type_traits(WGLLM_TYPE_Q8_0)->to_float(q->data, dq, n);
        const float *ref = r->data;
        double maxerr = 0;
        for (int64_t i = 0; i < n; i++) maxerr = fmax(maxerr, fabs(dq[i] - ref[i]));
        CHECK(maxerr < 0.0625 * 3.5 / 127 + 1e-4); /* half a q8 step of the largest block */
        free(dq);
        /* norms are stored exactly in both */
        q = wgllm_gguf_find_tensor(g, "output_norm.weight");
        r = wgllm_gguf_find_tensor(gf, "output_norm.weight");
        CHECK(q && r && memcmp(q->data, r->data, q->size) == 0);
    }
    wgllm_gguf_free(g);
    wgllm_gguf_free(gf);
    unlink(p1);
    unlink(p2);
    unlink(p3);
    unlink(pf);
}

TEST(test_qwen_shapes) {
    static const uint32_t types[2] = {WGLLM_TYPE_F16, WGLLM_TYPE_Q4_0};
    for (int q = 0; q < 2; q++) {
        const char *shape = q == 0 ? "tiny-qwen2" : "tiny-qwen3";
        char path[512];
        snprintf(path, sizeof(path), "%s", write_model(shape, types[q], 3));
        struct wgllm_gguf *g = NULL;
        struct wgllm_error err;
        CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
        if (!g) continue;
        const char *A = q == 0 ? "qwen2" : "qwen3";
        char k[96];
        struct wgllm_gguf_str s;
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.architecture", &s, &err), WGLLM_STATUS_OK);
        CHECK(wgllm_gguf_str_eq(s, A));
        snprintf(k, sizeof(k), "%s.attention.head_count", A);
        CHECK_EQ_INT(u32_key(g, k), 4);
        snprintf(k, sizeof(k), "%s.attention.head_count_kv", A);
        CHECK_EQ_INT(u32_key(g, k), 2);
        snprintf(k, sizeof(k), "%s.rope.freq_base", A);
        float f = 0;
        CHECK_EQ_INT(wgllm_gguf_get_f32(g, k, &f, &err), WGLLM_STATUS_OK);
        CHECK_NEAR(f, 1e6, 1);
        CHECK_EQ_INT(u32_key(g, "general.file_type"), q == 0 ? 1 : 2);
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "tokenizer.ggml.model", &s, &err), WGLLM_STATUS_OK);
        CHECK(wgllm_gguf_str_eq(s, "gpt2"));
        CHECK(wgllm_gguf_find(g, "tokenizer.ggml.merges") != NULL);
        uint32_t wt = types[q], F32 = WGLLM_TYPE_F32;
        check_tensor(g, "token_embd.weight", wt, 256, 50257);
        CHECK(wgllm_gguf_find_tensor(g, "output.weight") == NULL); /* tied */
        check_tensor(g, "blk.1.attn_q.weight", wt, 256, 256);
        check_tensor(g, "blk.1.attn_k.weight", wt, 256, 128);
        check_tensor(g, "blk.1.attn_output.weight", wt, 256, 256);
        check_tensor(g, "blk.1.ffn_down.weight", wt, 512, 256);
        if (q == 0) {
            check_tensor(g, "blk.0.attn_q.bias", F32, 256, 1);
            check_tensor(g, "blk.0.attn_k.bias", F32, 128, 1);
            check_tensor(g, "blk.0.attn_v.bias", F32, 128, 1);
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") == NULL);
            CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 2 + 2 * 12);
        } else {
            check_tensor(g, "blk.0.attn_q_norm.weight", F32, 64, 1);
            check_tensor(g, "blk.0.attn_k_norm.weight", F32, 64, 1);
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_q.bias") == NULL);
            CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 2 + 2 * 11);
        }
        /* tied: token_embd * output_norm carry the output scale 8/sqrt(n_embd) */
        double m, sd, m2, sd2;
        stats(wgllm_gguf_find_tensor(g, "token_embd.weight"), &m, &sd);
        stats(wgllm_gguf_find_tensor(g, "output_norm.weight"), &m2, &sd2);
        CHECK_NEAR(sd * m2, 0.5, 0.05);
        wgllm_gguf_free(g);
        unlink(path);
    }
}

/* gemma: llama.cpp's tensor names (post-norms, q/k norms for gemma3, no
 * output.weight), the keys its loader reads, and Gemma's chat template */
TEST(test_gemma_shapes) {
    for (int q = 0; q < 2; q++) {
        const char *shape = q == 0 ? "tiny-gemma2" : "tiny-gemma3", *A = q == 0 ? "gemma2" : "gemma3";
        char path[512];
        snprintf(path, sizeof(path), "%s", write_model(shape, WGLLM_TYPE_Q8_0, 3));
        struct wgllm_gguf *g = NULL;
        struct wgllm_error err;
        CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
        if (!g) continue;
        char k[96];
        struct wgllm_gguf_str s;
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "general.architecture", &s, &err), WGLLM_STATUS_OK);
        CHECK(wgllm_gguf_str_eq(s, A));
        snprintf(k, sizeof(k), "%s.attention.sliding_window", A);
        CHECK_EQ_INT(u32_key(g, k), 8);
        snprintf(k, sizeof(k), "%s.attention.key_length", A);
        CHECK_EQ_INT(u32_key(g, k), 128); /* not n_embd / n_head, as in the real models */
        snprintf(k, sizeof(k), "%s.attention.sliding_window_pattern", A);
        CHECK((wgllm_gguf_find(g, k) != NULL) == (q == 1)); /* gemma2 keeps llama.cpp's default */
        snprintf(k, sizeof(k), "%s.attn_logit_softcapping", A);
        float f = 0;
        CHECK((wgllm_gguf_find(g, k) != NULL) == (q == 0));
        if (q == 0) {
            CHECK_EQ_INT(wgllm_gguf_get_f32(g, k, &f, &err), WGLLM_STATUS_OK);
            CHECK(f == 5.0f);
            CHECK_EQ_INT(wgllm_gguf_get_f32(g, "gemma2.final_logit_softcapping", &f, &err), WGLLM_STATUS_OK);
            CHECK(f == 30.0f);
        }
        CHECK_EQ_INT(wgllm_gguf_get_str(g, "tokenizer.chat_template", &s, &err), WGLLM_STATUS_OK);
        CHECK(s.len > 100 && memmem(s.data, s.len, "<start_of_turn>", 15) != NULL);
        CHECK(wgllm_gguf_find_tensor(g, "output.weight") == NULL); /* tied */
        const uint32_t F32 = WGLLM_TYPE_F32;
        check_tensor(g, "blk.1.attn_q.weight", WGLLM_TYPE_Q8_0, 256, 512);
        check_tensor(g, "blk.1.attn_output.weight", WGLLM_TYPE_Q8_0, 512, 256);
        check_tensor(g, "blk.1.post_attention_norm.weight", F32, 256, 1);
        check_tensor(g, "blk.1.post_ffw_norm.weight", F32, 256, 1);
        if (q == 1) {
            check_tensor(g, "blk.0.attn_q_norm.weight", F32, 128, 1);
            check_tensor(g, "blk.0.attn_k_norm.weight", F32, 128, 1);
        } else {
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") == NULL);
        }
        const int n_layer = q == 0 ? 4 : 3, per_layer = q == 0 ? 11 : 13;
        CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 2 + n_layer * per_layer);
        /* the embeddings enter multiplied by sqrt(n_embd) = 16: token_embd is
         * that much smaller than a tied llama's, output_norm that much larger,
         * so the logits keep their scale 8/sqrt(n_embd) */
        double m, sd, m2, sd2;
        stats(wgllm_gguf_find_tensor(g, "token_embd.weight"), &m, &sd);
        stats(wgllm_gguf_find_tensor(g, "output_norm.weight"), &m2, &sd2);
        CHECK_NEAR(sd * m2, 0.5, 0.05);
        CHECK_NEAR(m2, 160.0, 1.0);
        wgllm_gguf_free(g);
        unlink(path);
    }
}

/* granite, olmo2, smollm3: llama.cpp's tensor names (olmo2: no pre-norms,
 * post-norms, q/k norms over the whole projection), granite's scales as keys
 * and undone in the weights */
TEST(test_granite_olmo2_smollm3_shapes) {
    static const char *const shapes[] = {"tiny-granite", "tiny-olmo2", "tiny-smollm3"};
    static const int per_layer[] = {9, 11, 9}, n_layer[] = {2, 2, 4};
    const uint32_t F32 = WGLLM_TYPE_F32, Q8 = WGLLM_TYPE_Q8_0;
    for (int q = 0; q < 3; q++) {
        char path[512];
        snprintf(path, sizeof(path), "%s", write_model(shapes[q], Q8, 3));
        struct wgllm_gguf *g = NULL;
        struct wgllm_error err;
        CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
        if (!g) continue;
        CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 3 + n_layer[q] * per_layer[q]); /* + token_embd, output(_norm) */
        CHECK(wgllm_gguf_find_tensor(g, "output.weight") != NULL);
        check_tensor(g, "blk.1.attn_k.weight", Q8, 256, 128);
        if (q == 1) {
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_norm.weight") == NULL);
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.ffn_norm.weight") == NULL);
            check_tensor(g, "blk.1.attn_q_norm.weight", F32, 256, 1);
            check_tensor(g, "blk.1.attn_k_norm.weight", F32, 128, 1);
            check_tensor(g, "blk.1.post_attention_norm.weight", F32, 256, 1);
            check_tensor(g, "blk.1.post_ffw_norm.weight", F32, 256, 1);
        } else {
            check_tensor(g, "blk.1.attn_norm.weight", F32, 256, 1);
            CHECK(wgllm_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") == NULL);
        }
        if (q == 0) {
            float f = 0;
            CHECK_EQ_INT(wgllm_gguf_get_f32(g, "granite.residual_scale", &f, &err), WGLLM_STATUS_OK);
            CHECK(f == 0.22f);
            CHECK_EQ_INT(wgllm_gguf_get_f32(g, "granite.logit_scale", &f, &err), WGLLM_STATUS_OK);
            CHECK(f == 8.0f);
            /* the scales are undone: output_norm x 8 (logits / 8), attn_output / 0.22 */
            double m, sd;
            stats(wgllm_gguf_find_tensor(g, "output_norm.weight"), &m, &sd);
            CHECK_NEAR(m, 8.0, 0.1);
            stats(wgllm_gguf_find_tensor(g, "blk.0.attn_output.weight"), &m, &sd);
            CHECK_NEAR(sd, 0.5 / 16 / 0.22, 0.01);
        }
        wgllm_gguf_free(g);
        unlink(path);
    }
}

TEST(test_every_type) {
    static const uint32_t types[] = {WGLLM_TYPE_BF16, WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_0, WGLLM_TYPE_Q5_1, WGLLM_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct wgllm_synth_params p = wgllm_synth_default_params();
        p.type = types[i];
        p.n_layer = 1;
        const char *path = test_tmp_path(".gguf");
        struct wgllm_error err;
        CHECK_EQ_INT(wgllm_synth_write(&p, path, &err), WGLLM_STATUS_OK);
        struct wgllm_gguf *g = NULL;
        CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
        if (g) {
            CHECK_EQ_INT(u32_key(g, "general.file_type"), wgllm_synth_file_type(types[i]));
            CHECK_EQ_INT(u32_key(g, "llama.block_count"), 1);
            check_tensor(g, "blk.0.ffn_up.weight", types[i], 256, 512);
            CHECK(wgllm_gguf_find_tensor(g, "blk.1.ffn_up.weight") == NULL);
            double m, sd;
            stats(wgllm_gguf_find_tensor(g, "blk.0.ffn_up.weight"), &m, &sd);
            CHECK_NEAR(sd, 1.0 / 16, 0.01);
        }
        wgllm_gguf_free(g);
        unlink(path);
    }
}

TEST(test_split_and_errors) {
    struct wgllm_synth_params p = wgllm_synth_default_params();
    p.type = WGLLM_TYPE_Q8_0;
    p.max_split_bytes = 4u << 20; /* token_embd/output are 8.5 MB each: one shard each */
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s", test_tmp_path("-split"));
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_synth_write(&p, prefix, &err), WGLLM_STATUS_OK);
    char first[600];
    wgllm_gguf_split_path(first, sizeof(first), prefix, 1, 3);
    struct wgllm_gguf *g = NULL;
    enum wgllm_status st = wgllm_gguf_open(first, &g, &err);
    if (st) fprintf(stderr, "  %s\n", err.message);
    CHECK_EQ_INT(st, WGLLM_STATUS_OK);
    if (g) {
        CHECK_EQ_INT(wgllm_gguf_n_splits(g), 3);
        CHECK_EQ_INT(wgllm_gguf_n_tensors(g), 21);
        CHECK(wgllm_gguf_find(g, "tokenizer.ggml.tokens") != NULL);
        CHECK_EQ_INT(wgllm_gguf_find_tensor(g, "output.weight")->split, 2);
    }
    wgllm_gguf_free(g);
    for (int i = 1; i <= 3; i++) {
        wgllm_gguf_split_path(first, sizeof(first), prefix, i, 3);
        unlink(first);
    }

    p = wgllm_synth_default_params();
    p.shape = "huge";
    CHECK_EQ_INT(wgllm_synth_write(&p, test_tmp_path(".gguf"), &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "huge") != NULL);
    p.shape = "tiny";
    p.type = WGLLM_TYPE_IQ2_XXS; /* no reference quantizer */
    CHECK_EQ_INT(wgllm_synth_write(&p, test_tmp_path(".gguf"), &err), WGLLM_STATUS_INVALID_ARGUMENT);
    p.type = WGLLM_TYPE_F32;
    p.vocab_path = "/nonexistent/vocab.gguf";
    CHECK_EQ_INT(wgllm_synth_write(&p, test_tmp_path(".gguf"), &err), WGLLM_STATUS_IO);
    CHECK(strstr(err.message, "/nonexistent/vocab.gguf") != NULL);
}

int main(void) {
    wgllm_base_init();
    wgllm_quant_init();
    RUN(test_shape_names);
    RUN(test_tiny_f32);
    RUN(test_determinism_and_q8_0);
    RUN(test_qwen_shapes);
    RUN(test_gemma_shapes);
    RUN(test_granite_olmo2_smollm3_shapes);
    RUN(test_every_type);
    RUN(test_split_and_errors);
    return test_summary("test_synth");
}
