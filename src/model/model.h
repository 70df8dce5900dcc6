/*
 * model.h - architectures: reads a GGUF's hyper-parameters and binds its
 * tensors to the slots of a decoder layer (llama, mistral, qwen2, qwen3, ...).
 * The forward pass itself belongs to a backend (backend/cpu).
 */
#ifndef WGLLM_MODEL_H
#define WGLLM_MODEL_H

#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

struct wgllm_repacked;

enum wgllm_arch {
    WGLLM_ARCH_LLAMA, /* also Mistral, TinyLlama, SmolLM, Llama 2/3 */
    WGLLM_ARCH_QWEN2, /* q/k/v biases, neox RoPE */
    WGLLM_ARCH_QWEN3, /* per-head q/k RMSNorm, neox RoPE */
    WGLLM_ARCH_GEMMA2, /* post-norms, GeGLU, soft-capping, sliding window every other layer */
    WGLLM_ARCH_GEMMA3, /* gemma2's block with q/k norms, 5 local layers per global one */
    WGLLM_ARCH_PHI3,   /* fused q/k/v and gate/up matrices, queries scaled, neox RoPE */
    WGLLM_ARCH_GRANITE, /* the llama block with embedding, residual, attention and logit scales */
    WGLLM_ARCH_OLMO2,   /* post-norms only, q/k RMSNorm over the whole projection, neox RoPE */
    WGLLM_ARCH_SMOLLM3, /* the llama block without RoPE on every 4th layer */
    WGLLM_ARCH_MISTRAL3, /* the llama block with YaRN's keys and Llama 4's attention temperature (Ministral 3) */
    WGLLM_ARCH_QWEN3MOE, /* qwen3's block with a mixture-of-experts FFN */
    WGLLM_ARCH_OLMOE,    /* the llama block, q/k RMSNorm over the whole projection, experts without renormalization */
    WGLLM_ARCH_QWEN2MOE, /* qwen2's block with experts and a sigmoid-gated shared expert (Qwen1.5-MoE, Qwen2-57B-A14B) */
    WGLLM_ARCH_GRANITEMOE, /* granite's block with experts, and a shared expert where the file has one */
    WGLLM_ARCH_BERT,    /* an encoder (BGE, arctic-embed): learned positions, post-LayerNorms, GELU,
                           attention over the whole input; embeddings only (backend/cpu/encoder.c) */
    WGLLM_ARCH_NOMIC_BERT, /* bert's encoder with neox RoPE instead of learned positions and SwiGLU (nomic-embed) */
    WGLLM_ARCH_GPTOSS,  /* gpt-oss: q/k/v/output biases, attention sinks, sliding window every other layer,
                           experts with biases, softmax over the chosen logits, SwiGLU-OAI */
};

/* The feed-forward's gate activation: act(gate) * up. */
enum wgllm_ffn_act {
    WGLLM_FFN_SILU, /* SwiGLU (llama, qwen) */
    WGLLM_FFN_GELU, /* GeGLU with the tanh approximation, through ggml's f16 table (gemma) */
    /* gpt-oss's experts (ggml_swiglu_oai, alpha 1.702, limit 7): g = min(gate, limit),
     * u = clamp(up, -limit, limit), g * sigmoid(alpha g) * (u + 1) */
    WGLLM_FFN_SWIGLU_OAI,
};

enum wgllm_rope_type {
    WGLLM_ROPE_NORM, /* rotate adjacent pairs (x0,x1),(x2,x3)... */
    WGLLM_ROPE_NEOX, /* rotate halves (x_i, x_{i+n/2}) */
};

struct wgllm_hparams {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim_k;   /* attention.key_length, default n_embd / n_head */
    int head_dim_v;   /* attention.value_length */
    int n_ff;
    int n_rot;        /* rope.dimension_count, default head_dim_k */
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale; /* 1 / rope.scaling.factor for linear scaling */
    enum wgllm_rope_type rope_type;
    /* What the forward pass does beyond the llama block; the defaults
     * (1, 0, SILU) are the llama block. The architecture sets them at load
     * (model.c), the backends only read them. */
    float embd_scale;      /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
    float q_scale;         /* each query is multiplied by this before q.K (gemma's attention scale) */
    float kq_scale;        /* each score q.K is multiplied by this before the softmax (1/sqrt(head_dim_k)) */
    float attn_softcap;    /* > 0: scores become cap * tanh(score / cap) before kq_scale (gemma2) */
    float final_softcap;   /* > 0: the same on the logits */
    enum wgllm_ffn_act ffn_act;
    bool post_norms;       /* layers have post_attn_norm and post_ffn_norm (gemma) */
    /* Sliding-window attention: a layer with `swa` set sees only the n_swa
     * most recent positions (the query's own included), and rotates with
     * the local RoPE base and scale below. */
    int n_swa;             /* attention.sliding_window; 0: no sliding-window layers */
    int swa_period;        /* attention.sliding_window_pattern: of each such many layers, all but the last are local */
    float rope_freq_base_swa, rope_freq_scale_swa;
    /* LongRoPE (phi3): cos and sin are multiplied by this (rope.scaling.attn_factor,
     * which llama.cpp applies to every architecture); the frequency factors are
     * wgllm_model.rope_factors_short up to n_ctx_orig positions per sequence,
     * rope_factors_long beyond */
    float rope_attn_factor;
    int n_ctx_orig;        /* rope.scaling.original_context_length, default n_ctx_train */
    /* YaRN (rope.scaling.type yarn, any architecture, as llama.cpp's context
     * applies it): each pair's angle blends the interpolated (scaled) and the
     * extrapolated (unscaled) one by a ramp over the pairs that
     * yarn_beta_fast/slow bound (at n_ctx_orig), and cos/sin gain YaRN's
     * magnitude 1 + 0.1 ln(1 / freq_scale) of the table's own scale. */
    float yarn_ext_factor;  /* the blend's weight: 1 for YaRN, 0 (no blend) otherwise */
    float yarn_beta_fast, yarn_beta_slow;
    /* what cos and sin are multiplied by before YaRN's magnitude: llama.cpp's
     * cparams.yarn_attn_factor (rope_attn_factor, with YaRN also corrected by
     * rope.scaling.yarn_log_multiplier); == rope_attn_factor without YaRN */
    float yarn_attn_factor;
    /* Llama 4's attention temperature (mistral3): the queries at position p are
     * multiplied by 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1);
     * 0: off */
    float attn_temp_scale;
    int attn_temp_floor;
    /* Mixture of experts (expert_count > 0: qwen3moe, olmoe, llama/mistral
     * with experts as Mixtral): each layer's FFN is n_expert SwiGLU FFNs of
     * n_ff_exp; a router (ffn_gate_inp) softmaxes its logits over them, the
     * n_expert_used most probable run, and their outputs are summed weighted
     * by those probabilities, renormalized to sum 1 when moe_norm_w. */
    int n_expert, n_expert_used, n_ff_exp;
    bool moe_norm_w;
    /* gpt-oss (llama.cpp's SOFTMAX_WEIGHT gating): the router's logits (plus
     * its bias) are not softmaxed; the n_expert_used largest are chosen and
     * their weights are the softmax of just those */
    bool moe_softmax_weight;
    /* > 0: a shared expert of this FFN length runs on every token beside the
     * routed ones and is added to their sum, multiplied by
     * sigmoid(sh_gate_inp . x) where the layer has that gate (qwen2moe) */
    int n_ff_shexp;
    /* granite, olmo2, smollm3 (the defaults 1, 1, true, false, 0 are the llama block) */
    float residual_scale;  /* each block's attention and FFN outputs are multiplied by this before the add */
    float logit_scale;     /* the logits are multiplied by this (granite: 1 / granite.logit_scale) */
    bool pre_norms;        /* layers have attn_norm and ffn_norm before attention and FFN (all but olmo2) */
    bool qk_norm_whole;    /* q_norm/k_norm span the whole projection (n_head x head_dim, olmo2), not a head */
    int no_rope_step;      /* > 0: layer il has no RoPE when (il + 1) % no_rope_step == 0 (smollm3: 4;
                              1: no layer rotates, granite without rope.scaling.finetuned) */
    /* bert: none of the decoder fields above apply to its block except the
     * head geometry and kq_scale; it is computed by the CPU encoder only */
    bool encoder;          /* no causal mask, no KV cache, no output layer: embeddings only */
    float norm_eps;        /* attention.layer_norm_epsilon: its LayerNorms' epsilon */
    int n_token_types;     /* tokenizer.ggml.token_type_count */
};

/* A 2-D view of a weight in its GGUF layout: ne1 rows of ne0 elements. */
struct wgllm_weight {
    uint32_t type;
    int64_t ne0, ne1;
    size_t row_size; /* bytes per row */
    const void *data;
    char name[64];    /* the tensor's name, for messages (GGUF names are < 64 bytes) */
    const struct wgllm_gguf_tensor *tensor; /* where its bytes are in the file (data may be NULL: streamed) */
    int n_expert; /* > 0: a stack of experts (ffn_*_exps, 3-D in the file): expert e is rows
                     [e * ne1 / n_expert, (e + 1) * ne1 / n_expert) */
    uint64_t offset; /* where in `tensor` its rows start: a block of rows of a fused matrix
                        (phi3's attn_qkv, ffn_up) is a weight of its own; 0 otherwise */
    /* The same matrix in the row-interleaved layout of quant/repack.h when this
     * CPU has a kernel for it (see wgllm_repack_supported) and a CPU context was created (the
     * CPU backend's init makes it), else NULL; owned by the
     * model. Set under cpu_mu before any CPU context reads it. */
    struct wgllm_repacked *rp;
    /* The file's rows copied into anonymous memory on huge pages when this CPU
     * has no repacked kernel for them (backend/cpu/matmul.c says when), else
     * NULL; owned by the model, set like rp. The CPU reads them from here:
     * a decode streams every matrix, and 4 KiB pages cost it 5-20% (bench/RESULTS.md). */
    void *copy;
    /* copy holds the rows in quant/gemm.h's panel layout (F16 where this CPU
     * has its panel kernel), not as rows; data keeps the file's rows. */
    bool copy_panels;
};

/* Vectors (norm weights, biases) are converted to f32 at load, whatever
 * their type in the file; NULL when the architecture has none. */
struct wgllm_layer {
    /* on a mixture-of-experts layer w_gate, w_up and w_down are the experts'
     * stacks (wgllm_weight.n_expert) and gate_inp the router (n_expert rows);
     * gate_inp.ne1 is 0 otherwise */
    struct wgllm_weight wq, wk, wv, wo, w_gate, w_up, w_down, gate_inp;
    struct wgllm_weight sh_gate, sh_up, sh_down, sh_gate_inp; /* the shared expert (ne1 0: none) */
    float *attn_norm, *ffn_norm; /* NULL without pre-norms (olmo2) */
    float *bq, *bk, *bv;     /* qwen2 */
    float *q_norm, *k_norm;  /* qwen3, gemma3: per-head, head_dim_k floats; olmo2: the whole
                                q (n_head x head_dim_k) and k (n_head_kv x head_dim_k) projection */
    float *post_attn_norm, *post_ffn_norm; /* gemma: RMSNorm weights of the attention and FFN outputs */
    bool swa;                /* a sliding-window (local) layer: see wgllm_hparams.n_swa */
    bool rope;               /* its queries and keys are rotated (see wgllm_hparams.no_rope_step) */
    /* bert: the biases of the other projections (NULL when the file has
     * none) and the LayerNorms after attention and after the FFN */
    float *bo, *b_up, *b_down;
    float *attn_out_norm, *attn_out_norm_b, *layer_out_norm, *layer_out_norm_b;
    /* gpt-oss: per head one more logit in the softmax's denominator (n_head
     * floats; it carries no value), and the biases of the router (n_expert)
     * and of each expert's gate and up (n_ff_exp per expert) and down
     * (n_embd per expert) projections; bo is the attention output's bias */
    float *attn_sinks;
    float *b_gate_inp, *b_gate_exps, *b_up_exps, *b_down_exps;
};

struct wgllm_model {
    struct wgllm_gguf *gguf;
    struct wgllm_vocab *vocab;
    enum wgllm_arch arch;
    char arch_name[32];
    char name[128];
    struct wgllm_hparams hp;
    struct wgllm_weight tok_embd, output; /* output == tok_embd when tied */
    float *output_norm;
    float *rope_freqs; /* Llama 3 frequency factors, n_rot/2 floats; NULL when absent */
    float *rope_factors_short, *rope_factors_long; /* phi3's LongRoPE factors (n_rot/2); NULL when absent */
    struct wgllm_layer *layers;
    /* bert: learned positions [n_ctx_train rows], token types (row 0 is
     * added; tensor NULL when absent), the LayerNorm of the embeddings */
    struct wgllm_weight pos_embd, type_embd;
    float *embd_norm, *embd_norm_b;
    float *vectors;    /* one allocation holding every f32 vector above */
    uint64_t weight_bytes;
    int n_threads;
    bool vocab_only; /* a tokenizer-only GGUF: tokenize works, decode does not */
    /* The CPU's weight layouts are made when the first CPU context of the
     * model is created, not at load, so that a WebGPU-only run neither pays
     * for nor keeps them; contexts on several threads may share the model,
     * hence the mutex. */
    pthread_mutex_t cpu_mu;
    bool cpu_weights_ready;  /* under cpu_mu: the repack ran (or was not wanted) */
    uint64_t repacked_bytes; /* under cpu_mu: memory of the repacked copies */
    /* wgllm_model_fingerprint, computed at its first use (0: not yet): for a
     * streamed model its samples are reads through the source (in a browser,
     * hundreds of async file reads or range requests), so a load that never
     * saves or restores KV state must not pay for them, and later uses
     * must not pay again. Two threads racing compute the same value. */
    _Atomic uint64_t fingerprint;
};

/* Reads hparams and binds tensors, checking every shape and type; the model
 * takes ownership of g (also on failure, where g is freed). */
enum wgllm_status wgllm_model_init_from_gguf(struct wgllm_gguf *g, struct wgllm_model *m,
                                             struct wgllm_error *err);
const char *wgllm_arch_name(enum wgllm_arch arch);
/* True when some layer is a sliding-window layer whose RoPE differs from the
 * global one, so that a backend needs a second RoPE table for them. */
bool wgllm_model_has_swa_rope(const struct wgllm_model *m);
/* The per-pair RoPE frequency factors a context of n_ctx positions per
 * sequence rotates with (llama.cpp's get_rope_factors): rope_freqs when the
 * file has it, else LongRoPE's long factors past n_ctx_orig and its short
 * ones up to it; NULL for none. */
const float *wgllm_model_rope_factors(const struct wgllm_model *m, int n_ctx);
/* The attention temperature of the queries at position pos (hparams'
 * attn_temp_scale; 1 when off), computed in double as llama.cpp computes
 * its input, so every backend multiplies by the same float. */
float wgllm_hparams_attn_temp(const struct wgllm_hparams *hp, int32_t pos);
/* What of the model's block goes beyond the llama block (post-norms, GeGLU,
 * soft-capping, sliding window, scaled embeddings/queries, gpt-oss's sinks,
 * biases and SwiGLU-OAI experts), as a comma-separated list into buf (""
 * for a llama-block model); returns whether there is any. For a backend
 * that computes only the llama block, and for `wgllm info`. */
bool wgllm_model_extra_features(const struct wgllm_model *m, char *buf, size_t cap);

/* wgllm_model_load_source: wgllm.h. */
/* True when the weights are not in memory (wgllm_model_params.stream_weights,
 * wgllm_model_load_source): matrices' `data` is NULL, read them with
 * wgllm_weight_read. Vectors are in memory either way. */
static inline bool wgllm_model_streamed(const struct wgllm_model *m) { return m->gguf && !wgllm_gguf_mapped(m->gguf); }
/* Every matrix the forward pass multiplies with, once (output may be
 * token_embd), at most cap of them; returns how many. */
int wgllm_model_matrices(struct wgllm_model *m, struct wgllm_weight **out, int cap);
/* Tells the kernel that this process is done with w's mapped pages for now
 * (the CPU backend repacked them), so they leave the resident memory; they
 * stay in the page cache and fault back in when read again. Not for
 * token_embd, whose rows the CPU still reads. */
void wgllm_model_release_pages(const struct wgllm_model *m, const struct wgllm_weight *w);
/* Memory of the CPU's repacked copies: 0 until a CPU context made them. */
uint64_t wgllm_model_repacked_bytes(struct wgllm_model *m);
/* Copies bytes [offset, offset + n) of w's data (mapped or streamed) into dst. */
enum wgllm_status wgllm_weight_read(const struct wgllm_model *m, const struct wgllm_weight *w, uint64_t offset,
                                    void *dst, size_t n, struct wgllm_error *err);

#endif
