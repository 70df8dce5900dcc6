/*
 * model.c - turns a validated GGUF into a wgllm_model: after model_arch.c has
 * read the architecture's hyper-parameters, every tensor is bound to its slot
 * with its shape and type checked, so the forward pass never meets a surprise.
 * Also the public model API of wgllm.h (load, free, describe).
 */
#include "model/model_internal.h"

#include "quant/quant.h"
#include "quant/repack.h"

#include <math.h>
#include <sys/mman.h>
#include <unistd.h>


bool wgllm_model_has_swa_rope(const struct wgllm_model *m) {
    const struct wgllm_hparams *hp = &m->hp;
    return hp->n_swa > 0 &&
           (hp->rope_freq_base_swa != hp->rope_freq_base || hp->rope_freq_scale_swa != hp->rope_freq_scale);
}

float wgllm_hparams_attn_temp(const struct wgllm_hparams *hp, int32_t pos) {
    if (hp->attn_temp_scale == 0.0f) return 1.0f;
    const float p = (float)pos;
    return (float)(log(floor(p / (float)hp->attn_temp_floor) + 1.0) * hp->attn_temp_scale + 1.0);
}

const float *wgllm_model_rope_factors(const struct wgllm_model *m, int n_ctx) {
    if (m->rope_freqs) return m->rope_freqs;
    return n_ctx > m->hp.n_ctx_orig ? m->rope_factors_long : m->rope_factors_short;
}

bool wgllm_model_extra_features(const struct wgllm_model *m, char *buf, size_t cap) {
    const struct wgllm_hparams *hp = &m->hp;
    const struct wgllm_layer *L0 = !hp->encoder && m->layers ? &m->layers[0] : NULL;
    const struct {
        bool on;
        const char *what;
    } f[] = {
        {hp->embd_scale != 1.0f, "scaled embeddings"},
        {hp->q_scale != 1.0f, "scaled queries"},
        {hp->post_norms, "post-attention/FFN norms"},
        {hp->ffn_act == WGLLM_FFN_GELU, "GeGLU"},
        {hp->attn_softcap > 0.0f, "attention soft-capping"},
        {hp->final_softcap > 0.0f, "final logit soft-capping"},
        {hp->n_swa > 0, "sliding-window attention"},
        {hp->rope_attn_factor != 1.0f || m->rope_factors_short || m->rope_factors_long, "LongRoPE"},
        {hp->q_scale == 1.0f && hp->kq_scale != 1.0f / sqrtf((float)hp->head_dim_k), "an attention scale of its own"},
        {hp->residual_scale != 1.0f, "scaled residuals"},
        {hp->logit_scale != 1.0f, "scaled logits"},
        {!hp->pre_norms, "no pre-norms"},
        {hp->qk_norm_whole, "q/k norms over the whole projection"},
        {hp->no_rope_step > 0, "layers without RoPE"},
        {hp->attn_temp_scale != 0.0f, "attention temperature scaling"},
        {hp->n_expert > 0, "mixture of experts"},
        {hp->encoder, "a bidirectional encoder (bert's post-LayerNorm block, no KV cache)"},
        /* gpt-oss's */
        {L0 && L0->attn_sinks, "attention sinks"},
        {L0 && L0->bo, "an attention output bias"},
        {hp->moe_softmax_weight, "experts weighted by a softmax over the chosen router logits"},
        {L0 && (L0->b_gate_inp || L0->b_gate_exps), "router and expert biases"},
        {hp->ffn_act == WGLLM_FFN_SWIGLU_OAI, "SwiGLU-OAI"},
    };
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].on) continue;
        if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", f[i].what);
        else n++;
    }
    return n > 0;
}

/* ---- tensors ----------------------------------------------------------
 * Binding runs twice: a first pass finds every tensor the architecture
 * needs and checks its shape and type against the hyper-parameters, and
 * counts the floats of the vectors (in 64 bits, checked); only then is
 * anything allocated, and the second pass converts the vectors into that
 * allocation. So no size computed from the header is trusted before the
 * tensors in the file have confirmed it, and a file whose keys promise more
 * than its tensors hold fails with the tensor's name, allocating nothing. */

struct binder {
    struct wgllm_model *m;
    bool dry;        /* first pass: check and count, write nothing */
    float *dst;      /* second pass: where the next vector goes */
    uint64_t floats; /* first pass: floats the vectors need */
};

static void shape_str(char *buf, size_t cap, const struct wgllm_gguf_tensor *t) {
    size_t n = 0;
    for (uint32_t d = 0; d < (t->n_dims ? t->n_dims : 1) && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? ", " : "[", (unsigned long long)t->ne[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* w as the found tensor t of ne1 rows of ne0 (whose shape the caller checked),
 * when wgllm computes with its type. */
static enum wgllm_status bind_found(struct binder *b, const struct wgllm_gguf_tensor *t, const char *name, int64_t ne0,
                                    int64_t ne1, struct wgllm_weight *w, struct wgllm_error *err) {
    if (!wgllm_type_supported(t->type))
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "tensor '%s' has type %s, which wgllm cannot compute with yet", name,
                               wgllm_type_name(t->type));
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_size = wgllm_row_size(t->type, ne0);
    w->data = t->data;
    snprintf(w->name, sizeof w->name, "%s", name); /* the lookup key is the tensor's name */
    w->tensor = t;
    if (!b->dry) b->m->weight_bytes += t->size;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status bind_matrix(struct binder *b, const char *name, int64_t ne0, int64_t ne1, bool required,
                                     struct wgllm_weight *w, struct wgllm_error *err) {
    memset(w, 0, sizeof(*w));
    const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(b->m->gguf, name);
    if (!t) {
        if (!required) return WGLLM_STATUS_OK;
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing tensor '%s'", name);
    }
    if (t->n_dims > 2 || t->ne[0] != (uint64_t)ne0 || t->ne[1] != (uint64_t)ne1) {
        char shape[96];
        shape_str(shape, sizeof shape, t);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld]", name,
                               shape, (long long)ne0, (long long)ne1);
    }
    return bind_found(b, t, name, ne0, ne1, w, err);
}

/* Rows [r0, r0 + n) of the fused matrix w, as a weight of its own. */
static struct wgllm_weight weight_rows(const struct wgllm_weight *w, int64_t r0, int64_t n, const char *part) {
    struct wgllm_weight v = *w;
    v.ne1 = n;
    v.offset = w->offset + (uint64_t)r0 * w->row_size;
    if (w->data) v.data = (const char *)w->data + (size_t)r0 * w->row_size;
    snprintf(v.name, sizeof v.name, "%.50s[%s]", w->name, part);
    return v;
}

/* A stack of n_expert matrices of ne1 rows of ne0 (a 3-D tensor
 * [ne0, ne1, n_expert]) as one weight of n_expert * ne1 rows. */
static enum wgllm_status bind_experts(struct binder *b, const char *name, int64_t ne0, int64_t ne1, int n_expert,
                                      struct wgllm_weight *w, struct wgllm_error *err) {
    memset(w, 0, sizeof(*w));
    const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(b->m->gguf, name);
    if (!t) return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing tensor '%s'", name);
    if (t->n_dims != 3 || t->ne[0] != (uint64_t)ne0 || t->ne[1] != (uint64_t)ne1 || t->ne[2] != (uint64_t)n_expert) {
        char shape[96];
        shape_str(shape, sizeof shape, t);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld, %d]",
                               name, shape, (long long)ne0, (long long)ne1, n_expert);
    }
    /* check_hparams and read_moe_hparams bounded both factors */
    enum wgllm_status st = bind_found(b, t, name, ne0, ne1 * n_expert, w, err);
    w->n_expert = n_expert;
    return st;
}

static enum wgllm_status bind_vector(struct binder *b, const char *name, int64_t n, bool required, float **slot,
                                     struct wgllm_error *err);

/* A mixture-of-experts FFN: the router and the stacks (llama.cpp's names);
 * the dense FFN's tensors or an old per-expert layout (ffn_gate.0.weight)
 * alongside are refused by name rather than left out. */
static enum wgllm_status bind_moe(struct binder *b, int il, struct wgllm_layer *L, struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &b->m->hp;
    const int64_t E = hp->n_embd, FE = hp->n_ff_exp;
    const int X = hp->n_expert;
    char n[96];
    enum wgllm_status st;
    /* each refused unless the layer has what it belongs to */
    const bool biases = hp->moe_softmax_weight, shexp = hp->n_ff_shexp > 0;
    static const struct {
        const char *name;
        int allowed_by; /* 0: never; 1: gpt-oss's biases; 2: a shared expert */
    } refused[] = {{"ffn_gate.weight", 0},         {"ffn_up.weight", 0},         {"ffn_down.weight", 0},
                   {"ffn_gate.0.weight", 0},       {"ffn_gate_up_exps.weight", 0}, {"exp_probs_b.bias", 0},
                   {"ffn_gate_inp.bias", 1},       {"ffn_gate_exps.bias", 1},    {"ffn_up_exps.bias", 1},
                   {"ffn_down_exps.bias", 1},      {"ffn_gate_shexp.weight", 2}, {"ffn_gate_inp_shexp.weight", 2}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if ((refused[i].allowed_by == 1 && biases) || (refused[i].allowed_by == 2 && shexp)) continue;
        snprintf(n, sizeof n, "blk.%d.%s", il, refused[i].name);
        if (wgllm_gguf_find_tensor(b->m->gguf, n))
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor '%s' is not supported in a %s "
                                   "mixture-of-experts layer yet", n, b->m->arch_name);
    }
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, il), n)
    if ((st = bind_matrix(b, NAME("ffn_gate_inp.weight"), E, X, true, &L->gate_inp, err)) ||
        (st = bind_experts(b, NAME("ffn_gate_exps.weight"), E, FE, X, &L->w_gate, err)) ||
        (st = bind_experts(b, NAME("ffn_up_exps.weight"), E, FE, X, &L->w_up, err)) ||
        (st = bind_experts(b, NAME("ffn_down_exps.weight"), FE, E, X, &L->w_down, err)))
        return st;
    /* gpt-oss: each expert's bias vectors, a [len, n_expert] tensor each */
    L->b_gate_inp = L->b_gate_exps = L->b_up_exps = L->b_down_exps = NULL;
    if (biases && ((st = bind_vector(b, NAME("ffn_gate_inp.bias"), X, true, &L->b_gate_inp, err)) ||
                   (st = bind_vector(b, NAME("ffn_gate_exps.bias"), FE * X, true, &L->b_gate_exps, err)) ||
                   (st = bind_vector(b, NAME("ffn_up_exps.bias"), FE * X, true, &L->b_up_exps, err)) ||
                   (st = bind_vector(b, NAME("ffn_down_exps.bias"), E * X, true, &L->b_down_exps, err))))
        return st;
    memset(&L->sh_gate, 0, sizeof L->sh_gate);
    memset(&L->sh_up, 0, sizeof L->sh_up);
    memset(&L->sh_down, 0, sizeof L->sh_down);
    memset(&L->sh_gate_inp, 0, sizeof L->sh_gate_inp);
    const int64_t FS = hp->n_ff_shexp;
    if (FS > 0 && ((st = bind_matrix(b, NAME("ffn_gate_shexp.weight"), E, FS, true, &L->sh_gate, err)) ||
                   (st = bind_matrix(b, NAME("ffn_up_shexp.weight"), E, FS, true, &L->sh_up, err)) ||
                   (st = bind_matrix(b, NAME("ffn_down_shexp.weight"), FS, E, true, &L->sh_down, err))))
        return st;
    /* qwen2moe's gate: a vector of n_embd, one row */
    if (FS > 0 && (st = bind_matrix(b, NAME("ffn_gate_inp_shexp.weight"), E, 1, false, &L->sh_gate_inp, err)))
        return st;
#undef NAME
    return WGLLM_STATUS_OK;
}

/* A 1-D tensor of n elements: checked in the first pass, converted to f32 at
 * b->dst (advanced by n) in the second. */
static enum wgllm_status bind_vector(struct binder *b, const char *name, int64_t n, bool required, float **slot,
                                     struct wgllm_error *err) {
    struct wgllm_model *m = b->m;
    *slot = NULL;
    const struct wgllm_gguf_tensor *t = wgllm_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required) return WGLLM_STATUS_OK;
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing tensor '%s'", name);
    }
    /* the reader bounded each tensor's element count by 2^63 already */
    const uint64_t count = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (count != (uint64_t)n) {
        char shape[96];
        shape_str(shape, sizeof shape, t);
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "tensor '%s' has shape %s, expected [%lld]", name, shape,
                               (long long)n);
    }
    const struct wgllm_type_traits *tr = wgllm_type_traits(t->type);
    if (!tr->to_float || n % tr->blck_size)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor '%s' has type %s, unsupported for a vector",
                               name, wgllm_type_name(t->type));
    if (b->dry) {
        b->floats += (uint64_t)n; /* n <= 2^30 per vector, a few per layer: no overflow */
        return WGLLM_STATUS_OK;
    }
    if (t->data) {
        tr->to_float(t->data, b->dst, n);
    } else { /* streamed: vectors are small, read them whole */
        size_t bytes;
        void *tmp = wgllm_size_from_u64(t->size, &bytes) ? malloc(bytes ? bytes : 1) : NULL;
        if (!tmp) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory reading '%s'", name);
        enum wgllm_status st = wgllm_gguf_read_tensor(m->gguf, t, 0, tmp, bytes, err);
        if (!st) tr->to_float(tmp, b->dst, n);
        free(tmp);
        if (st) return st;
    }
    *slot = b->dst;
    b->dst += n;
    m->weight_bytes += t->size;
    return WGLLM_STATUS_OK;
}

/* bert's tensors (llama.cpp's load_arch_tensors for LLM_ARCH_BERT): q/k/v as
 * three matrices or one attn_qkv (rows q, k, v), biases where the file has
 * them, LayerNorm weights and biases required. cls/cls.output (a ranking
 * head, for pooling type rank only) are not read. nomic-bert (the same
 * graph in llama.cpp): no position table (RoPE), a gate (SwiGLU), and FFN
 * biases, which llama.cpp's graph does not apply for it, refused. */
static enum wgllm_status bind_bert(struct binder *b, struct wgllm_error *err) {
    struct wgllm_model *m = b->m;
    const struct wgllm_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff, QD = (int64_t)hp->n_head * hp->head_dim_k;
    const bool nomic = m->arch == WGLLM_ARCH_NOMIC_BERT;
    struct wgllm_weight tok_embd, pos_embd, type_embd;
    float *norm, *norm_b;
    enum wgllm_status st;
    if ((st = bind_matrix(b, "token_embd.weight", E, V, true, &tok_embd, err)) ||
        (st = bind_matrix(b, "position_embd.weight", E, hp->n_ctx_train, !nomic, &pos_embd, err)) ||
        (st = bind_matrix(b, "token_types.weight", E, hp->n_token_types, false, &type_embd, err)) ||
        (st = bind_vector(b, "token_embd_norm.weight", E, true, &norm, err)) ||
        (st = bind_vector(b, "token_embd_norm.bias", E, true, &norm_b, err)))
        return st;
    const struct wgllm_weight *rows[] = {&tok_embd, &pos_embd, &type_embd};
    for (size_t i = 0; i < 3; i++)
        if (rows[i]->tensor && !wgllm_type_traits(rows[i]->type)->to_float)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "%s type %s cannot be read", rows[i]->name,
                                   wgllm_type_name(rows[i]->type));
    if (!b->dry) {
        m->tok_embd = tok_embd;
        m->pos_embd = pos_embd;
        m->type_embd = type_embd;
        m->embd_norm = norm;
        m->embd_norm_b = norm_b;
        memset(&m->output, 0, sizeof m->output); /* an encoder has no output layer */
    }
    for (int il = 0; il < hp->n_layer; il++) {
        struct wgllm_layer scratch, *L = b->dry ? &scratch : &m->layers[il];
        memset(L, 0, sizeof *L);
        char n[96];
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, il), n)
        struct wgllm_weight fused = {0};
        if ((st = bind_matrix(b, NAME("attn_qkv.weight"), E, 3 * QD, false, &fused, err))) return st;
        if (fused.tensor) {
            float *bqkv;
            L->wq = weight_rows(&fused, 0, QD, "q");
            L->wk = weight_rows(&fused, QD, QD, "k");
            L->wv = weight_rows(&fused, 2 * QD, QD, "v");
            if ((st = bind_vector(b, NAME("attn_qkv.bias"), 3 * QD, false, &bqkv, err))) return st;
            if (bqkv) L->bq = bqkv, L->bk = bqkv + QD, L->bv = bqkv + 2 * QD;
        } else if ((st = bind_matrix(b, NAME("attn_q.weight"), E, QD, true, &L->wq, err)) ||
                   (st = bind_matrix(b, NAME("attn_k.weight"), E, QD, true, &L->wk, err)) ||
                   (st = bind_matrix(b, NAME("attn_v.weight"), E, QD, true, &L->wv, err)) ||
                   (st = bind_vector(b, NAME("attn_q.bias"), QD, false, &L->bq, err)) ||
                   (st = bind_vector(b, NAME("attn_k.bias"), QD, false, &L->bk, err)) ||
                   (st = bind_vector(b, NAME("attn_v.bias"), QD, false, &L->bv, err))) {
            return st;
        }
        if ((st = bind_matrix(b, NAME("attn_output.weight"), QD, E, true, &L->wo, err)) ||
            (st = bind_vector(b, NAME("attn_output.bias"), E, false, &L->bo, err)) ||
            (st = bind_vector(b, NAME("attn_output_norm.weight"), E, true, &L->attn_out_norm, err)) ||
            (st = bind_vector(b, NAME("attn_output_norm.bias"), E, true, &L->attn_out_norm_b, err)) ||
            (st = bind_matrix(b, NAME("ffn_up.weight"), E, F, true, &L->w_up, err)) ||
            (!nomic && (st = bind_vector(b, NAME("ffn_up.bias"), F, false, &L->b_up, err))) ||
            (st = bind_matrix(b, NAME("ffn_down.weight"), F, E, true, &L->w_down, err)) ||
            (!nomic && (st = bind_vector(b, NAME("ffn_down.bias"), E, false, &L->b_down, err))) ||
            (nomic && (st = bind_matrix(b, NAME("ffn_gate.weight"), E, F, true, &L->w_gate, err))) ||
            (st = bind_vector(b, NAME("layer_output_norm.weight"), E, true, &L->layer_out_norm, err)) ||
            (st = bind_vector(b, NAME("layer_output_norm.bias"), E, true, &L->layer_out_norm_b, err)))
            return st;
        /* what llama.cpp computes for other bert-like architectures only (MoE
         * layers, jina's q/k norms, a gate in bert) or does not apply (FFN
         * biases in nomic-bert): refused by name */
        static const char *const unread_bert[] = {"ffn_gate_inp.weight", "attn_q_norm.weight", "attn_k_norm.weight",
                                                  "attn_norm_2.weight", "ffn_gate.weight", NULL};
        static const char *const unread_nomic[] = {"ffn_gate_inp.weight", "attn_q_norm.weight", "attn_k_norm.weight",
                                                   "attn_norm_2.weight", "ffn_up.bias", "ffn_down.bias", NULL};
        for (const char *const *u = nomic ? unread_nomic : unread_bert; *u; u++) {
            char un[96];
            snprintf(un, sizeof un, "blk.%d.%s", il, *u);
            if (wgllm_gguf_find_tensor(m->gguf, un))
                return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor '%s' is not supported for %s yet", un,
                                       m->arch_name);
        }
        L->rope = nomic;
#undef NAME
    }
    return WGLLM_STATUS_OK;
}

/* One pass over every tensor of the architecture (see above). In the dry
 * pass the matrices are bound into scratch copies. */
static enum wgllm_status bind_pass(struct binder *b, const struct arch_info *ai, struct wgllm_error *err) {
    struct wgllm_model *m = b->m;
    const struct wgllm_hparams *hp = &m->hp;
    /* check_hparams bounded each of these by 2^30 */
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim_k, KD = (int64_t)hp->n_head_kv * hp->head_dim_k,
                  VD = (int64_t)hp->n_head_kv * hp->head_dim_v, OD = (int64_t)hp->n_head * hp->head_dim_v;
    struct wgllm_weight tok_embd, output;
    float *output_norm, *rope_freqs;
    enum wgllm_status st;
    if (ai->encoder) return bind_bert(b, err);
    if ((st = bind_matrix(b, "token_embd.weight", E, V, true, &tok_embd, err)) ||
        (st = bind_vector(b, "output_norm.weight", E, true, &output_norm, err)) ||
        (st = bind_vector(b, "rope_freqs.weight", hp->n_rot / 2, false, &rope_freqs, err)))
        return st;
    float *short_f = NULL, *long_f = NULL;
    if (ai->longrope && ((st = bind_vector(b, "rope_factors_short.weight", hp->n_rot / 2, false, &short_f, err)) ||
                         (st = bind_vector(b, "rope_factors_long.weight", hp->n_rot / 2, false, &long_f, err))))
        return st;
    if (!b->dry) {
        m->rope_factors_short = short_f;
        m->rope_factors_long = long_f;
    }
    memset(&output, 0, sizeof output);
    if (!ai->output_always_tied && (st = bind_matrix(b, "output.weight", E, V, ai->olmo2, &output, err))) return st;
    if (!wgllm_type_traits(tok_embd.type)->to_float)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "token_embd.weight type %s cannot be read",
                               wgllm_type_name(tok_embd.type));
    if (!b->dry) {
        m->tok_embd = tok_embd;
        m->output = output.tensor ? output : tok_embd; /* tied embeddings */
        m->output_norm = output_norm;
        m->rope_freqs = rope_freqs;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        struct wgllm_layer scratch, *L = b->dry ? &scratch : &m->layers[il];
        char n[96];
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d." s, il), n)
        struct wgllm_weight fused = {0};
        if (ai->fused_qkv && (st = bind_matrix(b, NAME("attn_qkv.weight"), E, QD + KD + VD, false, &fused, err)))
            return st;
        if (fused.tensor) {
            L->wq = weight_rows(&fused, 0, QD, "q");
            L->wk = weight_rows(&fused, QD, KD, "k");
            L->wv = weight_rows(&fused, QD + KD, VD, "v");
        } else if ((st = bind_matrix(b, NAME("attn_q.weight"), E, QD, true, &L->wq, err)) ||
                   (st = bind_matrix(b, NAME("attn_k.weight"), E, KD, true, &L->wk, err)) ||
                   (st = bind_matrix(b, NAME("attn_v.weight"), E, VD, true, &L->wv, err))) {
            return st;
        }
        memset(&L->gate_inp, 0, sizeof L->gate_inp);
        if (hp->n_expert > 0) {
            if ((st = bind_moe(b, il, L, err))) return st;
        } else if (ai->fused_gate_up) {
            if ((st = bind_matrix(b, NAME("ffn_up.weight"), E, 2 * F, true, &fused, err))) return st;
            L->w_gate = weight_rows(&fused, 0, F, "gate");
            L->w_up = weight_rows(&fused, F, F, "up");
        } else if ((st = bind_matrix(b, NAME("ffn_gate.weight"), E, F, true, &L->w_gate, err)) ||
                   (st = bind_matrix(b, NAME("ffn_up.weight"), E, F, true, &L->w_up, err))) {
            return st;
        }
        L->attn_norm = L->ffn_norm = NULL;
        /* gpt-oss names its FFN's pre-norm post_attention_norm */
        if (hp->pre_norms &&
            ((st = bind_vector(b, NAME("attn_norm.weight"), E, true, &L->attn_norm, err)) ||
             (st = bind_vector(b, ai->gptoss ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"), E, true,
                               &L->ffn_norm, err))))
            return st;
        /* gpt-oss's sinks and output bias; sinks elsewhere are refused rather than left out */
        L->attn_sinks = L->bo = NULL;
        if ((st = bind_vector(b, NAME("attn_sinks.weight"), hp->n_head, ai->gptoss, &L->attn_sinks, err)) ||
            (ai->gptoss && (st = bind_vector(b, NAME("attn_output.bias"), E, true, &L->bo, err))))
            return st;
        if (L->attn_sinks && !ai->gptoss)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "tensor 'blk.%d.attn_sinks.weight': attention sinks are read for gpt-oss only, "
                                   "not %s", il, m->arch_name);
        if ((st = bind_matrix(b, NAME("attn_output.weight"), OD, E, true, &L->wo, err)) ||
            (hp->n_expert == 0 && (st = bind_matrix(b, NAME("ffn_down.weight"), F, E, true, &L->w_down, err))))
            return st;
        L->bq = L->bk = L->bv = L->q_norm = L->k_norm = L->post_attn_norm = L->post_ffn_norm = NULL;
        L->swa = wgllm_model_layer_is_swa(hp, il);
        L->rope = !(hp->no_rope_step > 0 && (il + 1) % hp->no_rope_step == 0);
        if (hp->post_norms &&
            ((st = bind_vector(b, NAME("post_attention_norm.weight"), E, true, &L->post_attn_norm, err)) ||
             (st = bind_vector(b, NAME("post_ffw_norm.weight"), E, true, &L->post_ffn_norm, err))))
            return st;
        if (ai->has_qkv_bias &&
            ((st = bind_vector(b, NAME("attn_q.bias"), QD, false, &L->bq, err)) ||
             (st = bind_vector(b, NAME("attn_k.bias"), KD, false, &L->bk, err)) ||
             (st = bind_vector(b, NAME("attn_v.bias"), VD, false, &L->bv, err))))
            return st;
        if (ai->has_qk_norm &&
            ((st = bind_vector(b, NAME("attn_q_norm.weight"), hp->qk_norm_whole ? QD : hp->head_dim_k, true,
                               &L->q_norm, err)) ||
             (st = bind_vector(b, NAME("attn_k_norm.weight"), hp->qk_norm_whole ? KD : hp->head_dim_k, true,
                               &L->k_norm, err))))
            return st;
#undef NAME
    }
    return WGLLM_STATUS_OK;
}

static enum wgllm_status bind_tensors(struct wgllm_model *m, const struct arch_info *ai, struct wgllm_error *err) {
    struct binder b = {.m = m, .dry = true};
    enum wgllm_status st = bind_pass(&b, ai, err);
    if (st) return st;
    /* all vectors in one allocation, of what the checked pass counted */
    m->vectors = wgllm_malloc_array(b.floats, sizeof(float));
    m->layers = wgllm_calloc_array((uint64_t)m->hp.n_layer, sizeof(struct wgllm_layer));
    if (!m->vectors || !m->layers)
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory for the model (%d layers, %llu floats)",
                               m->hp.n_layer, (unsigned long long)b.floats);
    const uint64_t floats = b.floats;
    b = (struct binder){.m = m, .dst = m->vectors};
    st = bind_pass(&b, ai, err);
    /* the file did not change between the passes: same tensors, same sizes */
    WGLLM_ASSERT(st != WGLLM_STATUS_OK || (uint64_t)(b.dst - m->vectors) == floats);
    return st;
}

static void free_repacked(struct wgllm_weight *w) {
    if (w->rp) {
        wgllm_repacked_free(w->rp);
        free(w->rp);
        w->rp = NULL;
    }
    wgllm_free_aligned(w->copy);
    w->copy = NULL;
    w->copy_panels = false;
}

int wgllm_model_matrices(struct wgllm_model *m, struct wgllm_weight **out, int cap) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct wgllm_layer *L = &m->layers[il];
        struct wgllm_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]) && n < cap; i++)
            if (ws[i]->tensor) out[n++] = ws[i]; /* bert has no gate */
    }
    if (n < cap && m->output.tensor) out[n++] = &m->output; /* an encoder has none */
    return n;
}

static void model_release(struct wgllm_model *m) {
    if (m->layers) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            struct wgllm_layer *L = &m->layers[il];
            struct wgllm_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) free_repacked(ws[i]);
        }
    }
    free_repacked(&m->output);
    pthread_mutex_destroy(&m->cpu_mu);
    free(m->vectors);
    free(m->layers);
    wgllm_vocab_free(m->vocab);
    wgllm_gguf_free(m->gguf);
    memset(m, 0, sizeof(*m));
}

enum wgllm_status wgllm_model_init_from_gguf(struct wgllm_gguf *g, struct wgllm_model *m,
                                             struct wgllm_error *err) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->cpu_mu, NULL); /* before any failure: model_release destroys it */
    m->gguf = g;
    enum wgllm_status st = wgllm_vocab_init(g, &m->vocab, err);
    if (st) {
        model_release(m);
        return st;
    }
    struct wgllm_gguf_str arch = {0};
    if (!wgllm_gguf_find(g, "general.architecture")) {
        st = wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing metadata key 'general.architecture'");
    } else if (!(st = wgllm_gguf_get_str(g, "general.architecture", &arch, err))) {
        snprintf(m->arch_name, sizeof(m->arch_name), "%.*s", (int)WGLLM_MIN(arch.len, 31), arch.data);
    }
    if (st) {
        model_release(m);
        return st;
    }
    struct wgllm_gguf_str name = {0};
    if (wgllm_gguf_find(g, "general.name") && !wgllm_gguf_get_str(g, "general.name", &name, NULL))
        snprintf(m->name, sizeof(m->name), "%.*s", (int)WGLLM_MIN(name.len, 127), name.data);
    /* A vocabulary-only file (no tensors) still tokenizes. */
    if (wgllm_gguf_n_tensors(g) == 0) {
        m->vocab_only = true;
        m->hp.n_vocab = wgllm_vocab_n_tokens(m->vocab);
        return WGLLM_STATUS_OK;
    }
    const struct arch_info *ai = wgllm_arch_find(m->arch_name);
    if (!ai) {
        char list[512];
        wgllm_arch_list(list, sizeof list);
        st = wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)",
                             m->arch_name, list);
    } else {
        m->arch = ai->arch;
        if (!(st = wgllm_model_read_hparams(m, ai, err))) st = bind_tensors(m, ai, err);
    }
    if (st) model_release(m);
    return st;
}

/* ---- weight preparation -------------------------------------------------- */

void wgllm_model_release_pages(const struct wgllm_model *m, const struct wgllm_weight *w) {
    (void)m;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t data = (uintptr_t)w->data, size = w->row_size * (size_t)w->ne1;
    uintptr_t lo = (data + page - 1) & ~(page - 1), hi = (data + size) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint64_t wgllm_model_repacked_bytes(struct wgllm_model *m) {
    pthread_mutex_lock(&m->cpu_mu);
    const uint64_t n = m->repacked_bytes;
    pthread_mutex_unlock(&m->cpu_mu);
    return n;
}

/* Reads every weight in, so loading shows progress and the first token does
 * not pay for page faults. Backend-specific layouts (the CPU's repack) are
 * made by the backend when a context of it is created, not here. */
static enum wgllm_status prepare_weights(struct wgllm_model *m, const struct wgllm_model_params *p,
                                         struct wgllm_error *err) {
    enum { CAP = 4096 };
    struct wgllm_weight **mats = malloc(CAP * sizeof(*mats));
    if (!mats) return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    const int n = wgllm_model_matrices(m, mats, CAP);
    enum wgllm_status st = WGLLM_STATUS_OK;
    volatile unsigned char sink = 0;
    for (int i = 0; i < n && !st; i++) {
        const struct wgllm_weight *w = mats[i];
        const size_t bytes = w->row_size * (size_t)w->ne1;
        const unsigned char *d = w->data;
        for (size_t off = 0; off < bytes; off += 4096) sink ^= d[off];
        if (p->progress && !p->progress(0.99f * (float)(i + 1) / (float)n, p->progress_user_data))
            st = wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "load cancelled");
    }
    (void)sink;
    free(mats);
    return st;
}

/* ---- public API ------------------------------------------------------- */

struct wgllm_model_params wgllm_model_default_params(void) {
    struct wgllm_model_params p = {0};
    return p;
}

/* The part of loading after the file is open: takes g (freed on failure);
 * `name` prefixes error messages. */
static enum wgllm_status model_load_gguf(struct wgllm_gguf *g, const char *name, const struct wgllm_model_params *p,
                                         struct wgllm_model **out, struct wgllm_error *err) {
    struct wgllm_model *m = calloc(1, sizeof(*m));
    if (!m) {
        wgllm_gguf_free(g);
        return wgllm_error_set(err, WGLLM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    enum wgllm_status st = wgllm_model_init_from_gguf(g, m, err);
    if (st) {
        free(m);
        wgllm_error_prefix(err, "%s: ", name);
        return st;
    }
    m->n_threads = p->n_threads > 0 ? p->n_threads : wgllm_n_cores();
    /* streamed weights are read when a backend uploads them, not here */
    if (!m->vocab_only && !wgllm_model_streamed(m)) {
        st = prepare_weights(m, p, err);
        if (st) {
            wgllm_model_free(m);
            wgllm_error_prefix(err, "%s: ", name);
            return st;
        }
    }
    if (p->progress) p->progress(1.0f, p->progress_user_data);
    *out = m;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status load_begin(const struct wgllm_model_params *params, struct wgllm_model_params *p,
                                    struct wgllm_error *err) {
    wgllm_base_init();
    wgllm_quant_init();
    *p = params ? *params : wgllm_model_default_params();
    if (p->progress && !p->progress(0.0f, p->progress_user_data))
        return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "load cancelled");
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_model_load(const char *path, const struct wgllm_model_params *params,
                                   struct wgllm_model **out, struct wgllm_error *err) {
    *out = NULL;
    wgllm_error_clear(err);
    if (!path) return wgllm_error_set(err, WGLLM_STATUS_INVALID_ARGUMENT, "no model path given");
    struct wgllm_model_params p;
    enum wgllm_status st = load_begin(params, &p, err);
    if (st) return st;
    struct wgllm_gguf *g;
    st = p.stream_weights ? wgllm_gguf_open_unmapped(path, &g, err) : wgllm_gguf_open(path, &g, err);
    if (st) return st; /* the reader's messages start with the file's path */
    return model_load_gguf(g, path, &p, out, err);
}

enum wgllm_status wgllm_model_load_source(const struct wgllm_model_source *src, const char *name,
                                          const struct wgllm_model_params *params, struct wgllm_model **out,
                                          struct wgllm_error *err) {
    *out = NULL;
    wgllm_error_clear(err);
    struct wgllm_model_params p;
    enum wgllm_status st = load_begin(params, &p, err);
    if (st) return st;
    struct wgllm_gguf *g;
    if ((st = wgllm_gguf_open_source(src, &g, err))) return st; /* messages name the file already */
    return model_load_gguf(g, name ? name : "model", &p, out, err);
}

enum wgllm_status wgllm_weight_read(const struct wgllm_model *m, const struct wgllm_weight *w, uint64_t offset,
                                    void *dst, size_t n, struct wgllm_error *err) {
    return wgllm_gguf_read_tensor(m->gguf, w->tensor, w->offset + offset, dst, n, err);
}

void wgllm_model_free(struct wgllm_model *m) {
    if (!m) return;
    model_release(m);
    free(m);
}

int wgllm_model_n_vocab(const struct wgllm_model *m) { return m->hp.n_vocab; }
int wgllm_model_n_ctx_train(const struct wgllm_model *m) { return m->hp.n_ctx_train; }
int wgllm_model_n_embd(const struct wgllm_model *m) { return m->hp.n_embd; }
int wgllm_model_n_layer(const struct wgllm_model *m) { return m->hp.n_layer; }
const char *wgllm_model_arch(const struct wgllm_model *m) { return m->arch_name; }
uint64_t wgllm_model_size(const struct wgllm_model *m) { return m->weight_bytes; }

static uint64_t decode_bytes_of(const struct wgllm_weight *w, int used) {
    const uint64_t b = (uint64_t)w->ne1 * w->row_size;
    return w->n_expert > 0 ? b / (uint64_t)w->n_expert * (uint64_t)used : b;
}

uint64_t wgllm_model_decode_bytes(const struct wgllm_model *m) {
    const struct wgllm_hparams *hp = &m->hp;
    const int used = hp->n_expert_used > 0 ? hp->n_expert_used : 1;
    uint64_t b = m->tok_embd.row_size; /* one row of the table */
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                           &L->gate_inp, &L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_gate_inp};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) b += decode_bytes_of(ws[i], used);
    }
    return b + decode_bytes_of(&m->output, used); /* tied: a copy of tok_embd's view */
}

static uint64_t fnv1a_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A weight's identity: its shape and type, and bytes sampled at its start,
 * middle and end (hashing every byte of a multi-GB model would cost seconds
 * at each load; two different models that agree on every sample do not
 * occur in practice). */
static uint64_t fingerprint_weight(uint64_t h, const struct wgllm_model *m, const struct wgllm_weight *w) {
    if (!w->tensor) return h; /* a slot the architecture does not have (bert's gate and output) */
    const uint64_t meta[4] = {w->type, (uint64_t)w->ne0, (uint64_t)w->ne1, w->row_size};
    h = fnv1a_bytes(h, meta, sizeof meta);
    /* 64-bit offsets: a streamed matrix may be larger than a 32-bit size_t */
    const uint64_t total = (uint64_t)w->row_size * (uint64_t)w->ne1; /* the tensor's size, or the view's */
    const size_t n = (size_t)WGLLM_MIN(total, (uint64_t)256);
    const uint64_t at[3] = {0, total / 2 - WGLLM_MIN(total / 2, (uint64_t)n / 2), total - n};
    unsigned char sample[256];
    for (int i = 0; i < 3; i++) {
        /* a streamed weight whose file cannot be read any more hashes as all-ones */
        if (wgllm_weight_read(m, w, at[i], sample, n, NULL)) memset(sample, 0xff, n);
        h = fnv1a_bytes(h, sample, n);
    }
    return h;
}

static uint64_t fingerprint_of(const struct wgllm_model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a_bytes(h, m->arch_name, strlen(m->arch_name));
    const struct wgllm_hparams *hp = &m->hp;
    const int64_t dims[] = {hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->head_dim_v,
                            hp->n_ff, hp->n_vocab, hp->n_rot, hp->rope_type};
    h = fnv1a_bytes(h, dims, sizeof dims);
    const float f[] = {hp->rope_freq_base, hp->rope_freq_scale, hp->rms_eps};
    h = fnv1a_bytes(h, f, sizeof f);
    if (wgllm_model_extra_features(m, NULL, 0)) { /* only then: llama-block fingerprints stay as they were */
        const float g[] = {hp->embd_scale, hp->q_scale, hp->kq_scale, hp->attn_softcap, hp->final_softcap,
                           hp->rope_freq_base_swa, hp->rope_freq_scale_swa, (float)hp->n_swa, (float)hp->swa_period};
        h = fnv1a_bytes(h, g, sizeof g);
    }
    if (hp->residual_scale != 1.0f || hp->logit_scale != 1.0f || !hp->pre_norms || hp->qk_norm_whole ||
        hp->no_rope_step > 0) { /* granite, olmo2, smollm3: what the gemma block above does not cover */
        const float g[] = {hp->residual_scale, hp->logit_scale, (float)hp->pre_norms, (float)hp->qk_norm_whole,
                           (float)hp->no_rope_step};
        h = fnv1a_bytes(h, g, sizeof g);
    }
    if (hp->n_expert > 0) {
        const int g[] = {hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->moe_norm_w, hp->n_ff_shexp};
        h = fnv1a_bytes(h, g, sizeof g);
    }
    if (hp->moe_softmax_weight || hp->ffn_act == WGLLM_FFN_SWIGLU_OAI) { /* gpt-oss */
        const int g[] = {hp->moe_softmax_weight, (int)hp->ffn_act};
        h = fnv1a_bytes(h, g, sizeof g);
    }
    if (hp->yarn_ext_factor != 0.0f || hp->attn_temp_scale != 0.0f) { /* YaRN, mistral3 */
        const float g[] = {hp->yarn_ext_factor, hp->yarn_beta_fast, hp->yarn_beta_slow, hp->yarn_attn_factor,
                           (float)hp->n_ctx_orig, hp->attn_temp_scale, (float)hp->attn_temp_floor};
        h = fnv1a_bytes(h, g, sizeof g);
    }
    if (m->vocab_only) return h;
    h = fingerprint_weight(h, m, &m->tok_embd);
    h = fingerprint_weight(h, m, &m->output);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct wgllm_layer *L = &m->layers[il];
        const struct wgllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 7; j++) h = fingerprint_weight(h, m, ws[j]);
        if (L->gate_inp.ne1) h = fingerprint_weight(h, m, &L->gate_inp);
        const struct wgllm_weight *sh[4] = {&L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_gate_inp};
        for (int j = 0; j < 4; j++)
            if (sh[j]->ne1) h = fingerprint_weight(h, m, sh[j]);
        /* olmo2 has no attention pre-norm: its post-norm stands for it */
        const float *norm = L->attn_norm ? L->attn_norm : L->post_attn_norm ? L->post_attn_norm : L->attn_out_norm;
        h = fnv1a_bytes(h, norm, sizeof(float) * (size_t)hp->n_embd);
    }
    return h;
}

uint64_t wgllm_model_fingerprint(const struct wgllm_model *m) {
    struct wgllm_model *mm = (struct wgllm_model *)m; /* a cache, not a change of the model */
    uint64_t h = atomic_load(&mm->fingerprint);
    if (h) return h;
    h = fingerprint_of(m);
    if (!h) h = 1; /* 0 means "not computed" */
    atomic_store(&mm->fingerprint, h);
    return h;
}

#define APPEND(...)                                                                      \
    do {                                                                                 \
        int k_ = snprintf(buf + WGLLM_MIN((size_t)len, size), size > (size_t)len ? size - (size_t)len : 0, \
                          __VA_ARGS__);                                                  \
        if (k_ > 0) len += k_;                                                           \
    } while (0)

int wgllm_model_describe(const struct wgllm_model *m, char *buf, size_t size) {
    int len = 0;
    if (size) buf[0] = 0;
    const struct wgllm_hparams *hp = &m->hp;
    APPEND("name:          %s\n", m->name[0] ? m->name : "(none)");
    APPEND("architecture:  %s%s\n", m->arch_name, m->vocab_only ? " (vocabulary only)" : "");
    APPEND("gguf:          version %u, %d file(s), %llu bytes, %lld tensors, %lld metadata keys\n",
           wgllm_gguf_version(m->gguf), wgllm_gguf_n_splits(m->gguf),
           (unsigned long long)wgllm_gguf_file_size(m->gguf), (long long)wgllm_gguf_n_tensors(m->gguf),
           (long long)wgllm_gguf_n_kv(m->gguf));
    static const char *const vt[] = {"none", "SentencePiece (llama)", "byte-level BPE (gpt2)", "WordPiece (bert)"};
    APPEND("vocabulary:    %d tokens, %s, bos %d, eos %d\n", hp->n_vocab, vt[wgllm_vocab_type(m->vocab)],
           wgllm_vocab_bos(m->vocab), wgllm_vocab_eos(m->vocab));
    if (m->vocab_only) return len;
    APPEND("layers:        %d\n", hp->n_layer);
    APPEND("embedding:     %d\n", hp->n_embd);
    APPEND("heads:         %d (kv %d), head dim %d/%d\n", hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->head_dim_v);
    APPEND("feed-forward:  %d\n", hp->n_ff);
    APPEND("context:       %d (training)\n", hp->n_ctx_train);
    if (!m->pos_embd.tensor) /* bert's positions are a learned table */
        APPEND("rope:          %s, %d dims, base %g, scale %g%s\n", hp->rope_type == WGLLM_ROPE_NEOX ? "neox" : "normal",
           hp->n_rot, (double)hp->rope_freq_base, (double)hp->rope_freq_scale,
           m->rope_freqs ? ", frequency factors" : "");
    if (hp->yarn_ext_factor != 0.0f)
        APPEND("yarn:          original context %d, beta fast %g / slow %g, cos/sin x%g\n", hp->n_ctx_orig,
               (double)hp->yarn_beta_fast, (double)hp->yarn_beta_slow,
               (double)(hp->yarn_attn_factor * (1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale))));
    if (hp->attn_temp_scale != 0.0f)
        APPEND("temperature:   queries x(1 + %g ln(floor(pos / %d) + 1))\n", (double)hp->attn_temp_scale,
               hp->attn_temp_floor);
    if (hp->encoder)
        APPEND("layer norm:    epsilon %g; %d token types%s\n", (double)hp->norm_eps, hp->n_token_types,
               m->type_embd.tensor ? "" : " (no token_types tensor)");
    else
        APPEND("rms epsilon:   %g\n", (double)hp->rms_eps);
    char extra[256];
    if (wgllm_model_extra_features(m, extra, sizeof extra)) APPEND("block:         %s\n", extra);
    if (hp->n_swa > 0) {
        int n_local = 0;
        for (int il = 0; il < hp->n_layer; il++) n_local += m->layers[il].swa;
        APPEND("sliding window: %d positions on %d of %d layers (period %d), local rope base %g, scale %g\n",
               hp->n_swa, n_local, hp->n_layer, hp->swa_period, (double)hp->rope_freq_base_swa,
               (double)hp->rope_freq_scale_swa);
    }
    if (hp->attn_softcap > 0.0f || hp->final_softcap > 0.0f)
        APPEND("soft-capping:  attention %g, final %g (0: none)\n", (double)hp->attn_softcap,
               (double)hp->final_softcap);
    if (hp->residual_scale != 1.0f || hp->logit_scale != 1.0f) /* granite */
        APPEND("scales:        embeddings x%g, residuals x%g, scores x%g, logits x%g\n", (double)hp->embd_scale,
               (double)hp->residual_scale, (double)hp->kq_scale, (double)hp->logit_scale);
    if (hp->no_rope_step > 0) {
        int n_rope = 0;
        for (int il = 0; il < hp->n_layer; il++) n_rope += m->layers[il].rope;
        APPEND("no RoPE:       on %d of %d layers (the last of every %d)\n", hp->n_layer - n_rope, hp->n_layer,
               hp->no_rope_step);
    }
    APPEND("output:        %s\n", hp->encoder ? "none (an encoder: embeddings only)"
                                   : m->output.tensor == m->tok_embd.tensor ? "tied to token_embd" : "separate");
    /* bytes per tensor type */
    uint64_t by_type[WGLLM_TYPE_COUNT] = {0};
    int64_t cnt[WGLLM_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < wgllm_gguf_n_tensors(m->gguf); i++) {
        const struct wgllm_gguf_tensor *t = wgllm_gguf_tensor_at(m->gguf, i);
        if (t->type < WGLLM_TYPE_COUNT) {
            by_type[t->type] += t->size;
            cnt[t->type]++;
        }
    }
    APPEND("tensor types: ");
    for (int t = 0; t < WGLLM_TYPE_COUNT; t++)
        if (cnt[t]) APPEND(" %s x%lld (%.1f MiB)", wgllm_type_name((uint32_t)t), (long long)cnt[t], by_type[t] / 1048576.0);
    APPEND("\n");
    APPEND("weights:       %.1f MiB%s\n", m->weight_bytes / 1048576.0,
           wgllm_model_streamed(m) ? " (streamed from the file: read when the WebGPU backend uploads them)" : "");
    if (hp->n_expert > 0) {
        /* what one token reads: everything but the experts it did not choose */
        uint64_t experts = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            const struct wgllm_layer *L = &m->layers[il];
            experts += L->w_gate.tensor->size + L->w_up.tensor->size + L->w_down.tensor->size;
        }
        const double unused = (double)experts * (1.0 - (double)hp->n_expert_used / hp->n_expert);
        if (hp->n_ff_shexp > 0)
            APPEND("shared expert: FFN %d on every token%s\n", hp->n_ff_shexp,
                   m->layers[0].sh_gate_inp.ne1 ? ", gated by sigmoid(ffn_gate_inp_shexp . x)" : "");
        APPEND("experts:       %d per layer, %d used per token, FFN %d each, weights %s; a token reads %.1f MiB "
               "of the %.1f MiB (%.0f%%)\n", hp->n_expert, hp->n_expert_used, hp->n_ff_exp,
               hp->moe_softmax_weight ? "a softmax of the chosen logits" : hp->moe_norm_w ? "renormalized" : "as routed", ((double)m->weight_bytes - unused) / 1048576.0,
               m->weight_bytes / 1048576.0, 100.0 * ((double)m->weight_bytes - unused) / (double)m->weight_bytes);
    }
    return len;
}
