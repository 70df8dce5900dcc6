/*
 * test_quantize.c - `wgllm quantize` (model/quantize.c): a Q8_0 quantization of
 * a synthetic F32 model equals synth's own Q8_0 file byte for byte; the
 * Q4_K_M / Q3_K_M type mix of llama.cpp's rules on the tiny shape and on a
 * 16-layer skeleton (use_more_bits layers, row-length fallbacks); metadata
 * kept; the Q4_K_M file loads and decodes; quantized input refused unless
 * allowed. Byte equality with llama.cpp itself is tests/peer/quantize.test.mjs.
 */
#include "test.h"

#include "gguf/gguf.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <unistd.h>

static char dir[64];
static char f32_path[128], q8_path[128], ours_q8[128], q4km[128];

static void tpath(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static bool make_models(void) {
    struct wgllm_error err = {0};
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.seed = 7;
    if (wgllm_synth_write(&sp, f32_path, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "synth: %s\n", err.message);
        return false;
    }
    sp.type = WGLLM_TYPE_Q8_0;
    if (wgllm_synth_write(&sp, q8_path, &err) != WGLLM_STATUS_OK) {
        fprintf(stderr, "synth: %s\n", err.message);
        return false;
    }
    return true;
}

static uint32_t kv_u32(const struct wgllm_gguf *g, const char *key) {
    uint32_t v = 0xFFFFFFFFu;
    struct wgllm_error e;
    wgllm_gguf_get_u32(g, key, &v, &e);
    return v;
}

TEST(q8_0_equals_synth_q8_0) {
    struct wgllm_error err = {0};
    struct wgllm_quantize_params p = wgllm_quantize_default_params();
    p.preset = "q8_0";
    p.n_threads = 2;
    CHECK_EQ_INT(wgllm_quantize_file(f32_path, ours_q8, &p, &err), WGLLM_STATUS_OK);
    struct wgllm_gguf *a = NULL, *b = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(q8_path, &a, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_open(ours_q8, &b, &err), WGLLM_STATUS_OK);
    if (!a || !b) goto out;
    CHECK_EQ_INT(wgllm_gguf_n_tensors(a), wgllm_gguf_n_tensors(b));
    CHECK_EQ_INT(wgllm_gguf_n_kv(a), wgllm_gguf_n_kv(b));
    CHECK_EQ_INT(kv_u32(b, "general.file_type"), 7);
    int n_q8 = 0;
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(a); i++) {
        const struct wgllm_gguf_tensor *x = wgllm_gguf_tensor_at(a, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)x->name.len, x->name.data);
        const struct wgllm_gguf_tensor *y = wgllm_gguf_find_tensor(b, name);
        CHECK(y != NULL);
        if (!y) continue;
        CHECK_EQ_INT(y->type, x->type);
        CHECK_EQ_INT(y->size, x->size);
        if (y->size == x->size && memcmp(x->data, y->data, (size_t)x->size) != 0) {
            fprintf(stderr, "  tensor %s differs\n", name);
            CHECK(false);
        }
        n_q8 += x->type == WGLLM_TYPE_Q8_0;
    }
    CHECK_EQ_INT(n_q8, 16); /* 2 x 7 layer matrices + token_embd + output */
out:
    wgllm_gguf_free(a);
    wgllm_gguf_free(b);
}

/* llama.cpp's Q4_K_M on 2 layers: use_more_bits(i, 2) holds for i = 1 only
 * (i >= 7*2/8), so layer 1's attn_v and ffn_down get Q6_K; output.weight Q6_K;
 * every other matrix (token_embd too: the output is not tied) the default Q4_K. */
static uint32_t expect_q4km(const char *name) {
    if (strstr(name, "_norm")) return WGLLM_TYPE_F32;
    if (!strcmp(name, "output.weight")) return WGLLM_TYPE_Q6_K;
    if (!strcmp(name, "blk.1.attn_v.weight") || !strcmp(name, "blk.1.ffn_down.weight")) return WGLLM_TYPE_Q6_K;
    return WGLLM_TYPE_Q4_K;
}

TEST(q4_k_m_types_metadata_and_run) {
    struct wgllm_error err = {0};
    struct wgllm_quantize_params p = wgllm_quantize_default_params();
    p.preset = "Q4_K_M";
    p.n_threads = 2;
    CHECK_EQ_INT(wgllm_quantize_file(f32_path, q4km, &p, &err), WGLLM_STATUS_OK);
    struct wgllm_gguf *a = NULL, *b = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(f32_path, &a, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_gguf_open(q4km, &b, &err), WGLLM_STATUS_OK);
    if (!a || !b) goto out;
    CHECK_EQ_INT(wgllm_gguf_n_tensors(b), 21);
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(b); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(b, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
        if (t->type != expect_q4km(name)) fprintf(stderr, "  %s: %s\n", name, wgllm_type_name(t->type));
        CHECK_EQ_INT(t->type, expect_q4km(name));
        const struct wgllm_gguf_tensor *s = wgllm_gguf_find_tensor(a, name);
        CHECK(s && s->ne[0] == t->ne[0] && s->ne[1] == t->ne[1]);
    }
    /* llama.cpp's order: the non-layer tensors by name, then layer by layer */
    const struct wgllm_gguf_tensor *t0 = wgllm_gguf_tensor_at(b, 0);
    CHECK(wgllm_gguf_str_eq(t0->name, "output.weight"));
    /* every key kept; file type and quantization version set */
    CHECK_EQ_INT(wgllm_gguf_n_kv(b), wgllm_gguf_n_kv(a));
    for (int64_t i = 0; i < wgllm_gguf_n_kv(a); i++) {
        const struct wgllm_gguf_kv *kv = wgllm_gguf_kv_at(a, i);
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
        const struct wgllm_gguf_value *v = wgllm_gguf_find(b, key);
        CHECK(v != NULL && v->type == kv->value.type);
    }
    CHECK_EQ_INT(kv_u32(b, "general.file_type"), 15);
    CHECK_EQ_INT(kv_u32(b, "general.quantization_version"), 2);
    struct wgllm_gguf_str nm = {0};
    CHECK_EQ_INT(wgllm_gguf_get_str(b, "general.name", &nm, &err), WGLLM_STATUS_OK);
    CHECK(wgllm_gguf_str_eq(nm, "tiny"));
    const struct wgllm_gguf_value *ta = wgllm_gguf_find(a, "tokenizer.ggml.tokens");
    const struct wgllm_gguf_value *tb = wgllm_gguf_find(b, "tokenizer.ggml.tokens");
    CHECK(ta && tb && ta->v.arr.n == tb->v.arr.n && tb->v.arr.n == 32000);
    if (ta && tb && tb->v.arr.n > 100) CHECK(tb->v.arr.items[100].v.str.len == ta->v.arr.items[100].v.str.len);

    /* it runs */
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = 2;
    struct wgllm_model *m = NULL;
    CHECK_EQ_INT(wgllm_model_load(q4km, &mp, &m, &err), WGLLM_STATUS_OK);
    if (m) {
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_ctx = 64;
        struct wgllm_context *ctx = NULL;
        CHECK_EQ_INT(wgllm_context_init(m, &cp, &ctx, &err), WGLLM_STATUS_OK);
        if (ctx) {
            int32_t toks[4] = {1, 450, 4996, 17354};
            CHECK_EQ_INT(wgllm_decode(ctx, toks, 4, false, &err), WGLLM_STATUS_OK);
            const int nv = wgllm_model_n_vocab(m);
            const float *lg = wgllm_get_logits(ctx);
            bool finite = true;
            double spread = 0;
            for (int i = 0; i < nv; i++) {
                if (!isfinite(lg[i])) finite = false;
                spread = fmax(spread, fabs(lg[i] - lg[0]));
            }
            CHECK(finite);
            CHECK(spread > 1e-3); /* not a constant row */
            int32_t next = wgllm_argmax(lg, nv);
            CHECK(next >= 0 && next < nv);
            CHECK_EQ_INT(wgllm_decode(ctx, &next, 1, false, &err), WGLLM_STATUS_OK);
            wgllm_context_free(ctx);
        }
        wgllm_model_free(m);
    }
out:
    wgllm_gguf_free(a);
    wgllm_gguf_free(b);
}

TEST(requantize_refused_unless_allowed) {
    struct wgllm_error err = {0};
    char out[128];
    tpath(out, sizeof(out), "requant.gguf");
    struct wgllm_quantize_params p = wgllm_quantize_default_params();
    p.preset = "Q4_0";
    CHECK_EQ_INT(wgllm_quantize_file(q4km, out, &p, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "already quantized") != NULL);
    CHECK(access(out, F_OK) != 0); /* nothing written */
    p.allow_requantize = true;
    CHECK_EQ_INT(wgllm_quantize_file(q4km, out, &p, &err), WGLLM_STATUS_OK);
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(out, &g, &err), WGLLM_STATUS_OK);
    if (g) {
        /* output.weight is Q6_K under Q4_0 too, and already is: copied */
        const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(g, "output.weight");
        CHECK(t && t->type == WGLLM_TYPE_Q6_K);
        t = wgllm_gguf_find_tensor(g, "blk.1.ffn_down.weight");
        CHECK(t && t->type == WGLLM_TYPE_Q4_0);
        wgllm_gguf_free(g);
    }
    unlink(out);
    p.preset = "Q9_X";
    CHECK_EQ_INT(wgllm_quantize_file(f32_path, out, &p, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "Q9_X") != NULL);
}

/* A 16-layer skeleton (small zero tensors) with odd row lengths for the rules
 * that the 2-layer model cannot show. */
static bool zero_fill(int64_t index, void *buf, uint64_t size, void *user) {
    memset(buf, 0, (size_t)size);
    return true;
}

TEST(rules_on_16_layers) {
    struct wgllm_error err = {0};
    char path[128];
    tpath(path, sizeof(path), "skel.gguf");
    struct wgllm_gguf_writer *w = wgllm_gguf_writer_init();
    wgllm_gguf_writer_set_str(w, "general.architecture", "llama");
    wgllm_gguf_writer_set_u32(w, "llama.block_count", 16);
    wgllm_gguf_writer_set_u32(w, "llama.attention.head_count", 8);
    wgllm_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 8);
    char nm[64];
    const uint64_t ne_v[2] = {256, 8}, ne_down[2] = {288, 8}, ne_n[1] = {256};
    for (int l = 15; l >= 0; l--) { /* reverse order: the rules count in llama.cpp's order */
        snprintf(nm, sizeof(nm), "blk.%d.attn_v.weight", l);
        wgllm_gguf_writer_add_tensor(w, nm, WGLLM_TYPE_F32, 2, ne_v);
        snprintf(nm, sizeof(nm), "blk.%d.ffn_down.weight", l);
        wgllm_gguf_writer_add_tensor(w, nm, WGLLM_TYPE_F32, 2, ne_down);
        snprintf(nm, sizeof(nm), "blk.%d.attn_norm.weight", l);
        wgllm_gguf_writer_add_tensor(w, nm, WGLLM_TYPE_F32, 1, ne_n);
    }
    const uint64_t ne_odd[2] = {33, 4}, ne_col[2] = {256, 1};
    wgllm_gguf_writer_add_tensor(w, "token_embd.weight", WGLLM_TYPE_F32, 2, ne_v);
    wgllm_gguf_writer_add_tensor(w, "odd.weight", WGLLM_TYPE_F32, 2, ne_odd);
    wgllm_gguf_writer_add_tensor(w, "col.weight", WGLLM_TYPE_F32, 2, ne_col);
    CHECK_EQ_INT(wgllm_gguf_writer_write(w, path, zero_fill, NULL, &err), WGLLM_STATUS_OK);
    wgllm_gguf_writer_free(w);
    struct wgllm_gguf *g = NULL;
    CHECK_EQ_INT(wgllm_gguf_open(path, &g, &err), WGLLM_STATUS_OK);
    if (!g) return;
    const int64_t nt = wgllm_gguf_n_tensors(g);
    uint32_t types[64];
    int64_t order[64];
    CHECK(nt <= 64);
    for (int preset = 0; preset < 3; preset++) {
        const int ft = preset == 0 ? 15 : preset == 1 ? 12 : 17; /* Q4_K_M, Q3_K_M, Q5_K_M */
        CHECK_EQ_INT(wgllm_quantize_plan(g, ft, false, types, order, &err), WGLLM_STATUS_OK);
        for (int64_t i = 0; i < nt; i++) {
            const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
            int l = -1;
            sscanf(name, "blk.%d.", &l);
            /* use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2 */
            const bool more = l < 2 || l >= 14 || (l - 2) % 3 == 2;
            uint32_t want;
            if (strstr(name, "attn_norm") || !strcmp(name, "col.weight")) want = WGLLM_TYPE_F32; /* 1-D */
            else if (!strcmp(name, "odd.weight")) want = WGLLM_TYPE_F16; /* 33: no block fits */
            else if (!strcmp(name, "token_embd.weight")) /* tied: treated as the output */
                want = WGLLM_TYPE_Q6_K;
            else if (strstr(name, "attn_v"))
                want = ft == 12 ? (l < 2 ? WGLLM_TYPE_Q5_K : WGLLM_TYPE_Q4_K)
                       : more  ? WGLLM_TYPE_Q6_K
                       : ft == 15 ? WGLLM_TYPE_Q4_K : WGLLM_TYPE_Q5_K;
            else /* ffn_down, 288 columns: the K type falls back to its 32-block one */
                want = ft == 12 ? (l < 1 ? WGLLM_TYPE_Q5_1 : WGLLM_TYPE_Q5_0)
                       : more  ? WGLLM_TYPE_Q8_0
                       : ft == 15 ? WGLLM_TYPE_Q5_0 : WGLLM_TYPE_Q5_1;
            if (types[i] != want)
                fprintf(stderr, "  ftype %d %s: %s, want %s\n", ft, name, wgllm_type_name(types[i]), wgllm_type_name(want));
            CHECK_EQ_INT(types[i], want);
        }
        /* llama.cpp's order: non-layer tensors (by name) first, then layer 0, 1, ... */
        CHECK(wgllm_gguf_str_eq(wgllm_gguf_tensor_at(g, order[0])->name, "col.weight"));
        CHECK(wgllm_gguf_str_eq(wgllm_gguf_tensor_at(g, order[3])->name, "blk.0.attn_norm.weight"));
        CHECK(wgllm_gguf_str_eq(wgllm_gguf_tensor_at(g, order[nt - 1])->name, "blk.15.ffn_down.weight"));
    }
    /* --pure: no mix, but the fallbacks still apply */
    CHECK_EQ_INT(wgllm_quantize_plan(g, 15, true, types, order, &err), WGLLM_STATUS_OK);
    for (int64_t i = 0; i < nt; i++)
        if (wgllm_gguf_str_eq(wgllm_gguf_tensor_at(g, i)->name, "blk.15.attn_v.weight"))
            CHECK_EQ_INT(types[i], WGLLM_TYPE_Q4_K);
    CHECK_EQ_INT(wgllm_quantize_plan(g, 99, false, types, order, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    wgllm_gguf_free(g);
    unlink(path);
}

TEST(preset_names) {
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("Q4_K_M"), 15);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("q4_k"), 15);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("Q5_K_M"), 17);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("q3_k_m"), 12);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("IQ4_XS"), 30);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("bf16"), 32);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("q7_0"), -1);
    CHECK_STR(wgllm_quantize_ftype_name(15), "Q4_K_M");
    CHECK_EQ_INT(wgllm_quantize_ftype_default_type(18), WGLLM_TYPE_Q6_K);
}

/* llama.cpp's I-quant presets that need an importance matrix are refused
 * before any file is opened, saying so; by preset name and by weight type
 * alike. IQ3_S and IQ3_M (none needed) are presets. */
TEST(iquant_presets_say_why) {
    static const char *imx[] = {"IQ2_XXS", "iq2_xs", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_XS"};
    struct wgllm_quantize_params p = wgllm_quantize_default_params();
    struct wgllm_error err = {0};
    for (size_t i = 0; i < sizeof imx / sizeof *imx; i++) {
        p.preset = imx[i];
        CHECK_EQ_INT(wgllm_quantize_file("/nonexistent/in.gguf", "/nonexistent/out.gguf", &p, &err), WGLLM_STATUS_UNSUPPORTED);
        CHECK(strstr(err.message, "needs an importance matrix") != NULL);
        CHECK(strstr(err.message, "in.gguf") == NULL); /* no file was read */
    }
    p.preset = NULL;
    p.type = WGLLM_TYPE_IQ1_S;
    CHECK_EQ_INT(wgllm_quantize_file("/nonexistent/in.gguf", "/nonexistent/out.gguf", &p, &err), WGLLM_STATUS_UNSUPPORTED);
    CHECK(strstr(err.message, "IQ1_S preset needs an importance matrix") != NULL);
    p.preset = "IQ5_Q"; /* still unknown */
    CHECK_EQ_INT(wgllm_quantize_file("/nonexistent/in.gguf", "/nonexistent/out.gguf", &p, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("IQ3_S"), 26);
    CHECK_EQ_INT(wgllm_quantize_ftype_from_name("iq3_m"), 27);
    CHECK_EQ_INT(wgllm_quantize_ftype_default_type(27), WGLLM_TYPE_IQ3_S);
}

/* The presets of the new formats on the (dense, untied) tiny model:
 * MXFP4 (wgllm's own) puts every matrix but token_embd and output in MXFP4
 * and declares LLAMA_FTYPE_MOSTLY_MXFP4_MOE (38); MXFP4_MOE as llama.cpp
 * (no experts: all Q8_0); TQ1_0/TQ2_0 as llama.cpp (token_embd Q4_K, output
 * Q6_K); Q1_0 as llama.cpp (output Q6_K). Byte equality with llama.cpp's presets: tests/peer/quantize.test.mjs. */
TEST(mxfp4_and_ternary_presets) {
    static const struct { const char *preset; uint32_t ft, body, embd, out; } cases[] = {
        {"MXFP4", 38, WGLLM_TYPE_MXFP4, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0},
        {"MXFP4_MOE", 38, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q8_0},
        {"TQ1_0", 36, WGLLM_TYPE_TQ1_0, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K},
        {"TQ2_0", 37, WGLLM_TYPE_TQ2_0, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q6_K},
        {"Q1_0", 40, WGLLM_TYPE_Q1_0, WGLLM_TYPE_Q1_0, WGLLM_TYPE_Q6_K},
    };
    CHECK_STR(wgllm_quantize_ftype_name(wgllm_quantize_ftype_from_name("mxfp4")), "MXFP4");
    CHECK_EQ_INT(wgllm_quantize_ftype_default_type(wgllm_quantize_ftype_from_name("tq1_0")), WGLLM_TYPE_TQ1_0);
    char out[128];
    tpath(out, sizeof(out), "fmt.gguf");
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct wgllm_error err = {0};
        struct wgllm_quantize_params qp = wgllm_quantize_default_params();
        qp.preset = cases[c].preset;
        qp.n_threads = 2;
        CHECK_EQ_INT(wgllm_quantize_file(f32_path, out, &qp, &err), WGLLM_STATUS_OK);
        struct wgllm_gguf *g = NULL;
        CHECK_EQ_INT(wgllm_gguf_open(out, &g, &err), WGLLM_STATUS_OK);
        if (!g) continue;
        CHECK_EQ_INT(kv_u32(g, "general.file_type"), cases[c].ft);
        int n_body = 0;
        for (int64_t i = 0; i < wgllm_gguf_n_tensors(g); i++) {
            const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(g, i);
            const bool embd = wgllm_gguf_str_eq(t->name, "token_embd.weight");
            const bool outw = wgllm_gguf_str_eq(t->name, "output.weight");
            const uint32_t want = t->ne[1] == 1 ? WGLLM_TYPE_F32 : embd ? cases[c].embd : outw ? cases[c].out : cases[c].body;
            if (t->type != want)
                fprintf(stderr, "  %s %.*s: %s, want %s\n", cases[c].preset, (int)t->name.len, t->name.data,
                        wgllm_type_name(t->type), wgllm_type_name(want));
            CHECK_EQ_INT(t->type, want);
            n_body += t->ne[1] > 1 && !embd && !outw;
        }
        CHECK_EQ_INT(n_body, 14); /* 2 layers x (q, k, v, o, gate, up, down) */
        wgllm_gguf_free(g);
    }
    unlink(out);
}

int main(void) {
    wgllm_quant_init();
    snprintf(dir, sizeof(dir), "/tmp/wgllm_test_quantize_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    tpath(f32_path, sizeof(f32_path), "f32.gguf");
    tpath(q8_path, sizeof(q8_path), "synth_q8.gguf");
    tpath(ours_q8, sizeof(ours_q8), "ours_q8.gguf");
    tpath(q4km, sizeof(q4km), "q4km.gguf");
    RUN(preset_names);
    RUN(iquant_presets_say_why);
    RUN(rules_on_16_layers);
    if (make_models()) {
        RUN(q8_0_equals_synth_q8_0);
        RUN(q4_k_m_types_metadata_and_run);
        RUN(requantize_refused_unless_allowed);
        RUN(mxfp4_and_ternary_presets);
    } else {
        test_failed++;
    }
    unlink(f32_path);
    unlink(q8_path);
    unlink(ours_q8);
    unlink(q4km);
    rmdir(dir);
    return test_summary("test_quantize");
}
