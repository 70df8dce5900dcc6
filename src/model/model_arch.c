/*
 * model_arch.c - the architectures wgllm runs, as llama.cpp defines them
 * (src/models/<arch>.cpp of the release the peer binds), and their
 * hyper-parameters: every `<arch>.*` key read, defaulted and checked into
 * wgllm_hparams before model.c binds a tensor, so that no size computed from
 * them is trusted unchecked.
 */
#include "model/model_internal.h"

#include <math.h>
#include <string.h>

static const struct arch_info arch_table[] = {
    {.name = "llama", .arch = WGLLM_ARCH_LLAMA, .rope = WGLLM_ROPE_NORM, .moe = MOE_OPTIONAL},
    {.name = "mistral", .arch = WGLLM_ARCH_LLAMA, .rope = WGLLM_ROPE_NORM, .moe = MOE_OPTIONAL},
    {.name = "qwen2", .arch = WGLLM_ARCH_QWEN2, .rope = WGLLM_ROPE_NEOX, .has_qkv_bias = true},
    {.name = "qwen3", .arch = WGLLM_ARCH_QWEN3, .rope = WGLLM_ROPE_NEOX, .has_qk_norm = true},
    {.name = "gemma2", .arch = WGLLM_ARCH_GEMMA2, .rope = WGLLM_ROPE_NEOX, .gemma = true, .output_always_tied = true,
     .swa_period = 2, .swa_window = 4096, .attn_softcap = 50.0f, .final_softcap = 30.0f, .swa_rope_is_global = true,
     .big_n_layer = 46},
    {.name = "gemma3", .arch = WGLLM_ARCH_GEMMA3, .rope = WGLLM_ROPE_NEOX, .has_qk_norm = true, .gemma = true,
     .swa_period = 6, .big_n_layer = 62},
    {.name = "phi3", .arch = WGLLM_ARCH_PHI3, .rope = WGLLM_ROPE_NEOX, .fused_qkv = true, .fused_gate_up = true,
     .q_scaled = true, .longrope = true},
    {.name = "granite", .arch = WGLLM_ARCH_GRANITE, .rope = WGLLM_ROPE_NORM, .granite = true},
    {.name = "olmo2", .arch = WGLLM_ARCH_OLMO2, .rope = WGLLM_ROPE_NEOX, .has_qk_norm = true, .olmo2 = true},
    /* the step is fixed in llama.cpp (no key says it): 4 */
    {.name = "smollm3", .arch = WGLLM_ARCH_SMOLLM3, .rope = WGLLM_ROPE_NORM, .no_rope_step = 4},
    {.name = "mistral3", .arch = WGLLM_ARCH_MISTRAL3, .rope = WGLLM_ROPE_NORM, .mistral3 = true},
    {.name = "qwen3moe", .arch = WGLLM_ARCH_QWEN3MOE, .rope = WGLLM_ROPE_NEOX, .has_qk_norm = true, .moe = MOE_NORM,
     .moe_ff_key = true},
    {.name = "qwen2moe", .arch = WGLLM_ARCH_QWEN2MOE, .rope = WGLLM_ROPE_NEOX, .has_qkv_bias = true, .moe = MOE_PLAIN,
     .moe_ff_key = true, .shexp = SHEXP_GATED},
    {.name = "granitemoe", .arch = WGLLM_ARCH_GRANITEMOE, .rope = WGLLM_ROPE_NORM, .granite = true, .moe = MOE_NORM,
     .shexp = SHEXP_OPTIONAL},
    {.name = "olmoe", .arch = WGLLM_ARCH_OLMOE, .rope = WGLLM_ROPE_NEOX, .has_qk_norm = true, .qk_norm_whole = true,
     .moe = MOE_PLAIN},
    {.name = "gpt-oss", .arch = WGLLM_ARCH_GPTOSS, .rope = WGLLM_ROPE_NEOX, .has_qkv_bias = true,
     .moe = MOE_SOFTMAX_WEIGHT, .moe_ff_key = true, .swa_period = 2, .swa_rope_is_global = true, .gptoss = true},
    {.name = "bert", .arch = WGLLM_ARCH_BERT, .rope = WGLLM_ROPE_NORM, .encoder = true},
    {.name = "nomic-bert", .arch = WGLLM_ARCH_NOMIC_BERT, .rope = WGLLM_ROPE_NEOX, .encoder = true},
};
#define N_ARCHS (sizeof(arch_table) / sizeof(arch_table[0]))

const char *wgllm_arch_name(enum wgllm_arch arch) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (arch_table[i].arch == arch) return arch_table[i].name;
    return "unknown";
}

const struct arch_info *wgllm_arch_find(const char *name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

void wgllm_arch_list(char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < N_ARCHS && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", arch_table[i].name);
}

/* ---- hyper-parameters ------------------------------------------------- */

/* Reads `<arch>.<suffix>` as u32 into *out; keeps *out when absent and !required. */
static enum wgllm_status get_arch_u32(const struct wgllm_model *m, const char *suffix,
                                      bool required, int *out, struct wgllm_error *err) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->arch_name, suffix);
    if (!wgllm_gguf_find(m->gguf, key)) {
        if (!required) return WGLLM_STATUS_OK;
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing metadata key '%s'", key);
    }
    uint32_t v;
    enum wgllm_status st = wgllm_gguf_get_u32(m->gguf, key, &v, err);
    if (st) return st;
    if (v > (1u << 30))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "metadata '%s' = %u is out of range", key, v);
    *out = (int)v;
    return WGLLM_STATUS_OK;
}

static enum wgllm_status get_arch_f32(const struct wgllm_model *m, const char *suffix,
                                      float *out, struct wgllm_error *err) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->arch_name, suffix);
    if (!wgllm_gguf_find(m->gguf, key)) return WGLLM_STATUS_OK;
    return wgllm_gguf_get_f32(m->gguf, key, out, err);
}

/* Largest dimension any weight may have; the per-key limit of get_arch_u32. */
#define MODEL_MAX_DIM ((uint64_t)1 << 30)
/* Tensors every layer has at least (attn_norm, q/k/v fused, output, ffn_norm,
 * gate/up fused, down: phi3's six). */
#define MODEL_TENSORS_PER_LAYER 6

/* What the keys imply, before anything is sized from them: products of two
 * keys (checked in 64 bits) stay within one dimension's range, and the layer
 * count is one the file's tensors can cover, so that a header claiming 2^30
 * layers is refused here instead of allocating per-layer state for them. */
static enum wgllm_status check_hparams(const struct wgllm_model *m, struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &m->hp;
    const char *a = m->arch_name;
    const struct {
        const char *what;
        int x, y;
    } prods[] = {
        {"head_count x key_length", hp->n_head, hp->head_dim_k},
        {"head_count_kv x key_length", hp->n_head_kv, hp->head_dim_k},
        {"head_count_kv x value_length", hp->n_head_kv, hp->head_dim_v},
        {"head_count x value_length", hp->n_head, hp->head_dim_v},
    };
    for (size_t i = 0; i < sizeof prods / sizeof prods[0]; i++) {
        uint64_t p;
        if (wgllm_mul_overflow((uint64_t)prods[i].x, (uint64_t)prods[i].y, &p) || p > MODEL_MAX_DIM)
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "%s.attention.%s = %d x %d is more than %llu", a, prods[i].what, prods[i].x,
                                   prods[i].y, (unsigned long long)MODEL_MAX_DIM);
    }
    const int64_t n_tensors = wgllm_gguf_n_tensors(m->gguf);
    if ((uint64_t)hp->n_layer * MODEL_TENSORS_PER_LAYER > (uint64_t)n_tensors)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "%s.block_count = %d needs at least %llu tensors (%d per layer), but the file has "
                               "%lld",
                               a, hp->n_layer, (unsigned long long)hp->n_layer * MODEL_TENSORS_PER_LAYER,
                               MODEL_TENSORS_PER_LAYER, (long long)n_tensors);
    if (hp->n_ctx_train <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.context_length = %d must be positive", a,
                               hp->n_ctx_train);
    if (hp->n_vocab <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "the model has no vocabulary (tokenizer.ggml.tokens, or %s.vocab_size for a 'none' "
                               "tokenizer)", a);
    return WGLLM_STATUS_OK;
}

/* Keys whose presence means a model wgllm cannot run, or that must agree
 * with what is read elsewhere. */
static enum wgllm_status check_arch_keys(const struct wgllm_model *m, struct wgllm_error *err) {
    enum wgllm_status st;
    int vocab_size = -1;
    if ((st = get_arch_u32(m, "vocab_size", false, &vocab_size, err))) return st;
    /* only a tokenizer's token list can disagree: a `none` tokenizer has none */
    if (vocab_size >= 0 && wgllm_vocab_type(m->vocab) != WGLLM_VOCAB_TYPE_NONE &&
        vocab_size != wgllm_vocab_n_tokens(m->vocab))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "%s.vocab_size = %d but tokenizer.ggml.tokens has %d entries", m->arch_name,
                               vocab_size, wgllm_vocab_n_tokens(m->vocab));
    return WGLLM_STATUS_OK;
}

/* A soft-capping value: > 0 and finite, or 0 (none) where zero_ok. */
static enum wgllm_status check_cap(const struct wgllm_model *m, const char *suffix, float v, bool zero_ok,
                                   struct wgllm_error *err) {
    if (isfinite(v) && (v > 0.0f || (zero_ok && v == 0.0f))) return WGLLM_STATUS_OK;
    return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.%s = %g must be a positive number%s", m->arch_name,
                           suffix, (double)v, zero_ok ? " (or 0: none)" : "");
}

/* Keys of llama.cpp's SWA variants (gemma3n/gemma4) that change the local
 * layers' geometry: wgllm computes every layer with the global one, so a
 * file that says otherwise is refused by name. */
static enum wgllm_status check_swa_geometry(const struct wgllm_model *m, struct wgllm_error *err) {
    const struct wgllm_hparams *hp = &m->hp;
    const struct {
        const char *suffix;
        int same_as;
    } keys[] = {{"attention.key_length_swa", hp->head_dim_k},
                {"attention.value_length_swa", hp->head_dim_v},
                {"rope.dimension_count_swa", hp->n_rot}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int v = keys[i].same_as;
        enum wgllm_status st = get_arch_u32(m, keys[i].suffix, false, &v, err);
        if (st) return st;
        if (v != keys[i].same_as)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "%s.%s = %d differs from the global layers' %d, which wgllm does not support yet",
                                   m->arch_name, keys[i].suffix, v, keys[i].same_as);
    }
    return WGLLM_STATUS_OK;
}

/* The sliding-window layers' keys once the window is known (gemma2, gemma3,
 * gpt-oss): the pattern (a number: all but the last of each such many
 * layers are local), the local layers' RoPE base and scale (the global ones
 * where the architecture says so, else 10000 and 1, unless rope.freq_base_swa
 * says), and no geometry of their own. */
static enum wgllm_status read_swa(struct wgllm_model *m, const struct arch_info *ai, int window,
                                  struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    char key[128];
    hp->n_swa = window;
    hp->swa_period = ai->swa_period;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch_name);
    const struct wgllm_gguf_value *pv = wgllm_gguf_find(m->gguf, key);
    if (pv && pv->type == WGLLM_GGUF_TYPE_ARRAY)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "'%s' is a per-layer array, which wgllm does not support yet (a number is)", key);
    if ((st = get_arch_u32(m, "attention.sliding_window_pattern", false, &hp->swa_period, err))) return st;
    hp->rope_freq_base_swa = ai->swa_rope_is_global ? hp->rope_freq_base : 10000.0f;
    hp->rope_freq_scale_swa = ai->swa_rope_is_global ? hp->rope_freq_scale : 1.0f;
    if ((st = get_arch_f32(m, "rope.freq_base_swa", &hp->rope_freq_base_swa, err))) return st;
    if (!(hp->rope_freq_base_swa > 0.0f) || !isfinite(hp->rope_freq_base_swa))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.rope.freq_base_swa = %g must be positive",
                               m->arch_name, (double)hp->rope_freq_base_swa);
    return check_swa_geometry(m, err);
}

/* The gemma block's hyper-parameters, read as llama.cpp reads them for the
 * architecture (src/models/gemma2.cpp, gemma3.cpp). */
static enum wgllm_status read_gemma_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                            struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_act = WGLLM_FFN_GELU;
    hp->post_norms = true;
    /* the scale multiplies the queries (before they are rounded to f16 for
     * q.K, as in llama.cpp), and the softmax gets 1 */
    hp->kq_scale = 1.0f;
    hp->q_scale = hp->n_layer == ai->big_n_layer ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                                  : 1.0f / sqrtf((float)hp->head_dim_k);
    if (ai->attn_softcap > 0.0f) {
        hp->attn_softcap = ai->attn_softcap;
        if ((st = get_arch_f32(m, "attn_logit_softcapping", &hp->attn_softcap, err)) ||
            (st = check_cap(m, "attn_logit_softcapping", hp->attn_softcap, false, err)))
            return st;
    }
    hp->final_softcap = ai->final_softcap;
    if ((st = get_arch_f32(m, "final_logit_softcapping", &hp->final_softcap, err)) ||
        (st = check_cap(m, "final_logit_softcapping", hp->final_softcap, ai->final_softcap == 0.0f, err)))
        return st;

    /* sliding window: gemma2 always has one (4096 unless the key says),
     * gemma3 only when attention.sliding_window is there and > 0 */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch_name);
    const bool has_window = wgllm_gguf_find(m->gguf, key) != NULL;
    int window = ai->swa_window;
    if ((st = get_arch_u32(m, "attention.sliding_window", false, &window, err))) return st;
    if (ai->swa_window > 0 && window <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "%s = 0: a sliding window must hold at least the token itself", key);
    if (ai->swa_window > 0 || (has_window && window > 0)) return read_swa(m, ai, window, err);
    return WGLLM_STATUS_OK;
}

/* A granite scale: finite; 0 (llama.cpp: the scale is not applied) gives
 * `none`, as an absent key does unless `required`. */
static enum wgllm_status read_scale(const struct wgllm_model *m, const char *suffix, bool required, float none,
                                    float *out, struct wgllm_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    float v = 0.0f;
    enum wgllm_status st;
    if (required && !wgllm_gguf_find(m->gguf, key))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing metadata key '%s'", key);
    if ((st = get_arch_f32(m, suffix, &v, err))) return st;
    if (!isfinite(v) || (required && v == 0.0f))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s = %g must be a finite%s number", key, (double)v,
                               required ? ", non-zero" : "");
    *out = v == 0.0f ? none : v;
    return WGLLM_STATUS_OK;
}

/* Granite's hyper-parameters as llama.cpp reads and applies them: the
 * embeddings are multiplied by embedding_scale, each block's attention and
 * FFN outputs by residual_scale before their add, the scores by
 * attention.scale (instead of 1/sqrt(head_dim)), and the logits by
 * 1/logit_scale (a required key); RoPE is on unless rope.scaling.finetuned
 * is false. */
static enum wgllm_status read_granite_hparams(struct wgllm_model *m, struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    float logit = 1.0f;
    if ((st = read_scale(m, "logit_scale", true, 1.0f, &logit, err)) ||
        (st = read_scale(m, "residual_scale", false, 1.0f, &hp->residual_scale, err)) ||
        (st = read_scale(m, "embedding_scale", false, 1.0f, &hp->embd_scale, err)) ||
        (st = read_scale(m, "attention.scale", false, hp->kq_scale, &hp->kq_scale, err)))
        return st;
    hp->logit_scale = 1.0f / logit; /* as llama.cpp's ggml_scale(logits, 1.0f / f_logit_scale) */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", m->arch_name);
    bool rope = true;
    if (wgllm_gguf_find(m->gguf, key) && (st = wgllm_gguf_get_bool(m->gguf, key, &rope, err))) return st;
    if (!rope) hp->no_rope_step = 1;
    return WGLLM_STATUS_OK;
}

/* OLMo 2's block (olmo2.cpp); OLMo 3's sliding window, which llama.cpp also
 * reads for this architecture, is refused by name. */
static enum wgllm_status read_olmo2_hparams(struct wgllm_model *m, struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    int window = 0;
    enum wgllm_status st = get_arch_u32(m, "attention.sliding_window", false, &window, err);
    if (st) return st;
    if (window > 0)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s.attention.sliding_window = %d (OLMo 3's sliding window) is not supported yet",
                               m->arch_name, window);
    hp->pre_norms = false;
    hp->post_norms = true;
    hp->qk_norm_whole = true;
    return WGLLM_STATUS_OK;
}

/* gpt-oss's keys as llama.cpp reads them (openai-moe.cpp): the sliding
 * window is required, its pattern defaults to 2 (even layers local), the
 * local layers take rope.freq_base_swa where the file has it and the global
 * scale (YaRN's included) either way; the scores are scaled by
 * 1/sqrt(n_rot), which the q/k/v widths (n_head x n_rot) make the head
 * dimension, so a file whose key length differs is refused. */
static enum wgllm_status read_gptoss_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                             struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch_name);
    if (!wgllm_gguf_find(m->gguf, key))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing metadata key '%s'", key);
    int window = 0;
    if ((st = get_arch_u32(m, "attention.sliding_window", true, &window, err))) return st;
    if (window <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "%s = 0: a sliding window must hold at least the token itself", key);
    if ((st = read_swa(m, ai, window, err))) return st;
    if (hp->n_rot != hp->head_dim_k || hp->head_dim_v != hp->head_dim_k)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s with rope dimension %d, key length %d and value length %d: wgllm computes it "
                               "with all three equal only (llama.cpp sizes its heads by the rope dimension)",
                               m->arch_name, hp->n_rot, hp->head_dim_k, hp->head_dim_v);
    hp->ffn_act = WGLLM_FFN_SWIGLU_OAI;
    return WGLLM_STATUS_OK;
}

/* Tensors llama.cpp also reads for granite, olmo2 and smollm3 (a fused
 * attn_qkv, optional biases) that wgllm does not compute with for them:
 * refused by name rather than left out of the computation. */
static enum wgllm_status check_unread_tensors(const struct wgllm_model *m, struct wgllm_error *err) {
    static const char *const names[] = {"attn_qkv.weight", "attn_q.bias",    "attn_k.bias",   "attn_v.bias",
                                        "attn_output.bias", "ffn_gate.bias", "ffn_up.bias",   "ffn_down.bias"};
    for (int il = 0; il < m->hp.n_layer; il++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char n[96];
            snprintf(n, sizeof n, "blk.%d.%s", il, names[i]);
            if (wgllm_gguf_find_tensor(m->gguf, n))
                return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "tensor '%s' is not supported for %s yet", n,
                                       m->arch_name);
        }
    return WGLLM_STATUS_OK;
}

/* bert's keys as llama.cpp reads them (src/models/bert.cpp, llama-vocab.cpp):
 * the LayerNorm epsilon is required, a token type count must be given, and
 * causal attention (a key llama.cpp honours for any model) is refused by
 * name rather than computed without its mask. */
static enum wgllm_status read_bert_hparams(struct wgllm_model *m, struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    char key[128];
    enum wgllm_status st;
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", m->arch_name);
    if (!wgllm_gguf_find(m->gguf, key))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "missing metadata key '%s'", key);
    if ((st = get_arch_f32(m, "attention.layer_norm_epsilon", &hp->norm_eps, err))) return st;
    if (!(hp->norm_eps > 0.0f) || !isfinite(hp->norm_eps))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s = %g must be positive", key, (double)hp->norm_eps);
    snprintf(key, sizeof key, "%s.attention.causal", m->arch_name);
    bool causal = false;
    if (wgllm_gguf_find(m->gguf, key) && (st = wgllm_gguf_get_bool(m->gguf, key, &causal, err))) return st;
    if (causal)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s = true: a causal %s encoder is not supported yet (bidirectional attention is)", key,
                               m->arch_name);
    uint32_t types = 0;
    if (wgllm_gguf_find(m->gguf, "tokenizer.ggml.token_type_count") &&
        (st = wgllm_gguf_get_u32(m->gguf, "tokenizer.ggml.token_type_count", &types, err)))
        return st;
    if (types == 0 || types > (1u << 16))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "tokenizer.ggml.token_type_count = %u: a %s model needs 1..65536 token types", types,
                               m->arch_name);
    hp->n_token_types = (int)types;
    int moe_every = 0;
    if ((st = get_arch_u32(m, "moe_every_n_layers", false, &moe_every, err))) return st;
    if (moe_every > 0)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s.moe_every_n_layers = %d: mixture-of-experts layers are not supported yet",
                               m->arch_name, moe_every);
    if (hp->n_head_kv != hp->n_head || hp->head_dim_k != hp->head_dim_v)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s with %d key/value heads for %d heads or key length %d != value length %d is not "
                               "supported", m->arch_name, hp->n_head_kv, hp->n_head, hp->head_dim_k, hp->head_dim_v);
    hp->encoder = true;
    return WGLLM_STATUS_OK;
}

/* Layer il is a local (sliding-window) layer: of each swa_period layers all
 * but the last, every layer for a period of 0 (llama.cpp's set_swa_pattern). */
bool wgllm_model_layer_is_swa(const struct wgllm_hparams *hp, int il) {
    if (hp->n_swa <= 0) return false;
    return hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1;
}

/* The experts' counts (src/llama-model.cpp, models/<arch>.cpp): one expert
 * or none is a dense model, as llama.cpp reads it; an architecture without
 * experts in wgllm refuses a file that has them. */
static enum wgllm_status read_moe_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                          struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    int n = 0, used = 0;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_used_count", m->arch_name);
    const struct wgllm_gguf_value *uv = wgllm_gguf_find(m->gguf, key);
    if (uv && uv->type == WGLLM_GGUF_TYPE_ARRAY)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED, "'%s' varies per layer, which wgllm does not support yet",
                               key);
    if ((st = get_arch_u32(m, "expert_count", false, &n, err)) ||
        (st = get_arch_u32(m, "expert_used_count", false, &used, err)))
        return st;
    if (n <= 1) {
        if (ai->moe == MOE_NORM || ai->moe == MOE_PLAIN || ai->moe == MOE_SOFTMAX_WEIGHT)
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.expert_count = %d: %s needs experts",
                                   m->arch_name, n, m->arch_name);
        return WGLLM_STATUS_OK;
    }
    if (ai->moe == MOE_NONE)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "%s.expert_count = %d: experts are not supported for %s yet (they are for llama, "
                               "mistral, qwen3moe, qwen2moe, olmoe, granitemoe and gpt-oss)", m->arch_name, n, m->arch_name);
    /* llama.cpp's LLAMA_MAX_EXPERTS */
    if (n > 512 || used <= 0 || used > n)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "%s.expert_count = %d, expert_used_count = %d: expected 1 <= used <= count <= 512",
                               m->arch_name, n, used);
    hp->n_expert = n;
    hp->n_expert_used = used;
    hp->n_ff_exp = ai->moe_ff_key ? hp->n_ff / used : hp->n_ff;
    /* gpt-oss: the key is required (llama.cpp has no default for it) */
    if (ai->moe_ff_key && (st = get_arch_u32(m, "expert_feed_forward_length", ai->moe == MOE_SOFTMAX_WEIGHT,
                                             &hp->n_ff_exp, err)))
        return st;
    hp->n_ff_shexp = ai->shexp == SHEXP_GATED ? hp->n_ff : 0;
    if (ai->shexp && (st = get_arch_u32(m, "expert_shared_feed_forward_length", false, &hp->n_ff_shexp, err)))
        return st;
    if (ai->shexp == SHEXP_GATED && hp->n_ff_shexp <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.expert_shared_feed_forward_length = %d must be positive",
                               m->arch_name, hp->n_ff_shexp);
    if (hp->n_ff_shexp < 0 || hp->n_ff_shexp > (1 << 20))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s: shared expert feed-forward length %d is out of range",
                               m->arch_name, hp->n_ff_shexp);
    if (hp->n_ff_exp <= 0 || hp->n_ff_exp > (1 << 20))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s: expert feed-forward length %d is out of range",
                               m->arch_name, hp->n_ff_exp);
    hp->moe_norm_w = ai->moe != MOE_PLAIN && ai->moe != MOE_SOFTMAX_WEIGHT;
    hp->moe_softmax_weight = ai->moe == MOE_SOFTMAX_WEIGHT;
    return WGLLM_STATUS_OK;
}

/* YaRN's remaining constants as llama.cpp's context derives them (after
 * rope.scaling.* and the original context are read): mistral3's files may
 * move the ramp (yarn_beta_fast/slow) and correct the magnitude
 * (yarn_log_multiplier); llama.cpp reads those keys for mistral3 only. The
 * attention temperature's floor is the original context (as llama.cpp sets
 * it: no key says it). */
static enum wgllm_status read_yarn_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                           struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    float log_mul = 0.0f;
    if (ai->mistral3) {
        if ((st = get_arch_f32(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, err)) ||
            (st = get_arch_f32(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, err)) ||
            (st = get_arch_f32(m, "rope.scaling.yarn_log_multiplier", &log_mul, err)) ||
            (st = get_arch_f32(m, "attention.temperature_scale", &hp->attn_temp_scale, err)))
            return st;
        if (!isfinite(log_mul) || !isfinite(hp->attn_temp_scale))
            return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                   "%s.rope.scaling.yarn_log_multiplier = %g or attention.temperature_scale = %g "
                                   "is not finite", m->arch_name, (double)log_mul, (double)hp->attn_temp_scale);
        if (hp->attn_temp_scale != 0.0f) {
            if (hp->n_ctx_orig <= 0)
                return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                                       "%s.attention.temperature_scale needs a positive original context length",
                                       m->arch_name);
            hp->attn_temp_floor = hp->n_ctx_orig;
        }
    }
    hp->yarn_attn_factor = hp->rope_attn_factor;
    if (hp->yarn_ext_factor == 0.0f) return WGLLM_STATUS_OK;
    if (!(hp->yarn_beta_fast > 0.0f) || !(hp->yarn_beta_slow > 0.0f) || !isfinite(hp->yarn_beta_fast) ||
        !isfinite(hp->yarn_beta_slow) || hp->n_ctx_orig <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "YaRN needs positive betas and original context (%s: beta_fast %g, beta_slow %g, "
                               "original_context_length %d)", m->arch_name, (double)hp->yarn_beta_fast,
                               (double)hp->yarn_beta_slow, hp->n_ctx_orig);
    /* llama.cpp's get_mscale, then the cancellation of the magnitude its
     * kernel multiplies in again (llama-context.cpp, in float as there) */
    const float factor = 1.0f / hp->rope_freq_scale;
    const float g1 = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
    float a = g1;
    if (log_mul != 0.0f) a = g1 / (factor <= 1.0f ? 1.0f : 0.1f * log_mul * logf(factor) + 1.0f);
    a *= 1.0f / (1.0f + 0.1f * logf(factor));
    a *= hp->rope_attn_factor;
    hp->yarn_attn_factor = a;
    return WGLLM_STATUS_OK;
}

enum wgllm_status wgllm_model_read_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                          struct wgllm_error *err) {
    struct wgllm_hparams *hp = &m->hp;
    enum wgllm_status st;
    memset(hp, 0, sizeof(*hp));
    if ((st = check_arch_keys(m, err))) return st;
    hp->n_ctx_train = 2048;
    if ((st = get_arch_u32(m, "context_length", false, &hp->n_ctx_train, err)) ||
        (st = get_arch_u32(m, "embedding_length", true, &hp->n_embd, err)) ||
        (st = get_arch_u32(m, "block_count", true, &hp->n_layer, err)) ||
        (st = get_arch_u32(m, "feed_forward_length", true, &hp->n_ff, err)) ||
        (st = get_arch_u32(m, "attention.head_count", true, &hp->n_head, err)))
        return st;
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", m->arch_name);
    const struct wgllm_gguf_value *hkv = wgllm_gguf_find(m->gguf, key);
    if (hkv && hkv->type == WGLLM_GGUF_TYPE_ARRAY)
        return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                               "'%s' varies per layer, which wgllm does not support yet", key);
    hp->n_head_kv = hp->n_head;
    if ((st = get_arch_u32(m, "attention.head_count_kv", false, &hp->n_head_kv, err))) return st;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_ff <= 0)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "hyper-parameters must be positive (embedding_length %d, block_count %d, "
                               "head_count %d, head_count_kv %d, feed_forward_length %d)",
                               hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff);
    if (hp->n_head % hp->n_head_kv)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "attention.head_count %d is not a multiple of head_count_kv %d",
                               hp->n_head, hp->n_head_kv);
    hp->head_dim_k = hp->n_embd / hp->n_head;
    if ((st = get_arch_u32(m, "attention.key_length", false, &hp->head_dim_k, err))) return st;
    hp->head_dim_v = hp->head_dim_k;
    if ((st = get_arch_u32(m, "attention.value_length", false, &hp->head_dim_v, err))) return st;
    hp->n_rot = hp->head_dim_k;
    if ((st = get_arch_u32(m, "rope.dimension_count", false, &hp->n_rot, err))) return st;
    if (hp->head_dim_k <= 0 || hp->head_dim_v <= 0 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim_k ||
        hp->n_rot % 2 || hp->head_dim_k % 2)
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT,
                               "bad head geometry: key_length %d, value_length %d, rope dimension %d",
                               hp->head_dim_k, hp->head_dim_v, hp->n_rot);
    hp->rms_eps = 1e-5f;
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    if ((st = get_arch_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err)) ||
        (st = get_arch_f32(m, "rope.freq_base", &hp->rope_freq_base, err)))
        return st;
    float factor = 0.0f;
    if ((st = get_arch_f32(m, "rope.scale_linear", &factor, err))) return st;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->arch_name);
    struct wgllm_gguf_str stype = {0};
    if (wgllm_gguf_find(m->gguf, key) && (st = wgllm_gguf_get_str(m->gguf, key, &stype, err))) return st;
    if ((st = get_arch_f32(m, "rope.scaling.factor", &factor, err))) return st;
    const bool yarn = wgllm_gguf_str_eq(stype, "yarn");
    if (stype.len && !yarn && !wgllm_gguf_str_eq(stype, "none") && !wgllm_gguf_str_eq(stype, "linear")) {
        if (factor > 1.0f)
            return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                   "rope scaling type '%.*s' is not supported yet (linear, yarn and Llama 3 "
                                   "frequency factors are)", (int)stype.len, stype.data);
        factor = 0.0f;
    }
    /* llama.cpp's context turns YaRN's blend on for the type alone, whatever the factor */
    hp->yarn_ext_factor = yarn ? 1.0f : 0.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if (wgllm_gguf_str_eq(stype, "none")) factor = 0.0f;
    if (factor > 0.0f) hp->rope_freq_scale = 1.0f / factor;
    if (!(hp->rms_eps > 0.0f) || !(hp->rope_freq_base > 0.0f))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "bad rms epsilon %g or rope base %g",
                               (double)hp->rms_eps, (double)hp->rope_freq_base);
    hp->rope_type = ai->rope;
    hp->n_vocab = wgllm_vocab_n_tokens(m->vocab);
    /* a `none` tokenizer has no token list: the vocabulary is ARCH.vocab_size
     * (as llama.cpp reads it), which the output and embedding shapes then check */
    if (wgllm_vocab_type(m->vocab) == WGLLM_VOCAB_TYPE_NONE &&
        (st = get_arch_u32(m, "vocab_size", false, &hp->n_vocab, err)))
        return st;
    /* the llama block, unless the architecture says otherwise */
    hp->embd_scale = 1.0f;
    hp->q_scale = 1.0f;
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    hp->ffn_act = WGLLM_FFN_SILU;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    hp->residual_scale = 1.0f;
    hp->logit_scale = 1.0f;
    hp->pre_norms = true;
    hp->no_rope_step = ai->no_rope_step;
    if (ai->gemma && (st = read_gemma_hparams(m, ai, err))) return st;
    if (ai->granite && (st = read_granite_hparams(m, err))) return st;
    if (ai->olmo2 && (st = read_olmo2_hparams(m, err))) return st;
    if (ai->encoder && (st = read_bert_hparams(m, err))) return st;
    if (ai->gptoss && (st = read_gptoss_hparams(m, ai, err))) return st;
    if ((ai->granite || ai->olmo2 || ai->no_rope_step || ai->mistral3 ||
         ((ai->moe == MOE_NORM || ai->moe == MOE_PLAIN) && !ai->has_qkv_bias)) &&
        (st = check_unread_tensors(m, err)))
        return st;
    if (ai->q_scaled) {
        hp->q_scale = 1.0f / sqrtf((float)hp->head_dim_k);
        hp->kq_scale = 1.0f;
    }
    /* LongRoPE (Phi-3.5, Phi-3 128k): a factor on cos and sin, which
     * llama.cpp reads for every architecture (YaRN, which would change it,
     * is refused above), and the factors' switch-over length */
    hp->rope_attn_factor = 1.0f;
    if ((st = get_arch_f32(m, "rope.scaling.attn_factor", &hp->rope_attn_factor, err))) return st;
    if (!(hp->rope_attn_factor > 0.0f) || !isfinite(hp->rope_attn_factor))
        return wgllm_error_set(err, WGLLM_STATUS_BAD_FORMAT, "%s.rope.scaling.attn_factor = %g must be positive",
                               m->arch_name, (double)hp->rope_attn_factor);
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((st = get_arch_u32(m, "rope.scaling.original_context_length", false, &hp->n_ctx_orig, err))) return st;
    if ((st = read_yarn_hparams(m, ai, err))) return st;
    if ((st = read_moe_hparams(m, ai, err))) return st;
    if (ai->qk_norm_whole) hp->qk_norm_whole = true;
    if (!ai->longrope)
        for (size_t i = 0; i < 2; i++) {
            static const char *const longrope[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
            if (wgllm_gguf_find_tensor(m->gguf, longrope[i]))
                return wgllm_error_set(err, WGLLM_STATUS_UNSUPPORTED,
                                       "tensor '%s': LongRoPE factors are read for phi3 only (as llama.cpp does)",
                                       longrope[i]);
        }
    /* phi3 files carry a sliding window that llama.cpp ignores (it computes
     * every layer with full attention), so wgllm does not read it either */
    return check_hparams(m, err);
}
