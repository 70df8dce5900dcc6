/*
 * test_model.c - the CPU forward pass against an independent, naive
 * double-precision transformer written here from the architecture's
 * definition; plus batching, threading, KV-cache and error behaviour of the
 * public API on synthetic models (llama, qwen2, qwen3 shapes).
 */
#include "test.h"

#include "backend/webgpu/webgpu_internal.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "quant/gemm.h"
#include "quant/repack.h"

#include <math.h>
#include <pthread.h>

static const char *make_model(const char *shape, uint32_t type) {
    static char paths[16][512];
    static int next;
    char *p = paths[next++ % 16];
    struct wgllm_synth_params sp = wgllm_synth_default_params();
    sp.shape = shape;
    sp.type = type;
    sp.seed = 3;
    const char *path = test_synth_path(&sp);
    if (!path) return NULL;
    snprintf(p, 512, "%s", path);
    return p;
}

static struct wgllm_model *load(const char *path, int threads) {
    struct wgllm_model_params mp = wgllm_model_default_params();
    mp.n_threads = threads;
    struct wgllm_model *m = NULL;
    struct wgllm_error err;
    if (wgllm_model_load(path, &mp, &m, &err) != WGLLM_STATUS_OK) fprintf(stderr, "load: %s\n", err.message);
    return m;
}

static bool rename_key(const char *path, const char *key, const char *to);
static bool patch_f32(const char *path, const char *key, float v);
static void check_load_fails(const char *path, enum wgllm_status st, const char *what);

/* ---- naive reference ---------------------------------------------------- */

static double *deq(const struct wgllm_weight *w) {
    int64_t n = w->ne0 * w->ne1;
    float *f = malloc((size_t)n * sizeof(float));
    const struct wgllm_type_traits *tr = wgllm_type_traits(w->type);
    for (int64_t r = 0; r < w->ne1; r++) tr->to_float((const char *)w->data + r * w->row_size, f + r * w->ne0, w->ne0);
    double *d = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

/* y[r] = sum_i W[r][i] x[i] (+ b[r]) */
static void mv(const double *W, const double *x, double *y, int64_t in, int64_t out, const float *b) {
    for (int64_t r = 0; r < out; r++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++) s += W[r * in + i] * x[i];
        y[r] = s + (b ? b[r] : 0.0);
    }
}

static void rmsn(const double *x, const float *w, double *y, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * sc * (w ? w[i] : 1.0);
}

/* swa: a sliding-window layer, which rotates with its own base and scale */
static void rope(double *x, int pos, const struct wgllm_hparams *hp, const float *ff, bool swa) {
    int half = hp->n_rot / 2;
    const double base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
    const double fscale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    /* YaRN (Peng et al., 2023): the pairs whose wavelength fits more than
     * beta_fast times into the original context keep their trained angle,
     * those fitting fewer than beta_slow times are interpolated, a linear
     * ramp between; cos and sin gain 1 + 0.1 ln(scale factor) */
    double lo = 0, hi = 0, mag = hp->rope_attn_factor;
    if (hp->yarn_ext_factor != 0.0f) {
        const double dim_fast = hp->n_rot * log(hp->n_ctx_orig / (hp->yarn_beta_fast * 2 * M_PI)) / (2 * log(base));
        const double dim_slow = hp->n_rot * log(hp->n_ctx_orig / (hp->yarn_beta_slow * 2 * M_PI)) / (2 * log(base));
        lo = fmax(0, floor(dim_fast));
        hi = fmin(hp->n_rot - 1, ceil(dim_slow));
        mag = hp->yarn_attn_factor * (1 + 0.1 * log(1 / fscale));
    }
    for (int i = 0; i < half; i++) {
        double freq = pow(base, -2.0 * i / hp->n_rot) / (ff ? ff[i] : 1.0);
        double th = pos * freq * fscale;
        if (hp->yarn_ext_factor != 0.0f) {
            const double keep = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            th = th * (1 - keep) + pos * freq * keep;
        }
        /* LongRoPE's attention factor scales the rotation (llama.cpp: cos and sin) */
        double c = cos(th) * mag, s = sin(th) * mag;
        int a = hp->rope_type == WGLLM_ROPE_NEOX ? i : 2 * i, b = hp->rope_type == WGLLM_ROPE_NEOX ? i + half : 2 * i + 1;
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static double softcap(double x, double cap) { return cap > 0 ? cap * tanh(x / cap) : x; }

/* The exact GELU (tanh form): the reference does not round it to f16 as ggml does. */
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

/* gpt-oss's expert activation as OpenAI's reference code defines it
 * (alpha 1.702, limit 7): the gate clamped from above, the linear part on
 * both sides and shifted by one */
static double swiglu_oai(double gate, double up) {
    const double x = fmin(gate, 7.0), y = fmax(-7.0, fmin(up, 7.0));
    return x / (1 + exp(-1.702 * x)) * (y + 1);
}

/* A mixture-of-experts FFN as Mixtral's / Qwen3-MoE's reference code defines
 * it: x += sum over the top-k experts of the router's softmax of
 * p_e / (sum of the chosen p, when renormalized) * SwiGLU_e(h); wg/wu/wd
 * are the experts' stacks. gpt-oss's (moe_softmax_weight): the top-k of the
 * router's biased logits, weighted by their softmax, experts with biases
 * and SwiGLU-OAI. */
static void moe_reference(const struct wgllm_layer *L, const struct wgllm_hparams *hp, const double *h, double *x,
                          double *g, double *u, double *o, const double *wg, const double *wu, const double *wd) {
    const int E = hp->n_embd, X = hp->n_expert, FE = hp->n_ff_exp;
    double *wr = deq(&L->gate_inp), *p = malloc(sizeof(double) * (size_t)X);
    mv(wr, h, p, E, X, L->b_gate_inp);
    double mx = -1e300, sum = 0, wsum = 0;
    if (!hp->moe_softmax_weight) {
        for (int e = 0; e < X; e++) mx = fmax(mx, p[e]);
        for (int e = 0; e < X; e++) sum += (p[e] = exp(p[e] - mx));
        for (int e = 0; e < X; e++) p[e] /= sum;
    }
    int chosen[64];
    for (int k = 0; k < hp->n_expert_used; k++) {
        int best = -1;
        for (int e = 0; e < X; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= chosen[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        chosen[k] = best;
        wsum += p[best];
    }
    double cw[64]; /* gpt-oss: the chosen logits' softmax */
    if (hp->moe_softmax_weight) {
        double cmx = -1e300, csum = 0;
        for (int k = 0; k < hp->n_expert_used; k++) cmx = fmax(cmx, p[chosen[k]]);
        for (int k = 0; k < hp->n_expert_used; k++) csum += (cw[k] = exp(p[chosen[k]] - cmx));
        for (int k = 0; k < hp->n_expert_used; k++) cw[k] /= csum;
    }
    double *y = calloc((size_t)E, sizeof(double));
    for (int k = 0; k < hp->n_expert_used; k++) {
        const int e = chosen[k];
        const bool b = L->b_gate_exps != NULL;
        mv(wg + (size_t)e * FE * E, h, g, E, FE, b ? L->b_gate_exps + (size_t)e * FE : NULL);
        mv(wu + (size_t)e * FE * E, h, u, E, FE, b ? L->b_up_exps + (size_t)e * FE : NULL);
        for (int i = 0; i < FE; i++)
            g[i] = hp->ffn_act == WGLLM_FFN_SWIGLU_OAI ? swiglu_oai(g[i], u[i]) : g[i] / (1 + exp(-g[i])) * u[i];
        mv(wd + (size_t)e * E * FE, g, o, FE, E, b ? L->b_down_exps + (size_t)e * E : NULL);
        const double w = hp->moe_softmax_weight ? cw[k] : hp->moe_norm_w ? p[e] / wsum : p[e];
        for (int i = 0; i < E; i++) y[i] += w * o[i];
    }
    if (L->sh_gate.ne1) { /* the shared expert, gated by a sigmoid where it has a gate (qwen2moe) */
        const int FS = hp->n_ff_shexp;
        double *sg = deq(&L->sh_gate), *su = deq(&L->sh_up), *sd = deq(&L->sh_down), gate = 1;
        mv(sg, h, g, E, FS, NULL);
        mv(su, h, u, E, FS, NULL);
        for (int i = 0; i < FS; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        mv(sd, g, o, FS, E, NULL);
        if (L->sh_gate_inp.ne1) {
            double *gi = deq(&L->sh_gate_inp);
            mv(gi, h, &gate, E, 1, NULL);
            gate = 1 / (1 + exp(-gate));
            free(gi);
        }
        for (int i = 0; i < E; i++) y[i] += gate * o[i];
        free(sg), free(su), free(sd);
    }
    for (int i = 0; i < E; i++) x[i] += y[i] * hp->residual_scale; /* granitemoe's scale */
    free(wr), free(p), free(y);
}

/* logits[t][V] for tokens[0..n) by the textbook definition, in double; the
 * gemma block (scaled embeddings and queries, soft-caps, a sliding window
 * of the hp->n_swa latest positions on local layers, GeGLU, post-norms) as
 * Gemma's reference code defines it; granite's residual and logit scales,
 * olmo2's block (no pre-norms, q/k norms over the whole projection) and
 * layers without RoPE (smollm3) as their Hugging Face models do; gpt-oss's
 * attention sinks and output bias as OpenAI's reference code. */
static double *reference_forward(const struct wgllm_model *m, const int32_t *tokens, int n) {
    const struct wgllm_hparams *hp = &m->hp;
    const int E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab, dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int QD = hp->n_head * dk, KD = hp->n_head_kv * dk, VD = hp->n_head_kv * dv;
    double *emb = deq(&m->tok_embd), *out = deq(&m->output);
    /* the factors the context (n_ctx: the default, 4096 here) rotates with */
    const float *ff = wgllm_model_rope_factors(m, 4096);
    double *x = calloc((size_t)n * E, sizeof(double)), *h = malloc(sizeof(double) * (size_t)E);
    double *q = malloc(sizeof(double) * (size_t)QD), *att = malloc(sizeof(double) * (size_t)QD);
    double *K = malloc(sizeof(double) * (size_t)n * KD), *Vc = malloc(sizeof(double) * (size_t)n * VD);
    const int FF = F > hp->n_ff_exp ? F : hp->n_ff_exp; /* the dense FFN's or an expert's */
    double *g = malloc(sizeof(double) * (size_t)FF), *u = malloc(sizeof(double) * (size_t)FF), *o = malloc(sizeof(double) * (size_t)E);
    double *logits = malloc(sizeof(double) * (size_t)n * V), *sc = malloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) x[(size_t)t * E + i] = emb[(size_t)tokens[t] * E + i] * hp->embd_scale;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        double *wq = deq(&L->wq), *wk = deq(&L->wk), *wv = deq(&L->wv), *wo = deq(&L->wo);
        double *wg = deq(&L->w_gate), *wu = deq(&L->w_up), *wd = deq(&L->w_down);
        for (int t = 0; t < n; t++) { /* causal: position t sees 0..t, K/V filled as we go */
            double *xt = x + (size_t)t * E;
            if (L->attn_norm) rmsn(xt, L->attn_norm, h, E, hp->rms_eps);
            else memcpy(h, xt, sizeof(double) * (size_t)E);
            mv(wq, h, q, E, QD, L->bq);
            mv(wk, h, K + (size_t)t * KD, E, KD, L->bk);
            mv(wv, h, Vc + (size_t)t * VD, E, VD, L->bv);
            if (hp->qk_norm_whole) {
                rmsn(q, L->q_norm, q, QD, hp->rms_eps);
                rmsn(K + (size_t)t * KD, L->k_norm, K + (size_t)t * KD, KD, hp->rms_eps);
            }
            for (int hh = 0; hh < hp->n_head; hh++) {
                if (L->q_norm && !hp->qk_norm_whole) rmsn(q + hh * dk, L->q_norm, q + hh * dk, dk, hp->rms_eps);
                if (L->rope) rope(q + hh * dk, t, hp, ff, L->swa);
                /* Llama 4's attention temperature: queries past each multiple of the floor sharpen */
                const double temp = hp->attn_temp_scale != 0.0f
                                        ? 1 + hp->attn_temp_scale * log(floor((double)t / hp->attn_temp_floor) + 1)
                                        : 1.0;
                for (int d = 0; d < dk; d++) q[hh * dk + d] *= hp->q_scale * temp;
            }
            for (int hh = 0; hh < hp->n_head_kv; hh++) {
                double *kh = K + (size_t)t * KD + hh * dk;
                if (L->k_norm && !hp->qk_norm_whole) rmsn(kh, L->k_norm, kh, dk, hp->rms_eps);
                if (L->rope) rope(kh, t, hp, ff, L->swa);
            }
            for (int hh = 0; hh < hp->n_head; hh++) {
                int kvh = hh / (hp->n_head / hp->n_head_kv);
                double mx = -1e300, sum = 0;
                const int j0 = L->swa && t - hp->n_swa + 1 > 0 ? t - hp->n_swa + 1 : 0;
                for (int j = j0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < dk; d++) s += q[hh * dk + d] * K[(size_t)j * KD + kvh * dk + d];
                    sc[j] = softcap(s, hp->attn_softcap) * hp->kq_scale;
                    mx = fmax(mx, sc[j]);
                }
                /* gpt-oss's sink: one more logit in the denominator, without a value */
                const double sink = L->attn_sinks ? L->attn_sinks[hh] : -INFINITY;
                mx = fmax(mx, sink);
                for (int j = j0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
                sum += exp(sink - mx);
                for (int d = 0; d < dv; d++) {
                    double a = 0;
                    for (int j = j0; j <= t; j++) a += sc[j] / sum * Vc[(size_t)j * VD + kvh * dv + d];
                    att[hh * dv + d] = a;
                }
            }
            mv(wo, att, o, QD, E, L->bo);
            if (L->post_attn_norm) rmsn(o, L->post_attn_norm, o, E, hp->rms_eps);
            for (int i = 0; i < E; i++) xt[i] += o[i] * hp->residual_scale;
            if (L->ffn_norm) rmsn(xt, L->ffn_norm, h, E, hp->rms_eps);
            else memcpy(h, xt, sizeof(double) * (size_t)E);
            if (L->gate_inp.ne1) {
                moe_reference(L, hp, h, xt, g, u, o, wg, wu, wd);
                continue;
            }
            mv(wg, h, g, E, F, NULL);
            mv(wu, h, u, E, F, NULL);
            for (int i = 0; i < F; i++)
                g[i] = (hp->ffn_act == WGLLM_FFN_GELU ? gelu(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
            mv(wd, g, o, F, E, NULL);
            if (L->post_ffn_norm) rmsn(o, L->post_ffn_norm, o, E, hp->rms_eps);
            for (int i = 0; i < E; i++) xt[i] += o[i] * hp->residual_scale;
        }
        free(wq), free(wk), free(wv), free(wo), free(wg), free(wu), free(wd);
    }
    for (int t = 0; t < n; t++) {
        rmsn(x + (size_t)t * E, m->output_norm, h, E, hp->rms_eps);
        mv(out, h, logits + (size_t)t * V, E, V, NULL);
        for (int j = 0; j < V; j++)
            logits[(size_t)t * V + j] = softcap(logits[(size_t)t * V + j], hp->final_softcap) * hp->logit_scale;
    }
    free(emb), free(out), free(x), free(h), free(q), free(att), free(K), free(Vc), free(g), free(u), free(o), free(sc);
    return logits;
}

static void test_reference(const char *shape) {
    const char *path = make_model(shape, WGLLM_TYPE_F32);
    CHECK(path != NULL);
    if (!path) return;
    struct wgllm_model *m = load(path, 2);
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_context *c;
    CHECK_EQ_INT(wgllm_context_init(m, NULL, &c, NULL), WGLLM_STATUS_OK);
    enum { N = 24 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 7919 + 13) % m->hp.n_vocab);
    CHECK_EQ_INT(wgllm_decode(c, toks, N, true, NULL), WGLLM_STATUS_OK);
    double *ref = reference_forward(m, toks, N);
    const int V = m->hp.n_vocab;
    double max_diff = 0, sq = 0;
    int top1 = 0;
    for (int t = 0; t < N; t++) {
        const float *l = wgllm_get_logits_ith(c, t);
        int best_ref = 0;
        for (int j = 0; j < V; j++) {
            max_diff = fmax(max_diff, fabs(l[j] - ref[(size_t)t * V + j]));
            sq += ref[(size_t)t * V + j] * ref[(size_t)t * V + j];
            if (ref[(size_t)t * V + j] > ref[(size_t)t * V + best_ref]) best_ref = j;
        }
        top1 += wgllm_argmax(l, V) == best_ref;
    }
    double rms = sqrt(sq / ((double)N * V));
    fprintf(stderr, "  %s: logits rms %.2f, max |wgllm - reference| %.4f, top-1 %d/%d\n", shape, rms, max_diff, top1, N);
    /* wgllm rounds q, K, V and attention weights to f16 as llama.cpp does, so
     * it is not exact; a wrong RoPE, mask, bias or norm gives differences of
     * the order of the logits themselves. */
    CHECK(max_diff < 0.02 * rms);
    CHECK(top1 >= N - 1);
    free(ref);
    wgllm_context_free(c);
    wgllm_model_free(m);
    remove(path);
}

TEST(llama_matches_reference) { test_reference("tiny"); }
TEST(qwen2_matches_reference) { test_reference("tiny-qwen2"); }
TEST(qwen3_matches_reference) { test_reference("tiny-qwen3"); }
TEST(rope_frequency_factors_match_reference) { test_reference("tiny-ropefreqs"); }
TEST(rope_linear_scaling_matches_reference) { test_reference("tiny-ropescale"); }
TEST(rope_yarn_matches_reference) { test_reference("tiny-yarn"); }
TEST(mistral3_matches_reference) { test_reference("tiny-mistral3"); }
TEST(qwen3moe_matches_reference) { test_reference("tiny-qwen3moe"); }
TEST(mixtral_matches_reference) { test_reference("tiny-mixtral"); }
TEST(olmoe_matches_reference) { test_reference("tiny-olmoe"); }
TEST(qwen2moe_matches_reference) { test_reference("tiny-qwen2moe"); }
TEST(granitemoe_matches_reference) { test_reference("tiny-granitemoe"); }
TEST(gptoss_matches_reference) { test_reference("tiny-gptoss"); }
TEST(gemma2_matches_reference) { test_reference("tiny-gemma2"); }
TEST(gemma3_matches_reference) { test_reference("tiny-gemma3"); }
TEST(phi3_matches_reference) { test_reference("tiny-phi3"); }
TEST(phi3_longrope_short_factors_match_reference) { test_reference("tiny-phi3-longrope"); }
TEST(phi3_longrope_long_factors_match_reference) { test_reference("tiny-phi3-longctx"); }
TEST(granite_matches_reference) { test_reference("tiny-granite"); }
TEST(olmo2_matches_reference) { test_reference("tiny-olmo2"); }
TEST(smollm3_matches_reference) { test_reference("tiny-smollm3"); }

/* granite's four scales, olmo2's block and smollm3's no-RoPE layers are read
 * as llama.cpp reads them */
TEST(granite_olmo2_smollm3_hparams) {
    const char *pg = make_model("tiny-granite", WGLLM_TYPE_F32), *po = make_model("tiny-olmo2", WGLLM_TYPE_F32),
               *ps = make_model("tiny-smollm3", WGLLM_TYPE_F32);
    CHECK(pg && po && ps);
    if (!pg || !po || !ps) return;
    struct wgllm_model *m = load(pg, 1);
    CHECK(m != NULL);
    if (m) {
        const struct wgllm_hparams *hp = &m->hp;
        CHECK_EQ_INT(m->arch, WGLLM_ARCH_GRANITE);
        CHECK(hp->embd_scale == 12.0f && hp->residual_scale == 0.22f && hp->logit_scale == 1.0f / 8.0f);
        CHECK(hp->kq_scale == 0.015625f && hp->q_scale == 1.0f && hp->pre_norms && hp->no_rope_step == 0);
        for (int il = 0; il < hp->n_layer; il++) CHECK(m->layers[il].rope);
        /* the WebGPU kernels compute granite's block too (test_webgpu_model runs it) */
        char why[300] = "";
        CHECK(wgllm_webgpu_formats_ok(m, why, sizeof why));
        wgllm_model_free(m);
    }
    m = load(po, 1);
    CHECK(m != NULL);
    if (m) {
        const struct wgllm_hparams *hp = &m->hp;
        CHECK_EQ_INT(m->arch, WGLLM_ARCH_OLMO2);
        CHECK(!hp->pre_norms && hp->post_norms && hp->qk_norm_whole && hp->rope_type == WGLLM_ROPE_NEOX);
        const struct wgllm_layer *L = &m->layers[1];
        CHECK(!L->attn_norm && !L->ffn_norm && L->post_attn_norm && L->post_ffn_norm && L->q_norm && L->k_norm);
        CHECK(m->output.tensor != m->tok_embd.tensor);
        wgllm_model_free(m);
    }
    m = load(ps, 1);
    CHECK(m != NULL);
    if (m) {
        CHECK_EQ_INT(m->arch, WGLLM_ARCH_SMOLLM3);
        CHECK_EQ_INT(m->hp.no_rope_step, 4);
        for (int il = 0; il < m->hp.n_layer; il++) CHECK_EQ_INT(m->layers[il].rope, il != 3);
        wgllm_model_free(m);
    }
    /* bad or missing values name the key */
    CHECK(patch_f32(pg, "granite.residual_scale", INFINITY));
    check_load_fails(pg, WGLLM_STATUS_BAD_FORMAT, "granite.residual_scale = inf must be a finite");
    CHECK(patch_f32(pg, "granite.residual_scale", 0.0f)); /* 0: not applied, as in llama.cpp */
    m = load(pg, 1);
    CHECK(m != NULL && m->hp.residual_scale == 1.0f);
    wgllm_model_free(m);
    CHECK(patch_f32(pg, "granite.logit_scale", 0.0f));
    check_load_fails(pg, WGLLM_STATUS_BAD_FORMAT, "granite.logit_scale = 0 must be a finite, non-zero number");
    CHECK(rename_key(pg, "granite.logit_scale", "granite.logit_scalX"));
    check_load_fails(pg, WGLLM_STATUS_BAD_FORMAT, "missing metadata key 'granite.logit_scale'");
    CHECK(rename_key(po, "blk.1.post_ffw_norm.weight", "blk.1.post_ffw_norX.weight"));
    check_load_fails(po, WGLLM_STATUS_BAD_FORMAT, "missing tensor 'blk.1.post_ffw_norm.weight'");
    CHECK(rename_key(ps, "blk.0.attn_k.weight", "blk.0.attn_k.weighX"));
    check_load_fails(ps, WGLLM_STATUS_BAD_FORMAT, "missing tensor 'blk.0.attn_k.weight'");
    /* a bias llama.cpp would add, which wgllm does not compute with for these yet */
    CHECK(rename_key(ps, "blk.0.attn_k.weighX", "blk.0.attn_k.weight"));
    CHECK(rename_key(ps, "blk.0.ffn_up.weight", "blk.0.ffn_down.bias"));
    check_load_fails(ps, WGLLM_STATUS_UNSUPPORTED, "tensor 'blk.0.ffn_down.bias' is not supported for smollm3 yet");
    remove(pg);
    remove(po);
    remove(ps);
}

/* phi3's fused matrices are bound as blocks of rows (q, k, v; gate, up);
 * LongRoPE's factors follow the context size; LongRoPE factors in another
 * architecture's file and a bad attention factor are refused by name */
TEST(phi3_fused_matrices_and_longrope) {
    const char *p = make_model("tiny-phi3", WGLLM_TYPE_Q8_0);
    CHECK(p != NULL);
    if (!p) return;
    struct wgllm_model *m = load(p, 1);
    CHECK(m != NULL);
    if (m) {
        const struct wgllm_layer *L = &m->layers[1];
        const size_t row = L->wq.row_size;
        CHECK(L->wq.tensor == L->wk.tensor && L->wk.tensor == L->wv.tensor);
        CHECK_EQ_INT(L->wq.ne1, 256);
        CHECK_EQ_INT(L->wk.ne1, 128);
        CHECK_EQ_INT(L->wv.offset, (256 + 128) * row);
        CHECK((const char *)L->wv.data == (const char *)L->wq.data + (256 + 128) * row);
        CHECK(L->w_gate.tensor == L->w_up.tensor && L->w_up.offset == 512 * L->w_gate.row_size);
        CHECK(strstr(L->wk.name, "attn_qkv") != NULL);
        CHECK(m->hp.q_scale == 1.0f / sqrtf(32.0f) && m->hp.kq_scale == 1.0f);
        wgllm_model_free(m);
    }
    remove(p);
    p = make_model("tiny-phi3-longctx", WGLLM_TYPE_F32);
    CHECK(p != NULL);
    if (!p) return;
    m = load(p, 1);
    CHECK(m != NULL);
    if (m) {
        CHECK(m->rope_factors_short && m->rope_factors_long);
        CHECK_EQ_INT(m->hp.n_ctx_orig, 32);
        CHECK(m->hp.rope_attn_factor == 1.1902f);
        CHECK(wgllm_model_rope_factors(m, 32) == m->rope_factors_short); /* up to the original context */
        CHECK(wgllm_model_rope_factors(m, 33) == m->rope_factors_long);
        wgllm_model_free(m);
    }
    CHECK(patch_f32(p, "phi3.rope.scaling.attn_factor", -1.0f));
    check_load_fails(p, WGLLM_STATUS_BAD_FORMAT, "phi3.rope.scaling.attn_factor = -1");
    remove(p);
    p = make_model("tiny", WGLLM_TYPE_F32);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(rename_key(p, "blk.0.attn_output.weight", "rope_factors_long.weight"));
    check_load_fails(p, WGLLM_STATUS_UNSUPPORTED, "'rope_factors_long.weight': LongRoPE factors are read for phi3 only");
    remove(p);
}

/* ---- gemma's metadata ---------------------------------------------------- */


/* Renames a key in place (to a name of the same length). */
static bool rename_key(const char *path, const char *key, const char *to) {
    size_t len;
    char *buf = test_read_file(path, &len);
    if (!buf || strlen(to) != strlen(key)) {
        free(buf);
        return false;
    }
    char *at = memmem(buf, len, key, strlen(key));
    if (at) memcpy(at, to, strlen(to));
    FILE *f = at ? fopen(path, "wb") : NULL;
    bool ok = f && fwrite(buf, 1, len, f) == len;
    if (f) fclose(f);
    free(buf);
    return ok;
}

static bool patch_f32(const char *path, const char *key, float v) { return test_patch_key(path, key, 6, &v, 4); }
static bool patch_u32(const char *path, const char *key, uint32_t v) { return test_patch_key(path, key, 4, &v, 4); }

/* The load fails with status st and a message naming `what`. */
static void check_load_fails(const char *path, enum wgllm_status st, const char *what) {
    struct wgllm_model *m = NULL;
    struct wgllm_error err = {0};
    CHECK_EQ_INT(wgllm_model_load(path, NULL, &m, &err), st);
    CHECK(m == NULL);
    CHECK(strstr(err.message, what) != NULL);
    if (!strstr(err.message, what)) fprintf(stderr, "  message: %s\n", err.message);
    wgllm_model_free(m);
}

TEST(gemma_hparams_are_read_as_llama_cpp_reads_them) {
    const char *p2 = make_model("tiny-gemma2", WGLLM_TYPE_F32), *p3 = make_model("tiny-gemma3", WGLLM_TYPE_F32);
    CHECK(p2 && p3);
    if (!p2 || !p3) return;
    struct wgllm_model *m = load(p2, 1);
    CHECK(m != NULL);
    if (m) {
        const struct wgllm_hparams *hp = &m->hp;
        CHECK_EQ_INT(m->arch, WGLLM_ARCH_GEMMA2);
        CHECK_EQ_INT(hp->n_swa, 8);
        CHECK_EQ_INT(hp->swa_period, 2); /* the default: every other layer */
        for (int il = 0; il < hp->n_layer; il++) CHECK_EQ_INT(m->layers[il].swa, il % 2 == 0);
        CHECK(hp->attn_softcap == 5.0f && hp->final_softcap == 30.0f);
        CHECK(hp->q_scale == 1.0f / sqrtf(128.0f) && hp->kq_scale == 1.0f);
        CHECK(hp->embd_scale == 16.0f && hp->ffn_act == WGLLM_FFN_GELU && hp->post_norms);
        CHECK(hp->rope_freq_base_swa == hp->rope_freq_base); /* gemma2's local layers rotate like the rest */
        CHECK(m->layers[1].post_attn_norm && m->layers[1].post_ffn_norm && !m->layers[1].q_norm);
        CHECK(m->output.tensor == m->tok_embd.tensor);
        /* the WebGPU kernels compute gemma's block (test_webgpu_model runs it):
         * no refusal before a device is opened */
        char why[300] = "";
        CHECK(wgllm_webgpu_formats_ok(m, why, sizeof why));
        wgllm_model_free(m);
    }
    m = load(p3, 1);
    CHECK(m != NULL);
    if (m) {
        const struct wgllm_hparams *hp = &m->hp;
        CHECK_EQ_INT(hp->n_swa, 8);
        CHECK_EQ_INT(hp->swa_period, 3); /* the shape's sliding_window_pattern: 2 local layers, then a global one */
        for (int il = 0; il < hp->n_layer; il++) CHECK_EQ_INT(m->layers[il].swa, il % 3 < 2);
        CHECK(hp->attn_softcap == 0.0f && hp->final_softcap == 0.0f);
        CHECK(hp->rope_freq_base == 1e6f && hp->rope_freq_base_swa == 10000.0f && hp->rope_freq_scale_swa == 1.0f);
        CHECK(wgllm_model_has_swa_rope(m));
        CHECK(m->layers[0].q_norm && m->layers[0].k_norm && m->layers[0].post_ffn_norm);
        wgllm_model_free(m);
    }
    /* without sliding_window_pattern (its name changed), gemma3's default of
     * 5 local layers per global one: all 3 layers are local */
    CHECK(rename_key(p3, "gemma3.attention.sliding_window_pattern", "gemma3.attention.sliding_window_patterX"));
    m = load(p3, 1);
    CHECK(m != NULL);
    if (m) {
        CHECK_EQ_INT(m->hp.swa_period, 6);
        for (int il = 0; il < m->hp.n_layer; il++) CHECK(m->layers[il].swa);
        wgllm_model_free(m);
    }
    /* keys that change the computation */
    CHECK(patch_f32(p3, "gemma3.rope.freq_base", 5e5f));
    CHECK(patch_u32(p3, "gemma3.attention.sliding_window", 0)); /* 0: no sliding window at all */
    m = load(p3, 1);
    CHECK(m != NULL);
    if (m) {
        CHECK(m->hp.rope_freq_base == 5e5f && m->hp.n_swa == 0 && !m->layers[0].swa);
        CHECK(!wgllm_model_has_swa_rope(m));
        wgllm_model_free(m);
    }
    /* bad values name the key */
    CHECK(patch_f32(p2, "gemma2.attn_logit_softcapping", -1.0f));
    check_load_fails(p2, WGLLM_STATUS_BAD_FORMAT, "gemma2.attn_logit_softcapping = -1");
    CHECK(patch_f32(p2, "gemma2.attn_logit_softcapping", NAN));
    check_load_fails(p2, WGLLM_STATUS_BAD_FORMAT, "gemma2.attn_logit_softcapping");
    CHECK(patch_f32(p2, "gemma2.attn_logit_softcapping", 50.0f));
    CHECK(patch_f32(p2, "gemma2.final_logit_softcapping", 0.0f)); /* gemma2 always caps: 0 would divide by 0 */
    check_load_fails(p2, WGLLM_STATUS_BAD_FORMAT, "gemma2.final_logit_softcapping = 0");
    CHECK(patch_f32(p2, "gemma2.final_logit_softcapping", 30.0f));
    CHECK(patch_u32(p2, "gemma2.attention.sliding_window", 0));
    check_load_fails(p2, WGLLM_STATUS_BAD_FORMAT, "gemma2.attention.sliding_window = 0");
    CHECK(patch_u32(p2, "gemma2.attention.sliding_window", 8));
    m = load(p2, 1); /* restored: loads again */
    CHECK(m != NULL);
    wgllm_model_free(m);
    /* an architecture wgllm does not know: named, with the ones it does */
    size_t len;
    char *buf = test_read_file(p2, &len);
    CHECK(buf != NULL);
    if (buf) {
        char *a = memmem(buf, len, "gemma2", 6); /* general.architecture's value comes first */
        CHECK(a != NULL);
        if (a) memcpy(a, "gemmaX", 6);
        FILE *f = fopen(p2, "wb");
        if (f) {
            fwrite(buf, 1, len, f);
            fclose(f);
        }
        free(buf);
        check_load_fails(p2, WGLLM_STATUS_UNSUPPORTED, "architecture 'gemmaX' is not supported (supported: llama");
        check_load_fails(p2, WGLLM_STATUS_UNSUPPORTED, "gemma2, gemma3");
        check_load_fails(p2, WGLLM_STATUS_UNSUPPORTED, "phi3, granite, olmo2, smollm3, mistral3, qwen3moe, qwen2moe, granitemoe, olmoe, gpt-oss, bert, nomic-bert)");
    }
    remove(p2);
    remove(p3);
}

/* gpt-oss (q8_0): a prompt past the sliding window (8) in one pass, token by
 * token and in chunks of 7 (the ring wraps inside a chunk) gives the same
 * logits; `wgllm info` names its features (the WebGPU backend computes
 * them: test_webgpu_model); a file without a layer's sinks or the window is
 * refused naming them. */
TEST(gptoss_passes_agree_and_bad_files_are_refused) {
    const char *path = make_model("tiny-gptoss", WGLLM_TYPE_Q8_0);
    CHECK(path != NULL);
    if (!path) return;
    struct wgllm_model *m = load(path, 2);
    CHECK(m != NULL);
    if (!m) return;
    char why[300] = "", feats[400] = "";
    CHECK(wgllm_webgpu_formats_ok(m, why, sizeof why));
    CHECK(wgllm_model_extra_features(m, feats, sizeof feats));
    CHECK(strstr(feats, "attention sinks") != NULL && strstr(feats, "SwiGLU-OAI") != NULL);
    enum { N = 20 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = 100 + i * 37;
    const int V = wgllm_model_n_vocab(m);
    struct wgllm_context *c, *c2;
    CHECK_EQ_INT(wgllm_context_init(m, NULL, &c, NULL), WGLLM_STATUS_OK);
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_batch = 7;
    CHECK_EQ_INT(wgllm_context_init(m, &cp, &c2, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_decode(c, toks, N, true, NULL), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_decode(c2, toks, N, true, NULL), WGLLM_STATUS_OK);
    float *ref = malloc(sizeof(float) * (size_t)N * V);
    for (int t = 0; t < N; t++) memcpy(ref + (size_t)t * V, wgllm_get_logits_ith(c, t), sizeof(float) * (size_t)V);
    double md_chunks = 0, md_tokens = 0;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < V; j++) md_chunks = fmax(md_chunks, fabs(wgllm_get_logits_ith(c2, t)[j] - ref[(size_t)t * V + j]));
    wgllm_context_truncate(c, 0);
    for (int t = 0; t < N; t++) {
        CHECK_EQ_INT(wgllm_decode(c, &toks[t], 1, false, NULL), WGLLM_STATUS_OK);
        const float *l = wgllm_get_logits(c);
        for (int j = 0; j < V; j++) md_tokens = fmax(md_tokens, fabs(l[j] - ref[(size_t)t * V + j]));
    }
    fprintf(stderr, "  tiny-gptoss q8_0: max |batch - chunks of 7| %.2g, |batch - token by token| %.2g\n", md_chunks,
            md_tokens);
    CHECK(md_chunks < 1e-3 && md_tokens < 1e-3);
    free(ref);
    wgllm_context_free(c2);
    wgllm_context_free(c);
    wgllm_model_free(m);
    /* names of the same length: the tensor or key is then absent */
    CHECK(rename_key(path, "blk.1.attn_sinks.weight", "blk.1.attn_sinkz.weight"));
    check_load_fails(path, WGLLM_STATUS_BAD_FORMAT, "blk.1.attn_sinks.weight");
    CHECK(rename_key(path, "blk.1.attn_sinkz.weight", "blk.1.attn_sinks.weight"));
    CHECK(rename_key(path, "gpt-oss.attention.sliding_window", "gpt-oss.attention.sliding_windoz"));
    check_load_fails(path, WGLLM_STATUS_BAD_FORMAT, "gpt-oss.attention.sliding_window");
    remove(path);
}

/* gpt-oss's expert biases in another architecture's experts are refused by
 * name (bind_moe), not left out of the computation. */
TEST(expert_biases_outside_gptoss_are_refused) {
    const char *path = make_model("tiny-qwen3moe", WGLLM_TYPE_F32);
    CHECK(path != NULL);
    if (!path) return;
    /* a name of the same length: the q norm becomes an expert bias */
    CHECK(rename_key(path, "blk.1.attn_q_norm.weight", "blk.1.ffn_down_exps.bias"));
    check_load_fails(path, WGLLM_STATUS_UNSUPPORTED, "blk.1.ffn_down_exps.bias");
    remove(path);
}

/* ---- API behaviour ------------------------------------------------------ */

static const char *q8_path;

TEST(batch_sequential_and_threads_agree) {
    enum { N = 20 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = 100 + i * 37;
    float *ref = NULL;
    for (int threads = 1; threads <= 2; threads++) {
        struct wgllm_model *m = load(q8_path, threads);
        CHECK(m != NULL);
        if (!m) return;
        const int V = wgllm_model_n_vocab(m);
        struct wgllm_context *c;
        CHECK_EQ_INT(wgllm_context_init(m, NULL, &c, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_decode(c, toks, N, true, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_context_n_past(c), N);
        if (!ref) {
            ref = malloc(sizeof(float) * (size_t)N * V);
            for (int t = 0; t < N; t++) memcpy(ref + (size_t)t * V, wgllm_get_logits_ith(c, t), sizeof(float) * (size_t)V);
        } else { /* threads split rows, never a sum: results are identical */
            for (int t = 0; t < N; t++) CHECK(memcmp(ref + (size_t)t * V, wgllm_get_logits_ith(c, t), sizeof(float) * (size_t)V) == 0);
        }
        /* one token at a time gives the same last-position logits */
        wgllm_context_truncate(c, 0);
        CHECK_EQ_INT(wgllm_context_n_past(c), 0);
        double md = 0;
        for (int t = 0; t < N; t++) {
            CHECK_EQ_INT(wgllm_decode(c, &toks[t], 1, false, NULL), WGLLM_STATUS_OK);
            const float *l = wgllm_get_logits(c);
            for (int j = 0; j < V; j++) md = fmax(md, fabs(l[j] - ref[(size_t)t * V + j]));
        }
        CHECK(md < 1e-3);
        /* truncate and redo the tail: same logits as the first time */
        wgllm_context_truncate(c, 12);
        CHECK_EQ_INT(wgllm_decode(c, toks + 12, N - 12, false, NULL), WGLLM_STATUS_OK);
        md = 0;
        for (int j = 0; j < V; j++) md = fmax(md, fabs(wgllm_get_logits(c)[j] - ref[(size_t)(N - 1) * V + j]));
        CHECK(md < 1e-3);
        /* a prompt longer than n_batch is split into chunks */
        struct wgllm_context_params cp = wgllm_context_default_params();
        cp.n_batch = 7;
        struct wgllm_context *c2;
        CHECK_EQ_INT(wgllm_context_init(m, &cp, &c2, NULL), WGLLM_STATUS_OK);
        CHECK_EQ_INT(wgllm_decode(c2, toks, N, true, NULL), WGLLM_STATUS_OK);
        md = 0;
        for (int t = 0; t < N; t++)
            for (int j = 0; j < V; j++) md = fmax(md, fabs(wgllm_get_logits_ith(c2, t)[j] - ref[(size_t)t * V + j]));
        CHECK(md < 1e-3);
        wgllm_context_free(c2);
        wgllm_context_free(c);
        wgllm_model_free(m);
    }
    free(ref);
}

TEST(errors_leave_the_context_usable) {
    struct wgllm_model *m = load(q8_path, 2);
    CHECK(m != NULL);
    if (!m) return;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 8;
    struct wgllm_context *c;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_context_init(m, &cp, &c, &err), WGLLM_STATUS_OK);
    int32_t toks[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK_EQ_INT(wgllm_decode(c, toks, 6, false, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_decode(c, toks, 3, false, &err), WGLLM_STATUS_CONTEXT_FULL);
    CHECK(strstr(err.message, "do not fit") != NULL);
    CHECK_EQ_INT(wgllm_context_n_past(c), 6);
    int32_t bad = wgllm_model_n_vocab(m);
    CHECK_EQ_INT(wgllm_decode(c, &bad, 1, false, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(err.message, "outside the vocabulary") != NULL);
    CHECK_EQ_INT(wgllm_decode(c, toks, 2, false, &err), WGLLM_STATUS_OK);
    CHECK_EQ_INT(wgllm_context_n_past(c), 8);
    wgllm_context_free(c);
    wgllm_model_free(m);
}

TEST(bad_files_give_named_errors) {
    struct wgllm_model *m = (struct wgllm_model *)1;
    struct wgllm_error err;
    CHECK_EQ_INT(wgllm_model_load("/nonexistent/x.gguf", NULL, &m, &err), WGLLM_STATUS_IO);
    CHECK(m == NULL);
    CHECK(strstr(err.message, "/nonexistent/x.gguf") != NULL);
    /* truncated copy of a real model */
    FILE *f = fopen(q8_path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    const char *tp = test_tmp_path(".gguf");
    f = fopen(tp, "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    CHECK_EQ_INT(wgllm_model_load(tp, NULL, &m, &err), WGLLM_STATUS_BAD_FORMAT);
    CHECK(m == NULL);
    CHECK(strstr(err.message, tp) != NULL);
    remove(tp);
    free(buf);
    /* a vocabulary-only file loads, tokenizes, and refuses a context */
    CHECK_EQ_INT(wgllm_model_load(test_shared_path("vocab/ggml-vocab-llama-spm.gguf"), NULL, &m, &err), WGLLM_STATUS_OK);
    if (m) {
        int32_t t[8];
        CHECK_EQ_INT(wgllm_tokenize(m, "Hello world", 11, t, 8, true, false, &err), 3);
        CHECK_EQ_INT(t[0], 1);
        CHECK_EQ_INT(t[1], 15043);
        CHECK_EQ_INT(t[2], 3186);
        struct wgllm_context *c = (struct wgllm_context *)1;
        CHECK_EQ_INT(wgllm_context_init(m, NULL, &c, &err), WGLLM_STATUS_UNSUPPORTED);
        CHECK(c == NULL);
        wgllm_model_free(m);
    }
}

TEST(detokenizer_never_splits_utf8) {
    struct wgllm_model *m = load(q8_path, 1);
    CHECK(m != NULL);
    if (!m) return;
    const char *text = "naïve café — 東京 🙂 ok";
    int32_t toks[64];
    int n = wgllm_tokenize(m, text, strlen(text), toks, 64, false, false, NULL);
    CHECK(n > 0);
    struct wgllm_detokenizer *d = wgllm_detokenizer_init(m);
    char out[256] = {0};
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *s = wgllm_detokenizer_push(d, toks[i], &k);
        /* every chunk is complete UTF-8: it never ends inside a sequence */
        if (k) {
            unsigned char last = (unsigned char)s[k - 1];
            CHECK(last < 0x80 || (last & 0xc0) == 0x80);
            int back = 0;
            while (back < (int)k && ((unsigned char)s[k - 1 - back] & 0xc0) == 0x80) back++;
            if (back < (int)k && ((unsigned char)s[k - 1 - back] & 0x80)) {
                unsigned char lead = (unsigned char)s[k - 1 - back];
                int need = (lead & 0xe0) == 0xc0 ? 1 : (lead & 0xf0) == 0xe0 ? 2 : 3;
                CHECK_EQ_INT(back, need);
            }
        }
        memcpy(out + len, s, k);
        len += k;
    }
    size_t k;
    wgllm_detokenizer_flush(d, &k);
    CHECK_EQ_INT(k, 0);
    /* SentencePiece adds a leading space */
    CHECK_STR(out[0] == ' ' ? out + 1 : out, text);
    wgllm_detokenizer_free(d);
    wgllm_model_free(m);
}

/* The CPU's repacked copies are made by the first CPU context, not at load
 * (a WebGPU-only run never holds them), once per model however many
 * contexts, on however many threads, are created; each context computes the
 * same logits. */
struct ctx_job {
    struct wgllm_model *m;
    float *logits; /* n_vocab floats */
    int n_vocab;
    bool ok;
};

static void *make_and_decode(void *arg) {
    struct ctx_job *j = arg;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 32, cp.n_threads = 1, cp.backend = WGLLM_BACKEND_CPU;
    struct wgllm_context *c = NULL;
    struct wgllm_error err;
    const int32_t toks[] = {1, 2, 3};
    j->ok = j->logits && wgllm_context_init(j->m, &cp, &c, &err) == WGLLM_STATUS_OK && !wgllm_decode(c, toks, 3, false, &err);
    if (j->ok) memcpy(j->logits, wgllm_get_logits(c), sizeof(float) * (size_t)j->n_vocab);
    wgllm_context_free(c);
    return NULL;
}

TEST(cpu_repack_made_once_by_the_first_cpu_context) {
    struct wgllm_model *m = load(q8_path, 1);
    CHECK(m != NULL);
    if (!m) return;
    const char *no = getenv("WGLLM_NO_REPACK");
    const bool layouts = !no || !strcmp(no, "0");
    const bool supported = layouts && wgllm_repack_supported(m->layers[0].wq.type, m->layers[0].wq.ne0, m->layers[0].wq.ne1);
    /* without a repacked kernel (NEON, wasm), copied onto huge pages where there are some */
    const bool copied = layouts && !supported && wgllm_huge_pages_available();
    CHECK_EQ_INT(wgllm_model_repacked_bytes(m), 0);
    CHECK(m->layers[0].wq.rp == NULL);
    enum { N = 4 };
    static struct ctx_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct ctx_job){.m = m, .n_vocab = wgllm_model_n_vocab(m)};
        jobs[i].logits = calloc((size_t)jobs[i].n_vocab, sizeof(float));
        CHECK_EQ_INT(pthread_create(&th[i], NULL, make_and_decode, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    const uint64_t bytes = wgllm_model_repacked_bytes(m);
    CHECK(supported ? m->layers[0].wq.rp != NULL : m->layers[0].wq.rp == NULL);
    CHECK(copied ? m->layers[0].wq.copy != NULL : m->layers[0].wq.copy == NULL);
    CHECK((bytes > 0) == (supported || copied));
    for (int i = 0; i < N; i++) {
        CHECK(jobs[i].ok);
        CHECK(!memcmp(jobs[i].logits, jobs[0].logits, sizeof(float) * (size_t)jobs[0].n_vocab));
    }
    make_and_decode(&jobs[0]); /* a later context shares the copies */
    CHECK_EQ_INT(wgllm_model_repacked_bytes(m), bytes);
    for (int i = 0; i < N; i++) free(jobs[i].logits);
    wgllm_model_free(m);
}

/* Experts are repacked like the dense matrices (matmul.c repack_experts):
 * the logits of the file's layout, on a prompt that sends several tokens to
 * an expert (the mat-mat) and on a step after it (the mat-vec). */
static void decode_logits(struct wgllm_model *m, float *out, int V) {
    struct wgllm_context *c = NULL;
    CHECK_EQ_INT(wgllm_context_init(m, NULL, &c, NULL), WGLLM_STATUS_OK);
    if (!c) return;
    int32_t toks[9];
    for (int i = 0; i < 9; i++) toks[i] = (int32_t)((i * 7919 + 11) % V);
    CHECK_EQ_INT(wgllm_decode(c, toks, 9, false, NULL), WGLLM_STATUS_OK);
    memcpy(out, wgllm_get_logits(c), sizeof(float) * (size_t)V);
    int32_t next = wgllm_argmax(out, V);
    CHECK_EQ_INT(wgllm_decode(c, &next, 1, false, NULL), WGLLM_STATUS_OK);
    memcpy(out + V, wgllm_get_logits(c), sizeof(float) * (size_t)V);
    wgllm_context_free(c);
}

/* The file at path loaded twice and decoded (decode_logits): *a in the CPU's
 * layouts, *b in the file's (WGLLM_NO_REPACK); their logits (2 V floats each,
 * malloc'd) in *la, *lb. False (a failed CHECK) when a model did not load. */
static bool both_layouts(const char *path, int threads, struct wgllm_model **a, struct wgllm_model **b, float **la,
                         float **lb) {
    *a = load(path, threads), *b = load(path, threads);
    *la = *lb = NULL;
    CHECK(*a && *b);
    if (!*a || !*b) return false;
    const int V = wgllm_model_n_vocab(*a);
    *la = malloc(sizeof(float) * 2 * (size_t)V), *lb = malloc(sizeof(float) * 2 * (size_t)V);
    decode_logits(*a, *la, V);
    setenv("WGLLM_NO_REPACK", "1", 1); /* read at a model's first CPU context */
    decode_logits(*b, *lb, V);
    unsetenv("WGLLM_NO_REPACK");
    return true;
}

/* Matrices with no repacked kernel are copied as they are onto huge pages
 * (matmul.c copy_plain) where the kernel lends them: the same kernels on the
 * same bytes, so the file layout's bits exactly; experts too (expert_view
 * offsets the copy), and token_embd stays the file's. F16 where this CPU has
 * the GEMM's panel kernel is copied into that layout instead: the same
 * products summed in another order, so close to the file layout's. */
TEST(plain_copies_give_the_file_layouts_bits) {
    static const struct { const char *shape; uint32_t type; } cases[] = {
        {"tiny", WGLLM_TYPE_F16}, {"tiny", WGLLM_TYPE_MXFP4}, {"tiny-qwen3moe", WGLLM_TYPE_BF16}};
    for (int ci = 0; ci < (int)(sizeof(cases) / sizeof(cases[0])); ci++) {
        const char *path = make_model(cases[ci].shape, cases[ci].type);
        CHECK(path != NULL);
        if (!path) continue;
        struct wgllm_model *a, *b;
        float *la, *lb;
        if (both_layouts(path, 2, &a, &b, &la, &lb)) {
            const int V = wgllm_model_n_vocab(a);
            const struct wgllm_weight *w = &a->layers[0].w_down;
            CHECK(w->rp == NULL);
            CHECK(wgllm_huge_pages_available() ? w->copy != NULL : w->copy == NULL);
            CHECK(a->tok_embd.copy == NULL && b->layers[0].w_down.copy == NULL);
            if (w->copy) CHECK(wgllm_model_repacked_bytes(a) >= (uint64_t)w->row_size * (uint64_t)w->ne1);
            const int64_t rows = w->n_expert ? w->ne1 / w->n_expert : w->ne1;
            CHECK(w->copy_panels == (w->copy && wgllm_gemm_panels_supported(w->type, w->ne0, rows)));
            if (w->copy_panels) {
                double d2 = 0, r2 = 0;
                for (int i = 0; i < 2 * V; i++) d2 += (double)(la[i] - lb[i]) * (la[i] - lb[i]), r2 += (double)lb[i] * lb[i];
                fprintf(stderr, "  %s in panels: the logits differ by %.3g of their rms\n",
                        wgllm_type_name(cases[ci].type), sqrt(d2 / r2));
                /* any other summation order moves tiny's logits by about 2e-4 of their
                 * rms (the row layout's AVX2 or scalar kernels against its AVX-512 one as
                 * much), tiny-qwen3moe's more where a router near a tie picks another
                 * expert (as in the test below); a wrong row or element, by the order of
                 * the logits themselves */
                CHECK(sqrt(d2 / r2) < (w->n_expert ? 3e-2 : 1e-3));
            } else {
                CHECK(!memcmp(la, lb, sizeof(float) * 2 * (size_t)V));
            }
        }
        free(la);
        free(lb);
        wgllm_model_free(a);
        wgllm_model_free(b);
    }
}

TEST(repacked_experts_give_the_file_layouts_bits) {
    static const uint32_t types[] = {WGLLM_TYPE_Q8_0, WGLLM_TYPE_Q4_0, WGLLM_TYPE_Q4_K, WGLLM_TYPE_Q4_1, WGLLM_TYPE_Q5_1};
    for (int ti = 0; ti < (int)(sizeof(types) / sizeof(types[0])); ti++) {
        const char *path = make_model("tiny-qwen3moe", types[ti]);
        CHECK(path != NULL);
        if (!path) continue;
        struct wgllm_model *a, *b;
        float *la, *lb;
        if (both_layouts(path, 1, &a, &b, &la, &lb)) {
            const int V = wgllm_model_n_vocab(a);
            const struct wgllm_weight *g = &a->layers[0].w_gate;
            const bool supported = wgllm_repack_supported(g->type, g->ne0, g->ne1 / g->n_expert);
            if (!supported) fprintf(stderr, "  %s: no repacked kernel here\n", wgllm_type_name(types[ti]));
            CHECK(supported ? g->rp != NULL && a->layers[0].w_down.rp != NULL : g->rp == NULL);
            CHECK(b->layers[0].w_gate.rp == NULL);
            /* Q4_0's repacked kernels give its per-row kernels' bits; the others round their sums
             * in another order, which a router near a tie turns into another expert (tiny-qwen3moe
             * q8_0: 0.6% of the logits' rms), so they are held to being close; a wrong expert's
             * rows part by the order of the logits themselves */
            double d2 = 0, r2 = 0;
            for (int i = 0; i < 2 * V; i++) d2 += (double)(la[i] - lb[i]) * (la[i] - lb[i]), r2 += (double)lb[i] * lb[i];
            const double rel = sqrt(d2 / r2);
            if (rel > 0) fprintf(stderr, "  %s: the logits differ by %.3g of their rms\n", wgllm_type_name(types[ti]), rel);
            if (types[ti] == WGLLM_TYPE_Q4_0) CHECK(memcmp(la, lb, sizeof(float) * 2 * (size_t)V) == 0);
            else CHECK(rel < 3e-2);
            free(la);
            free(lb);
        }
        wgllm_model_free(a);
        wgllm_model_free(b);
    }
}

/* WGLLM_REPACK_BUDGET caps the repacked copies (the wasm heap's budget,
 * matmul.c): past it the matrices keep the file's layout. Budget 0: none
 * repacked, the file layout's bits; one matrix's worth: that one and no
 * more. */
TEST(a_repack_budget_keeps_the_rest_in_the_file_layout) {
    const char *path = make_model("tiny", WGLLM_TYPE_Q4_0);
    CHECK(path != NULL);
    if (!path) return;
    struct wgllm_model *ref = load(path, 1), *none = load(path, 1), *one = load(path, 1);
    CHECK(ref && none && one);
    if (ref && none && one) {
        const int V = wgllm_model_n_vocab(ref);
        float *lr = malloc(sizeof(float) * 2 * (size_t)V), *ln = malloc(sizeof(float) * 2 * (size_t)V),
              *lo = malloc(sizeof(float) * 2 * (size_t)V);
        setenv("WGLLM_NO_REPACK", "1", 1);
        decode_logits(ref, lr, V);
        unsetenv("WGLLM_NO_REPACK");
        setenv("WGLLM_REPACK_BUDGET", "0", 1);
        decode_logits(none, ln, V);
        const struct wgllm_weight *q = &one->layers[0].wq; /* the first matrix repack_weights meets */
        char budget[32];
        snprintf(budget, sizeof(budget), "%llu",
                 (unsigned long long)(wgllm_repack_panel_bytes(q->type, q->ne0) * (uint64_t)(q->ne1 / WGLLM_REPACK_ROWS)));
        setenv("WGLLM_REPACK_BUDGET", budget, 1);
        decode_logits(one, lo, V);
        unsetenv("WGLLM_REPACK_BUDGET");
        CHECK(none->layers[0].wq.rp == NULL && none->layers[0].w_down.rp == NULL && none->output.rp == NULL);
        if (wgllm_repack_supported(q->type, q->ne0, q->ne1)) {
            CHECK(q->rp != NULL);
            CHECK(one->layers[0].wk.rp == NULL && one->layers[1].wq.rp == NULL && one->output.rp == NULL);
        }
        CHECK(!memcmp(lr, ln, sizeof(float) * 2 * (size_t)V));
        /* one repacked matrix: its kernel may sum in another order (AVX-512), so close, not equal */
        double d2 = 0, r2 = 0;
        for (int i = 0; i < 2 * V; i++) d2 += (double)(lo[i] - lr[i]) * (lo[i] - lr[i]), r2 += (double)lr[i] * lr[i];
        CHECK(sqrt(d2 / r2) < 1e-3);
        free(lr);
        free(ln);
        free(lo);
    }
    wgllm_model_free(ref);
    wgllm_model_free(none);
    wgllm_model_free(one);
    /* a budget that is not a number of bytes: a clear error, and the next context (the variable
       fixed) prepares the weights */
    struct wgllm_model *bad = load(path, 1);
    CHECK(bad != NULL);
    if (!bad) return;
    struct wgllm_context_params cp = wgllm_context_default_params();
    cp.n_ctx = 16;
    struct wgllm_context *c = NULL;
    struct wgllm_error err = {0};
    setenv("WGLLM_REPACK_BUDGET", "12x", 1);
    CHECK_EQ_INT(wgllm_context_init(bad, &cp, &c, &err), WGLLM_STATUS_INVALID_ARGUMENT);
    CHECK(c == NULL && strstr(err.message, "WGLLM_REPACK_BUDGET '12x'") != NULL);
    unsetenv("WGLLM_REPACK_BUDGET");
    CHECK_EQ_INT(wgllm_context_init(bad, &cp, &c, &err), WGLLM_STATUS_OK);
    wgllm_context_free(c);
    wgllm_model_free(bad);
}

int main(void) {
    wgllm_base_init();
    wgllm_quant_init();
    /* a copy: make_model's names are a ring of 16 that the tests go round more than once */
    static char q8_buf[512];
    const char *q8 = make_model("tiny", WGLLM_TYPE_Q8_0);
    if (q8) q8_path = strcpy(q8_buf, q8);
    RUN(llama_matches_reference);
    RUN(a_repack_budget_keeps_the_rest_in_the_file_layout);
    RUN(qwen2_matches_reference);
    RUN(qwen3_matches_reference);
    RUN(rope_frequency_factors_match_reference);
    RUN(rope_linear_scaling_matches_reference);
    RUN(rope_yarn_matches_reference);
    RUN(mistral3_matches_reference);
    RUN(qwen3moe_matches_reference);
    RUN(repacked_experts_give_the_file_layouts_bits);
    RUN(mixtral_matches_reference);
    RUN(olmoe_matches_reference);
    RUN(qwen2moe_matches_reference);
    RUN(granitemoe_matches_reference);
    RUN(gptoss_matches_reference);
    RUN(gemma2_matches_reference);
    RUN(gemma3_matches_reference);
    RUN(phi3_matches_reference);
    RUN(phi3_longrope_short_factors_match_reference);
    RUN(phi3_longrope_long_factors_match_reference);
    RUN(granite_matches_reference);
    RUN(olmo2_matches_reference);
    RUN(smollm3_matches_reference);
    RUN(granite_olmo2_smollm3_hparams);
    RUN(phi3_fused_matrices_and_longrope);
    RUN(gemma_hparams_are_read_as_llama_cpp_reads_them);
    RUN(gptoss_passes_agree_and_bad_files_are_refused);
    RUN(expert_biases_outside_gptoss_are_refused);
    if (q8_path) {
        RUN(batch_sequential_and_threads_agree);
        RUN(errors_leave_the_context_usable);
        RUN(bad_files_give_named_errors);
        RUN(detokenizer_never_splits_utf8);
        RUN(cpu_repack_made_once_by_the_first_cpu_context);
        RUN(plain_copies_give_the_file_layouts_bits);
        remove(q8_path);
    } else {
        test_failed++;
    }
    return test_summary("test_model");
}
