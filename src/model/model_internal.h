/*
 * model_internal.h - what model.c (binding, the model API) and model_arch.c
 * (architectures, hyper-parameters) share; not for other modules.
 */
#ifndef WGLLM_MODEL_INTERNAL_H
#define WGLLM_MODEL_INTERNAL_H

#include "model/model.h"

/* What an architecture is, as llama.cpp defines it (src/models/<arch>.cpp of
 * the release the peer binds): the llama block plus these differences. */
struct arch_info {
    const char *name;
    enum wgllm_arch arch;
    enum wgllm_rope_type rope;
    bool has_qkv_bias, has_qk_norm;
    /* the gemma block: embeddings x sqrt(n_embd), queries scaled by 1/sqrt(head
     * dim) instead of the scores, post-attention/post-FFN RMSNorms, GeGLU */
    bool gemma;
    bool output_always_tied;  /* gemma2: token_embd is the output, output.weight is not read */
    int swa_period;           /* default attention.sliding_window_pattern (0: no SWA) */
    int swa_window;           /* default attention.sliding_window; 0: SWA only when the key is there and > 0 */
    float attn_softcap;       /* default attn_logit_softcapping; 0: never soft-capped (the key is not read) */
    float final_softcap;      /* default final_logit_softcapping (0: none unless the key says) */
    bool swa_rope_is_global;  /* local layers rotate like the global ones unless rope.freq_base_swa
                                 (gemma2); else with base 10000, scale 1 (gemma3) */
    int big_n_layer;          /* the 27B model's block count: its query scale is 1/sqrt(n_embd/n_head) */
    /* phi3 (src/models/phi3.cpp): attn_qkv.weight may hold q, k and v (rows in
     * that order) instead of three tensors; ffn_up.weight holds the gate's rows
     * then the up projection's (2 n_ff rows, ggml_swiglu of one tensor); the
     * queries are scaled by 1/sqrt(head_dim) and the scores by 1 */
    bool fused_qkv, fused_gate_up, q_scaled;
    bool longrope; /* rope_factors_long/short.weight (phi3) */
    /* granite (src/models/granite.cpp): the four scales of read_granite_hparams */
    bool granite;
    /* olmo2 (src/models/olmo2.cpp): no pre-norms, post-attention/post-FFN norms,
     * q/k norms over the whole projection, output.weight required */
    bool olmo2;
    int no_rope_step; /* smollm3: every such many-th layer has no RoPE (llama.cpp's n_no_rope_layer_step) */
    /* mistral3 (src/models/mistral3.cpp): reads YaRN's betas and log multiplier
     * and Llama 4's attention temperature */
    bool mistral3;
    /* experts: MOE_OPTIONAL (llama, mistral: Mixtral when expert_count > 1,
     * renormalized), required and renormalized (qwen3moe), required and not
     * (olmoe) */
    enum { MOE_NONE, MOE_OPTIONAL, MOE_NORM, MOE_PLAIN, MOE_SOFTMAX_WEIGHT } moe;
    bool moe_ff_key; /* expert_feed_forward_length, default n_ff / used (qwen*moe); else the experts' FFN is n_ff */
    /* a shared expert: SHEXP_OPTIONAL when expert_shared_feed_forward_length > 0
     * (granitemoe), SHEXP_GATED always, of that length or n_ff, with its sigmoid gate (qwen2moe) */
    enum { SHEXP_NONE, SHEXP_OPTIONAL, SHEXP_GATED } shexp;
    bool qk_norm_whole; /* olmoe: q/k norms over the whole projection with the llama block's pre-norms */
    bool encoder;     /* bert (src/models/bert.cpp): a block of its own, bound by bind_bert */
    /* gpt-oss (src/models/openai-moe.cpp): attention sinks, an attention
     * output bias, post_attention_norm as the FFN's pre-norm, experts with
     * biases (MOE_SOFTMAX_WEIGHT, SwiGLU-OAI), a required sliding window */
    bool gptoss;
};

/* The architecture named `name`, NULL when wgllm does not know it; then
 * wgllm_arch_list writes the names it knows, comma-separated. */
const struct arch_info *wgllm_arch_find(const char *name);
void wgllm_arch_list(char *buf, size_t cap);
/* Reads and checks every hyper-parameter of m's `<arch>.*` keys into m->hp. */
enum wgllm_status wgllm_model_read_hparams(struct wgllm_model *m, const struct arch_info *ai,
                                          struct wgllm_error *err);
/* Layer il is a local (sliding-window) layer. */
bool wgllm_model_layer_is_swa(const struct wgllm_hparams *hp, int il);

#endif
